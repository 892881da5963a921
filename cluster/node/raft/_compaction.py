"""Log compaction and full dumps: canonical msgpack, never pickle; written in a forked child, in turns.

**Snapshots are canonical msgpack, never pickle.** ``SyncObjConf(serializer=, deserializer=)``
replaces pysyncobj's full dump (which pickles ``self.__dict__`` and the cluster's ``Node``
objects, ``__tryLogCompaction``/``serializer.Serializer.serialize``). Ours writes
``{"format": "waitgraph-raft-dump", "v": 1, "state": StateMachine.snapshot(), "last": entry,
"prev": entry, "cluster": [addresses]}``, framed with a version and a CRC-32
(``_journal.py``, dump format 2; format 1, the bare document, is still read), fsynced;
pysyncobj renames it into place
(``atomicReplace``) and streams the same file to a follower that is too far behind
(``getTransmissionData``/``setTransmissionData``, then ``__loadDumpFile(clearJournal=True)``).
Restore replaces the whole state. A custom serializer also turns off pysyncobj's own ``fork``
for dumps; ours forks by itself (``RaftConfig.fork_dumps``, see "Log compaction" below), or
else takes the dump on the tick thread between two applies (a consistent cut), and the tick
thread (heartbeats included) pauses for as long as ``snapshot()`` takes. A
dump that cannot be read is fatal (the node exits loudly): pysyncobj would log it and go on
applying the journal to an empty state. The journal is not pysyncobj's ``FileJournal`` (an mmap
whose records have no checksum) but :class:`~waitgraph.node.raft._journal.ChecksummedJournal` at
``raft.wal``: every record under a CRC-32, a torn tail truncated at start-up and damage before it
refused (``_journal.py``).

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

pysyncobj names overridden here: ``_SyncObj__tryLogCompaction``; hooks set on the conf:
``serializer``/``deserializer`` (:meth:`CompactionMixin._write_dump`, :meth:`CompactionMixin._read_dump`)
and ``serializeChecker`` (:meth:`CompactionMixin._dump_state`, with ``SERIALIZER_STATE``); read and
written: ``_SyncObj__conf`` (``logCompactionMinEntries``, ``logCompactionMinTime``, ``logCompactionSplit``,
``fullDumpFile``); read: ``_SyncObj__forceLogCompaction``, ``_SyncObj__raftLog``, ``raftLastApplied``,
``selfNode``, ``_isLeader``. Checklist: ``_pysyncobj.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from waitgraph.node.collector import restore_frozen
from waitgraph.node.raft._fork import dump_child, write_dump_file
from waitgraph.node.raft._journal import open_dump
from waitgraph.node.raft._pysyncobj import SERIALIZER_STATE, SyncObj
from waitgraph.statemachine import StateMachine

logger = logging.getLogger("waitgraph.node.raft")

DUMP_FORMAT = "waitgraph-raft-dump"
DUMP_VERSION = 1
DUMP_RETRY_S = 5.0
"""After a forked dump failed, the next one (unless forced) waits this long."""
LEADER_COMPACTION_FACTOR = 4
"""A leader compacts only once its log is this many times ``logCompactionMinEntries`` long."""
_NEVER = 2**62


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


class CompactionMixin(SyncObj):  # type: ignore[misc]
    """Compaction and dumps of :class:`~waitgraph.node.raft._syncobj.WaitgraphSyncObj` (module docstring);
    pysyncobj calls all of this on the tick thread."""

    directory: dict[str, tuple[str, str]]
    counters: dict[str, int]
    writes: int
    _fsync: bool
    _machine: StateMachine
    _machine_lock: threading.Lock
    _on_fatal: Callable[[str], None]
    _on_restored: Callable[[], None] | None
    _dump_unsynced: bool
    _fork_dumps: bool
    _dump_child_pid: int | None
    _dump_paths: tuple[str, str, str]
    _dump_started_at: float
    _dump_status: Any
    _dump_paused: bool
    _dump_retry_at: float
    _compaction_min_entries: int
    _compaction_min_time_s: float
    _compaction_rank: int
    _compaction_members: int
    _last_dump_at: float

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
        write_dump_file(file_name, head, state)
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
            dump_child(f"{final}.next.{os.getpid()}", head, self._machine)
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
            restore_frozen(fresh, doc["state"])
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
