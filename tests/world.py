"""A small driver for scenario tests of the core: real commands through StateMachine.apply."""

from __future__ import annotations

from typing import Any

from waitgraph.statemachine import Envelope, Outcome, Result, StateMachine
from waitgraph.statemachine.commands import (
    Acquire,
    CommitRecovery,
    ConfigureRecovery,
    CreateExecution,
    CreateTarget,
    DeclareSatisfier,
    JoinSession,
    RegisterWait,
    Release,
    SetMode,
    StartExecution,
    VoteRecovery,
)
from waitgraph.statemachine.detect import Candidate, full_pass
from waitgraph.statemachine.recovery import propose_command
from waitgraph.statemachine.recovery_state import ProposalStatus, RolloutMode

NODES = ("node:n1", "node:n2", "node:n3")


class World:
    def __init__(self) -> None:
        self.m = StateMachine()
        self.t = 0
        self.rid = 0

    @property
    def st(self):
        return self.m.state

    def do(self, actor: str, cmd: object, dt: int = 1) -> Outcome:
        self.t += dt
        return self.m.apply(Envelope(actor=actor, at_ms=self.t, request_id=None, command=cmd))  # type: ignore[arg-type]

    def ok(self, actor: str, cmd: object, dt: int = 1) -> Outcome:
        out = self.do(actor, cmd, dt)
        assert out.result is Result.APPLIED, (cmd, out.code, out.message)
        return out

    def agent(self, name: str) -> str:
        self.ok(f"agent:{name}", JoinSession(agent_id=name, lease_ms=3_600_000))
        return f"agent:{name}"

    def execution(self, name: str, *, agent: str | None = None, run: str | None = None, **kw: object) -> str:
        """exec:<name> owned by agent <agent or name>, started (RUNNING)."""
        owner = agent or name
        if f"{owner}" not in self.st.sessions:
            self.agent(owner)
        eid = f"exec:{name}"
        self.ok(
            f"agent:{owner}",
            CreateExecution(execution_id=eid, run_id=run or f"run-{name}", observed_cancel_generation=0, **kw),
        )  # type: ignore[arg-type]
        self.ok(
            f"agent:{owner}", StartExecution(execution_id=eid, generation=1, observed_cancel_generation=self.cg(eid))
        )
        return eid

    def cg(self, eid: str) -> int:
        """The cancel generation of the execution's run, as its agent would have observed it."""
        return self.st.runs[self.st.executions[eid].run_id].cancel_generation

    def owner(self, eid: str) -> str:
        return f"agent:{self.st.executions[eid].agent_id}"

    def gen(self, eid: str) -> int:
        return self.st.executions[eid].generation

    def target(self, tid: str, slots: int = 1) -> str:
        if tid not in self.st.targets:
            self.ok("operator:op", CreateTarget(target_id=tid, slots=slots))
        return tid

    def hold(self, eid: str, tid: str) -> None:
        self.target(tid)
        self.ok(
            self.owner(eid),
            Acquire(target_id=tid, execution_id=eid, generation=self.gen(eid), observed_epoch=self.st.recovery.epoch),
        )

    def release(self, eid: str, tid: str) -> Outcome:
        """``eid`` lets ``tid`` go (handing it to the head of its grant queue, if any)."""
        return self.ok(self.owner(eid), Release(target_id=tid, execution_id=eid, generation=self.gen(eid)))

    def produces(self, eid: str, tid: str, version: int = 1) -> None:
        self.target(tid)
        self.ok(
            self.owner(eid),
            DeclareSatisfier(
                target_id=tid, target_generation=version, satisfier_id=eid, satisfier_generation=self.gen(eid)
            ),
        )

    def wait(self, eid: str, tid: str, reason: str = "needs it", tgen: int | None = None, **fields: Any) -> Outcome:
        """``eid`` waits on ``tid`` at the generation a client would name (``fields``: more of
        RegisterWait's, e.g. ``priority``, ``deadline_ms``)."""
        if tgen is None:
            if tid.startswith("exec:"):
                tgen = self.gen(tid)
            elif tid.startswith(("artifact:", "approval:")):
                tgen = self.st.targets[tid].version + 1
            elif tid.startswith("pool:"):
                tgen = 0
            else:
                tgen = self.st.targets[tid].version
        hwm = self.st.executions[eid].edge_hwm.get(tid, 0)
        return self.ok(
            self.owner(eid),
            RegisterWait(
                waiter_id=eid,
                waiter_generation=self.gen(eid),
                target_id=tid,
                target_generation=tgen,
                reason=reason,
                edge_version=hwm + 1,
                **fields,
            ),
        )

    # -- recovery -------------------------------------------------------------------------------

    def configure(
        self,
        voters: tuple[str, ...] = NODES,
        quorum: int = 3,
        max_rollback: int = 2,
        window_ms: int = 500,
        mode: RolloutMode = RolloutMode.AUTO,
        **kw: int,
    ) -> None:
        self.ok(
            "operator:op",
            ConfigureRecovery(
                voters=voters, quorum=quorum, max_rollback=max_rollback, confirmation_window_ms=window_ms, **kw
            ),
        )
        self.ok("operator:op", SetMode(mode=mode))

    def candidates(self) -> list[Candidate]:
        return full_pass(self.st)

    def propose(self, c: Candidate) -> Outcome:
        return self.do("node:n1", propose_command(c, len(self.st.changed)))

    def vote_all(self, c: Candidate) -> None:
        for voter in self.st.recovery.config.voters:
            self.ok(voter, VoteRecovery(digest=c.digest))

    def commit(self, c: Candidate, dt: int = 1000) -> Outcome:
        return self.do("node:n1", CommitRecovery(digest=c.digest), dt=dt)

    def recover(self) -> list[Outcome]:
        """One detector round as the leader runs it: propose, every voter votes, commit. The
        candidates come from one pass; a later one that an earlier commit broke (its cycle no longer
        stands as proposed) is retracted on arrival, as on the leader, and the next round looks again."""
        outs = []
        for c in self.candidates():
            proposed = self.propose(c)
            assert proposed.ok
            if any(type(fx).__name__ == "RecoveryRetracted" for fx in proposed.effects):
                assert self.st.recovery.proposals[c.digest].status is ProposalStatus.RETRACTED
                continue
            self.vote_all(c)
            outs.append(self.commit(c))
        return outs
