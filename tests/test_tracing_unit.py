"""Tracing's parts without a cluster (docs/observability.md): the W3C context as metadata, what a
wait stores, the SDK's wait span, the node's server span and recovery span. Each part is given its
own tracer (an in-memory exporter), never the process's global provider."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="the [otel] extra")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState

from waitgraph.node import tracing as node_tracing
from waitgraph.sdk import tracing as sdk_tracing
from waitgraph.statemachine import Envelope, Outcome, StateMachine
from waitgraph.statemachine.commands import CloseWait
from waitgraph.statemachine.effects import RecoveryRetracted
from waitgraph.wire import tracing

from .world import World

TRACE_ID, SPAN_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def spans() -> tuple[Any, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def remote(sampled: bool = True, state: str = "") -> Any:
    sc = SpanContext(
        TRACE_ID,
        SPAN_ID,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED if sampled else 0),
        trace_state=TraceState.from_header([state]) if state else TraceState(),
    )
    return trace.set_span_in_context(NonRecordingSpan(sc))


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, False),
    ],
)
def test_only_the_otel_variables_turn_export_on(env: dict[str, str], on: bool) -> None:
    assert tracing.env_configured(env) is on


def test_context_travels_as_w3c_metadata_and_back() -> None:
    md = tracing.inject(remote(state="vendor=x"))
    assert md == (("traceparent", TRACEPARENT), ("tracestate", "vendor=x"))
    ctx = tracing.extract((("authorization", "Bearer t"), *md))
    sc = trace.get_current_span(ctx).get_span_context()
    assert (sc.trace_id, sc.span_id, sc.trace_flags.sampled) == (TRACE_ID, SPAN_ID, True)
    assert sc.trace_state.get("vendor") == "x"
    assert tracing.extract((("traceparent", "garbage"),)) is None
    assert tracing.inject(trace.set_span_in_context(trace.INVALID_SPAN)) == ()


def test_a_wait_stores_only_a_sampled_context() -> None:
    assert tracing.traceparent(trace.get_current_span(remote(sampled=True))) == TRACEPARENT
    assert tracing.traceparent(trace.get_current_span(remote(sampled=False))) == ""
    sc = tracing.span_context(TRACEPARENT)
    assert sc is not None and (sc.trace_id, sc.span_id) == (TRACE_ID, SPAN_ID)
    assert tracing.span_context("") is None


def test_an_mcp_meta_becomes_the_callers_context() -> None:
    assert sdk_tracing.caller_traceparent() == ""
    with sdk_tracing.attached({"traceparent": TRACEPARENT, "progressToken": 3}):
        assert sdk_tracing.caller_traceparent() == TRACEPARENT
        assert sdk_tracing.with_context((("authorization", "x"),), None) == (
            ("authorization", "x"),
            ("traceparent", TRACEPARENT),
        )
    assert sdk_tracing.caller_traceparent() == ""
    with sdk_tracing.attached({"traceparent": "00-nonsense"}):
        assert sdk_tracing.caller_traceparent() == ""


def test_rpc_attributes_follow_the_conventions() -> None:
    assert tracing.rpc_attributes("waitgraph.v1.AgentService/WriteBatch", "10.0.0.1:50051") == {
        "rpc.system.name": "grpc",
        "rpc.method": "waitgraph.v1.AgentService/WriteBatch",
        "server.address": "10.0.0.1",
        "server.port": 50051,
    }


def test_the_wait_span_carries_the_decision_and_ends_once(spans: tuple[Any, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    with tracer.start_as_current_span("invoke_agent a") as agent:
        w = sdk_tracing.WaitSpan.start("a", "exec:A", 1, "exec:B", tracer=tracer)
    assert w is not None and w.traceparent.startswith("00-")
    w.registered(3)
    w.decision("victim", "d7", 4, "ab" * 32)
    w.end("deadlock_victim")
    w.end("waiter_done")  # a later close changes nothing
    [span] = [s for s in exporter.get_finished_spans() if s.name == "waitgraph.wait"]
    assert span.parent is not None and span.parent.span_id == agent.get_span_context().span_id
    assert span.attributes is not None
    assert span.attributes["gen_ai.agent.id"] == "a"
    assert span.attributes["waitgraph.wait.edge_version"] == 3
    assert span.attributes["waitgraph.wait.close_reason"] == "deadlock_victim"
    [event] = span.events
    assert event.name == "waitgraph.decision"
    assert dict(event.attributes or {}) == {
        "waitgraph.decision.role": "victim",
        "waitgraph.decision.id": "d7",
        "waitgraph.decision.epoch": 4,
        "waitgraph.decision.digest": "ab" * 32,
    }


class _Context:
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def code(self) -> None:
        return None


def test_a_server_span_is_the_callers_child_and_only_for_a_traced_caller(
    spans: tuple[Any, InMemorySpanExporter],
) -> None:
    tracer, exporter = spans

    async def handler(request: Any, context: Any) -> str:
        return "answer"

    served = node_tracing.server_unary("/waitgraph.v1.AgentService/WriteBatch", handler, lambda: tracer)
    assert asyncio.run(served(None, _Context((("traceparent", TRACEPARENT),)))) == "answer"
    assert asyncio.run(served(None, _Context(()))) == "answer"
    [span] = exporter.get_finished_spans()
    assert span.kind is SpanKind.SERVER and span.name == "waitgraph.v1.AgentService/WriteBatch"
    assert span.parent is not None and (span.parent.trace_id, span.parent.span_id) == (TRACE_ID, SPAN_ID)
    assert span.attributes is not None and span.attributes["rpc.response.status_code"] == "OK"


def _traced_cycle(spans_hook: node_tracing.RecoverySpans) -> tuple[World, dict[str, str]]:
    """exec:A and exec:B wait for each other, each wait with its own stored context."""

    class Observed(StateMachine):
        def apply(self, env: Envelope) -> Outcome:
            out = super().apply(env)
            spans_hook.applied(env, out, self.state)
            return out

    w = World()
    w.m = Observed()
    w.execution("A")
    w.execution("B")
    contexts = {
        "A": "00-" + "a" * 32 + "-" + "1" * 16 + "-01",
        "B": "00-" + "b" * 32 + "-" + "2" * 16 + "-01",
    }
    w.wait("exec:A", "exec:B", trace_context=contexts["A"])
    w.wait("exec:B", "exec:A", trace_context=contexts["B"])
    w.configure()
    return w, contexts


def test_the_recovery_span_links_every_member_wait(spans: tuple[Any, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    clock = iter(range(1_000, 10**9, 1_000))
    hook = node_tracing.RecoverySpans(lambda: True, "n1", clock=lambda: next(clock), tracer_of=lambda: tracer)
    hook.enabled = True
    w, contexts = _traced_cycle(hook)
    [out] = w.recover()
    assert out.ok
    [span] = exporter.get_finished_spans()
    assert span.name == "waitgraph.recovery"
    assert {(lk.context.trace_id, lk.context.span_id) for lk in span.links} == {
        (int(tp[3:35], 16), int(tp[36:52], 16)) for tp in contexts.values()
    }
    attrs = dict(span.attributes or {})
    decision = next(iter(w.st.recovery.decisions.values()))
    assert attrs["waitgraph.decision.id"] == decision.decision_id
    assert attrs["waitgraph.recovery.victim"] == decision.winner_id
    assert attrs["waitgraph.recovery.remedy"] == "victim"
    assert attrs["waitgraph.epoch"] == decision.epoch == 1
    assert attrs["waitgraph.recovery.outcome"] == "decided"
    names = [e.name for e in span.events]
    assert names == ["waitgraph.recovery.propose", *["waitgraph.recovery.vote"] * 3, "waitgraph.recovery.commit"]
    assert span.start_time is not None and span.end_time is not None and span.start_time < span.end_time


def test_only_the_node_that_ended_it_makes_a_recovery_span_and_nothing_is_noted_when_off(
    spans: tuple[Any, InMemorySpanExporter],
) -> None:
    tracer, exporter = spans
    # n1 proposes and commits in World.recover; n2 is told it leads, but did not end it
    other = node_tracing.RecoverySpans(lambda: True, "n2", tracer_of=lambda: tracer)
    other.enabled = True
    w, _ = _traced_cycle(other)
    assert w.recover()[0].ok
    assert exporter.get_finished_spans() == ()
    off = node_tracing.RecoverySpans(lambda: True, "n3", tracer_of=lambda: tracer)
    w, _ = _traced_cycle(off)  # never enabled: the node's OTEL_* variables asked for nothing
    assert w.recover()[0].ok
    assert exporter.get_finished_spans() == ()


def test_a_retracted_proposal_is_a_span_too(spans: tuple[Any, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    hook = node_tracing.RecoverySpans(lambda: True, "n1", tracer_of=lambda: tracer)
    hook.enabled = True
    w, _contexts = _traced_cycle(hook)
    [c] = w.candidates()
    assert w.propose(c).ok
    w.ok("agent:A", CloseWait(waiter_id="exec:A", waiter_generation=1, target_id="exec:B", edge_version=1, reason="x"))
    w.vote_all(c)
    out = w.commit(c)
    retracted = [fx for fx in out.effects if isinstance(fx, RecoveryRetracted)]
    assert retracted, out
    [span] = exporter.get_finished_spans()
    assert dict(span.attributes or {})["waitgraph.recovery.outcome"] == "retracted"
    assert len(span.links) == 2, "the links were noted at the proposal, while both waits were open"


def test_the_trace_page_draws_the_wait_its_decision_and_the_linked_recovery() -> None:
    from waitgraph.dev.otlp import Event, Link, Span
    from waitgraph.dev.tracepage import render

    def span(name: str, trace_id: str, span_id: str, parent: str, start: int, end: int, **kw: Any) -> Span:
        attrs = kw.pop("attributes", {})
        return Span("svc", name, kw.pop("kind", "INTERNAL"), trace_id, span_id, parent, start, end, attrs,
                    kw.pop("events", ()), kw.pop("links", ()), "UNSET")  # fmt: skip

    agent = span("invoke_agent planner", "t1", "s1", "", 0, 10_000_000, attributes={"gen_ai.agent.id": "planner"})
    wait = span(
        "waitgraph.wait", "t1", "s2", "s1", 1_000_000, 9_000_000,
        attributes={"gen_ai.agent.id": "planner", "waitgraph.wait.close_reason": "deadlock_victim"},
        events=(Event("waitgraph.decision", 9_000_000, {"waitgraph.decision.id": "d1",
                                                        "waitgraph.decision.role": "victim",
                                                        "waitgraph.decision.epoch": 1}),),
    )  # fmt: skip
    rec = span("waitgraph.recovery", "t9", "s9", "", 2_000_000, 8_500_000,
               links=(Link("t1", "s2"), Link("t2", "x")), attributes={"waitgraph.decision.id": "d1"})  # fmt: skip
    elsewhere = span("unrelated", "t3", "s3", "", 0, 1)
    page = render([agent, wait, rec, elsewhere], "t1", "planner")
    assert page.index("invoke_agent planner") < page.index("waitgraph.wait") < page.index("linked from another trace")
    assert "decision d1: victim, epoch 1" in page
    assert "linked: planner&#x27;s wait + 1 other" in page
    assert "unrelated" not in page


def test_the_sync_client_runs_its_calls_in_the_callers_trace_context(spans: tuple[Any, InMemorySpanExporter]) -> None:
    """A SyncClient's calls run on its own loop thread: they must still see the caller's span (the
    waits and RPCs they make are its children)."""
    from waitgraph.sdk.sync import _LoopThread

    tracer, _ = spans
    loop = _LoopThread()

    async def current_span_id() -> int:
        return int(trace.get_current_span().get_span_context().span_id)

    try:
        with tracer.start_as_current_span("invoke_agent sync") as caller:
            assert loop.run(current_span_id()) == caller.get_span_context().span_id
        assert loop.run(current_span_id()) == 0
    finally:
        loop.stop()
