"""The journal and the dump on disk (cluster/node/raft/_journal.py): checksums, torn tails, corruption,
the previous release's formats, and kill -9 of every node mid-burst."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import msgpack
import pytest
from pysyncobj.journal import FileJournal

from waitgraph.node.raft._journal import (
    DUMP_MAGIC,
    JOURNAL_HEADER_BYTES,
    PREALLOCATE_BYTES,
    ChecksummedJournal,
    JournalCorrupted,
    encode_record,
    migrate_legacy_journal,
    open_dump,
    scan,
    seal_dump,
)

from . import fakes
from .harness import Cluster, envelope, missing_targets, wait_for

COMMANDS = [(f"command {i} ".encode() * (i % 5 + 1), i + 1, 1 + i // 4) for i in range(12)]


def written(tmp: Path, entries: list[tuple[bytes, int, int]] = COMMANDS) -> tuple[Path, list[int]]:
    """A journal holding ``entries``, closed; and the offset of each record."""
    path = tmp / "raft.wal"
    journal = ChecksummedJournal(path, durable=True)
    for entry in entries:
        journal.add(*entry)
    journal.setCurrentTerm(3, "127.0.0.1:2")
    offsets = list(journal._offsets)
    journal._destroy()
    return path, offsets


def reopened(path: Path) -> list[tuple[bytes, int, int]]:
    journal = ChecksummedJournal(path, durable=False)
    try:
        return [journal[i] for i in range(len(journal))]
    finally:
        journal._destroy()


def test_records_and_meta_survive_a_reopen(tmp_path: Path) -> None:
    path, _ = written(tmp_path)
    journal = ChecksummedJournal(path, durable=True)
    assert [journal[i] for i in range(len(journal))] == COMMANDS
    assert (journal.getCurrentTerm(), journal.getVotedForNodeId()) == (3, "127.0.0.1:2")
    journal.deleteEntriesFrom(10)
    journal.deleteEntriesTo(3)
    journal.add(b"after", 11, 9)
    journal._destroy()
    assert reopened(path) == [*COMMANDS[3:10], (b"after", 11, 9)]
    journal = ChecksummedJournal(path, durable=True)
    journal.clear()
    journal._destroy()
    assert reopened(path) == [] and path.stat().st_size == JOURNAL_HEADER_BYTES


def test_a_torn_last_record_is_truncated_at_every_offset(tmp_path: Path, caplog: Any) -> None:
    path, offsets = written(tmp_path)
    whole = path.read_bytes()
    last = offsets[-1]
    for cut in range(last, len(whole)):
        path.write_bytes(whole[:cut])
        with caplog.at_level(logging.WARNING, "waitgraph.node.journal"):
            caplog.clear()
            assert reopened(path) == COMMANDS[:-1], cut
        assert path.stat().st_size == last  # truncated where the last good record ends
        # A tail of zeros alone (a length's high bytes) is what allocated space holds: not logged.
        assert "torn last record" in caplog.text or not whole[last:cut].strip(b"\0")
    # Torn with the rest of the page left as zeros (the file grew, the data never landed).
    path.write_bytes(whole[: last + 5] + bytes(4096))
    assert reopened(path) == COMMANDS[:-1]
    path.write_bytes(whole)
    assert reopened(path) == COMMANDS


def test_the_file_is_allocated_ahead_of_its_records_and_a_crash_leaves_only_zeros_there(
    tmp_path: Path, caplog: Any
) -> None:
    path = tmp_path / "raft.wal"
    journal = ChecksummedJournal(path, durable=True)
    for entry in COMMANDS:
        journal.add(*entry)
    journal.sync()
    end = journal._end
    assert path.stat().st_size >= end + PREALLOCATE_BYTES - 4096  # allocated once, ahead
    os.close(journal._fd)  # a crash: no clean close
    image = path.read_bytes()
    assert not image[end:].strip(b"\0")
    with caplog.at_level(logging.DEBUG, "waitgraph.node.journal"):
        reopened_journal = ChecksummedJournal(path, durable=True)
    assert [reopened_journal[i] for i in range(len(reopened_journal))] == COMMANDS
    assert reopened_journal.torn_truncated == 0 and "torn" not in caplog.text  # nothing was written there
    cut = f"{len(image) - end} bytes of zeros after the last record"
    assert [r.levelno for r in caplog.records if cut in r.getMessage()] == [logging.INFO]  # said, not alarming
    assert path.stat().st_size == end
    reopened_journal.add(b"after", 13, 4)
    reopened_journal._destroy()  # a clean close: the records alone
    assert path.stat().st_size == end + len(encode_record(b"after", 13, 4))
    assert reopened(path) == [*COMMANDS, (b"after", 13, 4)]


def test_a_byte_in_the_allocated_tail_is_a_torn_tail_not_damage(tmp_path: Path, caplog: Any) -> None:
    """An append that landed only in part, inside the allocated space: cut off and logged."""
    path = tmp_path / "raft.wal"
    journal = ChecksummedJournal(path, durable=True)
    for entry in COMMANDS:
        journal.add(*entry)
    end = journal._end
    os.close(journal._fd)
    image = bytearray(path.read_bytes())
    image[end + 100] = 0x5A
    path.write_bytes(bytes(image))
    with caplog.at_level(logging.WARNING, "waitgraph.node.journal"):
        caplog.clear()
        again = ChecksummedJournal(path, durable=True)
    assert [again[i] for i in range(len(again))] == COMMANDS
    assert again.torn_truncated == len(image) - end and "torn last record" in caplog.text
    again._destroy()


def test_cutting_records_cuts_the_allocated_tail_and_the_next_append_allocates_again(tmp_path: Path) -> None:
    path, _ = written(tmp_path)
    journal = ChecksummedJournal(path, durable=True)
    journal.deleteEntriesFrom(6)
    assert path.stat().st_size == journal._end
    journal.add(b"again", 7, 9)
    assert path.stat().st_size > journal._end
    journal.deleteEntriesTo(2)  # a compaction's rewrite: a new file, exactly its records
    assert path.stat().st_size == journal._end
    journal.clear()
    assert path.stat().st_size == JOURNAL_HEADER_BYTES
    journal._destroy()


def test_where_posix_fallocate_is_missing_appends_grow_the_file(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delattr(os, "posix_fallocate")  # macOS has none
    path, _ = written(tmp_path)
    assert reopened(path) == COMMANDS


def test_without_posix_fallocate_appends_grow_the_file(tmp_path: Path, monkeypatch: Any, caplog: Any) -> None:
    calls = []

    def refuse(fd: int, offset: int, length: int) -> None:
        calls.append(length)
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", refuse)
    with caplog.at_level(logging.WARNING, "waitgraph.node.journal"):
        path, _ = written(tmp_path)
    assert len(calls) == 1 and "cannot allocate the journal ahead" in caplog.text  # tried once
    assert reopened(path) == COMMANDS


def test_every_changed_bit_of_the_last_record_is_a_torn_tail_and_never_read_back(tmp_path: Path) -> None:
    path, offsets = written(tmp_path)
    whole = path.read_bytes()
    for pos in range(offsets[-1], len(whole)):
        for bit in (0, 3, 7):
            path.write_bytes(whole[:pos] + bytes([whole[pos] ^ (1 << bit)]) + whole[pos + 1 :])
            assert reopened(path) == COMMANDS[:-1], (pos, bit)


def test_damage_before_the_tail_refuses_to_start_and_changes_nothing(tmp_path: Path) -> None:
    path, offsets = written(tmp_path)
    whole = path.read_bytes()
    middle = offsets[5]
    for pos in [*range(middle, offsets[6]), 0, 7]:  # every byte of a middle record; magic, version
        damaged = whole[:pos] + bytes([whole[pos] ^ 0x10]) + whole[pos + 1 :]
        path.write_bytes(damaged)
        with pytest.raises(JournalCorrupted) as caught:
            ChecksummedJournal(path, durable=True)
        message = str(caught.value)
        assert str(path) in message and "empty one" in message and "Replacing a failed node" in message
        assert caught.value.offset == (middle if pos >= middle else pos - pos % 6)
        assert path.read_bytes() == damaged  # refused, not repaired


def test_the_previous_releases_journal_is_migrated_once(tmp_path: Path) -> None:
    legacy = tmp_path / "raft.journal"
    old = FileJournal(str(legacy))
    for entry in COMMANDS:
        old.add(*entry)
    old.setCurrentTerm(4, "127.0.0.1:3")
    old.setRaftCommitIndex(9)
    old.onOneSecondTimer()
    old._destroy()
    target = tmp_path / "raft.wal"
    assert migrate_legacy_journal(legacy, target, durable=True)
    assert not legacy.exists() and (tmp_path / "raft.journal.v1").exists()
    journal = ChecksummedJournal(target, durable=True)
    assert [journal[i] for i in range(len(journal))] == COMMANDS
    assert (journal.getCurrentTerm(), journal.getVotedForNodeId(), journal.getRaftCommitIndex()) == (
        4,
        "127.0.0.1:3",
        9,
    )
    journal._destroy()
    assert not migrate_legacy_journal(legacy, target, durable=True)  # once


# -- the dump -------------------------------------------------------------------------------------


def _refusing_node(tmp: Path) -> tuple[Any, list[str]]:
    """A follower that applied five writes and wrote its dump; its fatal stops are recorded."""
    fatal: list[str] = []
    node = fakes.follower(tmp)
    node._on_fatal = fatal.append
    entries = [(fakes.regular_command(envelope(i)), i + 2, 1) for i in range(5)]
    fakes.transport(node).deliver(fakes.LEADER, fakes.append_entries(1, 0, entries, commit=6))
    node.doTick(0)
    node.forceLogCompaction()
    node.doTick(0)
    return node, fatal


def test_a_dump_that_does_not_check_out_refuses_to_load(tmp_path: Path) -> None:
    node, fatal = _refusing_node(tmp_path / "n")
    dump = tmp_path / "n" / "raft.dump"
    good = dump.read_bytes()
    assert good.startswith(DUMP_MAGIC)
    before = node.read(lambda m: m.digest())
    damaged = [good[:cut] for cut in range(0, len(good), max(1, len(good) // 40))]
    damaged += [good[:pos] + bytes([good[pos] ^ 1]) + good[pos + 1 :] for pos in range(len(good))]
    for data in damaged:
        dump.write_bytes(data)
        with pytest.raises(Exception):  # noqa: B017 - what matters is that the node gives up
            node._read_dump(str(dump))
    assert len(fatal) == len(damaged)
    assert any("checksum does not match" in f for f in fatal)
    assert node.read(lambda m: m.digest()) == before  # nothing was loaded
    dump.write_bytes(good)
    node._read_dump(str(dump))
    node._doDestroy()


def test_the_previous_releases_dump_is_read(tmp_path: Path) -> None:
    node, fatal = _refusing_node(tmp_path / "n")
    dump = tmp_path / "n" / "raft.dump"
    body = open_dump(dump.read_bytes())
    assert seal_dump(body) == dump.read_bytes()
    dump.write_bytes(body)  # format 1: the bare msgpack document of the previous release
    assert msgpack.unpackb(body, raw=False)["format"] == "waitgraph-raft-dump"
    node._read_dump(str(dump))
    assert fatal == []
    node._doDestroy()


# -- real nodes ------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_follower_with_a_torn_journal_tail_restarts_and_catches_up(make_cluster: Any) -> None:
    cluster: Cluster = make_cluster()
    leader = cluster.leader()
    follower = cluster.followers(leader)[0]
    for i in range(30):
        assert leader.submit(envelope(i)).ok
    cluster.converged_digest()
    follower.kill()
    wal = follower.data / "raft.wal"
    whole = wal.read_bytes()
    _, offsets, end = scan(whole, wal)
    whole = whole[:end]  # killed: the space allocated ahead of the records is still there
    last = offsets[-1]
    for cut in (last + 5, (last + len(whole)) // 2, len(whole) - 1):  # +5: past the length, some non-zero
        wal.write_bytes(whole[:cut])
        follower.start()
        assert "torn last record" in follower.log_text()
        digest = cluster.converged_digest(timeout_s=20)
        follower.kill()
        wal.write_bytes(whole)
    follower.start()
    assert cluster.converged_digest(timeout_s=20) == digest
    assert missing_targets(leader, list(range(30))) == []


@pytest.mark.timeout(120)
def test_a_corrupt_journal_refuses_to_start_until_the_node_is_replaced(make_cluster: Any) -> None:
    cluster: Cluster = make_cluster()
    leader = cluster.leader()
    follower = cluster.followers(leader)[0]
    for i in range(30):
        assert leader.submit(envelope(i)).ok
    expected = cluster.converged_digest()
    follower.kill()
    wal = follower.data / "raft.wal"
    data = bytearray(wal.read_bytes())
    _, _, end = scan(bytes(data), wal)
    assert end < len(data)  # killed: the space allocated ahead of its records is still there
    data[end // 2] ^= 0x40  # inside the records
    wal.write_bytes(bytes(data))
    follower.spawn()
    assert follower.proc is not None
    assert follower.proc.wait(30) != 0
    log = follower.log_text()
    assert f"{wal} is corrupt at byte offset" in log and "empty one" in log
    assert wal.read_bytes() == bytes(data)  # refused, not repaired
    # The recovery the message gives: an empty data directory; the leader sends the rest.
    shutil.move(str(follower.data), str(follower.data) + ".corrupt")
    follower.start()
    assert cluster.converged_digest(timeout_s=30) == expected


@pytest.mark.timeout(180)
def test_kill_9_of_every_node_mid_burst_loses_no_acknowledged_write(make_cluster: Any) -> None:
    """The defaults (durable): every write acknowledged before all three nodes were killed is on
    every replica after they restart."""
    cluster: Cluster = make_cluster()
    leader = cluster.leader()
    acknowledged: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(first: int) -> None:
        i = first
        while not stop.is_set():
            try:
                got = leader.submit(envelope(i), timeout_s=5)
            except OSError:
                return  # the node died under us: this write is not acknowledged
            if not isinstance(got, dict) and got.ok:
                with lock:
                    acknowledged.append(i)
            i += 1

    threads = [threading.Thread(target=writer, args=(k * 1_000_000,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: len(acknowledged) > 300, 60, "a burst of acknowledged writes")
    for node in cluster.nodes:  # as close together as a power cut
        assert node.proc is not None
        node.proc.kill()
    stop.set()
    for t in threads:
        t.join(10)
    for node in cluster.nodes:
        node.proc.wait(10) if node.proc is not None else None
    with lock:
        acked = sorted(acknowledged)
    for node in cluster.nodes:
        node.spawn()
    for node in cluster.nodes:
        node.wait_ready()
    new_leader = cluster.leader(timeout_s=30)
    digest = cluster.converged_digest(timeout_s=30)
    assert digest and missing_targets(new_leader, acked) == []
    cluster.converged_digest(timeout_s=30)  # and every replica agrees on it
