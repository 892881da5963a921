"""statemachine/fastinit.py: the slot-setting ``__init__`` builds exactly what dataclasses' would."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest

from waitgraph.node.events import Event
from waitgraph.statemachine import Envelope, Outcome
from waitgraph.statemachine.commands import COMMANDS
from waitgraph.statemachine.effects import EFFECTS
from waitgraph.statemachine.fastinit import ORIGINAL_INITS, fast_init

COVERED = sorted(ORIGINAL_INITS, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_every_class_a_write_builds_is_covered() -> None:
    assert set(COMMANDS) | set(EFFECTS) | {Envelope, Outcome, Event} <= set(ORIGINAL_INITS)


def _built_by(init: Any, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    obj = object.__new__(cls)
    init(obj, *args, **kwargs)
    return obj


def _call(params: list[inspect.Parameter], value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments for ``params``, each a distinct object (from ``value``), as the signature wants them."""
    args = tuple(value(p.name) for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)
    kwargs = {p.name: value(p.name) for p in params if p.kind is p.KEYWORD_ONLY}
    return args, kwargs


@pytest.mark.parametrize("cls", COVERED, ids=lambda c: c.__name__)
def test_the_same_signature_and_the_same_slots_as_the_dataclass_init(cls: type) -> None:
    original = ORIGINAL_INITS[cls]
    new_params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    old_params = list(inspect.signature(original).parameters.values())[1:]
    assert [(p.name, p.kind, p.default is p.empty) for p in new_params] == [
        (p.name, p.kind, p.default is p.empty) for p in old_params
    ]
    names = [f.name for f in dataclasses.fields(cls)]

    # every field passed: each slot holds the very object passed for it
    marks = {name: object() for name in names}
    args, kwargs = _call(new_params, marks.__getitem__)
    fast = cls(*args, **kwargs)
    slow = _built_by(original, cls, args, kwargs)
    for name in names:
        assert getattr(fast, name) is marks[name] is getattr(slow, name), name

    # only the required ones: the defaults are the dataclass's (a fresh one per instance from a factory)
    required = [p for p in new_params if p.default is p.empty]
    args, kwargs = _call(required, marks.__getitem__)
    fast, slow = cls(*args, **kwargs), _built_by(original, cls, args, kwargs)
    for f in dataclasses.fields(cls):
        a, b = getattr(fast, f.name), getattr(slow, f.name)
        assert type(a) is type(b) and a == b, f.name
        if f.default_factory is not dataclasses.MISSING:
            assert a is not b and a is not getattr(cls(*args, **kwargs), f.name), f.name

    if names:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(fast, names[0], 1)


@pytest.mark.parametrize("cls", COVERED, ids=lambda c: c.__name__)
def test_a_wrong_call_raises_what_the_dataclass_init_raises(cls: type) -> None:
    original = ORIGINAL_INITS[cls]

    def error(call: Any) -> str:
        with pytest.raises(TypeError) as info:
            call()
        return str(info.value).replace(f"{cls.__qualname__}.__init__()", "__init__()")

    required = [p for p in inspect.signature(original).parameters.values() if p.default is p.empty][1:]
    if required:
        assert error(lambda: cls()) == error(lambda: original(object.__new__(cls)))
    names = {p.name: None for p in inspect.signature(original).parameters.values()}
    names.pop("self")
    bogus = {**names, "no_such_field": 1}
    assert error(lambda: cls(**bogus)) == error(lambda: original(object.__new__(cls), **bogus))


def test_what_it_does_not_cover_is_refused_at_import() -> None:
    @dataclass(frozen=True, slots=True)
    class Post:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(slots=True)
    class Thawed:
        a: int

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(frozen=True, slots=True)
    class Hidden:
        a: int
        b: int = field(init=False, default=0)

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        scale: InitVar[int] = 1

    @dataclass(frozen=True, slots=True)
    class Shadowing:
        _fastinit_set0: int

    for cls, why in [
        (Shadowing, "would shadow"),
        (Post, "__post_init__"),
        (Thawed, "not a frozen dataclass"),
        (NoSlots, "no slots"),
        (Hidden, "init=False"),
        (WithInitVar, "signature differs"),
    ]:
        with pytest.raises(TypeError, match=why):
            fast_init(cls)
        assert cls not in ORIGINAL_INITS


def test_positional_and_keyword_fields_keep_their_order() -> None:
    @dataclass(frozen=True, slots=True)
    class Mixed:
        a: int
        b: str = "b"
        c: list[int] = field(default_factory=list)
        d: int = field(kw_only=True, default=4)
        e: int = field(kw_only=True)

    original = Mixed.__init__
    fast_init(Mixed)
    try:
        assert str(inspect.signature(Mixed.__init__)) == "(self, a, b='b', c=<factory>, *, d=4, e)"
        assert Mixed(1, e=5).c == [] and Mixed(1, e=5).c is not Mixed(1, e=5).c
        assert Mixed(1, e=5) == _built_by(original, Mixed, (1,), {"e": 5})
        assert Mixed(1, "x", [2], d=3, e=5) == _built_by(original, Mixed, (1, "x", [2]), {"d": 3, "e": 5})
    finally:
        ORIGINAL_INITS.pop(Mixed, None)
