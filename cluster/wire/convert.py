"""Wire <-> domain: the one place where waitgraph.v1 messages become core values and back.

Rules kept here:
- Generic by field name. A request message ``<Rpc>Request`` has exactly the fields of the core
  command its RPC carries (:data:`WRITE_RPCS`) plus ``request_id``; an effect message has exactly
  its effect dataclass's fields; the views of the state (``ExecutionView``...) take every field
  they declare from the record attribute of the same name. Adding a command or an effect means
  adding its message to the .proto, never writing a converter.
- Conversion checks what the wire can express and the core cannot: a required field not sent, an
  enum number this server does not know, an UNSPECIFIED enum. Each is a :class:`WireError`
  (INVALID_ARGUMENT) that names the field; nothing is proposed. Everything else (id syntax,
  ranges, ownership) is the core's to refuse.
- :func:`check_schema` compares every message with its dataclass (names, types, presence) and the
  enums value by value; the server refuses to start and tests/cluster/test_grpc_convert.py fails
  when they drift apart.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from types import NoneType, UnionType
from typing import Any, TypeVar, cast

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from waitgraph.proto.v1 import agent_pb2, commands_pb2, operator_pb2, types_pb2
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.cancel import Convergence
from waitgraph.statemachine.cancel_state import CancelScope
from waitgraph.statemachine.codec import field_types
from waitgraph.statemachine.commands import Command
from waitgraph.statemachine.detect import Candidate
from waitgraph.statemachine.effects import EFFECTS, Effect
from waitgraph.statemachine.enums import CancelMode, CancelState, EffectOutcome, ExecStatus, Relation, SessionStatus
from waitgraph.statemachine.errors import Status, WaitgraphError
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.recovery_state import (
    CycleWait,
    Decision,
    DecisionKind,
    Proposal,
    ProposalStatus,
    RolloutMode,
    Score,
    Trajectory,
)
from waitgraph.statemachine.state import Execution, Run, Session, Target, WaitEdge

EnumT = TypeVar("EnumT", bound=StrEnum)

__all__ = [
    "AGENT_WRITES",
    "OPERATOR_WRITES",
    "WRITE_ITEM_CASES",
    "WRITE_RPCS",
    "Undecodable",
    "WireError",
    "check_schema",
    "command_from_request",
    "cancellation_view",
    "convergence_response",
    "cycle_view",
    "decision_view",
    "effect_from_proto",
    "effect_kind",
    "effect_into",
    "effect_to_proto",
    "enum_member",
    "enum_number",
    "event_to_proto",
    "execution_view",
    "outcome_from_proto",
    "outcome_into",
    "outcome_to_proto",
    "parse_request",
    "proposal_view",
    "request_class",
    "request_deserializer",
    "request_from_command",
    "session_view",
    "target_view",
    "trajectory_view",
    "wait_view",
    "write_item",
    "write_item_request",
]


class WireError(WaitgraphError):
    """A request the server cannot turn into a command; nothing was proposed."""

    status = Status.INVALID_ARGUMENT
    code = "bad_request"


# -- the write RPCs: RPC name -> the core command it carries ----------------------------------------

_NAMED_AFTER_COMMAND: dict[str, type[Command]] = {
    cls.KIND: cls
    for cls in (
        C.JoinSession,
        C.Heartbeat,
        C.LeaveSession,
        C.CreateExecution,
        C.StartExecution,
        C.ResumeExecution,
        C.CompleteExecution,
        C.FailExecution,
        C.RetryExecution,
        C.CreateTarget,
        C.DeclareSatisfier,
        C.Acquire,
        C.Release,
        C.RegisterWait,
        C.CloseWait,
        C.ProduceArtifact,
        C.DecideApproval,
        C.RecordSideEffect,
        C.RecordCost,
        C.ClaimTask,
        C.RenewClaim,
        C.AcceptToolCall,
        C.AckCancel,
        C.CancelRun,
    )
}
AGENT_WRITES: dict[str, type[Command]] = {**_NAMED_AFTER_COMMAND, "Vote": C.VoteRecovery}
"""AgentService's write RPCs; each is named after its command, but Vote (VoteRecovery), named as
on OperatorService: the same request, cast by a voter agent's session."""

OPERATOR_WRITES: dict[str, type[Command]] = {
    "Vote": C.VoteRecovery,
    "SetMode": C.SetMode,
    "SetApprover": C.SetApprover,
    "Freeze": C.FreezeAdmission,
    "Unfreeze": C.UnfreezeAdmission,
    "CancelRun": C.CancelRun,
    "ReleaseQuarantine": C.ReleaseQuarantine,
    "ConfigureRecovery": C.ConfigureRecovery,
    "ConfigureCancellation": C.ConfigureCancellation,
}
"""OperatorService's write RPCs (Vote, Freeze and Unfreeze are shorter than their commands)."""

WRITE_RPCS: dict[str, type[Command]] = {**AGENT_WRITES, **OPERATOR_WRITES}
"""Every write RPC; a name used by both services carries the same command and request message."""


def request_class(rpc: str) -> type[Message]:
    cls: type[Message] = getattr(commands_pb2, f"{rpc}Request")
    return cls


# -- field types --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Type:
    """A core field's type: ``base`` is str, int, bool or a StrEnum; optional = ``X | None``."""

    base: type
    optional: bool = False
    repeated: bool = False


def _core_type(tp: Any) -> _Type:
    optional = False
    if isinstance(tp, UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        if len(args) != 1:
            raise TypeError(f"unsupported union {tp}")
        tp, optional = args[0], True
    if typing.get_origin(tp) is tuple:
        return _Type(_core_type(typing.get_args(tp)[0]).base, optional, True)
    if tp in (str, int, bool) or (isinstance(tp, type) and issubclass(tp, StrEnum)):
        return _Type(tp, optional)
    raise TypeError(f"unsupported field type {tp}")


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    type: _Type
    required: bool


@cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = field_types(cls)
    return tuple(
        _Field(
            f.name,
            _core_type(hints[f.name]),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    )


_INTS = frozenset(
    {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_UINT32}
)


def _is_repeated(fd: FieldDescriptor) -> bool:
    return bool(fd.is_repeated)


# -- enums ----------------------------------------------------------------------------------------------

DOMAIN_ENUMS: tuple[type[StrEnum], ...] = (
    ExecStatus,
    SessionStatus,
    CancelMode,
    EffectOutcome,
    Relation,
    CancelState,
    RolloutMode,
    ProposalStatus,
    DecisionKind,
)
"""Core enums with a waitgraph.v1 enum of the same name."""

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def snake(name: str) -> str:
    """``CancelRequested`` -> ``cancel_requested`` (oneof case and enum prefix names)."""
    return _CAMEL.sub("_", name).lower()


@cache
def effect_case(kind: str) -> str:
    """The ``Effect`` oneof case of an effect kind (``snake`` of it, computed once per kind)."""
    return snake(kind)


def _wire_name(member: StrEnum) -> str:
    """``RolloutMode.AUTO_SAFE`` ("auto-safe") -> ``ROLLOUT_MODE_AUTO_SAFE``."""
    return f"{snake(type(member).__name__).upper()}_{member.value.upper().replace('-', '_')}"


@dataclass(frozen=True, slots=True)
class _EnumMap:
    descriptor: EnumDescriptor
    to_number: dict[StrEnum, int]
    from_number: dict[int, StrEnum]


@cache
def _enum_map(cls: type[StrEnum]) -> _EnumMap:
    desc = types_pb2.DESCRIPTOR.enum_types_by_name[cls.__name__]
    to_number = {m: desc.values_by_name[_wire_name(m)].number for m in cls}
    return _EnumMap(desc, to_number, {n: m for m, n in to_number.items()})


def _enum_from_wire(cls: type[StrEnum], number: int, where: str) -> StrEnum:
    member = _enum_map(cls).from_number.get(number)
    if member is None:
        known = ", ".join(_wire_name(m) for m in cls)
        what = "is UNSPECIFIED (0)" if number == 0 else f"has the unknown value {number}"
        raise WireError(f"{where} {what}; expected one of {known}", field=where)
    return member


def exec_status_from_wire(number: int) -> ExecStatus:
    """A request's ExecStatus filter (a WireError naming the field when unknown)."""
    member = _enum_from_wire(ExecStatus, number, "statuses")
    assert isinstance(member, ExecStatus)
    return member


def decision_kind_from_wire(number: int) -> DecisionKind:
    """A request's DecisionKind filter (a WireError naming the field when unknown)."""
    member = _enum_from_wire(DecisionKind, number, "kind")
    assert isinstance(member, DecisionKind)
    return member


# -- generic conversion ---------------------------------------------------------------------------------


def _to_wire(value: Any) -> Any:
    if isinstance(value, StrEnum):
        return _enum_map(type(value)).to_number[value]
    return value


_Reader = tuple[str, bool, bool, bool, bool, "type[StrEnum] | None"]
"""(name, repeated, has presence on the wire, required, optional, enum class or None)."""


@cache
def _read_plan(cls: type, desc: Descriptor) -> tuple[_Reader, ...]:
    """Each field of ``cls`` as :func:`_read` takes it (computed once per pair: descriptor
    lookups and type tests on every request were a measurable part of a write's cost)."""
    by_name = desc.fields_by_name
    plan = []
    for f in _fields(cls):
        base = f.type.base
        enum = base if isinstance(base, type) and issubclass(base, StrEnum) else None
        plan.append((f.name, f.type.repeated, bool(by_name[f.name].has_presence), f.required, f.type.optional, enum))
    return tuple(plan)


def _read(cls: type, msg: Message, what: str) -> dict[str, Any]:
    """The keyword arguments of ``cls`` from a message with the same field names."""
    kwargs: dict[str, Any] = {}
    for name, repeated, presence, required, optional, enum in _read_plan(cls, msg.DESCRIPTOR):
        if repeated:
            values = getattr(msg, name)
            if enum is None:
                kwargs[name] = tuple(values)
            else:
                where = f"{what}.{name}"
                kwargs[name] = tuple(_enum_from_wire(enum, v, where) for v in values)
        elif not presence or msg.HasField(name):
            value = getattr(msg, name)
            kwargs[name] = value if enum is None else _enum_from_wire(enum, value, f"{what}.{name}")
        elif not required:
            pass  # the core's default
        elif optional:
            kwargs[name] = None
        else:
            raise WireError(f"{what}.{name} is required", field=name)
    return kwargs


def _write(obj: Any, msg_cls: type[Message], **overrides: Any) -> Message:
    """A message of ``msg_cls`` with every field it declares taken from ``obj``'s attribute of
    the same name (``overrides`` first); None leaves a field unset."""
    kwargs: dict[str, Any] = {}
    for name, scalars in _write_plan(msg_cls.DESCRIPTOR):
        value = overrides[name] if name in overrides else getattr(obj, name)
        if value is None:
            continue
        kwargs[name] = [_to_wire(v) for v in value] if scalars else _to_wire(value)
    return msg_cls(**kwargs)


@cache
def _write_plan(desc: Descriptor) -> tuple[tuple[str, bool], ...]:
    """Each field of a message type and whether it is a repeated scalar (computed once per type)."""
    return tuple((fd.name, _is_repeated(fd) and fd.message_type is None) for fd in desc.fields)


def command_from_request(rpc: str, msg: Message) -> Command:
    """The command a write request carries; raises :class:`WireError` (nothing to propose)."""
    cls = WRITE_RPCS[rpc]
    command: Command = cls(**_read(cls, msg, rpc))
    return command


def request_from_command(cmd: Command, request_id: str = "", rpc: str | None = None) -> Message:
    """The request message for ``cmd`` (clients and tests); ``rpc`` when it is not the kind."""
    name = rpc if rpc is not None else cmd.KIND
    if WRITE_RPCS.get(name) is not type(cmd):
        raise KeyError(f"no write RPC {name!r} carries {cmd.KIND}")
    return _write(cmd, request_class(name), request_id=request_id)


# -- WriteBatch items: the oneof case of a WriteItem is the snake_case name of its write RPC ---------

WRITE_ITEM_CASES: dict[str, str] = {snake(rpc): rpc for rpc in AGENT_WRITES}
"""``WriteItem.write`` case -> the AgentService write RPC whose request it holds."""


def write_item_request(item: agent_pb2.WriteItem) -> tuple[str, Message]:
    """The write RPC and request message an item carries; :class:`WireError` when it has none."""
    case = item.WhichOneof("write")
    if case is None:
        raise WireError("WriteItem: no write is set (one of the AgentService write requests)")
    request: Message = getattr(item, case)
    return WRITE_ITEM_CASES[case], request


def write_item(rpc: str, request: Message, authorization: str = "") -> agent_pb2.WriteItem:
    """A WriteItem holding ``request`` of the AgentService write RPC ``rpc`` (clients)."""
    if rpc not in AGENT_WRITES:
        raise KeyError(f"WriteBatch carries AgentService writes only, not {rpc!r}")
    item = agent_pb2.WriteItem(authorization=authorization)
    getattr(item, _WRITE_ITEM_CASE[rpc]).CopyFrom(request)
    return item


_WRITE_ITEM_CASE = {rpc: case for case, rpc in WRITE_ITEM_CASES.items()}
"""AgentService write RPC -> its ``WriteItem.write`` case (snake's regular expression, once)."""


# -- effects and outcomes ------------------------------------------------------------------------------

_EFFECT_BY_KIND: dict[str, type[Effect]] = {cls.KIND: cls for cls in EFFECTS}


def effect_kind(msg: types_pb2.Effect) -> str:
    """The effect's kind (``CancelRequested``) from the set oneof case."""
    return _effect_of_case(_effect_case_set(msg))[1]


def _effect_case_set(msg: types_pb2.Effect) -> str:
    case: str | None = msg.WhichOneof("effect")
    if case is None:
        raise WireError("the effect has no case set")
    return case


_Writer = tuple[str, bool, "dict[StrEnum, int] | None"]
"""(name, repeated, enum member -> wire number or None)."""


@cache
def _effect_plan(cls: type) -> tuple[str, tuple[_Writer, ...]]:
    """The ``Effect`` oneof case of an effect class and how each field of its message is set
    (:func:`_write`'s rules, computed once per class)."""
    kind: str = getattr(cls, "KIND")  # noqa: B009 - every effect class has one
    core = {f.name: f.type for f in _fields(cls)}
    plan = []
    for name, _ in _write_plan(getattr(types_pb2, kind).DESCRIPTOR):
        base = core[name].base
        enum = _enum_map(base).to_number if isinstance(base, type) and issubclass(base, StrEnum) else None
        plan.append((name, core[name].repeated, enum))
    return effect_case(kind), tuple(plan)


def effect_into(fx: Effect, msg: types_pb2.Effect) -> None:
    """Set ``msg`` (empty) to the effect: what :func:`effect_to_proto` returns, built in place
    (no copy of a nested message; most of an answer's cost was those copies)."""
    cls: type = type(fx)
    case, plan = _effect_plan(cls)
    inner = getattr(msg, case)
    inner.SetInParent()  # the case is set even when every field is at its default
    for name, repeated, enum in plan:
        value = getattr(fx, name)
        if value is None:
            continue
        if repeated:
            getattr(inner, name).extend(value if enum is None else [enum[v] for v in value])
        else:
            setattr(inner, name, value if enum is None else enum[value])


def effect_to_proto(fx: Effect) -> types_pb2.Effect:
    msg = types_pb2.Effect()
    effect_into(fx, msg)
    return msg


@cache
def _effect_of_case(case: str) -> tuple[type[Effect], str]:
    """The effect class and kind of an ``Effect`` oneof case (once per case)."""
    name: str = getattr(types_pb2.Effect(), case).DESCRIPTOR.name
    return _EFFECT_BY_KIND[name], name


def effect_from_proto(msg: types_pb2.Effect) -> Effect:
    case = _effect_case_set(msg)
    cls, kind = _effect_of_case(case)
    fx: Effect = cls(**_read(cls, getattr(msg, case), kind))
    return fx


_RESULTS = {
    Result.APPLIED: types_pb2.RESULT_APPLIED,
    Result.NOOP: types_pb2.RESULT_NOOP,
    Result.REJECTED: types_pb2.RESULT_REJECTED,
}
_RESULTS_BACK = {v: k for k, v in _RESULTS.items()}


def _text(value: Any) -> str:
    return value.value if isinstance(value, StrEnum) else str(value)


def outcome_into(out: Outcome, msg: types_pb2.Outcome) -> None:
    """Set ``msg`` (empty, e.g. ``WriteResult.outcome``) to the outcome, in place."""
    msg.result = _RESULTS[out.result]
    msg.code = out.code
    msg.status = out.status.value if out.status is not None else ""
    msg.message = out.message
    msg.duplicate = out.duplicate
    if out.fields:
        fields = msg.fields
        for k, v in sorted(out.fields.items()):
            fields[k] = _text(v)
    add = msg.effects.add
    for fx in out.effects:
        effect_into(fx, add())


def outcome_to_proto(out: Outcome) -> types_pb2.Outcome:
    msg = types_pb2.Outcome()
    outcome_into(out, msg)
    return msg


def outcome_from_proto(msg: types_pb2.Outcome) -> Outcome:
    """Back to the core value (clients, tests); ``fields`` stay text."""
    result = _RESULTS_BACK.get(msg.result)
    if result is None:
        raise WireError(f"outcome has no result ({msg.result})")
    return Outcome(
        result,
        tuple(effect_from_proto(fx) for fx in msg.effects),
        msg.code,
        Status(msg.status) if msg.status else None,
        msg.message,
        dict(msg.fields),
        msg.duplicate,
    )


def enum_number(member: StrEnum) -> int:
    """The wire number of a core enum value."""
    return _enum_map(type(member)).to_number[member]


def enum_member(cls: type[EnumT], number: int) -> EnumT | None:
    """The core enum value of a wire number; None for UNSPECIFIED (0) or a number this version
    does not know (a newer server's), so a reader can show it instead of failing."""
    member = _enum_map(cls).from_number.get(number)
    return cast(EnumT, member) if member is not None else None


def event_to_proto(cursor: int, log_index: int, agent_ids: Iterable[str], effect: Effect) -> agent_pb2.Event:
    """One journal event (``waitgraph.node.events.Event``) on the wire."""
    return agent_pb2.Event(
        cursor=cursor, log_index=log_index, agent_ids=list(agent_ids), effect=effect_to_proto(effect)
    )


# -- views of the state (OperatorService reads) ---------------------------------------------------------


def execution_view(ex: Execution, orphaned: bool = False) -> operator_pb2.ExecutionView:
    side_effects = [
        operator_pb2.SideEffectView(
            effect_id=k, outcome=_to_wire(s.outcome), compensatable=s.compensatable, generation=s.generation
        )
        for k, s in sorted(ex.side_effects.items())
    ]
    view: operator_pb2.ExecutionView = _write(
        ex, operator_pb2.ExecutionView, side_effects=side_effects, orphaned=orphaned
    )
    return view


def target_view(t: Target) -> operator_pb2.TargetView:
    holders = [operator_pb2.HolderView(execution_id=h, generation=g) for h, g in sorted(t.holders.items())]
    view: operator_pb2.TargetView = _write(t, operator_pb2.TargetView, holders=holders)
    return view


def wait_view(e: WaitEdge, queue_position: int | None = None) -> operator_pb2.WaitView:
    """``queue_position``: the wait's place in its target's grant queue (``queues.position``)."""
    view: operator_pb2.WaitView = _write(e, operator_pb2.WaitView, queue_position=queue_position)
    return view


def session_view(s: Session) -> operator_pb2.SessionView:
    view: operator_pb2.SessionView = _write(s, operator_pb2.SessionView)
    return view


def run_view(run: Run, cancel_state: CancelState) -> operator_pb2.RunView:
    view: operator_pb2.RunView = _write(run, operator_pb2.RunView, cancel_state=cancel_state)
    return view


def _members(members: Iterable[tuple[str, int]]) -> list[operator_pb2.Member]:
    return [operator_pb2.Member(execution_id=m, generation=g) for m, g in members]


def _edges(edges: Iterable[tuple[str, int]]) -> list[operator_pb2.EdgeRef]:
    return [operator_pb2.EdgeRef(edge_id=e, edge_version=v) for e, v in edges]


def cycle_view(c: Candidate, proposal_status: ProposalStatus | None) -> operator_pb2.Cycle:
    view: operator_pb2.Cycle = _write(
        c, operator_pb2.Cycle, members=_members(c.members), edges=_edges(c.edges), proposal_status=proposal_status
    )
    return view


def soft_cycle_view(
    c: Candidate, soft: Iterable[tuple[str, str, str]], proposal_status: ProposalStatus | None
) -> operator_pb2.SoftCycle:
    """A soft cycle (statemachine/reorder.py) as its candidate (digest, members) and its soft edges."""
    edges = [operator_pb2.SoftEdge(waiter_id=w, ahead_id=a, target_id=t) for w, a, t in soft]
    view: operator_pb2.SoftCycle = _write(
        c, operator_pb2.SoftCycle, members=_members(c.members), soft_edges=edges, proposal_status=proposal_status
    )
    return view


def _votes(votes: Iterable[tuple[str, bool, int]]) -> list[operator_pb2.VoteView]:
    return [operator_pb2.VoteView(voter=v, approve=ok, at_ms=at) for v, ok, at in votes]


def proposal_view(p: Proposal) -> operator_pb2.ProposalView:
    view: operator_pb2.ProposalView = _write(
        p, operator_pb2.ProposalView, members=_members(p.members), edges=_edges(p.edges), votes=_votes(p.votes)
    )
    return view


def cancellation_view(scope: CancelScope, quarantined: int) -> operator_pb2.CancellationView:
    view: operator_pb2.CancellationView = _write(
        scope, operator_pb2.CancellationView, pending=len(scope.pending), quarantined=quarantined
    )
    return view


def decision_view(
    d: Decision, cancellations: Iterable[operator_pb2.CancellationView] = (), retired_at_ms: int | None = None
) -> operator_pb2.DecisionView:
    """``cancellations``: the rolled-back members' scopes as they stand now (read, not recorded);
    ``retired_at_ms``: when a retired decision (read from the history store) left the live state."""
    view: operator_pb2.DecisionView = _write(
        d,
        operator_pb2.DecisionView,
        retired_at_ms=retired_at_ms,
        scores=[_write(s, operator_pb2.ScoreView) for s in d.scores],
        roles=[operator_pb2.RoleView(execution_id=e, role=r) for e, r in d.roles],
        # Every release happens inside the decision's own apply, after its epoch commit.
        released=[operator_pb2.ReleaseView(target_id=t, execution_id=e, at_ms=d.at_ms) for t, e in d.released],
        votes=_votes(d.votes),
        waits=[_write(w, operator_pb2.CycleWaitView) for w in d.waits],
        cancellations=list(cancellations),
        remedies=[operator_pb2.RemedyView(remedy=r, outcome=o, reason=why) for r, o, why in d.remedies],
        reassigned=[_write(r, operator_pb2.ReassignmentView) for r in d.reassigned],
    )
    return view


def _epoch_at(point: tuple[int, int] | None) -> operator_pb2.EpochAt | None:
    return None if point is None else operator_pb2.EpochAt(epoch=point[0], at_ms=point[1])


def trajectory_view(
    signature: str, t: Trajectory | None, decisions: Iterable[Decision], guard: str | None
) -> operator_pb2.TrajectoryView:
    """``decisions``: those recorded for the signature, oldest first; ``guard``: the livelock
    guard's verdict on the trajectory as it stands (recovery.livelock_reason)."""
    summaries = [
        _write(d, operator_pb2.DecisionSummary, kind=d.kind, epoch=d.epoch, winner_id=d.winner_id) for d in decisions
    ]
    if t is None:
        return operator_pb2.TrajectoryView(signature=signature, known=False, decisions=summaries)
    first = _epoch_at(t.first_seen)
    return operator_pb2.TrajectoryView(
        signature=signature,
        known=True,
        observations=[operator_pb2.EpochAt(epoch=e, at_ms=at) for e, at in t.observations],
        recoveries=[operator_pb2.EpochAt(epoch=e, at_ms=at) for e, at in t.recoveries],
        observed_total=t.observed_total,
        recovered_total=t.recovered_total,
        first_seen=first,
        decisions=summaries,
        guard=guard or "",
    )


def convergence_response(c: Convergence) -> operator_pb2.ConvergenceResponse:
    view: operator_pb2.ConvergenceResponse = _write(
        c,
        operator_pb2.ConvergenceResponse,
        run_id=c.run_id or "",
        cancel_state=c.cancel_state,
        unsettled=c.unsettled,
        stale=None,
        applied_index=None,
    )
    return view


# -- the schema check -------------------------------------------------------------------------------------

_VIEWS: tuple[tuple[type[Message], type, frozenset[str]], ...] = (
    (operator_pb2.ExecutionView, Execution, frozenset({"side_effects", "orphaned"})),
    (operator_pb2.TargetView, Target, frozenset({"holders"})),
    (operator_pb2.WaitView, WaitEdge, frozenset({"queue_position"})),
    (operator_pb2.SessionView, Session, frozenset()),
    (operator_pb2.RunView, Run, frozenset({"cancel_state"})),
    (operator_pb2.Cycle, Candidate, frozenset({"members", "edges", "proposal_status"})),
    (operator_pb2.ProposalView, Proposal, frozenset({"members", "edges"})),
    (operator_pb2.DecisionView, Decision, frozenset({"scores", "roles", "released", "cancellations", "retired_at_ms"})),
    (operator_pb2.CycleWaitView, CycleWait, frozenset()),
    (operator_pb2.CancellationView, CancelScope, frozenset({"pending", "quarantined"})),
    (operator_pb2.TrajectoryView, Trajectory, frozenset({"signature", "known", "decisions", "guard"})),
    (operator_pb2.ConvergenceResponse, Convergence, frozenset({"stale", "applied_index"})),
    (operator_pb2.ScoreView, Score, frozenset()),
)
"""View message, the core record it shows, and the fields the converter fills itself."""


def _view_problems() -> list[str]:
    problems = []
    for msg_cls, record, own in _VIEWS:
        names = {f.name for f in dataclasses.fields(record)} | {
            n for n in dir(record) if isinstance(getattr(record, n, None), property)
        }
        for fd in msg_cls.DESCRIPTOR.fields:
            if fd.name not in own and fd.name not in names:
                problems.append(f"{msg_cls.DESCRIPTOR.name}.{fd.name}: {record.__name__} has no such field")
    return problems


def _type_problem(where: str, t: _Type, fd: FieldDescriptor) -> str | None:
    if t.repeated != _is_repeated(fd):
        return f"{where}: repeated in one and not in the other"
    if t.base is str:
        ok = fd.type == FieldDescriptor.TYPE_STRING
    elif t.base is bool:
        ok = fd.type == FieldDescriptor.TYPE_BOOL
    elif t.base is int:
        ok = fd.type in _INTS
    else:
        ok = fd.type == FieldDescriptor.TYPE_ENUM and fd.enum_type.name == t.base.__name__
    return None if ok else f"{where}: core type {t.base.__name__} does not match wire type {fd.type}"


def _compare(cls: type, desc: Descriptor, extra: frozenset[str], presence: bool) -> list[str]:
    """``presence``: every scalar must be ``optional`` (requests); otherwise exactly the core's
    ``X | None`` fields are (effects)."""
    problems = []
    core = {f.name: f for f in _fields(cls)}
    wire = {fd.name: fd for fd in desc.fields}
    for name in sorted(core.keys() - wire.keys()):
        problems.append(f"{desc.name}: lacks {cls.__name__}.{name}")
    for name in sorted(wire.keys() - core.keys() - extra):
        problems.append(f"{desc.name}.{name}: not a field of {cls.__name__}")
    for name in sorted(core.keys() & wire.keys()):
        f, fd = core[name], wire[name]
        where = f"{desc.name}.{name}"
        problem = _type_problem(where, f.type, fd)
        if problem:
            problems.append(problem)
        elif not f.type.repeated:
            wanted = presence or f.type.optional
            if bool(fd.has_presence) != wanted:
                problems.append(f"{where}: must {'' if wanted else 'not '}be optional")
    return problems


def check_schema() -> list[str]:
    """Every difference between the waitgraph.v1 messages and the core (empty: none)."""
    problems: list[str] = []
    for cls in DOMAIN_ENUMS:
        desc = types_pb2.DESCRIPTOR.enum_types_by_name.get(cls.__name__)
        if desc is None:
            problems.append(f"no wire enum {cls.__name__}")
            continue
        wire = {v.name for v in desc.values if v.number != 0}
        core = {_wire_name(m) for m in cls}
        problems += [f"{cls.__name__}: wire lacks {n}" for n in sorted(core - wire)]
        problems += [f"{cls.__name__}: {n} is not a core value" for n in sorted(wire - core)]
        if desc.values_by_number.get(0) is None or not desc.values_by_number[0].name.endswith("_UNSPECIFIED"):
            problems.append(f"{cls.__name__}: value 0 must be *_UNSPECIFIED")
    for rpc, cmd_cls in WRITE_RPCS.items():
        msg_cls = getattr(commands_pb2, f"{rpc}Request", None)
        if msg_cls is None:
            problems.append(f"no request message {rpc}Request")
            continue
        desc = msg_cls.DESCRIPTOR
        if "request_id" not in desc.fields_by_name:
            problems.append(f"{desc.name}: lacks request_id")
        problems += _compare(cmd_cls, desc, frozenset({"request_id"}), presence=True)
    oneof = types_pb2.Effect.DESCRIPTOR.oneofs_by_name["effect"]
    cases = {fd.name: fd for fd in oneof.fields}
    for fx_cls in EFFECTS:
        msg_cls = getattr(types_pb2, fx_cls.KIND, None)
        if msg_cls is None:
            problems.append(f"no effect message {fx_cls.KIND}")
            continue
        problems += _compare(fx_cls, msg_cls.DESCRIPTOR, frozenset(), presence=False)
        case = cases.get(snake(fx_cls.KIND))
        if case is None or case.message_type is not msg_cls.DESCRIPTOR:
            problems.append(f"Effect: oneof case {snake(fx_cls.KIND)} must be a {fx_cls.KIND}")
    for name in sorted(cases.keys() - {snake(c.KIND) for c in EFFECTS}):
        problems.append(f"Effect.{name}: no core effect")
    problems += _view_problems()
    services = (
        (agent_pb2.DESCRIPTOR.services_by_name["AgentService"], AGENT_WRITES),
        (operator_pb2.DESCRIPTOR.services_by_name["OperatorService"], OPERATOR_WRITES),
    )
    for service, writes in services:
        for method in service.methods:
            if method.output_type is types_pb2.Outcome.DESCRIPTOR and method.name not in writes:
                problems.append(f"{service.name}.{method.name} returns Outcome but is not a write RPC")
        for rpc in writes:
            method = service.methods_by_name.get(rpc)
            if method is None:
                problems.append(f"{service.name} lacks the write RPC {rpc}")
            elif method.input_type.name != f"{rpc}Request" or method.output_type is not types_pb2.Outcome.DESCRIPTOR:
                problems.append(f"{service.name}.{rpc} must take {rpc}Request and return Outcome")
    item_cases = {fd.name: fd for fd in agent_pb2.WriteItem.DESCRIPTOR.oneofs_by_name["write"].fields}
    for case, rpc in sorted(WRITE_ITEM_CASES.items()):
        fd = item_cases.get(case)
        if fd is None or fd.message_type.name != f"{rpc}Request":
            problems.append(f"WriteItem: oneof case {case} must be a {rpc}Request")
    for case in sorted(item_cases.keys() - WRITE_ITEM_CASES.keys()):
        problems.append(f"WriteItem.{case}: no AgentService write RPC")
    return problems


# -- bytes that are no message -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Undecodable:
    """What the server's deserializer hands a handler for bytes that do not decode as its request
    message: the handler raises ``error`` (INVALID_ARGUMENT) after authenticating the caller.
    gRPC's own answer to a deserializer that raises would be UNKNOWN."""

    error: WireError


def parse_request(cls: type[Message], data: bytes) -> Message:
    """``cls`` decoded from wire bytes; :class:`WireError` when they are not such a message."""
    try:
        return cls.FromString(data)
    except DecodeError as exc:
        raise WireError(f"{cls.DESCRIPTOR.name}: the request does not decode as protobuf ({exc})") from None


def request_deserializer(cls: type[Message]) -> Callable[[bytes], Message | Undecodable]:
    def deserialize(data: bytes) -> Message | Undecodable:
        try:
            return parse_request(cls, data)
        except WireError as exc:
            return Undecodable(exc)

    return deserialize
