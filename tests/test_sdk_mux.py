"""The client's one event stream (cluster/sdk/_mux.py) against a fake node, step by step.

The fake node keeps a journal of events (cursor, agents) and serves ``Connection.events``'s
contract: ``started`` after the cursor asked for, then every event after it that names one of the
stream's agents, in cursor order, resuming after ``stats.cursor``. A test holds a new stream's
start (``gate``) while the old stream keeps delivering, so the overlap that make-before-break
replays is there on every run, not by timing. Every session's events are compared with the
reference: the journal's events naming its agent, after the cursor at which it was started.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import grpc

from waitgraph.sdk._mux import STREAM_REQUEST_BYTES, EventMux, StreamStats, Watch, WatchedEvent, request_bytes
from waitgraph.sdk.errors import PermissionDenied
from waitgraph.statemachine.effects import SessionRenewed


@dataclass
class FakeNode:
    events: list[WatchedEvent] = field(default_factory=list)
    grew: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event | None = None
    """While set to an unset event, a new stream does not start (the old one goes on)."""
    stall: tuple[int, asyncio.Event] | None = None
    """(n, e): the first n streams opened deliver nothing more until e is set (they lag behind)."""
    requests: list[tuple[int | None, tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    refuse: Callable[[Sequence[str], Sequence[str]], BaseException | None] = lambda agents, tokens: None
    open_streams: int = 0

    def emit(self, *agents: str) -> int:
        cursor = (len(self.events) + 1) << 24
        fx = SessionRenewed(agent_id=agents[0] if agents else "", expires_at_ms=len(self.events))
        self.events.append(WatchedEvent(cursor, len(self.events) + 1, tuple(sorted(agents)), fx))
        self.grew.set()
        return cursor

    @property
    def head(self) -> int:
        return self.events[-1].cursor if self.events else 0

    async def watch(
        self,
        *,
        after_cursor: int | None,
        agent_ids: Sequence[str],
        authorizations: Sequence[str],
        stats: StreamStats,
        on_started: Callable[[int], None],
        on_resync: Callable[[], None],
        on_reconnect: Callable[[], None],
    ) -> AsyncIterator[WatchedEvent]:
        serial = len(self.requests)
        self.requests.append((after_cursor, tuple(agent_ids), tuple(authorizations)))
        if self.gate is not None:
            await self.gate.wait()
        refused = self.refuse(agent_ids, authorizations)
        if refused is not None:
            raise refused
        stats.cursor = self.head if after_cursor is None else after_cursor
        self.open_streams += 1
        try:
            on_started(stats.cursor)
            mine = set(agent_ids)
            while True:
                new = [e for e in self.events if e.cursor > (stats.cursor or 0)]
                if not new:  # nothing awaited since the look: no wake-up is lost
                    self.grew.clear()
                    await self.grew.wait()
                for ev in new:
                    while self.stall is not None and serial < self.stall[0]:
                        await self.stall[1].wait()
                    stats.cursor = ev.cursor
                    if mine.intersection(ev.agent_ids):
                        yield ev
                        await asyncio.sleep(0)  # the old and the new stream interleave
        finally:
            self.open_streams -= 1


@dataclass
class Sess:
    """What a session keeps of the stream: its events, when it started, whether it failed."""

    agent_id: str
    node: FakeNode
    token: str | None = None
    got: list[WatchedEvent] = field(default_factory=list)
    failed: list[BaseException] = field(default_factory=list)
    start: int = -1
    watch: Watch = field(init=False)

    def __post_init__(self) -> None:
        self.watch = Watch(self.agent_id, self.token, StreamStats(), self.got.append, lambda: None, self.failed.append)

    async def open(self, mux: EventMux) -> None:
        mux.add(self.watch)
        await asyncio.wait_for(self.watch.started.wait(), 5)
        self.start = self.node.head  # everything after this must come (the session joins now)

    def expected(self, until: int) -> list[WatchedEvent]:
        return [e for e in self.node.events if self.start < e.cursor <= until and self.agent_id in e.agent_ids]

    def seen(self, until: int) -> list[WatchedEvent]:
        return [e for e in self.got if self.start < e.cursor <= until]


async def settle(node: FakeNode, sessions: list[Sess], until: int) -> None:
    for _ in range(500):
        if all(not s.expected(until) or (s.got and s.got[-1].cursor >= s.expected(until)[-1].cursor) for s in sessions):
            return
        await asyncio.sleep(0.01)


def check(sessions: list[Sess], until: int) -> None:
    for s in sessions:
        cursors = [e.cursor for e in s.got]
        assert cursors == sorted(set(cursors)), f"{s.agent_id} got an event twice or out of order"
        assert all(s.agent_id in e.agent_ids for e in s.got), f"{s.agent_id} got another agent's event"
        assert s.seen(until) == s.expected(until), f"{s.agent_id} lost events"
        assert s.watch.stats.cursor == (s.got[-1].cursor if s.got else None)


async def test_sessions_share_one_stream_and_each_gets_exactly_its_own_events() -> None:
    node = FakeNode()
    mux = EventMux(node.watch)
    sessions = [Sess(f"m{i:02d}", node) for i in range(50)]
    await asyncio.gather(*(s.open(mux) for s in sessions))
    for i in range(400):
        node.emit(f"m{i % 50:02d}")
        if i % 7 == 0:
            node.emit(f"m{i % 50:02d}", f"m{(i * 3) % 50:02d}", "someone-else")  # several agents
        if i % 50 == 0:
            await asyncio.sleep(0)
    end = node.head
    await settle(node, sessions, end)
    check(sessions, end)
    assert node.open_streams == 1 and mux.streams == 1
    assert sum(len(s.got) for s in sessions) > 450
    await mux.close()
    assert node.open_streams == 0


async def test_a_session_joining_or_leaving_mid_stream_loses_and_repeats_nothing() -> None:
    node = FakeNode()
    mux = EventMux(node.watch)
    first = [Sess(f"a{i}", node) for i in range(5)]
    await asyncio.gather(*(s.open(mux) for s in first))
    later: list[Sess] = []
    gate = asyncio.Event()

    joined = asyncio.Event()

    async def traffic() -> None:
        i = 0
        while not joined.is_set() or i < 600:
            node.emit(f"a{i % 5}")
            node.emit(f"b{i % 5}", f"a{(i + 1) % 5}")
            i += 1
            if i % 3 == 0:
                await asyncio.sleep(0.001)

    writer = asyncio.get_running_loop().create_task(traffic())
    for i in range(6):
        await asyncio.sleep(0.005)
        s = Sess(f"b{i}", node)
        later.append(s)
        if i % 2:
            # The old stream lags (events in flight) when the new one opens: the new one must
            # start where the old one was, not at the head.
            node.stall = (len(node.requests), asyncio.Event())
            await asyncio.sleep(0.01)
            await s.open(mux)
            node.stall[1].set()
            node.stall = None
            continue
        node.gate = gate = asyncio.Event()  # the new stream waits while the old one delivers
        opening = asyncio.get_running_loop().create_task(s.open(mux))
        await asyncio.sleep(0.01)
        node.gate = None
        gate.set()
        await opening
        if i == 2:
            mux.remove(first[0].watch)  # a session leaves mid-stream
    joined.set()
    await writer
    end = node.head
    stay = first[1:] + later
    await settle(node, stay, end)
    check(stay, end)
    check([first[0]], first[0].got[-1].cursor)  # what it had until it left was whole
    assert mux.opened >= 7 and node.open_streams == 1
    overlaps = sum(s.watch.stats.overlaps for s in stay)
    assert overlaps > 0, "the new streams replayed nothing: the dedupe went untested"
    # every new stream resumed after the position of the one before it, never from the head
    assert all(after is not None for after, _, _ in node.requests[1:])
    await mux.close()


async def test_a_refused_agent_fails_alone_and_the_stream_goes_on() -> None:
    node = FakeNode()

    def refuse(agents: Sequence[str], tokens: Sequence[str]) -> BaseException | None:
        if "Bearer bad" in tokens:
            return PermissionDenied("not yours", status=grpc.StatusCode.PERMISSION_DENIED, code="not_owner")
        return None

    node.refuse = refuse
    mux = EventMux(node.watch)
    good = [Sess(f"g{i}", node, token=f"t{i}") for i in range(3)]
    await asyncio.gather(*(s.open(mux) for s in good))
    # two at once, one of them refused: the node does not say which, so they go in one at a time
    bad, fine = Sess("x", node, token="bad"), Sess("y", node, token="ty")
    mux.add(bad.watch)
    mux.add(fine.watch)
    await asyncio.wait_for(fine.watch.started.wait(), 5)
    for _ in range(100):
        if bad.failed:
            break
        await asyncio.sleep(0.01)
    assert len(bad.failed) == 1 and isinstance(bad.failed[0], PermissionDenied)
    assert not any(s.failed for s in [*good, fine])
    fine.start = node.head
    for i in range(30):
        node.emit(f"g{i % 3}")
        node.emit("y", "x")
    end = node.head
    await settle(node, [*good, fine], end)
    check([*good, fine], end)
    assert bad.got == [] and mux.streams == 1
    _, agents, tokens = node.requests[-1]
    assert "x" not in agents and "Bearer bad" not in tokens and "Bearer ty" in tokens
    await mux.close()


async def test_more_agents_than_one_request_holds_take_a_stream_per_share() -> None:
    node = FakeNode()
    mux = EventMux(node.watch)
    token = "x" * 40
    per_stream = STREAM_REQUEST_BYTES // request_bytes("agent-0000", token)
    sessions = [Sess(f"agent-{i:04d}", node, token=token) for i in range(per_stream + 10)]
    await asyncio.gather(*(s.open(mux) for s in sessions))
    assert mux.streams == 2 and node.open_streams == 2
    for i in range(0, len(sessions), 7):
        node.emit(sessions[i].agent_id, sessions[-1 - i].agent_id)
    end = node.head
    await settle(node, sessions, end)
    check(sessions, end)
    await mux.close()
