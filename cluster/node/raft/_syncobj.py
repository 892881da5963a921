"""The SyncObj: :class:`WaitgraphSyncObj`, one class assembled from one mixin per concern.

One node = one :class:`~waitgraph.node.raft._node.RaftNode` (asyncio facade) over one
:class:`WaitgraphSyncObj`, driven by pysyncobj's own tick thread. The concerns, each in its module
with its rules and the pysyncobj names it touches:

- ``_apply.py``: the one replicated method, which never raises;
- ``_acks.py``: durability and held (or skipped, when repeated) acknowledgments;
- ``_liveness.py``: keepalive, elections, tick stalls;
- ``_guard.py``: the truncation guard;
- ``_membership.py``: the guarded membership changes;
- ``_compaction.py``: log compaction and full dumps (``_fork.py``: the forked writer);
- ``_relay.py``: messages to the leader outside the log (the session heartbeats a follower relays);
- ``_transport.py``: the Raft wire (:class:`~waitgraph.node.raft._transport.EncryptorHook` puts its
  codec in place of pysyncobj's Fernet); ``_unpickler.py``: the restricted unpickler, installed when
  this module is imported, before any SyncObj is built.

Why mixins over one ``SyncObj`` subclass: pysyncobj calls its private methods as ``self.__x``, which
Python looks up as ``self._SyncObj__x``, so an attribute of that name anywhere in the class's MRO
replaces it everywhere, including the handlers ``SyncObj.__init__`` registers with the transport
before the tick thread starts. Each name is overridden in exactly one mixin, and each override calls
the original through ``super()`` (the next class in the MRO, in the end ``SyncObj``).

**One replicated method.** ``SyncObj.__init__`` enumerates ``dir(self)`` for ``@replicated`` methods
and numbers them by sorted name; the log stores the number. The class keeps exactly one,
``ApplyMixin.apply_commands`` (``_apply.py``): a second one would renumber the log. ``dir(self)``
also calls ``getattr`` on every attribute: no mixin defines a property.

This module itself: the attributes every concern keeps (set before ``SyncObj.__init__``, because
the tick thread starts inside it), the tick (``_onTick``: flush, run the calls queued for the tick
thread, keepalive, read before standing, then pysyncobj's tick), and ``_SyncObj__onMessageReceived``
(notes whether the message carried entries, for ``_acks.py``, then the guard of ``_guard.py``).
pysyncobj names here: ``_onTick``, ``_SyncObj__onMessageReceived`` and ``_SyncObj__encryptor``
(overridden), ``_SyncObj__pipeNotifier`` (woken by :meth:`WaitgraphSyncObj.call_on_tick`),
``SyncObjConf.serializer``/``deserializer``/``serializeChecker`` (set). Checklist: ``_pysyncobj.py``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from waitgraph.node.raft import _unpickler
from waitgraph.node.raft._acks import DurabilityMixin
from waitgraph.node.raft._apply import ApplyMixin
from waitgraph.node.raft._compaction import CompactionMixin
from waitgraph.node.raft._guard import GuardMixin
from waitgraph.node.raft._liveness import LivenessMixin
from waitgraph.node.raft._membership import MembershipMixin
from waitgraph.node.raft._pysyncobj import SERIALIZER_STATE, SyncObjConf
from waitgraph.node.raft._relay import RELAY, RelayMixin
from waitgraph.node.raft._transport import EncryptorHook, WaitgraphTransport
from waitgraph.statemachine import StateMachine
from waitgraph.statemachine.codec import CheckedEnvelope

_unpickler.install()

logger = logging.getLogger("waitgraph.node.raft")

T = TypeVar("T")


def _exit_process(reason: str) -> None:
    logger.critical("stopping the node: %s", reason)
    logging.shutdown()
    os._exit(70)


class WaitgraphSyncObj(
    ApplyMixin, DurabilityMixin, LivenessMixin, GuardMixin, MembershipMixin, CompactionMixin, RelayMixin
):
    """The SyncObj: one replicated method, msgpack dumps, the truncation guard (module docstring).

    Attributes are set before ``SyncObj.__init__`` because the tick thread starts inside it.
    Everything here except :meth:`read` and :meth:`call_on_tick` runs on the tick thread.
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
        self._tick_flush_s = 0.0
        self._tick_apply_s = 0.0
        self._tick_lock_wait_s = 0.0
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

    # pysyncobj builds a Fernet here; the wire codec takes its place (``_transport.py``).
    _SyncObj__encryptor: Any = EncryptorHook()

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        if self._note_member(node, message):
            return  # a hello: the sender's features (``_relay.py``)
        if type(message) is dict and message.get("type") == RELAY:
            self._relay_received(message)  # heartbeats relayed to the leader (``_relay.py``)
            return
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

    def _onTick(self, timeToWait: float = 0.0) -> None:
        started = time.monotonic()
        self._note_tick(started)
        if self._fsync:
            self.sync_journal()
        self._run_tick_calls()
        self._keep_connections_alive(started)
        self.say_hello(started)
        self._read_before_standing()
        super()._onTick(timeToWait)

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
