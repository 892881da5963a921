"""Connections between members that carry no Raft traffic stay usable (cluster/node/raft/_liveness.py,
"Idle connections").

pysyncobj closes a connection when it sends on one it has read nothing from for
``connectionTimeout``, and the message is lost. Two followers never talk to each other, so
without keepalives the first message between them after a quiet spell, the first vote request of
an election, was dropped. Three real members on loopback, their own tick threads.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.tcp_connection import CONNECTION_STATE

from waitgraph.node.raft import RaftConfig
from waitgraph.node.raft._config import build_conf
from waitgraph.node.raft._syncobj import WaitgraphSyncObj
from waitgraph.statemachine import StateMachine

from .harness import free_ports

SECRET = "keepalive-test-secret-" + "k" * 32


def _members(tmp_path: Path) -> list[WaitgraphSyncObj]:
    addresses = [f"127.0.0.1:{port}" for port in free_ports(3)]
    members = []
    for i, me in enumerate(addresses):
        cfg = RaftConfig(
            raft_address=me,
            peers=tuple(a for a in addresses if a != me),
            data_dir=tmp_path / f"m{i}",
            password=SECRET,
        )
        members.append(WaitgraphSyncObj(me, list(cfg.peers), build_conf(cfg), StateMachine()))
    return members


def _followers(members: list[WaitgraphSyncObj]) -> tuple[WaitgraphSyncObj, WaitgraphSyncObj]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if sum(1 for m in members if m._isLeader()) == 1 and all(m._getLeader() is not None for m in members):
            a, b = (m for m in members if not m._isLeader())
            return a, b
        time.sleep(0.05)
    raise AssertionError("no leader within 20 s")


def _send_after_quiet(sender: WaitgraphSyncObj, to: WaitgraphSyncObj) -> dict[str, Any]:
    """On ``sender``'s tick thread: the connection to ``to``, how long since it last read, and its
    state after one more message is sent on it."""

    def probe() -> dict[str, Any]:
        transport = sender._SyncObj__transport
        node = next(n for n in sender._SyncObj__otherNodes if n.address == to._SyncObj__selfNode.address)
        conn = transport._connections[node]
        quiet_s = time.monotonic() - conn._TcpConnection__lastReadTime
        before = conn.state
        transport.send(node, {"type": "keepalive_test_probe"})  # ignored by the receiver
        return {"quiet_s": quiet_s, "before": before, "after": conn.state}

    return sender.call_on_tick(probe).result(timeout=10)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("keepalive", [True, False], ids=["keepalive", "without-keepalive"])
def test_two_followers_can_still_talk_after_a_quiet_spell(tmp_path, monkeypatch, keepalive):
    """With keepalives, a follower's connection to the other follower has read something within
    the connection timeout however long the cluster has been quiet, and a message sent on it goes
    out. Without them (the control: the bug this guards against), the same message closes it and
    is lost."""
    if not keepalive:
        monkeypatch.setattr(WaitgraphSyncObj, "_keep_connections_alive", lambda self, now: None)
        # the members' hellos (a message a second, cluster/node/raft/_relay.py) keep it alive too
        monkeypatch.setattr(WaitgraphSyncObj, "say_hello", lambda self, now: None)
    members = _members(tmp_path)
    try:
        a, b = _followers(members)
        timeout_s = float(a._SyncObj__conf.connectionTimeout)
        time.sleep(timeout_s + 1.5)  # longer than pysyncobj lets a connection go unread
        got = _send_after_quiet(a, b)
        assert got["before"] == CONNECTION_STATE.CONNECTED, got
        if keepalive:
            assert got["quiet_s"] < timeout_s, got
            assert got["after"] == CONNECTION_STATE.CONNECTED, got
        else:
            assert got["quiet_s"] > timeout_s, got
            # closed, the message with it (pysyncobj may already be connecting again)
            assert got["after"] != CONNECTION_STATE.CONNECTED, got
    finally:
        for m in members:
            m.destroy()
