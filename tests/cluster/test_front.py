"""The native gRPC front (cluster/front/, Go) and its relay (cluster/node/front.py).

Two layers:

- **The binary against a stand-in node.** The real ``waitgraph-front`` runs as :class:`Front`
  starts it for a node, but the relayed methods are small handlers of this file and the proxied
  ones a grpc.aio server of its own on a Unix socket; a gRPC client calls the public port. What
  the front must do is checked call by call: a relayed call's request, metadata, answer, error,
  trailers (binary too) and deadline; a proxied stream both ways; the size limit; a stop that
  lets calls in flight finish; a node that goes away; a HELLO of another protocol version; a
  port that is taken.
- **A real node.** ``waitgraph serve`` with its front: it says which front serves it, exits when
  its front dies, and a node killed with SIGKILL takes its front with it, freeing the port.

Every other gRPC test of the suite goes through the front as well (``waitgraph serve`` uses it
whenever it is built); test_grpc_every_rpc.py and test_grpc_config.py also run without it.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest

from waitgraph.node import front as F

from .grpc_harness import GrpcCluster, front_args, leader_of
from .harness import free_ports


@pytest.fixture
def binary() -> Path:
    """The built front; the test is skipped where it is not (and fails in CI, which builds it)."""
    front_args("native")
    found = F.find_binary()
    assert found is not None
    return found


# -- the frames, byte by byte (cluster/front/wire.go's layout) ----------------------------------------


def test_an_answer_frame_is_laid_out_as_wire_go_reads_it() -> None:
    frame = F.encode_answer(7, grpc.StatusCode.ABORTED, "lost", [("waitgraph-code", "x"), ("o-bin", b"\x00\xff")], b"R")
    length, kind = struct.unpack_from("<IB", frame)
    assert length == len(frame) - 4 and kind == F.ANSWER
    call_id, code, dlen = struct.unpack_from("<QHI", frame, 5)
    assert (call_id, code, dlen) == (7, grpc.StatusCode.ABORTED.value[0], 4)
    assert frame[19:23] == b"lost"
    expect = struct.pack("<H", 2)
    expect += struct.pack("<H", 14) + b"waitgraph-code" + struct.pack("<I", 1) + b"x"
    expect += struct.pack("<H", 5) + b"o-bin" + struct.pack("<I", 2) + b"\x00\xff"
    assert frame[23:] == expect + b"R"


def test_call_frames_are_read_whole_in_any_split() -> None:
    def call(call_id: int, md: list[tuple[str, bytes]], body: bytes) -> bytes:
        fields = struct.pack("<QH", call_id, 3) + struct.pack("<H", len(md))
        for k, v in md:
            fields += struct.pack("<H", len(k)) + k.encode() + struct.pack("<I", len(v)) + v
        fields += body
        return struct.pack("<IB", len(fields) + 1, F.CALL) + fields

    stream = call(1, [("authorization", b"Bearer t")], b"req-1") + call(2, [("x-bin", b"\x01")], b"")
    for cut in range(len(stream) + 1):
        reader = F.FrameReader()
        frames = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        calls = [F.decode_call(body) for kind, body in frames if kind == F.CALL]
        assert calls == [
            F.Call(1, 3, (("authorization", "Bearer t"),), b"req-1"),
            F.Call(2, 3, (("x-bin", b"\x01"),), b""),
        ], cut


def test_a_frame_that_lies_about_its_fields_is_refused() -> None:
    fields = struct.pack("<QHH", 1, 0, 1) + struct.pack("<H", 50) + b"short"  # a 50-byte key in 5 bytes
    reader = F.FrameReader()
    ((_, body),) = reader.feed(struct.pack("<IB", len(fields) + 1, F.CALL) + fields)
    with pytest.raises(F.FrontError):
        F.decode_call(body)
    with pytest.raises(F.FrontError):
        F.FrameReader().feed(struct.pack("<IB", F.MAX_FRAME_BYTES + 1, F.CALL))


# -- the binary against a stand-in node ----------------------------------------------------------------

RELAYED = ("/t.T/Echo", "/t.T/Fail", "/t.T/Slow")


class StandIn:
    """What a node gives its front: relayed handlers, and a grpc.aio server on a Unix socket for
    the rest (one bidirectional method that answers each message with it reversed)."""

    def __init__(self, tmp: Path, binary: Path) -> None:
        self.tmp = tmp
        self.binary = binary
        self.seen: list[tuple[Any, ...]] = []
        self.cancelled = asyncio.Event()
        self.slow_release = asyncio.Event()
        self.server: grpc.aio.Server | None = None
        self.front: F.Front | None = None

    async def echo(self, request: bytes, context: Any) -> bytes:
        self.seen.append(("echo", request, context.invocation_metadata()))
        return b"echo:" + request

    async def fail(self, request: bytes, context: Any) -> bytes:
        await context.abort(
            grpc.StatusCode.FAILED_PRECONDITION,
            "stale: \u00e9poch \u2116 3",
            trailing_metadata=(("waitgraph-code", "stale_epoch"), ("waitgraph-outcome-bin", b"\x00\x01\xfe")),
        )
        raise AssertionError("abort raises")

    async def slow(self, request: bytes, context: Any) -> bytes:
        try:
            await self.slow_release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return b"done"

    async def reverse(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for r in requests:
            yield r[::-1]

    async def start(self, address: str, bind_retry_s: float | None = None) -> F.Front:
        sock = self.tmp / "up.sock"
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "t.T", {"Reverse": grpc.stream_stream_rpc_method_handler(self.reverse)}
                ),
            )
        )
        self.server.add_insecure_port(f"unix:{sock}")
        await self.server.start()
        handlers = [grpc.unary_unary_rpc_method_handler(fn) for fn in (self.echo, self.fail, self.slow)]
        self.front = F.Front(
            self.binary,
            listen=address,
            upstream=sock,
            methods=RELAYED,
            handlers=handlers,
            max_recv_bytes=1024,
            max_send_bytes=1 << 20,
        )
        if bind_retry_s is not None:
            self.front.args += ["-bind-retry", f"{bind_retry_s}s"]
        await self.front.start()
        return self.front

    async def close(self) -> None:
        if self.front is not None:
            await self.front.kill()
        if self.server is not None:
            await self.server.stop(0)


def _call(channel: grpc.aio.Channel, method: str) -> Callable[..., Any]:
    return channel.unary_unary(method)


@pytest.fixture
async def stand_in(tmp_path: Path, binary: Path) -> AsyncIterator[tuple[StandIn, str]]:
    node = StandIn(tmp_path, binary)
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    try:
        await node.start(address)
        yield node, address
    finally:
        await node.close()


@pytest.mark.timeout(60)
async def test_a_relayed_call_carries_request_metadata_answer_and_errors(stand_in: tuple[StandIn, str]) -> None:
    node, address = stand_in
    async with grpc.aio.insecure_channel(address) as ch:
        got = await _call(ch, "/t.T/Echo")(b"\x00abc", metadata=(("authorization", "Bearer tok"), ("x-b-bin", b"\xff")))
        assert got == b"echo:\x00abc"
        (_, request, md) = node.seen[-1]
        assert request == b"\x00abc"
        assert ("authorization", "Bearer tok") in md and ("x-b-bin", b"\xff") in md
        assert not any(k.startswith((":", "grpc-")) or k in ("user-agent", "content-type", "te") for k, _ in md)

        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _call(ch, "/t.T/Fail")(b"")
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert err.value.details() == "stale: \u00e9poch \u2116 3"
        trailers = dict(err.value.trailing_metadata() or ())
        assert trailers["waitgraph-code"] == "stale_epoch"
        assert trailers["waitgraph-outcome-bin"] == b"\x00\x01\xfe"

        # Compressed, as Python's gRPC server would take it.
        assert await _call(ch, "/t.T/Echo")(b"z" * 500, compression=grpc.Compression.Gzip) == b"echo:" + b"z" * 500

        # A burst of calls, answered each to its own caller.
        answers = await asyncio.gather(*(_call(ch, "/t.T/Echo")(str(i).encode()) for i in range(200)))
        assert answers == [b"echo:" + str(i).encode() for i in range(200)]


@pytest.mark.timeout(60)
async def test_a_caller_that_gives_up_cancels_the_handler(stand_in: tuple[StandIn, str]) -> None:
    node, address = stand_in
    async with grpc.aio.insecure_channel(address) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _call(ch, "/t.T/Slow")(b"", timeout=0.3)
        assert err.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        await asyncio.wait_for(node.cancelled.wait(), 5)
        assert node.front is not None and node.front.relay is not None
        for _ in range(50):  # the CANCEL and the task's end are asynchronous to the caller's error
            if not node.front.relay.running:
                break
            await asyncio.sleep(0.05)
        assert not node.front.relay.running


@pytest.mark.timeout(60)
async def test_other_calls_are_proxied_both_ways_and_limits_hold(stand_in: tuple[StandIn, str]) -> None:
    _, address = stand_in
    async with grpc.aio.insecure_channel(address) as ch:
        call = ch.stream_stream("/t.T/Reverse")()
        for word in (b"abc", b"\x00\x01", b""):
            await call.write(word)
            assert await call.read() == word[::-1]
        await call.done_writing()
        assert await call.code() is grpc.StatusCode.OK

        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _call(ch, "/t.T/Nobody")(b"")
        assert err.value.code() is grpc.StatusCode.UNIMPLEMENTED  # the node's server says so

        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _call(ch, "/t.T/Echo")(b"x" * 2000)  # max_recv_bytes is 1024
        assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.timeout(60)
async def test_a_stop_lets_calls_in_flight_finish_and_then_the_front_exits(stand_in: tuple[StandIn, str]) -> None:
    node, address = stand_in
    front = node.front
    assert front is not None and front.exited is not None
    async with grpc.aio.insecure_channel(address) as ch:
        pending = asyncio.ensure_future(_call(ch, "/t.T/Slow")(b"", timeout=10))
        await asyncio.sleep(0.3)
        stopping = asyncio.ensure_future(front.stop(grace_s=5))
        await asyncio.sleep(0.3)
        assert not front.exited.done()  # draining: the slow call is still in flight
        node.slow_release.set()
        assert await pending == b"done"
        await asyncio.wait_for(stopping, 10)
    assert front.exited.result() == 0
    with socket.socket() as s:  # the port is free again
        host, port = address.rsplit(":", 1)
        s.bind((host, int(port)))


@pytest.mark.timeout(60)
async def test_a_stop_without_grace_ends_calls_and_exits_cleanly(stand_in: tuple[StandIn, str]) -> None:
    node, address = stand_in
    front = node.front
    assert front is not None and front.exited is not None
    async with grpc.aio.insecure_channel(address) as ch:
        pending = asyncio.ensure_future(_call(ch, "/t.T/Slow")(b"", timeout=10))
        await asyncio.sleep(0.3)
        assert front.relay is not None
        front.relay.send(F.encode_stop(0))  # a second STOP (stop() sends one) changes nothing
        await asyncio.wait_for(front.stop(grace_s=0), 10)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pending
        assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert front.exited.result() == 0, list(front.stderr_tail)


@pytest.mark.timeout(60)
async def test_the_front_exits_at_once_when_its_node_goes_away(stand_in: tuple[StandIn, str]) -> None:
    node, _ = stand_in
    front = node.front
    assert front is not None and front.relay is not None and front.relay.transport is not None
    front.relay.transport.close()  # what a killed node's socket does
    status = await asyncio.wait_for(asyncio.shield(front.exited), 5)  # type: ignore[arg-type]
    assert status != 0
    assert any("closed the relay" in line for line in front.stderr_tail), list(front.stderr_tail)


@pytest.mark.timeout(60)
async def test_a_hello_of_another_protocol_is_refused_with_the_reason(
    tmp_path: Path, binary: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(F, "PROTOCOL_VERSION", F.PROTOCOL_VERSION + 1)
    node = StandIn(tmp_path, binary)
    (port,) = free_ports(1)
    try:
        with pytest.raises(F.FrontError, match="relay protocol 2, this front 1"):
            await node.start(f"127.0.0.1:{port}")
    finally:
        await node.close()


@pytest.mark.timeout(60)
async def test_a_taken_port_is_refused_with_the_address(tmp_path: Path, binary: Path) -> None:
    node = StandIn(tmp_path, binary)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        try:
            with pytest.raises(F.FrontError, match=f"binding {address}"):
                await node.start(address, bind_retry_s=0.2)
        finally:
            await node.close()


# -- a real node ---------------------------------------------------------------------------------------


def _front_of(pid: int) -> psutil.Process:
    (child,) = [c for c in psutil.Process(pid).children() if c.name() == "waitgraph-front"]
    return child


@pytest.mark.timeout(120)
async def test_a_node_serves_through_its_front_and_exits_when_the_front_dies(tmp_path: Path, binary: Path) -> None:
    with GrpcCluster(tmp_path, size=3) as cluster:
        leader = await leader_of(cluster)
        assert "front=native" in leader.log_text()
        node = next(n for n in cluster.nodes if n is not leader)
        assert node.proc is not None
        _front_of(node.proc.pid).kill()
        assert node.proc.wait(20) == 1
        assert "the gRPC front exited" in node.log_text()


@pytest.mark.timeout(120)
async def test_a_killed_node_takes_its_front_with_it_and_restarts_on_its_port(tmp_path: Path, binary: Path) -> None:
    with GrpcCluster(tmp_path, size=3) as cluster:
        await leader_of(cluster)
        node = cluster.nodes[0]
        assert node.proc is not None
        front = _front_of(node.proc.pid)
        node.kill()
        front.wait(5)  # gone within seconds, not left holding the port
        node.start()  # binds the same gRPC port again
        await leader_of(cluster)


@pytest.mark.timeout(60)
def test_native_is_refused_when_no_front_is_installed(tmp_path: Path) -> None:
    missing = tmp_path / "no-front"
    missing.write_text("")  # a file, but not an executable one
    (raft, grpc_port) = free_ports(2)
    cmd = [
        sys.executable, "-m", "waitgraph", "serve", "--id", "n1", "--insecure",
        "--raft-addr", f"127.0.0.1:{raft}", "--grpc-addr", f"127.0.0.1:{grpc_port}",
        "--data-dir", str(tmp_path / "d"), "--tokens-file", str(_tokens(tmp_path)),
        "--grpc-front", "native", "--grpc-front-binary", str(missing),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=50, start_new_session=True)
    assert done.returncode == 2, done.stderr
    assert "--grpc-front native: no executable front" in done.stderr


def _tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text('{"tokens": [{"name": "ops", "role": "operator", "token": "operator-token-0123456789"}]}')
    return path


def test_signals_are_the_nodes_to_give(tmp_path: Path, binary: Path) -> None:
    """The front ignores SIGTERM and SIGINT (a service manager signals the whole group; the node
    orders the stop), so only its node, or SIGKILL, ends it."""
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen(
        [
            str(binary),
            "-listen",
            "127.0.0.1:0",
            "-upstream",
            str(tmp_path / "none.sock"),
            "-relay-fd",
            str(theirs.fileno()),
        ],
        pass_fds=(theirs.fileno(),),
        stderr=subprocess.PIPE,
    )
    theirs.close()
    try:
        ours.sendall(F.encode_hello(()))
        time.sleep(0.5)
        for sig in (signal.SIGTERM, signal.SIGINT):
            proc.send_signal(sig)
        time.sleep(0.5)
        assert proc.poll() is None
        ours.close()  # the node goes away
        assert proc.wait(5) != 0
        assert proc.stderr is not None and b"closed the relay" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.timeout(60)
async def test_auto_serves_from_python_when_no_front_is_installed(tmp_path: Path) -> None:
    """``grpc_front = auto`` (the default) without a front: the node's own gRPC server serves the
    port, and the log says so."""
    missing = tmp_path / "no-front"
    missing.write_text("")
    with GrpcCluster(tmp_path / "c", size=1, extra_args=["--grpc-front-binary", str(missing)]) as cluster:
        node = await leader_of(cluster)
        log = node.log_text()
        assert "front=python" in log and "no native gRPC front" in log and "waitgraph-front" not in log
        assert node.proc is not None and not psutil.Process(node.proc.pid).children()
