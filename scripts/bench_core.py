"""Core benchmark (issue 2): apply throughput on a large live graph, snapshot/restore, memory.

Prints tables; asserts nothing. Usage: scripts/bench core [--edges 100000,1000000] [--ops 200000]
[--repeat 3]

State is built through real commands (the same apply path the cluster uses). The measured mix is
register/close waits and acquire/release on a state holding N live edges:
  40% RegisterWait, 40% CloseWait, 10% Acquire, 10% Release.
"apply" times StateMachine.apply on decoded envelopes; "apply_bytes" adds msgpack decoding,
which is what a replica does per log entry.

Snapshot and restore are timed as a restarting node meets them: the snapshot in the process that
built the state, the restore in a fresh process (the snapshot is written to a temporary file and a
child interpreter times the node's restore of its bytes (``restore_frozen``), then checks that the restored state
snapshots to the same bytes). Each is the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from waitgraph.node.collector import restore_frozen
from waitgraph.statemachine import Envelope, Limits, StateMachine
from waitgraph.statemachine.codec import encode_envelope
from waitgraph.statemachine.commands import (
    Acquire,
    CloseWait,
    Command,
    CreateExecution,
    CreateTarget,
    DeclareSatisfier,
    JoinSession,
    RegisterWait,
    Release,
    StartExecution,
)

AGENTS = 100


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Driver:
    def __init__(self, limits: Limits) -> None:
        self.m = StateMachine(limits=limits)
        self.t = 0

    def env(self, i: int, cmd: Command) -> Envelope:
        self.t += 1
        return Envelope(actor=f"agent:a{i % AGENTS}", at_ms=self.t, request_id=None, command=cmd)

    def record(self, i: int, cmd: Command) -> Envelope:
        """Apply to the recording machine (so later commands see its state) and return it."""
        env = self.env(i, cmd)
        self.m.apply(env)
        return env

    def run_bytes(self, i: int, cmd: Command) -> None:
        out = self.m.apply_bytes(encode_envelope(self.env(i, cmd)))
        if not out.ok:
            raise SystemExit(f"setup command refused: {cmd} -> {out.code} {out.message}")

    def run(self, i: int, cmd: Command) -> None:
        out = self.m.apply(self.env(i, cmd))
        if not out.ok:
            raise SystemExit(f"setup command refused: {cmd} -> {out.code} {out.message}")


WAITS_PER_WAITER = 2
ARTIFACTS_PER_PRODUCER = 5
FREE = 20_000


def layout(edges: int) -> tuple[int, int]:
    """(waiters, producers): each waiter waits on 2 artifacts, each producer produces 5."""
    return edges // WAITS_PER_WAITER, edges // ARTIFACTS_PER_PRODUCER


def build(edges: int, with_waits: bool = True) -> Driver:
    """A live graph of ``edges`` waits: waiters wait on artifacts declared PRODUCED_BY producers.

    Executions 0..W-1 are waiters, W..W+P-1 producers, then FREE idle executions used by the
    mix. Execution i belongs to agent a{i % AGENTS}; every command is sent by its owner.
    """
    waiters, producers = layout(edges)
    d = Driver(Limits(max_total_edges=edges + 1_000_000, max_executions=edges + 100_000))
    for a in range(AGENTS):
        d.m.apply(
            Envelope(
                actor=f"agent:a{a}",
                at_ms=0,
                request_id=None,
                command=JoinSession(agent_id=f"a{a}", lease_ms=86_400_000),
            )
        )
    for i in range(waiters + producers + FREE):
        d.run(i, CreateExecution(execution_id=f"exec:e{i}", run_id=f"run-{i}", observed_cancel_generation=0))
        d.run(i, StartExecution(execution_id=f"exec:e{i}", generation=1, observed_cancel_generation=0))
    for k in range(edges):
        p = waiters + k // ARTIFACTS_PER_PRODUCER
        d.run(p, CreateTarget(target_id=f"artifact:r{k}"))
        d.run(
            p,
            DeclareSatisfier(
                target_id=f"artifact:r{k}", target_generation=1, satisfier_id=f"exec:e{p}", satisfier_generation=1
            ),
        )
    for r in range(1000):
        d.run(r, CreateTarget(target_id=f"resource:b{r}"))
    if with_waits:
        add_waits(d, edges)
    return d


def add_waits(d: Driver, edges: int) -> None:
    for k in range(edges):
        w = k // WAITS_PER_WAITER
        d.run(
            w,
            RegisterWait(
                waiter_id=f"exec:e{w}",
                waiter_generation=1,
                target_id=f"artifact:r{k}",
                target_generation=1,
                reason="review",
            ),
        )


def mix(d: Driver, edges: int, ops: int) -> Iterator[Envelope]:
    """Free executions (beyond the waiters and producers) register/close waits on held resources."""
    waiters, producers = layout(edges)
    base = waiters + producers
    free = list(range(base, base + FREE))
    n_res = 1000
    held: dict[int, int] = {}  # resource -> holder exec
    open_waits: list[tuple[int, int, int]] = []  # (exec, resource, version)
    version = 0
    k = 0
    while k < ops:
        r = k % n_res
        holder = held.get(r)
        if holder is None:
            e = free[(k * 7) % len(free)]
            held[r] = e
            yield d.record(e, Acquire(target_id=f"resource:b{r}", execution_id=f"exec:e{e}", generation=1))
            k += 1
            continue
        # two waits on the held resource by other free executions, then close them, then release
        for j in (1, 2):
            w = free[(k * 13 + j * 101) % len(free)]
            if w == holder:
                continue
            version += 1
            open_waits.append((w, r, version))
            yield d.record(
                w,
                RegisterWait(
                    waiter_id=f"exec:e{w}",
                    waiter_generation=1,
                    target_id=f"resource:b{r}",
                    target_generation=d.m.state.targets[f"resource:b{r}"].version,
                    reason="browser",
                    edge_version=version,
                ),
            )
            k += 1
        while open_waits:
            w, rr, v = open_waits.pop()
            yield d.record(
                w,
                CloseWait(
                    waiter_id=f"exec:e{w}",
                    waiter_generation=1,
                    target_id=f"resource:b{rr}",
                    edge_version=v,
                    reason="gave_up",
                ),
            )
            k += 1
        yield d.record(holder, Release(target_id=f"resource:b{r}", execution_id=f"exec:e{holder}", generation=1))
        del held[r]
        k += 1


def bench_apply(edges: int, ops: int) -> list[str]:
    d = build(edges)
    snap = d.m.snapshot()
    envs = list(mix(d, edges, ops))  # recorded against the live state, replayed from snap below
    rows = []
    for mode in ("apply", "apply_bytes"):
        m = StateMachine()
        restore_frozen(m, snap)  # as a node restores (cluster/node/collector.py)
        payload = [encode_envelope(e) for e in envs] if mode == "apply_bytes" else envs
        fn = m.apply_bytes if mode == "apply_bytes" else m.apply
        gc.collect()
        t0 = time.perf_counter()
        refused = 0
        for p in payload:
            if not fn(p).ok:  # type: ignore[arg-type]
                refused += 1
        dt = time.perf_counter() - t0
        n = len(payload)
        rows.append(f"| {mode:<11} | {edges:>10,} | {n:>9,} | {n / dt:>11,.0f} | {dt * 1e6 / n:>5.1f} | {refused:>7} |")
    return rows


def restore_in_child(path: str) -> tuple[float, bool]:
    """Time ``State.restore`` of the snapshot in ``path`` in a fresh interpreter, as a restarting
    node does; also report whether the restored state snapshots to the same bytes."""
    done = subprocess.run(
        [sys.executable, __file__, "--restore-from", path], capture_output=True, text=True, check=True
    )
    seconds, same = done.stdout.split()
    return float(seconds), same == "identical"


def restore_from(path: str) -> None:
    """The child's side of :func:`restore_in_child`."""
    with open(path, "rb") as f:
        data = f.read()
    m = StateMachine()
    t0 = time.perf_counter()
    restore_frozen(m, data)  # as a restarting node does (cluster/node/collector.py)
    seconds = time.perf_counter() - t0
    st = m.state
    print(f"{seconds:.4f} {'identical' if st.snapshot() == data else 'different'}")


def bench_snapshot(edges: int, repeat: int) -> tuple[str, str]:
    gc.collect()
    rss0 = rss_bytes()
    d = build(edges, with_waits=False)
    gc.collect()
    rss1 = rss_bytes()
    add_waits(d, edges)
    gc.collect()
    rss2 = rss_bytes()
    st = d.m.state
    assert st.edge_count == edges, st.edge_count
    t_snap = t_restore = float("inf")
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "snapshot.msgpack")
        for _ in range(repeat):
            t0 = time.perf_counter()
            snap = d.m.snapshot()
            t_snap = min(t_snap, time.perf_counter() - t0)
            with open(path, "wb") as f:
                f.write(snap)
            del snap
            seconds, identical = restore_in_child(path)
            t_restore = min(t_restore, seconds)
            same = same and identical
        size = os.path.getsize(path)
    row = (
        f"| {edges:>10,} | {len(st.executions):>10,} | {size / 1e6:>7.1f} | {t_snap:>6.2f} | "
        f"{t_restore:>9.2f} | {t_snap + t_restore:>7.2f} | {'yes' if same else 'NO':>9} |"
    )
    mem = f"| {edges:>10,} | {(rss2 - rss1) / edges:>14.0f} | {(rss2 - rss0) / edges:>18.0f} |"
    return row, mem


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--edges", default="100000,1000000")
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3, help="snapshot and restore runs; the best is shown")
    ap.add_argument("--restore-from", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.restore_from:
        restore_from(args.restore_from)
        return
    sizes = [int(s) for s in args.edges.split(",")]
    print(f"python {sys.version.split()[0]}, pid {os.getpid()}, cores {os.cpu_count()}")
    print()
    print("apply throughput, realistic mix (40% RegisterWait, 40% CloseWait, 10% Acquire, 10% Release)")
    print("| path        | live edges |       ops |   applies/s | µs/op | refused |")
    print("|-------------|-----------:|----------:|------------:|------:|--------:|")
    for row in bench_apply(sizes[0], args.ops):
        print(row)
    print()
    snaps, mems = [], []
    for n in sizes:
        r, m = bench_snapshot(n, args.repeat)
        snaps.append(r)
        mems.append(m)
        gc.collect()
    print(
        f"snapshot in the building process, restore in a fresh process (best of {args.repeat}; "
        "2 waits per waiter, 5 artifacts per producer)"
    )
    print("| live edges | executions | size MB | snap s | restore s | total s | identical |")
    print("|-----------:|-----------:|--------:|-------:|----------:|--------:|----------:|")
    print("\n".join(snaps))
    print()
    print("resident memory per live edge (RSS deltas)")
    print("| live edges | B/edge (waits) | B/edge whole state |")
    print("|-----------:|---------------:|-------------------:|")
    print("\n".join(mems))


if __name__ == "__main__":
    main()
