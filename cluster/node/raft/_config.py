"""One node's Raft settings (:class:`RaftConfig`) and the ``SyncObjConf`` built from them (:func:`build_conf`).

**Configuration** (:func:`build_conf`): the journal (ours) *and* ``fullDumpFile`` in the data
directory (a journal without a dump loses the state after compaction), ``password`` (without it
anyone reaching the Raft port can make every node unpickle arbitrary data: run code; every message
is encrypted and authenticated with a key derived from it, by AES-256-GCM-SIV instead of
pysyncobj's Fernet, ``WaitgraphSyncObj._SyncObj__encryptor``; the transport is
:class:`~waitgraph.node.raft._transport.WaitgraphTransport`, whose frame is cheaper: ``_transport.py``), tuned
timers (``leaderFallbackTimeout`` 1.5 s instead of 30 s, ``connectionRetryTime`` 0.5 s instead of
5 s, ``appendEntriesUseBatch=False``: about 0.5 ms instead of ~100 ms per write at the leader),
``dynamicMembershipChange`` on but guarded (below), bound to the given Raft address, ``commandsWaitLeader=False``
(without a leader a command fails at once as :class:`~waitgraph.node.errors.NotLeader`, instead of
waiting in a queue and being proposed after its caller gave up), and
``appendEntriesBatchSizeBytes`` far above the largest entry we propose, so pysyncobj's
"transmission" path for big entries (whose ``finish`` test compares the pickled entry's offset with
the *unpickled* command length, so it can send ``finish`` early) is never taken.

pysyncobj names: ``SyncObjConf`` and its fields (public); three attributes of ours are set on the conf
for the SyncObj to read (``waitgraph_journal_file``, ``waitgraph_legacy_journal_file``,
``waitgraph_quorum_window_s``). Checklist: ``_pysyncobj.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from waitgraph.node.raft._pysyncobj import SyncObjConf

APPEND_ENTRIES_BATCH_BYTES = 4 * 1024 * 1024
"""pysyncobj's per-message byte budget; far above our largest entry (see the module docstring)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftConfig:
    """One node's Raft settings. ``raft_address`` is both its identity and its bind address."""

    raft_address: str
    peers: tuple[str, ...]
    """The other members' Raft addresses (this node's own address is dropped if listed)."""
    data_dir: Path
    password: str
    """The cluster secret: every Raft message is encrypted with a key derived from it (``_transport.py``)."""
    max_outstanding: int = 10_000
    """Envelopes accepted by :meth:`RaftNode.submit` and not yet answered; beyond it: Exhausted."""
    group_max_items: int = 256
    group_max_bytes: int = 256 * 1024
    group_window_s: float = 0.001
    """How long a new envelope may wait for others while a group is already in flight."""
    group_max_in_flight: int = 1
    """Groups proposed and not yet answered, at most, before a window's end sends the next one; with
    that many in flight, what waits goes when one is answered (or when it reaches
    ``group_max_items`` / ``group_max_bytes``): a burst of unary writers fills fewer, fuller entries."""
    group_max_defer_s: float = 0.02
    """How long the oldest group in flight may hold back the next one: a group that will never be
    answered in time (forwarded to a leader that went away) does not hold later writes for long."""
    submit_timeout_s: float = 5.0
    append_entries_period_s: float = 0.1
    raft_min_timeout_s: float = 0.5
    raft_max_timeout_s: float = 1.0
    leader_fallback_timeout_s: float = 1.5
    connection_timeout_s: float = 2.0
    connection_retry_s: float = 0.5
    quorum_window_s: float = 1.0
    """A leader has a quorum while a majority (itself included) answered within this window."""
    log_compaction_min_entries: int = 5000
    log_compaction_min_time_s: float = 300.0
    fsync: bool = True
    """Acknowledge appended entries only once the journal is flushed to disk (``_acks.py``). The
    default; False (``--no-fsync``) is not durable across a power cut: tests and benchmarks only."""
    fork_dumps: bool = True
    """Write log-compaction dumps in a forked child (``_compaction.py``)."""
    directory: tuple[tuple[str, str, str], ...] = ()
    """(Raft address, node id, gRPC address or "") of the members this node's configuration names;
    members added at runtime are learned from their log entries (``_membership.py``)."""
    probe_timeout_s: float = 2.0
    """How long :meth:`RaftNode.change_membership` waits for a new member's Raft port to answer."""

    def __post_init__(self) -> None:
        if not self.password:
            raise ValueError("a cluster password is required: without it the Raft port runs anyone's code")
        if self.group_max_bytes > APPEND_ENTRIES_BATCH_BYTES // 8:
            raise ValueError("group_max_bytes must stay far below the append_entries batch size")
        if self.max_outstanding < 1 or self.group_max_items < 1 or self.group_max_in_flight < 1:
            raise ValueError("max_outstanding, group_max_items and group_max_in_flight must be positive")
        if not 0 < self.raft_min_timeout_s <= self.raft_max_timeout_s:
            raise ValueError("the election timeouts must be positive, the minimum no larger than the maximum")

    @property
    def journal_file(self) -> Path:
        return self.data_dir / "raft.wal"

    @property
    def legacy_journal_file(self) -> Path:
        """The previous release's pysyncobj journal, migrated once (``_journal.py``)."""
        return self.data_dir / "raft.journal"

    @property
    def dump_file(self) -> Path:
        return self.data_dir / "raft.dump"


def build_conf(cfg: RaftConfig, **overrides: Any) -> SyncObjConf:
    """The SyncObjConf every node runs with (``overrides`` are for tests and the benchmark)."""
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = dict(
        password=cfg.password,
        journalFile=None,  # ours, at cfg.journal_file: _JournalHook
        fullDumpFile=str(cfg.dump_file),
        bindAddress=cfg.raft_address,
        appendEntriesUseBatch=False,
        appendEntriesPeriod=cfg.append_entries_period_s,
        appendEntriesBatchSizeBytes=APPEND_ENTRIES_BATCH_BYTES,
        raftMinTimeout=cfg.raft_min_timeout_s,
        raftMaxTimeout=cfg.raft_max_timeout_s,
        leaderFallbackTimeout=cfg.leader_fallback_timeout_s,
        connectionTimeout=max(cfg.connection_timeout_s, cfg.raft_max_timeout_s),  # pysyncobj wants >=
        connectionRetryTime=cfg.connection_retry_s,
        commandsQueueSize=cfg.max_outstanding,
        commandsWaitLeader=False,
        dynamicMembershipChange=True,  # guarded: _membership.py
        logCompactionMinEntries=cfg.log_compaction_min_entries,
        logCompactionMinTime=cfg.log_compaction_min_time_s,
    )
    kwargs.update(overrides)
    conf = SyncObjConf(**kwargs)
    conf.waitgraph_journal_file = str(cfg.journal_file)
    conf.waitgraph_legacy_journal_file = str(cfg.legacy_journal_file)
    conf.waitgraph_quorum_window_s = cfg.quorum_window_s
    return conf
