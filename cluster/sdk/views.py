"""Typed reads: the OperatorService answers as Python values with the core's enums.

Rules kept here:
- One conversion per answer, from its ``waitgraph.v1`` message to a frozen dataclass; nobody above
  this module touches protobuf for these reads. Enum fields are the core's ``StrEnum`` members
  (:class:`~waitgraph.statemachine.recovery_state.DecisionKind`, ...), which compare equal to
  their text (``decision.kind == "VICTIM"``); a number this SDK does not know (a newer server's)
  becomes None rather than an error.
- Every read says whether it was ``stale`` (served by a replica without a leader's barrier) and
  at which ``applied_index``, like the RPCs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from waitgraph.proto.v1 import operator_pb2
from waitgraph.statemachine.enums import CancelState, ExecStatus
from waitgraph.statemachine.recovery_state import DecisionKind, ProposalStatus, RolloutMode
from waitgraph.wire import convert

from .errors import Decision, Score

__all__ = [
    "Convergence",
    "Cycle",
    "Cycles",
    "DecisionSummary",
    "EpochAt",
    "Explanation",
    "Member",
    "PendingExport",
    "Proposal",
    "Release",
    "SignatureHistory",
    "Vote",
    "convergence_from_proto",
    "cycles_from_proto",
    "decision_from_view",
    "explanation_from_proto",
    "pending_from_proto",
    "trajectory_from_view",
]


@dataclass(frozen=True, slots=True)
class Member:
    execution_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class Vote:
    voter: str
    approve: bool
    at_ms: int


@dataclass(frozen=True, slots=True)
class Release:
    """What a decision released, after its epoch commit."""

    target_id: str
    execution_id: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class Cycle:
    """A candidate deadlock as the replica's full detection pass sees it now."""

    digest: str
    signature: str
    members: tuple[Member, ...]
    edges: tuple[tuple[str, int], ...]
    """(edge id, edge version) of every wait of the cycle."""
    proposal_status: ProposalStatus | None
    """The recovery proposal's status for this digest (None: not proposed yet)."""


@dataclass(frozen=True, slots=True)
class Proposal:
    digest: str
    signature: str
    members: tuple[Member, ...]
    status: ProposalStatus | None
    epoch_proposed: int
    proposer: str
    approvals: tuple[str, ...]
    rejections: tuple[str, ...]
    votes: tuple[Vote, ...]
    decision_id: str | None
    close_reason: str


@dataclass(frozen=True, slots=True)
class Cycles:
    cycles: tuple[Cycle, ...]
    proposals: tuple[Proposal, ...]
    epoch: int
    stale: bool
    applied_index: int


@dataclass(frozen=True, slots=True)
class EpochAt:
    epoch: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class DecisionSummary:
    decision_id: str
    kind: DecisionKind | None
    reason_code: str
    epoch_before: int
    epoch: int | None
    winner_id: str | None
    at_ms: int


@dataclass(frozen=True, slots=True)
class SignatureHistory:
    """The livelock guard's memory of one cycle signature: when it was seen (the epoch of each
    proposal) and rolled back (the epoch each recovery committed), the decisions made for it, and
    ``guard``: non-empty when a recovery of it now would be a deterministic tie-break, and why
    (``same_signature_without_epoch_advance`` is the livelock fingerprint)."""

    signature: str
    known: bool
    observations: tuple[EpochAt, ...]
    recoveries: tuple[EpochAt, ...]
    observed_total: int
    recovered_total: int
    first_seen: EpochAt | None
    decisions: tuple[DecisionSummary, ...]
    guard: str
    epoch: int = 0
    stale: bool = False


@dataclass(frozen=True, slots=True)
class Explanation:
    """ExplainDecision: the decisions (with scores, roles, votes and releases) and the trajectory of
    each of their signatures."""

    decisions: tuple[Decision, ...]
    trajectories: tuple[SignatureHistory, ...]
    epoch: int
    stale: bool


@dataclass(frozen=True, slots=True)
class Convergence:
    """How far a run's cancellation (or every open one) has converged."""

    run_id: str
    cancel_generation: int
    cancel_state: CancelState | None
    executions: int
    settled: int
    unsettled: dict[ExecStatus | str, int]
    """Unsettled executions by status (a status this SDK does not know stays text)."""
    open_cancellations: int
    pending_acks: int
    quarantined: tuple[str, ...]
    admission_frozen: bool
    admission_reason: str
    converged: bool
    """Nothing the cancellation asked to stop is still unsettled (CANCELLED_STABLE once no lease
    or permit is held either: see ``cancel_state``)."""
    stale: bool


@dataclass(frozen=True, slots=True)
class PendingExport:
    """ExportPending: pending edges, holdings, claims and open cancellations, one versioned document
    (wait-edge.v1 field names), for a schema rollback."""

    format: str
    version: int
    document: dict[str, Any] = field(repr=False)
    stale: bool = False

    @property
    def edges(self) -> list[dict[str, Any]]:
        return list(self.document.get("edges", ()))

    @property
    def holdings(self) -> list[dict[str, Any]]:
        return list(self.document.get("holdings", ()))

    @property
    def claims(self) -> list[dict[str, Any]]:
        return list(self.document.get("claims", ()))

    @property
    def cancellations(self) -> list[dict[str, Any]]:
        return list(self.document.get("cancellations", ()))


# -- conversions ------------------------------------------------------------------------------------


def _members(members: Any) -> tuple[Member, ...]:
    return tuple(Member(m.execution_id, m.generation) for m in members)


def _votes(votes: Any) -> tuple[Vote, ...]:
    return tuple(Vote(v.voter, v.approve, v.at_ms) for v in votes)


def _epoch_at(point: operator_pb2.EpochAt) -> EpochAt:
    return EpochAt(point.epoch, point.at_ms)


def cycles_from_proto(reply: operator_pb2.CyclesResponse) -> Cycles:
    cycles = tuple(
        Cycle(
            c.digest,
            c.signature,
            _members(c.members),
            tuple((e.edge_id, e.edge_version) for e in c.edges),
            convert.enum_member(ProposalStatus, c.proposal_status) if c.HasField("proposal_status") else None,
        )
        for c in reply.cycles
    )
    proposals = tuple(
        Proposal(
            p.digest,
            p.signature,
            _members(p.members),
            convert.enum_member(ProposalStatus, p.status),
            p.epoch_proposed,
            p.proposer,
            tuple(p.approvals),
            tuple(p.rejections),
            _votes(p.votes),
            p.decision_id if p.HasField("decision_id") else None,
            p.close_reason,
        )
        for p in reply.proposals
    )
    return Cycles(cycles, proposals, reply.epoch, reply.stale, reply.applied_index)


def decision_from_view(view: operator_pb2.DecisionView, role: str | None = None) -> Decision:
    """The SDK's :class:`Decision` from an ExplainDecision record, with every candidate's score."""
    roles = tuple((r.execution_id, r.role) for r in view.roles)
    winner = view.winner_id if view.HasField("winner_id") else None
    subject = winner or (view.roles[0].execution_id if view.roles else "")
    return Decision(
        decision_id=view.decision_id,
        execution_id=subject,
        generation=view.winner_generation,
        epoch=view.epoch if view.HasField("epoch") else None,
        role=role or dict(roles).get(subject, "victim"),
        digest=view.digest,
        kind=convert.enum_member(DecisionKind, view.kind),
        mode=convert.enum_member(RolloutMode, view.mode),
        policy_version=view.policy_version,
        reason_code=view.reason_code,
        winner_id=winner,
        scores=tuple(
            Score(
                s.execution_id,
                s.generation,
                s.external_side_effects,
                s.checkpoint,
                s.priority,
                s.cost_consumed,
                s.unique_evidence,
            )
            for s in view.scores
        ),
        signature=view.signature,
        roles=roles,
        votes=_votes(view.votes),
        released=tuple(Release(r.target_id, r.execution_id, r.at_ms) for r in view.released),
        epoch_before=view.epoch_before,
        at_ms=view.at_ms,
        remedies=tuple((r.remedy, r.outcome, r.reason) for r in view.remedies),
        reassigned=tuple(
            (r.approval_id, r.from_id, r.from_generation, r.to_id, r.to_generation) for r in view.reassigned
        ),
    )


def trajectory_from_view(view: operator_pb2.TrajectoryView, epoch: int = 0, stale: bool = False) -> SignatureHistory:
    return SignatureHistory(
        signature=view.signature,
        known=view.known,
        observations=tuple(map(_epoch_at, view.observations)),
        recoveries=tuple(map(_epoch_at, view.recoveries)),
        observed_total=view.observed_total,
        recovered_total=view.recovered_total,
        first_seen=_epoch_at(view.first_seen) if view.HasField("first_seen") else None,
        decisions=tuple(
            DecisionSummary(
                d.decision_id,
                convert.enum_member(DecisionKind, d.kind),
                d.reason_code,
                d.epoch_before,
                d.epoch if d.HasField("epoch") else None,
                d.winner_id if d.HasField("winner_id") else None,
                d.at_ms,
            )
            for d in view.decisions
        ),
        guard=view.guard,
        epoch=epoch,
        stale=stale,
    )


def explanation_from_proto(reply: operator_pb2.ExplainDecisionResponse) -> Explanation:
    return Explanation(
        tuple(map(decision_from_view, reply.decisions)),
        tuple(trajectory_from_view(t, reply.epoch, reply.stale) for t in reply.trajectories),
        reply.epoch,
        reply.stale,
    )


def _status(name: str) -> ExecStatus | str:
    try:
        return ExecStatus(name)
    except ValueError:
        return name


def convergence_from_proto(reply: operator_pb2.ConvergenceResponse) -> Convergence:
    return Convergence(
        run_id=reply.run_id,
        cancel_generation=reply.cancel_generation,
        cancel_state=convert.enum_member(CancelState, reply.cancel_state),
        executions=reply.executions,
        settled=reply.settled,
        unsettled={_status(k): v for k, v in sorted(reply.unsettled.items())},
        open_cancellations=reply.open_cancellations,
        pending_acks=reply.pending_acks,
        quarantined=tuple(reply.quarantined),
        admission_frozen=reply.admission_frozen,
        admission_reason=reply.admission_reason,
        converged=reply.converged,
        stale=reply.stale,
    )


def pending_from_proto(reply: operator_pb2.ExportPendingResponse) -> PendingExport:
    document: dict[str, Any] = json.loads(reply.document_json) if reply.document_json else {}
    return PendingExport(reply.format, reply.version, document, reply.stale)
