"""The history store: what retired from the live state, kept on each node in SQLite.

Rules kept here:
- Written from the retirement effects alone (statemachine/retire.py: ``ExecutionRetired``,
  ``RunRetired``, ``DecisionRetired``, ...), by :meth:`HistoryStore.applied`, the applied-effects
  hook of this node's machine (cluster/node/events.py ``EventfulMachine``). Every replica applies
  the same passes, so every node writes the same records into its own store; a node that was down
  writes them when it catches up by the log. A node that catches up by a snapshot never sees the
  passes the snapshot covers: its store lacks those records (the others still have them).
- Never part of a snapshot or of the replicated state: restore time depends on the live state only.
- Idempotent: a record is (kind, key, retired at); a restarted node re-applies its journal after
  the last snapshot and writes the same rows again, which are ignored.
- Written synchronously inside the apply that retired them (one transaction per pass, a few ms
  for a thousand rows): once the pass is applied here its records are on this node's disk.
- Bounded: rows older than ``max_age_s`` and, beyond ``max_bytes`` of record payload, the oldest
  rows go first. A failing store is logged and never fails the apply.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from waitgraph.statemachine import Envelope, Outcome
from waitgraph.statemachine.codec import effect_from_plain, effect_to_plain
from waitgraph.statemachine.commands import RetireSettled
from waitgraph.statemachine.effects import (
    RETIREMENT_EFFECTS,
    DecisionRetired,
    Effect,
    ExecutionRetired,
    ProposalRetired,
    RunRetired,
    SessionRetired,
    TargetRetired,
    TrajectoryRetired,
)
from waitgraph.statemachine.recovery_state import Decision
from waitgraph.statemachine.retire import decision_from_retired
from waitgraph.statemachine.state import State

logger = logging.getLogger("waitgraph.node.history")

FILE_NAME = "history.sqlite3"
DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000
PRUNE_TO = 0.9
"""A size prune deletes down to this share of ``max_bytes``, so it does not run on every pass."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    run_id TEXT,
    retired_at_ms INTEGER NOT NULL,
    written_at_s REAL NOT NULL,
    size INTEGER NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (kind, key, retired_at_ms)
);
CREATE TABLE IF NOT EXISTS names (
    name TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES records (seq) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS names_by_name ON names (name, seq);
CREATE INDEX IF NOT EXISTS names_by_seq ON names (seq);
CREATE INDEX IF NOT EXISTS records_by_age ON records (written_at_s);
"""


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    kind: str
    key: str
    run_id: str | None
    retired_at_ms: int
    body: str
    """The retirement effect as canonical JSON (``codec.effect_to_plain``)."""

    def effect(self) -> Effect:
        return effect_from_plain(json.loads(self.body))


def _key_and_names(fx: Effect) -> tuple[str, str | None, list[str], int]:
    """(key, run id, every id the record may be found by, retired at)."""
    match fx:
        case ExecutionRetired():
            return fx.execution_id, fx.run_id, [fx.execution_id, fx.run_id], fx.retired_at_ms
        case RunRetired():
            return fx.run_id, fx.run_id, [fx.run_id], fx.retired_at_ms
        case DecisionRetired():
            names = [fx.decision_id, fx.digest, *sorted(set(fx.score_execution_ids))]
            return fx.decision_id, None, names, fx.retired_at_ms
        case ProposalRetired():
            names = [fx.digest, *sorted(set(fx.member_ids))]
            return fx.digest, None, names + ([fx.decision_id] if fx.decision_id else []), fx.retired_at_ms
        case TrajectoryRetired():
            return fx.signature, None, [fx.signature], fx.retired_at_ms
        case SessionRetired():
            return fx.agent_id, None, [fx.agent_id], fx.retired_at_ms
        case TargetRetired():
            return fx.target_id, None, [fx.target_id], fx.retired_at_ms
    raise TypeError(f"{type(fx).__name__} is not a retirement effect")


class HistoryStore:
    """One node's store; safe to call from the apply thread and from readers at once."""

    def __init__(
        self,
        path: Path | str,
        max_bytes: int = 1024 * 1024 * 1024,
        max_age_s: float = 90 * 86_400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = str(path)
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        self._bytes = int(self._db.execute("SELECT COALESCE(SUM(size), 0) FROM records").fetchone()[0])
        self.failures = 0

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- writing (the apply thread) ----------------------------------------------------------------

    def applied(self, env: Envelope, out: Outcome, state: State) -> None:
        """The applied-effects hook: writes the records a retirement pass moved out."""
        if type(env.command) is not RetireSettled or out.duplicate:
            return
        try:
            self.record(fx for fx in out.effects if type(fx) in RETIREMENT_EFFECTS)
        except sqlite3.Error:
            self.failures += 1
            logger.exception("the history store could not record a retirement pass")

    def record(self, effects: Iterable[Effect]) -> int:
        """Write each retirement effect once; returns how many rows are new."""
        now = self.clock()
        rows = []
        for fx in effects:
            key, run_id, names, retired_at_ms = _key_and_names(fx)
            body = json.dumps(effect_to_plain(fx), sort_keys=True, separators=(",", ":"))
            rows.append((fx.KIND, key, run_id, retired_at_ms, now, len(body), body, names))
        if not rows:
            return 0
        added = 0
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            try:
                for kind, key, run_id, at, written, size, body, names in rows:
                    cur = db.execute(
                        "INSERT OR IGNORE INTO records (kind, key, run_id, retired_at_ms, written_at_s, size, body)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (kind, key, run_id, at, written, size, body),
                    )
                    if cur.rowcount:
                        added += 1
                        self._bytes += size
                        seq = cur.lastrowid
                        db.executemany("INSERT INTO names (name, seq) VALUES (?, ?)", [(n, seq) for n in names])
                self._prune_locked(now)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                self._bytes = int(db.execute("SELECT COALESCE(SUM(size), 0) FROM records").fetchone()[0])
                raise
        return added

    def _prune_locked(self, now: float) -> None:
        db = self._db
        cutoff = now - self.max_age_s
        freed = db.execute("SELECT COALESCE(SUM(size), 0) FROM records WHERE written_at_s < ?", (cutoff,)).fetchone()
        if freed[0]:
            db.execute("DELETE FROM records WHERE written_at_s < ?", (cutoff,))
            self._bytes -= int(freed[0])
        if self._bytes <= self.max_bytes:
            return
        # Oldest first (by insertion), down to PRUNE_TO of the bound.
        excess = self._bytes - int(self.max_bytes * PRUNE_TO)
        last, total = None, 0
        for seq, size in db.execute("SELECT seq, size FROM records ORDER BY seq"):
            last, total = seq, total + size
            if total >= excess:
                break
        if last is not None:
            db.execute("DELETE FROM records WHERE seq <= ?", (last,))
            self._bytes -= total

    # -- reading -------------------------------------------------------------------------------------

    def stats(self) -> tuple[int, int]:
        """(records, payload bytes) held now."""
        with self._lock:
            n = int(self._db.execute("SELECT COUNT(*) FROM records").fetchone()[0])
            return n, self._bytes

    def find(self, name: str = "", limit: int = DEFAULT_LIMIT, kind: str = "") -> list[Record]:
        """Records found by an id (a run, an execution, a decision, a digest ...), or the newest of
        all without one; newest first."""
        limit = max(1, min(limit or DEFAULT_LIMIT, MAX_LIMIT))
        where, args = [], []
        if name:
            where.append("seq IN (SELECT seq FROM names WHERE name = ?)")
            args.append(name)
        if kind:
            where.append("kind = ?")
            args.append(kind)
        sql = "SELECT seq, kind, key, run_id, retired_at_ms, body FROM records"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC LIMIT ?"
        with self._lock:
            rows = self._db.execute(sql, (*args, limit)).fetchall()
        return [Record(*row) for row in rows]

    def decisions(self, decision_id: str = "", digest: str = "") -> list[tuple[Decision, int]]:
        """Retired decisions by id, or every one recorded for a digest (oldest first), each with
        when it retired."""
        found = self.find(decision_id or digest, MAX_LIMIT, kind=DecisionRetired.KIND)
        out = []
        for rec in reversed(found):
            fx = rec.effect()
            assert isinstance(fx, DecisionRetired)
            if (decision_id and fx.decision_id == decision_id) or (digest and fx.digest == digest):
                out.append((decision_from_retired(fx), fx.retired_at_ms))
        return out


def plain(record: Record) -> dict[str, Any]:
    """A record as the JSON export writes it."""
    return {
        "kind": record.kind,
        "key": record.key,
        "run_id": record.run_id,
        "retired_at_ms": record.retired_at_ms,
        "record": json.loads(record.body),
    }
