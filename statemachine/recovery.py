"""Recovery: a replicated, two-phase, quorum-voted transaction (docs/design.md §4).

Rules kept here (the second seed's conditions of validity):
1. The epoch is part of the replicated state; every rollback advances it in the same apply that
   decides it, *before* anything is released.
2. Propose -> vote -> commit. Propose and commit both re-validate the candidate against the
   state at their own log position (the second read); a candidate that is gone or changed is
   RETRACTED and counted as a false positive, and nothing is cancelled.
3. "Resolved" is this log transition, never a local observation.
4. The vote quorum is strictly greater than the most executions one recovery may roll back
   (``max_rollback``): a victim, or a tie-break's rolled-back members. A tie-break's yielders
   keep their attempt (they release and wait behind the winner) and are not rollbacks: the
   seed's remedy for livelock is the tie-break *instead of* another rollback.
Inside one CommitRecovery the order is fixed: epoch committed, decision recorded, victim CAS
WAITING -> CANCELLING at its generation, its cancellation started, and only then releases.

Livelock guard: the same signature observed again without the epoch having advanced since, or
recovered more than K times within W logical ms, makes the next recovery a deterministic
tie-break (lowest id wins) instead of another speculative rollback.
"""

from __future__ import annotations

from collections.abc import Callable

from . import cancel, reassign
from . import errors as E
from .commands import CommitRecovery, ConfigureRecovery, ProposeRecovery, SetMode, VoteRecovery
from .context import Ctx, later, missing_run, require_operator, require_session
from .detect import Candidate, still_deadlocked, wait_satisfiers
from .effects import (
    EpochCommitted,
    LivelockDetected,
    ModeChanged,
    RecoveryConfigured,
    RecoveryEscalated,
    RecoveryProposed,
    RecoveryRejected,
    RecoveryRetracted,
    VictimChosen,
    VoteRecorded,
    Yielded,
)
from .enums import CancelMode, EffectOutcome, ExecStatus
from .ids import ActorKind, Kind, actor_kind, id_kind, kind_of, validate_name
from .lifecycle import Event, end_attempt, next_status, open_edge, release_holding, set_status
from .outcome import Outcome, applied, noop
from .queues import YIELD_REASON
from .recovery_state import (
    POLICY_VERSION,
    CycleWait,
    Decision,
    DecisionKind,
    Proposal,
    ProposalStatus,
    RecoveryBook,
    RecoveryConfig,
    RolloutMode,
    Score,
)
from .reorder import Reorder, apply_orders, find_reorder, soft_candidates, still_soft
from .state import State, WaitEdge
from .telemetry import COST_BOUNDS, generation_bucket
from .telemetry import bump as bump_labelled
from .telemetry import observe as observe_labelled

_EXTERNAL = frozenset({EffectOutcome.COMMITTED, EffectOutcome.UNKNOWN})
_NOT_ACTING = frozenset({DecisionKind.SHADOW, DecisionKind.RECONCILIATION, DecisionKind.ESCALATION})


def book(state: State) -> RecoveryBook:
    return state.recovery


# -- configuration ------------------------------------------------------------------------------


def configure(ctx: Ctx, cmd: ConfigureRecovery) -> Outcome:
    require_operator(ctx, "ConfigureRecovery")
    if not cmd.voters:
        raise E.invalid("no_voters", "the voter set must not be empty")
    for v in cmd.voters:
        actor_kind(v)
    if len(set(cmd.voters)) != len(cmd.voters):
        raise E.invalid("duplicate_voter", "a voter appears twice")
    if cmd.max_rollback < 1:
        raise E.invalid("bad_max_rollback", "max_rollback must be at least 1")
    if cmd.quorum <= cmd.max_rollback:
        raise E.invalid(
            "quorum_no_margin",
            f"quorum={cmd.quorum} leaves no margin over max_concurrent_rollbacks={cmd.max_rollback}; "
            "two disjoint rollback cohorts could both win.",
            quorum=cmd.quorum,
            max_rollback=cmd.max_rollback,
        )
    if cmd.quorum > len(cmd.voters):
        raise E.invalid("quorum_unreachable", f"quorum={cmd.quorum} exceeds the {len(cmd.voters)} voters")
    if cmd.confirmation_window_ms < 0 or cmd.livelock_window_ms < 0 or cmd.livelock_repeats < 1:
        raise E.invalid("bad_config", "windows must be >= 0 and livelock_repeats >= 1")
    voters = tuple(sorted(cmd.voters))
    book(ctx.state).config = RecoveryConfig(
        voters,
        cmd.quorum,
        cmd.max_rollback,
        cmd.confirmation_window_ms,
        cmd.livelock_repeats,
        cmd.livelock_window_ms,
    )
    return applied([RecoveryConfigured(voters=voters, quorum=cmd.quorum, max_rollback=cmd.max_rollback)])


def set_mode(ctx: Ctx, cmd: SetMode) -> Outcome:
    require_operator(ctx, "SetMode")
    rb = book(ctx.state)
    if cmd.run_id is None:
        if cmd.mode is None or cmd.side_effect_free is not None:
            raise E.invalid("bad_mode", "the cluster mode needs a mode and takes no side_effect_free flag")
        rb.mode = cmd.mode
    else:
        validate_name(cmd.run_id, "run_id")
        if cmd.run_id not in ctx.state.runs:
            raise missing_run(ctx.state, cmd.run_id)
        if cmd.mode is None:
            rb.run_modes.pop(cmd.run_id, None)
        else:
            rb.run_modes[cmd.run_id] = cmd.mode
        if cmd.side_effect_free is True:
            rb.side_effect_free.add(cmd.run_id)
        elif cmd.side_effect_free is False:
            rb.side_effect_free.discard(cmd.run_id)
    return applied(
        [
            ModeChanged(
                run_id=cmd.run_id,
                mode=cmd.mode.value if cmd.mode else None,
                side_effect_free=cmd.side_effect_free,
            )
        ]
    )


# -- phase one: propose -------------------------------------------------------------------------


def _candidate(cmd: ProposeRecovery) -> Candidate:
    if len(cmd.member_ids) != len(cmd.member_generations) or len(cmd.edge_ids) != len(cmd.edge_versions):
        raise E.invalid("bad_candidate", "ids and generations/versions must pair up")
    if not cmd.member_ids or not cmd.edge_ids:
        raise E.invalid("bad_candidate", "a candidate has members and edges")
    for m in cmd.member_ids:
        id_kind(m, "member_ids", frozenset({Kind.EXEC}))
    if len(set(cmd.member_ids)) != len(cmd.member_ids) or len(set(cmd.edge_ids)) != len(cmd.edge_ids):
        raise E.invalid("bad_candidate", "members and edges must be distinct")
    members = set(cmd.member_ids)
    for e in cmd.edge_ids:
        waiter, sep, target = e.partition(">")
        if not sep or waiter not in members:
            raise E.invalid("bad_candidate", f"edge {e!r} is not a wait of a member")
        id_kind(target, "edge_ids", frozenset(Kind) - {Kind.HUMAN, Kind.EXTERNAL})
    c = Candidate.build(
        zip(cmd.member_ids, cmd.member_generations, strict=True), zip(cmd.edge_ids, cmd.edge_versions, strict=True)
    )
    if c.digest != cmd.digest:
        raise E.invalid("digest_mismatch", "the digest does not match the members and edges sent")
    return c


def propose_command(c: Candidate, observed_index: int) -> ProposeRecovery:
    """The ProposeRecovery a detector sends for a candidate it saw at ``observed_index``."""
    return ProposeRecovery(
        digest=c.digest,
        member_ids=tuple(m for m, _ in c.members),
        member_generations=tuple(g for _, g in c.members),
        edge_ids=tuple(e for e, _ in c.edges),
        edge_versions=tuple(v for _, v in c.edges),
        observed_index=observed_index,
    )


def _as_candidate(p: Proposal) -> Candidate:
    return Candidate.build(p.members, p.edges)


def _generation(members: list[tuple[str, int]]) -> str:
    """A cycle's generation bucket for metrics: its members' highest attempt generation."""
    return generation_bucket(max(g for _, g in members))


def _reason_code(reason: str) -> str:
    """A decision or livelock reason as a bounded metrics label (the repeat rule's text names K and W)."""
    return "livelock_repeats" if reason.startswith("recovered_more_than_") else reason


def _count_outcome(st: State, mode: RolloutMode, outcome: str) -> None:
    bump_labelled(st, "recovery.outcome", mode=mode.value, outcome=outcome)


def _retract(ctx: Ctx, p: Proposal, reason: str) -> None:
    book(ctx.state).close_proposal(p, ProposalStatus.RETRACTED, ctx.now, reason)
    ctx.state.bump("recovery.retracted")
    bump_labelled(ctx.state, "recovery.retracted", reason=reason, generation=_generation(p.members))
    ctx.fx.append(RecoveryRetracted(digest=p.digest, reason=reason))


def acts(rb: RecoveryBook, mode: RolloutMode, runs: list[str]) -> bool:
    """Whether a recovery of these runs under ``mode`` rolls anything back (else it is SHADOW)."""
    return mode is RolloutMode.AUTO or (mode is RolloutMode.AUTO_SAFE and all(r in rb.side_effect_free for r in runs))


NO_REORDER = "no_reorder"
"""The retraction of a soft cycle that no reorder may break (the queues' anti-starvation bound)."""


def reproposable(st: State, digest: str) -> bool:
    """A cycle decided in shadow whose runs are now in a mode that acts may be proposed again
    (and a soft cycle retracted ``no_reorder`` once it is a hard candidate).

    Switching shadow -> auto-safe or auto must act on the deadlocks that already stand, not only
    on new ones: the standing cycle's digest is unchanged, so without this rule the shadow
    decision would be its last word and the operator would have to cancel by hand. The new
    proposal goes through votes, the confirmation window and the second read like any other; a
    cycle that dissolved meanwhile is simply no longer a candidate.
    """
    rb = st.recovery
    p = rb.proposals.get(digest)
    if p is not None and p.status is ProposalStatus.RETRACTED and p.close_reason == NO_REORDER:
        # A soft cycle no reorder could break, retracted without a decision, that the hand-offs
        # have made hard since: the same members and edges, so the same digest, now for the victim path.
        return still_deadlocked(st, _as_candidate(p))
    if p is None or p.status is not ProposalStatus.COMMITTED or p.decision_id is None:
        return False
    d = rb.decisions.get(p.decision_id)
    if d is None or d.kind is not DecisionKind.SHADOW:
        return False
    runs = sorted({st.executions[m].run_id for m, _ in p.members if m in st.executions})
    return acts(rb, rb.mode_for(runs), runs)


def propose(ctx: Ctx, cmd: ProposeRecovery) -> Outcome:
    require_operator(ctx, "ProposeRecovery")
    st, rb = ctx.state, book(ctx.state)
    c = _candidate(cmd)
    if not rb.config.voters:
        raise E.precondition("no_voters", "recovery is not configured: ConfigureRecovery first")
    known = rb.proposals.get(c.digest)
    if known is not None and not reproposable(st, c.digest):
        return noop("already_proposed", f"{c.digest[:16]} is already {known.status.value}")
    for digest in sorted({rb.open_members[m] for m in c.member_ids if m in rb.open_members}):
        other = rb.proposals[digest]
        if stands(st, _as_candidate(other)):
            raise E.precondition(
                "overlapping_recovery",
                f"members overlap open recovery {digest[:16]}; one cohort at a time",
                digest=digest,
            )
    # Proposals that overlap but no longer stand are retracted first, so a stale one never
    # blocks recovery of the cycle that replaced it.
    for digest in sorted({rb.open_members[m] for m in c.member_ids if m in rb.open_members}):
        _retract(ctx, rb.proposals[digest], "superseded")
    p = Proposal(
        c.digest,
        c.signature,
        list(c.members),
        list(c.edges),
        cmd.observed_index,
        ctx.actor,
        ctx.now,
        rb.epoch + 1,
    )
    rb.open_proposal(p)
    st.bump("recovery.proposed")
    bump_labelled(st, "recovery.proposed", generation=_generation(p.members))
    rb.trajectory_of(c.signature).observe(rb.epoch, ctx.now, rb.config.livelock_repeats + 1)
    if not stands(st, c):
        _retract(ctx, p, "second_read_changed")
        return applied(ctx.fx)
    ctx.fx.append(
        RecoveryProposed(digest=c.digest, signature=c.signature, epoch_proposed=p.epoch_proposed, members=c.member_ids)
    )
    return applied(ctx.fx)


# -- votes --------------------------------------------------------------------------------------


def vote(ctx: Ctx, cmd: VoteRecovery) -> Outcome:
    rb = book(ctx.state)
    p = rb.proposals.get(cmd.digest)
    if p is None:
        raise E.not_found("no_proposal", f"no recovery proposal {cmd.digest[:16]}")
    cfg = rb.config
    if ctx.actor not in cfg.voters:
        return noop("not_a_voter", f"{ctx.actor} is not in the voter set")
    if ctx.actor_kind is ActorKind.AGENT:
        require_session(ctx)
    if p.status is not ProposalStatus.OPEN:
        return noop("not_open", f"recovery {cmd.digest[:16]} is {p.status.value}")
    if ctx.actor in p.approvals or ctx.actor in p.rejections:
        return noop("already_voted", f"{ctx.actor} already voted on {cmd.digest[:16]}")
    (p.approvals if cmd.approve else p.rejections).append(ctx.actor)
    p.votes.append((ctx.actor, cmd.approve, ctx.now))
    approvals = _count(p.approvals, cfg)
    ctx.fx.append(
        VoteRecorded(digest=p.digest, voter=ctx.actor, approve=cmd.approve, approvals=approvals, quorum=cfg.quorum)
    )
    rejections = _count(p.rejections, cfg)
    if rejections > len(cfg.voters) - cfg.quorum:
        rb.close_proposal(p, ProposalStatus.REJECTED, ctx.now, "voted_down")
        ctx.state.bump("recovery.rejected")
        execs = ctx.state.executions
        runs = sorted({execs[m].run_id for m, _ in p.members if m in execs})
        _count_outcome(ctx.state, rb.mode_for(runs), "voted_down")
        ctx.fx.append(RecoveryRejected(digest=p.digest, rejections=rejections))
    return applied(ctx.fx)


def _count(voters: list[str], cfg: RecoveryConfig) -> int:
    """Votes that count: only from voters still in the configured set."""
    return sum(1 for v in voters if v in cfg.voters)


# -- phase two: commit --------------------------------------------------------------------------


def score(state: State, execution_id: str) -> Score:
    ex = state.executions[execution_id]
    external = any(se.outcome in _EXTERNAL for se in ex.side_effects.values())
    return Score(
        ex.execution_id,
        ex.generation,
        external,
        ex.checkpoint,
        ex.priority,
        ex.cost_consumed,
        ex.unique_evidence,
    )


def livelock_reason(rb: RecoveryBook, signature: str, now: int) -> str | None:
    """Why this signature is thrashing, or None. Looks at the trajectory *before* this commit (a
    read of it between a proposal and its commit says what that commit will do)."""
    traj = rb.trajectory.get(signature)
    if traj is None:
        return None
    obs = traj.observations
    # The latest observation is this proposal's own; compare it with the one before it.
    if len(obs) >= 2 and obs[-1][0] <= obs[-2][0]:
        return "same_signature_without_epoch_advance"
    cfg = rb.config
    recent = [r for r in traj.recoveries if now - r[1] <= cfg.livelock_window_ms]
    if len(recent) >= cfg.livelock_repeats:
        return f"recovered_more_than_{cfg.livelock_repeats}_times_within_{cfg.livelock_window_ms}ms"
    return None


def _cycle_waits(state: State, c: Candidate) -> list[CycleWait]:
    """The candidate's waits as they stand now (re-validated: every edge is open at its version)."""
    members = set(c.member_ids)
    out = []
    for eid, _ in c.edges:
        waiter, _, target = eid.partition(">")
        edge = state.wait(waiter, target)
        if edge is None:
            raise E.InvariantViolation(f"edge {eid} of a re-validated candidate is not open")
        sats = tuple(s for s in (wait_satisfiers(state, edge) or ()) if s in members)
        out.append(
            CycleWait(
                edge.waiter_id,
                edge.waiter_generation,
                edge.target_id,
                edge.target_generation,
                edge.edge_version,
                edge.reason,
                edge.registered_at_ms,
                sats,
            )
        )
    return out


def _blocking_satisfiers(state: State, c: Candidate) -> set[str]:
    """Members that satisfy a member's wait by producing, providing or finishing (not by holding):
    yielding cannot free those waits, so a tie-break rolls such members back instead."""
    members = set(c.member_ids)
    out: set[str] = set()
    for eid, _ in c.edges:
        waiter, _, target = eid.partition(">")
        if kind_of(target) in (Kind.EXEC, Kind.ARTIFACT, Kind.APPROVAL):
            edge = state.wait(waiter, target)
            if edge is not None:
                out.update(s for s in (wait_satisfiers(state, edge) or ()) if s in members)
    return out


def commit(ctx: Ctx, cmd: CommitRecovery) -> Outcome:
    require_operator(ctx, "CommitRecovery")
    st, rb = ctx.state, book(ctx.state)
    p = rb.proposals.get(cmd.digest)
    if p is None:
        raise E.not_found("no_proposal", f"no recovery proposal {cmd.digest[:16]}")
    if p.status is ProposalStatus.COMMITTED:
        return noop("already_committed", f"recovery {cmd.digest[:16]} was decided as {p.decision_id}")
    if p.status is not ProposalStatus.OPEN:
        return noop("not_open", f"recovery {cmd.digest[:16]} is {p.status.value}")
    cfg = rb.config
    ready_at = later(p.proposed_at_ms, cfg.confirmation_window_ms)
    if ctx.now < ready_at:
        raise E.precondition(
            "confirmation_window", f"the confirmation window ends at {ready_at} ms", ready_at_ms=ready_at
        )
    approvals = _count(p.approvals, cfg)
    if approvals < cfg.quorum:
        raise E.precondition("no_quorum", f"{approvals} of {cfg.quorum} votes", approvals=approvals, quorum=cfg.quorum)
    c = _as_candidate(p)
    soft = None if still_deadlocked(st, c) else still_soft(st, c)
    if soft is None and not still_deadlocked(st, c):
        _retract(ctx, p, "second_read_changed")
        return applied(ctx.fx)
    # A soft cycle (statemachine/reorder.py) is broken by reordering queues, never by a victim:
    # with no reorder left it is retracted, and becomes a hard candidate once the hand-off makes it one.
    found = find_reorder(st, soft) if soft is not None else None
    if soft is not None and found is None:
        _retract(ctx, p, NO_REORDER)
        # Nothing was decided: seeing the cycle again (hard, after the hand-offs) is not a
        # recovery re-forming it, so the livelock guard forgets this sighting.
        rb.trajectory_of(c.signature).observations.clear()
        return applied(ctx.fx)
    # -- every check has passed; from here on nothing is refused --
    members = list(c.member_ids)
    runs = sorted({st.executions[m].run_id for m in members})
    scores = [score(st, m) for m in members]
    waits = _cycle_waits(st, c)  # before anything is released or closed
    epoch_before = rb.epoch
    mode = rb.mode_for(runs)
    livelock = livelock_reason(rb, c.signature, ctx.now)
    if livelock is not None:
        st.bump("livelock.escalations")
        bump_labelled(st, "livelock.escalations", reason=_reason_code(livelock))
        if livelock == "same_signature_without_epoch_advance":
            st.bump("livelock.fingerprint")
        ctx.fx.append(LivelockDetected(signature=c.signature, digest=c.digest, reason=livelock))
    generation = _generation(p.members)
    plan = reassign.plan(st, c)  # the remedies before the victim policy (statemachine/reassign.py)
    decision_id = f"d{rb.next_decision}"
    rb.next_decision += 1

    def decide(
        kind: DecisionKind, reason: str, winner: str | None, roles: list[tuple[str, str]], epoch: int | None
    ) -> Decision:
        d = Decision(
            decision_id,
            c.digest,
            c.signature,
            POLICY_VERSION,
            kind,
            mode,
            reason,
            epoch,
            winner,
            st.executions[winner].generation if winner else 0,
            scores,
            roles,
            [],
            ctx.now,
            epoch_before,
            p.proposer,
            p.proposed_at_ms,
            list(p.votes),
            waits,
            reassign.remedy_log(plan, kind, reason, reordered=found is not None),
            [] if found is not None else list(plan.moves),
        )
        rb.add_decision(d)
        bump_labelled(st, "deadlocks.confirmed", reason=_reason_code(reason), generation=generation)
        for m, role in roles:
            if role in ("victim", "rolled_back", "yielded"):
                ex = st.executions[m]
                observe_labelled(
                    st,
                    "recovery.victim_cost",
                    ex.cost_consumed,
                    COST_BOUNDS,
                    kind=kind.value,
                    generation=generation_bucket(ex.generation),
                )
        if kind in _NOT_ACTING:
            # Nothing was rolled back, so seeing this cycle again is not a recovery re-forming
            # it: forget the observations, or shadow mode would raise the livelock fingerprint.
            rb.trajectory_of(c.signature).observations.clear()
        p.decision_id = decision_id
        rb.close_proposal(p, ProposalStatus.COMMITTED, ctx.now, kind.value)
        ctx.fx.append(
            VictimChosen(
                decision_id=decision_id,
                digest=c.digest,
                decision_kind=kind.value,
                mode=mode.value,
                policy_version=POLICY_VERSION,
                execution_id=winner,
                generation=d.winner_generation,
                reason_code=reason,
                epoch=epoch,
            )
        )
        return d

    if found is not None:  # reorder: before reassigning and the victim policy (cancels no one, moves no one)
        _reorder(ctx, found, c, mode, runs, decide)
        return applied(ctx.fx)
    if plan.moves:
        # Reassigning cancels no one, so it comes before the victim policy and its guards.
        kept = [(m, "kept") for m in members]
        if not acts(rb, mode, runs):
            reason = "shadow_mode" if mode is RolloutMode.SHADOW else "not_side_effect_free"
            decide(DecisionKind.SHADOW, reason, None, kept, None)
            st.bump("recovery.shadowed")
            _count_outcome(st, mode, "shadowed")
            return applied(ctx.fx)
        rb.epoch += 1  # 1. the epoch, before anything moves
        ctx.fx.append(EpochCommitted(epoch=rb.epoch, digest=c.digest))
        rb.trajectory_of(c.signature).recover(rb.epoch, ctx.now, cfg.livelock_repeats + 1)
        st.bump("recovery.reassigned")  # not recovery.committed: that one counts rollbacks
        _count_outcome(st, mode, "reassigned")
        d = decide(DecisionKind.REASSIGN, "approval_provider_in_cycle", None, kept, rb.epoch)  # 2.
        reassign.apply(ctx, d)  # 3. PROVIDED_BY moves; old provider, approver and waiters learn it
        return applied(ctx.fx)
    unknown = [
        m
        for m in members
        if any(
            se.outcome is EffectOutcome.UNKNOWN and not se.compensatable
            for se in st.executions[m].side_effects.values()
        )
    ]
    victim = min(scores, key=Score.key).execution_id
    if unknown:
        decide(DecisionKind.RECONCILIATION, "unknown_side_effect", None, [(m, "kept") for m in members], None)
        _freeze_for_reconciliation(ctx, runs, unknown, c.digest)
        _count_outcome(st, mode, "reconciliation")
        return applied(ctx.fx)
    # The quorum rule (seed 2, condition 4) bounds the executions one recovery *rolls back* at
    # once. A tie-break's yielders are not rolled back: they keep their attempt, release what
    # they hold and wait behind the winner. Only the members whose waits yielding cannot free
    # (they produce, provide or finish what another member waits for) are rolled back and count.
    # A one-member cycle (an execution waiting for what only it can produce or release) has nobody
    # to yield to it: a tie-break would leave it waiting on itself, so the victim path applies even
    # when the livelock guard fired (LivelockDetected above still records that it did).
    tie_break = livelock is not None and len(members) > 1
    if not tie_break:
        rollbacks = 1
    else:
        winner = min(members)
        blocking = _blocking_satisfiers(st, c)
        tie_roles = [(m, "winner" if m == winner else "rolled_back" if m in blocking else "yielded") for m in members]
        rollbacks = sum(role == "rolled_back" for _, role in tie_roles)
    if rollbacks > cfg.max_rollback:
        decide(DecisionKind.ESCALATION, "exceeds_max_rollback", None, [(m, "kept") for m in members], None)
        st.bump("recovery.escalated")
        _count_outcome(st, mode, "escalated")
        ctx.fx.append(RecoveryEscalated(digest=c.digest, reason="exceeds_max_rollback", run_ids=tuple(runs)))
        return applied(ctx.fx)
    if not acts(rb, mode, runs):
        reason = "shadow_mode" if mode is RolloutMode.SHADOW else "not_side_effect_free"
        winner = min(members) if tie_break else victim
        decide(DecisionKind.SHADOW, reason, winner, [(m, "victim" if m == winner else "kept") for m in members], None)
        st.bump("recovery.shadowed")
        _count_outcome(st, mode, "shadowed")
        return applied(ctx.fx)
    # 1. the epoch, before anything is released
    rb.epoch += 1
    epoch = rb.epoch
    ctx.fx.append(EpochCommitted(epoch=epoch, digest=c.digest))
    rb.trajectory_of(c.signature).recover(epoch, ctx.now, cfg.livelock_repeats + 1)
    st.bump("recovery.committed")
    _count_outcome(st, mode, "rolled_back")
    if not tie_break:
        # 2. the decision, 3. the CAS, 4. the cancellation, 5. the releases
        d = decide(
            DecisionKind.VICTIM,
            livelock or "policy_v1",
            victim,
            [(m, "victim" if m == victim else "kept") for m in members],
            epoch,
        )
        _roll_back(ctx, d, victim, epoch)
        return applied(ctx.fx)
    assert livelock is not None  # tie_break implies it
    d = decide(DecisionKind.TIE_BREAK, livelock, winner, tie_roles, epoch)
    for m, role in tie_roles:
        if role == "rolled_back":
            _roll_back(ctx, d, m, epoch)
        elif role == "yielded":
            _yield(ctx, d, m, winner, epoch)
    return applied(ctx.fx)


def stands(st: State, c: Candidate) -> bool:
    """The second read of a proposal: a hard candidate still deadlocked, or a soft cycle still
    there (what a voter approves, cluster/node/loops.py, and what apply re-validates)."""
    return still_deadlocked(st, c) or still_soft(st, c) is not None


def soft_proposals(st: State) -> list[Candidate]:
    """The soft cycles worth a proposal (read by the leader's detection loop): those a reorder
    breaks. One that none breaks would be proposed, then retracted (``no_reorder``), every
    period; it waits instead until a hand-off makes it hard, and the detector proposes it then.
    Without a queue of two waiters this reads no wait (:func:`reorder.soft_cycles`)."""
    return [c for c, cycle in soft_candidates(st) if find_reorder(st, cycle) is not None]


def _reorder(
    ctx: Ctx,
    found: Reorder,
    c: Candidate,
    mode: RolloutMode,
    runs: list[str],
    decide: Callable[[DecisionKind, str, str | None, list[tuple[str, str]], int | None], Decision],
) -> None:
    """REORDER: the epoch first, then the decision (queues before and after, every score), then
    the new queue orders; nobody is cancelled or released. In shadow mode only reported."""
    st, rb = ctx.state, book(ctx.state)
    moved = {w for _, before, after in found.queues for w, b in zip(after, before, strict=True) if w != b}
    roles = [(m, "reordered" if m in moved else "kept") for m in c.member_ids]
    record = [(tid, list(before), list(after)) for tid, before, after in found.queues]
    if not acts(rb, mode, runs):
        reason = "shadow_mode" if mode is RolloutMode.SHADOW else "not_side_effect_free"
        d = decide(DecisionKind.SHADOW, reason, None, roles, None)
        d.reorders = record
        st.bump("recovery.shadowed")
        _count_outcome(st, mode, "shadowed")
        return
    rb.epoch += 1
    epoch = rb.epoch
    ctx.fx.append(EpochCommitted(epoch=epoch, digest=c.digest))
    # a recovery of this signature like any other, so the livelock guard sees one that re-forms
    rb.trajectory_of(c.signature).recover(epoch, ctx.now, rb.config.livelock_repeats + 1)
    st.bump("recovery.reordered")  # not recovery.committed: that one counts rollbacks
    _count_outcome(st, mode, "reordered")
    d = decide(DecisionKind.REORDER, "soft_cycle_reordered", None, roles, epoch)
    d.reorders = record
    apply_orders(st, found)
    for _, _, after in found.queues:
        for w in after:
            st.touch(w)


def _roll_back(ctx: Ctx, d: Decision, execution_id: str, epoch: int) -> None:
    """CAS WAITING -> CANCELLING at the decided generation, start the cancellation, then release."""

    st = ctx.state
    ex = st.executions[execution_id]
    if ex.status is not ExecStatus.WAITING:
        raise E.InvariantViolation(f"victim {execution_id} is {ex.status.value} after re-validation")
    set_status(ctx, ex, next_status(ex, Event.VICTIM), f"victim:{d.decision_id}")
    book(st).fence[execution_id] = epoch
    cancel.cancel_subtree(ctx, ex, f"deadlock victim ({d.decision_id})", "recovery")
    _release_all(ctx, d, execution_id, "rolled_back")


def _yield(ctx: Ctx, d: Decision, execution_id: str, winner_id: str, epoch: int) -> None:
    """Release what the loser holds and make it wait behind the winner (a coordinator edge)."""
    st = ctx.state
    ex = st.executions[execution_id]
    book(st).fence[execution_id] = epoch
    ctx.fx.append(Yielded(execution_id=execution_id, generation=ex.generation, winner_id=winner_id, epoch=epoch))
    _release_holdings(ctx, d, execution_id)
    winner = st.executions[winner_id]
    version = ex.edge_hwm.get(winner_id, 0) + 1
    existing = st.wait(execution_id, winner_id)
    if existing is not None:
        st.remove_wait(existing)
    edge = WaitEdge(
        ex.execution_id,
        ex.generation,
        winner.execution_id,
        winner.generation,
        st.shared_text(YIELD_REASON),
        None,
        CancelMode.COOPERATIVE,
        version,
        ctx.now,
    )
    open_edge(ctx, ex, edge)


def _release_holdings(ctx: Ctx, d: Decision, execution_id: str) -> None:
    st = ctx.state
    for target_id in sorted(st.satisfies.get(execution_id, ())):
        t = st.targets[target_id]
        if execution_id in t.holders:
            release_holding(ctx, t, execution_id, f"yielded:{d.decision_id}")
            d.released.append((target_id, execution_id))


def _release_all(ctx: Ctx, d: Decision, execution_id: str, reason: str) -> None:
    st = ctx.state
    held = [t for t in sorted(st.satisfies.get(execution_id, ())) if execution_id in st.targets[t].holders]
    end_attempt(ctx, st.executions[execution_id], reason)
    d.released.extend((t, execution_id) for t in held)


def _freeze_for_reconciliation(ctx: Ctx, runs: list[str], unknown: list[str], digest: str) -> None:

    for run_id in runs:
        cancel.freeze_run(ctx, run_id, f"reconciliation:{digest[:16]}")
    for m in unknown:
        cancel.open_reconciliation(ctx, ctx.state.executions[m], "deadlock_with_unknown_side_effect")
    ctx.state.bump("recovery.reconciliation")
    ctx.fx.append(RecoveryEscalated(digest=digest, reason="unknown_side_effect", run_ids=tuple(runs)))


def check_fence(state: State, execution_id: str, observed_epoch: int) -> None:
    """StaleEpoch: an execution rolled back at epoch e may not acquire presenting an older one."""
    fenced = state.recovery.fence.get(execution_id, 0)
    if observed_epoch < fenced:
        raise E.precondition(
            "stale_epoch",
            f"{execution_id} was rolled back at epoch {fenced}; it presented epoch {observed_epoch}",
            execution_id=execution_id,
            epoch=fenced,
        )
