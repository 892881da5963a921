"""Per-agent limits (``Limits.max_open_executions_per_agent``, ``max_open_edges_per_agent``) under
random command sequences aimed at them.

The general stateful test (tests/test_stateful.py) checks that the counts equal a recount after
every step, but its random logs seldom open two waits for one agent. Here two agents create,
start, wait, close, produce, complete, fail, retry, cancel and acknowledge over 3 executions each
and 3 artifacts with limits of 2 open executions and 2 open edges per agent, so both limits are
reached often. After every command: the invariants hold (the counts equal a recount), no agent is above a limit, a
refusal changes nothing and happens only to an agent that is exactly at its limit.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import examples
from waitgraph.statemachine import invariants
from waitgraph.statemachine.commands import (
    AckCancel,
    CancelRun,
    CloseWait,
    Command,
    CompleteExecution,
    CreateExecution,
    CreateTarget,
    Envelope,
    FailExecution,
    JoinSession,
    ProduceArtifact,
    RegisterWait,
    RetryExecution,
    StartExecution,
)
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Result
from waitgraph.statemachine.state import Limits, State, count_by_agent

AGENTS = ("a", "b")
EXECUTIONS = 6
ARTIFACTS = 3
OPS = (
    "create",
    "create",
    "start",
    "wait",
    "wait",
    "wait",
    "close",
    "produce",
    "complete",
    "fail",
    "retry",
    "cancel",
    "ack",
)
"""Creations and waits repeated: they are what reaches the limits."""
LIMIT_CODES = {"agent_execution_limit", "agent_edge_limit"}


def _command(sm: StateMachine, op: str, i: int, j: int) -> tuple[str, Command] | None:
    """(actor, command) for ``op`` on execution ``i`` and artifact ``j``, filled from the state so
    that most commands are well-formed; None when the execution does not exist yet."""
    st_ = sm.state
    eid, tid = f"exec:e{i}", f"artifact:t{j}"
    owner = AGENTS[i % len(AGENTS)]
    if op == "create":
        return f"agent:{owner}", CreateExecution(execution_id=eid, run_id=f"r{i}", observed_cancel_generation=0)
    if op == "produce":
        return f"agent:{owner}", ProduceArtifact(artifact_id=tid, version=st_.targets[tid].version + 1)
    ex = st_.executions.get(eid)
    if ex is None:
        return None
    actor, gen, cancel_gen = f"agent:{ex.agent_id}", ex.generation, st_.runs[ex.run_id].cancel_generation
    match op:
        case "start":
            return actor, StartExecution(execution_id=eid, generation=gen, observed_cancel_generation=cancel_gen)
        case "wait":
            version = ex.edge_hwm.get(tid, 0) + 1
            tg = st_.targets[tid].version + 1
            return actor, RegisterWait(
                waiter_id=eid,
                waiter_generation=gen,
                target_id=tid,
                target_generation=tg,
                reason="r",
                edge_version=version,
            )
        case "close":
            edge = st_.wait(eid, tid)
            version = edge.edge_version if edge is not None else ex.edge_hwm.get(tid, 0)
            return actor, CloseWait(
                waiter_id=eid, waiter_generation=gen, target_id=tid, edge_version=version, reason="r"
            )
        case "complete":
            return actor, CompleteExecution(execution_id=eid, generation=gen, observed_cancel_generation=cancel_gen)
        case "fail":
            return actor, FailExecution(execution_id=eid, generation=gen, reason="r")
        case "retry":
            return actor, RetryExecution(execution_id=eid, generation=gen)
        case "cancel":
            return "operator:root", CancelRun(run_id=ex.run_id, observed_cancel_generation=cancel_gen, reason="r")
        case _:
            return actor, AckCancel(
                execution_id=eid, generation=gen, cancel_generation=cancel_gen, side_effects=EffectOutcome.NONE
            )


@settings(max_examples=examples(200), deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(OPS), st.integers(0, EXECUTIONS - 1), st.integers(0, ARTIFACTS - 1)),
        min_size=30,
        max_size=100,
    )
)
def test_per_agent_limits_hold_and_the_counts_equal_a_recount(steps: list[tuple[str, int, int]]) -> None:
    limits = Limits(max_open_executions_per_agent=2, max_open_edges_per_agent=2)
    sm = StateMachine(limits=limits)
    at = 0

    def send(actor: str, cmd: Command) -> None:
        nonlocal at
        at += 1
        before = sm.snapshot()
        open_before = (dict(sm.state.open_executions_by_agent), dict(sm.state.open_edges_by_agent))
        out = sm.apply(Envelope(actor=actor, at_ms=at, request_id=None, command=cmd))
        st_ = sm.state
        if out.result is Result.REJECTED:
            assert sm.snapshot() == before, f"rejection {out.code} changed the state"
        if out.code in LIMIT_CODES:
            agent = out.fields["agent_id"]
            counts, limit = (
                (open_before[0], limits.max_open_executions_per_agent)
                if out.code == "agent_execution_limit"
                else (open_before[1], limits.max_open_edges_per_agent)
            )
            assert out.fields["limit"] == limit and counts.get(agent) == limit, (out, counts)
        assert invariants.check(st_) == []
        assert (st_.open_executions_by_agent, st_.open_edges_by_agent) == count_by_agent(
            st_.executions, st_.waits_by_waiter
        )
        assert max(st_.open_executions_by_agent.values(), default=0) <= limits.max_open_executions_per_agent
        assert max(st_.open_edges_by_agent.values(), default=0) <= limits.max_open_edges_per_agent

    for agent in AGENTS:
        send(f"agent:{agent}", JoinSession(agent_id=agent, lease_ms=limits.max_lease_ms))
    for j in range(ARTIFACTS):
        send("operator:root", CreateTarget(target_id=f"artifact:t{j}"))
    for op, i, j in steps:
        made = _command(sm, op, i, j)
        if made is not None:
            send(*made)
    restored = State.restore(sm.snapshot())
    assert (restored.open_executions_by_agent, restored.open_edges_by_agent) == (
        sm.state.open_executions_by_agent,
        sm.state.open_edges_by_agent,
    )
