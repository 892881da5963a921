"""One node process: the Raft node, the gRPC API, the loops, and an orderly stop.

    waitgraph serve --id n1 --raft-addr 10.0.0.1:7001 --grpc-addr 10.0.0.1:50051 \\
        --peers n1=10.0.0.1:7001,n2=10.0.0.2:7001,n3=10.0.0.3:7001 \\
        --peer-grpc n1=10.0.0.1:50051,n2=10.0.0.2:50051,n3=10.0.0.3:50051 \\
        --data-dir /var/lib/waitgraph --secret-file /etc/waitgraph/secret \\
        --tokens-file /etc/waitgraph/tokens.toml --tls-cert cert.pem --tls-key key.pem

Start-up: check the wire schema against the core, start Raft, serve AgentService,
OperatorService, grpc.health.v1 (SERVING only while this node knows a leader with a quorum) and
reflection, start the loops, print ``READY <id> grpc=<address>``.

Stop (SIGTERM or SIGINT): health NOT_SERVING, loops stopped, event streams told to reconnect
elsewhere, no new RPCs, in-flight ones get ``shutdown_grace_s`` to finish, then Raft stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client.registry import Collector

from waitgraph.node import logs
from waitgraph.node import tracing as node_tracing
from waitgraph.node.clock import LogicalClock
from waitgraph.node.collector import tune_gc
from waitgraph.node.config import INSECURE_SECRET, ServeConfig
from waitgraph.node.errors import Stopped
from waitgraph.node.events import EventfulMachine, EventJournal
from waitgraph.node.front import Front, FrontError, find_binary, remove_upstream_socket, upstream_socket
from waitgraph.node.history import FILE_NAME, HistoryStore
from waitgraph.node.lessor import Lessor, sessions_mode
from waitgraph.node.loops import LoopConfig, Loops
from waitgraph.node.metrics import GrpcMetrics, MetricsServer, SessionsCollector, node_collectors
from waitgraph.node.metrics import serve as serve_metrics
from waitgraph.node.raft import JournalCorrupted, RaftConfig, RaftNode
from waitgraph.node.service import AgentServicer, Gateway, OperatorServicer
from waitgraph.proto.v1 import agent_pb2, operator_pb2
from waitgraph.statemachine import Envelope, Outcome, StateMachine
from waitgraph.statemachine.codec import MAX_PAYLOAD_BYTES
from waitgraph.statemachine.readiness import Readiness, readiness
from waitgraph.statemachine.state import State
from waitgraph.wire import convert

logger = logging.getLogger("waitgraph.node.server")

SERVICE_NAMES = (
    agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
    operator_pb2.DESCRIPTOR.services_by_name["OperatorService"].full_name,
)
RECOVERY_HEALTH = "waitgraph.v1.Recovery"
"""The health service name that is SERVING only while a recovery could commit: this node knows
a leader with a quorum and enough recovery voters are reachable (statemachine/readiness.py).
Load balancers check "" or a service name (writes); alerting and `waitgraph health` check this."""
MAX_RECEIVE_BYTES = 4 * MAX_PAYLOAD_BYTES
"""gRPC's own limit (RESOURCE_EXHAUSTED beyond it). Requests between the codec's 64 KiB and this
reach the handler and are refused as INVALID_ARGUMENT with their size, like every bad input."""
MAX_SEND_BYTES = 64 * 1024 * 1024
HEALTH_PERIOD_S = 0.2
SERVED_METHODS = (
    *(
        f"{service.full_name}/{method.name}"
        for module in (agent_pb2, operator_pb2, health_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    ),
    f"{reflection.SERVICE_NAME}/ServerReflectionInfo",
)
"""Every method this node serves: the ``method`` label of its gRPC metrics (cluster/node/metrics.py)."""


def service_handler(servicer: object, service: ServiceDescriptor) -> grpc.GenericRpcHandler:
    """What the generated ``add_*Servicer_to_server`` registers, except the request deserializer:
    bytes that are no request message reach the handler as :class:`convert.Undecodable` and are
    refused as INVALID_ARGUMENT (gRPC answers UNKNOWN when a deserializer raises)."""
    handlers = {}
    for method in service.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        make = grpc.unary_stream_rpc_method_handler if method.server_streaming else grpc.unary_unary_rpc_method_handler
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=convert.request_deserializer(request_cls),
            response_serializer=response_cls.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


class _CallDetails(NamedTuple):
    method: str
    invocation_metadata: tuple[tuple[str, str], ...] = ()


class _Recorder:
    """Stands in for a server to take the handlers a generated ``add_*_to_server`` registers."""

    def __init__(self) -> None:
        self.handlers: list[grpc.GenericRpcHandler] = []

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self.handlers.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        pass  # the same methods as the generic handler above: a faster lookup only


def unary_handlers(
    handlers: Sequence[grpc.GenericRpcHandler], methods: Sequence[str]
) -> dict[str, grpc.RpcMethodHandler]:
    """``method`` -> its handler, for each of ``methods`` that a handler serves as a unary call."""
    found: dict[str, grpc.RpcMethodHandler] = {}
    for method in methods:
        for generic in handlers:
            handler = generic.service(_CallDetails(f"/{method}"))
            if handler is not None:
                if handler.unary_unary is not None:
                    found[method] = handler
                break
    return found


def grpc_options() -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
        ("grpc.max_send_message_length", MAX_SEND_BYTES),
        # gRPC turns SO_REUSEPORT on by default: a second node on the same port would bind too.
        ("grpc.so_reuseport", 0),
    ]


def _credentials(cfg: ServeConfig) -> grpc.ServerCredentials | None:
    if cfg.tls_cert is None or cfg.tls_key is None:
        return None
    ca = cfg.tls_client_ca.read_bytes() if cfg.tls_client_ca is not None else None
    return grpc.ssl_server_credentials(
        [(cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes())],
        root_certificates=ca,
        require_client_auth=ca is not None,
    )


class HttpServer(Protocol):
    async def close(self) -> None: ...


HttpView = Callable[["NodeProcess", str, Any], Awaitable[HttpServer]]
"""Serves a node's web view on an address from the node's own event loop, with the node's
/metrics registry (a prometheus_client ``CollectorRegistry``) beside it:
``await http_view(node, address, registry)`` -> something to ``await ….close()`` on stop."""


class NodeProcess:
    def __init__(self, cfg: ServeConfig, http_view: HttpView | None = None) -> None:
        self.cfg = cfg
        self.http_view = http_view
        self.journal = EventJournal(cfg.event_ring)
        self.history = HistoryStore(
            cfg.data_dir / FILE_NAME,
            max_bytes=cfg.history_max_mb * 1024 * 1024,
            max_age_s=cfg.history_max_age_days * 86_400.0,
        )
        self.decision_log = logs.DecisionLog(self._term, self._last_applied)
        self.recovery_spans = node_tracing.RecoverySpans(lambda: self.node.is_leader(), cfg.node_id)
        self._traced = False
        """Spans are recorded (the OTEL_* variables configured tracing at start)."""
        self.machine = EventfulMachine(self.journal, self._on_applied)
        self.node = RaftNode(
            RaftConfig(
                raft_address=cfg.raft_address,
                peers=tuple(p.raft_address for p in cfg.peers if p.node_id != cfg.node_id),
                data_dir=cfg.data_dir,
                password=cfg.secret,
                submit_timeout_s=cfg.submit_timeout_s,
                raft_min_timeout_s=cfg.election_timeout_ms / 1000,
                raft_max_timeout_s=2 * cfg.election_timeout_ms / 1000,
                # A leader steps down when no majority answered for this long: never sooner than a
                # follower would stand (a raised election timeout covers longer stalls; localcluster).
                leader_fallback_timeout_s=max(1.5, 2 * cfg.election_timeout_ms / 1000),
                fsync=cfg.fsync,
                log_compaction_min_entries=cfg.log_compaction_min_entries,
                directory=tuple((p.raft_address, p.node_id, p.grpc_address or "") for p in cfg.peers),
            ),
            machine=self.machine,
        )
        self.clock = LogicalClock(lambda: self.machine.state.now_ms)
        self.lessor = Lessor(
            self.clock.now_ms,
            lambda: self.machine.state,
            max_sessions_per_node=cfg.max_sessions_per_node,
            max_sessions=cfg.max_sessions,
            mode=lambda: sessions_mode(self.node.member_features()),
        )
        self.node.on_relay(self.lessor.heard_relayed)
        self.gateway = Gateway(
            cfg, self.node, self.journal, stamp=self.clock.now_ms, history=self.history, lessor=self.lessor
        )
        self.health = health.aio.HealthServicer()
        self.server: grpc.aio.Server | None = None
        self.loops = Loops(
            self.node,
            LoopConfig(
                node_id=cfg.node_id,
                period_s=cfg.detect_interval_ms / 1000,
                housekeeping_s=cfg.housekeeping_interval_ms / 1000,
                bootstrap=cfg.recovery_command() if cfg.recovery_bootstrap else None,
                initial_mode=cfg.initial_mode,
                retention_ms=cfg.retention_ms,
                retire_s=cfg.retire_interval_ms / 1000,
            ),
            clock=self.clock.now_ms,
            lessor=self.lessor,
        )
        self._health_task: asyncio.Task[None] | None = None
        self.metrics: MetricsServer | None = None
        self.grpc_metrics = GrpcMetrics(SERVED_METHODS)
        self.http: HttpServer | None = None
        self.stopping = asyncio.Event()
        self.front: Front | None = None
        """The native gRPC front serving ``grpc_address``; None: this process's server serves it."""
        self._front_watch: asyncio.Task[None] | None = None
        self._stopping_front = False
        self._upstream: tuple[Path, Path | None] | None = None
        """With the front: the Unix socket this process's gRPC server listens on, and the
        temporary directory made for it (cluster/node/front.py ``upstream_socket``)."""
        self._front_kind = "python"
        """What serves the gRPC port: ``native`` (the front) or ``python`` (``waitgraph_build_info``)."""
        self.failed = False
        """Set when the node stops because a part of it failed (the front exited): exit status 1."""

    def _on_applied(self, env: Envelope, out: Outcome, state: State) -> None:
        """After each applied envelope (on the Raft tick thread): the decision log line, then the
        history store's records of a retirement pass (each guards its own failures)."""
        try:
            self.decision_log.applied(env, out, state)
        except Exception:  # a failing log line must not keep the records from the history store
            logger.exception("the decision log failed")
        try:
            self.recovery_spans.applied(env, out, state)
        except Exception:
            logger.exception("the recovery span failed")
        self.history.applied(env, out, state)

    def _term(self) -> int | None:
        try:
            return self.node.current_term()
        except Stopped:
            return None

    def _log_context(self) -> dict[str, int]:
        """Term and epoch on every log line once the node runs (cluster/node/logs.py). Read without the
        machine lock: a line logged inside apply (which holds it) must not wait for it."""
        return {"term": self.node.current_term(), "epoch": self.machine.state.recovery.epoch}

    def _last_applied(self) -> int | None:
        try:
            return self.node.applied_index()
        except Stopped:
            return None

    async def start(self) -> None:
        problems = convert.check_schema()
        if problems:
            raise RuntimeError("the waitgraph.v1 messages do not match the core:\n" + "\n".join(problems))
        self._traced = self.recovery_spans.enabled = node_tracing.configure(self.cfg.node_id)
        front_binary = self._front_binary()
        self._front_kind = "python" if front_binary is None else "native"
        self.gateway.grpc_front = self._front_kind
        if self.cfg.metrics_address is not None:
            # Scrapes run on the metrics server's own thread, reading the replica under the
            # machine lock like the service's reads: never on this loop. Bound first, so a busy
            # port fails the start before Raft runs.
            self.metrics = serve_metrics(
                self.cfg.metrics_address,
                *self._collectors(),
            )
            logger.info("metrics: http://%s/metrics", self.cfg.metrics_address)
        if self.cfg.http_address is not None:
            self.http = await self._serve_http(self.cfg.http_address)
        self.node.start()
        logs.add_context(self._log_context)
        self.journal.bind(self._last_applied, asyncio.get_running_loop())
        interceptors = [self.grpc_metrics, node_tracing.ServerSpans()] if self._traced else [self.grpc_metrics]
        server = grpc.aio.server(options=grpc_options(), interceptors=interceptors)
        health_handlers = _Recorder()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, health_handlers)
        handlers = (
            service_handler(AgentServicer(self.gateway), agent_pb2.DESCRIPTOR.services_by_name["AgentService"]),
            service_handler(
                OperatorServicer(self.gateway), operator_pb2.DESCRIPTOR.services_by_name["OperatorService"]
            ),
            *health_handlers.handlers,
        )
        server.add_generic_rpc_handlers(handlers)
        for name in ("", *SERVICE_NAMES, RECOVERY_HEALTH):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            server,
        )
        creds = _credentials(self.cfg)
        if front_binary is not None:
            self._upstream = upstream_socket(self.cfg.data_dir)
            server.add_insecure_port(f"unix:{self._upstream[0]}")  # the front's; only this user can connect
        elif creds is None:
            server.add_insecure_port(self.cfg.grpc_address)
        else:
            server.add_secure_port(self.cfg.grpc_address, creds)
        await server.start()
        self.server = server
        if front_binary is not None and self._upstream is not None:
            self._upstream[0].chmod(0o600)
            await self._start_front(front_binary, self._upstream[0], handlers)
        self.loops.start()
        self._health_task = asyncio.get_running_loop().create_task(self._health_loop(), name="waitgraph-health")
        logger.info(
            "node %s: raft %s, grpc %s (%s, %s), %d peers",
            self.cfg.node_id,
            self.cfg.raft_address,
            self.cfg.grpc_address,
            "TLS" if creds else "plaintext",
            "native front" if self.front is not None else "Python gRPC",
            len(self.cfg.peers) - 1,
        )

    def _front_binary(self) -> Path | None:
        """The native front to run, or None to serve gRPC from this process (``grpc_front``)."""
        if self.cfg.grpc_front == "python":
            return None
        binary = find_binary(self.cfg.grpc_front_binary)
        if binary is None:
            where = self.cfg.grpc_front_binary or "the package (scripts/build_front builds it)"
            if self.cfg.grpc_front == "native":
                raise FrontError(f"--grpc-front native: no executable front in {where}")
            logger.warning("no native gRPC front in %s: serving gRPC from Python (slower per call)", where)
        return binary

    async def _start_front(self, binary: Path, upstream: Path, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        relayed = unary_handlers(handlers, SERVED_METHODS)
        tls = None
        if self.cfg.tls_cert is not None and self.cfg.tls_key is not None:
            tls = (self.cfg.tls_cert, self.cfg.tls_key, self.cfg.tls_client_ca)
        front = Front(
            binary,
            listen=self.cfg.grpc_address,
            upstream=upstream,
            methods=[f"/{m}" for m in relayed],  # as gRPC names the method of a call
            handlers=[
                self.grpc_metrics.wrap(m, node_tracing.wrap(m, h) if self._traced else h) for m, h in relayed.items()
            ],
            on_burst=self.node.hold_lone_proposals,
            tls=tls,
            max_recv_bytes=MAX_RECEIVE_BYTES,
            max_send_bytes=MAX_SEND_BYTES,
        )
        await front.start()
        self.front = front
        self._front_watch = asyncio.get_running_loop().create_task(self._watch_front(front), name="waitgraph-front")

    async def _watch_front(self, front: Front) -> None:
        """The front is this node's gRPC port: without it the node serves nobody, so it stops,
        with a failure status, for its supervisor to start it again."""
        assert front.exited is not None
        status = await front.exited
        if self._stopping_front:
            return
        logger.critical("the gRPC front exited (status %s): stopping the node", status)
        self.failed = True
        self.stopping.set()

    async def _serve_http(self, address: str) -> HttpServer:
        """The live view and /metrics on one listener, served from this loop; what reads the
        replica does it off this loop's thread. The view itself is an operator tool
        (waitgraph.ops.liveweb); ``waitgraph serve`` hands it in as ``http_view``."""
        from prometheus_client import CollectorRegistry

        if self.http_view is None:
            raise RuntimeError("--http-addr: this node was started without a live view (use `waitgraph serve`)")
        registry = CollectorRegistry(auto_describe=False)
        for collector in self._collectors():
            registry.register(collector)  # the same series as --metrics-addr
        return await self.http_view(self, address, registry)

    def _collectors(self) -> tuple[Collector, ...]:
        """What /metrics serves, on --metrics-addr and on --http-addr alike."""

        def read(fn: Callable[[StateMachine], Any]) -> Any:
            return self.node.read_blocking(fn)

        sessions = SessionsCollector(
            read,
            lambda m: self.lessor.view(m.state, self.clock.now_ms()),
            lambda: dict(self.machine.applied_kinds),
            self.journal.subscriptions,
        )
        return node_collectors(read, self.node.status, self.grpc_metrics, self._front_kind, sessions)

    def recovery_readiness(self) -> Readiness:
        """This node's view: itself and the peers it is connected to. Reads the replicated voter
        set without the machine lock: one tuple attribute, replaced whole by ConfigureRecovery."""
        config = self.machine.state.recovery.config
        status = self.node.status()
        by_raft = {m.raft_address: m.node_id for m in status.members}  # the membership, as it changes
        up = {self.cfg.node_id, *(by_raft.get(a, a) for a, ok in status.peers_connected.items() if ok)}
        return readiness(config.voters, config.quorum, bool(config.voters), up)

    async def _health_loop(self) -> None:
        serving: bool | None = None
        recovering: bool | None = None
        while True:
            try:
                now = self.node.has_quorum()
            except Exception:
                now = False
            if now != serving:
                serving = now
                status = health_pb2.HealthCheckResponse.SERVING if now else health_pb2.HealthCheckResponse.NOT_SERVING
                for name in ("", *SERVICE_NAMES):
                    await self.health.set(name, status)
                logger.info("health: %s", "SERVING" if now else "NOT_SERVING (no leader with a quorum)")
            try:
                ready = self.recovery_readiness()
                can = now and ready.can_commit
                why = ready.describe() if now else "no leader with a quorum"
            except Exception as exc:  # stopped or restoring: no recovery either
                can, why = False, f"recovery readiness unknown: {exc!r}"
            if can != recovering:
                recovering = can
                serving_status = health_pb2.HealthCheckResponse
                await self.health.set(RECOVERY_HEALTH, serving_status.SERVING if can else serving_status.NOT_SERVING)
                logger.info("health %s: %s (%s)", RECOVERY_HEALTH, "SERVING" if can else "NOT_SERVING", why)
            await asyncio.sleep(HEALTH_PERIOD_S)

    async def stop(self) -> None:
        logger.info("stopping: health NOT_SERVING, draining for %.1fs", self.cfg.shutdown_grace_s)
        await self.health.enter_graceful_shutdown()
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        await self.loops.stop()
        if self.http is not None:  # its feeds end before Raft stops under them
            await self.http.close()
        self.journal.close()
        if self.front is not None:  # it drains its callers while this process still answers them
            self._stopping_front = True
            await self.front.stop(self.cfg.shutdown_grace_s)
        if self.server is not None:
            await self.server.stop(self.cfg.shutdown_grace_s if self.front is None else 0.5)
        if self._upstream is not None:
            remove_upstream_socket(*self._upstream)
        await self.node.stop()
        self.history.close()
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.stop)
        if self._traced:
            await asyncio.to_thread(node_tracing.shutdown)  # the last spans leave before the process
        logger.info("stopped")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        try:
            await self.start()
        except BaseException:
            await self.stop()  # what did start (Raft, the servers) stops again
            raise
        tune_gc()
        print(f"READY {self.cfg.node_id} grpc={self.cfg.grpc_address} front={self._front_kind}", flush=True)
        try:
            await self.stopping.wait()
        finally:
            await self.stop()


def main(cfg: ServeConfig, http_view: HttpView | None = None) -> int:
    logs.configure(cfg.node_id, cfg.log_level, cfg.log_format, sys.stderr)
    if cfg.secret == INSECURE_SECRET:
        logger.warning("--insecure: no cluster secret protects the Raft port; loopback development only")
    if cfg.tls_cert is None:
        logger.warning("no TLS: bearer tokens travel in clear text (%s)", cfg.grpc_address)
    node = NodeProcess(cfg, http_view)
    try:
        asyncio.run(node.run())
    except (JournalCorrupted, FrontError) as exc:
        logger.critical("not starting: %s", exc)
        print(f"waitgraph serve: not starting: {exc}", file=sys.stderr)
        return 2
    return 1 if node.failed else 0
