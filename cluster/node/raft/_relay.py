"""Messages between members outside the log: the session heartbeats a follower relays to the
leader in batches, and each member's hello (the features of its release).

A follower hands the agents it heard from to :meth:`RelayMixin.relay_to_leader` (on the tick
thread); one message of type :data:`RELAY` goes to the node it believes leads, over the members'
authenticated Raft connection. The leader passes the agents to ``on_relay``
(cluster/node/lessor.py). Nothing here is replicated or acknowledged: a lost message costs a
session one batch of liveness, and the next batch renews it (a lease is several batches long).

**Features** (the rolling-upgrade guard, docs/deploy.md section 7). Every
:data:`HELLO_INTERVAL_S` each member sends every other one a :data:`HELLO` message with the
feature bits of its release (:data:`FEATURES`). A release before these bits ignores the message
and sends none, so a member that has sent Raft messages for :data:`OLDER_AFTER_S` without a hello
runs an older release; one not heard from at all is unknown. :meth:`RelayMixin.member_features`
says which, for every member but this one; cluster/node/lessor.py turns it into the sessions mode.

pysyncobj names here: reads ``__raftLeader``, ``__selfNode`` and ``__otherNodes``, calls ``__transport.send(node,
message)`` and ``_isLeader()``; the receive side is one branch of ``_syncobj.py``'s
``__onMessageReceived`` (pysyncobj's own handler ignores a type it does not know). Checklist:
``_pysyncobj.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from waitgraph.node.raft._pysyncobj import SyncObj

RELAY = "waitgraph_relay"
"""The message type; its ``agents`` are a list of agent ids."""
HELLO = "waitgraph_hello"
"""The message type; its ``features`` are the sender's feature bits."""
SESSIONS_LESSOR = 1
"""Heartbeats off the log, expiry by ``ExpireSession``, ``Tick`` version 2 (issue #37)."""
FEATURES = SESSIONS_LESSOR
"""What this release announces."""
HELLO_INTERVAL_S = 1.0
HELLO_EAGER_S = 0.1
"""The interval while a member's hello has not arrived yet."""
OLDER_AFTER_S = 5.0
"""A member heard from this long without a hello runs a release from before the hellos."""
ABSENT_AFTER_S = 10.0
"""A member not heard from at all this long after this node started is down: left out, so that a
dead member does not hold the sessions mode (docs/deploy.md: upgrade one node at a time, each
back before the next)."""
UNKNOWN: None = None


class RelayMixin(SyncObj):  # type: ignore[misc]
    _on_relay: Callable[[list[str]], None] | None = None
    _features: dict[str, int] | None = None
    """member address -> the features its hello announced (tick thread writes, any thread reads)."""
    _first_heard: dict[str, float] | None = None
    """member address -> monotonic time of the first message this node received from it."""
    _last_hello = 0.0
    _hello_since: float | None = None

    def _note_member(self, node: Any, message: Any) -> bool:
        """Every message received (tick thread): when its sender was first heard, and its hello's
        features. True when the message was a hello (nothing more to do with it)."""
        address = str(getattr(node, "address", node))
        if self._first_heard is None or self._features is None:
            self._first_heard, self._features = {}, {}
        self._first_heard.setdefault(address, time.monotonic())
        if type(message) is dict and message.get("type") == HELLO:
            features = message.get("features")
            if type(features) is int:
                self._features[address] = features
            return True
        return False

    def say_hello(self, now: float) -> None:
        """Send this release's features to every other member, every :data:`HELLO_INTERVAL_S` (tick thread)."""
        if self._hello_since is None:
            self._hello_since = now
        # often while this node has not heard every member's hello yet, after it started: the
        # others learn of it as soon as a connection carries one
        heard = self._features or {}
        waiting = now - self._hello_since < ABSENT_AFTER_S and any(
            str(n.address) not in heard for n in list(self._SyncObj__otherNodes)
        )
        if now - self._last_hello < (HELLO_EAGER_S if waiting else HELLO_INTERVAL_S):
            return
        self._last_hello = now
        for node in list(self._SyncObj__otherNodes):
            self._SyncObj__transport.send(node, {"type": HELLO, "features": FEATURES})

    def member_features(self, now: float) -> dict[str, int | None]:
        """Every other member's features: its hello's, 0 (an older release: heard from for
        :data:`OLDER_AFTER_S` without a hello) or None (unknown yet); a member not heard from at
        all for :data:`ABSENT_AFTER_S` since this node started is left out (it is down)."""
        features = dict(self._features or {})
        first = dict(self._first_heard or {})
        since = self._hello_since
        out: dict[str, int | None] = {}
        for node in list(self._SyncObj__otherNodes):
            address = str(node.address)
            if address in features:
                out[address] = features[address]
            elif address in first:
                out[address] = 0 if now - first[address] >= OLDER_AFTER_S else UNKNOWN
            elif since is None or now - since < ABSENT_AFTER_S:
                out[address] = UNKNOWN
        return out

    def relay_to_leader(self, agents: list[str]) -> bool:
        """Send ``agents`` to the leader (tick thread). False when there is none, or this node leads."""
        leader = self._SyncObj__raftLeader
        if leader is None or self._isLeader() or leader == self._SyncObj__selfNode:
            return False
        self._SyncObj__transport.send(leader, {"type": RELAY, "agents": agents})
        return True

    def _relay_received(self, message: dict[str, Any]) -> None:
        agents = message.get("agents")
        handler = self._on_relay
        if handler is None or not self._isLeader() or type(agents) is not list:
            return
        handler([a for a in agents if type(a) is str])
