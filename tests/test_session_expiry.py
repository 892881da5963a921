"""The session expiry rule (docs/api.md, Sessions): Tick version 2 expires no session, the leader's
ExpireSession does; an old log's Tick version 1 and Heartbeat entries still apply as they did."""

from __future__ import annotations

import msgpack

from waitgraph.statemachine import Envelope, StateMachine, encode_envelope
from waitgraph.statemachine.commands import ExpireSession, Heartbeat, JoinSession, Tick, TickV1
from waitgraph.statemachine.effects import SessionEnded
from waitgraph.statemachine.enums import SessionStatus
from waitgraph.statemachine.outcome import Result


def _apply(m: StateMachine, actor: str, at_ms: int, cmd: object) -> tuple[Result, list[object]]:
    out = m.apply_bytes(encode_envelope(Envelope(actor=actor, at_ms=at_ms, request_id=None, command=cmd)))  # type: ignore[arg-type]
    return out.result, list(out.effects)


def _joined() -> StateMachine:
    m = StateMachine()
    _apply(m, "agent:a", 1000, JoinSession(agent_id="a", lease_ms=5000))  # expires 6000
    _apply(m, "agent:b", 1000, JoinSession(agent_id="b", lease_ms=2000))  # expires 3000
    _apply(m, "agent:c", 1000, JoinSession(agent_id="c", lease_ms=2000))  # expires 3000
    _apply(m, "agent:c", 2000, Heartbeat(agent_id="c"))  # expires 4000
    return m


def test_an_old_logs_tick_still_expires_by_the_replicated_lease_in_expiry_order() -> None:
    m = _joined()
    raw = msgpack.unpackb(encode_envelope(Envelope(actor="node:n1", at_ms=7000, request_id=None, command=TickV1())))
    assert (raw["cmd"]["kind"], raw["cmd"]["v"]) == ("Tick", 1)  # the bytes an old log holds
    result, effects = _apply(m, "node:n1", 7000, TickV1())
    assert result is Result.APPLIED
    ended = [fx.agent_id for fx in effects if isinstance(fx, SessionEnded)]
    assert ended == ["b", "c", "a"]  # (expires_at_ms, agent) order, as the old heap popped them
    assert all(s.status is SessionStatus.EXPIRED for s in m.state.sessions.values())


def test_tick_version_2_expires_no_session_and_expire_session_names_the_incarnation() -> None:
    m = _joined()
    assert _apply(m, "node:n1", 7000, Tick()) == (Result.APPLIED, [])
    assert all(s.status is SessionStatus.ACTIVE for s in m.state.sessions.values())
    before = m.digest()
    result, _ = _apply(m, "node:n1", 7000, ExpireSession(agent_id="b", incarnation=2))
    assert result is Result.NOOP and m.state.sessions["b"].status is SessionStatus.ACTIVE
    assert _apply(m, "agent:b", 7000, ExpireSession(agent_id="b", incarnation=1))[0] is Result.REJECTED
    assert m.digest() != before  # only the noop counter moved
    result, effects = _apply(m, "node:n1", 7000, ExpireSession(agent_id="b", incarnation=1))
    assert result is Result.APPLIED and effects == [SessionEnded(agent_id="b", reason="expired")]
    assert m.state.sessions["b"].status is SessionStatus.EXPIRED
    assert m.state.sessions["b"].expires_at_ms == 3000  # the recorded lease end, earlier than now
