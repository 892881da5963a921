"""Deadlock detection on states built through real commands (docs/design.md §3, seed 000 "Negative
tests"): the cycles the seed names are candidates; pools with a free slot, external approvers,
running members and chains into a cycle are not (or not wholly)."""

from __future__ import annotations

import hashlib
from dataclasses import fields
from typing import Any, TypeVar

from waitgraph.statemachine.commands import (
    Acquire,
    CloseWait,
    Command,
    CompleteExecution,
    CreateExecution,
    CreateTarget,
    DeclareSatisfier,
    Envelope,
    JoinSession,
    RegisterWait,
    Release,
    ResumeExecution,
    RetryExecution,
    StartExecution,
    Tick,
)
from waitgraph.statemachine.detect import (
    DIGEST_VERSION,
    Candidate,
    IncrementalDetector,
    compute_digest,
    full_pass,
    hard_waits,
    still_deadlocked,
    wait_satisfiers,
)
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.state import State

C = TypeVar("C", bound=Command)


def fenced(state: State, cls: type[C], **kw: Any) -> C:
    """A command, with ``observed_cancel_generation`` filled in from the state when the command
    carries one (the cancellation fence is not what these tests are about)."""
    if "observed_cancel_generation" in {f.name for f in fields(cls)} and "observed_cancel_generation" not in kw:
        run_id = kw.get("run_id") or state.executions[kw["execution_id"]].run_id
        run = state.runs.get(run_id)
        kw["observed_cancel_generation"] = run.cancel_generation if run is not None else 0
    return cls(**kw)


class World:
    """A state machine driven by an operator, with one agent owning every execution."""

    def __init__(self) -> None:
        self.m = StateMachine()
        self.t = 0
        self.ok(JoinSession(agent_id="a", lease_ms=86_400_000))

    @property
    def state(self) -> State:
        return self.m.state

    def do(self, cmd: Command) -> Outcome:
        self.t += 1
        return self.m.apply(Envelope(actor="operator:op", at_ms=self.t, request_id=None, command=cmd))

    def ok(self, cmd: Command) -> Outcome:
        out = self.do(cmd)
        assert out.result is Result.APPLIED, (cmd, out)
        return out

    def execs(self, *names: str) -> None:
        for n in names:
            self.ok(fenced(self.state, CreateExecution, execution_id=f"exec:{n}", run_id=n, agent_id="a"))
            self.ok(fenced(self.state, StartExecution, execution_id=f"exec:{n}", generation=1))

    def target(self, target_id: str, slots: int = 1) -> None:
        self.ok(CreateTarget(target_id=target_id, slots=slots))

    def gen(self, name: str) -> int:
        return self.state.executions[f"exec:{name}"].generation

    def wait(self, waiter: str, target: str, tg: int | None = None, **kw: object) -> None:
        if tg is None:
            if target.startswith("exec:"):
                tg = self.state.executions[target].generation
            elif target.startswith("pool:"):
                tg = 0
            else:
                t = self.state.targets[target]
                tg = t.version if t.kind.value in ("resource", "reservation") else t.version + 1
        self.ok(
            RegisterWait(
                waiter_id=f"exec:{waiter}",
                waiter_generation=self.gen(waiter),
                target_id=target,
                target_generation=tg,
                reason="test",
                **kw,  # type: ignore[arg-type]
            )
        )

    def hold(self, holder: str, target: str) -> None:
        self.ok(Acquire(target_id=target, execution_id=f"exec:{holder}", generation=self.gen(holder)))

    def produces(self, target: str, satisfier: str, version: int = 1) -> None:
        sgen = self.gen(satisfier[5:]) if satisfier.startswith("exec:") else 0
        self.ok(
            DeclareSatisfier(
                target_id=target, target_generation=version, satisfier_id=satisfier, satisfier_generation=sgen
            )
        )


def members(cands: list[Candidate]) -> list[list[str]]:
    return [list(c.member_ids) for c in cands]


def check(w: World) -> list[Candidate]:
    """full pass == an incremental detector's open set == a fresh incremental detector, and every
    candidate passes its own second read."""
    found = full_pass(w.state)
    det = IncrementalDetector()
    assert det.pass_(w.state) == found
    assert det.open_candidates() == found
    for c in found:
        assert still_deadlocked(w.state, c)
        assert Candidate.build(c.members, c.edges) == c
    return found


# -- the cycles the seed names ------------------------------------------------------------------


def test_two_node_cycle() -> None:
    w = World()
    w.execs("a", "b")
    w.wait("a", "exec:b")
    w.wait("b", "exec:a")
    [c] = check(w)
    assert c.members == (("exec:a", 1), ("exec:b", 1))
    assert c.edges == (("exec:a>exec:b", 1), ("exec:b>exec:a", 1))


def test_three_node_cycle() -> None:
    w = World()
    w.execs("a", "b", "c", "d")
    w.wait("a", "exec:b")
    w.wait("b", "exec:c")
    w.wait("c", "exec:a")
    w.wait("d", "exec:a")  # waits on the cycle; not part of it
    assert members(check(w)) == [["exec:a", "exec:b", "exec:c"]]


def test_seed_artifact_producer_cycle() -> None:
    """WAIT(A -> artifact:review-42), PRODUCED_BY(review-42 -> B), WAIT(B -> browser), HELD_BY(browser -> A)."""
    w = World()
    w.execs("A", "B")
    w.target("artifact:review-42")
    w.target("resource:browser-9")
    w.produces("artifact:review-42", "exec:B")
    w.hold("A", "resource:browser-9")
    w.wait("A", "artifact:review-42")
    w.wait("B", "resource:browser-9")
    [c] = check(w)
    assert c.member_ids == ("exec:A", "exec:B")
    assert c.edges == (("exec:A>artifact:review-42", 1), ("exec:B>resource:browser-9", 1))


def test_approval_provider_cycle() -> None:
    w = World()
    w.execs("sup", "sub")
    w.target("approval:confirm")
    w.produces("approval:confirm", "exec:sup")
    w.wait("sup", "exec:sub")
    w.wait("sub", "approval:confirm")
    assert members(check(w)) == [["exec:sub", "exec:sup"]]


def test_waiting_for_a_pool_it_holds_is_a_cycle_of_one() -> None:
    w = World()
    w.execs("a")
    w.target("pool:gpu", slots=1)
    w.hold("a", "pool:gpu")
    w.wait("a", "pool:gpu")
    [c] = check(w)
    assert c.members == (("exec:a", 1),)
    assert c.edges == (("exec:a>pool:gpu", 1),)


def test_waiting_for_a_resource_it_holds_is_a_cycle_of_one() -> None:
    w = World()
    w.execs("a")
    w.target("resource:lock")
    w.hold("a", "resource:lock")
    w.wait("a", "resource:lock")
    assert members(check(w)) == [["exec:a"]]


def test_full_pool_every_holder_in_the_set() -> None:
    w = World()
    w.execs("a", "b", "c")
    w.target("pool:p", slots=2)
    w.hold("a", "pool:p")
    w.hold("b", "pool:p")
    w.wait("a", "pool:p")
    w.wait("b", "pool:p")
    w.wait("c", "pool:p")  # waits on the full pool but holds nothing anyone needs
    assert members(check(w)) == [["exec:a", "exec:b"]]


def test_pool_wait_needs_every_holder_in_the_set() -> None:
    w = World()
    w.execs("a", "b", "h")
    w.target("pool:p", slots=2)
    w.hold("b", "pool:p")
    w.hold("h", "pool:p")  # h keeps running: it will release its permit
    w.wait("a", "pool:p")
    w.wait("b", "exec:a")
    assert check(w) == []
    # Once h waits on a too, the pool wait has all its holders inside {a, b, h}.
    w.wait("h", "exec:a")
    assert members(check(w)) == [["exec:a", "exec:b", "exec:h"]]


# -- what is not a deadlock ------------------------------------------------------------------------


def test_pool_with_a_free_slot_is_never_a_deadlock() -> None:
    w = World()
    w.execs("a", "b")
    w.target("pool:p", slots=2)
    w.hold("a", "pool:p")
    w.hold("b", "pool:p")
    w.wait("a", "pool:p")
    w.wait("b", "pool:p")
    assert members(check(w)) == [["exec:a", "exec:b"]]
    # One permit released: the waits on the pool are woken (closed), and a new wait on a pool
    # with a free slot is refused, so a free slot never enters the graph.
    w.ok(Release(target_id="pool:p", execution_id="exec:b", generation=1))
    assert check(w) == []
    assert w.do(RegisterWait(
        waiter_id="exec:a", waiter_generation=1, target_id="pool:p", target_generation=0, reason="x", edge_version=9
    )).code == "already_satisfied"  # fmt: skip


def test_pool_not_full_projects_no_edge() -> None:
    w = World()
    w.execs("a", "b")
    w.target("pool:p", slots=1)
    w.hold("a", "pool:p")
    w.wait("b", "pool:p")
    w.wait("a", "exec:b")
    assert members(check(w)) == [["exec:a", "exec:b"]]
    # Widen the pool behind the machine's back: with a free slot the wait is not hard.
    w.state.targets["pool:p"].slots = 2
    assert hard_waits(w.state, "exec:b") == []
    assert check(w) == []


def test_human_approver_is_never_a_deadlock() -> None:
    w = World()
    w.execs("a", "b")
    w.target("approval:ship")
    w.produces("approval:ship", "human:alice")
    w.wait("a", "approval:ship")
    w.wait("b", "exec:a")
    w.wait("a", "exec:b")  # a also waits on b: still a real cycle through exec edges
    assert members(check(w)) == [["exec:a", "exec:b"]]
    assert [h.target_id for h in hard_waits(w.state, "exec:a")] == ["exec:b"]


def test_external_satisfier_makes_the_wait_external() -> None:
    w = World()
    w.execs("a", "b")
    w.target("artifact:scan")
    w.produces("artifact:scan", "exec:b")
    w.wait("a", "artifact:scan")
    w.wait("b", "exec:a")
    assert members(check(w)) == [["exec:a", "exec:b"]]
    w.produces("artifact:scan", "external:ci-api")  # replaces the producer: now an outside API
    assert check(w) == []
    assert hard_waits(w.state, "exec:a") == []


def test_unknown_producer_is_not_hard() -> None:
    w = World()
    w.execs("a", "b")
    w.target("artifact:x")
    w.wait("a", "artifact:x")
    w.wait("b", "exec:a")
    assert check(w) == []


def test_producer_declared_for_an_older_version_is_not_hard() -> None:
    w = World()
    w.execs("a", "b")
    w.target("artifact:x")
    w.produces("artifact:x", "exec:b", version=1)
    w.wait("a", "artifact:x", tg=2)  # b promises v1; a needs v2
    w.wait("b", "exec:a")
    assert check(w) == []
    w.produces("artifact:x", "exec:b", version=2)
    assert members(check(w)) == [["exec:a", "exec:b"]]


def test_running_member_is_contention_not_deadlock() -> None:
    w = World()
    w.execs("a", "b")
    w.wait("a", "exec:b")
    w.wait("b", "exec:a")
    assert len(check(w)) == 1
    w.ok(ResumeExecution(execution_id="exec:b", generation=1))  # b runs again, its wait kept
    assert w.state.executions["exec:b"].status.value == "RUNNING"
    assert [h.edge_id for h in hard_waits(w.state, "exec:b")] == ["exec:b>exec:a"]
    assert check(w) == []


def test_chain_into_a_cycle_leaves_the_chain_out() -> None:
    w = World()
    w.execs("a", "b", "x", "y", "z")
    w.wait("a", "exec:b")
    w.wait("b", "exec:a")
    w.wait("x", "exec:y")
    w.wait("y", "exec:z")
    w.wait("z", "exec:a")
    [c] = check(w)
    assert c.member_ids == ("exec:a", "exec:b")


def test_member_with_an_extra_wait_outside_the_set() -> None:
    """AND-waits: one never-satisfiable wait is enough; a wait leaving the set is not an edge of
    the candidate and does not change its digest."""
    w = World()
    w.execs("a", "b", "r")
    w.wait("a", "exec:b")
    w.wait("b", "exec:a")
    before = check(w)
    w.wait("a", "exec:r")  # r is RUNNING
    after = check(w)
    assert after == before


def test_deadline_does_not_make_a_wait_resolvable() -> None:
    w = World()
    w.execs("a", "b")
    w.wait("a", "exec:b", deadline_ms=10_000)
    w.wait("b", "exec:a")
    assert members(check(w)) == [["exec:a", "exec:b"]]
    # When the deadline passes the edge closes (a failure), and only then does the cycle go.
    w.t = 20_000
    w.ok(Tick())
    assert check(w) == []


def test_generation_change_breaks_the_cycle() -> None:
    w = World()
    w.execs("a", "b")
    w.wait("a", "exec:b")
    w.wait("b", "exec:a")
    [c] = check(w)
    w.ok(RetryExecution(execution_id="exec:b", generation=1))
    assert check(w) == []
    assert not still_deadlocked(w.state, c)


def test_two_disjoint_cycles_sorted() -> None:
    w = World()
    w.execs("p", "q", "c", "d")
    w.wait("p", "exec:q")
    w.wait("q", "exec:p")
    w.wait("c", "exec:d")
    w.wait("d", "exec:c")
    assert members(check(w)) == [["exec:c", "exec:d"], ["exec:p", "exec:q"]]


def test_pruning_reaches_a_fixpoint() -> None:
    """{a, b, c} is one SCC, but c's only wait is on a pool also held by RUNNING h: c is pruned,
    and what is left ({a, b}) must be re-split into its own SCCs."""
    w = World()
    w.execs("a", "b", "c", "h")
    w.target("pool:p", slots=2)
    w.hold("b", "pool:p")
    w.hold("h", "pool:p")
    w.wait("a", "exec:b")
    w.wait("b", "exec:a")
    w.wait("c", "pool:p")  # c -> b (and h, not WAITING)
    w.wait("a", "exec:c")  # a -> c: {a, b, c} strongly connected
    assert members(check(w)) == [["exec:a", "exec:b"]]


def test_pruned_member_can_split_the_rest() -> None:
    """a <-> m <-> b: m only waits on a pool held by a and RUNNING h. After m is pruned, a and b
    are no longer connected; each is checked alone."""
    w = World()
    w.execs("a", "b", "m", "h")
    w.target("pool:p", slots=2)
    w.hold("a", "pool:p")
    w.hold("h", "pool:p")
    w.target("pool:q", slots=2)
    w.hold("b", "pool:q")
    w.hold("h", "pool:q")
    w.wait("m", "pool:p")
    w.wait("m", "pool:q")
    w.wait("a", "exec:m")
    w.wait("b", "exec:m")
    assert check(w) == []


# -- digest, signature, second read ------------------------------------------------------------


def test_digest_and_signature_are_canonical() -> None:
    w = World()
    w.execs("a", "b")
    w.wait("a", "exec:b")
    w.wait("b", "exec:a", edge_version=3)
    [c] = check(w)
    text = f"{DIGEST_VERSION}\nexec:a 1 exec:a>exec:b 1\nexec:b 1 exec:b>exec:a 3\n"
    assert c.digest == hashlib.sha256(text.encode()).hexdigest()
    assert c.signature == hashlib.sha256(b"exec:a|exec:b").hexdigest()[:16]
    assert compute_digest(reversed(c.members), reversed(c.edges)) == c.digest


def test_signature_survives_a_new_generation_digest_does_not() -> None:
    w = World()
    w.execs("a", "b")
    w.wait("a", "exec:b")
    w.wait("b", "exec:a")
    [first] = check(w)
    w.ok(RetryExecution(execution_id="exec:a", generation=1))
    w.ok(fenced(w.state, StartExecution, execution_id="exec:a", generation=2))
    w.wait("a", "exec:b")
    w.wait("b", "exec:a", edge_version=2)
    [again] = check(w)
    assert again.signature == first.signature
    assert again.digest != first.digest
    assert again.members == (("exec:a", 2), ("exec:b", 1))


def test_still_deadlocked_second_read() -> None:
    w = World()
    w.execs("a", "b", "c")
    w.target("resource:r")
    w.hold("b", "resource:r")
    w.wait("a", "resource:r")
    w.wait("b", "exec:a")
    [c] = check(w)
    # An unrelated change, and a new wait of a member: still the same deadlock.
    w.wait("c", "exec:a")
    w.wait("a", "exec:c")
    assert still_deadlocked(w.state, c)
    # An edge updated to a new version: the candidate as proposed is gone.
    w.wait("b", "exec:a", edge_version=2)
    assert not still_deadlocked(w.state, c)
    [c2] = check(w)
    # The member finishing is the completion racing the detector.
    w.ok(fenced(w.state, CompleteExecution, execution_id="exec:b", generation=1))
    assert not still_deadlocked(w.state, c2)
    assert members(check(w)) == [["exec:a", "exec:c"]]


def test_still_deadlocked_rejects_forged_candidates() -> None:
    w = World()
    w.execs("a", "b", "c")
    w.wait("a", "exec:b")
    w.wait("b", "exec:a")
    w.wait("c", "exec:a")
    [c] = check(w)
    assert not still_deadlocked(w.state, Candidate.build([], []))
    # c's wait goes out of the set; c itself cannot be in it.
    forged = Candidate.build([*c.members, ("exec:c", 1)], [*c.edges, ("exec:c>exec:a", 1)])
    assert not still_deadlocked(w.state, forged)
    # Missing an edge: b is no longer shown to be stuck.
    assert not still_deadlocked(w.state, Candidate.build(c.members, c.edges[:1]))
    # Wrong generation.
    assert not still_deadlocked(w.state, Candidate.build([("exec:a", 2), ("exec:b", 1)], c.edges))


def test_still_deadlocked_needs_strong_connection() -> None:
    """Two self-cycles listed as one candidate: each member is stuck, but the set is not one
    component."""
    w = World()
    w.execs("a", "b")
    w.target("pool:p", slots=1)
    w.target("pool:q", slots=1)
    w.hold("a", "pool:p")
    w.hold("b", "pool:q")
    w.wait("a", "pool:p")
    w.wait("b", "pool:q")
    found = check(w)
    assert members(found) == [["exec:a"], ["exec:b"]]
    both = Candidate.build([m for c in found for m in c.members], [e for c in found for e in c.edges])
    assert not still_deadlocked(w.state, both)


def test_wait_satisfiers_matches_hard_waits() -> None:
    w = World()
    w.execs("a", "b")
    w.target("pool:p", slots=2)
    w.hold("a", "pool:p")
    w.hold("b", "pool:p")
    w.wait("a", "pool:p")
    [h] = hard_waits(w.state, "exec:a")
    assert h.satisfiers == ("exec:a", "exec:b")
    assert wait_satisfiers(w.state, w.state.waits_of("exec:a")[0]) == ("exec:a", "exec:b")


# -- incremental --------------------------------------------------------------------------------


def test_incremental_follows_changes() -> None:
    w = World()
    det = IncrementalDetector()
    w.execs("a", "b", "c", "x")
    assert det.pass_(w.state) == []
    w.wait("a", "exec:b")
    assert det.pass_(w.state) == []
    w.wait("b", "exec:c")
    w.wait("x", "exec:a")
    assert det.pass_(w.state) == []
    w.wait("c", "exec:a")
    found = det.pass_(w.state)
    assert members(found) == [["exec:a", "exec:b", "exec:c"]]
    assert det.open_candidates() == full_pass(w.state) == found
    assert det.pass_(w.state) == []  # nothing changed
    assert det.open_candidates() == found
    # x joins the cycle: the candidate grows and replaces the old one.
    w.wait("a", "exec:x")
    assert members(det.pass_(w.state)) == [["exec:a", "exec:b", "exec:c", "exec:x"]]
    assert det.open_candidates() == full_pass(w.state)
    # c leaves: what remains, {a, x}, was valid all along but only now is maximal; neither a
    # nor x was touched, the pass finds it from the members of the candidate c was in.
    w.ok(CloseWait(waiter_id="exec:c", waiter_generation=1, target_id="exec:a", edge_version=1, reason="done"))
    assert members(det.pass_(w.state)) == [["exec:a", "exec:x"]]
    assert det.open_candidates() == full_pass(w.state)
    w.ok(CloseWait(waiter_id="exec:x", waiter_generation=1, target_id="exec:a", edge_version=1, reason="done"))
    assert det.pass_(w.state) == []
    assert det.open_candidates() == full_pass(w.state) == []


def test_incremental_sees_a_pool_becoming_full() -> None:
    """The waiters of a pool are touched when it fills: their pool wait just became hard."""
    w = World()
    det = IncrementalDetector()
    w.execs("a", "b")
    w.target("pool:p", slots=2)
    w.hold("a", "pool:p")
    w.hold("b", "pool:p")
    w.wait("a", "pool:p")
    w.ok(Release(target_id="pool:p", execution_id="exec:b", generation=1))  # wakes a
    w.wait("b", "exec:a")
    w.wait("a", "exec:b")
    det.pass_(w.state)
    w.wait("b", "exec:a", edge_version=2)
    assert members(det.pass_(w.state)) == [["exec:a", "exec:b"]]


def test_incremental_restart_after_restore() -> None:
    w = World()
    w.execs("a", "b")
    w.wait("a", "exec:b")
    w.wait("b", "exec:a")
    det = IncrementalDetector()
    found = det.pass_(w.state)
    w.m.restore(w.m.snapshot())
    assert det.pass_(w.state) == found  # a different state object: a full pass again
    assert det.pass_(w.state) == []
    assert det.open_candidates() == found


def test_incremental_falls_back_to_a_full_pass_on_a_long_chain() -> None:
    """A change at the head of a long chain reaches the whole chain: the detector does a full
    pass instead, returns every candidate, and stays equal to the full pass. No recursion limit
    is near: the chain is far longer than Python's default stack."""
    from waitgraph.statemachine.enums import CancelMode, ExecStatus
    from waitgraph.statemachine.state import Execution, WaitEdge

    st = State()
    n = 5000
    ids = [f"exec:c{i:05d}" for i in range(n)]
    for e in ids:
        st.executions[e] = Execution(e, e[5:], None, "a", 1, ExecStatus.WAITING, 0, False, False, 0, 0, 0)
    for i in range(n - 1):
        st.add_wait(WaitEdge(ids[i], 1, ids[i + 1], 1, "r", None, CancelMode.COOPERATIVE, 1, 0))
    st.add_wait(WaitEdge(ids[-1], 1, ids[-3], 1, "r", None, CancelMode.COOPERATIVE, 1, 0))
    det = IncrementalDetector()
    [c] = det.pass_(st)
    assert c.member_ids == tuple(ids[-3:])
    st.touch(ids[0])
    assert det.pass_(st) == [c]
    assert det.explored == n  # the full pass looked at every waiter
    st.touch(ids[-2])
    assert det.pass_(st) == [c]
    assert det.explored == 3
    # close the chain into one cycle of n
    st.add_wait(WaitEdge(ids[-1], 1, ids[0], 1, "r", None, CancelMode.COOPERATIVE, 1, 0))
    st.touch(ids[-1])
    [big] = det.pass_(st)
    assert big.member_ids == tuple(ids)
    assert det.open_candidates() == full_pass(st) == [big]
    assert still_deadlocked(st, big)
