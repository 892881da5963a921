"""Commands: the only inputs of the state machine.

Rules kept here:
- A command is a small frozen dataclass named as an imperative, with a ``KIND`` and a ``VERSION``.
  Changing a released command's fields means a new VERSION and a decoder kept for the old one.
- Fields are plain values (str, int, bool, an enum, or None); the codec checks every type.
- Who sends a command, when, and under which request id travels in the :class:`Envelope`, stamped
  once by the proposing node: apply never reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .enums import CancelMode, EffectOutcome

_CMD = dict(frozen=True, slots=True, kw_only=True)


# -- sessions --------------------------------------------------------------------------------


@dataclass(**_CMD)
class JoinSession:
    """Open (or reopen) the agent's session with a lease; its executions belong to it."""

    KIND: ClassVar[str] = "JoinSession"
    VERSION: ClassVar[int] = 1
    agent_id: str
    lease_ms: int


@dataclass(**_CMD)
class Heartbeat:
    """Renew the agent's session lease."""

    KIND: ClassVar[str] = "Heartbeat"
    VERSION: ClassVar[int] = 1
    agent_id: str


@dataclass(**_CMD)
class LeaveSession:
    """Close the agent's session cleanly."""

    KIND: ClassVar[str] = "LeaveSession"
    VERSION: ClassVar[int] = 1
    agent_id: str


# -- executions ------------------------------------------------------------------------------


@dataclass(**_CMD)
class CreateExecution:
    """Create an execution at generation 1 in state PENDING.

    ``agent_id`` defaults to the sending agent. An agent may create an execution owned by another
    agent only as a delegation: the parent must be its own.
    """

    KIND: ClassVar[str] = "CreateExecution"
    VERSION: ClassVar[int] = 1
    execution_id: str
    run_id: str
    parent_id: str | None = None
    agent_id: str | None = None
    priority: int = 0
    checkpoint: bool = False
    unique_evidence: bool = False


@dataclass(**_CMD)
class StartExecution:
    KIND: ClassVar[str] = "StartExecution"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int


@dataclass(**_CMD)
class ResumeExecution:
    """The waiter is making progress again while its waits stay registered (async waits)."""

    KIND: ClassVar[str] = "ResumeExecution"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int


@dataclass(**_CMD)
class CompleteExecution:
    KIND: ClassVar[str] = "CompleteExecution"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int


@dataclass(**_CMD)
class FailExecution:
    KIND: ClassVar[str] = "FailExecution"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    reason: str


@dataclass(**_CMD)
class RetryExecution:
    """Start a new attempt: generation + 1, back to PENDING; the old attempt's edges close."""

    KIND: ClassVar[str] = "RetryExecution"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int


# -- targets, satisfiers, holdings ------------------------------------------------------------


@dataclass(**_CMD)
class CreateTarget:
    """Create an artifact, approval, reservation, exclusive resource or capacity pool.

    ``slots`` is the pool's capacity; every other kind has exactly one.
    """

    KIND: ClassVar[str] = "CreateTarget"
    VERSION: ClassVar[int] = 1
    target_id: str
    slots: int = 1


@dataclass(**_CMD)
class DeclareSatisfier:
    """PRODUCED_BY (artifact) or PROVIDED_BY (approval) ``target@target_generation -> satisfier``.

    The satisfier is an execution at a generation, or an explicit ``human:``/``external:`` id
    that no execution controls (``satisfier_generation`` is then 0).
    """

    KIND: ClassVar[str] = "DeclareSatisfier"
    VERSION: ClassVar[int] = 1
    target_id: str
    target_generation: int
    satisfier_id: str
    satisfier_generation: int = 0


@dataclass(**_CMD)
class Acquire:
    """Take an exclusive resource, a reservation, or one permit of a pool (HELD_BY)."""

    KIND: ClassVar[str] = "Acquire"
    VERSION: ClassVar[int] = 1
    target_id: str
    execution_id: str
    generation: int


@dataclass(**_CMD)
class Release:
    KIND: ClassVar[str] = "Release"
    VERSION: ClassVar[int] = 1
    target_id: str
    execution_id: str
    generation: int


# -- wait edges (wait-edge.v1) -----------------------------------------------------------------


@dataclass(**_CMD)
class RegisterWait:
    """WAIT(waiterExecution, waiterGeneration, targetId, targetGeneration, reason, deadline,
    cancelMode, edgeVersion), written before the waiter blocks.

    Registering an edge that exists with a higher ``edge_version`` updates it; an equal or lower
    version is a recorded no-op.
    """

    KIND: ClassVar[str] = "RegisterWait"
    VERSION: ClassVar[int] = 1
    waiter_id: str
    waiter_generation: int
    target_id: str
    target_generation: int
    reason: str
    deadline_ms: int | None = None
    cancel_mode: CancelMode = CancelMode.COOPERATIVE
    edge_version: int = 1


@dataclass(**_CMD)
class CloseWait:
    """Close a wait; naming an older waiter generation or edge version is a recorded no-op."""

    KIND: ClassVar[str] = "CloseWait"
    VERSION: ClassVar[int] = 1
    waiter_id: str
    waiter_generation: int
    target_id: str
    edge_version: int
    reason: str


# -- target events -----------------------------------------------------------------------------


@dataclass(**_CMD)
class ProduceArtifact:
    KIND: ClassVar[str] = "ProduceArtifact"
    VERSION: ClassVar[int] = 1
    artifact_id: str
    version: int


@dataclass(**_CMD)
class DecideApproval:
    KIND: ClassVar[str] = "DecideApproval"
    VERSION: ClassVar[int] = 1
    approval_id: str
    version: int
    approved: bool


@dataclass(**_CMD)
class Tick:
    """Advance logical time: expire sessions and close waits whose deadline has passed."""

    KIND: ClassVar[str] = "Tick"
    VERSION: ClassVar[int] = 1


# -- ledger ------------------------------------------------------------------------------------


@dataclass(**_CMD)
class RecordSideEffect:
    KIND: ClassVar[str] = "RecordSideEffect"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    effect_id: str
    outcome: EffectOutcome
    compensatable: bool = False


@dataclass(**_CMD)
class RecordCost:
    """Add ``cost`` (non-negative, in the runtime's own unit) to the execution's consumed cost."""

    KIND: ClassVar[str] = "RecordCost"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    cost: int


Command = (
    JoinSession
    | Heartbeat
    | LeaveSession
    | CreateExecution
    | StartExecution
    | ResumeExecution
    | CompleteExecution
    | FailExecution
    | RetryExecution
    | CreateTarget
    | DeclareSatisfier
    | Acquire
    | Release
    | RegisterWait
    | CloseWait
    | ProduceArtifact
    | DecideApproval
    | Tick
    | RecordSideEffect
    | RecordCost
)

COMMANDS: tuple[type[Command], ...] = (
    JoinSession,
    Heartbeat,
    LeaveSession,
    CreateExecution,
    StartExecution,
    ResumeExecution,
    CompleteExecution,
    FailExecution,
    RetryExecution,
    CreateTarget,
    DeclareSatisfier,
    Acquire,
    Release,
    RegisterWait,
    CloseWait,
    ProduceArtifact,
    DecideApproval,
    Tick,
    RecordSideEffect,
    RecordCost,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """One proposed command with what the proposing node stamped on it.

    ``actor`` is the authenticated principal (``agent:<id>``, ``operator:<id>``, ``node:<id>``);
    ``request_id`` makes retries idempotent; ``at_ms`` is the proposer's clock, read once.
    """

    KIND: ClassVar[str] = "Envelope"
    VERSION: ClassVar[int] = 1
    actor: str
    at_ms: int
    request_id: str | None
    command: Command
