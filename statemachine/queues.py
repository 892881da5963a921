"""Fair grant queues of exclusive resources and pools (issue #21; docs/queues.md).

Rules kept here:
- A wait on a ``resource:`` or ``pool:`` target takes a place in that target's queue when it
  opens, and leaves it when it closes, whatever closes it: :meth:`State.add_wait` and
  :meth:`State.remove_wait` are the only writers, so queue entries are always exactly the open
  waits on queued targets (``invariants.check`` compares the two).
- Order: higher ``priority`` first, FIFO among equals. A newcomer goes ahead of the lower-priority
  entries at the tail, each of which counts one pass-over (``passed``); an entry passed over
  ``pass_limit`` times (``Limits.queue_pass_limit``) is a barrier nobody goes ahead of again. So a
  waiter with k entries ahead of it when it queued is granted within k + pass_limit grants.
- The queue is primary replicated data (in the snapshot, v5). A snapshot of an older version has
  none: :func:`rebuild` orders the open waits by (registered_at_ms, waiter id), priority 0.
- Pure data: no effects here. The hand-off (the grant to the head in the release's own apply)
  is :func:`lifecycle.hand_off`, which asks :func:`grantable` who is next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .ids import Kind

QUEUED_KINDS = frozenset({Kind.RESOURCE, Kind.POOL})
"""Target kinds whose waiters queue and are handed the grant; every other kind wakes all."""

YIELD_REASON = "yield_to_winner"
"""The reason of the wait a tie-break loser is given behind the winner (statemachine/recovery.py):
while it has one it yields, and is passed by in every queue it is in."""

GRANTED = "granted"
"""The close reason of a wait that ended because its waiter was handed the target."""


@dataclass(slots=True)
class QueueEntry:
    waiter_id: str
    priority: int
    passed: int = 0
    """How many times a later waiter went ahead of this one (a priority newcomer, a reorder)."""
    lease_ttl_ms: int = 0
    """The TTL the grant to this waiter carries (``RegisterWait.lease_ttl_ms``; 0: none)."""


Queues = dict[str, list[QueueEntry]]
"""target id -> its queue, head first. A target with nobody queued has no entry."""


def enqueue(
    queues: Queues, target_id: str, waiter_id: str, priority: int, pass_limit: int, lease_ttl_ms: int = 0
) -> None:
    """Give ``waiter_id`` its place (a waiter already queued keeps its own, and the lease TTL it
    queued with: a re-register with a higher edge version is the same wait)."""
    queue = queues.setdefault(target_id, [])
    if any(e.waiter_id == waiter_id for e in queue):
        return
    pos = len(queue)
    while pos > 0 and queue[pos - 1].priority < priority and queue[pos - 1].passed < pass_limit:
        pos -= 1
    for e in queue[pos:]:
        e.passed += 1
    queue.insert(pos, QueueEntry(waiter_id, priority, 0, lease_ttl_ms))


def dequeue(queues: Queues, target_id: str, waiter_id: str) -> None:
    queue = queues.get(target_id)
    if not queue:
        return
    queues[target_id] = kept = [e for e in queue if e.waiter_id != waiter_id]
    if not kept:
        del queues[target_id]


def position(queues: Queues, target_id: str, waiter_id: str) -> int | None:
    """0-based place of ``waiter_id`` in the target's queue (0: next to be granted), or None."""
    for i, e in enumerate(queues.get(target_id, ())):
        if e.waiter_id == waiter_id:
            return i
    return None


def positions(queues: Queues, target_ids: Iterable[str]) -> dict[str, dict[str, int]]:
    """For each of ``target_ids`` that has a queue: waiter id -> its 0-based place (one pass per
    queue, for views listing many waits)."""
    return {tid: {e.waiter_id: i for i, e in enumerate(queues[tid])} for tid in set(target_ids) if tid in queues}


def order(queues: Queues, target_id: str) -> list[str]:
    """The waiter ids of the target's queue, head first."""
    return [e.waiter_id for e in queues.get(target_id, ())]


def grantable(queues: Queues, target_id: str, eligible: Callable[[str], bool]) -> QueueEntry | None:
    """The first queued entry for which ``eligible(waiter_id)`` is true (the next grant), or None.
    Ineligible entries (asked to stop, already a holder) keep their place and are passed by."""
    for e in queues.get(target_id, ()):
        if eligible(e.waiter_id):
            return e
    return None


def rebuild(waits: Iterable[tuple[str, str, int]], kinds: Mapping[str, Kind]) -> Queues:
    """Queues for a snapshot that has none (before v5): each queued-kind target's open waits as
    (target id, waiter id, registered_at_ms), ordered by (registered_at_ms, waiter id)."""
    rows = sorted((tid, at, w) for tid, w, at in waits if kinds.get(tid) in QUEUED_KINDS)
    out: Queues = {}
    for tid, _, w in rows:
        out.setdefault(tid, []).append(QueueEntry(w, 0))
    return out


def _entry_to_plain(e: QueueEntry) -> list[Any]:
    # The lease TTL is written only when set: a queue without one has the bytes it had before.
    if e.lease_ttl_ms:
        return [e.waiter_id, e.priority, e.passed, e.lease_ttl_ms]
    return [e.waiter_id, e.priority, e.passed]


def _entry_from_plain(row: list[Any]) -> QueueEntry:
    if len(row) not in (3, 4):
        raise ValueError("a queue entry is not [waiter id, priority, passed(, lease ttl)]")
    return QueueEntry(str(row[0]), int(row[1]), int(row[2]), int(row[3]) if len(row) == 4 else 0)


def to_plain(queues: Queues) -> list[list[Any]]:
    return [[tid, [_entry_to_plain(e) for e in queues[tid]]] for tid in sorted(queues)]


def from_plain(rows: list[Any]) -> Queues:
    out: Queues = {}
    for tid, entries in rows:
        if type(tid) is not str or type(entries) is not list or not entries:
            raise ValueError("a queue row is not [target id, [entries...]]")
        queue = [_entry_from_plain(row) for row in entries]
        if len({e.waiter_id for e in queue}) != len(queue):
            raise ValueError(f"{tid} lists a waiter twice in its queue")
        out[tid] = queue
    if len(out) != len(rows):
        raise ValueError("a queue is listed twice")
    return out
