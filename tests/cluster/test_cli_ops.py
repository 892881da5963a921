"""Explanations and operator flows against three real ``waitgraph serve`` processes.

``explain`` narrates the cycle path (each wait's reason and age), the votes with their times,
every candidate's scores, the epoch committed (from -> to), what was released and the victim's
cancellation, and the signature's history; a cycle that re-forms after its victim retried is
explained as "seen before". ``signature`` shows the livelock guard's trajectory. ``cancel --wait``
and ``freeze --wait`` show progress while agents acknowledge (plain lines when piped, a bar on a
terminal), exit 0 once converged and 3 at ``--wait-timeout``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from waitgraph.dev.localcluster import LocalCluster
from waitgraph.proto.v1 import agent_pb2_grpc
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.wire import convert

from .harness import REPO
from .test_cli import (
    BOX,
    LEASE_MS,
    assert_plain,
    build_cycle,
    ok_json,
    ok_table,
    on_terminal,
    operator_voted_cluster,
    until,
    wg,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    lc = operator_voted_cluster(tmp_path_factory.mktemp("ops"))
    try:
        lc.start()
        lc.wait_for_leader(30)
        yield lc
    finally:
        lc.close()


def agent_do(cluster: LocalCluster, agent: str, *cmds: Any) -> None:
    """Commands through the AgentService as ``agent``; each must be APPLIED."""
    assert cluster.credentials is not None
    md = (("authorization", f"Bearer {cluster.credentials.agents[agent]}"),)
    with grpc.insecure_channel(cluster.endpoints[0]) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        for cmd in cmds:
            request = convert.request_from_command(cmd, uuid.uuid4().hex)
            out = convert.outcome_from_proto(getattr(stub, cmd.KIND)(request, metadata=md, timeout=10))
            assert out.ok, (cmd, out)


def decide(cluster: LocalCluster, digest_prefix: str | None = None) -> dict[str, Any]:
    """The operator's vote on the one open proposal (quorum 4 needs it), then its decision."""

    def open_digest() -> Any:
        props = [p for p in ok_json(cluster, "cycles")["proposals"] if p["status"] == "OPEN"]
        if digest_prefix is not None:
            props = [p for p in props if p["digest"].startswith(digest_prefix)]
        return props[0]["digest"] if props and len(props[0]["approvals"]) == 3 else None

    digest = until(open_digest, 30, "an open proposal with the three nodes' votes")
    assert ok_json(cluster, "vote", digest[:12])["result"] == "APPLIED"

    def decided() -> Any:
        got = wg(cluster, "explain", digest[:16], "-o", "json")
        return json.loads(got.stdout) if got.returncode == 0 else None

    doc = until(decided, 30, "the decision")
    (d,) = doc["decisions"]
    return d


@pytest.mark.timeout(120)
def test_explain_narrates_path_votes_epochs_releases_and_history(cluster: LocalCluster) -> None:
    build_cycle(cluster, cluster.endpoints[0], "x")
    d = decide(cluster)
    A, B = "exec:A-x", "exec:B-x"
    assert d["kind"] == "VICTIM" and d["winner_id"] == B
    assert d["epoch"] == d["epoch_before"] + 1
    # the cycle path: both waits with their reasons, ages and satisfiers, as they stood
    waits = {w["waiter_id"]: w for w in d["waits"]}
    assert waits[A]["reason"] == "review" and waits[A]["satisfiers"] == [B]
    assert waits[B]["reason"] == "browser" and waits[B]["satisfiers"] == [A]
    assert all(0 < d["at_ms"] - w["registered_at_ms"] < 60_000 for w in d["waits"])
    assert [(p["waiter_id"], p["relation"], p["satisfier_id"]) for p in d["cycle_path"]] == [
        (A, "produced by", B),
        (B, "held by", A),
    ]
    # votes: who and when; the operator's came last, after the three nodes'
    votes = d["votes"]
    assert sorted(v["voter"] for v in votes) == ["node:n1", "node:n2", "node:n3", "operator:admin"]
    assert votes[-1]["voter"] == "operator:admin" and all(v["approve"] for v in votes)
    assert all(d["proposed_at_ms"] <= v["at_ms"] <= d["at_ms"] for v in votes)
    assert d["proposer"].startswith("node:")
    # the victim's cancellation, as it stands (B has not acknowledged yet)
    (cancel,) = d["cancellations"]
    assert cancel["scope_id"] == f"{B}@1" and cancel["pending"] == 1 and cancel["stable_at_ms"] is None
    t = d["trajectory"]
    assert t["known"] and t["observed_total"] == 1 and t["recovered_total"] == 1 and t["guard"] == ""
    assert [s["decision_id"] for s in t["decisions"]] == [d["decision_id"]]
    assert t["recoveries"] == [{"epoch": d["epoch"], "at_ms": d["at_ms"]}]

    text = ok_table(cluster, "explain", d["decision_id"])
    assert f"epoch:      {d['epoch_before']} -> {d['epoch']} (committed by this decision" in text
    assert "THE CYCLE" in text and "VOTES (4 approve, 0 reject; quorum 4)" in text
    assert (
        f"path: {A} -> waits for artifact:review-x (review), produced by -> {B} -> waits for "
        f"resource:browser-x (browser), held by -> {A}"
    ) in text
    assert "has not converged: 1 execution(s) still asked to stop" in text
    assert "was not seen before this decision" in text and "Livelock guard: clear" in text
    assert "Next: the rollback is still converging" in text

    # B acknowledges, retries and re-forms the same cycle: a second decision, same signature
    agent_do(
        cluster,
        "b",
        C.AckCancel(execution_id=B, generation=1, cancel_generation=0, side_effects=EffectOutcome.NONE),
        C.RetryExecution(execution_id=B, generation=1),
        C.StartExecution(execution_id=B, generation=2, observed_cancel_generation=0),
        C.DeclareSatisfier(target_id="artifact:review-x", target_generation=1, satisfier_id=B, satisfier_generation=2),
        C.RegisterWait(
            waiter_id=B, waiter_generation=2, target_id="resource:browser-x", target_generation=1, reason="browser"
        ),
    )
    first = ok_json(cluster, "explain", d["decision_id"])["decisions"][0]
    (cancel,) = first["cancellations"]
    assert cancel["stable_at_ms"] is not None and cancel["pending"] == 0
    text = ok_table(cluster, "explain", d["decision_id"])
    assert f"Cancellation {B}@1 (requested " in text and "converged: CANCELLED_STABLE at" in text

    d2 = decide(cluster)
    assert d2["signature"] == d["signature"] and d2["decision_id"] != d["decision_id"]
    assert d2["epoch_before"] == d["epoch"]
    t2 = d2["trajectory"]
    assert t2["observed_total"] == 2 and t2["recovered_total"] == 2
    assert [s["decision_id"] for s in t2["decisions"]] == [d["decision_id"], d2["decision_id"]]
    text = ok_table(cluster, "explain", d2["decision_id"])
    assert f"was seen before: 1 earlier decision(s): {d['decision_id']} at " in text
    assert f"(VICTIM, policy_v1, epoch {d['epoch_before']} -> {d['epoch']}, {B})" in text
    assert "proposed 2 time(s) and rolled back 2 time(s)" in text

    # the trajectory on its own
    sig = ok_json(cluster, "signature", d["signature"])
    assert sig["trajectory"]["signature"] == d["signature"] and sig["trajectory"]["recovered_total"] == 2
    assert [e["epoch"] for e in sig["trajectory"]["recoveries"]] == [d["epoch"], d2["epoch"]]
    table = ok_table(cluster, "signature", d["signature"])
    assert f"SIGNATURE {d['signature']}" in table and "DECISIONS (2)" in table and "LIVELOCK" not in table
    bad = wg(cluster, "signature", "not-a-signature")
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr and "16 hex digits" in bad.stderr
    unknown = wg(cluster, "signature", "0" * 16)  # said, and exit 1 like `explain d99` (docs/cli.md)
    assert unknown.returncode == 1 and "is not on this replica" in unknown.stdout
    prefix = ok_json(cluster, "signature", d["signature"][:6])  # a unique prefix, as `vote` takes
    assert prefix["trajectory"]["signature"] == d["signature"]


def run_with_children(cluster: LocalCluster, run_id: str, children: int) -> list[str]:
    """A root execution of agent a and ``children`` delegated children, all RUNNING."""
    root = f"exec:{run_id}-root"
    cmds: list[Any] = [
        C.JoinSession(agent_id="a", lease_ms=LEASE_MS),
        C.CreateExecution(execution_id=root, run_id=run_id, observed_cancel_generation=0),
        C.StartExecution(execution_id=root, generation=1, observed_cancel_generation=0),
    ]
    kids = [f"exec:{run_id}-c{i}" for i in range(children)]
    for kid in kids:
        cmds += [
            C.CreateExecution(execution_id=kid, run_id=run_id, parent_id=root, observed_cancel_generation=0),
            C.StartExecution(execution_id=kid, generation=1, observed_cancel_generation=0),
        ]
    agent_do(cluster, "a", *cmds)
    return [root, *kids]


def ack(cluster: LocalCluster, execution_id: str, cancel_generation: int = 1) -> None:
    agent_do(
        cluster,
        "a",
        C.AckCancel(
            execution_id=execution_id,
            generation=1,
            cancel_generation=cancel_generation,
            side_effects=EffectOutcome.NONE,
        ),
    )


def spawn_wg(cluster: LocalCluster, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
    env.update(cluster.env(), PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-m", "waitgraph", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.timeout(120)
def test_cancel_wait_prints_progress_lines_until_cancelled_stable(cluster: LocalCluster) -> None:
    execs = run_with_children(cluster, "run-w", 2)
    proc = spawn_wg(cluster, "cancel", "run-w", "--wait", "--reason", "ops test")
    lines: list[str] = []
    first_progress = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("cancel run:run-w gen 1: "):  # not a lagging replica's first look
                first_progress.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert first_progress.wait(30), lines
        for eid in execs:  # the workers stop one by one
            ack(cluster, eid)
        assert proc.wait(60) == 0, (lines, proc.stderr.read() if proc.stderr else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    reader.join(10)
    text = "\n".join(lines)
    assert_plain(text)
    assert lines[0].startswith("APPLIED") and "CancelGenerationRaised" in text
    progress = [line for line in lines if line.startswith("cancel run:run-w gen 1: ")]
    assert progress[0] == "cancel run:run-w gen 1: 0/3 settled, 3 CANCEL_REQUESTED", progress
    assert progress[-1] == "cancel run:run-w gen 1: 3/3 settled; CANCELLED_STABLE"
    settled = [int(line.split(": ")[1].split("/")[0]) for line in progress]
    assert settled == sorted(settled) and len(set(progress)) == len(progress)  # one line per change


@pytest.mark.timeout(120)
def test_cancel_wait_times_out_with_exit_3_and_says_what_is_pending(cluster: LocalCluster) -> None:
    (root,) = run_with_children(cluster, "run-t", 0)
    out = wg(cluster, "cancel", "run-t", "--wait", "--wait-timeout", "2")
    assert out.returncode == 3, out.stderr
    assert_plain(out.stdout)
    assert "cancel run:run-t gen 1: 0/1 settled, 1 CANCEL_REQUESTED" in out.stdout
    (line,) = out.stderr.splitlines()
    assert line.startswith("waitgraph cancel: not converged after 2s (--wait-timeout): cancel run:run-t gen 1: 0/1")
    assert "`waitgraph export` lists who has not acknowledged" in line

    # freeze --wait on that run: its cancellation is still open, so it does not quiesce
    out = wg(cluster, "freeze", "--run", "run-t", "--reason", "rollback drill", "--wait", "--wait-timeout", "2")
    assert out.returncode == 3
    assert "freeze run:run-t: admission frozen; 1 cancellation(s) open, 1 execution(s) not acknowledged" in out.stdout
    ack(cluster, root)
    out = wg(cluster, "freeze", "--run", "run-t", "--reason", "rollback drill 2", "--wait")
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith("freeze run:run-t: admission frozen; no cancellation open: quiesced")
    # a repeated cancel is a recorded no-op that waits for the generation the run is at
    out = wg(cluster, "cancel", "run-t", "--wait", "--observed-generation", "0")
    assert out.returncode == 0 and out.stdout.startswith("NOOP")
    assert "cancel run:run-t gen 1: 1/1 settled; CANCELLED_STABLE" in out.stdout
    assert ok_json(cluster, "unfreeze", "--run", "run-t")["result"] == "APPLIED"


@pytest.mark.timeout(120)
def test_cancel_wait_json_is_one_document_and_progress_goes_to_stderr(cluster: LocalCluster) -> None:
    (root,) = run_with_children(cluster, "run-j", 0)
    agent_do(cluster, "a", C.CompleteExecution(execution_id=root, generation=1, observed_cancel_generation=0))
    out = wg(cluster, "cancel", "run-j", "--wait", "-o", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["result"] == "APPLIED" and doc["wait"]["converged"] is True
    progress = doc["wait"]["progress"]
    assert progress["run_id"] == "run-j" and progress["cancel_state"] == "CANCELLED_STABLE"
    assert (progress["executions"], progress["settled"], progress["cancel_generation"]) == (1, 1, 1)
    assert "cancel run:run-j gen 1: 1/1 settled; CANCELLED_STABLE" in out.stderr


@pytest.mark.timeout(120)
def test_cancel_wait_on_a_terminal_draws_a_progress_bar(cluster: LocalCluster) -> None:
    (root,) = run_with_children(cluster, "run-p", 0)
    agent_do(cluster, "a", C.CompleteExecution(execution_id=root, generation=1, observed_cancel_generation=0))
    code, text = on_terminal(cluster, ["cancel", "run-p", "--wait"])
    assert code == 0
    assert "\x1b[" in text and BOX & set(text)  # the outcome's table box and colour
    assert "━" in text and "1/1" in text and "CANCELLED_STABLE" in text  # the bar, done/total
