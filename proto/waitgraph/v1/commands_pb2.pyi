from . import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JoinSessionRequest(_message.Message):
    __slots__ = ("request_id", "agent_id", "lease_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    agent_id: str
    lease_ms: int
    def __init__(self, request_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("request_id", "agent_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    agent_id: str
    def __init__(self, request_id: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class LeaveSessionRequest(_message.Message):
    __slots__ = ("request_id", "agent_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    agent_id: str
    def __init__(self, request_id: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class CreateExecutionRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "run_id", "parent_id", "agent_id", "priority", "checkpoint", "unique_evidence", "observed_cancel_generation")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    run_id: str
    parent_id: str
    agent_id: str
    priority: int
    checkpoint: bool
    unique_evidence: bool
    observed_cancel_generation: int
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., run_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., priority: _Optional[int] = ..., checkpoint: _Optional[bool] = ..., unique_evidence: _Optional[bool] = ..., observed_cancel_generation: _Optional[int] = ...) -> None: ...

class StartExecutionRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation", "observed_cancel_generation")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    observed_cancel_generation: int
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., observed_cancel_generation: _Optional[int] = ...) -> None: ...

class ResumeExecutionRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class CompleteExecutionRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation", "observed_cancel_generation")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    observed_cancel_generation: int
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., observed_cancel_generation: _Optional[int] = ...) -> None: ...

class FailExecutionRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class RetryExecutionRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class CreateTargetRequest(_message.Message):
    __slots__ = ("request_id", "target_id", "slots")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    target_id: str
    slots: int
    def __init__(self, request_id: _Optional[str] = ..., target_id: _Optional[str] = ..., slots: _Optional[int] = ...) -> None: ...

class DeclareSatisfierRequest(_message.Message):
    __slots__ = ("request_id", "target_id", "target_generation", "satisfier_id", "satisfier_generation")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_ID_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    target_id: str
    target_generation: int
    satisfier_id: str
    satisfier_generation: int
    def __init__(self, request_id: _Optional[str] = ..., target_id: _Optional[str] = ..., target_generation: _Optional[int] = ..., satisfier_id: _Optional[str] = ..., satisfier_generation: _Optional[int] = ...) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("request_id", "target_id", "execution_id", "generation", "observed_epoch", "ttl_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    target_id: str
    execution_id: str
    generation: int
    observed_epoch: int
    ttl_ms: int
    def __init__(self, request_id: _Optional[str] = ..., target_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., observed_epoch: _Optional[int] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("request_id", "target_id", "execution_id", "generation")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    target_id: str
    execution_id: str
    generation: int
    def __init__(self, request_id: _Optional[str] = ..., target_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class RegisterWaitRequest(_message.Message):
    __slots__ = ("request_id", "waiter_id", "waiter_generation", "target_id", "target_generation", "reason", "deadline_ms", "cancel_mode", "edge_version", "refuse_deadlock", "priority", "lease_ttl_ms", "trace_context")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WAITER_ID_FIELD_NUMBER: _ClassVar[int]
    WAITER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_MODE_FIELD_NUMBER: _ClassVar[int]
    EDGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    REFUSE_DEADLOCK_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    waiter_id: str
    waiter_generation: int
    target_id: str
    target_generation: int
    reason: str
    deadline_ms: int
    cancel_mode: _types_pb2.CancelMode
    edge_version: int
    refuse_deadlock: bool
    priority: int
    lease_ttl_ms: int
    trace_context: str
    def __init__(self, request_id: _Optional[str] = ..., waiter_id: _Optional[str] = ..., waiter_generation: _Optional[int] = ..., target_id: _Optional[str] = ..., target_generation: _Optional[int] = ..., reason: _Optional[str] = ..., deadline_ms: _Optional[int] = ..., cancel_mode: _Optional[_Union[_types_pb2.CancelMode, str]] = ..., edge_version: _Optional[int] = ..., refuse_deadlock: _Optional[bool] = ..., priority: _Optional[int] = ..., lease_ttl_ms: _Optional[int] = ..., trace_context: _Optional[str] = ...) -> None: ...

class CloseWaitRequest(_message.Message):
    __slots__ = ("request_id", "waiter_id", "waiter_generation", "target_id", "edge_version", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WAITER_ID_FIELD_NUMBER: _ClassVar[int]
    WAITER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    EDGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    waiter_id: str
    waiter_generation: int
    target_id: str
    edge_version: int
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., waiter_id: _Optional[str] = ..., waiter_generation: _Optional[int] = ..., target_id: _Optional[str] = ..., edge_version: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ProduceArtifactRequest(_message.Message):
    __slots__ = ("request_id", "artifact_id", "version")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    artifact_id: str
    version: int
    def __init__(self, request_id: _Optional[str] = ..., artifact_id: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class DecideApprovalRequest(_message.Message):
    __slots__ = ("request_id", "approval_id", "version", "approved")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    approval_id: str
    version: int
    approved: bool
    def __init__(self, request_id: _Optional[str] = ..., approval_id: _Optional[str] = ..., version: _Optional[int] = ..., approved: _Optional[bool] = ...) -> None: ...

class RecordSideEffectRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation", "effect_id", "outcome", "compensatable")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    EFFECT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    COMPENSATABLE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    effect_id: str
    outcome: _types_pb2.EffectOutcome
    compensatable: bool
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., effect_id: _Optional[str] = ..., outcome: _Optional[_Union[_types_pb2.EffectOutcome, str]] = ..., compensatable: _Optional[bool] = ...) -> None: ...

class RecordCostRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation", "cost")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    cost: int
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., cost: _Optional[int] = ...) -> None: ...

class ClaimTaskRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation", "observed_cancel_generation", "lease_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    observed_cancel_generation: int
    lease_ms: int
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., observed_cancel_generation: _Optional[int] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class RenewClaimRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation", "observed_cancel_generation")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    observed_cancel_generation: int
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., observed_cancel_generation: _Optional[int] = ...) -> None: ...

class AcceptToolCallRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation", "observed_cancel_generation", "effect_id", "compensatable")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    EFFECT_ID_FIELD_NUMBER: _ClassVar[int]
    COMPENSATABLE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    observed_cancel_generation: int
    effect_id: str
    compensatable: bool
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., observed_cancel_generation: _Optional[int] = ..., effect_id: _Optional[str] = ..., compensatable: _Optional[bool] = ...) -> None: ...

class AckCancelRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation", "cancel_generation", "side_effects")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    cancel_generation: int
    side_effects: _types_pb2.EffectOutcome
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., cancel_generation: _Optional[int] = ..., side_effects: _Optional[_Union[_types_pb2.EffectOutcome, str]] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "observed_cancel_generation", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    observed_cancel_generation: int
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., observed_cancel_generation: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class VoteRequest(_message.Message):
    __slots__ = ("request_id", "digest", "approve")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    digest: str
    approve: bool
    def __init__(self, request_id: _Optional[str] = ..., digest: _Optional[str] = ..., approve: _Optional[bool] = ...) -> None: ...

class SetModeRequest(_message.Message):
    __slots__ = ("request_id", "mode", "run_id", "side_effect_free")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECT_FREE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    mode: _types_pb2.RolloutMode
    run_id: str
    side_effect_free: bool
    def __init__(self, request_id: _Optional[str] = ..., mode: _Optional[_Union[_types_pb2.RolloutMode, str]] = ..., run_id: _Optional[str] = ..., side_effect_free: _Optional[bool] = ...) -> None: ...

class SetApproverRequest(_message.Message):
    __slots__ = ("request_id", "approver_id", "run_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVER_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    approver_id: str
    run_id: str
    def __init__(self, request_id: _Optional[str] = ..., approver_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class FreezeRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class UnfreezeRequest(_message.Message):
    __slots__ = ("request_id", "run_id", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    run_id: str
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReleaseQuarantineRequest(_message.Message):
    __slots__ = ("request_id", "execution_id", "generation", "side_effects", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    execution_id: str
    generation: int
    side_effects: _types_pb2.EffectOutcome
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., side_effects: _Optional[_Union[_types_pb2.EffectOutcome, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class ConfigureRecoveryRequest(_message.Message):
    __slots__ = ("request_id", "voters", "quorum", "max_rollback", "confirmation_window_ms", "livelock_repeats", "livelock_window_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    MAX_ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    LIVELOCK_REPEATS_FIELD_NUMBER: _ClassVar[int]
    LIVELOCK_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    voters: _containers.RepeatedScalarFieldContainer[str]
    quorum: int
    max_rollback: int
    confirmation_window_ms: int
    livelock_repeats: int
    livelock_window_ms: int
    def __init__(self, request_id: _Optional[str] = ..., voters: _Optional[_Iterable[str]] = ..., quorum: _Optional[int] = ..., max_rollback: _Optional[int] = ..., confirmation_window_ms: _Optional[int] = ..., livelock_repeats: _Optional[int] = ..., livelock_window_ms: _Optional[int] = ...) -> None: ...

class ConfigureCancellationRequest(_message.Message):
    __slots__ = ("request_id", "slo_ms", "reemit_interval_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SLO_MS_FIELD_NUMBER: _ClassVar[int]
    REEMIT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    slo_ms: int
    reemit_interval_ms: int
    def __init__(self, request_id: _Optional[str] = ..., slo_ms: _Optional[int] = ..., reemit_interval_ms: _Optional[int] = ...) -> None: ...
