"""Replay every scenario transcript in tests/transcripts/ and compare it with its recorded output.

One test per ``tests/transcripts/**/*.txt`` file; a mismatch fails with a unified diff.
After an intended change of behaviour or rendering, regenerate the recorded outputs with

    WAITGRAPH_REWRITE=1 .venv/bin/pytest tests/test_transcripts.py

and review the change with ``git diff tests/transcripts``. The format is in
tests/transcripts/README.md; the runner is statemachine/transcript.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from waitgraph.statemachine import commands
from waitgraph.statemachine.transcript import TranscriptError, diff, run

ROOT = Path(__file__).parent / "transcripts"
FILES = sorted(ROOT.rglob("*.txt"))
REWRITE = os.environ.get("WAITGRAPH_REWRITE") == "1"
CORE = Path(__file__).parent.parent / "statemachine"

WAIT_GRAPH_COMMANDS = {
    "JoinSession", "Heartbeat", "LeaveSession", "CreateExecution", "StartExecution",
    "ResumeExecution", "CompleteExecution", "FailExecution", "RetryExecution", "CreateTarget",
    "DeclareSatisfier", "Acquire", "Release", "RegisterWait", "CloseWait", "ProduceArtifact",
    "DecideApproval", "Tick", "RecordSideEffect", "RecordCost",
}  # fmt: skip
"""The wait-graph core that tests/transcripts/core/ documents: each must have a transcript."""

WAIT_GRAPH_CODES = {
    "already_closed", "already_declared", "already_held", "already_recorded", "already_satisfied",
    "bad_actor", "bad_edge_version", "bad_generation", "bad_lease", "bad_name", "bad_reason",
    "bad_request_id", "bad_slots", "codec", "deadline_passed", "execution_exists",
    "future_edge_version", "future_generation", "id_too_long", "illegal_transition", "negative",
    "no_agent", "no_edge", "no_execution", "no_session", "no_target", "not_held", "not_live",
    "not_owner", "not_satisfier", "operator_only", "pool_full", "request_id_reused", "run_exists",
    "side_effect_final", "stale_edge_version", "stale_generation", "stale_target_generation",
    "stale_version", "target_exists", "target_held", "too_many_edges", "too_many_executions",
    "too_many_sessions", "too_many_side_effects", "too_many_targets", "unresolvable_id",
    "wrong_id_kind", "wrong_run",
}  # fmt: skip
"""Every rejection and no-op code of the wait-graph core (machine.py, ids.py)."""

UNREACHABLE_CODES = {
    "unknown_command": "the dispatch match is exhaustive over the closed Command union",
    "bad_id": "the codec only lets strings into id fields",
}
"""Codes the core can produce in principle but no well-formed command reaches."""


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_transcript(path: Path) -> None:
    recorded = path.read_text()
    replayed = run(recorded)
    if REWRITE:
        if replayed != recorded:
            path.write_text(replayed)
        return
    if replayed != recorded:
        pytest.fail(
            diff(recorded, replayed, path.relative_to(ROOT).as_posix())
            + "\n(run with WAITGRAPH_REWRITE=1 to accept the replayed output)",
            pytrace=False,
        )


def _all_transcripts() -> str:
    return "\n".join(p.read_text() for p in FILES)


def test_every_command_has_a_transcript() -> None:
    """The wait-graph commands must each appear; newer commands without one are listed (skip)."""
    used = set(re.findall(r"^([A-Z]\w+)\b", _all_transcripts(), re.M))
    missing = sorted(kind for kind in WAIT_GRAPH_COMMANDS if kind not in used)
    assert not missing, f"commands without a transcript block: {missing}"
    newer = sorted(c.KIND for c in commands.COMMANDS if c.KIND not in used)
    if newer:
        pytest.skip(f"no transcript yet for: {', '.join(newer)}")


def test_every_rejection_and_noop_code_has_a_transcript() -> None:
    """Every wait-graph code appears in some recorded outcome; so should every code found in the
    core's sources (those without a transcript yet are listed as a skip)."""
    seen = set(re.findall(r"^(?:NOOP|REJECTED [A-Z_]+) (\w+):", _all_transcripts(), re.M))
    missing = sorted(WAIT_GRAPH_CODES - seen)
    assert not missing, f"codes no transcript shows: {missing}"
    source = "\n".join(p.read_text() for p in sorted(CORE.glob("*.py")) if p.name != "transcript.py")
    first_args = re.findall(
        r"\b(?:invalid|precondition|not_found|exists|aborted|denied|exhausted|noop|satisfied)\(\s*([^,]+),", source
    )
    codes = {code for arg in first_args for code in re.findall(r'"(\w+)"', arg)}
    newer = sorted(codes - seen - UNREACHABLE_CODES.keys())
    if newer:
        pytest.skip(f"no transcript yet for codes: {', '.join(newer)}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("state\nstate\n", "line 2: expected '----' or a blank line after the command on line 1"),
        ("Tick\n----\nAPPLIED\n# note\n", "line 4: a comment inside the output of line 1"),
        ("\n----\n", "line 2: '----' without a command line before it"),
        ("Frobnicate x=1\n", "line 1: 'Frobnicate' is neither a command KIND nor a runner verb"),
        ("\n\nStartExecution execution_id=exec:a\n", "line 3: StartExecution is missing generation"),
        ("StartExecution execution_id=exec:a generation=two\n", "line 1: generation='two' is not an integer"),
        ("Tick colour=red\n", "line 1: Tick has no field 'colour'"),
        ('Tick as="agent:a\n', "line 1: unterminated quoted value for as"),
        ("Tick\n\nlimits max_sessions=1\n", "line 3: limits must come before the first command"),
        ("state verbose=true\n", "line 1: state takes no arguments"),
    ],
)
def test_malformed_transcripts_name_the_line(text: str, expected: str) -> None:
    with pytest.raises(TranscriptError) as info:
        run(text)
    assert expected in info.value.message
