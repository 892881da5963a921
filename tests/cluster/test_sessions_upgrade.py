"""Sessions while old and new releases run side by side (docs/deploy.md, section 7): a rolling upgrade.

The old release is main's tree before the lessor (:data:`BEFORE_LESSOR`: heartbeats are log
entries there, and its ``Tick`` expires sessions by the replicated lease), in a virtual
environment of its own (``test_raft_upgrade.release_python``). Two nodes run it, one runs this
tree; an agent that heartbeats only through the new node keeps its session past
several leases, an agent that stops is expired on every replica, and the replicas' digests stay
equal (an entry one release cannot decode would part them): once under an old leader, once under
the new node (leaders are restarted until each kind leads). Then the two old nodes are upgraded,
one at a time, and the new release's lessor takes over: heartbeats leave the log.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.cluster.grpc_harness import until
from waitgraph.dev.localcluster import LocalCluster, LocalNode
from waitgraph.proto.v1 import agent_pb2_grpc, commands_pb2, operator_pb2, operator_pb2_grpc, types_pb2

from .test_raft_upgrade import release_python

pytestmark = pytest.mark.asyncio

BEFORE_LESSOR = "7f4ba7e"
"""main with issue #37 reverted: the release before heartbeats left the log."""
LEASE_MS = 3000


@pytest.fixture(scope="module")
def old_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    return release_python(tmp_path_factory.mktemp("before-lessor"), BEFORE_LESSOR)


def _md(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def _status(lc: LocalCluster, node: LocalNode) -> operator_pb2.StatusResponse:
    assert lc.credentials is not None
    async with grpc.aio.insecure_channel(node.grpc_address) as ch:
        stub = operator_pb2_grpc.OperatorServiceStub(ch)
        request = operator_pb2.StatusRequest(fresh=True, include_digest=True)
        reply: operator_pb2.StatusResponse = await stub.Status(request, metadata=_md(lc.credentials.admin), timeout=10)
        return reply


async def _session(lc: LocalCluster, node: LocalNode, agent: str) -> int:
    """The agent's session status on ``node``'s replica (a fresh read)."""
    assert lc.credentials is not None
    async with grpc.aio.insecure_channel(node.grpc_address) as ch:
        stub = operator_pb2_grpc.OperatorServiceStub(ch)
        request = operator_pb2.GraphRequest(agent_id=agent, fresh=True)
        graph = await stub.Graph(request, metadata=_md(lc.credentials.admin), timeout=10)
    return next(s.status for s in graph.sessions if s.agent_id == agent)


async def _agent_write(lc: LocalCluster, node: LocalNode, agent: str, rpc: str, request: Any) -> None:
    """One write through ``node``, retried with its request id while an election runs."""
    assert lc.credentials is not None
    request.request_id = uuid.uuid4().hex
    async with grpc.aio.insecure_channel(node.grpc_address) as ch:
        stub = agent_pb2_grpc.AgentServiceStub(ch)
        for attempt in range(20):
            try:
                await getattr(stub, rpc)(request, metadata=_md(lc.credentials.agents[agent]), timeout=10)
                return
            except grpc.aio.AioRpcError as exc:
                if exc.code() is not grpc.StatusCode.UNAVAILABLE or attempt == 19:
                    raise
                await asyncio.sleep(0.5)


async def _same_digests(lc: LocalCluster) -> None:
    async def same() -> bool:
        replies = [await _status(lc, n) for n in lc.members]
        return len({r.state_digest for r in replies}) == 1  # a fresh read moves the index, not the state

    await until(same, 30, "equal digests on every replica")


async def _leader(lc: LocalCluster) -> LocalNode:
    async def find() -> LocalNode | None:
        for n in lc.members:
            if n.alive and (await _status(lc, n)).role == "leader":
                return n
        return None

    return await until(find, 30, "a leader")


async def _heartbeats(lc: LocalCluster, node: LocalNode, agent: str, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await _agent_write(lc, node, agent, "Heartbeat", commands_pb2.HeartbeatRequest(agent_id=agent))
        await asyncio.sleep(LEASE_MS / 3000)


async def _phase(lc: LocalCluster, new: LocalNode, live: str, dead: str) -> None:
    """``live`` heartbeats through the new node only, for three leases; ``dead`` joins and stops."""
    for agent in (live, dead):
        await _agent_write(
            lc, new, agent, "JoinSession", commands_pb2.JoinSessionRequest(agent_id=agent, lease_ms=LEASE_MS)
        )
    await _heartbeats(lc, new, live, 3 * LEASE_MS / 1000)
    for n in lc.members:
        assert await _session(lc, n, live) == types_pb2.SESSION_STATUS_ACTIVE, (n.node_id, live)

    async def expired() -> bool:
        return all([await _session(lc, n, dead) == types_pb2.SESSION_STATUS_EXPIRED for n in lc.members])

    await until(expired, 20, f"{dead}'s session to expire on every replica")
    await _same_digests(lc)


async def _lead(lc: LocalCluster, new: LocalNode, by_new: bool) -> None:
    """Restart leaders until the new node leads (``by_new``) or an old one does."""
    for _ in range(12):
        leader = await _leader(lc)
        if (leader is new) == by_new:
            return
        lc.terminate(leader.node_id)
        lc.spawn(leader.node_id)
        lc.wait_ready(leader.node_id)
        await _same_digests(lc)
    raise AssertionError(f"no {'new' if by_new else 'old'} leader after 12 elections")


@pytest.mark.timeout(420)
async def test_sessions_through_a_rolling_upgrade_from_the_release_before_the_lessor(
    tmp_path: Path, old_python: str
) -> None:
    agents = ["live1", "dead1", "live2", "dead2", "live3", "dead3"]
    lc = LocalCluster(nodes=3, root=tmp_path / "c", agents=agents)
    lc.prepare()
    old, new = lc.members[:2], lc.members[2]
    for m in old:
        m.python = old_python
    with lc:  # starts every node
        await _lead(lc, new, by_new=False)  # an old leader: its Tick (v1) expires by the replicated lease
        await _phase(lc, new, "live1", "dead1")
        await _lead(lc, new, by_new=True)  # the new one: it must propose only what the old ones decode
        await _phase(lc, new, "live2", "dead2")
        for m in old:  # the upgrade, one node at a time
            lc.terminate(m.node_id)
            m.python = new.python
            lc.spawn(m.node_id)
            lc.wait_ready(m.node_id)
            await _same_digests(lc)
        await _phase(lc, new, "live3", "dead3")
        for n in lc.members:
            assert (await _status(lc, n)).sessions.mode == "lessor", n.node_id
