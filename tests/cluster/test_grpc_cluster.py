"""Three ``waitgraph serve`` processes on loopback, driven over gRPC only.

The first tests share one cluster (started once for the module, killed at the end); the tests
that kill nodes start their own. Every process is killed at teardown whatever happened, and the
nodes' logs are printed when a test fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from waitgraph.proto.v1 import commands_pb2, operator_pb2, operator_pb2_grpc, types_pb2
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.effects import CancelRequested, SessionRenewed, VictimChosen
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.statemachine.outcome import Result
from waitgraph.wire import convert
from waitgraph.wire.metadata import CODE_KEY, LEADER_ID_KEY, LEADER_KEY, OUTCOME_KEY

from .grpc_harness import (
    FRONTS,
    Agent,
    GrpcCluster,
    GrpcNode,
    Operator,
    auth,
    front_args,
    leader_of,
    make_pki,
    refused,
    trailer,
    until,
)

LEASE_MS = 600_000


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcCluster]:
    cluster = GrpcCluster(
        tmp_path_factory.mktemp("grpc-shared"),
        extra_args=["--initial-mode", "auto", "--recovery-confirmation-window-ms", "300"],
    )
    with cluster:
        yield cluster


@pytest.fixture
def logs_on_failure(request: pytest.FixtureRequest) -> Iterator[list[GrpcCluster]]:
    clusters: list[GrpcCluster] = []
    try:
        yield clusters
    finally:
        report = getattr(request.node, "rep_call", None)
        for cluster in clusters:
            if report is not None and report.failed:
                print(cluster.logs())
            cluster.close()


@pytest.fixture
def cluster(shared: GrpcCluster, request: pytest.FixtureRequest) -> Iterator[GrpcCluster]:
    yield shared
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(shared.logs())


def own_cluster(tmp_path: Path, clusters: list[GrpcCluster], *args: str) -> GrpcCluster:
    cluster = GrpcCluster(tmp_path / f"c{len(clusters)}", extra_args=list(args))
    clusters.append(cluster)
    return cluster.__enter__()


async def digest_of(node: GrpcNode) -> tuple[str, int]:
    op = Operator(node)
    try:
        st = await op.status(fresh=True, digest=True)
        return st.state_digest, st.applied_index
    finally:
        await op.close()


async def quiet_digest(node: GrpcNode) -> str:
    """The state digest once two reads half a second apart agree (no loop is writing)."""

    async def stable() -> str | None:
        first, _ = await digest_of(node)
        await asyncio.sleep(0.5)
        second, _ = await digest_of(node)
        return first if first == second else None

    return await until(stable, 20, "a quiet state")


async def build_cycle(a: Agent, b: Agent, tag: str) -> None:
    """The first seed's cycle: A holds the browser and waits for B's review; B produces the review
    and waits for the browser. A has sent an email (a committed side effect), so B is the victim."""
    A, B = f"exec:A-{tag}", f"exec:B-{tag}"
    browser, review = f"resource:browser-{tag}", f"artifact:review-{tag}"
    steps: list[tuple[Agent, Any]] = [
        (a, C.JoinSession(agent_id="a", lease_ms=LEASE_MS)),
        (b, C.JoinSession(agent_id="b", lease_ms=LEASE_MS)),
        (a, C.CreateExecution(execution_id=A, run_id=f"run-a-{tag}", observed_cancel_generation=0)),
        (a, C.StartExecution(execution_id=A, generation=1, observed_cancel_generation=0)),
        (b, C.CreateExecution(execution_id=B, run_id=f"run-b-{tag}", checkpoint=True, observed_cancel_generation=0)),
        (b, C.StartExecution(execution_id=B, generation=1, observed_cancel_generation=0)),
        (a, C.CreateTarget(target_id=browser)),
        (a, C.CreateTarget(target_id=review)),
        (a, C.Acquire(target_id=browser, execution_id=A, generation=1, observed_epoch=0)),
        (b, C.DeclareSatisfier(target_id=review, target_generation=1, satisfier_id=B, satisfier_generation=1)),
        (a, C.RecordSideEffect(execution_id=A, generation=1, effect_id="email-1", outcome=EffectOutcome.COMMITTED)),
        (a, C.RegisterWait(waiter_id=A, waiter_generation=1, target_id=review, target_generation=1, reason="review")),
        (b, C.RegisterWait(waiter_id=B, waiter_generation=1, target_id=browser, target_generation=1, reason="browser")),
    ]
    for i, (agent, cmd) in enumerate(steps):
        out = await agent.do(cmd, f"{tag}-{i}")
        assert out.result is Result.APPLIED, (cmd, out)


class Collector:
    """Reads a WatchEvents stream in the background; events as core values, in order."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.started: Any = None
        self.events: list[tuple[int, Any]] = []
        self.error: BaseException | None = None
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            async for msg in self.call:
                body = msg.WhichOneof("body")
                if body == "started":
                    self.started = msg.started
                elif body == "event":
                    self.events.append((msg.event.cursor, convert.effect_from_proto(msg.event.effect)))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.error = exc

    async def wait_started(self) -> Any:
        return await until(self._started, 10, "the stream to start")

    async def _started(self) -> Any:
        if self.error:
            raise self.error
        return self.started

    async def wait_for(self, predicate: Any, timeout_s: float, what: str) -> Any:
        async def look() -> Any:
            if self.error:
                raise self.error
            return next((fx for _, fx in self.events if predicate(fx)), None)

        return await until(look, timeout_s, what)

    async def close(self) -> None:
        self.call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


# -- the shared cluster --------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_health_serving_and_reflection(cluster: GrpcCluster) -> None:
    await leader_of(cluster)
    for node in cluster.nodes:
        async with node.channel() as channel:
            health = health_pb2_grpc.HealthStub(channel)

            async def serving(h: Any = health) -> bool:
                reply = await h.Check(health_pb2.HealthCheckRequest(service="waitgraph.v1.AgentService"), timeout=2)
                return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

            await until(serving, 15, f"{node.name} SERVING")
            # Watch: what Envoy and gRPC's own client-side health checking use. The handler
            # writes with context.write (not a generator): the metrics interceptor must pass it.
            for service in ("", "waitgraph.v1.AgentService"):
                watch = health.Watch(health_pb2.HealthCheckRequest(service=service), timeout=10)
                first = await watch.read()
                watch.cancel()
                assert first.status == health_pb2.HealthCheckResponse.SERVING, (node.name, service, first)
    with grpc.insecure_channel(cluster.nodes[0].grpc) as channel:
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {"waitgraph.v1.AgentService", "waitgraph.v1.OperatorService", "grpc.health.v1.Health"} <= services


@pytest.mark.timeout(60)
async def test_bad_requests_are_refused_and_change_nothing(cluster: GrpcCluster) -> None:
    leader = await leader_of(cluster)
    c = Agent(leader, "c")
    a = Agent(leader, "a")
    op = Operator(leader)
    try:
        assert (await c.do(C.JoinSession(agent_id="c", lease_ms=LEASE_MS))).ok
        assert (await a.do(C.JoinSession(agent_id="a", lease_ms=LEASE_MS))).ok
        out = await c.do(C.CreateExecution(execution_id="exec:C-bad", run_id="run-c-bad", observed_cancel_generation=0))
        assert out.ok, out
        before = await quiet_digest(leader)
        stub = c.stub

        def wait_req(**fields: Any) -> Any:
            base = dict(request_id="r-bad", waiter_id="exec:C-bad", waiter_generation=1, target_id="exec:C-bad")
            return commands_pb2.RegisterWaitRequest(**{**base, "target_generation": 1, "reason": "x", **fields})

        # malformed ids, including a free-text target: refused by the core, nothing applied
        err = await refused(
            c.do(C.CreateExecution(execution_id="exec:has space", run_id="r", observed_cancel_generation=0))
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a resolvable id" in err.details()
        assert trailer(err, CODE_KEY) == "unresolvable_id"
        outcome = types_pb2.Outcome.FromString(trailer(err, OUTCOME_KEY))
        assert outcome.result == types_pb2.RESULT_REJECTED and outcome.status == "INVALID_ARGUMENT"
        err = await refused(stub.RegisterWait(wait_req(target_id="the security agent"), metadata=c.md))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "target_id" in err.details()
        # an enum number the server does not know, a required field left out: never proposed
        err = await refused(stub.RegisterWait(wait_req(cancel_mode=99), metadata=c.md))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "RegisterWait.cancel_mode has the unknown value 99" in err.details()
        err = await refused(stub.Acquire(commands_pb2.AcquireRequest(target_id="resource:x"), metadata=c.md))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "Acquire.execution_id is required" in err.details()
        # oversize: over the codec's limits -> INVALID_ARGUMENT; over gRPC's own -> RESOURCE_EXHAUSTED
        err = await refused(stub.RegisterWait(wait_req(reason="x" * 2000), metadata=c.md))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "limit is 1024" in err.details()
        err = await refused(stub.RegisterWait(wait_req(reason="x" * 70_000), metadata=c.md))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "limit is 65536" in err.details()
        err = await refused(stub.RegisterWait(wait_req(reason="x" * 300_000), metadata=c.md))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # credentials
        err = await refused(stub.Heartbeat(commands_pb2.HeartbeatRequest(request_id="h")))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        bogus = (("authorization", "Bearer not-a-real-token-at-all"),)
        err = await refused(stub.Heartbeat(commands_pb2.HeartbeatRequest(request_id="h"), metadata=bogus))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED and err.details() == "unknown token"
        err = await refused(op.stub.Status(operator_pb2.StatusRequest(), metadata=auth("old")))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED and "expired" in err.details()
        # roles: an agent on the operator service, an operator on the agent service and on an admin RPC
        err = await refused(op.stub.Status(operator_pb2.StatusRequest(), metadata=c.md))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        err = await refused(stub.Heartbeat(commands_pb2.HeartbeatRequest(request_id="h", agent_id="c"), metadata=op.md))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        set_mode = commands_pb2.SetModeRequest(request_id="m", mode=types_pb2.ROLLOUT_MODE_SHADOW)
        err = await refused(op.stub.SetMode(set_mode, metadata=op.md))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "admin" in err.details()
        # an agent acting on another agent's execution, or as another agent: the core's PERMISSION_DENIED
        err = await refused(
            a.do(C.StartExecution(execution_id="exec:C-bad", generation=1, observed_cancel_generation=0))
        )
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED and trailer(err, CODE_KEY) == "not_owner"
        err = await refused(a.do(C.Heartbeat(agent_id="c")))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        err = await refused(_first_message(c.watch(agent_id="a")))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        # stale generation -> FAILED_PRECONDITION; lost CAS (resource held) -> ABORTED: shown on
        # requests that change nothing either
        err = await refused(
            c.do(C.StartExecution(execution_id="exec:C-bad", generation=0, observed_cancel_generation=0))
        )
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and trailer(err, CODE_KEY) == "stale_generation"
        after = await quiet_digest(leader)
        assert after == before
    finally:
        for client in (a, c, op):
            await client.close()


@pytest.mark.timeout(60)
async def test_cycle_is_detected_voted_committed_and_the_victim_is_told(cluster: GrpcCluster) -> None:
    """End to end, no operator step: registration over gRPC (agent b through a follower, which
    forwards), detection on the leader, votes from the nodes, commit, CancelRequested on the
    victim's stream; the victim acknowledges and the cancellation converges."""
    leader = await leader_of(cluster)
    follower = next(n for n in cluster.nodes if n is not leader)
    a, b = Agent(leader, "a"), Agent(follower, "b")
    op = Operator(leader)
    stream = None
    try:
        joined = await b.do(C.JoinSession(agent_id="b", lease_ms=LEASE_MS), "b-join")  # through the follower
        assert joined.ok
        again = await b.do(C.JoinSession(agent_id="b", lease_ms=LEASE_MS), "b-join")  # a retry: recorded outcome
        assert again.duplicate and again.effects == joined.effects
        stream = Collector(b.watch())
        await stream.wait_started()
        await build_cycle(a, b, "e2e")
        victim = await stream.wait_for(lambda fx: isinstance(fx, VictimChosen), 20, "VictimChosen for agent b")
        assert victim.execution_id == "exec:B-e2e" and victim.decision_kind == "VICTIM"
        cancel = await stream.wait_for(
            lambda fx: isinstance(fx, CancelRequested) and fx.execution_id == "exec:B-e2e", 10, "CancelRequested"
        )
        decisions = await op.decisions(victim.digest, fresh=True)
        assert len(decisions) == 1 and decisions[0].winner_id == "exec:B-e2e"
        assert decisions[0].kind == types_pb2.DECISION_KIND_VICTIM and decisions[0].epoch >= 1
        ack = await b.do(
            C.AckCancel(
                execution_id="exec:B-e2e",
                generation=cancel.generation,
                cancel_generation=cancel.cancel_generation,
                side_effects=EffectOutcome.NONE,
            )
        )
        assert ack.ok, ack
        cycles = await op.stub.Cycles(operator_pb2.CyclesRequest(fresh=True, include_closed=True), metadata=op.md)
        assert not [c for c in cycles.cycles if "exec:B-e2e" in [m.execution_id for m in c.members]]
        assert any(
            p.digest == victim.digest and p.status == types_pb2.PROPOSAL_STATUS_COMMITTED for p in cycles.proposals
        )
        voters = {v for p in cycles.proposals if p.digest == victim.digest for v in p.approvals}
        assert len(voters) >= 2 and voters <= {"node:n1", "node:n2", "node:n3"}
        # every replica records the same single decision
        for node in cluster.nodes:
            other = Operator(node)
            try:
                assert len(await until(lambda o=other: o.decisions(victim.digest), 10, "the decision")) == 1
            finally:
                await other.close()
    finally:
        if stream is not None:
            await stream.close()
        for client in (a, b, op):
            await client.close()


@pytest.mark.timeout(60)
async def test_watch_resumes_on_another_node_without_loss_or_duplicates(cluster: GrpcCluster) -> None:
    nodes = cluster.nodes
    c1, c2 = Agent(nodes[0], "c"), Agent(nodes[1], "c")
    try:
        assert (await c1.do(C.JoinSession(agent_id="c", lease_ms=LEASE_MS))).ok
        first = Collector(c1.watch(kinds=("SessionRenewed",)))
        started = await first.wait_started()
        # Rejoining an active session renews it through the log (a heartbeat no longer does).
        for _ in range(3):
            assert (await c1.do(C.JoinSession(agent_id="c", lease_ms=LEASE_MS))).ok
        await until(lambda: _count(first, 3), 10, "three events")
        await first.close()
        seen = first.events[:2]  # the client processed two of them, then lost its connection
        for _ in range(2):
            assert (await c1.do(C.JoinSession(agent_id="c", lease_ms=LEASE_MS))).ok
        second = Collector(c2.watch(after=seen[-1][0], kinds=("SessionRenewed",)))
        assert (await second.wait_started()).cursor == seen[-1][0]
        await until(lambda: _count(second, 3), 10, "the three later events on the other node")
        await asyncio.sleep(0.3)
        await second.close()
        events = seen + second.events
        cursors = [cur for cur, _ in events]
        assert len(events) == 5 and cursors == sorted(set(cursors)) and cursors[0] > started.cursor
        assert all(isinstance(fx, SessionRenewed) and fx.agent_id == "c" for _, fx in events)
        expiries = [fx.expires_at_ms for _, fx in events]
        assert expiries == sorted(expiries)
        # the same cursor numbers every event on every node
        assert first.events[2][0] == second.events[0][0]
        # a cursor from before the node's horizon: OUT_OF_RANGE, resync from the state
        err = await refused(_first_message(c2.watch(after=1)))
        assert err.code() == grpc.StatusCode.OUT_OF_RANGE and "re-read your state" in err.details()
        err = await refused(_first_message(c2.watch(kinds=("NoSuchEffect",))))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await c1.close()
        await c2.close()


async def _count(collector: Collector, n: int) -> bool:
    if collector.error:
        raise collector.error
    return len(collector.events) >= n


async def _first_message(call: Any) -> Any:
    async for msg in call:
        return msg
    return None


# -- clusters of their own -------------------------------------------------------------------------------


@pytest.mark.timeout(90)
async def test_leader_killed_during_recovery_yields_one_decision_and_nodes_catch_up(
    tmp_path: Path, logs_on_failure: list[GrpcCluster]
) -> None:
    cluster = own_cluster(
        tmp_path, logs_on_failure, "--initial-mode", "auto", "--recovery-confirmation-window-ms", "2000"
    )
    leader = await leader_of(cluster)
    a, b, op = Agent(leader, "a"), Agent(leader, "b"), Operator(leader)
    try:
        await build_cycle(a, b, "kill")

        async def open_proposal() -> Any:
            reply = await op.stub.Cycles(operator_pb2.CyclesRequest(), metadata=op.md, timeout=5)
            return next((p for p in reply.proposals if p.status == types_pb2.PROPOSAL_STATUS_OPEN), None)

        proposal = await until(open_proposal, 20, "an open recovery proposal")
        digest = proposal.digest
    finally:
        for client in (a, b, op):
            await client.close()
    leader.kill()  # inside the confirmation window: the proposal is open, not committed
    killed_at_ms = int(time.time() * 1000)
    new_leader = await leader_of(cluster, 30)
    assert new_leader is not leader
    op = Operator(new_leader)
    try:
        decisions = await until(lambda: op.decisions(digest, fresh=True), 30, "the decision after failover")
        assert len(decisions) == 1 and decisions[0].winner_id == "exec:B-kill"
        assert decisions[0].at_ms >= killed_at_ms  # committed by the new leader, after the kill
        assert proposal.proposer == f"node:{leader.name}"
        # a write while the old leader is down, then it comes back as a follower and catches up
        a2 = Agent(new_leader, "a")
        try:
            assert (await a2.do(C.JoinSession(agent_id="a", lease_ms=LEASE_MS))).ok
        finally:
            await a2.close()
    finally:
        await op.close()
    leader.start()
    follower = next(n for n in cluster.live() if n not in (leader, new_leader))
    follower.kill()  # and a follower restart too, with writes in between
    a3 = Agent(new_leader, "a")
    try:
        for _ in range(3):
            assert (await a3.do(C.JoinSession(agent_id="a", lease_ms=LEASE_MS))).ok
    finally:
        await a3.close()
    follower.start()

    async def converged() -> bool:
        digests = {await digest_of(n) for n in cluster.nodes}
        return len({d for d, _ in digests}) == 1

    await until(converged, 30, "identical digests on all three nodes")
    for node in cluster.nodes:
        other = Operator(node)
        try:
            assert len(await until(lambda o=other: o.decisions(digest), 10, f"the decision on {node.name}")) == 1
        finally:
            await other.close()


@pytest.mark.timeout(90)
async def test_follower_redirects_then_no_quorum_is_not_serving_and_sigterm_stops(
    tmp_path: Path, logs_on_failure: list[GrpcCluster]
) -> None:
    cluster = own_cluster(tmp_path, logs_on_failure, "--no-forward-writes", "--shutdown-grace-s", "1")
    leader = await leader_of(cluster)
    followers = [n for n in cluster.nodes if n is not leader]
    agent = Agent(followers[0], "a")
    try:
        err = await refused(agent.do(C.JoinSession(agent_id="a", lease_ms=LEASE_MS)))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert trailer(err, LEADER_KEY) == leader.grpc and trailer(err, LEADER_ID_KEY) == leader.name
    finally:
        await agent.close()
    agent = Agent(leader, "a")
    try:
        assert (await agent.do(C.JoinSession(agent_id="a", lease_ms=LEASE_MS))).ok  # the hint works
    finally:
        await agent.close()
    survivor = followers[1]
    leader.kill()
    followers[0].kill()
    async with survivor.channel() as channel:
        health = health_pb2_grpc.HealthStub(channel)

        async def not_serving() -> bool:
            reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
            return bool(reply.status == health_pb2.HealthCheckResponse.NOT_SERVING)

        await until(not_serving, 20, "NOT_SERVING without a quorum")
    agent = Agent(survivor, "a")
    try:
        err = await refused(agent.do(C.Heartbeat(agent_id="a"), timeout_s=15))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await agent.close()
    started = time.monotonic()
    assert survivor.terminate(15) == 0
    assert time.monotonic() - started < 10


@pytest.mark.timeout(60)
@pytest.mark.parametrize("front", FRONTS)
async def test_tls_with_client_certificates(tmp_path: Path, logs_on_failure: list[GrpcCluster], front: str) -> None:
    """The same TLS, whichever serves the port: the native front (cluster/front) or Python's gRPC."""
    pki = make_pki(tmp_path)
    tls = ["--tls-cert", str(pki["server"]), "--tls-key", str(pki["server-key"]), "--tls-client-ca", str(pki["ca"])]
    cluster = GrpcCluster(tmp_path / "tls", size=1, extra_args=[*tls, *front_args(front)])
    logs_on_failure.append(cluster)
    cluster.__enter__()
    node = cluster.nodes[0]
    ca = pki["ca"].read_bytes()
    with_cert = grpc.ssl_channel_credentials(ca, pki["client-key"].read_bytes(), pki["client"].read_bytes())
    async with grpc.aio.secure_channel(node.grpc, with_cert) as channel:
        stub = operator_pb2_grpc.OperatorServiceStub(channel)

        async def leader() -> Any:
            st = await stub.Status(operator_pb2.StatusRequest(), metadata=auth("ops"), timeout=5)
            return st if st.role == "leader" else None

        st = await until(leader, 20, "the single node to lead")
        assert st.node_id == "n1" and not st.recovery_configured  # one node alone cannot out-vote a rollback
    async with grpc.aio.secure_channel(node.grpc, grpc.ssl_channel_credentials(ca)) as channel:
        err = await refused(
            operator_pb2_grpc.OperatorServiceStub(channel).Status(operator_pb2.StatusRequest(), timeout=5)
        )
        assert err.code() == grpc.StatusCode.UNAVAILABLE  # the handshake fails without a client certificate
    async with node.channel() as channel:  # plaintext against a TLS port
        err = await refused(
            operator_pb2_grpc.OperatorServiceStub(channel).Status(operator_pb2.StatusRequest(), timeout=5)
        )
        assert err.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.timeout(60)
async def test_an_operator_vote_completes_the_quorum(tmp_path: Path, logs_on_failure: list[GrpcCluster]) -> None:
    """One node and one operator as voters, quorum 2: the node's own vote is not enough; the
    operator's Vote (VoteRecovery with operator:ops as actor) lets the leader commit."""
    voters = ["--recovery-voters", "node:n1,operator:ops", "--recovery-quorum", "2", "--recovery-max-rollback", "1"]
    cluster = GrpcCluster(
        tmp_path / "vote",
        size=1,
        extra_args=[*voters, "--initial-mode", "auto", "--recovery-confirmation-window-ms", "100"],
    )
    logs_on_failure.append(cluster)
    cluster.__enter__()
    node = await leader_of(cluster)
    a, b, op = Agent(node, "a"), Agent(node, "b"), Operator(node)
    try:
        await build_cycle(a, b, "vote")

        async def voted_by_node() -> Any:
            reply = await op.stub.Cycles(operator_pb2.CyclesRequest(), metadata=op.md, timeout=5)
            return next((p for p in reply.proposals if "node:n1" in p.approvals), None)

        proposal = await until(voted_by_node, 20, "the node's own vote")
        await asyncio.sleep(0.5)  # past the confirmation window: still no decision without the quorum
        assert await op.decisions(proposal.digest) == []
        vote = commands_pb2.VoteRequest(request_id="ops-vote-1", digest=proposal.digest)
        out = convert.outcome_from_proto(await op.stub.Vote(vote, metadata=op.md))
        assert out.ok and out.effects[0].voter == "operator:ops" and out.effects[0].approvals == 2
        decisions = await until(lambda: op.decisions(proposal.digest), 10, "the decision")
        assert len(decisions) == 1 and decisions[0].winner_id == "exec:B-vote"
    finally:
        for client in (a, b, op):
            await client.close()
