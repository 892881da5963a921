"""A bare Raft node process with a loopback control channel, for the cluster tests and the benchmark.

    WAITGRAPH_RAFT_PASSWORD=secret python -m tests.cluster.raft_node --id n1 --raft 127.0.0.1:7001 \
        --peers 127.0.0.1:7002,127.0.0.1:7003 --data /var/lib/waitgraph/n1 --control 7101

The cluster secret is read from an environment variable (``--password-env``), never from the
command line, where every local user could read it.

Control channel: TCP on 127.0.0.1 only, one request and one reply per frame; a frame is a 4-byte
big-endian length and a msgpack map. It exists so that tests and the benchmark can drive real
node processes; it has no authentication and is not an API. Requests (``op``):

- ``submit`` ``env``: bytes -> ``{"ok": true, "outcome": encoded Outcome}`` or an error reply
  ``{"ok": false, "code", "status", "message", "leader"}``;
- ``submit_many`` ``envs``: [bytes] -> ``{"ok": true, "replies": [reply, ...]}``, all submitted
  concurrently (group commit and backpressure see them at once);
- ``propose_raw`` ``payload``: any msgpack value handed to the replicated method as is, bypassing
  every check of :meth:`RaftNode.submit` -> ``{"ok": true, "outcomes": [encoded Outcome]}``;
- ``barrier``; ``status``; ``digest`` (``fresh``: read after a barrier); ``compact``;
  ``pickle_seen`` (the globals the restricted unpickler was asked for, with ``--log-pickle-classes``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import struct
import sys
from pathlib import Path
from typing import Any

import msgpack

from waitgraph.node.config import secret_problem
from waitgraph.node.errors import ClusterError
from waitgraph.node.raft import JournalCorrupted, RaftConfig, RaftNode, _unpickler
from waitgraph.statemachine.codec import encode_outcome

logger = logging.getLogger("waitgraph.node.raft_node")

MAX_FRAME_BYTES = 64 * 1024 * 1024


async def read_frame(reader: asyncio.StreamReader) -> Any:
    (size,) = struct.unpack(">I", await reader.readexactly(4))
    if size > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {size} bytes")
    return msgpack.unpackb(await reader.readexactly(size), raw=False)


def write_frame(writer: asyncio.StreamWriter, value: Any) -> None:
    data = msgpack.packb(value, use_bin_type=True)
    writer.write(struct.pack(">I", len(data)) + data)


def _error_reply(exc: ClusterError) -> dict[str, Any]:
    return {
        "ok": False,
        "code": exc.code,
        "status": exc.status.value,
        "message": exc.message,
        "leader": exc.fields.get("leader"),
        "applied_maybe": exc.applied_maybe,
    }


class ControlServer:
    def __init__(self, node: RaftNode) -> None:
        self.node = node

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    request = await read_frame(reader)
                except asyncio.IncompleteReadError:
                    return
                write_frame(writer, await self.dispatch(request))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()

    async def _submit(self, env: bytes) -> dict[str, Any]:
        try:
            outcome = await self.node.submit(env)
        except ClusterError as exc:
            return _error_reply(exc)
        return {"ok": True, "outcome": encode_outcome(outcome)}

    async def dispatch(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        try:
            if op == "submit":
                return await self._submit(request["env"])
            if op == "submit_many":
                replies = await asyncio.gather(*(self._submit(env) for env in request["envs"]))
                return {"ok": True, "replies": list(replies)}
            if op == "propose_raw":
                return await self._propose_raw(request.get("payload"))
            if op == "barrier":
                await self.node.barrier()
                return {"ok": True}
            if op == "status":
                return {"ok": True, "status": dataclasses.asdict(self.node.status())}
            if op == "digest":
                read = self.node.read_fresh if request.get("fresh") else self.node.read_local
                got = await read(lambda m: m.digest())
                return {"ok": True, "digest": got.value, "stale": got.stale, "applied_index": got.applied_index}
            if op == "compact":
                self.node.force_compaction()
                return {"ok": True}
            if op == "pickle_seen":
                return {"ok": True, "seen": dict(_unpickler.SEEN), "refused": dict(_unpickler.REFUSED)}
        except ClusterError as exc:
            return _error_reply(exc)
        return {"ok": False, "code": "bad_request", "message": f"unknown op {op!r}"}

    async def _propose_raw(self, payload: Any) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[tuple[Any, Any]] = loop.create_future()

        def settle(result: Any, error: Any) -> None:
            if not done.done():
                done.set_result((result, error))

        def callback(result: Any, error: Any) -> None:
            with contextlib.suppress(Exception):
                loop.call_soon_threadsafe(settle, result, error)

        self.node._running().apply_commands(payload, callback=callback)  # past every check of submit
        result, error = await asyncio.wait_for(done, self.node.cfg.submit_timeout_s)
        if error != 0:
            return {"ok": False, "code": "raft_error", "message": f"pysyncobj error {error}"}
        return {"ok": True, "outcomes": [encode_outcome(o) for o in result]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.cluster.raft_node", description=__doc__.split("\n\n")[0])
    p.add_argument("--id", required=True, help="node name, for logs")
    p.add_argument("--raft", required=True, help="this node's Raft address host:port (also bound)")
    p.add_argument("--peers", default="", help="comma-separated Raft addresses of the other nodes")
    p.add_argument("--data", required=True, type=Path, help="data directory (journal and full dump)")
    p.add_argument("--control", required=True, type=int, help="control port on 127.0.0.1")
    p.add_argument("--password-env", default="WAITGRAPH_RAFT_PASSWORD", help="variable holding the cluster secret")
    p.add_argument("--max-outstanding", type=int, default=10_000)
    p.add_argument("--submit-timeout", type=float, default=5.0)
    p.add_argument("--group-max-items", type=int, default=256, help="envelopes per log entry at most")
    p.add_argument("--log-compaction-min-entries", type=int, default=5000)
    p.add_argument(
        "--election-timeout",
        type=float,
        default=None,
        help="seconds a follower waits for a leader before it starts an election (a random time between this and"
        " twice this); default RaftConfig's (0.5)",
    )
    p.add_argument(
        "--no-fsync",
        dest="fsync",
        action="store_false",
        help="NOT DURABLE: acknowledge entries before the journal is on disk (a power cut on a majority can lose "
        "acknowledged writes); for tests and benchmarks only. Default: flush before acknowledging",
    )
    p.add_argument("--log-pickle-classes", action="store_true", help="record every global pysyncobj unpickles")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    password = os.environ.get(args.password_env, "")
    if not password:
        raise SystemExit(f"set the cluster secret in ${args.password_env}")
    if (weak := secret_problem(password)) is not None:
        raise SystemExit(f"${args.password_env}: {weak}")
    _unpickler.record_seen = args.log_pickle_classes
    cfg = RaftConfig(
        raft_address=args.raft,
        peers=tuple(p for p in args.peers.split(",") if p),
        data_dir=args.data,
        password=password,
        max_outstanding=args.max_outstanding,
        submit_timeout_s=args.submit_timeout,
        group_max_items=args.group_max_items,
        log_compaction_min_entries=args.log_compaction_min_entries,
        fsync=args.fsync,
        **({} if (t := args.election_timeout) is None else {"raft_min_timeout_s": t, "raft_max_timeout_s": 2 * t}),
    )
    node = RaftNode(cfg)
    try:
        node.start()
    except JournalCorrupted as exc:
        raise SystemExit(f"waitgraph node {args.id}: not starting: {exc}") from None
    control = ControlServer(node)
    server = await asyncio.start_server(control.handle, "127.0.0.1", args.control)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    logger.info("node %s: raft %s, control 127.0.0.1:%d", args.id, args.raft, args.control)
    print(f"READY {args.id}", flush=True)
    await stop.wait()
    server.close()
    await node.stop()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format=f"%(asctime)s {args.id} %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
