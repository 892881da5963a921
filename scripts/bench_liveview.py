"""Live view benchmark (cluster/ops/liveview.py): what one refresh costs a node.

Prints a table; asserts nothing. Usage:
    scripts/bench liveview [--sizes 200,2000,10000] [--repeat 3]

The state is built through real commands (tests/world.py): n executions of 50 agents, each
producing its own artifact and waiting for the next one's, every tenth wait on its own successor,
so the waits close one ring through all n (one candidate of n members: the detection pass inside
``snapshot`` works on the whole graph), in shadow mode with the recovery decided.

Columns (best of ``--repeat``, interleaved; the machine is shared and timings are noisy):
- ``snapshot ms``: :func:`waitgraph.ops.liveview.snapshot`, the part that runs under the machine lock
  (applies wait meanwhile): a full detection pass (the Cycles RPC's), the decisions (converted
  once and kept, as the node does: the best of the repeats is the steady state), the picture's
  part of the graph (at most 60 executions and 60 targets converted), the pending-edges document.
- ``document ms (+dot)``: building the JSON and the DOT and running graphviz, outside the lock.
- ``document ms (cached svg)``: the same with the picture unchanged (graphviz not run).
A node builds at most one document per ``REBUILD_S`` (1 s), and only when its applied index moved.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.world import World
from waitgraph.ops import liveview
from waitgraph.statemachine.recovery_state import RolloutMode


def build(n: int) -> World:
    w = World()
    w.configure(mode=RolloutMode.SHADOW)
    for i in range(n):
        e = w.execution(f"e{i:06d}", agent=f"ag{i % 50}")
        w.produces(e, f"artifact:a{i:06d}")
    for i in range(n):
        w.wait(f"exec:e{i:06d}", f"artifact:a{(i + 1) % n:06d}")
    w.recover()
    return w


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="200,2000,10000")
    parser.add_argument("--repeat", type=int, default=3)
    ns = parser.parse_args()
    print("| executions | snapshot ms (under the lock) | document ms (+dot) | document ms (cached svg) | drawn |")
    print("|-----------:|----------------------------:|-------------------:|-------------------------:|------:|")
    for n in (int(s) for s in ns.sizes.split(",")):
        w = build(n)
        best = [float("inf")] * 3
        doc: dict[str, object] = {}
        warm = liveview.SvgCache()
        views: dict[liveview.DecisionKey, object] = {}
        for _ in range(ns.repeat):
            t0 = time.perf_counter()
            snap = liveview.snapshot(w.m, views)
            t1 = time.perf_counter()
            doc = liveview.document(snap, liveview.SvgCache())
            t2 = time.perf_counter()
            liveview.document(snap, warm)
            t3 = time.perf_counter()
            for i, v in enumerate((t1 - t0, t2 - t1, t3 - t2)):
                best[i] = min(best[i], v)
        shown = doc["graph"]["shown"]  # type: ignore[index]
        print(
            f"| {n:>10,} | {best[0] * 1000:>27.1f} | {best[1] * 1000:>18.1f} | {best[2] * 1000:>24.1f} "
            f"| {shown['executions']:>5} |"
        )


if __name__ == "__main__":
    main()
