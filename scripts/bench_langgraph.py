"""LangGraph benchmark (issue 40): what ``waitgraph.sdk.langgraph.instrument`` adds to one node
call that holds one lease, beside the same node uninstrumented, in the same run.

Prints a table; asserts nothing. Usage: scripts/bench langgraph [--invocations 200] [--warmup 20]

A three-node cluster on loopback (the one launcher, ``LocalCluster``, auto mode) and one agent
session. One compiled graph of one node; the node holds a lease for its body (which does nothing
else, so the figure is the overhead alone). Three shapes of the same node, each invoked one
invocation at a time (``ainvoke``), rounds alternated A, B, C, A, B, C... so a drift of the
machine's speed reaches all three alike:

- ``plain``: the graph uninstrumented; the lease is a local ``asyncio.Lock`` (the anchor);
- ``instrumented, local lock``: the same graph through ``instrument(graph, session)``: the
  invocation's run and root, the node task's execution, the root's wait on it; the same lock;
- ``instrumented, waitgraph lease``: as above, the lease taken from the cluster
  (``current_execution().holding("resource:...")``: Acquire, Release).

A fourth row times one cluster write alone (``RecordCost`` of an execution, in the same rounds):
the unit the instrumentation's cost is made of.

Columns: per invocation wall time p50 / p99 / mean in ms, the cluster writes per invocation
(counted at the client), and the overhead over the anchor at the median.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import START, StateGraph

from waitgraph import Client
from waitgraph.dev.localcluster import LocalCluster
from waitgraph.sdk.langgraph import current_execution, instrument


class State(TypedDict):
    n: int


def build(body: Any) -> Any:
    g = StateGraph(State)
    g.add_node("work", body)
    g.add_edge(START, "work")
    return g.compile()


async def measure(
    invocations: int, warmup: int, endpoints: list[str], token: str
) -> list[tuple[str, list[float], float]]:
    lock = asyncio.Lock()
    lease = f"resource:bench-lg-{os.getpid()}"

    async def with_lock(state: State) -> dict[str, int]:
        async with lock:
            return {"n": state["n"] + 1}

    async def with_lease(state: State) -> dict[str, int]:
        async with current_execution().holding(lease):
            return {"n": state["n"] + 1}

    async with Client(endpoints, token) as client, client.session("a") as s:
        writes = 0
        submit = client.submit

        async def counted(*args: Any, **kw: Any) -> Any:
            nonlocal writes
            writes += 1
            return await submit(*args, **kw)

        client.submit = counted  # type: ignore[method-assign]
        shapes = [
            ("plain (anchor): local asyncio.Lock", build(with_lock)),
            ("instrumented, local asyncio.Lock", instrument(build(with_lock), s, name="bench-lock")),
            ("instrumented, waitgraph lease", instrument(build(with_lease), s, name="bench-lease")),
        ]
        unit = "one cluster write alone (RecordCost), the unit"
        times: dict[str, list[float]] = {name: [] for name, _ in shapes} | {unit: []}
        counts: dict[str, int] = {name: 0 for name, _ in shapes} | {unit: 0}
        async with s.execution(run_id=f"run-bench-lg-{os.getpid()}") as ex:
            for i in range(warmup + invocations):
                for name, graph in shapes:
                    before = writes
                    t0 = time.perf_counter()
                    await graph.ainvoke({"n": 0})
                    elapsed = time.perf_counter() - t0
                    if i >= warmup:
                        times[name].append(elapsed * 1000)
                        counts[name] += writes - before
                before = writes
                t0 = time.perf_counter()
                await ex.record_cost(1)
                elapsed = time.perf_counter() - t0
                if i >= warmup:
                    times[unit].append(elapsed * 1000)
                    counts[unit] += writes - before
    return [(name, times[name], counts[name] / invocations) for name in times]


def pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--invocations", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        lc = LocalCluster(root=Path(tmp) / "cluster", nodes=3, mode="auto")
        with lc:
            lc.wait_for_leader(60)
            assert lc.credentials is not None
            rows = asyncio.run(measure(args.invocations, args.warmup, lc.endpoints, lc.credentials.agents["a"]))
    anchor = statistics.median(rows[0][1])
    print(f"load after: {os.getloadavg()[0]:.2f}")
    print(f"\n{args.invocations} invocations per shape after {args.warmup} warm-ups, rounds alternated\n")
    print("| node call | p50 ms | p99 ms | mean ms | cluster writes | overhead at p50 |")
    print("|---|---|---|---|---|---|")
    for name, ms, writes in rows:
        p50 = statistics.median(ms)
        extra = "-" if name.startswith(("plain", "one cluster write")) else f"+{p50 - anchor:.2f} ms"
        print(f"| {name} | {p50:.2f} | {pct(ms, 0.99):.2f} | {statistics.fmean(ms):.2f} | {writes:.1f} | {extra} |")


if __name__ == "__main__":
    main()
