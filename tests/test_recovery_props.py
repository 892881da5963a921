"""Property tests of recovery on random typed graphs: real cycles are resolved exactly once,
non-cycles are never acted on, and the epoch moves only with a committed rollback."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from waitgraph.statemachine.detect import full_pass
from waitgraph.statemachine.enums import ExecStatus
from waitgraph.statemachine.invariants import check
from waitgraph.statemachine.recovery_state import DecisionKind, ProposalStatus

from .world import World

N_EXEC = 5


@st.composite
def graphs(draw: st.DrawFn) -> World:
    """Executions e0..e4 holding resources / a 2-slot pool / producing artifacts, then waiting."""
    w = World()
    execs = [w.execution(f"e{i}") for i in range(N_EXEC)]
    w.target("pool:p", slots=2)
    for i in range(N_EXEC):
        w.target(f"resource:r{i}")
        w.target(f"artifact:a{i}")
    for i, eid in enumerate(execs):
        if draw(st.booleans()):
            w.hold(eid, f"resource:r{i}")
        if draw(st.booleans()):
            w.produces(eid, f"artifact:a{i}")
    for eid in draw(st.lists(st.sampled_from(execs), max_size=2, unique=True)):
        w.hold(eid, "pool:p")
    w.target("artifact:human")
    from waitgraph.statemachine.commands import DeclareSatisfier

    w.ok("operator:op", DeclareSatisfier(target_id="artifact:human", target_generation=1, satisfier_id="human:alice"))
    choices = [f"resource:r{i}" for i in range(N_EXEC)] + [f"artifact:a{i}" for i in range(N_EXEC)]
    choices += [*execs, "pool:p", "artifact:human"]
    for eid in execs:
        for tid in draw(st.lists(st.sampled_from(choices), max_size=2, unique=True)):
            if tid == eid:
                continue
            t = w.st.targets.get(tid)
            if (
                t is not None
                and t.kind.value in ("resource", "pool")
                and ((t.kind.value == "resource" and not t.holders) or len(t.holders) < t.slots)
            ):
                continue  # free: nobody waits on a free resource, they acquire it
            w.wait(eid, tid)
    w.configure(max_rollback=2)
    return w


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_every_real_cycle_is_resolved_once_and_nothing_else_is_touched(w: World) -> None:
    ever_in_a_cycle: set[str] = set()
    rounds = 0
    while True:
        cands = full_pass(w.st)
        if not cands:
            break
        rounds += 1
        assert rounds <= N_EXEC, "recovery did not converge"
        for c in cands:
            ever_in_a_cycle.update(c.member_ids)
        epoch_before = w.st.recovery.epoch
        outs = w.recover()
        assert all(o.ok for o in outs)
        acted = [d for d in w.st.recovery.decisions.values() if d.epoch is not None and d.epoch > epoch_before]
        assert w.st.recovery.epoch == epoch_before + len(acted)
        assert check(w.st) == []
    event(f"recovery rounds: {rounds}")
    digests = [d.digest for d in w.st.recovery.decisions.values()]
    assert len(digests) == len(set(digests)), "one decision per deadlock digest"
    for p in w.st.recovery.proposals.values():
        assert p.status in (ProposalStatus.COMMITTED, ProposalStatus.RETRACTED)
    for d in w.st.recovery.decisions.values():
        assert d.kind in (DecisionKind.VICTIM, DecisionKind.TIE_BREAK)
    for eid, ex in w.st.executions.items():
        if ex.status in (ExecStatus.CANCELLING, ExecStatus.CANCEL_REQUESTED, ExecStatus.CANCELLED):
            assert eid in ever_in_a_cycle, f"{eid} was cancelled but never part of a deadlock"
    victims = [d.winner_id for d in w.st.recovery.decisions.values() if d.kind is DecisionKind.VICTIM]
    assert len(victims) == len(set(victims))
