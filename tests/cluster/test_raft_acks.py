"""Repeated acknowledgments (cluster/node/raft/_acks.py), message by message
against one follower with no network: which ``next_node_idx`` answers it sends, and which it skips."""

from __future__ import annotations

from typing import Any

import pytest

from waitgraph.node.raft import _acks
from waitgraph.node.raft._apply import encode_batch

from .fakes import LEADER, OTHER, append_entries, follower, regular_command, transport

CMD = regular_command(encode_batch([]))  # a barrier: applies, changes nothing


def entries(first: int, last: int, term: int = 1) -> list[tuple[bytes, int, int]]:
    return [(CMD, i, term) for i in range(first, last + 1)]


def answers(node: Any, since: int = 0) -> list[tuple[str, bool, bool, int]]:
    return [
        (str(getattr(to, "address", to)), m["success"], m["reset"], m["next_node_idx"])
        for to, m in transport(node).sent[since:]
        if m.get("type") == "next_node_idx"
    ]


@pytest.fixture(autouse=True)
def long_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_acks, "REPEATED_ACK_S", 3600.0)  # no answer ages out during a test


def test_an_entryless_message_repeating_the_last_answer_is_not_answered_again(tmp_path):
    node = follower(tmp_path)
    t = transport(node)
    t.deliver(LEADER, append_entries(1, 0, entries(2, 10), commit=5))
    assert answers(node) == [(LEADER, True, False, 11)]
    t.deliver(LEADER, append_entries(10, 1, [], commit=10))  # the leader passes on its commit index
    t.deliver(LEADER, append_entries(10, 1, [], commit=10))  # a heartbeat
    assert answers(node) == [(LEADER, True, False, 11)]
    assert node.counters["acks_skipped"] == 2
    node.doTick(0)
    assert node.raftLastApplied == 10  # the commit index still arrived and was applied
    t.deliver(LEADER, append_entries(10, 1, entries(11, 11), commit=10))  # entries: always answered
    t.deliver(LEADER, append_entries(11, 1, [], commit=11))
    assert answers(node)[1:] == [(LEADER, True, False, 12)]
    node.destroy()


def test_every_answer_is_sent_once_the_last_one_is_old_enough(tmp_path, monkeypatch):
    monkeypatch.setattr(_acks, "REPEATED_ACK_S", 0.0)
    node = follower(tmp_path)
    t = transport(node)
    t.deliver(LEADER, append_entries(1, 0, entries(2, 10), commit=10))
    for _ in range(3):
        t.deliver(LEADER, append_entries(10, 1, [], commit=10))
    assert answers(node) == [(LEADER, True, False, 11)] * 4
    assert node.counters["acks_skipped"] == 0
    node.destroy()


def test_entries_already_held_failures_resets_and_new_terms_are_always_answered(tmp_path):
    node = follower(tmp_path)
    t = transport(node)
    t.deliver(LEADER, append_entries(1, 0, entries(2, 10), commit=5))
    # A re-send of entries it has: the guard leaves no entry to append, the answer still goes.
    t.deliver(LEADER, append_entries(5, 1, entries(6, 10), commit=5))
    # Entry-less messages the log cannot match: a reset answer, every time.
    t.deliver(LEADER, append_entries(50, 1, [], commit=5))
    t.deliver(LEADER, append_entries(50, 1, [], commit=5))
    # The same index in a new term (a re-elected leader starts from a match index of 0).
    t.deliver(LEADER, append_entries(10, 1, [], commit=5, term=2))
    # Another leader never heard this answer.
    t.deliver(OTHER, append_entries(10, 1, [], commit=5, term=3))
    assert answers(node) == [
        (LEADER, True, False, 11),
        (LEADER, True, False, 11),
        (LEADER, False, True, 11),
        (LEADER, False, True, 11),
        (LEADER, True, False, 11),
        (OTHER, True, False, 11),
    ]
    assert node.counters["acks_skipped"] == 0
    node.destroy()
