"""Replicas agree whatever their PYTHONHASHSEED: the same log gives the same digest and outcomes.

String hashing, and with it set and dict-of-set iteration order, changes with PYTHONHASHSEED; the
core must never let that order reach the state, the snapshot or an outcome (DESIGN.md §1). A
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
SEED, STEPS = 4, 800


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
