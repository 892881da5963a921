"""REASSIGN on a real 3-node cluster (issue #21): the first seed's supervisor/subtask approval cycle.

Without an independent approver the victim path decides, as before; with one configured for the
run (``waitgraph approver human:alice --run RUN``, admin) the leader's recovery commits a REASSIGN:
epoch first, the approval's PROVIDED_BY moves to the approver, the subtask's wait is re-registered
at version 2, nobody is cancelled. ``decisions`` and ``explain`` show it with the remedies in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.world import World
from waitgraph.dev.localcluster import LocalCluster
from waitgraph.ops import liveview
from waitgraph.proto.v1 import operator_pb2
from waitgraph.sdk.views import decision_from_view
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.codec import effect_from_plain, effect_to_plain
from waitgraph.statemachine.detect import full_pass
from waitgraph.statemachine.recovery_state import DecisionKind, Reassignment
from waitgraph.statemachine.retire import decision_from_retired, decision_retired
from waitgraph.wire import convert

from .test_cli import LEASE_MS, leader_and_followers, ok_json, send_steps, until, wg


def submit(cluster: LocalCluster, endpoint: str, steps: list[tuple[str, Any]]) -> None:
    assert cluster.credentials is not None
    send_steps(endpoint, cluster.credentials.agents, steps)


def delegation(tag: str) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(the run and its approval, the two waits that close the cycle): supervisor S (agent a)
    provides approval:ok-TAG and waits for its subtask T (agent b), which waits for the approval."""
    S, T, ok = f"exec:S-{tag}", f"exec:T-{tag}", f"approval:ok-{tag}"
    run = f"run-{tag}"
    setup: list[tuple[str, Any]] = [
        ("a", C.JoinSession(agent_id="a", lease_ms=LEASE_MS)),
        ("b", C.JoinSession(agent_id="b", lease_ms=LEASE_MS)),
        ("a", C.CreateExecution(execution_id=S, run_id=run, observed_cancel_generation=0)),
        ("a", C.StartExecution(execution_id=S, generation=1, observed_cancel_generation=0)),
        ("a", C.CreateExecution(execution_id=T, run_id=run, parent_id=S, agent_id="b", observed_cancel_generation=0)),
        ("b", C.StartExecution(execution_id=T, generation=1, observed_cancel_generation=0)),
        ("a", C.CreateTarget(target_id=ok)),
        ("a", C.DeclareSatisfier(target_id=ok, target_generation=1, satisfier_id=S, satisfier_generation=1)),
    ]
    waits: list[tuple[str, Any]] = [
        ("a", C.RegisterWait(waiter_id=S, waiter_generation=1, target_id=T, target_generation=1, reason="subtasks")),
        ("b", C.RegisterWait(waiter_id=T, waiter_generation=1, target_id=ok, target_generation=1, reason="confirm")),
    ]
    return setup, waits


def decision_of(cluster: LocalCluster, member: str) -> Any:
    found = [
        d for d in ok_json(cluster, "decisions")["decisions"] if any(r["execution_id"] == member for r in d["roles"])
    ]
    return found[0] if found else None


@pytest.mark.timeout(150)
def test_an_approval_trapped_in_a_cycle_is_reassigned_only_when_an_approver_is_configured(
    local_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = local_cluster(
        "reassign", mode="auto", serve_args=["--detect-interval-ms", "50", "--recovery-confirmation-window-ms", "200"]
    )
    leader, _ = leader_and_followers(cluster)
    assert ok_json(cluster, "approver")["approver"] is None

    # 1. No approver: today's victim path, and the decision says why reassigning did not apply.
    setup, waits = delegation("victim")
    submit(cluster, leader, setup + waits)
    victim = until(lambda: decision_of(cluster, "exec:T-victim"), 40, "the victim decision")
    assert victim["kind"] == "VICTIM" and victim["epoch"] == 1, victim
    explained = wg(cluster, "explain", victim["decision_id"])
    assert explained.returncode == 0, explained.stderr
    assert "reassign not_applicable (no_independent_approver); victim applied (policy_v1)" in explained.stdout

    # 2. An approver for the run: bad ones are refused with a clear code and change nothing.
    setup, waits = delegation("approver")
    submit(cluster, leader, setup)
    refused = wg(cluster, "approver", "exec:T-approver", "--run", "run-approver")
    assert refused.returncode != 0 and "approver_in_run" in refused.stderr, refused.stderr
    refused = wg(cluster, "approver", "agent:a", "--run", "run-approver")
    assert refused.returncode != 0 and "wrong_id_kind" in refused.stderr, refused.stderr
    assert ok_json(cluster, "approver", "human:alice", "--run", "run-approver")["result"] == "APPLIED"
    submit(cluster, leader, waits)
    moved = until(lambda: decision_of(cluster, "exec:T-approver"), 40, "the REASSIGN decision")
    assert moved["kind"] == "REASSIGN" and moved["epoch"] == 2 and moved["winner_id"] is None, moved
    assert sorted((r["execution_id"], r["role"]) for r in moved["roles"]) == [
        ("exec:S-approver", "kept"),
        ("exec:T-approver", "kept"),
    ]
    assert [r["remedy"] for r in moved["remedies"]] == ["prevent", "reorder", "reassign", "victim"]
    assert moved["reassigned"] == [
        {
            "approval_id": "approval:ok-approver",
            "from_id": "exec:S-approver",
            "from_generation": 1,
            "to_id": "human:alice",
            "to_generation": 0,
        }
    ]

    (only,) = ok_json(cluster, "decisions", "--kind", "reassign")["decisions"]
    assert only["decision_id"] == moved["decision_id"]
    graph = ok_json(cluster, "graph", "--run", "run-approver")
    assert sorted((e["execution_id"], e["status"], e["generation"]) for e in graph["executions"]) == [
        ("exec:S-approver", "WAITING", 1),
        ("exec:T-approver", "WAITING", 1),
    ]
    (approval,) = [t for t in graph["targets"] if t["target_id"] == "approval:ok-approver"]
    assert approval["satisfier_id"] == "human:alice", approval
    (wait,) = [w for w in graph["waits"] if w["target_id"] == "approval:ok-approver"]
    assert wait["edge_version"] == 2, wait
    assert not [c for c in ok_json(cluster, "cycles")["cycles"] if "exec:T-approver" in str(c)]

    explained = wg(cluster, "explain", moved["decision_id"])
    assert explained.returncode == 0, explained.stderr
    text = " ".join(explained.stdout.split())
    assert "approval:ok-approver from exec:S-approver@g1 to human:alice" in text
    assert "Nobody was cancelled or released." in text
    assert "reassign applied (1_approval_to_independent_approver); victim not_needed" in text

    # The other forms docs/recovery.md shows: cluster-wide, printed, cleared.
    assert ok_json(cluster, "approver", "human:bob")["result"] == "APPLIED"
    assert ok_json(cluster, "approver")["approver"] == "human:bob"
    assert ok_json(cluster, "approver", "--clear")["result"] == "APPLIED"
    assert ok_json(cluster, "approver", "--clear", "--run", "run-approver")["result"] == "APPLIED"
    assert ok_json(cluster, "approver")["approver"] is None


def test_a_reassign_decision_reaches_the_history_store_the_wire_the_sdk_and_the_live_view() -> None:
    """No cluster: the record's every path, from a REASSIGN decided on the core."""
    w = World()
    setup, waits = delegation("h")
    for agent, cmd in [*setup, *waits]:
        w.ok(f"agent:{agent}", cmd)
    w.configure(max_rollback=2)
    w.ok("operator:op", C.SetApprover(approver_id="human:alice", run_id="run-h"))
    assert len(full_pass(w.st)) == 1
    assert all(o.ok for o in w.recover())
    (d,) = w.st.recovery.decisions.values()
    assert d.kind is DecisionKind.REASSIGN
    moved = Reassignment("approval:ok-h", "exec:S-h", 1, "human:alice", 0)
    assert d.reassigned == [moved] and [r for r, _, _ in d.remedies] == ["prevent", "reorder", "reassign", "victim"]

    # the history store keeps the retirement effect as canonical JSON and rebuilds the decision
    plain = effect_to_plain(decision_retired(d, 99))
    assert decision_from_retired(effect_from_plain(plain)) == d  # type: ignore[arg-type]
    older = {k: v for k, v in plain.items() if not k.startswith(("remedy_", "reassigned_"))}
    before = decision_from_retired(effect_from_plain(older))  # type: ignore[arg-type]
    assert before.remedies == [] and before.reassigned == []  # a record stored before this release

    # the wire (ExplainDecision / ListDecisions), the SDK's Decision, the live view's JSON
    view = operator_pb2.DecisionView.FromString(convert.decision_view(d).SerializeToString())
    assert convert.enum_member(DecisionKind, view.kind) is DecisionKind.REASSIGN
    sdk = decision_from_view(view)
    assert sdk.reassigned == (("approval:ok-h", "exec:S-h", 1, "human:alice", 0),)
    assert sdk.remedies == tuple(d.remedies)
    doc = liveview.decision_json(view)
    assert doc["kind"] == "REASSIGN" and doc["victims"] == [] and doc["acted"] is True
    assert [r["remedy"] for r in doc["remedies"]] == ["prevent", "reorder", "reassign", "victim"]
    assert doc["remedies"][2] == {"remedy": "reassign", "outcome": "applied", "reason": d.remedies[2][2]}
    assert doc["reassigned"] == [
        {
            "approval_id": "approval:ok-h",
            "from_id": "exec:S-h",
            "from_generation": 1,
            "to_id": "human:alice",
            "to_generation": 0,
        }
    ]
