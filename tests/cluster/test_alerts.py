"""docs/alerts.yml: promtool accepts it, and every metric it names is one a node exposes."""

from __future__ import annotations

import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from waitgraph.node.metrics import GrpcMetrics, node_collectors
from waitgraph.node.server import SERVED_METHODS
from waitgraph.statemachine import StateMachine

from .harness import REPO

ALERTS = REPO / "docs" / "alerts.yml"
REQUIRED = {
    "WaitgraphNoQuorum": "waitgraph_raft_has_quorum",
    "WaitgraphLivelockFingerprint": "waitgraph_livelock_fingerprint_total",
    "WaitgraphQuarantinedExecutions": "waitgraph_quarantined_executions",
    "WaitgraphLeakedPermits": "waitgraph_leaked_permits_total",
    "WaitgraphCancelSloBreached": "waitgraph_cancel_slo_breaches_total",
}
"""The alerts the operators' issue asks for, and the metric each must read."""


def exposed_names() -> set[str]:
    """Every sample name a leader node exposes, from its three sources (replica, Raft, gRPC)."""
    raft = SimpleNamespace(
        role="leader", term=1, commit_index=1, applied_index=1, has_quorum=True, refused={}, durable=True
    )
    grpc_metrics = GrpcMetrics(SERVED_METHODS)
    service, _, method = SERVED_METHODS[0].lstrip("/").rpartition("/")
    grpc_metrics.handled.labels(service, method, "unary", "OK").inc()
    grpc_metrics.latency.labels(service, method, "unary").observe(0.01)
    registry = CollectorRegistry(auto_describe=False)
    machine = StateMachine()
    for c in node_collectors(lambda fn: fn(machine), lambda: raft, grpc_metrics):
        registry.register(c)
    text = generate_latest(registry).decode()
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_promtool_checks_the_rules() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus); the metric-name check still runs")
    done = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_rule_reads_metrics_that_exist_and_the_required_alerts_are_there() -> None:
    text = ALERTS.read_text()
    names = exposed_names()
    exprs: dict[str, str] = {}
    # Each rule: "- alert: Name" then its "expr:" (one line, or a "|" block indented below it).
    for block in re.split(r"\n\s*- alert: ", text)[1:]:
        alert, _, body = block.partition("\n")
        match = re.search(r"expr: (\|\n(?:\s{10,}.*\n?)+|.*)", body)
        assert match, alert
        exprs[alert.strip()] = match.group(1)
    assert len(exprs) == text.count("- alert: ") >= len(REQUIRED)
    for alert, expr in exprs.items():
        used = set(re.findall(r"\b(?:waitgraph|grpc_server|process)_[a-z_]+", expr))
        assert used, alert
        assert used <= names, (alert, sorted(used - names))
    for alert, metric in REQUIRED.items():
        assert metric in exprs.get(alert, ""), (alert, metric)
