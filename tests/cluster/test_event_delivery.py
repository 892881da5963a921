"""The delivery index (cluster/node/events.py, "Delivery") against today's per-stream filter.

Today's filter, kept here as the reference: a stream reads every event of the ring after its
cursor and keeps those that name one of its agents and are of one of its kinds. The index must
hand each stream exactly those events, in the same order, with the same cursors: live, resumed
after a cursor, and resumed on another replica after a failover; and end a stream as the ring's
read would (cursor expired) when it falls behind the ring or a snapshot leaves a gap.
"""

from __future__ import annotations

import itertools

import pytest

from tests.strategies import AGENTS, generate_log
from tests.world import World
from waitgraph.node.events import CursorExpired, Event, EventfulMachine, EventJournal, Subscription
from waitgraph.statemachine import Envelope, Outcome, StateMachine, encode_envelope

KINDS = (frozenset(), frozenset({"SessionJoined", "SessionEnded"}), frozenset({"ExecutionStateChanged", "WaitClosed"}))
FILTERS: list[tuple[frozenset[str] | None, frozenset[str]]] = [
    (agents, kinds)
    for agents in (None, *(frozenset({a}) for a in AGENTS), frozenset(AGENTS[:2]), frozenset({AGENTS[0], "nobody"}))
    for kinds in KINDS
]


class Replica:
    """One node's machine and journal, applying one log entry per envelope."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.journal = EventJournal(capacity)
        self.machine = EventfulMachine(self.journal)
        self.applied = 0
        self.journal.bind(lambda: self.applied, None)

    def apply(self, data: bytes) -> None:
        self.machine.apply_bytes(data)
        self.applied += 1


def reference(journal: EventJournal, after: int, agents: frozenset[str] | None, kinds: frozenset[str]) -> list[Event]:
    """Today's per-stream filter over the ring (what WatchEvents did before the index)."""
    batch, _ = journal.read(after, 10**9)
    return [
        ev
        for ev in batch
        if (agents is None or not agents.isdisjoint(ev.agent_ids)) and (not kinds or ev.effect.KIND in kinds)
    ]


def drain(sub: Subscription) -> tuple[list[Event], int]:
    return sub.take()


def cross_agent_log() -> list[bytes]:
    """Deadlocks between pairs of agents, detected, voted and resolved (tests/world.py): effects
    that name several agents (a recovery's members, agents in the voter set), which the random
    workload rarely has."""
    w = World()
    log: list[bytes] = []
    apply = w.m.apply

    def recording(env: Envelope) -> Outcome:
        log.append(encode_envelope(env))
        return apply(env)

    w.m.apply = recording  # type: ignore[method-assign]
    for a in AGENTS:
        w.agent(a)
    w.configure(voters=("node:n1", "node:n2", "agent:a4"), quorum=2, max_rollback=1)
    for i, (x, y) in enumerate(itertools.combinations(AGENTS, 2)):
        ex, ey = w.execution(f"x{i}", agent=x), w.execution(f"y{i}", agent=y)
        w.hold(ex, f"resource:rx{i}")
        w.hold(ey, f"resource:ry{i}")
        w.wait(ex, f"resource:ry{i}")
        w.wait(ey, f"resource:rx{i}")
    w.recover()
    return log


LOG = cross_agent_log() + generate_log(11, 1500)


def test_the_index_delivers_what_the_filter_did_live_resumed_and_after_a_failover() -> None:
    a, b = Replica(), Replica()
    start_a = a.journal.position()[0]
    live = [(f, a.journal.subscribe(f[0], f[1], None)) for f in FILTERS]
    half = len(LOG) // 2
    for data in LOG[:half]:
        a.apply(data)
        b.apply(data)
    taken = {id(sub): drain(sub)[0] for _, sub in live}
    mid = a.journal.position()[0]
    # resumed on the same node after a cursor in the middle of the first half
    cursors = [ev.cursor for ev in a.journal.read(start_a, 10**9)[0]]
    assert len(cursors) > 200
    resume_at = cursors[len(cursors) // 4]
    resumed = [(f, a.journal.subscribe(f[0], f[1], resume_at)) for f in FILTERS]
    # failover: each live stream resumes on replica b after the last event it took
    moved = []
    for f, sub in live:
        got = taken[id(sub)]
        moved.append((f, sub, b.journal.subscribe(f[0], f[1], got[-1].cursor if got else mid)))
        a.journal.unsubscribe(sub)
    for data in LOG[half:]:
        a.apply(data)
        b.apply(data)
    delivered = 0
    for (agents, kinds), sub in resumed:
        got, position = drain(sub)
        assert got == reference(a.journal, resume_at, agents, kinds), (agents, kinds)
        assert position == a.journal.position()[0]
        delivered += len(got)
    for (agents, kinds), old, new in moved:
        got = taken[id(old)] + drain(new)[0]
        want = reference(a.journal, start_a, agents, kinds)
        # effect for effect, cursor for cursor: b numbers every event as a does
        assert [(e.cursor, e.log_index, e.agent_ids, e.effect) for e in got] == [
            (e.cursor, e.log_index, e.agent_ids, e.effect) for e in want
        ], (agents, kinds)
        delivered += len(got)
    assert delivered > 1000  # the workload really exercises the streams
    several = [ev for ev in a.journal.read(start_a, 10**9)[0] if len(ev.agent_ids) > 1]
    assert len(several) >= 6, "effects naming several agents must be in the recorded journal"
    assert a.journal.subscriptions() == len(FILTERS)
    for _, sub in resumed:
        a.journal.unsubscribe(sub)
    assert a.journal.subscriptions() == 0


def test_a_stream_further_behind_than_the_ring_ends_as_reading_the_ring_would() -> None:
    r = Replica(capacity=50)
    start = r.journal.position()[0]
    slow = r.journal.subscribe(None, frozenset(), start)
    quick = r.journal.subscribe(None, frozenset(), start)
    for data in itertools.islice(LOG, 400):
        r.apply(data)
        drain(quick)
    with pytest.raises(CursorExpired):
        r.journal.read(start)  # today's path: the cursor is below the horizon
    with pytest.raises(CursorExpired):
        drain(slow)
    drain(quick)  # kept up: still open


def test_a_snapshot_gap_ends_the_open_streams() -> None:
    r = Replica()
    for data in LOG[:50]:
        r.apply(data)
    sub = r.journal.subscribe(None, frozenset(), None)
    drain(sub)
    r.machine.restore(StateMachine().snapshot())  # a snapshot installed: the journal has a gap
    r.applied += 10
    for data in LOG[50:100]:
        r.apply(data)
    with pytest.raises(CursorExpired):
        drain(sub)
