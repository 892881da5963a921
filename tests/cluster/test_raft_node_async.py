"""RaftNode in this process: the asyncio bridge, group commit, backpressure, reads, errors.

A one-member cluster elects itself, so these run without other processes; the multi-process
behaviour (forwarding, failover, catch-up) is in ``test_raft_cluster.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time

import pytest

from waitgraph.node.errors import Exhausted, NotLeader, OutcomeUnknown, ReadFailed, Stopped
from waitgraph.node.raft import RaftConfig, RaftNode, _apply
from waitgraph.statemachine import StateMachine
from waitgraph.statemachine.codec import check_envelope, decode_envelope
from waitgraph.statemachine.outcome import Result

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
async def test_a_lone_write_is_proposed_at_once_and_a_batch_goes_as_one_entry(tmp_path):
    node = await started(config(tmp_path))
    try:
        pending = node._enqueue(envelope(1), alone=True)
        assert not node._buffer and len(node._in_flight) == 1  # proposed before the loop ran again
        assert isinstance(pending, asyncio.Future) and (await pending).result is Result.APPLIED
        before = node.status().counters["entries_applied"]  # counted before the result is handed over
        outs = await node.submit_many([envelope(i) for i in range(2, 6)])
        assert [o.result for o in outs] == [Result.APPLIED] * 4
        assert node.status().counters["entries_applied"] == before + 1  # one log entry for the four
    finally:
        await node.stop()


@pytest.mark.timeout(30)
async def test_the_proposing_node_applies_its_checked_envelopes_as_a_decoder_would(tmp_path, monkeypatch):
    """A CheckedEnvelope is proposed as its bytes and applied here without decoding them (every
    other replica decodes): the state is the one a replica decoding every entry reaches, and
    nothing stays registered once the writes are answered."""
    adopted = []
    real_adopt = _apply.adopt_checked

    def counting(checked):
        adopted.append(checked.data)
        return real_adopt(checked)

    monkeypatch.setattr(_apply, "adopt_checked", counting)
    node = await started(config(tmp_path))
    try:
        checked = [check_envelope(decode_envelope(envelope(i, at_ms=1_000 + i))) for i in range(40)]
        duplicate = check_envelope(decode_envelope(envelope(3, at_ms=1_003)))  # a retry: same bytes
        outs = [await node.submit(checked[0])]
        outs += await node.submit_many([*checked[1:], duplicate])
        assert [o.result for o in outs][:40] == [Result.APPLIED] * 40 and outs[40].duplicate
        # The retry's bytes are the same as those of the one before it: registered once, so
        # adopted once, and the second copy is decoded.
        assert sorted(adopted) == sorted(c.data for c in checked)
        assert node._running().predecoded == {}
        replica = StateMachine()
        for c in [*checked, duplicate]:
            replica.apply_bytes(c.data)
        got = await node.read_local(lambda m: m.digest())
        assert got.value == replica.digest()
    finally:
        await node.stop()


@pytest.mark.timeout(30)
async def test_a_checked_envelope_never_applied_here_is_not_kept(tmp_path):
    node = await started(config(tmp_path, submit_timeout_s=0.3))
    try:
        obj = node._running()
        real = obj.apply_commands
        obj.apply_commands = lambda *a, **kw: None  # proposed into the void: never applied, never answered
        try:
            with pytest.raises(OutcomeUnknown):
                await node.submit(check_envelope(decode_envelope(envelope(1))))
        finally:
            obj.apply_commands = real
        assert obj.predecoded == {}
    finally:
        await node.stop()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("max_in_flight", [1, 2])
async def test_unary_writes_wait_for_room_in_the_pipeline_then_go_as_one_entry(tmp_path, max_in_flight):
    """Unary writers one after the other while a group is in flight: with ``group_max_in_flight``
    groups in flight the window's end sends nothing; they go together when one is answered."""
    node = await started(
        config(tmp_path, group_window_s=0.001, group_max_in_flight=max_in_flight, group_max_defer_s=60.0)
    )
    obj = node._running()
    held: list[tuple[bytes, object]] = []
    real = obj.apply_commands
    try:
        obj.apply_commands = lambda payload, callback: held.append((payload, callback))
        writes = [asyncio.ensure_future(node.submit(envelope(1)))]
        await asyncio.sleep(0)
        assert len(held) == 1  # alone, nothing in flight: proposed at once
        for i in range(2, 5):  # one at a time, each well past the window
            writes.append(asyncio.ensure_future(node.submit(envelope(i))))
            await asyncio.sleep(0.02)
        if max_in_flight == 1:
            assert len(held) == 1 and len(node._buffer) == 3  # the windows ended; nothing sent
        else:
            assert len(held) == 2 and len(_apply._batch_items(held[1][0]) or [held[1][0]]) == 1
        first, callback = held[0]
        real(first, callback=callback)  # answering the oldest makes room: what waits goes now
        await asyncio.wait_for(writes[0], 5)
        if max_in_flight == 1:
            assert len(held) == 2 and len(_apply._batch_items(held[1][0]) or []) == 3  # one entry for the three
        else:
            assert len(held) == 3 and len(_apply._batch_items(held[2][0]) or []) == 2
        assert not node._buffer
        for payload, callback in held[1:]:
            real(payload, callback=callback)
        outs = await asyncio.wait_for(asyncio.gather(*writes), 5)
        assert [o.result for o in outs] == [Result.APPLIED] * 4
        assert node.status().outstanding == 0
    finally:
        obj.apply_commands = real
        await node.stop()


@pytest.mark.timeout(30)
async def test_a_group_never_answered_holds_the_next_ones_back_only_so_long(tmp_path):
    """The oldest group in flight is never answered (forwarded to a leader that went away): the
    next write still goes once that group has been in flight ``group_max_defer_s``."""
    node = await started(config(tmp_path, group_window_s=0.001, group_max_defer_s=0.05))
    obj = node._running()
    held: list[tuple[bytes, object]] = []
    real = obj.apply_commands
    try:
        obj.apply_commands = lambda payload, callback: held.append((payload, callback))
        writes = [asyncio.ensure_future(node.submit(envelope(1)))]
        await asyncio.sleep(0)
        writes.append(asyncio.ensure_future(node.submit(envelope(2))))
        await asyncio.sleep(0.005)
        assert len(held) == 1  # the window ended; the pipeline is full
        for _ in range(200):
            if len(held) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(held) == 2 and not node._buffer  # sent while the first is still unanswered
        for payload, callback in held:
            real(payload, callback=callback)
        outs = await asyncio.wait_for(asyncio.gather(*writes), 5)
        assert [o.result for o in outs] == [Result.APPLIED] * 2
    finally:
        obj.apply_commands = real
        await node.stop()


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


def _slow_image(pid_file):
    """An image that records its process id, then takes far longer than any test waits."""

    def image(m):
        pid_file.write_text(str(os.getpid()))
        time.sleep(60)
        return b""

    return image


async def _pid_from(pid_file) -> int:
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            return int(pid_file.read_text())
        await asyncio.sleep(0.01)
    raise AssertionError("the forked reader never started")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.timeout(30)
@pytest.mark.parametrize("fork", [True, False])
async def test_read_image_is_the_same_cut_as_the_read(tmp_path, fork):
    """``fn`` and ``image`` read the very same state: the image's digest is the one ``fn`` saw.
    (Compared within one read: the node may apply an entry of its own between two reads.)"""
    node = await started(config(tmp_path, fork_dumps=fork))
    try:
        await asyncio.gather(*(node.submit(envelope(i)) for i in range(50)))
        got = await node.read_image(lambda m: (len(m.state.targets), m.digest()), lambda m: m.snapshot(), fresh=True)
        (count, digest), snapshot = got.value
        assert got.stale is False and count == 50
        assert hashlib.sha256(snapshot).hexdigest() == digest
        local = await node.read_local(lambda m: None)
        assert got.applied_index <= local.applied_index
        stale = await node.read_image(lambda m: m.digest().encode(), lambda m: m.digest().encode())
        assert stale.stale is True and stale.value[0] == stale.value[1]
    finally:
        await node.stop()


@pytest.mark.timeout(30)
async def test_each_apply_moves_the_write_counter_by_two_and_leaves_it_even(tmp_path):
    node = await started(config(tmp_path))
    try:
        await node.submit(envelope(0))
        before = node._running().writes
        for i in range(1, 4):
            await node.submit(envelope(i))
        assert node._running().writes == before + 6 and node._running().writes % 2 == 0
    finally:
        await node.stop()


@pytest.mark.timeout(30)
async def test_a_forked_image_forks_without_the_lock_and_again_under_it_when_the_state_moved(tmp_path, monkeypatch):
    node = await started(config(tmp_path))
    try:
        await asyncio.gather(*(node.submit(envelope(i)) for i in range(5)))
        quiet: dict[str, float] = {}
        got = await node.read_image(lambda m: len(m.state.targets), lambda m: m.snapshot(), timing=quiet)
        local = await node.read_local(lambda m: (len(m.state.targets), m.snapshot()))
        assert quiet["forks"] == 1 and quiet["fork_s"] > 0 and got.value == local.value
        real_fork, forks = os.fork, []

        def fork() -> int:
            if not forks:  # as if an apply ran between the lock's release and the fork
                node._running().writes += 2
            forks.append(node._running().writes)
            return real_fork()

        monkeypatch.setattr(os, "fork", fork)
        moved: dict[str, float] = {}
        got = await node.read_image(lambda m: len(m.state.targets), lambda m: m.snapshot(), timing=moved)
        monkeypatch.undo()
        assert moved["forks"] == 2 and len(forks) == 2
        assert got.value == local.value and got.value[0] == 5
    finally:
        await node.stop()


@pytest.mark.timeout(30)
async def test_a_forked_image_does_not_hold_up_applies(tmp_path):
    node = await started(config(tmp_path))
    try:
        pid_file = tmp_path / "reader.pid"
        reading = asyncio.create_task(node.read_image(lambda m: None, _slow_image(pid_file)))
        pid = await _pid_from(pid_file)
        # The child is still working on its image: the replica applies and answers meanwhile.
        outs = await asyncio.wait_for(asyncio.gather(*(node.submit(envelope(i)) for i in range(20))), 5)
        assert [o.result for o in outs] == [Result.APPLIED] * 20
        assert not reading.done() and not _gone(pid)
        reading.cancel()  # the caller went away: its child is killed and reaped
        with pytest.raises(asyncio.CancelledError):
            await reading
        for _ in range(200):
            if _gone(pid):
                break
            await asyncio.sleep(0.01)
        assert _gone(pid)
    finally:
        await node.stop()


@pytest.mark.timeout(30)
async def test_a_failed_forked_image_is_an_error_and_changes_nothing(tmp_path):
    node = await started(config(tmp_path))
    try:
        await node.submit(envelope(1))
        before = await node.read_local(lambda m: m.digest())

        def broken(m):
            raise RuntimeError("no image")

        with pytest.raises(ReadFailed):
            await node.read_image(lambda m: None, broken)
        after = await node.read_local(lambda m: m.digest())
        assert after.value == before.value
        assert (await node.submit(envelope(2))).result is Result.APPLIED
    finally:
        await node.stop()


@pytest.mark.parametrize(("low", "high"), [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.5)])
def test_election_timeouts_that_cannot_work_are_refused(tmp_path, low, high):
    """Zero, negative, or a minimum above the maximum: a clear ValueError before any node starts."""
    with pytest.raises(ValueError, match="election timeouts"):
        config(tmp_path, raft_min_timeout_s=low, raft_max_timeout_s=high)
