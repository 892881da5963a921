"""etcd beside waitgraph in ``scripts/bench cluster`` (issue #20): a 3-member etcd cluster on
loopback and the same shapes the waitgraph side measures. Imported by ``scripts/bench_cluster.py``;
run directly only as its client worker (``--worker``, a spec as JSON on stdin).

- etcd: Debian's ``etcd-server`` (``/usr/bin/etcd``, 3.4.23 on bookworm), 3 members, durable by
  default (etcd fsyncs its WAL before it acknowledges); ``durable=False`` adds
  ``--unsafe-no-fsync``.
- The client: Python gRPC stubs generated at run time into a temporary directory from the
  ``.proto`` files Debian's ``golang-etcd-server-dev`` ships (etcdserverpb/rpc.proto,
  mvccpb/kv.proto, authpb/auth.proto), with the gogoproto imports/options and the
  ``google.api.http`` options stripped (they only steer Go code generation and the HTTP gateway;
  the messages and the wire are unchanged). Generated, not committed: the protos are Debian's,
  the generator is the pinned grpcio-tools of the dev extras, and nothing stale can be left here.
- Shapes: one writer (Put at the leader, p50/p99); N writers in closed loops (one Put, or one Txn
  that compares the writer's key's mod_revision and puts two keys) spread over client worker
  processes like the SDK's; CPU per write (etcd processes + client workers, psutil); failover
  (kill -9 of the leader → first successful Put on a survivor).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PROTO_ROOT = Path("/usr/share/gocode/src/go.etcd.io/etcd")
PROTOS = ("etcdserver/etcdserverpb/rpc.proto", "mvcc/mvccpb/kv.proto", "auth/authpb/auth.proto")
ETCD = "etcd"


def available() -> str | None:
    """None when etcd can run here, else why not (what to install)."""
    if shutil.which(ETCD) is None:
        return "no `etcd` on PATH (apt-get install etcd-server)"
    missing = [p for p in PROTOS if not (PROTO_ROOT / p).exists()]
    if missing:
        return f"no etcd .proto files at {PROTO_ROOT} (apt-get install golang-etcd-server-dev)"
    return None


def etcd_version() -> str:
    try:
        out = subprocess.run([ETCD, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    m = re.search(r"etcd Version: (\S+)", out)
    return m.group(1) if m else "?"


_GOGO_IMPORT = re.compile(r'^\s*import\s+"(gogoproto/gogo|google/api/annotations)\.proto";\s*$', re.M)
_GOGO_OPTION = re.compile(r"^\s*option\s+\(gogoproto\.[^)]*\)\s*=\s*[^;]*;\s*$", re.M)
_GOGO_FIELD = re.compile(r"\s*\[\s*\(gogoproto\.[^\]]*\]")
_HTTP_OPTION = re.compile(r"option\s+\(google\.api\.http\)\s*=\s*\{.*?\};", re.S)


def strip_proto(text: str) -> str:
    """The .proto without gogoproto and google.api.http (Go codegen and gateway hints only)."""
    text = _HTTP_OPTION.sub("", text)
    text = _GOGO_IMPORT.sub("", text)
    text = _GOGO_OPTION.sub("", text)
    return _GOGO_FIELD.sub("", text)


def generate_stubs(out_dir: Path) -> tuple[ModuleType, ModuleType]:
    """rpc_pb2 and rpc_pb2_grpc, generated into ``out_dir`` (which goes on sys.path)."""
    from grpc_tools import protoc

    src = out_dir / "src"
    for rel in PROTOS:
        dest = src / "etcd" / rel  # rpc.proto imports "etcd/mvcc/mvccpb/kv.proto"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(strip_proto((PROTO_ROOT / rel).read_text()))
    gen = out_dir / "gen"
    gen.mkdir(parents=True, exist_ok=True)
    include = str(Path(protoc.__file__).parent / "_proto")
    argv = ["protoc", f"-I{src}", f"-I{include}", f"--python_out={gen}", f"--grpc_python_out={gen}"]
    code = protoc.main([*argv, *(str(src / "etcd" / p) for p in PROTOS)])
    if code != 0:
        raise RuntimeError(f"protoc failed ({code}) on the stripped etcd protos in {src}")
    if str(gen) not in sys.path:
        sys.path.insert(0, str(gen))
    pb2 = importlib.import_module("etcd.etcdserver.etcdserverpb.rpc_pb2")
    grpc_mod = importlib.import_module("etcd.etcdserver.etcdserverpb.rpc_pb2_grpc")
    return pb2, grpc_mod


def _free_ports(n: int) -> list[int]:
    sys.path.insert(0, str(REPO))
    from waitgraph.dev.localcluster import free_ports

    return free_ports(n)


@dataclass
class Member:
    name: str
    client: str
    peer: str
    args: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([ETCD, *self.args], stdout=log, stderr=log)
        _LIVE.add(self.proc)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            _LIVE.discard(self.proc)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_tail(self, n: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


_LIVE: set[subprocess.Popen[bytes]] = set()


def kill_all() -> None:
    for proc in list(_LIVE):
        with contextlib.suppress(Exception):
            if proc.poll() is None:
                proc.kill()
            proc.wait(5)
        _LIVE.discard(proc)


class EtcdCluster:
    """Three etcd members on free loopback ports, each with its own data directory under ``root``."""

    def __init__(self, root: Path, pb2: ModuleType, grpc_mod: ModuleType, durable: bool = True) -> None:
        import grpc

        self.grpc = grpc
        self.pb2, self.grpc_mod = pb2, grpc_mod
        self.durable = durable
        ports = _free_ports(6)
        names = ["e1", "e2", "e3"]
        clients = [f"127.0.0.1:{p}" for p in ports[:3]]
        peers = [f"127.0.0.1:{p}" for p in ports[3:]]
        initial = ",".join(f"{n}=http://{p}" for n, p in zip(names, peers, strict=True))
        root.mkdir(parents=True, exist_ok=True)
        self.members: list[Member] = []
        for name, client, peer in zip(names, clients, peers, strict=True):
            args = ["--name", name, "--data-dir", str(root / name), "--logger", "zap", "--log-level", "error"]
            args += ["--listen-client-urls", f"http://{client}", "--advertise-client-urls", f"http://{client}"]
            args += ["--listen-peer-urls", f"http://{peer}", "--initial-advertise-peer-urls", f"http://{peer}"]
            args += ["--initial-cluster", initial, "--initial-cluster-state", "new"]
            args += ["--initial-cluster-token", f"bench-{os.getpid()}"]
            if not durable:
                args.append("--unsafe-no-fsync")
            self.members.append(Member(name, client, peer, args, root / f"{name}.log"))
        self.channels: dict[str, Any] = {}
        self.example_command = " ".join([ETCD, *self.members[0].args])

    async def start(self) -> None:
        for m in self.members:
            m.spawn()
        for m in self.members:
            await self.wait_port(m)
        await self.leader()

    async def wait_port(self, m: Member, timeout_s: float = 30.0) -> None:
        host, port = m.client.rsplit(":", 1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not m.alive():
                raise RuntimeError(f"etcd {m.name} exited:\n{m.log_tail()}")
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                await asyncio.sleep(0.05)
        raise TimeoutError(f"etcd {m.name} did not open its client port")

    def channel(self, m: Member) -> Any:
        if m.name not in self.channels:
            self.channels[m.name] = self.grpc.aio.insecure_channel(m.client)
        return self.channels[m.name]

    def kv(self, m: Member) -> Any:
        return self.grpc_mod.KVStub(self.channel(m))

    async def status(self, m: Member) -> Any:
        stub = self.grpc_mod.MaintenanceStub(self.channel(m))
        return await stub.Status(self.pb2.StatusRequest(), timeout=1)

    async def leader(self, timeout_s: float = 30.0) -> Member:
        """The member every live member names as leader (and that answers a Put)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ids: dict[int, Member] = {}
            named: set[int] = set()
            for m in self.members:
                if not m.alive():
                    continue
                try:
                    st = await self.status(m)
                except self.grpc.aio.AioRpcError:
                    named.add(-1)
                    continue
                ids[st.header.member_id] = m
                named.add(st.leader)
            if len(named) == 1 and (lid := named.pop()) in ids:
                lm = ids[lid]
                with contextlib.suppress(self.grpc.aio.AioRpcError):
                    await self.kv(lm).Put(self.pb2.PutRequest(key=b"bench/ready", value=b"1"), timeout=2)
                    return lm
            await asyncio.sleep(0.05)
        raise TimeoutError("etcd: no agreed leader")

    async def close(self) -> None:
        for ch in self.channels.values():
            with contextlib.suppress(Exception):
                await ch.close()
        self.channels.clear()
        for m in self.members:
            m.kill()


# -- shapes ------------------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def latency(cluster: EtcdCluster, samples: int, warmup: int = 50) -> dict[str, Any]:
    """One writer, one Put at a time at the leader."""
    leader = await cluster.leader()
    kv = cluster.kv(leader)
    value = b"x" * 64
    lat: list[float] = []
    for i in range(samples + warmup):
        t = time.perf_counter()
        await kv.Put(cluster.pb2.PutRequest(key=b"bench/lat", value=value), timeout=10)
        if i >= warmup:
            lat.append(time.perf_counter() - t)
    return {"p50": _pct(lat, 0.5), "p99": _pct(lat, 0.99), "n": len(lat), "leader": leader.name}


@dataclass
class EtcdDrive:
    seconds: float
    writes: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)

    @property
    def writes_per_s(self) -> float:
        return self.writes / self.seconds if self.seconds else float("nan")


async def drive(cluster: EtcdCluster, writers: int, seconds: float, procs: int, mode: str, cpu: Any) -> EtcdDrive:
    """``writers`` closed loops against the leader for ``seconds``, in ``procs`` worker processes
    (``mode`` put or txn). ``cpu`` is a bench_cluster.CpuMeter over the etcd members."""
    leader = await cluster.leader()
    start_at = time.time() + 1.5
    workers = []
    for i in range(procs):
        spec = {
            "endpoint": leader.client,
            "writers": [f"w{i}-{k}" for k in range(i, writers, procs)],
            "seconds": seconds,
            "start_at": start_at,
            "mode": mode,
            "stubs": str(Path(sys.modules[cluster.pb2.__name__].__file__ or "").parents[3]),
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(spec).encode())
        proc.stdin.close()
        workers.append(proc)
    await asyncio.sleep(max(0.0, start_at - time.time()))
    cpu.start()
    outs = await asyncio.gather(*(w.communicate() for w in workers))
    res = EtcdDrive(seconds)
    res.cpu = cpu.stop()
    worker_cpu = 0.0
    seen = []
    for (out, err), w in zip(outs, workers, strict=True):
        if w.returncode != 0:
            raise RuntimeError(f"etcd worker exited {w.returncode}: {err.decode(errors='replace')[-2000:]}")
        got = json.loads(out)
        res.writes += got["writes"]
        res.failed += got["failed"]
        res.latencies.extend(got["latencies"])
        seen.append(got["seconds"])
        worker_cpu += got["cpu_s"] / max(got["seconds"], 1e-9)
    res.seconds = max(seen)
    res.cpu[f"client x{procs}"] = worker_cpu
    res.cpu["others"] = max(0.0, res.cpu["others"] - worker_cpu)
    return res


async def failover(cluster: EtcdCluster, trials: int) -> dict[str, Any]:
    """kill -9 the leader → the first Put that succeeds on a survivor (tried every ~20 ms, 0.5 s
    deadline each, alternating survivors); the killed member is restarted before the next trial."""
    samples: list[float] = []
    for i in range(trials):
        old = await cluster.leader()
        await asyncio.sleep(1.0)
        survivors = [m for m in cluster.members if m is not old]
        t0 = time.perf_counter()
        old.kill()
        cluster.channels.pop(old.name, None)
        k = 0
        while True:
            m = survivors[k % 2]
            k += 1
            try:
                await cluster.kv(m).Put(cluster.pb2.PutRequest(key=f"bench/fo-{i}".encode(), value=b"1"), timeout=0.5)
                break
            except cluster.grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.02)
            if time.perf_counter() - t0 > 60:
                raise TimeoutError("etcd: no write within 60 s of the leader's death")
        samples.append(time.perf_counter() - t0)
        old.spawn()
        await cluster.wait_port(old)
        await cluster.leader()
    return {"p50": _pct(samples, 0.5), "max": max(samples), "samples": samples, "n": len(samples)}


# -- the client worker -------------------------------------------------------------------------------


def worker() -> int:
    spec = json.loads(sys.stdin.read())
    sys.path.insert(0, spec["stubs"])
    import grpc

    pb2 = importlib.import_module("etcd.etcdserver.etcdserverpb.rpc_pb2")
    grpc_mod = importlib.import_module("etcd.etcdserver.etcdserverpb.rpc_pb2_grpc")
    value = b"x" * 64

    async def main() -> dict[str, Any]:
        lat: list[float] = []
        counts = {"writes": 0, "failed": 0}
        async with grpc.aio.insecure_channel(spec["endpoint"]) as ch:
            await ch.channel_ready()
            kv = grpc_mod.KVStub(ch)
            revs: dict[str, int] = {}
            for w in spec["writers"]:  # each writer's key exists, its mod_revision known
                out = await kv.Put(pb2.PutRequest(key=f"bench/{w}".encode(), value=value), timeout=10)
                revs[w] = out.header.revision
            await asyncio.sleep(max(0.0, spec["start_at"] - time.time()))
            t0, cpu0 = time.perf_counter(), time.process_time()
            stop = t0 + spec["seconds"]

            async def loop(w: str) -> None:
                key, key2 = f"bench/{w}".encode(), f"bench/{w}/b".encode()
                while time.perf_counter() < stop:
                    t = time.perf_counter()
                    try:
                        if spec["mode"] == "put":
                            await kv.Put(pb2.PutRequest(key=key, value=value), timeout=10)
                            ok = True
                        else:
                            cmp = pb2.Compare(
                                result=pb2.Compare.EQUAL, target=pb2.Compare.MOD, key=key, mod_revision=revs[w]
                            )
                            puts = [pb2.RequestOp(request_put=pb2.PutRequest(key=k, value=value)) for k in (key, key2)]
                            out = await kv.Txn(pb2.TxnRequest(compare=[cmp], success=puts), timeout=10)
                            ok = out.succeeded
                            revs[w] = out.header.revision
                    except grpc.aio.AioRpcError:
                        ok = False
                    if ok:
                        lat.append(time.perf_counter() - t)
                        counts["writes"] += 1
                    else:
                        counts["failed"] += 1
                        await asyncio.sleep(0.01)

            await asyncio.gather(*(loop(w) for w in spec["writers"]))
            elapsed, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
        return {**counts, "latencies": [round(x, 6) for x in lat], "seconds": elapsed, "cpu_s": cpu_s}

    print(json.dumps(asyncio.run(main())))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        raise SystemExit(worker())
    print(__doc__)
    raise SystemExit(2)
