"""Strongly connected components: the one implementation detection and the reorder search share.

Rules kept here:
- Tarjan's algorithm, iterative: nothing recurses, so a million-long chain or cycle is an ordinary
  input. Graphs are int lists in the form detection walks fastest (:func:`successor_form`);
  :func:`components` and :func:`cycles` take string ids and return them sorted.
- Nothing depends on dict or set iteration order: the search order may follow it, but every
  string-keyed result is sorted (members, then components), whatever PYTHONHASHSEED is.
- Only the standard library, and no import of the package: ``scripts/check_layers.py`` loads this
  file on its own to find import circles in a package that may not import at all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import compress, repeat
from operator import eq, neg, not_

__all__ = ["Sccs", "components", "cycles", "cyclic_components", "search", "successor_form"]

Sccs = tuple[list[list[int]], list[int]]
"""Components that could hold a cycle (see :func:`cyclic_components`), and ``done`` after the search."""


def successor_form(succ: Sequence[list[int]], n: int) -> tuple[list[int], dict[int, list[int]]]:
    """``nxt`` and ``several`` (see :func:`cyclic_components`) from successor lists of the nodes
    0..n-1 that may hold ``n`` (no node: ignored)."""
    nxt = [n] * (n + 2)
    several: dict[int, list[int]] = {}
    for v, out in enumerate(succ):
        real = [j for j in out if j != n]
        if len(real) == 1:
            nxt[v] = real[0]
        elif real:
            nxt[v] = n + 1
            several[v] = real
    return nxt, several


def search(nxt: list[int], several: dict[int, list[int]]) -> Sccs:
    """Every component that could hold a cycle, from every node."""
    # A node with no successor is in no cycle: finished before the search starts (in a typical
    # wait-for graph most waiters wait on something that is running). The sentinels point at n too.
    n = len(nxt) - 2
    done = list(map(neg, map(eq, nxt, repeat(n))))
    return cyclic_components(nxt, several, compress(range(n), map(not_, done)), done), done


def cyclic_components(
    nxt: list[int], several: dict[int, list[int]], roots: Iterable[int], done: list[int]
) -> list[list[int]]:
    """Strongly connected components reachable from ``roots`` that could hold a cycle: two or
    more nodes, or one node with an edge to itself.

    Nodes are 0..n-1; ``nxt[v]`` is v's only successor, or ``n`` when it has none, or ``n + 1``
    when it has several, listed in ``several[v]`` (``n`` entries and duplicates allowed). ``nxt``
    has ``n + 2`` entries, both sentinels pointing at ``n``.

    Tarjan's algorithm, iterative, walking *runs*: from an unvisited node the search follows
    one-successor nodes (``nxt``) in a tight loop for as long as they lead to unvisited nodes, so
    a chain or a cycle of a million executions costs a few operations per node, and the run is
    then numbered, closed and popped with list slices. Only a node with several successors opens a
    frame that iterates them. Within a run the low-links need no per-node work: every node but the
    last has the next one as its only successor, so low(v_i) = min(number(v_i), low(last)); the
    nodes numbered at or below low(last) are the roots, the first of them (in the run's order) the
    root of the component holding the rest of the run and everything above it on the stack, the
    ones before it components of one node without a self-edge.

    A node's number is its position on Tarjan's stack plus one, which never changes while it is
    on the stack. ``done[v]``: 0 unvisited, > 0 on the stack (that number), < 0 finished or
    excluded (edges to it are ignored; that is how a recomputation is restricted to a subset; the
    sentinels ``n`` and ``n + 1`` must be < 0).
    """
    n = len(nxt) - 2
    many = n + 1
    none = n + 2  # greater than every number: "no low-link from there"
    found: list[list[int]] = []
    stack: list[int] = []
    push = stack.append
    mark = done.__setitem__
    frames: list[tuple[int, Iterator[int]]] = []  # the run's base and the last node's successors
    lows: list[int] = []  # low-link of each frame's last node so far
    for v in roots:
        if done[v]:
            continue
        while True:
            # a run from the unvisited node v
            base = len(stack)
            while True:
                done[v] = -2
                push(v)
                v = nxt[v]
                if done[v]:
                    break
            top = len(stack)
            low = done[v]
            if v == many:
                deque(map(mark, stack[base:], range(base + 1, top + 1)), maxlen=0)
                frames.append((base, iter(several[stack[-1]])))
                lows.append(top)
                low = none
            elif low == -1:
                # the run ends in a finished node: each of its nodes is a component of its own
                # without a self-edge (the commonest case by far: a wait on a running execution)
                if top - base == 1:
                    done[stack.pop()] = -1
                else:
                    deque(map(mark, stack[base:], repeat(-1)), maxlen=0)
                    del stack[base:]
                low = none
            elif low == -2:
                # the run ends in itself: a cycle from v on, the nodes before it alone
                _close(stack, base, stack.index(v, base), nxt, several, mark, found)
                low = none
            else:
                # the run ends in a node lower on the stack: the run stays there, numbered, and
                # that node's number is its low-link
                deque(map(mark, stack[base:], range(base + 1, top + 1)), maxlen=0)
            # back up through the open frames until one has an unvisited successor left
            v = -1
            while frames:
                base, it = frames[-1]
                flow = lows[-1]
                if low < flow:
                    flow = low
                for w in it:
                    d = done[w]
                    if d == 0:
                        v = w
                        break
                    if 0 < d < flow:
                        flow = d
                if v >= 0:
                    lows[-1] = flow
                    break
                frames.pop()
                lows.pop()
                if flow > base:
                    _close(stack, base, flow - 1, nxt, several, mark, found)
                    low = none
                else:
                    low = flow
            if v < 0:
                break
    return found


def _close(
    stack: list[int],
    base: int,
    root: int,
    nxt: list[int],
    several: dict[int, list[int]],
    mark: Callable[[int, int], None],
    found: list[list[int]],
) -> None:
    """Finish the run that starts at ``stack[base]`` and whose first root is at ``root``: the
    component is everything from the root up; the run's nodes before it are components of one."""
    comp = stack[root:]
    deque(map(mark, stack[base:], repeat(-1)), maxlen=0)
    del stack[base:]
    if len(comp) > 1:
        found.append(comp)
    else:
        v = comp[0]
        if nxt[v] == v or (v in several and v in several[v]):
            found.append(comp)


def _string_search(nodes: Iterable[str], succ: Mapping[str, Iterable[str]]) -> tuple[list[str], list[list[int]]]:
    """The sorted ids and the cycle-holding components in their numbers (edges that leave
    ``nodes`` are ignored)."""
    ids = sorted(set(nodes))
    n = len(ids)
    get = dict(zip(ids, range(n), strict=True)).get
    nxt = [n] * (n + 2)
    done = [-1] * (n + 2)  # a node with no successor is in no cycle: finished from the start
    several: dict[int, list[int]] = {}
    roots: list[int] = []
    for v, u in enumerate(ids):
        out = succ.get(u)
        if not out:
            continue
        js = [j for j in map(get, out) if j is not None]
        if not js:
            continue
        if len(js) == 1:
            nxt[v] = js[0]
        else:
            nxt[v] = n + 1
            several[v] = js
        done[v] = 0
        roots.append(v)
    return ids, cyclic_components(nxt, several, roots, done)


def _named(ids: list[str], comps: Iterable[list[int]]) -> list[list[str]]:
    # the ids are sorted, so sorting the numbers sorts the members
    return sorted([ids[v] for v in sorted(comp)] for comp in comps)


def cycles(nodes: Iterable[str], succ: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of ``nodes`` that hold a cycle (two or more nodes, or one
    with an edge to itself), each sorted, in sorted order. Edges that leave ``nodes`` are ignored."""
    ids, found = _string_search(nodes, succ)
    return _named(ids, found)


def components(nodes: Iterable[str], succ: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every strongly connected component of ``nodes`` (one-node ones too), each sorted, in sorted
    order. Edges that leave ``nodes`` are ignored."""
    ids, found = _string_search(nodes, succ)
    alone = [True] * len(ids)
    for comp in found:
        for v in comp:
            alone[v] = False
    return _named(ids, [*found, *([v] for v in compress(range(len(ids)), alone))])
