"""cluster/node/collector.py's settings, in a fresh interpreter (they are process-wide): what
survives a collection of generation 1 joins the permanent generation, so no later collection walks
it again (issue #38: those walks were the long Raft ticks); garbage without cycles is still freed."""

from __future__ import annotations

import subprocess
import sys

from .harness import REPO

PROGRAM = """
import gc, weakref
from waitgraph.node.collector import GC_THRESHOLDS, tune_gc

tune_gc()
assert gc.get_threshold() == GC_THRESHOLDS
frozen_at_start = gc.get_freeze_count()

class Record:
    pass

state = [Record() for _ in range(50_000)]          # long-lived, like the replicated state
gc.collect(1)
assert gc.get_freeze_count() >= frozen_at_start + 50_000, (frozen_at_start, gc.get_freeze_count())
assert gc.get_count()[1] == 0 and len(gc.get_objects(2)) == 0   # nothing left for a full walk

probe = weakref.ref(state[0])
del state                                            # no cycle: reference counting frees it
assert probe() is None
print("ok")
"""


def test_survivors_of_an_older_collection_are_frozen_and_acyclic_garbage_is_still_freed() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
