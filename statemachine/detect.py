"""Deadlock detection: a pure function of one state (docs/design.md §3).

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
  with the cyclic garbage collector paused while it runs (it changes no result). It reads the
  waits first and no execution record: the SCCs of that structural graph (every waiter, an edge
  wherever a wait names a waiter or a typed target a waiter produces, provides or holds) hold
  every candidate, and only their waiters are projected exactly (see :func:`_project_all`),
  so a long chain that ends in a small cycle costs little more than its waits. The SCC search
  walks chains of one-successor nodes in a tight loop and handles each chain with list slices
  (see :func:`.scc.cyclic_components`), and the canonical output sorts only the members. The incremental
  pass walks from what changed and is proportional to what it reaches.
- :func:`closing_path` (prevention on request) asks the same rule of the state a new wait would
  make, before the machine opens it: it reads only what the new edge's satisfiers reach.

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
from bisect import bisect_right
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, compress, islice, repeat
from operator import add, and_, attrgetter, countOf, eq, is_, is_not, itemgetter, le, lt, ne, not_, sub
from typing import cast

from .enums import TERMINAL, ExecStatus
from .ids import Kind
from .scc import Sccs, components, cycles, cyclic_components, search, successor_form
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
    "closing_path",
    "wait_satisfiers",
]

DIGEST_VERSION = "wait-digest.v1"

_WAITING = ExecStatus.WAITING
_EXEC_PREFIX = "exec:"

_status = attrgetter("status")
_generation = attrgetter("generation")
_waiter_generation = attrgetter("waiter_generation")
_target_generation = attrgetter("target_generation")
_edge_version = attrgetter("edge_version")
_ROW = "{} {} {} {}\n"
"""One digest line: execution, generation, edge id, edge version."""


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
    """Nodes are WAITING executions with open waits, numbered 0..n-1; ``n`` and ``n + 1`` are
    sentinels that are never nodes (finished from the start, so the core ignores them).

    ``edges[starts[v]:starts[v + 1]]``: the open waits of node v (current generation), and
    ``tids`` their target ids; ``flat``: every node has exactly one, so edge k is node k's. For
    each edge k, ``hop[k]`` is the node an ``exec:`` wait points at when that execution is a node
    at the generation the wait names, else ``n``; ``typed[k]``, for a wait on a typed target that
    is hard and has satisfiers among the nodes: those nodes, and whether they are all of its
    satisfiers.

    Successors, in the form the SCC core walks fastest: ``nxt[v]`` is v's only successor, or ``n``
    when it has none, or ``n + 1`` when it has several, listed in ``several[v]`` (``n`` entries
    and duplicates allowed). ``nxt`` has ``n + 2`` entries, both sentinels pointing at ``n``.
    ``multi``: for a node with a hard wait of two or more satisfiers (a pool), the exact list of
    its waits that could qualify, as node tuples; for every other node each successor comes from
    a one-satisfier wait, so "has a successor in S" is the whole rule.
    """

    ids: list[str]
    gens: list[int]
    edges: list[WaitEdge]
    tids: list[str]
    flat: bool
    starts: Sequence[int]
    hop: list[int]
    typed: dict[int, tuple[tuple[int, ...], bool]]
    nxt: list[int]
    several: dict[int, list[int]]
    multi: dict[int, list[tuple[int, ...]]]
    sccs: Sccs | None = None
    """The SCCs of this very graph when they are already known (see :func:`_project`)."""


_Typed = tuple[tuple[int, ...], bool]
"""A typed wait's satisfiers that are nodes, and whether they are all of its satisfiers."""
_Rule = tuple[_Typed, float, float, int]
_IntRule = _Rule | None
"""(satisfiers, lowest and highest target generation of a wait that is hard, the one node it leads
to or -1 when it leads to several or the rule of several satisfiers applies)."""
_LOWEST = float("-inf")  # exact against an int of any size
_HIGHEST = float("inf")


def _int_rule(state: State, t: Target, index: dict[str, int], gens: list[int]) -> _IntRule:
    """:func:`_target_rule` in node numbers; None when the wait can give no edge. A lone
    satisfier that is not a node gives no edge whether or not it is live, so its liveness is not
    even looked up."""
    kind = t.kind
    if kind is Kind.ARTIFACT or kind is Kind.APPROVAL:
        sid = t.satisfier_id
        j = None if sid is None else index.get(sid)
        if j is None or gens[j] != t.satisfier_generation:
            return None
        return ((j,), True), _LOWEST, t.satisfier_for, j
    holders = t.holders
    if len(holders) == 1 and (kind is Kind.RESOURCE or kind is Kind.RESERVATION or t.slots == 1):
        ((h, hg),) = holders.items()
        j = index.get(h)
        if j is None or gens[j] != hg:
            return None
        if kind is Kind.POOL:
            return ((j,), True), _LOWEST, _HIGHEST, j
        return ((j,), True), t.version, t.version, j
    rule = _target_rule(state, t)
    if rule is None:
        return None
    sats, mode, value = rule
    js = tuple(j for j in map(index.get, sats) if j is not None)
    if not js:
        return None
    lo, hi = (_LOWEST, value) if mode == _AT_MOST else (value, value) if mode == _EXACTLY else (_LOWEST, _HIGHEST)
    return (js, len(js) == len(sats)), lo, hi, -1


_rule_typed = itemgetter(0)
_rule_lo = itemgetter(1)
_rule_hi = itemgetter(2)
_rule_only = itemgetter(3)


@dataclass(slots=True)
class _Waits:
    """The waits of a list of waiters, read without any execution record.

    The waiters are numbered 0..n-1 in list order (``index``); ``tids`` are their waits' target
    ids, ``counts`` and ``starts`` and ``flat`` as in :class:`_Graph`. ``hop[k]``: the waiter that
    wait k names when its target is an execution among them (at whatever generation), else ``n``;
    ``typed``: the positions of the waits on a typed target that one of them produces, provides or
    holds (their ``hop`` is ``n``).
    """

    ids: list[str]
    index: dict[str, int]
    wait_dicts: Collection[dict[str, WaitEdge]]
    counts: list[int]
    flat: bool
    starts: Sequence[int]
    tids: list[str]
    hop: list[int]
    typed: list[int]


def _waits(state: State, waiting: list[str], wait_dicts: Collection[dict[str, WaitEdge]]) -> _Waits:
    n = len(waiting)
    index = dict(zip(waiting, range(n), strict=True))
    counts = list(map(len, wait_dicts))
    flat = counts.count(1) == n  # one wait per waiter: wait k is waiter k's
    tids: list[str] = list(chain.from_iterable(wait_dicts))
    # Typed targets. Only a target some waiter produces, provides or holds can lead to a waiter,
    # and the state indexes those (``satisfies``: execution -> such targets), so the rules run
    # for the few waits on such targets, not for every wait on a running execution's lease. The
    # index maps such a target to ``n + 1`` for the one lookup per wait that finds both kinds
    # (those entries are removed right after, so the set's order reaches nothing).
    satisfies = state.satisfies
    if len(satisfies) < n:
        reachable = set(chain.from_iterable(map(satisfies.__getitem__, filter(index.__contains__, satisfies))))
    else:
        reachable = set(chain.from_iterable(map(satisfies.get, waiting, repeat(()))))
    marked = reachable.difference(index)
    del reachable
    typed: list[int] = []
    if marked:
        index.update(dict.fromkeys(marked, n + 1))
        hop = list(map(index.get, tids, repeat(n)))
        deque(map(index.__delitem__, marked), maxlen=0)
        typed = list(compress(range(len(tids)), map(eq, hop, repeat(n + 1))))
        deque(map(hop.__setitem__, typed, repeat(n)), maxlen=0)
    else:
        hop = list(map(index.get, tids, repeat(n)))
    starts: Sequence[int] = range(n + 1) if flat else [0, *accumulate(counts)]
    return _Waits(waiting, index, wait_dicts, counts, flat, starts, tids, hop, typed)


def _successor_form(w: _Waits, lead: list[int], extra: dict[int, list[int]]) -> tuple[list[int], dict[int, list[int]]]:
    """``nxt`` and ``several`` (see :class:`_Graph`) from the one node each wait leads to (``n``
    for none) and, for a node with a wait that leads to several, those nodes."""
    n = len(w.ids)
    starts = w.starts
    # A node's first wait gives its one successor; a node with several waits takes the lowest
    # node they lead to (n if none), which is its successor unless it has two or more.
    several: dict[int, list[int]] = {}
    if w.flat:
        nxt = [*lead, n, n]
    else:
        nxt = [*map(lead.__getitem__, islice(starts, n)), n, n]
        big = list(compress(range(n), map(lt, repeat(1), w.counts)))
        ranges = list(map(slice, map(starts.__getitem__, big), map(starts.__getitem__, map(add, big, repeat(1)))))
        leads = list(map(lead.__getitem__, ranges))
        deque(map(nxt.__setitem__, big, map(min, leads)), maxlen=0)
        reals = map(sub, map(len, leads), map(list.count, leads, repeat(n)))
        for v, out in compress(zip(big, leads, strict=True), map(lt, repeat(1), reals)):
            nxt[v] = n + 1
            several[v] = [j for j in out if j != n]
        del big, ranges, leads
    for v in sorted(extra):
        nxt[v] = n + 1
        several[v] = [j for j in lead[starts[v] : starts[v + 1]] if j != n] + extra[v]
    return nxt, several


def _structural(state: State, w: _Waits) -> tuple[list[int], dict[int, list[int]], Sccs]:
    """The structural graph of ``w``'s waiters and its SCCs: an edge from a waiter to every
    waiter its wait names or that produces, provides or holds the typed target it waits on,
    whatever their statuses, generations, versions and free slots. Every hard edge between
    WAITING executions is one of these, so every candidate lies in one of these SCCs."""
    lead = w.hop
    extra: dict[int, list[int]] = {}
    if w.typed:
        lead = lead.copy()
        index, targets = w.index, state.targets
        ktids = list(map(w.tids.__getitem__, w.typed))
        outs: dict[str, tuple[int, ...]] = dict.fromkeys(ktids, ())
        for tid in outs:
            t = targets.get(tid)
            if t is not None:
                names = [*t.holders] if t.satisfier_id is None else [*t.holders, t.satisfier_id]
                outs[tid] = tuple(sorted({j for j in map(index.get, names) if j is not None}))
        for k, js in zip(w.typed, map(outs.__getitem__, ktids), strict=True):
            if len(js) == 1:
                lead[k] = js[0]
            elif js:
                extra.setdefault(k if w.flat else bisect_right(w.starts, k) - 1, []).extend(js)
    nxt, several = _successor_form(w, lead, extra)
    return nxt, several, search(nxt, several)


def _project_all(state: State) -> _Graph:
    """The hard graph among the WAITING executions that could be in a candidate.

    Reaching a million scattered records is most of a full pass's cost, so the waits are read
    first, without any execution record: the SCCs of the structural graph (:func:`_structural`),
    a superset of the hard graph, hold every candidate. Only the waiters in those SCCs are
    projected exactly (a long chain that ends in a small cycle costs the waits alone), all of
    them when that is most (then the structural SCCs are reused when the hard graph is the same
    graph, as in one long cycle of executions).

    Restricted to a set of waiters that holds every candidate, the hard graph has the same
    candidates with the same edges: a satisfier outside the set is in no candidate, so a wait
    it satisfies can neither qualify a member nor be an edge inside one.
    """
    by_waiter = state.waits_by_waiter
    w = _waits(state, list(by_waiter), by_waiter.values())
    nxt, several, sccs = _structural(state, w)
    if sum(map(len, sccs[0])) * 2 > len(w.ids):
        return _project(state, w, (nxt, several, sccs))
    ids = w.ids
    suspects = list(map(ids.__getitem__, sorted(chain.from_iterable(sccs[0]))))
    del w, ids, nxt, several, sccs
    return _project(state, _waits(state, suspects, list(map(by_waiter.__getitem__, suspects))))


def _project(state: State, w: _Waits, structural: tuple[list[int], dict[int, list[int]], Sccs] | None = None) -> _Graph:
    """The hard graph among ``w``'s waiters that are WAITING, treating every other execution as
    no node. ``structural``: :func:`_structural` of ``w``, whose SCCs are kept when the hard
    graph turns out to be the same graph.

    Built by C-level iteration (map, zip, compress, chain) wherever possible: most of the cost is
    reaching the state's objects at all (a million records lie far apart in memory), so each is
    reached as few times as possible: an execution twice, a wait once; target ids are read off
    the keys of the waiter's dict.
    """
    execs = state.executions
    waiting = w.ids
    try:
        records = list(map(execs.__getitem__, waiting))
    except KeyError:
        return _careful(state, waiting)  # a wait without its execution
    if countOf(map(_status, records), _WAITING) != len(records):
        mask = list(map(is_, map(_status, records), repeat(_WAITING)))
        records = list(compress(records, mask))
        w = _waits(state, list(compress(waiting, mask)), list(compress(w.wait_dicts, mask)))
        structural = None
        del mask
    gens: list[int] = list(map(_generation, records))
    del records
    n = len(w.ids)
    flat, tids, hop, starts, index, wait_dicts = w.flat, w.tids, w.hop, w.starts, w.index, w.wait_dicts
    edges: list[WaitEdge] = list(
        map(dict.__getitem__, wait_dicts, tids) if flat else chain.from_iterable(map(dict.values, wait_dicts))
    )
    m = len(edges)
    if list(map(_waiter_generation, edges)) != (
        gens if flat else list(chain.from_iterable(map(repeat, gens, w.counts)))
    ):
        # An edge of an older attempt: the machine closes those, so only a damaged or hand-made
        # state gets here; the careful path skips them.
        return _careful(state, waiting)
    gens_or_none: list[int | None] = [*gens, None]
    # An exec: wait on a node is an edge only at the generation it names (else it waits for an
    # attempt that is over); compare in bulk, fix the rare mismatches one by one.
    if countOf(map(eq, map(gens_or_none.__getitem__, hop), map(_target_generation, edges)), False) != m - countOf(
        map(lt, hop, repeat(n)), True
    ):
        same = map(eq, map(gens_or_none.__getitem__, hop), map(_target_generation, edges))
        hop = [j if ok else n for j, ok in zip(hop, same, strict=True)]
    del gens_or_none
    typed: dict[int, _Typed] = {}
    multi_nodes: set[int] = set()
    lead = hop  # for each wait, the one node it leads to (or n); typed waits are added below
    extra: dict[int, list[int]] = {}  # a node with a typed wait that leads to several nodes
    ks = w.typed
    if ks:
        # In bulk: one rule per target, the waits whose target generation the rule accepts; only
        # waits of several satisfiers (or of some satisfiers that are no node) one by one.
        ktids = list(map(tids.__getitem__, ks))
        targets = state.targets
        rules: dict[str, _IntRule] = dict.fromkeys(ktids)
        for tid in rules:
            t = targets.get(tid)
            rules[tid] = None if t is None else _int_rule(state, t, index, gens)
        found = list(map(rules.__getitem__, ktids))
        keep = list(map(is_not, found, repeat(None)))
        ks, krules = list(compress(ks, keep)), cast(list[_Rule], list(compress(found, keep)))
        tgs = list(map(_target_generation, map(edges.__getitem__, ks)))
        keep = list(map(and_, map(le, map(_rule_lo, krules), tgs), map(le, tgs, map(_rule_hi, krules))))
        ks, krules = list(compress(ks, keep)), list(compress(krules, keep))
        del ktids, found, tgs, keep
        typed = dict(zip(ks, map(_rule_typed, krules), strict=True))
        lead = hop.copy()
        only = list(map(_rule_only, krules))
        simple = list(map(ne, only, repeat(-1)))
        deque(map(lead.__setitem__, compress(ks, simple), compress(only, simple)), maxlen=0)
        for k in compress(ks, map(not_, simple)):
            js, whole = typed[k]
            if len(js) == 1:
                lead[k] = js[0]
            if len(js) > 1 or not whole:
                v = k if flat else bisect_right(starts, k) - 1
                if len(js) > 1:
                    extra.setdefault(v, []).extend(js)
                multi_nodes.add(v)
    nxt, several = _successor_form(w, lead, extra)
    g = _Graph(w.ids, gens, edges, tids, flat, starts, hop, typed, nxt, several, {})
    if structural is not None and nxt == structural[0] and several == structural[1]:
        g.sccs = structural[2]
    for v in sorted(multi_nodes):
        g.multi[v] = _qualifying(g, v)
    return g


def _careful(state: State, waiting: list[str]) -> _Graph:
    g = _project_from(state, waiting)
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
    nxt, several = successor_form(succ, n)
    tids = [e.target_id for e in edges]
    g = _Graph(ids, gens, edges, tids, False, starts, hop, typed, nxt, several, {})
    for v in multi_nodes:
        g.multi[v] = _qualifying(g, v)
    return g


def _candidate_sets(g: _Graph) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """SCCs, then prune members with no wait satisfiable inside their component, then SCCs of
    what is left of that component, until stable. Pruning one component never affects another,
    so each is refined on its own. Returns (label, members) pairs and the labels by node."""
    n = len(g.ids)
    nxt, several = g.nxt, g.several
    multi = g.multi
    work, done = search(nxt, several) if g.sccs is None else g.sccs
    label = [-1] * (n + 1)
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
            work += cyclic_components(nxt, several, keep, done)
    return result, label


def _assemble(g: _Graph, sets: list[tuple[int, list[int]]], label: list[int]) -> list[Candidate]:
    """Candidates in canonical form: members sorted by id, edges inside the set in digest order,
    the digest and the signature.

    The digest's order is by waiter, then edge id: ids are unique and a space sorts before every
    character an id may hold, so sorting the lines ``"{execution} {generation} {edge id}
    {version}"`` as strings is sorting the members by id and each member's edges by target id
    (one edge per waiter and target). So only the members are sorted, and only a member with
    several waits has its edges inside the set picked and sorted; a member with one wait has
    that wait inside (a member of a cycle has a successor inside). Bulk operations again: the one
    candidate of a million-long cycle has a million lines to format.
    """
    ids, gens, edges, tids, starts, hop, typed = g.ids, g.gens, g.edges, g.tids, g.starts, g.hop, g.typed
    out = []
    n = len(ids)
    for lab, comp in sets:
        if len(comp) * 8 > n:
            # a giant component: read it off the labels in node order (the order its ids lie in
            # memory), rather than in the order the search met them
            comp = list(compress(range(n), map(eq, label, repeat(lab))))
        order = sorted(comp, key=ids.__getitem__)
        mids: list[str] = list(map(ids.__getitem__, order))
        mgens: list[int] = list(map(gens.__getitem__, order))
        ks: list[int]
        if g.flat:
            ks, wids, wgens = order, mids, mgens
        else:
            firsts = list(map(starts.__getitem__, order))
            ends = list(map(starts.__getitem__, map(add, order, repeat(1))))
            if sum(ends) - sum(firsts) == len(order):
                ks, wids, wgens = firsts, mids, mgens  # one wait per member
            else:
                ks, wids, wgens = [], [], []
                for w, wg, a, b in zip(mids, mgens, firsts, ends, strict=True):
                    if b - a == 1:
                        inside = [a]
                    else:
                        inside = [
                            k
                            for k in range(a, b)
                            if label[hop[k]] == lab or (k in typed and any(label[x] == lab for x in typed[k][0]))
                        ]
                        inside.sort(key=tids.__getitem__)
                    ks += inside
                    wids += repeat(w, len(inside))
                    wgens += repeat(wg, len(inside))
        if len(ks) * 4 > len(edges):
            # a giant component: read every version in memory order, then pick
            vers: list[int] = list(map(list(map(_edge_version, edges)).__getitem__, ks))
        else:
            vers = list(map(_edge_version, map(edges.__getitem__, ks)))
        # Edge ids ("waiter>target") made by one join and one split (no id holds a newline), then
        # the digest text by one join: slice assignment interleaves the pieces at C speed.
        e = len(ks)
        parts: list[str] = ["\n"] * (4 * e)
        parts[0::4] = wids
        parts[1::4] = [">"] * e
        parts[2::4] = list(map(tids.__getitem__, ks))
        eids = "".join(parts).split("\n")
        eids.pop()
        if len(eids) != e:  # an id with a newline (never one the machine accepted)
            eids = list(map(">".join, zip(wids, parts[2::4], strict=True)))
        gsep = {x: f" {x} " for x in set(wgens)}
        vsep = {x: f" {x}\n" for x in set(vers)}
        parts[1::4] = list(map(gsep.__getitem__, wgens))
        parts[2::4] = eids
        parts[3::4] = list(map(vsep.__getitem__, vers))
        text = "".join(parts)
        del parts
        h = hashlib.sha256(DIGEST_VERSION.encode() + b"\n")
        h.update(text.encode())
        del text
        out.append(
            Candidate(
                tuple(zip(mids, mgens, strict=True)),
                tuple(zip(eids, vers, strict=True)),
                h.hexdigest(),
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
    return len(components(succ, succ)) == 1


def closing_path(state: State, edge: WaitEdge) -> tuple[str, ...] | None:
    """Would opening ``edge`` put it on a candidate deadlock? (``RegisterWait`` with
    ``refuse_deadlock``.)

    ``edge`` is a wait of its waiter's current attempt that is not in the state yet; it replaces
    the waiter's open wait on the same target, if any, and the waiter is WAITING once it is open.
    The answer is the one a full pass over that next state would give: a path exactly when the
    candidate that holds the waiter has one of ``edge``'s satisfiers inside, so the new edge is
    one of the candidate's edges. The path runs waiter -> target -> satisfier -> ... ->
    waiter (an ``exec:`` target is its own satisfier and is named once), shortest first, ties
    broken by id; None when the edge closes no cycle.

    The search starts from the edge's satisfiers and follows only the projections of the waits it
    reaches (:func:`wait_satisfiers`, the reference the detector's fast paths agree with): any
    cycle through the new edge lies in the forward closure of its satisfiers, so nothing else is
    read. Each execution is projected once; the work is proportional to the waits reached. Then
    the rule of a candidate, restricted to the waiter's component: keep the executions that reach
    the waiter and that the waiter reaches, drop those with no hard wait whose satisfiers all lie
    in the set (a pool wait needs every holder), and again, until stable.
    """
    waiter = edge.waiter_id
    first = wait_satisfiers(state, edge)
    if first is None:
        return None  # external, a free pool, an older version: a wait that cannot close a cycle
    hard: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    """Explored node -> its hard waits as (target id, satisfiers), in target-id order."""

    def project(u: str) -> list[tuple[str, tuple[str, ...]]]:
        waits = [e for e in state.waits_of(u) if e.target_id != edge.target_id] if u == waiter else state.waits_of(u)
        out = [(e.target_id, s) for e in waits if (s := wait_satisfiers(state, e)) is not None]
        if u == waiter:
            out.append((edge.target_id, first))
            out.sort()
        return out

    # Forward closure of the satisfiers among the next state's WAITING executions.
    queue = deque(x for x in first if x == waiter or _is_waiting(state, x))
    seen = set(queue)
    while queue:
        u = queue.popleft()
        hard[u] = project(u)
        for _, sats in hard[u]:
            for v in sats:
                if v not in seen and (v == waiter or _is_waiting(state, v)):
                    seen.add(v)
                    queue.append(v)
    if waiter not in hard:
        return None  # nothing the edge leads to waits (transitively) for the waiter
    members = set(hard)
    while True:
        members = _component(hard, members, waiter)
        stuck = {u for u in members if any(all(v in members for v in sats) for _, sats in hard[u])}
        if waiter not in stuck:
            return None
        if len(stuck) == len(members):
            break
        members = stuck
    starts = sorted(s for s in first if s in members)
    if not starts:
        return None  # the waiter is in a deadlock already, and this edge leads out of it
    # The shortest way back from a satisfier to the waiter, breadth first in sorted order.
    back: dict[str, tuple[str, str] | None] = dict.fromkeys(starts)
    queue = deque(starts)
    while queue:
        u = queue.popleft()
        if u == waiter:
            break
        for tid, sats in hard[u]:
            for v in sats:
                if v in members and v not in back:
                    back[v] = (u, tid)
                    queue.append(v)
    steps = [waiter]
    at = waiter
    while (prev := back[at]) is not None:
        at, tid = prev
        if tid != steps[-1]:
            steps.append(tid)
        steps.append(at)
    steps.reverse()
    head = [waiter] if edge.target_id == steps[0] else [waiter, edge.target_id]
    return (*head, *steps)


def _is_waiting(state: State, execution_id: str) -> bool:
    ex = state.executions.get(execution_id)
    return ex is not None and ex.status is _WAITING


def _component(hard: dict[str, list[tuple[str, tuple[str, ...]]]], members: set[str], root: str) -> set[str]:
    """The members that ``root`` reaches and that reach ``root``, through edges inside ``members``
    (``root`` itself only when it lies on a cycle there): its component when that holds a cycle."""
    succ = {u: [v for _, sats in hard[u] for v in sats] for u in members}
    return next((set(comp) for comp in cycles(members, succ) if root in comp), set())
