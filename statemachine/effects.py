"""Effects: what an applied command did, in the past tense, as values the shell acts on.

Effects are part of the replicated outcome (the idempotency table stores them), so they are
frozen, versioned and encoded by the same codec as commands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .enums import CancelMode, EffectOutcome, ExecStatus, Relation

_FX = dict(frozen=True, slots=True, kw_only=True)


@dataclass(**_FX)
class SessionJoined:
    KIND: ClassVar[str] = "SessionJoined"
    VERSION: ClassVar[int] = 1
    agent_id: str
    incarnation: int
    expires_at_ms: int


@dataclass(**_FX)
class SessionRenewed:
    KIND: ClassVar[str] = "SessionRenewed"
    VERSION: ClassVar[int] = 1
    agent_id: str
    expires_at_ms: int


@dataclass(**_FX)
class SessionEnded:
    """``reason`` is ``left`` or ``expired``."""

    KIND: ClassVar[str] = "SessionEnded"
    VERSION: ClassVar[int] = 1
    agent_id: str
    reason: str


@dataclass(**_FX)
class ExecutionCreated:
    KIND: ClassVar[str] = "ExecutionCreated"
    VERSION: ClassVar[int] = 1
    execution_id: str
    run_id: str
    agent_id: str
    generation: int


@dataclass(**_FX)
class ExecutionStateChanged:
    KIND: ClassVar[str] = "ExecutionStateChanged"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    before: ExecStatus
    after: ExecStatus
    cause: str


@dataclass(**_FX)
class GenerationAdvanced:
    KIND: ClassVar[str] = "GenerationAdvanced"
    VERSION: ClassVar[int] = 1
    execution_id: str
    before: int
    after: int


@dataclass(**_FX)
class TargetCreated:
    KIND: ClassVar[str] = "TargetCreated"
    VERSION: ClassVar[int] = 1
    target_id: str
    slots: int


@dataclass(**_FX)
class SatisfierDeclared:
    KIND: ClassVar[str] = "SatisfierDeclared"
    VERSION: ClassVar[int] = 1
    target_id: str
    target_generation: int
    relation: Relation
    satisfier_id: str
    satisfier_generation: int


@dataclass(**_FX)
class SatisfierClosed:
    KIND: ClassVar[str] = "SatisfierClosed"
    VERSION: ClassVar[int] = 1
    target_id: str
    satisfier_id: str
    satisfier_generation: int
    reason: str


@dataclass(**_FX)
class Acquired:
    KIND: ClassVar[str] = "Acquired"
    VERSION: ClassVar[int] = 1
    target_id: str
    execution_id: str
    generation: int
    lease: int


@dataclass(**_FX)
class Released:
    KIND: ClassVar[str] = "Released"
    VERSION: ClassVar[int] = 1
    target_id: str
    execution_id: str
    generation: int
    lease: int
    reason: str


@dataclass(**_FX)
class WaitRegistered:
    KIND: ClassVar[str] = "WaitRegistered"
    VERSION: ClassVar[int] = 1
    edge_id: str
    waiter_generation: int
    target_generation: int
    edge_version: int
    deadline_ms: int | None
    cancel_mode: CancelMode


@dataclass(**_FX)
class WaitClosed:
    KIND: ClassVar[str] = "WaitClosed"
    VERSION: ClassVar[int] = 1
    edge_id: str
    waiter_generation: int
    edge_version: int
    reason: str


@dataclass(**_FX)
class ArtifactProduced:
    KIND: ClassVar[str] = "ArtifactProduced"
    VERSION: ClassVar[int] = 1
    artifact_id: str
    version: int


@dataclass(**_FX)
class ApprovalDecided:
    KIND: ClassVar[str] = "ApprovalDecided"
    VERSION: ClassVar[int] = 1
    approval_id: str
    version: int
    approved: bool


@dataclass(**_FX)
class SideEffectRecorded:
    KIND: ClassVar[str] = "SideEffectRecorded"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    effect_id: str
    outcome: EffectOutcome
    compensatable: bool


@dataclass(**_FX)
class CostRecorded:
    KIND: ClassVar[str] = "CostRecorded"
    VERSION: ClassVar[int] = 1
    execution_id: str
    cost_consumed: int


Effect = (
    SessionJoined
    | SessionRenewed
    | SessionEnded
    | ExecutionCreated
    | ExecutionStateChanged
    | GenerationAdvanced
    | TargetCreated
    | SatisfierDeclared
    | SatisfierClosed
    | Acquired
    | Released
    | WaitRegistered
    | WaitClosed
    | ArtifactProduced
    | ApprovalDecided
    | SideEffectRecorded
    | CostRecorded
)

EFFECTS: tuple[type[Effect], ...] = (
    SessionJoined,
    SessionRenewed,
    SessionEnded,
    ExecutionCreated,
    ExecutionStateChanged,
    GenerationAdvanced,
    TargetCreated,
    SatisfierDeclared,
    SatisfierClosed,
    Acquired,
    Released,
    WaitRegistered,
    WaitClosed,
    ArtifactProduced,
    ApprovalDecided,
    SideEffectRecorded,
    CostRecorded,
)
