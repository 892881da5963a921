"""Stateful property test of the cancellation protocol (docs/design.md §5 and §7).

Random sequences of run trees, claims, tool calls, holdings, waits, cancels (by run and, as
recovery does, by victim subtree), acks, convergence passes, session expiry and quarantine
releases. After every step:
- cancel generations never decrease;
- after CANCELLED_STABLE nothing of the scope holds a permit, lease, reservation or claim, and
  every execution in it is settled;
- no execution acts under a cancel generation older than its run's: every applied fenced command
  presented its run's current generation, and every open cancel request names it too;
- no cancelled attempt commits; a settled execution holds nothing; ``cancel.leaked_permits`` is 0;
- the cancellation records snapshot and restore to the same bytes and the same derived indexes.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import settings
from hypothesis import strategies as hs
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from waitgraph.statemachine import cancel
from waitgraph.statemachine.cancel_state import CancelBook
from waitgraph.statemachine.codec import encode_envelope
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
    FailExecution,
    JoinSession,
    RecordSideEffect,
    ReemitCancels,
    RegisterWait,
    Release,
    ReleaseQuarantine,
    RenewClaim,
    RetryExecution,
    StartExecution,
    Tick,
)
from waitgraph.statemachine.context import Ctx
from waitgraph.statemachine.enums import SETTLED, CancelState, EffectOutcome, ExecStatus
from waitgraph.statemachine.ids import ActorKind
from waitgraph.statemachine.lifecycle import end_attempt, set_status
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.state import State

AGENTS = ("a", "b", "c")
RUNS = ("r1", "r2")
EXECS = tuple(f"exec:e{i}" for i in range(8))
TARGETS = ("pool:p", "resource:x", "reservation:s")
OUTCOMES = tuple(EffectOutcome)
OP = "operator:op"
EXISTING = hs.integers(min_value=0, max_value=len(EXECS) - 1)
"""An index into the executions that exist (resolved by ``pick``), so rules act on real ones."""

S = ExecStatus
FENCED_FIRST = (CreateExecution, StartExecution, CompleteExecution)
"""Commands whose first check is the cancellation fence."""
ASKED = frozenset({S.CANCEL_REQUESTED, S.CANCELLING, S.QUARANTINED})


class CancellationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.m = StateMachine()
        self.shadow: StateMachine | None = None
        """A replica restored from a snapshot mid-run, fed the same log from then on."""
        self.now = 0
        self.seen_generations: dict[str, int] = {}
        self.victim_scopes = 0
        self.apply(OP, ConfigureCancellation(slo_ms=1_500, reemit_interval_ms=300))
        self.apply(OP, CreateTarget(target_id="pool:p", slots=2))
        self.apply(OP, CreateTarget(target_id="resource:x"))
        self.apply(OP, CreateTarget(target_id="reservation:s"))
        for agent in AGENTS:
            self.apply(f"agent:{agent}", JoinSession(agent_id=agent, lease_ms=3_000))

    @property
    def st(self) -> State:
        return self.m.state

    # -- plumbing --------------------------------------------------------------------------------

    def run_gen(self, run_id: str) -> int:
        run = self.st.runs.get(run_id)
        return run.cancel_generation if run is not None else 0

    def observed(self, run_id: str, stale: bool) -> int:
        """What a caller presents: the run's generation, or (a worker that missed events) 0."""
        return 0 if stale else self.run_gen(run_id)

    def owner(self, eid: str) -> str:
        ex = self.st.executions.get(eid)
        return f"agent:{ex.agent_id}" if ex is not None else "agent:a"

    def pick(self, i: int, among: Callable[[str], bool] | None = None) -> str:
        """The i-th existing execution (wrapping), preferring those ``among`` accepts; a name that
        does not exist yet when there are none."""
        existing = sorted(self.st.executions)
        preferred = [e for e in existing if among(e)] if among is not None else []
        pool = preferred or existing
        return pool[i % len(pool)] if pool else EXECS[i]

    def gen(self, eid: str) -> int:
        ex = self.st.executions.get(eid)
        return ex.generation if ex is not None else 1

    def apply(self, actor: str, cmd: Command) -> Outcome:
        st_ = self.st
        fenced_run: str | None = None
        observed = getattr(cmd, "observed_cancel_generation", None)
        if observed is not None and not isinstance(cmd, CancelRun):  # CancelRun raises it, it is not fenced
            if isinstance(cmd, CreateExecution):
                fenced_run = cmd.run_id
            elif cmd.execution_id in st_.executions:  # type: ignore[union-attr]
                fenced_run = st_.executions[cmd.execution_id].run_id  # type: ignore[union-attr]
        gen_before = self.run_gen(fenced_run) if fenced_run is not None else 0
        commit_target = None
        if isinstance(cmd, CompleteExecution) and cmd.execution_id in st_.executions:
            ex = st_.executions[cmd.execution_id]
            commit_target = (ex.status, cmd.execution_id in st_.cancel.requests, self.run_gen(ex.run_id))
        env = Envelope(actor=actor, at_ms=self.now, request_id=None, command=cmd)
        data = encode_envelope(env)
        out = self.m.apply_bytes(data)
        if self.shadow is not None:
            # The restored replica rebuilt its indexes (heaps, pending sets) from the snapshot
            # alone; it must still answer every command exactly as the original does.
            assert self.shadow.apply_bytes(data) == out, cmd
            assert self.shadow.digest() == self.m.digest(), cmd
        if out.result is Result.APPLIED and fenced_run is not None:
            # The fence: whatever was admitted was admitted under the run's current generation,
            # and a cancelled run admits nothing.
            assert observed == gen_before == 0, (cmd, gen_before)
        if fenced_run in self.st.runs and gen_before > 0 and isinstance(cmd, FENCED_FIRST):
            # In a cancelled run these are refused by the generation itself, before anything else
            # (the status checks behind it would refuse too, with a less telling code).
            assert out.code in ("cancel_generation_mismatch", "run_cancelled"), (cmd, out.code)
        if out.result is Result.APPLIED and commit_target is not None:
            status, asked, cgen = commit_target
            assert status not in ASKED and not asked and cgen == 0, (cmd, commit_target)
        return out

    # -- rules -----------------------------------------------------------------------------------

    @initialize(fanout=hs.sampled_from((1, 2, 3)), names=hs.permutations(EXECS))
    def two_runs(self, fanout: int, names: list[str]) -> None:
        """r1 and r2, each a running root with ``fanout`` running children of other agents; names
        in any order, so that creation order (and tree order) differs from id order."""
        name = iter(names)
        for run_id in RUNS:
            root = next(name)
            self.apply("agent:a", CreateExecution(execution_id=root, run_id=run_id, observed_cancel_generation=0))
            self.apply("agent:a", StartExecution(execution_id=root, generation=1, observed_cancel_generation=0))
            for k in range(fanout):
                child, agent = next(name), AGENTS[1 + k % 2]
                create = CreateExecution(
                    execution_id=child, run_id=run_id, parent_id=root, agent_id=agent, observed_cancel_generation=0
                )
                self.apply("agent:a", create)
                self.apply(
                    f"agent:{agent}", StartExecution(execution_id=child, generation=1, observed_cancel_generation=0)
                )

    @rule(data=hs.data(), eid=hs.sampled_from(EXECS), agent=hs.sampled_from(AGENTS), stale=hs.booleans())
    def create(self, data: hs.DataObject, eid: str, agent: str, stale: bool) -> None:
        existing = sorted(self.st.executions)
        if existing and data.draw(hs.booleans()):
            parent = data.draw(hs.sampled_from(existing))
            run_id = self.st.executions[parent].run_id
            creator = self.owner(parent)
        else:
            parent, run_id, creator = None, data.draw(hs.sampled_from(RUNS)), f"agent:{agent}"
        cmd = CreateExecution(
            execution_id=eid,
            run_id=run_id,
            parent_id=parent,
            agent_id=agent,
            observed_cancel_generation=self.observed(run_id, stale),
        )
        self.apply(creator, cmd)

    @rule(i=EXISTING, stale=hs.booleans())
    def start(self, i: int, stale: bool) -> None:
        eid = self.pick(i)
        run_id = self.st.executions[eid].run_id if eid in self.st.executions else "r1"
        cmd = StartExecution(
            execution_id=eid, generation=self.gen(eid), observed_cancel_generation=self.observed(run_id, stale)
        )
        self.apply(self.owner(eid), cmd)

    @rule(
        i=EXISTING,
        agent=hs.sampled_from(AGENTS),
        lease=hs.sampled_from((200, 2_000)),
        stale=hs.booleans(),
        old=hs.booleans(),
    )
    def claim(self, i: int, agent: str, lease: int, stale: bool, old: bool) -> None:
        eid = self.pick(i)
        run_id = self.st.executions[eid].run_id if eid in self.st.executions else "r1"
        generation = max(1, self.gen(eid) - int(old))
        cmd = ClaimTask(
            execution_id=eid,
            generation=generation,
            observed_cancel_generation=self.observed(run_id, stale),
            lease_ms=lease,
        )
        self.apply(f"agent:{agent}", cmd)

    @rule(i=EXISTING, stale=hs.booleans())
    def renew(self, i: int, stale: bool) -> None:
        eid = self.pick(i, lambda e: e in self.st.cancel.claims)
        run_id = self.st.executions[eid].run_id if eid in self.st.executions else "r1"
        claim = self.st.cancel.claims.get(eid)
        actor = f"agent:{claim.agent_id}" if claim is not None else self.owner(eid)
        cmd = RenewClaim(
            execution_id=eid, generation=self.gen(eid), observed_cancel_generation=self.observed(run_id, stale)
        )
        self.apply(actor, cmd)

    @rule(i=EXISTING, effect=hs.sampled_from(("t1", "t2")), comp=hs.booleans(), stale=hs.booleans())
    def accept_tool(self, i: int, effect: str, comp: bool, stale: bool) -> None:
        eid = self.pick(i)
        run_id = self.st.executions[eid].run_id if eid in self.st.executions else "r1"
        cmd = AcceptToolCall(
            execution_id=eid,
            generation=self.gen(eid),
            observed_cancel_generation=self.observed(run_id, stale),
            effect_id=effect,
            compensatable=comp,
        )
        self.apply(self.owner(eid), cmd)

    @rule(i=EXISTING, effect=hs.sampled_from(("t1", "w1")), outcome=hs.sampled_from(OUTCOMES))
    def record(self, i: int, effect: str, outcome: EffectOutcome) -> None:
        eid = self.pick(i)
        cmd = RecordSideEffect(
            execution_id=eid, generation=self.gen(eid), effect_id=effect, outcome=outcome, compensatable=True
        )
        self.apply(self.owner(eid), cmd)

    @rule(i=EXISTING, tid=hs.sampled_from(TARGETS), release=hs.booleans())
    def hold(self, i: int, tid: str, release: bool) -> None:
        eid = self.pick(i)
        cls = Release if release else Acquire
        self.apply(self.owner(eid), cls(target_id=tid, execution_id=eid, generation=self.gen(eid)))

    @rule(i=EXISTING, tid=hs.sampled_from(("resource:x", "reservation:s")))
    def wait(self, i: int, tid: str) -> None:
        eid = self.pick(i)
        if not self.st.targets[tid].holders:
            other = self.pick(i + 1)
            self.apply(self.owner(other), Acquire(target_id=tid, execution_id=other, generation=self.gen(other)))
        t = self.st.targets[tid]
        hwm = self.st.executions[eid].edge_hwm.get(tid, 0) if eid in self.st.executions else 0
        cmd = RegisterWait(
            waiter_id=eid,
            waiter_generation=self.gen(eid),
            target_id=tid,
            target_generation=t.version,
            reason="needs it",
            edge_version=hwm + 1,
        )
        self.apply(self.owner(eid), cmd)

    @rule(i=EXISTING, stale=hs.booleans(), old=hs.booleans())
    def complete(self, i: int, stale: bool, old: bool) -> None:
        eid = self.pick(i)
        run_id = self.st.executions[eid].run_id if eid in self.st.executions else "r1"
        generation = max(1, self.gen(eid) - int(old))
        cmd = CompleteExecution(
            execution_id=eid, generation=generation, observed_cancel_generation=self.observed(run_id, stale)
        )
        self.apply(self.owner(eid), cmd)

    @rule(i=EXISTING, retry=hs.booleans())
    def fail_or_retry(self, i: int, retry: bool) -> None:
        eid = self.pick(i)
        if retry:
            self.apply(self.owner(eid), RetryExecution(execution_id=eid, generation=self.gen(eid)))
        else:
            self.apply(self.owner(eid), FailExecution(execution_id=eid, generation=self.gen(eid), reason="boom"))

    @rule(run_id=hs.sampled_from(RUNS), stale=hs.booleans(), actor=hs.sampled_from((OP, "node:n1", "agent:a")))
    def cancel_run(self, run_id: str, stale: bool, actor: str) -> None:
        cmd = CancelRun(run_id=run_id, observed_cancel_generation=self.observed(run_id, stale), reason="stop")
        self.apply(actor, cmd)

    @precondition(lambda self: any(ex.status is S.WAITING for ex in self.st.executions.values()))
    @rule(data=hs.data())
    def victim(self, data: hs.DataObject) -> None:
        """What CommitRecovery does in its apply: CAS WAITING -> CANCELLING, cancel the subtree, release."""
        waiting = sorted(e for e, ex in self.st.executions.items() if ex.status is S.WAITING)
        eid = data.draw(hs.sampled_from(waiting))
        replicas = [self.m] if self.shadow is None else [self.m, self.shadow]
        for sm in replicas:
            st_ = sm.state
            ex = st_.executions[eid]
            ctx = Ctx(st_, "node:n1", ActorKind.NODE, max(st_.now_ms, self.now))
            set_status(ctx, ex, S.CANCELLING, "victim")
            cancel.cancel_subtree(ctx, ex, "deadlock victim", "recovery")
            end_attempt(ctx, ex, "rolled_back")
            st_.now_ms = ctx.now
        self.victim_scopes += 1

    @rule()
    def restore_a_replica(self) -> None:
        self.shadow = StateMachine(State.restore(self.m.snapshot()))

    @rule(
        i=EXISTING,
        outcome=hs.sampled_from(OUTCOMES),
        by_operator=hs.booleans(),
        older=hs.booleans(),
    )
    def ack(self, i: int, outcome: EffectOutcome, by_operator: bool, older: bool) -> None:
        eid = self.pick(i, lambda e: e in self.st.cancel.requests)
        req = self.st.cancel.requests.get(eid)
        cgen = req.cancel_generation if req is not None else 0
        cmd = AckCancel(
            execution_id=eid,
            generation=self.gen(eid),
            cancel_generation=max(0, cgen - int(older)),
            side_effects=outcome,
        )
        self.apply(OP if by_operator else self.owner(eid), cmd)

    @rule(max_emissions=hs.sampled_from((1, 3, 100)))
    def reemit(self, max_emissions: int) -> None:
        self.apply("node:n1", ReemitCancels(max_emissions=max_emissions))

    @rule(i=EXISTING, outcome=hs.sampled_from(OUTCOMES))
    def release_quarantine(self, i: int, outcome: EffectOutcome) -> None:
        eid = self.pick(i, lambda e: self.st.executions[e].status is S.QUARANTINED)
        cmd = ReleaseQuarantine(execution_id=eid, generation=self.gen(eid), side_effects=outcome, reason="isolated")
        self.apply(OP, cmd)

    @rule(dt=hs.sampled_from((1, 100, 600, 2_500, 5_000)), tick=hs.booleans())
    def advance(self, dt: int, tick: bool) -> None:
        self.now += dt
        if tick:
            self.apply(OP, Tick())

    @rule(agent=hs.sampled_from(AGENTS))
    def rejoin(self, agent: str) -> None:
        self.apply(f"agent:{agent}", JoinSession(agent_id=agent, lease_ms=3_000))

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def cancel_generations_never_decrease(self) -> None:
        for run_id, run in self.st.runs.items():
            assert run.cancel_generation >= self.seen_generations.get(run_id, 0)
            self.seen_generations[run_id] = run.cancel_generation

    @invariant()
    def requests_name_the_current_generations(self) -> None:
        st_ = self.st
        for eid, req in st_.cancel.requests.items():
            ex = st_.executions[eid]
            assert req.cancel_generation == st_.runs[ex.run_id].cancel_generation, (eid, req)
            assert req.generation == ex.generation
            assert ex.status in ASKED, (eid, ex.status)
        for eid, ex in st_.executions.items():
            if ex.status in ASKED:
                assert eid in st_.cancel.requests, eid

    @invariant()
    def stable_scopes_hold_nothing(self) -> None:
        st_ = self.st
        for scope in st_.cancel.scopes.values():
            if scope.stable_at_ms is None:
                assert scope.pending
                continue
            assert not scope.pending
            members = cancel._subtree(st_, scope.root_id)
            for eid in members:
                ex = st_.executions[eid]
                if scope.scope_id.startswith("run:"):
                    assert ex.status in SETTLED, (scope.scope_id, eid, ex.status)
                if ex.status in SETTLED:
                    assert eid not in st_.satisfies or not any(
                        eid in st_.targets[t].holders for t in st_.satisfies[eid]
                    )
                    assert eid not in st_.cancel.claims
        for run_id in st_.runs:
            if cancel.cancel_state(st_, run_id) is CancelState.CANCELLED_STABLE:
                held = [h for t in st_.targets.values() for h in t.holders if st_.executions[h].run_id == run_id]
                claimed = [e for e in st_.cancel.claims if st_.executions[e].run_id == run_id]
                assert held == [] and claimed == [], (run_id, held, claimed)

    @invariant()
    def settled_executions_hold_nothing(self) -> None:
        st_ = self.st
        for t in st_.targets.values():
            for holder in t.holders:
                assert st_.executions[holder].status not in SETTLED, (t.target_id, holder)
        for eid, claim in st_.cancel.claims.items():
            ex = st_.executions[eid]
            assert ex.status not in SETTLED and claim.generation == ex.generation, (eid, ex.status, claim)
        assert st_.counters.get("cancel.leaked_permits", 0) == 0

    @invariant()
    def snapshot_restores_the_cancellation_records(self) -> None:
        if self.now % 7:  # every few steps is enough, and keeps the test fast
            return
        data = self.st.snapshot()
        restored = State.restore(data)
        assert restored.snapshot() == data
        for sid, scope in self.st.cancel.scopes.items():
            assert restored.cancel.scopes[sid].pending == scope.pending
        live = self.st.cancel

        def valid_timers(book: CancelBook) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
            reemit = sorted(
                (t, e)
                for t, ids in book.reemit_due.buckets.items()
                for e in ids
                if e in book.requests and book.requests[e].emitted_at_ms == t
            )
            slo = sorted(
                (t, e)
                for t, ids in book.slo_due.buckets.items()
                for e in ids
                if e in book.requests
                and book.requests[e].requested_at_ms == t
                and book.requests[e].quarantined_at_ms is None
            )
            return sorted(set(reemit)), sorted(set(slo))

        assert valid_timers(restored.cancel) == valid_timers(live)
        # Every open request is due somewhere: none is forgotten by the convergence pass.
        assert sorted(e for _, e in valid_timers(live)[0]) == sorted(live.requests)


TestCancellationStateful = CancellationMachine.TestCase
TestCancellationStateful.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
