"""Closed vocabularies of the replicated state; their string values are part of the wire format."""

from __future__ import annotations

from enum import StrEnum


class ExecStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    WAITING = "WAITING"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    NEEDS_RECONCILIATION = "NEEDS_RECONCILIATION"
    QUARANTINED = "QUARANTINED"


TERMINAL = frozenset({ExecStatus.COMPLETED, ExecStatus.FAILED, ExecStatus.CANCELLED})
"""An execution in one of these holds nothing, waits for nothing and satisfies nothing."""

SETTLED = TERMINAL | {ExecStatus.NEEDS_RECONCILIATION}
"""The attempt is over: terminal, or handed to a human for reconciliation; it holds nothing. A
cancellation converges (CANCELLED_STABLE) when every execution it asked to stop is settled."""


class SessionStatus(StrEnum):
    ACTIVE = "ACTIVE"
    LEFT = "LEFT"
    EXPIRED = "EXPIRED"


class CancelMode(StrEnum):
    """How a blocked waiter may be cancelled (wait-edge.v1 ``cancelMode``)."""

    COOPERATIVE = "COOPERATIVE"
    """The waiter observes cancellation at its next checkpoint."""
    ABORT = "ABORT"
    """The wait may be interrupted at once."""
    NON_CANCELLABLE = "NON_CANCELLABLE"
    """The waiter cannot be interrupted while it waits."""


class EffectOutcome(StrEnum):
    """What is known about an external side effect."""

    NONE = "NONE"
    COMMITTED = "COMMITTED"
    UNKNOWN = "UNKNOWN"


class Relation(StrEnum):
    PRODUCED_BY = "PRODUCED_BY"
    PROVIDED_BY = "PROVIDED_BY"
    HELD_BY = "HELD_BY"


class CancelState(StrEnum):
    """Where a run (or a recovery victim's subtree) is in the cancellation protocol."""

    NOT_CANCELLED = "NOT_CANCELLED"
    CANCELLING = "CANCELLING"
    """Some execution it asked to stop has not settled yet."""
    CANCELLED_STABLE = "CANCELLED_STABLE"
    """Every execution is settled and none of them holds a permit, lease, reservation or claim."""
