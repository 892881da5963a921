"""The operator client's own rules without a cluster (what cluster/ops/opsclient.py did before the
CLI ran on the SDK): how an error reads, which of several failures is shown, an address where
nothing listens, the fresh-then-stale read with its reason, and how the CLI words an error."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from waitgraph.ops import render
from waitgraph.proto.v1 import operator_pb2
from waitgraph.sdk import OperatorClient, RpcError, Unavailable, WaitgraphClientError
from waitgraph.sdk.errors import NO_ANSWER, error_from_rpc, most_telling
from waitgraph.wire.metadata import LEADER_KEY, RETRY_KEY

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
DEADLINE = grpc.StatusCode.DEADLINE_EXCEEDED


def rpc_error(code: grpc.StatusCode, details: str, trailers: tuple[tuple[str, str], ...] = ()) -> Any:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailers), details)


def test_an_error_reads_as_one_line_code_message_endpoint() -> None:
    err = Unavailable("no leader\n  is known", status=UNAVAILABLE, endpoint="127.0.0.1:50051")
    assert str(err) == "UNAVAILABLE: no leader is known [127.0.0.1:50051]"
    assert str(err.with_message("other")) == "UNAVAILABLE: other [127.0.0.1:50051]"
    assert type(err.with_message("other")) is Unavailable


def test_an_address_where_nothing_listens_and_a_deadline_are_said_plainly() -> None:
    refused = error_from_rpc(
        rpc_error(UNAVAILABLE, "failed to connect to all addresses; last error: UNKNOWN: ipv4:1: Connection refused"),
        "127.0.0.1:1",
        None,
    )
    assert refused.unreachable and str(refused) == "UNAVAILABLE: cannot connect (Connection refused) [127.0.0.1:1]"
    late = error_from_rpc(rpc_error(DEADLINE, "Deadline Exceeded"), "h:1", "rid")
    assert not late.unreachable and late.message == NO_ANSWER and late.request_id == "rid"
    hinted = error_from_rpc(rpc_error(UNAVAILABLE, "not the leader", ((LEADER_KEY, "h:2"),)), "h:1", None)
    assert hinted.leader == "h:2" and not hinted.unreachable


def test_most_telling_prefers_outcome_unknown_then_an_answer_then_a_deadline() -> None:
    unreachable = error_from_rpc(rpc_error(UNAVAILABLE, "failed to connect: refused"), "a", None)
    deadline = error_from_rpc(rpc_error(DEADLINE, ""), "b", None)
    answered = error_from_rpc(rpc_error(UNAVAILABLE, "no leader is known"), "c", None)
    later = error_from_rpc(rpc_error(UNAVAILABLE, "no quorum"), "d", None)
    unknown = error_from_rpc(rpc_error(UNAVAILABLE, "outcome unknown", ((RETRY_KEY, "same-request-id"),)), "e", None)
    assert most_telling([unreachable, deadline]) is deadline
    assert most_telling([unreachable, answered, deadline, later]) is later  # the last of the best
    assert most_telling([unknown, answered, unreachable]) is unknown


def test_the_cli_words_an_error_with_its_flags_and_its_json() -> None:
    late = error_from_rpc(rpc_error(DEADLINE, ""), "h:1", None)
    assert render.error_line(late) == "DEADLINE_EXCEEDED: no answer within the deadline (--rpc-timeout) [h:1]"
    assert render.error_json(late) == {
        "code": "DEADLINE_EXCEEDED",
        "message": "no answer within the deadline (--rpc-timeout)",
        "endpoint": "h:1",
        "waitgraph_code": None,
        "leader": None,
    }
    local = WaitgraphClientError("no token: give --token")
    assert render.error_line(local) == "ERROR: no token: give --token" and render.code_name(local) == "ERROR"
    assert render.error_json(local)["endpoint"] is None
    denied = error_from_rpc(rpc_error(grpc.StatusCode.UNAUTHENTICATED, "unknown token"), "h:1", None)
    assert render.refused_token(denied) and not render.refused_token(late) and not render.refused_token(None)


class Scripted:
    """Answers call_at from a script: (address, fresh) -> a reply or a gRPC failure."""

    def __init__(self, script: dict[tuple[str, bool], Any]) -> None:
        self.script = script
        self.calls: list[tuple[str, bool]] = []

    async def __call__(self, address: str, service: str, rpc: str, request: Message, *rest: Any) -> Any:
        fresh = bool(getattr(request, "fresh", False))
        self.calls.append((address, fresh))
        answer = self.script[(address, fresh)]
        if isinstance(answer, grpc.StatusCode):
            raise error_from_rpc(
                rpc_error(answer, "no leader is known" if answer is UNAVAILABLE else ""), address, None
            )
        return answer


def read_with(script: dict[tuple[str, bool], Any], fresh: bool | None) -> tuple[Any, list[tuple[str, bool]]]:
    async def go() -> Any:
        ops = OperatorClient(["a:1", "b:1"], "token")
        scripted = Scripted(script)
        ops.transport.call_at = scripted  # type: ignore[method-assign]
        try:
            return await ops.read_convergence(fresh=fresh), scripted.calls
        finally:
            await ops.close()

    return asyncio.run(go())


def test_a_read_is_fresh_when_a_node_can_pass_a_barrier_else_stale_and_says_why() -> None:
    reply = operator_pb2.ConvergenceResponse(converged=True)
    read, calls = read_with({("a:1", True): UNAVAILABLE, ("b:1", True): reply}, None)
    assert (read.endpoint, read.stale, read.fallback_reason) == ("b:1", False, None) and read.reply == reply
    assert calls == [("a:1", True), ("b:1", True)]

    read, calls = read_with({("a:1", True): UNAVAILABLE, ("b:1", True): DEADLINE, ("a:1", False): reply}, None)
    assert read.stale and read.endpoint == "a:1"
    assert read.fallback_reason == "UNAVAILABLE: no leader is known [a:1]"  # an answer tells more than a deadline
    assert calls == [("a:1", True), ("b:1", True), ("a:1", False)]

    with pytest.raises(RpcError) as refused:  # --fresh: a barrier or an error, never a replica's view
        read_with({("a:1", True): DEADLINE, ("b:1", True): DEADLINE}, True)
    assert refused.value.message == "no log barrier passed within 3s (no leader with a quorum?)"
    read, calls = read_with({("a:1", False): UNAVAILABLE, ("b:1", False): reply}, False)
    assert read.stale and read.fallback_reason == "UNAVAILABLE: no leader is known [a:1]" and len(calls) == 2


def test_a_blocking_client_closed_twice_closes_once() -> None:
    """The chaos monitor stops its client in its own stop and again from the run's exit stack: the
    second close must not reach a loop that the first one closed ("Event loop is closed")."""
    from waitgraph.sdk import SyncOperatorClient

    client = SyncOperatorClient(["127.0.0.1:1"], "token")
    client.close()
    client.close()
    with SyncOperatorClient(["127.0.0.1:1"], "token") as other:
        other.close()
