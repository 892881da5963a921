"""The native gRPC front: a node's public gRPC port served by ``waitgraph-front`` (cluster/front/, Go).

Python gRPC spends about 0.2 ms of CPU on each call before a handler runs (BENCHMARKS.md, "the
floor"), more than a whole etcd write costs etcd; the front's gRPC server costs about a tenth of
that. The node starts the front as its child and keeps the API in one place, its own handlers:

- **Relayed calls.** Every unary method of the node's services reaches :class:`Relay` as a CALL
  frame over a socket pair (request bytes and the caller's metadata), runs the very handler the
  node's gRPC server would run for it, metrics wrapper included, with a :class:`RelayContext`
  standing in for gRPC's, and goes back as an ANSWER: status, details, trailers and response.
  A burst of calls read at once is dispatched in one loop iteration, so its writes leave as one
  Raft entry (``RaftNode.hold_lone_proposals``).
- **Proxied calls.** Streams (WatchEvents, health's Watch, reflection) and names nobody serves go,
  byte for byte, to the node's own gRPC server, which then listens only on a Unix socket in a
  directory only this user can enter.
- **Ownership.** The front ignores SIGINT and SIGTERM; the node stops it (STOP: drain for the
  grace, exit) before its own server, and exits itself when the front dies. A node that is killed
  closes the socket pair, and the front exits at once, freeing the port.

The frames are laid out in cluster/front/wire.go; :func:`encode_answer` and friends write the
same bytes (tests/cluster/test_front.py holds both sides to it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import struct
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

logger = logging.getLogger("waitgraph.node.front")

PROTOCOL_VERSION = 1
HELLO, LISTENING, CALL, ANSWER, CANCEL, STOP = 1, 2, 3, 4, 5, 6
MAX_FRAME_BYTES = 80 << 20
"""As cluster/front/wire.go: an answer of the 64 MiB send limit, with its details and trailers."""
BINARY = Path(__file__).resolve().parent.parent / "front" / "bin" / "waitgraph-front"
"""Where ``scripts/build_front`` puts the front, and where the wheel carries it."""
START_TIMEOUT_S = 15.0
MAX_IN_FLIGHT = 20_000
"""Relayed calls running at once before the node stops reading the relay (the front then holds
what comes, and callers wait): a bound on memory, far above what ``max_outstanding`` admits."""

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_HEAD = struct.Struct("<IB")
_CALL = struct.Struct("<QHH")
_ANSWER = struct.Struct("<IBQHI")


class FrontError(RuntimeError):
    """The front could not start, or broke the relay protocol."""


def find_binary(configured: Path | None = None) -> Path | None:
    """The front to run: ``configured`` if given (it must exist), else the built or packaged one."""
    path = configured if configured is not None else BINARY
    return path if path.is_file() and os.access(path, os.X_OK) else None


# -- frames ----------------------------------------------------------------------------------------


def _frame(kind: int, body: bytes) -> bytes:
    return _HEAD.pack(len(body) + 1, kind) + body


def _str16(value: bytes) -> bytes:
    return _U16.pack(len(value)) + value


def encode_metadata(pairs: Sequence[tuple[str, str | bytes]]) -> bytes:
    parts = [_U16.pack(len(pairs))]
    for key, value in pairs:
        raw = value if isinstance(value, bytes) else value.encode()
        parts += (_str16(key.encode()), _U32.pack(len(raw)), raw)
    return b"".join(parts)


def encode_hello(methods: Sequence[str]) -> bytes:
    return _frame(
        HELLO, _U16.pack(PROTOCOL_VERSION) + _U16.pack(len(methods)) + b"".join(_str16(m.encode()) for m in methods)
    )


def encode_answer(
    call_id: int,
    code: grpc.StatusCode,
    details: str = "",
    trailers: Sequence[tuple[str, str | bytes]] = (),
    body: bytes = b"",
) -> bytes:
    text = details.encode()
    tail = encode_metadata(trailers) + body
    return _ANSWER.pack(1 + 8 + 2 + 4 + len(text) + len(tail), ANSWER, call_id, code.value[0], len(text)) + text + tail


def encode_stop(grace_s: float) -> bytes:
    return _frame(STOP, _U32.pack(max(0, round(grace_s * 1000))))


@dataclass(frozen=True, slots=True)
class Call:
    call_id: int
    method: int
    metadata: tuple[tuple[str, str | bytes], ...]
    body: bytes


def _take(data: memoryview, at: int, n: int) -> memoryview:
    if at + n > len(data):
        raise FrontError("a relay frame ends inside a field")
    return data[at : at + n]


def _metadata_at(data: memoryview, at: int) -> tuple[tuple[tuple[str, str | bytes], ...], int]:
    (count,) = _U16.unpack_from(data, at)
    at += 2
    pairs: list[tuple[str, str | bytes]] = []
    for _ in range(count):
        (klen,) = _U16.unpack_from(data, at)
        key = bytes(_take(data, at + 2, klen)).decode()
        at += 2 + klen
        (vlen,) = _U32.unpack_from(data, at)
        raw = bytes(_take(data, at + 4, vlen))
        at += 4 + vlen
        # gRPC hands a handler "-bin" values as bytes and the others as text, as here.
        pairs.append((key, raw if key.endswith("-bin") else raw.decode()))
    return tuple(pairs), at


def decode_call(body: memoryview) -> Call:
    call_id, method, _ = _CALL.unpack_from(body, 0)
    metadata, at = _metadata_at(body, 8 + 2)
    return Call(call_id, method, metadata, bytes(body[at:]))


class FrameReader:
    """Whole frames out of the bytes of a stream, as they arrive."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, memoryview]]:
        if self._buf:  # the rest of a frame that began in an earlier read
            self._buf += data
            data = bytes(self._buf)
        view = memoryview(data)
        out: list[tuple[int, memoryview]] = []
        at, end = 0, len(view)
        while end - at >= 5:
            length, kind = _HEAD.unpack_from(view, at)
            if not 1 <= length <= MAX_FRAME_BYTES:
                raise FrontError(f"a relay frame of {length} bytes (the limit is {MAX_FRAME_BYTES})")
            if end - at - 4 < length:
                break
            out.append((kind, view[at + 5 : at + 4 + length]))
            at += 4 + length
        self._buf = bytearray(view[at:])
        return out


# -- the handlers' side ----------------------------------------------------------------------------


class RelayContext:
    """What a handler of this node uses of ``grpc.aio.ServicerContext``, for a relayed call: the
    caller's metadata, ``abort`` (raises, as gRPC's does) and the ``code`` it set."""

    __slots__ = ("_code", "_details", "_metadata", "_trailers")

    def __init__(self, metadata: tuple[tuple[str, str | bytes], ...]) -> None:
        self._metadata = metadata
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._trailers: tuple[tuple[str, str | bytes], ...] = ()

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._metadata

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Iterable[tuple[str, str | bytes]] = ()
    ) -> None:
        if code is grpc.StatusCode.OK:
            raise ValueError("abort with OK")  # as grpc.aio refuses it
        self._code, self._details, self._trailers = code, details, tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def status(self) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str | bytes], ...]]:
        """What an abort set: code (UNKNOWN if none), details, trailing metadata."""
        return self._code or grpc.StatusCode.UNKNOWN, self._details, self._trailers

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details


class Relay(asyncio.Protocol):
    """The node's end of the socket pair: calls in, each run as its own task, answers out (all
    those ready in one loop iteration in one write)."""

    def __init__(
        self,
        handlers: Sequence[grpc.RpcMethodHandler],
        on_burst: Callable[[], None] = lambda: None,
    ) -> None:
        self.handlers = handlers
        self.on_burst = on_burst
        """Called once two or more calls read at once are dispatched, before they run
        (``RaftNode.hold_lone_proposals``)."""
        self.loop = asyncio.get_running_loop()
        self.reader = FrameReader()
        self.transport: asyncio.Transport | None = None
        self.running: dict[int, asyncio.Task[None]] = {}
        self.listening: asyncio.Future[str] = self.loop.create_future()
        self.closed: asyncio.Future[None] = self.loop.create_future()
        self._out: list[bytes] = []
        self._paused = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        for task in list(self.running.values()):
            task.cancel()
        if not self.listening.done():
            self.listening.set_exception(FrontError("the front closed the relay before it listened"))
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.reader.feed(data)
            calls = [decode_call(body) if kind == CALL else (kind, body) for kind, body in frames]
        except (FrontError, struct.error, UnicodeDecodeError) as exc:
            self.fail(f"a malformed frame from the front: {exc}")
            return
        dispatched = 0
        for item in calls:
            if isinstance(item, Call):
                self._dispatch(item)
                dispatched += 1
            else:
                self._control(*item)
        if dispatched > 1:
            self.on_burst()  # after the tasks are scheduled: its release runs after their first steps
        if not self._paused and len(self.running) > MAX_IN_FLIGHT and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
            logger.warning("%d relayed calls in flight: not reading more until half are answered", len(self.running))

    def _control(self, kind: int, body: memoryview) -> None:
        if kind == CANCEL:
            call_id = struct.unpack_from("<Q", body, 0)[0]
            task = self.running.get(call_id)
            if task is not None:
                task.cancel()
                self._done(call_id)  # a task cancelled before it started runs no finally
        elif kind == LISTENING and not self.listening.done():
            (n,) = _U16.unpack_from(body, 0)
            self.listening.set_result(bytes(body[2 : 2 + n]).decode())
        else:
            self.fail(f"a frame of kind {kind} from the front")

    def fail(self, why: str) -> None:
        logger.error("relay: %s; closing it", why)
        if self.transport is not None:
            self.transport.close()

    def _dispatch(self, call: Call) -> None:
        if not 0 <= call.method < len(self.handlers):
            self.send(encode_answer(call.call_id, grpc.StatusCode.UNIMPLEMENTED, "no such relayed method"))
            return
        self.running[call.call_id] = self.loop.create_task(self._run(call, self.handlers[call.method]))

    async def _run(self, call: Call, handler: grpc.RpcMethodHandler) -> None:
        context = RelayContext(call.metadata)
        try:
            try:
                request = handler.request_deserializer(call.body) if handler.request_deserializer else call.body
            except Exception:
                # What gRPC answers when a deserializer raises (ours never do: convert.Undecodable).
                self.send(encode_answer(call.call_id, grpc.StatusCode.UNKNOWN, "Exception deserializing request!"))
                return
            response = await handler.unary_unary(request, context)
            body = handler.response_serializer(response) if handler.response_serializer else response
        except grpc.aio.AbortError:
            self.send(encode_answer(call.call_id, *context.status()))
        except asyncio.CancelledError:
            return  # the caller went away (CANCEL) or the relay closed: nobody to answer
        except Exception as exc:
            logger.exception("a relayed handler raised")
            self.send(encode_answer(call.call_id, grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}"))
        else:
            self.send(encode_answer(call.call_id, grpc.StatusCode.OK, body=body))
        finally:
            self._done(call.call_id)

    def _done(self, call_id: int) -> None:
        self.running.pop(call_id, None)
        if self._paused and len(self.running) <= MAX_IN_FLIGHT // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def send(self, frame: bytes) -> None:
        if not self._out:
            self.loop.call_soon(self._flush)
        self._out.append(frame)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))


# -- the process -----------------------------------------------------------------------------------


class Front:
    """One ``waitgraph-front`` run by this node: :meth:`start` until it listens, :meth:`stop` to
    drain it; ``exited`` resolves with its exit status whenever it ends."""

    def __init__(
        self,
        binary: Path,
        *,
        listen: str,
        upstream: Path,
        methods: Sequence[str],
        handlers: Sequence[grpc.RpcMethodHandler],
        on_burst: Callable[[], None] = lambda: None,
        tls: tuple[Path, Path, Path | None] | None = None,
        max_recv_bytes: int,
        max_send_bytes: int,
    ) -> None:
        if len(methods) != len(handlers):
            raise ValueError("one handler per relayed method")
        self.binary = binary
        self.args = [
            str(binary),
            "-listen", listen,
            "-upstream", str(upstream),
            "-max-recv-bytes", str(max_recv_bytes),
            "-max-send-bytes", str(max_send_bytes),
        ]  # fmt: skip
        if tls is not None:
            cert, key, client_ca = tls
            self.args += ["-tls-cert", str(cert), "-tls-key", str(key)]
            if client_ca is not None:
                self.args += ["-tls-client-ca", str(client_ca)]
        self.methods = tuple(methods)
        self.handlers = tuple(handlers)
        self.on_burst = on_burst
        self.proc: asyncio.subprocess.Process | None = None
        self.relay: Relay | None = None
        self.address: str | None = None
        self.exited: asyncio.Future[int] | None = None
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self._tasks: list[asyncio.Task[Any]] = []

    async def start(self) -> str:
        """Start the front and return the address it listens on; FrontError if it cannot."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.args,
                "-relay-fd",
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
        finally:
            theirs.close()
        self.exited = loop.create_future()
        self._tasks = [loop.create_task(self._log_stderr()), loop.create_task(self._wait())]
        _, self.relay = await loop.connect_accepted_socket(lambda: Relay(self.handlers, self.on_burst), ours)
        self.relay.send(encode_hello(self.methods))
        listening, exited = self.relay.listening, self.exited
        done, _ = await asyncio.wait((listening, exited), timeout=START_TIMEOUT_S, return_when="FIRST_COMPLETED")
        if listening in done and listening.exception() is None:
            self.address = listening.result()
            logger.info("gRPC front %s (pid %d) listens on %s", self.binary.name, self.proc.pid, self.address)
            return self.address
        if not exited.done():
            await asyncio.sleep(0.1)  # its last words, if it is exiting
        why = "; ".join(self.stderr_tail) or (
            f"it exited with status {exited.result()}"
            if exited.done()
            else f"it did not listen within {START_TIMEOUT_S} s"
        )
        await self.kill()
        raise FrontError(f"the gRPC front did not start: {why}")

    async def _log_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for line in self.proc.stderr:
            text = line.decode(errors="replace").rstrip()
            if text:
                self.stderr_tail.append(text.removeprefix("waitgraph-front: "))
                logger.warning("front: %s", text)

    async def _wait(self) -> None:
        assert self.proc is not None and self.exited is not None
        status = await self.proc.wait()
        if not self.exited.done():
            self.exited.set_result(status)

    async def stop(self, grace_s: float) -> None:
        """Stop taking calls, give those in flight ``grace_s`` to finish, and wait for the exit."""
        if self.proc is None or self.exited is None:
            return
        if self.relay is not None and not self.exited.done():
            self.relay.send(encode_stop(grace_s))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), grace_s + 5.0)
        await self.kill()

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        if self.relay is not None and self.relay.transport is not None:
            self.relay.transport.close()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 2.0)


def upstream_socket(data_dir: Path) -> tuple[Path, Path | None]:
    """Where the node's own gRPC server listens for the front: in the data directory when the path
    fits a Unix socket's 108 bytes, else in a private temporary directory (returned second, for
    removal on stop). A socket left by a killed node is removed first."""
    path = data_dir / "grpc.sock"
    made: Path | None = None
    if len(os.fsencode(path)) > 100:
        made = Path(tempfile.mkdtemp(prefix="waitgraph-"))
        path = made / "grpc.sock"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return path, made


def remove_upstream_socket(path: Path, made: Path | None) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
