"""The truncation guard, replayed message by message against one follower (no network, no timing).

The defect in pysyncobj 0.3.17 (``SyncObj.__onMessageReceived``, ``append_entries`` branch): a
follower whose log is longer than ``prevLogIdx`` deletes every entry after it, even entries that
match the leader's and that it has already applied. The leader sends such messages whenever a
success reply moves its ``nextIndex`` back, which happens continuously under a burst with
``appendEntriesUseBatch=False``. If a log compaction completes right after such a truncation,
``__deleteEntriesTo`` cuts past the end of the shortened log and leaves it empty: the follower
raises ``IndexError`` on every message from then on.
"""

from __future__ import annotations

import logging
import pickle

import pytest
from pysyncobj import SyncObj, SyncObjConf, replicated

from waitgraph.node.raft._apply import encode_batch

from .fakes import LEADER, OTHER, SELF, FakeTransport, append_entries, follower, log_of, regular_command, transport

CMD = regular_command(encode_batch([]))  # a barrier: applies, changes nothing


def entries(first: int, last: int, term: int = 1) -> list[tuple[bytes, int, int]]:
    return [(CMD, i, term) for i in range(first, last + 1)]


class RawCounter(SyncObj):
    """Plain pysyncobj, for the reproduction."""

    def __init__(self, conf: SyncObjConf) -> None:
        self.n = 0
        super().__init__(SELF, [LEADER, OTHER], conf, transportClass=FakeTransport)

    @replicated
    def inc(self) -> None:
        self.n += 1


def test_raw_pysyncobj_truncates_applied_entries_and_wedges_after_compaction(tmp_path, caplog):
    conf = SyncObjConf(
        autoTick=False,
        appendEntriesUseBatch=False,
        journalFile=str(tmp_path / "j"),
        fullDumpFile=str(tmp_path / "d"),
        useFork=False,
        logCompactionMinEntries=10**6,
        logCompactionMinTime=10**6,
    )
    raw = RawCounter(conf)
    inc = b"\x00" + pickle.dumps(0, 2)
    t = transport(raw)
    t.deliver(LEADER, append_entries(1, 0, [(inc, i, 1) for i in range(2, 102)], commit=101))
    raw.doTick(0)
    assert raw.raftLastApplied == 101 and raw.n == 100
    raw.forceLogCompaction()
    raw.doTick(0)  # the dump is written; its log cut happens at the next tick
    with caplog.at_level(logging.CRITICAL, logger="pysyncobj"):
        t.deliver(LEADER, append_entries(10, 1, [(inc, i, 1) for i in range(11, 21)], commit=101))
    assert "truncating already-applied log entries from index 11" in caplog.text
    assert len(log_of(raw)) == 20  # entries 21..101, applied and acknowledged, are gone
    raw.doTick(0)
    assert log_of(raw) == []  # compaction cut at 100 on a log ending at 20: empty
    with pytest.raises(IndexError):
        t.deliver(LEADER, append_entries(101, 1, [(inc, 102, 1)], commit=102))
    raw._doDestroy()


def test_guard_keeps_matching_entries_and_compaction_is_safe(tmp_path, caplog):
    node = follower(tmp_path)
    t = transport(node)
    t.deliver(LEADER, append_entries(1, 0, entries(2, 101), commit=101))
    node.doTick(0)
    assert node.raftLastApplied == 101
    node.forceLogCompaction()
    node.doTick(0)
    with caplog.at_level(logging.CRITICAL):
        t.deliver(LEADER, append_entries(10, 1, entries(11, 20), commit=101))  # a stale re-send
        t.deliver(LEADER, append_entries(50, 1, [], commit=101))  # a heartbeat after a nextIndex regression
        t.deliver(LEADER, append_entries(90, 1, entries(91, 101), commit=101))  # ends exactly at our last entry
    assert "truncating" not in caplog.text
    assert log_of(node)[-1][1] == 101
    assert node.counters["guard_rewrites"] == 3
    replies = [m for _, m in t.sent if m["type"] == "next_node_idx"][-3:]
    assert [(m["success"], m["next_node_idx"]) for m in replies] == [(True, 102)] * 3
    node.doTick(0)
    node.doTick(0)
    assert [e[1] for e in log_of(node)] == [100, 101]  # compaction cut the log, not to nothing
    t.deliver(LEADER, append_entries(101, 1, entries(102, 102), commit=102))
    node.doTick(0)
    assert node.raftLastApplied == 102
    node._doDestroy()


def test_guard_still_replaces_conflicting_unapplied_entries(tmp_path):
    node = follower(tmp_path)
    t = transport(node)
    t.deliver(LEADER, append_entries(1, 0, entries(2, 11), commit=6))
    node.doTick(0)
    assert node.raftLastApplied == 6
    # A new leader (term 2) whose log has other entries from index 7 on: standard Raft truncation.
    t.deliver(OTHER, append_entries(6, 1, entries(7, 8, term=2), commit=6, term=2))
    assert [(e[1], e[2]) for e in log_of(node)][-3:] == [(6, 1), (7, 2), (8, 2)]
    # Entries of an older term past the applied index, behind a fully matching message, go too.
    node2 = follower(tmp_path / "b")
    t2 = transport(node2)
    t2.deliver(LEADER, append_entries(1, 0, entries(2, 11), commit=6))
    node2.doTick(0)
    t2.deliver(OTHER, append_entries(4, 1, entries(5, 6), commit=6, term=2))
    assert log_of(node2)[-1][1] == 6
    node._doDestroy()
    node2._doDestroy()


def test_guard_refuses_to_replace_an_applied_entry(tmp_path, caplog):
    node = follower(tmp_path)
    t = transport(node)
    t.deliver(LEADER, append_entries(1, 0, entries(2, 11), commit=6))
    node.doTick(0)
    before = log_of(node)
    with caplog.at_level(logging.CRITICAL):
        t.deliver(OTHER, append_entries(4, 1, entries(5, 8, term=2), commit=6, term=2))
    assert "refusing append_entries that would replace applied entry 5" in caplog.text
    assert node.counters["guard_refusals"] == 1
    assert log_of(node) == before
    node._doDestroy()
