"""AgentService and OperatorService over one node: auth, conversion, submit, and the error table.

Rules kept here:
- Every handler does the same few steps, in one wrapper: authenticate the bearer token and check
  the role against :data:`waitgraph.node.auth.POLICY`; spend one token of the caller's rate limit
  (:mod:`waitgraph.node.ratelimit`); convert the request (:mod:`waitgraph.wire.convert`, the
  only place that knows the wire); propose or read; turn any error into a gRPC status through
  :mod:`waitgraph.node.grpc_status` (the only place that knows the codes).
- A write stamps its envelope here and nowhere else: the actor from the token, ``at_ms`` from this
  node's logical clock (:mod:`waitgraph.node.clock`: replicated time carried forward by the monotonic
  clock, immune to wall-clock steps), read once. The envelope is encoded and decoded again before it is proposed, so
  whatever the codec refuses (an oversize text, too many items) is INVALID_ARGUMENT without a log
  entry. A REJECTED outcome is a gRPC error; APPLIED and NOOP are OK responses.
- Reads run on this replica and say so (``stale``), unless the caller asked for ``fresh``: then a
  barrier goes through the log first.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar, cast

import grpc
from google.protobuf.message import Message

from waitgraph.node import grpc_status
from waitgraph.node.auth import Principal, Role, authorize
from waitgraph.node.config import ServeConfig, recovery_refusal
from waitgraph.node.errors import ClusterError, MembershipRefused, NotLeader
from waitgraph.node.events import CursorExpired, EventJournal
from waitgraph.node.history import HistoryStore
from waitgraph.node.lessor import Lessor, SessionsMode, SessionsView, sessions_mode
from waitgraph.node.membership import following_config
from waitgraph.node.raft import Member, RaftNode, RaftStatus, Read
from waitgraph.node.ratelimit import RateLimiter
from waitgraph.proto.v1 import agent_pb2, agent_pb2_grpc, operator_pb2, operator_pb2_grpc, types_pb2
from waitgraph.statemachine import Envelope, StateMachine, encode_envelope
from waitgraph.statemachine.cancel import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    cancel_state,
    convergence,
    export_pending,
    metrics,
    victim_scope_id,
)
from waitgraph.statemachine.codec import MAX_PAYLOAD_BYTES, CheckedEnvelope, check_envelope
from waitgraph.statemachine.commands import JoinSession
from waitgraph.statemachine.detect import full_pass
from waitgraph.statemachine.effects import EFFECTS
from waitgraph.statemachine.enums import ExecStatus
from waitgraph.statemachine.errors import CodecError, Rejection, Status, WaitgraphError, not_found
from waitgraph.statemachine.ids import validate_name
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.queues import positions as queue_positions
from waitgraph.statemachine.recovery import livelock_reason
from waitgraph.statemachine.recovery_state import Decision, DecisionKind, ProposalStatus
from waitgraph.statemachine.reorder import soft_candidates
from waitgraph.statemachine.state import State, is_orphaned, orphaned_count
from waitgraph.wire import convert, metadata

logger = logging.getLogger("waitgraph.node.service")

T = TypeVar("T")
Handler = Callable[[Principal, Any, grpc.aio.ServicerContext], Awaitable[Message]]

DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
MAX_HOPS = 10
"""``GraphRequest.hops`` beyond this is taken as this: ten steps already reach most of a graph."""
PROGRESS_INTERVAL_S = 1.0
"""A watcher whose filter matched nothing for this long gets a ``progress`` with its position."""
IDLE_STREAM_WAIT_S = 30.0
"""How long a stream with nothing to report sleeps before it looks at the journal's position
again (an event for it wakes it at once): the progress of unmatched events then comes within
this, not within a second."""
_EFFECT_KINDS = frozenset(cls.KIND for cls in EFFECTS)
_SIGNATURE = re.compile(r"[0-9a-f]{16}")
_ADDRESS = re.compile(r"[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}")
MAX_SIGNATURE_DECISIONS = 1000
_SESSION_RPCS = frozenset({"JoinSession", "Heartbeat", "LeaveSession"})
WRITE_BATCH_METHOD = "/waitgraph.v1.AgentService/WriteBatch"
MAX_WRITE_BATCH_ITEMS = 1024
"""Items per WriteBatch (the whole request is also held to the codec's 64 KiB)."""


class Gateway:
    """What both services share: the node, the auth check, the write path, the read path."""

    def __init__(
        self,
        cfg: ServeConfig,
        node: RaftNode,
        journal: EventJournal,
        clock: Callable[[], float] = time.time,
        stamp: Callable[[], int] | None = None,
        history: HistoryStore | None = None,
        lessor: Lessor | None = None,
    ) -> None:
        self.cfg = cfg
        self.node = node
        self.journal = journal
        self.history = history
        """This node's store of retired records (cluster/node/history.py); None: not kept."""
        self.clock = clock
        """Wall clock: token expiry only."""
        self.stamp = stamp if stamp is not None else (lambda: int(clock() * 1000))
        """``at_ms`` of what this node proposes (cluster/node/clock.py: the node's LogicalClock)."""
        self.limiter = RateLimiter(cfg.rate_limit_per_s, cfg.rate_limit_burst)
        self.grpc_front = "python"
        """What serves this node's gRPC port (``native`` or ``python``), set by the server once
        it knows; Status reports it."""
        self.lessor = lessor if lessor is not None else Lessor(self.stamp, lambda: node.read_blocking(_state_of))
        """Session liveness (cluster/node/lessor.py): heartbeats are answered here, not proposed."""

    # -- the wrapper -------------------------------------------------------------------------------

    def principal(self, context: grpc.aio.ServicerContext, method: str) -> Principal:
        principal = self.cfg.tokens.authenticate(context.invocation_metadata() or (), self.clock())
        authorize(principal, method)
        self.limiter.take(principal.name, principal.actor)
        return principal

    @staticmethod
    def check_request(request: Any) -> None:
        """Every RPC: bytes that are no message, or a message over the codec's limit, are
        INVALID_ARGUMENT before anything is read or proposed (gRPC's own limit is 4x higher)."""
        if isinstance(request, convert.Undecodable):
            raise request.error
        size = request.ByteSize()
        if size > MAX_PAYLOAD_BYTES:
            raise convert.WireError(f"the request is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}")

    def leader_hint(self) -> grpc_status.LeaderHint | None:
        try:
            address = self.node.leader_address()
        except Exception:
            return None
        if address is None:
            return None
        member = self.node.member_named(address)  # the membership as it is now, not as configured
        if member is None:
            return None
        return grpc_status.LeaderHint(member.node_id, member.grpc_address or None)

    async def abort(self, context: grpc.aio.ServicerContext, exc: BaseException, request_id: str | None = None) -> None:
        if isinstance(exc, WaitgraphError):
            err = grpc_status.for_error(exc, self.leader_hint(), request_id)
        else:
            logger.error("internal error in a handler", exc_info=exc)
            err = grpc_status.GrpcError(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}")
        await context.abort(err.code, err.details, trailing_metadata=err.trailing_metadata)

    def unary(self, method: str, fn: Handler) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Message]]:
        async def handler(request: Any, context: grpc.aio.ServicerContext) -> Message:
            try:
                principal = self.principal(context, method)
                self.check_request(request)
                return await fn(principal, request, context)
            except Exception as exc:  # every error becomes a status; AbortError is raised below
                failure: BaseException = exc
            await self.abort(context, failure, getattr(request, "request_id", "") or None)
            raise AssertionError("unreachable: abort raises")  # pragma: no cover

        handler.__name__ = method.rsplit("/", 1)[-1]
        return handler

    # -- writes --------------------------------------------------------------------------------------

    def write_handler(self, service: str, rpc: str) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Message]]:
        async def write(principal: Principal, request: Any, context: grpc.aio.ServicerContext) -> Message:
            return await self.write(principal, rpc, request)

        return self.unary(f"/waitgraph.v1.{service}/{rpc}", write)

    def lessor_on(self) -> bool:
        """Heartbeats are the lessor's only while every member runs this release (lessor.py,
        "Mixed releases"); else they go through the log, as an older release expects."""
        return sessions_mode(self.node.member_features()) is SessionsMode.LESSOR

    async def write(self, principal: Principal, rpc: str, request: Any) -> types_pb2.Outcome:
        self.check_request(request)
        if rpc == "Heartbeat" and self.lessor_on():
            return self.answer(self.heartbeat(principal, request))
        checked = self.checked_envelope(principal, rpc, request, self.stamp())
        if rpc == "JoinSession":
            self.admit(checked.envelope)
        self.check_forwarding()
        outcome = await self.node.submit(checked)
        self.session_written(checked.envelope, outcome)
        return self.answer(outcome)

    def heartbeat(self, principal: Principal, request: Any) -> Outcome:
        """A Heartbeat is answered by the lessor, never proposed nor even encoded
        (cluster/node/lessor.py): the checks the core made of it come first."""
        agent: str = request.agent_id if request.HasField("agent_id") else (principal.agent_id or "")
        validate_name(agent, "agent_id")
        _own_session(principal.actor, agent)
        self.check_forwarding()
        if not self.node.has_quorum():
            # Liveness is the leader's: a heartbeat no leader will hear is not answered OK.
            raise NotLeader("no leader with a quorum hears this heartbeat", leader=self.node.leader_address())
        return self.lessor.heartbeat(agent)

    def admit(self, env: Envelope) -> None:
        """A join of one session more than the limits allow is refused before it is proposed."""
        cmd = env.command
        assert isinstance(cmd, JoinSession)
        self.lessor.admit(cmd.agent_id)  # the core refuses another agent's join when it applies

    def session_written(self, env: Envelope, outcome: Outcome) -> None:
        if isinstance(env.command, JoinSession) and outcome.result is Result.APPLIED:
            self.lessor.joined(env.command.agent_id, env.command.lease_ms)

    def checked_envelope(self, principal: Principal, rpc: str, request: Any, at_ms: int) -> CheckedEnvelope:
        """The Envelope of one write request, encoded and checked by the codec (WireError if
        refused); this node applies the checked value instead of decoding its bytes again. The
        caller checked the request's size (:meth:`check_request`): a WriteBatch item's is within its
        whole request's."""
        if principal.role is Role.AGENT and rpc in _SESSION_RPCS and not request.HasField("agent_id"):
            request.agent_id = principal.agent_id  # the token names the agent already
        command = convert.command_from_request(rpc, request)
        envelope = Envelope(actor=principal.actor, at_ms=at_ms, request_id=request.request_id or None, command=command)
        try:
            return check_envelope(envelope)  # packed once, checked as a replica decodes it
        except CodecError as exc:
            raise convert.WireError(exc.message, **exc.fields) from None

    def check_forwarding(self) -> None:
        if not self.cfg.forward_writes and not self.node.is_leader():
            raise NotLeader(
                "this node is not the leader and does not forward writes", leader=self.node.leader_address()
            )

    @staticmethod
    def accepted(outcome: Outcome) -> Outcome:
        """APPLIED and NOOP are answered; a REJECTED outcome is raised as a gRPC error."""
        if outcome.result is Result.REJECTED:
            raise grpc_status.Rejected(outcome)
        return outcome

    @staticmethod
    def answer(outcome: Outcome) -> types_pb2.Outcome:
        return convert.outcome_to_proto(Gateway.accepted(outcome))

    # -- WriteBatch ------------------------------------------------------------------------------------

    async def write_batch(
        self, request: agent_pb2.WriteBatchRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.WriteBatchResponse:
        """Each item as its unary RPC would be (auth, rate limit, conversion, submit, the error
        table), answered in place; proposed together, in order (one group commit). Whole-call
        failures (the call's token, an undecodable or oversize request, no items or too many)
        abort the call before anything is proposed."""
        failure: BaseException | None = None
        try:
            # The call itself costs no rate-limit token: each item costs one of its own token's.
            caller = self.cfg.tokens.authenticate(context.invocation_metadata() or (), self.clock())
            authorize(caller, WRITE_BATCH_METHOD)
            self.check_request(request)
            count = len(request.items)
            if not 0 < count <= MAX_WRITE_BATCH_ITEMS:
                raise convert.WireError(
                    f"WriteBatchRequest.items: {count} items; send 1 to {MAX_WRITE_BATCH_ITEMS}", items=count
                )
        except Exception as exc:
            failure = exc
        if failure is not None:
            await self.abort(context, failure)
            raise AssertionError("unreachable: abort raises")  # pragma: no cover
        results: list[agent_pb2.WriteResult | Outcome | None] = [None] * count
        """An item's error as its WriteResult, or the outcome its unary call would answer."""
        request_ids = [""] * count
        proposed: list[tuple[int, CheckedEnvelope]] = []
        at_ms = self.stamp()  # one reading for the whole batch, like a group
        principals: dict[str, Principal] = {}
        lessor_on = self.lessor_on()
        for i, item in enumerate(request.items):
            try:
                rpc, req = convert.write_item_request(item)
                request_ids[i] = req.request_id
                principal = caller
                if item.authorization:
                    principal = principals.get(item.authorization) or self.item_principal(item.authorization)
                    principals[item.authorization] = principal
                authorize(principal, f"/waitgraph.v1.AgentService/{rpc}")
                self.limiter.take(principal.name, principal.actor)
                if rpc == "Heartbeat" and lessor_on:
                    results[i] = self.accepted(self.heartbeat(principal, req))
                    continue
                checked = self.checked_envelope(principal, rpc, req, at_ms)
                if rpc == "JoinSession":
                    self.admit(checked.envelope)
                proposed.append((i, checked))
            except Exception as exc:
                results[i] = self.item_error(exc, request_ids[i])
        if proposed:
            try:
                self.check_forwarding()
                answers: list[Outcome | ClusterError] = await self.node.submit_many([d for _, d in proposed])
            except ClusterError as exc:
                answers = [exc] * len(proposed)
            for (i, checked), got in zip(proposed, answers, strict=True):
                try:
                    if isinstance(got, BaseException):
                        raise got
                    self.session_written(checked.envelope, got)
                    results[i] = self.accepted(got)
                except Exception as exc:
                    results[i] = self.item_error(exc, request_ids[i])
        # Built in place: a WriteResult or Outcome handed to the response's constructor is copied.
        response = agent_pb2.WriteBatchResponse()
        add = response.results.add
        for result in results:
            if isinstance(result, Outcome):
                convert.outcome_into(result, add().outcome)
            elif result is not None:
                add().CopyFrom(result)
            else:  # pragma: no cover - every item is answered above
                raise AssertionError("a WriteBatch item got no result")
        return response

    def item_principal(self, authorization: str) -> Principal:
        return self.cfg.tokens.authenticate((("authorization", authorization),), self.clock())

    def item_error(self, exc: BaseException, request_id: str) -> agent_pb2.WriteResult:
        """What the item's unary call would have failed with, status and trailers, as a result."""
        if isinstance(exc, WaitgraphError):
            err = grpc_status.for_error(exc, self.leader_hint(), request_id or None)
        else:
            logger.error("internal error in a WriteBatch item", exc_info=exc)
            err = grpc_status.GrpcError(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}")
        result = agent_pb2.WriteResult(status_code=err.code.value[0], details=err.details)
        for key, value in err.trailing_metadata:
            if key == metadata.CODE_KEY:
                result.code = str(value)
            elif key == metadata.OUTCOME_KEY and isinstance(value, bytes):
                result.outcome.ParseFromString(value)
            elif key == metadata.LEADER_KEY:
                result.leader_address = str(value)
            elif key == metadata.LEADER_ID_KEY:
                result.leader_id = str(value)
            elif key == metadata.RETRY_KEY:
                result.retry_same_request_id = value == "same-request-id"
        return result

    # -- reads ---------------------------------------------------------------------------------------

    async def read(self, fn: Callable[[StateMachine], T], fresh: bool) -> Read[T]:
        if fresh:
            return await self.node.read_fresh(fn)
        return await self.node.read_local(fn)

    async def read_image(
        self, fn: Callable[[StateMachine], T], image: Callable[[StateMachine], bytes], fresh: bool
    ) -> Read[tuple[T, bytes]]:
        """:meth:`read`, plus ``image`` (a serialization of the whole state) taken at the same
        applied index in a forked child, off the replica's lock (``RaftNode.read_image``)."""
        return await self.node.read_image(fn, image, fresh=fresh)


def _own_session(actor: str, agent_id: str) -> None:
    """The core's rule, checked before the lessor answers: an agent manages its own session only."""
    if actor.startswith("agent:") and actor != f"agent:{agent_id}":
        raise Rejection(
            Status.PERMISSION_DENIED, "not_owner", f"an agent may only manage its own session, not {agent_id}"
        )


def sessions_status(v: SessionsView) -> operator_pb2.SessionsStatus:
    return operator_pb2.SessionsStatus(
        active=v.active,
        here=v.here,
        leading=v.leading,
        oldest_heartbeat_age_ms=v.oldest_heartbeat_age_ms,
        suspended=list(v.suspended),
        suspended_count=v.suspended_count,
        max_per_node=v.max_per_node,
        max_per_cluster=v.max_per_cluster,
        heartbeat_age_p99_ms=v.heartbeat_age_p99_ms,
        mode=v.mode,
        suspended_sessions=[
            operator_pb2.SuspendedSession(agent_id=agent, heartbeat_age_ms=age) for agent, age in v.suspended_ages_ms
        ],
    )


def _state_of(m: StateMachine) -> State:
    return m.state


def _limit(requested: int) -> int:
    if requested == 0:
        return DEFAULT_LIMIT
    return min(requested, MAX_LIMIT)


def _install_writes(servicer: object, gateway: Gateway, service: str, rpcs: dict[str, Any]) -> None:
    for rpc in rpcs:
        setattr(servicer, rpc, gateway.write_handler(service, rpc))


# -- AgentService ----------------------------------------------------------------------------------------


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        _install_writes(self, gateway, "AgentService", convert.AGENT_WRITES)
        self.WriteBatch = gateway.write_batch  # type: ignore[method-assign]

    async def WatchEvents(
        self, request: agent_pb2.WatchEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[agent_pb2.WatchEventsResponse]:
        gw, journal = self.gw, self.gw.journal
        failure: BaseException | None = None
        try:
            principal = gw.principal(context, "/waitgraph.v1.AgentService/WatchEvents")
            gw.check_request(request)
            principals = [principal, *(self._stream_principal(a) for a in request.authorizations)]
            agents = self._agent_filter(principals, request)
            kinds = frozenset(request.kinds)
            unknown = sorted(kinds - _EFFECT_KINDS)
            if unknown:
                raise convert.WireError(f"WatchEventsRequest.kinds: unknown effect kinds {unknown}")
            head, horizon = journal.position()
            after = request.after_cursor if request.HasField("after_cursor") else head
            # Filed in the journal's index: recording an event queues it for the streams it
            # concerns and wakes those alone (cluster/node/events.py, "Delivery").
            sub = journal.subscribe(agents, kinds, after)
        except Exception as exc:
            failure = exc
        if failure is not None:
            await gw.abort(context, failure)
            return
        try:
            yield agent_pb2.WatchEventsResponse(started=agent_pb2.WatchPosition(cursor=after, horizon=horizon))
            reported, last_message = after, time.monotonic()
            while not journal.closed:
                try:
                    # Nothing to report: sleep until an event for this stream (or the node stops);
                    # an idle stream costs nothing per second. Else a progress is due in a second.
                    wait_s = PROGRESS_INTERVAL_S if after > reported else IDLE_STREAM_WAIT_S
                    batch, after = await sub.next(wait_s)
                except CursorExpired as exc:
                    await gw.abort(context, exc)
                    return
                for ev in batch:
                    yield agent_pb2.WatchEventsResponse(
                        event=convert.event_to_proto(ev.cursor, ev.log_index, ev.agent_ids, ev.effect)
                    )
                    reported, last_message = ev.cursor, time.monotonic()
                if after > reported and time.monotonic() - last_message >= PROGRESS_INTERVAL_S:
                    horizon = journal.position()[1]
                    yield agent_pb2.WatchEventsResponse(progress=agent_pb2.WatchPosition(cursor=after, horizon=horizon))
                    reported, last_message = after, time.monotonic()
        finally:
            journal.unsubscribe(sub)
        await context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f"the node is stopping; watch again (on another node) after cursor {after}",
        )

    def _stream_principal(self, authorization: str) -> Principal:
        """One more credential of a stream (``WatchEventsRequest.authorizations``), checked as the
        call's own: authenticated, authorized, one request of its rate limit."""
        principal = self.gw.item_principal(authorization)
        authorize(principal, "/waitgraph.v1.AgentService/WatchEvents")
        self.gw.limiter.take(principal.name, principal.actor)
        return principal

    @staticmethod
    def _agent_filter(principals: list[Principal], request: agent_pb2.WatchEventsRequest) -> frozenset[str] | None:
        """The agents whose events the stream carries; None: every agent's (operators only).
        Agent tokens alone: their own agents, and only those may be named."""
        named = {a for a in (request.agent_id, *request.agent_ids) if a}
        if any(p.role is not Role.AGENT for p in principals):
            return frozenset(named) or None
        own = {p.agent_id or "" for p in principals}
        other = sorted(named - own)
        if other:
            raise Rejection(
                Status.PERMISSION_DENIED,
                "not_owner",
                f"an agent token may only watch its own events, not {other[0]}",
            )
        return frozenset(named or own)


def graph_response(
    st: State,
    limit: int,
    run_id: str | None = None,
    agent_id: str | None = None,
    statuses: frozenset[ExecStatus] = frozenset(),
    around: tuple[str, ...] = (),
    hops: int = 0,
) -> operator_pb2.GraphResponse:
    """The Graph RPC's answer on ``st`` (call it under the replica's lock): the executions that
    pass the filters, their waits and the targets those name, at most ``limit`` items per list,
    in id order, with how many matched; also what the live view draws (cluster/ops/liveview.py)."""
    truncated = False

    def cap(items: list[Any]) -> list[Any]:
        nonlocal truncated
        if len(items) > limit:
            truncated = True
            return items[:limit]
        return items

    near = neighbourhood(st, around, hops) if around else None
    execs = [
        ex
        for eid, ex in sorted(st.executions.items())
        if (run_id is None or ex.run_id == run_id)
        and (agent_id is None or ex.agent_id == agent_id)
        and (not statuses or ex.status in statuses)
        and (near is None or eid in near)
    ]
    matched_executions = len(execs)
    execs = cap(execs)
    filtered = run_id is not None or agent_id is not None or bool(statuses) or near is not None
    waits = (
        [e for ex in execs for e in st.waits_of(ex.execution_id)]
        if filtered
        else [e for w in sorted(st.waits_by_waiter) for e in st.waits_of(w)]
    )
    if filtered:
        wanted = {e.target_id for e in waits} | {t for ex in execs for t in st.satisfies.get(ex.execution_id, ())}
        targets = [st.targets[t] for t in sorted(wanted) if t in st.targets]
    else:
        targets = [t for _, t in sorted(st.targets.items())]
    sessions = [s for a, s in sorted(st.sessions.items()) if agent_id is None or a == agent_id]
    runs = [r for k, r in sorted(st.runs.items()) if run_id is None or k == run_id]
    shown_waits = cap(waits)
    places = queue_positions(st.queues, (e.target_id for e in shown_waits))
    return operator_pb2.GraphResponse(
        executions=[convert.execution_view(ex, is_orphaned(st, ex)) for ex in execs],
        waits=[convert.wait_view(e, places.get(e.target_id, {}).get(e.waiter_id)) for e in shown_waits],
        targets=[convert.target_view(t) for t in cap(targets)],
        sessions=[convert.session_view(s) for s in cap(sessions)],
        runs=[convert.run_view(r, cancel_state(st, r.run_id)) for r in cap(runs)],
        truncated=truncated,
        epoch=st.recovery.epoch,
        matched_executions=matched_executions,
        matched_waits=len(waits),
        matched_targets=len(targets),
    )


def neighbourhood(st: State, seeds: Iterable[str], hops: int) -> set[str]:
    """The executions among ``seeds`` and those within ``hops`` wait-for steps of them, either
    way: a waiter and what satisfies its wait (an ``exec:`` target, a producer, provider or
    holder), and the waiters of what an execution satisfies or of the execution itself."""
    executions, targets = st.executions, st.targets
    seen = {s for s in seeds if s in executions}
    frontier = set(seen)
    for _ in range(hops):
        reached: set[str] = set()
        for eid in sorted(frontier):
            for edge in st.waits_of(eid):
                tid = edge.target_id
                if tid in executions:
                    reached.add(tid)
                elif (t := targets.get(tid)) is not None:
                    reached.update(t.holders)
                    if t.satisfier_id is not None and t.satisfier_id in executions:
                        reached.add(t.satisfier_id)
            for tid in (eid, *sorted(st.satisfies.get(eid, ()))):
                reached.update(edge.waiter_id for edge in st.waits_on(tid))
        frontier = reached - seen
        seen |= frontier
        if not frontier:
            break
    return seen


def cycles_response(st: State, include_closed: bool = False) -> operator_pb2.CyclesResponse:
    """The Cycles RPC's answer on ``st``: a full detection pass, the soft cycles (docs/queues.md)
    and the (open) recovery proposals."""
    rb = st.recovery
    cycles = []
    for c in full_pass(st):
        p = rb.proposals.get(c.digest)
        cycles.append(convert.cycle_view(c, p.status if p is not None else None))
    soft = []
    for c, cycle in soft_candidates(st):  # reads no wait unless a queue has two waiters
        p = rb.proposals.get(c.digest)
        soft.append(convert.soft_cycle_view(c, cycle.soft, p.status if p is not None else None))
    proposals = [p for p in rb.proposals.values() if include_closed or p.status is ProposalStatus.OPEN]
    return operator_pb2.CyclesResponse(
        cycles=cycles,
        proposals=[convert.proposal_view(p) for p in proposals[-MAX_LIMIT // 10 :]],
        epoch=rb.epoch,
        soft_cycles=soft,
    )


# -- OperatorService -------------------------------------------------------------------------------------


class OperatorServicer(operator_pb2_grpc.OperatorServiceServicer):
    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        _install_writes(self, gateway, "OperatorService", convert.OPERATOR_WRITES)
        for rpc in (
            "Status",
            "Graph",
            "Cycles",
            "ExplainDecision",
            "SignatureHistory",
            "Convergence",
            "ExportPending",
            "ExportState",
            "ListDecisions",
            "History",
            "ListMembers",
            "AddMember",
            "RemoveMember",
        ):
            setattr(self, rpc, gateway.unary(f"/waitgraph.v1.OperatorService/{rpc}", getattr(self, f"_{rpc.lower()}")))

    async def _status(
        self, principal: Principal, request: operator_pb2.StatusRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.StatusResponse:
        gw = self.gw
        include_digest = request.include_digest

        def look(m: StateMachine) -> dict[str, Any]:
            st = m.state
            rb, book = st.recovery, st.cancel
            counters = dict(st.counters)
            counters.update({f"gauge.{k}": v for k, v in metrics(st).items()})
            return dict(
                epoch=rb.epoch,
                mode=rb.mode,
                approver=rb.approver,
                admission_frozen=book.cluster_frozen is not None,
                admission_frozen_reason=book.cluster_frozen or "",
                frozen_runs=len(book.frozen_runs),
                recovery_configured=bool(rb.config.voters),
                voters=list(rb.config.voters),
                quorum=rb.config.quorum,
                max_rollback=rb.config.max_rollback,
                now_ms=st.now_ms,
                open_proposals=len(set(rb.open_members.values())),
                decisions=len(rb.decisions),
                counters=counters,
                orphaned_executions=orphaned_count(st),
                sessions=sessions_status(gw.lessor.view(st, gw.stamp())),
            )

        if include_digest:
            # The digest serializes the whole state (seconds at a million edges): a forked child
            # computes it from the same cut, so applies and heartbeats are not held up meanwhile.
            imaged = await gw.read_image(look, lambda m: m.digest().encode(), request.fresh)
            (values, digest), applied_index, stale = imaged.value, imaged.applied_index, imaged.stale
            values["state_digest"] = digest.decode()
        else:
            got = await gw.read(look, request.fresh)
            values, applied_index, stale = got.value, got.applied_index, got.stale
            values["state_digest"] = ""
        raft = gw.node.status()
        hint = gw.leader_hint()
        head, horizon = gw.journal.position()
        mode = values.pop("mode")
        peers = [
            operator_pb2.PeerStatus(
                node_id=m.node_id,
                raft_address=m.raft_address,
                grpc_address=m.grpc_address,
                connected=raft.peers_connected.get(m.raft_address, False),
            )
            for m in raft.members
            if m.raft_address != gw.cfg.raft_address
        ]
        return operator_pb2.StatusResponse(
            node_id=gw.cfg.node_id,
            raft_address=gw.cfg.raft_address,
            grpc_address=gw.cfg.grpc_address,
            role=raft.role,
            leader_id=(hint.node_id or "") if hint else "",
            leader_address=(hint.grpc_address or "") if hint else "",
            term=raft.term,
            commit_index=raft.commit_index,
            applied_index=applied_index,
            has_quorum=raft.has_quorum,
            ready=raft.ready,
            durable=raft.durable,
            grpc_front=gw.grpc_front,
            mode=cast(Any, convert.enum_number(mode)),
            stale=stale,
            peers=peers,
            event_head_cursor=head,
            event_horizon_cursor=horizon,
            **values,
        )

    async def _graph(
        self, principal: Principal, request: operator_pb2.GraphRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.GraphResponse:
        limit = _limit(request.limit)
        run_id, agent_id = request.run_id or None, request.agent_id or None
        statuses = frozenset(convert.exec_status_from_wire(n) for n in request.statuses)
        around = tuple(sorted(set(request.around)))
        if len(around) > MAX_LIMIT:
            raise convert.WireError(f"GraphRequest.around: at most {MAX_LIMIT} executions", field="around")
        hops = min(request.hops, MAX_HOPS)

        def look(m: StateMachine) -> operator_pb2.GraphResponse:
            return graph_response(m.state, limit, run_id, agent_id, statuses, around, hops)

        got = await self.gw.read(look, request.fresh)
        got.value.stale = got.stale
        got.value.applied_index = got.applied_index
        return got.value

    async def _cycles(
        self, principal: Principal, request: operator_pb2.CyclesRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.CyclesResponse:
        include_closed = request.include_closed

        def image(m: StateMachine) -> bytes:
            # A full detection pass over the replica: seconds on a big state, so in a forked child.
            data: bytes = cycles_response(m.state, include_closed).SerializeToString()
            return data

        got = await self.gw.read_image(lambda m: None, image, request.fresh)
        response: operator_pb2.CyclesResponse = operator_pb2.CyclesResponse.FromString(got.value[1])
        response.stale, response.applied_index = got.stale, got.applied_index
        return response

    async def _explaindecision(
        self, principal: Principal, request: operator_pb2.ExplainDecisionRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.ExplainDecisionResponse:
        if bool(request.decision_id) == bool(request.digest):
            raise convert.WireError("ExplainDecisionRequest: give exactly one of decision_id or digest")
        decision_id, digest = request.decision_id, request.digest

        def look(m: StateMachine) -> operator_pb2.ExplainDecisionResponse:
            return explain_response(m.state, decision_id, digest)

        got = await self.gw.read(look, request.fresh)
        response = got.value
        if not response.decisions and self.gw.history is not None:
            # Not in the live state: it may have retired (statemachine/retire.py); this node's
            # history store kept the whole record.
            retired = await asyncio.to_thread(self.gw.history.decisions, decision_id, digest)
            if retired:
                live = await self.gw.read(lambda m: retired_explain_response(m.state, retired), False)
                response = live.value
        if not response.decisions:
            what = f"decision {decision_id}" if decision_id else f"a decision for digest {digest[:16]}"
            raise not_found("no_decision", f"there is no {what} on this replica, live or in its history")
        response.stale, response.applied_index = got.stale, got.applied_index
        return response

    async def _history(
        self, principal: Principal, request: operator_pb2.HistoryRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.HistoryResponse:
        names = [n for n in (request.run_id, request.execution_id, request.decision_id, request.target_id) if n]
        if len(names) > 1:
            raise convert.WireError(
                "HistoryRequest: give at most one of run_id, execution_id, decision_id or target_id"
            )
        store = self.gw.history
        if store is None:
            raise not_found("no_history", "this node keeps no history store")
        found = await asyncio.to_thread(store.find, names[0] if names else "", _limit(request.limit))
        records, total_bytes = await asyncio.to_thread(store.stats)
        return operator_pb2.HistoryResponse(
            records=[
                operator_pb2.HistoryRecord(
                    kind=r.kind, key=r.key, run_id=r.run_id or "", retired_at_ms=r.retired_at_ms, record_json=r.body
                )
                for r in found
            ],
            node_id=self.gw.cfg.node_id,
            records_total=records,
            bytes_total=total_bytes,
            max_bytes=store.max_bytes,
            max_age_days=int(store.max_age_s // 86_400),
            retention_ms=self.gw.cfg.retention_ms,
        )

    async def _signaturehistory(
        self, principal: Principal, request: operator_pb2.SignatureHistoryRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.SignatureHistoryResponse:
        signature = request.signature.strip().lower()
        if not _SIGNATURE.fullmatch(signature):
            raise convert.WireError("SignatureHistoryRequest.signature: a cycle signature is 16 hex digits")

        def look(m: StateMachine) -> operator_pb2.SignatureHistoryResponse:
            st = m.state
            return operator_pb2.SignatureHistoryResponse(
                trajectory=trajectory_view(st, signature), epoch=st.recovery.epoch
            )

        got = await self.gw.read(look, request.fresh)
        got.value.stale, got.value.applied_index = got.stale, got.applied_index
        return got.value

    async def _listdecisions(
        self, principal: Principal, request: operator_pb2.ListDecisionsRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.ListDecisionsResponse:
        kind = convert.decision_kind_from_wire(request.kind) if request.kind else None
        limit = min(request.limit or DEFAULT_DECISIONS, MAX_DECISIONS)
        run_id = request.run_id

        def look(m: StateMachine) -> operator_pb2.ListDecisionsResponse:
            return list_decisions_response(m.state, run_id, kind, request.since_ms, limit)

        got = await self.gw.read(look, request.fresh)
        got.value.stale, got.value.applied_index = got.stale, got.applied_index
        return got.value

    async def _convergence(
        self, principal: Principal, request: operator_pb2.ConvergenceRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.ConvergenceResponse:
        run_id = request.run_id or None
        got = await self.gw.read(lambda m: convert.convergence_response(convergence(m.state, run_id)), request.fresh)
        got.value.stale, got.value.applied_index = got.stale, got.applied_index
        return got.value

    async def _exportpending(
        self, principal: Principal, request: operator_pb2.ExportPendingRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.ExportPendingResponse:
        def image(m: StateMachine) -> bytes:  # every open edge: in a forked child, like a digest
            return json.dumps(export_pending(m.state), sort_keys=True, separators=(",", ":")).encode()

        got = await self.gw.read_image(lambda m: None, image, request.fresh)
        return operator_pb2.ExportPendingResponse(
            format=EXPORT_FORMAT,
            version=EXPORT_VERSION,
            document_json=got.value[1].decode(),
            stale=got.stale,
            applied_index=got.applied_index,
        )

    async def _exportstate(
        self, principal: Principal, request: operator_pb2.ExportStateRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.ExportStateResponse:
        got = await self.gw.read_image(lambda m: None, lambda m: m.snapshot(), request.fresh)
        snapshot = got.value[1]
        return operator_pb2.ExportStateResponse(
            snapshot=snapshot,
            state_digest=hashlib.sha256(snapshot).hexdigest(),
            stale=got.stale,
            applied_index=got.applied_index,
        )

    # -- membership (cluster/node/raft/_membership.py, cluster/node/membership.py) -------------------

    def _member_views(self, raft: RaftStatus, members: Iterable[Member]) -> list[operator_pb2.MemberView]:
        me = self.gw.cfg.raft_address
        return [
            operator_pb2.MemberView(
                node_id=m.node_id,
                raft_address=m.raft_address,
                grpc_address=m.grpc_address,
                leader=m.raft_address == raft.leader,
                connected=m.raft_address == me or raft.peers_connected.get(m.raft_address, False),
                this_node=m.raft_address == me,
            )
            for m in members
        ]

    async def _listmembers(
        self, principal: Principal, request: operator_pb2.ListMembersRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.ListMembersResponse:
        config = (await self.gw.read(lambda m: m.state.recovery.config, False)).value
        raft = self.gw.node.status()
        return operator_pb2.ListMembersResponse(
            members=self._member_views(raft, raft.members),
            node_id=self.gw.cfg.node_id,
            pending_change_index=raft.membership_pending or 0,
            voters=list(config.voters),
            quorum=config.quorum,
            max_rollback=config.max_rollback,
        )

    async def _addmember(
        self, principal: Principal, request: operator_pb2.AddMemberRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.MemberChangeResponse:
        try:
            validate_name(request.node_id, "node id")
        except Rejection as exc:
            raise convert.WireError(f"AddMemberRequest.node_id: {exc.message}", field="node_id") from None
        for name, value in (("raft_address", request.raft_address), ("grpc_address", request.grpc_address)):
            if (value or name == "raft_address") and not _ADDRESS.fullmatch(value):
                raise convert.WireError(f"AddMemberRequest.{name}: {value!r} is not host:port", field=name)
        return await self._change_members(principal, "add", request.node_id, request.raft_address, request.grpc_address)

    async def _removemember(
        self, principal: Principal, request: operator_pb2.RemoveMemberRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.MemberChangeResponse:
        if not request.node_id:
            raise convert.WireError("RemoveMemberRequest.node_id: required", field="node_id")
        return await self._change_members(principal, "rem", request.node_id, "", "")

    async def _change_members(
        self, principal: Principal, kind: str, node_id: str, raft_address: str, grpc_address: str
    ) -> operator_pb2.MemberChangeResponse:
        gw = self.gw
        node = gw.node
        if not node.is_leader():
            raise NotLeader("membership changes are made by the leader", leader=node.leader_address())
        config = (await gw.read(lambda m: m.state.recovery.config, True)).value
        ids = [m.node_id for m in node.members()]
        after = [*ids, node_id] if kind == "add" else [i for i in ids if i != node_id]
        follow = following_config(config, after)
        if follow is not None and (refusal := recovery_refusal(follow, principal.actor)) is not None:
            raise MembershipRefused(
                "recovery_rule",
                f"recovery's voters would follow to {', '.join(follow.voters)} with quorum {follow.quorum} and "
                f"max_rollback {follow.max_rollback}, which the core refuses: {refusal}. Configure recovery "
                "(ConfigureRecovery) so that the change leaves it valid, then try again",
            )
        rid = f"member:{kind}:{node_id}:{int(time.time() * 1000)}"

        async def configure() -> None:
            if follow is None:
                return
            env = Envelope(actor=principal.actor, at_ms=gw.stamp(), request_id=f"{rid}:voters", command=follow)
            gw.answer(await node.submit(encode_envelope(env)))

        # Added to Raft first and to the voters after; out of the voters first and Raft after.
        members = await node.change_membership(
            kind, node_id, raft_address, grpc_address, before=configure if kind == "rem" else None
        )
        if kind == "add":
            await configure()
        config = (await gw.read(lambda m: m.state.recovery.config, True)).value
        return operator_pb2.MemberChangeResponse(
            members=self._member_views(node.status(), members),
            voters=list(config.voters),
            quorum=config.quorum,
            max_rollback=config.max_rollback,
        )


# -- explanations (ExplainDecision, SignatureHistory; call under the replica's lock) ---------------------


def _rolled_back(d: Decision) -> list[tuple[str, int]]:
    """(execution id, generation) of every member the decision rolled back (cancelled)."""
    if d.epoch is None:
        return []  # shadow, reconciliation, escalation: nothing was cancelled
    gens = {s.execution_id: s.generation for s in d.scores}
    wanted = "victim" if d.kind is DecisionKind.VICTIM else "rolled_back"
    return [(e, gens[e]) for e, role in d.roles if role == wanted]


def decision_response_view(st: State, d: Decision) -> operator_pb2.DecisionView:
    """The decision as recorded, with its rolled-back members' cancellations as they stand now."""
    book = st.cancel
    views = []
    for execution_id, generation in _rolled_back(d):
        scope = book.scopes.get(victim_scope_id(execution_id, generation))
        if scope is not None:
            quarantined = sum(1 for e in sorted(scope.pending) if book.requests[e].quarantined_at_ms is not None)
            views.append(convert.cancellation_view(scope, quarantined))
    return convert.decision_view(d, views)


def trajectory_view(st: State, signature: str) -> operator_pb2.TrajectoryView:
    rb = st.recovery
    decisions = [d for d in rb.decisions.values() if d.signature == signature][-MAX_SIGNATURE_DECISIONS:]
    known = signature in rb.trajectory
    guard = livelock_reason(rb, signature, st.now_ms) if known else None
    return convert.trajectory_view(signature, rb.trajectory.get(signature), decisions, guard)


DEFAULT_DECISIONS = 100
MAX_DECISIONS = 1000


def list_decisions_response(
    st: State, run_id: str, kind: DecisionKind | None, since_ms: int, limit: int
) -> operator_pb2.ListDecisionsResponse:
    """The recorded decisions that pass the filters, newest first, at most ``limit``."""
    decisions = st.recovery.decisions
    executions = st.executions
    found: list[Decision] = []
    truncated = False
    for d in reversed(decisions.values()):  # log order: reversed is newest first
        if (kind is not None and d.kind is not kind) or d.at_ms < since_ms:
            continue
        if run_id and not any(
            (ex := executions.get(execution_id)) is not None and ex.run_id == run_id for execution_id, _ in d.roles
        ):
            continue
        if len(found) == limit:
            truncated = True
            break
        found.append(d)
    return operator_pb2.ListDecisionsResponse(
        decisions=[decision_response_view(st, d) for d in found],
        truncated=truncated,
        epoch=st.recovery.epoch,
        retained=len(decisions),
    )


def retired_explain_response(st: State, retired: list[tuple[Decision, int]]) -> operator_pb2.ExplainDecisionResponse:
    """Retired decisions (from the history store), each marked with when it retired, and their
    signatures' trajectories as the live state has them now (forgotten ones show as unknown)."""
    signatures = list(dict.fromkeys(d.signature for d, _ in retired))
    return operator_pb2.ExplainDecisionResponse(
        decisions=[convert.decision_view(d, retired_at_ms=at) for d, at in retired],
        trajectories=[trajectory_view(st, sig) for sig in signatures],
        epoch=st.recovery.epoch,
    )


def explain_response(st: State, decision_id: str, digest: str) -> operator_pb2.ExplainDecisionResponse:
    """The decisions asked for (by id, or every one for a digest), each signature's trajectory."""
    decisions = st.recovery.decisions
    if decision_id:
        found = [decisions[decision_id]] if decision_id in decisions else []
    else:
        found = [d for d in decisions.values() if d.digest == digest]
    signatures = list(dict.fromkeys(d.signature for d in found))
    return operator_pb2.ExplainDecisionResponse(
        decisions=[decision_response_view(st, d) for d in found],
        trajectories=[trajectory_view(st, sig) for sig in signatures],
        epoch=st.recovery.epoch,
    )
