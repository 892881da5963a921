"""Soft edges and the reorder search (issue #21; docs/queues.md, "Soft edges" and "Reorder").

Rules kept here:
- A **soft edge** x -> y: x and y wait in the same grant queue (statemachine/queues.py), y ahead
  of x, and y may be granted (WAITING, not yet a holder): the target goes to y before x, so x
  waits for y as surely as for the holder. For a pool every waiter ahead takes a slot first, so
  x has a soft edge to each of them. Hard edges are the detector's (:func:`detect.wait_satisfiers`).
- A **soft cycle** is a strongly connected set of WAITING executions in hard + soft edges with at
  least one soft edge inside. Today it is a deadlock only in the making (a holder outside is
  still running), but once the holder releases, the hand-off grants the target to the waiter
  ahead and the cycle is hard. Reordering the queues can prevent that; cancelling cannot be undone.
- **Reorder** (PostgreSQL's TopoSort, made exact by taking one order for all queues at once): the
  queues whose soft edges lie inside the cycle may be reordered; every other edge is fixed (hard
  edges, soft edges of the other queues, and the edges to a waiter already passed over
  ``Limits.queue_pass_limit`` times: nobody behind it may be moved ahead of it again). A
  reorder that leaves no cycle exists exactly when those fixed edges have no cycle among the
  executions involved: then one topological order of them (waited-for first) orders every queue,
  and all the new soft edges follow it. Among the possible orders the search takes the one that
  moves least in the usual sense of TopoSort: whenever several executions may come next, the one
  that was earliest in its queues. Each waiter moved behind one it was ahead of counts a pass-over.
- Pure and deterministic: reads the state, writes nothing; every output is sorted.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .detect import Candidate, wait_satisfiers
from .enums import ExecStatus
from .queues import QueueEntry
from .scc import components
from .state import State

__all__ = [
    "Reorder",
    "SoftCycle",
    "apply_orders",
    "find_reorder",
    "soft_candidate",
    "soft_candidates",
    "soft_cycles",
    "soft_edges",
    "still_soft",
]

SoftEdge = tuple[str, str, str]
"""(waiter, the waiter ahead of it, target id)."""


@dataclass(frozen=True, slots=True)
class SoftCycle:
    """A strongly connected set with soft edges inside: members sorted, its soft edges sorted."""

    members: tuple[str, ...]
    soft: tuple[SoftEdge, ...]

    @property
    def queues(self) -> tuple[str, ...]:
        return tuple(sorted({t for _, _, t in self.soft}))


@dataclass(frozen=True, slots=True)
class Reorder:
    """New orders for the queues a soft cycle runs through: target id -> (before, after)."""

    queues: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]
    passed: tuple[tuple[str, str, int], ...]
    """(target id, waiter, pass-overs added) for every waiter moved behind one it was ahead of."""


def _grantable(st: State, waiter_id: str, holders: Mapping[str, int]) -> bool:
    ex = st.executions.get(waiter_id)
    return ex is not None and ex.status is ExecStatus.WAITING and waiter_id not in holders


def queue_soft_edges(st: State, target_id: str, order: Sequence[str] | None = None) -> list[SoftEdge]:
    """The soft edges of one queue (in ``order`` instead of the stored one, when given)."""
    t = st.targets[target_id]
    waiters = list(order) if order is not None else [e.waiter_id for e in st.queues.get(target_id, ())]
    out: list[SoftEdge] = []
    ahead: list[str] = []
    for w in waiters:
        if not _grantable(st, w, t.holders):
            continue
        out.extend((w, y, target_id) for y in ahead)
        ahead.append(w)
    return out


def soft_edges(st: State, orders: Mapping[str, Sequence[str]] | None = None) -> list[SoftEdge]:
    """Every soft edge of the state, sorted (``orders``: some queues in another order)."""
    orders = orders or {}
    out: list[SoftEdge] = []
    for tid in sorted(st.queues):
        out.extend(queue_soft_edges(st, tid, orders.get(tid)))
    return sorted(out)


def _cyclic(comp: list[str], succ: Mapping[str, Iterable[str]]) -> bool:
    return len(comp) > 1 or comp[0] in succ.get(comp[0], ())


def soft_cycles(st: State) -> list[SoftCycle]:
    """The strongly connected sets of hard + soft edges that have a soft edge inside, sorted.

    Read from the queues outwards (:class:`_Local`): every cycle through a soft edge runs through
    two queued waiters, so only the executions both reachable from one and reaching one are read,
    not every wait of the state (the leader's loop runs this each period while a queue has two
    waiters). Without a soft edge it reads no wait."""
    soft = soft_edges(st)
    if not soft:
        return []
    local = _Local(st)

    def forward(v: str) -> set[str]:
        return local.hard(v) | {y for y, _ in local.soft(v)}

    def backward(v: str) -> set[str]:
        return local.hard_in(v) | {x for x, _ in local.soft_in(v)}

    queued = {x for x, _, _ in soft} | {y for _, y, _ in soft}
    nodes = _reach_by(queued, forward) & _reach_by(queued, backward)
    succ = {v: forward(v) & nodes for v in nodes}
    comps = components(nodes, succ)
    comp_of = {v: i for i, comp in enumerate(comps) for v in comp}
    inside: dict[int, list[SoftEdge]] = {}
    for e in soft:  # sorted, so each component's list is too
        if comp_of[e[0]] == comp_of[e[1]]:
            inside.setdefault(comp_of[e[0]], []).append(e)
    return [
        SoftCycle(tuple(comp), tuple(inside[i])) for i, comp in enumerate(comps) if i in inside and _cyclic(comp, succ)
    ]


def _pinned(entries: Sequence[QueueEntry], limit: int, holders: Mapping[str, int], st: State) -> list[tuple[str, str]]:
    """(behind, ahead) soft edges a reorder may not turn around, between grantable waiters: a
    waiter passed over ``limit`` times keeps everyone behind it behind it. When it can be granted
    that is an edge to it; when it cannot (it keeps its place whatever happens) everyone behind it
    stays behind everyone ahead of it."""
    out: list[tuple[str, str]] = []
    ok = [_grantable(st, e.waiter_id, holders) for e in entries]
    for i, e in enumerate(entries):
        if e.passed < limit:
            continue
        behind = [b.waiter_id for b, g in zip(entries[i + 1 :], ok[i + 1 :], strict=True) if g]
        ahead = [e.waiter_id] if ok[i] else [a.waiter_id for a, g in zip(entries[:i], ok[:i], strict=True) if g]
        out.extend((b, a) for b in behind for a in ahead)
    return out


class _Local:
    """Hard and soft edges of single executions, both ways, read on demand from the state's
    indexes (``waits_of``, ``waits_on``, ``satisfies``, the queues): a second read or a reorder
    costs what the cycle reaches, not the whole state."""

    def __init__(self, st: State) -> None:
        self.st = st
        self._hard: dict[str, set[str]] = {}
        self._soft: dict[str, list[tuple[str, str]]] = {}
        self._behind: dict[str, list[tuple[str, str]]] = {}

    def _waiting(self, v: str) -> bool:
        ex = self.st.executions.get(v)
        return ex is not None and ex.status is ExecStatus.WAITING

    def hard(self, v: str) -> set[str]:
        out = self._hard.get(v)
        if out is None:
            out = set()
            if self._waiting(v):
                for edge in self.st.waits_of(v):
                    out.update(wait_satisfiers(self.st, edge) or ())
            self._hard[v] = out
        return out

    def _queues_of(self, v: str) -> list[str]:
        st = self.st
        return [e.target_id for e in st.waits_of(v) if e.target_id in st.queues]

    def _lines(self, v: str) -> None:
        st = self.st
        ahead: list[tuple[str, str]] = []
        behind: list[tuple[str, str]] = []
        for tid in self._queues_of(v):
            holders = st.targets[tid].holders
            if not _grantable(st, v, holders):
                continue
            ok = [e.waiter_id for e in st.queues[tid] if _grantable(st, e.waiter_id, holders)]
            i = ok.index(v)
            ahead += [(y, tid) for y in ok[:i]]
            behind += [(x, tid) for x in ok[i + 1 :]]
        self._soft[v], self._behind[v] = ahead, behind

    def soft(self, v: str) -> list[tuple[str, str]]:
        """(the waiter ahead, target) of each soft edge out of ``v``."""
        if v not in self._soft:
            self._lines(v)
        return self._soft[v]

    def soft_in(self, v: str) -> list[tuple[str, str]]:
        """(the waiter behind, target) of each soft edge into ``v``."""
        if v not in self._behind:
            self._lines(v)
        return self._behind[v]

    def hard_in(self, v: str) -> set[str]:
        st = self.st
        waiters = {e.waiter_id for e in st.waits_on(v)}
        for tid in st.satisfies.get(v, ()):
            waiters.update(e.waiter_id for e in st.waits_on(tid))
        return {w for w in waiters if v in self.hard(w)}


def still_soft(st: State, c: Candidate) -> SoftCycle | None:
    """The second read of a soft candidate: its members still WAITING at their generations, its
    edges still open at their versions, and still strongly connected through hard and soft edges
    among them with a soft edge inside; then the cycle (None otherwise). Reads only what the
    members wait for and the queues they are in."""
    members = dict(c.members)
    if not members:
        return None
    for m, gen in members.items():
        ex = st.executions.get(m)
        if ex is None or ex.generation != gen or ex.status is not ExecStatus.WAITING:
            return None
    for eid, ver in c.edges:
        waiter, _, tid = eid.partition(">")
        edge = st.wait(waiter, tid) if waiter in members else None
        if edge is None or edge.edge_version != ver:
            return None
    local = _Local(st)
    succ = {
        m: {u for u in local.hard(m) if u in members} | {y for y, _ in local.soft(m) if y in members} for m in members
    }
    soft = tuple(sorted((m, y, t) for m in members for y, t in local.soft(m) if y in members))
    comps = components(members, succ)
    if not soft or len(comps) != 1 or not _cyclic(comps[0], succ):
        return None
    cycle = SoftCycle(tuple(sorted(members)), soft)
    return cycle if soft_candidate(st, cycle).digest == c.digest else None


def find_reorder(st: State, cycle: SoftCycle) -> Reorder | None:
    """New orders for ``cycle``'s queues under which no cycle is left, or None when none exists."""
    movable = set(cycle.queues)
    local = _Local(st)
    limit = st.limits.queue_pass_limit
    entries = {tid: st.queues[tid] for tid in sorted(movable)}
    # The executions a new soft edge could close a cycle through: those on a path (fixed edges
    # or any soft edge) from a movable queue's waiter back to one.
    peers: dict[str, set[str]] = {}
    for tid, q in entries.items():
        mine = [e.waiter_id for e in q if _grantable(st, e.waiter_id, st.targets[tid].holders)]
        for x in mine:  # a reorder may put any of them ahead of any other
            peers.setdefault(x, set()).update(y for y in mine if y != x)
    grantable = set(peers)

    def fixed(v: str) -> set[str]:
        return local.hard(v) | {y for y, t in local.soft(v) if t not in movable}

    def forward(v: str) -> set[str]:
        return local.hard(v) | {y for y, _ in local.soft(v)} | peers.get(v, set())

    def backward(v: str) -> set[str]:
        return local.hard_in(v) | {x for x, _ in local.soft_in(v)} | peers.get(v, set())

    involved = _reach_by(grantable, forward) & _reach_by(grantable, backward)
    nodes = involved | grantable
    sub = {v: {u for u in fixed(v) if u in involved} if v in involved else set() for v in nodes}
    for tid, queue in entries.items():
        for behind, ahead in _pinned(queue, limit, st.targets[tid].holders, st):
            sub[behind].add(ahead)
    order = _topo(nodes, sub, _earliest(entries), grantable)
    if order is None:
        return None
    rank = {v: i for i, v in enumerate(order)}
    changes = []
    passed = []
    for tid, queue in entries.items():
        before = tuple(e.waiter_id for e in queue)
        t = st.targets[tid]
        # Only waiters that can be granted move (among their own places); the others stay put.
        mine = [w for w in before if _grantable(st, w, t.holders)]
        moved = iter(sorted(mine, key=rank.__getitem__))
        after = tuple(next(moved) if w in mine else w for w in before)
        if after != before:
            changes.append((tid, before, after))
            for w in after:
                n = sum(1 for v in after[: after.index(w)] if before.index(v) > before.index(w))
                if n:
                    passed.append((tid, w, n))
    if not changes:
        return None
    return Reorder(tuple(changes), tuple(sorted(passed)))


def _earliest(entries: Mapping[str, Sequence[QueueEntry]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for queue in entries.values():
        for i, e in enumerate(queue):
            out[e.waiter_id] = min(out.get(e.waiter_id, i), i)
    return out


def _reverse(succ: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for v, us in succ.items():
        for u in us:
            out.setdefault(u, set()).add(v)
    return out


def _reach_by(starts: Iterable[str], succ: Callable[[str], Iterable[str]]) -> set[str]:
    seen = set(starts)
    stack = sorted(seen)
    while stack:
        v = stack.pop()
        for u in sorted(succ(v)):
            if u not in seen:
                seen.add(u)
                stack.append(u)
    return seen


def _topo(
    nodes: set[str], succ: Mapping[str, set[str]], key: Mapping[str, int], grantable: set[str]
) -> list[str] | None:
    """Waited-for first: v comes after every u it waits for (v -> u), over the strongly connected
    components of the fixed edges (a cycle of them that holds no queued waiter cannot be changed
    by any reorder and does not stop one). Kahn's algorithm taking, of the components free to
    come next, the one with the waiter earliest in its queues, then the lowest id. None when a
    cycle of fixed edges runs through a queued waiter: no reorder can break it."""
    comps = components(nodes, succ)
    comp_of = {v: i for i, comp in enumerate(comps) for v in comp}
    for comp in comps:
        if _cyclic(comp, succ) and grantable.intersection(comp):
            return None
    waits_for: dict[int, set[int]] = {i: set() for i in range(len(comps))}
    for v in nodes:
        waits_for[comp_of[v]].update(comp_of[u] for u in succ.get(v, ()) if comp_of[u] != comp_of[v])
    waited_by = _reverse({str(i): {str(j) for j in js} for i, js in waits_for.items()})
    left = {i: len(js) for i, js in waits_for.items()}
    far = 1 << 62

    def rank(i: int) -> tuple[int, str]:
        return min(key.get(v, far) for v in comps[i]), comps[i][0]

    ready = [(rank(i), i) for i, n in left.items() if n == 0]
    heapq.heapify(ready)
    out: list[str] = []
    while ready:
        _, i = heapq.heappop(ready)
        out.extend(comps[i])
        for j in sorted(int(x) for x in waited_by.get(str(i), ())):
            left[j] -= 1
            if left[j] == 0:
                heapq.heappush(ready, (rank(j), j))
    assert len(out) == len(nodes), "the condensation of a graph has no cycle"
    return out


def apply_orders(st: State, reorder: Reorder) -> None:
    """Put ``reorder``'s queues in their new order, counting the pass-overs (the machine calls
    this when a REORDER decision commits; tests call it to check the result)."""
    added = {(tid, w): n for tid, w, n in reorder.passed}
    for tid, _, after in reorder.queues:
        by_id = {e.waiter_id: e for e in st.queues[tid]}
        st.queues[tid] = [by_id[w] for w in after]
        for w in after:
            by_id[w].passed += added.get((tid, w), 0)


def soft_candidate(st: State, cycle: SoftCycle) -> Candidate:
    """The cycle as a recovery candidate (the same digest and proposal path as a hard one): its
    members at their generations, and the waits its edges are made of: every member's wait with
    a hard satisfier inside, and every queued wait that carries one of its soft edges."""
    inside = set(cycle.members)
    soft_waits = {(x, t) for x, _, t in cycle.soft}
    edges = []
    for m in cycle.members:
        for edge in st.waits_of(m):
            sats = wait_satisfiers(st, edge)
            if (m, edge.target_id) in soft_waits or (sats and inside.intersection(sats)):
                edges.append((edge.edge_id, edge.edge_version))
    return Candidate.build(((m, st.executions[m].generation) for m in cycle.members), edges)


def soft_candidates(st: State) -> list[tuple[Candidate, SoftCycle]]:
    """Every soft cycle with its candidate, in member order."""
    return [(soft_candidate(st, cyc), cyc) for cyc in soft_cycles(st)]
