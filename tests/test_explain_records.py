"""What a recovery decision records for its explanation: the cycle's waits (reason, registration
time, satisfiers), the votes with their times, the epoch before the decision, and the signature's
trajectory totals; all of it survives snapshot -> restore byte for byte, and rows written before
these fields existed still load."""

from __future__ import annotations

import msgpack

from waitgraph.statemachine.commands import AckCancel, Acquire, RetryExecution, StartExecution, VoteRecovery
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.statemachine.recovery import livelock_reason
from waitgraph.statemachine.recovery_state import CycleWait, DecisionKind, RecoveryBook, RolloutMode
from waitgraph.statemachine.state import State

from .test_recovery import NODES3, browser_review, seven_agent_cycle
from .world import World


def test_a_decision_records_the_cycle_waits_votes_and_the_epoch_before() -> None:
    w = World()
    browser_review(w)
    registered = {e.edge_id: e.registered_at_ms for x in ("exec:A", "exec:B") for e in w.st.waits_of(x)}
    w.configure()
    [c] = w.candidates()
    assert w.propose(c).ok
    proposed_at = w.t
    for voter in ("node:n2", "node:n1"):
        w.ok(voter, VoteRecovery(digest=c.digest), dt=5)
    w.ok("node:n3", VoteRecovery(digest=c.digest, approve=True), dt=7)
    p = w.st.recovery.proposals[c.digest]
    assert p.votes == [
        ("node:n2", True, proposed_at + 5),
        ("node:n1", True, proposed_at + 10),
        ("node:n3", True, proposed_at + 17),
    ]
    assert w.commit(c).ok
    d = w.st.recovery.decisions["d1"]
    assert d.kind is DecisionKind.VICTIM and d.epoch == 1 and d.epoch_before == 0
    assert (d.proposer, d.proposed_at_ms) == ("node:n1", proposed_at)
    assert d.votes == p.votes
    assert d.waits == [
        CycleWait(
            "exec:A", 1, "artifact:review-42", 1, 1, "needs it", registered["exec:A>artifact:review-42"], ("exec:B",)
        ),
        CycleWait(
            "exec:B", 1, "resource:browser-9", 1, 1, "needs it", registered["exec:B>resource:browser-9"], ("exec:A",)
        ),
    ]
    # The victim (all scores equal: the lowest id) lost its wait with the rollback, and B's wait
    # closed when the browser was released: only the decision still has them.
    assert d.winner_id == "exec:A" and not w.st.waits_of("exec:A") and not w.st.waits_of("exec:B")


def test_a_rejecting_vote_is_recorded_with_its_time() -> None:
    w = World()
    browser_review(w)
    w.configure(voters=("node:n1", "node:n2", "node:n3", "operator:op"), quorum=3)
    [c] = w.candidates()
    assert w.propose(c).ok
    w.ok("operator:op", VoteRecovery(digest=c.digest, approve=False))
    assert w.st.recovery.proposals[c.digest].votes == [("operator:op", False, w.t)]


def test_shadow_decisions_record_the_epoch_they_did_not_advance() -> None:
    w = World()
    browser_review(w)
    w.configure(mode=RolloutMode.SHADOW)
    w.recover()
    d = w.st.recovery.decisions["d1"]
    assert d.kind is DecisionKind.SHADOW and d.epoch is None and d.epoch_before == 0
    assert len(d.waits) == 2 and len(d.votes) == 3
    t = w.st.recovery.trajectory[d.signature]
    # Shadow clears the guard's window (nothing was rolled back) but not the totals.
    assert t.observations == [] and t.observed_total == 1 and t.recovered_total == 0
    assert t.first_seen == (0, d.proposed_at_ms)


def test_trajectory_totals_count_every_sighting_and_rollback_beyond_the_guard_window() -> None:
    w = World()
    ring = seven_agent_cycle(w, n=2)
    w.configure(voters=NODES3, quorum=3, max_rollback=1, livelock_repeats=1, livelock_window_ms=10**9)
    w.recover()
    d1 = w.st.recovery.decisions["d1"]
    victim = d1.winner_id
    assert victim == ring[0]
    sig = d1.signature
    first_seen = w.st.recovery.trajectory[sig].first_seen
    # The victim comes back and re-forms the same cycle: the guard will escalate.
    owner = w.owner(victim)
    w.ok(owner, AckCancel(execution_id=victim, generation=1, cancel_generation=0, side_effects=EffectOutcome.NONE))
    w.ok(owner, RetryExecution(execution_id=victim, generation=1))
    w.ok(owner, StartExecution(execution_id=victim, generation=2, observed_cancel_generation=0))
    w.release(ring[1], "resource:r0")  # the rollback handed r0 to the other member; it puts it back
    w.ok(owner, Acquire(target_id="resource:r0", execution_id=victim, generation=2, observed_epoch=1))
    w.wait(ring[1], "resource:r0")
    w.wait(victim, "resource:r1")
    [c] = w.candidates()
    assert c.signature == sig
    assert w.propose(c).ok
    # Between the proposal and its commit, a read says what the commit will do.
    assert livelock_reason(w.st.recovery, sig, w.t) == "recovered_more_than_1_times_within_1000000000ms"
    w.vote_all(c)
    assert w.commit(c).ok
    d2 = w.st.recovery.decisions["d2"]
    assert d2.kind is DecisionKind.TIE_BREAK and (d2.epoch_before, d2.epoch) == (1, 2)
    t = w.st.recovery.trajectory[sig]
    assert (t.observed_total, t.recovered_total) == (2, 2)
    assert len(t.recoveries) == 2 and t.recoveries[-1][0] == 2  # the window keeps K+1 = 2
    assert t.first_seen == first_seen == (0, d1.proposed_at_ms)


def test_explanation_fields_survive_snapshot_and_restore() -> None:
    w = World()
    browser_review(w)
    w.configure()
    w.recover()
    data = w.st.snapshot()
    again = State.restore(data)
    assert again.snapshot() == data
    d = again.recovery.decisions["d1"]
    assert d.waits == w.st.recovery.decisions["d1"].waits and d.votes == w.st.recovery.decisions["d1"].votes
    assert again.recovery.trajectory == w.st.recovery.trajectory


def test_rows_written_before_the_explanation_fields_still_load() -> None:
    w = World()
    browser_review(w)
    w.configure()
    w.recover()
    raw = msgpack.unpackb(w.st.snapshot(), raw=False, strict_map_key=False)
    rec = raw["recovery"]
    rec["decisions"] = [row[:14] for row in rec["decisions"]]
    rec["proposals"] = [row[:14] for row in rec["proposals"]]
    rec["trajectory"] = [row[:3] for row in rec["trajectory"]]
    book = RecoveryBook.from_plain(rec)
    d = book.decisions["d1"]
    assert (d.epoch, d.epoch_before, d.proposer, d.votes, d.waits) == (1, 0, "", [], [])
    assert book.proposals[d.digest].votes == []
    t = book.trajectory[d.signature]
    assert (t.observed_total, t.recovered_total, t.first_seen) == (len(t.observations), len(t.recoveries), None)


def test_an_old_shadow_row_takes_the_epoch_before_from_its_proposal() -> None:
    w = World()
    browser_review(w)
    w.configure(mode=RolloutMode.SHADOW)
    w.st.recovery.epoch = 4  # as if four rollbacks had happened before
    w.recover()
    raw = msgpack.unpackb(w.st.snapshot(), raw=False, strict_map_key=False)
    rec = raw["recovery"]
    rec["decisions"] = [row[:14] for row in rec["decisions"]]
    d = RecoveryBook.from_plain(rec).decisions["d1"]
    assert d.epoch is None and d.epoch_before == 4 == w.st.recovery.decisions["d1"].epoch_before
