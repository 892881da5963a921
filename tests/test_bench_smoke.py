"""The benchmark scripts run (on tiny sizes) and print their tables.

Benchmarks assert nothing about speed; this only keeps them from rotting when commands change
(a benchmark that no longer runs is a figure nobody can reproduce).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("script", "args", "expect"),
    [
        ("bench_core.py", ["--edges", "2000", "--ops", "2000"], "applies/s"),
        ("bench_detect.py", ["--sizes", "2000", "--adds", "50"], "incr"),
        ("bench_cancel.py", ["--sizes", "200", "--repeat", "1"], "CancelRun"),
        ("bench_liveview.py", ["--sizes", "50", "--repeat", "1"], "under the lock"),
        ("bench_apply.py", ["--rounds", "2", "--repeat", "1"], "RegisterWait (re-register)"),
        ("bench_retention.py", ["--executions", "3000", "--step", "1000"], "too_many_executions: 0"),
    ],
)
def test_benchmark_script_runs(script: str, args: list[str], expect: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *args],
        capture_output=True,
        text=True,
        timeout=230,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert expect in done.stdout, done.stdout[-2000:]
