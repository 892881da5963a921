"""apply(envelope) -> Outcome: the one deterministic transition function.

Rules kept here:
- Every handler checks first and mutates after: a rejection is raised only before the first
  mutation, so a rejected command changes nothing. Cascades (closing edges, releasing holdings)
  run after all checks and cannot be rejected.
- Logical time only: ``now = max(state.now_ms, envelope.at_ms)``; no clock is ever read.
- Whatever is iterated to produce effects is iterated in sorted order, never in hash order.
- Closes and updates that name an older generation or edge version are recorded no-ops: a late
  message from an old attempt never deletes a newer edge. Actions (acquire, register, start)
  under an older generation are rejected with FAILED_PRECONDITION.
- A repeated (actor, request id) returns the first recorded outcome and changes nothing.
"""

from __future__ import annotations

import heapq

from . import cancel as _cancel
from . import errors as E
from . import reassign, recovery
from . import retire as _retire
from .codec import command_fingerprint, decode_envelope
from .commands import (
    MAX_LEASE_TTL_MS,
    AcceptToolCall,
    AckCancel,
    Acquire,
    CancelRun,
    ClaimTask,
    CloseWait,
    Command,
    CommitRecovery,
    CompleteExecution,
    ConfigureCancellation,
    ConfigureRecovery,
    CreateExecution,
    CreateTarget,
    DecideApproval,
    DeclareSatisfier,
    Envelope,
    ExpireSession,
    FailExecution,
    FreezeAdmission,
    Heartbeat,
    JoinSession,
    LeaveSession,
    ProduceArtifact,
    ProposeRecovery,
    RecordCost,
    RecordSideEffect,
    ReemitCancels,
    RegisterWait,
    Release,
    ReleaseQuarantine,
    RenewClaim,
    ResumeExecution,
    RetireSettled,
    RetryExecution,
    SetApprover,
    SetMode,
    StartExecution,
    Tick,
    TickV1,
    UnfreezeAdmission,
    VoteRecovery,
)
from .context import (
    Ctx,
    check_current,
    check_fresh_ids,
    check_nonneg,
    check_open_execution_room,
    check_reason,
    later,
    missing_execution,
    missing_target,
    owned_execution,
    require_operator,
    require_session,
)
from .detect import closing_path
from .effects import (
    ApprovalDecided,
    ArtifactProduced,
    CostRecorded,
    ExecutionCreated,
    SatisfierDeclared,
    SessionEnded,
    SessionJoined,
    SessionRenewed,
    SideEffectRecorded,
    TargetCreated,
)
from .enums import SETTLED, TERMINAL, EffectOutcome, ExecStatus, Relation, SessionStatus
from .errors import CodecError, Rejection
from .ids import (
    CREATED_TARGET_KINDS,
    DECLARED_KINDS,
    HELD_KINDS,
    OUTSIDE_KINDS,
    TARGET_KINDS,
    Kind,
    actor_kind,
    check_trace_context,
    id_kind,
    kind_of,
    validate_name,
)
from .lifecycle import (
    Event,
    check_live,
    close_satisfier,
    close_wait,
    end_attempt,
    expire_leases,
    grant,
    new_attempt,
    next_status,
    open_edge,
    release_holding,
    set_status,
    touch_waiters,
    wake_waiters,
)
from .outcome import Outcome, Result, applied, noop, rejected
from .state import Execution, Limits, Run, Session, SideEffect, State, Target, WaitEdge, edge_id

# -- the execution lifecycle as a table ----------------------------------------------------------


# -- the machine ----------------------------------------------------------------------------------

_NOOP = Result.NOOP
_ACTIVE = SessionStatus.ACTIVE
_EXEC_ONLY = frozenset({Kind.EXEC})
S = ExecStatus


class StateMachine:
    """Owns one :class:`State` and applies envelopes to it."""

    def __init__(self, state: State | None = None, limits: Limits | None = None) -> None:
        self.state = state if state is not None else State(limits)

    # -- entry points --------------------------------------------------------------------------

    def apply_bytes(self, data: bytes) -> Outcome:
        """Decode and apply; undecodable bytes are a rejection that changes nothing."""
        try:
            env = decode_envelope(data)
        except CodecError as exc:
            return rejected(E.invalid("codec", exc.message, **exc.fields))
        return self.apply(env)

    def apply(self, env: Envelope) -> Outcome:
        st = self.state
        try:
            kind = actor_kind(env.actor)
        except Rejection as rej:
            return rejected(rej)
        key: tuple[str, str] | None = None
        fingerprint = b""
        if env.request_id is not None:
            if not 0 < len(env.request_id) <= 128:
                return rejected(E.invalid("bad_request_id", "request_id must be 1..128 characters"))
            key = (env.actor, env.request_id)
            fingerprint = command_fingerprint(env.command)
            seen = st.idempotency.get(key)
            if seen is not None:
                if seen[0] != fingerprint:
                    return rejected(
                        E.invalid(
                            "request_id_reused",
                            f"request_id {env.request_id!r} was already used for a different command",
                        )
                    )
                first = seen[1]
                return Outcome(first.result, first.effects, first.code, first.status, first.message, first.fields, True)
        ctx = Ctx(st, env.actor, kind, max(st.now_ms, env.at_ms))
        try:
            out = _dispatch(ctx, env.command)
        except Rejection as rej:
            return rejected(rej)
        st.now_ms = ctx.now
        if out.result is _NOOP:
            st.bump(f"noop.{out.code}")
        if key is not None:
            st.idempotency[key] = (fingerprint, out)
            while len(st.idempotency) > st.limits.idempotency_capacity:
                st.idempotency.popitem(last=False)
        return out

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    def restore(self, data: bytes) -> None:
        """Replace the whole state with the snapshot's; nothing of the old state survives."""
        self.state = State.restore(data)

    def digest(self) -> str:
        return self.state.digest()


def _dispatch(ctx: Ctx, cmd: Command) -> Outcome:
    # Each case is a class check in turn: the most frequent writes come first.
    match cmd:
        case RegisterWait():
            return _register_wait(ctx, cmd)
        case CloseWait():
            return _close_wait_cmd(ctx, cmd)
        case Acquire():
            return _acquire(ctx, cmd)
        case Release():
            _cancel.check_release(ctx, cmd)
            return _release(ctx, cmd)
        case Heartbeat():
            return _heartbeat(ctx, cmd)
        case JoinSession():
            return _join(ctx, cmd)
        case LeaveSession():
            return _leave(ctx, cmd)
        case ExpireSession():
            return _expire_session(ctx, cmd)
        case CreateExecution():
            _cancel.admit_creation(ctx, cmd)
            return _create_execution(ctx, cmd)
        case StartExecution():
            _cancel.fence_execution(ctx, cmd.execution_id, cmd.generation, cmd.observed_cancel_generation, "start")
            return _lifecycle(ctx, cmd.execution_id, cmd.generation, Event.START, "started")
        case ResumeExecution():
            return _lifecycle(ctx, cmd.execution_id, cmd.generation, Event.RESUME, "resumed")
        case CompleteExecution():
            _cancel.fence_execution(ctx, cmd.execution_id, cmd.generation, cmd.observed_cancel_generation, "commit")
            return _lifecycle(ctx, cmd.execution_id, cmd.generation, Event.COMPLETE, "completed")
        case FailExecution():
            check_reason(ctx, cmd.reason)
            return _lifecycle(ctx, cmd.execution_id, cmd.generation, Event.FAIL, cmd.reason)
        case RetryExecution():
            _cancel.check_retry(ctx, cmd.execution_id)
            return _retry(ctx, cmd)
        case CreateTarget():
            return _create_target(ctx, cmd)
        case DeclareSatisfier():
            return _declare_satisfier(ctx, cmd)
        case ProduceArtifact():
            return _produce(ctx, cmd)
        case DecideApproval():
            return _decide(ctx, cmd)
        case Tick():
            return _tick(ctx)
        case TickV1():
            return _tick_v1(ctx)
        case RecordSideEffect():
            return _record_side_effect(ctx, cmd)
        case RecordCost():
            return _record_cost(ctx, cmd)
        case ConfigureRecovery():
            return recovery.configure(ctx, cmd)
        case SetMode():
            return recovery.set_mode(ctx, cmd)
        case SetApprover():
            return reassign.set_approver(ctx, cmd)
        case ProposeRecovery():
            return recovery.propose(ctx, cmd)
        case VoteRecovery():
            return recovery.vote(ctx, cmd)
        case CommitRecovery():
            return recovery.commit(ctx, cmd)
        case CancelRun():
            return _cancel.cancel_run(ctx, cmd)
        case AckCancel():
            return _cancel.ack_cancel(ctx, cmd)
        case ReemitCancels():
            return _cancel.reemit_cancels(ctx, cmd)
        case ReleaseQuarantine():
            return _cancel.release_quarantine(ctx, cmd)
        case ClaimTask():
            return _cancel.claim_task(ctx, cmd)
        case RenewClaim():
            return _cancel.renew_claim(ctx, cmd)
        case AcceptToolCall():
            return _cancel.accept_tool_call(ctx, cmd)
        case FreezeAdmission():
            return _cancel.freeze_admission(ctx, cmd)
        case UnfreezeAdmission():
            return _cancel.unfreeze_admission(ctx, cmd)
        case ConfigureCancellation():
            return _cancel.configure(ctx, cmd)
        case RetireSettled():
            return _retire.retire_settled(ctx, cmd)
    raise E.invalid("unknown_command", f"no handler for {type(cmd).__name__}")  # pragma: no cover


# -- shared checks --------------------------------------------------------------------------------


def _target(ctx: Ctx, target_id: str, allowed: frozenset[Kind], field_name: str = "target_id") -> Target:
    id_kind(target_id, field_name, allowed)
    t = ctx.state.targets.get(target_id)
    if t is None:
        raise missing_target(ctx.state, target_id)
    return t


# -- cascades (run only after every check has passed) -------------------------------------------


# -- sessions -------------------------------------------------------------------------------------


def _session_agent(ctx: Ctx, agent_id: str) -> str:
    validate_name(agent_id, "agent_id")
    if ctx.agent_id is not None and ctx.agent_id != agent_id:
        raise E.denied("not_owner", f"an agent may only manage its own session, not {agent_id}")
    return agent_id


def _join(ctx: Ctx, cmd: JoinSession) -> Outcome:
    st = ctx.state
    agent = _session_agent(ctx, cmd.agent_id)
    if not 0 < cmd.lease_ms <= st.limits.max_lease_ms:
        raise E.invalid("bad_lease", f"lease_ms must be 1..{st.limits.max_lease_ms}")
    s = st.sessions.get(agent)
    if s is None and len(st.sessions) >= st.limits.max_sessions:
        raise E.exhausted("too_many_sessions", f"the cluster holds {st.limits.max_sessions} sessions")
    # Saturate: an expiry past the 64-bit range could not be carried by the codec (the outcome
    # and the snapshot would no longer decode).
    expires = later(ctx.now, cmd.lease_ms)
    if s is not None and s.status is SessionStatus.ACTIVE:
        s.lease_ms, s.expires_at_ms = cmd.lease_ms, expires
        return applied([SessionRenewed(agent_id=agent, expires_at_ms=expires)])
    incarnation = s.incarnation + 1 if s else 1
    st.sessions[agent] = Session(agent, incarnation, cmd.lease_ms, expires, SessionStatus.ACTIVE)
    st.active_sessions += 1
    return applied([SessionJoined(agent_id=agent, incarnation=incarnation, expires_at_ms=expires)])


def _heartbeat(ctx: Ctx, cmd: Heartbeat) -> Outcome:
    st = ctx.state
    agent = _session_agent(ctx, cmd.agent_id)
    s = st.sessions.get(agent)
    if s is None or s.status is not _ACTIVE:
        raise E.precondition("no_session", f"agent {agent} has no active session; join again", agent_id=agent)
    s.expires_at_ms = later(ctx.now, s.lease_ms)
    return applied([SessionRenewed(agent_id=agent, expires_at_ms=s.expires_at_ms)])


def _leave(ctx: Ctx, cmd: LeaveSession) -> Outcome:
    agent = _session_agent(ctx, cmd.agent_id)
    s = ctx.state.sessions.get(agent)
    if s is None or s.status is not SessionStatus.ACTIVE:
        return noop("no_session", f"agent {agent} has no active session")
    s.status = SessionStatus.LEFT
    ctx.state.active_sessions -= 1
    return applied([SessionEnded(agent_id=agent, reason="left")])


def _expire_session(ctx: Ctx, cmd: ExpireSession) -> Outcome:
    """The leader heard nothing from the agent for its lease (docs/api.md, Sessions)."""
    require_operator(ctx, "ExpireSession")
    validate_name(cmd.agent_id, "agent_id")
    s = ctx.state.sessions.get(cmd.agent_id)
    if s is None or s.status is not SessionStatus.ACTIVE or s.incarnation != cmd.incarnation:
        return noop("not_active", f"agent {cmd.agent_id} has no active session of the incarnation named")
    if s.expires_at_ms > ctx.now:
        # Renewed through the log after the leader found it due (a rejoin, which keeps the
        # incarnation; an old log's Heartbeat): that join was acknowledged, so this expiry is late.
        return noop("renewed", f"agent {cmd.agent_id}'s session was renewed until {s.expires_at_ms}")
    _end_expired(ctx, s)
    return applied(ctx.fx)


def _end_expired(ctx: Ctx, s: Session) -> None:
    # The lease ended now: retirement counts its retention from here (statemachine/retire.py).
    s.status, s.expires_at_ms = SessionStatus.EXPIRED, min(s.expires_at_ms, ctx.now)
    ctx.state.active_sessions -= 1
    ctx.fx.append(SessionEnded(agent_id=s.agent_id, reason="expired"))
    _cancel.on_session_expired(ctx, s.agent_id)


# -- executions -----------------------------------------------------------------------------------


def _create_execution(ctx: Ctx, cmd: CreateExecution) -> Outcome:
    st = ctx.state
    id_kind(cmd.execution_id, "execution_id", _EXEC_ONLY)
    validate_name(cmd.run_id, "run_id")
    require_session(ctx)
    if cmd.execution_id in st.executions:
        raise E.exists("execution_exists", f"{cmd.execution_id} already exists", execution_id=cmd.execution_id)
    check_fresh_ids(st, cmd.execution_id, cmd.run_id if cmd.parent_id is None else None)
    if len(st.executions) >= st.limits.max_executions:
        raise E.exhausted("too_many_executions", f"the cluster holds {st.limits.max_executions} executions")
    owner = cmd.agent_id if cmd.agent_id is not None else ctx.agent_id
    if owner is None:
        raise E.invalid("no_agent", "an operator creating an execution must name its agent_id")
    validate_name(owner, "agent_id")
    parent: Execution | None = None
    if cmd.parent_id is None:
        if cmd.run_id in st.runs:
            raise E.exists("run_exists", f"run {cmd.run_id} already has a root execution", run_id=cmd.run_id)
    else:
        id_kind(cmd.parent_id, "parent_id", frozenset({Kind.EXEC}))
        parent = st.executions.get(cmd.parent_id)
        if parent is None:
            raise missing_execution(st, cmd.parent_id, "parent ")
        if parent.run_id != cmd.run_id:
            raise E.invalid("wrong_run", f"parent {cmd.parent_id} belongs to run {parent.run_id}, not {cmd.run_id}")
        check_live(parent, "create children")
    # An agent adds children only under its own executions (a child widens the parent's cancel
    # scope), and hands one to another agent only that way: delegation.
    if ctx.agent_id is not None and parent is not None and parent.agent_id != ctx.agent_id:
        raise E.denied("not_owner", f"{parent.execution_id} belongs to another agent; only its owner adds children")
    if ctx.agent_id is not None and owner != ctx.agent_id and parent is None:
        raise E.denied("not_owner", "an agent may create executions for another agent only under its own parent")
    if owner != ctx.agent_id:
        s = st.sessions.get(owner)
        if s is None or s.status is not SessionStatus.ACTIVE:
            raise E.precondition("no_session", f"agent {owner} has no active session", agent_id=owner)
    check_open_execution_room(st, owner)
    ex = Execution(
        cmd.execution_id,
        cmd.run_id,
        cmd.parent_id,
        owner,
        1,
        S.PENDING,
        cmd.priority,
        cmd.checkpoint,
        cmd.unique_evidence,
        0,
        ctx.now,
        ctx.now,
    )
    st.executions[ex.execution_id] = ex
    st.count_open_execution(owner, 1)
    st.count_open_in_run(ex.run_id, 1, ctx.now)
    st.count_owned(owner, 1)
    if parent is None:
        st.runs[cmd.run_id] = Run(cmd.run_id, ex.execution_id, 0)
    else:
        parent.children.append(ex.execution_id)
    st.touch(ex.execution_id)
    return applied([ExecutionCreated(execution_id=ex.execution_id, run_id=ex.run_id, agent_id=owner, generation=1)])


def _lifecycle(ctx: Ctx, execution_id: str, generation: int, event: Event, cause: str) -> Outcome:
    ex = owned_execution(ctx, execution_id, generation=generation)
    if generation < ex.generation and event in (Event.COMPLETE, Event.FAIL):
        return noop("stale_generation", f"g{generation} of {execution_id} is an old attempt; nothing to finish")
    check_current(ex, generation)
    nxt = next_status(ex, event)
    if nxt in TERMINAL:
        end_attempt(ctx, ex, "waiter_finished" if nxt is S.COMPLETED else "waiter_failed")
    set_status(ctx, ex, nxt, cause)
    return applied(ctx.fx)


def _retry(ctx: Ctx, cmd: RetryExecution) -> Outcome:
    ex = owned_execution(ctx, cmd.execution_id, generation=cmd.generation)
    check_current(ex, cmd.generation)
    nxt = next_status(ex, Event.RETRY)
    if ex.status in SETTLED:
        check_open_execution_room(ctx.state, ex.agent_id)
    new_attempt(ctx, ex, nxt, "retried")
    return applied(ctx.fx)


# -- targets, satisfiers, holdings ----------------------------------------------------------------


def _create_target(ctx: Ctx, cmd: CreateTarget) -> Outcome:
    st = ctx.state
    kind = id_kind(cmd.target_id, "target_id", CREATED_TARGET_KINDS)
    require_session(ctx)
    if kind is Kind.POOL:
        if not 0 < cmd.slots <= st.limits.max_pool_slots:
            raise E.invalid("bad_slots", f"a pool needs 1..{st.limits.max_pool_slots} slots")
    elif cmd.slots != 1:
        raise E.invalid("bad_slots", f"only pools have slots; {kind.value}: targets have exactly 1")
    if cmd.target_id in st.targets:
        raise E.exists("target_exists", f"{cmd.target_id} already exists", target_id=cmd.target_id)
    if len(st.targets) >= st.limits.max_targets:
        raise E.exhausted("too_many_targets", f"the cluster holds {st.limits.max_targets} targets")
    # A retired id is created afresh (version 0, no satisfier): targets are named by the agents'
    # own resources and artifacts, which come back; the retired one is in the history store.
    st.retired_targets.pop(cmd.target_id, None)
    t = st.targets[cmd.target_id] = Target(cmd.target_id, kind, cmd.slots)
    st.touch_target(t.target_id, ctx.now)
    return applied([TargetCreated(target_id=cmd.target_id, slots=cmd.slots)])


def _declare_satisfier(ctx: Ctx, cmd: DeclareSatisfier) -> Outcome:
    st = ctx.state
    t = _target(ctx, cmd.target_id, DECLARED_KINDS)
    skind = id_kind(cmd.satisfier_id, "satisfier_id", frozenset({Kind.EXEC}) | OUTSIDE_KINDS)
    require_session(ctx)
    if cmd.target_generation < 1:
        raise E.invalid("bad_generation", "target_generation must be at least 1")
    if cmd.target_generation <= t.version:
        raise E.precondition(
            "already_satisfied", f"{t.target_id} is already at version {t.version}", target_id=t.target_id
        )
    if skind is Kind.EXEC:
        producer = owned_execution(ctx, cmd.satisfier_id)
        check_current(producer, cmd.satisfier_generation)
        check_live(producer, "satisfy a target")
    elif cmd.satisfier_generation != 0:
        raise E.invalid("bad_generation", "an outside satisfier has no generation; use 0")
    if (t.satisfier_id, t.satisfier_generation, t.satisfier_for) == (
        cmd.satisfier_id,
        cmd.satisfier_generation,
        cmd.target_generation,
    ):
        return noop("already_declared", f"{t.target_id} already has this satisfier")
    if t.satisfier_id is not None:
        close_satisfier(ctx, t, "replaced")
    t.satisfier_id, t.satisfier_generation, t.satisfier_for = (
        cmd.satisfier_id,
        cmd.satisfier_generation,
        cmd.target_generation,
    )
    if skind is Kind.EXEC:
        st.add_satisfies(cmd.satisfier_id, t.target_id)
    st.touch_target(t.target_id, ctx.now)
    touch_waiters(ctx, t.target_id)
    relation = Relation.PRODUCED_BY if t.kind is Kind.ARTIFACT else Relation.PROVIDED_BY
    ctx.fx.append(
        SatisfierDeclared(
            target_id=t.target_id,
            target_generation=cmd.target_generation,
            relation=relation,
            satisfier_id=cmd.satisfier_id,
            satisfier_generation=cmd.satisfier_generation,
        )
    )
    return applied(ctx.fx)


def _acquire(ctx: Ctx, cmd: Acquire) -> Outcome:
    _check_ttl(cmd.ttl_ms, "ttl_ms")
    t = _target(ctx, cmd.target_id, HELD_KINDS)
    ex = owned_execution(ctx, cmd.execution_id, generation=cmd.generation)
    check_current(ex, cmd.generation)
    check_live(ex, "acquire")
    recovery.check_fence(ctx.state, ex.execution_id, cmd.observed_epoch)
    if ex.execution_id in t.holders:
        return noop("already_held", f"{ex.execution_id} already holds {t.target_id}")
    if len(t.holders) >= t.slots:
        holder = min(t.holders)
        raise E.aborted(
            "target_held" if t.kind is not Kind.POOL else "pool_full",
            f"{t.target_id} is held (lease {t.version}); register a wait on it to block",
            target_id=t.target_id,
            lease=t.version,
            holder=holder,
        )
    grant(ctx, t, ex, cmd.ttl_ms)
    return applied(ctx.fx)


def _check_ttl(ttl_ms: int, name: str) -> None:
    check_nonneg(ttl_ms, name)
    if ttl_ms > MAX_LEASE_TTL_MS:
        raise E.invalid("ttl_too_long", f"{name} must be at most {MAX_LEASE_TTL_MS}", field=name)


def _release(ctx: Ctx, cmd: Release) -> Outcome:
    t = _target(ctx, cmd.target_id, HELD_KINDS)
    ex = owned_execution(ctx, cmd.execution_id)
    if cmd.generation < ex.generation:
        return noop("stale_generation", f"g{cmd.generation} of {ex.execution_id} holds nothing any more")
    check_current(ex, cmd.generation)
    if ex.execution_id not in t.holders:
        return noop("not_held", f"{ex.execution_id} does not hold {t.target_id}")
    release_holding(ctx, t, ex.execution_id, "released")
    return applied(ctx.fx)


# -- wait edges -----------------------------------------------------------------------------------


def _check_wait_target(ctx: Ctx, cmd: RegisterWait, kind: Kind, existing: WaitEdge | None) -> str:
    """Refuse a wait whose resolving event already happened or that names a stale target state.

    A queued wait on a resource (``existing``) follows the lease as it is handed on
    (:func:`lifecycle.hand_off`): its re-register may name the lease it was first registered at.

    Returns the target's id as the state already stores it, so the new edge shares that string
    instead of keeping its own copy (a large share of an edge's memory).
    """
    st = ctx.state
    tg = cmd.target_generation

    def satisfied(msg: str) -> Rejection:
        return E.precondition("already_satisfied", msg, target_id=cmd.target_id)

    if kind is Kind.EXEC:
        target_ex = st.executions.get(cmd.target_id)
        if target_ex is None:
            raise missing_execution(st, cmd.target_id)
        if tg < target_ex.generation:
            raise E.precondition(
                "stale_target_generation",
                f"{cmd.target_id} is at generation {target_ex.generation}; g{tg} is over",
                target_id=cmd.target_id,
                current=target_ex.generation,
            )
        if tg > target_ex.generation:
            raise E.invalid("future_generation", f"{cmd.target_id} has no generation {tg} yet")
        if target_ex.status in TERMINAL:
            raise satisfied(f"{cmd.target_id} is already {target_ex.status.value}")
        if target_ex.status is ExecStatus.NEEDS_RECONCILIATION:
            # Its attempt is over (its waiters were released when it ended): a wait on it would
            # stand on nothing until a human reconciles it.
            raise E.precondition(
                "target_reconciling",
                f"{cmd.target_id} g{tg} ended in NEEDS_RECONCILIATION; wait for what reconciling it decides",
                target_id=cmd.target_id,
            )
        return target_ex.execution_id
    t = _target(ctx, cmd.target_id, TARGET_KINDS)
    if t.kind in DECLARED_KINDS:
        if tg < 1:
            raise E.invalid("bad_generation", "target_generation must be at least 1")
        if tg <= t.version:
            raise satisfied(f"{cmd.target_id} is already at version {t.version}")
    elif t.kind is Kind.POOL:
        if tg != 0:
            raise E.invalid("bad_generation", "a pool wait has target_generation 0")
        if len(t.holders) < t.slots:
            raise satisfied(f"{cmd.target_id} has a free slot; acquire it")
    else:
        if not t.holders:
            raise satisfied(f"{cmd.target_id} is free; acquire it")
        if tg < t.version and (existing is None or existing.target_generation != t.version):
            raise E.precondition(
                "stale_target_generation",
                f"{cmd.target_id} lease {tg} is over; it is at lease {t.version}",
                target_id=cmd.target_id,
                current=t.version,
            )
        if tg > t.version:
            raise E.invalid("future_generation", f"{cmd.target_id} has no lease {tg} yet")
    return t.target_id


def _register_wait(ctx: Ctx, cmd: RegisterWait) -> Outcome:
    st = ctx.state
    kind = id_kind(cmd.target_id, "target_id", TARGET_KINDS)
    ex = owned_execution(ctx, cmd.waiter_id, field="waiter_id", generation=cmd.waiter_generation)
    check_reason(ctx, cmd.reason)
    if cmd.edge_version < 1:
        raise E.invalid("bad_edge_version", "edge_version must be at least 1")
    if cmd.deadline_ms is not None and cmd.deadline_ms <= ctx.now:
        raise E.invalid("deadline_passed", f"deadline_ms {cmd.deadline_ms} is not after now ({ctx.now})")
    _check_ttl(cmd.lease_ttl_ms, "lease_ttl_ms")
    check_trace_context(cmd.trace_context)
    check_current(ex, cmd.waiter_generation)
    existing = st.wait(ex.execution_id, cmd.target_id)
    hwm = ex.edge_hwm.get(cmd.target_id, 0)
    if cmd.edge_version <= hwm:
        what = "an open edge" if existing else "a closed edge"
        return noop("stale_edge_version", f"edge version {cmd.edge_version} <= {hwm} of {what}")
    nxt = next_status(ex, Event.BLOCK)
    target_id = _check_wait_target(ctx, cmd, kind, existing)
    if existing is None:
        if len(st.waits_by_waiter.get(ex.execution_id, ())) >= st.limits.max_edges_per_execution:
            raise E.exhausted("too_many_edges", f"{ex.execution_id} has {st.limits.max_edges_per_execution} open waits")
        if st.edge_count >= st.limits.max_total_edges:
            raise E.exhausted("too_many_edges", f"the cluster holds {st.limits.max_total_edges} wait edges")
        agent_limit = st.limits.max_open_edges_per_agent
        if st.open_edges_by_agent.get(ex.agent_id, 0) >= agent_limit:
            raise E.exhausted(
                "agent_edge_limit",
                f"agent {ex.agent_id} already has {agent_limit} open waits over its executions "
                "(max_open_edges_per_agent); close some first",
                agent_id=ex.agent_id,
                limit=agent_limit,
            )
    tg = cmd.target_generation
    if existing is not None and kind is Kind.RESOURCE:
        tg = max(tg, existing.target_generation)  # a queued wait follows the handed-on lease
    edge = WaitEdge(
        ex.execution_id,
        ex.generation,
        target_id,
        tg,
        st.shared_text(cmd.reason),
        cmd.deadline_ms,
        cmd.cancel_mode,
        cmd.edge_version,
        ctx.now,
        # the same wait registered again (a refresh, a re-plan) stays in the trace it began in
        cmd.trace_context or (existing.trace_context if existing is not None else ""),
    )
    if cmd.refuse_deadlock:
        _refuse_deadlock(ctx, edge)
    if existing is not None:
        st.remove_wait(existing, keep_place=True)
    open_edge(ctx, ex, edge, priority=cmd.priority, lease_ttl_ms=cmd.lease_ttl_ms)
    set_status(ctx, ex, nxt, "waiting")
    return applied(ctx.fx)


def _refuse_deadlock(ctx: Ctx, edge: WaitEdge) -> None:
    """Refuse ``edge`` (checked, not yet open) when opening it would close a hard cycle: the
    detector's own rule (:func:`detect.closing_path`), asked of the edges the new one reaches."""
    path = closing_path(ctx.state, edge)
    if path is not None:
        eid = edge_id(edge.waiter_id, edge.target_id)
        raise E.precondition(
            "would_deadlock",
            f"{eid} would close a deadlock: {' -> '.join(path)}; release or re-plan instead of waiting",
            edge_id=eid,
            path=" ".join(path),
        )


def _close_wait_cmd(ctx: Ctx, cmd: CloseWait) -> Outcome:
    st = ctx.state
    id_kind(cmd.target_id, "target_id", TARGET_KINDS)
    ex = owned_execution(ctx, cmd.waiter_id, field="waiter_id")
    check_reason(ctx, cmd.reason)
    if cmd.waiter_generation < ex.generation:
        return noop("stale_generation", f"g{cmd.waiter_generation} of {ex.execution_id} is an old attempt")
    check_current(ex, cmd.waiter_generation)
    edge = st.wait(ex.execution_id, cmd.target_id)
    if edge is None:
        if cmd.edge_version <= ex.edge_hwm.get(cmd.target_id, 0):
            return noop("already_closed", f"{edge_id(ex.execution_id, cmd.target_id)} is already closed")
        raise E.not_found("no_edge", f"{edge_id(ex.execution_id, cmd.target_id)} was never registered")
    if cmd.edge_version < edge.edge_version:
        return noop("stale_edge_version", f"edge version {cmd.edge_version} < open version {edge.edge_version}")
    if cmd.edge_version > edge.edge_version:
        raise E.invalid("future_edge_version", f"the open edge is at version {edge.edge_version}")
    close_wait(ctx, edge, cmd.reason)
    return applied(ctx.fx)


# -- target events --------------------------------------------------------------------------------


def _check_satisfier_actor(ctx: Ctx, t: Target) -> None:
    """Only the declared producing/providing execution's agent (or an operator) may resolve it."""
    agent = ctx.agent_id
    if agent is None or t.satisfier_id is None or kind_of(t.satisfier_id) is not Kind.EXEC:
        return
    if ctx.state.executions[t.satisfier_id].agent_id != agent:
        raise E.denied("not_satisfier", f"{t.target_id} is satisfied by {t.satisfier_id}, not by agent {agent}")


def _produce(ctx: Ctx, cmd: ProduceArtifact) -> Outcome:
    t = _target(ctx, cmd.artifact_id, frozenset({Kind.ARTIFACT}), "artifact_id")
    require_session(ctx)
    _check_satisfier_actor(ctx, t)
    if cmd.version <= t.version:
        return noop("stale_version", f"{t.target_id} is already at version {t.version}")
    t.version = cmd.version
    ctx.state.touch_target(t.target_id, ctx.now)
    ctx.fx.append(ArtifactProduced(artifact_id=t.target_id, version=cmd.version))
    if t.satisfier_id is not None and t.satisfier_for <= cmd.version:
        close_satisfier(ctx, t, "produced")
    wake_waiters(ctx, t.target_id, "target_produced", up_to=cmd.version)
    return applied(ctx.fx)


def _decide(ctx: Ctx, cmd: DecideApproval) -> Outcome:
    t = _target(ctx, cmd.approval_id, frozenset({Kind.APPROVAL}), "approval_id")
    require_session(ctx)
    _check_satisfier_actor(ctx, t)
    if cmd.version <= t.version:
        return noop("stale_version", f"{t.target_id} is already decided at version {t.version}")
    t.version, t.approved = cmd.version, cmd.approved
    ctx.state.touch_target(t.target_id, ctx.now)
    ctx.fx.append(ApprovalDecided(approval_id=t.target_id, version=cmd.version, approved=cmd.approved))
    if t.satisfier_id is not None and t.satisfier_for <= cmd.version:
        close_satisfier(ctx, t, "decided")
    wake_waiters(ctx, t.target_id, "approval_granted" if cmd.approved else "approval_denied", up_to=cmd.version)
    return applied(ctx.fx)


def _tick_v1(ctx: Ctx) -> Outcome:
    """Tick as released in version 1: sessions whose replicated lease has passed expire first, in
    (expiry, agent) order, as its heap popped them; then the deadlines. Only an old log holds it,
    so a scan of the sessions is cheap enough and no heap is kept for it."""
    require_operator(ctx, "Tick")
    st = ctx.state
    due = sorted(
        (s.expires_at_ms, agent)
        for agent, s in st.sessions.items()
        if s.status is SessionStatus.ACTIVE and s.expires_at_ms <= ctx.now
    )
    for _, agent in due:
        _end_expired(ctx, st.sessions[agent])
    return _tick(ctx)


def _tick(ctx: Ctx) -> Outcome:
    """Close the waits and expire the lease TTLs whose time has passed by ``now``; a timeout is a
    failure, never progress. Sessions expire by :class:`ExpireSession`, proposed by the leader."""
    require_operator(ctx, "Tick")
    st = ctx.state
    while st.deadlines and st.deadlines[0][0] <= ctx.now:
        deadline, waiter, target, version = heapq.heappop(st.deadlines)
        edge = st.wait(waiter, target)
        if edge is not None and edge.edge_version == version and edge.deadline_ms == deadline:
            close_wait(ctx, edge, "deadline_exceeded")
    expire_leases(ctx)
    return applied(ctx.fx)


# -- ledger ---------------------------------------------------------------------------------------

_EFFECT_STEPS = {
    (EffectOutcome.NONE, EffectOutcome.COMMITTED),
    (EffectOutcome.NONE, EffectOutcome.UNKNOWN),
    (EffectOutcome.UNKNOWN, EffectOutcome.COMMITTED),
    (EffectOutcome.UNKNOWN, EffectOutcome.NONE),
}
"""Allowed changes of a recorded side effect; COMMITTED is a fact and never changes."""


def _record_side_effect(ctx: Ctx, cmd: RecordSideEffect) -> Outcome:
    ex = owned_execution(ctx, cmd.execution_id, generation=cmd.generation)
    validate_name(cmd.effect_id, "effect_id")
    if cmd.generation > ex.generation:
        raise E.invalid("future_generation", f"{ex.execution_id} has no generation {cmd.generation} yet")
    check_nonneg(cmd.generation, "generation")
    # An old attempt's effect is still a fact of the world: it is recorded, never dropped.
    prior = ex.side_effects.get(cmd.effect_id)
    if prior is None:
        if len(ex.side_effects) >= ctx.state.limits.max_side_effects_per_execution:
            raise E.exhausted("too_many_side_effects", f"{ex.execution_id} has too many recorded side effects")
    elif prior.outcome is cmd.outcome and prior.compensatable == cmd.compensatable:
        return noop("already_recorded", f"{cmd.effect_id} is already {cmd.outcome.value}")
    elif (prior.outcome, cmd.outcome) not in _EFFECT_STEPS:
        raise E.precondition(
            "side_effect_final",
            f"{cmd.effect_id} is {prior.outcome.value}; it cannot become {cmd.outcome.value}"
            f"{'' if prior.outcome is not cmd.outcome else ' with another compensatable flag'}",
            effect_id=cmd.effect_id,
        )
    ex.side_effects[cmd.effect_id] = SideEffect(cmd.outcome, cmd.compensatable, cmd.generation)
    _cancel.forget_tool_call(ctx.state, ex.execution_id, cmd.effect_id)
    if cmd.outcome is EffectOutcome.UNKNOWN and (prior is None or prior.outcome is not EffectOutcome.UNKNOWN):
        _cancel.count_unknown(ctx.state, "recorded", cmd.generation)
    return applied(
        [
            SideEffectRecorded(
                execution_id=ex.execution_id,
                generation=cmd.generation,
                effect_id=cmd.effect_id,
                outcome=cmd.outcome,
                compensatable=cmd.compensatable,
            )
        ]
    )


def _record_cost(ctx: Ctx, cmd: RecordCost) -> Outcome:
    ex = owned_execution(ctx, cmd.execution_id)
    check_nonneg(cmd.cost, "cost")
    if cmd.generation > ex.generation:
        raise E.invalid("future_generation", f"{ex.execution_id} has no generation {cmd.generation} yet")
    ex.cost_consumed = later(ex.cost_consumed, cmd.cost)
    return applied([CostRecorded(execution_id=ex.execution_id, cost_consumed=ex.cost_consumed)])


# The cancellation protocol (statemachine/cancel.py) is built on this module's helpers, so it is
# imported last, once everything it uses here is defined.
