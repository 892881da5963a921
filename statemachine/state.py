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
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

import msgpack

from .cancel_state import CancelBook
from .codec import outcome_from_plain, outcome_to_plain, pack
from .enums import CancelMode, EffectOutcome, ExecStatus, SessionStatus
from .errors import CodecError
from .ids import Kind
from .outcome import Outcome
from .recovery_state import RecoveryBook

# Enum lookups by value: calling the enum class costs microseconds per row on restore.
_SESSION_STATUS = {m.value: m for m in SessionStatus}
_EXEC_STATUS = {m.value: m for m in ExecStatus}
_EFFECT_OUTCOME = {m.value: m for m in EffectOutcome}
_CANCEL_MODE = {m.value: m for m in CancelMode}
_KIND = {m.value: m for m in Kind}

SNAPSHOT_FORMAT = "waitgraph-state"
SNAPSHOT_VERSION = 1


@dataclass(slots=True)
class Limits:
    """Bounds that keep one tenant or one bug from exhausting a replica."""

    max_edges_per_execution: int = 64
    max_total_edges: int = 2_000_000
    max_executions: int = 2_000_000
    max_targets: int = 2_000_000
    max_sessions: int = 100_000
    max_pool_slots: int = 100_000
    max_side_effects_per_execution: int = 256
    max_reason_len: int = 256
    max_lease_ms: int = 86_400_000
    idempotency_capacity: int = 100_000


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

    @property
    def edge_id(self) -> str:
        return edge_id(self.waiter_id, self.target_id)


def edge_id(waiter_id: str, target_id: str) -> str:
    return f"{waiter_id}>{target_id}"


class State:
    """Everything a replica holds. Mutated only by :mod:`statemachine.machine`."""

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
        # -- derived, rebuilt by _reindex() --
        self.waits_by_target: dict[str, dict[str, WaitEdge]] = {}
        self.edge_count = 0
        self.satisfies: dict[str, set[str]] = {}
        """execution id -> targets it produces, provides or holds."""
        self.deadlines: list[tuple[int, str, str, int]] = []
        """heap of (deadline_ms, waiter, target, edge_version); stale entries are skipped."""
        self.session_expiry: list[tuple[int, str]] = []
        """heap of (expires_at_ms, agent_id); stale entries are skipped."""
        self._texts: dict[str, str] = {}
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
        self.counters[counter] = self.counters.get(counter, 0) + by

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
        return [waits[k] for k in sorted(waits)] if waits else []

    def waits_of(self, waiter_id: str) -> list[WaitEdge]:
        waits = self.waits_by_waiter.get(waiter_id)
        return [waits[k] for k in sorted(waits)] if waits else []

    def add_wait(self, edge: WaitEdge) -> None:
        self.waits_by_waiter.setdefault(edge.waiter_id, {})[edge.target_id] = edge
        self.waits_by_target.setdefault(edge.target_id, {})[edge.waiter_id] = edge
        self.edge_count += 1
        if edge.deadline_ms is not None:
            heapq.heappush(self.deadlines, (edge.deadline_ms, edge.waiter_id, edge.target_id, edge.edge_version))

    def remove_wait(self, edge: WaitEdge) -> None:
        by_waiter = self.waits_by_waiter[edge.waiter_id]
        del by_waiter[edge.target_id]
        if not by_waiter:
            del self.waits_by_waiter[edge.waiter_id]
        by_target = self.waits_by_target[edge.target_id]
        del by_target[edge.waiter_id]
        if not by_target:
            del self.waits_by_target[edge.target_id]
        self.edge_count -= 1

    # -- snapshot ------------------------------------------------------------------------------

    def to_plain(self) -> dict[str, Any]:
        return {
            "cancel": self.cancel.to_plain(),
            "counters": sorted(self.counters.items()),
            "executions": [_exec_plain(self.executions[k]) for k in sorted(self.executions)],
            "format": SNAPSHOT_FORMAT,
            "idempotency": [[a, r, fp, outcome_to_plain(o)] for (a, r), (fp, o) in self.idempotency.items()],
            "limits": [getattr(self.limits, f.name) for f in fields(Limits)],
            "now_ms": self.now_ms,
            "recovery": self.recovery.to_plain(),
            "runs": [[r.run_id, r.root_id, r.cancel_generation] for _, r in sorted(self.runs.items())],
            "sessions": [
                [s.agent_id, s.incarnation, s.lease_ms, s.expires_at_ms, s.status]
                for _, s in sorted(self.sessions.items())
            ],
            "targets": [_target_plain(self.targets[k]) for k in sorted(self.targets)],
            "v": SNAPSHOT_VERSION,
            "waits": [
                _wait_plain(waits[t]) for _, waits in sorted(self.waits_by_waiter.items()) for t in sorted(waits)
            ],
        }

    def snapshot(self) -> bytes:
        with collector_paused():
            return pack(self.to_plain())

    def digest(self) -> str:
        return hashlib.sha256(self.snapshot()).hexdigest()

    @classmethod
    def restore(cls, data: bytes) -> State:
        with collector_paused(freeze=True):
            return cls._restore(data)

    @classmethod
    def _restore(cls, data: bytes) -> State:
        try:
            raw = msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True)
            if raw.get("format") != SNAPSHOT_FORMAT or raw.get("v") != SNAPSHOT_VERSION:
                raise CodecError(f"not a {SNAPSHOT_FORMAT} v{SNAPSHOT_VERSION} snapshot")
            st = cls(Limits(*raw["limits"]))
            st.now_ms = raw["now_ms"]
            st.counters = dict((k, v) for k, v in raw["counters"])
            st.recovery = RecoveryBook.from_plain(raw["recovery"])
            st.cancel = CancelBook.from_plain(raw["cancel"])
            for a, inc, lease, exp, status in raw["sessions"]:
                st.sessions[a] = Session(a, inc, lease, exp, _SESSION_STATUS[status])
            for row in raw["executions"]:
                ex = _exec_from(row)
                st.executions[ex.execution_id] = ex
            for run_id, root, cgen in raw["runs"]:
                st.runs[run_id] = Run(run_id, root, cgen)
            for row in raw["targets"]:
                t = _target_from(row)
                st.targets[t.target_id] = t
            by_waiter = st.waits_by_waiter
            for w, wg, t, tg, reason, dl, cm, ev, at in raw["waits"]:
                waits = by_waiter.get(w)
                if waits is None:
                    waits = by_waiter[w] = {}
                waits[t] = WaitEdge(w, wg, t, tg, st.shared_text(reason), dl, _CANCEL_MODE[cm], ev, at)
            for a, r, fp, out in raw["idempotency"]:
                st.idempotency[(a, r)] = (fp, outcome_from_plain(out))
            # Inside the try: rows of the wrong types fail here too (comparing them in a heap,
            # calling str methods on them), and that is a corrupt snapshot, not a crash.
            st._reindex()
        except CodecError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, msgpack.UnpackException) as exc:
            raise CodecError(f"corrupt snapshot: {exc}") from exc
        return st

    def _reindex(self) -> None:
        # Hot on restore (millions of rows): locals instead of attribute and method lookups.
        by_target: dict[str, dict[str, WaitEdge]] = {}
        deadlines: list[tuple[int, str, str, int]] = []
        count = 0
        for waits in self.waits_by_waiter.values():
            count += len(waits)
            for edge in waits.values():
                waiters = by_target.get(edge.target_id)
                if waiters is None:
                    waiters = by_target[edge.target_id] = {}
                waiters[edge.waiter_id] = edge
                if edge.deadline_ms is not None:
                    deadlines.append((edge.deadline_ms, edge.waiter_id, edge.target_id, edge.edge_version))
        heapq.heapify(deadlines)
        self.waits_by_target, self.deadlines, self.edge_count = by_target, deadlines, count
        satisfies: dict[str, set[str]] = {}

        def add(execution_id: str, target_id: str) -> None:
            targets = satisfies.get(execution_id)
            if targets is None:
                targets = satisfies[execution_id] = set()
            targets.add(target_id)

        for t in self.targets.values():
            if t.satisfier_id is not None and t.satisfier_id.startswith("exec:"):
                add(t.satisfier_id, t.target_id)
            for holder in t.holders:
                add(holder, t.target_id)
        self.satisfies = satisfies
        self.session_expiry = [
            (s.expires_at_ms, s.agent_id) for s in self.sessions.values() if s.status is SessionStatus.ACTIVE
        ]
        heapq.heapify(self.session_expiry)
        # A restored replica has no memory of earlier passes: everything counts as changed, in
        # id order (restore inserted the executions sorted, as the snapshot lists them).
        self.changed = dict(zip(self.executions, range(1, len(self.executions) + 1), strict=True))
        self.change_seq = len(self.executions)


@contextmanager
def collector_paused(freeze: bool = False) -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk pass (snapshot, restore, detection, a large
    cancellation). Building or walking millions of small containers triggers the collector over and
    over for nothing (none of them form cycles); pausing it makes snapshots several times faster.
    It changes no result."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            # A restored state is long-lived and holds no reference cycles (records point only
            # at strings, numbers and their own containers; it is freed by reference counting).
            # Moving it to the permanent generation spares every later collection a walk over
            # millions of objects: about 1.6 s at a million edges right after the restore alone.
            gc.freeze()
        if was_enabled:
            gc.enable()


# Snapshot rows: the scalar fields of a record, read in C by attrgetter (a tuple packs exactly
# like a list), then the few fields that need sorting. Field order is the snapshot format.
_EXEC_SCALARS = attrgetter(
    "execution_id",
    "run_id",
    "parent_id",
    "agent_id",
    "generation",
    "status",
    "priority",
    "checkpoint",
    "unique_evidence",
    "cost_consumed",
    "created_at_ms",
    "status_at_ms",
)
_TARGET_SCALARS = attrgetter(
    "target_id", "kind", "slots", "version", "satisfier_id", "satisfier_generation", "satisfier_for", "approved"
)
_wait_plain = attrgetter(
    "waiter_id",
    "waiter_generation",
    "target_id",
    "target_generation",
    "reason",
    "deadline_ms",
    "cancel_mode",
    "edge_version",
    "registered_at_ms",
)


def _exec_plain(ex: Execution) -> tuple[Any, ...]:
    return (
        *_EXEC_SCALARS(ex),
        sorted(ex.edge_hwm.items()) if ex.edge_hwm else (),
        [[k, s.outcome, s.compensatable, s.generation] for k, s in sorted(ex.side_effects.items())]
        if ex.side_effects
        else (),
        ex.children,
    )


def _exec_from(row: list[Any]) -> Execution:
    (eid, run, parent, agent, gen, status, prio, ckpt, uniq, cost, created, at, hwm, effects, children) = row
    return Execution(
        eid,
        run,
        parent,
        agent,
        gen,
        _EXEC_STATUS[status],
        prio,
        ckpt,
        uniq,
        cost,
        created,
        at,
        {k: v for k, v in hwm},
        {k: SideEffect(_EFFECT_OUTCOME[o], c, g) for k, o, c, g in effects},
        list(children),
    )


def _target_plain(t: Target) -> tuple[Any, ...]:
    return (*_TARGET_SCALARS(t), sorted(t.holders.items()) if t.holders else ())


def _target_from(row: list[Any]) -> Target:
    tid, kind, slots, version, sid, sgen, sfor, approved, holders = row
    return Target(tid, _KIND[kind], slots, version, sid, sgen, sfor, approved, {k: v for k, v in holders})
