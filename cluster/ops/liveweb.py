"""The live view's web server: aiohttp on the node's own asyncio loop (``waitgraph serve --http-addr``).

    waitgraph serve ... --http-addr 127.0.0.1:8081
    open http://127.0.0.1:8081/             # a login form; or /?token=<operator token> once

Routes: ``/`` the page (cluster/ops/static/), ``/events`` its live feed (server-sent events: the
panels, the summary strip and the graph's version, once a second while something changed or the
node's Raft view did), ``/api/view`` the same panels as one JSON document, ``/api/graph`` the whole
wait graph in compact form (the page filters it and lays out what it draws; ``?part=focus`` only the
cycles' neighbourhood, which the page draws first and keeps current while its toolbar is untouched;
``&since=N`` a build that saw applied index N, waited for: the page's first graph),
``/api/details?id=``
one execution or target, ``/login`` and ``/logout``, ``/metrics`` (Prometheus, open, like
``--metrics-addr``).

Rules kept here:
- The replica's lock is held for a copy at most. The documents (cluster/ops/liveview.py
  :func:`~waitgraph.ops.liveview.build`, a full detection pass and every wait) are built by the
  node's forked reader (``RaftNode.read_image``): the lock is held to read a write counter, the
  node forks right after, and the child does the work on its copy-on-write image (after checking
  that counter on it). ``/api/details`` reads one entry under the lock.
  Neither runs on the event loop's thread while it waits for the lock.
- One build at a time, at most every :data:`REBUILD_S` and only when the applied index moved
  (:class:`Documents`), however many browsers watch; each build's bytes are compressed once.
- Only operator and admin tokens see anything (``Authorization: Bearer``, or an ``HttpOnly``,
  ``SameSite=Strict`` cookie set by the login form or ``?token=``); no token is 401, an agent's 403.
- Every response carries a Content-Security-Policy without inline scripts; agents' strings leave
  only as JSON (and, on the login page, as Jinja2-escaped text).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import jinja2
from aiohttp import web
from aiohttp_sse import sse_response

from waitgraph.node.auth import OPERATORS, Principal, TokenStore, Unauthenticated, denied
from waitgraph.ops import liveview
from waitgraph.statemachine import StateMachine
from waitgraph.statemachine.state import State

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from waitgraph.node.server import NodeProcess

logger = logging.getLogger("waitgraph.ops.liveweb")

T = TypeVar("T")
REBUILD_S = 1.0
"""At least this long between one build's end and the next build's start (and a new one only
when the applied index moved)."""
MAX_READER_SHARE = 0.3
"""Builds are spaced so that the forked reader uses at most this share of one core."""
IDLE_REBUILD_S = 10.0
"""While no page watches, the node keeps a build at most this old (when the applied index moved),
so that the next page opened is answered at once (:meth:`Documents.refresh_idle`)."""
IDLE_READER_SHARE = 0.02
"""...and spaces those builds so that the forked reader uses at most this share of one core."""
IDLE_CHECK_S = 1.0
COOKIE = "waitgraph_token"
MAX_FORM_BYTES = 4096
STATIC_DIR = Path(str(resources.files("waitgraph.ops").joinpath("static")))
PAGE = (STATIC_DIR / "liveview.html").read_text(encoding="utf-8")
_COMMIT_META = '<meta name="waitgraph-commit-index" content="">'
"""The page, served with the node's commit index in this tag (a number: nothing an agent wrote)."""
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_TEMPLATES = jinja2.Environment(loader=jinja2.FileSystemLoader(STATIC_DIR), autoescape=True)


class Unreadable(RuntimeError):
    """The replica cannot be read now (starting, stopping, restoring): 503, the page retries."""


class Replica(Protocol):
    """How the view reads a replica; :class:`NodeReplica` is a running node's."""

    def applied_index(self) -> int:
        """The applied index now, without the lock (a hint: builds are keyed by the one they read)."""
        ...

    async def read(self, fn: Callable[[State], T]) -> T:
        """``fn`` on the state under the machine lock, off the event loop."""
        ...

    async def image(self, fn: Callable[[StateMachine], bytes]) -> tuple[bytes, int, dict[str, float]]:
        """``fn`` on an image of the state: its bytes, the applied index it saw, and what taking
        the image cost the node (``RaftNode.read_image``'s ``timing``: ``lock_s``, how long the
        machine lock was held; ``fork_s``, the fork; ``forks``)."""
        ...


@dataclass(frozen=True, slots=True)
class Built:
    """One build of the documents, for one applied index."""

    applied_index: int
    view: dict[str, Any]
    graph: bytes
    graph_gzip: bytes
    stats: dict[str, float]
    focus: bytes = b""
    """The part the page draws first (:func:`~waitgraph.ops.liveview.focus`), b"" when none."""
    focus_gzip: bytes = b""


class Documents:
    """The current documents. One build at a time, :data:`REBUILD_S` at least from the end of one
    to the start of the next (longer when a build's reader CPU would exceed
    :data:`MAX_READER_SHARE` of a core), only when the applied index moved. A request never waits
    for a rebuild once a build exists (:meth:`current`: the document says which applied index it
    shows), except a page's first graph, which waits for one build at most to be as new as the
    page (:meth:`at_least`); the feed waits (:meth:`latest`)."""

    def __init__(
        self,
        replica: Replica,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.replica = replica
        self.monotonic = monotonic
        self.sleep = sleep
        self.builds = 0
        self._current: Built | None = None
        self._ended = float("-inf")
        self._lock = asyncio.Lock()
        self._refresh: asyncio.Task[Built] | None = None
        self._failing = False

    async def current(self) -> Built:
        """The last build (starting a rebuild behind it when one is due); the first one is waited for."""
        cur = self._current
        if cur is None:
            return await self.latest()
        self.refresh_if_due()
        return cur

    async def at_least(self, index: int) -> Built:
        """A build that saw applied index ``index``, when one can be had: the page's first graph,
        asked for with the commit index the page was served at. The last build when it is that
        new; else one rebuild behind it, spaced as any rebuild (:meth:`_gap`), waited for. A
        build kept ready long before (:meth:`refresh_idle`, up to :data:`IDLE_REBUILD_S` old)
        would otherwise draw a page's first graph from a state older than the page says it shows
        (it may lack the cycle the operator came for). At most one wait and one build: a
        follower whose replica lags its commit index gets the newest build it has."""
        cur = await self.current()
        if cur.applied_index >= index or not self._moved(cur):
            return cur
        left = self._gap(cur) - (self.monotonic() - self._ended)
        if left > 0:
            await self.sleep(left)
        return await self.latest()

    def refresh_if_due(self) -> None:
        """Start a rebuild behind the last build when one is due (:meth:`_due`), never waited for:
        an operator's page is being served, and its feed will want a state as new as the node's."""
        cur = self._current
        if cur is not None and self._due(cur):
            self._start_refresh()

    def warm(self) -> None:
        """Start the first build now, if there is none yet: the login form or the page is being
        served, and the page will ask for it. Only ever the first build (so a request without
        credentials can cause one build per node lifetime, no more), never waited for."""
        if self._current is None and not self._lock.locked():
            self._start_refresh()

    def _start_refresh(self) -> None:
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.get_running_loop().create_task(self.latest(), name="waitgraph-liveview-build")
            self._refresh.add_done_callback(_quiet)

    async def close(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            await asyncio.gather(self._refresh, return_exceptions=True)

    async def latest(self) -> Built:
        """The documents of the applied index now, rebuilt first when one is due."""
        async with self._lock:
            cur = self._current
            try:
                if cur is None or self._due(cur):
                    try:
                        cur = self._current = await self._build()
                    finally:
                        # spaced from the end of a build, not its start: a build that took long
                        # (a loaded machine) is not followed at once by the next, so a page has
                        # REBUILD_S to fetch the graph of the build its feed just announced
                        self._ended = self.monotonic()
            except Exception as exc:  # starting, stopping, restoring a snapshot, a failed reader
                if cur is None:
                    logger.debug("liveview: the replica cannot be read now: %r", exc)
                    raise Unreadable("this node's replica cannot be read right now (starting or stopping)") from exc
                # the page keeps showing the last build, which says its applied index; say it once here
                log = logger.debug if self._failing else logger.warning
                log("liveview: a rebuild failed; still showing applied index %d: %r", cur.applied_index, exc)
                self._failing = True
                return cur
            self._failing = False
            return cur

    async def refresh_idle(self) -> bool:
        """With no page open (:meth:`LiveView.keep_ready`): the first build as soon as the replica
        can be read, then a new one when the applied index moved, at most every
        :data:`IDLE_REBUILD_S` (or :data:`IDLE_READER_SHARE` of a core). Whether it built."""
        cur = self._current
        if cur is not None and not self._due(cur, IDLE_REBUILD_S, IDLE_READER_SHARE):
            return False
        builds = self.builds
        await self.latest()
        return self.builds > builds

    def _due(self, cur: Built, gap_s: float = REBUILD_S, share: float = MAX_READER_SHARE) -> bool:
        return self._moved(cur) and self.monotonic() - self._ended >= self._gap(cur, gap_s, share)

    def _moved(self, cur: Built) -> bool:
        """Whether the replica applied anything since ``cur`` was built."""
        try:
            return self.replica.applied_index() != cur.applied_index
        except Exception:  # stopped: keep what we have
            return False

    @staticmethod
    def _gap(cur: Built, gap_s: float = REBUILD_S, share: float = MAX_READER_SHARE) -> float:
        """The least time from the end of ``cur``'s build to the start of the next: ``gap_s``, or
        longer when its reader's CPU would exceed ``share`` of a core."""
        return max(gap_s, cur.stats["reader_cpu_ms"] / 1000 / share)

    async def _build(self) -> Built:
        t0 = time.perf_counter()
        data, applied, cost = await self.replica.image(liveview.build)
        panels, near, graph, reader_cpu_s = liveview.unframe(data)

        def finish() -> tuple[dict[str, Any], bytes, bytes, float]:
            c0 = time.thread_time()
            view = json.loads(panels)
            packed = gzip.compress(graph, 5)
            near_packed = gzip.compress(near, 5) if near else b""
            return view, packed, near_packed, time.thread_time() - c0

        view, packed, near_packed, server_cpu_s = await asyncio.get_running_loop().run_in_executor(None, finish)
        self.builds += 1
        stats = {
            "lock_ms": cost["lock_s"] * 1000,
            "fork_ms": cost.get("fork_s", 0.0) * 1000,
            "forks": cost.get("forks", 0),
            "reader_cpu_ms": reader_cpu_s * 1000,
            "server_cpu_ms": server_cpu_s * 1000,
            "build_ms": (time.perf_counter() - t0) * 1000,
            "view_bytes": len(panels),
            "graph_bytes": len(graph),
            "graph_gzip_bytes": len(packed),
            "focus_bytes": len(near),
            "focus_gzip_bytes": len(near_packed),
        }
        return Built(applied, view, graph, packed, stats, near, near_packed)


# -- the node's side -------------------------------------------------------------------------------------------


class NodeReplica:
    """A running node's replica: ``read`` under its machine lock on an executor thread, ``image``
    through its forked reader (the lock is held to read a write counter, not for the fork)."""

    def __init__(self, node: NodeProcess) -> None:
        self.node = node

    def applied_index(self) -> int:
        return self.node.node.applied_index()

    async def read(self, fn: Callable[[State], T]) -> T:
        got = await self.node.node.read_local(lambda m: fn(m.state))
        return got.value

    async def image(self, fn: Callable[[StateMachine], bytes]) -> tuple[bytes, int, dict[str, float]]:
        timing: dict[str, float] = {}
        got = await self.node.node.read_image(lambda m: None, fn, timing=timing)
        return got.value[1], got.applied_index, timing


class InProcessReplica:
    """A state machine in this process (tests, ``scripts/bench liveview``): reads and builds run
    right here, as if under the lock; ``applied`` says which index the state is at."""

    def __init__(self, machine: StateMachine, applied: Callable[[], int] = lambda: 0) -> None:
        self.machine = machine
        self.applied = applied

    def applied_index(self) -> int:
        return self.applied()

    async def read(self, fn: Callable[[State], T]) -> T:
        return fn(self.machine.state)

    async def image(self, fn: Callable[[StateMachine], bytes]) -> tuple[bytes, int, dict[str, float]]:
        t0 = time.perf_counter()
        data = fn(self.machine)
        return data, self.applied(), {"lock_s": time.perf_counter() - t0}


# -- the web application ----------------------------------------------------------------------------------------


class LiveView:
    """The aiohttp application's state and handlers: the page, its feed and documents, login, /metrics."""

    def __init__(
        self,
        replica: Replica,
        tokens: TokenStore,
        node: liveview.NodeInfo,
        metrics: CollectorRegistry | None = None,
        secure_cookie: bool = False,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        feed_period_s: float = REBUILD_S,
        sessions: Callable[[], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        self.replica = replica
        self.sessions = sessions
        """This node's view of the sessions (:func:`liveview.sessions_panel`): read at each document,
        not built with the replica's image (heartbeats are the lessor's, in memory, off the log)."""
        self.tokens = tokens
        self.node = node
        self.metrics = metrics
        self.secure_cookie = secure_cookie
        self.clock = clock
        self.docs = Documents(replica, monotonic)
        self.feed_period_s = feed_period_s
        self.watchers = 0
        self._feed: str | None = None
        self._feed_seq = 0
        self._feed_changed: asyncio.Condition | None = None
        self._feeder: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None

    def keep_ready(self) -> None:
        """Keep a build ready while no page watches (the node's live view; :meth:`Documents.refresh_idle`):
        the first page after the node starts, or after nobody looked for a while, is answered at
        once with a build at most :data:`IDLE_REBUILD_S` old (which says its applied index) instead
        of waiting for a detection pass over the whole replica."""
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.get_running_loop().create_task(self._keep_ready(), name="waitgraph-liveview-ready")

    async def _keep_ready(self) -> None:
        while True:
            if self.watchers == 0:  # while a page watches, its feed rebuilds
                with contextlib.suppress(Unreadable):  # starting or restoring: try again
                    await self.docs.refresh_idle()
            await asyncio.sleep(IDLE_CHECK_S)

    # -- documents ---------------------------------------------------------------------------------

    async def view(self, fresh: bool = False) -> tuple[dict[str, Any], Built]:
        built = await (self.docs.latest() if fresh else self.docs.current())
        doc = {
            **built.view,
            "sessions": await self._sessions(),
            "node": self.node.describe(built.applied_index),
            "served_at_ms": int(self.clock() * 1000),
            "graph_version": built.applied_index,
            "build": built.stats,
        }
        return doc, built

    async def _sessions(self) -> dict[str, Any] | None:
        """None when this node has no sessions view (a test's replica) or cannot read it now."""
        if self.sessions is None:
            return None
        try:
            return await self.sessions()
        except Exception as exc:  # starting, stopping, restoring
            logger.debug("liveview: no sessions view: %r", exc)
            return None

    # -- auth ------------------------------------------------------------------------------------------

    def principal(self, request: web.Request) -> Principal:
        header = request.headers.get("Authorization")
        if header is None:
            token = request.cookies.get(COOKIE)
            if token is None:
                raise Unauthenticated("no credentials: log in with an operator token")
            header = f"Bearer {token}"
        return self._check(header)

    def _check(self, header: str) -> Principal:
        principal = self.tokens.authenticate([("authorization", header)], self.clock())
        if principal.role not in OPERATORS:
            raise denied(f"{principal.role.value} token {principal.name!r} may not see the live view (operator, admin)")
        return principal

    def _refusal(self, token: str) -> tuple[HTTPStatus, str] | None:
        """Why ``token`` may not log in (401 unknown, 403 wrong role), or None."""
        try:
            self._check(f"Bearer {token}")
        except Unauthenticated as exc:
            return HTTPStatus.UNAUTHORIZED, exc.message
        except Exception as exc:  # denied: a known token of the wrong role
            return HTTPStatus.FORBIDDEN, getattr(exc, "message", str(exc))
        return None

    def _logged_in(self, token: str) -> web.Response:
        self.docs.warm()
        reply = _see_other("/")
        reply.set_cookie(COOKIE, token, path="/", httponly=True, samesite="Strict", secure=self.secure_cookie)
        return reply

    def _gate(self, request: web.Request, page: bool = False) -> web.Response | None:
        """None when the request may see data, else the refusal (the login form for the page)."""
        try:
            self.principal(request)
        except Unauthenticated as exc:
            if page:
                self.docs.warm()
                return login_page(HTTPStatus.UNAUTHORIZED, "")
            return web.json_response({"error": "unauthenticated", "message": exc.message}, status=401)
        except Exception as exc:
            message = getattr(exc, "message", str(exc))
            if page:
                return login_page(HTTPStatus.FORBIDDEN, message)
            return web.json_response({"error": "wrong_role", "message": message}, status=403)
        return None

    # -- handlers --------------------------------------------------------------------------------------

    async def page(self, request: web.Request) -> web.StreamResponse:
        token = request.query.get("token", "").strip()
        if token:  # once: the cookie replaces it, and the address bar forgets it
            refused = self._refusal(token)
            return login_page(*refused) if refused else self._logged_in(token)
        gate = self._gate(request, page=True)
        if gate is not None:
            return gate
        # while the browser loads the page and its scripts: the first build, or (an operator's page,
        # spaced as any rebuild) a new one, which the page's feed will want as soon as it connects
        self.docs.warm()
        self.docs.refresh_if_due()
        commit = self.node.commit_index()
        html = PAGE.replace(_COMMIT_META, _COMMIT_META.replace('""', f'"{commit}"')) if commit is not None else PAGE
        return web.Response(text=html, content_type="text/html")

    async def login_form(self, request: web.Request) -> web.StreamResponse:
        self.docs.warm()
        return login_page(HTTPStatus.OK, "")

    async def login(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        token = str(form.get("token", "")).strip()
        refused = self._refusal(token) if token else (HTTPStatus.UNAUTHORIZED, "no token given")
        return login_page(*refused) if refused else self._logged_in(token)

    async def logout(self, request: web.Request) -> web.StreamResponse:
        reply = _see_other("/login")
        reply.del_cookie(COOKIE, path="/")
        return reply

    async def api_view(self, request: web.Request) -> web.StreamResponse:
        refused = self._gate(request)
        if refused is not None:
            return refused
        try:
            doc, _ = await self.view()
        except Unreadable as exc:
            return web.json_response({"error": "unavailable", "message": str(exc)}, status=503)
        return web.json_response(doc, dumps=_dumps)

    async def api_graph(self, request: web.Request) -> web.StreamResponse:
        refused = self._gate(request)
        if refused is not None:
            return refused
        since = request.query.get("since", "")
        if since and not (since.isascii() and since.isdigit() and len(since) <= 19):
            message = f"since must be an applied index (a whole number), not {since[:40]!r}"
            return web.json_response({"error": "invalid_argument", "message": message}, status=400)
        try:
            # ?since=N: the page's first graph, as new as the commit index the page was served at
            built = await (self.docs.at_least(int(since)) if since else self.docs.current())
        except Unreadable as exc:
            return web.json_response({"error": "unavailable", "message": str(exc)}, status=503)
        # ?part=focus: the cycles' neighbourhood the page draws first, when there is one
        near = request.query.get("part") == "focus" and bool(built.focus)
        plain, packed = (built.focus, built.focus_gzip) if near else (built.graph, built.graph_gzip)
        headers = {
            "Content-Type": "application/json",
            "X-Graph-Version": str(built.applied_index),
            "X-Graph-Part": "focus" if near else "whole",
        }
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(body=packed, headers={**headers, "Content-Encoding": "gzip"})
        return web.Response(body=plain, headers=headers)

    async def api_details(self, request: web.Request) -> web.StreamResponse:
        refused = self._gate(request)
        if refused is not None:
            return refused
        node_id = request.query.get("id", "")
        try:
            found = await self.replica.read(lambda st: liveview.details(st, node_id))
        except Exception as exc:
            logger.debug("liveview: details of %r: %r", node_id, exc)
            return web.json_response(
                {"error": "unavailable", "message": "this node's replica cannot be read"}, status=503
            )
        if found is None:
            return web.json_response(
                {"error": "not_found", "message": f"no execution or target {node_id!r}"}, status=404
            )
        return web.json_response(liveview.decision_details(found), dumps=_dumps)

    async def events(self, request: web.Request) -> web.StreamResponse:
        """The page's feed: the latest view document whenever the feeder publishes a new one.
        Each watcher holds one reference to the latest message, nothing more."""
        refused = self._gate(request)
        if refused is not None:
            return refused
        changed = self._changed()
        self.watchers += 1
        self._start_feeder()
        try:
            async with sse_response(request) as resp:
                # At once what the node has (the feeder's last message may be from another
                # session's time), then each newer message.
                seen = self._feed_seq
                try:
                    doc, _ = await self.view()
                    await resp.send(_dumps(doc), event="view")
                except Unreadable as exc:
                    await resp.send(_dumps({"error": "unavailable", "message": str(exc)}), event="view")
                while resp.is_connected():
                    async with changed:
                        while self._feed_seq == seen:
                            await changed.wait()
                        seen, message = self._feed_seq, self._feed
                    if message is not None:
                        await resp.send(message, event="view")
            return resp
        finally:
            self.watchers -= 1

    def _changed(self) -> asyncio.Condition:
        if self._feed_changed is None:
            self._feed_changed = asyncio.Condition()
        return self._feed_changed

    def _start_feeder(self) -> None:
        if self._feeder is None or self._feeder.done():
            self._feeder = asyncio.get_running_loop().create_task(self._feed_loop(), name="waitgraph-liveview-feed")

    async def _feed_loop(self) -> None:
        """While anyone watches: every ``feed_period_s``, the view (rebuilt when the applied index
        moved), published when it or this node's Raft view changed."""
        last: str | None = None
        changed = self._changed()
        while self.watchers > 0:
            try:
                doc, _ = await self.view(fresh=True)
                doc.pop("served_at_ms")
                key = _dumps(doc)
                message = key if key == last else _dumps({**doc, "served_at_ms": int(self.clock() * 1000)})
            except Unreadable as exc:
                key = message = _dumps({"error": "unavailable", "message": str(exc)})
            except Exception:
                logger.exception("liveview: the feed failed")
                key = message = _dumps({"error": "internal", "message": "internal error (see the node's log)"})
            if key != last:
                last = key
                async with changed:
                    self._feed, self._feed_seq = message, self._feed_seq + 1
                    changed.notify_all()
            await asyncio.sleep(self.feed_period_s)

    async def metrics_page(self, request: web.Request) -> web.StreamResponse:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        assert self.metrics is not None
        # The collectors read the replica under its lock: not on the loop's thread.
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, self.metrics)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def close(self) -> None:
        for task in (self._feeder, self._keeper):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.docs.close()


def _quiet(task: asyncio.Task[Built]) -> None:
    """A background rebuild's failure is logged by :meth:`Documents.latest`; nobody awaits it."""
    if not task.cancelled():
        task.exception()


def _see_other(location: str) -> web.Response:
    return web.Response(status=HTTPStatus.SEE_OTHER.value, headers={"Location": location})


def _dumps(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":"))


def login_page(status: HTTPStatus, why: str) -> web.Response:
    """The login form; ``why`` (a token's refusal) is the only dynamic text, escaped by Jinja2."""
    body = _TEMPLATES.get_template("login.html").render(message=why)
    return web.Response(status=status.value, text=body, content_type="text/html")


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:  # a bug: a plain 500, the details in the node's log only
        logger.exception("liveview: %s %s failed", request.method, request.path)
        return web.Response(status=500, text="internal error (see the node's log)\n")


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(SECURITY_HEADERS)


def make_app(view: LiveView) -> web.Application:
    app = web.Application(middlewares=[_errors], client_max_size=MAX_FORM_BYTES)
    app.on_response_prepare.append(_security_headers)
    app.router.add_get("/", view.page)
    app.router.add_get("/login", view.login_form)
    app.router.add_post("/login", view.login)
    app.router.add_route("*", "/logout", view.logout)
    app.router.add_get("/api/view", view.api_view)
    app.router.add_get("/api/graph", view.api_graph)
    app.router.add_get("/api/details", view.api_details)
    app.router.add_get("/events", view.events)
    if view.metrics is not None:
        app.router.add_get("/metrics", view.metrics_page)
    app.router.add_static("/static", STATIC_DIR)

    async def closing(app: web.Application) -> None:
        await view.close()

    app.on_shutdown.append(closing)
    return app


class Server:
    """A running listener: ``await server.close()`` ends every feed and stops it."""

    def __init__(self, runner: web.AppRunner, url: str) -> None:
        self.runner = runner
        self.url = url

    async def close(self) -> None:
        await self.runner.cleanup()


async def serve(address: str, view: LiveView, tls: tuple[Path, Path] | None = None) -> Server:
    """Serve ``view`` on ``host:port`` from the running loop; HTTPS with ``tls`` = (certificate, key)."""
    host, _, port = address.rpartition(":")
    ctx = None
    if tls is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(tls[0]), str(tls[1]))
    # handler_cancellation: a closed tab's feed ends at once, not at its next write
    runner = web.AppRunner(make_app(view), access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host.strip("[]"), int(port), ssl_context=ctx, reuse_address=True)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return Server(runner, f"{'https' if ctx else 'http'}://{address}/")


async def serve_node(node: NodeProcess, address: str, metrics: CollectorRegistry) -> Server:
    """The live view of one running node (``NodeProcess.http_view``): its replica, its tokens, its
    TLS certificate, and its /metrics registry on the same listener."""
    cfg = node.cfg

    async def sessions() -> dict[str, Any]:
        read = await node.node.read_local(lambda m: node.lessor.view(m.state, node.clock.now_ms()))
        return liveview.sessions_panel(read.value)

    view = LiveView(
        replica=NodeReplica(node),
        tokens=cfg.tokens,
        node=liveview.NodeInfo(cfg.node_id, node.node.status, {p.raft_address: p.node_id for p in cfg.peers}),
        metrics=metrics,
        secure_cookie=cfg.tls_cert is not None,
        sessions=sessions,
    )
    tls = (cfg.tls_cert, cfg.tls_key) if cfg.tls_cert and cfg.tls_key else None
    server = await serve(address, view, tls)
    view.keep_ready()
    logger.info("live view: %s (operator token), /metrics", server.url)
    return server
