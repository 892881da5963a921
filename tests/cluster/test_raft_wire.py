"""What crosses the Raft port (cluster/node/raft/_transport.py): the frame, its reader, the receive path."""

from __future__ import annotations

import logging
import os
import pickle
import socket
import struct
import zlib
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pysyncobj.encryptor import getEncryptor
from pysyncobj.poller import createPoller

from waitgraph.node.raft import RaftConfig, _transport
from waitgraph.node.raft._config import build_conf
from waitgraph.node.raft._syncobj import WaitgraphSyncObj
from waitgraph.node.raft._transport import (
    HEADER_BYTES,
    HKDF_INFO,
    MAX_MESSAGE_BYTES,
    SMALL_FRAME,
    FrameCodec,
    FrameReader,
    FrameRefused,
    Refusals,
    WaitgraphConnection,
    WaitgraphServer,
    WaitgraphTransport,
    decode_payload,
    derive_keys,
    encode_payload,
)
from waitgraph.statemachine import StateMachine

from . import fakes
from .harness import free_ports

SECRET = "wire-test-secret-" + "k" * 32
MESSAGE = os.urandom(40) + b"x" * 500
CODEC = FrameCodec(SECRET)


def reader(direction: int = 0, **kw: Any) -> FrameReader:
    return FrameReader(CODEC, direction=direction, **kw)


def frames(*payloads: bytes, direction: int = 0, first: int = 0) -> list[bytes]:
    return [CODEC.seal(p, sequence=first + i, direction=direction) for i, p in enumerate(payloads)]


def refused(r: FrameReader, data: bytes) -> str:
    with pytest.raises(FrameRefused) as caught:
        r.feed(data)
    return caught.value.reason


def test_frames_round_trip_in_any_pieces():
    stream = b"".join(frames(MESSAGE, b"", b"y" * 70_000))
    whole = reader().feed(stream)
    assert whole == [MESSAGE, b"", b"y" * 70_000]
    r, got = reader(), []
    for i in range(len(stream)):  # one byte at a time
        got += r.feed(stream[i : i + 1], float(i))
    assert got == whole and r.buffered == 0 and r.started_at is None and r.sequence == 3


def test_contents_are_not_in_clear_and_every_frame_is_different():
    first, second = CODEC.seal(MESSAGE, sequence=0, direction=0), CODEC.seal(MESSAGE, sequence=0, direction=0)
    assert first != second  # a fresh nonce each time
    assert b"x" * 16 not in first and MESSAGE[:40] not in first


def test_every_changed_bit_is_refused():
    frame = frames(MESSAGE[:64])[0]
    reasons = set()
    for pos in range(len(frame)):
        for bit in range(8):
            tampered = frame[:pos] + bytes([frame[pos] ^ (1 << bit)]) + frame[pos + 1 :]
            reasons.add(refused(reader(), tampered))
    # magic, version, header fields and tag, body: each part is checked by something
    assert reasons == {"bad_magic", "bad_version", "bad_header", "bad_body"}


def test_every_truncation_is_refused():
    first, *rest = frames(MESSAGE, MESSAGE, MESSAGE)
    following = b"".join(rest)
    for cut in range(len(first)):
        r = reader()
        assert r.feed(first[:cut], 5.0) == []  # nothing is ever delivered from part of a frame
        assert r.started_at == (5.0 if cut else None)  # the stall deadline runs from the first byte
        # What follows a truncated frame is read as its rest (or, cut at 0, is a dropped frame): refused.
        assert refused(r, following) in {"bad_magic", "bad_version", "bad_header", "bad_body", "out_of_sequence"}


def test_an_oversize_length_is_refused_before_its_body_is_buffered():
    big = CODEC.seal(b"z" * 5000, sequence=0, direction=0)
    r = reader(max_body=4096)
    assert refused(r, big[:HEADER_BYTES]) == "oversize"  # the header alone decides
    assert r.buffered == HEADER_BYTES
    # A stranger's 0x7FFFFFFF: pysyncobj's frame (native length, then anything) ...
    r = reader()
    assert refused(r, struct.pack("i", 0x7FFFFFFF) + bytes(HEADER_BYTES)) == "bad_magic"
    assert r.buffered == HEADER_BYTES
    # ... and ours with a guessed tag: never believed.
    forged = struct.pack(">2sBBIQ12s", b"WG", 2, 0, 0x7FFFFFFF, 0, bytes(12)) + os.urandom(16)
    r = reader()
    assert refused(r, forged + bytes(1 << 20)) == "bad_header"
    assert r.buffered == HEADER_BYTES


def test_replayed_reordered_and_reflected_frames_are_refused():
    first, second = frames(b"one", b"two")
    r = reader()
    assert r.feed(first) == [b"one"]
    assert refused(r, first) == "out_of_sequence"  # the same frame again
    assert refused(reader(), second) == "out_of_sequence"  # the second one first
    assert refused(reader(direction=1), first) == "out_of_sequence"  # sent back the way it came


def test_feature_bits_of_a_later_release_are_read_and_the_direction_still_checked():
    announcing = [
        CODEC.seal(b"one", sequence=0, direction=0, features=0x7F),
        CODEC.seal(b"two", sequence=1, direction=0),
    ]
    assert reader().feed(b"".join(announcing)) == [b"one", b"two"]
    assert refused(reader(direction=1), announcing[0]) == "out_of_sequence"  # bit 0 is still the direction


def test_a_wrong_secret_old_frames_and_unknown_versions_are_refused():
    frame = frames(MESSAGE)[0]
    assert refused(FrameReader(FrameCodec("another-secret-" + "q" * 32), direction=0), frame) == "bad_header"
    fernet = getEncryptor(SECRET).encrypt_at_time(MESSAGE, 7)
    assert refused(reader(), struct.pack("i", len(fernet)) + fernet) == "bad_magic"
    v1 = b"\xa1" + (7).to_bytes(8, "big") + os.urandom(12 + 16 + 100)  # the previous release's token
    assert refused(reader(), struct.pack("i", len(v1)) + v1) == "bad_magic"
    fields = struct.pack(">2sBBIQ12s", b"WG", 3, 0, 32, 0, bytes(12))
    future = fields + CODEC._tag(fields) + bytes(32)  # authentic, but a version this node does not read
    with pytest.raises(FrameRefused, match="frame version 3"):
        reader().feed(future)


def test_the_keys_are_pysyncobjs_derivation_then_hkdf_of_their_own():
    fernet = getEncryptor("secret")  # its two halves are pysyncobj's PBKDF2 output
    stretched = fernet._signing_key + fernet._encryption_key
    expected = HKDF(algorithm=hashes.SHA256(), length=64, salt=None, info=HKDF_INFO).derive(stretched)
    assert derive_keys("secret") == (expected[:32], expected[32:])
    assert stretched not in derive_keys("secret")  # never Fernet's key itself
    assert derive_keys(b"secret") == derive_keys("secret") != derive_keys("secret2")


def test_payloads_inflate_with_a_cap():
    assert decode_payload(encode_payload({"a": [b"x", 1]})) == {"a": [b"x", 1]}
    bomb = zlib.compress(pickle.dumps(b"\0" * (MAX_MESSAGE_BYTES + 1), 5), 9)
    with pytest.raises(ValueError, match="inflates past"):
        decode_payload(bomb)
    with pytest.raises(ValueError):
        decode_payload(encode_payload("cut")[:-3])


def test_refusals_are_counted_each_and_logged_once_per_interval(caplog):
    now = [100.0]
    refusals = Refusals(clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "waitgraph.node.raft_wire"):
        for _ in range(50):
            refusals.record("bad_header", "does not authenticate", "127.0.0.1:5")
        refusals.record("stalled", "slow", "127.0.0.1:6")
        now[0] += _transport.LOG_EVERY_S + 1
        refusals.record("bad_header", "does not authenticate", "127.0.0.1:5")
    assert refusals.snapshot() == {"bad_header": 51, "stalled": 1}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "49 more since the last such line" in lines[-1]


def _two_member_config(tmp_path: Any) -> RaftConfig:
    """This member and one peer; pysyncobj opens the connection from the larger address to the
    smaller one (``TCPTransport._shouldConnect``), so this member gets the larger one."""
    peer, me = sorted(f"127.0.0.1:{port}" for port in free_ports(2))
    return RaftConfig(raft_address=me, peers=(peer,), data_dir=tmp_path, password=SECRET)


def test_the_syncobj_and_every_connection_use_it(tmp_path):
    cfg = _two_member_config(tmp_path)
    obj = WaitgraphSyncObj(cfg.raft_address, list(cfg.peers), build_conf(cfg, autoTick=False), StateMachine())
    try:
        assert isinstance(obj.encryptor, FrameCodec)
        frame = obj.encryptor.seal(MESSAGE, sequence=0, direction=0)
        assert reader().feed(frame) == [MESSAGE]  # another member, same secret
        connections = obj._SyncObj__transport._connections
        assert connections and all(conn.encryptor is obj.encryptor for conn in connections.values())
    finally:
        obj.destroy()
    plain = fakes.follower(tmp_path / "plain", password=None)
    assert plain.encryptor is None  # no password, no codec (RaftConfig always sets one)


def _connection_pair() -> tuple[Any, WaitgraphConnection, WaitgraphConnection, list[Any]]:
    """Two WaitgraphConnections over a socket pair: ``sender`` as the side that connected."""
    poller = createPoller("auto")
    ours, theirs = socket.socketpair()
    for sock in (ours, theirs):
        sock.setblocking(False)
    received: list[Any] = []
    sender = WaitgraphConnection(poller, socket=ours)
    sender._init_wire(outgoing=True, refusals=Refusals(), peer="sender")
    receiver = WaitgraphConnection(poller, socket=theirs, onMessageReceived=received.append)
    receiver._init_wire(outgoing=False, refusals=Refusals(), peer="receiver")
    sender.encryptor = receiver.encryptor = CODEC
    return poller, sender, receiver, received


def _frames(poller: Any, received: list[Any], n: int) -> list[Any]:
    for _ in range(400):
        if len(received) >= n:
            break
        poller.poll(0.01)
    return received


def test_messages_cross_a_connection_with_the_handshake_key():
    poller, sender, receiver, received = _connection_pair()
    small = {"type": "append_entries", "entries": [(b"\x00\xff" * 100, 7, 2)], "term": 2, "commit_index": 6}
    large = {"type": "append_entries", "serialized": (os.urandom(200_000), True, False)}
    sender.sendRandKey = receiver.recvRandKey = os.urandom(32)
    sender.send(small)
    sender.send(large)
    assert _frames(poller, received, 2) == [small, large]
    sender.sendRandKey = os.urandom(32)  # a frame of another connection's handshake: refused
    sender.send(small)
    _frames(poller, received, 3)
    assert len(received) == 2 and receiver._refusals.snapshot() == {"bad_message": 1}


class _CountingSocket:
    """A socket whose ``recv`` adds up what it returned."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.read = sock, 0

    def recv(self, n: int) -> bytes:
        data = self.sock.recv(n)
        self.read += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def test_nothing_but_the_key_leaves_before_the_handshake_completes():
    """pysyncobj calls an outgoing connection CONNECTED once it sent its key: a message sent
    before the peer's key arrived would go unwrapped, be refused and close the connection."""
    poller, sender, receiver, received = _connection_pair()
    key = os.urandom(32)
    sender.send(key)  # the handshake key: frame 0, the only unwrapped message
    _frames(poller, received, 1)
    receiver.recvRandKey = their_key = os.urandom(32)  # the receiver answers with its own key ...
    sender.send({"type": "next_node_idx", "next_node_idx": 7})  # ... which the sender has not yet
    sender.sendRandKey = their_key
    sender.send({"type": "next_node_idx", "next_node_idx": 8})
    _frames(poller, received, 2)
    assert received == [key, {"type": "next_node_idx", "next_node_idx": 8}]
    assert receiver._refusals.snapshot() == {} and receiver.state == 2  # CONNECTED: never closed
    assert sender.unsent_before_handshake == 1


def test_one_event_reads_at_most_the_budget(monkeypatch):
    budget = 16 * 1024  # far below what the socket pair buffers, so only the budget stops a read
    monkeypatch.setattr(_transport, "READ_BUDGET_BYTES", budget)
    poller, sender, receiver, received = _connection_pair()
    counting = receiver._TcpConnection__socket = _CountingSocket(receiver._TcpConnection__socket)
    per_event: list[int] = []
    read_buffer = receiver._TcpConnection__tryReadBuffer

    def one_event() -> None:
        counting.read = 0
        read_buffer()
        per_event.append(counting.read)

    receiver._TcpConnection__tryReadBuffer = one_event
    big = os.urandom(8 * budget)  # incompressible: a frame of about 8 budgets
    sender.send(big)
    _frames(poller, received, 1)
    assert received == [big]
    assert max(per_event) <= budget and sum(per_event) > 8 * budget


def test_small_messages_go_uncompressed_and_large_ones_compressed():
    small, large = pickle.dumps(b"x" * 1000, 5), pickle.dumps(b"x" * (SMALL_FRAME * 4), 5)
    stored, deflated = encode_payload(b"x" * 1000), encode_payload(b"x" * (SMALL_FRAME * 4))
    assert len(stored) > len(small) and zlib.decompress(stored) == small  # zlib's stored blocks
    assert len(deflated) < len(large) // 20


@pytest.mark.parametrize("size", [0, 1, 66, 1000, SMALL_FRAME - 1, SMALL_FRAME, 16 * 1024 - 1])
def test_a_stored_stream_is_the_bytes_zlib_writes_at_level_0(size):
    """Small payloads skip zlib's compressor; a peer (or an older member) reads the same bytes."""
    data = os.urandom(size)
    assert _transport.zlib_stored(data) == zlib.compress(data, 0)


@pytest.mark.parametrize("size", [65_535, 65_536, 2 * 65_535, 2 * 65_535 + 1, 200_000])
def test_a_stored_stream_of_several_blocks_inflates_to_its_data(size):
    data = os.urandom(size)
    stream = _transport.zlib_stored(data)
    assert zlib.decompress(stream) == data
    assert decode_payload(_transport.zlib_stored(pickle.dumps(data, 5))) == data
    assert len(stream) == size + 2 + 5 * -(-size // 65_535) + 4  # header, one 5-byte head a block, Adler-32


def test_the_transport_builds_every_connection_as_ours(tmp_path):
    cfg = _two_member_config(tmp_path)
    obj = WaitgraphSyncObj(cfg.raft_address, list(cfg.peers), build_conf(cfg, autoTick=False), StateMachine())
    try:
        transport = obj._SyncObj__transport
        assert isinstance(transport, WaitgraphTransport) and isinstance(transport._server, WaitgraphServer)
        assert all(type(conn) is WaitgraphConnection for conn in transport._connections.values())
        obj.doTick(0.05)  # binds the server
        host, port = cfg.raft_address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=2):
            for _ in range(20):
                obj.doTick(0.01)
                if transport._unknownConnections:
                    break
            assert transport._unknownConnections
            assert all(type(conn) is WaitgraphConnection for conn in transport._unknownConnections)
    finally:
        obj.destroy()


def test_waiting_connections_are_capped_and_time_out(tmp_path, monkeypatch):
    cfg = _two_member_config(tmp_path)
    monkeypatch.setattr(_transport, "UNAUTHENTICATED_LIMIT", 4)
    obj = WaitgraphSyncObj(cfg.raft_address, list(cfg.peers), build_conf(cfg, autoTick=False), StateMachine())
    socks = []
    try:
        transport = obj._SyncObj__transport
        obj.doTick(0.05)
        host, port = cfg.raft_address.rsplit(":", 1)
        for _ in range(10):
            socks.append(socket.create_connection((host, int(port)), timeout=2))
        for _ in range(30):
            obj.doTick(0.01)
        assert len(transport._unknownConnections) == 4
        assert transport.refusals.snapshot() == {"unauthenticated_limit": 6}
        for conn in transport._unknownConnections:
            conn.accepted_at -= _transport.HANDSHAKE_TIMEOUT_S + 1
        transport._next_sweep = 0.0
        obj.doTick(0.01)
        assert not transport._unknownConnections
        assert transport.refusals.snapshot() == {"unauthenticated_limit": 6, "handshake_timeout": 4}
        assert all(closed_by_node(sock) for sock in socks)
    finally:
        for sock in socks:
            sock.close()
        obj.destroy()


def test_a_connection_that_sent_a_valid_frame_outlives_a_flood_of_idle_ones(tmp_path, monkeypatch):
    """What a member's reconnection looks like under a flood: its key arrives at once, and the
    idle connections opened after it are evicted before it is."""
    cfg = _two_member_config(tmp_path)
    monkeypatch.setattr(_transport, "UNAUTHENTICATED_LIMIT", 4)
    obj = WaitgraphSyncObj(cfg.raft_address, list(cfg.peers), build_conf(cfg, autoTick=False), StateMachine())
    socks = []
    try:
        transport = obj._SyncObj__transport
        obj.doTick(0.05)
        host, port = cfg.raft_address.rsplit(":", 1)
        member = socket.create_connection((host, int(port)), timeout=2)
        socks.append(member)
        member.sendall(FrameCodec(SECRET).seal(encode_payload(os.urandom(32)), sequence=0, direction=0))
        for _ in range(20):
            obj.doTick(0.01)
        for _ in range(12):
            socks.append(socket.create_connection((host, int(port)), timeout=2))
            for _ in range(3):
                obj.doTick(0.01)
        assert transport.refusals.snapshot() == {"unauthenticated_limit": 9}  # 13 waiting, 4 kept
        survivors = [c for c in transport._unknownConnections if c.frames_received]
        assert len(survivors) == 1  # the one that sent its key, though it is the oldest
        member.settimeout(2)
        assert member.recv(1) != b""  # and it got the node's answer (its own key), not a close
    finally:
        for sock in socks:
            sock.close()
        obj.destroy()


def closed_by_node(sock: socket.socket) -> bool:
    """The node closed ``sock``: with a reset (a refusal, ``_transport.reset_close``) or a FIN."""
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_new_connections_over_the_budget_are_closed_without_a_connection_and_a_member_still_gets_through(
    tmp_path, monkeypatch
):
    """A flood of idle connections: the budget's tokens get pysyncobj connections, the lobby holds
    a few more, the rest are closed at once and counted (``accept_budget``), and so is every lobby
    socket whose first header never comes. A member's opening gets through all the same, and a
    recording of it replayed on a new connection is refused at its header."""
    cfg = _two_member_config(tmp_path)
    monkeypatch.setattr(_transport, "NEW_CONNECTIONS_PER_S", 0.0)
    monkeypatch.setattr(_transport, "NEW_CONNECTIONS_BURST", 2)
    monkeypatch.setattr(_transport, "LOBBY_LIMIT", 3)
    obj = WaitgraphSyncObj(cfg.raft_address, list(cfg.peers), build_conf(cfg, autoTick=False), StateMachine())
    socks = []
    built: list[Any] = []
    try:
        transport = obj._SyncObj__transport
        original_build = transport._server.build
        monkeypatch.setattr(
            transport._server, "build", lambda sock, addr: (built.append(addr), original_build(sock, addr))
        )
        obj.doTick(0.05)
        host, port = cfg.raft_address.rsplit(":", 1)
        idle = [socket.create_connection((host, int(port)), timeout=2) for _ in range(10)]
        socks += idle
        for _ in range(30):
            obj.doTick(0.01)
        assert len(built) == 2 and len(transport._unknownConnections) == 2  # the burst of tokens
        assert len(transport.lobby) == 3
        assert transport.refusals.snapshot() == {"accept_budget": 5}  # closed at once, never built
        assert sum(closed_by_node(s) for s in idle[2:7]) == 5  # the oldest five after the tokens

        opening = FrameCodec(SECRET).seal(encode_payload(os.urandom(32)), sequence=0, direction=0)
        member = socket.create_connection((host, int(port)), timeout=2)
        socks.append(member)
        member.sendall(opening)
        for _ in range(30):
            obj.doTick(0.01)
        member.settimeout(2)
        assert member.recv(1) != b""  # no token left, yet it got the node's answer (its own key)
        assert len(built) == 3

        replay = socket.create_connection((host, int(port)), timeout=2)
        socks.append(replay)
        replay.sendall(opening)
        for _ in range(30):
            obj.doTick(0.01)
        assert closed_by_node(replay)
        assert transport.refusals.snapshot().get("replayed") == 1
        assert len(built) == 3  # refused at its header, without a connection

        for i, (sock, addr, since) in enumerate(transport.lobby):  # the lobby's wait is over
            transport.lobby[i] = (sock, addr, since - _transport.LOBBY_WAIT_S - 1)
        transport._next_lobby_sweep = 0.0
        obj.doTick(0.01)
        assert not transport.lobby
        assert transport.refusals.snapshot()["accept_budget"] == 8  # every idle one but the two built
        assert all(closed_by_node(s) for s in idle[2:])
    finally:
        for sock in socks:
            sock.close()
        obj.destroy()


def test_the_token_bucket_refills_at_its_rate_up_to_its_burst():
    now = [0.0]
    bucket = _transport.TokenBucket(2.0, 3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    now[0] += 0.5  # one token
    assert [bucket.take() for _ in range(2)] == [True, False]
    now[0] += 100.0  # never more than the burst
    assert sum(bucket.take() for _ in range(10)) == 3


def test_the_opening_of_an_accepted_connection_is_remembered_and_a_replay_refused():
    openings = _transport.SeenOpenings(limit=2)
    codec = FrameCodec(SECRET)
    first = [codec.seal(b"a", sequence=0, direction=0) for _ in range(3)]
    r = FrameReader(codec, direction=0, on_opening=openings.add)
    assert r.feed(first[0]) == [b"a"]
    assert refused(FrameReader(codec, direction=0, on_opening=openings.add), first[0]) == "replayed"
    for frame in first[1:]:  # the oldest is forgotten beyond the limit
        FrameReader(codec, direction=0, on_opening=openings.add).feed(frame)
    assert FrameReader(codec, direction=0, on_opening=openings.add).feed(first[0]) == [b"a"]


def test_a_frame_stalled_mid_way_closes_its_connection():
    poller, sender, receiver, _ = _connection_pair()
    frame = CODEC.seal(b"slow", sequence=0, direction=0)
    sender._TcpConnection__socket.send(frame[:10])
    for _ in range(10):
        poller.poll(0.01)
    assert receiver._reader is not None and receiver._reader.started_at is not None
    now = receiver._reader.started_at
    assert not receiver.stalled(now + _transport.FRAME_TIMEOUT_S - 0.1)
    assert receiver.stalled(now + _transport.FRAME_TIMEOUT_S + 0.1)


def test_over_the_accept_rate_the_server_stops_listening_until_a_token_comes(tmp_path):
    """Past ``ACCEPTS_PER_S`` the connections stay in the kernel's backlog, unaccepted (the Raft
    thread spends nothing on them, and the listening socket no longer wakes its poll), and are
    accepted once the bucket refills."""
    cfg = _two_member_config(tmp_path)
    obj = WaitgraphSyncObj(cfg.raft_address, list(cfg.peers), build_conf(cfg, autoTick=False), StateMachine())
    socks = []
    now = [0.0]
    try:
        transport = obj._SyncObj__transport
        server = transport._server
        server.accepts = _transport.TokenBucket(1.0, 3, clock=lambda: now[0])
        obj.doTick(0.05)
        host, port = cfg.raft_address.rsplit(":", 1)
        socks = [socket.create_connection((host, int(port)), timeout=2) for _ in range(6)]
        for _ in range(30):
            obj.doTick(0.01)
        assert server.paused and len(transport._unknownConnections) == 3
        now[0] += 2.0  # two tokens
        for _ in range(30):
            obj.doTick(0.01)
        assert len(transport._unknownConnections) == 5 and server.paused
        now[0] += 10.0
        for _ in range(30):
            obj.doTick(0.01)
        assert len(transport._unknownConnections) == 6
        assert transport.refusals.snapshot() == {}  # nobody was refused: they waited
    finally:
        for sock in socks:
            sock.close()
        obj.destroy()
