"""Durability and held acknowledgments: nothing is acknowledged before it is on disk.

**Durability** (``RaftConfig.fsync``, on by default; ``waitgraph serve --no-fsync`` turns it off for
tests and benchmarks, and says so in ``waitgraph status``). pysyncobj never flushes
its journal, and a follower answers ``append_entries`` (``__sendNextNodeIdx(success=True)``) and a
leader counts its own copy towards a majority (the commit loop in ``_onTick`` starts at ``count =
1``) as soon as the entry is written: an acknowledged write survives a killed process (the page
cache keeps it) but not a power cut. With ``fsync`` on, three small overrides make every
acknowledgment wait for the disk, one flush per tick covering everything appended in it:

- the journal (set in place of pysyncobj's by a set-only descriptor on ``_SyncObj__raftLog``,
  which sees the one assignment in ``SyncObj.__init__``) marks itself dirty on every change;
  :meth:`~waitgraph.node.raft._journal.ChecksummedJournal.sync` is one ``fdatasync``, and its ``.meta``
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

pysyncobj names overridden here: ``_SyncObj__raftLog`` (a set-only descriptor, :class:`JournalHook`),
``_SyncObj__sendNextNodeIdx``, ``_checkCommandsToApply``, ``_SyncObj__onBecomeLeader``; read:
``_SyncObj__conf`` (``fullDumpFile``), ``_SyncObj__getCurrentLogIndex``, ``raftCurrentTerm``; the journal
must keep pysyncobj's ``Journal`` interface (``_journal.py``). Checklist: ``_pysyncobj.py``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from waitgraph.node.raft._journal import ChecksummedJournal, fsync_directory, migrate_legacy_journal
from waitgraph.node.raft._pysyncobj import MemoryJournal, SyncObj

REPEATED_ACK_S = 0.05
"""A follower repeats an identical acknowledgment of an entry-less message at most this often
(module docstring, "Repeated acknowledgments"); heartbeats are ``append_entries_period_s`` apart."""


class JournalHook:
    """Set-only descriptor for ``_SyncObj__raftLog``: sees the one assignment in ``SyncObj.__init__``.

    :func:`build_conf` gives pysyncobj no journal file, so it builds a ``MemoryJournal``; here it
    is replaced by the :class:`~waitgraph.node.raft._journal.ChecksummedJournal` at the configured path
    (after migrating the previous release's journal once), before pysyncobj reads the term, the
    vote and the log from it. It has no ``__get__``, so reads find the instance's own attribute at
    full speed.
    """

    def __set__(self, obj: Any, journal: Any) -> None:
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


class DurabilityMixin(SyncObj):  # type: ignore[misc]
    """The durability overrides of :class:`~waitgraph.node.raft._syncobj.WaitgraphSyncObj` (module docstring),
    inert with ``fsync`` off (``--no-fsync``) except that repeated acknowledgments are still skipped."""

    _fsync: bool
    _held_replies: list[tuple[Any, bool, int, bool]]
    _answering_entryless: bool
    _last_ack: dict[Any, tuple[int, int, float]]
    _dump_unsynced: bool
    _tick_flush_s: float
    counters: dict[str, int]

    _SyncObj__raftLog: Any = JournalHook()

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

    def sync_journal(self) -> None:
        """Flush what was appended since the last call, then send the replies that waited for it.

        Tick thread only (or before the tick thread starts). A failing flush is fatal: the node
        cannot promise durability any more, and holding replies forever would only hide it.
        """
        journal = self._SyncObj__raftLog
        started = time.monotonic()
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
        finally:
            self._tick_flush_s += time.monotonic() - started
        held, self._held_replies = self._held_replies, []
        for node, reset, next_index, success in held:
            super()._SyncObj__sendNextNodeIdx(node, reset, next_index, success)
