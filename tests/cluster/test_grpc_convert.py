"""The wire schema against the core: every message matches its dataclass, conversion round-trips,
bad input is refused with a message naming the field, and the policy and error tables are whole."""

from __future__ import annotations

import dataclasses
import typing
from enum import StrEnum
from types import NoneType, UnionType
from typing import Any

import grpc
import pytest

from waitgraph.node import auth, grpc_status
from waitgraph.node.errors import Exhausted, NotLeader, OutcomeUnknown
from waitgraph.node.events import CursorExpired
from waitgraph.proto.v1 import agent_pb2, commands_pb2, operator_pb2, types_pb2
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.codec import field_types
from waitgraph.statemachine.effects import EFFECTS
from waitgraph.statemachine.errors import Rejection, Status
from waitgraph.statemachine.outcome import Outcome, Result, rejected
from waitgraph.wire import convert, metadata


def _value(name: str, tp: Any) -> Any:
    if tp is str:
        return f"{name}-value"
    if tp is bool:
        return True
    if tp is int:
        return 2**40 + len(name)
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        return list(tp)[-1]
    raise TypeError(tp)


def sample(cls: type, variant: int = 0) -> Any:
    """An instance with every field set (variant 1: optional fields None)."""
    hints = field_types(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        optional = False
        if isinstance(tp, UnionType) or typing.get_origin(tp) is typing.Union:
            tp = next(a for a in typing.get_args(tp) if a is not NoneType)
            optional = True
        if optional and variant == 1:
            kwargs[f.name] = None
        elif typing.get_origin(tp) is tuple:
            item = typing.get_args(tp)[0]
            kwargs[f.name] = ("exec:a", "exec:b") if item is str else (_value(f.name, item), _value(f.name, item))
        else:
            kwargs[f.name] = _value(f.name, tp)
    return cls(**kwargs)


def test_the_wire_matches_the_core() -> None:
    assert convert.check_schema() == []


@pytest.mark.parametrize("rpc", sorted(convert.WRITE_RPCS))
@pytest.mark.parametrize("variant", [0, 1])
def test_every_write_request_round_trips(rpc: str, variant: int) -> None:
    cmd = sample(convert.WRITE_RPCS[rpc], variant)
    msg = convert.request_from_command(cmd, "rid-1", rpc)
    wire = type(msg).FromString(msg.SerializeToString())
    assert wire.request_id == "rid-1"
    assert convert.command_from_request(rpc, wire) == cmd


@pytest.mark.parametrize("cls", EFFECTS, ids=lambda c: c.KIND)
@pytest.mark.parametrize("variant", [0, 1])
def test_every_effect_round_trips(cls: type, variant: int) -> None:
    fx = sample(cls, variant)
    msg = types_pb2.Effect.FromString(convert.effect_to_proto(fx).SerializeToString())
    assert convert.effect_kind(msg) == cls.KIND
    assert convert.effect_from_proto(msg) == fx


@pytest.mark.parametrize("cls", EFFECTS, ids=lambda c: c.KIND)
@pytest.mark.parametrize("variant", [0, 1])
def test_an_effect_built_in_place_is_the_generic_writers_message(cls: type, variant: int) -> None:
    """The answer path's writer (one plan per class, set in place) against the field-by-name rule
    every other view uses; and an outcome of two effects the same as field by field."""
    fx = sample(cls, variant)
    generic = types_pb2.Effect(**{convert.effect_case(cls.KIND): convert._write(fx, getattr(types_pb2, cls.KIND))})
    assert convert.effect_to_proto(fx) == generic
    out = Outcome(Result.APPLIED, (fx, fx), "", None, "m", {"b": "2", "a": 1}, True)
    expected = types_pb2.Outcome(
        result=types_pb2.RESULT_APPLIED,
        message="m",
        fields={"a": "1", "b": "2"},
        effects=[generic, generic],
        duplicate=True,
    )
    assert convert.outcome_to_proto(out) == expected


def test_defaults_apply_when_a_field_is_not_sent() -> None:
    cmd = convert.command_from_request("CreateTarget", commands_pb2.CreateTargetRequest(target_id="pool:gpu"))
    assert cmd == C.CreateTarget(target_id="pool:gpu", slots=1)
    vote = convert.command_from_request("Vote", commands_pb2.VoteRequest(digest="d"))
    assert vote == C.VoteRecovery(digest="d", approve=True)
    mode = convert.command_from_request("SetMode", commands_pb2.SetModeRequest(run_id="r"))
    assert mode == C.SetMode(mode=None, run_id="r")


def test_a_lease_ttl_crosses_the_wire_and_a_bad_one_is_the_cores_invalid_argument() -> None:
    req = commands_pb2.AcquireRequest(target_id="resource:r", execution_id="exec:a", generation=1)
    assert convert.command_from_request("Acquire", req).ttl_ms == 0  # unset: no TTL
    req.ttl_ms = 30_000
    assert convert.command_from_request("Acquire", req).ttl_ms == 30_000
    wait = commands_pb2.RegisterWaitRequest(
        waiter_id="exec:a", waiter_generation=1, target_id="resource:r", target_generation=1, reason="r"
    )
    wait.lease_ttl_ms = 5_000
    assert convert.command_from_request("RegisterWait", wait).lease_ttl_ms == 5_000  # type: ignore[union-attr]
    # Ranges are the core's to refuse (this module's rule): a typed INVALID_ARGUMENT, nothing applied.
    from waitgraph.statemachine.machine import StateMachine

    m = StateMachine()
    for ttl_ms, code in ((-1, "negative"), (C.MAX_LEASE_TTL_MS + 1, "ttl_too_long")):
        req.ttl_ms = ttl_ms
        cmd = convert.command_from_request("Acquire", req)
        before = m.state.digest()
        out = m.apply(C.Envelope(actor="operator:op", at_ms=1, request_id=None, command=cmd))
        assert (out.result, out.code) == (Result.REJECTED, code)
        assert out.status is Status.INVALID_ARGUMENT
        assert m.state.digest() == before


@pytest.mark.parametrize(
    ("rpc", "msg", "message"),
    [
        ("Acquire", commands_pb2.AcquireRequest(target_id="resource:r"), "Acquire.execution_id is required"),
        (
            "RegisterWait",
            commands_pb2.RegisterWaitRequest(
                waiter_id="exec:a",
                waiter_generation=1,
                target_id="exec:b",
                target_generation=1,
                reason="r",
                cancel_mode=7,
            ),
            "RegisterWait.cancel_mode has the unknown value 7; expected one of CANCEL_MODE_COOPERATIVE",
        ),
        (
            "SetMode",
            commands_pb2.SetModeRequest(mode=types_pb2.ROLLOUT_MODE_UNSPECIFIED),
            "SetMode.mode is UNSPECIFIED (0)",
        ),
    ],
)
def test_bad_requests_name_the_field(rpc: str, msg: Any, message: str) -> None:
    with pytest.raises(convert.WireError) as err:
        convert.command_from_request(rpc, msg)
    assert message in err.value.message
    assert grpc_status.code_for(err.value) is grpc.StatusCode.INVALID_ARGUMENT


def test_rejected_outcomes_keep_their_category_and_ride_in_the_trailer() -> None:
    cases = {
        "stale_generation": (Status.FAILED_PRECONDITION, grpc.StatusCode.FAILED_PRECONDITION),
        "stale_epoch": (Status.FAILED_PRECONDITION, grpc.StatusCode.FAILED_PRECONDITION),
        "target_held": (Status.ABORTED, grpc.StatusCode.ABORTED),
        "not_owner": (Status.PERMISSION_DENIED, grpc.StatusCode.PERMISSION_DENIED),
        "unresolvable_id": (Status.INVALID_ARGUMENT, grpc.StatusCode.INVALID_ARGUMENT),
        "too_many_edges": (Status.RESOURCE_EXHAUSTED, grpc.StatusCode.RESOURCE_EXHAUSTED),
    }
    for code, (status, wire) in cases.items():
        out = rejected(Rejection(status, code, f"{code} happened", execution_id="exec:a"))
        err = grpc_status.for_error(grpc_status.Rejected(out))
        assert err.code is wire and err.details == f"{code}: {code} happened"
        md = dict(err.trailing_metadata)
        assert md[metadata.CODE_KEY] == code
        back = convert.outcome_from_proto(types_pb2.Outcome.FromString(md[metadata.OUTCOME_KEY]))
        assert back == Outcome(Result.REJECTED, (), code, status, f"{code} happened", {"execution_id": "exec:a"})


def test_replication_and_gateway_errors() -> None:
    hint = grpc_status.LeaderHint("n2", "10.0.0.2:50051")
    err = grpc_status.for_error(NotLeader("no leader is known", leader="10.0.0.2:7001"), hint)
    md = dict(err.trailing_metadata)
    assert err.code is grpc.StatusCode.UNAVAILABLE
    assert md[metadata.LEADER_KEY] == "10.0.0.2:50051" and md[metadata.LEADER_ID_KEY] == "n2"
    err = grpc_status.for_error(OutcomeUnknown("no outcome within 5s"), hint, request_id="r-9")
    assert err.code is grpc.StatusCode.UNAVAILABLE and "same request_id 'r-9'" in err.details
    assert dict(err.trailing_metadata)[metadata.RETRY_KEY] == "same-request-id"
    err = grpc_status.for_error(OutcomeUnknown("no outcome within 5s"), hint)
    assert "may apply it twice" in err.details
    assert grpc_status.for_error(Exhausted("full")).code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert grpc_status.for_error(auth.Unauthenticated("no")).code is grpc.StatusCode.UNAUTHENTICATED
    assert grpc_status.for_error(auth.denied("no")).code is grpc.StatusCode.PERMISSION_DENIED
    assert grpc_status.for_error(CursorExpired("old")).code is grpc.StatusCode.OUT_OF_RANGE
    assert set(grpc_status.BY_STATUS) == set(Status)


def test_the_policy_names_every_rpc_of_both_services() -> None:
    methods = {
        f"/{svc.full_name}/{m.name}"
        for svc in (
            agent_pb2.DESCRIPTOR.services_by_name["AgentService"],
            operator_pb2.DESCRIPTOR.services_by_name["OperatorService"],
        )
        for m in svc.methods
    }
    assert methods == set(auth.POLICY)
