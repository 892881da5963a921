"""The explanation narrative, ``signature`` and ``--wait`` progress without a cluster: the cycle
walk, durations, the history and livelock-guard paragraphs, the next-step line, the fingerprint,
and the progress watcher's lines, back-off, fresh confirmation and deadline."""

from __future__ import annotations

import io
from typing import Any

import pytest

from waitgraph.ops import progress, render
from waitgraph.proto.v1 import operator_pb2, types_pb2
from waitgraph.sdk import Read

T0 = 1_700_000_000_000


def wait(waiter: str, target: str, sat: str, reason: str = "r", age_ms: int = 1500) -> operator_pb2.CycleWaitView:
    return operator_pb2.CycleWaitView(
        waiter_id=waiter,
        waiter_generation=1,
        target_id=target,
        target_generation=1,
        reason=reason,
        registered_at_ms=T0 - age_ms,
        satisfiers=[sat],
    )


def victim(**fields: Any) -> operator_pb2.DecisionView:
    base: dict[str, Any] = dict(
        decision_id="d2",
        digest="ab" * 32,
        signature="0123456789abcdef",
        policy_version="victim-policy.v1",
        kind=types_pb2.DECISION_KIND_VICTIM,
        mode=types_pb2.ROLLOUT_MODE_AUTO,
        reason_code="policy_v1",
        epoch=3,
        epoch_before=2,
        winner_id="exec:C",
        winner_generation=1,
        scores=[
            operator_pb2.ScoreView(execution_id="exec:A", generation=1, external_side_effects=True),
            operator_pb2.ScoreView(execution_id="exec:B", generation=1, priority=5),
            operator_pb2.ScoreView(execution_id="exec:C", generation=1),
        ],
        roles=[
            operator_pb2.RoleView(execution_id="exec:A", role="kept"),
            operator_pb2.RoleView(execution_id="exec:B", role="kept"),
            operator_pb2.RoleView(execution_id="exec:C", role="victim"),
        ],
        waits=[
            wait("exec:A", "artifact:plan", "exec:B", "the plan", 90_000),
            wait("exec:B", "pool:gpus", "exec:C", "a gpu", 4_200),
            wait("exec:B", "exec:A", "exec:A", "its result", 300),
            wait("exec:C", "resource:lock", "exec:A", "", 65_000),
        ],
        votes=[
            operator_pb2.VoteView(voter="node:n1", approve=True, at_ms=T0 - 900),
            operator_pb2.VoteView(voter="operator:ops", approve=False, at_ms=T0 - 100),
        ],
        proposer="node:n2",
        proposed_at_ms=T0 - 1000,
        released=[operator_pb2.ReleaseView(target_id="pool:gpus", execution_id="exec:C", at_ms=T0)],
        at_ms=T0,
    )
    base.update(fields)
    return operator_pb2.DecisionView(**base)


def text(blocks: list[render.Block]) -> str:
    return render.plain(blocks)


def test_durations_read_like_a_person_would_say_them() -> None:
    assert [render.duration(ms) for ms in (0, 999, 1000, 4_150, 59_999, 60_000, 185_000, 7_380_000)] == [
        "0 ms",
        "999 ms",
        "1.0 s",
        "4.2 s",
        "60.0 s",
        "1 min 00 s",
        "3 min 05 s",
        "2 h 03 min",
    ]


def test_the_cycle_path_walks_from_the_lowest_member_along_first_waits() -> None:
    d = victim()
    walk = render.cycle_path(d)
    assert [(w.waiter_id, w.target_id) for w in walk] == [
        ("exec:A", "artifact:plan"),
        ("exec:B", "pool:gpus"),
        ("exec:C", "resource:lock"),
    ]
    assert render.path_text(walk) == (
        "exec:A -> waits for artifact:plan (the plan), produced by -> exec:B -> waits for pool:gpus (a gpu), "
        "held by -> exec:C -> waits for resource:lock (no reason given), held by -> exec:A"
    )
    assert render.cycle_path(victim(waits=[])) == [] and render.path_text([]) == "-"


def test_the_narrative_has_the_cycle_votes_epochs_releases_and_next_step() -> None:
    pending = operator_pb2.CancellationView(
        scope_id="exec:C@1", root_id="exec:C", requested_at_ms=T0, pending=2, quarantined=1
    )
    story = text(render.explain_blocks(victim(cancellations=[pending]), None, [], quorum=2))
    assert "epoch:      2 -> 3 (committed by this decision, before anything was released)" in story
    assert "exec:A@g1  artifact:plan@1  the plan    1 min 30 s  exec:B (produces it)" in story
    assert "exec:B@g1  exec:A@1         its result  300 ms      exec:A (is it)" in story
    assert "exec:C@g1  resource:lock@1  -           1 min 05 s  exec:A (holds it)" in story
    assert "VOTES (1 approve, 1 reject; quorum 2)" in story
    assert "operator:ops  REJECT   " in story and "+900 ms" in story
    assert "proposed by node:n2 at " in story and "decided within 1.0 s" in story
    assert "approved by node:n1 (quorum 2); rejected by operator:ops." in story
    assert "Its oldest wait had lasted 1 min 30 s when it was decided." in story
    assert "Epoch 2 -> 3 was committed first" in story
    assert (
        "Released at 2023-11-14T22:13:20.000Z, after the epoch commit, in this order: pool:gpus (from exec:C)." in story
    )
    assert (
        "Cancellation exec:C@1 (requested 2023-11-14T22:13:20.000Z) has not converged: 2 execution(s) still " in story
    )
    assert "asked to stop, 1 quarantined." in story
    assert "Next: a rolled-back execution passed the cancellation SLO and is quarantined" in story


def test_history_says_what_happened_before_and_after_and_what_the_guard_thinks() -> None:
    def summary(did: str, at_ms: int, epoch: int | None, kind: int = types_pb2.DECISION_KIND_VICTIM) -> Any:
        s = operator_pb2.DecisionSummary(
            decision_id=did, kind=kind, reason_code="policy_v1", at_ms=at_ms, winner_id="exec:C"
        )
        if epoch is not None:
            s.epoch_before, s.epoch = epoch - 1, epoch
        return s

    t = operator_pb2.TrajectoryView(
        signature="0123456789abcdef",
        known=True,
        observations=[operator_pb2.EpochAt(epoch=2, at_ms=T0), operator_pb2.EpochAt(epoch=2, at_ms=T0 + 5)],
        recoveries=[operator_pb2.EpochAt(epoch=2, at_ms=T0 - 10), operator_pb2.EpochAt(epoch=3, at_ms=T0)],
        observed_total=5,
        recovered_total=3,
        first_seen=operator_pb2.EpochAt(epoch=0, at_ms=T0 - 60_000),
        decisions=[
            summary("d1", T0 - 10, 2),
            summary("d2", T0, 3),
            summary("d3", T0 + 7, None, types_pb2.DECISION_KIND_SHADOW),
        ],
        guard="same_signature_without_epoch_advance",
    )
    story = text(render.explain_blocks(victim(), None, [], trajectory=t))
    assert "signature:  0123456789abcdef (proposed 5 time(s), rolled back 3 time(s); first at epoch 0, " in story
    assert (
        "was seen before: 1 earlier decision(s): d1 at " in story
        and "(VICTIM, policy_v1, epoch 1 -> 2, exec:C)" in story
    )
    assert "It came back after: d3 at " in story and "(SHADOW, policy_v1, epoch 0 kept, exec:C)." in story
    assert "(latest rollbacks committed epochs 2, 3)" in story
    assert "LIVELOCK GUARD: same_signature_without_epoch_advance" in story
    doc = render.explain_json(victim(), None, [], t)
    assert doc["trajectory"]["guard"] == "same_signature_without_epoch_advance"
    assert [p["age_ms"] for p in doc["cycle_path"]] == [90_000, 4_200, 65_000]
    assert doc["epoch_before"] == 2 and doc["votes"][1] == {
        "voter": "operator:ops",
        "approve": False,
        "at_ms": T0 - 100,
    }

    unknown = text(render.explain_blocks(victim(), None, [], trajectory=operator_pb2.TrajectoryView()))
    assert "this replica keeps no trajectory for it" in unknown


def test_signature_blocks_show_the_window_the_decisions_and_the_fingerprint() -> None:
    t = operator_pb2.TrajectoryView(
        signature="0123456789abcdef",
        known=True,
        observations=[operator_pb2.EpochAt(epoch=4, at_ms=T0), operator_pb2.EpochAt(epoch=4, at_ms=T0 + 340)],
        observed_total=2,
        guard="same_signature_without_epoch_advance",
    )
    out = text(render.signature_blocks(operator_pb2.SignatureHistoryResponse(trajectory=t, epoch=4)))
    assert "guard:     same_signature_without_epoch_advance" in out
    assert "LIVELOCK FINGERPRINT: seen again at epoch 4 without the epoch advancing" in out
    t.observations[1].epoch = 5
    out = text(render.signature_blocks(operator_pb2.SignatureHistoryResponse(trajectory=t, epoch=5)))
    assert "FINGERPRINT" not in out and "DECISIONS (0)" in out
    missing = operator_pb2.SignatureHistoryResponse(trajectory=operator_pb2.TrajectoryView(signature="f" * 16))
    assert (
        text(render.signature_blocks(missing))
        == f"Signature {'f' * 16} is not on this replica: never proposed, or evicted.\n"
    )


# -- --wait ------------------------------------------------------------------------------------------------


class FakeOps:
    """Answers Convergence with the replies given, one per call; records freshness asked for."""

    def __init__(self, replies: list[operator_pb2.ConvergenceResponse]) -> None:
        self.replies = replies
        self.fresh: list[bool | None] = []

    def read_convergence(self, run_id: str = "", fresh: bool | None = None) -> Read[operator_pb2.ConvergenceResponse]:
        self.fresh.append(fresh)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return Read("127.0.0.1:1", reply, fresh is False)


def run_reply(settled: int, total: int, stable: bool = False, **unsettled: int) -> operator_pb2.ConvergenceResponse:
    state = types_pb2.CANCEL_STATE_CANCELLED_STABLE if stable else types_pb2.CANCEL_STATE_CANCELLING
    return operator_pb2.ConvergenceResponse(
        run_id="r1", cancel_generation=3, cancel_state=state, executions=total, settled=settled, unsettled=unsettled
    )


def test_watch_prints_one_line_per_change_backs_off_and_confirms_fresh() -> None:
    ops = FakeOps(
        [
            run_reply(4, 7, CANCELLING=2, RUNNING=1),
            run_reply(4, 7, CANCELLING=2, RUNNING=1),
            run_reply(6, 7, QUARANTINED=1),
            run_reply(7, 7, stable=True),
            run_reply(7, 7, stable=True),
        ]
    )
    sleeps: list[float] = []
    out = io.StringIO()
    last = progress.watch(ops, "r1", progress.cancel_reading("r1", 3), 60, out, False, sleeps.append)  # type: ignore[arg-type]
    assert last.done and last.completed == 7
    assert out.getvalue().splitlines() == [
        "cancel run:r1 gen 3: 4/7 settled, 2 CANCELLING, 1 RUNNING",
        "cancel run:r1 gen 3: 6/7 settled, 1 QUARANTINED",
        "cancel run:r1 gen 3: 7/7 settled; CANCELLED_STABLE",
    ]
    assert sleeps == [0.25, 0.375, 0.5625]  # backing off towards MAX_POLL_S
    assert ops.fresh == [False, False, False, False, None]  # polls are local; the end is confirmed


def test_watch_raises_not_converged_at_the_deadline_with_the_last_reading() -> None:
    ops = FakeOps([run_reply(0, 1, CANCEL_REQUESTED=1)])
    with pytest.raises(progress.NotConverged) as info:
        progress.watch(ops, "r1", progress.cancel_reading("r1", 3), 0, io.StringIO(), False, lambda s: None)  # type: ignore[arg-type]
    assert info.value.last.line == "cancel run:r1 gen 3: 0/1 settled, 1 CANCEL_REQUESTED"
    older = run_reply(1, 1, stable=True)
    older.cancel_generation = 2  # a lagging replica: not done for generation 3
    reading = progress.cancel_reading("r1", 3)(Read("e", older, True))
    assert not reading.done and "has not applied gen 3 yet" in reading.line


def test_freeze_reading_counts_acknowledgements_against_the_most_pending_seen() -> None:
    read = progress.freeze_reading(None)

    def reply(
        frozen: bool, scopes: int, pending: int, quarantined: tuple[str, ...] = ()
    ) -> Read[operator_pb2.ConvergenceResponse]:
        r = operator_pb2.ConvergenceResponse(
            admission_frozen=frozen,
            open_cancellations=scopes,
            pending_acks=pending,
            quarantined=list(quarantined),
            converged=scopes == 0,
        )
        return Read("e", r, True)

    first = read(reply(False, 2, 4))
    assert not first.done and first.line == "freeze cluster: this replica has not applied the freeze yet"
    mid = read(reply(True, 1, 1, ("exec:z",)))
    assert (mid.completed, mid.total) == (3, 4)
    assert (
        mid.line
        == "freeze cluster: admission frozen; 1 cancellation(s) open, 1 execution(s) not acknowledged (1 quarantined)"
    )
    done = read(reply(True, 0, 0))
    assert done.done and done.line == "freeze cluster: admission frozen; no cancellation open: quiesced"
    assert progress.freeze_reading("r9")(reply(True, 0, 0)).line.startswith("freeze run:r9: ")
