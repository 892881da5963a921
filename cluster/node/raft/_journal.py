"""The Raft journal and the dump file on disk, each record and the dump under a checksum.

pysyncobj 0.3.17's ``FileJournal`` writes ``size | idx | term | command | size`` into an mmap with
no checksum: a record torn by a power cut, or a flipped bit, was read back as it was.
:class:`ChecksummedJournal` implements the same ``Journal`` interface (``pysyncobj/journal.py``)
over a file of its own, ``raft.wal``::

    header: b"WGWAL\\0" | format version (u16 BE) | reserved (u16)            8 bytes
    record: length (u32 BE) | crc32 (u32 BE) | idx (u64 BE) | term (u64 BE) | command

``length`` counts idx, term and command; ``crc32`` (zlib's CRC-32) covers the length and
everything after it. Rules kept at start-up (:meth:`ChecksummedJournal.__init__`):

- A bad record whose claimed end reaches the end of the file, or after which the file holds only
  zeros, is a **torn tail**: the last append never completed. It is truncated and logged. With
  fsync on (the default) a record is acknowledged only after it is on disk, so a torn record was
  never acknowledged.
- Zeros alone after the last good record are **allocated space** (below): cut off, logged at INFO.
- A bad record with good data after it is **corruption**: the node refuses to start with
  :class:`JournalCorrupted`, naming the file and the offset and saying how to recover (replace the
  node with an empty data directory: docs/deploy.md, "Replacing a failed node"). Starting anyway
  could make this replica diverge or vote with a log it does not have.

Appends are ``pwrite`` at the end; :meth:`~ChecksummedJournal.sync` is one ``fdatasync`` when
something changed (the durability rule of ``_acks.py``). The file is allocated ahead
of its records, :data:`PREALLOCATE_BYTES` at a time (``posix_fallocate``, as etcd's WAL does): an
append that grows the file makes its ``fdatasync`` commit the new size too (an ext4 journal
transaction), and one inside allocated space does not (this machine's ext4, the two alternated in
one run: p50 0.157-0.171 ms against 0.105-0.115 ms; ``scripts/bench cluster`` figure 7 prints
both). The allocated tail reads as zeros; a clean close cuts it off, and after a crash the
start-up scan finds it after the last record and cuts it off without calling it torn (nothing was
written there). Where ``posix_fallocate`` is missing (macOS) or fails, appends grow the file as
before. Deleting a suffix truncates the file; deleting a prefix (after a log compaction) writes
the remaining records to a new file, fsyncs it and renames it over the journal, so a power cut
leaves either the old journal or the new one, never a half-rewritten one. The term, the vote and
the commit index stay in pysyncobj's ``.meta`` file next to it (``raft.wal.meta``; fsynced and
renamed into place when durable: :class:`DurableMetaStorer`).

The dump (``raft.dump``): ``b"WGDUMP\\0\\0" | format version (u16 BE) | reserved (u16) | crc32 (u32
BE) | length (u64 BE) | body`` (:func:`seal_dump` / :func:`open_dump`); a dump that does not check
out refuses the start the same way.

Versions: journal format 1 and dump format 2 are this release's. A data directory of the previous
release (pysyncobj's ``raft.journal`` with no checksums, and a dump that was bare msgpack: dump
format 1) is read: the journal is copied into ``raft.wal`` once (:func:`migrate_legacy_journal`,
the old file is kept as ``raft.journal.v1``) and a format-1 dump is accepted as it is. Any other
version is refused with its number.

pysyncobj names: the ``Journal`` interface (implemented), ``MetaStorer`` (subclassed:
:class:`DurableMetaStorer`), ``FileJournal`` (read once, to migrate), ``pysyncobj.pickle.dumps`` (the
``.meta`` file). Checklist: ``_pysyncobj.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

from waitgraph.node.raft._pysyncobj import FileJournal, Journal, MetaStorer, pysyncobj_pickle

logger = logging.getLogger("waitgraph.node.journal")

JOURNAL_MAGIC = b"WGWAL\0"
JOURNAL_VERSION = 1
_JOURNAL_HEADER = struct.Struct(">6sHH")
JOURNAL_HEADER_BYTES = _JOURNAL_HEADER.size
_RECORD = struct.Struct(">IIQQ")
RECORD_HEAD_BYTES = _RECORD.size
_LENGTH = struct.Struct(">I")
_BODY_HEAD = struct.Struct(">QQ")
PREALLOCATE_BYTES = 4 * 1024 * 1024
"""How far ahead of its records the journal file is allocated (module docstring)."""
MAX_RECORD_BYTES = 64 * 1024 * 1024
"""Far above any entry (``_config.py`` keeps a group under 512 KiB); a length above it is damage."""

DUMP_MAGIC = b"WGDUMP\0\0"
DUMP_FORMAT_VERSION = 2
DUMP_FORMAT_VERSIONS = frozenset({1, DUMP_FORMAT_VERSION})
"""1: the previous release's bare msgpack document (no checksum); 2: framed and checksummed."""
_DUMP_HEADER = struct.Struct(">8sHHIQ")
DUMP_HEADER_BYTES = _DUMP_HEADER.size

RECOVERY = (
    "to recover, replace this node: stop it, move its data directory aside and start it with an empty one "
    "(docs/deploy.md, 'Replacing a failed node'); the leader sends it a snapshot and the log"
)


class JournalCorrupted(Exception):
    """The journal or the dump is damaged before its end: the node must not start on it."""

    def __init__(self, path: Path | str, offset: int, what: str) -> None:
        super().__init__(f"{path} is corrupt at byte offset {offset}: {what}; {RECOVERY}")
        self.path = str(path)
        self.offset = offset


def fsync_directory(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable (its directory entry is metadata of ``path``)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DurableMetaStorer(MetaStorer):  # type: ignore[misc]
    """pysyncobj's ``.meta`` writer (term, vote, commit index), fsynced, rename included.

    Every write, not only those that change the term or the vote: a later write that is renamed
    over the file without fsync could, after a power cut, leave an empty file where the durable
    vote was (pysyncobj then starts from term 0 and no vote). The commit index alone changes it at
    most once a second (``onOneSecondTimer``).
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.stores = 0

    def storeMeta(self, meta: dict[str, Any]) -> None:
        path = self.getPath()
        with open(path + ".tmp", "wb") as f:
            f.write(pysyncobj_pickle.dumps(meta))
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        fsync_directory(Path(path).parent)
        self.stores += 1


def encode_record(command: bytes, idx: int, term: int) -> bytes:
    body = _BODY_HEAD.pack(idx, term) + command
    length = _LENGTH.pack(len(body))
    return length + struct.pack(">I", zlib.crc32(body, zlib.crc32(length))) + body


def _journal_header() -> bytes:
    return _JOURNAL_HEADER.pack(JOURNAL_MAGIC, JOURNAL_VERSION, 0)


def scan(data: bytes | memoryview, path: Path | str = "journal") -> tuple[list[tuple[bytes, int, int]], list[int], int]:
    """The records of a journal image: (entries, their offsets, the end of the last good record).

    Raises :class:`JournalCorrupted` for a bad header or a bad record before the tail; a torn
    tail ends the scan (the caller truncates at the returned end)."""
    if len(data) < JOURNAL_HEADER_BYTES:
        if any(data):
            raise JournalCorrupted(path, 0, "the file is shorter than its header")
        return [], [], 0  # created, header never written: an empty journal
    magic, version, reserved = _JOURNAL_HEADER.unpack_from(data, 0)
    if magic != JOURNAL_MAGIC or reserved != 0:
        raise JournalCorrupted(path, 0, "not a waitgraph journal (no WGWAL header)")
    if version != JOURNAL_VERSION:
        raise JournalCorrupted(path, 6, f"journal format version {version}; this node reads {JOURNAL_VERSION}")
    entries: list[tuple[bytes, int, int]] = []
    offsets: list[int] = []
    pos, end = JOURNAL_HEADER_BYTES, len(data)
    view = memoryview(data)
    while pos < end:
        problem = _record_problem(view, pos, end)
        if problem is None:
            length, _, idx, term = _RECORD.unpack_from(data, pos)
            entries.append((bytes(view[pos + RECORD_HEAD_BYTES : pos + 8 + length]), idx, term))
            offsets.append(pos)
            pos += 8 + length
            continue
        if not bytes(view[pos:]).strip(b"\0"):
            # Zeros only: space allocated ahead of the records, or an append whose data never
            # landed. Nothing was written there, so nothing is torn.
            return entries, offsets, pos
        # Only the last append can be torn: a good record anywhere after this one means damage.
        starts = range(pos + 1, end - RECORD_HEAD_BYTES + 1)
        later = next((at for at in starts if _record_problem(view, at, end) is None), None)
        if later is None:
            logger.warning(
                "%s: a torn last record at byte offset %d (%s): truncated; it was never acknowledged",
                path,
                pos,
                problem,
            )
            return entries, offsets, pos
        raise JournalCorrupted(path, pos, f"{problem}, and a good record follows at offset {later}")
    return entries, offsets, pos


def _record_problem(view: memoryview, pos: int, end: int) -> str | None:
    """What is wrong with the record at ``pos``, or None when it checks out."""
    if end - pos < RECORD_HEAD_BYTES:
        return "a record header cut short"
    length, crc = struct.unpack_from(">II", view, pos)
    if length < _BODY_HEAD.size or length > MAX_RECORD_BYTES:
        return f"a record length of {length}"
    if pos + 8 + length > end:
        return "a record cut short"
    if zlib.crc32(view[pos + 8 : pos + 8 + length], zlib.crc32(view[pos : pos + 4])) != crc:
        return "a record whose checksum does not match"
    return None


class ChecksummedJournal(Journal):  # type: ignore[misc]
    """pysyncobj's ``Journal`` interface over ``raft.wal`` (module docstring)."""

    def __init__(self, path: Path, *, durable: bool) -> None:
        self.path = Path(path)
        self.durable = durable
        self.dirty = False
        self.flushes = 0
        self.flushed_index = 0
        """The last log index on disk after the latest :meth:`sync` (0: none yet)."""
        self.torn_truncated = 0
        """Bytes of a torn last record cut off at start-up (zeros after the records not counted)."""
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        data = _read_all(self._fd)
        self._entries, self._offsets, self._end = scan(data, self.path)
        if self._end == 0:  # new (or never got its header)
            os.pwrite(self._fd, _journal_header(), 0)
            self._end = JOURNAL_HEADER_BYTES
        if self._end < len(data):
            if data[self._end :].strip(b"\0"):
                self.torn_truncated = len(data) - self._end
            else:
                logger.info(
                    "%s: %d bytes of zeros after the last record (offset %d) cut off: space allocated ahead",
                    self.path,
                    len(data) - self._end,
                    self._end,
                )
            os.ftruncate(self._fd, self._end)
        self._allocated = self._end
        """The file's size: records up to ``_end``, zeros after it (:meth:`_allocate`)."""
        self._preallocate = hasattr(os, "posix_fallocate")  # not on macOS
        """False where ``posix_fallocate`` is missing or failed: appends then grow the file themselves."""
        meta_path = str(self.path) + ".meta"
        self._meta_storer = DurableMetaStorer(meta_path) if durable else MetaStorer(meta_path)
        self._meta: dict[str, Any] = self._meta_storer.getMeta()
        self._meta_saved = True
        if durable:
            os.fdatasync(self._fd)
            if created or self.torn_truncated:
                fsync_directory(self.path.parent)

    # -- the Journal interface (pysyncobj calls these on the tick thread) --------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        command = bytes(command)
        record = encode_record(command, idx, term)
        if self._end + len(record) > self._allocated:
            self._allocate(self._end + len(record))
        os.pwrite(self._fd, record, self._end)
        self._entries.append((command, idx, term))
        self._offsets.append(self._end)
        self._end += len(record)
        self.dirty = True

    def _allocate(self, needed: int) -> None:
        """Allocate the file up to at least ``needed`` bytes, :data:`PREALLOCATE_BYTES` past it."""
        if not self._preallocate:
            return
        size = needed + PREALLOCATE_BYTES
        try:
            os.posix_fallocate(self._fd, self._allocated, size - self._allocated)
        except OSError as exc:
            # Not supported here, or no room for the margin: appends grow the file as before (a
            # full disk then fails the append itself, which is fatal, as it was).
            self._preallocate = False
            logger.warning("%s: cannot allocate the journal ahead of its records (%s); appending", self.path, exc)
            return
        self._allocated = size

    def _cut(self, end: int) -> None:
        """Records end at ``end``: the file too (its allocated tail goes; the next append allocates)."""
        self._end = self._allocated = end
        os.ftruncate(self._fd, end)
        self.dirty = True

    def clear(self) -> None:
        self._entries, self._offsets = [], []
        self._cut(JOURNAL_HEADER_BYTES)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        if entryFrom >= len(self._entries):
            return
        end = self._offsets[entryFrom]
        del self._entries[entryFrom:]
        del self._offsets[entryFrom:]
        self._cut(end)

    def deleteEntriesTo(self, entryTo: int) -> None:
        # After a log compaction: the kept records go to a new file that replaces this one whole.
        kept = self._entries[entryTo:]
        tmp = self.path.with_name(self.path.name + ".tmp")
        records = [encode_record(c, i, t) for c, i, t in kept]
        with open(tmp, "wb") as f:
            f.write(_journal_header())
            f.writelines(records)
            f.flush()
            if self.durable:
                os.fdatasync(f.fileno())
        os.replace(tmp, self.path)
        if self.durable:
            fsync_directory(self.path.parent)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR)
        self._entries = kept
        self._offsets = []
        pos = JOURNAL_HEADER_BYTES
        for record in records:
            self._offsets.append(pos)
            pos += len(record)
        self._end = self._allocated = pos
        self.dirty = True

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        if self.durable:
            self.sync()
        if self._allocated > self._end:
            os.ftruncate(self._fd, self._end)  # a clean close leaves the records alone in the file
        os.close(self._fd)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._meta["raftCommitIndex"] = raftCommitIndex
        self._meta_saved = False

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("raftCommitIndex", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        self._meta["currentTerm"] = term
        self._meta["votedForNodeId"] = votedForNodeId
        # Raft requires currentTerm and votedFor to be durable before any message reflecting
        # them (a vote request or grant) is sent: stored now, fsynced when durable.
        self._meta_storer.storeMeta(self._meta)
        self._meta_saved = True

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> Any:
        return self._meta.get("votedForNodeId")

    def onOneSecondTimer(self) -> None:
        if not self._meta_saved:
            self._meta_storer.storeMeta(self._meta)
            self._meta_saved = True

    # -- durability ---------------------------------------------------------------------------------

    def flush(self) -> None:
        os.fdatasync(self._fd)

    def sync(self) -> bool:
        """``fdatasync`` what changed since the last call; True when it had changes."""
        if not self.dirty:
            return False
        self.flush()
        self.dirty = False
        self.flushes += 1
        self.flushed_index = self._entries[-1][1] if self._entries else 0
        return True

    @property
    def meta_storer(self) -> MetaStorer:
        return self._meta_storer


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks, pos = [], 0
    while pos < size:
        chunk = os.pread(fd, min(size - pos, 1 << 24), pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)


def migrate_legacy_journal(legacy: Path, target: Path, *, durable: bool) -> bool:
    """Copy the previous release's pysyncobj journal (``raft.journal`` and its ``.meta``) into
    ``target`` once, keeping the old files as ``*.v1``. False when there is nothing to migrate."""
    if target.exists() or not legacy.exists():
        return False
    old = FileJournal(str(legacy))
    try:
        entries = [old[i] for i in range(len(old))]
        meta = {
            "raftCommitIndex": old.getRaftCommitIndex(),
            "currentTerm": old.getCurrentTerm(),
            "votedForNodeId": old.getVotedForNodeId(),
        }
    finally:
        old._destroy()
    tmp = target.with_name(target.name + ".migrating")
    for stale in (tmp, Path(str(tmp) + ".meta")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)
    journal = ChecksummedJournal(tmp, durable=durable)
    for command, idx, term in entries:
        journal.add(command, idx, term)
    journal.setCurrentTerm(meta["currentTerm"], meta["votedForNodeId"])
    journal.setRaftCommitIndex(meta["raftCommitIndex"])
    journal.onOneSecondTimer()
    journal._destroy()
    os.replace(str(tmp) + ".meta", str(target) + ".meta")
    os.replace(tmp, target)
    shutil.move(str(legacy), str(legacy) + ".v1")
    if os.path.exists(str(legacy) + ".meta"):
        shutil.move(str(legacy) + ".meta", str(legacy) + ".meta.v1")
    fsync_directory(target.parent)
    logger.info(
        "migrated %d entries of the v1 journal %s to %s (the old file is kept as *.v1)", len(entries), legacy, target
    )
    return True


# -- the dump file ------------------------------------------------------------------------------------


def seal_dump(body: bytes) -> bytes:
    return _DUMP_HEADER.pack(DUMP_MAGIC, DUMP_FORMAT_VERSION, 0, zlib.crc32(body), len(body)) + body


def open_dump(data: bytes, path: Path | str = "dump") -> bytes:
    """The body of a dump file (format 2), or the whole file (format 1, the previous release's
    bare msgpack); :class:`JournalCorrupted` when it does not check out."""
    if not data.startswith(DUMP_MAGIC[:6]):
        return data  # format 1: the caller's msgpack decoding and its "format"/"v" keys decide
    if len(data) < DUMP_HEADER_BYTES:
        raise JournalCorrupted(path, len(data), "the dump is shorter than its header")
    magic, version, reserved, crc, length = _DUMP_HEADER.unpack_from(data, 0)
    if magic != DUMP_MAGIC or reserved != 0:
        raise JournalCorrupted(path, 0, "a damaged dump header")
    if version not in DUMP_FORMAT_VERSIONS or version == 1:
        raise JournalCorrupted(
            path, 8, f"dump format version {version}; this node reads {sorted(DUMP_FORMAT_VERSIONS)}"
        )
    body = data[DUMP_HEADER_BYTES:]
    if len(body) != length:
        raise JournalCorrupted(
            path, DUMP_HEADER_BYTES + min(len(body), length), f"a body of {len(body)} bytes, {length} expected"
        )
    if zlib.crc32(body) != crc:
        raise JournalCorrupted(path, DUMP_HEADER_BYTES, "the dump's checksum does not match")
    return body
