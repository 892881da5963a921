"""The operator CLI against three real ``waitgraph serve`` processes with a real deadlock.

One cluster for the module (cluster/dev/localcluster.py, killed at the end whatever happened). Its
recovery voters are the three nodes *and* ``operator:admin`` with quorum 4, so the deadlock's
recovery proposal stays open until the operator votes: ``cycles`` sees it, ``vote`` completes it,
``explain`` narrates the decision. Every verb runs as its own ``python -m waitgraph`` process
with stdout piped, in ``-o json`` and in table form; piped tables must carry no escape codes and no
box characters.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from waitgraph.dev.localcluster import LocalCluster
from waitgraph.proto.v1 import agent_pb2_grpc
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.wire import convert

from .harness import REPO

LEASE_MS = 600_000
BOX = set("│─╭╮╰╯┃━┏┓┗┛┼├┤┬┴")


# -- helpers ---------------------------------------------------------------------------------------------


def wg(cluster: LocalCluster, *args: str, token: str | None = None, endpoints: str | None = None) -> Any:
    """``waitgraph ARGS`` as a process with stdout piped (not a terminal)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
    env.update(cluster.env())
    if token is not None:
        env["WAITGRAPH_TOKEN"] = token
    if endpoints is not None:
        env["WAITGRAPH_ENDPOINTS"] = endpoints
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "waitgraph", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def ok_json(cluster: LocalCluster, *args: str, **kw: Any) -> Any:
    out = wg(cluster, *args, "-o", "json", **kw)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def ok_table(cluster: LocalCluster, *args: str, **kw: Any) -> str:
    out = wg(cluster, *args, **kw)
    assert out.returncode == 0, out.stderr
    assert_plain(out.stdout)
    return str(out.stdout)


def on_terminal(cluster: LocalCluster, args: list[str], columns: int = 160) -> tuple[int, str]:
    """``waitgraph ARGS`` with stdout and stderr on a pseudo-terminal: (exit code, what it printed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_") and k != "NO_COLOR"}
    env.update(cluster.env(), PYTHONPATH=str(REPO), TERM="xterm-256color", COLUMNS=str(columns))
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "waitgraph", *args], cwd=REPO, env=env, stdout=child, stderr=child)
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO once the child has closed its side
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    return proc.wait(30), b"".join(chunks).decode()


def assert_plain(text: str) -> None:
    assert "\x1b" not in text, "escape codes in piped output"
    assert not BOX & set(text), "box characters in piped output"


def until(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def build_cycle(cluster: LocalCluster, endpoint: str, tag: str) -> None:
    """The first seed's cycle through the AgentService: A holds the browser and waits for B's
    review; B produces the review and waits for the browser. A sent an email (a committed side
    effect) and B has a checkpoint, so the policy's victim is B."""
    assert cluster.credentials is not None
    tokens = cluster.credentials.agents
    A, B = f"exec:A-{tag}", f"exec:B-{tag}"
    browser, review = f"resource:browser-{tag}", f"artifact:review-{tag}"
    steps: list[tuple[str, Any]] = [
        ("a", C.JoinSession(agent_id="a", lease_ms=LEASE_MS)),
        ("b", C.JoinSession(agent_id="b", lease_ms=LEASE_MS)),
        ("a", C.CreateExecution(execution_id=A, run_id=f"run-a-{tag}", observed_cancel_generation=0)),
        ("a", C.StartExecution(execution_id=A, generation=1, observed_cancel_generation=0)),
        ("b", C.CreateExecution(execution_id=B, run_id=f"run-b-{tag}", checkpoint=True, observed_cancel_generation=0)),
        ("b", C.StartExecution(execution_id=B, generation=1, observed_cancel_generation=0)),
        ("a", C.CreateTarget(target_id=browser)),
        ("a", C.CreateTarget(target_id=review)),
        ("a", C.Acquire(target_id=browser, execution_id=A, generation=1, observed_epoch=0)),
        ("b", C.DeclareSatisfier(target_id=review, target_generation=1, satisfier_id=B, satisfier_generation=1)),
        ("a", C.RecordSideEffect(execution_id=A, generation=1, effect_id="email-1", outcome=EffectOutcome.COMMITTED)),
        ("a", C.RegisterWait(waiter_id=A, waiter_generation=1, target_id=review, target_generation=1, reason="review")),
        (
            "b",
            C.RegisterWait(waiter_id=B, waiter_generation=1, target_id=browser, target_generation=1, reason="browser"),
        ),
    ]
    send_steps(endpoint, tokens, steps)


def send_steps(endpoint: str, tokens: dict[str, str], steps: list[tuple[str, Any]], retry_s: float = 20.0) -> None:
    """Each (agent, command) through the AgentService at ``endpoint``, as a client would send it:
    a write the node could not place (UNAVAILABLE: no leader during an election) is sent again
    under the same request id, so it is applied once whatever happened to the first attempt."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        for agent, cmd in steps:
            request = convert.request_from_command(cmd, uuid.uuid4().hex)
            md = (("authorization", f"Bearer {tokens[agent]}"),)
            deadline = time.monotonic() + retry_s
            while True:
                try:
                    reply = getattr(stub, cmd.KIND)(request, metadata=md, timeout=10)
                    break
                except grpc.RpcError as exc:
                    if exc.code() is not grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            out = convert.outcome_from_proto(reply)
            assert out.ok, (cmd, out)


# -- the shared cluster ---------------------------------------------------------------------------------


def operator_voted_cluster(root: Path) -> LocalCluster:
    """Three nodes whose recoveries need the operator's vote too (quorum 4 of nodes + operator:admin)."""
    voters = "node:n1,node:n2,node:n3,operator:admin"
    return LocalCluster(
        root=root,
        nodes=3,
        mode="auto",
        serve_args=[
            "--detect-interval-ms",
            "50",
            "--recovery-voters",
            voters,
            "--recovery-quorum",
            "4",
            "--recovery-max-rollback",
            "1",
            "--recovery-confirmation-window-ms",
            "200",
        ],
    )


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = operator_voted_cluster(tmp_path_factory.mktemp("cli"))
    try:
        cluster.start()
        cluster.wait_for_leader(30)
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def cluster(shared: LocalCluster, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    yield shared
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for m in shared.members:
            print(f"===== {m.node_id}\n{m.log_tail(4000)}")


def leader_and_followers(cluster: LocalCluster, timeout_s: float = 20.0) -> tuple[str, list[str]]:
    """The leader's and the followers' addresses, once the nodes report one leader (an election
    may be under way: a loaded machine's pause can cost the leader its term)."""

    def one() -> list[dict[str, Any]] | None:
        nodes: list[dict[str, Any]] = ok_json(cluster, "status")["nodes"]
        return nodes if sum(n["role"] == "leader" for n in nodes) == 1 else None

    nodes = until(one, timeout_s, "one leader")
    leader = next(n["grpc_address"] for n in nodes if n["role"] == "leader")
    return leader, [n["grpc_address"] for n in nodes if n["role"] != "leader"]


# -- tests --------------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_status_and_health(cluster: LocalCluster) -> None:
    doc = ok_json(cluster, "status", "--digest")
    nodes = doc["nodes"]
    assert sorted(n["node_id"] for n in nodes) == ["n1", "n2", "n3"]
    assert all(n["reachable"] and n["error"] is None for n in nodes)
    assert [n["role"] for n in nodes].count("leader") == 1
    assert len({n["leader_id"] for n in nodes}) == 1
    assert all(n["mode"] == "auto" and n["quorum"] == 4 and "operator:admin" in n["voters"] for n in nodes)
    assert all(isinstance(n["term"], int) and isinstance(n["applied_index"], int) for n in nodes)
    # one endpoint is enough: the others are discovered from its peer list
    first = cluster.endpoints[0]
    doc = ok_json(cluster, "status", endpoints=first)
    assert [n["discovered"] for n in doc["nodes"]] == [False, True, True]

    table = ok_table(cluster, "status")
    lines = table.splitlines()
    assert lines[0].split() == [
        "NODE",
        "ENDPOINT",
        "ROLE",
        "LEADER",
        "TERM",
        "COMMIT",
        "APPLIED",
        "EPOCH",
        "MODE",
        "ADMISSION",
        "HEALTHY",
    ]
    rows = [line.split() for line in lines[1:4]]
    assert sorted(r[0] for r in rows) == ["n1", "n2", "n3"] and all(r[-1] == "yes" for r in rows)
    assert "3 of 3 nodes reachable" in table
    assert "durable: every node flushes its journal before acknowledging" in table  # the default

    health = wg(cluster, "health")
    assert health.returncode == 0, health.stdout + health.stderr
    assert_plain(health.stdout)
    assert "healthy: leader n" in health.stdout and "committed a barrier" in health.stdout
    doc = ok_json(cluster, "health")
    assert doc["healthy"] is True and doc["members"] == 3 and doc["quorum_needed"] == 2 and doc["reachable"] == 3
    assert all(n["serving"] for n in doc["nodes"])


@pytest.mark.timeout(90)
def test_deadlock_graph_cycles_vote_explain_export(cluster: LocalCluster) -> None:
    _, followers = leader_and_followers(cluster)
    build_cycle(cluster, followers[0], "cli")  # through a follower: forwarded writes

    def open_proposal() -> Any:
        doc = ok_json(cluster, "cycles")
        cand = [c for c in doc["cycles"] if c["proposal_status"] == "OPEN"]
        return (doc, cand[0]) if cand and doc["proposals"] else None

    doc, cand = until(open_proposal, 20, "the candidate and its open proposal")
    digest = cand["digest"]
    assert [m["execution_id"] for m in cand["members"]] == ["exec:A-cli", "exec:B-cli"]
    assert {e["edge_id"] for e in cand["edges"]} == {
        "exec:A-cli>artifact:review-cli",
        "exec:B-cli>resource:browser-cli",
    }
    (proposal,) = [p for p in doc["proposals"] if p["digest"] == digest]
    assert proposal["status"] == "OPEN" and proposal["decision_id"] is None
    assert doc["stale"] is False and isinstance(doc["applied_index"], int)
    table = ok_table(cluster, "cycles")
    assert "CANDIDATE DEADLOCKS (1)" in table and digest[:12] in table and "OPEN" in table

    graph = ok_json(cluster, "graph")
    execs = {e["execution_id"]: e for e in graph["executions"]}
    assert execs["exec:A-cli"]["status"] == "WAITING" and execs["exec:B-cli"]["status"] == "WAITING"
    assert execs["exec:A-cli"]["side_effects"][0]["outcome"] == "COMMITTED"
    assert execs["exec:B-cli"]["parent_id"] is None
    targets = {t["target_id"]: t for t in graph["targets"]}
    assert targets["resource:browser-cli"]["holders"] == [{"execution_id": "exec:A-cli", "generation": 1}]
    assert targets["artifact:review-cli"]["satisfier_id"] == "exec:B-cli"
    assert {(w["waiter_id"], w["target_id"]) for w in graph["waits"]} == {
        ("exec:A-cli", "artifact:review-cli"),
        ("exec:B-cli", "resource:browser-cli"),
    }
    table = ok_table(cluster, "graph")
    assert "EXECUTIONS (2)" in table and "WAITS (2)" in table
    row = next(line for line in table.splitlines() if line.startswith("exec:B-cli "))
    assert "WAITING" in row and "yes" in row  # the CYCLE column
    dot = wg(cluster, "graph", "-o", "dot")
    assert dot.returncode == 0 and dot.stdout.startswith("digraph waitgraph {") and dot.stdout.rstrip().endswith("}")
    assert f"// candidate {digest}" in dot.stdout
    # a candidate (its proposal still open) is orange; confirmed cycles are red (tests/cluster/test_liveview.py)
    assert '"exec:A-cli" -> "artifact:review-cli" [label="waits: review", color="darkorange"' in dot.stdout
    assert '"resource:browser-cli" -> "exec:A-cli" [label="held by", style="dashed", color="darkorange"' in dot.stdout
    assert '"artifact:review-cli" -> "exec:B-cli" [label="produced by"' in dot.stdout
    # filters: the cycles alone, by status, and a size cap that counts what it left out
    only = ok_json(cluster, "graph", "--cycles")
    assert [e["execution_id"] for e in only["executions"]] == ["exec:A-cli", "exec:B-cli"]
    assert only["matched_executions"] == 2 and only["truncated"] is False
    waiting = ok_json(cluster, "graph", "--status", "waiting", "--status", "running")
    assert {e["status"] for e in waiting["executions"]} <= {"WAITING", "RUNNING"}
    assert ok_json(cluster, "graph", "--status", "completed")["executions"] == []
    assert wg(cluster, "graph", "--around", "1").returncode == 2  # --around widens --cycles
    capped = ok_table(cluster, "graph", "--limit", "1")
    assert "EXECUTIONS (1)" in capped and "1 more executions" in capped and "not shown" in capped

    # the operator's vote completes the quorum; sent to a follower, which forwards it
    out = ok_json(cluster, "vote", digest[:10], endpoints=followers[1])
    assert out["result"] == "APPLIED" and out["endpoint"] == followers[1] and out["hops"] == [followers[1]]
    (cast,) = [fx for fx in out["effects"] if fx["kind"] == "VoteRecorded"]
    assert cast["voter"] == "operator:admin" and cast["approve"] is True and cast["approvals"] == 4
    again = wg(cluster, "vote", digest)  # the proposal is being decided or decided: said clearly
    assert_plain(again.stdout)
    assert again.stdout.startswith("NOOP"), again.stdout
    refused = "not_open" in again.stdout  # decided already: too late, exit 1; else already_voted, 0
    assert again.returncode == (1 if refused else 0), (again.stdout, again.stderr)
    assert ("nothing changed: not_open" in again.stderr) is refused

    def decided() -> Any:
        got = wg(cluster, "explain", digest[:16], "-o", "json")
        return json.loads(got.stdout) if got.returncode == 0 else None

    doc = until(decided, 20, "the decision")
    (d,) = doc["decisions"]
    assert d["kind"] == "VICTIM" and d["winner_id"] == "exec:B-cli" and d["epoch"] >= 1 and d["mode"] == "auto"
    assert d["policy_order"] == ["exec:B-cli", "exec:A-cli"] and d["decided_by"] == "external side effects"
    assert d["proposal"]["digest"] == digest and "operator:admin" in d["proposal"]["approvals"]
    assert d["signature_history"] == []

    # the list of decisions: newest first, filtered by run, kind and time
    listed = ok_json(cluster, "decisions")
    ids = [x["decision_id"] for x in listed["decisions"]]
    assert d["decision_id"] in ids and listed["retained"] >= len(ids) >= 1 and listed["truncated"] is False
    (mine,) = [x for x in listed["decisions"] if x["decision_id"] == d["decision_id"]]
    assert mine["kind"] == "VICTIM" and mine["winner_id"] == "exec:B-cli" and mine["digest"] == digest
    assert d["decision_id"] in [
        x["decision_id"] for x in ok_json(cluster, "decisions", "--run", "run-b-cli")["decisions"]
    ]
    assert ok_json(cluster, "decisions", "--run", "run-nobody")["decisions"] == []
    assert d["decision_id"] in [
        x["decision_id"] for x in ok_json(cluster, "decisions", "--kind", "victim")["decisions"]
    ]
    assert d["decision_id"] not in [
        x["decision_id"] for x in ok_json(cluster, "decisions", "--kind", "shadow")["decisions"]
    ]
    assert d["decision_id"] in [x["decision_id"] for x in ok_json(cluster, "decisions", "--since", "1h")["decisions"]]
    assert ok_json(cluster, "decisions", "--since", "2999-01-01T00:00:00Z")["decisions"] == []
    assert wg(cluster, "decisions", "--since", "yesterday").returncode == 2
    table = ok_table(cluster, "decisions", "--limit", "1")
    assert table.startswith("DECISIONS (1 of ") and ids[0] in table
    assert {r["execution_id"]: r["role"] for r in d["roles"]} == {"exec:A-cli": "kept", "exec:B-cli": "victim"}
    text = ok_table(cluster, "explain", d["decision_id"])
    assert f"DECISION {d['decision_id']}" in text and "It chose exec:B-cli" in text
    assert "decided by external side effects against exec:A-cli" in text
    assert "approved by" in text and "operator:admin" in text and "was not seen before" in text

    export = ok_json(cluster, "export")
    assert export["format"] == "waitgraph-pending" and export["version"] == 1
    assert ("exec:A-cli", "artifact:review-cli") in {(e["waiter_execution"], e["target_id"]) for e in export["edges"]}
    (scope,) = [c for c in export["cancellations"] if c["root"] == "exec:B-cli"]
    assert scope["pending"][0]["execution"] == "exec:B-cli"
    assert {"target_id": "resource:browser-cli", "lease": 1, "holder": "exec:A-cli", "holder_generation": 1} in export[
        "holdings"
    ]
    table = ok_table(cluster, "export")
    assert "WAIT EDGES (" in table and "OPEN CANCELLATIONS (1)" in table and "format:" in table


@pytest.mark.timeout(60)
def test_mode_freeze_unfreeze_cancel(cluster: LocalCluster) -> None:
    leader, followers = leader_and_followers(cluster)
    build_cycle(cluster, leader, "ops")
    # mode, sent to a follower only
    out = ok_json(cluster, "mode", "shadow", "--run", "run-a-ops", "--side-effect-free", endpoints=followers[0])
    assert out["result"] == "APPLIED"
    (fx,) = out["effects"]
    assert fx == {"kind": "ModeChanged", "run_id": "run-a-ops", "mode": "shadow", "side_effect_free": True}
    table = ok_table(cluster, "mode", "inherit", "--run", "run-a-ops")
    assert table.startswith("APPLIED") and "ModeChanged" in table and "run_id=run-a-ops" in table
    assert wg(cluster, "mode", "inherit").returncode == 2  # a usage error: inherit needs --run

    out = ok_json(cluster, "freeze", "--run", "run-a-ops", "--reason", "maintenance")
    assert out["result"] == "APPLIED" and out["effects"][0] == {
        "kind": "AdmissionChanged",
        "run_id": "run-a-ops",
        "frozen": True,
        "reason": "maintenance",
    }
    out = ok_json(cluster, "freeze", "--reason", "schema rollback")
    assert out["result"] == "APPLIED"
    nodes = until(
        lambda: [n for n in ok_json(cluster, "status")["nodes"] if n["admission_frozen"] and n["frozen_runs"] == 1],
        10,
        "the freeze on a node",
    )
    assert nodes[0]["admission_frozen_reason"] == "schema rollback"
    table = ok_table(cluster, "status")
    assert "frozen" in table and "admission frozen: schema rollback" in table
    assert ok_json(cluster, "export")["admission"] == {
        "cluster_frozen": "schema rollback",
        "frozen_runs": [{"run": "run-a-ops", "reason": "maintenance"}],
    }
    table = ok_table(cluster, "unfreeze")
    assert table.startswith("APPLIED") and "AdmissionChanged" in table and "frozen=false" in table
    assert ok_json(cluster, "unfreeze", "--run", "run-a-ops")["result"] == "APPLIED"
    assert ok_json(cluster, "export")["admission"] == {"cluster_frozen": None, "frozen_runs": []}

    out = ok_json(cluster, "cancel", "run-a-ops", "--reason", "operator test")
    assert out["result"] == "APPLIED"
    kinds = {fx["kind"] for fx in out["effects"]}
    assert "CancelRequested" in kinds
    run = ok_json(cluster, "graph", "--run", "run-a-ops")["runs"][0]
    assert run["cancel_generation"] == 1 and run["cancel_state"] in ("CANCELLING", "CANCELLED_STABLE")
    table = ok_table(cluster, "cancel", "run-a-ops", "--observed-generation", "0")
    assert table.startswith("NOOP")  # someone already raised it past what we saw: a recorded no-op


@pytest.mark.timeout(60)
def test_errors_are_one_line_with_the_grpc_code(cluster: LocalCluster) -> None:
    assert cluster.credentials is not None
    out = wg(cluster, "mode", "auto", token=cluster.credentials.operator)
    assert out.returncode == 1 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("waitgraph mode: PERMISSION_DENIED: ") and "admin" in line
    out = wg(cluster, "status", token="not-a-real-token-at-all")
    assert out.returncode == 1
    (line,) = out.stderr.splitlines()
    assert "UNAUTHENTICATED: unknown token" in line
    out = wg(cluster, "explain", "d999")
    assert out.returncode == 1 and "NOT_FOUND" in out.stderr and len(out.stderr.splitlines()) == 1
    out = wg(cluster, "vote", "ffff")
    assert out.returncode == 1 and "NOT_FOUND" in out.stderr and "ffff" in out.stderr
    out = wg(cluster, "graph", endpoints="127.0.0.1:1")
    assert out.returncode == 1
    (line,) = out.stderr.splitlines()
    assert line.startswith("waitgraph graph: UNAVAILABLE: ") and "[127.0.0.1:1]" in line
    env_less = subprocess.run(
        [sys.executable, "-m", "waitgraph", "status", "--endpoints", cluster.endpoints[0]],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert env_less.returncode == 1 and "no token" in env_less.stderr
    # flags after the verb beat those before it
    out = wg(cluster, "--endpoints", "127.0.0.1:1", "status", "--endpoints", cluster.endpoints[0], "--no-discover")
    assert out.returncode == 0 and cluster.endpoints[0] in out.stdout


@pytest.mark.timeout(60)
def test_a_terminal_gets_boxes_and_colour_a_pipe_does_not(cluster: LocalCluster) -> None:
    code, text = on_terminal(cluster, ["status"], columns=200)
    assert code == 0
    assert "\x1b[" in text and BOX & set(text) and "leader" in text
    assert_plain(ok_table(cluster, "status"))
