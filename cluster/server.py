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

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from proto.waitgraph.v1 import agent_pb2, agent_pb2_grpc, operator_pb2, operator_pb2_grpc
from statemachine.codec import MAX_PAYLOAD_BYTES

from . import convert
from .config import INSECURE_SECRET, ServeConfig
from .errors import Stopped
from .events import EventfulMachine, EventJournal
from .loops import LoopConfig, Loops
from .metrics import MetricsServer, WaitgraphCollector
from .metrics import serve as serve_metrics
from .raft import RaftConfig, RaftNode
from .service import AgentServicer, Gateway, OperatorServicer

logger = logging.getLogger("waitgraph.cluster.server")

SERVICE_NAMES = (
    agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
    operator_pb2.DESCRIPTOR.services_by_name["OperatorService"].full_name,
)
MAX_RECEIVE_BYTES = 4 * MAX_PAYLOAD_BYTES
"""gRPC's own limit (RESOURCE_EXHAUSTED beyond it). Requests between the codec's 64 KiB and this
reach the handler and are refused as INVALID_ARGUMENT with their size, like every bad input."""
HEALTH_PERIOD_S = 0.2


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


class NodeProcess:
    def __init__(self, cfg: ServeConfig) -> None:
        self.cfg = cfg
        self.journal = EventJournal(cfg.event_ring)
        self.node = RaftNode(
            RaftConfig(
                raft_address=cfg.raft_address,
                peers=tuple(p.raft_address for p in cfg.peers if p.node_id != cfg.node_id),
                data_dir=cfg.data_dir,
                password=cfg.secret,
                submit_timeout_s=cfg.submit_timeout_s,
            ),
            machine=EventfulMachine(self.journal),
        )
        self.gateway = Gateway(cfg, self.node, self.journal)
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
        )
        self._health_task: asyncio.Task[None] | None = None
        self.metrics: MetricsServer | None = None
        self.stopping = asyncio.Event()

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
            )
            logger.info("metrics: http://%s/metrics", self.cfg.metrics_address)
        self.node.start()
        self.journal.bind(self._last_applied, asyncio.get_running_loop())
        server = grpc.aio.server(options=grpc_options())
        # The generated registration functions are untyped.
        agent_pb2_grpc.add_AgentServiceServicer_to_server(AgentServicer(self.gateway), server)  # type: ignore[no-untyped-call]
        operator_pb2_grpc.add_OperatorServiceServicer_to_server(  # type: ignore[no-untyped-call]
            OperatorServicer(self.gateway), server
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


def main(cfg: ServeConfig) -> int:
    logging.basicConfig(
        level=cfg.log_level,
        stream=sys.stderr,
        format=f"%(asctime)s {cfg.node_id} %(name)s %(levelname)s %(message)s",
    )
    if cfg.secret == INSECURE_SECRET:
        logger.warning("--insecure: no cluster secret protects the Raft port; loopback development only")
    if cfg.tls_cert is None:
        logger.warning("no TLS: bearer tokens travel in clear text (%s)", cfg.grpc_address)
    asyncio.run(NodeProcess(cfg).run())
    return 0
