"""What crosses the Raft port: the frame, its keys, and a receive path a stranger cannot stall.

pysyncobj 0.3.17's ``tcp_connection.py`` frames every message as ``struct.pack('i', len) +
encryptor.encrypt_at_time(zlib.compress(pickle.dumps(message, 2), 3))`` and receives by reading the
socket until EAGAIN into ``bytes +=`` (quadratic), waiting for the whole announced length, and only
then decrypting. So a client that knows no secret could send a length of 0x7FFFFFFF and stream
zeros: every node's tick thread (heartbeats, votes, applies) stayed in that read loop for 20 s and
the buffer grew without bound. pysyncobj's idle timeout is checked only when a socket has an event,
so a connection that sends nothing, or one byte a second, was never closed either. Everything that
decides what to read and what to believe is replaced here; pysyncobj keeps the connection objects,
the poller, the handshake (``transport.py``: a random per-connection key inside every message) and
Raft itself.

**The frame** (version :data:`FRAME_VERSION`)::

    magic "WG" (2) | version (1) | flags (1) | body length (4, BE) | sequence (8, BE)
    | nonce (12) | header tag (16) | body: AES-256-GCM-SIV(nonce, payload, header) (length bytes)

- The 28 header bytes are authenticated by the 16-byte tag, HMAC-SHA256 under a key of its own,
  *before a byte of the body is read*: a stranger's length is never believed, an oversize length
  (:data:`MAX_FRAME_BYTES`) is refused with only the 44 header bytes buffered, and the body buffer
  is allocated once, at its final size.
- ``sequence`` counts the frames of one connection in one direction from 0, and bit 0 of ``flags``
  (the direction) is 0 from the side that connected, 1 from the side that accepted: a frame replayed, dropped, reordered
  or reflected back on the same connection fails at its header. A frame replayed on a *new*
  connection passes both checks (sequence 0 again) and then fails pysyncobj's handshake: the
  second message must carry the random key this node just chose.
- The body is the payload (``zlib(pickle(message))``, below) under AES-256-GCM-SIV with the header
  as associated data (GCM-SIV because every member shares the key and nonces are random: a
  repeated nonce reveals only that two messages were equal).
- Keys: pysyncobj's PBKDF2-HMAC-SHA256 of the secret (its salt, 100,000 iterations), then HKDF-SHA256
  with :data:`HKDF_INFO` to 64 bytes: the header MAC key and the body key, never Fernet's.
- The payload is pickle protocol 5 (protocol 2 writes every ``bytes`` as ``_codecs.encode(<latin-1
  str>)``: a decode for the sender, a ``find_class`` for the restricted unpickler) and zlib level 0
  (stored, written by :func:`zlib_stored` without zlib's compressor) below :data:`SMALL_FRAME`
  bytes, level 1 above (deflate's set-up alone costs 5-26 us; a write's messages are a few
  hundred bytes, an answer to one 66). It is inflated with a cap (:data:`MAX_MESSAGE_BYTES`)
  and unpickled by the restricted unpickler (``_unpickler.py``).

**The receive path** (:class:`WaitgraphConnection`, :class:`WaitgraphServer`,
:class:`WaitgraphTransport`): each poll event reads at most :data:`READ_BUDGET_BYTES` from one
connection (the rest waits for the next tick: one connection cannot hold the tick thread); a
connection is closed when a header does not authenticate, announces more than the maximum, is out
of sequence, when a body does not authenticate or a payload does not decode, when a frame is not
complete :data:`FRAME_TIMEOUT_S` after its first byte, and when an accepted connection has not
finished pysyncobj's handshake (it is then in ``_unknownConnections``) :data:`HANDSHAKE_TIMEOUT_S`
after it was accepted. At most :data:`UNAUTHENTICATED_LIMIT` accepted connections may be waiting
for their handshake; one more closes the oldest (a peer completes its handshake in one round trip;
the members' established connections are never touched; one that has sent its first frame is
evicted only after every connection that has not). The server accepts up to
:data:`ACCEPTS_PER_EVENT` connections per event with a backlog of :data:`LISTEN_BACKLOG` (pysyncobj:
one, and 5).

**The budget** (:meth:`WaitgraphTransport.admit`): what a stranger costs the Raft thread does not
grow with the rate at which it opens connections. An accepted socket is first judged by its first
header, peeked from the kernel without reading it (one ``recv``, one HMAC): a fresh opening frame
that authenticates (a member) gets its ``TcpConnection`` at once; a header that does not, or an
opening already seen (:class:`SeenOpenings`: the nonces of the last :data:`SEEN_OPENINGS` frames 0
of accepted connections, so a recording replayed on a new connection is refused as ``replayed``,
before the body is decrypted or the handshake answered) is closed there, with a reset, and never
becomes a ``TcpConnection`` nor a poller registration. A socket with nothing decisive yet gets its
connection only while a token bucket (:data:`NEW_CONNECTIONS_PER_S`, burst
:data:`NEW_CONNECTIONS_BURST`) has a token; otherwise it waits in the lobby (at most
:data:`LOBBY_LIMIT` sockets, peeked again every :data:`LOBBY_SWEEP_S` and once more before it is
pushed out), which builds it when its opening arrives and closes it (``accept_budget``) when it is
pushed out or has waited :data:`LOBBY_WAIT_S`. A member reconnecting through a flood therefore
needs no token: its opening follows its connect by a round trip. And the server accepts at most
:data:`ACCEPTS_PER_S` connections a second: over it, it stops polling its listening socket until
a tick finds a token, and the kernel's backlog takes the rest. What is left per stranger's
connection is an accept, a peek and a close (measured: RELIABILITY.md, "The Raft port").

Every refusal is counted by reason (:class:`Refusals`, :data:`REFUSAL_REASONS`,
exported as ``waitgraph_raft_refused_total``) and logged at most once per :data:`LOG_EVERY_S` per
reason, with the count of the lines left out. A stranger gets nothing but a closed connection.

One pysyncobj race is closed on the way: an outgoing connection counts as connected as soon as it
sent its handshake key, so a message could leave before the peer's key arrived, unwrapped, and the
peer dropped the connection (seen once as a ``bad_message`` between two members under load). Such
a message is not sent (``unsent_before_handshake``); Raft resends what is lost.

**Versions.** Bits 1-7 of ``flags`` are feature bits: this release sends none and ignores any
it receives (they are authenticated like the rest of the header), so that a later release can
announce, inside frames this one reads, that it also reads a newer version, and both sides of a
connection move to it only once each has seen the other's bit (docs/deploy.md, section 7). This
frame is version 2. Version 1 (the previous release: a native 4-byte length and
an unauthenticated length before a ``0xa1`` AES-GCM-SIV token) cannot be read safely, which is the
point of this change, so a v1 peer's frames are refused as ``bad_magic``: the upgrade is a restart
of every member (docs/deploy.md). From here on a node reads the versions in
:data:`ACCEPTED_FRAME_VERSIONS` and refuses any other one as ``bad_version`` (logged with the number).

pysyncobj names: ``SyncObj.__encryptor`` (a set-only descriptor, :class:`EncryptorHook`, set by
``_syncobj.py``); ``TCPTransport`` (``addNode``, ``_createServer``, ``_onNewIncomingConnection``,
``_onTick``, ``destroy`` overridden; ``_server``, ``_connections``, ``_unknownConnections``, ``_syncObj``
read); ``TcpServer`` (``bind`` and ``__onNewConnection`` overridden; its ``__socket``, ``__poller``,
``__fileno``, buffer sizes, ``__connectionTimeout``, ``__keepalive``, ``__onNewConnectionCallback``
read); ``TcpConnection`` (``__tryReadBuffer``, ``__processParseMessage``, ``send``, ``connect``,
``disconnect`` overridden; ``__socket``, ``__writeBuffer``, ``__trySendBuffer``, ``__lastReadTime``,
``sendRandKey``, ``recvRandKey``, ``encryptor``, ``state`` used). Checklist: ``_pysyncobj.py``.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hmac
import logging
import os
import pickle
import socket
import struct
import threading
import zlib
from collections.abc import Callable
from typing import Any, Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCMSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

from waitgraph.node.raft._pysyncobj import (
    CONNECTION_STATE,
    PYSYNCOBJ_SALT,
    TcpConnection,
    TcpServer,
    TCPTransport,
    monotonic_time,
    pysyncobj_pickle,
)

logger = logging.getLogger("waitgraph.node.raft_wire")

MAGIC = b"WG"
FRAME_VERSION = 2
ACCEPTED_FRAME_VERSIONS = frozenset({FRAME_VERSION})
"""Frame versions this node reads. The next release adds its own and keeps this one."""
PBKDF2_ITERATIONS = 100_000
"""pysyncobj's (``encryptor.getEncryptor``)."""
HKDF_INFO = b"waitgraph raft transport v2: hmac-sha256 header, aes-256-gcm-siv body"
_FIELDS = struct.Struct(">2sBBIQ12s")
_NONCE = slice(16, 28)
TAG_BYTES = 16
HEADER_BYTES = _FIELDS.size + TAG_BYTES
AEAD_TAG_BYTES = 16
MAX_FRAME_BYTES = 16 * 1024 * 1024
"""Largest body accepted (a dump chunk or an entry batch is at most ~4 MiB, ``_config.py``)."""
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest payload once inflated."""
SMALL_FRAME = 4096
"""Pickled messages shorter than this are sent uncompressed (zlib level 0); longer ones at level 1."""
PICKLE_PROTOCOL = 5

READ_BUDGET_BYTES = 256 * 1024
"""Bytes read from one connection per poll event (one tick)."""
FRAME_TIMEOUT_S = 10.0
"""A frame must be complete this long after its first byte arrived."""
HANDSHAKE_TIMEOUT_S = 3.0
"""An accepted connection must have finished pysyncobj's handshake this long after it was accepted."""
UNAUTHENTICATED_LIMIT = 32
"""Accepted connections that may wait for their handshake at once; one more closes the oldest."""
ACCEPTS_PER_EVENT = 64
ACCEPTS_PER_S = 1000.0
"""Connections accepted per second (a token bucket, burst :data:`ACCEPTS_PER_EVENT`); over it the
server stops listening for a tick and the rest wait in the kernel's backlog."""
LISTEN_BACKLOG = 128
SWEEP_EVERY_S = 0.1
LOG_EVERY_S = 10.0
NEW_CONNECTIONS_PER_S = 32.0
"""Accepted connections per second that get pysyncobj's connection object (a ``TcpConnection``, a
poller registration) before their first header arrived (a token bucket); the rest wait in the lobby."""
NEW_CONNECTIONS_BURST = 32
LOBBY_LIMIT = 64
"""Accepted sockets waiting, outside pysyncobj, for their first header; one more closes the oldest."""
LOBBY_WAIT_S = 0.5
"""A socket in the lobby whose first header has not arrived after this long is closed."""
LOBBY_SWEEP_S = 0.05
SEEN_OPENINGS = 8192
"""Nonces of the opening frames (frame 0 of an accepted connection) remembered to refuse a replay."""
CLOSE_EVERY_S = 0.02
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset, no FIN, no TIME_WAIT

REFUSAL_REASONS = (
    "bad_magic",
    "bad_version",
    "bad_header",
    "out_of_sequence",
    "oversize",
    "bad_body",
    "bad_message",
    "stalled",
    "handshake_timeout",
    "unauthenticated_limit",
    "accept_budget",
    "replayed",
)
"""Why a connection was closed on the Raft port (the ``reason`` label of the refusal counter)."""


_NOT_OURS = "not a waitgraph Raft frame (a stranger, or a peer older than v2)"


class FrameRefused(Exception):
    """A frame (or a connection) this node will not read further; ``reason`` is in :data:`REFUSAL_REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in REFUSAL_REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@functools.lru_cache(maxsize=8)
def derive_keys(password: str | bytes) -> tuple[bytes, bytes]:
    """(header MAC key, body key): PBKDF2 exactly as pysyncobj derives Fernet's key, then HKDF.

    Cached: PBKDF2 costs ~25 ms, and pysyncobj still runs its own when a SyncObj is built."""
    secret = password if isinstance(password, bytes) else password.encode()
    stretched = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=PYSYNCOBJ_SALT, iterations=PBKDF2_ITERATIONS)
    keys = HKDF(algorithm=hashes.SHA256(), length=64, salt=None, info=HKDF_INFO).derive(stretched.derive(secret))
    return keys[:32], keys[32:]


class FrameCodec:
    """Seals and opens frames under the cluster secret (module docstring). Stateless: the sequence
    numbers are the connection's. Installed as pysyncobj's ``encryptor`` (its presence turns on
    pysyncobj's per-connection key handshake)."""

    __slots__ = ("_aead", "_mac_key")

    def __init__(self, password: str | bytes) -> None:
        self._mac_key, body_key = derive_keys(password)
        self._aead = AESGCMSIV(body_key)

    def _tag(self, fields: bytes) -> bytes:
        return hmac.digest(self._mac_key, fields, "sha256")[:TAG_BYTES]

    def seal(self, payload: bytes, *, sequence: int, direction: int, features: int = 0) -> bytes:
        nonce = os.urandom(12)
        flags = direction | (features << 1)
        fields = _FIELDS.pack(MAGIC, FRAME_VERSION, flags, len(payload) + AEAD_TAG_BYTES, sequence, nonce)
        return fields + self._tag(fields) + self._aead.encrypt(nonce, payload, fields)

    def open_header(self, header: bytes, *, sequence: int, direction: int, max_body: int = MAX_FRAME_BYTES) -> int:
        """The body length announced by ``header`` (:data:`HEADER_BYTES`), once it authenticated."""
        fields, tag = header[: _FIELDS.size], header[_FIELDS.size : HEADER_BYTES]
        magic, version, flags, length, got_sequence, _ = _FIELDS.unpack(fields)
        got_direction = flags & 1  # bits 1-7: feature bits of a later release, ignored here
        if magic != MAGIC:
            raise FrameRefused("bad_magic", _NOT_OURS)
        if version not in ACCEPTED_FRAME_VERSIONS:
            raise FrameRefused(
                "bad_version",
                f"frame version {version}; this node reads {sorted(ACCEPTED_FRAME_VERSIONS)} (docs/deploy.md)",
            )
        if not hmac.compare_digest(tag, self._tag(fields)):
            raise FrameRefused("bad_header", "the header does not authenticate under the cluster secret")
        if got_direction != direction or got_sequence != sequence:
            raise FrameRefused(
                "out_of_sequence",
                f"frame {got_sequence} direction {got_direction}, expected {sequence} direction {direction}",
            )
        if length > max_body:
            raise FrameRefused("oversize", f"a body of {length} bytes; the limit is {max_body}")
        if length < AEAD_TAG_BYTES:
            raise FrameRefused("bad_header", f"a body of {length} bytes cannot hold its tag")
        return int(length)

    def open_body(self, header: bytes, body: bytes | bytearray) -> bytes:
        fields = header[: _FIELDS.size]
        try:
            return self._aead.decrypt(fields[_NONCE], bytes(body), fields)
        except InvalidTag:
            raise FrameRefused("bad_body", "the body does not authenticate under the cluster secret") from None


class EncryptorHook:
    """Set-only descriptor for ``_SyncObj__encryptor``: sees the one assignment in ``SyncObj.__init__``.

    pysyncobj builds a ``Fernet`` from ``conf.password`` there; it is replaced by
    :class:`FrameCodec` under the same password (an authenticated header,
    an AES-256-GCM-SIV body: see the module docstring for why and what it guarantees). The
    transport hands ``self.encryptor`` to every connection, so no message is ever sent with Fernet.
    No ``__get__``: reads find the instance's own attribute.
    """

    def __set__(self, obj: Any, encryptor: Any) -> None:
        if encryptor is not None:
            encryptor = FrameCodec(obj._SyncObj__conf.password)
        obj.__dict__["_SyncObj__encryptor"] = encryptor


class FrameReader:
    """The frames of one direction of one connection, fed in any pieces: no socket, no clock.

    :meth:`feed` returns the payloads completed by ``data`` or raises :class:`FrameRefused`; after
    a refusal the reader is spent (the connection is closed). ``started_at`` is when the frame now
    in progress got its first byte (None between frames)."""

    __slots__ = (
        "_body",
        "_codec",
        "_direction",
        "_filled",
        "_head",
        "_max_body",
        "_on_opening",
        "sequence",
        "started_at",
    )

    def __init__(
        self,
        codec: FrameCodec,
        *,
        direction: int,
        max_body: int = MAX_FRAME_BYTES,
        on_opening: Callable[[bytes], None] | None = None,
    ) -> None:
        """``on_opening`` is called with the nonce of frame 0 once its header authenticated, before
        its body is read; it may refuse the frame (:class:`SeenOpenings`)."""
        self._codec = codec
        self._on_opening = on_opening
        self._direction = direction
        self._max_body = max_body
        self._head = bytearray()
        self._body: bytearray | None = None
        self._filled = 0
        self.sequence = 0
        self.started_at: float | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for the frame in progress (its header, then its body so far)."""
        return len(self._head) + self._filled

    def feed(self, data: bytes, now: float = 0.0) -> list[bytes]:
        done: list[bytes] = []
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            if self.started_at is None:
                self.started_at = now
            if self._body is None:
                take = min(HEADER_BYTES - len(self._head), len(view) - pos)
                self._head += view[pos : pos + take]
                pos += take
                if len(self._head) < HEADER_BYTES:
                    break
                head = bytes(self._head)
                length = self._codec.open_header(
                    head, sequence=self.sequence, direction=self._direction, max_body=self._max_body
                )
                if self.sequence == 0 and self._on_opening is not None:
                    self._on_opening(head[_NONCE])
                self._body = bytearray(length)
                self._filled = 0
            take = min(len(self._body) - self._filled, len(view) - pos)
            self._body[self._filled : self._filled + take] = view[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled == len(self._body):
                done.append(self._codec.open_body(bytes(self._head), self._body))
                self._head, self._body, self._filled = bytearray(), None, 0
                self.sequence += 1
                self.started_at = None
        return done


def encode_payload(message: Any) -> bytes:
    data = pickle.dumps(message, PICKLE_PROTOCOL)
    return zlib_stored(data) if len(data) < SMALL_FRAME else zlib.compress(data, 1)


_STORED_HEADER = b"\x78\x01"
"""The zlib header ``zlib.compress(data, 0)`` writes: deflate, a 32 KiB window, level 0's hint."""
_STORED_BLOCK = struct.Struct("<BHH")
_ADLER = struct.Struct(">I")
_STORED_MAX = 0xFFFF


def zlib_stored(data: bytes) -> bytes:
    """A zlib stream of ``data`` in stored (uncompressed) blocks, without zlib's compressor: the
    header, ``data`` in blocks of at most 65,535 bytes (the last one marked final) and its
    Adler-32. Any inflater reads it; below 16 KiB (so every payload :func:`encode_payload` gives
    it) it is ``zlib.compress(data, 0)`` byte for byte (zlib splits longer data into blocks of
    its own sizes). Setting up a deflate stream allocates and clears ~256 KiB, and that, not
    copying, was the whole cost: 26 us for each follower's 66-byte answer here, 0.5 us this way."""
    size = len(data)
    parts: list[bytes | memoryview] = [_STORED_HEADER]
    view = memoryview(data)
    start = 0
    while True:
        block = view[start : start + _STORED_MAX]
        start += len(block)
        last = start >= size
        parts.append(_STORED_BLOCK.pack(1 if last else 0, len(block), len(block) ^ 0xFFFF))
        parts.append(block)
        if last:
            break
    parts.append(_ADLER.pack(zlib.adler32(data)))
    return b"".join(parts)


def decode_payload(payload: bytes) -> Any:
    """``pickle.loads(zlib.decompress(payload))`` with the restricted unpickler and an inflation cap."""
    inflater = zlib.decompressobj()
    data = inflater.decompress(payload, MAX_MESSAGE_BYTES)
    if inflater.unconsumed_tail or not inflater.eof:
        raise ValueError(f"the payload inflates past {MAX_MESSAGE_BYTES} bytes or is cut short")
    return pysyncobj_pickle.loads(data)  # the restricted unpickler (_unpickler.install)


class Refusals:
    """Counts of refused frames and connections by reason, and a rate-limited log line for each.

    :meth:`record` is on the path a flood takes: a count under a lock and a clock read; the line
    (and the peer's address as text) is formatted only when it is logged."""

    def __init__(self, clock: Callable[[], float] = monotonic_time) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()  # the tick thread records, status readers copy
        self._clock = clock
        self._logged_at: dict[str, float] = {}
        self._unlogged: collections.Counter[str] = collections.Counter()

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def record(self, reason: str, detail: str, peer: str | tuple[Any, ...]) -> None:
        with self._lock:
            self.counts[reason] += 1
        now = self._clock()
        last = self._logged_at.get(reason)
        if last is not None and now - last < LOG_EVERY_S:
            self._unlogged[reason] += 1
            return
        self._logged_at[reason] = now
        left_out = self._unlogged.pop(reason, 0)
        more = f" ({left_out} more since the last such line)" if left_out else ""
        where = peer if isinstance(peer, str) else f"{peer[0]}:{peer[1]}"
        logger.warning("closed a Raft connection from %s: %s: %s%s", where, reason, detail, more)


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; :meth:`take` spends one if there is one."""

    __slots__ = ("_burst", "_clock", "_rate", "_stamp", "_tokens")

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = monotonic_time) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def ready(self) -> bool:
        """Whether :meth:`take` would succeed now (nothing is spent)."""
        return self._tokens + (self._clock() - self._stamp) * self._rate >= 1.0


_REPLAYED = "the opening frame of an earlier connection, replayed"
_OVER_BUDGET = (
    f"no first header within {LOBBY_WAIT_S:g} s while over the budget of new connections "
    f"({NEW_CONNECTIONS_PER_S:g}/s), or pushed out of the lobby ({LOBBY_LIMIT})"
)


class SeenOpenings:
    """The nonces of the last :data:`SEEN_OPENINGS` opening frames (frame 0 of an accepted
    connection). A member's opening carries a fresh random nonce; one seen before is a recording
    replayed, refused at its header (``replayed``) before its body is decrypted or the handshake
    answered."""

    __slots__ = ("_limit", "_nonces")

    def __init__(self, limit: int = SEEN_OPENINGS) -> None:
        self._limit = limit
        self._nonces: dict[bytes, None] = {}  # insertion-ordered: the oldest is forgotten first

    def __contains__(self, nonce: bytes) -> bool:
        return nonce in self._nonces

    def add(self, nonce: bytes) -> None:
        """Remember ``nonce``, or refuse it (:class:`FrameRefused` ``replayed``) if it was seen."""
        if nonce in self._nonces:
            raise FrameRefused("replayed", _REPLAYED)
        self._nonces[nonce] = None
        if len(self._nonces) > self._limit:
            del self._nonces[next(iter(self._nonces))]


def _reset_on_close(sock: socket.socket) -> None:
    """Make ``close()`` send a reset: no FIN exchange and no TIME_WAIT socket left on this node."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)


def reset_close(sock: socket.socket) -> None:
    _reset_on_close(sock)
    sock.close()


class Closer:
    """Closes refused sockets on a thread of its own, every :data:`CLOSE_EVERY_S`. On one machine,
    the close that wakes a stranger blocked in ``recv`` was the Raft thread's largest cost under a
    replay flood (py-spy: 11% of its time at 460 connections a second, RELIABILITY.md), and
    waking a thread to do it cost 4%; here it is a ``deque.append``, which wakes nothing."""

    def __init__(self) -> None:
        self._socks: collections.deque[socket.socket] = collections.deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raft-closer", daemon=True)
        self._thread.start()

    def close(self, sock: socket.socket) -> None:
        """Close ``sock`` with a reset (:func:`reset_close`) within :data:`CLOSE_EVERY_S`."""
        _reset_on_close(sock)
        self._socks.append(sock)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._close_all()

    def _close_all(self) -> None:
        socks = self._socks
        while socks:
            socks.popleft().close()

    def _run(self) -> None:
        while not self._stop.wait(CLOSE_EVERY_S):
            self._close_all()


_PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT
_UNDECIDED, _EOF = None, ("", "")


def screen_opening(
    sock: socket.socket, codec: FrameCodec, openings: SeenOpenings
) -> tuple[str, str] | Literal[True] | None:
    """Judge an accepted socket by its first header, peeked (left in the socket for the reader).

    True: a fresh opening that authenticates; None: not decided yet (fewer than
    :data:`HEADER_BYTES` arrived, and they start like a frame); ``("", "")``: the other side closed;
    otherwise the refusal ``(reason, detail)``. One ``recv`` and, with a whole header, one HMAC."""
    try:
        head = sock.recv(HEADER_BYTES, _PEEK)
    except (BlockingIOError, InterruptedError):
        return _UNDECIDED
    except OSError:
        return _EOF
    if not head:
        return _EOF
    if len(head) < HEADER_BYTES:
        if MAGIC.startswith(head[:2]):
            return _UNDECIDED
        return ("bad_magic", _NOT_OURS)
    try:
        codec.open_header(head, sequence=0, direction=_DIRECTION_CONNECTOR)
    except FrameRefused as exc:
        return (exc.reason, exc.detail)
    if head[_NONCE] in openings:
        return ("replayed", _REPLAYED)
    return True


_DIRECTION_CONNECTOR, _DIRECTION_ACCEPTOR = 0, 1


class WaitgraphConnection(TcpConnection):  # type: ignore[misc]
    """pysyncobj's ``TcpConnection`` with the frame and the receive path of the module docstring.

    pysyncobj calls its private ``__tryReadBuffer`` and ``__processParseMessage`` from
    ``__processConnection`` as ``self._TcpConnection__…``; both are replaced here. ``send``,
    ``connect`` and ``disconnect`` keep pysyncobj's behaviour and reset this connection's frame
    state. Outgoing connections (made by ``TCPTransport.addNode``) are adopted with :meth:`adopt`;
    incoming ones are built as this class by :class:`WaitgraphServer`."""

    _outgoing: bool
    _refusals: Refusals
    _openings: SeenOpenings | None
    _reader: FrameReader | None
    _payloads: collections.deque[bytes]
    _send_sequence: int
    unsent_before_handshake: int
    accepted_at: float
    peer: str

    @classmethod
    def adopt(
        cls, conn: TcpConnection, *, outgoing: bool = True, refusals: Refusals | None = None
    ) -> WaitgraphConnection:
        conn.__class__ = cls
        assert isinstance(conn, WaitgraphConnection)
        conn._init_wire(outgoing=outgoing, refusals=refusals, peer="")
        return conn

    def _init_wire(
        self, *, outgoing: bool, refusals: Refusals | None, peer: str, openings: SeenOpenings | None = None
    ) -> None:
        self._outgoing = outgoing
        self._refusals = refusals if refusals is not None else Refusals()
        self._openings = None if outgoing else openings
        self.peer = peer
        self.accepted_at = monotonic_time()
        self._reset_frames()

    def _reset_frames(self) -> None:
        self.unsent_before_handshake = 0
        self._reader = None
        self._payloads = collections.deque()
        self._send_sequence = 0

    def _reader_now(self) -> FrameReader:
        if self._reader is None:
            if not isinstance(self.encryptor, FrameCodec):
                raise RuntimeError("a waitgraph Raft connection needs the cluster secret's FrameCodec")
            receives = _DIRECTION_ACCEPTOR if self._outgoing else _DIRECTION_CONNECTOR
            on_opening = None if self._openings is None else self._openings.add
            self._reader = FrameReader(self.encryptor, direction=receives, on_opening=on_opening)
        return self._reader

    def connect(self, host: str, port: int) -> bool:
        self._reset_frames()
        self.peer = f"{host}:{port}"
        return bool(super().connect(host, port))

    def disconnect(self) -> None:
        self._reset_frames()
        super().disconnect()

    def refuse(self, reason: str, detail: str) -> None:
        """Count, log (rate-limited) and close (with a reset: :func:`reset_close`)."""
        self._refusals.record(reason, detail, self.peer or "?")
        sock = self._TcpConnection__socket
        if sock is not None:
            _reset_on_close(sock)
        self.disconnect()

    def send(self, message: Any) -> None:
        if not self.sendRandKey and self._send_sequence > 0:
            # pysyncobj marks an outgoing connection CONNECTED as soon as it sent its handshake key,
            # so a message (a held acknowledgment, a vote request) could leave before the peer's
            # key arrived: unwrapped, which the peer refuses (``bad_message``) and closes. Raft
            # resends what is lost; the connection is kept.
            self.unsent_before_handshake += 1
            return
        if self.sendRandKey:
            message = (self.sendRandKey, message)
        codec = self.encryptor
        if not isinstance(codec, FrameCodec):
            raise RuntimeError("a waitgraph Raft connection needs the cluster secret's FrameCodec")
        payload = encode_payload(message)
        if len(payload) + AEAD_TAG_BYTES > MAX_FRAME_BYTES:
            # The receiver would close the connection, and the same message would be sent again.
            logger.error("not sending a Raft message of %d bytes (limit %d)", len(payload), MAX_FRAME_BYTES)
            return
        sends = _DIRECTION_CONNECTOR if self._outgoing else _DIRECTION_ACCEPTOR
        frame = codec.seal(payload, sequence=self._send_sequence, direction=sends)
        self._send_sequence += 1
        self._TcpConnection__writeBuffer += frame
        self._TcpConnection__trySendBuffer()

    def _TcpConnection__tryReadBuffer(self) -> None:
        sock = self._TcpConnection__socket
        reader = self._reader_now()
        budget = READ_BUDGET_BYTES
        while budget > 0:
            try:
                chunk = sock.recv(min(budget, 65536))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.disconnect()
                return
            if not chunk:
                self.disconnect()
                return
            budget -= len(chunk)
            try:
                self._payloads.extend(reader.feed(chunk, monotonic_time()))
            except FrameRefused as exc:
                self.refuse(exc.reason, exc.detail)
                return
        self._TcpConnection__lastReadTime = monotonic_time()

    def _TcpConnection__processParseMessage(self) -> Any:
        if not self._payloads:
            return None
        payload = self._payloads.popleft()
        try:
            message = decode_payload(payload)
            if self.recvRandKey:
                rand_key, message = message
                if rand_key != self.recvRandKey:
                    raise ValueError("the message does not carry this connection's key (a replayed frame?)")
        except Exception as exc:
            self.refuse("bad_message", f"{type(exc).__name__}: {exc}")
            return None
        return message

    @property
    def frames_received(self) -> int:
        """Frames of this connection that authenticated (since it was accepted or connected)."""
        return 0 if self._reader is None else self._reader.sequence

    def stalled(self, now: float) -> bool:
        reader = self._reader
        return reader is not None and reader.started_at is not None and now - reader.started_at > FRAME_TIMEOUT_S


class WaitgraphServer(TcpServer):  # type: ignore[misc]
    """pysyncobj's ``TcpServer`` that builds :class:`WaitgraphConnection` and accepts in batches.

    Not constructed: :meth:`WaitgraphTransport._createServer` switches the class of the server
    pysyncobj made (before it binds)."""

    refusals: Refusals
    openings: SeenOpenings
    accepts: TokenBucket
    paused: bool
    on_accepted: Callable[[socket.socket, tuple[Any, ...]], None]
    """The transport's admission (:meth:`WaitgraphTransport.admit`): it builds the connection with
    :meth:`build`, keeps the socket in its lobby, or closes it."""

    def bind(self) -> None:
        super().bind()
        self._TcpServer__socket.listen(LISTEN_BACKLOG)  # pysyncobj listens with a backlog of 5

    def _TcpServer__onNewConnection(self, descr: int, event: int) -> None:
        # ``TcpServer.__onNewConnection``, accepting up to ACCEPTS_PER_EVENT at once (pysyncobj: one
        # per tick, so a flood of connections left the members' own reconnections in the backlog).
        if event & 1:  # POLL_EVENT_TYPE.READ
            accept, admit, accepts = self._TcpServer__socket.accept, self.on_accepted, self.accepts
            for _ in range(ACCEPTS_PER_EVENT):
                if not accepts.take():
                    # Over ACCEPTS_PER_S: stop polling the listening socket (it would wake every
                    # poll) until :meth:`resume` finds a token; the kernel's backlog holds the rest.
                    self._TcpServer__poller.unsubscribe(descr)
                    self.paused = True
                    break
                try:
                    sock, addr = accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    self.unbind()
                    return
                admit(sock, addr)
        if event & 4:  # POLL_EVENT_TYPE.ERROR
            self.unbind()

    def resume(self) -> None:
        """Listen again once the accept budget has a token (called every tick while paused)."""
        fileno = self._TcpServer__fileno
        if fileno is None:  # unbound meanwhile
            self.paused = False
        elif self.accepts.ready():
            self.paused = False
            self._TcpServer__poller.subscribe(fileno, self._TcpServer__onNewConnection, 1 | 4)  # READ | ERROR

    def build(self, sock: socket.socket, addr: tuple[Any, ...]) -> None:
        """pysyncobj's set-up of an accepted socket, as a :class:`WaitgraphConnection`."""
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._TcpServer__sendBufferSize)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._TcpServer__recvBufferSize)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
        except OSError:
            sock.close()
            return
        conn = WaitgraphConnection(
            poller=self._TcpServer__poller,
            socket=sock,
            timeout=self._TcpServer__connectionTimeout,
            sendBufferSize=self._TcpServer__sendBufferSize,
            recvBufferSize=self._TcpServer__recvBufferSize,
            keepalive=self._TcpServer__keepalive,
        )
        conn._init_wire(outgoing=False, refusals=self.refusals, peer=f"{addr[0]}:{addr[1]}", openings=self.openings)
        self._TcpServer__onNewConnectionCallback(conn)


class WaitgraphTransport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's ``TCPTransport`` with :class:`WaitgraphConnection` everywhere, the cap on
    connections waiting for their handshake, and the deadlines (module docstring).

    pysyncobj makes connections in two places: ``TCPTransport.addNode`` (outgoing, once per peer,
    adopted there) and ``TcpServer`` (incoming: :class:`WaitgraphServer` builds them)."""

    refusals: Refusals

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        self.refusals = Refusals()
        self.openings = SeenOpenings()
        self.budget = TokenBucket(NEW_CONNECTIONS_PER_S, NEW_CONNECTIONS_BURST)
        self.lobby: collections.deque[tuple[socket.socket, tuple[Any, ...], float]] = collections.deque()
        self.closer = Closer()
        self._next_sweep = 0.0
        self._next_lobby_sweep = 0.0
        super().__init__(syncObj, selfNode, otherNodes)

    def _createServer(self) -> None:
        super()._createServer()
        self._server.__class__ = WaitgraphServer
        self._server.refusals = self.refusals
        self._server.openings = self.openings
        self._server.on_accepted = self.admit
        self._server.accepts = TokenBucket(ACCEPTS_PER_S, ACCEPTS_PER_EVENT)
        self._server.paused = False

    def admit(self, sock: socket.socket, addr: tuple[Any, ...]) -> None:
        """What becomes of a socket the server just accepted (module docstring, "The budget").

        Its first header, if it is already there, decides at once: a fresh opening that
        authenticates gets its connection (a member reconnecting: no token needed), anything else
        is refused and closed without a ``TcpConnection``. A socket with nothing decisive yet gets
        its connection if the budget has a token, else it waits in the lobby."""
        codec = self._syncObj.encryptor
        verdict = screen_opening(sock, codec, self.openings) if isinstance(codec, FrameCodec) else _UNDECIDED
        if verdict is True:
            self._server.build(sock, addr)
        elif verdict is _UNDECIDED:
            if self.budget.take():
                self._server.build(sock, addr)
                return
            self.lobby.append((sock, addr, monotonic_time()))
            if len(self.lobby) > LOBBY_LIMIT:
                old_sock, old_addr, _ = self.lobby.popleft()
                self._leave_lobby(old_sock, old_addr, codec, final=True)
        else:
            self._close_refused(sock, addr, verdict)

    def _close_refused(self, sock: socket.socket, addr: tuple[Any, ...], verdict: tuple[str, str]) -> None:
        if verdict is not _EOF:
            self.refusals.record(verdict[0], verdict[1], addr)
        self.closer.close(sock)

    def _leave_lobby(self, sock: socket.socket, addr: tuple[Any, ...], codec: Any, *, final: bool) -> bool:
        """Screen a lobby socket again; True if it is decided (built or closed). ``final``: an
        undecided one is closed (``accept_budget``)."""
        verdict = screen_opening(sock, codec, self.openings)
        if verdict is True:
            self._server.build(sock, addr)
        elif verdict is not _UNDECIDED:
            self._close_refused(sock, addr, verdict)
        elif final:
            self._close_refused(sock, addr, ("accept_budget", _OVER_BUDGET))
        else:
            return False
        return True

    def _sweep_lobby(self, now: float) -> None:
        codec = self._syncObj.encryptor
        waiting = self.lobby
        for _ in range(len(waiting)):
            sock, addr, since = waiting.popleft()
            if not self._leave_lobby(sock, addr, codec, final=now - since > LOBBY_WAIT_S):
                waiting.append((sock, addr, since))

    def addNode(self, node: Any) -> None:
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is not None and not isinstance(conn, WaitgraphConnection):
            WaitgraphConnection.adopt(conn, outgoing=True, refusals=self.refusals)

    def _onNewIncomingConnection(self, conn: TcpConnection) -> None:
        if not isinstance(conn, WaitgraphConnection):  # only WaitgraphServer makes them
            conn.disconnect()
            return
        super()._onNewIncomingConnection(conn)
        waiting = self._unknownConnections
        while len(waiting) > UNAUTHENTICATED_LIMIT:
            # Those that never sent a frame that authenticates go first: a member's connection sends
            # its key at once, so a flood of idle or junk connections cannot push it out.
            oldest = min(waiting, key=lambda c: (c.frames_received > 0, c.accepted_at))
            waiting.discard(oldest)
            oldest.refuse(
                "unauthenticated_limit", f"more than {UNAUTHENTICATED_LIMIT} connections await their handshake"
            )

    def destroy(self) -> None:
        while self.lobby:
            self.lobby.popleft()[0].close()
        super().destroy()
        self.closer.stop()

    def _onTick(self) -> None:
        super()._onTick()
        if self._server is not None and self._server.paused:
            self._server.resume()
        now = monotonic_time()
        if self.lobby and now >= self._next_lobby_sweep:
            self._next_lobby_sweep = now + LOBBY_SWEEP_S
            self._sweep_lobby(now)
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_EVERY_S
        for conn in list(self._unknownConnections):
            if now - conn.accepted_at > HANDSHAKE_TIMEOUT_S:
                self._unknownConnections.discard(conn)
                conn.refuse("handshake_timeout", f"no handshake within {HANDSHAKE_TIMEOUT_S:g} s of accepting")
        for conn in list(self._connections.values()):
            if conn.state != CONNECTION_STATE.DISCONNECTED and conn.stalled(now):
                conn.refuse("stalled", f"a frame not complete {FRAME_TIMEOUT_S:g} s after its first byte")
        for conn in list(self._unknownConnections):
            if conn.stalled(now):
                self._unknownConnections.discard(conn)
                conn.refuse("stalled", f"a frame not complete {FRAME_TIMEOUT_S:g} s after its first byte")


def probe_member(address: str, codec: FrameCodec, timeout_s: float = 2.0) -> str | None:
    """Whether a node holding the cluster secret listens on the Raft ``address``: None if so, else why not.

    pysyncobj's issue #89: a node is added by address before it is known to be bound there, so
    the port may belong to another process (or to nothing) and the cluster waits on a member that
    never answers. The probe opens a connection and sends the first frame of pysyncobj's
    handshake (a random key); a member answers with its own key, wrapped with ours, in a frame
    sealed under the cluster secret. Anything else (nothing listening, a stranger, a wrong
    secret) is refused before the change is proposed. The probed node then closes the
    connection, which never named a member (counted there as ``handshake_timeout`` or not at all).
    Blocking: call it off the event loop.
    """
    host, _, port = address.rpartition(":")
    key = os.urandom(32)
    reader = FrameReader(codec, direction=_DIRECTION_ACCEPTOR)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(codec.seal(encode_payload(key), sequence=0, direction=_DIRECTION_CONNECTOR))
            while True:
                data = sock.recv(65536)
                if not data:
                    return f"{address} closed the connection without answering (not a member of this cluster?)"
                for payload in reader.feed(data):
                    answer = decode_payload(payload)
                    if type(answer) is tuple and len(answer) == 2 and answer[0] == key:
                        return None
                    return f"{address} answered with something other than a Raft handshake"
    except FrameRefused as exc:
        return f"{address} does not speak this cluster's Raft frames ({exc.reason}: {exc.detail})"
    except (OSError, ValueError, pickle.UnpicklingError) as exc:
        return f"nothing answered on {address} ({type(exc).__name__}: {exc})"
