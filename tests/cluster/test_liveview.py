"""The live view's server (cluster/ops/liveweb.py) and documents (cluster/ops/liveview.py) on an
in-process replica, through aiohttp's test client: auth, headers, content, escaping, the graph
document the page draws from, a click's details, the build rate, the feed, HTTPS on a real socket."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from importlib import resources
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import ClientSession, TCPConnector
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Counter

from tests.world import World
from waitgraph.node.auth import TokenStore
from waitgraph.node.lessor import Lessor
from waitgraph.node.service import graph_response
from waitgraph.ops import liveview, liveweb, render
from waitgraph.statemachine.commands import DeclareSatisfier, ExpireSession, JoinSession, RecordSideEffect
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.statemachine.recovery_state import RolloutMode

OPERATOR, ADMIN, AGENT = "operator-token-0123456789", "admin-token-0123456789abc", "agent-token-0123456789abc"
EVIL = '<img src=x onerror="document.body.dataset.pwned=1"><script>alert(1)</script>'


def tokens() -> TokenStore:
    return TokenStore.parse(
        {
            "tokens": [
                {"name": "op", "role": "operator", "token": OPERATOR},
                {"name": "root", "role": "admin", "token": ADMIN},
                {"name": "agent-a", "role": "agent", "agent_id": "a", "token": AGENT},
            ]
        }
    )


def ring_world(reason: str = EVIL, mode: RolloutMode = RolloutMode.SHADOW) -> World:
    """The second seed's ring in shadow mode, recovered once: a confirmed cycle whose decision
    names exec:pipe-d (no external effects, a checkpoint) as the victim; nothing cancelled."""
    w = World()
    w.configure(mode=mode)
    ring = ["pipe-a", "pipe-b", "pipe-c", "pipe-d"]
    profile: dict[str, dict[str, Any]] = {
        "pipe-a": dict(priority=1),
        "pipe-b": dict(priority=2),
        "pipe-c": dict(priority=1, unique_evidence=True),
        "pipe-d": dict(priority=1, checkpoint=True),
    }
    for a in ring:
        w.execution(a, **profile[a])
        w.hold(f"exec:{a}", f"resource:{a[5:]}-lock")
    w.ok(
        "agent:pipe-a",
        RecordSideEffect(execution_id="exec:pipe-a", generation=1, effect_id="e1", outcome=EffectOutcome.COMMITTED),
    )
    for i, a in enumerate(ring):
        nxt = ring[(i + 1) % len(ring)]
        w.wait(f"exec:{a}", f"resource:{nxt[5:]}-lock", reason if i == 0 else f"needs {nxt[5:]}'s lock")
    [out] = w.recover()
    assert out.ok
    return w


def make_view(
    w: World, metrics: CollectorRegistry | None = None, applied: Any = lambda: 42, **kw: Any
) -> liveweb.LiveView:
    return liveweb.LiveView(
        liveweb.InProcessReplica(w.m, applied), tokens(), liveview.NodeInfo("n1", None), metrics=metrics, **kw
    )


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(liveweb.make_app(make_view(ring_world())))) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- auth --------------------------------------------------------------------------------------------------


async def test_no_token_is_401_and_shows_no_data(client: TestClient[Any, Any]) -> None:
    for path in ("/api/view", "/api/graph", "/api/details?id=exec:pipe-d", "/events"):
        reply = await client.get(path)
        assert reply.status == 401 and (await reply.json())["error"] == "unauthenticated", path
    reply = await client.get("/")
    body = await reply.text()
    assert reply.status == 401 and reply.content_type == "text/html"
    assert 'action="/login"' in body and "pipe" not in body
    assert (await client.get("/api/view", headers=bearer("not-a-token-at-all-xyz"))).status == 401


async def test_the_login_form_starts_the_first_build_and_only_that_one() -> None:
    ticks = itertools.count(0, 10)  # every build would be due: the index moves, time flies
    view = make_view(ring_world(), applied=lambda: next(ticks), monotonic=lambda: float(next(ticks)))
    async with TestClient(TestServer(liveweb.make_app(view))) as c:
        assert (await c.get("/login")).status == 200
        for _ in range(100):  # built in the background while the operator types the token
            if view.docs.builds:
                break
            await asyncio.sleep(0.02)
        for _ in range(3):
            assert (await c.get("/")).status == 401 and (await c.get("/login")).status == 200
        await asyncio.sleep(0.1)
        assert view.docs.builds == 1


async def test_an_agent_token_is_refused_with_403(client: TestClient[Any, Any]) -> None:
    reply = await client.get("/api/view", headers=bearer(AGENT))
    assert reply.status == 403 and (await reply.json())["error"] == "wrong_role"
    reply = await client.get("/", params={"token": AGENT}, allow_redirects=False)
    assert reply.status == 403 and "may not see the live view" in await reply.text()
    reply = await client.post("/login", data={"token": AGENT}, allow_redirects=False)
    assert reply.status == 403 and "Set-Cookie" not in reply.headers


async def test_operator_and_admin_tokens_by_header_query_cookie_and_form(client: TestClient[Any, Any]) -> None:
    for token in (OPERATOR, ADMIN):
        assert (await client.get("/api/view", headers=bearer(token))).status == 200
    # ?token= sets an HttpOnly cookie and redirects to a bare / (the token leaves the address bar)
    reply = await client.get("/", params={"token": OPERATOR}, allow_redirects=False)
    assert reply.status == 303 and reply.headers["Location"] == "/"
    cookie = reply.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    # the client's jar now has it
    reply = await client.get("/")
    assert reply.status == 200 and '<script src="/static/liveview.js"' in await reply.text()
    assert (await client.get("/api/view")).status == 200
    # logging out clears it
    reply = await client.get("/logout", allow_redirects=False)
    assert reply.status == 303 and reply.headers["Location"] == "/login"
    assert f"{liveweb.COOKIE}=" in reply.headers["Set-Cookie"] and "Max-Age=0" in reply.headers["Set-Cookie"]
    client.session.cookie_jar.clear()
    assert (await client.get("/api/view")).status == 401
    # the login form
    reply = await client.post("/login", data={"token": ADMIN}, allow_redirects=False)
    assert reply.status == 303 and reply.headers["Set-Cookie"].startswith(f"{liveweb.COOKIE}=")
    reply = await client.post("/login", data={"token": "wrong-token-wrong-token"}, allow_redirects=False)
    assert reply.status == 401 and "unknown token" in await reply.text()
    # read-only
    assert (await client.post("/api/view", headers=bearer(OPERATOR))).status == 405


async def test_security_headers_static_files_and_metrics() -> None:
    registry = CollectorRegistry()
    Counter("waitgraph_test_total", "a counter", registry=registry).inc()
    async with TestClient(TestServer(liveweb.make_app(make_view(ring_world(), registry)))) as c:
        reply = await c.get("/api/view", headers=bearer(OPERATOR))
        csp = reply.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert reply.headers["X-Content-Type-Options"] == "nosniff" and reply.headers["Cache-Control"] == "no-store"
        for name in (
            "liveview.js",
            "prefetch.js",
            "liveview.css",
            "vendor/cytoscape.min.js",
            "vendor/cytoscape-dagre.min.js",
        ):
            reply = await c.get(f"/static/{name}")
            assert reply.status == 200 and await reply.read(), name
            assert reply.headers["Content-Security-Policy"] == csp  # every response, static ones too
        assert (await c.get("/static/../liveview.py")).status == 404
        assert (await c.get("/static/")).status in (403, 404)  # no directory listing
        reply = await c.get("/metrics")  # open, like --metrics-addr
        assert reply.status == 200 and "waitgraph_test_total 1.0" in await reply.text()
    async with TestClient(TestServer(liveweb.make_app(make_view(ring_world())))) as c:
        assert (await c.get("/metrics")).status == 404  # not served without a registry


async def test_the_page_says_the_commit_index_it_was_served_at() -> None:
    status = SimpleNamespace(commit_index=77)
    info = liveview.NodeInfo("n1", lambda: status)
    view = liveweb.LiveView(liveweb.InProcessReplica(ring_world().m, lambda: 42), tokens(), info)
    async with TestClient(TestServer(liveweb.make_app(view))) as c:
        html = await (await c.get("/", headers=bearer(OPERATOR))).text()
        assert '<meta name="waitgraph-commit-index" content="77">' in html
        status.commit_index = 78  # read when each page is served
        assert 'content="78"' in await (await c.get("/", headers=bearer(OPERATOR))).text()
    async with TestClient(TestServer(liveweb.make_app(make_view(ring_world())))) as c:  # no Raft status
        assert (
            '<meta name="waitgraph-commit-index" content="">'
            in await (await c.get("/", headers=bearer(OPERATOR))).text()
        )


# -- content --------------------------------------------------------------------------------------------------


async def test_the_view_shows_the_confirmed_cycle_the_victim_and_every_policy_term() -> None:
    w = ring_world()
    async with TestClient(TestServer(liveweb.make_app(make_view(w)))) as client:
        doc = await (await client.get("/api/view", headers=bearer(OPERATOR))).json()
    [cycle] = doc["cycles"]
    assert cycle["kind"] == "confirmed" and cycle["proposal"] == "COMMITTED" and cycle["decision_ids"] == ["d1"]
    assert cycle["members"] == ["exec:pipe-a@g1", "exec:pipe-b@g1", "exec:pipe-c@g1", "exec:pipe-d@g1"]
    [victim] = doc["victims"]
    assert victim["kind"] == "SHADOW" and victim["victims"] == ["exec:pipe-d"] and victim["acted"] is False
    assert victim["decided_by"] == "checkpoint"
    assert [s["execution_id"] for s in victim["scores"]] == render.policy_order(liveview.snapshot(w.m).decisions[0])
    assert set(victim["scores"][0]) >= {
        "external_side_effects",
        "checkpoint",
        "priority",
        "cost_consumed",
        "unique_evidence",
        "rank",
        "role",
    }
    assert victim["terms"] == [t for t, _ in render.POLICY_TERMS]
    assert doc["mode"] == "shadow" and doc["epoch"] == 0 and doc["admission"]["cluster_frozen"] is None
    assert doc["node"]["stale"] is True and "STALE" in doc["node"]["read_note"]
    assert doc["node"]["applied_index"] == 42 and doc["graph_version"] == 42
    assert doc["decisions"][0]["decision_id"] == "d1" and doc["decisions"][0]["epoch"] is None
    assert doc["build"]["graph_bytes"] > 0 and doc["build"]["lock_ms"] >= 0


async def test_the_summary_strip() -> None:
    w = ring_world()
    w.execution("lone", agent="gone")
    w.wait("exec:lone", w.target("approval:later"), "sign-off")
    w.configure(mode=RolloutMode.SHADOW)
    async with TestClient(TestServer(liveweb.make_app(make_view(w)))) as c:
        s = (await (await c.get("/api/view", headers=bearer(OPERATOR))).json())["summary"]
    assert s["executions_by_status"] == {"WAITING": 5}
    assert s["waits_by_kind"] == {"approval": 1, "resource": 4}
    assert {"reason": "sign-off", "count": 1} in s["waits_by_reason"] and s["reasons_total"] == 5
    oldest = s["longest_waits"]
    assert [x["waiter_id"] for x in oldest][:4] == ["exec:pipe-a", "exec:pipe-b", "exec:pipe-c", "exec:pipe-d"]
    assert oldest[0]["age_ms"] >= oldest[-1]["age_ms"] and oldest[0]["edge_version"] == 1
    assert s["cycles"] == {"candidate": 0, "confirmed": 1}
    assert s["unconverged_cancellations"] == 0 and s["quarantined"] == 0
    assert s["orphaned"] == [] and s["orphaned_total"] == 0
    # the owner of exec:lone stops heartbeating: the leader expires its session, the execution is orphaned
    w.ok("agent:gone", JoinSession(agent_id="gone", lease_ms=1000))
    w.ok("node:n1", ExpireSession(agent_id="gone", incarnation=w.st.sessions["gone"].incarnation), dt=2000)
    s = liveview.summary(w.st, liveview.snapshot(w.m).cycles, 0, 0)
    assert s["orphaned"] == ["exec:lone"] and s["orphaned_total"] == 1


async def test_the_sessions_panel_shows_the_count_heartbeat_ages_and_who_is_suspended() -> None:
    """The document's ``sessions``: the lessor's view read at each document (heartbeats are not in
    the replica). The leader names the suspended agents, the longest silent first; a follower knows
    only the heartbeats it received and names none; a view without a lessor says so (None)."""
    w = World()
    for agent in ("quiet", "busy", "mid"):
        w.ok(f"agent:{agent}", JoinSession(agent_id=agent, lease_ms=30_000), dt=0)
    now = [w.t]
    leader = Lessor(lambda: now[0], lambda: w.st)
    follower = Lessor(lambda: now[0], lambda: w.st)
    leader.promote()
    now[0] += 10_000
    leader.heartbeat("mid")
    follower.heartbeat("mid")
    now[0] += 10_000
    leader.heartbeat("busy")
    now[0] += 1_500  # quiet: 21.5 s silent, mid 11.5 s, busy 1.5 s

    async def doc(lessor: Lessor | None) -> Any:
        async def panel() -> dict[str, Any]:
            assert lessor is not None
            return liveview.sessions_panel(lessor.view(w.st, now[0]))

        view = make_view(w, sessions=None if lessor is None else panel)
        async with TestClient(TestServer(liveweb.make_app(view))) as c:
            return (await (await c.get("/api/view", headers=bearer(OPERATOR))).json())["sessions"]

    ss = await doc(leader)
    assert (ss["active"], ss["leading"], ss["heartbeat_ages"]) == (3, True, 3)
    assert (ss["oldest_heartbeat_age_s"], ss["heartbeat_age_p99_s"]) == (21, 21)
    assert ss["suspended_count"] == 1 and ss["suspended"] == [{"agent_id": "quiet", "heartbeat_age_s": 21}]
    assert dict(ss["heartbeat_age_buckets"])[2.0] == 1 and dict(ss["heartbeat_age_buckets"])[15.0] == 2
    ss = await doc(follower)
    assert (ss["active"], ss["leading"], ss["here"], ss["heartbeat_ages"]) == (3, False, 1, 1)
    assert ss["suspended"] == [] and ss["suspended_count"] == 0 and ss["oldest_heartbeat_age_s"] == 11
    assert await doc(None) is None


def test_the_summary_counts_a_cancellation_that_has_not_converged() -> None:
    w = ring_world(mode=RolloutMode.AUTO)  # recovery acts: the victim is asked to stop, nobody acks
    s = liveview.snapshot(w.m).summary
    assert s["unconverged_cancellations"] == 1 and s["executions_by_status"]["CANCELLING"] == 1
    assert s["cycles"] == {"candidate": 0, "confirmed": 0}  # broken: the victim's waits are closed


async def test_the_graph_document_has_every_node_the_cycle_and_the_victim(client: TestClient[Any, Any]) -> None:
    reply = await client.get("/api/graph", headers=bearer(OPERATOR))
    assert reply.status == 200 and reply.headers["X-Graph-Version"] == "42"
    g = await reply.json()
    assert [x[0] for x in g["executions"]] == ["exec:pipe-a", "exec:pipe-b", "exec:pipe-c", "exec:pipe-d"]
    assert g["executions"][3][1:3] == [1, "WAITING"] and g["runs"][g["executions"][3][3]] == "run-pipe-d"
    assert ["resource:a-lock", "resource", 1, None, ["exec:pipe-a"]] in g["targets"]
    [wait] = [x for x in g["waits"] if x[0] == "exec:pipe-a"]
    assert wait[1] == "resource:b-lock" and g["reasons"][wait[2]] == EVIL and wait[3] == 1
    [cycle] = g["cycles"]
    assert cycle["kind"] == "confirmed" and sorted(cycle["members"]) == [f"exec:pipe-{x}" for x in "abcd"]
    assert g["victims"] == {"exec:pipe-d": "d1"}


async def test_the_focus_part_is_served_when_asked_and_the_whole_graph_otherwise() -> None:
    w = ring_world()
    w.execution("loner")  # far from the ring: in the whole graph, not in its focus
    w.hold("exec:loner", "resource:elsewhere")
    async with TestClient(TestServer(liveweb.make_app(make_view(w)))) as c:
        whole = await c.get("/api/graph", headers=bearer(OPERATOR))
        near = await c.get("/api/graph?part=focus", headers={**bearer(OPERATOR), "Accept-Encoding": "gzip"})
        assert whole.headers["X-Graph-Part"] == "whole" and near.headers["X-Graph-Part"] == "focus"
        assert near.headers["X-Graph-Version"] == whole.headers["X-Graph-Version"] == "42"
        g, f = await whole.json(), await near.json()
    assert "exec:loner" in [x[0] for x in g["executions"]] and "focus" not in g
    assert [x[0] for x in f["executions"]] == [f"exec:pipe-{x}" for x in "abcd"]
    assert f["focus"] == {"hops": liveview.FOCUS_HOPS, "executions": 5, "targets": 5}
    assert "resource:elsewhere" in [t[0] for t in g["targets"]] and "resource:elsewhere" not in [
        t[0] for t in f["targets"]
    ]
    assert f["cycles"] == g["cycles"] and f["victims"] == g["victims"]


def test_the_focus_is_every_node_within_the_most_hops_that_fit() -> None:
    # exec:a and exec:b wait on each other's locks; c waits on a's lock (1 hop) and on artifact:far,
    # produced by f (2 hops), and on exec:g (2 hops); d waits on c's output (2 hops); e stands alone
    ex = lambda i: [f"exec:{i}", 1, "WAITING", 0, 0]  # noqa: E731
    doc: dict[str, Any] = {
        "runs": ["r"],
        "agents": ["g"],
        "reasons": ["why"],
        "statuses": ["WAITING"],
        "kinds": ["artifact", "resource"],
        "executions": [ex(i) for i in "gfedcba"],
        "targets": [
            ["resource:x", "resource", 1, None, ["exec:a"]],
            ["resource:y", "resource", 1, None, ["exec:b"]],
            ["artifact:far", "artifact", 0, "exec:f", []],
            ["artifact:c-out", "artifact", 0, "exec:c", []],
            ["resource:z", "resource", 1, None, ["exec:e"]],
        ],
        "waits": [
            ["exec:d", "artifact:c-out", 0, 1, 0],
            ["exec:c", "artifact:far", 0, 1, 0],
            ["exec:c", "exec:g", 0, 1, 0],
            ["exec:c", "resource:x", 0, 1, 0],
            ["exec:b", "resource:x", 0, 1, 0],
            ["exec:a", "resource:y", 0, 1, 0],
        ],
        "cycles": [{"digest": "c1", "kind": "confirmed", "members": ["exec:a", "exec:b"]}],
        "victims": {"exec:b": "d1"},
    }

    def kept(f: dict[str, Any] | None) -> list[str]:
        assert f is not None
        return [r[0] for r in f["executions"]] + [r[0] for r in f["targets"]]

    one = liveview.focus(doc, max_hops=1)
    assert one is not None and one["focus"] == {"hops": 1, "executions": 7, "targets": 5}
    # the whole document's order; a target on the way costs no hop (artifact:far is at hop 1)
    assert kept(one) == ["exec:c", "exec:b", "exec:a", "resource:x", "resource:y", "artifact:far", "artifact:c-out"]
    assert one["waits"] == [w for w in doc["waits"] if w[0] != "exec:d" and w[1] != "exec:g"]  # between kept nodes
    assert one["outside"] == ["exec:f"]  # artifact:far's producer, named in its label
    two = liveview.focus(doc)
    assert two is not None and "exec:e" not in kept(two) and "resource:z" not in kept(two)
    assert two["focus"]["hops"] == liveview.FOCUS_HOPS and two["outside"] == []
    assert set(kept(two)) == {*kept(one), "exec:f", "exec:d", "exec:g"}
    # the most hops that fit: 4 nodes within 0 hops, 7 within 1
    assert liveview.focus(doc, max_nodes=6)["focus"]["hops"] == 0  # type: ignore[index]
    assert kept(liveview.focus(doc, max_nodes=4)) == ["exec:b", "exec:a", "resource:x", "resource:y"]
    assert liveview.focus(doc, max_nodes=3) is None  # the cycle alone is more
    assert liveview.focus({**doc, "cycles": [], "victims": {}}) is None  # nothing to focus on


async def test_a_click_gets_the_details_with_edges_holders_and_scores(client: TestClient[Any, Any]) -> None:
    d = await (await client.get("/api/details", params={"id": "exec:pipe-d"}, headers=bearer(OPERATOR))).json()
    assert d["kind"] == "execution" and d["generation"] == 1 and d["status"] == "WAITING" and d["checkpoint"] is True
    assert [(x["target_id"], x["edge_version"]) for x in d["waits"]] == [("resource:a-lock", 1)]
    assert d["holds"] == ["resource:d-lock"] and d["session"] == "ACTIVE"
    [decision] = d["decisions"]
    assert decision["decision_id"] == "d1" and decision["victims"] == ["exec:pipe-d"]
    assert decision["scores"][0]["execution_id"] == "exec:pipe-d" and decision["scores"][0]["role"] == "victim"
    a = await (await client.get("/api/details", params={"id": "exec:pipe-a"}, headers=bearer(OPERATOR))).json()
    assert [(s["effect_id"], s["outcome"]) for s in a["side_effects"]] == [("e1", "COMMITTED")]
    assert a["waits"][0]["reason"] == EVIL  # JSON text; the page assigns it as text
    t = await (await client.get("/api/details", params={"id": "resource:a-lock"}, headers=bearer(OPERATOR))).json()
    assert t["kind"] == "target" and t["holders"] == [{"execution_id": "exec:pipe-a", "generation": 1}]
    assert [x["waiter_id"] for x in t["waited_on_by"]] == ["exec:pipe-d"] and t["waited_on_by"][0]["edge_version"] == 1
    assert (await client.get("/api/details", params={"id": "exec:nobody"}, headers=bearer(OPERATOR))).status == 404


async def test_a_target_with_a_producer_and_an_external_satisfier() -> None:
    w = ring_world()
    w.target("approval:go")
    w.ok("agent:pipe-a", DeclareSatisfier(target_id="approval:go", target_generation=1, satisfier_id="human:boss"))
    w.execution("maker")
    w.produces("exec:maker", "artifact:out")
    async with TestClient(TestServer(liveweb.make_app(make_view(w)))) as c:
        g = await (await c.get("/api/graph", headers=bearer(OPERATOR))).json()
        by_id = {t[0]: t for t in g["targets"]}
        assert by_id["approval:go"][3] == "human:boss" and by_id["artifact:out"][3] == "exec:maker"
        d = await (await c.get("/api/details", params={"id": "exec:maker"}, headers=bearer(OPERATOR))).json()
        assert d["satisfies"] == ["artifact:out"] and d["holds"] == []


def test_agent_text_stays_text() -> None:
    body = liveweb.login_page(liveweb.HTTPStatus.UNAUTHORIZED, EVIL).text
    assert body is not None and EVIL not in body and "&lt;img src=x onerror=&#34;" in body
    # the page's scripts only ever assign text
    static = resources.files("waitgraph.ops") / "static"
    js = (static / "liveview.js").read_text()
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "document.write" not in js


async def test_one_build_per_applied_index_at_most_every_rebuild_s() -> None:
    w = ring_world()
    applied = iter(range(100, 200))
    index = [next(applied)]
    now = [1000.0]
    docs = liveweb.Documents(liveweb.InProcessReplica(w.m, lambda: index[0]), monotonic=lambda: now[0])
    first = await docs.current()  # the first build is waited for
    assert first.applied_index == 100 and docs.builds == 1
    assert (await docs.latest()) is first  # nothing moved
    index[0] = next(applied)
    assert (await docs.latest()) is first and docs.builds == 1  # moved, but too soon
    now[0] += liveweb.REBUILD_S
    # a request gets the last build at once and starts one rebuild behind it, however many ask
    assert await asyncio.gather(docs.current(), docs.current(), docs.current()) == [first] * 3
    again = await docs.latest()
    assert again.applied_index == 101 and docs.builds == 2
    assert (await docs.current()) is again
    assert liveview.unframe(liveview.build(w.m))[0] == json.dumps(first.view, separators=(",", ":")).encode()
    # a build that costs the reader more CPU is spaced further apart
    index[0] = next(applied)
    now[0] += liveweb.REBUILD_S
    heavy = dict(again.stats, reader_cpu_ms=3000 * liveweb.MAX_READER_SHARE)  # 3 s between builds
    docs._current = liveweb.Built(again.applied_index, again.view, again.graph, again.graph_gzip, heavy)
    assert (await docs.latest()).applied_index == 101
    now[0] += 3.0
    assert (await docs.latest()).applied_index == 102


async def test_a_pages_first_graph_waits_for_one_build_as_new_as_the_page() -> None:
    w = ring_world()
    index, now, slept = [100], [1000.0], []

    async def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    docs = liveweb.Documents(liveweb.InProcessReplica(w.m, lambda: index[0]), monotonic=lambda: now[0], sleep=sleep)
    kept = await docs.refresh_idle() and await docs.current()  # kept ready while no page was open
    assert kept and kept.applied_index == 100
    index[0] = 104  # the page is served at 104, 0.25 s after that build
    now[0] += 0.25
    assert (await docs.at_least(100)) is kept and not slept  # new enough: at once
    fresh = await docs.at_least(104)  # the rest of the gap waited for, then one build
    assert fresh.applied_index == 104 and docs.builds == 2 and slept == [liveweb.REBUILD_S - 0.25]
    assert (await docs.at_least(104)) is fresh and docs.builds == 2
    # a follower behind its commit index: the newest build it has, neither waited for nor rebuilt
    assert (await docs.at_least(110)) is fresh and docs.builds == 2 and len(slept) == 1


async def test_since_is_an_applied_index_or_400(client: TestClient[Any, Any]) -> None:
    for bad in ("abc", "-1", "1.5", "\u00b2", "9" * 20):
        reply = await client.get("/api/graph", params={"part": "focus", "since": bad}, headers=bearer(OPERATOR))
        body = await reply.json()
        assert reply.status == 400 and body["error"] == "invalid_argument" and "since" in body["message"], bad
    reply = await client.get("/api/graph?part=focus&since=42", headers=bearer(OPERATOR))
    assert reply.status == 200 and reply.headers["X-Graph-Part"] == "focus" and reply.headers["X-Graph-Version"] == "42"


async def test_with_no_page_open_a_build_is_kept_ready_at_most_idle_rebuild_s_old() -> None:
    w = ring_world()
    index, now = [100], [1000.0]
    docs = liveweb.Documents(liveweb.InProcessReplica(w.m, lambda: index[0]), monotonic=lambda: now[0])
    assert await docs.refresh_idle() and docs.builds == 1  # the first one at once: nothing to wait for
    assert not await docs.refresh_idle()  # nothing moved
    index[0] = 101
    now[0] += liveweb.IDLE_REBUILD_S - 0.5
    assert not await docs.refresh_idle() and docs.builds == 1  # moved, but the last one is recent
    now[0] += 0.5
    assert await docs.refresh_idle() and (await docs.current()).applied_index == 101 and docs.builds == 2
    # a build that costs the reader more CPU is kept ready less often
    cur = await docs.current()
    heavy = dict(cur.stats, reader_cpu_ms=20_000 * liveweb.IDLE_READER_SHARE)  # 20 s between builds
    docs._current = liveweb.Built(cur.applied_index, cur.view, cur.graph, cur.graph_gzip, heavy)
    index[0] = 102
    now[0] += liveweb.IDLE_REBUILD_S
    assert not await docs.refresh_idle()
    now[0] += 10.0
    assert await docs.refresh_idle() and docs.builds == 3


async def test_keep_ready_builds_while_no_page_watches_and_leaves_it_to_the_feed_while_one_does(monkeypatch) -> None:
    w = ring_world()
    index = [100]
    view = make_view(w, applied=lambda: index[0], monotonic=lambda: 10_000.0 + index[0] * liveweb.IDLE_REBUILD_S)
    monkeypatch.setattr(liveweb, "IDLE_CHECK_S", 0.01)

    async def settle() -> None:
        for _ in range(100):
            await asyncio.sleep(0.01)

    view.keep_ready()
    try:
        await settle()
        assert view.docs.builds == 1  # the node's first build, before any page asked
        view.watchers = 1
        index[0] = 101
        await settle()
        assert view.docs.builds == 1  # a page watches: its feed decides
        view.watchers = 0
        await settle()
        assert view.docs.builds == 2 and (await view.docs.current()).applied_index == 101
    finally:
        await view.close()
    assert view._keeper is not None and view._keeper.done()


async def test_the_feed_sends_the_view_and_each_change_once() -> None:
    w = ring_world()
    index = [7]
    view = make_view(w, applied=lambda: index[0], feed_period_s=0.05, monotonic=lambda: 10_000.0 + index[0])
    async with TestClient(TestServer(liveweb.make_app(view))) as c:
        reply = await c.get("/events", headers=bearer(OPERATOR))
        assert reply.status == 200 and reply.content_type == "text/event-stream"

        async def event() -> dict[str, Any]:
            lines: list[str] = []
            while True:
                line = (await asyncio.wait_for(reply.content.readline(), 10)).decode().rstrip("\r\n")
                if line == "" and lines:
                    break
                if line and not line.startswith(":"):
                    lines.append(line)
            assert lines[0] == "event: view"
            data: dict[str, Any] = json.loads("".join(x.removeprefix("data: ") for x in lines[1:]))
            return data

        first = await event()
        assert first["graph_version"] == 7 and first["cycles"][0]["kind"] == "confirmed"
        assert view.watchers == 1
        index[0] = 8  # the replica moved on: an event soon carries the new version
        versions: list[int] = []
        while 8 not in versions and len(versions) < 3:
            versions.append((await event())["graph_version"])
        assert versions[-1] == 8 and set(versions) <= {7, 8}
        reply.close()
        for _ in range(100):
            if view.watchers == 0:
                break
            await asyncio.sleep(0.05)
        assert view.watchers == 0  # a closed tab leaves nothing behind


async def test_unreadable_replica_is_503() -> None:
    class Starting(liveweb.InProcessReplica):
        async def image(self, fn: Any) -> tuple[bytes, int, dict[str, float]]:
            raise RuntimeError("not started")

    view = liveweb.LiveView(Starting(ring_world().m), tokens(), liveview.NodeInfo("n1", None))
    async with TestClient(TestServer(liveweb.make_app(view))) as c:
        reply = await c.get("/api/view", headers=bearer(OPERATOR))
        assert reply.status == 503 and "cannot be read" in (await reply.json())["message"]


def test_dot_marks_candidates_orange_and_confirmed_red() -> None:
    """``waitgraph graph -o dot`` (cluster/ops/render.py) colours cycles as the page does."""
    w = World()
    w.configure(mode=RolloutMode.SHADOW)
    w.execution("A")
    w.execution("B")
    w.hold("exec:A", "resource:r")
    w.produces("exec:B", "artifact:x")
    w.wait("exec:A", "artifact:x")
    w.wait("exec:B", "resource:r")
    snap = liveview.snapshot(w.m)
    dot = render.graph_dot(graph_response(w.st, 1000), snap.cycles)
    assert 'class="cycle candidate"' in dot and "darkorange" in dot and 'color="red"' not in dot
    [c] = w.candidates()
    w.propose(c)
    w.vote_all(c)
    w.commit(c)
    snap = liveview.snapshot(w.m)
    picked = liveview.picture_decisions(snap.cycles, snap.decisions)
    dot = render.graph_dot(graph_response(w.st, 1000), snap.cycles, picked)
    assert 'class="cycle confirmed"' in dot and "darkorange" not in dot
    assert 'class="cycle confirmed victim"' in dot and "mistyrose" in dot


# -- configuration ----------------------------------------------------------------------------------------------


def test_http_addr_is_a_setting_like_the_others(tmp_path: Any) -> None:
    from waitgraph.node.config import ConfigError, resolve

    from .test_grpc_config import flags

    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": [{"name": "op", "role": "operator", "token": OPERATOR}]}))
    env = {"WAITGRAPH_SECRET": "s3cret-Qm9vdGhlLXNlY3JldC1vZi10aGlzLXRlc3Q"}
    assert resolve(flags(path, tmp_path), env=env).http_address is None  # off by default
    assert resolve(flags(path, tmp_path, http_addr="127.0.0.1:8081"), env=env).http_address == "127.0.0.1:8081"
    from_env = resolve(flags(path, tmp_path), env={**env, "WAITGRAPH_HTTP_ADDR": "127.0.0.1:8082"})
    assert from_env.http_address == "127.0.0.1:8082"
    with pytest.raises(ConfigError) as refused:
        resolve(flags(path, tmp_path, http_addr="127.0.0.1:7101"), env=env)
    assert any(p.startswith("http_addr: 127.0.0.1:7101 is also") for p in refused.value.problems)
    # operator tokens in clear text off loopback: TLS, or an explicit --insecure
    with pytest.raises(ConfigError) as refused:
        resolve(flags(path, tmp_path, http_addr="10.0.0.5:8081"), env=env)
    assert any("http_addr: operator tokens in clear text off loopback" in p for p in refused.value.problems)
    assert resolve(flags(path, tmp_path, http_addr="10.0.0.5:8081", insecure=True), env=env).http_address


async def test_https_with_the_nodes_certificate_and_a_secure_cookie(tmp_path: Any) -> None:
    """liveweb.serve over TLS (what --http-addr does with tls_cert/tls_key), on a real socket."""
    import ssl

    from .grpc_harness import make_pki
    from .harness import free_ports

    pki = make_pki(tmp_path)
    [port] = free_ports(1)
    view = make_view(ring_world(), applied=lambda: 7, secure_cookie=True)
    server = await liveweb.serve(f"127.0.0.1:{port}", view, (pki["server"], pki["server-key"]))
    try:
        ctx = ssl.create_default_context(cafile=str(pki["ca"]))
        async with ClientSession(connector=TCPConnector(ssl=ctx)) as s:
            async with s.get(f"https://127.0.0.1:{port}/api/view", headers=bearer(OPERATOR)) as reply:
                assert reply.status == 200 and (await reply.json())["node"]["applied_index"] == 7
            async with s.get(f"https://127.0.0.1:{port}/?token={OPERATOR}", allow_redirects=False) as reply:
                assert reply.status == 303 and "; Secure" in reply.headers["Set-Cookie"]
        async with ClientSession() as s:
            with pytest.raises(Exception):  # no plain HTTP on that port  # noqa: B017
                async with s.get(f"http://127.0.0.1:{port}/api/view", timeout=10) as reply:
                    await reply.read()
    finally:
        await server.close()
