"""The SDK's exceptions: one per gRPC status (refined by the ``waitgraph-code`` trailer), plus the two
that are not RPC failures at all: :class:`DeadlockVictim` and :class:`CancellationRequested`.

Rules kept here:
- Every failed call becomes exactly one :class:`RpcError` subclass, chosen first by the stable
  waitgraph code (``stale_epoch`` -> :class:`StaleEpoch`) and then by the status code
  (``ABORTED`` -> :class:`Conflict`). The server's table is ``cluster/node/grpc_status.py``; this is its
  mirror image, so a caller catches meanings, not numbers.
- A rejection's typed fields (the holder of a resource, the current generation, the fenced epoch)
  travel in the ``waitgraph-outcome-bin`` trailer; they are exposed as :attr:`RpcError.fields`.
- An error reads as one line, ``CODE: message [endpoint]``, the same in a log, a traceback and
  the CLI. Nothing listening at an address reads ``cannot connect (<cause>)``
  (:attr:`RpcError.unreachable`), a call's deadline ``no answer within the deadline``; after
  retries the caller gets the most telling failure (:func:`most_telling`), not merely the last.
- :class:`DeadlockVictim` is raised *inside* the task that was blocked on a wait of an execution the
  cluster chose as a victim; it carries the decision (id, epoch, digest, and scores when known).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

import grpc

from waitgraph.proto.v1 import agent_pb2, types_pb2
from waitgraph.statemachine.outcome import Outcome
from waitgraph.statemachine.recovery_state import DecisionKind, RolloutMode
from waitgraph.wire import convert
from waitgraph.wire.metadata import CODE_KEY, LEADER_ID_KEY, LEADER_KEY, OUTCOME_KEY, RETRY_KEY

__all__ = [
    "AlreadyExists",
    "CancellationRequested",
    "Conflict",
    "CursorExpired",
    "DeadlockVictim",
    "Decision",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NoSession",
    "NotFound",
    "NotLeader",
    "OutcomeUnknown",
    "Overloaded",
    "PermissionDenied",
    "RateLimited",
    "ResourceExhausted",
    "RpcError",
    "RunCancelled",
    "Score",
    "SessionClosed",
    "SessionLost",
    "StaleCancelGeneration",
    "StaleEpoch",
    "StaleGeneration",
    "Unauthenticated",
    "Unavailable",
    "WaitgraphClientError",
    "WouldDeadlock",
    "error_from_result",
    "error_from_rpc",
    "most_telling",
]


class WaitgraphClientError(Exception):
    """Root of every exception the SDK raises."""


class SessionClosed(WaitgraphClientError):
    """The session (or its client) is closed; nothing was sent."""


class SessionLost(SessionClosed):
    """The cluster no longer holds this process's session of the agent: its lease expired, or
    another process of the same agent ended or replaced it (``reason``: ``expired``, ``left``,
    ``no_session``, ``replaced``...).

    Raised in every task blocked on the session (its waits, holdings, delegations) and by every
    later call on it, until :meth:`~waitgraph.sdk.session.Session.rejoin` joins again. The cluster
    treats the executions of a lost session as unacknowledged; a re-joined session acts for them
    again only where the cluster still lets it (a claim taken over meanwhile is not given back).
    """

    def __init__(self, agent_id: str, reason: str, detail: str = "") -> None:
        more = f": {detail}" if detail else ""
        super().__init__(
            f"the session of agent {agent_id} was lost ({reason}){more}; call `await session.rejoin()` to join again"
        )
        self.agent_id = agent_id
        self.reason = reason


# -- RPC failures ------------------------------------------------------------------------------------


class RpcError(WaitgraphClientError):
    """A call the cluster refused or could not answer.

    ``status`` is the gRPC status code, ``code`` the stable waitgraph code (``stale_epoch``,
    ``target_held``...; empty when the failure is the transport's), ``fields`` the rejection's
    typed fields as text, ``endpoint`` the node that answered, ``request_id`` the id the call
    carried (retries of one call all carry the same one), ``unreachable`` that nothing answered
    at the address at all (as opposed to a node that answered with an error).
    """

    def __init__(
        self,
        message: str,
        *,
        status: grpc.StatusCode,
        code: str = "",
        outcome: Outcome | None = None,
        endpoint: str | None = None,
        request_id: str | None = None,
        leader: str | None = None,
        leader_id: str | None = None,
        retry_same_id: bool = False,
        unreachable: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.outcome = outcome
        self.fields: dict[str, str] = {k: str(v) for k, v in outcome.fields.items()} if outcome is not None else {}
        self.endpoint = endpoint
        self.request_id = request_id
        self.leader = leader
        self.leader_id = leader_id
        self.retry_same_id = retry_same_id
        self.unreachable = unreachable

    def field_int(self, name: str) -> int | None:
        """A typed field of the rejection as an integer (``lease``, ``current``, ``epoch``...)."""
        value = self.fields.get(name)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    def with_hint(self, hint: str) -> Self:
        """The same error with ``hint`` (the call that fixes it) added to its message."""
        return self.with_message(f"{self.message}; {hint}")

    def with_message(self, message: str) -> Self:
        """The same error (class, codes, endpoint, request id) saying ``message`` instead."""
        return type(self)(
            message,
            status=self.status,
            code=self.code,
            outcome=self.outcome,
            endpoint=self.endpoint,
            request_id=self.request_id,
            leader=self.leader,
            leader_id=self.leader_id,
            retry_same_id=self.retry_same_id,
            unreachable=self.unreachable,
        )

    def __str__(self) -> str:
        where = f" [{self.endpoint}]" if self.endpoint else ""
        return f"{self.status.name}: {' '.join(self.message.split())}{where}"


class InvalidArgument(RpcError):
    """Bad input (a malformed or free-text id, a missing field); nothing was applied."""


class NotFound(RpcError):
    pass


class AlreadyExists(RpcError):
    pass


class FailedPrecondition(RpcError):
    """The state does not allow the command now (illegal transition, no session, ...)."""


class StaleGeneration(FailedPrecondition):
    """The call named an older generation of an execution (or lease of a target) than the current one."""


class StaleEpoch(FailedPrecondition):
    """The execution was rolled back at a later epoch than the one the caller presented."""


class StaleCancelGeneration(FailedPrecondition):
    """The run's cancel generation moved past the one the caller observed."""


class RunCancelled(FailedPrecondition):
    """The run is cancelled: it admits nothing new (no start, commit, child, retry)."""


class WouldDeadlock(FailedPrecondition):
    """A wait registered with ``refuse_deadlock`` would have closed a hard cycle; the cluster
    refused it and changed nothing (code ``would_deadlock``). :attr:`path` is the cycle, from
    the waiter back to itself: execution, target, execution, ... (an ``exec:`` target is named
    once), e.g. ``("exec:A", "exec:B", "artifact:report", "exec:C", "resource:browser", "exec:A")``.
    """

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(self.fields.get("path", "").split())


class NoSession(FailedPrecondition):
    """The agent has no active session (it expired or was never joined)."""


class Conflict(RpcError):
    """A lost compare-and-set: the resource is held or the pool is full (``fields``: holder, lease)."""


class PermissionDenied(RpcError):
    pass


class Unauthenticated(RpcError):
    pass


class ResourceExhausted(RpcError):
    """A limit: the core's (open waits, sessions, executions: raised at once, nothing changed) or a
    refusal to do anything now (:class:`RateLimited`, :class:`Overloaded`: retried first)."""

    @property
    def retry_after_s(self) -> float | None:
        """How long the node asked the caller to wait before retrying (None: it did not say)."""
        ms = self.field_int("retry_after_ms")
        return ms / 1000 if ms is not None else None


class RateLimited(ResourceExhausted):
    """The caller's token spent its request rate on that node (``rate_limited``); nothing was done.
    The SDK retries it with the same request id after ``retry_after_s`` until ``retry_deadline_s``,
    then raises this."""


class Overloaded(ResourceExhausted):
    """Too many commands were outstanding on that node (``too_many_outstanding``); nothing was
    queued. Retried with backoff and the same request id until ``retry_deadline_s``, then raised."""


class Unavailable(RpcError):
    """No node could take the call: no leader, no quorum, or none reachable, until the deadline."""


class NotLeader(Unavailable):
    """The node is not the leader (``leader`` is the hint when one is known)."""


class OutcomeUnknown(Unavailable):
    """The command may or may not have been applied; the SDK retried it with the same request id
    until its deadline (a later retry with ``request_id`` gets the recorded outcome)."""


class CursorExpired(RpcError):
    """A WatchEvents cursor older than the node's event horizon."""


class Internal(RpcError):
    pass


_BY_CODE: dict[str, type[RpcError]] = {
    "stale_generation": StaleGeneration,
    "stale_target_generation": StaleGeneration,
    "stale_epoch": StaleEpoch,
    "cancel_generation_mismatch": StaleCancelGeneration,
    "run_cancelled": RunCancelled,
    "no_session": NoSession,
    "would_deadlock": WouldDeadlock,
    "rate_limited": RateLimited,
    "too_many_outstanding": Overloaded,
    "not_leader": NotLeader,
    "outcome_unknown": OutcomeUnknown,
}
"""Refinements by the stable waitgraph code (checked first)."""

_HINTS: dict[str, str] = {
    "run_exists": (
        "a run has one root execution: give this one the run's root as parent "
        "(`s.execution(id, parent=root_ex)`), or start a new run under a new run_id (docs/sdk.md, Ids and runs)"
    ),
    "execution_exists": (
        "execution ids are never reused: derive a new one per invocation, e.g. f'exec:{name}-{thread_id}-{turn}', "
        "or let waitgraph.sdk.langgraph.instrument derive them (docs/sdk.md, Ids and runs)"
    ),
    "target_exists": "it exists already: use it as it is (`session.ensure_target` answers False instead of raising)",
    "wrong_run": "a child is created in its parent's run: pass the parent Execution (`parent=ex`), not a run_id",
    "no_run": "a run exists once its root execution is created: `s.execution(id, run_id=...)` creates both",
    "no_execution": "create it first (`s.execution(...)`, or a delegation); an id names one execution, on one cluster",
    "retired": (
        "settled ids are remembered for a retention and not reused meanwhile: start the new work under a new id"
    ),
    "unresolvable_id": "ids are typed: exec:, artifact:, approval:, resource:, pool:, reservation: followed by a name",
    "bad_name": "a name is letters, digits and . _ - / @ +, at most 128 characters, starting with a letter or digit",
}
"""What to do about an id or run rejection, added to its message by the SDK (the core's code and
fields are unchanged)."""

_BY_STATUS: dict[grpc.StatusCode, type[RpcError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: OutcomeUnknown,
    grpc.StatusCode.OUT_OF_RANGE: CursorExpired,
}


def _trailers(exc: grpc.aio.AioRpcError) -> dict[str, Any]:
    try:
        return {k: v for k, v in (exc.trailing_metadata() or ())}
    except Exception:  # a failure before any response has no trailers
        return {}


NO_ANSWER = "no answer within the deadline"
"""The message of a call whose deadline passed before the node answered."""


def error_from_rpc(exc: grpc.aio.AioRpcError, endpoint: str | None, request_id: str | None) -> RpcError:
    """The typed SDK error for a failed call."""
    status, details = exc.code(), (exc.details() or "").strip()
    unreachable = "failed to connect" in details.lower()
    if unreachable:
        # gRPC's text names every address it tried; the last clause is the cause.
        details = f"cannot connect ({details.rsplit(': ', 1)[-1]})"
    elif status is grpc.StatusCode.DEADLINE_EXCEEDED:
        details = NO_ANSWER
    return _error(status, details, _trailers(exc), endpoint, request_id, unreachable)


def most_telling(errors: Sequence[RpcError]) -> RpcError:
    """Of several failures of one call (its retries, or one per node), the one to show: "outcome
    unknown" first (the write may have been applied: the caller must know, and retry with its
    request id), then the last one from a node that answered (it says why: no leader, no quorum),
    then a deadline, then an address where nothing listens."""

    def rank(e: RpcError) -> int:
        if e.retry_same_id:
            return 3
        if e.unreachable:
            return 0
        return 1 if e.status is grpc.StatusCode.DEADLINE_EXCEEDED else 2

    best = max(rank(e) for e in errors)
    return [e for e in errors if rank(e) == best][-1]


_STATUS_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


def error_from_result(result: agent_pb2.WriteResult, endpoint: str | None, request_id: str | None) -> RpcError | None:
    """The typed SDK error for a failed WriteBatch item (None when it succeeded): the same error
    its unary call would have raised, from the same status, details and trailers."""
    if result.status_code == 0:
        return None
    trailers: dict[str, Any] = {CODE_KEY: result.code}
    if result.HasField("outcome"):
        trailers[OUTCOME_KEY] = result.outcome.SerializeToString()
    if result.leader_address:
        trailers[LEADER_KEY] = result.leader_address
    if result.leader_id:
        trailers[LEADER_ID_KEY] = result.leader_id
    if result.retry_same_request_id:
        trailers[RETRY_KEY] = "same-request-id"
    status = _STATUS_BY_NUMBER.get(result.status_code, grpc.StatusCode.UNKNOWN)
    return _error(status, result.details, trailers, endpoint, request_id)


_EXECUTION_EXAMPLE = "such as exec:review-1"
_TARGET_EXAMPLE = "such as resource:browser-1 or artifact:review-1"
"""The core's ``unresolvable_id`` message gives one example, an execution's id, for every field
(statemachine/ids.py); for a target field (``target_id``...) the SDK shows targets' ids instead, so
the hint names the kind of id that was asked for."""


def _error(
    status: grpc.StatusCode,
    details: str,
    trailers: dict[str, Any],
    endpoint: str | None,
    request_id: str | None,
    unreachable: bool = False,
) -> RpcError:
    code = str(trailers.get(CODE_KEY) or "")
    outcome = None
    raw = trailers.get(OUTCOME_KEY)
    if isinstance(raw, bytes):
        try:
            outcome = convert.outcome_from_proto(types_pb2.Outcome.FromString(raw))
        except Exception:  # a garbled trailer must not hide the error itself
            outcome = None
    if code == "unresolvable_id" and outcome is not None and "target" in str(outcome.fields.get("field", "")):
        details = details.replace(_EXECUTION_EXAMPLE, _TARGET_EXAMPLE)
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status, Internal)
    hint = _HINTS.get(code)
    message = details.strip() or "no details"
    leader = trailers.get(LEADER_KEY)
    leader_id = trailers.get(LEADER_ID_KEY)
    return cls(
        f"{message}; {hint}" if hint else message,
        status=status,
        code=code,
        outcome=outcome,
        endpoint=endpoint,
        request_id=request_id,
        leader=str(leader) if leader else None,
        leader_id=str(leader_id) if leader_id else None,
        retry_same_id=trailers.get(RETRY_KEY) == "same-request-id",
        unreachable=unreachable,
    )


# -- decisions ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Score:
    """One candidate's victim-policy inputs, as recorded in the decision."""

    execution_id: str
    generation: int
    external_side_effects: bool
    checkpoint: bool
    priority: int
    cost_consumed: int
    unique_evidence: bool


@dataclass(frozen=True, slots=True)
class Decision:
    """A recovery decision as one of its members sees it.

    ``role`` is ``victim`` (the policy's choice), ``rolled_back`` (a tie-break rolled it back) or
    ``yielded`` (a tie-break released its holdings and made it wait behind ``winner_id``).
    ``scores`` (and ``roles``, ``votes``, ``released``) are filled only when the client could read
    the decision record (:meth:`OperatorClient.decision`, an operator token); agents get the
    decision id and epoch, which is what fences and retries need. ``kind`` and ``mode`` are the
    core's enums (``DecisionKind.VICTIM == "VICTIM"``).
    """

    decision_id: str | None
    execution_id: str
    generation: int
    epoch: int | None
    role: str
    digest: str | None = None
    kind: DecisionKind | None = None
    mode: RolloutMode | None = None
    policy_version: str | None = None
    reason_code: str | None = None
    winner_id: str | None = None
    scores: tuple[Score, ...] | None = None
    signature: str | None = None
    roles: tuple[tuple[str, str], ...] = ()
    """(execution id, role) of every member: victim, winner, yielded, rolled_back or kept."""
    votes: tuple[Any, ...] = ()
    """The proposal's votes when it was decided (:class:`~waitgraph.sdk.views.Vote`)."""
    released: tuple[Any, ...] = ()
    """What it released after the epoch commit (:class:`~waitgraph.sdk.views.Release`)."""
    epoch_before: int | None = None
    at_ms: int | None = None
    remedies: tuple[tuple[str, str, str], ...] = ()
    """(remedy, outcome, reason) in the order considered: prevent, reorder, reassign, victim."""
    reassigned: tuple[tuple[str, str, int, str, int], ...] = ()
    """(approval id, old provider, its generation, approver, its generation) moved by a REASSIGN
    (or that a SHADOW decision would have moved)."""


class DeadlockVictim(WaitgraphClientError):
    """The cluster broke a deadlock by rolling back this execution; raised in the blocked task.

    The execution is CANCELLING: its waits are closed and its holdings released by the cluster.
    Leave the execution scope (the SDK acknowledges the cancellation) or call
    :meth:`Execution.retry` to start the next generation under the new epoch.
    """

    def __init__(self, decision: Decision) -> None:
        epoch = f" at epoch {decision.epoch}" if decision.epoch is not None else ""
        super().__init__(
            f"{decision.execution_id} g{decision.generation} was chosen as a deadlock {decision.role} "
            f"(decision {decision.decision_id}){epoch}"
        )
        self.decision = decision

    @property
    def execution_id(self) -> str:
        return self.decision.execution_id

    @property
    def decision_id(self) -> str | None:
        return self.decision.decision_id

    @property
    def epoch(self) -> int | None:
        return self.decision.epoch


class CancellationRequested(WaitgraphClientError):
    """The execution's run (or an ancestor chosen as a deadlock victim) is being cancelled.

    Raised in the blocked task, like :class:`DeadlockVictim`; leaving the execution scope
    acknowledges the cancellation.
    """

    def __init__(self, execution_id: str, generation: int, run_id: str, cancel_generation: int, reason: str) -> None:
        super().__init__(f"{execution_id} g{generation} is asked to stop: {reason}")
        self.execution_id = execution_id
        self.generation = generation
        self.run_id = run_id
        self.cancel_generation = cancel_generation
        self.reason = reason
