from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXEC_STATUS_UNSPECIFIED: _ClassVar[ExecStatus]
    EXEC_STATUS_PENDING: _ClassVar[ExecStatus]
    EXEC_STATUS_RUNNING: _ClassVar[ExecStatus]
    EXEC_STATUS_WAITING: _ClassVar[ExecStatus]
    EXEC_STATUS_CANCEL_REQUESTED: _ClassVar[ExecStatus]
    EXEC_STATUS_CANCELLING: _ClassVar[ExecStatus]
    EXEC_STATUS_CANCELLED: _ClassVar[ExecStatus]
    EXEC_STATUS_COMPLETED: _ClassVar[ExecStatus]
    EXEC_STATUS_FAILED: _ClassVar[ExecStatus]
    EXEC_STATUS_NEEDS_RECONCILIATION: _ClassVar[ExecStatus]
    EXEC_STATUS_QUARANTINED: _ClassVar[ExecStatus]

class SessionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_STATUS_UNSPECIFIED: _ClassVar[SessionStatus]
    SESSION_STATUS_ACTIVE: _ClassVar[SessionStatus]
    SESSION_STATUS_LEFT: _ClassVar[SessionStatus]
    SESSION_STATUS_EXPIRED: _ClassVar[SessionStatus]

class CancelMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CANCEL_MODE_UNSPECIFIED: _ClassVar[CancelMode]
    CANCEL_MODE_COOPERATIVE: _ClassVar[CancelMode]
    CANCEL_MODE_ABORT: _ClassVar[CancelMode]
    CANCEL_MODE_NON_CANCELLABLE: _ClassVar[CancelMode]

class EffectOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EFFECT_OUTCOME_UNSPECIFIED: _ClassVar[EffectOutcome]
    EFFECT_OUTCOME_NONE: _ClassVar[EffectOutcome]
    EFFECT_OUTCOME_COMMITTED: _ClassVar[EffectOutcome]
    EFFECT_OUTCOME_UNKNOWN: _ClassVar[EffectOutcome]

class Relation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RELATION_UNSPECIFIED: _ClassVar[Relation]
    RELATION_PRODUCED_BY: _ClassVar[Relation]
    RELATION_PROVIDED_BY: _ClassVar[Relation]
    RELATION_HELD_BY: _ClassVar[Relation]

class CancelState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CANCEL_STATE_UNSPECIFIED: _ClassVar[CancelState]
    CANCEL_STATE_NOT_CANCELLED: _ClassVar[CancelState]
    CANCEL_STATE_CANCELLING: _ClassVar[CancelState]
    CANCEL_STATE_CANCELLED_STABLE: _ClassVar[CancelState]

class RolloutMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLLOUT_MODE_UNSPECIFIED: _ClassVar[RolloutMode]
    ROLLOUT_MODE_SHADOW: _ClassVar[RolloutMode]
    ROLLOUT_MODE_AUTO_SAFE: _ClassVar[RolloutMode]
    ROLLOUT_MODE_AUTO: _ClassVar[RolloutMode]

class ProposalStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROPOSAL_STATUS_UNSPECIFIED: _ClassVar[ProposalStatus]
    PROPOSAL_STATUS_OPEN: _ClassVar[ProposalStatus]
    PROPOSAL_STATUS_COMMITTED: _ClassVar[ProposalStatus]
    PROPOSAL_STATUS_RETRACTED: _ClassVar[ProposalStatus]
    PROPOSAL_STATUS_REJECTED: _ClassVar[ProposalStatus]

class DecisionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_KIND_UNSPECIFIED: _ClassVar[DecisionKind]
    DECISION_KIND_VICTIM: _ClassVar[DecisionKind]
    DECISION_KIND_TIE_BREAK: _ClassVar[DecisionKind]
    DECISION_KIND_SHADOW: _ClassVar[DecisionKind]
    DECISION_KIND_RECONCILIATION: _ClassVar[DecisionKind]
    DECISION_KIND_ESCALATION: _ClassVar[DecisionKind]
    DECISION_KIND_REORDER: _ClassVar[DecisionKind]
    DECISION_KIND_REASSIGN: _ClassVar[DecisionKind]

class Result(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_UNSPECIFIED: _ClassVar[Result]
    RESULT_APPLIED: _ClassVar[Result]
    RESULT_NOOP: _ClassVar[Result]
    RESULT_REJECTED: _ClassVar[Result]
EXEC_STATUS_UNSPECIFIED: ExecStatus
EXEC_STATUS_PENDING: ExecStatus
EXEC_STATUS_RUNNING: ExecStatus
EXEC_STATUS_WAITING: ExecStatus
EXEC_STATUS_CANCEL_REQUESTED: ExecStatus
EXEC_STATUS_CANCELLING: ExecStatus
EXEC_STATUS_CANCELLED: ExecStatus
EXEC_STATUS_COMPLETED: ExecStatus
EXEC_STATUS_FAILED: ExecStatus
EXEC_STATUS_NEEDS_RECONCILIATION: ExecStatus
EXEC_STATUS_QUARANTINED: ExecStatus
SESSION_STATUS_UNSPECIFIED: SessionStatus
SESSION_STATUS_ACTIVE: SessionStatus
SESSION_STATUS_LEFT: SessionStatus
SESSION_STATUS_EXPIRED: SessionStatus
CANCEL_MODE_UNSPECIFIED: CancelMode
CANCEL_MODE_COOPERATIVE: CancelMode
CANCEL_MODE_ABORT: CancelMode
CANCEL_MODE_NON_CANCELLABLE: CancelMode
EFFECT_OUTCOME_UNSPECIFIED: EffectOutcome
EFFECT_OUTCOME_NONE: EffectOutcome
EFFECT_OUTCOME_COMMITTED: EffectOutcome
EFFECT_OUTCOME_UNKNOWN: EffectOutcome
RELATION_UNSPECIFIED: Relation
RELATION_PRODUCED_BY: Relation
RELATION_PROVIDED_BY: Relation
RELATION_HELD_BY: Relation
CANCEL_STATE_UNSPECIFIED: CancelState
CANCEL_STATE_NOT_CANCELLED: CancelState
CANCEL_STATE_CANCELLING: CancelState
CANCEL_STATE_CANCELLED_STABLE: CancelState
ROLLOUT_MODE_UNSPECIFIED: RolloutMode
ROLLOUT_MODE_SHADOW: RolloutMode
ROLLOUT_MODE_AUTO_SAFE: RolloutMode
ROLLOUT_MODE_AUTO: RolloutMode
PROPOSAL_STATUS_UNSPECIFIED: ProposalStatus
PROPOSAL_STATUS_OPEN: ProposalStatus
PROPOSAL_STATUS_COMMITTED: ProposalStatus
PROPOSAL_STATUS_RETRACTED: ProposalStatus
PROPOSAL_STATUS_REJECTED: ProposalStatus
DECISION_KIND_UNSPECIFIED: DecisionKind
DECISION_KIND_VICTIM: DecisionKind
DECISION_KIND_TIE_BREAK: DecisionKind
DECISION_KIND_SHADOW: DecisionKind
DECISION_KIND_RECONCILIATION: DecisionKind
DECISION_KIND_ESCALATION: DecisionKind
DECISION_KIND_REORDER: DecisionKind
DECISION_KIND_REASSIGN: DecisionKind
RESULT_UNSPECIFIED: Result
RESULT_APPLIED: Result
RESULT_NOOP: Result
RESULT_REJECTED: Result

class Outcome(_message.Message):
    __slots__ = ("result", "code", "status", "message", "fields", "effects", "duplicate")
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RESULT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    EFFECTS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    result: Result
    code: str
    status: str
    message: str
    fields: _containers.ScalarMap[str, str]
    effects: _containers.RepeatedCompositeFieldContainer[Effect]
    duplicate: bool
    def __init__(self, result: _Optional[_Union[Result, str]] = ..., code: _Optional[str] = ..., status: _Optional[str] = ..., message: _Optional[str] = ..., fields: _Optional[_Mapping[str, str]] = ..., effects: _Optional[_Iterable[_Union[Effect, _Mapping]]] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class SessionJoined(_message.Message):
    __slots__ = ("agent_id", "incarnation", "expires_at_ms")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    incarnation: int
    expires_at_ms: int
    def __init__(self, agent_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., expires_at_ms: _Optional[int] = ...) -> None: ...

class SessionRenewed(_message.Message):
    __slots__ = ("agent_id", "expires_at_ms")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    expires_at_ms: int
    def __init__(self, agent_id: _Optional[str] = ..., expires_at_ms: _Optional[int] = ...) -> None: ...

class SessionEnded(_message.Message):
    __slots__ = ("agent_id", "reason")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    reason: str
    def __init__(self, agent_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ExecutionCreated(_message.Message):
    __slots__ = ("execution_id", "run_id", "agent_id", "generation")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    run_id: str
    agent_id: str
    generation: int
    def __init__(self, execution_id: _Optional[str] = ..., run_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class ExecutionStateChanged(_message.Message):
    __slots__ = ("execution_id", "generation", "before", "after", "cause")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    before: ExecStatus
    after: ExecStatus
    cause: str
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., before: _Optional[_Union[ExecStatus, str]] = ..., after: _Optional[_Union[ExecStatus, str]] = ..., cause: _Optional[str] = ...) -> None: ...

class GenerationAdvanced(_message.Message):
    __slots__ = ("execution_id", "before", "after")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    before: int
    after: int
    def __init__(self, execution_id: _Optional[str] = ..., before: _Optional[int] = ..., after: _Optional[int] = ...) -> None: ...

class TargetCreated(_message.Message):
    __slots__ = ("target_id", "slots")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    slots: int
    def __init__(self, target_id: _Optional[str] = ..., slots: _Optional[int] = ...) -> None: ...

class SatisfierDeclared(_message.Message):
    __slots__ = ("target_id", "target_generation", "relation", "satisfier_id", "satisfier_generation")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_ID_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    target_generation: int
    relation: Relation
    satisfier_id: str
    satisfier_generation: int
    def __init__(self, target_id: _Optional[str] = ..., target_generation: _Optional[int] = ..., relation: _Optional[_Union[Relation, str]] = ..., satisfier_id: _Optional[str] = ..., satisfier_generation: _Optional[int] = ...) -> None: ...

class SatisfierClosed(_message.Message):
    __slots__ = ("target_id", "satisfier_id", "satisfier_generation", "reason")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_ID_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    satisfier_id: str
    satisfier_generation: int
    reason: str
    def __init__(self, target_id: _Optional[str] = ..., satisfier_id: _Optional[str] = ..., satisfier_generation: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Acquired(_message.Message):
    __slots__ = ("target_id", "execution_id", "generation", "lease")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    execution_id: str
    generation: int
    lease: int
    def __init__(self, target_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., lease: _Optional[int] = ...) -> None: ...

class Released(_message.Message):
    __slots__ = ("target_id", "execution_id", "generation", "lease", "reason")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    execution_id: str
    generation: int
    lease: int
    reason: str
    def __init__(self, target_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., lease: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class WaitRegistered(_message.Message):
    __slots__ = ("edge_id", "waiter_generation", "target_generation", "edge_version", "deadline_ms", "cancel_mode")
    EDGE_ID_FIELD_NUMBER: _ClassVar[int]
    WAITER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    TARGET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    EDGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_MODE_FIELD_NUMBER: _ClassVar[int]
    edge_id: str
    waiter_generation: int
    target_generation: int
    edge_version: int
    deadline_ms: int
    cancel_mode: CancelMode
    def __init__(self, edge_id: _Optional[str] = ..., waiter_generation: _Optional[int] = ..., target_generation: _Optional[int] = ..., edge_version: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., cancel_mode: _Optional[_Union[CancelMode, str]] = ...) -> None: ...

class WaitClosed(_message.Message):
    __slots__ = ("edge_id", "waiter_generation", "edge_version", "reason", "lease")
    EDGE_ID_FIELD_NUMBER: _ClassVar[int]
    WAITER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    EDGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    edge_id: str
    waiter_generation: int
    edge_version: int
    reason: str
    lease: int
    def __init__(self, edge_id: _Optional[str] = ..., waiter_generation: _Optional[int] = ..., edge_version: _Optional[int] = ..., reason: _Optional[str] = ..., lease: _Optional[int] = ...) -> None: ...

class ArtifactProduced(_message.Message):
    __slots__ = ("artifact_id", "version")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    version: int
    def __init__(self, artifact_id: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class ApprovalDecided(_message.Message):
    __slots__ = ("approval_id", "version", "approved")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    version: int
    approved: bool
    def __init__(self, approval_id: _Optional[str] = ..., version: _Optional[int] = ..., approved: _Optional[bool] = ...) -> None: ...

class SideEffectRecorded(_message.Message):
    __slots__ = ("execution_id", "generation", "effect_id", "outcome", "compensatable")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    EFFECT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    COMPENSATABLE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    effect_id: str
    outcome: EffectOutcome
    compensatable: bool
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., effect_id: _Optional[str] = ..., outcome: _Optional[_Union[EffectOutcome, str]] = ..., compensatable: _Optional[bool] = ...) -> None: ...

class CostRecorded(_message.Message):
    __slots__ = ("execution_id", "cost_consumed")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    COST_CONSUMED_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    cost_consumed: int
    def __init__(self, execution_id: _Optional[str] = ..., cost_consumed: _Optional[int] = ...) -> None: ...

class RecoveryConfigured(_message.Message):
    __slots__ = ("voters", "quorum", "max_rollback")
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    MAX_ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    voters: _containers.RepeatedScalarFieldContainer[str]
    quorum: int
    max_rollback: int
    def __init__(self, voters: _Optional[_Iterable[str]] = ..., quorum: _Optional[int] = ..., max_rollback: _Optional[int] = ...) -> None: ...

class ModeChanged(_message.Message):
    __slots__ = ("run_id", "mode", "side_effect_free")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECT_FREE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    mode: str
    side_effect_free: bool
    def __init__(self, run_id: _Optional[str] = ..., mode: _Optional[str] = ..., side_effect_free: _Optional[bool] = ...) -> None: ...

class ApproverChanged(_message.Message):
    __slots__ = ("run_id", "approver_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVER_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    approver_id: str
    def __init__(self, run_id: _Optional[str] = ..., approver_id: _Optional[str] = ...) -> None: ...

class RecoveryProposed(_message.Message):
    __slots__ = ("digest", "signature", "epoch_proposed", "members")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_PROPOSED_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    digest: str
    signature: str
    epoch_proposed: int
    members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, digest: _Optional[str] = ..., signature: _Optional[str] = ..., epoch_proposed: _Optional[int] = ..., members: _Optional[_Iterable[str]] = ...) -> None: ...

class RecoveryRetracted(_message.Message):
    __slots__ = ("digest", "reason")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    digest: str
    reason: str
    def __init__(self, digest: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class VoteRecorded(_message.Message):
    __slots__ = ("digest", "voter", "approve", "approvals", "quorum")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    digest: str
    voter: str
    approve: bool
    approvals: int
    quorum: int
    def __init__(self, digest: _Optional[str] = ..., voter: _Optional[str] = ..., approve: _Optional[bool] = ..., approvals: _Optional[int] = ..., quorum: _Optional[int] = ...) -> None: ...

class RecoveryRejected(_message.Message):
    __slots__ = ("digest", "rejections")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    digest: str
    rejections: int
    def __init__(self, digest: _Optional[str] = ..., rejections: _Optional[int] = ...) -> None: ...

class EpochCommitted(_message.Message):
    __slots__ = ("epoch", "digest")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    digest: str
    def __init__(self, epoch: _Optional[int] = ..., digest: _Optional[str] = ...) -> None: ...

class VictimChosen(_message.Message):
    __slots__ = ("decision_id", "digest", "decision_kind", "mode", "policy_version", "execution_id", "generation", "reason_code", "epoch")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    DECISION_KIND_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    digest: str
    decision_kind: str
    mode: str
    policy_version: str
    execution_id: str
    generation: int
    reason_code: str
    epoch: int
    def __init__(self, decision_id: _Optional[str] = ..., digest: _Optional[str] = ..., decision_kind: _Optional[str] = ..., mode: _Optional[str] = ..., policy_version: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., reason_code: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class Yielded(_message.Message):
    __slots__ = ("execution_id", "generation", "winner_id", "epoch")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    WINNER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    winner_id: str
    epoch: int
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., winner_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class LivelockDetected(_message.Message):
    __slots__ = ("signature", "digest", "reason")
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    signature: str
    digest: str
    reason: str
    def __init__(self, signature: _Optional[str] = ..., digest: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RecoveryEscalated(_message.Message):
    __slots__ = ("digest", "reason", "run_ids")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_IDS_FIELD_NUMBER: _ClassVar[int]
    digest: str
    reason: str
    run_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, digest: _Optional[str] = ..., reason: _Optional[str] = ..., run_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelGenerationRaised(_message.Message):
    __slots__ = ("run_id", "before", "after", "reason", "cause")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    before: int
    after: int
    reason: str
    cause: str
    def __init__(self, run_id: _Optional[str] = ..., before: _Optional[int] = ..., after: _Optional[int] = ..., reason: _Optional[str] = ..., cause: _Optional[str] = ...) -> None: ...

class CancelRequested(_message.Message):
    __slots__ = ("run_id", "execution_id", "generation", "cancel_generation", "reason", "emission")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EMISSION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    execution_id: str
    generation: int
    cancel_generation: int
    reason: str
    emission: int
    def __init__(self, run_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., cancel_generation: _Optional[int] = ..., reason: _Optional[str] = ..., emission: _Optional[int] = ...) -> None: ...

class CancelAcknowledged(_message.Message):
    __slots__ = ("execution_id", "generation", "cancel_generation", "side_effects", "propagation_ms")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    PROPAGATION_MS_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    cancel_generation: int
    side_effects: EffectOutcome
    propagation_ms: int
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., cancel_generation: _Optional[int] = ..., side_effects: _Optional[_Union[EffectOutcome, str]] = ..., propagation_ms: _Optional[int] = ...) -> None: ...

class CancellationStable(_message.Message):
    __slots__ = ("scope_id", "run_id", "root_id", "cancel_generation", "quiescence_ms", "leaked")
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    QUIESCENCE_MS_FIELD_NUMBER: _ClassVar[int]
    LEAKED_FIELD_NUMBER: _ClassVar[int]
    scope_id: str
    run_id: str
    root_id: str
    cancel_generation: int
    quiescence_ms: int
    leaked: int
    def __init__(self, scope_id: _Optional[str] = ..., run_id: _Optional[str] = ..., root_id: _Optional[str] = ..., cancel_generation: _Optional[int] = ..., quiescence_ms: _Optional[int] = ..., leaked: _Optional[int] = ...) -> None: ...

class CancelSloExceeded(_message.Message):
    __slots__ = ("run_id", "execution_id", "generation", "requested_at_ms", "slo_ms")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SLO_MS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    execution_id: str
    generation: int
    requested_at_ms: int
    slo_ms: int
    def __init__(self, run_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., requested_at_ms: _Optional[int] = ..., slo_ms: _Optional[int] = ...) -> None: ...

class ResourceQuarantined(_message.Message):
    __slots__ = ("target_id", "execution_id", "generation", "lease")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    execution_id: str
    generation: int
    lease: int
    def __init__(self, target_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., lease: _Optional[int] = ...) -> None: ...

class QuarantineReleased(_message.Message):
    __slots__ = ("execution_id", "generation", "reason")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    reason: str
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ReconciliationOpened(_message.Message):
    __slots__ = ("execution_id", "generation", "run_id", "unknown_effects", "cause")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    run_id: str
    unknown_effects: int
    cause: str
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., run_id: _Optional[str] = ..., unknown_effects: _Optional[int] = ..., cause: _Optional[str] = ...) -> None: ...

class CompensationQueued(_message.Message):
    __slots__ = ("execution_id", "effect_id", "generation", "version")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    EFFECT_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    effect_id: str
    generation: int
    version: int
    def __init__(self, execution_id: _Optional[str] = ..., effect_id: _Optional[str] = ..., generation: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class TaskClaimed(_message.Message):
    __slots__ = ("execution_id", "generation", "agent_id", "expires_at_ms", "took_over")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    TOOK_OVER_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    agent_id: str
    expires_at_ms: int
    took_over: bool
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., agent_id: _Optional[str] = ..., expires_at_ms: _Optional[int] = ..., took_over: _Optional[bool] = ...) -> None: ...

class ClaimRenewed(_message.Message):
    __slots__ = ("execution_id", "generation", "agent_id", "expires_at_ms")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    agent_id: str
    expires_at_ms: int
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., agent_id: _Optional[str] = ..., expires_at_ms: _Optional[int] = ...) -> None: ...

class ClaimReleased(_message.Message):
    __slots__ = ("execution_id", "generation", "agent_id", "reason")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    agent_id: str
    reason: str
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., agent_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ToolCallAccepted(_message.Message):
    __slots__ = ("execution_id", "generation", "effect_id", "compensatable")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    EFFECT_ID_FIELD_NUMBER: _ClassVar[int]
    COMPENSATABLE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    effect_id: str
    compensatable: bool
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., effect_id: _Optional[str] = ..., compensatable: _Optional[bool] = ...) -> None: ...

class AdmissionChanged(_message.Message):
    __slots__ = ("run_id", "frozen", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FROZEN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    frozen: bool
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., frozen: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class CancellationConfigured(_message.Message):
    __slots__ = ("slo_ms", "reemit_interval_ms")
    SLO_MS_FIELD_NUMBER: _ClassVar[int]
    REEMIT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    slo_ms: int
    reemit_interval_ms: int
    def __init__(self, slo_ms: _Optional[int] = ..., reemit_interval_ms: _Optional[int] = ...) -> None: ...

class ExecutionRetired(_message.Message):
    __slots__ = ("execution_id", "run_id", "parent_id", "agent_id", "generation", "status", "priority", "cost_consumed", "created_at_ms", "settled_at_ms", "retired_at_ms", "effect_ids", "effect_outcomes", "effect_compensatable", "effect_generations", "compensation_versions")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    COST_CONSUMED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SETTLED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RETIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    EFFECT_IDS_FIELD_NUMBER: _ClassVar[int]
    EFFECT_OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    EFFECT_COMPENSATABLE_FIELD_NUMBER: _ClassVar[int]
    EFFECT_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    COMPENSATION_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    run_id: str
    parent_id: str
    agent_id: str
    generation: int
    status: ExecStatus
    priority: int
    cost_consumed: int
    created_at_ms: int
    settled_at_ms: int
    retired_at_ms: int
    effect_ids: _containers.RepeatedScalarFieldContainer[str]
    effect_outcomes: _containers.RepeatedScalarFieldContainer[EffectOutcome]
    effect_compensatable: _containers.RepeatedScalarFieldContainer[bool]
    effect_generations: _containers.RepeatedScalarFieldContainer[int]
    compensation_versions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, execution_id: _Optional[str] = ..., run_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., generation: _Optional[int] = ..., status: _Optional[_Union[ExecStatus, str]] = ..., priority: _Optional[int] = ..., cost_consumed: _Optional[int] = ..., created_at_ms: _Optional[int] = ..., settled_at_ms: _Optional[int] = ..., retired_at_ms: _Optional[int] = ..., effect_ids: _Optional[_Iterable[str]] = ..., effect_outcomes: _Optional[_Iterable[_Union[EffectOutcome, str]]] = ..., effect_compensatable: _Optional[_Iterable[bool]] = ..., effect_generations: _Optional[_Iterable[int]] = ..., compensation_versions: _Optional[_Iterable[int]] = ...) -> None: ...

class RunRetired(_message.Message):
    __slots__ = ("run_id", "root_id", "executions", "cancel_generation", "cancel_state", "cancel_stable_at_ms", "settled_at_ms", "retired_at_ms")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CANCEL_STATE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_STABLE_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SETTLED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RETIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    root_id: str
    executions: int
    cancel_generation: int
    cancel_state: CancelState
    cancel_stable_at_ms: int
    settled_at_ms: int
    retired_at_ms: int
    def __init__(self, run_id: _Optional[str] = ..., root_id: _Optional[str] = ..., executions: _Optional[int] = ..., cancel_generation: _Optional[int] = ..., cancel_state: _Optional[_Union[CancelState, str]] = ..., cancel_stable_at_ms: _Optional[int] = ..., settled_at_ms: _Optional[int] = ..., retired_at_ms: _Optional[int] = ...) -> None: ...

class TargetRetired(_message.Message):
    __slots__ = ("target_id", "slots", "version", "approved", "satisfier_id", "touched_at_ms", "retired_at_ms")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_ID_FIELD_NUMBER: _ClassVar[int]
    TOUCHED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RETIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    slots: int
    version: int
    approved: bool
    satisfier_id: str
    touched_at_ms: int
    retired_at_ms: int
    def __init__(self, target_id: _Optional[str] = ..., slots: _Optional[int] = ..., version: _Optional[int] = ..., approved: _Optional[bool] = ..., satisfier_id: _Optional[str] = ..., touched_at_ms: _Optional[int] = ..., retired_at_ms: _Optional[int] = ...) -> None: ...

class SessionRetired(_message.Message):
    __slots__ = ("agent_id", "incarnation", "status", "expires_at_ms", "retired_at_ms")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RETIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    incarnation: int
    status: SessionStatus
    expires_at_ms: int
    retired_at_ms: int
    def __init__(self, agent_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., status: _Optional[_Union[SessionStatus, str]] = ..., expires_at_ms: _Optional[int] = ..., retired_at_ms: _Optional[int] = ...) -> None: ...

class ProposalRetired(_message.Message):
    __slots__ = ("digest", "signature", "proposal_status", "decision_id", "proposer", "proposed_at_ms", "closed_at_ms", "close_reason", "member_ids", "member_generations", "retired_at_ms")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_STATUS_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    PROPOSER_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CLOSED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CLOSE_REASON_FIELD_NUMBER: _ClassVar[int]
    MEMBER_IDS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    RETIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    digest: str
    signature: str
    proposal_status: str
    decision_id: str
    proposer: str
    proposed_at_ms: int
    closed_at_ms: int
    close_reason: str
    member_ids: _containers.RepeatedScalarFieldContainer[str]
    member_generations: _containers.RepeatedScalarFieldContainer[int]
    retired_at_ms: int
    def __init__(self, digest: _Optional[str] = ..., signature: _Optional[str] = ..., proposal_status: _Optional[str] = ..., decision_id: _Optional[str] = ..., proposer: _Optional[str] = ..., proposed_at_ms: _Optional[int] = ..., closed_at_ms: _Optional[int] = ..., close_reason: _Optional[str] = ..., member_ids: _Optional[_Iterable[str]] = ..., member_generations: _Optional[_Iterable[int]] = ..., retired_at_ms: _Optional[int] = ...) -> None: ...

class DecisionRetired(_message.Message):
    __slots__ = ("decision_id", "digest", "signature", "policy_version", "decision_kind", "mode", "reason_code", "epoch", "epoch_before", "winner_id", "winner_generation", "at_ms", "proposer", "proposed_at_ms", "score_execution_ids", "score_generations", "score_external_side_effects", "score_checkpoints", "score_priorities", "score_costs", "score_unique_evidence", "role_execution_ids", "roles", "released_target_ids", "released_execution_ids", "voters", "vote_approvals", "vote_at_ms", "wait_waiter_ids", "wait_waiter_generations", "wait_target_ids", "wait_target_generations", "wait_edge_versions", "wait_reasons", "wait_registered_at_ms", "wait_satisfier_counts", "wait_satisfiers", "retired_at_ms", "remedy_names", "remedy_outcomes", "remedy_reasons", "reassigned_approval_ids", "reassigned_from_ids", "reassigned_from_generations", "reassigned_to_ids", "reassigned_to_generations")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    DECISION_KIND_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCH_BEFORE_FIELD_NUMBER: _ClassVar[int]
    WINNER_ID_FIELD_NUMBER: _ClassVar[int]
    WINNER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    PROPOSER_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SCORE_EXECUTION_IDS_FIELD_NUMBER: _ClassVar[int]
    SCORE_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    SCORE_EXTERNAL_SIDE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    SCORE_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    SCORE_PRIORITIES_FIELD_NUMBER: _ClassVar[int]
    SCORE_COSTS_FIELD_NUMBER: _ClassVar[int]
    SCORE_UNIQUE_EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    ROLE_EXECUTION_IDS_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    RELEASED_TARGET_IDS_FIELD_NUMBER: _ClassVar[int]
    RELEASED_EXECUTION_IDS_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    VOTE_APPROVALS_FIELD_NUMBER: _ClassVar[int]
    VOTE_AT_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_WAITER_IDS_FIELD_NUMBER: _ClassVar[int]
    WAIT_WAITER_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    WAIT_TARGET_IDS_FIELD_NUMBER: _ClassVar[int]
    WAIT_TARGET_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    WAIT_EDGE_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    WAIT_REASONS_FIELD_NUMBER: _ClassVar[int]
    WAIT_REGISTERED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SATISFIER_COUNTS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SATISFIERS_FIELD_NUMBER: _ClassVar[int]
    RETIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    REMEDY_NAMES_FIELD_NUMBER: _ClassVar[int]
    REMEDY_OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    REMEDY_REASONS_FIELD_NUMBER: _ClassVar[int]
    REASSIGNED_APPROVAL_IDS_FIELD_NUMBER: _ClassVar[int]
    REASSIGNED_FROM_IDS_FIELD_NUMBER: _ClassVar[int]
    REASSIGNED_FROM_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    REASSIGNED_TO_IDS_FIELD_NUMBER: _ClassVar[int]
    REASSIGNED_TO_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    digest: str
    signature: str
    policy_version: str
    decision_kind: str
    mode: str
    reason_code: str
    epoch: int
    epoch_before: int
    winner_id: str
    winner_generation: int
    at_ms: int
    proposer: str
    proposed_at_ms: int
    score_execution_ids: _containers.RepeatedScalarFieldContainer[str]
    score_generations: _containers.RepeatedScalarFieldContainer[int]
    score_external_side_effects: _containers.RepeatedScalarFieldContainer[bool]
    score_checkpoints: _containers.RepeatedScalarFieldContainer[bool]
    score_priorities: _containers.RepeatedScalarFieldContainer[int]
    score_costs: _containers.RepeatedScalarFieldContainer[int]
    score_unique_evidence: _containers.RepeatedScalarFieldContainer[bool]
    role_execution_ids: _containers.RepeatedScalarFieldContainer[str]
    roles: _containers.RepeatedScalarFieldContainer[str]
    released_target_ids: _containers.RepeatedScalarFieldContainer[str]
    released_execution_ids: _containers.RepeatedScalarFieldContainer[str]
    voters: _containers.RepeatedScalarFieldContainer[str]
    vote_approvals: _containers.RepeatedScalarFieldContainer[bool]
    vote_at_ms: _containers.RepeatedScalarFieldContainer[int]
    wait_waiter_ids: _containers.RepeatedScalarFieldContainer[str]
    wait_waiter_generations: _containers.RepeatedScalarFieldContainer[int]
    wait_target_ids: _containers.RepeatedScalarFieldContainer[str]
    wait_target_generations: _containers.RepeatedScalarFieldContainer[int]
    wait_edge_versions: _containers.RepeatedScalarFieldContainer[int]
    wait_reasons: _containers.RepeatedScalarFieldContainer[str]
    wait_registered_at_ms: _containers.RepeatedScalarFieldContainer[int]
    wait_satisfier_counts: _containers.RepeatedScalarFieldContainer[int]
    wait_satisfiers: _containers.RepeatedScalarFieldContainer[str]
    retired_at_ms: int
    remedy_names: _containers.RepeatedScalarFieldContainer[str]
    remedy_outcomes: _containers.RepeatedScalarFieldContainer[str]
    remedy_reasons: _containers.RepeatedScalarFieldContainer[str]
    reassigned_approval_ids: _containers.RepeatedScalarFieldContainer[str]
    reassigned_from_ids: _containers.RepeatedScalarFieldContainer[str]
    reassigned_from_generations: _containers.RepeatedScalarFieldContainer[int]
    reassigned_to_ids: _containers.RepeatedScalarFieldContainer[str]
    reassigned_to_generations: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, decision_id: _Optional[str] = ..., digest: _Optional[str] = ..., signature: _Optional[str] = ..., policy_version: _Optional[str] = ..., decision_kind: _Optional[str] = ..., mode: _Optional[str] = ..., reason_code: _Optional[str] = ..., epoch: _Optional[int] = ..., epoch_before: _Optional[int] = ..., winner_id: _Optional[str] = ..., winner_generation: _Optional[int] = ..., at_ms: _Optional[int] = ..., proposer: _Optional[str] = ..., proposed_at_ms: _Optional[int] = ..., score_execution_ids: _Optional[_Iterable[str]] = ..., score_generations: _Optional[_Iterable[int]] = ..., score_external_side_effects: _Optional[_Iterable[bool]] = ..., score_checkpoints: _Optional[_Iterable[bool]] = ..., score_priorities: _Optional[_Iterable[int]] = ..., score_costs: _Optional[_Iterable[int]] = ..., score_unique_evidence: _Optional[_Iterable[bool]] = ..., role_execution_ids: _Optional[_Iterable[str]] = ..., roles: _Optional[_Iterable[str]] = ..., released_target_ids: _Optional[_Iterable[str]] = ..., released_execution_ids: _Optional[_Iterable[str]] = ..., voters: _Optional[_Iterable[str]] = ..., vote_approvals: _Optional[_Iterable[bool]] = ..., vote_at_ms: _Optional[_Iterable[int]] = ..., wait_waiter_ids: _Optional[_Iterable[str]] = ..., wait_waiter_generations: _Optional[_Iterable[int]] = ..., wait_target_ids: _Optional[_Iterable[str]] = ..., wait_target_generations: _Optional[_Iterable[int]] = ..., wait_edge_versions: _Optional[_Iterable[int]] = ..., wait_reasons: _Optional[_Iterable[str]] = ..., wait_registered_at_ms: _Optional[_Iterable[int]] = ..., wait_satisfier_counts: _Optional[_Iterable[int]] = ..., wait_satisfiers: _Optional[_Iterable[str]] = ..., retired_at_ms: _Optional[int] = ..., remedy_names: _Optional[_Iterable[str]] = ..., remedy_outcomes: _Optional[_Iterable[str]] = ..., remedy_reasons: _Optional[_Iterable[str]] = ..., reassigned_approval_ids: _Optional[_Iterable[str]] = ..., reassigned_from_ids: _Optional[_Iterable[str]] = ..., reassigned_from_generations: _Optional[_Iterable[int]] = ..., reassigned_to_ids: _Optional[_Iterable[str]] = ..., reassigned_to_generations: _Optional[_Iterable[int]] = ...) -> None: ...

class TrajectoryRetired(_message.Message):
    __slots__ = ("signature", "observed_total", "recovered_total", "first_seen_epoch", "first_seen_at_ms", "last_seen_at_ms", "retired_at_ms")
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RETIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    signature: str
    observed_total: int
    recovered_total: int
    first_seen_epoch: int
    first_seen_at_ms: int
    last_seen_at_ms: int
    retired_at_ms: int
    def __init__(self, signature: _Optional[str] = ..., observed_total: _Optional[int] = ..., recovered_total: _Optional[int] = ..., first_seen_epoch: _Optional[int] = ..., first_seen_at_ms: _Optional[int] = ..., last_seen_at_ms: _Optional[int] = ..., retired_at_ms: _Optional[int] = ...) -> None: ...

class RetirementPassed(_message.Message):
    __slots__ = ("cutoff_ms", "runs", "executions", "sessions", "proposals", "decisions", "trajectories", "tombstones_forgotten", "more", "targets")
    CUTOFF_MS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    PROPOSALS_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORIES_FIELD_NUMBER: _ClassVar[int]
    TOMBSTONES_FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    cutoff_ms: int
    runs: int
    executions: int
    sessions: int
    proposals: int
    decisions: int
    trajectories: int
    tombstones_forgotten: int
    more: bool
    targets: int
    def __init__(self, cutoff_ms: _Optional[int] = ..., runs: _Optional[int] = ..., executions: _Optional[int] = ..., sessions: _Optional[int] = ..., proposals: _Optional[int] = ..., decisions: _Optional[int] = ..., trajectories: _Optional[int] = ..., tombstones_forgotten: _Optional[int] = ..., more: _Optional[bool] = ..., targets: _Optional[int] = ...) -> None: ...

class Effect(_message.Message):
    __slots__ = ("session_joined", "session_renewed", "session_ended", "execution_created", "execution_state_changed", "generation_advanced", "target_created", "satisfier_declared", "satisfier_closed", "acquired", "released", "wait_registered", "wait_closed", "artifact_produced", "approval_decided", "side_effect_recorded", "cost_recorded", "recovery_configured", "mode_changed", "recovery_proposed", "recovery_retracted", "vote_recorded", "recovery_rejected", "epoch_committed", "victim_chosen", "yielded", "livelock_detected", "recovery_escalated", "cancel_generation_raised", "cancel_requested", "cancel_acknowledged", "cancellation_stable", "cancel_slo_exceeded", "resource_quarantined", "quarantine_released", "reconciliation_opened", "compensation_queued", "task_claimed", "claim_renewed", "claim_released", "tool_call_accepted", "admission_changed", "cancellation_configured", "execution_retired", "run_retired", "session_retired", "proposal_retired", "decision_retired", "trajectory_retired", "retirement_passed", "target_retired", "approver_changed")
    SESSION_JOINED_FIELD_NUMBER: _ClassVar[int]
    SESSION_RENEWED_FIELD_NUMBER: _ClassVar[int]
    SESSION_ENDED_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_CREATED_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_STATE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ADVANCED_FIELD_NUMBER: _ClassVar[int]
    TARGET_CREATED_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_DECLARED_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_CLOSED_FIELD_NUMBER: _ClassVar[int]
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    WAIT_REGISTERED_FIELD_NUMBER: _ClassVar[int]
    WAIT_CLOSED_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_PRODUCED_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_DECIDED_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECT_RECORDED_FIELD_NUMBER: _ClassVar[int]
    COST_RECORDED_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    MODE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_PROPOSED_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_RETRACTED_FIELD_NUMBER: _ClassVar[int]
    VOTE_RECORDED_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_REJECTED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    VICTIM_CHOSEN_FIELD_NUMBER: _ClassVar[int]
    YIELDED_FIELD_NUMBER: _ClassVar[int]
    LIVELOCK_DETECTED_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_ESCALATED_FIELD_NUMBER: _ClassVar[int]
    CANCEL_GENERATION_RAISED_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    CANCEL_ACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    CANCELLATION_STABLE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_SLO_EXCEEDED_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    QUARANTINE_RELEASED_FIELD_NUMBER: _ClassVar[int]
    RECONCILIATION_OPENED_FIELD_NUMBER: _ClassVar[int]
    COMPENSATION_QUEUED_FIELD_NUMBER: _ClassVar[int]
    TASK_CLAIMED_FIELD_NUMBER: _ClassVar[int]
    CLAIM_RENEWED_FIELD_NUMBER: _ClassVar[int]
    CLAIM_RELEASED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_CHANGED_FIELD_NUMBER: _ClassVar[int]
    CANCELLATION_CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_RETIRED_FIELD_NUMBER: _ClassVar[int]
    RUN_RETIRED_FIELD_NUMBER: _ClassVar[int]
    SESSION_RETIRED_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_RETIRED_FIELD_NUMBER: _ClassVar[int]
    DECISION_RETIRED_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_RETIRED_FIELD_NUMBER: _ClassVar[int]
    RETIREMENT_PASSED_FIELD_NUMBER: _ClassVar[int]
    TARGET_RETIRED_FIELD_NUMBER: _ClassVar[int]
    APPROVER_CHANGED_FIELD_NUMBER: _ClassVar[int]
    session_joined: SessionJoined
    session_renewed: SessionRenewed
    session_ended: SessionEnded
    execution_created: ExecutionCreated
    execution_state_changed: ExecutionStateChanged
    generation_advanced: GenerationAdvanced
    target_created: TargetCreated
    satisfier_declared: SatisfierDeclared
    satisfier_closed: SatisfierClosed
    acquired: Acquired
    released: Released
    wait_registered: WaitRegistered
    wait_closed: WaitClosed
    artifact_produced: ArtifactProduced
    approval_decided: ApprovalDecided
    side_effect_recorded: SideEffectRecorded
    cost_recorded: CostRecorded
    recovery_configured: RecoveryConfigured
    mode_changed: ModeChanged
    recovery_proposed: RecoveryProposed
    recovery_retracted: RecoveryRetracted
    vote_recorded: VoteRecorded
    recovery_rejected: RecoveryRejected
    epoch_committed: EpochCommitted
    victim_chosen: VictimChosen
    yielded: Yielded
    livelock_detected: LivelockDetected
    recovery_escalated: RecoveryEscalated
    cancel_generation_raised: CancelGenerationRaised
    cancel_requested: CancelRequested
    cancel_acknowledged: CancelAcknowledged
    cancellation_stable: CancellationStable
    cancel_slo_exceeded: CancelSloExceeded
    resource_quarantined: ResourceQuarantined
    quarantine_released: QuarantineReleased
    reconciliation_opened: ReconciliationOpened
    compensation_queued: CompensationQueued
    task_claimed: TaskClaimed
    claim_renewed: ClaimRenewed
    claim_released: ClaimReleased
    tool_call_accepted: ToolCallAccepted
    admission_changed: AdmissionChanged
    cancellation_configured: CancellationConfigured
    execution_retired: ExecutionRetired
    run_retired: RunRetired
    session_retired: SessionRetired
    proposal_retired: ProposalRetired
    decision_retired: DecisionRetired
    trajectory_retired: TrajectoryRetired
    retirement_passed: RetirementPassed
    target_retired: TargetRetired
    approver_changed: ApproverChanged
    def __init__(self, session_joined: _Optional[_Union[SessionJoined, _Mapping]] = ..., session_renewed: _Optional[_Union[SessionRenewed, _Mapping]] = ..., session_ended: _Optional[_Union[SessionEnded, _Mapping]] = ..., execution_created: _Optional[_Union[ExecutionCreated, _Mapping]] = ..., execution_state_changed: _Optional[_Union[ExecutionStateChanged, _Mapping]] = ..., generation_advanced: _Optional[_Union[GenerationAdvanced, _Mapping]] = ..., target_created: _Optional[_Union[TargetCreated, _Mapping]] = ..., satisfier_declared: _Optional[_Union[SatisfierDeclared, _Mapping]] = ..., satisfier_closed: _Optional[_Union[SatisfierClosed, _Mapping]] = ..., acquired: _Optional[_Union[Acquired, _Mapping]] = ..., released: _Optional[_Union[Released, _Mapping]] = ..., wait_registered: _Optional[_Union[WaitRegistered, _Mapping]] = ..., wait_closed: _Optional[_Union[WaitClosed, _Mapping]] = ..., artifact_produced: _Optional[_Union[ArtifactProduced, _Mapping]] = ..., approval_decided: _Optional[_Union[ApprovalDecided, _Mapping]] = ..., side_effect_recorded: _Optional[_Union[SideEffectRecorded, _Mapping]] = ..., cost_recorded: _Optional[_Union[CostRecorded, _Mapping]] = ..., recovery_configured: _Optional[_Union[RecoveryConfigured, _Mapping]] = ..., mode_changed: _Optional[_Union[ModeChanged, _Mapping]] = ..., recovery_proposed: _Optional[_Union[RecoveryProposed, _Mapping]] = ..., recovery_retracted: _Optional[_Union[RecoveryRetracted, _Mapping]] = ..., vote_recorded: _Optional[_Union[VoteRecorded, _Mapping]] = ..., recovery_rejected: _Optional[_Union[RecoveryRejected, _Mapping]] = ..., epoch_committed: _Optional[_Union[EpochCommitted, _Mapping]] = ..., victim_chosen: _Optional[_Union[VictimChosen, _Mapping]] = ..., yielded: _Optional[_Union[Yielded, _Mapping]] = ..., livelock_detected: _Optional[_Union[LivelockDetected, _Mapping]] = ..., recovery_escalated: _Optional[_Union[RecoveryEscalated, _Mapping]] = ..., cancel_generation_raised: _Optional[_Union[CancelGenerationRaised, _Mapping]] = ..., cancel_requested: _Optional[_Union[CancelRequested, _Mapping]] = ..., cancel_acknowledged: _Optional[_Union[CancelAcknowledged, _Mapping]] = ..., cancellation_stable: _Optional[_Union[CancellationStable, _Mapping]] = ..., cancel_slo_exceeded: _Optional[_Union[CancelSloExceeded, _Mapping]] = ..., resource_quarantined: _Optional[_Union[ResourceQuarantined, _Mapping]] = ..., quarantine_released: _Optional[_Union[QuarantineReleased, _Mapping]] = ..., reconciliation_opened: _Optional[_Union[ReconciliationOpened, _Mapping]] = ..., compensation_queued: _Optional[_Union[CompensationQueued, _Mapping]] = ..., task_claimed: _Optional[_Union[TaskClaimed, _Mapping]] = ..., claim_renewed: _Optional[_Union[ClaimRenewed, _Mapping]] = ..., claim_released: _Optional[_Union[ClaimReleased, _Mapping]] = ..., tool_call_accepted: _Optional[_Union[ToolCallAccepted, _Mapping]] = ..., admission_changed: _Optional[_Union[AdmissionChanged, _Mapping]] = ..., cancellation_configured: _Optional[_Union[CancellationConfigured, _Mapping]] = ..., execution_retired: _Optional[_Union[ExecutionRetired, _Mapping]] = ..., run_retired: _Optional[_Union[RunRetired, _Mapping]] = ..., session_retired: _Optional[_Union[SessionRetired, _Mapping]] = ..., proposal_retired: _Optional[_Union[ProposalRetired, _Mapping]] = ..., decision_retired: _Optional[_Union[DecisionRetired, _Mapping]] = ..., trajectory_retired: _Optional[_Union[TrajectoryRetired, _Mapping]] = ..., retirement_passed: _Optional[_Union[RetirementPassed, _Mapping]] = ..., target_retired: _Optional[_Union[TargetRetired, _Mapping]] = ..., approver_changed: _Optional[_Union[ApproverChanged, _Mapping]] = ...) -> None: ...
