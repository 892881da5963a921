"""Runtime membership changes on a real cluster: a node replaced by one at a new address while an
SDK writer keeps writing (docs/deploy.md, "Membership changes"; cluster/node/raft/_membership.py).

Three `waitgraph serve` processes; a fourth on new ports is started with every member in its
--peers, added with `waitgraph member add`, then an old member is removed with `waitgraph member
remove` and stopped. Every write the writer saw acknowledged is on every remaining replica, the
replicas' digests are equal, `member list` and `status` show the new membership, and recovery's
voter set followed it (quorum re-checked at each change). The guards refuse, with their codes and
exit 1, an address where no node listens (pysyncobj issue #89), an address already a member, and
the leader's own removal; each refusal leaves the membership as it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from waitgraph.dev.localcluster import LocalCluster, free_ports
from waitgraph.sdk.sync import SyncClient
from waitgraph.statemachine.commands import CreateTarget

from .harness import REPO

pytestmark = pytest.mark.timeout(300)


def wg(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
    env.update(cluster.env(), PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "waitgraph", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=90
    )


def members(cluster: LocalCluster) -> dict[str, Any]:
    out = wg(cluster, "member", "list", "-o", "json")
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


class Writer(threading.Thread):
    """Creates artifact:w-0, w-1, ... one at a time, each under its own request id until it is
    acknowledged (a retry after an error is answered from the idempotency table)."""

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.acked: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        creds = self.cluster.credentials
        assert creds is not None
        with SyncClient(self.cluster.endpoints, creds.agents["a"]) as client:
            session = client.session("a")
            session.open()
            i = 0
            while not self.stop.is_set():
                target = f"artifact:w-{i}"
                try:
                    out = client.submit(CreateTarget(target_id=target), request_id=f"writer-{i}")
                except Exception as exc:  # an election, a node going away: retry the same request
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(0.1)
                    continue
                assert out.ok or out.duplicate, out
                self.acked.append(target)
                i += 1
            session.close()

    def wait_for(self, count: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < count:
            assert self.is_alive(), "the writer died"
            assert time.monotonic() < deadline, f"only {len(self.acked)} writes in {timeout_s}s: {self.errors[-3:]}"
            time.sleep(0.05)


def caught_up(cluster: LocalCluster, node_id: str, timeout_s: float = 60) -> None:
    """Until ``node_id`` applied everything the leader had committed when this was called (the
    writer keeps writing meanwhile, so digests taken one node after another cannot agree)."""
    with cluster.client() as ops:
        target = next(s for s in (ops.status(m.grpc_address) for m in cluster.members) if s.role == "leader")
        deadline = time.monotonic() + timeout_s
        while (got := ops.status(cluster.node(node_id).grpc_address)).applied_index < target.commit_index:
            assert time.monotonic() < deadline, f"{node_id} at {got.applied_index}, leader had {target.commit_index}"
            time.sleep(0.2)


def converged(cluster: LocalCluster, expected: int, timeout_s: float = 60) -> str:
    """The common state digest once every running node reports one and they agree."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = wg(cluster, "status", "--digest", "--no-discover", "-o", "json")
        nodes = json.loads(out.stdout)["nodes"] if out.returncode == 0 else []
        digests = {n.get("state_digest") for n in nodes}
        if len(nodes) == expected and len(digests) == 1 and None not in digests and "" not in digests:
            return str(digests.pop())
        assert time.monotonic() < deadline, f"no convergence: {out.stdout[-2000:]} {out.stderr[-500:]}"
        time.sleep(0.5)


def test_a_node_is_replaced_at_a_new_address_while_writes_flow(local_cluster: Callable[..., LocalCluster]) -> None:
    lc = local_cluster("replace", nodes=3)
    writer = Writer(lc)
    writer.start()
    try:
        writer.wait_for(20)
        before = members(lc)
        assert [m["node_id"] for m in before["members"]] == ["n1", "n2", "n3"]
        assert before["voters"] == ["node:n1", "node:n2", "node:n3"] and before["quorum"] == 2

        # the guards: nothing listens there (issue #89), an address already a member
        nowhere = f"127.0.0.1:{free_ports(1)[0]}"
        out = wg(lc, "member", "add", "n9", "--raft-addr", nowhere)
        assert out.returncode == 1 and "not_listening" in out.stderr, out.stderr
        out = wg(lc, "member", "add", "n9", "--raft-addr", lc.node("n2").raft_address)
        assert out.returncode == 1 and "already_member" in out.stderr, out.stderr
        assert members(lc)["members"] == before["members"]

        # a fourth node on new ports: started first (it binds its Raft port), then added
        n4 = lc.new_member("n4")
        lc.spawn("n4")
        lc.wait_ready("n4")
        out = wg(
            lc, "member", "add", "n4", "--raft-addr", n4.raft_address, "--grpc-addr", n4.grpc_address, "-o", "json"
        )
        assert out.returncode == 0, out.stderr
        added = json.loads(out.stdout)
        assert [m["node_id"] for m in added["members"]] == ["n1", "n2", "n3", "n4"]
        assert added["voters"] == ["node:n1", "node:n2", "node:n3", "node:n4"] and added["quorum"] == 3
        out = wg(lc, "member", "add", "n4", "--raft-addr", n4.raft_address)
        assert out.returncode == 1 and "already_member" in out.stderr, out.stderr
        writer.wait_for(len(writer.acked) + 20)
        caught_up(lc, "n4")

        # the leader cannot remove itself; an old follower goes
        listed = members(lc)
        leader = next(m["node_id"] for m in listed["members"] if m["leader"])
        out = wg(lc, "member", "remove", leader)
        assert out.returncode == 1 and "member_is_leader" in out.stderr, out.stderr
        gone = next(m for m in ("n3", "n2", "n1") if m != leader)
        out = wg(lc, "member", "remove", gone, "-o", "json")
        assert out.returncode == 0, out.stderr
        removed = json.loads(out.stdout)
        left = sorted({"n1", "n2", "n3", "n4"} - {gone})
        assert [m["node_id"] for m in removed["members"]] == left
        assert removed["voters"] == [f"node:{m}" for m in left] and removed["quorum"] == 2
        lc.forget_member(gone)
        out = wg(lc, "member", "remove", gone)
        assert out.returncode == 1 and "not_member" in out.stderr, out.stderr
        writer.wait_for(len(writer.acked) + 20)
    finally:
        writer.stop.set()
        writer.join(30)
    assert not writer.is_alive()

    digest = converged(lc, 3)
    assert digest
    with lc.client() as ops:
        for m in lc.members:
            graph = ops.call(m.grpc_address, "Graph", _graph_request())
            have = {t.target_id for t in graph.targets}
            lost = [t for t in writer.acked if t not in have]
            assert not lost, f"{m.node_id} lost acknowledged writes: {lost[:5]}"
    final = members(lc)
    assert [m["node_id"] for m in final["members"]] == left
    assert final["voters"] == [f"node:{m}" for m in left] and final["pending_change_index"] in (0, "0", None)
    out = wg(lc, "status", "-o", "json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    seen = {n["node_id"] for n in status["nodes"] if n.get("node_id")}
    assert seen == set(left), status
    out = wg(lc, "health", "-o", "json")
    assert out.returncode == 0, out.stdout + out.stderr

    # a restart after the changes: the node replays its journal (the membership entries with it)
    # and rejoins the new membership; the new node itself restarts as a member
    for node_id in (next(m for m in left if m != "n4"), "n4"):
        lc.kill(node_id)
        lc.spawn(node_id)
        lc.wait_ready(node_id)
        assert converged(lc, 3)
    assert [m["node_id"] for m in members(lc)["members"]] == left


def _graph_request() -> Any:
    from waitgraph.proto.v1 import operator_pb2

    return operator_pb2.GraphRequest(limit=10_000, fresh=True)
