"""One node by hand: a graph node that is one waitgraph execution, re-run by LangGraph's own retry
when the cluster rolls it back. :func:`~waitgraph.sdk.langgraph.instrument` does this for every
node of a compiled graph and every invocation; this is for a node wired by hand::

    from waitgraph.sdk.langgraph import deadlock_retry, execution_node

    async def review(state: State, ex: Execution) -> dict[str, Any]:
        async with ex.holding("resource:browser-9"):
            ...
        return {"log": ["reviewed"]}

    graph.add_node(
        "review",
        execution_node(session, review, execution_id="exec:review", run_id="run-7", checkpoint=True),
        retry_policy=deadlock_retry(),
    )

Rules kept here:
- One node object is one execution for one graph run: its first call creates and starts it, a
  normal return completes it (the canonical commit, fenced like any), an exception other than the
  cluster's own interruption fails it. The function gets the :class:`~.session.Execution` to
  hold, wait, delegate and record side effects with.
- :class:`~.errors.DeadlockVictim` (and :class:`~.errors.CancellationRequested`) leave the node
  as they are, so LangGraph's ``RetryPolicy`` sees them: :func:`deadlock_retry` retries exactly
  those. The re-run starts the next generation first (``Execution.retry``: acknowledge,
  RetryExecution, start), so it acts under the epoch of the decision that rolled it back; a run
  that was cancelled refuses the retry (``RunCancelled``), which ends the graph as LangGraph does
  with any error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from langgraph.types import RetryPolicy

from waitgraph.sdk.errors import CancellationRequested, DeadlockVictim
from waitgraph.sdk.session import Execution, Session

from ._graph import settle

__all__ = ["ExecutionNode", "deadlock_retry", "execution_node"]

S = TypeVar("S")
NodeFn = Callable[[S, Execution], Awaitable[Any]]


class ExecutionNode(Generic[S]):
    """An async LangGraph node (``await node(state)``) backed by one waitgraph execution."""

    def __init__(
        self,
        session: Session,
        fn: NodeFn[S],
        *,
        execution_id: str,
        run_id: str,
        priority: int = 0,
        checkpoint: bool = False,
        unique_evidence: bool = False,
    ) -> None:
        self.session = session
        self.fn = fn
        self.execution_id = execution_id
        self.run_id = run_id
        self.priority = priority
        self.checkpoint = checkpoint
        self.unique_evidence = unique_evidence
        self.execution: Execution | None = None
        self.attempts = 0
        """How many times LangGraph ran the node (a re-run after a rollback counts)."""
        self.interruptions: list[DeadlockVictim | CancellationRequested] = []
        """What the cluster raised in the node's runs, in order."""
        self.__name__ = getattr(fn, "__name__", execution_id)  # LangGraph names a node after it

    async def __call__(self, state: S) -> Any:
        ex = await self._begin()
        self.attempts += 1
        try:
            update = await self.fn(state, ex)
        except BaseException as exc:
            if isinstance(exc, DeadlockVictim | CancellationRequested):
                self.interruptions.append(exc)
            # An interruption is acknowledged now, so the cluster's cancellation converges even if
            # LangGraph gives up on the node; anything else fails the attempt.
            await settle(ex, exc)
            raise
        await ex.complete()
        return update

    async def _begin(self) -> Execution:
        if self.execution is None:
            scope = self.session.execution(
                self.execution_id,
                run_id=self.run_id,
                priority=self.priority,
                checkpoint=self.checkpoint,
                unique_evidence=self.unique_evidence,
            )
            self.execution = await scope.enter()
        elif self.execution.interrupt is not None:
            await self.execution.retry()  # the next generation, under the decision's epoch
        return self.execution


execution_node = ExecutionNode
"""``execution_node(session, fn, execution_id=, run_id=, checkpoint=...)``: a LangGraph node running
``fn(state, execution)`` as that execution of ``session``'s agent (see the module's rules); pair it
with ``retry_policy=deadlock_retry()``."""


def deadlock_retry(max_attempts: int = 3, initial_interval_s: float = 0.05) -> RetryPolicy:
    """LangGraph's ``RetryPolicy`` for waitgraph nodes: re-run the node when the cluster chose it as
    a deadlock victim (or a tie-break loser), and only then; every other error ends the graph."""
    return RetryPolicy(
        initial_interval=initial_interval_s,
        backoff_factor=2.0,
        max_interval=1.0,
        max_attempts=max_attempts,
        jitter=False,
        retry_on=DeadlockVictim,
    )
