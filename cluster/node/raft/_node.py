"""The asyncio facade: :class:`RaftNode`, and the values it hands out (:class:`RaftStatus`,
:class:`Member`, :class:`Read`).

Rules: nothing here blocks the event loop (proposing is a queue put and a pipe write, reads run in
the default executor); a callback from the tick thread only hands its result to the loop
(``call_soon_threadsafe``) and never raises (pysyncobj would apply the entry again); the node builds
its SyncObj on the loop's thread, because pysyncobj stops its tick thread when the thread that built
it exits. Group commit and backpressure: :class:`RaftNode`.

pysyncobj names: ``FAIL_REASON`` (the callbacks' error codes); on the SyncObj: ``getStatus``,
``isNodeConnected``, ``hasQuorum``, ``otherNodes``, ``raftCurrentTerm``, ``raftLastApplied``,
``_isLeader``, ``_getLeader``, ``forceLogCompaction``, ``destroy_synchronous``,
``_SyncObj__transport`` (its refusal counts), ``_SyncObj__encryptor`` (the wire codec, for the probe of
a new member), and ``apply_commands(..., callback=)`` (pysyncobj's ``@replicated`` calling convention).
Checklist: ``_pysyncobj.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from waitgraph.node.errors import (
    ClusterError,
    Exhausted,
    MembershipRefused,
    NotLeader,
    OutcomeUnknown,
    ReadFailed,
    Stopped,
)
from waitgraph.node.raft._apply import encode_batch
from waitgraph.node.raft._config import RaftConfig, build_conf
from waitgraph.node.raft._fork import ImageMoved, collect_image, image_child
from waitgraph.node.raft._liveness import answered_within
from waitgraph.node.raft._pysyncobj import FAIL_REASON
from waitgraph.node.raft._syncobj import WaitgraphSyncObj
from waitgraph.node.raft._transport import probe_member
from waitgraph.statemachine import Outcome, StateMachine
from waitgraph.statemachine.codec import MAX_PAYLOAD_BYTES, CheckedEnvelope
from waitgraph.statemachine.errors import Rejection, Status
from waitgraph.statemachine.outcome import rejected

logger = logging.getLogger("waitgraph.node.raft")

T = TypeVar("T")

_ROLES = {0: "follower", 1: "candidate", 2: "leader"}

MAX_IMAGE_READERS = 2
"""Forked whole-state readers (:meth:`RaftNode.read_image`) one node runs at once."""


@dataclass(frozen=True, slots=True)
class RaftStatus:
    """The node's Raft view as a plain value (pysyncobj's ``getStatus()`` plus our own counters; no
    pysyncobj object in it). Values can be one tick old."""

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
    """Connections closed on the Raft port, by reason (``_transport.REFUSAL_REASONS``)."""
    durable: bool
    """Whether every acknowledgment waits for the journal to be on disk (``RaftConfig.fsync``)."""
    members: tuple[Member, ...] = ()
    """Every member, this node included, as this replica has it (``_membership.py``)."""
    membership_pending: int | None = None
    """The log index of a membership change not committed yet."""


@dataclass(frozen=True, slots=True)
class Member:
    """One member of the cluster, as this replica has it."""

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
        self._relay_handler: Callable[[list[str]], None] | None = None

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
        self._obj._on_relay = self._relay_handler

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

    def _running(self) -> WaitgraphSyncObj:
        """The SyncObj; :class:`~waitgraph.node.errors.Stopped` when the node is not running. Private:
        nothing outside this package reaches pysyncobj (scripts/check_layers.py)."""
        if self._obj is None:
            raise Stopped("the node is not running")
        return self._obj

    def current_term(self) -> int:
        """The Raft term this replica is in (read without a lock: cheap enough for every log line)."""
        return int(self._running().raftCurrentTerm)

    def applied_index(self) -> int:
        """The log index this replica has applied up to (read without a lock)."""
        return int(self._running().raftLastApplied)

    def read_blocking(self, fn: Callable[[StateMachine], T]) -> T:
        """``fn`` on this replica's state between two applies, on the calling thread (it blocks while
        an apply runs: never call it on the event loop; :meth:`read_local` is the loop's way)."""
        return self._running().read(fn)

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
            self._running().apply_commands(payload, callback=callback)
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
        obj = self._running()

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
        obj = self._running()

        def fork(locked: bool) -> tuple[T, int, int, int]:
            r, w = os.pipe()
            try:

                def spawn(m: StateMachine, writes: int) -> int:
                    f0 = time.perf_counter()
                    pid = os.fork()
                    if pid == 0:  # pragma: no cover - the child; coverage does not follow it
                        image_child(w, image, m, lambda: obj.writes != writes)
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
                collecting = loop.run_in_executor(None, collect_image, pid, fd)
                try:
                    data = await asyncio.shield(collecting)
                    break
                except ImageMoved:
                    if locked:  # pragma: no cover - nothing writes the state while the lock is held
                        raise ReadFailed("the forked reader saw the state move under the lock") from None
                except asyncio.CancelledError:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)  # the collector then reads EOF and reaps it
                    raise
        return Read((value, data), not fresh, applied)

    # -- relay: to the leader, outside the log ------------------------------------------------------

    def on_relay(self, handler: Callable[[list[str]], None]) -> None:
        """``handler`` gets the agent ids a follower relays while this node leads (on the tick
        thread; it must not block): the session heartbeats of cluster/node/lessor.py."""
        self._relay_handler = handler
        if self._obj is not None:
            self._obj._on_relay = handler

    def relay_to_leader(self, agents: list[str]) -> None:
        """Send agent ids to the leader in one message, not through the log (``_relay.py``); dropped
        without a leader or on the leader itself. Any thread; never waits."""
        obj = self._obj
        if obj is not None and agents:
            obj.call_on_tick(lambda: obj.relay_to_leader(agents))

    def member_features(self) -> dict[str, int | None]:
        """Every other member's announced features (``_relay.py``): its bits, 0 for a release from
        before the hellos, None while unknown. Any thread."""
        obj = self._obj
        return {} if obj is None else obj.member_features(time.monotonic())

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
        obj = self._running()
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

    # -- membership (``_membership.py``) ----------------------------------------------

    def members(self) -> list[Member]:
        """Every member, this node included, sorted by node id."""
        found = [Member(node_id, address, grpc) for address, node_id, grpc in self._running().members_now()]
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
        obj = self._running()
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
        self._running().forceLogCompaction()
