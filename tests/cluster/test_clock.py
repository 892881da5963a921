"""The node's logical clock: replicated time carried forward by the monotonic clock only."""

from __future__ import annotations

from dataclasses import dataclass

from waitgraph.node.clock import LogicalClock


@dataclass
class Clocks:
    wall: float = 1_700_000_000.0
    mono: float = 500.0
    replicated: int = 0

    def clock(self) -> LogicalClock:
        return LogicalClock(lambda: self.replicated, wall=lambda: self.wall, monotonic=lambda: self.mono)

    def sleep(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def test_a_new_cluster_starts_at_wall_time_and_advances_with_the_monotonic_clock() -> None:
    c = Clocks()
    clock = c.clock()
    assert clock.now_ms() == 1_700_000_000_000  # nothing applied yet: the wall clock
    c.replicated = clock.now_ms()  # the first stamp is applied
    assert clock.now_ms() == 1_700_000_000_000  # anchored on it
    c.sleep(2.5)
    c.wall += 3600  # from now on the wall clock no longer counts
    assert clock.now_ms() == 1_700_000_002_500


def test_wall_clock_steps_do_not_move_logical_time() -> None:
    c = Clocks(replicated=1_700_000_000_000)
    clock = c.clock()
    start = clock.now_ms()
    c.wall += 3600  # stepped an hour ahead
    c.sleep(1)
    assert clock.now_ms() == start + 1000
    c.wall -= 7200  # and two hours back
    c.sleep(1)
    assert clock.now_ms() == start + 2000


def test_an_existing_cluster_resumes_from_the_replicated_time_not_the_wall_clock() -> None:
    c = Clocks(replicated=1_600_000_000_000)  # restored state: the last stamp, long before wall time
    clock = c.clock()
    assert clock.now_ms() == 1_600_000_000_000
    c.sleep(0.25)
    assert clock.now_ms() == 1_600_000_000_250


def test_a_stamp_ahead_of_this_node_moves_its_anchor_and_time_never_goes_back() -> None:
    c = Clocks(replicated=1_000)
    clock = c.clock()
    assert clock.now_ms() == 1_000
    c.replicated = 9_000  # another node stamped further ahead (its monotonic clock ran faster)
    c.sleep(0.001)
    assert clock.now_ms() == 9_000
    c.sleep(1)
    assert clock.now_ms() == 10_000
    c.replicated = 4_000  # a smaller replicated value never pulls the clock back
    assert clock.now_ms() == 10_000


def test_a_follower_that_becomes_leader_keeps_time_running_through_the_election() -> None:
    c = Clocks(replicated=50_000)
    follower = c.clock()
    assert follower.now_ms() == 50_000  # it last saw the old leader's stamp here
    c.sleep(1.5)  # the old leader dies; an election takes 1.5 s; nothing is stamped meanwhile
    assert follower.now_ms() == 51_500
