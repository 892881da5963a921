"""A small synchronous client of OperatorService for the CLI, ``waitgraph dev`` and scripts.

Rules kept here:
- Reads go to the first endpoint that answers. By default they are fresh (a barrier through the
  log first, so two commands in a row never see time run backwards); when no node can pass a
  barrier (no leader, no quorum) the read falls back to a node's own replica and says so
  (:attr:`Read.stale`), because an operator needs to look at a broken cluster most of all.
- Writes carry a request id (``cli-<uuid>``), so every retry is safe: on UNAVAILABLE they follow
  the leader hint (``waitgraph-leader``), retry the same node when the outcome is unknown
  (``waitgraph-retry: same-request-id``), or move on to the next endpoint; never with a new id.
- Every failure is one :class:`OpsError`: the gRPC code, the server's details, the stable
  waitgraph code when there is one, and the endpoint that said it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

from waitgraph.proto.v1 import commands_pb2, operator_pb2, operator_pb2_grpc
from waitgraph.statemachine.outcome import Outcome
from waitgraph.wire import convert
from waitgraph.wire.metadata import CODE_KEY, LEADER_ID_KEY, LEADER_KEY, RETRY_KEY

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_BASE_PORT = 50051
"""``waitgraph dev`` puts gRPC on 50051.. and Raft on 50151.. when they are free; the CLI's
default ``--endpoints`` are these gRPC addresses."""


def default_endpoints(nodes: int = 3) -> list[str]:
    return [f"127.0.0.1:{DEFAULT_BASE_PORT + i}" for i in range(nodes)]


FRESH_TIMEOUT_S = 3.0
"""A barrier that has not passed by then will not pass soon: fall back to a stale read."""
WRITE_ROUNDS = 3
"""Rounds over the endpoints a write makes while no node can take it (an election in flight)."""
WRITE_BUDGET = 2.0
"""A write gives up after this many ``timeout_s`` in all, however many retries are left."""
_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class OpsError(Exception):
    """A failed operator call: what gRPC said, and where."""

    def __init__(
        self,
        code: grpc.StatusCode | None,
        message: str,
        endpoint: str | None = None,
        *,
        waitgraph_code: str | None = None,
        leader: str | None = None,
        leader_id: str | None = None,
        retry_same_id: bool = False,
        unreachable: bool = False,
    ) -> None:
        super().__init__(message)
        self.unreachable = unreachable
        """Nothing answered at the address (as opposed to a node that answered with an error)."""
        self.code = code
        self.message = message
        self.endpoint = endpoint
        self.waitgraph_code = waitgraph_code
        self.leader = leader
        self.leader_id = leader_id
        self.retry_same_id = retry_same_id

    @classmethod
    def from_rpc(cls, exc: grpc.RpcError, endpoint: str) -> OpsError:
        call: Any = exc
        trailers: dict[str, Any] = {}
        try:
            trailers = {k: v for k, v in (call.trailing_metadata() or ())}
        except Exception:  # a failure before any response has no trailers
            trailers = {}
        details = ((call.details() if hasattr(call, "details") else str(exc)) or "").strip() or "no details"
        code = call.code() if hasattr(call, "code") else None
        unreachable = "failed to connect" in details.lower()
        if unreachable:
            # gRPC's text names every address it tried; the last clause is the cause.
            details = f"cannot connect ({details.rsplit(': ', 1)[-1]})"
        elif code is grpc.StatusCode.DEADLINE_EXCEEDED:
            details = "no answer within the deadline (--rpc-timeout)"
        return cls(
            code,
            details,
            endpoint,
            unreachable=unreachable,
            waitgraph_code=trailers.get(CODE_KEY),
            leader=trailers.get(LEADER_KEY),
            leader_id=trailers.get(LEADER_ID_KEY),
            retry_same_id=trailers.get(RETRY_KEY) == "same-request-id",
        )

    @property
    def code_name(self) -> str:
        return self.code.name if self.code is not None else "ERROR"

    def one_line(self) -> str:
        where = f" [{self.endpoint}]" if self.endpoint else ""
        return f"{self.code_name}: {' '.join(self.message.split())}{where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code_name,
            "message": self.message,
            "endpoint": self.endpoint,
            "waitgraph_code": self.waitgraph_code,
            "leader": self.leader,
        }


def resolve_prefix(prefix: str, length: int, known: Callable[[], Sequence[str]], what: str, hint: str) -> str:
    """The one id of ``known()`` that starts with ``prefix`` (``git``-style; a complete id is taken
    as it is, without asking): every verb that takes a digest or a signature resolves it here, so
    the same prefix rule holds everywhere."""
    prefix = prefix.strip().lower()
    if not prefix or len(prefix) > length or any(c not in "0123456789abcdef" for c in prefix):
        raise OpsError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{prefix!r} is not a {what}: up to {length} hex digits ({hint})",
        )
    if len(prefix) == length:
        return prefix
    found = sorted({k for k in known() if k.startswith(prefix)})
    if len(found) == 1:
        return found[0]
    count = "no" if not found else f"{len(found)}"
    raise OpsError(
        grpc.StatusCode.NOT_FOUND if not found else grpc.StatusCode.INVALID_ARGUMENT,
        f"{count} {what}s start with {prefix!r}; give more of it ({hint})",
    )


def refused_token(error: OpsError | None) -> bool:
    """The node answered, and refused the credentials: not an outage."""
    return error is not None and error.code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


def most_telling(errors: Sequence[OpsError]) -> OpsError:
    """Of several failures, the one to show: "outcome unknown" first (the write may have been
    applied: the operator must know, and retry with its request id), then the last one from a node
    that answered (it says why: no leader, no quorum), then an address where nothing listens."""

    def rank(e: OpsError) -> int:
        if e.retry_same_id:
            return 3
        if e.unreachable:
            return 0
        return 1 if e.code is grpc.StatusCode.DEADLINE_EXCEEDED else 2

    best = max(rank(e) for e in errors)
    return [e for e in errors if rank(e) == best][-1]


@dataclass(frozen=True, slots=True)
class Tls:
    """Client TLS: the CA that signed the servers, and a client certificate for mTLS."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    server_name: str | None = None
    """Expected name in the server certificate, when it differs from the endpoint's host."""

    def credentials(self) -> grpc.ChannelCredentials:
        if (self.cert is None) != (self.key is None):
            raise OpsError(None, "--tls-cert and --tls-key go together (the client certificate and its key)")
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.read_bytes() if self.ca else None,
            private_key=self.key.read_bytes() if self.key else None,
            certificate_chain=self.cert.read_bytes() if self.cert else None,
        )


@dataclass(frozen=True, slots=True)
class Read:
    """A read's answer and where it came from."""

    endpoint: str
    reply: Any
    stale: bool
    fallback_reason: str | None = None
    """Why a fresh read was not possible (then ``stale`` is true)."""


@dataclass(frozen=True, slots=True)
class Write:
    endpoint: str
    """The node that answered (the leader, after a hint)."""
    request_id: str
    outcome: Outcome
    hops: tuple[str, ...] = ()
    """Every endpoint tried, in order (more than one: redirected or retried)."""


@dataclass(slots=True)
class NodeReport:
    """One node's Status, or why it could not be had."""

    endpoint: str
    status: operator_pb2.StatusResponse | None = None
    error: OpsError | None = None
    serving: bool | None = None
    """grpc.health.v1 (no token needed): SERVING only while the node knows a leader with a quorum."""
    discovered: bool = False
    """Not in --endpoints: found in another node's peer list."""
    node_id: str | None = None
    """The node's id: from its Status, or from a peer list when it did not answer."""


@dataclass
class OperatorClient:
    endpoints: Sequence[str]
    token: str | None = None
    tls: Tls | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    _channels: dict[str, grpc.Channel] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.endpoints = [e.strip() for e in self.endpoints if e.strip()]
        if not self.endpoints:
            raise OpsError(None, "no endpoints: give --endpoints host:port,... or set WAITGRAPH_ENDPOINTS")

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self) -> OperatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------------

    def channel(self, endpoint: str) -> grpc.Channel:
        if endpoint not in self._channels:
            options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
            if self.tls is None:
                self._channels[endpoint] = grpc.insecure_channel(endpoint, options=options)
            else:
                if self.tls.server_name:
                    options.append(("grpc.ssl_target_name_override", self.tls.server_name))
                self._channels[endpoint] = grpc.secure_channel(endpoint, self.tls.credentials(), options=options)
        return self._channels[endpoint]

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        if not self.token:
            raise OpsError(
                None, "no token: give --token or --token-file, or set WAITGRAPH_TOKEN (`waitgraph dev` prints one)"
            )
        return (("authorization", f"Bearer {self.token}"),)

    def call(self, endpoint: str, rpc: str, request: Message, timeout_s: float | None = None) -> Any:
        """One RPC on one node; an error is an :class:`OpsError` naming the node."""
        stub = operator_pb2_grpc.OperatorServiceStub(self.channel(endpoint))  # type: ignore[no-untyped-call]
        try:
            return getattr(stub, rpc)(request, metadata=self._metadata(), timeout=timeout_s or self.timeout_s)
        except grpc.RpcError as exc:
            raise OpsError.from_rpc(exc, endpoint) from None

    def serving(self, endpoint: str, timeout_s: float = 2.0) -> bool | None:
        """grpc.health.v1 Check on the whole server; None when the node cannot be reached."""
        stub = health_pb2_grpc.HealthStub(self.channel(endpoint))
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        except grpc.RpcError:
            return None
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    # -- reads ----------------------------------------------------------------------------------------

    def read(self, rpc: str, make: Callable[[bool], Message], fresh: bool | None = None) -> Read:
        """``make(fresh)`` builds the request. ``fresh`` None: fresh when possible, else stale
        and labelled; True: fresh or an error; False: this replica's state, no barrier."""
        errors: list[OpsError] = []
        if fresh is not False:
            for endpoint in self.endpoints:
                try:
                    return Read(
                        endpoint, self.call(endpoint, rpc, make(True), min(self.timeout_s, FRESH_TIMEOUT_S)), False
                    )
                except OpsError as exc:
                    if exc.code not in _RETRYABLE:
                        raise
                    if exc.code is grpc.StatusCode.DEADLINE_EXCEEDED:
                        exc.message = f"no log barrier passed within {FRESH_TIMEOUT_S:.0f}s (no leader with a quorum?)"
                    errors.append(exc)
            if fresh:
                raise most_telling(errors)
        for endpoint in self.endpoints:
            try:
                reply = self.call(endpoint, rpc, make(False))
            except OpsError as exc:
                if exc.code not in _RETRYABLE:
                    raise
                errors.append(exc)
                continue
            return Read(endpoint, reply, True, most_telling(errors).one_line() if errors else None)
        raise most_telling(errors)

    def status(self, endpoint: str, fresh: bool = False, digest: bool = False) -> operator_pb2.StatusResponse:
        reply: operator_pb2.StatusResponse = self.call(
            endpoint,
            "Status",
            operator_pb2.StatusRequest(fresh=fresh, include_digest=digest),
            min(self.timeout_s, FRESH_TIMEOUT_S) if fresh else None,
        )
        return reply

    def status_all(self, digest: bool = False, discover: bool = True, health: bool = False) -> list[NodeReport]:
        """Status of every endpoint and, with ``discover``, of every peer they name."""
        reports: list[NodeReport] = []
        seen: set[str] = set()
        queue = [(e, False) for e in self.endpoints]
        while queue:
            endpoint, discovered = queue.pop(0)
            if endpoint in seen:
                continue
            seen.add(endpoint)
            report = NodeReport(endpoint, discovered=discovered)
            try:
                report.status = self.status(endpoint, digest=digest)
            except OpsError as exc:
                report.error = exc
            if health:
                report.serving = self.serving(endpoint)
            reports.append(report)
            if discover and report.status is not None:
                queue += [(p.grpc_address, True) for p in report.status.peers if p.grpc_address]
        names = {p.grpc_address: p.node_id for r in reports if r.status is not None for p in r.status.peers}
        for r in reports:
            r.node_id = r.status.node_id if r.status is not None else names.get(r.endpoint)
        return reports

    def graph(
        self,
        run_id: str = "",
        agent_id: str = "",
        limit: int = 0,
        fresh: bool | None = None,
        statuses: Sequence[int] = (),
        around: Sequence[str] = (),
        hops: int = 0,
    ) -> Read:
        return self.read(
            "Graph",
            lambda f: operator_pb2.GraphRequest(
                run_id=run_id, agent_id=agent_id, limit=limit, fresh=f, statuses=statuses, around=around, hops=hops
            ),
            fresh,
        )

    def cycles(self, include_closed: bool = False, fresh: bool | None = None) -> Read:
        return self.read("Cycles", lambda f: operator_pb2.CyclesRequest(include_closed=include_closed, fresh=f), fresh)

    def explain(self, decision_id: str = "", digest: str = "", fresh: bool | None = None) -> Read:
        return self.read(
            "ExplainDecision",
            lambda f: operator_pb2.ExplainDecisionRequest(decision_id=decision_id, digest=digest, fresh=f),
            fresh,
        )

    def list_decisions(
        self, run_id: str = "", kind: int = 0, since_ms: int = 0, limit: int = 0, fresh: bool | None = None
    ) -> Read:
        return self.read(
            "ListDecisions",
            lambda f: operator_pb2.ListDecisionsRequest(
                run_id=run_id, kind=kind, since_ms=since_ms, limit=limit, fresh=f
            ),
            fresh,
        )

    def signature_history(self, signature: str, fresh: bool | None = None) -> Read:
        return self.read(
            "SignatureHistory",
            lambda f: operator_pb2.SignatureHistoryRequest(signature=signature, fresh=f),
            fresh,
        )

    def history(
        self, run_id: str = "", execution_id: str = "", decision_id: str = "", limit: int = 0, target_id: str = ""
    ) -> Read:
        """Retired records from the history store of the first endpoint that answers (each node
        keeps its own; they hold the same records once they applied the same passes)."""
        request = operator_pb2.HistoryRequest(
            run_id=run_id, execution_id=execution_id, decision_id=decision_id, limit=limit, target_id=target_id
        )
        return self.read("History", lambda _fresh: request, False)

    def convergence(self, run_id: str = "", fresh: bool | None = None) -> Read:
        return self.read("Convergence", lambda f: operator_pb2.ConvergenceRequest(run_id=run_id, fresh=f), fresh)

    def export_pending(self, fresh: bool | None = None) -> Read:
        return self.read("ExportPending", lambda f: operator_pb2.ExportPendingRequest(fresh=f), fresh)

    def resolve_digest(self, prefix: str, fresh: bool | None = None) -> str:
        """A full recovery digest from a unique prefix (``git``-style), looked up among the proposals
        and the current candidates."""

        def known() -> list[str]:
            reply = self.cycles(include_closed=True, fresh=fresh).reply
            return [p.digest for p in reply.proposals] + [c.digest for c in reply.cycles]

        return resolve_prefix(prefix, 64, known, "recovery digest", "`waitgraph cycles --all` lists them")

    def resolve_signature(self, prefix: str, fresh: bool | None = None) -> str:
        """A full cycle signature from a unique prefix, the same way as :meth:`resolve_digest`."""

        def known() -> list[str]:
            reply = self.cycles(include_closed=True, fresh=fresh).reply
            return [p.signature for p in reply.proposals] + [c.signature for c in reply.cycles]

        return resolve_prefix(prefix, 16, known, "cycle signature", "`waitgraph cycles --all` lists them")

    # -- writes ---------------------------------------------------------------------------------------

    def write(self, rpc: str, request: Any, request_id: str | None = None) -> Write:
        """Send a write until a node answers; retries keep the request id, so they are safe."""
        rid = request_id or getattr(request, "request_id", "") or f"cli-{uuid.uuid4().hex}"
        request.request_id = rid  # every <Rpc>Request of a write has one (commands.proto)
        try:
            endpoint, reply, hops = self._to_leader(rpc, request)
        except OpsError as err:
            if err.code is grpc.StatusCode.DEADLINE_EXCEEDED:
                err.message = (
                    f"no answer within {self.timeout_s:g}s: the write may have been applied; repeat it with "
                    f"--request-id {rid} to get its recorded outcome"
                )
            raise
        return Write(endpoint, rid, convert.outcome_from_proto(reply), hops)

    def _to_leader(self, rpc: str, request: Any) -> tuple[str, Any, tuple[str, ...]]:
        """Send ``request`` until a node answers (following leader hints): (endpoint, reply, hops)."""
        hops: list[str] = []
        last: OpsError | None = None
        failures: list[OpsError] = []
        deadline = time.monotonic() + WRITE_BUDGET * self.timeout_s
        for round_no in range(WRITE_ROUNDS):
            if time.monotonic() >= deadline:
                break
            if round_no:
                time.sleep(0.5 * round_no)
            pending = list(self.endpoints)
            if last is not None and last.leader:
                pending.insert(0, last.leader)
            tried: set[str] = set()
            while pending and time.monotonic() < deadline:
                endpoint = pending.pop(0)
                if endpoint in tried:
                    continue
                tried.add(endpoint)
                hops.append(endpoint)
                try:
                    reply = self.call(
                        endpoint, rpc, request, max(0.5, min(self.timeout_s, deadline - time.monotonic()))
                    )
                except OpsError as exc:
                    if exc.code not in _RETRYABLE:
                        raise
                    last = exc
                    failures.append(exc)
                    if exc.retry_same_id:
                        time.sleep(0.2)
                        tried.discard(endpoint)  # the same node may have the answer now
                        if hops.count(endpoint) < 3:
                            pending.insert(0, endpoint)
                    elif exc.leader and exc.leader not in tried:
                        pending.insert(0, exc.leader)  # the leader hint
                    continue
                return endpoint, reply, tuple(hops)
        raise most_telling(failures)

    # -- membership -----------------------------------------------------------------------------------

    def list_members(self) -> tuple[str, operator_pb2.ListMembersResponse]:
        """The membership as the first node that answers has it (the leader's, when it is given first)."""
        errors: list[OpsError] = []
        for endpoint in self.endpoints:
            try:
                return endpoint, self.call(endpoint, "ListMembers", operator_pb2.ListMembersRequest())
            except OpsError as exc:
                if exc.code not in _RETRYABLE:
                    raise
                errors.append(exc)
        raise most_telling(errors)

    def add_member(
        self, node_id: str, raft_address: str, grpc_address: str = ""
    ) -> tuple[str, operator_pb2.MemberChangeResponse]:
        """One membership change on the leader (leader hints followed). A change has no request id:
        a retry after an unknown outcome is refused by the leader's guards (``already_member``,
        ``change_pending``), never applied twice; ``waitgraph member list`` shows where it stands."""
        request = operator_pb2.AddMemberRequest(node_id=node_id, raft_address=raft_address, grpc_address=grpc_address)
        endpoint, reply, _ = self._to_leader("AddMember", request)
        return endpoint, reply

    def remove_member(self, node_id: str) -> tuple[str, operator_pb2.MemberChangeResponse]:
        endpoint, reply, _ = self._to_leader("RemoveMember", operator_pb2.RemoveMemberRequest(node_id=node_id))
        return endpoint, reply

    def vote(self, digest: str, approve: bool = True, request_id: str | None = None) -> Write:
        return self.write("Vote", commands_pb2.VoteRequest(digest=digest, approve=approve), request_id)

    def set_mode(
        self,
        mode: int | None,
        run_id: str | None = None,
        side_effect_free: bool | None = None,
        request_id: str | None = None,
    ) -> Write:
        request = commands_pb2.SetModeRequest()
        if mode is not None:
            request.mode = mode  # type: ignore[assignment]
        if run_id is not None:
            request.run_id = run_id
        if side_effect_free is not None:
            request.side_effect_free = side_effect_free
        return self.write("SetMode", request, request_id)

    def set_approver(self, approver_id: str | None, run_id: str | None = None, request_id: str | None = None) -> Write:
        """Name (or with ``approver_id`` None remove) the cluster's or one run's independent approver."""
        request = commands_pb2.SetApproverRequest()
        if approver_id is not None:
            request.approver_id = approver_id
        if run_id is not None:
            request.run_id = run_id
        return self.write("SetApprover", request, request_id)

    def freeze(self, reason: str, run_id: str | None = None, request_id: str | None = None) -> Write:
        request = commands_pb2.FreezeRequest(reason=reason)
        if run_id is not None:
            request.run_id = run_id
        return self.write("Freeze", request, request_id)

    def unfreeze(self, reason: str, run_id: str | None = None, request_id: str | None = None) -> Write:
        request = commands_pb2.UnfreezeRequest(reason=reason)
        if run_id is not None:
            request.run_id = run_id
        return self.write("Unfreeze", request, request_id)

    def cancel_run(
        self,
        run_id: str,
        reason: str,
        observed_cancel_generation: int | None = None,
        request_id: str | None = None,
    ) -> Write:
        """CancelRun needs the cancel generation the caller saw; read it from the run when not given."""
        if observed_cancel_generation is None:
            runs = [r for r in self.graph(run_id=run_id, limit=1).reply.runs if r.run_id == run_id]
            if not runs:
                raise OpsError(grpc.StatusCode.NOT_FOUND, f"there is no run {run_id!r} (`waitgraph graph` lists them)")
            observed_cancel_generation = runs[0].cancel_generation
        return self.write(
            "CancelRun",
            commands_pb2.CancelRunRequest(
                run_id=run_id, observed_cancel_generation=observed_cancel_generation, reason=reason
            ),
            request_id,
        )

    # -- waiting ---------------------------------------------------------------------------------------

    def wait_for_leader(self, timeout_s: float = 30.0, recovery: bool = True) -> operator_pb2.StatusResponse:
        """The leader's Status once every reachable endpoint agrees on it, it has a quorum and (with
        ``recovery``) the recovery configuration is in the state."""
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            reports = self.status_all(discover=False)
            answered = [r.status for r in reports if r.status is not None]
            leaders = {s.leader_id for s in answered}
            leader = next((s for s in answered if s.role == "leader"), None)
            if len(answered) == len(reports) and len(leaders) == 1 and leader is not None and leader.has_quorum:
                if not recovery or leader.recovery_configured:
                    return leader
                last = f"leader {leader.node_id} has not configured recovery yet"
            else:
                errors = [r.error.one_line() for r in reports if r.error is not None]
                last = "; ".join(errors) or f"nodes see leaders {sorted(leaders)}"
            time.sleep(0.2)
        raise OpsError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no agreed leader after {timeout_s:.0f}s ({last})")
