"""Messages to the leader outside the log: the session heartbeats a follower relays in batches.

A follower hands the agents it heard from to :meth:`RelayMixin.relay_to_leader` (on the tick
thread); one message of type :data:`RELAY` goes to the node it believes leads, over the members'
authenticated Raft connection. The leader passes the agents to ``on_relay``
(cluster/node/lessor.py). Nothing here is replicated or acknowledged: a lost message costs a
session one batch of liveness, and the next batch renews it (a lease is several batches long).

pysyncobj names here: reads ``__raftLeader`` and ``__selfNode``, calls ``__transport.send(node,
message)`` and ``_isLeader()``; the receive side is one branch of ``_syncobj.py``'s
``__onMessageReceived`` (pysyncobj's own handler ignores a type it does not know). Checklist:
``_pysyncobj.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from waitgraph.node.raft._pysyncobj import SyncObj

RELAY = "waitgraph_relay"
"""The message type; its ``agents`` are a list of agent ids."""


class RelayMixin(SyncObj):  # type: ignore[misc]
    _on_relay: Callable[[list[str]], None] | None = None

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
