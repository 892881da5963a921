"""A faster ``__init__`` for the frozen, slotted dataclasses every write builds.

A frozen dataclass's generated ``__init__`` stores each field with ``object.__setattr__(self,
name, value)``: a global lookup, an attribute lookup and a generic setattr that finds the slot's
descriptor again, per field, for every command, effect, envelope and outcome of every write on
every replica (on a follower under the SDK's load, building these was 9-16% of its Python
time). :func:`fast_init` replaces that ``__init__`` with one of the same signature that
calls each slot descriptor's ``__set__`` directly: the same values land in the same slots, the
instance stays frozen (``__setattr__`` still refuses), and a wrong call raises the same
``TypeError``. Classes it does not cover (a ``__post_init__``, ``init=False`` or ``InitVar``
fields, no slots, a field named like the generated function's own names) are refused at import
time rather than built differently.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

ORIGINAL_INITS: dict[type, Callable[..., None]] = {}
"""Class -> the ``__init__`` dataclasses generated for it (the tests build with both)."""


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"  # as dataclasses shows it: the signatures print alike


_FACTORY = _Factory()
"""Default of a parameter whose field has a ``default_factory`` (called when it is passed)."""

_PREFIX = "_fastinit_"
"""The generated function's own names (setters, defaults, factories) start with this; a field
that does too is refused, as it would shadow them."""


def _refuse(cls: type, why: str) -> TypeError:
    return TypeError(f"fast_init({cls.__name__}): {why}")


def _shape(init: Callable[..., None]) -> list[tuple[str, Any, bool]]:
    """(name, kind, has a default) of each parameter."""
    return [(p.name, p.kind, p.default is not p.empty) for p in inspect.signature(init).parameters.values()]


def slot_setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    """The ``__set__`` of field ``name``'s slot on ``cls`` (what stores it, bypassing the frozen
    ``__setattr__``); TypeError when the field is not a slot."""
    descriptor: Any = cls.__dict__.get(name)
    if not hasattr(descriptor, "__set__"):
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    setter: Callable[[Any, Any], None] = descriptor.__set__
    return setter


def fast_init(cls: T) -> T:
    """Give ``cls`` (a frozen dataclass with slots) an ``__init__`` that sets its slots directly."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise _refuse(cls, "not a frozen dataclass")
    if "__slots__" not in cls.__dict__:
        raise _refuse(cls, "no slots")
    if hasattr(cls, "__post_init__"):
        raise _refuse(cls, "has __post_init__")
    if cls in ORIGINAL_INITS:
        return cls
    fields = dataclasses.fields(cls)
    namespace: dict[str, Any] = {f"{_PREFIX}factory": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for i, f in enumerate(fields):
        if not f.init:
            raise _refuse(cls, f"field {f.name!r} has init=False")
        if f.name.startswith(_PREFIX) or f.name == "self":
            raise _refuse(cls, f"field {f.name!r} would shadow a name of the generated __init__")
        setter, default, factory = f"{_PREFIX}set{i}", f"{_PREFIX}default{i}", f"{_PREFIX}make{i}"
        namespace[setter] = slot_setter(cls, f.name)
        param = f.name
        value = f.name
        if f.default is not dataclasses.MISSING:
            namespace[default] = f.default
            param = f"{f.name}={default}"
        elif f.default_factory is not dataclasses.MISSING:
            namespace[factory] = f.default_factory
            param = f"{f.name}={_PREFIX}factory"
            value = f"{factory}() if {f.name} is {_PREFIX}factory else {f.name}"
        (keyword if f.kw_only else positional).append(param)
        body.append(f"    {setter}(self, {value})")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({signature}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, namespace)  # generated from the class's own field names, as dataclasses does
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    original: Callable[..., None] = cls.__dict__["__init__"]
    if _shape(init) != _shape(original):  # an InitVar, or a dataclasses feature not covered here
        raise _refuse(cls, "its generated signature differs from the dataclass's")
    ORIGINAL_INITS[cls] = original
    cls.__init__ = init  # type: ignore[misc]
    return cls
