"""Replicas agree whatever their PYTHONHASHSEED: the same log gives the same digest and outcomes.

String hashing, and with it set and dict-of-set iteration order, changes with PYTHONHASHSEED; the
core must never let that order reach the state, the snapshot or an outcome (docs/design.md §1). A
seeded, deterministic log (built by the test, never by the core) is written with the codec to a
file and replayed here and in two fresh interpreters started with different hash seeds.
"""

from __future__ import annotations

import collections
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import msgpack

from tests.strategies import generate_log
from waitgraph.statemachine.codec import decode_envelope, encode_outcome, pack
from waitgraph.statemachine.errors import CodecError
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Result
from waitgraph.statemachine.state import State

ROOT = Path(__file__).resolve().parent.parent
SEED, STEPS = 5, 800
"""A seed whose log passes :func:`assert_rich` (ExpireSession and Tick v1 in the workload moved 4's)."""


def replay_file(path: str) -> tuple[str, str, str]:
    """Replay a log file: (state digest, digest of every encoded outcome, digest after restore)."""
    with open(path, "rb") as f:
        log = msgpack.unpackb(f.read(), raw=False)
    sm = StateMachine()
    outcomes = hashlib.sha256()
    for data in log:
        outcomes.update(encode_outcome(sm.apply_bytes(data)))
    restored = State.restore(sm.snapshot())
    return sm.digest(), outcomes.hexdigest(), restored.digest()


def replay_in_subprocess(path: Path, hash_seed: str) -> tuple[str, ...]:
    code = "import sys\nfrom tests.test_hashseed import replay_file\nprint(*replay_file(sys.argv[1]))"
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return tuple(done.stdout.split())


def test_replay_digest_is_independent_of_the_hash_seed(tmp_path: Path) -> None:
    log = generate_log(SEED, STEPS)
    assert_rich(log)
    path = tmp_path / "log.msgpack"
    path.write_bytes(pack(log))

    here = replay_file(str(path))
    assert here[0] == here[2], "restore changed the digest"
    assert replay_in_subprocess(path, "0") == here
    assert replay_in_subprocess(path, "4242") == here


def assert_rich(log: list[bytes]) -> None:
    """The log must exercise the core, or agreeing on its digest proves little."""
    sm = StateMachine()
    applied: set[str] = set()
    results: collections.Counter[str] = collections.Counter()
    effects: collections.Counter[str] = collections.Counter()
    most_edges = 0
    for data in log:
        out = sm.apply_bytes(data)
        results["duplicate" if out.duplicate else out.result.value] += 1
        effects.update(type(fx).__name__ for fx in out.effects)
        most_edges = max(most_edges, sm.state.edge_count)
        try:
            kind = decode_envelope(data).command.KIND
        except CodecError:
            continue
        if out.result is Result.APPLIED:
            applied.add(kind)
    assert len(applied) >= 12, sorted(applied)
    assert results["NOOP"] >= 5 and results["REJECTED"] >= 50 and results["duplicate"] >= 5, results
    assert effects["WaitRegistered"] >= 10 and effects["WaitClosed"] >= 5, effects
    assert effects["Acquired"] >= 5 and effects["Released"] >= 3, effects
    assert most_edges >= 3


def reassign_log() -> list[bytes]:
    """The supervisor/subtask approval cycle, decided in shadow, then REASSIGNed to a human."""
    from waitgraph.statemachine.codec import encode_envelope
    from waitgraph.statemachine.commands import (
        CommitRecovery,
        ConfigureRecovery,
        CreateExecution,
        CreateTarget,
        DeclareSatisfier,
        Envelope,
        JoinSession,
        RegisterWait,
        SetApprover,
        SetMode,
        StartExecution,
        VoteRecovery,
    )
    from waitgraph.statemachine.detect import full_pass
    from waitgraph.statemachine.recovery import propose_command

    sm = StateMachine()
    log: list[bytes] = []
    t = 1000

    def send(actor: str, cmd: object, dt: int = 1) -> None:
        nonlocal t
        t += dt
        data = encode_envelope(Envelope(actor=actor, at_ms=t, request_id=f"r{len(log)}", command=cmd))  # type: ignore[arg-type]
        out = sm.apply_bytes(data)
        assert out.result is Result.APPLIED, (cmd, out.code, out.message)
        log.append(data)

    for agent in ("sup", "sub"):
        send(f"agent:{agent}", JoinSession(agent_id=agent, lease_ms=600_000))
    send("agent:sup", CreateExecution(execution_id="exec:S", run_id="run-1", observed_cancel_generation=0))
    send("agent:sup", StartExecution(execution_id="exec:S", generation=1, observed_cancel_generation=0))
    send(
        "agent:sup",
        CreateExecution(
            execution_id="exec:T", run_id="run-1", parent_id="exec:S", agent_id="sub", observed_cancel_generation=0
        ),
    )
    send("agent:sub", StartExecution(execution_id="exec:T", generation=1, observed_cancel_generation=0))
    send("operator:op", CreateTarget(target_id="approval:ok"))
    send(
        "agent:sup",
        DeclareSatisfier(target_id="approval:ok", target_generation=1, satisfier_id="exec:S", satisfier_generation=1),
    )
    wait = {"waiter_generation": 1, "target_generation": 1, "reason": "r"}
    send("agent:sup", RegisterWait(waiter_id="exec:S", target_id="exec:T", **wait))  # type: ignore[arg-type]
    send("agent:sub", RegisterWait(waiter_id="exec:T", target_id="approval:ok", **wait))  # type: ignore[arg-type]
    send("operator:op", ConfigureRecovery(voters=("node:n1", "node:n2"), quorum=2, max_rollback=1))
    send("operator:op", SetApprover(approver_id="human:alice", run_id="run-1"))
    for mode in ("shadow", "auto"):
        send("operator:op", SetMode(mode=mode))  # type: ignore[arg-type]
        (c,) = full_pass(sm.state)
        send("node:n1", propose_command(c, len(log)))
        for voter in ("node:n1", "node:n2"):
            send(voter, VoteRecovery(digest=c.digest))
        send("node:n1", CommitRecovery(digest=c.digest), dt=1000)
    kinds = [d.kind.value for d in sm.state.recovery.decisions.values()]
    assert kinds == ["SHADOW", "REASSIGN"], kinds
    return log


def test_reassign_replays_identically_under_any_hash_seed(tmp_path: Path) -> None:
    path = tmp_path / "reassign.msgpack"
    path.write_bytes(pack(reassign_log()))
    here = replay_file(str(path))
    assert here[0] == here[2], "restore changed the digest"
    assert replay_in_subprocess(path, "0") == here
    assert replay_in_subprocess(path, "4242") == here
