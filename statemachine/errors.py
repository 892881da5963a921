"""One error root for the whole core.

Rules kept here:
- A rejection is a value: it carries a stable ``code``, a ``status`` (the gRPC-shaped category the
  shell maps to a status code) and typed ``fields``. Inside ``apply`` it is returned in the
  outcome and replicated like any other result; it never escapes.
- ``CodecError`` is raised for bytes that cannot become a command; nothing is applied.
- ``InvariantViolation`` is a bug: the core found its own state inconsistent, whatever the input.
  Raised inside ``apply``, it does not stop the node: the Raft layer answers that command
  ``INTERNAL``, logs it at CRITICAL and counts it (``invariant_violations``, in ``waitgraph status``),
  and goes on with the next entry (``cluster/node/raft/_apply.py``). Stopping would not contain it:
  every replica applies the same bytes to the same state, so every replica raises on the same entry,
  and raises again when a restart re-applies it from the log: the whole cluster would stop for good.
  The core checks before it mutates, so the command usually changed nothing, and when it did, every
  replica kept the same partial change.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class Status(StrEnum):
    """Error category; ``cluster/`` maps each one to exactly one gRPC status code."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL = "INTERNAL"


class WaitgraphError(Exception):
    """Root of every error waitgraph raises or returns."""

    status: Status = Status.INTERNAL
    code: str = "internal"

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields: dict[str, Any] = fields

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}: {self.message})"


class Rejection(WaitgraphError):
    """A business rejection of one command; the state is left unchanged."""

    def __init__(self, status: Status, code: str, message: str, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.status = status
        self.code = code

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Rejection) and (self.status, self.code, self.message, self.fields) == (
            other.status,
            other.code,
            other.message,
            other.fields,
        )

    def __hash__(self) -> int:
        return hash((self.status, self.code, self.message))


class CodecError(WaitgraphError):
    """Bytes or values that cannot be decoded into a command, effect or snapshot."""

    status = Status.INVALID_ARGUMENT
    code = "codec"


class InvariantViolation(WaitgraphError):
    """The core found its own state inconsistent: a bug, never a user error. Inside ``apply`` it
    becomes an ``INTERNAL`` outcome of that command, loud but not fatal (module docstring)."""

    status = Status.INTERNAL
    code = "invariant_violation"


def invalid(code: str, message: str, **fields: Any) -> Rejection:
    return Rejection(Status.INVALID_ARGUMENT, code, message, **fields)


def not_found(code: str, message: str, **fields: Any) -> Rejection:
    return Rejection(Status.NOT_FOUND, code, message, **fields)


def exists(code: str, message: str, **fields: Any) -> Rejection:
    return Rejection(Status.ALREADY_EXISTS, code, message, **fields)


def precondition(code: str, message: str, **fields: Any) -> Rejection:
    return Rejection(Status.FAILED_PRECONDITION, code, message, **fields)


def aborted(code: str, message: str, **fields: Any) -> Rejection:
    return Rejection(Status.ABORTED, code, message, **fields)


def denied(code: str, message: str, **fields: Any) -> Rejection:
    return Rejection(Status.PERMISSION_DENIED, code, message, **fields)


def exhausted(code: str, message: str, **fields: Any) -> Rejection:
    return Rejection(Status.RESOURCE_EXHAUSTED, code, message, **fields)
