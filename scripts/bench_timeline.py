"""``scripts/bench cluster --timeline DIR``: where one write call's time goes, stage by stage.

Figure 2 through the SDK is a closed loop (64 agents, each waiting for its last write), so its rate
is 64 over the time of one call, and that time is the sum of hand-offs between processes and
threads as much as of work. Figure 1 (one unary RegisterWait at a time) has no queue at all, so
its time is the hand-offs alone. This module names each hand-off: it wraps a few methods (nothing
in ``cluster/`` changes, and nothing is wrapped unless ``--timeline`` asks), in the node processes
(their boot command imports it first) and in figure 2's SDK worker processes, and figure 1's
client marks its own calls (:func:`mark`). Each process appends ``<CLOCK_MONOTONIC seconds>
<event> <key> [<n>]`` lines to ``DIR/tl-<pid>.txt``: CLOCK_MONOTONIC is one clock for every
process on the machine, so the files join.

Events (key in brackets):

- Client: ``S_send`` / ``S_reply`` [the request id of the call's first item], around the SDK's
  ``WriteBatcher._send`` (figure 2) or figure 1's unary RegisterWait (n: ``unary``).
- Gateway: ``H_start`` / ``H_end`` [the same id] around ``Gateway.write_batch`` (n: its item count)
  and the unary ``Gateway.write`` (n: ``unary``); ``H_submit`` / ``H_answered`` [id] around its
  ``RaftNode.submit_many`` or ``RaftNode.submit``.
- RaftNode (event loop): ``A_prop`` [the id of each call in the group, one line per call] when a
  group is proposed.
- WaitgraphSyncObj (Raft thread), on the leader: ``L_add`` [last log index] when it appends;
  ``L_ack`` [the follower's next index, n: the follower's Raft address] when a follower's answer
  arrives; ``apply1`` [log index] when an entry has been applied (on every node).
- On a follower (n: its own Raft address): ``F_recv`` [the last index of the entries] when an
  ``append_entries`` with entries has been handled (appended, not yet flushed); ``F_flush`` [the
  highest next index held] when the flush those answers wait for starts, ``F_synced`` [the last
  index on disk] when its ``fdatasync`` returned; ``F_ack`` [the highest next index answered] when
  the held answers leave (a durable node's: a ``--no-fsync`` node holds none, so a run of those
  joins no call).

:func:`report` joins them per call and prints the stages, one table per kind of call; the
leader's log entry of a group is the first one appended after the group was proposed (one group
in flight at a time, the node's default, makes that exact), and the follower stages are those of
the follower whose answer made the quorum. Events are written in blocks of 256 and at least
every 0.5 s; a call whose events are incomplete is left out (the table says how many were
joined).
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


def mark(directory: str, kind: str, key: object, n: object = "") -> None:
    """An event from the calling process itself (figure 1's client), its file opened at the first."""
    if not _file:
        _open(directory)
    _event(kind, key, n)


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

    def send(self: Any, items: Any, *_: Any) -> str:  # (items, futures[, the writers' trace contexts])
        rid = _first_request_id(items)
        _event("S_send", rid)
        return rid

    _around_async(WriteBatcher, "_send", send, lambda self, rid: _event("S_reply", rid))


def install_node(directory: str) -> None:
    """In a node process, before ``waitgraph serve`` runs: the gateway, the group commit, the Raft thread."""
    from waitgraph.node.raft import RaftNode
    from waitgraph.node.raft._journal import ChecksummedJournal
    from waitgraph.node.raft._pysyncobj import SyncObj
    from waitgraph.node.raft._syncobj import WaitgraphSyncObj
    from waitgraph.node.service import Gateway

    _open(directory)

    def handler_start(self: Any, request: Any, context: Any) -> contextvars.Token[str]:
        rid = _first_request_id(request.items)
        _event("H_start", rid, len(request.items))
        return _call_id.set(rid)

    def handler_end(self: Any, token: contextvars.Token[str]) -> None:
        _event("H_end", _call_id.get())
        _call_id.reset(token)

    def unary_start(self: Any, principal: Any, rpc: str, request: Any) -> contextvars.Token[str]:
        rid = request.request_id or "-"
        _event("H_start", rid, "unary")
        return _call_id.set(rid)

    _around_async(Gateway, "write_batch", handler_start, handler_end)
    _around_async(Gateway, "write", unary_start, handler_end)
    for submit in ("submit_many", "submit"):
        _around_async(
            RaftNode,
            submit,
            lambda self, envelopes: _event("H_submit", _call_id.get()),
            lambda self, token: _event("H_answered", _call_id.get()),
        )

    calls_of: dict[int, str] = {}
    """id(future) -> the call whose envelope it answers (set while the call enqueues)."""

    def enqueued(self: Any, token: None, fut: Any) -> None:
        rid = _call_id.get()
        if rid != "-" and isinstance(fut, asyncio.Future) and any(f is fut for _, f, _ in self._buffer):
            calls_of[id(fut)] = rid  # still waiting (one proposed inside _enqueue was timed by propose)

    _around(RaftNode, "_enqueue", lambda self, *a, **k: None, enqueued)

    def propose(self: Any, group: Any, payload: bytes) -> None:
        # The calls whose envelopes waited, and the call proposing now (a lone submit, or a
        # group filled by this call's envelope: the handler's context).
        rids = [calls_of.pop(id(f), "-") for f in group.futures] + [_call_id.get()]
        for rid in dict.fromkeys(rids):
            if rid != "-":
                _event("A_prop", rid, id(group))

    _around(RaftNode, "_propose", propose)

    def log_index(obj: Any) -> int:
        return int(obj._SyncObj__getCurrentLogIndex())

    # pysyncobj's own method (the override calls it, then flushes the leader's journal): the
    # append is timed before the leader's fsync, which runs beside the followers' own.
    _around(SyncObj, "_checkCommandsToApply", lambda self: log_index(self), _appended)

    def received(self: Any, node: Any, message: Any) -> int:
        """An answer is timed when it arrives; entries once handled (appended): their last index."""
        if type(message) is not dict:
            return 0
        if message.get("type") == "next_node_idx":
            _event("L_ack", message.get("next_node_idx"), node.address)
        elif message.get("type") == "append_entries" and message.get("entries"):
            return int(message.get("prevLogIdx", 0)) + len(message["entries"])
        return 0

    def handled(self: Any, last: int, result: None) -> None:
        if last:
            _event("F_recv", last, self.selfNode.address)

    def held(self: Any) -> int:
        """The highest next index among the answers waiting for this flush (0: none)."""
        index = max((r[2] for r in self._held_replies if r[3]), default=0)
        if index:
            _event("F_flush", index, self.selfNode.address)
        return index

    def synced(journal: Any, token: None, flushed: bool) -> None:
        if flushed:
            _event("F_synced", journal.flushed_index)

    def answered(self: Any, index: int, result: None) -> None:
        if index:
            _event("F_ack", index, self.selfNode.address)

    _around(WaitgraphSyncObj, "_SyncObj__onMessageReceived", received, handled)
    _around(WaitgraphSyncObj, "sync_journal", held, answered)
    _around(ChecksummedJournal, "sync", lambda journal: None, synced)
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
    ("client", "the client sends -> the handler starts", "S_send", "H_start"),
    ("convert", "handler: auth, conversion, envelope checks", "H_start", "H_submit"),
    ("buffered", "waits for the group in flight", "H_submit", "A_prop"),
    ("to_raft", "proposed -> in the leader's log (Raft thread)", "A_prop", "L_add"),
    ("to_follower", "in the leader's log -> appended by the follower", "L_add", "F_recv"),
    ("follower_wait", "appended -> the follower's flush starts", "F_recv", "F_flush"),
    ("follower_fsync", "the follower's fdatasync", "F_flush", "F_synced"),
    ("follower_answer", "flushed -> the follower's answer sent", "F_synced", "F_ack"),
    ("ack_back", "the answer read by the leader", "F_ack", "L_ack"),
    ("apply", "acknowledged -> committed and applied on the leader", "L_ack", "apply1"),
    ("to_loop", "applied -> the answer on the event loop", "apply1", "H_answered"),
    ("answer", "handler: answers to protobuf", "H_answered", "H_end"),
    ("back", "the handler returns -> the client has the reply", "H_end", "S_reply"),
)
"""(key, what it is, from event, to event): consecutive, so they add up to the whole call. The
follower is the one whose answer made the quorum (the first that covers the entry)."""

KINDS = {"unary": "unary RegisterWait calls, one at a time (figure 1)", "batch": "WriteBatch calls (figure 2)"}
"""A joined call's kind -> its table's title: ``H_start``'s n is ``unary``, or a WriteBatch's item
count; a joined call's ``unary`` is 1.0 or 0.0."""


def _read(directory: Path) -> dict[str, list[list[str]]]:
    return {
        path.name: [line.split() for line in path.read_text().splitlines()]
        for path in sorted(directory.glob("tl-*.txt"))
    }


def _first_after(times: list[tuple[float, int]], at: float, index: int) -> tuple[float, int] | None:
    """The first (time, index) at or after ``at`` whose index covers ``index`` (is at least it)."""
    for k in range(bisect.bisect_left(times, (at, -1)), len(times)):
        if times[k][1] >= index:
            return times[k]
    return None


class _RaftEvents:
    """One node's Raft-thread events: appends, acknowledgments (by follower), applies; and, as a
    follower, what it appended and answered."""

    def __init__(self, rows: list[list[str]]) -> None:
        self.adds = sorted((float(r[0]), int(r[2])) for r in rows if r[1] == "L_add")
        self.acks = sorted((float(r[0]), int(r[2]), r[3]) for r in rows if r[1] == "L_ack" and r[2].isdigit())
        self.applied: dict[int, float] = {}
        for r in rows:
            if r[1] == "apply1":
                self.applied.setdefault(int(r[2]), float(r[0]))
        self.received = sorted((float(r[0]), int(r[2])) for r in rows if r[1] == "F_recv")
        self.answered = sorted((float(r[0]), int(r[2])) for r in rows if r[1] == "F_ack")
        self.flushes = sorted((float(r[0]), int(r[2])) for r in rows if r[1] == "F_flush")
        self.synced = sorted((float(r[0]), int(r[2])) for r in rows if r[1] == "F_synced")
        self.address = next((r[3] for r in rows if r[1] in ("F_recv", "F_ack") and len(r) > 3), None)
        self.add_times = [a[0] for a in self.adds]
        self.ack_times = [a[0] for a in self.acks]

    def follow(self, ev: dict[str, float], followers: dict[str, _RaftEvents]) -> bool:
        """Add the entry's append, its first covering acknowledgment (and that follower's own
        append, flush and answer) and its apply, after ``ev["A_prop"]``."""
        i = bisect.bisect_left(self.add_times, ev["A_prop"])
        if i == len(self.adds):
            return False
        ev["L_add"], index = self.adds[i]
        j = bisect.bisect_left(self.ack_times, ev["L_add"])
        while j < len(self.acks) and self.acks[j][1] <= index:
            j += 1
        if j == len(self.acks) or index not in self.applied:
            return False
        ev["L_ack"], _, follower = self.acks[j]
        ev["apply1"] = self.applied[index]
        there = followers.get(follower)
        got = None if there is None else _first_after(there.received, ev["L_add"], index)
        if there is None or got is None:
            return False
        ev["F_recv"] = got[0]
        flush = _first_after(there.flushes, ev["F_recv"], index + 1)  # next index past the entry
        synced = None if flush is None else _first_after(there.synced, flush[0], index)
        answer = _first_after(there.answered, ev["F_recv"], index + 1)
        if flush is None or synced is None or answer is None:
            return False
        ev["F_flush"], ev["F_synced"], ev["F_ack"] = flush[0], synced[0], answer[0]
        return True


_CALL_EVENTS = ("S_send", "S_reply", "H_start", "H_submit", "H_answered", "H_end", "A_prop")


def join(directory: Path) -> dict[str, dict[str, float]]:
    """Each call (by its first request id) that every stage's events were found for: event ->
    time, and ``unary`` (:data:`KINDS`). The Raft events are those of the node whose gateway took
    the call, and of the follower that answered."""
    files = _read(directory)
    calls: dict[str, dict[str, float]] = {}
    node_of: dict[str, str] = {}
    for name, rows in files.items():
        for t, kind, key, *n in rows:
            if kind in _CALL_EVENTS and key != "-":
                calls.setdefault(key, {})[kind] = float(t)
                if kind == "H_start":
                    node_of[key] = name
                    calls[key]["unary"] = float(n == ["unary"])
    events = {name: _RaftEvents(rows) for name, rows in files.items()}
    followers = {e.address: e for e in events.values() if e.address is not None}
    whole: dict[str, dict[str, float]] = {}
    for rid, ev in calls.items():
        if "A_prop" not in ev or rid not in node_of or not events[node_of[rid]].follow(ev, followers):
            continue
        if all(a in ev and b in ev and ev[a] <= ev[b] for _, _, a, b in STAGES):
            whole[rid] = ev
    return whole


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def report(directory: Path) -> list[str]:
    """Markdown lines: for each kind of call joined, each stage, p50 / p90 / mean in ms and its
    share of the mean call."""
    joined = join(directory)
    if not joined:
        return [f"- timeline: no call could be joined from {directory}"]
    lines: list[str] = []
    for kind, title in KINDS.items():
        calls = [ev for ev in joined.values() if ev["unary"] == (kind == "unary")]
        if not calls:
            continue
        whole = [ev["S_reply"] - ev["S_send"] for ev in calls]
        total = statistics.mean(whole)
        lines += [
            f"- timeline of {len(calls)} {title} (`--timeline`, files in {directory}): ms per call",
            "",
            "| stage | p50 | p90 | mean | share of the mean call |",
            "|---|---:|---:|---:|---:|",
        ]

        def row(what: str, xs: list[float], total: float = total) -> str:
            mean = statistics.mean(xs)
            ms = " | ".join(f"{x * 1e3:.2f}" for x in (_pct(xs, 0.5), _pct(xs, 0.9), mean))
            return f"| {what} | {ms} | {mean / total:.0%} |"

        for _, what, a, b in STAGES:
            lines.append(row(what, [ev[b] - ev[a] for ev in calls]))
        lines.append(row("**the whole call**", whole))
        lines.append("")
    return lines
