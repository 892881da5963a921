"""MCP benchmark (issue 39): ``waitgraph mcp`` tool calls against the same operations through the
Python SDK, in the same run on the same cluster, with the ratio of each.

Prints a table; asserts nothing. Usage: scripts/bench mcp [--rounds 200] [--clients 32]
[--client-rounds 20]

A local 3-node cluster (the one launcher, :class:`waitgraph.dev.localcluster.LocalCluster`, mode
auto). Rows:

- ``lease + release``: one round is ``lease_acquire`` then ``lease_release`` of a free resource by
  one MCP client over stdio (its own ``waitgraph mcp`` process), against ``ex.acquire`` then
  ``ex.release`` of one SDK session; the time of the round, p50 and p99.
- ``wait satisfied``: one round is ``wait_start`` (registered), a second agent's ``produce`` of the
  artifact, and ``wait_poll`` until it answers ``resolved``; against ``waiting_for`` entered, the
  same produce through the SDK, ``resolved()`` and the exit. The producer is an SDK session in both.
- ``N clients``: N MCP client sessions at once, each its own agent with its own token, on one
  ``waitgraph mcp --http`` server (shared use), each doing ``--client-rounds`` lease + release
  rounds on its own resource; against N SDK sessions of other agents, each with its own token,
  on one Client in one process (as the server holds them). Rounds per second over all clients,
  and the p50/p99 of a round. (Other agents: the server leaves an MCP agent's session after it
  has answered the client's DELETE, and would end an SDK session of the same agent joined
  meanwhile, as another process of the agent leaving a shared session does.)

The MCP client and the SDK run in this process; the stdio server is a child process, the cluster
three more. Ratio = MCP / SDK (time: higher is slower; rounds/s: lower is slower).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from mcp import ClientSession

from waitgraph.dev.localcluster import LocalCluster
from waitgraph.dev.mcp_agents import http_server, http_session, server_env, stdio_session
from waitgraph.sdk import Client, Execution, Session


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


async def ok(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    res = await session.call_tool(tool, args)
    if res.is_error or res.structured_content is None:
        raise SystemExit(f"{tool} failed: {res.content}")
    return dict(res.structured_content)


async def timed(rounds: int, one: Callable[[int], Awaitable[None]]) -> list[float]:
    await one(-1)  # warm-up: the default task, the target, the channels
    out = []
    for i in range(rounds):
        t0 = time.perf_counter()
        await one(i)
        out.append(time.perf_counter() - t0)
    return out


def stdio_agent(lc: LocalCluster, agent: str) -> contextlib.AbstractAsyncContextManager[ClientSession]:
    assert lc.credentials is not None
    return stdio_session(server_env(lc.endpoints, agent, lc.credentials.agents[agent]))


@contextlib.asynccontextmanager
async def sdk_agent(
    lc: LocalCluster, agent: str, run: str, client: Client | None = None
) -> AsyncIterator[tuple[Session, Execution]]:
    """An SDK session of ``agent`` with its token: on ``client`` (shared), or on a Client of its own."""
    assert lc.credentials is not None
    token = lc.credentials.agents[agent]
    async with contextlib.AsyncExitStack() as stack:
        c = client if client is not None else await stack.enter_async_context(Client(lc.endpoints, token=token))
        s = await stack.enter_async_context(c.session(agent, token=token))
        ex = await stack.enter_async_context(
            s.execution(f"exec:bench-{run}-{agent}", run_id=f"run-bench-{run}-{agent}")
        )
        yield s, ex


async def lease_rows(lc: LocalCluster, rounds: int) -> tuple[list[float], list[float]]:
    async with stdio_agent(lc, "a") as m:

        async def mcp_round(i: int) -> None:
            await ok(m, "lease_acquire", target="resource:bench-lease-mcp")
            await ok(m, "lease_release", target="resource:bench-lease-mcp")

        mcp = await timed(rounds, mcp_round)
    async with sdk_agent(lc, "b", "lease") as (_, ex):

        async def sdk_round(i: int) -> None:
            await ex.acquire("resource:bench-lease-sdk")
            await ex.release("resource:bench-lease-sdk")

        sdk = await timed(rounds, sdk_round)
    return mcp, sdk


async def wait_rows(lc: LocalCluster, rounds: int) -> tuple[list[float], list[float]]:
    async with sdk_agent(lc, "c", "producer") as (producer, pex), stdio_agent(lc, "a") as m:

        async def mcp_round(i: int) -> None:
            target = f"artifact:bench-wait-mcp-{i + 1}"
            await pex.produces(target)
            await ok(m, "wait_start", target=target)
            await producer.produce(target)
            while (await ok(m, "wait_poll", target=target, block_s=10))["status"] != "resolved":
                pass

        mcp = await timed(rounds, mcp_round)
        async with sdk_agent(lc, "b", "wait") as (_, ex):

            async def sdk_round(i: int) -> None:
                target = f"artifact:bench-wait-sdk-{i + 1}"
                await pex.produces(target)
                async with ex.waiting_for(target) as w:
                    await producer.produce(target)
                    await w.resolved(10)

            sdk = await timed(rounds, sdk_round)
    return mcp, sdk


async def concurrent_rows(lc: LocalCluster, clients: int, rounds: int) -> tuple[tuple[float, list[float]], ...]:
    assert lc.credentials is not None
    creds = lc.credentials
    names = [f"m{i}" for i in range(clients)]
    sdk_names = [f"s{i}" for i in range(clients)]
    shared = Client(lc.endpoints, token=creds.agents[sdk_names[0]])
    with http_server(server_env(lc.endpoints)) as (url, _):

        async def mcp_client(name: str, start: asyncio.Event, laps: list[float], ready: list[str]) -> None:
            async with http_session(url, name, creds.agents[name]) as s:
                await ok(s, "my_state")
                ready.append(name)
                await start.wait()
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    await ok(s, "lease_acquire", target=f"resource:bench-many-mcp-{name}")
                    await ok(s, "lease_release", target=f"resource:bench-many-mcp-{name}")
                    laps.append(time.perf_counter() - t0)

        async def sdk_client(name: str, start: asyncio.Event, laps: list[float], ready: list[str]) -> None:
            async with sdk_agent(lc, name, "many", shared) as (_, ex):
                ready.append(name)
                await start.wait()
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    await ex.acquire(f"resource:bench-many-sdk-{name}")
                    await ex.release(f"resource:bench-many-sdk-{name}")
                    laps.append(time.perf_counter() - t0)

        results = []
        for make, agents in ((mcp_client, names), (sdk_client, sdk_names)):
            start = asyncio.Event()
            laps: list[float] = []
            ready: list[str] = []
            tasks = [asyncio.ensure_future(make(n, start, laps, ready)) for n in agents]
            while len(ready) < len(agents):
                failed = [t for t in tasks if t.done()]
                if failed:
                    await failed[0]  # raises what went wrong
                await asyncio.sleep(0.05)
            t0 = time.perf_counter()
            start.set()
            await asyncio.gather(*tasks)
            results.append((len(laps) / (time.perf_counter() - t0), laps))
        await shared.close()
        return results[0], results[1]


async def run(args: argparse.Namespace) -> None:
    agents = ["a", "b", "c", *[f"{x}{i}" for x in "ms" for i in range(args.clients)]]
    lc = LocalCluster(nodes=3, mode="auto", agents=agents, serve_args=("--detect-interval-ms", "50"))
    with lc:
        lc.wait_for_leader(60)
        lease = await lease_rows(lc, args.rounds)
        wait = await wait_rows(lc, args.rounds)
        many = await concurrent_rows(lc, args.clients, args.client_rounds)
    load = os.getloadavg()
    print(
        f"waitgraph mcp vs the Python SDK, same run, 3-node local cluster; {args.rounds} rounds, "
        f"{args.clients} clients x {args.client_rounds} rounds; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print()
    print("| operation | MCP p50 / p99 ms | SDK p50 / p99 ms | ratio p50 / p99 |")
    print("|---|---|---|---|")
    for name, (m, s) in (("lease + release, stdio", lease), ("wait satisfied, stdio", wait)):
        print(
            f"| {name} | {pct(m, 0.5):.2f} / {pct(m, 0.99):.2f} | {pct(s, 0.5):.2f} / {pct(s, 0.99):.2f} "
            f"| {pct(m, 0.5) / pct(s, 0.5):.2f}x / {pct(m, 0.99) / pct(s, 0.99):.2f}x |"
        )
    (mr, ml), (sr, sl) = many
    print(
        f"| {args.clients} clients, lease + release, HTTP (one server) | {pct(ml, 0.5):.2f} / {pct(ml, 0.99):.2f} "
        f"| {pct(sl, 0.5):.2f} / {pct(sl, 0.99):.2f} | {pct(ml, 0.5) / pct(sl, 0.5):.2f}x / "
        f"{pct(ml, 0.99) / pct(sl, 0.99):.2f}x |"
    )
    print()
    print(f"{args.clients} clients, rounds/s: MCP {mr:,.0f}, SDK {sr:,.0f}, ratio {mr / sr:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--client-rounds", type=int, default=20)
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
