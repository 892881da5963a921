"""The replicated records of the cancellation protocol (docs/design.md §5) and their snapshot.

Rules kept here:
- Primary records are plain ``__slots__`` dataclasses; the timers and each scope's pending set are
  derived and rebuilt by :meth:`CancelBook.from_plain`, so a snapshot holds each fact once.
- Every collection is written sorted (ids, then numbers), never in hash order. Timers hand out due
  executions in (logical ms, execution id) order, so a replica that restored a snapshot handles
  them in the same order as one that never did.
- No logic lives here beyond bookkeeping; :mod:`waitgraph.statemachine.cancel` decides what happens.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from .enums import EffectOutcome

DEFAULT_CANCEL_SLO_MS = 30_000
"""An execution that has not acknowledged a cancel this long after it was first asked is quarantined."""
DEFAULT_REEMIT_INTERVAL_MS = 1_000
"""The re-emission pass asks an unacknowledged execution again at most this often."""

_OUTCOME = {m.value: m for m in EffectOutcome}


@dataclass(slots=True)
class CancelRequest:
    """One execution asked to stop and not yet settled (absent once it is)."""

    execution_id: str
    run_id: str
    generation: int
    """The attempt asked to stop."""
    cancel_generation: int
    """The run's cancel generation the request carries; an ack must name it."""
    reason: str
    requested_at_ms: int
    """First request; kept across re-requests, so the SLO and the propagation time count from it."""
    emitted_at_ms: int
    emissions: int
    """Emissions at this cancel generation (1 = the first request)."""
    scopes: tuple[str, ...]
    """Cancellation scopes waiting for this execution, in the order they were opened."""
    acked: EffectOutcome | None = None
    """A quarantined execution's late ack: recorded, but its resources stay isolated until released."""
    quarantined_at_ms: int | None = None


@dataclass(slots=True)
class CancelScope:
    """One cancellation: a whole run (``run:<run_id>``) or a victim's subtree (``exec:<id>@<gen>``)."""

    scope_id: str
    run_id: str
    root_id: str
    root_generation: int
    cause: str
    reason: str
    cancel_generation: int
    requested_at_ms: int
    stable_at_ms: int | None = None
    pending: set[str] = field(default_factory=set)
    """Derived: executions of the scope with an open :class:`CancelRequest`."""


@dataclass(slots=True)
class Claim:
    """A task claim: ``agent_id`` runs the execution's current attempt until ``expires_at_ms``."""

    agent_id: str
    generation: int
    lease_ms: int
    expires_at_ms: int
    claimed_at_ms: int


@dataclass(slots=True)
class ToolCall:
    """A tool call accepted under the fence whose outcome is not in the ledger yet."""

    generation: int
    compensatable: bool
    accepted_at_ms: int


@dataclass(slots=True)
class Compensation:
    """A compensation queued for a committed compensatable write; queued once per write."""

    execution_id: str
    effect_id: str
    generation: int
    """The attempt that made the write."""
    version: int
    queued_at_ms: int


@dataclass(slots=True)
class Reconciliation:
    """A human reconciliation item: an execution whose side effects are UNKNOWN."""

    execution_id: str
    generation: int
    run_id: str
    cause: str
    opened_at_ms: int
    effect_ids: list[str]


class Timers:
    """Execution ids by logical ms, derived from the requests (re-emission and SLO deadlines).

    ``add`` is a list append (CancelRun adds thousands at one ms); a bucket is sorted when it comes
    due, so due ids come out in (ms, id) order whatever order they were added in. An entry may be
    stale (its request settled or moved on): the reader checks it against the request, so a live
    replica and a restored one (which has no stale entries) act on exactly the same ids.
    """

    __slots__ = ("buckets", "times")

    def __init__(self) -> None:
        self.buckets: dict[int, list[str]] = {}
        self.times: list[int] = []
        """heap of the keys of ``buckets``."""

    def at(self, at_ms: int) -> list[str]:
        bucket = self.buckets.get(at_ms)
        if bucket is None:
            bucket = self.buckets[at_ms] = []
            heapq.heappush(self.times, at_ms)
        return bucket

    def add(self, at_ms: int, execution_id: str) -> None:
        self.at(at_ms).append(execution_id)

    def first_due(self, cutoff_ms: int) -> tuple[int, list[str]] | None:
        """The earliest bucket at or before ``cutoff_ms``, sorted; empty buckets are dropped."""
        while self.times and self.times[0] <= cutoff_ms:
            at_ms = self.times[0]
            bucket = self.buckets[at_ms]
            if bucket:
                bucket.sort()
                return at_ms, bucket
            heapq.heappop(self.times)
            del self.buckets[at_ms]
        return None


class CancelBook:
    """Everything the cancellation protocol keeps in the replicated state (``State.cancel``)."""

    def __init__(self) -> None:
        self.slo_ms = DEFAULT_CANCEL_SLO_MS
        self.reemit_interval_ms = DEFAULT_REEMIT_INTERVAL_MS
        self.cluster_frozen: str | None = None
        """Reason the whole cluster's admission is frozen, or None."""
        self.frozen_runs: dict[str, str] = {}
        """run id -> reason its admission is frozen."""
        self.requests: dict[str, CancelRequest] = {}
        self.scopes: dict[str, CancelScope] = {}
        self.claims: dict[str, Claim] = {}
        self.tool_calls: dict[str, dict[str, ToolCall]] = {}
        self.compensations: dict[tuple[str, str], Compensation] = {}
        self.reconciliations: dict[str, Reconciliation] = {}
        # -- derived, rebuilt by _reindex() --
        self.reemit_due = Timers()
        """Requests by their latest emission (``emitted_at_ms``)."""
        self.slo_due = Timers()
        """Requests not quarantined yet, by their first request (``requested_at_ms``)."""

    # -- snapshot ------------------------------------------------------------------------------

    def to_plain(self) -> dict[str, Any]:
        return {
            "claims": [
                [e, c.agent_id, c.generation, c.lease_ms, c.expires_at_ms, c.claimed_at_ms]
                for e, c in sorted(self.claims.items())
            ],
            "cluster_frozen": self.cluster_frozen,
            "compensations": [
                [c.execution_id, c.effect_id, c.generation, c.version, c.queued_at_ms]
                for _, c in sorted(self.compensations.items())
            ],
            "config": [self.slo_ms, self.reemit_interval_ms],
            "frozen_runs": sorted(self.frozen_runs.items()),
            "reconciliations": [
                [r.execution_id, r.generation, r.run_id, r.cause, r.opened_at_ms, r.effect_ids]
                for _, r in sorted(self.reconciliations.items())
            ],
            "requests": [
                [
                    r.execution_id,
                    r.run_id,
                    r.generation,
                    r.cancel_generation,
                    r.reason,
                    r.requested_at_ms,
                    r.emitted_at_ms,
                    r.emissions,
                    r.scopes,
                    r.acked,
                    r.quarantined_at_ms,
                ]
                for _, r in sorted(self.requests.items())
            ],
            "scopes": [
                [
                    s.scope_id,
                    s.run_id,
                    s.root_id,
                    s.root_generation,
                    s.cause,
                    s.reason,
                    s.cancel_generation,
                    s.requested_at_ms,
                    s.stable_at_ms,
                ]
                for _, s in sorted(self.scopes.items())
            ],
            "tool_calls": [
                [e, [[k, t.generation, t.compensatable, t.accepted_at_ms] for k, t in sorted(calls.items())]]
                for e, calls in sorted(self.tool_calls.items())
            ],
        }

    @classmethod
    def from_plain(cls, raw: dict[str, Any]) -> CancelBook:
        """Rebuild from :meth:`to_plain`; malformed input raises ValueError, TypeError or KeyError."""
        book = cls()
        book.slo_ms, book.reemit_interval_ms = raw["config"]
        book.cluster_frozen = raw["cluster_frozen"]
        book.frozen_runs = {run: reason for run, reason in raw["frozen_runs"]}
        for e, agent, gen, lease, expires, at in raw["claims"]:
            book.claims[e] = Claim(agent, gen, lease, expires, at)
        for e, effect, gen, version, at in raw["compensations"]:
            book.compensations[(e, effect)] = Compensation(e, effect, gen, version, at)
        for e, gen, run, cause, at, effects in raw["reconciliations"]:
            book.reconciliations[e] = Reconciliation(e, gen, run, cause, at, list(effects))
        for e, run, gen, cgen, reason, req_at, em_at, n, scopes, acked, q_at in raw["requests"]:
            book.requests[e] = CancelRequest(
                e,
                run,
                gen,
                cgen,
                reason,
                req_at,
                em_at,
                n,
                tuple(scopes),
                None if acked is None else _OUTCOME[acked],
                q_at,
            )
        for sid, run, root, rgen, cause, reason, cgen, at, stable in raw["scopes"]:
            book.scopes[sid] = CancelScope(sid, run, root, rgen, cause, reason, cgen, at, stable)
        for e, calls in raw["tool_calls"]:
            book.tool_calls[e] = {k: ToolCall(gen, comp, at) for k, gen, comp, at in calls}
        book._reindex()
        return book

    def _reindex(self) -> None:
        for scope in self.scopes.values():
            scope.pending = set()
        self.reemit_due = Timers()
        self.slo_due = Timers()
        for eid in sorted(self.requests):
            req = self.requests[eid]
            for sid in req.scopes:
                self.scopes[sid].pending.add(eid)
            self.reemit_due.add(req.emitted_at_ms, eid)
            if req.quarantined_at_ms is None:
                self.slo_due.add(req.requested_at_ms, eid)
