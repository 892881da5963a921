"""Prometheus ``/metrics`` of one node: its local replica and its Raft view, read at scrape time.

``waitgraph serve --metrics-addr host:port`` serves them with prometheus_client on an HTTP server
thread of its own (not served by default). A scrape never runs on the asyncio loop: the collector
copies a handful of numbers out of the state machine under the same lock the service's reads
take (``RaftNode.read_blocking``, held between two applies), then builds the families outside it.
The copy is linear in executions and open edges (the oldest open edge, the UNKNOWN side effects),
like ``cancel.metrics``: once per scrape, never per command.

Every value comes from what the core already keeps: gauges from the state, counters from the
replicated ``State.counters`` (so every replica reports the same totals at the same applied
index, and they survive restarts and snapshots). Labels are bounded enums only (role, outcome,
mode, decision kind, reason codes, the generation bucket of :mod:`waitgraph.statemachine.telemetry`, gRPC
method and code): never a run, agent, execution or target id, nor any free text. Every labelled
family of the replica is declared with all its label combinations (zeros included), so the series
count is the same on an idle node and one that has seen a million runs; docs/metrics.md lists the
families and states the budget that tests/cluster/test_metrics.py checks.

:class:`GrpcMetrics` is the gRPC server interceptor that counts and times every RPC under the
standard ``grpc_server_*`` names (go-grpc-prometheus), so stock gRPC dashboards work as they are.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from waitgraph.node.logs import request_context
from waitgraph.node.raft import REFUSAL_REASONS
from waitgraph.statemachine import StateMachine
from waitgraph.statemachine.cancel import HISTOGRAM_BOUNDS_MS
from waitgraph.statemachine.cancel import metrics as cancel_metrics
from waitgraph.statemachine.enums import EffectOutcome
from waitgraph.statemachine.ids import TARGET_KINDS, kind_of
from waitgraph.statemachine.recovery_state import DecisionKind, RolloutMode
from waitgraph.statemachine.state import orphaned_count
from waitgraph.statemachine.telemetry import COST_BOUNDS, GENERATION_BUCKETS, generation_bucket, parse

logger = logging.getLogger("waitgraph.node.metrics")
# No ``*_created`` series next to each counter and histogram: they would double the gRPC series.
disable_created_metrics()  # type: ignore[no-untyped-call]

T = TypeVar("T")
Reader = Callable[[Callable[[StateMachine], Any]], Any]

RAFT_ROLES = ("follower", "candidate", "leader")
RECOVERY_OUTCOMES = {
    # counter in State.counters -> outcome label; each committed proposal bumps exactly one of the
    # first six (statemachine/recovery.py), which is why their sum is the confirmed deadlocks.
    "recovery.committed": "rolled_back",
    "recovery.reassigned": "reassigned",
    "recovery.reordered": "reordered",
    "recovery.shadowed": "shadowed",
    "recovery.escalated": "escalated",
    "recovery.reconciliation": "reconciliation",
    "recovery.rejected": "voted_down",
}
# The closed vocabularies of the labelled core counters (statemachine/recovery.py, cancel.py):
# every combination is declared, so a series exists (at 0) before its first event.
WAIT_KINDS = tuple(sorted(k.value for k in TARGET_KINDS))
DECISION_REASONS = (
    "policy_v1",
    "same_signature_without_epoch_advance",
    "livelock_repeats",
    "shadow_mode",
    "not_side_effect_free",
    "exceeds_max_rollback",
    "unknown_side_effect",
    "approval_provider_in_cycle",
    "soft_cycle_reordered",
)
RETRACT_REASONS = ("second_read_changed", "superseded", "no_reorder")
LIVELOCK_REASONS = ("same_signature_without_epoch_advance", "livelock_repeats")
VICTIM_KINDS = (DecisionKind.VICTIM.value, DecisionKind.TIE_BREAK.value, DecisionKind.SHADOW.value)
CANCEL_CAUSES = ("operator", "parent", "recovery")
UNKNOWN_SOURCES = ("recorded", "cancel_ack", "session_expired", "claim_taken_over", "quarantine_release")
OUTCOMES = tuple(RECOVERY_OUTCOMES.values())
MODES = tuple(m.value for m in RolloutMode)
HISTOGRAMS = {
    "cancel.propagation_ms": (
        "waitgraph_cancel_propagation_seconds",
        "Cancel request to acknowledgement of one execution (logical time of the leader's clock), "
        "by cause of the cancellation and generation bucket of the execution.",
    ),
    "cancel.quiescence_ms": (
        "waitgraph_cancel_quiescence_seconds",
        "Cancel request (new calls rejected) to CANCELLED_STABLE of the whole scope, by cause and "
        "generation bucket of the scope's root.",
    ),
}
Labels = tuple[str, ...]


RETIRED_KINDS = {
    "RunRetired": "runs",
    "ExecutionRetired": "executions",
    "DecisionRetired": "decisions",
    "ProposalRetired": "proposals",
    "TrajectoryRetired": "trajectories",
    "SessionRetired": "sessions",
    "TargetRetired": "targets",
}
"""The ``kind`` label of ``waitgraph_retired_total`` (the retirement effect) -> its core counter
``retire.<name>``."""


@dataclass(slots=True)
class Sample:
    """The numbers one scrape needs, copied out of the replica under its lock."""

    now_ms: int
    wait_edges: dict[Labels, int]
    """(target kind, waiter generation bucket) -> open edges."""
    oldest_wait_ms: dict[Labels, int]
    """(target kind, waiter generation bucket) -> registration time of the oldest open edge."""
    candidate_cycles: dict[str, int]
    """generation bucket -> open proposals."""
    epoch: int
    mode: str
    cancel_slo_ms: int
    counters: dict[str, int] = field(default_factory=dict)
    gauges: dict[str, int] = field(default_factory=dict)
    decisions: dict[tuple[str, str], int] = field(default_factory=dict)
    unknown_side_effects: dict[str, int] = field(default_factory=dict)
    """generation bucket of the effect -> side effects whose outcome is UNKNOWN now."""


def sample(m: StateMachine) -> Sample:
    """Read the replica: call it with the machine lock held (pure, changes nothing)."""
    st = m.state
    edges: dict[Labels, int] = {}
    oldest: dict[Labels, int] = {}
    for waits in st.waits_by_waiter.values():
        for edge in waits.values():
            key = (kind_of(edge.target_id).value, generation_bucket(edge.waiter_generation))
            edges[key] = edges.get(key, 0) + 1
            if key not in oldest or edge.registered_at_ms < oldest[key]:
                oldest[key] = edge.registered_at_ms
    unknown: dict[str, int] = {}
    for ex in st.executions.values():
        for se in ex.side_effects.values():
            if se.outcome is EffectOutcome.UNKNOWN:
                bucket = generation_bucket(se.generation)
                unknown[bucket] = unknown.get(bucket, 0) + 1
    rb = st.recovery
    candidates: dict[str, int] = {}
    for digest in set(rb.open_members.values()):
        bucket = generation_bucket(max(g for _, g in rb.proposals[digest].members))
        candidates[bucket] = candidates.get(bucket, 0) + 1
    decisions: dict[tuple[str, str], int] = {}
    for d in rb.decisions.values():
        key = (d.mode.value, d.kind.value)
        decisions[key] = decisions.get(key, 0) + 1
    return Sample(
        now_ms=st.now_ms,
        wait_edges=edges,
        oldest_wait_ms=oldest,
        # Candidates the detector proposed that are still open (waiting for votes and the
        # confirmation window); each open proposal owns its members in open_members.
        candidate_cycles=candidates,
        epoch=rb.epoch,
        mode=rb.mode.value,
        cancel_slo_ms=st.cancel.slo_ms,
        counters=dict(st.counters),
        gauges={
            **cancel_metrics(st),
            "live_executions": len(st.executions),
            "live_runs": len(st.runs),
            "tombstones": len(st.retired_executions) + len(st.retired_runs),
            "orphaned": orphaned_count(st),
        },
        decisions=decisions,
        unknown_side_effects=unknown,
    )


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float, unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value, unit=unit)


def _histogram(
    name: str,
    doc: str,
    labelnames: list[str],
    series: dict[Labels, dict[str, int]],
    bounds: tuple[int, ...],
    scale: float,
) -> HistogramMetricFamily:
    """The core's non-cumulative buckets (``le_<bound>``, ``le_inf``, ``sum``) as a cumulative
    Prometheus histogram, one child per label combination; ``scale`` turns the core's unit into
    the exported one (1/1000: logical ms to seconds)."""
    fam = HistogramMetricFamily(name, doc, labels=labelnames)
    for labels in sorted(series):
        counts = series[labels]
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound in bounds:
            running += counts.get(f"le_{bound}", 0)
            buckets.append((floatToGoString(bound * scale), running))  # type: ignore[no-untyped-call]
        running += counts.get("le_inf", 0)
        buckets.append(("+Inf", running))
        fam.add_metric(list(labels), buckets, sum_value=counts.get("sum", 0) * scale)
    return fam


def _by_generation(name: str, doc: str, values: dict[str, int]) -> GaugeMetricFamily:
    """A gauge with one sample per generation bucket, every bucket present (0 when absent)."""
    family = GaugeMetricFamily(name, doc, labels=["generation"])
    for bucket in GENERATION_BUCKETS:
        family.add_metric([bucket], values.get(bucket, 0))
    return family


def _grid(*vocabularies: Iterable[str]) -> list[Labels]:
    return list(itertools.product(*vocabularies))


class _Labelled:
    """The labelled core counters of one scrape (``name{k=v,...}``), grouped by name."""

    def __init__(self, counters: dict[str, int]) -> None:
        self.by_name: dict[str, dict[frozenset[tuple[str, str]], int]] = {}
        for key, value in counters.items():
            parsed = parse(key)
            if parsed is not None:
                name, labels = parsed
                self.by_name.setdefault(name, {})[frozenset(labels.items())] = value

    def series(self, name: str, labelnames: list[str], declared: list[Labels]) -> dict[Labels, int]:
        """Every declared combination (0 if never bumped) plus any other the core has bumped."""
        out = dict.fromkeys(declared, 0)
        for labels, value in self.by_name.get(name, {}).items():
            d = dict(labels)
            out[tuple(d.get(n, "") for n in labelnames)] = value
        return out

    def counter(self, name: str, doc: str, key: str, labelnames: list[str], declared: list[Labels]) -> Metric:
        fam = CounterMetricFamily(name, doc, labels=labelnames)
        for labels, value in sorted(self.series(key, labelnames, declared).items()):
            fam.add_metric(list(labels), value)
        return fam

    def histogram(
        self,
        name: str,
        doc: str,
        prefix: str,
        labelnames: list[str],
        declared: list[Labels],
        bounds: tuple[int, ...],
        scale: float,
    ) -> HistogramMetricFamily:
        parts = [*(f"le_{b}" for b in bounds), "le_inf", "sum"]
        series: dict[Labels, dict[str, int]] = {labels: {} for labels in declared}
        for part in parts:
            for labels, value in self.series(f"{prefix}.{part}", labelnames, []).items():
                series.setdefault(labels, {})[part] = value
        return _histogram(name, doc, labelnames, series, bounds, scale)


class WaitgraphCollector(Collector):
    """The node's metrics, computed on each ``collect`` from ``read`` and ``raft_status``.

    ``read(fn)`` runs ``fn`` on the replica between two applies (``RaftNode.read_blocking``, or
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
        status = None
        if self.raft_status is not None:
            try:
                status = self.raft_status()
            except Exception as exc:
                logger.debug("metrics: no Raft status: %r", exc)
        # The replica's series are the same on every node at the same applied index: exported by
        # the leader alone, so sum() over the nodes is the cluster's figure (docs/metrics.md).
        exporting = self.raft_status is None or (status is not None and status.role == "leader")
        if exporting:
            try:
                s: Sample | None = self.read(sample)
            except Exception as exc:  # stopped, restoring: the Raft series may still be there
                logger.debug("metrics: the replica cannot be read now: %r", exc)
                s = None
            if s is not None:
                yield from self._replica(s)
        yield _gauge(
            "waitgraph_replica_series_exported",
            "1 on the node that exports the replicated series (the leader), 0 on the others.",
            int(exporting),
        )
        if status is not None:
            yield from self._raft(status)

    def _replica(self, s: Sample) -> Iterator[Metric]:
        c, g = s.counters, s.gauges
        lab = _Labelled(c)
        gen = list(GENERATION_BUCKETS)
        waits = _grid(WAIT_KINDS, gen)
        edges = GaugeMetricFamily(
            "waitgraph_wait_edges",
            "Open wait-for edges in this replica, by target kind and the waiter's generation bucket.",
            labels=["target_kind", "generation"],
        )
        longest = GaugeMetricFamily(
            "waitgraph_longest_wait_seconds",
            "Age of the oldest open wait edge (0 when there is none), by target kind and generation bucket.",
            labels=["target_kind", "generation"],
        )
        now_ms = max(int(self.clock() * 1000), s.now_ms)
        for labels in waits:
            edges.add_metric(list(labels), s.wait_edges.get(labels, 0))
            oldest = s.oldest_wait_ms.get(labels)
            longest.add_metric(list(labels), 0.0 if oldest is None else max(0, now_ms - oldest) / 1000)
        yield edges
        yield longest
        yield _by_generation(
            "waitgraph_candidate_cycles",
            "Candidate cycles proposed for recovery and still open (awaiting votes or confirmation), "
            "by the highest generation bucket of their members.",
            s.candidate_cycles,
        )
        yield lab.counter(
            "waitgraph_recovery_proposals",
            "Candidate cycles proposed for recovery (each then commits, is retracted or voted down).",
            "recovery.proposed",
            ["generation"],
            _grid(gen),
        )
        yield lab.counter(
            "waitgraph_deadlocks_confirmed",
            "Candidate cycles still deadlocked at commit (second read): one recovery decision each, by "
            "the decision's reason code and the cycle's generation bucket.",
            "deadlocks.confirmed",
            ["reason", "generation"],
            _grid(DECISION_REASONS, gen),
        )
        yield lab.counter(
            "waitgraph_false_positives_retracted",
            "Recovery proposals retracted because the second read no longer saw the deadlock, by reason.",
            "recovery.retracted",
            ["reason", "generation"],
            _grid(RETRACT_REASONS, gen),
        )
        yield lab.histogram(
            "waitgraph_victim_cost_units",
            "cost_consumed, in the runtime's own cost units (RecordCost), of each execution a decision "
            "chose to roll back or yield (SHADOW: would have), "
            "by decision kind and the execution's generation bucket.",
            "recovery.victim_cost",
            ["kind", "generation"],
            _grid(VICTIM_KINDS, gen),
            COST_BOUNDS,
            1.0,
        )
        yield lab.counter(
            "waitgraph_recoveries",
            "Recovery decisions by rollout mode and outcome (rolled_back advanced the epoch).",
            "recovery.outcome",
            ["mode", "outcome"],
            _grid(MODES, OUTCOMES),
        )
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
        yield lab.counter(
            "waitgraph_livelock_escalations",
            "Recoveries that found the livelock guard tripped (tie-break instead of a victim), by reason.",
            "livelock.escalations",
            ["reason"],
            _grid(LIVELOCK_REASONS),
        )
        yield _counter(
            "waitgraph_livelock_fingerprint",
            "Livelocks where the same cycle signature re-formed without the epoch advancing.",
            c.get("livelock.fingerprint", 0),
        )
        yield _gauge("waitgraph_epoch", "The recovery epoch (advanced by every rollback).", s.epoch)
        for prefix, (name, doc) in HISTOGRAMS.items():
            yield lab.histogram(
                name, doc, prefix, ["cause", "generation"], _grid(CANCEL_CAUSES, gen), HISTOGRAM_BOUNDS_MS, 1 / 1000
            )
        yield lab.counter(
            "waitgraph_leaked_permits",
            "Permits still held by an execution when its cancellation became stable (then released), "
            "by cause and the generation bucket of the cancelled root.",
            "cancel.leaked_permits",
            ["cause", "generation"],
            _grid(CANCEL_CAUSES, gen),
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
        yield _by_generation(
            "waitgraph_unknown_side_effects",
            "Side effects whose outcome is UNKNOWN now (a human must reconcile them), by generation bucket.",
            s.unknown_side_effects,
        )
        yield lab.counter(
            "waitgraph_unknown_side_effects_recorded",
            "Side effects that became UNKNOWN, by what made them so and their generation bucket.",
            "cancel.side_effects_unknown",
            ["source", "generation"],
            _grid(UNKNOWN_SOURCES, gen),
        )
        yield _gauge(
            "waitgraph_live_executions",
            "Executions in the live state (settled ones retire after the retention; max_executions counts these).",
            g.get("live_executions", 0),
        )
        yield _gauge("waitgraph_live_runs", "Runs in the live state.", g.get("live_runs", 0))
        yield _gauge(
            "waitgraph_retired_tombstones",
            "Retired execution and run ids still remembered (answered 'retired', not reused) for one retention.",
            g.get("tombstones", 0),
        )
        retired = CounterMetricFamily(
            "waitgraph_retired",
            "Records retirement passes moved out of the live state into the history store, by kind.",
            labels=["kind"],
        )
        for record_kind, name in RETIRED_KINDS.items():
            retired.add_metric([record_kind], c.get(f"retire.{name}", 0))
        yield retired
        yield _gauge(
            "waitgraph_quarantined_executions",
            "Executions that ignored their cancel request past the emission budget.",
            g.get("quarantined", 0),
        )
        yield _gauge(
            "waitgraph_orphaned_executions",
            "Unsettled executions whose owner's session expired or left: nobody is working on them.",
            g.get("orphaned", 0),
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

    def _raft(self, st: Any) -> Iterator[Metric]:
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
        refused = CounterMetricFamily(
            "waitgraph_raft_refused",
            "Connections this node closed on its Raft port, by reason (cluster/node/raft/_transport.py): a stranger, "
            "a replay, a stall, or a peer of another version.",
            labels=["reason"],
        )
        for reason in REFUSAL_REASONS:
            refused.add_metric([reason], st.refused.get(reason, 0))
        yield refused
        yield _gauge(
            "waitgraph_raft_durable",
            "1 when every Raft acknowledgment waits for the journal to be on disk (the default); 0 with --no-fsync.",
            int(bool(st.durable)),
        )


GRPC_LATENCY_BOUNDS_S = (0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10.0)
OTHER_METHOD = "other"
"""The ``method`` label of a call to a method this node does not serve (its name is never a label)."""


def go_code_name(code: grpc.StatusCode) -> str:
    """A status code as gRPC's other implementations name it in ``grpc_code`` (Go's
    ``codes.Code.String()``): ``OK``, ``Canceled``, ``DeadlineExceeded``, ..."""
    if code is grpc.StatusCode.OK:
        return "OK"
    if code is grpc.StatusCode.CANCELLED:
        return "Canceled"
    return "".join(word.capitalize() for word in code.name.split("_"))


_CODES = {code.value[0]: go_code_name(code) for code in grpc.StatusCode}
_BY_STATUS = {code: go_code_name(code) for code in grpc.StatusCode}


def _code_name(context: grpc.aio.ServicerContext, fallback: grpc.StatusCode) -> str:
    """The status the handler set (abort, set_code), else ``fallback``: OK when it returned,
    CANCELLED when the call was cancelled, UNKNOWN when it raised (what gRPC then sends)."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return _BY_STATUS[code]
    if isinstance(code, int) and code in _CODES:
        return _CODES[code]
    return _BY_STATUS[fallback]


class GrpcMetrics(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The gRPC server metrics every stock dashboard reads (go-grpc-prometheus' names and labels):

    - ``grpc_server_started_total{grpc_service,grpc_method,grpc_type}``;
    - ``grpc_server_handled_total{grpc_service,grpc_method,grpc_type,grpc_code}``;
    - ``grpc_server_msg_received_total`` / ``grpc_server_msg_sent_total`` (same labels as started);
    - ``grpc_server_handling_seconds{grpc_service,grpc_method,grpc_type}``: unary calls only, so a
      stream held open for an hour never skews the latency of writes.

    ``grpc_service`` and ``grpc_method`` are one of ``methods`` (``/pkg.Service/Method``), else
    ``other``/``other``: bounded whatever clients send. Every handler shape is wrapped: a unary
    handler, a server stream written by yielding (an async generator) and one written with
    ``context.write`` (a coroutine, as grpc_health's ``Watch``).
    """

    def __init__(self, methods: Iterable[str], clock: Callable[[], float] = time.perf_counter) -> None:
        self.methods = frozenset(m.lstrip("/") for m in methods)
        self.clock = clock
        kinds = ["grpc_service", "grpc_method", "grpc_type"]
        self.started = Counter("grpc_server_started", "RPCs started on the server.", kinds, registry=None)
        self.handled = Counter(
            "grpc_server_handled", "RPCs completed on the server, regardless of success or failure.",
            [*kinds, "grpc_code"], registry=None,
        )  # fmt: skip
        self.received = Counter("grpc_server_msg_received", "Messages received from clients.", kinds, registry=None)
        self.sent = Counter("grpc_server_msg_sent", "Messages sent to clients.", kinds, registry=None)
        self.latency = Histogram(
            "grpc_server_handling_seconds",
            "Time from receiving a unary RPC to its status (streams are not observed).",
            kinds,
            buckets=GRPC_LATENCY_BOUNDS_S,
            registry=None,
        )
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        """Per method: the server's handler and its measured wrapper, built once, not per call."""

    def collectors(self) -> tuple[Collector, ...]:
        return (self.started, self.handled, self.received, self.sent, self.latency)

    def _labels(self, full: str) -> tuple[str, str]:
        if full not in self.methods:
            return OTHER_METHOD, OTHER_METHOD
        service, _, method = full.rpartition("/")
        return service, method

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        full = str(handler_call_details.method).lstrip("/")
        known = self._wrapped.get(full)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self.wrap(full, handler)
        if full in self.methods:  # bounded: a client's made-up names are wrapped each time
            self._wrapped[full] = (handler, wrapped)
        return wrapped

    def wrap(self, full: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """``handler`` measured as ``full`` (``pkg.Service/Method``): what the interceptor serves,
        and what the native front's relay runs (cluster/node/front.py)."""
        service, method = self._labels(full)
        log_name = full if full in self.methods else OTHER_METHOD
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary((service, method, "unary"), log_name, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream((service, method, "server_stream"), log_name, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # client-streaming and bidirectional methods: none are served

    def _finish(self, labels: Labels, context: grpc.aio.ServicerContext, fallback: grpc.StatusCode) -> None:
        self.handled.labels(*labels, _code_name(context, fallback)).inc()

    def _unary(self, labels: Labels, log_name: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        # The method's children, looked up once (``labels()`` takes a lock and builds a key).
        started_c, received_c = self.started.labels(*labels), self.received.labels(*labels)
        sent_c, latency_h = self.sent.labels(*labels), self.latency.labels(*labels)
        handled: dict[str, Any] = {}

        async def measured(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started, fallback = self.clock(), grpc.StatusCode.UNKNOWN
            started_c.inc()
            received_c.inc()
            try:
                with request_context(log_name, request):
                    response = await behavior(request, context)
                fallback = grpc.StatusCode.OK
                sent_c.inc()
                return response
            except asyncio.CancelledError:
                fallback = grpc.StatusCode.CANCELLED
                raise
            finally:
                code = _code_name(context, fallback)
                child = handled.get(code)
                if child is None:
                    child = handled[code] = self.handled.labels(*labels, code)
                child.inc()
                latency_h.observe(self.clock() - started)

        return measured

    def _stream(self, labels: Labels, log_name: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        if not inspect.isasyncgenfunction(behavior):
            # Written with ``await context.write(...)``: the handler is a coroutine, and gRPC
            # counts what it writes; only the call itself is wrapped.
            async def written(request: Any, context: grpc.aio.ServicerContext) -> None:
                fallback = grpc.StatusCode.UNKNOWN
                self.started.labels(*labels).inc()
                self.received.labels(*labels).inc()
                try:
                    with request_context(log_name, request):
                        await behavior(request, context)
                    fallback = grpc.StatusCode.OK
                except asyncio.CancelledError:
                    fallback = grpc.StatusCode.CANCELLED  # the client went away mid-stream
                    raise
                finally:
                    self._finish(labels, context, fallback)

            return written

        async def yielded(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            fallback = grpc.StatusCode.UNKNOWN
            self.started.labels(*labels).inc()
            self.received.labels(*labels).inc()
            sent = self.sent.labels(*labels)
            # The request context is entered around each step of the handler, never across a
            # ``yield``: a stream whose client went away mid-send is finalised by asyncio in
            # another task (``aclose`` from the async-generator hook), where resetting a token set
            # in the serving task raises ValueError ("created in a different Context").
            responses = behavior(request, context)
            try:
                while True:
                    with request_context(log_name, request):
                        try:
                            response = await anext(responses)
                        except StopAsyncIteration:
                            break
                    sent.inc()
                    yield response
                fallback = grpc.StatusCode.OK
            except (asyncio.CancelledError, GeneratorExit):
                fallback = grpc.StatusCode.CANCELLED  # the client went away mid-stream
                raise
            finally:
                try:
                    with request_context(log_name, request):
                        await responses.aclose()  # the handler's own clean-up, in this task
                finally:
                    self._finish(labels, context, fallback)

        return yielded


def build_info(grpc_front: str = "python") -> Info:
    """``waitgraph_build_info{version,python,pysyncobj,grpcio,protobuf,grpc_front} 1``: what this
    node runs; ``grpc_front`` is ``native`` when its native front serves its gRPC port, else
    ``python`` (cluster/node/front.py): a dashboard can spot a node that fell back."""
    from importlib.metadata import PackageNotFoundError, version

    def of(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "unknown"

    info = Info("waitgraph_build", "The versions this node runs.", registry=None)
    info.info(
        {
            "version": of("waitgraph"),
            "python": ".".join(str(v) for v in sys.version_info[:3]),
            "pysyncobj": of("pysyncobj"),
            "grpcio": of("grpcio"),
            "protobuf": of("protobuf"),
            "grpc_front": grpc_front,
        }
    )
    return info


class SessionsCollector(Collector):
    """This node's sessions (cluster/node/lessor.py) and the commands it applied, by kind.

    Node-local, unlike the replica's series: every node exports them. ``view(m)`` runs under the
    machine lock and returns a ``SessionsView``; ``applied()`` the applied commands by kind;
    ``streams()`` the event streams open on this node."""

    def __init__(
        self,
        read: Reader,
        view: Callable[[StateMachine], Any],
        applied: Callable[[], dict[str, int]],
        streams: Callable[[], int] = lambda: 0,
    ) -> None:
        self.read, self.view, self.applied, self.streams = read, view, applied, streams

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        applied = CounterMetricFamily(
            "waitgraph_commands_applied",
            "Log entries' commands this node applied since it started, by command kind.",
            labels=["kind"],
        )
        try:
            v = self.read(self.view)
            counts = self.read(lambda m: self.applied())  # under the lock: no apply changes it meanwhile
        except Exception as exc:
            logger.debug("metrics: no sessions view: %r", exc)
            return
        for kind, n in sorted(counts.items()):
            applied.add_metric([kind], n)
        yield applied
        yield _gauge("waitgraph_sessions_active", "ACTIVE sessions in this replica.", v.active)
        yield _gauge("waitgraph_sessions_here", "Sessions whose agents heartbeat through this node.", v.here)
        yield _gauge(
            "waitgraph_event_streams",
            "WatchEvents streams open on this node (a client multiplexes all its sessions on one).",
            self.streams(),
        )
        yield _gauge(
            "waitgraph_sessions_suspended",
            "Sessions the leader has not heard from for over half their lease (0 on a follower).",
            v.suspended_count,
        )
        yield _gauge(
            "waitgraph_session_heartbeat_age_max_seconds",
            "The longest time since a session's last heartbeat (the leader's view; a follower's: its own).",
            v.oldest_heartbeat_age_ms / 1000,
        )
        yield _gauge(
            "waitgraph_session_heartbeat_age_p99_seconds",
            "The 99th percentile of the time since each session's last heartbeat (the leader's view).",
            v.heartbeat_age_p99_ms / 1000,
        )
        # A distribution of the sessions as they are now, not of past observations: a gauge histogram.
        buckets = [(floatToGoString(bound), float(n)) for bound, n in v.heartbeat_age_buckets]  # type: ignore[no-untyped-call]
        yield GaugeHistogramMetricFamily(
            "waitgraph_session_heartbeat_age_seconds",
            "Sessions by the time since their last heartbeat (the leader's view; a follower's: its own).",
            buckets=[*buckets, ("+Inf", float(v.heartbeat_ages))],
            gsum_value=v.heartbeat_age_sum_ms / 1000,
        )
        mode = GaugeMetricFamily(
            "waitgraph_sessions_mode",
            "1 for this node's sessions mode: lessor, legacy (a member runs an older release), hold (one unknown).",
            labels=["mode"],
        )
        for name in ("lessor", "legacy", "hold"):
            mode.add_metric([name], float(v.mode == name))
        yield mode
        limits = GaugeMetricFamily(
            "waitgraph_sessions_limit", "Admission limits of sessions, by scope.", labels=["scope"]
        )
        limits.add_metric(["node"], v.max_per_node)
        limits.add_metric(["cluster"], v.max_per_cluster)
        yield limits
        refused = CounterMetricFamily(
            "waitgraph_sessions_refused", "Joins refused as too_many_sessions, by limit.", labels=["limit"]
        )
        for name, n in sorted(v.refused.items()):
            refused.add_metric([name], n)
        yield refused
        relayed = CounterMetricFamily(
            "waitgraph_heartbeats_relayed",
            "Heartbeats relayed to the leader outside the log, by direction (out: sent, in: received).",
            labels=["direction"],
        )
        relayed.add_metric(["out"], v.relayed_out)
        relayed.add_metric(["in"], v.relayed_in)
        yield relayed


def node_collectors(
    read: Reader,
    raft_status: Callable[[], Any],
    grpc_metrics: GrpcMetrics,
    grpc_front: str = "python",
    sessions: SessionsCollector | None = None,
) -> tuple[Collector, ...]:
    """Everything one node's /metrics serves: the replica (on the leader), its Raft view, its gRPC
    server, its sessions, what it runs (``waitgraph_build_info``) and the process and platform
    collectors (``process_*``: CPU, resident memory, open fds, start time; ``python_info``;
    ``python_gc_*``)."""
    return (
        WaitgraphCollector(read, raft_status),
        *(() if sessions is None else (sessions,)),
        *grpc_metrics.collectors(),
        build_info(grpc_front),
        ProcessCollector(registry=None),
        PlatformCollector(registry=None),
        GCCollector(registry=CollectorRegistry(auto_describe=False)),  # its own registers it; ours too
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


def serve(address: str, *collectors: Collector) -> MetricsServer:
    """Serve ``collectors`` (alone in their registry) on ``host:port`` from a daemon thread."""
    host, _, port = address.rpartition(":")
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    httpd, thread = start_http_server(int(port), addr=host.strip("[]"), registry=registry)
    return MetricsServer(httpd, thread, registry)
