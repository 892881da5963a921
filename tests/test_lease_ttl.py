"""Lease TTLs in logical time (Acquire.ttl_ms, RegisterWait.lease_ttl_ms; issue #39; docs/queues.md).

Scenario checks of the rule: the TTL starts at the grant (an Acquire's or a hand-off's), ``Tick``
releases the holding once logical time reaches grant + TTL exactly as a Release would (reason
``ttl_expired``, handed to the next queued waiter), and only while the same holder@generation
still holds the same lease: an ended holding, a re-acquire, a new attempt or a later grant is
never released by an old TTL. Also: a quarantined holder keeps its lease, bad TTLs are refused
with nothing changed, a state without TTLs snapshots to the bytes it had before, and a snapshot
carries the TTLs.
"""

from __future__ import annotations

import msgspec
import pytest

from tests.test_queues import POOL, RES, sound, world
from tests.world import World
from waitgraph.statemachine.codec import command_to_plain, encode_command
from waitgraph.statemachine.commands import (
    MAX_LEASE_TTL_MS,
    Acquire,
    CancelRun,
    CompleteExecution,
    ConfigureCancellation,
    ReemitCancels,
    RegisterWait,
    Release,
    RetryExecution,
    StartExecution,
    Tick,
)
from waitgraph.statemachine.effects import Acquired, Released
from waitgraph.statemachine.enums import ExecStatus
from waitgraph.statemachine.lifecycle import TTL_EXPIRED
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Outcome, Result


def acquire(w: World, eid: str, tid: str, ttl_ms: int) -> Outcome:
    return w.do(w.owner(eid), Acquire(target_id=tid, execution_id=eid, generation=w.gen(eid), ttl_ms=ttl_ms))


def tick_at(w: World, at_ms: int) -> Outcome:
    assert at_ms >= w.t
    return w.ok("operator:op", Tick(), dt=at_ms - w.t)


def released(out: Outcome) -> list[tuple[str, int, str]]:
    return [(fx.execution_id, fx.lease, fx.reason) for fx in out.effects if isinstance(fx, Released)]


def test_tick_releases_at_grant_plus_ttl_and_hands_off_as_a_release_would() -> None:
    w = world("h", "a")
    out = acquire(w, "exec:h", RES, 5_000)
    granted_at = w.t
    assert out.result is Result.APPLIED
    w.wait("exec:a", RES)
    sound(w)
    assert released(tick_at(w, granted_at + 4_999)) == []
    out = tick_at(w, granted_at + 5_000)
    assert released(out) == [("exec:h", 1, TTL_EXPIRED)]
    assert [(fx.execution_id, fx.lease) for fx in out.effects if isinstance(fx, Acquired)] == [("exec:a", 2)]
    assert w.st.targets[RES].holders == {"exec:a": 1}
    assert w.st.executions["exec:a"].status is ExecStatus.RUNNING
    assert RES not in w.st.lease_ttls
    # the holder's late Release is a recorded no-op, not an error
    late = w.do("agent:h", Release(target_id=RES, execution_id="exec:h", generation=1))
    assert late.result is Result.NOOP and late.code == "not_held"
    assert w.st.counters["lease_ttl.expired"] == 1
    sound(w)


def test_a_stale_ttl_never_releases_a_re_acquired_lease() -> None:
    w = world("h")
    acquire(w, "exec:h", RES, 1_000)  # lease 1, expires at t0 + 1000
    t0 = w.t
    w.release("exec:h", RES)
    acquire(w, "exec:h", RES, 10_000)  # lease 2, its own TTL
    assert released(tick_at(w, t0 + 2_000)) == []
    assert w.st.targets[RES].holders == {"exec:h": 1}
    assert w.st.lease_ttls[RES]["exec:h"][2] == 2
    # and a re-acquire without a TTL is never released by the old one
    w.release("exec:h", RES)
    acquire(w, "exec:h", RES, 0)
    assert released(tick_at(w, t0 + 20_000)) == []
    assert w.st.targets[RES].holders == {"exec:h": 1} and w.st.lease_ttls == {}
    sound(w)


def test_a_new_attempt_is_not_released_by_its_old_attempts_ttl() -> None:
    w = world("h")
    acquire(w, "exec:h", RES, 1_000)
    t0 = w.t
    w.ok("agent:h", RetryExecution(execution_id="exec:h", generation=1))  # ends the attempt: released
    assert w.st.lease_ttls == {}
    w.ok("agent:h", StartExecution(execution_id="exec:h", generation=2, observed_cancel_generation=0))
    acquire(w, "exec:h", RES, 0)
    assert released(tick_at(w, t0 + 5_000)) == []
    assert w.st.targets[RES].holders == {"exec:h": 2}
    sound(w)


def test_a_hand_off_grant_carries_the_waits_lease_ttl_from_the_hand_off() -> None:
    w = world("h", "a")
    w.hold("exec:h", RES)
    w.wait("exec:a", RES, lease_ttl_ms=3_000)
    sound(w)
    w.release("exec:h", RES)
    handed_at = w.t
    assert w.st.lease_ttls[RES] == {"exec:a": (handed_at + 3_000, 1, 2)}
    assert released(tick_at(w, handed_at + 2_999)) == []
    assert released(tick_at(w, handed_at + 3_000)) == [("exec:a", 2, TTL_EXPIRED)]
    sound(w)


def test_each_pool_permit_has_its_own_ttl() -> None:
    w = world("a", "b", "c", slots=2, tid=POOL)
    acquire(w, "exec:a", POOL, 1_000)
    t0 = w.t
    acquire(w, "exec:b", POOL, 5_000)
    w.wait("exec:c", POOL)
    out = tick_at(w, t0 + 1_000)
    assert released(out) == [("exec:a", 2, TTL_EXPIRED)]
    assert w.st.targets[POOL].holders == {"exec:b": 1, "exec:c": 1}
    assert list(w.st.lease_ttls[POOL]) == ["exec:b"]
    sound(w)


def test_a_quarantined_holder_keeps_its_lease_past_its_ttl() -> None:
    w = world("h", "a")
    w.ok("operator:op", ConfigureCancellation(slo_ms=1_000, reemit_interval_ms=500))
    acquire(w, "exec:h", RES, 10_000)
    t0 = w.t
    w.ok("agent:h", CancelRun(run_id="run-h", observed_cancel_generation=0, reason="stop"))
    w.ok("operator:op", ReemitCancels(), dt=2_000)
    assert w.st.executions["exec:h"].status is ExecStatus.QUARANTINED
    assert released(tick_at(w, t0 + 10_000)) == []
    assert w.st.targets[RES].holders == {"exec:h": 1}
    assert w.st.counters["lease_ttl.kept_quarantined"] == 1
    sound(w)


def test_the_holding_ending_first_drops_its_ttl() -> None:
    w = world("h")
    acquire(w, "exec:h", RES, 1_000)
    w.ok("agent:h", CompleteExecution(execution_id="exec:h", generation=1, observed_cancel_generation=0))
    assert w.st.lease_ttls == {}
    assert released(tick_at(w, w.t + 2_000)) == []
    sound(w)


@pytest.mark.parametrize(("ttl_ms", "code"), [(-1, "negative"), (MAX_LEASE_TTL_MS + 1, "ttl_too_long")])
def test_a_bad_ttl_is_refused_and_changes_nothing(ttl_ms: int, code: str) -> None:
    w = world("h", "a")
    w.hold("exec:h", RES)
    before = w.st.snapshot()
    out = acquire(w, "exec:a", RES, ttl_ms)
    assert out.result is Result.REJECTED and out.code == code
    out = w.do(
        "agent:a",
        RegisterWait(
            waiter_id="exec:a", waiter_generation=1, target_id=RES, target_generation=1, reason="q", lease_ttl_ms=ttl_ms
        ),
    )
    assert out.result is Result.REJECTED and out.code == code
    after = msgspec.msgpack.decode(w.st.snapshot())
    expected = msgspec.msgpack.decode(before)
    for raw in (after, expected):
        raw.pop("now_ms"), raw.pop("counters")
    assert after == expected


def test_no_ttl_means_the_bytes_of_before() -> None:
    cmd = Acquire(target_id=RES, execution_id="exec:h", generation=1)
    assert "ttl_ms" not in command_to_plain(cmd)
    assert "ttl_ms" in command_to_plain(Acquire(target_id=RES, execution_id="exec:h", generation=1, ttl_ms=5))
    assert encode_command(cmd) == encode_command(Acquire(target_id=RES, execution_id="exec:h", generation=1, ttl_ms=0))
    w = world("h", "a")
    w.hold("exec:h", RES)
    w.wait("exec:a", RES)
    raw = msgspec.msgpack.decode(w.st.snapshot())
    assert "lease_ttls" not in raw
    assert all(len(entry) == 3 for _, entries in raw["queues"] for entry in entries)


def test_a_restored_replica_expires_the_same_leases() -> None:
    w = world("h", "a", "b")
    acquire(w, "exec:h", RES, 2_000)
    w.wait("exec:a", RES, lease_ttl_ms=1_000)
    w.wait("exec:b", RES)
    restored = StateMachine()
    restored.restore(w.st.snapshot())
    assert restored.state.lease_ttls == w.st.lease_ttls
    assert sorted(restored.state.ttl_expiry) == sorted(w.st.ttl_expiry)
    twin = World()
    twin.m, twin.t = restored, w.t
    for x in (w, twin):
        tick_at(x, x.t + 5_000)  # h's TTL hands to a (1 s TTL from then), which is not up yet
        tick_at(x, x.t + 1_000)  # a's is: handed to b
    assert w.st.snapshot() == twin.st.snapshot()
    assert w.st.targets[RES].holders == {"exec:b": 1}
    sound(w)
