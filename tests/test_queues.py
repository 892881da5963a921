"""Fair grant queues with hand-off (statemachine/queues.py, lifecycle.hand_off; docs/queues.md).

Scenario checks of the order (FIFO, priority, the pass-over bound), of the hand-off effects, of
every way a waiter leaves a queue, of the snapshot (v6 and the rebuild of older ones), and a
property test of fairness: under a random contended workload no waiter is passed by more grants
of its queue than it had waiters ahead of it when it queued plus ``Limits.queue_pass_limit``.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.world import World
from waitgraph.statemachine import invariants
from waitgraph.statemachine.codec import pack
from waitgraph.statemachine.commands import (
    AckCancel,
    Acquire,
    CancelRun,
    CloseWait,
    CompleteExecution,
    RegisterWait,
    Release,
    RetryExecution,
    StartExecution,
    Tick,
)
from waitgraph.statemachine.effects import Acquired, WaitClosed
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.queues import GRANTED, order
from waitgraph.statemachine.recovery_state import DecisionKind, RolloutMode
from waitgraph.statemachine.state import State

RES, POOL = "resource:db", "pool:gpu"


def queued(w: World, eid: str, tid: str, priority: int = 0, deadline_ms: int | None = None) -> Outcome:
    return w.wait(eid, tid, "queued", priority=priority, deadline_ms=deadline_ms)


def release(w: World, eid: str, tid: str) -> Outcome:
    return w.ok(w.owner(eid), Release(target_id=tid, execution_id=eid, generation=w.gen(eid)))


def granted(out: Outcome) -> list[tuple[str, int]]:
    """(waiter, lease) of each hand-off in an outcome, checking each Acquired has its WaitClosed."""
    acquired = [(fx.execution_id, fx.lease) for fx in out.effects if isinstance(fx, Acquired)]
    closed = [(fx.edge_id.partition(">")[0], fx.lease) for fx in out.effects if isinstance(fx, WaitClosed)]
    assert [c for c in closed if c[1] is not None] == acquired
    assert all(fx.reason == GRANTED for fx in out.effects if isinstance(fx, WaitClosed) and fx.lease is not None)
    return acquired


def world(*names: str, slots: int = 1, tid: str = RES) -> World:
    w = World()
    w.target(tid, slots=slots)
    for n in names:
        w.execution(n)
    return w


def sound(w: World) -> None:
    assert invariants.check(w.st) == []
    snap = w.st.snapshot()
    assert State.restore(snap).snapshot() == snap


def test_fifo_hand_off_in_the_release_itself() -> None:
    w = world("h", "a", "b", "c")
    w.hold("exec:h", RES)
    for n in "abc":
        queued(w, f"exec:{n}", RES)
    assert order(w.st.queues, RES) == ["exec:a", "exec:b", "exec:c"]
    out = release(w, "exec:h", RES)
    assert granted(out) == [("exec:a", 2)]
    assert w.st.targets[RES].holders == {"exec:a": 1}
    assert w.st.executions["exec:a"].status.value == "RUNNING"
    # the waits left behind follow the new lease, so they are hard edges to the new holder
    assert [e.target_generation for e in w.st.waits_on(RES)] == [2, 2]
    assert order(w.st.queues, RES) == ["exec:b", "exec:c"]
    sound(w)
    # acquiring does not jump the queue: the resource is held
    out = w.do(w.owner("exec:c"), Acquire(target_id=RES, execution_id="exec:c", generation=1))
    assert out.result is Result.REJECTED and out.code == "target_held"
    assert granted(release(w, "exec:a", RES)) == [("exec:b", 3)]
    assert granted(release(w, "exec:b", RES)) == [("exec:c", 4)]
    out = release(w, "exec:c", RES)
    assert granted(out) == [] and w.st.targets[RES].holders == {} and RES not in w.st.queues
    sound(w)


def test_a_queued_wait_re_registers_at_the_lease_it_first_named_and_keeps_its_place() -> None:
    w = world("h", "a", "b")
    w.hold("exec:h", RES)
    queued(w, "exec:a", RES)
    queued(w, "exec:b", RES)
    assert granted(release(w, "exec:h", RES)) == [("exec:a", 2)]
    # b's SDK refreshes its wait with the lease it registered at (1); it is still queued, first
    out = w.ok(
        w.owner("exec:b"),
        RegisterWait(
            waiter_id="exec:b", waiter_generation=1, target_id=RES, target_generation=1, reason="q", edge_version=2
        ),
    )
    assert out.result is Result.APPLIED and w.st.wait("exec:b", RES).target_generation == 2  # type: ignore[union-attr]
    assert order(w.st.queues, RES) == ["exec:b"]
    sound(w)


def test_priority_goes_first_but_passes_a_waiter_at_most_the_limit() -> None:
    w = world("h", "low", "p1", "p2", "p3", "p4", "p5")
    assert w.st.limits.queue_pass_limit == 3
    w.hold("exec:h", RES)
    queued(w, "exec:low", RES)
    for n in ("p1", "p2", "p3", "p4"):
        queued(w, f"exec:{n}", RES, priority=5)
    # three newcomers went ahead of low; the fourth may not: low's place is fixed
    assert order(w.st.queues, RES) == ["exec:p1", "exec:p2", "exec:p3", "exec:low", "exec:p4"]
    assert [e.passed for e in w.st.queues[RES]] == [0, 0, 0, 3, 0]
    queued(w, "exec:p5", RES, priority=9)  # goes ahead of p4 only (low is a barrier)
    assert order(w.st.queues, RES)[3:] == ["exec:low", "exec:p5", "exec:p4"]
    sound(w)
    holder = "exec:h"
    for expected in ("exec:p1", "exec:p2", "exec:p3", "exec:low", "exec:p5", "exec:p4"):
        assert [g for g, _ in granted(release(w, holder, RES))] == [expected]
        holder = expected
    sound(w)


def test_a_pool_hands_each_free_slot_to_the_head_and_skips_its_own_holders() -> None:
    w = world("h1", "h2", "a", "b", slots=2, tid=POOL)
    w.hold("exec:h1", POOL)
    w.hold("exec:h2", POOL)
    queued(w, "exec:h2", POOL)  # a holder waiting for a second permit: can never be handed one
    queued(w, "exec:a", POOL)
    queued(w, "exec:b", POOL)
    assert order(w.st.queues, POOL) == ["exec:h2", "exec:a", "exec:b"]
    out = release(w, "exec:h1", POOL)
    assert granted(out) == [("exec:a", 3)]  # h2 kept its place and was passed by
    assert order(w.st.queues, POOL) == ["exec:h2", "exec:b"]
    assert [e.target_generation for e in w.st.waits_on(POOL)] == [0, 0]
    sound(w)
    out = release(w, "exec:h2", POOL)  # the releaser is not handed back what it let go
    assert granted(out) == [("exec:b", 4)]
    assert order(w.st.queues, POOL) == ["exec:h2"]
    sound(w)


def test_nobody_can_take_it_then_the_waiters_wake_as_before() -> None:
    w = world("h", "a", slots=2, tid=POOL)
    w.hold("exec:h", POOL)
    w.hold("exec:a", POOL)
    queued(w, "exec:a", POOL)  # the only waiter already holds a permit
    out = release(w, "exec:h", POOL)
    assert granted(out) == []
    assert [fx.reason for fx in out.effects if isinstance(fx, WaitClosed)] == ["target_released"]
    assert POOL not in w.st.queues
    sound(w)


def test_a_waiter_asked_to_stop_is_passed_by_and_leaves_when_it_settles() -> None:
    w = world("h", "a", "b")
    w.hold("exec:h", RES)
    queued(w, "exec:a", RES)
    queued(w, "exec:b", RES)
    w.ok(w.owner("exec:a"), CancelRun(run_id="run-a", observed_cancel_generation=0, reason="stop"))
    assert w.st.executions["exec:a"].status.value == "CANCEL_REQUESTED"
    assert order(w.st.queues, RES) == ["exec:a", "exec:b"]  # it keeps what it waits for until it settles
    assert granted(release(w, "exec:h", RES)) == [("exec:b", 2)]
    w.ok(
        w.owner("exec:a"),
        AckCancel(execution_id="exec:a", generation=1, cancel_generation=1, side_effects=EffectOutcome.NONE),
    )
    assert order(w.st.queues, RES) == []
    sound(w)


def test_every_way_a_wait_closes_takes_the_waiter_out_of_the_queue() -> None:
    w = world("h", "close", "retry", "done", "late", "stay")
    w.hold("exec:h", RES)
    for n in ("close", "retry", "done", "late", "stay"):
        queued(w, f"exec:{n}", RES, deadline_ms=w.t + 50 if n == "late" else None)
    w.ok(
        w.owner("exec:close"),
        CloseWait(waiter_id="exec:close", waiter_generation=1, target_id=RES, edge_version=1, reason="gave up"),
    )
    w.ok(w.owner("exec:retry"), RetryExecution(execution_id="exec:retry", generation=1))
    w.ok(w.owner("exec:done"), CompleteExecution(execution_id="exec:done", generation=1, observed_cancel_generation=0))
    w.ok("operator:op", Tick(), dt=100)
    assert order(w.st.queues, RES) == ["exec:stay"]
    sound(w)
    # the holder ending its attempt hands over too
    w.ok(w.owner("exec:h"), CompleteExecution(execution_id="exec:h", generation=1, observed_cancel_generation=0))
    assert w.st.targets[RES].holders == {"exec:stay": 1} and RES not in w.st.queues
    sound(w)


@pytest.mark.parametrize("version", [4, 5])
def test_a_snapshot_before_v6_rebuilds_the_queues_by_registration_time_then_id(version: int) -> None:
    w = world("h", "b", "a", "c")
    w.hold("exec:h", RES)
    queued(w, "exec:b", RES, priority=1)
    queued(w, "exec:c", RES, priority=7)  # ahead of b in the v6 queue
    queued(w, "exec:a", RES)
    w.st.waits_by_waiter["exec:a"][RES].registered_at_ms = w.st.waits_by_waiter["exec:b"][RES].registered_at_ms
    plain = msgspec.msgpack.decode(w.st.snapshot())
    assert plain["queues"] == [[RES, [["exec:c", 7, 0], ["exec:b", 1, 1], ["exec:a", 0, 0]]]]
    plain.pop("queues")
    plain["v"] = version
    restored = State.restore(pack(plain))
    # a and b registered at the same ms: id order; c later; priorities are not in a v4/v5 snapshot
    assert order(restored.queues, RES) == ["exec:a", "exec:b", "exec:c"]
    assert invariants.check(restored) == []
    assert msgspec.msgpack.decode(restored.snapshot())["v"] == 6


# -- fairness under a random workload ------------------------------------------------------------

AGENTS = 6


@settings(deadline=None)
@given(
    ops=st.lists(st.tuples(st.integers(0, 7), st.integers(0, AGENTS - 1), st.integers(-1, 2)), max_size=120),
    slots=st.integers(1, 3),
)
def test_no_waiter_is_passed_by_more_grants_than_were_ahead_plus_the_limit(
    ops: list[tuple[int, int, int]], slots: int
) -> None:
    """Random acquire / wait (with priorities) / release / cancel on one resource and one pool,
    the livelock guard configured as in production. For each wait: the grants of its queue that
    went to others while it waited never exceed the waiters ahead of it when it queued plus
    ``queue_pass_limit``; every hand-off goes to the queue's first eligible waiter; the
    invariants and snapshot identity hold after every step."""
    w = World()
    w.configure(livelock_repeats=2, livelock_window_ms=60_000)
    tids = (RES, POOL)
    w.target(RES)
    w.target(POOL, slots=slots)
    names = [f"exec:x{i}" for i in range(AGENTS)]
    for i in range(AGENTS):
        w.execution(f"x{i}")
    limit = w.st.limits.queue_pass_limit
    bound: dict[tuple[str, str], int] = {}  # (waiter, target) -> grants to others it may still see
    for op, i, prio in ops:
        eid = names[i]
        ex = w.st.executions[eid]
        tid = tids[(i + op + prio) % 2]
        t = w.st.targets[tid]
        before = {k: list(v) for k, v in ((k, order(w.st.queues, k)) for k in tids)}
        if op <= 2 and ex.status.value in ("RUNNING", "WAITING") and eid not in t.holders:
            out = w.do(w.owner(eid), Acquire(target_id=tid, execution_id=eid, generation=ex.generation))
            if out.result is Result.REJECTED and w.st.wait(eid, tid) is None:
                ahead = len(order(w.st.queues, tid))
                queued(w, eid, tid, priority=prio)
                bound[(eid, tid)] = ahead + limit
        elif op <= 5 and t.holders:
            holder = sorted(t.holders)[i % len(t.holders)]
            out = release(w, holder, tid)
            grants = granted(out)
            if grants:
                # the grant went to the first waiter of the queue that could take it
                heads = [q for q in before[tid] if w.st.executions[q].status.value in ("RUNNING", "WAITING")]
                assert [g for g, _ in grants] == heads[: len(grants)]
            for g, _ in grants:
                bound.pop((g, tid), None)
            for (waiter, target), left in list(bound.items()):
                if target == tid:
                    assert left - len(grants) >= 0, f"{waiter} was passed by more grants than allowed"
                    bound[(waiter, target)] = left - len(grants)
        elif op == 6 and ex.status.value in ("RUNNING", "WAITING"):
            # a retry ends the attempt: its waits close (it leaves its queues), its holdings hand over
            w.ok(w.owner(eid), RetryExecution(execution_id=eid, generation=ex.generation))
            w.ok(
                w.owner(eid),
                StartExecution(execution_id=eid, generation=ex.generation, observed_cancel_generation=w.cg(eid)),
            )
        elif op == 7 and i % 3 == 0 and ex.status.value in ("RUNNING", "WAITING"):
            # asked to stop: it keeps its places but is passed by until it settles (then it leaves)
            run_id = ex.run_id
            w.ok(w.owner(eid), CancelRun(run_id=run_id, observed_cancel_generation=w.cg(eid), reason="stop"))
            for k in [k for k in bound if k[0] == eid]:
                del bound[k]
        elif op == 7 and ex.status.value == "CANCEL_REQUESTED":
            ack = AckCancel(
                execution_id=eid, generation=ex.generation, cancel_generation=w.cg(eid), side_effects=EffectOutcome.NONE
            )
            w.ok(w.owner(eid), ack)  # settled: it leaves every queue
        for k in [k for k in bound if w.st.wait(*k) is None]:
            del bound[k]
        sound(w)


def test_queue_position_is_visible_in_graph_the_cli_table_and_the_live_view_details() -> None:
    from waitgraph.node.service import graph_response
    from waitgraph.ops import liveview, render

    w = world("h", "a", "b")
    w.hold("exec:h", RES)
    queued(w, "exec:a", RES)
    queued(w, "exec:b", RES, priority=2)
    graph = graph_response(w.st, 100)
    assert [(v.waiter_id, v.queue_position) for v in graph.waits] == [("exec:a", 1), ("exec:b", 0)]
    (waits,) = [b for b in render.graph_blocks(graph) if (getattr(b, "title", None) or "").startswith("WAITS")]
    assert waits.columns[-1] == "queue" and [row[-1] for row in waits.rows] == [1, 0]
    target = liveview.details(w.st, RES)
    assert target is not None and [e["waiter_id"] for e in target["queue"]] == ["exec:b", "exec:a"]
    assert [e["queue_position"] for e in target["waited_on_by"]] == [1, 0]
    waiter = liveview.details(w.st, "exec:a")
    assert waiter is not None and [e["queue_position"] for e in waiter["waits"]] == [1]


# -- soft cycles and REORDER through the recovery transaction ---------------------------------


def soft_shape(mode: RolloutMode) -> World:
    """PostgreSQL's deadlock-soft shape (tests/transcripts/queues/soft_deadlock.txt)."""
    w = World()
    for tid in ("pool:a1", "pool:a2", "resource:x1", "resource:x2"):
        w.target(tid)
    for n in ("h1", "h2", "d1", "d2", "e1", "e2"):
        w.execution(n)
    for e, tid in (("h1", "pool:a1"), ("h2", "pool:a2"), ("d1", "resource:x1"), ("d2", "resource:x2")):
        w.hold(f"exec:{e}", tid)
    for e, tid in (("e1", "pool:a1"), ("d2", "pool:a1"), ("e2", "pool:a2"), ("d1", "pool:a2")):
        queued(w, f"exec:{e}", tid)
    queued(w, "exec:e1", "resource:x1")
    queued(w, "exec:e2", "resource:x2")
    w.configure(mode=mode, window_ms=0)
    return w


def recover_soft(w: World) -> Outcome:
    from waitgraph.statemachine.recovery import propose_command
    from waitgraph.statemachine.reorder import soft_candidates

    assert w.candidates() == []
    [(c, _)] = soft_candidates(w.st)
    assert w.do("node:n1", propose_command(c, 0)).ok
    w.vote_all(c)
    return w.commit(c)


def test_the_leaders_loop_proposes_a_soft_cycle_and_voters_approve_it() -> None:
    """cluster/node/loops.py's survey (the pure read each period): the leader proposes the soft
    cycle a reorder breaks, each voter approves it while it stands, and the commit reorders."""
    from waitgraph.node.loops import survey
    from waitgraph.statemachine.commands import VoteRecovery
    from waitgraph.statemachine.detect import IncrementalDetector
    from waitgraph.statemachine.recovery import propose_command

    w = soft_shape(RolloutMode.AUTO)
    leader = survey(w.m, "node:n1", True, w.st.now_ms, IncrementalDetector())
    assert [sorted(m for m, _ in c.members) for c in leader.proposals] == [["exec:d1", "exec:d2", "exec:e1", "exec:e2"]]
    [c] = leader.proposals
    assert w.do("node:n1", propose_command(c, 0)).ok
    for voter in ("node:n1", "node:n2", "node:n3"):
        [(digest, approve, _)] = survey(w.m, voter, False, w.st.now_ms, None).votes
        assert digest == c.digest and approve, voter  # still_deadlocked alone would reject it
        assert w.do(voter, VoteRecovery(digest=c.digest, approve=approve)).ok
    assert survey(w.m, "node:n1", True, w.st.now_ms, IncrementalDetector()).commits
    w.commit(c)
    assert w.st.recovery.decisions["d1"].kind is DecisionKind.REORDER
    again = survey(w.m, "node:n1", True, w.st.now_ms, IncrementalDetector())
    assert again.proposals == [] and again.commits == []  # broken: nothing left to propose


def test_the_cycles_rpc_and_the_cli_list_a_soft_cycle_with_its_soft_edges() -> None:
    from waitgraph.node.service import cycles_response
    from waitgraph.ops import render

    w = soft_shape(RolloutMode.AUTO)
    out = cycles_response(w.st)
    assert list(out.cycles) == []  # nothing hard yet
    [c] = out.soft_cycles
    assert sorted(m.execution_id for m in c.members) == ["exec:d1", "exec:d2", "exec:e1", "exec:e2"]
    assert sorted((e.waiter_id, e.ahead_id, e.target_id) for e in c.soft_edges) == [
        ("exec:d1", "exec:e2", "pool:a2"),
        ("exec:d2", "exec:e1", "pool:a1"),
    ]
    assert not c.HasField("proposal_status")
    text = render.plain(render.cycles_blocks(out))
    assert "SOFT CYCLES (1)" in text and "exec:d1 behind exec:e2 on pool:a2" in text
    recover_soft(w)
    assert list(cycles_response(w.st).soft_cycles) == []  # reordered: gone
    assert "SOFT CYCLES" not in render.plain(render.cycles_blocks(cycles_response(w.st)))


def test_a_soft_cycle_no_reorder_breaks_is_not_proposed_every_period() -> None:
    from waitgraph.node.loops import survey
    from waitgraph.statemachine.detect import IncrementalDetector
    from waitgraph.statemachine.reorder import soft_candidates

    w = soft_shape(RolloutMode.AUTO)
    for entry in (*w.st.queues["pool:a1"], *w.st.queues["pool:a2"]):
        entry.passed = w.st.limits.queue_pass_limit  # nobody may be passed again: no reorder
    assert soft_candidates(w.st)  # the soft cycle is there
    assert survey(w.m, "node:n1", True, w.st.now_ms, IncrementalDetector()).proposals == []


def test_a_soft_cycle_is_reordered_by_a_voted_decision_and_nobody_is_cancelled() -> None:
    w = soft_shape(RolloutMode.AUTO)
    statuses = {e: x.status for e, x in w.st.executions.items()}
    out = recover_soft(w)
    d = w.st.recovery.decisions["d1"]
    assert d.kind is DecisionKind.REORDER and d.winner_id is None and d.epoch == 1 == w.st.recovery.epoch
    assert d.reorders == [("pool:a2", ["exec:e2", "exec:d1"], ["exec:d1", "exec:e2"])]
    assert len(d.scores) == 4 and d.released == []
    assert order(w.st.queues, "pool:a2") == ["exec:d1", "exec:e2"]
    assert {e: x.status for e, x in w.st.executions.items()} == statuses  # nobody cancelled
    assert [type(fx).__name__ for fx in out.effects] == ["EpochCommitted", "VictimChosen"]
    sound(w)
    plain = State.restore(w.st.snapshot()).recovery.decisions["d1"]
    assert plain.reorders == d.reorders


def test_shadow_mode_reports_a_reorder_and_changes_no_queue() -> None:
    w = soft_shape(RolloutMode.SHADOW)
    before = {tid: order(w.st.queues, tid) for tid in w.st.queues}
    recover_soft(w)
    d = w.st.recovery.decisions["d1"]
    assert d.kind is DecisionKind.SHADOW and d.epoch is None and w.st.recovery.epoch == 0
    assert d.reorders == [("pool:a2", ["exec:e2", "exec:d1"], ["exec:d1", "exec:e2"])]
    assert {tid: order(w.st.queues, tid) for tid in w.st.queues} == before
    sound(w)
