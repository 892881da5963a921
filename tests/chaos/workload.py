"""The chaos workload: real agents over gRPC doing what the seeds describe, every call recorded.

    history = History()
    wl = Workload(endpoints, credentials, seed=7, history=history)
    await wl.run(deadline_monotonic=time.monotonic() + 60)

Rules kept here:
- Each agent of ``credentials.agents`` is one history process running scenarios one after the
  other, chosen by ``random.Random(f"{seed}:{agent}")``: deadlock rings of two and three
  executions over exclusive resources (the cluster detects, votes, commits an epoch and cancels a
  victim; the victim acknowledges, retries at its next generation presenting the new epoch, and
  also sends a late close from its old generation and an acquire of a free target under its old
  epoch, which must be no-ops or refused, the last by the fence alone), cancellation of a run with
  a tree at least :data:`TREE_MIN_DEPTH` deep while a second task keeps creating children and a
  deep member waits in the queue of a resource another run holds (let go while the cancel is
  being acknowledged: it must not be handed to the member asked to stop), pool permits and
  exclusive leases, an artifact producer and its waiter. Reads of the
  epoch (Status) and of run cancel generations (Graph) go to random nodes, fresh or, labelled,
  stale. Two reader processes read the same concurrently; an observer records the cluster's
  effects (WatchEvents with the admin token) for the checker.
- Every write gets its own request id and goes first to a random node (followers forward it); the
  SDK transport retries it with the *same* id after UNAVAILABLE / DEADLINE_EXCEEDED for up to
  ``OP_BUDGET_S``; still no answer is ``info`` (unknown). A seeded ``HASTY_FRACTION`` of writes
  gets one attempt of ``HASTY_BUDGET_S`` only (to one node, no retries), so faults turn them
  unknown. An unknown write is either sent again with the same id later (a new invoke/completion
  pair; the cluster's idempotency table answers) or, for a seeded ``ABANDON_FRACTION``, never
  again: the checker resolves it from the replicas' final idempotency tables.
- Nothing here raises on a cluster error: partitions and killed nodes become ``fail``/``info``
  entries and the scenario gives up cleanly (fails its executions) or moves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import random
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from waitgraph.dev.localcluster import Credentials
from waitgraph.sdk import Client, RpcError, SessionClosed
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.effects import (
    Acquired,
    CancelGenerationRaised,
    CancellationStable,
    CancelRequested,
    ExecutionStateChanged,
    GenerationAdvanced,
    VictimChosen,
    Yielded,
)
from waitgraph.statemachine.enums import EffectOutcome, ExecStatus
from waitgraph.statemachine.outcome import Outcome

from .history import FAIL, FENCE_PROBE, INFO, OK, History, Op

logger = logging.getLogger("waitgraph.chaos.workload")

OP_BUDGET_S = 3.0
"""How long one write keeps retrying (same request id) before it is recorded as unknown."""
CALL_TIMEOUT_S = 1.5
HASTY_FRACTION = 0.15
RACE_FRACTION = 0.1
"""A seeded share of writes is sent twice at once, with one request id, to two random nodes: a
retry racing its original. One may apply; the other must get the recorded outcome (duplicate)."""
COST_FRACTION = 0.5
"""The share of executions that record a cost (RecordCost adds: applied twice, it shows)."""
HASTY_BUDGET_S = 0.3
"""A seeded fraction of writes gets one short attempt (its own deadline, no retries): one that hits
a paused, isolated or killed node, or a leader that lost its quorum, ends ``info`` (unknown)."""
ABANDON_FRACTION = 0.5
"""Of the unknown writes, the share never sent again: the checker resolves them from the final state."""
READ_BUDGET_S = 2.0
DEADLOCK_WAIT_S = 8.0
"""How long a ring waits for the cluster to pick a victim before it gives up (fails its members)."""
STABLE_WAIT_S = 4.0
LEASE_MS = 20_000
HEARTBEAT_S = 3.0
READER_PERIOD_S = 0.08
OPERATOR = "operator"
"""The history process of the operator's writes (the operator token's name: actor ``operator:operator``)."""
OPERATOR_CANCEL_FRACTION = 0.4
"""The share of deep-tree cancellations the operator issues (OperatorService CancelRun), not the agent."""
LIVELOCK_ROUNDS = 4
"""How often a livelock ring re-forms its cycle: the third recovery of one signature within the
livelock window is a tie-break (a winner; the others yield)."""
STOP_GRACE_S = OP_BUDGET_S + 4.0
"""After the deadline, how long scenarios in flight may take to finish before they are cancelled."""

OBSERVED_KINDS = (
    "RecoveryConfigured",  # the voter set follows the membership (replace-node)
    "EpochCommitted",
    "VictimChosen",
    "VoteRecorded",
    "RecoveryProposed",
    "Released",
    "WaitRegistered",
    "WaitClosed",
    "ExecutionStateChanged",
    "CancelGenerationRaised",
    "CancellationStable",
    "Yielded",
    "GenerationAdvanced",
    "CostRecorded",
    "Acquired",  # every grant, an Acquire's or a hand-off's: who received it, at which generation
)
_UNKNOWN_STATUS = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
    }
)
_STOPPING = frozenset({ExecStatus.CANCEL_REQUESTED, ExecStatus.CANCELLING})


def plain(value: Any) -> Any:
    """A JSON-able copy of an effect's fields (enums by value)."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def outcome_value(out: Outcome) -> dict[str, Any]:
    """What the history keeps of an outcome: result, code, duplicate, and the effects' kinds."""
    value: dict[str, Any] = {"result": out.result.value, "duplicate": out.duplicate}
    if out.code:
        value["code"] = out.code
    kinds = [type(fx).__name__ for fx in out.effects]
    if kinds:
        value["effects"] = kinds[:12]
    for fx in out.effects:
        if isinstance(fx, (CancelGenerationRaised, GenerationAdvanced)):
            value["generation"] = fx.after
        elif isinstance(fx, Acquired):
            value["lease"] = fx.lease
    return value


@dataclass(slots=True)
class Sent:
    """The answer to one recorded write."""

    outcome: Outcome | None = None
    error: RpcError | None = None
    unknown: bool = False

    @property
    def ok(self) -> bool:
        return self.outcome is not None

    @property
    def code(self) -> str:
        if self.outcome is not None:
            return self.outcome.code or self.outcome.result.value
        if self.error is not None:
            return self.error.code or str(self.error.status)
        return "unknown"


@dataclass(slots=True)
class Pending:
    """A write whose outcome is unknown: sent again with the same request id later."""

    f: str
    key: str | None
    value: Any
    command: C.Command
    request_id: str


# == the agents ====================================================================================


class Agent:
    """One agent process: its clients, its session, its event stream and what it learned there."""

    service = "agent"

    def __init__(self, wl: Workload, agent_id: str, token: str) -> None:
        self.wl = wl
        self.agent_id = agent_id
        self.rng = random.Random(f"{wl.seed}:{agent_id}")
        self._clients(token)
        self.status: dict[str, tuple[int, ExecStatus]] = {}
        self.cancel_requests: dict[str, CancelRequested] = {}
        self.yielded: dict[str, Yielded] = {}
        self.rolled_back_at: dict[str, int] = {}
        """execution -> the epoch its last rollback (or yield) committed: the fence it must present."""
        self._decision_epochs: dict[str, int] = {}
        self.stable_scopes: set[str] = set()
        self.epoch = 0
        self.changed = asyncio.Event()
        self.runs: list[str] = []
        self.scenarios: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.session_ok = False
        self.operator = Operator(wl, agent_id)

    def _clients(self, token: str) -> None:
        eps = self.wl.endpoints
        # One client per first node: a write goes to the node the rng picked, then the transport
        # follows leader hints and rotates; the same request id throughout.
        self.writers = {
            ep: Client(
                [ep] + [e for e in eps if e != ep],
                token,
                call_timeout_s=CALL_TIMEOUT_S,
                retry_deadline_s=OP_BUDGET_S,
            )
            for ep in eps
        }
        self.hasty = {
            ep: Client([ep], token, call_timeout_s=HASTY_BUDGET_S, retry_deadline_s=HASTY_BUDGET_S) for ep in eps
        }
        self.abandoned = 0
        k = self.rng.randrange(len(eps))
        self.home = Client(eps[k:] + eps[:k], token, retry_deadline_s=OP_BUDGET_S)
        self.seq = 0
        self.pending: list[Pending] = []

    # -- plumbing -----------------------------------------------------------------------------------

    def request_id(self) -> str:
        self.seq += 1
        return f"{self.agent_id}-{self.wl.run_tag}-{self.seq:06d}-{self.rng.getrandbits(32):08x}"

    async def write(self, f: str, key: str | None, command: C.Command, value: Any = None) -> Sent:
        rid = self.request_id()
        if self.rng.random() < RACE_FRACTION:
            sent = await self._race(f, key, value, command, rid)
        else:
            sent = await self._send(f, key, value, command, rid, hasty=self.rng.random() < HASTY_FRACTION)
        if sent.unknown:
            if self.rng.random() < ABANDON_FRACTION:
                self.abandoned += 1  # left for the checker to resolve from what the cluster applied
            else:
                self.pending.append(Pending(f, key, value, command, rid))
        elif sent.error is not None and sent.error.code == "no_session":
            await self.join()
        return sent

    async def _send(
        self, f: str, key: str | None, value: Any, command: C.Command, rid: str, hasty: bool = False
    ) -> Sent:
        h = self.wl.history
        node = self.rng.choice(self.wl.endpoints)
        client = (self.hasty if hasty else self.writers)[node]
        inv = h.invoke(self.agent_id, node, f, key, value, request_id=rid)
        try:
            out = await client.submit(command, request_id=rid, service=self.service)
        except RpcError as err:
            where = err.endpoint or node
            detail = {"code": err.code, "status": err.status.name if err.status else None}
            if err.status in _UNKNOWN_STATUS:
                h.complete(inv, INFO, detail, node=where, error=_short(err))
                return Sent(error=err, unknown=True)
            h.complete(inv, FAIL, detail, node=where, error=_short(err))
            return Sent(error=err)
        except asyncio.CancelledError:
            h.complete(inv, INFO, None, error="cancelled at the end of the run")
            raise
        except (SessionClosed, OSError, grpc.RpcError) as exc:
            h.complete(inv, INFO, None, error=f"{type(exc).__name__}: {exc}")
            return Sent(unknown=True)
        h.complete(inv, OK, outcome_value(out), node=client.endpoint)
        return Sent(outcome=out)

    async def _race(self, f: str, key: str | None, value: Any, command: C.Command, rid: str) -> Sent:
        """The same write twice at once (one request id, each to its own random node): what the
        caller learns is the answer that says most (applied, else rejected, else unknown)."""
        both = await asyncio.gather(*(self._send(f, key, value, command, rid) for _ in range(2)))
        return next((s for s in both if s.ok), None) or next((s for s in both if not s.unknown), both[0])

    async def resolve_pending(self) -> None:
        """Send every unknown write again with its request id (one attempt each)."""
        still: list[Pending] = []
        for p in self.pending:
            sent = await self._send(p.f, p.key, p.value, p.command, p.request_id)
            if sent.unknown:
                still.append(p)
        self.pending = still

    async def read_epoch(self) -> None:
        await self.wl.read_epoch(self.agent_id, self.rng)

    async def read_cancel(self, run_id: str) -> None:
        await self.wl.read_cancel(self.agent_id, self.rng, run_id)

    async def maybe_read(self) -> None:
        if self.rng.random() < 0.35:
            await self.read_epoch()
        if self.runs and self.rng.random() < 0.25:
            await self.read_cancel(self.rng.choice(self.runs[-4:]))

    # -- session and events -------------------------------------------------------------------------

    async def join(self) -> bool:
        sent = await self.write("join", None, C.JoinSession(agent_id=self.agent_id, lease_ms=LEASE_MS))
        self.session_ok = sent.ok
        return sent.ok

    async def heartbeats(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await self.home.submit(C.Heartbeat(agent_id=self.agent_id), service="agent")
            except RpcError as err:
                if err.code == "no_session":
                    await self.join()
            except (SessionClosed, OSError, grpc.RpcError):
                pass

    async def watch(self, started: asyncio.Event) -> None:
        try:
            async for ev in self.home.events(on_started=lambda _c: started.set()):
                self.on_effect(ev.effect)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the stream gave up: the agent goes on, blind to its events
            self.wl.history.note(f"{self.agent_id}: event stream stopped: {exc}")
            started.set()

    def on_effect(self, fx: Any) -> None:
        match fx:
            case ExecutionStateChanged():
                self.status[fx.execution_id] = (fx.generation, fx.after)
                decided = self._decision_epochs.get(fx.cause.removeprefix("victim:"))
                if fx.cause.startswith("victim:") and decided is not None:
                    self.rolled_back_at[fx.execution_id] = decided
            case VictimChosen() if fx.epoch is not None:
                self.epoch = max(self.epoch, fx.epoch)
                self._decision_epochs[fx.decision_id] = fx.epoch
            case Yielded():
                self.epoch = max(self.epoch, fx.epoch)
                self.yielded[fx.execution_id] = fx
                self.rolled_back_at[fx.execution_id] = fx.epoch
            case CancelRequested():
                self.cancel_requests[fx.execution_id] = fx
            case CancellationStable():
                self.stable_scopes.add(fx.scope_id)
            case _:
                return
        self.changed.set()

    async def wait_for(self, pred: Callable[[], bool], timeout_s: float) -> bool:
        end = time.monotonic() + min(timeout_s, max(0.0, self.wl.deadline - time.monotonic()) + 1.0)
        while not pred():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.25))
        return True

    def stopping(self, execution_id: str, generation: int) -> bool:
        got = self.status.get(execution_id)
        return got is not None and got[0] == generation and got[1] in _STOPPING

    # -- the loop -----------------------------------------------------------------------------------

    async def start(self) -> None:
        started = asyncio.Event()
        self._tasks.append(asyncio.get_running_loop().create_task(self.watch(started)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(started.wait(), 10)
        await self.join()
        self._tasks.append(asyncio.get_running_loop().create_task(self.heartbeats()))

    async def loop(self) -> None:
        scenarios: list[tuple[str, float, Callable[[str], Awaitable[None]]]] = [
            ("deadlock2", 3.0, lambda tag: deadlock_ring(self, tag, 2)),
            ("deadlock3", 1.5, lambda tag: deadlock_ring(self, tag, 3)),
            ("cancel_tree", 2.5, lambda tag: cancel_tree(self, tag)),
            ("pool", 1.5, lambda tag: pool_permits(self, tag)),
            ("artifact", 1.0, lambda tag: artifact(self, tag)),
            ("cross_review", 1.5, lambda tag: cross_agent_cycle(self, tag, approval=False)),
            ("cross_approval", 1.0, lambda tag: cross_agent_cycle(self, tag, approval=True)),
            ("livelock_ring", 0.7, lambda tag: deadlock_ring(self, tag, 2, rounds=LIVELOCK_ROUNDS)),
        ]
        iteration = 0
        while time.monotonic() < self.wl.deadline:
            iteration += 1
            if not self.session_ok:
                await self.join()
            if self.pending:
                await self.resolve_pending()
            name, _, play = self.rng.choices(scenarios, weights=[w for _, w, _ in scenarios])[0]
            tag = f"{self.agent_id}-{self.wl.run_tag}-{iteration}"
            self.scenarios[name] = self.scenarios.get(name, 0) + 1
            await play(tag)
            await self.maybe_read()

    async def finish(self) -> None:
        """After the deadline: resolve what is unknown, leave the session, stop the tasks."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.resolve_pending(), OP_BUDGET_S + 2)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.write("leave", None, C.LeaveSession(agent_id=self.agent_id)), OP_BUDGET_S + 2)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.operator.close()
        for client in [self.home, *self.writers.values(), *self.hasty.values()]:
            with contextlib.suppress(Exception):
                await client.close()

    def yielded_at(self, ex: Exe) -> bool:
        """A tie-break made ``ex`` (at its generation) yield: it released what it held and now
        waits behind the winner."""
        fx = self.yielded.get(ex.execution_id)
        return fx is not None and fx.generation == ex.generation


class Operator(Agent):
    """The operator's writes (OperatorService, operator token), recorded under process
    :data:`OPERATOR`. One per agent, so the choices it makes (node, a short attempt) follow that
    agent's seeded stream; the request ids name the agent too, so they never collide."""

    service = "operator"

    def __init__(self, wl: Workload, for_agent: str) -> None:
        self.wl = wl
        self.agent_id = OPERATOR
        self.for_agent = for_agent
        self.rng = random.Random(f"{wl.seed}:{for_agent}:operator")
        self._clients(wl.credentials.operator)

    def request_id(self) -> str:
        self.seq += 1
        return f"{OPERATOR}.{self.for_agent}-{self.wl.run_tag}-{self.seq:06d}-{self.rng.getrandbits(32):08x}"

    async def join(self) -> bool:
        return True

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.resolve_pending(), OP_BUDGET_S + 2)
        for client in [self.home, *self.writers.values(), *self.hasty.values()]:
            with contextlib.suppress(Exception):
                await client.close()


def _short(err: BaseException, limit: int = 160) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# == the scenarios =================================================================================


@dataclass
class Exe:
    """An execution the scenario drives: id, run, generation, and whether it is over."""

    execution_id: str
    run_id: str
    generation: int = 1
    done: bool = False
    exists: bool = False
    """CreateExecution was acknowledged (it may still have failed to start)."""
    holds: list[str] = field(default_factory=list)


async def _new(a: Agent, ex: Exe, parent: str | None = None, observed_cancel: int = 0, **kw: Any) -> bool:
    created = await a.write(
        "create",
        ex.execution_id,
        C.CreateExecution(
            execution_id=ex.execution_id,
            run_id=ex.run_id,
            parent_id=parent,
            observed_cancel_generation=observed_cancel,
            **kw,
        ),
        {"run": ex.run_id, "parent": parent, "observed_cancel_generation": observed_cancel},
    )
    if not created.ok:
        return False
    ex.exists = True
    started = await a.write(
        "start",
        ex.execution_id,
        C.StartExecution(execution_id=ex.execution_id, generation=1, observed_cancel_generation=observed_cancel),
        {"generation": 1, "observed_cancel_generation": observed_cancel},
    )
    if started.ok and a.rng.random() < COST_FRACTION:
        cost = a.rng.randrange(1, 50)
        await a.write(
            "record_cost",
            ex.execution_id,
            C.RecordCost(execution_id=ex.execution_id, generation=1, cost=cost),
            {"generation": 1, "cost": cost},
        )
    return started.ok


async def _target(a: Agent, target_id: str, slots: int = 1) -> bool:
    sent = await a.write("create_target", target_id, C.CreateTarget(target_id=target_id, slots=slots), {"slots": slots})
    return sent.ok or (sent.error is not None and sent.error.code in ("target_exists", "already_exists"))


async def _acquire(a: Agent, ex: Exe, target_id: str, observed_epoch: int | None = None, f: str = "acquire") -> Sent:
    epoch = a.epoch if observed_epoch is None else observed_epoch
    sent = await a.write(
        f,
        target_id,
        C.Acquire(target_id=target_id, execution_id=ex.execution_id, generation=ex.generation, observed_epoch=epoch),
        {"execution": ex.execution_id, "generation": ex.generation, "observed_epoch": epoch},
    )
    if sent.ok:
        ex.holds.append(target_id)
    return sent


async def _register_wait(
    a: Agent, ex: Exe, target_id: str, target_generation: int, version: int = 1, f: str = "register_wait"
) -> Sent:
    return await a.write(
        f,
        f"{ex.execution_id}>{target_id}",
        C.RegisterWait(
            waiter_id=ex.execution_id,
            waiter_generation=ex.generation,
            target_id=target_id,
            target_generation=target_generation,
            reason="chaos workload",
            edge_version=version,
        ),
        {"waiter_generation": ex.generation, "target_generation": target_generation, "edge_version": version},
    )


async def _close_wait(a: Agent, ex: Exe, target_id: str, generation: int, version: int, f: str = "close_wait") -> Sent:
    return await a.write(
        f,
        f"{ex.execution_id}>{target_id}",
        C.CloseWait(
            waiter_id=ex.execution_id,
            waiter_generation=generation,
            target_id=target_id,
            edge_version=version,
            reason="chaos workload",
        ),
        {"waiter_generation": generation, "edge_version": version},
    )


async def _complete(a: Agent, ex: Exe, observed_cancel: int = 0, f: str = "complete") -> Sent:
    sent = await a.write(
        f,
        ex.execution_id,
        C.CompleteExecution(
            execution_id=ex.execution_id, generation=ex.generation, observed_cancel_generation=observed_cancel
        ),
        {"generation": ex.generation, "run": ex.run_id, "observed_cancel_generation": observed_cancel},
    )
    if sent.ok:
        ex.done = True
    return sent


async def _fail(a: Agent, ex: Exe, reason: str) -> None:
    if ex.done or not ex.exists:
        return
    sent = await a.write(
        "fail_execution",
        ex.execution_id,
        C.FailExecution(execution_id=ex.execution_id, generation=ex.generation, reason=reason),
        {"generation": ex.generation},
    )
    if sent.error is not None and not sent.unknown and a.stopping(ex.execution_id, ex.generation):
        # Asked to stop (a victim whose scenario gave up): acknowledge, or its cancellation stays
        # open and the leader keeps re-emitting it.
        await _ack(a, ex, 0)
    ex.done = sent.ok or (sent.error is not None and not sent.unknown)


async def _ack(a: Agent, ex: Exe, cancel_generation: int) -> Sent:
    return await a.write(
        "ack_cancel",
        ex.execution_id,
        C.AckCancel(
            execution_id=ex.execution_id,
            generation=ex.generation,
            cancel_generation=cancel_generation,
            side_effects=EffectOutcome.NONE,
        ),
        {"generation": ex.generation, "cancel_generation": cancel_generation},
    )


async def _retry(a: Agent, ex: Exe) -> bool:
    sent = await a.write(
        "retry",
        ex.execution_id,
        C.RetryExecution(execution_id=ex.execution_id, generation=ex.generation),
        {"generation": ex.generation},
    )
    if not sent.ok or sent.outcome is None:
        return False
    after = next((fx.after for fx in sent.outcome.effects if isinstance(fx, GenerationAdvanced)), ex.generation + 1)
    ex.generation = after
    ex.holds.clear()
    started = await a.write(
        "start",
        ex.execution_id,
        C.StartExecution(execution_id=ex.execution_id, generation=after, observed_cancel_generation=0),
        {"generation": after, "observed_cancel_generation": 0},
    )
    return started.ok


async def deadlock_ring(a: Agent, tag: str, n: int, rounds: int = 1) -> None:
    """The seeds' cycle: each member holds its own resource, then waits for the next one's.

    With ``rounds`` > 1 (a livelock ring) the rolled-back victims retry and re-form the very same
    cycle (same members, so the same signature) until a round ends in a tie-break: the cluster
    names a winner and makes the others yield (they release and wait behind it, no rollback).
    """
    members = [Exe(f"exec:{tag}-x{i}", f"run-{tag}-{i}") for i in range(n)]
    resources = [f"resource:{tag}-r{i}" for i in range(n)]
    try:
        for r in resources:
            if not await _target(a, r):
                return
        for ex in members:
            if not await _new(a, ex, priority=a.rng.randrange(3), checkpoint=a.rng.random() < 0.5):
                return
        leases: list[int] = []
        for ex, r in zip(members, resources, strict=True):
            got = await _acquire(a, ex, r)
            if not got.ok or got.outcome is None:
                return
            leases.append(next((fx.lease for fx in got.outcome.effects if isinstance(fx, Acquired)), 1))
        waiting = list(members)
        victims: list[Exe] = []
        yielded: list[Exe] = []
        for round_no in range(rounds):
            for ex in waiting:
                i = members.index(ex)
                want, lease = resources[(i + 1) % n], leases[(i + 1) % n]
                if not await _wait_for_held(a, ex, want, lease, version=round_no + 1):
                    return
            await a.maybe_read()
            found = await a.wait_for(
                lambda: any(a.stopping(m.execution_id, m.generation) or a.yielded_at(m) for m in members),
                DEADLOCK_WAIT_S,
            )
            if not found:
                a.wl.history.note(f"{tag}: no victim within {DEADLOCK_WAIT_S}s (round {round_no + 1})")
                return
            victims = [m for m in members if a.stopping(m.execution_id, m.generation)]
            yielded = [m for m in members if a.yielded_at(m) and m not in victims]
            a.wl.count("ring rounds: victim rolled back" if victims else "ring rounds: tie-break, yielded", 1)
            for v in victims:
                old_generation = v.generation
                await _ack(a, v, 0)
                if not await _retry(a, v):
                    continue
                await _stale_attempt(a, v, old_generation, members, resources)
            for y in yielded:
                y.holds.clear()  # the tie-break released what it held
            if yielded or round_no == rounds - 1:
                break
            # Re-form the same cycle: each retried victim takes its own resource back (a new lease),
            # then every member waits again for the next one's, naming the lease it is held under.
            for v in victims:
                i = members.index(v)
                got = await _acquire(a, v, resources[i])
                if not got.ok and got.error is not None and got.error.code == "target_held":
                    # the victim's release handed it to the member queued for it (a fair grant
                    # queue, docs/queues.md): that member lets it go again, so the very same
                    # cycle re-forms
                    prev = members[(i - 1) % n]
                    await a.write(
                        "release",
                        resources[i],
                        C.Release(target_id=resources[i], execution_id=prev.execution_id, generation=prev.generation),
                        {"execution": prev.execution_id, "generation": prev.generation},
                    )
                    got = await _acquire(a, v, resources[i])
                if not got.ok or got.outcome is None:
                    return
                leases[i] = next((fx.lease for fx in got.outcome.effects if isinstance(fx, Acquired)), leases[i])
            waiting = list(members)
        await a.maybe_read()
        later = set(map(id, victims + yielded))
        for s in [m for m in members if id(m) not in later]:  # the survivors, or the tie-break's winner
            i = members.index(s)
            want = resources[(i + 1) % n]
            for _ in range(3):
                got = await _acquire(a, s, want)
                if got.ok or got.unknown:
                    break
                await asyncio.sleep(0.2)
            await _complete(a, s)
        for v in victims + yielded:
            i = members.index(v)
            for r in sorted((resources[i], resources[(i + 1) % n])):
                await _acquire(a, v, r)
            await _complete(a, v)
    finally:
        for ex in members:
            await _fail(a, ex, "chaos scenario gave up")


async def _stale_attempt(a: Agent, v: Exe, old_generation: int, members: list[Exe], resources: list[str]) -> None:
    """What the rolled-back attempt of ``v`` may still send, raced against the new one: its new
    generation first opens a wait on the same target its old one waited on (held by the next
    member), then the old generation closes and re-registers that edge (both must leave the newer
    edge alone: a no-op, a refusal), and the fence probe (:func:`_fence_probe`)."""
    i = members.index(v)
    n = len(members)
    want = resources[(i + 1) % n]
    fresh = await _acquire(a, v, want)
    if fresh.ok:
        v.holds.remove(want)  # free after all: nothing to race against; leave it for the ring
        await a.write(
            "release",
            want,
            C.Release(target_id=want, execution_id=v.execution_id, generation=v.generation),
            {"execution": v.execution_id, "generation": v.generation},
        )
    elif (
        fresh.error is not None
        and (lease := fresh.error.field_int("lease")) is not None
        and (await _register_wait(a, v, want, lease, 1)).ok
    ):
        a.wl.count("stale closes raced against a newer open edge", 1)
    await _close_wait(a, v, want, old_generation, 1, f="close_wait_stale")
    await _register_wait(a, Exe(v.execution_id, v.run_id, old_generation), want, 1, 2, f="register_wait_stale")
    await _fence_probe(a, v)


async def _fence_probe(a: Agent, v: Exe) -> None:
    """The StaleEpoch fence, probed so that only the fence can refuse: the rolled-back execution
    (at its new generation, live) asks for a target of its own that nobody holds or waits on,
    presenting the epoch just below the one it was rolled back at. Any other refusal would come
    before the fence in the core's Acquire (an unknown target, a session lost, an old generation)
    and says nothing; an acknowledgement, or a refusal by the target, means the fence let it by.
    (Asking for a target somebody holds, as this probe once did, was refused ``target_held``
    whenever the fence was missing: with fair hand-off the victim's own resource has always gone
    to the next waiter first.)"""
    fenced = a.rolled_back_at.get(v.execution_id)
    if not fenced:
        a.wl.count("fence probes: rollback epoch not seen", 1)
        return
    free = f"resource:{v.execution_id.removeprefix('exec:')}-fence-g{v.generation}"
    if not await _target(a, free):
        a.wl.count("fence probes: target not created", 1)
        return
    sent = await a.write(
        FENCE_PROBE,
        free,
        C.Acquire(target_id=free, execution_id=v.execution_id, generation=v.generation, observed_epoch=fenced - 1),
        {"execution": v.execution_id, "generation": v.generation, "observed_epoch": fenced - 1, "fenced": fenced},
    )
    a.wl.count(f"fence probes: {sent.code if not sent.unknown else 'unknown'}", 1)


async def _wait_for_held(
    a: Agent, ex: Exe, want: str, lease: int, owner: Agent | None = None, version: int = 1
) -> bool:
    """Try ``want``; held by someone else (Conflict): register the wait on it. False: gave up."""
    owner = owner or a
    tried = await _acquire(owner, ex, want)
    if tried.ok:
        return True
    held = tried.error.field_int("lease") if tried.error is not None else None
    reg = await _register_wait(owner, ex, want, held or lease, version)
    return reg.ok


async def cross_agent_cycle(a: Agent, tag: str, approval: bool) -> None:
    """A cycle across two agents, as the first seed tells it. Review: A's execution X holds the
    browser and waits for the review B's execution Y produces, while Y, seeking more evidence,
    waits for the browser. Approval: a supervisor S (A) waits for its subtask T's result (B), and T
    delegates synchronously back, waiting for S's approval. The cluster must break it across the
    two agents' sessions; each side acknowledges, retries and finishes with its own token."""
    partners = [b for b in a.wl.agents if b is not a]
    if not partners:
        return
    b = a.rng.choice(partners)  # from every other agent, so the draw follows the seed alone
    if not b.session_ok:
        return
    x, y = Exe(f"exec:{tag}-sup" if approval else f"exec:{tag}-x", f"run-{tag}-a"), Exe(f"exec:{tag}-y", f"run-{tag}-b")
    for_x = f"artifact:{tag}-result" if approval else f"artifact:{tag}-review"
    for_y = f"artifact:{tag}-approval" if approval else f"resource:{tag}-browser"
    owners = ((a, x), (b, y))
    try:
        if not (await _target(a, for_x) and await _target(a, for_y)):
            return
        if not (await _new(a, x) and await _new(b, y)):
            return
        if not (await _declare(b, for_x, y)).ok:
            return
        if approval:
            if not (await _declare(a, for_y, x)).ok:
                return
        elif not (await _acquire(a, x, for_y)).ok:
            return
        if not (await _register_wait(a, x, for_x, 1)).ok:
            return
        if approval:
            if not (await _register_wait(b, y, for_y, 1)).ok:
                return
        elif not await _wait_for_held(a, y, for_y, 1, owner=b):
            return
        await a.maybe_read()

        def stopped() -> list[tuple[Agent, Exe]]:
            return [(o, e) for o, e in owners if o.stopping(e.execution_id, e.generation)]

        if not await a.wait_for(lambda: bool(stopped()), DEADLOCK_WAIT_S):
            a.wl.history.note(f"{tag}: no victim within {DEADLOCK_WAIT_S}s (cross-agent)")
            return
        a.wl.count("cross-agent cycles broken (approval)" if approval else "cross-agent cycles broken (review)", 1)
        for owner, v in stopped():
            await _ack(owner, v, 0)
            await _retry(owner, v)
        if not approval:
            for _ in range(3):  # the browser, free once the victim let go of it (or still X's)
                got = await _acquire(b, y, for_y)
                if got.ok or got.unknown:
                    break
                await asyncio.sleep(0.2)
        await b.write("produce", for_x, C.ProduceArtifact(artifact_id=for_x, version=1), {"version": 1})
        if approval:
            await a.write("produce", for_y, C.ProduceArtifact(artifact_id=for_y, version=1), {"version": 1})
        await _complete(b, y)
        await _complete(a, x)
    finally:
        for owner, ex in owners:
            await _fail(owner, ex, "chaos scenario gave up")


async def _declare(a: Agent, target_id: str, producer: Exe) -> Sent:
    return await a.write(
        "declare_satisfier",
        target_id,
        C.DeclareSatisfier(
            target_id=target_id,
            target_generation=1,
            satisfier_id=producer.execution_id,
            satisfier_generation=producer.generation,
        ),
    )


TREE_MIN_DEPTH = 3
"""The least depth of a cancelled tree (root at 0): the cancellation must reach great-grandchildren."""


async def cancel_tree(a: Agent, tag: str) -> None:
    """Cancel a run with a deep tree while children are still being created under it, one deep
    member queued for a resource of another run's execution that lets it go meanwhile."""
    run = f"run-{tag}"
    root = Exe(f"exec:{tag}-root", run)
    pool = f"pool:{a.agent_id}-{a.wl.run_tag}-tree"
    created: list[Exe] = []
    a.runs.append(run)
    a.wl.runs.append(run)
    if not await _new(a, root):
        await _fail(a, root, "chaos scenario gave up")
        return
    created.append(root)
    await _target(a, pool, slots=2)
    depth, fanout = a.rng.choice([(TREE_MIN_DEPTH, 2), (TREE_MIN_DEPTH + 1, 1)])
    frontier = [root]
    for level in range(depth):
        nxt = []
        for parent in frontier:
            for k in range(fanout):
                child = Exe(f"{parent.execution_id}.{level}{k}", run)
                started = await _new(a, child, parent=parent.execution_id)
                if child.exists:
                    created.append(child)
                if started:
                    nxt.append(child)
        frontier = nxt
    if frontier:
        await _acquire(a, frontier[0], pool)  # a permit the cancellation must release
    holder = await _queue_behind_holder(a, tag, frontier[-1]) if frontier else None
    try:
        await _cancel_tree(a, run, created, holder)
    finally:
        if holder is not None:
            await _complete(a, holder)
            await _fail(a, holder, "chaos scenario gave up")


async def _queue_behind_holder(a: Agent, tag: str, deep: Exe) -> Exe | None:
    """Another run's execution holds a resource; ``deep`` (the tree's deepest level) queues for it.
    Returns the holder, or None when the set-up did not go through."""
    held = f"resource:{tag}-q"
    holder = Exe(f"exec:{tag}-holder", f"run-{tag}-h")
    if not (await _target(a, held) and await _new(a, holder)):
        await _fail(a, holder, "chaos scenario gave up")
        return None
    got = await _acquire(a, holder, held)
    if got.ok and (await _wait_for_held(a, deep, held, 1)) and held not in deep.holds:
        a.wl.count("deep members queued behind another run's holder", 1)
    return holder


async def _cancel_tree(a: Agent, run: str, created: list[Exe], holder: Exe | None) -> None:
    stop = asyncio.Event()

    async def spawner() -> None:
        k = 0
        while not stop.is_set() and k < 40:
            parent = created[a.rng.randrange(len(created))]
            child = Exe(f"{parent.execution_id}.s{k}", run)
            k += 1
            await _new(a, child, parent=parent.execution_id)
            if child.exists:
                created.append(child)
            await asyncio.sleep(0.01)

    task = asyncio.get_running_loop().create_task(spawner())
    await asyncio.sleep(a.rng.uniform(0.0, 0.3))
    # The agent cancels its own run, or an operator does (OperatorService CancelRun, its own token).
    canceller: Agent = a.operator if a.rng.random() < OPERATOR_CANCEL_FRACTION else a
    if canceller is a.operator:
        a.wl.count("deep-tree runs cancelled by the operator", 1)
    cancelled = await canceller.write(
        "cancel_run", run, C.CancelRun(run_id=run, observed_cancel_generation=0, reason="chaos cancel"), {"observed": 0}
    )
    for target in list(holder.holds) if holder is not None else ():
        # Let go while the queued member is asked to stop and has not acknowledged yet: the
        # hand-off must pass it by (the checker's grants_only_to_live_generations).
        await a.write(
            "release",
            target,
            C.Release(target_id=target, execution_id=holder.execution_id, generation=holder.generation),
            {"execution": holder.execution_id, "generation": holder.generation},
        )
    await asyncio.sleep(a.rng.uniform(0.05, 0.2))
    stop.set()
    await task
    generation = 1
    if cancelled.ok and cancelled.outcome is not None:
        generation = outcome_value(cancelled.outcome).get("generation", 1)
    await a.read_cancel(run)
    roll = a.rng.random()
    if roll < 0.3:  # someone who saw generation 0: a recorded no-op
        await canceller.write(
            "cancel_run", run, C.CancelRun(run_id=run, observed_cancel_generation=0, reason="late"), {"observed": 0}
        )
    elif roll < 0.55 and cancelled.ok:  # a re-raise from the generation just read
        again = await canceller.write(
            "cancel_run",
            run,
            C.CancelRun(run_id=run, observed_cancel_generation=generation, reason="again"),
            {"observed": generation},
        )
        if again.ok and again.outcome is not None:
            generation = outcome_value(again.outcome).get("generation", generation)
    if cancelled.ok and len(created) > 1:
        # A worker of the cancelled generation tries the canonical commit: it must be refused.
        await _complete(a, created[-1], observed_cancel=0, f="complete_cancelled")
    await a.read_cancel(run)
    for ex in created:
        await _ack(a, ex, generation)
    if cancelled.ok:
        await a.wait_for(lambda: f"run:{run}" in a.stable_scopes, STABLE_WAIT_S)
    else:
        for ex in reversed(created):
            await _fail(a, ex, "chaos cancel did not go through")


async def pool_permits(a: Agent, tag: str) -> None:
    """Executions of every agent contend for the permits of one shared pool and one lease."""
    pool, lease = f"pool:chaos-{a.wl.run_tag}-shared", f"resource:chaos-{a.wl.run_tag}-lease"
    await _target(a, pool, slots=2)
    await _target(a, lease)
    ex = Exe(f"exec:{tag}-p", f"run-{tag}")
    if not await _new(a, ex):
        await _fail(a, ex, "chaos scenario gave up")
        return
    try:
        for target in (pool, lease) if a.rng.random() < 0.5 else (pool,):
            for _ in range(4):
                got = await _acquire(a, ex, target)
                if got.ok or got.unknown:
                    break
                await asyncio.sleep(a.rng.uniform(0.05, 0.2))
        await asyncio.sleep(a.rng.uniform(0.05, 0.3))
        for target in list(ex.holds):
            await a.write(
                "release",
                target,
                C.Release(target_id=target, execution_id=ex.execution_id, generation=ex.generation),
                {"execution": ex.execution_id, "generation": ex.generation},
            )
        await _complete(a, ex)
    finally:
        await _fail(a, ex, "chaos scenario gave up")


async def artifact(a: Agent, tag: str) -> None:
    """A producer declared PRODUCED_BY, a waiter on the artifact, the artifact produced."""
    art = f"artifact:{tag}-out"
    producer, waiter = Exe(f"exec:{tag}-prod", f"run-{tag}-p"), Exe(f"exec:{tag}-wait", f"run-{tag}-w")
    try:
        if not await _target(a, art):
            return
        if not (await _new(a, producer) and await _new(a, waiter)):
            return
        await _declare(a, art, producer)
        await _register_wait(a, waiter, art, 1)
        await asyncio.sleep(a.rng.uniform(0.0, 0.2))
        await a.write("produce", art, C.ProduceArtifact(artifact_id=art, version=1), {"version": 1})
        await _complete(a, producer)
        await _complete(a, waiter)
    finally:
        await _fail(a, producer, "chaos scenario gave up")
        await _fail(a, waiter, "chaos scenario gave up")


# == the workload ==================================================================================


class Workload:
    """Agents, readers and an observer against one cluster, until a deadline."""

    def __init__(self, endpoints: list[str], credentials: Credentials, seed: int, history: History) -> None:
        if not endpoints:
            raise ValueError("the workload needs at least one endpoint")
        if not credentials.agents:
            raise ValueError("the workload needs at least one agent token")
        self.endpoints = list(endpoints)
        self.credentials = credentials
        self.seed = seed
        self.run_tag = f"s{seed}{secrets.token_hex(2)}"
        """In every id and request id: the choices follow the seed, but a second run against the
        same cluster must not collide with the first one's executions and request ids."""
        self.history = history
        self.deadline = 0.0
        self.runs: list[str] = []
        self.agents: list[Agent] = []
        self._readers = {
            ep: Client([ep], credentials.operator, call_timeout_s=READ_BUDGET_S, retry_deadline_s=READ_BUDGET_S)
            for ep in self.endpoints
        }
        self.observer_started = False
        self.stats: Counter[str] = Counter()
        """What the scenarios saw happen (victims, tie-breaks, operator cancels...), for the report."""

    def count(self, what: str, n: int = 1) -> None:
        self.stats[what] += n

    # -- reads --------------------------------------------------------------------------------------

    async def read_epoch(self, process: str, rng: random.Random, fresh: bool | None = None) -> None:
        fresh = rng.random() < 0.7 if fresh is None else fresh
        node = rng.choice(self.endpoints)
        h = self.history
        inv = h.invoke(process, node, "read_epoch", "epoch", {"fresh": fresh}, stale=not fresh)
        try:
            st = await self._readers[node].status(fresh=fresh)
        except asyncio.CancelledError:
            h.complete(inv, INFO, None, error="cancelled")
            raise
        except (RpcError, SessionClosed, OSError, grpc.RpcError) as err:
            h.complete(inv, FAIL, None, error=_short(err))
            return
        h.complete(
            inv,
            OK,
            {"epoch": st.epoch, "applied_index": st.applied_index, "stale": st.stale, "node_id": st.node_id},
            node=st.grpc_address or node,
        )

    async def read_cancel(self, process: str, rng: random.Random, run_id: str, fresh: bool | None = None) -> None:
        fresh = rng.random() < 0.7 if fresh is None else fresh
        node = rng.choice(self.endpoints)
        h = self.history
        inv = h.invoke(process, node, "read_cancel", run_id, {"fresh": fresh}, stale=not fresh)
        try:
            g = await self._readers[node].graph(run_id=run_id, limit=1, fresh=fresh)
        except asyncio.CancelledError:
            h.complete(inv, INFO, None, error="cancelled")
            raise
        except (RpcError, SessionClosed, OSError, grpc.RpcError) as err:
            h.complete(inv, FAIL, None, error=_short(err))
            return
        runs = [r for r in g.runs if r.run_id == run_id]
        generation = runs[0].cancel_generation if runs else 0
        h.complete(
            inv,
            OK,
            {
                "generation": generation,
                "exists": bool(runs),
                "applied_index": g.applied_index,
                "stale": g.stale,
            },
        )

    async def reader(self, name: str) -> None:
        rng = random.Random(f"{self.seed}:{name}")
        while time.monotonic() < self.deadline:
            if self.runs and rng.random() < 0.5:
                await self.read_cancel(name, rng, rng.choice(self.runs[-8:]))
            else:
                await self.read_epoch(name, rng)
            await asyncio.sleep(rng.uniform(0.5, 1.5) * READER_PERIOD_S)

    # -- the observer -------------------------------------------------------------------------------

    async def observe(self, started: asyncio.Event) -> None:
        rng = random.Random(f"{self.seed}:observer")
        eps = list(self.endpoints)
        rng.shuffle(eps)
        async with Client(eps, self.credentials.admin, retry_deadline_s=OP_BUDGET_S) as client:

            def on_started(_cursor: int) -> None:
                self.observer_started = True
                started.set()

            def on_resync() -> None:
                self.history.note("observer: event cursor expired; effects were lost (checks over the stream reset)")
                self.history.observe(0, 0, "Resync", {}, client.endpoint)

            try:
                async for ev in client.events(kinds=OBSERVED_KINDS, on_started=on_started, on_resync=on_resync):
                    fx = ev.effect
                    self.history.observe(ev.cursor, ev.log_index, type(fx).__name__, plain(fx), client.endpoint)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.history.note(f"observer stopped: {exc}")
                started.set()

    # -- run ----------------------------------------------------------------------------------------

    async def run(self, deadline_monotonic: float) -> None:
        """Play until ``deadline_monotonic`` (time.monotonic()), then let the scenarios in flight end
        (at most ``STOP_GRACE_S``), resolve unknown writes once more and leave the sessions."""
        self.deadline = deadline_monotonic
        loop = asyncio.get_running_loop()
        started = asyncio.Event()
        observer = loop.create_task(self.observe(started))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(started.wait(), 15)
        if not self.observer_started:
            self.history.note("observer: no event stream could be opened at the start")
        self.agents = [Agent(self, agent_id, token) for agent_id, token in sorted(self.credentials.agents.items())]
        await asyncio.gather(*(a.start() for a in self.agents), return_exceptions=True)
        loops = [loop.create_task(a.loop()) for a in self.agents]
        readers = [loop.create_task(self.reader(f"reader-{i}")) for i in range(2)]
        try:
            await asyncio.wait(loops + readers, timeout=max(0.0, deadline_monotonic - time.monotonic()) + STOP_GRACE_S)
        finally:
            for task in loops + readers:
                task.cancel()
            for task in loops + readers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for task in loops + readers:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    self.history.note(f"workload task failed: {task.exception()!r}")
            await asyncio.gather(*(a.finish() for a in self.agents), return_exceptions=True)
            await asyncio.sleep(0.5)  # the observer sees the last effects
            observer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await observer
            for client in self._readers.values():
                with contextlib.suppress(Exception):
                    await client.close()

    def scenario_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.agents:
            for k, v in a.scenarios.items():
                out[k] = out.get(k, 0) + v
        return out

    def summary(self) -> dict[str, int]:
        """Scenarios played and what they saw, for the run's table."""
        out = {f"scenario {k}": v for k, v in sorted(self.scenario_counts().items())}
        out.update(sorted(self.stats.items()))
        out["unknown writes never re-sent"] = sum(a.abandoned + a.operator.abandoned for a in self.agents)
        return out


__all__ = ["OBSERVED_KINDS", "Op", "Workload"]
