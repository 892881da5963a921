"""Health that tells the truth about recovery: writes can be fine while no deadlock can be broken.

docs/cli.md's example: voters n1-n3 plus ``operator:admin``, quorum 4. With every node up a
recovery can commit; with n3 killed the two survivors still serve writes (a Raft majority), but
only three voters are left for a quorum of four. ``waitgraph health`` must then exit 1 and say so,
``--writes-only`` must exit 0, and the nodes' gRPC health must keep ``""`` SERVING (load balancers
keep routing writes) while ``waitgraph.v1.Recovery`` turns NOT_SERVING.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from waitgraph.dev.localcluster import LocalCluster
from waitgraph.node.server import RECOVERY_HEALTH
from waitgraph.statemachine.readiness import readiness

from .test_cli_failover import wg

VOTERS = ["--recovery-voters", "node:n1,node:n2,node:n3,operator:admin", "--recovery-quorum", "4"]


def test_readiness_counts_node_voters_by_reachability() -> None:
    voters = ("node:n1", "node:n2", "node:n3", "operator:admin")
    assert readiness(voters, 4, True, {"n1", "n2", "n3"}).can_commit
    down = readiness(voters, 4, True, {"n1", "n2"})
    assert not down.can_commit and down.unreachable == ("node:n3",)
    assert down.reachable == ("node:n1", "node:n2", "operator:admin")
    assert down.describe() == "3 of 4 voters reachable (down: node:n3), quorum 4: no recovery can commit"
    assert readiness(voters, 3, True, {"n1", "n2"}).can_commit
    assert not readiness((), 1, False, {"n1"}).can_commit


def grpc_health(address: str, service: str) -> Any:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return reply.status


@pytest.fixture
def cluster(local_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return local_cluster("quorum4", mode="auto", serve_args=VOTERS)


def until(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.timeout(120)
def test_health_turns_red_for_recovery_while_writes_stay_served(cluster: LocalCluster) -> None:
    until(lambda: wg(cluster, "health").returncode == 0, 30, "health green with every voter up")
    out = wg(cluster, "health")
    assert "recovery ready: 4 of 4 voters reachable, quorum 4: a recovery can commit" in out.stdout, out.stdout
    nodes = json.loads(wg(cluster, "status", "-o", "json").stdout)["nodes"]
    leader = next(n for n in nodes if n["role"] == "leader")
    victim = next(n for n in nodes if n["role"] != "leader")
    until(
        lambda: grpc_health(leader["grpc_address"], RECOVERY_HEALTH) == health_pb2.HealthCheckResponse.SERVING,
        10,
        "waitgraph.v1.Recovery SERVING",
    )

    cluster.kill(victim["node_id"])
    until(lambda: wg(cluster, "health").returncode == 1, 30, "health red once a voter is gone")
    out = wg(cluster, "health")
    assert "healthy: leader" in out.stdout, out.stdout  # writes are still committed
    assert f"recovery NOT READY: 3 of 4 voters reachable (down: node:{victim['node_id']})" in out.stdout
    doc = json.loads(wg(cluster, "health", "-o", "json").stdout)
    assert doc["healthy"] is True and doc["recovery"]["can_commit"] is False
    assert doc["recovery"]["unreachable_voters"] == [f"node:{victim['node_id']}"]
    assert wg(cluster, "health", "--writes-only").returncode == 0
    assert wg(cluster, "freeze", "--reason", "still writable").returncode == 0  # a write commits
    until(
        lambda: grpc_health(leader["grpc_address"], RECOVERY_HEALTH) == health_pb2.HealthCheckResponse.NOT_SERVING,
        10,
        "waitgraph.v1.Recovery NOT_SERVING",
    )
    assert grpc_health(leader["grpc_address"], "") == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.timeout(60)
def test_a_refused_token_is_not_an_outage(cluster: LocalCluster) -> None:
    out = wg(cluster, "health", "--token", "nope")
    assert out.returncode == 1
    assert "unreachable" not in out.stdout and "token refused" in out.stdout, out.stdout
    assert "no node accepted the token (3 answered and refused it" in out.stdout and "UNAUTHENTICATED" in out.stdout
