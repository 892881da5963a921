"""A Wing & Gong linearizability checker with Lowe's memoisation, as Porcupine implements it.

Rules kept here:
- The search runs over one key's operations at a time (the caller partitions: P-compositionality,
  linearizability is local). Each operation has a call and a return time; a return of ``inf`` is
  an operation whose outcome is unknown (it may be linearized anywhere after its call, or, when
  its model says so, not take effect at all).
- Entries (calls and returns) are sorted by time, calls first on ties, in a doubly linked list.
  The depth-first search linearizes a pending call whenever the model accepts it, lifts it out of
  the list, and backtracks at the first return whose call is not linearized yet. A set of
  (linearized ops bitset, model state) pairs already explored prunes the search (Lowe): the same
  set of linearized ops reaching the same state cannot succeed the second time either.
- Models are pure: ``step(state, input, output)`` returns every state the operation can lead to
  (empty: it cannot happen in that state). Nondeterminism is how "unknown" is expressed.
- A search that exceeds its step budget says so (``exhausted``): never a silent pass.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

INF = float("inf")
DEFAULT_BUDGET = 2_000_000


@dataclass(frozen=True, slots=True)
class Operation:
    """One logical operation on one key, for the checker."""

    op_id: int
    """Position in the list given to :func:`check` (the bit in the linearized set)."""
    process: str
    call: float
    ret: float
    input: Any
    output: Any
    ref: int | None = None
    """The history index of its invocation (for excerpts); None for synthetic operations."""


class Model(Protocol):
    name: str

    def init(self) -> Hashable: ...

    def step(self, state: Any, input: Any, output: Any) -> list[Any]: ...

    def describe(self, input: Any, output: Any) -> str: ...


@dataclass(frozen=True, slots=True)
class Result:
    ok: bool
    exhausted: bool = False
    stuck: Operation | None = None
    """An operation whose return came while it could not be linearized (the deepest such point)."""
    prefix: tuple[Operation, ...] = ()
    """The longest linearization found before getting stuck, in order."""
    steps: int = 0


class _Node:
    __slots__ = ("call", "match", "next", "op_id", "prev")

    def __init__(self, op_id: int, call: bool) -> None:
        self.op_id = op_id
        self.call = call
        self.match: _Node | None = None
        self.next: _Node | None = None
        self.prev: _Node | None = None


def _build(ops: Sequence[Operation]) -> _Node:
    events: list[tuple[float, int, int, _Node]] = []
    for op in ops:
        c, r = _Node(op.op_id, True), _Node(op.op_id, False)
        c.match = r
        events.append((op.call, 0, op.op_id, c))
        events.append((op.ret, 1, op.op_id, r))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    head = _Node(-1, False)
    prev = head
    for _, _, _, node in events:
        prev.next = node
        node.prev = prev
        prev = node
    return head


def _lift(entry: _Node) -> None:
    assert entry.prev is not None and entry.match is not None
    entry.prev.next = entry.next
    if entry.next is not None:
        entry.next.prev = entry.prev
    match = entry.match
    assert match.prev is not None
    match.prev.next = match.next
    if match.next is not None:
        match.next.prev = match.prev


def _unlift(entry: _Node) -> None:
    match = entry.match
    assert match is not None and match.prev is not None and entry.prev is not None
    match.prev.next = match
    if match.next is not None:
        match.next.prev = match
    entry.prev.next = entry
    if entry.next is not None:
        entry.next.prev = entry


def check(model: Model, ops: Sequence[Operation], budget: int = DEFAULT_BUDGET) -> Result:
    """Is there a linearization of ``ops`` (one key) that the model accepts?"""
    ops = [op if op.op_id == i else _renumber(op, i) for i, op in enumerate(ops)]
    if not ops:
        return Result(True)
    head = _build(ops)
    state: Any = model.init()
    linearized = 0
    cache: set[tuple[int, Any]] = set()
    stack: list[tuple[_Node, Any, int]] = []
    best_depth, stuck = -1, None
    best_prefix: tuple[Operation, ...] = ()
    entry = head.next
    resume = 0
    steps = 0
    while head.next is not None:
        if steps > budget:
            return Result(False, True, stuck, best_prefix, steps)
        assert entry is not None
        if entry.call:
            op = ops[entry.op_id]
            moved = False
            steps += 1  # the budget counts model steps and backtracks, not walking the list
            nexts = model.step(state, op.input, op.output)
            for alt in range(resume, len(nexts)):
                new_lin = linearized | (1 << entry.op_id)
                key = (new_lin, nexts[alt])
                if key in cache:
                    continue
                cache.add(key)
                stack.append((entry, state, alt))
                state, linearized = nexts[alt], new_lin
                _lift(entry)
                entry = head.next
                moved = True
                break
            resume = 0
            if not moved:
                entry = entry.next
        else:
            if len(stack) > best_depth:
                best_depth = len(stack)
                best_prefix = tuple(ops[e.op_id] for e, _, _ in stack)
                stuck = ops[entry.op_id]
            if not stack:
                return Result(False, False, stuck, best_prefix, steps)
            steps += 1
            top, state, alt = stack.pop()
            linearized &= ~(1 << top.op_id)
            _unlift(top)
            entry, resume = top, alt + 1
    return Result(True, False, None, (), steps)


def _renumber(op: Operation, i: int) -> Operation:
    return Operation(i, op.process, op.call, op.ret, op.input, op.output, op.ref)


# -- models -----------------------------------------------------------------------------------------


class EpochModel:
    """The global epoch: a register that only recovery commits write, each exactly one more than
    the last (``epoch_proposed = epoch + 1``), and clients read.

    Inputs: ``("read",)`` with the value read as output; ``("commit", k)`` (output ignored).
    """

    name = "epoch"

    def init(self) -> int:
        return 0

    def step(self, state: int, input: Any, output: Any) -> list[int]:
        if input[0] == "read":
            return [state] if output == state else []
        if input[0] == "commit":
            return [input[1]] if input[1] == state + 1 else []
        raise ValueError(f"epoch model: unknown operation {input!r}")

    def describe(self, input: Any, output: Any) -> str:
        if input[0] == "read":
            return f"read epoch -> {output}"
        return f"commit epoch {input[1]}"


class CancelGenerationModel:
    """A run's cancel generation. ``CancelRun(observed=o)`` applies when the generation is ``o``
    (it becomes ``o + 1``), is a recorded no-op ``already_raised`` when it is past ``o``; reads
    return it.

    Inputs: ``("read",)`` with the value as output; ``("cancel", o)`` with output ``("applied", n)``,
    ``("noop",)``, or None when the outcome is unknown (then it may also never have taken effect).
    """

    name = "cancel_generation"

    def init(self) -> int:
        return 0

    def step(self, state: int, input: Any, output: Any) -> list[int]:
        if input[0] == "read":
            return [state] if output == state else []
        if input[0] == "cancel":
            observed = input[1]
            if output is None:
                return [state, observed + 1] if state == observed else [state]
            if output[0] == "applied":
                return [output[1]] if state == observed and output[1] == observed + 1 else []
            if output[0] == "noop":
                return [state] if state > observed else []
        raise ValueError(f"cancel generation model: unknown operation {input!r} -> {output!r}")

    def describe(self, input: Any, output: Any) -> str:
        if input[0] == "read":
            return f"read cancel generation -> {output}"
        what = "unknown" if output is None else " ".join(str(x) for x in output)
        return f"CancelRun(observed={input[1]}) -> {what}"


MODELS: dict[str, Model] = {"epoch": EpochModel(), "cancel_generation": CancelGenerationModel()}

__all__ = ["INF", "MODELS", "CancelGenerationModel", "EpochModel", "Model", "Operation", "Result", "check"]
