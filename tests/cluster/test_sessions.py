"""Sessions at scale (issue #37): heartbeats off the log, expiry by the leader, admission.

Real node processes (the one launcher, cluster/dev/localcluster.py); log entries are counted by
command kind from each node's ``waitgraph_commands_applied_total`` (cluster/node/metrics.py), which
counts what that node's replica applied, entry by entry.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
import uuid
from collections.abc import Callable

import grpc
import pytest

from tests.cluster.grpc_harness import until
from waitgraph.dev.localcluster import LocalCluster, LocalNode
from waitgraph.proto.v1 import agent_pb2_grpc, operator_pb2, operator_pb2_grpc
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.commands import Command
from waitgraph.statemachine.outcome import Outcome
from waitgraph.wire import convert

pytestmark = pytest.mark.asyncio

AGENTS = [f"s{i:03d}" for i in range(100)]


_TOKENS: dict[str, str] = {}
"""agent id (and ``ops``) -> its token in the cluster the test started."""


def _md(agent: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {_TOKENS[agent]}"),)


def _applied(node: LocalNode) -> dict[str, int]:
    """Commands this node applied, by kind, from its /metrics."""
    with urllib.request.urlopen(f"http://{node.http_address}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        m.group(1): int(float(m.group(2)))
        for m in re.finditer(r'^waitgraph_commands_applied_total\{kind="([^"]+)"\} (\S+)$', text, re.M)
    }


class Agents:
    """Many agents, each on a node of its own choosing (round robin), over one channel per node."""

    def __init__(self, nodes: list[LocalNode]) -> None:
        self.nodes = nodes
        self.channels = {n.node_id: grpc.aio.insecure_channel(n.grpc_address) for n in nodes}

    def stub(self, node: LocalNode) -> agent_pb2_grpc.AgentServiceStub:
        return agent_pb2_grpc.AgentServiceStub(self.channels[node.node_id])

    async def do(self, node: LocalNode, agent: str, cmd: Command, timeout_s: float = 10.0) -> Outcome:
        request = convert.request_from_command(cmd, uuid.uuid4().hex)
        reply = await getattr(self.stub(node), cmd.KIND)(request, metadata=_md(agent), timeout=timeout_s)
        return convert.outcome_from_proto(reply)

    async def heartbeat(self, agent: str, i: int) -> None:
        """One heartbeat, on the agent's node or, if that one is down, the next live one."""
        for k in range(len(self.nodes)):
            node = self.nodes[(i + k) % len(self.nodes)]
            if not node.alive:
                continue
            try:
                assert (await self.do(node, agent, C.Heartbeat(agent_id=agent), timeout_s=3)).ok
                return
            except grpc.aio.AioRpcError:
                continue

    async def close(self) -> None:
        for ch in self.channels.values():
            await ch.close()


async def _status(node: LocalNode) -> operator_pb2.StatusResponse:
    async with grpc.aio.insecure_channel(node.grpc_address) as ch:
        stub = operator_pb2_grpc.OperatorServiceStub(ch)
        md = _md("ops")
        reply: operator_pb2.StatusResponse = await stub.Status(operator_pb2.StatusRequest(), metadata=md, timeout=5)
        return reply


async def _leader(lc: LocalCluster) -> LocalNode:
    async def find() -> LocalNode | None:
        for n in lc.members:
            if n.alive:
                try:
                    if (await _status(n)).role == "leader":
                        return n
                except grpc.aio.AioRpcError:
                    pass
        return None

    return await until(find, 30, "a leader")


async def _lessor_everywhere(lc: LocalCluster) -> None:
    """Every node knows every member runs the lessor (their hellos, docs/deploy.md section 7):
    until then a heartbeat is written to the log, as a release before the lessor expects."""

    async def known() -> bool:
        modes = [(await _status(n)).sessions.mode for n in lc.members if n.alive]
        return all(mode == "lessor" for mode in modes)

    await until(known, 30, "every node in the lessor's mode")


@pytest.fixture
def start(local_cluster: Callable[..., LocalCluster]) -> Callable[..., LocalCluster]:
    """A 3-node cluster (conftest's ``local_cluster``) with a token per agent, its /metrics served."""

    def make(agents: list[str], *args: str) -> LocalCluster:
        lc = local_cluster("c", mode=None, agents=agents, http=True, serve_args=["--detect-interval-ms", "50", *args])
        assert lc.credentials is not None
        _TOKENS.clear()
        _TOKENS.update(lc.credentials.agents, ops=lc.credentials.operator)
        return lc

    return make


@pytest.mark.timeout(150)
async def test_leases_survive_a_leader_failover_and_no_heartbeat_is_written(
    start: Callable[..., LocalCluster],
) -> None:
    lc = start(AGENTS)
    nodes = list(lc.members)
    agents = Agents(nodes)
    lease_ms, beat_s, quiet_s, pause_s = 5000, 1.0, 30.0, 3.0
    try:
        await _leader(lc)
        await _lessor_everywhere(lc)
        for i, a in enumerate(AGENTS):
            assert (await agents.do(nodes[i % 3], a, C.JoinSession(agent_id=a, lease_ms=lease_ms))).ok
        leader = await _leader(lc)
        survivors = [n for n in nodes if n is not leader]
        before = [_applied(n) for n in survivors]
        beats = 0

        async def beat_for(seconds: float) -> None:
            nonlocal beats
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                started = time.monotonic()
                await asyncio.gather(*(agents.heartbeat(a, i) for i, a in enumerate(AGENTS)))
                beats += len(AGENTS)
                await asyncio.sleep(max(0.0, beat_s - (time.monotonic() - started)))

        await beat_for(quiet_s / 2)
        lc.kill(leader.node_id)  # the lessor's memory dies with it
        # No heartbeat for a while across the election: every join is far more than a lease ago, so
        # only the new leader's full lease from its promotion keeps these sessions.
        await asyncio.sleep(pause_s)
        await beat_for(quiet_s / 2)
        new_leader = await _leader(lc)
        after = [_applied(n) for n in survivors]
        for b, a in zip(before, after, strict=True):
            delta = {k: a.get(k, 0) - b.get(k, 0) for k in a if a.get(k, 0) != b.get(k, 0)}
            # ~6,000 heartbeats over a quiet minute-half and a failover; the log got none of them,
            # and no session expired (the new leader gave every one a full lease).
            assert "Heartbeat" not in delta and "ExpireSession" not in delta, delta
            assert sum(delta.values()) < 100, delta
        assert beats >= 20 * len(AGENTS)
        for n in survivors:
            s = (await _status(n)).sessions
            assert s.active == len(AGENTS), (n.node_id, s)
        s = (await _status(new_leader)).sessions
        assert s.leading and s.suspended_count == 0 and s.oldest_heartbeat_age_ms < lease_ms, s
    finally:
        await agents.close()


@pytest.mark.timeout(120)
async def test_a_killed_agents_session_expires_on_every_replica_and_releases_what_it_held(
    start: Callable[..., LocalCluster],
) -> None:
    lc = start(["dead", "live"])
    nodes = list(lc.members)
    agents = Agents(nodes)
    leader = await _leader(lc)
    follower = next(n for n in nodes if n is not leader)
    try:
        for a in ("dead", "live"):
            assert (await agents.do(follower, a, C.JoinSession(agent_id=a, lease_ms=2000))).ok
        for cmd in (
            C.CreateTarget(target_id="resource:gpu"),
            C.CreateExecution(execution_id="exec:d", run_id="r1", observed_cancel_generation=0),
            C.StartExecution(execution_id="exec:d", generation=1, observed_cancel_generation=0),
            C.Acquire(execution_id="exec:d", generation=1, target_id="resource:gpu"),
        ):
            assert (await agents.do(follower, "dead", cmd)).ok, cmd
        for cmd in (
            C.CreateExecution(execution_id="exec:l", run_id="r2", observed_cancel_generation=0),
            C.StartExecution(execution_id="exec:l", generation=1, observed_cancel_generation=0),
            C.RegisterWait(
                waiter_id="exec:l", waiter_generation=1, target_id="resource:gpu", target_generation=1, reason="gpu"
            ),
        ):
            assert (await agents.do(follower, "live", cmd)).ok, cmd
        # "dead" stops heartbeating (its process is gone); "live" keeps at it, through a follower.
        stop = asyncio.Event()

        async def keep_live() -> None:
            while not stop.is_set():
                await agents.heartbeat("live", nodes.index(follower))
                await asyncio.sleep(0.5)

        task = asyncio.create_task(keep_live())

        async def expired_everywhere() -> bool:
            for n in nodes:
                st = await _status(n)
                # exec:d is now an orphan: its owner's session ended (DESIGN.md section 5)
                if st.sessions.active != 1 or st.orphaned_executions != 1:
                    return False
            return True

        await until(expired_everywhere, 30, "dead's session expired on every replica")
        # Today's rule (statemachine/state.py is_orphaned): an orphan keeps its holds and waits, so
        # detection still sees it and it can be a victim, until its agent rejoins or its run is
        # cancelled. Every replica agrees on that state.
        for n in nodes:
            async with grpc.aio.insecure_channel(n.grpc_address) as ch:
                stub = operator_pb2_grpc.OperatorServiceStub(ch)
                md = _md("ops")
                g = await stub.Graph(operator_pb2.GraphRequest(), metadata=md, timeout=5)
                gpu = next(t for t in g.targets if t.target_id == "resource:gpu")
                assert [h.execution_id for h in gpu.holders] == ["exec:d"], (n.node_id, gpu)
                assert [w.waiter_id for w in g.waits] == ["exec:l"], (n.node_id, g.waits)
        stop.set()
        await task
        applied = _applied(follower)
        assert applied.get("ExpireSession", 0) >= 1 and applied.get("Heartbeat", 0) == 0, applied
    finally:
        await agents.close()


@pytest.mark.timeout(90)
async def test_joins_beyond_the_session_limit_are_refused_and_change_nothing(
    start: Callable[..., LocalCluster],
) -> None:
    names = ["a1", "a2", "a3", "a4"]
    lc = start(names, "--max-sessions", "3", "--max-sessions-per-node", "2")
    nodes = list(lc.members)
    agents = Agents(nodes)
    try:
        await _leader(lc)
        node = nodes[0]
        for a in ("a1", "a2"):
            assert (await agents.do(node, a, C.JoinSession(agent_id=a, lease_ms=60_000))).ok
        before = _applied(node)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await agents.do(node, "a3", C.JoinSession(agent_id="a3", lease_ms=60_000))
        err = refused.value
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "too_many_sessions" in str(err.trailing_metadata()) and "max_sessions_per_node" in err.details()
        # another node admits a3; the cluster's limit (3 active) then refuses a4 anywhere
        assert (await agents.do(nodes[1], "a3", C.JoinSession(agent_id="a3", lease_ms=60_000))).ok
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await agents.do(nodes[2], "a4", C.JoinSession(agent_id="a4", lease_ms=60_000))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_sessions)" in refused.value.details() or "(max_sessions" in refused.value.details()
        # a rejoin of an active session adds none: admitted
        assert (await agents.do(node, "a1", C.JoinSession(agent_id="a1", lease_ms=60_000))).ok
        after = _applied(node)
        assert after.get("JoinSession", 0) - before.get("JoinSession", 0) == 2  # a3 on node 2, a1's rejoin
        st = (await _status(nodes[2])).sessions
        assert (st.active, st.max_per_node, st.max_per_cluster) == (3, 2, 3), st
    finally:
        await agents.close()
