"""The guards around pysyncobj's dynamic membership (cluster/node/raft/_membership.py), without a network.

- :func:`membership_refusal`, the rule table: duplicates, unknown members, the leader itself, and
  the quorum the membership needs *after* the change answering now.
- A follower fed by hand: a membership entry of ours takes effect when appended, teaches the
  directory the new member's id, and is "pending" until committed; pysyncobj's own entry format
  (a pickled TCPNode) and a crafted one (``os.system``) are refused by the restricted unpickler,
  skipped as no-ops, and do not wedge the log; a dump holds the membership as of its own index
  and is read back without the node counting itself as its own peer.
- A one-node leader: a second change while the first is not committed is ``change_pending``
  (pysyncobj's own test reads a field it never sets), and pysyncobj's own entry points refuse.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.node import TCPNode

from waitgraph.node.errors import MembershipRefused
from waitgraph.node.raft import RaftConfig, _unpickler
from waitgraph.node.raft._config import build_conf
from waitgraph.node.raft._membership import membership_refusal
from waitgraph.node.raft._syncobj import WaitgraphSyncObj
from waitgraph.node.raft._transport import PICKLE_PROTOCOL
from waitgraph.statemachine import StateMachine

from .fakes import LEADER, OTHER, SELF, FakeTransport, append_entries, follower, regular_command, transport
from .harness import envelope

NEW = "127.0.0.1:4"
MEMBERS = {SELF: "n1", LEADER: "n2", OTHER: "n3"}


def code(refusal: MembershipRefused | None) -> str | None:
    return None if refusal is None else refusal.code


@pytest.mark.parametrize(
    ("kind", "address", "node_id", "healthy", "expected"),
    [
        ("add", NEW, "n4", {SELF, LEADER, OTHER}, None),
        ("add", LEADER, "n4", {SELF, LEADER, OTHER}, "already_member"),
        ("add", NEW, "n2", {SELF, LEADER, OTHER}, "id_in_use"),
        # 4 members need 3; the new one has no log yet, and one old one is silent: 2 answer
        ("add", NEW, "n4", {SELF, LEADER}, "quorum_at_risk"),
        ("rem", SELF, "n1", {SELF, LEADER, OTHER}, "member_is_leader"),
        ("rem", NEW, "n4", {SELF, LEADER, OTHER}, "not_member"),
        ("rem", OTHER, "n3", {SELF, LEADER, OTHER}, None),
        # removing a dead member of three leaves two, which need two: both answer
        ("rem", OTHER, "n3", {SELF, LEADER}, None),
        # removing a live member while another is silent leaves one of the two needed
        ("rem", OTHER, "n3", {SELF, OTHER}, "quorum_at_risk"),
    ],
)
def test_the_rule_table(kind: str, address: str, node_id: str, healthy: set[str], expected: str | None) -> None:
    got = membership_refusal(kind, address, node_id, me=SELF, members=MEMBERS, healthy=healthy)
    assert code(got) == expected
    if got is not None:
        assert got.message.startswith(f"{expected}: ")


def test_one_member_may_grow_to_two_and_four_may_lose_one_silent_member() -> None:
    assert membership_refusal("add", NEW, "n4", me=SELF, members={SELF: "n1"}, healthy={SELF}) is None
    four = {**MEMBERS, NEW: "n4"}
    assert membership_refusal("rem", NEW, "n4", me=SELF, members=four, healthy={SELF, LEADER, OTHER}) is None
    got = membership_refusal("rem", NEW, "n4", me=SELF, members=four, healthy={SELF, NEW})
    assert code(got) == "quorum_at_risk" and got is not None and got.fields["needed"] == 2


def ours(kind: str, address: str, meta: dict[str, str] | None = None) -> bytes:
    return b"\x02" + pickle.dumps([kind, address, address, meta or {}], PICKLE_PROTOCOL)


def addresses(node: Any) -> set[str]:
    return {n.address for n in node.otherNodes}


def test_a_change_takes_effect_when_appended_and_is_pending_until_committed(tmp_path: Path) -> None:
    node = follower(tmp_path)
    t = transport(node)
    try:
        entry = ours("add", NEW, {"grpc": "127.0.0.1:5", "id": "n4"})
        t.deliver(LEADER, append_entries(1, 0, [(regular_command(envelope(1)), 2, 1), (entry, 3, 1)], commit=2))
        node.doTick(0)
        assert addresses(node) == {LEADER, OTHER, NEW}
        assert node.directory[NEW] == ("n4", "127.0.0.1:5")
        assert node.pending_membership() == 3
        t.deliver(LEADER, append_entries(3, 1, [], commit=3))
        node.doTick(0)
        assert node.raftLastApplied == 3 and node.pending_membership() is None
        assert ("n4", NEW) in [(node_id, a) for a, node_id, _ in node.members_now()]
        t.deliver(LEADER, append_entries(3, 1, [(ours("rem", OTHER), 4, 1)], commit=4))
        node.doTick(0)
        assert addresses(node) == {LEADER, NEW} and node.counters["membership_changes"] == 2
    finally:
        node._doDestroy()


class Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("true",))


def test_pysyncobjs_own_entries_and_crafted_ones_are_refused_and_skipped(tmp_path: Path) -> None:
    node = follower(tmp_path)
    t = transport(node)
    refused_before = sum(_unpickler.REFUSED.values())
    try:
        theirs = b"\x02" + pickle.dumps(["add", NEW, TCPNode(NEW)], 2)  # addNodeToCluster's format
        crafted = b"\x02" + pickle.dumps(Evil(), 2)
        wrong_shape = b"\x02" + pickle.dumps(["add", NEW, "127.0.0.1:9", {}], 2)
        entries = [(theirs, 2, 1), (crafted, 3, 1), (wrong_shape, 4, 1), (regular_command(envelope(1)), 5, 1)]
        t.deliver(LEADER, append_entries(1, 0, entries, commit=5))
        node.doTick(0)
        node.doTick(0)
        assert node.raftLastApplied == 5  # applied past them: the log is not wedged
        assert addresses(node) == {LEADER, OTHER}
        assert node.counters["membership_undecodable"] >= 3
        assert node.counters["envelopes_applied"] == 1
        assert _unpickler.REFUSED["pysyncobj.node.TCPNode"] >= 1 and _unpickler.REFUSED["posix.system"] >= 1
        assert sum(_unpickler.REFUSED.values()) > refused_before
    finally:
        node._doDestroy()


def test_a_dump_holds_the_membership_of_its_own_index(tmp_path: Path) -> None:
    node = follower(tmp_path)
    t = transport(node)
    try:
        entries = [(regular_command(envelope(i)), i + 2, 1) for i in range(3)] + [(ours("add", NEW), 5, 1)]
        t.deliver(LEADER, append_entries(1, 0, entries, commit=4))
        node.doTick(0)
        assert NEW in addresses(node) and node.raftLastApplied == 4
        log = node._SyncObj__raftLog
        last, prev = log[3], log[2]  # index 4 (applied) and 3; the add at 5 is not applied yet
        dump = tmp_path / "probe.dump"
        node._write_dump(str(dump), (last, prev, [TCPNode(a) for a in (SELF, LEADER, OTHER, NEW)]))
        _, _, cluster = node._read_dump(str(dump))
        assert cluster == sorted([LEADER, OTHER])  # as of index 4, and never the node itself
    finally:
        node._doDestroy()


def single_leader(tmp: Path) -> WaitgraphSyncObj:
    cfg = RaftConfig(raft_address=SELF, peers=(), data_dir=tmp, password="unused")
    node = WaitgraphSyncObj(
        SELF,
        [],
        build_conf(cfg, autoTick=False, password=None),
        StateMachine(),
        transport_class=FakeTransport,
        directory={SELF: ("n1", "")},
    )
    for _ in range(200):
        node.doTick(0.01)
        if node._isLeader() and node.raftLastApplied >= (node._SyncObj__noopIDx or 10**9):
            return node
    raise AssertionError("a one-node cluster did not elect itself")


def test_one_change_at_a_time_on_the_leader(tmp_path: Path) -> None:
    node = single_leader(tmp_path)
    answers: list[Any] = []
    try:
        node.propose_membership_change("add", NEW, "n4", "", lambda res, err: answers.append(err))
        node.doTick(0)
        assert NEW in addresses(node) and node.pending_membership() is not None  # n4 never answers
        with pytest.raises(MembershipRefused) as refused:
            node.propose_membership_change("add", "127.0.0.1:6", "n5", "", lambda res, err: answers.append(err))
        assert refused.value.code == "change_pending"
        with pytest.raises(MembershipRefused) as refused:
            node.propose_membership_change("rem", NEW, "n4", "", None)
        assert refused.value.code == "change_pending"
        # pysyncobj's own path would skip every guard above (and pickle a TCPNode)
        with pytest.raises(RuntimeError, match="waitgraph member"):
            node.addNodeToCluster("127.0.0.1:7")
        with pytest.raises(RuntimeError, match="waitgraph member"):
            node.removeNodeFromCluster(NEW)
        node.doTick(0)
        assert addresses(node) == {NEW} and answers == []
        assert node.counters["membership_refused"] == 2
    finally:
        node._doDestroy()


def test_recovery_voters_follow_the_membership_and_the_quorum_rule_is_checked_again() -> None:
    from waitgraph.node.config import recovery_refusal
    from waitgraph.node.membership import following_config
    from waitgraph.statemachine.recovery_state import RecoveryConfig

    default = RecoveryConfig(("node:n1", "node:n2", "node:n3"), 2, 1, 500, 2, 60_000)
    grown = following_config(default, ["n1", "n2", "n3", "n4"])
    assert grown is not None and grown.voters == ("node:n1", "node:n2", "node:n3", "node:n4")
    assert (grown.quorum, grown.max_rollback) == (3, 2)  # one voter may be missing, as before
    back = following_config(RecoveryConfig(grown.voters, 3, 2, 500, 2, 60_000), ["n1", "n2", "n4"])
    assert back is not None and back.voters == ("node:n1", "node:n2", "node:n4") and back.quorum == 2
    assert following_config(default, ["n3", "n2", "n1"]) is None  # nothing to change
    assert following_config(RecoveryConfig(), ["n1"]) is None  # not configured: nothing to follow
    # operators and agents stay voters; an explicit max_rollback stays, and the rule refuses
    # what it leaves without a margin
    explicit = RecoveryConfig(("node:n1", "node:n2", "node:n3", "operator:admin"), 4, 2, 500, 2, 60_000)
    shrunk = following_config(explicit, ["n1", "n2"])
    assert shrunk is not None and shrunk.voters == ("node:n1", "node:n2", "operator:admin")
    assert (shrunk.quorum, shrunk.max_rollback) == (3, 2)
    assert recovery_refusal(shrunk, "operator:admin") is None
    tight = following_config(RecoveryConfig(("node:n1", "node:n2", "node:n3"), 3, 2, 500, 2, 60_000), ["n1", "n2"])
    assert tight is not None and (tight.quorum, tight.max_rollback) == (2, 1)
    fixed = following_config(RecoveryConfig(("node:n1", "node:n2", "node:n3"), 3, 1, 500, 2, 60_000), ["n1"])
    assert fixed is not None and (fixed.quorum, fixed.max_rollback) == (1, 1)
    refusal = recovery_refusal(fixed, "operator:admin")
    assert refusal is not None and "quorum_no_margin" in refusal


def test_a_voter_that_left_with_its_node_no_longer_counts_towards_a_commit() -> None:
    """The order of cluster/node/membership.py: node:n3 leaves recovery's voters (following the
    membership) while a proposal it approved is open. The commit counts the voters in force: n3's
    approval no longer counts, and the commit waits for a vote of a remaining voter."""
    from tests.world import World
    from waitgraph.node.membership import following_config
    from waitgraph.statemachine.commands import VoteRecovery

    w = World()
    w.configure(voters=("node:n1", "node:n2", "node:n3", "node:n4"), quorum=3, max_rollback=2)
    a, b = w.execution("A"), w.execution("B")
    w.hold(a, "resource:browser")
    w.produces(b, "artifact:review")
    w.wait(a, "artifact:review")
    w.wait(b, "resource:browser")
    (c,) = w.candidates()
    assert w.propose(c).ok
    for voter in ("node:n3", "node:n1"):
        w.ok(voter, VoteRecovery(digest=c.digest))
    follow = following_config(w.st.recovery.config, ["n1", "n2", "n4"])  # n3 leaves
    assert follow is not None and follow.voters == ("node:n1", "node:n2", "node:n4") and follow.quorum == 2
    w.ok("operator:admin", follow)
    refused = w.commit(c)
    assert not refused.ok and refused.code == "no_quorum", refused  # 1 of 2: n3's approval is gone
    w.ok("node:n4", VoteRecovery(digest=c.digest))
    assert w.commit(c).ok
