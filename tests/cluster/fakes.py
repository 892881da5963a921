"""A SyncObj with no network and no tick thread: messages are fed by hand, ticks run on demand."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from pysyncobj.node import TCPNode
from pysyncobj.transport import Transport

from waitgraph.node.raft import RaftConfig
from waitgraph.node.raft._config import build_conf
from waitgraph.node.raft._syncobj import WaitgraphSyncObj
from waitgraph.statemachine import StateMachine

SELF = "127.0.0.1:1"
LEADER = "127.0.0.1:2"
OTHER = "127.0.0.1:3"


class FakeTransport(Transport):  # type: ignore[misc]
    """Records what the node sends; ``deliver`` plays a message from a peer."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        super().__init__(syncObj, selfNode, otherNodes)
        self._syncObj = syncObj
        self.sent: list[tuple[Any, Any]] = []

    def send(self, node: Any, message: Any) -> bool:
        self.sent.append((node, message))
        return True

    def deliver(self, sender: str, message: dict[str, Any]) -> None:
        self._onMessageReceived(TCPNode(sender), message)


def regular_command(payload: bytes, func_id: int = 0) -> bytes:
    """A log entry's command bytes as pysyncobj writes them for ``apply_commands(payload)``."""
    return b"\x00" + pickle.dumps((func_id, (payload,)), 2)


def append_entries(
    prev: int, prev_term: int, entries: list[tuple[bytes, int, int]], commit: int, term: int = 1
) -> dict:
    return {
        "type": "append_entries",
        "term": term,
        "commit_index": commit,
        "entries": entries,
        "prevLogIdx": prev,
        "prevLogTerm": prev_term,
    }


def follower(
    tmp: Path, machine: StateMachine | None = None, *, fork_dumps: bool = False, **conf: Any
) -> WaitgraphSyncObj:
    """A WaitgraphSyncObj ticking by hand, with journal and dump files under ``tmp``."""
    cfg = RaftConfig(
        raft_address=SELF,
        peers=(LEADER, OTHER),
        data_dir=tmp,
        password="unused",
        log_compaction_min_entries=10**6,
        log_compaction_min_time_s=10**6,
    )
    conf.setdefault("password", None)  # nothing goes over a network here
    return WaitgraphSyncObj(
        SELF,
        [LEADER, OTHER],
        build_conf(cfg, autoTick=False, **conf),
        machine if machine is not None else StateMachine(),
        transport_class=FakeTransport,
        fork_dumps=fork_dumps,
    )


def transport(obj: Any) -> FakeTransport:
    return obj._SyncObj__transport  # type: ignore[no-any-return]


def log_of(obj: Any) -> list[tuple[bytes, int, int]]:
    journal = obj._SyncObj__raftLog
    return [journal[i] for i in range(len(journal))]
