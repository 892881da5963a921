"""``instrument(graph, session)``: every node task of a compiled graph is a waitgraph execution, for
every invocation of the graph, without a wrapper per node.

Rules kept here:
- An invocation is a run. Its ids are derived from the invocation, never chosen at random when
  the invocation can be found again: with a checkpointer and a ``thread_id`` the run is
  ``run-<name>-<thread>-<turn>`` (turn ``0`` is the thread's first invocation, a later turn is
  named after the checkpoint it starts from) and the key is written into the checkpoints'
  metadata (:data:`RUN_METADATA`), so ``ainvoke(None, config)`` or ``ainvoke(Command(resume=...),
  config)`` finds the same run; without one, LangChain's ``run_id`` of the config, else a fresh
  id. The invocation's root execution is ``exec:<key>``; a node task is
  ``exec:<key>-<node>-<task>``, with LangGraph's own task id (the same task id when LangGraph runs
  the task again: a retry, a resume). A resume in another process finds them existing and adopts
  each as its next attempt (the cluster's ``stale_generation`` says which attempt is current).
- The root waits for each node task while it runs ("parent waits for child"), so a ``Send`` fan-out
  shows as one wait per child, and ``waitgraph cancel RUN`` reaches every task. A graph invoked
  from inside an instrumented node (a subgraph, as a node or called by hand) is delegated: its
  root is a child of that node's execution, created for the subgraph's agent, and the node waits
  for it.
- Nothing is left RUNNING: a node that raises fails its execution (a cluster interruption is
  acknowledged instead), and an invocation that raises or is abandoned (cancelled, its stream
  closed early) fails its root. A paused invocation (``interrupt()``) is not abandoned: its waits
  stay registered, which is what it is doing.
- ``interrupt()`` in a node registers a wait on ``approval:<key>-<interrupt id>`` whose provider
  is the configured approver (a ``human:`` id makes it external; :data:`PARENT`, the node that
  invoked this graph, or an ``exec:`` id can close a cycle); ``Command(resume=...)`` decides it.
- A node's ``checkpoint`` (a victim-policy input) is true when the graph has a checkpointer: a
  rolled-back node is re-run from it. A root never claims one: rolling back a whole invocation
  loses its in-flight work.

LangGraph names this module relies on (public, or metadata LangGraph documents): the compiled
graph's ``nodes`` (``PregelNode.bound``, ``PregelNode.copy``), ``Pregel.copy``, ``astream``,
``aget_state``, ``checkpointer``, the task metadata ``langgraph_node`` and
``langgraph_checkpoint_ns``, ``GraphInterrupt`` (``args[0]``: the interrupts), ``Command.resume``.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.pregel import Pregel
from langgraph.types import Command

from waitgraph.sdk.errors import (
    AlreadyExists,
    CancellationRequested,
    DeadlockVictim,
    StaleGeneration,
    WaitgraphClientError,
)
from waitgraph.sdk.session import Execution, Session, Wait

__all__ = ["PARENT", "RUN_METADATA", "Instrumentation", "NodeScope", "current_execution", "instrument"]

AnyPregel = Pregel[Any, Any, Any, Any]
G = TypeVar("G", bound=AnyPregel)

PARENT = "parent"
"""``approver=PARENT``: the execution of the node that invoked this graph (a supervisor) provides
its approvals, so a supervisor/subtask approval cycle is visible to the cluster."""
RUN_METADATA = "waitgraph_run"
"""The checkpoint metadata key that carries the invocation's key (config ``metadata``)."""
_CONFIG_KEY = "__waitgraph_invocation"
"""Where the running invocation travels in ``config["configurable"]`` (``__`` keys stay out of
checkpoint metadata)."""
_SAFE = re.compile(r"[^A-Za-z0-9._\-]+")
_NAME_ROOM = 40
_ADOPT_ATTEMPTS = 3
_KEY_ROOM = 64
"""An invocation's key stays short enough for its node ids (``exec:KEY-NODE-TASK``) to fit the
core's 128 characters, however deep the subgraphs nest."""


def _safe(text: str, room: int = _NAME_ROOM) -> str:
    """``text`` as a piece of an id: the id alphabet, at most ``room`` characters (a hash beyond)."""
    cleaned = _SAFE.sub("-", text).strip("-._") or "x"
    if len(cleaned) <= room and cleaned == text:
        return cleaned
    return f"{cleaned[: room - 9]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


@dataclass(slots=True, eq=False)
class NodeScope:
    """One node task of an invocation, while it runs: its execution and the invocation."""

    execution: Execution
    invocation: Invocation


_NODE: ContextVar[NodeScope | None] = ContextVar("waitgraph_langgraph_node", default=None)


async def retry_current() -> int:
    """Start the next attempt of the running node task (after the cluster rolled it back) and
    have its invocation's root wait for it again; returns the new generation."""
    scope = _NODE.get()
    if scope is None:
        return await current_execution().retry()
    generation = await scope.execution.retry()
    await scope.invocation.watch(scope.execution)
    return generation


def current_execution() -> Execution:
    """The execution of the instrumented node task running in this task (tools and code called
    from a node use it to hold, wait, produce and record side effects)."""
    scope = _NODE.get()
    if scope is None:
        raise RuntimeError(
            "no instrumented LangGraph node is running here: wrap the compiled graph with "
            "`waitgraph.sdk.langgraph.instrument(graph, session)` and call it with ainvoke/astream"
        )
    return scope.execution


@dataclass(slots=True, eq=False)
class Invocation:
    """One invocation of an instrumented graph: its run, root and the node executions it made."""

    key: str
    run_id: str
    session: Session
    root: Execution
    checkpoint: bool
    parent: NodeScope | None
    nodes: dict[str, Execution] = field(default_factory=dict)
    settled: dict[str, str] = field(default_factory=dict)
    """Node execution id -> how its last attempt ended (``completed``, ``failed``, ``interrupted``)."""
    paused_nodes: set[str] = field(default_factory=set)
    root_waits: dict[str, Wait] = field(default_factory=dict)
    approval_waits: dict[str, list[Wait]] = field(default_factory=dict)
    approvals: dict[str, tuple[str, Session]] = field(default_factory=dict)
    """Interrupt id -> (approval id, the session that decides it on resume)."""
    delegation: Wait | None = None
    failed: bool = False
    paused: bool = False

    @property
    def top(self) -> Invocation:
        return self.parent.invocation.top if self.parent is not None else self

    async def watch(self, ex: Execution) -> None:
        """The root waits for this attempt of a node task ("parent waits for child")."""
        old = self.root_waits.pop(ex.execution_id, None)
        if old is not None:
            await _quietly(old.exit(None))
        w = Wait(
            self.root,
            ex.execution_id,
            target_generation=ex.generation,
            reason=f"runs node task {ex.execution_id}",
            immediate=True,
        )
        await w.enter(interrupt_task=False)
        self.root_waits[ex.execution_id] = w


class Instrumentation:
    """What :func:`instrument` attaches to the graph: its settings and the invocations it ran in
    this process (an invocation resumed here finds its execution handles again)."""

    def __init__(
        self,
        session: Session,
        *,
        name: str,
        approver: str | None,
        priority: int,
        produces: Sequence[str],
        checkpoint: bool | None,
    ) -> None:
        self.session = session
        self.name = _safe(name)
        self.approver = approver
        self.priority = priority
        self.produces = tuple(produces)
        self.checkpoint = checkpoint
        self.invocations: dict[str, Invocation] = {}
        """By key, every invocation this process started or resumed (newest last)."""

    # -- an invocation ---------------------------------------------------------------------------------

    async def _key(self, graph: AnyPregel, input: Any, config: RunnableConfig, parent: NodeScope | None) -> str:
        if parent is not None:
            return _safe(f"{parent.execution.execution_id.removeprefix('exec:')}-{self.name}", _KEY_ROOM)
        configurable = config.get("configurable") or {}
        thread = configurable.get("thread_id")
        if thread is not None and graph.checkpointer not in (None, False):
            snapshot = await graph.aget_state(config)
            resuming = input is None or isinstance(input, Command)
            known = (snapshot.metadata or {}).get(RUN_METADATA)
            if resuming and isinstance(known, str):
                return known
            at = (snapshot.config.get("configurable") or {}).get("checkpoint_id")
            turn = _short_hash(str(at)) if at else "0"
            return _safe(f"{self.name}-{_safe(str(thread))}-{turn}", _KEY_ROOM)
        run = config.get("run_id")
        return _safe(f"{self.name}-{_short_hash(str(run)) if run is not None else uuid.uuid4().hex[:10]}", _KEY_ROOM)

    async def enter(
        self, graph: AnyPregel, input: Any, config: RunnableConfig | None
    ) -> tuple[Invocation, RunnableConfig]:
        config = cast(RunnableConfig, dict(config or {}))
        parent = _NODE.get()
        key = await self._key(graph, input, config, parent)
        inv = self.invocations.get(key)
        if inv is None:
            resuming = parent is not None or input is None or isinstance(input, Command)
            inv = await self._start(graph, key, parent, resuming)
        elif inv.failed:  # resumed after it raised: the root's next attempt, producing again
            await inv.root.retry()
            inv.failed = False
            for artifact in self.produces:
                await inv.root.produces(artifact)
        if parent is not None and inv.delegation is None:
            inv.delegation = Wait(
                parent.execution,
                inv.root.execution_id,
                target_generation=inv.root.generation,
                reason=f"delegated to subgraph {self.name}",
                immediate=True,
            )
            await inv.delegation.enter(interrupt_task=True)
        inv.paused = False
        if isinstance(input, Command) and input.resume is not None:
            await self._decide(inv.top, input.resume)
        configurable = dict(config.get("configurable") or {})
        configurable[_CONFIG_KEY] = inv
        config["configurable"] = configurable
        if parent is None:
            config["metadata"] = {**(config.get("metadata") or {}), RUN_METADATA: key}
        return inv, config

    async def _start(self, graph: AnyPregel, key: str, parent: NodeScope | None, resuming: bool) -> Invocation:
        root_id = f"exec:{key}"
        if parent is None:
            run_id = f"run-{key}"
            root = self.session.handle(root_id, run_id=run_id)
            create = root.create(priority=self.priority)
            checkpoint = graph.checkpointer not in (None, False)
        else:
            run_id = parent.execution.run_id or ""
            # Created by the invoking node's agent for this graph's agent: a delegation, the only way
            # an agent hands work to another, and the child is in the parent's cancel scope.
            create = Execution(parent.execution.session, root_id, run_id).create(
                parent_id=parent.execution.execution_id, agent_id=self.session.agent_id, priority=self.priority
            )
            root = self.session.handle(root_id, run_id=run_id)
            checkpoint = graph.checkpointer is not False and parent.invocation.checkpoint
        # One write after the other: a try at issuing a node's create, start and the root's wait
        # together (one batch) had one refused no_execution, not yet explained (BENCHMARKS.md).
        if await _created(create, root, resuming):
            await root.start()
        inv = Invocation(
            key,
            run_id,
            self.session,
            root,
            checkpoint if self.checkpoint is None else self.checkpoint,
            parent,
        )
        self.invocations[key] = inv
        for artifact in self.produces:
            await root.produces(artifact)
        return inv

    async def _decide(self, top: Invocation, resume: Any) -> None:
        """``Command(resume=...)`` provides the approvals it answers: every pending one, or those
        of the interrupt ids of a resume map."""
        chosen = (
            [i for i in top.approvals if i in resume]
            if isinstance(resume, Mapping) and any(i in resume for i in top.approvals)
            else list(top.approvals)
        )
        for interrupt_id in chosen:
            approval_id, session = top.approvals.pop(interrupt_id)
            await session.decide(approval_id)

    async def finish(self, inv: Invocation) -> None:
        """The graph returned: complete the root, unless it paused on an interrupt."""
        if inv.paused:
            return
        for w in inv.root_waits.values():
            await _quietly(w.exit(None))
        inv.root_waits.clear()
        await inv.root.complete()
        if inv.delegation is not None:
            await _quietly(inv.delegation.exit(None))
            inv.delegation = None
        self.invocations.pop(inv.key, None)

    async def abandon(self, inv: Invocation, exc: BaseException) -> None:
        """The invocation raised or was abandoned: settle everything still open (nothing RUNNING)."""
        if isinstance(exc, GraphInterrupt):
            inv.paused = True  # a subgraph paused on an interrupt: it waits, it did not fail
            return
        for execution_id, ex in inv.nodes.items():
            if execution_id in inv.paused_nodes or execution_id not in inv.settled:
                await settle(ex, exc)
                inv.settled[execution_id] = "failed"
        inv.paused_nodes.clear()
        for waits in inv.approval_waits.values():
            for w in waits:
                await _quietly(w.exit(exc))
        inv.approval_waits.clear()
        for w in inv.root_waits.values():
            await _quietly(w.exit(exc))
        inv.root_waits.clear()
        await settle(inv.root, exc)
        inv.failed = True
        if inv.delegation is not None:
            await _quietly(inv.delegation.exit(exc))
            inv.delegation = None

    # -- a node task -----------------------------------------------------------------------------------

    async def begin_node(self, inv: Invocation, execution_id: str) -> Execution:
        ex = inv.nodes.get(execution_id)
        if ex is None:
            ex = self.session.handle(execution_id, run_id=inv.run_id)
            create = ex.create(parent_id=inv.root.execution_id, priority=self.priority, checkpoint=inv.checkpoint)
            if await _created(create, ex, resuming=True):  # a task id is the invocation's own
                await ex.start()
            inv.nodes[execution_id] = ex
            inv.settled.pop(execution_id, None)
            await inv.watch(ex)
            return ex
        elif execution_id in inv.paused_nodes and ex.interrupt is None:
            inv.paused_nodes.discard(execution_id)  # resumed: its approvals were decided
            for w in inv.approval_waits.pop(execution_id, []):
                await _quietly(w.exit(None))
        else:  # run again (LangGraph's retry, a resume after a rollback or a failure): next attempt
            inv.paused_nodes.discard(execution_id)
            for w in inv.approval_waits.pop(execution_id, []):
                await _quietly(w.exit(None))
            await ex.retry()
        inv.settled.pop(execution_id, None)
        await inv.watch(ex)
        return ex

    async def end_node(self, inv: Invocation, ex: Execution, exc: BaseException | None) -> None:
        execution_id = ex.execution_id
        if exc is None or (isinstance(exc, GraphBubbleUp) and not isinstance(exc, GraphInterrupt)):
            try:
                await ex.complete()
            except (DeadlockVictim, CancellationRequested) as late:
                await settle(ex, late)
                inv.settled[execution_id] = "interrupted"
                raise
            inv.settled[execution_id] = "completed"
        elif isinstance(exc, GraphInterrupt):
            await self._pause(inv, ex, exc)
        else:
            await settle(ex, exc)
            inv.settled[execution_id] = "interrupted" if ex.interrupt is not None else "failed"
        if execution_id in inv.settled:
            w = inv.root_waits.pop(execution_id, None)
            if w is not None:
                await _quietly(w.exit(None))

    async def _pause(self, inv: Invocation, ex: Execution, exc: GraphInterrupt) -> None:
        """``interrupt()``: register the approval wait of each interrupt raised in this node (one
        raised in a subgraph it called was registered there), and leave the execution waiting."""
        inv.paused = True
        inv.paused_nodes.add(ex.execution_id)
        top = inv.top
        interrupts = exc.args[0] if exc.args else ()
        for interrupt in interrupts:
            interrupt_id = str(getattr(interrupt, "id", ""))
            if not interrupt_id or interrupt_id in top.approvals:
                continue  # raised in a subgraph this node called: registered there
            approval_id = f"approval:{inv.key}-{_safe(interrupt_id, 12)}"
            decider = await self._declare_approver(inv, approval_id)
            w = Wait(ex, approval_id, reason=f"interrupt: {getattr(interrupt, 'value', '')}", immediate=True)
            await w.enter(interrupt_task=False)
            inv.approval_waits.setdefault(ex.execution_id, []).append(w)
            top.approvals[interrupt_id] = (approval_id, decider)

    async def _declare_approver(self, inv: Invocation, approval_id: str) -> Session:
        """Create the approval with its provider; returns the session that decides it on resume."""
        approver = self.approver
        if approver == PARENT:
            if inv.parent is None:
                raise ValueError(
                    f"approver=PARENT, but graph {self.name} was not invoked from an instrumented node: "
                    "give a human:... or exec:... approver"
                )
            await inv.parent.execution.provides(approval_id)
            return inv.parent.execution.session
        await self.session.ensure_target(approval_id)
        if approver is not None:
            await self.session.declare_satisfier(approval_id, approver)
        return self.session


async def _created(create: Awaitable[Any], ex: Execution, resuming: bool) -> bool:
    """Create ``ex``; True when this call created it (start it next). When it exists already and
    ``resuming``, it was made by this invocation in another process (or before a restart): adopt it,
    as its next attempt, started (False). The cluster says which attempt is current."""
    try:
        await create
        return True
    except AlreadyExists as exc:
        if exc.code != "execution_exists" or not resuming:
            raise
    for _ in range(_ADOPT_ATTEMPTS):
        try:
            await ex.retry()
            return False
        except StaleGeneration as exc:
            current = exc.field_int("current")
            if current is None or current <= ex.generation:
                raise
            ex.generation = current
    raise RuntimeError(f"{ex.execution_id} moved on while it was being adopted; resume again")


async def _quietly(aw: Any) -> None:
    """Leaving a wait after the fact: a close the cluster did already, or an interruption the
    invocation reports by itself, must not hide the invocation's own outcome."""
    with contextlib.suppress(WaitgraphClientError):
        await aw


async def settle(ex: Execution, exc: BaseException) -> None:
    """An attempt that ended with ``exc``: acknowledge the cluster's interruption (a yielder was not
    cancelled), or fail it."""
    interrupt = ex.interrupt
    own = isinstance(exc, DeadlockVictim | CancellationRequested) and exc.execution_id == ex.execution_id
    with contextlib.suppress(WaitgraphClientError):
        if interrupt is not None or own:
            if not (isinstance(interrupt, DeadlockVictim) and interrupt.decision.role == "yielded"):
                await ex.ack_cancel()
        else:
            await ex.fail(f"{type(exc).__name__}: {exc}")


# -- the graph -----------------------------------------------------------------------------------------


def _wrap(inst: Instrumentation, bound: Any) -> RunnableLambda[Any, Any]:
    async def run(input: Any, config: RunnableConfig) -> Any:
        inv = (config.get("configurable") or {}).get(_CONFIG_KEY)
        if not isinstance(inv, Invocation):  # called outside an instrumented invocation
            return await bound.ainvoke(input, config)
        metadata = config.get("metadata") or {}
        node = str(metadata.get("langgraph_node", "node"))
        task = str(metadata.get("langgraph_checkpoint_ns", "")).rpartition(":")[2] or uuid.uuid4().hex
        ex = await inst.begin_node(inv, f"exec:{inv.key}-{_safe(node, 24)}-{_safe(task, 8)[:8]}")
        token = _NODE.set(NodeScope(ex, inv))
        try:
            out = await bound.ainvoke(input, config)
        except BaseException as exc:
            await inst.end_node(inv, ex, exc)
            raise
        finally:
            _NODE.reset(token)
        await inst.end_node(inv, ex, None)
        return out

    def refuse(input: Any, config: RunnableConfig) -> Any:
        raise TypeError("an instrumented graph runs with ainvoke/astream: its waitgraph session is asynchronous")

    return RunnableLambda(refuse, afunc=run, name=getattr(bound, "name", None))


class _Instrumented:
    """Mixed into the compiled graph's own class: ``astream`` (which ``ainvoke`` uses, and which
    LangGraph calls when the graph is a subgraph) runs inside an invocation."""

    _waitgraph: Instrumentation

    def __init__(self, *args: Any, _waitgraph: Instrumentation, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._waitgraph = _waitgraph

    async def astream(self, input: Any, config: RunnableConfig | None = None, **kw: Any) -> AsyncIterator[Any]:
        inst = self._waitgraph
        graph = cast(AnyPregel, self)
        inv, config = await inst.enter(graph, input, config)
        try:
            async for chunk in super().astream(input, config, **kw):  # type: ignore[misc]
                yield chunk
            await inst.finish(inv)
        except BaseException as exc:
            await inst.abandon(inv, exc)
            raise


_CLASSES: dict[type, type] = {}


def instrument(
    graph: G,
    session: Session,
    *,
    name: str | None = None,
    approver: str | None = None,
    priority: int = 0,
    produces: Sequence[str] = (),
    checkpoint: bool | None = None,
) -> G:
    """The same compiled graph, with every node task a waitgraph execution of ``session``'s agent
    and every invocation a run (see the module's rules). Invoke it as before, with ``ainvoke`` or
    ``astream``, as often and as concurrently as you like.

    ``name`` (default: the graph's) starts every id. ``approver`` provides the approvals of its
    ``interrupt()`` calls: ``"human:alice"`` (an outside approver), :data:`PARENT` (the node that
    invoked this graph) or an ``exec:`` id. ``priority`` is every execution's victim-policy
    priority (higher is spared first). ``produces``: artifacts each invocation's root declares it
    produces (a node or tool produces them with ``current_execution().session.produce``).
    ``checkpoint`` overrides what the checkpointer says. A subgraph added as a node is
    instrumented the same way (named after the node, the same session and settings), unless it
    was instrumented already.
    """
    inst = Instrumentation(
        session,
        name=name or graph.get_name(),
        approver=approver,
        priority=priority,
        produces=produces,
        checkpoint=checkpoint,
    )
    nodes = {}
    for node_name, node in graph.nodes.items():
        bound = node.bound
        if isinstance(bound, Pregel) and not isinstance(bound, _Instrumented):
            bound = instrument(bound, session, name=node_name, approver=approver, priority=priority)
        nodes[node_name] = node.copy({"bound": _wrap(inst, bound)}) if node_name != "__start__" else node
    cls = _CLASSES.get(type(graph))
    if cls is None:
        cls = type(f"Instrumented{type(graph).__name__}", (_Instrumented, type(graph)), {})
        _CLASSES[type(graph)] = cls
    attrs = {k: v for k, v in graph.__dict__.items() if k != "__orig_class__"}
    attrs["nodes"] = nodes
    return cast(G, cls(**attrs, _waitgraph=inst))
