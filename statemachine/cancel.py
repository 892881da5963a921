"""Cancellation is a protocol, not a boolean (docs/design.md §5; the seed's "Cancellation Is a Protocol").

Rules kept here:
- A run's monotonic ``cancel_generation`` is the truth; ``CancelRequested.v1`` effects only wake
  things up. Child creation, activation (``StartExecution``), claim and renew, tool-call
  acceptance and the canonical commit (``CompleteExecution``) carry the cancel generation the
  caller observed, a required field: an older one is FAILED_PRECONDITION
  ``cancel_generation_mismatch``, and once a run is cancelled nothing new is admitted
  (``run_cancelled``), so a child created after the enumeration can never start or claim.
- Cancellation forbids new attempts of the run (retry, claim takeover); claim *expiry* allows one
  (a higher generation takes over, and the old attempt's late commit finds itself superseded).
- An execution is settled when it is in ``enums.SETTLED``; a scope (a whole run, or a recovery
  victim's subtree) is CANCELLED_STABLE when no execution of it is still asked to stop, and
  every settled member holds no permit, lease, reservation or claim (``end_attempt`` released
  them on the way; anything found still held is released and counted as leaked).
- Committed side effects are facts: never deleted. A compensatable committed write gets one
  versioned compensation, queued after its commit is recorded. UNKNOWN goes to
  NEEDS_RECONCILIATION with a reconciliation item.
- As in machine.py: check first, mutate after; iterate in sorted or log order, never hash order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import errors as E
from . import telemetry
from .cancel_state import CancelRequest, CancelScope, Claim, Compensation, Reconciliation, ToolCall
from .commands import (
    AcceptToolCall,
    AckCancel,
    CancelRun,
    ClaimTask,
    ConfigureCancellation,
    CreateExecution,
    FreezeAdmission,
    ReemitCancels,
    Release,
    ReleaseQuarantine,
    RenewClaim,
    UnfreezeAdmission,
)
from .context import (
    Ctx,
    check_current,
    check_nonneg,
    check_open_execution_room,
    check_reason,
    later,
    missing_execution,
    missing_run,
    owned_execution,
    require_operator,
    require_session,
)
from .effects import (
    AdmissionChanged,
    CancelAcknowledged,
    CancelGenerationRaised,
    CancellationConfigured,
    CancellationStable,
    CancelRequested,
    CancelSloExceeded,
    ClaimRenewed,
    CompensationQueued,
    QuarantineReleased,
    ReconciliationOpened,
    ResourceQuarantined,
    SideEffectRecorded,
    TaskClaimed,
    ToolCallAccepted,
)
from .enums import SETTLED, CancelState, EffectOutcome, ExecStatus
from .ids import ActorKind, Kind, id_kind, validate_name
from .lifecycle import (
    TRANSITIONS,
    Event,
    check_live,
    end_attempt,
    new_attempt,
    next_status,
    release_claim,
    release_holding,
    set_status,
)
from .outcome import Outcome, applied, noop
from .state import Execution, SideEffect, State, collector_paused

S = ExecStatus

EXPORT_FORMAT = "waitgraph-pending"
EXPORT_VERSION = 1

HISTOGRAM_BOUNDS_MS = (10, 100, 1_000, 10_000, 60_000, 600_000)
"""Upper bounds of the logical-ms histograms (``cancel.propagation_ms``, ``cancel.quiescence_ms``).

Buckets are not cumulative: ``<name>.le_<bound>`` counts observations in (previous bound, bound],
``<name>.le_inf`` the rest; ``<name>.count`` and ``<name>.sum_ms`` complete the histogram. The key
set is fixed, so the counters stay bounded however many executions are cancelled."""

_CAUSE_BY_ACTOR = {ActorKind.OPERATOR: "operator", ActorKind.AGENT: "parent", ActorKind.NODE: "recovery"}


def run_scope_id(run_id: str) -> str:
    return f"run:{run_id}"


def victim_scope_id(execution_id: str, generation: int) -> str:
    return f"{execution_id}@{generation}"


# -- the fence ----------------------------------------------------------------------------------


def _fence(st: State, run_id: str, observed: int, action: str) -> None:
    """Refuse an action whose caller observed another cancel generation, or any action at all
    in a cancelled run: the run's cancel generation is the truth, whatever events were missed."""
    check_nonneg(observed, "observed_cancel_generation")
    run = st.runs.get(run_id)
    current = run.cancel_generation if run is not None else 0
    if observed > current:
        raise E.invalid(
            "future_cancel_generation",
            f"run {run_id} is at cancel generation {current}; {observed} does not exist yet",
            run_id=run_id,
            observed=observed,
            current=current,
        )
    if observed < current:
        raise E.precondition(
            "cancel_generation_mismatch",
            f"run {run_id} is at cancel generation {current}; the caller observed {observed} and may not {action}",
            run_id=run_id,
            observed=observed,
            current=current,
        )
    if current > 0:
        raise E.precondition(
            "run_cancelled",
            f"run {run_id} is cancelled (cancel generation {current}); it may not {action}",
            run_id=run_id,
            current=current,
        )


def _admission(st: State, run_id: str | None, action: str) -> None:
    """Refuse a new delegation (child creation, claim) while admission is frozen."""
    book = st.cancel
    if book.cluster_frozen is not None:
        raise E.precondition(
            "admission_frozen",
            f"admission is frozen for the cluster ({book.cluster_frozen}); cannot {action}",
            scope="cluster",
        )
    if run_id is not None and run_id in book.frozen_runs:
        raise E.precondition(
            "admission_frozen",
            f"admission is frozen for run {run_id} ({book.frozen_runs[run_id]}); cannot {action}",
            scope=run_id,
        )


def _check_claim(ctx: Ctx, ex: Execution, action: str) -> None:
    """A claimed attempt is acted on only by its claimant, and only while the claim is live."""
    claim = ctx.state.cancel.claims.get(ex.execution_id)
    agent = ctx.agent_id
    if claim is None or agent is None:
        return
    if claim.agent_id != agent:
        raise E.denied(
            "not_claimant",
            f"{ex.execution_id} g{claim.generation} is claimed by {claim.agent_id}",
            execution_id=ex.execution_id,
        )
    if ctx.now >= claim.expires_at_ms:
        raise E.precondition(
            "claim_expired",
            f"the claim on {ex.execution_id} g{claim.generation} expired at {claim.expires_at_ms}; "
            f"it may not {action} (a new claim takes over at a higher generation)",
            execution_id=ex.execution_id,
            expires_at_ms=claim.expires_at_ms,
        )


def admit_creation(ctx: Ctx, cmd: CreateExecution) -> None:
    """Fence for ``CreateExecution``; machine.py's handler does the rest."""
    st = ctx.state
    if cmd.parent_id is None:
        _admission(st, None, "create a run")
    else:
        _admission(st, cmd.run_id, "create a child execution")
    _fence(st, cmd.run_id, cmd.observed_cancel_generation, "create an execution")


def fence_execution(ctx: Ctx, execution_id: str, generation: int, observed: int, action: str) -> None:
    """Fence for activation and the canonical commit: the run's cancel generation, then the claim.

    An unknown execution is left to machine.py's handler to report; an older generation too (its
    rule: a late finish of an old attempt is a recorded no-op that changes nothing).
    """
    ex = ctx.state.executions.get(execution_id)
    if ex is None:
        return
    _fence(ctx.state, ex.run_id, observed, action)
    if generation == ex.generation:
        _check_claim(ctx, ex, action)


def check_retry(ctx: Ctx, execution_id: str) -> None:
    """Cancellation forbids any new attempt of the run (a rolled-back victim of a live run may retry)."""
    ex = ctx.state.executions.get(execution_id)
    if ex is None:
        return
    run = ctx.state.runs[ex.run_id]
    if run.cancel_generation > 0:
        raise E.precondition(
            "run_cancelled",
            f"run {ex.run_id} is cancelled (cancel generation {run.cancel_generation}); it gets no new attempts",
            run_id=ex.run_id,
            current=run.cancel_generation,
        )


def check_release(ctx: Ctx, cmd: Release) -> None:
    """A quarantined execution's resources stay isolated until an operator releases the quarantine."""
    ex = ctx.state.executions.get(cmd.execution_id)
    if ex is not None and ex.status is S.QUARANTINED and ctx.actor_kind is ActorKind.AGENT:
        raise E.precondition(
            "quarantined",
            f"{ex.execution_id} is QUARANTINED; its resources are released only with ReleaseQuarantine",
            execution_id=ex.execution_id,
        )


# -- cascades used by machine.py -----------------------------------------------------------------


def forget_tool_call(st: State, execution_id: str, effect_id: str) -> None:
    """Part of ``RecordSideEffect``: a tool call whose outcome is recorded is no longer in flight."""
    calls = st.cancel.tool_calls.get(execution_id)
    if calls is not None and calls.pop(effect_id, None) is not None and not calls:
        del st.cancel.tool_calls[execution_id]


def on_session_expired(ctx: Ctx, agent_id: str) -> None:
    """An agent that stopped heartbeating: what its executions had in flight is now UNKNOWN.

    Their cancel requests stay open (unacknowledged): the re-emission pass keeps asking, a
    restarted worker (or an operator) can still acknowledge, and the SLO quarantines the rest.
    """
    st = ctx.state
    for eid in sorted(st.cancel.tool_calls):
        ex = st.executions[eid]
        if ex.agent_id == agent_id:
            _resolve_in_flight(ctx, ex, EffectOutcome.UNKNOWN, "session_expired")


def _resolve_in_flight(ctx: Ctx, ex: Execution, outcome: EffectOutcome, source: str) -> None:
    """Record every accepted tool call of ``ex`` that has no recorded outcome as ``outcome``
    (``source``: the bounded code of what resolved them, a metrics label)."""
    st = ctx.state
    calls = st.cancel.tool_calls.pop(ex.execution_id, None)
    if not calls:
        return
    for effect_id in sorted(calls):
        call = calls[effect_id]
        ex.side_effects[effect_id] = SideEffect(outcome, call.compensatable, call.generation)
        ctx.fx.append(
            SideEffectRecorded(
                execution_id=ex.execution_id,
                generation=call.generation,
                effect_id=effect_id,
                outcome=outcome,
                compensatable=call.compensatable,
            )
        )
        if outcome is EffectOutcome.UNKNOWN:
            st.bump("cancel.side_effects_unknown")
            count_unknown(st, source, call.generation)


# -- requesting cancellation ---------------------------------------------------------------------


def _subtree(st: State, root_id: str) -> list[str]:
    """``root_id`` and its descendants, preorder, children in creation order (log order)."""
    out: list[str] = []
    stack = [root_id]
    executions = st.executions
    while stack:
        eid = stack.pop()
        out.append(eid)
        children = executions[eid].children
        if children:
            stack.extend(reversed(children))
    return out


def _request_subtree(ctx: Ctx, scope: CancelScope) -> None:
    """Ask every unsettled execution of the scope's subtree to stop at its cancel generation:
    CANCEL_REQUESTED (the table's CANCEL row), an open request, one CancelRequested.v1 each.

    The hot path of CancelRun: linear in the subtree, locals instead of attribute lookups, and the
    cyclic collector paused (the effects and records made here form no cycles, and on a large
    state each full collection it would trigger walks every object of the replica).
    """
    with collector_paused():
        _request_each(ctx, scope)
    if not scope.pending:
        _stabilize(ctx, scope)


def _request_each(ctx: Ctx, scope: CancelScope) -> None:
    st = ctx.state
    book = st.cancel
    executions, requests, pending, fx = st.executions, book.requests, scope.pending, ctx.fx
    now, sid, cgen, reason = ctx.now, scope.scope_id, scope.cancel_generation, scope.reason
    only_this = (sid,)  # shared by every new request of this scope
    slo_due, reemit_due = book.slo_due.at(now), book.reemit_due.at(now)
    # The table's CANCEL column, read once: status -> next status.
    cancel_row = {status: nxt for (status, event), nxt in TRANSITIONS.items() if event is Event.CANCEL}
    requested = 0
    stack = [scope.root_id]  # preorder, children in creation order, as _subtree
    while stack:
        eid = stack.pop()
        ex = executions[eid]
        if ex.children:
            stack.extend(reversed(ex.children))
        nxt = cancel_row.get(ex.status)
        if nxt is None:
            if ex.status in SETTLED:
                continue
            # Every unsettled status has a row; a status added without one is a bug.
            raise E.InvariantViolation(f"{eid} is {ex.status.value} and has no cancel transition")
        set_status(ctx, ex, nxt, "cancel_requested")
        req = requests.get(eid)
        if req is None:
            req = CancelRequest(eid, scope.run_id, ex.generation, cgen, reason, now, now, 1, only_this)
            requests[eid] = req
            slo_due.append(eid)
        else:
            if sid not in req.scopes:
                req.scopes += (sid,)
            if req.cancel_generation == cgen:
                req.emissions += 1
            else:
                req.cancel_generation, req.emissions = cgen, 1
            req.reason, req.emitted_at_ms = reason, now
        reemit_due.append(eid)
        pending.add(eid)
        requested += 1
        fx.append(
            CancelRequested(
                run_id=scope.run_id,
                execution_id=eid,
                generation=ex.generation,
                cancel_generation=cgen,
                reason=reason,
                emission=req.emissions,
            )
        )
    st.bump("cancel.requested", requested)


def cancel_run(ctx: Ctx, cmd: CancelRun) -> Outcome:
    """Raise the run's cancel generation and ask every unsettled execution of it to stop."""
    st = ctx.state
    validate_name(cmd.run_id, "run_id")
    check_reason(ctx, cmd.reason)
    run = st.runs.get(cmd.run_id)
    if run is None:
        raise missing_run(st, cmd.run_id)
    agent = ctx.agent_id
    if agent is not None:
        require_session(ctx)
        if st.executions[run.root_id].agent_id != agent:
            raise E.denied(
                "not_owner", f"run {cmd.run_id} is cancelled by its root's agent, an operator or a cluster node"
            )
    current = run.cancel_generation
    if cmd.observed_cancel_generation > current:
        raise E.invalid(
            "future_cancel_generation",
            f"run {cmd.run_id} is at cancel generation {current}; {cmd.observed_cancel_generation} does not exist yet",
        )
    if cmd.observed_cancel_generation < current:
        return noop(
            "already_raised",
            f"run {cmd.run_id} is already at cancel generation {current} (observed {cmd.observed_cancel_generation})",
        )
    run.cancel_generation = current + 1
    cause = _CAUSE_BY_ACTOR[ctx.actor_kind]
    ctx.fx.append(
        CancelGenerationRaised(
            run_id=run.run_id, before=current, after=run.cancel_generation, reason=cmd.reason, cause=cause
        )
    )
    sid = run_scope_id(run.run_id)
    scope = st.cancel.scopes.get(sid)
    if scope is None:
        scope = CancelScope(sid, run.run_id, run.root_id, 1, cause, cmd.reason, run.cancel_generation, ctx.now)
        st.cancel.scopes[sid] = scope
    else:
        # A re-raise: the time new calls started being refused (and, for a run that already
        # converged, the time it did) stay the first raise's.
        scope.cause, scope.reason, scope.cancel_generation = cause, cmd.reason, run.cancel_generation
    _request_subtree(ctx, scope)
    return applied(ctx.fx)


def cancel_subtree(ctx: Ctx, execution: Execution, reason: str, cause: str) -> CancelScope:
    """Cancel a deadlock victim's current attempt and every unsettled descendant (recovery's step).

    The caller has already moved ``execution`` WAITING -> CANCELLING (its CAS at the generation)
    and releases its holdings afterwards with ``lifecycle.end_attempt``. This emits
    ``CancelRequested.v1`` for the victim and each descendant and tracks their acks like
    ``CancelRun`` does; the run's cancel generation is not raised, so the victim may later be
    retried at a new generation (unless its run gets cancelled).
    """
    run = ctx.state.runs[execution.run_id]
    sid = victim_scope_id(execution.execution_id, execution.generation)
    scope = ctx.state.cancel.scopes.get(sid)
    if scope is None:
        scope = CancelScope(
            sid, run.run_id, execution.execution_id, execution.generation, cause, reason, run.cancel_generation, ctx.now
        )
        ctx.state.cancel.scopes[sid] = scope
    _request_subtree(ctx, scope)
    return scope


# -- acknowledging, quarantine, convergence ------------------------------------------------------


def _observe(st: State, name: str, value_ms: int, cause: str, generation: int) -> None:
    bucket = next((f"le_{b}" for b in HISTOGRAM_BOUNDS_MS if value_ms <= b), "le_inf")
    st.bump(f"{name}.{bucket}")
    st.bump(f"{name}.count")
    st.bump(f"{name}.sum_ms", value_ms)
    telemetry.observe(
        st, name, value_ms, HISTOGRAM_BOUNDS_MS, cause=cause, generation=telemetry.generation_bucket(generation)
    )


def count_unknown(st: State, source: str, generation: int) -> None:
    """A side effect became UNKNOWN: count it by what made it so and by its generation bucket."""
    telemetry.bump(st, "cancel.side_effects_unknown", source=source, generation=telemetry.generation_bucket(generation))


def _queue_compensations(ctx: Ctx, ex: Execution) -> None:
    """One compensation per committed compensatable write, queued after the commit is recorded."""
    book = ctx.state.cancel
    for effect_id in sorted(ex.side_effects):
        se = ex.side_effects[effect_id]
        key = (ex.execution_id, effect_id)
        if se.outcome is EffectOutcome.COMMITTED and se.compensatable and key not in book.compensations:
            book.compensations[key] = Compensation(ex.execution_id, effect_id, se.generation, 1, ctx.now)
            ctx.fx.append(
                CompensationQueued(
                    execution_id=ex.execution_id, effect_id=effect_id, generation=se.generation, version=1
                )
            )


def _settle(ctx: Ctx, ex: Execution, req: CancelRequest, settled: Event, cause: str, end_reason: str) -> None:
    """The execution stopped: CANCELLED (``settled``), or NEEDS_RECONCILIATION if anything it did
    is UNKNOWN. Its attempt ends (waits closed, holdings and claim released) in the same apply."""
    st = ctx.state
    unknown = any(se.outcome is EffectOutcome.UNKNOWN for se in ex.side_effects.values())
    nxt = next_status(ex, Event.RECONCILE if unknown else settled)
    _queue_compensations(ctx, ex)
    end_attempt(ctx, ex, end_reason)
    set_status(ctx, ex, nxt, cause)
    if unknown:
        open_reconciliation(ctx, ex, cause)
    del st.cancel.requests[ex.execution_id]
    for sid in req.scopes:
        scope = st.cancel.scopes[sid]
        scope.pending.discard(ex.execution_id)
        if not scope.pending and scope.stable_at_ms is None:
            _stabilize(ctx, scope)


def open_reconciliation(ctx: Ctx, ex: Execution, cause: str) -> None:
    """Open a human reconciliation item for the UNKNOWN side effects of ``ex`` (once per attempt).

    Used when a cancelled execution settles with UNKNOWN effects, and by recovery when a deadlock
    holds an UNKNOWN non-cancellable side effect (the worker is then left alone, not cancelled).
    """
    item = ctx.state.cancel.reconciliations.get(ex.execution_id)
    if item is not None and item.generation == ex.generation:
        return
    unknown = sorted(k for k, se in ex.side_effects.items() if se.outcome is EffectOutcome.UNKNOWN)
    ctx.state.cancel.reconciliations[ex.execution_id] = Reconciliation(
        ex.execution_id, ex.generation, ex.run_id, cause, ctx.now, unknown
    )
    ctx.state.bump("cancel.reconciliations")
    ctx.fx.append(
        ReconciliationOpened(
            execution_id=ex.execution_id,
            generation=ex.generation,
            run_id=ex.run_id,
            unknown_effects=len(unknown),
            cause=cause,
        )
    )


def _stabilize(ctx: Ctx, scope: CancelScope) -> None:
    """No member is asked to stop any more: check (and, if a bug left any, release and count)
    the holdings of its settled members, then declare the scope CANCELLED_STABLE."""
    st = ctx.state
    leaked = 0
    for eid in _subtree(st, scope.root_id):
        if st.executions[eid].status not in SETTLED:
            continue  # a rolled-back victim retried at a new generation: not part of this cancel
        for target_id in sorted(st.satisfies.get(eid, ())):
            t = st.targets[target_id]
            if eid in t.holders:
                release_holding(ctx, t, eid, "leaked")
                leaked += 1
        if eid in st.cancel.claims:
            release_claim(ctx, eid, "leaked")
            leaked += 1
    if leaked:
        st.bump("cancel.leaked_permits", leaked)
        telemetry.bump(
            st,
            "cancel.leaked_permits",
            leaked,
            cause=scope.cause,
            generation=telemetry.generation_bucket(scope.root_generation),
        )
    if scope.stable_at_ms is None:
        scope.stable_at_ms = ctx.now
        _observe(st, "cancel.quiescence_ms", ctx.now - scope.requested_at_ms, scope.cause, scope.root_generation)
    quiescence_ms = scope.stable_at_ms - scope.requested_at_ms
    ctx.fx.append(
        CancellationStable(
            scope_id=scope.scope_id,
            run_id=scope.run_id,
            root_id=scope.root_id,
            cancel_generation=scope.cancel_generation,
            quiescence_ms=quiescence_ms,
            leaked=leaked,
        )
    )


def ack_cancel(ctx: Ctx, cmd: AckCancel) -> Outcome:
    """The execution stopped; ``side_effects`` is the outcome of its tool calls still in flight
    (record known outcomes one by one with RecordSideEffect first)."""
    st = ctx.state
    ex = owned_execution(ctx, cmd.execution_id)
    if cmd.generation < ex.generation:
        return noop("stale_generation", f"g{cmd.generation} of {ex.execution_id} is an old attempt")
    check_current(ex, cmd.generation)
    req = st.cancel.requests.get(ex.execution_id)
    if req is None:
        if ex.status in SETTLED:
            return noop("already_settled", f"{ex.execution_id} is already {ex.status.value}")
        raise E.precondition(
            "not_cancel_requested",
            f"{ex.execution_id} is {ex.status.value}; nothing asked it to stop",
            execution_id=ex.execution_id,
        )
    if cmd.cancel_generation < req.cancel_generation:
        return noop(
            "stale_cancel_generation",
            f"{ex.execution_id} is asked to stop at cancel generation {req.cancel_generation}, "
            f"not {cmd.cancel_generation}",
        )
    if cmd.cancel_generation > req.cancel_generation:
        raise E.invalid(
            "future_cancel_generation",
            f"{ex.execution_id} is asked to stop at cancel generation {req.cancel_generation}",
        )
    if req.acked is not None:
        return noop("already_acknowledged", f"{ex.execution_id} acknowledged; it stays QUARANTINED until released")
    propagation_ms = ctx.now - req.requested_at_ms
    # The request's first scope is the cancellation that asked first: its cause labels the wait.
    _observe(st, "cancel.propagation_ms", propagation_ms, st.cancel.scopes[req.scopes[0]].cause, req.generation)
    st.bump("cancel.acknowledged")
    _resolve_in_flight(ctx, ex, cmd.side_effects, "cancel_ack")
    ctx.fx.append(
        CancelAcknowledged(
            execution_id=ex.execution_id,
            generation=ex.generation,
            cancel_generation=req.cancel_generation,
            side_effects=cmd.side_effects,
            propagation_ms=propagation_ms,
        )
    )
    if ex.status is S.QUARANTINED:
        # Too late: the facts are recorded, but its resources stay isolated until an operator
        # releases the quarantine.
        req.acked = cmd.side_effects
    else:
        _settle(ctx, ex, req, Event.CANCEL_ACK, "cancel_acknowledged", "cancelled")
    return applied(ctx.fx)


def _quarantine(ctx: Ctx, ex: Execution, req: CancelRequest) -> None:
    st = ctx.state
    set_status(ctx, ex, next_status(ex, Event.QUARANTINE), "cancel_slo_exceeded")
    req.quarantined_at_ms = ctx.now
    st.bump("cancel.quarantined")
    ctx.fx.append(
        CancelSloExceeded(
            run_id=ex.run_id,
            execution_id=ex.execution_id,
            generation=ex.generation,
            requested_at_ms=req.requested_at_ms,
            slo_ms=st.cancel.slo_ms,
        )
    )
    for target_id in sorted(st.satisfies.get(ex.execution_id, ())):
        t = st.targets[target_id]
        if ex.execution_id in t.holders:
            ctx.fx.append(
                ResourceQuarantined(
                    target_id=target_id, execution_id=ex.execution_id, generation=ex.generation, lease=t.version
                )
            )


def reemit_cancels(ctx: Ctx, cmd: ReemitCancels) -> Outcome:
    """The leader's periodic convergence pass: quarantine what is past the cancellation SLO, then
    ask again every execution that has not acknowledged its cancel generation for an interval."""
    require_operator(ctx, "ReemitCancels")
    if not 0 < cmd.max_emissions <= 1_000_000:
        raise E.invalid("bad_max_emissions", "max_emissions must be 1..1000000")
    st = ctx.state
    book = st.cancel
    requests = book.requests
    # Past the SLO: quarantine every one of them, in (first request, id) order.
    while (due := book.slo_due.first_due(ctx.now - book.slo_ms)) is not None:
        requested_at, bucket = due
        for eid in bucket:
            req = requests.get(eid)
            if req is not None and req.requested_at_ms == requested_at and req.quarantined_at_ms is None:
                _quarantine(ctx, st.executions[eid], req)
        bucket.clear()
    # Ask again, in (latest emission, id) order, at most max_emissions; the rest wait for the next pass.
    budget = cmd.max_emissions
    while budget and (due := book.reemit_due.first_due(ctx.now - book.reemit_interval_ms)) is not None:
        emitted_at, bucket = due
        seen = 0
        for eid in bucket:
            if not budget:
                break
            seen += 1
            req = requests.get(eid)
            if req is None or req.emitted_at_ms != emitted_at:
                continue  # settled, or asked again since
            req.emissions += 1
            req.emitted_at_ms = ctx.now
            book.reemit_due.add(ctx.now, eid)
            budget -= 1
            ctx.fx.append(
                CancelRequested(
                    run_id=req.run_id,
                    execution_id=eid,
                    generation=req.generation,
                    cancel_generation=req.cancel_generation,
                    reason=req.reason,
                    emission=req.emissions,
                )
            )
        del bucket[:seen]
    if budget < cmd.max_emissions:
        st.bump("cancel.reemitted", cmd.max_emissions - budget)
    return applied(ctx.fx)


def release_quarantine(ctx: Ctx, cmd: ReleaseQuarantine) -> Outcome:
    """An operator has isolated what the quarantined execution touched: settle it and hand its
    resources back. ``side_effects`` is what the operator established for its calls still in flight."""
    require_operator(ctx, "ReleaseQuarantine")
    ex = owned_execution(ctx, cmd.execution_id)
    check_reason(ctx, cmd.reason)
    check_current(ex, cmd.generation)
    if ex.status is not S.QUARANTINED:
        raise E.precondition(
            "not_quarantined", f"{ex.execution_id} is {ex.status.value}, not QUARANTINED", execution_id=ex.execution_id
        )
    req = ctx.state.cancel.requests[ex.execution_id]
    _resolve_in_flight(ctx, ex, cmd.side_effects, "quarantine_release")
    ctx.fx.append(QuarantineReleased(execution_id=ex.execution_id, generation=ex.generation, reason=cmd.reason))
    _settle(ctx, ex, req, Event.RELEASE_QUARANTINE, "quarantine_released", "quarantine_released")
    return applied(ctx.fx)


# -- claims and tool calls ----------------------------------------------------------------------


def _execution(ctx: Ctx, execution_id: str) -> Execution:
    id_kind(execution_id, "execution_id", frozenset({Kind.EXEC}))
    ex = ctx.state.executions.get(execution_id)
    if ex is None:
        raise missing_execution(ctx.state, execution_id)
    return ex


def _claimant(ctx: Ctx) -> str:
    agent = ctx.agent_id
    if agent is None:
        raise E.denied("agents_only", "a task is claimed by the agent that runs it, not by an operator or node")
    require_session(ctx)
    return agent


def claim_task(ctx: Ctx, cmd: ClaimTask) -> Outcome:
    """Claim the execution's current attempt for ``lease_ms`` of logical time.

    An unclaimed execution is claimed by its own agent. An expired claim may be taken over by any
    agent: the old attempt ends and the claim is made at generation + 1, so the old worker, if it
    comes back, finds its generation superseded and can never commit.
    """
    st = ctx.state
    ex = _execution(ctx, cmd.execution_id)
    agent = _claimant(ctx)
    if not 0 < cmd.lease_ms <= st.limits.max_lease_ms:
        raise E.invalid("bad_lease", f"lease_ms must be 1..{st.limits.max_lease_ms}")
    _admission(st, ex.run_id, "claim a task")
    _fence(st, ex.run_id, cmd.observed_cancel_generation, "claim a task")
    check_current(ex, cmd.generation)
    check_live(ex, "be claimed")
    claim = st.cancel.claims.get(ex.execution_id)
    took_over = claim is not None
    if claim is not None and ctx.now < claim.expires_at_ms:
        if claim.agent_id == agent:
            return noop("already_claimed", f"{agent} already claims {ex.execution_id} g{ex.generation}")
        raise E.aborted(
            "claimed",
            f"{ex.execution_id} g{ex.generation} is claimed by {claim.agent_id} until {claim.expires_at_ms}",
            execution_id=ex.execution_id,
            holder=claim.agent_id,
            expires_at_ms=claim.expires_at_ms,
        )
    if claim is None and ex.agent_id != agent:
        raise E.denied(
            "not_owner",
            f"{ex.execution_id} belongs to {ex.agent_id}; another agent may only take over an expired claim",
            execution_id=ex.execution_id,
        )
    if took_over and agent != ex.agent_id:
        check_open_execution_room(st, agent)
    if took_over:
        # The old worker is presumed gone: what its attempt had in flight is UNKNOWN until someone
        # records what really happened (UNKNOWN -> COMMITTED / NONE stay allowed).
        _resolve_in_flight(ctx, ex, EffectOutcome.UNKNOWN, "claim_taken_over")
        new_attempt(ctx, ex, next_status(ex, Event.RETRY), "claim_taken_over", "claim_expired")
        # The open execution changes hands; its attempt ended above, so it has no open wait to move.
        st.count_open_execution(ex.agent_id, -1)
        st.count_open_execution(agent, 1)
        st.count_owned(ex.agent_id, -1)
        st.count_owned(agent, 1)
        ex.agent_id = agent
    expires = later(ctx.now, cmd.lease_ms)
    st.cancel.claims[ex.execution_id] = Claim(agent, ex.generation, cmd.lease_ms, expires, ctx.now)
    ctx.fx.append(
        TaskClaimed(
            execution_id=ex.execution_id,
            generation=ex.generation,
            agent_id=agent,
            expires_at_ms=expires,
            took_over=took_over,
        )
    )
    return applied(ctx.fx)


def renew_claim(ctx: Ctx, cmd: RenewClaim) -> Outcome:
    """Extend a live claim by its lease; an expired, superseded or cancelled claim is not renewed."""
    st = ctx.state
    ex = _execution(ctx, cmd.execution_id)
    agent = _claimant(ctx)
    _fence(st, ex.run_id, cmd.observed_cancel_generation, "renew a claim")
    check_current(ex, cmd.generation)
    claim = st.cancel.claims.get(ex.execution_id)
    if claim is None or claim.agent_id != agent:
        raise E.precondition(
            "not_claimed", f"{agent} holds no claim on {ex.execution_id} g{ex.generation}", execution_id=ex.execution_id
        )
    _check_claim(ctx, ex, "renew it")
    check_live(ex, "renew its claim")
    claim.expires_at_ms = later(ctx.now, claim.lease_ms)
    return applied(
        [
            ClaimRenewed(
                execution_id=ex.execution_id,
                generation=ex.generation,
                agent_id=agent,
                expires_at_ms=claim.expires_at_ms,
            )
        ]
    )


def accept_tool_call(ctx: Ctx, cmd: AcceptToolCall) -> Outcome:
    """Admit one tool call of a RUNNING attempt; it stays in flight until its outcome is recorded
    (RecordSideEffect, the cancel ack, or UNKNOWN when the agent's session expires)."""
    st = ctx.state
    ex = owned_execution(ctx, cmd.execution_id, generation=cmd.generation)
    validate_name(cmd.effect_id, "effect_id")
    _fence(st, ex.run_id, cmd.observed_cancel_generation, "accept a tool call")
    check_current(ex, cmd.generation)
    _check_claim(ctx, ex, "accept a tool call")
    if ex.status is not S.RUNNING:
        raise E.precondition(
            "not_running",
            f"{ex.execution_id} is {ex.status.value}; only a RUNNING attempt starts tool calls",
            execution_id=ex.execution_id,
            state=ex.status.value,
        )
    calls = st.cancel.tool_calls.get(ex.execution_id, {})
    if cmd.effect_id in calls:
        return noop("already_accepted", f"{cmd.effect_id} of {ex.execution_id} is already in flight")
    if cmd.effect_id in ex.side_effects:
        raise E.exists(
            "side_effect_recorded", f"{cmd.effect_id} of {ex.execution_id} is already recorded", effect_id=cmd.effect_id
        )
    if len(calls) + len(ex.side_effects) >= st.limits.max_side_effects_per_execution:
        raise E.exhausted("too_many_side_effects", f"{ex.execution_id} has too many side effects")
    st.cancel.tool_calls.setdefault(ex.execution_id, {})[cmd.effect_id] = ToolCall(
        ex.generation, cmd.compensatable, ctx.now
    )
    return applied(
        [
            ToolCallAccepted(
                execution_id=ex.execution_id,
                generation=ex.generation,
                effect_id=cmd.effect_id,
                compensatable=cmd.compensatable,
            )
        ]
    )


# -- admission and configuration ------------------------------------------------------------------


def freeze_admission(ctx: Ctx, cmd: FreezeAdmission) -> Outcome:
    """Stop new delegations (child creation, claims) for one run or, without ``run_id``, the cluster.

    Nothing already admitted is touched: the graph is never cleared as a shortcut.
    """
    require_operator(ctx, "FreezeAdmission")
    check_reason(ctx, cmd.reason)
    book = ctx.state.cancel
    if cmd.run_id is None:
        if book.cluster_frozen == cmd.reason:
            return noop("already_frozen", "admission is already frozen for the cluster")
        book.cluster_frozen = cmd.reason
    else:
        _known_run(ctx, cmd.run_id)
        if book.frozen_runs.get(cmd.run_id) == cmd.reason:
            return noop("already_frozen", f"admission is already frozen for run {cmd.run_id}")
        freeze_run(ctx, cmd.run_id, cmd.reason)
        return applied(ctx.fx)
    ctx.state.bump("cancel.admission_frozen")
    return applied([AdmissionChanged(run_id=None, frozen=True, reason=cmd.reason)])


def freeze_run(ctx: Ctx, run_id: str, reason: str) -> None:
    """Freeze one run's admission inside an apply (FreezeAdmission; recovery's escalation)."""
    book = ctx.state.cancel
    if book.frozen_runs.get(run_id) == reason:
        return
    book.frozen_runs[run_id] = reason
    ctx.state.bump("cancel.admission_frozen")
    ctx.fx.append(AdmissionChanged(run_id=run_id, frozen=True, reason=reason))


def unfreeze_admission(ctx: Ctx, cmd: UnfreezeAdmission) -> Outcome:
    require_operator(ctx, "UnfreezeAdmission")
    check_reason(ctx, cmd.reason)
    book = ctx.state.cancel
    if cmd.run_id is None:
        if book.cluster_frozen is None:
            return noop("not_frozen", "admission is not frozen for the cluster")
        book.cluster_frozen = None
    else:
        _known_run(ctx, cmd.run_id)
        if book.frozen_runs.pop(cmd.run_id, None) is None:
            return noop("not_frozen", f"admission is not frozen for run {cmd.run_id}")
    return applied([AdmissionChanged(run_id=cmd.run_id, frozen=False, reason=cmd.reason)])


def _known_run(ctx: Ctx, run_id: str) -> None:
    validate_name(run_id, "run_id")
    if run_id not in ctx.state.runs:
        raise missing_run(ctx.state, run_id)


def configure(ctx: Ctx, cmd: ConfigureCancellation) -> Outcome:
    require_operator(ctx, "ConfigureCancellation")
    limit = ctx.state.limits.max_lease_ms
    if not 0 < cmd.slo_ms <= limit:
        raise E.invalid("bad_slo", f"slo_ms must be 1..{limit}")
    if not 0 < cmd.reemit_interval_ms <= cmd.slo_ms:
        raise E.invalid("bad_reemit_interval", "reemit_interval_ms must be 1..slo_ms")
    book = ctx.state.cancel
    if (book.slo_ms, book.reemit_interval_ms) == (cmd.slo_ms, cmd.reemit_interval_ms):
        return noop("unchanged", "the cancellation settings are already these")
    book.slo_ms, book.reemit_interval_ms = cmd.slo_ms, cmd.reemit_interval_ms
    return applied([CancellationConfigured(slo_ms=cmd.slo_ms, reemit_interval_ms=cmd.reemit_interval_ms)])


# -- pure read functions (the cluster and the metrics call these) ---------------------------------


def cancel_state(st: State, run_id: str) -> CancelState:
    """NOT_CANCELLED, CANCELLING or CANCELLED_STABLE for a run."""
    run = st.runs[run_id]
    if run.cancel_generation == 0:
        return CancelState.NOT_CANCELLED
    scope = st.cancel.scopes[run_scope_id(run_id)]
    return CancelState.CANCELLED_STABLE if scope.stable_at_ms is not None else CancelState.CANCELLING


def metrics(st: State) -> dict[str, int]:
    """Gauges of the protocol; the counters (``cancel.*`` in ``State.counters``) complement them.

    ``unknown_side_effects`` scans every ledger once (linear in executions): call it per scrape,
    not per command.
    """
    book = st.cancel
    return {
        "admission_frozen_runs": len(book.frozen_runs),
        "admission_frozen_cluster": int(book.cluster_frozen is not None),
        "claims_held": len(book.claims),
        "compensations_queued": len(book.compensations),
        "leaked_permits": st.counters.get("cancel.leaked_permits", 0),
        "open_cancellations": sum(1 for s in book.scopes.values() if s.stable_at_ms is None),
        "pending_acks": len(book.requests),
        "quarantined": sum(1 for r in book.requests.values() if r.quarantined_at_ms is not None),
        "reconciliations_open": len(book.reconciliations),
        "tool_calls_in_flight": sum(len(c) for c in book.tool_calls.values()),
        "unknown_side_effects": sum(
            1 for ex in st.executions.values() for se in ex.side_effects.values() if se.outcome is EffectOutcome.UNKNOWN
        ),
    }


def export_pending(st: State) -> dict[str, Any]:
    """Pending edges and open cancellations as one versioned document (before a schema rollback).

    Pure: reads the state, changes nothing. Everything is sorted, so equal states export equal
    documents. Open wait edges use wait-edge.v1 field names.
    """
    book = st.cancel
    edges = [
        {
            "waiterExecution": e.waiter_id,
            "waiterGeneration": e.waiter_generation,
            "targetId": e.target_id,
            "targetGeneration": e.target_generation,
            "reason": e.reason,
            "deadline": e.deadline_ms,
            "cancelMode": e.cancel_mode.value,
            "edgeVersion": e.edge_version,
        }
        for w in sorted(st.waits_by_waiter)
        for e in st.waits_of(w)
    ]
    holdings = [
        {"targetId": tid, "lease": t.version, "holder": h, "holderGeneration": g}
        for tid, t in sorted(st.targets.items())
        for h, g in sorted(t.holders.items())
    ]
    claims = [
        {"execution": e, "generation": c.generation, "agent": c.agent_id, "expiresAtMs": c.expires_at_ms}
        for e, c in sorted(book.claims.items())
    ]
    cancellations = []
    for sid, scope in sorted(book.scopes.items()):
        if scope.stable_at_ms is not None:
            continue
        pending = []
        for eid in sorted(scope.pending):
            req = book.requests[eid]
            pending.append(
                {
                    "execution": eid,
                    "generation": req.generation,
                    "status": st.executions[eid].status.value,
                    "cancelGeneration": req.cancel_generation,
                    "requestedAtMs": req.requested_at_ms,
                    "emissions": req.emissions,
                    "quarantinedAtMs": req.quarantined_at_ms,
                }
            )
        cancellations.append(
            {
                "scope": sid,
                "run": scope.run_id,
                "root": scope.root_id,
                "cause": scope.cause,
                "reason": scope.reason,
                "cancelGeneration": scope.cancel_generation,
                "requestedAtMs": scope.requested_at_ms,
                "pending": pending,
            }
        )
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "atMs": st.now_ms,
        "admission": {
            "clusterFrozen": book.cluster_frozen,
            "frozenRuns": [{"run": r, "reason": reason} for r, reason in sorted(book.frozen_runs.items())],
        },
        "edges": edges,
        "holdings": holdings,
        "claims": claims,
        "cancellations": cancellations,
        "reconciliations": [
            {"execution": e, "generation": r.generation, "run": r.run_id, "effects": r.effect_ids}
            for e, r in sorted(book.reconciliations.items())
        ],
    }


MAX_LISTED_QUARANTINED = 100


@dataclass(frozen=True, slots=True)
class Convergence:
    """How far cancellation has converged, for one run or (``run_id`` None) the whole cluster."""

    run_id: str | None
    cancel_generation: int
    cancel_state: CancelState | None
    executions: int
    """With a run: its root's subtree (what a run cancellation asks to stop)."""
    settled: int
    unsettled: dict[str, int]
    """Unsettled executions by status: of the run's subtree, or (cluster) of the open requests."""
    open_cancellations: int
    pending_acks: int
    quarantined: tuple[str, ...]
    """Pending executions past the SLO, sorted, at most :data:`MAX_LISTED_QUARANTINED`."""
    admission_frozen: bool
    admission_reason: str
    converged: bool
    """No cancellation is open (of the run, or anywhere)."""


def convergence(st: State, run_id: str | None = None) -> Convergence:
    """Counts for an operator waiting on ``cancel --wait`` or ``freeze --wait``. Pure; linear in
    the run's subtree and the open cancellations, so it is cheap enough to poll."""
    book = st.cancel
    if run_id is not None:
        validate_name(run_id, "run_id")
        run = st.runs.get(run_id)
        if run is None:
            raise missing_run(st, run_id)
        members = [st.executions[e] for e in _subtree(st, run.root_id)]
        unsettled = [ex for ex in members if ex.status not in SETTLED]
        scopes = [s for s in book.scopes.values() if s.run_id == run_id and s.stable_at_ms is None]
        requests = [r for r in book.requests.values() if r.run_id == run_id]
        frozen = book.frozen_runs.get(run_id) or book.cluster_frozen
        generation, state = run.cancel_generation, cancel_state(st, run_id)
    else:
        members = []
        scopes = [s for s in book.scopes.values() if s.stable_at_ms is None]
        requests = list(book.requests.values())
        unsettled = [st.executions[r.execution_id] for r in requests]
        frozen, generation, state = book.cluster_frozen, 0, None
    by_status: dict[str, int] = {}
    for ex in unsettled:
        by_status[ex.status.value] = by_status.get(ex.status.value, 0) + 1
    quarantined = sorted(r.execution_id for r in requests if r.quarantined_at_ms is not None)
    return Convergence(
        run_id=run_id,
        cancel_generation=generation,
        cancel_state=state,
        executions=len(members),
        settled=len(members) - len(unsettled) if run_id is not None else 0,
        unsettled=dict(sorted(by_status.items())),
        open_cancellations=len(scopes),
        pending_acks=len(requests),
        quarantined=tuple(quarantined[:MAX_LISTED_QUARANTINED]),
        admission_frozen=frozen is not None,
        admission_reason=frozen or "",
        converged=not scopes,
    )
