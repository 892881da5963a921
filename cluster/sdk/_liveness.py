"""Whether a session can still reach the cluster: CONNECTED -> SUSPENDED -> LOST, by heartbeats.

Rules kept here:
- The session is CONNECTED while its heartbeats succeed. One that fails, or none succeeding for
  two heartbeat intervals (a heartbeat may sit in its retries that long), makes it SUSPENDED:
  nothing is raised, its waits stay registered on the cluster under the session's lease, and a
  heartbeat that succeeds again makes it CONNECTED.
- Once no heartbeat has succeeded for the session timeout (the lease: the time after which the
  cluster, had it been running, would have expired the session), it is LOST, by the local clock
  alone: a process that cannot reach any node knows its session is gone without being told
  (kazoo's SUSPENDED, then LOST). The session then raises :class:`~.errors.SessionLost` in every
  blocked call, saying for how long and which endpoints were tried: ``unreachable`` when a
  heartbeat failed in that time or heartbeats were due and none succeeded, ``expired`` when the
  lease ran out before one was even due (a heartbeat interval longer than the lease, a process
  paused past it): the cluster expires such a session too.
- The cluster telling the session it is gone (expired, replaced: :meth:`Liveness.lost`) makes it
  LOST too. Transitions are a table: a miss (a late heartbeat result after LOST) changes
  nothing; only :meth:`Liveness.rejoined` leaves LOST.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from enum import StrEnum

logger = logging.getLogger("waitgraph.sdk")


class SessionState(StrEnum):
    """What the session knows of its connection to the cluster (``session.state``)."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


_NEXT: dict[tuple[SessionState, str], SessionState] = {
    (SessionState.CONNECTED, "ok"): SessionState.CONNECTED,
    (SessionState.CONNECTED, "failed"): SessionState.SUSPENDED,
    (SessionState.SUSPENDED, "ok"): SessionState.CONNECTED,
    (SessionState.SUSPENDED, "failed"): SessionState.SUSPENDED,
    (SessionState.CONNECTED, "expired"): SessionState.LOST,
    (SessionState.SUSPENDED, "expired"): SessionState.LOST,
    (SessionState.CONNECTED, "lost"): SessionState.LOST,
    (SessionState.SUSPENDED, "lost"): SessionState.LOST,
    (SessionState.LOST, "rejoined"): SessionState.CONNECTED,
    (SessionState.CONNECTED, "rejoined"): SessionState.CONNECTED,
    (SessionState.SUSPENDED, "rejoined"): SessionState.CONNECTED,
}


class Liveness:
    """The connectivity of one session, fed by its heartbeats' results.

    ``on_state(state)`` is called on every change; ``on_lost(silent_s, endpoints, unreachable)``
    once when the session timeout ran out without a successful heartbeat (``unreachable``: one
    failed meanwhile). :meth:`run` is the watchdog (a task
    of the session) that notices it even while a heartbeat call is still blocked in its retries.
    """

    def __init__(
        self,
        timeout_s: float,
        suspend_after_s: float,
        endpoints: Callable[[], list[str]],
        on_lost: Callable[[float, list[str], bool], None],
        on_state: Callable[[SessionState], object] | None = None,
        *,
        joined_at: float,
    ) -> None:
        self.timeout_s = timeout_s
        self.suspend_after_s = suspend_after_s
        self.state = SessionState.CONNECTED
        self._endpoints = endpoints
        self._on_lost = on_lost
        self._on_state = on_state
        self._last_ok = joined_at
        """When the last heartbeat (or the join) that succeeded was sent (the loop's clock)."""
        self._failed_since_ok = False
        """Whether a heartbeat failed since then: the cluster could not be reached."""

    def _step(self, event: str) -> bool:
        nxt = _NEXT.get((self.state, event))
        if nxt is None or nxt is self.state:
            return False
        self.state = nxt
        if self._on_state is not None:
            try:
                self._on_state(nxt)
            except Exception:
                logger.exception("on_state callback (%s)", nxt)
        return True

    def ok(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` (the loop's clock) succeeded. The cluster renewed the
        lease when it applied it, after the send: counting from the send, this process never
        thinks its session lives longer than the cluster does."""
        if self.state is not SessionState.LOST:
            self._last_ok = max(self._last_ok, sent_at)
            self._failed_since_ok = False
        self._step("ok")

    def failed(self) -> None:
        """A heartbeat failed to reach the cluster (nothing answered, no leader, no quorum)."""
        self._failed_since_ok = True
        self._step("failed")

    def lost(self) -> None:
        """The cluster said the session is gone (nothing more to tell: the session raises)."""
        self._step("lost")

    def rejoined(self, joined_at: float) -> None:
        self._last_ok = joined_at
        self._failed_since_ok = False
        self._step("rejoined")

    async def run(self) -> None:
        """Wake when the session would be suspended or lost; say so if nothing succeeded since."""
        loop = asyncio.get_running_loop()
        while self.state is not SessionState.LOST:
            silent_s = loop.time() - self._last_ok
            if silent_s >= self.timeout_s:
                if self._step("expired"):
                    self._on_lost(silent_s, self._endpoints(), self._failed_since_ok)
                return
            if silent_s >= self.suspend_after_s:
                self.failed()  # heartbeats were due and none succeeded: as good as a failure
                await asyncio.sleep(self.timeout_s - silent_s)
            else:
                await asyncio.sleep(min(self.suspend_after_s, self.timeout_s) - silent_s)
