"""The leader's own CPU per WriteBatch item, in one process, without Raft or gRPC (issue 20).

Prints tables; asserts nothing. Usage: scripts/bench gateway [--rounds 40] [--repeat 5]
[--items 16] [--against DIR] [--floor-s 5] [--floor-samples 500]

What a leader does for each write an SDK sends it, besides gRPC and Raft: ``Gateway.write_batch``
(the call's token, each item's authorization, rate limit, proto -> command -> envelope, the
codec's check), the proposing replica's apply (``EventfulMachine``, with the event journal and the
decision-log hook, as a node runs it), and the answer (outcome -> protobuf, the response). The
node under the gateway applies each envelope at once, as the leader's Raft thread does when the
entry commits: a checked envelope is adopted (``codec.adopt_checked``), bytes are decoded. The
state and the writes are those of ``scripts/bench cluster``'s SDK shape: 64 agents, each with
an open wait that every write re-registers at a higher ``edge_version``, ``--items`` writes per
call. Time is the applying thread's CPU (``time.thread_time_ns``) over every call of a round,
garbage collector paused, best of ``--repeat`` runs; "response bytes" adds the
``SerializeToString`` gRPC does next.

``--against DIR`` compares with another copy of the code (a directory holding ``statemachine/``,
``cluster/`` and ``proto/``: ``mkdir /tmp/base; git archive HEAD statemachine cluster proto | tar
-x -C /tmp/base``): runs alternate between the trees, one fresh process each, and the table says
whether both gave the same responses, byte for byte, and the same final state.

The second table is the floor under every unary write: a grpc.aio server whose one method
answers at once (no auth, no Raft, no work), called by one asyncio client process as figure 2u
calls the cluster: lone calls (p50) and 64 closed-loop callers (calls/s, each side's CPU per
call). It is what Python gRPC alone costs on this machine, the same day.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from bench_apply import AGENTS, machine_for, setup_agents, tree_runs, use_tree

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


class InProcessNode:
    """What ``Gateway`` needs of a RaftNode: every envelope applied at once, in order."""

    def __init__(self, machine: Any) -> None:
        from waitgraph.statemachine import codec

        self.machine = machine
        self.adopt = getattr(codec, "adopt_checked", None)

    def is_leader(self) -> bool:
        return True

    def leader_address(self) -> str | None:
        return None

    def member_features(self) -> dict[str, int | None]:
        return {}  # no other member: the lessor answers heartbeats (trees before #37 never ask)

    async def submit_many(self, envelopes: list[Any]) -> list[Any]:
        out = []
        for e in envelopes:
            if isinstance(e, bytes):
                out.append(self.machine.apply_bytes(e))
            else:
                assert self.adopt is not None
                out.append(self.machine.apply(self.adopt(e)))
        return out


class Context:
    """The parts of ``grpc.aio.ServicerContext`` a successful WriteBatch reads."""

    def __init__(self, token: str) -> None:
        self._md = (("authorization", f"Bearer {token}"),)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._md


def _world() -> tuple[Any, Any, list[tuple[str, Context]]]:
    """A gateway over a fresh node machine, and the calls to time: per agent, its next batch."""
    from waitgraph.node.auth import TokenStore, token_digest
    from waitgraph.node.config import Peer, ServeConfig
    from waitgraph.node.events import EventJournal
    from waitgraph.node.service import Gateway

    journal = EventJournal(100_000)
    machine = machine_for("node", journal)
    setup_agents(machine)  # each agent's session, a holder holding resource:r-<agent>, a waiter
    names = [f"t{i:02d}" for i in range(AGENTS)]
    tokens = {a: f"token-{a}" for a in names}
    store = TokenStore.parse(
        {
            "tokens": [
                {"name": f"agent-{a}", "role": "agent", "agent_id": a, "sha256": token_digest(t).hex()}
                for a, t in tokens.items()
            ]
        }
    )
    cfg = ServeConfig(
        node_id="n1",
        raft_address="127.0.0.1:1",
        grpc_address="127.0.0.1:2",
        peers=(Peer("n1", "127.0.0.1:1", "127.0.0.1:2"),),
        data_dir=Path("/nonexistent"),
        secret="unused",
        insecure=True,
        tokens=store,
        rate_limit_per_s=0,
    )
    gateway = Gateway(cfg, InProcessNode(machine), journal, clock=lambda: 1_000_000.0, stamp=lambda: 5_000)
    return gateway, machine, [(a, Context(tokens[a])) for a in names]


def _requests(names: list[str], round_no: int, items: int) -> list[Any]:
    from waitgraph.proto.v1 import agent_pb2, commands_pb2

    calls = []
    for i, a in enumerate(names):
        batch = agent_pb2.WriteBatchRequest()
        for k in range(items):
            version = (round_no * items + k) + 1
            req = commands_pb2.RegisterWaitRequest(
                request_id=f"{a}-{round_no}-{k}",
                waiter_id=f"exec:W-{a}",
                waiter_generation=1,
                target_id=f"resource:r-{names[(i + 1) % AGENTS]}",
                target_generation=1,
                reason="bench",
                edge_version=version,
            )
            batch.items.add().register_wait.CopyFrom(req)
        calls.append(batch)
    return calls


def run_once(rounds: int, items: int) -> dict[str, Any]:
    gateway, machine, agents = _world()
    names = [a for a, _ in agents]
    plan = [_requests(names, r, items) for r in range(rounds)]
    digest = hashlib.sha256()
    handler_ns = serialize_ns = 0
    loop = asyncio.new_event_loop()
    gc.collect()
    gc.disable()
    try:
        for calls in plan:
            t0 = time.thread_time_ns()
            responses = [
                loop.run_until_complete(gateway.write_batch(req, ctx))
                for req, (_, ctx) in zip(calls, agents, strict=True)
            ]
            t1 = time.thread_time_ns()
            blobs = [r.SerializeToString(deterministic=True) for r in responses]
            t2 = time.thread_time_ns()
            handler_ns += t1 - t0
            serialize_ns += t2 - t1
            for b in blobs:
                digest.update(b)
    finally:
        gc.enable()
        loop.close()
    writes = rounds * AGENTS * items
    for r in responses:
        for res in r.results:
            if res.status_code != 0:
                raise SystemExit(f"a write was refused: {res.details}")
    return {
        "handler_us": handler_ns / writes / 1e3,
        "serialize_us": serialize_ns / writes / 1e3,
        "writes": writes,
        "responses": digest.hexdigest(),
        "state": machine.digest(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=40, help="calls per agent (default 40)")
    p.add_argument("--items", type=int, default=16, help="writes per WriteBatch call (default 16: the SDK shape)")
    p.add_argument("--repeat", type=int, default=5, help="fresh processes per tree (best is kept)")
    p.add_argument("--against", help="another tree to compare with (statemachine/, cluster/, proto/)")
    p.add_argument(
        "--floor-s", type=float, default=5.0, help="seconds of the bare grpc.aio floor's 64 callers (0 skips it)"
    )
    p.add_argument("--floor-samples", type=int, default=500, help="lone calls of the floor (default 500)")
    p.add_argument("--tree", default=ROOT, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.json:
        use_tree(args.tree)
        print(json.dumps(run_once(args.rounds, args.items)))
        return
    trees = {"this tree": ROOT}
    if args.against:
        trees["against"] = os.path.abspath(args.against)
    by_tree = tree_runs(
        __file__, list(trees.values()), args.repeat, ["--rounds", str(args.rounds), "--items", str(args.items)]
    )
    runs = {name: by_tree[tree] for name, tree in trees.items()}
    load = os.getloadavg()[0]
    print(f"## The leader's CPU per WriteBatch item, in process ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    print()
    print(
        f"- {AGENTS} agents x {args.rounds} calls of {args.items} RegisterWait items; best of {args.repeat} "
        f"fresh runs per tree; load average {load:.2f}"
    )
    print()
    print("| tree | handler + apply + answer, us/item | response bytes, us/item | total | responses / state |")
    print("|---|---:|---:|---:|---|")
    first = runs["this tree"][0]
    for name, rs in runs.items():
        h = min(r["handler_us"] for r in rs)
        s = min(r["serialize_us"] for r in rs)
        same = all(r["responses"] == first["responses"] and r["state"] == first["state"] for r in rs)
        print(f"| {name} | {h:.1f} | {s:.1f} | {h + s:.1f} | {'identical' if same else 'DIFFER'} |")
    if args.floor_s > 0:
        print_floor(grpc_floor(args.floor_s, args.floor_samples), args.floor_s, args.floor_samples)


# -- the floor: a grpc.aio server that does nothing ------------------------------------------------


def _floor_server(port_out: Any, begin: Any, stop: Any, front: bool = False) -> None:
    """A grpc.aio server whose one method answers at once (the health service's Check). With
    ``front``, the native gRPC front serves the port and relays each Check to that handler, as a
    node's front relays its calls (cluster/node/front.py); the CPU reported is this process's and
    the front's together."""
    import grpc
    import psutil
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    class Answer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
        async def Check(self, request: Any, context: Any) -> Any:
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    def cpu_s() -> float:
        me = psutil.Process()
        return sum(sum(p.cpu_times()[:2]) for p in (me, *me.children()))

    async def serve() -> None:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(Answer(), server)
        relay = None
        if front:
            import tempfile

            from waitgraph.dev.localcluster import free_ports
            from waitgraph.node.front import Front, find_binary

            binary = find_binary()
            assert binary is not None, "no native gRPC front (scripts/build_front)"
            upstream = Path(tempfile.mkdtemp()) / "grpc.sock"
            server.add_insecure_port(f"unix:{upstream}")
            await server.start()
            (port,) = free_ports(1)
            check = grpc.unary_unary_rpc_method_handler(
                Answer().Check,
                request_deserializer=health_pb2.HealthCheckRequest.FromString,
                response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
            )
            relay = Front(
                binary,
                listen=f"127.0.0.1:{port}",
                upstream=upstream,
                methods=["/grpc.health.v1.Health/Check"],
                handlers=[check],
                max_recv_bytes=1 << 20,
                max_send_bytes=1 << 20,
            )
            await relay.start()
        else:
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
        port_out.put(port)
        while not begin.is_set():
            await asyncio.sleep(0.01)
        at_begin = cpu_s()
        while not stop.is_set():
            await asyncio.sleep(0.01)
        port_out.put(cpu_s() - at_begin)
        if relay is not None:
            await relay.stop(0)
        await server.stop(None)

    asyncio.run(serve())


def grpc_floor(seconds: float, samples: int, callers: int = AGENTS, front: bool = False) -> dict[str, float]:
    """What grpc.aio costs on this machine before any work: the p50 of lone calls, and
    ``callers`` closed-loop callers in one asyncio client process (as figure 2u's unary client):
    calls/s and each side's CPU per call. ``front``: the same call served through the native gRPC
    front and its relay to the Python handler (what a node does with every unary call)."""
    import multiprocessing as mp

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    ctx = mp.get_context("spawn")
    port_q, begin, stop = ctx.Queue(), ctx.Event(), ctx.Event()
    server = ctx.Process(target=_floor_server, args=(port_q, begin, stop, front), daemon=True)
    server.start()
    try:
        port = port_q.get(timeout=60)

        async def client() -> dict[str, float]:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                request = health_pb2.HealthCheckRequest()
                for _ in range(50):
                    await stub.Check(request)
                lone = []
                for _ in range(samples):
                    t = time.perf_counter()
                    await stub.Check(request)
                    lone.append(time.perf_counter() - t)
                lone.sort()
                calls = 0
                end = time.monotonic() + seconds

                async def caller() -> None:
                    nonlocal calls
                    while time.monotonic() < end:
                        await stub.Check(request)
                        calls += 1

                begin.set()
                await asyncio.sleep(0.05)  # the server's first reading is taken before the callers start
                before, started = os.times(), time.monotonic()
                await asyncio.gather(*(caller() for _ in range(callers)))
                after, took = os.times(), time.monotonic() - started
                stop.set()
            used = (after.user + after.system) - (before.user + before.system)
            return {
                "p50_ms": lone[len(lone) // 2] * 1e3,
                "rate": calls / took,
                "client_ms": used / calls * 1e3,
                "calls": calls,
            }

        out = asyncio.run(client())
        # Over the callers' phase, plus up to one 10 ms poll of the stop flag after it.
        out["server_ms"] = port_q.get(timeout=30) / out["calls"] * 1e3
        return out
    finally:
        stop.set()
        server.join(timeout=10)
        if server.is_alive():
            server.kill()


def print_floor(f: dict[str, float], seconds: float, samples: int) -> None:
    print()
    print("## The floor: a grpc.aio unary call that does nothing, same machine, same run")
    print()
    print(
        f"- the health service's Check answered at once; {samples} lone calls, then {AGENTS} closed-loop callers "
        f"in one asyncio process for {seconds:g} s; CPU from os.times() of each process"
    )
    print()
    print("| lone call p50 | calls/s, 64 callers | server CPU per call | client CPU per call |")
    print("|---:|---:|---:|---:|")
    print(f"| {f['p50_ms']:.2f} ms | {f['rate']:,.0f}/s | {f['server_ms']:.3f} ms | {f['client_ms']:.3f} ms |")


if __name__ == "__main__":
    main()
