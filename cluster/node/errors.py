"""Replication errors: the command did not get an outcome (as opposed to a business rejection).

A business rejection is an :class:`waitgraph.statemachine.Outcome` value, replicated like any result. These
exceptions say the cluster could not give one; each has a stable ``code`` and a ``status`` that the
gRPC layer maps to a status code, like every :class:`waitgraph.statemachine.errors.WaitgraphError`.
Whether a retry is safe is part of the type:

- :class:`NotLeader` and :class:`Exhausted`: the command was certainly *not* applied; retry
  (against ``leader`` when the hint is set, later for ``Exhausted``).
- :class:`OutcomeUnknown`: it may or may not have been applied; retry with the *same* request id
  and the idempotency table returns the recorded outcome if it was.
"""

from __future__ import annotations

from typing import Any

from waitgraph.statemachine.errors import Status, WaitgraphError


class ClusterError(WaitgraphError):
    """Root of the replication errors raised by ``waitgraph.node.raft``."""

    status = Status.UNAVAILABLE
    code = "unavailable"
    applied_maybe = False
    """True when the command may have been applied (retry only with the same request id)."""


class Exhausted(ClusterError):
    """Too many commands are outstanding on this node; nothing was queued."""

    status = Status.RESOURCE_EXHAUSTED
    code = "too_many_outstanding"


class NotLeader(ClusterError):
    """No leader is known or the leader refused the command; it was not applied."""

    code = "not_leader"

    def __init__(self, message: str, leader: str | None = None, **fields: Any) -> None:
        super().__init__(message, leader=leader, **fields)
        self.leader = leader


class OutcomeUnknown(ClusterError):
    """No outcome arrived (timeout, leader change in flight, snapshot installed over it)."""

    code = "outcome_unknown"
    applied_maybe = True


class ReadFailed(ClusterError):
    """A read could not be completed on this node (its forked reader failed); nothing changed."""

    status = Status.INTERNAL
    code = "read_failed"


class Stopped(ClusterError):
    """The node is stopping or was never started."""

    code = "stopped"


class MembershipRefused(ClusterError):
    """A membership change was refused before it was proposed; the membership is unchanged.

    ``code`` says which guard refused (cluster/node/raft/_membership.py): ``change_pending``,
    ``already_member``, ``id_in_use``, ``not_member``, ``member_is_leader``, ``quorum_at_risk``,
    ``not_listening``, ``recovery_rule``."""

    status = Status.FAILED_PRECONDITION

    def __init__(self, code: str, message: str, **fields: Any) -> None:
        super().__init__(f"{code}: {message}", **fields)  # the code in the details, as for a rejection
        self.code = code
