from . import commands_pb2 as _commands_pb2
from . import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemberView(_message.Message):
    __slots__ = ("node_id", "raft_address", "grpc_address", "leader", "connected", "this_node")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    THIS_NODE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    raft_address: str
    grpc_address: str
    leader: bool
    connected: bool
    this_node: bool
    def __init__(self, node_id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., leader: _Optional[bool] = ..., connected: _Optional[bool] = ..., this_node: _Optional[bool] = ...) -> None: ...

class ListMembersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListMembersResponse(_message.Message):
    __slots__ = ("members", "node_id", "pending_change_index", "voters", "quorum", "max_rollback")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PENDING_CHANGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    MAX_ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[MemberView]
    node_id: str
    pending_change_index: int
    voters: _containers.RepeatedScalarFieldContainer[str]
    quorum: int
    max_rollback: int
    def __init__(self, members: _Optional[_Iterable[_Union[MemberView, _Mapping]]] = ..., node_id: _Optional[str] = ..., pending_change_index: _Optional[int] = ..., voters: _Optional[_Iterable[str]] = ..., quorum: _Optional[int] = ..., max_rollback: _Optional[int] = ...) -> None: ...

class AddMemberRequest(_message.Message):
    __slots__ = ("node_id", "raft_address", "grpc_address")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    raft_address: str
    grpc_address: str
    def __init__(self, node_id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ...) -> None: ...

class RemoveMemberRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    def __init__(self, node_id: _Optional[str] = ...) -> None: ...

class MemberChangeResponse(_message.Message):
    __slots__ = ("members", "voters", "quorum", "max_rollback")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    MAX_ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[MemberView]
    voters: _containers.RepeatedScalarFieldContainer[str]
    quorum: int
    max_rollback: int
    def __init__(self, members: _Optional[_Iterable[_Union[MemberView, _Mapping]]] = ..., voters: _Optional[_Iterable[str]] = ..., quorum: _Optional[int] = ..., max_rollback: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("include_digest", "fresh")
    INCLUDE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    include_digest: bool
    fresh: bool
    def __init__(self, include_digest: _Optional[bool] = ..., fresh: _Optional[bool] = ...) -> None: ...

class PeerStatus(_message.Message):
    __slots__ = ("node_id", "raft_address", "grpc_address", "connected")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    raft_address: str
    grpc_address: str
    connected: bool
    def __init__(self, node_id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., connected: _Optional[bool] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("node_id", "raft_address", "grpc_address", "role", "leader_id", "leader_address", "term", "commit_index", "applied_index", "has_quorum", "ready", "epoch", "mode", "admission_frozen", "admission_frozen_reason", "frozen_runs", "recovery_configured", "voters", "quorum", "max_rollback", "now_ms", "state_digest", "stale", "peers", "open_proposals", "decisions", "event_head_cursor", "event_horizon_cursor", "counters", "orphaned_executions", "durable", "approver", "grpc_front", "sessions")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    HAS_QUORUM_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_FROZEN_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_FROZEN_REASON_FIELD_NUMBER: _ClassVar[int]
    FROZEN_RUNS_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    MAX_ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    OPEN_PROPOSALS_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    EVENT_HEAD_CURSOR_FIELD_NUMBER: _ClassVar[int]
    EVENT_HORIZON_CURSOR_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    ORPHANED_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    APPROVER_FIELD_NUMBER: _ClassVar[int]
    GRPC_FRONT_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    raft_address: str
    grpc_address: str
    role: str
    leader_id: str
    leader_address: str
    term: int
    commit_index: int
    applied_index: int
    has_quorum: bool
    ready: bool
    epoch: int
    mode: _types_pb2.RolloutMode
    admission_frozen: bool
    admission_frozen_reason: str
    frozen_runs: int
    recovery_configured: bool
    voters: _containers.RepeatedScalarFieldContainer[str]
    quorum: int
    max_rollback: int
    now_ms: int
    state_digest: str
    stale: bool
    peers: _containers.RepeatedCompositeFieldContainer[PeerStatus]
    open_proposals: int
    decisions: int
    event_head_cursor: int
    event_horizon_cursor: int
    counters: _containers.ScalarMap[str, int]
    orphaned_executions: int
    durable: bool
    approver: str
    grpc_front: str
    sessions: SessionsStatus
    def __init__(self, node_id: _Optional[str] = ..., raft_address: _Optional[str] = ..., grpc_address: _Optional[str] = ..., role: _Optional[str] = ..., leader_id: _Optional[str] = ..., leader_address: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., has_quorum: _Optional[bool] = ..., ready: _Optional[bool] = ..., epoch: _Optional[int] = ..., mode: _Optional[_Union[_types_pb2.RolloutMode, str]] = ..., admission_frozen: _Optional[bool] = ..., admission_frozen_reason: _Optional[str] = ..., frozen_runs: _Optional[int] = ..., recovery_configured: _Optional[bool] = ..., voters: _Optional[_Iterable[str]] = ..., quorum: _Optional[int] = ..., max_rollback: _Optional[int] = ..., now_ms: _Optional[int] = ..., state_digest: _Optional[str] = ..., stale: _Optional[bool] = ..., peers: _Optional[_Iterable[_Union[PeerStatus, _Mapping]]] = ..., open_proposals: _Optional[int] = ..., decisions: _Optional[int] = ..., event_head_cursor: _Optional[int] = ..., event_horizon_cursor: _Optional[int] = ..., counters: _Optional[_Mapping[str, int]] = ..., orphaned_executions: _Optional[int] = ..., durable: _Optional[bool] = ..., approver: _Optional[str] = ..., grpc_front: _Optional[str] = ..., sessions: _Optional[_Union[SessionsStatus, _Mapping]] = ...) -> None: ...

class SessionsStatus(_message.Message):
    __slots__ = ("active", "here", "leading", "oldest_heartbeat_age_ms", "suspended", "suspended_count", "max_per_node", "max_per_cluster", "heartbeat_age_p99_ms", "suspended_sessions", "mode")
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    HERE_FIELD_NUMBER: _ClassVar[int]
    LEADING_FIELD_NUMBER: _ClassVar[int]
    OLDEST_HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    MAX_PER_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AGE_P99_MS_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    active: int
    here: int
    leading: bool
    oldest_heartbeat_age_ms: int
    suspended: _containers.RepeatedScalarFieldContainer[str]
    suspended_count: int
    max_per_node: int
    max_per_cluster: int
    heartbeat_age_p99_ms: int
    suspended_sessions: _containers.RepeatedCompositeFieldContainer[SuspendedSession]
    mode: str
    def __init__(self, active: _Optional[int] = ..., here: _Optional[int] = ..., leading: _Optional[bool] = ..., oldest_heartbeat_age_ms: _Optional[int] = ..., suspended: _Optional[_Iterable[str]] = ..., suspended_count: _Optional[int] = ..., max_per_node: _Optional[int] = ..., max_per_cluster: _Optional[int] = ..., heartbeat_age_p99_ms: _Optional[int] = ..., suspended_sessions: _Optional[_Iterable[_Union[SuspendedSession, _Mapping]]] = ..., mode: _Optional[str] = ...) -> None: ...

class SuspendedSession(_message.Message):
    __slots__ = ("agent_id", "heartbeat_age_ms")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    heartbeat_age_ms: int
    def __init__(self, agent_id: _Optional[str] = ..., heartbeat_age_ms: _Optional[int] = ...) -> None: ...

class GraphRequest(_message.Message):
    __slots__ = ("run_id", "agent_id", "limit", "fresh", "statuses", "around", "hops")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    AROUND_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    agent_id: str
    limit: int
    fresh: bool
    statuses: _containers.RepeatedScalarFieldContainer[_types_pb2.ExecStatus]
    around: _containers.RepeatedScalarFieldContainer[str]
    hops: int
    def __init__(self, run_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., limit: _Optional[int] = ..., fresh: _Optional[bool] = ..., statuses: _Optional[_Iterable[_Union[_types_pb2.ExecStatus, str]]] = ..., around: _Optional[_Iterable[str]] = ..., hops: _Optional[int] = ...) -> None: ...

class SideEffectView(_message.Message):
    __slots__ = ("effect_id", "outcome", "compensatable", "generation")
    EFFECT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    COMPENSATABLE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    effect_id: str
    outcome: _types_pb2.EffectOutcome
    compensatable: bool
    generation: int
    def __init__(self, effect_id: _Optional[str] = ..., outcome: _Optional[_Union[_types_pb2.EffectOutcome, str]] = ..., compensatable: _Optional[bool] = ..., generation: _Optional[int] = ...) -> None: ...

class ExecutionView(_message.Message):
    __slots__ = ("execution_id", "run_id", "parent_id", "agent_id", "generation", "status", "priority", "checkpoint", "unique_evidence", "cost_consumed", "created_at_ms", "status_at_ms", "children", "side_effects", "orphaned")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    COST_CONSUMED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    STATUS_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    ORPHANED_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    run_id: str
    parent_id: str
    agent_id: str
    generation: int
    status: _types_pb2.ExecStatus
    priority: int
    checkpoint: bool
    unique_evidence: bool
    cost_consumed: int
    created_at_ms: int
    status_at_ms: int
    children: _containers.RepeatedScalarFieldContainer[str]
    side_effects: _containers.RepeatedCompositeFieldContainer[SideEffectView]
    orphaned: bool
    def __init__(self, execution_id: _Optional[str] = ..., run_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., generation: _Optional[int] = ..., status: _Optional[_Union[_types_pb2.ExecStatus, str]] = ..., priority: _Optional[int] = ..., checkpoint: _Optional[bool] = ..., unique_evidence: _Optional[bool] = ..., cost_consumed: _Optional[int] = ..., created_at_ms: _Optional[int] = ..., status_at_ms: _Optional[int] = ..., children: _Optional[_Iterable[str]] = ..., side_effects: _Optional[_Iterable[_Union[SideEffectView, _Mapping]]] = ..., orphaned: _Optional[bool] = ...) -> None: ...

class HolderView(_message.Message):
    __slots__ = ("execution_id", "generation")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class TargetView(_message.Message):
    __slots__ = ("target_id", "slots", "version", "satisfier_id", "satisfier_generation", "satisfier_for", "approved", "holders")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_ID_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SATISFIER_FOR_FIELD_NUMBER: _ClassVar[int]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    slots: int
    version: int
    satisfier_id: str
    satisfier_generation: int
    satisfier_for: int
    approved: bool
    holders: _containers.RepeatedCompositeFieldContainer[HolderView]
    def __init__(self, target_id: _Optional[str] = ..., slots: _Optional[int] = ..., version: _Optional[int] = ..., satisfier_id: _Optional[str] = ..., satisfier_generation: _Optional[int] = ..., satisfier_for: _Optional[int] = ..., approved: _Optional[bool] = ..., holders: _Optional[_Iterable[_Union[HolderView, _Mapping]]] = ...) -> None: ...

class WaitView(_message.Message):
    __slots__ = ("edge_id", "waiter_id", "waiter_generation", "target_id", "target_generation", "reason", "deadline_ms", "cancel_mode", "edge_version", "registered_at_ms", "queue_position")
    EDGE_ID_FIELD_NUMBER: _ClassVar[int]
    WAITER_ID_FIELD_NUMBER: _ClassVar[int]
    WAITER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_MODE_FIELD_NUMBER: _ClassVar[int]
    EDGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    edge_id: str
    waiter_id: str
    waiter_generation: int
    target_id: str
    target_generation: int
    reason: str
    deadline_ms: int
    cancel_mode: _types_pb2.CancelMode
    edge_version: int
    registered_at_ms: int
    queue_position: int
    def __init__(self, edge_id: _Optional[str] = ..., waiter_id: _Optional[str] = ..., waiter_generation: _Optional[int] = ..., target_id: _Optional[str] = ..., target_generation: _Optional[int] = ..., reason: _Optional[str] = ..., deadline_ms: _Optional[int] = ..., cancel_mode: _Optional[_Union[_types_pb2.CancelMode, str]] = ..., edge_version: _Optional[int] = ..., registered_at_ms: _Optional[int] = ..., queue_position: _Optional[int] = ...) -> None: ...

class SessionView(_message.Message):
    __slots__ = ("agent_id", "incarnation", "lease_ms", "expires_at_ms", "status")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    incarnation: int
    lease_ms: int
    expires_at_ms: int
    status: _types_pb2.SessionStatus
    def __init__(self, agent_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., lease_ms: _Optional[int] = ..., expires_at_ms: _Optional[int] = ..., status: _Optional[_Union[_types_pb2.SessionStatus, str]] = ...) -> None: ...

class RunView(_message.Message):
    __slots__ = ("run_id", "root_id", "cancel_generation", "cancel_state")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CANCEL_STATE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    root_id: str
    cancel_generation: int
    cancel_state: _types_pb2.CancelState
    def __init__(self, run_id: _Optional[str] = ..., root_id: _Optional[str] = ..., cancel_generation: _Optional[int] = ..., cancel_state: _Optional[_Union[_types_pb2.CancelState, str]] = ...) -> None: ...

class GraphResponse(_message.Message):
    __slots__ = ("executions", "targets", "waits", "sessions", "runs", "truncated", "stale", "applied_index", "epoch", "matched_executions", "matched_waits", "matched_targets")
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    WAITS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MATCHED_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    MATCHED_WAITS_FIELD_NUMBER: _ClassVar[int]
    MATCHED_TARGETS_FIELD_NUMBER: _ClassVar[int]
    executions: _containers.RepeatedCompositeFieldContainer[ExecutionView]
    targets: _containers.RepeatedCompositeFieldContainer[TargetView]
    waits: _containers.RepeatedCompositeFieldContainer[WaitView]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionView]
    runs: _containers.RepeatedCompositeFieldContainer[RunView]
    truncated: bool
    stale: bool
    applied_index: int
    epoch: int
    matched_executions: int
    matched_waits: int
    matched_targets: int
    def __init__(self, executions: _Optional[_Iterable[_Union[ExecutionView, _Mapping]]] = ..., targets: _Optional[_Iterable[_Union[TargetView, _Mapping]]] = ..., waits: _Optional[_Iterable[_Union[WaitView, _Mapping]]] = ..., sessions: _Optional[_Iterable[_Union[SessionView, _Mapping]]] = ..., runs: _Optional[_Iterable[_Union[RunView, _Mapping]]] = ..., truncated: _Optional[bool] = ..., stale: _Optional[bool] = ..., applied_index: _Optional[int] = ..., epoch: _Optional[int] = ..., matched_executions: _Optional[int] = ..., matched_waits: _Optional[int] = ..., matched_targets: _Optional[int] = ...) -> None: ...

class CyclesRequest(_message.Message):
    __slots__ = ("include_closed", "fresh")
    INCLUDE_CLOSED_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    include_closed: bool
    fresh: bool
    def __init__(self, include_closed: _Optional[bool] = ..., fresh: _Optional[bool] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("execution_id", "generation")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class EdgeRef(_message.Message):
    __slots__ = ("edge_id", "edge_version")
    EDGE_ID_FIELD_NUMBER: _ClassVar[int]
    EDGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    edge_id: str
    edge_version: int
    def __init__(self, edge_id: _Optional[str] = ..., edge_version: _Optional[int] = ...) -> None: ...

class Cycle(_message.Message):
    __slots__ = ("digest", "signature", "members", "edges", "proposal_status")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_STATUS_FIELD_NUMBER: _ClassVar[int]
    digest: str
    signature: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    edges: _containers.RepeatedCompositeFieldContainer[EdgeRef]
    proposal_status: _types_pb2.ProposalStatus
    def __init__(self, digest: _Optional[str] = ..., signature: _Optional[str] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[EdgeRef, _Mapping]]] = ..., proposal_status: _Optional[_Union[_types_pb2.ProposalStatus, str]] = ...) -> None: ...

class ProposalView(_message.Message):
    __slots__ = ("digest", "signature", "members", "edges", "observed_index", "proposer", "proposed_at_ms", "epoch_proposed", "status", "approvals", "rejections", "decision_id", "closed_at_ms", "close_reason", "votes")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_INDEX_FIELD_NUMBER: _ClassVar[int]
    PROPOSER_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_PROPOSED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    CLOSED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CLOSE_REASON_FIELD_NUMBER: _ClassVar[int]
    VOTES_FIELD_NUMBER: _ClassVar[int]
    digest: str
    signature: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    edges: _containers.RepeatedCompositeFieldContainer[EdgeRef]
    observed_index: int
    proposer: str
    proposed_at_ms: int
    epoch_proposed: int
    status: _types_pb2.ProposalStatus
    approvals: _containers.RepeatedScalarFieldContainer[str]
    rejections: _containers.RepeatedScalarFieldContainer[str]
    decision_id: str
    closed_at_ms: int
    close_reason: str
    votes: _containers.RepeatedCompositeFieldContainer[VoteView]
    def __init__(self, digest: _Optional[str] = ..., signature: _Optional[str] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[EdgeRef, _Mapping]]] = ..., observed_index: _Optional[int] = ..., proposer: _Optional[str] = ..., proposed_at_ms: _Optional[int] = ..., epoch_proposed: _Optional[int] = ..., status: _Optional[_Union[_types_pb2.ProposalStatus, str]] = ..., approvals: _Optional[_Iterable[str]] = ..., rejections: _Optional[_Iterable[str]] = ..., decision_id: _Optional[str] = ..., closed_at_ms: _Optional[int] = ..., close_reason: _Optional[str] = ..., votes: _Optional[_Iterable[_Union[VoteView, _Mapping]]] = ...) -> None: ...

class VoteView(_message.Message):
    __slots__ = ("voter", "approve", "at_ms")
    VOTER_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    voter: str
    approve: bool
    at_ms: int
    def __init__(self, voter: _Optional[str] = ..., approve: _Optional[bool] = ..., at_ms: _Optional[int] = ...) -> None: ...

class SoftEdge(_message.Message):
    __slots__ = ("waiter_id", "ahead_id", "target_id")
    WAITER_ID_FIELD_NUMBER: _ClassVar[int]
    AHEAD_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    waiter_id: str
    ahead_id: str
    target_id: str
    def __init__(self, waiter_id: _Optional[str] = ..., ahead_id: _Optional[str] = ..., target_id: _Optional[str] = ...) -> None: ...

class SoftCycle(_message.Message):
    __slots__ = ("digest", "signature", "members", "soft_edges", "proposal_status")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    SOFT_EDGES_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_STATUS_FIELD_NUMBER: _ClassVar[int]
    digest: str
    signature: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    soft_edges: _containers.RepeatedCompositeFieldContainer[SoftEdge]
    proposal_status: _types_pb2.ProposalStatus
    def __init__(self, digest: _Optional[str] = ..., signature: _Optional[str] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., soft_edges: _Optional[_Iterable[_Union[SoftEdge, _Mapping]]] = ..., proposal_status: _Optional[_Union[_types_pb2.ProposalStatus, str]] = ...) -> None: ...

class CyclesResponse(_message.Message):
    __slots__ = ("cycles", "proposals", "stale", "applied_index", "epoch", "soft_cycles")
    CYCLES_FIELD_NUMBER: _ClassVar[int]
    PROPOSALS_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SOFT_CYCLES_FIELD_NUMBER: _ClassVar[int]
    cycles: _containers.RepeatedCompositeFieldContainer[Cycle]
    proposals: _containers.RepeatedCompositeFieldContainer[ProposalView]
    stale: bool
    applied_index: int
    epoch: int
    soft_cycles: _containers.RepeatedCompositeFieldContainer[SoftCycle]
    def __init__(self, cycles: _Optional[_Iterable[_Union[Cycle, _Mapping]]] = ..., proposals: _Optional[_Iterable[_Union[ProposalView, _Mapping]]] = ..., stale: _Optional[bool] = ..., applied_index: _Optional[int] = ..., epoch: _Optional[int] = ..., soft_cycles: _Optional[_Iterable[_Union[SoftCycle, _Mapping]]] = ...) -> None: ...

class ExplainDecisionRequest(_message.Message):
    __slots__ = ("decision_id", "digest", "fresh")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    digest: str
    fresh: bool
    def __init__(self, decision_id: _Optional[str] = ..., digest: _Optional[str] = ..., fresh: _Optional[bool] = ...) -> None: ...

class ScoreView(_message.Message):
    __slots__ = ("execution_id", "generation", "external_side_effects", "checkpoint", "priority", "cost_consumed", "unique_evidence")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_SIDE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    COST_CONSUMED_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    generation: int
    external_side_effects: bool
    checkpoint: bool
    priority: int
    cost_consumed: int
    unique_evidence: bool
    def __init__(self, execution_id: _Optional[str] = ..., generation: _Optional[int] = ..., external_side_effects: _Optional[bool] = ..., checkpoint: _Optional[bool] = ..., priority: _Optional[int] = ..., cost_consumed: _Optional[int] = ..., unique_evidence: _Optional[bool] = ...) -> None: ...

class RoleView(_message.Message):
    __slots__ = ("execution_id", "role")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    role: str
    def __init__(self, execution_id: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

class ReleaseView(_message.Message):
    __slots__ = ("target_id", "execution_id", "at_ms")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    execution_id: str
    at_ms: int
    def __init__(self, target_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., at_ms: _Optional[int] = ...) -> None: ...

class CycleWaitView(_message.Message):
    __slots__ = ("waiter_id", "waiter_generation", "target_id", "target_generation", "edge_version", "reason", "registered_at_ms", "satisfiers")
    WAITER_ID_FIELD_NUMBER: _ClassVar[int]
    WAITER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    EDGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SATISFIERS_FIELD_NUMBER: _ClassVar[int]
    waiter_id: str
    waiter_generation: int
    target_id: str
    target_generation: int
    edge_version: int
    reason: str
    registered_at_ms: int
    satisfiers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, waiter_id: _Optional[str] = ..., waiter_generation: _Optional[int] = ..., target_id: _Optional[str] = ..., target_generation: _Optional[int] = ..., edge_version: _Optional[int] = ..., reason: _Optional[str] = ..., registered_at_ms: _Optional[int] = ..., satisfiers: _Optional[_Iterable[str]] = ...) -> None: ...

class CancellationView(_message.Message):
    __slots__ = ("scope_id", "run_id", "root_id", "root_generation", "cause", "cancel_generation", "requested_at_ms", "stable_at_ms", "pending", "quarantined")
    SCOPE_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    STABLE_AT_MS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    scope_id: str
    run_id: str
    root_id: str
    root_generation: int
    cause: str
    cancel_generation: int
    requested_at_ms: int
    stable_at_ms: int
    pending: int
    quarantined: int
    def __init__(self, scope_id: _Optional[str] = ..., run_id: _Optional[str] = ..., root_id: _Optional[str] = ..., root_generation: _Optional[int] = ..., cause: _Optional[str] = ..., cancel_generation: _Optional[int] = ..., requested_at_ms: _Optional[int] = ..., stable_at_ms: _Optional[int] = ..., pending: _Optional[int] = ..., quarantined: _Optional[int] = ...) -> None: ...

class DecisionView(_message.Message):
    __slots__ = ("decision_id", "digest", "signature", "policy_version", "kind", "mode", "reason_code", "epoch", "winner_id", "winner_generation", "scores", "roles", "released", "at_ms", "epoch_before", "proposer", "proposed_at_ms", "votes", "waits", "cancellations", "retired_at_ms", "remedies", "reassigned")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    WINNER_ID_FIELD_NUMBER: _ClassVar[int]
    WINNER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_BEFORE_FIELD_NUMBER: _ClassVar[int]
    PROPOSER_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    VOTES_FIELD_NUMBER: _ClassVar[int]
    WAITS_FIELD_NUMBER: _ClassVar[int]
    CANCELLATIONS_FIELD_NUMBER: _ClassVar[int]
    RETIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    REMEDIES_FIELD_NUMBER: _ClassVar[int]
    REASSIGNED_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    digest: str
    signature: str
    policy_version: str
    kind: _types_pb2.DecisionKind
    mode: _types_pb2.RolloutMode
    reason_code: str
    epoch: int
    winner_id: str
    winner_generation: int
    scores: _containers.RepeatedCompositeFieldContainer[ScoreView]
    roles: _containers.RepeatedCompositeFieldContainer[RoleView]
    released: _containers.RepeatedCompositeFieldContainer[ReleaseView]
    at_ms: int
    epoch_before: int
    proposer: str
    proposed_at_ms: int
    votes: _containers.RepeatedCompositeFieldContainer[VoteView]
    waits: _containers.RepeatedCompositeFieldContainer[CycleWaitView]
    cancellations: _containers.RepeatedCompositeFieldContainer[CancellationView]
    retired_at_ms: int
    remedies: _containers.RepeatedCompositeFieldContainer[RemedyView]
    reassigned: _containers.RepeatedCompositeFieldContainer[ReassignmentView]
    def __init__(self, decision_id: _Optional[str] = ..., digest: _Optional[str] = ..., signature: _Optional[str] = ..., policy_version: _Optional[str] = ..., kind: _Optional[_Union[_types_pb2.DecisionKind, str]] = ..., mode: _Optional[_Union[_types_pb2.RolloutMode, str]] = ..., reason_code: _Optional[str] = ..., epoch: _Optional[int] = ..., winner_id: _Optional[str] = ..., winner_generation: _Optional[int] = ..., scores: _Optional[_Iterable[_Union[ScoreView, _Mapping]]] = ..., roles: _Optional[_Iterable[_Union[RoleView, _Mapping]]] = ..., released: _Optional[_Iterable[_Union[ReleaseView, _Mapping]]] = ..., at_ms: _Optional[int] = ..., epoch_before: _Optional[int] = ..., proposer: _Optional[str] = ..., proposed_at_ms: _Optional[int] = ..., votes: _Optional[_Iterable[_Union[VoteView, _Mapping]]] = ..., waits: _Optional[_Iterable[_Union[CycleWaitView, _Mapping]]] = ..., cancellations: _Optional[_Iterable[_Union[CancellationView, _Mapping]]] = ..., retired_at_ms: _Optional[int] = ..., remedies: _Optional[_Iterable[_Union[RemedyView, _Mapping]]] = ..., reassigned: _Optional[_Iterable[_Union[ReassignmentView, _Mapping]]] = ...) -> None: ...

class RemedyView(_message.Message):
    __slots__ = ("remedy", "outcome", "reason")
    REMEDY_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    remedy: str
    outcome: str
    reason: str
    def __init__(self, remedy: _Optional[str] = ..., outcome: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReassignmentView(_message.Message):
    __slots__ = ("approval_id", "from_id", "from_generation", "to_id", "to_generation")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_GENERATION_FIELD_NUMBER: _ClassVar[int]
    TO_ID_FIELD_NUMBER: _ClassVar[int]
    TO_GENERATION_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    from_id: str
    from_generation: int
    to_id: str
    to_generation: int
    def __init__(self, approval_id: _Optional[str] = ..., from_id: _Optional[str] = ..., from_generation: _Optional[int] = ..., to_id: _Optional[str] = ..., to_generation: _Optional[int] = ...) -> None: ...

class EpochAt(_message.Message):
    __slots__ = ("epoch", "at_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    at_ms: int
    def __init__(self, epoch: _Optional[int] = ..., at_ms: _Optional[int] = ...) -> None: ...

class DecisionSummary(_message.Message):
    __slots__ = ("decision_id", "kind", "reason_code", "epoch_before", "epoch", "winner_id", "at_ms")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_BEFORE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    WINNER_ID_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    kind: _types_pb2.DecisionKind
    reason_code: str
    epoch_before: int
    epoch: int
    winner_id: str
    at_ms: int
    def __init__(self, decision_id: _Optional[str] = ..., kind: _Optional[_Union[_types_pb2.DecisionKind, str]] = ..., reason_code: _Optional[str] = ..., epoch_before: _Optional[int] = ..., epoch: _Optional[int] = ..., winner_id: _Optional[str] = ..., at_ms: _Optional[int] = ...) -> None: ...

class TrajectoryView(_message.Message):
    __slots__ = ("signature", "known", "observations", "recoveries", "observed_total", "recovered_total", "first_seen", "decisions", "guard")
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    RECOVERIES_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    GUARD_FIELD_NUMBER: _ClassVar[int]
    signature: str
    known: bool
    observations: _containers.RepeatedCompositeFieldContainer[EpochAt]
    recoveries: _containers.RepeatedCompositeFieldContainer[EpochAt]
    observed_total: int
    recovered_total: int
    first_seen: EpochAt
    decisions: _containers.RepeatedCompositeFieldContainer[DecisionSummary]
    guard: str
    def __init__(self, signature: _Optional[str] = ..., known: _Optional[bool] = ..., observations: _Optional[_Iterable[_Union[EpochAt, _Mapping]]] = ..., recoveries: _Optional[_Iterable[_Union[EpochAt, _Mapping]]] = ..., observed_total: _Optional[int] = ..., recovered_total: _Optional[int] = ..., first_seen: _Optional[_Union[EpochAt, _Mapping]] = ..., decisions: _Optional[_Iterable[_Union[DecisionSummary, _Mapping]]] = ..., guard: _Optional[str] = ...) -> None: ...

class ExplainDecisionResponse(_message.Message):
    __slots__ = ("decisions", "stale", "applied_index", "trajectories", "epoch")
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORIES_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[DecisionView]
    stale: bool
    applied_index: int
    trajectories: _containers.RepeatedCompositeFieldContainer[TrajectoryView]
    epoch: int
    def __init__(self, decisions: _Optional[_Iterable[_Union[DecisionView, _Mapping]]] = ..., stale: _Optional[bool] = ..., applied_index: _Optional[int] = ..., trajectories: _Optional[_Iterable[_Union[TrajectoryView, _Mapping]]] = ..., epoch: _Optional[int] = ...) -> None: ...

class SignatureHistoryRequest(_message.Message):
    __slots__ = ("signature", "fresh")
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    signature: str
    fresh: bool
    def __init__(self, signature: _Optional[str] = ..., fresh: _Optional[bool] = ...) -> None: ...

class SignatureHistoryResponse(_message.Message):
    __slots__ = ("trajectory", "stale", "applied_index", "epoch")
    TRAJECTORY_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    trajectory: TrajectoryView
    stale: bool
    applied_index: int
    epoch: int
    def __init__(self, trajectory: _Optional[_Union[TrajectoryView, _Mapping]] = ..., stale: _Optional[bool] = ..., applied_index: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class ConvergenceRequest(_message.Message):
    __slots__ = ("run_id", "fresh")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    fresh: bool
    def __init__(self, run_id: _Optional[str] = ..., fresh: _Optional[bool] = ...) -> None: ...

class ConvergenceResponse(_message.Message):
    __slots__ = ("run_id", "cancel_generation", "cancel_state", "executions", "settled", "unsettled", "open_cancellations", "pending_acks", "quarantined", "admission_frozen", "admission_reason", "converged", "stale", "applied_index")
    class UnsettledEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CANCEL_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CANCEL_STATE_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    UNSETTLED_FIELD_NUMBER: _ClassVar[int]
    OPEN_CANCELLATIONS_FIELD_NUMBER: _ClassVar[int]
    PENDING_ACKS_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_FROZEN_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_REASON_FIELD_NUMBER: _ClassVar[int]
    CONVERGED_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    cancel_generation: int
    cancel_state: _types_pb2.CancelState
    executions: int
    settled: int
    unsettled: _containers.ScalarMap[str, int]
    open_cancellations: int
    pending_acks: int
    quarantined: _containers.RepeatedScalarFieldContainer[str]
    admission_frozen: bool
    admission_reason: str
    converged: bool
    stale: bool
    applied_index: int
    def __init__(self, run_id: _Optional[str] = ..., cancel_generation: _Optional[int] = ..., cancel_state: _Optional[_Union[_types_pb2.CancelState, str]] = ..., executions: _Optional[int] = ..., settled: _Optional[int] = ..., unsettled: _Optional[_Mapping[str, int]] = ..., open_cancellations: _Optional[int] = ..., pending_acks: _Optional[int] = ..., quarantined: _Optional[_Iterable[str]] = ..., admission_frozen: _Optional[bool] = ..., admission_reason: _Optional[str] = ..., converged: _Optional[bool] = ..., stale: _Optional[bool] = ..., applied_index: _Optional[int] = ...) -> None: ...

class ExportPendingRequest(_message.Message):
    __slots__ = ("fresh",)
    FRESH_FIELD_NUMBER: _ClassVar[int]
    fresh: bool
    def __init__(self, fresh: _Optional[bool] = ...) -> None: ...

class ExportPendingResponse(_message.Message):
    __slots__ = ("format", "version", "document_json", "stale", "applied_index")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_JSON_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    format: str
    version: int
    document_json: str
    stale: bool
    applied_index: int
    def __init__(self, format: _Optional[str] = ..., version: _Optional[int] = ..., document_json: _Optional[str] = ..., stale: _Optional[bool] = ..., applied_index: _Optional[int] = ...) -> None: ...

class ExportStateRequest(_message.Message):
    __slots__ = ("fresh",)
    FRESH_FIELD_NUMBER: _ClassVar[int]
    fresh: bool
    def __init__(self, fresh: _Optional[bool] = ...) -> None: ...

class ExportStateResponse(_message.Message):
    __slots__ = ("snapshot", "state_digest", "stale", "applied_index")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    STATE_DIGEST_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    snapshot: bytes
    state_digest: str
    stale: bool
    applied_index: int
    def __init__(self, snapshot: _Optional[bytes] = ..., state_digest: _Optional[str] = ..., stale: _Optional[bool] = ..., applied_index: _Optional[int] = ...) -> None: ...

class ListDecisionsRequest(_message.Message):
    __slots__ = ("run_id", "kind", "since_ms", "limit", "fresh")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    kind: _types_pb2.DecisionKind
    since_ms: int
    limit: int
    fresh: bool
    def __init__(self, run_id: _Optional[str] = ..., kind: _Optional[_Union[_types_pb2.DecisionKind, str]] = ..., since_ms: _Optional[int] = ..., limit: _Optional[int] = ..., fresh: _Optional[bool] = ...) -> None: ...

class ListDecisionsResponse(_message.Message):
    __slots__ = ("decisions", "truncated", "stale", "applied_index", "epoch", "retained")
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RETAINED_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[DecisionView]
    truncated: bool
    stale: bool
    applied_index: int
    epoch: int
    retained: int
    def __init__(self, decisions: _Optional[_Iterable[_Union[DecisionView, _Mapping]]] = ..., truncated: _Optional[bool] = ..., stale: _Optional[bool] = ..., applied_index: _Optional[int] = ..., epoch: _Optional[int] = ..., retained: _Optional[int] = ...) -> None: ...

class HistoryRequest(_message.Message):
    __slots__ = ("run_id", "execution_id", "decision_id", "limit", "target_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    execution_id: str
    decision_id: str
    limit: int
    target_id: str
    def __init__(self, run_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., decision_id: _Optional[str] = ..., limit: _Optional[int] = ..., target_id: _Optional[str] = ...) -> None: ...

class HistoryRecord(_message.Message):
    __slots__ = ("kind", "key", "run_id", "retired_at_ms", "record_json")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RETIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RECORD_JSON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    key: str
    run_id: str
    retired_at_ms: int
    record_json: str
    def __init__(self, kind: _Optional[str] = ..., key: _Optional[str] = ..., run_id: _Optional[str] = ..., retired_at_ms: _Optional[int] = ..., record_json: _Optional[str] = ...) -> None: ...

class HistoryResponse(_message.Message):
    __slots__ = ("records", "node_id", "records_total", "bytes_total", "max_bytes", "max_age_days", "retention_ms")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_AGE_DAYS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[HistoryRecord]
    node_id: str
    records_total: int
    bytes_total: int
    max_bytes: int
    max_age_days: int
    retention_ms: int
    def __init__(self, records: _Optional[_Iterable[_Union[HistoryRecord, _Mapping]]] = ..., node_id: _Optional[str] = ..., records_total: _Optional[int] = ..., bytes_total: _Optional[int] = ..., max_bytes: _Optional[int] = ..., max_age_days: _Optional[int] = ..., retention_ms: _Optional[int] = ...) -> None: ...
