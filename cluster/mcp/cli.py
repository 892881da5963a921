"""``waitgraph mcp``: the MCP server's command (imports the ``mcp`` package only when run)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import click

__all__ = ["mcp"]

DEFAULT_ENDPOINTS = "127.0.0.1:50051,127.0.0.1:50052,127.0.0.1:50053"


def _read(path: str | None) -> str | None:
    return Path(path).read_text().strip() if path else None


def _agent_token(token_file: str | None, agent_id: str | None) -> str | None:
    """The agent's token: --token-file, $WAITGRAPH_AGENT_TOKEN, or the agent's entry of
    $WAITGRAPH_CREDENTIALS (the file `waitgraph dev` writes)."""
    token = _read(token_file) or os.environ.get("WAITGRAPH_AGENT_TOKEN")
    creds = os.environ.get("WAITGRAPH_CREDENTIALS")
    if token is None and creds and agent_id:
        agents = json.loads(Path(creds).read_text()).get("agents", {})
        token = agents.get(agent_id)
    return token


@click.command()
@click.option(
    "--endpoints", "-e", default=None, help="host:port,... [env WAITGRAPH_ENDPOINTS; default: waitgraph dev's]"
)
@click.option(
    "--agent", "agent_id", default=None, help="stdio: the agent id the token is bound to [env WAITGRAPH_AGENT]"
)
@click.option("--token-file", default=None, help="stdio: the agent's token [env WAITGRAPH_AGENT_TOKEN]")
@click.option(
    "--reader-token-file",
    default=None,
    help="an operator token for the read tools and resources [env WAITGRAPH_READER_TOKEN]; without it reads are off",
)
@click.option("--http", "http_addr", default=None, help="serve streamable HTTP on HOST:PORT instead of stdio")
@click.option("--lease-ms", type=click.IntRange(1000, 600_000), default=30_000, show_default=True, help="session lease")
@click.option(
    "--idle-timeout-s",
    type=click.FloatRange(1, 86400),
    default=300.0,
    show_default=True,
    help="HTTP: an agent whose client made no call this long leaves its session",
)
@click.option(
    "--prevention/--no-prevention",
    default=True,
    show_default=True,
    help="refuse a wait that would close a cycle (off: register it; the cluster rolls a victim back)",
)
def mcp(
    endpoints: str | None,
    agent_id: str | None,
    token_file: str | None,
    reader_token_file: str | None,
    http_addr: str | None,
    lease_ms: int,
    idle_timeout_s: float,
    prevention: bool,
) -> None:
    """An MCP server: any MCP client coordinates through waitgraph (docs/mcp.md). stdio by default, acting as
    one agent; --http ADDR serves many agents, each with its own bearer token (loopback by default)."""
    try:
        from .run import serve_http, serve_stdio
    except ImportError as exc:
        raise click.ClickException(f"the MCP server needs the extra: pip install 'waitgraph[mcp]' ({exc})") from None
    eps = [e for e in (endpoints or os.environ.get("WAITGRAPH_ENDPOINTS") or DEFAULT_ENDPOINTS).split(",") if e]
    reader = _read(reader_token_file) or os.environ.get("WAITGRAPH_READER_TOKEN")
    if http_addr is not None:
        host, _, port = http_addr.rpartition(":")
        if not port.isdigit():
            raise click.BadParameter("HOST:PORT, e.g. 127.0.0.1:8765", param_hint="--http")
        asyncio.run(
            serve_http(
                host or "127.0.0.1",
                int(port),
                eps,
                lease_ms=lease_ms,
                reader_token=reader,
                idle_timeout_s=idle_timeout_s,
            )
        )
        return
    agent_id = agent_id or os.environ.get("WAITGRAPH_AGENT")
    if not agent_id:
        raise click.UsageError("stdio acts as one agent: pass --agent ID (or set WAITGRAPH_AGENT)")
    token = _agent_token(token_file, agent_id)
    if not token:
        raise click.UsageError("no agent token: --token-file, WAITGRAPH_AGENT_TOKEN or WAITGRAPH_CREDENTIALS")
    asyncio.run(serve_stdio(eps, token, agent_id, lease_ms=lease_ms, reader_token=reader, prevent=prevention))
