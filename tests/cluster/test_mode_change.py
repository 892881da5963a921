"""Switching shadow -> auto acts on the deadlocks that already stand (docs/operations.md).

A real 3-node cluster in shadow mode: the first seed's cycle is confirmed and recorded as a SHADOW
decision, and nothing is cancelled. Then ``waitgraph mode auto``: the leader's loop proposes the
standing cycle again (same digest, new proposal), the nodes vote, and it commits as a VICTIM
decision under a new epoch, without anyone re-registering a wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from waitgraph.dev.localcluster import LocalCluster

from .test_cli import build_cycle, leader_and_followers, ok_json, until


@pytest.fixture
def cluster(local_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return local_cluster("shadow")


@pytest.mark.timeout(120)
def test_mode_auto_acts_on_a_cycle_confirmed_in_shadow(cluster: LocalCluster) -> None:
    leader, _ = leader_and_followers(cluster)
    build_cycle(cluster, leader, "mode")

    def decided(kind: str) -> Any:
        found = [d for d in ok_json(cluster, "decisions")["decisions"] if d["kind"] == kind]
        return found or None

    (shadow,) = until(lambda: decided("SHADOW"), 30, "the shadow decision")
    assert shadow["winner_id"] == "exec:B-mode" and shadow["epoch"] is None
    graph = ok_json(cluster, "graph", "--run", "run-b-mode")
    assert [e["status"] for e in graph["executions"]] == ["WAITING"]  # shadow cancels nothing

    assert ok_json(cluster, "mode", "auto")["result"] == "APPLIED"
    (victim,) = until(lambda: decided("VICTIM"), 30, "the standing cycle decided under auto")
    assert victim["digest"] == shadow["digest"] and victim["winner_id"] == "exec:B-mode"
    assert victim["epoch"] == 1 and victim["mode"] == "auto"
    assert ok_json(cluster, "mode")["mode"] == "auto"
    status = until(
        lambda: [e["status"] for e in ok_json(cluster, "graph", "--run", "run-b-mode")["executions"]] != ["WAITING"],
        20,
        "the victim rolled back",
    )
    assert status
