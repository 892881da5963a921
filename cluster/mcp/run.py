"""The two transports of ``waitgraph mcp``: stdio (one agent: the process's token) and
streamable HTTP (many agents: each request's bearer token).

Over HTTP every request must carry ``Authorization: Bearer <agent token>`` and
``X-Waitgraph-Agent: <agent id>``; the first request of an agent joins its waitgraph session with
that token, and a token the cluster refuses (unknown, expired, or bound to another agent) is
answered 401/403 before any MCP message is read. An agent leaves its waitgraph session when its
client ends its last MCP session (``DELETE``, answered once the session has left), or once it has
made no call for ``idle_timeout_s`` and has none in flight (a client that vanished).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.mcpserver import Context

from waitgraph import Client, OperatorClient
from waitgraph.sdk import PermissionDenied, RpcError, Unauthenticated

from .agent import AgentState
from .server import build_server

__all__ = ["AGENT_HEADER", "serve_http", "serve_stdio"]

logger = logging.getLogger("waitgraph.mcp")

AGENT_HEADER = "x-waitgraph-agent"
SESSION_HEADER = "mcp-session-id"
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def serve_stdio(
    endpoints: list[str], token: str, agent_id: str, *, lease_ms: int, reader_token: str | None, prevent: bool = True
) -> None:
    """Serve one MCP client on stdin/stdout as ``agent_id``; leave the session when stdin closes."""
    agent = AgentState(endpoints, token, agent_id, lease_ms=lease_ms, reader_token=reader_token, prevent=prevent)
    opened = asyncio.Lock()
    is_open = False

    async def agent_of(ctx: Context) -> AgentState:
        nonlocal is_open
        async with opened:
            if not is_open:
                await agent.open()
                is_open = True
        return agent

    try:
        await build_server(agent_of).run_stdio_async()
    finally:
        if is_open:
            await agent.close()


class _Agents:
    """Every agent an HTTP server acts for, by (token, agent id)."""

    def __init__(
        self, endpoints: list[str], lease_ms: int, reader_token: str | None, idle_timeout_s: float, prevent: bool
    ) -> None:
        self.endpoints = endpoints
        self.prevent = prevent
        self.lease_ms = lease_ms
        self.reader_token = reader_token
        self.idle_timeout_s = idle_timeout_s
        self.by_key: dict[tuple[str, str], AgentState] = {}
        self.lock = asyncio.Lock()
        self._opening: str | None = None
        self._last_token: str | None = None
        self.client = Client(endpoints, token=self._call_token, lease_ms=lease_ms)
        """Every agent's session, on one client: one event stream, each agent's own token."""
        self.reader = OperatorClient(endpoints, token=reader_token) if reader_token else None

    def _call_token(self) -> str:
        """The token the shared client's calls carry (each session's writes and its part of the
        stream carry the agent's own): the latest open agent's, else the one opening, else the
        last one that opened."""
        for agent in reversed(self.by_key.values()):
            self._last_token = agent.token
            return agent.token
        token = self._opening or self._last_token
        if token is None:
            raise PermissionError("no agent token")
        return token

    async def get(self, token: str, agent_id: str) -> AgentState:
        async with self.lock:
            agent = self.by_key.get((token, agent_id))
            if agent is None:
                agent = AgentState(
                    self.endpoints,
                    token,
                    agent_id,
                    lease_ms=self.lease_ms,
                    reader_token=self.reader_token,
                    prevent=self.prevent,
                    client=self.client,
                    reader=self.reader,
                )
                self._opening = token
                try:
                    await agent.open()
                finally:
                    self._opening = None
                agent.last_used_s = asyncio.get_running_loop().time()
                self.by_key[(token, agent_id)] = agent
            return agent

    async def reap(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.idle_timeout_s / 2))
            now = asyncio.get_running_loop().time()
            for key, agent in list(self.by_key.items()):
                if agent.in_flight == 0 and now - agent.last_used_s > self.idle_timeout_s:
                    del self.by_key[key]
                    logger.info("agent %s idle for %.0f s: leaving its session", agent.agent_id, self.idle_timeout_s)
                    await agent.close()

    def opened(self, agent: AgentState, mcp_session_id: str) -> None:
        agent.mcp_sessions.add(mcp_session_id)

    async def ended(self, token: str, agent_id: str, mcp_session_id: str) -> None:
        """The client ended an MCP session (DELETE): when it was the agent's last one, leave the
        agent's session as soon as its calls have unwound (the transport cancels them)."""
        agent = self.by_key.get((token, agent_id))
        if agent is None:
            return
        agent.mcp_sessions.discard(mcp_session_id)
        for _ in range(100):
            if agent.in_flight == 0:
                break
            await asyncio.sleep(0.1)
        if not agent.mcp_sessions and agent.in_flight == 0 and self.by_key.get((token, agent_id)) is agent:
            del self.by_key[(token, agent_id)]
            logger.info("agent %s ended its last MCP session: leaving its waitgraph session", agent_id)
            await agent.close()

    async def close(self) -> None:
        agents, self.by_key = list(self.by_key.values()), {}
        for agent in agents:
            await agent.close()
        await self.client.close()
        if self.reader is not None:
            await self.reader.close()


def _credentials(headers: dict[str, str]) -> tuple[str, str] | None:
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    agent_id = headers.get(AGENT_HEADER, "")
    if scheme.lower() != "bearer" or not token.strip() or not agent_id:
        return None
    return token.strip(), agent_id


async def _deny(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": code, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _authenticating(app: ASGIApp, agents: _Agents) -> ASGIApp:
    """Refuse a request without an agent token (or with one the cluster refuses) before MCP sees it."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        creds = _credentials(headers)
        if creds is None:
            await _deny(
                send, 401, "unauthenticated", f"send Authorization: Bearer <agent token> and {AGENT_HEADER}: <agent id>"
            )
            return
        try:
            agent = await agents.get(*creds)
        except Unauthenticated as exc:
            await _deny(send, 401, "unauthenticated", exc.message)
            return
        except PermissionDenied as exc:
            await _deny(send, 403, exc.code or "permission_denied", exc.message)
            return
        except RpcError as exc:
            await _deny(send, 503, exc.code or exc.status.name.lower(), exc.message)
            return
        session_id = headers.get(SESSION_HEADER)
        if not session_id:
            await app(scope, receive, send)
        elif scope.get("method") != "DELETE":
            agents.opened(agent, session_id)
            await app(scope, receive, send)
        else:
            # The DELETE is answered only once the agent has left its waitgraph session: a client
            # told its session ended may join again at once (through MCP or the SDK), and a leave
            # still on its way would end that new session (a join of an ACTIVE session renews it).
            answer: list[Message] = []

            async def held(message: Message) -> None:
                answer.append(message)

            await app(scope, receive, held)
            await agents.ended(*creds, session_id)
            for message in answer:
                await send(message)

    return wrapped


async def serve_http(
    host: str,
    port: int,
    endpoints: list[str],
    *,
    lease_ms: int,
    reader_token: str | None,
    idle_timeout_s: float = 300.0,
    prevent: bool = True,
) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until cancelled."""
    import uvicorn

    agents = _Agents(endpoints, lease_ms, reader_token, idle_timeout_s, prevent)

    async def agent_of(ctx: Context) -> AgentState:
        creds = _credentials({k.lower(): v for k, v in (ctx.headers or {}).items()})
        if creds is None:  # the middleware refused it already; a transport without headers
            raise PermissionError("no agent token")
        return await agents.get(*creds)

    app = build_server(agent_of).streamable_http_app(host=host, session_idle_timeout=idle_timeout_s)
    config = uvicorn.Config(_authenticating(app, agents), host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    reaper = asyncio.get_running_loop().create_task(agents.reap())
    try:
        await server.serve()
    finally:
        reaper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reaper
        await agents.close()
