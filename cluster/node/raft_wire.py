"""What crosses the Raft port: the cipher and the frame pysyncobj's TCP transport sends.

Both replace a piece of pysyncobj 0.3.17's ``tcp_connection.py``, which frames every message as
``zlib.compress(pickle.dumps(message, 2), 3)`` and, with a cluster password, hands that to the
connection's ``encryptor``: ``encrypt_at_time(data, int(monotonic()))`` to send;
``extract_timestamp(token)`` (the receiver keeps it non-decreasing per connection) then
``decrypt(token)`` and ``pickle.loads(zlib.decompress(data))`` to receive, where any exception
drops the connection (and resets the kept timestamp). A write costs the leader four sends and four
receives, on the Raft thread that every write waits for; these two keep what each step guarantees
and drop most of its cost.

**The cipher** (:class:`RaftCipher`, installed by ``WaitgraphSyncObj._SyncObj__encryptor``).
pysyncobj's encryptor (``encryptor.py``) is a ``Fernet`` keyed with PBKDF2-HMAC-SHA256(password,
pysyncobj's salt, 100,000 iterations, 32 bytes): AES-128-CBC with a random IV, HMAC-SHA256 over
version, timestamp, IV and ciphertext, base64. It builds several Python objects per call and
checks the HMAC twice per received message (``extract_timestamp`` and ``decrypt``): about 9 us to
send and 18 us to receive a 500-byte message here. :class:`RaftCipher` answers the same three calls
with one AEAD call each (about 3 us and 2.5 us):

- key: the same PBKDF2 derivation of the password (pysyncobj's salt and iteration count), then
  HKDF-SHA256 with a label of its own, so that the AEAD key is never Fernet's key;
- cipher: AES-256-GCM-SIV with a random 96-bit nonce per message. Every member shares the key, so
  nonces are random; GCM-SIV stays safe if one ever repeats (it reveals only that two messages
  were identical; plain AES-GCM would lose its authenticity);
- token: ``version (1 byte) | timestamp (8, big-endian) | nonce (12) | ciphertext + tag (16)``;
  version and timestamp are authenticated as associated data, like Fernet's;
- ``extract_timestamp`` checks the format and reads the timestamp; ``decrypt``, which pysyncobj
  calls right after it on the same bytes, authenticates all of it, timestamp included (pysyncobj
  keeps the timestamp only while the connection lives, and a failed ``decrypt`` drops it).

What it guarantees is what Fernet did: a peer without the secret cannot produce a frame that
decrypts (it is dropped at its first frame, before anything is unpickled); a frame changed on the
way fails authentication and its connection is dropped; contents stay confidential. pysyncobj's
replay defence (a random per-connection key inside every message, ``transport.py``) is untouched.
It does not interoperate with Fernet: every member of a cluster must run a version with this
cipher (an older node cannot connect to a newer one; restart them together).

**The frame** (:class:`WaitgraphConnection`, on every connection of :class:`WaitgraphTransport`,
the transport ``WaitgraphSyncObj`` runs with). Sending only: pickle protocol 5 instead of 2
(protocol 2 writes every ``bytes`` as ``_codecs.encode(<latin-1 str>, 'latin1')``, which costs the
sender a decode and the receiver's restricted unpickler a ``find_class`` per object: 2.4 + 5.7 us
for an ``append_entries`` of one write, against 0.6 + 1.7), and zlib level 0 (stored) for a
message under :data:`SMALL_FRAME` bytes instead of level 3 (deflate's set-up alone costs 5-9 us
per call, and a write's messages are a few hundred bytes); larger ones (dump transfers) are still
compressed, at level 1. The receiver is pysyncobj's ``pickle.loads(zlib.decompress(data))``,
unchanged: it reads any protocol and any level, and the restricted unpickler
(``cluster/node/safe_pickle.py``) still refuses every global but protocol-2 bytes.
"""

from __future__ import annotations

import functools
import os
import pickle
import struct
import zlib
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCMSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
from pysyncobj.encryptor import SALT as PYSYNCOBJ_SALT
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport

VERSION = b"\xa1"
PBKDF2_ITERATIONS = 100_000
"""pysyncobj's (``encryptor.getEncryptor``)."""
HKDF_INFO = b"waitgraph raft transport: aes-256-gcm-siv v1"
_HEAD = 1 + 8
_NONCE = 12
_TAG = 16
MIN_TOKEN = _HEAD + _NONCE + _TAG


class InvalidToken(Exception):
    """Not a frame of this cipher under this key (pysyncobj drops the connection)."""


@functools.lru_cache(maxsize=8)
def derive_key(password: str | bytes) -> bytes:
    """PBKDF2 exactly as pysyncobj derives Fernet's key, then HKDF to this cipher's own 32 bytes.

    Cached: PBKDF2 costs ~25 ms, and pysyncobj still runs its own when a SyncObj is built."""
    secret = password if isinstance(password, bytes) else password.encode()
    stretched = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=PYSYNCOBJ_SALT, iterations=PBKDF2_ITERATIONS)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=HKDF_INFO).derive(stretched.derive(secret))


class RaftCipher:
    """pysyncobj's ``encryptor`` interface (the three calls ``TcpConnection`` makes), AES-256-GCM-SIV."""

    __slots__ = ("_aead",)

    def __init__(self, password: str | bytes) -> None:
        self._aead = AESGCMSIV(derive_key(password))

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        head = VERSION + current_time.to_bytes(8, "big")
        nonce = os.urandom(_NONCE)
        return head + nonce + self._aead.encrypt(nonce, data, head)

    @staticmethod
    def extract_timestamp(token: bytes) -> int:
        if len(token) < MIN_TOKEN or token[:1] != VERSION:
            raise InvalidToken("not a waitgraph Raft frame")
        return int.from_bytes(token[1:_HEAD], "big")

    def decrypt(self, token: bytes) -> bytes:
        if len(token) < MIN_TOKEN or token[:1] != VERSION:
            raise InvalidToken("not a waitgraph Raft frame")
        try:
            return self._aead.decrypt(token[_HEAD : _HEAD + _NONCE], token[_HEAD + _NONCE :], token[:_HEAD])
        except InvalidTag:
            raise InvalidToken("the frame does not authenticate under the cluster secret") from None


SMALL_FRAME = 4096
"""Pickled messages shorter than this are sent uncompressed (zlib level 0); longer ones at level 1."""
PICKLE_PROTOCOL = 5


class WaitgraphConnection(TcpConnection):  # type: ignore[misc]
    """pysyncobj's ``TcpConnection`` with the cheaper frame (module docstring); receiving is unchanged.

    Not constructed: :meth:`adopt` switches the class of a connection pysyncobj made."""

    @classmethod
    def adopt(cls, conn: TcpConnection) -> WaitgraphConnection:
        conn.__class__ = cls
        assert isinstance(conn, WaitgraphConnection)
        return conn

    def send(self, message: Any) -> None:
        # ``TcpConnection.send`` with only the pickle protocol and the zlib level changed.
        if self.sendRandKey:
            message = (self.sendRandKey, message)
        data = pickle.dumps(message, PICKLE_PROTOCOL)
        data = zlib.compress(data, 0 if len(data) < SMALL_FRAME else 1)
        if self.encryptor:
            data = self.encryptor.encrypt_at_time(data, int(monotonic_time()))
        self._TcpConnection__writeBuffer += struct.pack("i", len(data)) + data
        self._TcpConnection__trySendBuffer()


class WaitgraphTransport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's ``TCPTransport`` whose connections, outgoing and incoming, are :class:`WaitgraphConnection`.

    pysyncobj makes them in two places, ``TCPTransport.addNode`` (outgoing, once per peer) and
    ``TcpServer`` (incoming, handed to ``_onNewIncomingConnection`` before its first byte is read
    or sent); both are adopted there."""

    def addNode(self, node: Any) -> None:
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is not None:
            WaitgraphConnection.adopt(conn)

    def _onNewIncomingConnection(self, conn: TcpConnection) -> None:
        WaitgraphConnection.adopt(conn)
        super()._onNewIncomingConnection(conn)
