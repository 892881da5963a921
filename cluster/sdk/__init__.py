"""The waitgraph Python SDK: register what an agent waits for before it blocks, and be told when
the cluster breaks a deadlock by rolling it back.

Async first (:class:`Client`), with a blocking twin of the same surface (:class:`SyncClient`)::

    from waitgraph import Client, DeadlockVictim

    async with Client(endpoints=["127.0.0.1:50051"], token=TOKEN) as client:
        async with client.session("reviewer") as s:
            async with s.execution(run_id="run-7", checkpoint=True) as ex:
                try:
                    async with ex.holding("resource:browser-9"):
                        ...
                except DeadlockVictim as victim:
                    await ex.retry()          # next generation, under victim.epoch

See docs/sdk.md. ``from waitgraph import Client, ...`` is the same surface, plus the core enums an
agent passes (:class:`~waitgraph.statemachine.enums.EffectOutcome`, ...).

May import: :mod:`waitgraph.wire`, :mod:`waitgraph.statemachine` (commands, enums, outcomes),
:mod:`waitgraph.proto`. Never a node's internals, the operators' tools or the dev tools: an agent
installs the SDK into its own environment and talks to the cluster only over gRPC.
"""

from ._liveness import SessionState
from .client import TLS, Batching, Client, StreamStats, WatchedEvent
from .connection import Receipt, TokenSource
from .errors import (
    AlreadyExists,
    CancellationRequested,
    Conflict,
    CursorExpired,
    DeadlockVictim,
    Decision,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NoSession,
    NotFound,
    NotLeader,
    OutcomeUnknown,
    Overloaded,
    PermissionDenied,
    RateLimited,
    ResourceExhausted,
    RpcError,
    RunCancelled,
    Score,
    SessionClosed,
    SessionLost,
    StaleCancelGeneration,
    StaleEpoch,
    StaleGeneration,
    Unauthenticated,
    Unavailable,
    WaitgraphClientError,
    WouldDeadlock,
)
from .operator import NodeReport, OperatorClient, Read
from .session import Assignment, Delegation, Execution, ExecutionScope, Holding, Session, Voter, Wait
from .sync import (
    SyncClient,
    SyncDelegation,
    SyncExecution,
    SyncHolding,
    SyncOperatorClient,
    SyncSession,
    SyncWait,
)
from .views import (
    Convergence,
    Cycle,
    Cycles,
    DecisionSummary,
    EpochAt,
    Explanation,
    Member,
    PendingExport,
    Proposal,
    Release,
    SignatureHistory,
    Vote,
)

__all__ = [
    "AlreadyExists",
    "Assignment",
    "Batching",
    "CancellationRequested",
    "Client",
    "Conflict",
    "Convergence",
    "CursorExpired",
    "Cycle",
    "Cycles",
    "DeadlockVictim",
    "Decision",
    "DecisionSummary",
    "Delegation",
    "EpochAt",
    "Execution",
    "ExecutionScope",
    "Explanation",
    "FailedPrecondition",
    "Holding",
    "Internal",
    "InvalidArgument",
    "Member",
    "NoSession",
    "NodeReport",
    "NotFound",
    "NotLeader",
    "OperatorClient",
    "OutcomeUnknown",
    "Overloaded",
    "PendingExport",
    "PermissionDenied",
    "Proposal",
    "Read",
    "Receipt",
    "RateLimited",
    "Release",
    "ResourceExhausted",
    "RpcError",
    "RunCancelled",
    "Score",
    "Session",
    "SessionClosed",
    "SessionLost",
    "SessionState",
    "SignatureHistory",
    "StaleCancelGeneration",
    "StaleEpoch",
    "StaleGeneration",
    "StreamStats",
    "SyncClient",
    "SyncDelegation",
    "SyncExecution",
    "SyncHolding",
    "SyncOperatorClient",
    "SyncSession",
    "SyncWait",
    "TLS",
    "TokenSource",
    "Unauthenticated",
    "Unavailable",
    "Vote",
    "Voter",
    "Wait",
    "WaitgraphClientError",
    "WouldDeadlock",
    "WatchedEvent",
]
