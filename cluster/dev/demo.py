"""``scripts/demo``: the two seeds' scenarios, end to end, on a local cluster of real processes.

    python -m waitgraph.dev.demo                  # what scripts/demo runs
    python -m waitgraph.dev.demo agent s1 a       # one agent process (the driver starts these)

The driver starts three ``waitgraph serve`` nodes (:class:`waitgraph.dev.localcluster.LocalCluster`, the
launcher ``waitgraph dev`` uses) in rollout mode ``auto``, then plays six scenarios. Every agent
is its own process using the SDK (:mod:`waitgraph.sdk`) over gRPC (in scenario 6, an MCP client of
its own ``waitgraph mcp``); the driver only starts them,
releases them at the moments that make the interleaving of the seed happen, and watches the
cluster as an operator (``WatchEvents``, ``Cycles``, ``ExplainDecision``, ``Graph``):

1. the first seed's cycle: A holds the browser and waits for B's review, B waits for the browser;
2. the first seed's delegation: a supervisor delegates synchronously to a subtask, which then
   waits for the supervisor's approval (the cycle is visible because delegation registered
   "parent waits for child");
3. the second seed's 7-agent pipeline with the A -> B -> C -> D -> A resource cycle, recovered by
   the cluster nodes' votes (quorum 2 > max_rollback 1; the seed's own 4-of-7 gate with four
   simultaneous rollbacks is refused);
4. the second seed's livelock, all seven agents: every batch the ring A..D re-races and re-forms
   the same cycle (the same signature) under every new epoch, while E, F and G, the downstream
   stages, wait for the batch's artifact D produces; after K=2 speculative rollbacks the guard
   makes the next recovery a deterministic tie-break (the lowest id wins, the others yield, epoch
   first) on the default cluster, stale-epoch re-acquires are refused, E, F and G are never
   chosen and complete with the ring, and the naive per-agent-epoch design
   (:mod:`waitgraph.dev.naive`) is printed beside it: 11 rollbacks, the epoch never advanced;
5. scenario 2's delegation again, with an independent approver configured for the run
   (``SetApprover``, a human reviewer): the seed's other remedy, "assigned to an independent actor".
   Recovery commits a REASSIGN instead of a victim (epoch first, then PROVIDED_BY moves to the
   reviewer; the supervisor, the reviewer and the subtask's wait are told); nobody is cancelled,
   the reviewer approves, and both complete at generation 1. Scenario 2, without an approver, is
   the victim path beside it;
6. two scripted MCP clients (:mod:`waitgraph.dev.mcp_agents`), each with its own ``waitgraph mcp``
   server over stdio: one holds ``resource:file-src-app.py`` and waits for
   ``artifact:branch-feature-x``; the other's wait for the file would close the cycle, so it is
   refused at once with the path; it re-plans (pushes the branch first) and both finish.

For each it prints detection (members, signature), the votes, the epoch commit, the victim with
every candidate's score, the cancellation converging (CancellationStable), that no cycle re-forms
(Cycles polled for a while after the commit) and that every execution completed, the victim's
under the new epoch. Exit status 0 only when every scenario resolved.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from waitgraph.sdk import Client, DeadlockVictim, OperatorClient, Session, StaleEpoch, WaitgraphClientError
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.effects import (
    CancellationStable,
    EpochCommitted,
    LivelockDetected,
    RecoveryEscalated,
    RecoveryProposed,
    RecoveryRetracted,
    Released,
    SatisfierClosed,
    SatisfierDeclared,
    VictimChosen,
    VoteRecorded,
    WaitRegistered,
    Yielded,
)
from waitgraph.statemachine.enums import EffectOutcome

# -- the cast ----------------------------------------------------------------------------------------------

S1_AGENTS = ("a", "b")
S2_AGENTS = ("supervisor", "subtask")
S3_AGENTS = tuple(f"pipe-{x}" for x in "abcdefg")
S5_AGENTS = ("lead", "helper", "reviewer")
AGENTS = S1_AGENTS + S2_AGENTS + S3_AGENTS + S5_AGENTS

BROWSER, REVIEW = "resource:s1-browser", "artifact:s1-review"
PLAN = "approval:s2-plan"
S5_PLAN, S5_RUN, S5_APPROVER = "approval:s5-plan", "s5-run", "human:reviewer"
RING = "abcd"
OUTPUT, RELEASE, WORKERS = "artifact:s3-output", "approval:s3-release", "pool:s3-workers"
RELEASE_MANAGER = "human:release-manager"

NO_REFORM_S = 2.0
"""How long Cycles is polled after a recovery commits, to show the cycle does not come back."""
SCENARIO_TIMEOUT_S = 30.0


def resource(x: str) -> str:
    return f"resource:s3-r{x}"


def s4_resource(x: str) -> str:
    return f"resource:s4-r{x}"


S4_BATCHES = 3
"""Batches the pipeline processes in scenario 4; with the default guard (K=2 recoveries of one
signature within 60 s) the third re-formation is the one broken by the tie-break."""
S4_PRODUCER = "d"
"""The ring member whose stage produces each batch's artifact (the ring's last stage)."""
S4_STAGES = {"e": "packages", "f": "tests", "g": "publishes"}
"""Scenario 4's downstream stages, outside the cycle, and what each does with a batch."""


def s4_batch(batch: int) -> str:
    return f"artifact:s4-batch-{batch}"


# == the agents (one process each) ===========================================================================


class AgentIO:
    """An agent process's side of the driver: lines on stdout, ``@marker`` lines, ``go`` on stdin."""

    def __init__(self) -> None:
        self.endpoints = os.environ["WAITGRAPH_ENDPOINTS"].split(",")
        self.token = os.environ["WAITGRAPH_TOKEN"]

    def say(self, text: str) -> None:
        print(text, flush=True)

    def mark(self, name: str) -> None:
        print(f"@{name}", flush=True)

    async def go(self) -> None:
        """Block until the driver writes ``go``."""
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        if line.strip() != "go":
            raise SystemExit(f"expected 'go' from the driver, got {line!r}")

    def client(self) -> Client:
        return Client(self.endpoints, self.token)


def _victim_line(v: DeadlockVictim) -> str:
    d = v.decision
    return (
        f"DeadlockVictim raised in the blocked task: decision {d.decision_id} ({d.kind}, {d.reason_code}), "
        f"epoch {d.epoch}"
    )


async def s1_a(io: AgentIO) -> None:
    async with io.client() as c, c.session("a") as s:
        await s.ensure_target(BROWSER)
        await s.ensure_target(REVIEW)
        async with s.execution("exec:s1-A", run_id="s1-run-a") as ex:
            await ex.record_side_effect("kickoff-email", EffectOutcome.COMMITTED)
            io.say("exec:s1-A started; it already sent the kickoff email (a COMMITTED side effect)")
            async with ex.holding(BROWSER) as h:
                io.say(f"holds {BROWSER} (lease {h.lease})")
                io.mark("holding")
                async with ex.waiting_for(REVIEW) as w:
                    io.say(f"registered WAIT(exec:s1-A -> {REVIEW}) before blocking; waits for B's review")
                    reason = await w.resolved()
                io.say(f"the review arrived ({reason}); finishes its work and releases the browser")
        io.say("exec:s1-A COMPLETED")


async def s1_b(io: AgentIO) -> None:
    async with io.client() as c, c.session("b") as s:
        await s.ensure_target(REVIEW)
        async with s.execution("exec:s1-B", run_id="s1-run-b", checkpoint=True) as ex:
            await ex.produces(REVIEW)
            io.say(f"exec:s1-B started (checkpoint available); declared PRODUCED_BY({REVIEW} -> exec:s1-B)")
            io.say(f"needs {BROWSER} for more evidence: it is held, so the SDK registers the wait before blocking")
            try:
                async with ex.holding(BROWSER):
                    raise RuntimeError("B got the browser: there was no deadlock")
            except DeadlockVictim as victim:
                io.say(_victim_line(victim))
            generation = await ex.retry()
            io.say(f"acknowledged the cancellation; retried as generation {generation} under epoch {s.observed_epoch}")
            await _show_fence(io, s, ex.execution_id, generation)
            await ex.produces(REVIEW)
            await s.produce(REVIEW)
            io.say("resumed from its checkpoint: published the review first, without the browser")
            async with ex.holding(BROWSER) as h:
                io.say(f"acquired {BROWSER} (lease {h.lease}) presenting epoch {s.observed_epoch}")
        io.say("exec:s1-B COMPLETED (generation 2)")


async def _show_fence(io: AgentIO, s: Session, execution_id: str, generation: int) -> None:
    """The second seed's invariant, shown: re-acquiring under the epoch it was rolled back from is refused."""
    stale = C.Acquire(target_id=BROWSER, execution_id=execution_id, generation=generation, observed_epoch=0)
    try:
        await s.write(stale)
    except StaleEpoch as refused:
        io.say(f"a re-acquire presenting epoch 0 is refused: StaleEpoch ({refused.message})")
    except WaitgraphClientError as other:
        io.say(f"a re-acquire presenting epoch 0: {other}")


async def s2_supervisor(io: AgentIO) -> None:
    async with io.client() as c, c.session("supervisor") as s:
        io.mark("ready")
        await io.go()
        async with s.execution("exec:s2-supervisor", run_id="s2-run", priority=5, unique_evidence=True) as ex:
            await ex.provides(PLAN)
            io.say(f"exec:s2-supervisor started (priority 5, holds unique evidence); it provides {PLAN}")
            async with ex.delegate("subtask", execution_id="exec:s2-subtask", checkpoint=True) as d:
                io.say("delegated exec:s2-subtask synchronously: WAIT(exec:s2-supervisor -> exec:s2-subtask)")
                outcome = await d.result()
                io.say(f"the subtask finished: {outcome} (generation {d.child_generation})")
            await s.decide(PLAN)
            io.say(f"approved {PLAN} afterwards, as an asynchronous event")
        io.say("exec:s2-supervisor COMPLETED")


async def s2_subtask(io: AgentIO) -> None:
    async with io.client() as c, c.session("subtask") as s:
        io.mark("ready")
        assignment = await s.next_assignment()
        async with s.accept(assignment) as ex:
            io.say(f"accepted {assignment.execution_id} (run {assignment.run_id}, checkpoint available)")
            try:
                async with ex.waiting_for(PLAN) as w:
                    io.say(f"asks the supervisor for {PLAN} synchronously: WAIT(exec:s2-subtask -> {PLAN})")
                    await w.resolved()
                    raise RuntimeError("the approval came: there was no deadlock")
            except DeadlockVictim as victim:
                io.say(_victim_line(victim))
            generation = await ex.retry()
            io.say(f"retried as generation {generation}: asks for the approval asynchronously and carries on")
        io.say("exec:s2-subtask COMPLETED (generation 2)")


async def s5_lead(io: AgentIO) -> None:
    """Scenario 2's supervisor, in a run with an independent approver: it is never cancelled."""
    async with io.client() as c, c.session("lead") as s:
        io.mark("ready")
        await io.go()
        async with s.execution("exec:s5-lead", run_id=S5_RUN, priority=5, unique_evidence=True) as ex:
            await ex.provides(S5_PLAN)
            io.say(f"exec:s5-lead started; it provides {S5_PLAN}")
            io.mark("running")
            await io.go()
            async with ex.delegate("helper", execution_id="exec:s5-helper", checkpoint=True) as d:
                io.say("delegated exec:s5-helper synchronously: WAIT(exec:s5-lead -> exec:s5-helper)")
                outcome = await d.result()
                io.say(f"the helper finished: {outcome} (generation {d.child_generation})")
        io.say("exec:s5-lead COMPLETED (generation 1: never cancelled)")


async def s5_helper(io: AgentIO) -> None:
    async with io.client() as c, c.session("helper") as s:
        io.mark("ready")
        assignment = await s.next_assignment()
        async with s.accept(assignment) as ex:
            io.say(f"accepted {assignment.execution_id} (run {assignment.run_id})")
            async with ex.waiting_for(S5_PLAN) as w:
                io.say(f"asks the lead for {S5_PLAN} synchronously: WAIT(exec:s5-helper -> {S5_PLAN})")
                await w.resolved()
                io.say(f"{S5_PLAN} arrived ({w.closed_reason}, wait version {w.version}): no deadlock victim")
        io.say("exec:s5-helper COMPLETED (generation 1)")


async def s5_reviewer(io: AgentIO) -> None:
    """The human reviewer's tool: decides the approval once it has been reassigned to them."""
    async with io.client() as c, c.session("reviewer") as s:
        io.mark("ready")
        await io.go()
        await s.decide(S5_PLAN)
        io.say(f"{S5_APPROVER} approved {S5_PLAN}")


_S3_PROFILE: dict[str, dict[str, Any]] = {
    "a": dict(priority=1),
    "b": dict(priority=2),
    "c": dict(priority=1, unique_evidence=True),
    "d": dict(priority=1, checkpoint=True),
}


async def s3_ring(io: AgentIO, me: str) -> None:
    """A, B, C, D: hold your own resource, then take the next one's (D takes A's)."""
    nxt = RING[(RING.index(me) + 1) % len(RING)]
    name = f"exec:s3-{me.upper()}"
    async with io.client() as c, c.session(f"pipe-{me}") as s:
        await s.ensure_target(resource(me))
        async with s.execution(name, run_id=f"s3-run-{me}", **_S3_PROFILE[me]) as ex:
            if me == "a":
                await ex.record_side_effect("staging-table-write", EffectOutcome.COMMITTED)
            if me == "d":
                await ex.produces(OUTPUT)
            try:
                async with ex.holding(resource(me)):
                    io.say(f"{name} holds {resource(me)}")
                    io.mark("holding")
                    await io.go()
                    async with ex.holding(resource(nxt)):
                        io.say(f"got {resource(nxt)}: runs its stage")
                        await asyncio.sleep(0.2)
            except DeadlockVictim as victim:
                io.say(_victim_line(victim))
                generation = await ex.retry()
                order = sorted((resource(me), resource(nxt)))
                io.say(f"retried as generation {generation} under epoch {s.observed_epoch}: acquires in order {order}")
                async with ex.holding(order[0]), ex.holding(order[1]):
                    io.say(f"holds {order[0]} and {order[1]}: runs its stage")
                    await asyncio.sleep(0.2)
            if me == "d":
                await s.produce(OUTPUT)
                io.say(f"produced {OUTPUT}")
        io.say(f"{name} COMPLETED")


async def s3_e(io: AgentIO) -> None:
    async with io.client() as c, c.session("pipe-e") as s:
        await s.ensure_target(OUTPUT)
        async with s.execution("exec:s3-E", run_id="s3-run-e") as ex, ex.waiting_for(OUTPUT) as w:
            io.say(f"exec:s3-E waits for {OUTPUT} (D's output): behind the cycle, not part of it")
            io.mark("ready")
            await w.resolved()
            io.say("D's output arrived; packaging it")
        io.say("exec:s3-E COMPLETED")


async def s3_f(io: AgentIO) -> None:
    async with io.client() as c, c.session("pipe-f") as s:
        await s.ensure_target(WORKERS, slots=2)
        async with s.execution("exec:s3-F", run_id="s3-run-f") as ex:
            async with ex.holding(WORKERS) as h:
                io.say(f"exec:s3-F holds one of 2 permits of {WORKERS} (grant {h.lease}) and keeps working")
                io.mark("ready")
                await io.go()
                await asyncio.sleep(1.5)
            await s.decide(RELEASE)
            io.say(f"relayed the release manager's decision: {RELEASE} approved")
        io.say("exec:s3-F COMPLETED")


async def s3_g(io: AgentIO) -> None:
    async with io.client() as c, c.session("pipe-g") as s:
        await s.ensure_target(RELEASE)
        await s.declare_satisfier(RELEASE, RELEASE_MANAGER)
        async with s.execution("exec:s3-G", run_id="s3-run-g") as ex, ex.waiting_for(RELEASE) as w:
            io.say(f"exec:s3-G waits for {RELEASE}, PROVIDED_BY {RELEASE_MANAGER}: a human, never a deadlock")
            io.mark("ready")
            await w.resolved()
            io.say("the release was approved")
        io.say("exec:s3-G COMPLETED")


async def s4_ring(io: AgentIO, me: str) -> None:
    """Scenario 4's ring member: every batch, hold your own resource, then take the next one's.

    The same pattern every batch re-forms the same A->B->C->D->A cycle (the same members, so the
    same signature), whatever the epoch: the re-race of the second seed. A victim retries; a
    tie-break loser (yielded) retries and waits behind the winner before it re-races. D declares
    and, after its stage, produces the batch's artifact that E, F and G wait for.
    """
    nxt = RING[(RING.index(me) + 1) % len(RING)]
    name = f"exec:s4-{me.upper()}"
    async with io.client() as c, c.session(f"pipe-{me}") as s:
        async with s.execution(name, run_id=f"s4-run-{me}", checkpoint=True) as ex:
            for batch in range(1, S4_BATCHES + 1):
                if batch > 1:  # the whole ring starts the next batch together
                    io.mark(f"done-{batch - 1}")
                    await io.go()
                if me == S4_PRODUCER:
                    await ex.produces(s4_batch(batch))
                released = False
                while True:
                    try:
                        async with ex.holding(s4_resource(me)):
                            if not released:
                                io.say(f"batch {batch}: {name} g{ex.generation} holds {s4_resource(me)}")
                                io.mark(f"holding-{batch}")
                                await io.go()
                                released = True
                            async with ex.holding(s4_resource(nxt)):
                                io.say(f"batch {batch}: got {s4_resource(nxt)}: runs its stage")
                        break
                    except DeadlockVictim as interrupted:
                        d = interrupted.decision
                        why = f"yielded to {d.winner_id}" if d.role == "yielded" else f"{d.role}, {d.kind}"
                        io.say(f"batch {batch}: DeadlockVictim raised in the blocked task ({why}), epoch {d.epoch}")
                        generation = await ex.retry()
                        await _show_stale_epoch(io, s, ex.execution_id, generation, s4_resource(me))
                        if me == S4_PRODUCER:  # the declaration names a generation: renew it
                            await ex.produces(s4_batch(batch))
                        if d.role == "yielded" and d.winner_id is not None:
                            async with ex.waiting_for(d.winner_id) as behind:
                                io.say(f"yields: waits behind the winner {d.winner_id}")
                                await behind.resolved()
                if me == S4_PRODUCER:
                    await s.produce(s4_batch(batch))
                    io.say(f"batch {batch}: produced {s4_batch(batch)} for E, F and G")
        io.say(f"{name} COMPLETED {S4_BATCHES} batches")


async def s4_stage(io: AgentIO, me: str) -> None:
    """Scenario 4's E, F, G: every batch, a registered wait for the artifact D produces in it.

    They are behind the cycle, never in it (nothing waits for them), so no recovery may touch them:
    an interruption would end this process with an error, which the driver reports.
    """
    name = f"exec:s4-{me.upper()}"
    async with io.client() as c, c.session(f"pipe-{me}") as s:
        async with s.execution(name, run_id=f"s4-run-{me}") as ex:
            for batch in range(1, S4_BATCHES + 1):
                artifact = s4_batch(batch)
                async with ex.waiting_for(artifact) as w:
                    io.say(f"batch {batch}: {name} g{ex.generation} waits for {artifact} (D's output of the batch)")
                    io.mark(f"waiting-{batch}")
                    reason = await w.resolved()
                io.say(f"batch {batch}: {artifact} arrived ({reason}): {name} {S4_STAGES[me]} it")
            generation = ex.generation
        io.say(f"{name} COMPLETED {S4_BATCHES} batches at g{generation}, never interrupted")


async def _show_stale_epoch(io: AgentIO, s: Session, execution_id: str, generation: int, target_id: str) -> None:
    """Re-acquiring under an epoch this execution was rolled back (or yielded) from is refused."""
    old = s.observed_epoch - 1
    stale = C.Acquire(target_id=target_id, execution_id=execution_id, generation=generation, observed_epoch=old)
    try:
        await s.write(stale)
        io.say(f"a re-acquire presenting epoch {old} was ACCEPTED (it must not be)")
    except StaleEpoch:
        io.say(f"retried as g{generation}; a re-acquire presenting epoch {old} is refused: StaleEpoch")


AgentMain = Callable[[AgentIO], Coroutine[Any, Any, None]]


def _agent(me: str, play: Callable[[AgentIO, str], Coroutine[Any, Any, None]] = s3_ring) -> AgentMain:
    async def run(io: AgentIO) -> None:
        await play(io, me)

    return run


AGENT_MAIN: dict[tuple[str, str], AgentMain] = {
    ("s1", "a"): s1_a,
    ("s1", "b"): s1_b,
    ("s2", "supervisor"): s2_supervisor,
    ("s2", "subtask"): s2_subtask,
    **{("s3", f"pipe-{x}"): _agent(x) for x in RING},
    ("s3", "pipe-e"): s3_e,
    ("s3", "pipe-f"): s3_f,
    ("s3", "pipe-g"): s3_g,
    **{("s4", f"pipe-{x}"): _agent(x, s4_ring) for x in RING},
    **{("s4", f"pipe-{x}"): _agent(x, s4_stage) for x in S4_STAGES},
    ("s5", "lead"): s5_lead,
    ("s5", "helper"): s5_helper,
    ("s5", "reviewer"): s5_reviewer,
    ("s6", "a"): lambda io: _mcp_agent("holder", io),
    ("s6", "b"): lambda io: _mcp_agent("replanner", io),
}


async def _mcp_agent(role: str, io: AgentIO) -> None:
    """Scenario 6's MCP clients (imported here: the mcp package is the optional extra)."""
    from waitgraph.dev import mcp_agents

    await (mcp_agents.holder(io) if role == "holder" else mcp_agents.replanner(io))


def agent_main(scenario: str, role: str) -> int:
    fn = AGENT_MAIN.get((scenario, role))
    if fn is None:
        print(f"no agent {role!r} in scenario {scenario!r}", file=sys.stderr)
        return 2
    asyncio.run(fn(AgentIO()))
    return 0


# == the driver ===============================================================================================


class DemoFailure(Exception):
    pass


class AgentProcess:
    """One agent subprocess: its output is printed as it comes, ``@marker`` lines are events."""

    def __init__(self, driver: Driver, scenario: str, role: str, proc: asyncio.subprocess.Process) -> None:
        self.driver = driver
        self.scenario = scenario
        self.role = role
        self.proc = proc
        self.markers: dict[str, asyncio.Event] = {}
        self.reader = asyncio.get_running_loop().create_task(self._read())

    def _marker(self, name: str) -> asyncio.Event:
        return self.markers.setdefault(name, asyncio.Event())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line.startswith("@"):
                self._marker(line[1:]).set()
            elif line:
                self.driver.say(self.role, line)

    async def marker(self, name: str, timeout_s: float = 40.0) -> None:
        event = self._marker(name)
        waiter = asyncio.ensure_future(event.wait())
        exited = asyncio.ensure_future(self.proc.wait())
        await asyncio.wait({waiter, exited}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        exited.cancel()
        if not event.is_set():
            why = f"exited with {self.proc.returncode}" if self.proc.returncode is not None else "timed out"
            raise DemoFailure(f"agent {self.role} never reached '{name}' ({why})")

    async def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        await self.proc.stdin.drain()

    async def finished(self, timeout_s: float) -> int:
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            raise DemoFailure(f"agent {self.role} did not finish within {timeout_s:.0f}s") from None
        await self.reader
        return code

    def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()


@dataclass
class Scope:
    """What one scenario watches: its executions, and what the cluster did about them."""

    number: int
    executions: frozenset[str]
    started: float = field(default_factory=time.monotonic)
    digests: set[str] = field(default_factory=set)
    signatures: list[str] = field(default_factory=list)
    members: set[str] = field(default_factory=set)
    """Every execution named as a member of one of the scenario's recovery proposals."""
    rolled_back: set[str] = field(default_factory=set)
    """The executions whose holdings a recovery released as rolled back."""
    votes: list[VoteRecorded] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    decisions: list[VictimChosen] = field(default_factory=list)
    stable: list[CancellationStable] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    committed_at: float | None = None
    epoch_cursor: int | None = None
    expect_livelock: bool = False
    """Scenario 4: the cycle is meant to re-form until the guard's tie-break breaks it."""
    livelocks: list[LivelockDetected] = field(default_factory=list)
    yielded: list[Yielded] = field(default_factory=list)
    tie_break: asyncio.Event = field(default_factory=asyncio.Event)
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    converged: asyncio.Event = field(default_factory=asyncio.Event)
    reassigned: set[str] = field(default_factory=set)
    """Approvals a REASSIGN decision moved (scenario 5)."""


@dataclass
class Result:
    number: int
    title: str
    resolved: bool
    detail: str
    seconds: float


class Driver:
    def __init__(self, endpoints: list[str], credentials: Any, started: float) -> None:
        self.endpoints = endpoints
        self.credentials = credentials
        self.t0 = started
        self.ops = OperatorClient(endpoints, credentials.operator)
        self.admin = OperatorClient(endpoints, credentials.admin)
        self.scope: Scope | None = None
        self.agents: list[AgentProcess] = []
        self._watch: asyncio.Task[None] | None = None
        self._explain: set[asyncio.Task[None]] = set()

    # -- output ------------------------------------------------------------------------------------------------

    def say(self, who: str, text: str) -> None:
        print(f"  {time.monotonic() - self.t0:6.2f}s  {who:<11} {text}", flush=True)

    def cluster(self, text: str) -> None:
        self.say("cluster", text)

    def check(self, text: str) -> None:
        self.say("check", text)

    # -- the cluster's events ------------------------------------------------------------------------------------

    async def start_watching(self) -> None:
        kinds = [
            cls.KIND
            for cls in (
                RecoveryProposed,
                VoteRecorded,
                EpochCommitted,
                VictimChosen,
                CancellationStable,
                LivelockDetected,
                RecoveryRetracted,
                RecoveryEscalated,
                Released,
                Yielded,
                SatisfierClosed,
                SatisfierDeclared,
                WaitRegistered,
            )
        ]
        started = asyncio.Event()

        async def watch() -> None:
            async for ev in self.ops.events(kinds=kinds, on_started=lambda _c: started.set()):
                try:
                    self._on_event(ev.effect, ev.cursor)
                except Exception as exc:  # a display problem must not stop the watch
                    print(f"  (could not show {type(ev.effect).__name__}: {exc})", flush=True)

        self._watch = asyncio.get_running_loop().create_task(watch())
        await asyncio.wait_for(started.wait(), 20)

    def _on_event(self, fx: Any, cursor: int) -> None:
        scope = self.scope
        if scope is None:
            return
        if isinstance(fx, RecoveryProposed):
            if not set(fx.members) & scope.executions:
                return
            scope.digests.add(fx.digest)
            scope.signatures.append(fx.signature)
            scope.members.update(fx.members)
            members = ", ".join(fx.members)
            self.cluster(
                f"DETECTED a deadlock: members {members}; cycle signature {fx.signature}; "
                f"recovery proposed for epoch {fx.epoch_proposed} (digest {fx.digest[:12]})"
            )
        elif isinstance(fx, VoteRecorded) and fx.digest in scope.digests:
            scope.votes.append(fx)
            verdict = "approves" if fx.approve else "rejects"
            self.cluster(f"VOTE {fx.voter} {verdict}: {fx.approvals} of quorum {fx.quorum}")
        elif isinstance(fx, EpochCommitted) and fx.digest in scope.digests:
            scope.epochs.append(fx.epoch)
            scope.committed_at = time.monotonic()
            scope.epoch_cursor = cursor
            self.cluster(f"EPOCH {fx.epoch} committed in the replicated log, before anything is released")
        elif isinstance(fx, VictimChosen) and fx.digest in scope.digests:
            scope.decisions.append(fx)
            acted = fx.epoch is not None and fx.decision_kind in ("VICTIM", "TIE_BREAK")
            what = (
                "an approval moves to the independent approver; nobody is cancelled"
                if fx.decision_kind == "REASSIGN"
                else f"victim {fx.execution_id} g{fx.generation}, WAITING -> CANCELLING"
                if acted and fx.decision_kind == "VICTIM"
                else f"the lowest id {fx.execution_id} wins, the others yield"
                if acted
                else f"would pick {fx.execution_id}; nothing is cancelled"
            )
            if fx.decision_kind == "TIE_BREAK":
                scope.tie_break.set()
            self.cluster(
                f"DECISION {fx.decision_id}: {fx.decision_kind} (mode {fx.mode}, policy {fx.policy_version}, "
                f"{fx.reason_code}): {what}"
            )
            scope.decided.set()
            task = asyncio.get_running_loop().create_task(self._show_scores(fx.decision_id))
            self._explain.add(task)
            task.add_done_callback(self._explain.discard)
        elif isinstance(fx, CancellationStable) and fx.root_id in scope.executions:
            scope.stable.append(fx)
            self.cluster(
                f"CANCELLATION converged: CancellationStable {fx.scope_id} after {fx.quiescence_ms} ms "
                f"of logical time, {fx.leaked} leases or permits leaked"
            )
            scope.converged.set()
        elif isinstance(fx, Released) and fx.execution_id in scope.executions and fx.reason == "rolled_back":
            scope.rolled_back.add(fx.execution_id)
            if scope.epoch_cursor is None or cursor < scope.epoch_cursor:
                scope.problems.append(f"{fx.target_id} was released before the epoch commit")
            self.cluster(
                f"RELEASED {fx.target_id} (lease {fx.lease}) of the victim {fx.execution_id}: after the epoch "
                f"commit, in the same log entry (event cursor {cursor} > {scope.epoch_cursor})"
            )
        elif isinstance(fx, Released) and fx.execution_id in scope.executions and fx.reason.startswith("yielded:"):
            if scope.epoch_cursor is None or cursor < scope.epoch_cursor:
                scope.problems.append(f"{fx.target_id} was released before the epoch commit")
            self.cluster(
                f"RELEASED {fx.target_id} of the yielder {fx.execution_id}, after the epoch commit "
                f"(cursor {cursor} > {scope.epoch_cursor})"
            )
        elif isinstance(fx, Yielded) and fx.execution_id in scope.executions:
            scope.yielded.append(fx)
            self.cluster(f"YIELDED {fx.execution_id} g{fx.generation}: waits behind {fx.winner_id} (epoch {fx.epoch})")
        elif isinstance(fx, LivelockDetected) and fx.digest in scope.digests:
            if scope.expect_livelock:
                scope.livelocks.append(fx)
                self.cluster(
                    f"LIVELOCK: signature {fx.signature} seen again ({fx.reason}): this recovery is a deterministic "
                    "tie-break, not another speculative rollback"
                )
            else:
                scope.problems.append(f"livelock detected ({fx.reason})")
                self.cluster(f"LIVELOCK signature {fx.signature}: {fx.reason}")
        elif isinstance(fx, SatisfierClosed) and fx.reason.startswith("reassigned:"):
            if fx.satisfier_id in scope.executions:
                scope.reassigned.add(fx.target_id)
                self.cluster(
                    f"REASSIGNED {fx.target_id}: {fx.satisfier_id} (inside the cycle) no longer provides it "
                    f"({fx.reason}), after the epoch commit (cursor {cursor} > {scope.epoch_cursor})"
                )
        elif isinstance(fx, SatisfierDeclared) and fx.target_id in scope.reassigned:
            self.cluster(f"PROVIDED_BY {fx.target_id} -> {fx.satisfier_id}: the independent approver is now asked")
        elif isinstance(fx, WaitRegistered) and fx.edge_id.partition(">")[2] in scope.reassigned:
            self.cluster(f"WAIT {fx.edge_id} re-registered at version {fx.edge_version}: its waiter is told")
        elif isinstance(fx, RecoveryRetracted) and fx.digest in scope.digests:
            self.cluster(f"recovery {fx.digest[:12]} retracted: {fx.reason}")
        elif isinstance(fx, RecoveryEscalated) and fx.digest in scope.digests:
            scope.problems.append(f"recovery escalated ({fx.reason})")
            self.cluster(f"recovery {fx.digest[:12]} ESCALATED to a human: {fx.reason}")

    async def _show_scores(self, decision_id: str) -> None:
        decision = await self.ops.decision(decision_id, fresh=True)
        if decision is None or not decision.scores:
            return
        roles = dict(decision.roles)

        def yes(flag: bool) -> str:
            return "yes" if flag else "no"

        self.check(f"ExplainDecision {decision_id}: victim policy {decision.policy_version}, every candidate's score")
        header = f"{'candidate':<24} {'ext.effects':<11} {'checkpoint':<10} {'priority':>8} {'cost':>5}  unique  role"
        print(f"{'':22}{header}", flush=True)
        for sc in decision.scores:
            row = (
                f"{sc.execution_id + ' g' + str(sc.generation):<24} {yes(sc.external_side_effects):<11} "
                f"{yes(sc.checkpoint):<10} {sc.priority:>8} {sc.cost_consumed:>5}  {yes(sc.unique_evidence):<6}  "
                f"{roles.get(sc.execution_id, '?')}"
            )
            print(f"{'':22}{row}", flush=True)
        for r in decision.reassigned:
            print(f"{'':22}reassigned {r[0]}: {r[1]} g{r[2]} -> {r[3]}", flush=True)
        if decision.remedies:
            steps = ", ".join(f"{name} {outcome} ({why})" for name, outcome, why in decision.remedies)
            print(f"{'':22}remedies in order: {steps}", flush=True)

    # -- agents ----------------------------------------------------------------------------------------------------

    async def spawn(self, scenario: str, role: str) -> AgentProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
        env["WAITGRAPH_ENDPOINTS"] = ",".join(self.endpoints)
        env["WAITGRAPH_TOKEN"] = self.credentials.agents[role]
        env["PYTHONUNBUFFERED"] = "1"
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "waitgraph.dev.demo",
            "agent",
            scenario,
            role,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        agent = AgentProcess(self, scenario, role, proc)
        self.agents.append(agent)
        return agent

    def kill_agents(self) -> None:
        for agent in self.agents:
            agent.kill()

    # -- one scenario ---------------------------------------------------------------------------------------------

    def header(self, number: int, title: str, story: list[str]) -> None:
        print(flush=True)
        print(f"== Scenario {number}: {title}", flush=True)
        for line in story:
            print(f"   {line}", flush=True)

    async def play(
        self,
        number: int,
        title: str,
        story: list[str],
        executions: set[str],
        run: Callable[[], Awaitable[Any]],
        *,
        livelock: bool = False,
        reassign: bool = False,
    ) -> Result:
        self.header(number, title, story)
        scope = Scope(number, frozenset(executions), expect_livelock=livelock)
        self.scope = scope
        began = time.monotonic()
        try:
            agents = await run()
            detail = await (
                self._resolve_reassign(scope, agents)
                if reassign
                else self._resolve_livelock(scope, agents)
                if livelock
                else self._resolve(scope, agents)
            )
            resolved = not scope.problems
        except DemoFailure as exc:
            scope.problems.append(str(exc))
            resolved, detail = False, str(exc)
        finally:
            self.kill_agents()
            self.agents.clear()
            await asyncio.sleep(0)
        if scope.problems:
            resolved = False
            detail = "; ".join(scope.problems)
        verdict = "RESOLVED" if resolved else "NOT RESOLVED"
        print(f"   -> scenario {number} {verdict}: {detail}", flush=True)
        self.scope = None
        return Result(number, title, resolved, detail, time.monotonic() - began)

    async def _resolve(self, scope: Scope, agents: list[AgentProcess]) -> str:
        try:
            await asyncio.wait_for(scope.decided.wait(), SCENARIO_TIMEOUT_S)
        except TimeoutError:
            raise DemoFailure("no recovery decision was committed") from None
        victim = scope.decisions[0]
        if victim.epoch is None or victim.execution_id is None:
            raise DemoFailure(f"decision {victim.decision_id} did not act ({victim.decision_kind})")
        no_reform = asyncio.get_running_loop().create_task(self._no_reformation(scope))
        codes = {a.role: await a.finished(SCENARIO_TIMEOUT_S) for a in agents}
        failed = {role: code for role, code in codes.items() if code != 0}
        if failed:
            scope.problems.append(f"agents exited with errors: {failed}")
        try:
            await asyncio.wait_for(scope.converged.wait(), 10)
        except TimeoutError:
            scope.problems.append(f"no CancellationStable for the victim {victim.execution_id}")
        await no_reform
        await self._all_completed(scope)
        await asyncio.gather(*self._explain, return_exceptions=True)
        return (
            f"victim {victim.execution_id} (decision {victim.decision_id}) rolled back at epoch {victim.epoch}, "
            f"cancellation stable, no re-formation, {len(scope.executions)} executions completed"
        )

    async def _resolve_reassign(self, scope: Scope, agents: dict[str, AgentProcess]) -> str:
        """Scenario 5: a REASSIGN decision (epoch first), nobody cancelled, the reviewer approves."""
        try:
            await asyncio.wait_for(scope.decided.wait(), SCENARIO_TIMEOUT_S)
        except TimeoutError:
            raise DemoFailure("no recovery decision was committed") from None
        d = scope.decisions[0]
        if d.decision_kind != "REASSIGN" or d.epoch is None:
            raise DemoFailure(f"decision {d.decision_id} is {d.decision_kind}, not a committed REASSIGN")
        no_reform = asyncio.get_running_loop().create_task(self._no_reformation(scope))
        await agents["reviewer"].go()
        codes = {role: await a.finished(SCENARIO_TIMEOUT_S) for role, a in agents.items()}
        failed = {role: code for role, code in codes.items() if code != 0}
        if failed:
            scope.problems.append(f"agents exited with errors: {failed}")
        await no_reform
        if scope.stable or scope.rolled_back:
            scope.problems.append("a REASSIGN cancelled or rolled back someone")
        if scope.reassigned != {S5_PLAN}:
            scope.problems.append(f"reassigned {sorted(scope.reassigned)}, expected {S5_PLAN}")
        completed = await self._all_completed(scope)
        again = sorted(eid for eid, ex in completed.items() if ex.generation != 1)
        if again:
            scope.problems.append(f"{', '.join(again)} moved past generation 1: they were cancelled")
        else:
            self.check("nobody was cancelled: both completed at generation 1")
        await asyncio.gather(*self._explain, return_exceptions=True)
        return (
            f"{S5_PLAN} reassigned to {S5_APPROVER} (decision {d.decision_id}, epoch {d.epoch}), nobody cancelled, "
            f"{len(scope.executions)} executions completed"
        )

    async def _cycle_free(self, scope: Scope) -> int | None:
        """Poll Cycles for NO_REFORM_S after the last epoch commit: the polls, or None if a cycle
        among the scenario's executions came back (recorded as a problem)."""
        assert scope.committed_at is not None
        until = scope.committed_at + NO_REFORM_S
        polls = 0
        while True:
            cycles = await self.ops.cycles(fresh=True)
            polls += 1
            back = [c for c in cycles.cycles if {m.execution_id for m in c.members} & scope.executions]
            if back:
                sigs = ", ".join(c.signature for c in back)
                scope.problems.append(f"a cycle re-formed after the recovery ({sigs})")
                self.check(f"the cycle RE-FORMED: {sigs}")
                return None
            if time.monotonic() >= until:
                return polls
            await asyncio.sleep(0.25)

    async def _no_reformation(self, scope: Scope) -> None:
        polls = await self._cycle_free(scope)
        if polls is None:
            return
        once = len(scope.signatures) == len(set(scope.signatures))
        if not once:
            scope.problems.append("the same cycle signature was proposed again")
        self.check(
            f"no re-formation: Cycles polled {polls} times over {NO_REFORM_S:.1f}s after the epoch commit found no "
            f"cycle among this scenario's executions; signature {scope.signatures[0]} proposed once"
        )

    async def _resolve_livelock(self, scope: Scope, agents: list[AgentProcess]) -> str:
        """Scenario 4: the same signature every round, speculative rollbacks under fresh epochs,
        then the guard's tie-break (lowest id wins, the other members yield); the executions
        outside the cycle are never touched, and the whole pipeline completes."""
        try:
            await asyncio.wait_for(scope.tie_break.wait(), SCENARIO_TIMEOUT_S)
        except TimeoutError:
            raise DemoFailure("the re-forming cycle was never broken by a tie-break") from None
        codes = {a.role: await a.finished(SCENARIO_TIMEOUT_S) for a in agents}
        failed = {role: code for role, code in codes.items() if code != 0}
        if failed:
            scope.problems.append(f"agents exited with errors: {failed}")
        polls = await self._cycle_free(scope)
        kinds = [d.decision_kind for d in scope.decisions]
        winner = scope.decisions[-1].execution_id
        if len(set(scope.signatures)) != 1:
            scope.problems.append(f"expected one signature re-forming, saw {sorted(set(scope.signatures))}")
        if kinds[-1] != "TIE_BREAK" or any(k != "VICTIM" for k in kinds[:-1]):
            scope.problems.append(f"decisions {kinds}: expected speculative rollbacks, then one tie-break")
        if scope.epochs != sorted(set(scope.epochs)) or len(scope.epochs) != len(kinds):
            scope.problems.append(f"epochs {scope.epochs}: each recovery must commit a new one")
        if winner != min(scope.members):
            scope.problems.append(f"the tie-break's winner is {winner}, not the lowest id")
        losers = sorted(y.execution_id for y in scope.yielded)
        if losers != sorted(scope.members - {winner or ""}):
            scope.problems.append(f"yielded {losers}: every other member must yield")
        self.check(
            f"signature {scope.signatures[0]} re-formed {len(kinds)} times: {len(kinds) - 1} speculative rollbacks "
            f"under epochs {scope.epochs[:-1]}, then the guard's tie-break at epoch {scope.epochs[-1]}: "
            f"{winner} won, {', '.join(losers)} yielded"
        )
        if polls is not None:
            self.check(f"no re-formation after the tie-break: Cycles polled {polls} times over {NO_REFORM_S:.1f}s")
        completed = await self._all_completed(scope)
        self._outside_untouched(scope, completed)
        await asyncio.gather(*self._explain, return_exceptions=True)
        self._naive_beside(len(kinds))
        return (
            f"livelock broken by the tie-break {scope.decisions[-1].decision_id} at epoch {scope.epochs[-1]} "
            f"({winner} won), {len(scope.executions)} executions completed"
        )

    def _outside_untouched(self, scope: Scope, completed: dict[str, Any]) -> None:
        """The executions outside every cycle (scenario 4's E, F, G): never a member, never chosen,
        yielded or rolled back, and completed at their first generation."""
        outside = sorted(scope.executions - scope.members)
        if not outside:
            return
        touched = {d.execution_id for d in scope.decisions if d.execution_id is not None}
        touched |= {y.execution_id for y in scope.yielded} | scope.rolled_back
        hit = sorted(touched & set(outside))
        if hit:
            scope.problems.append(f"{', '.join(hit)} are outside the cycle but a recovery chose them")
        moved = sorted(eid for eid in outside if eid in completed and completed[eid].generation != 1)
        if moved:
            scope.problems.append(f"{', '.join(moved)} moved past generation 1: they were cancelled")
        if not hit and not moved:
            self.check(
                f"{', '.join(outside)}: behind the ring, never in it (not a member of any of the "
                f"{len(scope.digests)} proposals), never chosen, yielded or rolled back; completed at g1"
            )

    def _naive_beside(self, ours: int) -> None:
        """What the second seed's naive design (an epoch per agent) does with the same ring."""
        from waitgraph.dev.naive import naive_rounds

        rounds = naive_rounds(rounds=11)
        same = len({r.signature for r in rounds}) == 1
        self.check(
            f"beside it, the naive per-agent-epoch recovery (waitgraph.dev.naive, the same 4-cycle on the core): "
            f"{len(rounds)} rollbacks, the {'same' if same else 'a different'} signature re-formed every round, "
            f"replicated epoch still {rounds[-1].replicated_epoch}, local epochs {rounds[-1].local_epochs}: the seed's "
            f"11 re-formations; here {ours} recoveries and done"
        )

    async def _all_completed(self, scope: Scope) -> dict[str, Any]:
        """Check every execution of the scenario COMPLETED; their graph records, by id."""
        graph = await self.ops.graph(fresh=True)
        mine = {e.execution_id: e for e in graph.executions if e.execution_id in scope.executions}
        done = []
        for eid in sorted(scope.executions):
            ex = mine.get(eid)
            status = _status_name(ex.status) if ex is not None else "MISSING"
            if status != "COMPLETED":
                scope.problems.append(f"{eid} is {status}")
            done.append(f"{eid} g{ex.generation if ex is not None else '?'}")
        if all(_status_name(e.status) == "COMPLETED" for e in mine.values()) and len(mine) == len(scope.executions):
            self.check(f"every execution COMPLETED: {', '.join(done)}")
        return mine

    # -- the scenarios ----------------------------------------------------------------------------------------------

    async def scenario_1(self) -> Result:
        async def run() -> list[AgentProcess]:
            a = await self.spawn("s1", "a")
            await a.marker("holding")
            b = await self.spawn("s1", "b")
            return [a, b]

        return await self.play(
            1,
            "the browser and the review (first seed)",
            [
                "A holds the browser and waits for B's review; B, seeking more evidence, waits for A to release",
                "the browser. Both are alive, nothing throws, nothing progresses.",
            ],
            {"exec:s1-A", "exec:s1-B"},
            run,
        )

    async def scenario_2(self) -> Result:
        async def run() -> list[AgentProcess]:
            sub = await self.spawn("s2", "subtask")
            sup = await self.spawn("s2", "supervisor")
            await sub.marker("ready")
            await sup.marker("ready")
            await sup.go()
            return [sup, sub]

        return await self.play(
            2,
            "the supervisor and its subtask (first seed)",
            [
                "A supervisor delegates a subtask synchronously; the subtask then needs the supervisor's",
                "approval. Delegation registered 'parent waits for child', so the reverse edge closes a",
                "visible cycle instead of a hidden one.",
            ],
            {"exec:s2-supervisor", "exec:s2-subtask"},
            run,
        )

    async def scenario_6(self) -> Result:
        """Two MCP clients: a wait that would close a cycle is refused with its path; no victim."""
        title = "two MCP clients: a file lease and a branch (waitgraph mcp)"
        self.header(
            6,
            title,
            [
                "Two coding agents, each a scripted MCP client of its own `waitgraph mcp` server. The first holds",
                "the file and waits for the branch the second will push; the second asks for the file. That wait",
                "would close the cycle: it is refused at once with the path, the second re-plans, both finish.",
            ],
        )
        began = time.monotonic()
        try:
            b = await self.spawn("s6", "b")
            await b.marker("declared")
            a = await self.spawn("s6", "a")
            await a.marker("waiting")
            await b.go()
            await b.marker("refused")
            codes = [await p.finished(SCENARIO_TIMEOUT_S) for p in (a, b)]
            done = all("done" in p.markers and p.markers["done"].is_set() for p in (a, b))
            resolved = codes == [0, 0] and done
            detail = "refused with its path, re-planned, both finished" if resolved else f"exit codes {codes}"
        except DemoFailure as exc:
            resolved, detail = False, str(exc)
        finally:
            self.kill_agents()
            self.agents.clear()
        verdict = "RESOLVED" if resolved else "NOT RESOLVED"
        print(f"   -> scenario 6 {verdict}: {detail}", flush=True)
        return Result(6, title, resolved, detail, time.monotonic() - began)

    async def scenario_5(self) -> Result:
        async def run() -> dict[str, AgentProcess]:
            helper = await self.spawn("s5", "helper")
            lead = await self.spawn("s5", "lead")
            reviewer = await self.spawn("s5", "reviewer")
            for a in (helper, lead, reviewer):
                await a.marker("ready")
            await lead.go()
            await lead.marker("running")
            out = await self.admin.set_approver(S5_APPROVER, run_id=S5_RUN)
            self.cluster(f"SetApprover {S5_APPROVER} for run {S5_RUN}: {out.result.value}")
            await lead.go()
            return {"lead": lead, "helper": helper, "reviewer": reviewer}

        return await self.play(
            5,
            "the supervisor and its subtask, with an independent approver (first seed)",
            [
                "Scenario 2 again, but the run names an independent approver (a human reviewer): the seed's",
                "'assigned to an independent actor'. Recovery reassigns the approval instead of cancelling.",
            ],
            {"exec:s5-lead", "exec:s5-helper"},
            run,
            reassign=True,
        )

    async def scenario_3(self) -> Result:
        async def run() -> list[AgentProcess]:
            await self._show_recovery_rule()
            agents = {role: await self.spawn("s3", role) for role in S3_AGENTS}
            for x in RING:
                await agents[f"pipe-{x}"].marker("holding")
            for role in ("pipe-e", "pipe-f", "pipe-g"):
                await agents[role].marker("ready")
            self.say("driver", "all four ring members hold their own resource: go")
            for x in RING:
                await agents[f"pipe-{x}"].go()
            await agents["pipe-f"].go()
            return list(agents.values())

        return await self.play(
            3,
            "the 7-agent pipeline and the A->B->C->D->A cycle (second seed)",
            [
                "Seven agents; A, B, C and D each hold a resource and then take the next one's. E waits",
                "for D's output, F works with a pool permit, G waits for a human's approval: only the",
                "four-cycle is a deadlock. One victim is rolled back under a new epoch committed by the",
                "nodes' votes, and it comes back with that epoch, taking its resources in order.",
            ],
            {f"exec:s3-{x.upper()}" for x in "abcdefg"},
            run,
        )

    async def scenario_4(self) -> Result:
        async def run() -> list[AgentProcess]:
            spawned = await asyncio.gather(*(self.spawn("s4", f"pipe-{x}") for x in RING + "".join(S4_STAGES)))
            ring, stages = spawned[: len(RING)], spawned[len(RING) :]
            for batch in range(1, S4_BATCHES + 1):
                if batch > 1:  # the ring finished the last batch (D produced it): the next one
                    for agent in ring:
                        await agent.marker(f"done-{batch - 1}")
                for agent in stages:
                    await agent.marker(f"waiting-{batch}")
                if batch > 1:
                    for agent in ring:
                        await agent.go()
                for agent in ring:
                    await agent.marker(f"holding-{batch}")
                epoch = (await self.ops.status(fresh=True)).epoch
                self.say(
                    "driver",
                    f"batch {batch} (epoch {epoch}): E, F, G wait for {s4_batch(batch)}; A, B, C and D each "
                    "hold their own resource again: go",
                )
                for agent in ring:
                    await agent.go()
            return ring + stages

        return await self.play(
            4,
            "the re-forming cycle: livelock broken by a deterministic tie-break (second seed)",
            [
                "All seven agents re-race every batch. A, B, C and D each hold their own resource, then",
                "take the next one's, so the same A->B->C->D->A cycle forms again under every new epoch;",
                "D's stage produces the batch's artifact, which E, F and G, the downstream stages, wait",
                "for: behind the cycle, not in it. The guard sees the same signature recur and makes the",
                "next recovery a tie-break: the lowest id wins, the others yield, the epoch is committed",
                "before anything is released. E, F and G are never chosen; all seven complete. On the",
                "default cluster.",
            ],
            {f"exec:s4-{x.upper()}" for x in RING + "".join(S4_STAGES)},
            run,
            livelock=True,
        )

    async def _show_recovery_rule(self) -> None:
        voters = [f"agent:{a}" for a in S3_AGENTS]
        try:
            await self.admin.configure_recovery(voters, quorum=4, max_rollback=4)
            self.check("the seed's 4-of-7 gate with 4 simultaneous rollbacks was ACCEPTED (it must not be)")
            if self.scope is not None:
                self.scope.problems.append("a configuration with quorum <= max_rollback was accepted")
        except WaitgraphClientError as refused:
            self.check(f"the seed's own gate (7 agent voters, quorum 4, 4 rollbacks at once) is refused: {refused}")
        st = await self.ops.status(fresh=True)
        self.check(
            f"recovery stays with the cluster nodes: voters {', '.join(st.voters)}, quorum {st.quorum} > "
            f"max_rollback {st.max_rollback}"
        )

    async def close(self) -> None:
        self.kill_agents()
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
        await self.ops.close()
        await self.admin.close()


def _status_name(number: int) -> str:
    from waitgraph.proto.v1 import types_pb2

    return str(types_pb2.ExecStatus.Name(number)).removeprefix("EXEC_STATUS_")


async def _settle(endpoints: list[str], token: str, timeout_s: float = 30.0) -> Any:
    """The leader's status once every node has applied the recovery configuration (a node numbers
    its events from its first apply on, so streams are opened after that)."""
    deadline = time.monotonic() + timeout_s
    while True:
        statuses: list[Any] = []
        for endpoint in endpoints:
            async with Client([endpoint], token, retry_deadline_s=2) as one:
                try:
                    statuses.append(await one.status())
                except WaitgraphClientError:
                    statuses.append(None)
        leaders = {s.leader_id for s in statuses if s is not None}
        leader = next((s for s in statuses if s is not None and s.role == "leader"), None)
        if (
            leader is not None
            and len(leaders) == 1
            and all(s is not None and s.recovery_configured for s in statuses)
            and leader.has_quorum
        ):
            return leader
        if time.monotonic() > deadline:
            raise DemoFailure("the cluster did not elect a leader and configure recovery in time")
        await asyncio.sleep(0.2)


async def run_demo(only: set[int], keep: Path | None, mode: str = "auto") -> int:
    from waitgraph.dev.localcluster import LocalCluster

    t0 = time.monotonic()
    print("waitgraph demo: the seeds' scenarios on a local 3-node cluster, every agent its own process", flush=True)
    lc = LocalCluster(
        root=keep,
        nodes=3,
        mode=mode,
        agents=AGENTS,
        serve_args=("--recovery-confirmation-window-ms", "300", "--detect-interval-ms", "50"),
    )
    results: list[Result] = []
    driver: Driver | None = None
    try:
        lc.start()
        assert lc.credentials is not None
        leader = await _settle(lc.endpoints, lc.credentials.operator)
        for m in lc.members:
            print(f"   node {m.node_id}: grpc {m.grpc_address}, raft {m.raft_address}, pid {m.pid}", flush=True)
        print(
            f"   leader {leader.node_id}; rollout mode {mode}; recovery voters {', '.join(leader.voters)}, "
            f"quorum {leader.quorum}, max_rollback {leader.max_rollback}; confirmation window 300 ms "
            f"({time.monotonic() - t0:.1f}s to start)",
            flush=True,
        )
        driver = Driver(lc.endpoints, lc.credentials, t0)
        await driver.start_watching()
        scenarios = (
            (1, driver.scenario_1),
            (2, driver.scenario_2),
            (3, driver.scenario_3),
            (4, driver.scenario_4),
            (5, driver.scenario_5),
            (6, driver.scenario_6),
        )
        for number, play in scenarios:
            if not only or number in only:
                results.append(await play())
    except (DemoFailure, RuntimeError, TimeoutError, WaitgraphClientError) as exc:
        print(f"\nwaitgraph demo: FAILED: {exc}", flush=True)
        results.append(Result(0, "setup", False, str(exc), 0.0))
    finally:
        if driver is not None:
            await driver.close()
        codes = lc.close(remove=keep is None)
        print(f"\ncluster stopped: {', '.join(f'{k} exit {v}' for k, v in codes.items())}", flush=True)
    print("\nsummary", flush=True)
    for r in results:
        mark = "resolved" if r.resolved else "NOT RESOLVED"
        print(f"   scenario {r.number}: {mark:<12} {r.seconds:5.1f}s  {r.title}", flush=True)
    total = time.monotonic() - t0
    ok = bool(results) and all(r.resolved for r in results)
    if ok:
        print(f"all {len(results)} scenarios resolved in {total:.1f}s", flush=True)
        return 0
    failed = [r for r in results if not r.resolved]
    print(f"waitgraph demo FAILED ({total:.1f}s): " + "; ".join(f"{r.title}: {r.detail}" for r in failed), flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["agent"]:
        if len(args) != 3:
            print("usage: python -m waitgraph.dev.demo agent <scenario> <role>", file=sys.stderr)
            return 2
        return agent_main(args[1], args[2])
    parser = argparse.ArgumentParser(prog="scripts/demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", type=int, action="append", choices=(1, 2, 3, 4, 5, 6), help="run only this one")
    parser.add_argument("--keep", type=Path, default=None, help="keep the cluster's directory here")
    parser.add_argument(
        "--mode",
        choices=("auto", "shadow"),
        default="auto",
        help="rollout mode; shadow (detect and record, never cancel) makes every scenario fail",
    )
    ns = parser.parse_args(args)
    return asyncio.run(run_demo(set(ns.scenario or ()), ns.keep, ns.mode))


if __name__ == "__main__":
    raise SystemExit(main())
