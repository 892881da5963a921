"""cluster/sdk/_liveness.py without a cluster: the table CONNECTED -> SUSPENDED -> LOST, the
callbacks, and what a late heartbeat result or a rejoin does."""

from __future__ import annotations

import asyncio

from waitgraph.sdk import SessionState
from waitgraph.sdk._liveness import Liveness


async def test_silence_suspends_then_loses_once_and_only_a_rejoin_leaves_lost() -> None:
    loop = asyncio.get_running_loop()
    states: list[SessionState] = []
    lost: list[tuple[float, list[str]]] = []
    live = Liveness(
        0.4,
        0.1,
        lambda: ["127.0.0.1:1", "127.0.0.1:2"],
        lambda s, e: lost.append((s, e)),
        states.append,
        joined_at=loop.time(),
    )
    watchdog = asyncio.ensure_future(live.run())
    await asyncio.wait_for(watchdog, 5)
    assert states == [SessionState.SUSPENDED, SessionState.LOST]
    assert len(lost) == 1 and lost[0][0] >= 0.4 and lost[0][1] == ["127.0.0.1:1", "127.0.0.1:2"]
    live.ok(loop.time())  # a heartbeat that was still in its retries answers late: still LOST
    live.failed()
    assert live.state is SessionState.LOST and len(states) == 2
    live.rejoined(loop.time())
    assert live.state is SessionState.CONNECTED and states[-1] is SessionState.CONNECTED


async def test_a_heartbeat_that_succeeds_again_reconnects_and_the_cluster_saying_lost_is_final() -> None:
    loop = asyncio.get_running_loop()
    states: list[SessionState] = []
    live = Liveness(60.0, 30.0, list, lambda s, e: None, states.append, joined_at=loop.time())
    live.failed()
    live.ok(loop.time())
    assert states == [SessionState.SUSPENDED, SessionState.CONNECTED]
    live.lost()
    live.ok(loop.time())
    assert live.state is SessionState.LOST and states[-1] is SessionState.LOST
