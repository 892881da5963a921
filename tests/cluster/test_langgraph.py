"""The LangGraph/LangChain integration (waitgraph.sdk.langgraph, issue #40) on a real 3-node cluster,
with real langgraph and langchain, and langchain-core's fake chat model (no network).

One cluster for the module (auto mode, 50 ms detection, a 300 ms confirmation window); each test
uses its own ids. ``waitgraph graph`` and ``waitgraph cancel`` run as the CLI, as an operator would.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import operator
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from waitgraph import CancellationRequested, Client, DeadlockVictim, OperatorClient
from waitgraph.dev.localcluster import LocalCluster
from waitgraph.proto.v1 import types_pb2
from waitgraph.sdk.langgraph import PARENT, current_execution, instrument

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
        turns = [k for k in graph._waitgraph.invocations] + [runs[0]]
        assert len(set(turns)) == len(turns)


async def test_a_node_that_raises_leaves_no_running_execution(lc: LocalCluster) -> None:
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
    builder.add_node("breaks", breaks)
    builder.add_edge(START, "waits")
    builder.add_edge(START, "breaks")
    async with agent(lc, "a") as client, client.session("a") as s, admin(lc) as ops:
        graph = instrument(builder.compile(), s, name=f"raise-{t}")
        with pytest.raises(ValueError, match="garbage"):
            await graph.ainvoke({"log": []}, {"run_id": uuid.UUID(int=int(t, 16))})
        (run_id,) = [r.run_id for r in (await ops.graph(fresh=True)).runs if r.run_id.startswith(f"run-raise-{t}")]
        found = await executions(ops, run_id)
        assert len(found) == 3
        assert not [e.execution_id for e in found.values() if e.status in UNSETTLED]
        assert all(e.status == types_pb2.EXEC_STATUS_FAILED for e in found.values()), found
        graph_now = await ops.graph(run_id=run_id, fresh=True)
        assert not list(graph_now.waits)
