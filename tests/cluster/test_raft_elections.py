"""Elections (cluster/node/raft/_liveness.py): a node whose election deadline has passed reads
a waiting vote request before it stands, and every deadline written into pysyncobj, or compared
with its times, is in pysyncobj's own clock. A SyncObj with no network, ticked by hand."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import syncobj as pysyncobj_syncobj
from pysyncobj.node import TCPNode

from waitgraph.node.raft import _liveness
from waitgraph.node.raft._liveness import answered_within, raft_clock
from waitgraph.node.raft._syncobj import WaitgraphSyncObj

from .fakes import LEADER, OTHER, follower, transport


def _vote_request(node: WaitgraphSyncObj) -> dict[str, Any]:
    return {
        "type": "request_vote",
        "term": int(node.raftCurrentTerm) + 1,
        "last_log_index": 10,  # ahead of this node's log: it may grant
        "last_log_term": int(node.raftCurrentTerm),
    }


def _tick_with_a_request_waiting(node: WaitgraphSyncObj, request: dict[str, Any]) -> list[dict[str, Any]]:
    """One tick of ``node`` with its election deadline passed and OTHER's vote request waiting to
    be read (delivered by the first poll of the tick, as a socket read would): what it sent."""
    waiting = [request]
    real_poll = node._poller.poll

    def poll(timeout: float) -> Any:
        while waiting:
            transport(node).deliver(OTHER, waiting.pop())
        return real_poll(0)

    node._poller.poll = poll  # type: ignore[method-assign]
    node._SyncObj__raftElectionDeadline = raft_clock() - 0.01
    sent = len(transport(node).sent)
    node.doTick(0)
    return [m for _, m in transport(node).sent[sent:]]


@pytest.mark.parametrize("reads_first", [True, False], ids=["reads-first", "without-it"])
def test_a_node_past_its_deadline_reads_a_waiting_vote_request_before_it_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads_first: bool
) -> None:
    """With the read first it grants OTHER's vote and stays a follower. Without it (the control:
    pysyncobj's own order, the split vote this guards against) it stands in the very term OTHER
    asks for, and refuses it."""
    if not reads_first:
        monkeypatch.setattr(WaitgraphSyncObj, "_read_before_standing", lambda self: None)
    node = follower(tmp_path)
    try:
        node._SyncObj__connectedNodes.add(TCPNode(OTHER))  # elections need a connected peer
        request = _vote_request(node)
        sent = _tick_with_a_request_waiting(node, request)
        kinds = [m.get("type") for m in sent]
        if reads_first:
            assert kinds.count("response_vote") == 1 and "request_vote" not in kinds, kinds
            assert not node._isLeader() and node._SyncObj__votedForNodeId is not None
            assert node.raftCurrentTerm == request["term"]
            assert node.counters["reads_before_standing"] == 1
            assert node._SyncObj__raftElectionDeadline > raft_clock()  # the grant restarted it
        else:
            assert "request_vote" in kinds and "response_vote" not in kinds, kinds
            assert node.raftCurrentTerm == request["term"]  # the same term: a split vote
    finally:
        node._doDestroy()


def test_a_node_reads_early_only_when_it_is_about_to_stand(tmp_path: Path) -> None:
    """Not before its deadline, and not while connected to no one (pysyncobj does not stand then)."""
    node = follower(tmp_path)
    try:
        node._SyncObj__raftElectionDeadline = raft_clock() - 1
        node.doTick(0)  # connected to no one
        assert node.counters["reads_before_standing"] == 0 and not node._isLeader()
        node._SyncObj__connectedNodes.add(TCPNode(OTHER))
        node._SyncObj__raftElectionDeadline = raft_clock() + 60
        node.doTick(0)
        assert node.counters["reads_before_standing"] == 0
    finally:
        node._doDestroy()


@pytest.fixture
def skewed_raft_clock(monkeypatch: pytest.MonkeyPatch) -> float:
    """pysyncobj's clock 100 s behind ``time.monotonic`` (on Linux they differ by whatever NTP
    has slewed since boot: 0.25 s on the benchmark machine, more after months of uptime)."""
    skew = -100.0
    monkeypatch.setattr(pysyncobj_syncobj, "monotonicTime", lambda: time.monotonic() + skew)
    return skew


def test_the_election_timer_restarts_in_pysyncobjs_clock(tmp_path: Path, skewed_raft_clock: float) -> None:
    node = follower(tmp_path)
    try:
        node._restart_election_timer()
        ahead = node._SyncObj__raftElectionDeadline - pysyncobj_syncobj.monotonicTime()
        conf = node._SyncObj__conf
        assert conf.raftMinTimeout - 0.05 <= ahead <= conf.raftMaxTimeout + 0.05, ahead
    finally:
        node._doDestroy()


def test_who_answered_lately_is_read_in_pysyncobjs_clock(tmp_path: Path, skewed_raft_clock: float) -> None:
    """The leader's view of which followers answered within the quorum window (health, the
    membership guard) compares pysyncobj's answer times with pysyncobj's clock."""
    node = follower(tmp_path)
    try:
        now = pysyncobj_syncobj.monotonicTime()
        answered = node._SyncObj__lastResponseTime
        answered[TCPNode(LEADER)] = now - 0.1  # just now
        answered[TCPNode(OTHER)] = now - 30  # long ago
        assert {n.address for n in answered_within(node, 5.0)} == {LEADER}
    finally:
        node._doDestroy()


def test_raft_clock_is_pysyncobjs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pysyncobj_syncobj, "monotonicTime", lambda: 12345.0)
    assert _liveness.raft_clock() == 12345.0
