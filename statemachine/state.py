"""The replicated state: records, derived indexes, canonical snapshot and digest.

Rules kept here:
- Primary data lives in plain mutable records with ``__slots__``; every index is derived and is
  rebuilt on restore, so a snapshot holds each fact once.
- The snapshot is canonical msgpack: every collection is written sorted (or, for the idempotency
  table, in log order), never in hash order. Equal states give equal bytes on every replica,
  whatever PYTHONHASHSEED is; the digest is sha256 of those bytes.
- ``restore`` builds a fresh state from the bytes alone and keeps nothing of the previous one.
"""

from __future__ import annotations

import gc
import hashlib
import heapq
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from itertools import chain, compress, islice, repeat
from operator import attrgetter, is_not, itemgetter, not_
from typing import Any, TypeVar

import msgspec

from . import queues as Q
from .cancel_state import CancelBook
from .codec import INT64_MAX, outcome_from_plain, outcome_to_plain, pack
from .enums import SETTLED, CancelMode, EffectOutcome, ExecStatus, SessionStatus
from .errors import CodecError
from .ids import HELD_KINDS, Kind
from .outcome import Outcome
from .recovery_state import RecoveryBook

# Enum lookups by value: calling the enum class costs microseconds per row on restore.
_SESSION_STATUS = {m.value: m for m in SessionStatus}
_EXEC_STATUS = {m.value: m for m in ExecStatus}
_EFFECT_OUTCOME = {m.value: m for m in EffectOutcome}
_CANCEL_MODE = {m.value: m for m in CancelMode}
_KIND = {m.value: m for m in Kind}

SNAPSHOT_FORMAT = "waitgraph-state"
SNAPSHOT_VERSION = 6
"""v3 adds the retirement tombstones (``retired``); v4 adds when each target last changed
(``touched_ms``) and the tombstones of retired targets; v5 adds the independent approvers
(``recovery.approvers``) and each decision's remedies and reassignments; v6 the grant queues
(``queues``) and each decision's reorders. v2 and v3 snapshots still read: their targets count as
touched at the snapshot's ``now_ms``, so they retire one retention after it; before v5 no approver
is configured and decisions list no remedies; before v6 the queues are rebuilt from the open
waits (:func:`queues.rebuild`: by registration time, then waiter id) and decisions list no
reorders. Lease TTLs (``lease_ttls``, and a queue entry's fourth item) are written only when some
holding or queued wait has one, so a state without any snapshots to the bytes it had before."""
READABLE_VERSIONS = frozenset({2, 3, 4, 5, 6})


@dataclass(slots=True)
class Limits:
    """Bounds that keep one tenant or one bug from exhausting a replica."""

    max_edges_per_execution: int = 64
    max_total_edges: int = 2_000_000
    max_executions: int = 2_000_000
    """Executions in the live state; settled ones retire (statemachine/retire.py) and stop counting."""
    max_targets: int = 2_000_000
    max_sessions: int = 100_000
    max_pool_slots: int = 100_000
    max_side_effects_per_execution: int = 256
    max_reason_len: int = 256
    max_lease_ms: int = 86_400_000
    idempotency_capacity: int = 100_000
    max_open_executions_per_agent: int = 10_000
    """Unsettled executions (not COMPLETED, FAILED, CANCELLED or NEEDS_RECONCILIATION) one agent
    may own at once. Settled ones never count: an agent is not held back by its history. 10,000
    is above any real fan-out (the 1M-edge benchmark graph has 7,200 per agent) and 200 such
    agents are needed to fill ``max_executions``."""
    max_open_edges_per_agent: int = 20_000
    """Open wait edges over all of one agent's executions: two per allowed open execution (most
    wait on one or two things) and 1% of ``max_total_edges``, so 100 flooding agents are needed
    to fill the cluster. Edges the coordinator opens itself (a yield) count but are not refused."""
    queue_pass_limit: int = 3
    """How many times a later waiter may go ahead of a queued one (a higher priority, a reorder)
    before that waiter's place is fixed (statemachine/queues.py): the anti-starvation bound."""


@dataclass(slots=True)
class Session:
    agent_id: str
    incarnation: int
    lease_ms: int
    expires_at_ms: int
    status: SessionStatus


@dataclass(slots=True)
class SideEffect:
    outcome: EffectOutcome
    compensatable: bool
    generation: int


@dataclass(slots=True)
class Execution:
    execution_id: str
    run_id: str
    parent_id: str | None
    agent_id: str
    generation: int
    status: ExecStatus
    priority: int
    checkpoint: bool
    unique_evidence: bool
    cost_consumed: int
    created_at_ms: int
    status_at_ms: int
    edge_hwm: dict[str, int] = field(default_factory=dict)
    """Highest edge version seen per target in the current generation: a late re-register or
    close of an already closed edge is recognised as stale."""
    side_effects: dict[str, SideEffect] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    """Child execution ids in creation order (log order, hence deterministic)."""


@dataclass(slots=True)
class Run:
    run_id: str
    root_id: str
    cancel_generation: int


@dataclass(slots=True)
class Target:
    """An artifact, approval, reservation, exclusive resource or capacity pool.

    ``version``: the produced artifact version, the decided approval version, or the lease counter
    of a held kind (bumped on every acquire). ``satisfier_*``: the declared PRODUCED_BY /
    PROVIDED_BY satisfier and the target generation it was declared for. ``holders``: HELD_BY,
    execution id -> generation.
    """

    target_id: str
    kind: Kind
    slots: int
    version: int = 0
    satisfier_id: str | None = None
    satisfier_generation: int = 0
    satisfier_for: int = 0
    approved: bool | None = None
    holders: dict[str, int] = field(default_factory=dict)
    touched_ms: int = 0
    """Logical ms of the last change: created, acquired, released, waited on, a wait closed, a
    satisfier declared or closed, produced, decided. An idle target retires a retention after it."""


@dataclass(slots=True)
class WaitEdge:
    """wait-edge.v1; its id is ``<waiter>><target>``: one edge per waiter and target."""

    waiter_id: str
    waiter_generation: int
    target_id: str
    target_generation: int
    reason: str
    deadline_ms: int | None
    cancel_mode: CancelMode
    edge_version: int
    registered_at_ms: int
    trace_context: str = ""
    """The W3C ``traceparent`` of the wait's span (``RegisterWait.trace_context``); empty: untraced."""

    @property
    def edge_id(self) -> str:
        return edge_id(self.waiter_id, self.target_id)


def edge_id(waiter_id: str, target_id: str) -> str:
    return f"{waiter_id}>{target_id}"


class State:
    """Everything a replica holds. Mutated only by :mod:`waitgraph.statemachine.machine`."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.now_ms = 0
        self.sessions: dict[str, Session] = {}
        self.executions: dict[str, Execution] = {}
        self.runs: dict[str, Run] = {}
        self.targets: dict[str, Target] = {}
        self.waits_by_waiter: dict[str, dict[str, WaitEdge]] = {}
        self.idempotency: OrderedDict[tuple[str, str], tuple[bytes, Outcome]] = OrderedDict()
        self.counters: dict[str, int] = {}
        self.recovery = RecoveryBook()
        self.cancel = CancelBook()
        """The cancellation protocol's records (statemachine/cancel_state.py)."""
        self.queues: Q.Queues = {}
        """Grant queues of resources and pools (statemachine/queues.py): exactly the open waits on
        them, in grant order. Written only by :meth:`add_wait` and :meth:`remove_wait`."""
        # -- derived, rebuilt on restore --
        self.waits_by_target: dict[str, WaitEdge | dict[str, WaitEdge]] = {}
        """target id -> its one open wait, or waiter id -> wait when several wait on it. Most targets
        have a single waiter: a dict for each of them would cost ~200 B per edge and most of a
        restore's index rebuilding. Read it through :meth:`waits_on` and :meth:`target_wait`."""
        self.edge_count = 0
        self.traced_edges = 0
        """Open edges with a ``trace_context``: the snapshot writes the sparse column of them only
        when there is one, so an untraced state snapshots to the bytes it had before tracing."""
        self.active_sessions = 0
        """ACTIVE sessions (the cluster's admission limit reads it on every join: a count kept as
        sessions start and end, not a scan); written only by the machine's session transitions."""
        self.open_executions_by_agent: dict[str, int] = {}
        """agent id -> its unsettled executions (``Limits.max_open_executions_per_agent``); an
        agent with none has no entry."""
        self.open_edges_by_agent: dict[str, int] = {}
        """agent id -> open waits of its executions (``Limits.max_open_edges_per_agent``); an
        agent with none has no entry."""
        self.satisfies: dict[str, set[str]] = {}
        """execution id -> targets it produces, provides or holds."""
        self.deadlines: list[tuple[int, str, str, int]] = []
        """heap of (deadline_ms, waiter, target, edge_version); stale entries are skipped."""
        self.lease_ttls: dict[str, dict[str, tuple[int, int, int]]] = {}
        """target id -> holder id -> (expires_at_ms, generation, lease) of a holding granted with a
        TTL (``Acquire.ttl_ms``): primary data, in the snapshot. Written by :meth:`set_lease_ttl`
        at the grant and dropped by :meth:`drop_lease_ttl` whenever the holding ends, however."""
        self.ttl_expiry: list[tuple[int, str, str, int]] = []
        """Derived heap of (expires_at_ms, target id, holder id, lease); an entry whose record is gone
        or names another lease is stale and skipped (``lifecycle.expire_leases``)."""
        self._texts: dict[str, str] = {}
        self.retired_executions: dict[str, int] = {}
        """Tombstones: execution id -> logical ms it retired at, in retirement order (primary data,
        in the snapshot). A command naming one is told when it retired; tombstones are forgotten
        one retention after they were made (statemachine/retire.py)."""
        self.retired_runs: dict[str, int] = {}
        """Tombstones of runs, as ``retired_executions``; a retired run id is not reused meanwhile."""
        self.retired_targets: dict[str, int] = {}
        """Tombstones of targets, as ``retired_executions``; ``CreateTarget`` may create the id
        afresh (the tombstone goes), any other command naming it is told it retired."""
        self.target_queue: list[tuple[int, str]] = []
        """Derived heap of (touched_ms, target id), one entry per change: an entry whose target
        changed again since, is gone, or is not idle is stale and skipped. Every change that can
        make a target idle pushes one, so the valid entries are a function of the records alone."""
        self.open_by_run: dict[str, int] = {}
        """Derived: run id -> its unsettled executions; a run with none has no entry."""
        self.owned_by_agent: dict[str, int] = {}
        """Derived: agent id -> the executions (settled or not) it owns in the live state; a
        session that owns none may retire."""
        self.retire_queue: list[tuple[int, str]] = []
        """Derived heap of (settled_at_ms, run id): each time a run's last unsettled execution
        settles. An entry whose run has changed since is stale and skipped."""
        self.retire_blocked: set[tuple[int, str]] = set()
        """Derived: queue entries past their retention whose run is still referenced (an open
        proposal, a reconciliation item, a frozen admission ...); looked at again each pass. The
        union of queue and blocked entries is a function of the records alone, so a replica that
        restored a snapshot retires exactly what one that never did retires."""
        # -- change tracking for incremental detection; not part of the snapshot --
        self.change_seq = 0
        self.changed: dict[str, int] = {}
        """execution id -> change sequence, oldest first (a plain dict keeps insertion order and is
        several times cheaper to build than an OrderedDict at a million entries)."""

    # -- small helpers used by the machine ------------------------------------------------------

    def touch(self, execution_id: str) -> None:
        """Mark an execution whose outgoing wait-for edges or status may have changed."""
        self.change_seq += 1
        # Re-inserting moves the id to the end: the dict stays ordered by sequence.
        self.changed.pop(execution_id, None)
        self.changed[execution_id] = self.change_seq

    def changed_since(self, seq: int) -> list[str]:
        """Executions touched after ``seq``, oldest first."""
        out = []
        for eid in reversed(self.changed):
            if self.changed[eid] <= seq:
                break
            out.append(eid)
        out.reverse()
        return out

    def shared_text(self, text: str) -> str:
        """One string object per distinct short text (wait reasons repeat a lot): saves memory
        per edge; changes no value. The cache is bounded, so a flood of unique texts cannot grow it."""
        cached = self._texts.get(text)
        if cached is not None:
            return cached
        if len(self._texts) < 4096:
            self._texts[text] = text
        return text

    def bump(self, counter: str, by: int = 1) -> None:
        """Add ``by``, saturating at the codec's int64 limit: a sum of durations
        (``cancel.propagation_ms.sum_ms``) between far-apart proposer clocks (``at_ms`` is any int64)
        would otherwise leave every replica with a state it cannot snapshot (hypothesis found it:
        ``test_retire_props``, seed 2520642). Logical time never goes back, so no sum goes below zero."""
        value = self.counters.get(counter, 0) + by
        self.counters[counter] = value if value <= INT64_MAX else INT64_MAX

    def add_satisfies(self, execution_id: str, target_id: str) -> None:
        self.satisfies.setdefault(execution_id, set()).add(target_id)

    def drop_satisfies(self, execution_id: str, target_id: str) -> None:
        targets = self.satisfies.get(execution_id)
        if targets is not None:
            targets.discard(target_id)
            if not targets:
                del self.satisfies[execution_id]

    def wait(self, waiter_id: str, target_id: str) -> WaitEdge | None:
        waits = self.waits_by_waiter.get(waiter_id)
        return waits.get(target_id) if waits else None

    def waits_on(self, target_id: str) -> list[WaitEdge]:
        """Open waits on a target, in waiter-id order."""
        waits = self.waits_by_target.get(target_id)
        if waits is None:
            return []
        if isinstance(waits, WaitEdge):
            return [waits]
        return [waits[k] for k in sorted(waits)]

    def target_wait(self, target_id: str, waiter_id: str) -> WaitEdge | None:
        """The open wait of ``waiter_id`` on ``target_id``, found through ``waits_by_target``."""
        waits = self.waits_by_target.get(target_id)
        if isinstance(waits, WaitEdge):
            return waits if waits.waiter_id == waiter_id else None
        return waits.get(waiter_id) if waits else None

    def waits_of(self, waiter_id: str) -> list[WaitEdge]:
        waits = self.waits_by_waiter.get(waiter_id)
        return [waits[k] for k in sorted(waits)] if waits else []

    def count_open_execution(self, agent_id: str, by: int) -> None:
        """An execution of ``agent_id`` became unsettled (+1) or settled (-1), or was handed over."""
        _count(self.open_executions_by_agent, agent_id, by)

    def count_open_in_run(self, run_id: str, by: int, now_ms: int) -> None:
        """An execution of ``run_id`` became unsettled (+1) or settled (-1). When the last one
        settles the run joins the retirement queue at ``now_ms``, its settle time."""
        n = self.open_by_run.get(run_id, 0) + by
        if n:
            self.open_by_run[run_id] = n
        else:
            del self.open_by_run[run_id]
            heapq.heappush(self.retire_queue, (now_ms, run_id))

    def touch_target(self, target_id: str, now_ms: int) -> None:
        """The target changed at logical ``now_ms`` (a no-op for an execution waited on): it may
        retire a retention from then if idle by then."""
        t = self.targets.get(target_id)
        if t is None:
            return
        t.touched_ms = now_ms
        queue = self.target_queue
        if len(queue) > 2 * len(self.targets) + 1024:
            # Mostly stale entries of busy targets: keep the valid ones (the same set) only.
            queue[:] = target_index(self)
        heapq.heappush(queue, (now_ms, target_id))

    def count_owned(self, agent_id: str, by: int) -> None:
        """An execution of ``agent_id`` entered (+1) or left (-1) the live state, or changed hands."""
        _count(self.owned_by_agent, agent_id, by)

    def add_wait(self, edge: WaitEdge, priority: int = 0, lease_ttl_ms: int = 0) -> None:
        """Open ``edge``; a wait on a resource or pool takes its place in the target's queue (a
        re-registered one, removed with ``keep_place``, is still there and keeps it)."""
        t = self.targets.get(edge.target_id)
        if t is not None and t.kind in Q.QUEUED_KINDS:
            Q.enqueue(self.queues, edge.target_id, edge.waiter_id, priority, self.limits.queue_pass_limit, lease_ttl_ms)
        self.waits_by_waiter.setdefault(edge.waiter_id, {})[edge.target_id] = edge
        _file_by_target(self.waits_by_target, edge)
        self.edge_count += 1
        if edge.trace_context:
            self.traced_edges += 1
        _count(self.open_edges_by_agent, self.executions[edge.waiter_id].agent_id, 1)
        if edge.deadline_ms is not None:
            heapq.heappush(self.deadlines, (edge.deadline_ms, edge.waiter_id, edge.target_id, edge.edge_version))

    def set_lease_ttl(self, target_id: str, execution_id: str, generation: int, lease: int, expires_at_ms: int) -> None:
        """The holding of ``target_id`` by ``execution_id``@``generation`` at ``lease`` ends by itself
        at ``expires_at_ms`` (``Tick``), unless it ends before."""
        self.lease_ttls.setdefault(target_id, {})[execution_id] = (expires_at_ms, generation, lease)
        heapq.heappush(self.ttl_expiry, (expires_at_ms, target_id, execution_id, lease))

    def drop_lease_ttl(self, target_id: str, execution_id: str) -> None:
        """The holding ended: its TTL (if it had one) goes with it, so no later TTL names it."""
        ttls = self.lease_ttls.get(target_id)
        if ttls is not None and ttls.pop(execution_id, None) is not None and not ttls:
            del self.lease_ttls[target_id]

    def remove_wait(self, edge: WaitEdge, keep_place: bool = False) -> None:
        """Close ``edge`` in the indexes; it leaves its target's queue unless ``keep_place`` (the
        same wait is re-registered at once, see ``machine._register_wait``)."""
        if not keep_place:
            Q.dequeue(self.queues, edge.target_id, edge.waiter_id)
        by_waiter = self.waits_by_waiter[edge.waiter_id]
        del by_waiter[edge.target_id]
        if not by_waiter:
            del self.waits_by_waiter[edge.waiter_id]
        waits = self.waits_by_target[edge.target_id]
        if isinstance(waits, WaitEdge):
            if waits.waiter_id != edge.waiter_id:
                raise KeyError(edge.waiter_id)
            del self.waits_by_target[edge.target_id]
        else:
            del waits[edge.waiter_id]
            if len(waits) == 1:
                # Back to one waiter: the same shape a restore of this state builds.
                [self.waits_by_target[edge.target_id]] = waits.values()
        self.edge_count -= 1
        if edge.trace_context:
            self.traced_edges -= 1
        _count(self.open_edges_by_agent, self.executions[edge.waiter_id].agent_id, -1)

    # -- snapshot ------------------------------------------------------------------------------

    def to_plain(self) -> dict[str, Any]:
        plain = {
            "cancel": self.cancel.to_plain(),
            "counters": sorted(self.counters.items()),
            "executions": _executions_table(self.executions),
            "format": SNAPSHOT_FORMAT,
            "idempotency": [[a, r, fp, outcome_to_plain(o)] for (a, r), (fp, o) in self.idempotency.items()],
            "limits": [getattr(self.limits, f.name) for f in fields(Limits)],
            "now_ms": self.now_ms,
            "queues": Q.to_plain(self.queues),
            "recovery": self.recovery.to_plain(),
            "retired": [
                list(self.retired_executions.items()),
                list(self.retired_runs.items()),
                list(self.retired_targets.items()),
            ],
            "runs": _columns(_sorted_rows(self.runs, "run_id"), _RUN_COLUMNS),
            "sessions": [
                [s.agent_id, s.incarnation, s.lease_ms, s.expires_at_ms, s.status]
                for _, s in sorted(self.sessions.items())
            ],
            "targets": _targets_table(self.targets),
            "v": SNAPSHOT_VERSION,
            "waits": _waits_table(self.waits_by_waiter, traced=self.traced_edges > 0),
        }
        if self.lease_ttls:
            # Written only when some holding has a TTL, like a command's ``ADDED`` field: a state
            # that never saw one snapshots to the bytes (and digest) it had before.
            plain["lease_ttls"] = [
                [target_id, holder_id, *ttls[holder_id]]
                for target_id, ttls in sorted(self.lease_ttls.items())
                for holder_id in sorted(ttls)
            ]
        return plain

    def snapshot(self) -> bytes:
        with collector_paused():
            return pack(self.to_plain())

    def digest(self) -> str:
        return hashlib.sha256(self.snapshot()).hexdigest()

    @classmethod
    def restore(cls, data: bytes) -> State:
        with collector_paused():
            return cls._restore(data)

    @classmethod
    def _restore(cls, data: bytes) -> State:
        try:
            raw = msgspec.msgpack.decode(data)
            if raw.get("format") != SNAPSHOT_FORMAT or raw.get("v") not in READABLE_VERSIONS:
                raise CodecError(f"not a {SNAPSHOT_FORMAT} v{'/v'.join(map(str, sorted(READABLE_VERSIONS)))} snapshot")
            st = cls(Limits(*raw["limits"]))
            st.now_ms = raw["now_ms"]
            st.counters = dict((k, v) for k, v in raw["counters"])
            st.recovery = RecoveryBook.from_plain(raw["recovery"], approvers=raw["v"] >= 5)
            st.cancel = CancelBook.from_plain(raw["cancel"])
            for a, inc, lease, exp, status in raw["sessions"]:
                st.sessions[a] = Session(a, inc, lease, exp, _SESSION_STATUS[status])
            st.active_sessions = count_active_sessions(st.sessions)
            st.executions = _executions_from(raw["executions"])
            st.runs = _runs_from(raw["runs"])
            st.targets, st.satisfies = _targets_from(raw["targets"])
            st.waits_by_waiter, st.waits_by_target, st.deadlines, st.edge_count, st.traced_edges = _waits_from(
                raw["waits"], st.shared_text
            )
            if raw["v"] >= 6:
                st.queues = Q.from_plain(raw["queues"])
            else:
                st.queues = Q.rebuild(
                    (
                        (e.target_id, e.waiter_id, e.registered_at_ms)
                        for w in st.waits_by_waiter.values()
                        for e in w.values()
                    ),
                    {tid: t.kind for tid, t in st.targets.items()},
                )
            st.open_executions_by_agent, st.open_edges_by_agent = count_by_agent(st.executions, st.waits_by_waiter)
            if raw["v"] >= 3:
                retired = raw["retired"]
                if len(retired) != (3 if raw["v"] >= 4 else 2):
                    raise ValueError("the retired tables do not match the snapshot version")
                st.retired_executions = {e: int(at) for e, at in retired[0]}
                st.retired_runs = {r: int(at) for r, at in retired[1]}
                st.retired_targets = {t: int(at) for t, at in retired[2]} if raw["v"] >= 4 else {}
            if raw["v"] < 4:
                for t in st.targets.values():
                    t.touched_ms = st.now_ms
            st.open_by_run, st.owned_by_agent, st.retire_queue = retirement_index(st.executions, st.runs)
            st.target_queue = target_index(st)
            for target_id, holder_id, expires, generation, lease in raw.get("lease_ttls", ()):
                st.set_lease_ttl(str(target_id), str(holder_id), int(generation), int(lease), int(expires))
            for a, r, fp, out in raw["idempotency"]:
                st.idempotency[(a, r)] = (fp, outcome_from_plain(out))
            # A restored replica has no memory of earlier passes and ``changed`` starts empty: a
            # detector treats a state object it has not seen as new and makes a full pass over it.
        except CodecError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
            # Rows of the wrong types fail in here too (comparing them in a heap, calling str
            # methods on them, indexing a table with them): a corrupt snapshot, not a crash.
            raise CodecError(f"corrupt snapshot: {exc}") from exc
        return st


def count_active_sessions(sessions: dict[str, Session]) -> int:
    """The ACTIVE sessions, recounted from the records (restore; the invariants' check)."""
    return sum(1 for s in sessions.values() if s.status is SessionStatus.ACTIVE)


def _count(counts: dict[str, int], agent_id: str, by: int) -> None:
    n = counts.get(agent_id, 0) + by
    if n:
        counts[agent_id] = n
    else:
        del counts[agent_id]


def count_by_agent(
    executions: dict[str, Execution], waits_by_waiter: dict[str, dict[str, WaitEdge]]
) -> tuple[dict[str, int], dict[str, int]]:
    """Each agent's unsettled executions and open wait edges, recounted from the records: derived
    on restore (not stored in the snapshot), and the recount the invariants compare against.
    Counted in C (``Counter`` over mapped columns): a restore of a million rows stays cheap."""
    rows = list(executions.values())
    settled = map(SETTLED.__contains__, map(attrgetter("status"), rows))
    open_executions = Counter(compress(map(attrgetter("agent_id"), rows), map(not_, settled)))
    waiters = list(waits_by_waiter)
    owners = map(attrgetter("agent_id"), map(executions.__getitem__, waiters))
    open_edges = Counter(chain.from_iterable(map(repeat, owners, map(len, map(waits_by_waiter.__getitem__, waiters)))))
    return dict(open_executions), dict(open_edges)


def settled_at(executions: dict[str, Execution], root_id: str) -> int | None:
    """When the run rooted at ``root_id`` settled (the latest settle of its executions), or None
    while one of them is unsettled."""
    latest = 0
    stack = [root_id]
    while stack:
        ex = executions[stack.pop()]
        if ex.status not in SETTLED:
            return None
        latest = max(latest, ex.status_at_ms)
        stack.extend(ex.children)
    return latest


def retirement_index(
    executions: dict[str, Execution], runs: dict[str, Run]
) -> tuple[dict[str, int], dict[str, int], list[tuple[int, str]]]:
    """``open_by_run``, ``owned_by_agent`` and the retirement queue, recounted from the records:
    derived on restore, and what the invariants compare the kept ones against. The queue holds
    one entry per fully settled run, at its settle time."""
    rows = list(executions.values())
    settled = list(map(SETTLED.__contains__, map(attrgetter("status"), rows)))
    open_by_run = Counter(compress(map(attrgetter("run_id"), rows), map(not_, settled)))
    owned = Counter(map(attrgetter("agent_id"), rows))
    latest: dict[str, int] = {}
    for ex, done in zip(rows, settled, strict=True):
        if done and ex.run_id not in open_by_run:
            latest[ex.run_id] = max(latest.get(ex.run_id, 0), ex.status_at_ms)
    queue = [(at, run_id) for run_id, at in latest.items() if run_id in runs]
    heapq.heapify(queue)
    return dict(open_by_run), dict(owned), queue


def target_retirable(st: State, t: Target) -> bool:
    """Nothing holds, waits on or is due to satisfy ``t``, and retiring it loses no fence: it may
    retire once untouched for a retention. A satisfier that is an execution is live (a settled
    one's edge closed); an outside one (``human:``...) counts only while the version it was
    declared for is not reached yet. A held kind (resource, pool, reservation) that was ever
    acquired stays: its lease counter is a fencing token, and a target made afresh would count
    from 0 again, handing out lease numbers a former holder already had."""
    if t.holders or t.target_id in st.waits_by_target or (t.kind in HELD_KINDS and t.version):
        return False
    return t.satisfier_id is None or (not t.satisfier_id.startswith("exec:") and t.satisfier_for <= t.version)


def target_index(st: State) -> list[tuple[int, str]]:
    """The target queue's valid entries, recounted from the records (a heap): derived on restore,
    and what a busy queue is compacted to."""
    queue = [(t.touched_ms, tid) for tid, t in st.targets.items() if target_retirable(st, t)]
    heapq.heapify(queue)
    return queue


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk pass (snapshot, restore, detection, a large
    cancellation). Building or walking millions of small containers triggers the collector over and
    over for nothing (none of them form cycles); pausing it makes snapshots several times faster.
    It changes no result, and puts back the setting it found: how the collector is tuned, and
    whether a restored state is frozen, is the shell's policy (``cluster/node/collector.py``).
    The pause stays here because these passes run inside apply and snapshot, under the Raft layer,
    where the shell cannot wrap them alone."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# -- snapshot tables ---------------------------------------------------------------------------
# A big table (executions, runs, targets, waits) is written column by column: a map from field
# name to that field's values in row order, rows sorted by id. Columns unpack into flat lists and
# become records again in one ``map`` over them, which keeps a restore of millions of rows to a
# few object allocations per row. Besides a plain list of values, a column may be:
# - coded: [sorted distinct values, each row's index into them], for low-cardinality strings
#   (enums, agent ids, wait reasons): small ints unpack for free and the rows share one string;
# - nested: [each row's entry count, entry column...], a row's small map or list (high-water
#   marks, side effects, children, holders) flattened over all rows in order, map entries sorted.
# The waits table is grouped by waiter: its ``waiter_id`` column is [waiters, each one's edge
# count], its other columns hold the edges sorted by (waiter, target).

_EXEC_COLUMNS = (
    "execution_id",
    "run_id",
    "parent_id",
    "generation",
    "priority",
    "checkpoint",
    "unique_evidence",
    "cost_consumed",
    "created_at_ms",
    "status_at_ms",
)
_RUN_COLUMNS = ("run_id", "root_id", "cancel_generation")
_TARGET_COLUMNS = (
    "target_id",
    "slots",
    "version",
    "satisfier_id",
    "satisfier_generation",
    "satisfier_for",
    "approved",
)
_TARGET_TOUCHED = "touched_ms"
"""The v4 column (after ``_TARGET_COLUMNS``, which every readable version has)."""
_WAIT_COLUMNS = (
    "target_id",
    "waiter_generation",
    "target_generation",
    "deadline_ms",
    "edge_version",
    "registered_at_ms",
)
_WAIT_TRACED = "trace_context"
"""The optional sparse column of the waits table: [row, traceparent] for each traced edge."""
_first, _second = itemgetter(0), itemgetter(1)
_R = TypeVar("_R")
_C = TypeVar("_C", dict[str, Any], list[str])


def _sorted_rows(records: dict[str, _R], id_field: str) -> list[_R]:
    """The records in id order. Sorted by their own id field (every record is filed under it),
    read in C in memory order: about twice as fast as looking each sorted key up in the dict."""
    return sorted(records.values(), key=attrgetter(id_field))


def _columns(rows: list[Any], names: Iterable[str]) -> dict[str, Any]:
    """Plain columns of ``rows`` (read in C by attrgetter), keys sorted as the snapshot wants."""
    return dict(sorted((name, list(map(attrgetter(name), rows))) for name in names))


def _coded(values: list[Any]) -> list[Any]:
    """A coded column: [sorted distinct values, each row's index into them]."""
    table = sorted(set(values))
    index = dict(zip(table, range(len(table)), strict=True))
    return [table, list(map(index.__getitem__, values))]


def _nested_map(maps: list[dict[str, Any]]) -> tuple[list[int], list[tuple[str, Any]]]:
    """Each row's map length, and the entries of all rows in row order, each row's sorted by key."""
    return list(map(len, maps)), [item for m in maps if m for item in sorted(m.items())]


def _executions_table(executions: dict[str, Execution]) -> dict[str, Any]:
    rows = _sorted_rows(executions, "execution_id")
    table = _columns(rows, _EXEC_COLUMNS)
    table["agent_id"] = _coded(list(map(attrgetter("agent_id"), rows)))
    table["status"] = _coded(list(map(attrgetter("status"), rows)))
    counts, hwm = _nested_map(list(map(attrgetter("edge_hwm"), rows)))
    table["edge_hwm"] = [counts, list(map(_first, hwm)), list(map(_second, hwm))]
    counts, fx = _nested_map(list(map(attrgetter("side_effects"), rows)))
    effects = list(map(_second, fx))
    table["side_effects"] = [
        counts,
        list(map(_first, fx)),
        list(map(attrgetter("outcome"), effects)),
        list(map(attrgetter("compensatable"), effects)),
        list(map(attrgetter("generation"), effects)),
    ]
    children = list(map(attrgetter("children"), rows))
    table["children"] = [list(map(len, children)), list(chain.from_iterable(children))]
    return dict(sorted(table.items()))


def _targets_table(targets: dict[str, Target]) -> dict[str, Any]:
    rows = _sorted_rows(targets, "target_id")
    table = _columns(rows, (*_TARGET_COLUMNS, _TARGET_TOUCHED))
    table["kind"] = _coded(list(map(attrgetter("kind"), rows)))
    counts, holders = _nested_map(list(map(attrgetter("holders"), rows)))
    table["holders"] = [counts, list(map(_first, holders)), list(map(_second, holders))]
    return dict(sorted(table.items()))


def _waits_table(by_waiter: dict[str, dict[str, WaitEdge]], traced: bool = False) -> dict[str, Any]:
    waiters = sorted(by_waiter)
    groups = list(map(by_waiter.__getitem__, waiters))
    rows = [waits[t] for waits in groups for t in sorted(waits)]
    table = _columns(rows, _WAIT_COLUMNS)
    table["waiter_id"] = [waiters, list(map(len, groups))]
    table["reason"] = _coded(list(map(attrgetter("reason"), rows)))
    table["cancel_mode"] = _coded(list(map(attrgetter("cancel_mode"), rows)))
    if traced:
        # Sparse, [row, traceparent] of the traced edges only, and written only when there is one
        # (``State.traced_edges``): like a command's ``ADDED`` field, an untraced state keeps its bytes.
        table[_WAIT_TRACED] = [[i, e.trace_context] for i, e in enumerate(rows) if e.trace_context]
    return dict(sorted(table.items()))


def _column(table: Mapping[str, Any], name: str, n: int | None = None) -> list[Any]:
    """A plain column, checked to be a list (of ``n`` values when given)."""
    values = table[name]
    if type(values) is not list or (n is not None and len(values) != n):
        raise ValueError(f"column {name!r} is not a list of {n} values")
    return values


def _plain_columns(table: Mapping[str, Any], names: Iterable[str], n: int) -> list[list[Any]]:
    return [_column(table, name, n) for name in names]


def _uncoded(table: Mapping[str, Any], name: str, n: int, decode: Callable[[Any], Any] | None = None) -> list[Any]:
    """A coded column's value per row; ``decode`` turns each distinct value into the stored one."""
    values, index = table[name]
    if type(values) is not list or type(index) is not list or len(index) != n:
        raise ValueError(f"column {name!r} is not a coded column of {n} values")
    if index and min(index) < 0:
        raise ValueError(f"column {name!r} has a negative index")
    if decode is not None:
        values = list(map(decode, values))
    return list(map(values.__getitem__, index))


def _nested(table: Mapping[str, Any], name: str, n: int, width: int) -> tuple[list[int], list[list[Any]]]:
    """A nested column's per-row entry counts and its ``width`` entry columns."""
    counts, *entries = table[name]
    if type(counts) is not list or len(counts) != n or len(entries) != width:
        raise ValueError(f"column {name!r} is not a nested column of {n} rows")
    total = sum(counts)
    if (counts and min(counts) < 0) or any(type(c) is not list or len(c) != total for c in entries):
        raise ValueError(f"column {name!r} does not hold its rows' entries")
    return counts, entries


def _per_row(counts: list[int], entries: Iterable[Any], make: Callable[[Iterable[Any]], _C]) -> list[_C]:
    """Each row's container (``make`` is dict or list) of the next ``count`` of ``entries``, row
    after row. Most rows' containers are empty: those are copies made in C, only the others take
    a step in Python."""
    empty = make(())
    rows = list(map(type(empty).copy, repeat(empty, len(counts))))
    it = iter(entries)
    for i in compress(range(len(counts)), counts):
        rows[i] = make(islice(it, counts[i]))
    return rows


def _by_id(ids: list[str], records: Iterable[Any]) -> dict[str, Any]:
    out = dict(zip(ids, records, strict=True))
    if len(out) != len(ids):
        raise ValueError("an id is listed twice")
    return out


def _executions_from(table: Mapping[str, Any]) -> dict[str, Execution]:
    ids = _column(table, "execution_id")
    n = len(ids)
    run_ids, parents, generations, priorities, checkpoints, unique, costs, created, status_at = _plain_columns(
        table, _EXEC_COLUMNS[1:], n
    )
    hwm_counts, (targets, versions) = _nested(table, "edge_hwm", n, 2)
    fx_counts, (effect_ids, outcomes, compensatable, effect_generations) = _nested(table, "side_effects", n, 4)
    effects = map(SideEffect, map(_EFFECT_OUTCOME.__getitem__, outcomes), compensatable, effect_generations)
    child_counts, (child_ids,) = _nested(table, "children", n, 1)
    rows = map(
        Execution,
        ids,
        run_ids,
        parents,
        _uncoded(table, "agent_id", n),
        generations,
        _uncoded(table, "status", n, _EXEC_STATUS.__getitem__),
        priorities,
        checkpoints,
        unique,
        costs,
        created,
        status_at,
        _per_row(hwm_counts, zip(targets, versions, strict=True), dict),
        _per_row(fx_counts, zip(effect_ids, effects, strict=True), dict),
        _per_row(child_counts, child_ids, list),
    )
    return _by_id(ids, rows)


def _runs_from(table: Mapping[str, Any]) -> dict[str, Run]:
    ids = _column(table, "run_id")
    return _by_id(ids, map(Run, *_plain_columns(table, _RUN_COLUMNS, len(ids))))


def _targets_from(table: Mapping[str, Any]) -> tuple[dict[str, Target], dict[str, set[str]]]:
    """The targets, and the ``satisfies`` index derived from their satisfiers and holders."""
    ids = _column(table, "target_id")
    n = len(ids)
    slots, versions, satisfiers, satisfier_generations, satisfier_for, approved = _plain_columns(
        table, _TARGET_COLUMNS[1:], n
    )
    counts, (holders, holder_generations) = _nested(table, "holders", n, 2)
    touched = _column(table, _TARGET_TOUCHED, n) if _TARGET_TOUCHED in table else repeat(0, n)
    rows = map(
        Target,
        ids,
        _uncoded(table, "kind", n, _KIND.__getitem__),
        slots,
        versions,
        satisfiers,
        satisfier_generations,
        satisfier_for,
        approved,
        _per_row(counts, zip(holders, holder_generations, strict=True), dict),
        touched,
    )
    targets = _by_id(ids, rows)
    # satisfies[execution].add(target) for each execution satisfier, then each holder; filtered
    # and looped in C, as a million targets are common.
    satisfies: defaultdict[str, set[str]] = defaultdict(set)
    declared = list(map(is_not, satisfiers, repeat(None)))
    named, named_targets = list(compress(satisfiers, declared)), list(compress(ids, declared))
    by_exec = list(map(str.startswith, named, repeat("exec:")))
    _add_each(satisfies, compress(named, by_exec), compress(named_targets, by_exec))
    _add_each(satisfies, holders, chain.from_iterable(map(repeat, ids, counts)))
    return targets, dict(satisfies)


def _add_each(index: defaultdict[str, set[str]], keys: Iterable[str], values: Iterable[str]) -> None:
    """``index[key].add(value)`` for each pair, looped in C."""
    deque(map(set.add, map(index.__getitem__, keys), values), maxlen=0)


def _file_by_target(by_target: dict[str, WaitEdge | dict[str, WaitEdge]], edge: WaitEdge) -> None:
    """Add ``edge`` to ``State.waits_by_target``: the edge itself while it is its target's only one."""
    other = by_target.get(edge.target_id)
    if other is None:
        by_target[edge.target_id] = edge
    elif isinstance(other, WaitEdge):
        by_target[edge.target_id] = {other.waiter_id: other, edge.waiter_id: edge}
    else:
        other[edge.waiter_id] = edge


def _waits_from(
    table: Mapping[str, Any], text: Callable[[str], str]
) -> tuple[dict[str, dict[str, WaitEdge]], dict[str, WaitEdge | dict[str, WaitEdge]], list[Any], int, int]:
    """The wait edges by waiter and by target, the deadline heap, the edge count and the traced
    edge count, from the waits table; ``text`` shares the reason strings (``State.shared_text``)."""
    waiters, counts = table["waiter_id"]
    if type(waiters) is not list or type(counts) is not list or len(waiters) != len(counts):
        raise ValueError("column 'waiter_id' is not a list of waiters and their edge counts")
    if counts and min(counts) < 1:
        raise ValueError("a waiter with no edge")
    n = sum(counts)
    waiter_ids = list(chain.from_iterable(map(repeat, waiters, counts)))
    target_ids, waiter_generations, target_generations, deadlines, versions, registered = _plain_columns(
        table, _WAIT_COLUMNS, n
    )
    edges = list(
        map(
            WaitEdge,
            waiter_ids,
            waiter_generations,
            target_ids,
            target_generations,
            _uncoded(table, "reason", n, text),
            deadlines,
            _uncoded(table, "cancel_mode", n, _CANCEL_MODE.__getitem__),
            versions,
            registered,
        )
    )
    traced = table.get(_WAIT_TRACED, ())
    last = -1
    for row, trace_context in traced:
        if type(row) is not int or not last < row < n or type(trace_context) is not str or not trace_context:
            raise ValueError("column 'trace_context' is not [row, context] pairs of its rows, in row order")
        edges[row].trace_context = trace_context
        last = row
    # Each waiter's edges are the next ``count`` of the list (it is sorted by waiter).
    by_waiter = dict(
        zip(waiters, map(dict, map(islice, repeat(zip(target_ids, edges, strict=True)), counts)), strict=True)
    )
    if len(by_waiter) != len(waiters):
        raise ValueError("a waiter is listed twice")
    by_target: dict[str, WaitEdge | dict[str, WaitEdge]] = dict(zip(target_ids, edges, strict=True))
    if len(by_target) < n:
        # Some targets have several waiters (the dict kept only the last): file those again.
        shared = {e.target_id for e in edges if by_target[e.target_id] is not e}
        for target_id in shared:
            del by_target[target_id]
        for edge in edges:
            if edge.target_id in shared:
                _file_by_target(by_target, edge)
    heap = list(
        compress(zip(deadlines, waiter_ids, target_ids, versions, strict=True), map(is_not, deadlines, repeat(None)))
    )
    heapq.heapify(heap)
    return by_waiter, by_target, heap, n, len(traced)


def is_orphaned(st: State, ex: Execution) -> bool:
    """Unsettled, and its owner has no active session: the agent process crashed or left, and
    nobody is working on it. It keeps its waits and holdings (detection still sees it, and it can
    be a deadlock victim) until its agent re-joins and resumes it, or an operator cancels its run."""
    if ex.status in SETTLED:
        return False
    session = st.sessions.get(ex.agent_id)
    return session is None or session.status is not SessionStatus.ACTIVE


def orphaned_count(st: State) -> int:
    """How many executions :func:`is_orphaned`: O(agents), from the per-agent count of unsettled
    executions, so status and metrics can afford it on every call."""
    sessions = st.sessions
    return sum(
        n
        for agent_id, n in st.open_executions_by_agent.items()
        if (s := sessions.get(agent_id)) is None or s.status is not SessionStatus.ACTIVE
    )
