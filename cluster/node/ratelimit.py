"""Per-principal request rate limit: one token bucket per bearer token, in the gRPC layer.

Rules kept here:
- Every RPC of both services costs one token of its caller's bucket (a ``WriteBatch`` costs one
  per item, of the item's own token, and none for the call itself) (``rate_per_s`` tokens come
  back per second, at most ``burst`` are kept). An empty bucket is RESOURCE_EXHAUSTED with the
  stable code ``rate_limited`` and the time until the next token, before the request is converted
  or proposed: nothing reaches the log. One flooding agent is held to its own rate; the others'
  buckets are untouched, so they keep being served.
- It lives here and not in ``statemachine/``: it reads the clock, and it is per node. A client
  spreading calls over the nodes gets up to one bucket's rate at each of them; the per-agent
  limits that must hold cluster-wide (open waits per execution, sessions, executions...) are the
  core's, replicated.
- Buckets are keyed by the token's name (cluster/node/auth.py), so their number is bounded by the token
  file. The limiter runs on the event loop's thread only (grpc.aio handlers): no lock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from waitgraph.statemachine.errors import Status, WaitgraphError


class RateLimited(WaitgraphError):
    """The caller spent its request budget; nothing was done. Retry after ``retry_after_ms``."""

    status = Status.RESOURCE_EXHAUSTED
    code = "rate_limited"


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at_s: float


class RateLimiter:
    """Token buckets by key. ``rate_per_s <= 0`` turns the limiter off."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self.refused = 0

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0

    def take(self, key: str, who: str | None = None) -> None:
        """Spend one token of ``key``'s bucket, or raise :class:`RateLimited` (nothing spent)."""
        if not self.enabled:
            return
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        else:
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at_s) * self.rate_per_s)
            bucket.at_s = now
        if bucket.tokens >= 1.0 - 1e-9:  # (0.1 s x 10/s is 0.999... in floating point)
            bucket.tokens = max(0.0, bucket.tokens - 1.0)
            return
        self.refused += 1
        wait_ms = max(1, math.ceil((1.0 - bucket.tokens) / self.rate_per_s * 1000))
        raise RateLimited(
            f"{who or key} is over its request rate limit ({self.rate_per_s:g}/s, burst {self.burst}) "
            f"on this node; retry in {wait_ms} ms",
            retry_after_ms=wait_ms,
        )
