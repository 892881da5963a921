"""The event journal behind AgentService.WatchEvents: applied effects, numbered by cursor.

Rules kept here:
- A cursor is ``(log index << CURSOR_SHIFT) | n`` where n counts the effects of that log entry in
  apply order (every effect of every envelope of the entry, duplicates served from the
  idempotency table excepted). Every replica applies the same entries to the same state, so an
  event has the same cursor on every node, and cursors grow with the log: a client may resume
  on any node after the last cursor it processed and gets exactly the events after it.
- Each node keeps the last ``capacity`` events in memory. The **horizon** is the largest cursor
  the node may be missing: events with a larger cursor are all in the ring or still to come. It
  rises when the ring evicts an event, and when the node cannot know what it applied before:
  at start and after a snapshot install it becomes "everything up to the next entry applied".
  Resuming after a cursor below the horizon is :class:`CursorExpired`: resync from the state.
- Recording runs on pysyncobj's tick thread inside apply (under the machine lock): it only
  appends and, when a watcher waits, wakes the asyncio loop with one ``call_soon_threadsafe``;
  it never blocks on it. With nobody watching (most followers, most of the time) the loop is not
  woken at all: a waiter registers under the journal's lock in the same step that finds nothing
  new, so a record either sees it or came before that check.
- Delivery (:meth:`EventJournal.subscribe`): each stream is a :class:`Subscription` for a set of
  agents (or all of them) and effect kinds, filed in an index agent -> subscriptions. Recording an
  event appends it to the queue of the subscriptions of the agents it names (and of the
  all-agents ones), and wakes only those that wait: the cost is O(events x interested
  subscribers), not O(streams x events). A subscription made after a cursor gets the ring's
  matching events after it first, in the same step that files it, so nothing falls between. A
  queue longer than the ring means the stream is further behind than the ring reaches: it ends
  with :class:`CursorExpired`, as reading the ring would have.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from waitgraph.statemachine import Envelope, Outcome, StateMachine
from waitgraph.statemachine.commands import RetireSettled
from waitgraph.statemachine.effects import RETIREMENT_EFFECTS, Effect, RecoveryProposed
from waitgraph.statemachine.errors import Status, WaitgraphError
from waitgraph.statemachine.fastinit import fast_init
from waitgraph.statemachine.state import State

logger = logging.getLogger("waitgraph.node.events")

CURSOR_SHIFT = 24
"""Effects one log entry may hold and still get cursors (16,777,216): far above any real entry."""
_MAX_ORDINAL = (1 << CURSOR_SHIFT) - 1


class CursorExpired(WaitgraphError):
    """The client's cursor is older than what this node still holds: re-read the state."""

    status = Status.FAILED_PRECONDITION
    code = "cursor_expired"


@fast_init  # one per effect applied, on every node
@dataclass(frozen=True, slots=True)
class Event:
    cursor: int
    log_index: int
    agent_ids: tuple[str, ...]
    """The agents whose executions or sessions the effect names (sorted; may be empty)."""
    effect: Effect


def cursor_of(log_index: int, ordinal: int) -> int:
    return (log_index << CURSOR_SHIFT) | ordinal


_OWNER_FIELDS = ("execution_id", "satisfier_id", "edge_id", "members", "agent_id")


def _owner_fields_of(cls: type) -> tuple[str, ...]:
    """Those of ``_OWNER_FIELDS`` an effect class has. Effects are slotted dataclasses, so a field
    their class lacks is never on an instance; looking it up anyway costs an exception each time."""
    if "__dict__" in dir(cls):
        return _OWNER_FIELDS
    return tuple(name for name in _OWNER_FIELDS if hasattr(cls, name))


Owners = Callable[[dict[str, Any], Effect], tuple[str, ...]]


def _execution_owner(name: str) -> Owners:
    """The owner of the one execution a field names (an ``edge_id``: its waiter)."""
    edge = name == "edge_id"

    def one(execs: dict[str, Any], fx: Effect) -> tuple[str, ...]:
        eid = getattr(fx, name)
        if not isinstance(eid, str):
            return ()
        ex = execs.get(eid.partition(">")[0] if edge else eid)
        return () if ex is None else (ex.agent_id,)

    return one


def _agent_field(execs: dict[str, Any], fx: Effect) -> tuple[str, ...]:
    agent = getattr(fx, "agent_id", None)
    return (agent,) if isinstance(agent, str) else ()


def _no_owner(execs: dict[str, Any], fx: Effect) -> tuple[str, ...]:
    return ()


def _owners_of(cls: type) -> Owners:
    """How to find the agents of one effect class: most name one execution or one agent, and
    get a function that reads just that field (one apply records every effect on every node)."""
    names = _owner_fields_of(cls)
    if issubclass(cls, RecoveryProposed) or len(names) > 1 or names == ("members",):
        return _fields_owners(names)
    if not names:
        return _no_owner
    if names == ("agent_id",):
        return _agent_field
    return _execution_owner(names[0])


def _fields_owners(names: tuple[str, ...]) -> Owners:
    def several(execs: dict[str, Any], fx: Effect) -> tuple[str, ...]:
        agents: list[str] = []
        for name in names:
            value = getattr(fx, name, None)
            if name == "agent_id":
                if isinstance(value, str):
                    agents.append(value)
                continue
            if name == "edge_id" and isinstance(value, str):
                value = value.partition(">")[0]  # the waiter
            for eid in (value or ()) if name == "members" else (value,):
                if isinstance(eid, str):
                    ex = execs.get(eid)
                    if ex is not None:
                        agents.append(ex.agent_id)
        # Most effects name one agent: only several need sorting and deduplicating.
        return tuple(agents) if len(agents) < 2 else tuple(sorted(set(agents)))

    return several


_owners_by_class: dict[type, Owners] = {}


def owners(state: State, fx: Effect) -> tuple[str, ...]:
    """Agents an effect concerns: the owners of the executions it names (``execution_id``, the
    waiter of ``edge_id``, an ``exec:`` ``satisfier_id``, recovery ``members``) and its ``agent_id``;
    for a recovery proposal also the agents in the voter set."""
    find = _owners_by_class.get(type(fx))
    if find is None:
        find = _owners_by_class[type(fx)] = _owners_of(type(fx))
    if not isinstance(fx, RecoveryProposed):
        return find(state.executions, fx)
    # Agents in the voter set (docs/design.md §4) vote on every proposal, members or not.
    agents = [*find(state.executions, fx)]
    agents.extend(v.partition(":")[2] for v in state.recovery.config.voters if v.startswith("agent:"))
    return tuple(agents) if len(agents) < 2 else tuple(sorted(set(agents)))


class Subscription:
    """One stream's interest (:meth:`EventJournal.subscribe`) and the matching events recorded
    for it but not yet taken (:meth:`next`)."""

    __slots__ = ("_journal", "_queue", "_wakeup", "agents", "closed_reason", "kinds")

    def __init__(self, journal: EventJournal, agents: frozenset[str] | None, kinds: frozenset[str]) -> None:
        self._journal = journal
        self.agents = agents
        """None: every agent's events (an operator's stream)."""
        self.kinds = kinds
        """Empty: every kind."""
        self._queue: list[Event] = []
        self._wakeup: asyncio.Future[None] | None = None
        self.closed_reason: CursorExpired | None = None

    def matches(self, ev: Event) -> bool:
        """Today's per-stream filter (the one the index must agree with, effect for effect)."""
        return (self.agents is None or not self.agents.isdisjoint(ev.agent_ids)) and (
            not self.kinds or ev.effect.KIND in self.kinds
        )

    def take(self) -> tuple[list[Event], int]:
        """The queued events and the position: every event with a cursor <= it was taken now or
        before, or did not match. Raises :class:`CursorExpired` if the queue overflowed."""
        return self._journal._take(self)

    async def next(self, timeout_s: float) -> tuple[list[Event], int]:
        """:meth:`take`, waiting up to ``timeout_s`` for an event if none is queued."""
        batch, position = self.take()
        if batch or self._journal.closed:
            return batch, position
        loop = asyncio.get_running_loop()
        with self._journal._lock:
            if self._queue or self.closed_reason is not None:
                wakeup = None
            else:
                wakeup = self._wakeup = loop.create_future()
        if wakeup is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup, timeout_s)
            self._wakeup = None
        return self.take()


_NO_SUBS: set[Subscription] = set()
"""Never added to: what an agent nobody watches is filed under."""


class EventJournal:
    """A bounded, cursor-ordered ring of applied effects, shared by every watcher of this node."""

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._first = 0
        """Index of the oldest live event in ``_events`` (evicted ones are cut in bulk)."""
        self._horizon = 0
        self._head = 0
        self._gap = True
        """The node does not know what it applied before its next entry (start, snapshot)."""
        self._lost_entry = False
        self._skip_entry = -1
        self._entry = -1
        self._ordinal = 0
        self._last_applied: Callable[[], int | None] = lambda: None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._wake_pending = False
        self._closed = False
        self._subs_by_agent: dict[str, set[Subscription]] = {}
        """agent -> the subscriptions naming it: the delivery index (module docstring)."""
        self._subs_all: set[Subscription] = set()
        """Subscriptions to every agent's events."""
        self._to_wake: set[Subscription] = set()

    # -- wiring ----------------------------------------------------------------------------------

    def bind(self, last_applied: Callable[[], int | None], loop: asyncio.AbstractEventLoop | None) -> None:
        """``last_applied``: the Raft index of the last entry fully applied (read on the tick
        thread while the next one is applied, and by :meth:`position` at any time); ``loop``: the
        event loop whose watchers :meth:`record` wakes."""
        self._last_applied = last_applied
        self._loop = loop

    def close(self) -> None:
        """Wake every watcher for the last time (the node is stopping)."""
        self._closed = True
        self._wake()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the tick thread -----------------------------------------------------------------------------

    def state_replaced(self) -> None:
        with self._lock:
            self._gap = True

    def record(self, state: State, effects: tuple[Effect, ...]) -> None:
        last = self._last_applied()
        with self._lock:
            if last is None:
                # Before bind (a restarted node replaying while it starts): these effects cannot
                # be numbered, and neither can the rest of their entry.
                self._gap = self._lost_entry = True
                return
            index = last + 1
            if index != self._entry:
                self._entry, self._ordinal = index, 0
            if self._gap:
                reached = self._head  # as far as any open stream can have got
                self._raise_horizon(self._gap_horizon(index))
                if self._lost_entry:
                    self._skip_entry = index
                self._gap = self._lost_entry = False
                if reached < self._horizon:
                    self._gap_ends_streams()
            if index == self._skip_entry:
                return
            append, base, head = self._events.append, index << CURSOR_SHIFT, self._head
            for fx in effects:
                ordinal = self._ordinal
                self._ordinal += 1
                if ordinal > _MAX_ORDINAL:
                    logger.error("log entry %d has more than %d effects; the rest get no cursor", index, _MAX_ORDINAL)
                    self._raise_horizon(cursor_of(index + 1, 0) - 1)
                    continue
                cursor = base | ordinal  # cursor_of(index, ordinal)
                if cursor <= head:
                    # Never happens while entries apply in log order; refuse to break the order.
                    logger.error("event cursor %d is not after the head %d; dropped", cursor, head)
                    continue
                ev = Event(cursor, index, owners(state, fx), fx)
                append(ev)
                self._head = head = cursor
                if self._subs_all or self._subs_by_agent:
                    self._deliver(ev)
            if len(self._events) - self._first > self.capacity:
                self._evict()
            waiting = self._wakeup is not None or bool(self._to_wake)
        if waiting:
            self._schedule_wake()

    def _gap_ends_streams(self) -> None:
        """A snapshot was installed: the streams open now missed what it covered (as a read of the
        ring after their cursor would find it below the horizon). Under the lock."""
        subs = set(self._subs_all)
        for more in self._subs_by_agent.values():
            subs.update(more)
        for sub in subs:
            if sub.closed_reason is None:
                sub.closed_reason = CursorExpired(
                    f"this node installed a snapshot: events up to its horizon {self._horizon} are not here; "
                    "re-read your state and watch again without a cursor",
                    horizon=self._horizon,
                )
                sub._queue.clear()
            if sub._wakeup is not None:
                self._to_wake.add(sub)

    def _deliver(self, ev: Event) -> None:
        """Queue ``ev`` for the subscriptions interested in it (under the lock)."""
        subs: set[Subscription]
        by_agent = self._subs_by_agent
        if len(ev.agent_ids) == 1 and not self._subs_all:
            subs = by_agent.get(ev.agent_ids[0], _NO_SUBS)
        else:
            subs = set(self._subs_all)
            for agent in ev.agent_ids:
                subs.update(by_agent.get(agent, ()))
        for sub in subs:
            if sub.kinds and ev.effect.KIND not in sub.kinds:
                continue
            queue = sub._queue
            queue.append(ev)
            if len(queue) > self.capacity and sub.closed_reason is None:
                sub.closed_reason = CursorExpired(
                    f"this stream is more than {self.capacity} events behind (the node's event ring); re-read "
                    "your state and watch again without a cursor",
                    horizon=ev.cursor,
                )
                queue.clear()
            if sub._wakeup is not None:
                self._to_wake.add(sub)

    # -- subscriptions ---------------------------------------------------------------------------------

    def subscribe(self, agents: frozenset[str] | None, kinds: frozenset[str], after: int | None) -> Subscription:
        """File a stream's interest in the index; with ``after``, the ring's matching events after
        it are queued first (:class:`CursorExpired` below the horizon). Returns it with the cursor
        it starts after (``after``, or the head now)."""
        self.position()  # settles a provisional horizon
        sub = Subscription(self, agents, kinds)
        with self._lock:
            start = self._head if after is None else after
            if start < self._horizon:
                raise self._expired(start)
            events = self._events
            i = bisect.bisect_right(events, start, lo=self._first, key=_cursor)
            sub._queue = [ev for ev in events[i:] if sub.matches(ev)]
            if agents is None:
                self._subs_all.add(sub)
            else:
                for agent in agents:
                    self._subs_by_agent.setdefault(agent, set()).add(sub)
        return sub

    def _expired(self, cursor: int) -> CursorExpired:
        return CursorExpired(
            f"cursor {cursor} is older than this node's event horizon {self._horizon} (it keeps the last "
            f"{self.capacity} events and none from before it started or installed a snapshot); re-read "
            "your state and watch again without a cursor",
            horizon=self._horizon,
        )

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subs_all.discard(sub)
            for agent in sub.agents or ():
                subs = self._subs_by_agent.get(agent)
                if subs is not None:
                    subs.discard(sub)
                    if not subs:
                        del self._subs_by_agent[agent]

    def subscriptions(self) -> int:
        with self._lock:
            return len(self._subs_all) + len({id(s) for subs in self._subs_by_agent.values() for s in subs})

    def _take(self, sub: Subscription) -> tuple[list[Event], int]:
        self.position()
        with self._lock:
            if sub.closed_reason is not None:
                raise sub.closed_reason
            batch, sub._queue = sub._queue, []
            return batch, self._head

    def _gap_horizon(self, index: int) -> int:
        """After a gap, entry ``index`` is the first one numbered completely (the next one if
        part of ``index`` went unnumbered)."""
        return cursor_of(index + 1 if self._lost_entry else index, 0) - 1

    def _raise_horizon(self, cursor: int) -> None:
        if cursor > self._horizon:
            self._horizon = cursor
        if self._horizon > self._head:
            self._head = self._horizon

    def _evict(self) -> None:
        live = len(self._events) - self._first
        if live <= self.capacity:
            return
        drop = live - self.capacity
        self._first += drop
        self._raise_horizon(self._events[self._first - 1].cursor)
        if self._first > self.capacity:  # cut the dead prefix in bulk: amortized O(1) per event
            del self._events[: self._first]
            self._first = 0

    def _schedule_wake(self) -> None:
        loop = self._loop
        if loop is None or self._wake_pending:
            return
        self._wake_pending = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: the node is stopping
            loop.call_soon_threadsafe(self._wake)

    # -- the asyncio side ------------------------------------------------------------------------------

    def _wake(self) -> None:
        self._wake_pending = False
        waiter, self._wakeup = self._wakeup, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        with self._lock:
            subs, self._to_wake = self._to_wake, set()
        if self._closed:
            subs.update(self._subs_all)
            for more in self._subs_by_agent.values():
                subs.update(more)
        for sub in subs:
            fut = sub._wakeup
            if fut is not None and not fut.done():
                fut.set_result(None)

    async def wait(self, position: int, timeout_s: float) -> None:
        """Until an event after ``position`` is recorded (or the journal closes), at most
        ``timeout_s``. Returns at once if there is one already: a wake-up that ran while the
        caller was busy is not lost."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        with self._lock:  # the check and the registration in one step (module docstring)
            if self._head > position:
                return
            if self._wakeup is None or self._wakeup.done():
                self._wakeup = loop.create_future()
            wakeup = self._wakeup
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(wakeup), timeout_s)

    def position(self) -> tuple[int, int]:
        """(head, horizon) now. With a gap not yet resolved by an apply, the horizon is set from
        the last applied index: everything up to it may be missing, everything after will come."""
        with self._lock:
            if self._gap:
                # Provisional: the next apply sets it for good (a snapshot being installed right
                # now moves the applied index after this read).
                last = self._last_applied()
                if last is not None:
                    self._raise_horizon(self._gap_horizon(last + 1))
            return self._head, self._horizon

    def read(self, after: int, limit: int = 512) -> tuple[list[Event], int]:
        """Events with a cursor > ``after`` (at most ``limit``) and the position reached: every
        event with a cursor <= it was returned or skipped. Raises :class:`CursorExpired`."""
        self.position()  # settles a provisional horizon
        with self._lock:
            if after < self._horizon:
                raise self._expired(after)
            events = self._events
            i = bisect.bisect_right(events, after, lo=self._first, key=_cursor)
            batch = events[i : i + limit]
            reached = batch[-1].cursor if len(batch) == limit else max(after, self._head)
            return batch, reached


def _cursor(ev: Event) -> int:
    return ev.cursor


class EventfulMachine(StateMachine):
    """The state machine of a node: every applied outcome's effects also go to the journal.

    A :class:`StateMachine` subclass so that :class:`waitgraph.node.raft.RaftNode` needs no hook: it
    applies each envelope on its tick thread (``apply_bytes`` -> ``apply``) and replaces ``state``
    when it installs a snapshot; both are seen here.
    """

    def __init__(
        self, journal: EventJournal, on_applied: Callable[[Envelope, Outcome, State], None] | None = None
    ) -> None:
        self._journal = journal
        self._on_applied = on_applied
        self.applied_kinds: dict[str, int] = {}
        """Commands applied by this node since it started, by kind (``waitgraph_commands_applied``)."""
        """Called after each applied envelope (cluster/node/logs.py ``DecisionLog.applied``)."""
        self._state: State
        super().__init__()

    @property
    def state(self) -> State:
        return self._state

    @state.setter
    def state(self, value: State) -> None:
        self._state = value
        self._journal.state_replaced()

    def apply(self, env: Envelope) -> Outcome:
        out = super().apply(env)
        kind = env.command.KIND
        self.applied_kinds[kind] = self.applied_kinds.get(kind, 0) + 1
        if out.effects and not out.duplicate:
            if type(env.command) is RetireSettled:
                # Retired records are for the history store (the on_applied hook), not for the
                # agents' event streams: a pass retires as many records as the cluster settles,
                # and would flush the watchers' events out of the bounded ring. Every node skips
                # the same effects, so cursors stay the same on every node.
                self._journal.record(self._state, tuple(e for e in out.effects if type(e) not in RETIREMENT_EFFECTS))
            else:
                self._journal.record(self._state, out.effects)
            if self._on_applied is not None:
                try:
                    self._on_applied(env, out, self._state)
                except Exception:  # the command is applied: a failing log line must not say otherwise
                    logger.exception("the on_applied hook failed")
        return out
