"""The operators' asynchronous client: typed reads, the wire replies with where they came from,
each node's status, membership, and the operator actions, on OperatorService.

Layered beside :mod:`waitgraph.sdk.client`: ``connection.py`` <- ``views.py`` <- this. An
operator or admin token opens it (an agent token is refused with PERMISSION_DENIED, per RPC:
``docs/api.md``). The typed reads return the dataclasses of :mod:`waitgraph.sdk.views`; every
action returns the core's :class:`~waitgraph.statemachine.outcome.Outcome`, whose ``changed`` is
False for a recorded NOOP (``noop_reason`` says why: a vote counted already, a mode already set).

Rules kept here:
- The ``read_*`` methods (what the CLI renders) return the wire reply as a :class:`Read` that says
  where it came from. They make one pass over the endpoints, no more: by default fresh (a barrier
  through the log first, so two reads in a row never see time run backwards) and, when no node
  can pass a barrier (no leader, no quorum), a node's own replica, labelled ``stale`` with the
  reason, because an operator needs to look at a broken cluster most of all.
- :meth:`OperatorClient.status_all` asks every node (and every peer they name) and keeps each
  node's failure beside its answer: a cluster with nodes down is still described.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

from waitgraph.proto.v1 import operator_pb2
from waitgraph.statemachine import commands as C
from waitgraph.statemachine.enums import ExecStatus
from waitgraph.statemachine.outcome import Outcome
from waitgraph.statemachine.recovery_state import DecisionKind, RolloutMode
from waitgraph.wire import convert

from .connection import FRESH_TIMEOUT_S, UNANSWERED, Connection
from .errors import Decision, NotFound, RpcError, Unavailable, WaitgraphClientError, most_telling
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

__all__ = ["NodeReport", "OperatorClient", "Read"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Read(Generic[R]):
    """A read's wire reply and where it came from."""

    endpoint: str
    reply: R
    stale: bool
    """From the node's own replica, without a barrier through the log."""
    fallback_reason: str | None = None
    """Why a fresh read was not possible (then ``stale`` is true)."""


@dataclass(slots=True)
class NodeReport:
    """One node's Status, or why it could not be had."""

    endpoint: str
    status: operator_pb2.StatusResponse | None = None
    error: WaitgraphClientError | None = None
    serving: bool | None = None
    """grpc.health.v1 (no token needed): SERVING only while the node knows a leader with a quorum."""
    discovered: bool = False
    """Not among the client's endpoints: found in another node's peer list."""
    node_id: str | None = None
    """The node's id: from its Status, or from a peer list when it did not answer."""


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

    # -- the wire replies, with where they came from (the module's rules) --------------------------------

    async def read(self, rpc: str, make: Callable[[bool], Message], fresh: bool | None = None) -> Read[Any]:
        """``make(fresh)`` builds the request of OperatorService's ``rpc``. ``fresh`` None: fresh
        when possible, else stale and labelled; True: fresh or an error; False: a node's own
        replica, no barrier."""
        transport = self.transport
        errors: list[RpcError] = []
        if fresh is not False:
            for address in list(transport.endpoints):
                timeout_s = min(transport.call_timeout_s, FRESH_TIMEOUT_S)
                try:
                    return Read(
                        address, await transport.call_at(address, "operator", rpc, make(True), timeout_s), False
                    )
                except RpcError as exc:
                    if exc.status not in UNANSWERED:
                        raise  # an answer (a refusal): the next node would give the same
                    if exc.status is grpc.StatusCode.DEADLINE_EXCEEDED:
                        exc = exc.with_message(
                            f"no log barrier passed within {FRESH_TIMEOUT_S:.0f}s (no leader with a quorum?)"
                        )
                    errors.append(exc)
            if fresh:
                raise most_telling(errors)
        for address in list(transport.endpoints):
            try:
                reply = await transport.call_at(address, "operator", rpc, make(False))
            except RpcError as exc:
                if exc.status not in UNANSWERED:
                    raise
                errors.append(exc)
                continue
            return Read(address, reply, True, str(most_telling(errors)) if errors else None)
        raise most_telling(errors)

    async def read_graph(
        self,
        run_id: str = "",
        agent_id: str = "",
        limit: int = 0,
        fresh: bool | None = None,
        statuses: Sequence[ExecStatus] = (),
        around: Sequence[str] = (),
        hops: int = 0,
    ) -> Read[operator_pb2.GraphResponse]:
        """Executions, targets, waits, runs and sessions (filtered; ``around`` with ``hops``: what
        lies within that many wait-for steps of those executions)."""
        numbers: list[Any] = [convert.enum_number(s) for s in statuses]
        return await self.read(
            "Graph",
            lambda f: operator_pb2.GraphRequest(
                run_id=run_id, agent_id=agent_id, limit=limit, fresh=f, statuses=numbers, around=around, hops=hops
            ),
            fresh,
        )

    async def read_cycles(
        self, include_closed: bool = False, fresh: bool | None = None
    ) -> Read[operator_pb2.CyclesResponse]:
        return await self.read(
            "Cycles", lambda f: operator_pb2.CyclesRequest(include_closed=include_closed, fresh=f), fresh
        )

    async def read_explain(
        self, decision_id: str = "", digest: str = "", fresh: bool | None = None
    ) -> Read[operator_pb2.ExplainDecisionResponse]:
        return await self.read(
            "ExplainDecision",
            lambda f: operator_pb2.ExplainDecisionRequest(decision_id=decision_id, digest=digest, fresh=f),
            fresh,
        )

    async def read_decisions(
        self,
        run_id: str = "",
        kind: DecisionKind | None = None,
        since_ms: int = 0,
        limit: int = 0,
        fresh: bool | None = None,
    ) -> Read[operator_pb2.ListDecisionsResponse]:
        number: Any = convert.enum_number(kind) if kind is not None else 0
        return await self.read(
            "ListDecisions",
            lambda f: operator_pb2.ListDecisionsRequest(
                run_id=run_id, kind=number, since_ms=since_ms, limit=limit, fresh=f
            ),
            fresh,
        )

    async def read_signature(
        self, signature: str, fresh: bool | None = None
    ) -> Read[operator_pb2.SignatureHistoryResponse]:
        return await self.read(
            "SignatureHistory", lambda f: operator_pb2.SignatureHistoryRequest(signature=signature, fresh=f), fresh
        )

    async def read_history(
        self, run_id: str = "", execution_id: str = "", decision_id: str = "", limit: int = 0, target_id: str = ""
    ) -> Read[operator_pb2.HistoryResponse]:
        """Retired records from the history store of the first node that answers (each node keeps
        its own; they hold the same records once they applied the same passes)."""
        request = operator_pb2.HistoryRequest(
            run_id=run_id, execution_id=execution_id, decision_id=decision_id, limit=limit, target_id=target_id
        )
        return await self.read("History", lambda _fresh: request, False)

    async def read_convergence(
        self, run_id: str = "", fresh: bool | None = None
    ) -> Read[operator_pb2.ConvergenceResponse]:
        return await self.read("Convergence", lambda f: operator_pb2.ConvergenceRequest(run_id=run_id, fresh=f), fresh)

    async def read_export(self, fresh: bool | None = None) -> Read[operator_pb2.ExportPendingResponse]:
        return await self.read("ExportPending", lambda f: operator_pb2.ExportPendingRequest(fresh=f), fresh)

    async def read_members(self) -> Read[operator_pb2.ListMembersResponse]:
        """The membership as the first node that answers has it (the leader's, when it is given first)."""
        return await self.read("ListMembers", lambda _fresh: operator_pb2.ListMembersRequest(), False)

    async def call(self, address: str, rpc: str, request: Message, *, timeout_s: float | None = None) -> Any:
        """One OperatorService call on the node at ``address`` (no retry); the wire reply."""
        return await self.transport.call_at(address, "operator", rpc, request, timeout_s)

    # -- the nodes -------------------------------------------------------------------------------------

    async def serving(self, address: str, timeout_s: float = 2.0) -> bool | None:
        """grpc.health.v1 Check of the node's whole server (no token needed); None: no answer."""
        stub = health_pb2_grpc.HealthStub(self.transport.channel(address))
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        except grpc.aio.AioRpcError:
            return None
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    async def status_all(
        self, *, include_digest: bool = False, discover: bool = True, health: bool = False
    ) -> list[NodeReport]:
        """Every endpoint's Status and, with ``discover``, that of every peer they name; with
        ``health``, each node's health check too. A node's failure is kept in its report."""
        reports: list[NodeReport] = []
        seen: set[str] = set()
        queue = [(e, False) for e in self.transport.endpoints]
        while queue:
            address, discovered = queue.pop(0)
            if address in seen:
                continue
            seen.add(address)
            report = NodeReport(address, discovered=discovered)
            try:
                report.status = await self.status(address, include_digest=include_digest)
            except WaitgraphClientError as exc:
                report.error = exc
            if health:
                report.serving = await self.serving(address)
            reports.append(report)
            if discover and report.status is not None:
                queue += [(p.grpc_address, True) for p in report.status.peers if p.grpc_address]
        names = {p.grpc_address: p.node_id for r in reports if r.status is not None for p in r.status.peers}
        for r in reports:
            r.node_id = r.status.node_id if r.status is not None else names.get(r.endpoint)
        return reports

    async def wait_for_leader(self, timeout_s: float = 30.0, recovery: bool = True) -> operator_pb2.StatusResponse:
        """The leader's Status once every endpoint answers and agrees on it, it has a quorum and
        (with ``recovery``) the recovery configuration is in the state."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last = "no answer yet"
        while loop.time() < deadline:
            reports = await self.status_all(discover=False)
            answered = [r.status for r in reports if r.status is not None]
            leaders = {s.leader_id for s in answered}
            leader = next((s for s in answered if s.role == "leader"), None)
            if len(answered) == len(reports) and len(leaders) == 1 and leader is not None and leader.has_quorum:
                if not recovery or leader.recovery_configured:
                    return leader
                last = f"leader {leader.node_id} has not configured recovery yet"
            else:
                errors = [str(r.error) for r in reports if r.error is not None]
                last = "; ".join(errors) or f"nodes see leaders {sorted(leaders)}"
            await asyncio.sleep(0.2)
        raise Unavailable(f"no agreed leader after {timeout_s:.0f}s ({last})", status=grpc.StatusCode.DEADLINE_EXCEEDED)

    # -- membership (admin; on the leader, its hints followed) ------------------------------------------

    async def add_member(
        self, node_id: str, raft_address: str, grpc_address: str = ""
    ) -> tuple[str, operator_pb2.MemberChangeResponse]:
        """One membership change: (the node that made it, the membership after). A change has no
        request id: a retry after an unknown outcome is refused by the leader's guards
        (``already_member``, ``change_pending``), never applied twice."""
        request = operator_pb2.AddMemberRequest(node_id=node_id, raft_address=raft_address, grpc_address=grpc_address)
        return await self._to_leader("AddMember", request)

    async def remove_member(self, node_id: str) -> tuple[str, operator_pb2.MemberChangeResponse]:
        return await self._to_leader("RemoveMember", operator_pb2.RemoveMemberRequest(node_id=node_id))

    async def _to_leader(self, rpc: str, request: Message) -> tuple[str, operator_pb2.MemberChangeResponse]:
        hops: list[str] = []
        reply: operator_pb2.MemberChangeResponse = await self.transport.call("operator", rpc, request, hops=hops)
        return hops[-1], reply

    # -- actions ---------------------------------------------------------------------------------------

    # Every action takes ``request_id``: the same id again (after an outcome unknown) is answered
    # from the cluster's idempotency table instead of being applied twice.

    async def vote(self, digest: str, approve: bool = True, *, request_id: str | None = None) -> Outcome:
        """This operator's vote on an open recovery proposal (counted when it is a voter)."""
        return await self.submit(C.VoteRecovery(digest=digest, approve=approve), request_id=request_id)

    async def set_mode(
        self,
        mode: str | RolloutMode | None,
        *,
        run_id: str | None = None,
        side_effect_free: bool | None = None,
        request_id: str | None = None,
    ) -> Outcome:
        """The rollout mode, for the cluster or one run (admin). For a run, ``mode`` None removes its
        override and ``side_effect_free`` marks it as one ``auto-safe`` may act on (or not)."""
        command = C.SetMode(
            mode=RolloutMode(mode) if mode is not None else None, run_id=run_id, side_effect_free=side_effect_free
        )
        return await self.submit(command, request_id=request_id)

    async def set_approver(
        self, approver_id: str | None, *, run_id: str | None = None, request_id: str | None = None
    ) -> Outcome:
        """The independent approver (``human:`` or an ``exec:`` outside the run) of the cluster or
        one run, that a recovery may move a trapped approval to (admin); None removes it."""
        return await self.submit(C.SetApprover(approver_id=approver_id, run_id=run_id), request_id=request_id)

    async def freeze(self, reason: str, *, run_id: str | None = None, request_id: str | None = None) -> Outcome:
        """Stop admitting new delegations (for the cluster, or one run)."""
        return await self.submit(C.FreezeAdmission(reason=reason, run_id=run_id), request_id=request_id)

    async def unfreeze(self, reason: str, *, run_id: str | None = None, request_id: str | None = None) -> Outcome:
        return await self.submit(C.UnfreezeAdmission(reason=reason, run_id=run_id), request_id=request_id)

    async def cancel_run(
        self, run_id: str, reason: str, *, observed_cancel_generation: int = 0, request_id: str | None = None
    ) -> Outcome:
        """Cancel a run (every nonterminal descendant is asked to stop); follow it with :meth:`convergence`."""
        return await self.submit(
            C.CancelRun(run_id=run_id, observed_cancel_generation=observed_cancel_generation, reason=reason),
            request_id=request_id,
        )

    async def configure_recovery(
        self,
        voters: Sequence[str],
        quorum: int,
        max_rollback: int,
        *,
        confirmation_window_ms: int = 500,
        request_id: str | None = None,
    ) -> Outcome:
        """The recovery voter set and quorum (admin). Refused when the quorum does not exceed
        ``max_rollback`` (the second seed's rule, docs/design.md §4)."""
        return await self.submit(
            C.ConfigureRecovery(
                voters=tuple(voters),
                quorum=quorum,
                max_rollback=max_rollback,
                confirmation_window_ms=confirmation_window_ms,
            ),
            request_id=request_id,
        )
