"""``scripts/screenshot``: stage a scene on a local cluster and photograph its live view.

    python -m waitgraph.dev.showcase --out docs/live-view.png     # what scripts/screenshot runs

Three real ``waitgraph serve`` nodes with the live view on (cluster/dev/localcluster.py ``http``),
then, through the AgentService with each agent's own token:

1. in rollout mode ``auto``, the first seed's cycle (A holds the browser and waits for B's review,
   B waits for the browser): recovery picks B, commits epoch 1 and asks B to stop. Nobody plays B's
   agent, so its cancellation stays open (the "not converged" panel) and, past the cancellation
   SLO (30 s), B is quarantined.
2. in mode ``shadow``, the second seed's ring (A -> B -> C -> D -> A over four resources, E behind D's
   output, F holding a pool permit, G waiting on a human's approval): the cycle is confirmed and
   the decision names the victim recovery would pick (D: no external effects, a checkpoint), but
   nothing is cancelled, so the cycle stays on the page.

Then Debian's chromium, headless, loads the page and saves a PNG. The browser test
(tests/cluster/test_liveview_browser.py) stages step 2 the same way (:func:`stage_ring`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from waitgraph.proto.v1 import types_pb2
from waitgraph.sdk import Client
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.commands import Command
from waitgraph.statemachine.enums import EffectOutcome

LEASE_MS = 3_600_000
S1 = ("a", "b")
RING = ("pipe-a", "pipe-b", "pipe-c", "pipe-d")
PIPELINE = (*RING, "pipe-e", "pipe-f", "pipe-g")
AGENTS = S1 + PIPELINE
_PROFILE: dict[str, dict[str, Any]] = {
    "pipe-a": dict(priority=1),
    "pipe-b": dict(priority=2),
    "pipe-c": dict(priority=1, unique_evidence=True),
    "pipe-d": dict(priority=1, checkpoint=True),
}
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def exec_id(agent: str) -> str:
    return f"exec:{agent}"


def resource(agent: str) -> str:
    return f"resource:{agent.removeprefix('pipe-')}-lock"


async def _play(endpoints: Sequence[str], tokens: Mapping[str, str], steps: Sequence[tuple[str, Command]]) -> None:
    """Each command as its agent (one SDK client per agent); a rejection raises."""
    clients = {agent: Client(list(endpoints), tokens[agent]) for agent in sorted({a for a, _ in steps})}
    try:
        for agent, command in steps:
            await clients[agent].submit(command)
    finally:
        for c in clients.values():
            await c.close()


def _start(agent: str, run_id: str, **profile: Any) -> list[tuple[str, Command]]:
    eid = exec_id(agent)
    return [
        (agent, C.JoinSession(agent_id=agent, lease_ms=LEASE_MS)),
        (agent, C.CreateExecution(execution_id=eid, run_id=run_id, observed_cancel_generation=0, **profile)),
        (agent, C.StartExecution(execution_id=eid, generation=1, observed_cancel_generation=0)),
    ]


def _wait(agent: str, target_id: str, reason: str) -> tuple[str, Command]:
    return (
        agent,
        C.RegisterWait(
            waiter_id=exec_id(agent), waiter_generation=1, target_id=target_id, target_generation=1, reason=reason
        ),
    )


def _hold(agent: str, target_id: str) -> tuple[str, Command]:
    return agent, C.Acquire(target_id=target_id, execution_id=exec_id(agent), generation=1, observed_epoch=0)


async def stage_seed_cycle(endpoints: Sequence[str], tokens: Mapping[str, str]) -> None:
    """The first seed's two-execution cycle: A holds the browser, waits for B's review; B waits
    for the browser. A already sent an email (COMMITTED), B has a checkpoint: B is the victim."""
    browser, review = "resource:browser", "artifact:review"
    steps = [*_start("a", "run-research"), *_start("b", "run-review", checkpoint=True)]
    steps += [
        ("a", C.CreateTarget(target_id=browser)),
        ("a", C.CreateTarget(target_id=review)),
        _hold("a", browser),
        ("b", C.DeclareSatisfier(target_id=review, target_generation=1, satisfier_id="exec:b", satisfier_generation=1)),
        (
            "a",
            C.RecordSideEffect(
                execution_id="exec:a", generation=1, effect_id="kickoff-email", outcome=EffectOutcome.COMMITTED
            ),
        ),
        _wait("a", review, "needs B's review"),
        _wait("b", browser, "needs the browser for evidence"),
    ]
    await _play(endpoints, tokens, steps)


async def stage_ring(endpoints: Sequence[str], tokens: Mapping[str, str], reason: str | None = None) -> None:
    """The second seed's pipeline: a four-execution resource ring, E waiting behind it, F holding a
    pool permit, G waiting for a human. ``reason`` replaces the text of A's wait (the browser test
    puts markup there, to see that it stays text)."""
    output, release, workers = "artifact:release-bundle", "approval:release", "pool:workers"
    steps: list[tuple[str, Command]] = []
    for agent in RING:
        steps += _start(agent, f"run-{agent}", **_PROFILE[agent])
        steps += [(agent, C.CreateTarget(target_id=resource(agent))), _hold(agent, resource(agent))]
    steps += [
        (
            "pipe-a",
            C.RecordSideEffect(
                execution_id="exec:pipe-a", generation=1, effect_id="staging-write", outcome=EffectOutcome.COMMITTED
            ),
        ),
        ("pipe-d", C.CreateTarget(target_id=output)),
        (
            "pipe-d",
            C.DeclareSatisfier(
                target_id=output, target_generation=1, satisfier_id="exec:pipe-d", satisfier_generation=1
            ),
        ),
        *_start("pipe-e", "run-pipe-e"),
        _wait("pipe-e", output, "packages D's bundle"),
        *_start("pipe-f", "run-pipe-f"),
        ("pipe-f", C.CreateTarget(target_id=workers, slots=2)),
        _hold("pipe-f", workers),
        *_start("pipe-g", "run-pipe-g"),
        ("pipe-g", C.CreateTarget(target_id=release)),
        ("pipe-g", C.DeclareSatisfier(target_id=release, target_generation=1, satisfier_id="human:release-manager")),
        _wait("pipe-g", release, "sign-off by the release manager"),
    ]
    for i, agent in enumerate(RING):
        nxt = RING[(i + 1) % len(RING)]
        text = reason if reason is not None and agent == RING[0] else f"needs {nxt.removeprefix('pipe-')}'s lock"
        steps.append(_wait(agent, resource(nxt), text))
    await _play(endpoints, tokens, steps)


# -- the browser ---------------------------------------------------------------------------------------------


def find_chromium() -> str | None:
    """Debian's ``chromium`` (or another Chrome) on PATH; None when there is none."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def chromium(browser: str, url: str, *args: str, timeout_s: float = 90.0) -> subprocess.CompletedProcess[str]:
    """Headless chromium on ``url`` with a throwaway profile; ``--virtual-time-budget`` lets the
    page's script run (fetch, polling) before the DOM is dumped or the screenshot taken."""
    with tempfile.TemporaryDirectory(prefix="waitgraph-chromium-") as profile:
        cmd = [browser, "--headless", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}"]
        if os.geteuid() == 0:
            cmd.append("--no-sandbox")  # chromium refuses to run as root with its sandbox
        cmd += ["--virtual-time-budget=8000", *args, url]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)


# -- the script ----------------------------------------------------------------------------------------------


def _until(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def decided(lc: Any) -> int:
    """How many recovery proposals have a decision (a cluster's operator view)."""
    with lc.client("operator") as ops:
        return sum(p.HasField("decision_id") for p in ops.cycles(include_closed=True).reply.proposals)


def quarantined(lc: Any) -> bool:
    with lc.client("operator") as ops:
        graph = ops.graph(run_id="run-review").reply
    return any(
        ex.execution_id == "exec:b" and ex.status == types_pb2.EXEC_STATUS_QUARANTINED for ex in graph.executions
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/screenshot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/live-view.png"))
    parser.add_argument("--size", default="1400,1620", help="browser window WIDTH,HEIGHT in CSS pixels")
    parser.add_argument("--keep-running", action="store_true", help="leave the cluster up until Ctrl-C")
    ns = parser.parse_args(argv)
    browser = find_chromium()
    if browser is None:
        print("scripts/screenshot: no chromium on PATH (apt-get install chromium)", file=sys.stderr)
        return 1
    from waitgraph.dev.localcluster import LocalCluster

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    lc = LocalCluster(
        nodes=3,
        mode="auto",
        agents=AGENTS,
        http=True,
        serve_args=("--recovery-confirmation-window-ms", "300", "--detect-interval-ms", "50"),
    )
    try:
        lc.start()
        lc.wait_for_leader(60)
        assert lc.credentials is not None
        tokens = lc.credentials.agents
        asyncio.run(stage_seed_cycle(lc.endpoints, tokens))
        _until(lambda: decided(lc) >= 1, 30, "the first recovery")
        with lc.client() as ops:
            from waitgraph.statemachine.recovery_state import RolloutMode
            from waitgraph.wire import convert

            ops.set_mode(convert.enum_number(RolloutMode.SHADOW))
        asyncio.run(stage_ring(lc.endpoints, tokens))
        _until(lambda: decided(lc) >= 2, 30, "the shadow decision")
        # b never acknowledges its cancel: past the cancellation SLO (30 s) it is quarantined
        _until(lambda: quarantined(lc), 60, "exec:b's quarantine")
        time.sleep(1.5)  # every replica applies it
        node = lc.members[0]
        url = f"http://{node.http_address}/?token={lc.credentials.operator}"
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        shot = chromium(
            browser, url, f"--screenshot={ns.out.resolve()}", f"--window-size={ns.size}", "--hide-scrollbars"
        )
        if shot.returncode != 0 or not ns.out.exists():
            print(f"scripts/screenshot: chromium failed ({shot.returncode}): {shot.stderr[-2000:]}", file=sys.stderr)
            return 1
        print(f"saved {ns.out} ({ns.out.stat().st_size} bytes): {node.node_id}'s live view, {url.split('?')[0]}")
        if ns.keep_running:
            print(f"live view: http://{node.http_address}/  token: {lc.credentials.operator}\nCtrl-C stops.")
            while True:
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        lc.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
