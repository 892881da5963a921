"""``waitgraph dev``: a local cluster of real processes in one command, stopped by one Ctrl-C.

Runs ``waitgraph dev`` as a process, reads the addresses and the ``export`` line it prints, talks to
the cluster with ``waitgraph status -o json``, then sends SIGINT to the dev process alone and checks
that every node process it started is gone and its temporary directory removed. Whatever happens,
every process is killed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from .harness import REPO


class Dev:
    def __init__(self, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
        env["PYTHONPATH"] = str(REPO)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "waitgraph", "dev", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def until(self, prefix: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line starting with {prefix!r}; output so far:\n" + "\n".join(self.seen))

    def rest(self) -> list[str]:
        while True:
            try:
                self.seen.append(self.lines.get(timeout=1))
            except queue.Empty:
                return self.seen

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def nodes(self, procs: list[psutil.Process]) -> list[psutil.Process]:
        """The node processes among ``procs``: the dev process's own children (a node's native
        gRPC front is the node's child)."""
        return [p for p in procs if p.ppid() == self.proc.pid]

    def kill_all(self, pids: list[psutil.Process]) -> None:
        for p in pids:
            with contextlib.suppress(psutil.Error):
                p.kill()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def parse_export(line: str) -> dict[str, str]:
    words = shlex.split(line)
    assert words[0] == "export"
    return dict(w.split("=", 1) for w in words[1:])


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
