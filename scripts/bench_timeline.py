"""``scripts/bench cluster --timeline DIR``: where one WriteBatch call's time goes, stage by stage.

Figure 2 through the SDK is a closed loop (64 agents, each waiting for its last write), so its rate
is 64 over the time of one call, and that time is the sum of hand-offs between processes and
threads as much as of work. This module names each hand-off: it wraps a few methods (nothing in
``cluster/`` changes, and nothing is wrapped unless ``--timeline`` asks), in the node processes
(their boot command imports it first) and in figure 2's SDK worker processes, and each process
appends ``<CLOCK_MONOTONIC seconds> <event> <key> [<n>]`` lines to ``DIR/tl-<pid>.txt``:
CLOCK_MONOTONIC is one clock for every process on the machine, so the files join.

Events (key in brackets):

- SDK: ``S_send`` / ``S_reply`` [the request id of the call's first item], around ``WriteBatcher._send``.
- Gateway: ``H_start`` / ``H_end`` [the same id] around ``Gateway.write_batch``; ``H_submit`` /
  ``H_answered`` [id] around its ``RaftNode.submit_many``.
- RaftNode (event loop): ``A_prop`` [the id of each call in the group, one line per call] when a
  group is proposed.
- WaitgraphSyncObj (Raft thread): ``L_add`` [last log index] when the leader appends;
  ``L_ack`` [the follower's next index] when a follower's answer arrives; ``apply1`` [log index]
  when an entry has been applied.

:func:`report` joins them per call and prints the stages; the leader's log entry of a group is
the first one appended after the group was proposed (one group in flight at a time, the node's
default, makes that exact). Events are written in blocks of 256 and at least every 0.5 s; a call
whose events are incomplete is left out (the table says how many were joined).
"""

from __future__ import annotations

import asyncio
import bisect
import contextvars
import functools
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_BLOCK = 256
_lock = threading.Lock()
_buffer: list[str] = []
_file: list[Any] = []
_call_id: contextvars.ContextVar[str] = contextvars.ContextVar("timeline_call", default="-")


def _event(kind: str, key: object, n: object = "") -> None:
    _buffer.append(f"{time.monotonic():.6f} {kind} {key} {n}\n")
    if len(_buffer) >= _BLOCK:
        flush()


def flush() -> None:
    """Write what is buffered (any thread: appends that race with it stay for the next flush)."""
    with _lock:
        lines = _buffer[:]
        del _buffer[: len(lines)]
        if lines and _file:
            _file[0].write("".join(lines))
            _file[0].flush()


def _flush_every(period_s: float) -> None:
    while True:
        time.sleep(period_s)
        flush()


def _open(directory: str) -> None:
    """Events go to DIR/tl-PID.txt, at least every 0.5 s: a node is killed (SIGKILL) at the end of
    the run, and what it had buffered would be lost with it."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    _file.append(open(Path(directory) / f"tl-{os.getpid()}.txt", "a"))  # noqa: SIM115 - lives with the process
    threading.Thread(target=_flush_every, args=(0.5,), name="timeline-flush", daemon=True).start()


def _first_request_id(items: Any) -> str:
    if not len(items):
        return "-"
    item = items[0]
    case = item.WhichOneof("write")
    return (getattr(item, case).request_id if case else "") or "-"


def _around(cls: type, name: str, before: Callable[..., Any], after: Callable[..., Any] | None = None) -> None:
    original = getattr(cls, name)

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = before(self, *args, **kwargs)
        result = original(self, *args, **kwargs)
        if after is not None:
            after(self, token, result)
        return result

    setattr(cls, name, wrapper)


def _around_async(cls: type, name: str, before: Callable[..., Any], after: Callable[..., Any]) -> None:
    original = getattr(cls, name)

    @functools.wraps(original)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = before(self, *args, **kwargs)
        try:
            return await original(self, *args, **kwargs)
        finally:
            after(self, token)

    setattr(cls, name, wrapper)


def install_sdk(directory: str) -> None:
    """In an SDK worker: time each WriteBatch call."""
    from waitgraph.sdk.connection import WriteBatcher

    _open(directory)

    def send(self: Any, items: Any, futures: Any) -> str:
        rid = _first_request_id(items)
        _event("S_send", rid)
        return rid

    _around_async(WriteBatcher, "_send", send, lambda self, rid: _event("S_reply", rid))


def install_node(directory: str) -> None:
    """In a node process, before ``waitgraph serve`` runs: the gateway, the group commit, the Raft thread."""
    from pysyncobj import SyncObj

    from waitgraph.node.raft import RaftNode, WaitgraphSyncObj
    from waitgraph.node.service import Gateway

    _open(directory)

    def handler_start(self: Any, request: Any, context: Any) -> contextvars.Token[str]:
        rid = _first_request_id(request.items)
        _event("H_start", rid, len(request.items))
        return _call_id.set(rid)

    def handler_end(self: Any, token: contextvars.Token[str]) -> None:
        _event("H_end", _call_id.get())
        _call_id.reset(token)

    _around_async(Gateway, "write_batch", handler_start, handler_end)
    _around_async(
        RaftNode,
        "submit_many",
        lambda self, envelopes: _event("H_submit", _call_id.get()),
        lambda self, token: _event("H_answered", _call_id.get()),
    )

    calls_of: dict[int, str] = {}
    """id(future) -> the call whose envelope it answers (set while the call enqueues)."""

    def enqueued(self: Any, token: None, fut: Any) -> None:
        rid = _call_id.get()
        if rid != "-" and isinstance(fut, asyncio.Future):
            calls_of[id(fut)] = rid

    _around(RaftNode, "_enqueue", lambda self, *a, **k: None, enqueued)

    def propose(self: Any, group: Any, payload: bytes) -> None:
        for rid in dict.fromkeys(calls_of.pop(id(f), "-") for f in group.futures):
            if rid != "-":
                _event("A_prop", rid, id(group))

    _around(RaftNode, "_propose", propose)

    def log_index(obj: Any) -> int:
        return int(obj._SyncObj__getCurrentLogIndex())

    # pysyncobj's own method (the override calls it, then flushes the leader's journal): the
    # append is timed before the leader's fsync, which runs beside the followers' own.
    _around(SyncObj, "_checkCommandsToApply", lambda self: log_index(self), _appended)

    def received(self: Any, node: Any, message: Any) -> None:
        if type(message) is dict and message.get("type") == "next_node_idx":
            _event("L_ack", message.get("next_node_idx"), node)

    _around(WaitgraphSyncObj, "_SyncObj__onMessageReceived", received)
    _around(
        WaitgraphSyncObj,
        "_apply_payload",
        lambda self, payload: None,
        lambda self, token, result: _event("apply1", int(self.raftLastApplied) + 1, len(result)),
    )


def _appended(obj: Any, before: int, result: None) -> None:
    after = int(obj._SyncObj__getCurrentLogIndex())
    if after != before:
        _event("L_add", after, after - before)


# -- the report ------------------------------------------------------------------------------------------

STAGES = (
    ("sdk", "the SDK sends -> the handler starts", "S_send", "H_start"),
    ("convert", "handler: auth, conversion, envelope checks", "H_start", "H_submit"),
    ("buffered", "waits for the group in flight", "H_submit", "A_prop"),
    ("to_raft", "proposed -> in the leader's log (Raft thread)", "A_prop", "L_add"),
    ("quorum", "in the log -> a follower's acknowledgment", "L_add", "L_ack"),
    ("apply", "acknowledged -> committed and applied on the leader", "L_ack", "apply1"),
    ("to_loop", "applied -> the answer on the event loop", "apply1", "H_answered"),
    ("answer", "handler: answers to protobuf", "H_answered", "H_end"),
    ("back", "the handler returns -> the SDK has the reply", "H_end", "S_reply"),
)
"""(key, what it is, from event, to event): consecutive, so they add up to the whole call."""


def _read(directory: Path) -> dict[str, list[list[str]]]:
    return {
        path.name: [line.split() for line in path.read_text().splitlines()]
        for path in sorted(directory.glob("tl-*.txt"))
    }


class _RaftEvents:
    """One node's Raft-thread events: appends, acknowledgments, applies."""

    def __init__(self, rows: list[list[str]]) -> None:
        self.adds = sorted((float(r[0]), int(r[2])) for r in rows if r[1] == "L_add")
        self.acks = sorted((float(r[0]), int(r[2])) for r in rows if r[1] == "L_ack" and r[2].isdigit())
        self.applied: dict[int, float] = {}
        for r in rows:
            if r[1] == "apply1":
                self.applied.setdefault(int(r[2]), float(r[0]))
        self.add_times = [a[0] for a in self.adds]
        self.ack_times = [a[0] for a in self.acks]

    def follow(self, ev: dict[str, float]) -> bool:
        """Add the entry's append, first covering acknowledgment and apply after ``ev["A_prop"]``."""
        i = bisect.bisect_left(self.add_times, ev["A_prop"])
        if i == len(self.adds):
            return False
        ev["L_add"], index = self.adds[i]
        j = bisect.bisect_left(self.ack_times, ev["L_add"])
        while j < len(self.acks) and self.acks[j][1] <= index:
            j += 1
        if j == len(self.acks) or index not in self.applied:
            return False
        ev["L_ack"], ev["apply1"] = self.acks[j][0], self.applied[index]
        return True


_CALL_EVENTS = ("S_send", "S_reply", "H_start", "H_submit", "H_answered", "H_end", "A_prop")


def join(directory: Path) -> dict[str, dict[str, float]]:
    """Each call (by its first request id) that every stage's events were found for: event -> time.
    The Raft events are those of the node whose gateway took the call."""
    files = _read(directory)
    calls: dict[str, dict[str, float]] = {}
    node_of: dict[str, str] = {}
    for name, rows in files.items():
        for t, kind, key, *_ in rows:
            if kind in _CALL_EVENTS and key != "-":
                calls.setdefault(key, {})[kind] = float(t)
                if kind == "H_start":
                    node_of[key] = name
    raft = {name: _RaftEvents(files[name]) for name in set(node_of.values())}
    whole: dict[str, dict[str, float]] = {}
    for rid, ev in calls.items():
        if "A_prop" not in ev or rid not in node_of or not raft[node_of[rid]].follow(ev):
            continue
        if all(a in ev and b in ev and ev[a] <= ev[b] for _, _, a, b in STAGES):
            whole[rid] = ev
    return whole


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def report(directory: Path) -> list[str]:
    """Markdown lines: each stage of the joined calls, p50 / p90 / mean in ms and its share of the mean call."""
    calls = join(directory)
    if not calls:
        return [f"- timeline: no WriteBatch call could be joined from {directory}"]
    whole = [ev["S_reply"] - ev["S_send"] for ev in calls.values()]
    total = statistics.mean(whole)
    lines = [
        f"- timeline of {len(calls)} WriteBatch calls (`--timeline`, files in {directory}): ms per call",
        "",
        "| stage | p50 | p90 | mean | share of the mean call |",
        "|---|---:|---:|---:|---:|",
    ]

    def row(what: str, xs: list[float]) -> str:
        mean = statistics.mean(xs)
        ms = " | ".join(f"{x * 1e3:.2f}" for x in (_pct(xs, 0.5), _pct(xs, 0.9), mean))
        return f"| {what} | {ms} | {mean / total:.0%} |"

    for _, what, a, b in STAGES:
        lines.append(row(what, [ev[b] - ev[a] for ev in calls.values()]))
    lines.append(row("**the whole call**", whole))
    lines.append("")
    return lines
