"""Figures 1 and 2 of ``scripts/bench cluster`` in this checkout and another, alternating (issue 20).

Prints tables; asserts nothing. Usage: scripts/bench alternate --against CHECKOUT [--runs 6]
[--seconds 10] [--samples 100] [--smoke]

A change to the write path moves figures by less than this machine drifts in an hour (the same
code gives 2,900-4,400 writes/s from one run to the next), so one run before and one after say
little. This runs ``scripts/bench cluster --quick`` figure 2 alone (64 agents in 4 SDK processes
sharing one Client each, WriteBatch, RegisterWait + CloseWait, 3 durable nodes) in this checkout
and in ``CHECKOUT`` (another clone or worktree with its own ``.venv``, as ``scripts/_venv`` makes
it: each side runs its own benchmark and nodes from its own code and install), ``--runs``
times each, swapping which goes first every time, and prints each run's writes/s and CPU per
write of the leader, a follower (mean of two) and the SDK processes, and figure 1's lone unary
RegisterWait p50 and p99 (``--samples`` of them, one at a time, at the leader), then the
medians. Runs in which the cluster printed no figure 2 (an election under load, say) are listed
and left out.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
_FIG2 = re.compile(
    r"- 2: to n\d for ([\d.]+)s: (\d+) registrations, (\d+) closes.*?CPU in cores \(\* = leader\): (.*?) \(sum"
)
_FIG1 = re.compile(r"^\| 1 \| unary RegisterWait at the leader, (p50|p99)[^|]*\| ([\d.]+) ms", re.MULTILINE)
FIGURES = ("writes/s", "leader ms", "follower ms", "sdk ms", "total ms", "lone p50 ms", "lone p99 ms")


def figures(stdout: str) -> dict[str, float] | None:
    """Figure 2's writes/s and CPU per write by process kind, from ``bench cluster``'s details, and
    figure 1's p50 and p99 from its table."""
    m = _FIG2.search(stdout)
    if m is None:
        return None
    seconds, writes = float(m.group(1)), int(m.group(2)) + int(m.group(3))
    cores = m.group(4)
    leader = float(re.search(r"n\d\* ([\d.]+)", cores).group(1))  # type: ignore[union-attr]
    followers = [float(v) for v in re.findall(r"n\d ([\d.]+)", cores)]
    sdk = float(re.search(r"sdk x\d+ ([\d.]+)", cores).group(1))  # type: ignore[union-attr]
    rate = writes / seconds
    per = 1e3 / rate
    lone = {f"lone {q} ms": float(v) for q, v in _FIG1.findall(stdout)}
    if len(lone) != 2:
        return None  # figure 1 failed (its row says why)
    return lone | {
        "writes/s": rate,
        "leader ms": leader * per,
        "follower ms": statistics.mean(followers) * per,
        "sdk ms": sdk * per,
        "total ms": (leader + sum(followers) + sdk) * per,
    }


def run(checkout: str, seconds: float, samples: int, smoke: bool) -> tuple[dict[str, float] | None, str]:
    python = os.path.join(checkout, ".venv", "bin", "python")
    if not os.path.exists(python):
        raise SystemExit(f"{checkout} has no .venv (run its scripts/bench once, or scripts/test, to make one)")
    args = [python, "scripts/bench_cluster.py", "--no-raw", "--no-unary", "--etcd", "off", "--handoff", "off"]
    args += ["--smoke"] if smoke else ["--quick", "--seconds", str(seconds)]
    args += ["--recovery-trials", "0", "--failover-trials", "0", "--soak-s", "0", "--samples", str(samples)]
    done = subprocess.run(args, cwd=checkout, capture_output=True, text=True)
    return figures(done.stdout), done.stderr[-500:]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--against", required=True, help="another checkout (clone or worktree) with scripts/bench")
    p.add_argument("--runs", type=int, default=6, help="runs per checkout (default 6)")
    p.add_argument("--seconds", type=float, default=10.0, help="figure 2's duration per run (default 10)")
    p.add_argument("--samples", type=int, default=100, help="figure 1's lone writes per run (default 100)")
    p.add_argument("--smoke", action="store_true", help="tiny runs (tests/test_bench_smoke.py); figures mean nothing")
    args = p.parse_args()
    sides = {"this checkout": ROOT, "against": os.path.abspath(args.against)}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    lost: list[str] = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    for i in range(args.runs):
        for name in list(sides) if i % 2 == 0 else list(sides)[::-1]:
            got, err = run(sides[name], args.seconds, args.samples, args.smoke)
            if got is None:
                lost.append(f"{name}, run {i + 1}: {err.strip().splitlines()[-1] if err.strip() else 'no figure 2'}")
            else:
                rows[name].append(got)
            print(f"... {name} run {i + 1}: {got}", file=sys.stderr, flush=True)
    print(f"## Figures 1 and 2 alternated between two checkouts ({started}, load average {load:.2f} before)")
    print()
    print(f"- this checkout: {ROOT}; against: {sides['against']}; {args.runs} runs each, first side swapped every run")
    print()
    print("| checkout | run | " + " | ".join(FIGURES) + " |")
    print("|---|---:|" + "---:|" * len(FIGURES))
    for name, rs in rows.items():
        for k, r in enumerate(rs, 1):
            print(f"| {name} | {k} | " + " | ".join(_cell(f, r[f]) for f in FIGURES) + " |")
    for name, rs in rows.items():
        if rs:
            med = {f: statistics.median(r[f] for r in rs) for f in FIGURES}
            print(f"| **{name}, median** | {len(rs)} | " + " | ".join(_cell(f, med[f]) for f in FIGURES) + " |")
    for line in lost:
        print(f"- no figure 2: {line}")


def _cell(figure: str, value: Any) -> str:
    if figure == "writes/s":
        return f"{value:,.0f}"
    return f"{value:.2f}" if figure.startswith("lone") else f"{value:.3f}"


if __name__ == "__main__":
    main()
