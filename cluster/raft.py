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
"prev": entry, "cluster": [addresses]}``, fsynced; pysyncobj renames it into place
(``atomicReplace``) and streams the same file to a follower that is too far behind
(``getTransmissionData``/``setTransmissionData``, then ``__loadDumpFile(clearJournal=True)``).
Restore replaces the whole state. A custom serializer also turns off pysyncobj's ``fork`` for
dumps, so the dump is taken on the tick thread between two applies (a consistent cut); the price
is that the tick thread (heartbeats included) pauses for as long as ``snapshot()`` takes, so a
very large state needs election timeouts above that time. A dump that cannot be read is fatal
(the node exits loudly): pysyncobj would log it and go on applying the journal to an empty state.
The journal itself is pysyncobj's ``FileJournal``: an mmap written on every append, never fsynced
while running (it survives a killed process, not a power cut).

**Configuration** (:func:`build_conf`): ``journalFile`` *and* ``fullDumpFile`` in the data
directory (a journal without a dump loses the state after compaction), ``password`` (without it
anyone reaching the Raft port can make every node unpickle arbitrary data: run code), tuned
timers (``leaderFallbackTimeout`` 1.5 s instead of 30 s, ``connectionRetryTime`` 0.5 s instead of
5 s, ``appendEntriesUseBatch=False``: about 0.5 ms instead of ~100 ms per write at the leader),
``dynamicMembershipChange`` off, bound to the given Raft address, ``commandsWaitLeader=False``
(without a leader a command fails at once as :class:`~cluster.errors.NotLeader`, instead of
waiting in a queue and being proposed after its caller gave up), and
``appendEntriesBatchSizeBytes`` far above the largest entry we propose, so pysyncobj's
"transmission" path for big entries (whose ``finish`` test compares the pickled entry's offset with
the *unpickled* command length, so it can send ``finish`` early) is never taken.

**Restricted unpickling** (``cluster/safe_pickle.py``), installed when this module is imported.

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

**asyncio bridge, group commit, backpressure** (:class:`RaftNode`): see there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgpack
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.config import FAIL_REASON
from pysyncobj.syncobj import SyncObjExceptionWrongVer
from pysyncobj.transport import TCPTransport

from statemachine import Outcome, StateMachine
from statemachine.codec import MAX_PAYLOAD_BYTES
from statemachine.errors import InvariantViolation, Rejection, Status
from statemachine.outcome import rejected

from . import safe_pickle
from .errors import ClusterError, Exhausted, NotLeader, OutcomeUnknown, Stopped

safe_pickle.install()

logger = logging.getLogger("waitgraph.cluster.raft")

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
    """The cluster secret: pysyncobj encrypts every Raft message with a key derived from it."""
    max_outstanding: int = 10_000
    """Envelopes accepted by :meth:`RaftNode.submit` and not yet answered; beyond it: Exhausted."""
    group_max_items: int = 256
    group_max_bytes: int = 256 * 1024
    group_window_s: float = 0.001
    """How long a new envelope may wait for others while a group is already in flight."""
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

    def __post_init__(self) -> None:
        if not self.password:
            raise ValueError("a cluster password is required: without it the Raft port runs anyone's code")
        if self.group_max_bytes > APPEND_ENTRIES_BATCH_BYTES // 8:
            raise ValueError("group_max_bytes must stay far below the append_entries batch size")
        if self.max_outstanding < 1 or self.group_max_items < 1:
            raise ValueError("max_outstanding and group_max_items must be positive")

    @property
    def journal_file(self) -> Path:
        return self.data_dir / "raft.journal"

    @property
    def dump_file(self) -> Path:
        return self.data_dir / "raft.dump"


def build_conf(cfg: RaftConfig, **overrides: Any) -> SyncObjConf:
    """The SyncObjConf every node runs with (``overrides`` are for tests and the benchmark)."""
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = dict(
        password=cfg.password,
        journalFile=str(cfg.journal_file),
        fullDumpFile=str(cfg.dump_file),
        bindAddress=cfg.raft_address,
        appendEntriesUseBatch=False,
        appendEntriesPeriod=cfg.append_entries_period_s,
        appendEntriesBatchSizeBytes=APPEND_ENTRIES_BATCH_BYTES,
        raftMinTimeout=cfg.raft_min_timeout_s,
        raftMaxTimeout=cfg.raft_max_timeout_s,
        leaderFallbackTimeout=cfg.leader_fallback_timeout_s,
        connectionTimeout=cfg.connection_timeout_s,
        connectionRetryTime=cfg.connection_retry_s,
        commandsQueueSize=cfg.max_outstanding,
        commandsWaitLeader=False,
        dynamicMembershipChange=False,
        logCompactionMinEntries=cfg.log_compaction_min_entries,
        logCompactionMinTime=cfg.log_compaction_min_time_s,
    )
    kwargs.update(overrides)
    return SyncObjConf(**kwargs)


# -- the replicated object (runs on pysyncobj's tick thread) ---------------------------------------


def _internal(message: str) -> Outcome:
    return rejected(Rejection(Status.INTERNAL, "internal_error", message))


def _exit_process(reason: str) -> None:
    logger.critical("stopping the node: %s", reason)
    logging.shutdown()
    os._exit(70)


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
        transport_class: type = TCPTransport,
        on_fatal: Callable[[str], None] = _exit_process,
        on_restored: Callable[[], None] | None = None,
    ) -> None:
        self._machine = machine
        self._machine_lock = threading.Lock()
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
        }
        conf.serializer = self._write_dump
        conf.deserializer = self._read_dump
        super().__init__(self_address, peers, conf, transportClass=transport_class)

    # -- overrides of two private pysyncobj methods ----------------------------------------------
    # ``self.__x`` inside SyncObj is looked up as ``self._SyncObj__x``, so a subclass attribute of
    # that name replaces it everywhere, including the handler ``SyncObj.__init__`` registers with
    # the transport before the tick thread starts. Both wrap the original and change nothing else.

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        self._guard_message(super()._SyncObj__onMessageReceived, node, message)

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

    # The one replicated method. ``*args, **kwargs`` so that no argument list, however crafted,
    # makes the call itself raise a TypeError before the body's try.
    @replicated  # type: ignore[untyped-decorator]
    def apply_commands(self, payload: Any = None, *args: Any, **kwargs: Any) -> tuple[Outcome, ...]:
        try:
            with self._machine_lock:
                outcomes = self._apply_payload(payload)
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
        with self._machine_lock:
            state = self._machine.snapshot()
        doc = {
            "cluster": sorted(str(getattr(node, "address", node)) for node in cluster),
            "format": DUMP_FORMAT,
            "last": [bytes(last[0]), int(last[1]), int(last[2])],
            "prev": [bytes(prev[0]), int(prev[1]), int(prev[2])],
            "state": state,
            "v": DUMP_VERSION,
        }
        with open(file_name, "wb") as f:
            f.write(msgpack.packb(doc, use_bin_type=True))
            f.flush()
            os.fsync(f.fileno())
        self.counters["dumps_written"] += 1

    def _read_dump(self, file_name: str) -> tuple[Any, ...]:
        try:
            with open(file_name, "rb") as f:
                doc = msgpack.unpackb(f.read(), raw=False)
            if type(doc) is not dict or doc.get("format") != DUMP_FORMAT or doc.get("v") != DUMP_VERSION:
                raise ValueError(f"{file_name} is not a {DUMP_FORMAT} v{DUMP_VERSION}")
            last = (bytes(doc["last"][0]), int(doc["last"][1]), int(doc["last"][2]))
            prev = (bytes(doc["prev"][0]), int(doc["prev"][1]), int(doc["prev"][2]))
            cluster = [str(a) for a in doc["cluster"]]
            fresh = StateMachine()
            fresh.restore(doc["state"])
        except Exception as exc:
            # pysyncobj would log this and carry on applying the journal to the old (or empty)
            # state, which diverges from every other replica: stop instead.
            self._on_fatal(f"cannot load the full dump {file_name}: {exc!r}")
            raise
        with self._machine_lock:
            self._machine.state = fresh.state
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


@dataclass(frozen=True, slots=True)
class Read(Generic[T]):
    """A value read from the local replica; ``stale`` unless it was read after a log barrier."""

    value: T
    stale: bool
    applied_index: int


@dataclass(slots=True, eq=False)
class _Group:
    futures: list[asyncio.Future[Outcome]]
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
    - **Group commit.** Envelopes submitted while the node has no group in flight leave at the
      next loop iteration (no added latency; everything submitted in the same iteration goes
      together). While a group is in flight, new envelopes wait up to ``group_window_s`` or until
      ``group_max_items`` / ``group_max_bytes``, then go as one log entry; each caller gets its
      own Outcome, in order.
    - **Backpressure.** At most ``max_outstanding`` envelopes (and barriers) are between
      :meth:`submit` and their answer; one more raises :class:`~cluster.errors.Exhausted` at
      once. pysyncobj's queue is bounded by the same number.
    - **Not leader.** A follower forwards commands to the leader (``_checkCommandsToApply``
      sends ``apply_command``; the leader answers with the log index and the follower's
      callback fires when it applies that index), so :meth:`submit` works on any member.
      Without a leader it raises :class:`~cluster.errors.NotLeader` (not applied); a result
      that does not arrive within ``submit_timeout_s``, a leader change while forwarding, or a
      snapshot installed over a pending entry raises :class:`~cluster.errors.OutcomeUnknown`
      (retry with the same request id).
    """

    def __init__(self, cfg: RaftConfig, *, machine: StateMachine | None = None, **conf_overrides: Any) -> None:
        self.cfg = cfg
        self._machine = machine if machine is not None else StateMachine()
        self._conf_overrides = conf_overrides
        self._obj: WaitgraphSyncObj | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outstanding = 0
        self._buffer: list[tuple[bytes, asyncio.Future[Outcome]]] = []
        self._buffer_bytes = 0
        self._flush_handle: asyncio.Handle | asyncio.TimerHandle | None = None
        self._in_flight: set[_Group] = set()
        self._ready = threading.Event()
        self._stopped = False

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
            self.cfg.raft_address, peers, conf, self._machine, on_restored=self._on_restored_threadsafe
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
        buffered, self._buffer, self._buffer_bytes = self._buffer, [], 0
        for _, fut in buffered:  # never proposed
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

    async def submit(self, envelope: bytes) -> Outcome:
        """Replicate one encoded Envelope and return its Outcome as applied by this replica.

        Raises :class:`~cluster.errors.Exhausted`, :class:`~cluster.errors.NotLeader` (not applied)
        or :class:`~cluster.errors.OutcomeUnknown` (maybe applied: retry with the same request id).
        """
        if not isinstance(envelope, bytes):
            raise TypeError("envelope must be bytes")
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
        self._buffer.append((envelope, fut))
        self._buffer_bytes += len(envelope)
        if len(self._buffer) >= self.cfg.group_max_items or self._buffer_bytes >= self.cfg.group_max_bytes:
            self._flush()
        elif self._flush_handle is None:
            if self._in_flight:
                self._flush_handle = loop.call_later(self.cfg.group_window_s, self._flush)
            else:
                self._flush_handle = loop.call_soon(self._flush)
        return await fut

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

    def _flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if not self._buffer:
            return
        buffered, self._buffer, self._buffer_bytes = self._buffer, [], 0
        items = [env for env, _ in buffered]
        payload = items[0] if len(items) == 1 else encode_batch(items)
        self._propose(_Group(futures=[fut for _, fut in buffered]), payload)

    def _propose(self, group: _Group, payload: bytes) -> None:
        loop = self._loop
        assert loop is not None
        self._in_flight.add(group)
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
        self._in_flight.discard(group)
        self._outstanding -= len(group.futures) if group.barrier is None else 1
        if group.deadline is not None:
            group.deadline.cancel()
        if self._buffer and not self._in_flight and self._flush_handle is not None:
            # Nothing in flight any more: send what is waiting now rather than at the window's end.
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
                    horizon = time.monotonic() - self.cfg.quorum_window_s
                    answered = obj._SyncObj__lastResponseTime.copy()
                    recent = 1 + sum(1 for t in answered.values() if t > horizon)
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
        )

    def force_compaction(self) -> None:
        """Ask pysyncobj to write a full dump and cut the log at its next tick (tests, operators)."""
        self.obj.forceLogCompaction()
