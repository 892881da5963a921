"""REORDER on a real 3-node cluster (issue #21): PostgreSQL's soft deadlock, translated to pools.

h1 and h2 fill pool:a1 and pool:a2 (one slot each) and keep running; d1 holds resource:x1 and
d2 resource:x2. e1 queues on pool:a1 and then d2; e2 on pool:a2 and then d1; e1 waits for x1
(d1's) and e2 for x2 (d2's). Nothing is deadlocked yet, but the queues' order would make it one
at the first hand-off: d2 -> e1 (soft: behind it) -> d1 (hard: holds x1) -> e2 (soft) -> d2 (hard).
The leader's loop proposes the soft cycle by itself (``recovery.soft_proposals``), the voters
approve it (``recovery.stands``), and after the confirmation window a REORDER decision commits:
epoch first, one queue reversed, nobody cancelled. Then releasing the pools hands each slot to
the waiter the new order put first, and no cycle forms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from waitgraph.dev.localcluster import LocalCluster
from waitgraph.statemachine import commands as C

from .test_cli import LEASE_MS, leader_and_followers, ok_json, until
from .test_reassign import decision_of, submit

OWNER = {"h1": "a", "h2": "a", "d1": "b", "d2": "b", "e1": "c", "e2": "c"}


def soft_shape() -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(executions, targets and holdings; the queued waits that make the soft cycle)."""
    setup: list[tuple[str, Any]] = [(a, C.JoinSession(agent_id=a, lease_ms=LEASE_MS)) for a in ("a", "b", "c")]
    for name, agent in OWNER.items():
        eid = f"exec:{name}"
        setup.append((agent, C.CreateExecution(execution_id=eid, run_id=f"run-{name}", observed_cancel_generation=0)))
        setup.append((agent, C.StartExecution(execution_id=eid, generation=1, observed_cancel_generation=0)))
    setup += [
        ("a", C.CreateTarget(target_id="pool:a1", slots=1)),
        ("a", C.CreateTarget(target_id="pool:a2", slots=1)),
        ("a", C.CreateTarget(target_id="resource:x1")),
        ("a", C.CreateTarget(target_id="resource:x2")),
    ]
    for name, tid in (("h1", "pool:a1"), ("h2", "pool:a2"), ("d1", "resource:x1"), ("d2", "resource:x2")):
        setup.append(
            (OWNER[name], C.Acquire(target_id=tid, execution_id=f"exec:{name}", generation=1, observed_epoch=0))
        )

    def wait(name: str, tid: str, generation: int) -> tuple[str, Any]:
        cmd = C.RegisterWait(
            waiter_id=f"exec:{name}", waiter_generation=1, target_id=tid, target_generation=generation, reason="queued"
        )
        return OWNER[name], cmd

    waits = [
        wait("e1", "pool:a1", 0),
        wait("d2", "pool:a1", 0),
        wait("e2", "pool:a2", 0),
        wait("d1", "pool:a2", 0),
        wait("e1", "resource:x1", 1),
        wait("e2", "resource:x2", 1),
    ]
    return setup, waits


@pytest.mark.timeout(150)
def test_the_leader_reorders_a_soft_cycle_by_itself_and_cancels_nobody(
    local_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = local_cluster(
        "reorder", mode="auto", serve_args=["--detect-interval-ms", "50", "--recovery-confirmation-window-ms", "200"]
    )
    leader, _ = leader_and_followers(cluster)
    setup, waits = soft_shape()
    submit(cluster, leader, setup + waits)
    d = until(lambda: decision_of(cluster, "exec:d1"), 40, "the REORDER decision")
    assert d["kind"] == "REORDER" and d["epoch"] == 1 and d["winner_id"] is None, d
    assert [(r["remedy"], r["outcome"]) for r in d["remedies"]][:2] == [
        ("prevent", "not_applicable"),
        ("reorder", "applied"),
    ], d["remedies"]
    assert all(r["role"] in ("kept", "reordered") for r in d["roles"]), d["roles"]
    graph = ok_json(cluster, "graph")
    statuses = {e["execution_id"]: e["status"] for e in graph["executions"]}
    assert statuses == {f"exec:{n}": ("RUNNING" if n in ("h1", "h2") else "WAITING") for n in OWNER}, statuses
    # the pools are let go: each slot goes, in the same apply, to the waiter the new order put
    # first, and no cycle forms (nobody waits on a slot its holder's waiter holds)
    submit(
        cluster,
        leader,
        [
            ("a", C.Release(target_id="pool:a1", execution_id="exec:h1", generation=1)),
            ("a", C.Release(target_id="pool:a2", execution_id="exec:h2", generation=1)),
        ],
    )
    targets = until(
        lambda: (
            {t["target_id"]: t for t in ok_json(cluster, "graph")["targets"] if t["target_id"].startswith("pool:")}
            or None
        ),
        20,
        "the pools",
    )
    holders = {tid: sorted(h["execution_id"] for h in t["holders"]) for tid, t in targets.items()}
    assert holders["pool:a2"] == ["exec:d1"], holders  # d1 now ahead of e2
    assert not ok_json(cluster, "cycles")["cycles"]
    assert len(ok_json(cluster, "decisions")["decisions"]) == 1  # and no victim after it
