"""A session that knows when it is lost, first contact, and many streams closing at once: the SDK
against real ``waitgraph serve`` processes (the one launcher, :class:`LocalCluster`).

Bounds here are generous on purpose: they state a correctness property (the SDK does not wait
forever), not a speed; timings belong in scripts/bench.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

import pytest

from waitgraph.dev.localcluster import LocalCluster
from waitgraph.sdk import Client, SessionLost, SessionState, Unavailable

from .grpc_harness import FRONTS, front_args

AGENTS = [f"x{i}" for i in range(64)]


def error_lines(lc: LocalCluster) -> list[str]:
    """Every line any node logged at error level (or an unformatted traceback)."""
    bad = []
    for m in lc.members:
        for line in m.log_tail(10**7).splitlines():
            try:
                level = json.loads(line).get("level")
            except ValueError:
                level = "error" if ("Traceback" in line or "Error" in line) else None
            if level in ("error", "critical"):
                bad.append(f"{m.node_id}: {line}")
    return bad


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("front", FRONTS)
async def test_64_sessions_closing_their_streams_at_once_leave_no_error_in_any_log(
    local_cluster: Callable[..., LocalCluster], front: str
) -> None:
    lc = local_cluster("close64", agents=AGENTS, serve_args=front_args(front))
    assert lc.credentials is not None
    clients = [Client(lc.endpoints, lc.credentials.agents[a]) for a in AGENTS]
    sessions = [c.session(a) for c, a in zip(clients, AGENTS, strict=True)]
    await asyncio.gather(*(s.open() for s in sessions))
    # Events keep flowing to every stream while they close: each agent's executions change state,
    # so a node's stream handlers are mid-send (suspended at their ``yield``) when the client goes.

    async def busy(s: Any) -> None:
        for i in range(10**6):
            async with s.execution(run_id=f"r-{s.agent_id}-{i}"):
                pass

    work = [asyncio.ensure_future(busy(s)) for s in sessions]
    await asyncio.sleep(2)
    # All at once, the way 32 agents ending together did: the clients go, streams and all.
    await asyncio.gather(*(c.close() for c in clients))
    for t in work:
        t.cancel()
    await asyncio.gather(*work, return_exceptions=True)
    await asyncio.sleep(3)  # the nodes notice the cancelled streams and finalise their handlers
    assert error_lines(lc) == []


@pytest.mark.timeout(60)
async def test_first_contact_with_an_unreachable_endpoint_is_a_typed_unavailable_naming_it() -> None:
    address = f"127.0.0.1:{free_port()}"
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with Client([address], "wg-agent-a-token-0123456789", connect_timeout_s=2.0) as c:
        with pytest.raises(Unavailable) as err:
            async with c.session("a"):
                raise AssertionError("nothing listens there")
    assert address in str(err.value)
    assert "2" in str(err.value) and "connect" in str(err.value)
    # The documented connect timeout plus a margin for a loaded machine, not the 30 s retry deadline.
    assert loop.time() - started < 2.0 + 8.0


@pytest.mark.timeout(180)
async def test_a_blocked_wait_raises_session_lost_when_the_whole_cluster_is_gone_and_rejoin_works(
    local_cluster: Callable[..., LocalCluster],
) -> None:
    lc = local_cluster("lost", agents=["a", "b"])
    assert lc.credentials is not None
    lease_ms = 3000
    margin_s = 10.0
    """The session timeout is the lease; the margin covers one heartbeat interval, the watchdog's
    own wake-up and a loaded 2-core machine."""
    states: list[SessionState] = []
    async with Client(lc.endpoints, lc.credentials.agents["a"], retry_deadline_s=5, call_timeout_s=2) as c:
        s = c.session("a", lease_ms=lease_ms, on_state=states.append)
        await s.open()
        try:
            assert s.state is SessionState.CONNECTED
            registered = asyncio.Event()

            async def agent() -> str:
                async with s.execution(run_id="run-lost") as ex, ex.waiting_for("artifact:never-lost") as w:
                    registered.set()
                    return await w.resolved()

            blocked = asyncio.ensure_future(agent())
            await asyncio.wait_for(registered.wait(), 20)
            await asyncio.sleep(0.5)
            assert not blocked.done()
            loop = asyncio.get_running_loop()
            lc.stop(graceful=False)
            stopped = loop.time()
            with pytest.raises(SessionLost) as err:
                await asyncio.wait_for(blocked, lease_ms / 1000 + margin_s)
            took = loop.time() - stopped
            assert took < lease_ms / 1000 + margin_s
            assert s.state is SessionState.LOST
            assert states == [SessionState.SUSPENDED, SessionState.LOST]
            text = str(err.value)
            assert all(e in text for e in lc.endpoints), text
            assert "no heartbeat succeeded for" in text
            assert err.value.reason == "unreachable"

            lc.start(30)
            lc.wait_for_leader(30)
            await s.rejoin()
            assert s.state is SessionState.CONNECTED
            assert states[-1] is SessionState.CONNECTED
            async with s.execution(run_id="run-back") as ex, ex.waiting_for("artifact:back") as w:
                await s.produce("artifact:back")
                assert await w.resolved(20) == "target_produced"
        finally:
            await s.close()
