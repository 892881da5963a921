"""The apply context every handler module shares, and the checks they all make.

Rules kept here:
- :class:`Ctx` is one apply in progress: the state, who sent the command, the logical time, and
  the effects so far. Handlers append effects to ``ctx.fx``; nothing else is returned sideways.
- Every check raises a typed :class:`~waitgraph.statemachine.errors.Rejection` before anything is
  mutated, so a rejected command changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import errors as E
from .codec import INT64_MAX
from .effects import (
    Effect,
)
from .enums import SessionStatus
from .errors import Rejection
from .ids import (
    ActorKind,
    Kind,
    id_kind,
)
from .state import Execution, State

# Members compared on every apply, read once here: reading a member off its enum class takes the
# metaclass's slow attribute path on Python 3.11 (EnumType defines __getattr__), ~60 ns a time.
_AGENT = ActorKind.AGENT


_ACTIVE = SessionStatus.ACTIVE


@dataclass(slots=True, init=False)
class Ctx:
    """One apply in progress: who, when, and the effects accumulated so far."""

    state: State
    actor: str
    actor_kind: ActorKind
    now: int
    fx: list[Effect]
    agent_id: str | None
    """The sending agent's id (None for operators and nodes), read by most handlers."""

    def __init__(self, state: State, actor: str, actor_kind: ActorKind, now: int) -> None:
        # Written out: one is made per apply, and the generated __init__ with a default factory
        # and a __post_init__ cost twice as much.
        self.state = state
        self.actor = actor
        self.actor_kind = actor_kind
        self.now = now
        self.fx = []
        self.agent_id = actor.partition(":")[2] if actor_kind is _AGENT else None


def check_reason(ctx: Ctx, reason: str) -> None:
    if not reason or len(reason) > ctx.state.limits.max_reason_len:
        raise E.invalid("bad_reason", f"reason must be 1..{ctx.state.limits.max_reason_len} characters")


def check_nonneg(value: int, name: str) -> None:
    if value < 0:
        raise E.invalid("negative", f"{name} must not be negative", field=name)


def require_session(ctx: Ctx) -> None:
    agent = ctx.agent_id
    if agent is None:
        return
    s = ctx.state.sessions.get(agent)
    if s is None or s.status is not _ACTIVE:
        raise E.precondition("no_session", f"agent {agent} has no active session; join first", agent_id=agent)


def require_operator(ctx: Ctx, what: str) -> None:
    if ctx.actor_kind is ActorKind.AGENT:
        raise E.denied("operator_only", f"{what} is for operators and cluster nodes, not agents")


_EXEC_ONLY = frozenset({Kind.EXEC})


def owned_execution(
    ctx: Ctx, execution_id: str, *, field: str = "execution_id", generation: int | None = None
) -> Execution:
    """The execution, checked to belong to the sending agent (operators and nodes may act on any).

    ``field`` names the command's field in a malformed-id rejection (``waiter_id``...).
    ``generation``: the attempt the command acts for. An agent presenting an attempt older than
    the current one of an execution another agent now owns is an old worker after a claim
    takeover: it is told its attempt was superseded (``stale_generation``), which is what it must
    act on, rather than that the execution belongs to someone else.
    """
    id_kind(execution_id, field, _EXEC_ONLY)
    ex = ctx.state.executions.get(execution_id)
    if ex is None:
        raise missing_execution(ctx.state, execution_id)
    agent = ctx.agent_id
    if agent is not None and ex.agent_id != agent:
        if generation is not None and generation < ex.generation:
            raise E.precondition(
                "stale_generation",
                f"{execution_id} g{generation} was superseded by generation {ex.generation}, which another "
                "agent now runs (a claim takeover); this attempt can no longer act or commit",
                execution_id=execution_id,
                current=ex.generation,
            )
        raise E.denied("not_owner", f"{execution_id} belongs to another agent's session", execution_id=execution_id)
    require_session(ctx)
    return ex


def check_current(ex: Execution, generation: int) -> None:
    """Acting under a generation other than the current one is refused."""
    if generation < ex.generation:
        raise E.precondition(
            "stale_generation",
            f"{ex.execution_id} is at generation {ex.generation}; g{generation} is an old attempt",
            execution_id=ex.execution_id,
            current=ex.generation,
        )
    if generation > ex.generation:
        raise E.invalid(
            "future_generation",
            f"{ex.execution_id} is at generation {ex.generation}; g{generation} does not exist yet",
            execution_id=ex.execution_id,
            current=ex.generation,
        )


def check_open_execution_room(st: State, agent_id: str) -> None:
    """Refuse one more unsettled execution for ``agent_id`` (a creation, a retry of a settled
    execution, a claim takeover) when it already has its share."""
    limit = st.limits.max_open_executions_per_agent
    if st.open_executions_by_agent.get(agent_id, 0) >= limit:
        raise E.exhausted(
            "agent_execution_limit",
            f"agent {agent_id} already has {limit} open executions (max_open_executions_per_agent); "
            "finish, fail or cancel some first",
            agent_id=agent_id,
            limit=limit,
        )


# -- retired ids (statemachine/retire.py) ---------------------------------------------------------


def later(at_ms: int, ms: int) -> int:
    """``at_ms + ms``, clamped to int64: logical time may be near the top of its range, and a
    snapshot holding a larger number could not be read back (codec: "out of the 64-bit range")."""
    return min(at_ms + ms, INT64_MAX)


def _missing(
    tombstones: dict[str, int], field: str, value: str, retired: Callable[[int], str], absent: str, code: str
) -> Rejection:
    """``retired`` (its message from the time the tombstone says) while ``value``'s tombstone
    lasts, else ``code`` with the ``absent`` message."""
    at = tombstones.get(value)
    if at is not None:
        return E.not_found("retired", retired(at), **{field: value, "retired_at_ms": at})
    return E.not_found(code, absent, **{field: value})


def missing_execution(st: State, execution_id: str, what: str = "") -> Rejection:
    """The rejection for an execution that is not in the live state: ``retired`` (with when)
    while its tombstone lasts, else ``no_execution``. ``what`` names its role ("parent ")."""
    return _missing(
        st.retired_executions,
        "execution_id",
        execution_id,
        lambda at: (
            f"{what}{execution_id} settled and retired at {at} ms; it is in the history store "
            f"(`waitgraph history --execution {execution_id}`), no longer in the live state"
        ),
        f"{what}{execution_id} does not exist",
        "no_execution",
    )


def missing_target(st: State, target_id: str) -> Rejection:
    """As :func:`missing_execution`, for a target: ``retired`` (``CreateTarget`` makes it again)
    or ``no_target``."""
    return _missing(
        st.retired_targets,
        "target_id",
        target_id,
        lambda at: (
            f"{target_id} was idle for a retention and retired at {at} ms; it is in the history store "
            f"(`waitgraph history --target {target_id}`); CreateTarget makes it again, afresh"
        ),
        f"{target_id} does not exist",
        "no_target",
    )


def missing_run(st: State, run_id: str) -> Rejection:
    """As :func:`missing_execution`, for a run: ``retired`` or ``no_run``."""
    return _missing(
        st.retired_runs,
        "run_id",
        run_id,
        lambda at: (
            f"run {run_id} settled and retired at {at} ms; it is in the history store "
            f"(`waitgraph history --run {run_id}`), no longer in the live state"
        ),
        f"run {run_id} does not exist",
        "no_run",
    )


def check_fresh_ids(st: State, execution_id: str, run_id: str | None) -> None:
    """Refuse to create an execution (or, with ``run_id``, a run) under an id that retired and is
    still remembered: a late or repeated create must not start a second life of settled work.
    Once its tombstone is forgotten (one retention after it retired) the id is free again."""
    at = st.retired_executions.get(execution_id)
    if at is not None:
        raise E.exists(
            "retired",
            f"{execution_id} retired at {at} ms; an execution id is not reused while its retirement is remembered",
            execution_id=execution_id,
            retired_at_ms=at,
        )
    at = st.retired_runs.get(run_id) if run_id is not None else None
    if at is not None:
        raise E.exists(
            "retired",
            f"run {run_id} retired at {at} ms; a run id is not reused while its retirement is remembered "
            "(start the new run under a new id)",
            run_id=run_id,
            retired_at_ms=at,
        )
