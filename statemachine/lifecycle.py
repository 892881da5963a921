"""The execution lifecycle as a table, and the cascades that move executions along it.

Rules kept here:
- :data:`TRANSITIONS` is the whole lifecycle: (state, event) -> next state; a missing pair is a
  typed ``illegal_transition`` rejection naming both.
- The cascades (:func:`set_status`, :func:`close_wait`, :func:`release_holding`,
  :func:`end_attempt`, ...) run only after every check of a command has passed and cannot be
  rejected; whatever they iterate to emit effects, they iterate in sorted order.
"""

from __future__ import annotations

import heapq
from enum import StrEnum

from . import errors as E
from . import queues as Q
from .context import Ctx, later
from .effects import (
    Acquired,
    ClaimReleased,
    ExecutionStateChanged,
    GenerationAdvanced,
    Released,
    SatisfierClosed,
    WaitClosed,
    WaitRegistered,
)
from .enums import SETTLED, ExecStatus
from .ids import Kind
from .state import Execution, Target, WaitEdge


class Event(StrEnum):
    """What moves an execution; named after the command (or cascade) that causes it."""

    START = "StartExecution"
    BLOCK = "RegisterWait"
    RESUME = "ResumeExecution"
    WAITS_CLEARED = "WaitsCleared"
    COMPLETE = "CompleteExecution"
    FAIL = "FailExecution"
    RETRY = "RetryExecution"
    CANCEL = "CancelRun"
    CANCEL_ACK = "AckCancel"
    RECONCILE = "SideEffectsUnknown"
    QUARANTINE = "CancelSloExceeded"
    RELEASE_QUARANTINE = "ReleaseQuarantine"
    VICTIM = "CommitRecovery"
    """A recovery decision's CAS: only a WAITING execution can be a deadlock victim."""


S = ExecStatus


TRANSITIONS: dict[tuple[ExecStatus, Event], ExecStatus] = {
    (S.PENDING, Event.START): S.RUNNING,
    (S.PENDING, Event.BLOCK): S.WAITING,
    (S.RUNNING, Event.BLOCK): S.WAITING,
    (S.WAITING, Event.BLOCK): S.WAITING,
    (S.WAITING, Event.RESUME): S.RUNNING,
    (S.WAITING, Event.WAITS_CLEARED): S.RUNNING,
    (S.WAITING, Event.VICTIM): S.CANCELLING,
    (S.RUNNING, Event.COMPLETE): S.COMPLETED,
    (S.WAITING, Event.COMPLETE): S.COMPLETED,
    (S.PENDING, Event.FAIL): S.FAILED,
    (S.RUNNING, Event.FAIL): S.FAILED,
    (S.WAITING, Event.FAIL): S.FAILED,
    (S.PENDING, Event.RETRY): S.PENDING,
    (S.RUNNING, Event.RETRY): S.PENDING,
    (S.WAITING, Event.RETRY): S.PENDING,
    (S.FAILED, Event.RETRY): S.PENDING,
    # Cancellation (statemachine/cancel.py): asked to stop, then settled by the execution's ack, by
    # the SLO (quarantine) and an operator's release; anything UNKNOWN goes to reconciliation.
    (S.PENDING, Event.CANCEL): S.CANCEL_REQUESTED,
    (S.RUNNING, Event.CANCEL): S.CANCEL_REQUESTED,
    (S.WAITING, Event.CANCEL): S.CANCEL_REQUESTED,
    (S.CANCEL_REQUESTED, Event.CANCEL): S.CANCEL_REQUESTED,
    (S.CANCELLING, Event.CANCEL): S.CANCELLING,
    (S.QUARANTINED, Event.CANCEL): S.QUARANTINED,
    (S.CANCEL_REQUESTED, Event.CANCEL_ACK): S.CANCELLED,
    (S.CANCELLING, Event.CANCEL_ACK): S.CANCELLED,
    (S.CANCEL_REQUESTED, Event.RECONCILE): S.NEEDS_RECONCILIATION,
    (S.CANCELLING, Event.RECONCILE): S.NEEDS_RECONCILIATION,
    (S.QUARANTINED, Event.RECONCILE): S.NEEDS_RECONCILIATION,
    (S.CANCEL_REQUESTED, Event.QUARANTINE): S.QUARANTINED,
    (S.CANCELLING, Event.QUARANTINE): S.QUARANTINED,
    (S.QUARANTINED, Event.RELEASE_QUARANTINE): S.CANCELLED,
    (S.CANCELLED, Event.RETRY): S.PENDING,
}
"""(state, event) -> next state. A missing pair is an illegal transition."""


LIVE = frozenset({S.PENDING, S.RUNNING, S.WAITING})
"""States in which an execution may acquire, wait, and be waited for."""


def next_status(ex: Execution, event: Event) -> ExecStatus:
    nxt = TRANSITIONS.get((ex.status, event))
    if nxt is None:
        raise E.precondition(
            "illegal_transition",
            f"{ex.execution_id} is {ex.status.value}; {event.value} is not allowed there",
            execution_id=ex.execution_id,
            state=ex.status.value,
            command=event.value,
        )
    return nxt


def check_live(ex: Execution, what: str) -> None:
    if ex.status not in LIVE:
        raise E.precondition(
            "not_live",
            f"{ex.execution_id} is {ex.status.value}; it cannot {what}",
            execution_id=ex.execution_id,
            state=ex.status.value,
        )


def set_status(ctx: Ctx, ex: Execution, nxt: ExecStatus, cause: str) -> None:
    if ex.status is nxt:
        return
    ctx.fx.append(
        ExecutionStateChanged(
            execution_id=ex.execution_id, generation=ex.generation, before=ex.status, after=nxt, cause=cause
        )
    )
    st = ctx.state
    was_settled, settles = ex.status in SETTLED, nxt in SETTLED
    if was_settled is not settles:
        st.count_open_execution(ex.agent_id, 1 if was_settled else -1)
        st.count_open_in_run(ex.run_id, 1 if was_settled else -1, ctx.now)
    elif settles and ex.run_id not in st.open_by_run:
        # A settled execution changed its settled state: the run's settle time moves with it.
        heapq.heappush(st.retire_queue, (ctx.now, ex.run_id))
    ex.status = nxt
    ex.status_at_ms = ctx.now
    ctx.state.touch(ex.execution_id)


def open_edge(ctx: Ctx, ex: Execution, edge: WaitEdge, priority: int = 0, lease_ttl_ms: int = 0) -> None:
    """Add a checked edge of ``ex``'s current attempt (an agent's RegisterWait, or an edge the
    coordinator registers itself, like a tie-break loser waiting behind the winner); ``priority``
    places a wait on a resource or pool in its queue, and ``lease_ttl_ms`` is the TTL of the grant
    a hand-off gives it."""
    ctx.state.add_wait(edge, priority, lease_ttl_ms)
    ex.edge_hwm[edge.target_id] = edge.edge_version
    ctx.state.touch(ex.execution_id)
    ctx.state.touch_target(edge.target_id, ctx.now)
    ctx.fx.append(
        WaitRegistered(
            edge_id=edge.edge_id,
            waiter_generation=edge.waiter_generation,
            target_generation=edge.target_generation,
            edge_version=edge.edge_version,
            deadline_ms=edge.deadline_ms,
            cancel_mode=edge.cancel_mode,
        )
    )


def close_wait(ctx: Ctx, edge: WaitEdge, reason: str, wake: bool = True, lease: int | None = None) -> None:
    """Close one edge; with ``wake`` a waiter whose last wait closed goes WAITING -> RUNNING.
    ``lease``: the waiter was handed the target at that lease (:func:`hand_off`)."""
    st = ctx.state
    st.remove_wait(edge)
    st.touch(edge.waiter_id)
    st.touch_target(edge.target_id, ctx.now)
    ctx.fx.append(
        WaitClosed(
            edge_id=edge.edge_id,
            waiter_generation=edge.waiter_generation,
            edge_version=edge.edge_version,
            reason=reason,
            lease=lease,
        )
    )
    waiter = st.executions[edge.waiter_id]
    if wake and waiter.status is S.WAITING and edge.waiter_id not in st.waits_by_waiter:
        set_status(ctx, waiter, TRANSITIONS[(S.WAITING, Event.WAITS_CLEARED)], "waits_cleared")


def wake_waiters(ctx: Ctx, target_id: str, reason: str, up_to: int | None = None) -> None:
    """Close the waits a target event resolves (all, or those for generations <= ``up_to``)."""
    for edge in ctx.state.waits_on(target_id):
        if up_to is None or edge.target_generation <= up_to:
            close_wait(ctx, edge, reason)


def touch_waiters(ctx: Ctx, target_id: str) -> None:
    """The target's satisfiers changed: its waiters' wait-for edges changed with them."""
    for edge in ctx.state.waits_on(target_id):
        ctx.state.touch(edge.waiter_id)


def release_holding(ctx: Ctx, t: Target, execution_id: str, reason: str) -> None:
    """End a holding, however it ends (Release, TTL, attempt over, recovery): hand the capacity on."""
    st = ctx.state
    gen = t.holders.pop(execution_id)
    st.drop_lease_ttl(t.target_id, execution_id)
    st.drop_satisfies(execution_id, t.target_id)
    st.touch_target(t.target_id, ctx.now)
    ctx.fx.append(
        Released(target_id=t.target_id, execution_id=execution_id, generation=gen, lease=t.version, reason=reason)
    )
    if t.kind in Q.QUEUED_KINDS:
        hand_off(ctx, t, execution_id)
    else:
        wake_waiters(ctx, t.target_id, "target_released")


def grant(ctx: Ctx, t: Target, ex: Execution, ttl_ms: int = 0) -> int:
    """``ex`` holds ``t`` from now at the next lease (an Acquire's or a hand-off's grant); with
    ``ttl_ms`` the holding ends by itself that long after this grant (:func:`expire_leases`)."""
    st = ctx.state
    t.version += 1
    t.holders[ex.execution_id] = ex.generation
    if ttl_ms:
        st.set_lease_ttl(t.target_id, ex.execution_id, ex.generation, t.version, later(ctx.now, ttl_ms))
    st.add_satisfies(ex.execution_id, t.target_id)
    st.touch_target(t.target_id, ctx.now)
    touch_waiters(ctx, t.target_id)
    ctx.fx.append(
        Acquired(target_id=t.target_id, execution_id=ex.execution_id, generation=ex.generation, lease=t.version)
    )
    return t.version


def hand_off(ctx: Ctx, t: Target, released_by: str) -> None:
    """A resource or pool has free capacity: grant it to the head(s) of its queue in this apply.

    Each grantee's wait closes with reason ``granted`` and the lease, so its agent holds the target
    without another round trip. An entry whose execution may not hold now (asked to stop, yielding
    to a tie-break winner, already a holder of this pool, or ``released_by``, which has just let
    it go) keeps its place and is passed by. When capacity is left over and nobody
    queued can take it, the rest are woken as before (a wait on a free target would dangle). The
    waits left on an exclusive resource now wait for the new lease: their ``target_generation``
    follows it, so each stays a hard edge to the new holder.
    """
    st = ctx.state
    executions = st.executions

    def eligible(waiter_id: str) -> bool:
        ex = executions[waiter_id]
        if ex.status not in LIVE or waiter_id in t.holders or waiter_id == released_by:
            return False
        # a tie-break loser yields: nothing is handed to it while it waits behind the winner
        return not any(e.reason == Q.YIELD_REASON and e.target_id.startswith("exec:") for e in st.waits_of(waiter_id))

    while len(t.holders) < t.slots:
        entry = Q.grantable(st.queues, t.target_id, eligible)
        if entry is None:
            break
        ex = executions[entry.waiter_id]
        edge = st.wait(entry.waiter_id, t.target_id)
        assert edge is not None, "a queue entry is an open wait"
        lease = grant(ctx, t, ex, entry.lease_ttl_ms)
        close_wait(ctx, edge, Q.GRANTED, lease=lease)
    if len(t.holders) < t.slots:
        wake_waiters(ctx, t.target_id, "target_released")
    elif t.kind is Kind.RESOURCE:
        for edge in st.waits_on(t.target_id):
            if edge.target_generation != t.version:
                edge.target_generation = t.version
                st.touch(edge.waiter_id)


TTL_EXPIRED = "ttl_expired"
"""The reason of a Released that a lease's TTL caused (``Acquire.ttl_ms``)."""


def expire_leases(ctx: Ctx) -> None:
    """Part of ``Tick``: release every holding whose TTL is up by ``now``, as a Release would.

    Fenced: a heap entry acts only while its record still names the same lease (so the same
    holder@generation, whose holding has not ended since: an ended holding drops its record, a new
    grant writes a new lease). A QUARANTINED holder keeps what it holds: quarantine isolates its
    context until an operator's ReleaseQuarantine, and a TTL does not hand it out before that (the
    TTL is spent: counted ``lease_ttl.kept_quarantined`` and dropped).
    """
    st = ctx.state
    heap = st.ttl_expiry
    while heap and heap[0][0] <= ctx.now:
        expires, target_id, execution_id, lease = heapq.heappop(heap)
        record = st.lease_ttls.get(target_id, {}).get(execution_id)
        if record is None or record[0] != expires or record[2] != lease:
            continue
        t = st.targets[target_id]
        if t.holders.get(execution_id) != record[1]:
            continue
        if st.executions[execution_id].status is S.QUARANTINED:
            st.drop_lease_ttl(target_id, execution_id)  # the TTL is spent; ReleaseQuarantine releases
            st.bump("lease_ttl.kept_quarantined")
            continue
        st.bump("lease_ttl.expired")
        release_holding(ctx, t, execution_id, TTL_EXPIRED)


def close_satisfier(ctx: Ctx, t: Target, reason: str) -> None:
    assert t.satisfier_id is not None
    if t.satisfier_id.startswith("exec:"):
        ctx.state.drop_satisfies(t.satisfier_id, t.target_id)
    ctx.fx.append(
        SatisfierClosed(
            target_id=t.target_id,
            satisfier_id=t.satisfier_id,
            satisfier_generation=t.satisfier_generation,
            reason=reason,
        )
    )
    t.satisfier_id, t.satisfier_generation, t.satisfier_for = None, 0, 0
    ctx.state.touch_target(t.target_id, ctx.now)
    touch_waiters(ctx, t.target_id)


def end_attempt(ctx: Ctx, ex: Execution, reason: str) -> None:
    """The current attempt is over (finished, failed or superseded): close everything it had.

    Its own waits close, its holdings are released (waking their waiters), satisfier edges that
    name it close, and waits on ``exec:<it>`` at this generation close.
    """
    st = ctx.state
    # No wake-up: the attempt moves straight to its next state (WAITING -> COMPLETED, not via
    # RUNNING), so the effects show the transition the table names.
    for edge in st.waits_of(ex.execution_id):
        close_wait(ctx, edge, reason, wake=False)
    for target_id in sorted(st.satisfies.get(ex.execution_id, ())):
        t = st.targets[target_id]
        if ex.execution_id in t.holders:
            release_holding(ctx, t, ex.execution_id, reason)
        if t.satisfier_id == ex.execution_id:
            close_satisfier(ctx, t, reason)
    for edge in st.waits_on(ex.execution_id):
        if edge.target_generation <= ex.generation:
            close_wait(ctx, edge, "target_" + reason)
    release_claim(ctx, ex.execution_id, reason)


def new_attempt(ctx: Ctx, ex: Execution, nxt: ExecStatus, cause: str, end_reason: str = "generation_changed") -> None:
    """End the current attempt and start generation + 1 in state ``nxt`` (a retry, a claim takeover)."""
    end_attempt(ctx, ex, end_reason)
    before = ex.generation
    ex.generation += 1
    # Edge versions count per generation (``Execution.edge_hwm``): cleared here, when the generation
    # changes, and not when an attempt merely ends, so that a late close or re-register of an
    # edge the finished attempt had is still recognised as stale (a no-op, not "never registered").
    ex.edge_hwm.clear()
    ctx.fx.append(GenerationAdvanced(execution_id=ex.execution_id, before=before, after=ex.generation))
    if ex.status is nxt:
        ctx.state.touch(ex.execution_id)
    set_status(ctx, ex, nxt, cause)


def release_claim(ctx: Ctx, execution_id: str, reason: str) -> None:
    """Part of :func:`end_attempt`: an attempt that is over holds no claim."""
    claim = ctx.state.cancel.claims.pop(execution_id, None)
    if claim is not None:
        ctx.fx.append(
            ClaimReleased(
                execution_id=execution_id, generation=claim.generation, agent_id=claim.agent_id, reason=reason
            )
        )
