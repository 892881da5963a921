"""Nemeses: the faults a chaos run injects into real node processes, and the seeded schedule.

Every nemesis has a ``kind``, ``start()`` (inject, return a :class:`FaultRecord` of what it did)
and ``heal()`` (undo it, stamp the record's end). The network ones act through the lab
(``tests/chaos/net.py``: DROP rules in the nodes' namespaces, delays in the Raft link proxies); the
process ones signal the node's process (SIGSTOP/SIGCONT; SIGKILL, then a restart on the same data
directory); the clock ones come in
two families:

- ``clock-skew-faketime`` / ``clock-rate-faketime``: the node is stopped (SIGTERM or SIGKILL) and
  started again on its data directory under libfaketime (``LD_PRELOAD`` and ``FAKETIME``, what the
  ``faketime`` command sets; the command itself forks and would stand between the harness and the
  node's pid) with a fixed offset (``FAKETIME="+120s"``, ``"-86400s"``) or a rate (``"+0 x2"``,
  ``"+0 x0.5"``). From its first instruction the process's wall *and* monotonic clocks are
  libfaketime's, consistent with each other: under a rate its Raft timers (pysyncobj runs on the
  monotonic clock) fire early or late, and every timestamp it stamps is skewed. Heal: stop it again
  and start it without libfaketime. libfaketime 0.9.10 cannot change the clock of a *running*
  process safely (with ``FAKETIME_DONT_FAKE_MONOTONIC=1`` Python's ``time.sleep`` fails with EINVAL;
  changing the offset at run time jumps the monotonic clock backwards), hence the restart.
  Caveat, measured: under libfaketime 0.9.10 the fake monotonic clock lives in the wall clock's
  domain and Python 3.11's timed lock waits (``threading.Event.wait(t)``, ``Lock.acquire(timeout=t)``:
  ``sem_clockwait``, not intercepted) never return; the node's serving paths do not use them
  (elections, writes, reads and a SIGTERM stop work, tests/chaos/test_chaos.py shows it).
- ``wallclock-step`` / ``wallclock-drift``: a *running* node's wall clock (``time.time``) only,
  through a test-only hook the nodes load at start-up (``tests/chaos/clockhook/sitecustomize.py``,
  an offset read from a file); its monotonic clock is left alone. A step is like an NTP step; a
  drift is a wall clock that gains or loses time steadily (the offset rewritten every 0.1 s).

Beyond one fault at a time: ``kill-after-compaction`` watches every node's log-compaction dump
(``raft.dump``, renamed into place by each compaction) and SIGKILLs the first node whose dump
changes, at once (its journal may not be cut yet), restarting it on heal so that it restores
from that dump; ``kill-all`` SIGKILLs every node at once and restarts them all on heal;
``replace-node`` starts a new node (a new id, new ports) beside a follower, adds it with
``AddMember`` while the workload writes, and on heal removes the old member with ``RemoveMember``
and stops it for good (docs/deploy.md, "Membership changes"): from then on the run has one member
fewer of the old ones, and the final read covers the new node;
``pause+partition`` pauses a node and, while it is paused, partitions the network;
``kill+clock-skew`` restarts a node under a skewed clock and, while it runs so, SIGKILLs
another. :attr:`ChaosEnv.dump_restores` counts the restarts that found a dump to restore from.

Steps go up to a day in both directions. A node stamps logical time carried forward by its
monotonic clock from the replicated time (cluster/node/clock.py), so a stepped wall clock must change
nothing; before that clock existed, a forward step of S seconds moved the cluster's time S seconds
ahead for good and recovery stood still until real time caught up (these nemeses found it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from waitgraph.dev.localcluster import LocalCluster

from .net import Lab

NETWORK_KINDS = (
    "isolate-node",
    "isolate-leader",
    "split-majority",
    "bridge",
    "majorities-ring",
    "one-way-drop",
    "packet-loss",
    "delay",
)
PROCESS_KINDS = ("pause", "kill")
FAKETIME_KINDS = ("clock-skew-faketime", "clock-rate-faketime")
CLOCK_KINDS = ("wallclock-step", "wallclock-drift", *FAKETIME_KINDS)
CLUSTER_KINDS = ("kill-after-compaction", "kill-all", "replace-node")
OVERLAP_KINDS = ("pause+partition", "kill+clock-skew")
"""Two faults at once: a node paused while the network is partitioned; a node killed while
another runs under a skewed clock (libfaketime)."""
ALL_KINDS = NETWORK_KINDS + PROCESS_KINDS + CLOCK_KINDS + CLUSTER_KINDS + OVERLAP_KINDS
RESTARTING_KINDS = ("kill", *FAKETIME_KINDS, *CLUSTER_KINDS, "kill+clock-skew")
RESTART_OVERHEAD_S = 3.0
"""What restarting a node (start it, wait until it serves) adds to a slot; the schedule reserves it."""
COMPACTION_WAIT_S = 20.0
"""How long ``kill-after-compaction`` waits for a node to write a log-compaction dump."""


@dataclass
class FaultRecord:
    kind: str
    targets: list[str]
    detail: str
    start_ns: int
    end_ns: int | None = None
    leader_before: str | None = None
    leader_cut: bool = False
    """The leader at the start lost a majority (cut off, paused or killed): a new leader is due."""

    def duration_s(self) -> float | None:
        return None if self.end_ns is None else (self.end_ns - self.start_ns) / 1e9


# -- clocks ------------------------------------------------------------------------------------------


CLOCK_HOOK = Path(__file__).resolve().parent / "clockhook"
REPO = Path(__file__).resolve().parents[2]
LIBFAKETIME_GLOBS = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


def libfaketime() -> str | None:
    """The libfaketime preload library (Debian's ``faketime`` package), or None."""
    for pattern in LIBFAKETIME_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


class Clocks:
    """One clock file per node: the offset (seconds) its wall clock runs ahead of the real one
    (the hook); and the ``FAKETIME`` spec a node is started under next (libfaketime), if any."""

    def __init__(self, directory: Path, node_ids: Sequence[str]) -> None:
        self.directory = directory
        self.offsets_s: dict[str, float] = {n: 0.0 for n in node_ids}
        self.faketime: dict[str, str] = {}
        """node -> FAKETIME spec it is (re)started under; absent: the real clock."""
        self.libfaketime = libfaketime()
        self._drift: dict[str, tuple[float, float, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        directory.mkdir(parents=True, exist_ok=True)
        for n in node_ids:
            self._write(n, 0.0)

    available = True

    def file(self, node_id: str) -> Path:
        return self.directory / f"{node_id}.clock"

    def env(self, node_id: str) -> dict[str, str]:
        """The variables that load the hook into the node (see the module's docstring)."""
        path = os.pathsep.join(p for p in (str(CLOCK_HOOK), str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env = {"PYTHONPATH": path, "CHAOS_CLOCK_FILE": str(self.file(node_id))}
        spec = self.faketime.get(node_id)
        if spec is not None:
            if self.libfaketime is None:
                raise RuntimeError("libfaketime is not installed (apt-get install faketime)")
            # Monotonic faked too (the default, said explicitly): wall and monotonic agree.
            env.update(LD_PRELOAD=self.libfaketime, FAKETIME=spec, FAKETIME_DONT_FAKE_MONOTONIC="0")
        return env

    def _write(self, node_id: str, offset_s: float) -> None:
        self.offsets_s[node_id] = offset_s
        tmp = self.file(node_id).with_suffix(".tmp")
        tmp.write_text(f"{offset_s:.3f}\n")
        tmp.replace(self.file(node_id))

    def step(self, node_id: str, offset_s: float) -> None:
        with self._lock:
            self._drift.pop(node_id, None)
            self._write(node_id, offset_s)

    def drift(self, node_id: str, rate: float) -> None:
        """The node's wall clock runs ``rate`` times as fast as real time from now on."""
        with self._lock:
            self._drift[node_id] = (time.monotonic(), self.offsets_s[node_id], rate)
        if self._thread is None:
            self._thread = threading.Thread(target=self._tick, name="chaos-clocks", daemon=True)
            self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                for n, (t0, base, rate) in self._drift.items():
                    self._write(n, base + (time.monotonic() - t0) * (rate - 1.0))

    def add(self, node_id: str) -> None:
        """A clock file for a node started during the run (``replace-node``)."""
        with self._lock:
            self._write(node_id, 0.0)

    def reset(self, node_id: str | None = None) -> None:
        for n in [node_id] if node_id else list(self.offsets_s):
            self.step(n, 0.0)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)


# -- the environment the nemeses act on --------------------------------------------------------------


@dataclass
class ChaosEnv:
    lab: Lab
    cluster: LocalCluster
    clocks: Clocks
    leader: Callable[[], str | None]
    """The node the cluster currently agrees is leader (the runner's Status monitor), or None."""
    paused: set[str] = field(default_factory=set)
    killed: set[str] = field(default_factory=set)
    dump_restores: list[str] = field(default_factory=list)
    """Every restart of a node that found a log-compaction dump in its data directory (so it
    restored its state from the dump, then replayed the journal after it)."""
    on_member: Callable[[str, str], None] | None = None
    """Told (node id, gRPC address) of every node a nemesis adds (the runner's Status monitor)."""
    replaced: list[tuple[str, str]] = field(default_factory=list)
    """(old, new) node ids of every replacement made by ``replace-node``."""

    def dump_stamp(self, node_id: str) -> tuple[int, int] | None:
        """(inode, mtime) of the node's dump: a compaction renames a new one into place."""
        try:
            st = (self.cluster.node(node_id).data_dir / "raft.dump").stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    @property
    def node_ids(self) -> list[str]:
        return [m.node_id for m in self.cluster.members]

    def majority(self) -> int:
        return len(self.node_ids) // 2 + 1

    def pid(self, node_id: str) -> int:
        pid = self.cluster.node(node_id).pid
        assert pid is not None, node_id
        return pid

    def restart(self, node_id: str, timeout_s: float = 60.0) -> None:
        if self.dump_stamp(node_id) is not None:
            self.dump_restores.append(node_id)
        self.cluster.spawn(node_id)
        self.cluster.wait_ready(node_id, timeout_s)
        self.killed.discard(node_id)

    def stop(self, node_id: str, sig: signal.Signals) -> None:
        """SIGTERM (graceful, SIGKILL after 10 s) or SIGKILL one node and wait for it to exit."""
        self.cluster.terminate(node_id, 10.0, sig)

    def next_node_id(self) -> str:
        """An id no node of this run ever had."""
        used = {m.node_id for m in self.cluster.members} | {n for pair in self.replaced for n in pair}
        return next(f"n{i}" for i in range(len(used) + 1, 10_000) if f"n{i}" not in used)

    def restart_under(self, node_id: str, spec: str | None, sig: signal.Signals) -> None:
        """Stop the node with ``sig`` and start it again on its data directory, under libfaketime
        with ``FAKETIME=spec`` (None: the real clock)."""
        self.stop(node_id, sig)
        if spec is None:
            self.clocks.faketime.pop(node_id, None)
        else:
            self.clocks.faketime[node_id] = spec
        self.restart(node_id)


def unavailable(kind: str, env: ChaosEnv) -> str | None:
    """Why this kind cannot run here (None: it can)."""
    if kind in NETWORK_KINDS and not env.lab.network_faults:
        return f"no network namespaces ({env.lab.fallback_reason})"
    if kind == "pause+partition" and not env.lab.network_faults:
        return f"no network namespaces ({env.lab.fallback_reason})"
    if kind in (*FAKETIME_KINDS, "kill+clock-skew") and env.clocks.libfaketime is None:
        return "libfaketime not installed (apt-get install faketime)"
    return None


# -- nemeses -----------------------------------------------------------------------------------------


class Nemesis:
    kind: ClassVar[str] = ""

    def __init__(self, env: ChaosEnv, rng: random.Random) -> None:
        self.env = env
        self.rng = rng
        self.record: FaultRecord | None = None

    def start(self) -> FaultRecord:
        leader = self.env.leader()
        started = time.monotonic_ns()
        targets, detail, leader_cut = self._inject(leader)
        self.record = FaultRecord(self.kind, targets, detail, started, None, leader, leader_cut)
        return self.record

    def heal(self) -> None:
        if self.record is None or self.record.end_ns is not None:
            return
        self._heal()
        self.record.end_ns = time.monotonic_ns()

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        raise NotImplementedError

    def _heal(self) -> None:
        raise NotImplementedError

    def _pick(self, leader: str | None = None, prefer_leader: float = 0.3) -> str:
        if leader is not None and self.rng.random() < prefer_leader:
            return leader
        return self.rng.choice(self.env.node_ids)


class Partition(Nemesis):
    """Cut links; the nodes in ``groups`` only reach nodes of their own group, except for the
    pairs a subclass leaves connected."""

    def _cut_pairs(self, leader: str | None) -> tuple[list[tuple[str, str]], list[str], str]:
        raise NotImplementedError

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        pairs, targets, detail = self._cut_pairs(leader)
        self.env.lab.cut(pairs)
        cut = {frozenset(p) for p in pairs}
        leader_cut = False
        if leader is not None:
            sees = [n for n in self.env.node_ids if n == leader or frozenset((leader, n)) not in cut]
            leader_cut = len(sees) < self.env.majority()
        return targets, detail, leader_cut

    def _heal(self) -> None:
        self.env.lab.heal_network()

    def _groups(self, groups: Sequence[Sequence[str]]) -> list[tuple[str, str]]:
        pairs = []
        for i, a in enumerate(groups):
            for b in groups[i + 1 :]:
                pairs += [(x, y) for x in a for y in b]
        return pairs


class IsolateNode(Partition):
    kind = "isolate-node"

    def _cut_pairs(self, leader: str | None) -> tuple[list[tuple[str, str]], list[str], str]:
        node = self.rng.choice([n for n in self.env.node_ids if n != leader] or self.env.node_ids)
        rest = [n for n in self.env.node_ids if n != node]
        return self._groups([[node], rest]), [node], f"{node} | {' '.join(rest)}"


class IsolateLeader(Partition):
    kind = "isolate-leader"

    def _cut_pairs(self, leader: str | None) -> tuple[list[tuple[str, str]], list[str], str]:
        node = leader or self.rng.choice(self.env.node_ids)
        rest = [n for n in self.env.node_ids if n != node]
        what = "leader" if leader else "no leader known; random node"
        return self._groups([[node], rest]), [node], f"{node} ({what}) | {' '.join(rest)}"


class SplitMajority(Partition):
    kind = "split-majority"

    def _cut_pairs(self, leader: str | None) -> tuple[list[tuple[str, str]], list[str], str]:
        ids = list(self.env.node_ids)
        self.rng.shuffle(ids)
        minority, majority = sorted(ids[: len(ids) // 2]), sorted(ids[len(ids) // 2 :])
        return self._groups([minority, majority]), minority, f"minority {' '.join(minority)} | {' '.join(majority)}"


class Bridge(Partition):
    """Two halves that only one node (the bridge) sees both of."""

    kind = "bridge"

    def _cut_pairs(self, leader: str | None) -> tuple[list[tuple[str, str]], list[str], str]:
        ids = list(self.env.node_ids)
        self.rng.shuffle(ids)
        bridge = ids[0]
        rest = ids[1:]
        half = len(rest) // 2
        a, b = sorted(rest[:half]), sorted(rest[half:])
        return self._groups([a, b]), [bridge], f"{' '.join(a)} | {' '.join(b)} bridged by {bridge}"


class MajoritiesRing(Partition):
    """Every node sees a majority, and no two see the same one (a ring of overlapping views)."""

    kind = "majorities-ring"

    def _cut_pairs(self, leader: str | None) -> tuple[list[tuple[str, str]], list[str], str]:
        ring = list(self.env.node_ids)
        self.rng.shuffle(ring)
        n = len(ring)
        reach = (self.env.majority() - 1 + 1) // 2  # neighbours on each side
        pairs = []
        for i in range(n):
            for j in range(i + 1, n):
                if min(j - i, n - (j - i)) > reach:
                    pairs.append((ring[i], ring[j]))
        if not pairs and n >= 3:
            # Three nodes: every pair of neighbours is a majority, so a ring cuts one link.
            pairs = [(ring[0], ring[1])]
        return pairs, ring, "ring " + " - ".join(ring) + " (each sees its neighbours)"


class OneWayDrop(Nemesis):
    kind = "one-way-drop"

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        src = self._pick(leader, 0.5)
        dst = self.rng.choice([n for n in self.env.node_ids if n != src])
        self.env.lab.drop(src, dst)
        return [src, dst], f"{src} -> {dst} dropped", False

    def _heal(self) -> None:
        self.env.lab.heal_network()


class PacketLoss(Nemesis):
    kind = "packet-loss"

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        p = round(self.rng.uniform(0.05, 0.3), 3)
        ids = self.env.node_ids
        for a in ids:
            for b in ids:
                if a != b:
                    self.env.lab.drop(a, b, probability=p)
        return list(ids), f"{p:.0%} of packets between nodes dropped at random", False

    def _heal(self) -> None:
        self.env.lab.heal_network()


class Delay(Nemesis):
    kind = "delay"

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        proxies = self.env.lab.proxies
        assert proxies is not None
        delay_ms = self.rng.choice((20, 50, 100, 200))
        jitter_ms = delay_ms / 2
        ids = self.env.node_ids
        # Half the time every link, else only one node's links (a slow node).
        slow = None if self.rng.random() < 0.5 else self._pick(leader, 0.5)
        for a in ids:
            for b in ids:
                if a != b and (slow is None or slow in (a, b)):
                    proxies.set_delay(a, b, delay_ms, jitter_ms)
        where = "every Raft link" if slow is None else f"{slow}'s Raft links"
        return ([slow] if slow else list(ids)), f"{delay_ms}+-{jitter_ms:.0f} ms on {where}", False

    def _heal(self) -> None:
        self.env.lab.heal_network()


class Pause(Nemesis):
    kind = "pause"

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        node = self._pick(leader, 0.5)
        os.kill(self.env.pid(node), signal.SIGSTOP)
        self.env.paused.add(node)
        self.node = node
        return [node], f"SIGSTOP {node}", node == leader

    def _heal(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.env.pid(self.node), signal.SIGCONT)
        self.env.paused.discard(self.node)


class Kill(Nemesis):
    kind = "kill"

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        node = self._pick(leader, 0.5)
        self.env.cluster.kill(node)
        self.env.killed.add(node)
        self.node = node
        return [node], f"SIGKILL {node}, restarted from its data directory on heal", node == leader

    def _heal(self) -> None:
        self.env.restart(self.node)


def skew_s(rng: random.Random) -> int:
    """A clock step of seconds to a day, ahead or behind."""
    return rng.choice((1, -1)) * rng.choice((5, 30, 120, 3600, 86400))


class WallclockStep(Nemesis):
    """The hook: a running node's wall clock steps (monotonic untouched)."""

    kind = "wallclock-step"

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        node = self._pick(leader, 0.5)
        offset = skew_s(self.rng)
        self.env.clocks.step(node, float(offset))
        self.node = node
        return [node], f"{node}'s wall clock stepped {offset:+d} s", False

    def _heal(self) -> None:
        self.env.clocks.reset(self.node)


class WallclockDrift(Nemesis):
    """The hook: a running node's wall clock gains or loses time steadily (monotonic untouched)."""

    kind = "wallclock-drift"

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        node = self._pick(leader, 0.5)
        rate = self.rng.choice((0.25, 0.5, 2.0, 5.0))
        self.env.clocks.drift(node, rate)
        self.node = node
        return [node], f"{node}'s wall clock runs x{rate:g}", False

    def _heal(self) -> None:
        self.env.clocks.reset(self.node)


class FaketimeRestart(Nemesis):
    """Restart a node under libfaketime (see the module's docstring); heal: restart it without."""

    def _spec(self) -> tuple[str, str]:
        raise NotImplementedError

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        node = self._pick(leader, 0.5)
        spec, what = self._spec()
        down, self.up = (
            self.rng.choice((signal.SIGTERM, signal.SIGKILL)),
            self.rng.choice((signal.SIGTERM, signal.SIGKILL)),
        )
        self.node = node
        self.env.restart_under(node, spec, down)
        detail = f"{node} {down.name}, restarted under FAKETIME={spec!r} ({what}); heal: {self.up.name}, restarted"
        return [node], detail, node == leader

    def _heal(self) -> None:
        self.env.restart_under(self.node, None, self.up)


class FaketimeSkew(FaketimeRestart):
    kind = "clock-skew-faketime"

    def _spec(self) -> tuple[str, str]:
        offset = skew_s(self.rng)
        return f"{offset:+d}s", f"wall and monotonic clocks {offset:+d} s"


class FaketimeRate(FaketimeRestart):
    kind = "clock-rate-faketime"

    def _spec(self) -> tuple[str, str]:
        rate = self.rng.choice((0.5, 2.0))
        return f"+0 x{rate:g}", f"wall and monotonic clocks run x{rate:g}: Raft timers {'fast' if rate > 1 else 'slow'}"


class KillAfterCompaction(Nemesis):
    """SIGKILL a node the moment a new log-compaction dump of it appears (its journal may not be
    cut yet); heal: restart it, so it restores from that dump. Followers compact first (a leader
    waits for four times the threshold), so every node is watched."""

    kind = "kill-after-compaction"

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        ids = self.env.node_ids
        before = {n: self.env.dump_stamp(n) for n in ids}
        began = time.monotonic()
        node = None
        while node is None and time.monotonic() - began < COMPACTION_WAIT_S:
            node = next((n for n in ids if self.env.dump_stamp(n) != before[n]), None)
            if node is None:
                time.sleep(0.005)
        waited = time.monotonic() - began
        self.seen = node is not None
        self.node = node or self._pick(leader, 0.0)
        self.env.cluster.kill(self.node)
        self.env.killed.add(self.node)
        if self.seen:
            detail = f"SIGKILL {self.node} right after its log compaction wrote a dump ({waited:.1f} s watched)"
        else:
            detail = f"no dump written within {COMPACTION_WAIT_S:.0f} s; SIGKILL {self.node} anyway"
        return [self.node], detail + "; restarted from its data directory on heal", self.node == leader

    def _heal(self) -> None:
        self.env.restart(self.node)


class KillAll(Nemesis):
    """SIGKILL every node at once (a power cut of the whole cluster); heal: start them all again."""

    kind = "kill-all"

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        ids = self.env.node_ids
        for m in self.env.cluster.members:
            if m.proc is not None and m.alive():
                m.proc.kill()
        for n in ids:
            self.env.cluster.kill(n)  # reaps each one
            self.env.killed.add(n)
        return list(ids), f"SIGKILL {' '.join(ids)} at once; all restarted from their data directories on heal", True

    def _heal(self) -> None:
        ids = self.env.node_ids
        for n in ids:
            if self.env.dump_stamp(n) is not None:
                self.env.dump_restores.append(n)
            self.env.cluster.spawn(n)
        for n in ids:
            self.env.cluster.wait_ready(n, 60.0)
            self.env.killed.discard(n)


class ReplaceNode(Nemesis):
    """A follower replaced by a new node at a new address while the workload writes.

    Inject: a new node (an id no node had, new ports; in the lab, in the old node's namespace,
    at its address) is started with every member in its --peers (it binds its Raft port first:
    pysyncobj issue #89), then ``AddMember``: four members. Heal: ``RemoveMember`` of the old
    node, which is then stopped and dropped from the cluster for good. A member that meanwhile
    became leader cannot remove itself: it is stopped first (another member takes over), then
    removed. A refused change (``change_pending``, no quorum yet during an election) is retried.
    """

    kind = "replace-node"
    RETRY_S: ClassVar[float] = 45.0

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        env = self.env
        quiet = [n for n in env.node_ids if n != leader and n not in env.killed and n not in env.paused]
        self.old = self.rng.choice(quiet or env.node_ids)
        self.new = env.next_node_id()
        env.replaced.append((self.old, self.new))
        env.lab.alias(self.new, self.old)
        env.clocks.add(self.new)
        host = env.cluster.node(self.old).raft_address.rpartition(":")[0]
        m = env.cluster.new_member(self.new, host=host)
        env.cluster.spawn(self.new)
        env.cluster.wait_ready(self.new, 60.0)
        if env.on_member is not None:
            env.on_member(self.new, m.grpc_address)
        self._change(lambda ops: ops.add_member(self.new, m.raft_address, m.grpc_address), done_code="already_member")
        return (
            [self.old, self.new],
            f"{self.new} at {m.raft_address} added beside {self.old}; {self.old} removed and stopped on heal",
            False,
        )

    def _heal(self) -> None:
        env = self.env
        self._change(lambda ops: ops.remove_member(self.old), done_code="not_member")
        env.cluster.forget_member(self.old)
        env.killed.discard(self.old)
        env.paused.discard(self.old)

    def _change(self, call: Callable[[Any], Any], done_code: str) -> None:
        from waitgraph.sdk import RpcError

        deadline = time.monotonic() + self.RETRY_S
        last = ""
        with self.env.cluster.client(timeout_s=10) as ops:
            while time.monotonic() < deadline:
                try:
                    call(ops)
                    return
                except RpcError as exc:
                    code = exc.code or exc.status.name
                    if code == done_code:  # an earlier attempt whose answer was lost took effect
                        return
                    if code == "member_is_leader":
                        self.env.stop(self.old, signal.SIGTERM)  # a new leader is elected without it
                    last = str(exc)
                time.sleep(0.5)
        raise RuntimeError(f"the membership change did not go through in {self.RETRY_S:.0f} s: {last}")


class PausePartition(Nemesis):
    """A node paused (SIGSTOP) and, while it is, the network partitioned (one node isolated, the
    leader isolated, or a majority/minority split); heal both."""

    kind = "pause+partition"

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        self.pause = Pause(self.env, self.rng)
        paused, what, cut = self.pause._inject(leader)
        kind = self.rng.choice((IsolateNode, IsolateLeader, SplitMajority))
        self.partition = kind(self.env, self.rng)
        targets, cut_what, cut2 = self.partition._inject(leader)
        return sorted({*paused, *targets}), f"{what}; during it {kind.kind} {cut_what}", cut or cut2

    def _heal(self) -> None:
        self.partition._heal()
        self.pause._heal()


class KillDuringSkew(Nemesis):
    """A node restarted under a skewed clock (libfaketime), and while it runs so another node is
    SIGKILLed; heal: restart the killed one, then the skewed one on the real clock."""

    kind = "kill+clock-skew"

    def _inject(self, leader: str | None) -> tuple[list[str], str, bool]:
        self.skew = FaketimeSkew(self.env, self.rng)
        skewed, what, cut = self.skew._inject(leader)
        others = [n for n in self.env.node_ids if n not in skewed]
        self.node = leader if leader in others and self.rng.random() < 0.5 else self.rng.choice(others)
        self.env.cluster.kill(self.node)
        self.env.killed.add(self.node)
        return [*skewed, self.node], f"{what}; during it SIGKILL {self.node}", cut or self.node == leader

    def _heal(self) -> None:
        self.env.restart(self.node)
        self.skew._heal()


NEMESES: dict[str, type[Nemesis]] = {
    cls.kind: cls
    for cls in (
        IsolateNode,
        IsolateLeader,
        SplitMajority,
        Bridge,
        MajoritiesRing,
        OneWayDrop,
        PacketLoss,
        Delay,
        Pause,
        Kill,
        WallclockStep,
        WallclockDrift,
        FaketimeSkew,
        FaketimeRate,
        KillAfterCompaction,
        KillAll,
        ReplaceNode,
        PausePartition,
        KillDuringSkew,
    )
}
assert tuple(NEMESES) == ALL_KINDS


def heal_everything(env: ChaosEnv) -> None:
    """Whatever state the nemeses left: every link whole, every node running, every clock true."""
    env.lab.heal_network()
    for node in list(env.paused):
        with contextlib.suppress(ProcessLookupError):
            os.kill(env.pid(node), signal.SIGCONT)
        env.paused.discard(node)
    env.clocks.reset()
    for node in sorted(env.clocks.faketime):
        env.restart_under(node, None, signal.SIGKILL)
    for m in env.cluster.members:
        if m.proc is not None and not m.alive():
            env.restart(m.node_id)


# -- the schedule ------------------------------------------------------------------------------------


@dataclass
class Schedule:
    """Seeded: which nemesis when, for how long. With ``cover_all`` every kind runs once (in a
    seeded order) before any repeats, and the slots shrink so they fit in the run."""

    env: ChaosEnv
    kinds: Sequence[str]
    seed: int
    duration_s: float
    cover_all: bool = True
    max_slot_s: float = 12.0
    min_slot_s: float = 3.0
    records: list[FaultRecord] = field(default_factory=list)
    heals_ns: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._stop = threading.Event()
        self._current: Nemesis | None = None

    def plan(self) -> list[str]:
        first = list(self.kinds)
        self.rng.shuffle(first)
        return first if self.cover_all else []

    def run(self, deadline: float) -> None:
        """Fault, heal, quiet; until ``deadline`` (monotonic) or :meth:`stop`. Never raises: an
        error of a nemesis is recorded and the run heals and goes on."""
        queue = self.plan()
        while self.kinds and not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if queue:
                # Every kind still owed gets an equal share of what is left once the restarts
                # still owed are paid for (at least min_slot_s).
                overhead = RESTART_OVERHEAD_S * sum(1 for k in queue if k in RESTARTING_KINDS)
                slot = max(self.min_slot_s, min(self.max_slot_s, (remaining - overhead) / len(queue)))
                if remaining < 1.0:
                    break
            else:
                slot = self.max_slot_s
                if remaining < slot * 0.6:
                    break
            kind = queue.pop(0) if queue else self.rng.choice(list(self.kinds))
            fault_s = slot * self.rng.uniform(0.5, 0.7)
            quiet_s = slot - fault_s
            nemesis = NEMESES[kind](self.env, random.Random(self.rng.random()))
            self._current = nemesis
            try:
                self.records.append(nemesis.start())
                self._stop.wait(fault_s)
            except Exception as exc:  # a nemesis that fails is a harness problem: report it
                self.errors.append(f"{kind}: {type(exc).__name__}: {exc}")
                with contextlib.suppress(Exception):
                    heal_everything(self.env)
            finally:
                try:
                    nemesis.heal()
                except Exception as exc:
                    self.errors.append(f"{kind} heal: {type(exc).__name__}: {exc}")
                    with contextlib.suppress(Exception):
                        heal_everything(self.env)
                self._current = None
                self.heals_ns.append(time.monotonic_ns())
            self._stop.wait(quiet_s)

    def stop(self) -> None:
        self._stop.set()
