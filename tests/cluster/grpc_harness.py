"""``waitgraph serve`` processes on loopback for the gRPC tests, and small async clients.

Each node is ``waitgraph serve`` in its own process, started, killed and restarted by the one
launcher (:class:`~waitgraph.dev.localcluster.LocalCluster`), with the tests' fixed tokens
(:data:`TOKENS`: names the tests' actors carry, an expired one); tests talk to it over gRPC only.
:class:`GrpcCluster` kills every process it started when it is closed, whatever happened.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from waitgraph.dev.localcluster import LocalCluster, NodeHandle
from waitgraph.node.front import BINARY, find_binary
from waitgraph.proto.v1 import agent_pb2, agent_pb2_grpc, operator_pb2, operator_pb2_grpc
from waitgraph.statemachine.commands import Command
from waitgraph.statemachine.outcome import Outcome
from waitgraph.wire import convert

T = TypeVar("T")
SECRET = base64.b64encode(os.urandom(32)).decode()
"""256 random bits: a node refuses a weak cluster secret."""
TOKENS = {
    "a": "agent-a-token-0123456789",
    "b": "agent-b-token-0123456789",
    "c": "agent-c-token-0123456789",
    "ops": "operator-token-0123456789",
    "root": "admin-token-0123456789ab",
    "old": "expired-token-0123456789",
}


FRONT_REQUIRED = os.environ.get("WAITGRAPH_FRONT_REQUIRED") == "1"
"""Set by .ci/run, which builds the native gRPC front: a test that needs it fails instead of skipping."""
FRONTS = ("native", "python")
"""What can serve a node's gRPC port (``waitgraph serve --grpc-front``)."""


def front_args(front: str) -> list[str]:
    """The ``waitgraph serve`` flags of a test that runs with each front. The native one is
    skipped where it is not built, and fails where it must be (CI)."""
    if front == "native" and find_binary() is None:
        why = f"the native gRPC front is not built ({BINARY}: scripts/build_front needs Go)"
        if FRONT_REQUIRED:
            pytest.fail(why + " but WAITGRAPH_FRONT_REQUIRED=1")
        pytest.skip(why)
    return ["--grpc-front", front]


TOKEN_ENTRIES = [
    {"name": f"agent-{a}", "role": "agent", "agent_id": a, "token": TOKENS[a]} for a in ("a", "b", "c")
] + [
    {"name": "ops", "role": "operator", "token": TOKENS["ops"]},
    {"name": "root", "role": "admin", "token": TOKENS["root"]},
    {"name": "old", "role": "operator", "token": TOKENS["old"], "expires_at": "2020-01-01T00:00:00Z"},
]
"""The servers' tokens file of every :class:`GrpcCluster`."""


def token_file(path: Path) -> Path:
    """:data:`TOKEN_ENTRIES` as a tokens file, for a test that configures one node itself."""
    path.write_text(json.dumps({"tokens": TOKEN_ENTRIES}))
    return path


def auth(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[name]}"),)


class GrpcNode(NodeHandle):
    """One node of a :class:`GrpcCluster`: the launcher's node, and a channel to it."""

    def channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.grpc)


class GrpcCluster:
    def __init__(
        self,
        root: Path,
        size: int = 3,
        extra_args: list[str] | None = None,
        *,
        extra_tokens: list[dict[str, Any]] | None = None,
        http: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        """``extra_tokens``: entries added to :data:`TOKEN_ENTRIES`; ``http``: each node serves
        /metrics (its address: ``node.member.http_address``); ``env``: variables every node gets
        (the tracing tests' ``OTEL_*``)."""
        self.launcher = LocalCluster(
            root=root,
            nodes=size,
            mode=None,
            serve_args=["--detect-interval-ms", "50", *(extra_args or [])],
            secret=SECRET,
            tokens=[*TOKEN_ENTRIES, *(extra_tokens or [])],
            http=http,
            extra_env=(lambda _m: env) if env else None,
        )
        self.launcher.prepare()
        self.nodes = [GrpcNode(self.launcher, m, 20, 10) for m in self.launcher.members]

    def __enter__(self) -> GrpcCluster:
        self.launcher.start(20)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.launcher.stop(graceful=False)

    def by_name(self, name: str) -> GrpcNode:
        return next(n for n in self.nodes if n.name == name)

    def live(self) -> list[GrpcNode]:
        return [n for n in self.nodes if n.alive()]

    def logs(self) -> str:
        return self.launcher.logs(6000)


# -- async clients -------------------------------------------------------------------------------------


class Agent:
    """One agent's AgentService calls on one node: commands in, core Outcomes out."""

    def __init__(self, node: GrpcNode, name: str) -> None:
        self.channel = node.channel()
        self.stub = agent_pb2_grpc.AgentServiceStub(self.channel)
        self.md = auth(name)

    async def do(self, cmd: Command, request_id: str | None = None, timeout_s: float = 10.0) -> Outcome:
        request = convert.request_from_command(cmd, request_id or uuid.uuid4().hex)
        reply = await getattr(self.stub, cmd.KIND)(request, metadata=self.md, timeout=timeout_s)
        return convert.outcome_from_proto(reply)

    def watch(self, after: int | None = None, kinds: tuple[str, ...] = (), agent_id: str = "") -> Any:
        request = agent_pb2.WatchEventsRequest(kinds=list(kinds), agent_id=agent_id)
        if after is not None:
            request.after_cursor = after
        return self.stub.WatchEvents(request, metadata=self.md)

    async def close(self) -> None:
        await self.channel.close()


class Operator:
    def __init__(self, node: GrpcNode, name: str = "ops") -> None:
        self.channel = node.channel()
        self.stub = operator_pb2_grpc.OperatorServiceStub(self.channel)
        self.md = auth(name)

    async def status(self, fresh: bool = False, digest: bool = False, timeout_s: float = 10.0) -> Any:
        return await self.stub.Status(
            operator_pb2.StatusRequest(fresh=fresh, include_digest=digest), metadata=self.md, timeout=timeout_s
        )

    async def decisions(self, digest: str, fresh: bool = False) -> list[Any]:
        try:
            reply = await self.stub.ExplainDecision(
                operator_pb2.ExplainDecisionRequest(digest=digest, fresh=fresh), metadata=self.md, timeout=10
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return []
            raise
        return list(reply.decisions)

    async def close(self) -> None:
        await self.channel.close()


async def until(fn: Callable[[], Awaitable[T]], timeout_s: float, what: str, interval_s: float = 0.1) -> T:
    """Call ``fn`` until it returns something truthy; errors count as "not yet"."""
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = await fn()
            if value:
                return value
        except (grpc.aio.AioRpcError, OSError) as exc:
            last = exc
        await asyncio.sleep(interval_s)
    raise TimeoutError(f"timed out waiting for {what} (last error: {last!r})")


async def leader_of(cluster: GrpcCluster, timeout_s: float = 20.0) -> GrpcNode:
    """The node every live member agrees is leader, and that has a quorum."""

    async def agreed() -> GrpcNode | None:
        seen = set()
        leader_status = None
        for node in cluster.live():
            op = Operator(node)
            try:
                st = await op.status(timeout_s=2)
            finally:
                await op.close()
            seen.add(st.leader_id)
            if st.role == "leader":
                leader_status = st
        if len(seen) != 1 or "" in seen or leader_status is None or not leader_status.has_quorum:
            return None
        return cluster.by_name(seen.pop())

    return await until(agreed, timeout_s, "an agreed leader")


async def refused(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    """The error of a call that must fail."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc
    raise AssertionError("the call succeeded; it should have been refused")


def trailer(exc: grpc.aio.AioRpcError, key: str) -> Any:
    for k, v in exc.trailing_metadata() or ():
        if k == key:
            return v
    return None


def make_pki(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(subject: str, key: Any, issuer: str, issuer_key: Any, ca: bool, san: Any = None) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if san is not None:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    files: dict[str, Path] = {}

    def write(label: str, data: bytes) -> None:
        files[label] = directory / f"{label}.pem"
        files[label].write_bytes(data)

    def key_pem(key: Any) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = cert("waitgraph-test-ca", ca_key, "waitgraph-test-ca", ca_key, True)
    write("ca", ca.public_bytes(serialization.Encoding.PEM))
    for label, san in (("server", [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), ("client", None)):
        key = ec.generate_private_key(ec.SECP256R1())
        write(f"{label}-key", key_pem(key))
        write(label, cert(label, key, "waitgraph-test-ca", ca_key, False, san).public_bytes(serialization.Encoding.PEM))
    return files
