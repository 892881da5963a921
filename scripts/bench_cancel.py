"""Cancellation benchmark (issue 4): CancelRun over a run tree, then convergence to CANCELLED_STABLE.

Prints a table; asserts nothing. Usage: scripts/bench cancel [--sizes 1000,10000,100000] [--repeat 3]

For each size N the run is a root with N descendants (fanout 10, breadth first, every execution
RUNNING, owned by 100 agents), built through real commands. Measured on that state:
- CancelRun: one StateMachine.apply (decoded envelope, as a replica applies it), median of
  ``--repeat`` fresh builds; the effects it emits (count, and size as canonical msgpack). Times
  are the process's CPU time (``time.process_time``), so a busy shared host inflates them less;
- convergence: every execution acknowledges (one AckCancel each, through apply) until the run is
  CANCELLED_STABLE: total time and per ack;
- memory: tracemalloc around CancelRun on another fresh build (allocations still live after it:
  the requests, scope and outcome; and the peak), and the process RSS at the end.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from waitgraph.statemachine import Envelope, StateMachine
from waitgraph.statemachine.cancel import cancel_state
from waitgraph.statemachine.codec import outcome_to_plain, pack
from waitgraph.statemachine.commands import AckCancel, CancelRun, Command, CreateExecution, JoinSession, StartExecution
from waitgraph.statemachine.enums import CancelState, EffectOutcome
from waitgraph.statemachine.outcome import Outcome, Result

AGENTS = 100
FANOUT = 10
RUN = "bench"


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Driver:
    def __init__(self) -> None:
        self.m = StateMachine()
        self.t = 0

    def apply(self, actor: str, cmd: Command) -> Outcome:
        self.t += 1
        out = self.m.apply(Envelope(actor=actor, at_ms=self.t, request_id=None, command=cmd))
        if out.result is not Result.APPLIED:
            raise SystemExit(f"setup failed: {cmd}: {out.code} {out.message}")
        return out


def build(descendants: int) -> tuple[Driver, list[str]]:
    """A root and ``descendants`` executions below it, fanout 10, all RUNNING."""
    d = Driver()
    for i in range(AGENTS):
        d.apply(f"agent:a{i}", JoinSession(agent_id=f"a{i}", lease_ms=86_400_000))
    ids = [f"exec:n{i}" for i in range(descendants + 1)]
    for i, eid in enumerate(ids):
        parent = ids[(i - 1) // FANOUT] if i else None
        create = CreateExecution(
            execution_id=eid, run_id=RUN, parent_id=parent, agent_id=f"a{i % AGENTS}", observed_cancel_generation=0
        )
        d.apply("operator:op", create)
        d.apply(f"agent:a{i % AGENTS}", StartExecution(execution_id=eid, generation=1, observed_cancel_generation=0))
    return d, ids


def cancel_once(d: Driver) -> tuple[float, Outcome]:
    env = Envelope(
        actor="operator:op",
        at_ms=d.t + 1,
        request_id=None,
        command=CancelRun(run_id=RUN, observed_cancel_generation=0, reason="bench"),
    )
    gc.collect()
    t0 = time.process_time()
    out = d.m.apply(env)
    elapsed = time.process_time() - t0
    assert out.ok, out.message
    d.t += 1
    return elapsed, out


def converge(d: Driver, ids: list[str]) -> float:
    envs = [
        Envelope(
            actor=f"agent:a{int(eid.removeprefix('exec:n')) % AGENTS}",
            at_ms=d.t + 1 + i,
            request_id=None,
            command=AckCancel(execution_id=eid, generation=1, cancel_generation=1, side_effects=EffectOutcome.NONE),
        )
        for i, eid in enumerate(reversed(ids))
    ]
    gc.collect()
    t0 = time.process_time()
    for env in envs:
        d.m.apply(env)
    elapsed = time.process_time() - t0
    assert cancel_state(d.m.state, RUN) is CancelState.CANCELLED_STABLE
    return elapsed


def measure(descendants: int, repeat: int) -> str:
    cancel_s: list[float] = []
    out: Outcome | None = None
    d, ids = build(descendants)
    for i in range(repeat):
        if i:
            d, ids = build(descendants)
        elapsed, out = cancel_once(d)
        cancel_s.append(elapsed)
    assert out is not None
    fx_bytes = len(pack(outcome_to_plain(out)))
    ack_s = converge(d, ids)
    del d, ids, out
    gc.collect()
    d, _ = build(descendants)
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    _, out = cancel_once(d)
    live, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    n_fx = len(out.effects)
    cancel_ms = statistics.median(cancel_s) * 1e3
    return (
        f"| {descendants:>11,} | {cancel_ms:>12.1f} | {cancel_ms * 1e3 / descendants:>7.2f} | {n_fx:>9,} "
        f"| {fx_bytes / 2**20:>10.2f} | {ack_s:>13.2f} | {ack_s * 1e6 / (descendants + 1):>6.1f} "
        f"| {(live - base) / 2**20:>7.1f} | {(peak - base) / 2**20:>7.1f} | {rss_mb():>6.0f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000", help="descendants per run, comma separated")
    ap.add_argument("--repeat", type=int, default=3, help="fresh builds per size for the CancelRun median")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"python {sys.version.split()[0]}, pid {os.getpid()}, cores {os.cpu_count()}")
    print()
    print(f"CancelRun over a run tree (fanout {FANOUT}, all RUNNING), then every execution acknowledges")
    print(
        f"(times: process CPU time of the applies; CancelRun: median of {args.repeat} fresh builds; "
        "memory: tracemalloc around CancelRun, RSS at the end)"
    )
    print(
        "| descendants | CancelRun ms | µs/desc |   effects | effects MB | acks→stable s | µs/ack "
        "| kept MB | peak MB | RSS MB |"
    )
    print(
        "|------------:|-------------:|--------:|----------:|-----------:|--------------:|-------:"
        "|--------:|--------:|-------:|"
    )
    for n in sizes:
        print(measure(n, args.repeat), flush=True)


if __name__ == "__main__":
    main()
