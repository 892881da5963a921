"""A stranger on the Raft port of every node of a real cluster cannot stall it (cluster/node/raft_wire.py).

Each attack runs against all three nodes at once for :data:`ATTACK_S` (the issue asks for 20 s;
8 s is several handshake and frame deadlines and keeps the suite within this machine's budget)
while a writer submits writes one after the other through a node's control channel (the same
``RaftNode.submit`` path a gRPC write takes). Each test asserts that no write failed, that the
leader and the term did not change (no election), that every node's RSS stayed within
:data:`RSS_GROWTH_LIMIT` of what it was before, and that the nodes counted the refusal the attack
should cause (the protection acted, not luck). Before this change the first attack froze every
node's Raft thread for 19-23 s and grew it to 218 MB.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil
import pytest

from waitgraph.node.raft_wire import FrameCodec, encode_payload

from .harness import PASSWORD, Cluster, Node, envelope, wait_for

ATTACK_S = 8.0
RSS_GROWTH_LIMIT = 64 * 1024 * 1024


@dataclass
class Writes:
    ok: int = 0
    failed: list[object] = field(default_factory=list)


def _writer(node: Node, stop: threading.Event, writes: Writes) -> None:
    i = 0
    while not stop.is_set():
        i += 1
        try:
            got = node.submit(envelope(10_000 + i), timeout_s=10)
        except OSError as exc:
            writes.failed.append(repr(exc))
            continue
        if isinstance(got, dict) or not got.ok:
            writes.failed.append(got)
        else:
            writes.ok += 1


def _host_port(node: Node) -> tuple[str, int]:
    host, port = node.raft.rsplit(":", 1)
    assert host == "127.0.0.1"
    return host, int(port)


def _connect(node: Node) -> socket.socket | None:
    try:
        return socket.create_connection(_host_port(node), timeout=1)
    except OSError:
        return None


def huge_length(node: Node, stop: threading.Event) -> None:
    """pysyncobj's length prefix 0x7FFFFFFF, then zeros at up to 8 MiB/s, reconnecting when closed."""
    zeros = bytes(64 * 1024)
    while not stop.is_set():
        sock = _connect(node)
        if sock is None:
            continue
        with sock:
            try:
                sock.sendall(struct.pack("i", 0x7FFFFFFF))
                while not stop.is_set():
                    sock.sendall(zeros)
                    time.sleep(len(zeros) / (8 * 1024 * 1024))
            except OSError:
                pass


def half_open(node: Node, stop: threading.Event) -> None:
    """Hold as many connections as the node lets stay open (up to 300), sending nothing."""
    held: list[socket.socket] = []
    while not stop.is_set():
        alive = []
        for sock in held:
            sock.setblocking(False)
            try:
                closed = sock.recv(1) == b""
            except BlockingIOError:
                closed = False
            except OSError:
                closed = True
            (sock.close() if closed else alive.append(sock))
        held = alive
        while len(held) < 300 and not stop.is_set():
            sock = _connect(node)
            if sock is None:
                break
            held.append(sock)
        time.sleep(0.05)
    for sock in held:
        sock.close()


def random_bytes(node: Node, stop: threading.Event) -> None:
    while not stop.is_set():
        sock = _connect(node)
        if sock is None:
            continue
        with sock:
            try:
                while not stop.is_set():
                    sock.sendall(os.urandom(16 * 1024))
                    time.sleep(0.002)
            except OSError:
                pass


def _recorded_frames(peer: str) -> list[bytes]:
    """The first two frames a member sends on a connection it opened, as a sniffer would record
    them: its random handshake key, then its address wrapped with the key the other side chose."""
    codec = FrameCodec(PASSWORD)
    their_key = os.urandom(32)
    return [
        codec.seal(encode_payload(os.urandom(32)), sequence=0, direction=0),
        codec.seal(encode_payload((their_key, peer)), sequence=1, direction=0),
    ]


def replayed_frames(node: Node, stop: threading.Event) -> None:
    """Replay a recorded valid connection opening on new connections: the frames, then the
    first one twice."""
    peer = next(p for p in node.peers)
    recorded = _recorded_frames(peer)
    n = 0
    while not stop.is_set():
        sock = _connect(node)
        if sock is None:
            continue
        n += 1
        with sock:
            try:
                stream = b"".join(recorded) if n % 2 else recorded[0] * 2
                sock.sendall(stream)
                sock.settimeout(2)
                while sock.recv(4096):  # the node answers the handshake, then closes
                    pass
            except OSError:
                pass


def slow_loris(node: Node, stop: threading.Event) -> None:
    """50 connections, each sending one byte of a valid frame per second."""
    frame = _recorded_frames(node.peers[0])[0]
    conns: dict[socket.socket, int] = {}
    while not stop.is_set():
        while len(conns) < 50:
            sock = _connect(node)
            if sock is None:
                break
            conns[sock] = 0
        for sock, sent in list(conns.items()):
            try:
                sock.send(frame[sent % len(frame) : sent % len(frame) + 1])
                conns[sock] = sent + 1
            except OSError:
                sock.close()
                del conns[sock]
        stop.wait(1.0)
    for sock in conns:
        sock.close()


def _rss(node: Node) -> int:
    assert node.proc is not None
    return int(psutil.Process(node.proc.pid).memory_info().rss)


def _under_attack(
    cluster: Cluster, attack: Callable[[Node, threading.Event], None], expected: set[str]
) -> dict[str, dict[str, int]]:
    leader = cluster.leader()
    for i in range(20):
        assert leader.submit(envelope(i)).ok
    term = leader.status()["term"]
    baseline = {n.name: _rss(n) for n in cluster.nodes}
    peak = dict(baseline)
    stop = threading.Event()
    writes = Writes()
    threads = [threading.Thread(target=attack, args=(n, stop), daemon=True) for n in cluster.nodes]
    threads.append(threading.Thread(target=_writer, args=(leader, stop, writes), daemon=True))
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + ATTACK_S
        while time.monotonic() < deadline:
            for n in cluster.nodes:
                peak[n.name] = max(peak[n.name], _rss(n))
            time.sleep(0.25)
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    refused = {n.name: n.status()["refused"] for n in cluster.nodes}
    assert writes.failed == [], writes.failed[:5]
    assert writes.ok > 0
    for n in cluster.nodes:
        assert n.alive()
        status = n.status()
        assert status["term"] == term, (n.name, status["term"], term)  # no election at all
        assert status["leader"] == leader.raft
        assert peak[n.name] - baseline[n.name] < RSS_GROWTH_LIMIT, (n.name, baseline[n.name], peak[n.name])
        assert expected & set(refused[n.name]), (n.name, refused[n.name])
    assert cluster.leader() is leader
    cluster.converged_digest()
    growth = {name: f"{(peak[name] - baseline[name]) / 2**20:.1f} MiB" for name in peak}
    print(f"\n{attack.__name__}: {writes.ok} writes acknowledged, none failed; RSS growth {growth}; refused {refused}")
    return refused


@pytest.mark.timeout(90)
def test_a_huge_length_streaming_zeros_does_not_stall_the_cluster(make_cluster):
    _under_attack(make_cluster(), huge_length, {"bad_magic"})


@pytest.mark.timeout(90)
def test_many_half_open_connections_do_not_stall_the_cluster(make_cluster):
    refused = _under_attack(make_cluster(), half_open, {"unauthenticated_limit", "handshake_timeout"})
    assert all(r.get("unauthenticated_limit", 0) > 0 for r in refused.values()), refused


@pytest.mark.timeout(90)
def test_random_bytes_do_not_stall_the_cluster(make_cluster):
    _under_attack(make_cluster(), random_bytes, {"bad_magic"})


@pytest.mark.timeout(90)
def test_a_replayed_valid_frame_does_not_stall_the_cluster(make_cluster):
    refused = _under_attack(make_cluster(), replayed_frames, {"bad_message"})
    assert all(r.get("out_of_sequence", 0) > 0 for r in refused.values()), refused


@pytest.mark.timeout(90)
def test_a_slow_loris_does_not_stall_the_cluster(make_cluster):
    _under_attack(make_cluster(), slow_loris, {"handshake_timeout", "unauthenticated_limit"})


@pytest.mark.timeout(120)
def test_a_member_reconnects_through_a_flood_of_idle_connections(make_cluster):
    """A restarted follower must get its connections accepted while every node's waiting slots
    are being filled with idle connections: its key arrives at once, so the idle ones go first."""
    cluster = make_cluster()
    leader = cluster.leader()
    follower = cluster.followers(leader)[0]
    stop = threading.Event()
    writes = Writes()
    threads = [threading.Thread(target=half_open, args=(n, stop), daemon=True) for n in cluster.nodes]
    threads.append(threading.Thread(target=_writer, args=(leader, stop, writes), daemon=True))
    try:
        for t in threads:
            t.start()
        time.sleep(2)  # the flood is on
        follower.kill()
        follower.start()
        wait_for(
            lambda: follower.status()["leader"] == leader.raft and all(follower.status()["peers_connected"].values()),
            30,
            "the restarted follower to reconnect to both members",
        )
        assert follower.status()["refused"].get("unauthenticated_limit", 0) > 0  # the flood reached it too
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    assert writes.failed == [], writes.failed[:5]
    cluster.converged_digest()
