"""Tools that need exclusive resources, and tools with side effects, inside an instrumented graph.

Rules kept here:
- :class:`WaitgraphToolMiddleware` (LangChain v1's ``AgentMiddleware``, its ``awrap_tool_call``
  hook) takes every resource a tool needs, in the order declared, through the cluster's fair
  grant queue (``Execution.holding``) before the tool runs, and releases them after it on every
  exit path (return, exception, cancellation): the holdings are ``async with`` scopes.
- A wait the cluster refuses (``would_deadlock``, with the cycle's path) or a rollback of the
  node's execution (``DeadlockVictim``) comes back to the model as an error ``ToolMessage`` it can
  re-plan from; the rolled-back execution starts its next attempt first (``Execution.retry``:
  acknowledged, next generation, new epoch), so the node goes on. ``on_conflict="raise"`` raises
  instead, for the graph's ``RetryPolicy``.
- A tool declares what it needs with :func:`needs` (or the middleware's ``resources`` mapping, by
  tool name, which wins) and what it does to the outside world with :func:`side_effect`, which
  records it in the execution's ledger (a victim-policy input): ``COMMITTED`` when the tool
  returned, ``UNKNOWN`` when it raised midway.

LangChain names this module relies on: ``AgentMiddleware.awrap_tool_call``, ``ToolCallRequest``
(``tool_call``, ``tool``), ``ToolMessage``, a ``StructuredTool``'s ``coroutine``/``func``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from waitgraph.sdk.errors import DeadlockVictim, WouldDeadlock

from ._graph import current_execution, retry_current

__all__ = ["WaitgraphToolMiddleware", "needs", "side_effect"]

F = TypeVar("F", bound=Callable[..., Any])
_NEEDS = "__waitgraph_needs__"


def needs(*target_ids: str) -> Callable[[F], F]:
    """Declare the resources (``resource:``, ``pool:``, ``reservation:``) a tool function holds
    while it runs, in the order the middleware takes them. Put it under ``@tool``."""

    def mark(fn: F) -> F:
        setattr(fn, _NEEDS, tuple(target_ids))
        return fn

    return mark


def side_effect(effect_id: str | None = None, *, compensatable: bool = False) -> Callable[[F], F]:
    """Record what an async tool function does to the outside world in its execution's ledger:
    ``COMMITTED`` once it returned, ``UNKNOWN`` when it raised (it may have happened; the cluster
    asks a human before rolling back an execution with an UNKNOWN, non-compensatable effect).
    ``effect_id`` defaults to the function's name. Put it under ``@tool``."""

    def wrap(fn: F) -> F:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@side_effect needs an async tool function ({fn.__name__} is not one)")
        name = effect_id or fn.__name__

        @functools.wraps(fn)
        async def recorded(*args: Any, **kwargs: Any) -> Any:
            ex = current_execution()
            try:
                result = await fn(*args, **kwargs)
            except BaseException:
                with contextlib.suppress(Exception):
                    await ex.record_side_effect(name, "unknown", compensatable=compensatable)
                raise
            await ex.record_side_effect(name, compensatable=compensatable)
            return result

        return recorded  # type: ignore[return-value]

    return wrap


ToolResult = ToolMessage | Command[Any]


class WaitgraphToolMiddleware(AgentMiddleware):
    """Hold the resources a tool needs while it runs (see the module's rules)::

        agent = create_agent(model, tools=[train], middleware=[WaitgraphToolMiddleware()])
        graph = instrument(agent, session, name="trainer")

    ``resources``: tool name -> the targets it needs (beside :func:`needs`). ``refuse_deadlock``:
    ask the cluster to refuse a wait that would close a cycle (default: the session's).
    ``on_conflict``: ``"message"`` (an error ToolMessage) or ``"raise"``.
    """

    def __init__(
        self,
        resources: Mapping[str, Sequence[str]] | None = None,
        *,
        refuse_deadlock: bool | None = None,
        on_conflict: Literal["message", "raise"] = "message",
        priority: int = 0,
    ) -> None:
        super().__init__()
        self.resources = {name: tuple(targets) for name, targets in (resources or {}).items()}
        self.refuse_deadlock = refuse_deadlock
        self.on_conflict = on_conflict
        self.priority = priority

    def targets(self, request: ToolCallRequest) -> tuple[str, ...]:
        name = str(request.tool_call.get("name", ""))
        if name in self.resources:
            return self.resources[name]
        tool = request.tool
        for fn in (getattr(tool, "coroutine", None), getattr(tool, "func", None), tool):
            declared = getattr(fn, _NEEDS, None)
            if declared:
                return tuple(declared)
        return ()

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]
    ) -> ToolResult:
        targets = self.targets(request)
        if not targets:
            return await handler(request)
        ex = current_execution()
        try:
            async with contextlib.AsyncExitStack() as held:
                for target_id in targets:
                    await held.enter_async_context(
                        ex.holding(target_id, refuse_deadlock=self.refuse_deadlock, priority=self.priority)
                    )
                return await handler(request)
        except WouldDeadlock as refused:
            if self.on_conflict == "raise":
                raise
            path = " -> ".join(refused.path)
            return self._message(
                request,
                f"refused: waiting for {', '.join(targets)} would deadlock ({path}); nothing is held. "
                "Re-plan: first do what the others in this cycle wait for.",
            )
        except DeadlockVictim as victim:
            if self.on_conflict == "raise":
                raise
            await retry_current()  # the next attempt, under the decision's epoch; the cluster released ours
            return self._message(
                request,
                f"rolled back by waitgraph to break a deadlock (decision {victim.decision_id}): the tool did not "
                f"run and everything it held was released. Re-plan before asking for {', '.join(targets)} again.",
            )

    @staticmethod
    def _message(request: ToolCallRequest, text: str) -> ToolMessage:
        return ToolMessage(
            content=text,
            tool_call_id=str(request.tool_call.get("id") or ""),
            name=str(request.tool_call.get("name", "")),
            status="error",
        )
