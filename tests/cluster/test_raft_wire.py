"""What crosses the Raft port (cluster/node/raft_wire.py): the cipher in place of Fernet, and the frame."""

from __future__ import annotations

import os
import pickle
import socket
import zlib
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pysyncobj.encryptor import getEncryptor
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import TcpConnection

from waitgraph.node.raft import RaftConfig, WaitgraphSyncObj, build_conf
from waitgraph.node.raft_wire import (
    HKDF_INFO,
    MIN_TOKEN,
    SMALL_FRAME,
    InvalidToken,
    RaftCipher,
    WaitgraphConnection,
    WaitgraphTransport,
    derive_key,
)
from waitgraph.statemachine import StateMachine

from . import fakes
from .harness import free_ports

MESSAGE = os.urandom(40) + b"x" * 500


def test_round_trip_keeps_the_timestamp_and_the_bytes():
    cipher = RaftCipher("secret")
    token = cipher.encrypt_at_time(MESSAGE, 123456)
    assert cipher.extract_timestamp(token) == 123456
    assert cipher.decrypt(token) == MESSAGE
    assert RaftCipher("secret").decrypt(token) == MESSAGE  # another member, same secret
    assert cipher.decrypt(cipher.encrypt_at_time(b"", 0)) == b""


def test_contents_are_not_in_clear_and_every_frame_is_different():
    cipher = RaftCipher("secret")
    first, second = cipher.encrypt_at_time(MESSAGE, 1), cipher.encrypt_at_time(MESSAGE, 1)
    assert first != second  # a fresh nonce each time
    assert b"x" * 16 not in first and MESSAGE[:40] not in first


def test_every_changed_bit_is_refused():
    cipher = RaftCipher("secret")
    token = cipher.encrypt_at_time(MESSAGE, 7)
    for pos in range(len(token)):
        tampered = token[:pos] + bytes([token[pos] ^ 0x01]) + token[pos + 1 :]
        with pytest.raises(InvalidToken):
            cipher.decrypt(tampered)


def test_a_moved_timestamp_does_not_authenticate():
    cipher = RaftCipher("secret")
    token = cipher.encrypt_at_time(MESSAGE, 7)
    later = token[:1] + (8).to_bytes(8, "big") + token[9:]
    assert cipher.extract_timestamp(later) == 8  # read before decrypt, as pysyncobj does ...
    with pytest.raises(InvalidToken):  # ... and refused by decrypt: pysyncobj drops the connection
        cipher.decrypt(later)


def test_a_wrong_secret_short_frames_and_fernet_frames_are_refused():
    token = RaftCipher("secret").encrypt_at_time(MESSAGE, 7)
    with pytest.raises(InvalidToken):
        RaftCipher("other secret").decrypt(token)
    for junk in (b"", token[: MIN_TOKEN - 1], b"\x00" * 64):
        with pytest.raises(InvalidToken):
            RaftCipher("secret").extract_timestamp(junk)
    for junk in (b"", token[: MIN_TOKEN - 1], b"\x00" * 64, token[:-1], token + b"\x00"):
        with pytest.raises(InvalidToken):
            RaftCipher("secret").decrypt(junk)
    fernet = getEncryptor("secret").encrypt_at_time(MESSAGE, 7)
    with pytest.raises(InvalidToken):
        RaftCipher("secret").extract_timestamp(fernet)
    with pytest.raises(InvalidToken):
        RaftCipher("secret").decrypt(fernet)


def test_the_key_is_pysyncobjs_derivation_then_a_label_of_its_own():
    fernet = getEncryptor("secret")  # its two halves are pysyncobj's PBKDF2 output
    stretched = fernet._signing_key + fernet._encryption_key
    assert len(stretched) == 32
    expected = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=HKDF_INFO).derive(stretched)
    assert derive_key("secret") == expected
    assert derive_key("secret") != stretched  # never Fernet's key itself
    assert derive_key(b"secret") == derive_key("secret")
    assert derive_key("secret") != derive_key("secret2")


def _two_member_config(tmp_path: Any) -> RaftConfig:
    """This member and one peer; pysyncobj opens the connection from the larger address to the
    smaller one (``TCPTransport._shouldConnect``), so this member gets the larger one."""
    peer, me = sorted(f"127.0.0.1:{port}" for port in free_ports(2))
    return RaftConfig(raft_address=me, peers=(peer,), data_dir=tmp_path, password="secret")


def test_the_syncobj_and_every_connection_use_it(tmp_path):
    cfg = _two_member_config(tmp_path)
    obj = WaitgraphSyncObj(cfg.raft_address, list(cfg.peers), build_conf(cfg, autoTick=False), StateMachine())
    try:
        assert isinstance(obj.encryptor, RaftCipher)
        assert RaftCipher("secret").decrypt(obj.encryptor.encrypt_at_time(MESSAGE, 1)) == MESSAGE
        connections = obj._SyncObj__transport._connections
        assert connections and all(conn.encryptor is obj.encryptor for conn in connections.values())
    finally:
        obj.destroy()
    plain = fakes.follower(tmp_path / "plain", password=None)
    assert plain.encryptor is None  # no password, no cipher (RaftConfig always sets one)


def _connection_pair() -> tuple[Any, WaitgraphConnection, TcpConnection, list[Any]]:
    """A WaitgraphConnection sending to a plain pysyncobj TcpConnection over a socket pair."""
    poller = createPoller("auto")
    ours, theirs = socket.socketpair()
    for sock in (ours, theirs):
        sock.setblocking(False)
    received: list[Any] = []
    sender = WaitgraphConnection.adopt(TcpConnection(poller, socket=ours))
    receiver = TcpConnection(poller, socket=theirs, onMessageReceived=received.append)
    sender.encryptor = receiver.encryptor = RaftCipher("secret")
    return poller, sender, receiver, received


def _frames(poller: Any, received: list[Any], n: int) -> list[Any]:
    for _ in range(200):
        if len(received) >= n:
            break
        poller.poll(0.01)
    return received


def test_our_frames_decode_on_pysyncobjs_receiving_side():
    poller, sender, receiver, received = _connection_pair()
    small = {"type": "append_entries", "entries": [(b"\x00\xff" * 100, 7, 2)], "term": 2, "commit_index": 6}
    large = {"type": "append_entries", "serialized": (b"x" * 200_000, True, False)}
    sender.sendRandKey = receiver.recvRandKey = os.urandom(32)
    sender.send(small)
    sender.send(large)
    assert _frames(poller, received, 2) == [small, large]


class _Recording(RaftCipher):
    """RaftCipher that keeps what it was asked to encrypt: the frame before encryption."""

    def __init__(self) -> None:
        super().__init__("secret")
        self.frames: list[bytes] = []

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        self.frames.append(data)
        return super().encrypt_at_time(data, current_time)


def test_small_messages_go_uncompressed_and_large_ones_compressed():
    poller, sender, _, received = _connection_pair()
    sender.encryptor = recording = _Recording()
    small, large = b"x" * 1000, b"x" * (SMALL_FRAME * 4)
    sender.send(small)
    sender.send(large)
    assert _frames(poller, received, 2) == [small, large]
    stored, deflated = recording.frames
    assert len(stored) > len(pickle.dumps(small, 5))  # zlib's stored blocks around the pickle
    assert pickle.loads(zlib.decompress(stored)) == small
    assert len(deflated) < len(large) // 20


def test_the_transport_adopts_every_connection(tmp_path):
    cfg = _two_member_config(tmp_path)
    obj = WaitgraphSyncObj(cfg.raft_address, list(cfg.peers), build_conf(cfg, autoTick=False), StateMachine())
    try:
        transport = obj._SyncObj__transport
        assert isinstance(transport, WaitgraphTransport)
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
