"""Cluster benchmark: three real ``waitgraph serve`` processes on loopback, driven over gRPC,
side by side with raw pysyncobj (``scripts/bench_raw_raft.py``) in the same run.

    scripts/bench cluster [--quick] [--soak-s 60] [--samples N] [--seconds S] [--profile] ...

Prints markdown tables; asserts nothing, and never exits non-zero because a target is missed (it
does exit 1 when a phase could not produce its figures at all, e.g. the cluster did not start).

The cluster: 3 nodes (``python -m waitgraph serve``, i.e. ``waitgraph serve``) started by the one
launcher (``waitgraph.dev.localcluster.LocalCluster``): free loopback ports, a temporary data
directory, a generated cluster secret (``--secret-file``, mode 0600) and a generated tokens file
(sha256 entries, one agent token per simulated agent, one operator token, one admin token).
Every node runs with the defaults (detection every 25 ms, confirmation window 500 ms) except
``--initial-mode auto`` (the core's default, shadow, never cancels, so there would be no recovery
to time). Every process started here is killed at exit, on Ctrl-C, SIGTERM or an exception.

The workload (every RegisterWait is valid and APPLIED, and no wait-for cycle ever forms): agent
``tNN`` owns two executions, ``H`` that acquired ``resource:r-tNN`` and never waits, and ``W``
that waits on the resource of the next agent (held by that agent's ``H``). One iteration of an
agent is ``RegisterWait(W -> next resource, edge_version=v)`` then ``CloseWait(W, v)``; ``v``
grows by one each time. "Registrations/s" counts APPLIED RegisterWait calls only; each one is
followed by a CloseWait, so the cluster commits twice as many writes.

Figures (all times are the client's ``time.perf_counter``; the client is one asyncio process
with one grpc.aio channel per node, every call carrying its agent's bearer token):

1. unary RegisterWait latency at the leader: one agent, one call at a time (each RegisterWait is
   followed by an untimed-for-the-target CloseWait), ``--samples`` samples after 50 warm-ups;
   p50/p99 of the RegisterWait round trip (gRPC + auth + Raft commit on a majority + apply).
2. throughput: 64 agents, each with one call outstanding (closed loop), to the leader, for
   ``--seconds``; APPLIED RegisterWait per second of wall time. Also the per-call latency under
   that load, log entries per write (group commit), and the CPU each process used. Measured two
   ways, labelled: (2) as an agent runtime runs it, ``--sdk-procs`` processes (default 4,
   ``--sdk-worker``) each hosting 64/N agents that share one ``waitgraph.sdk.Client``: every write
   acts as its own agent's token and has its own request id, and the client coalesces the
   writes issued together into ``WriteBatch`` calls; (2u) one unary RPC per write, every agent
   in this one asyncio process on raw stubs (``--no-unary`` skips it).
3. the same with all 64 agents connected to a follower (which forwards writes to the leader and
   answers once its own replica applied them): 3 (SDK) and 3u (unary).
   (full run only) 3b / 3bu: RegisterWait only, each re-registering the open edge with a higher
   edge_version (no CloseWait), to the leader.
4. recovery: ``--recovery-trials`` times, two fresh executions of two agents ``ra``/``rb``, each
   holding a fresh resource, A waits on B's resource; then the timed RegisterWait of B on A's
   resource closes the 2-cycle. Time from sending that RegisterWait until the victim's own
   ``WatchEvents`` stream (opened on the leader before the trial) delivers ``CancelRequested``
   for it. ``CancelRequested`` is emitted by the applied ``CommitRecovery`` log entry that also
   raised the epoch (``EpochCommitted``) and moved the victim WAITING -> CANCELLING; the trial
   also checks that the ``VictimChosen`` it got carries an epoch. Reported with the breakdown
   (until ``RecoveryProposed`` reached the stream) next to the configured confirmation window.
   The victim acknowledges afterwards (untimed), the survivor completes.
5. failover: the leader is killed with SIGKILL; time from the kill until a write (a Heartbeat of
   agent ``fo``, one request id per trial, retried on both survivors every ~20 ms with a 0.5 s
   deadline) returns OK, i.e. committed by the new leader. The killed node is restarted and
   caught up before the next trial. The cluster is otherwise idle.
6. soak: the workload of 2 (through the SDK; unary with ``--sdk-procs 0``) against the leader for
   ``--soak-s`` seconds while Status is polled on
   every node every 0.5 s (lag of a non-leader = the current leader's commit index - its applied
   index, in log entries; leader changes are recorded). After the load stops: time until the
   three replicas report the same applied index and the same state digest
   (``Status(include_digest)``, which serializes the whole state: it can take seconds).

7. beside etcd (issue #20; ``--etcd auto``, the default, when Debian's ``etcd-server`` and
   ``golang-etcd-server-dev`` are installed; ``--etcd only`` runs this alone, ``--etcd off``
   skips it): ``--rounds`` rounds, each a fresh durable waitgraph cluster and a fresh durable
   3-member etcd cluster (``scripts/etcd_bench.py``), alternating which goes first, on the same
   shapes: one writer's p50/p99 (``--versus-samples``), 64 unary writers (RegisterWait vs Put),
   64 writers through the SDK vs etcd Put and vs a Txn (compare mod_revision, put 2 keys), CPU
   per write of every process and of the three servers alone, failover; in each round, between
   the two, the lone write again below gRPC (:func:`raft_alone`: pysyncobj as it comes, and
   waitgraph's Raft layer, in-process at the leader), which with the section's do-nothing call
   (through grpc.aio and through the front) says what a unary write cannot go under while the
   replication path stays as it is, and the CPU of apply alone (``bench_apply.py``) beside etcd's
   members' whole CPU per put; then one not-durable pair (``--no-fsync`` / ``--unsafe-no-fsync``).
   Round 1's waitgraph cluster also runs the single writer and the SDK shape again under
   ``bench_raw_raft.py``'s huge-length attack on all three Raft ports (issue
   #15). Prints the issue's table with waitgraph / etcd ratios; ``--json-out`` saves the figures.

8. hand-off latency (issue #21; ``--handoff-rounds``): one resource, a holder and a waiter (two
   agents, two SDK sessions on the leader): time from sending the holder's Release until the
   waiter holds it, two ways alternating per round: **hand-off** (the waiter is queued in
   ``holding()``; the Release grants it in the same apply and ``holding()`` returns
   ``handed_over`` once its ``WaitClosed(granted)`` reached the session) beside the anchor
   **wake-and-race** (the waiter registers no wait and retries ``Acquire`` with a jittered
   exponential backoff, 5 ms doubling to 50 ms: :func:`acquire_racing`).
9. a contended pool (``--pool-s``, ``--pool-agents`` 64, ``--pool-slots`` 8): the agents in
   ``--sdk-procs`` processes (as figure 2 spreads them), one Client and session each, loop hold /
   ``--pool-work-ms`` of work / release for ``--pool-s`` seconds, the same two ways
   (``--pool-rounds``, alternating): acquisitions/s, the wait from the first Acquire until
   holding (p50/p99), and the fewest / most acquisitions of one agent (fairness).
   ``--handoff only`` runs figures 8 and 9 alone on the cluster, ``--handoff off`` skips them.

``--smoke`` shrinks every phase to a tiny size (tests/test_bench_smoke.py); its figures mean
nothing.

``--profile`` runs py-spy (``--gil``: what each process's one Python core is spent on) on the
leader, a follower and the client (with the SDK: one of its worker processes, from the moment the
workers start writing) during figure 2 and prints the top frames; ``--profile native``
adds C/Cython frames (py-spy then pauses the processes per sample). ``--node-switch-interval-ms``
is an experiment: the nodes start with ``sys.setswitchinterval`` changed.

``--timeline DIR`` is a diagnosis: the nodes, figure 2's SDK workers and figure 1's client write
timed events into DIR (``scripts/bench_timeline.py``, wrappers installed from outside
``cluster/``), and the details show where one lone unary write's time went (figure 1) and one
WriteBatch call's (figure 2), stage by stage, from the client's send to its reply, through the
follower whose answer made the quorum. Every
throughput row also says how many of each process's threads were runnable but waiting for a
core, on average (``/proc/PID/task/*/schedstat``: the run-queue wait of every thread over the wall
time): on 2 cores shared by 8 processes a hand-off between them waits about as long as it runs.

raw pysyncobj and the RaftNode wrapper come from ``scripts/bench_raw_raft.py`` (imported), run
before the cluster starts with the same sample count, 64 submitters and the same duration. They
measure in-process at the leader, without any client round trip, with the same ``build_conf``
settings as the nodes (their ``max_outstanding`` is 100,000 instead of the node's 10,000).

Durability: the nodes run with the default, durable journal (cluster/node/raft/_acks.py: an
entry is acknowledged only once the journal is flushed, one flush per tick); ``--no-fsync`` runs
them with ``waitgraph serve --no-fsync`` (pysyncobj's mmap journal, never flushed while running,
not durable across a power cut). Run the benchmark with and without it to compare; the output
also shows what one flush of a dirty journal page costs on the data directory's file system. The
nodes run with ``--rate-limit-per-s 0``: the benchmark's agents call as fast as they can, which the
per-token rate limit exists to stop.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import collections
import contextlib
import dataclasses
import importlib.util
import json
import os
import platform
import random
import re
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import bench_timeline  # noqa: E402 - beside this script (sys.path[0]); wraps nothing unless asked
import grpc  # noqa: E402
import psutil  # noqa: E402

from waitgraph.dev.localcluster import LocalCluster, LocalNode, NodeHandle  # noqa: E402
from waitgraph.node.config import ServeConfig  # noqa: E402
from waitgraph.node.front import find_binary  # noqa: E402
from waitgraph.proto.v1 import (  # noqa: E402
    agent_pb2,
    agent_pb2_grpc,
    commands_pb2,
    operator_pb2,
    operator_pb2_grpc,
    types_pb2,
)
from waitgraph.statemachine import Envelope, StateMachine  # noqa: E402
from waitgraph.statemachine import commands as C  # noqa: E402
from waitgraph.statemachine.enums import EffectOutcome  # noqa: E402
from waitgraph.wire import convert  # noqa: E402

LEASE_MS = 3_600_000
AGENTS = 64
WINDOW_MS: int = ServeConfig.__dataclass_fields__["recovery_confirmation_window_ms"].default  # type: ignore[assignment]
"""The default confirmation window every node runs with here (cluster/node/config.py)."""
DETECT_MS: int = ServeConfig.__dataclass_fields__["detect_interval_ms"].default  # type: ignore[assignment]
"""The default leader loop period (detection, votes, commits)."""
APPLIED = types_pb2.RESULT_APPLIED
NODE_SWITCH_INTERVAL_S: float | None = None
TIMELINE_DIR: str | None = None
"""``--timeline``: where the nodes, figure 2's SDK workers and figure 1's client write their events
(scripts/bench_timeline.py)."""
CHANNEL_OPTIONS = [
    # A restarted node must be reachable again at once, not after gRPC's reconnect backoff (1 s+).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]


# -- small helpers ----------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"


def rate(x: float) -> str:
    return f"{x:,.0f}"


def fs_type(path: Path) -> str:
    best, kind = "", "?"
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def _family(pid: int | str) -> list[int | str]:
    """``pid`` and its live descendants: a node's native gRPC front (waitgraph-front) is its child
    and works for it, so its CPU and waits are the node's. Not for this process: its children are
    the nodes and clients it measures apart."""
    if pid == "self" or pid == os.getpid():
        return [pid]
    try:
        return [pid, *(c.pid for c in psutil.Process(int(pid)).children(recursive=True))]
    except psutil.Error:
        return [pid]


def run_queue_wait_s(pid: int | str = "self") -> float:
    """Seconds the threads of ``pid`` and of its live children have spent runnable but waiting
    for a core (the second field of each ``/proc/PID/task/TID/schedstat``; threads that ended are
    not counted); NaN where the kernel does not say."""
    total = 0.0
    for member in _family(pid):
        try:
            tasks = os.listdir(f"/proc/{member}/task")
        except OSError:
            if member == pid:
                return float("nan")
            continue
        for tid in tasks:
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int(Path(f"/proc/{member}/task/{tid}/schedstat").read_text().split()[1]) / 1e9
    return total


class CpuMeter:
    """CPU used by each process (with its live children: a node's native front) between start()
    and stop(), in cores; plus ``others``: what every other process on the machine used meanwhile
    (busy time of the whole machine minus ours), and ``steal`` (time the hypervisor gave to
    someone else)."""

    def __init__(self, procs: dict[str, int]) -> None:
        self.pids = dict(procs)
        self.t0 = 0.0
        self.before: dict[str, float] = {}
        self.sys0: Any = None
        self.meter_result: dict[str, float] = {}
        """What the last stop() returned (for callers that do not call it themselves)."""
        self.waited0: dict[str, float] = {}
        self.meter_waits: dict[str, float] = {}
        """Per process, how many of its threads were runnable but waiting for a core between
        start() and stop(), on average: the run-queue wait of all its threads
        (``/proc/PID/task/*/schedstat``) over the wall time. Can exceed the cores: Go's runtime
        (etcd) keeps more runnable threads than there are cores."""

    @staticmethod
    def _cpu(pid: int) -> float:
        try:
            t = psutil.Process(pid).cpu_times()
            total = float(t.user + t.system + t.children_user + t.children_system)
        except psutil.Error:
            return float("nan")
        for child in _family(pid)[1:]:
            with contextlib.suppress(psutil.Error):
                c = psutil.Process(int(child)).cpu_times()
                total += c.user + c.system
        return total

    def start(self) -> CpuMeter:
        self.t0 = time.perf_counter()
        self.before = {k: self._cpu(p) for k, p in self.pids.items()}
        self.waited0 = {k: run_queue_wait_s(p) for k, p in self.pids.items()}
        self.sys0 = psutil.cpu_times()
        return self

    def stop(self) -> dict[str, float]:
        wall = time.perf_counter() - self.t0
        out = {k: (self._cpu(p) - self.before[k]) / wall for k, p in self.pids.items()}
        s0, s1 = self.sys0, psutil.cpu_times()
        busy = (sum(s1) - s1.idle - getattr(s1, "iowait", 0)) - (sum(s0) - s0.idle - getattr(s0, "iowait", 0))
        steal = getattr(s1, "steal", 0) - getattr(s0, "steal", 0)
        out["others"] = max(0.0, (busy - steal) / wall - sum(out.values()))
        out["steal"] = steal / wall
        self.meter_waits = {k: (run_queue_wait_s(p) - self.waited0[k]) / wall for k, p in self.pids.items()}
        return out


# -- the cluster ------------------------------------------------------------------------------------


def node_command(lc: LocalCluster, m: LocalNode) -> list[str]:
    """``waitgraph serve``, after what ``--node-switch-interval-ms`` and ``--timeline`` ask for."""
    first = []
    if NODE_SWITCH_INTERVAL_S is not None:
        # Experiment only (--node-switch-interval-ms): the interpreter's GIL switch interval changed first.
        first.append(f"sys.setswitchinterval({NODE_SWITCH_INTERVAL_S!r})")
    if TIMELINE_DIR is not None:  # --timeline: scripts/bench_timeline.py wraps a few methods first
        first.append(
            f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
            f"import bench_timeline; bench_timeline.install_node({TIMELINE_DIR!r})"
        )
    if not first:
        return lc.serve_command(m)
    boot = (  # the same command, after those
        f"import runpy, sys; {'; '.join(first)}; "
        "sys.argv = ['waitgraph', *sys.argv[1:]]; runpy.run_module('waitgraph', run_name='__main__')"
    )
    return [m.python, "-c", boot, *lc.serve_argv(m)]


class Node(NodeHandle):
    """One node of the cluster, as the launcher started it; registered for the kill at exit."""

    def spawn(self) -> None:
        super().spawn()
        assert self.proc is not None
        _LIVE.add(self.proc)

    def kill(self) -> None:
        super().kill()
        if self.proc is not None:
            _LIVE.discard(self.proc)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def wait_port(self) -> None:
        await asyncio.to_thread(self.wait_ready)

    def log_tail(self, n: int = 3000) -> str:
        return self.member.log_tail(n)


def _load_script(name: str) -> Any:
    """A sibling script imported as a module (scripts/ is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


_PROCESSES = _load_script("etcd_bench")
_LIVE: set[subprocess.Popen[bytes]] = _PROCESSES._LIVE
"""Every node process started and not yet reaped, waitgraph's and etcd's (one registry, the etcd
script's): killed at exit whatever happens."""
_kill_all = _PROCESSES.kill_all


atexit.register(_kill_all)


@dataclass
class BenchAgent:
    name: str
    token: str
    n: int = 0
    v: int = 0
    W: str = ""
    H: str = ""
    own: str = ""
    wait_on: str = ""

    @property
    def md(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    def rid(self) -> str:
        self.n += 1
        return f"{self.name}-{self.n}"


class Cluster:
    def __init__(
        self, root: Path, agent_names: list[str], extra_args: list[str], env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.launcher = LocalCluster(
            root=root,
            nodes=3,
            mode=None,
            agents=agent_names,
            serve_args=extra_args,
            log_level=None,
            node_command=node_command,
            extra_env=(lambda _m: env) if env else None,
        )
        self.launcher.prepare()
        creds = self.launcher.credentials
        assert creds is not None
        self.agents = {a: BenchAgent(a, creds.agents[a]) for a in agent_names}
        self.ops_token = creds.operator
        self.nodes = [Node(self.launcher, m) for m in self.launcher.members]
        self.channels: dict[str, grpc.aio.Channel] = {}
        self.example_command = shlex.join(["waitgraph", *self.launcher.serve_argv(self.launcher.members[0])])

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        for node in self.nodes:
            node.spawn()
        for node in self.nodes:
            await node.wait_port()
        for node in self.nodes:
            self.channels[node.name] = grpc.aio.insecure_channel(node.grpc, options=CHANNEL_OPTIONS)

    async def close(self) -> None:
        for ch in self.channels.values():
            with contextlib.suppress(Exception):
                await ch.close()
        for node in self.nodes:
            node.kill()

    def by_name(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def agent_stub(self, node: Node) -> agent_pb2_grpc.AgentServiceStub:
        return agent_pb2_grpc.AgentServiceStub(self.channels[node.name])  # type: ignore[no-untyped-call]

    def ops_stub(self, node: Node) -> operator_pb2_grpc.OperatorServiceStub:
        return operator_pb2_grpc.OperatorServiceStub(self.channels[node.name])  # type: ignore[no-untyped-call]

    @property
    def ops_md(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.ops_token}"),)

    # -- status -----------------------------------------------------------------------------------

    async def status(self, node: Node, digest: bool = False, timeout_s: float = 2.0) -> Any:
        return await self.ops_stub(node).Status(
            operator_pb2.StatusRequest(include_digest=digest), metadata=self.ops_md, timeout=timeout_s
        )

    async def statuses(self, digest: bool = False) -> dict[str, Any]:
        live = [n for n in self.nodes if n.alive()]

        async def one(n: Node) -> Any:
            try:
                return await self.status(n, digest)
            except grpc.aio.AioRpcError:
                return None

        got = await asyncio.gather(*(one(n) for n in live))
        return {n.name: s for n, s in zip(live, got, strict=True)}

    async def leader(self, timeout_s: float = 30.0) -> Node:
        """The node every live member names as leader, which says it is leader with a quorum."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            sts = await self.statuses()
            if sts and all(s is not None for s in sts.values()):
                named = {s.leader_id for s in sts.values()}
                if len(named) == 1 and "" not in named:
                    lid = named.pop()
                    st = sts.get(lid)
                    if st is not None and st.role == "leader" and st.has_quorum:
                        return self.by_name(lid)
            await asyncio.sleep(0.05)
        raise TimeoutError("no agreed leader with a quorum")

    async def caught_up(self, timeout_s: float = 60.0) -> float:
        """Wait until every node is live and applied the leader's commit index; returns the time taken."""
        t0 = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        leader = await self.leader(timeout_s)
        while time.monotonic() < deadline:
            sts = await self.statuses()
            lst = sts.get(leader.name)
            if lst is not None and len(sts) == 3 and all(s is not None for s in sts.values()):
                applied = min(s.applied_index for s in sts.values())
                if applied >= lst.commit_index:
                    return time.perf_counter() - t0
            await asyncio.sleep(0.05)
        raise TimeoutError("a node did not catch up")

    async def converged(self, timeout_s: float) -> dict[str, Any]:
        """Poll until the three replicas report the same applied index and the same state digest.

        Each node's (applied index, digest) pair is one consistent read of its replica (one Status
        with include_digest), so pairs taken at different moments compare fine once the index
        stops moving. Returns the time it took (None: not within ``timeout_s``), the last pair
        seen on each node, and how long the digest reads took.
        """
        t0 = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        read_s: list[float] = []

        async def one(n: Node) -> None:
            t = time.perf_counter()
            try:
                st = await self.status(n, digest=True, timeout_s=20.0)
                last[n.name] = (st.applied_index, st.state_digest[:16])
            except grpc.aio.AioRpcError as exc:
                last[n.name] = f"{exc.code().name}: {(exc.details() or '')[:80]}"
            read_s.append(time.perf_counter() - t)

        while time.monotonic() < deadline:
            await asyncio.gather(*(one(n) for n in self.nodes if n.alive()))
            pairs = set(last.values())
            if len(last) == 3 and len(pairs) == 1 and isinstance(next(iter(pairs)), tuple):
                return {"after_s": time.perf_counter() - t0, "last": dict(last), "read_s": max(read_s)}
            await asyncio.sleep(0.1)
        return {"after_s": None, "last": dict(last), "read_s": max(read_s, default=float("nan"))}

    # -- setup writes -----------------------------------------------------------------------------

    async def do(self, node: Node, agent: BenchAgent, cmd: Any) -> Any:
        request = convert.request_from_command(cmd, agent.rid())
        out = await getattr(self.agent_stub(node), cmd.KIND)(request, metadata=agent.md, timeout=10)
        if out.result != APPLIED:
            raise RuntimeError(f"setup: {cmd.KIND} by {agent.name}: {out.code} {out.message}")
        return out


# -- the workload -----------------------------------------------------------------------------------


async def setup_ring(cluster: Cluster, node: Node, agents: list[BenchAgent]) -> None:
    """Each agent: a session, H holding its own resource, W RUNNING; W waits on the next agent's resource."""
    sem = asyncio.Semaphore(16)

    async def one(a: BenchAgent) -> None:
        async with sem:
            a.H, a.W, a.own = f"exec:H-{a.name}", f"exec:W-{a.name}", f"resource:r-{a.name}"
            await cluster.do(node, a, C.JoinSession(agent_id=a.name, lease_ms=LEASE_MS))
            for ex in (a.H, a.W):
                run = f"run-{ex[5:]}"
                await cluster.do(node, a, C.CreateExecution(execution_id=ex, run_id=run, observed_cancel_generation=0))
                await cluster.do(node, a, C.StartExecution(execution_id=ex, generation=1, observed_cancel_generation=0))
            await cluster.do(node, a, C.CreateTarget(target_id=a.own))
            await cluster.do(node, a, C.Acquire(target_id=a.own, execution_id=a.H, generation=1, observed_epoch=0))

    await asyncio.gather(*(one(a) for a in agents))
    for i, a in enumerate(agents):
        a.wait_on = agents[(i + 1) % len(agents)].own if len(agents) > 1 else a.own


def register_req(a: BenchAgent) -> commands_pb2.RegisterWaitRequest:
    return commands_pb2.RegisterWaitRequest(
        request_id=a.rid(),
        waiter_id=a.W,
        waiter_generation=1,
        target_id=a.wait_on,
        target_generation=1,
        reason="bench",
        edge_version=a.v,
    )


def close_req(a: BenchAgent) -> commands_pb2.CloseWaitRequest:
    return commands_pb2.CloseWaitRequest(
        request_id=a.rid(), waiter_id=a.W, waiter_generation=1, target_id=a.wait_on, edge_version=a.v, reason="done"
    )


@dataclass
class DriveResult:
    seconds: float
    registrations: int
    closes: int
    other: collections.Counter[str] = field(default_factory=collections.Counter)
    latencies: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    waits: dict[str, float] = field(default_factory=dict)
    """CpuMeter.meter_waits of the run (threads waiting for a core, on average), the SDK workers' too."""
    entries: int = 0
    batches: int = 0
    """WriteBatch calls (SDK rows only) and the writes they carried."""
    batch_items: int = 0

    @property
    def reg_per_s(self) -> float:
        return self.registrations / self.seconds

    @property
    def writes_per_s(self) -> float:
        return (self.registrations + self.closes) / self.seconds


async def drive(
    cluster: Cluster,
    agents: list[BenchAgent],
    node: Node,
    seconds: float,
    close: bool = True,
    cpu: CpuMeter | None = None,
) -> DriveResult:
    """Every agent in a closed loop (one call outstanding each) against ``node`` for ``seconds``."""
    stub = cluster.agent_stub(node)
    res = DriveResult(seconds, 0, 0)
    leader = await cluster.leader()
    before = (await cluster.status(leader)).commit_index
    if cpu is not None:
        cpu.start()
    t0 = time.perf_counter()
    stop = t0 + seconds

    async def loop(a: BenchAgent) -> None:
        while time.perf_counter() < stop:
            a.v += 1
            t = time.perf_counter()
            try:
                out = await stub.RegisterWait(register_req(a), metadata=a.md, timeout=10)
            except grpc.aio.AioRpcError as exc:
                res.other[f"RegisterWait {exc.code().name}"] += 1
                await asyncio.sleep(0.01)
                continue
            res.latencies.append(time.perf_counter() - t)
            if out.result == APPLIED:
                res.registrations += 1
            else:
                res.other[f"RegisterWait {out.code}"] += 1
            if not close:
                continue
            try:
                out = await stub.CloseWait(close_req(a), metadata=a.md, timeout=10)
            except grpc.aio.AioRpcError as exc:
                res.other[f"CloseWait {exc.code().name}"] += 1
                await asyncio.sleep(0.01)
                continue
            if out.result == APPLIED:
                res.closes += 1
            else:
                res.other[f"CloseWait {out.code}"] += 1

    await asyncio.gather(*(loop(a) for a in agents))
    res.seconds = time.perf_counter() - t0
    if cpu is not None:
        res.cpu = cpu.stop()
        res.waits = cpu.meter_waits
    if not close:  # leave every W RUNNING again
        await asyncio.gather(*(stub.CloseWait(close_req(a), metadata=a.md, timeout=10) for a in agents))
    with contextlib.suppress(Exception):
        res.entries = (await cluster.status(await cluster.leader())).commit_index - before
    return res


# -- the SDK workload: agents in a few processes, one shared Client each ----------------------------


async def run_workers(
    specs: list[dict[str, Any]],
    cpu: CpuMeter | None = None,
    on_started: Callable[[list[int]], None] | None = None,
) -> list[dict[str, Any]]:
    """One ``--sdk-worker`` process per spec (the spec as JSON on its stdin, its result as JSON on
    its stdout), all at once; ``cpu`` starts at the specs' common ``start_at`` and stops when the
    last worker is done (its figures in ``cpu.meter_result``); ``on_started`` gets the workers'
    pids at ``start_at``, once their imports and connections are behind them (``--profile``)."""
    workers = []
    for spec in specs:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(Path(__file__).resolve()),
            "--sdk-worker",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(spec).encode())
        proc.stdin.close()
        workers.append(proc)
    if cpu is not None or on_started is not None:
        await asyncio.sleep(max(0.0, specs[0]["start_at"] - time.time()))
    if on_started is not None:
        on_started([w.pid for w in workers])
    if cpu is not None:
        cpu.start()
    outs = await asyncio.gather(*(w.communicate() for w in workers))
    if cpu is not None:
        cpu.meter_result = cpu.stop()
    got = []
    for (out, err), w in zip(outs, workers, strict=True):
        if w.returncode != 0:
            raise RuntimeError(f"sdk worker exited {w.returncode}: {err.decode(errors='replace')[-2000:]}")
        got.append(json.loads(out))
    return got


async def drive_sdk(
    cluster: Cluster,
    agents: list[BenchAgent],
    node: Node,
    seconds: float,
    procs: int,
    close: bool = True,
    cpu: CpuMeter | None = None,
    timeline: str | None = None,
    batching: bool = True,
    on_started: Callable[[list[int]], None] | None = None,
    otel_endpoint: str | None = None,
) -> DriveResult:
    """The workload of :func:`drive` as an agent runtime runs it: ``procs`` processes
    (``--sdk-worker``), each hosting ``len(agents) / procs`` agents that share one
    :class:`waitgraph.sdk.Client` (default batching: writes issued in the same loop iteration go as
    one WriteBatch; ``batching=False``: every write is its own unary RPC, as a client without the
    SDK sends it). Every write acts as its own agent's token and has its own request id.
    ``on_started``: as :func:`run_workers`'. ``otel_endpoint``: the workers trace (figure 10): each
    write in its agent's sampled span, exported there over OTLP/gRPC."""
    res = DriveResult(seconds, 0, 0)
    leader = await cluster.leader()
    before = (await cluster.status(leader)).commit_index
    groups = [agents[i::procs] for i in range(procs)]
    start_at = time.time() + 2.0  # every worker imported and connected by then
    specs = [
        {
            "mode": "ring",
            "endpoint": node.grpc,
            "seconds": seconds,
            "start_at": start_at,
            "close": close,
            "timeline": timeline,
            "batching": batching,
            "otel_endpoint": otel_endpoint,
            "agents": [{"name": a.name, "token": a.token, "W": a.W, "wait_on": a.wait_on, "v": a.v} for a in group],
        }
        for group in groups
    ]
    worker_cpu = worker_waits = 0.0
    seconds_seen = []
    batches = items = 0
    for got in await run_workers(specs, cpu, on_started):
        res.registrations += got["registrations"]
        res.closes += got["closes"]
        res.other.update(got["other"])
        res.latencies.extend(got["latencies"])
        seconds_seen.append(got["seconds"])
        batches += got["batches"]
        items += got["items"]
        worker_cpu += got["cpu_s"] / max(got["seconds"], 1e-9)
        worker_waits += got["waited_s"] / max(got["seconds"], 1e-9)
        for a in agents:
            if a.name in got["v"]:
                a.v = got["v"][a.name]
    res.seconds = max(seconds_seen)
    if cpu is not None:
        res.cpu = cpu.meter_result
        res.waits = cpu.meter_waits | {f"sdk x{procs}": worker_waits}
    if res.cpu:
        # The workers' own CPU during their run (each measures itself: they exit before the meter
        # stops); ``others`` was computed without them, so it is corrected here.
        res.cpu[f"sdk x{procs}"] = worker_cpu
        res.cpu["others"] = max(0.0, res.cpu["others"] - worker_cpu)
    res.batches, res.batch_items = batches, items
    with contextlib.suppress(Exception):
        res.entries = (await cluster.status(await cluster.leader())).commit_index - before
    return res


def sdk_worker() -> int:
    """``--sdk-worker``: one runtime process (spec as JSON on stdin, result as JSON on stdout)."""
    from waitgraph.sdk import Batching, Client, RpcError

    spec = json.loads(sys.stdin.read())
    if spec.get("mode") == "pool":
        print(json.dumps(asyncio.run(pool_worker(spec))))
        return 0
    if spec.get("timeline"):
        bench_timeline.install_sdk(spec["timeline"])
    tracer = None
    if spec.get("otel_endpoint"):
        # An agent process that traces: OTEL_EXPORTER_OTLP_ENDPOINT and nothing else of ours.
        from waitgraph.sdk.tracing import caller_traceparent
        from waitgraph.wire import tracing

        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = spec["otel_endpoint"]
        if not tracing.configure("bench-agents"):
            raise RuntimeError("tracing was asked for but is not configured")
        tracer = tracing.tracer()

    def register(a: dict[str, Any], v: int) -> C.RegisterWait:
        return C.RegisterWait(
            waiter_id=a["W"],
            waiter_generation=1,
            target_id=a["wait_on"],
            target_generation=1,
            reason="bench",
            edge_version=v,
            # traced: the wait stores its caller's context, as the SDK's Wait does
            trace_context=caller_traceparent() if tracer is not None else "",
        )

    def close(a: dict[str, Any], v: int) -> C.CloseWait:
        return C.CloseWait(waiter_id=a["W"], waiter_generation=1, target_id=a["wait_on"], edge_version=v, reason="done")

    async def main() -> dict[str, Any]:
        agents = spec["agents"]
        lat: list[float] = []
        other: collections.Counter[str] = collections.Counter()
        counts = {"registrations": 0, "closes": 0}
        versions = {a["name"]: a["v"] for a in agents}
        async with Client(
            [spec["endpoint"]],
            agents[0]["token"],
            call_timeout_s=10,
            retry_deadline_s=10,
            batching=Batching(enabled=spec.get("batching", True)),
        ) as client:
            await client.transport.channel(spec["endpoint"]).channel_ready()
            await asyncio.sleep(max(0.0, spec["start_at"] - time.time()))
            t0, cpu0, waited0 = time.perf_counter(), time.process_time(), run_queue_wait_s()
            stop = t0 + spec["seconds"]

            async def write(a: dict[str, Any], cmd: C.Command, n: int) -> bool:
                try:
                    await client.submit(cmd, request_id=f"{a['name']}-s{os.getpid()}-{n}", token=a["token"])
                    return True
                except RpcError as exc:
                    other[f"{cmd.KIND} {exc.status.name} {exc.code}"] += 1
                    await asyncio.sleep(0.01)
                    return False

            async def loop(a: dict[str, Any]) -> None:
                name, n = a["name"], 0
                while time.perf_counter() < stop:
                    versions[name] += 1
                    v = versions[name]
                    n += 1
                    with (
                        tracer.start_as_current_span("invoke_agent", attributes={"gen_ai.agent.id": name})
                        if tracer is not None
                        else contextlib.nullcontext()
                    ):
                        t = time.perf_counter()
                        if not await write(a, register(a, v), n):
                            continue
                        lat.append(time.perf_counter() - t)
                        counts["registrations"] += 1
                        if spec["close"]:
                            n += 1
                            closed = await write(a, close(a, v), n)  # (not `+= await`: other tasks add meanwhile)
                            counts["closes"] += closed

            await asyncio.gather(*(loop(a) for a in agents))
            elapsed, cpu_s, waited_s = (
                time.perf_counter() - t0,
                time.process_time() - cpu0,
                run_queue_wait_s() - waited0,
            )
            if not spec["close"]:  # leave every W RUNNING again
                for a in agents:
                    with contextlib.suppress(RpcError):
                        await client.submit(close(a, versions[a["name"]]), token=a["token"])
            batchers = list(client.transport._batchers.values())
        if tracer is not None:
            from waitgraph.wire import tracing

            tracing.shutdown()  # the spans still queued leave before the figures are handed back
        return {
            **counts,
            "other": dict(other),
            "latencies": [round(x, 6) for x in lat],
            "seconds": elapsed,
            "cpu_s": cpu_s,
            "waited_s": waited_s,
            "v": versions,
            "batches": sum(b.batches_sent for b in batchers),
            "items": sum(b.items_sent for b in batchers),
        }

    result = asyncio.run(main())
    if spec.get("timeline"):
        bench_timeline.flush()
    print(json.dumps(result))
    return 0


# -- hand-off beside wake-and-race (issue #21): the SDK's holding() vs a client retrying Acquire ----

RACE_FIRST_S = 0.005
RACE_CAP_S = 0.05
"""The wake-and-race client's backoff: after each refused Acquire it sleeps a random time in
[d/2, d] (equal jitter), d starting at 5 ms and doubling up to 50 ms (the SDK's own poll interval
for a local wait, ``Holding.poll_interval_s``)."""


async def acquire_racing(ex: Any, target_id: str, deadline: float | None = None) -> int | None:
    """Hold ``target_id`` the way a client without fair queues does: no wait registered, Acquire
    again after a backoff until it is granted. Returns the refused Acquires before the granted one
    (None: ``deadline``, a perf_counter time, passed first)."""
    from waitgraph.sdk import Conflict

    delay, refused = RACE_FIRST_S, 0
    while True:
        try:
            await ex.acquire(target_id)
            return refused
        except Conflict:
            refused += 1
        if deadline is not None and time.perf_counter() > deadline:
            return None
        await asyncio.sleep(random.uniform(delay / 2, delay))
        delay = min(delay * 2, RACE_CAP_S)


async def open_agents(stack: contextlib.AsyncExitStack, endpoint: str, agents: list[dict[str, str]]) -> list[Any]:
    """For each agent (name, token): its own Client (a session acts as its client's token), its
    session and one started execution, all closed by ``stack``. Returns the executions."""
    from waitgraph.sdk import Client

    async def one(a: dict[str, str]) -> Any:
        client = await stack.enter_async_context(Client([endpoint], a["token"], call_timeout_s=10, retry_deadline_s=10))
        session = await stack.enter_async_context(client.session(a["name"], lease_ms=LEASE_MS))
        return await stack.enter_async_context(session.execution(run_id=f"run-{a['name']}-{os.getpid()}"))

    return [await one(a) for a in agents]


async def phase_handoff(cluster: Cluster, pair: list[BenchAgent], rounds: int) -> dict[str, Any]:
    """Figure 8: one resource, a holder and one waiter (two agents, two SDK sessions on the
    leader, in this process). ``hand-off``: the waiter is in ``holding()`` (queued) when the
    holder releases; timed from sending the Release until the waiter's ``holding()`` returns,
    handed over (its WaitClosed ``granted`` reached its session). ``wake-and-race``: the waiter
    retries Acquire (:func:`acquire_racing`); timed from sending the Release until its Acquire
    returns granted. Alternating per round (even rounds hand-off first); the new holder is the
    holder of the next measurement. 5 warm-up rounds are not counted."""
    leader = await cluster.leader()
    target = f"resource:handoff-{os.getpid()}"
    out: dict[str, list[float]] = {"handoff": [], "race": [], "release": []}
    refused: list[int] = []
    not_handed = 0
    async with contextlib.AsyncExitStack() as stack:
        exs = await open_agents(stack, leader.grpc, [{"name": a.name, "token": a.token} for a in pair])
        holder, waiter = exs
        await holder.acquire(target)

        async def queued(ex: Any) -> None:
            # Until the leader's state has the waiter's wait in the target's grant queue (an
            # operator Graph read, untimed): only then is the Release a hand-over.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                g = await cluster.ops_stub(leader).Graph(
                    operator_pb2.GraphRequest(agent_id=ex.session.agent_id), metadata=cluster.ops_md, timeout=5
                )
                if any(
                    w.waiter_id == ex.execution_id and w.target_id == target and w.HasField("queue_position")
                    for w in g.waits
                ):
                    return
                await asyncio.sleep(0.002)
            raise TimeoutError(f"{ex.execution_id}'s wait on {target} was not queued within 10 s")

        async def release_then(pending: Awaitable[Any], queued_first: bool) -> tuple[float, float, Any]:
            task = asyncio.ensure_future(pending)
            await asyncio.sleep(0.03)  # the racing waiter has been refused a few times by then
            if queued_first:
                await queued(waiter)
            if task.done():
                raise RuntimeError(f"the waiter got {target} while it was held: {task.result()!r}")
            t0 = time.perf_counter()
            await holder.release(target)
            t_rel = time.perf_counter() - t0
            got = await asyncio.wait_for(task, 30)
            return time.perf_counter() - t0, t_rel, got

        for i in range(rounds + 5):
            for mode in ("handoff", "race") if i % 2 == 0 else ("race", "handoff"):
                counted = i >= 5
                if mode == "handoff":
                    h = waiter.holding(target)
                    took, t_rel, _ = await release_then(h.enter(), True)
                    if not h.handed_over:  # not a hand-over after all: counted here, not timed
                        not_handed += 1
                        counted = False
                else:
                    took, t_rel, n = await release_then(acquire_racing(waiter, target), False)
                    if counted:
                        refused.append(n)
                if counted:
                    out[mode].append(took)
                    out["release"].append(t_rel)
                holder, waiter = waiter, holder
        await holder.release(target)
    return {
        "n": len(out["handoff"]),
        "leader": leader.name,
        "handoff": _dist(out["handoff"]),
        "race": _dist(out["race"]),
        "release": _dist(out["release"]),
        "race_refused_mean": statistics.mean(refused) if refused else float("nan"),
        "not_handed_over": not_handed,
    }


def _dist(xs: list[float]) -> dict[str, float]:
    return {
        "p50": statistics.median(xs) if xs else float("nan"),
        "p99": pct(xs, 0.99),
        "max": max(xs, default=float("nan")),
        "n": len(xs),
    }


async def pool_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """``--sdk-worker`` with ``mode: pool``: this process's agents loop on the pool until
    ``seconds`` after ``start_at``: hold a slot (``handoff``: ``holding()``, queued and handed
    over; ``race``: :func:`acquire_racing`), work ``work_s``, release."""
    target, work_s, race = spec["target"], spec["work_s"], spec["how"] == "race"
    counts: dict[str, int] = {}
    waits: list[float] = []
    tally = {"handed_over": 0, "waited": 0, "refused": 0, "acquire_calls": 0}
    async with contextlib.AsyncExitStack() as stack:
        exs = await open_agents(stack, spec["endpoint"], spec["agents"])
        await asyncio.sleep(max(0.0, spec["start_at"] - time.time()))
        t0, cpu0 = time.perf_counter(), time.process_time()
        stop = t0 + spec["seconds"]

        async def loop(name: str, ex: Any) -> None:
            counts[name] = 0
            while time.perf_counter() < stop:
                t = time.perf_counter()
                if race:
                    n = await acquire_racing(ex, target, deadline=stop)
                    if n is None:
                        return
                    got = {"refused": n, "acquire_calls": n + 1, "waited": n > 0}
                else:
                    h = ex.holding(target)
                    await h.enter()
                    # one Acquire per try, one RegisterWait per wait; a hand-over needs no Acquire after its wait
                    got = {
                        "acquire_calls": 2 * h.waits + 1 - h.handed_over,
                        "handed_over": h.handed_over,
                        "waited": h.waits > 0,
                    }
                granted = time.perf_counter()
                if granted <= stop:  # (the ones granted after the end only drain the queue)
                    counts[name] += 1
                    waits.append(granted - t)
                    for k, v in got.items():
                        tally[k] += v
                await asyncio.sleep(work_s)
                if race:
                    await ex.release(target)
                else:
                    await h.exit(None)

        await asyncio.gather(*(loop(a["name"], ex) for a, ex in zip(spec["agents"], exs, strict=True)))
        cpu_s = time.process_time() - cpu0
    return {
        "counts": counts,
        "waits": [round(x, 6) for x in waits],
        "seconds": spec["seconds"],
        "cpu_s": cpu_s,
        **tally,
    }


async def phase_pool(
    cluster: Cluster, agents: list[BenchAgent], how: str, seconds: float, procs: int, slots: int, work_s: float
) -> dict[str, Any]:
    """Figure 9: ``len(agents)`` agents in ``procs`` processes (``--sdk-worker``, as figure 2
    spreads them), one pool of ``slots`` (fresh per measurement), each agent looping hold / work
    ``work_s`` / release for ``seconds``; ``how`` = ``handoff`` (the SDK's ``holding()``) or
    ``race`` (:func:`acquire_racing`)."""
    leader = await cluster.leader()
    target = f"pool:contended-{how}-{secrets.token_hex(3)}"
    await cluster.do(leader, agents[0], C.JoinSession(agent_id=agents[0].name, lease_ms=LEASE_MS))
    await cluster.do(leader, agents[0], C.CreateTarget(target_id=target, slots=slots))
    before = (await cluster.status(leader)).commit_index
    start_at = time.time() + 3.0 + len(agents) / 32  # every worker's sessions open by then
    groups = [agents[i::procs] for i in range(max(1, procs))]
    specs = [
        {
            "mode": "pool",
            "how": how,
            "endpoint": leader.grpc,
            "target": target,
            "work_s": work_s,
            "seconds": seconds,
            "start_at": start_at,
            "agents": [{"name": a.name, "token": a.token} for a in group],
        }
        for group in groups
    ]
    cpu = CpuMeter({n.name: n.pid for n in cluster.nodes})
    got = await run_workers(specs, cpu)
    counts = [c for g in got for c in g["counts"].values()]
    waits = [w for g in got for w in g["waits"]]
    total = sum(counts)
    entries = None
    with contextlib.suppress(Exception):
        entries = (await cluster.status(await cluster.leader())).commit_index - before
    out: dict[str, Any] = {
        "how": how,
        "agents": len(agents),
        "slots": slots,
        "procs": len(groups),
        "n": total,
        "per_s": total / seconds,
        "wait": _dist(waits),
        "min": min(counts, default=0),
        "max": max(counts, default=0),
        "entries_per_acquisition": entries / total if entries and total else float("nan"),
        "cpu": {k: round(v, 3) for k, v in cpu.meter_result.items()},
        "sdk_cpu": sum(g["cpu_s"] for g in got) / seconds,
    }
    # ``others`` was computed without the workers (they measure themselves), as in drive_sdk.
    out["cpu"]["others"] = round(max(0.0, out["cpu"].get("others", 0.0) - out["sdk_cpu"]), 3)
    for k in ("handed_over", "waited", "refused", "acquire_calls"):
        out[k] = sum(g[k] for g in got)
    return out


async def run_handoff(
    hs: HandoffSettings, cluster: Cluster, phase: Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[None]]
) -> None:
    """Figures 8 and 9 on the benchmark's cluster (their results under ``handoff`` and
    ``pool_<round>_<how>``)."""
    if hs.rounds > 0:
        pair = [cluster.agents["ho0"], cluster.agents["ho1"]]
        await phase("handoff", lambda: phase_handoff(cluster, pair, hs.rounds))
    if hs.pool_s > 0:
        agents = [cluster.agents[f"p{i:02d}"] for i in range(hs.pool_agents)]
        for r in range(hs.pool_rounds):
            for how in ("handoff", "race") if r % 2 == 0 else ("race", "handoff"):
                await phase(
                    f"pool_{r}_{how}",
                    lambda how=how: phase_pool(  # type: ignore[misc]
                        cluster, agents, how, hs.pool_s, hs.procs, hs.pool_slots, hs.work_ms / 1000
                    ),
                )


@dataclass
class HandoffSettings:
    mode: str
    """auto: after the other figures; only: these alone on the cluster; off: skipped."""
    rounds: int
    pool_s: float
    pool_rounds: int
    pool_agents: int
    pool_slots: int
    work_ms: float
    procs: int


# -- phases -----------------------------------------------------------------------------------------


async def phase_latency(cluster: Cluster, agent: BenchAgent, samples: int) -> dict[str, Any]:
    leader = await cluster.leader()
    stub = cluster.agent_stub(leader)
    reg: list[float] = []
    clo: list[float] = []
    for i in range(samples + 50):
        agent.v += 1
        req = register_req(agent)
        if TIMELINE_DIR is not None:
            bench_timeline.mark(TIMELINE_DIR, "S_send", req.request_id, "unary")
        t = time.perf_counter()
        out = await stub.RegisterWait(req, metadata=agent.md, timeout=10)
        t1 = time.perf_counter()
        if TIMELINE_DIR is not None:
            bench_timeline.mark(TIMELINE_DIR, "S_reply", req.request_id)
        if out.result != APPLIED:
            raise RuntimeError(f"RegisterWait not applied: {out.code}")
        out = await stub.CloseWait(close_req(agent), metadata=agent.md, timeout=10)
        t2 = time.perf_counter()
        if i >= 50:
            reg.append(t1 - t)
            clo.append(t2 - t1)
    return {
        "p50": statistics.median(reg),
        "p99": pct(reg, 0.99),
        "max": max(reg),
        "close_p50": statistics.median(clo),
        "close_p99": pct(clo, 0.99),
        "n": len(reg),
        "leader": leader.name,
    }


class Watch:
    """A WatchEvents stream read in the background: (receive time, Event) in order."""

    def __init__(self, stub: Any, md: Any, kinds: list[str]) -> None:
        self.call = stub.WatchEvents(agent_pb2.WatchEventsRequest(kinds=kinds), metadata=md)
        self.events: list[tuple[float, Any]] = []
        self.started = asyncio.Event()
        self.changed = asyncio.Event()
        self.error: BaseException | None = None
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            async for msg in self.call:
                now = time.perf_counter()
                body = msg.WhichOneof("body")
                if body == "started":
                    self.started.set()
                elif body == "event":
                    self.events.append((now, msg.event))
                    self.changed.set()
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.error = exc
        finally:
            self.changed.set()

    def find(self, kind: str, pred: Callable[[Any], bool]) -> tuple[float, Any] | None:
        for t, ev in self.events:
            if ev.effect.WhichOneof("effect") == kind and pred(getattr(ev.effect, kind)):
                return t, getattr(ev.effect, kind)
        return None

    async def close(self) -> None:
        self.call.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task


async def wait_any(watches: list[Watch], kind: str, pred: Callable[[Any], bool], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        for w in watches:
            got = w.find(kind, pred)
            if got is not None:
                return got
            if w.error is not None:
                raise w.error
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no {kind} within {timeout_s}s")
        for w in watches:
            w.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.wait([asyncio.ensure_future(w.changed.wait()) for w in watches], return_when="FIRST_COMPLETED"),
                left,
            )


async def phase_recovery(cluster: Cluster, ra: BenchAgent, rb: BenchAgent, trials: int) -> dict[str, Any]:
    leader = await cluster.leader()
    stub = cluster.agent_stub(leader)
    for a in (ra, rb):
        await cluster.do(leader, a, C.JoinSession(agent_id=a.name, lease_ms=LEASE_MS))
    kinds = ["RecoveryProposed", "VictimChosen", "CancelRequested"]
    watches = [Watch(stub, ra.md, kinds), Watch(stub, rb.md, kinds)]
    total: list[float] = []
    proposed: list[float] = []
    ack: list[float] = []
    problems: collections.Counter[str] = collections.Counter()
    try:
        for w in watches:
            await asyncio.wait_for(w.started.wait(), 10)
        for i in range(trials):
            tag = f"{os.getpid()}-{i}"
            A, B = f"exec:rA-{tag}", f"exec:rB-{tag}"
            X, Y = f"resource:rx-{tag}", f"resource:ry-{tag}"
            steps: list[tuple[BenchAgent, Any]] = [
                (ra, C.CreateExecution(execution_id=A, run_id=f"run-rA-{tag}", observed_cancel_generation=0)),
                (ra, C.StartExecution(execution_id=A, generation=1, observed_cancel_generation=0)),
                (rb, C.CreateExecution(execution_id=B, run_id=f"run-rB-{tag}", observed_cancel_generation=0)),
                (rb, C.StartExecution(execution_id=B, generation=1, observed_cancel_generation=0)),
                (ra, C.CreateTarget(target_id=X)),
                (rb, C.CreateTarget(target_id=Y)),
                (ra, C.Acquire(target_id=X, execution_id=A, generation=1, observed_epoch=0)),
                (rb, C.Acquire(target_id=Y, execution_id=B, generation=1, observed_epoch=0)),
                (ra, C.RegisterWait(waiter_id=A, waiter_generation=1, target_id=Y, target_generation=1, reason="y")),
            ]
            for agent, cmd in steps:
                await cluster.do(leader, agent, cmd)
            await asyncio.sleep(random.uniform(0.0, 0.1))  # a random phase against the leader loops
            closing = convert.request_from_command(
                C.RegisterWait(waiter_id=B, waiter_generation=1, target_id=X, target_generation=1, reason="x"),
                rb.rid(),
            )
            t0 = time.perf_counter()
            out = await stub.RegisterWait(closing, metadata=rb.md, timeout=10)
            ack.append(time.perf_counter() - t0)
            if out.result != APPLIED:
                raise RuntimeError(f"closing RegisterWait: {out.code}")
            members = {A, B}

            def is_member(fx: Any, members: set[str] = members) -> bool:
                return fx.execution_id in members

            def proposes(fx: Any, a: str = A) -> bool:
                return a in fx.members

            t_cancel, cancel = await wait_any(watches, "cancel_requested", is_member, 15)
            t_prop, _ = await wait_any(watches, "recovery_proposed", proposes, 1)
            _, victim = await wait_any(watches, "victim_chosen", is_member, 1)
            if not victim.HasField("epoch") or victim.decision_kind != "VICTIM":
                problems[
                    f"decision {victim.decision_kind} epoch={victim.epoch if victim.HasField('epoch') else None}"
                ] += 1
            total.append(t_cancel - t0)
            proposed.append(t_prop - t0)
            # untimed clean-up: the victim acknowledges, the survivor finishes
            v_agent = ra if cancel.execution_id == A else rb
            survivor, s_agent = (B, rb) if cancel.execution_id == A else (A, ra)
            await cluster.do(
                leader,
                v_agent,
                C.AckCancel(
                    execution_id=cancel.execution_id,
                    generation=cancel.generation,
                    cancel_generation=cancel.cancel_generation,
                    side_effects=EffectOutcome.NONE,
                ),
            )
            with contextlib.suppress(Exception):
                await cluster.do(
                    leader,
                    s_agent,
                    C.CompleteExecution(execution_id=survivor, generation=1, observed_cancel_generation=0),
                )
    finally:
        for w in watches:
            await w.close()
    return {
        "p50": statistics.median(total),
        "p99": pct(total, 0.99),
        "max": max(total),
        "proposed_p50": statistics.median(proposed),
        "proposed_p99": pct(proposed, 0.99),
        "write_p50": statistics.median(ack),
        "n": len(total),
        "problems": dict(problems),
    }


async def phase_failover(cluster: Cluster, agent: BenchAgent, trials: int) -> dict[str, Any]:
    leader = await cluster.leader()
    await cluster.do(leader, agent, C.JoinSession(agent_id=agent.name, lease_ms=LEASE_MS))
    samples: list[float] = []
    elected: list[str] = []
    attempts: list[int] = []
    restart: list[float] = []
    leader_seen: list[float] = []
    why: collections.Counter[str] = collections.Counter()
    for i in range(trials):
        await cluster.caught_up()
        await asyncio.sleep(1.0)  # a settled cluster: heartbeats flowing, the restarted node a follower
        old = await cluster.leader()
        survivors = [n for n in cluster.nodes if n is not old]
        request = commands_pb2.HeartbeatRequest(request_id=f"fo-{os.getpid()}-{i}", agent_id=agent.name)
        t_leader: list[float] = []

        async def watch_election(
            t_start: float, survivors: list[Node] = survivors, out: list[float] = t_leader
        ) -> None:
            # The first moment a survivor says it is leader (Status is a local, non-log read).
            while not out:
                for n in survivors:
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        if (await cluster.status(n, timeout_s=0.2)).role == "leader":
                            out.append(time.perf_counter() - t_start)
                            return
                await asyncio.sleep(0.01)

        t0 = time.perf_counter()
        old.kill()
        watcher = asyncio.get_running_loop().create_task(watch_election(t0))
        k = 0
        while True:
            node = survivors[k % 2]
            k += 1
            try:
                out = await cluster.agent_stub(node).Heartbeat(request, metadata=agent.md, timeout=0.5)
                if out.result == APPLIED or out.duplicate:
                    break
            except grpc.aio.AioRpcError as exc:
                why[f"{exc.code().name}: {(exc.details() or '')[:60]}"] += 1
            await asyncio.sleep(0.02)
            if time.perf_counter() - t0 > 60:
                raise TimeoutError("no write committed within 60 s of the leader's death")
        samples.append(time.perf_counter() - t0)
        attempts.append(k)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watcher, 5)
        leader_seen.append(t_leader[0] if t_leader else float("nan"))
        new = await cluster.leader()
        elected.append(f"{old.name}->{new.name}")
        t1 = time.perf_counter()
        old.spawn()
        await old.wait_port()
        await cluster.caught_up()
        restart.append(time.perf_counter() - t1)
    return {
        "p50": statistics.median(samples),
        "max": max(samples),
        "min": min(samples),
        "samples": samples,
        "elected": elected,
        "attempts": attempts,
        "restart_p50": statistics.median(restart),
        "leader_seen": leader_seen,
        "why": dict(why),
        "n": len(samples),
    }


async def phase_soak(cluster: Cluster, agents: list[BenchAgent], seconds: float, sdk_procs: int) -> dict[str, Any]:
    leader = await cluster.leader()
    rss0 = {n.name: psutil.Process(n.pid).memory_info().rss for n in cluster.nodes}
    lags: dict[str, list[int]] = {n.name: [] for n in cluster.nodes}
    changes: list[tuple[float, str]] = []  # (seconds into the soak, the node that says it is leader)
    polls = 0
    stop = asyncio.Event()
    t_start = time.perf_counter()

    async def monitor() -> None:
        # Lag of every non-leader = the current leader's commit index - its applied index. The
        # three Status reads are concurrent, not simultaneous: a lag of -1 or -2 is that skew.
        nonlocal polls
        current = leader.name
        while not stop.is_set():
            sts = await cluster.statuses()
            leaders = [name for name, s in sts.items() if s is not None and s.role == "leader"]
            if len(leaders) == 1:
                if leaders[0] != current:
                    current = leaders[0]
                    changes.append((round(time.perf_counter() - t_start, 1), current))
                lst = sts[current]
                polls += 1
                for name, fst in sts.items():
                    if fst is not None and name != current:
                        lags[name].append(lst.commit_index - fst.applied_index)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    mon = asyncio.get_running_loop().create_task(monitor())
    try:
        if sdk_procs > 0:  # full throughput: the SDK path of figure 2
            cpu = CpuMeter({n.name: n.pid for n in cluster.nodes})
            res = await drive_sdk(cluster, agents, leader, seconds, sdk_procs, cpu=cpu)
        else:
            cpu = CpuMeter({n.name: n.pid for n in cluster.nodes} | {"client": os.getpid()})
            res = await drive(cluster, agents, leader, seconds, cpu=cpu)
    finally:
        stop.set()
        await mon
    conv = await cluster.converged(60.0)
    rss1 = {n.name: psutil.Process(n.pid).memory_info().rss for n in cluster.nodes}
    lags = {k: v for k, v in lags.items() if v}
    tail = {name: v[-1] for name, v in lags.items()}
    return {
        "drive": res,
        "leader": leader.name,
        "max_lag": {k: (max(v) if v else None) for k, v in lags.items()},
        "p50_lag": {k: (statistics.median(v) if v else None) for k, v in lags.items()},
        "last_lag": tail,
        "polls": polls,
        "changes": changes,
        "converged": conv,
        "rss_mb": {k: (rss0[k] / 2**20, rss1[k] / 2**20) for k in rss0},
    }


# -- py-spy (optional) -------------------------------------------------------------------------------

PROFILE_HZ = 250
"""py-spy's sampling rate: 100 Hz gave 250-330 samples of a leader in a 5 s figure."""


def start_profilers(
    targets: dict[str, int], seconds: float, out_dir: Path, native: bool = False
) -> dict[str, tuple[Any, Path]]:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        print(f"(--profile: py-spy not found; `{sys.executable} -m pip install py-spy`)")
        return {}
    running = {}
    for name, pid in targets.items():
        out = out_dir / f"pyspy-{name}.txt"
        # --gil: only the thread holding the GIL, i.e. what the process's one Python core is spent on.
        # --native needs py-spy to pause the process for each sample (it slows the run down).
        mode = ["--native"] if native else ["--nonblocking"]
        cmd = [exe, "record", *mode, "--gil", "--full-filenames", "--format", "raw", "--rate", str(PROFILE_HZ)]
        cmd += ["--duration", str(max(1, int(seconds))), "--pid", str(pid), "--output", str(out)]
        running[name] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), out)
    return running


_FRAME = re.compile(r"^(.*) \((.*?):\d+\)$")
_ENTRY_POINTS = (
    "cli.py",
    "server.py:main",
    "server.py:NodeProcess.run",
    "bench_cluster.py:main",
    "bench_cluster.py:<module>",
    "bench_cluster.py:sdk_worker",  # the harness around the SDK in a worker
)


def _thread_kind(funcs: list[str]) -> str:
    joined = ";".join(funcs)
    if "_autoTickThread" in joined:
        return "pysyncobj tick thread"
    if "_worker" in joined and "thread.py" in joined:
        return "executor threads (reads)"
    if "run_until_complete" in joined or "Runner.run" in joined:
        return "asyncio loop (gRPC, service, loops)"
    return "other"


def summarize_profile(path: Path, top: int = 12) -> list[str]:
    """From py-spy's raw (collapsed) output: samples by thread, top frames by own samples, and
    the repository's and pysyncobj's functions by inclusive samples."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames: list[tuple[str, str]] = []
        for fr in stack.split(";"):
            m = _FRAME.match(fr)
            frames.append((m.group(1), m.group(2)) if m else (fr, ""))
        if not frames:
            continue
        threads[_thread_kind([f"{fn} {file}" for fn, file in frames])] += n
        fn, file = frames[-1]
        own[f"{fn} ({Path(file).name})"] += n
        seen = set()
        for fn, file in frames:
            mine = file.startswith(str(REPO)) and "/.venv/" not in file
            if not (mine or "/pysyncobj/" in file or "/grpc/" in file):
                continue
            label = f"{Path(file).name}:{fn}"
            if label.startswith(_ENTRY_POINTS) or label in seen:
                continue
            seen.add(label)
            incl[label] += n
    if not total:
        return ["(no samples)"]
    lines = [
        f"{total} samples holding the GIL ({total / PROFILE_HZ:.1f} s of Python at {PROFILE_HZ} Hz); by thread: "
        + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in threads.most_common()),
        "",
        "| own % | function (file) | | incl % | repo / pysyncobj / grpc function |",
        "|---:|---|---|---:|---|",
    ]
    a, b = own.most_common(top), incl.most_common(top)
    for i in range(max(len(a), len(b))):
        left = f"{100 * a[i][1] / total:.1f} | `{a[i][0]}`" if i < len(a) else " | "
        right = f"{100 * b[i][1] / total:.1f} | `{b[i][0]}`" if i < len(b) else " | "
        lines.append(f"| {left} | | {right} |")
    return lines


# -- raw pysyncobj (scripts/bench_raw_raft.py) --------------------------------------------------------


def run_raw(samples: int, seconds: float) -> dict[str, Any]:
    mod = _load_script("bench_raw_raft")
    ns = argparse.Namespace(samples=samples, concurrency=AGENTS, seconds=seconds)
    out: dict[str, Any] = {}
    for variant in ("raw", *mod.WRAPPERS):  # the anchor, durable (default), --no-fsync, under attack
        try:
            out[variant] = mod.run_variant(variant, ns)
        except Exception as exc:
            out[variant] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return out


def fsync_probe(directory: Path, n: int = 200) -> dict[str, float]:
    """What one journal flush costs here: write a 200-byte record, then ``fdatasync``, as
    ``ChecksummedJournal.sync`` does (cluster/node/raft/_journal.py): inside space allocated ahead with
    ``posix_fallocate`` (the journal since 0814c2e), and, alternating with it, appended to a file
    that grows with each record (the journal before: the anchor)."""
    times: dict[str, list[float]] = {"allocated": [], "appended": []}
    fds = {}
    for kind in times:
        fds[kind] = os.open(directory / f"fsync-probe-{kind}", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fds["allocated"], 0, (n + 1) * 200)
            os.fdatasync(fds["allocated"])
        else:
            del times["allocated"]
        for i in range(n):
            for kind in times:
                os.pwrite(fds[kind], os.urandom(200), i * 200)
                t = time.perf_counter()
                os.fdatasync(fds[kind])
                times[kind].append(time.perf_counter() - t)
    finally:
        for kind, fd in fds.items():
            os.close(fd)
            (directory / f"fsync-probe-{kind}").unlink()
    return {f"{kind}_p50": statistics.median(xs) for kind, xs in times.items()} | {
        f"{kind}_p99": pct(xs, 0.99) for kind, xs in times.items()
    }


# -- the run ----------------------------------------------------------------------------------------


@dataclass
class Settings:
    samples: int
    seconds: float
    recovery_trials: int
    failover_trials: int
    soak_s: float
    register_only: bool
    profile: str | None
    keep: bool
    fsync: bool = True
    sdk_procs: int = 4
    unary: bool = True


async def _recovery_bootstrapped(cluster: Cluster, leader: Node) -> None:
    """Recovery bootstrap (ConfigureRecovery + SetMode auto) is proposed by the first leader."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        s = await cluster.status(leader)
        if s.recovery_configured and s.mode == types_pb2.ROLLOUT_MODE_AUTO:
            break
        await asyncio.sleep(0.1)


async def run(st: Settings, hs: HandoffSettings, root: Path, results: dict[str, Any], errors: dict[str, str]) -> None:
    names = [f"t{i:02d}" for i in range(AGENTS)] + ["lat", "ra", "rb", "fo", "ho0", "ho1"]
    names += [f"p{i:02d}" for i in range(hs.pool_agents)]
    node_args = ["--initial-mode", "auto", "--rate-limit-per-s", "0", *([] if st.fsync else ["--no-fsync"])]
    cluster = Cluster(root, names, node_args)
    results["serve_command"] = cluster.example_command
    agents = [cluster.agents[f"t{i:02d}"] for i in range(AGENTS)]

    async def phase(name: str, fn: Callable[[], Awaitable[Any]]) -> None:
        print(f"... {name}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            results[name] = await fn()
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(file=sys.stderr)
            for n in cluster.nodes:
                print(f"--- {n.name} log tail\n{n.log_tail(1500)}", file=sys.stderr)
        print(f"    {name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)

    try:
        await cluster.start()
        leader = await cluster.leader()
        results["leader_at_start"] = leader.name
        await _recovery_bootstrapped(cluster, leader)
        if hs.mode == "only":
            await run_handoff(hs, cluster, phase)
            return
        lat = cluster.agents["lat"]
        await setup_ring(cluster, leader, [*agents, lat])
        lat.wait_on = lat.own  # its own H holds it

        await phase("latency", lambda: phase_latency(cluster, lat, st.samples))

        async def thr(to_follower: bool, close: bool, sdk: bool = False) -> DriveResult:
            ldr = await cluster.leader()
            node = next(n for n in cluster.nodes if n is not ldr) if to_follower else ldr
            client = {} if sdk else {"client": os.getpid()}  # the SDK workers measure themselves
            cpu = CpuMeter({n.name + ("*" if n is ldr else ""): n.pid for n in cluster.nodes} | client)
            profs = {}
            profiling = bool(st.profile) and not to_follower and close
            # the SDK workers start 2 s after they are spawned
            profile_s = st.seconds + (2 if sdk else 0)
            if profiling:
                follower = next(n for n in cluster.nodes if n is not ldr)
                tag = " (SDK batches)" if sdk else ""
                profs = start_profilers(
                    {f"leader{tag}": ldr.pid, f"follower{tag}": follower.pid} | client,
                    profile_s,
                    root,
                    native=st.profile == "native",
                )

            def profile_worker(pids: list[int]) -> None:
                """One SDK worker is the client of an SDK figure: sampled while it writes."""
                if profiling and pids:
                    name = f"one of the {len(pids)} SDK worker processes"
                    profs.update(start_profilers({name: pids[0]}, st.seconds, root, native=st.profile == "native"))

            if sdk:
                timeline = TIMELINE_DIR if not to_follower and close else None  # figure 2 only
                res = await drive_sdk(
                    cluster,
                    agents,
                    node,
                    st.seconds,
                    st.sdk_procs,
                    close=close,
                    cpu=cpu,
                    timeline=timeline,
                    on_started=profile_worker,
                )
            else:
                res = await drive(cluster, agents, node, st.seconds, close=close, cpu=cpu)
            key = ("sdk", to_follower, close) if sdk else (to_follower, close)
            results.setdefault("drive_nodes", {})[key] = node.name
            for name, (proc, path) in profs.items():
                with contextlib.suppress(Exception):
                    proc.wait(st.seconds + 30)
                if path.exists():
                    results.setdefault("profiles", {})[name] = summarize_profile(path)
            return res

        if st.sdk_procs > 0:
            await phase("thr_sdk_leader", lambda: thr(False, True, sdk=True))
            await phase("thr_sdk_follower", lambda: thr(True, True, sdk=True))
            if st.register_only:
                await phase("thr_sdk_register_only", lambda: thr(False, False, sdk=True))
        if st.unary:
            await phase("thr_leader", lambda: thr(False, True))
            await phase("thr_follower", lambda: thr(True, True))
            if st.register_only:
                await phase("thr_register_only", lambda: thr(False, False))
        if st.recovery_trials > 0:
            await phase(
                "recovery",
                lambda: phase_recovery(cluster, cluster.agents["ra"], cluster.agents["rb"], st.recovery_trials),
            )
        if hs.mode == "auto":
            await run_handoff(hs, cluster, phase)
        if st.soak_s > 0:
            await phase("soak", lambda: phase_soak(cluster, agents, st.soak_s, st.sdk_procs))
        if st.failover_trials > 0:
            await phase("failover", lambda: phase_failover(cluster, cluster.agents["fo"], st.failover_trials))
    except Exception as exc:
        errors["cluster"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc(file=sys.stderr)
        for n in cluster.nodes:
            print(f"--- {n.name} log tail\n{n.log_tail(3000)}", file=sys.stderr)
    finally:
        await cluster.close()


# -- tracing on beside off, same run, alternating (issue #42) ---------------------------------------


@dataclass
class TracingSettings:
    mode: str
    """auto: after the other figures; only: this alone; off: skipped."""
    seconds: float
    rounds: int
    procs: int


def trace_bytes(edges: int = 1000) -> dict[str, float]:
    """What a stored trace context costs (no timing): the snapshot with ``edges`` open waits, every
    one traced against none, and one RegisterWait's encoded command with and without it."""
    from waitgraph.statemachine.codec import encode_command

    def state(traced: bool) -> bytes:
        m = StateMachine()

        def do(actor: str, cmd: C.Command) -> None:
            out = m.apply(Envelope(actor=actor, at_ms=1, request_id=None, command=cmd))
            if out.result.value == "REJECTED":
                raise RuntimeError(f"{cmd.KIND}: {out.code}")

        do("agent:a", C.JoinSession(agent_id="a", lease_ms=LEASE_MS))
        for i in range(edges):
            w, t = f"exec:w{i:05d}", f"exec:t{i:05d}"
            for ex in (w, t):
                do("agent:a", C.CreateExecution(execution_id=ex, run_id=f"run-{ex[5:]}", observed_cancel_generation=0))
                do("agent:a", C.StartExecution(execution_id=ex, generation=1, observed_cancel_generation=0))
            tp = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01" if traced else ""
            do("agent:a", C.RegisterWait(waiter_id=w, waiter_generation=1, target_id=t, target_generation=1,
                                         reason="bench", trace_context=tp))  # fmt: skip
        return m.snapshot()

    plain, traced = state(False), state(True)
    cmd = C.RegisterWait(waiter_id="exec:w", waiter_generation=1, target_id="exec:t", target_generation=1, reason="r")
    with_tp = dataclasses.replace(cmd, trace_context="00-" + "1" * 32 + "-" + "2" * 16 + "-01")
    return {
        "edges": edges,
        "snapshot_b_per_edge": (len(traced) - len(plain)) / edges,
        "command_b": len(encode_command(with_tp)) - len(encode_command(cmd)),
    }


async def off_path_ns(n: int = 100_000, repeats: int = 5) -> dict[str, float]:
    """What tracing's hooks add to an SDK call when tracing is off (this process configures none):
    ``sdk.tracing.call`` around a call that does nothing, beside the bare call, alternating; the
    best of ``repeats`` per side, in ns per call."""
    from waitgraph.sdk import tracing as sdk_tracing
    from waitgraph.wire import tracing

    assert tracing.tracer() is None, "the benchmark process must not trace"
    md = (("authorization", "Bearer x"),)

    async def invoke(metadata: tuple[tuple[str, str], ...]) -> int:
        return len(metadata)

    async def bare() -> None:
        for _ in range(n):
            await invoke(md)

    async def hooked() -> None:
        for _ in range(n):
            await sdk_tracing.call(invoke, "waitgraph.v1.AgentService/RegisterWait", "127.0.0.1:1", md)

    best = {"bare": float("inf"), "hooked": float("inf")}
    for _ in range(repeats):
        for name, fn in (("bare", bare), ("hooked", hooked)):
            t = time.perf_counter()
            await fn()
            best[name] = min(best[name], (time.perf_counter() - t) / n * 1e9)
    return best | {"added": best["hooked"] - best["bare"]}


async def run_tracing(ts: TracingSettings, root: Path, results: dict[str, Any], errors: dict[str, str]) -> None:
    """Figure 10: the same cluster shape twice per round, tracing off and on (order alternating),
    each a fresh cluster: SDK writes/s (64 agents in ``ts.procs`` processes) and the unary p50
    (one agent, one write at a time through the SDK, no batching). On: the nodes and the workers
    export over OTLP/gRPC (``OTEL_EXPORTER_OTLP_ENDPOINT``, the SDK's default batch processor and
    always-on sampler) to a receiver in this process, and every write is in its agent's sampled
    span, its RegisterWait storing the context."""
    from waitgraph.dev.otlp import Receiver

    names = [f"t{i:02d}" for i in range(AGENTS)] + ["lat"]
    node_args = ["--initial-mode", "auto", "--rate-limit-per-s", "0"]
    runs: list[dict[str, Any]] = []
    results["tracing"] = {"runs": runs, "bytes": trace_bytes(), "off_path": await off_path_ns()}
    with Receiver() as receiver:
        for r in range(ts.rounds):
            for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                endpoint = receiver.endpoint if mode == "on" else None
                env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint} if endpoint else None
                print(f"... tracing {mode}, round {r + 1}", file=sys.stderr, flush=True)
                cluster = Cluster(root / f"tracing-{mode}-{r}", names, node_args, env)
                before = len(receiver.spans())
                try:
                    await cluster.start()
                    leader = await cluster.leader()
                    await _recovery_bootstrapped(cluster, leader)
                    agents = [cluster.agents[f"t{i:02d}"] for i in range(AGENTS)]
                    lat = cluster.agents["lat"]
                    await setup_ring(cluster, leader, [*agents, lat])
                    lat.wait_on = lat.own
                    one = await drive_sdk(cluster, [lat], leader, ts.seconds, 1, batching=False, otel_endpoint=endpoint)
                    many = await drive_sdk(cluster, agents, leader, ts.seconds, ts.procs, otel_endpoint=endpoint)
                    await asyncio.sleep(6 if endpoint else 0)  # the nodes' batch processor exports every 5 s
                    runs.append(
                        {
                            "mode": mode,
                            "round": r + 1,
                            "writes_per_s": (many.registrations + many.closes) / many.seconds,
                            "registrations_per_s": many.registrations / many.seconds,
                            "unary_p50": statistics.median(one.latencies) if one.latencies else float("nan"),
                            "unary_n": len(one.latencies),
                            "failed": sum(one.other.values()) + sum(many.other.values()),
                            "spans": len(receiver.spans()) - before,
                        }
                    )
                except Exception as exc:
                    errors[f"tracing_{mode}_{r}"] = f"{type(exc).__name__}: {exc}"
                    traceback.print_exc(file=sys.stderr)
                    for n in cluster.nodes:
                        print(f"--- {n.name} log tail\n{n.log_tail(1500)}", file=sys.stderr)
                finally:
                    await cluster.close()


def report_tracing(ts: TracingSettings, results: dict[str, Any]) -> None:
    got = results.get("tracing")
    if not got:
        return
    runs = got["runs"]
    b = got["bytes"]
    print(
        f"\n### 10. Tracing on beside off (issue #42; {ts.rounds} round(s), each mode a fresh cluster, alternating)\n"
    )
    print("| | tracing off | tracing on (sampled, exported) | on / off |")
    print("|---|---|---|---|")

    def med(mode: str, key: str) -> float:
        xs = [x[key] for x in runs if x["mode"] == mode]
        return statistics.median(xs) if xs else float("nan")

    w_off, w_on = med("off", "writes_per_s"), med("on", "writes_per_s")
    p_off, p_on = med("off", "unary_p50"), med("on", "unary_p50")
    print(
        f"| SDK writes/s, {AGENTS} agents in {ts.procs} processes | {rate(w_off)} | {rate(w_on)} | {w_on / w_off:.2f} |"
    )
    print(f"| unary p50, one agent, SDK without batching | {ms(p_off)} | {ms(p_on)} | {p_on / p_off:.2f} |")
    spans = sum(x["spans"] for x in runs if x["mode"] == "on")
    failed = sum(x["failed"] for x in runs)
    spans_off = sum(x["spans"] for x in runs if x["mode"] == "off")
    print(f"\nSpans received on: {spans} (off: {spans_off}); failed writes: {failed}.")
    print(
        f"Stored per traced wait: {b['snapshot_b_per_edge']:.1f} B in the snapshot ({b['edges']} edges), "
        f"{b['command_b']} B more in its RegisterWait command; an untraced wait: 0 B."
    )
    off = got["off_path"]
    print(
        f"Tracing off, the SDK's hook per call: {off['added']:.0f} ns ({off['hooked']:.0f} ns with it, "
        f"{off['bare']:.0f} ns without, around a call that does nothing); the node installs none."
    )
    print("Per round: " + "; ".join(f"{x['mode']} {rate(x['writes_per_s'])}/s {ms(x['unary_p50'])}" for x in runs))


# -- waitgraph beside etcd, same run, alternating (issue #20; #15's durable vs --no-fsync) ----------


@dataclass
class VersusSettings:
    rounds: int
    samples: int
    seconds: float
    failover_trials: int
    procs: int


def _busy_cores(cpu: dict[str, float]) -> float:
    """Cores used by the processes this run started (not ``others``, not ``steal``)."""
    return sum(v for k, v in cpu.items() if k not in ("others", "steal"))


def _waits(shape: dict[str, Any]) -> str:
    """``n1 0.25, ...`` from a shape's ``waits`` (CpuMeter.meter_waits), with the servers' sum first."""
    waits: dict[str, float] = shape["waits"]
    servers = sum(v for k, v in waits.items() if not k.startswith("sdk"))
    return f"{servers:.2f} ({', '.join(f'{k} {v:.2f}' for k, v in waits.items())})"


def _shape(rate_per_s: float, n: int, cpu: dict[str, float], latencies: list[float], failed: int) -> dict[str, Any]:
    return {
        "rate": rate_per_s,
        "n": n,
        "failed": failed,
        "cpu_ms_per_write": 1000 * _busy_cores(cpu) / rate_per_s if rate_per_s else float("nan"),
        "cpu": {k: round(v, 3) for k, v in cpu.items()},
        "p50": statistics.median(latencies) if latencies else float("nan"),
        "p99": pct(latencies, 0.99),
    }


async def versus_waitgraph(
    vs: VersusSettings, root: Path, durable: bool, failover: bool, attack: bool
) -> dict[str, Any]:
    """One fresh 3-node waitgraph cluster: the versus shapes; with ``attack``, latency and the SDK
    shape again while bench_raw_raft.py's huge-length attacker streams at every node's Raft port."""
    names = [f"t{i:02d}" for i in range(AGENTS)] + ["lat", "fo"]
    node_args = ["--initial-mode", "auto", "--rate-limit-per-s", "0", *([] if durable else ["--no-fsync"])]
    root.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(root, names, node_args)
    agents = [cluster.agents[f"t{i:02d}"] for i in range(AGENTS)]
    out: dict[str, Any] = {"command": cluster.example_command}
    try:
        await cluster.start()
        leader = await cluster.leader()
        await _recovery_bootstrapped(cluster, leader)
        lat = cluster.agents["lat"]
        await setup_ring(cluster, leader, [*agents, lat])
        lat.wait_on = lat.own
        await drive(cluster, agents, leader, 1.0, close=False)  # warm-up, untimed

        def meter(client: bool) -> CpuMeter:
            own = {"client": os.getpid()} if client else {}
            return CpuMeter({n.name: n.pid for n in cluster.nodes} | own)

        out["latency"] = await phase_latency(cluster, lat, vs.samples)
        leader = await cluster.leader()
        r = await drive(cluster, agents, leader, vs.seconds, close=False, cpu=meter(True))
        out["unary64"] = _shape(r.reg_per_s, r.registrations, r.cpu, r.latencies, sum(r.other.values()))
        out["unary64"]["writes_per_entry"] = r.registrations / r.entries if r.entries else float("nan")
        if vs.procs > 0:
            r = await drive_sdk(cluster, agents, leader, vs.seconds, vs.procs, close=False, cpu=meter(False))
            out["sdk64"] = _shape(r.reg_per_s, r.registrations, r.cpu, r.latencies, sum(r.other.values()))
            out["sdk64"]["writes_per_call"] = r.batch_items / r.batches if r.batches else float("nan")
            out["sdk64"]["waits"] = {k: round(v, 3) for k, v in r.waits.items()}
        if vs.procs > 0 and durable:  # (the not-durable table has no such row)
            # One unary RPC per write again, from as many processes as etcd's clients use.
            r = await drive_sdk(
                cluster, agents, leader, vs.seconds, vs.procs, close=False, cpu=meter(False), batching=False
            )
            out["unary64p"] = _shape(r.reg_per_s, r.registrations, r.cpu, r.latencies, sum(r.other.values()))
            out["unary64p"]["batches"] = r.batches  # WriteBatch calls: none, if the shape is what it says
        if attack:
            raw_raft = _load_script("bench_raw_raft")
            stop = threading.Event()
            attackers = [
                threading.Thread(target=raw_raft._huge_length, args=(n.raft, stop), daemon=True) for n in cluster.nodes
            ]
            for t in attackers:
                t.start()
            try:
                await asyncio.sleep(0.5)
                term0 = {n.name: (await cluster.status(n)).term for n in cluster.nodes}
                out["attack_latency"] = await phase_latency(cluster, lat, vs.samples)
                if vs.procs > 0:
                    r = await drive_sdk(cluster, agents, leader, vs.seconds, vs.procs, close=False, cpu=meter(False))
                    out["attack_sdk64"] = _shape(
                        r.reg_per_s, r.registrations, r.cpu, r.latencies, sum(r.other.values())
                    )
                term1 = {n.name: (await cluster.status(n)).term for n in cluster.nodes}
                out["attack_term_changed"] = term0 != term1
            finally:
                stop.set()
                for t in attackers:
                    t.join(5)
        if failover and vs.failover_trials > 0:
            out["failover"] = await phase_failover(cluster, cluster.agents["fo"], vs.failover_trials)
    except Exception:
        for n in cluster.nodes:
            print(f"--- {n.name} log tail\n{n.log_tail(1500)}", file=sys.stderr)
        raise
    finally:
        await cluster.close()
    return out


async def versus_etcd(vs: VersusSettings, root: Path, stubs: Any, durable: bool, failover: bool) -> dict[str, Any]:
    """One fresh 3-member etcd cluster: the same shapes (scripts/etcd_bench.py)."""
    E = _load_script("etcd_bench")
    cluster = E.EtcdCluster(root, *stubs, durable=durable)
    out: dict[str, Any] = {"command": cluster.example_command}
    procs = max(1, vs.procs)
    try:
        await cluster.start()

        def meter() -> CpuMeter:
            return CpuMeter({m.name: m.pid for m in cluster.members})

        await E.drive(cluster, AGENTS, 1.0, procs, "put", meter())  # warm-up, untimed
        out["latency"] = await E.latency(cluster, vs.samples)
        for mode in ("put", "txn"):
            m = meter()
            r = await E.drive(cluster, AGENTS, vs.seconds, procs, mode, m)
            out[f"{mode}64"] = _shape(r.writes_per_s, r.writes, r.cpu, r.latencies, r.failed)
            out[f"{mode}64"]["waits"] = {k: round(v, 3) for k, v in m.meter_waits.items()}
        if failover and vs.failover_trials > 0:
            out["failover"] = await E.failover(cluster, vs.failover_trials)
    except Exception:
        for m in cluster.members:
            print(f"--- etcd {m.name} log tail\n{m.log_tail(1500)}", file=sys.stderr)
        raise
    finally:
        await cluster.close()
    return out


async def run_versus(vs: VersusSettings, root: Path, results: dict[str, Any], errors: dict[str, str]) -> None:
    """Alternating: round r runs waitgraph then etcd (r even) or etcd then waitgraph (r odd), each
    on a fresh durable cluster, with :func:`raft_alone` between the two; then the not-durable pair
    (wg ``--no-fsync``, etcd ``--unsafe-no-fsync``); the attack figures come from round 0's
    waitgraph cluster."""
    E = _load_script("etcd_bench")
    out: dict[str, Any] = {"wg": [], "etcd": [], "etcd_version": E.etcd_version()}
    results["versus"] = out
    stubs = E.generate_stubs(root / "etcd-stubs")

    out["retried"] = []

    async def step(
        label: str, fn: Callable[[int], Awaitable[dict[str, Any]]], into: list[Any] | None, key: str
    ) -> None:
        """One system's run; a run that fails (on this shared machine: an election under load in
        the middle of a shape) is done again on a fresh cluster, up to twice, and the report says so."""
        for attempt in range(3):
            print(f"... versus: {label}", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            try:
                got = await fn(attempt)
                if into is not None:
                    into.append(got)
                else:
                    out[key] = got
                return
            except Exception as exc:
                why = f"{type(exc).__name__}: {str(exc)[:300]}"
                traceback.print_exc(file=sys.stderr)
                if attempt < 2:
                    out["retried"].append(f"{label}: {why}")
                else:
                    errors[f"versus {label}"] = why
            finally:
                print(f"    {label}: {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)

    out["raft"] = []
    for r in range(vs.rounds):
        wg = (
            f"round {r + 1} waitgraph, durable",
            lambda a, r=r: versus_waitgraph(vs, root / f"vs-wg-{r}-{a}", True, failover=True, attack=r == 0),
            out["wg"],
            "",
        )
        et = (
            f"round {r + 1} etcd, durable",
            lambda a, r=r: versus_etcd(vs, root / f"vs-etcd-{r}-{a}", stubs, True, failover=True),
            out["etcd"],
            "",
        )
        rf = (f"round {r + 1} the Raft layer alone", lambda a: asyncio.to_thread(raft_alone, vs), out["raft"], "")
        for label, fn, into, key in (wg, rf, et) if r % 2 == 0 else (et, rf, wg):
            await step(label, fn, into, key)
    nofsync = VersusSettings(1, vs.samples, vs.seconds, 0, vs.procs)
    await step(
        "waitgraph --no-fsync",
        lambda a: versus_waitgraph(nofsync, root / f"vs-wg-nf-{a}", False, False, False),
        None,
        "wg_nf",
    )
    await step(
        "etcd --unsafe-no-fsync",
        lambda a: versus_etcd(nofsync, root / f"vs-etcd-nf-{a}", stubs, False, False),
        None,
        "etcd_nf",
    )
    G = _load_script("bench_gateway")  # the floor under every unary write, in this run
    await step(
        "bare grpc.aio floor",
        lambda a: asyncio.to_thread(G.grpc_floor, min(vs.seconds, 5.0), max(50, vs.samples // 2)),
        None,
        "grpc_floor",
    )
    if find_binary() is not None:
        await step(
            "the native front's floor",
            lambda a: asyncio.to_thread(G.grpc_floor, min(vs.seconds, 5.0), max(50, vs.samples // 2), front=True),
            None,
            "front_floor",
        )


RAFT_ALONE = ("raw", "wrapper")
"""``scripts/bench_raw_raft.py``'s variants the etcd section runs beside both systems: pysyncobj as it
comes (a counter, never flushed) and waitgraph's Raft layer (``RaftNode`` and the state machine,
durable), each a lone write submitted inside the leader's process: what a unary write costs before
any gRPC, client or handler."""


APPLIED_WRITE = "RegisterWait (re-register)"
"""The SDK shape's write, as ``scripts/bench_apply.py`` names it."""


def raft_alone(vs: VersusSettings) -> dict[str, Any]:
    """One lone-write latency run of each of :data:`RAFT_ALONE` (their throughput part is kept short:
    the section's rates come from the real clusters), and the CPU one replica spends applying the
    SDK shape's write (``scripts/bench_apply.py``, the node's path: state machine and event journal,
    in one fresh process, nothing else in it; so less than a busy node spends)."""
    mod = _load_script("bench_raw_raft")
    ns = argparse.Namespace(samples=vs.samples, concurrency=AGENTS, seconds=min(vs.seconds, 1.0))
    out: dict[str, Any] = {variant: mod.run_variant(variant, ns) for variant in RAFT_ALONE}
    script = str(Path(__file__).with_name("bench_apply.py"))
    (run,) = _load_script("bench_apply").tree_runs(script, [str(REPO)], 1, ["--rounds", "10"])[str(REPO)]
    out["apply_us"] = run["node"]["us"][APPLIED_WRITE]
    return out


def _server_cpu_ms(run: dict[str, Any], shape: str) -> list[float]:
    """CPU per write of the three servers alone (waitgraph's nodes with their fronts, or etcd's
    members), without the clients: ms of CPU per write, [] when not measured."""
    got = run.get(shape, {})
    cpu, rate_ = got.get("cpu"), got.get("rate")
    if not cpu or not rate_:
        return []
    servers = [v for k, v in cpu.items() if k[:1] in ("n", "e") and k[1:].isdigit()]
    return [1000 * sum(servers) / rate_] if len(servers) == 3 else []


def _vals(runs: list[dict[str, Any]], shape: str, key: str) -> list[float]:
    return [run[shape][key] for run in runs if shape in run and key in run[shape]]


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _fmt_vals(xs: list[float], kind: str) -> str:
    """Several values of one figure (one per round), in round order: ``ms`` (seconds shown in
    ms), ``cpu`` (already ms) or a rate."""
    if not xs:
        return "—"
    if kind == "ms":
        return ", ".join(f"{x * 1000:.2f}" for x in xs) + " ms"
    if kind == "cpu":
        return ", ".join(f"{x:.2f}" for x in xs) + " ms"
    return ", ".join(f"{rate(x)}/s" for x in xs)


def _ratio_of_medians(a: list[float], b: list[float], kind: str) -> str:
    if not a or not b or not _med(b):
        return "—"
    x = _med(a) / _med(b)
    if kind == "rate":
        return f"{x:.2f}x"
    return (
        f"{x:.2f}x ({'slower' if x > 1 else 'faster'})" if kind == "ms" else f"{x:.2f}x ({'more' if x > 1 else 'less'})"
    )


def report_handoff(hs: HandoffSettings, results: dict[str, Any]) -> None:
    """Figures 8 and 9: hand-off (fair grant queue, the SDK's ``holding()``) beside wake-and-race."""
    print("\n## hand-off beside wake-and-race, same cluster, same run (issue #21)\n")
    if hs.mode == "off":
        print("- not measured: `--handoff off`")
        return
    print(
        f"- {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average before the run "
        f"{results.get('loadavg_before', '?')}, after {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores shared by the "
        "3 nodes, the clients and whatever else runs: read the ratios)"
    )
    print(
        "- hand-off: the waiter is in `holding()` (Acquire refused, wait registered, queued); the holder's Release "
        "grants it the target in the same apply and its `WaitClosed(granted, lease)` reaches its session's stream: "
        "`holding()` returns `handed_over`, no Acquire of its own"
    )
    print(
        "- anchor, wake-and-race: what a client does without fair queues: no wait registered, it retries `Acquire` "
        f"after each refusal with a backoff of equal jitter (sleep in [d/2, d], d from {RACE_FIRST_S * 1000:g} ms "
        f"doubling to {RACE_CAP_S * 1000:g} ms, the SDK's local-wait poll interval); the same SDK sessions, "
        "`Execution.acquire` / `release`"
    )
    ho = results.get("handoff")
    pools = {
        how: [results[k] for k in sorted(results) if k.startswith("pool_") and k.endswith(how)]
        for how in ("handoff", "race")
    }
    print(
        f"- 8: {hs.rounds} rounds after 5 warm-ups, one resource, 2 agents (2 sessions on the leader, in the "
        "benchmark process), alternating which way goes first; 9: "
        f"{hs.pool_agents} agents in {max(1, hs.procs)} processes (one Client and session each), one pool of "
        f"{hs.pool_slots} slots (fresh per measurement), each agent loops hold → {hs.work_ms:g} ms of work → "
        f"release for {hs.pool_s:g}s; {hs.pool_rounds} round(s), alternating which way goes first; several values "
        "= one per round, the ratio is of their medians\n"
    )
    print(
        "| # | figure | hand-off (fair queue, SDK `holding()`) | wake-and-race (retrying Acquire) | hand-off / race |"
    )
    print("|---|---|---|---|---|")

    def row(num: str, label: str, a: list[float], b: list[float], kind: str) -> None:
        print(f"| {num} | {label} | {_fmt_vals(a, kind)} | {_fmt_vals(b, kind)} | {_ratio_of_medians(a, b, kind)} |")

    if ho:
        n = ho["n"]
        row(
            "8",
            f"Release sent → next holder holds, p50 ({n} hand-overs each)",
            [ho["handoff"]["p50"]],
            [ho["race"]["p50"]],
            "ms",
        )
        row("8", "the same, p99", [ho["handoff"]["p99"]], [ho["race"]["p99"]], "ms")
    elif hs.rounds:
        print("| 8 | hand-over latency | error (see errors) | | |")
    if pools["handoff"] or pools["race"]:
        a, b = pools["handoff"], pools["race"]
        row(
            "9",
            f"acquisitions/s, {hs.pool_agents} agents, {hs.pool_slots} slots",
            [x["per_s"] for x in a],
            [x["per_s"] for x in b],
            "rate",
        )
        row(
            "9",
            "wait (first Acquire → holding), p50",
            [x["wait"]["p50"] for x in a],
            [x["wait"]["p50"] for x in b],
            "ms",
        )
        row("9", "wait, p99", [x["wait"]["p99"] for x in a], [x["wait"]["p99"] for x in b], "ms")

        def spread(xs: list[dict[str, Any]]) -> str:
            return ", ".join(f"{x['min']} / {x['max']}" for x in xs) or "—"

        print(f"| 9 | acquisitions per agent, fewest / most (fairness) | {spread(a)} | {spread(b)} | — |")
    elif hs.pool_s:
        print("| 9 | contended pool | error (see errors) | | |")
    print()
    if ho:
        print(
            f"- 8: at leader {ho['leader']}; the Release's own round trip p50 {ms(ho['release']['p50'])}, p99 "
            f"{ms(ho['release']['p99'])}; max hand-off {ms(ho['handoff']['max'])}, max race {ms(ho['race']['max'])}; "
            f"refused Acquires per race hand-over (mean) {ho['race_refused_mean']:.1f}; hand-off rounds where "
            f"`holding()` returned without `handed_over`: {ho['not_handed_over']}"
        )
    for how in ("handoff", "race"):
        for x in pools[how]:
            extra = (
                f"{x['handed_over']} handed over, {x['waited']} waited"
                if how == "handoff"
                else f"{x['refused']} refused Acquires, {x['waited']} acquisitions refused at least once"
            )
            print(
                f"- 9 {how}: {x['n']} acquisitions ({extra}); {x['acquire_calls'] / max(1, x['n']):.2f} Acquire + "
                f"RegisterWait calls per acquisition (plus its Release); "
                f"{x['entries_per_acquisition']:.2f} log entries per acquisition; "
                f"CPU cores: {', '.join(f'{k} {v:.2f}' for k, v in x['cpu'].items())}, SDK workers {x['sdk_cpu']:.2f}"
            )


def report_versus(vs: VersusSettings, results: dict[str, Any], skipped: str | None) -> None:
    print("\n## waitgraph beside etcd, same run (issue #20)\n")
    if skipped:
        print(f"- not measured: {skipped}")
        return
    v = results.get("versus")
    if not v:
        print("- not measured: the section did not run (see errors)")
        return
    wg, et = v["wg"], v["etcd"]
    print(
        f"- {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average before the run "
        f"{results.get('loadavg_before', '?')}, after {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores, shared with "
        "whatever else runs: read the ratios, measured minutes apart on the same machine)"
    )
    print(
        f"- etcd {v['etcd_version']} (Debian `etcd-server`), 3 members on loopback, client = Python gRPC stubs "
        "generated at run time from Debian's `golang-etcd-server-dev` protos (scripts/etcd_bench.py); "
        f"{vs.rounds} round(s), alternating which system goes first, a fresh cluster per system per round"
    )
    print(
        f"- shapes: {vs.samples} single-writer samples after 50 warm-ups; {AGENTS} writers for {vs.seconds:g}s "
        f"(closed loops; waitgraph: RegisterWait re-registering its open edge, no CloseWait; etcd: Put of a 64-byte "
        f"value, or Txn comparing the writer's key's mod_revision and putting 2 keys); SDK and etcd clients in "
        f"{max(1, vs.procs)} processes; waitgraph unary in this one asyncio process, and again through the SDK with "
        f"batching off in {max(1, vs.procs)} processes as etcd's clients run; failover {vs.failover_trials} "
        "kill(s) per durable round"
    )
    print("- several values = one per round, in round order; the ratio is of their medians\n")
    print("| figure | waitgraph | etcd | waitgraph / etcd |")
    print("|---|---|---|---|")

    fmt, ratio = _fmt_vals, _ratio_of_medians

    def row(label: str, a: list[float], b: list[float], kind: str) -> None:
        print(f"| {label} | {fmt(a, kind)} | {fmt(b, kind)} | {ratio(a, b, kind)} |")

    lat_wg = [r["latency"] for r in wg if "latency" in r]
    lat_et = [r["latency"] for r in et if "latency" in r]
    etcd_p50s = [x["p50"] for x in lat_et]
    row("unary write p50, durable (wg default, etcd default)", [x["p50"] for x in lat_wg], etcd_p50s, "ms")
    row("unary write p99, durable", [x["p99"] for x in lat_wg], [x["p99"] for x in lat_et], "ms")
    nf_wg = [v["wg_nf"]] if "wg_nf" in v else []
    nf_et = [v["etcd_nf"]] if "etcd_nf" in v else []
    row(
        "unary write p50, not durable (wg `--no-fsync`, etcd `--unsafe-no-fsync`)",
        _vals(nf_wg, "latency", "p50"),
        _vals(nf_et, "latency", "p50"),
        "ms",
    )
    row(
        f"{AGENTS} writers, one unary call per write (wg RegisterWait vs etcd put), durable",
        _vals(wg, "unary64", "rate"),
        _vals(et, "put64", "rate"),
        "rate",
    )
    row(
        f"the same, waitgraph's writers in {max(1, vs.procs)} processes as etcd's (SDK, batching off)",
        _vals(wg, "unary64p", "rate"),
        _vals(et, "put64", "rate"),
        "rate",
    )
    row(
        f"{AGENTS} writers through the SDK's `WriteBatch` (RegisterWait) vs etcd put, durable",
        _vals(wg, "sdk64", "rate"),
        _vals(et, "put64", "rate"),
        "rate",
    )
    row(
        "the same vs etcd's txn (compare mod_revision, put 2 keys), durable",
        _vals(wg, "sdk64", "rate"),
        _vals(et, "txn64", "rate"),
        "rate",
    )
    row(
        "CPU per write, all processes: wg SDK vs etcd put",
        _vals(wg, "sdk64", "cpu_ms_per_write"),
        _vals(et, "put64", "cpu_ms_per_write"),
        "cpu",
    )
    row(
        "CPU per write, the 3 servers alone (wg's nodes with their fronts, etcd's members): SDK vs put",
        [x for r in wg for x in _server_cpu_ms(r, "sdk64")],
        [x for r in et for x in _server_cpu_ms(r, "put64")],
        "cpu",
    )
    row(
        "CPU per write, waitgraph's apply alone on 3 replicas (`bench_apply.py`, node path, the SDK shape's write, "
        "one idle process) vs etcd's 3 members' whole put",
        [3 * r["apply_us"] / 1000 for r in v.get("raft", []) if "apply_us" in r],
        [x for r in et for x in _server_cpu_ms(r, "put64")],
        "cpu",
    )
    row(
        "CPU per write, all processes: wg unary vs etcd put",
        _vals(wg, "unary64", "cpu_ms_per_write"),
        _vals(et, "put64", "cpu_ms_per_write"),
        "cpu",
    )
    row(
        f"CPU per write, all processes: wg unary in {max(1, vs.procs)} processes vs etcd put",
        _vals(wg, "unary64p", "cpu_ms_per_write"),
        _vals(et, "put64", "cpu_ms_per_write"),
        "cpu",
    )
    row(
        "failover, kill -9 leader → first write, p50",
        [r["failover"]["p50"] for r in wg if "failover" in r],
        [r["failover"]["p50"] for r in et if "failover" in r],
        "ms",
    )
    raft = v.get("raft", [])
    raw_p50 = [r["raw"]["p50_ms"] / 1000 for r in raft if "raw" in r]
    layer_p50 = [r["wrapper"]["p50_ms"] / 1000 for r in raft if "wrapper" in r]
    row(
        "a lone write through pysyncobj alone, p50: a counter in-process at the leader (no gRPC, no state machine, "
        "journal never flushed) vs etcd's whole durable put",
        raw_p50,
        etcd_p50s,
        "ms",
    )
    row(
        "a lone write through waitgraph's Raft layer alone, p50: `RaftNode` and the state machine in-process at the "
        "leader, durable, no gRPC, vs etcd's whole durable put",
        layer_p50,
        etcd_p50s,
        "ms",
    )
    waits = [
        f"waitgraph {_waits(r['sdk64'])} / etcd {_waits(e['put64'])}"
        for r, e in zip(wg, et, strict=False)
        if "waits" in r.get("sdk64", {}) and "waits" in e.get("put64", {})
    ]
    if waits:
        print(
            f"\nThreads runnable but waiting for a core, on average, 64 writers (waitgraph's SDK shape, etcd's put), "
            f"per round: {'; '.join(waits)} (the servers' sum first; waitgraph's 4 SDK processes are measured too, "
            "etcd's client processes are not)."
        )
    floor = v.get("grpc_floor")
    if floor:
        lone = [x["p50"] * 1000 for x in lat_wg]
        print(
            f"\nThe floor, same run: a grpc.aio unary call that does nothing (scripts/bench_gateway.py "
            f"`grpc_floor`): lone p50 {floor['p50_ms']:.2f} ms; {AGENTS} callers in one asyncio process "
            f"{rate(floor['rate'])}/s, server CPU {floor['server_ms']:.3f} ms and client CPU "
            f"{floor['client_ms']:.3f} ms per call (waitgraph's durable unary p50 is "
            f"{_med(lone) / floor['p50_ms']:.1f}x it)."
        )
    front = v.get("front_floor")
    if front:
        print(
            f"\nThe same call through the native gRPC front, relayed to its Python handler as a node relays every "
            f"unary call (`grpc_floor(front=True)`): lone p50 {front['p50_ms']:.2f} ms; {AGENTS} callers "
            f"{rate(front['rate'])}/s, server CPU (Python and the front) {front['server_ms']:.3f} ms and client CPU "
            f"{front['client_ms']:.3f} ms per call."
        )
    call = front or floor
    if call and layer_p50 and etcd_p50s:
        under = _med(layer_p50) * 1000 + call["p50_ms"]
        etcd_p50 = _med(etcd_p50s) * 1000
        print(
            f"\nWhat waitgraph's unary p50 cannot go below here with its replication path as it is: its Raft layer "
            f"alone ({_med(layer_p50) * 1000:.2f} ms) plus one lone call that does nothing through "
            f"{'its gRPC front' if front else 'grpc.aio'} ({call['p50_ms']:.2f} ms) = {under:.2f} ms, "
            f"{under / etcd_p50:.2f}x etcd's whole put ({etcd_p50:.2f} ms; medians of the rounds)."
        )
    print()
    print("### waitgraph: durable (default) vs `--no-fsync`, and under the stalling attack (issue #15)\n")
    print("| figure | durable (default) | `--no-fsync` | durable, huge-length attack on all 3 Raft ports |")
    print("|---|---|---|---|")
    w0 = wg[0] if wg else {}

    def cell(run: dict[str, Any], shape: str, key: str, kind: str) -> str:
        if shape not in run:
            return "—"
        return fmt([run[shape][key]], kind)

    nf = v.get("wg_nf", {})
    print(
        f"| unary write p50 / p99 | {cell(w0, 'latency', 'p50', 'ms')} / {cell(w0, 'latency', 'p99', 'ms')} | "
        f"{cell(nf, 'latency', 'p50', 'ms')} / {cell(nf, 'latency', 'p99', 'ms')} | "
        f"{cell(w0, 'attack_latency', 'p50', 'ms')} / {cell(w0, 'attack_latency', 'p99', 'ms')} |"
    )
    print(
        f"| registrations/s, {AGENTS} writers, SDK | {cell(w0, 'sdk64', 'rate', 'rate')} | "
        f"{cell(nf, 'sdk64', 'rate', 'rate')} | {cell(w0, 'attack_sdk64', 'rate', 'rate')} |"
    )
    print(
        f"| write p99 under that load, SDK | {cell(w0, 'sdk64', 'p99', 'ms')} | {cell(nf, 'sdk64', 'p99', 'ms')} | "
        f"{cell(w0, 'attack_sdk64', 'p99', 'ms')} |"
    )
    print(
        f"| registrations/s, {AGENTS} writers, unary | {cell(w0, 'unary64', 'rate', 'rate')} | "
        f"{cell(nf, 'unary64', 'rate', 'rate')} | — |"
    )
    if "attack_term_changed" in w0:
        failed = w0.get("attack_sdk64", {}).get("failed", "?")
        print(
            f"\n- under the attack: Raft term changed: {'**yes**' if w0['attack_term_changed'] else 'no'}; "
            f"writes refused: {failed}"
        )
    if v.get("retried"):
        print(f"\n- runs done again on a fresh cluster after a failure: {v['retried']}")
    print("\n### versus details\n")
    for side, runs in (("waitgraph", wg), ("etcd", et)):
        for i, r in enumerate(runs):
            shapes = {
                k: {kk: (round(vv, 6) if isinstance(vv, float) else vv) for kk, vv in s.items() if kk != "samples"}
                for k, s in r.items()
                if isinstance(s, dict)
            }
            print(f"- {side} round {i + 1}: {json.dumps(shapes)}")
    for key in ("wg_nf", "etcd_nf"):
        if key in v:
            print(f"- {key}: {json.dumps({k: s for k, s in v[key].items() if isinstance(s, dict)})}")
    if wg:
        print(f"- waitgraph node: `{wg[0]['command']}`")
    if et:
        print(f"- etcd member: `{et[0]['command']}`")


def met(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**yes**" if ok else "**no**")


def report(st: Settings, args: argparse.Namespace, results: dict[str, Any], errors: dict[str, str]) -> None:
    raw = results.get("raw", {})
    r_raw, r_wrap = raw.get("raw", {}), raw.get("wrapper", {})

    def rawfig(r: dict[str, Any], key: str, kind: str) -> str:
        if "error" in r:
            return "error"
        if key not in r:
            return "—"
        return ms(r[key] / 1000) if kind == "ms" else f"{rate(r[key])} writes/s"

    direct = shlex.join(["python", "scripts/bench_cluster.py", *sys.argv[1:]])
    print("## scripts/bench cluster\n")
    print(f"- command: `{shlex.join(['scripts/bench', 'cluster', *sys.argv[1:]])}` (= `{direct}`)")
    print(
        f"- machine: {os.cpu_count()} cores ({cpu_model()}), {psutil.virtual_memory().total / 2**30:.0f} GiB, "
        f"Linux {platform.release()}, Python {platform.python_version()}, grpcio {grpc.__version__}, "
        f"pysyncobj {_version('pysyncobj')}"
    )
    print(
        f"- **the {os.cpu_count()} cores are shared** by the 3 node processes, the benchmark client (one asyncio "
        "process) and, for the raw rows, the 3 raw processes: nothing here is a per-node figure of a real "
        "deployment (one node per machine)" + ("; py-spy was sampling during figure 2" if st.profile else "")
    )
    print(
        f"- load average before the run {results.get('loadavg_before', '?')}, after {os.getloadavg()[0]:.2f}; "
        "`others` in the CPU figures below = every process not started by this run (other work on the machine)"
    )
    print(f"- nodes: `{results.get('serve_command', '?')}` (n1 shown; secret and tokens generated per run)")
    print(
        f"- settings: {st.samples} latency samples, {AGENTS} agents for {st.seconds:g}s per throughput figure, "
        f"{st.recovery_trials} recovery trials, {st.failover_trials} failover trials, soak {st.soak_s:g}s; "
        f"confirmation window {WINDOW_MS} ms and detection every {DETECT_MS} ms (the defaults)"
        + (
            f"; **experiment: nodes run with sys.setswitchinterval({NODE_SWITCH_INTERVAL_S * 1000:g} ms)**"
            if NODE_SWITCH_INTERVAL_S is not None
            else ""
        )
        + ("; **diagnosis: `--timeline` wrappers in the nodes and figure 2's SDK workers**" if TIMELINE_DIR else "")
    )
    print()
    print(
        "| # | figure | waitgraph: 3 x `waitgraph serve`, gRPC client | raw pysyncobj counter (in-process, "
        "at the leader) | RaftNode + state machine (in-process, at the leader) | target | met? |"
    )
    print("|---|---|---|---|---|---|---|")

    lat = results.get("latency")
    if lat:
        print(
            f"| 1 | unary RegisterWait at the leader, p50 ({lat['n']} samples) | {ms(lat['p50'])} | "
            f"{rawfig(r_raw, 'p50_ms', 'ms')} | {rawfig(r_wrap, 'p50_ms', 'ms')} | ≤ 2 ms | "
            f"{met(lat['p50'] <= 0.002)} |"
        )
        print(
            f"| 1 | unary RegisterWait at the leader, p99 | {ms(lat['p99'])} | {rawfig(r_raw, 'p99_ms', 'ms')} | "
            f"{rawfig(r_wrap, 'p99_ms', 'ms')} | ≤ 10 ms | {met(lat['p99'] <= 0.010)} |"
        )
    else:
        print(f"| 1 | unary RegisterWait latency | error: {errors.get('latency', '?')} | | | ≤ 2 / 10 ms | n/a |")
    sdk = f"SDK: {st.sdk_procs} processes x {AGENTS // max(1, st.sdk_procs)} agents sharing one Client (WriteBatch)"
    unary = "one unary RPC per write, one asyncio client"
    rows: list[tuple[str, str, str, bool]] = []
    for prefix, how, suffix, on in (("thr_sdk_", sdk, "", st.sdk_procs > 0), ("thr_", unary, "u", st.unary)):
        if on:
            rows += [
                (f"{prefix}leader", f"committed registrations/s, {AGENTS} agents → leader; {how}", f"2{suffix}", True),
                (
                    f"{prefix}follower",
                    f"committed registrations/s, {AGENTS} agents → a follower; {how}",
                    f"3{suffix}",
                    False,
                ),
                (
                    f"{prefix}register_only",
                    f"RegisterWait only (re-register, no CloseWait), {AGENTS} agents → leader; {how}",
                    f"3b{suffix}",
                    True,
                ),
            ]
    for key, label, num, raws in rows:
        r: DriveResult | None = results.get(key)
        if key.endswith("register_only") and not st.register_only:
            continue
        if r is None:
            print(f"| {num} | {label} | error: {errors.get(key, '?')} | | | ≥ 10,000/s | n/a |")
            continue
        extra = f" ({rate(r.writes_per_s)} writes/s)" if r.closes else ""
        print(
            f"| {num} | {label} | {rate(r.reg_per_s)}/s{extra} | "
            f"{rawfig(r_raw, 'writes_per_s', 'rate') if raws else '—'} | "
            f"{rawfig(r_wrap, 'writes_per_s', 'rate') if raws else '—'} | ≥ 10,000/s | {met(r.reg_per_s >= 10_000)} |"
        )
    rec = results.get("recovery")
    if rec:
        print(
            f"| 4 | cycle closed → victim CANCELLING, epoch committed (its stream), p50 ({rec['n']} cycles) | "
            f"{ms(rec['p50'])} | — | — | ≤ {WINDOW_MS} + 50 ms | {met(rec['p50'] <= (WINDOW_MS + 50) / 1000)} |"
        )
        print(f"| 4 | the same, p99 | {ms(rec['p99'])} | — | — | — | — |")
    elif st.recovery_trials:
        print(f"| 4 | recovery | error: {errors.get('recovery', '?')} | — | — | ≤ {WINDOW_MS} + 50 ms | n/a |")
    fo = results.get("failover")
    if fo:
        print(
            f"| 5 | failover: leader kill -9 → first committed write, p50 ({fo['n']} kills) | {ms(fo['p50'])} "
            f"(max {ms(fo['max'])}) | — | — | ≤ 1 s | {met(fo['p50'] <= 1.0)} |"
        )
    elif st.failover_trials:
        print(f"| 5 | failover | error: {errors.get('failover', '?')} | — | — | ≤ 1 s | n/a |")
    soak = results.get("soak")
    if soak:
        d: DriveResult = soak["drive"]
        conv = soak["converged"]
        lag = max((v for v in soak["max_lag"].values() if v is not None), default=None)
        ok = conv["after_s"] is not None and conv["after_s"] <= 5.0
        full = st.soak_s >= 60
        verdict = met(ok) if full else f"{met(ok)} for {st.soak_s:g}s (the target asks 60 s)"
        if conv["after_s"] is None:
            conv_text = f"did NOT converge within 60 s: last (applied index, digest) per node {conv['last']}"
        else:
            idx, dig = next(iter(conv["last"].values()))
            conv_text = f"all 3 at index {idx}, digest {dig}…, {conv['after_s']:.2f}s after load stopped"
        failed = sum(d.other.values())
        churn = (
            f"; **{len(soak['changes'])} leader change(s)** during the load, {failed} writes refused"
            if soak["changes"] or failed
            else "; no leader change, no write refused"
        )
        print(
            f"| 6 | {st.soak_s:g} s at full throughput → leader: rate; max follower lag; replicas after load stops "
            f"| {rate(d.reg_per_s)} reg/s; max lag {lag} entries{churn}; {conv_text} | — | — | "
            f"{'60 s, ' if not full else ''}no follower behind for good (same index + digest ≤ 5 s after) | {verdict} |"
        )
    elif st.soak_s:
        print(f"| 6 | soak | error: {errors.get('soak', '?')} | — | — | no follower behind for good | n/a |")
    probe = results.get("fsync")
    probe_text = ""
    if probe:
        where = {
            "allocated": "inside allocated space, as the journal writes it",
            "appended": "appended to a growing file",
        }
        probe_text = f"; one fdatasync of a journal record here ({probe['fs']}, alternating): " + "; ".join(
            f"{what}: p50 {ms(probe[kind + '_p50'])}, p99 {ms(probe[kind + '_p99'])}"
            for kind, what in where.items()
            if kind + "_p50" in probe
        )
    durability = (
        "**on** (the default): every acknowledged entry was flushed to disk first; figures 1-6 include it"
        if st.fsync
        else "**off** (`waitgraph serve --no-fsync`, not durable): the journal is not flushed while running"
    )
    print(
        f"| 7 | durability option (journal flush/fsync) | {durability}{probe_text} | never flushed | never flushed "
        "| — | n/a |"
    )
    print()

    # -- details --------------------------------------------------------------------------------
    print("### details\n")
    if lat:
        print(
            f"- 1: at leader {lat['leader']}; RegisterWait max {ms(lat['max'])}; the CloseWait after each: "
            f"p50 {ms(lat['close_p50'])}, p99 {ms(lat['close_p99'])}. raw/wrapper p50/p99: one write at a time "
            "submitted inside the leader process (no gRPC, no client, no auth, no conversion)."
        )
    for key, num in (
        ("thr_sdk_leader", "2"),
        ("thr_sdk_follower", "3"),
        ("thr_sdk_register_only", "3b"),
        ("thr_leader", "2u"),
        ("thr_follower", "3u"),
        ("thr_register_only", "3bu"),
    ):
        r = results.get(key)
        if r is None:
            continue
        drive_key: tuple[Any, ...] = ("follower" in key, not key.endswith("register_only"))
        if key.startswith("thr_sdk"):
            drive_key = ("sdk", *drive_key)
        node = results.get("drive_nodes", {}).get(drive_key, "?")
        if r.batches:
            print(
                f"- {num}: {r.batches} WriteBatch calls carried {r.batch_items} writes "
                f"({r.batch_items / r.batches:.1f} writes per call)"
            )
        others = {k: v for k, v in r.other.items() if v}
        writes = r.registrations + r.closes
        per_entry = f"{writes / r.entries:.1f} writes per log entry (group commit)" if r.entries else "entries ?"
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in r.cpu.items())
        under_load = f"p50 {ms(statistics.median(r.latencies))}, p99 {ms(pct(r.latencies, 0.99))}"
        print(
            f"- {num}: to {node} for {r.seconds:.1f}s: {r.registrations} registrations, {r.closes} closes, "
            f"{r.entries} log entries, {per_entry}; per-call latency under load {under_load}; "
            f"not applied / errors: {others or 'none'}; CPU in cores (* = leader): {cpu} "
            f"(sum without steal {sum(v for k, v in r.cpu.items() if k != 'steal'):.2f} of {os.cpu_count()})"
            + (
                f"; threads waiting for a core, on average: {', '.join(f'{k} {v:.2f}' for k, v in r.waits.items())}"
                if r.waits
                else ""
            )
        )
    if TIMELINE_DIR is not None:
        bench_timeline.flush()  # figure 1's client marks (this process)
        for line in bench_timeline.report(Path(TIMELINE_DIR)):
            print(line)
    for variant, rv in raw.items():  # raw, wrapper (durable), wrapper-no-fsync, wrapper-attacked
        if rv:
            print(f"- raw bench `{variant}`: {json.dumps(rv)}")
    if rec:
        print(
            f"- 4: closing RegisterWait answered in p50 {ms(rec['write_p50'])}; `RecoveryProposed` reached the stream "
            f"after p50 {ms(rec['proposed_p50'])} / p99 {ms(rec['proposed_p99'])} (detection loop); `CancelRequested` "
            f"after "
            f"p50 {ms(rec['p50'])} / p99 {ms(rec['p99'])} / max {ms(rec['max'])}; the part after the proposal is the "
            f"{WINDOW_MS} ms window (logical time from the proposal's stamp) plus the wait for the next leader "
            f"loop step and the votes. Decisions other than VICTIM-with-epoch: {rec['problems'] or 'none'}."
        )
    if fo:
        samples = ", ".join(ms(s) for s in fo["samples"])
        print(
            f"- 5: samples {samples}; a survivor first said `role=leader` (Status polled every ~10 ms) after "
            f"{', '.join(ms(s) for s in fo['leader_seen'])}; leader changes {fo['elected']}; write attempts per trial "
            f"{fo['attempts']}, refusals seen {fo['why']}; "
            f"restart of the killed node until caught up p50 {fo['restart_p50']:.1f}s. Raft timers: election timeout "
            "0.5-1.0 s, heartbeat 0.1 s (cluster/node/raft/_config.py RaftConfig)."
        )
    if soak:
        d = soak["drive"]
        print(
            f"- 6: leader {soak['leader']}; {d.registrations} registrations + {d.closes} closes in {d.seconds:.1f}s, "
            f"{d.entries} log entries; not applied / errors: {({k: v for k, v in d.other.items() if v}) or 'none'}; "
            f"leader changes (s into the soak, new leader) {soak['changes'] or 'none'}; "
            f"{soak['polls']} Status polls: follower lag (leader commit - follower applied, entries) max "
            f"{soak['max_lag']}, median {soak['p50_lag']}, at the last poll {soak['last_lag']}; RSS MB before→after "
            + ", ".join(f"{k} {a:.0f}→{b:.0f}" for k, (a, b) in soak["rss_mb"].items())
            + "; CPU cores: "
            + ", ".join(f"{k} {v:.2f}" for k, v in d.cpu.items())
            + f"; one Status(include_digest) took up to {soak['converged']['read_s']:.2f}s"
        )
    print_errors(errors)
    profiles = results.get("profiles")
    if profiles:
        print()
        print(
            f"### py-spy during figure 2 ({st.seconds:g}s, --gil, {PROFILE_HZ} Hz, "
            f"{'--native: the processes were paused per sample' if st.profile == 'native' else '--nonblocking'})\n"
        )
        for name, lines in profiles.items():
            print(f"**{name}**\n")
            print("\n".join(lines))
            print()


def print_errors(errors: dict[str, str]) -> None:
    if errors:
        print()
        print("### errors (phases that produced no figure)\n")
        for k, v in errors.items():
            print(f"- {k}: {v}")


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a short run (~1 min): fewer samples, shorter phases")
    p.add_argument("--samples", type=int, help="figure 1 samples (default 3000; --quick 2000)")
    p.add_argument("--seconds", type=float, help="figures 2/3 duration (default 10; --quick 5)")
    p.add_argument("--recovery-trials", type=int, help="figure 4 cycles (default 40; --quick 20)")
    p.add_argument("--failover-trials", type=int, help="figure 5 kills (default 7; --quick 3; 0 skips)")
    p.add_argument("--soak-s", type=float, help="figure 6 duration (default 60; --quick 10; 0 skips)")
    p.add_argument("--register-only", action=argparse.BooleanOptionalAction, help="figure 3b (default: full run)")
    p.add_argument("--no-raw", action="store_true", help="skip the raw pysyncobj / wrapper columns")
    p.add_argument(
        "--profile",
        nargs="?",
        const="python",
        choices=["python", "native"],
        help="py-spy the leader, a follower and the client during figure 2 (native: with C/Cython frames)",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (node logs, data)")
    p.add_argument(
        "--sdk-procs",
        type=int,
        default=4,
        help="figures 2/3 through the SDK: the 64 agents run in this many processes sharing one Client each "
        "(default 4; 0 skips those rows)",
    )
    p.add_argument(
        "--no-unary",
        action="store_true",
        help="skip the one-RPC-per-write rows of figures 2/3 (unary stubs from one asyncio process)",
    )
    p.add_argument("--sdk-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--etcd",
        choices=["auto", "off", "only"],
        default="auto",
        help="the waitgraph-beside-etcd section (issue #20; needs Debian's etcd-server and golang-etcd-server-dev): "
        "auto = after the other figures when etcd is installed, only = that section alone, off = skip it",
    )
    p.add_argument("--rounds", type=int, help="etcd section: alternating rounds (default 2; --quick 1)")
    p.add_argument("--versus-samples", type=int, help="etcd section: single-writer samples (default 1000; --quick 300)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes everywhere (the smoke test: checks the benchmark runs, its figures mean nothing)",
    )
    p.add_argument(
        "--handoff",
        choices=["auto", "off", "only"],
        default="auto",
        help="figures 8/9, hand-off beside wake-and-race (issue #21): auto = with the other figures, "
        "only = these alone on the cluster, off = skip them",
    )
    p.add_argument("--handoff-rounds", type=int, help="figure 8 rounds (default 200; --quick 50; 0 skips)")
    p.add_argument(
        "--tracing",
        choices=["auto", "off", "only"],
        default="auto",
        help="figure 10, tracing on beside off (issue #42): auto = after the other figures, only = alone, off = skip",
    )
    p.add_argument("--tracing-s", type=float, help="figure 10 duration per measurement (default 10; --quick 3)")
    p.add_argument("--tracing-rounds", type=int, help="figure 10 alternating rounds (default 2; --quick 1)")
    p.add_argument("--pool-s", type=float, help="figure 9 duration per measurement (default 10; --quick 3; 0 skips)")
    p.add_argument("--pool-rounds", type=int, help="figure 9 alternating rounds (default 2; --quick 1)")
    p.add_argument("--pool-agents", type=int, default=AGENTS, help=f"figure 9 agents (default {AGENTS})")
    p.add_argument("--pool-slots", type=int, default=8, help="figure 9 pool size (default 8)")
    p.add_argument("--pool-work-ms", type=float, default=1.0, help="figure 9 work while holding (default 1 ms)")
    p.add_argument("--json-out", type=Path, help="also write the etcd section's and figures 8/9's results as JSON here")
    p.add_argument(
        "--no-fsync",
        dest="fsync",
        action="store_false",
        help="run the nodes with --no-fsync (NOT durable: acknowledged before the journal is on disk)",
    )
    p.add_argument(
        "--node-switch-interval-ms",
        type=float,
        help="experiment: start each node with sys.setswitchinterval(this) (Python's default is 5 ms)",
    )
    p.add_argument(
        "--timeline",
        type=Path,
        metavar="DIR",
        help="diagnosis: time every stage of figure 1's unary calls and figure 2's WriteBatch calls "
        "(scripts/bench_timeline.py: the nodes, the SDK workers and figure 1's client write events into DIR) and "
        "print where a call's time goes; the wrappers cost a little, "
        "so the figures of such a run are not comparable with others",
    )
    args = p.parse_args()
    if args.sdk_worker:
        return sdk_worker()
    global NODE_SWITCH_INTERVAL_S, TIMELINE_DIR
    if args.node_switch_interval_ms is not None:
        NODE_SWITCH_INTERVAL_S = args.node_switch_interval_ms / 1000
    if args.timeline is not None:
        args.timeline.mkdir(parents=True, exist_ok=True)
        if any(args.timeline.glob("tl-*.txt")):
            p.error(f"--timeline {args.timeline}: holds the events of an earlier run; give an empty directory")
        TIMELINE_DIR = str(args.timeline.resolve())
    q = args.quick or args.smoke
    tiny = args.smoke
    st = Settings(
        samples=args.samples or (20 if tiny else 2000 if q else 3000),
        seconds=args.seconds or (1.0 if tiny else 5.0 if q else 10.0),
        recovery_trials=args.recovery_trials if args.recovery_trials is not None else (2 if tiny else 20 if q else 40),
        failover_trials=args.failover_trials if args.failover_trials is not None else (1 if tiny else 3 if q else 7),
        soak_s=args.soak_s if args.soak_s is not None else (2.0 if tiny else 10.0 if q else 60.0),
        register_only=args.register_only if args.register_only is not None else not q,
        profile=args.profile,
        keep=args.keep,
        fsync=args.fsync,
        sdk_procs=args.sdk_procs,
        unary=not args.no_unary,
    )
    hs = HandoffSettings(
        mode=args.handoff,
        rounds=args.handoff_rounds if args.handoff_rounds is not None else (3 if tiny else 50 if q else 200),
        pool_s=args.pool_s if args.pool_s is not None else (1.0 if tiny else 3.0 if q else 10.0),
        pool_rounds=args.pool_rounds or (1 if q else 2),
        pool_agents=args.pool_agents if not tiny else min(args.pool_agents, 8),
        pool_slots=args.pool_slots if not tiny else min(args.pool_slots, 2),
        work_ms=args.pool_work_ms,
        procs=max(1, st.sdk_procs) if not tiny else min(2, max(1, st.sdk_procs)),
    )
    if hs.pool_agents < 1 or hs.pool_slots < 1 or hs.rounds < 0 or hs.pool_s < 0 or hs.pool_rounds < 1:
        p.error("--pool-agents, --pool-slots and --pool-rounds must be >= 1, --handoff-rounds and --pool-s >= 0")

    vs = VersusSettings(
        rounds=args.rounds or (1 if q else 2),
        samples=args.versus_samples or (20 if tiny else 300 if q else 1000),
        seconds=st.seconds,
        failover_trials=1 if tiny else 2 if q else 3,
        procs=st.sdk_procs,
    )
    ts = TracingSettings(
        mode=args.tracing,
        seconds=args.tracing_s or (1.0 if tiny else 3.0 if q else 10.0),
        rounds=args.tracing_rounds or (1 if q else 2),
        procs=max(1, st.sdk_procs),
    )
    etcd_missing = None if args.etcd == "off" else _load_script("etcd_bench").available()
    if args.etcd == "only" and etcd_missing:
        print(f"--etcd only: {etcd_missing}", file=sys.stderr)
        return 2

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored (`&`)
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    t0 = time.perf_counter()
    results["loadavg_before"] = f"{os.getloadavg()[0]:.2f}"
    try:
        results["fsync"] = fsync_probe(root) | {"fs": fs_type(root)}
        if args.etcd != "only" and ts.mode != "only":
            if not args.no_raw and hs.mode != "only":
                print("... raw pysyncobj and RaftNode wrapper (scripts/bench_raw_raft.py)", file=sys.stderr, flush=True)
                results["raw"] = run_raw(st.samples, st.seconds)
            asyncio.run(run(st, hs, root, results, errors))
        if ts.mode != "off" and args.etcd != "only" and hs.mode != "only":
            asyncio.run(run_tracing(ts, root, results, errors))
        if args.etcd != "off" and not etcd_missing and ts.mode != "only":
            # --timeline times figures 1 and 2 only: the etcd section's clusters reuse the agents'
            # names, so their request ids would join with the first cluster's calls.
            timeline, TIMELINE_DIR = TIMELINE_DIR, None
            try:
                asyncio.run(run_versus(vs, root, results, errors))
            finally:
                TIMELINE_DIR = timeline
    except KeyboardInterrupt:
        print("interrupted; every node process is being killed", file=sys.stderr)
        _kill_all()
        return 130
    finally:
        _kill_all()
        if st.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    if args.etcd != "only" and hs.mode != "only" and ts.mode != "only":
        report(st, args, results, errors)
    else:
        print_errors(errors)
    if args.etcd != "only" and ts.mode != "only":
        report_handoff(hs, results)
    report_tracing(ts, results)
    if args.etcd != "off" and ts.mode != "only":
        report_versus(vs, results, etcd_missing)
    if args.json_out is not None:
        handoff = {k: v for k, v in results.items() if k == "handoff" or k.startswith("pool_")}
        args.json_out.write_text(json.dumps(results.get("versus", {}) | handoff, default=str))
    print(f"\n(total run time {time.perf_counter() - t0:.0f}s)")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
