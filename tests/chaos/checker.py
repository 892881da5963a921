"""The chaos checker: every replica's final state, linearizability, and the docs/design.md §7 invariants.

    finals = collect_final(endpoints, credentials)      # after heal (blocking; bounded wait)
    report = check(history, finals)
    assert report.ok, report.excerpt

Rules kept here:
- The final state of each replica is its whole canonical snapshot (OperatorService ExportState,
  admin), restored into a :class:`waitgraph.statemachine.state.State`: the same object the core's own
  invariants (:func:`waitgraph.statemachine.invariants.check`) and digest read, so nothing is re-derived.
- An unknown write (``info``) is resolved exactly from what the cluster applied: the idempotency
  table of the final state holds ``(actor, request id)`` for every applied write and never a
  rejected one. Found: applied at some point after its invocation (its recorded outcome is its
  output). Not found while the table never evicted: not applied, and it is dropped.
- Linearizability (Wing & Gong with memoisation, :mod:`.linearizability`) per key: the epoch (read
  by clients, written only by recovery commits, each write completed no later than the first time
  anyone saw it) and each run's cancel generation (CancelRun and fresh reads). Stale reads are not
  linearizable by contract and are checked only against the applied index they report. A search
  that runs out of its step budget proves nothing either way: the history is counted
  ``undecided`` (not a violation, not linearizable) and the report is not ok.
- Every violation keeps the history entries that show it, so the report can print the shortest
  excerpt of the first one, with what was expected.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from waitgraph.dev.localcluster import Credentials
from waitgraph.node.events import CURSOR_SHIFT
from waitgraph.proto.v1 import operator_pb2
from waitgraph.sdk import RpcError, SyncOperatorClient
from waitgraph.statemachine import invariants as core_invariants
from waitgraph.statemachine.cancel import cancel_state
from waitgraph.statemachine.codec import effect_from_plain
from waitgraph.statemachine.effects import (
    Acquired,
    DecisionRetired,
    ExecutionRetired,
    ProposalRetired,
    RunRetired,
    TargetRetired,
)
from waitgraph.statemachine.enums import SETTLED, CancelState, ExecStatus
from waitgraph.statemachine.recovery_state import Decision, ProposalStatus
from waitgraph.statemachine.retire import decision_from_retired
from waitgraph.statemachine.state import State

from . import linearizability as lin
from .history import FAIL, FENCE_PROBE, INFO, OK, History, Observed, Op

INVARIANTS = (
    "epoch_never_decreases",
    "cancel_generation_never_decreases",
    "one_decision_per_digest",
    "recovery_committed_with_votes",
    "no_release_before_epoch_commit",
    "no_stale_epoch_acknowledged",
    "no_cancelled_generation_commits",
    "no_edge_changed_by_older_generation",
    "replicas_same_digest",
    "no_acknowledged_write_lost",
    "every_write_applied_once",
    "fresh_read_not_stale",
    "no_leaked_permit_after_cancelled_stable",
    "stale_epoch_refused_by_fence",
    "cancelled_runs_converge",
    "grants_only_to_live_generations",
    "state_invariants",
)
"""Every invariant the report lists, in this order (an empty list: no violation)."""

RETIRE_COUNTERS = ("runs", "executions", "targets", "proposals", "decisions", "sessions", "tombstones_forgotten")
"""The final state's ``retire.<name>`` counters the report shows (statemachine/retire.py)."""

_STOPPED = {ExecStatus.CANCEL_REQUESTED.value, ExecStatus.CANCELLING.value, ExecStatus.CANCELLED.value}
_WRITE_READS = ("read_epoch", "read_cancel")
_LIVE = frozenset({ExecStatus.PENDING.value, ExecStatus.RUNNING.value, ExecStatus.WAITING.value})
"""The statuses in which an execution may be granted a target (statemachine/lifecycle.py ``LIVE``)."""
_SETTLED = frozenset(s.value for s in SETTLED)
CONVERGENCE_MARGIN_MS = 10_000
"""Logical ms past the cancellation SLO after which every cancelled run must have converged or
said why not: the SLO quarantines whatever has not acknowledged at the leader's next
housekeeping pass (every 250 ms), so 10 s of logical time past it leaves a wide margin."""
_BEFORE_THE_FENCE = frozenset({"target_held", "pool_full"})
"""Refusals the core's Acquire makes only after the fence let the caller by."""


# == final states ==================================================================================


@dataclass
class ReplicaFinal:
    """One replica after heal: its state (None when it could not be read, see ``error``)."""

    endpoint: str
    node_id: str = ""
    applied_index: int = -1
    commit_index: int = -1
    digest: str = ""
    state: State | None = None
    error: str | None = None
    agreed: tuple[int, str] | None = None
    """(applied index, digest) this replica reported in the one round of concurrent Status reads in
    which every replica had applied the same index (see :func:`collect_final`)."""
    history: list[Any] = field(default_factory=list)
    """The retirement effects this node's history store holds (``RunRetired``, ``ExecutionRetired``...),
    read with the History RPC after heal."""
    history_total: int = 0
    """How many records the store said it holds (more than ``history`` only if a lookup failed)."""
    history_error: str | None = None

    @property
    def epoch(self) -> int:
        return self.state.recovery.epoch if self.state is not None else -1

    def cancel_generation(self, run_id: str) -> int:
        if self.state is None:
            return -1
        run = self.state.runs.get(run_id)
        return run.cancel_generation if run is not None else 0


def collect_final(
    endpoints: Sequence[str],
    credentials: Credentials,
    timeout_s: float = 60.0,
    rounds: int = 30,
    runs: Iterable[str] = (),
) -> list[ReplicaFinal]:
    """After heal: wait (at most ``timeout_s``) until every replica has applied the leader's commit
    index, then read each one's whole state. Replicas are read until they report the same applied
    index (background loops may still append an entry now and then; at most ``rounds`` tries).
    Then each node's history store (what retired from the live state): its newest
    :data:`HISTORY_LIMIT` records, and when it holds more, every record of each of ``runs`` (the
    runs the workload named) looked up by id."""
    ops = SyncOperatorClient(list(endpoints), credentials.admin, call_timeout_s=10.0)
    try:
        deadline = time.monotonic() + timeout_s
        target = _leader_commit(ops, deadline)
        while time.monotonic() < deadline:
            statuses = [_status(ops, ep) for ep in endpoints]
            if all(s is not None and s.applied_index >= target for s in statuses):
                break
            time.sleep(0.2)
        agreed = _agree(ops, endpoints, deadline)
        finals: list[ReplicaFinal] = []
        for _ in range(rounds):
            finals = [_export(ops, ep) for ep in endpoints]
            indices = {f.applied_index for f in finals if f.state is not None}
            if len(indices) == 1 and all(f.state is not None for f in finals):
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        for f in finals:
            f.agreed = agreed.get(f.endpoint)
        wanted = sorted(set(runs))
        for f in finals:
            _history(ops, f, wanted)
        return finals
    finally:
        ops.close()


HISTORY_LIMIT = 10_000
"""The most records one History RPC returns (cluster/node/history.py ``MAX_LIMIT``)."""


def _history(ops: SyncOperatorClient, final: ReplicaFinal, runs: Sequence[str]) -> None:
    """Fill ``final.history`` from the node's store: the whole listing when it fits in one
    answer, else the records of each named run (RunRetired and its ExecutionRetired) on top of
    the newest :data:`HISTORY_LIMIT` (decisions and proposals beyond those are not looked up)."""
    seen: dict[tuple[str, str, int], Any] = {}

    def fetch(**by: str) -> operator_pb2.HistoryResponse:
        request = operator_pb2.HistoryRequest(limit=HISTORY_LIMIT, **by)
        reply: operator_pb2.HistoryResponse = ops.call(final.endpoint, "History", request)
        for r in reply.records:
            seen.setdefault((r.kind, r.key, r.retired_at_ms), effect_from_plain(json.loads(r.record_json)))
        return reply

    try:
        reply = fetch()
        final.history_total = int(reply.records_total)
        if len(reply.records) < final.history_total:
            for run_id in runs:
                fetch(run_id=run_id)
    except RpcError as exc:
        final.history_error = str(exc)
    final.history = [seen[k] for k in sorted(seen)]


def _agree(ops: SyncOperatorClient, endpoints: Sequence[str], deadline: float) -> dict[str, tuple[int, str]]:
    """Every replica's (applied index, digest) from one round of concurrent Status reads in which
    they all report the same applied index; {} if no round did before the deadline. The leader's
    background loops keep appending now and then (re-emitted cancels, expiries), so whole-state
    exports read one after the other rarely land on one index; a round of Status reads in
    parallel takes milliseconds."""
    with ThreadPoolExecutor(max_workers=len(endpoints)) as pool:
        while True:
            statuses = list(pool.map(lambda ep: _status(ops, ep, digest=True), endpoints))
            if all(st is not None for st in statuses) and len({st.applied_index for st in statuses if st}) == 1:
                return {
                    ep: (int(st.applied_index), st.state_digest)
                    for ep, st in zip(endpoints, statuses, strict=True)
                    if st
                }
            if time.monotonic() >= deadline:
                return {}
            time.sleep(0.05)


def _status(ops: SyncOperatorClient, endpoint: str, digest: bool = False) -> operator_pb2.StatusResponse | None:
    try:
        return ops.status(endpoint, include_digest=digest)
    except RpcError:
        return None


def _leader_commit(ops: SyncOperatorClient, deadline: float) -> int:
    while time.monotonic() < deadline:
        for ep in ops.endpoints:
            st = _status(ops, ep)
            if st is not None and st.role == "leader" and st.has_quorum:
                return int(st.commit_index)
        time.sleep(0.2)
    return 0


def _export(ops: SyncOperatorClient, endpoint: str) -> ReplicaFinal:
    final = ReplicaFinal(endpoint)
    try:
        st = ops.status(endpoint)
        reply: operator_pb2.ExportStateResponse = ops.call(endpoint, "ExportState", operator_pb2.ExportStateRequest())
    except RpcError as exc:
        final.error = str(exc)
        return final
    final.node_id, final.commit_index = st.node_id, st.commit_index
    final.applied_index, final.digest = reply.applied_index, reply.state_digest
    try:
        final.state = State.restore(reply.snapshot)
    except Exception as exc:  # a snapshot the core cannot read is itself the finding
        final.error = f"snapshot of {endpoint} does not restore: {exc}"
    return final


# == logical operations ============================================================================


@dataclass
class Logical:
    """One operation as the checker sees it: every attempt with one request id merged."""

    process: str
    f: str
    key: str | None
    value: Any
    first: Op
    completion: Op | None
    type: str
    result: Any = None
    call_ns: int = 0
    ret_ns: float = lin.INF
    request_id: str | None = None
    resolved: str | None = None
    """For an unknown write: ``applied`` or ``not_applied`` (from the final state), else None."""
    had_unknown: bool = False
    """Some attempt got no answer (info): counted as unknown, applied or not, however it resolved."""

    @property
    def ok(self) -> bool:
        return self.type == OK

    @property
    def stale(self) -> bool:
        return self.first.stale


def logical_ops(history: History) -> list[Logical]:
    """Invocations with their completions; attempts sharing a request id merge into one op whose
    interval runs from the first invocation to the answer (ok first, then fail, else unknown)."""
    groups: dict[str, list[tuple[Op, Op | None]]] = defaultdict(list)
    singles: list[Logical] = []
    for pair in history.pairs():
        inv, done = pair.invoke, pair.completion
        if inv.request_id:
            groups[inv.request_id].append((inv, done))
            continue
        singles.append(_logical([(inv, done)]))
    merged = [_logical(attempts) for attempts in groups.values()]
    return sorted(singles + merged, key=lambda lo: lo.first.index)


def _logical(attempts: list[tuple[Op, Op | None]]) -> Logical:
    attempts.sort(key=lambda a: a[0].index)
    first = attempts[0][0]
    done = [d for _, d in attempts if d is not None]
    chosen = next((d for d in done if d.type == OK), None) or next((d for d in done if d.type == FAIL), None)
    type_ = chosen.type if chosen is not None else INFO
    lo = Logical(first.process, first.f, first.key, first.value, first, chosen, type_, request_id=first.request_id)
    lo.had_unknown = any(d is None or d.type == INFO for _, d in attempts)
    lo.call_ns = first.time_ns
    if chosen is not None:
        lo.result = chosen.value
        lo.ret_ns = chosen.time_ns
    return lo


# == the report ====================================================================================


@dataclass
class Violation:
    invariant: str
    message: str
    ops: list[int] = field(default_factory=list)
    """History indices that show it."""
    key: str | None = None
    expected: str = ""
    effects: list[Observed] = field(default_factory=list)
    """Stream entries that show it."""
    state: str = ""
    """The replica state involved, as read after heal."""
    at_ns: int | None = None
    """When the anomaly first showed (monotonic ns; None: only the final state shows it)."""


@dataclass
class CheckReport:
    invariants: dict[str, list[str]]
    linearizability: dict[str, tuple[int, int]]
    op_counts: dict[str, int]
    ok: bool
    excerpt: str
    stats: dict[str, int] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    undecided: dict[str, list[str]] = field(default_factory=dict)
    """Per model, the histories whose search exhausted its budget (neither proven nor refuted)."""
    lin_steps: dict[str, int] = field(default_factory=dict)
    """Per model, the most search steps any one history took (against ``budget``)."""
    budget: int = lin.DEFAULT_BUDGET
    t0_ns: int = 0
    """The history's start (monotonic ns): a violation's ``at_ns`` minus this is seconds into the run."""

    @property
    def verdict(self) -> str:
        """``pass``, ``fail`` (a violation) or ``undecided`` (no violation, some search exhausted)."""
        if self.violations:
            return "fail"
        return "undecided" if any(self.undecided.values()) else "pass"

    def summary(self) -> str:
        lines = ["operations: " + ", ".join(f"{k} {v}" for k, v in self.op_counts.items())]
        lines.append("cluster: " + ", ".join(f"{k} {v}" for k, v in sorted(self.stats.items())))
        for name, (checked, good) in self.linearizability.items():
            undecided = len(self.undecided.get(name, ()))
            lines.append(f"linearizability {name}: {good}/{checked} histories linearizable, {undecided} undecided")
        for name, found in self.invariants.items():
            lines.append(f"invariant {name}: {len(found)} violation(s)")
        lines.append("OK" if self.ok else "FAILED\n" + self.excerpt)
        return "\n".join(lines)


READ_OF_RETIRED = "read_cancel_retired"
"""A ``read_cancel`` that found no run, of a run that retired, and that cannot be told to have
come after the retirement (a stale read, one invoked before any create in the run was
acknowledged, a run whose RunRetired no store has): it would read as 0 and says nothing about
the run's cancel generation. Such reads are renamed to this, out of every cancel-generation
check, and counted. A fresh read that found no run, invoked after a create in the run was
acknowledged, came after the retirement (a live run is in the graph); once retired a run's
cancel generation never changes, so it reads the RunRetired's and is checked as such."""


@dataclass
class Retired:
    """What retired, from every node's history store together: a record one node lacks (it
    caught up by a snapshot that covered the pass) another one has, since every pass is applied
    by the log on a quorum and each of those writes it to its store in the apply."""

    runs: dict[str, RunRetired] = field(default_factory=dict)
    executions: dict[str, ExecutionRetired] = field(default_factory=dict)
    decisions: dict[str, DecisionRetired] = field(default_factory=dict)
    proposals: dict[str, ProposalRetired] = field(default_factory=dict)

    @classmethod
    def of(cls, finals: Sequence[ReplicaFinal]) -> Retired:
        out = cls()
        for f in finals:
            for fx in f.history:
                book: dict[str, Any] | None
                key: str
                match fx:
                    case RunRetired():
                        book, key = out.runs, fx.run_id
                    case ExecutionRetired():
                        book, key = out.executions, fx.execution_id
                    case DecisionRetired():
                        book, key = out.decisions, fx.decision_id
                    case ProposalRetired():
                        book, key = out.proposals, fx.digest
                    case _:
                        book, key = None, ""
                # An id retired twice (re-used after its tombstone was forgotten): the latest.
                if book is not None and (key not in book or book[key].retired_at_ms < fx.retired_at_ms):
                    book[key] = fx
        return out


class _Check:
    def __init__(self, history: History, finals: Sequence[ReplicaFinal], budget: int = lin.DEFAULT_BUDGET) -> None:
        self.budget = budget
        self.undecided: dict[str, list[str]] = {}
        self.lin_steps: dict[str, int] = {}
        self.h = history
        self.finals = list(finals)
        self.states = [f.state for f in finals if f.state is not None]
        self.violations: list[Violation] = []
        self.ops = logical_ops(history)
        self.t_end = max([op.time_ns for op in history.ops] + [ob.time_ns for ob in history.observed] + [0]) + 1
        self.counts = Counter[str]()
        self.lin: dict[str, tuple[int, int]] = {}
        self.retired = Retired.of(self.finals)
        self._reads_of_retired_runs()

    def _reads_of_retired_runs(self) -> None:
        """See :data:`READ_OF_RETIRED`."""
        gone = set(self.retired.runs).union(*(st.retired_runs for st in self.states))
        created: dict[str, float] = {}
        """run -> when the first acknowledged create in it returned."""
        for lo in self.ops:
            if lo.f == "create" and lo.ok and isinstance(lo.value, dict) and lo.value.get("run"):
                run = str(lo.value["run"])
                created[run] = min(created.get(run, lin.INF), lo.ret_ns)
        for lo in self.ops:
            if not (
                lo.f == "read_cancel"
                and lo.ok
                and isinstance(lo.result, dict)
                and not lo.result.get("exists", True)
                and lo.key in gone
            ):
                continue
            record = self.retired.runs.get(lo.key or "")
            if record is not None and not lo.stale and created.get(lo.key or "", lin.INF) < lo.call_ns:
                lo.result = {**lo.result, "generation": record.cancel_generation}
                self.counts["cancel_reads_of_retired_runs_checked"] += 1
            else:
                lo.f = READ_OF_RETIRED
                self.counts["cancel_reads_of_retired_runs"] += 1

    def run_retired(self, f: ReplicaFinal, run_id: str) -> bool:
        """The run is not in this replica's live state because it retired (its tombstone is
        there, or some node's history has its record)."""
        st = f.state
        return st is not None and run_id not in st.runs and (run_id in st.retired_runs or run_id in self.retired.runs)

    def execution_retired(self, f: ReplicaFinal, execution_id: str) -> bool:
        st = f.state
        return (
            st is not None
            and execution_id not in st.executions
            and (execution_id in st.retired_executions or execution_id in self.retired.executions)
        )

    def final_cancel_generation(self, f: ReplicaFinal, run_id: str) -> int | None:
        """The run's cancel generation on this replica after heal: live, or as it retired (its
        RunRetired record); None when it retired and no node's history has the record (the loss
        is reported by ``no_acknowledged_write_lost`` when a cancel of it was acknowledged)."""
        if self.run_retired(f, run_id):
            record = self.retired.runs.get(run_id)
            return record.cancel_generation if record is not None else None
        return f.cancel_generation(run_id)

    def all_decisions(self, st: State) -> list[Decision]:
        """The replica's live decisions, then every retired one no live one shadows, in log order."""
        live = list(st.recovery.decisions.values())
        ids = {d.decision_id for d in live}
        retired = sorted(
            (fx for fx in self.retired.decisions.values() if fx.decision_id not in ids), key=lambda fx: fx.at_ms
        )
        return [decision_from_retired(fx) for fx in retired] + live

    def fail(
        self,
        invariant: str,
        message: str,
        ops: Iterable[int] = (),
        key: str | None = None,
        expected: str = "",
        *,
        effects: Sequence[Observed] = (),
        state: str = "",
        at_ns: int | None = None,
    ) -> None:
        indices = sorted({i for i in ops if 0 <= i < len(self.h.ops)})
        if at_ns is None:
            # The anomaly shows once the last of its entries exists.
            times = [self.h.ops[i].time_ns for i in indices] + [ob.time_ns for ob in effects]
            at_ns = max(times) if times else None
        self.violations.append(
            Violation(
                invariant, message, indices, key, expected, list(effects), state or self.replica_state(key), at_ns
            )
        )

    # -- resolving unknown writes -----------------------------------------------------------------

    def retained_from(self) -> float:
        """The history index after which every applied write is still in every replica's
        idempotency table (it evicts the oldest entries first, in log order): -1 while no table
        was ever full; else just after the earliest retained write of ours completed (a write
        invoked after that was applied after it); inf when that cannot be told."""
        if not self.states:
            return lin.INF
        if all(len(st.idempotency) < st.limits.idempotency_capacity for st in self.states):
            return -1.0
        ours = {(actor_of(lo.process), lo.request_id): lo for lo in self.ops if lo.request_id is not None}
        start = 0.0
        for st in self.states:
            first = next(
                (ours[k] for k in st.idempotency if k in ours and ours[k].completion is not None),
                None,
            )
            if first is None or first.completion is None:
                return lin.INF
            start = max(start, float(first.completion.index))
        return start

    def resolve(self) -> None:
        tables = [st.idempotency for st in self.states]
        retained = self.retained_from()
        for lo in self.ops:
            if lo.type == OK:
                # A retry with the same request id answered: applied (by it or by the lost attempt).
                self.counts["unknown_applied" if lo.had_unknown else "ok"] += 1
            elif lo.type == FAIL:
                # A rejection is never recorded, so an earlier lost attempt was not applied either.
                self.counts["unknown_not_applied" if lo.had_unknown else "fail"] += 1
            elif lo.request_id is None:
                self.counts["unknown_reads"] += 1
            else:
                key = (actor_of(lo.process), lo.request_id)
                found = next((t[key] for t in tables if key in t), None)
                if found is not None:
                    lo.resolved = "applied"
                    outcome = found[1]
                    lo.result = _outcome_result(outcome)
                    lo.ret_ns = self.t_end  # it took effect before the final states were read
                    self.counts["unknown_applied"] += 1
                    self.counts["unknown_applied_from_state"] += 1
                elif tables and lo.first.index > retained:
                    lo.resolved = "not_applied"
                    self.counts["unknown_not_applied"] += 1
                    self.counts["unknown_not_applied_from_state"] += 1
                else:
                    self.counts["unknown_unresolved"] += 1

    # -- linearizability --------------------------------------------------------------------------

    def check_linearizable(self) -> None:
        self._epoch_history()
        self._cancel_histories()

    def _epoch_history(self) -> None:
        ops: list[lin.Operation] = []
        for lo in self.ops:
            if lo.f == "read_epoch" and lo.ok and not lo.stale:
                ops.append(
                    lin.Operation(
                        len(ops), lo.process, lo.call_ns, lo.ret_ns, ("read",), lo.result["epoch"], lo.first.index
                    )
                )
        final_epoch = max((st.recovery.epoch for st in self.states), default=0)
        seen = _first_seen_epochs(self.h)
        # Commit k is applied after the linearization point of every read that returned less, so
        # after that read's invocation: a sound lower bound that keeps the pending set small.
        below: dict[int, int] = {}
        for o in ops:
            below[o.output] = max(below.get(o.output, -1), int(o.call))
        floor = -1
        for k in range(1, final_epoch + 1):
            floor = max(floor, below.get(k - 1, -1))
            ret = seen.get(k, self.t_end)
            ops.append(lin.Operation(len(ops), "cluster", min(floor, ret), ret, ("commit", k), None, None))
        for f in self.finals:
            if f.state is not None:
                ops.append(
                    lin.Operation(len(ops), f"final:{f.node_id}", self.t_end + 1, lin.INF, ("read",), f.epoch, None)
                )
        self._run_lin("epoch", lin.EpochModel(), ops, "epoch")

    def _cancel_histories(self) -> None:
        by_run: dict[str, list[Logical]] = defaultdict(list)
        for lo in self.ops:
            if lo.key is not None and lo.f in ("cancel_run", "read_cancel"):
                by_run[lo.key].append(lo)
        for run_id in sorted(by_run):
            ops: list[lin.Operation] = []
            for lo in by_run[run_id]:
                if lo.f == "read_cancel":
                    if lo.ok and not lo.stale:
                        ops.append(
                            lin.Operation(
                                len(ops),
                                lo.process,
                                lo.call_ns,
                                lo.ret_ns,
                                ("read",),
                                lo.result["generation"],
                                lo.first.index,
                            )
                        )
                    continue
                output = _cancel_output(lo)
                if output is _SKIP:
                    continue
                ops.append(
                    lin.Operation(
                        len(ops),
                        lo.process,
                        lo.call_ns,
                        lo.ret_ns,
                        ("cancel", lo.value["observed"]),
                        output,
                        lo.first.index,
                    )
                )
            for f in self.finals:
                final = self.final_cancel_generation(f, run_id) if f.state is not None else None
                if final is not None:
                    ops.append(
                        lin.Operation(len(ops), f"final:{f.node_id}", self.t_end + 1, lin.INF, ("read",), final, None)
                    )
            self._run_lin("cancel_generation", lin.CancelGenerationModel(), ops, run_id)

    def _run_lin(self, name: str, model: lin.Model, ops: list[lin.Operation], key: str) -> None:
        checked, good = self.lin.get(name, (0, 0))
        result = lin.check(model, ops, self.budget)
        self.lin[name] = (checked + 1, good + (1 if result.ok else 0))
        self.lin_steps[name] = max(self.lin_steps.get(name, 0), result.steps)
        self.undecided.setdefault(name, [])
        if result.ok:
            return
        subject = model.name if key == model.name else f"{model.name} of {key}"
        if result.exhausted:
            self.undecided[name].append(
                f"{subject}: search budget of {self.budget} steps exhausted over {len(ops)} operations"
            )
            return
        at_ns: int | None = None
        earliest = self._first_anomaly(model, ops)
        if earliest is not None:
            t, result = earliest
            at_ns = int(t)
        stuck = result.stuck
        what = "no linearization exists"
        path = " -> ".join(model.describe(o.input, o.output) for o in result.prefix[-6:]) or "(nothing)"
        detail = f"{subject}: {what}; longest linearization ends with {path}"
        if stuck is not None:
            detail += f"; then {model.describe(stuck.input, stuck.output)} by {stuck.process} cannot be placed"
        last = [o for o in ops if at_ns is not None and o.ret == at_ns]
        refs = [o.ref for o in (*result.prefix[-4:], stuck, *last) if o is not None and o.ref is not None]
        if at_ns is not None:
            detail += f"; the history up to {(at_ns - self.h.t0_ns) / 1e9:.3f} s is already not linearizable"
        self.fail(
            f"linearizability:{name}",
            detail,
            refs,
            key,
            expected="a single order of these operations, consistent with real time, that the model accepts",
            at_ns=at_ns if at_ns is not None else self.t_end,
        )

    def _first_anomaly(self, model: lin.Model, ops: list[lin.Operation]) -> tuple[float, lin.Result] | None:
        """The earliest completion time t at which the history cut there (operations invoked by
        t; those completing later pending, reads among them dropped) is already not linearizable,
        with that search's result. Cutting is monotone (a longer cut contains every constraint of
        a shorter one), so a binary search over the completion times finds it."""
        times = sorted({o.ret for o in ops if o.ret != lin.INF})
        lo, hi, best = 0, len(times) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            result = lin.check(model, _cut(ops, times[mid]), self.budget)
            if not result.ok and not result.exhausted:
                best, hi = (times[mid], result), mid - 1
            else:
                lo = mid + 1
        return best

    # -- invariants -------------------------------------------------------------------------------

    def monotonic(self) -> None:
        """Epochs and cancel generations never decrease: per process, across real time (fresh
        reads), and along the applied index (any two reads of one log)."""
        for name, f, field_, key_of in (
            ("epoch_never_decreases", "read_epoch", "epoch", None),
            ("cancel_generation_never_decreases", "read_cancel", "generation", "key"),
        ):
            reads = [lo for lo in self.ops if lo.f == f and lo.ok]
            groups: dict[str | None, list[Logical]] = defaultdict(list)
            for lo in reads:
                groups[lo.key if key_of else None].append(lo)
            for key, items in groups.items():
                self._per_process(name, field_, items, key)
                self._by_applied_index(name, field_, items, key)
        # Write results count as what a session saw: a CancelRun that raised to n, then a fresh
        # read of the same session returning less.
        last_write: dict[tuple[str, str], Logical] = {}
        for lo in self.ops:
            if lo.key is None:
                continue
            if lo.f == "cancel_run" and lo.ok and isinstance(lo.result, dict) and "generation" in lo.result:
                last_write[(lo.process, lo.key)] = lo
            elif lo.f == "read_cancel" and lo.ok and not lo.stale:
                w = last_write.get((lo.process, lo.key))
                before = w is not None and w.completion is not None and w.completion.index < lo.first.index
                if before and w is not None and lo.result["generation"] < w.result["generation"]:
                    raised, got = w.result["generation"], lo.result["generation"]
                    self.fail(
                        "cancel_generation_never_decreases",
                        f"{lo.process} raised {lo.key} to {raised}, then read {got}",
                        [w.first.index, lo.first.index],
                        lo.key,
                        expected=f"a generation >= {w.result['generation']}",
                    )
        # The recovery log: epochs commit one by one, in order.
        last = 0
        for ob in self.h.observed:
            if ob.kind == "Resync":
                last = 0
            elif ob.kind == "EpochCommitted":
                epoch = int(ob.fields["epoch"])
                if last and epoch != last + 1:
                    self.fail(
                        "epoch_never_decreases",
                        f"EpochCommitted {epoch} followed EpochCommitted {last} (cursor {ob.cursor})",
                        expected=f"epoch {last + 1}",
                    )
                last = epoch
        for final in self.finals:
            st = final.state
            if st is None:
                continue
            epochs = [d.epoch for d in st.recovery.decisions.values() if d.epoch is not None]
            if any(b <= a for a, b in itertools.pairwise(epochs)):
                self.fail(
                    "epoch_never_decreases", f"{final.node_id}: decision epochs not increasing in log order: {epochs}"
                )
            if epochs and st.recovery.epoch < epochs[-1]:
                self.fail(
                    "epoch_never_decreases",
                    f"{final.node_id}: epoch {st.recovery.epoch} below its last decision's {epochs[-1]}",
                )

    def _per_process(self, name: str, field_: str, items: list[Logical], key: str | None) -> None:
        last: dict[str, Logical] = {}
        for lo in sorted(items, key=lambda x: x.first.index):
            if lo.stale:
                continue
            prev = last.get(lo.process)
            before = prev is not None and prev.completion is not None and prev.completion.index < lo.first.index
            if before and prev is not None and lo.result[field_] < prev.result[field_]:
                was, now = prev.result[field_], lo.result[field_]
                self.fail(
                    name,
                    f"{lo.process} read {field_} {was} then {now} (same session, fresh reads)",
                    [prev.first.index, lo.first.index],
                    key if key is not None else lo.key,
                    expected=f"{field_} >= {prev.result[field_]}",
                )
            last[lo.process] = lo

    def _by_applied_index(self, name: str, field_: str, items: list[Logical], key: str | None) -> None:
        rows = sorted(
            (lo.result["applied_index"], lo.result[field_], lo.first.index)
            for lo in items
            if isinstance(lo.result, dict) and lo.result.get("applied_index", 0) > 0
        )
        best_value, best_at = -1, -1
        best_op = -1
        for applied, value, at in rows:
            if value < best_value and applied >= best_at:
                self.fail(
                    name,
                    f"{field_} {value} read at applied index {applied}, "
                    f"but {best_value} was read at applied index {best_at}",
                    [best_op, at],
                    key if key is not None else self.h.ops[at].key,
                    expected=f"{field_} >= {best_value} at any applied index >= {best_at} of the same log",
                )
                return
            if value > best_value:
                best_value, best_at, best_op = value, applied, at

    def fresh_reads(self) -> None:
        """A read served as fresh must say so, and must see everything completed before it began."""
        committed_seen = _first_seen_epochs(self.h)
        for f, field_ in (("read_epoch", "epoch"), ("read_cancel", "generation")):
            by_key: dict[str | None, list[Logical]] = defaultdict(list)
            for lo in self.ops:
                if lo.f == f and lo.ok:
                    by_key[lo.key].append(lo)
            for key, items in by_key.items():
                done = sorted(items, key=lambda lo: lo.ret_ns)
                j, best, best_lo = 0, -1, None
                for lo in sorted(items, key=lambda x: x.call_ns):
                    while j < len(done) and done[j].ret_ns < lo.call_ns:
                        if done[j].result[field_] > best:
                            best, best_lo = done[j].result[field_], done[j]
                        j += 1
                    if lo.stale:
                        continue
                    if lo.result.get("stale"):
                        self.fail(
                            "fresh_read_not_stale",
                            f"{lo.process}: a read asked fresh came back labelled stale",
                            [lo.first.index],
                            key,
                        )
                        continue
                    if best_lo is not None and lo.result[field_] < best:
                        self.fail(
                            "fresh_read_not_stale",
                            f"fresh read of {key} returned {field_} {lo.result[field_]} "
                            f"after a read had returned {best}",
                            [best_lo.first.index, lo.first.index],
                            key,
                            expected=f"{field_} >= {best}",
                        )
                    if f == "read_epoch":
                        known = max((k for k, t in committed_seen.items() if t < lo.call_ns), default=0)
                        if lo.result[field_] < known:
                            self.fail(
                                "fresh_read_not_stale",
                                f"fresh read returned epoch {lo.result[field_]} "
                                f"after epoch {known} had been seen committed",
                                [lo.first.index],
                                key,
                                expected=f"epoch >= {known}",
                            )

    def _configs_at(self, commit_index: int | None, final: tuple[set[str], int]) -> list[tuple[set[str], int]]:
        """The recovery configurations a commit at ``commit_index`` may have been counted under.

        The voter set changes at runtime (``replace-node``: a member joins the voters, another
        leaves), so a proposal committed earlier is judged by the configuration in force at its
        commit: the last ``RecoveryConfigured`` of the stream before that log index (the runner
        puts the configuration the run started with at index 0). Without its commit's index, or
        with no configuration known before it (a gap in the stream), every configuration the run
        is known to have had, the final one first."""
        configs = sorted(
            (ob.log_index, set(ob.fields.get("voters") or ()), int(ob.fields.get("quorum") or 0))
            for ob in self.h.observed
            if ob.kind == "RecoveryConfigured"
        )
        if commit_index is not None:
            before = [(v, q) for at, v, q in configs if at < commit_index]
            if before:
                return [before[-1]]
        return [final, *((v, q) for _, v, q in configs)]

    def decisions(self) -> None:
        """One victim decision per digest; no commit without its votes; nothing released before the epoch."""
        commits: dict[str, int] = {}
        for ob in self.h.observed:
            if ob.kind in ("EpochCommitted", "VictimChosen") and "digest" in ob.fields:
                commits.setdefault(ob.fields["digest"], ob.log_index)
        for f in self.finals:
            st = f.state
            if st is None:
                continue
            rb = st.recovery
            every = self.all_decisions(st)
            per_digest = Counter(d.digest for d in every)
            for digest, n in sorted(per_digest.items()):
                if n > 1:
                    ids = [d.decision_id for d in every if d.digest == digest]
                    self.fail(
                        "one_decision_per_digest",
                        f"{f.node_id}: digest {digest[:16]} has {n} decisions {ids}",
                        expected="exactly one",
                    )
            final = (set(rb.config.voters), rb.config.quorum)
            for p in rb.proposals.values():
                if p.status is ProposalStatus.COMMITTED:
                    candidates = self._configs_at(commits.get(p.digest), final)
                    if not any(len(set(p.approvals) & v) >= q for v, q in candidates):
                        voters, quorum = candidates[0]
                        yes = sorted(set(p.approvals) & voters)
                        self.fail(
                            "recovery_committed_with_votes",
                            f"{f.node_id}: proposal {p.digest[:16]} committed with approvals {yes} (quorum {quorum})",
                            expected=f"at least {quorum} approvals from {sorted(voters)}",
                        )
            # A retired committed proposal: its votes are in its decision's record.
            for digest, pr in sorted(self.retired.proposals.items()):
                if digest in rb.proposals or pr.proposal_status != ProposalStatus.COMMITTED.value:
                    continue
                dr = self.retired.decisions.get(pr.decision_id or "")
                if dr is None:
                    continue
                approved = {v for v, ok in zip(dr.voters, dr.vote_approvals, strict=True) if ok}
                candidates = self._configs_at(commits.get(digest), final)
                if not any(len(approved & v) >= q for v, q in candidates):
                    voters, quorum = candidates[0]
                    yes = sorted(approved & voters)
                    self.fail(
                        "recovery_committed_with_votes",
                        f"{f.node_id}: retired proposal {digest[:16]} committed with approvals {yes} (quorum {quorum})",
                        expected=f"at least {quorum} approvals from {sorted(voters)}",
                    )
        # The stream: votes reach the quorum before the commit; one VictimChosen per digest.
        votes: dict[str, tuple[int, int]] = {}
        proposed: set[str] = set()
        chosen: dict[str, str] = {}
        for ob in self.h.observed:
            k = ob.kind
            if k == "Resync":
                votes.clear()
                proposed.clear()
            elif k == "RecoveryProposed":
                proposed.add(ob.fields["digest"])
            elif k == "VoteRecorded":
                votes[ob.fields["digest"]] = (int(ob.fields["approvals"]), int(ob.fields["quorum"]))
            elif k == "EpochCommitted":
                digest = ob.fields["digest"]
                if digest in proposed:
                    got = votes.get(digest)
                    if got is None or got[0] < got[1]:
                        self.fail(
                            "recovery_committed_with_votes",
                            f"epoch {ob.fields['epoch']} committed for {digest[:16]} "
                            f"with votes {got} (approvals, quorum)",
                            expected="approvals >= quorum before the commit",
                            effects=[ob],
                        )
            elif k == "VictimChosen":
                digest, did = ob.fields["digest"], ob.fields["decision_id"]
                if chosen.setdefault(digest, did) != did:
                    self.fail(
                        "one_decision_per_digest",
                        f"VictimChosen {did} for digest {digest[:16]}, which already had {chosen[digest]}",
                        expected="one decision per digest",
                        effects=[ob],
                    )

    def releases(self) -> None:
        """Nothing of a victim is released, in any position of any apply, before the epoch commit
        that decided it.

        A victim is every execution a decision stops (the CAS to CANCELLING with cause
        ``victim:<decision>``, a tie-break's ``Yielded``), at the generation it had. Over the
        stream (each stretch between resyncs on its own): no ``Released`` of that execution and
        generation from the recovery's proposal (or, when the proposal was not seen, from the start
        of the commit's log entry) until the ``EpochCommitted`` of the decision's digest (a release
        by the lease's own TTL, reason ``ttl_expired``, is not recovery's and may come any time); a decision
        that stops anyone must have that commit before it at all. Over every replica: a decision
        that released something committed an epoch above the one before it, and every release it
        records was seen after its commit."""
        for seg in _segments(self.h.observed):
            dec = _Decided(seg)
            for did, (digest, epoch, ob) in dec.decisions.items():
                if epoch is not None and digest not in dec.committed:
                    self.fail(
                        "no_release_before_epoch_commit",
                        f"decision {did} names epoch {epoch} for {digest[:16]}, but no EpochCommitted of it came first",
                        expected="EpochCommitted before the decision",
                        effects=[ob],
                    )
            for execution_id, generation, digest, named in dec.stopped:
                commit = dec.committed.get(digest) if digest is not None else None
                if commit is None:
                    if digest is not None:
                        self.fail(
                            "no_release_before_epoch_commit",
                            f"{execution_id} g{generation} stopped by recovery {digest[:16]} without its epoch commit",
                            expected="EpochCommitted before the victim is stopped",
                            effects=[named],
                        )
                    continue
                opened = [c for c in dec.proposed.get(digest, ()) if c < commit.cursor]
                window = max(opened) if opened else commit.log_index << CURSOR_SHIFT
                for ob in seg:
                    if (
                        ob.kind == "Released"
                        # A lease's own TTL ending it is the holder's rule, not recovery's release.
                        and ob.fields.get("reason") != "ttl_expired"
                        and window <= ob.cursor < commit.cursor
                        and ob.fields["execution_id"] == execution_id
                        and int(ob.fields["generation"]) == generation
                    ):
                        self.fail(
                            "no_release_before_epoch_commit",
                            f"{ob.fields['target_id']} of victim {execution_id} g{generation} released at cursor "
                            f"{ob.cursor} ({ob.fields.get('reason')}), before epoch {commit.fields['epoch']} "
                            f"was committed at cursor {commit.cursor}",
                            expected="EpochCommitted before every release of the victim",
                            key=execution_id,
                            effects=[ob, commit],
                        )
            released_at = {
                (ob.fields["target_id"], ob.fields["execution_id"]): ob.cursor for ob in seg if ob.kind == "Released"
            }
            st = self.states[0] if self.states else None
            for d in self.all_decisions(st) if st is not None else ():
                commit = dec.committed.get(d.digest)
                if commit is None or d.decision_id not in dec.decisions:
                    continue
                for pair in d.released:
                    at = released_at.get(pair)
                    if at is None or at < commit.cursor:
                        self.fail(
                            "no_release_before_epoch_commit",
                            f"decision {d.decision_id} records releasing {pair[0]} of {pair[1]}, "
                            f"seen at cursor {at}; its epoch commit is at {commit.cursor}",
                            expected="a Released of it after the commit",
                            key=pair[1],
                            effects=[commit],
                        )
        for f in self.finals:
            if f.state is None:
                continue
            for d in self.all_decisions(f.state):
                if d.released and d.epoch is None:
                    self.fail(
                        "no_release_before_epoch_commit",
                        f"{f.node_id}: decision {d.decision_id} released {d.released} without committing an epoch",
                    )
                if d.released and d.epoch is not None and d.epoch <= d.epoch_before:
                    self.fail(
                        "no_release_before_epoch_commit",
                        f"{f.node_id}: decision {d.decision_id} released at epoch {d.epoch}, "
                        f"not above {d.epoch_before}",
                    )

    def stale_epochs(self) -> None:
        """No acquire presenting an epoch older than the execution's rollback epoch is acknowledged.

        The rollback epochs come from the stream (a victim's CAS names its decision, whose
        ``VictimChosen`` names the epoch; ``Yielded`` names it itself) with the time they were
        first seen: an acquire invoked after that was applied after the fence. Every replica keeps
        the fence: its ``recovery.fence`` of the execution is at least that epoch."""
        fences: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for seg in _segments(self.h.observed):
            dec = _Decided(seg)
            for execution_id, _generation, _digest, named in dec.stopped:
                epoch = dec.epoch_of(named)
                if epoch is not None:
                    fences[execution_id].append((named.time_ns, epoch))
        for lo in self.ops:
            if not (lo.f.startswith("acquire") and lo.ok and isinstance(lo.value, dict)):
                continue
            presented = lo.value.get("observed_epoch")
            execution_id = lo.value.get("execution")
            fenced = max((e for t, e in fences.get(execution_id, ()) if t < lo.call_ns), default=0)
            if presented is not None and presented < fenced:
                self.fail(
                    "no_stale_epoch_acknowledged",
                    f"{execution_id} acquired {lo.key} presenting epoch {presented} after it was rolled back "
                    f"at epoch {fenced}",
                    [lo.first.index],
                    lo.key,
                    expected=f"StaleEpoch (FAILED_PRECONDITION stale_epoch): an epoch >= {fenced} is required",
                )
        for execution_id, seen in sorted(fences.items()):
            epoch = max(e for _, e in seen)
            for f in self.finals:
                if self.execution_retired(f, execution_id):
                    # Its fence left with it: a retired execution acquires nothing any more.
                    self.counts["fences_of_retired_executions"] += 1
                    continue
                if f.state is not None and f.state.recovery.fence.get(execution_id, 0) < epoch:
                    self.fail(
                        "no_stale_epoch_acknowledged",
                        f"{f.node_id}: {execution_id} was rolled back at epoch {epoch}, but the replica fences it "
                        f"at {f.state.recovery.fence.get(execution_id, 0)}",
                        key=execution_id,
                        expected=f"fence >= {epoch} on every replica",
                    )

    def cancelled_commits(self) -> None:
        """No attempt asked to stop (cancelled run or rolled-back victim) ever commits."""
        stopped: set[tuple[str, int]] = set()
        for ob in self.h.observed:
            if ob.kind == "ExecutionStateChanged":
                key = (ob.fields["execution_id"], int(ob.fields["generation"]))
                if ob.fields["after"] in _STOPPED:
                    stopped.add(key)
                elif ob.fields["after"] == ExecStatus.COMPLETED.value and key in stopped:
                    self.fail(
                        "no_cancelled_generation_commits",
                        f"{key[0]} generation {key[1]} COMPLETED after it was asked to stop (cursor {ob.cursor})",
                        [
                            lo.first.index
                            for lo in self.ops
                            if lo.f.startswith("complete") and lo.key == key[0] and lo.ok
                        ],
                        key[0],
                        expected="the commit refused (cancel_generation_mismatch / run_cancelled / stale generation)",
                    )
        for lo in self.ops:
            if lo.f == "complete_cancelled" and lo.ok:
                self.fail(
                    "no_cancelled_generation_commits",
                    f"{lo.key}: a commit presenting cancel generation 0 in a cancelled run was accepted",
                    [lo.first.index],
                    lo.key,
                    expected="FAILED_PRECONDITION",
                )
        for f, st, by_run in self._cancelled_runs_by_replica():
            for run in st.runs.values():
                if run.cancel_generation == 0:
                    continue
                scope = st.cancel.scopes.get(f"run:{run.run_id}")
                if scope is None:
                    continue
                for ex in by_run[run.run_id]:
                    if (
                        ex.run_id == run.run_id
                        and ex.status is ExecStatus.COMPLETED
                        and ex.status_at_ms > scope.requested_at_ms
                    ):
                        self.fail(
                            "no_cancelled_generation_commits",
                            f"{f.node_id}: {ex.execution_id} of cancelled run {run.run_id} "
                            f"COMPLETED at {ex.status_at_ms} ms, "
                            f"after the cancel at {scope.requested_at_ms} ms",
                        )

    def _cancelled_runs_by_replica(self) -> Iterator[tuple[Any, Any, dict[str, list[Any]]]]:
        """Each replica's final state with its executions grouped by run (replicas whose state
        could not be read are skipped)."""
        for f in self.finals:
            st = f.state
            if st is None:
                continue
            by_run: dict[str, list[Any]] = defaultdict(list)
            for ex in st.executions.values():
                by_run[ex.run_id].append(ex)
            yield f, st, by_run

    def edges(self) -> None:
        """A close or an update from an older generation never removes or changes an edge of a newer one.

        Over the stream (each stretch between resyncs): an edge replaced or closed by an older
        (generation, version) than the one open, or registered by a generation older than the
        execution's latest ``GenerationAdvanced``. Over the operations: an acknowledged close or
        register that changed an edge (its outcome has ``WaitClosed``/``WaitRegistered``) while
        presenting a generation older than one the execution was known to have reached before it
        was invoked (a retry acknowledged with that generation, or its ``GenerationAdvanced`` seen)."""
        advanced: dict[str, list[tuple[int, int]]] = defaultdict(list)
        """execution -> (time first known, generation reached)."""
        for seg in _segments(self.h.observed):
            open_: dict[str, tuple[int, int]] = {}
            generation: dict[str, int] = {}
            for ob in seg:
                if ob.kind == "GenerationAdvanced":
                    eid, after = ob.fields["execution_id"], int(ob.fields["after"])
                    generation[eid] = max(generation.get(eid, 0), after)
                    advanced[eid].append((ob.time_ns, after))
                    continue
                if ob.kind not in ("WaitRegistered", "WaitClosed"):
                    continue
                edge = ob.fields["edge_id"]
                waiter = edge.partition(">")[0]
                named = (int(ob.fields["waiter_generation"]), int(ob.fields["edge_version"]))
                current = open_.get(edge)
                if ob.kind == "WaitRegistered":
                    if named[0] < generation.get(waiter, 0):
                        self.fail(
                            "no_edge_changed_by_older_generation",
                            f"{edge} registered by generation {named[0]} after {waiter} reached "
                            f"generation {generation[waiter]} (cursor {ob.cursor})",
                            key=edge,
                            expected="an older generation's RegisterWait refused (stale generation)",
                            effects=[ob],
                        )
                    elif current is not None and named < current:
                        self.fail(
                            "no_edge_changed_by_older_generation",
                            f"{edge} open at (generation, version) {current} replaced by {named} (cursor {ob.cursor})",
                            key=edge,
                            expected="a re-register from an older (generation, version) is a no-op",
                            effects=[ob],
                        )
                    open_[edge] = max(named, current) if current is not None else named
                else:
                    open_.pop(edge, None)
                    if current is not None and named < current:
                        self.fail(
                            "no_edge_changed_by_older_generation",
                            f"{edge} open at (generation, version) {current} closed by {named} (cursor {ob.cursor})",
                            key=edge,
                            expected="a close from an older generation is a no-op",
                            effects=[ob],
                        )
        for lo in self.ops:
            acked = lo.f == "retry" and lo.ok and isinstance(lo.result, dict) and "generation" in lo.result
            if acked and lo.completion is not None and lo.key is not None:
                advanced[lo.key].append((lo.completion.time_ns, int(lo.result["generation"])))
        for lo in self.ops:
            if not (
                lo.ok and lo.f.startswith(("close_wait", "register_wait")) and lo.key and isinstance(lo.value, dict)
            ):
                continue
            effects = lo.result.get("effects", ()) if isinstance(lo.result, dict) else ()
            if not {"WaitClosed", "WaitRegistered"} & set(effects):
                continue
            waiter, presented = lo.key.partition(">")[0], int(lo.value["waiter_generation"])
            newer = max((g for t, g in advanced.get(waiter, ()) if t < lo.call_ns), default=0)
            if newer > presented:
                self.fail(
                    "no_edge_changed_by_older_generation",
                    f"{lo.f} {lo.key} from generation {presented} changed an edge ({', '.join(effects)}) after "
                    f"{waiter} had reached generation {newer}",
                    [lo.first.index],
                    lo.key,
                    expected="NOOP stale_generation, or a rejection; the newer edge untouched",
                )

    def applied_once(self) -> None:
        """Every acknowledged write is applied exactly once.

        Per request id (while no replica's idempotency table evicted it): at most one attempt is
        answered as a first application (``duplicate`` false), the others are answered from the
        table; an attempt rejected by the core after the write was seen applied (its effects in
        the stream before the attempt was sent) was not answered from the table. Per replica, the
        counters writes add to match the writes applied: an execution's ``cost_consumed`` is the
        sum of the RecordCost the replica recorded as applied, a held target's lease ``version``
        at least the acquires it recorded with an ``Acquired`` and at most those plus the waits on
        it it recorded (a hand-off grants a queued waiter without an Acquire; while no table
        evicted)."""
        if not self.states:
            return
        retained = self.retained_from()
        tables = [st.idempotency for st in self.states]
        seen = _effect_times(self.h)
        attempts: dict[str, list[tuple[Op, Op | None]]] = defaultdict(list)
        for pair in self.h.pairs():
            if pair.invoke.request_id:
                attempts[pair.invoke.request_id].append((pair.invoke, pair.completion))
        for rid, tries in attempts.items():
            first = min(inv.index for inv, _ in tries)
            if first <= retained:
                continue
            fresh = [d for _, d in tries if d is not None and d.type == OK and not _duplicate(d.value)]
            if len(fresh) > 1:
                self.fail(
                    "every_write_applied_once",
                    f"request {rid} answered as a first application {len(fresh)} times",
                    [d.index for d in fresh],
                    tries[0][0].key,
                    expected="one first application; every other attempt answered from the idempotency table",
                )
            key = (actor_of(tries[0][0].process), rid)
            found = next((t[key] for t in tables if key in t), None)
            if found is None:
                continue
            applied_ns = _applied_seen(found[1], seen)
            for inv, d in tries:
                if d is None or d.type != FAIL or not _core_rejection(d.value):
                    continue
                if applied_ns is not None and applied_ns < inv.time_ns:
                    self.fail(
                        "every_write_applied_once",
                        f"request {rid} was applied (its effects seen at "
                        f"{(applied_ns - self.h.t0_ns) / 1e9:.3f} s), then an attempt of it was rejected "
                        f"({(d.value or {}).get('code')})",
                        [inv.index, d.index],
                        inv.key,
                        expected="the recorded outcome (duplicate), never a rejection",
                    )
        self._effects_once()
        if retained != -1:
            return  # some table evicted: what was applied can no longer be told exactly
        self._counters()

    def _effects_once(self) -> None:
        """An applied write's effects show once: no two ``Acquired`` of one target carry one
        lease, no execution advances to one generation twice, no cost total repeats (a write
        applied again, or an effect journaled again for a duplicate answered from the table)."""
        for seg in _segments(self.h.observed):
            first: dict[tuple[str, str, int], Observed] = {}
            for ob in seg:
                f = ob.fields
                if ob.kind == "Acquired":
                    key = (ob.kind, f["target_id"], int(f["lease"]))
                elif ob.kind == "GenerationAdvanced":
                    key = (ob.kind, f["execution_id"], int(f["after"]))
                elif ob.kind == "CostRecorded":
                    key = (ob.kind, f["execution_id"], int(f["cost_consumed"]))
                else:
                    continue
                if key in first:
                    self.fail(
                        "every_write_applied_once",
                        f"{ob.kind} {key[1]} {key[2]} appears at cursors {first[key].cursor} and {ob.cursor}",
                        key=key[1],
                        expected="each applied effect once in the stream",
                        effects=[first[key], ob],
                    )
                else:
                    first[key] = ob

    def _counters(self) -> None:
        costs: dict[str, list[Logical]] = defaultdict(list)
        acquires: dict[str, list[Logical]] = defaultdict(list)
        waits_on: dict[str, list[Logical]] = defaultdict(list)
        for lo in self.ops:
            if lo.f == "record_cost" and isinstance(lo.value, dict):
                costs[lo.key or ""].append(lo)
            elif lo.f.startswith("acquire") and lo.key:
                acquires[lo.key].append(lo)
            elif lo.f.startswith("register_wait") and lo.key and ">" in lo.key:
                waits_on[lo.key.partition(">")[2]].append(lo)

        def recorded(st: State, lo: Logical) -> Any:
            """The replica's own record of the write (its outcome), or None: not applied there.
            Exact while no table evicted: a rejection is never recorded, an application always is."""
            entry = st.idempotency.get((actor_of(lo.process), lo.request_id or ""))
            return entry[1] if entry is not None else None

        for f in self.finals:
            st = f.state
            if st is None:
                continue
            for eid, los in sorted(costs.items()):
                live = st.executions.get(eid)
                gone = self.retired.executions.get(eid) if self.execution_retired(f, eid) else None
                ex = live or gone
                if ex is None:
                    continue
                want = sum(int(lo.value["cost"]) for lo in los if recorded(st, lo) is not None)
                if ex.cost_consumed != want:
                    self.fail(
                        "every_write_applied_once",
                        f"{f.node_id}: {eid}{' (retired)' if live is None else ''} has cost_consumed "
                        f"{ex.cost_consumed}; "
                        f"the RecordCost it applied add to {want}",
                        [lo.first.index for lo in los],
                        eid,
                        expected=f"cost_consumed == {want}",
                    )
            # A lease is granted by an Acquire, or by a hand-off (docs/queues.md): a release, a
            # completion or an expiry grants the head of the target's queue in the same apply,
            # without an Acquire of its own. So the version is at least the acquires the replica
            # applied, and at most those plus the waits on the target it applied (each wait is
            # handed the target at most once: it closes with the grant).
            for tid, los in sorted(acquires.items()):
                t = st.targets.get(tid)
                if t is None or not tid.startswith(("resource:", "pool:")):
                    continue
                outcomes = [recorded(st, lo) for lo in los]
                leases = sum(
                    1 for out in outcomes if out is not None and any(isinstance(fx, Acquired) for fx in out.effects)
                )
                queued = sum(1 for lo in waits_on.get(tid, ()) if recorded(st, lo) is not None)
                if not leases <= t.version <= leases + queued:
                    handed = f" and {queued} waits on it a release may hand it to" if queued else ""
                    self.fail(
                        "every_write_applied_once",
                        f"{f.node_id}: {tid} is at lease {t.version}; it applied {leases} acquires of it{handed}",
                        [lo.first.index for lo in los if lo.ok][-4:],
                        tid,
                        expected=f"lease version == {leases}"
                        if not queued
                        else f"{leases} <= lease version <= {leases + queued}",
                    )

    def replicas(self) -> None:
        missing = [f for f in self.finals if f.state is None]
        for f in missing:
            self.fail("replicas_same_digest", f"{f.endpoint}: final state not read ({f.error})")
        read = [f for f in self.finals if f.state is not None]
        if read and all(f.agreed is not None for f in read):
            agreed = [(f, f.agreed) for f in read if f.agreed is not None]
            if len({digest for _, (_, digest) in agreed}) > 1:
                at = ", ".join(f"{f.node_id}={digest[:16]}" for f, (_, digest) in agreed)
                self.fail(
                    "replicas_same_digest",
                    f"replicas at applied index {agreed[0][1][0]} differ: {at}",
                    expected="one digest",
                )
        elif len({f.applied_index for f in read}) > 1:
            at = ", ".join(f"{f.node_id}@{f.applied_index}" for f in read)
            self.fail("replicas_same_digest", f"replicas never reached one applied index after heal ({at})")
            return
        else:
            self._same_export_digests(read)
        for f in read:
            assert f.state is not None
            if f.state.digest() != f.digest:
                self.fail("replicas_same_digest", f"{f.node_id}: snapshot digest differs from the state it restores to")

    def _same_export_digests(self, read: list[ReplicaFinal]) -> None:
        digests = {f.digest for f in read}
        if len(digests) > 1:
            at = ", ".join(f"{f.node_id}={f.digest[:16]}" for f in read)
            self.fail(
                "replicas_same_digest",
                f"replicas at applied index {read[0].applied_index} differ: {at}",
                expected="one digest",
            )
        for f in read:
            assert f.state is not None
            if f.state.digest() != f.digest:
                self.fail("replicas_same_digest", f"{f.node_id}: snapshot digest differs from the state it restores to")

    def lost_writes(self) -> None:
        if not self.states:
            return
        retained = self.retained_from()
        final_epoch = min(st.recovery.epoch for st in self.states)
        for f in self.finals:
            if f.history_error is not None:
                self.fail(
                    "no_acknowledged_write_lost",
                    f"{f.endpoint}: history store not read ({f.history_error}): a retired write cannot be told lost",
                )
        for lo in self.ops:
            if not lo.ok:
                continue
            if lo.request_id is not None and lo.first.index > retained:
                key = (actor_of(lo.process), lo.request_id)
                for f in self.finals:
                    if f.state is not None and key not in f.state.idempotency:
                        self.fail(
                            "no_acknowledged_write_lost",
                            f"{f.node_id}: acknowledged {lo.f} {lo.key} (request {lo.request_id}) "
                            "is not in the final state",
                            [lo.first.index],
                            lo.key,
                            expected="every acknowledged write in every replica's log",
                        )
                        break
            if lo.f == "cancel_run" and isinstance(lo.result, dict) and "generation" in lo.result and lo.key:
                for f in self.finals:
                    if f.state is not None and self.run_retired(f, lo.key):
                        self._retired_cancel(f, lo)
                    elif f.state is not None and f.cancel_generation(lo.key) < lo.result["generation"]:
                        self.fail(
                            "no_acknowledged_write_lost",
                            f"{f.node_id}: {lo.key} ends at cancel generation {f.cancel_generation(lo.key)}, "
                            f"but CancelRun acknowledged {lo.result['generation']}",
                            [lo.first.index],
                            lo.key,
                            expected=f">= {lo.result['generation']}",
                        )
            if lo.f == "create" and lo.key:
                for f in self.finals:
                    if self.execution_retired(f, lo.key):
                        self._retired_create(f, lo)
                    elif f.state is not None and lo.key not in f.state.executions:
                        self.fail(
                            "no_acknowledged_write_lost",
                            f"{f.node_id}: acknowledged execution {lo.key} does not exist",
                            [lo.first.index],
                            lo.key,
                        )
            if lo.f == "read_epoch" and lo.result["epoch"] > final_epoch:
                self.fail(
                    "no_acknowledged_write_lost",
                    f"epoch {lo.result['epoch']} was read, but the final epoch is {final_epoch}",
                    [lo.first.index],
                    "epoch",
                    expected=f"<= {final_epoch}",
                )
        seen = _first_seen_epochs(self.h)
        if seen and max(seen) > final_epoch:
            self.fail(
                "no_acknowledged_write_lost", f"epoch {max(seen)} was committed, but the final epoch is {final_epoch}"
            )

    def _retired_create(self, f: ReplicaFinal, lo: Logical) -> None:
        """An acknowledged execution that retired: some node's history has its record, of its run."""
        record = self.retired.executions.get(lo.key or "")
        run = lo.value.get("run") if isinstance(lo.value, dict) else None
        if record is None:
            self.fail(
                "no_acknowledged_write_lost",
                f"{f.node_id}: acknowledged execution {lo.key} retired, "
                "but no node's history has its ExecutionRetired record",
                [lo.first.index],
                lo.key,
                expected="a retired execution's record in the history store",
            )
        elif run is not None and record.run_id != run:
            self.fail(
                "no_acknowledged_write_lost",
                f"{f.node_id}: {lo.key} was created in {run}, but its ExecutionRetired record names {record.run_id}",
                [lo.first.index],
                lo.key,
                expected=f"run {run}",
            )
        else:
            self.counts["creates_found_retired"] += 1

    def _retired_cancel(self, f: ReplicaFinal, lo: Logical) -> None:
        """An acknowledged CancelRun of a run that retired: its RunRetired record keeps a cancel
        generation at least the acknowledged one."""
        record = self.retired.runs.get(lo.key or "")
        acked = int(lo.result["generation"])
        if record is None or record.cancel_generation < acked:
            found = (
                "no node's history has its RunRetired record"
                if record is None
                else (f"its RunRetired record has cancel generation {record.cancel_generation}")
            )
            self.fail(
                "no_acknowledged_write_lost",
                f"{f.node_id}: {lo.key} retired and {found}, but CancelRun acknowledged {acked}",
                [lo.first.index],
                lo.key,
                expected=f"a RunRetired record with cancel generation >= {acked}",
            )
        else:
            self.counts["cancels_found_retired"] += 1

    def leaks(self) -> None:
        for ob in self.h.observed:
            if ob.kind == "CancellationStable" and int(ob.fields.get("leaked", 0)):
                self.fail(
                    "no_leaked_permit_after_cancelled_stable",
                    f"{ob.fields['scope_id']} became CANCELLED_STABLE "
                    f"releasing {ob.fields['leaked']} leaked holding(s)",
                    expected="0 leaked",
                )
        for f in self.finals:
            st = f.state
            if st is None:
                continue
            leaked = st.counters.get("cancel.leaked_permits", 0)
            if leaked:
                self.fail("no_leaked_permit_after_cancelled_stable", f"{f.node_id}: cancel.leaked_permits = {leaked}")
            by_run: dict[str, list[str]] = defaultdict(list)
            for ex in st.executions.values():
                by_run[ex.run_id].append(ex.execution_id)
            for run_id, run in sorted(st.runs.items()):
                if run.cancel_generation == 0 or cancel_state(st, run_id) is not CancelState.CANCELLED_STABLE:
                    continue
                for eid in sorted(by_run[run_id]):
                    ex = st.executions[eid]
                    held = sorted(t for t in st.satisfies.get(eid, ()) if eid in st.targets[t].holders)
                    if ex.status in SETTLED and (held or eid in st.cancel.claims):
                        self.fail(
                            "no_leaked_permit_after_cancelled_stable",
                            f"{f.node_id}: run {run_id} is CANCELLED_STABLE but {eid} still holds {held or 'a claim'}",
                        )

    # -- the fence, grants, convergence (issue #41) ------------------------------------------------

    def fence_probes(self) -> None:
        """The fence probe is refused by the fence, on every replica's record of it.

        The probe (workload ``_fence_probe``) is an Acquire of a target nobody holds or waits on,
        by a rolled-back execution at its new generation, presenting an epoch below the one it was
        rolled back at (``fenced``, from the cluster's own effects). Its answer must be the
        refusal ``stale_epoch``: acknowledged (or found applied) means the fence let it by, and
        refused ``target_held``/``pool_full`` means the target refused what the fence, checked
        first, should have. Other refusals come before the fence (a lost session, an old
        generation) and are counted, not judged. Every replica: the probe is not in its
        idempotency table (a rejection is never recorded), and the probe's target was never
        granted (lease 0, no holder; a retired one retired at lease 0)."""
        retired_targets: dict[str, TargetRetired] = {}
        for f in self.finals:
            for fx in f.history:
                if isinstance(fx, TargetRetired):
                    retired_targets[fx.target_id] = fx
        for lo in self.ops:
            if lo.f != FENCE_PROBE or not isinstance(lo.value, dict) or lo.key is None:
                continue
            fenced, presented = int(lo.value["fenced"]), int(lo.value["observed_epoch"])
            execution_id = lo.value.get("execution")
            code = lo.result.get("code") if isinstance(lo.result, dict) else None
            if lo.ok or lo.resolved == "applied":
                self.fail(
                    "stale_epoch_refused_by_fence",
                    f"{execution_id} rolled back at epoch {fenced} acquired the free {lo.key} presenting epoch "
                    f"{presented} ({'acknowledged' if lo.ok else 'found applied'}): the fence let it by",
                    [lo.first.index],
                    lo.key,
                    expected=f"StaleEpoch (FAILED_PRECONDITION stale_epoch): an epoch >= {fenced} is required",
                )
            elif lo.type == FAIL and code == "stale_epoch":
                self.counts["fence_probes_refused_stale_epoch"] += 1
            elif lo.type == FAIL and code in _BEFORE_THE_FENCE:
                self.fail(
                    "stale_epoch_refused_by_fence",
                    f"{execution_id} presenting epoch {presented} (rolled back at {fenced}) was refused {code} "
                    f"for {lo.key}, a target only the probe asks for: the fence, which the core checks first, "
                    "did not refuse it",
                    [lo.first.index],
                    lo.key,
                    expected="stale_epoch",
                )
            elif lo.type == FAIL:
                self.counts["fence_probes_inconclusive"] += 1
            else:
                self.counts["fence_probes_unknown"] += 1
            actor = actor_of(lo.process)
            for f in self.finals:
                st = f.state
                if st is None:
                    continue
                if lo.request_id is not None and (actor, lo.request_id) in st.idempotency:
                    self.fail(
                        "stale_epoch_refused_by_fence",
                        f"{f.node_id}: recorded the fence probe {lo.request_id} of {execution_id} as applied",
                        [lo.first.index],
                        lo.key,
                        expected="no record: a rejection is never recorded",
                    )
                t = st.targets.get(lo.key)
                gone = retired_targets.get(lo.key)
                if t is not None and (t.version or t.holders):
                    self.fail(
                        "stale_epoch_refused_by_fence",
                        f"{f.node_id}: the fence probe's target {lo.key} was granted (lease {t.version}, "
                        f"holders {dict(t.holders)})",
                        [lo.first.index],
                        lo.key,
                        expected="never granted: only the refused probe asked for it",
                    )
                elif t is None and gone is not None and gone.version:
                    self.fail(
                        "stale_epoch_refused_by_fence",
                        f"{f.node_id}: the fence probe's target {lo.key} retired at lease {gone.version}",
                        [lo.first.index],
                        lo.key,
                        expected="lease 0",
                    )

    def grants(self) -> None:
        """Grants only to the living: no ``Acquired`` (an Acquire's grant or a hand-off's) names an
        execution that was, at that point of the log, asked to stop (CANCEL_REQUESTED,
        CANCELLING), quarantined or settled, or a generation other than its current one.

        Read over the stream (each stretch between resyncs on its own), in log order: the status
        and generation of each execution are the last ``ExecutionStateChanged`` and
        ``GenerationAdvanced`` before the grant (a new attempt starts PENDING: the RETRY row). An
        execution the stretch has shown nothing of yet is not judged (counted)."""
        run_of = self._runs_of_creates()
        for seg in _segments(self.h.observed):
            known: dict[str, tuple[int, str, Observed]] = {}
            for ob in seg:
                f = ob.fields
                if ob.kind == "ExecutionStateChanged":
                    known[f["execution_id"]] = (int(f["generation"]), str(f["after"]), ob)
                elif ob.kind == "GenerationAdvanced":
                    known[f["execution_id"]] = (int(f["after"]), ExecStatus.PENDING.value, ob)
                elif ob.kind == "Acquired":
                    eid, granted = f["execution_id"], int(f["generation"])
                    now = known.get(eid)
                    if now is None:
                        self.counts["grants_not_judged"] += 1
                        continue
                    self.counts["grants_judged"] += 1
                    generation, status, since = now
                    if granted != generation:
                        why = f"generation {granted}, but {eid} is at generation {generation}"
                    elif status not in _LIVE:
                        why = f"{eid} g{generation}, which is {status}"
                    else:
                        continue
                    tid = f["target_id"]
                    self.fail(
                        "grants_only_to_live_generations",
                        f"{tid} granted at lease {f['lease']} (cursor {ob.cursor}) to {why} "
                        f"since cursor {since.cursor}",
                        self._before(ob, (tid, f"{eid}>{tid}", run_of.get(eid))),
                        tid,
                        expected="a grant only to a PENDING, RUNNING or WAITING execution at its current "
                        "generation; a waiter asked to stop is passed by",
                        effects=[since, ob],
                        at_ns=ob.time_ns,
                    )

    def convergence(self) -> None:
        """Every cancelled run converges after the heal, at every depth.

        Over the stream: when a run's scope becomes CANCELLED_STABLE, no execution of the run
        (the workload's creates name the run) is, as last shown in that stretch, unsettled. Over
        every replica's final state: a CANCELLED_STABLE run has every execution settled and
        holding nothing; a run still CANCELLING once its first cancel is older, in the replica's
        logical time, than the cancellation SLO plus :data:`CONVERGENCE_MARGIN_MS` says why for
        each unsettled member (QUARANTINED with its open request, the operator's item) and none
        is still merely asked to stop or running; a NEEDS_RECONCILIATION member has its
        reconciliation item; a cancelled run that retired, retired CANCELLED_STABLE."""
        run_of = self._runs_of_creates()
        members: dict[str, list[str]] = defaultdict(list)
        for eid, run_id in sorted(run_of.items()):
            members[run_id].append(eid)
        for seg in _segments(self.h.observed):
            status: dict[str, tuple[str, Observed]] = {}
            for ob in seg:
                f = ob.fields
                if ob.kind == "ExecutionStateChanged":
                    status[f["execution_id"]] = (str(f["after"]), ob)
                elif ob.kind == "GenerationAdvanced":
                    status[f["execution_id"]] = (ExecStatus.PENDING.value, ob)
                elif ob.kind == "CancellationStable" and str(f["scope_id"]).startswith("run:"):
                    run_id = str(f["scope_id"]).removeprefix("run:")
                    for eid in members.get(run_id, ()):
                        got = status.get(eid)
                        if got is not None and got[0] not in _SETTLED:
                            self.fail(
                                "cancelled_runs_converge",
                                f"run {run_id} became CANCELLED_STABLE (cursor {ob.cursor}) while {eid} "
                                f"was {got[0]} (cursor {got[1].cursor})",
                                self._before(ob, (eid, run_id)),
                                eid,
                                expected="every execution of the run, at every depth, settled first",
                                effects=[got[1], ob],
                                at_ns=ob.time_ns,
                            )
        for f, st, by_run in self._cancelled_runs_by_replica():
            for run_id, run in sorted(st.runs.items()):
                scope = st.cancel.scopes.get(f"run:{run_id}")
                if run.cancel_generation == 0 or scope is None:
                    continue
                self._converged(f, st, run_id, scope, sorted(by_run[run_id], key=lambda ex: ex.execution_id))
        for run_id, record in sorted(self.retired.runs.items()):
            retired_as = CancelState(record.cancel_state)
            if record.cancel_generation:
                self.counts["cancelled_runs_retired"] += 1
            if record.cancel_generation and retired_as is not CancelState.CANCELLED_STABLE:
                self.fail(
                    "cancelled_runs_converge",
                    f"cancelled run {run_id} retired {retired_as.value}",
                    key=run_id,
                    expected="CANCELLED_STABLE before it retires",
                )

    def _runs_of_creates(self) -> dict[str, str]:
        """execution -> the run its (first) create named."""
        run_of: dict[str, str] = {}
        for lo in self.ops:
            if lo.f == "create" and lo.key and isinstance(lo.value, dict) and lo.value.get("run"):
                run_of.setdefault(lo.key, str(lo.value["run"]))
        return run_of

    def _before(self, ob: Observed, keys: Iterable[str | None], n: int = 4) -> list[int]:
        """The last ``n`` acknowledged operations on ``keys`` invoked before ``ob`` was seen: what
        an excerpt shows beside a stream effect."""
        wanted = {k for k in keys if k}
        return [lo.first.index for lo in self.ops if lo.key in wanted and lo.ok and lo.call_ns <= ob.time_ns][-n:]

    def _converged(self, f: ReplicaFinal, st: State, run_id: str, scope: Any, executions: list[Any]) -> None:
        def depth(eid: str) -> int:
            d, ex = 0, st.executions.get(eid)
            while ex is not None and ex.parent_id is not None and d < 10_000:
                d, ex = d + 1, st.executions.get(ex.parent_id)
            return d

        def holds(eid: str) -> list[str]:
            held = sorted(t for t in st.satisfies.get(eid, ()) if eid in st.targets[t].holders)
            return held + (["a claim"] if eid in st.cancel.claims else [])

        age_ms = st.now_ms - scope.requested_at_ms
        bound_ms = st.cancel.slo_ms + CONVERGENCE_MARGIN_MS
        stable = scope.stable_at_ms is not None
        if not stable and age_ms < bound_ms:
            self.counts["cancelled_runs_within_bound"] += 1
            return
        self.counts["cancelled_runs_judged"] += 1
        for ex in executions:
            eid, status = ex.execution_id, ex.status
            where = f"{f.node_id}: {eid} (depth {depth(eid)}) of cancelled run {run_id}"
            req = st.cancel.requests.get(eid)
            if status in SETTLED:
                if holds(eid):
                    self.fail(
                        "cancelled_runs_converge",
                        f"{where} is {status.value} but holds {holds(eid)}",
                        key=eid,
                        expected="no permit, lease or claim held by a settled member",
                    )
                if status is ExecStatus.NEEDS_RECONCILIATION and eid not in st.cancel.reconciliations:
                    self.fail(
                        "cancelled_runs_converge",
                        f"{where} is NEEDS_RECONCILIATION without a reconciliation item",
                        key=eid,
                        expected="a reconciliation item saying why it did not settle",
                    )
            elif stable:
                self.fail(
                    "cancelled_runs_converge",
                    f"{where} is {status.value}, yet the run is CANCELLED_STABLE",
                    key=eid,
                    expected="every descendant at every depth settled before CANCELLED_STABLE",
                )
            elif not (status is ExecStatus.QUARANTINED and req is not None and req.quarantined_at_ms is not None):
                self.fail(
                    "cancelled_runs_converge",
                    f"{where} is {status.value} {age_ms} ms (logical) after the cancel, past the bound of "
                    f"{bound_ms} ms (SLO {st.cancel.slo_ms} + {CONVERGENCE_MARGIN_MS})",
                    key=eid,
                    expected="settled, or QUARANTINED past the SLO with its operator item (or NEEDS_RECONCILIATION)",
                )
        if not stable and all(ex.status in SETTLED for ex in executions):
            self.fail(
                "cancelled_runs_converge",
                f"{f.node_id}: every execution of cancelled run {run_id} settled, but it is not CANCELLED_STABLE "
                f"{age_ms} ms after the cancel",
                key=run_id,
                expected="CANCELLED_STABLE",
            )

    def state_invariants(self) -> None:
        for f in self.finals:
            if f.state is not None:
                for problem in core_invariants.check(f.state):
                    self.fail("state_invariants", f"{f.node_id}: {problem}")

    # -- the report -------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        st = self.states[0] if self.states else None
        out = {
            "cancels_applied": sum(
                1
                for lo in self.ops
                if lo.f == "cancel_run" and lo.ok and isinstance(lo.result, dict) and "generation" in lo.result
            ),
            "epoch_reads": sum(1 for lo in self.ops if lo.f == "read_epoch" and lo.ok),
            "cancel_reads": sum(1 for lo in self.ops if lo.f == "read_cancel" and lo.ok),
            "observed_effects": len(self.h.observed),
            # Unknown writes never answered, decided from the replicas' idempotency tables alone.
            "unknown_applied_from_state": self.counts.get("unknown_applied_from_state", 0),
            "unknown_not_applied_from_state": self.counts.get("unknown_not_applied_from_state", 0),
            # Retirement: acknowledged writes found retired (counted per replica), reads and fences of retired work.
            "creates_found_retired": self.counts.get("creates_found_retired", 0),
            "cancels_found_retired": self.counts.get("cancels_found_retired", 0),
            "cancel_reads_of_retired_runs": self.counts.get("cancel_reads_of_retired_runs", 0),
            "cancel_reads_of_retired_runs_checked": self.counts.get("cancel_reads_of_retired_runs_checked", 0),
            "fences_of_retired_executions": self.counts.get("fences_of_retired_executions", 0),
            # Issue #41: what the fence probe, grant and convergence checks could judge.
            "fence_probes_refused_stale_epoch": self.counts.get("fence_probes_refused_stale_epoch", 0),
            "fence_probes_inconclusive": self.counts.get("fence_probes_inconclusive", 0),
            "fence_probes_unknown": self.counts.get("fence_probes_unknown", 0),
            "grants_judged": self.counts.get("grants_judged", 0),
            "grants_not_judged": self.counts.get("grants_not_judged", 0),
            "cancelled_runs_judged": self.counts.get("cancelled_runs_judged", 0),
            "cancelled_runs_within_bound": self.counts.get("cancelled_runs_within_bound", 0),
            "cancelled_runs_retired": self.counts.get("cancelled_runs_retired", 0),
            "history_records_min": min((f.history_total for f in self.finals), default=0),
            "history_records_max": max((f.history_total for f in self.finals), default=0),
        }
        if st is not None:
            rb = st.recovery
            out["final_epoch"] = rb.epoch
            every = self.all_decisions(st)
            out["recoveries_committed"] = sum(1 for d in every if d.epoch is not None)
            out["decisions"] = len(every)
            for name in RETIRE_COUNTERS:
                out[f"retired_{name}"] = st.counters.get(f"retire.{name}", 0)
            out["tombstones"] = len(st.retired_runs) + len(st.retired_executions) + len(st.retired_targets)
            out["runs_cancelled_stable"] = sum(
                1
                for r in st.runs
                if st.runs[r].cancel_generation and cancel_state(st, r) is CancelState.CANCELLED_STABLE
            )
        return out

    def report(self) -> CheckReport:
        invariants: dict[str, list[str]] = {name: [] for name in INVARIANTS}
        for v in self.violations:
            invariants.setdefault(v.invariant, []).append(v.message)
        # An undecided history is not a violation, and not a pass either.
        ok = not self.violations and not any(self.undecided.values())
        counts = {k: self.counts.get(k, 0) for k in ("ok", "fail", "unknown_applied", "unknown_not_applied")}
        if self.counts.get("unknown_unresolved"):
            counts["unknown_unresolved"] = self.counts["unknown_unresolved"]
        return CheckReport(
            {k: v for k, v in invariants.items() if not k.startswith("linearizability:")},
            dict(self.lin),
            counts,
            ok,
            self.excerpt(),
            self.stats(),
            list(self.violations),
            {k: list(v) for k, v in self.undecided.items()},
            dict(self.lin_steps),
            self.budget,
            self.h.t0_ns,
        )

    def replica_state(self, key: str | None) -> str:
        """What every replica holds of ``key`` after heal (the epoch, a run, an execution, a target
        or an edge ``waiter>target``): the state a failure report shows beside the operations."""
        if key is None:
            return ""
        lines = []
        for f in self.finals:
            st = f.state
            if st is None:
                lines.append(f"{f.node_id or f.endpoint}: not read ({f.error})")
                continue
            bits: list[str] = []
            if key == "epoch":
                bits.append(f"epoch {st.recovery.epoch}")
            waiter, _, target = key.partition(">")
            if waiter in st.executions:
                ex = st.executions[waiter]
                bits.append(
                    f"{waiter} g{ex.generation} {ex.status.value} cost {ex.cost_consumed}"
                    f" fence {st.recovery.fence.get(waiter, 0)}"
                )
            if target:
                edge = st.wait(waiter, target)
                bits.append(
                    f"edge open at (generation, version) ({edge.waiter_generation}, {edge.edge_version})"
                    if edge is not None
                    else "no open edge"
                )
            if key in st.runs:
                bits.append(f"{key} cancel generation {st.runs[key].cancel_generation}")
            for name, table in (("execution", st.retired_executions), ("run", st.retired_runs)):
                if waiter in table:
                    bits.append(f"{name} {waiter} retired at {table[waiter]} ms")
            t = st.targets.get(target or key)
            if t is not None:
                bits.append(f"{t.target_id} version {t.version} holders {dict(t.holders)}")
            if bits:
                lines.append(f"{f.node_id} @{f.applied_index}: " + "; ".join(bits))
        return "\n".join(lines)

    def excerpt(self) -> str:
        if not self.violations:
            undecided = [m for found in self.undecided.values() for m in found]
            if not undecided:
                return ""
            return "undecided (no violation found, none ruled out): " + "; ".join(undecided[:3])
        first = first_anomaly(self.violations)
        assert first is not None
        when = "after heal (final state)" if first.at_ns is None else f"at {(first.at_ns - self.h.t0_ns) / 1e9:.3f} s"
        lines = [f"first anomaly {when}: {first.invariant}: {first.message}"]
        if first.expected:
            lines.append(f"expected: {first.expected}")
        if first.ops:
            lines += ["operations:", self.h.excerpt(first.ops, context=1, key=first.key)]
        if first.effects:
            lines.append("effects (observer stream):")
            lines += [
                f"  {(ob.time_ns - self.h.t0_ns) / 1e9:9.3f}s  cursor {ob.cursor} (entry {ob.log_index})  "
                f"{ob.kind} {json.dumps(ob.fields, sort_keys=True, default=str)}"
                for ob in sorted(first.effects, key=lambda o: o.cursor)
            ]
        if first.state:
            lines += ["replica state after heal:", *(f"  {row}" for row in first.state.splitlines())]
        more = len(self.violations) - 1
        if more:
            lines.append(f"({more} more violation(s))")
        return "\n".join(lines)


def first_anomaly(violations: Sequence[Violation]) -> Violation | None:
    """The first anomaly in time (one only the final state shows comes last); of violations that
    showed at once, the one shown by the fewest entries."""
    if not violations:
        return None
    return min(violations, key=lambda v: (lin.INF if v.at_ns is None else v.at_ns, len(v.ops)))


def _cut(ops: Sequence[lin.Operation], t: float) -> list[lin.Operation]:
    """The operations invoked by ``t``; one still running then is pending (a read is dropped, a
    write's outcome unknown)."""
    out: list[lin.Operation] = []
    for o in ops:
        if o.call > t:
            continue
        if o.ret > t:
            if o.input[0] == "read":
                continue
            o = lin.Operation(o.op_id, o.process, o.call, lin.INF, o.input, None, o.ref)
        out.append(lin.Operation(len(out), o.process, o.call, o.ret, o.input, o.output, o.ref))
    return out


def _segments(observed: Sequence[Observed]) -> list[list[Observed]]:
    """The stream cut at every resync (effects between two may be missing)."""
    out: list[list[Observed]] = [[]]
    for ob in observed:
        if ob.kind == "Resync":
            out.append([])
        else:
            out[-1].append(ob)
    return [seg for seg in out if seg]


_VICTIM_CAUSE = "victim:"


class _Decided:
    """What one stretch of the stream says about recoveries. Read in two passes, so that the
    order of the effects inside one apply is what the checks test, never what they assume."""

    def __init__(self, seg: Sequence[Observed]) -> None:
        self.committed: dict[str, Observed] = {}
        """digest -> its (first) EpochCommitted."""
        self.proposed: dict[str, list[int]] = defaultdict(list)
        """digest -> cursors of its RecoveryProposed."""
        self.decisions: dict[str, tuple[str, int | None, Observed]] = {}
        """decision id -> (digest, epoch, its VictimChosen)."""
        by_epoch: dict[int, str] = {}
        for ob in seg:
            f = ob.fields
            if ob.kind == "RecoveryProposed":
                self.proposed[f["digest"]].append(ob.cursor)
            elif ob.kind == "EpochCommitted":
                self.committed.setdefault(f["digest"], ob)
                by_epoch[int(f["epoch"])] = f["digest"]
            elif ob.kind == "VictimChosen":
                epoch = f.get("epoch")
                self.decisions.setdefault(f["decision_id"], (f["digest"], None if epoch is None else int(epoch), ob))
        self.stopped: list[tuple[str, int, str | None, Observed]] = []
        """(execution, generation, digest of the recovery, the effect that stopped it)."""
        for ob in seg:
            f = ob.fields
            if ob.kind == "ExecutionStateChanged" and str(f.get("cause", "")).startswith(_VICTIM_CAUSE):
                decided = self.decisions.get(str(f["cause"])[len(_VICTIM_CAUSE) :])
                self.stopped.append((f["execution_id"], int(f["generation"]), decided[0] if decided else None, ob))
            elif ob.kind == "Yielded":
                self.stopped.append((f["execution_id"], int(f["generation"]), by_epoch.get(int(f["epoch"])), ob))

    def epoch_of(self, named: Observed) -> int | None:
        """The rollback epoch of a stopping effect from :attr:`stopped`."""
        if named.kind == "Yielded":
            return int(named.fields["epoch"])
        decided = self.decisions.get(str(named.fields["cause"])[len(_VICTIM_CAUSE) :])
        return decided[1] if decided else None


def _effect_key(kind: str, fields: Any) -> str:
    return kind + json.dumps(fields, sort_keys=True, default=str)


def _effect_times(history: History) -> dict[str, int]:
    """Every observed effect (kind and fields) -> when the stream first showed it."""
    out: dict[str, int] = {}
    for ob in history.observed:
        out.setdefault(_effect_key(ob.kind, ob.fields), ob.time_ns)
    return out


def _applied_seen(outcome: Any, seen: dict[str, int]) -> int | None:
    """When the stream first showed an effect of this recorded outcome (None: none observed)."""
    from .workload import plain

    times = [seen.get(_effect_key(type(fx).__name__, plain(fx))) for fx in getattr(outcome, "effects", ())]
    found = [t for t in times if t is not None]
    return min(found) if found else None


def _duplicate(value: Any) -> bool:
    return isinstance(value, dict) and bool(value.get("duplicate"))


_CORE_STATUSES = frozenset({"FAILED_PRECONDITION", "ABORTED", "NOT_FOUND", "ALREADY_EXISTS"})
"""Statuses only the core's rejections map to (cluster/node/grpc_status.py): the node's own refusals
(rate limit, auth, no leader) never reach the log, so they say nothing about what was applied."""


def _core_rejection(value: Any) -> bool:
    return isinstance(value, dict) and value.get("status") in _CORE_STATUSES


_SKIP = object()


def _cancel_output(lo: Logical) -> Any:
    """A CancelRun's output for the model, or _SKIP when it never took effect."""
    if lo.type == FAIL or lo.resolved == "not_applied":
        return _SKIP
    if lo.type == INFO and lo.resolved is None:
        return None
    result = lo.result if isinstance(lo.result, dict) else {}
    if result.get("result") == "APPLIED" and "generation" in result:
        return ("applied", result["generation"])
    if result.get("result") == "NOOP":
        return ("noop",)
    return None


def actor_of(process: str) -> str:
    """The actor the cluster recorded a process's writes under (its idempotency key)."""
    from .workload import OPERATOR

    return f"operator:{OPERATOR}" if process == OPERATOR else f"agent:{process}"


def _outcome_result(outcome: Any) -> dict[str, Any]:
    from .workload import outcome_value

    return outcome_value(outcome)


def _first_seen_epochs(history: History) -> dict[int, int]:
    """epoch -> the first time (ns) anyone saw it committed (the observer's stream)."""
    seen: dict[int, int] = {}
    for ob in history.observed:
        epoch: int | None = None
        if ob.kind in ("EpochCommitted", "VictimChosen", "Yielded") and ob.fields.get("epoch") is not None:
            epoch = int(ob.fields["epoch"])
        if epoch is not None and epoch not in seen:
            seen[epoch] = ob.time_ns
    return seen


def check(history: History, finals: Sequence[ReplicaFinal], budget: int = lin.DEFAULT_BUDGET) -> CheckReport:
    """Every check over the history and the replicas' final states (``budget``: search steps per
    linearizability history)."""
    c = _Check(history, finals, budget)
    c.resolve()
    c.check_linearizable()
    c.monotonic()
    c.fresh_reads()
    c.decisions()
    c.releases()
    c.stale_epochs()
    c.cancelled_commits()
    c.edges()
    c.replicas()
    c.lost_writes()
    c.applied_once()
    c.leaks()
    c.fence_probes()
    c.grants()
    c.convergence()
    c.state_invariants()
    return c.report()


__all__ = [
    "INVARIANTS",
    "READ_OF_RETIRED",
    "RETIRE_COUNTERS",
    "CheckReport",
    "Retired",
    "ReplicaFinal",
    "Violation",
    "check",
    "collect_final",
    "first_anomaly",
    "logical_ops",
]
