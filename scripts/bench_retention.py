#!/usr/bin/env python3
"""Retention benchmark, core part: executions pushed through apply for a long logical time with
retirement on; every step prints RSS, the live counts, the snapshot size and applies/s.

    scripts/bench retention                          # 1,000,000 executions, a row per 100,000
    scripts/bench retention --executions 20000000 --step 1000000   # the issue's full run

The workload, at 1,000 executions per logical second: runs of 1-10 executions (a root and its
children); each execution starts, some record a side effect, some hold a resource while they run,
some wait for an artifact a sibling produces; every 500th run is a two-run deadlock recovered by
the real protocol (propose, two votes, commit after the window, the victim acknowledges, the other
fails). A RetireSettled pass every logical second with ``--retention-ms`` (default one minute).
Targets are a fixed pool (2,000 resources and artifacts reused): targets do not retire, so a
workload that made new ones for ever would grow by them. Commands go through ``StateMachine.apply``
(the codec is benchmarked by ``scripts/bench apply``). It prints a table and asserts nothing.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from waitgraph.statemachine.commands import (
    AckCancel,
    Acquire,
    CommitRecovery,
    CompleteExecution,
    ConfigureRecovery,
    CreateExecution,
    CreateTarget,
    DeclareSatisfier,
    Envelope,
    FailExecution,
    JoinSession,
    ProduceArtifact,
    RecordSideEffect,
    RegisterWait,
    RetireSettled,
    SetMode,
    StartExecution,
    VoteRecovery,
)
from waitgraph.statemachine.detect import Candidate
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Result
from waitgraph.statemachine.recovery import propose_command
from waitgraph.statemachine.recovery_state import RolloutMode
from waitgraph.statemachine.state import edge_id

POOL = 1000


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e6


class Bench:
    def __init__(self, retention_ms: int) -> None:
        self.sm = StateMachine()
        self.now = 0
        self.applies = 0
        self.refused: dict[str, int] = {}
        self.retention_ms = retention_ms
        self.next_retire = 1000
        self.versions = [0] * POOL
        for cmd in (
            ConfigureRecovery(voters=("node:n1", "node:n2"), quorum=2, max_rollback=1, confirmation_window_ms=500),
            SetMode(mode=RolloutMode.AUTO),
        ):
            self.op(cmd)
        self.agent(JoinSession(agent_id="w", lease_ms=86_400_000))
        for i in range(POOL):
            self.op(CreateTarget(target_id=f"resource:r{i}"))
            self.op(CreateTarget(target_id=f"artifact:a{i}"))

    def send(self, actor: str, cmd: object, at_ms: int | None = None) -> None:
        out = self.sm.apply(
            Envelope(actor=actor, at_ms=self.now if at_ms is None else at_ms, request_id=None, command=cmd)
        )  # type: ignore[arg-type]
        self.applies += 1
        if out.result is Result.REJECTED:
            self.refused[out.code] = self.refused.get(out.code, 0) + 1

    def op(self, cmd: object) -> None:
        self.send("operator:bench", cmd)

    def agent(self, cmd: object) -> None:
        self.send("agent:w", cmd)

    def tick(self, ms: int) -> None:
        self.now += ms
        if self.now >= self.next_retire:
            self.next_retire += 1000
            # A large max_runs: one pass per logical second keeps up with 1,000 executions/s.
            self.send("node:n1", RetireSettled(retention_ms=self.retention_ms, max_runs=10_000))
            if self.now % 86_400_000 < 1000:
                self.agent(JoinSession(agent_id="w", lease_ms=86_400_000))

    def run(self, n: int, run_no: int) -> None:
        """One run of ``n`` executions; about one logical ms per execution."""
        run_id = f"run{run_no}"
        ids = [f"exec:{run_no}-{k}" for k in range(n)]
        for k, eid in enumerate(ids):
            parent = ids[0] if k else None
            self.agent(CreateExecution(execution_id=eid, run_id=run_id, parent_id=parent, observed_cancel_generation=0))
            self.agent(StartExecution(execution_id=eid, generation=1, observed_cancel_generation=0))
        slot = run_no % POOL
        res, art = f"resource:r{slot}", f"artifact:a{slot}"
        if n >= 2:
            # ids[1] holds the resource; ids[0] waits for the artifact ids[1] produces.
            version = self.versions[slot] + 1
            self.agent(Acquire(target_id=res, execution_id=ids[1], generation=1))
            self.agent(
                DeclareSatisfier(target_id=art, target_generation=version, satisfier_id=ids[1], satisfier_generation=1)
            )
            self.agent(
                RegisterWait(
                    waiter_id=ids[0], waiter_generation=1, target_id=art, target_generation=version, reason="needs it"
                )
            )
            self.agent(
                RecordSideEffect(
                    execution_id=ids[1], generation=1, effect_id="write-1", outcome=EffectOutcome.COMMITTED
                )
            )
            self.agent(ProduceArtifact(artifact_id=art, version=version))
            self.versions[slot] = version
        for eid in reversed(ids):
            self.tick(1)
            self.agent(CompleteExecution(execution_id=eid, generation=1, observed_cancel_generation=0))

    def deadlock(self, run_no: int) -> None:
        """Two runs wait for each other's resource; recovered by the protocol."""
        a, b = f"exec:dl{run_no}a", f"exec:dl{run_no}b"
        ra, rb = f"resource:r{run_no % POOL}", f"resource:r{(run_no + 1) % POOL}"
        for eid, res in ((a, ra), (b, rb)):
            self.agent(CreateExecution(execution_id=eid, run_id=eid[5:], observed_cancel_generation=0))
            self.agent(StartExecution(execution_id=eid, generation=1, observed_cancel_generation=0))
            self.agent(Acquire(target_id=res, execution_id=eid, generation=1))
        st = self.sm.state
        self.agent(
            RegisterWait(
                waiter_id=a, waiter_generation=1, target_id=rb, target_generation=st.targets[rb].version, reason="b's"
            )
        )
        self.agent(
            RegisterWait(
                waiter_id=b, waiter_generation=1, target_id=ra, target_generation=st.targets[ra].version, reason="a's"
            )
        )
        edges = [(edge_id(a, rb), st.wait(a, rb).edge_version), (edge_id(b, ra), st.wait(b, ra).edge_version)]  # type: ignore[union-attr]
        c = Candidate.build([(a, 1), (b, 1)], edges)
        self.send("node:n1", propose_command(c, 0))
        self.send("node:n1", VoteRecovery(digest=c.digest))
        self.send("node:n2", VoteRecovery(digest=c.digest))
        self.tick(600)
        self.send("node:n1", CommitRecovery(digest=c.digest))
        for eid in (a, b):
            req = st.cancel.requests.get(eid)
            if req is not None:
                self.agent(
                    AckCancel(
                        execution_id=eid,
                        generation=1,
                        cancel_generation=req.cancel_generation,
                        side_effects=EffectOutcome.NONE,
                    )
                )
            elif st.executions[eid].status.value not in ("CANCELLED", "COMPLETED", "FAILED"):
                self.agent(FailExecution(execution_id=eid, generation=1, reason="lost the cycle"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--executions", type=int, default=1_000_000)
    ap.add_argument("--step", type=int, default=100_000)
    ap.add_argument("--retention-ms", type=int, default=60_000)
    args = ap.parse_args()
    b = Bench(args.retention_ms)
    st = b.sm.state
    print(f"retention {args.retention_ms} ms, 1,000 executions per logical second; a row every {args.step:,}")
    print(
        f"{'executions':>11} {'RSS MB':>7} {'live ex':>8} {'runs':>7} {'tombst':>7} {'decis':>6} {'sessions':>8} "
        f"{'snap MB':>8} {'applies/s':>10} {'retired':>9} {'refused':>8}"
    )
    done = run_no = 0
    mark, t0, a0 = args.step, time.perf_counter(), 0
    while done < args.executions:
        run_no += 1
        if run_no % 500 == 0:
            b.deadlock(run_no)
            done += 2
        n = 1 + run_no % 10
        b.run(n, run_no)
        done += n
        if done >= mark:
            elapsed = time.perf_counter() - t0
            rate = (b.applies - a0) / elapsed
            snap = len(b.sm.snapshot())
            st = b.sm.state
            refused = sum(b.refused.values())
            print(
                f"{done:>11,} {rss_mb():>7.0f} {len(st.executions):>8,} {len(st.runs):>7,} "
                f"{len(st.retired_executions) + len(st.retired_runs):>7,} {len(st.recovery.decisions):>6,} "
                f"{len(st.sessions):>8,} {snap / 1e6:>8.1f} {rate:>10,.0f} "
                f"{st.counters.get('retire.executions', 0):>9,} {refused:>8,}",
                flush=True,
            )
            mark += args.step
            t0, a0 = time.perf_counter(), b.applies
    print(
        f"refusals by code: {dict(sorted(b.refused.items())) or 'none'}; "
        f"too_many_executions: {b.refused.get('too_many_executions', 0)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
