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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported on first use, not with the package: `waitgraph serve` must turn gRPC's fork handlers off
# before anything imports grpc (the node forks to write dumps and serve whole-state reads), and
# `import waitgraph.cli` or `waitgraph.node` must not drag the SDK, and grpc with it, in first.
_LAZY: dict[str, str] = {
    "TLS": "waitgraph.sdk",
    "AlreadyExists": "waitgraph.sdk",
    "Assignment": "waitgraph.sdk",
    "Batching": "waitgraph.sdk",
    "CancellationRequested": "waitgraph.sdk",
    "Client": "waitgraph.sdk",
    "Conflict": "waitgraph.sdk",
    "Convergence": "waitgraph.sdk",
    "CursorExpired": "waitgraph.sdk",
    "Cycle": "waitgraph.sdk",
    "Cycles": "waitgraph.sdk",
    "DeadlockVictim": "waitgraph.sdk",
    "Decision": "waitgraph.sdk",
    "DecisionSummary": "waitgraph.sdk",
    "Delegation": "waitgraph.sdk",
    "EpochAt": "waitgraph.sdk",
    "Execution": "waitgraph.sdk",
    "ExecutionScope": "waitgraph.sdk",
    "Explanation": "waitgraph.sdk",
    "FailedPrecondition": "waitgraph.sdk",
    "Holding": "waitgraph.sdk",
    "Internal": "waitgraph.sdk",
    "InvalidArgument": "waitgraph.sdk",
    "Member": "waitgraph.sdk",
    "NoSession": "waitgraph.sdk",
    "NotFound": "waitgraph.sdk",
    "NotLeader": "waitgraph.sdk",
    "OperatorClient": "waitgraph.sdk",
    "OutcomeUnknown": "waitgraph.sdk",
    "Overloaded": "waitgraph.sdk",
    "PendingExport": "waitgraph.sdk",
    "PermissionDenied": "waitgraph.sdk",
    "Proposal": "waitgraph.sdk",
    "RateLimited": "waitgraph.sdk",
    "Release": "waitgraph.sdk",
    "ResourceExhausted": "waitgraph.sdk",
    "RpcError": "waitgraph.sdk",
    "RunCancelled": "waitgraph.sdk",
    "Score": "waitgraph.sdk",
    "Session": "waitgraph.sdk",
    "SessionClosed": "waitgraph.sdk",
    "SessionLost": "waitgraph.sdk",
    "SignatureHistory": "waitgraph.sdk",
    "StaleCancelGeneration": "waitgraph.sdk",
    "StaleEpoch": "waitgraph.sdk",
    "StaleGeneration": "waitgraph.sdk",
    "StreamStats": "waitgraph.sdk",
    "SyncClient": "waitgraph.sdk",
    "SyncDelegation": "waitgraph.sdk",
    "SyncExecution": "waitgraph.sdk",
    "SyncHolding": "waitgraph.sdk",
    "SyncOperatorClient": "waitgraph.sdk",
    "SyncSession": "waitgraph.sdk",
    "SyncWait": "waitgraph.sdk",
    "Unauthenticated": "waitgraph.sdk",
    "Unavailable": "waitgraph.sdk",
    "Vote": "waitgraph.sdk",
    "Voter": "waitgraph.sdk",
    "Wait": "waitgraph.sdk",
    "WaitgraphClientError": "waitgraph.sdk",
    "WouldDeadlock": "waitgraph.sdk",
    "WatchedEvent": "waitgraph.sdk",
    "RecoveryProposed": "waitgraph.statemachine.effects",
    "CancelMode": "waitgraph.statemachine.enums",
    "CancelState": "waitgraph.statemachine.enums",
    "EffectOutcome": "waitgraph.statemachine.enums",
    "ExecStatus": "waitgraph.statemachine.enums",
    "Relation": "waitgraph.statemachine.enums",
    "Outcome": "waitgraph.statemachine.outcome",
    "Result": "waitgraph.statemachine.outcome",
    "DecisionKind": "waitgraph.statemachine.recovery_state",
    "ProposalStatus": "waitgraph.statemachine.recovery_state",
    "RolloutMode": "waitgraph.statemachine.recovery_state",
    "commands": "waitgraph.statemachine",
}

if TYPE_CHECKING:  # the same names for type checkers, re-exported (`X as X`); tests check they agree
    from waitgraph.sdk import (
        TLS as TLS,
    )
    from waitgraph.sdk import (
        AlreadyExists as AlreadyExists,
    )
    from waitgraph.sdk import (
        Assignment as Assignment,
    )
    from waitgraph.sdk import (
        Batching as Batching,
    )
    from waitgraph.sdk import (
        CancellationRequested as CancellationRequested,
    )
    from waitgraph.sdk import (
        Client as Client,
    )
    from waitgraph.sdk import (
        Conflict as Conflict,
    )
    from waitgraph.sdk import (
        Convergence as Convergence,
    )
    from waitgraph.sdk import (
        CursorExpired as CursorExpired,
    )
    from waitgraph.sdk import (
        Cycle as Cycle,
    )
    from waitgraph.sdk import (
        Cycles as Cycles,
    )
    from waitgraph.sdk import (
        DeadlockVictim as DeadlockVictim,
    )
    from waitgraph.sdk import (
        Decision as Decision,
    )
    from waitgraph.sdk import (
        DecisionSummary as DecisionSummary,
    )
    from waitgraph.sdk import (
        Delegation as Delegation,
    )
    from waitgraph.sdk import (
        EpochAt as EpochAt,
    )
    from waitgraph.sdk import (
        Execution as Execution,
    )
    from waitgraph.sdk import (
        ExecutionScope as ExecutionScope,
    )
    from waitgraph.sdk import (
        Explanation as Explanation,
    )
    from waitgraph.sdk import (
        FailedPrecondition as FailedPrecondition,
    )
    from waitgraph.sdk import (
        Holding as Holding,
    )
    from waitgraph.sdk import (
        Internal as Internal,
    )
    from waitgraph.sdk import (
        InvalidArgument as InvalidArgument,
    )
    from waitgraph.sdk import (
        Member as Member,
    )
    from waitgraph.sdk import (
        NoSession as NoSession,
    )
    from waitgraph.sdk import (
        NotFound as NotFound,
    )
    from waitgraph.sdk import (
        NotLeader as NotLeader,
    )
    from waitgraph.sdk import (
        OperatorClient as OperatorClient,
    )
    from waitgraph.sdk import (
        OutcomeUnknown as OutcomeUnknown,
    )
    from waitgraph.sdk import (
        Overloaded as Overloaded,
    )
    from waitgraph.sdk import (
        PendingExport as PendingExport,
    )
    from waitgraph.sdk import (
        PermissionDenied as PermissionDenied,
    )
    from waitgraph.sdk import (
        Proposal as Proposal,
    )
    from waitgraph.sdk import (
        RateLimited as RateLimited,
    )
    from waitgraph.sdk import (
        Release as Release,
    )
    from waitgraph.sdk import (
        ResourceExhausted as ResourceExhausted,
    )
    from waitgraph.sdk import (
        RpcError as RpcError,
    )
    from waitgraph.sdk import (
        RunCancelled as RunCancelled,
    )
    from waitgraph.sdk import (
        Score as Score,
    )
    from waitgraph.sdk import (
        Session as Session,
    )
    from waitgraph.sdk import (
        SessionClosed as SessionClosed,
    )
    from waitgraph.sdk import (
        SessionLost as SessionLost,
    )
    from waitgraph.sdk import (
        SignatureHistory as SignatureHistory,
    )
    from waitgraph.sdk import (
        StaleCancelGeneration as StaleCancelGeneration,
    )
    from waitgraph.sdk import (
        StaleEpoch as StaleEpoch,
    )
    from waitgraph.sdk import (
        StaleGeneration as StaleGeneration,
    )
    from waitgraph.sdk import (
        StreamStats as StreamStats,
    )
    from waitgraph.sdk import (
        SyncClient as SyncClient,
    )
    from waitgraph.sdk import (
        SyncDelegation as SyncDelegation,
    )
    from waitgraph.sdk import (
        SyncExecution as SyncExecution,
    )
    from waitgraph.sdk import (
        SyncHolding as SyncHolding,
    )
    from waitgraph.sdk import (
        SyncOperatorClient as SyncOperatorClient,
    )
    from waitgraph.sdk import (
        SyncSession as SyncSession,
    )
    from waitgraph.sdk import (
        SyncWait as SyncWait,
    )
    from waitgraph.sdk import (
        Unauthenticated as Unauthenticated,
    )
    from waitgraph.sdk import (
        Unavailable as Unavailable,
    )
    from waitgraph.sdk import (
        Vote as Vote,
    )
    from waitgraph.sdk import (
        Voter as Voter,
    )
    from waitgraph.sdk import (
        Wait as Wait,
    )
    from waitgraph.sdk import (
        WaitgraphClientError as WaitgraphClientError,
    )
    from waitgraph.sdk import (
        WatchedEvent as WatchedEvent,
    )
    from waitgraph.sdk import (
        WouldDeadlock as WouldDeadlock,
    )
    from waitgraph.statemachine import commands as commands
    from waitgraph.statemachine.effects import (
        RecoveryProposed as RecoveryProposed,
    )
    from waitgraph.statemachine.enums import (
        CancelMode as CancelMode,
    )
    from waitgraph.statemachine.enums import (
        CancelState as CancelState,
    )
    from waitgraph.statemachine.enums import (
        EffectOutcome as EffectOutcome,
    )
    from waitgraph.statemachine.enums import (
        ExecStatus as ExecStatus,
    )
    from waitgraph.statemachine.enums import (
        Relation as Relation,
    )
    from waitgraph.statemachine.outcome import (
        Outcome as Outcome,
    )
    from waitgraph.statemachine.outcome import (
        Result as Result,
    )
    from waitgraph.statemachine.recovery_state import (
        DecisionKind as DecisionKind,
    )
    from waitgraph.statemachine.recovery_state import (
        ProposalStatus as ProposalStatus,
    )
    from waitgraph.statemachine.recovery_state import (
        RolloutMode as RolloutMode,
    )

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'waitgraph' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
