"""Stateful property test of the core: random command sequences against a model of what must hold.

Every step goes through ``StateMachine.apply_bytes`` (the one replicated entry point) and is then
checked against:
- the structural invariants (``waitgraph.statemachine.invariants.check`` is empty);
- monotonicity: execution generations, target versions, session incarnations, run cancel
  generations, the epoch, logical time, and each open edge's version per (waiter, target, waiter
  generation) never decrease; an edge that closed and opens again in the same generation has a
  higher version; a COMMITTED side effect stays COMMITTED; a late close of an edge that was open in
  the current generation is a no-op, never "no_edge";
- the outcome contract: REJECTED leaves the snapshot byte-identical; NOOP changes exactly
  ``now_ms``, one ``noop.<code>`` counter and the idempotency entry of its request id; a repeated
  (actor, request id) with the same command returns the first outcome marked ``duplicate`` and
  changes nothing, with another command it is rejected and changes nothing; undecodable bytes are
  REJECTED/INVALID_ARGUMENT and change nothing; every outcome survives the codec;
- snapshot -> restore -> snapshot is byte-identical, and a restored copy fed the same commands in
  lockstep gives equal outcomes and digests; at the end, replaying the log into a fresh machine
  gives the same outcomes and digest.

Below the machine: replaying a log (whole, or resumed from a snapshot at any cut) reaches the same
digest, and the invariant checker itself reports each kind of corruption it is meant to catch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from tests.strategies import (
    INT64_MAX,
    DrawChooser,
    RandomChooser,
    bootstrap_envelopes,
    envelopes,
    examples,
    generate_log,
    make_command,
    mutated_bytes,
    mutated_plain,
    pack_plain,
)
from waitgraph.statemachine import invariants
from waitgraph.statemachine.codec import (
    command_fingerprint,
    decode_envelope,
    decode_outcome,
    encode_command,
    encode_envelope,
    encode_outcome,
    outcome_to_plain,
    pack,
)
from waitgraph.statemachine.commands import (
    Acquire,
    CloseWait,
    CreateExecution,
    CreateTarget,
    DeclareSatisfier,
    Envelope,
    JoinSession,
    RegisterWait,
    StartExecution,
)
from waitgraph.statemachine.effects import ExecutionRetired, RunRetired, SessionRetired, TargetRetired
from waitgraph.statemachine.enums import EffectOutcome, ExecStatus, SessionStatus
from waitgraph.statemachine.errors import CodecError, Status
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.queues import QueueEntry
from waitgraph.statemachine.state import Limits, State, WaitEdge, count_by_agent


def replay(log: list[bytes], limits: Limits | None = None) -> tuple[StateMachine, list[Outcome]]:
    sm = StateMachine(limits=limits)
    return sm, [sm.apply_bytes(data) for data in log]


def check_outcome_shape(out: Outcome) -> None:
    if out.result is Result.APPLIED:
        assert (out.code, out.status, out.message) == ("", None, ""), out
    elif out.result is Result.NOOP:
        assert out.code and out.status is None and out.effects == (), out
    else:
        assert out.code and out.status is not None and out.effects == (), out
    # An outcome is a replicated value: the codec carries it unchanged.
    assert decode_outcome(encode_outcome(out)) == out


class CoreMachine(RuleBasedStateMachine):
    LIMITS: Limits | None = None
    """None: the defaults. A subclass sets small limits so that random logs reach them."""

    def __init__(self) -> None:
        super().__init__()
        self.sm = StateMachine(limits=dataclasses.replace(self.LIMITS) if self.LIMITS else None)
        self.log: list[bytes] = []
        self.outcomes: list[Outcome] = []
        self.recorded: dict[tuple[str, str], tuple[bytes, Outcome, bytes]] = {}
        """Model of the idempotency table: (actor, request id) -> (command bytes, first outcome,
        envelope bytes), for every request whose first outcome was not a rejection."""
        self.high: dict[tuple[str, str], int] = {}
        self.committed: set[tuple[str, str]] = set()
        self.edge_seen: dict[tuple[str, str, int], int] = {}
        """(waiter, target, waiter generation) -> highest edge version ever open."""
        self.edge_open: set[tuple[str, str, int]] = set()
        self.shadow: StateMachine | None = None
        self.shadow_left = 0

    # -- the step and its checks ---------------------------------------------------------------

    def step(self, data: bytes) -> Outcome:
        before = self.sm.snapshot()
        before_plain = self.sm.state.to_plain()
        try:
            env: Envelope | None = decode_envelope(data)
        except CodecError:
            env = None
        key = (env.actor, env.request_id) if env is not None and env.request_id is not None else None
        first = self.recorded.get(key) if key is not None else None

        out = self.sm.apply_bytes(data)
        after = self.sm.snapshot()
        self.log.append(data)
        self.outcomes.append(out)
        check_outcome_shape(out)

        if env is None:
            assert (out.result, out.status, out.code) == (Result.REJECTED, Status.INVALID_ARGUMENT, "codec"), out
            assert after == before, "undecodable bytes changed the state"
        elif first is not None:
            command_bytes, first_out, _ = first
            if command_bytes == encode_command(env.command):
                assert out == dataclasses.replace(first_out, duplicate=True), (out, first_out)
            else:
                assert (out.result, out.code) == (Result.REJECTED, "request_id_reused"), out
            assert after == before, "a repeated request id changed the state"
        else:
            assert not out.duplicate, "served from the idempotency table, but the model has no record"
            if out.result is Result.REJECTED:
                assert after == before, f"rejection {out.code} changed the state"
            else:
                self._check_applied_or_noop(env, out, before_plain, after)
                if key is not None:
                    self.recorded[key] = (encode_command(env.command), out, data)
        if env is not None and isinstance(env.command, CloseWait) and out.code == "no_edge":
            cmd = env.command
            seen = self.edge_seen.get((cmd.waiter_id, cmd.target_id, cmd.waiter_generation), 0)
            assert seen < cmd.edge_version, f"{cmd} was registered at v{seen} in this generation, yet 'no_edge'"

        self._forget_retired(out)
        self._check_state()
        self._lockstep(data, out)
        return out

    def _forget_retired(self, out: Outcome) -> None:
        """A retired record left the live state (statemachine/retire.py): its committed side
        effects must travel in its retirement effect (a fact is never lost), and the model stops
        tracking its ids, which may start a new life once their tombstones are forgotten."""
        for fx in out.effects:
            if isinstance(fx, ExecutionRetired):
                ledger = dict(zip(fx.effect_ids, fx.effect_outcomes, strict=True))
                for eid, fx_id in sorted(self.committed):
                    if eid == fx.execution_id:
                        assert ledger.get(fx_id) is EffectOutcome.COMMITTED, f"{eid} retired without {fx_id}"
                        self.committed.discard((eid, fx_id))
                self.high.pop(("generation", fx.execution_id), None)
                for key in [k for k in self.edge_seen if k[0] == fx.execution_id]:
                    del self.edge_seen[key]
            elif isinstance(fx, RunRetired):
                self.high.pop(("cancel_generation", fx.run_id), None)
            elif isinstance(fx, SessionRetired):
                self.high.pop(("incarnation", fx.agent_id), None)
            elif isinstance(fx, TargetRetired):
                # Never an acquired held target (its lease is a fence): a version made afresh is
                # an artifact's or approval's, or a lease counter that never moved.
                assert fx.target_id.startswith(("artifact:", "approval:")) or fx.version == 0, fx
                self.high.pop(("version", fx.target_id), None)

    def _check_applied_or_noop(self, env: Envelope, out: Outcome, before_plain: dict[str, Any], after: bytes) -> None:
        after_plain = msgpack.unpackb(after, raw=False, strict_map_key=False)
        assert after_plain["now_ms"] == max(before_plain["now_ms"], env.at_ms)
        idem = [list(row) for row in before_plain["idempotency"]]
        if env.request_id is not None:
            idem.append([env.actor, env.request_id, command_fingerprint(env.command), outcome_to_plain(out)])
        counters = dict(before_plain["counters"])
        if out.result is Result.NOOP:
            # A no-op changes exactly: logical time, its own counter, its idempotency entry.
            counters[f"noop.{out.code}"] = counters.get(f"noop.{out.code}", 0) + 1
            expected = dict(before_plain, now_ms=after_plain["now_ms"], counters=sorted(counters.items()))
            expected["idempotency"] = idem
            assert pack(expected) == after, f"NOOP {out.code} changed more than time, counters and idempotency"
        else:
            noops = {k: v for k, v in counters.items() if k.startswith("noop.")}
            assert {k: v for k, v in after_plain["counters"] if k.startswith("noop.")} == noops
            assert pack(after_plain["idempotency"]) == pack(idem)

    def _check_state(self) -> None:
        st_ = self.sm.state
        problems = invariants.check(st_)
        assert problems == [], problems

        def rising(kind: str, name: str, value: int) -> None:
            prev = self.high.get((kind, name))
            assert prev is None or value >= prev, f"{kind} of {name} went from {prev} to {value}"
            self.high[(kind, name)] = value

        rising("now_ms", "", st_.now_ms)
        epoch = getattr(getattr(st_, "recovery", None), "epoch", None)
        if isinstance(epoch, int):
            rising("epoch", "", epoch)
        for eid, ex in st_.executions.items():
            rising("generation", eid, ex.generation)
            for fx_id, fx in ex.side_effects.items():
                if fx.outcome is EffectOutcome.COMMITTED:
                    self.committed.add((eid, fx_id))
        for eid, fx_id in self.committed:
            assert st_.executions[eid].side_effects[fx_id].outcome is EffectOutcome.COMMITTED
        for tid, t in st_.targets.items():
            rising("version", tid, t.version)
        for agent, s in st_.sessions.items():
            rising("incarnation", agent, s.incarnation)
        for run_id, run in st_.runs.items():
            rising("cancel_generation", run_id, run.cancel_generation)
        now_open = {}
        for waiter, waits in st_.waits_by_waiter.items():
            for target, edge in waits.items():
                now_open[(waiter, target, edge.waiter_generation)] = edge.edge_version
        for edge_key, version in now_open.items():
            prev = self.edge_seen.get(edge_key)
            if prev is not None:
                assert version >= prev, f"edge {edge_key} went from v{prev} to v{version}"
                if edge_key not in self.edge_open:
                    assert version > prev, f"edge {edge_key} closed and came back at v{version} <= v{prev}"
            self.edge_seen[edge_key] = max(prev or 0, version)
        self.edge_open = set(now_open)

        # The per-agent counts are kept incrementally; they equal a recount (also an invariant),
        # no agent holds more open executions than its limit, and a restore derives the same.
        by_agent = (st_.open_executions_by_agent, st_.open_edges_by_agent)
        assert by_agent == count_by_agent(st_.executions, st_.waits_by_waiter), by_agent
        limit = st_.limits.max_open_executions_per_agent
        assert all(n <= limit for n in st_.open_executions_by_agent.values()), st_.open_executions_by_agent
        snap = st_.snapshot()
        restored = State.restore(snap)
        assert restored.snapshot() == snap, "snapshot -> restore -> snapshot is not byte-identical"
        assert (restored.open_executions_by_agent, restored.open_edges_by_agent) == by_agent

    def _lockstep(self, data: bytes, out: Outcome) -> None:
        if self.shadow is None:
            return
        assert self.shadow.apply_bytes(data) == out, "the restored copy answered differently"
        assert self.shadow.snapshot() == self.sm.snapshot(), "the restored copy diverged"
        self.shadow_left -= 1
        if self.shadow_left == 0:
            self.shadow = None

    # -- rules ---------------------------------------------------------------------------------

    @initialize(data=st.data())
    def bootstrap(self, data: st.DataObject) -> None:
        for env in bootstrap_envelopes(DrawChooser(data.draw), self.sm.state):
            self.step(encode_envelope(env))

    @rule(data=st.data())
    def send(self, data: st.DataObject) -> None:
        self.step(encode_envelope(data.draw(envelopes(self.sm.state), label="envelope")))

    @precondition(lambda self: bool(self.recorded))
    @rule(data=st.data())
    def retry_request(self, data: st.DataObject) -> None:
        """A client retries after a lost reply: same actor, request id and command, later clock."""
        key = data.draw(st.sampled_from(sorted(self.recorded)), label="request")
        _, first, env_bytes = self.recorded[key]
        env = decode_envelope(env_bytes)
        at_ms = min(max(0, self.sm.state.now_ms + data.draw(st.integers(-10, 100), label="delay")), INT64_MAX)
        out = self.step(encode_envelope(dataclasses.replace(env, at_ms=at_ms)))
        assert out == dataclasses.replace(first, duplicate=True)

    @precondition(lambda self: bool(self.recorded))
    @rule(data=st.data())
    def reuse_request_id(self, data: st.DataObject) -> None:
        """A request id sent again with whatever command (usually a different one)."""
        actor, request_id = data.draw(st.sampled_from(sorted(self.recorded)), label="request")
        env = data.draw(envelopes(self.sm.state), label="envelope")
        out = self.step(encode_envelope(dataclasses.replace(env, actor=actor, request_id=request_id)))
        assert out.duplicate or out.code == "request_id_reused", out

    @precondition(lambda self: bool(self.log))
    @rule(data=st.data())
    def redeliver(self, data: st.DataObject) -> None:
        """An earlier message delivered again, late (a retry, or an old attempt's straggler)."""
        self.step(data.draw(st.sampled_from(self.log), label="earlier message"))

    @precondition(lambda self: bool(self.edge_seen))
    @rule(data=st.data())
    def late_close(self, data: st.DataObject) -> None:
        """The waiter's own close of an edge that already closed (it was resolved, or the waiter
        finished or moved on) arrives late: a recorded no-op, never 'never registered'."""
        waiter_id, target_id, generation = data.draw(st.sampled_from(sorted(self.edge_seen)), label="edge")
        owner = self.sm.state.executions[waiter_id].agent_id
        cmd = make_command(
            DrawChooser(data.draw),
            self.sm.state,
            CloseWait,
            waiter_id=waiter_id,
            waiter_generation=generation,
            target_id=target_id,
            edge_version=self.edge_seen[(waiter_id, target_id, generation)],
            reason="late close",
        )
        self.step(
            encode_envelope(Envelope(actor=f"agent:{owner}", at_ms=self.sm.state.now_ms, request_id=None, command=cmd))
        )

    @rule(data=st.data())
    def send_damaged(self, data: st.DataObject) -> None:
        """Bad bytes off the wire: random, damaged at the byte level, or structurally mutated."""
        valid = encode_envelope(data.draw(envelopes(self.sm.state), label="envelope"))
        how = data.draw(st.sampled_from(("random", "bytes", "plain")), label="damage")
        if how == "random":
            bad = data.draw(st.binary(max_size=64), label="bytes")
        elif how == "bytes":
            bad = data.draw(mutated_bytes(valid), label="bytes")
        else:
            plain = msgpack.unpackb(valid, raw=False)
            bad = pack_plain(data.draw(mutated_plain(plain), label="plain"))
        self.step(bad)

    @precondition(lambda self: self.shadow is None)
    @rule(steps=st.integers(1, 8))
    def start_shadow(self, steps: int) -> None:
        """Restore a copy from the snapshot and run it in lockstep for the next few commands."""
        snap = self.sm.snapshot()
        self.shadow = StateMachine(State.restore(snap))
        assert self.shadow.snapshot() == snap
        self.shadow_left = steps

    @rule()
    def restore_in_place(self) -> None:
        """Restore discards the previous state (heaps and caches included); nothing observable changes."""
        snap = self.sm.snapshot()
        self.sm.restore(snap)
        assert self.sm.snapshot() == snap
        assert invariants.check(self.sm.state) == []

    def teardown(self) -> None:
        replayed, outcomes = replay(self.log, self.LIMITS)
        assert outcomes == self.outcomes, "replaying the log gave different outcomes"
        assert replayed.snapshot() == self.sm.snapshot(), "replaying the log gave a different state"


TestCoreStateful = CoreMachine.TestCase
TestCoreStateful.settings = settings(max_examples=examples(150), stateful_step_count=50, deadline=None)


class TightAgentLimitsMachine(CoreMachine):
    """The same machine with per-agent limits of 1 open execution and 1 open edge, which random
    logs over the small universe reach all the time: creations, retries, claim takeovers and
    waits are refused (changing nothing) and the counts still equal a recount after every step."""

    LIMITS = Limits(max_open_executions_per_agent=2, max_open_edges_per_agent=1)


TestTightAgentLimitsStateful = TightAgentLimitsMachine.TestCase
TestTightAgentLimitsStateful.settings = settings(max_examples=examples(60), stateful_step_count=50, deadline=None)


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_replaying_the_log_gives_the_same_digest(data: st.DataObject) -> None:
    sm = StateMachine()
    log, outcomes = [], []
    for env in bootstrap_envelopes(DrawChooser(data.draw), sm.state):
        log.append(encode_envelope(env))
        outcomes.append(sm.apply_bytes(log[-1]))
    for _ in range(data.draw(st.integers(1, 80), label="steps")):
        log.append(encode_envelope(data.draw(envelopes(sm.state), label="envelope")))
        outcomes.append(sm.apply_bytes(log[-1]))
    replayed, replayed_outcomes = replay(log)
    assert replayed.digest() == sm.digest()
    assert replayed_outcomes == outcomes

    # Restoring at any point and applying the rest of the log reaches the same state.
    cut = data.draw(st.integers(0, len(log)), label="cut")
    prefix, _ = replay(log[:cut])
    resumed = StateMachine(State.restore(prefix.snapshot()))
    assert [resumed.apply_bytes(b) for b in log[cut:]] == outcomes[cut:]
    assert resumed.digest() == sm.digest()


def test_seeded_logs_replay_to_the_same_digest() -> None:
    for seed in range(5):
        log = generate_log(seed, 300)
        a, outs_a = replay(log)
        b, outs_b = replay(log)
        assert a.digest() == b.digest()
        assert outs_a == outs_b
        assert sum(o.result is Result.APPLIED for o in outs_a) > 50, "the log should mostly do things"


# -- the checker itself notices what it is meant to ------------------------------------------


def _scenario() -> StateMachine:
    """Waits of every kind, holders, a full pool, a declared satisfier, deadlines and sessions."""
    sm = StateMachine()
    c = RandomChooser(0)

    def do(cls: Any, **known: Any) -> None:
        cmd = make_command(c, sm.state, cls, **known)
        env = Envelope(actor="operator:root", at_ms=sm.state.now_ms + 1, request_id=None, command=cmd)
        out = sm.apply(env)
        assert out.result is Result.APPLIED, (cmd, out)

    for agent in ("a1", "a2"):
        do(JoinSession, agent_id=agent, lease_ms=10_000)
    do(CreateTarget, target_id="artifact:spec", slots=1)
    do(CreateTarget, target_id="resource:browser", slots=1)
    do(CreateTarget, target_id="pool:workers", slots=2)
    do(CreateExecution, execution_id="exec:e1", run_id="r1", agent_id="a1")
    do(CreateExecution, execution_id="exec:e2", run_id="r2", agent_id="a2")
    do(CreateExecution, execution_id="exec:e3", run_id="r1", parent_id="exec:e1", agent_id="a1")
    for e in ("exec:e1", "exec:e2", "exec:e3"):
        do(StartExecution, execution_id=e, generation=1)
    do(Acquire, target_id="resource:browser", execution_id="exec:e2", generation=1)
    do(Acquire, target_id="pool:workers", execution_id="exec:e1", generation=1)
    do(Acquire, target_id="pool:workers", execution_id="exec:e3", generation=1)
    do(DeclareSatisfier, target_id="artifact:spec", target_generation=1, satisfier_id="exec:e2", satisfier_generation=1)
    do(CreateExecution, execution_id="exec:e4", run_id="r2", parent_id="exec:e2", agent_id="a2")
    do(StartExecution, execution_id="exec:e4", generation=1)
    do(CreateTarget, target_id="reservation:gpu", slots=1)
    do(Acquire, target_id="reservation:gpu", execution_id="exec:e4", generation=1)

    def wait(waiter: str, target: str, tg: int, deadline_ms: int | None = None) -> None:
        do(
            RegisterWait,
            waiter_id=waiter,
            waiter_generation=1,
            target_id=target,
            target_generation=tg,
            reason="r",
            deadline_ms=deadline_ms,
            edge_version=1,
        )

    wait("exec:e1", "resource:browser", 1, deadline_ms=sm.state.now_ms + 1000)
    wait("exec:e1", "artifact:spec", 1)
    wait("exec:e3", "exec:e2", 1)
    wait("exec:e2", "pool:workers", 0)
    assert invariants.check(sm.state) == []
    return sm


def _edge(st_: State, waiter: str, target: str) -> WaitEdge:
    return st_.waits_by_waiter[waiter][target]


CORRUPTIONS: dict[str, tuple[Callable[[State], object], str]] = {
    # name: (how to break the scenario's state, a fragment of the violation check() must report)
    "edge missing from waits_by_target": (
        lambda s: s.waits_by_target.pop("exec:e2"),
        "missing from waits_by_target",
    ),
    "single waiter kept in a map": (
        lambda s: s.waits_by_target.update({"exec:e2": {"exec:e3": _edge(s, "exec:e3", "exec:e2")}}),
        "a single one is kept as the edge",
    ),
    "edge_count off": (lambda s: setattr(s, "edge_count", s.edge_count + 1), "edge_count"),
    "waiter terminal": (lambda s: setattr(s.executions["exec:e3"], "status", ExecStatus.COMPLETED), "attempt is over"),
    "waiter at another generation": (lambda s: setattr(s.executions["exec:e3"], "generation", 2), "registered at g1"),
    "edge above the high-water mark": (lambda s: s.executions["exec:e1"].edge_hwm.clear(), "high-water"),
    "exec target at another generation": (
        lambda s: setattr(_edge(s, "exec:e3", "exec:e2"), "target_generation", 0),
        "waits for g0",
    ),
    "artifact wait already satisfied": (lambda s: setattr(s.targets["artifact:spec"], "version", 1), "already at"),
    "resource wait on a free resource": (lambda s: s.targets["resource:browser"].holders.clear(), "target is free"),
    "pool wait with a free slot": (lambda s: setattr(s.targets["pool:workers"], "slots", 3), "free slot"),
    "holder does not exist": (
        lambda s: s.targets["resource:browser"].holders.update({"exec:ghost": 1}),
        "holder exec:ghost does not exist",
    ),
    "too many holders": (lambda s: s.targets["resource:browser"].holders.update({"exec:e1": 1}), "holders for 1 slots"),
    "satisfies index stale": (lambda s: s.satisfies["exec:e2"].add("artifact:other"), "satisfies[exec:e2]"),
    "satisfier at another generation": (
        lambda s: setattr(s.targets["artifact:spec"], "satisfier_generation", 7),
        "satisfier exec:e2@g7",
    ),
    "satisfier terminal": (
        lambda s: setattr(s.executions["exec:e2"], "status", ExecStatus.FAILED),
        "satisfier exec:e2 is",
    ),
    "terminal execution still holds": (
        lambda s: setattr(s.executions["exec:e4"], "status", ExecStatus.CANCELLED),
        "still holds or satisfies",
    ),
    "WAITING without waits": (lambda s: setattr(s.executions["exec:e4"], "status", ExecStatus.WAITING), "no open wait"),
    "deadline missing from the heap": (lambda s: s.deadlines.clear(), "deadline heap"),
    "session with incarnation 0": (lambda s: setattr(s.sessions["a1"], "incarnation", 0), "incarnation 0"),
    "count of ACTIVE sessions off": (
        lambda s: setattr(s.sessions["a1"], "status", SessionStatus.LEFT),
        "the count of ACTIVE sessions is 2; recounted, 1",
    ),
    "run root broken": (lambda s: setattr(s.runs["r1"], "root_id", "exec:e3"), "root"),
    "agent's open executions off": (
        lambda s: s.open_executions_by_agent.update(a1=5),
        "open_executions_by_agent[a1] is 5; a recount gives 2",
    ),
    "stale waiter left in a grant queue": (
        lambda s: s.queues["resource:browser"].append(QueueEntry("exec:e3", 0)),
        "exec:e3 is in the grant queue of resource:browser but has no open wait on it",
    ),
    "queued wait missing from its grant queue": (
        lambda s: s.queues.pop("pool:workers"),
        "wait exec:e2>pool:workers is open but not in the grant queue of pool:workers",
    ),
    "waiter queued twice": (
        lambda s: s.queues["resource:browser"].append(QueueEntry("exec:e1", 0)),
        "lists a waiter twice",
    ),
    "grant queue on an artifact": (
        lambda s: s.queues.update({"artifact:spec": [QueueEntry("exec:e1", 0)]}),
        "artifact:spec has a grant queue but is not a resource or pool",
    ),
    "agent's open edges off": (
        lambda s: s.open_edges_by_agent.pop("a1"),
        "open_edges_by_agent[a1] is None; a recount gives 3",
    ),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_invariant_checker_notices_corruption(name: str) -> None:
    st_ = State.restore(_scenario().snapshot())
    assert invariants.check(st_) == []
    corrupt, expected = CORRUPTIONS[name]
    corrupt(st_)
    problems = invariants.check(st_)
    assert any(expected in p for p in problems), (name, problems)
