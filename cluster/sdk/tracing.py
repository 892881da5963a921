"""The agent's side of tracing (docs/observability.md): a client span per RPC, a span per wait,
and the trace context on every call.

Rules kept here:
- Every function is a no-op returning None or the metadata it was given when tracing is off
  (:func:`waitgraph.wire.tracing.tracer` is None): one call on the hot path, nothing allocated.
- The caller's context travels even when this process records nothing: a ``traceparent`` the
  caller has (an MCP request's ``_meta``, an application that only propagates) is sent as is.
- A wait's span starts when the SDK first registers the wait and ends when the wait closes, with
  the reason; the traceparent the cluster stores with the edge is that span's, so the recovery
  that breaks a cycle through it links to it. An unsampled wait stores nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

import grpc

from waitgraph.wire import tracing

T = TypeVar("T")

__all__ = [
    "WaitSpan",
    "attached",
    "call",
    "caller_traceparent",
    "client_span",
    "current_context",
    "end_client_span",
    "with_context",
]

Metadata = tuple[tuple[str, str], ...]

AGENT_SERVICE = "waitgraph.v1.AgentService"
OPERATOR_SERVICE = "waitgraph.v1.OperatorService"


def client_span(method: str, address: str, links: list[Any] | None = None, parent: Any = None) -> Any | None:
    """A started CLIENT span for one call of ``method`` (``waitgraph.v1.Service/Method``) to
    ``address``, child of the current span (or of ``parent``, a context); None when off."""
    tracer = tracing.tracer()
    if tracer is None:
        return None
    from opentelemetry.trace import SpanKind

    return tracer.start_span(
        method, context=parent, kind=SpanKind.CLIENT, attributes=tracing.rpc_attributes(method, address), links=links
    )


def end_client_span(span: Any | None, code_name: str) -> None:
    """End a span of :func:`client_span` with the call's gRPC status code name (``OK``...)."""
    if span is not None:
        tracing.end_rpc_span(span, code_name, server=False)


def with_context(metadata: Metadata, span: Any | None) -> Metadata:
    """``metadata`` plus the trace context of ``span`` (or, without one, of the caller's current
    span, which this process may not record: it is forwarded all the same)."""
    if span is not None:
        from opentelemetry import trace

        extra = tracing.inject(trace.set_span_in_context(span))
    else:
        extra = tracing.inject()
    return metadata + extra if extra else metadata


def call(
    invoke: Callable[[Metadata], Awaitable[T]],
    method: str,
    address: str,
    metadata: Metadata,
    links: list[Any] | None = None,
    parent: Any = None,
) -> Awaitable[T]:
    """``invoke(metadata)`` (one gRPC call of ``method`` to ``address``) inside its client span,
    with the trace context added to ``metadata``; when off, the call itself (no frame of ours),
    with the caller's context in the metadata if it has one."""
    span = client_span(method, address, links, parent)
    md = with_context(metadata, span)
    if span is None:
        return invoke(md)
    return _spanned(invoke(md), span)


async def _spanned(call: Awaitable[T], span: Any) -> T:
    try:
        reply = await call
    except grpc.aio.AioRpcError as exc:
        end_client_span(span, exc.code().name)
        raise
    except asyncio.CancelledError:
        end_client_span(span, "CANCELLED")
        raise
    except BaseException:
        end_client_span(span, "UNKNOWN")
        raise
    end_client_span(span, "OK")
    return reply


def current_context() -> Any | None:
    """The caller's OpenTelemetry context when it has a valid span (a batch links to it)."""
    trace = tracing.trace_api()
    if trace is None:
        return None
    from opentelemetry import context

    ctx = context.get_current()
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def caller_traceparent() -> str:
    """The caller's current span's traceparent when it is sampled, else ``""``: what a wait stores
    when this process records no span of its own but its caller traces (an MCP request's context)."""
    trace = tracing.trace_api()
    return "" if trace is None else tracing.traceparent(trace.get_current_span())


def link_to(ctx: Any) -> Any:
    from opentelemetry import trace
    from opentelemetry.trace import Link

    return Link(trace.get_current_span(ctx).get_span_context())


@contextlib.contextmanager
def attached(carrier: Mapping[str, Any] | None) -> Iterator[None]:
    """Run the block in the trace context a W3C ``carrier`` names (an MCP request's ``_meta``):
    its calls carry it on; without a valid ``traceparent`` the block runs as it would."""
    ctx = tracing.extract_carrier({k: v for k, v in carrier.items() if isinstance(v, str)}) if carrier else None
    if ctx is None:
        yield
        return
    from opentelemetry import context

    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)


class WaitSpan:
    """The span of one wait, ``waitgraph.wait``: from the first registration to the close.

    Attributes: ``gen_ai.agent.id`` (the session's agent), ``waitgraph.execution.id``,
    ``waitgraph.execution.generation``, ``waitgraph.wait.target_id``, ``waitgraph.wait.edge_id``,
    ``waitgraph.wait.edge_version``, and at the end ``waitgraph.wait.close_reason``. A wait closed
    by a deadlock decision gets the event ``waitgraph.decision`` (decision id, epoch, role, digest).
    """

    __slots__ = ("_ended", "span", "traceparent")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.traceparent = tracing.traceparent(span)
        """What the cluster stores with the edge: empty when the span is not sampled."""
        self._ended = False

    @classmethod
    def start(
        cls, agent_id: str, execution_id: str, generation: int, target_id: str, tracer: Any = None
    ) -> WaitSpan | None:
        """The wait's span, child of the current span; None when tracing is off (``tracer``:
        this one instead of waitgraph's)."""
        tracer = tracer if tracer is not None else tracing.tracer()
        if tracer is None:
            return None
        span = tracer.start_span(
            "waitgraph.wait",
            attributes={
                "gen_ai.agent.id": agent_id,
                "waitgraph.execution.id": execution_id,
                "waitgraph.execution.generation": generation,
                "waitgraph.wait.target_id": target_id,
                "waitgraph.wait.edge_id": f"{execution_id}>{target_id}",
            },
        )
        return cls(span)

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The wait's span is the current one inside the block (its RPCs are its children)."""
        from opentelemetry import trace

        with trace.use_span(self.span, end_on_exit=False):
            yield

    def registered(self, edge_version: int) -> None:
        if not self._ended:
            self.span.set_attribute("waitgraph.wait.edge_version", edge_version)

    def decision(
        self, role: str, decision_id: str | None, epoch: int | None, digest: str | None, winner_id: str | None = None
    ) -> None:
        """The event of a recovery that decided about this wait's execution: ``role`` is
        ``victim``, ``rolled_back``, ``yielded`` (it lost a tie-break) or ``kept`` (another
        member was rolled back; this wait closed because of it)."""
        if self._ended:
            return
        attrs: dict[str, str | int] = {"waitgraph.decision.role": role}
        if decision_id is not None:
            attrs["waitgraph.decision.id"] = decision_id
        if epoch is not None:
            attrs["waitgraph.decision.epoch"] = epoch
        if digest:
            attrs["waitgraph.decision.digest"] = digest
        if winner_id:
            attrs["waitgraph.decision.winner_id"] = winner_id
        self.span.add_event("waitgraph.decision", attrs)

    def end(self, close_reason: str, error: str | None = None) -> None:
        """End the span once (later calls are ignored): the reason the wait closed, and the error
        that ended it when it did not close normally."""
        if self._ended:
            return
        self._ended = True
        self.span.set_attribute("waitgraph.wait.close_reason", close_reason)
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            self.span.set_attribute("error.type", error)
            self.span.set_status(Status(StatusCode.ERROR, close_reason))
        self.span.end()
