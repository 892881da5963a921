"""The chaos runs' clock hook, imported (as ``sitecustomize``) only by the nodes a run starts.

With ``CHAOS_CLOCK_FILE`` set, ``time.time()`` and ``time.time_ns()`` return the real wall clock
plus the offset (seconds) written in that file, re-read at most every 50 ms; the monotonic clock
is left alone. It stands in for libfaketime, which (0.9.10) cannot change a running process's
wall clock without breaking ``time.sleep`` or jumping its monotonic clock backwards.
"""

from __future__ import annotations

import os
import time

_PATH = os.environ.get("CHAOS_CLOCK_FILE", "")

if _PATH:
    _real_time, _real_time_ns, _monotonic = time.time, time.time_ns, time.monotonic
    _state = [0.0, -1.0]  # offset in seconds, monotonic time of the next read

    def _offset_s() -> float:
        now = _monotonic()
        if now >= _state[1]:
            _state[1] = now + 0.05
            try:
                with open(_PATH) as f:
                    _state[0] = float(f.read().strip() or 0.0)
            except (OSError, ValueError):
                pass
        return _state[0]

    def _time() -> float:
        return _real_time() + _offset_s()

    def _time_ns() -> int:
        return _real_time_ns() + int(_offset_s() * 1e9)

    time.time = _time
    time.time_ns = _time_ns
