"""The history store (cluster/node/history.py): written from retirement effects, queryable, idempotent,
bounded by age and size (oldest first), and the explain of a retired decision it answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_retire_props import SETUP, deadlock_envelopes, finish_envelope, recovery_envelopes
from waitgraph.node.events import EventfulMachine, EventJournal
from waitgraph.node.history import HistoryStore
from waitgraph.node.service import explain_response, retired_explain_response
from waitgraph.statemachine.commands import CreateTarget, Envelope, JoinSession, ProduceArtifact, RetireSettled
from waitgraph.statemachine.effects import (
    DecisionRetired,
    ExecutionRetired,
    RetirementPassed,
    RunRetired,
    TargetRetired,
)
from waitgraph.statemachine.recovery_state import Decision
from waitgraph.statemachine.retire import decision_from_retired, decision_retired


def _machine_with_history(store: HistoryStore) -> EventfulMachine:
    return EventfulMachine(EventJournal(1000), store.applied)


def _decided_and_settled(m: EventfulMachine) -> Decision:
    """A two-run deadlock, recovered (d1), its victim acknowledged and the other failed."""
    for cmd in SETUP:
        m.apply(Envelope(actor="operator:root", at_ms=0, request_id=None, command=cmd))
    for env in deadlock_envelopes(m.state, 1):
        assert m.apply(env).code == "", env
    for env in recovery_envelopes(m.state, 1000, commit=False):
        m.apply(env)
    for env in recovery_envelopes(m.state, 2000, commit=True):
        m.apply(env)
    decision = m.state.recovery.decisions["d1"]
    while (env := finish_envelope(m.state, min)) is not None:
        assert m.apply(env).code == "", env
    return decision


def _retire(m: EventfulMachine, at_ms: int, retention_ms: int = 10_000) -> tuple[object, ...]:
    out = m.apply(
        Envelope(actor="node:n1", at_ms=at_ms, request_id=None, command=RetireSettled(retention_ms=retention_ms))
    )
    return out.effects


def test_a_retired_decision_is_answered_from_the_history_store(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    m = _machine_with_history(store)
    decision = _decided_and_settled(m)
    live = explain_response(m.state, "d1", "")
    effects = _retire(m, 100_000)
    assert any(isinstance(fx, DecisionRetired) for fx in effects)
    assert "d1" not in m.state.recovery.decisions
    assert not explain_response(m.state, "d1", "").decisions, "the live state no longer holds it"

    [(found, retired_at)] = store.decisions(decision_id="d1")
    assert found == decision and retired_at == 100_000
    assert store.decisions(digest=decision.digest) == [(decision, 100_000)]
    view = retired_explain_response(m.state, [(found, retired_at)]).decisions[0]
    assert view.retired_at_ms == 100_000
    # The same record as the live explain gave, less the live cancellation views and plus retired_at_ms.
    before = live.decisions[0]
    before.ClearField("cancellations")
    view_without = type(view)()
    view_without.CopyFrom(view)
    view_without.ClearField("retired_at_ms")
    assert view_without == before

    # By run: the run and its executions, each with its final status, generation and ledger.
    run_id = decision.winner_id.split(":")[1] if decision.winner_id else ""
    kinds = sorted(r.kind for r in store.find(run_id))
    assert kinds == ["ExecutionRetired", "RunRetired"], kinds
    victim = [r for r in store.find(decision.winner_id or "") if r.kind == "ExecutionRetired"]
    fx = victim[0].effect()
    assert isinstance(fx, ExecutionRetired) and fx.status.value == "CANCELLED" and fx.generation == 1
    by_execution = {r.kind for r in store.find(decision.winner_id or "")}
    assert {"ExecutionRetired", "DecisionRetired", "ProposalRetired"} <= by_execution
    run = next(r for r in store.find(run_id) if r.kind == "RunRetired").effect()
    assert isinstance(run, RunRetired) and run.executions == 1
    store.close()


def test_a_retired_artifact_is_kept_with_its_last_version(tmp_path: Path) -> None:
    """A produced artifact nothing refers to any more retires into the store, findable by its id
    (`waitgraph history --target`), with the version it was produced at."""
    store = HistoryStore(tmp_path / "history.sqlite3")
    m = _machine_with_history(store)
    for actor, cmd in (
        ("agent:a", JoinSession(agent_id="a", lease_ms=600_000)),
        ("operator:op", CreateTarget(target_id="artifact:report-42")),
        ("agent:a", ProduceArtifact(artifact_id="artifact:report-42", version=3)),
    ):
        assert m.apply(Envelope(actor=actor, at_ms=1000, request_id=None, command=cmd)).code == "", cmd
    effects = _retire(m, 20_000)
    assert any(isinstance(fx, TargetRetired) for fx in effects), effects
    [record] = store.find("artifact:report-42")
    fx = record.effect()
    assert record.kind == "TargetRetired" and isinstance(fx, TargetRetired)
    assert (fx.version, fx.touched_at_ms, fx.retired_at_ms) == (3, 1000, 20_000)
    store.close()


def test_records_survive_a_reopen_and_a_replay_writes_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    m = _machine_with_history(store)
    _decided_and_settled(m)
    effects = _retire(m, 100_000)
    total = store.stats()
    assert total[0] >= 5
    store.close()

    again = HistoryStore(path)
    assert again.stats() == total, "the store did not keep its records across a reopen"
    # A restarted node re-applies its journal after its snapshot: the same pass, the same rows.
    assert again.record(fx for fx in effects if not isinstance(fx, RetirementPassed)) == 0
    assert again.stats() == total
    assert [d.decision_id for d, _ in again.decisions(decision_id="d1")] == ["d1"]
    again.close()


def _effect(i: int) -> RunRetired:
    return RunRetired(
        run_id=f"r{i}",
        root_id=f"exec:r{i}",
        executions=1,
        cancel_generation=0,
        cancel_state="NOT_CANCELLED",  # type: ignore[arg-type]
        cancel_stable_at_ms=None,
        settled_at_ms=i,
        retired_at_ms=i,
    )


def test_the_store_is_bounded_by_size_oldest_first() -> None:
    size = len(json.dumps({"x": 1}))  # any small record
    store = HistoryStore(":memory:", max_bytes=2000)
    for i in range(100):
        store.record([_effect(i)])
    records, payload = store.stats()
    assert payload <= 2000 and 0 < records < 100, (records, payload, size)
    kept = sorted(int(r.key[1:]) for r in store.find(limit=1000))
    assert kept == list(range(100 - records, 100)), "not the oldest records were deleted"
    assert store.find("r0") == [], "a deleted record is still found by its id"


def test_the_store_is_bounded_by_age() -> None:
    now = [1000.0]
    store = HistoryStore(":memory:", max_age_s=60.0, clock=lambda: now[0])
    store.record([_effect(1), _effect(2)])
    now[0] += 30
    store.record([_effect(3)])
    now[0] += 40  # the first two are 70 s old now, the third 40 s
    store.record([_effect(4)])
    assert sorted(r.key for r in store.find(limit=10)) == ["r3", "r4"]


def test_a_decision_round_trips_through_its_retirement_effect(tmp_path: Path) -> None:
    m = _machine_with_history(HistoryStore(tmp_path / "h.sqlite3"))
    decision = _decided_and_settled(m)
    assert decision.waits and decision.scores and decision.votes
    assert decision_from_retired(decision_retired(decision, 5)) == decision


@pytest.mark.parametrize("bad", ["not json", json.dumps({"kind": "RunRetired", "v": 1})])
def test_a_corrupt_row_is_a_codec_error_not_a_crash(bad: str) -> None:
    from waitgraph.node.history import Record
    from waitgraph.statemachine.errors import CodecError

    with pytest.raises((CodecError, ValueError)):
        Record(1, "RunRetired", "r1", "r1", 1, bad).effect()


def test_history_and_a_retired_explain_render_for_an_operator(tmp_path: Path) -> None:
    from waitgraph.ops import render
    from waitgraph.proto.v1 import operator_pb2

    store = HistoryStore(tmp_path / "h.sqlite3")
    m = _machine_with_history(store)
    decision = _decided_and_settled(m)
    _retire(m, 100_000)
    reply = operator_pb2.HistoryResponse(
        records=[
            operator_pb2.HistoryRecord(
                kind=r.kind, key=r.key, run_id=r.run_id or "", retired_at_ms=r.retired_at_ms, record_json=r.body
            )
            for r in store.find(decision.winner_id or "")
        ],
        node_id="n1",
        records_total=store.stats()[0],
        bytes_total=store.stats()[1],
        max_bytes=store.max_bytes,
        max_age_days=90,
    )
    out = render.plain(render.history_blocks(reply))
    assert "HISTORY on n1" in out and "CANCELLED g1" in out and f"waitgraph explain {decision.decision_id}" in out
    view = retired_explain_response(m.state, store.decisions(decision_id="d1")).decisions[0]
    shown = render.plain(render.explain_blocks(view, None, []))
    assert "DECISION d1 (RETIRED)" in shown and "history store" in shown


def test_catching_up_by_log_writes_the_same_history_and_by_snapshot_the_same_digest(tmp_path: Path) -> None:
    """Three node machines: one applies everything; one restores a snapshot from before the
    retirement pass and applies the rest of the log (a node that was down, caught up by the log);
    one restores a snapshot from after the pass (caught up by a snapshot). All three have the same
    digest; the first two have the same history records, the third none of that pass (documented:
    a snapshot carries no history)."""
    stores = [HistoryStore(tmp_path / f"n{i}.sqlite3") for i in range(3)]
    first = _machine_with_history(stores[0])
    _decided_and_settled(first)
    before = first.snapshot()
    _retire(first, 100_000)
    after = first.snapshot()

    by_log = _machine_with_history(stores[1])
    by_log.restore(before)
    _retire(by_log, 100_000)
    by_snapshot = _machine_with_history(stores[2])
    by_snapshot.restore(after)
    assert first.digest() == by_log.digest() == by_snapshot.digest()

    def rows(store: HistoryStore) -> list[tuple[str, str, int, str]]:
        return sorted((r.kind, r.key, r.retired_at_ms, r.body) for r in store.find(limit=1000))

    assert rows(stores[0]) and rows(stores[1]) == rows(stores[0])
    assert rows(stores[2]) == []
