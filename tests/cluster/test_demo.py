"""scripts/demo end to end: ``python -m waitgraph.dev.demo`` as a subprocess (a local 3-node cluster of
real processes, every agent its own process), judged by its exit code and its key lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .harness import REPO


def run_demo(*args: str, timeout_s: float = 150) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "waitgraph.dev.demo", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def node_pids(output: str) -> list[int]:
    return [int(p) for p in re.findall(r"node n\d: grpc \S+, raft \S+, pid (\d+)", output)]


@pytest.mark.timeout(180)
def test_the_demo_resolves_every_scenario() -> None:
    done = run_demo()
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "all 6 scenarios resolved" in out
    for n in (1, 2, 3, 4, 5, 6):
        assert f"scenario {n} RESOLVED" in out
    # scenario 6: two MCP clients; the wait that would close the cycle is refused with its path
    assert re.search(
        r"refused at once, would_deadlock: exec:b-\S+ -> resource:file-src-app.py -> exec:a-\S+ "
        r"-> artifact:branch-feature-x -> exec:b-",
        out,
    )
    # detection, votes, the epoch, the victim with its scores, convergence, no re-formation
    assert out.count("DETECTED a deadlock") == 7  # scenario 4's cycle forms three times
    assert "members exec:s1-A, exec:s1-B" in out and "members exec:s2-subtask, exec:s2-supervisor" in out
    assert "members exec:s3-A, exec:s3-B, exec:s3-C, exec:s3-D;" in out  # E, F, G are not in the cycle
    assert re.search(r"VOTE node:n\d approves: 2 of quorum 2", out)
    for epoch in (1, 2, 3):
        assert f"EPOCH {epoch} committed" in out
    assert "victim exec:s1-B g1" in out and "victim exec:s2-subtask g1" in out and "victim exec:s3-D g1" in out
    assert out.count("ExplainDecision d") == 7 and re.search(r"exec:s3-D g1 +no +yes .* victim", out)
    assert "CancellationStable exec:s1-B@1" in out and "CancellationStable exec:s3-D@1" in out
    assert "RELEASED resource:s3-rd" in out  # the victim's lease, after the epoch commit
    assert out.count("no re-formation: Cycles polled") == 4 and "RE-FORMED" not in out
    # the agents' side: the typed exception, the fence, the retry under the new epoch
    assert out.count("DeadlockVictim raised in the blocked task") == 3 + 5  # scenario 4: 2 victims, 3 yields
    assert "StaleEpoch" in out and "presenting epoch 1" in out
    assert "quorum_no_margin" in out and "quorum 2 > max_rollback 1" in out
    assert "exec:s3-D g2" in out and "every execution COMPLETED" in out
    # scenario 4: the same signature re-forms under fresh epochs; the guard's tie-break breaks it
    (sig,) = set(re.findall(r"members exec:s4-A, exec:s4-B, exec:s4-C, exec:s4-D; cycle signature (\w+)", out))
    assert re.search(rf"LIVELOCK: signature {sig} seen again \(recovered_more_than_2_times", out)
    assert "TIE_BREAK" in out and "the lowest id exec:s4-A wins, the others yield" in out
    assert all(f"YIELDED exec:s4-{x} g1: waits behind exec:s4-A" in out for x in "BCD")
    assert "RELEASED resource:s4-rb of the yielder exec:s4-B, after the epoch commit" in out
    assert re.search(rf"signature {sig} re-formed 3 times: 2 speculative rollbacks .* exec:s4-A won", out)
    assert out.count("a re-acquire presenting epoch") >= 5 and "ACCEPTED (it must not be)" not in out
    assert "11 rollbacks, the same signature re-formed every round, replicated epoch still 0" in out
    assert "no re-formation after the tie-break" in out
    # all seven take part: E, F and G wait every batch for the artifact D produces, behind the ring
    for batch in (1, 2, 3):
        assert f"batch {batch}: produced artifact:s4-batch-{batch} for E, F and G" in out
        for x in "EFG":
            assert f"batch {batch}: exec:s4-{x} g1 waits for artifact:s4-batch-{batch}" in out
            assert f"batch {batch}: artifact:s4-batch-{batch} arrived (target_produced): exec:s4-{x} " in out
    assert "exec:s4-E, exec:s4-F, exec:s4-G: behind the ring, never in it" in out
    assert "never chosen, yielded or rolled back; completed at g1" in out
    assert re.search(r"every execution COMPLETED: exec:s4-A g\d+, .*exec:s4-E g1, exec:s4-F g1, exec:s4-G g1", out)
    assert all(f"exec:s4-{x} COMPLETED 3 batches at g1, never interrupted" in out for x in "EFG")
    assert "7 executions completed" in out
    # scenario 2 (no approver) fell to the victim path; scenario 5 (an approver) is reassigned
    assert "reassign not_applicable (no_independent_approver), victim applied (policy_v1)" in out
    assert "members exec:s5-helper, exec:s5-lead" in out
    assert re.search(r"DECISION d\d+: REASSIGN \(mode auto, .*approval_provider_in_cycle\): .*nobody is cancelled", out)
    assert "REASSIGNED approval:s5-plan: exec:s5-lead (inside the cycle) no longer provides it" in out
    assert "PROVIDED_BY approval:s5-plan -> human:reviewer" in out
    assert "WAIT exec:s5-helper>approval:s5-plan re-registered at version 2" in out
    assert "reassign applied (1_approval_to_independent_approver), victim not_needed" in out
    assert "approval:s5-plan arrived (approval_granted, wait version 2)" in out
    assert "every execution COMPLETED: exec:s5-helper g1, exec:s5-lead g1" in out
    assert "nobody was cancelled: both completed at generation 1" in out
    # and nothing is left running
    pids = node_pids(out)
    assert len(pids) == 3 and all(gone(p) for p in pids)
    assert "n1 exit 0, n2 exit 0, n3 exit 0" in out


@pytest.mark.timeout(120)
def test_an_unresolved_scenario_fails_the_demo_with_a_clear_message() -> None:
    done = run_demo("--scenario", "1", "--mode", "shadow")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "scenario 1 NOT RESOLVED: decision d1 did not act (SHADOW)" in out
    assert "waitgraph demo FAILED" in out
    assert all(gone(p) for p in node_pids(out))
