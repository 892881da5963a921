"""The connection under the asynchronous client: endpoints, retries, typed errors, the event
stream, operator reads. :mod:`waitgraph.sdk.client` adds sessions on top.

Rules kept here:
- Connect to any node. A write carries one request id (uuid4) for all its attempts. Retried,
  always with that *same* id: a refusal that changed nothing (``rate_limited`` after the node's
  ``retry_after_ms``, ``too_many_outstanding`` with backoff, UNAVAILABLE not-leader following the
  ``waitgraph-leader`` hint, no leader or nobody reachable in a failover on the next node, a read
  that failed on its node with ``read_failed`` on the next node) and an outcome unknown
  (``waitgraph-retry: same-request-id``, a deadline, a dropped connection), so the cluster's
  idempotency table answers instead of applying twice. Any other failure is
  raised at once as a typed :mod:`waitgraph.sdk.errors` exception: it is an answer.
- Retries stop at ``retry_deadline_s`` (or after ``retry_rounds`` passes over the endpoints
  without an answer), raising the most telling failure (:func:`~.errors.most_telling`:
  :class:`~.errors.OutcomeUnknown`, :class:`~.errors.Unavailable`, :class:`~.errors.RateLimited`,
  :class:`~.errors.Overloaded`); a wait the node asks for that would end past the deadline is not
  waited out. Every address a call tried is recorded, in order (:class:`Receipt` ``hops``).
- AgentService writes are coalesced (:class:`Batching`, :class:`WriteBatcher`): the writes
  issued in one event-loop iteration by every task sharing the client leave as one WriteBatch
  call per node. Each write keeps its own request id, result, typed error and retry loop above;
  a retried write simply joins a later batch.
- The event stream (:meth:`Connection.events`) keeps the cursor of the last event it delivered and
  resumes after it on any node; a cursor older than the node's horizon restarts it at the head
  (counted in :attr:`StreamStats.resyncs`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import grpc
from google.protobuf.message import Message

from waitgraph.proto.v1 import agent_pb2, agent_pb2_grpc, operator_pb2, operator_pb2_grpc
from waitgraph.statemachine.commands import Command
from waitgraph.statemachine.outcome import Outcome
from waitgraph.wire import convert

from . import tracing
from ._mux import EventMux, StreamStats, WatchedEvent
from .errors import (
    CursorExpired,
    Internal,
    Overloaded,
    PermissionDenied,
    RateLimited,
    RpcError,
    SessionClosed,
    error_from_result,
    error_from_rpc,
    most_telling,
)

logger = logging.getLogger("waitgraph.sdk")

__all__ = ["TLS", "Batching", "Connection", "Receipt", "StreamStats", "TokenSource", "WatchedEvent", "WriteBatcher"]

_OPERATOR_RPC: dict[type[Command], str] = {cls: rpc for rpc, cls in convert.OPERATOR_WRITES.items()}
_AGENT_RPC: dict[type[Command], str] = {cls: rpc for rpc, cls in convert.AGENT_WRITES.items()}
_SERVICES = {"agent": tracing.AGENT_SERVICE, "operator": tracing.OPERATOR_SERVICE}
"""A span's service name (``rpc.method`` is ``<service>/<method>``)."""
_WRITE_BATCH = f"{tracing.AGENT_SERVICE}/WriteBatch"


@dataclass(frozen=True, slots=True)
class TLS:
    """TLS for the gRPC channels: the CA to trust (None: the system's), and a client certificate
    and key for mTLS. ``server_name`` overrides the name checked in the server's certificate."""

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    server_name: str | None = None

    @classmethod
    def from_files(
        cls,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        server_name: str | None = None,
    ) -> TLS:
        """PEM files: the CA bundle, and the client certificate and its key (mTLS)."""

        def read(p: str | Path | None) -> bytes | None:
            return Path(p).read_bytes() if p is not None else None

        return cls(read(ca), read(cert), read(key), server_name)

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.root_certificates, self.private_key, self.certificate_chain)


TokenSource = str | Callable[[], str]
"""A bearer token, or a function that returns one when a call is sent (a token that is rotated,
or that a tool finds only when it needs it: its error is the call's)."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """A write's answer and how it got there."""

    outcome: Outcome
    request_id: str
    endpoint: str
    """The node that answered (the leader, after a hint)."""
    hops: tuple[str, ...]
    """Every address tried, in order (more than one: redirected or retried)."""


def new_request_id() -> str:
    return uuid.uuid4().hex


FRESH_TIMEOUT_S = 3.0
"""A log barrier that has not passed by then will not pass soon (no leader with a quorum)."""


UNANSWERED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
"""Statuses that say the node could not answer (down, no leader, too slow): another node may."""
_ITEM_OVERHEAD = 8
"""Bytes a WriteItem adds to a WriteBatchRequest besides its own size (tag and length), at most."""


@dataclass(frozen=True, slots=True)
class Batching:
    """How a :class:`Client` coalesces AgentService writes into WriteBatch calls.

    Writes issued in the same event-loop iteration (by any number of sessions, agents or tasks
    sharing the client) leave together as one WriteBatch per node, after ``linger_s`` when it is
    above 0; a batch leaves at once when it reaches ``max_items`` or ``max_bytes``. Every caller
    awaits its own write's result; errors, retries (same request id) and leader hints are per
    write, exactly as without batching. ``max_bytes`` stays below the server's 64 KiB request
    limit; a write too large for it goes alone as its unary RPC.
    """

    enabled: bool = True
    linger_s: float = 0.0
    max_items: int = 256
    max_bytes: int = 60 * 1024

    def __post_init__(self) -> None:
        if not 1 <= self.max_items <= 1024:
            raise ValueError("Batching.max_items must be 1..1024 (the server's limit)")
        if not 1024 <= self.max_bytes <= 64 * 1024 - 1024:
            raise ValueError("Batching.max_bytes must be 1 KiB..63 KiB (the server takes 64 KiB per request)")
        if self.linger_s < 0:
            raise ValueError("Batching.linger_s must be >= 0")


class _ItemFailed(Exception):
    """A WriteBatch item came back with an error (the call itself succeeded)."""

    def __init__(self, error: RpcError) -> None:
        super().__init__(error.message)
        self.error = error


class WriteBatcher:
    """The writes waiting to leave for one node, and the WriteBatch calls that carry them.

    Every flush sends one call and does not wait for earlier ones: writes of different batches
    may be applied in either order, like concurrent unary calls; the writes of one batch are
    applied in the order they were issued.
    """

    def __init__(self, transport: Transport, address: str) -> None:
        self.transport = transport
        self.address = address
        self._items: list[agent_pb2.WriteItem] = []
        self._futures: list[asyncio.Future[agent_pb2.WriteResult]] = []
        self._contexts: list[Any] = []
        """Each item's caller's trace context (None: untraced): the batch's span links to them."""
        self._bytes = 0
        self._handle: asyncio.Handle | asyncio.TimerHandle | None = None
        self._calls: set[asyncio.Task[None]] = set()
        self.batches_sent = 0
        self.items_sent = 0

    def submit(self, item: agent_pb2.WriteItem) -> asyncio.Future[agent_pb2.WriteResult]:
        loop = asyncio.get_running_loop()
        cfg = self.transport.batching
        size = item.ByteSize() + _ITEM_OVERHEAD
        if self._items and self._bytes + size > cfg.max_bytes:
            self.flush()
        fut: asyncio.Future[agent_pb2.WriteResult] = loop.create_future()
        self._items.append(item)
        self._futures.append(fut)
        self._contexts.append(tracing.current_context())
        self._bytes += size
        if len(self._items) >= cfg.max_items:
            self.flush()
        elif self._handle is None:
            self._handle = loop.call_later(cfg.linger_s, self.flush) if cfg.linger_s else loop.call_soon(self.flush)
        return fut

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self._items:
            return
        items, futures, contexts = self._items, self._futures, self._contexts
        self._items, self._futures, self._contexts, self._bytes = [], [], [], 0
        task = asyncio.get_running_loop().create_task(self._send(items, futures, contexts))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _send(
        self,
        items: list[agent_pb2.WriteItem],
        futures: list[asyncio.Future[agent_pb2.WriteResult]],
        contexts: list[Any],
    ) -> None:
        transport = self.transport
        self.batches_sent += 1
        self.items_sent += len(items)
        stub = transport.agent_stub(self.address)
        request = agent_pb2.WriteBatchRequest(items=items)
        # The batch's span is a child of its first traced write's caller and links to the others.
        traced = [c for c in contexts if c is not None]
        try:
            reply = await tracing.call(
                lambda md: stub.WriteBatch(request, metadata=md, timeout=transport.call_timeout_s),
                _WRITE_BATCH,
                self.address,
                transport.metadata,
                [tracing.link_to(c) for c in traced[1:]] or None,
                traced[0] if traced else None,
            )
            results = list(reply.results)
            if len(results) != len(items):
                raise Internal(
                    f"{self.address} answered {len(results)} results for {len(items)} writes",
                    status=grpc.StatusCode.INTERNAL,
                    endpoint=self.address,
                )
        except asyncio.CancelledError:
            for fut in futures:
                fut.cancel()
            raise
        except Exception as exc:  # the whole call failed: every write of it sees the error
            for fut in futures:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for fut, result in zip(futures, results, strict=True):
            if not fut.done():
                fut.set_result(result)

    def fail_pending(self, exc: BaseException) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        futures, self._items, self._futures, self._contexts, self._bytes = self._futures, [], [], [], 0
        for fut in futures:
            if not fut.done():
                fut.set_exception(exc)


class Transport:
    """Channels to the endpoints, the current endpoint, and the retry loop of one call."""

    def __init__(
        self,
        endpoints: Sequence[str],
        token: TokenSource,
        tls: TLS | bool | None,
        call_timeout_s: float,
        retry_deadline_s: float,
        interceptors: Sequence[Any] | None,
        batching: Batching | None = None,
        retry_rounds: int | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("give at least one endpoint (host:port)")
        self.endpoints: list[str] = list(dict.fromkeys(endpoints))
        self._current = 0
        self._token = token
        self._metadata = (("authorization", f"Bearer {token}"),) if isinstance(token, str) else None
        """Built once for a fixed token: it goes with every call of the hot path."""
        self.tls: TLS | None = TLS() if tls is True else (tls or None)
        self.call_timeout_s = call_timeout_s
        self.retry_deadline_s = retry_deadline_s
        self.retry_rounds = retry_rounds
        self.interceptors = list(interceptors or [])
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[tuple[str, str], Any] = {}
        """(service, address) -> its stub: building one makes a callable per RPC of the service."""
        self.batching = batching if batching is not None else Batching()
        self._batchers: dict[str, WriteBatcher] = {}
        self.closed = False

    @property
    def endpoint(self) -> str:
        return self.endpoints[self._current]

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        if self._metadata is not None:
            return self._metadata
        assert not isinstance(self._token, str)
        return (("authorization", f"Bearer {self._token()}"),)

    def channel(self, address: str) -> grpc.aio.Channel:
        if self.closed:
            raise SessionClosed("the client is closed")
        ch = self._channels.get(address)
        if ch is None:
            options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
            if self.tls is None:
                ch = grpc.aio.insecure_channel(address, options=options, interceptors=self.interceptors or None)
            else:
                if self.tls.server_name:
                    options.append(("grpc.ssl_target_name_override", self.tls.server_name))
                ch = grpc.aio.secure_channel(
                    address, self.tls.credentials(), options=options, interceptors=self.interceptors or None
                )
            self._channels[address] = ch
        return ch

    def agent_stub(self, address: str) -> Any:
        return self._stub("agent", agent_pb2_grpc.AgentServiceStub, address)

    def operator_stub(self, address: str) -> Any:
        return self._stub("operator", operator_pb2_grpc.OperatorServiceStub, address)

    def _stub(self, service: str, make: Callable[[grpc.aio.Channel], Any], address: str) -> Any:
        stub = self._stubs.get((service, address))
        if stub is None or self.closed:
            stub = self._stubs[(service, address)] = make(self.channel(address))
        return stub

    def rotate(self, away_from: str) -> None:
        """Move to the next endpoint, unless another call already moved away from ``away_from``."""
        if self.endpoint == away_from:
            self._current = (self._current + 1) % len(self.endpoints)

    def follow(self, leader: str) -> None:
        if leader not in self.endpoints:
            self.endpoints.append(leader)
        self._current = self.endpoints.index(leader)

    async def call(
        self,
        service: str,
        rpc: str,
        request: Message,
        request_id: str | None = None,
        metadata: tuple[tuple[str, str], ...] | None = None,
        hops: list[str] | None = None,
    ) -> Any:
        """One unary call with retries (see the module's rules); ``request_id`` names the write;
        every address tried is appended to ``hops``."""

        async def attempt(address: str, timeout: float) -> Any:
            return await self.call_at(address, service, rpc, request, timeout, request_id, metadata)

        return await self._retrying(rpc, request_id, attempt, hops)

    async def call_at(
        self,
        address: str,
        service: str,
        rpc: str,
        request: Message,
        timeout_s: float | None = None,
        request_id: str | None = None,
        metadata: tuple[tuple[str, str], ...] | None = None,
    ) -> Any:
        """One unary call on the node at ``address``, no retry: its failure is the typed error."""
        stub = self.agent_stub(address) if service == "agent" else self.operator_stub(address)
        invoke = getattr(stub, rpc)
        timeout = timeout_s or self.call_timeout_s
        try:
            return await tracing.call(
                lambda md: invoke(request, metadata=md, timeout=timeout),
                f"{_SERVICES[service]}/{rpc}",
                address,
                metadata or self.metadata,
            )
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, address, request_id) from None

    async def write(
        self, rpc: str, request: Message, request_id: str, token: str | None = None, hops: list[str] | None = None
    ) -> Any:
        """An AgentService write with the retries of :meth:`call`, coalesced with the other writes
        of this client into WriteBatch calls when batching is on (the module's rules); returns the
        ``Outcome`` message. ``token`` acts as another bearer token for this write only."""
        authorization = f"Bearer {token}" if token is not None else ""
        item = convert.write_item(rpc, request, authorization) if self.batching.enabled else None
        if item is None or item.ByteSize() + _ITEM_OVERHEAD > self.batching.max_bytes:
            return await self.call(  # one RPC of its own
                "agent", rpc, request, request_id, (("authorization", authorization),) if token else None, hops
            )

        md = (("authorization", authorization),) if authorization else None

        async def attempt(address: str, timeout: float) -> Any:
            if self.batching.enabled:
                try:
                    result = await self._batcher(address).submit(item)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                        raise
                    logger.warning("%s does not serve WriteBatch: writes go one RPC each from now on", address)
                    self.batching = dataclasses.replace(self.batching, enabled=False)
                else:
                    err = error_from_result(result, address, request_id)
                    if err is not None:
                        raise _ItemFailed(err)
                    return result.outcome
            return await self.call_at(address, "agent", rpc, request, timeout, request_id, md)

        return await self._retrying(rpc, request_id, attempt, hops)

    def _batcher(self, address: str) -> WriteBatcher:
        batcher = self._batchers.get(address)
        if batcher is None:
            batcher = self._batchers[address] = WriteBatcher(self, address)
        return batcher

    async def _retrying(
        self,
        rpc: str,
        request_id: str | None,
        attempt: Callable[[str, float], Awaitable[Any]],
        tried: list[str] | None = None,
    ) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_deadline_s
        backoff = 0.05
        tried_without_answer = 0
        hops = 0
        failures: list[RpcError] = []
        while True:
            address = self.endpoint
            remaining = deadline - loop.time()
            timeout = max(0.5, min(self.call_timeout_s, remaining))
            if tried is not None:
                tried.append(address)
            try:
                return await attempt(address, timeout)
            except grpc.aio.AioRpcError as exc:
                err = error_from_rpc(exc, address, request_id)
            except RpcError as exc:
                err = exc
            except _ItemFailed as failed:
                err = failed.error
            if not self._retryable(err.status, err):
                raise err
            failures.append(err)
            delay = backoff
            if isinstance(err, RateLimited):
                # The node said when its next token is due; the same node, the same id, then.
                delay = err.retry_after_s if err.retry_after_s is not None else backoff
            elif isinstance(err, Overloaded):
                pass  # nothing was queued: back off on the same node (writes go to the leader)
            elif err.leader and err.leader != address:
                self.follow(err.leader)  # the hint: go there at once (unless hints go round in circles)
                hops += 1
                delay = 0.0 if hops <= 3 else backoff
            elif err.retry_same_id:
                # Outcome unknown on a live node (a leader change in flight): same node, same id,
                # unless it keeps answering that way.
                tried_without_answer += 1
                if tried_without_answer >= 2:
                    self.rotate(address)
                    tried_without_answer = 0
            else:
                self.rotate(address)  # no answer (down, partitioned, too slow), or no leader known here
            if loop.time() + delay >= deadline or (
                self.retry_rounds is not None and len(failures) >= self.retry_rounds * len(self.endpoints)
            ):
                raise most_telling(failures)
            logger.debug("%s on %s: %s; retrying in %.2fs", rpc, address, err, delay)
            if delay:
                await asyncio.sleep(delay)
                backoff = min(backoff * 2, 1.0)

    @staticmethod
    def _retryable(status: grpc.StatusCode, err: RpcError) -> bool:
        # Unavailable / outcome unknown, or a refusal that did nothing (rate limit, backpressure,
        # a read whose forked reader failed on that node: reads change nothing, another node may).
        return status in UNANSWERED or isinstance(err, RateLimited | Overloaded) or err.code == "read_failed"

    async def close(self) -> None:
        self.closed = True
        for batcher in self._batchers.values():
            batcher.fail_pending(SessionClosed("the client is closed"))
        channels, self._channels = self._channels, {}
        self._stubs.clear()
        for ch in channels.values():
            await ch.close()


class Connection:
    """A connection to the cluster: endpoints, retries, batched writes, the event stream, reads.

    :class:`~waitgraph.sdk.client.Client` is this plus agent sessions; the arguments are described there.
    """

    default_service = "agent"
    """Where :meth:`submit` sends a command both services carry (CancelRun, VoteRecovery)."""

    def __init__(
        self,
        endpoints: Sequence[str],
        token: TokenSource,
        *,
        tls: TLS | bool | None = None,
        call_timeout_s: float = 10.0,
        retry_deadline_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        retry_rounds: int | None = None,
        lease_ms: int = 30_000,
        local_wait_threshold_s: float = 0.0,
        interceptors: Sequence[Any] | None = None,
        batching: Batching | None = None,
    ) -> None:
        self.transport = Transport(
            endpoints, token, tls, call_timeout_s, retry_deadline_s, interceptors, batching, retry_rounds
        )
        self.lease_ms = lease_ms
        self.local_wait_threshold_s = local_wait_threshold_s
        self.connect_timeout_s = connect_timeout_s
        """How long a session's first contact (its event stream opening on some endpoint) may
        take before it raises :class:`~.errors.Unavailable` naming the endpoints."""
        self.event_mux = EventMux(self.events)
        """The one event stream of every session of this client (cluster/sdk/_mux.py)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.event_mux.close()
        await self.transport.close()

    @property
    def endpoint(self) -> str:
        """The node the next call goes to first."""
        return self.transport.endpoint

    @property
    def endpoints(self) -> list[str]:
        """Every address this client knows: those it was given, then the leaders it was sent to."""
        return list(self.transport.endpoints)

    # -- writes --------------------------------------------------------------------------------

    async def submit(
        self,
        command: Command,
        *,
        request_id: str | None = None,
        service: str | None = None,
        token: str | None = None,
    ) -> Outcome:
        """Send one core command as its write RPC and return the core's outcome (the same as
        :meth:`submit_receipt`, without the receipt)."""
        receipt = await self.submit_receipt(command, request_id=request_id, service=service, token=token)
        return receipt.outcome

    async def submit_receipt(
        self,
        command: Command,
        *,
        request_id: str | None = None,
        service: str | None = None,
        token: str | None = None,
    ) -> Receipt:
        """Send one core command as its write RPC and return the core's outcome. A rejection
        raises; an answer is APPLIED (``outcome.ok``) or a recorded NOOP (``not
        outcome.ok``, ``outcome.noop_reason``: a late message of an old attempt, a repeat),
        ``outcome.duplicate`` when a retry was answered from the idempotency table.

        ``service``: ``agent`` or ``operator``; by default this client's :attr:`default_service`
        for a command both services carry (CancelRun, VoteRecovery: AgentService on :class:`Client`,
        OperatorService on :class:`~waitgraph.sdk.operator.OperatorClient`), and the one service
        that carries it otherwise. AgentService writes are batched with the client's other writes
        (:class:`Batching`). ``token``: act as this bearer token for this write instead of the
        client's (a runtime hosting many agents, each with its own token, on one client).
        The :class:`Receipt` also says which node answered and every address tried.
        """
        if service is None:
            agent_ok = type(command) in _AGENT_RPC
            operator_ok = type(command) in _OPERATOR_RPC
            service = "agent" if agent_ok and (self.default_service == "agent" or not operator_ok) else "operator"
        rpcs = _AGENT_RPC if service == "agent" else _OPERATOR_RPC
        rpc = rpcs.get(type(command), command.KIND)
        rid = request_id or new_request_id()
        request = convert.request_from_command(command, rid, rpc)
        hops: list[str] = []
        if service == "agent":
            try:
                reply = await self.transport.write(rpc, request, rid, token, hops)
            except PermissionDenied as exc:
                if type(command) not in _OPERATOR_RPC or exc.code != "wrong_role":
                    raise
                raise exc.with_hint(
                    f"an operator's {command.KIND} goes to OperatorService: use OperatorClient "
                    "(or submit(..., service='operator'))"
                ) from None
        else:
            md = (("authorization", f"Bearer {token}"),) if token is not None else None
            reply = await self.transport.call(service, rpc, request, rid, md, hops)
        return Receipt(convert.outcome_from_proto(reply), rid, hops[-1], tuple(hops))

    # -- raw operator reads (operator or admin tokens; typed reads: OperatorClient) ------------------

    async def status(
        self, address: str | None = None, *, fresh: bool = False, include_digest: bool = False
    ) -> operator_pb2.StatusResponse:
        """A node's Status: any node's (with retries), or with ``address`` that node's alone (one
        call; a ``fresh`` barrier gets at most :data:`FRESH_TIMEOUT_S`)."""
        request = operator_pb2.StatusRequest(fresh=fresh, include_digest=include_digest)
        reply: operator_pb2.StatusResponse
        if address is None:
            reply = await self.transport.call("operator", "Status", request)
        else:
            timeout_s = min(self.transport.call_timeout_s, FRESH_TIMEOUT_S) if fresh else None
            reply = await self.transport.call_at(address, "operator", "Status", request, timeout_s)
        return reply

    async def graph(
        self, *, run_id: str = "", agent_id: str = "", limit: int = 0, fresh: bool = False
    ) -> operator_pb2.GraphResponse:
        request = operator_pb2.GraphRequest(run_id=run_id, agent_id=agent_id, limit=limit, fresh=fresh)
        reply: operator_pb2.GraphResponse = await self.transport.call("operator", "Graph", request)
        return reply

    # -- events ------------------------------------------------------------------------------------

    async def events(
        self,
        *,
        after_cursor: int | None = None,
        kinds: Sequence[str] = (),
        agent_id: str = "",
        agent_ids: Sequence[str] = (),
        authorizations: Sequence[str] = (),
        stats: StreamStats | None = None,
        on_started: Callable[[int], None] | None = None,
        on_resync: Callable[[], None] | None = None,
        on_reconnect: Callable[[], None] | None = None,
    ) -> AsyncGenerator[WatchedEvent, None]:
        """``WatchEvents`` as an endless async iterator that survives node failures: it resumes
        after the last cursor it delivered, on the next endpoint. Without ``after_cursor`` it
        starts at the head of the first node it reaches; ``on_started(cursor)`` is called once the
        first stream is open (events after that cursor will all be delivered), ``on_resync()`` when
        the cursor expired and the stream restarted at a node's head (events were lost),
        ``on_reconnect()`` before each reopening. ``agent_ids``: several agents' events on the one
        stream; ``authorizations`` (``Bearer <token>`` each): the further tokens that may watch
        them (``WatchEventsRequest.authorizations``). ``stats.cursor`` follows the position."""
        stats = stats if stats is not None else StreamStats()
        transport = self.transport
        stats.cursor = after_cursor
        started = False
        backoff = 0.05
        while True:
            cursor = stats.cursor
            address = transport.endpoint
            request = agent_pb2.WatchEventsRequest(
                kinds=list(kinds), agent_id=agent_id, agent_ids=list(agent_ids), authorizations=list(authorizations)
            )
            if cursor is not None:
                request.after_cursor = cursor
            call = transport.agent_stub(address).WatchEvents(request, metadata=transport.metadata)
            try:
                async for msg in call:
                    body = msg.WhichOneof("body")
                    if body == "started":
                        if cursor is None:
                            cursor = stats.cursor = msg.started.cursor
                        if not started:
                            started = True
                            if on_started is not None:
                                on_started(cursor)
                        backoff = 0.05
                    elif body == "event":
                        ev = msg.event
                        if cursor is not None and ev.cursor <= cursor:
                            stats.duplicates += 1
                            logger.warning("event %d at or below cursor %d dropped", ev.cursor, cursor)
                            continue
                        # The position moves before the event is handed on: whoever reads it
                        # next (a stream opened to replace this one) resumes after the event.
                        cursor = stats.cursor = ev.cursor
                        stats.events += 1
                        yield WatchedEvent(
                            ev.cursor, ev.log_index, tuple(ev.agent_ids), convert.effect_from_proto(ev.effect)
                        )
                    elif body == "progress":
                        cursor = stats.cursor = max(cursor or 0, msg.progress.cursor)
                raise_again: RpcError | None = None  # the server ended the stream: reconnect
            except grpc.aio.AioRpcError as exc:
                err = error_from_rpc(exc, address, None)
                if isinstance(err, CursorExpired):
                    logger.warning("event cursor %s expired on %s: restarting at the head", cursor, address)
                    stats.resyncs += 1
                    stats.cursor = None
                    raise_again = None
                    if on_resync is not None:
                        on_resync()
                elif isinstance(err, RateLimited | Overloaded):
                    raise_again = None  # refused before it started: reopen after the node's wait
                    backoff = max(backoff, err.retry_after_s or backoff)
                elif exc.code() in UNANSWERED or exc.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL):
                    raise_again = None
                    transport.rotate(address)
                else:
                    raise_again = err
            finally:
                call.cancel()
            if raise_again is not None:
                raise raise_again
            if transport.closed:
                return
            stats.reconnects += 1
            if on_reconnect is not None:
                on_reconnect()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
