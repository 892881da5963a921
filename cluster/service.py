"""AgentService and OperatorService over one node: auth, conversion, submit, and the error table.

Rules kept here:
- Every handler does the same few steps, in one wrapper: authenticate the bearer token and check
  the role against :data:`cluster.auth.POLICY`; convert the request (:mod:`cluster.convert`, the
  only place that knows the wire); propose or read; turn any error into a gRPC status through
  :mod:`cluster.grpc_status` (the only place that knows the codes).
- A write stamps its envelope here and nowhere else: the actor from the token, ``at_ms`` from this
  node's clock, read once. The envelope is encoded and decoded again before it is proposed, so
  whatever the codec refuses (an oversize text, too many items) is INVALID_ARGUMENT without a log
  entry. A REJECTED outcome is a gRPC error; APPLIED and NOOP are OK responses.
- Reads run on this replica and say so (``stale``), unless the caller asked for ``fresh``: then a
  barrier goes through the log first.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc
from google.protobuf.message import Message

from proto.waitgraph.v1 import agent_pb2, agent_pb2_grpc, operator_pb2, operator_pb2_grpc, types_pb2
from statemachine import Envelope, StateMachine, decode_envelope, encode_envelope
from statemachine.cancel import EXPORT_FORMAT, EXPORT_VERSION, cancel_state, export_pending, metrics
from statemachine.codec import MAX_PAYLOAD_BYTES
from statemachine.detect import full_pass
from statemachine.effects import EFFECTS
from statemachine.errors import CodecError, Rejection, Status, WaitgraphError, not_found
from statemachine.outcome import Result
from statemachine.recovery_state import ProposalStatus
from statemachine.state import State

from . import convert, grpc_status
from .auth import Principal, Role, authorize
from .config import ServeConfig
from .errors import NotLeader
from .events import CursorExpired, EventJournal
from .raft import RaftNode, Read

logger = logging.getLogger("waitgraph.cluster.service")

T = TypeVar("T")
Handler = Callable[[Principal, Any, grpc.aio.ServicerContext], Awaitable[Message]]

DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
WATCH_BATCH = 512
PROGRESS_INTERVAL_S = 1.0
"""A watcher whose filter matched nothing for this long gets a ``progress`` with its position."""
_EFFECT_KINDS = frozenset(cls.KIND for cls in EFFECTS)
_SESSION_RPCS = frozenset({"JoinSession", "Heartbeat", "LeaveSession"})


class Gateway:
    """What both services share: the node, the auth check, the write path, the read path."""

    def __init__(
        self, cfg: ServeConfig, node: RaftNode, journal: EventJournal, clock: Callable[[], float] = time.time
    ) -> None:
        self.cfg = cfg
        self.node = node
        self.journal = journal
        self.clock = clock

    # -- the wrapper -------------------------------------------------------------------------------

    def principal(self, context: grpc.aio.ServicerContext, method: str) -> Principal:
        principal = self.cfg.tokens.authenticate(context.invocation_metadata() or (), self.clock())
        authorize(principal, method)
        return principal

    def leader_hint(self) -> grpc_status.LeaderHint | None:
        try:
            address = self.node.leader_address()
        except Exception:
            return None
        peer = self.cfg.peer_by_raft(address)
        if peer is None:
            return None
        return grpc_status.LeaderHint(peer.node_id, peer.grpc_address)

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
                return await fn(self.principal(context, method), request, context)
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

    async def write(self, principal: Principal, rpc: str, request: Any) -> types_pb2.Outcome:
        size = request.ByteSize()
        if size > MAX_PAYLOAD_BYTES:
            raise convert.WireError(f"the request is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}")
        if principal.role is Role.AGENT and rpc in _SESSION_RPCS and not request.HasField("agent_id"):
            request.agent_id = principal.agent_id  # the token names the agent already
        command = convert.command_from_request(rpc, request)
        envelope = Envelope(
            actor=principal.actor,
            at_ms=int(self.clock() * 1000),
            request_id=request.request_id or None,
            command=command,
        )
        data = encode_envelope(envelope)
        try:
            if len(data) > MAX_PAYLOAD_BYTES:
                raise CodecError(f"the command is {len(data)} bytes encoded; the limit is {MAX_PAYLOAD_BYTES}")
            decode_envelope(data)
        except CodecError as exc:
            raise convert.WireError(exc.message, **exc.fields) from None
        if not self.cfg.forward_writes and not self.node.is_leader():
            raise NotLeader(
                "this node is not the leader and does not forward writes", leader=self.node.leader_address()
            )
        outcome = await self.node.submit(data)
        if outcome.result is Result.REJECTED:
            raise grpc_status.Rejected(outcome)
        return convert.outcome_to_proto(outcome)

    # -- reads ---------------------------------------------------------------------------------------

    async def read(self, fn: Callable[[StateMachine], T], fresh: bool) -> Read[T]:
        if fresh:
            return await self.node.read_fresh(fn)
        return await self.node.read_local(fn)


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

    async def WatchEvents(
        self, request: agent_pb2.WatchEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[agent_pb2.WatchEventsResponse]:
        gw, journal = self.gw, self.gw.journal
        failure: BaseException | None = None
        try:
            principal = gw.principal(context, "/waitgraph.v1.AgentService/WatchEvents")
            agent = self._agent_filter(principal, request)
            kinds = frozenset(request.kinds)
            unknown = sorted(kinds - _EFFECT_KINDS)
            if unknown:
                raise convert.WireError(f"WatchEventsRequest.kinds: unknown effect kinds {unknown}")
            head, horizon = journal.position()
            after = request.after_cursor if request.HasField("after_cursor") else head
            if after < horizon:
                journal.read(after, 1)  # raises CursorExpired with the explanation
        except Exception as exc:
            failure = exc
        if failure is not None:
            await gw.abort(context, failure)
            return
        yield agent_pb2.WatchEventsResponse(started=agent_pb2.WatchPosition(cursor=after, horizon=horizon))
        reported, last_message = after, time.monotonic()
        while not journal.closed:
            try:
                batch, reached = journal.read(after, WATCH_BATCH)
            except CursorExpired as exc:
                await gw.abort(context, exc)
                return
            for ev in batch:
                if (agent is None or agent in ev.agent_ids) and (not kinds or ev.effect.KIND in kinds):
                    yield agent_pb2.WatchEventsResponse(event=convert.event_to_proto(ev))
                    reported, last_message = ev.cursor, time.monotonic()
            after = reached
            if len(batch) == WATCH_BATCH:
                continue
            if after > reported and time.monotonic() - last_message >= PROGRESS_INTERVAL_S:
                horizon = journal.position()[1]
                yield agent_pb2.WatchEventsResponse(progress=agent_pb2.WatchPosition(cursor=after, horizon=horizon))
                reported, last_message = after, time.monotonic()
            await journal.wait(after, PROGRESS_INTERVAL_S)
        await context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f"the node is stopping; watch again (on another node) after cursor {after}",
        )

    @staticmethod
    def _agent_filter(principal: Principal, request: agent_pb2.WatchEventsRequest) -> str | None:
        if principal.role is Role.AGENT:
            if request.agent_id and request.agent_id != principal.agent_id:
                raise Rejection(
                    Status.PERMISSION_DENIED,
                    "not_owner",
                    f"an agent token may only watch its own events, not {request.agent_id}",
                )
            return principal.agent_id
        return request.agent_id or None


# -- OperatorService -------------------------------------------------------------------------------------


class OperatorServicer(operator_pb2_grpc.OperatorServiceServicer):
    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        _install_writes(self, gateway, "OperatorService", convert.OPERATOR_WRITES)
        for rpc in ("Status", "Graph", "Cycles", "ExplainDecision", "ExportPending"):
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
                state_digest=m.digest() if include_digest else "",
            )

        got = await gw.read(look, request.fresh)
        raft = gw.node.status()
        hint = gw.leader_hint()
        head, horizon = gw.journal.position()
        values = got.value
        mode = values.pop("mode")
        peers = []
        for p in gw.cfg.peers:
            if p.node_id == gw.cfg.node_id:
                continue
            peers.append(
                operator_pb2.PeerStatus(
                    node_id=p.node_id,
                    raft_address=p.raft_address,
                    grpc_address=p.grpc_address or "",
                    connected=raft.peers_connected.get(p.raft_address, False),
                )
            )
        return operator_pb2.StatusResponse(
            node_id=gw.cfg.node_id,
            raft_address=gw.cfg.raft_address,
            grpc_address=gw.cfg.grpc_address,
            role=raft.role,
            leader_id=(hint.node_id or "") if hint else "",
            leader_address=(hint.grpc_address or "") if hint else "",
            term=raft.term,
            commit_index=raft.commit_index,
            applied_index=got.applied_index,
            has_quorum=raft.has_quorum,
            ready=raft.ready,
            mode=cast(Any, convert.enum_number(mode)),
            stale=got.stale,
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

        def look(m: StateMachine) -> operator_pb2.GraphResponse:
            st: State = m.state
            truncated = False

            def cap(items: list[Any]) -> list[Any]:
                nonlocal truncated
                if len(items) > limit:
                    truncated = True
                    return items[:limit]
                return items

            execs = [
                ex
                for _, ex in sorted(st.executions.items())
                if (run_id is None or ex.run_id == run_id) and (agent_id is None or ex.agent_id == agent_id)
            ]
            execs = cap(execs)
            filtered = run_id is not None or agent_id is not None
            waits = (
                [e for ex in execs for e in st.waits_of(ex.execution_id)]
                if filtered
                else [e for w in sorted(st.waits_by_waiter) for e in st.waits_of(w)]
            )
            if filtered:
                wanted = {e.target_id for e in waits} | {
                    t for ex in execs for t in st.satisfies.get(ex.execution_id, ())
                }
                targets = [st.targets[t] for t in sorted(wanted) if t in st.targets]
            else:
                targets = [t for _, t in sorted(st.targets.items())]
            sessions = [s for a, s in sorted(st.sessions.items()) if agent_id is None or a == agent_id]
            runs = [r for k, r in sorted(st.runs.items()) if run_id is None or k == run_id]
            return operator_pb2.GraphResponse(
                executions=[convert.execution_view(ex) for ex in execs],
                waits=[convert.wait_view(e) for e in cap(waits)],
                targets=[convert.target_view(t) for t in cap(targets)],
                sessions=[convert.session_view(s) for s in cap(sessions)],
                runs=[convert.run_view(r, cancel_state(st, r.run_id)) for r in cap(runs)],
                truncated=truncated,
                epoch=st.recovery.epoch,
            )

        got = await self.gw.read(look, request.fresh)
        got.value.stale = got.stale
        got.value.applied_index = got.applied_index
        return got.value

    async def _cycles(
        self, principal: Principal, request: operator_pb2.CyclesRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.CyclesResponse:
        include_closed = request.include_closed

        def look(m: StateMachine) -> operator_pb2.CyclesResponse:
            st = m.state
            rb = st.recovery
            cycles = []
            for c in full_pass(st):
                p = rb.proposals.get(c.digest)
                cycles.append(convert.cycle_view(c, p.status if p is not None else None))
            proposals = [p for p in rb.proposals.values() if include_closed or p.status is ProposalStatus.OPEN]
            return operator_pb2.CyclesResponse(
                cycles=cycles,
                proposals=[convert.proposal_view(p) for p in proposals[-MAX_LIMIT // 10 :]],
                epoch=rb.epoch,
            )

        got = await self.gw.read(look, request.fresh)
        got.value.stale = got.stale
        got.value.applied_index = got.applied_index
        return got.value

    async def _explaindecision(
        self, principal: Principal, request: operator_pb2.ExplainDecisionRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.ExplainDecisionResponse:
        if bool(request.decision_id) == bool(request.digest):
            raise convert.WireError("ExplainDecisionRequest: give exactly one of decision_id or digest")
        decision_id, digest = request.decision_id, request.digest

        def look(m: StateMachine) -> list[operator_pb2.DecisionView]:
            decisions = m.state.recovery.decisions
            if decision_id:
                found = [decisions[decision_id]] if decision_id in decisions else []
            else:
                found = [d for d in decisions.values() if d.digest == digest]
            return [convert.decision_view(d) for d in found]

        got = await self.gw.read(look, request.fresh)
        if not got.value:
            what = f"decision {decision_id}" if decision_id else f"a decision for digest {digest[:16]}"
            raise not_found("no_decision", f"there is no {what} on this replica")
        return operator_pb2.ExplainDecisionResponse(
            decisions=got.value, stale=got.stale, applied_index=got.applied_index
        )

    async def _exportpending(
        self, principal: Principal, request: operator_pb2.ExportPendingRequest, context: grpc.aio.ServicerContext
    ) -> operator_pb2.ExportPendingResponse:
        got = await self.gw.read(lambda m: export_pending(m.state), request.fresh)
        return operator_pb2.ExportPendingResponse(
            format=EXPORT_FORMAT,
            version=EXPORT_VERSION,
            document_json=json.dumps(got.value, sort_keys=True, separators=(",", ":")),
            stale=got.stale,
            applied_index=got.applied_index,
        )
