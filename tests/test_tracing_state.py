"""The trace context stored with a wait (docs/observability.md, "What tracing stores"): nothing
when tracing is off, the same bytes on every replica when it is on.

- Off: the generated logs of tests/strategies.py replay to the very digests the release before
  this field computed (taken from main at 7f4ba7e, before ``trace_context`` existed): the
  replicated state of the same command sequence is byte-identical.
- On: the same logs with a traceparent on every RegisterWait replay to one digest whatever the
  PYTHONHASHSEED, and a snapshot restores to it.
- The command codec decodes a RegisterWait written without the field; a malformed context is a
  typed rejection that changes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.strategies import generate_log
from tests.test_hashseed import replay_file, replay_in_subprocess
from waitgraph.statemachine.codec import decode_command, decode_envelope, encode_command, encode_envelope, pack
from waitgraph.statemachine.commands import CloseWait, Command, RegisterWait
from waitgraph.statemachine.ids import TRACE_CONTEXT_LEN
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.state import State

from .world import World

GOLDEN = {
    # (seed, steps): the state digest the code without trace contexts computed: sessions-37b at
    # b5ad7ed (#37's lessor changes expiry, so main's 7f4ba7e figures no longer apply), the same
    # generated logs byte for byte.
    (4, 800): "f5ff2d2680e9b8701f4d594c40650ed450ee27306ec351651df97d3ba8a7e776",
    (7, 1500): "65ec13163213e4f0e23ab19c167c8aa878915998311a637194439cf4156ae189",
    (11, 600): "941ee408ca9620d70588269a1aee7a215f8d2182c99d41525b76142966fc3483",
}


def traceparent_for(*parts: object) -> str:
    """A deterministic, well-formed traceparent (sampled) named by ``parts``."""
    h = hashlib.sha256(repr(parts).encode()).hexdigest()
    return f"00-{h[:32]}-{h[32:48]}-01"


def with_trace_contexts(log: list[bytes]) -> list[bytes]:
    """``log`` with a traceparent on every RegisterWait (the same envelope always gets the same
    one, so a verbatim resend stays a verbatim resend)."""
    out = []
    for data in log:
        try:
            env = decode_envelope(data)
        except Exception:
            out.append(data)  # the generator's deliberately broken bytes
            continue
        cmd = env.command
        if isinstance(cmd, RegisterWait):
            tp = traceparent_for(env.actor, env.request_id, cmd.waiter_id, cmd.target_id, cmd.edge_version)
            env = dataclasses.replace(env, command=dataclasses.replace(cmd, trace_context=tp))
            data = encode_envelope(env)
        out.append(data)
    return out


@pytest.mark.parametrize(("seed", "steps"), sorted(GOLDEN))
def test_untraced_logs_replay_to_the_digest_of_the_release_before(tmp_path: Path, seed: int, steps: int) -> None:
    path = tmp_path / "log.msgpack"
    path.write_bytes(pack(generate_log(seed, steps)))
    digest, _, restored = replay_file(str(path))
    assert digest == GOLDEN[(seed, steps)]
    assert restored == digest


def test_traced_log_is_stored_and_agrees_across_hash_seeds(tmp_path: Path) -> None:
    log = generate_log(4, 800)
    traced = with_trace_contexts(log)
    registered = sum(1 for a, b in zip(log, traced, strict=True) if a != b)
    assert registered > 50, "the log must register traced waits"
    path = tmp_path / "traced.msgpack"
    path.write_bytes(pack(traced))
    here = replay_file(str(path))
    assert here[0] != GOLDEN[(4, 800)], "the contexts are replicated state: they are in the digest"
    assert here[0] == here[2], "restore lost or changed a trace context"
    assert replay_in_subprocess(path, "0") == here
    assert replay_in_subprocess(path, "4242") == here


@pytest.fixture
def apply_agent() -> tuple[StateMachine, Callable[[Command], Outcome]]:
    """A machine where agent A runs exec:a and exec:b, and A's way to apply a command."""
    w = World()
    w.execution("a", agent="A")
    w.execution("b", agent="A")
    return w.m, lambda cmd: w.do("agent:A", cmd)


def _traced_edges(st: State) -> dict[str, str]:
    return {e.edge_id: e.trace_context for w in st.waits_by_waiter.values() for e in w.values() if e.trace_context}


def test_old_command_bytes_decode_and_the_field_is_written_only_when_set() -> None:
    plain = RegisterWait(waiter_id="exec:a", waiter_generation=1, target_id="exec:b", target_generation=1, reason="r")
    data = encode_command(plain)
    assert b"trace_context" not in data, "an untraced command keeps the bytes of the release before"
    assert decode_command(data).trace_context == ""
    tp = traceparent_for("x")
    traced = dataclasses.replace(plain, trace_context=tp)
    assert decode_command(encode_command(traced)).trace_context == tp
    assert len(tp) == TRACE_CONTEXT_LEN


def test_a_wait_keeps_its_context_until_it_closes(
    apply_agent: tuple[StateMachine, Callable[[Command], Outcome]],
) -> None:
    sm, run = apply_agent
    tp = traceparent_for("w1")
    out = run(RegisterWait(waiter_id="exec:a", waiter_generation=1, target_id="exec:b", target_generation=1,
                           reason="needs b", trace_context=tp))  # fmt: skip
    assert out.result is Result.APPLIED, out
    assert _traced_edges(sm.state) == {"exec:a>exec:b": tp}
    assert sm.state.traced_edges == 1
    assert _traced_edges(State.restore(sm.snapshot())) == {"exec:a>exec:b": tp}
    # a refresh at the next version without a context keeps the one the wait began with
    out = run(RegisterWait(waiter_id="exec:a", waiter_generation=1, target_id="exec:b", target_generation=1,
                           reason="needs b", edge_version=2))  # fmt: skip
    assert out.result is Result.APPLIED, out
    assert _traced_edges(sm.state) == {"exec:a>exec:b": tp}
    out = run(CloseWait(waiter_id="exec:a", waiter_generation=1, target_id="exec:b", edge_version=2, reason="done"))
    assert out.result is Result.APPLIED, out
    assert sm.state.traced_edges == 0
    assert b"trace_context" not in sm.snapshot(), "no traced edge left: the column is not written"


@pytest.mark.parametrize(
    "bad",
    [
        "nonsense",
        "00-" + "0" * 32 + "-" + "1" * 16 + "-01",  # all-zero trace id
        "00-" + "1" * 32 + "-" + "0" * 16 + "-01",  # all-zero span id
        "01-" + "1" * 32 + "-" + "1" * 16 + "-01",  # a version this core does not store
        "00-" + "A" * 32 + "-" + "1" * 16 + "-01",  # uppercase
        traceparent_for("x") + "-extra",
    ],
)
def test_a_malformed_context_is_refused_and_changes_nothing(
    apply_agent: tuple[StateMachine, Callable[[Command], Outcome]], bad: str
) -> None:
    sm, run = apply_agent
    before = sm.digest()
    out = run(RegisterWait(waiter_id="exec:a", waiter_generation=1, target_id="exec:b", target_generation=1,
                           reason="needs b", trace_context=bad))  # fmt: skip
    assert out.result is Result.REJECTED
    assert out.code == "bad_trace_context"
    assert sm.digest() == before
