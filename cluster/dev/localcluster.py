"""The one way to start a local cluster: N node processes on loopback (or on the chaos lab's hosts).

``waitgraph dev``, the demo, the cluster tests' harnesses, the benchmarks and the chaos lab all start
their nodes here; by default each node is a real ``waitgraph serve``.

    with LocalCluster(nodes=3, mode="auto") as lc:     # a temporary directory, removed at the end
        lc.wait_for_leader()
        lc.endpoints            # ["127.0.0.1:50051", ...]
        lc.credentials.agents   # {"a": "<token>", ...}: tokens for the AgentService
        with lc.client() as ops:  # an admin SyncOperatorClient
            ...
        lc.kill("n1"); lc.spawn("n1"); lc.wait_ready("n1")   # a crash and a restart on the same data
        lc.terminate("n2")      # SIGTERM, the graceful stop (SIGKILL when it takes too long)

What a node runs is :meth:`LocalCluster.serve_command` unless ``node_command`` says otherwise (the Raft
tests run a Raft-only node that opens a control port where ``waitgraph serve`` opens gRPC). Per node:
``extra_args``, ``python`` (another virtual environment's interpreter: an older release) and ``env``.

Rules kept here:
- Everything a node needs is generated into the directory, readable only by the user: ``secret``
  (the Raft password), ``tokens.json`` (what the servers check: SHA-256 digests only),
  ``credentials.json`` (the plain tokens, for clients), ``admin.token`` / ``operator.token``
  (one token each, for ``--token-file``) and ``cluster.json`` (the members and their addresses).
  Starting again on a directory that has them reuses them, so the Raft journals, the addresses
  and the exported tokens stay valid. A node's data is ``<id>/data``, its log ``<id>/node.log``.
- Children get a clean environment: no ``WAITGRAPH_*`` variable of the caller leaks into a node's
  configuration (a stray ``WAITGRAPH_CONFIG`` would silently change it).
- :meth:`LocalCluster.stop` sends SIGTERM (the nodes' graceful stop), waits, then SIGKILLs what is
  left (``graceful=False``: SIGKILL at once, as the tests do); :meth:`LocalCluster.close` also
  removes a directory it created. Nothing it started outlives it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from waitgraph.node.auth import token_digest
from waitgraph.sdk import SyncOperatorClient

CLUSTER_FILE = "cluster.json"
RAFT_PORT_OFFSET = 100
DEFAULT_AGENTS = ("a", "b", "c")


def free_ports(n: int) -> list[int]:
    """n distinct loopback ports that were free a moment ago (bound together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def ports_free(ports: Sequence[int]) -> bool:
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


@dataclass(frozen=True, slots=True)
class Credentials:
    admin: str
    operator: str
    agents: dict[str, str]
    """agent id -> token (each acts as ``agent:<id>`` only)."""

    def to_json(self) -> dict[str, Any]:
        return {"admin": self.admin, "operator": self.operator, "agents": dict(self.agents)}

    @classmethod
    def generate(cls, agents: Sequence[str]) -> Credentials:
        def token(label: str) -> str:
            return f"wg-{label}-{secrets.token_urlsafe(24)}"

        return cls(token("admin"), token("operator"), {a: token(f"agent-{a}") for a in agents})

    def token_entries(self) -> list[dict[str, Any]]:
        """The servers' token file: digests only."""
        entries: list[dict[str, Any]] = [
            {"name": "admin", "role": "admin", "sha256": token_digest(self.admin).hex()},
            {"name": "operator", "role": "operator", "sha256": token_digest(self.operator).hex()},
        ]
        for agent_id, tok in sorted(self.agents.items()):
            entries.append(
                {"name": f"agent-{agent_id}", "role": "agent", "agent_id": agent_id, "sha256": token_digest(tok).hex()}
            )
        return entries


@dataclass
class LocalNode:
    node_id: str
    raft_address: str
    grpc_address: str
    directory: Path
    proc: subprocess.Popen[bytes] | None = None
    http_address: str | None = None
    """The live view's (and /metrics') address when the cluster serves it (:attr:`LocalCluster.http`)."""
    extra_args: list[str] = field(default_factory=list)
    """This node's own flags, after the cluster's :attr:`LocalCluster.serve_args`."""
    python: str = sys.executable
    """The interpreter the node runs under (another virtual environment's: an older release)."""
    env: dict[str, str] = field(default_factory=dict)
    """This node's own environment variables, over :attr:`LocalCluster.extra_env`'s."""

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        return self.directory / "node.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the node gets SIGTERM if the launcher dies without stopping it (e.g. SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


CO_LOCATED_ELECTION_TIMEOUT_MS = 2_000
"""The election timeout of nodes that share a small machine with each other and their agents.

The rule: a node's election timeout must exceed the longest Raft tick its host allows, or one
stalled tick of the leader (no heartbeat meanwhile) costs the cluster its leader. The node logs
every tick over 300 ms with what it spent flushing and applying. Three nodes, 32 SDK agents and
other work on 2 cores (load 10-21) gave ticks of up to 0.8-1.0 s, with one of 2.2 s, and
whole-machine stalls in which all three nodes' ticks were 0.4-0.5 s while their flush and apply
took 0 ms: no setting of the node removes those. 500 ms (the node's default, for a host of its
own) lost the leader 2 times in 3 minutes there; this is four times that, and the leader's
fallback (``leader_fallback_timeout_s``) follows it. The price: a failover takes 2-4 s instead
of 0.5-1 s."""


@dataclass
class LocalCluster:
    root: Path | None = None
    """Where everything goes; None: a new temporary directory, removed by :meth:`close`."""
    nodes: int = 3
    mode: str | None = "auto"
    """Rollout mode set at start (shadow, auto-safe, auto); None leaves the core's (shadow)."""
    base_port: int | None = None
    """gRPC ports base_port.., Raft ports base_port+100..; None: free ports."""
    agents: Sequence[str] = DEFAULT_AGENTS
    serve_args: Sequence[str] = ()
    """Extra flags for every node's command (``--detect-interval-ms 50``...)."""
    log_level: str | None = "INFO"
    """``--log-level``; None leaves the node's default."""
    election_timeout_ms: int | None = None
    """``--election-timeout-ms``; None leaves the node's default (500). ``waitgraph dev`` and the
    soak benchmark pass :data:`CO_LOCATED_ELECTION_TIMEOUT_MS`."""
    die_with_parent: bool = False
    """Linux: nodes get SIGTERM when the launching thread dies. Only for launchers that spawn from a
    thread that lives as long as the cluster (``waitgraph dev``)."""
    hosts: Sequence[str] | None = None
    """The i-th node binds its ports on ``hosts[i]`` (its own address in a network namespace, for the
    chaos tests); None: 127.0.0.1 for every node."""
    command_prefix: Callable[[LocalNode], Sequence[str]] | None = None
    """What a node's command runs under (``ip netns exec NS``); the node's process is the last exec."""
    extra_env: Callable[[LocalNode], Mapping[str, str]] | None = None
    """Variables added to a node's clean environment (the chaos runs' clock hook)."""
    http: bool = False
    """Serve the live view and /metrics on a free loopback port per node (``--http-addr``)."""
    node_command: Callable[[LocalCluster, LocalNode], Sequence[str]] | None = None
    """What a node runs (under :attr:`command_prefix`); None: :meth:`serve_command`. A node's
    :attr:`LocalNode.grpc_address` is the port such a command opens once it is ready."""
    secret: str | None = None
    """The cluster secret written to ``secret``; None: the directory's, or a new random one."""
    tokens: Sequence[Mapping[str, Any]] | None = None
    """The servers' ``tokens.json`` entries (fixed names, plain or expired tokens: the tests');
    None: the digests of :attr:`credentials`."""
    members: list[LocalNode] = field(default_factory=list)
    credentials: Credentials | None = None
    created_root: bool = False

    # -- layout ------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create or load the directory: addresses, secret, tokens. Idempotent."""
        if self.members:
            return
        if self.nodes < 1:
            raise ValueError("nodes must be at least 1")
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="waitgraph-dev-"))
            self.created_root = True
        root = self.root
        root.mkdir(parents=True, exist_ok=True)
        layout = root / CLUSTER_FILE
        if layout.exists():
            saved = json.loads(layout.read_text())["nodes"]
            if len(saved) != self.nodes:
                raise ValueError(
                    f"{root} holds a {len(saved)}-node cluster: "
                    f"start it with --nodes {len(saved)} or use another directory"
                )
            self.members = [LocalNode(n["id"], n["raft"], n["grpc"], root / n["id"]) for n in saved]
        else:
            self.members = self._new_members(root)
            self._save_layout()
        secret = root / "secret"
        if self.secret is None and secret.exists():
            self.secret = secret.read_text().strip()
        else:
            self.secret = self.secret if self.secret is not None else secrets.token_urlsafe(32)
            _write_private(secret, self.secret + "\n")
        creds_file = root / "credentials.json"
        if creds_file.exists():
            raw = json.loads(creds_file.read_text())
            self.credentials = Credentials(raw["admin"], raw["operator"], dict(raw["agents"]))
        else:
            self.credentials = Credentials.generate(self.agents)
            _write_private(creds_file, json.dumps(self.credentials.to_json(), indent=2) + "\n")
        entries = [dict(e) for e in self.tokens] if self.tokens is not None else self.credentials.token_entries()
        (root / "tokens.json").write_text(json.dumps({"tokens": entries}, indent=2) + "\n")
        _write_private(root / "admin.token", self.credentials.admin + "\n")
        _write_private(root / "operator.token", self.credentials.operator + "\n")
        for m in self.members:
            m.directory.mkdir(exist_ok=True)
        if self.http:
            for m, port in zip(self.members, free_ports(len(self.members)), strict=True):
                m.http_address = f"{m.raft_address.rpartition(':')[0]}:{port}"

    def _save_layout(self) -> None:
        assert self.root is not None
        doc = {
            "version": 1,
            "nodes": [{"id": m.node_id, "raft": m.raft_address, "grpc": m.grpc_address} for m in self.members],
        }
        (self.root / CLUSTER_FILE).write_text(json.dumps(doc, indent=2) + "\n")

    def new_member(
        self, node_id: str, host: str = "127.0.0.1", *, raft_address: str | None = None, grpc_address: str | None = None
    ) -> LocalNode:
        """A node at new free ports (or the addresses given: an impostor at a stopped member's),
        listed from now on in every node's --peers (its own included) and in the layout file; not
        started, and no Raft member until ``waitgraph member add`` (docs/deploy.md, "Membership
        changes")."""
        self.prepare()
        assert self.root is not None
        if any(m.node_id == node_id for m in self.members):
            raise ValueError(f"{node_id} is already a node of this cluster")
        grpc_port, raft_port = free_ports(2)
        m = LocalNode(
            node_id, raft_address or f"{host}:{raft_port}", grpc_address or f"{host}:{grpc_port}", self.root / node_id
        )
        m.directory.mkdir(exist_ok=True)
        if self.http:
            m.http_address = f"{host}:{free_ports(1)[0]}"
        self.members.append(m)
        self.nodes = len(self.members)
        self._save_layout()
        return m

    def forget_member(self, node_id: str) -> LocalNode:
        """Stop a node removed from the membership and drop it from the layout and every --peers."""
        m = self.node(node_id)
        self.terminate(node_id)
        self.members.remove(m)
        self.nodes = len(self.members)
        self._save_layout()
        return m

    def _new_members(self, root: Path) -> list[LocalNode]:
        n = self.nodes
        if self.base_port is None:
            ports = free_ports(2 * n)
            grpc_ports, raft_ports = ports[:n], ports[n:]
        else:
            grpc_ports = [self.base_port + i for i in range(n)]
            raft_ports = [self.base_port + RAFT_PORT_OFFSET + i for i in range(n)]
        hosts = list(self.hosts) if self.hosts is not None else ["127.0.0.1"] * n
        if len(hosts) != n:
            raise ValueError(f"hosts: {len(hosts)} addresses for {n} nodes")
        return [
            LocalNode(f"n{i + 1}", f"{hosts[i]}:{raft_ports[i]}", f"{hosts[i]}:{grpc_ports[i]}", root / f"n{i + 1}")
            for i in range(n)
        ]

    @property
    def directory(self) -> Path:
        self.prepare()
        assert self.root is not None
        return self.root

    @property
    def endpoints(self) -> list[str]:
        self.prepare()
        return [m.grpc_address for m in self.members]

    @property
    def admin_token_file(self) -> Path:
        return self.directory / "admin.token"

    @property
    def operator_token_file(self) -> Path:
        return self.directory / "operator.token"

    def env(self) -> dict[str, str]:
        """What a shell needs for ``waitgraph status`` & co and for the docs' examples: the
        endpoints, the admin token, the credentials file (every agent's token) and one agent's
        token (:meth:`example_agent`'s, the agent docs/sdk.md's examples act as)."""
        self.prepare()
        assert self.credentials is not None
        env = {
            "WAITGRAPH_ENDPOINTS": ",".join(self.endpoints),
            "WAITGRAPH_TOKEN": self.credentials.admin,
            "WAITGRAPH_CREDENTIALS": str(self.directory / "credentials.json"),
        }
        agent = self.example_agent()
        if agent is not None:
            env["WAITGRAPH_AGENT_TOKEN"] = self.credentials.agents[agent]
        return env

    def example_agent(self) -> str | None:
        """The agent whose token is ``WAITGRAPH_AGENT_TOKEN``: ``b`` (the docs' examples act as
        agent b) when there is one, else the first agent."""
        assert self.credentials is not None
        agents = sorted(self.credentials.agents)
        return "b" if "b" in agents else (agents[0] if agents else None)

    def client(self, role: str = "admin", timeout_s: float = 10.0) -> SyncOperatorClient:
        self.prepare()
        assert self.credentials is not None
        token = self.credentials.admin if role == "admin" else self.credentials.operator
        return SyncOperatorClient(self.endpoints, token, call_timeout_s=timeout_s, retry_deadline_s=2 * timeout_s)

    # -- processes ---------------------------------------------------------------------------------------

    def serve_argv(self, m: LocalNode) -> list[str]:
        """The node's ``waitgraph serve ...`` arguments (``serve`` first)."""
        root = self.directory
        peers = ",".join(f"{p.node_id}={p.raft_address}" for p in self.members)
        peer_grpc = ",".join(f"{p.node_id}={p.grpc_address}" for p in self.members)
        argv = ["serve", "--id", m.node_id, "--raft-addr", m.raft_address, "--grpc-addr", m.grpc_address]
        argv += ["--peers", peers, "--peer-grpc", peer_grpc, "--data-dir", str(m.data_dir)]
        argv += ["--secret-file", str(root / "secret"), "--tokens-file", str(root / "tokens.json")]
        if self.log_level:
            argv += ["--log-level", self.log_level]
        if self.mode:
            argv += ["--initial-mode", self.mode]
        if m.http_address:
            argv += ["--http-addr", m.http_address]
        if self.election_timeout_ms is not None:
            argv += ["--election-timeout-ms", str(self.election_timeout_ms)]
        return [*argv, *self.serve_args, *m.extra_args]

    def serve_command(self, m: LocalNode) -> list[str]:
        return [m.python, "-m", "waitgraph", *self.serve_argv(m)]

    def _child_env(self, m: LocalNode) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
        # The checkout's root, where a module of the tests can be a node's command.
        repo = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        if self.extra_env is not None:
            env.update(self.extra_env(m))
        env.update(m.env)
        return env

    def spawn(self, node_id: str) -> LocalNode:
        m = self.node(node_id)
        if m.alive():
            return m
        prefix = list(self.command_prefix(m)) if self.command_prefix is not None else []
        command = list(self.node_command(self, m)) if self.node_command is not None else self.serve_command(m)
        env = self._child_env(m)
        with open(m.log_path, "ab") as log:
            m.proc = subprocess.Popen(
                prefix + command,
                cwd=self.directory,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                preexec_fn=_die_with_parent if self.die_with_parent and sys.platform == "linux" else None,
            )
        return m

    def wait_ready(self, node_id: str, timeout_s: float = 30.0) -> None:
        """Until the node's gRPC (or control) port accepts connections; its exit is an error with its log."""
        m = self.node(node_id)
        host, port = m.grpc_address.rsplit(":", 1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if m.proc is None or m.proc.poll() is not None:
                code = m.proc.returncode if m.proc else None
                raise RuntimeError(f"node {m.node_id} exited with {code}; its log ({m.log_path}):\n{m.log_tail()}")
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"node {m.node_id} did not open {m.grpc_address} within {timeout_s:.0f}s (log {m.log_path})")

    def start(self, timeout_s: float = 30.0) -> LocalCluster:
        """Spawn every node and wait until each serves gRPC (not yet for a leader)."""
        self.prepare()
        try:
            for m in self.members:
                self.spawn(m.node_id)
            for m in self.members:
                self.wait_ready(m.node_id, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_for_leader(self, timeout_s: float = 30.0) -> Any:
        """The leader's StatusResponse once the members agree on it and recovery is configured;
        then the rollout mode is made :attr:`mode` (a reused directory may hold another)."""
        with self.client() as ops:
            leader = ops.wait_for_leader(timeout_s, recovery=self.nodes > 1)
            if self.mode:
                from waitgraph.ops.render import enum_text

                current = enum_text(leader.DESCRIPTOR.fields_by_name["mode"].enum_type, leader.mode)
                if current != self.mode:
                    from waitgraph.statemachine.recovery_state import RolloutMode

                    ops.set_mode(RolloutMode(self.mode))
                    leader = ops.status(leader.grpc_address, fresh=True)
            return leader

    def node(self, node_id: str) -> LocalNode:
        self.prepare()
        for m in self.members:
            if m.node_id == node_id:
                return m
        raise KeyError(node_id)

    def kill(self, node_id: str) -> None:
        """SIGKILL one node: a crash."""
        self.terminate(node_id, 10.0, signal.SIGKILL)

    def terminate(self, node_id: str, timeout_s: float = 15.0, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """Send ``sig`` (SIGTERM: the graceful stop) to one node, wait for it to exit, SIGKILL it after
        ``timeout_s``. Its exit code (None: never started)."""
        m = self.node(node_id)
        self._signal([m], sig, timeout_s)
        return m.proc.returncode if m.proc is not None else None

    def _signal(self, nodes: Sequence[LocalNode], sig: signal.Signals, timeout_s: float) -> None:
        running = [m.proc for m in nodes if m.proc is not None and m.proc.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
        deadline = time.monotonic() + timeout_s
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def exited(self) -> list[LocalNode]:
        """Nodes that were started and are no longer running."""
        return [m for m in self.members if m.proc is not None and m.proc.poll() is not None]

    def logs(self, chars: int = 4000) -> str:
        """Every node's log tail under a ``===== <id>`` line: what a failed test prints."""
        return "\n".join(f"===== {m.node_id}\n{m.log_tail(chars)}" for m in self.members)

    def stop(self, timeout_s: float = 15.0, *, graceful: bool = True) -> dict[str, int | None]:
        """SIGTERM every node, wait for them together, SIGKILL the rest (``graceful=False``: SIGKILL
        at once, a crash of every node). Exit codes by node id."""
        self._signal(self.members, signal.SIGTERM if graceful else signal.SIGKILL, timeout_s)
        return {m.node_id: (m.proc.returncode if m.proc else None) for m in self.members}

    def close(self, remove: bool | None = None, *, graceful: bool = True) -> dict[str, int | None]:
        """Stop every node; remove the directory when this object created it (or ``remove``)."""
        codes = self.stop(graceful=graceful)
        if self.root is not None and (self.created_root if remove is None else remove):
            shutil.rmtree(self.root, ignore_errors=True)
        return codes

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(eq=False)
class NodeHandle:
    """One node of a :class:`LocalCluster` with its actions at hand, under the short names the
    tests' harnesses and the benchmark use (two handles are the same node only if the same object)."""

    launcher: LocalCluster
    member: LocalNode
    ready_timeout_s: float = 30.0
    """How long :meth:`wait_ready` waits for the node's port."""
    stop_timeout_s: float = 15.0
    """How long :meth:`terminate` waits before SIGKILL."""

    @property
    def name(self) -> str:
        return self.member.node_id

    @property
    def raft(self) -> str:
        return self.member.raft_address

    @property
    def grpc(self) -> str:
        return self.member.grpc_address

    @property
    def data(self) -> Path:
        return self.member.data_dir

    @property
    def log(self) -> Path:
        return self.member.log_path

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.member.proc

    def spawn(self) -> None:
        self.launcher.spawn(self.name)

    def wait_ready(self) -> None:
        self.launcher.wait_ready(self.name, self.ready_timeout_s)

    def start(self) -> None:
        self.spawn()
        self.wait_ready()

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed by the process itself."""
        self.launcher.kill(self.name)

    def terminate(self, timeout_s: float | None = None) -> int | None:
        """SIGTERM and wait: the graceful stop (SIGKILL after ``timeout_s``, default
        :attr:`stop_timeout_s`). The exit code."""
        return self.launcher.terminate(self.name, self.stop_timeout_s if timeout_s is None else timeout_s)

    def alive(self) -> bool:
        return self.member.alive()

    def log_text(self) -> str:
        return self.member.log_text()


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


__all__ = ["Credentials", "LocalCluster", "LocalNode", "NodeHandle", "free_ports"]
