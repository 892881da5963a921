"""Retirement: settled work leaves the live state, so a replica's memory stays flat for months.

Rules kept here:
- One command, ``RetireSettled``, in the log: the leader's loop proposes it, every replica applies
  it to the same state at the same logical time and retires exactly the same records. Nothing is
  retired by a clock, a size or a node-local decision.
- A run retires when every execution of it is settled (``enums.SETTLED``), it holds nothing (no
  lease, permit, reservation, claim, tool call in flight), nothing open refers to it (no open
  proposal, cancel request, reconciliation item, frozen admission, wait on one of its
  executions) and it settled at least ``retention_ms`` ago. The run leaves whole: its executions,
  their cancellation scopes, queued compensations, epoch fences and mode overrides with it.
- A target retires once it is idle (nothing holds it, no wait is open on it, no execution is its
  satisfier and no outside one is still due) and nothing changed it for a retention: artifacts
  and approvals, and held kinds (resource, pool, reservation) never acquired. An acquired held
  target stays: its lease counter is a fencing token that must never repeat, and a target made
  afresh counts from 0. A retired target's tombstone answers ``retired``; ``CreateTarget`` makes
  the id again afresh, as agents name their artifacts by what they are.
- The other books retire by the same rule with their own references: a closed proposal once
  none of its members is live; a decision once its proposal and every member are gone; a
  livelock trajectory once no proposal or decision of its signature is live, the epoch has
  advanced past its last sighting and every sighting and rollback is older than both the
  retention and the guard's window (so the guard answers exactly as if it had kept it); an
  ended session once it owns no live execution and its lease ran out a retention ago.
- Each retired record leaves as one effect that carries all of it (``effects.ExecutionRetired``
  ...): the node's history store is written from those effects alone.
- A retired execution or run leaves a tombstone (id -> retired at) for one more retention: a
  command naming it is told ``retired`` with the time, and its id is not reused meanwhile. Then
  the tombstone is forgotten too, and the id is free.
- Counters stay cumulative; limits (``max_executions``...) count the live state only.
- Candidates are examined in (settled at, run id) order, oldest first, at most ``max_runs`` runs
  per pass; every other book is walked in log order. Nothing is iterated in hash order.
"""

from __future__ import annotations

import heapq

from . import errors as E
from .cancel import cancel_state, run_scope_id, victim_scope_id
from .commands import RetireSettled
from .context import Ctx, require_operator
from .effects import (
    DecisionRetired,
    ExecutionRetired,
    ProposalRetired,
    RetirementPassed,
    RunRetired,
    SessionRetired,
    TargetRetired,
    TrajectoryRetired,
)
from .enums import SessionStatus
from .outcome import Outcome, applied, noop
from .recovery_state import CycleWait, Decision, DecisionKind, ProposalStatus, Reassignment, RolloutMode, Score
from .state import Execution, Run, State, Target, settled_at, target_retirable

MIN_RETENTION_MS = 1_000
"""The shortest retention a pass accepts: below it a late ack or retry of work that just settled
would meet a tombstone instead of the record."""
MAX_RUNS_PER_PASS = 10_000
"""The most runs one pass may retire: one log entry's effects stay a bounded batch."""


def check_command(cmd: RetireSettled) -> None:
    if cmd.retention_ms < MIN_RETENTION_MS:
        raise E.invalid(
            "retention_too_short",
            f"retention_ms must be at least {MIN_RETENTION_MS}",
            minimum=MIN_RETENTION_MS,
        )
    if not 0 < cmd.max_runs <= MAX_RUNS_PER_PASS:
        raise E.invalid("bad_max_runs", f"max_runs must be 1..{MAX_RUNS_PER_PASS}")


def retire_settled(ctx: Ctx, cmd: RetireSettled) -> Outcome:
    require_operator(ctx, "RetireSettled")
    check_command(cmd)
    st = ctx.state
    cutoff = ctx.now - cmd.retention_ms
    forgotten = _forget_tombstones(st, cutoff)
    runs, executions, more = _retire_runs(ctx, cutoff, cmd.max_runs)
    targets, more_targets = _retire_targets(ctx, cutoff, cmd.max_runs)
    more = more or more_targets
    proposals = _retire_proposals(ctx, cutoff)
    decisions = _retire_decisions(ctx, cutoff)
    trajectories = _retire_trajectories(ctx, cutoff)
    sessions = _retire_sessions(ctx, cutoff)
    if not (forgotten or runs or targets or proposals or decisions or trajectories or sessions):
        return noop("nothing_due", f"nothing settled before {cutoff} ms is retirable")
    for name, n in (
        ("runs", runs),
        ("executions", executions),
        ("targets", targets),
        ("proposals", proposals),
        ("decisions", decisions),
        ("trajectories", trajectories),
        ("sessions", sessions),
        ("tombstones_forgotten", forgotten),
    ):
        if n:
            st.bump(f"retire.{name}", n)
    ctx.fx.append(
        RetirementPassed(
            cutoff_ms=cutoff,
            runs=runs,
            executions=executions,
            sessions=sessions,
            proposals=proposals,
            decisions=decisions,
            trajectories=trajectories,
            tombstones_forgotten=forgotten,
            more=more,
            targets=targets,
        )
    )
    return applied(ctx.fx)


def retire_due(st: State, now_ms: int, retention_ms: int) -> bool:
    """Whether a pass at logical ``now_ms`` would retire runs or forget tombstones (the leader's
    loop asks before proposing one, so an idle cluster writes nothing). The other books are
    swept by the same passes, and by the loop's periodic pass."""
    cutoff = now_ms - retention_ms
    if st.retire_queue and st.retire_queue[0][0] <= cutoff:
        return True
    if st.target_queue and st.target_queue[0][0] <= cutoff:
        return True  # perhaps only stale entries: the pass drops them, so it asks once
    return any(table and next(iter(table.values())) <= cutoff for table in _tombstones(st))


def _tombstones(st: State) -> tuple[dict[str, int], ...]:
    return st.retired_executions, st.retired_runs, st.retired_targets


# -- tombstones -----------------------------------------------------------------------------------


def _forget_tombstones(st: State, cutoff: int) -> int:
    """Drop tombstones made at or before ``cutoff``; each table is in retirement order."""
    forgotten = 0
    for table in _tombstones(st):
        while table:
            key = next(iter(table))
            if table[key] > cutoff:
                break
            del table[key]
            forgotten += 1
    return forgotten


# -- runs -----------------------------------------------------------------------------------------


def run_executions(st: State, run: Run) -> list[str]:
    """The run's executions, preorder from its root, children in creation (log) order."""
    out: list[str] = []
    stack = [run.root_id]
    while stack:
        eid = stack.pop()
        out.append(eid)
        stack.extend(reversed(st.executions[eid].children))
    return out


def held_back(st: State, run: Run, execution_ids: list[str]) -> str | None:
    """Why a settled run may not retire yet (what still refers to it or what it holds), or None."""
    book, rb = st.cancel, st.recovery
    if run.run_id in book.frozen_runs:
        return "admission_frozen"
    scope = book.scopes.get(run_scope_id(run.run_id))
    if scope is not None and (scope.pending or scope.stable_at_ms is None):
        return "cancelling"
    for eid in execution_ids:
        if eid in book.reconciliations:
            return "reconciliation"
        if eid in book.requests:
            return "cancel_request"
        if eid in book.claims:
            return "claim"
        if eid in book.tool_calls:
            return "tool_call"
        if eid in st.satisfies:
            return "holds"
        if eid in st.waits_by_waiter:
            return "waits"
        if st.waits_by_target.get(eid):
            return "waited_on"
        if eid in rb.open_members:
            return "open_proposal"
    return None


def _retire_runs(ctx: Ctx, cutoff: int, max_runs: int) -> tuple[int, int, bool]:
    """Retire up to ``max_runs`` runs due at ``cutoff``: (runs, executions, more are due)."""
    st = ctx.state
    queue, blocked = st.retire_queue, st.retire_blocked
    waiting = sorted(e for e in blocked if e[0] <= cutoff)
    i = runs = executions = 0
    while True:
        top = queue[0] if queue and queue[0][0] <= cutoff else None
        again = waiting[i] if i < len(waiting) else None
        if top is None and again is None:
            return runs, executions, False
        if again is None or (top is not None and top < again):
            entry, from_queue = heapq.heappop(queue), True
        else:
            entry, from_queue = again, False
            i += 1
        at_ms, run_id = entry
        run = st.runs.get(run_id)
        if run is None or run_id in st.open_by_run or settled_at(st.executions, run.root_id) != at_ms:
            blocked.discard(entry)  # stale: the run retired, or became unsettled again since
            continue
        ids = run_executions(st, run)
        if held_back(st, run, ids) is not None:
            blocked.add(entry)
            continue
        if runs >= max_runs:
            # Due, but this pass is full: put it back where it was and tell the loop.
            if from_queue:
                heapq.heappush(queue, entry)
            return runs, executions, True
        blocked.discard(entry)
        _retire_run(ctx, run, ids, at_ms)
        runs += 1
        executions += len(ids)


def _retire_run(ctx: Ctx, run: Run, execution_ids: list[str], settled_at_ms: int) -> None:
    st, now = ctx.state, ctx.now
    book, rb = st.cancel, st.recovery
    outcome = cancel_state(st, run.run_id)
    run_scope = book.scopes.pop(run_scope_id(run.run_id), None)
    for eid in execution_ids:
        ex = st.executions.pop(eid)
        ctx.fx.append(_execution_retired(st, ex, now))
        st.count_owned(ex.agent_id, -1)
        rb.fence.pop(eid, None)
        st.changed.pop(eid, None)
        for generation in range(1, ex.generation + 1):
            book.scopes.pop(victim_scope_id(eid, generation), None)
        st.retired_executions[eid] = now
    rb.run_modes.pop(run.run_id, None)
    rb.run_approvers.pop(run.run_id, None)
    rb.side_effect_free.discard(run.run_id)
    del st.runs[run.run_id]
    st.retired_runs[run.run_id] = now
    ctx.fx.append(
        RunRetired(
            run_id=run.run_id,
            root_id=run.root_id,
            executions=len(execution_ids),
            cancel_generation=run.cancel_generation,
            cancel_state=outcome,
            cancel_stable_at_ms=run_scope.stable_at_ms if run_scope is not None else None,
            settled_at_ms=settled_at_ms,
            retired_at_ms=now,
        )
    )


def _execution_retired(st: State, ex: Execution, now: int) -> ExecutionRetired:
    """The execution's whole record as an effect; its queued compensations leave with it."""
    effect_ids = sorted(ex.side_effects)
    ledger = [ex.side_effects[k] for k in effect_ids]
    compensations = st.cancel.compensations
    versions = []
    for effect_id in effect_ids:
        queued = compensations.pop((ex.execution_id, effect_id), None)
        versions.append(queued.version if queued is not None else 0)
    return ExecutionRetired(
        execution_id=ex.execution_id,
        run_id=ex.run_id,
        parent_id=ex.parent_id,
        agent_id=ex.agent_id,
        generation=ex.generation,
        status=ex.status,
        priority=ex.priority,
        cost_consumed=ex.cost_consumed,
        created_at_ms=ex.created_at_ms,
        settled_at_ms=ex.status_at_ms,
        retired_at_ms=now,
        effect_ids=tuple(effect_ids),
        effect_outcomes=tuple(se.outcome for se in ledger),
        effect_compensatable=tuple(se.compensatable for se in ledger),
        effect_generations=tuple(se.generation for se in ledger),
        compensation_versions=tuple(versions),
    )


# -- the recovery books -----------------------------------------------------------------------------


def _retire_proposals(ctx: Ctx, cutoff: int) -> int:
    st, rb = ctx.state, ctx.state.recovery
    gone = [
        p
        for p in rb.proposals.values()
        if p.status is not ProposalStatus.OPEN
        and p.closed_at_ms is not None
        and p.closed_at_ms <= cutoff
        and not any(m in st.executions for m, _ in p.members)
    ]
    for p in gone:
        del rb.proposals[p.digest]
        assert p.closed_at_ms is not None
        ctx.fx.append(
            ProposalRetired(
                digest=p.digest,
                signature=p.signature,
                proposal_status=p.status.value,
                decision_id=p.decision_id,
                proposer=p.proposer,
                proposed_at_ms=p.proposed_at_ms,
                closed_at_ms=p.closed_at_ms,
                close_reason=p.close_reason,
                member_ids=tuple(m for m, _ in p.members),
                member_generations=tuple(g for _, g in p.members),
                retired_at_ms=ctx.now,
            )
        )
    return len(gone)


def _retire_decisions(ctx: Ctx, cutoff: int) -> int:
    st, rb = ctx.state, ctx.state.recovery
    gone = [
        d
        for d in rb.decisions.values()
        if d.at_ms <= cutoff
        and d.digest not in rb.proposals
        and not any(s.execution_id in st.executions for s in d.scores)
        and not any(e in st.executions for e, _ in d.roles)
    ]
    for d in gone:
        del rb.decisions[d.decision_id]
        ctx.fx.append(decision_retired(d, ctx.now))
    return len(gone)


def decision_retired(d: Decision, now: int) -> DecisionRetired:
    """The whole decision as an effect (every candidate's score, roles, releases and votes)."""
    return DecisionRetired(
        decision_id=d.decision_id,
        digest=d.digest,
        signature=d.signature,
        policy_version=d.policy_version,
        decision_kind=d.kind.value,
        mode=d.mode.value,
        reason_code=d.reason_code,
        epoch=d.epoch,
        epoch_before=d.epoch_before,
        winner_id=d.winner_id,
        winner_generation=d.winner_generation,
        at_ms=d.at_ms,
        proposer=d.proposer,
        proposed_at_ms=d.proposed_at_ms,
        score_execution_ids=tuple(s.execution_id for s in d.scores),
        score_generations=tuple(s.generation for s in d.scores),
        score_external_side_effects=tuple(s.external_side_effects for s in d.scores),
        score_checkpoints=tuple(s.checkpoint for s in d.scores),
        score_priorities=tuple(s.priority for s in d.scores),
        score_costs=tuple(s.cost_consumed for s in d.scores),
        score_unique_evidence=tuple(s.unique_evidence for s in d.scores),
        role_execution_ids=tuple(e for e, _ in d.roles),
        roles=tuple(r for _, r in d.roles),
        released_target_ids=tuple(t for t, _ in d.released),
        released_execution_ids=tuple(e for _, e in d.released),
        voters=tuple(v for v, _, _ in d.votes),
        vote_approvals=tuple(ok for _, ok, _ in d.votes),
        vote_at_ms=tuple(at for _, _, at in d.votes),
        wait_waiter_ids=tuple(w.waiter_id for w in d.waits),
        wait_waiter_generations=tuple(w.waiter_generation for w in d.waits),
        wait_target_ids=tuple(w.target_id for w in d.waits),
        wait_target_generations=tuple(w.target_generation for w in d.waits),
        wait_edge_versions=tuple(w.edge_version for w in d.waits),
        wait_reasons=tuple(w.reason for w in d.waits),
        wait_registered_at_ms=tuple(w.registered_at_ms for w in d.waits),
        wait_satisfier_counts=tuple(len(w.satisfiers) for w in d.waits),
        wait_satisfiers=tuple(s for w in d.waits for s in w.satisfiers),
        retired_at_ms=now,
        remedy_names=tuple(r for r, _, _ in d.remedies),
        remedy_outcomes=tuple(o for _, o, _ in d.remedies),
        remedy_reasons=tuple(why for _, _, why in d.remedies),
        reassigned_approval_ids=tuple(r.approval_id for r in d.reassigned),
        reassigned_from_ids=tuple(r.from_id for r in d.reassigned),
        reassigned_from_generations=tuple(r.from_generation for r in d.reassigned),
        reassigned_to_ids=tuple(r.to_id for r in d.reassigned),
        reassigned_to_generations=tuple(r.to_generation for r in d.reassigned),
    )


def decision_from_retired(fx: DecisionRetired) -> Decision:
    """The decision record again, from its retirement effect (the history store's explain)."""
    satisfiers = iter(fx.wait_satisfiers)
    waits = [
        CycleWait(w, wg, t, tg, v, r, at, tuple(next(satisfiers) for _ in range(n)))
        for w, wg, t, tg, v, r, at, n in zip(
            fx.wait_waiter_ids,
            fx.wait_waiter_generations,
            fx.wait_target_ids,
            fx.wait_target_generations,
            fx.wait_edge_versions,
            fx.wait_reasons,
            fx.wait_registered_at_ms,
            fx.wait_satisfier_counts,
            strict=True,
        )
    ]
    scores = list(
        map(
            Score,
            fx.score_execution_ids,
            fx.score_generations,
            fx.score_external_side_effects,
            fx.score_checkpoints,
            fx.score_priorities,
            fx.score_costs,
            fx.score_unique_evidence,
        )
    )
    return Decision(
        fx.decision_id,
        fx.digest,
        fx.signature,
        fx.policy_version,
        DecisionKind(fx.decision_kind),
        RolloutMode(fx.mode),
        fx.reason_code,
        fx.epoch,
        fx.winner_id,
        fx.winner_generation,
        scores,
        list(zip(fx.role_execution_ids, fx.roles, strict=True)),
        list(zip(fx.released_target_ids, fx.released_execution_ids, strict=True)),
        fx.at_ms,
        fx.epoch_before,
        fx.proposer,
        fx.proposed_at_ms,
        list(zip(fx.voters, fx.vote_approvals, fx.vote_at_ms, strict=True)),
        waits,
        list(zip(fx.remedy_names, fx.remedy_outcomes, fx.remedy_reasons, strict=True)),
        list(
            map(
                Reassignment,
                fx.reassigned_approval_ids,
                fx.reassigned_from_ids,
                fx.reassigned_from_generations,
                fx.reassigned_to_ids,
                fx.reassigned_to_generations,
            )
        ),
    )


def _retire_trajectories(ctx: Ctx, cutoff: int) -> int:
    rb = ctx.state.recovery
    if not rb.trajectory:
        return 0
    live = {p.signature for p in rb.proposals.values()} | {d.signature for d in rb.decisions.values()}
    # The guard looks back over its window (K rollbacks within W ms) and at the epoch of the last
    # sighting (the same signature again without an epoch advance): a trajectory is forgotten
    # only when neither could still fire for it.
    horizon = min(cutoff, ctx.now - rb.config.livelock_window_ms)
    gone = []
    for sig, t in rb.trajectory.items():
        if sig in live or not t.observations or t.observations[-1][0] >= rb.epoch:
            continue
        last_ms = max(at for _, at in [*t.observations, *t.recoveries])
        if last_ms <= horizon:
            gone.append((sig, t, last_ms))
    for sig, t, last_ms in gone:
        del rb.trajectory[sig]
        first = t.first_seen
        ctx.fx.append(
            TrajectoryRetired(
                signature=sig,
                observed_total=t.observed_total,
                recovered_total=t.recovered_total,
                first_seen_epoch=first[0] if first is not None else None,
                first_seen_at_ms=first[1] if first is not None else None,
                last_seen_at_ms=last_ms,
                retired_at_ms=ctx.now,
            )
        )
    return len(gone)


# -- targets --------------------------------------------------------------------------------------


def _retire_targets(ctx: Ctx, cutoff: int, max_targets: int) -> tuple[int, bool]:
    """Retire up to ``max_targets`` targets idle and untouched since ``cutoff``, oldest change
    first: (targets retired, more are due). Stale queue entries are dropped on the way."""
    st = ctx.state
    queue, retired = st.target_queue, 0
    while queue and queue[0][0] <= cutoff:
        at_ms, target_id = queue[0]
        t = st.targets.get(target_id)
        if t is None or t.touched_ms != at_ms or not target_retirable(st, t):
            heapq.heappop(queue)  # changed since, gone, or in use: a later change pushes again
            continue
        if retired >= max_targets:
            return retired, True
        heapq.heappop(queue)
        _retire_target(ctx, t)
        retired += 1
    return retired, False


def _retire_target(ctx: Ctx, t: Target) -> None:
    st = ctx.state
    del st.targets[t.target_id]
    st.retired_targets[t.target_id] = ctx.now
    ctx.fx.append(
        TargetRetired(
            target_id=t.target_id,
            slots=t.slots,
            version=t.version,
            approved=t.approved,
            satisfier_id=t.satisfier_id,
            touched_at_ms=t.touched_ms,
            retired_at_ms=ctx.now,
        )
    )


# -- sessions -------------------------------------------------------------------------------------


def _retire_sessions(ctx: Ctx, cutoff: int) -> int:
    st = ctx.state
    gone = sorted(
        agent_id
        for agent_id, s in st.sessions.items()
        if s.status is not SessionStatus.ACTIVE and s.expires_at_ms <= cutoff and agent_id not in st.owned_by_agent
    )
    for agent_id in gone:
        s = st.sessions.pop(agent_id)
        ctx.fx.append(
            SessionRetired(
                agent_id=agent_id,
                incarnation=s.incarnation,
                status=s.status,
                expires_at_ms=s.expires_at_ms,
                retired_at_ms=ctx.now,
            )
        )
    return len(gone)
