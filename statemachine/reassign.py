"""Reassigning an approval trapped in a cycle, and the order of remedies (issue #21).

The first seed: "if the child still needs the parent's approval, the approval should be assigned to
an independent actor". A supervisor waits for its subtask while the subtask waits for an approval
the supervisor provides (PROVIDED_BY -> a member of the cycle): nobody in the cycle can ever give
it. When the run, or the cluster, names an independent approver (``SetApprover``: a ``human:`` id
or an ``exec:`` outside the run), recovery commits a REASSIGN decision instead of choosing a
victim. It goes through the same proposal, votes, confirmation window and second read as any
recovery; inside the commit the order is: epoch committed, decision recorded, then each trapped
approval's PROVIDED_BY moves to the approver (SatisfierClosed to the old provider,
SatisfierDeclared to the approver) and every wait on it is re-registered with its version bumped
(WaitRegistered to the waiter). No one is cancelled or released, no fence is set.

The order of remedies, recorded in every decision as (remedy, outcome, reason):
1. ``prevent``: a wait registered with ``refuse_deadlock`` is refused before it can close a cycle
   (detect.closing_path); a cycle that reached recovery was closed by a wait that did not ask.
2. ``reorder``: reordering a fair grant queue (issue #21 part 1); this branch has no queues.
3. ``reassign``: this module.
4. ``victim``: the victim policy, with the livelock tie-break, reconciliation and escalation as
   before (recovery.py).
The mode rules apply to each: in shadow (or auto-safe on a run not marked side-effect-free) a
reassignment is recorded as what would have been done, on a SHADOW decision, and nothing moves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import errors as E
from .commands import SetApprover
from .context import Ctx, missing_execution, missing_run, require_operator
from .detect import Candidate, wait_satisfiers
from .effects import ApproverChanged, SatisfierDeclared
from .enums import SETTLED, Relation
from .ids import Kind, id_kind, kind_of, validate_name
from .lifecycle import close_satisfier, open_edge, touch_waiters
from .outcome import Outcome, applied
from .recovery_state import Decision, DecisionKind, Reassignment
from .state import State

REMEDIES = ("prevent", "reorder", "reassign", "victim")
"""The order in which recovery considers the remedies; every decision lists each one."""

APPLIED = "applied"
SHADOWED = "shadowed"
"""It applies, but the mode only reports it."""
NOT_APPLICABLE = "not_applicable"
NOT_NEEDED = "not_needed"
"""An earlier remedy broke the cycle."""
REFUSED = "refused"
"""The victim policy declined to act (reconciliation, escalation)."""

APPROVER_KINDS = frozenset({Kind.HUMAN, Kind.EXEC})


# -- configuration ------------------------------------------------------------------------------


def set_approver(ctx: Ctx, cmd: SetApprover) -> Outcome:
    """Name (or with ``approver_id`` none, remove) the cluster's or one run's independent approver."""
    require_operator(ctx, "SetApprover")
    st, rb = ctx.state, ctx.state.recovery
    if cmd.run_id is not None:
        validate_name(cmd.run_id, "run_id")
        if cmd.run_id not in st.runs:
            raise missing_run(st, cmd.run_id)
    if cmd.approver_id is not None:
        kind = id_kind(cmd.approver_id, "approver_id", APPROVER_KINDS)
        if kind is Kind.EXEC:
            ex = st.executions.get(cmd.approver_id)
            if ex is None:
                raise missing_execution(st, cmd.approver_id, "approver ")
            if ex.status in SETTLED:
                raise E.precondition(
                    "approver_not_live",
                    f"{cmd.approver_id} is {ex.status.value}: it can no longer approve anything",
                    approver_id=cmd.approver_id,
                )
            if ex.run_id == cmd.run_id:
                raise E.precondition(
                    "approver_in_run",
                    f"{cmd.approver_id} is an execution of run {cmd.run_id}: an approver inside the run "
                    "can be trapped in the same cycle; name a human: id or an execution of another run",
                    approver_id=cmd.approver_id,
                    run_id=cmd.run_id,
                )
    if cmd.run_id is None:
        rb.approver = cmd.approver_id
    elif cmd.approver_id is None:
        rb.run_approvers.pop(cmd.run_id, None)
    else:
        rb.run_approvers[cmd.run_id] = cmd.approver_id
    return applied([ApproverChanged(run_id=cmd.run_id, approver_id=cmd.approver_id)])


# -- planning (a pure read of one state) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    moves: tuple[Reassignment, ...]
    """Empty: reassignment does not apply (``reason`` says why)."""
    reason: str


def plan(state: State, c: Candidate) -> Plan:
    """Which approvals of the (re-validated) candidate move, and to whom; or why none does.

    It applies when some wait of the cycle is on an approval whose provider is a member, every
    such approval has an independent approver (its waiters' runs', else the cluster's: the same
    one for every run of the cycle that waits on it) that is live, not a member and not of a
    waiter's run, and with those waits made external no candidate deadlock is left among the
    members. Otherwise nothing moves and the victim path
    decides, as before.
    """
    members = set(c.member_ids)
    trapped: dict[str, list[str]] = {}  # approval id -> the runs of the cycle's waiters that need it
    for eid, _ in c.edges:
        waiter, _, tid = eid.partition(">")
        if kind_of(tid) is Kind.APPROVAL and state.targets[tid].satisfier_id in members:
            runs = trapped.setdefault(tid, [])
            run_id = state.executions[waiter].run_id
            if run_id not in runs:
                runs.append(run_id)
    if not trapped:
        return Plan((), "no_approval_provided_inside_the_cycle")
    rb = state.recovery
    moves = []
    for tid in sorted(trapped):
        runs = trapped[tid]
        # Waiters of several runs: the approval moves only to an approver each of their runs
        # names (or falls back to), never to one run's approver over another run's wait.
        approvers = {rb.approver_for(run_id) for run_id in runs}
        if None in approvers:
            return Plan((), "no_independent_approver")
        if len(approvers) > 1:
            return Plan((), "approvers_disagree")
        (approver,) = approvers
        assert approver is not None
        if approver in members:
            return Plan((), "approver_in_cycle")
        generation = 0
        if kind_of(approver) is Kind.EXEC:
            ex = state.executions.get(approver)
            if ex is None or ex.status in SETTLED:
                return Plan((), "approver_not_live")
            if ex.run_id in runs:
                return Plan((), "approver_in_run")
            generation = ex.generation
        t = state.targets[tid]
        assert t.satisfier_id is not None
        moves.append(Reassignment(tid, t.satisfier_id, t.satisfier_generation, approver, generation))
    if _cycle_remains(state, c, set(trapped)):
        return Plan((), "cycle_remains_after_reassign")
    return Plan(tuple(moves), f"{len(moves)}_approval_to_independent_approver")


def _cycle_remains(state: State, c: Candidate, moved: set[str]) -> bool:
    """With the waits on ``moved`` external, is a candidate deadlock (docs/design.md §3's rule: each member
    has a wait whose satisfiers all lie in the set) still left among the members?"""
    waits: list[tuple[str, tuple[str, ...]]] = []
    for eid, _ in c.edges:
        waiter, _, tid = eid.partition(">")
        if tid in moved:
            continue
        edge = state.wait(waiter, tid)
        sats = wait_satisfiers(state, edge) if edge is not None else None
        if sats:
            waits.append((waiter, sats))
    alive = set(c.member_ids)
    while True:
        stuck = {w for w, sats in waits if w in alive and all(s in alive for s in sats)}
        if stuck == alive:
            return bool(alive)
        alive = stuck


# -- acting (inside CommitRecovery, after the epoch and the decision) -----------------------------


def apply(ctx: Ctx, d: Decision) -> None:
    """Move each approval of ``d.reassigned`` to its approver and tell both sides and the waiters."""
    st = ctx.state
    for r in d.reassigned:
        t = st.targets[r.approval_id]
        target_generation = t.satisfier_for
        close_satisfier(ctx, t, f"reassigned:{d.decision_id}")
        t.satisfier_id, t.satisfier_generation, t.satisfier_for = r.to_id, r.to_generation, target_generation
        if kind_of(r.to_id) is Kind.EXEC:
            st.add_satisfies(r.to_id, t.target_id)
        st.touch_target(t.target_id, ctx.now)
        touch_waiters(ctx, t.target_id)
        ctx.fx.append(
            SatisfierDeclared(
                target_id=t.target_id,
                target_generation=target_generation,
                relation=Relation.PROVIDED_BY,
                satisfier_id=r.to_id,
                satisfier_generation=r.to_generation,
            )
        )
        for edge in st.waits_on(t.target_id):
            ex = st.executions[edge.waiter_id]
            version = max(edge.edge_version, ex.edge_hwm.get(t.target_id, 0)) + 1
            st.remove_wait(edge)
            open_edge(ctx, ex, replace(edge, edge_version=version))


# -- the record --------------------------------------------------------------------------------


_VICTIM_STEP = {
    DecisionKind.VICTIM: APPLIED,
    DecisionKind.TIE_BREAK: APPLIED,
    DecisionKind.SHADOW: SHADOWED,
    DecisionKind.RECONCILIATION: REFUSED,
    DecisionKind.ESCALATION: REFUSED,
}


def remedy_log(p: Plan, kind: DecisionKind, reason: str, reordered: bool = False) -> list[tuple[str, str, str]]:
    """(remedy, outcome, reason) for each of :data:`REMEDIES`, for a decision of ``kind``;
    ``reordered``: a soft cycle, broken (or, in shadow, would be) by reordering its queues."""
    log = [("prevent", NOT_APPLICABLE, "closing_wait_did_not_ask_refuse_deadlock")]
    if reordered:
        log.append(("reorder", APPLIED if kind is DecisionKind.REORDER else SHADOWED, "soft_cycle"))
        log.append(("reassign", NOT_NEEDED, "reorder_breaks_the_cycle"))
        log.append(("victim", NOT_NEEDED, "reorder_breaks_the_cycle"))
        return log
    # a cycle of hard edges only (holders, producers, approvers): no queue order can break it
    log.append(("reorder", NOT_APPLICABLE, "hard_cycle"))
    if p.moves:
        log.append(("reassign", APPLIED if kind is DecisionKind.REASSIGN else SHADOWED, p.reason))
        log.append(("victim", NOT_NEEDED, "reassign_breaks_the_cycle"))
    else:
        log.append(("reassign", NOT_APPLICABLE, p.reason))
        log.append(("victim", _VICTIM_STEP[kind], reason))
    return log
