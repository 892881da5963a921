"""Session liveness at the leader, in memory: heartbeats do not go through the log.

Rules kept here (docs/api.md, "Sessions"):
- A session is opened by ``JoinSession`` (one log entry) with a lease; its replicated
  ``expires_at_ms`` is the lease the log granted. A heartbeat renews the lease *at the leader*,
  in memory, like etcd's lessor: the node that receives it answers from its own replica (the
  session must be ACTIVE there) and, if it does not lead, relays the agent's id to the leader,
  batched, over the Raft connection (``RaftNode.relay_to_leader``), every :data:`RELAY_INTERVAL_S`.
- The leader expires a session when it has heard nothing from it for its lease:
  ``deadline = max(expires_at_ms, last heard + lease_ms, leading since + lease_ms)`` in the leader's
  logical time (cluster/node/clock.py). Expiry is a replicated command, ``ExpireSession`` with the
  session's incarnation, proposed by the leader's loops (cluster/node/loops.py): every replica ends
  the session, releases what it held and treats its executions as unacknowledged, as before.
- A new leader knows no heartbeat: it gives every session a full lease from its promotion before it
  expires any (etcd's ``Promote``), so no session is lost to an election, and a dead agent's
  session ends at most one lease after the election.
- A lost relay message costs nothing durable: the next batch (or the agent's next heartbeat, a
  third of a lease later with the SDK's default) renews it.
- Admission (:meth:`Lessor.admit`): a join of an agent not yet counted is refused with
  RESOURCE_EXHAUSTED ``too_many_sessions`` when this node already serves ``max_sessions_per_node``
  sessions, or the cluster's replica holds ``max_sessions`` ACTIVE ones. Checked before anything is
  proposed: a refused join changes nothing. (The core's ``Limits.max_sessions`` stays the replicated
  backstop; two joins on two nodes at the same instant may pass this edge check together.)

**Mixed releases** (a rolling upgrade, docs/deploy.md section 7): a node uses the lessor only when
every member announced it runs this release (:func:`sessions_mode`, from the members' hellos,
cluster/node/raft/_relay.py). While one runs an older release, every node writes heartbeats
through the log as that release does, and the leader expires sessions by ``Tick`` version 1 (the
replicated lease), so every member decodes every entry and no session kept alive in one leader's
memory is expired by another's ``Tick``. While a member is not known yet (just started, not heard
from), heartbeats go through the log and the leader proposes no expiry and no ``Tick``.

Thread use: :meth:`heard` runs on the asyncio loop, :meth:`heard_relayed` on the Raft tick thread,
:meth:`due` and :meth:`view` under the machine lock (a read): one lock guards the few dicts.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from waitgraph.node.raft import SESSIONS_LESSOR
from waitgraph.statemachine.effects import SessionRenewed
from waitgraph.statemachine.enums import SessionStatus
from waitgraph.statemachine.errors import Rejection, Status
from waitgraph.statemachine.outcome import Outcome, Result
from waitgraph.statemachine.state import Session, State

RELAY_INTERVAL_S = 0.2
"""How often a follower sends the agents it heard from to the leader (one message per batch)."""
RELAY_BATCH = 2000
"""Agents per relay message (a few tens of KiB: far below the Raft frame's limit)."""
SUSPENDED_FRACTION = 2
AGE_BUCKETS_S = (1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0)
"""Upper bounds of the heartbeat-age histogram (the SDK's default lease is 30 s, a heartbeat every 10 s)."""
MAX_NAMED = 100
"""Suspended agents named by the view (the count is always whole)."""
"""A session is *suspended* when nothing was heard from it for over 1/2 of its lease (the SDK
heartbeats every third): it has missed a heartbeat and will expire unless one arrives."""


class SessionsMode(enum.Enum):
    LESSOR = "lessor"
    """Every member runs this release: heartbeats at the leader, in memory; ExpireSession; Tick v2."""
    LEGACY = "legacy"
    """A member runs an older release: heartbeats through the log, expiry by Tick version 1."""
    HOLD = "hold"
    """A member is not known yet: heartbeats through the log; no expiry, no Tick."""


def sessions_mode(features: Mapping[str, int | None]) -> SessionsMode:
    """The mode for the other members' announced features (``RaftNode.member_features``)."""
    if any(f is not None and not f & SESSIONS_LESSOR for f in features.values()):
        return SessionsMode.LEGACY
    if any(f is None for f in features.values()):
        return SessionsMode.HOLD
    return SessionsMode.LESSOR


@dataclass(frozen=True, slots=True)
class SessionsView:
    """What ``status``, the metrics and the live view show of the sessions (this node's view)."""

    active: int
    """ACTIVE sessions in this replica."""
    here: int
    """Sessions whose agents heartbeat through this node (within their lease)."""
    leading: bool
    """The ages below are the leader's; a follower knows only the heartbeats it received, and
    names no suspended session (ask the leader)."""
    oldest_heartbeat_age_ms: int
    suspended: tuple[str, ...]
    """Agents not heard from for more than half their lease (sorted by name; the
    :data:`MAX_NAMED` longest silent)."""
    suspended_count: int
    suspended_ages_ms: tuple[tuple[str, int], ...]
    """The suspended agents the longest silent first, with the time since each was last heard
    (at most 100)."""
    heartbeat_ages: int
    """Sessions whose heartbeat age this node knows (the leader: every ACTIVE one)."""
    heartbeat_age_p99_ms: int
    heartbeat_age_sum_ms: int
    heartbeat_age_buckets: tuple[tuple[float, int], ...]
    """(upper bound in seconds, sessions whose age is at most that): cumulative, as a Prometheus
    histogram's buckets, over :data:`AGE_BUCKETS_S`."""
    max_per_node: int
    max_per_cluster: int
    refused: dict[str, int]
    """Joins refused, by the limit that refused them."""
    relayed_out: int
    relayed_in: int
    mode: str = SessionsMode.LESSOR.value
    """:class:`SessionsMode` of this node now (set by its caller, which knows the members)."""


class Lessor:
    def __init__(
        self,
        clock_ms: Callable[[], int],
        state: Callable[[], State],
        max_sessions_per_node: int = 20_000,
        max_sessions: int = 50_000,
        mode: Callable[[], SessionsMode] = lambda: SessionsMode.LESSOR,
    ) -> None:
        self.mode = mode
        """This node's :class:`SessionsMode` now (the server's: from the members' hellos)."""
        self._clock_ms = clock_ms
        """The node's logical clock (cluster/node/clock.py): the time ExpireSession is stamped in."""
        self._state = state
        """This replica's state, read without the machine lock for one session's lookup (a dict
        read; a heartbeat must not queue behind an apply)."""
        self.max_sessions_per_node = max_sessions_per_node
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._heard: dict[str, int] = {}
        """Leader: agent -> logical ms its last heartbeat (here or relayed) arrived."""
        self._here: dict[str, tuple[int, int]] = {}
        self._here_ends: list[tuple[int, str]] = []
        """Heap of (end of lease, agent), one entry per heartbeat or join through this node; an entry
        that no longer matches ``_here`` is stale. :meth:`_live_here` pops what ended instead of
        scanning every session on every join."""
        """agent -> (logical ms of its last heartbeat or join through this node, its lease_ms)."""
        self._outbox: set[str] = set()
        """Follower: agents heard since the last relay."""
        self._leading_since: int | None = None
        self.relayed_in = 0
        self.relayed_out = 0
        self.refused: dict[str, int] = {"max_sessions_per_node": 0, "max_sessions": 0}

    # -- leadership ------------------------------------------------------------------------------

    def promote(self) -> None:
        """This node now leads: every session gets a full lease from now before any expires."""
        with self._lock:
            self._leading_since = self._clock_ms()
            self._heard.clear()

    def demote(self) -> None:
        with self._lock:
            self._leading_since = None
            self._heard.clear()

    @property
    def leading(self) -> bool:
        return self._leading_since is not None

    # -- heartbeats --------------------------------------------------------------------------------

    def heartbeat(self, agent_id: str) -> Outcome:
        """A heartbeat received by this node: the outcome its RPC answers (the session must be
        ACTIVE in this replica, as the core's Heartbeat required), recorded or queued for the leader."""
        s = self._state().sessions.get(agent_id)
        if s is None or s.status is not SessionStatus.ACTIVE:
            raise Rejection(
                Status.FAILED_PRECONDITION,
                "no_session",
                f"agent {agent_id} has no active session; join again",
                agent_id=agent_id,
            )
        now = self._clock_ms()
        with self._lock:
            self._served(agent_id, now, s.lease_ms)
            if self._leading_since is not None:
                self._heard[agent_id] = now
            else:
                self._outbox.add(agent_id)
        renewed = SessionRenewed(agent_id=agent_id, expires_at_ms=now + s.lease_ms)
        return Outcome(result=Result.APPLIED, effects=(renewed,))

    def heard_relayed(self, agents: Iterable[str]) -> None:
        """Agents a follower heard from (Raft tick thread); ignored unless this node leads."""
        now = self._clock_ms()
        with self._lock:
            if self._leading_since is None:
                return
            n = 0
            for agent in agents:
                self._heard[agent] = now
                n += 1
            self.relayed_in += n

    def take_outbox(self) -> list[list[str]]:
        """The agents to relay to the leader, in batches of :data:`RELAY_BATCH`; empties the box."""
        with self._lock:
            if not self._outbox or self._leading_since is not None:
                self._outbox.clear()
                return []
            agents, self._outbox = sorted(self._outbox), set()
        self.relayed_out += len(agents)
        return [agents[i : i + RELAY_BATCH] for i in range(0, len(agents), RELAY_BATCH)]

    # -- admission ---------------------------------------------------------------------------------

    def admit(self, agent_id: str) -> None:
        """Refuse a join beyond this node's or the cluster's session limit (module docstring)."""
        st = self._state()
        s = st.sessions.get(agent_id)
        if s is not None and s.status is SessionStatus.ACTIVE:
            return  # a rejoin renews; it adds no session
        now = self._clock_ms()
        with self._lock:
            if agent_id not in self._here and self._live_here(now) >= self.max_sessions_per_node:
                self.refused["max_sessions_per_node"] += 1
                raise _too_many("max_sessions_per_node", self.max_sessions_per_node, "this node serves")
        if st.active_sessions >= self.max_sessions:  # kept by the core as sessions start and end
            self.refused["max_sessions"] += 1
            raise _too_many("max_sessions", self.max_sessions, "the cluster holds")

    def joined(self, agent_id: str, lease_ms: int) -> None:
        with self._lock:
            self._served(agent_id, self._clock_ms(), lease_ms)

    def _served(self, agent_id: str, now: int, lease_ms: int) -> None:
        """A join or heartbeat through this node (under the lock)."""
        self._here[agent_id] = (now, lease_ms)
        heapq.heappush(self._here_ends, (now + lease_ms, agent_id))
        self._live_here(now)  # pops as much as it pushes, over time: the heap stays ~ the sessions

    def _live_here(self, now: int) -> int:
        """Sessions heard through this node within their lease (forgets the rest; under the lock).
        Amortized O(log n): each heap entry is popped once."""
        ends, here = self._here_ends, self._here
        while ends and ends[0][0] < now:
            end, agent = heapq.heappop(ends)
            at_lease = here.get(agent)
            if at_lease is not None and at_lease[0] + at_lease[1] == end:
                del here[agent]
        return len(here)

    # -- expiry and the view (under the machine lock) ------------------------------------------------

    def _last_heard(self, agent: str, s: Session, since: int) -> int:
        return max(self._heard.get(agent, since), since, s.expires_at_ms - s.lease_ms)

    def due(self, st: State, now_ms: int) -> list[tuple[str, int]]:
        """(agent, incarnation) of every ACTIVE session whose lease ran out at the leader by
        ``now_ms``; empty on a follower. Forgets heartbeats of sessions no longer ACTIVE."""
        out: list[tuple[str, int]] = []
        with self._lock:
            since = self._leading_since
            if since is None:
                return out
            for agent in [a for a in self._heard if a not in st.sessions]:
                del self._heard[agent]
            for agent, s in st.sessions.items():
                if s.status is not SessionStatus.ACTIVE:
                    continue
                deadline = max(s.expires_at_ms, self._last_heard(agent, s, since) + s.lease_ms)
                if deadline <= now_ms:
                    out.append((agent, s.incarnation))
        out.sort()
        return out

    def view(self, st: State, now_ms: int) -> SessionsView:
        with self._lock:
            since = self._leading_since
            here = self._live_here(now_ms)
            ages: list[int] = []
            suspended: list[tuple[int, str]] = []
            for agent, s in st.sessions.items():
                if s.status is not SessionStatus.ACTIVE:
                    continue
                if since is not None:
                    last = self._last_heard(agent, s, since)
                elif agent in self._here:  # a follower knows only the heartbeats it received
                    last = max(self._here[agent][0], s.expires_at_ms - s.lease_ms)
                else:
                    continue
                age = max(0, now_ms - last)
                ages.append(age)
                if since is not None and age * SUSPENDED_FRACTION > s.lease_ms:
                    suspended.append((-age, agent))
        ages.sort()
        suspended.sort()  # the longest silent first, then by name
        named = [(agent, -neg) for neg, agent in suspended[:MAX_NAMED]]
        return SessionsView(
            active=st.active_sessions,
            here=here,
            leading=since is not None,
            oldest_heartbeat_age_ms=ages[-1] if ages else 0,
            suspended=tuple(sorted(agent for agent, _ in named)),
            suspended_count=len(suspended),
            suspended_ages_ms=tuple(named),
            heartbeat_ages=len(ages),
            heartbeat_age_p99_ms=_quantile(ages, 0.99),
            heartbeat_age_sum_ms=sum(ages),
            heartbeat_age_buckets=tuple((b, bisect.bisect_right(ages, int(b * 1000))) for b in AGE_BUCKETS_S),
            max_per_node=self.max_sessions_per_node,
            max_per_cluster=self.max_sessions,
            refused=dict(self.refused),
            relayed_out=self.relayed_out,
            relayed_in=self.relayed_in,
            mode=self.mode().value,
        )


def _quantile(ascending: list[int], q: float) -> int:
    """The nearest-rank ``q`` quantile of sorted values (0 for none)."""
    if not ascending:
        return 0
    return ascending[max(0, math.ceil(q * len(ascending)) - 1)]


def _too_many(name: str, limit: int, who: str) -> Rejection:
    return Rejection(
        Status.RESOURCE_EXHAUSTED,
        "too_many_sessions",
        f"{who} {limit} sessions, its limit ({name}); join another cluster or raise --{name.replace('_', '-')}",
        limit=name,
        max=limit,
    )
