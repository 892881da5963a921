"""``waitgraph.node.events.owners``: the agents an effect concerns, for every effect kind.

``owners`` reads only the fields each effect class has (remembered per class) and sorts only
when it found several agents. The reference below looks every field up on every effect, as the
first version did; both must name the same agents, in the same order, for any effect and any
mix of known and unknown executions.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import any_effect, examples
from waitgraph.node.events import owners
from waitgraph.statemachine.effects import Effect
from waitgraph.statemachine.enums import ExecStatus
from waitgraph.statemachine.state import Execution, State


def reference(state: State, fx: Effect) -> tuple[str, ...]:
    agents: set[str] = set()

    def add_exec(eid: object) -> None:
        if isinstance(eid, str):
            ex = state.executions.get(eid)
            if ex is not None:
                agents.add(ex.agent_id)

    add_exec(getattr(fx, "execution_id", None))
    add_exec(getattr(fx, "satisfier_id", None))
    edge = getattr(fx, "edge_id", None)
    if isinstance(edge, str):
        add_exec(edge.partition(">")[0])
    for m in getattr(fx, "members", ()) or ():
        add_exec(m)
    agent = getattr(fx, "agent_id", None)
    if isinstance(agent, str):
        agents.add(agent)
    return tuple(sorted(agents))


def named_executions(fx: Effect) -> list[str]:
    names: list[Any] = [getattr(fx, "execution_id", None), getattr(fx, "satisfier_id", None)]
    edge = getattr(fx, "edge_id", None)
    if isinstance(edge, str):
        names.append(edge.partition(">")[0])
    names += getattr(fx, "members", ()) or ()
    return sorted({n for n in names if isinstance(n, str)})


@settings(max_examples=examples(400), deadline=None)
@given(fx=any_effect(), data=st.data())
def test_owners_name_the_agents_the_reference_names(fx: Effect, data: st.DataObject) -> None:
    state = State()
    for eid in named_executions(fx):
        if data.draw(st.booleans()):
            agent = data.draw(st.sampled_from(["a", "b", "c"]))
            state.executions[eid] = Execution(eid, "r", None, agent, 1, ExecStatus.RUNNING, 0, False, False, 0, 0, 0)
    assert owners(state, fx) == reference(state, fx)
    assert owners(state, fx) == reference(state, fx)  # the class is remembered now
