"""The replicated records of the recovery protocol (docs/design.md §4) and their snapshot.

Rules kept here:
- The epoch lives here, in the replicated state, never in an agent: every rollback advances it
  by a committed log entry before anything is released (the second seed's first condition).
- Proposals, decisions and the livelock trajectory are kept in log order and bounded; eviction
  drops the oldest closed entries first, so every replica evicts the same ones.
- No logic lives here beyond bookkeeping; :mod:`waitgraph.statemachine.recovery` decides what happens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

POLICY_VERSION = "victim-policy.v1"
MAX_PROPOSALS = 10_000
MAX_DECISIONS = 10_000
MAX_SIGNATURES = 10_000


class RolloutMode(StrEnum):
    """How far recovery may act (the first seed's rollout path)."""

    SHADOW = "shadow"
    """Detect, propose, vote and record the decision it would make; never cancel or release."""
    AUTO_SAFE = "auto-safe"
    """Act only when every run in the cycle is marked side-effect-free."""
    AUTO = "auto"


MODE_ORDER = (RolloutMode.SHADOW, RolloutMode.AUTO_SAFE, RolloutMode.AUTO)
"""From most to least conservative; a cycle across runs uses the most conservative mode."""


class ProposalStatus(StrEnum):
    OPEN = "OPEN"
    COMMITTED = "COMMITTED"
    RETRACTED = "RETRACTED"
    """The second read found the deadlock gone or changed: a false positive."""
    REJECTED = "REJECTED"
    """Enough voters said no that the quorum can no longer be reached."""


class DecisionKind(StrEnum):
    VICTIM = "VICTIM"
    """Speculative rollback of one victim chosen by the policy."""
    TIE_BREAK = "TIE_BREAK"
    """Livelock: the lowest id wins, every other member yields or is rolled back."""
    SHADOW = "SHADOW"
    """What would have been done; nothing was cancelled or released."""
    RECONCILIATION = "RECONCILIATION"
    """An UNKNOWN non-compensatable side effect: runs frozen, a human decides."""
    ESCALATION = "ESCALATION"
    """The recovery would roll back more executions than the configuration allows."""
    REORDER = "REORDER"
    """A soft cycle broken by reordering grant queues (statemachine/reorder.py): no victim."""
    REASSIGN = "REASSIGN"
    """An approval provided from inside the cycle moved to an independent approver; no one is
    cancelled (statemachine/reassign.py)."""


@dataclass(slots=True)
class RecoveryConfig:
    voters: tuple[str, ...] = ()
    """Who may vote: cluster nodes, operators and designated agent sessions (actor ids)."""
    quorum: int = 1
    max_rollback: int = 0
    """The most executions one recovery may roll back at once (victims and yielders together)."""
    confirmation_window_ms: int = 500
    livelock_repeats: int = 2
    """K: more than K recoveries of one signature within W logical ms is a livelock."""
    livelock_window_ms: int = 60_000
    """W."""


@dataclass(slots=True)
class Proposal:
    digest: str
    signature: str
    members: list[tuple[str, int]]
    edges: list[tuple[str, int]]
    observed_index: int
    proposer: str
    proposed_at_ms: int
    epoch_proposed: int
    status: ProposalStatus = ProposalStatus.OPEN
    approvals: list[str] = field(default_factory=list)
    rejections: list[str] = field(default_factory=list)
    decision_id: str | None = None
    closed_at_ms: int | None = None
    close_reason: str = ""
    votes: list[tuple[str, bool, int]] = field(default_factory=list)
    """(voter, approve, at_ms) of every counted vote, in log order: who voted, and when."""


@dataclass(slots=True)
class Score:
    """One candidate's victim-policy inputs; ``key()`` orders them, the smallest is the victim."""

    execution_id: str
    generation: int
    external_side_effects: bool
    checkpoint: bool
    priority: int
    cost_consumed: int
    unique_evidence: bool

    def key(self) -> tuple[bool, bool, int, int, bool, str]:
        # Prefer (smaller first): no external side effects, a checkpoint, lower priority, less
        # cost, no unique evidence; the lowest id breaks the last tie.
        return (
            self.external_side_effects,
            not self.checkpoint,
            self.priority,
            self.cost_consumed,
            self.unique_evidence,
            self.execution_id,
        )

    def to_plain(self) -> list[Any]:
        return [
            self.execution_id,
            self.generation,
            self.external_side_effects,
            self.checkpoint,
            self.priority,
            self.cost_consumed,
            self.unique_evidence,
        ]


@dataclass(slots=True)
class CycleWait:
    """One wait of the cycle as it stood when the decision was made (the edge closes with the
    rollback, so its reason and age would be lost otherwise)."""

    waiter_id: str
    waiter_generation: int
    target_id: str
    target_generation: int
    edge_version: int
    reason: str
    registered_at_ms: int
    satisfiers: tuple[str, ...]
    """The members that satisfy it (holder, producer, provider or the execution waited on), sorted."""

    def to_plain(self) -> list[Any]:
        return [
            self.waiter_id,
            self.waiter_generation,
            self.target_id,
            self.target_generation,
            self.edge_version,
            self.reason,
            self.registered_at_ms,
            list(self.satisfiers),
        ]

    @classmethod
    def from_plain(cls, row: list[Any]) -> CycleWait:
        waiter, wgen, target, tgen, version, reason, at, sats = row
        return cls(waiter, wgen, target, tgen, version, reason, at, tuple(sats))


@dataclass(slots=True)
class Decision:
    decision_id: str
    digest: str
    signature: str
    policy_version: str
    kind: DecisionKind
    mode: RolloutMode
    reason_code: str
    epoch: int | None
    """The epoch this decision committed; None when nothing was rolled back."""
    winner_id: str | None
    """The victim (VICTIM, SHADOW) or the tie-break winner (TIE_BREAK)."""
    winner_generation: int
    scores: list[Score]
    roles: list[tuple[str, str]]
    """(execution id, role) for every member: victim, winner, yielded, rolled_back, kept."""
    released: list[tuple[str, str]]
    """(target id, execution id) released by this decision, in release order (all at ``at_ms``,
    in the same apply, after the epoch commit)."""
    at_ms: int
    epoch_before: int = 0
    """The global epoch when the decision was made; ``epoch`` is the one it committed (if any)."""
    proposer: str = ""
    proposed_at_ms: int = 0
    votes: list[tuple[str, bool, int]] = field(default_factory=list)
    """The proposal's votes (voter, approve, at_ms) when it was decided: kept with the decision,
    which outlives the proposal record."""
    waits: list[CycleWait] = field(default_factory=list)
    """The cycle's waits at the decision, in the candidate's edge order."""
    remedies: list[tuple[str, str, str]] = field(default_factory=list)
    """(remedy, outcome, reason) for each remedy in the order they are considered (prevent,
    reorder, reassign, victim: ``reassign.REMEDIES``); empty on decisions made before it existed."""
    reassigned: list[Reassignment] = field(default_factory=list)
    """The approvals moved (REASSIGN) or that would have been moved (SHADOW), in target id order."""
    reorders: list[tuple[str, list[str], list[str]]] = field(default_factory=list)
    """REORDER: (target id, queue before, queue after) of each queue it reordered."""


@dataclass(frozen=True, slots=True)
class Reassignment:
    """One approval's PROVIDED_BY moved from a provider inside the cycle to the independent approver."""

    approval_id: str
    from_id: str
    from_generation: int
    to_id: str
    to_generation: int
    """0 for a ``human:`` approver (outside satisfiers have no generation)."""

    def to_plain(self) -> list[Any]:
        return [self.approval_id, self.from_id, self.from_generation, self.to_id, self.to_generation]


@dataclass(slots=True)
class Trajectory:
    """The livelock guard's memory of one cycle signature (the epoch is not part of it)."""

    observations: list[tuple[int, int]] = field(default_factory=list)
    """(epoch when observed, at_ms) of recent proposals with this signature."""
    recoveries: list[tuple[int, int]] = field(default_factory=list)
    """(epoch committed, at_ms) of recent committed rollbacks of this signature."""
    observed_total: int = 0
    """Proposals with this signature ever (``observations`` keeps only the guard's window)."""
    recovered_total: int = 0
    """Committed rollbacks of this signature ever."""
    first_seen: tuple[int, int] | None = None
    """(epoch, at_ms) of the first proposal with this signature."""

    def observe(self, epoch: int, at_ms: int, keep: int) -> None:
        """A proposal saw this signature at ``epoch``; the guard keeps the last ``keep``."""
        self.observations = [*self.observations, (epoch, at_ms)][-keep:]
        self.observed_total += 1
        if self.first_seen is None:
            self.first_seen = (epoch, at_ms)

    def recover(self, epoch: int, at_ms: int, keep: int) -> None:
        """A rollback of this signature committed ``epoch``; the guard keeps the last ``keep``."""
        self.recoveries = [*self.recoveries, (epoch, at_ms)][-keep:]
        self.recovered_total += 1


class RecoveryBook:
    """Everything the recovery protocol keeps in the replicated state (``State.recovery``)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.config = RecoveryConfig()
        self.mode = RolloutMode.SHADOW
        self.run_modes: dict[str, RolloutMode] = {}
        self.side_effect_free: set[str] = set()
        self.approver: str | None = None
        """The cluster's independent approver (``human:`` or ``exec:``), or None."""
        self.run_approvers: dict[str, str] = {}
        """run id -> its independent approver; overrides the cluster's."""
        self.proposals: dict[str, Proposal] = {}
        """digest -> proposal, in log order."""
        self.decisions: dict[str, Decision] = {}
        """decision id -> decision, in log order."""
        self.next_decision = 1
        self.trajectory: dict[str, Trajectory] = {}
        """signature -> trajectory, in order of first sight."""
        self.fence: dict[str, int] = {}
        """execution id -> epoch it was rolled back at; it may not acquire presenting an older one."""
        # -- derived --
        self.open_members: dict[str, str] = {}
        """execution id -> digest of the open proposal it belongs to."""

    def open_proposal(self, p: Proposal) -> None:
        self.proposals[p.digest] = p
        for m, _ in p.members:
            self.open_members[m] = p.digest
        _trim(self.proposals, MAX_PROPOSALS, lambda q: q.status is not ProposalStatus.OPEN)

    def close_proposal(self, p: Proposal, status: ProposalStatus, at_ms: int, reason: str) -> None:
        p.status, p.closed_at_ms, p.close_reason = status, at_ms, reason
        for m, _ in p.members:
            if self.open_members.get(m) == p.digest:
                del self.open_members[m]

    def add_decision(self, d: Decision) -> None:
        self.decisions[d.decision_id] = d
        _trim(self.decisions, MAX_DECISIONS, lambda _: True)

    def trajectory_of(self, signature: str) -> Trajectory:
        t = self.trajectory.get(signature)
        if t is None:
            t = self.trajectory[signature] = Trajectory()
            _trim(self.trajectory, MAX_SIGNATURES, lambda _: True)
        return t

    def approver_for(self, run_id: str) -> str | None:
        return self.run_approvers.get(run_id, self.approver)

    def mode_for(self, run_ids: list[str]) -> RolloutMode:
        modes = [self.run_modes.get(r, self.mode) for r in run_ids] or [self.mode]
        return min(modes, key=MODE_ORDER.index)

    # -- snapshot ------------------------------------------------------------------------------

    def to_plain(self) -> dict[str, Any]:
        c = self.config
        return {
            "config": [
                list(c.voters),
                c.quorum,
                c.max_rollback,
                c.confirmation_window_ms,
                c.livelock_repeats,
                c.livelock_window_ms,
            ],
            "decisions": [
                [
                    d.decision_id,
                    d.digest,
                    d.signature,
                    d.policy_version,
                    d.kind,
                    d.mode,
                    d.reason_code,
                    d.epoch,
                    d.winner_id,
                    d.winner_generation,
                    [s.to_plain() for s in d.scores],
                    [list(r) for r in d.roles],
                    [list(r) for r in d.released],
                    d.at_ms,
                    d.epoch_before,
                    d.proposer,
                    d.proposed_at_ms,
                    [list(v) for v in d.votes],
                    [w.to_plain() for w in d.waits],
                    [list(r) for r in d.remedies],
                    [r.to_plain() for r in d.reassigned],
                    [[t, list(b), list(a)] for t, b, a in d.reorders],
                ]
                for d in self.decisions.values()
            ],
            "approvers": [self.approver, sorted(self.run_approvers.items())],
            "epoch": self.epoch,
            "fence": sorted(self.fence.items()),
            "mode": self.mode,
            "next_decision": self.next_decision,
            "proposals": [
                [
                    p.digest,
                    p.signature,
                    [list(m) for m in p.members],
                    [list(e) for e in p.edges],
                    p.observed_index,
                    p.proposer,
                    p.proposed_at_ms,
                    p.epoch_proposed,
                    p.status,
                    p.approvals,
                    p.rejections,
                    p.decision_id,
                    p.closed_at_ms,
                    p.close_reason,
                    [list(v) for v in p.votes],
                ]
                for p in self.proposals.values()
            ],
            "run_modes": sorted(self.run_modes.items()),
            "side_effect_free": sorted(self.side_effect_free),
            "trajectory": [
                [
                    sig,
                    [list(o) for o in t.observations],
                    [list(r) for r in t.recoveries],
                    t.observed_total,
                    t.recovered_total,
                    list(t.first_seen) if t.first_seen is not None else None,
                ]
                for sig, t in self.trajectory.items()
            ],
        }

    @classmethod
    def from_plain(cls, raw: dict[str, Any], approvers: bool = True) -> RecoveryBook:
        """Rebuild from :meth:`to_plain`; malformed input raises ValueError, TypeError or KeyError.

        ``approvers``: the snapshot has the approver settings (state v5 on); older ones had none."""
        book = cls()
        if approvers:
            cluster_approver, run_approvers = raw["approvers"]
            book.approver = cluster_approver
            book.run_approvers = {r: a for r, a in run_approvers}
        voters, quorum, max_rb, window, k, w = raw["config"]
        book.config = RecoveryConfig(tuple(voters), quorum, max_rb, window, k, w)
        book.epoch = raw["epoch"]
        book.mode = RolloutMode(raw["mode"])
        book.next_decision = raw["next_decision"]
        book.fence = {e: ep for e, ep in raw["fence"]}
        book.run_modes = {r: RolloutMode(m) for r, m in raw["run_modes"]}
        book.side_effect_free = set(raw["side_effect_free"])
        # Rows written before the explanation fields existed are shorter: the tail defaults, and
        # the epoch before is derived (a rollback advances it by one; otherwise the proposal's).
        old_rows: list[str] = []
        for row in raw["decisions"]:
            (did, digest, sig, pv, kind, mode, reason, epoch, winner, wgen, scores, roles, released, at) = row[:14]
            defaults: list[Any] = [0, "", 0, [], [], [], [], []]
            tail = [*row[14:], *defaults[len(row) - 14 :]]
            before, proposer, proposed_at, votes, waits, remedies, moved, reorders = tail
            if len(row) == 14:
                before = epoch - 1 if epoch is not None else 0
                if epoch is None:
                    old_rows.append(did)
            book.decisions[did] = Decision(
                did,
                digest,
                sig,
                pv,
                DecisionKind(kind),
                RolloutMode(mode),
                reason,
                epoch,
                winner,
                wgen,
                [Score(*s) for s in scores],
                [(a, b) for a, b in roles],
                [(a, b) for a, b in released],
                at,
                before,
                proposer,
                proposed_at,
                [(v, bool(ok), t) for v, ok, t in votes],
                [CycleWait.from_plain(w) for w in waits],
                [(r, o, why) for r, o, why in remedies],
                [Reassignment(a, f, fg, t, tg) for a, f, fg, t, tg in moved],
                [(t, list(b), list(a)) for t, b, a in reorders],
            )
        for row in raw["proposals"]:
            (digest, sig, members, edges, idx, proposer, at, ep, status, yes, no, did, closed, why) = row[:14]
            log = row[14] if len(row) > 14 else []
            p = Proposal(
                digest,
                sig,
                [(m, g) for m, g in members],
                [(e, v) for e, v in edges],
                idx,
                proposer,
                at,
                ep,
                ProposalStatus(status),
                list(yes),
                list(no),
                did,
                closed,
                why,
                [(v, bool(ok), t) for v, ok, t in log],
            )
            book.proposals[digest] = p
            if p.status is ProposalStatus.OPEN:
                for m, _ in p.members:
                    book.open_members[m] = digest
        for did in old_rows:
            d = book.decisions[did]
            if d.digest in book.proposals:
                d.epoch_before = book.proposals[d.digest].epoch_proposed - 1
        for row in raw["trajectory"]:
            sig, obs, recs = row[:3]
            observed, recovered, first = [*row[3:], len(obs), len(recs), None][:3]
            book.trajectory[sig] = Trajectory(
                [(a, b) for a, b in obs],
                [(a, b) for a, b in recs],
                observed,
                recovered,
                (first[0], first[1]) if first is not None else None,
            )
        return book


def _trim(table: dict[str, Any], limit: int, evictable: Any) -> None:
    """Drop the oldest evictable entries beyond ``limit`` (log order, so every replica agrees)."""
    if len(table) <= limit:
        return
    for key in [k for k, v in table.items() if evictable(v)][: len(table) - limit]:
        del table[key]
