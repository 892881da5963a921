"""Structured logs of a node: structlog, one JSON object per line, or readable on a terminal.

Rules kept here:
- :func:`configure` runs once, at node start (cluster/node/server.py ``main``). It routes the standard
  ``logging`` records of every module and the structlog events through one renderer: JSON lines
  by default, the console renderer when stderr is a terminal (``log_format=auto``) or when asked
  (``--log-format console``). Every line carries ``node`` and, once the node runs, its Raft
  ``term`` and the recovery ``epoch``; a gRPC handler's lines carry its ``method``, ``request_id``
  and ``run_id`` (read from the request :func:`request_context` names, as a line is logged).
- Every state-changing decision is exactly one event, derived in one place: :class:`DecisionLog`
  reads the effects of each applied command (``EventfulMachine``, on the Raft tick thread) and
  writes one event per decision effect. **Every replica** logs the decisions it applies, so each
  node's log is a complete audit of what it holds, whichever node was leader; the same decision
  appears once per node (not twice on one node), and ``log_index`` names it across nodes. A
  restarted node re-applies its journal after its last snapshot and logs those entries again,
  with the same ``log_index``.
- Only ids, numbers, flags and codes from closed vocabularies are logged. The free text agents
  and operators send (wait reasons, cancel and freeze reasons, failure messages: anything that
  could carry prompt content) never is: each decision lists the fields it may log.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, TextIO

import structlog

from waitgraph.statemachine import Envelope, Outcome
from waitgraph.statemachine import effects as fx
from waitgraph.statemachine.errors import WaitgraphError
from waitgraph.statemachine.ids import validate_name
from waitgraph.statemachine.state import State

LOG_FORMATS = ("auto", "json", "console")
MAX_CONTEXT_ID_LEN = 128

_node_context: dict[str, Any] = {}
_dynamic: list[Callable[[], Mapping[str, Any]]] = []


def _add_node_context(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Node id (static) and term/epoch (read now) on every line, whatever thread logs it."""
    for key, value in _node_context.items():
        event.setdefault(key, value)
    for provider in _dynamic:
        try:
            extra = provider()
        except Exception:  # a stopped node has no term: log the line without it
            continue
        for key, value in extra.items():
            event.setdefault(key, value)
    return event


def configure(node_id: str, level: str | int = "INFO", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Configure structlog and the ``logging`` root once for this process."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {LOG_FORMATS}, not {fmt!r}")
    out = stream if stream is not None else sys.stderr
    console = fmt == "console" or (fmt == "auto" and out.isatty())
    _node_context.clear()
    _node_context["node"] = node_id
    _dynamic.clear()
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        _add_request_context,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_node_context,
    ]
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=out.isatty())
        if console
        else structlog.processors.JSONRenderer(sort_keys=True)
    )
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([] if console else [structlog.processors.format_exc_info]),
            renderer,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def add_context(provider: Callable[[], Mapping[str, Any]]) -> None:
    """Add fields read at each log call (the node's term and epoch), after :func:`configure`."""
    _dynamic.append(provider)


def _bounded_id(value: object) -> str | None:
    """A client-sent id for the log context, only if it is a valid name (never free text)."""
    if not isinstance(value, str) or not value or len(value) > MAX_CONTEXT_ID_LEN:
        return None
    try:
        return validate_name(value, "id")
    except WaitgraphError:
        return None


_REQUEST: contextvars.ContextVar[tuple[str, Any] | None] = contextvars.ContextVar("waitgraph_request", default=None)
"""The gRPC method and request a handler serves (:func:`request_context`); read when a line is
logged, so a call that logs nothing pays one ``set`` and one ``reset``."""


def _add_request_context(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    current = _REQUEST.get()
    if current is None:
        return event
    method, request = current
    event.setdefault("method", method)
    names = getattr(getattr(request, "DESCRIPTOR", None), "fields_by_name", {})
    for name in ("request_id", "run_id"):
        if name in names:
            value = _bounded_id(getattr(request, name, None))
            if value is not None:
                event.setdefault(name, value)
    return event


class _RequestContext:
    __slots__ = ("_token", "_value")

    def __init__(self, value: tuple[str, Any]) -> None:
        self._value = value

    def __enter__(self) -> None:
        self._token = _REQUEST.set(self._value)

    def __exit__(self, *exc: object) -> None:
        _REQUEST.reset(self._token)


def request_context(method: str, request: Any) -> _RequestContext:
    """Within it, the lines a gRPC handler logs carry ``method`` and the request's
    ``request_id``/``run_id`` (when it has them and they are valid names: never free text); the
    metrics interceptor wraps every handler in it. Every call enters one: the fields are read from
    the request only when a line is logged (binding them up front was ~3% of a unary write)."""
    return _RequestContext((method, request))


# -- decisions -------------------------------------------------------------------------------------

DECISIONS: dict[type, tuple[str, tuple[str, ...]]] = {
    fx.ModeChanged: ("mode_changed", ("run_id", "mode", "side_effect_free")),
    fx.RecoveryConfigured: ("recovery_configured", ("voters", "quorum", "max_rollback")),
    fx.RecoveryProposed: ("recovery_proposed", ("digest", "signature", "epoch_proposed", "members")),
    fx.RecoveryRetracted: ("recovery_retracted", ("digest", "reason")),
    fx.VoteRecorded: ("vote_recorded", ("digest", "voter", "approve", "approvals", "quorum")),
    fx.RecoveryRejected: ("recovery_rejected", ("digest", "rejections")),
    fx.EpochCommitted: ("epoch_committed", ("epoch", "digest")),
    fx.VictimChosen: (
        "victim_chosen",
        (
            "decision_id",
            "digest",
            "decision_kind",
            "mode",
            "policy_version",
            "execution_id",
            "generation",
            "reason_code",
            "epoch",
        ),
    ),
    fx.Yielded: ("execution_yielded", ("execution_id", "generation", "winner_id", "epoch")),
    fx.LivelockDetected: ("livelock_detected", ("signature", "digest", "reason")),
    fx.RecoveryEscalated: ("recovery_escalated", ("digest", "reason", "run_ids")),
    fx.CancelGenerationRaised: ("cancel_generation_raised", ("run_id", "before", "after", "cause")),
    fx.CancelSloExceeded: (
        "execution_quarantined",
        ("run_id", "execution_id", "generation", "requested_at_ms", "slo_ms"),
    ),
    fx.ResourceQuarantined: ("resource_quarantined", ("target_id", "execution_id", "generation", "lease")),
    fx.QuarantineReleased: ("quarantine_released", ("execution_id", "generation")),
    fx.AdmissionChanged: ("admission_changed", ("run_id", "frozen")),
    fx.ReconciliationOpened: (
        "reconciliation_opened",
        ("execution_id", "generation", "run_id", "unknown_effects", "cause"),
    ),
    fx.CancellationStable: (
        "cancellation_stable",
        ("scope_id", "run_id", "root_id", "cancel_generation", "quiescence_ms", "leaked"),
    ),
    fx.CancellationConfigured: ("cancellation_configured", ("slo_ms", "reemit_interval_ms")),
}
"""Decision effect -> (event name, the fields it may log). Free-text fields (every ``reason`` an
agent or operator typed) are absent on purpose; the ``reason`` of a retraction, livelock or
escalation is a code the core chose."""


_RENAMED = {"epoch": "committed_epoch"}
"""Effect fields logged under another name: ``epoch`` is the replica's epoch on every line."""


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return getattr(value, "value", value)  # enums as their wire value


class DecisionLog:
    """Writes one structured event per decision effect of each applied command (see the module doc).

    ``term`` and ``log_index`` are read from the Raft node when an entry is applied; they may be
    None while the node starts (replaying its journal before it runs).
    """

    def __init__(
        self,
        term: Callable[[], int | None] = lambda: None,
        log_index: Callable[[], int | None] = lambda: None,
        logger: Any = None,
    ) -> None:
        self.term = term
        self.log_index = log_index
        self.log = logger if logger is not None else structlog.get_logger("waitgraph.decisions")

    def applied(self, env: Envelope, out: Outcome, state: State) -> None:
        if out.duplicate or DECISIONS.keys().isdisjoint(map(type, out.effects)):
            return  # the common case, checked in C: this runs on every applied write
        decisions = [(DECISIONS[type(e)], e) for e in out.effects if type(e) in DECISIONS]
        index = self.log_index()
        context: dict[str, Any] = {
            "term": self.term(),
            "epoch": state.recovery.epoch,
            "log_index": None if index is None else index + 1,
            "actor": env.actor,
        }
        if env.request_id is not None:
            context["request_id"] = env.request_id
        for (event, names), effect in decisions:
            fields = {_RENAMED.get(name, name): _plain(getattr(effect, name)) for name in names}
            if "run_id" not in fields:
                ex = state.executions.get(str(getattr(effect, "execution_id", None) or ""))
                if ex is not None:
                    fields["run_id"] = ex.run_id
            self.log.info(event, kind=effect.KIND, **context, **fields)
