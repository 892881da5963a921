"""Codec fuzzing: bad bytes never escape as anything but ``CodecError``, and never change the state.

- Random bytes and damaged encodings (bit flips, truncation, appended garbage, lying lengths, deep
  nesting; structural mutations: fields of the wrong type, unknown kinds and versions, extra and
  missing fields, oversize strings, huge integers, nested junk) make ``decode_envelope``,
  ``decode_command`` and ``decode_outcome`` raise ``CodecError`` or return a value whose encoding
  is a canonical fixpoint; ``decode_outcome`` accepts only the outcome's exact shape.
- ``StateMachine.apply_bytes`` on them returns an Outcome: REJECTED/INVALID_ARGUMENT for
  undecodable bytes, with the state byte-identical; whatever decodes leaves the invariants intact
  and the state restorable.
- Round trips: ``decode(encode(x)) == x`` and ``encode(decode(b)) == b`` for every command,
  envelope, effect and outcome the strategies can build.
- ``State.restore`` on a damaged snapshot raises ``CodecError`` and nothing else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable
from functools import cache
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import (
    any_command,
    any_effect,
    any_envelope,
    any_outcome,
    examples,
    generate_log,
    mutated_bytes,
    mutated_plain,
    pack_plain,
)
from waitgraph.statemachine import codec, invariants
from waitgraph.statemachine.codec import (
    MAX_PAYLOAD_BYTES,
    adopt_checked,
    check_envelope,
    command_fingerprint,
    command_to_plain,
    decode_command,
    decode_envelope,
    decode_outcome,
    encode_checked_envelope,
    encode_command,
    encode_envelope,
    encode_outcome,
    envelope_to_plain,
    outcome_to_plain,
    pack,
)
from waitgraph.statemachine.commands import COMMANDS
from waitgraph.statemachine.errors import CodecError, Status
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.state import State

KINDS = tuple(cls.KIND for cls in COMMANDS)

DECODERS: dict[str, tuple[Callable[[bytes], Any], Callable[[Any], bytes]]] = {
    "envelope": (decode_envelope, encode_envelope),
    "command": (decode_command, encode_command),
    "outcome": (decode_outcome, encode_outcome),
}


def decoded_or_none(decode: Callable[[bytes], Any], data: bytes) -> Any:
    """The decoded value, or None for a CodecError; any other exception fails the test."""
    try:
        return decode(data)
    except CodecError:
        return None


def check_decoder(what: str, data: bytes) -> None:
    decode, encode = DECODERS[what]
    value = decoded_or_none(decode, data)
    if value is None:
        return
    # Whatever decodes re-encodes to canonical bytes that decode back to themselves.
    canonical = encode(value)
    assert encode(decode(canonical)) == canonical
    if what == "outcome":
        # Strict shape: exactly [result, [effect...], code, status, message, {field: value}, duplicate].
        raw = msgpack.unpackb(data, raw=False)
        assert type(raw) is list and len(raw) == 7, raw
        assert type(raw[1]) is list and type(raw[5]) is dict, raw
        assert same(raw[5], msgpack.unpackb(canonical, raw=False)[5]), "outcome fields changed in decoding"


def same(a: Any, b: Any) -> bool:
    """Structural equality that tells bool from int and treats NaN as equal to itself."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


@cache
def rich_snapshot() -> bytes:
    """A machine with sessions, executions, holdings, waits and recorded requests."""
    sm = StateMachine()
    for data in generate_log(3, 250):
        sm.apply_bytes(data)
    assert sm.state.executions and sm.state.idempotency
    return sm.snapshot()


def valid_plain(what: str) -> st.SearchStrategy[Any]:
    if what == "envelope":
        return any_envelope().map(envelope_to_plain)
    if what == "command":
        return any_command().map(command_to_plain)
    return any_outcome().map(outcome_to_plain)


@st.composite
def damaged(draw: st.DrawFn, what: str) -> bytes:
    """Valid bytes of ``what`` damaged one way or another."""
    plain = draw(valid_plain(what))
    how = draw(st.sampled_from(("bytes", "plain", "plain", "random")))
    if how == "bytes":
        return draw(mutated_bytes(pack_plain(plain)))
    if how == "plain":
        return pack_plain(draw(mutated_plain(plain, KINDS)))
    return draw(st.binary(max_size=128))


# -- decoders --------------------------------------------------------------------------------


@pytest.mark.parametrize("what", sorted(DECODERS))
@settings(max_examples=examples(150), deadline=None)
@given(data=st.binary(max_size=256))
def test_random_bytes_raise_only_codec_error(what: str, data: bytes) -> None:
    check_decoder(what, data)


@pytest.mark.parametrize("what", sorted(DECODERS))
@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
def test_damaged_encodings_raise_only_codec_error(what: str, data: st.DataObject) -> None:
    check_decoder(what, data.draw(damaged(what), label="damaged"))


@pytest.mark.parametrize("what", sorted(DECODERS))
def test_oversize_payloads_are_refused(what: str) -> None:
    decode, _ = DECODERS[what]
    huge = pack_plain({"kind": "JoinSession", "v": 1, "agent_id": "a" * MAX_PAYLOAD_BYTES, "lease_ms": 1})
    for data in (huge, b"\xc0" * (MAX_PAYLOAD_BYTES + 1), b"\x91" * 100_000 + b"\xc0"):
        with pytest.raises(CodecError):
            decode(data)


# -- round trips -----------------------------------------------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(cmd=any_command())
def test_command_round_trip_is_canonical(cmd: Any) -> None:
    data = encode_command(cmd)
    assert decode_command(data) == cmd
    assert encode_command(decode_command(data)) == data


@settings(max_examples=examples(200), deadline=None)
@given(env=any_envelope())
def test_envelope_round_trip_is_canonical(env: Any) -> None:
    data = encode_envelope(env)
    assert decode_envelope(data) == env
    assert encode_envelope(decode_envelope(data)) == data


_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.integers(min_value=1020, max_value=1030).map(lambda n: "x" * n),
    st.lists(st.one_of(st.text(max_size=8), st.integers(), st.none()), max_size=3),
    st.lists(st.one_of(st.text(max_size=8), st.integers()), max_size=3).map(tuple),
    st.integers(min_value=1020, max_value=1030).map(lambda n: ("x",) * n),
    st.sampled_from([e for enum in (Status, Result) for e in enum]),
)


@settings(max_examples=examples(300), deadline=None)
@given(env=any_envelope(), data=st.data())
def test_checked_envelope_refuses_what_the_decoder_refuses(env: Any, data: st.DataObject) -> None:
    """``encode_checked_envelope`` (the leader's check before it proposes, without unpacking
    again) gives the bytes of ``encode_envelope`` when ``decode_envelope`` accepts those bytes,
    and the same CodecError message when it refuses them, for any field set to any junk."""
    names = [f.name for f in dataclasses.fields(env.command)]
    if names and data.draw(st.booleans()):
        name = data.draw(st.sampled_from(names))
        # Frozen dataclasses: build the broken value as a converter bug or a hostile client would.
        env = dataclasses.replace(env, command=dataclasses.replace(env.command, **{name: data.draw(_JUNK)}))
    try:
        expected: bytes | str = encode_envelope(env)
        assert isinstance(expected, bytes)
        if len(expected) > MAX_PAYLOAD_BYTES:
            expected = f"the command is {len(expected)} bytes encoded; the limit is {MAX_PAYLOAD_BYTES}"
        else:
            decode_envelope(expected)
    except CodecError as exc:
        expected = exc.message
    except (OverflowError, TypeError, ValueError) as exc:  # not packable at all: both raise it
        with pytest.raises(type(exc)):
            encode_checked_envelope(env)
        return
    try:
        got: bytes | str = encode_checked_envelope(env)
    except CodecError as exc:
        got = exc.message
    assert got == expected


@settings(max_examples=examples(300), deadline=None)
@given(env=any_envelope())
def test_a_checked_envelope_is_what_the_decoder_gives_for_its_bytes(env: Any) -> None:
    """The proposing node applies ``adopt_checked(check_envelope(env))`` where every other replica
    applies ``decode_envelope`` of the bytes: the same value, and the same fingerprint through
    the fast path it primes as through the full encoding."""
    checked = check_envelope(env)
    decoded = decode_envelope(checked.data)
    adopted = adopt_checked(checked)
    assert adopted == decoded and type(adopted.command) is type(decoded.command)
    fast = command_fingerprint(adopted.command)
    codec._DECODED = (None, {})
    assert fast == command_fingerprint(adopted.command) == command_fingerprint(decoded.command)


def _generic_from_plain(raw: Any, specs: dict[Any, Any], what: str) -> Any:
    """The decoder's field loop as it was before ``_builder`` (the reference: each field's checker
    in sorted order, then the class's own ``__init__``), after the same check of the map's keys."""
    spec = codec._spec_of(raw, specs, what)
    kind = raw["kind"]
    kwargs = {}
    for name, check, required in spec.fields:
        value = raw.get(name, codec._ABSENT)
        if value is not codec._ABSENT:
            kwargs[name] = check(value, name)
        elif required:
            raise CodecError(f"{kind} is missing field {name!r}", kind=kind, field=name)
    return spec.cls(**kwargs)


def _decoded_by(decode: Callable[[], Any]) -> Any:
    try:
        obj = decode()
    except CodecError as exc:
        return ("refused", exc.message, exc.fields)
    return (type(obj), [(f.name, type(v := getattr(obj, f.name)), v) for f in dataclasses.fields(obj)])


@settings(max_examples=examples(400), deadline=None)
@given(data=st.data())
def test_the_generated_builders_decode_what_the_field_loop_decodes(data: st.DataObject) -> None:
    """Every command and effect map, intact or damaged (wrong types, missing and extra fields,
    oversize values, unknown kinds): ``_from_plain``'s generated builder gives the value the
    generic field loop gives, field by field and type by type, or the same CodecError."""
    if data.draw(st.booleans(), label="effect"):
        specs, what, plain = codec._EFFECT_SPECS, "effect", codec.effect_to_plain(data.draw(any_effect()))
    else:
        specs, what, plain = codec._COMMAND_SPECS, "command", command_to_plain(data.draw(any_command()))
    if data.draw(st.booleans(), label="damaged"):
        plain = data.draw(mutated_plain(plain, KINDS), label="plain")
    got = _decoded_by(lambda: codec._from_plain(plain, specs, what))
    assert got == _decoded_by(lambda: _generic_from_plain(plain, specs, what))


@settings(max_examples=examples(200), deadline=None)
@given(out=any_outcome())
def test_outcome_round_trip_is_canonical(out: Outcome) -> None:
    data = encode_outcome(out)
    assert decode_outcome(data) == out
    assert encode_outcome(decode_outcome(data)) == data


@settings(max_examples=examples(200), deadline=None)
@given(env=any_envelope(), data=st.data())
def test_fingerprint_is_of_the_canonical_bytes_however_the_command_arrived(env: Any, data: st.DataObject) -> None:
    """A replica fingerprints the command it has just decoded by packing the map it arrived in,
    when that map holds every key in canonical order already (``codec._DECODED``). Whatever the
    key order and whichever default fields were left out, the fingerprint is the digest of the
    command's canonical bytes, as is the fingerprint of a command decoded before another."""
    canonical = encode_command(env.command)
    assert canonical == pack(command_to_plain(env.command))
    expected = hashlib.blake2b(canonical, digest_size=8).digest()
    plain = envelope_to_plain(env)
    cmd = plain["cmd"]
    defaults = [
        f.name
        for f in dataclasses.fields(env.command)
        if f.default is not dataclasses.MISSING and getattr(env.command, f.name) == f.default
    ]
    dropped = data.draw(st.sets(st.sampled_from(defaults)) if defaults else st.just(set()))
    keys = data.draw(st.permutations(sorted(cmd)) | st.just(sorted(cmd)))
    plain["cmd"] = {k: cmd[k] for k in keys if k not in dropped}
    first = decode_envelope(pack(plain))
    assert first == env
    assert command_fingerprint(first.command) == expected
    second = decode_envelope(encode_envelope(env))
    assert command_fingerprint(first.command) == command_fingerprint(second.command) == expected
    assert command_fingerprint(env.command) == expected


@settings(max_examples=examples(200), deadline=None)
@given(plain=st.sampled_from(sorted(DECODERS)).flatmap(valid_plain))
def test_pack_writes_the_bytes_msgpack_writes(plain: Any) -> None:
    """``pack`` (msgspec's encoder, for speed) writes exactly what msgpack-python writes: the
    format does not depend on the library that encoded it."""
    assert pack(plain) == msgpack.packb(plain, use_bin_type=True)


def test_a_snapshot_is_the_bytes_msgpack_writes() -> None:
    plain = State.restore(rich_snapshot()).to_plain()
    assert pack(plain) == msgpack.packb(plain, use_bin_type=True) == rich_snapshot()


# -- the machine on bad bytes ----------------------------------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
def test_apply_bytes_on_damaged_envelopes(data: st.DataObject) -> None:
    snap = rich_snapshot()
    sm = StateMachine(State.restore(snap))
    bad = data.draw(damaged("envelope"), label="damaged")
    out = sm.apply_bytes(bad)
    assert isinstance(out, Outcome)
    assert decode_outcome(encode_outcome(out)) == out, "the outcome does not survive the codec"
    after = sm.snapshot()
    if decoded_or_none(decode_envelope, bad) is None:
        assert (out.result, out.status, out.code) == (Result.REJECTED, Status.INVALID_ARGUMENT, "codec"), out
        assert after == snap, "undecodable bytes changed the state"
        return
    # It decoded (a damaged but well-formed command): whatever it did, the state is sound.
    if out.result is Result.REJECTED:
        assert after == snap, f"rejection {out.code} changed the state"
    assert invariants.check(sm.state) == []
    assert State.restore(after).snapshot() == after


# -- snapshots -------------------------------------------------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
def test_restore_of_a_damaged_snapshot_raises_only_codec_error(data: st.DataObject) -> None:
    snap = rich_snapshot()
    if data.draw(st.booleans(), label="structural"):
        plain = msgpack.unpackb(snap, raw=False, strict_map_key=False)
        bad = pack_plain(data.draw(mutated_plain(plain), label="plain"))
    else:
        bad = data.draw(mutated_bytes(snap), label="bytes")
    try:
        restored = State.restore(bad)
    except CodecError:
        return
    assert isinstance(restored, State)


def test_restore_of_the_rich_snapshot_is_identity() -> None:
    snap = rich_snapshot()
    assert State.restore(snap).snapshot() == snap
    assert invariants.check(State.restore(snap)) == []
