"""Labelled metrics counters kept in the replicated ``State.counters``.

Rules kept here:
- A labelled counter's key is ``name{label=value,...}`` with the labels sorted by name, so equal
  observations give equal keys on every replica and the snapshot stays canonical.
- Every label value comes from a closed vocabulary (an enum, a fixed code, a generation bucket):
  never a run, agent, execution, target or artifact id and never free text, so the number of
  keys is bounded whatever the number of runs. :func:`key` refuses anything else.
- The generation bucket is defined here once; the exporter (cluster/node/metrics.py) reads these keys
  back with :func:`parse` and never invents a bucket of its own.
"""

from __future__ import annotations

from .state import State

GENERATION_BUCKETS = ("1", "2", "3-5", "6+")
"""An execution's attempt generation, bucketed: first attempt, first retry, a few, many."""

COST_BOUNDS = (0, 10, 100, 1_000, 10_000, 100_000)
"""Upper bounds of the victim-cost histogram (``cost_consumed``, in the caller's cost unit)."""

_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+")


def generation_bucket(generation: int) -> str:
    """``1``, ``2``, ``3-5`` or ``6+`` (a generation below 1 does not exist; it counts as ``1``)."""
    if generation <= 1:
        return "1"
    if generation == 2:
        return "2"
    return "3-5" if generation <= 5 else "6+"


def key(name: str, **labels: str) -> str:
    """The counter key of ``name`` with ``labels`` (sorted); values must be short codes."""
    for value in labels.values():
        if not value or len(value) > 64 or not _LABEL_CHARS.issuperset(value):
            raise ValueError(f"label value {value!r} of {name} is not a bounded code")
    inner = ",".join(f"{k}={labels[k]}" for k in sorted(labels))
    return f"{name}{{{inner}}}"


def parse(counter: str) -> tuple[str, dict[str, str]] | None:
    """``(name, labels)`` of a labelled key, None for a plain counter."""
    name, brace, rest = counter.partition("{")
    if not brace or not rest.endswith("}"):
        return None
    labels: dict[str, str] = {}
    for pair in rest[:-1].split(","):
        k, _, v = pair.partition("=")
        labels[k] = v
    return name, labels


def bump(st: State, name: str, by: int = 1, **labels: str) -> None:
    st.bump(key(name, **labels), by)


def observe(st: State, name: str, value: int, bounds: tuple[int, ...], **labels: str) -> None:
    """One observation of a histogram: its (non-cumulative) bucket, count and sum, each a counter
    ``name.le_<bound>{labels}`` / ``name.count{labels}`` / ``name.sum{labels}``."""
    bucket = next((f"le_{b}" for b in bounds if value <= b), "le_inf")
    st.bump(key(f"{name}.{bucket}", **labels))
    st.bump(key(f"{name}.count", **labels))
    st.bump(key(f"{name}.sum", **labels), value)
