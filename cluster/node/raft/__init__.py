"""The Raft layer: pysyncobj 0.3.17, wrapped so that it is safe to run the replicated state machine on it.

The face is small: a node (:class:`RaftNode`) built from its settings (:class:`RaftConfig`), the
values it hands out (:class:`RaftStatus`, :class:`Member`, :class:`Read`), the error that stops a node
whose journal is damaged (:class:`JournalCorrupted`) and the reasons a Raft connection is refused
(:data:`REFUSAL_REASONS`, a metric's labels). Nothing outside this package touches pysyncobj or one of
its objects (``scripts/check_layers.py``).

Behind it, one private module per concern, each opening with its rules and the pysyncobj names it
touches; ``_pysyncobj.py`` is the one import of pysyncobj and the checklist for an upgrade:

- ``_node.py``: :class:`RaftNode`, the asyncio facade (group commit, backpressure, reads, status,
  membership);
- ``_config.py``: :class:`RaftConfig` and the ``SyncObjConf`` built from it;
- ``_syncobj.py``: ``WaitgraphSyncObj``, the ``SyncObj`` subclass assembled from one mixin per concern:
  ``_apply.py`` (the one replicated method), ``_acks.py`` (durability, held and repeated
  acknowledgments), ``_liveness.py`` (keepalive, elections), ``_guard.py`` (the truncation guard),
  ``_membership.py`` (guarded membership changes), ``_compaction.py`` (log compaction and dumps;
  ``_fork.py``: the forked writer and reader);
- ``_journal.py``: the checksummed journal and dump file on disk;
- ``_transport.py``: the Raft wire (frame, keys, a receive path a stranger cannot stall);
- ``_unpickler.py``: the restricted unpickler, installed when this package is imported.
"""

from __future__ import annotations

from waitgraph.node.raft._config import RaftConfig
from waitgraph.node.raft._journal import JournalCorrupted
from waitgraph.node.raft._node import Member, RaftNode, RaftStatus, Read
from waitgraph.node.raft._relay import SESSIONS_LESSOR
from waitgraph.node.raft._transport import REFUSAL_REASONS

__all__ = [
    "REFUSAL_REASONS",
    "SESSIONS_LESSOR",
    "JournalCorrupted",
    "Member",
    "RaftConfig",
    "RaftNode",
    "RaftStatus",
    "Read",
]
