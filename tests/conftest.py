"""Hypothesis profiles for the whole suite.

``ci`` (the default) keeps property tests quick and reproducible to report: no per-example
deadline (a shared CI runner is noisy) and the failing example's blob printed. Choose another with
``HYPOTHESIS_PROFILE=thorough``; ``WAITGRAPH_PROPERTY_SCALE=N`` multiplies the example counts of the
core's property tests (tests/strategies.py ``examples``).
"""

from __future__ import annotations

import os

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
