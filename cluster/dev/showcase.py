"""``scripts/screenshot``: stage a scene on a local cluster and photograph its live view.

    python -m waitgraph.dev.showcase     # what scripts/screenshot runs: docs/live-view.png, docs/live-view-10k.png

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

Debian's chromium, headless and driven by Playwright, loads the page, clicks the victim (its
details and scores) and saves docs/live-view.png. Then 10,000 more executions with 20,000 waits
(:func:`stage_crowd`, no cycle among them) join, and the same again gives docs/live-view-10k.png.
The browser tests (tests/cluster/test_liveview_browser.py) stage the same scenes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
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


CROWD_AGENTS = 50
CROWD_RUNS = 100


def crowd_agents(agents: int = CROWD_AGENTS) -> tuple[str, ...]:
    return tuple(f"crowd-{a:02d}" for a in range(agents))


def crowd_run(i: int, runs: int = CROWD_RUNS) -> str:
    return f"run-{i % runs:03d}"


async def stage_crowd(
    endpoints: Sequence[str], tokens: Mapping[str, str], n: int, agents: int = CROWD_AGENTS, runs: int = CROWD_RUNS
) -> None:
    """``n`` executions with two waits each (``2n`` waits, no cycle among them): execution ``i``
    (run ``i % runs``, agent ``i % agents``) produces ``artifact:crowd-i`` and waits for the
    artifacts of the next two executions of its run; the last ones of a run wait for a human's
    approvals instead. Around the rings of :func:`stage_seed_cycle` and
    :func:`stage_ring` this is the 10,000-execution scene of the browser test and the benchmark.
    The writes go in three phases (create, start and declare, wait), each in concurrent chunks
    that the SDK batches into WriteBatch calls."""
    names = crowd_agents(agents)
    clients = {a: Client(list(endpoints), tokens[a]) for a in names}
    approvals = ("approval:crowd-sign-off", "approval:crowd-review")

    def eid(i: int) -> str:
        return f"exec:crowd-{i:05d}"

    def art(i: int) -> str:
        return f"artifact:crowd-{i:05d}"

    def owner(i: int) -> str:
        return names[i % agents]

    async def phase(steps: Sequence[tuple[str, Command]], chunk: int = 4000) -> None:
        for k in range(0, len(steps), chunk):
            await asyncio.gather(*(clients[a].submit(c) for a, c in steps[k : k + chunk]))

    try:
        await phase([(a, C.JoinSession(agent_id=a, lease_ms=LEASE_MS)) for a in names])
        await phase([(names[0], C.CreateTarget(target_id=t)) for t in approvals])
        await phase(
            [
                (names[0], C.DeclareSatisfier(target_id=t, target_generation=1, satisfier_id="human:approver"))
                for t in approvals
            ]
        )
        roots = min(n, runs)  # execution r < runs is its run's root; the others are its children,
        # created by the root's agent as delegations to their own
        await phase(
            [
                (
                    owner(i),
                    C.CreateExecution(execution_id=eid(i), run_id=crowd_run(i, runs), observed_cancel_generation=0),
                )
                for i in range(roots)
            ]
        )
        create: list[tuple[str, Command]] = [(owner(i), C.CreateTarget(target_id=art(i))) for i in range(n)]
        for i in range(roots, n):
            root = i % runs
            create.append(
                (
                    owner(root),
                    C.CreateExecution(
                        execution_id=eid(i),
                        run_id=crowd_run(i, runs),
                        parent_id=eid(root),
                        agent_id=owner(i),
                        observed_cancel_generation=0,
                    ),
                )
            )
        await phase(create)
        start: list[tuple[str, Command]] = []
        for i in range(n):
            a = owner(i)
            start.append((a, C.StartExecution(execution_id=eid(i), generation=1, observed_cancel_generation=0)))
            start.append(
                (
                    a,
                    C.DeclareSatisfier(
                        target_id=art(i), target_generation=1, satisfier_id=eid(i), satisfier_generation=1
                    ),
                )
            )
        await phase(start)
        waits: list[tuple[str, Command]] = []
        for i in range(n):
            for step, reason in ((1, "needs the next step's output"), (2, "needs the step after next")):
                j = i + step * runs
                target = art(j) if j < n else approvals[step - 1]
                text = reason if j < n else "waits for a human's approval"
                waits.append(
                    (
                        owner(i),
                        C.RegisterWait(
                            waiter_id=eid(i), waiter_generation=1, target_id=target, target_generation=1, reason=text
                        ),
                    )
                )
        await phase(waits)
    finally:
        for c in clients.values():
            await c.close()


# -- the browser ---------------------------------------------------------------------------------------------


CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # chromium refuses to run as root with its sandbox
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def find_chromium() -> str | None:
    """Debian's ``chromium`` (or another Chrome) on PATH; None when there is none."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


@contextlib.contextmanager
def browser_page(browser: str, size: tuple[int, int] = (1400, 1000)) -> Iterator[Any]:
    """A Playwright page in ``browser`` (Debian's chromium: Playwright never downloads one here),
    headless, with a throwaway profile; closed, with the browser, on the way out."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="waitgraph-chromium-") as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            profile,
            executable_path=browser,
            args=list(CHROMIUM_FLAGS),
            headless=True,
            viewport={"width": size[0], "height": size[1]},
        )
        try:
            yield ctx.pages[0] if ctx.pages else ctx.new_page()
        finally:
            ctx.close()


def open_view(page: Any, url: str, timeout_s: float = 30.0) -> tuple[float, float]:
    """Load the live view at ``url`` (with ``?token=``) and wait until it draws the graph at the
    applied index its feed reports, and a drawing of a state at least as new as the node's commit
    index when the page opened, its panels (the summary) as new (:func:`fresh_render_s`). Returns
    the page's own times from navigation, in seconds, to its first drawing (of the node's last
    build, which may be a moment old and says so) and to the first drawing of the one its feed
    called current."""
    page.goto(url)
    page.wait_for_selector("body[data-current-render-ms]", timeout=timeout_s * 1000)
    # and (what a caller then reads off the page) a drawing of a state at least as new as the
    # node's when the page opened: it may first be answered with a build kept ready before
    page.wait_for_selector("body[data-fresh-render-ms]", timeout=timeout_s * 1000)
    first, current = page.evaluate("[document.body.dataset.firstRenderMs, document.body.dataset.currentRenderMs]")
    return float(first) / 1000, float(current) / 1000


def fresh_render_s(page: Any, timeout_s: float = 30.0) -> float:
    """After :func:`open_view`: the page's own time from navigation, in seconds, to its first
    drawing of a state at least as new as the node's commit index when the page opened (the build
    the page was answered with at once can be older: the one the node keeps ready)."""
    page.wait_for_selector("body[data-fresh-render-ms]", timeout=timeout_s * 1000)
    return float(page.evaluate("document.body.dataset.freshRenderMs")) / 1000


def click_node(page: Any, node_id: str, timeout_s: float = 30.0) -> None:
    """Click ``node_id`` where the graph draws it (as a person would), and wait for its details.

    A layout may still be moving the node when its position is read (on a busy machine the
    animation runs late), so a click that showed nothing is aimed again at where the node is now,
    until ``timeout_s``; the details must be this node's."""
    from playwright.sync_api import TimeoutError as NotYet

    deadline = time.monotonic() + timeout_s
    while True:
        at = page.evaluate(
            """id => {
              const n = liveview.cy.getElementById(id);
              if (!n.length) return null;
              const b = n.renderedBoundingBox(), r = document.getElementById("graph").getBoundingClientRect();
              return {x: r.left + (b.x1 + b.x2) / 2, y: r.top + (b.y1 + b.y2) / 2};
            }""",
            node_id,
        )
        if at is None:
            raise LookupError(f"{node_id} is not drawn")
        page.mouse.click(at["x"], at["y"])
        left_s = deadline - time.monotonic()
        try:
            page.wait_for_function(
                "id => document.getElementById('details').dataset.id === id",
                arg=node_id,
                timeout=max(1.0, min(5.0, left_s)) * 1000,
            )
            return
        except NotYet:  # aim again where the node is now, while time is left
            if time.monotonic() >= deadline:
                raise


# -- the script ----------------------------------------------------------------------------------------------


def _until(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def view_counts(http_address: str, token: str) -> dict[str, int]:
    """What a node's live view counts now (``/api/view``), as an operator script would ask."""
    import json
    import urllib.request

    request = urllib.request.Request(f"http://{http_address}/api/view", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        counts: dict[str, int] = json.loads(reply.read())["counts"]
    return counts


def shows_more_than(http_address: str, token: str, executions: int, timeout_s: float = 120.0) -> None:
    """Wait until the live view at ``http_address`` counts more than ``executions``."""
    _until(lambda: view_counts(http_address, token)["executions"] > executions, timeout_s, "the node's view")


def decided(lc: Any) -> int:
    """How many recovery proposals have a decision (a cluster's operator view)."""
    with lc.client("operator") as ops:
        return sum(p.HasField("decision_id") for p in ops.read_cycles(include_closed=True).reply.proposals)


def quarantined(lc: Any) -> bool:
    with lc.client("operator") as ops:
        graph = ops.read_graph(run_id="run-review").reply
    return any(
        ex.execution_id == "exec:b" and ex.status == types_pb2.EXEC_STATUS_QUARANTINED for ex in graph.executions
    )


NO_GRPC_FORK = {"GRPC_ENABLE_FORK_SUPPORT": "false"}
"""What `waitgraph serve` means to set before gRPC loads (cluster/ops/cli.py); ``import waitgraph``
loads gRPC first (the SDK's re-exports), so the nodes here get it from their environment: with
gRPC's fork handlers on, the forked reader the live view builds with can crash."""


def cluster(**kw: Any) -> Any:
    """A local 3-node cluster with the live view on, quick confirmation, no rate limit (the crowd)."""
    from waitgraph.dev.localcluster import LocalCluster

    return LocalCluster(
        nodes=3,
        agents=AGENTS + crowd_agents(),
        http=True,
        extra_env=lambda m: NO_GRPC_FORK,
        serve_args=(
            "--recovery-confirmation-window-ms",
            "300",
            "--detect-interval-ms",
            "50",
            "--rate-limit-per-s",
            "0",
        ),
        **kw,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/screenshot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/live-view.png"), help="the small scene's picture")
    parser.add_argument("--out-large", type=Path, default=Path("docs/live-view-10k.png"), help="the large one's")
    parser.add_argument("--executions", type=int, default=10_000, help="the large scene's crowd (0: no large scene)")
    parser.add_argument("--size", default="1400,1000", help="browser window WIDTH,HEIGHT in CSS pixels")
    parser.add_argument("--keep-running", action="store_true", help="leave the cluster up until Ctrl-C")
    ns = parser.parse_args(argv)
    browser = find_chromium()
    if browser is None:
        print("scripts/screenshot: no chromium on PATH (apt-get install chromium)", file=sys.stderr)
        return 1
    width, height = (int(x) for x in ns.size.split(","))

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    lc = cluster(mode="auto")
    try:
        lc.start()
        lc.wait_for_leader(60)
        assert lc.credentials is not None
        tokens = lc.credentials.agents
        asyncio.run(stage_seed_cycle(lc.endpoints, tokens))
        _until(lambda: decided(lc) >= 1, 30, "the first recovery")
        with lc.client() as ops:
            from waitgraph.statemachine.recovery_state import RolloutMode

            ops.set_mode(RolloutMode.SHADOW)
        asyncio.run(stage_ring(lc.endpoints, tokens))
        _until(lambda: decided(lc) >= 2, 30, "the shadow decision")
        # b never acknowledges its cancel: past the cancellation SLO (30 s) it is quarantined
        _until(lambda: quarantined(lc), 60, "exec:b's quarantine")
        time.sleep(1.5)  # every replica applies it
        node = lc.members[0]
        url = f"http://{node.http_address}/?token={lc.credentials.operator}"
        shots = [(ns.out, 0)] + ([(ns.out_large, ns.executions)] if ns.executions else [])
        for out, crowd in shots:
            if crowd:
                asyncio.run(stage_crowd(lc.endpoints, tokens, crowd))
                # this node applies it and builds the documents of it
                shows_more_than(node.http_address, lc.credentials.operator, crowd)
            out.parent.mkdir(parents=True, exist_ok=True)
            with browser_page(browser, (width, height)) as page:
                _, first_s = open_view(page, url)
                click_node(page, "exec:pipe-d")  # the victim: its details and scores
                page.wait_for_timeout(300)
                page.screenshot(path=str(out))
            print(f"saved {out} ({out.stat().st_size} bytes): {node.node_id}'s live view, drawn after {first_s:.2f} s")
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
