#!/usr/bin/env python3
"""Retention benchmark, core part: executions pushed through apply for a long logical time with
retirement on; every step prints RSS, the live counts, the snapshot size and applies/s.

    scripts/bench retention                          # 1,000,000 executions, a row per 100,000
    scripts/bench retention --executions 20000000 --step 1000000   # the issue's full run
    scripts/bench retention --cluster                # 3 real nodes, 64 SDK agents, 10 minutes

The workload, at 1,000 executions per logical second: runs of 1-10 executions (a root and its
children); each execution starts, some record a side effect, some hold a resource while they run,
some wait for an artifact a sibling produces; every 500th run is a two-run deadlock recovered by
the real protocol (propose, two votes, commit after the window, the victim acknowledges, the other
fails). A RetireSettled pass every logical second with ``--retention-ms`` (default one minute).
Targets: a fixed pool of 1,000 resources and 1,000 artifacts reused (an acquired resource never
retires: its lease is a fence), and each run of 3 or more makes its own output artifact, which
retires a retention after it is produced. Commands go through ``StateMachine.apply`` (the codec is
benchmarked by ``scripts/bench apply``). It prints a table and asserts nothing.

``--cluster``: a real 3-node cluster (``waitgraph dev``'s launcher, durable defaults, the given
``--retention-ms``, default 30 s there) and 64 SDK agents in ``--workers`` processes, each agent
making runs for ``--minutes``: a session, an execution per run that holds its agent's resource,
makes and produces the run's own artifact, and completes. Every minute it prints each node's RSS,
snapshot file and history store sizes, the write p50/p99 of that minute (every SDK call that
writes), the writes and the refusals.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

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
        if n >= 3:
            # The run's own output: made, produced once, then idle; it retires a retention later.
            out = f"artifact:out{run_no}"
            self.op(CreateTarget(target_id=out))
            self.agent(
                DeclareSatisfier(target_id=out, target_generation=1, satisfier_id=ids[2], satisfier_generation=1)
            )
            self.agent(ProduceArtifact(artifact_id=out, version=1))
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


# -- the cluster part ------------------------------------------------------------------------------


def cluster_worker() -> int:
    """``--cluster-worker``: one process of SDK agents (spec as JSON on stdin); prints one JSON
    line: every write's (seconds since the start, latency s), and the refusals by code."""
    import asyncio
    import json

    from waitgraph.sdk import Client, RpcError

    spec = json.loads(sys.stdin.read())
    lat: list[tuple[float, float]] = []
    refused: dict[str, int] = {}
    t_start = spec["t0"]

    async def timed(call: Any) -> Any:
        t = time.time()
        out = await call
        lat.append((t - t_start, time.time() - t))
        return out

    async def agent(name: str, token: str) -> None:
        async with Client(spec["endpoints"], token=token) as client, client.session(name) as s:
            run = 0
            while time.time() < spec["stop_at"]:
                run += 1
                run_id = f"run-{name}-{spec['incarnation']}-{run}"
                try:
                    scope = s.execution(f"exec:{run_id}", run_id=run_id)
                    ex = await timed(scope.__aenter__())
                    try:
                        holding = ex.holding(f"resource:{name}")
                        await timed(holding.__aenter__())
                        await timed(ex.produces(f"artifact:{run_id}"))
                        await timed(s.produce(f"artifact:{run_id}"))
                        await timed(holding.__aexit__(None, None, None))
                    finally:
                        await timed(scope.__aexit__(None, None, None))
                except RpcError as exc:
                    refused[exc.code or exc.status.name] = refused.get(exc.code or exc.status.name, 0) + 1
                    await asyncio.sleep(0.05)

    async def main() -> None:
        await asyncio.gather(*(agent(name, token) for name, token in spec["agents"]))

    asyncio.run(main())
    print(json.dumps({"lat": lat, "refused": refused}))
    return 0


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("history.sqlite3*")) if path.exists() else 0


def raft_ticks_and_leaders(logs: dict[str, str]) -> tuple[dict[str, list[int]], list[tuple[str, str]]]:
    """From the nodes' logs: every tick stall each node logged (ms; a node logs a tick longer than
    ``TICK_STALL_S``, cluster/node/raft/_liveness.py), and every (time, node) that became leader."""
    import json

    stalls: dict[str, list[int]] = {}
    leaders: list[tuple[str, str]] = []
    for node, text in logs.items():
        stalls[node] = []
        for line in text.splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            event = str(ev.get("event", ""))
            if event.startswith("the Raft thread took "):
                stalls[node].append(int(event.split()[4]))
            elif event.startswith("raft role ") and event.endswith("-> leader"):
                leaders.append((str(ev.get("timestamp", "")), node))
    return stalls, sorted(leaders)


def run_cluster(args: argparse.Namespace) -> int:
    import json
    import subprocess
    import tempfile

    import psutil

    from waitgraph.dev.localcluster import CO_LOCATED_ELECTION_TIMEOUT_MS, LocalCluster

    names = [f"ag{i:02d}" for i in range(args.agents)]
    root = Path(tempfile.mkdtemp(prefix="wg-retention-"))
    serve = ["--retention-ms", str(args.retention_ms)]
    election_ms = args.election_timeout_ms or CO_LOCATED_ELECTION_TIMEOUT_MS
    with LocalCluster(root=root, agents=names, serve_args=serve, election_timeout_ms=election_ms) as cluster:
        cluster.start()
        cluster.wait_for_leader()
        assert cluster.credentials is not None
        tokens = cluster.credentials.agents
        t0 = time.time()
        stop_at = t0 + args.minutes * 60
        procs = []
        for w in range(args.workers):
            mine = [(n, tokens[n]) for n in names[w :: args.workers]]
            spec = {"endpoints": cluster.endpoints, "agents": mine, "t0": t0, "stop_at": stop_at, "incarnation": w}
            p = subprocess.Popen(
                [sys.executable, __file__, "--cluster-worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert p.stdin is not None
            p.stdin.write(json.dumps(spec))
            p.stdin.close()
            procs.append(p)
        samples = []
        minute = 1
        while minute <= args.minutes:
            time.sleep(max(0.0, t0 + minute * 60 - time.time()))
            row = []
            for m in cluster.members:
                rss = psutil.Process(m.pid).memory_info().rss if m.pid else 0
                dump = m.data_dir / "raft.dump"
                row.append((m.node_id, rss, dump.stat().st_size if dump.exists() else 0, _tree_bytes(m.data_dir)))
            samples.append((minute, row))
            print(f"  minute {minute}: " + ", ".join(f"{n} {r / 1e6:.0f} MB" for n, r, _, _ in row), flush=True)
            minute += 1
        results = []
        for p in procs:
            assert p.stdout is not None
            results.append(json.loads(p.stdout.read()))
            p.wait(timeout=60)
        stalls, leaders = raft_ticks_and_leaders({m.node_id: m.log_text() for m in cluster.members})
    lat = sorted((t, x) for r in results for t, x in r["lat"])
    refused: dict[str, int] = {}
    for r in results:
        for code, n in r["refused"].items():
            refused[code] = refused.get(code, 0) + n
    print(
        f"3 nodes, {args.agents} SDK agents in {args.workers} processes, retention {args.retention_ms} ms, "
        f"{args.minutes} min, election timeout {election_ms} ms; per node: RSS MB / snapshot MB / history MB"
    )
    head = " ".join(f"{m.node_id:>22}" for m in cluster.members)
    print(f"{'min':>4} {head} {'writes':>8} {'p50 ms':>7} {'p99 ms':>7}")
    for minute, row in samples:
        mine = sorted(x for t, x in lat if minute - 1 <= t / 60 < minute)
        p50 = mine[len(mine) // 2] * 1e3 if mine else float("nan")
        p99 = mine[min(len(mine) - 1, int(len(mine) * 0.99))] * 1e3 if mine else float("nan")
        cells = " ".join(f"{rss / 1e6:>8.0f} /{snap / 1e6:>5.1f} /{hist / 1e6:>5.1f}" for _, rss, snap, hist in row)
        print(f"{minute:>4} {cells} {len(mine):>8,} {p50:>7.1f} {p99:>7.1f}")
    print(f"refusals by code: {dict(sorted(refused.items())) or 'none'}")
    for node, ms in stalls.items():
        longest = f"{max(ms):,} ms" if ms else "below the stall threshold (none logged)"
        print(f"{node}: longest Raft tick {longest}; {len(ms)} stall(s) logged")
    changes = leaders[1:]  # the first is the election at start
    print(
        f"leader changes during the run: {len(changes)}"
        + "".join(f"\n  {at} {node} became leader" for at, node in changes)
    )
    return 0


def main() -> int:
    if "--cluster-worker" in sys.argv:
        return cluster_worker()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--executions", type=int, default=1_000_000)
    ap.add_argument("--step", type=int, default=100_000)
    ap.add_argument("--retention-ms", type=int, default=60_000)
    ap.add_argument("--cluster", action="store_true", help="the cluster part (3 nodes, SDK agents)")
    ap.add_argument("--minutes", type=int, default=10, help="--cluster: how long")
    ap.add_argument("--agents", type=int, default=64, help="--cluster: SDK agents")
    ap.add_argument("--workers", type=int, default=4, help="--cluster: processes the agents run in")
    ap.add_argument(
        "--election-timeout-ms",
        type=int,
        default=None,
        help="--cluster: the nodes' election timeout (default: the co-located rule's, cluster/dev/localcluster.py)",
    )
    args = ap.parse_args()
    if args.cluster:
        if "--retention-ms" not in sys.argv:
            args.retention_ms = 30_000
        return run_cluster(args)
    b = Bench(args.retention_ms)
    st = b.sm.state
    print(f"retention {args.retention_ms} ms, 1,000 executions per logical second; a row every {args.step:,}")
    print(
        f"{'executions':>11} {'RSS MB':>7} {'live ex':>8} {'runs':>7} {'targets':>8} {'tombst':>7} {'decis':>6} "
        f"{'sessions':>8} "
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
                f"{done:>11,} {rss_mb():>7.0f} {len(st.executions):>8,} {len(st.runs):>7,} {len(st.targets):>8,} "
                f"{len(st.retired_executions) + len(st.retired_runs) + len(st.retired_targets):>7,} "
                f"{len(st.recovery.decisions):>6,} "
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
