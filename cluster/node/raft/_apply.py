"""Apply: the one replicated method, which never raises.

**One replicated method.** pysyncobj numbers replicated methods by sorted name
(``SyncObj.__init__`` enumerates ``dir(self)``), so the class has exactly one,
:meth:`WaitgraphSyncObj.apply_commands`, taking msgpack bytes: one encoded ``Envelope``, or a
group ``{"kind": "Batch", "v": 1, "items": [envelope bytes, ...]}`` (group commit), or an empty
group (the read barrier). It never raises: ``__applyLogEntries`` only catches
``SyncObjExceptionWrongVer``, so any other exception escapes ``_onTick``, ``raftLastApplied`` is
not advanced, and the same entry is applied again on every tick, forever, on every replica. The
same holds for the result callbacks, which pysyncobj calls inside that loop: ours only hand the
result to the asyncio loop with ``call_soon_threadsafe`` and swallow everything; and for decoding
the entry itself (a pickle of method id and arguments, ``__doApplyCommand``): an entry that does not
decode is skipped, identically on every replica (``WaitgraphSyncObj._SyncObj__doApplyCommand``).
An exception from the core becomes an ``INTERNAL`` outcome, logged and counted; an
``InvariantViolation`` too (at CRITICAL, also counted as ``invariant_violations``), and it does not stop
the node: every replica would raise on the same entry, again after every restart, so stopping would
stop the whole cluster for good (``statemachine/errors.py`` says the same). The core checks
before it mutates (``statemachine/machine.py``), so a rejection changes nothing; an unexpected
exception *after* a mutation started would leave that partial change in place. Since every replica
applies the same bytes deterministically they all keep the same partial change and stay in sync;
the residual risk is a non-deterministic failure (``MemoryError`` on one replica only). Taking a
snapshot before every apply to roll back would cost a full state copy per command.

pysyncobj names: ``replicated`` (the decorator), ``_SyncObj__doApplyCommand`` (overridden: an entry that
does not decode is skipped), ``SyncObjExceptionWrongVer`` (let through, as pysyncobj expects).
Checklist: ``_pysyncobj.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgpack

from waitgraph.node.raft._pysyncobj import SyncObj, SyncObjExceptionWrongVer, replicated
from waitgraph.statemachine import Outcome, StateMachine
from waitgraph.statemachine.codec import CheckedEnvelope, adopt_checked
from waitgraph.statemachine.errors import InvariantViolation, Rejection, Status
from waitgraph.statemachine.outcome import rejected

logger = logging.getLogger("waitgraph.node.raft")

T = TypeVar("T")

BATCH_KIND = "Batch"
BATCH_VERSION = 1
MAX_BATCH_ITEMS = 4096


def _internal(message: str) -> Outcome:
    return rejected(Rejection(Status.INTERNAL, "internal_error", message))


class ApplyMixin(SyncObj):  # type: ignore[misc]
    """The replicated method of :class:`~waitgraph.node.raft._syncobj.WaitgraphSyncObj` and the reads
    between two applies (module docstring). ``apply_commands`` is the only ``@replicated`` method of
    the class: pysyncobj numbers them by sorted name, so a second one would renumber the log."""

    counters: dict[str, int]
    predecoded: dict[bytes, CheckedEnvelope]
    writes: int
    _machine: StateMachine
    _machine_lock: threading.Lock
    _tick_apply_s: float
    _tick_lock_wait_s: float

    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:
        # Decoding a log entry (a pickle: function id and arguments) happens before our method
        # runs; an entry that does not decode, or names no method, would raise out of
        # ``__applyLogEntries`` and wedge every replica. Every replica fails the same way on the
        # same bytes, so skipping it keeps them in sync.
        try:
            return super()._SyncObj__doApplyCommand(command)
        except SyncObjExceptionWrongVer:
            raise
        except Exception:
            self.counters["entries_undecodable"] += 1
            logger.exception("skipping a log entry that does not decode to a call of apply_commands")
            return None

    # The one replicated method. ``*args, **kwargs`` so that no argument list, however crafted,
    # makes the call itself raise a TypeError before the body's try.
    @replicated  # type: ignore[untyped-decorator]
    def apply_commands(self, payload: Any = None, *args: Any, **kwargs: Any) -> tuple[Outcome, ...]:
        started = time.monotonic()
        try:
            with self._machine_lock:
                self._tick_lock_wait_s += time.monotonic() - started
                self.writes += 1
                try:
                    outcomes = self._apply_payload(payload)
                finally:
                    self.writes += 1
                    self._tick_apply_s += time.monotonic() - started
            self.counters["entries_applied"] += 1
            self.counters["envelopes_applied"] += len(outcomes)
            return outcomes
        except Exception as exc:  # pragma: no cover - _apply_payload already catches per envelope
            self.counters["internal_errors"] += 1
            logger.exception("apply_commands failed outside an envelope")
            return (_internal(f"apply failed: {type(exc).__name__}"),)

    def _apply_payload(self, payload: Any) -> tuple[Outcome, ...]:
        if not isinstance(payload, bytes):
            return (rejected(Rejection(Status.INVALID_ARGUMENT, "codec", "payload must be bytes")),)
        items = _batch_items(payload)
        if items is None:
            return (self._apply_one(payload),)
        return tuple(self._apply_one(item) for item in items)

    def _apply_one(self, data: bytes) -> Outcome:
        try:
            checked = self.predecoded.pop(data, None)
            if checked is not None:  # the same bytes, so the same envelope a decoder would build
                return self._machine.apply(adopt_checked(checked))
            return self._machine.apply_bytes(data)
        except InvariantViolation as exc:
            self.counters["internal_errors"] += 1
            self.counters["invariant_violations"] += 1
            logger.critical("invariant violation while applying a command: %s", exc.message)
            return _internal(f"invariant violation: {exc.message}")
        except Exception as exc:
            self.counters["internal_errors"] += 1
            logger.exception("the state machine raised while applying a command")
            return _internal(f"apply raised {type(exc).__name__}")

    def read(self, fn: Callable[[StateMachine], T]) -> T:
        """Run ``fn`` on the state machine between two applies (any thread; blocks while applying)."""
        with self._machine_lock:
            return fn(self._machine)


def _batch_items(payload: bytes) -> list[bytes] | None:
    """The envelopes of a group payload, or None when the payload is a single envelope (or junk)."""
    try:
        raw = msgpack.unpackb(
            payload,
            raw=False,
            strict_map_key=True,
            max_array_len=MAX_BATCH_ITEMS,
            max_map_len=64,
            max_ext_len=0,
        )
    except Exception:
        return None
    if type(raw) is not dict or raw.get("kind") != BATCH_KIND or raw.get("v") != BATCH_VERSION:
        return None
    items = raw.get("items")
    if type(items) is not list or raw.keys() != {"items", "kind", "v"}:
        return None
    # A non-bytes item is still applied (and rejected by the codec) so that the group keeps one
    # outcome per item.
    return [item if isinstance(item, bytes) else b"" for item in items]


def encode_batch(items: list[bytes]) -> bytes:
    return msgpack.packb({"items": items, "kind": BATCH_KIND, "v": BATCH_VERSION}, use_bin_type=True)  # type: ignore[no-any-return]
