"""One chaos run: a cluster in namespaces, the workload, the nemesis schedule, heal, check, table.

    scripts/chaos --nodes 5 --duration 600 --seed 1 [--nemeses kill,pause] [--history-out h.jsonl]

The run: build the lab (tests/chaos/net.py), start N real ``waitgraph serve`` processes in it
(each with the wall-clock hook loaded, its Raft links through the proxies, the log compacted every
:data:`LAB_COMPACTION_ENTRIES` entries so that restarts restore from dumps; the faketime nemeses
restart a node under libfaketime and back, see tests/chaos/nemesis.py), wait for a leader, then run the
workload (tests/chaos/workload.py) and the seeded schedule (tests/chaos/nemesis.py) side by side
until the deadline; heal everything, wait until every replica has applied the same log, read the
replicas' final states, check the history and the finals (tests/chaos/checker.py) and print a
table. Liveness figures come from the history's timestamps and a Status poll of every node every
quarter second; they are reported, never asserted. Exit 1 when an invariant is violated, a
history is not linearizable, or the harness itself failed (a nemesis that could not act, a
cluster that did not converge); the seed and the checker's shortest excerpt are printed. A run
too short to inject every nemesis (below :data:`MEANINGFUL_DURATION_S`, 120 s) is not a failure:
it passes with a ``warning:`` line naming the nemeses it never got to. Exit 2
(result UNDECIDED) when nothing failed but a linearizability search exhausted its step budget:
that history is neither a violation nor a pass.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from waitgraph.dev.localcluster import Credentials, LocalCluster
from waitgraph.sdk import RpcError, SyncOperatorClient
from waitgraph.statemachine.retire import MIN_RETENTION_MS

from .nemesis import (
    ALL_KINDS,
    CLUSTER_KINDS,
    FAKETIME_KINDS,
    OVERLAP_KINDS,
    RESTART_OVERHEAD_S,
    RESTARTING_KINDS,
    ChaosEnv,
    Clocks,
    FaultRecord,
    Schedule,
    heal_everything,
    unavailable,
)
from .net import Lab

BASE_PORT = 7000
"""In namespaces every node has its own address, so every run can use the same ports."""
POLL_S = 0.25
CONVERGE_TIMEOUT_S = 120.0
WORKLOAD_GRACE_S = 60.0
"""How long after the deadline the workload may take to wind down before it is cancelled."""
LAB_COMPACTION_ENTRIES = 100
"""The lab's ``log_compaction_min_entries`` (the default is 5000): a 60 s run appends a few
thousand entries, so with the default no node ever compacted and no restart restored from a
dump. At 100 followers compact every few seconds and every restart restores from a dump."""
LAB_RETENTION_MS = 5_000
"""The lab's ``--retention-ms`` (the default is 300000): settled runs retire 5 s after they
settle and their tombstones are forgotten 5 s later, so in a 60-90 s run most runs retire, and
many tombstones are forgotten, while the nemeses act (issue #14). The checker then finds their
acknowledged writes in the history stores (tests/chaos/checker.py)."""
MEANINGFUL_DURATION_S = 120.0
"""The shortest run that injects every nemesis (all of :data:`ALL_KINDS`) on CI's loaded two
cores: CI's own duration (tests/chaos/test_chaos.py). At 90 s some kinds did not fit; the
schedule's arithmetic floor (:func:`minimum_duration_s`) is lower, but ``kill-after-compaction``
waits for a dump and restarts take longer under load. A shorter run is still a check of what it
did inject: it passes with a warning naming the nemeses it never got to (only a violation fails
a run)."""


def minimum_duration_s(kinds: Sequence[str]) -> float:
    """The schedule's floor: every kind its shortest slot plus the restarts it owes
    (tests/chaos/nemesis.py ``Schedule``). Below it some kinds are never injected, whatever the load."""
    slot_s = float(Schedule.__dataclass_fields__["min_slot_s"].default)
    return len(kinds) * slot_s + RESTART_OVERHEAD_S * sum(1 for k in kinds if k in RESTARTING_KINDS)


def coverage_warnings(kinds: Sequence[str], records: Sequence[FaultRecord], duration_s: float) -> list[str]:
    """What a run that did not inject every nemesis says about itself (a warning, not a failure)."""
    missing = sorted(set(kinds) - {r.kind for r in records})
    if not missing:
        return []
    floor = max(minimum_duration_s(kinds), MEANINGFUL_DURATION_S if set(kinds) == set(ALL_KINDS) else 0.0)
    return [
        f"run too short to inject every nemesis ({duration_s:g} s): {len(missing)} of {len(kinds)} never injected "
        f"({', '.join(missing)}); the checks ran on what was injected. Every nemesis fits from about "
        f"{floor:g} s (--duration {floor:g})"
    ]


# -- Status monitor ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    t_ns: int
    node_id: str
    role: str
    term: int
    has_quorum: bool
    applied_index: int


class Monitor:
    """Polls every node's Status (without a barrier) every :data:`POLL_S`, in parallel, so a paused
    node does not hold up the others; keeps the timeline for the liveness figures."""

    def __init__(self, endpoints: dict[str, str], token: str) -> None:
        self.endpoints = endpoints
        self.client = SyncOperatorClient(list(endpoints.values()), token, call_timeout_s=min(0.8, POLL_S * 3))
        self.samples: list[Sample] = []
        self.latest: dict[str, Sample] = {}
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(len(endpoints), thread_name_prefix="chaos-monitor")
        self._thread = threading.Thread(target=self._loop, name="chaos-monitor", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> Monitor:
        self._thread.start()
        return self

    def _poll(self, node_id: str, endpoint: str) -> Sample | None:
        try:
            s = self.client.status(endpoint)
        except RpcError:
            return None
        return Sample(time.monotonic_ns(), node_id, s.role, s.term, s.has_quorum, s.applied_index)

    def watch(self, node_id: str, endpoint: str) -> None:
        """Poll a node started during the run too (``replace-node``)."""
        with self._lock:
            self.endpoints = {**self.endpoints, node_id: endpoint}

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            with self._lock:
                endpoints = self.endpoints
            futures = [self._pool.submit(self._poll, n, e) for n, e in endpoints.items()]
            for f in futures:
                sample = f.result()
                if sample is not None:
                    with self._lock:
                        self.samples.append(sample)
                        self.latest[sample.node_id] = sample
            self._stop.wait(max(0.0, POLL_S - (time.monotonic() - began)))

    def leader(self) -> str | None:
        """The node that most recently said it leads with a quorum (highest term wins)."""
        horizon = time.monotonic_ns() - int(2e9)
        with self._lock:
            leaders = [s for s in self.latest.values() if s.t_ns >= horizon and s.role == "leader" and s.has_quorum]
        return max(leaders, key=lambda s: s.term).node_id if leaders else None

    def timeline(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()


class DumpWatch:
    """Counts the log-compaction dumps each node writes (a compaction renames a new dump into
    place: its inode changes), polled every 0.1 s: a lower bound when two land within one poll."""

    def __init__(self, env: ChaosEnv) -> None:
        self.env = env
        self.dumps: dict[str, int] = {n: 0 for n in env.node_ids}
        self._last = {n: env.dump_stamp(n) for n in env.node_ids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-dumps", daemon=True)

    def start(self) -> DumpWatch:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            for n in self.env.node_ids:  # nodes come and go (replace-node)
                stamp = self.env.dump_stamp(n)
                if stamp is not None and stamp != self._last.get(n):
                    self.dumps[n] = self.dumps.get(n, 0) + 1
                self._last[n] = stamp

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


# -- liveness ----------------------------------------------------------------------------------------


@dataclass
class Liveness:
    new_leader_s: list[float] = field(default_factory=list)
    no_new_leader: int = 0
    first_write_after_heal_s: list[float] = field(default_factory=list)
    no_write_after_heal: int = 0
    recovery_under_fault_s: list[float] = field(default_factory=list)
    no_write_during_fault: int = 0


def _is_write(op: Any) -> bool:
    return op.request_id is not None


def liveness(
    records: Sequence[FaultRecord], heals_ns: Sequence[int], samples: Sequence[Sample], history: Any
) -> Liveness:
    """The three figures, from the Status timeline and the history's monotonic timestamps."""
    out = Liveness()
    for r in records:
        if not r.leader_cut:
            continue
        until = (r.end_ns or r.start_ns) + int(10e9)
        new = next(
            (
                s.t_ns
                for s in samples
                if r.start_ns < s.t_ns <= until and s.role == "leader" and s.has_quorum and s.node_id != r.leader_before
            ),
            None,
        )
        if new is None:
            out.no_new_leader += 1
        else:
            out.new_leader_s.append((new - r.start_ns) / 1e9)
    pairs = [p for p in history.pairs() if _is_write(p.invoke) and p.completion is not None]
    acked = sorted((p.invoke.time_ns, p.completion.time_ns) for p in pairs if p.completion.type == "ok")

    def first_ok_after(t_ns: int, until_ns: int | None = None) -> float | None:
        done = [c for i, c in acked if i >= t_ns and (until_ns is None or c <= until_ns)]
        return (min(done) - t_ns) / 1e9 if done else None

    for h in heals_ns:
        dt = first_ok_after(h)
        if dt is None:
            out.no_write_after_heal += 1
        else:
            out.first_write_after_heal_s.append(dt)
    for r in records:
        dt = first_ok_after(r.start_ns, r.end_ns)
        if dt is None:
            out.no_write_during_fault += 1
        else:
            out.recovery_under_fault_s.append(dt)
    return out


# -- the run -----------------------------------------------------------------------------------------


@dataclass
class RunConfig:
    nodes: int = 3
    duration_s: float = 60.0
    seed: int = 1
    kinds: Sequence[str] = ALL_KINDS
    history_out: Path | None = None
    loopback: bool = False
    keep: bool = False
    """Keep the run's directory (node logs, data) even when it passed."""
    report_json: Path | None = None
    """Write the verdict, the first anomaly and the lab's figures here (scripts/mutants reads it)."""
    retention_ms: int = LAB_RETENTION_MS
    """The nodes' ``--retention-ms``: how long settled work stays live before it retires."""


@dataclass
class RunResult:
    config: RunConfig
    ok: bool
    table: str
    excerpt: str = ""
    records: list[FaultRecord] = field(default_factory=list)
    harness_errors: list[str] = field(default_factory=list)
    report: Any = None
    directory: Path | None = None
    dumps: dict[str, int] = field(default_factory=dict)
    """Log-compaction dumps seen per node (:class:`DumpWatch`)."""
    dump_restores: list[str] = field(default_factory=list)
    """Every restart that restored a node from a dump (:attr:`ChaosEnv.dump_restores`)."""
    warnings: list[str] = field(default_factory=list)
    """What limits the run without failing it (a nemesis never injected: the run was too short)."""


Factory = Callable[[list[str], Credentials, int, Any], Any]


def _default_parts() -> tuple[Any, Factory, Callable[..., Any], Callable[..., Any]]:
    from .checker import check, collect_final
    from .history import History
    from .workload import Workload

    return History, Workload, collect_final, check


def run_chaos(
    cfg: RunConfig,
    *,
    parts: tuple[Any, Factory, Callable[..., Any], Callable[..., Any]] | None = None,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> RunResult:
    """``parts`` = (History class, Workload factory, collect_final, check); the checker engineer's
    modules by default (the harness tests give stand-ins)."""
    history_cls, workload_cls, collect_final, check = parts or _default_parts()
    unknown = [k for k in cfg.kinds if k not in ALL_KINDS]
    if unknown:
        raise ValueError(f"unknown nemeses {unknown}; known: {', '.join(ALL_KINDS)}")
    root = Path(tempfile.mkdtemp(prefix="waitgraph-chaos-"))
    harness_errors: list[str] = []
    warnings: list[str] = []
    passed = False
    try:
        with contextlib.ExitStack() as stack:
            lab = stack.enter_context(Lab(cfg.nodes, force_loopback=cfg.loopback, seed=cfg.seed))
            node_ids = [m.node_id for m in lab.members]
            clocks = Clocks(root / "clocks", node_ids)
            stack.callback(clocks.close)
            cluster = LocalCluster(
                root=root / "cluster",
                nodes=cfg.nodes,
                mode="auto",
                base_port=BASE_PORT if lab.network_faults else None,
                hosts=lab.hosts,
                command_prefix=lambda m: lab.command_prefix(m.node_id),
                extra_env=lambda m: clocks.env(m.node_id),
                # Off loopback the servers want TLS for bearer tokens; the lab's network is private.
                serve_args=[
                    *(["--insecure"] if lab.network_faults else []),
                    "--log-compaction-min-entries",
                    str(LAB_COMPACTION_ENTRIES),
                    "--retention-ms",
                    str(cfg.retention_ms),
                ],
            )
            cluster.prepare()
            assert cluster.credentials is not None
            lab.install_proxies({m.node_id: m.raft_address for m in cluster.members})
            stack.callback(cluster.stop)
            log(f"chaos: lab {lab.mode} {lab.prefix}; starting {cfg.nodes} nodes in {root}")
            cluster.start(60)
            first = cluster.wait_for_leader(60)
            monitor = Monitor({m.node_id: m.grpc_address for m in cluster.members}, cluster.credentials.admin).start()
            stack.callback(monitor.stop)
            env = ChaosEnv(lab, cluster, clocks, monitor.leader, on_member=monitor.watch)
            stack.callback(lambda: heal_everything(env))
            dumps = DumpWatch(env).start()
            stack.callback(dumps.stop)
            kinds = [k for k in cfg.kinds if unavailable(k, env) is None]
            skipped = {k: unavailable(k, env) for k in cfg.kinds if k not in kinds}
            for k, why in skipped.items():
                log(f"chaos: nemesis {k} UNAVAILABLE here: {why}")
            schedule = Schedule(env, kinds, cfg.seed, cfg.duration_s)
            history = history_cls()
            if hasattr(history, "observe"):
                # The recovery configuration the run starts with (bootstrapped before the observer
                # subscribed): the checker judges each commit by the one in force at it.
                config = {"voters": list(first.voters), "quorum": first.quorum, "max_rollback": first.max_rollback}
                history.observe(0, 0, "RecoveryConfigured", config, first.node_id)
            workload = workload_cls(cluster.endpoints, cluster.credentials, cfg.seed, history)
            deadline = time.monotonic() + cfg.duration_s
            nemeses = threading.Thread(target=schedule.run, args=(deadline,), name="chaos-nemeses")
            log(
                f"chaos: running {cfg.duration_s:.0f} s, seed {cfg.seed}, retention {cfg.retention_ms} ms, "
                f"nemeses {', '.join(kinds)}"
            )
            if cfg.duration_s < minimum_duration_s(kinds):
                log(
                    f"chaos: WARNING: {cfg.duration_s:g} s is below the {minimum_duration_s(kinds):g} s the schedule "
                    "needs to inject every nemesis once; the run goes on and checks what it injects"
                )
            nemeses.start()
            try:
                asyncio.run(_run_workload(workload, deadline))
            finally:
                schedule.stop()
                nemeses.join()
            heal_everything(env)
            harness_errors += schedule.errors
            warnings += coverage_warnings(kinds, schedule.records, cfg.duration_s)
            for w in warnings:
                log(f"chaos: WARNING: {w}")
            log("chaos: healed; waiting for the replicas to converge")
            converge_error = _converge(cluster, monitor)
            if converge_error:
                harness_errors.append(converge_error)
            finals = collect_final(cluster.endpoints, cluster.credentials, runs=_runs_named(history))
            monitor.stop()
            dumps.stop()
            if cfg.history_out is not None:
                history.dump(cfg.history_out)
            report = check(history, finals)
            # Heals after the workload's deadline have no writes after them to measure.
            heals = [h for h in schedule.heals_ns if h < int(deadline * 1e9)]
            live = liveness(schedule.records, heals, monitor.timeline(), history)
            passed = bool(report.ok) and not harness_errors
            summary = workload.summary() if hasattr(workload, "summary") else {}
            table = render(
                cfg,
                lab,
                schedule.records,
                skipped,
                report,
                live,
                harness_errors,
                passed,
                summary,
                dumps.dumps,
                env,
                warnings,
            )
            result = RunResult(
                cfg,
                passed,
                table,
                report.excerpt if not report.ok else "",
                schedule.records,
                harness_errors,
                report,
                root,
                dict(dumps.dumps),
                list(env.dump_restores),
                list(warnings),
            )
            if not passed:
                _save_logs(cluster, root)
            return result
    finally:
        if passed and not cfg.keep:
            shutil.rmtree(root, ignore_errors=True)


def _runs_named(history: Any) -> list[str]:
    """Every run the workload named (created an execution in, cancelled or read): the ids the
    checker looks up in the history stores when a store holds more than one listing."""
    runs: set[str] = set()
    for op in getattr(history, "ops", ()):
        if op.f in ("cancel_run", "read_cancel") and op.key:
            runs.add(op.key)
        elif op.f == "create" and isinstance(op.value, dict) and op.value.get("run"):
            runs.add(str(op.value["run"]))
    return sorted(runs)


async def _run_workload(workload: Any, deadline: float) -> None:
    remaining = deadline - time.monotonic() + WORKLOAD_GRACE_S
    try:
        await asyncio.wait_for(workload.run(deadline), remaining)
    except TimeoutError:
        print(
            f"chaos: the workload did not stop {WORKLOAD_GRACE_S:.0f} s after the deadline; cancelled", file=sys.stderr
        )


def _converge(cluster: LocalCluster, monitor: Monitor) -> str | None:
    """Wait for one leader and every replica at the same applied index with the same digest."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    last = "nothing yet"
    with cluster.client(timeout_s=3) as ops:
        try:
            ops.wait_for_leader(CONVERGE_TIMEOUT_S / 2, recovery=False)
        except RpcError as exc:
            return f"no leader after heal: {exc}"
        while time.monotonic() < deadline:
            try:
                statuses = [ops.status(e, include_digest=True) for e in cluster.endpoints]
            except RpcError as exc:
                last = str(exc)
            else:
                applied = {s.applied_index for s in statuses}
                digests = {s.state_digest for s in statuses}
                if len(applied) == 1 and len(digests) == 1:
                    return None
                last = f"applied {sorted(applied)}, {len(digests)} digests"
            time.sleep(0.5)
    return f"replicas did not converge within {CONVERGE_TIMEOUT_S:.0f} s after heal ({last})"


def _save_logs(cluster: LocalCluster, root: Path) -> None:
    print(f"chaos: run directory kept: {root} (node logs: {root}/cluster/n*/node.log)", file=sys.stderr)


# -- the table ---------------------------------------------------------------------------------------


def _fmt(values: Sequence[float]) -> str:
    if not values:
        return f"{0:>4}  {'-':>7}  {'-':>7}  {'-':>7}"
    return f"{len(values):>4}  {min(values):>6.2f}s  {statistics.median(values):>6.2f}s  {max(values):>6.2f}s"


def render(
    cfg: RunConfig,
    lab: Lab,
    records: Sequence[FaultRecord],
    skipped: dict[str, str | None],
    report: Any,
    live: Liveness,
    harness_errors: Sequence[str],
    passed: bool,
    workload: dict[str, int] | None = None,
    dumps: dict[str, int] | None = None,
    env: ChaosEnv | None = None,
    warnings: Sequence[str] = (),
) -> str:
    lines = [
        f"chaos run: {cfg.nodes} nodes, {cfg.duration_s:.0f} s, seed {cfg.seed}, "
        + (f"network namespaces ({lab.prefix})" if lab.network_faults else f"LOOPBACK ({lab.fallback_reason})"),
        "",
        f"{'faults injected':<46}{'count':>6}{'total s':>10}",
    ]
    for kind in cfg.kinds:
        mine = [r for r in records if r.kind == kind]
        if kind in skipped:
            lines.append(f"  {kind:<44}{'n/a':>6}  unavailable: {skipped[kind]}")
        else:
            total = sum(r.duration_s() or 0.0 for r in mine)
            lines.append(f"  {kind:<44}{len(mine):>6}{total:>10.1f}")
            if kind in FAKETIME_KINDS + CLUSTER_KINDS + OVERLAP_KINDS:
                lines += [f"      {r.detail}" for r in mine]
    if dumps is not None and env is not None:
        restores = env.dump_restores
        lines += [
            "",
            f"{f'log compaction (threshold {LAB_COMPACTION_ENTRIES} entries)':<46}{'dumps':>6}{'restores':>10}",
            *(f"  {n:<44}{dumps.get(n, 0):>6}{restores.count(n):>10}" for n in sorted(dumps)),
        ]
    counts = report.op_counts
    lines += [
        "",
        "operations",
        f"  {'acknowledged (ok)':<44}{counts.get('ok', 0):>10}",
        f"  {'failed':<44}{counts.get('fail', 0):>10}",
        f"  {'unknown, applied':<44}{counts.get('unknown_applied', 0):>10}",
        f"  {'unknown, not applied':<44}{counts.get('unknown_not_applied', 0):>10}",
        f"  {'  of these, never answered: from final state':<44}"
        f"{report.stats.get('unknown_applied_from_state', 0):>5} applied, "
        f"{report.stats.get('unknown_not_applied_from_state', 0)} not applied",
        *(
            [f"  {'unknown, UNRESOLVED (idempotency table evicted)':<44}{counts['unknown_unresolved']:>10}"]
            if counts.get("unknown_unresolved")
            else []
        ),
        "",
        f"{'invariants':<46}{'violations':>10}",
    ]
    for name, violations in report.invariants.items():
        lines.append(f"  {name:<44}{len(violations):>10}")
    st = report.stats
    if "retired_runs" in st:
        lines += [
            "",
            f"{f'retirement (retention {cfg.retention_ms} ms)':<46}{'count':>10}",
            *(
                f"  {k.replace('_', ' '):<44}{v:>10}"
                for k, v in st.items()
                if k.startswith("retired_")  # the final state's retire.* counters, in the checker's order
            ),
            f"  {'tombstones left in the final state':<44}{st.get('tombstones', 0):>10}",
            f"  {'history records per node (min / max)':<44}"
            f"{st.get('history_records_min', 0):>10} / {st.get('history_records_max', 0)}",
            f"  {'acked creates found retired (per replica)':<44}{st.get('creates_found_retired', 0):>10}",
            f"  {'acked cancels found retired (per replica)':<44}{st.get('cancels_found_retired', 0):>10}",
            f"  {'cancel reads of retired runs, as retired':<44}"
            f"{st.get('cancel_reads_of_retired_runs_checked', 0):>10}",
            f"  {'cancel reads of retired runs (not checked)':<44}{st.get('cancel_reads_of_retired_runs', 0):>10}",
            f"  {'fences of retired executions (not checked)':<44}{st.get('fences_of_retired_executions', 0):>10}",
        ]
    if "grants_judged" in st:
        lines += [
            "",
            f"{'what the fence, grant and convergence checks judged':<46}{'count':>10}",
            f"  {'fence probes refused StaleEpoch':<44}{st['fence_probes_refused_stale_epoch']:>10}",
            f"  {'fence probes refused before the fence':<44}{st['fence_probes_inconclusive']:>10}",
            f"  {'fence probes unknown, not applied':<44}{st['fence_probes_unknown']:>10}",
            f"  {'grants judged (stream: status, generation)':<44}{st['grants_judged']:>10}",
            f"  {'grants to executions not yet shown':<44}{st['grants_not_judged']:>10}",
            f"  {'cancelled runs judged, per replica':<44}{st['cancelled_runs_judged']:>10}",
            f"  {'  still within the bound, per replica':<44}{st['cancelled_runs_within_bound']:>10}",
            f"  {'cancelled runs retired (as CANCELLED_STABLE?)':<44}{st['cancelled_runs_retired']:>10}",
        ]
    if workload:
        lines += ["", f"{'workload (what the scenarios saw)':<46}{'count':>10}"]
        lines += [f"  {k:<44}{v:>10}" for k, v in workload.items()]
    undecided = getattr(report, "undecided", {})
    steps = getattr(report, "lin_steps", {})
    budget = getattr(report, "budget", 0)
    lines += [
        "",
        f"{'linearizability (search budget ' + format(budget, ',') + ' steps)':<46}{'checked':>10}"
        f"{'linearizable':>14}{'undecided':>11}{'violated':>10}{'max steps':>11}",
    ]
    for model, (checked, good) in report.linearizability.items():
        und = len(undecided.get(model, ()))
        lines.append(
            f"  {model:<44}{checked:>10}{good:>14}{und:>11}{checked - good - und:>10}{steps.get(model, 0):>11,}"
        )
    lines += [
        "",
        f"{'liveness (reported, not asserted)':<46}{'n':>4}  {'min':>7}  {'median':>7}  {'max':>7}",
        f"  {'time to a new leader (leader-cutting faults)':<44}{_fmt(live.new_leader_s)}"
        + (f"   ({live.no_new_leader} without one)" if live.no_new_leader else ""),
        f"  {'time to the first acked write after heal':<44}{_fmt(live.first_write_after_heal_s)}"
        + (f"   ({live.no_write_after_heal} without one)" if live.no_write_after_heal else ""),
        f"  {'recovery under a fault (first acked write)':<44}{_fmt(live.recovery_under_fault_s)}"
        + (f"   ({live.no_write_during_fault} faults without one)" if live.no_write_during_fault else ""),
    ]
    if harness_errors:
        lines += ["", "harness errors"] + [f"  {e}" for e in harness_errors]
    if warnings:
        lines += ["", "warnings (the run passes or fails on its checks alone)"] + [f"  {w}" for w in warnings]
    result = verdict(report, passed, harness_errors)
    lines += ["", f"result: {result}{' with warnings' if warnings and passed else ''} (seed {cfg.seed})"]
    return "\n".join(lines)


def verdict(report: Any, passed: bool, harness_errors: Sequence[str]) -> str:
    if passed:
        return "PASS"
    if not harness_errors and getattr(report, "verdict", "fail") == "undecided":
        return "UNDECIDED"
    return "FAIL"


# -- command line ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> RunConfig:
    p = argparse.ArgumentParser(prog="scripts/chaos", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, choices=(3, 5), default=3)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of workload under faults")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--nemeses", default=",".join(ALL_KINDS), help=f"comma-separated subset of: {', '.join(ALL_KINDS)}")
    p.add_argument("--history-out", type=Path, default=None, help="write the history here (JSON lines)")
    p.add_argument("--loopback", action="store_true", help="do not use network namespaces (network faults unavailable)")
    p.add_argument("--keep", action="store_true", help="keep the run directory (node logs) even when it passes")
    p.add_argument("--report-json", type=Path, default=None, help="write the verdict and first anomaly here (JSON)")
    p.add_argument(
        "--retention-ms",
        type=int,
        default=LAB_RETENTION_MS,
        help="the nodes' retention: settled work retires this long after it settled (minimum 1000)",
    )
    a = p.parse_args(argv)
    kinds = [k.strip() for k in a.nemeses.split(",") if k.strip()]
    bad = [k for k in kinds if k not in ALL_KINDS]
    if bad:
        p.error(f"unknown nemeses {bad}; known: {', '.join(ALL_KINDS)}")
    if a.retention_ms < MIN_RETENTION_MS:
        p.error(f"--retention-ms must be at least {MIN_RETENTION_MS}")
    return RunConfig(
        a.nodes, a.duration, a.seed, kinds, a.history_out, a.loopback, a.keep, a.report_json, a.retention_ms
    )


def write_report(path: Path, result: RunResult, wall_s: float) -> None:
    """The run as JSON: verdict, the first anomaly (invariant, message, seconds into the run),
    violations per invariant, harness errors, faults, dumps and restores."""
    from .checker import first_anomaly

    report = result.report
    violations = list(getattr(report, "violations", []))
    first = first_anomaly(violations)
    t0 = getattr(report, "t0_ns", None)
    doc = {
        "ok": result.ok,
        "verdict": verdict(report, result.ok, result.harness_errors) if report is not None else "FAIL",
        "wall_s": round(wall_s, 1),
        "harness_errors": result.harness_errors,
        "violations": {k: len(v) for k, v in (report.invariants.items() if report is not None else ()) if v},
        "first": None
        if first is None
        else {
            "invariant": first.invariant,
            "message": first.message,
            "at_s": None if first.at_ns is None or t0 is None else round((first.at_ns - t0) / 1e9, 3),
        },
        "faults": sorted({r.kind for r in result.records}),
        "warnings": result.warnings,
        "dumps": result.dumps,
        "dump_restores": len(result.dump_restores),
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    began = time.monotonic()
    result = run_chaos(cfg)
    if cfg.report_json is not None:
        write_report(cfg.report_json, result, time.monotonic() - began)
    print(result.table)
    for w in result.warnings:
        print(f"warning: {w}")
    undecided = not result.ok and verdict(result.report, False, result.harness_errors) == "UNDECIDED"
    if not result.ok:
        if result.excerpt:
            print(f"\nshortest history excerpt showing it (seed {cfg.seed}):\n{result.excerpt}")
        print(f"\nreproduce: scripts/chaos --nodes {cfg.nodes} --duration {cfg.duration_s:g} --seed {cfg.seed}")
        return 2 if undecided else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
