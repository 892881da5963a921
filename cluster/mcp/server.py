"""The MCP server: tools, resources, and how a waitgraph answer becomes a tool result.

Rules kept here:
- A tool's arguments are validated by their schema before anything is sent (ids by pattern and
  length, kinds by prefix, numbers by range): a bad argument is a tool error (``isError``) that
  changed nothing. A rejection by the cluster is a tool error too, with its stable code.
- A wait that would close a cycle is refused by the cluster and comes back as a tool error with
  ``error: would_deadlock`` and the cycle's ``path``; nothing was registered.
- A blocked call sends progress notifications while it waits and honours cancellation: the SDK
  closes the wait at its generation on the way out (``CloseWait``), so nothing stays open.
- A victim's blocked call returns a result (not an error): rolled back, by which decision, what
  it released, retry. The server has acknowledged the cancellation already.
- ``_meta.traceparent`` of a call is written into the reason of every wait the call registers,
  so an operator reading the graph can link the wait to the caller's trace. With the ``[otel]``
  extra the call also runs in that trace context (``_meta.traceparent`` and ``tracestate``,
  read by OpenTelemetry's W3C propagator): the SDK's spans are its children, its RPCs carry it to
  the nodes, and its waits store it (docs/observability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, Literal, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from waitgraph.sdk import (
    Conflict,
    DeadlockVictim,
    RpcError,
    SessionLost,
    WaitgraphClientError,
    WouldDeadlock,
)
from waitgraph.sdk.tracing import attached

from .agent import AgentState, Task

__all__ = ["TOOLS", "build_server"]

_NAME = r"[A-Za-z0-9][A-Za-z0-9._\-/@+]*"
ID_MAX = 128
HELD = Annotated[
    str,
    Field(
        pattern=rf"^(resource|pool|reservation):{_NAME}$",
        max_length=ID_MAX,
        description="what to lease: resource:<name> (a file, branch, port, environment), pool:<name> "
        "or reservation:<name>",
    ),
]
WAITED = Annotated[
    str,
    Field(
        pattern=rf"^(artifact|approval|exec):{_NAME}$",
        max_length=ID_MAX,
        description="what to wait for: artifact:<name>, approval:<name> or exec:<name> (another agent's execution)",
    ),
]
PRODUCED = Annotated[
    str,
    Field(
        pattern=rf"^(artifact|approval):{_NAME}$", max_length=ID_MAX, description="artifact:<name> or approval:<name>"
    ),
]
APPROVAL = Annotated[str, Field(pattern=rf"^approval:{_NAME}$", max_length=ID_MAX, description="approval:<name>")]
APPROVER = Annotated[
    str,
    Field(
        pattern=rf"^(human|external|agent):{_NAME}$",
        max_length=ID_MAX,
        description="who decides: human:<id> (a person), external:<id>, or agent:<id> (another agent, which must "
        "then call declare_will_produce on the approval)",
    ),
]
AGENT = Annotated[str, Field(pattern=rf"^{_NAME}$", max_length=ID_MAX, description="the other agent's id")]
TASK_ID = Annotated[
    str | None, Field(pattern=rf"^exec:{_NAME}$", max_length=ID_MAX, description="exec:<name>; default: a fresh id")
]
TIMEOUT = Annotated[float, Field(ge=0, le=3600, description="seconds to block at most")]
REASON = Annotated[str, Field(max_length=200, description="a short reason")]

TOOLS = (
    "lease_acquire",
    "lease_release",
    "wait_for",
    "wait_start",
    "wait_poll",
    "wait_cancel",
    "declare_will_produce",
    "produce",
    "approval_request",
    "approval_decide",
    "delegate",
    "task_accept_delegated",
    "task_start",
    "task_finish",
    "who_holds",
    "my_state",
    "my_cycles",
)
"""Every tool, in the order docs/mcp.md lists them."""

PROGRESS_INTERVAL_S = 1.0


def _result(data: dict[str, Any], *, error: bool = False) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, sort_keys=True))],
        structured_content=data,
        is_error=error,
    )


def _error(code: str, message: str, **fields: Any) -> CallToolResult:
    return _result({"error": code, "message": message, **fields}, error=True)


def _started(task: Task) -> CallToolResult:
    return _result({"status": "started", "task": task.execution.execution_id, "run": task.execution.run_id})


def _refusal(err: WaitgraphClientError) -> CallToolResult:
    """A cluster refusal as a tool error a model can act on."""
    if isinstance(err, WouldDeadlock):
        return _error(
            "would_deadlock",
            "refused: this wait would close a deadlock cycle, so nothing was registered. Re-plan: release or "
            "produce something on the path first. Path: " + " -> ".join(err.path),
            path=list(err.path),
        )
    if isinstance(err, Conflict):
        return _error(
            "held",
            f"{err.message}; pass wait_s > 0 to queue for it, or try later",
            holder=err.fields.get("holder", ""),
        )
    if isinstance(err, SessionLost):
        return _error("session_lost", str(err))
    if isinstance(err, RpcError):
        return _error(err.code or err.status.name.lower(), err.message, fields=err.fields)
    return _error("client_error", str(err))


def _trace_reason(ctx: Context, base: str) -> str:
    """The wait's reason, carrying the caller's W3C ``traceparent`` when its ``_meta`` has one."""
    meta = ctx.request_context.meta or {}
    tp = meta.get("traceparent") if isinstance(meta, dict) else None
    if isinstance(tp, str) and re.fullmatch(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", tp):
        return f"{base} traceparent={tp}"
    return base


@contextlib.asynccontextmanager
async def _progress(ctx: Context, what: str) -> AsyncIterator[None]:
    """Send a progress notification every second while the body blocks."""

    async def tick() -> None:
        n = 0
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            n += 1
            with contextlib.suppress(Exception):
                await ctx.report_progress(n, None, f"{what}: {n} s")

    ticker = asyncio.get_running_loop().create_task(tick())
    try:
        yield
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker


class _Scoped(Protocol):
    """A wait or a delegation: registered on enter, closed on exit (with how the block ended)."""

    async def enter(self, interrupt_task: bool = True) -> object: ...

    async def exit(self, exc: BaseException | None) -> None: ...


async def _blocked(ctx: Context, what: str, scoped: _Scoped, answer: Callable[[], Awaitable[str]]) -> str | None:
    """Register ``scoped``, block on ``answer()`` with progress, and close it on every way out
    (a cancellation too). None: it timed out (closed, nothing left open)."""
    await scoped.enter(interrupt_task=True)
    try:
        async with _progress(ctx, what):
            got = await answer()
    except TimeoutError as exc:
        await scoped.exit(exc)
        return None
    except BaseException as exc:
        await scoped.exit(exc)
        raise
    await scoped.exit(None)
    return got


AgentLookup = Callable[[Context], Awaitable[AgentState]]


def build_server(agent_of: AgentLookup) -> MCPServer:
    """The MCP server; ``agent_of(ctx)`` is the calling MCP session's agent (stdio: the one the
    process was given; HTTP: the bearer token's)."""
    mcp = MCPServer(
        "waitgraph",
        log_level="WARNING",  # stderr is the MCP client's log: one line per call is noise there
        instructions=(
            "Coordinate with other agents through waitgraph: lease what you use exclusively, say what you wait for "
            "before you block, declare what you will produce. A wait that would close a deadlock cycle is refused "
            "at once with error would_deadlock and the cycle's path: re-plan instead of waiting. If a blocked call "
            "returns status rolled_back, waitgraph broke a deadlock by rolling your task back: re-acquire and retry."
        ),
    )

    async def act(ctx: Context, body: Callable[[AgentState, Task], Awaitable[CallToolResult]]) -> CallToolResult:
        try:
            agent = await agent_of(ctx)
        except WaitgraphClientError as err:  # the session could not be joined: say why
            return _refusal(err)
        agent.in_flight += 1
        current: Task | None = None
        try:
            await agent.lapse()
            current = await agent.current()
            with attached(ctx.request_context.meta):
                return await body(agent, current)
        except DeadlockVictim as victim:
            assert current is not None
            return _result(await agent.rolled_back(current, victim))
        except WaitgraphClientError as err:
            return _refusal(err)
        finally:
            agent.in_flight -= 1
            agent.last_used_s = asyncio.get_running_loop().time()

    # -- leases ----------------------------------------------------------------------------------

    @mcp.tool()
    async def lease_acquire(
        target: HELD,
        ctx: Context,
        ttl_s: Annotated[float, Field(gt=0, le=86400, description="the lease ends by itself after this")] = 300,
        wait_s: Annotated[
            float, Field(ge=0, le=3600, description="0: fail at once if held; else queue fairly this long")
        ] = 0,
        priority: Annotated[int, Field(ge=-1000, le=1000, description="place in the queue, higher first")] = 0,
    ) -> CallToolResult:
        """Take an exclusive lease (a file, branch, port, environment as resource:<name>) or a slot of a pool.
        Returns the lease. If queueing for it would close a deadlock cycle, it is refused at once with
        error would_deadlock and the cycle's path, and nothing changes."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            if target in t.leases:
                return _error("already_held", f"this task holds {target} already (lease {t.leases[target].lease})")
            async with _progress(ctx, f"queued for {target}"):
                try:
                    lease = await agent.acquire(t, target, ttl_s=ttl_s, wait_s=wait_s, priority=priority)
                except TimeoutError:
                    return _error("timed_out", f"{target} is still held after {wait_s} s; nothing is held or queued")
            return _result(
                {
                    "status": "held",
                    "target": target,
                    "lease": lease.lease,
                    "ttl_s": ttl_s,
                    "handed_over": lease.handed_over,
                    "task": t.execution.execution_id,
                }
            )

        return await act(ctx, body)

    @mcp.tool()
    async def lease_release(target: HELD, ctx: Context) -> CallToolResult:
        """Release a lease you hold; the next agent queued for it gets it in the same step."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            holder = agent.task_of(target)
            if holder is None:
                return _error("not_held", f"you hold no lease on {target}")
            lease = await agent.release(holder, target)
            return _result({"status": "released", "target": target, "lease": lease.lease})

        return await act(ctx, body)

    # -- waits -----------------------------------------------------------------------------------

    @mcp.tool()
    async def wait_for(target: WAITED, ctx: Context, timeout_s: TIMEOUT = 60) -> CallToolResult:
        """Wait for another agent's artifact, an approval, or an execution (exec:<id>) to finish. The wait is
        registered before this call blocks; a wait that would close a deadlock cycle is refused at once with
        error would_deadlock and the path. Sends progress while it blocks; cancelling the call closes the wait."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            w = agent.wait(t, target, _trace_reason(ctx, f"mcp wait for {target}"))
            reason = await _blocked(ctx, f"waiting for {target}", w, lambda: w.resolved(timeout_s))
            if reason is None:
                return _result({"status": "timed_out", "target": target, "waited_s": timeout_s})
            return _result({"status": "resolved", "target": target, "reason": reason})

        return await act(ctx, body)

    @mcp.tool()
    async def wait_start(target: WAITED, ctx: Context) -> CallToolResult:
        """Register a wait now without blocking (refused at once with the path if it would close a deadlock
        cycle); then call wait_poll until it resolves, or wait_cancel."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            if target in t.started_waits:
                return _error("already_waiting", f"a started wait for {target} is open: poll it")
            w = agent.wait(t, target, _trace_reason(ctx, f"mcp wait for {target}"))
            await w.enter(interrupt_task=False)
            t.started_waits[target] = w
            return _result({"status": "waiting", "target": target, "registered": w.registered})

        return await act(ctx, body)

    @mcp.tool()
    async def wait_poll(
        target: WAITED,
        ctx: Context,
        block_s: Annotated[float, Field(ge=0, le=60, description="block this long for an answer")] = 0,
    ) -> CallToolResult:
        """Poll a wait started by wait_start: pending, or resolved (and then closed)."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            w = t.started_waits.get(target)
            if w is None:
                return _error("no_started_wait", f"no started wait for {target}: call wait_start first")
            try:
                async with _progress(ctx, f"waiting for {target}"):
                    reason = await w.resolved(max(block_s, 0.001))
            except TimeoutError:
                return _result({"status": "pending", "target": target})
            except BaseException as exc:
                del t.started_waits[target]
                await w.exit(exc)
                raise
            del t.started_waits[target]
            await w.exit(None)
            return _result({"status": "resolved", "target": target, "reason": reason})

        return await act(ctx, body)

    @mcp.tool()
    async def wait_cancel(target: WAITED, ctx: Context) -> CallToolResult:
        """Give up a wait started by wait_start: it is closed in the cluster."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            w = t.started_waits.pop(target, None)
            if w is None:
                return _error("no_started_wait", f"no started wait for {target}")
            await w.exit(None)
            return _result({"status": "closed", "target": target})

        return await act(ctx, body)

    # -- producing, approvals --------------------------------------------------------------------

    @mcp.tool()
    async def declare_will_produce(target: PRODUCED, ctx: Context) -> CallToolResult:
        """Declare that your task will produce this artifact (or provide this approval). Agents waiting for it
        now wait for you, and waitgraph can see a cycle through it."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            await t.execution.produces(target)
            return _result({"status": "declared", "target": target, "producer": t.execution.execution_id})

        return await act(ctx, body)

    @mcp.tool()
    async def produce(
        target: Annotated[str, Field(pattern=rf"^artifact:{_NAME}$", max_length=ID_MAX, description="artifact:<name>")],
        ctx: Context,
    ) -> CallToolResult:
        """Produce an artifact: every agent waiting for it wakes up."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            out = await agent.live.produce(target)
            return _result({"status": "produced" if out.ok else "unchanged", "target": target})

        return await act(ctx, body)

    @mcp.tool()
    async def approval_request(approval: APPROVAL, approver: APPROVER, ctx: Context) -> CallToolResult:
        """Ask a named approver (human:<id>, or agent:<id>) for an approval; then wait_for it. A human approver
        makes the wait external: it is never part of a deadlock cycle."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            await agent.live.ensure_target(approval)
            if not approver.startswith("agent:"):
                await agent.live.declare_satisfier(approval, approver)
            return _result({"status": "requested", "approval": approval, "approver": approver})

        return await act(ctx, body)

    @mcp.tool()
    async def approval_decide(approval: APPROVAL, approved: bool, ctx: Context) -> CallToolResult:
        """Grant (approved=true) or deny an approval you were asked for; its waiters wake up."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            out = await agent.live.decide(approval, approved)
            return _result({"status": "granted" if approved else "denied", "approval": approval, "changed": out.ok})

        return await act(ctx, body)

    # -- delegation and tasks --------------------------------------------------------------------

    @mcp.tool()
    async def delegate(agent_id: AGENT, ctx: Context, timeout_s: TIMEOUT = 300) -> CallToolResult:
        """Delegate a child task to another agent and wait for its outcome (completed, failed, cancelled).
        Your task waits for the child, so a child that waits for you is a cycle waitgraph sees."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            d = agent.delegate(t, agent_id, _trace_reason(ctx, f"mcp delegation to {agent_id}"))
            outcome = await _blocked(ctx, f"waiting for {agent_id}", d, lambda: d.result(timeout_s))
            if outcome is None:
                return _result({"status": "timed_out", "child": d.execution_id, "waited_s": timeout_s})
            return _result({"status": outcome, "child": d.execution_id, "agent": agent_id})

        return await act(ctx, body)

    @mcp.tool()
    async def task_accept_delegated(ctx: Context, timeout_s: TIMEOUT = 60) -> CallToolResult:
        """Take the next task another agent delegated to you; it becomes your current task. Report its outcome
        with task_finish."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            try:
                async with _progress(ctx, "waiting for a delegated task"):
                    task = await agent.accept_task(timeout_s)
            except TimeoutError:
                return _result({"status": "none", "waited_s": timeout_s})
            return _started(task)

        return await act(ctx, body)

    @mcp.tool()
    async def task_start(
        ctx: Context,
        task_id: TASK_ID = None,
        priority: Annotated[int, Field(ge=-1000, le=1000)] = 0,
        checkpoint: Annotated[bool, Field(description="true: it can resume, a cheaper deadlock victim")] = True,
    ) -> CallToolResult:
        """Start a task: the execution your next calls act under, until task_finish. Without one, calls act
        under your session's default task."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            return _started(await agent.start_task(task_id, priority=priority, checkpoint=checkpoint))

        return await act(ctx, body)

    @mcp.tool()
    async def task_finish(
        ctx: Context,
        outcome: Literal["completed", "failed"] = "completed",
        reason: REASON = "",
    ) -> CallToolResult:
        """Finish your current task (completed or failed), releasing its leases; a delegating agent gets this
        outcome."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            try:
                task, released = await agent.finish_task(outcome, reason)
            except LookupError as exc:
                return _error("no_task", str(exc))
            return _result({"status": outcome, "task": task.execution.execution_id, "released": released})

        return await act(ctx, body)

    # -- reads -----------------------------------------------------------------------------------

    @mcp.tool()
    async def my_state(ctx: Context) -> CallToolResult:
        """Your tasks, the leases you hold and your open started waits."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            tasks = [
                {
                    "task": task.execution.execution_id,
                    "generation": task.execution.generation,
                    "default": task.default,
                    "leases": [{"target": k, "lease": v.lease, "ttl_s": v.ttl_s} for k, v in task.leases.items()],
                    "waits": sorted(task.started_waits),
                }
                for task in agent.tasks
            ]
            return _result({"agent": agent.agent_id, "tasks": tasks})

        return await act(ctx, body)

    @mcp.tool()
    async def who_holds(
        target: Annotated[
            str,
            Field(
                pattern=rf"^(resource|pool|reservation|artifact|approval|exec):{_NAME}$",
                max_length=ID_MAX,
                description="any target id",
            ),
        ],
        ctx: Context,
    ) -> CallToolResult:
        """Who holds (or will produce) a target and who waits for it."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            if agent.reader is None:
                return _error("no_reader", "this server has no reader token (--reader-token-file): reads are off")
            graph = await agent.reader.graph(limit=10000)
            found = next((tv for tv in graph.targets if tv.target_id == target), None)
            waiters = [
                {"waiter": w.waiter_id, "generation": w.waiter_generation, "reason": w.reason}
                for w in graph.waits
                if w.target_id == target
            ]
            holders = [] if found is None else [h.execution_id for h in found.holders]
            satisfier = found.satisfier_id if found is not None and found.HasField("satisfier_id") else None
            return _result(
                {
                    "target": target,
                    "exists": found is not None,
                    "held_by": holders,
                    "satisfier": satisfier,
                    "waiters": waiters,
                }
            )

        return await act(ctx, body)

    @mcp.tool()
    async def my_cycles(ctx: Context) -> CallToolResult:
        """The deadlock cycles (and open recovery proposals) that involve your tasks."""

        async def body(agent: AgentState, t: Task) -> CallToolResult:
            if agent.reader is None:
                return _error("no_reader", "this server has no reader token (--reader-token-file): reads are off")
            mine = {task.execution.execution_id for task in agent.tasks}
            seen = await agent.reader.cycles()
            cycles = [
                {
                    "digest": c.digest,
                    "members": [m.execution_id for m in c.members],
                    "status": str(c.proposal_status) if c.proposal_status is not None else "not_proposed",
                }
                for c in seen.cycles
                if mine & {m.execution_id for m in c.members}
            ]
            return _result({"cycles": cycles, "epoch": seen.epoch})

        return await act(ctx, body)

    # -- resources -------------------------------------------------------------------------------

    @mcp.resource("waitgraph://decision/{decision_id}", mime_type="application/json")
    async def decision(decision_id: str, ctx: Context) -> str:
        """A recovery decision's explanation: every candidate's score, the epoch, what it released."""
        agent = await agent_of(ctx)
        if agent.reader is None:
            return json.dumps({"error": "no_reader"})
        if not re.fullmatch(r"d[0-9]{1,18}", decision_id):
            return json.dumps({"error": "invalid_argument", "message": "a decision id is d<number>"})
        found = await agent.reader.decision(decision_id)
        if found is None:
            return json.dumps({"error": "not_found", "decision_id": decision_id})
        return json.dumps(
            {
                "decision_id": found.decision_id,
                "kind": str(found.kind),
                "epoch": found.epoch,
                "winner": found.winner_id,
                "policy_version": found.policy_version,
                "scores": [
                    {
                        "execution": s.execution_id,
                        "external_side_effects": s.external_side_effects,
                        "checkpoint": s.checkpoint,
                        "priority": s.priority,
                    }
                    for s in found.scores or ()
                ],
                "released": [{"target": r.target_id, "from": r.execution_id} for r in found.released],
            },
            sort_keys=True,
        )

    @mcp.resource("waitgraph://graph/{agent_id}", mime_type="application/json")
    async def graph(agent_id: str, ctx: Context) -> str:
        """The wait graph around an agent: its executions and their waits (only the caller's own agent)."""
        agent = await agent_of(ctx)
        if agent_id != agent.agent_id:
            return json.dumps({"error": "permission_denied", "message": "you may read only your own graph"})
        if agent.reader is None:
            return json.dumps({"error": "no_reader"})
        g = await agent.reader.graph(agent_id=agent_id, limit=1000)
        return json.dumps(
            {
                "executions": [{"id": e.execution_id, "generation": e.generation} for e in g.executions],
                "waits": [{"waiter": w.waiter_id, "target": w.target_id, "reason": w.reason} for w in g.waits],
                "epoch": g.epoch,
            },
            sort_keys=True,
        )

    return mcp
