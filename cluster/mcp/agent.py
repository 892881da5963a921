"""One MCP session's agent: a waitgraph session, its tasks, leases and started waits.

Rules kept here:
- One :class:`AgentState` is one agent's waitgraph session (a ``Session`` with the agent's own
  token), opened when the MCP session first acts and left when it ends; the cluster expires it
  when the process dies (heartbeats stop), and releases what it held by its own rules. Over HTTP
  every agent's session is on the server's one ``waitgraph.Client``: one event stream and one
  batch of writes for the whole process, not one per agent.
- Every call acts under a *task* (an execution). The default task is started on first use, so a
  client that never calls ``task_start`` still works; ``task_start`` pushes another one,
  ``task_finish`` completes (or fails) it and returns to the one below.
- Every wait asks the cluster to refuse a cycle (``refuse_deadlock``, unless the server runs
  with prevention off): the refusal changes nothing and names the path. A wait that was
  registered and then made a victim comes back as :class:`~waitgraph.DeadlockVictim`: the
  leases of that task are gone (the cluster released them after the epoch commit), and
  :meth:`AgentState.rolled_back` acknowledges the cancellation and starts the task's next
  generation, so the model can simply call again.
- A lease's TTL is the cluster's (``Acquire.ttl_ms`` / the wait's ``lease_ttl_ms``, in logical
  time from the grant): the cluster releases the lease when it runs out, whether this process is
  alive or not, so no lease outlives its holder's TTL. This process only notes when the TTL has
  passed (:meth:`AgentState.lapse`, before each call) so it stops reporting the lease as held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from waitgraph import Client, DeadlockVictim, OperatorClient
from waitgraph.sdk import Delegation, Execution, ExecutionScope, Holding, Session, Wait

logger = logging.getLogger("waitgraph.mcp")

__all__ = ["AgentState", "Lease", "Task"]


@dataclass(slots=True)
class Lease:
    """A lease this agent holds through a tool call, until released, its TTL ends, or a rollback."""

    target_id: str
    lease: int | None
    ttl_s: float
    holding: Holding
    handed_over: bool
    lapses_at_s: float = float("inf")
    """The event loop's time at which the TTL has passed here (the cluster, the authority,
    releases it at about the same time, at its next Tick)."""


@dataclass(slots=True)
class Task:
    """An execution the tools act under; ``scope`` settles it when the task finishes."""

    scope: ExecutionScope
    execution: Execution
    default: bool
    leases: dict[str, Lease] = field(default_factory=dict)
    started_waits: dict[str, Wait] = field(default_factory=dict)


class AgentState:
    """The waitgraph side of one MCP session (see the module's rules)."""

    def __init__(
        self,
        endpoints: list[str],
        token: str,
        agent_id: str,
        *,
        lease_ms: int,
        reader_token: str | None = None,
        prevent: bool = True,
        client: Client | None = None,
        reader: OperatorClient | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.prevent = prevent
        """Ask the cluster to refuse a wait that would close a cycle (False: register it, and a
        cycle is broken by rolling a victim back)."""
        self.endpoints = endpoints
        self.token = token
        self.lease_ms = lease_ms
        self.client: Client | None = client
        self._own_client = client is None
        """Its own client (stdio), or the server's shared one (HTTP), which it never closes."""
        self.reader = (
            reader if reader is not None else OperatorClient(endpoints, token=reader_token) if reader_token else None
        )
        self._own_reader = reader is None
        self.session: Session | None = None
        self.tasks: list[Task] = []
        self.mcp_sessions: set[str] = set()
        """HTTP: the MCP sessions (``mcp-session-id``) acting as this agent now."""
        self.in_flight = 0
        self.last_used_s = 0.0
        self.lock = asyncio.Lock()
        """Held while a call changes the task stack (start, finish, the default task's creation)."""

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        """Join the agent's session (a refused token raises, and a later call tries again)."""
        if self.client is None:
            self.client = Client(self.endpoints, token=self.token, lease_ms=self.lease_ms)
        self.session = self.client.session(self.agent_id, refuse_deadlock=self.prevent, token=self.token)
        try:
            await self.session.open()
        except BaseException:
            self.session = None
            if self._own_client:
                await self.client.close()
                self.client = None
            raise

    async def close(self) -> None:
        """Finish every task (failing it: the client went away mid-task, releasing its leases),
        leave the session, close the channels."""
        for task in reversed(self.tasks):
            with contextlib.suppress(Exception):
                await self._settle(task, "completed" if task.default else "failed", "the MCP session ended")
        self.tasks.clear()
        if self.session is not None:
            with contextlib.suppress(Exception):
                await self.session.close()
        if self.client is not None and self._own_client:
            await self.client.close()
        if self.reader is not None and self._own_reader:
            await self.reader.close()

    @property
    def live(self) -> Session:
        if self.session is None:
            raise RuntimeError("the agent's session is not open")
        return self.session

    # -- tasks -----------------------------------------------------------------------------------

    async def current(self) -> Task:
        """The task calls act under: the innermost started one, or the default task."""
        async with self.lock:
            if not self.tasks:
                await self._push(None, default=True, priority=0, checkpoint=True)
            return self.tasks[-1]

    async def start_task(self, task_id: str | None, *, priority: int, checkpoint: bool) -> Task:
        async with self.lock:
            if not self.tasks:
                await self._push(None, default=True, priority=0, checkpoint=True)
            return await self._push(task_id, default=False, priority=priority, checkpoint=checkpoint)

    async def accept_task(self, timeout_s: float) -> Task:
        """Start the next execution another agent delegated to this one, as the current task."""
        assignment = await self.live.next_assignment(timeout_s)
        async with self.lock:
            scope = self.live.accept(assignment)
            ex = await scope.enter()
            task = Task(scope, ex, default=False)
            self.tasks.append(task)
            return task

    async def _push(self, task_id: str | None, *, default: bool, priority: int, checkpoint: bool) -> Task:
        suffix = uuid.uuid4().hex[:10]
        execution_id = task_id or f"exec:{self.agent_id}-mcp-{suffix}"
        scope = self.live.execution(
            execution_id, run_id=f"run-{self.agent_id}-mcp-{suffix}", priority=priority, checkpoint=checkpoint
        )
        ex = await scope.enter()
        task = Task(scope, ex, default=default)
        self.tasks.append(task)
        return task

    async def finish_task(self, outcome: str, reason: str) -> tuple[Task, list[str]]:
        """Finish the current non-default task: release its leases, close its started waits, then
        complete or fail it. Returns the task and the leases it released."""
        async with self.lock:
            if not self.tasks or self.tasks[-1].default:
                raise LookupError("no started task to finish (the default task lasts as long as the session)")
            task = self.tasks.pop()
        released = await self._settle(task, outcome, reason)
        return task, released

    async def _settle(self, task: Task, outcome: str, reason: str) -> list[str]:
        released = list(task.leases)
        for target in released:
            await self.release(task, target)
        for w in list(task.started_waits.values()):
            await w.exit(None)
        task.started_waits.clear()
        await task.scope.exit(None if outcome == "completed" else RuntimeError(reason or outcome))
        return released

    def task_of(self, target_id: str) -> Task | None:
        """The task that holds a lease on ``target_id``."""
        return next((t for t in reversed(self.tasks) if target_id in t.leases), None)

    # -- leases ----------------------------------------------------------------------------------

    async def acquire(self, task: Task, target_id: str, *, ttl_s: float, wait_s: float, priority: int) -> Lease:
        holding = task.execution.holding(
            target_id, wait=wait_s > 0, timeout_s=wait_s if wait_s > 0 else None, priority=priority, ttl_s=ttl_s
        )
        await holding.enter(interrupt_task=True)
        lease = Lease(target_id, holding.lease, ttl_s, holding, holding.handed_over)
        # Counted from the grant as this process saw it: never before the cluster's own expiry.
        lease.lapses_at_s = asyncio.get_running_loop().time() + ttl_s
        task.leases[target_id] = lease
        return lease

    async def lapse(self) -> list[str]:
        """Forget the leases whose TTL has passed (the cluster released them, or will at its next
        Tick); returns their targets. The Release sent to settle the SDK's count is a no-op once
        the cluster's TTL has acted (``not_held``)."""
        now = asyncio.get_running_loop().time()
        lapsed = []
        for task in self.tasks:
            for target_id in [k for k, v in task.leases.items() if v.lapses_at_s <= now]:
                logger.info("the TTL of %s (%.0f s) has passed", target_id, task.leases[target_id].ttl_s)
                await self.release(task, target_id)
                lapsed.append(target_id)
        return lapsed

    async def release(self, task: Task, target_id: str) -> Lease:
        lease = task.leases.pop(target_id)
        await lease.holding.exit(None)
        return lease

    # -- waits -----------------------------------------------------------------------------------

    def wait(self, task: Task, target_id: str, reason: str) -> Wait:
        return task.execution.waiting_for(target_id, reason=reason)

    def delegate(self, task: Task, agent_id: str, reason: str) -> Delegation:
        return task.execution.delegate(agent_id, reason=reason)

    async def rolled_back(self, task: Task, victim: DeadlockVictim) -> dict[str, Any]:
        """The cluster rolled ``task`` back: its leases and waits are gone. Acknowledge the
        cancellation and start its next generation; say what happened for the model."""
        released = sorted(task.leases)
        task.leases.clear()
        task.started_waits.clear()
        generation = await task.execution.retry()
        return {
            "status": "rolled_back",
            "decision_id": victim.decision_id,
            "epoch": victim.epoch,
            "role": victim.decision.role,
            "task": task.execution.execution_id,
            "released": released,
            "generation": generation,
            "retry": True,
            "message": (
                f"waitgraph broke a deadlock by rolling back this task (decision {victim.decision_id}); "
                f"it released {', '.join(released) or 'nothing'}. The cancellation is acknowledged and the "
                f"task restarted at generation {generation}: re-acquire what you need and call again."
            ),
        }
