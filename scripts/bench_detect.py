"""Detection benchmark (issue: deadlock detection): full pass, incremental pass, networkx.

Prints tables; asserts nothing. Usage:
    scripts/bench detect [--sizes 10000,100000,1000000] [--adds 2000] [--seed 1] [--soft-shapes 100,1000,10000]
    python scripts/bench_detect.py [same options]

Graphs (State built directly, not through commands, so that a million executions take seconds):
- ``random``: most executions RUNNING (75%), 20% WAITING, 5% PENDING; a waiter has 1 wait (85%),
  2 (12%) or 3 (3%); a wait is on an execution (60%), an artifact (15%, its producer a random
  execution, one in ten a human), an exclusive resource (15%, held) or a full pool of 1-4 slots
  (10%); plus 10 planted cycles of 2-5 executions through executions, artifacts and resources.
  Ids are numbered in a random order, so nothing arrives presorted.
- ``cycle``: every execution WAITING on the next, the last on the first: one candidate of n.
- ``chain``: a chain of n executions each waiting on the next, ending in a cycle of three.

Columns:
- ``full``: ``full_pass(state)``, everything from the State: the waits of every waiter and the
  SCCs of the graph they form on their own, then the exact projection (execution records,
  generations, target rules) of the waiters in those SCCs, SCCs again, pruning, canonical
  members, edges, digests. On ``chain`` only the three waiters of the final cycle get past the
  first step; on ``cycle`` all of them do.
- ``nx``: ``list(networkx.strongly_connected_components(G))`` on the same hard wait-for graph
  (every execution a node, every hard edge an edge), the DiGraph prebuilt and not timed.
- ``full``, ``nx``, ``nx gc-off`` and ``kernel`` are each the best of 3 runs, interleaved (one
  run for the adversarial graphs at 1,000,000, to keep the whole benchmark within minutes): the
  machine is shared and timings are noisy.
- ``kernel``: the SCC core (``waitgraph.statemachine.scc``) alone on that same whole graph as int lists
  (in the core's own form: the one successor of a node, or its list when it has several; no
  projection from the State, no pruning, no canonical output), to compare like with like.
- ``incr p50/p90``: ``IncrementalDetector.pass_`` right after one new wait is registered (edge
  added, waiter WAITING, ``state.touch``), the median and 90th percentile over ``--adds``
  additions on the random graph (each undone after its timed pass); 20 down to 2 on the
  adversarial graphs, where every addition reaches the whole long component (and the detector
  falls back to a full pass once it has explored an eighth of the waiters).
- ``explored``: executions the incremental pass looked at (median).

Graphs with soft edges (grant queues, docs/queues.md; ``--soft-shapes``, 0 to skip): k copies of
PostgreSQL's deadlock-soft shape (six executions: two running holders of two full pools, four
WAITING members, two hard edges and two soft ones), built through real commands. Columns: the
hard ``full_pass`` (it finds nothing: none of them is a deadlock yet), ``soft_cycles`` (the pure
Python projection of hard + soft edges and their SCCs, over the whole state), ``find_reorder`` for
one cycle (it reads what the cycle reaches), and all k reorders.

The cyclic garbage collector is frozen after the graphs are built (``gc.freeze()``), for every
measurement alike, so that neither side pays for re-scanning the millions of objects of the state
itself. ``full_pass`` also pauses the collector while it runs (part of its implementation: it
allocates millions of acyclic lists and tuples); the ``nx gc-off`` column repeats networkx with
the collector disabled too, so that the ratio without that advantage is on the table as well.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import networkx as nx

from waitgraph.statemachine import Envelope, Result, StateMachine
from waitgraph.statemachine.commands import (
    Acquire,
    CreateExecution,
    CreateTarget,
    JoinSession,
    RegisterWait,
    StartExecution,
)
from waitgraph.statemachine.detect import IncrementalDetector, full_pass, wait_satisfiers
from waitgraph.statemachine.enums import CancelMode, ExecStatus
from waitgraph.statemachine.ids import Kind
from waitgraph.statemachine.reorder import find_reorder, soft_cycles, soft_edges
from waitgraph.statemachine.scc import cyclic_components, successor_form
from waitgraph.statemachine.state import Execution, Limits, State, Target, WaitEdge

W, R, P = ExecStatus.WAITING, ExecStatus.RUNNING, ExecStatus.PENDING
COOP = CancelMode.COOPERATIVE


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Builder:
    def __init__(self, n: int, rnd: random.Random) -> None:
        self.rnd = rnd
        self.state = State(Limits(max_executions=10**8, max_total_edges=10**8, max_targets=10**8))
        order = list(range(n))
        rnd.shuffle(order)
        width = len(str(n))
        self.ids = [f"exec:e{k:0{width}d}" for k in order]
        ex = self.state.executions
        for eid in self.ids:
            ex[eid] = Execution(eid, eid[5:], None, "bench", 1, R, 0, False, False, 0, 0, 0)

    def status(self, eid: str, status: ExecStatus) -> None:
        self.state.executions[eid].status = status

    def target(self, tid: str, kind: Kind, slots: int = 1) -> Target:
        t = Target(tid, kind, slots)
        self.state.targets[tid] = t
        return t

    def hold(self, t: Target, eid: str) -> None:
        t.version += 1
        t.holders[eid] = 1
        self.state.add_satisfies(eid, t.target_id)

    def produce(self, t: Target, eid: str, version: int = 1) -> None:
        t.satisfier_id, t.satisfier_generation, t.satisfier_for = eid, 1 if eid.startswith("exec:") else 0, version
        if eid.startswith("exec:"):
            self.state.add_satisfies(eid, t.target_id)

    def wait(self, waiter: str, target: str, tg: int) -> WaitEdge:
        edge = WaitEdge(waiter, 1, target, tg, "bench", None, COOP, 1, 0)
        self.state.add_wait(edge)
        return edge

    def wait_on(self, waiter: str, t: Target) -> WaitEdge:
        """A wait on a typed target with the generation the machine would accept."""
        tg = 0 if t.kind is Kind.POOL else t.version if t.kind is Kind.RESOURCE else t.version + 1
        return self.wait(waiter, t.target_id, tg)


def random_graph(n: int, rnd: random.Random) -> tuple[State, list[str], list[Target]]:
    b = Builder(n, rnd)
    ids = b.ids
    st = b.state
    for eid in ids:
        x = rnd.random()
        b.status(eid, W if x < 0.20 else P if x < 0.25 else R)
    live = ids
    n_typed = max(n // 20, 4)
    artifacts = [b.target(f"artifact:a{i}", Kind.ARTIFACT) for i in range(n_typed)]
    for t in artifacts:
        b.produce(t, "human:reviewer" if rnd.random() < 0.1 else rnd.choice(live))
    resources = [b.target(f"resource:r{i}", Kind.RESOURCE) for i in range(n_typed)]
    for t in resources:
        b.hold(t, rnd.choice(live))
    pools = []
    for i in range(max(n_typed // 4, 1)):
        slots = rnd.randint(1, 4)
        t = b.target(f"pool:p{i}", Kind.POOL, slots)
        for h in rnd.sample(live, slots):
            b.hold(t, h)
        pools.append(t)
    typed = artifacts + resources + pools
    waiters = [e for e in ids if st.executions[e].status is W]
    for w in waiters:
        k = 1 if rnd.random() < 0.85 else 2 if rnd.random() < 0.8 else 3
        targets: set[str] = set()
        while len(targets) < k:
            x = rnd.random()
            if x < 0.60:
                v = rnd.choice(ids)
                if v != w and v not in targets:
                    targets.add(v)
                    b.wait(w, v, 1)
                continue
            t = rnd.choice(artifacts if x < 0.75 else resources if x < 0.90 else pools)
            if t.target_id not in targets:
                targets.add(t.target_id)
                b.wait_on(w, t)
    # planted cycles among fresh executions (RUNNING ones made WAITING)
    running = [e for e in ids if st.executions[e].status is R and e not in st.satisfies]
    for c in range(10):
        size = rnd.randint(2, 5)
        ring = [running.pop() for _ in range(size)]
        for i, u in enumerate(ring):
            v = ring[(i + 1) % size]
            b.status(u, W)
            kind = i % 3
            if kind == 0:
                b.wait(u, v, 1)
            elif kind == 1:
                t = b.target(f"artifact:ring{c}-{i}", Kind.ARTIFACT)
                b.produce(t, v)
                b.wait_on(u, t)
            else:
                t = b.target(f"resource:ring{c}-{i}", Kind.RESOURCE)
                b.hold(t, v)
                b.wait_on(u, t)
    return st, ids, typed


def cycle_graph(n: int, rnd: random.Random, closed: bool) -> tuple[State, list[str], list[Target]]:
    """A single chain along a random order of the ids; closed into one giant cycle, or ending in
    a cycle of three."""
    b = Builder(n, rnd)
    chain = list(b.ids)
    rnd.shuffle(chain)
    for i, u in enumerate(chain):
        b.status(u, W)
        if i + 1 < n:
            b.wait(u, chain[i + 1], 1)
        else:
            b.wait(u, chain[0] if closed else chain[n - 3], 1)
    return b.state, b.ids, []


# -- measurements -----------------------------------------------------------------------------


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def hard_graph(state: State, ids: list[str]) -> tuple[nx.DiGraph, list[list[int]]]:
    index = {e: i for i, e in enumerate(ids)}
    g = nx.DiGraph()
    g.add_nodes_from(range(len(ids)))
    succ: list[list[int]] = [[] for _ in ids]
    for waits in state.waits_by_waiter.values():
        for edge in waits.values():
            sats = wait_satisfiers(state, edge)
            if sats:
                u = index[edge.waiter_id]
                for s in sats:
                    succ[u].append(index[s])
    g.add_edges_from((u, v) for u, vs in enumerate(succ) for v in vs)
    return g, succ


def incremental(
    state: State, ids: list[str], typed: list[Target], adds: int, rnd: random.Random
) -> tuple[float, float, float, float]:
    det = IncrementalDetector()
    det.pass_(state)
    times: list[float] = []
    explored: list[int] = []
    ex = state.executions
    for _ in range(adds):
        u = rnd.choice(ids)
        while ex[u].status is P:
            u = rnd.choice(ids)
        if typed and rnd.random() < 0.4:
            t = rnd.choice(typed)
            target, tg = (
                t.target_id,
                0 if t.kind is Kind.POOL else t.version if t.kind is Kind.RESOURCE else t.version + 1,
            )
        else:
            target, tg = rnd.choice(ids), 1
        if target == u or state.wait(u, target) is not None:
            continue
        before = ex[u].status
        edge = WaitEdge(u, 1, target, tg, "bench", None, COOP, 1, 0)
        state.add_wait(edge)
        ex[u].status = W
        state.touch(u)
        t0 = time.perf_counter()
        det.pass_(state)
        times.append(time.perf_counter() - t0)
        explored.append(det.explored)
        state.remove_wait(edge)
        ex[u].status = before
        state.touch(u)
        det.pass_(state)
    times.sort()
    return (
        statistics.median(times),
        times[min(len(times) - 1, int(len(times) * 0.9))],
        statistics.median(explored),
        len(times),
    )


def measure(kind: str, n: int, adds_random: int, seed: int) -> tuple[Any, ...]:
    rnd = random.Random(f"{seed}-{kind}-{n}")
    t0 = time.perf_counter()
    if kind == "random":
        state, ids, typed = random_graph(n, rnd)
    else:
        state, ids, typed = cycle_graph(n, rnd, closed=kind == "cycle")
    g, succ = hard_graph(state, ids)
    nxt, several = successor_form(succ, n)
    build_s = time.perf_counter() - t0
    gc.collect()
    gc.freeze()
    try:
        # Interleaved, best of k for every column alike: the machine is shared, and a load spike
        # should not land on one side of a ratio only.
        full_s = nx_s = nx_off_s = kernel_s = float("inf")
        cands: list[Any] = []
        for _ in range(3 if kind == "random" or n < 1_000_000 else 1):
            t, cands = timed(lambda: full_pass(state), 1)
            full_s = min(full_s, t)
            nx_s = min(nx_s, timed(lambda: list(nx.strongly_connected_components(g)), 1)[0])
            gc.disable()
            nx_off_s = min(nx_off_s, timed(lambda: list(nx.strongly_connected_components(g)), 1)[0])
            gc.enable()
            kernel_s = min(kernel_s, timed(lambda: cyclic_components(nxt, several, range(n), [0] * n + [-1, -1]), 1)[0])
        adds = adds_random if kind == "random" else max(2, min(20, 1_000_000 // n))
        p50, p90, explored, done = incremental(state, ids, typed, adds, rnd)
        waiting = sum(1 for x in state.executions.values() if x.status is W)
        largest = max((len(c.members) for c in cands), default=0)
    finally:
        gc.unfreeze()
    print(
        f"  {kind} n={n}: built in {build_s:.1f}s, rss {rss_mib():.0f} MiB; full {full_s:.3f}s, nx {nx_s:.3f}s, "
        f"incremental p50 {_us(p50)} over {done} additions",
        file=sys.stderr,
        flush=True,
    )
    return (
        kind,
        n,
        waiting,
        g.number_of_edges(),
        len(cands),
        largest,
        full_s,
        nx_s,
        nx_off_s,
        kernel_s,
        p50,
        p90,
        explored,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--adds", type=int, default=2000, help="single-edge additions timed on the random graph")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--graphs", default="random,cycle,chain")
    ap.add_argument("--soft-shapes", default="100,1000,10000", help="copies of the deadlock-soft shape; 0 skips")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"python {sys.version.split()[0]}, networkx {nx.__version__}, seed {args.seed}", flush=True)
    rows = [measure(kind, n, args.adds, args.seed) for n in sizes for kind in args.graphs.split(",")]
    head = (
        f"{'graph':<7}{'n':>10}{'waiting':>10}{'hard edges':>11}{'cands':>6}{'largest':>10}"
        f"{'full s':>9}{'nx s':>8}{'nx/full':>8}{'nx gc-off':>10}{'/full':>6}{'kernel s':>9}{'nx/kern':>8}"
        f"{'incr p50':>10}{'incr p90':>10}{'explored':>10}"
    )
    print(head)
    print("-" * len(head))
    for kind, n, waiting, edges, ncand, largest, full_s, nx_s, nx_off, kern, p50, p90, explored in rows:
        print(
            f"{kind:<7}{n:>10,}{waiting:>10,}{edges:>11,}{ncand:>6}{largest:>10,}"
            f"{full_s:>9.3f}{nx_s:>8.3f}{nx_s / full_s:>7.1f}x{nx_off:>10.3f}{nx_off / full_s:>5.1f}x"
            f"{kern:>9.3f}{nx_s / kern:>7.1f}x{_us(p50):>10}{_us(p90):>10}{explored:>10,.0f}"
        )
    shapes = [int(x) for x in args.soft_shapes.split(",") if int(x)]
    if shapes:
        print()
        head = (
            f"{'soft':<7}{'execs':>9}{'waits':>8}{'soft edges':>11}{'hard cands':>11}{'soft cycles':>12}"
            f"{'reorders':>9}{'full s':>9}{'soft s':>9}{'one reorder':>12}{'all reorders s':>15}"
        )
        print(head)
        print("-" * len(head))
        for k, n, waits, soft, hard, cycles, plans, full_s, soft_s, one_s, all_s in map(measure_soft, shapes):
            print(
                f"{k:<7,}{n:>9,}{waits:>8,}{soft:>11,}{hard:>11}{cycles:>12,}{plans:>9,}"
                f"{full_s:>9.3f}{soft_s:>9.3f}{_us(one_s):>12}{all_s:>15.2f}"
            )


def soft_graph(k: int) -> StateMachine:
    """k copies of the deadlock-soft shape, through commands (tests/transcripts/queues/soft_deadlock.txt)."""
    sm = StateMachine()

    def do(actor: str, cmd: Any) -> None:
        out = sm.apply(Envelope(actor=actor, at_ms=0, request_id=None, command=cmd))
        if out.result is not Result.APPLIED:
            raise SystemExit(f"setup refused: {cmd} -> {out.code}")

    for i in range(k):
        names = [f"{x}-{i}" for x in ("h1", "h2", "d1", "d2", "e1", "e2")]
        for n in names:
            do(f"agent:{n}", JoinSession(agent_id=n, lease_ms=86_400_000))
            do(f"agent:{n}", CreateExecution(execution_id=f"exec:{n}", run_id=f"run-{n}", observed_cancel_generation=0))
            do(f"agent:{n}", StartExecution(execution_id=f"exec:{n}", generation=1, observed_cancel_generation=0))
        h1, h2, d1, d2, e1, e2 = names
        for t in ("pool:a1", "pool:a2", "resource:x1", "resource:x2"):
            do("operator:op", CreateTarget(target_id=f"{t}-{i}", slots=1))
        for e, t in ((h1, "pool:a1"), (h2, "pool:a2"), (d1, "resource:x1"), (d2, "resource:x2")):
            do(f"agent:{e}", Acquire(target_id=f"{t}-{i}", execution_id=f"exec:{e}", generation=1))
        for e, t, g in (
            (e1, "pool:a1", 0),
            (d2, "pool:a1", 0),
            (e2, "pool:a2", 0),
            (d1, "pool:a2", 0),
            (e1, "resource:x1", 1),
            (e2, "resource:x2", 1),
        ):
            do(
                f"agent:{e}",
                RegisterWait(
                    waiter_id=f"exec:{e}", waiter_generation=1, target_id=f"{t}-{i}", target_generation=g, reason="q"
                ),
            )
    return sm


def measure_soft(k: int) -> tuple[Any, ...]:
    st = soft_graph(k).state
    full_s, cands = timed(lambda: full_pass(st), 3)
    soft_s, cycles = timed(lambda: soft_cycles(st), 3)
    one_s, _ = timed(lambda: find_reorder(st, cycles[0]), 3)
    t0 = time.perf_counter()
    plans = [find_reorder(st, c) for c in cycles]
    all_s = time.perf_counter() - t0
    edges = len(soft_edges(st))
    return (
        k,
        len(st.executions),
        st.edge_count,
        edges,
        len(cands),
        len(cycles),
        sum(p is not None for p in plans),
        full_s,
        soft_s,
        one_s,
        all_s,
    )


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f}us" if seconds < 0.1 else f"{seconds:.2f}s"


if __name__ == "__main__":
    main()
