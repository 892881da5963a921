"""The one table from waitgraph errors to gRPC status codes (docs/design.md §6), and what travels with them.

Every error a client sees is built here from a :class:`~waitgraph.statemachine.errors.WaitgraphError` or a
REJECTED :class:`~waitgraph.statemachine.Outcome`:

- a core rejection keeps its category: stale generation or epoch -> FAILED_PRECONDITION, a lost
  compare-and-set (target held, pool full) -> ABORTED, bad input -> INVALID_ARGUMENT, wrong
  identity -> PERMISSION_DENIED, a limit -> RESOURCE_EXHAUSTED; the Outcome itself rides in the
  trailing metadata ``waitgraph-outcome-bin`` and its stable code in ``waitgraph-code``;
- replication: not leader / no quorum -> UNAVAILABLE with the leader's gRPC address in
  ``waitgraph-leader`` (and its node id in ``waitgraph-leader-id``) when one is known; outcome
  unknown -> UNAVAILABLE with ``waitgraph-retry: same-request-id`` (retry with the same request
  id: the idempotency table answers if it was applied); backpressure -> RESOURCE_EXHAUSTED;
- the gRPC layer's own: no or bad credentials -> UNAUTHENTICATED, a cursor older than the event
  horizon -> OUT_OF_RANGE.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from waitgraph.node.auth import Unauthenticated
from waitgraph.node.errors import ClusterError, OutcomeUnknown
from waitgraph.node.events import CursorExpired
from waitgraph.statemachine import Outcome
from waitgraph.statemachine.errors import Status, WaitgraphError
from waitgraph.statemachine.outcome import Result
from waitgraph.wire import convert
from waitgraph.wire.metadata import CODE_KEY, LEADER_ID_KEY, LEADER_KEY, OUTCOME_KEY, RETRY_KEY

BY_STATUS: dict[Status, grpc.StatusCode] = {
    Status.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Status.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Status.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Status.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    Status.ABORTED: grpc.StatusCode.ABORTED,
    Status.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    Status.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Status.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Status.INTERNAL: grpc.StatusCode.INTERNAL,
}
"""Core categories (rejections and the cluster's replication errors alike)."""

BY_TYPE: tuple[tuple[type[WaitgraphError], grpc.StatusCode], ...] = (
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (CursorExpired, grpc.StatusCode.OUT_OF_RANGE),
)
"""Errors of the gRPC layer that have no core category; checked before :data:`BY_STATUS`."""


@dataclass(frozen=True, slots=True)
class LeaderHint:
    node_id: str | None
    grpc_address: str | None


@dataclass(frozen=True, slots=True)
class GrpcError:
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...] = ()


class Rejected(WaitgraphError):
    """A REJECTED outcome on its way to the client as a gRPC error."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome
        self.status = outcome.status if outcome.status is not None else Status.INTERNAL
        self.code = outcome.code


def code_for(exc: WaitgraphError) -> grpc.StatusCode:
    for cls, code in BY_TYPE:
        if isinstance(exc, cls):
            return code
    return BY_STATUS.get(exc.status, grpc.StatusCode.INTERNAL)


def _leader_metadata(hint: LeaderHint | None) -> tuple[tuple[str, str], ...]:
    if hint is None:
        return ()
    md: list[tuple[str, str]] = []
    if hint.grpc_address:
        md.append((LEADER_KEY, hint.grpc_address))
    if hint.node_id:
        md.append((LEADER_ID_KEY, hint.node_id))
    return tuple(md)


def for_error(exc: WaitgraphError, leader: LeaderHint | None = None, request_id: str | None = None) -> GrpcError:
    code = code_for(exc)
    md: list[tuple[str, str | bytes]] = [(CODE_KEY, exc.code)]
    details = exc.message
    if isinstance(exc, Rejected):
        md.append((OUTCOME_KEY, convert.outcome_to_proto(exc.outcome).SerializeToString()))
        details = f"{exc.code}: {exc.message}"
    elif code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        # A refusal of the gRPC layer or of backpressure that did nothing (``rate_limited``,
        # ``too_many_outstanding``): its typed fields (``retry_after_ms``) travel like a core
        # rejection's, so a client can wait exactly that long and retry with the same request id.
        refused = Outcome(Result.REJECTED, (), exc.code, exc.status, exc.message, dict(exc.fields))
        md.append((OUTCOME_KEY, convert.outcome_to_proto(refused).SerializeToString()))
    elif isinstance(exc, OutcomeUnknown):
        md.append((RETRY_KEY, "same-request-id"))
        details = f"outcome unknown ({exc.message}): the command may have been applied; " + (
            f"retry with the same request_id {request_id!r} to get its recorded outcome"
            if request_id
            else "it carried no request_id, so a retry may apply it twice"
        )
    if isinstance(exc, ClusterError) and code is grpc.StatusCode.UNAVAILABLE:
        md.extend(_leader_metadata(leader))
        if leader is not None and leader.grpc_address and not isinstance(exc, OutcomeUnknown):
            details += f" (leader: {leader.node_id} at {leader.grpc_address})"
    return GrpcError(code, details, tuple(md))
