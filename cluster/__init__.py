"""waitgraph: register what an agent waits for before it blocks, and be told when the cluster
breaks a deadlock by rolling it back.

What an agent author imports lives here, short and stable::

    from waitgraph import Client, DeadlockVictim, EffectOutcome

The rest of the package, by role (each subpackage's docstring says what it may import, and
``scripts/check_layers.py`` enforces it):

- :mod:`waitgraph.statemachine`: the deterministic core (imports nothing outside itself);
- :mod:`waitgraph.proto`: the generated ``waitgraph.v1`` gRPC and protobuf code;
- :mod:`waitgraph.wire`: the wire contract both sides share (proto <-> core values, metadata keys);
- :mod:`waitgraph.sdk`: the agents' client (this module re-exports it);
- :mod:`waitgraph.node`: one cluster node (Raft, gRPC services, leader loops, metrics, logs);
- :mod:`waitgraph.ops`: the operators' tools (CLI verbs, renderers, live view, progress);
- :mod:`waitgraph.dev`: local development (a local cluster, the demo, the screenshot stage);
- :mod:`waitgraph.cli`: the ``waitgraph`` command, where the roles meet.
"""

from waitgraph.sdk import (
    TLS,
    AlreadyExists,
    Assignment,
    Batching,
    CancellationRequested,
    Client,
    Conflict,
    CursorExpired,
    DeadlockVictim,
    Decision,
    Delegation,
    Execution,
    ExecutionScope,
    FailedPrecondition,
    Holding,
    Internal,
    InvalidArgument,
    NoSession,
    NotFound,
    NotLeader,
    OutcomeUnknown,
    PermissionDenied,
    ResourceExhausted,
    RpcError,
    RunCancelled,
    Score,
    Session,
    SessionClosed,
    StaleCancelGeneration,
    StaleEpoch,
    StaleGeneration,
    StreamStats,
    SyncClient,
    SyncDelegation,
    SyncExecution,
    SyncHolding,
    SyncSession,
    SyncWait,
    Unauthenticated,
    Unavailable,
    Wait,
    WaitgraphClientError,
    WatchedEvent,
)
from waitgraph.statemachine import commands
from waitgraph.statemachine.enums import CancelMode, EffectOutcome, ExecStatus, Relation
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.recovery_state import DecisionKind, RolloutMode

__all__ = [
    "TLS",
    "AlreadyExists",
    "Assignment",
    "Batching",
    "CancelMode",
    "CancellationRequested",
    "Client",
    "Conflict",
    "CursorExpired",
    "DeadlockVictim",
    "Decision",
    "DecisionKind",
    "Delegation",
    "EffectOutcome",
    "ExecStatus",
    "Execution",
    "ExecutionScope",
    "FailedPrecondition",
    "Holding",
    "Internal",
    "InvalidArgument",
    "NoSession",
    "NotFound",
    "NotLeader",
    "Outcome",
    "OutcomeUnknown",
    "PermissionDenied",
    "Relation",
    "ResourceExhausted",
    "Result",
    "RolloutMode",
    "RpcError",
    "RunCancelled",
    "Score",
    "Session",
    "SessionClosed",
    "StaleCancelGeneration",
    "StaleEpoch",
    "StaleGeneration",
    "StreamStats",
    "SyncClient",
    "SyncDelegation",
    "SyncExecution",
    "SyncHolding",
    "SyncSession",
    "SyncWait",
    "Unauthenticated",
    "Unavailable",
    "Wait",
    "WaitgraphClientError",
    "WatchedEvent",
    "commands",
]
