"""Typed, resolvable identifiers.

Only ids of a known kind enter the graph: ``"the security agent"`` is not an id and is refused.
An id is ``<kind>:<name>``; generations and versions travel in their own integer fields, so an id
never changes when an execution is retried or a resource is leased again.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from .errors import invalid

MAX_ID_LEN = 128

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-/@+]*\Z")


class Kind(StrEnum):
    EXEC = "exec"
    ARTIFACT = "artifact"
    APPROVAL = "approval"
    RESERVATION = "reservation"
    RESOURCE = "resource"
    POOL = "pool"
    HUMAN = "human"
    EXTERNAL = "external"


TARGET_KINDS = frozenset({Kind.EXEC, Kind.ARTIFACT, Kind.APPROVAL, Kind.RESERVATION, Kind.RESOURCE, Kind.POOL})
"""Kinds a wait edge may point at."""

CREATED_TARGET_KINDS = frozenset({Kind.ARTIFACT, Kind.APPROVAL, Kind.RESERVATION, Kind.RESOURCE, Kind.POOL})
"""Kinds created with ``CreateTarget`` (executions are created with ``CreateExecution``)."""

HELD_KINDS = frozenset({Kind.RESERVATION, Kind.RESOURCE, Kind.POOL})
"""Kinds whose satisfiers are holders (HELD_BY), set by acquire and cleared by release."""

DECLARED_KINDS = frozenset({Kind.ARTIFACT, Kind.APPROVAL})
"""Kinds whose satisfier is declared: PRODUCED_BY (artifact) or PROVIDED_BY (approval)."""

OUTSIDE_KINDS = frozenset({Kind.HUMAN, Kind.EXTERNAL})
"""Satisfiers no execution controls; a wait on them is never part of a deadlock."""

_KINDS = {k.value: k for k in Kind}


class ActorKind(StrEnum):
    AGENT = "agent"
    OPERATOR = "operator"
    NODE = "node"


_ACTOR_KINDS = {k.value: k for k in ActorKind}


def _split(value: object, field: str) -> tuple[str, str]:
    if not isinstance(value, str):
        raise invalid("bad_id", f"{field} must be a string id, got {type(value).__name__}", field=field)
    if len(value) > MAX_ID_LEN:
        raise invalid("id_too_long", f"{field} is {len(value)} characters; the limit is {MAX_ID_LEN}", field=field)
    prefix, sep, name = value.partition(":")
    if not sep or not _NAME.match(name):
        raise invalid(
            "unresolvable_id",
            f"{field}={value!r} is not a resolvable id; expected <kind>:<name> such as exec:review-1",
            field=field,
        )
    return prefix, name


_MEMO_SIZE = 16_384
_PREFIXES: dict[str, str] = {}
"""Well-formed id -> its prefix. The same ids come back in nearly every command (an agent's
actor, executions and targets) and the regular expression is most of a check. A memo of a pure
function holding only ids that passed it (a bad id is checked again, with its own message each
time), bounded by clearing it when full: it changes no result."""
_NAMES: dict[str, None] = {}
"""Valid bare names (:func:`validate_name`), kept the same way."""


def _remember(memo: dict[str, Any], key: str, value: Any) -> None:
    if len(memo) >= _MEMO_SIZE:
        memo.clear()
    memo[key] = value


def _prefix(value: object, field: str) -> str:
    """The prefix of a well-formed id (raises as :func:`_split` does)."""
    if type(value) is not str:
        return _split(value, field)[0]
    prefix = _PREFIXES.get(value)
    if prefix is None:
        prefix = _split(value, field)[0]
        _remember(_PREFIXES, value, prefix)
    return prefix


def id_kind(value: object, field: str, allowed: frozenset[Kind]) -> Kind:
    """Validate ``value`` as an id of one of ``allowed`` kinds and return its kind."""
    prefix = _prefix(value, field)
    kind = _KINDS.get(prefix)
    if kind is None or kind not in allowed:
        names = ", ".join(sorted(k.value + ":" for k in allowed))
        raise invalid("wrong_id_kind", f"{field}={value!r} must be one of {names}", field=field)
    return kind


def kind_of(value: str) -> Kind:
    """Kind of an id already validated by :func:`id_kind`."""
    return _KINDS[value.partition(":")[0]]


def actor_kind(value: object) -> ActorKind:
    prefix = _prefix(value, "actor")
    kind = _ACTOR_KINDS.get(prefix)
    if kind is None:
        raise invalid("bad_actor", f"actor={value!r} must be agent:, operator: or node:", field="actor")
    return kind


def agent_actor(agent_id: str) -> str:
    return f"agent:{agent_id}"


def validate_name(value: object, field: str) -> str:
    """A bare name (an agent id, a run id, an effect id): same alphabet as the part after ``:``."""
    if type(value) is str and value in _NAMES:
        return value
    if not isinstance(value, str):
        raise invalid("bad_name", f"{field} must be a string", field=field)
    if len(value) > MAX_ID_LEN or not _NAME.match(value):
        raise invalid("bad_name", f"{field}={value!r} is not a valid name", field=field)
    if type(value) is str:
        _remember(_NAMES, value, None)
    return value


TRACE_CONTEXT_LEN = 55
"""A W3C ``traceparent`` of version 00: ``00-`` 32 hex ``-`` 16 hex ``-`` 2 hex."""
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}\Z")


def check_trace_context(value: str) -> str:
    """``value`` if it is empty or a well-formed W3C ``traceparent`` (version 00, lowercase hex,
    ids not all zero), else ``bad_trace_context``: only that shape is stored with a wait, so a
    replica never holds what no tracer could link to."""
    if value and (len(value) != TRACE_CONTEXT_LEN or _TRACEPARENT.match(value) is None):
        raise invalid(
            "bad_trace_context",
            "trace_context must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, ids not all zero)",
            field="trace_context",
        )
    return value
