"""``waitgraph dev``: a local cluster of real processes in one command, stopped by one Ctrl-C.

Runs ``waitgraph dev`` as a process, reads the addresses and the ``export`` line it prints, talks to
the cluster with ``waitgraph status -o json``, then sends SIGINT to the dev process alone and checks
that every node process it started is gone and its temporary directory removed. Whatever happens,
every process is killed at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.dev_process import Dev, parse_export

from .harness import REPO


@pytest.mark.timeout(90)
def test_dev_starts_three_nodes_and_stops_them_all_on_sigint(tmp_path: Path) -> None:
    dev = Dev("--base-port", "0", "--mode", "auto")
    nodes: list[psutil.Process] = []
    try:
        head = dev.until("waitgraph dev: 3 node(s) in ", 30)
        directory = Path(head.split(" in ", 1)[1].split(" (", 1)[0])
        assert "(temporary: removed on exit)" in head and directory.is_dir()
        env = parse_export(dev.until("export WAITGRAPH_ENDPOINTS=", 60))
        endpoints = env["WAITGRAPH_ENDPOINTS"].split(",")
        assert len(endpoints) == 3 and all(e.startswith("127.0.0.1:") for e in endpoints)
        printed = [line for line in dev.seen if line.startswith("  n")]
        assert [line.split()[0] for line in printed] == ["n1", "n2", "n3"]
        assert [line.split()[2] for line in printed] == endpoints
        assert any(line.startswith("leader n") and "mode auto" in line for line in dev.seen)
        tokens_line = next(line for line in dev.seen if line.startswith("tokens: admin "))
        token_file = Path(tokens_line.split()[2].rstrip(","))
        assert token_file.read_text().strip() == env["WAITGRAPH_TOKEN"]
        # Everything the docs' examples need, in the form docs/sdk.md uses: the credentials file
        # and agent b's token; and which gRPC front serves.
        credentials = json.loads(Path(env["WAITGRAPH_CREDENTIALS"]).read_text())
        assert env["WAITGRAPH_AGENT_TOKEN"] == credentials["agents"]["b"]
        assert any(line.startswith("gRPC front: ") and "n1" in line for line in dev.seen), dev.seen
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        nodes = dev.children()  # the nodes and, where it is installed, each one's native gRPC front
        assert len(dev.nodes(nodes)) == 3 and len(nodes) in (3, 6)

        run_env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
        run_env.update(env, PYTHONPATH=str(REPO))
        out = subprocess.run(
            [sys.executable, "-m", "waitgraph", "status", "-o", "json"],
            cwd=REPO,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert sorted(n["node_id"] for n in doc["nodes"]) == ["n1", "n2", "n3"]
        assert [n["role"] for n in doc["nodes"]].count("leader") == 1
        assert all(n["mode"] == "auto" and n["recovery_configured"] for n in doc["nodes"])
        fronts = {n["grpc_front"] for n in doc["nodes"]}
        assert fronts <= {"native", "python"} and len(fronts) == 1, fronts
        assert f"gRPC front: {fronts.pop()} on n1,n2,n3" in dev.seen
        # the token file works too
        out = subprocess.run(
            [sys.executable, "-m", "waitgraph", "--token-file", str(token_file), "health"],
            cwd=REPO,
            env={**run_env, "WAITGRAPH_TOKEN": ""},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0 and "healthy:" in out.stdout, out.stdout + out.stderr

        os.kill(dev.proc.pid, signal.SIGINT)  # the dev process only: it must stop its children
        assert dev.proc.wait(30) == 0
        tail = dev.rest()
        assert "stopped: n1 exit 0, n2 exit 0, n3 exit 0" in tail
        gone, alive = psutil.wait_procs(nodes, timeout=5)
        assert not alive and len(gone) == len(nodes)
        assert not directory.exists()
    finally:
        dev.kill_all(nodes)


@pytest.mark.timeout(90)
def test_dev_keeps_a_given_data_dir_and_stops_on_sigterm(tmp_path: Path) -> None:
    data = tmp_path / "dev-data"
    dev = Dev("--data-dir", str(data), "--nodes", "1", "--base-port", "0", "--mode", "shadow")
    nodes: list[psutil.Process] = []
    try:
        dev.until("export WAITGRAPH_ENDPOINTS=", 60)
        assert any("mode shadow" in line and "recovery not configured" in line for line in dev.seen)
        nodes = dev.children()
        assert len(dev.nodes(nodes)) == 1 and len(nodes) in (1, 2)
        os.kill(dev.proc.pid, signal.SIGTERM)
        assert dev.proc.wait(30) == 0
        assert not psutil.wait_procs(nodes, timeout=5)[1]
        layout = json.loads((data / "cluster.json").read_text())
        assert [n["id"] for n in layout["nodes"]] == ["n1"]
        assert (data / "n1" / "data").is_dir() and (data / "secret").exists() and (data / "tokens.json").exists()
        tokens = json.loads((data / "tokens.json").read_text())["tokens"]
        assert all("sha256" in t and "token" not in t for t in tokens)  # the servers see digests only
    finally:
        dev.kill_all(nodes)
