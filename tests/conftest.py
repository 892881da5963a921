"""Hypothesis profiles for the whole suite, and gRPC's fork handlers off as in a node.

In-process Raft nodes fork to write their log-compaction dumps (cluster/node/raft/_compaction.py). ``waitgraph
serve`` turns gRPC's fork handlers off before it imports grpc (cluster/ops/cli.py); the test process
must do the same, or a child forked while gRPC threads run gets them restarted by gRPC's atfork
handler, closes their descriptors and aborts (seen in CI: the forked dump writer died of SIGABRT).

``ci`` (the default) keeps property tests quick and reproducible to report: no per-example
deadline (a shared CI runner is noisy) and the failing example's blob printed. Choose another with
``HYPOTHESIS_PROFILE=thorough``; ``WAITGRAPH_PROPERTY_SCALE=N`` multiplies the example counts of the
core's property tests (tests/strategies.py ``examples``).
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # before anything imports grpc

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    parent=settings.get_profile("ci"),
    max_examples=1000,
    stateful_step_count=100,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
