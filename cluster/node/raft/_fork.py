"""Forked children: the dump writer (log compaction) and the whole-state reader (``RaftNode.read_image``).

Both are forked between two applies, so each sees a copy-on-write image of the state that is a
consistent cut. Rules a child keeps, because other threads (gRPC's, asyncio's, the tick thread) held
locks at the fork: it runs only the state's own code, msgpack and file writes; takes no lock; logs
nothing; blocks SIGINT and SIGTERM (the parent's to handle); closes every inherited descriptor (the
listening sockets must not outlive a killed parent); and leaves by ``os._exit`` (no exit handlers, no
gRPC shutdown). It never touches a gRPC object, so gRPC's fork support is not needed (``waitgraph
serve`` turns it off: ``GRPC_ENABLE_FORK_SUPPORT=false``).

pysyncobj names: none.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from typing import Any

import msgpack

from waitgraph.node.errors import ReadFailed
from waitgraph.node.raft._journal import seal_dump
from waitgraph.statemachine import StateMachine


def write_dump_file(path: str, head: dict[str, Any], state: Any) -> None:
    with open(path, "wb") as f:
        f.write(seal_dump(msgpack.packb({**head, "state": state}, use_bin_type=True)))
        f.flush()
        os.fsync(f.fileno())


def dump_child(path: str, head: dict[str, Any], machine: StateMachine) -> None:
    """The forked dump writer: snapshot, write, fsync, exit; never returns.

    It runs only the state's own code and file writes: no lock (the forking tick thread was the
    only writer, and a reader thread may have held the machine lock at the fork), no logging (its
    locks may have been held by another thread), nothing of gRPC or asyncio, no exit handlers
    (``os._exit``). SIGINT and SIGTERM are blocked: they are the parent's to handle.
    """
    code = 1
    try:
        _enter_child()
        write_dump_file(path, head, machine.snapshot())
        code = 0
    finally:
        os._exit(code)


IMAGE_MOVED = 75
"""A forked reader's exit status when the state it was forked with is not the one the caller read
under the lock (an apply started or ended in between): :meth:`RaftNode.read_image` forks again,
under the lock."""


READER_NICE = 10
"""How much lower than the node's the forked reader's scheduling priority is (``os.nice``)."""


def image_child(
    fd: int,
    image: Callable[[StateMachine], bytes],
    machine: StateMachine,
    moved: Callable[[], bool] = lambda: False,
) -> None:
    """The forked reader of :meth:`RaftNode.read_image`: ``image`` of the state, written to the
    pipe ``fd``, then exit; never returns. The same rules as :func:`dump_child`. ``moved`` (read
    on the child's own image) says the state is not the cut the caller read: exit with
    :data:`IMAGE_MOVED` before anything is written."""
    code = 1
    try:
        _enter_child(keep=fd)  # first: SIGINT/SIGTERM stay the parent's even on the way out
        # a reader (the live view's build) must not take a core from the node's ticks and replies
        # on a busy machine: it works at a lower priority, and is late rather than the node
        os.nice(READER_NICE)
        if moved():
            code = IMAGE_MOVED
            return
        view = memoryview(image(machine))
        while view:
            view = view[os.write(fd, view[: 1 << 20]) :]
        code = 0
    except BaseException as exc:  # the parent sees only the exit status: say why on stderr
        with contextlib.suppress(BaseException):
            os.write(2, f"waitgraph: the forked reader failed: {exc!r}\n".encode())
    finally:
        os._exit(code)


def _enter_child(keep: int = -1) -> None:
    """First steps of a forked child: SIGINT and SIGTERM are the parent's, and no descriptor but
    stdin/out/err (and ``keep``) stays open."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    _close_inherited_fds(keep)


def _close_inherited_fds(keep: int = -1) -> None:
    """Close every descriptor but stdin/out/err (and ``keep``) in a forked child: the parent's
    listening sockets (gRPC, Raft) must not stay open in a child that outlives a killed parent, or
    the restarted node could not bind its ports until the child is done."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 4096))
    for fd in fds:
        if fd > 2 and fd != keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def collect_image(pid: int, fd: int) -> bytes:
    """Read a forked reader's pipe to its end and reap it (an executor thread: blocking, GIL free)."""
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
        _, wait_status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wait_status)
    if code == IMAGE_MOVED:
        raise ImageMoved()
    if code != 0:
        raise ReadFailed(f"the forked reader failed (wait status {wait_status})")
    return b"".join(chunks)


class ImageMoved(Exception):
    """The forked reader's state was not the caller's cut (:data:`IMAGE_MOVED`): fork again, locked."""
