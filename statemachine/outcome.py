"""The result of applying one command: applied (with effects), a recorded no-op, or a rejection."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .effects import Effect
from .errors import Rejection, Status
from .fastinit import fast_init


class Result(StrEnum):
    APPLIED = "APPLIED"
    NOOP = "NOOP"
    """Nothing changed, on purpose, for a recorded reason (a late message from an old attempt)."""
    REJECTED = "REJECTED"


@fast_init
@dataclass(frozen=True, slots=True)
class Outcome:
    result: Result
    effects: tuple[Effect, ...] = ()
    code: str = ""
    """The no-op reason or the rejection code; empty when applied."""
    status: Status | None = None
    message: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    duplicate: bool = False
    """True when this outcome was served from the idempotency table for a repeated request id."""

    @property
    def ok(self) -> bool:
        """The command changed the state (APPLIED). False for a rejection, and for a NOOP: nothing
        changed, on purpose (:attr:`noop_reason`), e.g. a late close or commit of an attempt that
        is already over."""
        return self.result is Result.APPLIED

    @property
    def noop_reason(self) -> str | None:
        """Why a NOOP changed nothing (``stale_generation``, ``already_closed``...); None otherwise."""
        return self.code if self.result is Result.NOOP else None

    def error(self) -> Rejection:
        if self.status is None:
            raise ValueError("not a rejection")
        return Rejection(self.status, self.code, self.message, **self.fields)


MAX_TEXT_LEN = 512
"""Longest message or text field an outcome carries. Messages echo input (ids, kinds) and the
codec refuses strings over 1024 characters, so an unclipped rejection of hostile input would be an
outcome that cannot be decoded."""


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_TEXT_LEN:
        return value[: MAX_TEXT_LEN - 3] + "..."
    return value


_APPLIED = Result.APPLIED
"""Read once: every applied command makes an outcome, and a member read off its enum class is
slow on Python 3.11 (EnumType defines __getattr__)."""


def applied(effects: list[Effect] | tuple[Effect, ...]) -> Outcome:
    return Outcome(_APPLIED, tuple(effects))


def noop(reason: str, message: str, **fields: Any) -> Outcome:
    return Outcome(Result.NOOP, (), reason, None, _clip(message), {k: _clip(v) for k, v in fields.items()})


def rejected(err: Rejection) -> Outcome:
    fields = {k: _clip(v) for k, v in err.fields.items()}
    return Outcome(Result.REJECTED, (), err.code, err.status, _clip(err.message), fields)
