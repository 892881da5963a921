"""Recovery: propose (second read), votes, commit order, victim policy, modes, livelock guard."""

from __future__ import annotations

import pytest

from waitgraph.dev.naive import NaivePerAgentEpochs
from waitgraph.statemachine.commands import (
    Acquire,
    CloseWait,
    ConfigureRecovery,
    RecordSideEffect,
    RetryExecution,
    SetMode,
    StartExecution,
    VoteRecovery,
)
from waitgraph.statemachine.detect import full_pass
from waitgraph.statemachine.effects import (
    EpochCommitted,
    ExecutionStateChanged,
    LivelockDetected,
    Released,
    VictimChosen,
    Yielded,
)
from waitgraph.statemachine.enums import EffectOutcome, ExecStatus
from waitgraph.statemachine.outcome import Result
from waitgraph.statemachine.recovery_state import DecisionKind, ProposalStatus, RolloutMode

from .world import World


def kinds(out):
    return [type(e).__name__ for e in out.effects]


def browser_review(w: World) -> None:
    """The first seed's cycle: A waits for B's review, B waits for the browser A holds."""
    w.execution("A")
    w.execution("B")
    w.hold("exec:A", "resource:browser-9")
    w.produces("exec:B", "artifact:review-42")
    w.wait("exec:A", "artifact:review-42")
    w.wait("exec:B", "resource:browser-9")


# -- configuration -------------------------------------------------------------------------------


def test_quorum_must_exceed_the_rollback_cohort_with_the_seeds_reason() -> None:
    w = World()
    voters = tuple(f"agent:a{i}" for i in range(7))
    out = w.do("operator:op", ConfigureRecovery(voters=voters, quorum=4, max_rollback=4))
    assert out.result is Result.REJECTED and out.code == "quorum_no_margin"
    assert "leaves no margin over max_concurrent_rollbacks=4" in out.message
    assert "two disjoint rollback cohorts could both win" in out.message
    assert w.st.recovery.config.voters == ()
    assert w.do("operator:op", ConfigureRecovery(voters=voters, quorum=8, max_rollback=4)).code == "quorum_unreachable"
    assert w.do("operator:op", ConfigureRecovery(voters=voters, quorum=5, max_rollback=4)).ok


def test_agents_cannot_configure_or_commit() -> None:
    w = World()
    w.agent("a")
    out = w.do("agent:a", ConfigureRecovery(voters=("agent:a",), quorum=2, max_rollback=1))
    assert out.result is Result.REJECTED and out.code == "operator_only"


# -- the transaction ------------------------------------------------------------------------------


def test_two_node_cycle_commits_epoch_then_decision_then_cas_then_cancel_then_release() -> None:
    w = World()
    browser_review(w)
    w.configure()
    # A has committed an external write, so policy v1 prefers B as the victim.
    w.ok(
        "agent:A",
        RecordSideEffect(execution_id="exec:A", generation=1, effect_id="email-1", outcome=EffectOutcome.COMMITTED),
    )
    [c] = w.candidates()
    assert c.member_ids == ("exec:A", "exec:B")
    out = w.propose(c)
    assert kinds(out) == ["RecoveryProposed"]
    assert out.effects[0].epoch_proposed == 1
    assert w.st.recovery.epoch == 0

    # Not yet: no votes, and the confirmation window has not passed.
    early = w.commit(c, dt=1)
    assert early.result is Result.REJECTED and early.code == "confirmation_window"
    late_no_votes = w.commit(c, dt=1000)
    assert late_no_votes.result is Result.REJECTED and late_no_votes.code == "no_quorum"

    # A vote from outside the voter set, or twice from one voter, changes nothing.
    assert w.do("operator:mallory", VoteRecovery(digest=c.digest)).code == "not_a_voter"
    w.ok("node:n1", VoteRecovery(digest=c.digest))
    assert w.do("node:n1", VoteRecovery(digest=c.digest)).code == "already_voted"
    w.ok("node:n2", VoteRecovery(digest=c.digest))
    assert w.commit(c).code == "no_quorum"
    w.ok("node:n3", VoteRecovery(digest=c.digest))

    out = w.commit(c)
    assert out.ok
    seq = kinds(out)
    first = {
        k: seq.index(k)
        for k in ("EpochCommitted", "VictimChosen", "ExecutionStateChanged", "CancelRequested", "SatisfierClosed")
    }
    assert first["EpochCommitted"] < first["VictimChosen"] < first["ExecutionStateChanged"]
    # B held nothing; what it had was its PRODUCED_BY edge, closed last.
    assert first["ExecutionStateChanged"] < first["CancelRequested"] < first["SatisfierClosed"]
    assert "Released" not in seq
    cas = out.effects[first["ExecutionStateChanged"]]
    assert isinstance(cas, ExecutionStateChanged)
    assert (cas.execution_id, cas.before, cas.after) == ("exec:B", ExecStatus.WAITING, ExecStatus.CANCELLING)
    victim = out.effects[first["VictimChosen"]]
    assert isinstance(victim, VictimChosen)
    assert (victim.execution_id, victim.generation, victim.epoch, victim.decision_kind) == ("exec:B", 1, 1, "VICTIM")
    assert isinstance(out.effects[first["EpochCommitted"]], EpochCommitted)
    assert w.st.recovery.epoch == 1
    decision = w.st.recovery.decisions[victim.decision_id]
    assert [s.execution_id for s in decision.scores] == ["exec:A", "exec:B"]
    assert decision.scores[0].external_side_effects and not decision.scores[1].external_side_effects
    # A's wait on B's artifact lost its producer: no hard edge, no deadlock.
    assert w.st.executions["exec:B"].status is ExecStatus.CANCELLING
    assert full_pass(w.st) == []

    # A second commit for the same digest is an idempotent no-op.
    again = w.commit(c)
    assert again.result is Result.NOOP and again.code == "already_committed"
    assert w.st.recovery.epoch == 1


def test_victim_holdings_are_released_only_after_the_epoch_commit() -> None:
    w = World()
    browser_review(w)
    w.configure()
    # Make A the cheaper victim: B holds unique evidence.
    w.st.executions["exec:B"].unique_evidence = True
    [c] = w.candidates()
    [out] = w.recover()
    seq = kinds(out)
    assert seq.index("EpochCommitted") < seq.index("Released")
    rel = next(e for e in out.effects if isinstance(e, Released))
    assert (rel.target_id, rel.execution_id) == ("resource:browser-9", "exec:A")
    assert w.st.recovery.decisions["d1"].released == [("resource:browser-9", "exec:A")]
    # The release handed the browser to B, the head of its queue, in the same apply (after the
    # epoch commit and the release): B holds it at the next lease and its wait closed `granted`.
    assert seq.index("Released") < seq.index("Acquired")
    assert w.st.targets["resource:browser-9"].holders == {"exec:B": 1}
    assert w.st.executions["exec:B"].status is ExecStatus.RUNNING
    assert c.digest in w.st.recovery.proposals


def test_fenced_victim_cannot_acquire_under_an_older_epoch() -> None:
    w = World()
    browser_review(w)
    w.configure()
    w.st.executions["exec:B"].unique_evidence = True
    w.recover()
    assert w.st.recovery.fence == {"exec:A": 1}
    # The victim is cancelled, then retried as a new attempt.
    from waitgraph.statemachine.commands import AckCancel

    w.ok(
        "agent:A", AckCancel(execution_id="exec:A", generation=1, cancel_generation=0, side_effects=EffectOutcome.NONE)
    )
    w.ok("agent:A", RetryExecution(execution_id="exec:A", generation=1))
    w.ok("agent:A", StartExecution(execution_id="exec:A", generation=2, observed_cancel_generation=0))
    stale = w.do(
        "agent:A", Acquire(target_id="resource:browser-9", execution_id="exec:A", generation=2, observed_epoch=0)
    )
    assert stale.result is Result.REJECTED and stale.code == "stale_epoch"
    w.release("exec:B", "resource:browser-9")  # the rollback handed it to B; B is done with it
    assert w.do(
        "agent:A", Acquire(target_id="resource:browser-9", execution_id="exec:A", generation=2, observed_epoch=1)
    ).ok


def test_completion_racing_detection_is_retracted_and_counted() -> None:
    w = World()
    browser_review(w)
    w.configure()
    [c] = w.candidates()
    assert w.propose(c).ok
    w.vote_all(c)
    # B gives up on the browser before the commit: the second read sees no deadlock.
    w.ok(
        "agent:B",
        CloseWait(
            waiter_id="exec:B", waiter_generation=1, target_id="resource:browser-9", edge_version=1, reason="gave up"
        ),
    )
    out = w.commit(c)
    assert kinds(out) == ["RecoveryRetracted"]
    assert w.st.recovery.proposals[c.digest].status is ProposalStatus.RETRACTED
    assert w.st.counters["recovery.retracted"] == 1
    assert w.st.recovery.epoch == 0
    assert w.st.executions["exec:A"].status is ExecStatus.WAITING
    assert not w.st.recovery.decisions


def test_a_stale_proposal_is_retracted_at_propose_time() -> None:
    w = World()
    browser_review(w)
    w.configure()
    [c] = w.candidates()
    w.ok(
        "agent:B",
        CloseWait(
            waiter_id="exec:B", waiter_generation=1, target_id="resource:browser-9", edge_version=1, reason="gave up"
        ),
    )
    out = w.propose(c)
    assert kinds(out) == ["RecoveryRetracted"]
    assert w.st.counters["recovery.retracted"] == 1


def test_an_overlapping_proposal_is_refused_while_the_first_stands() -> None:
    w = World()
    browser_review(w)
    w.configure()
    [c] = w.candidates()
    assert w.propose(c).ok
    # The cycle grows a third member: a different digest over overlapping members.
    w.execution("C")
    w.hold("exec:C", "resource:desk")
    w.wait("exec:A", "resource:desk")
    w.wait("exec:C", "artifact:review-42")
    [c2] = w.candidates()
    assert c2.digest != c.digest
    out = w.propose(c2)
    assert out.result is Result.REJECTED and out.code == "overlapping_recovery"
    assert w.propose(c).code == "already_proposed"


def test_digest_must_match_members_and_edges() -> None:
    w = World()
    browser_review(w)
    w.configure()
    [c] = w.candidates()
    from dataclasses import replace

    out = w.propose(replace(c, digest="0" * 64))
    assert out.result is Result.REJECTED and out.code == "digest_mismatch"


# -- modes and policy ------------------------------------------------------------------------------


def test_shadow_mode_records_the_decision_and_never_cancels() -> None:
    w = World()
    browser_review(w)
    w.configure(mode=RolloutMode.SHADOW)
    [out] = w.recover()
    assert kinds(out) == ["VictimChosen"]
    d = w.st.recovery.decisions["d1"]
    assert d.kind is DecisionKind.SHADOW and d.reason_code == "shadow_mode" and d.epoch is None
    assert w.st.recovery.epoch == 0
    assert {e.status for e in w.st.executions.values()} == {ExecStatus.WAITING}
    assert w.st.targets["resource:browser-9"].holders == {"exec:A": 1}


def test_auto_safe_acts_only_on_side_effect_free_runs() -> None:
    w = World()
    browser_review(w)
    w.configure(mode=RolloutMode.AUTO_SAFE)
    [out] = w.recover()
    assert w.st.recovery.decisions["d1"].reason_code == "not_side_effect_free"
    assert w.st.recovery.epoch == 0
    # Mark both runs side-effect-free: the re-detected cycle (a new proposal) is acted on.
    # (The digest is unchanged, so re-proposing it is a recorded no-op; bump an edge version.)
    for run in ("run-A", "run-B"):
        w.ok("operator:op", SetMode(mode=None, run_id=run, side_effect_free=True))
    w.wait("exec:A", "artifact:review-42", reason="re-registered")
    [out] = w.recover()
    assert w.st.recovery.epoch == 1
    assert any(isinstance(e, EpochCommitted) for e in out.effects)


def test_per_run_override_uses_the_most_conservative_mode() -> None:
    w = World()
    browser_review(w)
    w.configure(mode=RolloutMode.AUTO)
    w.ok("operator:op", SetMode(mode=RolloutMode.SHADOW, run_id="run-B"))
    w.recover()
    assert w.st.recovery.decisions["d1"].kind is DecisionKind.SHADOW


@pytest.mark.parametrize(
    ("attrs", "victim"),
    [
        ({"exec:A": {"checkpoint": True}}, "exec:A"),
        ({"exec:B": {"checkpoint": True}}, "exec:B"),
        ({"exec:A": {"priority": 5}}, "exec:B"),
        ({"exec:B": {"priority": 5}}, "exec:A"),
        ({"exec:A": {"cost_consumed": 100}}, "exec:B"),
        ({"exec:A": {"unique_evidence": True}}, "exec:B"),
        ({}, "exec:A"),
    ],
)
def test_victim_policy_v1_orders_its_terms(attrs: dict[str, dict[str, object]], victim: str) -> None:
    w = World()
    browser_review(w)
    w.configure(mode=RolloutMode.SHADOW)
    for eid, fields in attrs.items():
        for k, v in fields.items():
            setattr(w.st.executions[eid], k, v)
    w.recover()
    assert w.st.recovery.decisions["d1"].winner_id == victim


def test_unknown_non_compensatable_side_effect_freezes_runs_for_a_human() -> None:
    w = World()
    browser_review(w)
    w.configure()
    w.ok(
        "agent:B",
        RecordSideEffect(execution_id="exec:B", generation=1, effect_id="wire-1", outcome=EffectOutcome.UNKNOWN),
    )
    [out] = w.recover()
    d = w.st.recovery.decisions["d1"]
    assert d.kind is DecisionKind.RECONCILIATION and d.winner_id is None and d.epoch is None
    assert w.st.recovery.epoch == 0
    assert set(w.st.cancel.frozen_runs) == {"run-A", "run-B"}
    assert "exec:B" in w.st.cancel.reconciliations
    assert {e.status for e in w.st.executions.values()} == {ExecStatus.WAITING}
    assert "RecoveryEscalated" in kinds(out)


def _force_livelock(w: World) -> None:
    """Make the next recovery of the one candidate a tie-break (as if it had re-formed)."""
    w.st.recovery.config.livelock_repeats = 1
    w.st.recovery.trajectory_of(w.candidates()[0].signature).recoveries.append((0, w.t))


def test_a_tie_break_on_the_default_cluster_yields_rather_than_rolls_back() -> None:
    """The default 3-node voters (quorum 2, max_rollback 1) break a re-forming 4-cycle over
    resources: the lowest id wins, the other three yield (no rollback: they keep their attempt),
    and the epoch is committed before anything is released."""
    w = World()
    ring = seven_agent_cycle(w, n=4)
    w.configure(voters=NODES3, quorum=2, max_rollback=1)
    _force_livelock(w)
    [out] = w.recover()
    d = w.st.recovery.decisions["d1"]
    assert d.kind is DecisionKind.TIE_BREAK and d.winner_id == "exec:a0" and d.epoch == 1
    assert dict(d.roles) == {ring[0]: "winner", **{m: "yielded" for m in ring[1:]}}
    names = kinds(out)
    assert names.index("EpochCommitted") < names.index("Released")
    assert {w.gen(m) for m in ring} == {1}  # nobody rolled back
    assert "RecoveryEscalated" not in names


def test_a_re_forming_one_member_cycle_is_broken_by_its_victim_not_a_tie_break() -> None:
    """An execution waiting for an artifact only it produces has nobody to yield to it: when the
    livelock guard fires on such a cycle, a tie-break would leave it waiting on itself for ever
    (found by test_recovery_props). The victim path applies; the guard's firing is still recorded."""
    w = World()
    e = w.execution("e")
    w.target("artifact:a")
    w.produces(e, "artifact:a")
    w.wait(e, "artifact:a")
    w.configure(voters=NODES3, quorum=2, max_rollback=1)
    _force_livelock(w)
    [out] = w.recover()
    d = w.st.recovery.decisions["d1"]
    assert d.kind is DecisionKind.VICTIM and d.winner_id == e and d.epoch == 1, d
    assert "LivelockDetected" in kinds(out)
    assert w.st.executions[e].status is ExecStatus.CANCELLING
    assert full_pass(w.st) == [], "the cycle still stands"


def test_a_tie_break_that_must_roll_back_more_than_allowed_is_escalated() -> None:
    """A ring of produced artifacts: yielding frees none of its waits, so a tie-break would roll
    back every loser (3 > max_rollback=1): a human decides."""
    w = World()
    ring = [w.execution(f"p{i}") for i in range(4)]
    for i, eid in enumerate(ring):
        w.produces(eid, f"artifact:out{i}")
    for i, eid in enumerate(ring):
        w.wait(eid, f"artifact:out{(i + 1) % 4}")
    w.configure(voters=NODES3, quorum=2, max_rollback=1)
    _force_livelock(w)
    [out] = w.recover()
    assert w.st.recovery.decisions["d1"].kind is DecisionKind.ESCALATION
    assert "RecoveryEscalated" in kinds(out)
    assert w.st.recovery.epoch == 0


# -- the second seed: a 7-agent pipeline and its 4-cycle ---------------------------------------

NODES3 = ("node:n1", "node:n2", "node:n3")


def seven_agent_cycle(w: World, n: int = 4) -> list[str]:
    """Agents a0..a6; a0..a3 form A->B->C->D->A over resources each one holds."""
    names = [f"a{i}" for i in range(7)]
    for name in names:
        w.execution(name)
    ring = [f"exec:{x}" for x in names[:n]]
    for i, eid in enumerate(ring):
        w.hold(eid, f"resource:r{i}")
    for i, eid in enumerate(ring):
        w.wait(eid, f"resource:r{(i + 1) % n}")
    return ring


def pipeline_voters() -> tuple[str, ...]:
    return tuple(f"agent:a{i}" for i in range(7))


def test_seed_pipeline_recovers_with_one_rollback_and_the_cycle_never_reforms() -> None:
    w = World()
    ring = seven_agent_cycle(w)
    w.configure(voters=pipeline_voters(), quorum=5, max_rollback=4)
    [c] = w.candidates()
    assert c.member_ids == tuple(ring)
    w.recover()
    d = w.st.recovery.decisions["d1"]
    assert d.kind is DecisionKind.VICTIM and d.epoch == 1
    victim = d.winner_id
    assert victim == "exec:a0"  # all scores equal: the lowest id
    # The released resource is handed to its waiter in the rollback itself (fair grant queue); it
    # finishes and its release hands the next one on; the rest follow. The victim retries behind.
    from waitgraph.statemachine.commands import AckCancel, CompleteExecution

    w.ok("agent:a0", AckCancel(execution_id=victim, generation=1, cancel_generation=0, side_effects=EffectOutcome.NONE))
    order = ["exec:a3", "exec:a2", "exec:a1"]
    for eid in order:
        res = f"resource:r{(ring.index(eid) + 1) % 4}"
        assert w.st.targets[res].holders == {eid: 1} and w.st.wait(eid, res) is None
        w.ok(w.owner(eid), CompleteExecution(execution_id=eid, generation=1, observed_cancel_generation=0))
        assert full_pass(w.st) == [], f"a cycle re-formed after {eid}"
    w.ok("agent:a0", RetryExecution(execution_id=victim, generation=1))
    w.ok("agent:a0", StartExecution(execution_id=victim, generation=2, observed_cancel_generation=0))
    w.ok("agent:a0", Acquire(target_id="resource:r0", execution_id=victim, generation=2, observed_epoch=1))
    w.ok("agent:a0", Acquire(target_id="resource:r1", execution_id=victim, generation=2, observed_epoch=1))
    assert full_pass(w.st) == []
    assert w.st.recovery.epoch == 1
    assert len(w.st.recovery.decisions) == 1


def test_naive_per_agent_epochs_reform_the_cycle_and_the_guard_flags_it() -> None:
    w = World()
    ring = seven_agent_cycle(w)
    w.configure(voters=pipeline_voters(), quorum=5, max_rollback=4)
    naive = NaivePerAgentEpochs(w.ok, w.m, ring, [f"resource:r{i}" for i in range(len(ring))])
    signatures = []
    for _ in range(11):  # the seed saw 11 rounds in 4.2 s
        [c] = w.candidates()
        signatures.append(c.signature)
        assert w.propose(c).ok  # the detector fires correctly every time
        naive.roll_back_all()
    assert len(set(signatures)) == 1, "the same 4-cycle re-formed every round"
    assert w.st.recovery.epoch == 0, "the naive recovery never advanced the replicated epoch"
    # Our commit path, given the same trajectory, refuses another speculative rollback.
    [c] = w.candidates()
    assert w.propose(c).ok
    w.vote_all(c)
    out = w.commit(c)
    flag = next(e for e in out.effects if isinstance(e, LivelockDetected))
    assert flag.reason == "same_signature_without_epoch_advance"
    assert w.st.counters["livelock.fingerprint"] == 1
    d = w.st.recovery.decisions["d1"]
    assert d.kind is DecisionKind.TIE_BREAK and d.winner_id == "exec:a0" and d.epoch == 1
    seq = kinds(out)
    assert seq.index("EpochCommitted") < seq.index("Released")
    yielded = [e.execution_id for e in out.effects if isinstance(e, Yielded)]
    assert yielded == ["exec:a1", "exec:a2", "exec:a3"]
    # The winner's wait was freed; every loser waits behind the winner; no cycle remains.
    assert w.st.executions["exec:a0"].status is ExecStatus.RUNNING
    for eid in yielded:
        assert w.st.wait(eid, "exec:a0") is not None
        assert not any(eid in t.holders for t in w.st.targets.values())
    assert full_pass(w.st) == []


def test_recurring_signature_within_window_escalates_to_tie_break() -> None:
    w = World()
    ring = seven_agent_cycle(w, n=2)
    w.configure(voters=NODES3, quorum=3, max_rollback=1, livelock_repeats=1, livelock_window_ms=10**9)
    w.recover()
    assert w.st.recovery.decisions["d1"].kind is DecisionKind.VICTIM
    victim = w.st.recovery.decisions["d1"].winner_id
    assert victim == ring[0]
    # The victim comes back at once (new attempt, current epoch) and re-forms the same cycle.
    from waitgraph.statemachine.commands import AckCancel

    w.ok(
        w.owner(victim),
        AckCancel(execution_id=victim, generation=1, cancel_generation=0, side_effects=EffectOutcome.NONE),
    )
    w.ok(w.owner(victim), RetryExecution(execution_id=victim, generation=1))
    w.ok(w.owner(victim), StartExecution(execution_id=victim, generation=2, observed_cancel_generation=0))
    other = ring[1]
    w.release(other, "resource:r0")  # the rollback handed r0 to the other member; it puts it back
    w.ok(w.owner(victim), Acquire(target_id="resource:r0", execution_id=victim, generation=2, observed_epoch=1))
    w.wait(other, "resource:r0")
    w.wait(victim, "resource:r1")
    w.recover()
    d = w.st.recovery.decisions["d2"]
    assert d.kind is DecisionKind.TIE_BREAK, d
    assert d.reason_code.startswith("recovered_more_than_1_times")
    assert w.st.recovery.epoch == 2
    assert full_pass(w.st) == []


def test_tie_break_rolls_back_producers_instead_of_making_them_wait() -> None:
    """In an artifact cycle, yielding cannot help: the member the winner needs output from is
    rolled back (restartable), never left waiting behind the winner (a hidden cycle)."""
    w = World()
    browser_review(w)
    w.configure(livelock_repeats=1, livelock_window_ms=10**9)
    w.st.recovery.trajectory_of(w.candidates()[0].signature).recoveries.append((0, w.t))
    w.recover()
    d = w.st.recovery.decisions["d1"]
    assert d.kind is DecisionKind.TIE_BREAK and d.winner_id == "exec:A"
    assert d.roles == [("exec:A", "winner"), ("exec:B", "rolled_back")]
    assert w.st.executions["exec:B"].status is ExecStatus.CANCELLING
    assert full_pass(w.st) == []


def test_a_cycle_decided_in_shadow_is_proposed_again_once_the_mode_acts() -> None:
    """Switching shadow -> auto acts on what already stands: the same digest may be proposed
    again, and goes through votes, the window and the second read, epoch first, like any other."""
    w = World()
    browser_review(w)
    w.configure(mode=RolloutMode.SHADOW)
    w.recover()
    assert w.st.recovery.decisions["d1"].kind is DecisionKind.SHADOW
    [c] = w.candidates()
    again = w.propose(c)  # still in shadow: the decision stands, nothing new to propose
    assert again.result is Result.NOOP and again.code == "already_proposed"
    w.ok("operator:op", SetMode(mode=RolloutMode.AUTO))
    proposed = w.propose(c)
    assert proposed.ok and kinds(proposed) == ["RecoveryProposed"]
    w.vote_all(c)
    out = w.commit(c)
    d2 = w.st.recovery.decisions["d2"]
    assert d2.kind is DecisionKind.VICTIM and d2.digest == c.digest and d2.epoch == 1 == w.st.recovery.epoch
    order = kinds(out)
    assert order.index("EpochCommitted") < order.index("Released")  # nothing released before the epoch
    # Decided for real now: never proposed again, and the shadow record is still there to explain.
    assert w.st.recovery.decisions["d1"].kind is DecisionKind.SHADOW
    assert w.candidates() == []
    late = w.propose(c)
    assert late.result is Result.NOOP and late.code == "already_proposed"


def test_a_mode_that_would_still_only_shadow_does_not_propose_again() -> None:
    w = World()
    browser_review(w)
    w.configure(mode=RolloutMode.SHADOW)
    w.recover()
    [c] = w.candidates()
    w.ok("operator:op", SetMode(mode=RolloutMode.AUTO_SAFE))  # the runs are not side-effect-free
    out = w.propose(c)
    assert out.result is Result.NOOP and out.code == "already_proposed"
    w.ok("operator:op", SetMode(mode=None, run_id="run-A", side_effect_free=True))
    w.ok("operator:op", SetMode(mode=None, run_id="run-B", side_effect_free=True))
    assert w.propose(c).ok  # now auto-safe acts on both runs
