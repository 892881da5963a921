"""cluster/sdk/_liveness.py without a cluster: the table CONNECTED -> SUSPENDED -> LOST, the
callbacks, and what a late heartbeat result or a rejoin does."""

from __future__ import annotations

import asyncio

from waitgraph.sdk import SessionState
from waitgraph.sdk._liveness import Liveness


async def test_silence_suspends_then_loses_once_and_only_a_rejoin_leaves_lost() -> None:
    loop = asyncio.get_running_loop()
    states: list[SessionState] = []
    lost: list[tuple[float, list[str], bool]] = []
    live = Liveness(
        0.4,
        0.1,
        lambda: ["127.0.0.1:1", "127.0.0.1:2"],
        lambda s, e, u: lost.append((s, e, u)),
        states.append,
        joined_at=loop.time(),
    )
    watchdog = asyncio.ensure_future(live.run())
    await asyncio.wait_for(watchdog, 5)
    assert states == [SessionState.SUSPENDED, SessionState.LOST]
    assert len(lost) == 1 and lost[0][0] >= 0.4 and lost[0][1] == ["127.0.0.1:1", "127.0.0.1:2"]
    assert lost[0][2] is True  # heartbeats were due (suspended by silence) and none succeeded
    live.ok(loop.time())  # a heartbeat that was still in its retries answers late: still LOST
    live.failed()
    assert live.state is SessionState.LOST and len(states) == 2
    live.rejoined(loop.time())
    assert live.state is SessionState.CONNECTED and states[-1] is SessionState.CONNECTED


async def test_a_heartbeat_that_succeeds_again_reconnects_and_the_cluster_saying_lost_is_final() -> None:
    loop = asyncio.get_running_loop()
    states: list[SessionState] = []
    live = Liveness(60.0, 30.0, list, lambda s, e, u: None, states.append, joined_at=loop.time())
    live.failed()
    live.ok(loop.time())
    assert states == [SessionState.SUSPENDED, SessionState.CONNECTED]
    live.lost()
    live.ok(loop.time())
    assert live.state is SessionState.LOST and states[-1] is SessionState.LOST


async def test_a_failed_heartbeat_makes_the_loss_unreachable_and_a_success_clears_it() -> None:
    loop = asyncio.get_running_loop()
    lost: list[bool] = []
    live = Liveness(0.3, 0.1, list, lambda s, e, u: lost.append(u), None, joined_at=loop.time())
    live.failed()
    live.ok(loop.time())  # reached again: a later silence is not "unreachable" for this failure
    live.failed()
    await asyncio.wait_for(asyncio.ensure_future(live.run()), 5)
    assert lost == [True]


async def test_a_lease_that_runs_out_before_a_heartbeat_is_due_is_expired_not_unreachable() -> None:
    """A heartbeat interval longer than the lease (a process paused past it): nothing failed, the
    lease ran out; the cluster expires such a session too."""
    loop = asyncio.get_running_loop()
    lost: list[bool] = []
    live = Liveness(0.2, 7200.0, list, lambda s, e, u: lost.append(u), None, joined_at=loop.time())
    await asyncio.wait_for(asyncio.ensure_future(live.run()), 5)
    assert lost == [False] and live.state is SessionState.LOST
