"""The node's background loops: detection, votes, commits, housekeeping. Every action is a
command through the log; nothing here changes state by itself.

Rules kept here:
- One survey per period reads this node's replica (under the machine lock, off the event loop)
  and decides what to propose; the proposals go through :meth:`RaftNode.submit`, which forwards
  a follower's command to the leader.
- Leader only (it has a quorum): incremental detection over the replica -> ProposeRecovery for
  each candidate without a proposal yet, and for each soft cycle a reorder breaks
  (``recovery.soft_proposals``: a full soft pass, only while some queue has two waiters);
  CommitRecovery for each open proposal whose confirmation window has passed (logical time) and
  whose approvals reach the quorum; Tick and ReemitCancels when something is due; ExpireSession
  for each session whose lease ran out at this leader (cluster/node/lessor.py; the lessor is
  promoted, a full lease for every session, when this node becomes leader); the recovery
  bootstrap on first leadership.
- A follower relays the agents whose heartbeats it received to the leader, batched, every
  ``lessor.RELAY_INTERVAL_S`` (not through the log).
- Every node, leader or follower: VoteRecovery as ``node:<id>`` for each open proposal it is a
  voter of and has not voted on: approve when the candidate is still a deadlock (or a soft
  cycle: statemachine/reorder.py) on its *own* replica (``recovery.stands``), reject when it is
  not (apply re-validated the proposal at its log position, so a replica that applied it and no
  longer sees the cycle has seen it dissolve).
- Leader only, too: RetireSettled (statemachine/retire.py) when a run's retention has passed or a
  tombstone is due, and once per retention anyway (it also sweeps decisions, proposals,
  trajectories and sessions); again at once while a pass says ``more``.
- Request ids are derived from the node and the digest (``n1:vote:<digest[:16]>``), so a retry
  after a lost answer is answered from the idempotency table. Tick, ReemitCancels and
  RetireSettled carry none:
  they are idempotent by nature, and ten ids a second would flush clients' entries out of the
  bounded idempotency table.
- A rejection the loop expects (confirmation window not over, quorum not in yet, an overlapping
  recovery still open) or a replication error is retried after ``retry_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from waitgraph.node.errors import ClusterError
from waitgraph.node.lessor import RELAY_INTERVAL_S, Lessor, SessionsMode, sessions_mode
from waitgraph.node.raft import RaftNode
from waitgraph.statemachine import Envelope, StateMachine, encode_envelope
from waitgraph.statemachine.commands import (
    Command,
    CommitRecovery,
    ConfigureRecovery,
    ExpireSession,
    ReemitCancels,
    RetireSettled,
    SetMode,
    Tick,
    TickV1,
    VoteRecovery,
)
from waitgraph.statemachine.detect import Candidate, IncrementalDetector
from waitgraph.statemachine.effects import RetirementPassed
from waitgraph.statemachine.enums import SessionStatus
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.recovery import propose_command, reproposable, soft_proposals, stands
from waitgraph.statemachine.recovery_state import ProposalStatus, RolloutMode
from waitgraph.statemachine.retire import retire_due
from waitgraph.statemachine.state import State

logger = logging.getLogger("waitgraph.node.loops")


@dataclass(frozen=True, slots=True)
class LoopConfig:
    node_id: str
    period_s: float = 0.1
    housekeeping_s: float = 0.25
    retry_s: float = 0.5
    bootstrap: ConfigureRecovery | None = None
    """Proposed on first leadership when the replicated state has no voters yet."""
    initial_mode: RolloutMode | None = None
    """Proposed just before the bootstrap configuration (the bootstrap marks it done)."""
    retention_ms: int | None = None
    """Retire settled work this long after it settled (logical ms); None: never retire."""
    retire_s: float = 1.0
    max_retire_runs: int = 1000

    @property
    def actor(self) -> str:
        return f"node:{self.node_id}"


@dataclass(slots=True)
class Survey:
    """What one look at the replica says should be proposed."""

    applied_index: int = 0
    unconfigured: bool = False
    proposals: list[Candidate] = field(default_factory=list)
    superseding: dict[str, str] = field(default_factory=dict)
    """digest -> the shadow decision a new proposal of a standing cycle follows (a mode change)."""
    votes: list[tuple[str, bool, str]] = field(default_factory=list)
    """(digest, approve, the proposal's instance key)."""
    commits: list[tuple[str, str]] = field(default_factory=list)
    """(digest, the proposal's instance key)."""
    tick_due: bool = False
    reemit_due: bool = False
    retire_due: bool = False
    expiries: list[tuple[str, int]] = field(default_factory=list)
    """(agent, incarnation) of the sessions whose lease ran out at this leader (cluster/node/lessor.py)."""
    replicated_lease_due: bool = False
    """A mixed cluster (lessor.py, "Mixed releases"): an ACTIVE session's replicated lease ran out."""


def survey(
    m: StateMachine,
    actor: str,
    leader: bool,
    now_ms: int,
    detector: IncrementalDetector | None,
    retention_ms: int | None = None,
    lessor: Lessor | None = None,
    legacy: bool = False,
) -> Survey:
    """Pure read of the state (run under the machine lock); ``detector`` only on the leader."""
    st = m.state
    rb = st.recovery
    out = Survey(unconfigured=not rb.config.voters)
    now = max(st.now_ms, now_ms)
    cfg = rb.config
    for p in rb.proposals.values():
        if p.status is not ProposalStatus.OPEN:
            continue
        # A digest can be proposed again after a shadow decision (a mode change): the request ids
        # of votes and commits name the proposal they are for, or the idempotency table would
        # answer the new proposal's vote with the old one's outcome.
        instance = f"{p.digest[:16]}@{p.proposed_at_ms}"
        if actor in cfg.voters and actor not in p.approvals and actor not in p.rejections:
            out.votes.append((p.digest, stands(st, Candidate.build(p.members, p.edges)), instance))
        if leader:
            approvals = sum(1 for v in p.approvals if v in cfg.voters)
            if approvals >= cfg.quorum and now >= p.proposed_at_ms + cfg.confirmation_window_ms:
                out.commits.append((p.digest, instance))
    if not leader:
        return out
    if detector is not None and cfg.voters:
        detector.pass_(st)
        # hard cycles, then soft ones a reorder breaks (statemachine/reorder.py: queues)
        for c in [*detector.open_candidates(), *soft_proposals(st)]:
            if c.digest not in rb.proposals:
                out.proposals.append(c)
            elif reproposable(st, c.digest):
                out.proposals.append(c)
                out.superseding[c.digest] = str(rb.proposals[c.digest].decision_id)
    out.tick_due, out.reemit_due = housekeeping_due(st, now)
    out.retire_due = retention_ms is not None and retire_due(st, now, retention_ms)
    if lessor is not None:
        out.expiries = lessor.due(st, now)
    if legacy:  # a scan, as the older release's Tick did: only while a member runs it
        out.replicated_lease_due = any(
            s.status is SessionStatus.ACTIVE and s.expires_at_ms <= now for s in st.sessions.values()
        )
    return out


_warned_fallback = False


def housekeeping_due(st: State, now: int) -> tuple[bool, bool]:
    """(Tick due, ReemitCancels due) at logical ``now``, so an idle cluster writes nothing.

    Tick: the earliest wait deadline or lease TTL has passed (the core's heaps; a stale top entry
    makes one Tick that pops it); sessions expire by the lessor's ExpireSession
    (cluster/node/lessor.py). ReemitCancels: an unacknowledged cancel request is past its
    re-emission interval or its SLO (linear in the pending requests, usually few). Should the
    core's layout change under this function, both are reported due: a log entry per period
    instead of a silent stop of housekeeping.
    """
    global _warned_fallback
    try:
        tick = bool((st.deadlines and st.deadlines[0][0] <= now) or (st.ttl_expiry and st.ttl_expiry[0][0] <= now))
        book = st.cancel
        reemit = any(
            (req.quarantined_at_ms is None and req.requested_at_ms + book.slo_ms <= now)
            or req.emitted_at_ms + book.reemit_interval_ms <= now
            for req in book.requests.values()
        )
        return tick, reemit
    except (AttributeError, TypeError, IndexError, KeyError):
        if not _warned_fallback:
            _warned_fallback = True
            logger.exception("cannot tell whether housekeeping is due; proposing it every period")
        return True, True


_RETRYABLE = frozenset({"confirmation_window", "no_quorum", "overlapping_recovery", "no_voters"})


class Loops:
    def __init__(
        self, node: RaftNode, cfg: LoopConfig, clock: Callable[[], int] | None = None, lessor: Lessor | None = None
    ) -> None:
        self.node = node
        self.cfg = cfg
        self.clock = clock if clock is not None else (lambda: int(time.time() * 1000))
        """``at_ms`` of the loops' commands: the node's LogicalClock.now_ms (cluster/node/clock.py)."""
        self.lessor = lessor
        """Session liveness (cluster/node/lessor.py): promoted with this node, its expiries proposed."""
        self._last_relay = 0.0
        self.mode = SessionsMode.LESSOR
        """:class:`SessionsMode` at the last step (lessor.py, "Mixed releases")."""
        self._task: asyncio.Task[None] | None = None
        self._detector: IncrementalDetector | None = None
        self._was_leader = False
        self._bootstrapped = False
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._not_before: dict[str, float] = {}
        self._last_housekeeping = 0.0
        self._last_retire_check = 0.0
        self._last_retire_pass = 0.0
        self._retire_more = False
        self.counters: dict[str, int] = {}

    def now_ms(self) -> int:
        return self.clock()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="waitgraph-loops")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._in_flight.values()) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except ClusterError as exc:
                logger.debug("loop step: %s", exc.message)
            except Exception:
                logger.exception("loop step failed")
            await asyncio.sleep(self.cfg.period_s)

    async def step(self) -> None:
        leader = self.node.is_leader() and self.node.has_quorum()
        lessor = self.lessor
        mode = self.mode
        if lessor is not None:
            mode = sessions_mode(self.node.member_features())
            if mode is not self.mode:
                logger.info("sessions mode: %s (was %s)", mode.value, self.mode.value)
                if leader and self._was_leader and mode is SessionsMode.LESSOR:
                    lessor.promote()  # heartbeats were written to the log until now: a full lease first
        self.mode = mode
        if leader and not self._was_leader:
            self._detector = IncrementalDetector()  # a full pass first: it may have missed changes
            self._bootstrapped = False
            if lessor is not None:
                lessor.promote()  # a full lease for every session before any expires
            logger.info("leader: starting detection")
        elif not leader:
            self._detector = None
            if lessor is not None and lessor.leading:
                lessor.demote()
        self._was_leader = leader
        mono = time.monotonic()
        if lessor is not None and not leader and mono - self._last_relay >= RELAY_INTERVAL_S:
            self._last_relay = mono
            for batch in lessor.take_outbox():
                self.node.relay_to_leader(batch)
        detector = self._detector
        actor, now, retention = self.cfg.actor, self.now_ms(), self.cfg.retention_ms
        housekeeping = leader and mono - self._last_housekeeping >= self.cfg.housekeeping_s
        expiring = lessor if housekeeping and mode is SessionsMode.LESSOR else None
        legacy = housekeeping and mode is SessionsMode.LEGACY
        read = await self.node.read_local(
            lambda m: survey(m, actor, leader, now, detector, retention, expiring, legacy)
        )
        s: Survey = read.value
        for digest, approve, instance in s.votes:
            self._propose(f"vote:{instance}", VoteRecovery(digest=digest, approve=approve))
        if not leader:
            return
        if s.unconfigured and not self._bootstrapped and self.cfg.bootstrap is not None:
            self._bootstrap()
        for c in s.proposals:
            after = s.superseding.get(c.digest)
            key = f"propose:{c.digest[:16]}" + (f"/after-{after}" if after else "")
            self._propose(key, propose_command(c, read.applied_index))
        for digest, instance in s.commits:
            self._propose(f"commit:{instance}", CommitRecovery(digest=digest))
        if housekeeping:
            self._last_housekeeping = mono
            for agent, incarnation in s.expiries:
                self._propose(
                    f"expire:{agent}", ExpireSession(agent_id=agent, incarnation=incarnation), idempotent=False
                )
            # Only what every member decodes and applies alike (lessor.py, "Mixed releases"):
            if mode is SessionsMode.LESSOR and s.tick_due:
                self._propose("tick", Tick(), idempotent=False)
            elif mode is SessionsMode.LEGACY and (s.tick_due or s.replicated_lease_due):
                self._propose("tick", TickV1(), idempotent=False)
            if s.reemit_due:
                self._propose("reemit", ReemitCancels(), idempotent=False)
        self._maybe_retire(s.retire_due, mono)

    def _maybe_retire(self, due: bool, mono: float) -> None:
        """RetireSettled when a run or a tombstone is due, while the last pass said ``more``, and
        at least once per retention (the other books have no queue that would make them due)."""
        retention = self.cfg.retention_ms
        if retention is None:
            return
        sweep = mono - self._last_retire_pass >= retention / 1000
        if not (self._retire_more or mono - self._last_retire_check >= self.cfg.retire_s):
            return
        self._last_retire_check = mono
        if due or sweep or self._retire_more:
            self._last_retire_pass = mono
            self._retire_more = False
            self._propose(
                "retire", RetireSettled(retention_ms=retention, max_runs=self.cfg.max_retire_runs), idempotent=False
            )

    def _bootstrap(self) -> None:
        if "bootstrap" in self._in_flight or time.monotonic() < self._not_before.get("bootstrap", 0):
            return

        async def run() -> None:
            try:
                if self.cfg.initial_mode is not None:
                    out = await self._submit(SetMode(mode=self.cfg.initial_mode), f"{self.cfg.node_id}:bootstrap:mode")
                    if out.result is Result.REJECTED:
                        raise RuntimeError(f"SetMode refused: {out.code} {out.message}")
                assert self.cfg.bootstrap is not None
                out = await self._submit(self.cfg.bootstrap, f"{self.cfg.node_id}:bootstrap:recovery")
                if out.result is Result.REJECTED:
                    raise RuntimeError(f"ConfigureRecovery refused: {out.code} {out.message}")
                self._bootstrapped = True
                logger.info("recovery configured: %s", self.cfg.bootstrap)
            except (ClusterError, RuntimeError) as exc:
                logger.warning("recovery bootstrap failed, retrying: %s", exc)
                self._not_before["bootstrap"] = time.monotonic() + self.cfg.retry_s
            finally:
                self._in_flight.pop("bootstrap", None)

        self._in_flight["bootstrap"] = asyncio.get_running_loop().create_task(run())

    def _propose(self, key: str, cmd: Command, idempotent: bool = True) -> None:
        """Submit ``cmd`` unless the same key is in flight or backing off; never waits."""
        if key in self._in_flight or time.monotonic() < self._not_before.get(key, 0):
            return
        rid = f"{self.cfg.node_id}:{key}" if idempotent else None
        self._in_flight[key] = asyncio.get_running_loop().create_task(self._run_one(key, cmd, rid))

    async def _run_one(self, key: str, cmd: Command, request_id: str | None) -> None:
        try:
            out = await self._submit(cmd, request_id)
            self.counters[f"{cmd.KIND}.{out.result.value}"] = self.counters.get(f"{cmd.KIND}.{out.result.value}", 0) + 1
            if out.result is Result.REJECTED:
                level = logging.DEBUG if out.code in _RETRYABLE else logging.WARNING
                logger.log(level, "%s %s refused: %s %s", cmd.KIND, key, out.code, out.message)
                self._not_before[key] = time.monotonic() + self.cfg.retry_s
            else:
                logger.log(
                    logging.DEBUG if cmd.KIND in ("Tick", "ReemitCancels", "RetireSettled") else logging.INFO,
                    "%s %s %s%s",
                    cmd.KIND,
                    key,
                    out.result.value,
                    f" ({out.code})" if out.code else "",
                )
                self._not_before.pop(key, None)
                if any(isinstance(fx, RetirementPassed) and fx.more for fx in out.effects):
                    self._retire_more = True
        except ClusterError as exc:
            logger.info("%s not applied yet: %s", cmd.KIND, exc.message)
            self._not_before[key] = time.monotonic() + self.cfg.retry_s
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s failed", cmd.KIND)
            self._not_before[key] = time.monotonic() + self.cfg.retry_s
        finally:
            self._in_flight.pop(key, None)

    async def _submit(self, cmd: Command, request_id: str | None) -> Outcome:
        env = Envelope(actor=self.cfg.actor, at_ms=self.now_ms(), request_id=request_id, command=cmd)
        return await self.node.submit(encode_envelope(env))
