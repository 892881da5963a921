"""Request fuzzing: every write request message, with random and mutated field values and damaged
wire bytes, through the gateway's write path (size check, :mod:`waitgraph.wire.convert`, the codec) up to
the node, without a network.

What is asserted for every input: the only exceptions are typed (:class:`WaitgraphError`, each
with a gRPC status from the one table, never INTERNAL); whatever is refused before the log
(:class:`~waitgraph.wire.convert.WireError`, INVALID_ARGUMENT) reaches no node and changes nothing; what
the core rejects leaves the replica's state byte-identical; undecodable wire bytes are
INVALID_ARGUMENT (:func:`waitgraph.wire.convert.parse_request`, behind the server's deserializer).
"""

from __future__ import annotations

import asyncio
from functools import cache
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import INT64_MAX, INT64_MIN, examples, generate_log, mutated_bytes
from waitgraph.node import grpc_status
from waitgraph.node.auth import Principal, Role, TokenStore
from waitgraph.node.config import Peer, ServeConfig
from waitgraph.node.lessor import Lessor
from waitgraph.node.service import Gateway
from waitgraph.proto.v1 import types_pb2
from waitgraph.statemachine import StateMachine
from waitgraph.statemachine.codec import CheckedEnvelope
from waitgraph.statemachine.errors import WaitgraphError
from waitgraph.statemachine.outcome import Outcome
from waitgraph.statemachine.state import State
from waitgraph.wire import convert
from waitgraph.wire.convert import parse_request

AGENT = Principal("agent-a", Role.AGENT, "a")
ADMIN = Principal("root", Role.ADMIN)
CALLERS = [(rpc, AGENT) for rpc in convert.AGENT_WRITES] + [(rpc, ADMIN) for rpc in convert.OPERATOR_WRITES]

IDS = ["exec:a", "exec:b", "resource:r", "artifact:x", "pool:p", "agent:a", "run-1", "a", "b", "node:n1", "d" * 64]
TEXT = st.one_of(
    st.sampled_from(IDS),
    st.text(max_size=24),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=300),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "\x00", "😀"]), st.sampled_from([255, 257, 1025, 70_000])),
)
INTS = st.one_of(st.integers(-2, 3), st.integers(INT64_MIN, INT64_MAX), st.sampled_from([INT64_MIN, INT64_MAX, 2**32]))


def scalar(fd: FieldDescriptor) -> st.SearchStrategy[Any]:
    if fd.type == FieldDescriptor.TYPE_STRING:
        return TEXT
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if fd.type == FieldDescriptor.TYPE_ENUM:
        known = [v.number for v in fd.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-(2**31), 2**31 - 1))
    if fd.type == FieldDescriptor.TYPE_INT64:
        return INTS
    raise AssertionError(f"no strategy for {fd.full_name} (type {fd.type}): extend the fuzzer")


def value(fd: FieldDescriptor) -> st.SearchStrategy[Any]:
    if fd.is_repeated:
        return st.lists(scalar(fd), max_size=8) | st.lists(st.sampled_from(IDS), min_size=60, max_size=300)
    return scalar(fd)


def plausible(fd: FieldDescriptor) -> Any:
    """A value of the right shape (most requests then pass conversion and reach the core)."""
    if fd.type == FieldDescriptor.TYPE_STRING:
        name = fd.name
        guess = (
            "exec:a"
            if name.endswith(("execution_id", "waiter_id", "satisfier_id", "parent_id"))
            else "resource:r"
            if name.endswith("target_id")
            else "a"
        )
        return [guess] if fd.is_repeated else guess
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return True
    if fd.type == FieldDescriptor.TYPE_ENUM:
        return fd.enum_type.values[-1].number
    return 1


@st.composite
def request(draw: st.DrawFn, rpc: str) -> Message | bytes:
    """A request for ``rpc``: random fields, a plausible one mutated, or damaged wire bytes."""
    cls = convert.request_class(rpc)
    fields = list(cls.DESCRIPTOR.fields)
    how = draw(st.sampled_from(["random", "mutated", "mutated", "bytes"]), label="how")
    msg = cls()
    if how == "random":
        for fd in fields:
            if draw(st.booleans(), label=f"set {fd.name}"):
                _set(msg, fd, draw(value(fd), label=fd.name))
        return msg
    for fd in fields:
        _set(msg, fd, plausible(fd))
    if how == "bytes":
        return draw(mutated_bytes(msg.SerializeToString()), label="bytes")
    for fd in draw(st.lists(st.sampled_from(fields), max_size=3, unique=True), label="mutate"):
        if draw(st.booleans(), label=f"clear {fd.name}"):
            msg.ClearField(fd.name)
        else:
            _set(msg, fd, draw(value(fd), label=fd.name))
    return msg


def _set(msg: Message, fd: FieldDescriptor, v: Any) -> None:
    if fd.is_repeated:
        msg.ClearField(fd.name)
        getattr(msg, fd.name).extend(v)
    else:
        setattr(msg, fd.name, v)


class RecordingNode:
    """The node as the gateway sees it: applies what it is given to a real core, and says so."""

    def __init__(self, machine: StateMachine) -> None:
        self.machine = machine
        self.submitted: list[bytes] = []

    def is_leader(self) -> bool:
        return True

    def leader_address(self) -> str | None:
        return None

    def has_quorum(self) -> bool:
        return True

    def member_features(self) -> dict[str, int | None]:
        return {}  # no other member: the lessor answers heartbeats

    async def submit(self, checked: CheckedEnvelope) -> Outcome:
        self.submitted.append(checked.data)
        return self.machine.apply_bytes(checked.data)  # as every other replica: from the bytes


@cache
def rich_snapshot() -> bytes:
    sm = StateMachine()
    for data in generate_log(5, 200):
        sm.apply_bytes(data)
    return sm.snapshot()


@cache
def config() -> ServeConfig:
    return ServeConfig(
        node_id="n1",
        raft_address="127.0.0.1:1",
        grpc_address="127.0.0.1:2",
        peers=(Peer("n1", "127.0.0.1:1", "127.0.0.1:2"),),
        data_dir=Path("/nonexistent"),
        secret="unused",
        insecure=True,
        tokens=TokenStore([]),
    )


def check(rpc: str, principal: Principal, req: Message | bytes) -> str:
    """Drive one request through the write path; return what happened (for the statistics)."""
    node = RecordingNode(StateMachine(State.restore(rich_snapshot())))
    lessor = Lessor(lambda: 1_000_000, lambda: node.machine.state)
    gateway = Gateway(config(), node, journal=None, clock=lambda: 1_000_000.0, lessor=lessor)  # type: ignore[arg-type]
    before = node.machine.snapshot()
    try:
        msg = parse_request(convert.request_class(rpc), req) if isinstance(req, bytes) else req
        reply = asyncio.run(gateway.write(principal, rpc, msg))
    except WaitgraphError as exc:
        code = grpc_status.code_for(exc)
        assert code is not grpc.StatusCode.INTERNAL, exc
        if isinstance(exc, convert.WireError):
            assert code is grpc.StatusCode.INVALID_ARGUMENT
            assert node.submitted == [], "a request refused before the log reached the node"
            assert node.machine.snapshot() == before
            return "refused before the log"
        assert node.machine.snapshot() == before, f"the refusal {exc} changed the state"
        if rpc in ("Heartbeat", "JoinSession") and not isinstance(exc, grpc_status.Rejected):
            # answered by the lessor (cluster/node/lessor.py): a heartbeat, or a join refused by
            # the session limits; never proposed
            assert node.submitted == [], "the lessor's refusal reached the log"
            return f"refused by the lessor ({code.name})"
        assert isinstance(exc, grpc_status.Rejected), f"{type(exc).__name__}: {exc}"
        return f"rejected by the core ({code.name})"
    if rpc == "Heartbeat":  # renewed at the leader, in memory: nothing is written
        assert isinstance(reply, types_pb2.Outcome) and node.submitted == [] and node.machine.snapshot() == before
        return "renewed by the lessor"
    assert isinstance(reply, types_pb2.Outcome) and len(node.submitted) == 1
    return "applied or no-op"


@pytest.mark.parametrize(("rpc", "principal"), CALLERS, ids=[f"{p.role.value}-{r}" for r, p in CALLERS])
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_write_request_fuzzed_gives_only_typed_errors(rpc: str, principal: Principal, data: Any) -> None:
    check(rpc, principal, data.draw(request(rpc), label="request"))


def test_the_fuzzer_reaches_every_outcome() -> None:
    """The generator is not only producing junk: over a fixed sample, requests are refused before
    the log, rejected by the core, and applied."""
    seen: set[str] = set()

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(data=st.data())
    def run(data: Any) -> None:
        rpc, principal = data.draw(st.sampled_from(CALLERS))
        seen.add(check(rpc, principal, data.draw(request(rpc))))

    run()
    lessor = {s for s in seen if s.startswith(("rejected", "refused by the lessor", "renewed"))}
    assert seen == {"refused before the log", "applied or no-op"} | lessor
    assert any(s.startswith("rejected") for s in seen), seen


def test_undecodable_bytes_are_invalid_argument() -> None:
    cls = convert.request_class("RegisterWait")
    for junk in (b"\xff\xff\xff\xff", b"\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", b"\x0a\x05ab"):
        with pytest.raises(convert.WireError) as err:
            parse_request(cls, junk)
        assert "RegisterWaitRequest" in err.value.message
    assert parse_request(cls, b"") == cls()
