"""Sessions benchmark (issue #37): what N merely *connected* agents cost a 3-node cluster, beside
etcd 3.4 in the same run.

    scripts/bench sessions [--sizes 0,100,1000,5000,10000] [--seconds 10] [--idle-s 10] [--procs 4]
                           [--no-etcd] [--quick] [--sdk]

Prints markdown tables; asserts nothing.

For each N, a fresh cluster of each system (the one launcher, cluster/dev/localcluster.py, for
waitgraph; scripts/etcd_bench.py's ``EtcdCluster`` for etcd) and:

- N idle agents in ``--procs`` worker processes (this script, ``--idle-worker``), spread over the
  three members, one channel per member per worker. waitgraph: each agent joins with its own
  token (lease 30 s), heartbeats every 10 s (first one at a random point of the period) and keeps
  its ``WatchEvents`` stream open. etcd: each client grants a lease (TTL 30 s), keeps it alive
  every 10 s on its own ``LeaseKeepAlive`` stream, and watches its own prefix on its own
  ``Watch`` stream. ``--sdk``: waitgraph's idle agents are instead the sessions of one SDK
  ``Client`` per worker, each with its agent's token (heartbeats every 10 s): one event stream per
  worker process (docs/sdk.md, "One stream per client").
- **streams**: the ``WatchEvents`` streams open on the nodes once all have joined
  (``waitgraph_event_streams``), printed with each waitgraph row.
- **join all**: from the workers' start until the last agent has joined (and, on etcd, its lease
  is granted and its watch created).
- **idle CPU**: the members' processes (a waitgraph node with its native front) over
  ``--idle-s`` seconds while only the idle agents run, in cores.
- **writer**: then 16 closed loops at the leader for ``--seconds``. waitgraph: each iteration is
  one execution: CreateExecution, StartExecution, Acquire of the loop's resource, CompleteExecution
  (4 writes); etcd: 4 Puts. Rate in iterations/s and p50/p99 of an iteration. The two writers do
  different work: compare what each keeps of its own rate alone (N = 0), "kept".
- **RSS**: the members' resident memory, summed, after the writer.

Every waitgraph node runs with the per-token rate limit raised to 5,000/s (the writer's agents
would hit the default 100/s alone). The script runs on an older tree too (its nodes run the
interpreter that runs the script), which is how the "before" figures are taken:
``/path/to/old/.venv/bin/python scripts/bench_sessions.py``.

Every figure also appears as a ratio to etcd's in the same run. The client processes compete for
the same cores as the servers (2 on the reference machine): the load is printed with the table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

LEASE_MS = 30_000
BEAT_S = 10.0
WRITERS = 16
WRITER_AGENTS = [f"writer{k:02d}" for k in range(WRITERS)]
CONCURRENT_JOINS = 64
"""Joins in flight per worker process."""


# -- the idle agents (a worker process) ------------------------------------------------------------------


def idle_worker() -> int:
    spec = json.loads(sys.stdin.readline())
    import grpc

    async def waitgraph_agents() -> None:
        from waitgraph.proto.v1 import agent_pb2, agent_pb2_grpc, commands_pb2

        channels = [grpc.aio.insecure_channel(e) for e in spec["endpoints"]]
        stubs = [agent_pb2_grpc.AgentServiceStub(c) for c in channels]
        streams: list[Any] = []
        gate = asyncio.Semaphore(CONCURRENT_JOINS)

        async def one(i: int, name: str, token: str) -> None:
            md = (("authorization", f"Bearer {token}"),)
            stub = stubs[i % len(stubs)]
            async with gate:
                call = stub.WatchEvents(agent_pb2.WatchEventsRequest(), metadata=md)
                streams.append(call)
                await call.read()  # "started": the stream is open
                for _ in range(50):
                    try:
                        await stub.JoinSession(
                            commands_pb2.JoinSessionRequest(agent_id=name, lease_ms=LEASE_MS, request_id=f"j-{name}"),
                            metadata=md,
                            timeout=30,
                        )
                        break
                    except grpc.aio.AioRpcError:
                        await asyncio.sleep(0.2)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i, n, t) for i, (n, t) in enumerate(spec["agents"])))
        print(json.dumps({"joined_s": time.perf_counter() - t0}), flush=True)

        async def beats(i: int, name: str, token: str) -> None:
            md = (("authorization", f"Bearer {token}"),)
            stub = stubs[i % len(stubs)]
            await asyncio.sleep(random.uniform(0, BEAT_S))
            while True:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await stub.Heartbeat(commands_pb2.HeartbeatRequest(agent_id=name), metadata=md, timeout=10)
                await asyncio.sleep(BEAT_S)

        async def drain(call: Any) -> None:
            with contextlib.suppress(Exception):
                async for _ in call:
                    pass

        tasks = [asyncio.create_task(beats(i, n, t)) for i, (n, t) in enumerate(spec["agents"])]
        tasks += [asyncio.create_task(drain(c)) for c in streams]
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes it
        for t in tasks:
            t.cancel()

    async def sdk_sessions() -> None:
        from waitgraph import Client

        agents = spec["agents"]
        endpoints = spec["endpoints"][spec["k"] % 3 :] + spec["endpoints"][: spec["k"] % 3]
        async with Client(endpoints, agents[0][1], lease_ms=LEASE_MS, connect_timeout_s=120) as client:
            sessions = [client.session(n, token=t, heartbeat_interval_s=BEAT_S) for n, t in agents]
            gate = asyncio.Semaphore(CONCURRENT_JOINS)

            async def one(s: Any) -> None:
                async with gate:
                    await s.open()

            t0 = time.perf_counter()
            await asyncio.gather(*(one(s) for s in sessions))
            print(json.dumps({"joined_s": time.perf_counter() - t0}), flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes it

    async def etcd_clients() -> None:
        sys.path.insert(0, spec["stubs"])
        pb2 = importlib.import_module("etcd.etcdserver.etcdserverpb.rpc_pb2")
        grpc_mod = importlib.import_module("etcd.etcdserver.etcdserverpb.rpc_pb2_grpc")
        channels = [grpc.aio.insecure_channel(e) for e in spec["endpoints"]]
        gate = asyncio.Semaphore(CONCURRENT_JOINS)
        tasks: list[asyncio.Task[None]] = []

        async def one(i: int, name: str) -> None:
            ch = channels[i % len(channels)]
            lease, watch = grpc_mod.LeaseStub(ch), grpc_mod.WatchStub(ch)
            async with gate:
                granted = await lease.LeaseGrant(pb2.LeaseGrantRequest(TTL=LEASE_MS // 1000), timeout=30)
                queue: asyncio.Queue[Any] = asyncio.Queue()
                prefix = f"agents/{name}/".encode()
                await queue.put(
                    pb2.WatchRequest(create_request=pb2.WatchCreateRequest(key=prefix, range_end=prefix[:-1] + b"0"))
                )

                async def requests() -> Any:
                    while True:
                        yield await queue.get()

                w = watch.Watch(requests())
                await w.read()  # created

            async def keepalive() -> None:
                async def pings() -> Any:
                    await asyncio.sleep(random.uniform(0, BEAT_S))
                    while True:
                        yield pb2.LeaseKeepAliveRequest(ID=granted.ID)
                        await asyncio.sleep(BEAT_S)

                with contextlib.suppress(Exception):
                    async for _ in lease.LeaseKeepAlive(pings()):
                        pass

            async def drain() -> None:
                with contextlib.suppress(Exception):
                    async for _ in w:
                        pass

            tasks.append(asyncio.create_task(keepalive()))
            tasks.append(asyncio.create_task(drain()))

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i, n) for i, (n, _) in enumerate(spec["agents"])))
        print(json.dumps({"joined_s": time.perf_counter() - t0}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        for t in tasks:
            t.cancel()

    run = {"waitgraph": waitgraph_agents, "sdk": sdk_sessions, "etcd": etcd_clients}[spec["system"]]
    asyncio.run(run())
    return 0


# -- the parent ----------------------------------------------------------------------------------------


@dataclass
class Row:
    system: str
    n: int
    join_s: float = float("nan")
    idle_cpu: float = float("nan")
    rate: float = float("nan")
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    rss_mb: float = float("nan")
    streams: int = -1
    """WatchEvents streams open on the nodes once all joined (waitgraph)."""
    errors: int = 0
    notes: list[str] = field(default_factory=list)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_mb(pids: list[int]) -> float:
    import psutil

    total = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            total += p.memory_info().rss + sum(c.memory_info().rss for c in p.children(recursive=True))
    return total / 2**20


async def start_idle(system: str, endpoints: list[str], agents: list[tuple[str, str]], procs: int, stubs: str) -> Any:
    """The idle agents in worker processes; returns (the processes, seconds until all joined)."""
    if not agents:
        return [], 0.0
    workers = []
    t0 = time.perf_counter()
    for k in range(procs):
        mine = agents[k::procs]
        if not mine:
            continue
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(Path(__file__).resolve()),
            "--idle-worker",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert proc.stdin is not None
        spec = {"system": system, "endpoints": endpoints, "agents": mine, "stubs": stubs, "k": k}
        proc.stdin.write((json.dumps(spec) + "\n").encode())
        await proc.stdin.drain()
        workers.append(proc)
    for w in workers:
        assert w.stdout is not None
        line = await w.stdout.readline()
        if not line:
            raise RuntimeError(f"an idle {system} worker exited before joining")
    return workers, time.perf_counter() - t0


async def stop_idle(workers: list[Any]) -> None:
    for w in workers:
        with contextlib.suppress(Exception):
            w.stdin.close()
    for w in workers:
        try:
            await asyncio.wait_for(w.wait(), 10)
        except TimeoutError:
            w.kill()
            await w.wait()


async def measure_idle(pids: dict[str, int], seconds: float) -> float:
    from bench_cluster import CpuMeter

    meter = CpuMeter(pids).start()
    await asyncio.sleep(seconds)
    cpu = meter.stop()
    return sum(v for k, v in cpu.items() if k in pids)


def event_streams(http_address: str | None) -> int:
    """A node's ``waitgraph_event_streams`` (0 from a tree without it)."""
    import urllib.request

    with urllib.request.urlopen(f"http://{http_address}/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("waitgraph_event_streams "):
                return int(float(line.split()[1]))
    return 0


async def waitgraph_row(n: int, args: argparse.Namespace, root: Path) -> Row:
    import grpc

    from waitgraph.dev.localcluster import LocalCluster
    from waitgraph.proto.v1 import agent_pb2_grpc, operator_pb2, operator_pb2_grpc
    from waitgraph.statemachine import commands as C
    from waitgraph.wire import convert

    row = Row("waitgraph", n)
    names = [f"idle{i:05d}" for i in range(n)]
    lc = LocalCluster(
        root=root,
        nodes=3,
        mode=None,
        agents=[*WRITER_AGENTS, *names],
        log_level=None,
        serve_args=args.serve_args,
        http=True,
    )
    lc.start(60)
    try:
        creds = lc.credentials
        assert creds is not None
        pids = {m.node_id: m.pid for m in lc.members if m.pid is not None}
        admin = (("authorization", f"Bearer {creds.admin}"),)
        leader = None
        for _ in range(300):
            for m in lc.members:
                async with grpc.aio.insecure_channel(m.grpc_address) as ch:
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        st = await operator_pb2_grpc.OperatorServiceStub(ch).Status(
                            operator_pb2.StatusRequest(), metadata=admin, timeout=2
                        )
                        if st.role == "leader" and st.has_quorum:
                            leader = m
            if leader is not None:
                break
            await asyncio.sleep(0.1)
        assert leader is not None, "no leader"
        endpoints = [m.grpc_address for m in lc.members]
        workers, row.join_s = await start_idle(
            "sdk" if args.sdk else "waitgraph", endpoints, [(a, creds.agents[a]) for a in names], args.procs, ""
        )
        try:
            await asyncio.sleep(2)
            row.streams = sum([await asyncio.to_thread(event_streams, m.http_address) for m in lc.members])
            row.idle_cpu = await measure_idle(pids, args.idle_s)
            async with grpc.aio.insecure_channel(leader.grpc_address) as ch:
                stub = agent_pb2_grpc.AgentServiceStub(ch)
                seq = 0

                async def do(cmd: Any, k: int) -> None:
                    # one agent per loop: each has its own token and rate limit (100/s by default)
                    nonlocal seq
                    seq += 1
                    request = convert.request_from_command(cmd, f"w-{seq}")
                    md = (("authorization", f"Bearer {creds.agents[WRITER_AGENTS[k]]}"),)
                    await getattr(stub, cmd.KIND)(request, metadata=md, timeout=10)

                for k in range(WRITERS):
                    await do(C.JoinSession(agent_id=WRITER_AGENTS[k], lease_ms=600_000), k)
                    await do(C.CreateTarget(target_id=f"resource:w{k}"), k)
                lat: list[float] = []
                stop = time.perf_counter() + args.seconds
                errors = 0

                async def loop(k: int) -> None:
                    nonlocal errors
                    i = 0
                    while time.perf_counter() < stop:
                        i += 1
                        eid = f"exec:w{k}-{i}"
                        t = time.perf_counter()
                        try:
                            await do(
                                C.CreateExecution(execution_id=eid, run_id=f"rw{k}-{i}", observed_cancel_generation=0),
                                k,
                            )
                            await do(C.StartExecution(execution_id=eid, generation=1, observed_cancel_generation=0), k)
                            await do(C.Acquire(target_id=f"resource:w{k}", execution_id=eid, generation=1), k)
                            await do(
                                C.CompleteExecution(execution_id=eid, generation=1, observed_cancel_generation=0), k
                            )
                        except grpc.aio.AioRpcError as exc:
                            errors += 1
                            if errors < 5:
                                print(f"  writer: {exc.code().name} {exc.details()}", file=sys.stderr)
                            await asyncio.sleep(0.05)
                            continue
                        lat.append(time.perf_counter() - t)

                t0 = time.perf_counter()
                await asyncio.gather(*(loop(k) for k in range(WRITERS)))
                row.rate = len(lat) / (time.perf_counter() - t0)
                row.p50_ms, row.p99_ms, row.errors = pct(lat, 0.5) * 1000, pct(lat, 0.99) * 1000, errors
            row.rss_mb = rss_mb(list(pids.values()))
        finally:
            await stop_idle(workers)
    finally:
        lc.stop(graceful=False)
    return row


async def etcd_row(n: int, args: argparse.Namespace, root: Path, stubs_dir: Path) -> Row:
    import etcd_bench

    pb2, grpc_mod = etcd_bench.generate_stubs(stubs_dir)
    row = Row("etcd", n)
    cluster = etcd_bench.EtcdCluster(root, pb2, grpc_mod)
    await cluster.start()
    try:
        pids = {m.name: m.pid for m in cluster.members}
        endpoints = [m.client for m in cluster.members]
        stubs = str(Path(sys.modules[pb2.__name__].__file__ or "").parents[3])
        names = [(f"idle{i:05d}", "") for i in range(n)]
        workers, row.join_s = await start_idle("etcd", endpoints, names, args.procs, stubs)
        try:
            await asyncio.sleep(2)
            row.idle_cpu = await measure_idle(pids, args.idle_s)
            leader = await cluster.leader()
            kv = cluster.kv(leader)
            value = b"x" * 64
            lat: list[float] = []
            stop = time.perf_counter() + args.seconds

            async def loop(k: int) -> None:
                while time.perf_counter() < stop:
                    t = time.perf_counter()
                    for j in range(4):
                        await kv.Put(pb2.PutRequest(key=f"writer/{k}/{j}".encode(), value=value), timeout=10)
                    lat.append(time.perf_counter() - t)

            t0 = time.perf_counter()
            await asyncio.gather(*(loop(k) for k in range(WRITERS)))
            row.rate = len(lat) / (time.perf_counter() - t0)
            row.p50_ms, row.p99_ms = pct(lat, 0.5) * 1000, pct(lat, 0.99) * 1000
            row.rss_mb = rss_mb(list(pids.values()))
        finally:
            await stop_idle(workers)
    finally:
        await cluster.close()
    return row


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and b == b and a == a else "-"


def table(rows: dict[tuple[str, int], Row], sizes: list[int], etcd: bool) -> str:
    out = [
        "| idle sessions | system | join all | servers' idle CPU | writer rate/s | kept | p50 / p99 ms | nodes' RSS |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in sizes:
        for system in ("waitgraph", "etcd") if etcd else ("waitgraph",):
            r = rows.get((system, n))
            if r is None:
                continue
            alone = rows.get((system, 0))
            kept = f"{r.rate / alone.rate:.0%}" if alone and alone.rate else "-"
            out.append(
                f"| {n:,} | {system} | {r.join_s:.1f} s | {r.idle_cpu:.2f} cores | {r.rate:.0f} | {kept} | "
                f"{r.p50_ms:.0f} / {r.p99_ms:.0f} | {r.rss_mb:.0f} MB |"
                + (f" ({r.errors} writer errors)" if r.errors else "")
            )
    if etcd:
        out += [
            "",
            "| idle sessions | join all | idle CPU | rate kept | p99 | RSS  (waitgraph / etcd) |",
            "|---|---|---|---|---|---|",
        ]
        for n in sizes:
            w, e = rows.get(("waitgraph", n)), rows.get(("etcd", n))
            if w is None or e is None:
                continue
            wk = w.rate / rows[("waitgraph", 0)].rate if ("waitgraph", 0) in rows else float("nan")
            ek = e.rate / rows[("etcd", 0)].rate if ("etcd", 0) in rows else float("nan")
            out.append(
                f"| {n:,} | {ratio(w.join_s, e.join_s)} | {ratio(w.idle_cpu, e.idle_cpu)} | {ratio(wk, ek)} | "
                f"{ratio(w.p99_ms, e.p99_ms)} | {ratio(w.rss_mb, e.rss_mb)} |"
            )
    return "\n".join(out)


async def main(args: argparse.Namespace) -> int:
    import etcd_bench

    sizes = [int(x) for x in args.sizes.split(",")]
    etcd = not args.no_etcd and etcd_bench.available() is None
    if not args.no_etcd and not etcd:
        print(f"etcd side skipped: {etcd_bench.available()}")
    rows: dict[tuple[str, int], Row] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as tmp:
        root = Path(tmp)
        for n in sizes:
            for system in ("waitgraph", "etcd") if etcd else ("waitgraph",):
                started = time.perf_counter()
                try:
                    if system == "waitgraph":
                        row = await waitgraph_row(n, args, root / f"wg-{n}")
                    else:
                        row = await etcd_row(n, args, root / f"etcd-{n}", root / "stubs")
                except Exception as exc:  # a size that cannot run here: say why, go on
                    print(f"{system} N={n}: failed: {type(exc).__name__}: {exc}", flush=True)
                    continue
                rows[(system, n)] = row
                print(
                    f"{system} N={n}: join {row.join_s:.1f}s idle {row.idle_cpu:.2f} cores rate {row.rate:.0f}/s "
                    f"p50/p99 {row.p50_ms:.0f}/{row.p99_ms:.0f} ms rss {row.rss_mb:.0f} MB "
                    + (f"streams {row.streams} " if system == "waitgraph" else "")
                    + f"({time.perf_counter() - started:.0f} s; load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
    print()
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; cores: {os.cpu_count()}")
    print(table(rows, sizes, etcd))
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="0,100,1000,5000,10000")
    p.add_argument("--seconds", type=float, default=10.0, help="the writer's run per size")
    p.add_argument("--idle-s", type=float, default=10.0, help="how long the idle CPU is measured")
    p.add_argument("--procs", type=int, default=4, help="worker processes hosting the idle agents")
    p.add_argument("--no-etcd", action="store_true")
    p.add_argument("--sdk", action="store_true", help="idle agents: one SDK Client per worker, a session each")
    p.add_argument("--quick", action="store_true", help="sizes 0,20; 3 s runs (the smoke test)")
    p.add_argument("--serve-arg", dest="serve_args", action="append", default=[], help="more `waitgraph serve` flags")
    args = p.parse_args(argv)
    # The writer's 16 agents each make ~100 requests/s alone: above the default per-token rate limit,
    # which would cap the figure this benchmark is about.
    args.serve_args = ["--rate-limit-per-s", "5000", "--rate-limit-burst", "5000", *args.serve_args]
    if args.quick:
        args.sizes, args.seconds, args.idle_s, args.procs = "0,20", 3.0, 2.0, 2
    return args


if __name__ == "__main__":
    if sys.argv[1:] == ["--idle-worker"]:
        sys.exit(idle_worker())
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
