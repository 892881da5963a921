"""The replicated method never raises; dumps are canonical msgpack and restore replaces the state."""

from __future__ import annotations

import msgpack
import pytest

from waitgraph.node.raft._apply import encode_batch
from waitgraph.node.raft._compaction import DUMP_FORMAT
from waitgraph.node.raft._journal import DUMP_MAGIC, open_dump
from waitgraph.statemachine import StateMachine
from waitgraph.statemachine.errors import InvariantViolation, Status
from waitgraph.statemachine.outcome import Result

from .fakes import LEADER, SELF, append_entries, follower, regular_command, transport
from .harness import envelope


class Exploding(StateMachine):
    def __init__(self, exc: Exception) -> None:
        super().__init__()
        self.exc = exc

    def apply_bytes(self, data: bytes):  # type: ignore[no-untyped-def]
        if data == b"boom":
            raise self.exc
        return super().apply_bytes(data)


def apply(node, *args, **kwargs):
    return node.apply_commands(*args, _doApply=True, **kwargs)


@pytest.mark.parametrize(
    "payload",
    [b"", b"garbage", b"\xc1", 123, None, [b"x"], {"kind": "Batch"}, "text", msgpack.packb({"kind": "Batch", "v": 1})],
)
def test_garbage_is_invalid_argument(tmp_path, payload):
    node = follower(tmp_path)
    (out,) = apply(node, payload)
    assert out.result is Result.REJECTED and out.status is Status.INVALID_ARGUMENT
    node._doDestroy()


def test_any_argument_list_is_accepted(tmp_path):
    node = follower(tmp_path)
    assert apply(node) == apply(node, None)
    (out,) = apply(node, envelope(1), 2, 3, extra=4)
    assert out.result is Result.APPLIED
    node._doDestroy()


def test_a_group_gets_one_outcome_per_item_in_order(tmp_path):
    node = follower(tmp_path)
    outs = apply(node, encode_batch([envelope(1), b"junk", envelope(1), envelope(2), encode_batch([envelope(3)])]))
    assert [o.result for o in outs] == [
        Result.APPLIED,
        Result.REJECTED,
        Result.APPLIED,
        Result.APPLIED,
        Result.REJECTED,
    ]
    assert outs[2].duplicate  # same request id as the first
    assert apply(node, encode_batch([])) == ()
    bad_items = msgpack.packb({"items": [1, None, envelope(4)], "kind": "Batch", "v": 1})
    assert [o.result for o in apply(node, bad_items)] == [Result.REJECTED, Result.REJECTED, Result.APPLIED]
    node._doDestroy()


@pytest.mark.parametrize("exc", [RuntimeError("bug"), KeyError("x"), RecursionError(), InvariantViolation("broken")])
def test_an_exception_in_the_core_is_an_internal_outcome(tmp_path, exc):
    node = follower(tmp_path, machine=Exploding(exc))
    outs = apply(node, encode_batch([envelope(1), b"boom", envelope(2)]))
    assert [o.result for o in outs] == [Result.APPLIED, Result.REJECTED, Result.APPLIED]
    assert outs[1].status is Status.INTERNAL
    assert node.counters["internal_errors"] == 1
    assert node.counters["invariant_violations"] == (1 if isinstance(exc, InvariantViolation) else 0)
    node._doDestroy()


def test_a_raising_entry_does_not_wedge_the_log(tmp_path):
    """Through pysyncobj's own apply loop: the entry counts as applied and the next one follows."""
    node = follower(tmp_path, machine=Exploding(RuntimeError("bug")))
    t = transport(node)
    cmds = [regular_command(b"boom"), regular_command(envelope(1)), regular_command(b"\x00garbage")]
    t.deliver(LEADER, append_entries(1, 0, [(c, i + 2, 1) for i, c in enumerate(cmds)], commit=4))
    node.doTick(0)
    node.doTick(0)
    assert node.raftLastApplied == 4
    assert node.counters["entries_applied"] == 3 and node.counters["internal_errors"] == 1
    node._doDestroy()


def test_dump_is_msgpack_and_restore_replaces_the_state(tmp_path):
    node = follower(tmp_path)
    t = transport(node)
    t.deliver(LEADER, append_entries(1, 0, [(regular_command(envelope(i)), i + 2, 1) for i in range(5)], commit=6))
    node.doTick(0)
    digest = node.read(lambda m: m.digest())
    node.forceLogCompaction()
    node.doTick(0)
    raw = (tmp_path / "raft.dump").read_bytes()
    assert raw.startswith(DUMP_MAGIC)  # framed and checksummed (cluster/node/raft/_journal.py), not a pickle
    doc = msgpack.unpackb(open_dump(raw), raw=False)
    assert doc["format"] == DUMP_FORMAT
    assert doc["state"] == node.read(lambda m: m.snapshot())
    assert doc["last"][1:] == [6, 1] and doc["prev"][1:] == [5, 1]
    # Change the live state, then load the dump: nothing of the change survives.
    apply(node, envelope(99))
    assert node.read(lambda m: m.digest()) != digest
    last, prev, cluster = node._read_dump(str(tmp_path / "raft.dump"))
    assert node.read(lambda m: m.digest()) == digest
    assert last[1:] == (6, 1) and isinstance(last[0], bytes) and prev[1] == 5
    # The dump names all three members; pysyncobj gets the others only (it would compare the
    # address strings with its own Node object, never equal, and count itself as a peer).
    assert len(doc["cluster"]) == 3 and sorted(cluster) == sorted(set(doc["cluster"]) - {SELF})
    assert node.counters["dumps_loaded"] == 1
    node._doDestroy()


def test_an_unreadable_dump_stops_the_node(tmp_path):
    fatal: list[str] = []
    node = follower(tmp_path)
    node._on_fatal = fatal.append
    bad = tmp_path / "bad.dump"
    bad.write_bytes(b"\x80\x02}q\x00.")  # a pickle, as pysyncobj's own dump would be
    with pytest.raises(ValueError):
        node._read_dump(str(bad))
    assert fatal and "cannot load the full dump" in fatal[0]
    node._doDestroy()


class _Evil:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        import os

        return (os.getcwd, ())


def test_entries_that_do_not_decode_are_skipped_not_retried_forever(tmp_path):
    import pickle

    node = follower(tmp_path)
    t = transport(node)
    cmds = [
        b"\x00not a pickle",
        b"\x00" + pickle.dumps(_Evil(), 2),  # refused by the restricted unpickler
        b"\x00" + pickle.dumps((7, (b"x",)), 2),  # no replicated method 7
        regular_command(envelope(1)),
    ]
    t.deliver(LEADER, append_entries(1, 0, [(c, i + 2, 1) for i, c in enumerate(cmds)], commit=5))
    node.doTick(0)
    assert node.raftLastApplied == 5
    assert node.counters["entries_undecodable"] == 3 and node.counters["entries_applied"] == 1
    node._doDestroy()
