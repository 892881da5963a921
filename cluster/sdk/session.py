"""Sessions, executions, waits, holdings and delegations: the agent side of the wait graph.

Rules kept here:
- A wait is registered *before* the caller blocks (``async with s.waiting_for(...)`` returns only
  once the edge is in the replicated graph) and closed on every way out of the block: normal
  exit, exception, cancellation. The one exception is the local threshold: a session may keep a
  short wait local and register it once it has lasted ``local_wait_threshold_s``, but never when
  the execution holds a lease or a pool permit (a scarce resource), which registers at once.
- The session's events (its agent's, from the client's one stream: :mod:`waitgraph.sdk._mux`) are
  the only source of wake-ups: ``WaitClosed`` resolves a wait,
  a recovery decision that rolls an execution back cancels the tasks blocked in its waits and
  raises :class:`~.errors.DeadlockVictim` in them, a cancel request raises
  :class:`~.errors.CancellationRequested`. Every handle is registered under its edge id before
  the request is sent, because the event may arrive before the reply.
- The session tracks the latest epoch and each run's cancel generation it has observed (from its
  events) and sends them with every call that is fenced by them: ``observed_epoch`` on Acquire,
  ``observed_cancel_generation`` on create, start, complete, claim, renew and tool calls. It never
  adopts a newer value from a rejection: the fence is there to make the caller *see* the rollback.
- Every write goes through :meth:`Client.submit`: one request id per call, the same for all its
  retries, so a retry after a failover never applies a command twice.
- A session the cluster no longer holds for this process (its lease expired, another process of
  the agent left or replaced it) is *lost*: every task blocked on it gets
  :class:`~.errors.SessionLost`, ``on_lost`` is called, and every later call raises it, until
  :meth:`Session.rejoin`. A lost session never sends LeaveSession: the agent's session may be
  another process's by then.
- Targets that need nothing but their id are created on first use: ``holding`` a resource or
  reservation, waiting on an artifact or approval nobody has declared yet (its satisfier is
  unknown until the producer declares it, so the wait is not part of any cycle until then).
  A pool needs its size: that refusal names :meth:`Session.ensure_target`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import ContextVar, Token
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

import grpc

from waitgraph.statemachine import commands as C
from waitgraph.statemachine.effects import (
    Acquired,
    CancelRequested,
    Effect,
    ExecutionCreated,
    ExecutionStateChanged,
    GenerationAdvanced,
    RecoveryProposed,
    SessionEnded,
    SessionJoined,
    SessionRenewed,
    VictimChosen,
    WaitClosed,
    WaitRegistered,
    Yielded,
)
from waitgraph.statemachine.enums import CancelMode, EffectOutcome, ExecStatus
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.recovery_state import DecisionKind, RolloutMode

from ._liveness import Liveness, SessionState
from ._mux import Watch
from .connection import Connection, StreamStats, WatchedEvent
from .errors import (
    AlreadyExists,
    CancellationRequested,
    Conflict,
    DeadlockVictim,
    Decision,
    FailedPrecondition,
    InvalidArgument,
    NoSession,
    NotFound,
    SessionClosed,
    SessionLost,
    StaleGeneration,
    Unavailable,
    WaitgraphClientError,
)
from .tracing import WaitSpan, caller_traceparent

logger = logging.getLogger("waitgraph.sdk")

__all__ = ["Assignment", "Delegation", "Execution", "ExecutionScope", "Holding", "Session", "Voter", "Wait"]

T = TypeVar("T")
E = TypeVar("E", bound=StrEnum)
Voter = Callable[[RecoveryProposed], bool | Awaitable[bool]]
"""Decides a voter session's vote on a recovery proposal: True approves, False rejects."""
Interrupt = DeadlockVictim | CancellationRequested

_CURRENT: ContextVar[tuple[Execution, ...]] = ContextVar("waitgraph_current_executions", default=())
"""The executions whose scopes the running task is inside, innermost last (of any session)."""
_SCARCE_PREFIXES = ("resource:", "pool:", "reservation:")
_CREATED_ON_USE = ("resource:", "reservation:", "artifact:", "approval:")
"""Targets the SDK creates when a call names one that does not exist yet (one slot, no satisfier)."""
_REGISTER_ATTEMPTS = 8
_FUTURE_GENERATION_POLL_S = 0.1
_EVENT_LOG = 2000


def _enum_or_none(cls: type[E], value: str) -> E | None:
    try:
        return cls(value)
    except ValueError:  # a newer server's value
        return None


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def _shielded(aw: Awaitable[T]) -> T:
    """Finish ``aw`` even if the caller is cancelled meanwhile (cleanup must reach the cluster)."""
    task = asyncio.ensure_future(aw)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(task), 10)
        raise


@dataclass(frozen=True, slots=True)
class Assignment:
    """An execution another agent created for this one (a delegation), from ``ExecutionCreated``."""

    execution_id: str
    run_id: str
    generation: int


# -- the session -----------------------------------------------------------------------------------------


class Session:
    """One agent's session: lease and heartbeats, its event stream, and its executions.

    Use as ``async with client.session(agent_id) as s:``. The shortcuts ``s.waiting_for``,
    ``s.holding`` and ``s.delegate`` act for the *current* execution: the innermost
    ``async with s.execution(...)`` of the calling task (or pass ``execution=``).
    """

    def __init__(
        self,
        client: Connection,
        agent_id: str,
        *,
        lease_ms: int,
        heartbeat_interval_s: float | None,
        local_wait_threshold_s: float,
        on_lost: Callable[[SessionLost], object] | None = None,
        voter: Voter | bool = False,
        refuse_deadlock: bool = False,
        on_state: Callable[[SessionState], object] | None = None,
        token: str | None = None,
    ) -> None:
        self.client = client
        self.agent_id = agent_id
        self.token = token
        """The agent's own token (None: the client's): its writes and its part of the stream."""
        self.refuse_deadlock = refuse_deadlock
        """The default of ``refuse_deadlock`` for the session's waits and holdings."""
        self.lease_ms = lease_ms
        self.heartbeat_interval_s = heartbeat_interval_s or max(0.2, lease_ms / 3000)
        self.local_wait_threshold_s = local_wait_threshold_s
        self.observed_epoch = 0
        """The latest global epoch this session has seen a decision commit (sent on Acquire)."""
        self.cancel_generations: dict[str, int] = {}
        """The latest cancel generation seen per run (sent on create/start/complete/claim)."""
        self.stats = StreamStats()
        self.event_log: deque[WatchedEvent] = deque(maxlen=_EVENT_LOG)
        """The most recent events the session received, in cursor order."""
        self.interrupts: list[Interrupt] = []
        """Every interruption the session delivered (victims, cancel requests), in order."""
        self._executions: dict[str, Execution] = {}
        self._created: set[str] = set()
        self._waits: dict[str, Wait] = {}
        self._attached: dict[str, set[Wait]] = {}
        self._cancelled_tasks: set[asyncio.Task[Any]] = set()
        self._pending: dict[str, tuple[int, Interrupt]] = {}
        self._decisions: dict[str, VictimChosen] = {}
        self._proposals: deque[RecoveryProposed] = deque(maxlen=256)
        self._cancel_requests: dict[str, CancelRequested] = {}
        self._victims: set[tuple[str, int]] = set()
        self._assignments: asyncio.Queue[Assignment] = asyncio.Queue()
        self._watch: Watch | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._watch_error: BaseException | None = None
        self._open = False
        self._background: set[asyncio.Task[None]] = set()
        self.on_lost = on_lost
        """Called (once per loss, on the event loop) with the :class:`SessionLost` when it happens."""
        self.lost: SessionLost | None = None
        """Why the session was lost, while it is (None when the cluster holds it for this process)."""
        self.incarnation: int | None = None
        """The cluster's incarnation of the session this process joined (None: it joined one that
        was already active, e.g. another process's of the same agent)."""
        self._lost_event = asyncio.Event()
        self._leaving = False
        self.on_state = on_state
        """Called (on the event loop) with every change of :attr:`state`."""
        self._liveness: Liveness | None = None
        self._joins_unseen = 0
        """Joins sent whose SessionJoined/SessionRenewed the event stream has not shown yet."""
        self._liveness_task: asyncio.Task[None] | None = None
        self.voter: Voter | None = self.confirms if voter is True else voter or None
        """Votes on every recovery proposal the session sees (a session of an agent in the voter
        set sees them all): ``True`` votes by :meth:`confirms`, a callable decides."""
        self.votes: list[tuple[str, bool, Outcome | WaitgraphClientError]] = []
        """The votes this session cast: (digest, approve, the cluster's answer)."""

    # -- lifecycle -------------------------------------------------------------------------------------

    async def __aenter__(self) -> Session:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Join the client's event stream (first, so nothing is missed), join, start heartbeats."""
        loop = asyncio.get_running_loop()
        self._watch = Watch(self.agent_id, self.token, self.stats, self._on_event, self._on_resync, self._stream_failed)
        self.client.event_mux.add(self._watch)
        connect_timeout_s = self.client.connect_timeout_s
        try:
            await asyncio.wait_for(self._watch.started.wait(), connect_timeout_s)
        except TimeoutError:
            await self._stop_watch()
            raise Unavailable(
                f"no node of {', '.join(self.client.endpoints)} answered within the connect timeout "
                f"({connect_timeout_s:g}s, connect_timeout_s): is the cluster running there?",
                status=grpc.StatusCode.UNAVAILABLE,
                endpoint=self.client.endpoint,
                unreachable=True,
            ) from None
        if self._watch_error is not None:
            await self._stop_watch()
            raise self._watch_error
        joined_at = loop.time()
        try:
            await self._join()
        except BaseException:
            await self._stop_watch()
            raise
        self._open = True
        self._heartbeat_task = loop.create_task(self._heartbeats(), name=f"waitgraph-heartbeat-{self.agent_id}")
        self._watch_liveness(joined_at)

    @property
    def state(self) -> SessionState:
        """CONNECTED, SUSPENDED (heartbeats fail; the cluster still holds the session) or LOST
        (see :mod:`waitgraph.sdk._liveness` and docs/sdk.md's timeline)."""
        if self.lost is not None:
            return SessionState.LOST
        return self._liveness.state if self._liveness is not None else SessionState.CONNECTED

    def _watch_liveness(self, joined_at: float) -> None:
        """(Re)start the watchdog that makes the session LOST once no heartbeat succeeded for the
        session timeout (the lease), even while every node is down."""
        if self._liveness is None:
            self._liveness = Liveness(
                self.lease_ms / 1000,
                2 * self.heartbeat_interval_s,
                lambda: self.client.endpoints,
                self._unreachable,
                self.on_state,
                joined_at=joined_at,
            )
        else:
            self._liveness.rejoined(joined_at)
        if self._liveness_task is None or self._liveness_task.done():
            self._liveness_task = asyncio.get_running_loop().create_task(
                self._liveness.run(), name=f"waitgraph-liveness-{self.agent_id}"
            )

    def _unreachable(self, silent_s: float, endpoints: list[str], unreachable: bool) -> None:
        if unreachable:
            self._lose(
                "unreachable",
                f"no heartbeat succeeded for {silent_s:.1f}s (the session timeout, lease_ms={self.lease_ms}); "
                f"tried {', '.join(endpoints)}",
            )
        else:
            self._lose(
                "expired",
                f"no heartbeat was sent for {silent_s:.1f}s, past the lease (lease_ms={self.lease_ms}, "
                f"heartbeat_interval_s={self.heartbeat_interval_s:g}): the cluster expires it too",
            )

    async def _join(self) -> None:
        previous, self.incarnation = self.incarnation, None
        # Until the stream shows this join (events come in log order), a SessionEnded of this
        # agent is about the session before it: one that expired while the cluster was down is
        # told after a rejoin, and must not lose the new one.
        self._joins_unseen += 1
        try:
            out = await self.client.submit(
                C.JoinSession(agent_id=self.agent_id, lease_ms=self.lease_ms), service="agent", token=self.token
            )
        except BaseException:
            self._joins_unseen -= 1
            raise
        joined = next((fx.incarnation for fx in out.effects if isinstance(fx, SessionJoined)), None)
        # A join while the cluster still holds the session (this process gave it up by its own
        # clock first: a pause past the lease) renews that incarnation instead of starting one.
        renewed = any(isinstance(fx, SessionRenewed) for fx in out.effects)
        self.incarnation = joined if joined is not None else previous if renewed else None

    async def rejoin(self) -> None:
        """Join again after :class:`SessionLost` (a new incarnation of the agent's session), and
        resume heartbeats. The executions stay as the cluster left them: one cancelled or taken
        over meanwhile is refused as usual."""
        if self.lost is None and self._open:
            return
        joined_at = asyncio.get_running_loop().time()
        await self._join()
        self.lost = None
        self._lost_event.clear()
        self._open = True
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.get_running_loop().create_task(
                self._heartbeats(), name=f"waitgraph-heartbeat-{self.agent_id}"
            )
        self._watch_liveness(joined_at)

    async def wait_lost(self, timeout_s: float | None = None) -> SessionLost:
        """Block until the session is lost; returns the :class:`SessionLost` (``TimeoutError``)."""
        await asyncio.wait_for(self._lost_event.wait(), timeout_s)
        assert self.lost is not None
        return self.lost

    def _lose(self, reason: str, detail: str = "") -> None:
        """The cluster no longer holds this session for us: tell every blocked task, refuse calls."""
        if self.lost is not None or not self._open or self._leaving:
            return
        err = SessionLost(self.agent_id, reason, detail)
        self.lost = err
        self._lost_event.set()
        if self._liveness is not None:
            self._liveness.lost()
        logger.error("%s", err)
        for waits in list(self._attached.values()):
            for w in list(waits):
                w._fail(err)
                task = w._task
                if task is not None and not task.done() and task not in self._cancelled_tasks:
                    self._cancelled_tasks.add(task)
                    task.cancel(msg=f"waitgraph: {err}")
        if self.on_lost is not None:
            try:
                self.on_lost(err)
            except Exception:
                logger.exception("on_lost callback of %s", self.agent_id)

    async def close(self) -> None:
        """Stop heartbeats, leave the session (unless it was lost), stop the stream."""
        self._leaving = True
        was_open = self._open and self.lost is None
        self._open = False
        for task in (self._heartbeat_task, self._liveness_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if was_open and not self.client.transport.closed:
            try:
                await _shielded(self.write(C.LeaveSession(agent_id=self.agent_id)))
            except WaitgraphClientError as exc:
                logger.warning("leaving session %s: %s", self.agent_id, exc)
        await self._stop_watch()

    async def _stop_watch(self) -> None:
        if self._watch is not None:
            self.client.event_mux.remove(self._watch)
            self._watch = None

    async def _heartbeats(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # On a beat of the loop's clock (every half interval), not of the join: the sessions
            # of a client with the same interval heartbeat in the same loop iterations, so their
            # heartbeats leave together, as a WriteBatch or two per interval. The first comes
            # between half an interval and one after the join, every next one an interval later.
            half = self.heartbeat_interval_s / 2
            await asyncio.sleep(2 * half - loop.time() % half)
            if self.lost is not None:
                return
            sent_at = asyncio.get_running_loop().time()
            try:
                await self.write(C.Heartbeat(agent_id=self.agent_id))
            except asyncio.CancelledError:
                raise
            except SessionLost:
                return
            except WaitgraphClientError as exc:
                logger.warning("heartbeat of %s failed: %s", self.agent_id, exc)
                if self._liveness is not None:
                    self._liveness.failed()
            else:
                if self._liveness is not None:
                    self._liveness.ok(sent_at)

    def _on_event(self, ev: WatchedEvent) -> None:
        """One of this agent's events, from the client's stream (cluster/sdk/_mux.py)."""
        self.event_log.append(ev)
        self._on_effect(ev.effect)

    def _stream_failed(self, exc: BaseException) -> None:
        """The client's stream ended for good for this session (or refused to carry it)."""
        logger.error("event stream of %s stopped: %s", self.agent_id, exc)
        self._watch_error = exc
        if self._watch is not None:
            self._watch.started.set()  # wakes open(), which raises it
        err = exc if isinstance(exc, WaitgraphClientError) else SessionClosed(f"event stream stopped: {exc}")
        for waits in list(self._attached.values()):
            for w in list(waits):
                w._fail(err)

    def _on_resync(self) -> None:
        """Events were lost (the cursor expired): ask the cluster about every open wait again."""
        self._spawn(self._revalidate())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- votes -----------------------------------------------------------------------------------------

    async def vote(self, digest: str, approve: bool = True) -> Outcome:
        """This agent's vote on an open recovery proposal (AgentService ``Vote``). It counts when
        ``agent:<id>`` is in the configured voter set; otherwise the outcome is a NOOP
        (``noop_reason`` ``not_a_voter``), as it is for a second vote or a closed proposal."""
        return await self.write(C.VoteRecovery(digest=digest, approve=approve))

    def confirms(self, proposal: RecoveryProposed) -> bool:
        """The default voter's rule: approve unless this agent knows better. A member this session
        runs is confirmed deadlocked only if the SDK has it blocked in a registered wait at its
        current generation; one that is running (making progress) makes the cycle contention, and
        the vote is no. Members of other agents it cannot see: the cluster's second read checks
        those."""
        for eid in proposal.members:
            ex = self._executions.get(eid)
            if ex is None:
                continue
            blocked = any(
                w.registered and w.closed_reason is None and w.generation == ex.generation
                for w in self._attached.get(eid, ())
            )
            if not blocked:
                return False
        return True

    async def _cast_vote(self, proposal: RecoveryProposed) -> None:
        assert self.voter is not None
        try:
            decided = self.voter(proposal)
            approve = bool(await decided) if inspect.isawaitable(decided) else bool(decided)
        except Exception:
            logger.exception("the voter of %s failed on %s: no vote", self.agent_id, proposal.digest[:12])
            return
        try:
            answer: Outcome | WaitgraphClientError = await self.vote(proposal.digest, approve)
        except WaitgraphClientError as exc:
            answer = exc
            logger.warning("vote of %s on %s: %s", self.agent_id, proposal.digest[:12], exc)
        self.votes.append((proposal.digest, approve, answer))

    async def _revalidate(self) -> None:
        for w in list(self._waits.values()):
            try:
                await w.refresh()
            except WaitgraphClientError as exc:
                logger.warning("re-checking %s after lost events: %s", w.edge_id, exc)

    # -- the write path ----------------------------------------------------------------------------------

    async def write(self, command: C.Command, *, request_id: str | None = None) -> Outcome:
        """Send one agent command (AgentService); a rejection raises a typed error, and
        :class:`SessionLost` once the cluster no longer holds the session for this process."""
        if self.lost is not None:
            raise SessionLost(self.agent_id, self.lost.reason)
        if self._watch_error is not None and not isinstance(command, C.LeaveSession):
            raise SessionClosed(f"the session's event stream failed: {self._watch_error}")
        try:
            return await self.client.submit(command, request_id=request_id, service="agent", token=self.token)
        except NoSession as exc:
            if not self._open or self._leaving:
                raise
            self._lose("no_session", exc.message)
            raise SessionLost(self.agent_id, "no_session", exc.message) from exc

    async def _created_on_use(self, err: NotFound, target_id: str) -> bool:
        """After ``no_target`` (or ``retired``: idle for a retention, and made again afresh) for
        ``target_id``: create it when it needs nothing but its id (True: retry the call); a pool's
        refusal is raised again naming the call that creates it."""
        if err.code not in ("no_target", "retired") or err.fields.get("target_id") != target_id:
            return False
        if target_id.startswith(_CREATED_ON_USE):
            await self.ensure_target(target_id)
            return True
        if target_id.startswith("pool:"):
            raise err.with_hint(
                f"a pool is created with its size first: `await session.ensure_target({target_id!r}, slots=N)`"
            ) from None
        return False

    def observe_epoch(self, epoch: int) -> None:
        if epoch > self.observed_epoch:
            self.observed_epoch = epoch

    def cancel_generation(self, run_id: str | None) -> int:
        return self.cancel_generations.get(run_id, 0) if run_id is not None else 0

    # -- executions ------------------------------------------------------------------------------------

    def execution(
        self,
        execution_id: str | None = None,
        *,
        run_id: str | None = None,
        parent: Execution | str | None = None,
        priority: int = 0,
        checkpoint: bool = False,
        unique_evidence: bool = False,
    ) -> ExecutionScope:
        """Create and start an execution; on exit complete it (normal exit), acknowledge its
        cancellation (it was a victim or asked to stop) or fail it (any other exception).

        Without ``run_id`` (and without ``parent``) the execution is the root of a new run.
        """
        parent_id = parent.execution_id if isinstance(parent, Execution) else parent
        if run_id is None and isinstance(parent, Execution):
            run_id = parent.run_id
        if parent_id is not None and run_id is None:
            raise ValueError("a child execution needs the parent's run_id (pass the parent Execution)")
        return ExecutionScope(
            self,
            execution_id or f"exec:{self.agent_id}-{uuid.uuid4().hex[:12]}",
            run_id=run_id or f"run-{uuid.uuid4().hex[:12]}",
            create=True,
            parent_id=parent_id,
            priority=priority,
            checkpoint=checkpoint,
            unique_evidence=unique_evidence,
        )

    def accept(self, assignment: Assignment | str, *, run_id: str | None = None, generation: int = 1) -> ExecutionScope:
        """Start an execution another agent created for this one (see :meth:`next_assignment`);
        on exit it is completed, acknowledged or failed like :meth:`execution`."""
        if isinstance(assignment, Assignment):
            execution_id, run_id, generation = assignment.execution_id, assignment.run_id, assignment.generation
        else:
            execution_id = assignment
        return ExecutionScope(self, execution_id, run_id=run_id, create=False, generation=generation)

    async def next_assignment(self, timeout_s: float | None = None) -> Assignment:
        """The next execution delegated to this agent (created by another agent's ``delegate``);
        raises :class:`SessionLost` if the session is lost meanwhile."""
        if self.lost is not None:
            raise SessionLost(self.agent_id, self.lost.reason)
        get = asyncio.ensure_future(self._assignments.get())
        lost = asyncio.ensure_future(self._lost_event.wait())
        try:
            done, _ = await asyncio.wait({get, lost}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not get.done():
                get.cancel()
        if get in done:
            return get.result()
        if lost in done and self.lost is not None:
            raise SessionLost(self.agent_id, self.lost.reason)
        raise TimeoutError(f"no assignment for {self.agent_id} within {timeout_s}s")

    def handle(self, execution_id: str, *, run_id: str | None = None, generation: int = 1) -> Execution:
        """The session's handle of an execution (created on first use; nothing is sent)."""
        ex = self._executions.get(execution_id)
        if ex is None:
            ex = Execution(self, execution_id, run_id, generation)
            self._executions[execution_id] = ex
        return ex

    def current(self) -> Execution:
        """The execution of the innermost ``async with s.execution(...)`` of this task."""
        for ex in reversed(_CURRENT.get()):
            if ex.session is self:
                return ex
        raise RuntimeError("no current execution of this session: use `async with s.execution(...)` or execution=")

    def _resolve(self, execution: Execution | None) -> Execution:
        return execution if execution is not None else self.current()

    # -- shortcuts for the current execution -----------------------------------------------------------

    def waiting_for(self, target_id: str, *, execution: Execution | None = None, **kw: Any) -> Wait:
        return self._resolve(execution).waiting_for(target_id, **kw)

    def holding(self, target_id: str, *, execution: Execution | None = None, **kw: Any) -> Holding:
        return self._resolve(execution).holding(target_id, **kw)

    def delegate(self, agent_id: str, *, execution: Execution | None = None, **kw: Any) -> Delegation:
        return self._resolve(execution).delegate(agent_id, **kw)

    # -- targets ---------------------------------------------------------------------------------------

    async def ensure_target(self, target_id: str, slots: int = 1) -> bool:
        """Create an artifact, approval, reservation, resource or pool; True if this call created it,
        False if it existed already."""
        try:
            await self.write(C.CreateTarget(target_id=target_id, slots=slots))
        except AlreadyExists:
            return False
        return True

    async def declare_satisfier(
        self, target_id: str, satisfier_id: str, *, target_generation: int = 1, satisfier_generation: int = 0
    ) -> Outcome:
        """PRODUCED_BY / PROVIDED_BY: an execution of this agent (see :meth:`Execution.produces`),
        or an outside satisfier (``human:...``, ``external:...``) that no execution controls."""
        return await self.write(
            C.DeclareSatisfier(
                target_id=target_id,
                target_generation=target_generation,
                satisfier_id=satisfier_id,
                satisfier_generation=satisfier_generation,
            )
        )

    async def produce(self, artifact_id: str, version: int = 1) -> Outcome:
        return await self.write(C.ProduceArtifact(artifact_id=artifact_id, version=version))

    async def decide(self, approval_id: str, approved: bool = True, version: int = 1) -> Outcome:
        return await self.write(C.DecideApproval(approval_id=approval_id, version=version, approved=approved))

    async def cancel_run(self, run_id: str, reason: str) -> Outcome:
        """Cancel a run whose root execution belongs to this agent."""
        return await self.write(
            C.CancelRun(run_id=run_id, observed_cancel_generation=self.cancel_generation(run_id), reason=reason)
        )

    # -- events ----------------------------------------------------------------------------------------

    def _on_effect(self, fx: Effect) -> None:
        match fx:
            case WaitClosed():
                w = self._waits.get(fx.edge_id)
                if w is not None and w.version == fx.edge_version and w.generation == fx.waiter_generation:
                    w._on_closed(fx.reason, fx.lease)
            case WaitRegistered():
                # The coordinator re-registered our wait at a higher version (a REASSIGN moved the
                # approval it waits on): follow it, or the close and its WaitClosed would not match.
                w = self._waits.get(fx.edge_id)
                if w is not None and w.generation == fx.waiter_generation and fx.edge_version > w.version:
                    w.version = fx.edge_version
                    versions = w.execution._edge_versions
                    versions[w.target_id] = max(versions.get(w.target_id, 0), fx.edge_version)
            case VictimChosen():
                self._decisions[fx.decision_id] = fx
                if fx.epoch is not None and fx.decision_kind in ("VICTIM", "TIE_BREAK"):
                    self.observe_epoch(fx.epoch)
            case RecoveryProposed():
                self._proposals.append(fx)
                for member in fx.members:
                    for w in self._attached.get(member, ()):
                        w.proposal = fx
                if self.voter is not None:
                    self._spawn(self._cast_vote(fx))
            case SessionEnded() if fx.agent_id == self.agent_id and not self._joins_unseen:
                # Not our own LeaveSession (close() sets _leaving first): expired, or another
                # process of this agent left the session we shared.
                self._lose(fx.reason, "the cluster ended the session")
            case SessionJoined() | SessionRenewed() if fx.agent_id == self.agent_id and self._joins_unseen:
                self._joins_unseen -= 1  # our join, or one before it: what follows is about ours
            case SessionJoined() if fx.agent_id == self.agent_id and self.incarnation is not None:
                if fx.incarnation != self.incarnation:
                    self._lose("replaced", f"incarnation {fx.incarnation} replaced ours ({self.incarnation})")
            case ExecutionStateChanged() if fx.after is ExecStatus.CANCELLING:
                # Only a recovery decision's CAS moves an execution to CANCELLING; the core names the
                # decision in the cause ("victim:<decision id>").
                decision_id = fx.cause.partition(":")[2] if fx.cause.startswith("victim:") else None
                self._victim(fx.execution_id, fx.generation, decision_id)
            case CancelRequested():
                known = self.cancel_generations.get(fx.run_id, 0)
                self.cancel_generations[fx.run_id] = max(known, fx.cancel_generation)
                self._cancel_requests[fx.execution_id] = fx
                key = (fx.execution_id, fx.generation)
                pending = self._pending.get(fx.execution_id)
                if key not in self._victims and (pending is None or pending[0] != fx.generation):
                    self._interrupt(
                        fx.execution_id,
                        fx.generation,
                        CancellationRequested(
                            fx.execution_id, fx.generation, fx.run_id, fx.cancel_generation, fx.reason
                        ),
                    )
            case Yielded():
                self.observe_epoch(fx.epoch)
                decision = Decision(None, fx.execution_id, fx.generation, fx.epoch, "yielded", winner_id=fx.winner_id)
                self._interrupt(fx.execution_id, fx.generation, DeadlockVictim(decision))
            case ExecutionCreated() if fx.agent_id == self.agent_id and fx.execution_id not in self._created:
                self._assignments.put_nowait(Assignment(fx.execution_id, fx.run_id, fx.generation))
            case GenerationAdvanced():
                ex = self._executions.get(fx.execution_id)
                if ex is not None and fx.after > ex.generation:
                    logger.info("%s moved to generation %d elsewhere (a claim takeover)", fx.execution_id, fx.after)
            case _:
                pass

    def _victim(self, execution_id: str, generation: int, decision_id: str | None) -> None:
        vc = self._decisions.get(decision_id) if decision_id is not None else None
        if vc is not None:
            epoch = vc.epoch
            role = "victim" if vc.execution_id == execution_id else "rolled_back"
            decision = Decision(
                decision_id,
                execution_id,
                generation,
                epoch,
                role,
                digest=vc.digest,
                kind=_enum_or_none(DecisionKind, vc.decision_kind),
                mode=_enum_or_none(RolloutMode, vc.mode),
                policy_version=vc.policy_version,
                reason_code=vc.reason_code,
                winner_id=vc.execution_id if role != "victim" else None,
            )
        else:
            # A tie-break names its winner, not us: the epoch is the one proposed for our cycle.
            proposed = [p.epoch_proposed for p in self._proposals if execution_id in p.members]
            epoch = max(proposed) if proposed else None
            decision = Decision(decision_id, execution_id, generation, epoch, "rolled_back")
        if epoch is not None:
            self.observe_epoch(epoch)
        self._victims.add((execution_id, generation))
        self._interrupt(execution_id, generation, DeadlockVictim(decision))

    def _interrupt(self, execution_id: str, generation: int, err: Interrupt) -> None:
        """Deliver ``err`` to every wait of the execution's generation: fail its handle and cancel
        the task blocked in it (its ``__aexit__`` turns the cancellation into ``err``)."""
        self._pending[execution_id] = (generation, err)
        self.interrupts.append(err)
        logger.info("%s", err)
        for w in list(self._attached.get(execution_id, ())):
            if w.generation != generation:
                continue
            w._fail(err)
            task = w._task
            if task is not None and not task.done() and task not in self._cancelled_tasks:
                self._cancelled_tasks.add(task)
                task.cancel(msg=f"waitgraph: {err}")

    def _consume_cancel(self, task: asyncio.Task[Any] | None) -> bool:
        if task is not None and task in self._cancelled_tasks:
            self._cancelled_tasks.discard(task)
            return True
        return False

    def _attach(self, w: Wait) -> None:
        self._attached.setdefault(w.execution.execution_id, set()).add(w)

    def _detach(self, w: Wait) -> None:
        waits = self._attached.get(w.execution.execution_id)
        if waits is not None:
            waits.discard(w)
            if not waits:
                del self._attached[w.execution.execution_id]

    def pending_interrupt(self, execution_id: str, generation: int) -> Interrupt | None:
        got = self._pending.get(execution_id)
        return got[1] if got is not None and got[0] == generation else None


# -- executions ----------------------------------------------------------------------------------------


class Execution:
    """A handle of one execution owned by this session's agent (all generations of it).

    ``generation`` is the attempt the handle acts for; :meth:`retry` moves it to the next one.
    """

    def __init__(self, session: Session, execution_id: str, run_id: str | None, generation: int = 1) -> None:
        self.session = session
        self.execution_id = execution_id
        self.run_id = run_id
        self.generation = generation
        self.holdings: dict[str, int] = {}
        """Targets this attempt holds through the SDK, with how many ``holding`` scopes hold each."""
        self._edge_versions: dict[str, int] = {}
        self._acked: int | None = None

    def __repr__(self) -> str:
        return f"Execution({self.execution_id} g{self.generation}, run {self.run_id})"

    @property
    def cancel_generation(self) -> int:
        return self.session.cancel_generation(self.run_id)

    @property
    def holds_scarce(self) -> bool:
        """Holds a lease, a reservation or a pool permit: its waits register before it blocks."""
        return any(t.startswith(_SCARCE_PREFIXES) for t, n in self.holdings.items() if n > 0)

    @property
    def interrupt(self) -> Interrupt | None:
        """The DeadlockVictim / CancellationRequested delivered for this attempt, if any."""
        return self.session.pending_interrupt(self.execution_id, self.generation)

    def check_interrupt(self) -> None:
        err = self.interrupt
        if err is not None:
            raise err

    def _next_edge_version(self, target_id: str) -> int:
        version = self._edge_versions.get(target_id, 0) + 1
        self._edge_versions[target_id] = version
        return version

    async def _write(self, command: C.Command) -> Outcome:
        return await self.session.write(command)

    # -- lifecycle -------------------------------------------------------------------------------------

    async def create(
        self,
        *,
        parent_id: str | None = None,
        agent_id: str | None = None,
        priority: int = 0,
        checkpoint: bool = False,
        unique_evidence: bool = False,
    ) -> Outcome:
        if self.run_id is None:
            raise ValueError("an execution is created in a run: give run_id")
        self.session._created.add(self.execution_id)
        return await self._write(
            C.CreateExecution(
                execution_id=self.execution_id,
                run_id=self.run_id,
                parent_id=parent_id,
                agent_id=agent_id,
                priority=priority,
                checkpoint=checkpoint,
                unique_evidence=unique_evidence,
                observed_cancel_generation=self.cancel_generation,
            )
        )

    async def start(self) -> Outcome:
        return await self._write(
            C.StartExecution(
                execution_id=self.execution_id,
                generation=self.generation,
                observed_cancel_generation=self.cancel_generation,
            )
        )

    async def complete(self) -> Outcome:
        """The canonical commit, fenced by the run's cancel generation."""
        self.check_interrupt()
        return await self._write(
            C.CompleteExecution(
                execution_id=self.execution_id,
                generation=self.generation,
                observed_cancel_generation=self.cancel_generation,
            )
        )

    async def fail(self, reason: str) -> Outcome:
        return await self._write(
            C.FailExecution(
                execution_id=self.execution_id, generation=self.generation, reason=_short(reason) or "failed"
            )
        )

    async def ack_cancel(self, side_effects: EffectOutcome = EffectOutcome.NONE) -> Outcome | None:
        """Acknowledge the cancellation of this attempt (the SDK does it when the execution scope
        ends with the interruption, and in :meth:`retry`); None when nothing asked it to stop."""
        if self._acked == self.generation:
            return None
        req = self.session._cancel_requests.get(self.execution_id)
        if req is not None and req.generation == self.generation:
            cancel_generation = req.cancel_generation
        elif self.interrupt is not None:
            cancel_generation = self.cancel_generation
        else:
            return None
        out = await self._write(
            C.AckCancel(
                execution_id=self.execution_id,
                generation=self.generation,
                cancel_generation=cancel_generation,
                side_effects=side_effects,
            )
        )
        self._acked = self.generation
        return out

    async def retry(self, *, start: bool = True) -> int:
        """Start the next attempt: acknowledge a pending cancellation, RetryExecution, and (by
        default) StartExecution at the new generation. Returns the new generation. A rolled-back
        victim's next Acquire presents the epoch of the decision that rolled it back."""
        if isinstance(self.interrupt, DeadlockVictim) and self.interrupt.decision.role == "yielded":
            pass  # a yielder was not cancelled: nothing to acknowledge
        elif self.interrupt is not None or self.execution_id in self.session._cancel_requests:
            await self.ack_cancel()
        out = await self._write(C.RetryExecution(execution_id=self.execution_id, generation=self.generation))
        after = next((fx.after for fx in out.effects if isinstance(fx, GenerationAdvanced)), self.generation + 1)
        self.generation = after
        self.holdings.clear()
        self._edge_versions.clear()
        if start:
            await self.start()
        return after

    # -- holdings --------------------------------------------------------------------------------------

    async def acquire(self, target_id: str, *, ttl_s: float | None = None) -> int | None:
        """Acquire once, without waiting: the lease number, or None when this attempt already held
        it. A held target raises :class:`~.errors.Conflict` (fields ``holder`` and ``lease``).
        ``ttl_s``: the cluster releases the lease by itself that long after the grant (logical
        time; docs/queues.md), even when this process is gone."""
        self.check_interrupt()
        command = C.Acquire(
            target_id=target_id,
            execution_id=self.execution_id,
            generation=self.generation,
            observed_epoch=self.session.observed_epoch,
            ttl_ms=_ttl_ms(ttl_s),
        )
        try:
            out = await self._write(command)
        except NotFound as exc:
            if not await self.session._created_on_use(exc, target_id):
                raise
            out = await self._write(command)
        self.holdings[target_id] = self.holdings.get(target_id, 0) + 1
        return next((fx.lease for fx in out.effects if isinstance(fx, Acquired)), None)

    async def release(self, target_id: str) -> Outcome | None:
        """Drop one hold; the last one releases the target in the cluster."""
        n = self.holdings.get(target_id, 0)
        if n > 1:
            self.holdings[target_id] = n - 1
            return None
        self.holdings.pop(target_id, None)
        return await self._write(
            C.Release(target_id=target_id, execution_id=self.execution_id, generation=self.generation)
        )

    # -- scoped helpers --------------------------------------------------------------------------------

    def waiting_for(
        self,
        target_id: str,
        *,
        target_generation: int | None = None,
        reason: str | None = None,
        deadline_ms: int | None = None,
        cancel_mode: CancelMode = CancelMode.COOPERATIVE,
        local_threshold_s: float | None = None,
        refuse_deadlock: bool | None = None,
        priority: int = 0,
    ) -> Wait:
        """Register WAIT(this execution -> ``target_id``) before the block runs, close it after.

        ``target_generation``: the execution generation, artifact/approval version or lease the
        wait is for (default: the first, adjusted to the current one when the cluster says it is
        stale). ``local_threshold_s`` overrides the session's local threshold for this wait.
        ``refuse_deadlock`` (default: the session's): when the wait would close a hard cycle the
        cluster refuses it and changes nothing, and entering the block raises
        :class:`~.errors.WouldDeadlock` with the cycle's ``path``, so the caller can re-plan
        instead of becoming a victim later; such a wait registers at once, never locally first.
        ``priority``: the wait's place in a resource's or pool's grant queue (higher first, FIFO
        among equals; docs/queues.md).
        """
        return Wait(
            self,
            target_id,
            target_generation=target_generation,
            reason=reason,
            deadline_ms=deadline_ms,
            cancel_mode=cancel_mode,
            threshold_s=local_threshold_s,
            refuse_deadlock=self.session.refuse_deadlock if refuse_deadlock is None else refuse_deadlock,
            priority=priority,
        )

    def holding(
        self,
        target_id: str,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        reason: str | None = None,
        local_threshold_s: float | None = None,
        refuse_deadlock: bool | None = None,
        priority: int = 0,
        ttl_s: float | None = None,
    ) -> Holding:
        """Hold a resource, reservation or pool permit for the block (like a redis-py/kazoo lock).

        When it is held by someone else the SDK registers a wait on it and blocks until it is
        released (``wait=False``: raise :class:`~.errors.Conflict` instead); the wait registers at
        once when this execution already holds a scarce resource, else after the local threshold.
        ``refuse_deadlock`` (default: the session's): that wait is refused when it would close a
        hard cycle, and entering raises :class:`~.errors.WouldDeadlock` (nothing is held).
        A registered wait takes a place in the target's grant queue (``priority``: higher first,
        FIFO among equals); when the holder releases, the cluster hands the target to the head of
        the queue in the same transition and the block starts holding it, without acquiring again.
        ``ttl_s``: the lease ends by itself that long after its grant (an Acquire's or the
        hand-off's): the cluster releases it (``ttl_expired``) even if this process is gone.
        """
        return Holding(
            self,
            target_id,
            wait=wait,
            timeout_s=timeout_s,
            reason=reason,
            threshold_s=local_threshold_s,
            refuse_deadlock=self.session.refuse_deadlock if refuse_deadlock is None else refuse_deadlock,
            priority=priority,
            ttl_s=ttl_s,
        )

    def delegate(
        self,
        agent_id: str,
        *,
        execution_id: str | None = None,
        priority: int = 0,
        checkpoint: bool = False,
        unique_evidence: bool = False,
        reason: str | None = None,
    ) -> Delegation:
        """Synchronous delegation: create a child execution for ``agent_id`` under this one and
        register "this execution waits for the child" before the block runs."""
        return Delegation(
            self,
            agent_id,
            execution_id=execution_id,
            priority=priority,
            checkpoint=checkpoint,
            unique_evidence=unique_evidence,
            reason=reason,
        )

    # -- satisfiers, ledger, claims --------------------------------------------------------------------

    async def produces(self, artifact_id: str, version: int = 1) -> Outcome:
        """Declare PRODUCED_BY(artifact@version -> this execution@generation), creating the artifact."""
        await self.session.ensure_target(artifact_id)
        return await self.session.declare_satisfier(
            artifact_id, self.execution_id, target_generation=version, satisfier_generation=self.generation
        )

    async def provides(self, approval_id: str, version: int = 1) -> Outcome:
        """Declare PROVIDED_BY(approval@version -> this execution@generation), creating the approval."""
        return await self.produces(approval_id, version)

    async def record_side_effect(
        self, effect_id: str, outcome: EffectOutcome | str = EffectOutcome.COMMITTED, *, compensatable: bool = False
    ) -> Outcome:
        """Record an external side effect of this attempt in its ledger: ``COMMITTED`` (the
        default: it happened), ``UNKNOWN`` (it may have: the cluster asks a human to reconcile
        before rolling this execution back) or ``NONE``. The victim policy prefers executions
        without COMMITTED/UNKNOWN effects; ``compensatable`` ones get a compensation queued
        when they are cancelled."""
        outcome = EffectOutcome(outcome.upper()) if isinstance(outcome, str) else outcome
        return await self._write(
            C.RecordSideEffect(
                execution_id=self.execution_id,
                generation=self.generation,
                effect_id=effect_id,
                outcome=outcome,
                compensatable=compensatable,
            )
        )

    async def record_cost(self, cost: int, *, request_id: str | None = None) -> Outcome:
        return await self.session.write(
            C.RecordCost(execution_id=self.execution_id, generation=self.generation, cost=cost), request_id=request_id
        )

    async def claim(self, lease_ms: int) -> Outcome:
        return await self._write(
            C.ClaimTask(
                execution_id=self.execution_id,
                generation=self.generation,
                observed_cancel_generation=self.cancel_generation,
                lease_ms=lease_ms,
            )
        )

    async def renew_claim(self) -> Outcome:
        return await self._write(
            C.RenewClaim(
                execution_id=self.execution_id,
                generation=self.generation,
                observed_cancel_generation=self.cancel_generation,
            )
        )

    async def accept_tool_call(self, effect_id: str, *, compensatable: bool = False) -> Outcome:
        return await self._write(
            C.AcceptToolCall(
                execution_id=self.execution_id,
                generation=self.generation,
                observed_cancel_generation=self.cancel_generation,
                effect_id=effect_id,
                compensatable=compensatable,
            )
        )


class ExecutionScope:
    """``async with s.execution(...) as ex``: create (or accept) and start; complete, acknowledge
    or fail on exit. The execution is the task's current one inside the block."""

    def __init__(
        self,
        session: Session,
        execution_id: str,
        *,
        run_id: str | None,
        create: bool,
        generation: int = 1,
        parent_id: str | None = None,
        priority: int = 0,
        checkpoint: bool = False,
        unique_evidence: bool = False,
    ) -> None:
        self.session = session
        self.execution = session.handle(execution_id, run_id=run_id, generation=generation)
        if run_id is not None:
            self.execution.run_id = run_id
        self._create = create
        self._create_args: dict[str, Any] = dict(
            parent_id=parent_id, priority=priority, checkpoint=checkpoint, unique_evidence=unique_evidence
        )
        self._token: Token[tuple[Execution, ...]] | None = None

    async def enter(self) -> Execution:
        ex = self.execution
        if self._create:
            await ex.create(**self._create_args)
        try:
            await ex.start()
        except WaitgraphClientError as exc:
            if self._create:  # not left PENDING forever: nobody else would start it
                with contextlib.suppress(WaitgraphClientError):
                    await _shielded(ex.fail(f"could not start: {exc}"))
            raise
        return ex

    async def exit(self, exc: BaseException | None) -> None:
        """Settle the execution for the way the block ended (see :meth:`Session.execution`)."""
        ex = self.execution
        interrupt = ex.interrupt
        if exc is None:
            if interrupt is not None:
                await _shielded(ex.ack_cancel())
                raise interrupt
            out = await ex.complete()
            if not out.ok:  # a commit that did nothing: the attempt was over before it
                raise StaleGeneration(
                    f"{ex.execution_id} g{ex.generation}: the commit changed nothing ({out.code}: {out.message})",
                    status=grpc.StatusCode.FAILED_PRECONDITION,
                    code=out.code,
                    outcome=out,
                )
            return
        own = isinstance(exc, DeadlockVictim | CancellationRequested) and exc.execution_id == ex.execution_id
        try:
            if interrupt is not None or own:
                await _shielded(ex.ack_cancel())
            else:
                await _shielded(ex.fail(f"{type(exc).__name__}: {exc}"))
        except WaitgraphClientError as cleanup:
            logger.warning("settling %s after %s: %s", ex.execution_id, type(exc).__name__, cleanup)

    async def __aenter__(self) -> Execution:
        ex = await self.enter()
        self._token = _CURRENT.set((*_CURRENT.get(), ex))
        return ex

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None
        await self.exit(exc)


# -- waits -----------------------------------------------------------------------------------------------


class Wait:
    """One registered wait edge; ``await w.resolved()`` blocks until the cluster closes it.

    Attributes: ``edge_id``, ``version`` (the edge version registered), ``registered``,
    ``satisfied`` (the target was already resolved when the SDK tried to register),
    ``closed_reason`` (the cluster's reason: ``target_produced``, ``target_released``,
    ``approval_granted``, ``target_waiter_finished``, ``deadline_exceeded``, ``granted``...),
    ``granted_lease`` (with ``granted``: the cluster handed this execution the resource or pool
    slot at that lease when it was released; it holds it now).
    """

    def __init__(
        self,
        execution: Execution,
        target_id: str,
        *,
        target_generation: int | None = None,
        reason: str | None = None,
        deadline_ms: int | None = None,
        cancel_mode: CancelMode = CancelMode.COOPERATIVE,
        threshold_s: float | None = None,
        immediate: bool = False,
        refuse_deadlock: bool = False,
        priority: int = 0,
        lease_ttl_ms: int = 0,
    ) -> None:
        self.execution = execution
        self.session = execution.session
        self.target_id = target_id
        self.edge_id = f"{execution.execution_id}>{target_id}"
        self.lease_ttl_ms = lease_ttl_ms
        self.target_generation = target_generation
        self.reason = _short(reason or f"waiting for {target_id}")
        self.deadline_ms = deadline_ms
        self.cancel_mode = cancel_mode
        self.threshold_s = threshold_s
        self.immediate = immediate
        self.refuse_deadlock = refuse_deadlock
        self.priority = priority
        self.granted_lease: int | None = None
        self.generation = execution.generation
        self.version = 0
        self.registered = False
        self.satisfied = False
        self.closed_reason: str | None = None
        self.detail = ""
        self._error: WaitgraphClientError | None = None
        self._wake: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._task: asyncio.Task[Any] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._span: WaitSpan | None = None
        """The wait's span in the caller's trace, once registered with tracing on (sdk/tracing.py)."""
        self.proposal: RecoveryProposed | None = None
        """The last recovery proposal that named this wait's execution while the wait was open."""

    def __repr__(self) -> str:
        state = "registered" if self.registered else "closed" if self.closed_reason else "local"
        return f"Wait({self.edge_id} v{self.version} {state})"

    # -- entering -----------------------------------------------------------------------------------------

    async def enter(self, interrupt_task: bool = True) -> Wait:
        """Register (or, below the local threshold, schedule the registration) and attach the
        handle; with ``interrupt_task`` the calling task is cancelled if the execution becomes a
        deadlock victim (the sync twin passes False and is woken through :meth:`resolved`)."""
        ex = self.execution
        ex.check_interrupt()
        self.generation = ex.generation
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task = asyncio.current_task() if interrupt_task else None
        self.session._attach(self)
        try:
            threshold = self.threshold_s if self.threshold_s is not None else self.session.local_wait_threshold_s
            # a wait that asks to be refused registers now: the refusal is the answer to entering
            if self.immediate or self.refuse_deadlock or threshold <= 0 or ex.holds_scarce:
                await self._register()
            else:
                self._timer = asyncio.get_running_loop().create_task(self._register_after(threshold))
        except asyncio.CancelledError:
            # Another wait of this execution made it a victim while this one was registering.
            self.session._detach(self)
            self._forget()
            if self.session._consume_cancel(self._task) and self._error is not None:
                assert self._task is not None
                self._task.uncancel()
                raise self._error from None
            raise
        except BaseException as exc:
            self.session._detach(self)
            self._end_span("register_failed", exc)
            raise
        return self

    def _default_generation(self) -> int:
        return 0 if self.target_id.startswith("pool:") else 1

    async def _register(self) -> None:
        assert self._lock is not None
        async with self._lock:
            if self.registered or self.satisfied or self.closed_reason is not None:
                return
            ex = self.execution
            tg = self.target_generation if self.target_generation is not None else self._default_generation()
            if self._span is None:
                self._span = WaitSpan.start(self.session.agent_id, ex.execution_id, self.generation, self.target_id)
            for _ in range(_REGISTER_ATTEMPTS):
                if self._error is not None:
                    raise self._error
                self.version = ex._next_edge_version(self.target_id)
                self.session._waits[self.edge_id] = self  # the close event may come before the reply
                try:
                    out = await self._in_span(
                        self.session.write(
                            C.RegisterWait(
                                waiter_id=ex.execution_id,
                                waiter_generation=self.generation,
                                target_id=self.target_id,
                                target_generation=tg,
                                reason=self.reason,
                                deadline_ms=self.deadline_ms,
                                cancel_mode=self.cancel_mode,
                                edge_version=self.version,
                                refuse_deadlock=self.refuse_deadlock,
                                priority=self.priority,
                                lease_ttl_ms=self.lease_ttl_ms,
                                trace_context=self._span.traceparent
                                if self._span is not None
                                else caller_traceparent(),
                            )
                        )
                    )
                except StaleGeneration as exc:
                    current = exc.field_int("current")
                    if exc.code != "stale_target_generation" or current is None or self.target_generation is not None:
                        self._forget()
                        raise
                    tg = current
                    continue
                except NotFound as exc:
                    self._forget()
                    if not await self.session._created_on_use(exc, self.target_id):
                        raise
                    continue  # declared now, its satisfier still unknown: register again
                except FailedPrecondition as exc:
                    if exc.code != "already_satisfied":
                        self._forget()
                        raise
                    self._forget()
                    self.satisfied = True
                    self.detail = exc.message
                    self._on_closed("already_satisfied")
                    return
                except BaseException:
                    self._forget()
                    raise
                if out.result is Result.NOOP and out.code == "stale_edge_version":
                    continue
                self.target_generation = tg
                self.registered = True
                if self._span is not None:
                    self._span.registered(self.version)
                return
            self._forget()
            raise FailedPrecondition(
                f"could not register {self.edge_id} in {_REGISTER_ATTEMPTS} attempts",
                status=grpc.StatusCode.FAILED_PRECONDITION,
                code="register_failed",
            )

    async def refresh(self) -> None:
        """Register the open edge again at the next version (after lost events): a wait whose
        target was resolved meanwhile comes back ``already_satisfied`` and resolves; one whose
        execution is no longer waiting (cancelled, rolled back) fails with the cluster's reason.
        It never asks for ``refuse_deadlock``: the edge is in the graph already, and refusing to
        refresh it would not take it out of a cycle."""
        if self._lock is None:
            return
        async with self._lock:
            if not self.registered or self.closed_reason is not None or self._error is not None:
                return
            ex = self.execution
            self.version = ex._next_edge_version(self.target_id)
            self.session._waits[self.edge_id] = self
            try:
                await self.session.write(
                    C.RegisterWait(
                        waiter_id=ex.execution_id,
                        waiter_generation=self.generation,
                        target_id=self.target_id,
                        target_generation=self.target_generation if self.target_generation is not None else 0,
                        reason=self.reason,
                        deadline_ms=self.deadline_ms,
                        cancel_mode=self.cancel_mode,
                        edge_version=self.version,
                    )
                )
            except FailedPrecondition as exc:
                if exc.code == "already_satisfied":
                    self.detail = exc.message
                    self._on_closed("already_satisfied")
                else:
                    self._fail(exc)

    def _forget(self) -> None:
        if self.session._waits.get(self.edge_id) is self:
            del self.session._waits[self.edge_id]

    async def _register_after(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        try:
            await self._register()
        except WaitgraphClientError as exc:
            self._fail(exc)

    # -- the cluster's answers ----------------------------------------------------------------------------

    def _on_closed(self, reason: str, lease: int | None = None) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
            self.granted_lease = lease
            self.registered = False
            if self._wake is not None:
                self._wake.set()
        span, p = self._span, self.proposal
        if span is not None and p is not None and not reason.startswith("waiter_"):
            # A recovery named this execution and the wait closed without it being rolled back:
            # another member was (the decision's id is known when this agent also owns the victim).
            vc = next((d for d in self.session._decisions.values() if d.digest == p.digest), None)
            span.decision("kept", vc.decision_id if vc else None, p.epoch_proposed, p.digest)
        self._end_span(reason)

    def _fail(self, err: WaitgraphClientError) -> None:
        if self._error is None:
            self._error = err
        if self._wake is not None:
            self._wake.set()
        if self._span is not None and isinstance(err, DeadlockVictim):
            d = err.decision
            self._span.decision(d.role, d.decision_id, d.epoch, d.digest, d.winner_id)
            self._end_span(f"deadlock_{d.role}")
        else:
            self._end_span(getattr(err, "code", "") or type(err).__name__, err)

    async def _in_span(self, aw: Awaitable[T]) -> T:
        """``aw`` with the wait's span as the current one: its RPCs are the wait's children."""
        if self._span is None:
            return await aw
        with self._span.current():
            return await aw

    def _end_span(self, reason: str, error: BaseException | None = None) -> None:
        if self._span is not None:
            self._span.end(reason, None if error is None else type(error).__name__)

    async def resolved(self, timeout_s: float | None = None) -> str:
        """Block until the cluster closes the wait; returns its reason. A local wait registers now
        (blocking on the cluster is never short). Raises the execution's interruption
        (:class:`~.errors.DeadlockVictim`...) or ``TimeoutError``."""
        if self._error is not None:
            raise self._error
        if self.closed_reason is not None:
            return self.closed_reason
        if not self.registered:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            await self._register()
        assert self._wake is not None
        await asyncio.wait_for(self._wake.wait(), timeout_s)
        if self._error is not None:
            raise self._error
        assert self.closed_reason is not None
        return self.closed_reason

    # -- leaving --------------------------------------------------------------------------------------------

    async def exit(self, exc: BaseException | None) -> None:
        """Close the edge if it is still open and turn the SDK's own cancellation of the task into
        the interruption it stands for. Raises that interruption when it happened."""
        self.session._detach(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        ours = self.session._consume_cancel(self._task)
        if self.registered and self.closed_reason is None and self._error is None:
            why = "waiter_done"
            if exc is not None:
                why = "waiter_cancelled" if isinstance(exc, asyncio.CancelledError) else "waiter_error"
            try:
                await _shielded(self._close(why))
            except asyncio.CancelledError:
                if not ours:
                    raise
            except WaitgraphClientError as cleanup:
                logger.warning("closing %s: %s", self.edge_id, cleanup)
        self._end_span(self.closed_reason or "waiter_done", exc)
        self._forget()
        err = self._error
        if ours:
            assert self._task is not None
            self._task.uncancel()
        if err is not None and not isinstance(exc, type(err)):
            if ours or exc is None or isinstance(exc, asyncio.CancelledError):
                raise err from None
            raise err from exc

    async def _close(self, why: str) -> None:
        await self._in_span(
            self.session.write(
                C.CloseWait(
                    waiter_id=self.execution.execution_id,
                    waiter_generation=self.generation,
                    target_id=self.target_id,
                    edge_version=self.version,
                    reason=why,
                )
            )
        )
        self._on_closed(why)

    async def __aenter__(self) -> Wait:
        return await self.enter(interrupt_task=True)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        await self.exit(exc)


async def _block(w: Wait, interrupt_task: bool, timeout_s: float | None) -> str:
    """Enter ``w``, wait until it resolves, leave it (raising the interruption if there was one)."""
    await w.enter(interrupt_task)
    try:
        reason = await w.resolved(timeout_s)
    except BaseException as exc:
        await w.exit(exc)
        raise
    await w.exit(None)
    return reason


# -- holdings --------------------------------------------------------------------------------------------


def _ttl_ms(ttl_s: float | None) -> int:
    """A lease TTL in whole ms for the cluster (None: no TTL), rounded up: never shorter than asked."""
    if ttl_s is None:
        return 0
    if not ttl_s > 0:
        raise ValueError(f"ttl_s must be positive (None: no TTL), not {ttl_s}")
    return math.ceil(ttl_s * 1000)


class Holding:
    """``async with ex.holding("resource:browser-9") as h``: acquired for the block, released after.

    ``h.lease`` is the lease number of the acquisition (None when this attempt already held it).
    """

    def __init__(
        self,
        execution: Execution,
        target_id: str,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        reason: str | None = None,
        threshold_s: float | None = None,
        poll_interval_s: float = 0.05,
        refuse_deadlock: bool = False,
        priority: int = 0,
        ttl_s: float | None = None,
    ) -> None:
        self.execution = execution
        self.session = execution.session
        self.target_id = target_id
        self.priority = priority
        self.ttl_s = ttl_s
        self.wait = wait
        self.timeout_s = timeout_s
        self.reason = reason or f"waiting to acquire {target_id}"
        self.threshold_s = threshold_s
        self.poll_interval_s = poll_interval_s
        self.refuse_deadlock = refuse_deadlock
        self.lease: int | None = None
        self.waits = 0
        """How many wait edges the acquisition registered (0: it never blocked on the cluster)."""
        self.handed_over = False
        """The release of the previous holder handed the target to this one (its wait closed
        ``granted`` with the lease): held without an Acquire of its own."""
        self._held = False

    async def enter(self, interrupt_task: bool = True) -> Holding:
        ex = self.execution
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout_s is None else loop.time() + self.timeout_s
        threshold = self.threshold_s if self.threshold_s is not None else self.session.local_wait_threshold_s
        # Below the threshold the wait stays local (polled, unregistered), unless the execution
        # holds something scarce, or asks to be refused a deadlock (the answer is wanted now):
        # then it registers before it blocks.
        local = threshold > 0 and not ex.holds_scarce and not self.refuse_deadlock
        local_until = loop.time() + (threshold if local else 0.0)
        while True:
            try:
                self.lease = await ex.acquire(self.target_id, ttl_s=self.ttl_s)
                self._held = True
                return self
            except Conflict as conflict:
                if not self.wait:
                    raise
                held = conflict
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"{self.target_id} still held after {self.timeout_s}s") from held
            if loop.time() < local_until:
                await asyncio.sleep(self.poll_interval_s)
                continue
            lease = held.field_int("lease")
            tg = 0 if self.target_id.startswith("pool:") else lease
            w = Wait(
                ex,
                self.target_id,
                target_generation=tg,
                reason=self.reason,
                immediate=True,
                refuse_deadlock=self.refuse_deadlock,
                priority=self.priority,
                lease_ttl_ms=_ttl_ms(self.ttl_s),
            )
            self.waits += 1
            try:
                await _block(w, interrupt_task, remaining)
            except StaleGeneration:
                continue  # leased again meanwhile: try to acquire, then wait on the new lease
            except BaseException:
                if w.granted_lease is not None:  # handed over just as the wait was given up
                    self._take(w.granted_lease)
                    await self.exit(None)
                raise
            if w.granted_lease is not None:
                # Handed over by the release itself (fair grant queue): held already, no Acquire.
                self._take(w.granted_lease)
                self.handed_over = True
                return self

    def _take(self, lease: int) -> None:
        ex = self.execution
        ex.holdings[self.target_id] = ex.holdings.get(self.target_id, 0) + 1
        self.lease = lease
        self._held = True

    async def exit(self, exc: BaseException | None) -> None:
        if not self._held:
            return
        self._held = False
        try:
            await _shielded(self.execution.release(self.target_id))
        except WaitgraphClientError as cleanup:
            if exc is None:
                raise
            logger.warning("releasing %s: %s", self.target_id, cleanup)

    async def __aenter__(self) -> Holding:
        return await self.enter(interrupt_task=True)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        await self.exit(exc)


# -- delegation ------------------------------------------------------------------------------------------

_FINISHED = {"target_waiter_finished": "completed", "target_waiter_failed": "failed", "target_cancelled": "cancelled"}
_TERMINAL_WORDS = (("COMPLETED", "completed"), ("FAILED", "failed"), ("CANCELLED", "cancelled"))
_RETRIED = frozenset({"target_rolled_back", "target_generation_changed", "target_claim_expired"})


class Delegation:
    """``async with ex.delegate("reviewer") as d: outcome = await d.result()``.

    On enter: CreateExecution for the other agent under this execution (same run), then
    RegisterWait(this -> exec:child) before the block runs, so a child that asks this execution
    for something closes a cycle the detector can see. :meth:`result` follows the child across
    generations (a rolled-back child is waited for again at its next attempt) and returns
    ``completed``, ``failed`` or ``cancelled``.
    """

    def __init__(
        self,
        parent: Execution,
        agent_id: str,
        *,
        execution_id: str | None,
        priority: int,
        checkpoint: bool,
        unique_evidence: bool,
        reason: str | None,
    ) -> None:
        self.parent = parent
        self.session = parent.session
        self.agent_id = agent_id
        self.execution_id = execution_id or f"exec:{agent_id}-{uuid.uuid4().hex[:12]}"
        self.child_generation = 1
        self.reason = reason or f"delegated to {agent_id}"
        self._create_args: dict[str, Any] = dict(
            priority=priority, checkpoint=checkpoint, unique_evidence=unique_evidence
        )
        self.wait: Wait | None = None
        self.outcome: str | None = None
        self._interrupt_task = True

    async def enter(self, interrupt_task: bool = True) -> Delegation:
        parent = self.parent
        parent.check_interrupt()
        self._interrupt_task = interrupt_task
        child = Execution(self.session, self.execution_id, parent.run_id)
        self.session._created.add(self.execution_id)
        await child.create(parent_id=parent.execution_id, agent_id=self.agent_id, **self._create_args)
        self.wait = Wait(parent, self.execution_id, target_generation=1, reason=self.reason, immediate=True)
        await self.wait.enter(interrupt_task)
        return self

    async def result(self, timeout_s: float | None = None) -> str:
        """Block until the child's last attempt finishes: ``completed``, ``failed`` or ``cancelled``."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            assert self.wait is not None
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            reason = await self.wait.resolved(remaining)
            if reason in _FINISHED:
                self.outcome = _FINISHED[reason]
                return self.outcome
            if reason == "already_satisfied":
                detail = self.wait.detail
                self.outcome = next((v for k, v in _TERMINAL_WORDS if k in detail), "completed")
                return self.outcome
            if reason not in _RETRIED:
                raise FailedPrecondition(
                    f"the wait for {self.execution_id} closed: {reason}",
                    status=grpc.StatusCode.FAILED_PRECONDITION,
                    code=reason,
                )
            # The child's attempt was rolled back or superseded: wait for its next attempt.
            await self.wait.exit(None)
            self.child_generation += 1
            self.wait = await self._wait_for_generation(self.child_generation, deadline)

    async def _wait_for_generation(self, generation: int, deadline: float | None) -> Wait:
        loop = asyncio.get_running_loop()
        while True:
            w = Wait(self.parent, self.execution_id, target_generation=generation, reason=self.reason, immediate=True)
            try:
                await w.enter(self._interrupt_task)
                return w
            except InvalidArgument as exc:
                if exc.code != "future_generation":
                    raise
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"{self.execution_id} has not started generation {generation}")
            await asyncio.sleep(_FUTURE_GENERATION_POLL_S)

    async def exit(self, exc: BaseException | None) -> None:
        if self.wait is not None:
            await self.wait.exit(exc)

    async def __aenter__(self) -> Delegation:
        return await self.enter(interrupt_task=True)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        await self.exit(exc)
