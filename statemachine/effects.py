"""Effects: what an applied command did, in the past tense, as values the shell acts on.

Effects are part of the replicated outcome (the idempotency table stores them), so they are
frozen, versioned and encoded by the same codec as commands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .enums import CancelMode, CancelState, EffectOutcome, ExecStatus, Relation, SessionStatus
from .fastinit import fast_init


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionJoined:
    KIND: ClassVar[str] = "SessionJoined"
    VERSION: ClassVar[int] = 1
    agent_id: str
    incarnation: int
    expires_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRenewed:
    KIND: ClassVar[str] = "SessionRenewed"
    VERSION: ClassVar[int] = 1
    agent_id: str
    expires_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionEnded:
    """``reason`` is ``left`` or ``expired``."""

    KIND: ClassVar[str] = "SessionEnded"
    VERSION: ClassVar[int] = 1
    agent_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionCreated:
    KIND: ClassVar[str] = "ExecutionCreated"
    VERSION: ClassVar[int] = 1
    execution_id: str
    run_id: str
    agent_id: str
    generation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionStateChanged:
    KIND: ClassVar[str] = "ExecutionStateChanged"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    before: ExecStatus
    after: ExecStatus
    cause: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationAdvanced:
    KIND: ClassVar[str] = "GenerationAdvanced"
    VERSION: ClassVar[int] = 1
    execution_id: str
    before: int
    after: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetCreated:
    KIND: ClassVar[str] = "TargetCreated"
    VERSION: ClassVar[int] = 1
    target_id: str
    slots: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SatisfierDeclared:
    KIND: ClassVar[str] = "SatisfierDeclared"
    VERSION: ClassVar[int] = 1
    target_id: str
    target_generation: int
    relation: Relation
    satisfier_id: str
    satisfier_generation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SatisfierClosed:
    KIND: ClassVar[str] = "SatisfierClosed"
    VERSION: ClassVar[int] = 1
    target_id: str
    satisfier_id: str
    satisfier_generation: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Acquired:
    KIND: ClassVar[str] = "Acquired"
    VERSION: ClassVar[int] = 1
    target_id: str
    execution_id: str
    generation: int
    lease: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Released:
    KIND: ClassVar[str] = "Released"
    VERSION: ClassVar[int] = 1
    target_id: str
    execution_id: str
    generation: int
    lease: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitRegistered:
    KIND: ClassVar[str] = "WaitRegistered"
    VERSION: ClassVar[int] = 1
    edge_id: str
    waiter_generation: int
    target_generation: int
    edge_version: int
    deadline_ms: int | None
    cancel_mode: CancelMode


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitClosed:
    """``lease``: set when the wait closed because its waiter was handed the target (reason
    ``granted``, statemachine/queues.py): the waiter now holds it at that lease, no Acquire needed."""

    KIND: ClassVar[str] = "WaitClosed"
    VERSION: ClassVar[int] = 1
    ADDED: ClassVar[tuple[str, ...]] = ("lease",)
    edge_id: str
    waiter_generation: int
    edge_version: int
    reason: str
    lease: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ArtifactProduced:
    KIND: ClassVar[str] = "ArtifactProduced"
    VERSION: ClassVar[int] = 1
    artifact_id: str
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecided:
    KIND: ClassVar[str] = "ApprovalDecided"
    VERSION: ClassVar[int] = 1
    approval_id: str
    version: int
    approved: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class SideEffectRecorded:
    KIND: ClassVar[str] = "SideEffectRecorded"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    effect_id: str
    outcome: EffectOutcome
    compensatable: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class CostRecorded:
    KIND: ClassVar[str] = "CostRecorded"
    VERSION: ClassVar[int] = 1
    execution_id: str
    cost_consumed: int


# -- recovery -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryConfigured:
    KIND: ClassVar[str] = "RecoveryConfigured"
    VERSION: ClassVar[int] = 1
    voters: tuple[str, ...]
    quorum: int
    max_rollback: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeChanged:
    KIND: ClassVar[str] = "ModeChanged"
    VERSION: ClassVar[int] = 1
    run_id: str | None
    mode: str | None
    side_effect_free: bool | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ApproverChanged:
    """The independent approver of the cluster (``run_id`` none) or of one run; none: removed."""

    KIND: ClassVar[str] = "ApproverChanged"
    VERSION: ClassVar[int] = 1
    run_id: str | None
    approver_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryProposed:
    KIND: ClassVar[str] = "RecoveryProposed"
    VERSION: ClassVar[int] = 1
    digest: str
    signature: str
    epoch_proposed: int
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryRetracted:
    """The second read found the deadlock gone or changed: a false positive, counted."""

    KIND: ClassVar[str] = "RecoveryRetracted"
    VERSION: ClassVar[int] = 1
    digest: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteRecorded:
    KIND: ClassVar[str] = "VoteRecorded"
    VERSION: ClassVar[int] = 1
    digest: str
    voter: str
    approve: bool
    approvals: int
    quorum: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryRejected:
    KIND: ClassVar[str] = "RecoveryRejected"
    VERSION: ClassVar[int] = 1
    digest: str
    rejections: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochCommitted:
    KIND: ClassVar[str] = "EpochCommitted"
    VERSION: ClassVar[int] = 1
    epoch: int
    digest: str


@dataclass(frozen=True, slots=True, kw_only=True)
class VictimChosen:
    """The recorded decision; ``decision_kind`` SHADOW means it was only reported."""

    KIND: ClassVar[str] = "VictimChosen"
    VERSION: ClassVar[int] = 1
    decision_id: str
    digest: str
    decision_kind: str
    mode: str
    policy_version: str
    execution_id: str | None
    generation: int
    reason_code: str
    epoch: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Yielded:
    """A tie-break loser released what it held and now waits behind the winner."""

    KIND: ClassVar[str] = "Yielded"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    winner_id: str
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LivelockDetected:
    """The same cycle came back: the next recovery is a deterministic tie-break."""

    KIND: ClassVar[str] = "LivelockDetected"
    VERSION: ClassVar[int] = 1
    signature: str
    digest: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryEscalated:
    """Nothing was rolled back; a human must act (reconciliation, or too large a rollback)."""

    KIND: ClassVar[str] = "RecoveryEscalated"
    VERSION: ClassVar[int] = 1
    digest: str
    reason: str
    run_ids: tuple[str, ...]


# -- cancellation (docs/design.md §5) --------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelGenerationRaised:
    """``cause``: operator, parent (the run's root agent) or recovery (a cluster node)."""

    KIND: ClassVar[str] = "CancelGenerationRaised"
    VERSION: ClassVar[int] = 1
    run_id: str
    before: int
    after: int
    reason: str
    cause: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRequested:
    """CancelRequested.v1: one execution is asked to stop; ``emission`` counts the re-emissions
    at this cancel generation (1 = the first request)."""

    KIND: ClassVar[str] = "CancelRequested"
    VERSION: ClassVar[int] = 1
    run_id: str
    execution_id: str
    generation: int
    cancel_generation: int
    reason: str
    emission: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelAcknowledged:
    KIND: ClassVar[str] = "CancelAcknowledged"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    cancel_generation: int
    side_effects: EffectOutcome
    propagation_ms: int
    """Logical ms from the first request to this ack."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CancellationStable:
    """CANCELLED_STABLE: every execution of the scope (``run:<id>`` or a victim ``exec:<id>@<g>``)
    is settled and holds nothing. ``leaked`` counts holdings found and released here (a bug if > 0)."""

    KIND: ClassVar[str] = "CancellationStable"
    VERSION: ClassVar[int] = 1
    scope_id: str
    run_id: str
    root_id: str
    cancel_generation: int
    quiescence_ms: int
    leaked: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelSloExceeded:
    """The alert: an execution did not acknowledge within the cancellation SLO and is QUARANTINED."""

    KIND: ClassVar[str] = "CancelSloExceeded"
    VERSION: ClassVar[int] = 1
    run_id: str
    execution_id: str
    generation: int
    requested_at_ms: int
    slo_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceQuarantined:
    """Held by a quarantined execution: not handed out again until an operator releases it."""

    KIND: ClassVar[str] = "ResourceQuarantined"
    VERSION: ClassVar[int] = 1
    target_id: str
    execution_id: str
    generation: int
    lease: int


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantineReleased:
    KIND: ClassVar[str] = "QuarantineReleased"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconciliationOpened:
    KIND: ClassVar[str] = "ReconciliationOpened"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    run_id: str
    unknown_effects: int
    cause: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompensationQueued:
    KIND: ClassVar[str] = "CompensationQueued"
    VERSION: ClassVar[int] = 1
    execution_id: str
    effect_id: str
    generation: int
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskClaimed:
    KIND: ClassVar[str] = "TaskClaimed"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    agent_id: str
    expires_at_ms: int
    took_over: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRenewed:
    KIND: ClassVar[str] = "ClaimRenewed"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    agent_id: str
    expires_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimReleased:
    KIND: ClassVar[str] = "ClaimReleased"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    agent_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallAccepted:
    KIND: ClassVar[str] = "ToolCallAccepted"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    effect_id: str
    compensatable: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionChanged:
    """``run_id`` None: the whole cluster."""

    KIND: ClassVar[str] = "AdmissionChanged"
    VERSION: ClassVar[int] = 1
    run_id: str | None
    frozen: bool
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CancellationConfigured:
    KIND: ClassVar[str] = "CancellationConfigured"
    VERSION: ClassVar[int] = 1
    slo_ms: int
    reemit_interval_ms: int


# -- retirement (statemachine/retire.py) -----------------------------------------------------------
# Each retired record leaves the live state as one effect that carries all of it: the node's
# history store is written from these effects alone (cluster/node/history.py).


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionRetired:
    """A settled execution left the live state. ``effect_*`` is its side-effect ledger, one
    position per effect id (sorted); ``compensation_versions`` the version of the compensation
    queued for that effect, 0 when none was."""

    KIND: ClassVar[str] = "ExecutionRetired"
    VERSION: ClassVar[int] = 1
    execution_id: str
    run_id: str
    parent_id: str | None
    agent_id: str
    generation: int
    status: ExecStatus
    priority: int
    cost_consumed: int
    created_at_ms: int
    settled_at_ms: int
    retired_at_ms: int
    effect_ids: tuple[str, ...]
    effect_outcomes: tuple[EffectOutcome, ...]
    effect_compensatable: tuple[bool, ...]
    effect_generations: tuple[int, ...]
    compensation_versions: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRetired:
    """A run whose every execution settled left the live state, with its cancellation outcome."""

    KIND: ClassVar[str] = "RunRetired"
    VERSION: ClassVar[int] = 1
    run_id: str
    root_id: str
    executions: int
    cancel_generation: int
    cancel_state: CancelState
    cancel_stable_at_ms: int | None
    settled_at_ms: int
    retired_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetRetired:
    """A target nothing held, waited on or was due to satisfy for a retention left the live state,
    as it last stood (its version is the produced or decided version, or the lease counter)."""

    KIND: ClassVar[str] = "TargetRetired"
    VERSION: ClassVar[int] = 1
    target_id: str
    slots: int
    version: int
    approved: bool | None
    satisfier_id: str | None
    touched_at_ms: int
    retired_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRetired:
    """An ended session that owns nothing in the live state any more left it; the agent may join
    again (as a new session, incarnation 1)."""

    KIND: ClassVar[str] = "SessionRetired"
    VERSION: ClassVar[int] = 1
    agent_id: str
    incarnation: int
    status: SessionStatus
    expires_at_ms: int
    retired_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ProposalRetired:
    """A closed recovery proposal none of whose members is in the live state any more."""

    KIND: ClassVar[str] = "ProposalRetired"
    VERSION: ClassVar[int] = 1
    digest: str
    signature: str
    proposal_status: str
    decision_id: str | None
    proposer: str
    proposed_at_ms: int
    closed_at_ms: int
    close_reason: str
    member_ids: tuple[str, ...]
    member_generations: tuple[int, ...]
    retired_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRetired:
    """A recovery decision whose members and proposal have all left the live state: the whole
    record, for the history store. ``score_*`` is every candidate's victim-policy input (one
    position per candidate), ``role_*`` each member's role, ``released_*`` what the decision
    released, in release order, ``vote_*`` the proposal's votes in log order, ``wait_*`` the
    cycle's waits as they stood (``retire.decision_from_retired`` rebuilds the record)."""

    KIND: ClassVar[str] = "DecisionRetired"
    VERSION: ClassVar[int] = 1
    ADDED: ClassVar[tuple[str, ...]] = (
        "remedy_names",
        "remedy_outcomes",
        "remedy_reasons",
        "reassigned_approval_ids",
        "reassigned_from_ids",
        "reassigned_from_generations",
        "reassigned_to_ids",
        "reassigned_to_generations",
    )
    """Added after release, written only when set: ``remedy_*`` the decision's (remedy, outcome,
    reason) rows, ``reassigned_*`` its moved approvals (statemachine/reassign.py)."""
    decision_id: str
    digest: str
    signature: str
    policy_version: str
    decision_kind: str
    mode: str
    reason_code: str
    epoch: int | None
    epoch_before: int
    winner_id: str | None
    winner_generation: int
    at_ms: int
    proposer: str
    proposed_at_ms: int
    score_execution_ids: tuple[str, ...]
    score_generations: tuple[int, ...]
    score_external_side_effects: tuple[bool, ...]
    score_checkpoints: tuple[bool, ...]
    score_priorities: tuple[int, ...]
    score_costs: tuple[int, ...]
    score_unique_evidence: tuple[bool, ...]
    role_execution_ids: tuple[str, ...]
    roles: tuple[str, ...]
    released_target_ids: tuple[str, ...]
    released_execution_ids: tuple[str, ...]
    voters: tuple[str, ...]
    vote_approvals: tuple[bool, ...]
    vote_at_ms: tuple[int, ...]
    wait_waiter_ids: tuple[str, ...]
    wait_waiter_generations: tuple[int, ...]
    wait_target_ids: tuple[str, ...]
    wait_target_generations: tuple[int, ...]
    wait_edge_versions: tuple[int, ...]
    wait_reasons: tuple[str, ...]
    wait_registered_at_ms: tuple[int, ...]
    wait_satisfier_counts: tuple[int, ...]
    wait_satisfiers: tuple[str, ...]
    """Each wait's satisfiers, all waits' in a row (``wait_satisfier_counts`` says how many each)."""
    retired_at_ms: int
    remedy_names: tuple[str, ...] = ()
    remedy_outcomes: tuple[str, ...] = ()
    remedy_reasons: tuple[str, ...] = ()
    reassigned_approval_ids: tuple[str, ...] = ()
    reassigned_from_ids: tuple[str, ...] = ()
    reassigned_from_generations: tuple[int, ...] = ()
    reassigned_to_ids: tuple[str, ...] = ()
    reassigned_to_generations: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TrajectoryRetired:
    """The livelock guard forgot a cycle signature it can no longer need: no proposal or decision
    of it is live, the epoch advanced past its last sighting, and every sighting and rollback is
    older than both the retention and the guard's window."""

    KIND: ClassVar[str] = "TrajectoryRetired"
    VERSION: ClassVar[int] = 1
    signature: str
    observed_total: int
    recovered_total: int
    first_seen_epoch: int | None
    first_seen_at_ms: int | None
    last_seen_at_ms: int
    retired_at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RetirementPassed:
    """One retirement pass: what it retired, and the tombstones it forgot. ``more`` is true when
    it stopped at its ``max_runs`` with more runs due (the leader's loop passes again at once)."""

    KIND: ClassVar[str] = "RetirementPassed"
    VERSION: ClassVar[int] = 1
    cutoff_ms: int
    runs: int
    executions: int
    sessions: int
    proposals: int
    decisions: int
    trajectories: int
    tombstones_forgotten: int
    more: bool
    targets: int = 0


Effect = (
    SessionJoined
    | SessionRenewed
    | SessionEnded
    | ExecutionCreated
    | ExecutionStateChanged
    | GenerationAdvanced
    | TargetCreated
    | SatisfierDeclared
    | SatisfierClosed
    | Acquired
    | Released
    | WaitRegistered
    | WaitClosed
    | ArtifactProduced
    | ApprovalDecided
    | SideEffectRecorded
    | CostRecorded
    | RecoveryConfigured
    | ModeChanged
    | ApproverChanged
    | RecoveryProposed
    | RecoveryRetracted
    | VoteRecorded
    | RecoveryRejected
    | EpochCommitted
    | VictimChosen
    | Yielded
    | LivelockDetected
    | RecoveryEscalated
    | CancelGenerationRaised
    | CancelRequested
    | CancelAcknowledged
    | CancellationStable
    | CancelSloExceeded
    | ResourceQuarantined
    | QuarantineReleased
    | ReconciliationOpened
    | CompensationQueued
    | TaskClaimed
    | ClaimRenewed
    | ClaimReleased
    | ToolCallAccepted
    | AdmissionChanged
    | CancellationConfigured
    | ExecutionRetired
    | RunRetired
    | TargetRetired
    | SessionRetired
    | ProposalRetired
    | DecisionRetired
    | TrajectoryRetired
    | RetirementPassed
)

EFFECTS: tuple[type[Effect], ...] = (
    SessionJoined,
    SessionRenewed,
    SessionEnded,
    ExecutionCreated,
    ExecutionStateChanged,
    GenerationAdvanced,
    TargetCreated,
    SatisfierDeclared,
    SatisfierClosed,
    Acquired,
    Released,
    WaitRegistered,
    WaitClosed,
    ArtifactProduced,
    ApprovalDecided,
    SideEffectRecorded,
    CostRecorded,
    RecoveryConfigured,
    ModeChanged,
    ApproverChanged,
    RecoveryProposed,
    RecoveryRetracted,
    VoteRecorded,
    RecoveryRejected,
    EpochCommitted,
    VictimChosen,
    Yielded,
    LivelockDetected,
    RecoveryEscalated,
    CancelGenerationRaised,
    CancelRequested,
    CancelAcknowledged,
    CancellationStable,
    CancelSloExceeded,
    ResourceQuarantined,
    QuarantineReleased,
    ReconciliationOpened,
    CompensationQueued,
    TaskClaimed,
    ClaimRenewed,
    ClaimReleased,
    ToolCallAccepted,
    AdmissionChanged,
    CancellationConfigured,
    ExecutionRetired,
    RunRetired,
    TargetRetired,
    SessionRetired,
    ProposalRetired,
    DecisionRetired,
    TrajectoryRetired,
    RetirementPassed,
)
for _effect in EFFECTS:
    fast_init(_effect)  # apply builds several per write (statemachine/fastinit.py)

RETIREMENT_EFFECTS: frozenset[type[Effect]] = frozenset(
    {ExecutionRetired, RunRetired, TargetRetired, SessionRetired, ProposalRetired, DecisionRetired, TrajectoryRetired}
)
"""The records a retirement pass moves out of the live state (the history store's input)."""
