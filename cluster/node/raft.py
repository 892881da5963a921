"""pysyncobj, wrapped so that it is safe to run the replicated state machine on it.

One node = one :class:`RaftNode` (asyncio facade) over one :class:`WaitgraphSyncObj` (the
``SyncObj`` subclass, driven by pysyncobj's own tick thread). What each piece guards against
(every pysyncobj name below is in ``pysyncobj/syncobj.py`` 0.3.17 unless said otherwise):

**One replicated method.** pysyncobj numbers replicated methods by sorted name
(``SyncObj.__init__`` enumerates ``dir(self)``), so the class has exactly one,
:meth:`WaitgraphSyncObj.apply_commands`, taking msgpack bytes: one encoded ``Envelope``, or a
group ``{"kind": "Batch", "v": 1, "items": [envelope bytes, ...]}`` (group commit), or an empty
group (the read barrier). It never raises: ``__applyLogEntries`` only catches
``SyncObjExceptionWrongVer``, so any other exception escapes ``_onTick``, ``raftLastApplied`` is
not advanced, and the same entry is applied again on every tick, forever, on every replica. The
same holds for the result callbacks, which pysyncobj calls inside that loop: ours only hand the
result to the asyncio loop with ``call_soon_threadsafe`` and swallow everything; and for decoding
the entry itself (a pickle of method id and arguments, ``__doApplyCommand``): an entry that does not
decode is skipped, identically on every replica (``WaitgraphSyncObj._SyncObj__doApplyCommand``).
An exception from the core becomes an ``INTERNAL`` outcome, logged and counted. The core checks
before it mutates (``statemachine/machine.py``), so a rejection changes nothing; an unexpected
exception *after* a mutation started would leave that partial change in place. Since every replica
applies the same bytes deterministically they all keep the same partial change and stay in sync;
the residual risk is a non-deterministic failure (``MemoryError`` on one replica only). Taking a
snapshot before every apply to roll back would cost a full state copy per command.

**Snapshots are canonical msgpack, never pickle.** ``SyncObjConf(serializer=, deserializer=)``
replaces pysyncobj's full dump (which pickles ``self.__dict__`` and the cluster's ``Node``
objects, ``__tryLogCompaction``/``serializer.Serializer.serialize``). Ours writes
``{"format": "waitgraph-raft-dump", "v": 1, "state": StateMachine.snapshot(), "last": entry,
"prev": entry, "cluster": [addresses]}``, framed with a version and a CRC-32
(``cluster/node/journal.py``, dump format 2; format 1, the bare document, is still read), fsynced;
pysyncobj renames it into place
(``atomicReplace``) and streams the same file to a follower that is too far behind
(``getTransmissionData``/``setTransmissionData``, then ``__loadDumpFile(clearJournal=True)``).
Restore replaces the whole state. A custom serializer also turns off pysyncobj's own ``fork``
for dumps; ours forks by itself (``RaftConfig.fork_dumps``, see "Log compaction" below), or
else takes the dump on the tick thread between two applies (a consistent cut), and the tick
thread (heartbeats included) pauses for as long as ``snapshot()`` takes. A
dump that cannot be read is fatal (the node exits loudly): pysyncobj would log it and go on
applying the journal to an empty state. The journal is not pysyncobj's ``FileJournal`` (an mmap
whose records have no checksum) but :class:`~waitgraph.node.journal.ChecksummedJournal` at
``raft.wal``: every record under a CRC-32, a torn tail truncated at start-up and damage before it
refused (``cluster/node/journal.py``).

**Durability** (``RaftConfig.fsync``, on by default; ``waitgraph serve --no-fsync`` turns it off for
tests and benchmarks, and says so in ``waitgraph status``). pysyncobj never flushes
its journal, and a follower answers ``append_entries`` (``__sendNextNodeIdx(success=True)``) and a
leader counts its own copy towards a majority (the commit loop in ``_onTick`` starts at ``count =
1``) as soon as the entry is written: an acknowledged write survives a killed process (the page
cache keeps it) but not a power cut. With ``fsync`` on, three small overrides make every
acknowledgment wait for the disk, one flush per tick covering everything appended in it:

- the journal (set in place of pysyncobj's by a set-only descriptor on ``_SyncObj__raftLog``,
  which sees the one assignment in ``SyncObj.__init__``) marks itself dirty on every change;
  :meth:`~waitgraph.node.journal.ChecksummedJournal.sync` is one ``fdatasync``, and its ``.meta``
  file (current term and vote, which Raft requires to be durable before a vote is sent) is
  fsynced whenever it is written;
- a follower's ``next_node_idx`` replies (``_SyncObj__sendNextNodeIdx``) are held, in order, and
  sent only after the next flush;
- each tick (``_onTick``) first flushes the journal (and fsyncs the dump file and the data
  directory after a dump was written or received), then releases the held replies, then runs
  pysyncobj's tick. The leader's entries are appended (and sent) by ``_checkCommandsToApply``
  after the commit loop of a tick, and flushed right after it (``WaitgraphSyncObj._checkCommandsToApply``),
  in the same tick: the leader's flush overlaps the followers' instead of following their
  answers, and the entries are on disk before the next commit loop counts the leader's own
  copy. The one append between the flush and the commit loop, the no-op of a node that wins an
  election inside the tick (a single-node cluster), is flushed by ``_SyncObj__onBecomeLeader``.

A power cut in the middle of an append that was not acknowledged yet leaves a torn last record,
which the journal truncates at start-up; the rewrite that follows a log compaction goes to a new
file renamed into place. Acknowledged entries were on disk before the cut.

**Configuration** (:func:`build_conf`): the journal (ours) *and* ``fullDumpFile`` in the data
directory (a journal without a dump loses the state after compaction), ``password`` (without it
anyone reaching the Raft port can make every node unpickle arbitrary data: run code; every message
is encrypted and authenticated with a key derived from it, by AES-256-GCM-SIV instead of
pysyncobj's Fernet, ``WaitgraphSyncObj._SyncObj__encryptor``; the transport is
:class:`~waitgraph.node.raft_wire.WaitgraphTransport`, whose frame is cheaper: ``cluster/node/raft_wire.py``), tuned
timers (``leaderFallbackTimeout`` 1.5 s instead of 30 s, ``connectionRetryTime`` 0.5 s instead of
5 s, ``appendEntriesUseBatch=False``: about 0.5 ms instead of ~100 ms per write at the leader),
``dynamicMembershipChange`` on but guarded (below), bound to the given Raft address, ``commandsWaitLeader=False``
(without a leader a command fails at once as :class:`~waitgraph.node.errors.NotLeader`, instead of
waiting in a queue and being proposed after its caller gave up), and
``appendEntriesBatchSizeBytes`` far above the largest entry we propose, so pysyncobj's
"transmission" path for big entries (whose ``finish`` test compares the pickled entry's offset with
the *unpickled* command length, so it can send ``finish`` early) is never taken.

**Restricted unpickling** (``cluster/node/safe_pickle.py``), installed when this module is imported.

**Truncation of applied entries** (:meth:`WaitgraphSyncObj._guard_message`). A follower
that receives ``append_entries`` whose ``prevLogIdx`` is before the end of its log deletes every
entry after ``prevLogIdx`` even when they match (Raft only deletes on a conflict). With
``appendEntriesUseBatch=False`` the leader sends one message per command, and a success reply for
an older message moves its ``nextIndex`` *back* (``next_node_idx`` handler), so under a burst it
re-sends ranges the follower already has: the follower logs "truncating already-applied log
entries" and drops entries it has applied (and acknowledged: a leader may count them as
committed). If a log compaction finishes right after such a truncation, ``__deleteEntriesTo`` cuts
past the end of the shortened log and leaves it *empty*: every later message raises
``IndexError`` and the follower is wedged. Both were reproduced (``tests/cluster/test_raft_guard.py``
replays the exact message sequence; a 50,000-command burst on 3 raw pysyncobj processes logs the
truncation in most runs). The guard rewrites such messages before pysyncobj sees them so that
matching entries are never deleted, and keeps the leader's ``nextIndex`` from moving back on a
success reply. It is installed by overriding the private ``__onMessageReceived``
(``WaitgraphSyncObj._SyncObj__onMessageReceived``), which wraps the original.

**Log compaction** (``WaitgraphSyncObj._SyncObj__tryLogCompaction``, :func:`compaction_due`). A
dump is written on the tick thread, which sends no heartbeat and reads no message meanwhile.
pysyncobj starts it on every node at about the same log length, so all three paused together and
the leader changed. Now: followers take turns by applied index (each member owns every third slot
of ``logCompactionMinEntries // members`` indexes, by sorted Raft address), so two never start at
the same index; a leader waits until its log is :data:`LEADER_COMPACTION_FACTOR` times the
threshold (a new leader's followers then compact first; a long-lived leader compacts once per
that many entries). After a dump is written or loaded (a restarted node loads its dump at its first
tick), a follower restarts its election deadline: pysyncobj checks it right after, *before* it
reads the heartbeats that queued during the pause, and would depose a healthy leader. pysyncobj's
own ``logCompactionSplit`` (time windows per node) is not used: its window check also blocks
``forceLogCompaction()`` outside the window (the override turns it off while a forced compaction
starts, should a caller set it).

The pause itself is gone with ``fork_dumps`` (the default of :class:`RaftNode`): like Redis, the
tick thread forks, and the child (a copy-on-write image of the state between two applies, so a
consistent cut) writes ``raft.dump.next.<pid>``, fsyncs it and exits, while the parent goes on
applying and heartbeating; pysyncobj's async-serializer hook (``serializeChecker`` =
:meth:`WaitgraphSyncObj._dump_state`) polls the child each tick, and only after it exited with
success is the file renamed over ``raft.dump`` and the log cut. Why the child is safe next to
gRPC's and asyncio's threads: it runs only ``StateMachine.snapshot()``, msgpack and file writes,
takes no lock (the forking thread was the only writer; a reader may have held the machine lock at
the fork), logs nothing, has SIGINT/SIGTERM blocked, closes every inherited descriptor (the
listening sockets must not outlive a killed parent) and leaves by ``os._exit`` (no exit handlers,
no gRPC shutdown); it never touches a gRPC object, so gRPC's fork support is not needed
(``waitgraph serve`` turns it off: ``GRPC_ENABLE_FORK_SUPPORT=false``). Each child writes its own
``raft.dump.next.<pid>``, so one left running by a killed node cannot mix with the next. A dump
received from the leader meanwhile kills the child. A failed child leaves the old dump and the log
as they were and the next try waits :data:`DUMP_RETRY_S`. The cost is memory: pages the parent (or
the child's reference counting) writes meanwhile are copied, up to the size of the state in the
worst case.

**Repeated acknowledgments** (``WaitgraphSyncObj._SyncObj__sendNextNodeIdx``). A follower answers
every ``append_entries`` with ``next_node_idx``, also one that carries no entry, and with
``appendEntriesUseBatch=False`` the leader sends such a message to every follower after each commit
(to pass on the commit index): two more messages for the followers to send and two more for the
leader to read and tick over, per write, on the leader thread every write waits for (about 10% of
the leader's CPU per write). The leader's handler (``next_node_idx``) only raises its match index
and records the time of the answer, so an answer that repeats the last success answer sent to that
leader (same term, same next index) tells it nothing new. A follower skips it when it answers a
message without entries and sent that same answer less than :data:`REPEATED_ACK_S` ago (counted
in ``acks_skipped``). Never skipped: answers to messages with entries (they acknowledge the entries;
the truncation guard's rewrites keep them answered), failures and resets, answers that move the
index, and any answer when the last one is older than :data:`REPEATED_ACK_S`, so a leader still
hears from every live follower at least once per heartbeat (``quorum_window_s`` and
``leaderFallbackTimeout`` are ten times longer).

**Idle connections** (:meth:`WaitgraphSyncObj._keep_connections_alive`). pysyncobj closes a
connection when it *sends* on one it has read nothing from for ``connectionTimeout``, and the
message is lost. Followers never talk to each other, so after a quiet spell the first message
between them was the first ``request_vote`` of an election: lost, the connection closed, and the
other follower timed out and asked in the same way, so both stood in the same term until the
connection was back. Failover took another election timeout: 1.4-1.5 s instead of 0.5-1.0 s on
the first kill of every ``scripts/bench cluster`` run. Every member now sends :data:`KEEPALIVE` to
every peer every quarter of ``connectionTimeout``; pysyncobj has no handler for its type, so
receiving it only refreshes the connection (it does not count as the follower's answer to the
leader, nor as a heartbeat to a follower).

**Elections** (:meth:`WaitgraphSyncObj._read_before_standing`, :func:`raft_clock`). pysyncobj
checks a follower's election deadline at the start of a tick and reads its sockets at the end,
and an idle tick comes every 50 ms. When the first follower stands, its vote request wakes the
other; if that one's deadline passed since its last tick, it stands too, in the same term, before
it reads the request: a split vote, and one more election timeout (1.6-1.9 s failovers in 2 of 8
kills of a `scripts/bench cluster` run). So a node whose deadline has passed reads what is waiting
first; a vote it grants restarts its deadline, and it does not stand. Every deadline this module
writes into pysyncobj is in :func:`raft_clock`, pysyncobj's own clock.

**Membership** (:meth:`RaftNode.change_membership`, ``waitgraph member``, docs/deploy.md section 6).
pysyncobj applies a change when the entry is *appended* (Raft's single-server change: the leader
at ``_checkCommandsToApply``, a follower in its ``append_entries`` handler, both through
``__doChangeCluster``; a truncated change is undone), and again, as a no-op, when it is applied.
What it gets wrong, and what is done about it:

- Its "previous change not committed yet" test (``__changeCluster``) reads ``__changeClusterIDx``,
  which nothing ever sets: it never refuses a second change. :meth:`WaitgraphSyncObj.pending_membership`
  finds a membership entry after the commit index in the log; the leader refuses a change while
  there is one (and before the no-op of its term is applied, which pysyncobj does check), both in
  the guards and in ``__changeCluster`` itself.
- Its entries pickle a ``TCPNode`` (``addNodeToCluster``: ``['add', id, node]``), which the
  restricted unpickler refuses. Ours are ``['add'|'rem', address, address, {"id", "grpc"}]``:
  pysyncobj builds the node from the address string itself, and the last item (ignored by it) is
  the directory entry that tells every replica the new member's node id and gRPC address
  (:attr:`WaitgraphSyncObj.directory`, also saved in every dump). ``__parseChangeClusterRequest``
  (called on every entry appended or applied; an exception there escapes ``_onTick`` on every
  tick) returns None for anything else: an undecodable or foreign membership entry is a no-op
  everywhere. ``addNodeToCluster``/``removeNodeFromCluster`` (and ``syncobj_admin``'s utility
  messages) are refused.
- Its dump holds the membership of *now*, with changes after the dump's last entry already in
  effect; ours holds the membership as of that entry (``_membership_at`` undoes the later ones).
  On load it compares each address string of the dump with its own ``Node``, which never match,
  and would count itself as one of its peers: :meth:`WaitgraphSyncObj._read_dump` drops it.
- It cannot remove its own leader (``__doChangeCluster`` returns False): refused up front
  (``member_is_leader``).
- Issue #89 (a node added by address before it is bound there): the leader probes the new Raft
  address first (:func:`~waitgraph.node.raft_wire.probe_member`: a handshake sealed with the
  cluster secret must come back).
- :func:`membership_refusal`: the quorum of the membership *after* the change must answer the
  leader now, not counting the new member (no log yet) nor the leaving one.
- pysyncobj keeps the response times of removed members; :meth:`RaftNode.has_quorum` counts only
  current ones. The compaction slots follow the membership.

The guards run on the tick thread (:meth:`WaitgraphSyncObj.call_on_tick`), twice: once before the
caller's ``before`` step (the voters leaving recovery's configuration, cluster/node/membership.py),
then again with the append, so nothing changes between the last check and the entry. A node that
is not a member yet (started with the members as its peers) is not connected to: the members
drop connections from addresses they do not know (``TCPTransport``), so it neither campaigns nor
disturbs a term until it is added; a removed node is dropped the same way once the change is
appended.

**asyncio bridge, group commit, backpressure** (:class:`RaftNode`): see there.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import pickle
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgpack
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj import pickle as pysyncobj_pickle
from pysyncobj import syncobj as pysyncobj_syncobj
from pysyncobj.config import FAIL_REASON, SERIALIZER_STATE
from pysyncobj.journal import MemoryJournal
from pysyncobj.syncobj import _COMMAND_TYPE, SyncObjExceptionWrongVer

from waitgraph.node import safe_pickle
from waitgraph.node.errors import (
    ClusterError,
    Exhausted,
    MembershipRefused,
    NotLeader,
    OutcomeUnknown,
    ReadFailed,
    Stopped,
)
from waitgraph.node.journal import (
    ChecksummedJournal,
    fsync_directory,
    migrate_legacy_journal,
    open_dump,
    seal_dump,
)
from waitgraph.node.raft_wire import PICKLE_PROTOCOL, FrameCodec, WaitgraphTransport, probe_member
from waitgraph.statemachine import Outcome, StateMachine
from waitgraph.statemachine.codec import MAX_PAYLOAD_BYTES, CheckedEnvelope, adopt_checked
from waitgraph.statemachine.errors import InvariantViolation, Rejection, Status
from waitgraph.statemachine.outcome import rejected

safe_pickle.install()

logger = logging.getLogger("waitgraph.node.raft")

T = TypeVar("T")

BATCH_KIND = "Batch"
BATCH_VERSION = 1
MAX_BATCH_ITEMS = 4096
DUMP_FORMAT = "waitgraph-raft-dump"
DUMP_VERSION = 1
APPEND_ENTRIES_BATCH_BYTES = 4 * 1024 * 1024
"""pysyncobj's per-message byte budget; far above our largest entry (see the module docstring)."""

_ROLES = {0: "follower", 1: "candidate", 2: "leader"}


# -- configuration ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftConfig:
    """One node's Raft settings. ``raft_address`` is both its identity and its bind address."""

    raft_address: str
    peers: tuple[str, ...]
    """The other members' Raft addresses (this node's own address is dropped if listed)."""
    data_dir: Path
    password: str
    """The cluster secret: every Raft message is encrypted with a key derived from it (cluster/node/raft_wire.py)."""
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
    """Acknowledge appended entries only once the journal is flushed to disk (module docstring). The
    default; False (``--no-fsync``) is not durable across a power cut: tests and benchmarks only."""
    fork_dumps: bool = True
    """Write log-compaction dumps in a forked child (module docstring, "Log compaction")."""
    directory: tuple[tuple[str, str, str], ...] = ()
    """(Raft address, node id, gRPC address or "") of the members this node's configuration names;
    members added at runtime are learned from their log entries (module docstring, "Membership")."""
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
        """The previous release's pysyncobj journal, migrated once (``cluster/node/journal.py``)."""
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
        dynamicMembershipChange=True,  # guarded: module docstring, "Membership"
        logCompactionMinEntries=cfg.log_compaction_min_entries,
        logCompactionMinTime=cfg.log_compaction_min_time_s,
    )
    kwargs.update(overrides)
    conf = SyncObjConf(**kwargs)
    conf.waitgraph_journal_file = str(cfg.journal_file)
    conf.waitgraph_legacy_journal_file = str(cfg.legacy_journal_file)
    conf.waitgraph_quorum_window_s = cfg.quorum_window_s
    return conf


# -- the journal and durability (module docstring, "Durability"; cluster/node/journal.py) -----------


class _JournalHook:
    """Set-only descriptor for ``_SyncObj__raftLog``: sees the one assignment in ``SyncObj.__init__``.

    :func:`build_conf` gives pysyncobj no journal file, so it builds a ``MemoryJournal``; here it
    is replaced by the :class:`~waitgraph.node.journal.ChecksummedJournal` at the configured path
    (after migrating the previous release's journal once), before pysyncobj reads the term, the
    vote and the log from it. It has no ``__get__``, so reads find the instance's own attribute at
    full speed.
    """

    def __set__(self, obj: WaitgraphSyncObj, journal: Any) -> None:
        conf = obj._SyncObj__conf
        path = getattr(conf, "waitgraph_journal_file", None)
        if path is not None and isinstance(journal, MemoryJournal):
            legacy = getattr(conf, "waitgraph_legacy_journal_file", None)
            if legacy is not None:
                migrate_legacy_journal(Path(legacy), Path(path), durable=obj._fsync)
            journal = ChecksummedJournal(Path(path), durable=obj._fsync)
            # A new journal file's directory entry must be on disk too.
            if obj._fsync:
                fsync_directory(Path(path).parent)
        obj.__dict__["_SyncObj__raftLog"] = journal


class _EncryptorHook:
    """Set-only descriptor for ``_SyncObj__encryptor``: sees the one assignment in ``SyncObj.__init__``.

    pysyncobj builds a ``Fernet`` from ``conf.password`` there; it is replaced by
    :class:`~waitgraph.node.raft_wire.FrameCodec` under the same password (an authenticated header,
    an AES-256-GCM-SIV body: see ``cluster/node/raft_wire.py`` for why and what it guarantees). The
    transport hands ``self.encryptor`` to every connection, so no message is ever sent with Fernet.
    No ``__get__``: reads find the instance's own attribute.
    """

    def __set__(self, obj: WaitgraphSyncObj, encryptor: Any) -> None:
        if encryptor is not None:
            encryptor = FrameCodec(obj._SyncObj__conf.password)
        obj.__dict__["_SyncObj__encryptor"] = encryptor


# -- the replicated object (runs on pysyncobj's tick thread) ---------------------------------------


def _internal(message: str) -> Outcome:
    return rejected(Rejection(Status.INTERNAL, "internal_error", message))


def _exit_process(reason: str) -> None:
    logger.critical("stopping the node: %s", reason)
    logging.shutdown()
    os._exit(70)


TICK_STALL_S = 0.3
"""A tick (work and poll) longer than this is logged (``tick_stalls``): heartbeats went missing."""
DUMP_RETRY_S = 5.0
"""After a forked dump failed, the next one (unless forced) waits this long."""
LEADER_COMPACTION_FACTOR = 4
"""A leader compacts only once its log is this many times ``logCompactionMinEntries`` long."""
REPEATED_ACK_S = 0.05
"""A follower repeats an identical acknowledgment of an entry-less message at most this often
(module docstring, "Repeated acknowledgments"); heartbeats are ``append_entries_period_s`` apart."""
_NEVER = 2**62


def raft_clock() -> float:
    """The clock of every deadline pysyncobj keeps (``pysyncobj.syncobj.monotonicTime``, looked up
    at each call). On Linux it is CLOCK_MONOTONIC_RAW, not ``time.monotonic``: the two were 0.25 s
    apart on the benchmark machine, and the gap moves with every NTP adjustment, so a deadline
    written in one and compared in the other is off by it."""
    return float(pysyncobj_syncobj.monotonicTime())


def answered_within(obj: Any, window_s: float) -> set[Any]:
    """The peers whose last answer reached this leader less than ``window_s`` ago (pysyncobj's
    ``__lastResponseTime``, kept in :func:`raft_clock`). Any thread: the times are copied first
    (a copy racing the tick thread raises RuntimeError; the caller tries again)."""
    horizon = raft_clock() - window_s
    return {node for node, at in obj._SyncObj__lastResponseTime.copy().items() if at > horizon}


KEEPALIVE: dict[str, str] = {"type": "waitgraph_keepalive"}
"""What a member sends every peer every quarter of the connection timeout (module docstring, "Idle
connections"); pysyncobj ignores a message type it has no handler for."""


MAX_IMAGE_READERS = 2
"""Forked whole-state readers (:meth:`RaftNode.read_image`) one node runs at once."""


def compaction_due(
    *,
    log_len: int,
    applied_index: int,
    min_entries: int,
    since_last_s: float,
    min_time_s: float,
    rank: int,
    members: int,
    leader: bool,
) -> bool:
    """Whether a node starts a log compaction now (module docstring, "Log compaction").

    A follower compacts past ``min_entries`` entries (or ``min_time_s`` since its last dump), but
    only while its applied index is in its own slot: the index space is cut into slots of
    ``min_entries // members`` entries, dealt round-robin to the members by ``rank`` (their sorted
    Raft addresses), so no two members start at the same index. A leader compacts only past
    :data:`LEADER_COMPACTION_FACTOR` times ``min_entries``: its pause stops the heartbeats.
    """
    if leader and members > 1:
        return log_len > LEADER_COMPACTION_FACTOR * min_entries
    if log_len <= min_entries and since_last_s <= min_time_s:
        return False
    if members <= 1:
        return True
    slot = max(1, min_entries // members)
    return (applied_index // slot) % members == rank


def _write_dump_file(path: str, head: dict[str, Any], state: Any) -> None:
    with open(path, "wb") as f:
        f.write(seal_dump(msgpack.packb({**head, "state": state}, use_bin_type=True)))
        f.flush()
        os.fsync(f.fileno())


def _dump_child(path: str, head: dict[str, Any], machine: StateMachine) -> None:
    """The forked dump writer: snapshot, write, fsync, exit; never returns.

    It runs only the state's own code and file writes: no lock (the forking tick thread was the
    only writer, and a reader thread may have held the machine lock at the fork), no logging (its
    locks may have been held by another thread), nothing of gRPC or asyncio, no exit handlers
    (``os._exit``). SIGINT and SIGTERM are blocked: they are the parent's to handle.
    """
    code = 1
    try:
        _enter_child()
        _write_dump_file(path, head, machine.snapshot())
        code = 0
    finally:
        os._exit(code)


IMAGE_MOVED = 75
"""A forked reader's exit status when the state it was forked with is not the one the caller read
under the lock (an apply started or ended in between): :meth:`RaftNode.read_image` forks again,
under the lock."""


READER_NICE = 10
"""How much lower than the node's the forked reader's scheduling priority is (``os.nice``)."""


def _image_child(
    fd: int,
    image: Callable[[StateMachine], bytes],
    machine: StateMachine,
    moved: Callable[[], bool] = lambda: False,
) -> None:
    """The forked reader of :meth:`RaftNode.read_image`: ``image`` of the state, written to the
    pipe ``fd``, then exit; never returns. The same rules as :func:`_dump_child`. ``moved`` (read
    on the child's own image) says the state is not the cut the caller read: exit with
    :data:`IMAGE_MOVED` before anything is written."""
    code = 1
    try:
        _enter_child(keep=fd)  # first: SIGINT/SIGTERM stay the parent's even on the way out
        # a reader (the live view's build) must not take a core from the node's ticks and replies
        # on a busy machine: it works at a lower priority, and is late rather than the node
        os.nice(READER_NICE)
        if moved():
            code = IMAGE_MOVED
            return
        view = memoryview(image(machine))
        while view:
            view = view[os.write(fd, view[: 1 << 20]) :]
        code = 0
    except BaseException as exc:  # the parent sees only the exit status: say why on stderr
        with contextlib.suppress(BaseException):
            os.write(2, f"waitgraph: the forked reader failed: {exc!r}\n".encode())
    finally:
        os._exit(code)


def _enter_child(keep: int = -1) -> None:
    """First steps of a forked child: SIGINT and SIGTERM are the parent's, and no descriptor but
    stdin/out/err (and ``keep``) stays open."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    _close_inherited_fds(keep)


def _close_inherited_fds(keep: int = -1) -> None:
    """Close every descriptor but stdin/out/err (and ``keep``) in a forked child: the parent's
    listening sockets (gRPC, Raft) must not stay open in a child that outlives a killed parent, or
    the restarted node could not bind its ports until the child is done."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 4096))
    for fd in fds:
        if fd > 2 and fd != keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _collect_image(pid: int, fd: int) -> bytes:
    """Read a forked reader's pipe to its end and reap it (an executor thread: blocking, GIL free)."""
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
        _, wait_status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wait_status)
    if code == IMAGE_MOVED:
        raise _ImageMoved()
    if code != 0:
        raise ReadFailed(f"the forked reader failed (wait status {wait_status})")
    return b"".join(chunks)


class _ImageMoved(Exception):
    """The forked reader's state was not the caller's cut (:data:`IMAGE_MOVED`): fork again, locked."""


class WaitgraphSyncObj(SyncObj):  # type: ignore[misc]
    """The SyncObj: one replicated method, msgpack dumps, the truncation guard.

    Attributes are set before ``SyncObj.__init__`` because the tick thread starts inside it.
    Everything here except :meth:`read` runs on the tick thread.
    """

    def __init__(
        self,
        self_address: str,
        peers: list[str],
        conf: SyncObjConf,
        machine: StateMachine,
        *,
        transport_class: type = WaitgraphTransport,
        on_fatal: Callable[[str], None] = _exit_process,
        on_restored: Callable[[], None] | None = None,
        fsync: bool = False,
        fork_dumps: bool = False,
        directory: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        self._fsync = fsync
        self.directory: dict[str, tuple[str, str]] = dict(directory or {})
        """Raft address -> (node id, gRPC address) of every member this node has heard of."""
        self._tick_calls: collections.deque[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
            collections.deque()
        )
        self._held_replies: list[tuple[Any, bool, int, bool]] = []
        self.predecoded: dict[bytes, CheckedEnvelope] = {}
        """Envelopes this node proposed, by their bytes, with their decoding (``RaftNode``
        registers them before proposing and drops them when answered): applying one of these
        bytes adopts it instead of decoding them again. Any thread writes; dict operations are
        atomic under the GIL."""
        self._dump_unsynced = False
        self._machine = machine
        self._machine_lock = threading.Lock()
        self.writes = 0
        """Odd while the state machine is being written (under the machine lock), one more at each
        start and end: a forked reader compares it with what the caller read under the lock."""
        self._on_fatal = on_fatal
        self._on_restored = on_restored
        self.counters: dict[str, int] = {
            "entries_applied": 0,
            "envelopes_applied": 0,
            "internal_errors": 0,
            "invariant_violations": 0,
            "guard_rewrites": 0,
            "guard_refusals": 0,
            "guard_errors": 0,
            "next_index_kept": 0,
            "dumps_written": 0,
            "dumps_loaded": 0,
            "entries_undecodable": 0,
            "journal_flushes": 0,
            "replies_held": 0,
            "compactions_forced": 0,
            "dumps_forked": 0,
            "compaction_pause_ms_max": 0,
            "election_deadline_resets": 0,
            "reads_before_standing": 0,
            "tick_stalls": 0,
            "tick_gap_ms_max": 0,
            "acks_skipped": 0,
            "membership_changes": 0,
            "membership_refused": 0,
            "membership_undecodable": 0,
        }
        self._answering_entryless = False
        self._last_ack: dict[Any, tuple[int, int, float]] = {}
        self._keepalive_every_s = float(conf.connectionTimeout) / 4
        self._keepalive_at = 0.0
        self._tick_started_at = 0.0
        conf.serializer = self._write_dump
        conf.deserializer = self._read_dump
        self._fork_dumps = fork_dumps
        self._dump_child_pid: int | None = None
        self._dump_paths = ("", "", "")
        self._dump_started_at = 0.0
        self._dump_status = SERIALIZER_STATE.NOT_SERIALIZING
        self._dump_paused = False
        self._dump_retry_at = 0.0
        if fork_dumps:
            conf.serializeChecker = self._dump_state
        # The compaction policy's own settings: pysyncobj's fields are rewritten every tick.
        self._compaction_min_entries = int(conf.logCompactionMinEntries)
        self._compaction_min_time_s = float(conf.logCompactionMinTime)
        members = sorted({self_address, *peers})
        self._compaction_rank = members.index(self_address)
        self._compaction_members = len(members)
        self._last_dump_at = time.monotonic()
        super().__init__(self_address, peers, conf, transportClass=transport_class)

    # -- overrides of two private pysyncobj methods ----------------------------------------------
    # ``self.__x`` inside SyncObj is looked up as ``self._SyncObj__x``, so a subclass attribute of
    # that name replaces it everywhere, including the handler ``SyncObj.__init__`` registers with
    # the transport before the tick thread starts. Both wrap the original and change nothing else
    # (``__onMessageReceived`` also notes whether the message carried entries, for
    # ``_repeated_ack``).

    _SyncObj__raftLog: Any = _JournalHook()
    _SyncObj__encryptor: Any = _EncryptorHook()

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        # Whether the message as the leader sent it (before the guard's rewrite) carries no entry:
        # only its answer may be skipped as a repeat (``_SyncObj__sendNextNodeIdx``).
        self._answering_entryless = (
            type(message) is dict
            and message.get("type") == "append_entries"
            and "prevLogIdx" in message
            and "transmission" not in message
            and not message.get("entries")
        )
        try:
            self._guard_message(super()._SyncObj__onMessageReceived, node, message)
        finally:
            self._answering_entryless = False

    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:
        # Decoding a log entry (a pickle: function id and arguments) happens before our method
        # runs; an entry that does not decode, or names no method, would raise out of
        # ``__applyLogEntries`` and wedge every replica. Every replica fails the same way on the
        # same bytes, so skipping it keeps them in sync.
        try:
            return super()._SyncObj__doApplyCommand(command)
        except SyncObjExceptionWrongVer:
            raise
        except Exception:
            self.counters["entries_undecodable"] += 1
            logger.exception("skipping a log entry that does not decode to a call of apply_commands")
            return None

    # -- log compaction: when, and what a long pause must not cause --------------------------------

    def _SyncObj__tryLogCompaction(self) -> None:
        # pysyncobj's own check (``__tryLogCompaction``): compact past ``logCompactionMinEntries``
        # or ``logCompactionMinTime``, or when forced; with ``logCompactionSplit`` only inside a
        # time window per node, and that window check also blocks a *forced* compaction. Here the
        # decision is :func:`compaction_due` (or forced, always), handed to pysyncobj by setting
        # its two thresholds to "now" or "never" for this call; the split check is switched off
        # while a forced compaction starts. Everything else (finishing a dump, cutting the log)
        # is pysyncobj's, unchanged.
        conf = self._SyncObj__conf
        forced = bool(self._SyncObj__forceLogCompaction)
        backing_off = time.monotonic() < self._dump_retry_at
        due = forced or (
            not backing_off
            and compaction_due(
                log_len=len(self._SyncObj__raftLog),
                applied_index=int(self.raftLastApplied),
                min_entries=self._compaction_min_entries,
                since_last_s=time.monotonic() - self._last_dump_at,
                min_time_s=self._compaction_min_time_s,
                rank=self._compaction_rank,
                members=self._compaction_members,
                leader=bool(self._isLeader()),
            )
        )
        conf.logCompactionMinEntries = 0 if due else _NEVER
        conf.logCompactionMinTime = 0.0 if due else float(_NEVER)
        split = conf.logCompactionSplit
        started = time.monotonic()
        self._dump_paused = False
        children = self.counters["dumps_forked"]
        try:
            if forced:
                conf.logCompactionSplit = False
            super()._SyncObj__tryLogCompaction()
        finally:
            conf.logCompactionSplit = split
        if forced and (self._dump_paused or self._dump_child_pid is not None):
            self.counters["compactions_forced"] += 1
        if self._dump_paused:  # a dump was written on this thread, just now
            self._after_dump(time.monotonic() - started)
        elif self.counters["dumps_forked"] != children:
            self._last_dump_at = time.monotonic()

    def _after_dump(self, pause_s: float) -> None:
        """The tick thread was busy writing a dump for ``pause_s``: nothing was received meanwhile.

        pysyncobj checks a follower's election deadline at the start of the next tick, before it
        reads the heartbeats that arrived during the pause, so a pause longer than the election
        timeout would start an election against a healthy leader (and depose it). The deadline
        is restarted as if a heartbeat had just arrived: a leader that really died is noticed one
        election timeout later than otherwise.
        """
        self._last_dump_at = time.monotonic()
        self.counters["compaction_pause_ms_max"] = max(self.counters["compaction_pause_ms_max"], int(pause_s * 1000))
        self._restart_election_timer()
        if pause_s > 0.1:
            logger.info("log compaction paused the Raft thread for %.0f ms", pause_s * 1000)

    def _restart_election_timer(self) -> None:
        """After a long pause of the tick thread (a dump written or loaded), as if a heartbeat had
        just arrived (see :meth:`_after_dump`); a leader keeps its role."""
        if not self._isLeader():
            self._SyncObj__raftElectionDeadline = raft_clock() + self._SyncObj__generateRaftTimeout()
            self.counters["election_deadline_resets"] += 1

    # -- durability: three more overrides, inert with ``fsync`` off (``--no-fsync``) (the answers
    # of ``_SyncObj__sendNextNodeIdx`` also skip repeated acknowledgments, module docstring) -----

    def _onTick(self, timeToWait: float = 0.0) -> None:
        started = time.monotonic()
        gap = started - self._tick_started_at  # one tick's work plus its poll (<= timeToWait)
        if gap > TICK_STALL_S and self._tick_started_at:
            # The previous tick took that long (a synchronous dump, the GIL held elsewhere, the
            # machine out of CPU): long enough to cost heartbeats, so say so.
            self.counters["tick_stalls"] += 1
            logger.warning("the Raft thread took %.0f ms for one tick", gap * 1000)
        self.counters["tick_gap_ms_max"] = max(self.counters["tick_gap_ms_max"], int(gap * 1000))
        self._tick_started_at = started
        if self._fsync:
            self.sync_journal()
        self._run_tick_calls()
        self._keep_connections_alive(started)
        self._read_before_standing()
        super()._onTick(timeToWait)

    def _read_before_standing(self) -> None:
        """A follower or candidate whose election deadline has passed first reads what is waiting
        on its connections (module docstring, "Elections"): pysyncobj checks the deadline at the
        start of a tick and reads at its end, so a vote request that woke this tick would
        otherwise find this node already standing in the same term."""
        if self._isLeader() or self._SyncObj__selfNode is None:
            return
        if self._SyncObj__raftElectionDeadline >= raft_clock() or not self._SyncObj__connectedToAnyone():
            return  # not due, or pysyncobj will not stand anyway (connected to no one)
        self.counters["reads_before_standing"] += 1
        self._poller.poll(0)

    def _keep_connections_alive(self, now: float) -> None:
        """:data:`KEEPALIVE` to every peer, every quarter of the connection timeout (module
        docstring, "Idle connections"); a peer not connected is skipped (pysyncobj reconnects)."""
        if now - self._keepalive_at < self._keepalive_every_s:
            return
        self._keepalive_at = now
        transport = self._SyncObj__transport
        for node in self._SyncObj__otherNodes:
            transport.send(node, KEEPALIVE)

    def _SyncObj__sendNextNodeIdx(
        self, node: Any, reset: bool = False, nextNodeIdx: int | None = None, success: bool = False
    ) -> None:
        if nextNodeIdx is None:  # pysyncobj's default, taken now rather than when the reply leaves
            nextNodeIdx = self._SyncObj__getCurrentLogIndex() + 1
        if success and not reset and self._repeated_ack(node, nextNodeIdx):
            self.counters["acks_skipped"] += 1
            return
        if not self._fsync:
            super()._SyncObj__sendNextNodeIdx(node, reset, nextNodeIdx, success)
            return
        # Every reply is held, failures too, so that one peer's replies keep their order.
        self._held_replies.append((node, reset, nextNodeIdx, success))
        self.counters["replies_held"] += 1

    def _repeated_ack(self, node: Any, next_index: int) -> bool:
        """True when this success answer repeats, to an entry-less message, the one sent to ``node``
        less than :data:`REPEATED_ACK_S` ago (module docstring, "Repeated acknowledgments"); records
        the answer otherwise."""
        term, now = int(self.raftCurrentTerm), time.monotonic()
        last = self._last_ack.get(node)
        if (
            self._answering_entryless
            and last is not None
            and last[:2] == (term, next_index)
            and now - last[2] < REPEATED_ACK_S
        ):
            return True
        self._last_ack[node] = (term, next_index, now)
        return False

    def _checkCommandsToApply(self) -> None:
        super()._checkCommandsToApply()
        if self._fsync:
            # A leader has just appended and sent this tick's entries: flush its copy now, while
            # the followers flush theirs, rather than after the poll that brings their answers.
            self.sync_journal()

    def _SyncObj__onBecomeLeader(self) -> None:
        super()._SyncObj__onBecomeLeader()
        if self._fsync:
            # The no-op it appended may be counted by this very tick's commit loop.
            self.sync_journal()

    # -- membership (module docstring, "Membership"); everything here runs on the tick thread ------

    def call_on_tick(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run ``fn`` on the tick thread at the start of its next tick (any thread may call this):
        pysyncobj's state and transport belong to that thread."""
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._tick_calls.append((fn, fut))
        with contextlib.suppress(Exception):
            self._SyncObj__pipeNotifier.notify()  # wake the poll now rather than at its timeout
        return fut

    def _run_tick_calls(self) -> None:
        while self._tick_calls:
            fn, fut = self._tick_calls.popleft()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)

    def members_now(self) -> list[tuple[str, str, str]]:
        """(Raft address, node id, gRPC address) of every member as this replica has it, by address."""
        for _ in range(3):
            try:
                others = [n.address for n in self.otherNodes]
                break
            except RuntimeError:  # the set changed size under us (tick thread); try again
                continue
        else:
            others = []
        addresses = sorted({self.selfNode.address, *others})
        return [(a, *self.directory.get(a, (a, ""))) for a in addresses]

    def pending_membership(self) -> int | None:
        """The log index of a membership change appended and not committed yet, if any."""
        log = self._SyncObj__raftLog
        if not len(log):
            return None
        first = log[0][1]
        for pos in range(max(0, int(self._SyncObj__raftCommitIndex) + 1 - first), len(log)):
            entry = log[pos]
            if entry[0][:1] == _MEMBERSHIP_TAG:
                return int(entry[1])
        return None

    def propose_membership_change(
        self, kind: str, address: str, node_id: str, grpc_address: str, callback: Callable[[Any, Any], None] | None
    ) -> None:
        """Check the guards, then queue the change for this tick's ``_checkCommandsToApply``.

        Tick thread (:meth:`call_on_tick`), so that nothing changes between the checks and the
        append. Raises :class:`NotLeader` or :class:`MembershipRefused`; ``callback(result, error)``
        is pysyncobj's, called when the entry commits (or is refused or discarded). Without a
        callback only the guards run (nothing is proposed)."""
        if not self._isLeader():
            leader = self._getLeader()
            raise NotLeader(
                "membership changes are made by the leader", leader=None if leader is None else str(leader.address)
            )
        noop = self._SyncObj__noopIDx
        if noop is None or self.raftLastApplied < noop:
            raise self._refused("change_pending", "the leader has not committed the first entry of its term yet")
        pending = self.pending_membership()
        if pending is not None:
            raise self._refused(
                "change_pending",
                f"the membership change at log index {pending} is not committed yet: one change at a time",
                log_index=pending,
            )
        me = self.selfNode.address
        others = {n.address: n for n in self.otherNodes}
        recent = answered_within(self, float(self._SyncObj__conf.waitgraph_quorum_window_s))
        healthy = {me} | {a for a, n in others.items() if n in recent}
        ids = {a: self.directory.get(a, (a, ""))[0] for a in {me, *others}}
        refusal = membership_refusal(kind, address, node_id, me=me, members=ids, healthy=healthy)
        if refusal is not None:
            self.counters["membership_refused"] += 1
            raise refusal
        if callback is None:
            return
        meta = {"grpc": grpc_address, "id": node_id} if kind == "add" else {}
        # [kind, id, node, meta]: pysyncobj's own shape but with the node as its address string (it
        # builds the TCPNode itself) and our directory entry appended, so the entry unpickles
        # without a single global (cluster/node/safe_pickle.py keeps refusing TCPNode).
        command = pickle.dumps([kind, address, address, meta], PICKLE_PROTOCOL)
        self._applyCommand(command, callback, _COMMAND_TYPE.MEMBERSHIP)

    def _refused(self, code: str, message: str, **fields: Any) -> MembershipRefused:
        self.counters["membership_refused"] += 1
        return MembershipRefused(code, message, **fields)

    # pysyncobj's own entry points (``addNodeToCluster``, ``removeNodeFromCluster``, and the
    # ``add``/``remove`` utility messages of ``syncobj_admin`` that call them) pickle a TCPNode and
    # skip every guard above: refused. The transport answers a utility message with the error text.
    def addNodeToCluster(self, node: Any, callback: Any = None) -> None:
        raise RuntimeError("membership changes go through `waitgraph member add` (the leader's guards)")

    def removeNodeFromCluster(self, node: Any, callback: Any = None) -> None:
        raise RuntimeError("membership changes go through `waitgraph member remove` (the leader's guards)")

    def _SyncObj__parseChangeClusterRequest(self, command: bytes) -> list[Any] | None:
        # pysyncobj calls this on every entry it appends or applies; an exception there escapes
        # ``_onTick`` (and would be raised again on every tick). An entry that is not a change of
        # ours (:func:`_valid_change`) is none at all: appended and applied as a no-op everywhere.
        if command[:1] != _MEMBERSHIP_TAG:
            return None
        try:
            request = pysyncobj_pickle.loads(command[1:])
        except Exception:
            request = None
        if not _valid_change(request):
            self.counters["membership_undecodable"] += 1
            logger.error("ignoring a membership entry that is not a waitgraph membership change")
            return None
        return request  # type: ignore[no-any-return]

    def _SyncObj__changeCluster(self, request: list[Any]) -> bool:
        # The leader, before appending a change. pysyncobj's "previous change not committed yet"
        # test reads ``__changeClusterIDx``, which nothing in pysyncobj ever sets: it never refuses.
        if self.pending_membership() is not None:
            self.counters["membership_refused"] += 1
            return False
        return bool(super()._SyncObj__changeCluster(request))

    def _SyncObj__doChangeCluster(self, request: list[Any], reverse: bool = False) -> bool:
        changed = bool(super()._SyncObj__doChangeCluster(request, reverse))
        if changed:
            if request[0] == "add" and not reverse and len(request) >= 4 and type(request[3]) is dict:
                meta = request[3]
                self.directory[request[1]] = (str(meta.get("id") or request[1]), str(meta.get("grpc") or ""))
            self.counters["membership_changes"] += 1
            logger.info("membership: %s %s%s", request[0], request[1], " (rolled back)" if reverse else "")
            self._membership_changed()
        return changed

    def _SyncObj__updateClusterConfiguration(self, newNodes: Any) -> None:
        super()._SyncObj__updateClusterConfiguration(newNodes)  # a dump loaded: its membership
        self._membership_changed()

    def _membership_changed(self) -> None:
        members = sorted({self.selfNode.address, *(n.address for n in self.otherNodes)})
        self._compaction_rank = members.index(self.selfNode.address)
        self._compaction_members = len(members)

    def _membership_at(self, index: int, members: set[str]) -> list[str]:
        """The members as of log ``index``: changes take effect when appended (Raft's single-server
        rule, as pysyncobj does it), so those after ``index`` are undone on a copy."""
        log = self._SyncObj__raftLog
        out = set(members)
        if len(log):
            first = log[0][1]
            for pos in range(len(log) - 1, max(index + 1 - first, 0) - 1, -1):
                request = self._SyncObj__parseChangeClusterRequest(log[pos][0])
                if request is not None:
                    (out.discard if request[0] == "add" else out.add)(request[1])
        return sorted(out)

    def sync_journal(self) -> None:
        """Flush what was appended since the last call, then send the replies that waited for it.

        Tick thread only (or before the tick thread starts). A failing flush is fatal: the node
        cannot promise durability any more, and holding replies forever would only hide it.
        """
        journal = self._SyncObj__raftLog
        try:
            if isinstance(journal, ChecksummedJournal) and journal.sync():
                self.counters["journal_flushes"] += 1
            if self._dump_unsynced:
                dump = self._SyncObj__conf.fullDumpFile
                with open(dump, "rb") as f:
                    os.fsync(f.fileno())
                fsync_directory(Path(dump).parent)
                self._dump_unsynced = False
        except OSError as exc:
            self._on_fatal(f"cannot flush the Raft journal to disk: {exc!r}")
            raise
        held, self._held_replies = self._held_replies, []
        for node, reset, next_index, success in held:
            super()._SyncObj__sendNextNodeIdx(node, reset, next_index, success)

    # The one replicated method. ``*args, **kwargs`` so that no argument list, however crafted,
    # makes the call itself raise a TypeError before the body's try.
    @replicated  # type: ignore[untyped-decorator]
    def apply_commands(self, payload: Any = None, *args: Any, **kwargs: Any) -> tuple[Outcome, ...]:
        try:
            with self._machine_lock:
                self.writes += 1
                try:
                    outcomes = self._apply_payload(payload)
                finally:
                    self.writes += 1
            self.counters["entries_applied"] += 1
            self.counters["envelopes_applied"] += len(outcomes)
            return outcomes
        except Exception as exc:  # pragma: no cover - _apply_payload already catches per envelope
            self.counters["internal_errors"] += 1
            logger.exception("apply_commands failed outside an envelope")
            return (_internal(f"apply failed: {type(exc).__name__}"),)

    def _apply_payload(self, payload: Any) -> tuple[Outcome, ...]:
        if not isinstance(payload, bytes):
            return (rejected(Rejection(Status.INVALID_ARGUMENT, "codec", "payload must be bytes")),)
        items = _batch_items(payload)
        if items is None:
            return (self._apply_one(payload),)
        return tuple(self._apply_one(item) for item in items)

    def _apply_one(self, data: bytes) -> Outcome:
        try:
            checked = self.predecoded.pop(data, None)
            if checked is not None:  # the same bytes, so the same envelope a decoder would build
                return self._machine.apply(adopt_checked(checked))
            return self._machine.apply_bytes(data)
        except InvariantViolation as exc:
            self.counters["internal_errors"] += 1
            self.counters["invariant_violations"] += 1
            logger.critical("invariant violation while applying a command: %s", exc.message)
            return _internal(f"invariant violation: {exc.message}")
        except Exception as exc:
            self.counters["internal_errors"] += 1
            logger.exception("the state machine raised while applying a command")
            return _internal(f"apply raised {type(exc).__name__}")

    def read(self, fn: Callable[[StateMachine], T]) -> T:
        """Run ``fn`` on the state machine between two applies (any thread; blocks while applying)."""
        with self._machine_lock:
            return fn(self._machine)

    # -- full dumps (pysyncobj calls these on the tick thread) -----------------------------------

    def _write_dump(self, file_name: str, data: tuple[Any, ...]) -> None:
        last, prev, cluster = data
        # pysyncobj hands the membership as it is now, with the changes appended after the dump's
        # last entry already in effect; the dump must hold it as of that entry.
        members = self._membership_at(int(last[1]), {str(getattr(node, "address", node)) for node in cluster})
        head = {
            "cluster": members,
            "directory": {a: list(self.directory[a]) for a in sorted(self.directory)},
            "format": DUMP_FORMAT,
            "last": [bytes(last[0]), int(last[1]), int(last[2])],
            "prev": [bytes(prev[0]), int(prev[1]), int(prev[2])],
            "v": DUMP_VERSION,
        }
        if self._fork_dumps:
            self._fork_dump(file_name, str(self._SyncObj__conf.fullDumpFile), head)
            return
        with self._machine_lock:
            state = self._machine.snapshot()
        _write_dump_file(file_name, head, state)
        # pysyncobj renames it into place after this returns: the rename is fsynced with the next
        # journal flush, before the log cut that follows it at the next tick.
        self._dump_unsynced = self._fsync
        self.counters["dumps_written"] += 1
        self._dump_paused = True
        self._dump_status = SERIALIZER_STATE.SUCCESS  # reported once by _dump_state (fork mode)

    def _fork_dump(self, tmp_name: str, final: str, head: dict[str, Any]) -> None:
        """Start writing the dump in a forked child (module docstring, "Log compaction").

        pysyncobj renames ``tmp_name`` over the dump as soon as this returns, so ``tmp_name`` is
        made a second name of the current dump (the rename of a file onto itself does nothing);
        with no dump yet, ``tmp_name`` is left missing: pysyncobj's rename fails, which its
        ``serialize`` swallows (it records a failure that our ``serializeChecker`` supersedes),
        and no half-written file ever takes the dump's name. The child writes ``<dump>.next``,
        and :meth:`_dump_state` renames that into place once the child exited successfully,
        before pysyncobj cuts the log.
        """
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        if os.path.isfile(final):
            os.link(final, tmp_name)
        for stale in Path(final).parent.glob(Path(final).name + ".next.*"):
            # Left by a writer whose node was killed; one may still be writing into it (unlinked,
            # its writes go nowhere). Each writer has its own file, named by its pid.
            with contextlib.suppress(OSError):
                stale.unlink()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; coverage does not follow it
            _dump_child(f"{final}.next.{os.getpid()}", head, self._machine)
        self._dump_child_pid = pid
        self._dump_paths = (f"{final}.next.{pid}", final, tmp_name)
        self._dump_started_at = time.monotonic()
        self._dump_status = SERIALIZER_STATE.SERIALIZING

    def _dump_state(self) -> int:
        """pysyncobj's ``serializeChecker`` (fork mode, tick thread): the state of the current dump."""
        pid = self._dump_child_pid
        if pid is None:
            status, self._dump_status = self._dump_status, SERIALIZER_STATE.NOT_SERIALIZING
            return int(status)
        try:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, wait_status = pid, 1
        if done == 0:
            return int(SERIALIZER_STATE.SERIALIZING)
        self._dump_child_pid = None
        next_name, final, tmp_name = self._dump_paths
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)  # the second name of the old dump (see _fork_dump)
        if os.waitstatus_to_exitcode(wait_status) != 0:
            logger.error("the forked dump writer failed (wait status %d); the log is not cut", wait_status)
            self._dump_retry_at = time.monotonic() + DUMP_RETRY_S
            with contextlib.suppress(OSError):
                os.unlink(next_name)
            self._dump_status = SERIALIZER_STATE.NOT_SERIALIZING
            return int(SERIALIZER_STATE.FAILED)
        os.replace(next_name, final)
        self._dump_unsynced = self._fsync
        self.counters["dumps_written"] += 1
        self.counters["dumps_forked"] += 1
        logger.info(
            "forked dump written: %d bytes in %.0f ms",
            os.path.getsize(final),
            (time.monotonic() - self._dump_started_at) * 1000,
        )
        self._dump_status = SERIALIZER_STATE.NOT_SERIALIZING
        return int(SERIALIZER_STATE.SUCCESS)

    def _abandon_forked_dump(self) -> None:
        """A dump from the leader replaces the state: a dump still being written is older."""
        pid, self._dump_child_pid = self._dump_child_pid, None
        if pid is None:
            return
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        with contextlib.suppress(OSError):
            os.unlink(self._dump_paths[0])
        self._dump_status = SERIALIZER_STATE.FAILED

    def _read_dump(self, file_name: str) -> tuple[Any, ...]:
        try:
            with open(file_name, "rb") as f:
                doc = msgpack.unpackb(open_dump(f.read(), file_name), raw=False)
            if type(doc) is not dict or doc.get("format") != DUMP_FORMAT or doc.get("v") != DUMP_VERSION:
                raise ValueError(f"{file_name} is not a {DUMP_FORMAT} v{DUMP_VERSION}")
            last = (bytes(doc["last"][0]), int(doc["last"][1]), int(doc["last"][2]))
            prev = (bytes(doc["prev"][0]), int(doc["prev"][1]), int(doc["prev"][2]))
            # pysyncobj drops this node from the list by comparing each item with its own Node
            # object, which a string never equals: drop it here, or it would count itself twice.
            cluster = [str(a) for a in doc["cluster"] if str(a) != self.selfNode.address]
            directory = {str(a): (str(v[0]), str(v[1])) for a, v in (doc.get("directory") or {}).items() if len(v) == 2}
            fresh = StateMachine()
            fresh.restore(doc["state"])
        except Exception as exc:
            # pysyncobj would log this and carry on applying the journal to the old (or empty)
            # state, which diverges from every other replica: stop instead.
            self._on_fatal(f"cannot load the full dump {file_name}: {exc!r}")
            raise
        self._abandon_forked_dump()
        with self._machine_lock:
            self.writes += 1
            self._machine.state = fresh.state
            self.writes += 1
        self.directory.update(directory)
        # Loading took the tick thread a while (seconds for a large state): pysyncobj checks the
        # election deadline right after this, in the same tick, before reading a single heartbeat;
        # a node that just restarted would otherwise depose a healthy leader.
        self._restart_election_timer()
        # A dump received from the leader was written by pysyncobj without fsync.
        self._dump_unsynced = self._fsync
        self.counters["dumps_loaded"] += 1
        logger.info("restored the state from %s at log index %d", file_name, last[1])
        if self._on_restored is not None:
            with contextlib.suppress(Exception):
                self._on_restored()
        return (last, prev, cluster)

    # -- the truncation guard ----------------------------------------------------------------------

    def _guard_message(self, handle: Callable[[Any, Any], None], node: Any, message: Any) -> None:
        """Pre-process one Raft message, then hand it to pysyncobj's ``__onMessageReceived``."""
        keep_next_index = None
        try:
            if type(message) is dict:
                kind = message.get("type")
                if kind == "append_entries":
                    message = self._guard_append_entries(message)
                    if message is None:
                        return
                elif kind == "next_node_idx" and self._isLeader():
                    acked = message.get("success") and not message.get("reset")
                    keep_next_index = self._SyncObj__raftNextIndex.get(node) if acked else None
        except Exception:
            self.counters["guard_errors"] += 1
            logger.exception("truncation guard failed; passing the message through unchanged")
        handle(node, message)
        if keep_next_index is not None:
            next_index = self._SyncObj__raftNextIndex
            if next_index.get(node, keep_next_index) < keep_next_index:
                # A success reply acknowledges an older message; entries after it are already on
                # the wire. Moving nextIndex back would re-send them and make the follower
                # truncate; a real gap shows up as a ``reset`` reply, which still moves it back.
                next_index[node] = keep_next_index
                self.counters["next_index_kept"] += 1

    def _guard_append_entries(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Make an ``append_entries`` never delete entries that match the leader's.

        pysyncobj's follower deletes everything after ``prevLogIdx`` whenever its log is longer.
        Here the leading entries of the message that the log already has (same index and term)
        are dropped from it, and ``prevLogIdx`` is moved to the last entry known to match the
        leader's log, so pysyncobj deletes only (a) entries that really conflict, or (b) extra
        entries of an older term that are not committed. Known to match: entries up to the last
        matching one of the message (Log Matching), all of them if the log ends in the leader's
        term (only that leader writes entries of its term), and every applied entry (committed,
        so in every later leader's log). A conflict at or below the last applied entry would be a
        Raft safety violation; the message is refused (the leader retries) rather than letting
        the replica silently diverge.
        """
        if "prevLogIdx" not in message or "transmission" in message or message.get("term", -1) < self.raftCurrentTerm:
            return message
        log = self._SyncObj__raftLog
        if len(log) == 0:
            return message
        first_idx = log[0][1]
        last_idx = log[-1][1]
        prev_idx = message["prevLogIdx"]
        if prev_idx is None or not first_idx <= prev_idx <= last_idx:
            return message  # pysyncobj answers with a reset; nothing is deleted
        if log[prev_idx - first_idx][2] != message.get("prevLogTerm"):
            return message
        entries = message.get("entries") or []
        matched = 0
        for entry in entries:
            idx = entry[1]
            if idx > last_idx or log[idx - first_idx][2] != entry[2]:
                break
            matched += 1
        applied = self.raftLastApplied
        if matched < len(entries):
            conflict_idx = entries[matched][1]
            if conflict_idx <= last_idx and conflict_idx <= applied:
                self.counters["guard_refusals"] += 1
                logger.critical(
                    "refusing append_entries that would replace applied entry %d (last applied %d, term %s)",
                    conflict_idx,
                    applied,
                    message.get("term"),
                )
                return None
            if matched == 0:
                return message
            keep_idx = entries[matched - 1][1]
            rest = entries[matched:]
        else:
            # Every entry of the message is already here (pysyncobj would still delete and re-add
            # them, and everything after them).
            keep_idx = entries[-1][1] if entries else prev_idx
            if keep_idx < last_idx:
                ours = log[-1][2] == message.get("term")
                keep_idx = last_idx if ours else max(keep_idx, min(applied, last_idx))
            rest = []
        if keep_idx == prev_idx and len(rest) == len(entries):
            return message
        self.counters["guard_rewrites"] += 1
        guarded = dict(message)
        guarded["prevLogIdx"] = keep_idx
        guarded["prevLogTerm"] = log[keep_idx - first_idx][2]
        guarded["entries"] = rest
        return guarded


def membership_refusal(
    kind: str, address: str, node_id: str, *, me: str, members: dict[str, str], healthy: set[str]
) -> MembershipRefused | None:
    """Why the leader ``me`` must not propose this change now, or None (module docstring, "Membership").

    ``members``: Raft address -> node id of every member, the leader included; ``healthy``: the
    members that answered within the quorum window (the leader included). The quorum the
    membership will need *after* the change must answer now, counting neither a new member (it
    has no log yet) nor a leaving one (etcd's strict reconfiguration check); a one-member
    cluster may grow to two (it cannot do better).
    """
    if kind == "add":
        if address in members:
            return MembershipRefused("already_member", f"{address} is already a member", address=address)
        named = {n: a for a, n in members.items()}
        if node_id in named:
            return MembershipRefused(
                "id_in_use", f"{node_id} is already the member at {named[node_id]}", node_id=node_id
            )
        after = len(members) + 1
        counted = healthy & set(members)
        if len(members) == 1:
            return None
    elif kind == "rem":
        if address == me:
            return MembershipRefused(
                "member_is_leader",
                f"{address} is the leader; pysyncobj cannot remove its own leader: stop it first (another "
                "member takes over), then remove it",
                address=address,
            )
        if address not in members:
            return MembershipRefused("not_member", f"{address} is not a member", address=address)
        after = len(members) - 1
        counted = (healthy & set(members)) - {address}
    else:
        raise ValueError(f"unknown membership change {kind!r}")
    need = after // 2 + 1
    if len(counted) < need:
        return MembershipRefused(
            "quorum_at_risk",
            f"after this change {after} members need {need} to commit; only {len(counted)} answer now "
            f"({', '.join(sorted(counted))}): bring the others back first",
            members_after=after,
            needed=need,
            healthy=len(counted),
        )
    return None


_MEMBERSHIP_TAG = bytes([_COMMAND_TYPE.MEMBERSHIP])


def _valid_change(request: Any) -> bool:
    """The one shape of membership entry this node writes: ``[kind, address, address, meta]``."""
    return (
        type(request) is list
        and len(request) == 4
        and request[0] in ("add", "rem")
        and type(request[1]) is str
        and request[1] == request[2]
        and _is_address(request[1])
        and type(request[3]) is dict
        and all(type(k) is str and type(v) is str for k, v in request[3].items())
    )


def _is_address(text: str) -> bool:
    host, sep, port = text.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def _batch_items(payload: bytes) -> list[bytes] | None:
    """The envelopes of a group payload, or None when the payload is a single envelope (or junk)."""
    try:
        raw = msgpack.unpackb(
            payload,
            raw=False,
            strict_map_key=True,
            max_array_len=MAX_BATCH_ITEMS,
            max_map_len=64,
            max_ext_len=0,
        )
    except Exception:
        return None
    if type(raw) is not dict or raw.get("kind") != BATCH_KIND or raw.get("v") != BATCH_VERSION:
        return None
    items = raw.get("items")
    if type(items) is not list or raw.keys() != {"items", "kind", "v"}:
        return None
    # A non-bytes item is still applied (and rejected by the codec) so that the group keeps one
    # outcome per item.
    return [item if isinstance(item, bytes) else b"" for item in items]


def encode_batch(items: list[bytes]) -> bytes:
    return msgpack.packb({"items": items, "kind": BATCH_KIND, "v": BATCH_VERSION}, use_bin_type=True)  # type: ignore[no-any-return]


# -- the asyncio facade -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RaftStatus:
    """What ``getStatus()`` says, plus our own counters. Values can be one tick old."""

    address: str
    role: str
    leader: str | None
    term: int
    commit_index: int
    applied_index: int
    log_len: int
    has_quorum: bool
    ready: bool
    outstanding: int
    peers_connected: dict[str, bool]
    counters: dict[str, int]
    refused: dict[str, int]
    """Connections closed on the Raft port, by reason (``raft_wire.REFUSAL_REASONS``)."""
    durable: bool
    """Whether every acknowledgment waits for the journal to be on disk (``RaftConfig.fsync``)."""
    members: tuple[Member, ...] = ()
    """Every member, this node included, as this replica has it (module docstring, "Membership")."""
    membership_pending: int | None = None
    """The log index of a membership change not committed yet."""


@dataclass(frozen=True, slots=True)
class Member:
    node_id: str
    raft_address: str
    grpc_address: str


@dataclass(frozen=True, slots=True)
class Read(Generic[T]):
    """A value read from the local replica; ``stale`` unless it was read after a log barrier."""

    value: T
    stale: bool
    applied_index: int


@dataclass(slots=True, eq=False)
class _Group:
    futures: list[asyncio.Future[Outcome]]
    checked: list[bytes] = dataclasses.field(default_factory=list)
    """The bytes of its envelopes registered in ``WaitgraphSyncObj.predecoded``."""
    proposed_at: float = 0.0
    """The loop's clock when it was handed to pysyncobj."""
    deadline: asyncio.TimerHandle | None = None
    settled: bool = False
    barrier: asyncio.Future[None] | None = None


_NOT_APPLIED = {
    FAIL_REASON.MISSING_LEADER: "no leader is known",
    FAIL_REASON.NOT_LEADER: "the leader refused: it is no longer leader",
    FAIL_REASON.DISCARDED: "a new leader replaced the entry; it was not applied",
    FAIL_REASON.REQUEST_DENIED: "the leader denied the request",
}


class RaftNode:
    """One cluster member seen from asyncio: submit envelopes, read the replica, watch the role.

    - **Bridge.** pysyncobj runs its own tick thread; results come back through callbacks on it
      that only call ``loop.call_soon_threadsafe``. Nothing here blocks the loop: proposing is a
      non-blocking queue put plus a pipe write, reads run in the default executor.
    - **Group commit.** An envelope submitted while the node has no group in flight or waiting
      is proposed at once (:meth:`submit`; those of one :meth:`submit_many` leave together at
      the next loop iteration). While a group is in flight, new envelopes wait up to
      ``group_window_s`` or until ``group_max_items`` / ``group_max_bytes``, then go as one log
      entry; each caller gets its own Outcome, in order. With ``group_max_in_flight`` groups in
      flight already, the window's end does not send: they go when one is answered, or once the
      oldest has been in flight ``group_max_defer_s`` (one that will not be answered soon, say
      forwarded to a leader that went away, holds later writes that long at most).
    - **Backpressure.** At most ``max_outstanding`` envelopes (and barriers) are between
      :meth:`submit` and their answer; one more raises :class:`~waitgraph.node.errors.Exhausted` at
      once. pysyncobj's queue is bounded by the same number.
    - **Not leader.** A follower forwards commands to the leader (``_checkCommandsToApply``
      sends ``apply_command``; the leader answers with the log index and the follower's
      callback fires when it applies that index), so :meth:`submit` works on any member.
      Without a leader it raises :class:`~waitgraph.node.errors.NotLeader` (not applied); a result
      that does not arrive within ``submit_timeout_s``, a leader change while forwarding, or a
      snapshot installed over a pending entry raises :class:`~waitgraph.node.errors.OutcomeUnknown`
      (retry with the same request id).
    """

    def __init__(self, cfg: RaftConfig, *, machine: StateMachine | None = None, **conf_overrides: Any) -> None:
        self.cfg = cfg
        self._machine = machine if machine is not None else StateMachine()
        self._conf_overrides = conf_overrides
        self._obj: WaitgraphSyncObj | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outstanding = 0
        self._buffer: list[tuple[bytes, asyncio.Future[Outcome], CheckedEnvelope | None]] = []
        self._buffer_bytes = 0
        self._flush_handle: asyncio.Handle | asyncio.TimerHandle | None = None
        self._deferred = False
        """The pending ``_flush_handle`` is a window that ended with the pipeline full (``_window_over``)."""
        self._in_flight: set[_Group] = set()
        self._holding = False
        """Until the next loop iteration, a lone :meth:`submit` waits for the group like the others
        (:meth:`hold_lone_proposals`)."""
        self._ready = threading.Event()
        self._stopped = False
        self._image_readers = asyncio.Semaphore(MAX_IMAGE_READERS)
        self._membership_lock = asyncio.Lock()

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Build the SyncObj (binds the Raft port, starts the tick thread). Call on the loop's thread.

        pysyncobj stops its tick thread when the thread that built the SyncObj exits, so build it
        on a thread that lives as long as the node: the event loop's.
        """
        self._loop = asyncio.get_running_loop()
        conf = build_conf(self.cfg, **self._conf_overrides)
        conf.onReady = self._ready.set
        conf.onStateChanged = self._on_state_changed
        peers = [p for p in self.cfg.peers if p != self.cfg.raft_address]
        self._obj = WaitgraphSyncObj(
            self.cfg.raft_address,
            peers,
            conf,
            self._machine,
            on_restored=self._on_restored_threadsafe,
            fsync=self.cfg.fsync,
            fork_dumps=self.cfg.fork_dumps,
            directory={a: (node_id, grpc) for a, node_id, grpc in self.cfg.directory},
        )

    async def stop(self) -> None:
        self._stopped = True
        self._fail_all()
        obj, self._obj = self._obj, None
        if obj is not None:
            await asyncio.get_running_loop().run_in_executor(None, obj.destroy_synchronous)

    def _on_state_changed(self, old: int, new: int) -> None:
        with contextlib.suppress(Exception):
            logger.info("raft role %s -> %s", _ROLES.get(old, old), _ROLES.get(new, new))

    def _on_restored_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._fail_in_flight)

    def _fail_in_flight(self) -> None:
        # A snapshot replaced the state: pending entries it covers will never call back.
        for group in list(self._in_flight):
            self._settle_error(group, OutcomeUnknown("a snapshot was installed while the command was pending"))

    def _fail_all(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._deferred = False
        buffered, self._buffer, self._buffer_bytes = self._buffer, [], 0
        for _, fut, _ in buffered:  # never proposed
            if not fut.done():
                fut.set_exception(Stopped("the node stopped before proposing the command"))
        self._outstanding -= len(buffered)
        for group in list(self._in_flight):  # proposed: may be committed by the others
            self._settle_error(group, OutcomeUnknown("the node stopped before the outcome arrived"))

    @property
    def obj(self) -> WaitgraphSyncObj:
        if self._obj is None:
            raise Stopped("the node is not running")
        return self._obj

    # -- writes -----------------------------------------------------------------------------------

    async def submit(self, envelope: bytes | CheckedEnvelope) -> Outcome:
        """Replicate one encoded Envelope and return its Outcome as applied by this replica.

        A :class:`~waitgraph.statemachine.codec.CheckedEnvelope` is proposed as its bytes, and
        this replica applies its decoding rather than decoding the bytes again.

        Raises :class:`~waitgraph.node.errors.Exhausted`, :class:`~waitgraph.node.errors.NotLeader` (not applied)
        or :class:`~waitgraph.node.errors.OutcomeUnknown` (maybe applied: retry with the same request id).
        """
        got = self._enqueue(envelope, alone=True)
        return got if isinstance(got, Outcome) else await got

    async def submit_many(self, envelopes: list[bytes | CheckedEnvelope]) -> list[Outcome | ClusterError]:
        """:meth:`submit` for each envelope, in order, all buffered at once (WriteBatch).

        Each gets its own answer in the same position: an Outcome, or the error :meth:`submit`
        would have raised for it (one past the outstanding limit is :class:`Exhausted` alone; the
        others go on). They join the pending group in order, so they are applied in this order.
        """
        pending: list[Outcome | ClusterError | asyncio.Future[Outcome]] = []
        for envelope in envelopes:
            try:
                pending.append(self._enqueue(envelope))
            except ClusterError as exc:
                pending.append(exc)
        futures = [p for p in pending if isinstance(p, asyncio.Future)]
        if futures:
            await asyncio.wait(futures)
        out: list[Outcome | ClusterError] = []
        for p in pending:
            if not isinstance(p, asyncio.Future):
                out.append(p)
                continue
            failed = p.exception()
            if failed is None:
                out.append(p.result())
            elif isinstance(failed, ClusterError):
                out.append(failed)
            else:
                raise failed
        return out

    def _enqueue(self, envelope: bytes | CheckedEnvelope, alone: bool = False) -> Outcome | asyncio.Future[Outcome]:
        """Buffer one envelope for the next group: its future, or at once the Outcome of an oversize one.

        ``alone``: the caller has no other envelope to add (:meth:`submit`); with nothing in flight
        or waiting, it is proposed now rather than at the next loop iteration."""
        checked = None
        if isinstance(envelope, CheckedEnvelope):
            checked, envelope = envelope, envelope.data
        if not isinstance(envelope, bytes):
            raise TypeError("envelope must be bytes or a CheckedEnvelope")
        if len(envelope) > MAX_PAYLOAD_BYTES:
            # What apply would answer, without putting the bytes into the log.
            return rejected(
                Rejection(
                    Status.INVALID_ARGUMENT,
                    "codec",
                    f"payload is {len(envelope)} bytes; the limit is {MAX_PAYLOAD_BYTES}",
                )
            )
        loop = self._admit()
        fut: asyncio.Future[Outcome] = loop.create_future()
        if self._buffer and self._buffer_bytes + len(envelope) > self.cfg.group_max_bytes:
            self._flush()
        self._buffer.append((envelope, fut, checked))
        self._buffer_bytes += len(envelope)
        if len(self._buffer) >= self.cfg.group_max_items or self._buffer_bytes >= self.cfg.group_max_bytes:
            self._flush()
        elif self._flush_handle is None:
            if self._in_flight:
                self._flush_handle = loop.call_later(self.cfg.group_window_s, self._window_over)
            elif alone and not self._holding:
                self._flush()
            else:
                self._flush_handle = loop.call_soon(self._flush)
        return fut

    def hold_lone_proposals(self) -> None:
        """Several writers are about to submit in this loop iteration (the native front read a
        burst of calls at once: cluster/node/front.py): none proposes alone, so they all leave as
        one group at the next iteration instead of the first alone and the rest a round later."""
        loop = self._loop
        if loop is None or self._holding:
            return
        self._holding = True
        loop.call_soon(self._release_hold)  # after the writers' first steps, already scheduled

    def _release_hold(self) -> None:
        self._holding = False

    async def barrier(self) -> None:
        """Return once this replica has applied an entry committed after the call started."""
        loop = self._admit()
        done: asyncio.Future[None] = loop.create_future()
        group = _Group(futures=[], barrier=done)
        self._propose(group, encode_batch([]))
        await done

    def _admit(self) -> asyncio.AbstractEventLoop:
        if self._stopped or self._obj is None or self._loop is None:
            raise Stopped("the node is not running")
        if self._outstanding >= self.cfg.max_outstanding:
            raise Exhausted(
                f"{self._outstanding} commands are outstanding on this node (limit {self.cfg.max_outstanding})",
                limit=self.cfg.max_outstanding,
            )
        self._outstanding += 1
        return self._loop

    def _window_over(self) -> None:
        """The window of the waiting envelopes ended: send them, unless ``group_max_in_flight``
        groups are in flight already; then they go when one is answered (:meth:`_finish`), or
        once the oldest in flight was proposed ``group_max_defer_s`` ago, whichever comes first."""
        self._flush_handle, self._deferred = None, False
        if len(self._in_flight) < self.cfg.group_max_in_flight:
            self._flush()
            return
        loop = self._loop
        assert loop is not None
        due = min(g.proposed_at for g in self._in_flight) + self.cfg.group_max_defer_s
        if loop.time() >= due:
            self._flush()
            return
        self._flush_handle, self._deferred = loop.call_at(due, self._window_over), True

    def _flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._deferred = False
        if not self._buffer:
            return
        buffered, self._buffer, self._buffer_bytes = self._buffer, [], 0
        items = [env for env, _, _ in buffered]
        payload = items[0] if len(items) == 1 else encode_batch(items)
        group = _Group(futures=[fut for _, fut, _ in buffered])
        if self._obj is not None:  # else _propose fails the group: nothing to register
            predecoded = self._obj.predecoded
            for data, _, checked in buffered:
                if checked is not None:
                    predecoded[data] = checked
                    group.checked.append(data)
        self._propose(group, payload)

    def _propose(self, group: _Group, payload: bytes) -> None:
        loop = self._loop
        assert loop is not None
        self._in_flight.add(group)
        group.proposed_at = loop.time()
        group.deadline = loop.call_later(
            self.cfg.submit_timeout_s,
            self._settle_error,
            group,
            OutcomeUnknown(f"no outcome within {self.cfg.submit_timeout_s}s"),
        )

        def callback(result: Any, error: Any) -> None:
            # pysyncobj's tick thread (or this thread when its queue is full): never raise here,
            # an exception would make pysyncobj apply the entry again.
            with contextlib.suppress(Exception):
                loop.call_soon_threadsafe(self._settle, group, result, error)

        try:
            self.obj.apply_commands(payload, callback=callback)
        except BlockingIOError:
            pass  # the command is queued; only pysyncobj's wake-up pipe was full
        except Exception as exc:
            logger.exception("proposing failed")
            self._settle_error(group, OutcomeUnknown(f"proposing failed: {type(exc).__name__}"))

    def _settle(self, group: _Group, result: Any, error: Any) -> None:
        if group.settled:
            return
        if error != FAIL_REASON.SUCCESS:
            self._settle_error(group, self._error_for(error))
            return
        if group.barrier is not None:
            self._finish(group)
            if not group.barrier.done():
                group.barrier.set_result(None)
            return
        outcomes = result if isinstance(result, tuple) else ()
        if len(outcomes) != len(group.futures):
            logger.error("got %d outcomes for a group of %d", len(outcomes), len(group.futures))
            self._settle_error(group, OutcomeUnknown("the replica returned a malformed result"))
            return
        self._finish(group)
        for fut, outcome in zip(group.futures, outcomes, strict=True):
            if not fut.done():
                fut.set_result(outcome)

    def _settle_error(self, group: _Group, exc: ClusterError) -> None:
        if group.settled:
            return
        self._finish(group)
        for fut in group.futures:
            if not fut.done():
                fut.set_exception(exc)
        if group.barrier is not None and not group.barrier.done():
            group.barrier.set_exception(exc)

    def _finish(self, group: _Group) -> None:
        group.settled = True
        if group.checked and self._obj is not None:
            predecoded = self._obj.predecoded
            for data in group.checked:  # applied already (popped), or never will be here
                predecoded.pop(data, None)
        self._in_flight.discard(group)
        self._outstanding -= len(group.futures) if group.barrier is None else 1
        if group.deadline is not None:
            group.deadline.cancel()
        if self._buffer and (
            not self._in_flight or (self._deferred and len(self._in_flight) < self.cfg.group_max_in_flight)
        ):
            # Nothing in flight any more: send what is waiting now rather than at the window's end;
            # or the window ended while the pipeline was full and now there is room.
            self._flush()

    def _error_for(self, error: Any) -> ClusterError:
        if error == FAIL_REASON.QUEUE_FULL:
            return Exhausted("the Raft command queue is full")
        if error in _NOT_APPLIED:
            return NotLeader(_NOT_APPLIED[error], leader=self.leader_address())
        return OutcomeUnknown(f"the command's outcome is unknown (pysyncobj reason {error})")

    # -- reads ------------------------------------------------------------------------------------

    async def read_local(self, fn: Callable[[StateMachine], T]) -> Read[T]:
        """``fn`` on this replica's state as it is now: possibly behind the leader (stale)."""
        obj = self.obj

        def run() -> tuple[T, int]:
            return obj.read(lambda m: (fn(m), obj.raftLastApplied))

        value, applied = await asyncio.get_running_loop().run_in_executor(None, run)
        return Read(value, True, applied)

    async def read_fresh(self, fn: Callable[[StateMachine], T]) -> Read[T]:
        """``fn`` after a barrier entry went through the log: reflects every write committed before."""
        await self.barrier()
        got = await self.read_local(fn)
        return Read(got.value, False, got.applied_index)

    async def read_image(
        self,
        fn: Callable[[StateMachine], T],
        image: Callable[[StateMachine], bytes],
        *,
        fresh: bool = False,
        timing: dict[str, float] | None = None,
    ) -> Read[tuple[T, bytes]]:
        """``fn`` as :meth:`read_local` (or :meth:`read_fresh`), and ``image`` of the very same
        state, for reads that serialize all of it (a digest, an export: seconds at a million edges).

        ``image`` runs in a child forked between two applies (a copy-on-write image of the state,
        as a forked dump is), and the tick thread keeps its GIL share while the child works:
        heartbeats and applies go on. The replica's lock is held for ``fn`` only: the node forks
        right after letting go of it, and the child first checks on its own image that the
        machine's write counter (``WaitgraphSyncObj.writes``) is the one read under the lock, so
        no apply started or ended in between; else (:data:`IMAGE_MOVED`) it exits at once and the
        node forks again, that time under the lock. The fork itself (a few ms for a node of 200
        MB: the page tables) keeps the GIL either way, so it pauses every thread of the node for
        as long; what changes is that an apply no longer waits for the lock while the forking
        thread waits for the GIL. With ``fork_dumps`` off, ``image`` runs here under the lock.
        At most ``MAX_IMAGE_READERS`` run at once per node; a caller that goes away kills its
        child. A failed child is :class:`ReadFailed`.

        ``timing``, when given, gets ``lock_s`` (how long the lock was held, the longest of the
        tries; without ``fork_dumps``, ``fn`` and ``image``), ``fork_s`` (the longest ``os.fork``
        call, in the parent) and ``forks`` (1, or 2 when the state moved; 0 without a fork).
        """
        spent = timing if timing is not None else {}
        spent.update(lock_s=0.0, fork_s=0.0, forks=0)
        if fresh:
            await self.barrier()
        if not self.cfg.fork_dumps:

            def both(m: StateMachine) -> tuple[T, bytes]:
                t0 = time.perf_counter()
                try:
                    return fn(m), image(m)
                finally:
                    spent["lock_s"] = time.perf_counter() - t0

            got = await self.read_local(both)
            return Read(got.value, not fresh, got.applied_index)
        loop = asyncio.get_running_loop()
        obj = self.obj

        def fork(locked: bool) -> tuple[T, int, int, int]:
            r, w = os.pipe()
            try:

                def spawn(m: StateMachine, writes: int) -> int:
                    f0 = time.perf_counter()
                    pid = os.fork()
                    if pid == 0:  # pragma: no cover - the child; coverage does not follow it
                        _image_child(w, image, m, lambda: obj.writes != writes)
                    spent["fork_s"] = max(spent["fork_s"], time.perf_counter() - f0)
                    spent["forks"] += 1
                    return pid

                def under_lock(m: StateMachine) -> tuple[T, int, int, int, StateMachine, float]:
                    t0 = time.perf_counter()
                    value, writes, applied = fn(m), obj.writes, obj.raftLastApplied
                    return value, writes, applied, spawn(m, writes) if locked else 0, m, t0

                value, writes, applied, pid, machine, t0 = obj.read(under_lock)
                spent["lock_s"] = max(spent["lock_s"], time.perf_counter() - t0)
                if not locked:
                    pid = spawn(machine, writes)
            except BaseException:
                os.close(r)
                raise
            finally:
                os.close(w)
            return value, pid, r, applied

        async with self._image_readers:
            for locked in (False, True):
                value, pid, fd, applied = await loop.run_in_executor(None, fork, locked)
                collecting = loop.run_in_executor(None, _collect_image, pid, fd)
                try:
                    data = await asyncio.shield(collecting)
                    break
                except _ImageMoved:
                    if locked:  # pragma: no cover - nothing writes the state while the lock is held
                        raise ReadFailed("the forked reader saw the state move under the lock") from None
                except asyncio.CancelledError:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)  # the collector then reads EOF and reaps it
                    raise
        return Read((value, data), not fresh, applied)

    # -- role and status --------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """pysyncobj's view; an isolated old leader keeps it up to ``leader_fallback_timeout_s``."""
        return self._obj is not None and bool(self._obj._isLeader())

    def leader_address(self) -> str | None:
        if self._obj is None:
            return None
        leader = self._obj._getLeader()
        return None if leader is None else str(getattr(leader, "address", leader))

    def has_quorum(self) -> bool:
        """Leader: a majority (itself included) answered within ``quorum_window_s``.

        Follower: a leader is known and a majority of members are connected (pysyncobj's
        ``hasQuorum``).
        """
        obj = self._obj
        if obj is None:
            return False
        for _ in range(3):
            try:
                members = len(obj.otherNodes) + 1
                if obj._isLeader():
                    others = obj.otherNodes  # pysyncobj keeps the times of removed members too
                    recent = 1 + sum(1 for n in answered_within(obj, self.cfg.quorum_window_s) if n in others)
                    return recent > members / 2
                return obj._getLeader() is not None and bool(obj.hasQuorum)
            except RuntimeError:  # a set or dict changed size under us (tick thread); try again
                continue
        return False

    def status(self) -> RaftStatus:
        obj = self.obj
        st: dict[str, Any] = {}
        for _ in range(3):
            try:
                st = obj.getStatus()
                break
            except RuntimeError:  # a dict changed size under us (tick thread); try again
                continue
        leader = st.get("leader")
        refusals = getattr(obj._SyncObj__transport, "refusals", None)  # a test's fake transport has none
        connected = {
            node.address: bool(obj.isNodeConnected(node)) for node in sorted(obj.otherNodes, key=lambda n: n.address)
        }
        return RaftStatus(
            address=self.cfg.raft_address,
            role=_ROLES.get(st.get("state", -1), "unknown"),
            leader=None if leader is None else str(getattr(leader, "address", leader)),
            term=int(st.get("raft_term", 0)),
            commit_index=int(st.get("commit_idx", 0)),
            applied_index=int(st.get("last_applied", 0)),
            log_len=int(st.get("log_len", 0)),
            has_quorum=self.has_quorum(),
            ready=self._ready.is_set(),
            outstanding=self._outstanding,
            peers_connected=connected,
            counters=dict(obj.counters),
            refused={} if refusals is None else refusals.snapshot(),
            durable=self.cfg.fsync,
            members=tuple(self.members()),
            membership_pending=obj.pending_membership(),
        )

    # -- membership (module docstring, "Membership") ----------------------------------------------

    def members(self) -> list[Member]:
        """Every member, this node included, sorted by node id."""
        found = [Member(node_id, address, grpc) for address, node_id, grpc in self.obj.members_now()]
        return sorted(found, key=lambda m: (m.node_id, m.raft_address))

    def member_named(self, name: str) -> Member | None:
        """The member whose node id (or Raft address) is ``name``."""
        return next((m for m in self.members() if name in (m.node_id, m.raft_address)), None)

    def membership_busy(self) -> bool:
        """A change is being made through :meth:`change_membership` on this node right now."""
        return self._membership_lock.locked()

    async def change_membership(
        self,
        kind: str,
        node_id: str,
        raft_address: str = "",
        grpc_address: str = "",
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> list[Member]:
        """Add (``kind="add"``) or remove (``"rem"``) one member, on the leader; return the new members.

        ``before`` runs once every guard passed and just before the change is proposed (the
        guards run again then, on the tick thread, with the append). Raises
        :class:`MembershipRefused` (a guard refused; nothing was proposed), :class:`NotLeader`
        or :class:`OutcomeUnknown` (proposed; ``members()`` shows whether it committed)."""
        obj = self.obj
        loop = asyncio.get_running_loop()
        async with self._membership_lock:
            if kind == "add":
                # pysyncobj issue #89: never add an address before a member is known to listen there.
                codec = obj._SyncObj__encryptor
                problem = await loop.run_in_executor(None, probe_member, raft_address, codec, self.cfg.probe_timeout_s)
                if problem is not None:
                    obj.counters["membership_refused"] += 1
                    raise MembershipRefused(
                        "not_listening",
                        f"{problem}: start the new node first (it binds its Raft port), then add it",
                        address=raft_address,
                    )
            else:
                member = self.member_named(node_id)
                if member is None:
                    obj.counters["membership_refused"] += 1
                    raise MembershipRefused("not_member", f"{node_id} is not a member", node_id=node_id)
                raft_address = member.raft_address
            done: asyncio.Future[Any] = loop.create_future()

            def settle(error: Any) -> None:
                if not done.done():
                    done.set_result(error)

            def callback(result: Any, error: Any) -> None:
                with contextlib.suppress(Exception):  # the tick thread: never raise here
                    loop.call_soon_threadsafe(settle, error)

            def check() -> None:
                obj.propose_membership_change(kind, raft_address, node_id, grpc_address, None)

            def propose() -> None:
                obj.propose_membership_change(kind, raft_address, node_id, grpc_address, callback)

            await asyncio.wrap_future(obj.call_on_tick(check))
            if before is not None:
                await before()
            await asyncio.wrap_future(obj.call_on_tick(propose))
            try:
                error = await asyncio.wait_for(done, self.cfg.submit_timeout_s)
            except TimeoutError:
                raise OutcomeUnknown(
                    f"the membership change did not commit within {self.cfg.submit_timeout_s}s; "
                    "`waitgraph member list` shows whether it took effect"
                ) from None
            if error == FAIL_REASON.REQUEST_DENIED:
                raise MembershipRefused("change_pending", "the leader refused the change: another one is pending")
            if error != FAIL_REASON.SUCCESS:
                raise self._error_for(error)
            return self.members()

    def force_compaction(self) -> None:
        """Ask pysyncobj to write a full dump and cut the log at its next tick (tests, operators)."""
        self.obj.forceLogCompaction()
