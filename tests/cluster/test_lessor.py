"""The lessor (cluster/node/lessor.py) over a real state machine, without processes: admission
reads the core's count of ACTIVE sessions (kept as sessions start and end, not recounted per join),
and that count equals a recount through joins, rejoins, leaves, the leader's expiries, leader
changes and a restore from a snapshot (a node that starts from one, then leads); so does the count
of sessions served through the node (its own limit), kept on a heap of lease ends."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace
from typing import Any

import pytest

from waitgraph.node.lessor import AGE_BUCKETS_S, Lessor, SessionsMode, sessions_mode
from waitgraph.node.loops import LoopConfig, Loops
from waitgraph.node.raft import SESSIONS_LESSOR, _relay
from waitgraph.statemachine import Envelope, StateMachine, decode_envelope
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


# -- mixed releases: the rolling-upgrade guard --------------------------------------------------------


@pytest.mark.parametrize(
    ("features", "mode"),
    [
        ({}, SessionsMode.LESSOR),  # a single node
        ({"b": SESSIONS_LESSOR, "c": SESSIONS_LESSOR | 4}, SessionsMode.LESSOR),  # a later bit too
        ({"b": SESSIONS_LESSOR, "c": None}, SessionsMode.HOLD),  # c not heard from yet
        ({"b": 0, "c": None}, SessionsMode.LEGACY),  # b runs a release from before the hellos
        ({"b": SESSIONS_LESSOR, "c": 4}, SessionsMode.LEGACY),  # c announces something else only
    ],
)
def test_the_sessions_mode_follows_the_members_features(features: dict[str, int | None], mode: SessionsMode) -> None:
    assert sessions_mode(features) is mode


class Members:
    """What RelayMixin keeps of the other members, without a SyncObj (its methods run on this)."""

    def __init__(self, others: list[str]) -> None:
        self._SyncObj__otherNodes = [SimpleNamespace(address=a) for a in others]
        self._features: dict[str, int] | None = None
        self._first_heard: dict[str, float] | None = None
        self._last_hello = 0.0
        self._hello_since: float | None = None
        self.sent: list[tuple[str, Any]] = []
        self._SyncObj__transport = SimpleNamespace(send=lambda node, msg: self.sent.append((node.address, msg)))


def test_members_are_known_by_their_hello_old_by_its_absence_and_left_out_when_down(monkeypatch: Any) -> None:
    now = [100.0]
    monkeypatch.setattr(_relay.time, "monotonic", lambda: now[0])
    m = Members(["b", "c", "d"])
    _relay.RelayMixin.say_hello(m, now[0])  # type: ignore[arg-type]
    assert sorted(a for a, _ in m.sent) == ["b", "c", "d"]
    assert all(msg == {"type": _relay.HELLO, "features": SESSIONS_LESSOR} for _, msg in m.sent)
    features = _relay.RelayMixin.member_features
    assert features(m, now[0]) == {"b": None, "c": None, "d": None}  # type: ignore[arg-type]
    hello = {"type": _relay.HELLO, "features": SESSIONS_LESSOR}
    assert _relay.RelayMixin._note_member(m, SimpleNamespace(address="b"), hello)  # type: ignore[arg-type]
    assert not _relay.RelayMixin._note_member(m, SimpleNamespace(address="c"), {"type": "append_entries"})  # type: ignore[arg-type]
    assert features(m, now[0]) == {"b": SESSIONS_LESSOR, "c": None, "d": None}  # type: ignore[arg-type]
    now[0] += _relay.OLDER_AFTER_S  # c kept talking Raft without a hello: an older release
    assert features(m, now[0]) == {"b": SESSIONS_LESSOR, "c": 0, "d": None}  # type: ignore[arg-type]
    now[0] += _relay.ABSENT_AFTER_S  # d never said anything: down, left out
    assert features(m, now[0]) == {"b": SESSIONS_LESSOR, "c": 0}  # type: ignore[arg-type]
    assert sessions_mode(features(m, now[0])) is SessionsMode.LEGACY  # type: ignore[arg-type]


class LoopNode:
    """The node as the loops see it: a leader over a real machine whose members' features the test sets."""

    def __init__(self, machine: StateMachine) -> None:
        self.machine = machine
        self.features: dict[str, int | None] = {}
        self.proposed: list[Command] = []

    def is_leader(self) -> bool:
        return True

    def has_quorum(self) -> bool:
        return True

    def member_features(self) -> dict[str, int | None]:
        return self.features

    async def read_local(self, fn: Any) -> Any:
        return SimpleNamespace(value=fn(self.machine), applied_index=0)

    async def submit(self, data: bytes) -> Any:
        out = self.machine.apply_bytes(data)
        self.proposed.append(decode_envelope(data).command)
        return out


async def test_the_leader_proposes_only_what_every_member_decodes() -> None:
    """A member on an older release: no ExpireSession and no Tick version 2 (it would skip them and
    its replica would part from the others); the replicated lease expires by Tick version 1, as
    that release does. A member not known yet: no expiry at all. Every member on this release: the
    lessor's ExpireSession, after a full lease from the moment it took over."""
    machine = StateMachine()
    node = LoopNode(machine)
    now = [1000]
    lessor = Lessor(lambda: now[0], lambda: machine.state)
    loops = Loops(node, LoopConfig(node_id="n1", housekeeping_s=0.0), clock=lambda: now[0], lessor=lessor)  # type: ignore[arg-type]

    async def step() -> list[str]:
        node.proposed.clear()
        await loops.step()
        await asyncio.gather(*loops._in_flight.values())
        return sorted(c.KIND if c.VERSION == 1 or c.KIND != "Tick" else "Tick2" for c in node.proposed)

    env = Envelope(actor="agent:a", at_ms=now[0], request_id=None, command=JoinSession(agent_id="a", lease_ms=1000))
    assert machine.apply(env).result is Result.APPLIED
    node.features = {"b": None}
    await step()
    now[0] += 5000  # a's lease ran out long ago
    assert await step() == [] and loops.mode is SessionsMode.HOLD
    node.features = {"b": 0}
    assert await step() == ["Tick"] and loops.mode is SessionsMode.LEGACY  # Tick v1: it expires a
    assert machine.state.sessions["a"].status is SessionStatus.EXPIRED
    env = Envelope(actor="agent:a", at_ms=now[0], request_id=None, command=JoinSession(agent_id="a", lease_ms=1000))
    assert machine.apply(env).result is Result.APPLIED
    node.features = {"b": SESSIONS_LESSOR}
    now[0] += 1100  # past a's replicated lease: only the full lease from the switch keeps it
    assert await step() == [] and loops.mode is SessionsMode.LESSOR
    now[0] += 1000
    assert await step() == ["ExpireSession"]
    assert machine.state.sessions["a"].status is SessionStatus.EXPIRED


@pytest.mark.parametrize(
    ("features", "logged"), [({"b": SESSIONS_LESSOR}, False), ({"b": 0}, True), ({"b": None}, True)]
)
def test_a_heartbeat_goes_through_the_log_unless_every_member_runs_the_lessor(
    features: dict[str, int | None], logged: bool
) -> None:
    """While a member runs an older release (or is not known yet), a heartbeat is a log entry, as
    that release expects: its Tick version 1 expires by the replicated lease, which only a logged
    heartbeat renews. Once every member announced the lessor, no heartbeat is written."""
    from tests.cluster.test_grpc_fuzz import AGENT, RecordingNode, config
    from waitgraph.node.service import Gateway
    from waitgraph.proto.v1 import commands_pb2

    machine = StateMachine()
    env = Envelope(actor="agent:a", at_ms=1000, request_id=None, command=JoinSession(agent_id="a", lease_ms=1000))
    assert machine.apply(env).result is Result.APPLIED
    node = RecordingNode(machine)
    node.member_features = lambda: features  # type: ignore[method-assign]
    gateway = Gateway(
        config(), node, journal=None, clock=lambda: 1.5, lessor=Lessor(lambda: 1500, lambda: machine.state)
    )  # type: ignore[arg-type]
    reply = asyncio.run(gateway.write(AGENT, "Heartbeat", commands_pb2.HeartbeatRequest(agent_id="a")))
    assert [fx.WhichOneof("effect") for fx in reply.effects] == ["session_renewed"], reply
    assert bool(node.submitted) is logged
    assert machine.state.sessions["a"].expires_at_ms == (2500 if logged else 2000)
