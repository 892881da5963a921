"""Per-write apply cost by command, as a replica applies a log entry (issue 5).

Prints tables; asserts nothing. Usage: scripts/bench apply [--rounds 60] [--repeat 5]
[--against DIR]

Every write of a 3-node cluster is applied by all three replicas on the same machine, so the
state machine's per-write cost counts three times. This times ``apply_bytes`` of encoded
envelopes, each with a request id (as the SDK sends them), per command kind, on two paths:
"plain" is ``StateMachine``; "node" is ``waitgraph.node.events.EventfulMachine`` with the event journal
and the decision-log hook, which is what a node runs.

State: 64 agents, each with a session, a holder execution holding its own resource, a waiter
execution, and a spare execution with a free resource. Each round, every agent sends in turn:
Heartbeat; RegisterWait of a new edge on the next agent's held resource; RegisterWait of the
same edge at a higher edge_version (re-register, like ``scripts/bench cluster`` row 3b);
CloseWait of it; Acquire and Release of its free resource; CreateExecution of a new root.

Times are CPU time of the applying thread (``time.thread_time_ns``) over each batch of one kind
(one write per agent), so that other processes on a busy machine do not count. The cyclic
garbage collector is paused while writes are timed: its passes would land on whichever write
happens to trigger them (mostly the node path's, as its event journal grows). The row "collector on"
applies the same stream to another fresh machine with the collector on and Python's default
thresholds; "node's collector" to a third one as ``waitgraph serve`` runs once started (its state
frozen, generation 0 collected every 10,000 allocations: ``cluster/node/collector.py`` ``tune_gc``).

``--against DIR`` compares with another copy of the code, a directory holding ``statemachine/``,
``cluster/`` and ``proto/`` (e.g. ``mkdir /tmp/base; git archive HEAD statemachine cluster proto
| tar -x -C /tmp/base``): runs alternate between the two trees, one fresh process per run, best
of ``--repeat`` each, and the table also says whether both gave byte-identical outcomes for
every write and the same final snapshot bytes.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
AGENTS = 64
KINDS = (
    "Heartbeat",
    "RegisterWait (new edge)",
    "RegisterWait (re-register)",
    "CloseWait",
    "Acquire",
    "Release",
    "CreateExecution",
)
PATHS = ("plain", "node")


def machine_for(path: str, journal: Any = None) -> Any:
    """A fresh machine of a path: "plain" is ``StateMachine``; "node" is ``EventfulMachine`` with
    the event journal (``journal``, or a new one) and the decision-log hook, as a node runs it."""
    from waitgraph.node import logs
    from waitgraph.node.events import EventfulMachine, EventJournal
    from waitgraph.statemachine import StateMachine

    if path == "plain":
        return StateMachine()
    journal = journal if journal is not None else EventJournal(100_000)
    machine = EventfulMachine(journal, logs.DecisionLog(lambda: 1, lambda: 1).applied)
    journal.bind(lambda: 0, None)  # every write is numbered as an effect of log entry 1
    return machine


def setup_agents(m: Any) -> int:
    """Sessions, executions and targets; returns the logical time reached."""
    from waitgraph.statemachine import Envelope
    from waitgraph.statemachine import commands as C

    at = 1000
    for i in range(AGENTS):
        a = f"t{i:02d}"
        setup: list[Any] = [C.JoinSession(agent_id=a, lease_ms=3_600_000)]
        for ex in (f"exec:H-{a}", f"exec:W-{a}", f"exec:X-{a}"):
            setup.append(C.CreateExecution(execution_id=ex, run_id=f"run-{ex[5:]}", observed_cancel_generation=0))
            setup.append(C.StartExecution(execution_id=ex, generation=1, observed_cancel_generation=0))
        setup.append(C.CreateTarget(target_id=f"resource:r-{a}"))
        setup.append(C.CreateTarget(target_id=f"resource:q-{a}"))
        setup.append(C.Acquire(target_id=f"resource:r-{a}", execution_id=f"exec:H-{a}", generation=1))
        for cmd in setup:
            at += 1
            out = m.apply(Envelope(actor=f"agent:{a}", at_ms=at, request_id=None, command=cmd))
            if not out.ok:
                raise SystemExit(f"setup command refused: {cmd} -> {out.code} {out.message}")
    return at


def _stream(rounds: int, at: int) -> list[tuple[str, list[bytes]]]:
    """(kind, encoded envelopes) batches of every timed write, in apply order."""
    from waitgraph.statemachine import Envelope
    from waitgraph.statemachine import commands as C
    from waitgraph.statemachine.codec import encode_envelope
    from waitgraph.statemachine.commands import Command

    names = [f"t{i:02d}" for i in range(AGENTS)]
    out = []
    for k in range(rounds):
        v = 2 * k + 1
        per_agent: list[list[Command]] = []  # each agent's writes of this round, in KINDS order
        for i, a in enumerate(names):
            waiter, target = f"exec:W-{a}", f"resource:r-{names[(i + 1) % AGENTS]}"
            spare, free = f"exec:X-{a}", f"resource:q-{a}"

            def register(version: int, waiter: str = waiter, target: str = target) -> C.RegisterWait:
                return C.RegisterWait(
                    waiter_id=waiter,
                    waiter_generation=1,
                    target_id=target,
                    target_generation=1,
                    reason="bench",
                    edge_version=version,
                )

            per_agent.append(
                [
                    C.Heartbeat(agent_id=a),
                    register(v),
                    register(v + 1),
                    C.CloseWait(
                        waiter_id=waiter, waiter_generation=1, target_id=target, edge_version=v + 1, reason="done"
                    ),
                    C.Acquire(target_id=free, execution_id=spare, generation=1),
                    C.Release(target_id=free, execution_id=spare, generation=1),
                    C.CreateExecution(
                        execution_id=f"exec:C-{a}-{k}", run_id=f"C-{a}-{k}", observed_cancel_generation=0
                    ),
                ]
            )
        # One kind after the other across the agents, as concurrent agents' writes interleave.
        for step, kind in enumerate(KINDS):
            batch = []
            for a, writes in zip(names, per_agent, strict=True):
                at += 1
                env = Envelope(actor=f"agent:{a}", at_ms=at, request_id=f"{a}-{k}-{step}", command=writes[step])
                batch.append(encode_envelope(env))
            out.append((kind, batch))
    return out


def _timed(path: str, rounds: int, collector: str) -> tuple[dict[str, int], dict[str, int], list[Any], Any]:
    """Apply the stream to a fresh machine: CPU ns and writes per kind, the outcomes, the machine.
    ``collector``: off (paused), default (Python's thresholds) or node (what ``waitgraph serve``
    does once started, ``cluster/node/collector.py`` ``tune_gc``: freeze, then its thresholds)."""
    m = machine_for(path)
    stream = _stream(rounds, setup_agents(m))
    total = dict.fromkeys(KINDS, 0)
    count = dict.fromkeys(KINDS, 0)
    outcomes: list[Any] = []
    apply_bytes = m.apply_bytes
    clock = time.thread_time_ns
    thresholds = gc.get_threshold()
    gc.collect()
    if collector == "off":
        gc.disable()
    elif collector == "node":
        from waitgraph.node import collector

        collector.tune_gc()
    try:
        for kind, batch in stream:
            t0 = clock()
            outs = list(map(apply_bytes, batch))
            total[kind] += clock() - t0
            count[kind] += len(batch)
            outcomes += outs
    finally:
        gc.enable()
        gc.set_threshold(*thresholds)
        gc.unfreeze()
    return total, count, outcomes, m


def run_once(rounds: int) -> dict[str, Any]:
    """Per path: mean µs per write of each kind (collector paused), of all writes with the
    collector on (another fresh machine), and a hash of every outcome and the final snapshot."""
    from waitgraph.statemachine.codec import encode_outcome

    result: dict[str, Any] = {}
    for path in PATHS:
        total, count, outcomes, m = _timed(path, rounds, collector="off")
        h = hashlib.sha256()
        for o in outcomes:
            h.update(encode_outcome(o))
        h.update(m.snapshot())
        del m
        gc_total, _, gc_outcomes, _ = _timed(path, rounds, collector="default")
        node_total, _, node_outcomes, _ = _timed(path, rounds, collector="node")
        result[path] = {
            "us": {k: total[k] / count[k] / 1e3 for k in KINDS},
            "all": sum(total.values()) / len(outcomes) / 1e3,
            "all_gc": sum(gc_total.values()) / len(gc_outcomes) / 1e3,
            "all_gc_node": sum(node_total.values()) / len(node_outcomes) / 1e3,
            "writes": len(outcomes),
            "refused": sum(1 for o in outcomes if not o.ok),
            "hash": h.hexdigest()[:16],
        }
    return result


def use_tree(tree: str) -> None:
    """Make ``import waitgraph`` in this process load ``tree``'s code. A tree holds
    ``statemachine/``, ``cluster/`` and ``proto/``, which pyproject maps onto ``waitgraph``; a
    package of symlinks in that layout, in a temporary directory first on ``sys.path``, is found
    before the editable install's finder (which comes after the path and would load this
    repository whatever the tree). Raises if ``waitgraph`` was imported already or comes from
    elsewhere."""
    if "waitgraph" in sys.modules:
        raise RuntimeError("use_tree must run before waitgraph is imported")
    root = tempfile.mkdtemp(prefix="wg-tree-")
    atexit.register(shutil.rmtree, root, True)
    pkg = os.path.join(root, "waitgraph")
    os.mkdir(pkg)
    cluster = os.path.join(tree, "cluster")
    for name in os.listdir(cluster):
        os.symlink(os.path.join(cluster, name), os.path.join(pkg, name))
    os.symlink(os.path.join(tree, "statemachine"), os.path.join(pkg, "statemachine"))
    os.symlink(os.path.join(tree, "proto", "waitgraph"), os.path.join(pkg, "proto"))
    sys.path.insert(0, root)
    import waitgraph.statemachine

    if not waitgraph.statemachine.__file__ or not waitgraph.statemachine.__file__.startswith(root):
        raise RuntimeError(f"waitgraph came from {waitgraph.statemachine.__file__}, not from {tree}")


def tree_runs(script: str, trees: list[str], repeat: int, args: list[str]) -> dict[str, list[dict[str, Any]]]:
    """``repeat`` runs of ``script --tree T ARGS --json`` per tree, each in a fresh process,
    alternating which tree goes first: a noisy machine's drift hits both alike."""
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    for i in range(repeat):
        for tree in trees if i % 2 == 0 else trees[::-1]:
            done = subprocess.run(
                [sys.executable, script, "--tree", tree, *args, "--json"], capture_output=True, text=True, check=True
            )
            runs[tree].append(json.loads(done.stdout))
    return runs


ALL, ALL_GC, ALL_GC_NODE = "all writes", "all, collector on", "all, node's collector"


def _best(runs: list[dict[str, Any]], path: str, kind: str) -> float:
    key = {ALL: "all", ALL_GC: "all_gc", ALL_GC_NODE: "all_gc_node"}.get(kind)
    return float(min(r[path][key] if key else r[path]["us"][kind] for r in runs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=60, help="rounds of 7 writes per agent (64 agents)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per tree; the best of each is shown")
    ap.add_argument("--against", help="another code tree to compare with (runs alternate between the two)")
    ap.add_argument("--tree", default=ROOT, help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.json:
        use_tree(args.tree)
        print(json.dumps(run_once(args.rounds)))
        return
    trees = [os.path.abspath(args.against), ROOT] if args.against else [ROOT]
    runs = tree_runs(__file__, trees, args.repeat, ["--rounds", str(args.rounds)])
    first = runs[ROOT][0]["plain"]
    print(f"python {sys.version.split()[0]}, cores {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    print(f"{first['writes']:,} writes per run, {AGENTS} agents, each with a request id; best of {args.repeat} runs")
    print()
    if not args.against:
        print("| write (CPU µs per write)   | plain µs | node µs |")
        print("|----------------------------|---------:|--------:|")
        for kind in (*KINDS, ALL, ALL_GC, ALL_GC_NODE):
            print(
                f"| {kind:<26} | {_best(runs[ROOT], 'plain', kind):>8.1f} | {_best(runs[ROOT], 'node', kind):>7.1f} |"
            )
        return
    base, new = runs[trees[0]], runs[ROOT]
    print(f"before: {trees[0]}\nafter:  {ROOT}")
    print("| write (CPU µs per write)   | path  | before µs | after µs | change |")
    print("|----------------------------|-------|----------:|---------:|-------:|")
    for kind in (*KINDS, ALL, ALL_GC, ALL_GC_NODE):
        for path in PATHS:
            b, a = _best(base, path, kind), _best(new, path, kind)
            print(f"| {kind:<26} | {path:<5} | {b:>9.1f} | {a:>8.1f} | {(a - b) / b:>+6.0%} |")
    same = all(r[p]["hash"] == base[0][p]["hash"] for r in base + new for p in PATHS)
    refused = {r[p]["refused"] for r in base + new for p in PATHS}
    print()
    print(f"identical outcomes and final snapshot bytes, every run of both trees: {'yes' if same else 'NO'}")
    print(f"refused writes per run: {sorted(refused)}")


if __name__ == "__main__":
    main()
