"""The live view in a real headless browser against three real nodes with a real deadlock.

A LocalCluster with the live view on every node, rollout mode shadow (so the confirmed cycle stays
on the page with the victim recovery would pick), the second seed's ring staged through the
AgentService with a wait reason that is markup (cluster/dev/showcase.py ``stage_ring``). Debian's
chromium loads a follower's page, lets its script poll, and dumps the DOM: the cycle, the victim
and its scores must be there, the markup must be inert text. Skipped only when no chromium can be
found (CI installs it: .ci/run), and the skip says so; the node wiring (JSON, /metrics on the same
port) and the CLI's SVG are checked without it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from waitgraph.dev import showcase
from waitgraph.dev.localcluster import LocalCluster

from .harness import REPO

EVIL = '<img src=x onerror="document.body.dataset.pwned=1">'
BROWSER = showcase.find_chromium()
needs_browser = pytest.mark.skipif(
    BROWSER is None,
    reason="chromium could not be found or installed (apt-get install chromium): the browser test cannot run",
)


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    lc = LocalCluster(
        root=tmp_path_factory.mktemp("liveview"),
        nodes=3,
        mode="shadow",
        agents=showcase.PIPELINE,
        http=True,
        serve_args=("--recovery-confirmation-window-ms", "300", "--detect-interval-ms", "50"),
    )
    try:
        lc.start()
        lc.wait_for_leader(60)
        assert lc.credentials is not None
        asyncio.run(showcase.stage_ring(lc.endpoints, lc.credentials.agents, reason=EVIL))
        showcase._until(lambda: showcase.decided(lc) >= 1, 30, "the shadow decision")
        yield lc
    except BaseException:
        for m in lc.members:
            print(f"--- {m.node_id} ---\n{m.log_tail()}")
        raise
    finally:
        lc.close()


def dump(url: str) -> str:
    assert BROWSER is not None
    out = showcase.chromium(BROWSER, url, "--dump-dom")
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@needs_browser
def test_a_follower_page_shows_the_cycle_and_the_victim(ring: LocalCluster) -> None:
    assert ring.credentials is not None
    with ring.client("operator") as ops:
        leader = ops.wait_for_leader(10)
    node = next(m for m in ring.members if m.node_id != leader.node_id)
    dom = dump(f"http://{node.http_address}/?token={ring.credentials.operator}")
    assert 'data-loaded="1"' in dom, dom[:2000]
    polls = int(re.search(r'data-polls="(\d+)"', dom).group(1))  # type: ignore[union-attr]
    assert polls >= 2, "the page did not refresh itself"
    # the graph: graphviz's SVG, inline, with the cycle and the victim marked
    assert re.search(r'<g id="node\d+" class="node cycle confirmed victim">\s*<title>exec:pipe-d</title>', dom)
    for member in ("exec:pipe-a", "exec:pipe-b", "exec:pipe-c"):
        assert re.search(rf'class="node cycle confirmed">\s*<title>{member}</title>', dom), member
    # the cycle table, the victim and every policy term's score
    assert '<span class="tag confirmed">confirmed</span>' in dom
    assert "exec:pipe-a@g1 → exec:pipe-b@g1 → exec:pipe-c@g1 → exec:pipe-d@g1" in dom
    assert '<b class="mono victim-id">exec:pipe-d</b>' in dom
    row = re.search(r'<tr class="victim">(.*?)</tr>', dom, re.S)
    assert row is not None and "exec:pipe-d@g1" in row.group(1) and "victim" in row.group(1)
    for term in ("external side effects", "checkpoint", "priority", "cost consumed", "unique evidence"):
        assert f"<th>{term}</th>" in dom
    assert "had recovery acted, the victim would have been exec:pipe-d" in dom.lower()
    assert f"Read from {node.node_id}'s own replica" in dom and "stale by design" in dom
    assert "mode shadow" in dom and "admission open" in dom
    # the agent's markup is text: escaped in the DOM, never an element, its handler never ran
    assert "&lt;img src=x onerror=" in dom
    assert "<img" not in dom and "pwned" not in dom.replace("dataset.pwned=1", "")
    assert 'data-pwned="1"' not in dom


@needs_browser
def test_a_wrong_token_gets_the_login_form_and_no_data(ring: LocalCluster) -> None:
    assert ring.credentials is not None
    node = ring.members[0]
    dom = dump(f"http://{node.http_address}/?token=not-a-known-token-0000")
    assert "unknown token" in dom and 'action="/login"' in dom and "pipe-" not in dom
    agent = ring.credentials.agents["pipe-a"]
    dom = dump(f"http://{node.http_address}/?token={agent}")
    assert "may not see the live view" in dom and "pipe-d" not in dom


def get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_every_node_serves_the_view_json_and_metrics_on_one_port(ring: LocalCluster) -> None:
    """No browser needed: the wiring in cluster/node/server.py, on each of the three nodes."""
    assert ring.credentials is not None
    exported: list[bool] = []
    for m in ring.members:
        base = f"http://{m.http_address}"
        assert get(f"{base}/api/view")[0] == 401
        assert get(f"{base}/api/view", ring.credentials.agents["pipe-a"])[0] == 403
        status, body = get(f"{base}/api/view", ring.credentials.operator)
        assert status == 200
        doc = json.loads(body)
        assert doc["node"]["node_id"] == m.node_id and doc["node"]["stale"] is True
        assert [c["kind"] for c in doc["cycles"]] == ["confirmed"]
        assert doc["victims"][0]["victims"] == ["exec:pipe-d"] and doc["mode"] == "shadow"
        status, metrics = get(f"{base}/metrics")  # open, like --metrics-addr
        assert status == 200 and "waitgraph_raft_term " in metrics and "grpc_server_handled_total" in metrics
        # the replica's series come from the leader only (docs/metrics.md): sum() over nodes is right
        leader = "waitgraph_replica_series_exported 1.0" in metrics
        assert ("waitgraph_epoch " in metrics) is leader, (m.node_id, leader)
        exported.append(leader)
    assert exported.count(True) == 1, exported


def wg(ring: LocalCluster, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
    env.update(ring.env())
    env["PYTHONPATH"] = str(REPO)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "waitgraph", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_cli_draws_the_same_svg_and_says_when_graphviz_is_missing(ring: LocalCluster, tmp_path: Path) -> None:
    out = wg(ring, "graph", "-o", "svg")
    if out.returncode != 0 and "graphviz is not installed" in out.stderr:
        pytest.skip("graphviz (dot) is not installed")
    assert out.returncode == 0, out.stderr
    assert out.stdout.lstrip().startswith("<?xml") and out.stdout.rstrip().endswith("</svg>")
    # graphviz writes "-" in titles as &#45; (the browser's DOM above has it decoded)
    assert re.search(r'class="node cycle confirmed victim">\s*<title>exec:pipe&#45;d</title>', out.stdout)
    assert "&lt;img src=x" in out.stdout and "<img" not in out.stdout
    dot = wg(ring, "graph", "-o", "dot")
    assert (
        dot.returncode == 0 and '"exec:pipe-d" [shape="box"' in dot.stdout and "VICTIM if recovery acted" in dot.stdout
    )
    missing = wg(ring, "graph", "-o", "svg", path=str(tmp_path))  # no `dot` on this PATH
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip().splitlines() == [
        "waitgraph graph: graphviz is not installed (no `dot` on PATH): install it, e.g. apt-get install graphviz"
    ]
