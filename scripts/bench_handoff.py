"""Hand-off benchmark (issue 21): fair grant queues vs today's wake-and-race, in the core.

Prints a table; asserts nothing. Usage: scripts/bench handoff [--agents 64] [--slots 8]
[--acquisitions 5000] [--hold 3]

A contended pool: ``--agents`` agents, one execution each, want a permit of a pool of ``--slots``
over and over. A deterministic scheduler gives each runnable agent one command per turn, round
robin; one command is one **logical step**. An agent that wants a permit sends Acquire; refused, it
registers a wait and is blocked until the cluster closes it. Holding, it works for ``--hold`` of its
turns, then releases. Two ways to be woken are compared on the same workload:

- ``hand-off`` (this code): the release grants the permit to the head of the queue in the same
  apply (WaitClosed ``granted`` with the lease): the waiter holds it, no Acquire of its own;
- ``wake-and-race`` (the code before): the release wakes every waiter of the pool and each sends
  Acquire again; the first to be scheduled wins, the others wait again. Emulated by running the
  same core with no queued kinds (``queues.QUEUED_KINDS`` emptied), which is exactly the old path.

Columns: acquisitions per second of apply time (process CPU time spent in StateMachine.apply,
encoded envelopes decoded as a replica does), commands per acquisition (round trips), the wait of
an acquisition in logical steps from its first Acquire to holding (p50, p99, max), the same wait
counted in grants to others (p99, max: the fairness bound of docs/queues.md), and the fewest and
most acquisitions one agent got.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from waitgraph.statemachine import Envelope, StateMachine, queues
from waitgraph.statemachine.codec import encode_envelope
from waitgraph.statemachine.commands import (
    Acquire,
    Command,
    CreateExecution,
    CreateTarget,
    JoinSession,
    RegisterWait,
    Release,
    StartExecution,
)
from waitgraph.statemachine.effects import WaitClosed
from waitgraph.statemachine.outcome import Result

POOL = "pool:gpu"


def run(agents: int, slots: int, acquisitions: int, hold: int) -> dict[str, float]:
    sm = StateMachine()
    spent = 0.0
    commands = 0

    def apply(actor: str, cmd: Command) -> object:
        nonlocal spent, commands
        data = encode_envelope(Envelope(actor=actor, at_ms=0, request_id=None, command=cmd))
        t0 = time.process_time()
        out = sm.apply_bytes(data)
        spent += time.process_time() - t0
        commands += 1
        return out

    def setup(actor: str, cmd: Command) -> None:
        out = apply(actor, cmd)
        if out.result is not Result.APPLIED:  # type: ignore[attr-defined]
            raise SystemExit(f"setup refused: {cmd} -> {out.code}")  # type: ignore[attr-defined]

    setup("operator:op", CreateTarget(target_id=POOL, slots=slots))
    names = [f"a{i}" for i in range(agents)]
    for n in names:
        setup(f"agent:{n}", JoinSession(agent_id=n, lease_ms=86_400_000))
        setup(f"agent:{n}", CreateExecution(execution_id=f"exec:{n}", run_id=f"run-{n}", observed_cancel_generation=0))
        setup(f"agent:{n}", StartExecution(execution_id=f"exec:{n}", generation=1, observed_cancel_generation=0))
    spent, commands = 0.0, 0
    state = {n: "want" for n in names}  # want | blocked | holding
    work = dict.fromkeys(names, 0)
    since: dict[str, int] = {}
    since_grants: dict[str, int] = {}
    waited_grants: list[int] = []
    got = dict.fromkeys(names, 0)
    version = dict.fromkeys(names, 0)
    waits: list[int] = []
    ready = deque(names)
    step = 0

    def granted(n: str) -> None:
        waited_grants.append(len(waits) - since_grants.pop(n))
        waits.append(step - since.pop(n))
        got[n] += 1

    while len(waits) < acquisitions:
        if step > 1000 * acquisitions:
            raise SystemExit("no progress: the workload is stuck")
        n = ready.popleft()
        eid, actor = f"exec:{n}", f"agent:{n}"
        step += 1
        if state[n] == "want":
            since.setdefault(n, step)
            since_grants.setdefault(n, len(waits))
            out = apply(actor, Acquire(target_id=POOL, execution_id=eid, generation=1))
            if out.result is Result.APPLIED:  # type: ignore[attr-defined]
                state[n], work[n] = "holding", hold
                granted(n)
            else:
                version[n] += 1
                out = apply(
                    actor,
                    RegisterWait(
                        waiter_id=eid,
                        waiter_generation=1,
                        target_id=POOL,
                        target_generation=0,
                        reason="permit",
                        edge_version=version[n],
                    ),
                )
                if out.result is Result.APPLIED:  # type: ignore[attr-defined]
                    state[n] = "blocked"
                    continue  # blocked: not runnable until its wait closes
        elif state[n] == "holding":
            work[n] -= 1
            if work[n] <= 0:
                out = apply(actor, Release(target_id=POOL, execution_id=eid, generation=1))
                state[n] = "want"
                for fx in out.effects:  # type: ignore[attr-defined]
                    if isinstance(fx, WaitClosed):
                        w = fx.edge_id.partition(">")[0].removeprefix("exec:")
                        if fx.lease is not None:
                            state[w], work[w] = "holding", hold
                            granted(w)
                        else:
                            state[w] = "want"
                        ready.append(w)
        ready.append(n)
    waits.sort()
    waited_grants.sort()
    return {
        "grants_p99": waited_grants[min(len(waits) - 1, int(len(waits) * 0.99))],
        "grants_max": waited_grants[-1],
        "per_agent_min": min(got.values()),
        "per_agent_max": max(got.values()),
        "acq_per_s": len(waits) / spent if spent else float("inf"),
        "cmds_per_acq": commands / len(waits),
        "p50": waits[len(waits) // 2],
        "p99": waits[min(len(waits) - 1, int(len(waits) * 0.99))],
        "max": waits[-1],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--acquisitions", type=int, default=5000)
    ap.add_argument("--hold", type=int, default=3)
    args = ap.parse_args()
    rows = [("hand-off", run(args.agents, args.slots, args.acquisitions, args.hold))]
    kinds = queues.QUEUED_KINDS
    queues.QUEUED_KINDS = frozenset()  # the old path: no queue, a release wakes every waiter
    try:
        rows.append(("wake-and-race", run(args.agents, args.slots, args.acquisitions, args.hold)))
    finally:
        queues.QUEUED_KINDS = kinds
    print(
        f"contended pool: {args.agents} agents, {args.slots} slots, {args.acquisitions} acquisitions, "
        f"hold {args.hold} turns; load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'mode':<14} {'acquires/s':>11} {'cmds/acq':>9} {'steps p50':>10} {'p99':>5} {'max':>5}"
        f" {'grants p99':>11} {'max':>5} {'per agent min..max':>19}"
    )
    for name, r in rows:
        print(
            f"{name:<14} {r['acq_per_s']:>11,.0f} {r['cmds_per_acq']:>9.2f} {r['p50']:>10} {r['p99']:>5} {r['max']:>5}"
            f" {r['grants_p99']:>11} {r['grants_max']:>5} {r['per_agent_min']:>10}..{r['per_agent_max']}"
        )


if __name__ == "__main__":
    main()
