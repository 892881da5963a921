"""The ``at_ms`` a node stamps on what it proposes: replicated time carried forward by this node's
monotonic clock, never moved by its wall clock.

The core has no clock (docs/design.md §1): every command carries ``at_ms`` and the state's ``now_ms`` is
the largest one applied so far. Session and claim expiry, lease deadlines, the confirmation window
and the cancellation SLO are all measured in that time. If a node stamped its wall clock, one node
whose clock is stepped forward (NTP, a VM resume, an operator) would move the whole cluster's time
forward for good: every session's TTL would run out at once, and since time never goes back the
confirmation window would stand still until real time caught up (the chaos runs' wall-clock step
nemesis showed the latter: no victim for as long as the step). A clock stepped backwards would
freeze time until it caught up.

So a node's clock is anchored on the replicated time and advances with ``time.monotonic``:

- ``now_ms = anchor_ms + (monotonic() - anchor_monotonic)``, never below the replicated
  ``now_ms``. When the replica has applied a stamp ahead of that (another node stamped it), the
  anchor moves up to it: all nodes carry the same time forward, and a follower that becomes
  leader continues from where the old leader left off plus the time that has passed since it last
  saw a stamp, so time keeps running through an election.
- The wall clock is read only while this replica has applied nothing (replicated time 0): the
  first stamps of a brand-new cluster, so that logical time starts out equal to real time. A
  restarted node anchors on the first replicated time it sees once its log is replayed.
- While no node runs, time does not pass: a cluster restarted after an outage resumes from its
  last stamp, so no session expires because of time in which nobody could renew it (etcd keeps
  leases through leader changes for the same reason). Logical time is then behind wall time by
  the outage; ``Status.now_ms`` says what it is, and absolute deadlines given by agents are in it.
- A monotonic clock that runs fast (a faulty VM) still speeds up the node's timers; that, no
  clock-based system avoids.

Token expiry is not logical time: tokens expire by the wall clock (cluster/node/auth.py), as their
issuer meant.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class LogicalClock:
    """``now_ms()``: the time to stamp on the next proposal from this node (see the module doc)."""

    def __init__(
        self,
        replicated_ms: Callable[[], int],
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._replicated = replicated_ms
        self._wall = wall
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._anchor: tuple[int, float] | None = None

    def now_ms(self) -> int:
        replicated = int(self._replicated())
        mono = self._monotonic()
        with self._lock:
            if self._anchor is None:
                if replicated <= 0:  # nothing applied yet: a new cluster, or a log still replaying
                    return int(self._wall() * 1000)
                self._anchor = (replicated, mono)
            anchor_ms, anchor_mono = self._anchor
            now = anchor_ms + int((mono - anchor_mono) * 1000)
            if replicated > now:
                self._anchor = (replicated, mono)
                now = replicated
            return now
