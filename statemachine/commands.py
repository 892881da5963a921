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
from .fastinit import fast_init
from .recovery_state import RolloutMode

# -- sessions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinSession:
    """Open (or reopen) the agent's session with a lease; its executions belong to it."""

    KIND: ClassVar[str] = "JoinSession"
    VERSION: ClassVar[int] = 1
    agent_id: str
    lease_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """Renew the agent's session lease in the log (released in version 1; nodes no longer propose
    it: a heartbeat renews the lease at the leader, in memory; an old log's entries still apply)."""

    KIND: ClassVar[str] = "Heartbeat"
    VERSION: ClassVar[int] = 1
    agent_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveSession:
    """Close the agent's session cleanly."""

    KIND: ClassVar[str] = "LeaveSession"
    VERSION: ClassVar[int] = 1
    agent_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpireSession:
    """End an agent's session whose lease ran out at the leader (operators and nodes only).

    Liveness is the leader's, in memory (``cluster/node/lessor.py``): heartbeats are not written to
    the log. When the leader has heard nothing from the agent for its lease, it proposes this; the
    apply names the incarnation it expires, so a late proposal never ends a session joined again.
    """

    KIND: ClassVar[str] = "ExpireSession"
    VERSION: ClassVar[int] = 1
    agent_id: str
    incarnation: int


# -- executions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
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
    observed_cancel_generation: int
    """The run's cancel generation the creator observed (0 for a new run); required, so the
    cancellation fence cannot be bypassed by leaving it out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StartExecution:
    """Activate a PENDING execution (DAG node activation); fenced by the run's cancel generation."""

    KIND: ClassVar[str] = "StartExecution"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    observed_cancel_generation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeExecution:
    """The waiter is making progress again while its waits stay registered (async waits)."""

    KIND: ClassVar[str] = "ResumeExecution"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteExecution:
    """The canonical commit; fenced by the run's cancel generation and by the claim, if any."""

    KIND: ClassVar[str] = "CompleteExecution"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    observed_cancel_generation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FailExecution:
    KIND: ClassVar[str] = "FailExecution"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryExecution:
    """Start a new attempt: generation + 1, back to PENDING; the old attempt's edges close."""

    KIND: ClassVar[str] = "RetryExecution"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int


# -- targets, satisfiers, holdings ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTarget:
    """Create an artifact, approval, reservation, exclusive resource or capacity pool.

    ``slots`` is the pool's capacity; every other kind has exactly one.
    """

    KIND: ClassVar[str] = "CreateTarget"
    VERSION: ClassVar[int] = 1
    target_id: str
    slots: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
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


MAX_LEASE_TTL_MS = 7 * 24 * 3600 * 1000
"""The longest lease TTL an Acquire may ask for (a week): a longer one is no bound at all."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Acquire:
    """Take an exclusive resource, a reservation, or one permit of a pool (HELD_BY).

    ``ttl_ms``: the holding ends by itself ``ttl_ms`` logical ms after this grant (``Tick`` releases
    it with reason ``ttl_expired``, exactly as a Release would, handing it to the next queued
    waiter), unless it ended before; the TTL is fenced by the lease, so it never releases a later
    grant of the same target. 0 by default (no TTL: then never encoded, so the bytes of a command
    without it are those of the release before); at most :data:`MAX_LEASE_TTL_MS`.
    """

    KIND: ClassVar[str] = "Acquire"
    VERSION: ClassVar[int] = 1
    ADDED: ClassVar[tuple[str, ...]] = ("ttl_ms",)
    """Fields added after this version was released (see ``codec``): written only when set."""
    target_id: str
    execution_id: str
    generation: int
    observed_epoch: int = 0
    """The global epoch the caller last saw; an execution rolled back at epoch e is refused while
    it presents an older one (so omitting it is never a way around the fence)."""
    ttl_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    KIND: ClassVar[str] = "Release"
    VERSION: ClassVar[int] = 1
    target_id: str
    execution_id: str
    generation: int


# -- wait edges (wait-edge.v1) -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterWait:
    """WAIT(waiterExecution, waiterGeneration, targetId, targetGeneration, reason, deadline,
    cancelMode, edgeVersion), written before the waiter blocks.

    Registering an edge that exists with a higher ``edge_version`` updates it; an equal or lower
    version is a recorded no-op.

    ``refuse_deadlock``: refuse the wait (FAILED_PRECONDITION ``would_deadlock``, naming the
    path) when it would close a hard cycle, i.e. when a detection pass right after it would find
    it inside a candidate deadlock; nothing changes, so the caller re-plans instead of being
    cancelled later. Off by default (today's behaviour), and then never encoded, so the bytes of
    a command without it are those of the release before.

    ``priority``: the wait's place in a resource's or pool's grant queue (statemachine/queues.py):
    higher goes first, FIFO among equals, bounded by ``Limits.queue_pass_limit``; 0 by default (then
    never encoded). Ignored for other kinds; a re-register keeps the place the wait has.

    ``lease_ttl_ms``: when the wait is granted by a hand-off (resources and pools), the grant
    carries this TTL, as ``Acquire.ttl_ms`` does for an immediate grant; 0 by default (then never
    encoded); ignored for other kinds; a re-register keeps the TTL the queued wait has, as its place.

    ``trace_context``: the W3C ``traceparent`` of the wait's span in the agent's trace
    (``00-<trace id>-<span id>-<flags>``, docs/observability.md), stored with the edge so that the
    recovery that breaks a cycle through it links to it on whichever node commits. Empty by default
    (tracing off: never encoded, nothing stored); a re-register without one keeps the stored one.
    """

    KIND: ClassVar[str] = "RegisterWait"
    VERSION: ClassVar[int] = 1
    ADDED: ClassVar[tuple[str, ...]] = ("refuse_deadlock", "priority", "lease_ttl_ms", "trace_context")
    """Fields added after this version was released (see ``codec``): written only when set."""
    waiter_id: str
    waiter_generation: int
    target_id: str
    target_generation: int
    reason: str
    deadline_ms: int | None = None
    cancel_mode: CancelMode = CancelMode.COOPERATIVE
    edge_version: int = 1
    refuse_deadlock: bool = False
    priority: int = 0
    lease_ttl_ms: int = 0
    trace_context: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceArtifact:
    KIND: ClassVar[str] = "ProduceArtifact"
    VERSION: ClassVar[int] = 1
    artifact_id: str
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DecideApproval:
    KIND: ClassVar[str] = "DecideApproval"
    VERSION: ClassVar[int] = 1
    approval_id: str
    version: int
    approved: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    """Advance logical time: close waits whose deadline has passed. Sessions are not expired
    here any more: the leader proposes :class:`ExpireSession` (version 2 of Tick)."""

    KIND: ClassVar[str] = "Tick"
    VERSION: ClassVar[int] = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class TickV1:
    """Tick as released in version 1, kept so an existing log applies as it did: it also expires
    every ACTIVE session whose lease in the replicated state (``expires_at_ms``) has passed."""

    KIND: ClassVar[str] = "Tick"
    VERSION: ClassVar[int] = 1


# -- ledger ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordSideEffect:
    KIND: ClassVar[str] = "RecordSideEffect"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    effect_id: str
    outcome: EffectOutcome
    compensatable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordCost:
    """Add ``cost`` (non-negative, in the runtime's own unit) to the execution's consumed cost."""

    KIND: ClassVar[str] = "RecordCost"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    cost: int


# -- recovery (docs/design.md §4) ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigureRecovery:
    """Set the voter set, the vote quorum and the livelock guard's K and W.

    The quorum must be strictly greater than ``max_rollback``, the most executions one recovery
    may roll back at once (a victim, or a tie-break's rolled-back members; its yielders keep their
    attempt and do not count); otherwise two disjoint rollback cohorts could both win, and the
    configuration is refused.
    """

    KIND: ClassVar[str] = "ConfigureRecovery"
    VERSION: ClassVar[int] = 1
    voters: tuple[str, ...]
    quorum: int
    max_rollback: int
    confirmation_window_ms: int = 500
    livelock_repeats: int = 2
    livelock_window_ms: int = 60_000


@dataclass(frozen=True, slots=True, kw_only=True)
class SetMode:
    """Set the rollout mode for the cluster (``run_id`` none) or override it for one run.

    ``mode`` none on a run removes its override. ``side_effect_free`` (runs only) marks the run
    as one that ``auto-safe`` may act on.
    """

    KIND: ClassVar[str] = "SetMode"
    VERSION: ClassVar[int] = 1
    mode: RolloutMode | None
    run_id: str | None = None
    side_effect_free: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SetApprover:
    """Name the independent approver for the cluster (``run_id`` none) or for one run.

    ``approver_id`` is a ``human:`` id (an outside approver) or an ``exec:`` outside the run; a
    recovery may move an approval trapped in a cycle (its provider is a member) to it (REASSIGN,
    statemachine/reassign.py). ``approver_id`` none removes the setting.
    """

    KIND: ClassVar[str] = "SetApprover"
    VERSION: ClassVar[int] = 1
    approver_id: str | None
    run_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProposeRecovery:
    """Phase one: a detector saw this candidate deadlock at ``observed_index``.

    Apply re-validates it against the state at its own log position (the second read).
    """

    KIND: ClassVar[str] = "ProposeRecovery"
    VERSION: ClassVar[int] = 1
    digest: str
    member_ids: tuple[str, ...]
    member_generations: tuple[int, ...]
    edge_ids: tuple[str, ...]
    edge_versions: tuple[int, ...]
    observed_index: int


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteRecovery:
    """The sending actor's vote on an open proposal; it must be in the configured voter set."""

    KIND: ClassVar[str] = "VoteRecovery"
    VERSION: ClassVar[int] = 1
    digest: str
    approve: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitRecovery:
    """Phase two: after the confirmation window and with the quorum, decide and act, in order:
    epoch, decision, victim CAS, cancellation, and only then releases."""

    KIND: ClassVar[str] = "CommitRecovery"
    VERSION: ClassVar[int] = 1
    digest: str


# -- cancellation (docs/design.md §5) --------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRun:
    """Raise the run's cancel generation and ask every unsettled execution of it to stop.

    Sent by an operator, by the agent of the run's root (a parent), or by a cluster node acting on
    a recovery decision. ``observed_cancel_generation`` older than the run's is a recorded no-op
    (someone already raised it past what the sender saw).
    """

    KIND: ClassVar[str] = "CancelRun"
    VERSION: ClassVar[int] = 1
    run_id: str
    observed_cancel_generation: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AckCancel:
    """The execution stopped at ``cancel_generation``; ``side_effects`` is the outcome of its tool
    calls still in flight (NONE / COMMITTED / UNKNOWN). Known outcomes of single calls are
    recorded with RecordSideEffect before the ack."""

    KIND: ClassVar[str] = "AckCancel"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    cancel_generation: int
    side_effects: EffectOutcome


@dataclass(frozen=True, slots=True, kw_only=True)
class ReemitCancels:
    """The leader's periodic convergence pass: quarantine executions past the cancellation SLO and
    re-emit CancelRequested.v1 to those that have not acknowledged (at most ``max_emissions``)."""

    KIND: ClassVar[str] = "ReemitCancels"
    VERSION: ClassVar[int] = 1
    max_emissions: int = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseQuarantine:
    """An operator settles a QUARANTINED execution and hands its resources back;
    ``side_effects`` is what was established for its calls still in flight."""

    KIND: ClassVar[str] = "ReleaseQuarantine"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    side_effects: EffectOutcome
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimTask:
    """Claim the execution's current attempt for ``lease_ms`` of logical time; an expired claim is
    taken over at generation + 1."""

    KIND: ClassVar[str] = "ClaimTask"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    observed_cancel_generation: int
    lease_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RenewClaim:
    KIND: ClassVar[str] = "RenewClaim"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    observed_cancel_generation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptToolCall:
    """Admit one tool call of a RUNNING attempt; it is in flight until its outcome is recorded."""

    KIND: ClassVar[str] = "AcceptToolCall"
    VERSION: ClassVar[int] = 1
    execution_id: str
    generation: int
    observed_cancel_generation: int
    effect_id: str
    compensatable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class FreezeAdmission:
    """Refuse new delegations (child creation, claims) for one run, or without ``run_id`` for the
    whole cluster, e.g. before a schema rollback. Nothing admitted is cleared."""

    KIND: ClassVar[str] = "FreezeAdmission"
    VERSION: ClassVar[int] = 1
    run_id: str | None = None
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfreezeAdmission:
    KIND: ClassVar[str] = "UnfreezeAdmission"
    VERSION: ClassVar[int] = 1
    run_id: str | None = None
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigureCancellation:
    """Set the cancellation SLO and the re-emission interval (logical ms)."""

    KIND: ClassVar[str] = "ConfigureCancellation"
    VERSION: ClassVar[int] = 1
    slo_ms: int
    reemit_interval_ms: int


# -- retirement (statemachine/retire.py) -----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RetireSettled:
    """The leader's periodic retirement pass: move settled work that settled more than
    ``retention_ms`` of logical time ago out of the live state (each record leaves as an effect
    the history store is written from), at most ``max_runs`` runs per pass, oldest first; forget
    tombstones older than one retention. Sent by cluster nodes and operators only."""

    KIND: ClassVar[str] = "RetireSettled"
    VERSION: ClassVar[int] = 1
    retention_ms: int
    max_runs: int = 1000


Command = (
    JoinSession
    | Heartbeat
    | LeaveSession
    | ExpireSession
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
    | TickV1
    | RecordSideEffect
    | RecordCost
    | ConfigureRecovery
    | SetMode
    | SetApprover
    | ProposeRecovery
    | VoteRecovery
    | CommitRecovery
    | CancelRun
    | AckCancel
    | ReemitCancels
    | ReleaseQuarantine
    | ClaimTask
    | RenewClaim
    | AcceptToolCall
    | FreezeAdmission
    | UnfreezeAdmission
    | ConfigureCancellation
    | RetireSettled
)

COMMANDS: tuple[type[Command], ...] = (
    JoinSession,
    Heartbeat,
    LeaveSession,
    ExpireSession,
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
    TickV1,
    RecordSideEffect,
    RecordCost,
    ConfigureRecovery,
    SetMode,
    SetApprover,
    ProposeRecovery,
    VoteRecovery,
    CommitRecovery,
    CancelRun,
    AckCancel,
    ReemitCancels,
    ReleaseQuarantine,
    ClaimTask,
    RenewClaim,
    AcceptToolCall,
    FreezeAdmission,
    UnfreezeAdmission,
    ConfigureCancellation,
    RetireSettled,
)
for _command in COMMANDS:
    fast_init(_command)  # every replica builds one per write (statemachine/fastinit.py)


@fast_init
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
