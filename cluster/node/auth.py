"""Who is calling: bearer tokens, roles, and which RPC each role may call.

Rules kept here:
- A caller sends ``authorization: Bearer <token>``. The token file stores only SHA-256 digests
  (a plain ``token`` is accepted for development and hashed at load); a presented token is
  hashed and looked up by its digest (nothing about the token itself can be timed).
- No token, an unknown one or an expired one is UNAUTHENTICATED; a known token whose role may not
  call the RPC is PERMISSION_DENIED (:data:`POLICY`, one row per RPC).
- The actor stamped on commands comes from the token alone: ``agent:<agent_id>`` for agents,
  ``operator:<name>`` for operators and admins. A request never names its actor.

Token file (JSON ``{"tokens": [...]}`` or TOML ``[[tokens]]``, chosen by the file suffix)::

    [[tokens]]
    name = "planner-agent"          # unique; operators act as operator:<name>
    role = "agent"                  # agent | operator | admin
    agent_id = "planner"            # agents only: the one agent id the token acts as
    sha256 = "9f86d081884c7d65..."  # hex SHA-256 of the token (or token = "..." in development)
    expires_at = 2027-01-01T00:00:00Z   # optional; RFC 3339 text in JSON

``waitgraph hash-token`` prints the digest of a token read from stdin.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from waitgraph.statemachine.errors import Rejection, Status, WaitgraphError
from waitgraph.statemachine.ids import validate_name


class Role(StrEnum):
    AGENT = "agent"
    OPERATOR = "operator"
    ADMIN = "admin"


class Unauthenticated(WaitgraphError):
    """No usable credentials: the gRPC layer answers UNAUTHENTICATED (the core has no such status)."""

    status = Status.PERMISSION_DENIED
    code = "unauthenticated"


class TokenFileError(ValueError):
    """The token file cannot be used; the message names the file and the entry."""


def denied(message: str) -> Rejection:
    return Rejection(Status.PERMISSION_DENIED, "wrong_role", message)


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: Role
    agent_id: str | None = None

    @property
    def actor(self) -> str:
        return f"agent:{self.agent_id}" if self.role is Role.AGENT else f"operator:{self.name}"


@dataclass(frozen=True, slots=True)
class _Entry:
    principal: Principal
    digest: bytes
    expires_at_s: float | None

    def __repr__(self) -> str:  # never print a digest
        return f"_Entry({self.principal!r}, expires_at_s={self.expires_at_s})"


# -- the policy: RPC -> roles ------------------------------------------------------------------------

AGENTS = frozenset({Role.AGENT})
OPERATORS = frozenset({Role.OPERATOR, Role.ADMIN})
ADMINS = frozenset({Role.ADMIN})
EVERYONE = frozenset(Role)

_AGENT_WRITES = (
    "JoinSession",
    "Heartbeat",
    "LeaveSession",
    "CreateExecution",
    "StartExecution",
    "ResumeExecution",
    "CompleteExecution",
    "FailExecution",
    "RetryExecution",
    "CreateTarget",
    "DeclareSatisfier",
    "Acquire",
    "Release",
    "RegisterWait",
    "CloseWait",
    "ProduceArtifact",
    "DecideApproval",
    "RecordSideEffect",
    "RecordCost",
    "ClaimTask",
    "RenewClaim",
    "AcceptToolCall",
    "AckCancel",
    "CancelRun",
    "Vote",
)

POLICY: dict[str, frozenset[Role]] = {
    **{f"/waitgraph.v1.AgentService/{rpc}": AGENTS for rpc in _AGENT_WRITES},
    "/waitgraph.v1.AgentService/WatchEvents": EVERYONE,
    # Any valid token; each item is then authorized as its own write RPC (cluster/node/service.py).
    "/waitgraph.v1.AgentService/WriteBatch": EVERYONE,
    **{
        f"/waitgraph.v1.OperatorService/{rpc}": OPERATORS
        for rpc in ("Status", "Graph", "Cycles", "ExplainDecision", "ExportPending", "Vote", "Freeze", "Unfreeze")
    },
    **{
        f"/waitgraph.v1.OperatorService/{rpc}": OPERATORS
        for rpc in ("SignatureHistory", "Convergence", "ListDecisions", "History")
    },
    "/waitgraph.v1.OperatorService/CancelRun": OPERATORS,
    "/waitgraph.v1.OperatorService/ListMembers": OPERATORS,
    **{f"/waitgraph.v1.OperatorService/{rpc}": ADMINS for rpc in ("AddMember", "RemoveMember")},
    **{
        f"/waitgraph.v1.OperatorService/{rpc}": ADMINS
        for rpc in (
            "SetMode",
            "SetApprover",
            "ConfigureRecovery",
            "ConfigureCancellation",
            "ReleaseQuarantine",
            "ExportState",
        )
    },
}
"""Every RPC of both services and the roles that may call it (a missing RPC is nobody's)."""


def authorize(principal: Principal, method: str) -> None:
    roles = POLICY.get(method, frozenset())
    if principal.role not in roles:
        allowed = ", ".join(sorted(r.value for r in roles)) or "nobody"
        raise denied(f"{principal.role.value} token {principal.name!r} may not call {method} (allowed: {allowed})")


# -- tokens --------------------------------------------------------------------------------------------


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenStore:
    """The tokens of one file, checked by digest."""

    def __init__(self, entries: Iterable[_Entry]) -> None:
        self._entries = tuple(entries)
        self._by_digest = {e.digest: e for e in self._entries}
        self._by_header: dict[str, _Entry] = {}
        """The authorization values already matched to an entry: a WriteBatch carries each
        agent's own, so hashing them again on every call was ~5% of a leader's Python time.
        Known tokens only (an unknown one is hashed each time), at most a few spellings each."""
        self._header_cap = 4 * len(self._entries) + 64

    def __len__(self) -> int:
        return len(self._entries)

    @classmethod
    def load(cls, path: Path) -> TokenStore:
        try:
            text = path.read_text()
        except OSError as exc:
            raise TokenFileError(f"{path}: cannot read the token file: {exc.strerror}") from exc
        try:
            raw = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            kind = "TOML" if path.suffix.lower() == ".toml" else "JSON"
            raise TokenFileError(f"{path}: not valid {kind}: {exc}") from None
        return cls.parse(raw, str(path))

    @classmethod
    def parse(cls, raw: Any, source: str = "tokens") -> TokenStore:
        if not isinstance(raw, dict) or not isinstance(raw.get("tokens"), list) or set(raw) != {"tokens"}:
            raise TokenFileError(f"{source}: expected exactly one key, 'tokens', holding a list of tokens")
        entries = [_parse_entry(item, f"{source}: tokens[{i}]") for i, item in enumerate(raw["tokens"])]
        names = [e.principal.name for e in entries]
        if len(set(names)) != len(names):
            raise TokenFileError(f"{source}: token names must be unique")
        if len({e.digest for e in entries}) != len(entries):
            raise TokenFileError(f"{source}: two entries have the same token")
        return cls(entries)

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]], now_s: float) -> Principal:
        header = None
        for key, value in metadata:
            if key == "authorization":
                header = value.decode(errors="replace") if isinstance(value, bytes) else value
                break
        if header is None:
            raise Unauthenticated("no credentials: send the metadata 'authorization: Bearer <token>'")
        found = self._by_header.get(header)
        if found is None:
            found = self._lookup(header)
            if len(self._by_header) < self._header_cap:
                self._by_header[header] = found
        if found.expires_at_s is not None and now_s >= found.expires_at_s:
            raise Unauthenticated(f"the token {found.principal.name!r} has expired")
        return found.principal

    def _lookup(self, header: str) -> _Entry:
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("the authorization metadata must be 'Bearer <token>'")
        # One dict lookup by the token's SHA-256 (every call authenticates: a scan of the whole
        # file per call was a hot spot). What the lookup's timing could reveal is about the
        # digest's hash, not the token, so it needs no constant-time comparison.
        found = self._by_digest.get(token_digest(token))
        if found is None:
            raise Unauthenticated("unknown token")
        return found


_ENTRY_KEYS = frozenset({"name", "role", "agent_id", "sha256", "token", "expires_at"})


def _parse_entry(item: Any, where: str) -> _Entry:
    if not isinstance(item, dict):
        raise TokenFileError(f"{where}: must be a table/object")
    unknown = sorted(set(item) - _ENTRY_KEYS)
    if unknown:
        raise TokenFileError(f"{where}: unknown keys {unknown}")
    try:
        name = validate_name(item.get("name"), "name")
    except Rejection as exc:
        raise TokenFileError(f"{where}: {exc.message}") from None
    try:
        role = Role(str(item.get("role")))
    except ValueError:
        raise TokenFileError(f"{where}: role must be one of {[r.value for r in Role]}") from None
    agent_id = item.get("agent_id")
    if role is Role.AGENT:
        try:
            validate_name(agent_id, "agent_id")
        except Rejection as exc:
            raise TokenFileError(f"{where}: an agent token needs a valid agent_id ({exc.message})") from None
    elif agent_id is not None:
        raise TokenFileError(f"{where}: only agent tokens have an agent_id")
    if ("sha256" in item) == ("token" in item):
        raise TokenFileError(f"{where}: give exactly one of sha256 (hex digest) or token (plain, development)")
    if "token" in item:
        if not isinstance(item["token"], str) or len(item["token"]) < 16:
            raise TokenFileError(f"{where}: a plain token must be a string of at least 16 characters")
        digest = token_digest(item["token"])
    else:
        try:
            digest = bytes.fromhex(item["sha256"])
        except (TypeError, ValueError):
            digest = b""
        if len(digest) != 32:
            raise TokenFileError(f"{where}: sha256 must be 64 hex digits")
    return _Entry(Principal(name, role, agent_id if role is Role.AGENT else None), digest, _expiry(item, where))


def _expiry(item: dict[str, Any], where: str) -> float | None:
    value = item.get("expires_at")
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise TokenFileError(f"{where}: expires_at must be an RFC 3339 time such as 2027-01-01T00:00:00Z") from None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise TokenFileError(f"{where}: expires_at needs a time zone (append Z for UTC)")
        return value.timestamp()
    raise TokenFileError(f"{where}: expires_at must be a date-time")
