"""The Prometheus collector (cluster/metrics.py): values, cardinality, and one real node's /metrics."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cluster.metrics import WaitgraphCollector
from statemachine import Envelope, StateMachine
from statemachine.commands import AckCancel, CancelRun, CreateExecution, JoinSession
from statemachine.enums import EffectOutcome
from statemachine.outcome import Result
from tests.world import World

from .grpc_harness import token_file
from .harness import REPO, free_ports

SERIES_BUDGET = 200
"""Every series the collector may expose, whatever the number of runs, agents and executions."""


def scrape(machine: StateMachine, now_s: float) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WaitgraphCollector(lambda fn: fn(machine), clock=lambda: now_s))
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(series: dict, name: str, **labels: str) -> float:
    return series[(name, tuple(sorted(labels.items())))]


def test_collector_reports_a_recovered_deadlock_and_an_acknowledged_cancel() -> None:
    w = World()
    w.configure()
    # The seed's two-node cycle: A waits for B's review, B waits for the browser A holds.
    w.execution("A")
    w.execution("B")
    w.hold("exec:A", "resource:browser-9")
    w.produces("exec:B", "artifact:review-42")
    w.wait("exec:A", "artifact:review-42")
    w.wait("exec:B", "resource:browser-9")
    oldest = min(e.registered_at_ms for ws in w.st.waits_by_waiter.values() for e in ws.values())
    before = scrape(w.m, (w.t + 2_500) / 1000)
    assert value(before, "waitgraph_wait_edges") == 2
    assert value(before, "waitgraph_longest_wait_seconds") == (w.t + 2_500 - oldest) / 1000
    assert value(before, "waitgraph_epoch") == 0
    assert value(before, "waitgraph_deadlocks_confirmed_total") == 0

    [out] = w.recover()
    assert out.ok
    victim = next(d.winner_id for d in w.st.recovery.decisions.values())
    assert victim is not None
    # The victim's agent stops and acknowledges the recovery's cancellation 40 ms later.
    ex = w.st.executions[victim]
    w.ok(
        w.owner(victim),
        AckCancel(
            execution_id=victim,
            generation=ex.generation,
            cancel_generation=w.cg(victim),
            side_effects=EffectOutcome.NONE,
        ),
        dt=40,
    )
    # An operator cancels a third run; its execution acknowledges after 2 s.
    c = w.execution("C", run="run-c")
    w.ok("operator:op", CancelRun(run_id="run-c", observed_cancel_generation=0, reason="operator"))
    w.ok(
        w.owner(c),
        AckCancel(execution_id=c, generation=w.gen(c), cancel_generation=w.cg(c), side_effects=EffectOutcome.NONE),
        dt=2_000,
    )

    s = scrape(w.m, w.t / 1000)
    assert value(s, "waitgraph_epoch") == 1
    assert value(s, "waitgraph_deadlocks_confirmed_total") == 1
    assert value(s, "waitgraph_recoveries_total", outcome="rolled_back") == 1
    assert value(s, "waitgraph_recoveries_total", outcome="shadowed") == 0
    assert value(s, "waitgraph_recovery_decisions_retained", mode="auto", kind="VICTIM") == 1
    assert value(s, "waitgraph_rollout_mode", mode="auto") == 1
    assert value(s, "waitgraph_false_positives_retracted_total") == 0
    assert value(s, "waitgraph_candidate_cycles") == 0
    assert value(s, "waitgraph_livelock_escalations_total") == 0
    assert value(s, "waitgraph_livelock_fingerprint_total") == 0
    assert value(s, "waitgraph_cancellations_acknowledged_total") == 2
    # Histograms in seconds, cumulative: 40 ms lands in le=0.1, 2 s in le=10.
    prop = "waitgraph_cancel_propagation_seconds"
    assert value(s, f"{prop}_count") == 2
    assert value(s, f"{prop}_sum") == 2.04
    assert value(s, f"{prop}_bucket", le="0.01") == 0
    assert value(s, f"{prop}_bucket", le="0.1") == 1
    assert value(s, f"{prop}_bucket", le="1.0") == 1
    assert value(s, f"{prop}_bucket", le="10.0") == 2
    assert value(s, f"{prop}_bucket", le="+Inf") == 2
    assert value(s, "waitgraph_cancel_quiescence_seconds_count") == w.st.counters["cancel.quiescence_ms.count"] >= 1
    assert value(s, "waitgraph_leaked_permits_total") == w.st.counters.get("cancel.leaked_permits", 0)
    assert value(s, "waitgraph_unknown_side_effects") == 0
    assert value(s, "waitgraph_quarantined_executions") == 0
    assert value(s, "waitgraph_wait_edges") == w.st.edge_count
    assert not any(name.startswith("waitgraph_raft_") for name, _ in s)  # no raft_status given


def test_series_stay_bounded_and_carry_no_ids_over_10000_runs_and_agents() -> None:
    m = StateMachine()
    ids: set[str] = set()
    for i in range(10_000):
        agent, run, eid = f"ag{i}", f"run{i}", f"exec:e{i}"
        ids.update((agent, run, eid))
        actor = f"agent:{agent}"
        for cmd in (
            JoinSession(agent_id=agent, lease_ms=3_600_000),
            CreateExecution(execution_id=eid, run_id=run, observed_cancel_generation=0),
        ):
            out = m.apply(Envelope(actor=actor, at_ms=i + 1, request_id=None, command=cmd))
            assert out.result is Result.APPLIED, (out.code, out.message)
    assert len(m.state.executions) == 10_000
    series = scrape(m, 20.0)
    assert 0 < len(series) < SERIES_BUDGET
    label_values = {v for _, labels in series for _, v in labels}
    assert all(v not in ids and not any(i in v for i in ("ag", "run", "exec:")) for v in label_values), label_values
    assert label_values <= {
        *("rolled_back", "shadowed", "escalated", "reconciliation", "voted_down"),
        *("shadow", "auto-safe", "auto", "VICTIM", "TIE_BREAK", "SHADOW", "RECONCILIATION", "ESCALATION"),
        *("0.01", "0.1", "1.0", "10.0", "60.0", "600.0", "+Inf"),
    }


def test_a_serving_node_exposes_raft_and_epoch_series(tmp_path: Path) -> None:
    raft, grpc_port, metrics = free_ports(3)
    cmd = [
        sys.executable,
        "-m",
        "cluster.cli",
        "serve",
        "--insecure",
        "--id",
        "n1",
        "--raft-addr",
        f"127.0.0.1:{raft}",
        "--grpc-addr",
        f"127.0.0.1:{grpc_port}",
        "--data-dir",
        str(tmp_path / "data"),
        "--tokens-file",
        str(token_file(tmp_path / "tokens.json")),
        "--metrics-addr",
        f"127.0.0.1:{metrics}",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
    env["PYTHONPATH"] = str(REPO)
    log = tmp_path / "node.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 30
        series: dict[str, float] = {}
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=2) as resp:
                    text = resp.read().decode()
            except OSError:
                time.sleep(0.2)
                continue
            series = {
                s.name + repr(sorted(s.labels.items())): s.value
                for fam in text_string_to_metric_families(text)
                for s in fam.samples
            }
            if series.get("waitgraph_raft_role[('role', 'leader')]") == 1:
                break
            time.sleep(0.2)
        assert series.get("waitgraph_raft_role[('role', 'leader')]") == 1, (series, log.read_text())
        assert series["waitgraph_raft_has_quorum[]"] == 1
        assert series["waitgraph_raft_term[]"] >= 1
        assert "waitgraph_raft_commit_index[]" in series and "waitgraph_raft_applied_index[]" in series
        assert series["waitgraph_epoch[]"] == 0
        assert series["waitgraph_wait_edges[]"] == 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
