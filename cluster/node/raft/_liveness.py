"""Keepalive and elections: the deadlines pysyncobj keeps, and what must not make a healthy leader lose.

**Idle connections** (:meth:`WaitgraphSyncObj._keep_connections_alive`). pysyncobj closes a
connection when it *sends* on one it has read nothing from for ``connectionTimeout``, and the
message is lost. Followers never talk to each other, so after a quiet spell the first message
between them was the first ``request_vote`` of an election: lost, the connection closed, and the
other follower timed out and asked in the same way, so both stood in the same term until the
connection was back. Failover took another election timeout: 1.4-1.5 s instead of 0.5-1.0 s on
the first kill of every ``scripts/bench cluster`` run. Every member now sends :data:`KEEPALIVE` to
every peer every quarter of ``connectionTimeout``; pysyncobj has no handler for its type, so
receiving it only refreshes the connection (it does not count as the follower's answer to the
leader, nor as a heartbeat to a follower).

**Elections** (:meth:`WaitgraphSyncObj._read_before_standing`, :func:`raft_clock`). pysyncobj
checks a follower's election deadline at the start of a tick and reads its sockets at the end,
and an idle tick comes every 50 ms. When the first follower stands, its vote request wakes the
other; if that one's deadline passed since its last tick, it stands too, in the same term, before
it reads the request: a split vote, and one more election timeout (1.6-1.9 s failovers in 2 of 8
kills of a `scripts/bench cluster` run). So a node whose deadline has passed reads what is waiting
first; a vote it grants restarts its deadline, and it does not stand. Every deadline this module
writes into pysyncobj is in :func:`raft_clock`, pysyncobj's own clock.

A tick (work and poll) that takes longer than :data:`TICK_STALL_S` is logged and counted
(``tick_stalls``): heartbeats went missing meanwhile.

pysyncobj names: overridden none; read and written: ``_SyncObj__raftElectionDeadline`` (restarted after a
long pause, :meth:`LivenessMixin._restart_election_timer`), ``_SyncObj__generateRaftTimeout``; read:
``_SyncObj__selfNode``, ``_SyncObj__connectedToAnyone``, ``_SyncObj__transport``, ``_SyncObj__otherNodes``,
``_SyncObj__lastResponseTime``, ``_isLeader``, ``_poller``, ``pysyncobj.syncobj.monotonicTime`` (the clock
of every deadline, :func:`raft_clock`). Checklist: ``_pysyncobj.py``.
"""

from __future__ import annotations

import logging
from typing import Any

from waitgraph.node.raft._pysyncobj import SyncObj, pysyncobj_syncobj

logger = logging.getLogger("waitgraph.node.raft")

TICK_STALL_S = 0.3
"""A tick (work and poll) longer than this is logged (``tick_stalls``): heartbeats went missing."""


def raft_clock() -> float:
    """The clock of every deadline pysyncobj keeps (``pysyncobj.syncobj.monotonicTime``, looked up
    at each call). On Linux it is CLOCK_MONOTONIC_RAW, not ``time.monotonic``: the two were 0.25 s
    apart on the benchmark machine, and the gap moves with every NTP adjustment, so a deadline
    written in one and compared in the other is off by it."""
    return float(pysyncobj_syncobj.monotonicTime())


def answered_within(obj: Any, window_s: float) -> set[Any]:
    """The peers whose last answer reached this leader less than ``window_s`` ago (pysyncobj's
    ``__lastResponseTime``, kept in :func:`raft_clock`). Any thread: the times are copied first
    (a copy racing the tick thread raises RuntimeError; the caller tries again)."""
    horizon = raft_clock() - window_s
    return {node for node, at in obj._SyncObj__lastResponseTime.copy().items() if at > horizon}


KEEPALIVE: dict[str, str] = {"type": "waitgraph_keepalive"}
"""What a member sends every peer every quarter of the connection timeout (module docstring, "Idle
connections"); pysyncobj ignores a message type it has no handler for."""


class LivenessMixin(SyncObj):  # type: ignore[misc]
    """Keepalive, elections and tick stalls of :class:`~waitgraph.node.raft._syncobj.WaitgraphSyncObj`."""

    _keepalive_every_s: float
    _keepalive_at: float
    _tick_started_at: float
    _tick_flush_s: float
    _tick_apply_s: float
    _tick_lock_wait_s: float
    counters: dict[str, int]

    def _note_tick(self, started: float) -> None:
        """The gap since the previous tick started (``started``, ``time.monotonic``): counted, and logged
        past :data:`TICK_STALL_S`."""
        gap = started - self._tick_started_at  # one tick's work plus its poll (<= timeToWait)
        if gap > TICK_STALL_S and self._tick_started_at:
            # The previous tick took that long (a synchronous dump, the GIL held elsewhere, the
            # machine out of CPU): long enough to cost heartbeats, so say so.
            self.counters["tick_stalls"] += 1
            # What the tick spent flushing the journal and applying entries says where to look;
            # the rest is the poll, pysyncobj's own work, and waiting for the GIL or a core.
            logger.warning(
                "the Raft thread took %.0f ms for one tick (journal flush %.0f ms, apply %.0f ms of which "
                "%.0f ms waiting for the machine lock)",
                gap * 1000,
                self._tick_flush_s * 1000,
                self._tick_apply_s * 1000,
                self._tick_lock_wait_s * 1000,
            )
        self.counters["tick_gap_ms_max"] = max(self.counters["tick_gap_ms_max"], int(gap * 1000))
        self._tick_started_at = started
        self._tick_flush_s = self._tick_apply_s = self._tick_lock_wait_s = 0.0

    def _restart_election_timer(self) -> None:
        """After a long pause of the tick thread (a dump written or loaded), as if a heartbeat had
        just arrived (see :meth:`_after_dump`); a leader keeps its role."""
        if not self._isLeader():
            self._SyncObj__raftElectionDeadline = raft_clock() + self._SyncObj__generateRaftTimeout()
            self.counters["election_deadline_resets"] += 1

    def _read_before_standing(self) -> None:
        """A follower or candidate whose election deadline has passed first reads what is waiting
        on its connections (module docstring, "Elections"): pysyncobj checks the deadline at the
        start of a tick and reads at its end, so a vote request that woke this tick would
        otherwise find this node already standing in the same term."""
        if self._isLeader() or self._SyncObj__selfNode is None:
            return
        if self._SyncObj__raftElectionDeadline >= raft_clock() or not self._SyncObj__connectedToAnyone():
            return  # not due, or pysyncobj will not stand anyway (connected to no one)
        self.counters["reads_before_standing"] += 1
        self._poller.poll(0)

    def _keep_connections_alive(self, now: float) -> None:
        """:data:`KEEPALIVE` to every peer, every quarter of the connection timeout (module
        docstring, "Idle connections"); a peer not connected is skipped (pysyncobj reconnects)."""
        if now - self._keepalive_at < self._keepalive_every_s:
            return
        self._keepalive_at = now
        transport = self._SyncObj__transport
        for node in self._SyncObj__otherNodes:
            transport.send(node, KEEPALIVE)
