"""Prometheus ``/metrics`` of one node: its local replica and its Raft view, read at scrape time.

``waitgraph serve --metrics-addr host:port`` serves them with prometheus_client on an HTTP server
thread of its own (not served by default). A scrape never runs on the asyncio loop: the collector
copies a handful of numbers out of the state machine under the same lock the service's reads
take (``WaitgraphSyncObj.read``, held between two applies), then builds the families outside it.
The copy is linear in executions and open edges (the oldest open edge, the UNKNOWN side effects),
like ``cancel.metrics``: once per scrape, never per command.

Every value comes from what the core already keeps: gauges from the state, counters from the
replicated ``State.counters`` (so every replica reports the same totals at the same applied
index, and they survive restarts and snapshots). Labels are bounded enums only (role, outcome,
mode, decision kind): never a run, agent, execution or target id, nor any free text.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from statemachine import StateMachine
from statemachine.cancel import HISTOGRAM_BOUNDS_MS
from statemachine.cancel import metrics as cancel_metrics
from statemachine.recovery_state import DecisionKind, RolloutMode

logger = logging.getLogger("waitgraph.cluster.metrics")

T = TypeVar("T")
Reader = Callable[[Callable[[StateMachine], Any]], Any]

RAFT_ROLES = ("follower", "candidate", "leader")
RECOVERY_OUTCOMES = {
    # counter in State.counters -> outcome label; each committed proposal bumps exactly one of the
    # first four (statemachine/recovery.py), which is why their sum is the confirmed deadlocks.
    "recovery.committed": "rolled_back",
    "recovery.shadowed": "shadowed",
    "recovery.escalated": "escalated",
    "recovery.reconciliation": "reconciliation",
    "recovery.rejected": "voted_down",
}
CONFIRMED = ("recovery.committed", "recovery.shadowed", "recovery.escalated", "recovery.reconciliation")
HISTOGRAMS = {
    "cancel.propagation_ms": (
        "waitgraph_cancel_propagation_seconds",
        "Cancel request to acknowledgement of one execution (logical time of the leader's clock).",
    ),
    "cancel.quiescence_ms": (
        "waitgraph_cancel_quiescence_seconds",
        "Cancel request (new calls rejected) to CANCELLED_STABLE of the whole scope.",
    ),
}


@dataclass(slots=True)
class Sample:
    """The numbers one scrape needs, copied out of the replica under its lock."""

    now_ms: int
    wait_edges: int
    oldest_wait_ms: int | None
    candidate_cycles: int
    epoch: int
    mode: str
    cancel_slo_ms: int
    counters: dict[str, int] = field(default_factory=dict)
    gauges: dict[str, int] = field(default_factory=dict)
    decisions: dict[tuple[str, str], int] = field(default_factory=dict)


def sample(m: StateMachine) -> Sample:
    """Read the replica: call it with the machine lock held (pure, changes nothing)."""
    st = m.state
    oldest: int | None = None
    for waits in st.waits_by_waiter.values():
        for edge in waits.values():
            if oldest is None or edge.registered_at_ms < oldest:
                oldest = edge.registered_at_ms
    rb = st.recovery
    decisions: dict[tuple[str, str], int] = {}
    for d in rb.decisions.values():
        key = (d.mode.value, d.kind.value)
        decisions[key] = decisions.get(key, 0) + 1
    return Sample(
        now_ms=st.now_ms,
        wait_edges=st.edge_count,
        oldest_wait_ms=oldest,
        # Candidates the detector proposed that are still open (waiting for votes and the
        # confirmation window); each open proposal owns its members in open_members.
        candidate_cycles=len(set(rb.open_members.values())),
        epoch=rb.epoch,
        mode=rb.mode.value,
        cancel_slo_ms=st.cancel.slo_ms,
        counters=dict(st.counters),
        gauges=cancel_metrics(st),
        decisions=decisions,
    )


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float, unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value, unit=unit)


def _histogram(name: str, doc: str, counters: dict[str, int], prefix: str) -> HistogramMetricFamily:
    """The core's non-cumulative logical-ms buckets as a Prometheus histogram in seconds."""
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound in HISTOGRAM_BOUNDS_MS:
        running += counters.get(f"{prefix}.le_{bound}", 0)
        buckets.append((floatToGoString(bound / 1000), running))  # type: ignore[no-untyped-call]
    running += counters.get(f"{prefix}.le_inf", 0)
    buckets.append(("+Inf", running))
    total = counters.get(f"{prefix}.sum_ms", 0) / 1000
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)


class WaitgraphCollector(Collector):
    """The node's metrics, computed on each ``collect`` from ``read`` and ``raft_status``.

    ``read(fn)`` runs ``fn`` on the replica between two applies (``WaitgraphSyncObj.read``, or
    ``lambda fn: fn(machine)`` in tests); ``raft_status()`` returns a ``RaftStatus``, or is None
    (no Raft series). ``clock`` is wall-clock seconds: the age of the oldest wait is measured
    against it, since ``registered_at_ms`` is the leader's wall clock when the edge was applied.
    """

    def __init__(
        self,
        read: Reader,
        raft_status: Callable[[], Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.read = read
        self.raft_status = raft_status
        self.clock = clock

    def describe(self) -> Iterable[Metric]:
        return []  # registering must not take the machine lock

    def collect(self) -> Iterator[Metric]:
        try:
            s: Sample | None = self.read(sample)
        except Exception as exc:  # stopped, restoring: the Raft series may still be there
            logger.debug("metrics: the replica cannot be read now: %r", exc)
            s = None
        if s is not None:
            yield from self._replica(s)
        if self.raft_status is not None:
            yield from self._raft()

    def _replica(self, s: Sample) -> Iterator[Metric]:
        c, g = s.counters, s.gauges
        yield _gauge("waitgraph_wait_edges", "Open wait-for edges in this replica.", s.wait_edges)
        now_ms = max(int(self.clock() * 1000), s.now_ms)
        longest = 0.0 if s.oldest_wait_ms is None else max(0, now_ms - s.oldest_wait_ms) / 1000
        yield _gauge(
            "waitgraph_longest_wait_seconds",
            "Age of the oldest open wait edge (0 when there is none).",
            longest,
        )
        yield _gauge(
            "waitgraph_candidate_cycles",
            "Candidate cycles proposed for recovery and still open (awaiting votes or confirmation).",
            s.candidate_cycles,
        )
        yield _counter(
            "waitgraph_deadlocks_confirmed",
            "Candidate cycles still deadlocked at commit (second read): one recovery decision each.",
            sum(c.get(k, 0) for k in CONFIRMED),
        )
        yield _counter(
            "waitgraph_false_positives_retracted",
            "Recovery proposals retracted because the second read no longer saw the deadlock.",
            c.get("recovery.retracted", 0),
        )
        outcomes = CounterMetricFamily(
            "waitgraph_recoveries",
            "Recovery decisions by outcome (rolled_back advanced the epoch).",
            labels=["outcome"],
        )
        for key, outcome in RECOVERY_OUTCOMES.items():
            outcomes.add_metric([outcome], c.get(key, 0))
        yield outcomes
        kinds = GaugeMetricFamily(
            "waitgraph_recovery_decisions_retained",
            "Recovery decisions still retained in the replica (a bounded recent window), by mode and kind.",
            labels=["mode", "kind"],
        )
        for mode in RolloutMode:
            for kind in DecisionKind:
                kinds.add_metric([mode.value, kind.value], s.decisions.get((mode.value, kind.value), 0))
        yield kinds
        modes = GaugeMetricFamily(
            "waitgraph_rollout_mode", "The cluster-wide rollout mode (1 = current).", labels=["mode"]
        )
        for mode in RolloutMode:
            modes.add_metric([mode.value], 1 if mode.value == s.mode else 0)
        yield modes
        yield _counter(
            "waitgraph_livelock_escalations",
            "Recoveries that found the livelock guard tripped (tie-break instead of a victim).",
            c.get("livelock.escalations", 0),
        )
        yield _counter(
            "waitgraph_livelock_fingerprint",
            "Livelocks where the same cycle signature re-formed without the epoch advancing.",
            c.get("livelock.fingerprint", 0),
        )
        yield _gauge("waitgraph_epoch", "The recovery epoch (advanced by every rollback).", s.epoch)
        for prefix, (name, doc) in HISTOGRAMS.items():
            yield _histogram(name, doc, c, prefix)
        yield _counter(
            "waitgraph_leaked_permits",
            "Permits still held by an execution when its cancellation became stable (then released).",
            c.get("cancel.leaked_permits", 0),
        )
        yield _counter(
            "waitgraph_cancellations_requested",
            "Executions a cancellation was requested for.",
            c.get("cancel.requested", 0),
        )
        yield _counter(
            "waitgraph_cancellations_acknowledged",
            "Cancel requests acknowledged by their execution's agent.",
            c.get("cancel.acknowledged", 0),
        )
        yield _counter(
            "waitgraph_cancel_slo_breaches",
            "Executions quarantined because they did not acknowledge cancel within the SLO.",
            c.get("cancel.quarantined", 0),
        )
        yield _gauge(
            "waitgraph_cancel_slo_seconds",
            "The replicated cancellation SLO (quarantine after it).",
            s.cancel_slo_ms / 1000,
        )
        yield _gauge(
            "waitgraph_unknown_side_effects",
            "Side effects whose outcome is UNKNOWN (a human must reconcile them).",
            g.get("unknown_side_effects", 0),
        )
        yield _gauge(
            "waitgraph_quarantined_executions",
            "Executions that ignored their cancel request past the emission budget.",
            g.get("quarantined", 0),
        )
        yield _gauge(
            "waitgraph_open_cancellations", "Cancellation scopes not yet stable.", g.get("open_cancellations", 0)
        )
        yield _gauge(
            "waitgraph_pending_cancel_acks", "Cancel requests awaiting acknowledgement.", g.get("pending_acks", 0)
        )
        yield _gauge(
            "waitgraph_admission_frozen_runs", "Runs whose admission is frozen.", g.get("admission_frozen_runs", 0)
        )
        yield _gauge(
            "waitgraph_admission_frozen_cluster",
            "1 while admission is frozen for the whole cluster.",
            g.get("admission_frozen_cluster", 0),
        )
        yield _gauge("waitgraph_reconciliations_open", "Open reconciliations.", g.get("reconciliations_open", 0))

    def _raft(self) -> Iterator[Metric]:
        assert self.raft_status is not None
        try:
            st = self.raft_status()
        except Exception as exc:
            logger.debug("metrics: no Raft status: %r", exc)
            return
        roles = GaugeMetricFamily("waitgraph_raft_role", "This node's Raft role (1 = current).", labels=["role"])
        for role in RAFT_ROLES:
            roles.add_metric([role], 1 if st.role == role else 0)
        yield roles
        yield _gauge("waitgraph_raft_term", "Current Raft term.", st.term)
        yield _gauge("waitgraph_raft_commit_index", "Raft commit index known to this node.", st.commit_index)
        yield _gauge("waitgraph_raft_applied_index", "Last Raft log index applied to this replica.", st.applied_index)
        yield _gauge(
            "waitgraph_raft_has_quorum",
            "1 when this node knows a leader with a quorum (the gRPC health SERVING condition).",
            int(bool(st.has_quorum)),
        )


@dataclass
class MetricsServer:
    """The /metrics HTTP server thread; :meth:`stop` shuts it down."""

    httpd: WSGIServer
    thread: threading.Thread
    registry: CollectorRegistry

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def serve(address: str, collector: Collector) -> MetricsServer:
    """Serve ``collector`` (alone in its registry) on ``host:port`` from a daemon thread."""
    host, _, port = address.rpartition(":")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    httpd, thread = start_http_server(int(port), addr=host.strip("[]"), registry=registry)
    return MetricsServer(httpd, thread, registry)
