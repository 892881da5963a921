"""Cancellation as a protocol (docs/design.md §5), through real commands and the codec.

One test per case of the seed's "Cancellation Is a Protocol" and "Negative Tests, Metrics, and
Rollback": the fence against a child created after the enumeration, a tool that ignores cancel,
a worker crashing during propagation, committed facts and compensation, claim expiry versus
cancellation, convergence to CANCELLED_STABLE, admission control and the export document.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from waitgraph.statemachine import cancel
from waitgraph.statemachine.cancel import export_pending
from waitgraph.statemachine.codec import encode_envelope, envelope_to_plain
from waitgraph.statemachine.commands import (
    AcceptToolCall,
    AckCancel,
    Acquire,
    CancelRun,
    ClaimTask,
    Command,
    CompleteExecution,
    ConfigureCancellation,
    CreateExecution,
    CreateTarget,
    Envelope,
    ExpireSession,
    FailExecution,
    FreezeAdmission,
    Heartbeat,
    JoinSession,
    RecordSideEffect,
    ReemitCancels,
    RegisterWait,
    Release,
    ReleaseQuarantine,
    RenewClaim,
    RetryExecution,
    StartExecution,
    UnfreezeAdmission,
)
from waitgraph.statemachine.context import Ctx
from waitgraph.statemachine.effects import (
    CancelAcknowledged,
    CancelGenerationRaised,
    CancellationStable,
    CancelRequested,
    CancelSloExceeded,
    ClaimReleased,
    CompensationQueued,
    ExecutionStateChanged,
    GenerationAdvanced,
    ReconciliationOpened,
    Released,
    ResourceQuarantined,
    SideEffectRecorded,
    TaskClaimed,
)
from waitgraph.statemachine.enums import CancelState, EffectOutcome, ExecStatus
from waitgraph.statemachine.errors import Status
from waitgraph.statemachine.ids import ActorKind
from waitgraph.statemachine.lifecycle import end_attempt, set_status
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.state import State

S = ExecStatus
OP = "operator:op"
DAY_MS = 86_400_000


class Cluster:
    """One replica driven through ``apply_bytes`` (the codec included), with logical time."""

    def __init__(self) -> None:
        self.m = StateMachine()
        self.now = 0

    @property
    def st(self) -> State:
        return self.m.state

    def do(self, actor: str, cmd: Command, at: int | None = None) -> Outcome:
        if at is not None:
            self.now = at
        env = Envelope(actor=actor, at_ms=self.now, request_id=None, command=cmd)
        return self.m.apply_bytes(encode_envelope(env))

    def ok(self, actor: str, cmd: Command, at: int | None = None) -> Outcome:
        out = self.do(actor, cmd, at)
        assert out.result is Result.APPLIED, (cmd, out.code, out.message)
        return out

    def refused(self, actor: str, cmd: Command, status: Status, code: str, at: int | None = None) -> Outcome:
        before = self.st.digest()
        out = self.do(actor, cmd, at)
        assert (out.result, out.status, out.code) == (Result.REJECTED, status, code), (out.code, out.message)
        assert self.st.digest() == before, "a rejection changed the state"
        return out

    def join(self, agent: str, lease_ms: int = DAY_MS) -> None:
        self.ok(f"agent:{agent}", JoinSession(agent_id=agent, lease_ms=lease_ms))

    def spawn(self, name: str, agent: str, parent: str | None = None, run: str = "r1", start: bool = True) -> str:
        """exec:<name> owned by ``agent``, created by the parent's agent (a delegation) or its own."""
        eid = f"exec:{name}"
        creator = agent if parent is None else self.st.executions[parent].agent_id
        self.ok(
            f"agent:{creator}",
            CreateExecution(
                execution_id=eid, run_id=run, parent_id=parent, agent_id=agent, observed_cancel_generation=0
            ),
        )
        if start:
            self.ok(f"agent:{agent}", StartExecution(execution_id=eid, generation=1, observed_cancel_generation=0))
        return eid

    def ex(self, eid: str) -> Any:
        return self.st.executions[eid]

    def cancel(
        self, run: str = "r1", observed: int = 0, actor: str = OP, reason: str = "user aborted", at: int | None = None
    ) -> Outcome:
        return self.ok(actor, CancelRun(run_id=run, observed_cancel_generation=observed, reason=reason), at)

    def ack(self, eid: str, side_effects: EffectOutcome = EffectOutcome.NONE, actor: str | None = None) -> Outcome:
        ex = self.ex(eid)
        cgen = self.st.runs[ex.run_id].cancel_generation
        return self.do(
            actor or f"agent:{ex.agent_id}",
            AckCancel(execution_id=eid, generation=ex.generation, cancel_generation=cgen, side_effects=side_effects),
        )

    def target(self, tid: str, slots: int = 1) -> None:
        self.ok(OP, CreateTarget(target_id=tid, slots=slots))

    def acquire(self, eid: str, tid: str) -> None:
        ex = self.ex(eid)
        self.ok(f"agent:{ex.agent_id}", Acquire(target_id=tid, execution_id=eid, generation=ex.generation))

    def held_by_run(self, run: str) -> list[str]:
        """Every permit, lease, reservation or claim still held by an execution of ``run``."""
        members = {e for e, x in self.st.executions.items() if x.run_id == run}
        held = [f"{t.target_id}:{h}" for t in self.st.targets.values() for h in t.holders if h in members]
        held += [f"claim:{e}" for e in self.st.cancel.claims if e in members]
        return sorted(held)


def effects_of(out: Outcome, kind: type) -> list[Any]:
    return [fx for fx in out.effects if isinstance(fx, kind)]


def tree(c: Cluster) -> None:
    """r1: root (agent a) -> child-1 (a) -> grandchild (b); root -> child-2 (b); root -> done (a, COMPLETED)."""
    for agent in ("a", "b"):
        c.join(agent)
    c.spawn("root", "a")
    c.spawn("child-1", "a", parent="exec:root")
    c.spawn("grandchild", "b", parent="exec:child-1")
    c.spawn("child-2", "b", parent="exec:root", start=False)
    c.spawn("done", "a", parent="exec:root")
    c.ok("agent:a", CompleteExecution(execution_id="exec:done", generation=1, observed_cancel_generation=0))


# -- CancelRun ------------------------------------------------------------------------------------


def test_cancel_run_raises_the_generation_and_asks_every_unsettled_execution_once() -> None:
    c = Cluster()
    tree(c)
    out = c.cancel(reason="user aborted")
    raised = effects_of(out, CancelGenerationRaised)
    assert [(r.run_id, r.before, r.after, r.cause) for r in raised] == [("r1", 0, 1, "operator")]
    requested = effects_of(out, CancelRequested)
    # Preorder, children in creation order; the COMPLETED child is not asked.
    assert [(r.execution_id, r.generation, r.cancel_generation, r.emission) for r in requested] == [
        ("exec:root", 1, 1, 1),
        ("exec:child-1", 1, 1, 1),
        ("exec:grandchild", 1, 1, 1),
        ("exec:child-2", 1, 1, 1),
    ]
    assert {r.reason for r in requested} == {"user aborted"}
    assert {e: c.ex(e).status for e in sorted(c.st.executions)} == {
        "exec:child-1": S.CANCEL_REQUESTED,
        "exec:child-2": S.CANCEL_REQUESTED,
        "exec:done": S.COMPLETED,
        "exec:grandchild": S.CANCEL_REQUESTED,
        "exec:root": S.CANCEL_REQUESTED,
    }
    assert c.st.runs["r1"].cancel_generation == 1
    assert cancel.cancel_state(c.st, "r1") is CancelState.CANCELLING


def test_cancel_run_is_for_operators_nodes_and_the_root_agent() -> None:
    c = Cluster()
    tree(c)
    c.refused(
        "agent:b",
        CancelRun(run_id="r1", observed_cancel_generation=0, reason="x"),
        Status.PERMISSION_DENIED,
        "not_owner",
    )
    c.refused(OP, CancelRun(run_id="nope", observed_cancel_generation=0, reason="x"), Status.NOT_FOUND, "no_run")
    c.refused(
        OP,
        CancelRun(run_id="r1", observed_cancel_generation=3, reason="x"),
        Status.INVALID_ARGUMENT,
        "future_cancel_generation",
    )
    out = c.cancel(actor="agent:a", reason="parent gave up")
    assert effects_of(out, CancelGenerationRaised)[0].cause == "parent"
    # A second canceller that saw generation 0 is told it was already raised (a recorded no-op).
    late = c.do("node:n1", CancelRun(run_id="r1", observed_cancel_generation=0, reason="recovery"))
    assert (late.result, late.code, late.effects) == (Result.NOOP, "already_raised", ())
    assert c.st.runs["r1"].cancel_generation == 1


# -- the fence --------------------------------------------------------------------------------------


def test_child_created_concurrently_after_enumeration_is_rejected_by_the_generation_before_claim() -> None:
    c = Cluster()
    tree(c)
    # child-2's agent learnt nothing yet: it still observes cancel generation 0.
    c.cancel()
    create = CreateExecution(
        execution_id="exec:late", run_id="r1", parent_id="exec:child-1", agent_id="a", observed_cancel_generation=0
    )
    out = c.refused("agent:a", create, Status.FAILED_PRECONDITION, "cancel_generation_mismatch")
    assert out.fields == {"run_id": "r1", "observed": 0, "current": 1}
    # Knowing the generation does not help: a cancelled run admits nothing new.
    create_seen = CreateExecution(
        execution_id="exec:late", run_id="r1", parent_id="exec:child-1", agent_id="a", observed_cancel_generation=1
    )
    c.refused("agent:a", create_seen, Status.FAILED_PRECONDITION, "run_cancelled")
    assert "exec:late" not in c.st.executions
    # The child created before the cancel (still PENDING when enumerated) can never claim or start.
    claim = ClaimTask(execution_id="exec:child-2", generation=1, observed_cancel_generation=0, lease_ms=1000)
    c.refused("agent:b", claim, Status.FAILED_PRECONDITION, "cancel_generation_mismatch")
    start = StartExecution(execution_id="exec:child-2", generation=1, observed_cancel_generation=0)
    c.refused("agent:b", start, Status.FAILED_PRECONDITION, "cancel_generation_mismatch")
    tool = AcceptToolCall(execution_id="exec:grandchild", generation=1, observed_cancel_generation=0, effect_id="t1")
    c.refused("agent:b", tool, Status.FAILED_PRECONDITION, "cancel_generation_mismatch")


def test_the_fence_cannot_be_bypassed_by_leaving_the_field_out() -> None:
    c = Cluster()
    c.join("a")
    with pytest.raises(TypeError):
        CreateExecution(execution_id="exec:x", run_id="r1")  # type: ignore[call-arg]
    env = Envelope(
        actor="agent:a",
        at_ms=1,
        request_id=None,
        command=CreateExecution(execution_id="exec:x", run_id="r1", observed_cancel_generation=0),
    )
    # A client that leaves the field out on the wire is refused by the codec, not defaulted to 0.
    plain = envelope_to_plain(env)
    del plain["cmd"]["observed_cancel_generation"]
    out = c.m.apply_bytes(msgpack.packb(plain, use_bin_type=True))
    assert (out.result, out.code) == (Result.REJECTED, "codec")
    assert "missing field 'observed_cancel_generation'" in out.message
    assert "exec:x" not in c.st.executions


def test_a_future_cancel_generation_is_a_bad_argument() -> None:
    c = Cluster()
    c.join("a")
    c.refused(
        "agent:a",
        CreateExecution(execution_id="exec:x", run_id="r1", observed_cancel_generation=1),
        Status.INVALID_ARGUMENT,
        "future_cancel_generation",
    )


# -- claims -----------------------------------------------------------------------------------------


def test_expired_claim_is_taken_over_by_a_higher_generation_and_the_old_commit_is_refused() -> None:
    c = Cluster()
    for agent in ("w1", "w2"):
        c.join(agent)
    c.spawn("task", "w1", start=False)
    c.ok(
        "agent:w1",
        ClaimTask(execution_id="exec:task", generation=1, observed_cancel_generation=0, lease_ms=1000),
        at=1000,
    )
    c.ok("agent:w1", StartExecution(execution_id="exec:task", generation=1, observed_cancel_generation=0))
    c.target("resource:browser")
    c.acquire("exec:task", "resource:browser")
    # A live claim is not taken: that is a lost compare-and-swap.
    steal = ClaimTask(execution_id="exec:task", generation=1, observed_cancel_generation=0, lease_ms=1000)
    c.refused("agent:w2", steal, Status.ABORTED, "claimed", at=1500)
    # w1 stops renewing. Past the lease its claim is dead: no renew, no commit under it.
    renew = RenewClaim(execution_id="exec:task", generation=1, observed_cancel_generation=0)
    c.refused("agent:w1", renew, Status.FAILED_PRECONDITION, "claim_expired", at=2000)
    commit = CompleteExecution(execution_id="exec:task", generation=1, observed_cancel_generation=0)
    c.refused("agent:w1", commit, Status.FAILED_PRECONDITION, "claim_expired")
    # w2 takes over: the old attempt ends (its lease on the browser too) and the claim is at g2.
    out = c.ok("agent:w2", steal, at=2100)
    assert effects_of(out, Released)[0].target_id == "resource:browser"
    assert [(r.generation, r.agent_id, r.reason) for r in effects_of(out, ClaimReleased)] == [
        (1, "w1", "claim_expired")
    ]
    assert [(g.before, g.after) for g in effects_of(out, GenerationAdvanced)] == [(1, 2)]
    claimed = effects_of(out, TaskClaimed)[0]
    assert (claimed.generation, claimed.agent_id, claimed.took_over, claimed.expires_at_ms) == (2, "w2", True, 3100)
    assert (c.ex("exec:task").generation, c.ex("exec:task").status, c.ex("exec:task").agent_id) == (2, S.PENDING, "w2")
    # The old worker comes back: its late commit and tool calls are refused, whatever it presents,
    # and it is told what happened to its attempt (superseded), not that the task is someone else's.
    late = c.refused("agent:w1", commit, Status.FAILED_PRECONDITION, "stale_generation")
    assert "superseded by generation 2" in late.message and late.fields["current"] == 2, late.message
    late_tool = AcceptToolCall(execution_id="exec:task", generation=1, observed_cancel_generation=0, effect_id="t")
    c.refused("agent:w1", late_tool, Status.FAILED_PRECONDITION, "stale_generation")
    # Presenting the new attempt's generation is still not its business.
    c.refused(
        "agent:w1",
        AcceptToolCall(execution_id="exec:task", generation=2, observed_cancel_generation=0, effect_id="t"),
        Status.PERMISSION_DENIED,
        "not_owner",
    )
    c.refused("agent:w1", renew, Status.FAILED_PRECONDITION, "stale_generation")
    # The new attempt runs and commits under its own live claim.
    c.ok("agent:w2", StartExecution(execution_id="exec:task", generation=2, observed_cancel_generation=0))
    done = c.ok("agent:w2", CompleteExecution(execution_id="exec:task", generation=2, observed_cancel_generation=0))
    assert [(r.generation, r.reason) for r in effects_of(done, ClaimReleased)] == [(2, "waiter_finished")]
    assert c.st.cancel.claims == {}


def test_an_old_attempt_of_the_same_worker_is_superseded_too() -> None:
    c = Cluster()
    c.join("w")
    c.spawn("task", "w")
    c.ok("agent:w", ClaimTask(execution_id="exec:task", generation=1, observed_cancel_generation=0, lease_ms=10), at=10)
    c.ok("agent:w", ClaimTask(execution_id="exec:task", generation=1, observed_cancel_generation=0, lease_ms=10), at=30)
    assert c.ex("exec:task").generation == 2
    out = c.do("agent:w", CompleteExecution(execution_id="exec:task", generation=1, observed_cancel_generation=0))
    assert (out.result, out.code) == (Result.NOOP, "stale_generation")
    assert c.ex("exec:task").status is S.PENDING


def test_a_cancelled_runs_old_worker_can_never_commit() -> None:
    c = Cluster()
    for agent in ("w", "w2"):
        c.join(agent)
    c.spawn("task", "w", start=False)
    c.ok(
        "agent:w", ClaimTask(execution_id="exec:task", generation=1, observed_cancel_generation=0, lease_ms=100), at=100
    )
    c.ok("agent:w", StartExecution(execution_id="exec:task", generation=1, observed_cancel_generation=0))
    c.cancel()
    commit = CompleteExecution(execution_id="exec:task", generation=1, observed_cancel_generation=0)
    c.refused("agent:w", commit, Status.FAILED_PRECONDITION, "cancel_generation_mismatch")
    commit_seen = CompleteExecution(execution_id="exec:task", generation=1, observed_cancel_generation=1)
    c.refused("agent:w", commit_seen, Status.FAILED_PRECONDITION, "run_cancelled")
    c.refused(
        "agent:w",
        RenewClaim(execution_id="exec:task", generation=1, observed_cancel_generation=1),
        Status.FAILED_PRECONDITION,
        "run_cancelled",
    )
    out = c.ack("exec:task")
    assert effects_of(out, ClaimReleased)[0].reason == "cancelled"
    assert c.ex("exec:task").status is S.CANCELLED
    c.refused("agent:w", commit_seen, Status.FAILED_PRECONDITION, "run_cancelled")
    # Cancellation forbids new attempts: no retry, no takeover (even long after the lease).
    c.refused(
        "agent:w", RetryExecution(execution_id="exec:task", generation=1), Status.FAILED_PRECONDITION, "run_cancelled"
    )
    takeover = ClaimTask(execution_id="exec:task", generation=1, observed_cancel_generation=1, lease_ms=100)
    c.refused("agent:w2", takeover, Status.FAILED_PRECONDITION, "run_cancelled", at=10_000)
    assert c.ex("exec:task").generation == 1


def test_claims_belong_to_agents_and_their_own_executions() -> None:
    c = Cluster()
    for agent in ("w", "other"):
        c.join(agent)
    c.spawn("task", "w", start=False)
    claim = ClaimTask(execution_id="exec:task", generation=1, observed_cancel_generation=0, lease_ms=100)
    c.refused(OP, claim, Status.PERMISSION_DENIED, "agents_only")
    c.refused("agent:other", claim, Status.PERMISSION_DENIED, "not_owner")
    c.refused(
        "agent:w",
        ClaimTask(execution_id="exec:task", generation=1, observed_cancel_generation=0, lease_ms=0),
        Status.INVALID_ARGUMENT,
        "bad_lease",
    )
    c.ok("agent:w", claim)
    again = c.do("agent:w", claim)
    assert (again.result, again.code) == (Result.NOOP, "already_claimed")
    c.refused(
        "agent:other",
        RenewClaim(execution_id="exec:task", generation=1, observed_cancel_generation=0),
        Status.FAILED_PRECONDITION,
        "not_claimed",
    )


# -- acks, facts, compensation, reconciliation -----------------------------------------------------


def test_committed_facts_survive_cancellation_and_compensation_is_queued_once_versioned() -> None:
    c = Cluster()
    c.join("a")
    c.spawn("writer", "a")
    record = RecordSideEffect(
        execution_id="exec:writer",
        generation=1,
        effect_id="db-write-1",
        outcome=EffectOutcome.COMMITTED,
        compensatable=True,
    )
    c.ok("agent:a", record)
    email = RecordSideEffect(
        execution_id="exec:writer", generation=1, effect_id="email-1", outcome=EffectOutcome.COMMITTED
    )
    c.ok("agent:a", email)
    c.ok(
        "agent:a",
        AcceptToolCall(
            execution_id="exec:writer",
            generation=1,
            observed_cancel_generation=0,
            effect_id="db-write-2",
            compensatable=True,
        ),
    )
    c.cancel()
    out = c.ack("exec:writer", EffectOutcome.COMMITTED)
    # The in-flight write is recorded first, then the compensations are queued (after the commit).
    kinds = [type(fx).__name__ for fx in out.effects]
    assert kinds.index("SideEffectRecorded") < kinds.index("CompensationQueued")
    recorded = effects_of(out, SideEffectRecorded)
    assert [(r.effect_id, r.outcome) for r in recorded] == [("db-write-2", EffectOutcome.COMMITTED)]
    queued = effects_of(out, CompensationQueued)
    assert [(q.effect_id, q.generation, q.version) for q in queued] == [("db-write-1", 1, 1), ("db-write-2", 1, 1)]
    ack = effects_of(out, CancelAcknowledged)[0]
    assert (ack.side_effects, ack.cancel_generation) == (EffectOutcome.COMMITTED, 1)
    assert c.ex("exec:writer").status is S.CANCELLED
    # Facts stay: every committed effect is still in the ledger and cannot be undone.
    ledger = {k: (v.outcome, v.compensatable) for k, v in c.ex("exec:writer").side_effects.items()}
    assert ledger == {
        "db-write-1": (EffectOutcome.COMMITTED, True),
        "db-write-2": (EffectOutcome.COMMITTED, True),
        "email-1": (EffectOutcome.COMMITTED, False),
    }
    undo = RecordSideEffect(execution_id="exec:writer", generation=1, effect_id="email-1", outcome=EffectOutcome.NONE)
    c.refused("agent:a", undo, Status.FAILED_PRECONDITION, "side_effect_final")
    # Queued once: a repeated ack, a re-raise and a convergence pass queue nothing more.
    assert (c.ack("exec:writer").code, len(c.st.cancel.compensations)) == ("already_settled", 2)
    again = c.cancel(observed=1)
    assert effects_of(again, CompensationQueued) == []
    assert effects_of(c.ok("node:n1", ReemitCancels(), at=c.now + 10_000), CompensationQueued) == []
    restored = State.restore(c.st.snapshot())
    assert sorted(restored.cancel.compensations) == [("exec:writer", "db-write-1"), ("exec:writer", "db-write-2")]


def test_an_unknown_outcome_sends_the_execution_to_reconciliation() -> None:
    c = Cluster()
    c.join("a")
    c.spawn("root", "a")
    c.spawn("child", "a", parent="exec:root")
    c.ok(
        "agent:a",
        AcceptToolCall(execution_id="exec:child", generation=1, observed_cancel_generation=0, effect_id="pay-1"),
    )
    c.target("pool:gpu", slots=2)
    c.acquire("exec:child", "pool:gpu")
    c.cancel()
    out = c.ack("exec:child", EffectOutcome.UNKNOWN)
    assert c.ex("exec:child").status is S.NEEDS_RECONCILIATION
    opened = effects_of(out, ReconciliationOpened)
    assert [(o.execution_id, o.unknown_effects, o.cause) for o in opened] == [("exec:child", 1, "cancel_acknowledged")]
    assert c.st.cancel.reconciliations["exec:child"].effect_ids == ["pay-1"]
    assert [r.target_id for r in effects_of(out, Released)] == ["pool:gpu"]
    assert c.st.counters["cancel.side_effects_unknown"] == 1
    assert cancel.metrics(c.st)["unknown_side_effects"] == 1
    # NEEDS_RECONCILIATION counts as settled: the root's ack makes the run stable.
    assert cancel.cancel_state(c.st, "r1") is CancelState.CANCELLING
    c.ack("exec:root")
    assert cancel.cancel_state(c.st, "r1") is CancelState.CANCELLED_STABLE
    # Its attempt is over: a new wait on it is refused (it would stand on nothing until a human
    # reconciles it; found by the retirement twins), and changes nothing.
    c.join("b")
    c.spawn("other", "b", run="r2")
    wait = RegisterWait(
        waiter_id="exec:other", waiter_generation=1, target_id="exec:child", target_generation=1, reason="x"
    )
    c.refused("agent:b", wait, Status.FAILED_PRECONDITION, "target_reconciling")


def test_acks_name_the_attempt_and_the_cancel_generation() -> None:
    c = Cluster()
    tree(c)
    ack = AckCancel(execution_id="exec:root", generation=1, cancel_generation=1, side_effects=EffectOutcome.NONE)
    c.refused("agent:a", ack, Status.FAILED_PRECONDITION, "not_cancel_requested")
    c.cancel()
    c.refused("agent:b", ack, Status.PERMISSION_DENIED, "not_owner")
    c.refused(
        "agent:a",
        AckCancel(execution_id="exec:root", generation=1, cancel_generation=2, side_effects=EffectOutcome.NONE),
        Status.INVALID_ARGUMENT,
        "future_cancel_generation",
    )
    # Re-raised to generation 2: the unacknowledged are asked again at 2; an ack of 1 is stale.
    out = c.cancel(observed=1, reason="again")
    assert [(r.execution_id, r.cancel_generation, r.emission) for r in effects_of(out, CancelRequested)] == [
        ("exec:root", 2, 1),
        ("exec:child-1", 2, 1),
        ("exec:grandchild", 2, 1),
        ("exec:child-2", 2, 1),
    ]
    stale = c.do("agent:a", ack)
    assert (stale.result, stale.code) == (Result.NOOP, "stale_cancel_generation")
    assert c.ex("exec:root").status is S.CANCEL_REQUESTED
    # An operator may acknowledge on an agent's behalf (it found the worker stopped).
    assert c.ack("exec:child-2", actor=OP).ok
    assert c.ex("exec:child-2").status is S.CANCELLED
    # Statuses that are not in the table for the ack stay illegal: a cancelled attempt cannot fail.
    c.refused(
        "agent:a",
        FailExecution(execution_id="exec:root", generation=1, reason="boom"),
        Status.FAILED_PRECONDITION,
        "illegal_transition",
    )


# -- convergence -------------------------------------------------------------------------------------


def test_cancelled_stable_only_when_every_descendant_settled_and_nothing_is_held() -> None:
    c = Cluster()
    tree(c)
    c.target("pool:slots", slots=3)
    c.target("reservation:seat")
    c.target("resource:ws")
    c.acquire("exec:grandchild", "pool:slots")
    c.acquire("exec:child-1", "reservation:seat")
    c.acquire("exec:root", "resource:ws")
    c.ok("agent:b", ClaimTask(execution_id="exec:child-2", generation=1, observed_cancel_generation=0, lease_ms=DAY_MS))
    c.cancel(at=1_000)
    c.now = 1_250
    for eid in ("exec:grandchild", "exec:child-2", "exec:child-1"):
        out = c.ack(eid)
        assert out.ok
        assert effects_of(out, CancellationStable) == []
        assert cancel.cancel_state(c.st, "r1") is CancelState.CANCELLING
    assert c.held_by_run("r1") == ["resource:ws:exec:root"]
    out = c.ack("exec:root")
    stable = effects_of(out, CancellationStable)
    assert [(s.scope_id, s.run_id, s.cancel_generation, s.quiescence_ms, s.leaked) for s in stable] == [
        ("run:r1", "r1", 1, 250, 0)
    ]
    assert cancel.cancel_state(c.st, "r1") is CancelState.CANCELLED_STABLE
    assert c.held_by_run("r1") == []
    assert all(c.ex(e).status in (S.CANCELLED, S.COMPLETED) for e in c.st.executions)
    m = cancel.metrics(c.st)
    assert (m["leaked_permits"], m["pending_acks"], m["open_cancellations"], m["claims_held"]) == (0, 0, 0, 0)
    # Propagation time per execution (request -> ack), as a bounded histogram.
    counters = c.st.counters
    assert counters["cancel.propagation_ms.count"] == 4
    assert counters["cancel.propagation_ms.sum_ms"] == 250 * 4
    assert counters["cancel.propagation_ms.le_1000"] == 4
    assert counters["cancel.quiescence_ms.count"] == 1
    assert not [k for k in counters if "exec:" in k or "r1" in k], "ids in counter keys"


def test_a_run_with_nothing_left_to_stop_is_stable_at_once() -> None:
    c = Cluster()
    c.join("a")
    c.spawn("only", "a")
    c.ok("agent:a", CompleteExecution(execution_id="exec:only", generation=1, observed_cancel_generation=0))
    out = c.cancel()
    assert effects_of(out, CancelRequested) == []
    assert [s.scope_id for s in effects_of(out, CancellationStable)] == ["run:r1"]


def test_reemission_asks_the_unacknowledged_again_until_they_converge() -> None:
    c = Cluster()
    tree(c)
    c.ok(OP, ConfigureCancellation(slo_ms=60_000, reemit_interval_ms=1_000))
    c.cancel(at=10_000)
    c.ack("exec:grandchild")
    assert effects_of(c.ok("node:n1", ReemitCancels(), at=10_999), CancelRequested) == []
    out = c.ok("node:n1", ReemitCancels(), at=11_000)
    assert [(r.execution_id, r.emission) for r in effects_of(out, CancelRequested)] == [
        ("exec:child-1", 2),
        ("exec:child-2", 2),
        ("exec:root", 2),
    ]
    # A budget bounds one pass; the rest follow in the next one.
    c.ack("exec:child-1")
    out = c.ok("node:n1", ReemitCancels(max_emissions=1), at=12_000)
    assert [(r.execution_id, r.emission) for r in effects_of(out, CancelRequested)] == [("exec:child-2", 3)]
    out = c.ok("node:n1", ReemitCancels(), at=12_001)
    assert [(r.execution_id, r.emission) for r in effects_of(out, CancelRequested)] == [("exec:root", 3)]
    assert c.st.counters["cancel.reemitted"] == 5
    c.refused("agent:a", ReemitCancels(), Status.PERMISSION_DENIED, "operator_only")


# -- SLO, quarantine ----------------------------------------------------------------------------------


def test_a_tool_that_ignores_cancel_is_quarantined_after_the_slo_and_its_resources_are_not_reused() -> None:
    c = Cluster()
    for agent in ("a", "other"):
        c.join(agent)
    c.ok(OP, ConfigureCancellation(slo_ms=5_000, reemit_interval_ms=1_000))
    c.spawn("stubborn", "a")
    for tid, slots in (("resource:browser-9", 1), ("resource:workspace-3", 1), ("pool:tenant-ctx", 1)):
        c.target(tid, slots)
        c.acquire("exec:stubborn", tid)
    c.ok(
        "agent:a",
        AcceptToolCall(execution_id="exec:stubborn", generation=1, observed_cancel_generation=0, effect_id="scrape"),
    )
    c.cancel(at=1_000)
    for t in (2_000, 3_000, 4_000, 5_999):
        out = c.ok("node:n1", ReemitCancels(), at=t)
        assert effects_of(out, CancelSloExceeded) == []
    assert c.ex("exec:stubborn").status is S.CANCEL_REQUESTED
    out = c.ok("node:n1", ReemitCancels(), at=6_000)
    alert = effects_of(out, CancelSloExceeded)
    assert [(a.execution_id, a.requested_at_ms, a.slo_ms) for a in alert] == [("exec:stubborn", 1_000, 5_000)]
    assert [(r.target_id, r.execution_id) for r in effects_of(out, ResourceQuarantined)] == [
        ("pool:tenant-ctx", "exec:stubborn"),
        ("resource:browser-9", "exec:stubborn"),
        ("resource:workspace-3", "exec:stubborn"),
    ]
    assert c.ex("exec:stubborn").status is S.QUARANTINED
    assert cancel.metrics(c.st)["quarantined"] == 1
    # Not handed out again: another run cannot take the browser, and the stubborn agent cannot
    # quietly release it to someone else.
    c.spawn("next", "other", run="r2")
    c.refused(
        "agent:other",
        Acquire(target_id="resource:browser-9", execution_id="exec:next", generation=1),
        Status.ABORTED,
        "target_held",
    )
    c.refused(
        "agent:a",
        Release(target_id="resource:browser-9", execution_id="exec:stubborn", generation=1),
        Status.FAILED_PRECONDITION,
        "quarantined",
    )
    # A late ack records the facts but keeps the isolation; the run is not stable.
    late = c.ack("exec:stubborn", EffectOutcome.COMMITTED)
    assert late.ok and c.ex("exec:stubborn").status is S.QUARANTINED
    assert c.ex("exec:stubborn").side_effects["scrape"].outcome is EffectOutcome.COMMITTED
    assert c.ack("exec:stubborn").code == "already_acknowledged"
    assert sorted(c.st.targets["resource:browser-9"].holders) == ["exec:stubborn"]
    assert cancel.cancel_state(c.st, "r1") is CancelState.CANCELLING
    # Only an operator releases the quarantine; then the resources are free and the run stable.
    release = ReleaseQuarantine(
        execution_id="exec:stubborn", generation=1, side_effects=EffectOutcome.UNKNOWN, reason="browser wiped"
    )
    c.refused("agent:a", release, Status.PERMISSION_DENIED, "operator_only")
    out = c.ok(OP, release)
    assert sorted(r.target_id for r in effects_of(out, Released)) == [
        "pool:tenant-ctx",
        "resource:browser-9",
        "resource:workspace-3",
    ]
    assert c.ex("exec:stubborn").status is S.CANCELLED
    assert effects_of(out, CancellationStable)[0].scope_id == "run:r1"
    c.ok("agent:other", Acquire(target_id="resource:browser-9", execution_id="exec:next", generation=1))
    c.refused(OP, release, Status.FAILED_PRECONDITION, "not_quarantined")


# -- a worker crashing during propagation --------------------------------------------------------------


def crashing_worker(c: Cluster) -> None:
    """r1: root (agent a) delegates child (agent b, claimed, a pool permit, a tool call in flight)."""
    c.join("a")
    c.join("b", lease_ms=5_000)
    c.spawn("root", "a")
    c.spawn("child", "b", parent="exec:root", start=False)
    c.ok("agent:b", ClaimTask(execution_id="exec:child", generation=1, observed_cancel_generation=0, lease_ms=60_000))
    c.ok("agent:b", StartExecution(execution_id="exec:child", generation=1, observed_cancel_generation=0))
    c.target("pool:gpu", slots=2)
    c.acquire("exec:child", "pool:gpu")
    c.ok(
        "agent:b",
        AcceptToolCall(execution_id="exec:child", generation=1, observed_cancel_generation=0, effect_id="upload"),
    )
    c.cancel(at=1_000)


def test_a_worker_crashing_during_propagation_leaves_no_lease_or_owner_after_cancelled_stable() -> None:
    c = Cluster()
    crashing_worker(c)
    c.ok("agent:a", Heartbeat(agent_id="a"), at=2_000)
    c.ack("exec:root")
    # b stops heartbeating: the leader expires its session; what it had in flight is now UNKNOWN,
    # and its execution stays unacknowledged (the run is not stable, re-emission keeps asking).
    out = c.ok("node:n1", ExpireSession(agent_id="b", incarnation=c.st.sessions["b"].incarnation), at=8_000)
    assert [(r.effect_id, r.outcome) for r in effects_of(out, SideEffectRecorded)] == [
        ("upload", EffectOutcome.UNKNOWN)
    ]
    assert c.ex("exec:child").status is S.CANCEL_REQUESTED
    assert cancel.cancel_state(c.st, "r1") is CancelState.CANCELLING
    assert [r.execution_id for r in effects_of(c.ok("node:n1", ReemitCancels()), CancelRequested)] == ["exec:child"]
    # The worker restarts (a new session incarnation) and acknowledges: UNKNOWN -> reconciliation,
    # and the permit and the claim go with the transition.
    c.join("b")
    out = c.ack("exec:child")
    assert c.ex("exec:child").status is S.NEEDS_RECONCILIATION
    assert [r.target_id for r in effects_of(out, Released)] == ["pool:gpu"]
    assert [r.reason for r in effects_of(out, ClaimReleased)] == ["cancelled"]
    assert effects_of(out, CancellationStable)[0].leaked == 0
    assert c.held_by_run("r1") == []
    assert cancel.metrics(c.st)["leaked_permits"] == 0


def test_a_worker_that_never_comes_back_is_quarantined_then_released_by_an_operator() -> None:
    c = Cluster()
    crashing_worker(c)
    c.ok("agent:a", Heartbeat(agent_id="a"), at=2_000)
    c.ack("exec:root")
    c.ok("node:n1", ExpireSession(agent_id="b", incarnation=c.st.sessions["b"].incarnation), at=8_000)
    c.ok("node:n1", ReemitCancels(), at=1_000 + c.st.cancel.slo_ms)
    assert c.ex("exec:child").status is S.QUARANTINED
    assert c.held_by_run("r1") == ["claim:exec:child", "pool:gpu:exec:child"]
    out = c.ok(
        OP,
        ReleaseQuarantine(execution_id="exec:child", generation=1, side_effects=EffectOutcome.NONE, reason="host gone"),
    )
    assert c.ex("exec:child").status is S.NEEDS_RECONCILIATION  # the upload stayed UNKNOWN
    assert effects_of(out, CancellationStable)[0].scope_id == "run:r1"
    assert c.held_by_run("r1") == []


# -- recovery's victim -----------------------------------------------------------------------------------


def test_cancel_subtree_cancels_a_victim_and_its_descendants_without_cancelling_the_run() -> None:
    c = Cluster()
    c.join("a")
    c.spawn("root", "a")
    c.spawn("victim", "a", parent="exec:root")
    c.spawn("helper", "a", parent="exec:victim")
    c.spawn("bystander", "a", parent="exec:root")
    c.target("resource:browser")
    c.acquire("exec:victim", "resource:browser")
    c.target("artifact:review")
    c.ok(
        "agent:a",
        RegisterWait(
            waiter_id="exec:victim",
            waiter_generation=1,
            target_id="artifact:review",
            target_generation=1,
            reason="review",
        ),
    )
    # What CommitRecovery does inside its apply: CAS WAITING -> CANCELLING, cancel, then release.
    st = c.st
    ctx = Ctx(st, "node:n1", ActorKind.NODE, st.now_ms + 1)
    victim = st.executions["exec:victim"]
    assert victim.status is S.WAITING
    set_status(ctx, victim, S.CANCELLING, "victim")
    scope = cancel.cancel_subtree(ctx, victim, "deadlock victim", "recovery")
    end_attempt(ctx, victim, "rolled_back")
    assert scope.scope_id == "exec:victim@1"
    requested = [fx for fx in ctx.fx if isinstance(fx, CancelRequested)]
    assert [(r.execution_id, r.cancel_generation) for r in requested] == [("exec:victim", 0), ("exec:helper", 0)]
    assert [fx.target_id for fx in ctx.fx if isinstance(fx, Released)] == ["resource:browser"]
    assert (victim.status, st.executions["exec:helper"].status) == (S.CANCELLING, S.CANCEL_REQUESTED)
    assert st.executions["exec:bystander"].status is S.RUNNING
    assert st.runs["r1"].cancel_generation == 0
    # Acks converge the victim's scope like a run's.
    c.ack("exec:helper")
    out = c.ack("exec:victim")
    assert [(s.scope_id, s.root_id, s.leaked) for s in effects_of(out, CancellationStable)] == [
        ("exec:victim@1", "exec:victim", 0)
    ]
    assert victim.status is S.CANCELLED
    # The run was not cancelled: the rolled-back victim may try again at a new generation...
    retried = c.ok("agent:a", RetryExecution(execution_id="exec:victim", generation=1))
    assert [(g.before, g.after) for g in effects_of(retried, GenerationAdvanced)] == [(1, 2)]
    assert victim.status is S.PENDING
    # ...and the bystander kept working throughout.
    c.ok("agent:a", CompleteExecution(execution_id="exec:bystander", generation=1, observed_cancel_generation=0))


def test_a_victim_of_a_cancelled_run_is_not_retried() -> None:
    c = Cluster()
    c.join("a")
    c.spawn("root", "a")
    c.spawn("victim", "a", parent="exec:root")
    st = c.st
    ctx = Ctx(st, "node:n1", ActorKind.NODE, st.now_ms + 1)
    victim = st.executions["exec:victim"]
    set_status(ctx, victim, S.CANCELLING, "victim")
    cancel.cancel_subtree(ctx, victim, "deadlock victim", "recovery")
    out = c.cancel()
    # Already asked by the victim scope: asked again at the run's generation, in both scopes.
    assert [(r.execution_id, r.cancel_generation, r.emission) for r in effects_of(out, CancelRequested)] == [
        ("exec:root", 1, 1),
        ("exec:victim", 1, 1),
    ]
    assert st.cancel.requests["exec:victim"].scopes == ("exec:victim@1", "run:r1")
    c.ack("exec:victim")
    out = c.ack("exec:root")
    assert [s.scope_id for s in effects_of(out, CancellationStable)] == ["run:r1"]
    assert st.cancel.scopes["exec:victim@1"].stable_at_ms is not None
    c.refused(
        "agent:a", RetryExecution(execution_id="exec:victim", generation=1), Status.FAILED_PRECONDITION, "run_cancelled"
    )


# -- admission control, export ----------------------------------------------------------------------------


def test_admission_freeze_stops_new_delegations_and_the_export_keeps_every_pending_edge() -> None:
    c = Cluster()
    tree(c)
    c.target("resource:browser")
    c.acquire("exec:child-1", "resource:browser")
    c.ok(
        "agent:b",
        RegisterWait(
            waiter_id="exec:grandchild",
            waiter_generation=1,
            target_id="resource:browser",
            target_generation=1,
            reason="browser",
        ),
    )
    c.ok(OP, FreezeAdmission(run_id="r1", reason="schema rollback"))
    assert c.do(OP, FreezeAdmission(run_id="r1", reason="schema rollback")).code == "already_frozen"
    child = CreateExecution(
        execution_id="exec:new", run_id="r1", parent_id="exec:root", agent_id="a", observed_cancel_generation=0
    )
    c.refused("agent:a", child, Status.FAILED_PRECONDITION, "admission_frozen")
    claim = ClaimTask(execution_id="exec:child-2", generation=1, observed_cancel_generation=0, lease_ms=100)
    c.refused("agent:b", claim, Status.FAILED_PRECONDITION, "admission_frozen")
    # Other runs are not affected by a run's freeze; the cluster freeze stops new runs too.
    c.spawn("elsewhere", "a", run="r2")
    c.ok(OP, FreezeAdmission(reason="maintenance"))
    root = CreateExecution(execution_id="exec:r3", run_id="r3", observed_cancel_generation=0)
    c.refused("agent:a", root, Status.FAILED_PRECONDITION, "admission_frozen")
    c.refused("agent:a", FreezeAdmission(reason="x"), Status.PERMISSION_DENIED, "operator_only")
    c.cancel()
    doc = export_pending(c.st)
    assert (doc["format"], doc["version"]) == ("waitgraph-pending", 1)
    assert doc["admission"] == {
        "clusterFrozen": "maintenance",
        "frozenRuns": [{"run": "r1", "reason": "schema rollback"}],
    }
    assert doc["edges"] == [
        {
            "waiterExecution": "exec:grandchild",
            "waiterGeneration": 1,
            "targetId": "resource:browser",
            "targetGeneration": 1,
            "reason": "browser",
            "deadline": None,
            "cancelMode": "COOPERATIVE",
            "edgeVersion": 1,
        }
    ]
    assert doc["holdings"] == [
        {"targetId": "resource:browser", "lease": 1, "holder": "exec:child-1", "holderGeneration": 1}
    ]
    [open_] = doc["cancellations"]
    assert (open_["scope"], open_["cancelGeneration"], open_["cause"]) == ("run:r1", 1, "operator")
    assert [p["execution"] for p in open_["pending"]] == [
        "exec:child-1",
        "exec:child-2",
        "exec:grandchild",
        "exec:root",
    ]
    # The export is a pure function of the state: a restored replica exports the same document.
    assert export_pending(State.restore(c.st.snapshot())) == doc
    # Converge, then lift admission control; the graph was never cleared on the way.
    for eid in ("exec:grandchild", "exec:child-1", "exec:child-2", "exec:root"):
        c.ack(eid)
    assert export_pending(c.st)["cancellations"] == []
    c.ok(OP, UnfreezeAdmission(run_id="r1", reason="rolled back"))
    c.ok(OP, UnfreezeAdmission(reason="done"))
    assert c.do(OP, UnfreezeAdmission(reason="done")).code == "not_frozen"
    c.ok("agent:a", root)


# -- replication ------------------------------------------------------------------------------------------


def test_a_replica_restored_mid_cancellation_continues_identically() -> None:
    c = Cluster()
    tree(c)
    c.ok(OP, ConfigureCancellation(slo_ms=3_000, reemit_interval_ms=500))
    c.cancel(at=1_000)
    c.ack("exec:grandchild")
    c.ok("node:n1", ReemitCancels(max_emissions=1), at=1_500)
    restored = StateMachine(State.restore(c.st.snapshot()))
    assert restored.digest() == c.m.digest()
    tail: list[tuple[str, Command, int]] = [
        ("node:n1", ReemitCancels(max_emissions=2), 2_000),
        (
            "agent:a",
            AckCancel(execution_id="exec:child-1", generation=1, cancel_generation=1, side_effects=EffectOutcome.NONE),
            2_100,
        ),
        ("node:n1", ReemitCancels(), 4_000),
        (
            OP,
            ReleaseQuarantine(execution_id="exec:root", generation=1, side_effects=EffectOutcome.NONE, reason="ok"),
            4_100,
        ),
        (
            OP,
            ReleaseQuarantine(execution_id="exec:child-2", generation=1, side_effects=EffectOutcome.NONE, reason="ok"),
            4_200,
        ),
    ]
    for actor, cmd, at in tail:
        env = encode_envelope(Envelope(actor=actor, at_ms=at, request_id=None, command=cmd))
        a, b = c.m.apply_bytes(env), restored.apply_bytes(env)
        assert a == b and a.ok, (cmd, a.code, a.message)
        assert c.m.digest() == restored.digest()
    assert cancel.cancel_state(restored.state, "r1") is CancelState.CANCELLED_STABLE


def test_configuration_is_validated() -> None:
    c = Cluster()
    c.refused(OP, ConfigureCancellation(slo_ms=0, reemit_interval_ms=1), Status.INVALID_ARGUMENT, "bad_slo")
    c.refused(
        OP, ConfigureCancellation(slo_ms=10, reemit_interval_ms=11), Status.INVALID_ARGUMENT, "bad_reemit_interval"
    )
    c.refused(OP, ReemitCancels(max_emissions=0), Status.INVALID_ARGUMENT, "bad_max_emissions")
    assert c.do(OP, ConfigureCancellation(slo_ms=30_000, reemit_interval_ms=1_000)).code == "unchanged"


def test_effects_of_a_cancel_are_state_changes_then_requests_per_execution() -> None:
    c = Cluster()
    tree(c)
    out = c.cancel()
    changed = effects_of(out, ExecutionStateChanged)
    assert {(s.before, s.after, s.cause) for s in changed} == {
        (S.RUNNING, S.CANCEL_REQUESTED, "cancel_requested"),
        (S.PENDING, S.CANCEL_REQUESTED, "cancel_requested"),
    }
    assert len(changed) == len(effects_of(out, CancelRequested)) == 4
