"""Prevention on request (``RegisterWait(refuse_deadlock=True)``) against a brute-force oracle.

The claim: a wait is refused exactly when a full detection pass right after registering it (the
brute-force :func:`oracle` of tests/test_detect_oracle.py, which enumerates every subset) would
find a candidate deadlock that contains the new edge. When it is refused the state is unchanged
and the path it names is a real cycle of hard waits through the new edge; when it is not, the
outcome and the state are exactly those of the same wait without the option.

Two sources of graphs, as in the detector's oracle tests: states built directly (any shape, the
waiter RUNNING, PENDING or WAITING) and states reached through random real commands.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.test_detect_oracle import TARGETS, Driver, direct_states, index_satisfiers, oracle, spec_satisfiers, steps
from waitgraph.statemachine.commands import Envelope, RegisterWait
from waitgraph.statemachine.detect import closing_path
from waitgraph.statemachine.enums import TERMINAL, CancelMode, ExecStatus
from waitgraph.statemachine.ids import Kind
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Result
from waitgraph.statemachine.state import Execution, State, Target, WaitEdge


def closes_a_cycle(after: State, edge_id: str) -> list[str] | None:
    """The oracle's answer on the state after the wait: the members of the candidate that holds
    the new edge, or None."""
    for c in oracle(after):
        if any(e == edge_id for e, _ in c.edges):
            return list(c.member_ids)
    return None


def check_path(after: State, path: tuple[str, ...], members: list[str], waiter: str, target_id: str) -> None:
    """The path runs waiter -> new target -> ... -> waiter, every hop a hard wait (as the spec
    projects it) between members of the candidate, an ``exec:`` target named once."""
    assert path[0] == waiter and path[-1] == waiter
    assert path[1] == target_id
    execs = [x for x in path if x.startswith("exec:")]
    assert set(execs) <= set(members)
    i = 0
    while i < len(path) - 1:
        u = path[i]
        nxt = path[i + 1]
        if nxt.startswith("exec:"):
            tid, v, i = nxt, nxt, i + 1
        else:
            tid, v, i = nxt, path[i + 2], i + 2
        edge = after.wait(u, tid)
        assert edge is not None, (u, tid)
        sats = spec_satisfiers(after, edge)
        assert sats is not None and v in sats, (u, tid, v)


# -- direct states ------------------------------------------------------------------------------


@st.composite
def direct_cases(draw: st.DrawFn) -> tuple[State, WaitEdge]:
    state = draw(direct_states())
    live = sorted(e for e, x in state.executions.items() if x.status not in TERMINAL)
    if not live:
        live = sorted(state.executions)
        x = state.executions[live[0]]
        x.status = ExecStatus.RUNNING
    waiter = draw(st.sampled_from(live))
    tid = draw(st.sampled_from(sorted(state.executions) + sorted(state.targets)))
    t = state.targets.get(tid)
    if t is None:
        tg = state.executions[tid].generation
    elif t.kind is Kind.POOL:
        tg = 0
    elif t.kind in (Kind.RESOURCE, Kind.RESERVATION):
        tg = t.version
    else:
        tg = draw(st.integers(1, 3))
    gen = state.executions[waiter].generation
    return state, WaitEdge(waiter, gen, tid, tg, "r", None, CancelMode.COOPERATIVE, 9, 0)


@st.composite
def ring_cases(draw: st.DrawFn) -> tuple[State, WaitEdge]:
    """A chain of executions, each hop through a random kind of target (an execution, an artifact
    or an approval it provides, a resource or a pool it holds, a pool it shares with others that
    may not be in the ring, a human's approval), and a new wait from the last back to the first:
    the shapes where every kind of hop decides whether the ring closes."""
    state = State()
    n = draw(st.integers(1, 5))
    names = [f"exec:r{i}" for i in range(n)] + ["exec:out"]
    for name in names:
        status = draw(st.sampled_from([ExecStatus.WAITING] * 6 + [ExecStatus.RUNNING, ExecStatus.COMPLETED]))
        state.executions[name] = Execution(name, name[5:], None, "ag", 1, status, 0, False, False, 0, 0, 0)

    def hop(i: int, v: str) -> str:
        """A target that leads to ``v``."""
        kind = draw(st.sampled_from(["exec", "artifact", "approval", "human", "resource", "pool", "pool+"]))
        if kind == "exec":
            return v
        tid = f"{'approval' if kind in ('approval', 'human') else kind.rstrip('+')}:h{i}"
        t = Target(tid, Kind(tid.partition(":")[0]), 1, version=1)
        if kind in ("artifact", "approval", "human"):
            t.version = 0
            t.satisfier_id, t.satisfier_generation = ("human:alice", 0) if kind == "human" else (v, 1)
            t.satisfier_for = 1
        elif kind == "pool+":
            others = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
            t.holders = dict.fromkeys(sorted({v, *others}), 1)
            t.slots = len(t.holders) + draw(st.sampled_from([0, 0, 0, 1]))  # full, mostly
        else:
            t.holders = {v: 1}
        state.targets[tid] = t
        return tid

    def wait(u: str, tid: str) -> WaitEdge:
        t = state.targets.get(tid)
        tg = 1 if t is None or t.kind is not Kind.POOL else 0
        return WaitEdge(u, 1, tid, tg, "r", None, CancelMode.COOPERATIVE, 1, 0)

    for i in range(n - 1):
        state.add_wait(wait(names[i], hop(i, names[i + 1])))
    for j in range(draw(st.integers(0, 3))):  # a few waits anywhere
        u, v = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        edge = wait(u, hop(100 + j, v))
        if state.wait(u, edge.target_id) is None:
            state.add_wait(edge)
    index_satisfiers(state)
    state.executions[names[-2]].status = ExecStatus.RUNNING  # the waiter, live before it waits
    new = wait(names[-2], hop(n, names[0]))
    index_satisfiers(state)
    return state, new


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(direct_cases(), ring_cases()))
def test_closing_path_matches_the_oracle_on_direct_states(case: tuple[State, WaitEdge]) -> None:
    state, edge = case
    digest = state.digest()
    path = closing_path(state, edge)
    assert state.digest() == digest  # a question, never a change
    # the state after the wait, as the machine would leave it
    existing = state.wait(edge.waiter_id, edge.target_id)
    if existing is not None:
        state.remove_wait(existing)
    state.add_wait(edge)
    state.executions[edge.waiter_id].status = ExecStatus.WAITING
    members = closes_a_cycle(state, edge.edge_id)
    assert (path is not None) == (members is not None), (path, members)
    event("refused" if path is not None else "accepted")
    if path is not None and members is not None:
        check_path(state, path, members, edge.waiter_id, edge.target_id)


# -- through real commands ----------------------------------------------------------------------


def envelope(d: Driver, cmd: RegisterWait) -> Envelope:
    return Envelope(actor="operator:op", at_ms=d.t + 1, request_id=None, command=cmd)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(0, 99), st.integers(0, 99))
def test_refusal_matches_the_oracle_through_commands(ops: list[tuple[int, int, int, int]], a: int, b: int) -> None:
    d = Driver()
    for op in ops:
        d.step(*op)
    snap = d.state.snapshot()
    live = sorted(e for e, x in d.state.executions.items() if x.status not in TERMINAL)
    if not live:
        return
    x = live[a % len(live)]
    choices = sorted(d.state.executions) + sorted(TARGETS)
    y = choices[b % len(choices)]
    t = d.state.targets.get(y)
    if t is None:
        tg = d.gen(y)
    elif t.kind is Kind.POOL:
        tg = 0
    elif t.kind in (Kind.RESOURCE, Kind.RESERVATION):
        tg = t.version
    else:
        tg = t.version + 1
    ex = d.state.executions[x]
    plain = RegisterWait(
        waiter_id=x,
        waiter_generation=ex.generation,
        target_id=y,
        target_generation=tg,
        reason="w",
        edge_version=ex.edge_hwm.get(y, 0) + 1,
    )
    guarded = replace(plain, refuse_deadlock=True)
    without = StateMachine(State.restore(snap))
    out_without = without.apply(envelope(d, plain))
    with_ = StateMachine(State.restore(snap))
    out_with = with_.apply(envelope(d, guarded))
    members = closes_a_cycle(without.state, f"{x}>{y}") if out_without.result is Result.APPLIED else None
    event("refused" if members is not None else f"not refused: {out_without.result.value}")
    if members is None:
        assert out_with == out_without
        assert with_.digest() == without.digest()
        return
    assert out_with.result is Result.REJECTED and out_with.code == "would_deadlock"
    assert with_.state.snapshot() == snap  # refused: nothing changed
    path = tuple(str(out_with.fields["path"]).split(" "))
    assert " -> ".join(path) in out_with.message
    check_path(without.state, path, members, x, y)


# -- the refusal as the SDK sees it ---------------------------------------------------------------


def test_the_sdk_raises_would_deadlock_with_the_path() -> None:
    """The replicated rejection, through the wire (outcome proto, WriteResult) to the SDK's typed
    error: the path survives as a tuple; the command's flag survives the request round trip."""
    import grpc

    from waitgraph.proto.v1 import agent_pb2
    from waitgraph.sdk import FailedPrecondition, WouldDeadlock
    from waitgraph.sdk.errors import error_from_result
    from waitgraph.wire import convert

    d = Driver()
    a, b = "exec:x0", "exec:x1"
    d.do(RegisterWait(waiter_id=b, waiter_generation=1, target_id=a, target_generation=1, reason="w"))
    cmd = RegisterWait(waiter_id=a, waiter_generation=1, target_id=b, target_generation=1, reason="w",
                       refuse_deadlock=True)  # fmt: skip
    request = convert.request_from_command(cmd, "rid-1")
    assert request.refuse_deadlock and convert.command_from_request("RegisterWait", request) == cmd
    before = d.state.digest()
    out = d.m.apply(envelope(d, cmd))
    assert out.result is Result.REJECTED and d.state.digest() == before
    result = agent_pb2.WriteResult(
        status_code=grpc.StatusCode.FAILED_PRECONDITION.value[0],
        details=out.message,
        outcome=convert.outcome_to_proto(out),
        code=out.code,
    )
    err = error_from_result(result, "127.0.0.1:1", "rid-1")
    assert isinstance(err, WouldDeadlock) and isinstance(err, FailedPrecondition)
    assert err.path == (a, b, a)
    assert err.fields["edge_id"] == f"{a}>{b}"


def test_the_flag_is_written_only_when_set() -> None:
    """A RegisterWait without the option keeps the bytes of the release before (no new key), so a
    member still running it decodes it; with it, the key is there and decodes back. A map that
    spells the default out (a hand-made one) decodes, and re-encodes canonically, without it."""
    import msgpack

    from waitgraph.statemachine.codec import decode_envelope, encode_command, encode_envelope, pack

    cmd = RegisterWait(waiter_id="exec:a", waiter_generation=1, target_id="exec:b", target_generation=1, reason="w")
    plain = msgpack.unpackb(encode_command(cmd))
    assert "refuse_deadlock" not in plain
    assert sorted(plain) == list(plain)
    on = replace(cmd, refuse_deadlock=True)
    assert msgpack.unpackb(encode_command(on))["refuse_deadlock"] is True
    for c in (cmd, on):
        env = Envelope(actor="agent:a", at_ms=1, request_id=None, command=c)
        assert decode_envelope(encode_envelope(env)).command == c
    raw = msgpack.unpackb(encode_envelope(Envelope(actor="agent:a", at_ms=1, request_id=None, command=cmd)))
    raw["cmd"] = dict(sorted({**raw["cmd"], "refuse_deadlock": False}.items()))
    decoded = decode_envelope(pack(raw)).command
    assert decoded == cmd
    assert encode_command(decoded) == encode_command(cmd)  # the decoder's shortcut keeps it canonical
