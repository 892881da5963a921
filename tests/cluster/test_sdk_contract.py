"""The SDK's contract with an agent author (issue 17), against three real ``waitgraph serve`` processes.

One cluster for the module, in auto mode with a tight rate limit (burst 10, 50/s per token), so
that every test here also lives with refusals that changed nothing and the SDK's retries of them:

- targets created on first use (``holding`` a resource, waiting on an undeclared artifact), and a
  pool's refusal naming the call that creates it;
- the retry policy: ``rate_limited`` retried with the same request id after ``retry_after_ms``
  until the deadline, then raised typed; nothing applied for what was refused;
- a lost session: ``SessionLost`` in the blocked task, ``on_lost``, refused calls, ``rejoin``;
- typed reads on the OperatorClient and an explicit NOOP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from waitgraph import (
    CancellationRequested,
    CancelState,
    Client,
    Convergence,
    Cycles,
    DeadlockVictim,
    DecisionKind,
    EffectOutcome,
    ExecStatus,
    NotFound,
    OperatorClient,
    PermissionDenied,
    ProposalStatus,
    RateLimited,
    SessionLost,
    StaleGeneration,
    SyncOperatorClient,
    commands,
)

from .grpc_harness import TOKENS, GrpcCluster, until
from .test_sdk import AUTO, cluster, endpoints, settled, tag

__all__ = ["cluster"]  # test_sdk's fixture, on this module's `shared`

LIMITED = [*AUTO, "--rate-limit-per-s", "50", "--rate-limit-burst", "10"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcCluster]:
    with GrpcCluster(tmp_path_factory.mktemp("sdk-contract"), extra_args=LIMITED) as cluster:
        asyncio.run(settled(cluster))
        yield cluster


def agent(cluster: GrpcCluster, name: str, **kw: Any) -> Client:
    return Client(endpoints(cluster), TOKENS[name], **kw)


def operator(cluster: GrpcCluster, name: str = "ops") -> OperatorClient:
    return OperatorClient(endpoints(cluster), TOKENS[name])


async def targets(op: OperatorClient) -> dict[str, Any]:
    return {t.target_id: t for t in (await op.graph(fresh=True)).targets}


# -- targets created on first use ---------------------------------------------------------------------------


async def test_holding_creates_the_resource_and_a_wait_on_an_undeclared_artifact_is_accepted(
    cluster: GrpcCluster,
) -> None:
    t = tag()
    db, report = f"resource:db-{t}", f"artifact:report-{t}"
    async with (
        agent(cluster, "a") as ca,
        agent(cluster, "b") as cb,
        operator(cluster) as op,
        ca.session("a") as sa,
        cb.session("b") as sb,
    ):
        async with (
            sa.execution(f"exec:reader-{t}", run_id=f"run-r-{t}") as reader,
            reader.holding(db) as h,  # nobody created resource:db-…: holding does
        ):
            assert h.lease == 1
            async with reader.waiting_for(report) as w:  # nobody declared the report yet
                assert w.registered
                made = await targets(op)
                assert not made[report].HasField("satisfier_id")  # unknown until declared
                async with sb.execution(f"exec:writer-{t}", run_id=f"run-w-{t}") as writer:
                    out = await writer.produces(report)  # the producer declares it later
                    assert out.ok
                    await sb.produce(report)
                assert await w.resolved(timeout_s=20) == "target_produced"
        assert len((await targets(op))[db].holders) == 0


async def test_a_missing_pool_is_refused_naming_the_call_that_creates_it(cluster: GrpcCluster) -> None:
    t = tag()
    async with (
        agent(cluster, "a") as ca,
        operator(cluster) as op,
        ca.session("a") as sa,
        sa.execution(f"exec:pooler-{t}", run_id=f"run-p-{t}") as ex,
    ):
        with pytest.raises(NotFound) as refused:
            async with ex.holding(f"pool:gpu-{t}"):
                pass
        assert "ensure_target('pool:gpu-" in str(refused.value) and "slots=N" in str(refused.value)
        assert f"pool:gpu-{t}" not in await targets(op)  # nothing was created
        assert await sa.ensure_target(f"pool:gpu-{t}", slots=2)
        async with ex.holding(f"pool:gpu-{t}") as h:
            assert h.lease == 1


async def test_record_side_effect_defaults_to_committed_and_takes_text(cluster: GrpcCluster) -> None:
    t = tag()
    async with (
        agent(cluster, "a") as ca,
        ca.session("a") as sa,
        sa.execution(f"exec:mailer-{t}", run_id=f"run-m-{t}") as ex,
    ):
        sent = await ex.record_side_effect("email-sent")
        unsure = await ex.record_side_effect("sms", "unknown", compensatable=True)
    assert [fx.outcome for fx in sent.effects] == [EffectOutcome.COMMITTED]
    assert [fx.outcome for fx in unsure.effects] == [EffectOutcome.UNKNOWN]


# -- the retry policy ---------------------------------------------------------------------------------------


async def test_rate_limited_writes_are_retried_with_their_request_id_until_they_apply(cluster: GrpcCluster) -> None:
    """Sixty writes at once against a burst of 10: every one is refused at first or not, and every
    one ends APPLIED exactly once (the refusals changed nothing, the retries reused their ids)."""
    t = tag()
    ids = [f"resource:flood-{t}-{i}" for i in range(60)]
    async with agent(cluster, "c") as cc, operator(cluster) as op, cc.session("c"):
        outcomes = await asyncio.gather(*(cc.submit(commands.CreateTarget(target_id=i)) for i in ids))
        assert all(o.ok and not o.duplicate for o in outcomes)
        made = await targets(op)
    assert all(i in made for i in ids)


async def test_past_its_deadline_a_rate_limited_write_raises_typed_and_applied_nothing(cluster: GrpcCluster) -> None:
    t = tag()
    ids = [f"resource:burst-{t}-{i}" for i in range(30)]
    async with agent(cluster, "c") as cc, operator(cluster) as op, cc.session("c"):
        await asyncio.sleep(0.5)  # the session's own writes refilled
        async with agent(cluster, "c", retry_deadline_s=0) as hasty:  # no retries at all
            got = await asyncio.gather(
                *(hasty.submit(commands.CreateTarget(target_id=i)) for i in ids), return_exceptions=True
            )
        refused = [i for i, g in zip(ids, got, strict=True) if isinstance(g, RateLimited)]
        others = [g for g in got if isinstance(g, BaseException) and not isinstance(g, RateLimited)]
        assert not others, others
        assert refused, "one WriteBatch of 30 against a burst of 10 must refuse some"
        err = next(g for g in got if isinstance(g, RateLimited))
        assert err.code == "rate_limited" and err.retry_after_s is not None and err.retry_after_s > 0
        made = await targets(op)
    assert not [i for i in refused if i in made], "a refused write was applied"


# -- a lost session -----------------------------------------------------------------------------------------


async def test_a_session_ended_by_another_process_raises_session_lost_in_the_blocked_task(
    cluster: GrpcCluster,
) -> None:
    t = tag()
    lost: list[SessionLost] = []
    async with (
        agent(cluster, "b") as first,
        agent(cluster, "b") as second,
        first.session("b", on_lost=lost.append) as s1,
    ):

        async def blocked() -> None:
            async with (
                s1.execution(f"exec:lonely-{t}", run_id=f"run-l-{t}") as ex,
                ex.waiting_for(f"artifact:never-{t}") as w,
            ):
                await w.resolved()

        task = asyncio.get_running_loop().create_task(blocked())
        async with operator(cluster) as op:
            await until(lambda: _waiting(op, f"exec:lonely-{t}"), 20, "the wait to register")
        async with second.session("b"):  # the same agent id in another process
            pass  # ... which leaves: the cluster ends the agent's session
        with pytest.raises(SessionLost) as caught:
            await asyncio.wait_for(task, 20)
        err = caught.value
        assert err.reason == "left" and err.agent_id == "b"
        assert lost and lost[0].reason == "left" and s1.lost is not None
        with pytest.raises(SessionLost):
            await s1.ensure_target(f"artifact:after-{t}")
        await s1.rejoin()
        assert s1.lost is None
        assert await s1.ensure_target(f"artifact:after-{t}")


async def test_a_session_whose_lease_expired_is_lost_and_can_rejoin(cluster: GrpcCluster) -> None:
    async with agent(cluster, "c") as cc:
        s = cc.session("c", lease_ms=600, heartbeat_interval_s=3600)  # a process paused past its lease
        async with s:
            err = await s.wait_lost(timeout_s=30)
            assert err.reason == "expired" and s.lost is err
            with pytest.raises(SessionLost):
                await s.ensure_target(f"artifact:expired-{tag()}")
            await s.rejoin()
            assert s.lost is None and s.incarnation is not None


def test_the_blocking_operator_client_reads_typed_values(cluster: GrpcCluster) -> None:
    with SyncOperatorClient(endpoints(cluster), TOKENS["ops"]) as ops:
        seen = ops.cycles(include_closed=True)
        state = ops.convergence()
    assert isinstance(seen, Cycles) and all(isinstance(p.status, ProposalStatus) for p in seen.proposals)
    assert isinstance(state, Convergence) and state.cancel_state is None  # no run named: the cluster's view


async def _waiting(op: OperatorClient, execution_id: str) -> bool:
    return any(w.waiter_id == execution_id for w in (await op.graph(fresh=True)).waits)


# -- typed reads, operator actions, explicit NOOPs ------------------------------------------------------------


async def test_typed_reads_of_a_deadlock_its_decision_and_a_cancelled_run(cluster: GrpcCluster) -> None:
    t = tag()
    A, B = f"exec:A-{t}", f"exec:B-{t}"
    review, browser = f"artifact:review-{t}", f"resource:browser-{t}"
    async with agent(cluster, "a") as ca, agent(cluster, "b") as cb, operator(cluster) as op:
        async with ca.session("a") as sa, cb.session("b") as sb:
            a_holds = asyncio.Event()
            b_produces = asyncio.Event()

            async def agent_a() -> str:
                async with sa.execution(A, run_id=f"run-a-{t}") as ex:
                    await ex.record_side_effect("email-sent")
                    async with ex.holding(browser):
                        a_holds.set()
                        await b_produces.wait()
                        async with ex.waiting_for(review) as w:
                            return await w.resolved(timeout_s=40)
                raise AssertionError("unreachable")

            async def agent_b() -> DeadlockVictim:
                async with sb.execution(B, run_id=f"run-b-{t}", checkpoint=True) as ex:
                    await ex.produces(review)
                    b_produces.set()
                    await a_holds.wait()
                    try:
                        async with ex.holding(browser):
                            raise AssertionError("B got the browser while A held it")
                    except DeadlockVictim as victim:
                        await ex.retry()
                        await sb.produce(review)
                        return victim
                raise AssertionError("unreachable")

            reason, victim = await asyncio.wait_for(asyncio.gather(agent_a(), agent_b()), 60)
        assert reason == "target_produced"
        decision = await op.decision(victim.decision_id or "", fresh=True)
        assert decision is not None and decision.kind is DecisionKind.VICTIM and decision.winner_id == B
        assert dict(decision.roles)[B] == "victim" and decision.signature
        assert {s.execution_id for s in decision.scores or ()} == {A, B}
        assert decision.released == ()  # B held nothing: it waited for the browser
        assert len({v.voter for v in decision.votes if v.approve}) >= 2  # the nodes' quorum
        history = await op.signature_history(decision.signature or "", fresh=True)
        assert history.known and history.recovered_total >= 1
        assert decision.decision_id in [d.decision_id for d in history.decisions]
        explained = await op.explain(digest=decision.digest or "", fresh=True)
        assert [d.decision_id for d in explained.decisions] == [decision.decision_id]
        cycles = await op.cycles(include_closed=True, fresh=True)
        assert any(p.decision_id == decision.decision_id for p in cycles.proposals)


async def test_convergence_export_and_operator_cancel_on_the_operator_service(cluster: GrpcCluster) -> None:
    t = tag()
    run = f"run-c-{t}"
    interrupted: list[BaseException] = []
    async with agent(cluster, "a") as ca, operator(cluster) as op, ca.session("a") as sa:
        with pytest.raises(CancellationRequested):  # leaving the scope acknowledges, then says so
            async with sa.execution(f"exec:root-{t}", run_id=run) as ex:
                await _cancelled_while_waiting(cluster, op, sa, ex, run, t, interrupted)
        assert interrupted
        state = await _converged(op, run)
    assert state.cancel_state is CancelState.CANCELLED_STABLE and state.converged
    assert all(isinstance(k, ExecStatus) for k in state.unsettled)


async def _cancelled_while_waiting(
    cluster: GrpcCluster, op: OperatorClient, sa: Any, ex: Any, run: str, t: str, interrupted: list[BaseException]
) -> None:
    """Inside the execution: block on a wait, export it, cancel the run as an operator."""

    async def blocked() -> None:
        try:
            async with ex.waiting_for(f"artifact:input-{t}") as w:
                await w.resolved()
        except CancellationRequested as exc:
            interrupted.append(exc)

    task = asyncio.get_running_loop().create_task(blocked())
    await until(lambda: _waiting(op, f"exec:root-{t}"), 20, "the wait to register")
    pending = await op.export_pending(fresh=True)
    assert pending.format == "waitgraph-pending"
    assert any(e["waiterExecution"] == f"exec:root-{t}" for e in pending.edges)
    async with agent(cluster, "ops") as wrong_client:  # an operator token on AgentService
        with pytest.raises(PermissionDenied) as wrong:
            await wrong_client.submit(commands.CancelRun(run_id=run, observed_cancel_generation=0, reason="x"))
    assert "OperatorClient" in str(wrong.value)
    out = await op.cancel_run(run, "drill")
    assert out.ok
    again = await op.cancel_run(run, "drill")  # observed generation 0: raised past it already
    assert not again.ok and again.noop_reason
    await asyncio.wait_for(task, 20)


async def _converged(op: OperatorClient, run: str) -> Any:
    async def done() -> Any:
        c = await op.convergence(run, fresh=True)
        return c if c.converged and c.cancel_state is CancelState.CANCELLED_STABLE else None

    return await until(done, 20, f"{run} to converge")


async def test_leaving_an_execution_whose_commit_changed_nothing_raises(cluster: GrpcCluster) -> None:
    t = tag()
    async with agent(cluster, "a") as ca, ca.session("a") as sa:
        with pytest.raises(StaleGeneration) as late:
            async with sa.execution(f"exec:overtaken-{t}", run_id=f"run-o-{t}") as ex:
                # Another process of agent a retried this execution meanwhile: g1 is over.
                await sa.write(commands.RetryExecution(execution_id=ex.execution_id, generation=1))
    assert late.value.code == "stale_generation" and "changed nothing" in str(late.value)


async def test_a_stale_close_is_an_explicit_noop(cluster: GrpcCluster) -> None:
    t = tag()
    async with (
        agent(cluster, "a") as ca,
        ca.session("a") as sa,
        sa.execution(f"exec:closer-{t}", run_id=f"run-x-{t}") as ex,
    ):
        target = f"artifact:late-{t}"
        async with ex.waiting_for(target) as w:
            version = w.version
        late = await sa.write(
            commands.CloseWait(
                waiter_id=ex.execution_id,
                waiter_generation=ex.generation,
                target_id=target,
                edge_version=version,
                reason="late",
            )
        )
    assert not late.ok and late.noop_reason == "already_closed"
