"""Raft-only node processes on loopback for the Raft tests, started by the one launcher.

Each node is the Raft-only test node (:func:`raft_node_command`) in its own process, started, killed
and restarted by :class:`~waitgraph.dev.localcluster.LocalCluster` (ports, data directory, log
file); tests talk to it over its loopback control channel, which it opens where ``waitgraph
serve`` would open gRPC. :class:`Cluster` kills every process it started when it is closed,
whatever happened.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from waitgraph.dev.localcluster import LocalCluster, LocalNode, NodeHandle
from waitgraph.dev.localcluster import free_ports as free_ports  # the tests import it from here
from waitgraph.statemachine.codec import decode_outcome, encode_envelope
from waitgraph.statemachine.commands import CreateTarget, Envelope
from waitgraph.statemachine.errors import Status
from waitgraph.statemachine.outcome import Outcome

REPO = Path(__file__).resolve().parents[2]
PASSWORD = base64.b64encode(os.urandom(32)).decode()
"""The cluster secret of every test cluster in this process: 256 random bits (nodes refuse weak ones)."""
PASSWORD_ENV = "WAITGRAPH_RAFT_PASSWORD"


def raft_node_command(lc: LocalCluster, m: LocalNode) -> list[str]:
    """The Raft-only test node's command: the other members' Raft addresses as peers (an impostor
    at a member's address is no peer of its own), its control channel on ``m``'s gRPC port."""
    peers = dict.fromkeys(p.raft_address for p in lc.members if p.raft_address != m.raft_address)
    cmd = [m.python, "-m", "tests.cluster.raft_node", "--id", m.node_id, "--raft", m.raft_address]
    cmd += ["--peers", ",".join(peers), "--data", str(m.data_dir), "--control", m.grpc_address.rpartition(":")[2]]
    return [*cmd, *lc.serve_args, *m.extra_args]


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


class Node(NodeHandle):
    """One Raft-only node of a :class:`Cluster`: the launcher's node, and its control channel."""

    @property
    def control(self) -> int:
        return int(self.member.grpc_address.rpartition(":")[2])

    @property
    def peers(self) -> list[str]:
        return [p.raft_address for p in self.launcher.members if p.raft_address != self.raft]

    @property
    def python(self) -> str:
        """The interpreter the node runs under (another virtual environment's: an older release)."""
        return self.member.python

    @python.setter
    def python(self, value: str) -> None:
        self.member.python = value

    def stop(self) -> None:
        """SIGTERM: the graceful stop an operator's restart does (SIGKILL after 10 s)."""
        self.terminate()

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
        self.launcher = LocalCluster(
            root=root,
            nodes=size,
            mode=None,
            serve_args=list(extra_args or []),
            node_command=raft_node_command,
            secret=PASSWORD,
            extra_env=lambda m: {PASSWORD_ENV: PASSWORD},
        )
        self.launcher.prepare()
        self.nodes = [Node(self.launcher, m, 15, 10) for m in self.launcher.members]

    def impostor(self, name: str, at: Node, password: str) -> Node:
        """A node that is no member: ``at``'s Raft address and control port, another secret, an
        empty data directory. Not started."""
        m = self.launcher.new_member(name, raft_address=at.raft, grpc_address=at.member.grpc_address)
        m.env[PASSWORD_ENV] = password
        return Node(self.launcher, m, 15, 10)

    def __enter__(self) -> Cluster:
        self.launcher.start(15)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.launcher.stop(graceful=False)

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
        return self.launcher.logs(4000)


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
