"""When a node compacts its log (cluster/node/raft/_compaction.py), and what a compaction pause
must not cause: followers take turns by log index, a leader waits for a hard limit, a forced
compaction always runs (pysyncobj's ``logCompactionSplit`` window used to block it), and a
follower whose tick thread was busy writing a dump does not depose a healthy leader."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from pysyncobj.node import TCPNode

from waitgraph.node.raft._compaction import LEADER_COMPACTION_FACTOR, compaction_due
from waitgraph.node.raft._journal import open_dump
from waitgraph.statemachine import StateMachine

from .fakes import LEADER, append_entries, follower, regular_command, transport
from .harness import envelope


def due(applied: int, rank: int, *, log_len: int = 2000, leader: bool = False, members: int = 3) -> bool:
    return compaction_due(
        log_len=log_len,
        applied_index=applied,
        min_entries=1000,
        since_last_s=1.0,
        min_time_s=300.0,
        rank=rank,
        members=members,
        leader=leader,
    )


def test_followers_take_turns_and_never_start_at_the_same_index() -> None:
    for applied in range(0, 10_000, 7):
        assert sum(due(applied, rank) for rank in range(3)) == 1
    # Each one gets its turn within one round of slots (3 x 333 entries) past the threshold.
    for rank in range(3):
        assert any(due(applied, rank) for applied in range(5000, 5000 + 1000))
    assert not any(due(applied, 0, log_len=1000) for applied in range(0, 3000))  # below the threshold


def test_a_leader_postpones_to_the_hard_limit_but_a_single_node_does_not() -> None:
    limit = LEADER_COMPACTION_FACTOR * 1000
    assert not any(due(applied, rank, log_len=limit, leader=True) for rank in range(3) for applied in range(999))
    assert due(5, 1, log_len=limit + 1, leader=True)
    assert due(5, 0, log_len=1001, leader=True, members=1)


def test_the_time_threshold_still_applies_to_a_short_log() -> None:
    args: dict[str, Any] = dict(log_len=10, applied_index=0, min_entries=1000, rank=0, members=3, leader=False)
    assert not compaction_due(since_last_s=10.0, min_time_s=300.0, **args)
    assert compaction_due(since_last_s=301.0, min_time_s=300.0, **args)


def feed(node: Any, first: int, count: int) -> None:
    entries = [(regular_command(envelope(i)), i, 1) for i in range(first, first + count)]
    transport(node).deliver(LEADER, append_entries(first - 1, 1 if first > 2 else 0, entries, commit=first + count - 1))
    node.doTick(0)
    node.doTick(0)


def test_a_follower_compacts_only_in_its_own_slot(tmp_path: Path) -> None:
    # Three members, threshold 3 entries: slots of one index, dealt round-robin; this node
    # (127.0.0.1:1) sorts first, so it may start only at an applied index divisible by 3.
    node = follower(tmp_path, logCompactionMinEntries=3)
    try:
        feed(node, 2, 6)  # applied index 7: past the threshold, not its slot
        assert node.raftLastApplied == 7 and node.counters["dumps_written"] == 0
        feed(node, 8, 1)  # 8: still not
        assert node.counters["dumps_written"] == 0
        feed(node, 9, 1)  # 9: its slot
        assert node.counters["dumps_written"] == 1
    finally:
        node._doDestroy()


def test_forced_compaction_is_not_blocked_by_the_split_window(tmp_path: Path) -> None:
    """pysyncobj returns before a forced dump when ``logCompactionSplit`` is on and the node is
    outside its window (syncobj.py ``__tryLogCompaction``); with the override it is written."""
    # The window of the first node (ours) is the first 10% of every period: put "now" in the middle.
    period = 2 * time.monotonic() + 1
    node = follower(tmp_path, logCompactionSplit=True, logCompactionMinTime=period)
    try:
        feed(node, 2, 3)
        node.forceLogCompaction()
        node.doTick(0)
        assert node.counters["dumps_written"] == 1 and node.counters["compactions_forced"] == 1
        assert node._SyncObj__conf.logCompactionSplit  # the setting itself is left as it was
        node.doTick(0)  # the next tick sees the dump done and cuts the log
        assert len(node._SyncObj__raftLog) < 4
    finally:
        node._doDestroy()


class SlowSnapshot(StateMachine):
    def __init__(self, pause_s: float) -> None:
        super().__init__()
        self.pause_s = pause_s

    def snapshot(self) -> bytes:
        time.sleep(self.pause_s)
        return super().snapshot()


def test_a_long_dump_on_a_follower_does_not_start_an_election(tmp_path: Path) -> None:
    node = follower(tmp_path, machine=SlowSnapshot(1.2))  # election timeout 0.5-1.0 s
    try:
        node._SyncObj__connectedNodes.add(TCPNode(LEADER))  # elections need a connected peer
        feed(node, 2, 3)
        sent = len(transport(node).sent)
        node.forceLogCompaction()
        node.doTick(0)  # writes the dump: 1.2 s, longer than any election timeout
        assert node.counters["election_deadline_resets"] == 1
        node.doTick(0)
        votes = [m for _, m in transport(node).sent[sent:] if m.get("type") == "request_vote"]
        assert votes == [] and node._getLeader() is not None
    finally:
        node._doDestroy()


# -- dumps written by a forked child (fork_dumps) ---------------------------------------------------


def dump_doc(tmp: Path) -> dict[str, Any]:
    doc: dict[str, Any] = msgpack.unpackb(open_dump((tmp / "raft.dump").read_bytes()), raw=False)
    return doc


def until_settled(node: Any, deadline_s: float = 30.0) -> None:
    """Tick until no forked dump writer is running (a bound, not a timing under test)."""
    stop = time.monotonic() + deadline_s
    while node._dump_child_pid is not None:
        assert time.monotonic() < stop, "the forked dump writer did not finish"
        node.doTick(0)
        time.sleep(0.01)
    node.doTick(0)  # pysyncobj cuts the log at the tick after the success


def first_dump(node: Any) -> None:
    """Entries 2-4, then a forced dump of them, done."""
    feed(node, 2, 3)
    node.forceLogCompaction()
    node.doTick(0)
    until_settled(node)


class FailingSnapshot(StateMachine):
    """Its snapshot fails once ``fail`` is set (the forked child inherits the flag)."""

    fail = False

    def snapshot(self) -> bytes:
        if self.fail:
            raise RuntimeError("injected")
        return super().snapshot()


def test_a_forked_dump_leaves_the_tick_thread_free_and_cuts_the_log_after_the_child(tmp_path: Path) -> None:
    node = follower(tmp_path, machine=SlowSnapshot(0.3), fork_dumps=True)
    try:
        feed(node, 2, 3)
        node.forceLogCompaction()
        node.doTick(0)  # no dump file yet: nothing takes its name until the child is done
        assert node._dump_child_pid is not None and not (tmp_path / "raft.dump").exists()
        until_settled(node)
        assert node.counters["dumps_written"] == 1 and node.counters["dumps_forked"] == 1
        assert dump_doc(tmp_path)["last"][1] == 4

        feed(node, 5, 4)
        at_fork = node.read(lambda m: m.snapshot())
        node.forceLogCompaction()
        node.doTick(0)  # forks and returns; the child takes 0.3 s
        assert node._dump_child_pid is not None
        feed(node, 9, 2)  # the tick thread goes on applying meanwhile
        assert node.raftLastApplied == 10
        assert dump_doc(tmp_path)["last"][1] == 4  # the old dump stays until the child is done
        until_settled(node)
        doc = dump_doc(tmp_path)
        assert doc["last"][1] == 8 and doc["state"] == at_fork  # the state as it was at the fork
        assert node.counters["dumps_forked"] == 2 and node.counters["compactions_forced"] == 2
        assert node._SyncObj__raftLog[0][1] == doc["prev"][1]  # cut up to the dump, as pysyncobj does
        assert not list(tmp_path.glob("raft.dump.next*")) and not (tmp_path / "raft.dump.tmp").exists()
    finally:
        node._doDestroy()


def test_a_failed_forked_dump_changes_nothing(tmp_path: Path) -> None:
    machine = FailingSnapshot()
    node = follower(tmp_path, machine=machine, fork_dumps=True)
    try:
        first_dump(node)
        before = (tmp_path / "raft.dump").read_bytes()
        feed(node, 5, 4)
        log_len = len(node._SyncObj__raftLog)
        machine.fail = True
        node.forceLogCompaction()
        node.doTick(0)
        assert node._dump_child_pid is not None
        until_settled(node)
        assert node.counters["dumps_forked"] == 1  # the first one only
        assert (tmp_path / "raft.dump").read_bytes() == before
        assert len(node._SyncObj__raftLog) == log_len  # nothing was cut
        assert not list(tmp_path.glob("raft.dump.next*"))
    finally:
        node._doDestroy()


def test_a_dump_installed_meanwhile_stops_the_forked_writer(tmp_path: Path) -> None:
    machine = SlowSnapshot(0.0)
    node = follower(tmp_path, machine=machine, fork_dumps=True)
    try:
        first_dump(node)
        installed = (tmp_path / "raft.dump").read_bytes()
        machine.pause_s = 5.0  # the child would take 5 s
        feed(node, 5, 2)
        node.forceLogCompaction()
        node.doTick(0)
        child = node._dump_child_pid
        assert child is not None
        node._read_dump(str(tmp_path / "raft.dump"))  # what pysyncobj calls for a dump from the leader
        assert node._dump_child_pid is None
        with pytest.raises(ChildProcessError):
            os.waitpid(child, os.WNOHANG)  # killed and reaped
        node.doTick(0)
        assert (tmp_path / "raft.dump").read_bytes() == installed
        assert not list(tmp_path.glob("raft.dump.next*"))
    finally:
        node._doDestroy()


def test_a_node_restarts_from_a_forked_dump_and_its_journal(tmp_path: Path) -> None:
    node = follower(tmp_path, fork_dumps=True)
    try:
        feed(node, 2, 5)
        node.forceLogCompaction()
        node.doTick(0)
        until_settled(node)
        at_dump = node.read(lambda m: m.digest())
        feed(node, 7, 3)  # after the dump: only in the journal
        digest = node.read(lambda m: m.digest())
    finally:
        node._doDestroy()
    again = follower(tmp_path, fork_dumps=True)
    try:
        again.doTick(0)
        assert again.counters["dumps_loaded"] == 1
        assert again.raftLastApplied == 6 and again.read(lambda m: m.digest()) == at_dump
        # The leader's next heartbeat says entries 7-9 are committed: applied from the journal.
        transport(again).deliver(LEADER, append_entries(9, 1, [], commit=9))
        again.doTick(0)
        assert again.raftLastApplied == 9 and again.read(lambda m: m.digest()) == digest
    finally:
        again._doDestroy()


def test_loading_a_dump_restarts_the_election_timer(tmp_path: Path) -> None:
    """A restarted node loads its dump at its first tick, just before pysyncobj checks the election
    deadline: a slow load must not make it depose a healthy leader before it heard from it."""
    node = follower(tmp_path)
    try:
        node._SyncObj__connectedNodes.add(TCPNode(LEADER))
        first_dump(node)
        sent = len(transport(node).sent)
        node._SyncObj__raftElectionDeadline = 0.0  # as if the load had taken longer than any timeout
        node._read_dump(str(tmp_path / "raft.dump"))
        node.doTick(0)
        votes = [m for _, m in transport(node).sent[sent:] if m.get("type") == "request_vote"]
        assert votes == [] and node.counters["election_deadline_resets"] >= 1
    finally:
        node._doDestroy()
