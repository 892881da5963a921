"""``--wait``: watch a cancellation (or a freeze) converge, with a progress bar or plain lines.

Rules kept here:
- One read per poll, the cheap ``Convergence`` RPC (counts, not the graph), from this node's own
  replica (no log barrier: polling must not add log entries). Polls start at
  :data:`FIRST_POLL_S` and back off to :data:`MAX_POLL_S`, the cluster's default re-emission
  interval: nothing converges faster than the workers acknowledge.
- "Done" is confirmed by one fresh read (after a log barrier) before it is reported, so a lagging
  replica can never announce a convergence the leader does not have.
- A terminal gets a rich progress bar; anything else gets one plain line per change
  (``cancel run:r1 gen 3: 4/7 settled, 2 CANCEL_REQUESTED, 1 QUARANTINED``), never escape codes.
- The watch ends with the last reading: converged, or :class:`NotConverged` at the deadline (the
  CLI exits with :data:`EXIT_NOT_CONVERGED` and says what is still pending).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from waitgraph.sdk import Read, SyncOperatorClient

FIRST_POLL_S = 0.25
MAX_POLL_S = 1.0
DEFAULT_WAIT_S = 120.0
"""How long ``--wait`` waits when no ``--wait-timeout`` is given."""
EXIT_NOT_CONVERGED = 3
"""The write was applied but did not converge within the deadline (errors exit 1, usage 2)."""


@dataclass(frozen=True, slots=True)
class Reading:
    done: bool
    completed: int
    total: int
    line: str
    reply: Any
    """The ConvergenceResponse it was made from."""


class NotConverged(Exception):
    def __init__(self, last: Reading, waited_s: float) -> None:
        super().__init__(last.line)
        self.last = last
        self.waited_s = waited_s


def _unsettled(reply: Any) -> str:
    parts = [f"{n} {status}" for status, n in sorted(reply.unsettled.items())]
    return ", ".join(parts)


def cancel_reading(run_id: str, generation: int) -> Callable[[Read[Any]], Reading]:
    """Done when the run is at ``generation`` or later and CANCELLED_STABLE."""
    from waitgraph.ops import render

    def read(got: Read[Any]) -> Reading:
        r = got.reply
        state = render.enum_text(r.DESCRIPTOR.fields_by_name["cancel_state"].enum_type, r.cancel_state)
        done = r.cancel_generation >= generation and state == "CANCELLED_STABLE"
        line = f"cancel run:{run_id} gen {r.cancel_generation}: {r.settled}/{r.executions} settled"
        rest = _unsettled(r)
        if rest:
            line += f", {rest}"
        if done:
            line += "; CANCELLED_STABLE"
        elif r.cancel_generation < generation:
            line += f" (this replica has not applied gen {generation} yet)"
        return Reading(done, r.settled, r.executions, line, r)

    return read


def freeze_reading(run_id: str | None) -> Callable[[Read[Any]], Reading]:
    """Done when admission is frozen on the replica and no cancellation is open (in the run)."""
    what = f"run:{run_id}" if run_id else "cluster"
    most = 0

    def read(got: Read[Any]) -> Reading:
        nonlocal most
        r = got.reply
        most = max(most, r.pending_acks)
        done = r.admission_frozen and r.converged
        if not r.admission_frozen:
            line = f"freeze {what}: this replica has not applied the freeze yet"
        elif r.converged:
            line = f"freeze {what}: admission frozen; no cancellation open: quiesced"
        else:
            line = (
                f"freeze {what}: admission frozen; {r.open_cancellations} cancellation(s) open, "
                f"{r.pending_acks} execution(s) not acknowledged"
            )
            if r.quarantined:
                line += f" ({len(r.quarantined)} quarantined)"
        return Reading(done, most - r.pending_acks, max(most, 1), line, r)

    return read


def watch(
    ops: SyncOperatorClient,
    run_id: str,
    reading: Callable[[Read[Any]], Reading],
    timeout_s: float,
    stream: TextIO,
    tty: bool,
    sleep: Callable[[float], None] = time.sleep,
) -> Reading:
    """Poll ``Convergence(run_id)`` until ``reading`` says done (confirmed fresh) or the deadline."""
    start = time.monotonic()
    deadline = start + timeout_s
    bar = _Bar(stream) if tty else None
    last_line = ""
    interval = FIRST_POLL_S
    try:
        while True:
            now = reading(ops.read_convergence(run_id, fresh=False))
            if now.done:
                now = reading(ops.read_convergence(run_id, fresh=None))
            if bar is not None:
                bar.show(now)
            elif now.line != last_line:
                stream.write(now.line + "\n")
                stream.flush()
                last_line = now.line
            if now.done:
                return now
            left = deadline - time.monotonic()
            if left <= 0:
                raise NotConverged(now, time.monotonic() - start)
            sleep(min(interval, left))
            interval = min(MAX_POLL_S, interval * 1.5)
    finally:
        if bar is not None:
            bar.stop()


class _Bar:
    """A rich progress bar on a terminal: the reading's line, a bar, done/total and elapsed time."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=stream),
        )
        self.task = self.progress.add_task("waiting", total=None)
        self.progress.start()

    def show(self, r: Reading) -> None:
        self.progress.update(self.task, description=r.line, completed=r.completed, total=r.total or None)

    def stop(self) -> None:
        self.progress.stop()
