"""The node's policy for Python's cyclic garbage collector.

The collector's settings are process-wide, so they are the shell's to decide, never the core's:
the core only pauses the collector during a bulk pass and puts back what it found.

- :func:`tune_gc`: once the node has started, everything alive goes to the permanent generation
  and generation 0 is collected less often.
- :func:`restore_frozen`: a state restored while serving (a dump received from the leader, a
  restart) goes to the permanent generation as it is built.
"""

from __future__ import annotations

import gc

from waitgraph.statemachine import StateMachine

__all__ = ["GC_THRESHOLDS", "restore_frozen", "tune_gc"]

GC_THRESHOLDS = (10_000, 10, 10)
"""The collector's thresholds in a serving node (Python's default: 700, 10, 10). A write allocates
a few hundred container objects on every node (the envelope, the command, the outcome, protobuf
and gRPC's own), none in a reference cycle that outlives it, so the default collects generation 0
every few writes; it was ~8% of a follower's time under load (issue #20)."""


def tune_gc() -> None:
    """Once the node has started: everything alive now (modules, a restored state, the servers)
    lives as long as the process, so it goes to the permanent generation and no collection walks
    it again; then the node's thresholds. No ``gc.collect()`` first: it holds the GIL, so the Raft
    thread waits, for a walk of every object just as the node joins the cluster; the little
    start-up garbage it would free stays (``gc.freeze`` itself only moves list heads)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


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
