"""The chaos history: every operation the workload invoked and how it ended, as Jepsen records it.

Rules kept here:
- An operation is two entries: ``invoke`` when it is sent, then exactly one completion, ``ok``
  (the cluster answered and it took effect, or a read returned), ``fail`` (the cluster answered
  with a rejection: nothing was applied) or ``info`` (no answer: the outcome is unknown). A
  completion names its invocation (``ref``), so one process may have several operations in flight.
- Times are ``time.monotonic_ns()`` read under the lock, so the list is in real-time order and
  "A completed before B was invoked" is ``A.completion.index < B.invoke.index``.
- A retry of a write with the same request id is a new invoke/completion pair with the *same*
  ``request_id``; the checker merges the pairs into one logical operation spanning them all.
- What the cluster itself did (epoch commits, releases, cancellations...) is not an operation:
  the workload's observer records it as :class:`Observed` effects, in cursor (log) order.
- Thread-safe and asyncio-safe: appends take a ``threading.Lock`` and never await.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
TYPES = (INVOKE, OK, FAIL, INFO)
FENCE_PROBE = "acquire_fence_probe"
"""The operation name of the StaleEpoch fence probe: the workload records it (``_fence_probe``),
the checker judges it (``stale_epoch_refused_by_fence``)."""


@dataclass(slots=True)
class Op:
    """One history entry (an invocation or a completion)."""

    index: int
    process: str
    """The agent id (or ``reader-N``, ``operator``) that invoked it."""
    node: str
    """The endpoint it was sent to (invocation) or that answered (completion)."""
    f: str
    key: str | None
    value: Any
    """Invocation: the arguments that matter to the checker; completion: the result."""
    type: str
    time_ns: int
    request_id: str | None = None
    ref: int | None = None
    """A completion's invocation index."""
    stale: bool = False
    """A read served from a replica without a barrier (asked for, and labelled, stale)."""
    error: str | None = None


@dataclass(slots=True)
class Observed:
    """One effect the cluster applied, as the observer's event stream delivered it."""

    index: int
    cursor: int
    log_index: int
    kind: str
    fields: dict[str, Any]
    time_ns: int
    node: str


@dataclass(slots=True)
class Pair:
    """An invocation and its completion (None while it has none)."""

    invoke: Op
    completion: Op | None

    @property
    def type(self) -> str:
        return self.completion.type if self.completion is not None else INFO

    @property
    def end_index(self) -> float:
        """Where it completed in the history (infinity: never)."""
        if self.completion is None or self.completion.type == INFO:
            return float("inf")
        return float(self.completion.index)


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    observed: list[Observed] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Free-form remarks of the workload (observer resyncs, scenario give-ups), for the report."""
    t0_ns: int = field(default_factory=time.monotonic_ns)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    # -- recording ------------------------------------------------------------------------------------

    def invoke(
        self,
        process: str,
        node: str,
        f: str,
        key: str | None,
        value: Any = None,
        *,
        request_id: str | None = None,
        stale: bool = False,
    ) -> Op:
        with self._lock:
            op = Op(len(self.ops), process, node, f, key, value, INVOKE, time.monotonic_ns(), request_id, None, stale)
            self.ops.append(op)
            return op

    def complete(
        self, inv: Op, type_: str, value: Any = None, *, node: str | None = None, error: str | None = None
    ) -> Op:
        if type_ not in (OK, FAIL, INFO):
            raise ValueError(f"a completion is ok, fail or info, not {type_!r}")
        with self._lock:
            op = Op(
                len(self.ops),
                inv.process,
                node or inv.node,
                inv.f,
                inv.key,
                value,
                type_,
                time.monotonic_ns(),
                inv.request_id,
                inv.index,
                inv.stale,
                error,
            )
            self.ops.append(op)
            return op

    def observe(self, cursor: int, log_index: int, kind: str, fields: dict[str, Any], node: str) -> None:
        with self._lock:
            self.observed.append(
                Observed(len(self.observed), cursor, log_index, kind, fields, time.monotonic_ns(), node)
            )

    def note(self, text: str) -> None:
        with self._lock:
            self.notes.append(text)

    # -- reading --------------------------------------------------------------------------------------

    def pairs(self) -> list[Pair]:
        """Every invocation with its completion, in invocation order."""
        done = {op.ref: op for op in self.ops if op.type != INVOKE and op.ref is not None}
        return [Pair(op, done.get(op.index)) for op in self.ops if op.type == INVOKE]

    def dump(self, path: str | Path) -> None:
        """JSON lines: one ``{"op": ...}`` per entry, then ``{"observed": ...}`` and ``{"note": ...}``."""
        with self._lock:
            ops, observed, notes = list(self.ops), list(self.observed), list(self.notes)
        with open(path, "w") as out:
            out.write(json.dumps({"t0_ns": self.t0_ns}) + "\n")
            for op in ops:
                out.write(json.dumps({"op": asdict(op)}, default=str) + "\n")
            for ob in observed:
                out.write(json.dumps({"observed": asdict(ob)}, default=str) + "\n")
            for note in notes:
                out.write(json.dumps({"note": note}) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> History:
        h = cls()
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            if "t0_ns" in row:
                h.t0_ns = row["t0_ns"]
            elif "op" in row:
                h.ops.append(Op(**row["op"]))
            elif "observed" in row:
                h.observed.append(Observed(**row["observed"]))
            elif "note" in row:
                h.notes.append(row["note"])
        return h

    # -- excerpts -------------------------------------------------------------------------------------

    def render(self, op: Op) -> str:
        t = (op.time_ns - self.t0_ns) / 1e9
        value = json.dumps(op.value, default=str, sort_keys=True) if op.value is not None else ""
        bits = [f"{op.index:>6}", f"{t:9.3f}s", f"{op.process:<10}", f"{op.type:<6}", op.f]
        if op.key is not None:
            bits.append(op.key)
        if value:
            bits.append(value if len(value) <= 160 else value[:157] + "...")
        if op.stale:
            bits.append("[stale read]")
        if op.error:
            bits.append(f"error={op.error}")
        bits.append(f"@{op.node}")
        if op.request_id:
            bits.append(f"rid={op.request_id}")
        return "  ".join(bits)

    def excerpt(self, indices: Iterable[int], context: int = 2, key: str | None = None, limit: int = 60) -> str:
        """The entries at ``indices`` (marked ``>>``), their completions/invocations, and ``context``
        entries around each; with ``key``, the context is only entries on that key. Past ``limit``
        lines the context farthest from the marked entries is left out, never a marked one."""
        wanted: set[int] = set()
        by_ref = {op.ref: op.index for op in self.ops if op.ref is not None}
        for i in indices:
            if not 0 <= i < len(self.ops):
                continue
            wanted.add(i)
            op = self.ops[i]
            if op.ref is not None:
                wanted.add(op.ref)
            if i in by_ref:
                wanted.add(by_ref[i])
        marked = set(wanted)
        pool = [op.index for op in self.ops if key is None or op.key == key]
        for i in sorted(marked):
            pos = _bisect(pool, i)
            wanted.update(pool[max(0, pos - context) : pos + context + 1])
        chosen = sorted(wanted)
        if len(chosen) > limit:
            # Never cut a marked entry: the context closest to them is what goes.
            extra = sorted(wanted - marked, key=lambda i: min(abs(i - m) for m in marked))
            chosen = sorted(marked | set(extra[: max(0, limit - len(marked))]))
        lines: list[str] = []
        last = -2
        for i in chosen:
            if i != last + 1 and lines:
                lines.append("        ...")
            lines.append(("  >> " if i in marked else "     ") + self.render(self.ops[i]))
            last = i
        return "\n".join(lines)

    def __iter__(self) -> Iterator[Op]:
        return iter(list(self.ops))


def _bisect(items: list[int], x: int) -> int:
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


__all__ = ["FAIL", "FENCE_PROBE", "INFO", "INVOKE", "OK", "History", "Observed", "Op", "Pair"]
