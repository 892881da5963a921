"""The operators' asynchronous client: typed reads and the operator actions, on OperatorService.

Layered beside :mod:`waitgraph.sdk.client`: ``connection.py`` <- ``views.py`` <- this. An
operator or admin token opens it (an agent token is refused with PERMISSION_DENIED, per RPC:
``docs/api.md``). Every read returns the dataclasses of :mod:`waitgraph.sdk.views`; every action
returns the core's :class:`~waitgraph.statemachine.outcome.Outcome`, whose ``changed`` is False
for a recorded NOOP (``noop_reason`` says why: a vote counted already, a mode already set).
"""

from __future__ import annotations

from collections.abc import Sequence

from waitgraph.proto.v1 import operator_pb2
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.outcome import Outcome
from waitgraph.statemachine.recovery_state import RolloutMode

from .connection import Connection
from .errors import Decision, NotFound
from .views import (
    Convergence,
    Cycles,
    Explanation,
    PendingExport,
    SignatureHistory,
    convergence_from_proto,
    cycles_from_proto,
    explanation_from_proto,
    pending_from_proto,
    trajectory_from_view,
)

__all__ = ["OperatorClient"]


class OperatorClient(Connection):
    """An asynchronous client for operators (same arguments as :class:`~waitgraph.sdk.client.Client`)::

        async with OperatorClient(endpoints, token=OPERATOR_TOKEN) as ops:
            for cycle in (await ops.cycles()).cycles:
                print(cycle.signature, [m.execution_id for m in cycle.members])
            state = await ops.convergence("run-7")

    ``submit(command)`` sends a command both services carry (CancelRun) to OperatorService.
    ``fresh=True`` on a read goes through a log barrier on the leader (never ``stale``).
    """

    default_service = "operator"

    # -- reads -----------------------------------------------------------------------------------------

    async def cycles(self, *, include_closed: bool = False, fresh: bool = False) -> Cycles:
        """Candidate deadlocks now (a full detection pass) and the recovery proposals (open ones;
        closed ones too with ``include_closed``), with their votes."""
        request = operator_pb2.CyclesRequest(include_closed=include_closed, fresh=fresh)
        return cycles_from_proto(await self.transport.call("operator", "Cycles", request))

    async def explain(self, decision_id: str = "", *, digest: str = "", fresh: bool = False) -> Explanation:
        """The recorded decisions (by id, or every one for a digest) with scores, roles, votes and
        releases, and each signature's trajectory; no decisions when there is none."""
        if bool(decision_id) == bool(digest):
            raise ValueError("explain: give a decision_id or a digest, not both")
        request = operator_pb2.ExplainDecisionRequest(decision_id=decision_id, digest=digest, fresh=fresh)
        try:
            reply = await self.transport.call("operator", "ExplainDecision", request)
        except NotFound:
            return Explanation((), (), 0, False)
        return explanation_from_proto(reply)

    async def decision(self, decision_id: str, *, fresh: bool = False) -> Decision | None:
        """One decision record with every candidate's score (None when there is no such decision)."""
        found = await self.explain(decision_id, fresh=fresh)
        return found.decisions[0] if found.decisions else None

    async def decisions(self, digest: str, *, fresh: bool = False) -> tuple[Decision, ...]:
        """Every decision recorded for a deadlock digest, oldest first."""
        return (await self.explain(digest=digest, fresh=fresh)).decisions

    async def signature_history(self, signature: str, *, fresh: bool = False) -> SignatureHistory:
        """The livelock guard's memory of a cycle signature (``known`` False: never seen)."""
        request = operator_pb2.SignatureHistoryRequest(signature=signature, fresh=fresh)
        reply = await self.transport.call("operator", "SignatureHistory", request)
        return trajectory_from_view(reply.trajectory, reply.epoch, reply.stale)

    async def convergence(self, run_id: str = "", *, fresh: bool = False) -> Convergence:
        """How far the run's cancellation (without a run: every open cancellation) has converged."""
        request = operator_pb2.ConvergenceRequest(run_id=run_id, fresh=fresh)
        return convergence_from_proto(await self.transport.call("operator", "Convergence", request))

    async def export_pending(self, *, fresh: bool = False) -> PendingExport:
        """Pending edges, holdings, claims and open cancellations, before a schema rollback."""
        request = operator_pb2.ExportPendingRequest(fresh=fresh)
        return pending_from_proto(await self.transport.call("operator", "ExportPending", request))

    # -- actions ---------------------------------------------------------------------------------------

    async def vote(self, digest: str, approve: bool = True) -> Outcome:
        """This operator's vote on an open recovery proposal (counted when it is a voter)."""
        return await self.submit(C.VoteRecovery(digest=digest, approve=approve))

    async def set_mode(self, mode: str | RolloutMode, *, run_id: str | None = None) -> Outcome:
        """The rollout mode, for the cluster or one run (admin)."""
        return await self.submit(C.SetMode(mode=RolloutMode(mode), run_id=run_id))

    async def set_approver(self, approver_id: str | None, *, run_id: str | None = None) -> Outcome:
        """The independent approver (``human:`` or an ``exec:`` outside the run) of the cluster or
        one run, that a recovery may move a trapped approval to (admin); None removes it."""
        return await self.submit(C.SetApprover(approver_id=approver_id, run_id=run_id))

    async def freeze(self, reason: str, *, run_id: str | None = None) -> Outcome:
        """Stop admitting new delegations (for the cluster, or one run)."""
        return await self.submit(C.FreezeAdmission(reason=reason, run_id=run_id))

    async def unfreeze(self, reason: str, *, run_id: str | None = None) -> Outcome:
        return await self.submit(C.UnfreezeAdmission(reason=reason, run_id=run_id))

    async def cancel_run(self, run_id: str, reason: str, *, observed_cancel_generation: int = 0) -> Outcome:
        """Cancel a run (every nonterminal descendant is asked to stop); follow it with :meth:`convergence`."""
        return await self.submit(
            C.CancelRun(run_id=run_id, observed_cancel_generation=observed_cancel_generation, reason=reason)
        )

    async def configure_recovery(
        self, voters: Sequence[str], quorum: int, max_rollback: int, *, confirmation_window_ms: int = 500
    ) -> Outcome:
        """The recovery voter set and quorum (admin). Refused when the quorum does not exceed
        ``max_rollback`` (the second seed's rule, DESIGN §4)."""
        return await self.submit(
            C.ConfigureRecovery(
                voters=tuple(voters),
                quorum=quorum,
                max_rollback=max_rollback,
                confirmation_window_ms=confirmation_window_ms,
            )
        )
