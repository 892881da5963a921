"""The second seed's broken recovery, as a test double: an epoch per agent (never used by a node).

On "deadlock detected" every member of the cycle rolls back at once: it releases what it holds,
bumps its *local* epoch and re-requests the same resources in the same order. The replicated
epoch is never committed, so the same cycle re-forms under the same epoch, round after round
(the seed saw it 11 times in 4.2 s). ``tests/test_recovery.py`` drives it against the core's
livelock guard; ``scripts/demo`` (scenario 4) prints its rounds beside the real recovery.

It runs the real core (:class:`~waitgraph.statemachine.StateMachine`): detection, proposals and
the acquisitions are the cluster's own; only the recovery is the naive one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from waitgraph.statemachine import Envelope, Outcome, Result, StateMachine
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.detect import full_pass
from waitgraph.statemachine.recovery import propose_command
from waitgraph.statemachine.recovery_state import RolloutMode

__all__ = ["NaivePerAgentEpochs", "NaiveRound", "naive_rounds"]

Apply = Callable[[str, C.Command], Outcome]
"""Apply one command as an actor and return its outcome, which must be APPLIED."""


@dataclass(frozen=True, slots=True)
class NaiveRound:
    signature: str
    """The cycle's signature as the detector saw it this round."""
    replicated_epoch: int
    local_epochs: tuple[int, ...]


class NaivePerAgentEpochs:
    """The ring ``ring[i]`` holds ``resources[i]`` and waits for ``resources[i + 1]``; every
    :meth:`roll_back_all` is the seed's simultaneous speculative rollback of all of them."""

    def __init__(self, ok: Apply, machine: StateMachine, ring: Sequence[str], resources: Sequence[str]) -> None:
        if len(ring) != len(resources):
            raise ValueError("one resource per ring member")
        self.ok = ok
        self.machine = machine
        self.ring = list(ring)
        self.resources = list(resources)
        self.local_epoch = {eid: 0 for eid in ring}

    def _owner(self, eid: str) -> str:
        return f"agent:{self.machine.state.executions[eid].agent_id}"

    def roll_back_all(self) -> None:
        st = self.machine.state
        for eid in self.ring:
            self.local_epoch[eid] += 1
            (edge,) = st.waits_of(eid)
            self.ok(
                self._owner(eid),
                C.CloseWait(
                    waiter_id=eid,
                    waiter_generation=edge.waiter_generation,
                    target_id=edge.target_id,
                    edge_version=edge.edge_version,
                    reason="rollback",
                ),
            )
        for eid, held in zip(self.ring, self.resources, strict=True):
            gen = st.executions[eid].generation
            self.ok(self._owner(eid), C.Release(target_id=held, execution_id=eid, generation=gen))
        # Everyone re-acquires their own resource first, then asks for the next one: the same cycle,
        # each presenting its local epoch (the replicated one never moved, so every fence passes).
        for eid, held in zip(self.ring, self.resources, strict=True):
            gen = st.executions[eid].generation
            acquire = C.Acquire(target_id=held, execution_id=eid, generation=gen, observed_epoch=self.local_epoch[eid])
            self.ok(self._owner(eid), acquire)
        for i, eid in enumerate(self.ring):
            self.request(eid, self.resources[(i + 1) % len(self.ring)], "retry")

    def request(self, eid: str, target_id: str, reason: str) -> None:
        """The wait of ``eid`` on ``target_id``'s current lease (it is held)."""
        st = self.machine.state
        ex = st.executions[eid]
        self.ok(
            self._owner(eid),
            C.RegisterWait(
                waiter_id=eid,
                waiter_generation=ex.generation,
                target_id=target_id,
                target_generation=st.targets[target_id].version,
                reason=reason,
                edge_version=ex.edge_hwm.get(target_id, 0) + 1,
            ),
        )


def naive_rounds(rounds: int = 11, members: Sequence[str] = ("A", "B", "C", "D")) -> list[NaiveRound]:
    """The seed's A->B->C->D->A ring on a fresh core, recovered ``rounds`` times the naive way:
    each round the detector fires (a real proposal) and all members roll back at once."""
    machine = StateMachine()
    clock = [0]

    def ok(actor: str, command: C.Command) -> Outcome:
        clock[0] += 1
        out = machine.apply(Envelope(actor=actor, at_ms=clock[0], request_id=None, command=command))
        if out.result is not Result.APPLIED:
            raise RuntimeError(f"{type(command).__name__} as {actor}: {out.code} {out.message}")
        return out

    voters = ("node:n1", "node:n2", "node:n3")
    ok("operator:demo", C.ConfigureRecovery(voters=voters, quorum=2, max_rollback=1, confirmation_window_ms=500))
    ok("operator:demo", C.SetMode(mode=RolloutMode.AUTO))
    ring = [f"exec:naive-{m}" for m in members]
    resources = [f"resource:naive-r{m.lower()}" for m in members]
    for m, eid, res in zip(members, ring, resources, strict=True):
        agent = f"naive-{m.lower()}"
        ok(f"agent:{agent}", C.JoinSession(agent_id=agent, lease_ms=3_600_000))
        ok(f"agent:{agent}", C.CreateExecution(execution_id=eid, run_id=f"run-{agent}", observed_cancel_generation=0))
        ok(f"agent:{agent}", C.StartExecution(execution_id=eid, generation=1, observed_cancel_generation=0))
        ok(f"agent:{agent}", C.CreateTarget(target_id=res))
        ok(f"agent:{agent}", C.Acquire(target_id=res, execution_id=eid, generation=1, observed_epoch=0))
    naive = NaivePerAgentEpochs(ok, machine, ring, resources)
    for i, eid in enumerate(ring):
        naive.request(eid, resources[(i + 1) % len(ring)], "needs the next stage's resource")
    seen: list[NaiveRound] = []
    for _ in range(rounds):
        (cycle,) = full_pass(machine.state)
        ok("node:n1", propose_command(cycle, len(machine.state.changed)))  # the detector fires correctly
        naive.roll_back_all()
        local = tuple(naive.local_epoch[e] for e in ring)
        seen.append(NaiveRound(cycle.signature, machine.state.recovery.epoch, local))
    return seen
