"""Canonical msgpack codec for commands, envelopes, effects and outcomes.

Rules kept here:
- Canonical: maps are written with sorted keys, and every message carries its ``kind`` and
  version ``v`` inside, so equal values always encode to equal bytes on every replica.
- Strict: an unknown kind or version, a missing or unknown field, a wrong type, an oversize
  field or payload, or trailing bytes is a :class:`CodecError`; nothing else ever escapes.
- Every released (kind, version) keeps a decoder; an old version is decoded by its own class
  (and upgraded by ``_UPGRADES`` when a newer version replaces it).
- A field added to a released version (named in the class's ``ADDED``, with a default that keeps
  the old behaviour) is written only when it differs from its default: the command's bytes stay
  those of the release before, which a member still running it decodes during a rolling upgrade.
  A command that sets it needs every member upgraded (the old decoder refuses the unknown key).
"""

from __future__ import annotations

import dataclasses
import hashlib
import operator
import typing
from collections.abc import Callable
from enum import StrEnum
from types import NoneType, UnionType
from typing import Any

import msgpack
import msgspec

from .commands import COMMANDS, Command, Envelope
from .effects import EFFECTS, Effect
from .errors import CodecError, Status
from .fastinit import slot_setter
from .outcome import Outcome, Result

MAX_PAYLOAD_BYTES = 64 * 1024
"""Largest encoded envelope accepted; the gRPC layer uses the same bound."""
MAX_STR_LEN = 1024
"""Longest string field; ids have their own tighter limit (``ids.MAX_ID_LEN``)."""
MAX_FIELDS = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The range of every integer the codec carries (msgpack's and protobuf's int64); the state
clamps what it computes to it (``context.later``, ``State.bump``) so that a snapshot reads back."""

Checker = Callable[[Any, str], Any]
_ABSENT = object()


def _check_str(value: Any, name: str) -> str:
    if type(value) is not str:
        raise CodecError(f"field {name!r} must be a string, got {type(value).__name__}", field=name)
    if len(value) > MAX_STR_LEN:
        raise CodecError(f"field {name!r} is {len(value)} characters; the limit is {MAX_STR_LEN}", field=name)
    return value


def _check_int(value: Any, name: str) -> int:
    if type(value) is not int:
        raise CodecError(f"field {name!r} must be an integer, got {type(value).__name__}", field=name)
    if not INT64_MIN <= value <= INT64_MAX:
        raise CodecError(f"field {name!r} is out of the 64-bit range", field=name)
    return value


def _check_bool(value: Any, name: str) -> bool:
    if type(value) is not bool:
        raise CodecError(f"field {name!r} must be a boolean, got {type(value).__name__}", field=name)
    return value


def _enum_checker(enum: type[StrEnum]) -> Checker:
    members = {m.value: m for m in enum}

    def check(value: Any, name: str) -> StrEnum:
        member = members.get(value) if type(value) is str else None
        if member is None:
            raise CodecError(f"field {name!r} must be one of {sorted(members)}", field=name)
        return member

    return check


def _optional(inner: Checker) -> Checker:
    def check(value: Any, name: str) -> Any:
        return None if value is None else inner(value, name)

    return check


MAX_ITEMS = 1024
"""Longest list field (members of a recovery, voters)."""


def _tuple_of(inner: Checker) -> Checker:
    def check(value: Any, name: str) -> tuple[Any, ...]:
        if type(value) is not list and type(value) is not tuple:
            raise CodecError(f"field {name!r} must be a list, got {type(value).__name__}", field=name)
        if len(value) > MAX_ITEMS:
            raise CodecError(f"field {name!r} has {len(value)} items; the limit is {MAX_ITEMS}", field=name)
        return tuple(inner(v, name) for v in value)

    return check


def _checker_for(tp: Any) -> Checker:
    if isinstance(tp, UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        if len(args) != 1:
            raise TypeError(f"unsupported union {tp}")
        return _optional(_checker_for(args[0]))
    if typing.get_origin(tp) is tuple:
        items = typing.get_args(tp)
        if len(items) != 2 or items[1] is not Ellipsis:
            raise TypeError(f"unsupported tuple {tp}")
        return _tuple_of(_checker_for(items[0]))
    if tp is str:
        return _check_str
    if tp is bool:
        return _check_bool
    if tp is int:
        return _check_int
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        return _enum_checker(tp)
    raise TypeError(f"unsupported field type {tp}")


@dataclasses.dataclass(frozen=True, slots=True)
class _Spec:
    cls: type
    fields: tuple[tuple[str, Checker, bool], ...]
    """(name, checker, required) in sorted name order."""
    names: frozenset[str]
    allowed: frozenset[str]
    """``names`` plus the ``kind`` and ``v`` keys every message carries."""
    build: Callable[[dict[str, Any]], Any]
    """The instance a map of allowed keys holds (:func:`_builder`), or the field's CodecError."""


def _inline(tp: Any, name: str, indent: str) -> list[str] | None:
    """Source lines that check ``v`` as ``_checker_for(tp)`` does, on its fast path: the common
    types are tested in place and only a refused value calls the checker (which raises its own
    error); None for the types whose checker is called every time (enums, tuples)."""
    if isinstance(tp, UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        inner = _inline(args[0], name, indent + "    ") if len(args) == 1 else None
        return None if inner is None else [f"{indent}if v is not None:", *inner]
    test = {
        str: "type(v) is not str or len(v) > _MAX_STR",
        int: "type(v) is not int or not INT64_MIN <= v <= INT64_MAX",
        bool: "type(v) is not bool",
    }.get(tp)
    if test is None:
        return None
    checker = {str: "_check_str", int: "_check_int", bool: "_check_bool"}[tp]
    return [f"{indent}if {test}:", f"{indent}    {checker}(v, {name!r})"]


def _builder(cls: type, hints: dict[str, Any], fields: tuple[tuple[str, Checker, bool], ...]) -> Callable[..., Any]:
    """``cls``'s instance from a map whose keys were checked: each field in sorted order checked
    (or its absence refused, or its default taken) and stored in its slot, as ``cls(**checked)``
    would store it (:func:`_spec` refuses a ``__post_init__``, so ``__init__`` does nothing else).
    Generated once per class, as dataclasses generates ``__init__``: the generic loop's calls
    through a checker closure per field, and the keyword dict, were most of a replica's decode
    (``test_the_generated_builders_decode_what_the_field_loop_decodes`` holds it to that loop)."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    namespace: dict[str, Any] = {
        "_ABSENT": _ABSENT,
        "_new": object.__new__,
        "_cls": cls,
        "_missing": _missing,
        "_MAX_STR": MAX_STR_LEN,
        "INT64_MIN": INT64_MIN,
        "INT64_MAX": INT64_MAX,
        "_check_str": _check_str,
        "_check_int": _check_int,
        "_check_bool": _check_bool,
    }
    lines = ["def build(raw):", "    get = raw.get", "    o = _new(_cls)"]
    for i, (name, check, required) in enumerate(fields):
        namespace[f"_s{i}"], namespace[f"_c{i}"] = slot_setter(cls, name), check
        lines.append(f"    v = get({name!r}, _ABSENT)")
        if required:
            lines.append(f"    if v is _ABSENT: _missing({cls.KIND!r}, {name!r})")  # type: ignore[attr-defined]
        else:
            if defaults[name] is dataclasses.MISSING:
                raise TypeError(f"{cls.__name__}.{name}: a default_factory is not supported by the codec")
            namespace[f"_d{i}"] = defaults[name]
            lines.append(f"    if v is _ABSENT: v = _d{i}")
        lines.append("    else:")
        lines.extend(_inline(hints[name], name, "        ") or [f"        v = _c{i}(v, {name!r})"])
        lines.append(f"    _s{i}(o, v)")
    lines.append("    return o")
    exec("\n".join(lines) + "\n", namespace)  # from the class's own field names
    build: Callable[..., Any] = namespace["build"]
    return build


def _missing(kind: str, name: str) -> typing.NoReturn:
    raise CodecError(f"{kind} is missing field {name!r}", kind=kind, field=name)


def _spec(cls: type) -> _Spec:
    hints = typing.get_type_hints(cls)
    out = []
    for f in sorted(dataclasses.fields(cls), key=lambda f: f.name):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append((f.name, _checker_for(hints[f.name]), required))
    names = frozenset(f.name for f in dataclasses.fields(cls))
    if names & {"kind", "v"}:
        # The codec writes these keys itself; a field of that name would be silently overwritten.
        raise TypeError(f"{cls.__name__} has a field named kind or v")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has __post_init__: the codec builds it field by field")
    fields = tuple(out)
    return _Spec(cls, fields, names, names | {"kind", "v"}, _builder(cls, hints, fields))


_COMMAND_SPECS: dict[tuple[str, int], _Spec] = {(c.KIND, c.VERSION): _spec(c) for c in COMMANDS}
_EFFECT_SPECS: dict[tuple[str, int], _Spec] = {(c.KIND, c.VERSION): _spec(c) for c in EFFECTS}
_UPGRADES: dict[tuple[str, int], Callable[[Any], Any]] = {}
"""(kind, old version) -> function turning the old command into the current one."""


_Layout = tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]], tuple[str, ...], tuple[tuple[str, Any], ...]]
_LAYOUTS: dict[type, _Layout] = {}
"""Message class -> its plain keys in sorted order and a getter of their values in that order
(``kind`` and ``v`` read ``KIND`` and ``VERSION``): filled once per class, on first use. Every
replica encodes the command of each write with a request id (its fingerprint), and calling
``dataclasses.fields`` and sorting for each message were most of that. Third and fourth: the keys
without the class's added fields, and those fields with their defaults."""


def _layout(cls: type) -> _Layout:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        fields = dataclasses.fields(cls)
        names = sorted([f.name for f in fields] + ["kind", "v"])
        attrs = ["KIND" if n == "kind" else "VERSION" if n == "v" else n for n in names]
        added_names = frozenset(getattr(cls, "ADDED", ()))
        added = tuple(sorted((f.name, f.default) for f in fields if f.name in added_names))
        short = tuple(n for n in names if n not in added_names)
        layout = _LAYOUTS[cls] = (tuple(names), operator.attrgetter(*attrs), short, added)
    return layout


def _plain_map(names: tuple[str, ...], values: tuple[Any, ...], added: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    plain = dict(zip(names, values, strict=True))
    for name, default in added:
        if plain[name] == default:
            del plain[name]  # an added field at its default is not written (see the module rules)
    return plain


def _to_plain(obj: Any) -> dict[str, Any]:
    names, values, _, added = _layout(type(obj))
    plain = _plain_map(names, values(obj), added)
    return {name: value.value if isinstance(value, StrEnum) else value for name, value in plain.items()}


def _from_plain(raw: Any, specs: dict[tuple[str, int], _Spec], what: str) -> Any:
    spec = _spec_of(raw, specs, what)
    obj = spec.build(raw)
    upgrade = _UPGRADES.get((raw["kind"], raw["v"])) if _UPGRADES else None  # none released yet
    return upgrade(obj) if upgrade else obj


def _spec_of(raw: Any, specs: dict[tuple[str, int], _Spec], what: str) -> _Spec:
    """The spec of a message map whose keys are all allowed, or the CodecError saying why not."""
    if type(raw) is not dict:
        raise CodecError(f"{what} must be a map, got {type(raw).__name__}")
    kind, version = raw.get("kind"), raw.get("v")
    if type(kind) is not str or type(version) is not int:
        raise CodecError(f"{what} has no kind/version")
    spec = specs.get((kind, version))
    if spec is None:
        raise CodecError(f"unknown {what} kind {kind!r} version {version!r}", kind=kind, version=version)
    if not raw.keys() <= spec.allowed:
        extra = sorted(map(str, raw.keys() - spec.allowed))
        raise CodecError(f"{kind} has unknown fields {extra}", kind=kind)
    return spec


_BYTES_TYPES = (bytes, bytearray, memoryview)


def _unpack(data: bytes) -> Any:
    if not isinstance(data, _BYTES_TYPES):
        raise CodecError("payload must be bytes")
    if len(data) > MAX_PAYLOAD_BYTES:
        raise CodecError(f"payload is {len(data)} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_str_len=MAX_PAYLOAD_BYTES,
            max_bin_len=0,
            max_array_len=4096,
            max_map_len=MAX_FIELDS,
            max_ext_len=0,
        )
    except msgpack.ExtraData as exc:
        raise CodecError("trailing bytes after the message") from exc
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise CodecError(f"not valid msgpack: {exc}") from exc


_ENCODER = msgspec.msgpack.Encoder()


def pack(plain: Any) -> bytes:
    """Plain values to msgpack: the same bytes as ``msgpack.packb(plain, use_bin_type=True)``,
    written about three times faster (a million-edge snapshot is ~140 MB)."""
    return _ENCODER.encode(plain)


# -- commands ----------------------------------------------------------------------------------


def command_to_plain(cmd: Command) -> dict[str, Any]:
    return _to_plain(cmd)


def command_from_plain(raw: Any) -> Command:
    return _from_plain(raw, _COMMAND_SPECS, "command")  # type: ignore[no-any-return]


_DECODED: tuple[Any, dict[str, Any]] = (None, {})
"""The command :func:`decode_envelope` decoded last and the map it was decoded from (private to
the decoder, never changed). A replica fingerprints each command right after decoding it; when
that map already holds every key in canonical order, packing it again gives the command's
canonical bytes (each value was checked to be exactly what the command holds, or an enum's
value or a list where the command holds the member or a tuple, which pack to the same bytes).
One entry, matched by identity: it can only return what the full encoding would."""


def encode_command(cmd: Command) -> bytes:
    names, values, short, added = _layout(type(cmd))
    decoded, plain = _DECODED
    if decoded is cmd:
        keys = tuple(plain)
        # canonical: every key in order, an added field only when it is not at its default
        if keys == short or (keys == names and all(plain[n] != d for n, d in added)):
            return pack(plain)
    # pack(_to_plain(cmd)) without converting enum members: the encoder writes a StrEnum member
    # as its value, which is what _to_plain converts it to, so the bytes are the same.
    if not added:
        return pack(dict(zip(names, values(cmd), strict=True)))
    return pack(_plain_map(names, values(cmd), added))


def decode_command(data: bytes) -> Command:
    return command_from_plain(_unpack(data))


def command_fingerprint(cmd: Command) -> bytes:
    """Short digest of a command's canonical bytes: tells a retry from a reused request id."""
    return hashlib.blake2b(encode_command(cmd), digest_size=8).digest()


def envelope_to_plain(env: Envelope) -> dict[str, Any]:
    return {
        "actor": env.actor,
        "at_ms": env.at_ms,
        "cmd": _to_plain(env.command),
        "kind": Envelope.KIND,
        "request_id": env.request_id,
        "v": Envelope.VERSION,
    }


_check_optional_str = _optional(_check_str)
_ENVELOPE_KEYS = frozenset({"actor", "at_ms", "cmd", "kind", "request_id", "v"})


def envelope_from_plain(raw: Any) -> Envelope:
    if type(raw) is not dict:
        raise CodecError("envelope must be a map")
    if raw.get("kind") != Envelope.KIND or raw.get("v") != Envelope.VERSION:
        raise CodecError(f"unknown envelope kind {raw.get('kind')!r} version {raw.get('v')!r}")
    if raw.keys() != _ENVELOPE_KEYS:
        raise CodecError(f"envelope fields must be {sorted(_ENVELOPE_KEYS)}")
    return Envelope(
        actor=_check_str(raw["actor"], "actor"),
        at_ms=_check_int(raw["at_ms"], "at_ms"),
        request_id=_check_optional_str(raw["request_id"], "request_id"),
        command=command_from_plain(raw["cmd"]),
    )


def encode_envelope(env: Envelope) -> bytes:
    return pack(envelope_to_plain(env))


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class CheckedEnvelope:
    """An envelope's canonical bytes and what :func:`decode_envelope` gives back for them, from
    :func:`check_envelope`: the proposing node applies ``envelope`` (:func:`adopt_checked`)
    instead of unpacking the bytes it has just packed; every other replica decodes ``data``."""

    data: bytes
    envelope: Envelope
    command_plain: dict[str, Any] | None
    """The command's map as ``data`` holds it (``_DECODED``'s fast path), None when unknown."""


def check_envelope(env: Envelope) -> CheckedEnvelope:
    """The envelope's canonical bytes (those of :func:`encode_envelope`) and their decoding, or
    the CodecError :func:`decode_envelope` would raise on them: a leader checks what it is about
    to propose without unpacking the bytes it has just packed. The checks run on the plain map the
    bytes are packed from, which is what unpacking them gives back (enum members are their values
    there, tuples pack as lists, and every field checker accepts both), so they accept exactly what
    a replica's decoder accepts and build the same values; the msgpack limits of :func:`_unpack`
    are looser than the field checks, except the payload's size, which is checked here too. A
    refusal is the decoder's own, word for word (a message may name the type a value arrives as:
    list, not tuple); a value the map check refuses and the decoder accepts (a tuple of enum
    members: the map holds the members, the bytes their values) is decoded from the bytes."""
    plain = envelope_to_plain(env)
    data = pack(plain)
    if len(data) > MAX_PAYLOAD_BYTES:
        raise CodecError(f"the command is {len(data)} bytes encoded; the limit is {MAX_PAYLOAD_BYTES}")
    try:
        checked = envelope_from_plain(plain)
    except CodecError:
        # raises what a replica raises; the replicas decide what applies
        return CheckedEnvelope(data, decode_envelope(data), None)
    return CheckedEnvelope(data, checked, plain["cmd"])


def encode_checked_envelope(env: Envelope) -> bytes:
    """:func:`check_envelope`'s bytes alone."""
    return check_envelope(env).data


def adopt_checked(checked: CheckedEnvelope) -> Envelope:
    """What :func:`decode_envelope` returns for ``checked.data``, without unpacking it (on the
    thread that applies: it also primes the fingerprint's fast path, as decoding does)."""
    global _DECODED
    env = checked.envelope
    plain = checked.command_plain
    if plain is not None and (not _UPGRADES or (plain["kind"], plain["v"]) not in _UPGRADES):
        _DECODED = (env.command, plain)
    return env


def decode_envelope(data: bytes) -> Envelope:
    global _DECODED
    raw = _unpack(data)
    env = envelope_from_plain(raw)
    plain = raw["cmd"]
    if not _UPGRADES or (plain["kind"], plain["v"]) not in _UPGRADES:  # else not built from this map
        _DECODED = (env.command, plain)
    return env


# -- effects and outcomes ----------------------------------------------------------------------


def effect_to_plain(fx: Effect) -> dict[str, Any]:
    return _to_plain(fx)


def effect_from_plain(raw: Any) -> Effect:
    return _from_plain(raw, _EFFECT_SPECS, "effect")  # type: ignore[no-any-return]


def outcome_to_plain(out: Outcome) -> list[Any]:
    return [
        out.result.value,
        [_to_plain(fx) for fx in out.effects],
        out.code,
        out.status.value if out.status is not None else None,
        out.message,
        {k: (v.value if isinstance(v, StrEnum) else v) for k, v in sorted(out.fields.items())},
        out.duplicate,
    ]


def outcome_from_plain(raw: Any) -> Outcome:
    try:
        result, effects, code, status, message, fields, duplicate = raw
        # Exact shape only: a map with seven keys would unpack too, and dict() accepts a list of pairs.
        if type(raw) is not list or type(effects) is not list or type(fields) is not dict:
            raise CodecError("an outcome is [result, [effect...], code, status, message, {field: value}, duplicate]")
        return Outcome(
            Result(result),
            tuple(effect_from_plain(fx) for fx in effects),
            _check_str(code, "code"),
            Status(status) if status is not None else None,
            _check_str(message, "message"),
            dict(fields),
            _check_bool(duplicate, "duplicate"),
        )
    except CodecError:
        raise
    except (TypeError, ValueError) as exc:
        raise CodecError(f"malformed outcome: {exc}") from exc


def encode_outcome(out: Outcome) -> bytes:
    return pack(outcome_to_plain(out))


def decode_outcome(data: bytes) -> Outcome:
    return outcome_from_plain(_unpack(data))


def command_class(kind: str) -> type[Command]:
    """The newest class of a command kind (the transcript runner parses against it)."""
    versions = [v for (k, v) in _COMMAND_SPECS if k == kind]
    if not versions:
        raise CodecError(f"unknown command kind {kind!r}")
    cls: type[Command] = _COMMAND_SPECS[(kind, max(versions))].cls
    return cls


def field_types(cls: type) -> dict[str, Any]:
    hints: dict[str, Any] = typing.get_type_hints(cls)
    return hints
