"""The lessor (cluster/node/lessor.py) over a real state machine, without processes: admission
reads the core's count of ACTIVE sessions (kept as sessions start and end, not recounted per join),
and that count equals a recount through joins, rejoins, leaves, the leader's expiries, leader
changes and a restore from a snapshot (a node that starts from one, then leads); so does the count
of sessions served through the node (its own limit), kept on a heap of lease ends."""

from __future__ import annotations

import random

import pytest

from waitgraph.node.lessor import AGE_BUCKETS_S, Lessor
from waitgraph.statemachine import Envelope, StateMachine
from waitgraph.statemachine.commands import Command, ExpireSession, JoinSession, LeaveSession
from waitgraph.statemachine.enums import SessionStatus
from waitgraph.statemachine.errors import Rejection
from waitgraph.statemachine.outcome import Result
from waitgraph.statemachine.state import State

LEASE_MS = 1000


class Node:
    """One replica and its lessor, on a logical clock the test moves."""

    def __init__(self, machine: StateMachine, max_sessions: int) -> None:
        self.now_ms = machine.state.now_ms
        self.machine = machine
        self.lessor = Lessor(lambda: self.now_ms, lambda: self.machine.state, 1_000_000, max_sessions)
        self.served: dict[str, int] = {}
        """The model of the sessions served here: agent -> its last join or heartbeat here."""

    def apply(self, actor: str, cmd: Command) -> Result:
        env = Envelope(actor=actor, at_ms=self.now_ms, request_id=None, command=cmd)
        return self.machine.apply(env).result

    def join(self, agent: str) -> bool:
        """Admitted and applied (True), or refused by the cluster's limit before any apply (False)."""
        try:
            self.lessor.admit(agent)
        except Rejection as exc:
            assert exc.code == "too_many_sessions" and exc.fields["limit"] == "max_sessions"
            return False
        assert self.apply(f"agent:{agent}", JoinSession(agent_id=agent, lease_ms=LEASE_MS)) is Result.APPLIED
        self.lessor.joined(agent, LEASE_MS)
        self.served[agent] = self.now_ms
        return True

    def heartbeat(self, agent: str) -> None:
        self.lessor.heartbeat(agent)
        self.served[agent] = self.now_ms

    def expire_due(self) -> list[str]:
        due = self.lessor.due(self.machine.state, self.now_ms)
        for agent, incarnation in due:
            assert self.apply("node:n1", ExpireSession(agent_id=agent, incarnation=incarnation)) is Result.APPLIED
        return [a for a, _ in due]


def recount(st: State) -> int:
    return sum(1 for s in st.sessions.values() if s.status is SessionStatus.ACTIVE)


def check(node: Node) -> None:
    st = node.machine.state
    assert st.active_sessions == recount(st)
    view = node.lessor.view(st, node.now_ms)
    assert view.active == recount(st)
    # the sessions served through this node (its own limit), against the model's recount
    assert view.here == sum(1 for at in node.served.values() if at + LEASE_MS >= node.now_ms)


def test_admission_uses_the_count_and_it_follows_every_session_change() -> None:
    node = Node(StateMachine(), max_sessions=3)
    node.lessor.promote()
    assert node.join("a") and node.join("b") and node.join("c")
    check(node)
    assert not node.join("d")  # the cluster's limit: 3 ACTIVE
    assert node.machine.state.active_sessions == 3 and "d" not in node.machine.state.sessions
    assert node.join("a")  # a rejoin renews: it adds no session, and is admitted at the limit
    check(node)
    assert node.apply("agent:b", LeaveSession(agent_id="b")) is Result.APPLIED
    assert node.apply("agent:b", LeaveSession(agent_id="b")) is Result.NOOP  # twice: counted once
    check(node)
    assert node.join("d")
    node.now_ms += LEASE_MS + 1  # nobody heartbeats: every lease runs out at this leader
    assert node.expire_due() == ["a", "c", "d"]
    check(node)
    assert node.machine.state.active_sessions == 0
    assert node.join("b") and node.machine.state.sessions["b"].incarnation == 2  # a new incarnation
    check(node)


@pytest.mark.parametrize("seed", range(6))
def test_the_count_equals_a_recount_through_random_joins_leaves_expiries_and_leader_changes(seed: int) -> None:
    rnd = random.Random(seed)
    agents = [f"g{i}" for i in range(12)]
    node = Node(StateMachine(), max_sessions=8)
    node.lessor.promote()
    refused = expired = 0
    for _ in range(400):
        step = rnd.random()
        agent = rnd.choice(agents)
        if step < 0.35:
            refused += not node.join(agent)
        elif step < 0.5:
            node.apply(f"agent:{agent}", LeaveSession(agent_id=agent))
        elif step < 0.7:
            s = node.machine.state.sessions.get(agent)
            if s is not None and s.status is SessionStatus.ACTIVE:
                node.heartbeat(agent)
        elif step < 0.85:
            node.now_ms += rnd.randrange(LEASE_MS // 2)
            expired += len(node.expire_due())
        elif step < 0.95:  # a leader change: another node, restored from this one's snapshot, leads
            node.lessor.demote()
            node = Node(StateMachine(State.restore(node.machine.snapshot())), max_sessions=8)
            node.now_ms = node.machine.state.now_ms
            node.lessor.promote()
        else:
            node.lessor.demote()
            node.lessor.promote()
        check(node)
        assert node.machine.state.active_sessions <= 8
    assert refused and expired  # the walk reached the limit and expired sessions


def test_the_view_shows_heartbeat_ages_and_who_is_suspended_in_status_and_metrics() -> None:
    """The leader's view, as ``status`` and /metrics show it: the ages' p99, oldest and histogram,
    and the suspended agents (silent for over half their lease) the longest silent first."""
    from prometheus_client import CollectorRegistry, generate_latest

    from waitgraph.node.metrics import SessionsCollector
    from waitgraph.node.service import sessions_status
    from waitgraph.ops.render import sessions_fact

    node = Node(StateMachine(), max_sessions=100)
    node.lessor.promote()
    lease_ms = 30_000
    for agent in ("a", "b", "c", "d", "e"):
        node.lessor.admit(agent)
        assert node.apply(f"agent:{agent}", JoinSession(agent_id=agent, lease_ms=lease_ms)) is Result.APPLIED
    for at_ms, agent in ((5_000, "e"), (13_000, "d"), (22_000, "c"), (27_000, "b"), (29_500, "a")):
        node.now_ms = at_ms
        node.lessor.heartbeat(agent)
    node.now_ms = 30_000
    assert node.apply("agent:e", LeaveSession(agent_id="e")) is Result.APPLIED  # not ACTIVE: not shown
    view = node.lessor.view(node.machine.state, node.now_ms)
    # ages: a 0.5 s, b 3 s, c 8 s, d 17 s (e left)
    assert (view.active, view.heartbeat_ages, view.oldest_heartbeat_age_ms) == (4, 4, 17_000)
    assert view.heartbeat_age_p99_ms == 17_000 and view.heartbeat_age_sum_ms == 28_500
    counts = [1, 1, 2, 3, 3, 4, 4, 4, 4, 4]  # at most 1, 2, 5, 10, 15, 20, 30, 60, 120, 300 s
    assert view.heartbeat_age_buckets == tuple(zip(AGE_BUCKETS_S, counts, strict=True))
    assert view.suspended_ages_ms == (("d", 17_000),) and view.suspended == ("d",) and view.suspended_count == 1
    node.now_ms = 40_000  # c silent for 18 s now too
    view = node.lessor.view(node.machine.state, node.now_ms)
    assert view.suspended_ages_ms == (("d", 27_000), ("c", 18_000)) and view.suspended == ("c", "d")
    line = sessions_fact(sessions_status(view))
    assert "4 active" in line and "heartbeat age p99 27.0s, oldest 27.0s" in line, line
    assert line.endswith("2 suspended: d (27s), c (18s)"), line

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SessionsCollector(lambda fn: fn(node.machine), lambda m: view, lambda: {}))
    text = generate_latest(registry).decode()
    for sample in (
        # ages now: a 10.5 s, b 13 s, c 18 s, d 27 s
        'waitgraph_session_heartbeat_age_seconds_bucket{le="10.0"} 0.0',
        'waitgraph_session_heartbeat_age_seconds_bucket{le="15.0"} 2.0',
        'waitgraph_session_heartbeat_age_seconds_bucket{le="20.0"} 3.0',
        'waitgraph_session_heartbeat_age_seconds_bucket{le="+Inf"} 4.0',
        "waitgraph_session_heartbeat_age_seconds_gcount 4.0",
        "waitgraph_session_heartbeat_age_p99_seconds 27.0",
        "waitgraph_session_heartbeat_age_max_seconds 27.0",
        "waitgraph_sessions_suspended 2.0",
    ):
        assert sample in text, (sample, text)
