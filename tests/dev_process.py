"""``waitgraph dev`` as a process, the way a reader starts it: its printed lines, its ``export``
line, and every process it started killed at the end (tests/cluster/test_cli_dev.py, and
tests/test_docs_examples.py, which runs that export line verbatim before the docs' examples)."""

from __future__ import annotations

import contextlib
import os
import queue
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent


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
