"""The event journal behind WatchEvents: cursors, the horizon, resumption, routing to agents."""

from __future__ import annotations

import asyncio

import pytest

from waitgraph.node.events import CURSOR_SHIFT, CursorExpired, EventfulMachine, EventJournal, cursor_of
from waitgraph.statemachine import Envelope, encode_envelope
from waitgraph.statemachine.commands import CreateExecution, Heartbeat, JoinSession
from waitgraph.statemachine.effects import ExecutionCreated, SessionJoined, SessionRenewed


class Log:
    """Stands in for Raft: entries applied in order, ``last_applied`` as pysyncobj reports it."""

    def __init__(self, journal: EventJournal, start: int = 1) -> None:
        self.journal = journal
        self.machine = EventfulMachine(journal)
        self.last = start
        self.bound = False

    def bind(self) -> None:
        self.bound = True
        self.journal.bind(lambda: self.last if self.bound else None, None)

    def entry(self, *envelopes: Envelope) -> None:
        for env in envelopes:
            self.machine.apply_bytes(encode_envelope(env))
        self.last += 1


def env(actor: str, cmd: object, rid: str | None = None, at_ms: int = 1_000) -> Envelope:
    return Envelope(actor=actor, at_ms=at_ms, request_id=rid, command=cmd)  # type: ignore[arg-type]


def join(agent: str, rid: str | None = None) -> Envelope:
    return env(f"agent:{agent}", JoinSession(agent_id=agent, lease_ms=60_000), rid)


def test_cursors_number_effects_by_entry_and_position() -> None:
    journal = EventJournal()
    log = Log(journal)
    log.bind()
    log.entry(join("a"), join("b"))  # entry 2: one effect each
    created = CreateExecution(execution_id="exec:A", run_id="r", observed_cancel_generation=0)
    log.entry(env("agent:a", created))  # entry 3
    events, reached = journal.read(journal.position()[1])
    assert [e.cursor for e in events] == [cursor_of(2, 0), cursor_of(2, 1), cursor_of(3, 0)]
    assert [type(e.effect) for e in events] == [SessionJoined, SessionJoined, ExecutionCreated]
    assert [e.agent_ids for e in events] == [("a",), ("b",), ("a",)]
    assert reached == cursor_of(3, 0)
    assert journal.read(cursor_of(2, 0))[0] == events[1:]
    assert journal.read(reached) == ([], reached)


def test_a_duplicate_request_is_not_an_event_again() -> None:
    journal = EventJournal()
    log = Log(journal)
    log.bind()
    log.entry(join("a", "rid-1"))
    log.entry(join("a", "rid-1"))  # served from the idempotency table
    events, _ = journal.read(journal.position()[1])
    assert len(events) == 1


def test_the_horizon_covers_what_the_node_did_not_see() -> None:
    journal = EventJournal()
    log = Log(journal, start=41)  # restarted from a snapshot at index 41
    log.bind()
    head, horizon = journal.position()
    assert horizon == cursor_of(42, 0) - 1 and head == horizon
    with pytest.raises(CursorExpired, match="re-read your state"):
        journal.read(cursor_of(41, 3))
    log.entry(join("a"))
    assert [e.cursor for e in journal.read(horizon)[0]] == [cursor_of(42, 0)]
    # a snapshot installed later: everything up to the next entry applied may be missing
    log.machine.state = log.machine.state
    log.last = 90
    log.entry(join("b"))
    with pytest.raises(CursorExpired):
        journal.read(cursor_of(42, 0))
    assert [e.cursor for e in journal.read(cursor_of(91, 0) - 1)[0]] == [cursor_of(91, 0)]


def test_effects_applied_before_the_journal_is_bound_force_a_resync() -> None:
    journal = EventJournal()
    log = Log(journal, start=5)
    log.machine.apply_bytes(encode_envelope(join("a")))  # entry 6, not numbered
    log.bind()
    log.machine.apply_bytes(encode_envelope(join("b")))  # the rest of entry 6: skipped too
    log.last += 1
    log.entry(join("c"))  # entry 7
    events, _ = journal.read(journal.position()[1])
    assert [e.cursor for e in events] == [cursor_of(7, 0)]
    with pytest.raises(CursorExpired):
        journal.read(cursor_of(6, 0))


def test_eviction_raises_the_horizon_and_reads_page() -> None:
    journal = EventJournal(capacity=4)
    log = Log(journal)
    log.bind()
    log.entry(join("a"))
    start = cursor_of(2, 0) - 1
    for _ in range(9):
        log.entry(env("agent:a", Heartbeat(agent_id="a")))
    head, horizon = journal.position()
    assert horizon == cursor_of(7, 0)  # the last evicted event
    with pytest.raises(CursorExpired):
        journal.read(start)
    events, reached = journal.read(horizon, limit=3)
    assert [e.log_index for e in events] == [8, 9, 10] and reached == events[-1].cursor
    assert all(isinstance(e.effect, SessionRenewed) for e in events)
    rest, position = journal.read(reached)
    assert [e.log_index for e in rest] == [11] and position == head
    assert head >> CURSOR_SHIFT == 11


async def test_watchers_are_woken_from_the_apply_thread() -> None:
    journal = EventJournal()
    log = Log(journal)
    journal.bind(lambda: log.last, asyncio.get_running_loop())
    head = journal.position()[0]
    waiter = asyncio.get_running_loop().create_task(journal.wait(head, 5))
    await asyncio.sleep(0)
    await asyncio.get_running_loop().run_in_executor(None, log.entry, join("a"))
    await asyncio.wait_for(waiter, 2)
    await asyncio.wait_for(journal.wait(head, 5), 0.1)  # already newer: no wait at all
    journal.close()
    await asyncio.wait_for(journal.wait(journal.position()[0], 5), 1)


async def test_the_loop_is_woken_only_while_a_watcher_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Recording with nobody waiting (a follower nobody watches) costs the loop no wake-up; a
    watcher that registers in between is still woken by the next record."""
    loop = asyncio.get_running_loop()
    wakes: list[object] = []
    threadsafe = loop.call_soon_threadsafe

    def counted(callback, *args):  # type: ignore[no-untyped-def]
        if getattr(callback, "__self__", None) is journal:  # not the executor's own hand-backs
            wakes.append(callback)
        return threadsafe(callback, *args)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
    journal = EventJournal()
    log = Log(journal)
    journal.bind(lambda: log.last, loop)
    for agent in "abc":
        await loop.run_in_executor(None, log.entry, join(agent))
    assert wakes == []
    head = journal.position()[0]
    waiter = loop.create_task(journal.wait(head, 5))
    await asyncio.sleep(0)
    await loop.run_in_executor(None, log.entry, join("d"))
    await asyncio.wait_for(waiter, 2)
    assert len(wakes) == 1
    await loop.run_in_executor(None, log.entry, join("e"))  # the watcher went: no wake again
    await asyncio.sleep(0)
    assert len(wakes) == 1
