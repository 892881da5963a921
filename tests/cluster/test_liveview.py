"""The live view's HTTP endpoints (cluster/ops/liveview.py) on an in-process replica: auth, content,
escaping, the bounded picture, and the one SVG path it shares with ``waitgraph graph -o svg``."""

from __future__ import annotations

import io
import json
import shutil
from importlib import resources
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

from tests.world import World
from waitgraph.node.auth import TokenStore
from waitgraph.ops import liveview, render
from waitgraph.statemachine.commands import DeclareSatisfier, RecordSideEffect
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.statemachine.recovery_state import RolloutMode

OPERATOR, ADMIN, AGENT = "operator-token-0123456789", "admin-token-0123456789abc", "agent-token-0123456789abc"
EVIL = '<img src=x onerror="document.body.dataset.pwned=1"><script>alert(1)</script>'
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz (dot) is not installed")


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


def app(w: World, svg: liveview.SvgCache | None = None, metrics: Any = None) -> liveview.LiveView:
    return liveview.LiveView(
        read=lambda fn: (fn(w.m), 42),
        tokens=tokens(),
        node=liveview.NodeInfo("n1", None),
        metrics_app=metrics,
        svg=svg,
    )


def call(
    view: liveview.LiveView,
    path: str,
    *,
    method: str = "GET",
    query: str = "",
    headers: dict[str, str] | None = None,
    body: bytes = b"",
) -> tuple[int, dict[str, str], bytes]:
    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": method, "QUERY_STRING": query}
    setup_testing_defaults(environ)
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    for k, v in (headers or {}).items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    got: dict[str, Any] = {}

    def start_response(status: str, hdrs: list[tuple[str, str]]) -> None:
        got["status"] = int(status.split()[0])
        got["headers"] = dict(hdrs)

    out = b"".join(view(environ, start_response))
    return got["status"], got["headers"], out


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- auth --------------------------------------------------------------------------------------------------


def test_no_token_is_401_and_shows_no_data() -> None:
    view = app(ring_world())
    status, headers, body = call(view, "/api/view")
    assert status == 401 and json.loads(body)["error"] == "unauthenticated"
    status, headers, body = call(view, "/")
    assert status == 401 and headers["Content-Type"].startswith("text/html")
    assert b'action="/login"' in body and b"pipe" not in body
    assert call(view, "/graph.svg")[0] == 401
    assert call(view, "/api/view", headers=bearer("not-a-token-at-all-xyz"))[0] == 401


def test_an_agent_token_is_refused_with_403() -> None:
    view = app(ring_world())
    status, _, body = call(view, "/api/view", headers=bearer(AGENT))
    assert status == 403 and json.loads(body)["error"] == "wrong_role"
    status, _, body = call(view, "/", query=f"token={AGENT}")
    assert status == 403 and b"may not see the live view" in body
    status, headers, _ = call(view, "/login", method="POST", body=f"token={AGENT}".encode())
    assert status == 403 and "Set-Cookie" not in headers


def test_operator_and_admin_tokens_by_header_query_cookie_and_form() -> None:
    view = app(ring_world())
    for token in (OPERATOR, ADMIN):
        assert call(view, "/api/view", headers=bearer(token))[0] == 200
    # ?token= sets an HttpOnly cookie and redirects to a bare / (the token leaves the address bar)
    status, headers, _ = call(view, "/", query=f"token={OPERATOR}")
    assert status == 303 and headers["Location"] == "/"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    jar = {"Cookie": cookie.split(";")[0]}
    status, headers, body = call(view, "/", headers=jar)
    assert status == 200 and b'<script src="/static/liveview.js"' in body
    assert call(view, "/api/view", headers=jar)[0] == 200
    # the login form
    status, headers, _ = call(view, "/login", method="POST", body=f"token={ADMIN}".encode())
    assert status == 303 and headers["Set-Cookie"].startswith(f"{liveview.COOKIE}=")
    status, _, body = call(view, "/login", method="POST", body=b"token=wrong-token-wrong-token")
    assert status == 401 and b"unknown token" in body
    # read-only
    assert call(view, "/api/view", method="POST", headers=bearer(OPERATOR))[0] == 405


def test_security_headers_and_open_static_and_metrics() -> None:
    view = app(ring_world(), metrics=lambda environ, start: (start("200 OK", []), [b"waitgraph_epoch 0\n"])[1])
    status, headers, _ = call(view, "/api/view", headers=bearer(OPERATOR))
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Cache-Control"] == "no-store"
    for name in ("liveview.js", "liveview.css"):
        status, headers, body = call(view, f"/static/{name}")
        assert status == 200 and body
    assert call(view, "/static/../liveview.py")[0] == 404
    assert call(view, "/metrics") == (200, {}, b"waitgraph_epoch 0\n")  # open, like --metrics-addr
    assert call(app(ring_world()), "/metrics")[0] == 404  # not served when the node has no collector here


# -- content --------------------------------------------------------------------------------------------------


@needs_dot
def test_the_document_shows_the_confirmed_cycle_the_victim_and_every_policy_term() -> None:
    w = ring_world()
    status, _, body = call(app(w), "/api/view", headers=bearer(OPERATOR))
    assert status == 200
    doc = json.loads(body)
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
    assert doc["node"]["applied_index"] == 42
    assert doc["decisions"][0]["decision_id"] == "d1" and doc["decisions"][0]["epoch"] is None
    svg = doc["graph"]["svg"]
    assert 'class="node cycle confirmed victim"' in svg and "VICTIM if recovery acted (d1, shadow)" in svg
    assert doc["graph"]["hidden"] == {"executions": 0, "targets": 0, "waits": 0} and doc["graph"]["note"] is None
    # the same SVG is served on its own for the operator
    status, headers, body = call(app(w), "/graph.svg", headers=bearer(OPERATOR))
    assert status == 200 and headers["Content-Type"].startswith("image/svg+xml") and body.decode() == svg


@needs_dot
def test_a_malicious_reason_stays_text() -> None:
    w = ring_world(EVIL)
    doc = json.loads(call(app(w), "/api/view", headers=bearer(OPERATOR))[2])
    svg = doc["graph"]["svg"]
    assert "<img" not in svg and "<script" not in svg and "onerror=&quot;" in svg
    assert "&lt;img src=x" in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    # a second, unconnected part: the picture goes through the packing pipeline (render.graph_svg)
    w.execution("lone")
    w.wait("exec:lone", w.target("artifact:later"), EVIL)
    svg = json.loads(call(app(w), "/api/view", headers=bearer(OPERATOR))[2])["graph"]["svg"]
    assert svg.count("&lt;img src=x onerror=&quot;") == 2 and "<img" not in svg and "<script" not in svg
    assert 'class="node cycle confirmed victim"' in svg
    # the JSON carries it as a string; the page's script only ever assigns text
    js = (resources.files("waitgraph.ops") / "static" / "liveview.js").read_text()
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "document.write" not in js


def test_a_login_refusal_is_escaped() -> None:
    body = liveview._login(liveview.HTTPStatus.UNAUTHORIZED, EVIL)[2].decode()
    assert EVIL not in body and "&lt;img src=x onerror=&quot;" in body


def test_without_graphviz_the_page_still_has_everything_but_the_picture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(render.GraphvizMissing, match="install it"):
        render.graph_svg("digraph {}")
    doc = json.loads(call(app(ring_world()), "/api/view", headers=bearer(OPERATOR))[2])
    assert doc["graph"]["svg"] is None and "graphviz is not installed" in doc["graph"]["error"]
    assert doc["cycles"][0]["kind"] == "confirmed" and doc["victims"][0]["victims"] == ["exec:pipe-d"]
    status, _, body = call(app(ring_world()), "/graph.svg", headers=bearer(OPERATOR))
    assert status == 503 and b"graphviz is not installed" in body


def test_graphviz_runs_once_per_distinct_picture_and_builds_are_rate_limited() -> None:
    drawn: list[str] = []

    def draw(dot: str) -> str:
        drawn.append(dot)
        return f"<svg>{len(drawn)}</svg>"

    cache = liveview.SvgCache(draw)
    assert cache.get("digraph a {}") == ("<svg>1</svg>", None)
    assert cache.get("digraph a {}") == ("<svg>1</svg>", None) and len(drawn) == 1
    assert cache.get("digraph b {}") == ("<svg>2</svg>", None) and len(drawn) == 2
    # the document: rebuilt when the applied index moved, at most every REBUILD_S
    w = ring_world()
    applied = iter(range(100, 200))
    reads: list[int] = []

    def read(fn: Any) -> tuple[Any, int]:
        index = next(applied)
        reads.append(index)
        return fn(w.m), index

    now = [1000.0]
    view = liveview.LiveView(
        read, tokens(), liveview.NodeInfo("n1", None), svg=liveview.SvgCache(draw), monotonic=lambda: now[0]
    )
    first = view.view()["node"]["applied_index"]
    again = view.view()["node"]["applied_index"]
    assert first == again == 101  # a probe read, then the build at 101; the next poll reuses it
    now[0] += liveview.REBUILD_S
    assert view.view()["node"]["applied_index"] == 104


def test_the_picture_is_bounded_and_keeps_the_cycle_first() -> None:
    w = ring_world()
    for i in range(30):
        w.execution(f"idle-{i:02d}")
    w.target("approval:go")
    w.ok("agent:idle-00", DeclareSatisfier(target_id="approval:go", target_generation=1, satisfier_id="human:boss"))
    snap = liveview.snapshot(w.m)
    drawn = liveview.picture_decisions(snap.cycles, snap.decisions)
    small, hidden = liveview.picture_graph(w.st, snap.cycles, drawn, max_executions=6, max_targets=5)
    kept = [ex.execution_id for ex in small.executions]
    assert kept[:4] == ["exec:pipe-a", "exec:pipe-b", "exec:pipe-c", "exec:pipe-d"] and len(kept) == 6
    assert hidden == {"executions": 28, "targets": 0, "waits": 0}
    assert {t.target_id: t.satisfier_id for t in small.targets}["approval:go"] == "human:boss"  # not an execution
    assert liveview.hidden_note(hidden) == "28 more executions not shown"
    dot = render.graph_dot(small, snap.cycles, drawn, liveview.hidden_note(hidden))
    assert "28 more executions not shown" in dot
    # a cap below the cycle drops waits whose ends are not drawn, and holders not drawn
    small, hidden = liveview.picture_graph(w.st, snap.cycles, drawn, max_executions=2, max_targets=2)
    shown = {ex.execution_id for ex in small.executions}
    assert all(w_.waiter_id in shown for w_ in small.waits)
    assert all(h.execution_id in shown for t in small.targets for h in t.holders)
    assert hidden["executions"] == 32 and hidden["targets"] == 3 and hidden["waits"] == 4 - len(small.waits)


def test_dot_marks_candidates_orange_and_confirmed_red() -> None:
    w = World()
    w.configure(mode=RolloutMode.SHADOW)
    w.execution("A")
    w.execution("B")
    w.hold("exec:A", "resource:r")
    w.produces("exec:B", "artifact:x")
    w.wait("exec:A", "artifact:x")
    w.wait("exec:B", "resource:r")
    snap = liveview.snapshot(w.m)
    dot = render.graph_dot(snap.graph, snap.cycles)
    assert 'class="cycle candidate"' in dot and "darkorange" in dot and 'color="red"' not in dot
    [c] = w.candidates()
    w.propose(c)
    w.vote_all(c)
    w.commit(c)
    snap = liveview.snapshot(w.m)
    dot = render.graph_dot(snap.graph, snap.cycles, liveview.picture_decisions(snap.cycles, snap.decisions))
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


def test_https_with_the_nodes_certificate_and_a_secure_cookie(tmp_path: Any) -> None:
    """liveview.serve over TLS (what --http-addr does with tls_cert/tls_key), on a real socket."""
    import ssl
    import urllib.request

    from .grpc_harness import make_pki
    from .harness import free_ports

    pki = make_pki(tmp_path)
    [port] = free_ports(1)
    view = liveview.LiveView(
        read=lambda fn: (fn(ring_world().m), 7), tokens=tokens(), node=liveview.NodeInfo("n1", None), secure_cookie=True
    )
    httpd, thread = liveview.serve(f"127.0.0.1:{port}", view, (pki["server"], pki["server-key"]))
    try:
        ctx = ssl.create_default_context(cafile=str(pki["ca"]))
        request = urllib.request.Request(f"https://127.0.0.1:{port}/api/view", headers=bearer(OPERATOR))
        with urllib.request.urlopen(request, context=ctx, timeout=10) as reply:
            assert reply.status == 200 and json.loads(reply.read())["node"]["applied_index"] == 7
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plain HTTP on that port
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/view", timeout=10)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
    status, headers, _ = call(view, "/", query=f"token={OPERATOR}")
    assert status == 303 and "; Secure" in headers["Set-Cookie"]
