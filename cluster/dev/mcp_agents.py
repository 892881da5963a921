"""Scenario 6 of ``scripts/demo``: two scripted MCP clients (no model), each its own process,
each talking to its own ``waitgraph mcp`` server over stdio with the ``mcp`` package's client.

The holder leases ``resource:file-src-app.py`` and waits for ``artifact:branch-feature-x``; the
re-planner, which will push that branch, asks for the file: that wait would close the cycle, so
the server refuses it at once with the path. It re-plans (pushes the branch first), the holder's
wait resolves and it lets the file go, and both finish. Nobody is rolled back.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any, Protocol

from mcp import ClientSession, StdioServerParameters, stdio_client

__all__ = ["BRANCH", "FILE", "replanner", "holder"]

FILE, BRANCH = "resource:file-src-app.py", "artifact:branch-feature-x"


class IO(Protocol):
    """What an agent process of the demo gets from the driver (:class:`waitgraph.dev.demo.AgentIO`)."""

    endpoints: list[str]
    token: str

    def say(self, text: str) -> None: ...

    def mark(self, name: str) -> None: ...

    async def go(self) -> None: ...


@contextlib.asynccontextmanager
async def mcp_session(io: IO, agent_id: str) -> AsyncIterator[ClientSession]:
    """``waitgraph mcp`` over stdio acting as ``agent_id`` with the driver's token for it."""
    env = dict(os.environ, WAITGRAPH_ENDPOINTS=",".join(io.endpoints), WAITGRAPH_AGENT=agent_id)
    env["WAITGRAPH_AGENT_TOKEN"] = io.token
    params = StdioServerParameters(command=sys.executable, args=["-m", "waitgraph", "mcp"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def _call(session: ClientSession, tool: str, **args: Any) -> tuple[bool, dict[str, Any]]:
    res = await session.call_tool(tool, args)
    data = res.structured_content
    if data is None:
        text = res.content[0].text if res.content and res.content[0].type == "text" else "{}"
        data = {"message": text}
    return res.is_error, dict(data)


async def _ok(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    error, data = await _call(session, tool, **args)
    if error:
        raise RuntimeError(f"{tool} failed: {json.dumps(data)}")
    return data


async def holder(io: IO) -> None:
    async with mcp_session(io, "a") as s:
        held = await _ok(s, "lease_acquire", target=FILE, ttl_s=120)
        io.say(f"lease_acquire {FILE}: held, lease {held['lease']}")
        await _ok(s, "wait_start", target=BRANCH)
        io.say(f"wait_start {BRANCH}: registered before blocking (the branch is the re-planner's)")
        io.mark("waiting")
        polled = await _ok(s, "wait_poll", target=BRANCH, block_s=30)
        io.say(f"wait_poll {BRANCH}: {polled['status']} ({polled.get('reason')}); edits done, releases the file")
        await _ok(s, "lease_release", target=FILE)
        io.say("finished")
        io.mark("done")


async def replanner(io: IO) -> None:
    async with mcp_session(io, "b") as s:
        await _ok(s, "declare_will_produce", target=BRANCH)
        io.say(f"declare_will_produce {BRANCH}")
        io.mark("declared")
        await io.go()
        error, refusal = await _call(s, "lease_acquire", target=FILE, wait_s=30)
        if not error or refusal.get("error") != "would_deadlock":
            raise RuntimeError(f"expected a would_deadlock refusal, got {refusal}")
        io.say(f"lease_acquire {FILE}: refused at once, {refusal['error']}: {' -> '.join(refusal['path'])}")
        io.mark("refused")
        await _ok(s, "produce", target=BRANCH)
        io.say(f"re-planned: produce {BRANCH} first")
        held = await _ok(s, "lease_acquire", target=FILE, wait_s=30)
        io.say(f"lease_acquire {FILE}: held, lease {held['lease']} (handed over: {held['handed_over']})")
        await _ok(s, "lease_release", target=FILE)
        io.say("finished")
        io.mark("done")
