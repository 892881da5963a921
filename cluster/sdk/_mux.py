"""One event stream per client: the sessions of a :class:`~waitgraph.sdk.Client` share it.

Rules kept here:
- A client holds at most one ``WatchEvents`` stream for all its sessions, carrying their agents
  (``agent_ids``) and, for a session with a token of its own, that token (``authorizations``).
  A node then files one subscription for the whole process, not one per agent. (A process
  hosting more agents than one request can name, with their tokens, holds one stream per
  :data:`STREAM_REQUEST_BYTES` of them: a *lane* each, kept as below.)
- Each event goes to the sessions of the agents it names, among those the stream that brought it
  carries, once per session and in cursor order: a session keeps the cursor of the last event it
  was given, and an event at or below it is dropped (counted in ``overlaps``).
- The set changes make-before-break: the stream for the new set is opened after the current
  stream's position and the current one is read until the new one has started; only then is it
  closed. Every event after the position reaches the new stream, the ones the old stream
  delivered meanwhile are dropped by the sessions' cursors: nothing is lost or repeated. Changes
  that arrive while a stream opens are taken together by the next one.
- A session is *started* (its events from then on will all come) when a stream opened after it
  was added, and carrying its agent, has started. It gets nothing before.
- A new stream refused (a token that may not watch an agent) fails only the sessions of the agent
  it was opened to add; the current stream goes on. When it added several, the node does not say
  whose token it refused: they are added again one per stream until the refused one is alone.
  The current stream failing for good (no reconnect helps) fails every session on it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from waitgraph.statemachine.codec import MAX_PAYLOAD_BYTES
from waitgraph.statemachine.effects import Effect

logger = logging.getLogger("waitgraph.sdk")

Events = Callable[..., AsyncIterator["WatchedEvent"]]
""":meth:`waitgraph.sdk.connection.Connection.events`."""


@dataclass(frozen=True, slots=True)
class WatchedEvent:
    """One effect from ``WatchEvents``: its cursor (the same on every node), its log index, the
    agents it concerns, and the effect as the core's dataclass."""

    cursor: int
    log_index: int
    agent_ids: tuple[str, ...]
    effect: Effect


@dataclass(slots=True)
class StreamStats:
    """What an event stream went through (for tests and operators)."""

    events: int = 0
    reconnects: int = 0
    resyncs: int = 0
    duplicates: int = 0
    """Events at or below the cursor already delivered, dropped (the server promises none)."""
    overlaps: int = 0
    """A session's events that the client's stream, reopened for a new set of agents, replayed
    after the stream before it had delivered them: dropped, as expected (docs/sdk.md)."""
    cursor: int | None = None
    """The stream's position: every event with a cursor <= it was delivered or did not concern it."""


@dataclass(eq=False)
class Watch:
    """One session's interest in the client's stream, and what it was given."""

    agent_id: str
    token: str | None
    stats: StreamStats
    deliver: Callable[[WatchedEvent], None]
    resync: Callable[[], None]
    fail: Callable[[BaseException], None]
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cursor: int = -1
    """The cursor of the last event given to the session."""


class _Stream:
    """One ``WatchEvents`` call (reconnecting) for a fixed set of agents."""

    def __init__(self, lane: _Lane, agents: frozenset[str], after: int | None) -> None:
        self.lane = lane
        self.agents = agents
        self.stats = StreamStats()
        self.opened = asyncio.Event()
        """Set when the stream started, or failed before it did (then :attr:`error`)."""
        self.error: BaseException | None = None
        self._forwarded_duplicates = 0
        tokens = sorted({f"Bearer {lane.tokens[a]}" for a in agents if a in lane.tokens})
        events = lane.events(
            after_cursor=after,
            agent_ids=sorted(agents),
            authorizations=tokens,
            stats=self.stats,
            on_started=lambda _cursor: self.opened.set(),
            on_resync=self._resynced,
            on_reconnect=self._reconnected,
        )
        self.task = asyncio.get_running_loop().create_task(self._read(events), name="waitgraph-events")

    async def _read(self, events: AsyncIterator[WatchedEvent]) -> None:
        try:
            async for ev in events:
                self._route(ev)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.error = exc
            self.opened.set()
            self.lane.stream_failed(self, exc)

    def _watches(self) -> list[Watch]:
        by_agent = self.lane.watches
        return [w for a in self.agents for w in by_agent.get(a, ()) if w.started.is_set()]

    def _route(self, ev: WatchedEvent) -> None:
        if self.stats.duplicates > self._forwarded_duplicates:
            for w in self._watches():
                w.stats.duplicates += self.stats.duplicates - self._forwarded_duplicates
            self._forwarded_duplicates = self.stats.duplicates
        by_agent = self.lane.watches
        for agent in ev.agent_ids:
            if agent not in self.agents:
                continue  # another of the client's streams carries it, or none yet
            for w in by_agent.get(agent, ()):
                if not w.started.is_set():
                    continue
                if ev.cursor <= w.cursor:
                    w.stats.overlaps += 1
                    continue
                w.cursor = w.stats.cursor = ev.cursor
                w.stats.events += 1
                try:
                    w.deliver(ev)
                except Exception:  # one bad event must not stop the stream
                    logger.exception("handling %s for %s", type(ev.effect).__name__, agent)

    def _resynced(self) -> None:
        for w in self._watches():
            w.stats.resyncs += 1
            w.resync()

    def _reconnected(self) -> None:
        for w in self._watches():
            w.stats.reconnects += 1

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.wait({self.task})  # unlike awaiting it, lets the caller's own cancel through


class _Lane:
    """One stream's share of the client's sessions, and the stream that carries them."""

    def __init__(self, events: Events) -> None:
        self.events = events
        self.watches: dict[str, list[Watch]] = {}
        """agent -> the watches of the client's sessions of that agent."""
        self.tokens: dict[str, str] = {}
        """agent -> the token of its first session that has one of its own."""
        self.request_bytes = 0
        """About what the agents and tokens weigh in the stream's request."""
        self.current: _Stream | None = None
        self.opened = 0
        self._singly = False
        """A stream adding several agents was refused without naming whom: add one per stream."""
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def add(self, watch: Watch) -> None:
        agent = watch.agent_id
        if agent not in self.watches:
            self.request_bytes += request_bytes(agent, None)
        self.watches.setdefault(agent, []).append(watch)
        if watch.token is not None and agent not in self.tokens:
            self.tokens[agent] = watch.token
            self.request_bytes += request_bytes(agent, watch.token) - request_bytes(agent, None)
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="waitgraph-event-mux")

    def remove(self, watch: Watch) -> None:
        watches = self.watches.get(watch.agent_id, [])
        if watch in watches:
            watches.remove(watch)
            if not watches:
                del self.watches[watch.agent_id]
                self.request_bytes -= request_bytes(watch.agent_id, self.tokens.pop(watch.agent_id, None))
            self._changed.set()

    def stream_failed(self, stream: _Stream, exc: BaseException) -> None:
        """A stream ended for good. Before it started, :meth:`_run` decides whom it fails."""
        if stream is not self.current:
            return
        logger.error("the client's event stream stopped: %s", exc)
        self.current = None
        for w in [w for a in stream.agents for w in self.watches.get(a, ())]:
            self.remove(w)
            w.fail(exc)

    async def _run(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            current = self.current
            kept = current.agents if current is not None else frozenset()
            wanted = self._next_set(kept)
            if current is not None and current.agents == wanted:
                self._start(current, [w for a in wanted for w in self.watches[a]])
                continue
            if not wanted:
                self.current = None
                if current is not None:
                    await current.stop()
                continue
            waiting = [w for a in wanted for w in self.watches[a] if not w.started.is_set()]
            stream = _Stream(self, wanted, current.stats.cursor if current is not None else None)
            self.opened += 1
            await stream.opened.wait()
            if stream.error is not None:
                self._refused(stream, stream.error, kept, waiting)
                continue
            self.current = stream
            self._start(stream, waiting)
            if current is not None:
                await current.stop()

    def _next_set(self, kept: frozenset[str]) -> frozenset[str]:
        """The agents the next stream carries: all the lane's, or after an unexplained refusal
        those kept and one more (the rest follow, one per stream)."""
        wanted = frozenset(self.watches)
        added = sorted(wanted - kept)
        if self._singly and len(added) > 1:
            self._changed.set()
            return (wanted & kept) | {added[0]}
        self._singly = False
        return wanted

    def _start(self, stream: _Stream, watches: list[Watch]) -> None:
        for w in watches:
            if w.agent_id in stream.agents and w in self.watches.get(w.agent_id, ()):
                w.started.set()

    def _refused(self, stream: _Stream, exc: BaseException, kept: frozenset[str], waiting: list[Watch]) -> None:
        """The stream for a new set failed before it started. One agent added: it is refused.
        Several: which one is not said, so they are added again one at a time. None (the
        client's own token, say): every session on it is refused."""
        added = stream.agents - kept
        if len(added) > 1:
            self._singly = True
            self._changed.set()
            return
        failed = (
            [w for w in waiting if w.agent_id in added]
            if added
            else [w for a in stream.agents for w in self.watches.get(a, ())]
        )
        for w in failed:
            self.remove(w)
            w.fail(exc)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})
        if self.current is not None:
            await self.current.stop()
            self.current = None


STREAM_REQUEST_BYTES = MAX_PAYLOAD_BYTES * 3 // 4
"""What one stream's agents and tokens may weigh: a node refuses a request over the codec's limit,
so a client with more agents than fit holds one stream per this many bytes of them."""


def request_bytes(agent_id: str, token: str | None) -> int:
    """About what one agent adds to a ``WatchEventsRequest`` (its id, and ``Bearer <token>``)."""
    return len(agent_id.encode()) + 3 + (len(token.encode()) + 10 if token is not None else 0)


class EventMux:
    """The client's event stream and the sessions on it (see the module's rules): one stream, or
    one per :data:`STREAM_REQUEST_BYTES` of agents for a client hosting more than fit in one."""

    def __init__(self, events: Events) -> None:
        self.events = events
        self.lanes: list[_Lane] = []

    @property
    def opened(self) -> int:
        """Streams this client opened (one per set of agents it carried; for tests and operators)."""
        return sum(lane.opened for lane in self.lanes)

    @property
    def streams(self) -> int:
        """Streams open now."""
        return sum(lane.current is not None for lane in self.lanes)

    def add(self, watch: Watch) -> None:
        self._lane(watch).add(watch)

    def remove(self, watch: Watch) -> None:
        for lane in self.lanes:
            if watch.agent_id in lane.watches:
                lane.remove(watch)

    def _lane(self, watch: Watch) -> _Lane:
        weight = request_bytes(watch.agent_id, watch.token)
        for lane in self.lanes:
            if watch.agent_id in lane.watches:
                return lane
        for lane in self.lanes:
            if lane.request_bytes + weight <= STREAM_REQUEST_BYTES:
                return lane
        lane = _Lane(self.events)
        self.lanes.append(lane)
        return lane

    async def close(self) -> None:
        for lane in self.lanes:
            await lane.close()
