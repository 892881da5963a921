from . import commands_pb2 as _commands_pb2
from . import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WatchEventsRequest(_message.Message):
    __slots__ = ("after_cursor", "kinds", "agent_id", "agent_ids", "authorizations")
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZATIONS_FIELD_NUMBER: _ClassVar[int]
    after_cursor: int
    kinds: _containers.RepeatedScalarFieldContainer[str]
    agent_id: str
    agent_ids: _containers.RepeatedScalarFieldContainer[str]
    authorizations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, after_cursor: _Optional[int] = ..., kinds: _Optional[_Iterable[str]] = ..., agent_id: _Optional[str] = ..., agent_ids: _Optional[_Iterable[str]] = ..., authorizations: _Optional[_Iterable[str]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("cursor", "log_index", "agent_ids", "effect")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    log_index: int
    agent_ids: _containers.RepeatedScalarFieldContainer[str]
    effect: _types_pb2.Effect
    def __init__(self, cursor: _Optional[int] = ..., log_index: _Optional[int] = ..., agent_ids: _Optional[_Iterable[str]] = ..., effect: _Optional[_Union[_types_pb2.Effect, _Mapping]] = ...) -> None: ...

class WatchPosition(_message.Message):
    __slots__ = ("cursor", "horizon")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    horizon: int
    def __init__(self, cursor: _Optional[int] = ..., horizon: _Optional[int] = ...) -> None: ...

class WatchEventsResponse(_message.Message):
    __slots__ = ("event", "started", "progress")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    event: Event
    started: WatchPosition
    progress: WatchPosition
    def __init__(self, event: _Optional[_Union[Event, _Mapping]] = ..., started: _Optional[_Union[WatchPosition, _Mapping]] = ..., progress: _Optional[_Union[WatchPosition, _Mapping]] = ...) -> None: ...

class WriteItem(_message.Message):
    __slots__ = ("authorization", "join_session", "heartbeat", "leave_session", "create_execution", "start_execution", "resume_execution", "complete_execution", "fail_execution", "retry_execution", "create_target", "declare_satisfier", "acquire", "release", "register_wait", "close_wait", "produce_artifact", "decide_approval", "record_side_effect", "record_cost", "claim_task", "renew_claim", "accept_tool_call", "ack_cancel", "cancel_run", "vote")
    AUTHORIZATION_FIELD_NUMBER: _ClassVar[int]
    JOIN_SESSION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    LEAVE_SESSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    START_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    RESUME_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    FAIL_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    RETRY_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TARGET_FIELD_NUMBER: _ClassVar[int]
    DECLARE_SATISFIER_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    REGISTER_WAIT_FIELD_NUMBER: _ClassVar[int]
    CLOSE_WAIT_FIELD_NUMBER: _ClassVar[int]
    PRODUCE_ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    DECIDE_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    RECORD_SIDE_EFFECT_FIELD_NUMBER: _ClassVar[int]
    RECORD_COST_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TASK_FIELD_NUMBER: _ClassVar[int]
    RENEW_CLAIM_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    ACK_CANCEL_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RUN_FIELD_NUMBER: _ClassVar[int]
    VOTE_FIELD_NUMBER: _ClassVar[int]
    authorization: str
    join_session: _commands_pb2.JoinSessionRequest
    heartbeat: _commands_pb2.HeartbeatRequest
    leave_session: _commands_pb2.LeaveSessionRequest
    create_execution: _commands_pb2.CreateExecutionRequest
    start_execution: _commands_pb2.StartExecutionRequest
    resume_execution: _commands_pb2.ResumeExecutionRequest
    complete_execution: _commands_pb2.CompleteExecutionRequest
    fail_execution: _commands_pb2.FailExecutionRequest
    retry_execution: _commands_pb2.RetryExecutionRequest
    create_target: _commands_pb2.CreateTargetRequest
    declare_satisfier: _commands_pb2.DeclareSatisfierRequest
    acquire: _commands_pb2.AcquireRequest
    release: _commands_pb2.ReleaseRequest
    register_wait: _commands_pb2.RegisterWaitRequest
    close_wait: _commands_pb2.CloseWaitRequest
    produce_artifact: _commands_pb2.ProduceArtifactRequest
    decide_approval: _commands_pb2.DecideApprovalRequest
    record_side_effect: _commands_pb2.RecordSideEffectRequest
    record_cost: _commands_pb2.RecordCostRequest
    claim_task: _commands_pb2.ClaimTaskRequest
    renew_claim: _commands_pb2.RenewClaimRequest
    accept_tool_call: _commands_pb2.AcceptToolCallRequest
    ack_cancel: _commands_pb2.AckCancelRequest
    cancel_run: _commands_pb2.CancelRunRequest
    vote: _commands_pb2.VoteRequest
    def __init__(self, authorization: _Optional[str] = ..., join_session: _Optional[_Union[_commands_pb2.JoinSessionRequest, _Mapping]] = ..., heartbeat: _Optional[_Union[_commands_pb2.HeartbeatRequest, _Mapping]] = ..., leave_session: _Optional[_Union[_commands_pb2.LeaveSessionRequest, _Mapping]] = ..., create_execution: _Optional[_Union[_commands_pb2.CreateExecutionRequest, _Mapping]] = ..., start_execution: _Optional[_Union[_commands_pb2.StartExecutionRequest, _Mapping]] = ..., resume_execution: _Optional[_Union[_commands_pb2.ResumeExecutionRequest, _Mapping]] = ..., complete_execution: _Optional[_Union[_commands_pb2.CompleteExecutionRequest, _Mapping]] = ..., fail_execution: _Optional[_Union[_commands_pb2.FailExecutionRequest, _Mapping]] = ..., retry_execution: _Optional[_Union[_commands_pb2.RetryExecutionRequest, _Mapping]] = ..., create_target: _Optional[_Union[_commands_pb2.CreateTargetRequest, _Mapping]] = ..., declare_satisfier: _Optional[_Union[_commands_pb2.DeclareSatisfierRequest, _Mapping]] = ..., acquire: _Optional[_Union[_commands_pb2.AcquireRequest, _Mapping]] = ..., release: _Optional[_Union[_commands_pb2.ReleaseRequest, _Mapping]] = ..., register_wait: _Optional[_Union[_commands_pb2.RegisterWaitRequest, _Mapping]] = ..., close_wait: _Optional[_Union[_commands_pb2.CloseWaitRequest, _Mapping]] = ..., produce_artifact: _Optional[_Union[_commands_pb2.ProduceArtifactRequest, _Mapping]] = ..., decide_approval: _Optional[_Union[_commands_pb2.DecideApprovalRequest, _Mapping]] = ..., record_side_effect: _Optional[_Union[_commands_pb2.RecordSideEffectRequest, _Mapping]] = ..., record_cost: _Optional[_Union[_commands_pb2.RecordCostRequest, _Mapping]] = ..., claim_task: _Optional[_Union[_commands_pb2.ClaimTaskRequest, _Mapping]] = ..., renew_claim: _Optional[_Union[_commands_pb2.RenewClaimRequest, _Mapping]] = ..., accept_tool_call: _Optional[_Union[_commands_pb2.AcceptToolCallRequest, _Mapping]] = ..., ack_cancel: _Optional[_Union[_commands_pb2.AckCancelRequest, _Mapping]] = ..., cancel_run: _Optional[_Union[_commands_pb2.CancelRunRequest, _Mapping]] = ..., vote: _Optional[_Union[_commands_pb2.VoteRequest, _Mapping]] = ...) -> None: ...

class WriteBatchRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[WriteItem]
    def __init__(self, items: _Optional[_Iterable[_Union[WriteItem, _Mapping]]] = ...) -> None: ...

class WriteResult(_message.Message):
    __slots__ = ("status_code", "details", "outcome", "code", "leader_address", "leader_id", "retry_same_request_id")
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_SAME_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    status_code: int
    details: str
    outcome: _types_pb2.Outcome
    code: str
    leader_address: str
    leader_id: str
    retry_same_request_id: bool
    def __init__(self, status_code: _Optional[int] = ..., details: _Optional[str] = ..., outcome: _Optional[_Union[_types_pb2.Outcome, _Mapping]] = ..., code: _Optional[str] = ..., leader_address: _Optional[str] = ..., leader_id: _Optional[str] = ..., retry_same_request_id: _Optional[bool] = ...) -> None: ...

class WriteBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[WriteResult]
    def __init__(self, results: _Optional[_Iterable[_Union[WriteResult, _Mapping]]] = ...) -> None: ...
