"""Every RPC of AgentService and OperatorService, called by a role allowed to call it, with bytes
that are no request message and with a request over the codec's size limit: INVALID_ARGUMENT
each time, and the state digest unchanged. (Over gRPC's own receive limit, 4x higher, gRPC answers
RESOURCE_EXHAUSTED itself: tests/cluster/test_grpc_cluster.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory

from waitgraph.node.auth import POLICY, Role
from waitgraph.proto.v1 import agent_pb2, operator_pb2
from waitgraph.statemachine.codec import MAX_PAYLOAD_BYTES

from .grpc_harness import FRONTS, GrpcCluster, Operator, auth, front_args, leader_of

SERVICES = (
    agent_pb2.DESCRIPTOR.services_by_name["AgentService"],
    operator_pb2.DESCRIPTOR.services_by_name["OperatorService"],
)
METHODS = [(f"/{svc.full_name}/{m.name}", m) for svc in SERVICES for m in svc.methods]
TOKEN_OF = {Role.AGENT: "a", Role.OPERATOR: "ops", Role.ADMIN: "root"}


def caller(path: str) -> str:
    roles = POLICY[path]
    return TOKEN_OF[next(r for r in (Role.AGENT, Role.OPERATOR, Role.ADMIN) if r in roles)]


def oversize(method: Any) -> bytes:
    """A valid request of the method's type followed by an unknown length-delimited field (number
    999) that takes it over the codec's limit; protobuf keeps unknown fields, so it parses."""
    cls = message_factory.GetMessageClass(method.input_type)
    pad = b"x" * (MAX_PAYLOAD_BYTES + 100)
    tag = (999 << 3) | 2
    data = cls().SerializeToString() + _varint(tag) + _varint(len(pad)) + pad
    assert cls.FromString(data).ByteSize() > MAX_PAYLOAD_BYTES
    return data


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@pytest.fixture(scope="module", params=FRONTS)
def one_node(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[GrpcCluster]:
    """One node, served by the native front and then by Python's gRPC: every RPC answers the same."""
    args = ["--rate-limit-per-s", "0", *front_args(request.param)]
    cluster = GrpcCluster(tmp_path_factory.mktemp("grpc-every-rpc"), size=1, extra_args=args)
    with cluster:
        yield cluster


async def call_raw(channel: grpc.aio.Channel, path: str, method: Any, data: bytes, token: str) -> grpc.aio.AioRpcError:
    try:
        if method.server_streaming:
            stream = channel.unary_stream(path)(data, metadata=auth(token), timeout=10)
            async for _ in stream:
                pass
        else:
            await channel.unary_unary(path)(data, metadata=auth(token), timeout=10)
    except grpc.aio.AioRpcError as exc:
        return exc
    raise AssertionError(f"{path} accepted the request")


@pytest.mark.timeout(120)
async def test_malformed_and_oversize_requests_of_every_rpc_are_invalid_argument(one_node: GrpcCluster) -> None:
    node = await leader_of(one_node)
    op = Operator(node, "root")
    try:
        # The node's own first writes (recovery's voters, the mode) land after it is leader: start
        # from a state that stays put, so the comparison below is about the requests alone.
        before, settled = "", 0
        while settled < 3:
            await asyncio.sleep(0.3)
            now = (await op.status(fresh=True, digest=True)).state_digest
            settled, before = (settled + 1, now) if now == before else (0, now)
        async with node.channel() as channel:
            for path, method in METHODS:
                token = caller(path)
                for what, data in (("undecodable", b"\xff\xff\xff\xff"), ("oversize", oversize(method))):
                    err = await call_raw(channel, path, method, data, token)
                    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (path, what, err.code(), err.details())
                    expected = "does not decode" if what == "undecodable" else f"the limit is {MAX_PAYLOAD_BYTES}"
                    assert expected in err.details(), (path, what, err.details())
                # A caller who may not call the RPC learns nothing about its request: the role first.
                if token != "a":
                    err = await call_raw(channel, path, method, b"\xff\xff\xff\xff", "a")
                    assert err.code() == grpc.StatusCode.PERMISSION_DENIED, (path, err.code())
        after = (await op.status(fresh=True, digest=True)).state_digest
        assert after == before
        assert len(METHODS) == len(POLICY)
    finally:
        await op.close()
