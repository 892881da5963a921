"""Raw pysyncobj vs waitgraph.node.raft on a 3-node loopback cluster, with the same SyncObjConf.

    .venv/bin/python scripts/bench_raw_raft.py [--samples 500] [--concurrency 64] [--seconds 3]

Each variant starts three real processes (this script with ``--worker``). The node that is leader
measures, in its own process (no client round trip):

- single write latency: one write at a time, ``--samples`` of them, p50 and p99;
- throughput: ``--concurrency`` submitters, each waiting for its write's result before sending the
  next, for ``--seconds``.

``raw``: a SyncObj with one ``@replicated`` counter increment, called with a callback.
``wrapper``: :class:`waitgraph.node.raft.RaftNode` (restricted unpickler, truncation guard, group commit,
asyncio bridge, its own Raft wire, ``cluster/node/raft/_transport.py``: an authenticated header, an
AES-256-GCM-SIV body, the budgeted receive path; and its checksummed journal, flushed before every
acknowledgment: the default) applying a ``Tick`` envelope with a request id to the real state machine.
``wrapper-no-fsync``: the same with ``fsync=False`` (``--no-fsync``: not durable).
``wrapper-attacked``: ``wrapper`` while this script attacks every node's Raft port for the whole
measurement (a 2 GiB length prefix streaming zeros, 100 idle connections, random bytes; the
attacks of ``tests/cluster/test_raft_stall.py``), from the driver process.
All use ``waitgraph.node.raft._config.build_conf`` (password, dump file, ``appendEntriesUseBatch=False``);
raw pysyncobj keeps its own ``FileJournal`` (an mmap, never flushed) at ``raft.journal``.
``--default-batching`` adds raw pysyncobj with its default ``appendEntriesUseBatch=True``
(fewer samples: every write waits for the next append-entries period).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PASSWORD = "YmVuY2gtc2VjcmV0LW9mLXRoZS1yYXctcmFmdC1iZW5jaG1hcms"
"""Fixed (the three worker processes share it); 256 bits by the node's estimate."""


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- workers (one per node process) -----------------------------------------------------------------


def _config(args: argparse.Namespace) -> Any:
    from waitgraph.node.raft import RaftConfig

    addrs = args.addrs.split(",")
    me = addrs[args.index]
    return RaftConfig(
        raft_address=me,
        peers=tuple(a for a in addrs if a != me),
        data_dir=Path(args.data),
        password=PASSWORD,
        max_outstanding=100_000,
        fsync=args.worker != "wrapper-no-fsync",
    )


def worker_raw(args: argparse.Namespace) -> None:
    import pysyncobj.journal
    import pysyncobj.pickle

    originals = (pysyncobj.pickle.loads, pysyncobj.pickle.load, pysyncobj.journal.loads)
    from waitgraph.node.raft._config import build_conf

    # Raw means raw: undo the restricted unpickler that importing waitgraph.node.raft installed.
    pysyncobj.pickle.loads, pysyncobj.pickle.load, pysyncobj.journal.loads = originals
    from pysyncobj import SyncObj, replicated

    class Counter(SyncObj):  # type: ignore[misc]
        def __init__(self, me: str, peers: list[str], conf: Any) -> None:
            self.value = 0
            super().__init__(me, peers, conf)

        @replicated  # type: ignore[untyped-decorator]
        def inc(self, n: int) -> int:
            self.value += n
            return self.value

    cfg = _config(args)
    # pysyncobj's own journal file (build_conf gives it none: the wrapper brings its own).
    overrides: dict[str, Any] = {"journalFile": str(cfg.legacy_journal_file)}
    if args.worker == "raw-batched":
        overrides["appendEntriesUseBatch"] = True
    obj = Counter(cfg.raft_address, list(cfg.peers), build_conf(cfg, **overrides))
    if not _wait_leader(obj._isLeader):
        time.sleep(3600)
    done = threading.Event()

    def one() -> float:
        done.clear()
        t0 = time.perf_counter()
        obj.inc(1, callback=lambda res, err: done.set())
        done.wait(10)
        return time.perf_counter() - t0

    for _ in range(20):
        one()
    latencies = [one() for _ in range(args.samples)]
    lock = threading.Lock()
    state = {"count": 0, "in_flight": args.concurrency}
    finished = threading.Event()
    deadline = time.perf_counter() + args.seconds

    def callback(res: Any, err: Any) -> None:
        with lock:
            state["count"] += 1
            if time.perf_counter() < deadline:
                obj.inc(1, callback=callback)
                return
            state["in_flight"] -= 1
            if state["in_flight"] == 0:
                finished.set()

    t0 = time.perf_counter()
    for _ in range(args.concurrency):
        obj.inc(1, callback=callback)
    finished.wait(args.seconds + 30)
    elapsed = time.perf_counter() - t0
    _report(args, latencies, state["count"], elapsed, obj.raftLastApplied)


def worker_wrapper(args: argparse.Namespace) -> None:
    from waitgraph.node.raft import RaftNode
    from waitgraph.statemachine.codec import encode_envelope
    from waitgraph.statemachine.commands import Envelope, Tick

    def env(i: int) -> bytes:
        return encode_envelope(Envelope(actor="operator:bench", at_ms=i, request_id=f"r{i}", command=Tick()))

    async def run() -> None:
        node = RaftNode(_config(args))
        node.start()
        deadline = time.monotonic() + 15
        while not node.is_leader() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not node.is_leader():
            await asyncio.sleep(3600)
        seq = iter(range(10**9))
        for _ in range(20):
            await node.submit(env(next(seq)))
        latencies = []
        for _ in range(args.samples):
            t0 = time.perf_counter()
            await node.submit(env(next(seq)))
            latencies.append(time.perf_counter() - t0)
        count = 0
        stop_at = time.perf_counter() + args.seconds

        async def submitter() -> None:
            nonlocal count
            while time.perf_counter() < stop_at:
                await node.submit(env(next(seq)))
                count += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(submitter() for _ in range(args.concurrency)))
        elapsed = time.perf_counter() - t0
        _report(args, latencies, count, elapsed, node.status().applied_index)
        await node.stop()

    asyncio.run(run())


def _wait_leader(is_leader: Any) -> bool:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if is_leader():
            return True
        time.sleep(0.05)
    return False


def _report(args: argparse.Namespace, latencies: list[float], count: int, elapsed: float, entries: int) -> None:
    result = {
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * percentile(latencies, 0.99),
        "writes_per_s": count / elapsed,
        "log_entries": entries,
        "writes": count + len(latencies) + 20,
    }
    tmp = args.out + ".tmp"
    Path(tmp).write_text(json.dumps(result))
    os.replace(tmp, args.out)


# -- driver -----------------------------------------------------------------------------------------

WRAPPERS = ("wrapper", "wrapper-no-fsync", "wrapper-attacked")


def _connect(address: str) -> socket.socket | None:
    host, port = address.rsplit(":", 1)
    try:
        return socket.create_connection((host, int(port)), timeout=1)
    except OSError:
        return None


def _huge_length(address: str, stop: threading.Event) -> None:
    zeros = bytes(64 * 1024)
    while not stop.is_set():
        sock = _connect(address)
        if sock is None:
            time.sleep(0.01)
            continue
        with sock:
            try:
                sock.sendall((0x7FFFFFFF).to_bytes(4, "little"))
                while not stop.is_set():
                    sock.sendall(zeros)
                    time.sleep(len(zeros) / (8 * 1024 * 1024))
            except OSError:
                pass


def _half_open(address: str, stop: threading.Event) -> None:
    held: list[socket.socket] = []
    while not stop.is_set():
        while len(held) < 100 and (sock := _connect(address)) is not None:
            held.append(sock)
        stop.wait(0.5)
        for sock in held:
            sock.close()
        held = []


def _random_bytes(address: str, stop: threading.Event) -> None:
    while not stop.is_set():
        sock = _connect(address)
        if sock is None:
            time.sleep(0.01)
            continue
        with sock:
            try:
                while not stop.is_set():
                    sock.sendall(os.urandom(16 * 1024))
                    time.sleep(0.002)
            except OSError:
                pass


def run_variant(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    ports = free_ports(3)
    addrs = ",".join(f"127.0.0.1:{p}" for p in ports)
    procs: list[subprocess.Popen[bytes]] = []
    stop_attack: threading.Event | None = None
    with tempfile.TemporaryDirectory(prefix=f"bench-{variant}-") as tmp:
        out = Path(tmp) / "result.json"
        samples = args.samples if variant != "raw-batched" else max(20, args.samples // 10)
        try:
            for i in range(3):
                cmd = [sys.executable, __file__, "--worker", variant, "--index", str(i), "--addrs", addrs]
                cmd += ["--data", f"{tmp}/n{i}", "--out", str(out), "--samples", str(samples)]
                cmd += ["--concurrency", str(args.concurrency), "--seconds", str(args.seconds)]
                env = dict(os.environ, PYTHONPATH=str(REPO))
                log = open(f"{tmp}/n{i}.log", "wb")  # noqa: SIM115 - closed with the process
                procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=log))
            if variant == "wrapper-attacked":
                stop_attack = threading.Event()
                attackers = [
                    threading.Thread(target=attack, args=(a, stop_attack), daemon=True)
                    for a in addrs.split(",")
                    for attack in (_huge_length, _half_open, _random_bytes)
                ]
                for t in attackers:
                    t.start()
            deadline = time.monotonic() + 60 + args.seconds + samples * 0.2
            while not out.exists():
                if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
                    logs = "\n".join(Path(f"{tmp}/n{i}.log").read_text(errors="replace")[-2000:] for i in range(3))
                    raise RuntimeError(f"{variant}: no result\n{logs}")
                time.sleep(0.1)
            return json.loads(out.read_text())  # type: ignore[no-any-return]
        finally:
            if stop_attack is not None:
                stop_attack.set()
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=500)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--default-batching", action="store_true", help="also run raw pysyncobj with batching on")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, help=argparse.SUPPRESS)
    p.add_argument("--addrs", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker in ("raw", "raw-batched"):
        return worker_raw(args)
    if args.worker in WRAPPERS:
        return worker_wrapper(args)
    variants = ["raw", *WRAPPERS] + (["raw-batched"] if args.default_batching else [])
    rows = [(v, run_variant(v, args)) for v in variants]
    print(
        f"3 nodes on loopback, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; latency: one write "
        f"at a time; throughput: {args.concurrency} concurrent submitters for {args.seconds:g}s; x raw: the ratio "
        "to raw pysyncobj in this run (p99 and writes/s)"
    )
    print(
        f"{'variant':<17} {'p50 ms':>8} {'p99 ms':>8} {'writes/s':>10} {'p99 x raw':>10} {'w/s x raw':>10} "
        f"{'log entries':>12} {'writes':>8}"
    )
    anchor = rows[0][1]
    for name, r in rows:
        print(
            f"{name:<17} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['writes_per_s']:>10.0f} "
            f"{r['p99_ms'] / anchor['p99_ms']:>10.2f} {r['writes_per_s'] / anchor['writes_per_s']:>10.2f} "
            f"{r['log_entries']:>12} {r['writes']:>8}"
        )


if __name__ == "__main__":
    main()
