"""The live view's documents: what a node's web view (cluster/ops/liveweb.py) shows, read from its replica.

Three documents, each a pure function of one state:
- :func:`build` (``/api/view`` and ``/api/graph``): the panels (every current cycle and its
  state, each decision's victim with every candidate's score on every policy term, decisions and
  epochs, open recoveries and their votes, unconverged cancellations, quarantines, the rollout
  mode and admission), the summary strip (:func:`summary`), the whole wait graph in a compact
  form the page filters and lays out itself (:func:`graph`), and its focus, the part near the
  cycles that the page draws first (:func:`focus`). It reads everything, including a
  full detection pass: the node runs it on a forked copy-on-write image of its replica
  (``RaftNode.read_image``), so the replica's lock is held only to read its write counter (the
  node forks right after letting go of it).
- :func:`details` (``/api/details?id=``): one execution or target, everything about it, read under
  the lock (a few dict look-ups and copies: microseconds).

Rules kept here:
- Read-only and local: never through the log, never written to; the server labels the page stale
  and by how much (:class:`NodeInfo`).
- Ids, reasons and signatures come from agents: they leave only as JSON strings; the page puts
  them into the DOM and the graph's canvas as text, never as markup.
- Bounded where a person reads: tables stop at :data:`MAX_ROWS` rows and a cycle's listed members
  at :data:`MAX_MEMBERS` (the graph document has them all: the page draws from it).
"""

from __future__ import annotations

import heapq
import json
import logging
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from waitgraph.node.lessor import SessionsView
from waitgraph.node.service import cycles_response
from waitgraph.ops import render
from waitgraph.statemachine import StateMachine
from waitgraph.statemachine.cancel import export_pending
from waitgraph.statemachine.enums import ExecStatus
from waitgraph.statemachine.queues import position as queue_position
from waitgraph.statemachine.queues import positions as queue_positions
from waitgraph.statemachine.state import State, is_orphaned
from waitgraph.wire import convert

logger = logging.getLogger("waitgraph.ops.liveview")

MAX_ROWS = 50
MAX_MEMBERS = 20
"""Members listed per cycle or proposal in the panels (a cycle of thousands is still one row)."""
TOP = 10
"""Rows of each summary list (longest waits, reasons, orphans)."""


# -- what is read from the replica ----------------------------------------------------------------------


@dataclass
class Snapshot:
    """What the panels show, as the operator RPCs' messages and plain values."""

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
    summary: dict[str, Any] = field(default_factory=dict)


def snapshot(m: StateMachine) -> Snapshot:
    """The panels' part of the replica: the same views the Cycles and ExplainDecision RPCs answer
    with (a full detection pass), the pending-edges document's cancellations, the summary strip."""
    st = m.state
    rb = st.recovery
    cycles = cycles_response(st, include_closed=False)
    decisions = [convert.decision_view(d) for d in rb.decisions.values()]
    quarantined = []
    for eid, ex in sorted(st.executions.items()):
        if ex.status is ExecStatus.QUARANTINED:
            req = st.cancel.requests.get(eid)
            quarantined.append(
                {
                    "execution_id": eid,
                    "generation": ex.generation,
                    "run_id": ex.run_id,
                    "agent_id": ex.agent_id,
                    "since_ms": req.quarantined_at_ms if req is not None else ex.status_at_ms,
                    "holds": held_by(st, eid),
                }
            )
    export = export_pending(st)
    return Snapshot(
        cycles=cycles,
        decisions=decisions,
        export=export,
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
        summary=summary(st, cycles, len(export["cancellations"]), len(quarantined)),
    )


def held_by(st: State, execution_id: str) -> list[str]:
    return sorted(t for t in st.satisfies.get(execution_id, ()) if execution_id in st.targets[t].holders)


def target_kind(target_id: str) -> str:
    return target_id.partition(":")[0]


def summary(st: State, cycles: Any, unconverged: int, quarantined: int) -> dict[str, Any]:
    """The strip above the graph: what is stuck, on what, for how long, and who owns nothing any more."""
    by_status = Counter(ex.status.value for ex in st.executions.values())
    by_kind: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    waits = [e for w in st.waits_by_waiter.values() for e in w.values()]
    for e in waits:
        by_kind[target_kind(e.target_id)] += 1
        by_reason[e.reason] += 1
    oldest = heapq.nsmallest(TOP, waits, key=lambda e: (e.registered_at_ms, e.waiter_id, e.target_id))
    kinds = render.cycle_kinds(cycles)
    orphans = sorted(eid for eid, ex in st.executions.items() if is_orphaned(st, ex))
    return {
        "executions_by_status": dict(sorted(by_status.items())),
        "waits_by_kind": dict(sorted(by_kind.items())),
        "waits_by_reason": [
            {"reason": r, "count": n} for r, n in sorted(by_reason.items(), key=lambda x: (-x[1], x[0]))[:TOP]
        ],
        "reasons_total": len(by_reason),
        "longest_waits": [
            {
                "waiter_id": e.waiter_id,
                "target_id": e.target_id,
                "reason": e.reason,
                "edge_version": e.edge_version,
                "registered_at_ms": e.registered_at_ms,
                "age_ms": max(0, st.now_ms - e.registered_at_ms),
            }
            for e in oldest
        ],
        "cycles": {
            "candidate": sum(1 for k in kinds.values() if k == "candidate"),
            "confirmed": sum(1 for k in kinds.values() if k == "confirmed"),
        },
        "unconverged_cancellations": unconverged,
        "quarantined": quarantined,
        "orphaned": orphans[:TOP],
        "orphaned_total": len(orphans),
    }


def graph(st: State, cycles: Any, decisions: Sequence[Any]) -> dict[str, Any]:
    """The whole wait graph, compact (rows of values; runs and agents by index): the page filters
    it, finds each cycle's k-hop neighbourhood and lays out only what it draws.

    - ``executions``: [id, generation, status, run index, agent index]
    - ``targets``: [id, kind, version, satisfier id or null, [holder ids]] (``exec:`` targets are
      the executions themselves and are not repeated)
    - ``waits``: [waiter id, target id, reason index, edge version, registered at ms]
    - ``cycles``: every current cycle with all its members; ``victims``: execution id -> decision id;
      ``statuses`` and ``kinds``: the filters' choices
    """
    runs: dict[str, int] = {}
    agents: dict[str, int] = {}
    reasons: dict[str, int] = {}
    execs = []
    for eid, ex in st.executions.items():
        r = runs.setdefault(ex.run_id, len(runs))
        a = agents.setdefault(ex.agent_id, len(agents))
        execs.append([eid, ex.generation, ex.status.value, r, a])
    targets = [[tid, t.kind.value, t.version, t.satisfier_id, sorted(t.holders)] for tid, t in st.targets.items()]
    waits = [
        [e.waiter_id, e.target_id, reasons.setdefault(e.reason, len(reasons)), e.edge_version, e.registered_at_ms]
        for w in st.waits_by_waiter.values()
        for e in w.values()
    ]
    kinds = render.cycle_kinds(cycles)
    return {
        "now_ms": st.now_ms,
        "runs": list(runs),
        "agents": list(agents),
        "reasons": list(reasons),
        "executions": execs,
        "statuses": sorted({row[2] for row in execs}),
        "targets": targets,
        "kinds": sorted({row[1] for row in targets}),
        "waits": waits,
        "cycles": [
            {"digest": c.digest, "kind": kinds[c.digest], "members": [m.execution_id for m in c.members]}
            for c in cycles.cycles
        ],
        "victims": {eid: d.decision_id for eid, d in render.victims(decisions).items()},
    }


FOCUS_HOPS = 6
"""The most execution hops the page's toolbar offers (``f-hops``): the focus covers up to these."""
FOCUS_MAX_NODES = 2000
"""The focus holds every node within h hops of the cycles for the largest h <= FOCUS_HOPS that
keeps it at most this many nodes (a tenth of the page's work at 10,000 executions, or less)."""


def focus(doc: dict[str, Any], max_hops: int = FOCUS_HOPS, max_nodes: int = FOCUS_MAX_NODES) -> dict[str, Any] | None:
    """What the page draws first: the part of :func:`graph`'s document within ``hops`` execution
    hops of the cycles' members and victims (a target on the way costs no hop; the page's own rule,
    ``selectNodes`` in static/liveview.js), for the largest ``hops`` <= ``max_hops`` that keeps it
    at most ``max_nodes`` nodes; None when there is no cycle or its members alone are more.

    Rows keep the whole document's order and every edge between two kept nodes is kept, so the
    page's walk over this part, from the same seeds and at most ``hops``, takes the same steps in
    the same order as over the whole graph and draws the same picture. Besides the rows:
    ``focus`` (``hops``; the whole graph's ``executions`` and ``targets`` counts) and ``outside``
    (executions that produce a kept target but are not kept: its label names them).
    """
    execs = {row[0] for row in doc["executions"]}
    target_ids = {row[0] for row in doc["targets"]}
    adj: dict[str, list[str]] = {}

    def link(a: str, b: str) -> None:
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)

    for tid, _kind, _version, satisfier, holders in doc["targets"]:
        for h in holders:
            if h in execs:
                link(tid, h)
        if satisfier in execs and satisfier not in holders:
            link(tid, satisfier)
    for waiter, target, *_ in doc["waits"]:
        if waiter in execs:
            link(waiter, target)
    seeds = [
        eid
        for eid in dict.fromkeys([*doc["victims"], *(m for c in doc["cycles"] for m in c["members"])])
        if eid in execs
    ]
    if not seeds or len(seeds) > max_nodes:
        return None
    # 0-1 breadth-first: executions cost a hop, targets none
    dist = dict.fromkeys(seeds, 0)
    frontier = list(seeds)
    for hop in range(max_hops + 1):
        level = list(frontier)
        nxt: list[str] = []
        while level:
            node = level.pop()
            for n in adj.get(node, ()):
                if n in dist:
                    continue
                if n in execs:
                    if hop < max_hops:
                        dist[n] = hop + 1
                        nxt.append(n)
                else:
                    dist[n] = hop
                    level.append(n)
        frontier = nxt
    within = Counter(dist.values())
    hops, total = -1, 0
    for h in range(max_hops + 1):
        total += within[h]
        if total > max_nodes:
            break
        hops = h
    if hops < 0:
        return None
    kept = {n for n, d in dist.items() if d <= hops}
    targets = [row for row in doc["targets"] if row[0] in kept]
    outside = sorted({row[3] for row in targets if row[3] in execs and row[3] not in kept})
    return {
        **doc,
        "executions": [row for row in doc["executions"] if row[0] in kept],
        "targets": targets,
        "waits": [row for row in doc["waits"] if row[0] in kept and row[1] in kept],
        "focus": {
            "hops": hops,
            "executions": len(execs),
            "targets": len(target_ids | {w[1] for w in doc["waits"]} - execs),
        },
        "outside": outside,
    }


_FRAME = struct.Struct("!QQd")


def build(m: StateMachine) -> bytes:
    """The documents of one state, framed: a header (the panels' and the focus's lengths, this
    build's CPU seconds), the panels, the graph's focus (empty when there is none, :func:`focus`),
    the whole graph (JSON). The node runs it in its forked reader, where all of it is the child's
    CPU, none of it under the node's lock."""
    cpu0 = time.process_time()
    snap = snapshot(m)
    view = _dumps(document(snap))
    whole = graph(m.state, snap.cycles, picture_decisions(snap.cycles, snap.decisions))
    near = focus(whole)
    part = b"" if near is None else _dumps(near)
    picture = _dumps(whole)
    return _FRAME.pack(len(view), len(part), time.process_time() - cpu0) + view + part + picture


def unframe(data: bytes) -> tuple[bytes, bytes, bytes, float]:
    """(panels, focus or b"", graph, CPU seconds) of :func:`build`'s bytes."""
    n, k, cpu_s = _FRAME.unpack_from(data)
    at = _FRAME.size
    return data[at : at + n], data[at + n : at + n + k], data[at + n + k :], cpu_s


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":")).encode()


def picture_decisions(cycles: Any, decisions: Iterable[Any]) -> list[Any]:
    """The decisions whose victims the graph marks: those of the confirmed current cycles (the
    same rule ``waitgraph graph -o dot|svg`` follows)."""
    confirmed = {d for d, kind in render.cycle_kinds(cycles).items() if kind == "confirmed"}
    return [d for d in decisions if d.digest in confirmed]


# -- one execution or target, for a click ------------------------------------------------------------------


def details(st: State, node_id: str) -> dict[str, Any] | None:
    """Everything about one execution or target, as plain values (call it under the machine lock:
    it copies a few entries), with the raw decisions it took part in under ``_decisions`` (they
    never change once applied: convert them outside the lock with :func:`decision_details`).
    A wait on a resource or pool carries its ``queue_position`` (0 = granted next; None for other
    targets) and a target its whole grant ``queue``."""
    places = queue_positions(st.queues, (node_id,)).get(node_id, {})
    waits_in = [
        {
            "waiter_id": e.waiter_id,
            "waiter_generation": e.waiter_generation,
            "target_generation": e.target_generation,
            "reason": e.reason,
            "edge_version": e.edge_version,
            "deadline_ms": e.deadline_ms,
            "registered_at_ms": e.registered_at_ms,
            "queue_position": places.get(e.waiter_id),
        }
        for e in st.waits_on(node_id)
    ]
    ex = st.executions.get(node_id)
    if ex is not None:
        session = st.sessions.get(ex.agent_id)
        holds = held_by(st, node_id)
        return {
            "kind": "execution",
            "id": node_id,
            "generation": ex.generation,
            "status": ex.status.value,
            "status_at_ms": ex.status_at_ms,
            "created_at_ms": ex.created_at_ms,
            "run_id": ex.run_id,
            "parent_id": ex.parent_id,
            "agent_id": ex.agent_id,
            "session": session.status.value if session is not None else "NONE",
            "priority": ex.priority,
            "checkpoint": ex.checkpoint,
            "unique_evidence": ex.unique_evidence,
            "cost_consumed": ex.cost_consumed,
            "side_effects": [
                {
                    "effect_id": k,
                    "outcome": s.outcome.value,
                    "compensatable": s.compensatable,
                    "generation": s.generation,
                }
                for k, s in sorted(ex.side_effects.items())
            ],
            "waits": [
                {
                    "target_id": e.target_id,
                    "target_generation": e.target_generation,
                    "reason": e.reason,
                    "edge_version": e.edge_version,
                    "deadline_ms": e.deadline_ms,
                    "cancel_mode": e.cancel_mode.value,
                    "registered_at_ms": e.registered_at_ms,
                    "queue_position": queue_position(st.queues, e.target_id, node_id),
                }
                for e in st.waits_of(node_id)
            ],
            "waited_on_by": waits_in,
            "holds": holds,
            "satisfies": sorted(set(st.satisfies.get(node_id, ())) - set(holds)),
            "_decisions": [
                d for d in st.recovery.decisions.values() if any(s.execution_id == node_id for s in d.scores)
            ],
        }
    t = st.targets.get(node_id)
    if t is None:
        return None
    return {
        "kind": "target",
        "id": node_id,
        "target_kind": t.kind.value,
        "version": t.version,
        "slots": t.slots,
        "satisfier_id": t.satisfier_id,
        "satisfier_generation": t.satisfier_generation,
        "approved": t.approved,
        "holders": [{"execution_id": h, "generation": g} for h, g in sorted(t.holders.items())],
        "waited_on_by": waits_in,
        "queue": [
            {"waiter_id": e.waiter_id, "priority": e.priority, "passed": e.passed} for e in st.queues.get(node_id, ())
        ],
        "_decisions": [d for d in st.recovery.decisions.values() if any(tid == node_id for tid, _ in d.released)],
    }


def decision_details(found: dict[str, Any]) -> dict[str, Any]:
    """:func:`details`' answer with its decisions converted (outside the lock) and scored."""
    out = {k: v for k, v in found.items() if k != "_decisions"}
    out["decisions"] = [decision_json(convert.decision_view(d)) for d in found["_decisions"][-MAX_ROWS:]]
    return out


# -- the panels --------------------------------------------------------------------------------------------


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
        "remedies": [{"remedy": r.remedy, "outcome": r.outcome, "reason": r.reason} for r in d.remedies],
        "reassigned": [
            {
                "approval_id": r.approval_id,
                "from_id": r.from_id,
                "from_generation": r.from_generation,
                "to_id": r.to_id,
                "to_generation": r.to_generation,
            }
            for r in d.reassigned[:MAX_ROWS]
        ],
    }


def document(snap: Snapshot) -> dict[str, Any]:
    """The panels' JSON (``/api/view``, less the node's Raft view the server adds per request)."""
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
        "summary": snap.summary,
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


# -- sessions: the lessor's view, not the replica's -----------------------------------------------------------


def sessions_panel(v: SessionsView) -> dict[str, Any]:
    """The Sessions panel's document: the count and limits, the heartbeat ages and the suspended
    agents, as this node's lessor knows them (cluster/node/lessor.py: the leader knows every
    session's heartbeats; a follower only those it received, and names no suspended agent)."""
    return {
        "active": v.active,
        "here": v.here,
        "leading": v.leading,
        "max_per_node": v.max_per_node,
        "max_per_cluster": v.max_per_cluster,
        "heartbeat_ages": v.heartbeat_ages,
        # whole seconds: the feed publishes a document only when it changed
        "oldest_heartbeat_age_s": v.oldest_heartbeat_age_ms // 1000,
        "heartbeat_age_p99_s": v.heartbeat_age_p99_ms // 1000,
        "heartbeat_age_buckets": [[bound, n] for bound, n in v.heartbeat_age_buckets],
        "suspended_count": v.suspended_count,
        "suspended": [{"agent_id": agent, "heartbeat_age_s": age // 1000} for agent, age in v.suspended_ages_ms],
        "refused": dict(sorted(v.refused.items())),
    }


# -- the node's own view of Raft: how stale is this? ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: str
    raft_status: Callable[[], Any] | None
    """Returns a waitgraph.node.raft.RaftStatus (role, term, commit index, leader's Raft address, quorum)."""
    peers_by_raft: dict[str, str] = field(default_factory=dict)
    """Raft address -> node id, to name the leader."""

    def commit_index(self) -> int | None:
        """The commit index this node knows now, None while its Raft status is unavailable."""
        if self.raft_status is None:
            return None
        try:
            return int(self.raft_status().commit_index)
        except Exception as exc:  # stopping, restoring
            logger.debug("liveview: no Raft status: %r", exc)
            return None

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
        # The membership as the node has it now (members added at runtime too), else the configured peers.
        names = {**self.peers_by_raft, **{m.raft_address: m.node_id for m in getattr(st, "members", ())}}
        leader = names.get(st.leader, st.leader) if st.leader else None
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
