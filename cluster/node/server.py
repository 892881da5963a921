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
import threading
from collections.abc import Callable
from typing import Any
from wsgiref.simple_server import WSGIServer

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from waitgraph.node import logs
from waitgraph.node.clock import LogicalClock
from waitgraph.node.config import INSECURE_SECRET, ServeConfig
from waitgraph.node.errors import Stopped
from waitgraph.node.events import EventfulMachine, EventJournal
from waitgraph.node.loops import LoopConfig, Loops
from waitgraph.node.metrics import GrpcMetrics, MetricsServer, WaitgraphCollector
from waitgraph.node.metrics import serve as serve_metrics
from waitgraph.node.raft import RaftConfig, RaftNode
from waitgraph.node.service import AgentServicer, Gateway, OperatorServicer
from waitgraph.proto.v1 import agent_pb2, operator_pb2
from waitgraph.statemachine.codec import MAX_PAYLOAD_BYTES
from waitgraph.wire import convert

logger = logging.getLogger("waitgraph.node.server")

SERVICE_NAMES = (
    agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
    operator_pb2.DESCRIPTOR.services_by_name["OperatorService"].full_name,
)
MAX_RECEIVE_BYTES = 4 * MAX_PAYLOAD_BYTES
"""gRPC's own limit (RESOURCE_EXHAUSTED beyond it). Requests between the codec's 64 KiB and this
reach the handler and are refused as INVALID_ARGUMENT with their size, like every bad input."""
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


def grpc_options() -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
        ("grpc.max_send_message_length", 64 * 1024 * 1024),
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


HttpView = Callable[["NodeProcess", str, Any], tuple[WSGIServer, threading.Thread]]
"""Serves a node's web view on an address, with the node's /metrics WSGI app mounted beside it:
``(node, address, metrics_app) -> (server, its thread)``."""


class NodeProcess:
    def __init__(self, cfg: ServeConfig, http_view: HttpView | None = None) -> None:
        self.cfg = cfg
        self.http_view = http_view
        self.journal = EventJournal(cfg.event_ring)
        self.machine = EventfulMachine(self.journal, logs.DecisionLog(self._term, self._last_applied).applied)
        self.node = RaftNode(
            RaftConfig(
                raft_address=cfg.raft_address,
                peers=tuple(p.raft_address for p in cfg.peers if p.node_id != cfg.node_id),
                data_dir=cfg.data_dir,
                password=cfg.secret,
                submit_timeout_s=cfg.submit_timeout_s,
                fsync=cfg.fsync,
                log_compaction_min_entries=cfg.log_compaction_min_entries,
            ),
            machine=self.machine,
        )
        self.clock = LogicalClock(lambda: self.machine.state.now_ms)
        self.gateway = Gateway(cfg, self.node, self.journal, stamp=self.clock.now_ms)
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
            ),
            clock=self.clock.now_ms,
        )
        self._health_task: asyncio.Task[None] | None = None
        self.metrics: MetricsServer | None = None
        self.grpc_metrics = GrpcMetrics(SERVED_METHODS)
        self.http: MetricsServer | None = None
        self.stopping = asyncio.Event()

    def _term(self) -> int | None:
        try:
            return int(self.node.obj.raftCurrentTerm)
        except Stopped:
            return None

    def _log_context(self) -> dict[str, int]:
        """Term and epoch on every log line once the node runs (cluster/node/logs.py). Read without the
        machine lock: a line logged inside apply (which holds it) must not wait for it."""
        return {"term": int(self.node.obj.raftCurrentTerm), "epoch": self.machine.state.recovery.epoch}

    def _last_applied(self) -> int | None:
        try:
            return int(self.node.obj.raftLastApplied)
        except Stopped:
            return None

    async def start(self) -> None:
        problems = convert.check_schema()
        if problems:
            raise RuntimeError("the waitgraph.v1 messages do not match the core:\n" + "\n".join(problems))
        if self.cfg.metrics_address is not None:
            # Scrapes run on the metrics server's own thread, reading the replica under the
            # machine lock like the service's reads: never on this loop. Bound first, so a busy
            # port fails the start before Raft runs.
            self.metrics = serve_metrics(
                self.cfg.metrics_address,
                WaitgraphCollector(lambda fn: self.node.obj.read(fn), self.node.status),
                *self.grpc_metrics.collectors(),
            )
            logger.info("metrics: http://%s/metrics", self.cfg.metrics_address)
        if self.cfg.http_address is not None:
            self.http = self._serve_http(self.cfg.http_address)
        self.node.start()
        logs.add_context(self._log_context)
        self.journal.bind(self._last_applied, asyncio.get_running_loop())
        server = grpc.aio.server(options=grpc_options(), interceptors=[self.grpc_metrics])
        server.add_generic_rpc_handlers(
            (
                service_handler(AgentServicer(self.gateway), agent_pb2.DESCRIPTOR.services_by_name["AgentService"]),
                service_handler(
                    OperatorServicer(self.gateway), operator_pb2.DESCRIPTOR.services_by_name["OperatorService"]
                ),
            )
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            server,
        )
        creds = _credentials(self.cfg)
        if creds is None:
            server.add_insecure_port(self.cfg.grpc_address)
        else:
            server.add_secure_port(self.cfg.grpc_address, creds)
        await server.start()
        self.server = server
        self.loops.start()
        self._health_task = asyncio.get_running_loop().create_task(self._health_loop(), name="waitgraph-health")
        logger.info(
            "node %s: raft %s, grpc %s (%s), %d peers",
            self.cfg.node_id,
            self.cfg.raft_address,
            self.cfg.grpc_address,
            "TLS" if creds else "plaintext",
            len(self.cfg.peers) - 1,
        )

    def _serve_http(self, address: str) -> MetricsServer:
        """The live view and /metrics on one listener, read like /metrics: on the server's threads,
        under the machine lock, never on this loop. The view itself is an operator tool
        (waitgraph.ops.liveview); ``waitgraph serve`` hands it in as ``http_view``."""
        from prometheus_client import CollectorRegistry, make_wsgi_app

        if self.http_view is None:
            raise RuntimeError("--http-addr: this node was started without a live view (use `waitgraph serve`)")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(WaitgraphCollector(lambda fn: self.node.obj.read(fn), self.node.status))
        for collector in self.grpc_metrics.collectors():  # the same series as --metrics-addr
            registry.register(collector)
        httpd, thread = self.http_view(self, address, make_wsgi_app(registry))
        return MetricsServer(httpd, thread, registry)

    async def _health_loop(self) -> None:
        serving: bool | None = None
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
            await asyncio.sleep(HEALTH_PERIOD_S)

    async def stop(self) -> None:
        logger.info("stopping: health NOT_SERVING, draining for %.1fs", self.cfg.shutdown_grace_s)
        await self.health.enter_graceful_shutdown()
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        await self.loops.stop()
        self.journal.close()
        if self.server is not None:
            await self.server.stop(self.cfg.shutdown_grace_s)
        await self.node.stop()
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.stop)
        if self.http is not None:
            await asyncio.to_thread(self.http.stop)
        logger.info("stopped")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        await self.start()
        print(f"READY {self.cfg.node_id} grpc={self.cfg.grpc_address}", flush=True)
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
    asyncio.run(NodeProcess(cfg, http_view).run())
    return 0
