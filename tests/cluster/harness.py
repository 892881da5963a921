"""Real node processes on loopback for the cluster tests and the benchmark.

Each node is ``python -m waitgraph.node.raft_node`` in its own process, with its own data directory and
log file; tests talk to it over its loopback control channel (see ``cluster/node/raft_node.py``).
:class:`Cluster` kills every process it started when it is closed, whatever happened.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from waitgraph.dev.localcluster import free_ports
from waitgraph.statemachine.codec import decode_outcome, encode_envelope
from waitgraph.statemachine.commands import CreateTarget, Envelope
from waitgraph.statemachine.errors import Status
from waitgraph.statemachine.outcome import Outcome

REPO = Path(__file__).resolve().parents[2]
PASSWORD = base64.b64encode(os.urandom(32)).decode()
"""The cluster secret of every test cluster in this process: 256 random bits (nodes refuse weak ones)."""


def envelope(i: int, *, request_id: str | None = None, actor: str = "operator:ops", at_ms: int = 1_000) -> bytes:
    """An envelope that applies once: create ``resource:t<i>``."""
    rid = request_id if request_id is not None else f"req-{i}"
    return encode_envelope(
        Envelope(actor=actor, at_ms=at_ms, request_id=rid, command=CreateTarget(target_id=f"resource:t{i}"))
    )


class ControlClient:
    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)

    def call(self, **request: Any) -> dict[str, Any]:
        data = msgpack.packb(request, use_bin_type=True)
        self.sock.sendall(struct.pack(">I", len(data)) + data)
        (size,) = struct.unpack(">I", self._read(4))
        return msgpack.unpackb(self._read(size), raw=False)  # type: ignore[no-any-return]

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("control channel closed")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


@dataclass
class Node:
    name: str
    raft: str
    control: int
    data: Path
    log: Path
    peers: list[str]
    extra_args: list[str] = field(default_factory=list)
    password: str = PASSWORD
    python: str = sys.executable
    """The interpreter the node runs under (another virtual environment's: an older release)."""
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        env = dict(os.environ, WAITGRAPH_RAFT_PASSWORD=self.password, PYTHONPATH=str(REPO))
        cmd = [self.python, "-m", "waitgraph.node.raft_node", "--id", self.name, "--raft", self.raft]
        cmd += ["--peers", ",".join(self.peers), "--data", str(self.data), "--control", str(self.control)]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd + self.extra_args, cwd=REPO, env=env, stdout=log, stderr=log)

    def wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            try:
                ControlClient(self.control, 1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"{self.name} did not open its control port")

    def stop(self) -> None:
        """SIGTERM: the graceful stop an operator's restart does (SIGKILL after 10 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed by the process itself."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def call(self, timeout_s: float = 10.0, **request: Any) -> dict[str, Any]:
        client = ControlClient(self.control, timeout_s)
        try:
            return client.call(**request)
        finally:
            client.close()

    def status(self) -> dict[str, Any]:
        return self.call(op="status")["status"]  # type: ignore[no-any-return]

    def submit(self, env: bytes, timeout_s: float = 10.0) -> Outcome | dict[str, Any]:
        """The Outcome, or the error reply (a dict) when the cluster gave none."""
        reply = self.call(timeout_s, op="submit", env=env)
        return decode_outcome(reply["outcome"]) if reply["ok"] else reply

    def submit_placed(self, env: bytes) -> Outcome | dict[str, Any]:
        """:meth:`submit`, sent again while it is refused ``not_leader`` (:func:`until_placed`: a
        paused VM can cost the cluster its leader for a moment, mid-test). The envelope's request
        id makes a write that did get in come back from the idempotency table, not apply twice."""
        return until_placed(lambda: self.submit(env))  # type: ignore[no-any-return]

    def digest(self, fresh: bool = False) -> str:
        """The replica's digest; ``fresh``: after a read barrier, asked again while the node
        refuses it ``not_leader`` (no leader for a moment: the barrier read nothing)."""
        reply = until_placed(lambda: self.call(op="digest", fresh=fresh))
        assert reply["ok"], reply
        return reply["digest"]  # type: ignore[no-any-return]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def until_placed(call: Callable[[], Any], retry_s: float = 30.0) -> Any:
    """``call()``, made again while it is refused before anything was done (``not_leader``: no
    leader for a moment on a paused VM, so nothing was proposed or read); any other answer as it is."""
    deadline = time.monotonic() + retry_s
    while True:
        got = call()
        if not (isinstance(got, dict) and got.get("code") == "not_leader" and time.monotonic() < deadline):
            return got
        time.sleep(0.2)


class Cluster:
    def __init__(self, root: Path, size: int = 3, extra_args: list[str] | None = None) -> None:
        ports = free_ports(2 * size)
        raft = [f"127.0.0.1:{p}" for p in ports[:size]]
        self.nodes = []
        for i in range(size):
            name = f"n{i + 1}"
            (root / name).mkdir(parents=True, exist_ok=True)
            self.nodes.append(
                Node(
                    name=name,
                    raft=raft[i],
                    control=ports[size + i],
                    data=root / name / "data",
                    log=root / name / "node.log",
                    peers=[a for a in raft if a != raft[i]],
                    extra_args=list(extra_args or []),
                )
            )

    def __enter__(self) -> Cluster:
        try:
            for node in self.nodes:
                node.spawn()
            for node in self.nodes:
                node.wait_ready()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for node in self.nodes:
            node.kill()

    def by_raft(self, address: str | None) -> Node | None:
        return next((n for n in self.nodes if n.raft == address), None)

    def leader(self, timeout_s: float = 20.0, among: list[Node] | None = None) -> Node:
        """The node every live member agrees is leader (and that says so itself)."""
        live = among if among is not None else [n for n in self.nodes if n.alive()]

        def agreed() -> Node | None:
            seen = set()
            for node in live:
                try:
                    seen.add(node.status()["leader"])
                except OSError:
                    return None
            if len(seen) != 1 or None in seen:
                return None
            leader = self.by_raft(seen.pop())
            if leader is None or leader not in live or leader.status()["role"] != "leader":
                return None
            return leader if leader.status()["has_quorum"] else None

        return wait_for(agreed, timeout_s, "an agreed leader")

    def followers(self, leader: Node) -> list[Node]:
        return [n for n in self.nodes if n is not leader and n.alive()]

    def converged_digest(self, nodes: list[Node] | None = None, timeout_s: float = 15.0) -> str:
        """Wait until the nodes have applied the same index and report the same digest."""
        nodes = nodes if nodes is not None else [n for n in self.nodes if n.alive()]

        def same() -> str | None:
            applied = {n.status()["applied_index"] for n in nodes}
            digests = {n.digest() for n in nodes}
            return digests.pop() if len(applied) == 1 and len(digests) == 1 else None

        return wait_for(same, timeout_s, "identical digests")

    def logs(self) -> str:
        return "\n".join(f"===== {n.name}\n{n.log_text()[-4000:]}" for n in self.nodes)


def missing_targets(node: Node, created: list[int]) -> list[int]:
    """Of the ``resource:t<i>`` that ``envelope(i)`` created, those the replicated state does not
    have: creating each again (with a new request id) must be refused as ALREADY_EXISTS."""
    missing = []
    for start in range(0, len(created), 200):
        chunk = created[start : start + 200]
        reply = node.call(30, op="submit_many", envs=[envelope(i, request_id=f"again-{i}") for i in chunk])
        assert reply["ok"], reply
        for i, got in zip(chunk, reply["replies"], strict=True):
            if not got["ok"]:
                raise AssertionError(f"the cluster did not answer for t{i}: {got}")
            if decode_outcome(got["outcome"]).status is not Status.ALREADY_EXISTS:
                missing.append(i)
    return missing


def wait_for(fn: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except (OSError, KeyError) as exc:
            last_exc = exc
        time.sleep(interval_s)
    raise TimeoutError(f"timed out waiting for {what} (last error: {last_exc!r})")
