"""``waitgraph mcp`` against three real ``waitgraph serve`` processes, driven by the ``mcp``
package's own client (``ClientSession``): subprocesses over stdio and over streamable HTTP.

One cluster (auto mode, a 300 ms confirmation window) is shared by every test of the module;
each test uses its own target names. Every server process is stopped at the end of its test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client

from waitgraph.dev.mcp_agents import http_server, http_session, stdio_session
from waitgraph.dev.mcp_agents import server_env as mcp_env
from waitgraph.mcp.server import TOOLS
from waitgraph.proto.v1 import types_pb2
from waitgraph.sdk import Client, OperatorClient

from .grpc_harness import TOKENS, GrpcCluster, until
from .test_sdk import AUTO, settled
from .test_sdk_mux import streams_open

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcCluster]:
    with GrpcCluster(tmp_path_factory.mktemp("mcp"), extra_args=AUTO, http=True) as c:
        asyncio.run(settled(c))
        yield c


def endpoints(cluster: GrpcCluster) -> str:
    return ",".join(n.grpc for n in cluster.nodes)


def server_env(cluster: GrpcCluster, agent: str | None = None) -> dict[str, str]:
    nodes = [n.grpc for n in cluster.nodes]
    return mcp_env(nodes, agent, TOKENS[agent] if agent else None, WAITGRAPH_READER_TOKEN=TOKENS["ops"])


def stdio_agent(cluster: GrpcCluster, agent: str, *extra: str) -> AbstractAsyncContextManager[ClientSession]:
    """``waitgraph mcp`` as a subprocess acting as ``agent``, and an initialized ClientSession on it."""
    return stdio_session(server_env(cluster, agent), *extra)


async def call(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    """A tool call that must succeed; its structured result."""
    res = await session.call_tool(tool, args)
    assert not res.is_error, (tool, args, res.content)
    assert res.structured_content is not None
    return res.structured_content


async def refused(session: ClientSession, tool: str, **args: Any) -> str:
    """A tool call that must be a tool error; its text."""
    res = await session.call_tool(tool, args)
    assert res.is_error, (tool, args, res.structured_content)
    text = res.content[0].text  # type: ignore[union-attr]
    assert isinstance(text, str)
    return text


def ops(cluster: GrpcCluster) -> OperatorClient:
    return OperatorClient([n.grpc for n in cluster.nodes], token=TOKENS["ops"])


async def waits_on(cluster: GrpcCluster, target: str) -> list[Any]:
    async with ops(cluster) as op:
        return [w for w in (await op.graph(limit=10000, fresh=True)).waits if w.target_id == target]


async def holders_of(cluster: GrpcCluster, target: str) -> list[str]:
    async with ops(cluster) as op:
        g = await op.graph(limit=10000, fresh=True)
        return [h.execution_id for t in g.targets if t.target_id == target for h in t.holders]


# -- the listing ---------------------------------------------------------------------------------------


async def test_tool_listing_and_schemas(cluster: GrpcCluster) -> None:
    async with stdio_agent(cluster, "a") as a:
        listed = {t.name: t for t in (await a.list_tools()).tools}
        assert sorted(listed) == sorted(TOOLS)
        for tool in listed.values():
            assert tool.description and len(tool.description) > 40, tool.name
        lease = listed["lease_acquire"].input_schema
        assert lease["required"] == ["target"]
        assert lease["properties"]["target"]["pattern"].startswith("^(resource|pool|reservation):")
        assert lease["properties"]["target"]["maxLength"] == 128
        assert lease["properties"]["ttl_s"]["type"] == "number"
        assert "would_deadlock" in (listed["wait_for"].description or "")
        assert (
            listed["wait_for"].input_schema["properties"]["target"]["pattern"].startswith("^(artifact|approval|exec):")
        )
        assert listed["task_finish"].input_schema["properties"]["outcome"]["enum"] == ["completed", "failed"]
        templates = {t.uri_template for t in (await a.list_resource_templates()).resource_templates}
        assert templates == {"waitgraph://decision/{decision_id}", "waitgraph://graph/{agent_id}"}


async def test_the_docs_client_configuration_starts_the_server(cluster: GrpcCluster, tmp_path: Any) -> None:
    """docs/mcp.md's mcpServers block, with this cluster's endpoints and credentials put in."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text()
    (block,) = re.findall(r"```json\n(.*?)```", text, re.S)
    spec = json.loads(block)["mcpServers"]["waitgraph"]
    assert spec["command"] == "waitgraph" and spec["args"][0] == "mcp"
    creds = tmp_path / "credentials.json"
    creds.write_text(json.dumps({"agents": {"a": TOKENS["a"]}}))
    env = dict(os.environ, **spec["env"])
    env.update(
        WAITGRAPH_ENDPOINTS=endpoints(cluster), WAITGRAPH_CREDENTIALS=str(creds), WAITGRAPH_READER_TOKEN=TOKENS["ops"]
    )
    env.pop("WAITGRAPH_AGENT_TOKEN", None)
    bin_dir = Path(sys.executable).parent
    params = StdioServerParameters(command=str(bin_dir / spec["command"]), args=spec["args"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert (await call(session, "my_state"))["agent"] == "a"


# -- every tool, round trip -----------------------------------------------------------------------------


async def test_round_trip_of_every_tool(cluster: GrpcCluster) -> None:
    used: set[str] = set()

    async def c(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
        used.add(tool)
        return await call(session, tool, **args)

    async with stdio_agent(cluster, "a") as a, stdio_agent(cluster, "b") as b:
        task = (await c(a, "task_start", task_id="exec:rt-a"))["task"]
        assert task == "exec:rt-a"
        held = await c(a, "lease_acquire", target="resource:rt-file", ttl_s=60)
        assert held["status"] == "held" and held["lease"] >= 1 and held["task"] == "exec:rt-a"
        assert await holders_of(cluster, "resource:rt-file") == ["exec:rt-a"]
        who = await c(b, "who_holds", target="resource:rt-file")
        assert who["held_by"] == ["exec:rt-a"]
        state = await c(a, "my_state")
        assert [lease["target"] for t in state["tasks"] for lease in t["leases"]] == ["resource:rt-file"]
        assert (await c(a, "lease_release", target="resource:rt-file"))["status"] == "released"
        assert await holders_of(cluster, "resource:rt-file") == []

        # artifacts: declared by a, awaited (started, polled) by b, produced by a
        assert (await c(a, "declare_will_produce", target="artifact:rt-report"))["producer"] == "exec:rt-a"
        assert (await c(b, "wait_start", target="artifact:rt-report"))["status"] == "waiting"
        assert (await c(b, "wait_poll", target="artifact:rt-report"))["status"] == "pending"
        assert (await c(a, "produce", target="artifact:rt-report"))["status"] == "produced"
        polled = await c(b, "wait_poll", target="artifact:rt-report", block_s=10)
        assert polled == {"status": "resolved", "target": "artifact:rt-report", "reason": "target_produced"}
        assert (await c(b, "wait_start", target="artifact:rt-never"))["status"] == "waiting"
        assert len(await waits_on(cluster, "artifact:rt-never")) == 1
        assert (await c(b, "wait_cancel", target="artifact:rt-never"))["status"] == "closed"
        assert await waits_on(cluster, "artifact:rt-never") == []

        # an approval b asks agent a for; a provides it
        req = await c(b, "approval_request", approval="approval:rt-merge", approver="agent:a")
        assert req["status"] == "requested"
        await c(a, "declare_will_produce", target="approval:rt-merge")
        waiting = asyncio.ensure_future(c(b, "wait_for", target="approval:rt-merge", timeout_s=30))
        await until(lambda: _has_wait(cluster, "approval:rt-merge"), 10, "b's wait on the approval")
        assert (await c(a, "approval_decide", approval="approval:rt-merge", approved=True))["status"] == "granted"
        assert (await waiting)["reason"] == "approval_granted"

        # a delegates to b; b takes the task and reports its outcome
        delegated = asyncio.ensure_future(c(a, "delegate", agent_id="b", timeout_s=60))
        accepted = await c(b, "task_accept_delegated", timeout_s=30)
        assert accepted["status"] == "started" and accepted["task"].startswith("exec:b-")
        assert (await c(b, "task_finish", outcome="completed"))["task"] == accepted["task"]
        assert (await delegated)["status"] == "completed"

        # a human approver makes the approval external
        await c(b, "approval_request", approval="approval:rt-deploy", approver="human:alice")
        assert (await c(b, "who_holds", target="approval:rt-deploy"))["satisfier"] == "human:alice"

        assert (await c(a, "my_cycles"))["cycles"] == []
        # b waits for a's execution to finish
        assert (await c(b, "wait_start", target="exec:rt-a"))["status"] == "waiting"
        around_b = json.loads((await b.read_resource("waitgraph://graph/b")).contents[0].text)  # type: ignore[union-attr]
        assert {w["target"] for w in around_b["waits"]} == {"exec:rt-a"}
        finished = await c(a, "task_finish", outcome="completed")
        assert finished == {"status": "completed", "task": "exec:rt-a", "released": []}
        polled = await c(b, "wait_poll", target="exec:rt-a", block_s=10)
        assert polled == {"status": "resolved", "target": "exec:rt-a", "reason": "target_waiter_finished"}
    assert used == set(TOOLS)


async def _has_wait(cluster: GrpcCluster, target: str) -> bool:
    return bool(await waits_on(cluster, target))


# -- deadlocks -----------------------------------------------------------------------------------------


async def test_a_cycle_is_refused_with_its_path(cluster: GrpcCluster) -> None:
    async with stdio_agent(cluster, "a") as a, stdio_agent(cluster, "b") as b:
        await call(a, "task_start", task_id="exec:cy-a")
        await call(b, "task_start", task_id="exec:cy-b")
        await call(b, "declare_will_produce", target="artifact:cy-branch")
        await call(a, "lease_acquire", target="resource:cy-file")
        waiting = asyncio.ensure_future(
            a.call_tool(
                "wait_for", {"target": "artifact:cy-branch", "timeout_s": 60}, meta={"traceparent": TRACEPARENT}
            )
        )
        await until(lambda: _has_wait(cluster, "artifact:cy-branch"), 10, "a's wait on the branch")
        (registered,) = await waits_on(cluster, "artifact:cy-branch")
        assert registered.reason.endswith(f"traceparent={TRACEPARENT}"), registered.reason
        res = await b.call_tool("lease_acquire", {"target": "resource:cy-file", "wait_s": 30})
        assert res.is_error
        err = res.structured_content
        assert err is not None and err["error"] == "would_deadlock"
        assert err["path"] == ["exec:cy-b", "resource:cy-file", "exec:cy-a", "artifact:cy-branch", "exec:cy-b"]
        assert "exec:cy-b -> resource:cy-file -> exec:cy-a" in res.content[0].text  # type: ignore[union-attr]
        assert await waits_on(cluster, "resource:cy-file") == []  # the refusal registered nothing
        await call(b, "produce", target="artifact:cy-branch")  # re-plan: the branch first
        done = await waiting
        assert not done.is_error and done.structured_content == {
            "status": "resolved",
            "target": "artifact:cy-branch",
            "reason": "target_produced",
        }
        await call(a, "task_finish")
        held = await call(b, "lease_acquire", target="resource:cy-file", wait_s=10)
        assert held["status"] == "held"
        await call(b, "task_finish")


async def test_a_victim_with_prevention_off(cluster: GrpcCluster) -> None:
    async with (
        stdio_agent(cluster, "a", "--no-prevention") as a,
        stdio_agent(cluster, "b", "--no-prevention") as b,
    ):
        await call(a, "task_start", task_id="exec:vi-a", checkpoint=False)  # the policy spares a
        await call(b, "task_start", task_id="exec:vi-b", checkpoint=True)
        await call(b, "declare_will_produce", target="artifact:vi-review")
        await call(b, "lease_acquire", target="resource:vi-notes")
        await call(a, "lease_acquire", target="resource:vi-browser")
        a_waits = asyncio.ensure_future(call(a, "wait_for", target="artifact:vi-review", timeout_s=60))
        await until(lambda: _has_wait(cluster, "artifact:vi-review"), 10, "a's wait on the review")
        rolled = await call(b, "lease_acquire", target="resource:vi-browser", wait_s=30)
        assert rolled["status"] == "rolled_back" and rolled["retry"] is True
        assert rolled["decision_id"].startswith("d") and rolled["task"] == "exec:vi-b"
        assert rolled["released"] == ["resource:vi-notes"]
        assert rolled["generation"] == 2
        assert await holders_of(cluster, "resource:vi-notes") == []
        async with ops(cluster) as op:
            decision = await op.decision(rolled["decision_id"])
            assert decision is not None and decision.winner_id == "exec:vi-b"
        explained = await b.read_resource(f"waitgraph://decision/{rolled['decision_id']}")
        assert '"winner": "exec:vi-b"' in explained.contents[0].text  # type: ignore[union-attr]
        # the retry: b produces the review first, then takes the browser once a lets go
        await call(b, "declare_will_produce", target="artifact:vi-review")
        await call(b, "produce", target="artifact:vi-review")
        assert (await a_waits)["reason"] == "target_produced"
        await call(a, "task_finish")
        assert (await call(b, "lease_acquire", target="resource:vi-browser", wait_s=10))["status"] == "held"
        await call(b, "task_finish")


# -- blocking calls ------------------------------------------------------------------------------------


async def test_cancelling_a_blocked_call_leaves_no_open_wait(cluster: GrpcCluster) -> None:
    progressed = asyncio.Event()
    notes: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append(progress)
        progressed.set()

    async with stdio_agent(cluster, "c") as c:
        blocked = asyncio.ensure_future(
            c.call_tool("wait_for", {"target": "artifact:ca-never", "timeout_s": 120}, progress_callback=on_progress)
        )
        await asyncio.wait_for(progressed.wait(), 15)
        assert len(await waits_on(cluster, "artifact:ca-never")) == 1
        blocked.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await blocked

        async def closed() -> bool:
            return not await waits_on(cluster, "artifact:ca-never")

        await until(closed, 10, "the cancelled wait to close")
        assert notes and notes[0] == 1
        # the session still works after the cancellation
        assert (await call(c, "my_state"))["agent"] == "c"


# -- HTTP ----------------------------------------------------------------------------------------------


def http_agent(url: str, agent: str) -> AbstractAsyncContextManager[ClientSession]:
    return http_session(url, agent, TOKENS[agent])


async def test_http_refuses_a_missing_or_wrong_token(cluster: GrpcCluster) -> None:
    with http_server(server_env(cluster)) as (url, _):
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        async with httpx2.AsyncClient() as http:
            cases = {
                "no token": ({}, 401),
                "not bearer": ({"Authorization": f"Basic {TOKENS['a']}", "X-Waitgraph-Agent": "a"}, 401),
                "no agent": ({"Authorization": f"Bearer {TOKENS['a']}"}, 401),
                "unknown token": ({"Authorization": "Bearer not-a-token-0123456789", "X-Waitgraph-Agent": "a"}, 401),
                "expired token": ({"Authorization": f"Bearer {TOKENS['old']}", "X-Waitgraph-Agent": "a"}, 401),
                "a's token as b": ({"Authorization": f"Bearer {TOKENS['a']}", "X-Waitgraph-Agent": "b"}, 403),
            }
            for what, (headers, status) in cases.items():
                got = await http.post(url, json=body, headers={"Accept": "application/json", **headers})
                assert got.status_code == status, (what, got.status_code, got.text)
                assert got.json()["error"] in ("unauthenticated", "permission_denied", "not_owner", "wrong_agent"), (
                    what,
                    got.text,
                )
        async with http_agent(url, "a") as a, http_agent(url, "b") as b:
            assert sorted(t.name for t in (await a.list_tools()).tools) == sorted(TOOLS)
            held = await call(a, "lease_acquire", target="resource:ht-port")
            assert held["status"] == "held"
            # each MCP session acts as its own agent: b cannot release a's lease
            assert "you hold no lease" in await refused(b, "lease_release", target="resource:ht-port")
            assert (await call(b, "my_state"))["agent"] == "b"

            async def one_stream() -> bool:  # the server's one Client carries both agents' events
                return await streams_open(cluster) == 1

            await until(one_stream, 10, "one event stream on the nodes for the server's two agents")
            assert "permission_denied" in (await b.read_resource("waitgraph://graph/a")).contents[0].text  # type: ignore[union-attr]
            await call(a, "lease_release", target="resource:ht-port")
            assert (await call(b, "lease_acquire", target="resource:ht-left", ttl_s=3600))["status"] == "held"
        # b's client ended its MCP session (DELETE): the server released b's lease and left its session

        async def left() -> bool:
            return await holders_of(cluster, "resource:ht-left") == []

        await until(left, 10, "b's lease to be released when its client left")


async def test_an_ended_http_session_has_left_when_its_delete_is_answered(cluster: GrpcCluster) -> None:
    """The client's DELETE is answered once the agent's waitgraph session has left. The same agent
    joining at once (here through the SDK, as ``scripts/bench mcp`` does) gets a session of its own:
    a leave that came after that join would end it (a join of an ACTIVE session only renews it), and
    its first write would be refused ``no_session``. Several rounds: the race was lost one time in
    two or three."""
    agent = "c"
    with http_server(server_env(cluster)) as (url, _):
        for i in range(4):
            async with http_agent(url, agent) as c:
                assert (await call(c, "lease_acquire", target=f"resource:rejoin-{i}", ttl_s=3600))["status"] == "held"
            # no waiting: the DELETE's answer already means the session left and the lease went
            assert await holders_of(cluster, f"resource:rejoin-{i}") == []
            async with ops(cluster) as op:
                sessions = (await op.graph(agent_id=agent, fresh=True)).sessions
            assert [s.status for s in sessions if s.agent_id == agent] == [types_pb2.SESSION_STATUS_LEFT]
            async with (
                Client([n.grpc for n in cluster.nodes], token=TOKENS[agent]) as client,
                client.session(agent) as session,
                session.execution(f"exec:rejoin-{i}", run_id=f"run-rejoin-{i}") as ex,
            ):
                await ex.acquire(f"resource:rejoin-sdk-{i}")
                await ex.release(f"resource:rejoin-sdk-{i}")


async def test_a_stdio_client_leaving_releases_its_leases(cluster: GrpcCluster) -> None:
    async with stdio_agent(cluster, "c") as c:
        assert (await call(c, "lease_acquire", target="resource:st-left", ttl_s=3600))["status"] == "held"
        assert len(await holders_of(cluster, "resource:st-left")) == 1
    # stdin closed: the server finished its tasks (releasing the lease) and left the session

    async def left() -> bool:
        return await holders_of(cluster, "resource:st-left") == []

    await until(left, 10, "c's lease to be released when its client left")


async def test_stdio_with_another_agents_token_is_refused(cluster: GrpcCluster) -> None:
    """A stdio server told it is agent a but given b's token acts for nobody: a tool error."""
    env = server_env(cluster, "a") | {"WAITGRAPH_AGENT_TOKEN": TOKENS["b"]}
    async with stdio_session(env) as session:
        res = await session.call_tool("my_state", {})
        assert res.is_error and res.structured_content is not None
        assert res.structured_content["error"] in ("not_owner", "permission_denied", "wrong_agent"), res.content


async def test_a_killed_servers_lease_ends_at_its_ttl_in_the_cluster(cluster: GrpcCluster) -> None:
    """The server dies with a lease held: no LeaveSession, no Release, and the session's expiry
    releases nothing (docs/design.md §5). The lease's TTL, sent with the Acquire, is the cluster's: it
    ends the lease, so it does not outlive its holder's session plus its TTL (issue #39)."""
    lease_s, ttl_s = 2.0, 3.0
    margin_s = 5.0  # the leader's housekeeping period (250 ms), the Tick's round trip, a slow CI box
    with http_server(server_env(cluster), "--lease-ms", str(int(lease_s * 1000))) as (url, proc):
        async with http_agent(url, "c") as c:
            held = await call(c, "lease_acquire", target="resource:ki-env", ttl_s=ttl_s)
            granted_at = asyncio.get_running_loop().time()
            assert held["status"] == "held"
            assert len(await holders_of(cluster, "resource:ki-env")) == 1
            proc.kill()  # only the cluster can end the lease now
            proc.wait()

            async def released() -> bool:
                return await holders_of(cluster, "resource:ki-env") == []

            await until(released, lease_s + ttl_s + margin_s, "the killed server's lease to end at its TTL")
            # not before the TTL (the cluster's clock and this one differ by the call's round trip)
            assert asyncio.get_running_loop().time() - granted_at >= ttl_s - 0.5

            async def expired() -> bool:
                async with ops(cluster) as op:
                    sessions = (await op.graph(agent_id="c", fresh=True)).sessions
                    return any(s.agent_id == "c" and s.status == types_pb2.SESSION_STATUS_EXPIRED for s in sessions)

            await until(expired, 20, "c's session to expire")


# -- bad input -----------------------------------------------------------------------------------------

LONG = "x" * 200
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("lease_acquire", {"target": "bogus:file"}, "pattern"),
    ("lease_acquire", {"target": "artifact:not-a-lease"}, "pattern"),
    ("lease_acquire", {"target": "resource:"}, "pattern"),
    ("lease_acquire", {"target": "resource:has space"}, "pattern"),
    ("lease_acquire", {"target": "the browser"}, "pattern"),
    ("lease_acquire", {"target": f"resource:{LONG}"}, "at most 128"),
    ("lease_acquire", {"target": 42}, "string"),
    ("lease_acquire", {}, "required"),
    ("lease_acquire", {"target": "resource:bad-ttl", "ttl_s": -1}, "greater than"),
    ("lease_acquire", {"target": "resource:bad-ttl", "ttl_s": "long"}, "number"),
    ("lease_acquire", {"target": "resource:bad-wait", "wait_s": 99999}, "less than or equal"),
    ("lease_acquire", {"target": "resource:bad-prio", "priority": 5000}, "less than or equal"),
    ("lease_release", {"target": "resource:never-held"}, "you hold no lease"),
    ("wait_for", {"target": "resource:x"}, "pattern"),
    ("wait_for", {"target": "artifact:../etc"}, "pattern"),
    ("wait_for", {"target": "artifact:ok", "timeout_s": -5}, "greater than or equal"),
    ("wait_for", {"target": ["artifact:a"]}, "string"),
    ("wait_poll", {"target": "artifact:never-started"}, "call wait_start first"),
    ("wait_poll", {"target": "artifact:ok", "block_s": 1000}, "less than or equal"),
    ("wait_cancel", {"target": "artifact:never-started"}, "no started wait"),
    ("declare_will_produce", {"target": "resource:x"}, "pattern"),
    ("produce", {"target": "approval:x"}, "pattern"),
    ("approval_request", {"approval": "approval:ok", "approver": "alice"}, "pattern"),
    ("approval_request", {"approval": "artifact:x", "approver": "human:alice"}, "pattern"),
    ("approval_decide", {"approval": "approval:ok", "approved": "maybe"}, "bool"),
    ("approval_decide", {"approval": "approval:bad-never-made", "approved": True}, "approval:bad-never-made"),
    ("delegate", {"agent_id": ""}, "pattern"),
    ("delegate", {"agent_id": "a b"}, "pattern"),
    ("task_start", {"task_id": "not-an-exec"}, "pattern"),
    ("task_start", {"priority": "high"}, "integer"),
    ("task_finish", {"outcome": "exploded"}, "completed"),
    ("task_finish", {"reason": LONG * 2}, "at most 200"),
    ("task_finish", {}, "no started task"),
    ("who_holds", {"target": "free text target"}, "pattern"),
]


async def test_bad_inputs_are_tool_errors_that_change_nothing(cluster: GrpcCluster) -> None:
    assert len(BAD) >= 20
    # a long lease: no heartbeat lands while the table runs
    async with stdio_agent(cluster, "c", "--lease-ms", "600000") as c:
        await call(c, "my_state")  # joined, default task started: from here on nothing may change
        async with ops(cluster) as op:
            before, steady = "", 0
            while steady < 3:
                await asyncio.sleep(0.3)
                now = (await op.status(fresh=True, include_digest=True)).state_digest
                steady, before = (steady + 1, now) if now == before else (0, now)
            for tool, args, expected in BAD:
                text = await refused(c, tool, **args)
                assert expected in text, (tool, args, text)
            after = (await op.status(fresh=True, include_digest=True)).state_digest
        assert after == before
