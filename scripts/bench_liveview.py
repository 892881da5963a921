"""Live view benchmark: what the page costs an operator's browser and a node, on real clusters.

Prints a table; asserts nothing. Usage:
    scripts/bench liveview [--sizes 100,1000,10000] [--seconds 8] [--repeat 3]

For each size, a fresh local 3-node cluster (cluster/dev/showcase.py ``cluster``) in shadow mode
with the second seed's ring confirmed (its victim decided) and ``n`` more executions with ``2n``
waits (``stage_crowd``), the view read on a follower by Debian's chromium (headless, Playwright).
Then an agent heartbeats every 0.25 s (so the applied index moves and the node rebuilds the
documents about once a second) for ``--seconds`` with the page open, and as long again with no
page open (the anchor: the same writes, no view).

Columns:
- ``first render s``: the page's own clock from navigation to the graph drawn
  (``showcase.open_view``). Cold: the first page the node serves since it started, to the first
  drawing of the build its feed calls current: the node answers with the build it keeps ready
  while no page is open (at most ``liveweb.IDLE_REBUILD_S`` old, labelled with its applied index),
  or waits for its first one. Cold fresh: the same page, to its first drawing of a state at least
  as new as the node's commit index when the page opened (``showcase.fresh_render_s``: a build
  made after the page asked). Warm (best of ``--repeat`` loads): the node answers at once with its
  last build while the feed asks for a new one: the first drawing, and the first drawing of the
  build the feed calls current (with the heartbeats, that is a fresh build each time).
- ``view / focus / graph KB``: the panels' JSON, the graph's focus (the cycles' neighbourhood: what
  the page fetches while its toolbar is untouched) and the whole graph's (raw, and gzip as sent).
- ``reader ms``: CPU of the forked reader per build (detection pass, both documents); ``server ms``:
  the node's own thread per build (parsing the panels, gzip); median of the builds.
- ``node CPU ms/s open / closed``: the node process and its reaped readers (psutil), per second
  of wall time, with the page open and with none: the difference is what watching costs.
- ``lock ms``: how long the replica's lock was held per build (reading the write counter; and
  the fork, when the state moved before it and the node forked again under the lock): median /
  max. ``fork ms``: the ``os.fork`` call in the node (median / max), which holds the GIL, so it
  pauses every thread of the node for as long, lock or not; ``reforks``: builds that forked twice.
  ``node RSS MB``: the node's resident memory, which the fork's cost grows with.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from waitgraph.dev import showcase
from waitgraph.sdk import Client
from waitgraph.statemachine import commands as C


def heartbeats(endpoints: list[str], token: str, agent: str, stop: threading.Event) -> None:
    async def run() -> None:
        async with Client(endpoints, token) as client:
            while not stop.is_set():
                await client.submit(C.Heartbeat(agent_id=agent))
                await asyncio.sleep(0.25)

    asyncio.run(run())


def node_cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


def builds(base: str, token: str, seconds: float) -> list[dict[str, float]]:
    """The build stats the node reports (``/api/view`` ``build``), one per new graph version."""
    seen: dict[int, dict[str, float]] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        request = urllib.request.Request(f"{base}/api/view", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            doc = json.loads(reply.read())
        seen[doc["graph_version"]] = doc["build"]
        time.sleep(0.5)
    return list(seen.values())


def measure(n: int, seconds: float, repeat: int, browser: str | None) -> dict[str, Any]:
    lc = showcase.cluster(mode="shadow")
    try:
        lc.start()
        lc.wait_for_leader(60)
        assert lc.credentials is not None
        tokens = lc.credentials.agents
        asyncio.run(showcase.stage_ring(lc.endpoints, tokens))
        showcase._until(lambda: showcase.decided(lc) >= 1, 60, "the shadow decision")
        asyncio.run(showcase.stage_crowd(lc.endpoints, tokens, n))
        time.sleep(1.5)  # every replica applies it
        with lc.client("operator") as ops:
            leader = ops.wait_for_leader(10)
        node = next(m for m in lc.members if m.node_id != leader.node_id)
        assert node.pid is not None
        proc = psutil.Process(node.pid)
        base = f"http://{node.http_address}"
        url = f"{base}/?token={lc.credentials.operator}"
        stop = threading.Event()
        writer = threading.Thread(target=heartbeats, args=(lc.endpoints, tokens["pipe-g"], "pipe-g", stop))
        writer.start()
        try:
            cold = warm = current = fresh = float("nan")
            cold_phases: dict[str, int] = {}
            fresh_phases: Any = None
            drawn: Any = "-"
            with contextlib.ExitStack() as stack:
                if browser is not None:
                    page = stack.enter_context(showcase.browser_page(browser))
                    cold = showcase.open_view(page, url, timeout_s=60)[1]
                    cold_phases = page.evaluate("liveview.firstTiming")
                    nav = page.evaluate(
                        "(n => [n.redirectEnd, n.requestStart, n.responseStart, n.responseEnd])"
                        "(performance.getEntriesByType('navigation')[0])"
                    )
                    cold_phases["page"] = "redirected {:.0f}, asked {:.0f}, first byte {:.0f}, loaded {:.0f}".format(
                        *nav
                    )
                    fresh = showcase.fresh_render_s(page, timeout_s=60)
                    fresh_phases = page.evaluate("[liveview.freshTiming, liveview.feedLog]")
                    loads = [showcase.open_view(page, url, timeout_s=60) for _ in range(repeat)]
                    warm = min(first for first, _ in loads)
                    current = min(now for _, now in loads)
                cpu0, t0 = node_cpu_s(proc), time.monotonic()
                stats = builds(base, lc.credentials.operator, seconds)
                open_rate = (node_cpu_s(proc) - cpu0) / (time.monotonic() - t0)
                if browser is not None:
                    drawn = page.evaluate("liveview.cy.nodes().length")
                rss_mb = proc.memory_info().rss / 2**20
            time.sleep(1.0)
            cpu0, t0 = node_cpu_s(proc), time.monotonic()
            time.sleep(seconds)
            closed_rate = (node_cpu_s(proc) - cpu0) / (time.monotonic() - t0)
        finally:
            stop.set()
            writer.join(30)

        def med(key: str) -> float:
            return statistics.median(b[key] for b in stats)

        return {
            "executions": n + 7,
            "cold": cold,
            "fresh": fresh,
            "warm": warm,
            "current": current,
            "view_kb": med("view_bytes") / 1024,
            "graph_kb": med("graph_bytes") / 1024,
            "gzip_kb": med("graph_gzip_bytes") / 1024,
            "focus_kb": med("focus_bytes") / 1024,
            "focus_gzip_kb": med("focus_gzip_bytes") / 1024,
            "reader_ms": med("reader_cpu_ms"),
            "server_ms": med("server_cpu_ms"),
            "open": open_rate * 1000,
            "closed": closed_rate * 1000,
            "lock_med": med("lock_ms"),
            "lock_max": max(b["lock_ms"] for b in stats),
            "fork_med": med("fork_ms"),
            "fork_max": max(b["fork_ms"] for b in stats),
            "reforks": sum(1 for b in stats if b["forks"] > 1),
            "builds": len(stats),
            "rss": rss_mb,
            "drawn": drawn,
            "cold_phases": cold_phases,
            "fresh_phases": fresh_phases,
            "build_ms": med("build_ms"),
        }
    finally:
        lc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="crowd sizes (the ring adds 7 executions)")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--repeat", type=int, default=3)
    ns = parser.parse_args()
    browser = showcase.find_chromium()
    if browser is None:
        print("no chromium on PATH (apt-get install chromium): no first-render figures, and no page open")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in psutil.getloadavg())}")
    print(
        "| executions | first render s (cold / cold fresh / warm / warm current) | view KB "
        "| focus KB (gzip) | graph KB (gzip) "
        "| reader ms | server ms | node CPU ms/s (page open / closed) | lock ms, under the lock (median / max) "
        "| fork ms (median / max) | reforks | node RSS MB | builds | drawn |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    notes: list[dict[str, Any]] = []
    for n in (int(s) for s in ns.sizes.split(",")):
        r = measure(n, ns.seconds, ns.repeat, browser)
        notes.append(r)
        print(
            f"| {r['executions']:,} | {r['cold']:.2f} / {r['fresh']:.2f} / {r['warm']:.2f} / {r['current']:.2f} "
            f"| {r['view_kb']:.1f} | {r['focus_kb']:.1f} ({r['focus_gzip_kb']:.1f}) "
            f"| {r['graph_kb']:.0f} ({r['gzip_kb']:.0f}) | {r['reader_ms']:.0f} | {r['server_ms']:.1f} "
            f"| {r['open']:.0f} / {r['closed']:.0f} | {r['lock_med']:.2f} / {r['lock_max']:.2f} "
            f"| {r['fork_med']:.2f} / {r['fork_max']:.2f} | {r['reforks']} | {r['rss']:.0f} "
            f"| {r['builds']} | {r['drawn']} |",
            flush=True,
        )
    for r in notes:
        p = r["cold_phases"] or {}
        print(
            f"cold page at {r['executions']:,} (the page itself, ms from navigation: {p.get('page', '-')}), "
            f"its first graph fetch ({p.get('part', '-')}): asked at {p.get('start', '-')} ms, answered at "
            f"{p.get('reply', '-')}, parsed {p.get('parsed', '-')}, indexed {p.get('indexed', '-')}, drawn "
            f"{p.get('drawn', '-')} (ms from navigation); a build on the node (fork to parsed, median): "
            f"{r['build_ms']:.0f} ms"
        )
        if r["fresh_phases"]:
            t, feed = r["fresh_phases"]
            print(
                f"  its first fresh drawing: {t}; the feed's first messages (ms, graph version, commit index): {feed}"
            )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in psutil.getloadavg())}")


if __name__ == "__main__":
    main()
