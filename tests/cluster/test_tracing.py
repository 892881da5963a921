"""OpenTelemetry end to end (docs/observability.md): three real ``waitgraph serve`` processes and the
agents' SDK export over OTLP/gRPC to a receiver in this test (:class:`waitgraph.dev.otlp.Receiver`,
the TraceService served by grpcio), configured by ``OTEL_EXPORTER_OTLP_ENDPOINT`` alone.

Two agents, each in its own ``invoke_agent`` span, wait for each other's execution: a deadlock the
cluster breaks by rolling one back. The trace must show it: each agent's span contains its wait's
span; the victim's wait span has the decision event; the recovery span (made by a node) links to
both waits; a node's server span is the child of the SDK's client span. Then again with the
leader killed while the proposal is open: the new leader's recovery span still links to both.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="the [otel] extra")

from waitgraph.dev.otlp import Receiver, Span
from waitgraph.sdk import Client, DeadlockVictim
from waitgraph.wire import tracing

from .grpc_harness import TOKENS, GrpcCluster, leader_of, until

WINDOW = ["--initial-mode", "auto", "--recovery-confirmation-window-ms", "300"]
LONG_WINDOW = ["--initial-mode", "auto", "--recovery-confirmation-window-ms", "4000"]


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """The receiver, and this process's SDK tracing configured from the environment to export to
    it (as an agent process would be: OTEL_EXPORTER_OTLP_ENDPOINT and nothing else of ours)."""
    with Receiver() as r:
        saved = {k: os.environ.get(k) for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_BSP_SCHEDULE_DELAY")}
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = r.endpoint
        os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "100"
        try:
            if not tracing.configure("tracing-test-agents"):
                pytest.skip("this process has a tracer provider the test cannot point at its receiver")
            yield r
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            tracing.shutdown()
            forget_the_global_provider()


def forget_the_global_provider() -> None:
    """Leave this process as the module found it. OpenTelemetry sets its global tracer provider
    once per process, and a provider left behind changes later tests in the same process: the
    MCP SDK's client, for one, then writes its own span's traceparent into a call's ``_meta`` over
    the one the caller gave (tests/cluster/test_mcp.py failed after this module). The reset is
    opentelemetry-test-utils' ``reset_trace_globals``, and waitgraph's cached tracer with it."""
    from opentelemetry import trace
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    tracing._installed = None
    tracing._tracer = None
    tracing._tried_env = False
    tracing._off_until = 0.0


def node_env(r: Receiver) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": r.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}


@pytest.fixture
def clusters(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[GrpcCluster]]:
    started: list[GrpcCluster] = []
    try:
        yield started
    finally:
        report = getattr(request.node, "rep_call", None)
        for c in started:
            if report is not None and report.failed:
                print(c.logs())
            c.close()


async def start(tmp_path: Path, started: list[GrpcCluster], r: Receiver, args: list[str]) -> GrpcCluster:
    c = GrpcCluster(tmp_path / f"c{len(started)}", extra_args=args, env=node_env(r))
    started.append(c)
    c.__enter__()
    leader = await leader_of(c)
    async with Client([leader.grpc], TOKENS["ops"]) as ops:

        async def configured() -> bool:
            return bool((await ops.status()).recovery_configured)

        await until(configured, 20, "the recovery bootstrap")
    return c


def flush() -> None:
    from opentelemetry import trace

    trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]


class Outcome:
    def __init__(self) -> None:
        self.root_span: dict[str, Any] = {}
        """agent -> (trace id, span id) of its invoke_agent span."""
        self.reason: dict[str, str] = {}
        self.victim: DeadlockVictim | None = None
        self.victim_agent = ""


async def deadlock(c: GrpcCluster, t: str, on_registered: Any = None) -> Outcome:
    """Agents a and b: exec:A waits for exec:B and exec:B for exec:A, each inside its agent's
    ``invoke_agent`` span; the victim leaves its execution (acknowledging), the other's wait closes."""
    from opentelemetry import trace

    tracer = trace.get_tracer("tracing-test")
    endpoints = [n.grpc for n in c.nodes]
    out = Outcome()
    ids = {"a": f"exec:A-{t}", "b": f"exec:B-{t}"}
    registered = {name: asyncio.Event() for name in ids}

    async def agent(name: str, other: str) -> None:
        async with Client(endpoints, TOKENS[name]) as client, client.session(name) as s:
            with tracer.start_as_current_span(f"invoke_agent {name}", attributes={"gen_ai.agent.id": name}) as root:
                ctx = root.get_span_context()
                out.root_span[name] = (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
                try:
                    async with (
                        s.execution(ids[name], run_id=f"run-{name}-{t}") as ex,
                        ex.waiting_for(ids[other]) as w,
                    ):
                        registered[name].set()
                        await asyncio.gather(*(e.wait() for e in registered.values()))
                        if on_registered is not None and name == "a":
                            await on_registered(w)
                        out.reason[name] = await w.resolved(timeout_s=40)
                except DeadlockVictim as victim:
                    out.victim, out.victim_agent = victim, name

    await asyncio.wait_for(asyncio.gather(agent("a", "b"), agent("b", "a")), 60)
    flush()
    return out


def wait_spans(r: Receiver, t: str) -> dict[str, Span]:
    found = r.spans(
        lambda s: s.name == "waitgraph.wait" and str(s.attributes.get("waitgraph.execution.id", "")).endswith(t)
    )
    return {str(s.attributes["gen_ai.agent.id"]): s for s in found}


def recovery_span(r: Receiver, digest: str) -> Span | None:
    """The span of the recovery of ``digest`` (decision ids repeat across clusters; a digest names
    the members)."""
    found = r.spans(
        lambda s: s.name == "waitgraph.recovery" and s.attributes.get("waitgraph.recovery.digest") == digest
    )
    assert len(found) <= 1, f"one span per recovery, got {len(found)} (from {[s.service for s in found]})"
    return found[0] if found else None


async def spans_in(r: Receiver, t: str, digest: str) -> tuple[dict[str, Span], Span]:
    async def arrived() -> tuple[dict[str, Span], Span] | None:
        waits, rec = wait_spans(r, t), recovery_span(r, digest)
        return (waits, rec) if len(waits) == 2 and rec is not None else None

    try:
        got: tuple[dict[str, Span], Span] = await until(arrived, 20, "the wait spans and the recovery span")
    except TimeoutError:
        print("received:", *(f"{s.service} {s.name} {s.attributes}" for s in r.spans()), sep="\n  ")
        raise
    return got


def assert_linked(rec: Span, waits: dict[str, Span]) -> None:
    linked = {(lk.trace_id, lk.span_id) for lk in rec.links}
    for agent, w in waits.items():
        assert (w.trace_id, w.span_id) in linked, f"the recovery span does not link to {agent}'s wait"


@pytest.mark.timeout(120)
async def test_a_deadlock_in_the_agents_traces_and_the_nodes_recovery_span(
    tmp_path: Path, receiver: Receiver, clusters: list[GrpcCluster]
) -> None:
    c = await start(tmp_path, clusters, receiver, WINDOW)
    t = uuid.uuid4().hex[:8]
    out = await deadlock(c, t)
    assert out.victim is not None, out.reason
    d = out.victim.decision
    assert d.decision_id is not None and d.epoch is not None
    kept = "b" if out.victim_agent == "a" else "a"
    assert out.reason[kept] != ""

    assert d.digest is not None
    waits, rec = await spans_in(receiver, t, d.digest)
    # each agent's span contains its wait's span
    for agent, w in waits.items():
        assert (w.trace_id, w.parent_span_id) == out.root_span[agent], f"{agent}'s wait is not in its agent span"
        assert w.attributes["waitgraph.wait.target_id"] == (f"exec:B-{t}" if agent == "a" else f"exec:A-{t}")
        assert w.attributes["waitgraph.execution.generation"] == 1
    # the victim's wait span has the decision event
    victim_wait = waits[out.victim_agent]
    event = victim_wait.event("waitgraph.decision")
    assert event is not None, victim_wait.events
    assert event.attributes["waitgraph.decision.id"] == d.decision_id
    assert event.attributes["waitgraph.decision.epoch"] == d.epoch
    assert event.attributes["waitgraph.decision.role"] == d.role == "victim"
    assert victim_wait.attributes["waitgraph.wait.close_reason"] == "deadlock_victim"
    kept_event = waits[kept].event("waitgraph.decision")
    assert kept_event is not None and kept_event.attributes["waitgraph.decision.role"] == "kept"
    assert waits[kept].attributes["waitgraph.wait.close_reason"] == out.reason[kept]
    # the recovery span: a node's, linked to both waits, with the decision's attributes and events
    assert rec.service == "waitgraph-node"
    assert_linked(rec, waits)
    assert rec.attributes["waitgraph.recovery.victim"] == d.execution_id
    assert rec.attributes["waitgraph.epoch"] == d.epoch
    assert rec.attributes["waitgraph.decision.id"] == d.decision_id
    assert rec.attributes["waitgraph.recovery.remedy"] == "victim"
    names = [e.name for e in rec.events]
    assert names[0] == "waitgraph.recovery.propose" and names[-1] == "waitgraph.recovery.commit", names
    assert names.count("waitgraph.recovery.vote") >= 2, names
    # the node's server spans are children of the SDK's client spans (the context crossed the wire)
    clients = {
        (s.trace_id, s.span_id): s
        for s in receiver.spans(lambda s: s.kind == "CLIENT" and s.trace_id == victim_wait.trace_id)
    }
    served = receiver.spans(lambda s: s.kind == "SERVER" and (s.trace_id, s.parent_span_id) in clients)
    assert served, "no node span is the child of an SDK client span"
    for s in served:
        parent = clients[(s.trace_id, s.parent_span_id)]
        assert s.service == "waitgraph-node" and s.name == parent.name == s.attributes["rpc.method"]
        assert s.attributes["rpc.system.name"] == "grpc" and s.attributes["rpc.response.status_code"] == "OK"
        assert parent.attributes["server.address"] == "127.0.0.1"


@pytest.mark.timeout(150)
async def test_after_a_leader_failover_the_recovery_span_still_links_both_waits(
    tmp_path: Path, receiver: Receiver, clusters: list[GrpcCluster]
) -> None:
    c = await start(tmp_path, clusters, receiver, LONG_WINDOW)
    t = uuid.uuid4().hex[:8]
    killed: list[str] = []

    async def kill_the_leader_once_proposed(w: Any) -> None:
        await until(lambda: asyncio.sleep(0, w.proposal is not None), 20, "the recovery proposal")
        leader = await leader_of(c)
        killed.append(leader.name)
        leader.kill()  # the proposal is open (a 4 s window): the next leader must end it

    out = await deadlock(c, t, kill_the_leader_once_proposed)
    assert killed and out.victim is not None, out.reason
    d = out.victim.decision
    assert d.decision_id is not None and d.digest is not None
    waits, rec = await spans_in(receiver, t, d.digest)
    assert_linked(rec, waits)
    assert rec.attributes["waitgraph.decision.id"] == d.decision_id
    assert rec.attributes["waitgraph.node.id"] != killed[0], "the killed leader cannot have ended it"
    assert rec.attributes["waitgraph.recovery.victim"] == d.execution_id
