"""The truncation guard: a follower never deletes entries that match the leader's.

**Truncation of applied entries** (:meth:`WaitgraphSyncObj._guard_message`). A follower
that receives ``append_entries`` whose ``prevLogIdx`` is before the end of its log deletes every
entry after ``prevLogIdx`` even when they match (Raft only deletes on a conflict). With
``appendEntriesUseBatch=False`` the leader sends one message per command, and a success reply for
an older message moves its ``nextIndex`` *back* (``next_node_idx`` handler), so under a burst it
re-sends ranges the follower already has: the follower logs "truncating already-applied log
entries" and drops entries it has applied (and acknowledged: a leader may count them as
committed). If a log compaction finishes right after such a truncation, ``__deleteEntriesTo`` cuts
past the end of the shortened log and leaves it *empty*: every later message raises
``IndexError`` and the follower is wedged. Both were reproduced (``tests/cluster/test_raft_guard.py``
replays the exact message sequence; a 50,000-command burst on 3 raw pysyncobj processes logs the
truncation in most runs). The guard rewrites such messages before pysyncobj sees them so that
matching entries are never deleted, and keeps the leader's ``nextIndex`` from moving back on a
success reply. It is installed by overriding the private ``__onMessageReceived``
(``WaitgraphSyncObj._SyncObj__onMessageReceived``), which wraps the original.

pysyncobj names: wraps ``_SyncObj__onMessageReceived`` (the override itself is
``WaitgraphSyncObj._SyncObj__onMessageReceived``, which calls :meth:`GuardMixin._guard_message`);
reads ``_SyncObj__raftLog`` (entries as ``(command, index, term)``), ``_SyncObj__raftNextIndex`` (written
back), ``raftCurrentTerm``, ``raftLastApplied``, ``_isLeader``; assumes the ``append_entries`` and
``next_node_idx`` message shapes of pysyncobj 0.3.17. Checklist: ``_pysyncobj.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from waitgraph.node.raft._pysyncobj import SyncObj

logger = logging.getLogger("waitgraph.node.raft")


class GuardMixin(SyncObj):  # type: ignore[misc]
    """The truncation guard of :class:`~waitgraph.node.raft._syncobj.WaitgraphSyncObj` (module docstring)."""

    counters: dict[str, int]

    def _guard_message(self, handle: Callable[[Any, Any], None], node: Any, message: Any) -> None:
        """Pre-process one Raft message, then hand it to pysyncobj's ``__onMessageReceived``."""
        keep_next_index = None
        try:
            if type(message) is dict:
                kind = message.get("type")
                if kind == "append_entries":
                    message = self._guard_append_entries(message)
                    if message is None:
                        return
                elif kind == "next_node_idx" and self._isLeader():
                    acked = message.get("success") and not message.get("reset")
                    keep_next_index = self._SyncObj__raftNextIndex.get(node) if acked else None
        except Exception:
            self.counters["guard_errors"] += 1
            logger.exception("truncation guard failed; passing the message through unchanged")
        handle(node, message)
        if keep_next_index is not None:
            next_index = self._SyncObj__raftNextIndex
            if next_index.get(node, keep_next_index) < keep_next_index:
                # A success reply acknowledges an older message; entries after it are already on
                # the wire. Moving nextIndex back would re-send them and make the follower
                # truncate; a real gap shows up as a ``reset`` reply, which still moves it back.
                next_index[node] = keep_next_index
                self.counters["next_index_kept"] += 1

    def _guard_append_entries(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Make an ``append_entries`` never delete entries that match the leader's.

        pysyncobj's follower deletes everything after ``prevLogIdx`` whenever its log is longer.
        Here the leading entries of the message that the log already has (same index and term)
        are dropped from it, and ``prevLogIdx`` is moved to the last entry known to match the
        leader's log, so pysyncobj deletes only (a) entries that really conflict, or (b) extra
        entries of an older term that are not committed. Known to match: entries up to the last
        matching one of the message (Log Matching), all of them if the log ends in the leader's
        term (only that leader writes entries of its term), and every applied entry (committed,
        so in every later leader's log). A conflict at or below the last applied entry would be a
        Raft safety violation; the message is refused (the leader retries) rather than letting
        the replica silently diverge.
        """
        if "prevLogIdx" not in message or "transmission" in message or message.get("term", -1) < self.raftCurrentTerm:
            return message
        log = self._SyncObj__raftLog
        if len(log) == 0:
            return message
        first_idx = log[0][1]
        last_idx = log[-1][1]
        prev_idx = message["prevLogIdx"]
        if prev_idx is None or not first_idx <= prev_idx <= last_idx:
            return message  # pysyncobj answers with a reset; nothing is deleted
        if log[prev_idx - first_idx][2] != message.get("prevLogTerm"):
            return message
        entries = message.get("entries") or []
        matched = 0
        for entry in entries:
            idx = entry[1]
            if idx > last_idx or log[idx - first_idx][2] != entry[2]:
                break
            matched += 1
        applied = self.raftLastApplied
        if matched < len(entries):
            conflict_idx = entries[matched][1]
            if conflict_idx <= last_idx and conflict_idx <= applied:
                self.counters["guard_refusals"] += 1
                logger.critical(
                    "refusing append_entries that would replace applied entry %d (last applied %d, term %s)",
                    conflict_idx,
                    applied,
                    message.get("term"),
                )
                return None
            if matched == 0:
                return message
            keep_idx = entries[matched - 1][1]
            rest = entries[matched:]
        else:
            # Every entry of the message is already here (pysyncobj would still delete and re-add
            # them, and everything after them).
            keep_idx = entries[-1][1] if entries else prev_idx
            if keep_idx < last_idx:
                ours = log[-1][2] == message.get("term")
                keep_idx = last_idx if ours else max(keep_idx, min(applied, last_idx))
            rest = []
        if keep_idx == prev_idx and len(rest) == len(entries):
            return message
        self.counters["guard_rewrites"] += 1
        guarded = dict(message)
        guarded["prevLogIdx"] = keep_idx
        guarded["prevLogTerm"] = log[keep_idx - first_idx][2]
        guarded["entries"] = rest
        return guarded
