"""The Prometheus collector (cluster/node/metrics.py): values, cardinality, and one real node's /metrics."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from tests.world import World
from waitgraph.node import metrics as M
from waitgraph.node.front import find_binary
from waitgraph.node.metrics import OTHER_METHOD, WaitgraphCollector
from waitgraph.node.server import SERVED_METHODS
from waitgraph.proto.v1 import operator_pb2, operator_pb2_grpc
from waitgraph.statemachine import StateMachine
from waitgraph.statemachine.cancel import HISTOGRAM_BOUNDS_MS
from waitgraph.statemachine.commands import (
    AcceptToolCall,
    AckCancel,
    CancelRun,
    ConfigureCancellation,
    RecordSideEffect,
    ReemitCancels,
)
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.statemachine.recovery_state import DecisionKind
from waitgraph.statemachine.telemetry import COST_BOUNDS, GENERATION_BUCKETS

from .grpc_harness import auth, token_file
from .harness import REPO, free_ports
from .nodeworld import NodeWorld

REPLICA_SERIES = 535
"""Series of the replica's families (and ``waitgraph_replica_series_exported``): all label
combinations are declared, so this is exact."""
SERIES_BUDGET = 1_500
"""docs/metrics.md: the replica's 535, Raft's 18, the process, platform, GC and build series, and
per gRPC method 3 (started, received, sent) + 10 (unary latency) + 1 per code returned."""


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


def total(series: dict, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    found = [v for (n, ls), v in series.items() if n == name and want <= set(ls)]
    assert found, (name, labels)
    return sum(found)


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
    assert total(before, "waitgraph_wait_edges") == 2
    assert value(before, "waitgraph_wait_edges", target_kind="artifact", generation="1") == 1
    assert value(before, "waitgraph_wait_edges", target_kind="resource", generation="1") == 1
    assert value(before, "waitgraph_wait_edges", target_kind="pool", generation="1") == 0
    assert value(before, "waitgraph_longest_wait_seconds", target_kind="artifact", generation="1") == (
        (w.t + 2_500 - oldest) / 1000
    )
    assert value(before, "waitgraph_epoch") == 0
    assert total(before, "waitgraph_deadlocks_confirmed_total") == 0

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
    assert total(s, "waitgraph_deadlocks_confirmed_total") == 1
    assert value(s, "waitgraph_deadlocks_confirmed_total", reason="policy_v1", generation="1") == 1
    assert value(s, "waitgraph_recovery_proposals_total", generation="1") == 1
    assert value(s, "waitgraph_recoveries_total", mode="auto", outcome="rolled_back") == 1
    assert total(s, "waitgraph_recoveries_total", outcome="shadowed") == 0
    assert total(s, "waitgraph_recoveries_total", mode="shadow") == 0
    assert value(s, "waitgraph_recovery_decisions_retained", mode="auto", kind="VICTIM") == 1
    assert value(s, "waitgraph_rollout_mode", mode="auto") == 1
    assert total(s, "waitgraph_false_positives_retracted_total") == 0
    assert total(s, "waitgraph_candidate_cycles") == 0
    assert total(s, "waitgraph_livelock_escalations_total") == 0
    assert value(s, "waitgraph_livelock_fingerprint_total") == 0
    assert value(s, "waitgraph_cancellations_acknowledged_total") == 2
    # The victim's cost (0: nothing recorded) in the lowest bucket of its kind and generation.
    assert value(s, "waitgraph_victim_cost_units_count", kind="VICTIM", generation="1") == 1
    assert value(s, "waitgraph_victim_cost_units_bucket", kind="VICTIM", generation="1", le="0.0") == 1
    assert total(s, "waitgraph_victim_cost_units_count", kind="TIE_BREAK") == 0
    # Histograms in seconds, cumulative: 40 ms lands in le=0.1, 2 s in le=10; the victim's
    # cancellation was caused by recovery, the third run's by the operator.
    prop = "waitgraph_cancel_propagation_seconds"
    rec = {"cause": "recovery", "generation": "1"}
    op = {"cause": "operator", "generation": "1"}
    assert total(s, f"{prop}_count") == 2
    assert value(s, f"{prop}_count", **rec) == 1 and value(s, f"{prop}_count", **op) == 1
    assert value(s, f"{prop}_sum", **rec) == 0.04 and value(s, f"{prop}_sum", **op) == 2.0
    assert value(s, f"{prop}_bucket", le="0.01", **rec) == 0
    assert value(s, f"{prop}_bucket", le="0.1", **rec) == 1
    assert value(s, f"{prop}_bucket", le="1.0", **op) == 0
    assert value(s, f"{prop}_bucket", le="10.0", **op) == 1
    assert value(s, f"{prop}_bucket", le="+Inf", **op) == 1
    assert total(s, f"{prop}_count", cause="parent") == 0
    quiescence = total(s, "waitgraph_cancel_quiescence_seconds_count")
    assert quiescence == w.st.counters["cancel.quiescence_ms.count"] >= 1
    assert total(s, "waitgraph_leaked_permits_total") == w.st.counters.get("cancel.leaked_permits", 0)
    assert total(s, "waitgraph_unknown_side_effects") == 0
    assert value(s, "waitgraph_quarantined_executions") == 0
    assert total(s, "waitgraph_wait_edges") == w.st.edge_count
    assert not any(name.startswith("waitgraph_raft_") for name, _ in s)  # no raft_status given


_PROMQL_WORDS = frozenset({"sum", "max", "min", "count", "rate", "histogram_quantile"})
_NOT_NAMES = re.compile(r'\{[^}]*\}|\[[^\]]*\]|"[^"]*"|\b(?:by|without)\s*\([^)]*\)')


def dashboard_metrics(path: Path) -> set[str]:
    """Every metric name a Grafana dashboard's queries read: label matchers, ranges, strings and
    grouping clauses removed, PromQL functions left out."""
    doc = json.loads(path.read_text())
    names: set[str] = set()
    for panel in doc["panels"]:
        for target in panel.get("targets", ()):
            bare = _NOT_NAMES.sub(" ", target["expr"])
            names |= {w for w in re.findall(r"[a-z_][a-z0-9_]*", bare) if w not in _PROMQL_WORDS}
    return names


def test_the_dashboard_parser_sees_every_metric(tmp_path: Path) -> None:
    """The dashboard check must be able to fail: a panel on a metric no node serves is found."""
    shipped = REPO / "docs" / "grafana-dashboard.json"
    names = dashboard_metrics(shipped)
    assert {"waitgraph_epoch", "grpc_server_handled_total", "grpc_server_handling_seconds_bucket"} <= names
    assert not names & {"grpc_method", "target_kind", "le", "instance", "by", "unary"}, names
    doc = json.loads(shipped.read_text())
    bogus = 'sum by (x) (rate(waitgraph_no_such_series_total{a="b"}[5m]))'
    doc["panels"][0]["targets"].append({"refId": "Z", "expr": bogus})
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    assert dashboard_metrics(tmp_path / "bad.json") - names == {"waitgraph_no_such_series_total"}


def test_only_the_leader_exports_the_replicated_series() -> None:
    """The replica's families are equal on every node at one applied index: a follower exports
    none of them (sum() over nodes would count each event once per node), only its Raft view."""
    machine = StateMachine()
    for role, exported in (("leader", 1.0), ("follower", 0.0), ("candidate", 0.0)):
        raft = SimpleNamespace(
            role=role, term=2, commit_index=5, applied_index=5, has_quorum=role == "leader", refused={}, durable=True
        )
        registry = CollectorRegistry(auto_describe=False)
        registry.register(WaitgraphCollector(lambda fn: fn(machine), lambda raft=raft: raft))
        text = generate_latest(registry).decode()
        names = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
        replica = {n for n in names if not n.startswith(("waitgraph_raft_", "waitgraph_replica_series_exported"))}
        assert ("waitgraph_epoch" in replica) is (exported == 1.0), (role, sorted(replica)[:5])
        assert bool(replica) is (exported == 1.0), (role, replica)
        assert f"waitgraph_replica_series_exported {exported}" in text
        assert "waitgraph_raft_term 2.0" in text


def test_series_stay_bounded_and_carry_no_ids_over_10000_runs_and_agents(tmp_path: Path) -> None:
    idle = scrape(StateMachine(), 0.0)
    assert len(idle) == REPLICA_SERIES <= SERIES_BUDGET
    w = NodeWorld(tmp_path)  # every command through the node's replicated apply
    try:
        w.configure()
        w.ok("operator:op", ConfigureCancellation(slo_ms=1_000, reemit_interval_ms=100))
        ids: set[str] = set()
        for i in range(10_000):
            eid = w.execution(f"e{i}", agent=f"ag{i}", run=f"run{i}")
            ids.update((f"ag{i}", f"run{i}", eid, f"resource:r{i}", f"fx{i}"))
            w.hold(eid, f"resource:r{i}")
            if i % 7 == 3:
                gen, cg = w.gen(eid), w.cg(eid)
                owner = w.owner(eid)
                w.ok(
                    owner,
                    AcceptToolCall(execution_id=eid, generation=gen, observed_cancel_generation=cg, effect_id=f"fx{i}"),
                )
                w.ok(
                    owner,
                    RecordSideEffect(
                        execution_id=eid, generation=gen, effect_id=f"fx{i}", outcome=EffectOutcome.UNKNOWN
                    ),
                )
            if i % 10 == 9:  # waits on the previous execution's resource, with a free-text reason
                w.wait(eid, f"resource:r{i - 1}", reason=f"PROMPT {i}: summarise the security review")
            if i % 13 == 5:
                w.ok("operator:op", CancelRun(run_id=f"run{i}", observed_cancel_generation=0, reason=f"PROMPT {i}"))
        # One deadlock recovered, and every cancellation past its SLO quarantined.
        w.execution("A")
        w.execution("B")
        w.hold("exec:A", "resource:browser-9")
        w.produces("exec:B", "artifact:review-42")
        w.wait("exec:A", "artifact:review-42")
        w.wait("exec:B", "resource:browser-9")
        assert all(out.ok for out in w.recover())
        w.ok("node:n1", ReemitCancels(), dt=5_000)
        st = w.st
        assert len(st.executions) == 10_002 and len(st.sessions) == 10_002 and len(st.runs) == 10_002
        assert st.recovery.epoch == 1 and st.cancel.requests and st.edge_count >= 1_000
        series = scrape(w.m, w.t / 1000)
    finally:
        w.close()
    assert set(series) == set(idle), set(series) ^ set(idle)  # the same series, only values moved
    assert total(series, "waitgraph_wait_edges", target_kind="resource") >= 1_000
    assert total(series, "waitgraph_unknown_side_effects_recorded_total", source="recorded") > 1_000
    assert total(series, "waitgraph_quarantined_executions") > 0
    label_values = {v for _, labels in series for _, v in labels}
    assert not label_values & ids
    assert not any("PROMPT" in v or v.startswith(("ag", "run", "exec:", "resource:", "fx")) for v in label_values)
    assert label_values <= {
        *M.WAIT_KINDS,
        *GENERATION_BUCKETS,
        *M.DECISION_REASONS,
        *M.RETRACT_REASONS,
        *M.VICTIM_KINDS,
        *M.CANCEL_CAUSES,
        *M.UNKNOWN_SOURCES,
        *M.OUTCOMES,
        *M.MODES,
        *M.RETIRED_KINDS,
        *(k.value for k in DecisionKind),
        *(floatToGoString(b / 1000) for b in HISTOGRAM_BOUNDS_MS),
        *(floatToGoString(b) for b in COST_BOUNDS),
        "+Inf",
    }


def test_a_serving_node_exposes_raft_and_epoch_series(tmp_path: Path) -> None:
    raft, grpc_port, metrics = free_ports(3)
    cmd = [
        sys.executable,
        "-m",
        "waitgraph",
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
        # One node cannot bootstrap recovery alone (quorum 1 has no margin): an operator votes too.
        *("--recovery-voters", "node:n1,operator:ops", "--recovery-quorum", "2", "--recovery-max-rollback", "1"),
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
        assert sum(v for k, v in series.items() if k.startswith("waitgraph_wait_edges[")) == 0
        # gRPC calls through the node's interceptor: counted by method and code, nothing else.
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = operator_pb2_grpc.OperatorServiceStub(channel)
            for _ in range(3):
                stub.Status(operator_pb2.StatusRequest(), metadata=auth("ops"), timeout=10)
            with pytest.raises(grpc.RpcError) as denied:
                stub.Status(operator_pb2.StatusRequest(), timeout=10)
        code = M.go_code_name(denied.value.code())
        status = "waitgraph.v1.OperatorService/Status"
        # The interceptor counts a call once its status is sent, so the client can see the
        # refusal a moment before the counter moves: scrape until it has (bounded).
        scrape_deadline = time.monotonic() + 10
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as resp:
                families = list(text_string_to_metric_families(resp.read().decode()))
            samples = [(s.name, s.labels, s.value) for fam in families for s in fam.samples]
            handled = {
                (f"{labels['grpc_service']}/{labels['grpc_method']}", labels["grpc_code"]): v
                for name, labels, v in samples
                if name == "grpc_server_handled_total"
            }
            if (status, code) in handled or time.monotonic() > scrape_deadline:
                break
            time.sleep(0.05)
        assert len(samples) <= SERIES_BUDGET
        assert handled[(status, "OK")] == 3 and handled[(status, code)] == 1, handled
        served = {m.lstrip("/") for m in SERVED_METHODS}
        assert {m for m, _ in handled} <= {*served, f"{OTHER_METHOD}/{OTHER_METHOD}"}
        count = [
            v for n, ls, v in samples if n == "grpc_server_handling_seconds_count" and ls["grpc_method"] == "Status"
        ]
        assert count == [4.0], count  # unary calls only, every status: 3 OK + 1 refused
        assert all(ls["grpc_type"] == "unary" for n, ls, _ in samples if n.startswith("grpc_server_handling_seconds"))
        build = [ls for n, ls, _ in samples if n == "waitgraph_build_info"]
        assert len(build) == 1 and build[0]["version"] and build[0]["pysyncobj"] == "0.3.17", build
        assert build[0]["grpc_front"] == ("native" if find_binary() is not None else "python"), build
        assert any(n == "process_resident_memory_bytes" for n, _, _ in samples)
        assert [v for n, _, v in samples if n == "waitgraph_replica_series_exported"] == [1.0]
        # The shipped dashboard reads only series a live node serves, and promtool accepts them.
        live = {n for n, _, _ in samples}
        used = dashboard_metrics(REPO / "docs" / "grafana-dashboard.json")
        assert used and used <= live, sorted(used - live)
        promtool = shutil.which("promtool")
        if promtool is not None:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as resp:
                text = resp.read()
            checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
            assert checked.returncode == 0, checked.stdout + checked.stderr
        assert not any(n.endswith("_created") for n, _, _ in samples)
        # The node logs JSON lines (stderr is not a terminal) carrying its id; the leader's
        # bootstrap runs on its loop, so wait for its decision to be applied and logged.
        while time.monotonic() < deadline and '"recovery_configured"' not in log.read_text():
            time.sleep(0.1)
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        assert lines and all(line["node"] == "n1" for line in lines)
        assert any(line.get("term", 0) >= 1 for line in lines), lines
        # The leader's bootstrap ConfigureRecovery is a decision: one event, with its Raft context.
        [configured] = [line for line in lines if line.get("event") == "recovery_configured"]
        assert configured["actor"] == "node:n1" and configured["term"] >= 1 and configured["log_index"] >= 1
        assert configured["voters"] == ["node:n1", "operator:ops"] and configured["epoch"] == 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
