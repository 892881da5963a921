"""The node's policy for Python's cyclic garbage collector.

The collector's settings are process-wide, so they are the shell's to decide, never the core's:
the core only pauses the collector during a bulk pass and puts back what it found.

- :func:`tune_gc`: once the node has started, everything alive goes to the permanent generation
  and generation 0 is collected less often; after every older collection its survivors go there
  too, and a collection over 100 ms is logged (issue #38: those walks were the long Raft ticks).
- :func:`restore_frozen`: a state restored while serving (a dump received from the leader, a
  restart) goes to the permanent generation as it is built.
"""

from __future__ import annotations

import gc
import logging
import time

from waitgraph.statemachine import StateMachine

logger = logging.getLogger(__name__)

__all__ = ["GC_THRESHOLDS", "restore_frozen", "tune_gc"]

GC_THRESHOLDS = (10_000, 2, 10)
"""The collector's thresholds in a serving node (Python's default: 700, 10, 10). A write allocates
a few hundred container objects on every node (the envelope, the command, the outcome, protobuf
and gRPC's own), none in a reference cycle that outlives it, so the default collects generation 0
every few writes; it was ~8% of a follower's time under load (issue #20). Generation 1 is
collected every second young collection, then frozen (:func:`_after_collection`): no collection
walks more than two young generations' survivors (~20,000 objects)."""


def tune_gc() -> None:
    """Once the node has started: everything alive now (modules, a restored state, the servers)
    lives as long as the process, so it goes to the permanent generation and no collection walks
    it again; then the node's thresholds, and :func:`_after_collection`. No ``gc.collect()``
    first: it holds the GIL, so the Raft thread waits, for a walk of every object just as the node
    joins the cluster; the little start-up garbage it would free stays (``gc.freeze`` itself only
    moves list heads)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    if _after_collection not in gc.callbacks:
        gc.callbacks.append(_after_collection)


GC_PAUSE_LOGGED_S = 0.1
"""A collection longer than this is logged: it held the GIL, so the Raft thread stood still."""
_gc_started: list[float] = [0.0]


def _after_collection(phase: str, info: dict[str, int]) -> None:
    """Shorten every later collection's walk, and say when one was long anyway.

    A collection holds the GIL for its whole walk, whichever thread triggered it, so the Raft
    thread stands still meanwhile, heartbeats included (issue #38). Under a soak the walks were
    the long Raft ticks: generation-1 collections of 450-650 ms and full ones of 2.1-3.4 s on a
    loaded 2-core machine, every one finding nothing to free (``collected`` 0): what survives a
    young collection here is the replicated state (records that hold no cycles, freed by reference
    counting) and the servers' long-lived objects. So after each collection of generation 1 or 2
    the survivors join the permanent generation (``gc.freeze``, as :func:`tune_gc` does at start):
    no later collection walks them again, and a full one walks only what survived since. What it
    gives up: a reference cycle among frozen objects that becomes garbage later is not collected
    (none was found in the soak's collections); objects without cycles are freed as before."""
    if phase == "start":
        _gc_started[0] = time.perf_counter()
        return
    took = time.perf_counter() - _gc_started[0]
    if info.get("generation", 0) >= 1:
        gc.freeze()
    if took > GC_PAUSE_LOGGED_S:
        logger.warning(
            "a garbage collection of generation %d took %.0f ms (%d collected)",
            info.get("generation", -1),
            took * 1000,
            info.get("collected", 0),
        )


def restore_frozen(machine: StateMachine, data: bytes) -> None:
    """``machine.restore(data)``, with the restored state moved to the permanent generation before
    the collector runs again.

    A restored state is long-lived and holds no reference cycles (records point only at strings,
    numbers and their own containers; it is freed by reference counting). Everything it is made of
    was allocated with the collector paused, so the first collection after the pause would walk
    it all, and every later one again: about 1.6 s at a million edges right after the restore
    alone. Frozen while the collector is still paused, no collection ever walks it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        machine.restore(data)
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
