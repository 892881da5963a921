"""Retirement on a real three-node cluster (``waitgraph serve`` processes on loopback, gRPC only).

A deadlock is recovered (decision d1), both runs settle, and the leader's loop retires them with a
short retention: the decision leaves the live state, ``ExplainDecision`` answers from the history
store and says so, also on a node restarted after the retirement. A node that was down during the
retirement catches up by the log: its digest converges and its own history store holds the records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from waitgraph.proto.v1 import operator_pb2
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.statemachine.outcome import Result
from waitgraph.wire.metadata import CODE_KEY

from .grpc_harness import Agent, GrpcCluster, GrpcNode, Operator, leader_of, refused, trailer, until
from .test_grpc_cluster import build_cycle, digest_of, logs_on_failure, own_cluster  # noqa: F401

RETENTION_MS = 1500


async def explain(node: GrpcNode, decision_id: str) -> Any:
    op = Operator(node)
    try:
        reply = await op.stub.ExplainDecision(
            operator_pb2.ExplainDecisionRequest(decision_id=decision_id), metadata=op.md, timeout=10
        )
        return reply.decisions[0]
    finally:
        await op.close()


async def history(node: GrpcNode, **by: str) -> list[Any]:
    op = Operator(node)
    try:
        reply = await op.stub.History(operator_pb2.HistoryRequest(**by), metadata=op.md, timeout=10)
        return list(reply.records)
    finally:
        await op.close()


@pytest.mark.timeout(150)
async def test_a_retired_decision_is_explained_from_history_and_a_down_node_catches_up(
    tmp_path: Path,
    logs_on_failure: list[GrpcCluster],  # noqa: F811 (the fixture of test_grpc_cluster.py)
) -> None:
    cluster = own_cluster(
        tmp_path,
        logs_on_failure,
        "--initial-mode",
        "auto",
        "--recovery-confirmation-window-ms",
        "300",
        "--retention-ms",
        str(RETENTION_MS),
        "--retire-interval-ms",
        "200",
    )
    leader = await leader_of(cluster)
    a, b = Agent(leader, "a"), Agent(leader, "b")
    try:
        await build_cycle(a, b, "ret")
        live = await until(lambda: _decision(leader), 20, "the recovery decision")
        assert live.winner_id == "exec:B-ret" and not live.HasField("retired_at_ms")
        down = next(n for n in cluster.nodes if n is not leader)
        down.kill()  # down for the whole retirement
        ack = await b.do(
            C.AckCancel(execution_id="exec:B-ret", generation=1, cancel_generation=0, side_effects=EffectOutcome.NONE)
        )
        assert ack.result is Result.APPLIED, ack
        failed = await a.do(C.FailExecution(execution_id="exec:A-ret", generation=1, reason="no review"))
        assert failed.result is Result.APPLIED, failed
    finally:
        await a.close()
        await b.close()

    retired = await until(lambda: _retired(leader, live.decision_id), 30, "the decision to retire")
    assert retired.decision_id == live.decision_id and retired.winner_id == live.winner_id
    assert [s.execution_id for s in retired.scores] == [s.execution_id for s in live.scores]
    assert list(retired.waits) == list(live.waits) and list(retired.votes) == list(live.votes)

    # A command naming the retired execution is told when it retired.
    b2 = Agent(leader, "b")
    try:
        late = await refused(b2.do(C.FailExecution(execution_id="exec:B-ret", generation=1, reason="late")))
    finally:
        await b2.close()
    assert late.code() is grpc.StatusCode.NOT_FOUND and trailer(late, CODE_KEY) == "retired", late
    assert "retired at" in (late.details() or ""), late.details()

    # A node restarted after the retirement still explains the decision from its own store.
    other = next(n for n in cluster.nodes if n is not leader and n is not down)
    assert other.terminate() == 0
    other.start()
    again = await until(lambda: _retired(other, live.decision_id), 30, "explain on the restarted node")
    assert again.retired_at_ms == retired.retired_at_ms

    # The node that was down catches up by the log: same digest, and its own history.
    down.start()

    async def converged() -> bool:
        digests = {(await digest_of(n))[0] for n in cluster.nodes}
        return len(digests) == 1

    await until(converged, 40, "identical digests on all three nodes")
    records = await until(lambda: _records(down, "exec:B-ret"), 20, "the retired records on the caught-up node")
    by_kind = {r.kind: json.loads(r.record_json) for r in records}
    assert by_kind["ExecutionRetired"]["status"] == "CANCELLED"
    assert by_kind["DecisionRetired"]["decision_id"] == live.decision_id
    run = await history(down, run_id="run-a-ret")
    ledger = next(json.loads(r.record_json) for r in run if r.kind == "ExecutionRetired")
    assert ledger["effect_ids"] == ["email-1"] and ledger["effect_outcomes"] == ["COMMITTED"]
    late_explain = await until(lambda: _retired(down, live.decision_id), 20, "explain on the caught-up node")
    assert late_explain.retired_at_ms == retired.retired_at_ms


async def _decision(node: GrpcNode) -> Any:
    try:
        return await explain(node, "d1")
    except Exception:
        return None


async def _retired(node: GrpcNode, decision_id: str) -> Any:
    try:
        d = await explain(node, decision_id)
    except Exception:
        return None
    return d if d.HasField("retired_at_ms") else None


async def _records(node: GrpcNode, execution_id: str) -> list[Any] | None:
    try:
        records = await history(node, execution_id=execution_id)
    except Exception:
        return None
    return records if {"ExecutionRetired", "DecisionRetired"} <= {r.kind for r in records} else None
