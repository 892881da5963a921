"""Durability (``RaftConfig.fsync``, the default; ``waitgraph serve --no-fsync`` turns it off): no
acknowledgment of an appended entry leaves a node before its journal is flushed to disk.

What can honestly be asserted without pulling the power: the *order* of flushes and
acknowledgments (in process, a SyncObj ticked by hand whose journal flush is observed), and, on
real node processes, that the journal's mmap holds no dirty page once a write was acknowledged
(``/proc/<pid>/smaps``: ``msync(MS_SYNC)`` writes the pages back and cleans them, so a dirty page is
one the disk does not have yet). Reading the file back would prove nothing: a second read goes
through the same page cache as the mmap and sees unflushed data too. Each test also runs the same
steps with the option off and shows the difference, so that it can fail.
"""

from __future__ import annotations

import mmap
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.node import TCPNode

from waitgraph.node.raft import RaftConfig, _acks
from waitgraph.node.raft._config import build_conf
from waitgraph.node.raft._journal import ChecksummedJournal
from waitgraph.node.raft._syncobj import WaitgraphSyncObj
from waitgraph.statemachine import StateMachine

from .fakes import LEADER, OTHER, SELF, FakeTransport, append_entries, regular_command, transport
from .harness import envelope, wait_for


def node(tmp: Path, peers: list[str], *, fsync: bool) -> WaitgraphSyncObj:
    cfg = RaftConfig(
        raft_address=SELF,
        peers=tuple(peers),
        data_dir=tmp,
        password="unused",
        log_compaction_min_entries=10**6,
        log_compaction_min_time_s=10**6,
        fsync=fsync,
    )
    return WaitgraphSyncObj(
        SELF,
        peers,
        build_conf(cfg, autoTick=False, password=None),
        StateMachine(),
        transport_class=FakeTransport,
        fsync=fsync,
    )


def observe_flushes(obj: WaitgraphSyncObj, events: list[Any]) -> None:
    """Record ``("flush", last log index)`` whenever the journal is flushed (``fdatasync``)."""
    journal = obj._SyncObj__raftLog
    flush = journal.flush

    def observed() -> None:
        flush()
        events.append(("flush", journal[-1][1]))

    journal.flush = observed


def acks(sent: list[tuple[Any, Any]]) -> list[tuple[str, int]]:
    return [("ack", m["next_node_idx"] - 1) for _, m in sent if m.get("type") == "next_node_idx" and m["success"]]


def entries(first: int, n: int) -> list[tuple[bytes, int, int]]:
    return [(regular_command(envelope(i)), i, 1) for i in range(first, first + n)]


@pytest.mark.parametrize("fsync", [True, False])
def test_a_follower_acknowledges_only_after_one_flush_per_tick(tmp_path: Path, fsync: bool) -> None:
    obj = node(tmp_path, [LEADER, OTHER], fsync=fsync)
    t = transport(obj)
    obj.doTick(0)
    events: list[Any] = []
    observe_flushes(obj, events)
    # Three append_entries arrive in one poll (one tick): 2..4, 5..6, 7.
    for prev, first, n in ((1, 2, 3), (4, 5, 2), (6, 7, 1)):
        t.deliver(LEADER, append_entries(prev, 1 if prev > 1 else 0, entries(first, n), commit=1))
    events += acks(t.sent)
    t.sent.clear()
    obj.doTick(0)
    events += acks(t.sent)
    if fsync:
        # Nothing left before the flush; one flush covered all three; the replies keep their order.
        assert events == [("flush", 7), ("ack", 4), ("ack", 6), ("ack", 7)]
        assert obj.counters["journal_flushes"] == 2 and obj.counters["replies_held"] == 3  # 1: the log's start
        assert isinstance(obj._SyncObj__raftLog, ChecksummedJournal)
    else:
        # Without the option pysyncobj replies at once and never flushes.
        assert events == [("ack", 4), ("ack", 6), ("ack", 7)]
    obj.destroy()


@pytest.mark.parametrize("fsync", [True, False])
def test_a_repeated_acknowledgment_is_skipped_before_it_is_held(
    tmp_path: Path, fsync: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cluster/node/raft/_acks.py (tests/cluster/test_raft_acks.py): with the
    option, the skipped repeat is never held either; the held first answer leaves after the flush."""
    monkeypatch.setattr(_acks, "REPEATED_ACK_S", 3600.0)  # no answer ages out during the test
    obj = node(tmp_path, [LEADER, OTHER], fsync=fsync)
    t = transport(obj)
    obj.doTick(0)
    t.sent.clear()
    t.deliver(LEADER, append_entries(1, 0, entries(2, 3), commit=1))
    t.deliver(LEADER, append_entries(4, 1, [], commit=4))  # passes on the commit index: a repeat
    obj.doTick(0)
    assert acks(t.sent) == [("ack", 4)]
    assert obj.counters["acks_skipped"] == 1
    assert obj.counters["replies_held"] == (1 if fsync else 0)
    obj.destroy()


@pytest.mark.parametrize("fsync", [True, False])
def test_a_leader_counts_its_own_copy_only_once_flushed(tmp_path: Path, fsync: bool) -> None:
    """Three members; the follower's acknowledgment arrives before the leader's next tick, so the
    leader's own copy is the only thing between the entry and its commit."""
    obj = node(tmp_path, [LEADER, OTHER], fsync=fsync)
    t = transport(obj)
    peer = TCPNode(LEADER)
    obj._SyncObj__onNodeConnected(peer)
    obj.doTick(0)
    obj._SyncObj__raftElectionDeadline = 0
    obj.doTick(0)  # candidate: asks for votes
    term = obj.raftCurrentTerm
    t.deliver(LEADER, {"type": "response_vote", "term": term})  # a majority: leader, no-op at 2
    assert obj._isLeader()
    events: list[Any] = []
    observe_flushes(obj, events)
    obj.apply_commands(envelope(1), callback=lambda result, error: events.append(("applied", error)))
    obj.doTick(0)  # appends the command at 3 and sends it
    assert obj._SyncObj__raftLog[-1][1] == 3
    t.deliver(LEADER, {"type": "next_node_idx", "next_node_idx": 4, "reset": False, "success": True})
    obj.doTick(0)  # the commit loop: the follower and the leader itself
    obj.doTick(0)
    assert ("applied", 0) in events
    if fsync:
        assert events.index(("flush", 3)) < events.index(("applied", 0))
    else:
        assert not [e for e in events if e[0] == "flush"], "without the option nothing is flushed"
    obj.destroy()


@pytest.mark.parametrize("fsync", [True, False])
def test_a_leader_flushes_in_the_tick_that_appends_and_sends(tmp_path: Path, fsync: bool) -> None:
    """The leader's flush overlaps the followers': its new entry is sent first, then flushed in the
    same tick, not after the poll that brings the followers' answers."""
    obj = node(tmp_path, [LEADER, OTHER], fsync=fsync)
    t = transport(obj)
    obj._SyncObj__onNodeConnected(TCPNode(LEADER))
    obj.doTick(0)
    obj._SyncObj__raftElectionDeadline = 0
    obj.doTick(0)
    t.deliver(LEADER, {"type": "response_vote", "term": obj.raftCurrentTerm})
    assert obj._isLeader()
    obj.doTick(0)
    events: list[Any] = []
    observe_flushes(obj, events)
    send = t.send

    def observed_send(peer: Any, message: Any) -> bool:
        if message.get("type") == "append_entries" and message.get("entries"):
            events.append(("sent", message["entries"][-1][1]))
        return send(peer, message)

    t.send = observed_send  # type: ignore[method-assign]
    obj.apply_commands(envelope(1), callback=lambda result, error: None)
    obj.doTick(0)  # appends the command at 3, sends it, and (with the option) flushes it
    if fsync:
        assert events == [("sent", 3), ("flush", 3)]
    else:
        assert events == [("sent", 3)]
    obj.destroy()


def test_a_single_node_flushes_its_election_no_op_before_committing_it(tmp_path: Path) -> None:
    obj = node(tmp_path, [], fsync=True)
    events: list[Any] = []
    observe_flushes(obj, events)
    obj.doTick(0)
    obj._SyncObj__raftElectionDeadline = 0
    obj.doTick(0)  # wins its own election and commits the no-op in the same tick
    assert obj._isLeader() and obj._SyncObj__raftCommitIndex == 2
    assert ("flush", 2) in events
    obj.apply_commands(envelope(1), callback=lambda result, error: events.append(("applied", error)))
    for _ in range(3):
        obj.doTick(0)
    assert events.index(("flush", 3)) < events.index(("applied", 0))
    obj.destroy()


def test_a_vote_is_on_disk_before_it_is_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    obj = node(tmp_path, [LEADER, OTHER], fsync=True)
    t = transport(obj)
    events: list[Any] = []
    fsync = os.fsync

    def observed_fsync(fd: int) -> None:
        fsync(fd)
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))

    send = t.send

    def observed_send(peer: Any, message: Any) -> bool:
        events.append(("send", message["type"]))
        return send(peer, message)

    monkeypatch.setattr(os, "fsync", observed_fsync)
    monkeypatch.setattr(t, "send", observed_send)
    obj._SyncObj__onNodeConnected(TCPNode(LEADER))
    obj.doTick(0)
    obj._SyncObj__raftElectionDeadline = 0
    obj.doTick(0)  # a new term, a vote for itself, then request_vote to the others
    meta = tmp_path / "raft.wal.meta"
    assert pickle.loads(meta.read_bytes())["currentTerm"] == obj.raftCurrentTerm == 1
    first_request = events.index(("send", "request_vote"))
    assert events[first_request - 2 : first_request] == [("fsync", f"{meta}.tmp"), ("fsync", str(tmp_path))]
    obj.destroy()


# -- real node processes ----------------------------------------------------------------------------


def journal_dirty_kb(journal: Path) -> int:
    """Dirty kB of ``journal`` in the page cache (pages the disk does not have yet): the file is
    mapped here, every page touched, and ``/proc/self/smaps`` counts a page whose page-cache copy
    is dirty as dirty in every mapping of it, whoever wrote it."""
    fd = os.open(journal, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        try:
            for offset in range(0, size, mmap.PAGESIZE):
                mapped[offset]
            dirty, inside = 0, False
            for line in Path("/proc/self/smaps").read_text().splitlines():
                if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:  # a mapping's header line
                    inside = line.endswith(str(journal))
                elif inside and line.startswith(("Shared_Dirty:", "Private_Dirty:")):
                    dirty += int(line.split()[1])
            return dirty
        finally:
            mapped.close()
    finally:
        os.close(fd)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("fsync", [True, False])
def test_acknowledged_writes_are_on_disk_in_real_nodes(make_cluster: Any, fsync: bool) -> None:
    cluster = make_cluster(extra_args=[] if fsync else ["--no-fsync"])  # durable is the default
    leader = cluster.leader()
    followers = cluster.followers(leader)
    for i in range(20):
        assert leader.submit_placed(envelope(i)).ok  # a not_leader refusal is not acknowledged: asked again
        # The acknowledgment is back: nothing appends to these journals until the next submit.
        leader_dirty = journal_dirty_kb(leader.data / "raft.wal")
        follower_dirty = [journal_dirty_kb(f.data / "raft.wal") for f in followers]
        if fsync:
            # The leader's copy and at least one follower's: a majority of 3 on disk.
            assert leader_dirty == 0 and min(follower_dirty) == 0, (i, leader_dirty, follower_dirty)
        else:
            assert leader_dirty > 0
    status = leader.status()
    if fsync:
        assert status["counters"]["journal_flushes"] >= 20
        wait_for(
            lambda: all(journal_dirty_kb(f.data / "raft.wal") == 0 for f in followers),
            5,
            "every follower's journal to be flushed",
        )
    else:
        assert status["counters"]["journal_flushes"] == 0
    assert len({n.digest(fresh=True) for n in cluster.nodes}) == 1
