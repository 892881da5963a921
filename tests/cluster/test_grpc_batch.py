"""AgentService.WriteBatch and the SDK's write coalescing, against a real ``waitgraph serve``.

WriteBatch: every item answered in place, as its unary RPC would be (outcome, or status code +
stable code + REJECTED outcome); bad items fail alone and change nothing; items are applied in
order; a retry with the same request id (batched or unary) returns the recorded outcome; a call
with no items, too many, or no valid token fails whole, before anything is proposed. The SDK:
concurrent writes of tasks sharing one Client leave as one WriteBatch, each caller gets its own
outcome or typed error, and a lost reply is retried with the same request id.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from waitgraph.proto.v1 import agent_pb2, agent_pb2_grpc, operator_pb2, types_pb2
from waitgraph.sdk import Batching, Client, InvalidArgument, NoSession, PermissionDenied
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.commands import Command
from waitgraph.wire import convert

from .grpc_harness import TOKENS, GrpcCluster, GrpcNode, Operator, auth, leader_of, until

OK = grpc.StatusCode.OK.value[0]
_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def code_of(result: agent_pb2.WriteResult) -> grpc.StatusCode:
    return _BY_NUMBER[result.status_code]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcNode]:
    cluster = GrpcCluster(tmp_path_factory.mktemp("grpc-batch"), size=1, extra_args=["--rate-limit-per-s", "0"])
    with cluster:

        async def setup() -> GrpcNode:
            leader = await leader_of(cluster)
            async with Client([leader.grpc], TOKENS["a"]) as a:
                await a.submit(C.JoinSession(agent_id="a", lease_ms=3_600_000))
            return leader

        yield asyncio.run(setup())


def item(cmd: Command, request_id: str | None = None, token: str | None = None) -> agent_pb2.WriteItem:
    rid = request_id if request_id is not None else uuid.uuid4().hex
    request = convert.request_from_command(cmd, rid)
    return convert.write_item(cmd.KIND, request, f"Bearer {TOKENS[token]}" if token else "")


async def batch(node: GrpcNode, items: list[agent_pb2.WriteItem], token: str = "a") -> list[agent_pb2.WriteResult]:
    async with node.channel() as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)  # type: ignore[no-untyped-call]
        reply = await stub.WriteBatch(agent_pb2.WriteBatchRequest(items=items), metadata=auth(token), timeout=10)
    return list(reply.results)


async def targets(node: GrpcNode) -> set[str]:
    op = Operator(node)
    try:
        graph = await op.stub.Graph(operator_pb2.GraphRequest(fresh=True), metadata=op.md, timeout=10)
    finally:
        await op.close()
    return {t.target_id for t in graph.targets}


def waiter_and_held_target(tag: str) -> tuple[str, str, list[Command]]:
    """Execution W (running), target R held by another running execution, and the commands that
    make them, each depending on the one before it: W may then wait on R."""
    W, H, R = f"exec:W-{tag}", f"exec:H-{tag}", f"resource:r-{tag}"
    return (
        W,
        R,
        [
            C.CreateExecution(execution_id=W, run_id=f"run-W-{tag}", observed_cancel_generation=0),
            C.StartExecution(execution_id=W, generation=1, observed_cancel_generation=0),
            C.CreateExecution(execution_id=H, run_id=f"run-H-{tag}", observed_cancel_generation=0),
            C.StartExecution(execution_id=H, generation=1, observed_cancel_generation=0),
            C.CreateTarget(target_id=R),
            C.Acquire(target_id=R, execution_id=H, generation=1, observed_epoch=0),
        ],
    )


async def digest(node: GrpcNode) -> str:
    op = Operator(node)
    try:
        return str((await op.status(fresh=True, digest=True)).state_digest)
    finally:
        await op.close()


@pytest.mark.timeout(120)
async def test_each_item_gets_its_own_answer_and_bad_items_fail_alone(node: GrpcNode) -> None:
    tag = uuid.uuid4().hex[:8]
    items = [
        item(C.CreateTarget(target_id=f"resource:ok1-{tag}")),
        item(C.CreateTarget(target_id="not an id")),  # the core refuses it: INVALID_ARGUMENT
        agent_pb2.WriteItem(),  # no write set: INVALID_ARGUMENT
        item(C.CreateTarget(target_id=f"resource:ok2-{tag}")),
        item(C.CreateTarget(target_id=f"resource:as-b-{tag}"), token="b"),  # acts as agent b: no session
        item(C.CreateTarget(target_id=f"resource:as-ops-{tag}"), token="ops"),  # operator: wrong role
        agent_pb2.WriteItem(
            authorization="Bearer not-a-token-at-all", create_target=agent_pb2.WriteItem().create_target
        ),
        item(C.CreateTarget(target_id=f"resource:ok1-{tag}")),  # again: the core's answer for a repeat
    ]
    results = await batch(node, items)
    assert len(results) == len(items)
    codes = [code_of(r) for r in results]
    assert codes[0] == grpc.StatusCode.OK and results[0].outcome.result == types_pb2.RESULT_APPLIED
    assert codes[1] == grpc.StatusCode.INVALID_ARGUMENT and results[1].outcome.result == types_pb2.RESULT_REJECTED
    assert codes[2] == grpc.StatusCode.INVALID_ARGUMENT and "no write is set" in results[2].details
    assert codes[3] == grpc.StatusCode.OK and results[3].outcome.result == types_pb2.RESULT_APPLIED
    assert codes[4] == grpc.StatusCode.FAILED_PRECONDITION and results[4].code == "no_session"
    assert codes[5] == grpc.StatusCode.PERMISSION_DENIED
    assert codes[6] == grpc.StatusCode.UNAUTHENTICATED
    assert codes[7] == grpc.StatusCode.ALREADY_EXISTS and results[7].outcome.result == types_pb2.RESULT_REJECTED
    present = await targets(node)
    assert {f"resource:ok1-{tag}", f"resource:ok2-{tag}"} <= present
    assert not {f"resource:as-b-{tag}", f"resource:as-ops-{tag}"} & present


@pytest.mark.timeout(120)
async def test_items_apply_in_order_and_retries_return_the_recorded_outcome(node: GrpcNode) -> None:
    tag = uuid.uuid4().hex[:8]
    W, R, setup = waiter_and_held_target(tag)
    # Each item depends on the one before it: only applied in order do they all succeed.
    results = await batch(node, [item(cmd) for cmd in setup])
    assert [r.status_code for r in results] == [OK] * len(setup), [r.details for r in results]

    def edge(v: int) -> list[Command]:
        return [
            C.RegisterWait(
                waiter_id=W, waiter_generation=1, target_id=R, target_generation=1, reason="t", edge_version=v
            ),
            C.CloseWait(waiter_id=W, waiter_generation=1, target_id=R, edge_version=v, reason="done"),
        ]

    items = [item(cmd, request_id=f"{tag}-{i}") for i, cmd in enumerate(edge(1) + edge(2) + edge(3))]
    first = await batch(node, items)
    assert all(r.status_code == OK and r.outcome.result == types_pb2.RESULT_APPLIED for r in first)
    assert not any(r.outcome.duplicate for r in first)
    before = await digest(node)
    again = await batch(node, items)  # the same request ids: answered from the idempotency table
    assert all(r.status_code == OK and r.outcome.duplicate for r in again)
    assert [list(r.outcome.effects) for r in again] == [list(r.outcome.effects) for r in first]
    async with Client([node.grpc], TOKENS["a"], batching=Batching(enabled=False)) as unary:
        out = await unary.submit(edge(2)[0], request_id=f"{tag}-2")  # one of them, unary
    assert out.duplicate
    assert await digest(node) == before


@pytest.mark.timeout(120)
async def test_whole_call_failures_propose_nothing(node: GrpcNode) -> None:
    tag = uuid.uuid4().hex[:8]
    before = await digest(node)
    async with node.channel() as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)  # type: ignore[no-untyped-call]
        cases = [
            (agent_pb2.WriteBatchRequest(), auth("a"), grpc.StatusCode.INVALID_ARGUMENT),
            (
                agent_pb2.WriteBatchRequest(items=[item(C.CreateTarget(target_id=f"resource:m-{tag}"))] * 1025),
                auth("a"),
                grpc.StatusCode.INVALID_ARGUMENT,
            ),
            (
                agent_pb2.WriteBatchRequest(items=[item(C.CreateTarget(target_id=f"resource:n-{tag}"))]),
                (),
                grpc.StatusCode.UNAUTHENTICATED,
            ),
        ]
        for request, md, code in cases:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.WriteBatch(request, metadata=md, timeout=10)
            assert err.value.code() == code, err.value.details()
    assert await digest(node) == before


class Counting(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Counts the client's calls by method; ``lose`` drops the reply of the next WriteBatch after
    the server answered it (outcome unknown for every write it carried)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.lose = False
        self.lost: list[str] = []

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        name = method.rsplit("/", 1)[-1]
        self.calls[name] = self.calls.get(name, 0) + 1
        call = await continuation(details, request)
        if self.lose and name == "WriteBatch":
            await call
            self.lose = False
            self.lost += [convert.write_item_request(i)[1].request_id for i in request.items]
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details="injected: reply lost"
            )
        return call


@pytest.mark.timeout(120)
async def test_sdk_coalesces_concurrent_writes_with_per_caller_results(node: GrpcNode) -> None:
    tag = uuid.uuid4().hex[:8]
    counting = Counting()
    async with Client([node.grpc], TOKENS["a"], interceptors=[counting]) as client:
        names = [f"resource:c{i}-{tag}" for i in range(40)]
        calls = [client.submit(C.CreateTarget(target_id=n)) for n in names]
        calls.insert(7, client.submit(C.CreateTarget(target_id="bad id")))
        calls.insert(9, client.submit(C.CreateTarget(target_id=f"resource:b-{tag}"), token=TOKENS["b"]))
        calls.insert(11, client.submit(C.CreateTarget(target_id=f"resource:o-{tag}"), token=TOKENS["ops"]))
        got = await asyncio.gather(*calls, return_exceptions=True)
    assert counting.calls == {"WriteBatch": 1}  # 43 writes issued together: one call
    assert isinstance(got[7], InvalidArgument)
    assert isinstance(got[9], NoSession)  # acted as agent b, which has no session
    assert isinstance(got[11], PermissionDenied)
    outcomes = [g for i, g in enumerate(got) if i not in (7, 9, 11)]
    created = [o.effects[0].target_id for o in outcomes]  # type: ignore[union-attr]
    assert created == names  # each caller got its own outcome


@pytest.mark.timeout(120)
async def test_sdk_sequential_calls_keep_their_order_and_lost_replies_are_retried(node: GrpcNode) -> None:
    tag = uuid.uuid4().hex[:8]
    counting = Counting()
    async with Client([node.grpc], TOKENS["a"], interceptors=[counting]) as client:
        W, R, setup = waiter_and_held_target(tag)
        for cmd in setup:
            await client.submit(cmd)

        async def agent_loop(rounds: int) -> list[bool]:
            # One caller, one write at a time: RegisterWait v then CloseWait v only succeed in order.
            dup = []
            for v in range(1, rounds + 1):
                if v == 3:
                    counting.lose = True  # this RegisterWait is applied, its reply lost, then retried
                reg = C.RegisterWait(
                    waiter_id=W, waiter_generation=1, target_id=R, target_generation=1, reason="t", edge_version=v
                )
                out = await client.submit(reg)
                dup.append(out.duplicate)
                await client.submit(
                    C.CloseWait(waiter_id=W, waiter_generation=1, target_id=R, edge_version=v, reason="done")
                )
            return dup

        async def other_agent() -> None:
            for i in range(10):
                await client.submit(C.CreateTarget(target_id=f"resource:o{i}-{tag}"))

        dup, _ = await asyncio.gather(agent_loop(5), other_agent())
    assert dup == [False, False, True, False, False]  # the retry of v3 (same request id) was a duplicate
    assert len(counting.lost) >= 1
    assert counting.calls["WriteBatch"] < 6 + 10 + 10 + 1  # the two callers shared calls


async def test_batching_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="max_items"):
        Batching(max_items=0)
    with pytest.raises(ValueError, match="max_bytes"):
        Batching(max_bytes=64 * 1024)
    with pytest.raises(ValueError, match="linger_s"):
        Batching(linger_s=-1)


@pytest.mark.timeout(120)
async def test_each_item_spends_its_own_tokens_rate_limit_and_the_call_none(tmp_path: Any) -> None:
    limits = ["--rate-limit-per-s", "0.01", "--rate-limit-burst", "3"]
    with GrpcCluster(tmp_path, size=1, extra_args=limits) as cluster:
        node = cluster.nodes[0]

        async def serving() -> bool:  # the health service: no token, no rate limit spent
            async with node.channel() as channel:
                reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

        await until(serving, 30, "the node to serve")
        tag = uuid.uuid4().hex[:8]
        items = [item(C.JoinSession(agent_id="a", lease_ms=60_000))]
        items += [item(C.CreateTarget(target_id=f"resource:a{i}-{tag}")) for i in range(4)]
        items += [item(C.JoinSession(agent_id="b", lease_ms=60_000), token="b")]
        items += [item(C.CreateTarget(target_id=f"resource:b{i}-{tag}"), token="b") for i in range(2)]
        results = await batch(node, items, token="a")
    codes = [code_of(r) for r in results]
    # a's bucket holds 3: its first three items pass, the call itself took none of them.
    assert codes[:3] == [grpc.StatusCode.OK] * 3
    assert codes[3:5] == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2
    assert results[3].code == results[4].code == "rate_limited"
    assert codes[5:] == [grpc.StatusCode.OK] * 3  # b's own bucket


class NoWriteBatch(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Plays a node that predates WriteBatch: the method is UNIMPLEMENTED, nothing reaches it."""

    def __init__(self) -> None:
        self.refused = 0

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if method.endswith("/WriteBatch"):
            self.refused += 1
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNIMPLEMENTED, grpc.aio.Metadata(), grpc.aio.Metadata(), details="Method not found!"
            )
        return await continuation(details, request)


@pytest.mark.timeout(120)
async def test_sdk_falls_back_to_one_rpc_per_write_without_write_batch(node: GrpcNode) -> None:
    tag = uuid.uuid4().hex[:8]
    old_node = NoWriteBatch()
    async with Client([node.grpc], TOKENS["a"], interceptors=[old_node]) as client:
        outs = await asyncio.gather(
            *(client.submit(C.CreateTarget(target_id=f"resource:f{i}-{tag}")) for i in range(5))
        )
        assert not client.transport.batching.enabled
        again = await client.submit(C.CreateTarget(target_id=f"resource:g-{tag}"))
    assert [o.effects[0].target_id for o in outs] == [f"resource:f{i}-{tag}" for i in range(5)]  # type: ignore[union-attr]
    assert again.result.value == "APPLIED" and old_node.refused == 1
