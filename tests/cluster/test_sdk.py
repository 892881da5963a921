"""The Python SDK (cluster/sdk) against three real ``waitgraph serve`` processes.

The first tests share one cluster (auto mode, a 300 ms confirmation window); the ones that kill
nodes start their own. Every process is killed at teardown, and the nodes' logs are printed when a
test fails.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from waitgraph.proto.v1 import types_pb2
from waitgraph.sdk import (
    TLS,
    CancellationRequested,
    Client,
    Conflict,
    DeadlockVictim,
    InvalidArgument,
    OperatorClient,
    PermissionDenied,
    SyncClient,
    Unavailable,
    WouldDeadlock,
)
from waitgraph.statemachine.effects import VictimChosen
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.statemachine.recovery_state import ProposalStatus
from waitgraph.wire import convert

from .grpc_harness import TOKENS, GrpcCluster, GrpcNode, leader_of, make_pki, until

AUTO = ["--initial-mode", "auto", "--recovery-confirmation-window-ms", "300"]


async def settled(cluster: GrpcCluster) -> GrpcNode:
    """The leader, once every live node has applied the recovery bootstrap: a node that has just
    started numbers its events from its first apply on (cluster/node/events.py), so a stream opened
    before that may find its cursor expired at once."""
    leader = await leader_of(cluster)
    for node in cluster.live():
        async with Client([node.grpc], TOKENS["ops"]) as one:

            async def configured(one: Client = one) -> bool:
                return bool((await one.status()).recovery_configured)

            await until(configured, 20, f"{node.name} to apply the recovery bootstrap")
    return leader


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcCluster]:
    with GrpcCluster(tmp_path_factory.mktemp("sdk-shared"), extra_args=AUTO) as cluster:
        asyncio.run(settled(cluster))
        yield cluster


@pytest.fixture
def cluster(shared: GrpcCluster, request: pytest.FixtureRequest) -> Iterator[GrpcCluster]:
    yield shared
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(shared.logs())


@pytest.fixture
def own(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[GrpcCluster]]:
    clusters: list[GrpcCluster] = []
    try:
        yield clusters
    finally:
        report = getattr(request.node, "rep_call", None)
        for c in clusters:
            if report is not None and report.failed:
                print(c.logs())
            c.close()


async def start_own(tmp_path: Path, clusters: list[GrpcCluster], *args: str) -> GrpcCluster:
    c = GrpcCluster(tmp_path / f"c{len(clusters)}", extra_args=list(args))
    clusters.append(c)
    c.__enter__()
    await settled(c)
    return c


def endpoints(cluster: GrpcCluster) -> list[str]:
    return [n.grpc for n in cluster.nodes]


def tag() -> str:
    return uuid.uuid4().hex[:8]


def client(cluster: GrpcCluster, name: str, **kw: Any) -> Any:
    """An agent's Client, or for ``ops``/``root`` an OperatorClient."""
    cls = OperatorClient if name in ("ops", "root") else Client
    return cls(endpoints(cluster), TOKENS[name], **kw)


async def waits_of(op: Client, execution_id: str) -> list[Any]:
    graph = await op.graph(fresh=True)
    return [w for w in graph.waits if w.waiter_id == execution_id]


async def holders_of(op: Client, target_id: str) -> list[str]:
    graph = await op.graph(fresh=True)
    return [h.execution_id for t in graph.targets if t.target_id == target_id for h in t.holders]


async def status_of(op: Client, execution_id: str) -> tuple[int, int]:
    graph = await op.graph(fresh=True)
    ex = next(e for e in graph.executions if e.execution_id == execution_id)
    return ex.status, ex.generation


# -- the first seed's cycle ------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_browser_review_cycle_the_victim_raises_and_the_other_proceeds(cluster: GrpcCluster) -> None:
    """A holds the browser and waits for B's review; B needs the browser. Two sessions in two tasks:
    B's blocked ``holding`` raises DeadlockVictim with the decision, B retries under the new epoch
    and publishes the review, A's wait resolves and A finishes."""
    t = tag()
    A, B = f"exec:A-{t}", f"exec:B-{t}"
    browser, review = f"resource:browser-{t}", f"artifact:review-{t}"
    async with client(cluster, "a") as ca, client(cluster, "b") as cb, client(cluster, "ops") as op:
        async with ca.session("a") as sa, cb.session("b") as sb:
            a_holds = asyncio.Event()

            async def agent_a() -> tuple[str, int | None]:
                await sa.ensure_target(browser)
                await sa.ensure_target(review)
                async with sa.execution(A, run_id=f"run-a-{t}") as ex:
                    await ex.record_side_effect("email-1", EffectOutcome.COMMITTED)
                    async with ex.holding(browser) as h:
                        a_holds.set()
                        async with sa.waiting_for(review) as w:  # the session's current execution
                            assert w.registered
                            reason = await w.resolved(timeout_s=40)
                    return reason, h.lease

            async def agent_b() -> tuple[DeadlockVictim, int, int | None]:
                async with sb.execution(B, run_id=f"run-b-{t}", checkpoint=True) as ex:
                    await ex.produces(review)
                    await a_holds.wait()
                    with pytest.raises(DeadlockVictim) as caught:
                        async with ex.holding(browser):
                            raise AssertionError("B must never get the browser in generation 1")
                    generation = await ex.retry()
                    await ex.produces(review)  # from its checkpoint, without the browser this time
                    await sb.produce(review)
                    async with ex.holding(browser) as h:
                        lease = h.lease
                    return caught.value, generation, lease

            (reason, a_lease), (victim, generation, b_lease) = await asyncio.wait_for(
                asyncio.gather(agent_a(), agent_b()), 50
            )
        assert reason == "target_produced" and a_lease == 1
        d = victim.decision
        assert d.execution_id == B and d.generation == 1 and d.role == "victim" and d.kind == "VICTIM"
        assert d.decision_id is not None and d.epoch is not None and d.epoch >= 1 and d.digest
        assert sb.observed_epoch >= d.epoch  # what B's next Acquire presented
        assert generation == 2 and b_lease is not None and b_lease > 1
        # the decision as recorded: A has a committed side effect, B a checkpoint
        record = await op.decision(d.decision_id, fresh=True)
        assert record is not None and record.winner_id == B and record.epoch == d.epoch
        scores = {s.execution_id: s for s in record.scores or ()}
        assert scores[A].external_side_effects and scores[B].checkpoint
        assert await status_of(op, A) == (types_pb2.EXEC_STATUS_COMPLETED, 1)
        assert await status_of(op, B) == (types_pb2.EXEC_STATUS_COMPLETED, 2)
        assert await holders_of(op, browser) == []


# -- waits and holdings ------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_waiting_for_closes_its_edge_on_exception_and_on_cancellation(cluster: GrpcCluster) -> None:
    t = tag()
    X, review = f"exec:X-{t}", f"artifact:never-{t}"
    async with client(cluster, "a") as ca, client(cluster, "ops") as op, ca.session("a") as sa:
        await sa.ensure_target(review)  # no producer: nothing will ever resolve it
        async with sa.execution(X) as ex:
            with pytest.raises(RuntimeError, match="boom"):
                async with ex.waiting_for(review) as w:
                    assert [e.edge_id for e in await waits_of(op, X)] == [w.edge_id]
                    raise RuntimeError("boom")
            assert await waits_of(op, X) == []

            entered = asyncio.Event()

            async def blocked() -> None:
                async with ex.waiting_for(review) as w:
                    entered.set()
                    await w.resolved()

            task = asyncio.get_running_loop().create_task(blocked())
            await asyncio.wait_for(entered.wait(), 10)
            assert len(await waits_of(op, X)) == 1
            assert (await status_of(op, X))[0] == types_pb2.EXEC_STATUS_WAITING
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await waits_of(op, X) == []
            async with ex.waiting_for(review) as w:
                assert w.version == 3  # a new version per registration of the same edge
            assert await waits_of(op, X) == []
        assert await status_of(op, X) == (types_pb2.EXEC_STATUS_COMPLETED, 1)


@pytest.mark.timeout(60)
async def test_holding_releases_on_exit_and_a_contender_waits_registered_until_then(cluster: GrpcCluster) -> None:
    t = tag()
    A, B, C, lock = f"exec:HA-{t}", f"exec:HB-{t}", f"exec:HC-{t}", f"resource:lock-{t}"
    async with (
        client(cluster, "a") as ca,
        client(cluster, "b") as cb,
        client(cluster, "ops") as op,
        ca.session("a") as sa,
        cb.session("b") as sb,
    ):
        await sa.ensure_target(lock)
        async with sa.execution(A) as ea, sb.execution(B) as eb:
            assert sa.current() is ea and sb.current() is eb  # each session its own current execution
            with pytest.raises(RuntimeError):
                async with ea.holding(lock) as h:
                    assert h.lease == 1 and await holders_of(op, lock) == [A]
                    raise RuntimeError("released anyway")
            assert await holders_of(op, lock) == []
            async with ea.holding(lock) as h:
                with pytest.raises(Conflict) as conflict:
                    async with eb.holding(lock, wait=False):
                        pass
                assert conflict.value.code == "target_held" and conflict.value.fields["holder"] == A
                assert conflict.value.field_int("lease") == h.lease

                async def contender(ex: Any, priority: int) -> tuple[int | None, bool, int]:
                    async with ex.holding(lock, priority=priority) as held:
                        return held.lease, held.handed_over, held.waits

                task = asyncio.get_running_loop().create_task(contender(eb, 0))

                async def registered() -> list[Any]:
                    return await waits_of(op, B)

                (edge,) = await until(registered, 10, "B's registered wait on the lock")
                assert edge.target_id == lock and edge.target_generation == h.lease
                assert edge.HasField("queue_position") and edge.queue_position == 0
                # C queues after B with a higher priority: it goes ahead of B.
                async with sb.execution(C) as ec:
                    task_c = asyncio.get_running_loop().create_task(contender(ec, 5))

                    async def registered_c() -> list[Any]:
                        return await waits_of(op, C)

                    (edge_c,) = await until(registered_c, 10, "C's registered wait on the lock")
                    assert edge_c.queue_position == 0
                    ((edge,),) = [await waits_of(op, B)]
                    assert edge.queue_position == 1
                    assert not task.done() and not task_c.done()
                    with pytest.raises(Conflict):
                        await eb.acquire(lock)  # the queue is not jumped by acquiring
                    await ea.release(lock)  # (the block's own exit then releases nothing: a no-op)
                    # A's release handed the lock to C (the head) in the same apply: C holds it
                    # without acquiring, and its exit hands it on to B the same way.
                    lease_c, handed_c, waits_c = await asyncio.wait_for(task_c, 10)
                lease_b, handed_b, waits_b = await asyncio.wait_for(task, 10)
                assert (lease_c, handed_c, waits_c) == (h.lease + 1, True, 1)
                assert (lease_b, handed_b, waits_b) == (h.lease + 2, True, 1)
            assert await holders_of(op, lock) == [] and await waits_of(op, B) == []


@pytest.mark.timeout(60)
async def test_a_holdings_ttl_is_the_clusters_and_covers_a_hand_off(cluster: GrpcCluster) -> None:
    """holding(ttl_s=) bounds the lease in the cluster: it ends at its TTL with nobody releasing
    it, the next queued waiter is handed it with its own TTL, and the block's late exit is a no-op."""
    t = tag()
    A, B, lock = f"exec:TA-{t}", f"exec:TB-{t}", f"resource:ttl-{t}"
    async with (
        client(cluster, "a") as ca,
        client(cluster, "b") as cb,
        client(cluster, "ops") as op,
        ca.session("a") as sa,
        cb.session("b") as sb,
    ):
        await sa.ensure_target(lock)
        async with sa.execution(A) as ea, sb.execution(B) as eb:
            with pytest.raises(ValueError):
                await ea.acquire(lock, ttl_s=0)  # 0 s is no bound; None is "no TTL"
            async with ea.holding(lock, ttl_s=1.0) as h:
                assert h.lease == 1 and await holders_of(op, lock) == [A]

                async def contender() -> tuple[int | None, bool]:
                    async with eb.holding(lock, ttl_s=1.0, local_threshold_s=0) as held:
                        assert held.handed_over  # by A's TTL, not by A
                        await until(gone, 10, "B's lease to end at its own TTL")
                        return held.lease, held.handed_over

                async def gone() -> bool:
                    return B not in await holders_of(op, lock)

                lease_b, handed_b = await asyncio.wait_for(contender(), 20)
                assert (lease_b, handed_b) == (2, True)
            # both exits sent a Release after the TTL had acted: no-ops, nothing raised
            assert await holders_of(op, lock) == []


@pytest.mark.timeout(60)
async def test_a_short_wait_stays_local_unless_the_waiter_holds_a_lease(cluster: GrpcCluster) -> None:
    t = tag()
    X, doc, lock = f"exec:L-{t}", f"artifact:doc-{t}", f"resource:lease-{t}"
    async with (
        client(cluster, "c", local_wait_threshold_s=0.6) as cc,
        client(cluster, "ops") as op,
        cc.session("c") as sc,
    ):
        await sc.ensure_target(doc)
        await sc.ensure_target(lock)
        async with sc.execution(X) as ex:
            async with ex.waiting_for(doc) as w:
                await asyncio.sleep(0.1)  # a short wait: kept local, never registered
                assert not w.registered and await waits_of(op, X) == []
            async with ex.waiting_for(doc) as w:
                await asyncio.sleep(1.0)  # past the threshold: registered
                assert w.registered and len(await waits_of(op, X)) == 1
            assert await waits_of(op, X) == []
            async with ex.holding(lock), ex.waiting_for(doc) as w:  # holds a lease: registers before blocking
                assert w.registered and len(await waits_of(op, X)) == 1
            async with ex.waiting_for(doc, local_threshold_s=0) as w:
                assert w.registered


@pytest.mark.timeout(60)
async def test_a_session_that_refuses_deadlocks_gets_the_path_and_registers_nothing(cluster: GrpcCluster) -> None:
    """``refuse_deadlock`` as the session's default: the closing wait is refused on entry with
    its path (registered at once, though the session keeps short waits local), nothing of it is
    in the graph; a wait that closes nothing is registered; a call may opt out."""
    t = tag()
    X, Y, doc = f"exec:P-{t}", f"exec:Q-{t}", f"artifact:doc-{t}"
    async with (
        client(cluster, "c", local_wait_threshold_s=5) as cc,
        client(cluster, "ops") as op,
        cc.session("c", refuse_deadlock=True) as sc,
    ):
        await sc.ensure_target(doc)
        async with (
            sc.execution(X) as ex,
            sc.execution(Y, run_id=f"run-q-{t}") as ey,
            ey.waiting_for(X) as wy,  # closes nothing: registered, at once
        ):
            assert wy.registered and len(await waits_of(op, Y)) == 1
            with pytest.raises(WouldDeadlock) as refused:
                async with ex.waiting_for(Y):
                    raise AssertionError("refused on entry")
            assert refused.value.code == "would_deadlock"
            assert refused.value.path == (X, Y, X)
            assert await waits_of(op, X) == []
            async with ex.waiting_for(doc) as w:  # nobody produces it yet: no cycle
                assert w.registered
            async with ex.waiting_for(doc, refuse_deadlock=False) as w:  # opted out: local
                assert not w.registered


@pytest.mark.timeout(60)
async def test_typed_errors_and_a_cancelled_run_interrupts_its_waiter(cluster: GrpcCluster) -> None:
    t = tag()
    X, Y, doc = f"exec:E-{t}", f"exec:F-{t}", f"artifact:doc-{t}"
    async with (
        client(cluster, "a") as ca,
        client(cluster, "b") as cb,
        client(cluster, "ops") as op,
        ca.session("a") as sa,
        cb.session("b") as sb,
    ):
        with pytest.raises(InvalidArgument) as bad:
            await sa.ensure_target("the security agent")
        assert bad.value.code == "unresolvable_id" and bad.value.status is grpc.StatusCode.INVALID_ARGUMENT
        await sa.ensure_target(doc)
        entered = asyncio.Event()

        async def waiter() -> None:
            async with sa.execution(X, run_id=f"run-{t}") as ex, ex.waiting_for(doc) as w:
                entered.set()
                await w.resolved()

        task = asyncio.get_running_loop().create_task(waiter())
        await asyncio.wait_for(entered.wait(), 10)
        other = sb.handle(X, run_id=f"run-{t}")
        with pytest.raises(PermissionDenied) as denied:
            await other.complete()
        assert denied.value.code == "not_owner"
        async with sb.execution(Y):
            pass
        await sa.cancel_run(f"run-{t}", "the user gave up")
        with pytest.raises(CancellationRequested) as stop:
            await asyncio.wait_for(task, 20)
        assert stop.value.execution_id == X and stop.value.cancel_generation == 1
        assert sa.cancel_generations[f"run-{t}"] == 1
        assert await status_of(op, X) == (types_pb2.EXEC_STATUS_CANCELLED, 1)  # acknowledged on exit
        graph = await op.graph(run_id=f"run-{t}", fresh=True)
        assert graph.runs[0].cancel_state == types_pb2.CANCEL_STATE_CANCELLED_STABLE


# -- delegation ------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_delegate_registers_parent_waits_for_child_and_the_approval_cycle_is_detected(
    cluster: GrpcCluster,
) -> None:
    """The first seed's supervisor: it delegates synchronously, the subtask then asks it for an
    approval. The cycle is visible (parent -> child -> approval -> parent), detected, and broken
    by rolling back the subtask, which retries without the synchronous approval and completes."""
    t = tag()
    S, sub, plan = f"exec:S-{t}", f"exec:sub-{t}", f"approval:plan-{t}"
    async with client(cluster, "a") as ca, client(cluster, "b") as cb, client(cluster, "ops") as op:
        async with ca.session("a") as sa, cb.session("b") as sb:

            async def subtask() -> DeadlockVictim:
                assignment = await sb.next_assignment(timeout_s=20)
                assert assignment.execution_id == sub and assignment.run_id == f"run-{t}"
                async with sb.accept(assignment) as ex:
                    with pytest.raises(DeadlockVictim) as caught:
                        async with ex.waiting_for(plan) as w:
                            await w.resolved()
                    await ex.retry()  # generation 2 asks for the approval asynchronously instead
                return caught.value

            child = asyncio.get_running_loop().create_task(subtask())
            async with sa.execution(S, run_id=f"run-{t}", priority=5, unique_evidence=True) as ex:
                await ex.provides(plan)
                async with ex.delegate("b", execution_id=sub, checkpoint=True) as d:
                    (edge,) = await waits_of(op, S)
                    assert edge.target_id == sub and edge.target_generation == 1 and "delegated to b" in edge.reason
                    outcome = await d.result(timeout_s=40)
                    assert d.child_generation == 2
                await sa.decide(plan)  # the approval, now as an asynchronous event
            assert outcome == "completed"
            victim = await asyncio.wait_for(child, 10)
        assert victim.decision.execution_id == sub and victim.decision.role == "victim"
        cycles = await op.cycles(include_closed=True, fresh=True)
        (proposal,) = [p for p in cycles.proposals if p.digest == victim.decision.digest]
        assert {m.execution_id for m in proposal.members} == {S, sub}
        assert proposal.status is ProposalStatus.COMMITTED
        assert await status_of(op, S) == (types_pb2.EXEC_STATUS_COMPLETED, 1)
        assert await status_of(op, sub) == (types_pb2.EXEC_STATUS_COMPLETED, 2)


# -- the sync twin ---------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_the_sync_twin_breaks_the_browser_review_cycle(shared: GrpcCluster) -> None:
    import threading

    t = tag()
    A, B = f"exec:SA-{t}", f"exec:SB-{t}"
    browser, review = f"resource:sbrowser-{t}", f"artifact:sreview-{t}"
    eps = endpoints(shared)
    a_holds = threading.Event()
    results: dict[str, Any] = {}

    def agent_a() -> None:
        with SyncClient(eps, TOKENS["a"]) as ca, ca.session("a") as sa:
            sa.ensure_target(browser)
            sa.ensure_target(review)
            with sa.execution(A, run_id=f"run-sa-{t}") as ex:
                ex.record_side_effect("email-1", EffectOutcome.COMMITTED)
                with sa.holding(browser):
                    a_holds.set()
                    with sa.waiting_for(review) as w:
                        results["a"] = w.resolved(timeout_s=40)

    def agent_b() -> None:
        with SyncClient(eps, TOKENS["b"]) as cb, cb.session("b") as sb:
            with sb.execution(B, run_id=f"run-sb-{t}", checkpoint=True) as ex:
                ex.produces(review)
                assert a_holds.wait(20)
                try:
                    with ex.holding(browser):
                        raise AssertionError("B must never get the browser in generation 1")
                except DeadlockVictim as victim:
                    results["victim"] = victim
                results["generation"] = ex.retry()
                ex.produces(review)
                sb.produce(review)
                with ex.holding(browser) as h:
                    results["lease"] = h.lease
            results["epoch"] = sb.observed_epoch

    def run(fn: Any, name: str) -> threading.Thread:
        def body() -> None:
            try:
                fn()
            except BaseException as exc:
                results[f"error-{name}"] = exc

        th = threading.Thread(target=body, name=name)
        th.start()
        return th

    threads = [run(agent_a, "a"), run(agent_b, "b")]
    for th in threads:
        th.join(50)
    assert not [k for k in results if k.startswith("error")], results
    assert results["a"] == "target_produced"
    victim = results["victim"]
    assert victim.decision.execution_id == B and victim.epoch is not None
    assert results["generation"] == 2 and results["epoch"] >= victim.epoch and results["lease"] > 1


# -- clusters of their own: failover, streams, quorum ----------------------------------------------------


class LoseReply(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Lets one call of ``method`` reach the server, then drops its reply: the client sees an
    UNAVAILABLE after the command was applied (outcome unknown)."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.armed = False
        self.lost: list[str] = []

    def _request_ids(self, method: str, request: Any) -> list[str]:
        if method.endswith("/" + self.method):
            return [request.request_id]
        if method.endswith("/WriteBatch"):  # the SDK's batched writes: the items of that RPC
            case = convert.snake(self.method)
            return [getattr(i, case).request_id for i in request.items if i.WhichOneof("write") == case]
        return []

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        call = await continuation(details, request)
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        ids = self._request_ids(method, request) if self.armed else []
        if ids:
            await call  # the server applied it and answered
            self.armed = False
            self.lost.extend(ids)
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details="injected: the reply was lost",
            )
        return call


@pytest.mark.timeout(120)
async def test_leader_kill_mid_session_the_sdk_follows_the_new_leader_and_retries_apply_once(
    tmp_path: Path, own: list[GrpcCluster]
) -> None:
    c = await start_own(tmp_path, own, "--no-forward-writes")  # followers answer with the leader hint
    leader = await leader_of(c)
    followers = [n for n in c.nodes if n is not leader]
    eps = [followers[0].grpc, leader.grpc, followers[1].grpc]
    lose = LoseReply("RecordCost")
    t = tag()
    X = f"exec:K-{t}"
    async with (
        Client(eps, TOKENS["a"], interceptors=[lose], retry_deadline_s=60) as ca,
        ca.session("a", heartbeat_interval_s=0.3) as sa,
    ):
        assert ca.endpoint == leader.grpc  # the first write followed the hint
        async with sa.execution(X) as ex:
            lose.armed = True
            out = await ex.record_cost(5)  # applied, reply lost, retried with the same id
            assert out.duplicate and lose.lost
            leader.kill()
            out = await ex.record_cost(7)
            assert not out.duplicate
            new_leader = await leader_of(c, 30)
            assert ca.endpoint == new_leader.grpc
            seen = sa.stats.events
            lose.armed = True
            out = await ex.record_cost(11)
            assert out.duplicate and len(lose.lost) == 2
        # the stream follows too: the writes after the failover come back as events (heartbeats
        # keep the session alive at the new leader, and write nothing)
        for _ in range(50):
            if sa.stats.events > seen:
                break
            await asyncio.sleep(0.1)
        assert sa.stats.events > seen
    async with OperatorClient([new_leader.grpc], TOKENS["ops"]) as op:
        graph = await op.graph(fresh=True)
        (ex_view,) = [e for e in graph.executions if e.execution_id == X]
        assert ex_view.cost_consumed == 5 + 7 + 11  # every retry applied once
        assert ex_view.status == types_pb2.EXEC_STATUS_COMPLETED


@pytest.mark.timeout(120)
async def test_a_reconnecting_event_stream_delivers_the_victim_event_exactly_once(
    tmp_path: Path, own: list[GrpcCluster]
) -> None:
    c = await start_own(tmp_path, own, "--initial-mode", "auto", "--recovery-confirmation-window-ms", "2000")
    leader = await leader_of(c)
    watched = next(n for n in c.nodes if n is not leader)  # b's stream and writes start here
    eps_b = [watched.grpc] + [n.grpc for n in c.nodes if n is not watched]
    t = tag()
    A, B = f"exec:RA-{t}", f"exec:RB-{t}"
    browser, review = f"resource:rbrowser-{t}", f"artifact:rreview-{t}"
    async with (
        Client(endpoints(c), TOKENS["a"]) as ca,
        Client(eps_b, TOKENS["b"], retry_deadline_s=60) as cb,
        OperatorClient([leader.grpc], TOKENS["ops"]) as op,
    ):
        async with ca.session("a") as sa, cb.session("b") as sb:
            a_holds = asyncio.Event()
            a_done = asyncio.Event()

            async def agent_a() -> None:
                await sa.ensure_target(browser)
                await sa.ensure_target(review)
                async with sa.execution(A, run_id=f"run-ra-{t}") as ex:
                    await ex.record_side_effect("email-1", EffectOutcome.COMMITTED)
                    async with ex.holding(browser):
                        a_holds.set()
                        async with ex.waiting_for(review) as w:
                            await w.resolved(timeout_s=60)
                a_done.set()

            async def agent_b() -> DeadlockVictim:
                async with sb.execution(B, run_id=f"run-rb-{t}", checkpoint=True) as ex:
                    await ex.produces(review)
                    await a_holds.wait()
                    try:
                        async with ex.holding(browser):
                            raise AssertionError("B must never get the browser in generation 1")
                    except DeadlockVictim as victim:
                        caught = victim
                    await ex.retry()
                    await ex.produces(review)
                    await sb.produce(review)
                return caught

            ta = asyncio.get_running_loop().create_task(agent_a())
            tb = asyncio.get_running_loop().create_task(agent_b())

            async def open_proposal() -> Any:
                cycles = await op.cycles()
                return next((p for p in cycles.proposals if B in [m.execution_id for m in p.members]), None)

            await until(open_proposal, 30, "an open recovery proposal for B's cycle")
            reconnects = sb.stats.reconnects
            watched.kill()  # inside the confirmation window: the decision commits while b reconnects
            victim = await asyncio.wait_for(tb, 60)
            await asyncio.wait_for(ta, 30)
        assert sb.stats.reconnects > reconnects and sb.stats.duplicates == 0
        chosen = [
            ev.effect for ev in sb.event_log if isinstance(ev.effect, VictimChosen) and ev.effect.execution_id == B
        ]
        assert len(chosen) == 1 and chosen[0].decision_id == victim.decision_id
        assert [i for i in sb.interrupts if isinstance(i, DeadlockVictim)] == [victim]
        cursors = [ev.cursor for ev in sb.event_log]
        assert cursors == sorted(set(cursors))


@pytest.mark.timeout(90)
async def test_no_quorum_is_a_typed_unavailable_error(tmp_path: Path, own: list[GrpcCluster]) -> None:
    c = await start_own(tmp_path, own)
    leader = await leader_of(c)
    survivor = next(n for n in c.nodes if n is not leader)
    for n in c.nodes:
        if n is not survivor:
            n.kill()
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with Client(endpoints(c), TOKENS["a"], retry_deadline_s=3, call_timeout_s=2) as ca:
        with pytest.raises(Unavailable) as err:
            async with ca.session("a"):
                raise AssertionError("a session cannot be joined without a quorum")
    assert err.value.status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert loop.time() - started < 20


@pytest.mark.timeout(60)
async def test_tls_with_a_client_certificate(tmp_path: Path, own: list[GrpcCluster]) -> None:
    pki = make_pki(tmp_path)
    tls = ["--tls-cert", str(pki["server"]), "--tls-key", str(pki["server-key"]), "--tls-client-ca", str(pki["ca"])]
    c = GrpcCluster(tmp_path / "tls", size=1, extra_args=tls)
    own.append(c)
    c.__enter__()
    creds = TLS.from_files(ca=pki["ca"], cert=pki["client"], key=pki["client-key"])
    async with (
        Client(endpoints(c), TOKENS["a"], tls=creds) as ca,
        ca.session("a") as sa,
        sa.execution(f"exec:T-{tag()}") as ex,
    ):
        assert ex.generation == 1
    async with Client(endpoints(c), TOKENS["a"], tls=TLS.from_files(ca=pki["ca"]), retry_deadline_s=2) as anon:
        with pytest.raises(Unavailable):  # no client certificate: the handshake fails
            await anon.status()
