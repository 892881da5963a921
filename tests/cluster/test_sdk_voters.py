"""Agents as recovery voters (docs/design.md §4, the second seed's 4-of-7 gate) over gRPC.

A local cluster of three real nodes with seven agents a0..a6; the recovery voters are the seven
agents' sessions (quorum 4, at most 3 rollbacks at once), not the nodes. a0..a3 form the seed's
A->B->C->D->A ring over resources; every agent's session runs the SDK's voter loop. The ring is
broken only by the agents' votes, and a voter whose own execution is running votes no.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from waitgraph import Client, DeadlockVictim, DecisionKind, OperatorClient, RecoveryProposed, Session
from waitgraph.dev.localcluster import LocalCluster

AGENTS = tuple(f"a{i}" for i in range(7))
VOTERS = tuple(f"agent:{a}" for a in AGENTS)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def lc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        root=tmp_path_factory.mktemp("voters"),
        nodes=3,
        mode="auto",
        agents=AGENTS,
        serve_args=["--recovery-confirmation-window-ms", "300"],
    )
    with cluster:
        cluster.wait_for_leader(60)
        yield cluster


async def test_the_seeds_4_of_7_agent_gate_breaks_the_ring_over_grpc(lc: LocalCluster) -> None:
    creds = lc.credentials
    assert creds is not None
    async with OperatorClient(lc.endpoints, creds.admin) as admin:
        refused = await _refused(admin)
        assert refused is not None and "no margin" in refused
        out = await admin.configure_recovery(VOTERS, quorum=4, max_rollback=3, confirmation_window_ms=300)
        assert out.ok
        clients = [Client(lc.endpoints, creds.agents[a]) for a in AGENTS]
        try:
            sessions = [c.session(a, voter=True) for c, a in zip(clients, AGENTS, strict=True)]
            for s in sessions:
                await s.open()
            results = await asyncio.wait_for(_ring(sessions[:4]), 120)
            decision_id = next(r for r in results if isinstance(r, str))
            decision = await admin.decision(decision_id, fresh=True)
            votes = [s.votes for s in sessions]
            for s in sessions:
                await s.close()
        finally:
            for c in clients:
                await c.close()
    assert decision is not None and decision.kind is DecisionKind.VICTIM and decision.epoch is not None
    approvals = {v.voter for v in decision.votes if v.approve}
    assert approvals <= set(VOTERS) and len(approvals) >= 4  # only agents' votes, a quorum of them
    assert all(any(ok for _, ok, _ in cast) for cast in votes[4:])  # a4..a6 are not in the ring: they vote
    assert all(r in ("completed", decision_id) for r in results)


async def _refused(admin: OperatorClient) -> str | None:
    """The seed's own gate (4 of 7 with 4 rollbacks at once) is refused with the seed's reason."""
    from waitgraph import InvalidArgument

    try:
        await admin.configure_recovery(VOTERS, quorum=4, max_rollback=4)
    except InvalidArgument as exc:
        return str(exc)
    return None


async def _ring(sessions: list[Session]) -> list[str]:
    """a0..a3 each hold r_i and then take r_(i+1); the victim retries and completes."""
    n = len(sessions)
    ready = asyncio.Barrier(n)

    async def member(i: int, s: Session) -> str:
        async with s.execution(f"exec:ring-{i}", run_id=f"run-ring-{i}", checkpoint=True) as ex:
            try:
                async with ex.holding(f"resource:ring-{i}"):
                    await ready.wait()
                    async with ex.holding(f"resource:ring-{(i + 1) % n}"):
                        pass
            except DeadlockVictim as victim:
                assert victim.decision_id is not None
                await ex.retry()
                async with ex.holding(f"resource:ring-{i}"), ex.holding(f"resource:ring-{(i + 1) % n}"):
                    pass
                return victim.decision_id
        return "completed"

    return list(await asyncio.gather(*(member(i, s) for i, s in enumerate(sessions))))


async def test_the_default_voter_rule_says_no_for_a_member_that_is_running(lc: LocalCluster) -> None:
    creds = lc.credentials
    assert creds is not None
    async with Client(lc.endpoints, creds.agents["a6"]) as client, client.session("a6") as s:
        async with s.execution("exec:busy", run_id="run-busy") as ex:

            def proposal() -> RecoveryProposed:
                return RecoveryProposed(
                    digest="0" * 64, signature="0" * 16, epoch_proposed=1, members=(ex.execution_id,)
                )

            assert not s.confirms(proposal())  # running: contention, not a deadlock
            async with ex.waiting_for("artifact:busy-input") as w:
                assert w.registered and s.confirms(proposal())  # blocked in a registered wait
            await s.produce("artifact:busy-input")
        other = RecoveryProposed(digest="1" * 64, signature="1" * 16, epoch_proposed=1, members=("exec:someone",))
        assert s.confirms(other)  # not its own: the cluster's second read checks it
