"""MCP clients of ``waitgraph mcp`` (the ``mcp`` package's ``ClientSession``) for the demo, the
MCP benchmark and tests: a server as a child over stdio or streamable HTTP, and a session on it.

Scenario 6 of ``scripts/demo``: two scripted MCP clients (no model), each its own process,
each talking to its own ``waitgraph mcp`` server over stdio.

The holder leases ``resource:file-src-app.py`` and waits for ``artifact:branch-feature-x``; the
re-planner, which holds the branch's worktree and will push the branch, asks for the file: that
wait would close the cycle, so the server refuses it at once with the path. It releases the
worktree, re-plans (pushes the branch first), the holder's wait resolves and it lets the file go,
and both finish. Nobody is rolled back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Protocol

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from waitgraph.dev.localcluster import free_ports

__all__ = ["BRANCH", "FILE", "holder", "http_server", "http_session", "replanner", "server_env", "stdio_session"]

FILE, BRANCH = "resource:file-src-app.py", "artifact:branch-feature-x"
WORKTREE = "resource:worktree-feature-x"
"""What the re-planner holds while it works on the branch, and lets go when it re-plans."""


class IO(Protocol):
    """What an agent process of the demo gets from the driver (:class:`waitgraph.dev.demo.AgentIO`)."""

    endpoints: list[str]
    token: str

    def say(self, text: str) -> None: ...

    def mark(self, name: str) -> None: ...

    async def go(self) -> None: ...


def server_env(
    endpoints: Sequence[str], agent: str | None = None, token: str | None = None, **more: str
) -> dict[str, str]:
    """This process's environment for a ``waitgraph mcp`` child: the cluster, the agent and its
    token (stdio), and ``more`` (``WAITGRAPH_READER_TOKEN=...``)."""
    env = dict(os.environ, WAITGRAPH_ENDPOINTS=",".join(endpoints), **more)
    if agent is not None:
        env["WAITGRAPH_AGENT"] = agent
    if token is not None:
        env["WAITGRAPH_AGENT_TOKEN"] = token
    return env


@contextlib.asynccontextmanager
async def stdio_session(env: dict[str, str], *args: str) -> AsyncIterator[ClientSession]:
    """``waitgraph mcp ARGS`` as a child over stdio (``env``: :func:`server_env`), and an
    initialized ClientSession on it."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "waitgraph", "mcp", *args], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextlib.contextmanager
def http_server(
    env: dict[str, str], *args: str, timeout_s: float = 30.0
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``waitgraph mcp --http`` on a free loopback port, once it listens: (its URL, the process).
    Stopped (SIGINT, then killed) on the way out."""
    (port,) = free_ports(1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "waitgraph", "mcp", "--http", f"127.0.0.1:{port}", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                why = proc.stderr.read().decode(errors="replace") if proc.poll() is not None and proc.stderr else ""
                raise RuntimeError(f"waitgraph mcp --http did not listen on {port}: {why[-2000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.asynccontextmanager
async def http_session(url: str, agent: str, token: str) -> AsyncIterator[ClientSession]:
    """An initialized ClientSession over streamable HTTP, as ``agent`` with its bearer token."""
    headers = {"Authorization": f"Bearer {token}", "X-Waitgraph-Agent": agent}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
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
    async with stdio_session(server_env(io.endpoints, "a", io.token)) as s:
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
    async with stdio_session(server_env(io.endpoints, "b", io.token)) as s:
        await _ok(s, "declare_will_produce", target=BRANCH)
        io.say(f"declare_will_produce {BRANCH}")
        held = await _ok(s, "lease_acquire", target=WORKTREE, ttl_s=120)
        io.say(f"lease_acquire {WORKTREE}: held, lease {held['lease']}")
        io.mark("declared")
        await io.go()
        error, refusal = await _call(s, "lease_acquire", target=FILE, wait_s=30)
        if not error or refusal.get("error") != "would_deadlock":
            raise RuntimeError(f"expected a would_deadlock refusal, got {refusal}")
        io.say(f"lease_acquire {FILE}: refused at once, {refusal['error']}: {' -> '.join(refusal['path'])}")
        io.mark("refused")
        await _ok(s, "lease_release", target=WORKTREE)
        await _ok(s, "produce", target=BRANCH)
        io.say(f"re-planned: released {WORKTREE}, pushed the branch (produce {BRANCH}) first")
        held = await _ok(s, "lease_acquire", target=FILE, wait_s=30)
        io.say(f"lease_acquire {FILE}: held, lease {held['lease']} (handed over: {held['handed_over']})")
        await _ok(s, "lease_release", target=FILE)
        io.say("finished")
        io.mark("done")
