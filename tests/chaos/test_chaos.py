"""The chaos harness: the lab leaves nothing behind, each nemesis does what it says, and a seeded
3-node run under every nemesis passes the checkers.

The harness tests need root (network namespaces, iptables); without it they are skipped with the
reason printed, and with ``WAITGRAPH_CHAOS_REQUIRED=1`` (set by .ci/run) they fail instead.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from waitgraph.dev.localcluster import LocalCluster
from waitgraph.sdk import RpcError, SyncOperatorClient

from .nemesis import ALL_KINDS, NEMESES, ChaosEnv, Clocks, heal_everything, libfaketime
from .net import Lab, LabError, in_netns, leftovers, netns_unavailable, owned, sweep_stale
from .runner import BASE_PORT, Monitor, RunConfig, RunResult, run_chaos

REPO = Path(__file__).resolve().parents[2]
CHAOS_SEED = int(os.environ.get("WAITGRAPH_CHAOS_SEED", "7"))
CHAOS_DURATION_S = float(os.environ.get("WAITGRAPH_CHAOS_DURATION", "120"))

_why = netns_unavailable()
if _why is not None and os.environ.get("WAITGRAPH_CHAOS_REQUIRED"):
    pytest.fail(f"CI must run the chaos harness, but network namespaces are unavailable: {_why}", pytrace=False)
needs_netns = pytest.mark.skipif(_why is not None, reason=f"network namespaces unavailable: {_why}")
pytestmark = [needs_netns]


# -- helpers -----------------------------------------------------------------------------------------


def listen(lab: Lab, node_id: str, port: int) -> socket.socket:
    with in_netns(lab.node(node_id).ns):
        s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((lab.node(node_id).ip, port))
    s.listen(16)
    return s


def can_connect(lab: Lab, src: str, dst: str, port: int, timeout_s: float = 1.0) -> bool:
    with in_netns(lab.node(src).ns):
        c = socket.socket()
    c.settimeout(timeout_s)
    try:
        c.connect((lab.node(dst).ip, port))
        return True
    except OSError:
        return False
    finally:
        c.close()


# -- the lab -----------------------------------------------------------------------------------------


def test_lab_builds_a_network_and_removes_everything() -> None:
    with Lab(3) as lab:
        prefix = lab.prefix
        made = owned(prefix)
        assert sorted(made["namespaces"]) == sorted([f"{prefix}-br", f"{prefix}-n1", f"{prefix}-n2", f"{prefix}-n3"])
        assert made["links"] == [f"{prefix}-h"]
        server = listen(lab, "n2", 9000)
        # the root namespace (driver, workload) reaches every node; nodes reach each other
        socket.create_connection((lab.node("n2").ip, 9000), 2).close()
        assert can_connect(lab, "n1", "n2", 9000)
        sleeper = subprocess.Popen([*lab.command_prefix("n3"), "sleep", "300"])
        server.close()
    assert leftovers(prefix) == {}
    assert sleeper.wait(5) == -signal.SIGKILL


def test_lab_cleans_up_after_an_exception_inside() -> None:
    prefix = ""
    with pytest.raises(RuntimeError, match="boom"), Lab(3) as lab:
        prefix = lab.prefix
        lab.cut([("n1", "n2")])
        sleeper = subprocess.Popen([*lab.command_prefix("n1"), "sleep", "300"])
        raise RuntimeError("boom")
    assert prefix and leftovers(prefix) == {}
    assert sleeper.wait(5) == -signal.SIGKILL


def lab_process() -> tuple[subprocess.Popen[str], str]:
    """Another process that builds a 2-node lab, says its prefix, and sleeps inside ``with``."""
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1])\n"
        "from tests.chaos.net import Lab\n"
        "with Lab(2) as lab:\n"
        "    print(lab.prefix, flush=True)\n"
        "    time.sleep(300)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(REPO)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    prefix = proc.stdout.readline().strip()
    assert leftovers(prefix)["namespaces"]
    return proc, prefix


def test_a_killed_run_is_swept_by_the_next() -> None:
    proc, prefix = lab_process()
    try:
        assert prefix not in sweep_stale()  # its owner lives: not stale
        assert leftovers(prefix)["namespaces"]
    finally:
        proc.kill()  # SIGKILL: no atexit, no cleanup
        proc.wait(5)
    assert leftovers(prefix)["namespaces"]
    assert prefix in sweep_stale()
    assert leftovers(prefix) == {}


def test_sigterm_unwinds_and_removes_the_lab() -> None:
    proc, prefix = lab_process()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 128 + signal.SIGTERM
    assert leftovers(prefix) == {}


def test_without_namespaces_the_lab_says_so_and_refuses_network_faults(capfd: pytest.CaptureFixture[str]) -> None:
    with Lab(3, force_loopback=True) as lab:
        assert lab.mode == "loopback" and not lab.network_faults
        assert lab.hosts == ["127.0.0.1"] * 3 and lab.command_prefix("n1") == []
        with pytest.raises(LabError, match="network faults need namespaces"):
            lab.cut([("n1", "n2")])
    assert "NETWORK NAMESPACES UNAVAILABLE" in capfd.readouterr().err


def test_cut_one_way_drop_and_loss_block_what_they_say_and_heal_restores() -> None:
    with Lab(3) as lab:
        servers = [listen(lab, n, 9000) for n in ("n1", "n2", "n3")]
        lab.cut([("n1", "n2")])
        assert not can_connect(lab, "n1", "n2", 9000)
        assert not can_connect(lab, "n2", "n1", 9000)
        assert can_connect(lab, "n1", "n3", 9000) and can_connect(lab, "n3", "n2", 9000)
        socket.create_connection((lab.node("n1").ip, 9000), 2).close()  # the driver is never cut
        lab.heal_network()
        assert can_connect(lab, "n1", "n2", 9000) and can_connect(lab, "n2", "n1", 9000)

        lab.drop("n3", "n1")
        assert not can_connect(lab, "n3", "n1", 9000)
        assert can_connect(lab, "n3", "n2", 9000)
        assert lab.rules("n1") == [f"-A CHAOS -s {lab.node('n3').ip}/32 -j DROP"]
        lab.heal_network()
        assert can_connect(lab, "n3", "n1", 9000)

        lab.drop("n2", "n3", probability=1.0)  # the statistic match, at a probability that always drops
        assert not can_connect(lab, "n2", "n3", 9000)
        assert "--mode random --probability 1" in lab.rules("n3")[0]
        lab.heal_network()
        assert can_connect(lab, "n2", "n3", 9000)
        assert all(lab.rules(n) == [] for n in ("n1", "n2", "n3"))
        for s in servers:
            s.close()


def test_raft_links_go_through_the_proxy_and_it_delays_them() -> None:
    with Lab(2) as lab:
        raft = {"n1": f"{lab.node('n1').ip}:7100", "n2": f"{lab.node('n2').ip}:7101"}
        server = listen(lab, "n2", 7101)
        lab.install_proxies(raft)
        assert lab.proxies is not None
        with in_netns(lab.node("n1").ns):
            c = socket.socket()
        c.settimeout(5)
        c.connect((lab.node("n2").ip, 7101))
        a, peer = server.accept()
        assert peer[0] == lab.node("n1").ip  # the proxy connects from the node's own address

        def round_trip() -> float:
            began = time.monotonic()
            c.sendall(b"ping")
            assert a.recv(4) == b"ping"
            a.sendall(b"pong")
            assert c.recv(4) == b"pong"
            return time.monotonic() - began

        round_trip()
        lab.proxies.set_delay("n1", "n2", 150)
        lab.proxies.set_delay("n2", "n1", 100)
        # a lower bound, not a timing: the proxy holds each chunk for its delay before sending it
        assert round_trip() >= 0.25 * 0.98
        lab.heal_network()
        assert lab.proxies.delays() == {}
        stats = lab.proxies.stats[("n1", "n2")]
        assert stats.connections == 1 and stats.bytes_up == 8 and stats.bytes_down == 8
        # a partition cuts proxied links too: the wire still carries node address to node address
        lab.cut([("n1", "n2")])
        c.sendall(b"lost")
        a.settimeout(1.0)
        with pytest.raises(socket.timeout):
            a.recv(4)
        lab.heal_network()
        a.settimeout(10)
        assert a.recv(4) == b"lost"  # TCP retransmits once the rule is gone
        for s in (c, a, server):
            s.close()


def test_clock_files_move_the_wall_clock_of_a_node_process(tmp_path: Path) -> None:
    clocks = Clocks(tmp_path, ["n1"])
    probe = (
        "import time, sys\n"
        "for line in sys.stdin:\n"
        "    time.sleep(0.01)\n"
        "    print(time.time(), time.time_ns() / 1e9, time.monotonic(), flush=True)\n"
    )
    env = dict(os.environ, **clocks.env("n1"))
    proc = subprocess.Popen(
        [sys.executable, "-c", probe], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )

    def offset() -> tuple[float, float, float]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        wall, wall_ns, mono = map(float, proc.stdout.readline().split())
        return wall - time.time(), wall_ns - time.time(), mono - time.monotonic()

    try:
        assert all(abs(x) < 0.5 for x in offset())
        clocks.step("n1", 600.0)
        time.sleep(0.1)
        wall, wall_ns, mono = offset()
        assert 599 < wall < 601 and 599 < wall_ns < 601
        assert abs(mono) < 0.5  # the monotonic clock is never touched
        clocks.step("n1", -30.0)
        time.sleep(0.1)
        assert -31 < offset()[0] < -29
        clocks.reset("n1")
        time.sleep(0.1)
        assert abs(offset()[0]) < 0.5
        clocks.drift("n1", 5.0)
        time.sleep(2.0)
        assert offset()[0] > 6.0  # gains four seconds a second (the file is rewritten every 0.1 s)
        clocks.reset("n1")
        time.sleep(0.1)
        assert abs(offset()[0]) < 0.5
    finally:
        proc.kill()
        proc.wait(5)
        clocks.close()


# -- nemeses on a real cluster -----------------------------------------------------------------------


@dataclass
class LabCluster:
    lab: Lab
    cluster: LocalCluster
    clocks: Clocks
    monitor: Monitor
    env: ChaosEnv = field(init=False)

    def __post_init__(self) -> None:
        self.env = ChaosEnv(self.lab, self.cluster, self.clocks, self.monitor.leader)

    def ops(self) -> SyncOperatorClient:
        return self.cluster.client(timeout_s=2)

    def status(self, node_id: str) -> Any:
        with self.ops() as ops:
            return ops.status(self.cluster.node(node_id).grpc_address)

    def wait(self, what: str, cond: Any, timeout_s: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                value = cond()
            except RpcError:
                value = None
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(
            f"timed out waiting for {what}\n" + "\n".join(m.log_tail(1500) for m in self.cluster.members)
        )


@pytest.fixture
def lab_cluster(tmp_path: Path) -> Iterator[LabCluster]:
    with Lab(3) as lab:
        clocks = Clocks(tmp_path / "clocks", ["n1", "n2", "n3"])
        cluster = LocalCluster(
            root=tmp_path / "cluster",
            nodes=3,
            base_port=BASE_PORT,
            hosts=lab.hosts,
            command_prefix=lambda m: lab.command_prefix(m.node_id),
            extra_env=lambda m: clocks.env(m.node_id),
            serve_args=["--insecure"],
        )
        cluster.prepare()
        lab.install_proxies({m.node_id: m.raft_address for m in cluster.members})
        monitor: Monitor | None = None
        try:
            cluster.start(60)
            cluster.wait_for_leader(60)
            assert cluster.credentials is not None
            monitor = Monitor({m.node_id: m.grpc_address for m in cluster.members}, cluster.credentials.admin).start()
            lc = LabCluster(lab, cluster, clocks, monitor)
            yield lc
            heal_everything(lc.env)
        finally:
            if monitor is not None:
                monitor.stop()
            cluster.stop()
            clocks.close()


def agreed_leader(lc: LabCluster, among: list[str]) -> str | None:
    with lc.ops() as ops:
        statuses = [ops.status(lc.cluster.node(n).grpc_address) for n in among]
    leaders = [s.node_id for s in statuses if s.role == "leader" and s.has_quorum]
    return leaders[0] if len(leaders) == 1 and {s.leader_id for s in statuses} == {leaders[0]} else None


def test_nemeses_act_on_real_nodes(lab_cluster: LabCluster) -> None:
    lc = lab_cluster
    rng = random.Random(1)
    ids = ["n1", "n2", "n3"]
    old = lc.wait("a leader", lc.monitor.leader)
    # the nodes really run under the lab: in their namespaces, Raft via the proxies, with the clock hook
    for m in lc.cluster.members:
        assert m.pid is not None
        assert os.readlink(f"/proc/{m.pid}/ns/net") != os.readlink(f"/proc/{os.getpid()}/ns/net")
        assert b"CHAOS_CLOCK_FILE=" in Path(f"/proc/{m.pid}/environ").read_bytes()
    assert lc.lab.proxies is not None
    assert sum(s.connections for s in lc.lab.proxies.stats.values()) >= 3

    # isolate the leader: the other two elect one of themselves; heal: all three agree again
    nem = NEMESES["isolate-leader"](lc.env, rng)
    rec = nem.start()
    assert rec.targets == [old] and rec.leader_cut
    rest = [n for n in ids if n != old]
    new = lc.wait("a new leader in the majority", lambda: agreed_leader(lc, rest))
    assert new != old
    nem.heal()
    lc.wait("one leader for all three", lambda: agreed_leader(lc, ids))

    # pause: the node stops answering; continue: it answers again
    nem = NEMESES["pause"](lc.env, rng)
    rec = nem.start()
    paused = rec.targets[0]
    with lc.ops() as ops, pytest.raises(RpcError):
        ops.call(lc.cluster.node(paused).grpc_address, "Status", _status_request(), timeout_s=1.0)
    nem.heal()
    lc.wait("the paused node to answer", lambda: lc.status(paused))

    # kill: the process is gone; heal restarts it on its data directory and it catches up
    nem = NEMESES["kill"](lc.env, rng)
    rec = nem.start()
    killed = rec.targets[0]
    assert not lc.cluster.node(killed).alive()
    nem.heal()
    assert lc.cluster.node(killed).alive()
    lc.wait("one leader for all three", lambda: agreed_leader(lc, ids))
    applied = lc.wait("the restarted node applying the log", lambda: lc.status(killed).applied_index)
    assert applied > 0

    # clock skew: the node's wall clock (time.time, through the hook its environment loads; the
    # hook itself is tested above) runs an hour ahead, yet what it stamps is logical time carried
    # forward by its monotonic clock (cluster/node/clock.py): the cluster's time does not jump, and the
    # node keeps serving
    nem = NEMESES["wallclock-step"](lc.env, rng)
    rec = nem.start()
    skewed = rec.targets[0]
    assert lc.clocks.offsets_s[skewed] != 0
    lc.clocks.step(skewed, 3600.0)
    assert environ_of(lc.env.pid(skewed)).get("CHAOS_CLOCK_FILE") == str(lc.clocks.file(skewed))
    time.sleep(0.2)  # the hook re-reads the file every 50 ms
    _, after, _, now_ms = node_clock(lc, skewed)
    assert now_ms / 1000 < after + 5, now_ms / 1000 - after
    nem.heal()
    assert lc.clocks.offsets_s[skewed] == 0
    assert rec.end_ns is not None and rec.end_ns > rec.start_ns
    assert all(m.alive() for m in lc.cluster.members)

    # two faults at once: a node paused while the network is partitioned; heal undoes both
    nem = NEMESES["pause+partition"](lc.env, rng)
    rec = nem.start()
    assert lc.env.paused and any(lc.lab.rules(n) for n in ids), rec.detail
    nem.heal()
    assert not lc.env.paused and all(lc.lab.rules(n) == [] for n in ids)
    lc.wait("one leader for all three", lambda: agreed_leader(lc, ids))

    # kill -9 of every node at once: none left; heal starts all three, they elect a leader again
    nem = NEMESES["kill-all"](lc.env, rng)
    rec = nem.start()
    assert rec.targets == ids and rec.leader_cut and not any(m.alive() for m in lc.cluster.members)
    nem.heal()
    assert all(m.alive() for m in lc.cluster.members)
    lc.wait("one leader for all three after the whole cluster was killed", lambda: agreed_leader(lc, ids))


def node_clock(lc: LabCluster, node_id: str) -> tuple[float, float, float, int]:
    """The node's own wall clock at one write it applied (it logs every write with its clock's
    timestamp), bracketed by the real time before the write was sent and after the log line was
    seen: (before, after, the node's clock, the cluster's now_ms read through the node)."""
    m = lc.cluster.node(node_id)
    rid = f"chaos-clock-{node_id}-{time.monotonic_ns()}"
    token = lc.cluster.credentials.admin if lc.cluster.credentials else None
    sent: list[float] = []

    def freeze() -> bool:
        # Just restarted: the gRPC channel may still be backing off from the refused connections
        # of the restart. Sent again with the same request id, the write applies once.
        sent.append(time.time())
        via.freeze("chaos test: clock", request_id=rid)
        return True

    with SyncOperatorClient([m.grpc_address], token, call_timeout_s=5) as via:
        lc.wait(f"a write through {node_id}", freeze, 20)
        real = sent[0]
        via.unfreeze("chaos test: clock", request_id=rid + "-u")
        now_ms = via.status(m.grpc_address, fresh=True).now_ms

    def stamped() -> float | None:
        for line in m.log_path.read_text(errors="replace").splitlines():
            if f'"{rid}"' in line and line.startswith("{"):
                return datetime.fromisoformat(json.loads(line)["timestamp"]).timestamp()
        return None

    clock = lc.wait(f"{node_id} logging {rid}", stamped, 10)
    return real, time.time(), clock, now_ms


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def faketime_of(pid: int) -> str | None:
    env = environ_of(pid)
    if "libfaketime" not in env.get("LD_PRELOAD", ""):
        return None
    return env["FAKETIME"]


@pytest.mark.skipif(libfaketime() is None, reason="libfaketime not installed (apt-get install faketime)")
def test_faketime_nemeses_restart_a_node_with_skewed_and_scaled_clocks(lab_cluster: LabCluster) -> None:
    """Each variant: restart a follower under libfaketime; its own clock (the timestamps it logs)
    is off by the offset or runs at the rate; it takes part in electing a new leader when the
    leader dies; heal restarts it on the real clock."""
    lc = lab_cluster
    ids = ["n1", "n2", "n3"]
    variants = [
        ("+30s", signal.SIGTERM),
        ("-3600s", signal.SIGKILL),
        ("+0 x2", signal.SIGKILL),
        ("+0 x0.5", signal.SIGTERM),
    ]
    for spec, sig in variants:
        leader = lc.wait("a leader", lambda: agreed_leader(lc, ids))
        node = next(n for n in ids if n != leader)
        lc.env.restart_under(node, spec, sig)
        assert faketime_of(lc.env.pid(node)) == spec
        before, after, clock, now_ms = node_clock(lc, node)
        if spec.endswith("s"):
            offset = float(spec[:-1])
            print(f"{node} under FAKETIME={spec!r}: its clock {clock - after:+.2f}..{clock - before:+.2f} s off")
            assert clock - after - 0.5 <= offset <= clock - before + 0.5, (spec, clock - before, clock - after)
            # the write it stamped carries logical time, not its skewed clock (cluster/node/clock.py)
            assert now_ms / 1000 < after + 5, (spec, now_ms / 1000 - after)
        else:
            time.sleep(4.0)
            before2, after2, clock2, _ = node_clock(lc, node)
            rate = float(spec.split("x")[1])
            # the node applied each write between its brackets: the rate lies within these bounds
            low, high = (clock2 - clock) / (after2 - before), (clock2 - clock) / (before2 - after)
            print(f"{node} under FAKETIME={spec!r}: its clock ran x{low:.2f}..x{high:.2f} of real time")
            assert 0.95 * low <= rate <= 1.05 * high, (spec, low, high)
        # the faked node is one of the two left when the leader dies: no leader without its vote
        lc.cluster.kill(leader)
        rest = [n for n in ids if n != leader]
        lc.wait(f"a new leader of {rest} ({node} under {spec})", lambda rest=rest: agreed_leader(lc, rest))
        lc.env.restart(leader)
        lc.env.restart_under(node, None, sig)
        assert faketime_of(lc.env.pid(node)) is None
        lc.wait("one leader for all three", lambda: agreed_leader(lc, ids))
    assert lc.clocks.faketime == {}


def _status_request() -> Any:
    from waitgraph.proto.v1 import operator_pb2

    return operator_pb2.StatusRequest()


def test_a_failed_run_exits_1_with_the_seed_and_the_excerpt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from . import runner

    def failed(cfg: RunConfig) -> RunResult:
        return RunResult(cfg, False, "the table", excerpt="  >> 12  ok  epoch 3 after 4")

    monkeypatch.setattr(runner, "run_chaos", failed)
    assert runner.main(["--nodes", "5", "--duration", "9", "--seed", "42"]) == 1
    out = capsys.readouterr().out
    assert "the table" in out and "(seed 42)" in out and ">> 12  ok  epoch 3 after 4" in out
    assert "scripts/chaos --nodes 5 --duration 9 --seed 42" in out


def test_a_run_too_short_for_every_nemesis_passes_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a violation fails a run: one that never got to some nemeses says so and exits 0."""
    from . import runner

    injected = [runner.FaultRecord("kill", ["n1"], "killed n1", 0, 1)]
    warnings = runner.coverage_warnings(ALL_KINDS, injected, 60)
    assert len(warnings) == 1 and "never injected" in warnings[0] and "120 s" in warnings[0]
    assert runner.coverage_warnings(["kill"], injected, 60) == []

    def short(cfg: RunConfig) -> RunResult:
        return RunResult(cfg, True, "the table", warnings=warnings)

    monkeypatch.setattr(runner, "run_chaos", short)
    assert runner.main(["--nodes", "3", "--duration", "60", "--seed", "7"]) == 0
    assert f"warning: {warnings[0]}" in capsys.readouterr().out


# -- the seeded run ----------------------------------------------------------------------------------


@pytest.mark.timeout(CHAOS_DURATION_S + 180)
def test_seeded_chaos_run_under_every_nemesis(tmp_path: Path) -> None:
    """120 s of faults on 3 nodes (~2m30 with start, heal and checks), every nemesis at least once
    (two at once, a kill right after a log compaction, a kill -9 of the whole cluster and a node
    replaced at a new address included; at 90 s the nineteen kinds did not all fit on a loaded
    machine), the log compacting every hundred entries so that restarts restore from dumps,
    settled runs retiring 5 s after they settle (their acknowledged writes then checked against
    the tombstones and the history stores); fails with the seed and the checker's first anomaly.
    ``WAITGRAPH_CHAOS_SEED`` / ``WAITGRAPH_CHAOS_DURATION`` change the run."""
    cfg = RunConfig(nodes=3, duration_s=CHAOS_DURATION_S, seed=CHAOS_SEED, history_out=tmp_path / "history.jsonl")
    result = run_chaos(cfg)
    print(result.table)
    assert {r.kind for r in result.records} == set(ALL_KINDS), result.table
    assert result.ok, (
        f"chaos run failed (seed {CHAOS_SEED}; history {cfg.history_out})\n{result.table}\n\n"
        f"shortest excerpt:\n{result.excerpt}"
    )
    counts = result.report.op_counts
    # Short attempts against faulted nodes end unknown; the checker resolves every one of them.
    assert counts["unknown_applied"] + counts["unknown_not_applied"] > 0, result.table
    assert not counts.get("unknown_unresolved"), result.table
    # The lab compacts, and restarts restore from the dumps; one kill landed right after a dump.
    assert sum(result.dumps.values()) > 0 and result.dump_restores, result.table
    after = [r for r in result.records if r.kind == "kill-after-compaction"]
    assert any("right after its log compaction" in r.detail for r in after), result.table
    # The nodes run with a short retention (LAB_RETENTION_MS): runs retire, and tombstones are
    # forgotten, while the faults act; the checker found acknowledged writes among the retired.
    stats = result.report.stats
    assert stats["retired_runs"] > 0 and stats["retired_executions"] > 0, result.table
    assert stats["retired_tombstones_forgotten"] > 0, result.table
    assert stats["creates_found_retired"] > 0, result.table
    # The rules of issue #41 had something to judge: fence probes the fence refused, grants seen
    # with their grantee's status, cancelled runs settled (live, or retired CANCELLED_STABLE).
    assert stats["fence_probes_refused_stale_epoch"] > 0 and stats["grants_judged"] > 0, result.table
    assert stats["cancelled_runs_judged"] + stats["cancelled_runs_retired"] > 0, result.table
