"""The live view: a read-only web page every node serves (``waitgraph serve --http-addr``).

    waitgraph serve ... --http-addr 127.0.0.1:8081
    open http://127.0.0.1:8081/             # a login form; or /?token=<operator token> once

What it shows, from this node's own replica: the wait graph (executions, typed targets, holders)
as the SVG ``waitgraph graph -o svg`` draws (cluster/ops/render.py ``graph_dot``: candidate cycles
orange, confirmed ones red, the victim filled), every current cycle and its state, each
decision's victim with the score of every candidate on every policy term, the decisions and the
epochs they committed, open recoveries and their votes, cancellations that have not converged,
quarantined executions and the resources they hold, the rollout mode and admission. The page polls
``/api/view`` every second.

Rules kept here:
- Read-only and local: the replica is read under its lock between two applies (like /metrics),
  never through the log, so the page says it is stale and by how much (applied vs commit index,
  this node's role and leader). It never writes.
- Only operator and admin tokens see anything: ``Authorization: Bearer``, or a cookie set by the
  login form or by ``?token=`` (then redirected away, so the token leaves the address bar). No
  token is 401, an agent token 403. ``/metrics`` (when this listener serves it) stays open, like
  ``--metrics-addr``; the static files hold no data.
- Ids and reasons come from agents: the server sends them only as JSON and inside graphviz's SVG
  (which escapes every label); the page's script puts them into the DOM as text, never as markup,
  and a Content-Security-Policy without inline scripts makes an injected handler inert anyway.
- Bounded: at most :data:`MAX_EXECUTIONS` executions and :data:`MAX_TARGETS` targets are drawn
  (cycle members and victims first, then waiters), and the picture says how many are not shown;
  every table is capped at :data:`MAX_ROWS`. Only what is drawn is converted under the lock; a
  document is built at most every :data:`REBUILD_S` and only when the applied index moved, and
  graphviz runs once per distinct picture, whatever the number of browsers polling.
"""

from __future__ import annotations

import json
import logging
import mimetypes
import socket
import socketserver
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from waitgraph.node.auth import OPERATORS, Principal, TokenStore, Unauthenticated, denied
from waitgraph.node.service import cycles_response
from waitgraph.ops import render
from waitgraph.proto.v1 import operator_pb2
from waitgraph.statemachine import StateMachine
from waitgraph.statemachine.cancel import export_pending
from waitgraph.statemachine.enums import TERMINAL, ExecStatus
from waitgraph.statemachine.state import State
from waitgraph.wire import convert

if TYPE_CHECKING:
    from waitgraph.node.server import NodeProcess

logger = logging.getLogger("waitgraph.ops.liveview")

MAX_EXECUTIONS = 60
MAX_TARGETS = 60
MAX_ROWS = 50
MAX_MEMBERS = 20
"""Members listed per cycle or proposal (a cycle of thousands is still one row)."""
REBUILD_S = 1.0
"""A new document at most this often (the page polls every second)."""
COOKIE = "waitgraph_token"
MAX_FORM_BYTES = 4096
STATIC = ("liveview.html", "liveview.js", "liveview.css", "login.html")
SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cache-Control", "no-store"),
]

Reader = Callable[[Callable[[StateMachine], Any]], tuple[Any, int]]
"""``read(fn)`` -> (``fn(machine)`` under the machine lock, the applied index it saw)."""


# -- what is copied out of the replica ------------------------------------------------------------------


@dataclass
class Snapshot:
    """Everything the page shows, copied under the machine lock (protos and plain values)."""

    graph: Any
    """The picture's part of the graph (:func:`picture_graph`), not all of it."""
    hidden: dict[str, int]
    """What the picture leaves out, by kind."""
    cycles: Any
    decisions: list[Any]
    export: dict[str, Any]
    executions: int
    targets: int
    waits: int
    mode: str
    run_modes: dict[str, str]
    side_effect_free: list[str]
    voters: list[str]
    quorum: int
    max_rollback: int
    epoch: int
    now_ms: int
    quarantined: list[dict[str, Any]] = field(default_factory=list)


DecisionKey = tuple[str, str, int]


def snapshot(m: StateMachine, decision_views: dict[DecisionKey, Any] | None = None) -> Snapshot:
    """Read the replica (call it under the machine lock): the same views the Cycles and
    ExplainDecision RPCs answer with, the picture's part of the graph, and the pending-edges
    document's cancellations. Only what is drawn is converted to messages (the lock is held
    meanwhile, and applies wait for it). A decision never changes once its commit is applied, so
    ``decision_views`` keeps the converted ones from one snapshot to the next."""
    st = m.state
    rb = st.recovery
    cycles = cycles_response(st, include_closed=False)
    views = decision_views if decision_views is not None else {}
    decisions, keys = [], set()
    for d in rb.decisions.values():
        key = (d.decision_id, d.digest, d.at_ms)
        if key not in views:
            views[key] = convert.decision_view(d)
        decisions.append(views[key])
        keys.add(key)
    for gone in views.keys() - keys:  # left the retained window
        del views[gone]
    graph, hidden = picture_graph(st, cycles, picture_decisions(cycles, decisions))
    quarantined = []
    for eid, ex in sorted(st.executions.items()):
        if ex.status is ExecStatus.QUARANTINED:
            req = st.cancel.requests.get(eid)
            held = sorted(t for t in st.satisfies.get(eid, ()) if eid in st.targets[t].holders)
            quarantined.append(
                {
                    "execution_id": eid,
                    "generation": ex.generation,
                    "run_id": ex.run_id,
                    "agent_id": ex.agent_id,
                    "since_ms": req.quarantined_at_ms if req is not None else ex.status_at_ms,
                    "holds": held,
                }
            )
    return Snapshot(
        graph=graph,
        hidden=hidden,
        cycles=cycles,
        decisions=decisions,
        export=export_pending(st),
        executions=len(st.executions),
        targets=len(st.targets),
        waits=st.edge_count,
        mode=rb.mode.value,
        run_modes={r: mode.value for r, mode in sorted(rb.run_modes.items())},
        side_effect_free=sorted(rb.side_effect_free),
        voters=list(rb.config.voters),
        quorum=rb.config.quorum,
        max_rollback=rb.config.max_rollback,
        epoch=rb.epoch,
        now_ms=st.now_ms,
        quarantined=quarantined,
    )


# -- the picture -------------------------------------------------------------------------------------------


def picture_graph(
    st: State,
    cycles: Any,
    decisions: Sequence[Any],
    max_executions: int = MAX_EXECUTIONS,
    max_targets: int = MAX_TARGETS,
) -> tuple[Any, dict[str, int]]:
    """At most ``max_executions`` executions and ``max_targets`` targets of the replica's graph, as
    a GraphResponse: cycle members and victims first, then executions that wait or are waited
    on, then the unsettled, then the rest (each group in id order); the waits and holders between
    what is kept. Also how many of each were left out. Call it under the machine lock."""
    members = render.cycle_members(cycles)
    chosen = set(render.victims(decisions))
    waits = [e for w in sorted(st.waits_by_waiter) for e in st.waits_of(w)]
    waiting = {e.waiter_id for e in waits}
    waited = {e.target_id for e in waits if e.target_id in st.targets}
    busy = {h for t in waited for h in st.targets[t].holders}
    busy |= {sat for t in waited if (sat := st.targets[t].satisfier_id) is not None}
    cycle_targets = {e.edge_id.partition(">")[2] for c in cycles.cycles for e in c.edges}

    def exec_rank(ex: Any) -> tuple[int, str]:
        eid = ex.execution_id
        if eid in members or eid in chosen:
            return 0, eid
        if eid in waiting or eid in busy:
            return 1, eid
        return (3 if ex.status in TERMINAL else 2), eid

    execs = sorted(st.executions.values(), key=exec_rank)[:max_executions]
    kept = {ex.execution_id for ex in execs}
    related = {e.target_id for e in waits if e.waiter_id in kept}

    def target_rank(t: Any) -> tuple[int, str]:
        tid = t.target_id
        if tid in cycle_targets:
            return 0, tid
        if tid in related:
            return 1, tid
        touches = not kept.isdisjoint(t.holders) or t.satisfier_id in kept
        return (2 if touches else 3), tid

    targets = sorted(st.targets.values(), key=target_rank)[:max_targets]
    kept_targets = {t.target_id for t in targets} | kept
    out = operator_pb2.GraphResponse(epoch=st.recovery.epoch)
    out.executions.extend(convert.execution_view(ex) for ex in execs)
    for t in targets:
        view = convert.target_view(t)
        keep = [operator_pb2.HolderView(execution_id=h.execution_id, generation=h.generation) for h in view.holders]
        del view.holders[:]
        view.holders.extend(h for h in keep if h.execution_id in kept)
        if t.satisfier_id in st.executions and t.satisfier_id not in kept:
            view.ClearField("satisfier_id")  # an execution left out (a human: or external: satisfier stays)
        out.targets.append(view)
    out.waits.extend(convert.wait_view(e) for e in waits if e.waiter_id in kept and e.target_id in kept_targets)
    hidden = {
        "executions": len(st.executions) - len(out.executions),
        "targets": len(st.targets) - len(out.targets),
        "waits": len(waits) - len(out.waits),
    }
    return out, hidden


def hidden_note(hidden: dict[str, int]) -> str | None:
    parts = [f"{n} more {what}" for what, n in hidden.items() if n > 0]
    return (", ".join(parts) + " not shown") if parts else None


def picture_decisions(cycles: Any, decisions: Iterable[Any]) -> list[Any]:
    """The decisions whose victims the picture marks: those of the confirmed current cycles (the
    same rule ``waitgraph graph -o dot|svg`` follows)."""
    confirmed = {d for d, kind in render.cycle_kinds(cycles).items() if kind == "confirmed"}
    return [d for d in decisions if d.digest in confirmed]


class SvgCache:
    """The last picture's SVG: graphviz runs again only when the DOT text changes."""

    def __init__(self, draw: Callable[[str], str] = render.graph_svg) -> None:
        self.draw = draw
        self._dot: str | None = None
        self._svg: tuple[str | None, str | None] = (None, None)

    def get(self, dot: str) -> tuple[str | None, str | None]:
        """(svg, None), or (None, why it could not be drawn)."""
        if dot != self._dot:
            try:
                self._svg = (self.draw(dot), None)
            except RuntimeError as exc:  # GraphvizMissing, a timeout, a graphviz error
                self._svg = (None, str(exc))
            self._dot = dot
        return self._svg


# -- the document ---------------------------------------------------------------------------------------------


def _enum(msg: Any, name: str) -> str | None:
    return render.enum_text(msg.DESCRIPTOR.fields_by_name[name].enum_type, getattr(msg, name))


_TERM_KEYS = ("external_side_effects", "checkpoint", "priority", "cost_consumed", "unique_evidence", "execution_id")


def _members(members: Sequence[Any]) -> list[str]:
    return [render.at(m.execution_id, m.generation) for m in members[:MAX_MEMBERS]]


def decision_json(d: Any) -> dict[str, Any]:
    """A decision with every candidate's score on every policy term, its policy rank and role."""
    rank = {e: i + 1 for i, e in enumerate(render.policy_order(d))}
    roles = {r.execution_id: r.role for r in d.roles}
    scores = sorted(d.scores, key=lambda s: rank[s.execution_id])
    term = render.decisive_term(d)
    chosen = [r.execution_id for r in d.roles if r.role in ("victim", "rolled_back")]
    return {
        "decision_id": d.decision_id,
        "digest": d.digest,
        "signature": d.signature,
        "kind": _enum(d, "kind"),
        "mode": _enum(d, "mode"),
        "reason_code": d.reason_code,
        "epoch": d.epoch if d.HasField("epoch") else None,
        "winner_id": d.winner_id if d.HasField("winner_id") else None,
        "victims": chosen,
        "acted": d.HasField("epoch"),
        "policy_version": d.policy_version,
        "decided_by": term[0] if term else None,
        "decided_by_text": term[1] if term else None,
        "at_ms": d.at_ms,
        "released": [{"target_id": r.target_id, "execution_id": r.execution_id} for r in d.released],
        "terms": [label for label, _ in render.POLICY_TERMS],
        "scores": [
            {
                "execution_id": s.execution_id,
                "generation": s.generation,
                "external_side_effects": s.external_side_effects,
                "checkpoint": s.checkpoint,
                "priority": s.priority,
                "cost_consumed": s.cost_consumed,
                "unique_evidence": s.unique_evidence,
                "rank": rank[s.execution_id],
                "role": roles.get(s.execution_id, "-"),
            }
            for s in scores[:MAX_ROWS]  # rank order: the victim first
        ],
        "scores_total": len(scores),
    }


def document(snap: Snapshot, svg: SvgCache) -> dict[str, Any]:
    """The JSON the page renders (``/api/view``), built outside the lock."""
    cycles = snap.cycles
    kinds = render.cycle_kinds(cycles)
    by_digest: dict[str, list[Any]] = {}
    for d in snap.decisions:
        by_digest.setdefault(d.digest, []).append(d)
    open_props = {p.digest: p for p in cycles.proposals}
    cycle_rows = []
    for c in cycles.cycles:
        state = kinds[c.digest]
        p = open_props.get(c.digest)
        ds = by_digest.get(c.digest, [])
        cycle_rows.append(
            {
                "digest": c.digest,
                "signature": c.signature,
                "members": _members(c.members),
                "members_total": len(c.members),
                "kind": state,
                "proposal": _enum(c, "proposal_status") if c.HasField("proposal_status") else None,
                "votes": f"{len(p.approvals)} of {snap.quorum}" if p is not None else None,
                "decision_ids": [d.decision_id for d in ds],
            }
        )
    drawn = picture_decisions(cycles, snap.decisions)
    small, hidden = snap.graph, snap.hidden
    note = hidden_note(hidden)
    dot = render.graph_dot(small, cycles, drawn, note)
    picture, why = svg.get(dot)
    # The victims to show first: the confirmed current cycles', else the most recent decision's.
    featured = drawn or snap.decisions[-1:]
    recoveries = [
        {
            "digest": p.digest,
            "signature": p.signature,
            "members": _members(p.members),
            "members_total": len(p.members),
            "proposer": p.proposer,
            "proposed_at_ms": p.proposed_at_ms,
            "epoch_proposed": p.epoch_proposed,
            "approvals": list(p.approvals),
            "rejections": list(p.rejections),
            "waiting_for": [v for v in snap.voters if v not in p.approvals and v not in p.rejections],
            "quorum": snap.quorum,
        }
        for p in cycles.proposals
    ]
    cancellations = [
        {
            "scope": c["scope"],
            "run_id": c["run"],
            "root_id": c["root"],
            "cause": c["cause"],
            "reason": c["reason"],
            "cancel_generation": c["cancelGeneration"],
            "requested_at_ms": c["requestedAtMs"],
            "pending": [
                {
                    "execution_id": p["execution"],
                    "generation": p["generation"],
                    "status": p["status"],
                    "emissions": p["emissions"],
                    "quarantined_at_ms": p["quarantinedAtMs"],
                }
                for p in c["pending"]
            ],
        }
        for c in snap.export["cancellations"]
    ]
    admission = snap.export["admission"]
    return {
        "now_ms": snap.now_ms,
        "mode": snap.mode,
        "run_modes": [{"run_id": r, "mode": m} for r, m in snap.run_modes.items()][:MAX_ROWS],
        "side_effect_free": snap.side_effect_free[:MAX_ROWS],
        "admission": {
            "cluster_frozen": admission["clusterFrozen"],
            "frozen_runs": [{"run_id": f["run"], "reason": f["reason"]} for f in admission["frozenRuns"]][:MAX_ROWS],
            "frozen_runs_total": len(admission["frozenRuns"]),
        },
        "recovery": {"voters": snap.voters, "quorum": snap.quorum, "max_rollback": snap.max_rollback},
        "epoch": snap.epoch,
        "counts": {"executions": snap.executions, "targets": snap.targets, "waits": snap.waits},
        "graph": {
            "svg": picture,
            "error": why,
            "shown": {"executions": len(small.executions), "targets": len(small.targets), "waits": len(small.waits)},
            "hidden": hidden,
            "note": note,
        },
        "cycles": cycle_rows[:MAX_ROWS],
        "cycles_total": len(cycle_rows),
        "victims": [decision_json(d) for d in featured[-MAX_ROWS:]],
        "decisions": [decision_json(d) for d in reversed(snap.decisions[-MAX_ROWS:])],
        "decisions_total": len(snap.decisions),
        "recoveries": recoveries[:MAX_ROWS],
        "recoveries_total": len(recoveries),
        "cancellations": cancellations[:MAX_ROWS],
        "cancellations_total": len(cancellations),
        "quarantined": snap.quarantined[:MAX_ROWS],
        "quarantined_total": len(snap.quarantined),
    }


# -- the node's own view of Raft: how stale is this? ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: str
    raft_status: Callable[[], Any] | None
    """Returns a waitgraph.node.raft.RaftStatus (role, term, commit index, leader's Raft address, quorum)."""
    peers_by_raft: dict[str, str] = field(default_factory=dict)
    """Raft address -> node id, to name the leader."""

    def describe(self, applied_index: int) -> dict[str, Any]:
        out: dict[str, Any] = {"node_id": self.node_id, "applied_index": applied_index, "stale": True}
        st = None
        if self.raft_status is not None:
            try:
                st = self.raft_status()
            except Exception as exc:  # stopping, restoring
                logger.debug("liveview: no Raft status: %r", exc)
        if st is None:
            out.update(role="unknown", term=None, commit_index=None, leader_id=None, has_quorum=False, lag=None)
            out["read_note"] = (
                f"STALE: read from {self.node_id}'s own replica at applied index {applied_index}; its Raft status "
                "is unavailable"
            )
            return out
        leader = self.peers_by_raft.get(st.leader, st.leader) if st.leader else None
        lag = max(0, st.commit_index - applied_index)
        out.update(
            role=st.role,
            term=st.term,
            commit_index=st.commit_index,
            leader_id=leader,
            has_quorum=bool(st.has_quorum),
            lag=lag,
        )
        where = f"{self.node_id}'s own replica ({st.role}, term {st.term}, leader {leader or 'unknown'})"
        note = (
            f"Read from {where} without a log barrier: stale by design, at applied index {applied_index}, "
            f"{lag} behind the commit index this node knows ({st.commit_index})"
        )
        if not st.has_quorum:
            note += "; this node sees NO leader with a quorum, so newer commits may exist elsewhere"
        out["read_note"] = note
        return out


# -- the web application ----------------------------------------------------------------------------------------


class Unreadable(RuntimeError):
    """The replica cannot be read now: the page gets a 503 and tries again."""


class LiveView:
    """The WSGI application: the page, its JSON, the SVG, login, and optionally /metrics."""

    def __init__(
        self,
        read: Reader,
        tokens: TokenStore,
        node: NodeInfo,
        metrics_app: Callable[..., Iterable[bytes]] | None = None,
        secure_cookie: bool = False,
        clock: Callable[[], float] = time.time,
        svg: SvgCache | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read = read
        self.tokens = tokens
        self.node = node
        self.metrics_app = metrics_app
        self.secure_cookie = secure_cookie
        self.clock = clock
        self.monotonic = monotonic
        self.svg = svg or SvgCache()
        self._lock = threading.Lock()
        self._cached: tuple[int, dict[str, Any]] | None = None
        self._built = 0.0
        self._decision_views: dict[DecisionKey, Any] = {}

    # -- data ----------------------------------------------------------------------------------

    def view(self) -> dict[str, Any]:
        """The document for the current applied index (built once per index, one build at a time)."""
        with self._lock:
            snap: Snapshot | None = None
            now = self.monotonic()
            try:
                _, applied = self.read(lambda m: None)
                # At most one build per REBUILD_S however many browsers poll (each holds the lock).
                if self._cached is None or (self._cached[0] != applied and now - self._built >= REBUILD_S):
                    snap, applied = self.read(lambda m: snapshot(m, self._decision_views))
                    self._built = now
            except Exception as exc:  # starting, stopping, restoring a snapshot
                logger.debug("liveview: the replica cannot be read now: %r", exc)
                raise Unreadable("this node's replica cannot be read right now (starting or stopping)") from exc
            if snap is not None:
                snap.graph.applied_index, snap.graph.stale = applied, True
                self._cached = (applied, document(snap, self.svg))
            assert self._cached is not None
            applied, doc = self._cached
        return {**doc, "node": self.node.describe(applied), "served_at_ms": int(self.clock() * 1000)}

    # -- auth -----------------------------------------------------------------------------------

    def principal(self, environ: dict[str, Any]) -> Principal:
        header = environ.get("HTTP_AUTHORIZATION")
        if header is None:
            token = _cookies(environ).get(COOKIE)
            if token is None:
                raise Unauthenticated("no credentials: log in with an operator token")
            header = f"Bearer {token}"
        principal = self.tokens.authenticate([("authorization", header)], self.clock())
        if principal.role not in OPERATORS:
            raise denied(f"{principal.role.value} token {principal.name!r} may not see the live view (operator, admin)")
        return principal

    def _check_token(self, token: str) -> tuple[HTTPStatus, str]:
        try:
            self.principal({"HTTP_AUTHORIZATION": f"Bearer {token}"})
        except Unauthenticated as exc:
            return HTTPStatus.UNAUTHORIZED, exc.message
        except Exception as exc:  # denied: a known token of the wrong role
            return HTTPStatus.FORBIDDEN, getattr(exc, "message", str(exc))
        return HTTPStatus.OK, ""

    def _set_cookie(self, token: str) -> tuple[str, str]:
        secure = "; Secure" if self.secure_cookie else ""
        value = urllib.parse.quote(token, safe="")
        return "Set-Cookie", f"{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict{secure}"

    # -- WSGI -----------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        if path == "/metrics" and self.metrics_app is not None:
            return self.metrics_app(environ, start_response)
        try:
            status, headers, body = self.route(method, path, environ)
        except Exception:  # a bug: a plain 500, the details in the node's log only
            logger.exception("liveview: %s %s failed", method, path)
            status, headers, body = _text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error (see the node's log)")
        start_response(f"{status.value} {status.phrase}", [*headers, *SECURITY_HEADERS])
        return [body]

    def route(self, method: str, path: str, environ: dict[str, Any]) -> tuple[HTTPStatus, list[tuple[str, str]], bytes]:
        if path.startswith("/static/") and method == "GET":
            return _static(path.removeprefix("/static/"))
        if path == "/login" and method == "POST":
            token = _form(environ).get("token", "").strip()
            status, why = self._check_token(token) if token else (HTTPStatus.UNAUTHORIZED, "no token given")
            if status is HTTPStatus.OK:
                return HTTPStatus.SEE_OTHER, [("Location", "/"), self._set_cookie(token)], b""
            return _login(status, why)
        if path == "/logout":
            gone = f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"
            return HTTPStatus.SEE_OTHER, [("Location", "/login"), ("Set-Cookie", gone)], b""
        if method != "GET":
            return _text(HTTPStatus.METHOD_NOT_ALLOWED, "read-only: GET only")
        if path == "/login":
            return _login(HTTPStatus.OK, "")
        if path == "/":
            token = urllib.parse.parse_qs(environ.get("QUERY_STRING", "")).get("token", [""])[0].strip()
            if token:  # once: the cookie replaces it, and the address bar forgets it
                status, why = self._check_token(token)
                if status is HTTPStatus.OK:
                    return HTTPStatus.SEE_OTHER, [("Location", "/"), self._set_cookie(token)], b""
                return _login(status, why)
        if path not in ("/", "/api/view", "/graph.svg"):
            return _text(HTTPStatus.NOT_FOUND, "not found")
        try:
            self.principal(environ)
        except Unauthenticated as exc:
            if path == "/":
                return _login(HTTPStatus.UNAUTHORIZED, "")
            return _json(HTTPStatus.UNAUTHORIZED, {"error": "unauthenticated", "message": exc.message})
        except Exception as exc:
            message = getattr(exc, "message", str(exc))
            if path == "/":
                return _login(HTTPStatus.FORBIDDEN, message)
            return _json(HTTPStatus.FORBIDDEN, {"error": "wrong_role", "message": message})
        if path == "/":
            return _static("liveview.html")
        try:
            doc = self.view()
        except Unreadable as exc:
            return _json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "unavailable", "message": str(exc)})
        if path == "/api/view":
            return _json(HTTPStatus.OK, doc)
        if doc["graph"]["svg"] is None:
            return _text(HTTPStatus.SERVICE_UNAVAILABLE, doc["graph"]["error"] or "no picture")
        return HTTPStatus.OK, [("Content-Type", "image/svg+xml; charset=utf-8")], doc["graph"]["svg"].encode()


def _cookies(environ: dict[str, Any]) -> dict[str, str]:
    out = {}
    for part in (environ.get("HTTP_COOKIE") or "").split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            out[name] = urllib.parse.unquote(value)
    return out


def _form(environ: dict[str, Any]) -> dict[str, str]:
    try:
        size = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        size = 0
    body = environ["wsgi.input"].read(min(max(size, 0), MAX_FORM_BYTES)).decode(errors="replace")
    return {k: v[0] for k, v in urllib.parse.parse_qs(body).items()}


def _json(status: HTTPStatus, doc: Any) -> tuple[HTTPStatus, list[tuple[str, str]], bytes]:
    body = json.dumps(doc, ensure_ascii=True, separators=(",", ":")).encode()
    return status, [("Content-Type", "application/json")], body


def _text(status: HTTPStatus, text: str) -> tuple[HTTPStatus, list[tuple[str, str]], bytes]:
    return status, [("Content-Type", "text/plain; charset=utf-8")], (text + "\n").encode()


def _static(name: str) -> tuple[HTTPStatus, list[tuple[str, str]], bytes]:
    if name not in STATIC:
        return _text(HTTPStatus.NOT_FOUND, "not found")
    body = resources.files("waitgraph.ops").joinpath("static", name).read_bytes()
    kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return HTTPStatus.OK, [("Content-Type", f"{kind}; charset=utf-8")], body


def _login(status: HTTPStatus, why: str) -> tuple[HTTPStatus, list[tuple[str, str]], bytes]:
    """The login form; ``why`` (a token's refusal) goes in escaped, as the only dynamic text."""
    import html

    page = resources.files("waitgraph.ops").joinpath("static", "login.html").read_text()
    message = f'<p class="error">{html.escape(why)}</p>' if why else ""
    body = page.replace("<!--message-->", message).encode()
    return status, [("Content-Type", "text/html; charset=utf-8")], body


# -- the server ---------------------------------------------------------------------------------------------------


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that is no browser (plain HTTP on the HTTPS port, a scanner, a reset): one
        # debug line, not a traceback on the node's stderr.
        logger.debug("liveview: connection from %s failed", client_address, exc_info=True)


class _QuietHandler(WSGIRequestHandler):
    timeout = 30  # a client that stops sending loses its thread after this

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("liveview: %s %s", self.address_string(), format % args)


class _Server6(_Server):
    address_family = socket.AF_INET6


def serve(address: str, app: LiveView, tls: tuple[Path, Path] | None = None) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``app`` on ``host:port`` from a daemon thread (each request on its own thread);
    HTTPS with ``tls`` = (certificate, key). Returns what prometheus_client's
    ``start_http_server`` does: the server (``shutdown()``, ``server_close()``) and its thread."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    cls = _Server6 if ":" in host else _Server
    httpd = make_server(host, int(port), app, server_class=cls, handler_class=_QuietHandler)
    if tls is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(tls[0]), str(tls[1]))
        # The handshake happens on the request's own thread, not in accept().
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=httpd.serve_forever, name="waitgraph-liveview", daemon=True)
    thread.start()
    return httpd, thread


def serve_node(node: NodeProcess, address: str, metrics_app: Any) -> tuple[WSGIServer, threading.Thread]:
    """The live view of one running node (``NodeProcess.http_view``): its replica, its tokens, its
    TLS certificate, and its /metrics app on the same listener."""
    cfg = node.cfg

    def obj() -> Any:  # the Raft object exists once the node has started
        return node.node.obj

    app = LiveView(
        read=lambda fn: obj().read(lambda m: (fn(m), int(obj().raftLastApplied))),
        tokens=cfg.tokens,
        node=NodeInfo(cfg.node_id, node.node.status, {p.raft_address: p.node_id for p in cfg.peers}),
        metrics_app=metrics_app,
        secure_cookie=cfg.tls_cert is not None,
    )
    tls = (cfg.tls_cert, cfg.tls_key) if cfg.tls_cert and cfg.tls_key else None
    httpd, thread = serve(address, app, tls)
    logger.info("live view: %s://%s/ (operator token), /metrics", "https" if tls else "http", address)
    return httpd, thread
