"""The LangGraph/LangChain integration (waitgraph.sdk.langgraph, issue #40) on a real 3-node cluster,
with real langgraph and langchain, and langchain-core's fake chat model (no network).

One cluster for the module (auto mode, 50 ms detection, a 300 ms confirmation window); each test
uses its own ids. ``waitgraph graph`` and ``waitgraph cancel`` run as the CLI, as an operator would.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import operator
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from waitgraph import (
    AlreadyExists,
    CancellationRequested,
    Client,
    DeadlockVictim,
    OperatorClient,
    Session,
    WouldDeadlock,
)
from waitgraph.dev.localcluster import LocalCluster
from waitgraph.proto.v1 import types_pb2
from waitgraph.sdk.langgraph import PARENT, WaitgraphToolMiddleware, current_execution, instrument, side_effect

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent.parent
SERVE = ["--detect-interval-ms", "50", "--recovery-confirmation-window-ms", "300"]
UNSETTLED = {types_pb2.EXEC_STATUS_RUNNING, types_pb2.EXEC_STATUS_WAITING, types_pb2.EXEC_STATUS_PENDING}


@pytest.fixture(scope="module")
def lc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(root=tmp_path_factory.mktemp("langgraph"), nodes=3, mode="auto", serve_args=SERVE)
    with cluster:
        cluster.wait_for_leader(60)
        yield cluster


def tag() -> str:
    return uuid.uuid4().hex[:6]


def agent(lc: LocalCluster, name: str) -> Client:
    assert lc.credentials is not None
    return Client(lc.endpoints, lc.credentials.agents[name])


def admin(lc: LocalCluster) -> OperatorClient:
    assert lc.credentials is not None
    return OperatorClient(lc.endpoints, lc.credentials.admin)


def wg(lc: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """``waitgraph ARGS`` as an operator runs it (admin token, the cluster's endpoints)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")} | lc.env()
    return subprocess.run(
        [sys.executable, "-m", "waitgraph", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def graph_json(lc: LocalCluster, run_id: str) -> dict[str, Any]:
    out = wg(lc, "graph", "--run", run_id, "--fresh", "-o", "json")
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


async def executions(ops: OperatorClient, run_id: str) -> dict[str, Any]:
    graph = await ops.graph(run_id=run_id, fresh=True)
    return {e.execution_id: e for e in graph.executions}


@contextlib.asynccontextmanager
async def two_agents(lc: LocalCluster) -> AsyncIterator[tuple[Session, Session, OperatorClient]]:
    """Agent a's and agent b's sessions (each on its own client, as two processes would), and an
    admin's operator client."""
    async with (
        agent(lc, "a") as ca,
        ca.session("a") as sa,
        agent(lc, "b") as cb,
        cb.session("b") as sb,
        admin(lc) as ops,
    ):
        yield sa, sb, ops


async def run_of(ops: OperatorClient, prefix: str) -> str:
    """The one run whose id starts with ``prefix`` (an invocation without a thread: a derived suffix)."""
    (run_id,) = [r.run_id for r in (await ops.graph(fresh=True)).runs if r.run_id.startswith(prefix)]
    return run_id


async def until(what: str, fn: Any, timeout_s: float = 30.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = await fn()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


class Log(TypedDict):
    log: Annotated[list[str], operator.add]


def one(name: str, fn: Any, saver: Any = None) -> Any:
    """A compiled graph of one node."""
    b = StateGraph(Log)
    b.add_node(name, fn)
    b.add_edge(START, name)
    return b.compile(checkpointer=saver)


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


# -- one wrapper, many invocations ---------------------------------------------------------------------


async def test_one_compiled_graph_invoked_three_times_two_concurrently(lc: LocalCluster) -> None:
    t = tag()
    model = GenericFakeChatModel(messages=itertools.cycle([AIMessage(content=f"plan {i}") for i in range(3)]))

    async def plan(state: Log) -> dict[str, Any]:
        reply = await model.ainvoke("plan the work")
        return {"log": [str(reply.content)]}

    async def build(state: Log) -> dict[str, Any]:
        ex = current_execution()
        async with ex.holding(f"resource:gpu-{t}"):  # the concurrent two take turns through the queue
            return {"log": [f"built by {ex.execution_id} g{ex.generation}"]}

    builder = StateGraph(Log)
    builder.add_node("plan", plan)
    builder.add_node("build", build)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "build")
    builder.add_edge("build", END)
    compiled = builder.compile(checkpointer=InMemorySaver())

    async with agent(lc, "a") as client, client.session("a") as s, admin(lc) as ops:
        graph = instrument(compiled, s, name=f"one-{t}")  # the one line
        first = await graph.ainvoke({"log": []}, thread(f"t1-{t}"))
        second, third = await asyncio.gather(
            graph.ainvoke({"log": []}, thread(f"t2-{t}")), graph.ainvoke({"log": []}, thread(f"t3-{t}"))
        )
        runs = [f"run-one-{t}-t{i}-{t}-0" for i in (1, 2, 3)]
        for run_id, final in zip(runs, (first, second, third), strict=True):
            assert len(final["log"]) == 2 and final["log"][0].startswith("plan ")
            found = await executions(ops, run_id)
            root = f"exec:{run_id.removeprefix('run-')}"
            assert set(found) >= {root} and len(found) == 3, sorted(found)
            nodes = {e.execution_id: e for e in found.values() if e.execution_id != root}
            assert {i.split("-")[-2] for i in nodes} == {"plan", "build"}
            assert all(e.parent_id == root and e.checkpoint for e in nodes.values())
            assert all(e.status == types_pb2.EXEC_STATUS_COMPLETED for e in found.values())
            assert final["log"][1].startswith(f"built by {root}-build-")
        # The same thread again is a new turn: a new run, named after the checkpoint it starts from.
        again = await graph.ainvoke({"log": []}, thread(f"t1-{t}"))
        assert len(again["log"]) == 4  # the thread's state goes on
        turns = [r.run_id for r in (await ops.graph(fresh=True)).runs if r.run_id.startswith(f"run-one-{t}-t1-")]
        assert len(turns) == 2 and runs[0] in turns
        (second_turn,) = set(turns) - {runs[0]}
        found = await executions(ops, second_turn)
        assert len(found) == 3 and all(e.status == types_pb2.EXEC_STATUS_COMPLETED for e in found.values())
        with pytest.raises(TypeError, match="ainvoke/astream"):  # the session is asynchronous
            await asyncio.to_thread(graph.invoke, {"log": []}, thread(f"sync-{t}"))


@pytest.mark.parametrize("how", ["a node raises", "the caller abandons it"])
async def test_an_invocation_that_raises_or_is_abandoned_leaves_no_running_execution(
    lc: LocalCluster, how: str
) -> None:
    t = tag()
    blocked = asyncio.Event()

    async def waits(state: Log) -> dict[str, Any]:
        async with current_execution().waiting_for(f"artifact:never-{t}") as w:
            blocked.set()
            await w.resolved()
        return {"log": ["unreachable"]}

    async def breaks(state: Log) -> dict[str, Any]:
        await blocked.wait()
        raise ValueError("the tool returned garbage")

    builder = StateGraph(Log)
    builder.add_node("waits", waits)
    builder.add_edge(START, "waits")
    if how == "a node raises":  # LangGraph cancels the waiting sibling
        builder.add_node("breaks", breaks)
        builder.add_edge(START, "breaks")
    async with agent(lc, "a") as client, client.session("a") as s, admin(lc) as ops:
        graph = instrument(builder.compile(), s, name=f"gone-{t}")
        run = asyncio.create_task(graph.ainvoke({"log": []}, {"run_id": uuid.UUID(int=int(t, 16))}))
        await asyncio.wait_for(blocked.wait(), 20)
        if how == "a node raises":
            with pytest.raises(ValueError, match="garbage"):
                await run
        else:
            run.cancel()  # the caller gave up on it
            with pytest.raises(asyncio.CancelledError):
                await run
        found = await executions(ops, await run_of(ops, f"run-gone-{t}"))
        assert len(found) == (3 if how == "a node raises" else 2)
        assert all(e.status == types_pb2.EXEC_STATUS_FAILED for e in found.values()), found
        assert not list((await ops.graph(run_id=await run_of(ops, f"run-gone-{t}"), fresh=True)).waits)


async def test_id_errors_say_what_to_do(lc: LocalCluster) -> None:
    """The issue's first two attempts: two roots in one run, and an id used twice."""
    t = tag()
    async with agent(lc, "a") as client, client.session("a") as s:
        async with s.execution(f"exec:first-{t}", run_id=f"run-my-{t}"):
            with pytest.raises(AlreadyExists) as two_roots:
                await s.execution(f"exec:second-{t}", run_id=f"run-my-{t}").enter()
        assert two_roots.value.code == "run_exists" and "parent=root_ex" in str(two_roots.value)
        with pytest.raises(AlreadyExists) as reused:
            await s.execution(f"exec:first-{t}", run_id=f"run-again-{t}").enter()
        assert reused.value.code == "execution_exists" and "never reused" in str(reused.value)


# -- delegation ----------------------------------------------------------------------------------------


class Fan(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    item: str


async def test_subgraph_and_send_delegations_show_in_the_graph_and_cancel_stops_them(lc: LocalCluster) -> None:
    t = tag()

    async def work(state: Fan) -> dict[str, Any]:
        async with current_execution().waiting_for(f"artifact:input-{t}-{state['item']}") as w:
            await w.resolved()
        return {"log": [state["item"]]}

    async def inner(state: Fan) -> dict[str, Any]:
        async with current_execution().waiting_for(f"artifact:sub-{t}") as w:
            await w.resolved()
        return {"log": ["inner"]}

    sub = StateGraph(Fan)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    builder = StateGraph(Fan)
    builder.add_node("work", work)
    builder.add_node("delegate", sub.compile())  # a subgraph as a node: instrumented with the graph
    builder.add_conditional_edges(START, lambda s: [Send("work", {"item": i}) for i in ("x", "y")], ["work"])
    builder.add_edge(START, "delegate")
    async with agent(lc, "a") as client, client.session("a") as s, admin(lc) as ops:
        graph = instrument(builder.compile(), s, name=f"fan-{t}")
        run = asyncio.create_task(graph.ainvoke({"log": []}))

        async def all_blocked() -> dict[str, Any] | None:
            runs = [r.run_id for r in (await ops.graph(fresh=True)).runs if r.run_id.startswith(f"run-fan-{t}")]
            if not runs:
                return None
            view = graph_json(lc, runs[0])
            # root -> its 3 tasks, delegate -> the subgraph's root -> its task, and the 3 leaves' own waits
            return view if len(view["waits"]) == 8 else None

        view = await until("the fan-out and the subgraph to block", all_blocked)
        run_id = view["runs"][0]["run_id"]
        root = f"exec:{run_id.removeprefix('run-')}"
        parent = {e["execution_id"]: e.get("parent_id") for e in view["executions"]}
        waits = {(w["waiter_id"], w["target_id"]) for w in view["waits"]}
        works = sorted(e for e in parent if "-work-" in e)
        (delegate,) = [e for e in parent if parent[e] == root and e.startswith(f"{root}-delegate-")]
        (sub_root,) = [e for e in parent if parent[e] == delegate]
        (leaf,) = [e for e in parent if parent[e] == sub_root]
        assert len(works) == 2 and all(parent[w] == root for w in works)  # Send: children of the run's root
        assert {(root, w) for w in works} | {(root, delegate), (delegate, sub_root), (sub_root, leaf)} <= waits
        assert (leaf, f"artifact:sub-{t}") in waits

        out = wg(lc, "cancel", run_id, "--reason", "the user gave up")
        assert out.returncode == 0, out.stderr
        with pytest.raises(CancellationRequested):
            await asyncio.wait_for(run, 30)

        async def stable() -> bool:
            c = await ops.convergence(run_id, fresh=True)
            return bool(c.converged)

        await until("the cancellation to converge", stable)
        found = await executions(ops, run_id)
        assert set(found) == {root, delegate, sub_root, leaf, *works}
        assert not [e for e in found.values() if e.status in UNSETTLED], found


# -- approvals -----------------------------------------------------------------------------------------


async def decision_for(ops: OperatorClient, execution_id: str) -> Any:
    cycles = await ops.cycles(include_closed=True, fresh=True)
    for p in cycles.proposals:
        if p.decision_id and any(m.execution_id == execution_id for m in p.members):
            return await ops.decision(p.decision_id)
    return None


async def test_an_interrupt_approval_cycle_is_reassigned_or_broken_by_a_victim(lc: LocalCluster) -> None:
    """The first seed's supervisor/subtask cycle in LangGraph: the supervisor's node runs the subtask
    graph and provides its approval (approver=PARENT); the subtask's ``interrupt()`` waits for it."""
    t = tag()

    async def review(state: Log) -> dict[str, Any]:
        answer = interrupt("approve the plan?")
        return {"log": [f"review: {answer} (g{current_execution().generation})"]}

    sub = StateGraph(Log)
    sub.add_node("review", review)
    sub.add_edge(START, "review")
    async with two_agents(lc) as (s, sb, ops):
        # The subtask graph runs as agent b: its root is delegated to b by the supervisor's node.
        subtask = instrument(sub.compile(), sb, name=f"subtask-{t}", approver=PARENT)
        builder = StateGraph(Log)
        builder.add_node("supervise", subtask)
        builder.add_edge(START, "supervise")
        supervisor = instrument(builder.compile(checkpointer=InMemorySaver()), s, name=f"sup-{t}", priority=5)

        async def paused_then_resumed(thread_id: str, kind: str) -> tuple[Any, dict[str, Any]]:
            paused = await supervisor.ainvoke({"log": []}, thread(thread_id))
            assert "__interrupt__" in paused
            run_id = f"run-sup-{t}-{thread_id}-0"
            found = await executions(ops, run_id)
            (reviewer,) = [e for e in found if "-review-" in e]
            assert found[reviewer].agent_id == "b" and found[found[reviewer].parent_id].agent_id == "b"
            decision = await until(f"a {kind} decision", lambda: decision_for(ops, reviewer))
            resumed = await supervisor.ainvoke(Command(resume="approved"), thread(thread_id))
            found = await executions(ops, run_id)
            assert all(e.status == types_pb2.EXEC_STATUS_COMPLETED for e in found.values()), found
            return decision, {"log": resumed["log"], "reviewer": found[reviewer]}

        await ops.set_approver("human:alice")  # an independent approver: REASSIGN, nobody cancelled
        try:
            decision, seen = await paused_then_resumed(f"r{t}", "REASSIGN")
        finally:
            await ops.set_approver(None)
        assert decision.kind == "REASSIGN" and decision.reassigned[0][3] == "human:alice"
        assert seen["log"] == ["review: approved (g1)"] and seen["reviewer"].generation == 1

        decision, seen = await paused_then_resumed(f"v{t}", "VICTIM")  # none: the victim policy
        assert decision.kind == "VICTIM" and "-review-" in decision.winner_id
        assert seen["log"] == ["review: approved (g2)"] and seen["reviewer"].generation == 2


# -- tools, two processes ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["prevent", "victim"])
async def test_two_graphs_in_two_processes_contend_through_the_tool_middleware(lc: LocalCluster, how: str) -> None:
    t = f"{how[0]}{tag()}"
    gpu, dataset = f"resource:gpu-{t}", f"artifact:dataset-{t}"

    @tool
    @side_effect("gpu-booked")
    async def train() -> str:
        """Train on the GPU once the dataset is there."""
        async with current_execution().waiting_for(dataset) as w:
            return f"trained after {await w.resolved()}"

    model = ToolCallingFake(messages=iter([call("train", 1), AIMessage("trained")]))
    planner = create_agent(model, tools=[train], middleware=[WaitgraphToolMiddleware({"train": [gpu]})])
    assert lc.credentials is not None
    async with agent(lc, "a") as client, client.session("a") as s, admin(lc) as ops:
        graph = instrument(planner, s, name=f"planner-{t}", priority=5)
        first = asyncio.create_task(graph.ainvoke({"messages": [("user", "train")]}))

        async def holding_and_waiting() -> bool:
            g = await ops.graph(fresh=True)
            return any(w.target_id == dataset for w in g.waits) and any(
                tg.target_id == gpu and tg.holders for tg in g.targets
            )

        await until("the planner to hold the GPU and wait for the dataset", holding_and_waiting)
        builder = await asyncio.create_subprocess_exec(
            sys.executable,
            str(REPO / "tests" / "cluster" / "lg_builder.py"),
            ",".join(lc.endpoints),
            lc.credentials.agents["b"],
            t,
            how,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(builder.communicate(), 60)
        assert builder.returncode == 0, stderr.decode()[-3000:]
        seen = json.loads(stdout)
        final = await asyncio.wait_for(first, 30)
        view = await ops.graph(fresh=True)
    assert final["messages"][-1].content == "trained"
    (tools_exec,) = [
        e for e in view.executions if e.execution_id.startswith(f"exec:planner-{t}-") and "-tools-" in e.execution_id
    ]
    assert [(fx.effect_id, fx.outcome) for fx in tools_exec.side_effects] == [
        ("gpu-booked", types_pb2.EFFECT_OUTCOME_COMMITTED)  # @side_effect, into the ledger
    ]
    (trained,) = [m for m in final["messages"] if isinstance(m, ToolMessage)]
    assert trained.content == "trained after target_produced"
    refused, published, built = seen["tools"]
    assert refused["name"] == "build" and refused["status"] == "error"
    assert published["content"] == "published" and built["content"] == "built" and seen["last"] == "done"
    if how == "prevent":
        assert "would deadlock" in refused["content"]
        assert f"resource:gpu-{t} -> exec:planner-{t}" in refused["content"] and dataset in refused["content"]
    else:
        assert "rolled back by waitgraph" in refused["content"]


async def test_the_tool_middleware_can_raise_the_refusal_for_the_graphs_retry_policy(lc: LocalCluster) -> None:
    t = tag()
    gpu, dataset = f"resource:gpu-{t}", f"artifact:dataset-{t}"
    waiting = asyncio.Event()

    @tool
    async def train() -> str:
        """Train once the dataset is there."""
        async with current_execution().waiting_for(dataset) as w:
            waiting.set()
            return await w.resolved()

    @tool
    async def build() -> str:
        """Build on the GPU."""
        return "built"

    planner_model = ToolCallingFake(messages=iter([call("train", 1), AIMessage("trained")]))
    builder_model = ToolCallingFake(messages=iter([call("build", 1)]))
    async with two_agents(lc) as (sa, sb, ops):
        planner = instrument(
            create_agent(planner_model, tools=[train], middleware=[WaitgraphToolMiddleware({"train": [gpu]})]),
            sa,
            name=f"rplanner-{t}",
        )
        middleware = WaitgraphToolMiddleware({"build": [gpu]}, refuse_deadlock=True, on_conflict="raise")
        builder = instrument(
            create_agent(builder_model, tools=[build], middleware=[middleware]),
            sb,
            name=f"rbuilder-{t}",
            produces=[dataset],
        )
        planning = asyncio.create_task(planner.ainvoke({"messages": [("user", "train")]}))
        await asyncio.wait_for(waiting.wait(), 20)
        with pytest.raises(WouldDeadlock) as refused:
            await builder.ainvoke({"messages": [("user", "build")]})
        assert refused.value.path[1] == gpu and dataset in refused.value.path  # builder -> GPU -> planner ...
        assert refused.value.path[2].startswith(f"exec:rplanner-{t}-")
        found = await executions(ops, await run_of(ops, f"run-rbuilder-{t}"))
        assert not [e for e in found.values() if e.status in UNSETTLED], found
        await sb.produce(dataset)  # by hand, after the refusal: the planner goes on
        final = await asyncio.wait_for(planning, 20)
        assert final["messages"][-1].content == "trained"


class ToolCallingFake(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def call(name: str, n: int) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": {}, "id": f"call-{name}-{n}"}])


async def test_the_tool_middleware_releases_what_it_held_when_the_tool_raises(lc: LocalCluster) -> None:
    t = tag()
    lease = f"resource:browser-{t}"

    @tool
    async def browse() -> str:
        """Open the page."""
        holders = [
            h.execution_id for tg in (await ops.graph(fresh=True)).targets if tg.target_id == lease for h in tg.holders
        ]
        assert holders == [current_execution().execution_id]  # held while the tool runs
        raise ValueError("the page did not load")

    model = ToolCallingFake(messages=iter([call("browse", 1), AIMessage("gave up")]))
    middleware = WaitgraphToolMiddleware({"browse": [lease]})
    async with agent(lc, "a") as client, client.session("a") as s, admin(lc) as ops:
        graph = instrument(create_agent(model, tools=[browse], middleware=[middleware]), s, name=f"browse-{t}")
        with pytest.raises(ValueError, match="did not load"):
            await graph.ainvoke({"messages": [("user", "browse")]})
        view = await ops.graph(fresh=True)
        assert [tg.holders for tg in view.targets if tg.target_id == lease] == [[]]
        found = await executions(ops, await run_of(ops, f"run-browse-{t}"))
        assert not [e for e in found.values() if e.status in UNSETTLED], found


# -- resumed from the checkpointer ---------------------------------------------------------------------


async def test_a_run_resumed_from_its_checkpointer_after_a_victims_rollback(lc: LocalCluster) -> None:
    t = tag()
    tool_id, review_id = f"resource:tool-{t}", f"artifact:review-{t}"
    tool_taken = asyncio.Event()

    async def write(state: Log) -> dict[str, Any]:
        ex = current_execution()
        await ex.record_side_effect("draft-mailed")  # committed: the policy spares the writer
        async with ex.holding(tool_id):
            tool_taken.set()
            async with ex.waiting_for(review_id) as w:
                return {"log": [f"writer: {await w.resolved()}"]}

    async def review(state: Log) -> dict[str, Any]:
        ex = current_execution()
        await ex.produces(review_id)
        if ex.generation == 1:  # first the tool, which the writer holds while it waits for us
            await tool_taken.wait()
            async with ex.holding(tool_id):
                raise AssertionError("the writer holds the tool")
        await ex.session.produce(review_id)  # re-run from the checkpoint: publish first
        async with ex.holding(tool_id):
            return {"log": [f"reviewer: g{ex.generation}"]}

    async with two_agents(lc) as (sa, sb, ops):
        writer = instrument(one("write", write), sa, name=f"writer-{t}")
        reviewer = instrument(one("review", review, InMemorySaver()), sb, name=f"reviewer-{t}")
        writing = asyncio.create_task(writer.ainvoke({"log": []}))
        with pytest.raises(DeadlockVictim) as victim:
            await reviewer.ainvoke({"log": []}, thread(t))
        run_id = f"run-reviewer-{t}-{t}-0"
        before = await executions(ops, run_id)
        assert not [e for e in before.values() if e.status in UNSETTLED], before
        assert victim.value.execution_id in before
        assert before[victim.value.execution_id].status == types_pb2.EXEC_STATUS_CANCELLED

        resumed = await reviewer.ainvoke(None, thread(t))  # from the checkpointer: the same run, found again
        assert resumed["log"] == ["reviewer: g2"]
        after = await executions(ops, run_id)
        assert set(after) == set(before)
        assert after[victim.value.execution_id].generation == 2
        assert all(e.status == types_pb2.EXEC_STATUS_COMPLETED for e in after.values()), after
        assert (await asyncio.wait_for(writing, 20))["log"] == ["writer: target_produced"]


async def test_a_failed_invocation_is_resumed_by_another_process_of_the_agent(lc: LocalCluster) -> None:
    """The process that ran the invocation is gone (its session left); another one instruments the
    same graph and resumes the thread from the checkpointer (the in-memory saver stands in for a
    persistent one): it adopts the run's executions as their next attempts, under the same ids."""
    t = tag()
    attempts: list[int] = []

    async def call_api(state: Log) -> dict[str, Any]:
        attempts.append(current_execution().generation)
        if len(attempts) == 1:
            raise ConnectionError("the API timed out")
        return {"log": [f"called at generation {current_execution().generation}"]}

    compiled = one("call", call_api, InMemorySaver())
    async with agent(lc, "c") as client, admin(lc) as ops:
        async with client.session("c") as first:
            with pytest.raises(ConnectionError):
                await instrument(compiled, first, name=f"api-{t}").ainvoke({"log": []}, thread(t))
        run_id = f"run-api-{t}-{t}-0"
        before = await executions(ops, run_id)
        assert all(e.status == types_pb2.EXEC_STATUS_FAILED for e in before.values()), before
        async with client.session("c") as second:
            final = await instrument(compiled, second, name=f"api-{t}").ainvoke(None, thread(t))
        after = await executions(ops, run_id)
    assert final["log"] == ["called at generation 2"] and attempts == [1, 2]
    assert set(after) == set(before) and len(after) == 2
    assert all(e.status == types_pb2.EXEC_STATUS_COMPLETED and e.generation == 2 for e in after.values()), after
