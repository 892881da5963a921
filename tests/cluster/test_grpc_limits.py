"""Per-agent limits under a flood: the request rate limit (cluster/node/ratelimit.py), the core's limits
of open waits per execution and of open executions per agent, and another agent served all along.
Also the settings of the rate limit and of the durability option (cluster/node/config.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from waitgraph.node.config import ConfigError, ServeConfig, resolve
from waitgraph.node.grpc_status import code_for
from waitgraph.node.ratelimit import RateLimited, RateLimiter
from waitgraph.proto.v1 import agent_pb2, operator_pb2
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.outcome import Result
from waitgraph.statemachine.state import Limits
from waitgraph.wire import convert
from waitgraph.wire.metadata import CODE_KEY

from .grpc_harness import Agent, GrpcCluster, Operator, leader_of, refused, token_file, trailer

LEASE_MS = 600_000

# -- the limiter -------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_a_bucket_gives_its_burst_then_its_rate_and_keys_are_independent() -> None:
    clock = Clock()
    limiter = RateLimiter(10.0, 5, clock)
    for _ in range(5):
        limiter.take("a")
    with pytest.raises(RateLimited) as err:
        limiter.take("a", "agent:a")
    assert err.value.code == "rate_limited" and err.value.fields["retry_after_ms"] == 100
    assert "agent:a is over its request rate limit (10/s, burst 5)" in err.value.message
    assert code_for(err.value) is grpc.StatusCode.RESOURCE_EXHAUSTED
    limiter.take("b")  # another key has its own full bucket
    clock.now_s += 0.1  # one token back
    limiter.take("a")
    with pytest.raises(RateLimited):
        limiter.take("a")
    clock.now_s += 60  # refills up to the burst, not beyond
    for _ in range(5):
        limiter.take("a")
    with pytest.raises(RateLimited):
        limiter.take("a")
    assert limiter.refused == 3


def test_a_refused_request_spends_nothing() -> None:
    clock = Clock()
    limiter = RateLimiter(2.0, 1, clock)
    limiter.take("a")
    for _ in range(100):  # hammering an empty bucket does not push the next token further away
        with pytest.raises(RateLimited):
            limiter.take("a")
    clock.now_s += 0.5
    limiter.take("a")


def test_zero_turns_the_limit_off() -> None:
    limiter = RateLimiter(0, 1, Clock())
    for _ in range(10_000):
        limiter.take("a")
    assert not limiter.enabled


# -- settings ----------------------------------------------------------------------------------------


@pytest.fixture
def base(tmp_path: Path) -> Iterator[dict[str, Any]]:
    yield dict(
        id="n1",
        raft_addr="127.0.0.1:7001",
        grpc_addr="127.0.0.1:7101",
        peers="n1=127.0.0.1:7001,n2=127.0.0.1:7002,n3=127.0.0.1:7003",
        data_dir=str(tmp_path / "data"),
        tokens_file=str(token_file(tmp_path / "tokens.json")),
    )


def test_settings_defaults_flags_environment_and_file(base: dict[str, Any]) -> None:
    env = {"WAITGRAPH_SECRET": "s-dGhlIHNlY3JldCBvZiB0aGlzIHRlc3QgaXMgbG9uZw"}
    cfg = resolve(base, env=env)
    defaults = ServeConfig.__dataclass_fields__
    assert cfg.fsync is defaults["fsync"].default is True  # durable unless told otherwise
    assert (cfg.rate_limit_per_s, cfg.rate_limit_burst) == (100.0, 200)
    cfg = resolve(base, {"fsync": False, "rate_limit_per_s": 5, "rate_limit_burst": 7}, env)
    assert (cfg.fsync, cfg.rate_limit_per_s, cfg.rate_limit_burst) == (False, 5.0, 7)
    cfg = resolve(base, {"fsync": True}, env | {"WAITGRAPH_FSYNC": "off", "WAITGRAPH_RATE_LIMIT_PER_S": "0"})
    assert (cfg.fsync, cfg.rate_limit_per_s) == (False, 0.0)
    cfg = resolve(base | {"fsync": "yes"}, {"fsync": False}, env)
    assert cfg.fsync is True


def test_bad_settings_are_refused_by_name(base: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(
            base | {"fsync": "maybe", "rate_limit_per_s": "-1", "rate_limit_burst": "0"},
            env={"WAITGRAPH_SECRET": "s-dGhlIHNlY3JldCBvZiB0aGlzIHRlc3QgaXMgbG9uZw"},
        )
    text = "\n".join(err.value.problems)
    assert "fsync: 'maybe' is not true or false" in text
    assert "rate_limit_per_s: must not be negative" in text
    assert "rate_limit_burst: must be at least 1" in text


# -- a flood over gRPC -------------------------------------------------------------------------------

RATE, BURST = 40.0, 40


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcCluster]:
    # Election timeouts of 3-6 s: these tests count every call's answer, and a 0.5-1 s stall of
    # every Raft thread at once (the CI machine, not the test) turned the default 0.5-1 s into an
    # election mid-flood, answered "no leader is known"; limits, not failover, are tested here.
    cluster = GrpcCluster(
        tmp_path_factory.mktemp("grpc-limits"),
        extra_args=[
            *("--rate-limit-per-s", str(RATE), "--rate-limit-burst", str(BURST)),
            *("--election-timeout-ms", "3000"),
        ],
    )
    with cluster:
        yield cluster


async def paced(agent: Agent, cmd: Any) -> Any:
    """Send ``cmd``, waiting out the rate limit like a well-behaved client."""
    while True:
        try:
            return await agent.do(cmd)
        except grpc.aio.AioRpcError as exc:
            if trailer(exc, CODE_KEY) != "rate_limited":
                raise
            await asyncio.sleep(0.05)


@pytest.mark.timeout(120)
async def test_a_flooding_agent_is_held_to_its_limits_while_another_is_served(limited: GrpcCluster) -> None:
    leader = await leader_of(limited)
    a, b, op = Agent(leader, "a"), Agent(leader, "b"), Operator(leader)
    try:
        await asyncio.sleep(BURST / RATE)  # the buckets used by leader_of refill
        for agent, name in ((a, "a"), (b, "b")):
            assert (await paced(agent, C.JoinSession(agent_id=name, lease_ms=LEASE_MS))).ok
        x = "exec:flood-a"
        assert (
            await paced(a, C.CreateExecution(execution_id=x, run_id="run-flood-a", observed_cancel_generation=0))
        ).ok
        assert (await paced(a, C.StartExecution(execution_id=x, generation=1, observed_cancel_generation=0))).ok
        await asyncio.sleep(BURST / RATE)

        # 1. The rate: 400 Heartbeats at once from a. Meanwhile b does its work at a modest pace.
        served: list[Result] = []

        async def modest() -> None:
            for i in range(10):
                out = await b.do(C.CreateTarget(target_id=f"resource:b-{i}"))
                served.append(out.result)
                await asyncio.sleep(0.05)

        started = time.monotonic()
        flood = [a.do(C.Heartbeat(agent_id="a"), timeout_s=30) for _ in range(400)]
        results = await asyncio.gather(modest(), *flood, return_exceptions=True)
        elapsed = time.monotonic() - started
        assert results[0] is None, results[0]
        assert served == [Result.APPLIED] * 10, "the other agent was not served during the flood"
        outcomes = Counter(
            "ok" if not isinstance(r, BaseException) else (r.code(), trailer(r, CODE_KEY)) for r in results[1:]
        )
        refused_ = outcomes[(grpc.StatusCode.RESOURCE_EXHAUSTED, "rate_limited")]
        assert outcomes["ok"] + refused_ == 400, outcomes
        assert refused_ > 0 and outcomes["ok"] <= BURST + RATE * elapsed + 1, (outcomes, elapsed)
        err = next(r for r in results[1:] if isinstance(r, grpc.aio.AioRpcError))
        assert "agent:a is over its request rate limit (40/s, burst 40)" in err.details()

        # 2. Open waits: one execution of a registers more waits than the core's per-execution
        # limit allows; a well-behaved pace gets through the rate limit, the core stops the rest.
        limit = Limits().max_edges_per_execution
        codes: Counter[str] = Counter()
        for i in range(limit + 6):
            assert (await paced(a, C.CreateTarget(target_id=f"artifact:a-{i}"))).ok
            wait = C.RegisterWait(
                waiter_id=x, waiter_generation=1, target_id=f"artifact:a-{i}", target_generation=1, reason="flood"
            )
            try:
                codes[(await paced(a, wait)).result.value] += 1
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                codes[trailer(exc, CODE_KEY)] += 1
        assert codes == Counter({Result.APPLIED.value: limit, "too_many_edges": 6}), codes
        graph = await op.stub.Graph(operator_pb2.GraphRequest(agent_id="a", fresh=True), metadata=op.md, timeout=10)
        assert len([w for w in graph.waits if w.waiter_id == x]) == limit
        # b is still served at once.
        assert (await b.do(C.Heartbeat(agent_id="b"))).ok
    finally:
        for client in (a, b, op):
            await client.close()


@pytest.mark.timeout(60)
async def test_the_limit_is_per_token_not_per_role(limited: GrpcCluster) -> None:
    """An operator's bucket is its own: a flood of Status reads by the operator leaves agent c alone."""
    leader = await leader_of(limited)
    op, c = Operator(leader), Agent(leader, "c")
    try:
        await asyncio.sleep(BURST / RATE)
        results = await asyncio.gather(
            *(op.stub.Status(operator_pb2.StatusRequest(), metadata=op.md, timeout=10) for _ in range(150)),
            return_exceptions=True,
        )
        limited_ = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert limited_ and all(r.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for r in limited_)
        assert (await c.do(C.JoinSession(agent_id="c", lease_ms=LEASE_MS))).ok
        err = await refused(c.do(C.Heartbeat(agent_id="a")))  # c's own budget, a's rules: still refused
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        await op.close()
        await c.close()


# -- open executions per agent (the core's limit), over a WriteBatch flood -------------------------


@pytest.fixture(scope="module")
def unthrottled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcCluster]:
    """A cluster without the rate limit: reaching the default 10,000 open executions at 40/s would
    take minutes, and this limit is the core's, not the gRPC layer's."""
    cluster = GrpcCluster(tmp_path_factory.mktemp("grpc-agent-limits"), extra_args=["--rate-limit-per-s", "0"])
    with cluster:
        yield cluster


async def create_many(agent: Agent, ids: list[str]) -> Counter[str]:
    """CreateExecution for each id (one run each) in WriteBatches of 500: outcome or error code counts."""
    codes: Counter[str] = Counter()
    for start in range(0, len(ids), 500):
        items = [
            convert.write_item(
                "CreateExecution",
                convert.request_from_command(
                    C.CreateExecution(execution_id=eid, run_id=f"run-{eid[5:]}", observed_cancel_generation=0),
                    uuid.uuid4().hex,
                ),
                "",
            )
            for eid in ids[start : start + 500]
        ]
        reply = await agent.stub.WriteBatch(agent_pb2.WriteBatchRequest(items=items), metadata=agent.md, timeout=60)
        for result in reply.results:
            codes[
                convert.outcome_from_proto(result.outcome).result.value if result.status_code == 0 else result.code
            ] += 1
            if result.code == "agent_execution_limit":
                limit = Limits().max_open_executions_per_agent
                assert result.status_code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], result
                assert f"agent a already has {limit} open executions" in result.details, result.details
    return codes


@pytest.mark.timeout(240)
async def test_an_agent_at_its_open_execution_limit_is_refused_while_another_is_served(
    unthrottled: GrpcCluster,
) -> None:
    leader = await leader_of(unthrottled)
    a, b = Agent(leader, "a"), Agent(leader, "b")
    limit = Limits().max_open_executions_per_agent
    try:
        for agent, name in ((a, "a"), (b, "b")):
            assert (await agent.do(C.JoinSession(agent_id=name, lease_ms=LEASE_MS))).ok
        applied = await create_many(a, [f"exec:a-{i}" for i in range(limit)])
        assert applied == Counter({"APPLIED": limit}), applied

        # a floods on past its limit while b creates and waits at a modest pace: every one of a's
        # creations is refused by the core, each of b's is served.
        served: list[Result] = []

        async def modest() -> None:
            for i in range(10):
                served.append(
                    (
                        await b.do(
                            C.CreateExecution(
                                execution_id=f"exec:b-{i}", run_id=f"run-b-{i}", observed_cancel_generation=0
                            )
                        )
                    ).result
                )
                await asyncio.sleep(0.02)

        flood, _ = await asyncio.gather(create_many(a, [f"exec:a-more-{i}" for i in range(1000)]), modest())
        assert flood == Counter({"agent_execution_limit": 1000}), flood
        assert served == [Result.APPLIED] * 10, "the other agent was not served during the flood"

        # A settled execution no longer counts: one failure gives a room for exactly one more.
        assert (await a.do(C.FailExecution(execution_id="exec:a-0", generation=1, reason="done"))).ok
        again = await create_many(a, ["exec:a-after-0", "exec:a-after-1"])
        assert again == Counter({"APPLIED": 1, "agent_execution_limit": 1}), again
    finally:
        for client in (a, b):
            await client.close()
