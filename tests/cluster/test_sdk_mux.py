"""One Client, many sessions, one event stream (cluster/sdk/_mux.py), on three real nodes.

Each session carries its agent's own token. The node's ``waitgraph_event_streams`` counts the
streams. The reference is an operator's stream of every agent's events, opened before the sessions:
filtered by agent it is what a stream of that agent alone gets (tests/cluster/test_event_delivery.py
holds the node to that). For each session, the window from its join to its last write must be
exactly that, cursor for cursor: nothing lost, nothing twice, nothing of another agent's.
"""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from waitgraph.proto.v1 import agent_pb2, agent_pb2_grpc
from waitgraph.sdk import Client, OperatorClient, Session, SessionState, WatchedEvent
from waitgraph.statemachine.effects import ExecutionStateChanged, SessionJoined
from waitgraph.statemachine.enums import ExecStatus

from .grpc_harness import TOKENS, GrpcCluster, GrpcNode, leader_of, until
from .test_sdk import settled  # every node applied once: a fresh node may expire a cursor

AGENTS = [f"m{i:02d}" for i in range(60)]
AGENT_TOKENS = {a: f"agent-{a}-token-0123456789abcdef" for a in AGENTS}
EXTRA_TOKENS = [{"name": f"agent-{a}", "role": "agent", "agent_id": a, "token": AGENT_TOKENS[a]} for a in AGENTS]

pytestmark = pytest.mark.timeout(240)


def start(root: Path) -> GrpcCluster:
    c = GrpcCluster(root, extra_tokens=EXTRA_TOKENS, http=True)
    c.__enter__()
    return c


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcCluster]:
    c = start(tmp_path_factory.mktemp("mux"))
    try:
        asyncio.run(settled(c))
        yield c
    finally:
        c.close()


def endpoints(c: GrpcCluster, first: GrpcNode | None = None) -> list[str]:
    nodes = [first] if first is not None else []
    return [n.grpc for n in nodes + [n for n in c.nodes if n is not first]]


def scrape_streams(node: GrpcNode) -> int:
    address = node.member.http_address
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("waitgraph_event_streams ")]
    return int(float(line.split()[1]))


async def streams_open(c: GrpcCluster) -> int:
    """Event streams open on every live node (the metric)."""
    counts = [await asyncio.to_thread(scrape_streams, n) for n in c.live()]
    return sum(counts)


@asynccontextmanager
async def reference(c: GrpcCluster, node: GrpcNode | None = None) -> AsyncIterator[list[WatchedEvent]]:
    """Every agent's events, from an operator's stream opened before anything else."""
    log: list[WatchedEvent] = []
    started = asyncio.Event()
    async with OperatorClient(endpoints(c, node), TOKENS["ops"], retry_deadline_s=60) as op:

        async def read() -> None:
            async for ev in op.events(on_started=lambda _c: started.set()):
                log.append(ev)

        task = asyncio.get_running_loop().create_task(read())
        await asyncio.wait_for(started.wait(), 20)
        try:
            yield log
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def joined_at(ref: list[WatchedEvent], agent: str) -> int:
    return next(ev.cursor for ev in ref if isinstance(ev.effect, SessionJoined) and ev.effect.agent_id == agent)


def completed_at(log: list[WatchedEvent] | Any, execution_id: str) -> int | None:
    return next(
        (
            ev.cursor
            for ev in log
            if isinstance(ev.effect, ExecutionStateChanged)
            and ev.effect.execution_id == execution_id
            and ev.effect.after is ExecStatus.COMPLETED
        ),
        None,
    )


async def check_window(ref: list[WatchedEvent], s: Session, last_execution: str | None, until_cursor: int = 0) -> int:
    """The session's events from its join to ``last_execution``'s completion (or ``until_cursor``)
    are exactly the reference's events of its agent there. Returns how many."""
    a = s.agent_id
    if last_execution is not None:

        async def both() -> bool:
            return (
                completed_at(ref, last_execution) is not None and completed_at(s.event_log, last_execution) is not None
            )

        await until(both, 30, f"{a}'s last completion on both streams")
        end = completed_at(ref, last_execution)
        assert end is not None
    else:
        end = until_cursor
    begin = joined_at(ref, a)
    got = [(ev.cursor, ev.effect) for ev in s.event_log if begin <= ev.cursor <= end]
    want = [(ev.cursor, ev.effect) for ev in ref if begin <= ev.cursor <= end and a in ev.agent_ids]
    cursors = [ev.cursor for ev in s.event_log]
    assert cursors == sorted(set(cursors)), f"{a}: an event twice, or out of order"
    assert all(a in ev.agent_ids for ev in s.event_log), f"{a}: another agent's event"
    assert got == want, f"{a}: {len(got)} events where the reference has {len(want)}"
    return len(got)


def session(c: Client, agent: str, **kw: Any) -> Session:
    return c.session(agent, token=AGENT_TOKENS[agent], heartbeat_interval_s=2, **kw)


async def test_fifty_sessions_of_one_client_hold_one_stream_and_each_gets_exactly_its_own_effects(
    shared: GrpcCluster,
) -> None:
    t = uuid.uuid4().hex[:6]
    agents = AGENTS[:50]
    n = len(agents)
    async with reference(shared) as ref:
        before = await streams_open(shared)
        async with Client(endpoints(shared), AGENT_TOKENS[agents[0]]) as client:
            sessions = [session(client, a) for a in agents]
            await asyncio.gather(*(s.open() for s in sessions))
            try:
                assert await streams_open(shared) == before + 1  # 50 sessions, one stream
                assert client.event_mux.streams == 1

                async def work(i: int, s: Session) -> None:
                    async with s.execution(f"exec:{s.agent_id}-{t}") as ex:
                        async with ex.holding(f"resource:mux-{t}-{i}"):
                            await ex.record_cost(1)
                        # the next agent's resource: contended, so waits are registered and granted
                        async with ex.holding(f"resource:mux-{t}-{(i + 1) % n}"):
                            await ex.record_cost(1)

                await asyncio.gather(*(work(i, s) for i, s in enumerate(sessions)))
                counts = [await check_window(ref, s, f"exec:{s.agent_id}-{t}") for s in sessions]
                assert min(counts) >= 8 and sum(counts) >= 8 * n
                assert all(s.state is SessionState.CONNECTED for s in sessions)
                assert sum(s.stats.duplicates for s in sessions) == 0
            finally:
                await asyncio.gather(*(s.close() for s in sessions))
            assert client.event_mux.streams == 0  # the last session gone, the stream is closed

            async def closed() -> bool:
                return await streams_open(shared) == before

            await until(closed, 10, "the client's stream to be gone from the node")


async def test_sessions_joining_and_leaving_mid_stream_lose_and_repeat_nothing(shared: GrpcCluster) -> None:
    t = uuid.uuid4().hex[:6]
    first, later = AGENTS[50:55], AGENTS[55:60]
    stop = asyncio.Event()
    async with reference(shared) as ref:
        before = await streams_open(shared)
        async with Client(endpoints(shared), AGENT_TOKENS[first[0]]) as client:

            async def busy(s: Session) -> None:
                async with s.execution(f"exec:{s.agent_id}-{t}") as ex:
                    while not stop.is_set():
                        await ex.record_cost(1)
                        await asyncio.sleep(0.01)

            opened = [session(client, a) for a in first]
            await asyncio.gather(*(s.open() for s in opened))
            tasks = [asyncio.get_running_loop().create_task(busy(s)) for s in opened]
            joined: list[Session] = []
            left: list[tuple[Session, int]] = []
            for i, a in enumerate(later):
                await asyncio.sleep(0.2)
                s = session(client, a)
                await s.open()  # a new stream, opened while the old one delivers the others'
                joined.append(s)
                tasks.append(asyncio.get_running_loop().create_task(busy(s)))
                if i in (1, 3):  # one leaves mid-stream: the stream drops it
                    gone = opened[i]
                    tasks[i].cancel()
                    await asyncio.gather(tasks[i], return_exceptions=True)
                    await gone.close()
                    left.append((gone, gone.event_log[-1].cursor))
            await asyncio.sleep(0.5)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            staying = [s for s in opened + joined if s not in [g for g, _ in left]]
            try:
                for s in staying:
                    assert await check_window(ref, s, f"exec:{s.agent_id}-{t}") >= 10
                for s, last in left:  # what it got until it left is whole
                    assert await check_window(ref, s, None, last) >= 10
                assert client.event_mux.opened >= 1 + len(later) and client.event_mux.streams == 1
                assert await streams_open(shared) == before + 1
            finally:
                await asyncio.gather(*(s.close() for s in staying))


@pytest.mark.timeout(300)
async def test_the_stream_resumes_after_a_leader_failover_with_each_session_whole(tmp_path: Path) -> None:
    c = start(tmp_path)
    try:
        await settled(c)
        leader = await leader_of(c)
        witness = next(n for n in c.nodes if n is not leader)
        t = uuid.uuid4().hex[:6]
        agents = AGENTS[:8]
        stop = asyncio.Event()
        # the sessions' stream and writes start on the leader, which is killed mid-run
        async with (
            reference(c, witness) as ref,
            Client(endpoints(c, leader), AGENT_TOKENS[agents[0]], retry_deadline_s=60) as client,
        ):
            sessions = [session(client, a) for a in agents]
            await asyncio.gather(*(s.open() for s in sessions))

            async def busy(s: Session) -> None:
                async with s.execution(f"exec:{s.agent_id}-{t}") as ex:
                    while not stop.is_set():
                        await ex.record_cost(1)
                        await asyncio.sleep(0.02)

            tasks = [asyncio.get_running_loop().create_task(busy(s)) for s in sessions]
            await asyncio.sleep(1.0)
            leader.kill()
            await leader_of(c, 30)
            await asyncio.sleep(1.5)
            stop.set()
            await asyncio.gather(*tasks)
            try:
                for s in sessions:
                    assert await check_window(ref, s, f"exec:{s.agent_id}-{t}") >= 10
                    assert s.stats.reconnects >= 1 and s.stats.duplicates == 0
                    assert s.lost is None

                async def connected() -> bool:  # liveness, per session, came back after the election
                    return all(s.state is SessionState.CONNECTED for s in sessions)

                await until(connected, 30, "every session CONNECTED again")
                assert client.event_mux.opened == 1 and client.event_mux.streams == 1  # resumed, not reopened
                assert await streams_open(c) == 2  # the client's and the reference's
            finally:
                await asyncio.gather(*(s.close() for s in sessions))
    finally:
        c.close()


async def test_a_stream_carries_the_agents_of_its_authorizations_and_no_other(shared: GrpcCluster) -> None:
    """The node's side: ``WatchEventsRequest.authorizations`` (cluster/node/service.py)."""

    def bearer(agent: str) -> str:
        return f"Bearer {AGENT_TOKENS[agent]}"

    async def first(agents: list[str], authorizations: list[str], token: str = AGENT_TOKENS["m00"]) -> Any:
        request = agent_pb2.WatchEventsRequest(agent_ids=agents, authorizations=authorizations)
        call = stub.WatchEvents(request, metadata=(("authorization", f"Bearer {token}"),))
        try:
            async for msg in call:
                return msg.WhichOneof("body")
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details()
        finally:
            call.cancel()

    async with shared.nodes[0].channel() as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        assert await first(["m00", "m01"], [bearer("m01")]) == "started"
        assert await first(["m01"], [bearer("m01")]) == "started"
        refused = await first(["m00", "m01", "m02"], [bearer("m01")])
        assert refused[0] == grpc.StatusCode.PERMISSION_DENIED and "not m02" in refused[1], refused
        refused = await first(["m00"], ["Bearer not-a-token-0123456789"])
        assert refused[0] == grpc.StatusCode.UNAUTHENTICATED, refused
        refused = await first(["m00"], [f"Bearer {TOKENS['old']}"])  # an expired operator token
        assert refused[0] == grpc.StatusCode.UNAUTHENTICATED and "expired" in refused[1], refused
        assert await first(["m05", "m07"], [f"Bearer {TOKENS['ops']}"]) == "started"  # an operator may watch any


async def test_the_heartbeats_of_a_clients_sessions_leave_together(shared: GrpcCluster) -> None:
    """Sessions opened one by one (each joining at its own moment) still heartbeat on one beat, so
    their heartbeats travel as one WriteBatch per beat, not one call each."""
    agents = AGENTS[40:60]
    async with Client(endpoints(shared), AGENT_TOKENS[agents[0]]) as client:
        sessions = []
        for a in agents:
            sessions.append(client.session(a, token=AGENT_TOKENS[a], heartbeat_interval_s=0.5))
            await sessions[-1].open()
            await asyncio.sleep(0.03)  # spread the joins over the interval
        batchers = client.transport._batchers.values()
        items0, calls0 = sum(b.items_sent for b in batchers), sum(b.batches_sent for b in batchers)

        async def beats() -> bool:
            return sum(b.items_sent for b in batchers) - items0 >= 5 * len(agents)

        await until(beats, 60, "five heartbeats of every session")
        items = sum(b.items_sent for b in batchers) - items0
        calls = sum(b.batches_sent for b in batchers) - calls0
        assert items >= 5 * calls, f"{items} heartbeats in {calls} calls"
        assert all(s.state is SessionState.CONNECTED for s in sessions)
        for s in sessions:
            await s.close()
