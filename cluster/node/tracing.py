"""The node's spans (docs/observability.md): a server span per traced RPC and one span per recovery.

Rules kept here:
- Off unless configured (:func:`waitgraph.wire.tracing.configure`, from the ``OTEL_*`` variables
  at start): every hook returns at its first line.
- Server spans are made where the handler runs, for the Python server and for the native front's
  relayed calls alike (the front moves bytes; the caller's metadata arrives with the call), and only
  for a caller that sent a ``traceparent``: an untraced caller's calls start no trace here, and a
  traced one's sampled flag decides (the SDK's parent-based sampler).
- A recovery is one span, ``waitgraph.recovery``, from the proposal's apply to the commit, rejection
  or retraction, made when it ends by the node that proposed the command that ended it (its
  envelope's actor is ``node:<id>``; for a command of an operator or an agent, the node that is
  leader then): exactly one node, whatever happened to leadership meanwhile. Its start, votes and
  links are noted on every replica as it applies the proposal, so a new leader after a failover
  ends the span the old one began. The links are the trace contexts stored with the member waits
  (``WaitEdge.trace_context``), read from this replica's state.
- Notes are kept on the Raft tick thread inside apply (``on_applied``): plain appends, bounded; the
  span is built and handed to the batch processor there too (it exports from its own thread).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from waitgraph.statemachine import Envelope, Outcome
from waitgraph.statemachine.commands import ProposeRecovery
from waitgraph.statemachine.effects import (
    EpochCommitted,
    RecoveryProposed,
    RecoveryRejected,
    RecoveryRetracted,
    VictimChosen,
    VoteRecorded,
)
from waitgraph.statemachine.state import State
from waitgraph.wire import tracing

logger = logging.getLogger("waitgraph.node.tracing")

MAX_OPEN = 10_000
"""Recoveries noted at once; beyond it the oldest note goes (its span, if it ends, has no start)."""


def configure(node_id: str) -> bool:
    """Tracing for this node from the ``OTEL_*`` variables (service ``waitgraph-node``, the node id
    as ``service.instance.id``); True when its spans are recorded."""
    try:
        on = tracing.configure("waitgraph-node", {"service.instance.id": node_id})
    except Exception:  # a bad exporter setting must not keep the node from serving
        logger.exception("tracing is not configured")
        return False
    if on:
        logger.info("tracing on: spans go where the OTEL_* variables say (docs/observability.md)")
    return on


def shutdown() -> None:
    tracing.shutdown()


# -- server spans -------------------------------------------------------------------------------------


def _code_name(context: Any) -> str:
    try:
        code = context.code()
    except (AttributeError, NotImplementedError):
        code = None
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    return "UNKNOWN" if code else "OK"


def server_unary(
    full: str, behavior: Callable[..., Awaitable[Any]], tracer_of: Callable[[], Any] = tracing.tracer
) -> Callable[..., Awaitable[Any]]:
    """``behavior`` (a unary handler of ``full``, ``waitgraph.v1.Service/Method``) in a SERVER
    span that is the child of the caller's span named in the call's metadata; ``tracer_of`` gives
    the tracer (None: off)."""
    method = full.lstrip("/")
    attributes = tracing.rpc_attributes(method)

    async def traced(request: Any, context: Any) -> Any:
        tracer = tracer_of()
        parent = tracing.extract(context.invocation_metadata() or ()) if tracer is not None else None
        if tracer is None or parent is None:
            return await behavior(request, context)
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        span = tracer.start_span(method, context=parent, kind=SpanKind.SERVER, attributes=attributes)
        code = "UNKNOWN"
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                response = await behavior(request, context)
            code = _code_name(context)
            return response
        except grpc.aio.AbortError:
            code = _code_name(context)
            raise
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        finally:
            tracing.end_rpc_span(span, code, server=True)

    return traced


def wrap(full: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` with :func:`server_unary` around it when unary; streams as they are (a stream
    lives as long as its client: no span)."""
    if handler.unary_unary is None:
        return handler
    return grpc.unary_unary_rpc_method_handler(
        server_unary(full, handler.unary_unary),
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class ServerSpans(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """:func:`wrap` as an interceptor of the Python gRPC server (the front's relay wraps directly)."""

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or tracing.tracer() is None:
            return handler
        full = str(handler_call_details.method).lstrip("/")
        known = self._wrapped.get(full)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = wrap(full, handler)
        if len(self._wrapped) < 256:  # bounded: a client's made-up names are wrapped each time
            self._wrapped[full] = (handler, wrapped)
        return wrapped


# -- recovery spans ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Note:
    """What this replica saw of one open recovery."""

    start_ns: int
    members: tuple[str, ...]
    epoch_proposed: int
    signature: str
    links: list[str]
    """The stored traceparents of the member waits, in the candidate's edge order."""
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)


def member_trace_contexts(state: State, edge_ids: tuple[str, ...] | list[str]) -> list[str]:
    """The trace contexts stored with the open edges named (``<waiter>><target>``), in order."""
    found = []
    for eid in edge_ids:
        waiter, _, target = eid.partition(">")
        edge = state.wait(waiter, target)
        if edge is not None and edge.trace_context:
            found.append(edge.trace_context)
    return found


class RecoverySpans:
    """Notes every recovery as it applies and makes its span where it ends (module rules)."""

    def __init__(
        self,
        is_leader: Callable[[], bool],
        node_id: str,
        clock: Callable[[], int] = time.time_ns,
        tracer_of: Callable[[], Any] = tracing.tracer,
    ) -> None:
        self.is_leader = is_leader
        self.node_id = node_id
        self.actor = f"node:{node_id}"
        self.clock = clock
        self.tracer_of = tracer_of
        self._notes: dict[str, _Note] = {}
        self._lock = threading.Lock()
        self.enabled = False
        """Set once the node configured tracing (:func:`configure`); until then nothing is noted."""
        self.spans_ended = 0

    def applied(self, env: Envelope, out: Outcome, state: State) -> None:
        """The ``on_applied`` hook (the Raft tick thread, after each applied envelope)."""
        if not self.enabled or out.duplicate or not out.effects:
            return
        tracer = self.tracer_of()
        if tracer is None:
            return
        now = self.clock()
        ended: list[tuple[str, _Note, str]] = []
        with self._lock:
            for fx in out.effects:
                match fx:
                    case RecoveryProposed():
                        self._propose(fx, env, state, now)
                    case VoteRecorded():
                        self._event(fx.digest, "waitgraph.recovery.vote", now, {
                            "waitgraph.vote.voter": fx.voter,
                            "waitgraph.vote.approve": fx.approve,
                            "waitgraph.vote.approvals": fx.approvals,
                            "waitgraph.vote.quorum": fx.quorum,
                        })  # fmt: skip
                    case EpochCommitted():
                        self._event(fx.digest, "waitgraph.recovery.commit", now, {"waitgraph.epoch": fx.epoch})
                    case VictimChosen():
                        note = self._note(fx, env, state, now)
                        attrs = note.attributes
                        attrs["waitgraph.decision.id"] = fx.decision_id
                        attrs["waitgraph.decision.kind"] = fx.decision_kind
                        attrs["waitgraph.recovery.remedy"] = _remedy(state, fx)
                        attrs["waitgraph.recovery.mode"] = fx.mode
                        if fx.epoch is not None:
                            attrs["waitgraph.epoch"] = fx.epoch
                        if fx.execution_id is not None:
                            attrs["waitgraph.recovery.victim" if fx.decision_kind != "TIE_BREAK" else
                                  "waitgraph.recovery.winner"] = fx.execution_id  # fmt: skip
                        ended.append((fx.digest, note, "decided"))
                    case RecoveryRejected():
                        ended.append((fx.digest, self._note(fx, env, state, now), "rejected"))
                    case RecoveryRetracted():
                        note = self._note(fx, env, state, now)
                        note.attributes["waitgraph.recovery.retraction"] = fx.reason
                        ended.append((fx.digest, note, "retracted"))
                    case _:
                        pass
            for digest, _, _ in ended:
                self._notes.pop(digest, None)
        if not ended:
            return
        mine = env.actor == self.actor if env.actor.startswith("node:") else self.is_leader()
        if not mine:
            return  # another node ends it (module rules)
        for digest, note, outcome in ended:
            self._span(tracer, digest, note, outcome, now)

    def _propose(self, fx: RecoveryProposed, env: Envelope, state: State, now: int) -> None:
        cmd = env.command
        edges = cmd.edge_ids if isinstance(cmd, ProposeRecovery) else ()
        self._notes[fx.digest] = _Note(
            now, fx.members, fx.epoch_proposed, fx.signature, member_trace_contexts(state, edges)
        )
        self._event(fx.digest, "waitgraph.recovery.propose", now, {"waitgraph.recovery.proposer": env.actor})
        if len(self._notes) > MAX_OPEN:
            del self._notes[next(iter(self._notes))]

    def _note(self, fx: Any, env: Envelope, state: State, now: int) -> _Note:
        """The note of ``fx.digest``, or one made now from what the state still says (a recovery
        proposed before this node restored a snapshot, or retracted in its own proposal)."""
        note = self._notes.get(fx.digest)
        if note is not None:
            return note
        p = state.recovery.proposals.get(fx.digest)
        cmd = env.command
        if p is not None:
            edges: tuple[str, ...] | list[str] = [e for e, _ in p.edges]
            members = tuple(m for m, _ in p.members)
            epoch, signature = p.epoch_proposed, p.signature
        else:
            edges = cmd.edge_ids if isinstance(cmd, ProposeRecovery) else ()
            members = cmd.member_ids if isinstance(cmd, ProposeRecovery) else ()
            epoch, signature = 0, ""
        note = self._notes[fx.digest] = _Note(now, members, epoch, signature, member_trace_contexts(state, edges))
        return note

    def _event(self, digest: str, name: str, now: int, attrs: dict[str, Any]) -> None:
        note = self._notes.get(digest)
        if note is not None:
            note.events.append((name, now, attrs))

    def _span(self, tracer: Any, digest: str, note: _Note, outcome: str, now: int) -> None:
        from opentelemetry.trace import Link, SpanKind

        links = []
        for tp in dict.fromkeys(note.links):
            sc = tracing.span_context(tp)
            if sc is not None:
                links.append(Link(sc, {"waitgraph.link": "member_wait"}))
        attributes = {
            "waitgraph.recovery.digest": digest,
            "waitgraph.recovery.signature": note.signature,
            "waitgraph.recovery.members": list(note.members),
            "waitgraph.recovery.epoch_proposed": note.epoch_proposed,
            "waitgraph.recovery.outcome": outcome,
            "waitgraph.node.id": self.node_id,
            **note.attributes,
        }
        # A root span: it belongs to no caller, and links to every member's wait instead.
        from opentelemetry.context import Context

        span = tracer.start_span(
            "waitgraph.recovery",
            context=Context(),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
            start_time=note.start_ns,
        )
        for name, at, attrs in note.events:
            span.add_event(name, attrs, timestamp=at)
        span.end(end_time=max(now, note.start_ns))
        self.spans_ended += 1


def _remedy(state: State, fx: VictimChosen) -> str:
    """The remedy the decision applied (``prevent``, ``reorder``, ``reassign``, ``victim``), or its
    kind in lower case when it applied none of them (shadow, escalation, reconciliation)."""
    d = state.recovery.decisions.get(fx.decision_id)
    if d is not None:
        for remedy, outcome, _ in d.remedies:
            if outcome == "applied":
                return remedy
    return fx.decision_kind.lower()
