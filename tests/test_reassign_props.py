"""Property tests of REASSIGN (statemachine/reassign.py) on random graphs with approvals.

- A REASSIGN decision cancels no one and changes only the trapped approvals' provider (to the
  configured approver), the versions of the waits on them, and the epoch (by one).
- A SHADOW decision changes nothing outside the recovery records.
- Whenever an approval provided from inside the cycle has an independent approver and reassigning
  breaks the cycle, an acting mode decides REASSIGN; without an approver it never does.
- Every decision lists the remedies in their order.
- Snapshot -> restore -> snapshot is byte-identical with approvers and reassignments in it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from waitgraph.statemachine import Result
from waitgraph.statemachine.commands import CreateExecution, DeclareSatisfier, SetApprover, StartExecution
from waitgraph.statemachine.detect import Candidate, full_pass
from waitgraph.statemachine.invariants import check
from waitgraph.statemachine.reassign import REMEDIES, plan
from waitgraph.statemachine.recovery_state import DecisionKind, ProposalStatus, RolloutMode
from waitgraph.statemachine.state import State

from .world import World

N_EXEC = 4
RUNS = ("run-a", "run-b")


@st.composite
def worlds(draw: st.DrawFn) -> World:
    w = World()
    execs = []
    for i in range(N_EXEC):
        run = draw(st.sampled_from(RUNS))
        parents = [e for e in execs if w.st.executions[e].run_id == run]
        if not parents:
            execs.append(w.execution(f"e{i}", run=run))
        else:
            parent = draw(st.sampled_from(parents))
            # A delegation: the parent's agent creates the child for agent e<i>.
            w.agent(f"e{i}")
            eid = f"exec:e{i}"
            w.ok(
                w.owner(parent),
                CreateExecution(
                    execution_id=eid, run_id=run, parent_id=parent, agent_id=f"e{i}", observed_cancel_generation=0
                ),
            )
            w.ok(f"agent:e{i}", StartExecution(execution_id=eid, generation=1, observed_cancel_generation=0))
            execs.append(eid)
    outside = w.execution("x", run="run-x")
    for i in range(N_EXEC):
        w.target(f"approval:ap{i}")
        provider = draw(st.sampled_from([*execs, None]))
        if provider is not None:
            w.produces(provider, f"approval:ap{i}")
        w.target(f"resource:r{i}")
        if draw(st.booleans()):
            w.hold(execs[i], f"resource:r{i}")
    for i, eid in enumerate(execs):
        parent = w.st.executions[eid].parent_id
        if parent is not None and draw(st.booleans()):
            # The seed's shape: the parent waits for the child, which needs the parent's approval.
            tid = f"approval:ap{i}"
            if w.st.targets[tid].satisfier_id is None:
                w.produces(parent, tid)
            w.wait(parent, eid)
            w.wait(eid, tid)
    choices = [*execs, *(f"approval:ap{i}" for i in range(N_EXEC)), *(f"resource:r{i}" for i in range(N_EXEC))]
    for eid in execs:
        for tid in draw(st.lists(st.sampled_from(choices), max_size=2, unique=True)):
            if tid == eid or (tid.startswith("resource:") and not w.st.targets[tid].holders):
                continue
            if w.st.wait(eid, tid) is not None:
                continue
            w.wait(eid, tid)
    mode = draw(st.sampled_from([RolloutMode.SHADOW, RolloutMode.AUTO, RolloutMode.AUTO]))
    w.configure(max_rollback=2, mode=mode)
    settings_ = [(None, "human:alice"), (None, outside), ("run-a", "human:bob"), ("run-b", outside)]
    settings_ += [(r, a) for r in (None, *RUNS) for a in (None, *execs)]  # some refused, some in the cycle
    for run_id, approver in draw(st.lists(st.sampled_from(settings_), max_size=3)):
        w.do("operator:op", SetApprover(approver_id=approver, run_id=run_id))  # refusals change nothing
    return w


def _targets(s: State) -> dict[str, tuple[Any, ...]]:
    return {
        tid: (
            t.kind,
            t.slots,
            t.version,
            t.satisfier_id,
            t.satisfier_generation,
            t.satisfier_for,
            t.approved,
            dict(t.holders),
        )
        for tid, t in s.targets.items()
    }


def _waits(s: State) -> dict[str, tuple[Any, ...]]:
    return {
        e.edge_id: (e.waiter_generation, e.target_generation, e.reason, e.deadline_ms, e.cancel_mode, e.edge_version)
        for by in s.waits_by_waiter.values()
        for e in by.values()
    }


def _world_view(s: State) -> dict[str, Any]:
    """Everything outside the recovery records and counters."""
    return {
        "executions": {e: (x.status, x.generation) for e, x in s.executions.items()},
        "runs": {r: x.cancel_generation for r, x in s.runs.items()},
        "cancel": s.cancel.to_plain(),
        "targets": _targets(s),
        "waits": _waits(s),
        "fence": dict(s.recovery.fence),
    }


def _one_round(w: World, c: Candidate) -> None:
    """Propose, vote, commit ``c``; check what the commit changed against the decision it made."""
    proposed = w.propose(c)
    assert proposed.result is not Result.REJECTED, (proposed.code, proposed.message)
    if w.st.recovery.proposals[c.digest].status is not ProposalStatus.OPEN:
        return  # retracted on arrival, or already decided (shadow): nothing to commit
    w.vote_all(c)
    expected = plan(w.st, c)
    before = _world_view(w.st)
    epoch = w.st.recovery.epoch
    approvers = (w.st.recovery.approver, dict(w.st.recovery.run_approvers))
    out = w.commit(c)
    assert out.ok, (out.code, out.message)
    p = w.st.recovery.proposals[c.digest]
    if p.status is ProposalStatus.RETRACTED:
        return
    d = w.st.recovery.decisions[p.decision_id or ""]
    event(f"decision {d.kind.value}")
    assert [r for r, _, _ in d.remedies] == list(REMEDIES)
    after = _world_view(w.st)
    acting = d.mode is RolloutMode.AUTO
    if expected.moves:
        assert d.kind is (DecisionKind.REASSIGN if acting else DecisionKind.SHADOW)
        assert tuple(d.reassigned) == expected.moves
    else:
        assert d.kind is not DecisionKind.REASSIGN and not d.reassigned
    if d.kind is DecisionKind.SHADOW:
        assert after == before, "a shadow decision changed the world"
        assert w.st.recovery.epoch == epoch
    if d.kind is DecisionKind.REASSIGN:
        assert w.st.recovery.epoch == epoch + 1
        assert all(role == "kept" for _, role in d.roles)
        assert after["executions"] == before["executions"], "REASSIGN changed an execution"
        assert after["runs"] == before["runs"] and after["cancel"] == before["cancel"], "REASSIGN cancelled"
        assert after["fence"] == before["fence"]
        moved = {r.approval_id: r for r in d.reassigned}
        for tid, row in after["targets"].items():
            old = before["targets"][tid]
            if tid not in moved:
                assert row == old, f"REASSIGN changed {tid}"
                continue
            r = moved[tid]
            cluster_approver, run_approvers = approvers
            waiter_runs = {
                w.st.executions[e.partition(">")[0]].run_id for e, _ in c.edges if e.partition(">")[2] == tid
            }
            assert {run_approvers.get(run, cluster_approver) for run in waiter_runs} == {r.to_id}
            assert r.to_id not in c.member_ids, "the approver is trapped in the cycle it should break"
            if r.to_id.startswith("exec:"):
                approver = w.st.executions[r.to_id]
                assert approver.run_id not in waiter_runs, "the approver is inside the waiter's run"
                assert r.to_generation == approver.generation
            assert r.from_id == old[3] and r.from_id in c.member_ids
            assert row[3:6] == (r.to_id, r.to_generation, old[5])
            assert row[:3] == old[:3] and row[6:] == old[6:]
        assert after["waits"].keys() == before["waits"].keys(), "REASSIGN opened or closed a wait"
        for eid, row in after["waits"].items():
            old = before["waits"][eid]
            if eid.partition(">")[2] in moved:
                assert row[:5] == old[:5] and row[5] > old[5], f"{eid} was not re-versioned"
            else:
                assert row == old, f"REASSIGN changed {eid}"
        # The cycle that was decided is broken.
        assert all(set(c.member_ids) != set(k.member_ids) for k in full_pass(w.st))
    assert check(w.st) == []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_reassign_cancels_no_one_and_shadow_changes_nothing(w: World) -> None:
    for _ in range(N_EXEC + 1):
        decided = len(w.st.recovery.decisions)
        for c in full_pass(w.st):
            _one_round(w, c)
        if len(w.st.recovery.decisions) == decided:
            break
    snap = w.st.snapshot()
    restored = State.restore(snap)
    assert restored.snapshot() == snap
    rb, again = w.st.recovery, restored.recovery
    assert (again.approver, again.run_approvers) == (rb.approver, rb.run_approvers)
    assert [(d.remedies, d.reassigned) for d in again.decisions.values()] == [
        (d.remedies, d.reassigned) for d in rb.decisions.values()
    ]


def test_without_an_approver_reassign_never_applies() -> None:
    w = World()
    s = w.execution("s", run="run-1")
    w.agent("t")
    w.ok(
        "agent:s",
        CreateExecution(execution_id="exec:t", run_id="run-1", parent_id=s, agent_id="t", observed_cancel_generation=0),
    )
    w.ok("agent:t", StartExecution(execution_id="exec:t", generation=1, observed_cancel_generation=0))
    w.target("approval:ok")
    w.ok(
        "agent:s",
        DeclareSatisfier(target_id="approval:ok", target_generation=1, satisfier_id=s, satisfier_generation=1),
    )
    w.wait(s, "exec:t")
    w.wait("exec:t", "approval:ok")
    w.configure(max_rollback=2)
    (c,) = full_pass(w.st)
    assert plan(w.st, c).reason == "no_independent_approver"
    # An approver of the same run set cluster-wide is not independent of this run's cycle.
    w.ok("operator:op", SetApprover(approver_id=s))
    assert plan(w.st, c).reason == "approver_in_cycle"
    # Nor is one of the same run outside the cycle (a run's own setting refuses it up front).
    w.agent("u")
    w.ok(
        "agent:s",
        CreateExecution(execution_id="exec:u", run_id="run-1", parent_id=s, agent_id="u", observed_cancel_generation=0),
    )
    w.ok("operator:op", SetApprover(approver_id="exec:u"))
    assert plan(w.st, c).reason == "approver_in_run"
    assert w.do("operator:op", SetApprover(approver_id="exec:u", run_id="run-1")).code == "approver_in_run"
    w.ok("operator:op", SetApprover(approver_id=None))
    (out,) = w.recover()
    assert out.ok
    (d,) = w.st.recovery.decisions.values()
    assert d.kind is DecisionKind.VICTIM and d.remedies[2] == ("reassign", "not_applicable", "no_independent_approver")


def _child(w: World, parent: str, name: str) -> str:
    """A delegation: ``parent``'s agent creates ``exec:<name>`` in its run for agent <name>, started."""
    w.agent(name)
    eid = f"exec:{name}"
    run = w.st.executions[parent].run_id
    w.ok(
        w.owner(parent),
        CreateExecution(execution_id=eid, run_id=run, parent_id=parent, agent_id=name, observed_cancel_generation=0),
    )
    w.ok(f"agent:{name}", StartExecution(execution_id=eid, generation=1, observed_cancel_generation=0))
    return eid


def test_an_approval_shared_by_two_runs_moves_only_to_an_approver_both_name() -> None:
    """The supervisor S (run-1) waits for T (run-1) and U (run-2), which both wait for S's
    approval: one cycle, two runs. Run-1's approver may not be handed run-2's wait (hypothesis
    found the core doing so: it took the first waiter's run alone)."""
    w = World()
    s = w.execution("s", run="run-1")
    t = _child(w, s, "t")
    u = w.execution("u", run="run-2")
    w.produces(s, "approval:ok")
    for waiter, target in ((s, t), (s, u), (t, "approval:ok"), (u, "approval:ok")):
        w.wait(waiter, target)
    w.configure(max_rollback=2)
    (c,) = full_pass(w.st)
    assert set(c.member_ids) == {s, t, u}
    w.ok("operator:op", SetApprover(approver_id="human:alice", run_id="run-1"))
    assert plan(w.st, c).reason == "no_independent_approver"  # run-2 names no one
    w.ok("operator:op", SetApprover(approver_id="human:bob", run_id="run-2"))
    assert plan(w.st, c).reason == "approvers_disagree"
    w.ok("operator:op", SetApprover(approver_id="human:alice", run_id="run-2"))
    (move,) = plan(w.st, c).moves
    assert (move.approval_id, move.to_id) == ("approval:ok", "human:alice")
    # An execution approver must be outside every waiter's run, not only the first one's.
    w.ok("operator:op", SetApprover(approver_id=None, run_id="run-1"))
    w.ok("operator:op", SetApprover(approver_id=None, run_id="run-2"))
    v = _child(w, u, "v")
    w.ok("operator:op", SetApprover(approver_id=v))
    assert plan(w.st, c).reason == "approver_in_run"
