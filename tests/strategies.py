"""Generators of commands for the property tests of the core, valid-looking and invalid alike.

One builder, :func:`build_envelope`, makes the next envelope for a given state from a
:class:`Chooser`. Two choosers drive it: hypothesis draws (:func:`envelopes`, which shrinks) and a
seeded ``random.Random`` (:func:`generate_log`, for a fixed log the hash-seed test replays in other
processes). Randomness lives here, in the tests, never in the core.

The universe is small on purpose so that collisions really happen: 4 agents, 5 executions, 3 runs,
two artifacts, an approval, a reservation, two exclusive resources, one pool with 2 slots, and the
outside satisfiers ``human:alice`` and ``external:ci-api``. Generations, versions and edge versions
are drawn around the current value in the state (stale, current, future), request ids repeat, and
logical time mostly moves forward, sometimes backwards, sometimes far ahead.

The codec strategies (:func:`any_command`, :func:`any_envelope`, :func:`any_outcome`, ...) cover
every field type over its whole range, and the mutation strategies (:func:`mutated_bytes`,
:func:`mutated_plain`) damage valid encodings.
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import MISSING
from dataclasses import fields as dc_fields
from enum import StrEnum
from functools import cache
from types import NoneType, UnionType
from typing import Any, Protocol, TypeVar, get_args, get_origin

import msgpack
from hypothesis import strategies as st

from waitgraph.statemachine.codec import MAX_STR_LEN, encode_envelope, field_types, pack
from waitgraph.statemachine.commands import (
    COMMANDS,
    Acquire,
    CloseWait,
    Command,
    CompleteExecution,
    CreateExecution,
    CreateTarget,
    DecideApproval,
    DeclareSatisfier,
    Envelope,
    ExpireSession,
    FailExecution,
    Heartbeat,
    JoinSession,
    LeaveSession,
    ProduceArtifact,
    RecordCost,
    RecordSideEffect,
    RegisterWait,
    Release,
    ResumeExecution,
    RetryExecution,
    SetApprover,
    StartExecution,
    Tick,
    TickV1,
)
from waitgraph.statemachine.effects import EFFECTS, Effect
from waitgraph.statemachine.enums import CancelMode, EffectOutcome
from waitgraph.statemachine.errors import Status
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.state import State

T = TypeVar("T")

PROPERTY_SCALE = max(1, int(os.environ.get("WAITGRAPH_PROPERTY_SCALE", "1")))


def examples(n: int) -> int:
    """``n`` examples, times ``WAITGRAPH_PROPERTY_SCALE`` (1 in CI; raise it for a long hunt)."""
    return n * PROPERTY_SCALE


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# -- the universe ------------------------------------------------------------------------------

AGENTS = ("a1", "a2", "a3", "a4")
EXECS = tuple(f"exec:e{i}" for i in range(1, 6))
RUNS = ("r1", "r2", "r3")
ARTIFACTS = ("artifact:spec", "artifact:report")
APPROVALS = ("approval:merge",)
RESERVATIONS = ("reservation:gpu",)
RESOURCES = ("resource:browser", "resource:repo-lock")
POOLS = ("pool:workers",)
POOL_SLOTS = 2
DECLARED = ARTIFACTS + APPROVALS
HELD = RESERVATIONS + RESOURCES + POOLS
CREATED = DECLARED + HELD
OUTSIDE = ("human:alice", "external:ci-api")
OPERATOR = "operator:root"
NODE = "node:n1"
BAD_IDS = ("the security agent", "exec:", "exec:bad id", "thing:x", "", ":x", "exec:" + "x" * 200, "exec:é")
BAD_NAMES = ("", "bad name", "x" * 129, "-lead", "é")
BAD_ACTORS = ("bogus", "agent:", "user:bob", "", "agent:" + "y" * 130, "agent:a 1")
REASONS = ("needs the review", "lock", "x", "ré✓ unicode")
BAD_REASONS = ("", "r" * 300)
EFFECT_IDS = ("fx-1", "fx-2", "fx-3")
SHARED_REQUEST_IDS = ("rq-1", "rq-2", "rq-3", "rq-4")
BAD_REQUEST_IDS = ("", "q" * 129)


class Chooser(Protocol):
    """Where the builder's choices come from; ``chance`` is in per mille and shrinks to False."""

    def pick(self, options: Sequence[T]) -> T: ...

    def integer(self, lo: int, hi: int) -> int: ...

    def chance(self, per_mille: int) -> bool: ...


class DrawChooser:
    """Choices drawn by hypothesis (so failing sequences shrink)."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self._draw = draw

    def pick(self, options: Sequence[T]) -> T:
        value: T = self._draw(st.sampled_from(options))
        return value

    def integer(self, lo: int, hi: int) -> int:
        value: int = self._draw(st.integers(lo, hi))
        return value

    def chance(self, per_mille: int) -> bool:
        value: int = self._draw(st.integers(0, 999))
        return value >= 1000 - per_mille


class RandomChooser:
    """Choices from a seeded ``random.Random``: the same seed gives the same log."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def pick(self, options: Sequence[T]) -> T:
        return options[self._rng.randrange(len(options))]

    def integer(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)

    def chance(self, per_mille: int) -> bool:
        return self._rng.randrange(1000) >= 1000 - per_mille


# -- pieces ------------------------------------------------------------------------------------


class _Gen:
    """The chooser for one envelope, either *sane* (every field well formed and near the current
    state, so the command often applies) or *wild* (deliberately bad fields, stale and future
    generations); the mix keeps both the happy paths and the rejections busy."""

    def __init__(self, c: Chooser, sane: bool) -> None:
        self.c, self.sane = c, sane

    def pick(self, options: Sequence[T]) -> T:
        return self.c.pick(options)

    def integer(self, lo: int, hi: int) -> int:
        return self.c.integer(lo, hi)

    def chance(self, per_mille: int) -> bool:
        return self.c.chance(per_mille)

    def bad(self, per_mille: int) -> bool:
        """Whether to make a field invalid: never when sane, twice as often as asked when wild."""
        return not self.sane and self.c.chance(min(1000, 2 * per_mille))

    def drift(self, offsets: Sequence[int]) -> int:
        """An offset from the current value: the first (the valid one) when sane, any when wild."""
        return offsets[0] if self.sane else self.c.pick(offsets)


def _exec_id(c: _Gen, st_: State, existing_per_mille: int = 750) -> str:
    if c.bad(25):
        return c.pick(BAD_IDS)
    if st_.executions and c.chance(existing_per_mille):
        return c.pick(sorted(st_.executions))
    return c.pick(EXECS)


def _live_exec_id(c: _Gen, st_: State) -> str:
    """Mostly an execution that can still act (PENDING, RUNNING, WAITING)."""
    live = sorted(e for e, ex in st_.executions.items() if ex.status.value in ("PENDING", "RUNNING", "WAITING"))
    return c.pick(live) if live and c.chance(750) else _exec_id(c, st_)


def _generation(c: _Gen, st_: State, exec_id: str) -> int:
    ex = st_.executions.get(exec_id)
    current = ex.generation if ex is not None else 1
    if c.bad(15):
        return c.pick((0, -1, INT64_MAX))
    return current + c.drift((0, 0, 0, 0, 0, 0, 0, -1, 1, 2))


def _owner_actor(st_: State, exec_id: str) -> str | None:
    ex = st_.executions.get(exec_id)
    return f"agent:{ex.agent_id}" if ex is not None else None


def _agent(c: _Gen) -> str:
    return c.pick(BAD_NAMES) if c.bad(20) else c.pick(AGENTS)


def _reason(c: _Gen) -> str:
    return c.pick(BAD_REASONS) if c.bad(25) else c.pick(REASONS)


def _target_id(c: _Gen, main: Sequence[str]) -> str:
    roll = c.integer(0, 99)
    if roll < 90 or c.sane:
        return c.pick(main)
    if roll < 95:
        return c.pick(CREATED + OUTSIDE + EXECS)
    return c.pick(BAD_IDS)


def _version_near(c: _Gen, current: int) -> int:
    return current + c.drift((1, 1, 1, 1, 1, 1, 1, 2, 0, -1))


def _at_ms(c: _Gen, st_: State) -> int:
    roll = c.integer(0, 999)
    now = st_.now_ms
    if roll < 800:
        at = now + c.integer(0, 25)
    elif roll < 900:
        at = now - c.integer(1, 60)
    elif roll < 999:
        at = now + c.integer(100, 1500)
    elif c.sane:
        at = now
    else:
        at = INT64_MAX - c.integer(0, 1000)
    return min(at, INT64_MAX)


def _request_id(c: _Gen) -> str | None:
    roll = c.integer(0, 99)
    if roll < 50:
        return None
    if roll < 89:
        return f"q{c.integer(0, 999_999)}"
    if roll < 97 or c.sane:
        return c.pick(SHARED_REQUEST_IDS)
    return c.pick(BAD_REQUEST_IDS)


def _actor(c: _Gen, preferred: str | None) -> str:
    if c.bad(10):
        return c.pick(BAD_ACTORS)
    roll = c.integer(0, 9)
    if preferred is not None and (roll < 6 or (c.sane and roll != 7)):
        return preferred
    if roll == 7:
        return OPERATOR
    if roll == 8:
        return NODE
    return f"agent:{c.pick(AGENTS)}"


def _run_of(st_: State, known: dict[str, Any]) -> str | None:
    for name in ("execution_id", "waiter_id", "parent_id"):
        ex = st_.executions.get(known.get(name) or "")
        if ex is not None:
            return ex.run_id
    run_id = known.get("run_id")
    return run_id if isinstance(run_id, str) else None


def _observed(c: _Gen, st_: State, name: str, known: dict[str, Any]) -> int | None:
    """What a well-behaved caller would present in an ``observed_*`` field, or None if unknown."""
    if name == "observed_cancel_generation":
        run = st_.runs.get(_run_of(st_, known) or "")
        return (run.cancel_generation if run is not None else 0) + c.drift((0, 0, 0, -1, 1))
    if name == "observed_epoch":
        epoch = getattr(st_, "epoch", None)
        return (epoch if isinstance(epoch, int) else 0) + c.drift((0, 0, 0, -1, 1))
    return None


NOT_GENERATED = frozenset({"trace_context"})
"""Fields the generator leaves at their default: the logs it made before they existed stay the same
logs (tests/test_tracing_state.py compares their digests with those of the release before). A
traced log sets them afterwards (:func:`with_trace_contexts` there)."""


def _make(c: _Gen, st_: State, cls: Any, **known: Any) -> Any:
    """``cls(**known)`` with every other field filled: ``observed_*`` fields as a caller that kept
    up would fill them, other required fields by type, optional ones left at their default (or,
    now and then when wild, set by type). Commands grow fields; the builders keep working."""
    hints = field_types(cls)
    for f in dc_fields(cls):
        if f.name in known or f.name in NOT_GENERATED:
            continue
        observed = _observed(c, st_, f.name, known)
        required = f.default is MISSING and f.default_factory is MISSING
        if observed is not None:
            known[f.name] = observed
        elif required or c.bad(30):
            known[f.name] = _generic_value(c, hints[f.name])
    return cls(**known)


# -- one builder per command kind; each returns (command, preferred actor) -----------------------

Built = tuple[Command, str | None]


def _join(c: _Gen, st_: State) -> Built:
    agent = _agent(c)
    lease = c.pick((0, -5, 86_400_001)) if c.bad(20) else c.integer(100, 3000)
    return _make(c, st_, JoinSession, agent_id=agent, lease_ms=lease), f"agent:{agent}"


def _heartbeat(c: _Gen, st_: State) -> Built:
    agent = _agent(c)
    return _make(c, st_, Heartbeat, agent_id=agent), f"agent:{agent}"


def _leave(c: _Gen, st_: State) -> Built:
    agent = _agent(c)
    return _make(c, st_, LeaveSession, agent_id=agent), f"agent:{agent}"


def _create_execution(c: _Gen, st_: State) -> Built:
    fresh = [e for e in EXECS if e not in st_.executions]
    exec_id = c.pick(fresh) if fresh and c.chance(800) else _exec_id(c, st_, 500)
    parent_id = None
    run_id = c.pick(BAD_NAMES) if c.bad(15) else c.pick(RUNS)
    if st_.executions and c.chance(500):
        parent_id = c.pick(sorted(st_.executions))
        if c.sane or c.chance(850):
            run_id = st_.executions[parent_id].run_id
    agent_id = _agent(c) if c.chance(400) else None
    preferred = _owner_actor(st_, parent_id) if parent_id else None
    if preferred is None or c.chance(300):
        preferred = f"agent:{agent_id or c.pick(AGENTS)}"
    cmd = _make(
        c,
        st_,
        CreateExecution,
        execution_id=exec_id,
        run_id=run_id,
        parent_id=parent_id,
        agent_id=agent_id,
        priority=c.integer(-2, 5),
        checkpoint=c.chance(500),
        unique_evidence=c.chance(200),
    )
    return cmd, preferred


def _lifecycle(cls: Any) -> Callable[[_Gen, State], Built]:
    def build(c: _Gen, st_: State) -> Built:
        exec_id = _live_exec_id(c, st_)
        generation = _generation(c, st_, exec_id)
        extra = {"reason": _reason(c)} if cls is FailExecution else {}
        return _make(c, st_, cls, execution_id=exec_id, generation=generation, **extra), _owner_actor(st_, exec_id)

    return build


def _create_target(c: _Gen, st_: State) -> Built:
    target_id = _target_id(c, CREATED)
    slots = POOL_SLOTS if target_id.startswith("pool:") else 1
    if c.bad(40):
        slots = c.pick((0, -1, 3))
    return _make(c, st_, CreateTarget, target_id=target_id, slots=slots), None


def _declare(c: _Gen, st_: State) -> Built:
    target_id = _target_id(c, DECLARED)
    t = st_.targets.get(target_id)
    target_generation = _version_near(c, t.version if t else 0)
    if c.chance(650):
        satisfier_id = _exec_id(c, st_)
        satisfier_generation = _generation(c, st_, satisfier_id)
        preferred = _owner_actor(st_, satisfier_id)
    else:
        satisfier_id = c.pick(OUTSIDE)
        satisfier_generation = 1 if c.bad(40) else 0
        preferred = None
    cmd = _make(
        c,
        st_,
        DeclareSatisfier,
        target_id=target_id,
        target_generation=target_generation,
        satisfier_id=satisfier_id,
        satisfier_generation=satisfier_generation,
    )
    return cmd, preferred


def _holding(cls: Any) -> Callable[[_Gen, State], Built]:
    def build(c: _Gen, st_: State) -> Built:
        target_id = _target_id(c, HELD)
        t = st_.targets.get(target_id)
        if cls is Release and t is not None and t.holders and c.chance(700):
            exec_id = c.pick(sorted(t.holders))
        else:
            exec_id = _live_exec_id(c, st_)
        known: dict[str, Any] = {"target_id": target_id, "execution_id": exec_id}
        if cls is Acquire:
            # a lease TTL now and then (0: none, then not encoded), due within a few Ticks
            known["ttl_ms"] = c.pick((0, 0, 0, 50, 400))
        cmd = _make(c, st_, cls, generation=_generation(c, st_, exec_id), **known)
        return cmd, _owner_actor(st_, exec_id)

    return build


def _wait_target_generation(c: _Gen, st_: State, target_id: str) -> int:
    if target_id.startswith("exec:"):
        return _generation(c, st_, target_id)
    t = st_.targets.get(target_id)
    if target_id.startswith(("artifact:", "approval:")):
        return _version_near(c, t.version if t else 0)
    if target_id.startswith("pool:"):
        return 1 if c.bad(40) else 0
    return (t.version if t else 1) + c.drift((0, 0, 0, 0, 0, 1, -1))


def _register_wait(c: _Gen, st_: State) -> Built:
    waiter_id = _live_exec_id(c, st_)
    roll = c.integer(0, 99)
    if roll < 35:
        target_id = _exec_id(c, st_, 900)
    elif roll < 97 or c.sane:
        waitable = [
            t.target_id
            for t in (st_.targets[k] for k in sorted(st_.targets))
            if t.target_id in DECLARED or len(t.holders) >= t.slots
        ]
        target_id = c.pick(waitable) if waitable and c.chance(700) else c.pick(CREATED)
    else:
        target_id = c.pick(OUTSIDE + BAD_IDS)
    ex = st_.executions.get(waiter_id)
    hwm = ex.edge_hwm.get(target_id, 0) if ex is not None else 0
    edge_version = c.pick((0, INT64_MAX)) if c.bad(10) else _version_near(c, hwm)
    deadline_ms = None
    if c.chance(350):
        deadline_ms = st_.now_ms - c.integer(0, 5) if c.bad(50) else min(st_.now_ms + c.integer(1, 300), INT64_MAX)
    cmd = _make(
        c,
        st_,
        RegisterWait,
        waiter_id=waiter_id,
        waiter_generation=_generation(c, st_, waiter_id),
        target_id=target_id,
        target_generation=_wait_target_generation(c, st_, target_id),
        reason=(reason := _reason(c)),
        deadline_ms=deadline_ms,
        cancel_mode=c.pick(tuple(CancelMode)),
        edge_version=edge_version,
        # a quarter of the waits ask to be refused a deadlock (a rejection must change nothing),
        # chosen by a value already drawn, so the choices of every other command stay the same
        refuse_deadlock=reason == "lock",
        # a grant-queue priority, also from a drawn value (0 for most: then not encoded)
        priority=1 if reason == "x" else -1 if reason == REASONS[3] else 0,
        # and the TTL of a grant by hand-off, from the same draw
        lease_ttl_ms=300 if reason == REASONS[0] else 0,
    )
    return cmd, _owner_actor(st_, waiter_id)


def _close_wait(c: _Gen, st_: State) -> Built:
    open_waits = [(w, t) for w in sorted(st_.waits_by_waiter) for t in sorted(st_.waits_by_waiter[w])]
    if open_waits and c.chance(750):
        waiter_id, target_id = c.pick(open_waits)
        version = st_.waits_by_waiter[waiter_id][target_id].edge_version + c.drift((0, 0, 0, 0, -1, 1))
    else:
        waiter_id = _exec_id(c, st_)
        target_id = c.pick(BAD_IDS) if c.bad(50) else c.pick(CREATED + EXECS)
        ex = st_.executions.get(waiter_id)
        version = (ex.edge_hwm.get(target_id, 0) if ex else 0) + c.drift((0, 1, -1))
    cmd = _make(
        c,
        st_,
        CloseWait,
        waiter_id=waiter_id,
        waiter_generation=_generation(c, st_, waiter_id),
        target_id=target_id,
        edge_version=version,
        reason=_reason(c),
    )
    return cmd, _owner_actor(st_, waiter_id)


def _satisfier_actor(st_: State, target_id: str) -> str | None:
    t = st_.targets.get(target_id)
    if t is None or t.satisfier_id is None or not t.satisfier_id.startswith("exec:"):
        return None
    return _owner_actor(st_, t.satisfier_id)


def _produce(c: _Gen, st_: State) -> Built:
    artifact_id = _target_id(c, ARTIFACTS)
    t = st_.targets.get(artifact_id)
    version = _version_near(c, t.version if t else 0)
    cmd = _make(c, st_, ProduceArtifact, artifact_id=artifact_id, version=version)
    return cmd, _satisfier_actor(st_, artifact_id)


def _decide(c: _Gen, st_: State) -> Built:
    approval_id = _target_id(c, APPROVALS)
    t = st_.targets.get(approval_id)
    version = _version_near(c, t.version if t else 0)
    cmd = _make(c, st_, DecideApproval, approval_id=approval_id, version=version, approved=c.chance(700))
    return cmd, _satisfier_actor(st_, approval_id)


def _tick(c: _Gen, st_: State) -> Built:
    # Tick version 1 (an old log's: it also expires sessions by their replicated lease) now and then.
    return _make(c, st_, TickV1 if c.chance(250) else Tick), c.pick((OPERATOR, NODE))


def _expire_session(c: _Gen, st_: State) -> Built:
    """What the leader's lessor proposes (cluster/node/lessor.py): mostly a live session at its
    incarnation; sometimes a stale incarnation, an unknown agent, or an agent as the actor."""
    sessions = sorted(st_.sessions.items())
    if sessions and not c.bad(150):
        agent, s = c.pick(tuple(sessions))
        incarnation = s.incarnation if c.chance(800) else s.incarnation - 1
    else:
        agent, incarnation = _agent(c), c.integer(0, 3)
    actor = f"agent:{agent}" if c.bad(50) else c.pick((OPERATOR, NODE))
    return _make(c, st_, ExpireSession, agent_id=agent, incarnation=incarnation), actor


def _side_effect(c: _Gen, st_: State) -> Built:
    exec_id = _exec_id(c, st_)
    cmd = _make(
        c,
        st_,
        RecordSideEffect,
        execution_id=exec_id,
        generation=_generation(c, st_, exec_id),
        effect_id=c.pick(("bad id!", "")) if c.bad(30) else c.pick(EFFECT_IDS),
        outcome=c.pick(tuple(EffectOutcome)),
        compensatable=c.chance(300),
    )
    return cmd, _owner_actor(st_, exec_id)


def _cost(c: _Gen, st_: State) -> Built:
    exec_id = _exec_id(c, st_)
    cost = -1 if c.bad(30) else c.integer(0, 50)
    cmd = _make(c, st_, RecordCost, execution_id=exec_id, generation=_generation(c, st_, exec_id), cost=cost)
    return cmd, _owner_actor(st_, exec_id)


def _set_approver(c: _Gen, st_: State) -> Built:
    runs = sorted(st_.runs)
    run_id = c.pick(runs) if runs and c.chance(600) else None
    approver = None if c.chance(150) else c.pick(("human:alice", *EXECS, *OUTSIDE))
    return _make(c, st_, SetApprover, approver_id=approver, run_id=run_id), OPERATOR


_BUILDERS: dict[str, tuple[int, Callable[[_Gen, State], Built]]] = {
    "JoinSession": (6, _join),
    "Heartbeat": (3, _heartbeat),
    "LeaveSession": (1, _leave),
    "ExpireSession": (1, _expire_session),
    "CreateExecution": (6, _create_execution),
    "StartExecution": (6, _lifecycle(StartExecution)),
    "ResumeExecution": (3, _lifecycle(ResumeExecution)),
    "CompleteExecution": (2, _lifecycle(CompleteExecution)),
    "FailExecution": (2, _lifecycle(FailExecution)),
    "RetryExecution": (3, _lifecycle(RetryExecution)),
    "CreateTarget": (5, _create_target),
    "DeclareSatisfier": (5, _declare),
    "Acquire": (8, _holding(Acquire)),
    "Release": (4, _holding(Release)),
    "RegisterWait": (14, _register_wait),
    "CloseWait": (5, _close_wait),
    "ProduceArtifact": (4, _produce),
    "DecideApproval": (3, _decide),
    "Tick": (4, _tick),
    "RecordSideEffect": (2, _side_effect),
    "RecordCost": (2, _cost),
    "SetApprover": (0, _set_approver),
    # Weight 0: kept out of the random log, so the seeded workloads (and the planted-bug tests
    # that rely on their sequences) are those of before; test_hashseed.reassign_log covers it.
}


def _generic_value(c: _Gen, tp: Any) -> Any:
    if isinstance(tp, UnionType):
        (inner,) = [a for a in get_args(tp) if a is not NoneType]
        return None if c.chance(300) else _generic_value(c, inner)
    if get_origin(tp) is tuple:
        return tuple(_generic_value(c, get_args(tp)[0]) for _ in range(c.integer(0, 3)))
    if tp is str:
        return c.pick(UNIVERSE_STRINGS)
    if tp is bool:
        return c.chance(500)
    if tp is int:
        return c.integer(-1, 3)
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        return c.pick(tuple(tp))
    raise TypeError(f"no generic value for {tp}; give the command a builder in tests/strategies.py")


def _by_name(c: _Gen, st_: State, name: str, tp: Any, exec_id: str | None) -> Any:
    """A state-aware value for a field recognised by its name, or ``_UNKNOWN``."""
    if name == "generation" and exec_id is not None:
        return _generation(c, st_, exec_id)
    if name == "run_id":
        runs = sorted(st_.runs)
        return c.pick(BAD_NAMES) if c.bad(20) else c.pick(runs) if runs and c.chance(850) else c.pick(RUNS)
    if name == "reason" and tp is str:
        return _reason(c)
    if name == "effect_id":
        return c.pick(EFFECT_IDS)
    if name == "cancel_generation" and exec_id is not None:
        request = getattr(getattr(st_, "cancel", None), "requests", {}).get(exec_id)
        if request is not None:
            return int(request.cancel_generation) + c.drift((0, 0, 0, -1, 1))
        ex = st_.executions.get(exec_id)
        run = st_.runs.get(ex.run_id) if ex is not None else None
        return run.cancel_generation if run is not None else 0
    if name.endswith("_ms") and tp is int:
        return c.pick((0, -1)) if c.bad(20) else c.integer(50, 3000)
    return _UNKNOWN


_UNKNOWN = object()


def _generic(cls: type) -> Callable[[_Gen, State], Built]:
    """Commands without a builder of their own (added after these were written): fields the state
    knows about (an execution and its generation, a run, a cancel generation, ``observed_*``) are
    filled from it by name, the rest from the universe by type."""
    hints = field_types(cls)
    names = [f.name for f in dc_fields(cls)]
    exec_field = next((n for n in ("execution_id", "waiter_id") if n in names), None)

    def build(c: _Gen, st_: State) -> Built:
        known: dict[str, Any] = {}
        exec_id = None
        if exec_field is not None:
            exec_id = known[exec_field] = _live_exec_id(c, st_)
        for name in names:
            if name not in known:
                value = _by_name(c, st_, name, hints[name], exec_id)
                if value is not _UNKNOWN:
                    known[name] = value
        preferred = _owner_actor(st_, exec_id) if exec_id is not None else None
        run = st_.runs.get(known.get("run_id") or "")
        if preferred is None and run is not None:
            preferred = _owner_actor(st_, run.root_id)
        return _make(c, st_, cls, **known), preferred

    return build


for _cls in COMMANDS:
    _BUILDERS.setdefault(_cls.KIND, (1, _generic(_cls)))
_WEIGHTED_KINDS = tuple(kind for kind, (weight, _) in _BUILDERS.items() for _ in range(weight))


def build_envelope(c: Chooser, st_: State) -> Envelope:
    """The next envelope to send to a machine whose state is ``st_`` (which is only read)."""
    g = _Gen(c, sane=not c.chance(350))
    kind = g.pick(_WEIGHTED_KINDS)
    cmd, preferred = _BUILDERS[kind][1](g, st_)
    return Envelope(actor=_actor(g, preferred), at_ms=_at_ms(g, st_), request_id=_request_id(g), command=cmd)


def bootstrap_envelopes(c: Chooser, st_: State) -> list[Envelope]:
    """Sessions for most agents and most targets, so that short runs reach interesting states."""
    g = _Gen(c, sane=True)
    out = []
    for agent in AGENTS[:3]:
        if c.chance(900):
            cmd: Command = _make(g, st_, JoinSession, agent_id=agent, lease_ms=c.integer(200, 2000))
            out.append(Envelope(actor=f"agent:{agent}", at_ms=st_.now_ms, request_id=None, command=cmd))
    for target_id in CREATED:
        if c.chance(800):
            slots = POOL_SLOTS if target_id.startswith("pool:") else 1
            cmd = _make(g, st_, CreateTarget, target_id=target_id, slots=slots)
            out.append(Envelope(actor=OPERATOR, at_ms=st_.now_ms, request_id=None, command=cmd))
    runs: dict[str, str] = {}
    for exec_id in EXECS[: c.integer(0, len(EXECS))]:
        parent_id = c.pick(sorted(runs)) if runs and (len(runs) >= len(RUNS) or c.chance(500)) else None
        run_id = runs[parent_id] if parent_id else RUNS[len(runs)]
        runs[exec_id] = run_id
        owner = c.pick(AGENTS[:3])
        cmd = _make(g, st_, CreateExecution, execution_id=exec_id, run_id=run_id, parent_id=parent_id, agent_id=owner)
        out.append(Envelope(actor=OPERATOR, at_ms=st_.now_ms, request_id=None, command=cmd))
    return out


def make_command(c: Chooser, st_: State, cls: Any, **known: Any) -> Any:
    """A well-formed ``cls`` command with the ``known`` fields; the rest as a caller that kept up
    with the state would fill them."""
    return _make(_Gen(c, sane=True), st_, cls, **known)


@st.composite
def envelopes(draw: Callable[[st.SearchStrategy[Any]], Any], state: State) -> Envelope:
    """Hypothesis strategy: one envelope for a machine in ``state``."""
    return build_envelope(DrawChooser(draw), state)


def generate_log(seed: int, steps: int) -> list[bytes]:
    """A deterministic command log: ``steps`` encoded envelopes built against a live machine."""
    c = RandomChooser(seed)
    sm = StateMachine()
    log = []
    for env in bootstrap_envelopes(c, sm.state):
        data = encode_envelope(env)
        sm.apply_bytes(data)
        log.append(data)
    while len(log) < steps:
        env = build_envelope(c, sm.state)
        if c.chance(60) and sm.state.idempotency:
            # Resend an earlier request verbatim (a client retry after a lost reply).
            (actor, request_id), _ = c.pick(list(sm.state.idempotency.items()))
            data = c.pick([d for d in log if _key_of(d) == (actor, request_id)] or [encode_envelope(env)])
        else:
            data = encode_envelope(env)
        sm.apply_bytes(data)
        log.append(data)
    return log


def _key_of(data: bytes) -> tuple[str, str | None]:
    raw = msgpack.unpackb(data, raw=False)
    return raw["actor"], raw["request_id"]


# -- codec strategies: every field type over its whole range --------------------------------------

_TEXT_ALPHABET = st.characters(exclude_categories=("Cs",))
UNIVERSE_STRINGS = AGENTS + EXECS + RUNS + CREATED + OUTSIDE + BAD_IDS + REASONS + EFFECT_IDS


def any_text(max_size: int = 40) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(UNIVERSE_STRINGS),
        st.text(_TEXT_ALPHABET, max_size=max_size),
        st.just("x" * MAX_STR_LEN),
    )


def any_int64() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(-3, 50), st.integers(INT64_MIN, INT64_MAX), st.sampled_from((INT64_MIN, INT64_MAX)))


def _strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    if isinstance(tp, UnionType):
        (inner,) = [a for a in get_args(tp) if a is not NoneType]
        return st.none() | _strategy_for(inner)
    if get_origin(tp) is tuple:
        return st.lists(_strategy_for(get_args(tp)[0]), max_size=4).map(tuple)
    if tp is str:
        return any_text()
    if tp is bool:
        return st.booleans()
    if tp is int:
        return any_int64()
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        return st.sampled_from(tuple(tp))
    raise TypeError(f"no strategy for {tp}")


def _builds(cls: type) -> st.SearchStrategy[Any]:
    hints = field_types(cls)
    return st.builds(cls, **{f.name: _strategy_for(hints[f.name]) for f in dc_fields(cls)})


@cache
def any_command() -> st.SearchStrategy[Command]:
    return st.one_of([_builds(cls) for cls in COMMANDS])


@cache
def any_effect() -> st.SearchStrategy[Effect]:
    return st.one_of([_builds(cls) for cls in EFFECTS])


@cache
def any_envelope() -> st.SearchStrategy[Envelope]:
    return st.builds(
        Envelope,
        actor=st.one_of(st.sampled_from((OPERATOR, NODE, *(f"agent:{a}" for a in AGENTS))), any_text()),
        at_ms=any_int64(),
        request_id=st.none() | any_text(),
        command=any_command(),
    )


@cache
def any_outcome() -> st.SearchStrategy[Outcome]:
    """Any outcome the codec must carry."""
    field_value = st.one_of(st.none(), st.booleans(), any_int64(), any_text())
    return st.builds(
        Outcome,
        result=st.sampled_from(tuple(Result)),
        effects=st.lists(any_effect(), max_size=4).map(tuple),
        code=any_text(),
        status=st.none() | st.sampled_from(tuple(Status)),
        message=any_text(),
        fields=st.dictionaries(any_text(), field_value, max_size=4),
        duplicate=st.booleans(),
    )


# -- damage ----------------------------------------------------------------------------------------

_UNKNOWN_KINDS = ("", "Nope", "joinsession", "Envelope", "JoinSession ", "k" * 70_000)
HUGE_INTS = (2**63, 2**64 - 1, INT64_MIN, INT64_MAX)


@cache
def junk() -> st.SearchStrategy[Any]:
    """Any msgpack-encodable value of the wrong shape: wrong types, huge ints, oversize strings."""
    scalar = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(INT64_MIN, 2**64 - 1),
        st.sampled_from(HUGE_INTS),
        st.floats(),
        st.text(_TEXT_ALPHABET, max_size=8),
        st.integers(MAX_STR_LEN + 1, 70_000).map(lambda n: "s" * n),
        st.binary(max_size=8),
    )
    return st.recursive(scalar, _nest, max_leaves=6)


def _nest(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a decoded msgpack value, the root included, in a deterministic order."""
    out = [path]
    if isinstance(obj, dict):
        for k in sorted(obj, key=repr):
            out.extend(_paths(obj[k], (*path, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(_paths(v, (*path, i)))
    return out


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def _putter(obj: Any, path: tuple[Any, ...]) -> Callable[[Any], Any]:
    """A function that stores a value at ``path`` in ``obj`` and returns the (new) root."""

    def put(value: Any) -> Any:
        if not path:
            return value
        _get(obj, path[:-1])[path[-1]] = value
        return obj

    return put


@st.composite
def mutated_plain(draw: Callable[[st.SearchStrategy[Any]], Any], plain: Any, kinds: Sequence[str] = ()) -> Any:
    """``plain`` (a decoded message) with one to three structural mutations."""
    obj = copy.deepcopy(plain)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(obj)))
        op = draw(
            st.sampled_from(
                ("replace", "replace", "delete", "add_key", "kind", "version", "swap_container", "huge", "oversize")
            )
        )
        node = _get(obj, path)
        parent = _get(obj, path[:-1]) if path else None
        put = _putter(obj, path)
        if op == "replace":
            obj = put(draw(junk()))
        elif op == "huge":
            obj = put(draw(st.sampled_from(HUGE_INTS)))
        elif op == "oversize":
            obj = put("o" * draw(st.integers(MAX_STR_LEN + 1, 3 * MAX_STR_LEN)))
        elif op == "delete" and path:
            del parent[path[-1]]
        elif op == "add_key" and isinstance(node, dict):
            node[draw(st.sampled_from(("extra", "kind", "v", "cmd", "zzz")))] = draw(junk())
        elif op == "kind" and isinstance(node, dict):
            node["kind"] = draw(st.sampled_from((*_UNKNOWN_KINDS, *kinds)) | junk())
        elif op == "version" and isinstance(node, dict):
            node["v"] = draw(st.sampled_from((0, 2, -1, "1", 1.0, True, None, 2**64 - 1)))
        elif op == "swap_container":
            if isinstance(node, dict):
                obj = put([[k, v] for k, v in node.items()])
            elif isinstance(node, list):
                obj = put({str(i): v for i, v in enumerate(node)})
            else:
                obj = put([node])
    return obj


def pack_plain(obj: Any) -> bytes:
    """Plain values as msgpack, exactly as the codec writes them (whatever their shape)."""
    return pack(obj)


@st.composite
def mutated_bytes(draw: Callable[[st.SearchStrategy[Any]], Any], data: bytes) -> bytes:
    """``data`` damaged at the byte level: flips, truncation, garbage, nesting, lying lengths."""
    op = draw(st.sampled_from(("flip", "flip", "truncate", "append", "insert", "overwrite", "nest", "length")))
    n = len(data)
    if op == "flip" and n:
        i = draw(st.integers(0, n - 1))
        return data[:i] + bytes([data[i] ^ (1 << draw(st.integers(0, 7)))]) + data[i + 1 :]
    if op == "truncate" and n:
        return data[: draw(st.integers(0, n - 1))]
    if op == "overwrite" and n:
        i = draw(st.integers(0, n - 1))
        return data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1 :]
    if op == "insert":
        i = draw(st.integers(0, n))
        return data[:i] + draw(st.binary(min_size=1, max_size=8)) + data[i:]
    if op == "nest":
        return b"\x91" * draw(st.integers(1, 3000)) + data
    if op == "length":
        return draw(st.sampled_from((b"\xdd\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff", b"\xdf\x7f\xff\xff\xff"))) + data
    return data + draw(st.binary(min_size=1, max_size=16))
