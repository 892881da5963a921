"""Deadlock detection: a pure function of one state (DESIGN.md §3).

Rules kept here:
- Only **hard** waits enter the wait-for graph. A wait is hard when every execution that could
  satisfy it is known, live and at the generation the wait (or the satisfier edge) names:
  ``exec:X`` -> X when X is nonterminal at the wait's target generation; ``artifact:`` and
  ``approval:`` -> the declared producer/provider when it is an ``exec:`` at its declared
  generation and was declared for a version >= the wait's target generation (a ``human:`` or
  ``external:`` satisfier, or none, makes the wait external: no edge); ``resource:`` and
  ``reservation:`` -> the holder of the lease the wait names; ``pool:`` -> every holder, only
  when no slot is free. Deadlines play no part: a timeout is a failure, never progress.
- A **candidate** is a maximal set S of WAITING executions, strongly connected in the hard graph,
  in which every member has at least one hard wait whose satisfiers all lie in S (a pool wait
  needs every holder in S). Found as SCCs, pruned, SCCs again, until nothing changes.
- Nothing recurses (a million-long chain is an ordinary input) and nothing depends on dict or set
  iteration order: node numbering may follow insertion order, but every output is sorted.
- The detector reads the state and never writes it. It trusts the state's derived indexes as
  the machine keeps them (``waits_by_waiter``, ``satisfies``, the ``touch`` log) and checks every
  generation itself, so a wait of an attempt that is over never becomes an edge.
- A full pass over a million executions is dominated by reaching the state's objects at all, so
  it is written as bulk C-level iteration (map, zip, compress) over flat lists of node numbers,
  with the cyclic garbage collector paused while it runs (it changes no result). The incremental
  pass walks from what changed and is proportional to what it reaches.

Canonical forms (what the recovery protocol compares and replicates):
- ``Candidate.members``: ``(execution_id, generation)`` sorted by id.
- ``Candidate.edges``: ``(edge_id, edge_version)`` for every hard wait of a member that has at
  least one satisfier inside S (the edges the component is made of; waits that point only outside
  S cannot help or hurt the deadlock and are left out, so they do not change the digest), sorted
  by (waiter, edge id): the digest's order.
- ``Candidate.digest``: full sha256 hex of the UTF-8 text ``"wait-digest.v1\\n"`` followed by one
  line ``f"{execution_id} {generation} {edge_id} {edge_version}\\n"`` per edge, lines in sorted
  order of the tuple ``(execution_id, generation, edge_id, edge_version)`` where ``execution_id``
  and ``generation`` are the waiter's. Ids never contain a space, a newline or any character
  that sorts before a space (see :mod:`ids`), so sorting the lines as strings sorts the tuples.
- ``Candidate.signature``: first 16 hex of sha256 of the member ids, sorted, joined by ``"|"``:
  the second seed's ``CycleObservation.signature``; generations and the epoch are left out on
  purpose, so the same cycle re-forming after a rollback has the same signature.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, compress, groupby, islice, repeat
from operator import attrgetter, eq, is_, itemgetter, neg, not_

from .enums import TERMINAL, ExecStatus
from .ids import Kind
from .state import State, Target, WaitEdge, collector_paused

__all__ = [
    "DIGEST_VERSION",
    "Candidate",
    "HardWait",
    "IncrementalDetector",
    "compute_digest",
    "compute_signature",
    "full_pass",
    "hard_waits",
    "still_deadlocked",
    "wait_satisfiers",
]

DIGEST_VERSION = "wait-digest.v1"

_WAITING = ExecStatus.WAITING
_EXEC_PREFIX = "exec:"

_status_generation = attrgetter("status", "generation")
_edge_fields = attrgetter("waiter_generation", "target_id", "target_generation")
_row_fields = attrgetter("waiter_id", "waiter_generation", "target_id", "edge_version")
_first = itemgetter(0)
_second = itemgetter(1)
_third = itemgetter(2)
_fourth = itemgetter(3)
_ROW = "{} {} {} {}\n"
"""One digest line: execution, generation, edge id, edge version."""
_LINE = "{0} {1} {0}>{2} {3}\n"
"""The same line from (waiter, generation, target, version): the edge id is ``waiter>target``."""


# -- results ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HardWait:
    """One open wait of an execution, projected: the executions whose progress satisfies it.

    ``satisfiers`` is sorted and never empty; each is live at the generation the wait (or the
    satisfier edge) names, which is its current generation.
    """

    edge_id: str
    edge_version: int
    target_id: str
    target_generation: int
    satisfiers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A candidate deadlock; see the module docstring for the canonical forms."""

    members: tuple[tuple[str, int], ...]
    edges: tuple[tuple[str, int], ...]
    digest: str
    signature: str

    @property
    def member_ids(self) -> tuple[str, ...]:
        return tuple(m for m, _ in self.members)

    @classmethod
    def build(cls, members: Iterable[tuple[str, int]], edges: Iterable[tuple[str, int]]) -> Candidate:
        """A candidate from its members and edges in any order (e.g. a recovery proposal's
        fields): canonical order, digest and signature computed here."""
        ms = tuple(sorted(members))
        es = tuple(sorted(edges, key=_edge_order))
        return cls(ms, es, compute_digest(ms, es), compute_signature(m for m, _ in ms))


def _edge_order(edge: tuple[str, int]) -> tuple[str, str, int]:
    """(waiter, edge id, version): by waiter first. Not the same as by edge id alone, since an id
    may hold characters that sort before ``>`` (``exec:a.b>x`` < ``exec:a>x``)."""
    return edge[0].partition(">")[0], edge[0], edge[1]


def compute_signature(member_ids: Iterable[str]) -> str:
    return hashlib.sha256("|".join(sorted(member_ids)).encode()).hexdigest()[:16]


def compute_digest(members: Iterable[tuple[str, int]], edges: Iterable[tuple[str, int]]) -> str:
    """Digest over sorted (execution, generation, edge id, edge version); the waiter of an edge is
    the part of its id before ``>`` and its generation is the member's."""
    gen = dict(members)
    rows = []
    for e, v in edges:
        w = e.partition(">")[0]
        if w not in gen:
            raise ValueError(f"edge {e} is not a wait of a member")
        rows.append((w, gen[w], e, v))
    rows.sort()
    return _digest_rows(_ROW.format(*row) for row in rows)


def _digest_rows(rows: Iterable[str]) -> str:
    h = hashlib.sha256(DIGEST_VERSION.encode() + b"\n")
    h.update("".join(rows).encode())
    return h.hexdigest()


# -- the projection (one wait at a time: the reference the fast paths must agree with) ----------


def _live_at(state: State, execution_id: str, generation: int) -> bool:
    ex = state.executions.get(execution_id)
    return ex is not None and ex.generation == generation and ex.status not in TERMINAL


_NO_RULE = 0
_AT_MOST = 1  # hard when the wait's target generation <= the value (declared for a later version)
_EXACTLY = 2  # hard when the wait's target generation == the value (the lease it names)

_TargetRule = tuple[tuple[str, ...], int, int] | None


def _target_rule(state: State, t: Target) -> _TargetRule:
    """The part of the projection that depends on the target alone: satisfiers (checked live at
    their generations) and the condition on the wait's target generation; None: never hard."""
    kind = t.kind
    if kind is Kind.ARTIFACT or kind is Kind.APPROVAL:
        sid = t.satisfier_id
        if sid is None or not sid.startswith(_EXEC_PREFIX):
            return None  # unknown, or a human / outside API: external, never a deadlock
        if not _live_at(state, sid, t.satisfier_generation):
            return None
        return (sid,), _AT_MOST, t.satisfier_for
    holders = t.holders
    if kind is Kind.POOL:
        if not holders or len(holders) < t.slots:
            return None  # a free slot: the wait resolves as soon as anyone acquires it
        rule, value = _NO_RULE, 0
    elif kind is Kind.RESOURCE or kind is Kind.RESERVATION:
        if not holders:
            return None
        rule, value = _EXACTLY, t.version
    else:
        return None
    for h, g in holders.items():
        if not _live_at(state, h, g):
            return None  # a holder nobody can account for: not every releaser is known
    return tuple(sorted(holders)), rule, value


def _apply_rule(rule: _TargetRule, target_generation: int) -> tuple[str, ...] | None:
    if rule is None:
        return None
    sats, kind, value = rule
    if kind == _AT_MOST and target_generation > value:
        return None  # the declared producer makes an older version than the wait needs
    if kind == _EXACTLY and target_generation != value:
        return None  # the wait names a lease that is over
    return sats


def wait_satisfiers(state: State, edge: WaitEdge) -> tuple[str, ...] | None:
    """The executions that satisfy ``edge`` if it is hard, sorted; None if it is not hard."""
    waiter = state.executions.get(edge.waiter_id)
    if waiter is None or waiter.generation != edge.waiter_generation or waiter.status in TERMINAL:
        return None
    tid = edge.target_id
    if tid.startswith(_EXEC_PREFIX):
        return (tid,) if _live_at(state, tid, edge.target_generation) else None
    t = state.targets.get(tid)
    if t is None:
        return None
    return _apply_rule(_target_rule(state, t), edge.target_generation)


def hard_waits(state: State, execution_id: str) -> list[HardWait]:
    """The execution's open waits that are hard, in target-id order (re-validation reuses this)."""
    out = []
    for edge in state.waits_of(execution_id):
        sats = wait_satisfiers(state, edge)
        if sats is not None:
            out.append(HardWait(edge.edge_id, edge.edge_version, edge.target_id, edge.target_generation, sats))
    return out


class _Rules:
    """Per-pass cache of target rules: a popular pool is projected once, not once per waiter."""

    __slots__ = ("_cache", "_state")

    def __init__(self, state: State) -> None:
        self._state = state
        self._cache: dict[str, _TargetRule] = {}

    def satisfiers(self, edge: WaitEdge) -> tuple[str, ...] | None:
        """:func:`wait_satisfiers` for an edge whose waiter is known current (WAITING, same
        generation)."""
        tid = edge.target_id
        if tid.startswith(_EXEC_PREFIX):
            return (tid,) if _live_at(self._state, tid, edge.target_generation) else None
        cache = self._cache
        if tid in cache:
            rule = cache[tid]
        else:
            t = self._state.targets.get(tid)
            rule = cache[tid] = None if t is None else _target_rule(self._state, t)
        return _apply_rule(rule, edge.target_generation)


# -- the graph handed to the SCC core -------------------------------------------------------------


@dataclass(slots=True)
class _Graph:
    """Nodes are WAITING executions with open waits, numbered 0..n-1; ``n`` itself is a sentinel
    that stands for "not a node" (done and labelled -1 forever, so the core ignores it).

    ``edges[starts[v]:starts[v + 1]]``: the open waits of node v (current generation). For each
    edge k, ``hop[k]`` is the node an ``exec:`` wait points at when that execution is a node at
    the generation the wait names, else ``n``; ``typed[k]``, for a wait on a typed target that is
    hard and has satisfiers among the nodes: those nodes, and whether they are all of its
    satisfiers. ``succ[v]``: v's successors (``n`` entries allowed; duplicates too).
    ``multi``: for a node with a hard wait of two or more satisfiers (a pool), the exact list of
    its waits that could qualify, as node tuples; for every other node each successor comes from
    a one-satisfier wait, so "has a successor in S" is the whole rule.
    """

    ids: list[str]
    gens: list[int]
    index: dict[str, int]
    edges: list[WaitEdge]
    starts: list[int]
    hop: list[int]
    typed: dict[int, tuple[tuple[int, ...], bool]]
    succ: list[list[int]]
    multi: dict[int, list[tuple[int, ...]]]


_IntRule = tuple[tuple[int, ...], bool, int, int] | None


def _int_rule(state: State, t: Target, index: dict[str, int], gens: list[int]) -> _IntRule:
    """:func:`_target_rule` in node numbers: (satisfiers that are nodes, whether that is all of
    them, condition, value); None when the wait can give no edge. A lone satisfier that is not a
    node gives no edge whether or not it is live, so its liveness is not even looked up."""
    kind = t.kind
    if kind is Kind.ARTIFACT or kind is Kind.APPROVAL:
        sid = t.satisfier_id
        j = None if sid is None else index.get(sid)
        if j is None or gens[j] != t.satisfier_generation:
            return None
        return (j,), True, _AT_MOST, t.satisfier_for
    holders = t.holders
    if len(holders) == 1 and (kind is Kind.RESOURCE or kind is Kind.RESERVATION or t.slots == 1):
        ((h, hg),) = holders.items()
        j = index.get(h)
        if j is None or gens[j] != hg:
            return None
        return (j,), True, _NO_RULE if kind is Kind.POOL else _EXACTLY, t.version
    rule = _target_rule(state, t)
    if rule is None:
        return None
    sats, mode, value = rule
    js = tuple(j for j in map(index.get, sats) if j is not None)
    return (js, len(js) == len(sats), mode, value) if js else None


def _project_all(state: State) -> _Graph:
    """The whole hard graph among WAITING executions.

    Built by C-level iteration (map, zip, compress, chain) wherever possible: a full pass over a
    million executions is dominated by this projection, and most of its cost is reaching the
    state's objects at all, so each is reached as few times as possible.
    """
    execs = state.executions
    by_waiter = state.waits_by_waiter
    # Each object of the state is reached once: the fields needed are copied into fresh tuples
    # (allocated side by side, so the later passes over them stay in cache).
    try:
        sg = list(map(_status_generation, map(execs.__getitem__, by_waiter)))
    except KeyError:
        return _careful(state)  # a wait without its execution
    mask = list(map(is_, map(_first, sg), repeat(_WAITING)))
    waiting = list(compress(by_waiter, mask))
    n = len(waiting)
    gens: list[int] = list(map(_second, compress(sg, mask)))
    del sg
    index = dict(zip(waiting, range(n), strict=True))
    wait_dicts = list(compress(by_waiter.values(), mask))
    counts = list(map(len, wait_dicts))
    edges: list[WaitEdge] = list(chain.from_iterable(map(dict.values, wait_dicts)))
    del wait_dicts
    fields = list(map(_edge_fields, edges))
    srcs = list(chain.from_iterable(map(repeat, range(n), counts)))
    if list(map(_first, fields)) != list(map(gens.__getitem__, srcs)):
        # An edge of an older attempt: the machine closes those, so only a damaged or hand-made
        # state gets here; the careful path skips them.
        return _careful(state)
    tids = list(map(_second, fields))
    hop = list(map(index.get, tids, repeat(n)))
    gens_or_none: list[int | None] = [*gens, None]
    # An exec: wait on a node is an edge only at the generation it names (else it waits for an
    # attempt that is over); compare in bulk, fix the rare mismatches one by one.
    same = list(map(eq, map(gens_or_none.__getitem__, hop), map(_third, fields)))
    del fields
    if same.count(False) != hop.count(n):
        hop = [j if ok else n for j, ok in zip(hop, same, strict=True)]
    starts = [0, *accumulate(counts)]
    succ = list(map(hop.__getitem__, map(slice, starts, islice(starts, 1, None))))
    succ.append([])
    typed: dict[int, tuple[tuple[int, ...], bool]] = {}
    rules: dict[str, _IntRule] = {}
    multi_nodes: set[int] = set()
    # Typed targets. Only a target some node produces, provides or holds can give an edge to a
    # node, and the state indexes those (``satisfies``: execution -> such targets), so the rules
    # run for the few waits on such targets, not for every wait on a running execution's lease.
    reachable = set(chain.from_iterable(map(state.satisfies.get, waiting, repeat(()))))
    others = list(compress(range(len(tids)), map(n.__eq__, hop))) if reachable else []
    for k in compress(others, map(reachable.__contains__, map(tids.__getitem__, others))):
        tid = tids[k]
        if tid in rules:
            rule = rules[tid]
        else:
            t = state.targets.get(tid)
            rule = rules[tid] = None if t is None else _int_rule(state, t, index, gens)
        if rule is None:
            continue
        js, whole, mode, value = rule
        tg = edges[k].target_generation
        if (mode == _AT_MOST and tg > value) or (mode == _EXACTLY and tg != value):
            continue
        typed[k] = (js, whole)
        v = srcs[k]
        succ[v] += js
        if len(js) > 1 or not whole:
            multi_nodes.add(v)
    g = _Graph(waiting, gens, index, edges, starts, hop, typed, succ, {})
    for v in sorted(multi_nodes):
        g.multi[v] = _qualifying(g, v)
    return g


def _careful(state: State) -> _Graph:
    g = _project_from(state, list(state.waits_by_waiter))
    assert g is not None
    return g


def _qualifying(g: _Graph, v: int) -> list[tuple[int, ...]]:
    """Waits of node ``v`` whose satisfiers are all nodes, as node tuples."""
    n = len(g.ids)
    out: list[tuple[int, ...]] = []
    for k in range(g.starts[v], g.starts[v + 1]):
        j = g.hop[k]
        if j != n:
            out.append((j,))
        else:
            t = g.typed.get(k)
            if t is not None and t[1]:
                out.append(t[0])
    return out


def _project_from(state: State, seeds: Iterable[str], limit: int | None = None) -> _Graph | None:
    """The hard graph among WAITING executions reachable from ``seeds``: a forward-closed part of
    the whole graph, so every SCC and every candidate in it is exactly one of the whole graph's.
    Also the careful path for a state the fast projection does not trust. None when more than
    ``limit`` executions are reachable (then a full pass is cheaper)."""
    execs = state.executions
    by_waiter = state.waits_by_waiter
    rules = _Rules(state)
    ids: list[str] = []
    gens: list[int] = []
    index: dict[str, int] = {}

    def admit(eid: str) -> int:
        j = index.get(eid)
        if j is not None:
            return j
        ex = execs.get(eid)
        if ex is None or ex.status is not _WAITING or eid not in by_waiter:
            return -1
        j = index[eid] = len(ids)
        ids.append(eid)
        gens.append(ex.generation)
        return j

    for s in seeds:
        admit(s)
    edges: list[WaitEdge] = []
    starts = [0]
    hop: list[int] = []
    typed: dict[int, tuple[tuple[int, ...], bool]] = {}
    succ: list[list[int]] = []
    multi_nodes: list[int] = []
    v = 0
    while v < len(ids):
        if limit is not None and v > limit:
            return None
        out: list[int] = []
        gen = gens[v]
        has_multi = False
        for edge in by_waiter[ids[v]].values():
            if edge.waiter_generation != gen:
                continue
            k = len(edges)
            edges.append(edge)
            hop.append(-1)
            sats = rules.satisfiers(edge)
            if sats is None:
                continue
            js = [j for j in map(admit, sats) if j >= 0]
            if not js:
                continue
            out += js
            if edge.target_id.startswith(_EXEC_PREFIX):
                hop[k] = js[0]
            else:
                typed[k] = (tuple(js), len(js) == len(sats))
                has_multi = has_multi or len(sats) > 1
        starts.append(len(edges))
        succ.append(out)
        if has_multi:
            multi_nodes.append(v)
        v += 1
    n = len(ids)
    hop = [n if j < 0 else j for j in hop]
    succ.append([])
    g = _Graph(ids, gens, index, edges, starts, hop, typed, succ, {})
    for v in multi_nodes:
        g.multi[v] = _qualifying(g, v)
    return g


# -- the SCC core ------------------------------------------------------------------------------


def _components(succ: Sequence[list[int]], roots: Iterable[int], done: list[int]) -> list[list[int]]:
    """Strongly connected components reachable from ``roots`` that could hold a cycle: two or
    more nodes, or one node with an edge to itself.

    Path-based (Gabow/Cheriyan-Mehlhorn), iterative: an explicit stack of nodes to visit and
    ``~v`` markers for "v is finished"; a node's successors are pushed in one C-level extend.
    ``done[v]``: 0 unvisited, > 0 position on the path stack plus one, -1 finished or excluded
    (edges to it are ignored; that is how a recomputation is restricted to a subset).
    """
    found: list[list[int]] = []
    path: list[int] = []  # S: visited nodes not yet assigned to a component
    bounds: list[int] = []  # P: boundaries of the components still open on the path
    stack = list(roots)
    pop = stack.pop
    push = stack.append
    while stack:
        v = pop()
        if v < 0:
            v = ~v
            d = done[v] - 1
            if bounds[-1] > d:
                bounds.pop()
                if len(path) - d == 1:
                    path.pop()
                    done[v] = -1
                    if v in succ[v]:
                        found.append([v])
                else:
                    comp = path[d:]
                    del path[d:]
                    for u in comp:
                        done[u] = -1
                    found.append(comp)
        else:
            dv = done[v]
            if dv == 0:
                path.append(v)
                done[v] = len(path)
                bounds.append(len(path))
                push(~v)
                stack += succ[v]
            elif dv > 0:
                while bounds[-1] > dv:
                    bounds.pop()
    return found


def _candidate_sets(g: _Graph) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """SCCs, then prune members with no wait satisfiable inside their component, then SCCs of
    what is left of that component, until stable. Pruning one component never affects another,
    so each is refined on its own. Returns (label, members) pairs and the labels by node."""
    n = len(g.ids)
    succ = g.succ
    multi = g.multi
    # A node all of whose successors are the sentinel is in no cycle: mark it finished before
    # the search (in a typical graph most waiters wait on something that is running).
    dead = list(map(eq, map(len, succ), map(list.count, succ, repeat(n))))
    done = list(map(neg, dead))
    label = [-1] * (n + 1)
    work = _components(succ, compress(range(n), map(not_, dead)), done)
    result: list[tuple[int, list[int]]] = []
    next_label = 0
    while work:
        comp = work.pop()
        lab = next_label
        next_label += 1
        deque(map(label.__setitem__, comp, repeat(lab)), maxlen=0)
        # A member whose hard waits each have one satisfier always passes: its component holds a
        # cycle through it, so one of its successors (each a whole satisfier set) is inside. Only
        # members with a pool wait of several holders can fail the rule.
        failing = (
            [v for v in comp if v in multi and not any(all(label[j] == lab for j in q) for q in multi[v])]
            if multi
            else []
        )
        if not failing:
            result.append((lab, comp))
        elif len(failing) < len(comp):
            out = set(failing)
            keep = [v for v in comp if v not in out]
            for v in keep:
                done[v] = 0
            work += _components(succ, keep, done)
    return result, label


def _assemble(g: _Graph, sets: list[tuple[int, list[int]]], label: list[int]) -> list[Candidate]:
    """Candidates in canonical form: members sorted by id, edges inside the set in digest order,
    the digest and the signature.

    The digest lines themselves are sorted: a space sorts before every character an id may hold,
    so sorting the lines ``"{execution} {generation} {edge id} {version}"`` as strings is sorting
    the tuples (an id is never compared with a longer id it prefixes the wrong way round). Members
    come out of the sorted lines too: every member has at least one edge inside the set. Bulk
    operations again: the one candidate of a million-long cycle has a million lines to format.
    """
    n = len(g.ids)
    edges, starts, hop, typed = g.edges, g.starts, g.hop, g.typed
    out = []
    for lab, comp in sets:
        if len(comp) * 8 > n:
            # a giant component: read it off the labels in node order (the order the edges lie
            # in memory), rather than chase its members around in path order
            comp = list(compress(range(n), map(eq, label, repeat(lab))))
        firsts = list(map(starts.__getitem__, comp))
        lasts = list(map(starts.__getitem__, map((1).__add__, comp)))
        ks = list(chain.from_iterable(map(range, firsts, lasts)))
        inside = list(map(eq, map(label.__getitem__, map(hop.__getitem__, ks)), repeat(lab)))
        if typed:
            for i in compress(range(len(ks)), map(not_, inside)):
                t = typed.get(ks[i])
                inside[i] = t is not None and any(label[x] == lab for x in t[0])
        fields = list(map(_row_fields, map(edges.__getitem__, compress(ks, inside))))
        lines = list(map(_LINE.format, *zip(*fields, strict=True))) if fields else []
        order = sorted(range(len(lines)), key=lines.__getitem__)
        lines = list(map(lines.__getitem__, order))
        fields = list(map(fields.__getitem__, order))
        wids: list[str] = list(map(_first, fields))
        eids: list[str] = list(map(str.__add__, map(str.__add__, wids, repeat(">")), map(_third, fields)))  # edge_id
        members: tuple[tuple[str, int], ...] = tuple(zip(wids, map(_second, fields), strict=True))
        if len(members) != len(comp):
            members = tuple(k for k, _ in groupby(members))
        mids: list[str] = list(map(_first, members))
        out.append(
            Candidate(
                members,
                tuple(zip(eids, map(_fourth, fields), strict=True)),
                _digest_rows(lines),
                hashlib.sha256("|".join(mids).encode()).hexdigest()[:16],
            )
        )
    out.sort(key=lambda c: c.members)
    return out


def full_pass(state: State) -> list[Candidate]:
    """Every candidate deadlock of ``state``, sorted by members (each member in one at most)."""
    with collector_paused():
        g = _project_all(state)
        sets, label = _candidate_sets(g)
        found = _assemble(g, sets, label)
        # freed while the collector is still paused: it would otherwise walk them all once, on
        # its first run after the pause
        del g, sets, label
    return found


def _pass_from(
    state: State, seeds: Iterable[str], limit: int | None = None
) -> tuple[list[str], list[Candidate]] | None:
    """The candidates in the part of the graph reachable from ``seeds``, and the executions
    explored; None past ``limit`` explored executions."""
    with collector_paused():
        g = _project_from(state, seeds, limit)
        if g is None:
            return None
        sets, label = _candidate_sets(g)
        found = _assemble(g, sets, label)
        ids = g.ids
        del g, sets, label
    return ids, found


class IncrementalDetector:
    """Detection that starts from what changed since its previous pass.

    The machine calls ``state.touch(x)`` whenever x's status or the satisfiers of one of x's
    waits may have changed. Whether a set is a deadlock depends only on its members' statuses,
    generations and waits (with their satisfiers), so a candidate that is new now either contains
    a touched execution, or was a valid but smaller part of a previous candidate that lost a
    touched member. The seeds of a pass are therefore the touched executions plus the members of
    every open candidate that contains one; the pass explores the forward closure of the seeds in
    the hard graph among WAITING executions. A forward-closed part holds whole SCCs, so the
    candidates found in it are exactly the full pass's candidates that lie there.

    :meth:`pass_` returns those candidates, sorted like :func:`full_pass`: every currently open
    candidate that contains a touched execution or a member of a previous candidate that did,
    plus any other open candidate reachable from one of those. The first pass over a state (or
    over a different or restored one, or one whose ``change_seq`` went backwards) is a full pass
    and returns every candidate; so is a pass whose exploration would reach more than an eighth
    of the executions with waits (a full pass is then cheaper: its projection runs in bulk).

    After each pass :meth:`open_candidates` equals ``full_pass(state)``: open candidates that
    meet the explored part are replaced by what was found there; the others cannot have changed.
    """

    def __init__(self) -> None:
        self._state: State | None = None
        self._seq = 0
        self._open: dict[str, Candidate] = {}
        """digest -> candidate."""
        self._owner: dict[str, str] = {}
        """member execution id -> digest of the open candidate it belongs to."""
        self.explored = 0
        """How many executions the last pass looked at (for metrics and the benchmark)."""

    @property
    def seq(self) -> int:
        """The ``state.change_seq`` the last pass covered."""
        return self._seq

    def pass_(self, state: State) -> list[Candidate]:
        if self._state is not state or state.change_seq < self._seq:
            self._state = state
            return self._full(state)
        changed = state.changed_since(self._seq)
        self._seq = state.change_seq
        if not changed:
            self.explored = 0
            return []
        # A candidate that loses a member may leave a smaller one behind whose members were not
        # touched (it was valid before, just not maximal): re-explore from its members too.
        seeds = list(changed)
        for eid in changed:
            digest = self._owner.get(eid)
            if digest is not None:
                seeds.extend(self._open[digest].member_ids)
        explored = _pass_from(state, seeds, limit=max(1024, len(state.waits_by_waiter) // 8))
        if explored is None:
            return self._full(state)
        ids, found = explored
        self.explored = len(ids)
        for eid in chain(changed, ids):
            digest = self._owner.get(eid)
            if digest is not None:
                gone = self._open.pop(digest)
                for m in gone.member_ids:
                    del self._owner[m]
        for c in found:
            self._add(c)
        return found

    def _full(self, state: State) -> list[Candidate]:
        self._seq = state.change_seq
        self._open.clear()
        self._owner.clear()
        found = full_pass(state)
        self.explored = len(state.waits_by_waiter)
        for c in found:
            self._add(c)
        return found

    def open_candidates(self) -> list[Candidate]:
        """Every open candidate as of the last pass; equal to ``full_pass`` of that state."""
        return sorted(self._open.values(), key=lambda c: c.members)

    def _add(self, c: Candidate) -> None:
        self._open[c.digest] = c
        for m in c.member_ids:
            self._owner[m] = c.digest


def still_deadlocked(state: State, candidate: Candidate) -> bool:
    """The second read: is ``candidate`` (found on an earlier state) still a deadlock here?

    True when every member is still WAITING at the same generation, every listed edge is still
    open at the same version and still hard with at least one satisfier in the set, every member
    still has a listed wait whose satisfiers all lie in the set, and the set is still strongly
    connected through the listed edges. New edges do not matter: they cannot free a member.
    """
    members = dict(candidate.members)
    if not members:
        return False
    for m, gen in members.items():
        ex = state.executions.get(m)
        if ex is None or ex.generation != gen or ex.status is not _WAITING:
            return False
    succ: dict[str, list[str]] = {m: [] for m in members}
    stuck: set[str] = set()
    for eid, ver in candidate.edges:
        waiter, _, tid = eid.partition(">")
        if waiter not in members:
            return False
        edge = state.wait(waiter, tid)
        if edge is None or edge.edge_version != ver:
            return False
        sats = wait_satisfiers(state, edge)
        if sats is None:
            return False
        inside = [s for s in sats if s in members]
        if not inside:
            return False
        if len(inside) == len(sats):
            stuck.add(waiter)
        succ[waiter].extend(inside)
    if len(stuck) != len(members):
        return False
    return _strongly_connected(succ)


def _strongly_connected(succ: dict[str, list[str]]) -> bool:
    """Every node reaches the first and the first reaches every node (iterative search)."""
    nodes = sorted(succ)
    pred: dict[str, list[str]] = {m: [] for m in nodes}
    for u in nodes:
        for v in succ[u]:
            pred[v].append(u)
    for adj in (succ, pred):
        seen = {nodes[0]}
        stack = [nodes[0]]
        while stack:
            for v in adj[stack.pop()]:
                if v not in seen:
                    seen.add(v)
                    stack.append(v)
        if len(seen) != len(nodes):
            return False
    return True
