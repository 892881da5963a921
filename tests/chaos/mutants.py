"""Mutation testing of the chaos run: realistic bugs, planted one at a time, each must be caught.

    scripts/mutants [--duration 120] [--seed 7] [--only name,name] [--nemeses a,b] [--no-unit] [--list]

Rules kept here:
- A mutant is a small patch (exact text replacements, each of which must match exactly once, so
  the catalogue fails loudly when the code it names moves) applied to a temporary copy of the
  tree: the files git tracks or would track, copied to a temporary directory. The checkout is
  never touched. The copy is imported through its own ``build/typecheck/waitgraph`` view
  (``scripts/typecheck_view.py``, symlinks into the copy) put first on ``PYTHONPATH``: the
  editable install's import hook comes after ``sys.path``, so the copy's modules win, in the
  driver and in every node process it starts (the check below proves it per mutant).
- Each mutant runs the seeded chaos run (``python -m tests.chaos.runner``, the same run CI makes)
  and, unless ``--no-unit``, the checker unit tests on synthetic histories
  (``tests/chaos/test_checkers.py`` without its two end-to-end cluster tests). Caught means the
  chaos run failed with an invariant violation; a harness error alone (a node that would not
  start, a cluster that did not converge) is reported as such, and a run that passed is missed.
- First the unmutated copy runs the same chaos run (the control): a control that fails makes
  every "caught" meaningless, so the sweep stops there.
- The table: mutant, layer, caught or missed, by which check (the first anomaly's invariant and
  how many invariants fired), time to detection (seconds into the run of the first anomaly), the
  unit tests' verdict and the run's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutant:
    name: str
    layer: str
    """apply (the core's apply, statemachine/), node, SDK or service (the gRPC layer)."""
    bug: str
    file: str
    edits: tuple[tuple[str, str], ...]
    """(old, new) replacements in ``file``; each ``old`` occurs exactly once."""


CATALOGUE: tuple[Mutant, ...] = (
    Mutant(
        "release-before-epoch",
        "apply",
        "the victim's holdings are released before the epoch is committed, earlier in the same apply",
        "statemachine/recovery.py",
        (
            (
                "    # 1. the epoch, before anything is released\n    rb.epoch += 1\n",
                "    for held in sorted(st.satisfies.get(victim, ())):\n"
                "        if victim in st.targets[held].holders:\n"
                '            release_holding(ctx, st.targets[held], victim, "rolled_back")\n'
                "    rb.epoch += 1\n",
            ),
        ),
    ),
    Mutant(
        "victim-not-fenced",
        "apply",
        "a rolled-back victim is not fenced at the new epoch (StaleEpoch never raised for it)",
        "statemachine/recovery.py",
        (
            (
                '    set_status(ctx, ex, next_status(ex, Event.VICTIM), f"victim:{d.decision_id}")\n'
                "    book(st).fence[execution_id] = epoch\n",
                '    set_status(ctx, ex, next_status(ex, Event.VICTIM), f"victim:{d.decision_id}")\n',
            ),
        ),
    ),
    Mutant(
        "fence-off-by-one",
        "apply",
        "the StaleEpoch check accepts the epoch just below the rollback epoch",
        "statemachine/recovery.py",
        (("    if observed_epoch < fenced:\n", "    if observed_epoch < fenced - 1:\n"),),
    ),
    Mutant(
        "stale-close-closes-newer-edge",
        "apply",
        "CloseWait from an older generation closes whatever edge is open (the generation check dropped)",
        "statemachine/machine.py",
        (
            (
                "    if cmd.waiter_generation < ex.generation:\n"
                '        return noop("stale_generation", f"g{cmd.waiter_generation} of {ex.execution_id} '
                'is an old attempt")\n'
                "    check_current(ex, cmd.waiter_generation)\n"
                "    edge = st.wait(ex.execution_id, cmd.target_id)\n",
                "    edge = st.wait(ex.execution_id, cmd.target_id)\n",
            ),
        ),
    ),
    Mutant(
        "stale-register-replaces-edge",
        "apply",
        "RegisterWait does not check the waiter's generation: an old attempt replaces the new one's edge",
        "statemachine/machine.py",
        (
            (
                "    check_current(ex, cmd.waiter_generation)\n"
                "    existing = st.wait(ex.execution_id, cmd.target_id)\n",
                "    existing = st.wait(ex.execution_id, cmd.target_id)\n",
            ),
        ),
    ),
    Mutant(
        "idempotency-bypassed",
        "apply",
        "a repeated request id is applied again instead of answered from the idempotency table",
        "statemachine/machine.py",
        (("            seen = st.idempotency.get(key)\n", "            seen = None\n"),),
    ),
    Mutant(
        "restore-forgets-epoch",
        "apply",
        "State.restore leaves the epoch at 0: a node restored from a dump restarts the epoch",
        "statemachine/recovery_state.py",
        (('        book.epoch = raw["epoch"]\n', "        book.epoch = 0\n"),),
    ),
    Mutant(
        "restore-forgets-fences",
        "apply",
        "State.restore drops the rollback fences: after a restore a victim may acquire under its old epoch",
        "statemachine/recovery_state.py",
        (('        book.fence = {e: ep for e, ep in raw["fence"]}\n', "        book.fence = {}\n"),),
    ),
    Mutant(
        "yield-not-fenced",
        "apply",
        "a tie-break's yielder is not fenced at the new epoch",
        "statemachine/recovery.py",
        (
            (
                "    ex = st.executions[execution_id]\n"
                "    book(st).fence[execution_id] = epoch\n"
                "    ctx.fx.append(Yielded(",
                "    ex = st.executions[execution_id]\n    ctx.fx.append(Yielded(",
            ),
        ),
    ),
    Mutant(
        "settle-keeps-holdings",
        "apply",
        "a cancelled execution settles without ending its attempt: it keeps its permits and waits",
        "statemachine/cancel.py",
        (
            (
                "    end_attempt(ctx, ex, end_reason)\n    set_status(ctx, ex, nxt, cause)\n",
                "    set_status(ctx, ex, nxt, cause)\n",
            ),
        ),
    ),
    Mutant(
        "fresh-read-without-barrier",
        "node",
        "a read asked fresh is served from the local replica without the log barrier",
        "cluster/node/raft/_node.py",
        (
            (
                "        await self.barrier()\n"
                "        got = await self.read_local(fn)\n"
                "        return Read(got.value, False,",
                "        got = await self.read_local(fn)\n        return Read(got.value, False,",
            ),
        ),
    ),
    Mutant(
        "restore-drops-idempotency",
        "node",
        "a node that loads a dump starts with an empty idempotency table",
        "cluster/node/raft/_compaction.py",
        (
            (
                '            restore_frozen(fresh, doc["state"])\n',
                '            restore_frozen(fresh, doc["state"])\n            fresh.state.idempotency.clear()\n',
            ),
        ),
    ),
    Mutant(
        "joiner-ignores-snapshot",
        "node",
        "a node brought up by the leader's dump (a member added at runtime) keeps its own empty state",
        "cluster/node/raft/_compaction.py",
        (
            (
                "            self._machine.state = fresh.state\n",
                "",
            ),
        ),
    ),
    Mutant(
        "journal-repeats-duplicates",
        "node",
        "the event journal records the effects of a duplicate answered from the idempotency table again",
        "cluster/node/events.py",
        (("        if out.effects and not out.duplicate:\n", "        if out.effects:\n"),),
    ),
    Mutant(
        "sdk-new-request-id-on-retry",
        "SDK",
        "the transport retries a write with a new request id (the retry is a second write)",
        "cluster/sdk/connection.py",
        (
            (
                "        async def attempt(address: str, timeout: float) -> Any:\n"
                "            if self.batching.enabled:\n"
                "                try:\n"
                "                    result = await self._batcher(address).submit(item)\n",
                "        tries = [0]\n\n"
                "        async def attempt(address: str, timeout: float) -> Any:\n"
                "            tries[0] += 1\n"
                "            if tries[0] > 1:\n"
                "                request.request_id = new_request_id()\n"
                "            if self.batching.enabled:\n"
                "                try:\n"
                "                    result = await self._batcher(address).submit(\n"
                "                        convert.write_item(rpc, request, authorization)\n"
                "                    )\n",
            ),
        ),
    ),
    Mutant(
        "sdk-loses-duplicate-flag",
        "SDK",
        "the client's outcome never says duplicate: a retry answered from the table looks like a first application",
        "cluster/wire/convert.py",
        (
            (
                "        dict(msg.fields),\n        msg.duplicate,\n    )\n",
                "        dict(msg.fields),\n        False,\n    )\n",
            ),
        ),
    ),
    Mutant(
        "service-drops-request-id",
        "service",
        "the gateway builds the envelope without the request id: no write is idempotent",
        "cluster/node/service.py",
        (
            (
                "request_id=request.request_id or None, command=command)",
                "request_id=None, command=command)",
            ),
        ),
    ),
    Mutant(
        "service-status-fresh-ignored",
        "service",
        "Status serves a fresh read from the local replica and labels it fresh",
        "cluster/node/service.py",
        (
            (
                "            got = await gw.read(look, request.fresh)\n"
                "            values, applied_index, stale = got.value, got.applied_index, got.stale\n"
                '            values["state_digest"] = ""\n',
                "            got = await gw.read(look, False)\n"
                "            values, applied_index, stale = got.value, got.applied_index, False\n"
                '            values["state_digest"] = ""\n',
            ),
        ),
    ),
    # Issue #41: three bug classes each of which passed two chaos runs before the workload probed
    # for them and a checker looked (the fence probe on a free target, convergence at every depth,
    # grants only to live generations).
    Mutant(
        "fence-removed",
        "apply",
        "Acquire no longer checks the StaleEpoch fence: a rolled-back execution acquires under its old epoch",
        "statemachine/machine.py",
        (("    recovery.check_fence(ctx.state, ex.execution_id, cmd.observed_epoch)\n", ""),),
    ),
    Mutant(
        "cancel-stops-at-depth-1",
        "apply",
        "a run's cancellation asks the root and its children to stop, never the grandchildren and below",
        "statemachine/cancel.py",
        (
            (
                "        if ex.children:\n            stack.extend(reversed(ex.children))\n"
                "        nxt = cancel_row.get(ex.status)\n",
                "        if ex.children and eid == scope.root_id:  # children only, never their children\n"
                "            stack.extend(reversed(ex.children))\n"
                "        nxt = cancel_row.get(ex.status)\n",
            ),
        ),
    ),
    Mutant(
        "hand-off-to-stopped-waiter",
        "apply",
        "a release hands the target to the head of its queue even when that waiter was asked to stop",
        "statemachine/lifecycle.py",
        (
            (
                "        if ex.status not in LIVE or waiter_id in t.holders or waiter_id == released_by:\n",
                "        if ex.status in SETTLED or waiter_id in t.holders or waiter_id == released_by:\n",
            ),
        ),
    ),
    # Retirement (the chaos run retires settled runs 5 s after they settle, runner.LAB_RETENTION_MS):
    # an acknowledged write that left the live state must still be found in the history stores.
    Mutant(
        "history-drops-executions",
        "node",
        "the history store does not record retired executions: once the tombstone is forgotten, the execution is gone",
        "cluster/node/history.py",
        (
            (
                "            self.record(fx for fx in out.effects if type(fx) in RETIREMENT_EFFECTS)\n",
                "            self.record(fx for fx in out.effects if type(fx) in RETIREMENT_EFFECTS"
                " and type(fx) is not ExecutionRetired)\n",
            ),
        ),
    ),
    Mutant(
        "retire-forgets-cancel",
        "apply",
        "a run retires with cancel generation 0 in its RunRetired record: the acknowledged cancel is lost",
        "statemachine/retire.py",
        (("            cancel_generation=run.cancel_generation,\n", "            cancel_generation=0,\n"),),
    ),
)


def by_name(names: Sequence[str]) -> list[Mutant]:
    known = {m.name: m for m in CATALOGUE}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown mutants {unknown}; known: {', '.join(known)}")
    return [known[n] for n in names]


# -- the copy ------------------------------------------------------------------------------------------


def copy_tree(dest: Path) -> None:
    """The files git tracks or would track (not ignored), as they are in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for raw in listed:
        if not raw:
            continue
        rel = raw.decode()
        src = REPO / rel
        if not src.is_file():
            continue  # deleted in the working tree
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def patched(m: Mutant, text: str) -> str:
    """``text`` with the mutant's edits applied; each edit's text must stand in it exactly once, so
    an entry whose code moved or changed fails loudly instead of planting nothing."""
    for old, new in m.edits:
        found = text.count(old)
        if found != 1:
            raise SystemExit(f"mutant {m.name}: {m.file} holds its patch text {found} times, not once:\n{old}")
        text = text.replace(old, new)
    return text


def plant(m: Mutant | None, dest: Path) -> None:
    """Copy the tree to ``dest``, apply the mutant's edits there, build the copy's import view."""
    copy_tree(dest)
    if m is not None:
        path = dest / m.file
        path.write_text(patched(m, path.read_text()))
    subprocess.run(
        [sys.executable, str(dest / "scripts" / "typecheck_view.py")], cwd=dest, check=True, stdout=subprocess.DEVNULL
    )


def copy_env(dest: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(dest / "build" / "typecheck"), str(dest)])
    env.pop("WAITGRAPH_CHAOS_REQUIRED", None)
    return env


def imports_from_copy(dest: Path, m: Mutant | None) -> None:
    """Prove the copy's (mutated) modules are the ones imported, in this interpreter as in the nodes."""
    probe = "import sys, waitgraph.statemachine.machine as mod; print(mod.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=dest, env=copy_env(dest), check=True, capture_output=True, text=True
    ).stdout.strip()
    if not Path(out).resolve().is_relative_to(dest.resolve()):
        raise SystemExit(f"the copy is not what is imported: waitgraph comes from {out}")
    if m is not None:
        first_new = m.edits[0][1]
        if first_new not in (dest / m.file).read_text():
            raise SystemExit(f"mutant {m.name}: the patch is not in the copy")


# -- one run -------------------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    layer: str
    chaos: str
    """caught, missed, harness (failed without a violation), or error."""
    check: str
    detected_s: float | None
    fired: int
    unit: str
    wall_s: float


def chaos_run(
    dest: Path, duration_s: float, seed: int, log: Path, nemeses: str = ""
) -> tuple[dict[str, object] | None, float]:
    report = dest / "chaos-report.json"
    began = time.monotonic()
    with open(log, "w") as out:
        subprocess.run(
            [
                sys.executable,
                *("-m", "tests.chaos.runner", "--nodes", "3", "--duration", f"{duration_s:g}"),
                *("--seed", str(seed), "--report-json", str(report)),
                *(("--nemeses", nemeses) if nemeses else ()),
            ],
            cwd=dest,
            env=copy_env(dest),
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=duration_s + 600,
        )
    wall = time.monotonic() - began
    if not report.exists():
        return None, wall
    return json.loads(report.read_text()), wall


def unit_run(dest: Path, log: Path) -> str:
    with open(log, "w") as out:
        done = subprocess.run(
            [
                sys.executable,
                *("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/chaos/test_checkers.py"),
                *("-k", "not healthy_cluster and not ring_that_keeps"),
            ],
            cwd=dest,
            env=copy_env(dest),
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    return "pass" if done.returncode == 0 else "FAIL"


def run_one(m: Mutant | None, args: argparse.Namespace, logs: Path) -> Row:
    name = m.name if m is not None else "(control: no mutant)"
    with tempfile.TemporaryDirectory(prefix="waitgraph-mutant-") as tmp:
        dest = Path(tmp) / "tree"
        plant(m, dest)
        imports_from_copy(dest, m)
        stem = m.name if m is not None else "control"
        doc, wall = chaos_run(dest, args.duration, args.seed, logs / f"{stem}.chaos.log", args.nemeses)
        unit = "-" if args.no_unit else unit_run(dest, logs / f"{stem}.unit.log")
    layer = m.layer if m is not None else "-"
    if doc is None:
        return Row(name, layer, "error", "no report (see the log)", None, 0, unit, wall)
    first = doc.get("first")
    violations = doc.get("violations") or {}
    assert isinstance(violations, dict)
    if isinstance(first, dict):
        return Row(name, layer, "caught", str(first["invariant"]), first.get("at_s"), len(violations), unit, wall)  # type: ignore[arg-type]
    if not doc.get("ok"):
        errors = doc.get("harness_errors") or ["failed"]
        assert isinstance(errors, list)
        return Row(name, layer, "harness", "; ".join(map(str, errors))[:60], None, 0, unit, wall)
    return Row(name, layer, "missed", "-", None, 0, unit, wall)


def table(rows: Sequence[Row], duration_s: float, seed: int) -> str:
    head = (
        f"{'mutant':<32}{'layer':<9}{'chaos run':<11}{'caught by (first anomaly)':<40}"
        f"{'at':>9}{'fired':>7}{'unit':>6}{'wall':>7}"
    )
    lines = [f"mutants: seeded chaos run, 3 nodes, {duration_s:g} s, seed {seed}", "", head]
    for r in rows:
        at = f"{r.detected_s:.1f}s" if r.detected_s is not None else "-"
        lines.append(
            f"{r.name:<32}{r.layer:<9}{r.chaos:<11}{r.check:<40}{at:>9}{r.fired:>7}{r.unit:>6}{r.wall_s:>6.0f}s"
        )
    mutants = [r for r in rows if r.layer != "-"]
    caught = sum(1 for r in mutants if r.chaos == "caught")
    lines += ["", f"{caught} of {len(mutants)} mutants caught by the chaos run"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/mutants", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--duration", type=float, default=120.0, help="seconds of the chaos run (CI's is 120)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--only", default="", help="comma-separated mutant names (default: the whole catalogue)")
    p.add_argument("--nemeses", default="", help="comma-separated nemeses of the chaos runs (default: every one)")
    p.add_argument("--no-unit", action="store_true", help="skip the checker unit tests")
    p.add_argument("--no-control", action="store_true", help="skip the unmutated control run")
    p.add_argument("--list", action="store_true", help="print the catalogue and exit")
    p.add_argument("--logs", type=Path, default=None, help="keep each run's output here (default: a temporary dir)")
    args = p.parse_args(argv)
    if args.list:
        for m in CATALOGUE:
            print(f"{m.name:<32}{m.layer:<9}{m.file:<34}{m.bug}")
        return 0
    chosen = by_name([n.strip() for n in args.only.split(",") if n.strip()]) if args.only else list(CATALOGUE)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="waitgraph-mutant-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    print(f"mutants: {len(chosen)} to run; logs in {logs}", file=sys.stderr, flush=True)
    rows: list[Row] = []
    if not args.no_control:
        control = run_one(None, args, logs)
        rows.append(control)
        print(f"mutants: control {control.chaos} ({control.wall_s:.0f} s)", file=sys.stderr, flush=True)
        if control.chaos != "missed":  # the unmutated tree must pass
            print(table(rows, args.duration, args.seed))
            print(f"\nthe control run failed: see {logs}/control.chaos.log", file=sys.stderr)
            return 1
    for m in chosen:
        row = run_one(m, args, logs)
        rows.append(row)
        print(f"mutants: {m.name}: {row.chaos} by {row.check} ({row.wall_s:.0f} s)", file=sys.stderr, flush=True)
    print(table(rows, args.duration, args.seed))
    return 0 if all(r.chaos == "caught" for r in rows if r.layer != "-") else 1


if __name__ == "__main__":
    sys.exit(main())
