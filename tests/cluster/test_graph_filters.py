"""The Graph RPC's filters (`waitgraph graph --cycles --around N --status S --limit N`), on a state
built through the core: the first seed's cycle A <-> B, E waiting for A (one step out), F waiting
for E (two steps), and an unrelated pair C -> D."""

from __future__ import annotations

from tests.world import World
from waitgraph.node.service import graph_response, neighbourhood
from waitgraph.ops import render
from waitgraph.statemachine.enums import ExecStatus


def world() -> World:
    w = World()
    for name in ("A", "B", "C", "D", "E", "F"):
        w.execution(name)
    w.hold("exec:A", "resource:browser-9")
    w.produces("exec:B", "artifact:review-42")
    w.wait("exec:A", "artifact:review-42")
    w.wait("exec:B", "resource:browser-9")
    w.wait("exec:E", "exec:A")
    w.wait("exec:F", "exec:E")
    w.wait("exec:C", "exec:D")
    return w


def ids(response: object) -> list[str]:
    return [ex.execution_id for ex in response.executions]  # type: ignore[attr-defined]


def test_around_the_cycle_widens_by_wait_for_steps_either_way() -> None:
    st = world().st
    cycle = ("exec:A", "exec:B")
    assert neighbourhood(st, cycle, 0) == {"exec:A", "exec:B"}
    assert neighbourhood(st, cycle, 1) == {"exec:A", "exec:B", "exec:E"}  # E waits for A
    assert neighbourhood(st, cycle, 2) == {"exec:A", "exec:B", "exec:E", "exec:F"}
    assert neighbourhood(st, cycle, 9) == neighbourhood(st, cycle, 2)  # C and D are never reached
    assert neighbourhood(st, ("exec:D",), 1) == {"exec:C", "exec:D"}  # the waiter of D, backwards
    assert neighbourhood(st, ("exec:nobody",), 3) == set()
    g = graph_response(st, 1000, around=cycle, hops=1)
    assert ids(g) == ["exec:A", "exec:B", "exec:E"]
    assert {w.target_id for w in g.waits} == {"artifact:review-42", "resource:browser-9", "exec:A"}
    assert {t.target_id for t in g.targets} == {"artifact:review-42", "resource:browser-9"}
    assert g.matched_executions == 3 and not g.truncated


def test_status_run_and_the_size_cap_are_counted() -> None:
    w = world()
    st = w.st
    assert ids(graph_response(st, 1000, statuses=frozenset({ExecStatus.RUNNING}))) == ["exec:D"]
    waiting = graph_response(st, 1000, statuses=frozenset({ExecStatus.WAITING}))
    assert ids(waiting) == ["exec:A", "exec:B", "exec:C", "exec:E", "exec:F"]
    assert ids(graph_response(st, 1000, run_id="run-E")) == ["exec:E"]
    capped = graph_response(st, 2)
    assert ids(capped) == ["exec:A", "exec:B"] and capped.truncated
    assert capped.matched_executions == 6 and capped.matched_waits == 5 and len(capped.waits) == 2
    more = render.graph_more(capped)
    assert more is not None and more.startswith("4 more executions, 3 more waits") and "not shown" in more
    assert render.graph_more(graph_response(st, 1000)) is None


def test_an_execution_whose_agent_left_is_orphaned_until_it_settles() -> None:
    from waitgraph.statemachine.commands import CompleteExecution, LeaveSession
    from waitgraph.statemachine.state import is_orphaned, orphaned_count

    w = world()
    st = w.st
    assert orphaned_count(st) == 0 and not any(ex.orphaned for ex in graph_response(st, 1000).executions)
    w.ok("agent:D", CompleteExecution(execution_id="exec:D", generation=1, observed_cancel_generation=0))
    w.ok("agent:D", LeaveSession(agent_id="D"))  # settled first: leaving orphans nothing
    w.ok("agent:E", LeaveSession(agent_id="E"))  # E is still WAITING for A
    assert [eid for eid, ex in sorted(st.executions.items()) if is_orphaned(st, ex)] == ["exec:E"]
    assert orphaned_count(st) == 1
    views = {ex.execution_id: ex.orphaned for ex in graph_response(st, 1000).executions}
    assert views == {
        "exec:A": False,
        "exec:B": False,
        "exec:C": False,
        "exec:D": False,
        "exec:E": True,
        "exec:F": False,
    }
    rendered = render.plain(render.graph_blocks(graph_response(st, 1000)))
    assert "WAITING (orphaned)" in rendered and rendered.count("(orphaned)") == 1
