"""RaftNode in this process: the asyncio bridge, group commit, backpressure, reads, errors.

A one-member cluster elects itself, so these run without other processes; the multi-process
behaviour (forwarding, failover, catch-up) is in ``test_raft_cluster.py``.
"""

from __future__ import annotations

import asyncio

import pytest

from cluster.errors import Exhausted, NotLeader, Stopped
from cluster.raft import RaftConfig, RaftNode
from statemachine.outcome import Result

from .harness import envelope, free_ports


def config(tmp_path, peers=(), **kw) -> RaftConfig:
    (port,) = free_ports(1)
    return RaftConfig(raft_address=f"127.0.0.1:{port}", peers=peers, data_dir=tmp_path, password="s", **kw)


async def started(cfg: RaftConfig) -> RaftNode:
    node = RaftNode(cfg)
    node.start()
    for _ in range(100):
        if node.is_leader():
            return node
        await asyncio.sleep(0.05)
    raise AssertionError("a one-member cluster did not elect itself")


@pytest.mark.timeout(30)
async def test_submit_group_commit_and_reads(tmp_path):
    node = await started(config(tmp_path))
    try:
        assert (await node.submit(envelope(0))).result is Result.APPLIED
        before = node.status()
        outs = await asyncio.gather(*(node.submit(envelope(i)) for i in range(1, 201)))
        assert [o.result for o in outs] == [Result.APPLIED] * 200
        assert [o.effects[0].target_id for o in outs] == [f"resource:t{i}" for i in range(1, 201)]
        after = node.status()
        assert after.counters["envelopes_applied"] - before.counters["envelopes_applied"] == 200
        assert after.applied_index - before.applied_index < 10  # a handful of log entries, not 200
        local = await node.read_local(lambda m: len(m.state.targets))
        fresh = await node.read_fresh(lambda m: len(m.state.targets))
        assert (local.stale, fresh.stale) == (True, False)
        assert fresh.value == 201 and fresh.applied_index > before.applied_index
        status = node.status()
        assert status.role == "leader" and status.leader == node.cfg.raft_address and status.has_quorum
        assert status.outstanding == 0
        big = await node.submit(b"\x00" * (64 * 1024 + 1))
        assert big.result is Result.REJECTED and big.code == "codec"
    finally:
        await node.stop()
    with pytest.raises(Stopped):
        await node.submit(envelope(1))


@pytest.mark.timeout(30)
async def test_backpressure_fails_fast_and_recovers(tmp_path):
    node = await started(config(tmp_path, max_outstanding=10))
    try:
        results = await asyncio.gather(*(node.submit(envelope(i)) for i in range(30)), return_exceptions=True)
        assert sum(isinstance(r, Exhausted) for r in results) == 20
        assert all(r.result is Result.APPLIED for r in results if not isinstance(r, Exception))
        assert node.status().outstanding == 0
        assert (await node.submit(envelope(100))).result is Result.APPLIED
    finally:
        await node.stop()


@pytest.mark.timeout(30)
async def test_without_a_leader_submit_is_not_leader_at_once(tmp_path):
    # Two members that never start: no election can be won, nothing is ever proposed.
    peers = tuple(f"127.0.0.1:{p}" for p in free_ports(2))
    node = RaftNode(config(tmp_path, peers=peers))
    node.start()
    try:
        with pytest.raises(NotLeader) as err:
            await asyncio.wait_for(node.submit(envelope(1)), 2)
        assert not err.value.applied_maybe and err.value.leader is None
        assert not node.is_leader() and not node.has_quorum()
        assert node.status().outstanding == 0
    finally:
        await node.stop()
