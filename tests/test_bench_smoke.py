"""The benchmark scripts run (on tiny sizes) and print their tables.

Benchmarks assert nothing about speed; this only keeps them from rotting when commands change
(a benchmark that no longer runs is a figure nobody can reproduce).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from waitgraph.node.front import find_binary

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("script", "args", "expect"),
    [
        ("bench_core.py", ["--edges", "2000", "--ops", "2000"], "applies/s"),
        ("bench_detect.py", ["--sizes", "2000", "--adds", "50", "--soft-shapes", "10"], "soft cycles"),
        ("bench_cancel.py", ["--sizes", "200", "--repeat", "1"], "CancelRun"),
        ("bench_liveview.py", ["--sizes", "50", "--repeat", "1"], "under the lock"),
        ("bench_apply.py", ["--rounds", "2", "--repeat", "1"], "RegisterWait (re-register)"),
        ("bench_gateway.py", ["--rounds", "2", "--repeat", "1", "--floor-s", "1"], "| this tree |"),
        ("bench_alternate.py", ["--against", str(ROOT), "--runs", "1", "--smoke"], "| **against, median** | 1 |"),
        ("bench_retention.py", ["--executions", "3000", "--step", "1000"], "too_many_executions: 0"),
        ("bench_handoff.py", ["--agents", "8", "--slots", "2", "--acquisitions", "100"], "wake-and-race"),
        ("bench_mcp.py", ["--rounds", "5", "--clients", "2", "--client-rounds", "3"], "| wait satisfied, stdio |"),
        ("bench_langgraph.py", ["--invocations", "3", "--warmup", "1"], "instrumented, waitgraph lease"),
        ("bench_sessions.py", ["--quick", "--no-etcd"], "| 20 | waitgraph |"),
    ],
)
def test_benchmark_script_runs(script: str, args: list[str], expect: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *args],
        capture_output=True,
        text=True,
        timeout=230,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert expect in done.stdout, done.stdout[-2000:]


def test_a_comparison_runs_the_other_trees_code(tmp_path: Path) -> None:
    """``--against DIR`` (bench apply, bench gateway) runs DIR's code in its children: the
    editable install's finder would load this repository's for both trees (it did, unnoticed,
    once the code moved under the ``waitgraph`` name), and "no change" would be the answer."""
    import shutil

    tree = tmp_path / "tree"
    for part in ("statemachine", "cluster", "proto"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    codec = tree / "statemachine" / "codec.py"
    text = codec.read_text()
    assert "\nMAX_STR_LEN = 1024\n" in text
    codec.write_text(text.replace("\nMAX_STR_LEN = 1024\n", "\nMAX_STR_LEN = 777\n"))
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); from bench_apply import use_tree; "
        "use_tree(sys.argv[2]) if len(sys.argv) > 2 else None; "
        "from waitgraph.statemachine import codec; print(codec.MAX_STR_LEN)"
    )
    scripts = str(ROOT / "scripts")
    for args, expect in (([scripts, str(tree)], "777"), ([scripts], "1024")):
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == expect


def _etcd_missing() -> str | None:
    spec = importlib.util.spec_from_file_location("etcd_bench_probe", ROOT / "scripts" / "etcd_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    missing: str | None = mod.available()
    return missing


DERIVED_ROWS = (
    "| CPU per write, the 3 servers alone (wg's nodes with their fronts, etcd's members): SDK vs put |",
    "| a lone write through pysyncobj alone, p50: ",
    "| a lone write through waitgraph's Raft layer alone, p50: ",
    "| CPU per write, waitgraph's apply alone on 3 replicas (`bench_apply.py`, ",
)
"""Rows computed from other measurements: each must show figures, not a dash for a missing one."""

VERSUS_ROWS = (
    "| unary write p50, durable (wg default, etcd default) |",
    "| unary write p99, durable |",
    "| unary write p50, not durable (wg `--no-fsync`, etcd `--unsafe-no-fsync`) |",
    "| 64 writers, one unary call per write (wg RegisterWait vs etcd put), durable |",
    "| 64 writers through the SDK's `WriteBatch` (RegisterWait) vs etcd put, durable |",
    "| the same vs etcd's txn (compare mod_revision, put 2 keys), durable |",
    "| CPU per write, all processes: wg SDK vs etcd put |",
    "| the same, waitgraph's writers in ",
    "| CPU per write, all processes: wg unary in ",
    *DERIVED_ROWS,
    "What waitgraph's unary p50 cannot go below here with its replication path as it is",
    "| failover, kill -9 leader → first write, p50 |",
    "| unary write p50 / p99 |",
    "| registrations/s, 64 writers, SDK |",
    "The floor, same run: a grpc.aio unary call that does nothing",
    "Threads runnable but waiting for a core, on average, 64 writers",
)


@pytest.mark.timeout(420)
def test_cluster_benchmark_beside_etcd_runs(tmp_path: Path) -> None:
    """``scripts/bench cluster --etcd only --smoke``: both systems measured, every row printed,
    every shape counted something (no timing is asserted). .ci/run installs etcd for this."""
    missing = _etcd_missing()
    if missing:
        pytest.skip(missing)
    out = tmp_path / "versus.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench_cluster.py"),
            "--etcd",
            "only",
            "--smoke",
            "--json-out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    for row in VERSUS_ROWS:
        assert row in done.stdout, (row, done.stdout[-3000:])
    got = json.loads(out.read_text())
    (wg,), (etcd,) = got["wg"], got["etcd"]
    counts = {
        "wg latency": wg["latency"]["n"],
        "wg unary64": wg["unary64"]["n"],
        "wg sdk64": wg["sdk64"]["n"],
        "wg unary64 in processes": wg["unary64p"]["n"],
        "wg failover": wg["failover"]["n"],
        "wg attack latency": wg["attack_latency"]["n"],
        "wg attack sdk64": wg["attack_sdk64"]["n"],
        "etcd latency": etcd["latency"]["n"],
        "etcd put64": etcd["put64"]["n"],
        "etcd txn64": etcd["txn64"]["n"],
        "etcd failover": etcd["failover"]["n"],
        "wg --no-fsync latency": got["wg_nf"]["latency"]["n"],
        "wg --no-fsync sdk64": got["wg_nf"]["sdk64"]["n"],
        "etcd --unsafe-no-fsync put64": got["etcd_nf"]["put64"]["n"],
        "bare grpc.aio floor calls": got["grpc_floor"]["calls"],
        "pysyncobj alone, writes": got["raft"][0]["raw"]["writes"],
        "waitgraph's Raft layer alone, writes": got["raft"][0]["wrapper"]["writes"],
        "apply alone, CPU µs per write": got["raft"][0]["apply_us"],
    }
    if find_binary() is not None or os.environ.get("WAITGRAPH_FRONT_REQUIRED") == "1":
        assert "The same call through the native gRPC front" in done.stdout, done.stdout[-3000:]
        counts["the native front's floor calls"] = got["front_floor"]["calls"]
    assert all(n > 0 for n in counts.values()), counts
    for row in DERIVED_ROWS:
        line = next(x for x in done.stdout.splitlines() if x.startswith(row))
        assert "—" not in line, line
    # The 4-process unary shape sent every write as its own RPC: no WriteBatch call at all.
    assert wg["unary64p"]["batches"] == 0, wg["unary64p"]
    # Every txn's compare held: each writer tracks its key's mod_revision right (a wrong one fails them all).
    assert etcd["txn64"]["failed"] == 0, etcd["txn64"]


HANDOFF_ROWS = (
    "| 8 | Release sent → next holder holds, p50 (3 hand-overs each) |",
    "| 8 | the same, p99 |",
    "| 9 | acquisitions/s, 8 agents, 2 slots |",
    "| 9 | wait (first Acquire → holding), p50 |",
    "| 9 | wait, p99 |",
    "| 9 | acquisitions per agent, fewest / most (fairness) |",
)


@pytest.mark.timeout(240)
def test_cluster_benchmark_handoff_runs(tmp_path: Path) -> None:
    """``scripts/bench cluster --handoff only --smoke``: figures 8 (hand-off latency beside
    wake-and-race) and 9 (the contended pool, both ways) ran on a real cluster and printed their
    rows; every measurement counted something, and the hand-off side really was handed over (no
    timing is asserted)."""
    out = tmp_path / "handoff.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench_cluster.py"),
            "--handoff",
            "only",
            "--etcd",
            "off",
            "--smoke",
            "--json-out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=230,
        cwd=ROOT,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    for row in HANDOFF_ROWS:
        assert row in done.stdout, (row, done.stdout[-3000:])
    got = json.loads(out.read_text())
    ho = got["handoff"]
    assert ho["handoff"]["n"] == ho["race"]["n"] == 3, ho
    assert ho["not_handed_over"] == 0, ho  # every hand-off round was a real hand-over, not a second Acquire
    pool, race = got["pool_0_handoff"], got["pool_0_race"]
    assert pool["n"] > 0 and race["n"] > 0, (pool, race)
    assert pool["handed_over"] > 0, pool  # the queued side was granted by releases
    assert race["handed_over"] == 0, race  # the anchor never queues


@pytest.mark.timeout(240)
def test_cluster_benchmark_tracing_runs() -> None:
    """``scripts/bench cluster --tracing only --smoke``: figure 10 ran both modes on real clusters and
    printed its rows; tracing on exported spans to the benchmark's receiver, off exported none, and
    no write failed (no timing is asserted)."""
    pytest.importorskip("opentelemetry.sdk.trace", reason="the [otel] extra")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_cluster.py"), "--tracing", "only", "--etcd", "off", "--smoke"],
        capture_output=True,
        text=True,
        timeout=230,
        cwd=ROOT,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    for row in ("| SDK writes/s, 64 agents in", "| unary p50, one agent, SDK without batching |"):
        assert row in done.stdout, (row, done.stdout[-3000:])
    spans = re.search(r"Spans received on: (\d+) \(off: (\d+)\); failed writes: (\d+)\.", done.stdout)
    assert spans is not None, done.stdout[-3000:]
    on, off, failed = map(int, spans.groups())
    assert on > 0 and off == 0 and failed == 0, spans.group(0)


def _bench_timeline() -> object:
    spec = importlib.util.spec_from_file_location("bench_timeline_probe", ROOT / "scripts" / "bench_timeline.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_timeline_joins_a_call_with_its_own_nodes_raft_events(tmp_path: Path) -> None:
    """``--timeline``'s join (scripts/bench_timeline.py), on events written by hand: a call's Raft
    stages come from the node whose gateway took it (a follower applies the same entry at another
    time), an acknowledgment that does not cover the entry is not its quorum, the follower stages
    are those of the follower whose answer made it (not the other one's, nor that follower's
    earlier entry, flush or answer), the entry is the first one appended after the group was proposed,
    the stages add up to the whole call, and unary calls get their own table."""
    tl = _bench_timeline()
    (tmp_path / "tl-1.txt").write_text(
        "10.000 S_send r1 \n10.050 S_reply r1 \n10.100 S_send r2 unary\n10.110 S_reply r2 \n"
    )
    (tmp_path / "tl-2.txt").write_text(  # the leader
        "10.001 H_start r1 2\n10.003 H_submit r1 \n10.006 L_add 7 1\n10.010 A_prop r1 99\n"
        "10.012 L_add 8 1\n10.015 L_ack 8 f3\n10.020 L_ack 9 f3\n10.030 apply1 7 1\n10.031 apply1 8 2\n"
        "10.040 H_answered r1 \n10.045 H_end r1 \n"
        "10.101 H_start r2 unary\n10.102 H_submit r2 \n10.1025 A_prop r2 98\n10.103 L_add 9 1\n"
        "10.106 L_ack 10 f3\n10.107 apply1 9 1\n10.108 H_answered r2 \n10.109 H_end r2 \n"
    )
    (tmp_path / "tl-3.txt").write_text(  # the follower whose answers the leader counted
        "10.008 F_recv 7 f3\n10.0085 F_flush 8 f3\n10.0087 F_synced 7 \n10.009 F_ack 8 f3\n"
        "10.014 F_recv 8 f3\n10.0142 F_flush 8 f3\n10.0144 F_synced 7 \n10.0145 F_ack 8 f3\n"
        "10.0146 F_synced 8 \n10.015 F_flush 9 f3\n10.0155 F_synced 7 \n10.016 F_synced 8 \n10.018 F_ack 9 f3\n"
        "10.104 F_recv 9 f3\n10.1043 F_flush 10 f3\n10.1047 F_synced 9 \n10.105 F_ack 10 f3\n"
    )
    (tmp_path / "tl-0.txt").write_text(  # the other follower, read first
        "10.011 L_add 8 1\n10.013 apply1 8 2\n10.0125 F_recv 8 f4\n10.0126 F_flush 9 f4\n"
        "10.0128 F_synced 8 \n10.0130 F_ack 9 f4\n"
    )
    calls = tl.join(tmp_path)  # type: ignore[attr-defined]
    call = calls["r1"]
    assert (call["L_add"], call["L_ack"], call["apply1"]) == (10.012, 10.020, 10.031)
    assert (call["F_recv"], call["F_ack"]) == (10.014, 10.018)
    # the flush whose answers cover entry 8, and the first fdatasync after it that covers the entry
    assert (call["F_flush"], call["F_synced"]) == (10.015, 10.016)
    stages = {key: call[b] - call[a] for key, _, a, b in tl.STAGES}  # type: ignore[attr-defined]
    assert stages["buffered"] == pytest.approx(0.007) and stages["to_raft"] == pytest.approx(0.002)
    assert stages["to_follower"] == pytest.approx(0.002) and stages["follower_wait"] == pytest.approx(0.001)
    assert stages["follower_fsync"] == pytest.approx(0.001) and stages["follower_answer"] == pytest.approx(0.002)
    assert stages["ack_back"] == pytest.approx(0.002) and stages["apply"] == pytest.approx(0.011)
    assert sum(stages.values()) == pytest.approx(0.050)
    unary = calls["r2"]
    assert (unary["unary"], call["unary"]) == (1.0, 0.0)
    assert (unary["F_recv"], unary["F_ack"], unary["L_ack"]) == (10.104, 10.105, 10.106)
    assert (unary["F_flush"], unary["F_synced"]) == (10.1043, 10.1047)
    report = "\n".join(tl.report(tmp_path))  # type: ignore[attr-defined]
    assert "timeline of 1 WriteBatch calls" in report and "| **the whole call** | 50.00 |" in report
    assert "timeline of 1 unary RegisterWait calls" in report and "| **the whole call** | 10.00 |" in report
    # A call whose reply was lost with its process is left out, not counted as zero; so is one
    # whose follower events are missing.
    (tmp_path / "tl-1.txt").write_text("10.000 S_send r1 \n10.100 S_send r2 unary\n10.110 S_reply r2 \n")
    (tmp_path / "tl-3.txt").write_text("10.014 F_recv 8 f3\n10.018 F_ack 9 f3\n")
    assert tl.join(tmp_path) == {}  # type: ignore[attr-defined]


@pytest.mark.timeout(240)
def test_cluster_benchmark_timeline_runs(tmp_path: Path) -> None:
    """``scripts/bench cluster --smoke --timeline DIR``: the wrappers load in real node and SDK
    processes, figure 2's calls are joined across them, and the run-queue figure is printed (no
    timing is asserted)."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "bench_cluster.py"),
            "--smoke",
            *("--no-raw", "--no-unary", "--etcd", "off", "--handoff", "off"),
            *("--recovery-trials", "0", "--failover-trials", "0", "--soak-s", "0"),
            *("--timeline", str(tmp_path / "tl")),
        ],
        capture_output=True,
        text=True,
        timeout=230,
        cwd=ROOT,
    )
    not_logs = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("{"))
    assert done.returncode == 0, (done.stdout[-3000:], not_logs[-5000:])
    assert re.search(r"threads waiting for a core, on average: n1\*? \d", done.stdout), done.stdout[-3000:]
    for kind in ("unary RegisterWait", "WriteBatch"):  # figures 1 and 2
        joined = re.search(rf"^- timeline of (\d+) {kind} calls", done.stdout, re.MULTILINE)
        assert joined and int(joined[1]) > 0, (kind, done.stdout[-3000:])
    assert "| the client sends -> the handler starts |" in done.stdout
    assert "| the follower's fdatasync |" in done.stdout
    # figure 7's flush probe: the journal's way (allocated ahead) beside its anchor (appended)
    assert re.search(
        r"inside allocated space, as the journal writes it: p50 [\d.]+ ms.*appended to a growing file: p50", done.stdout
    )
