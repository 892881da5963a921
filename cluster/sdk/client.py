"""The asynchronous client: a :class:`~waitgraph.sdk.connection.Connection` that opens agent sessions.

Layered so that nothing imports in a circle: ``connection.py`` (transport, writes, reads, events)
<- ``session.py`` (sessions, executions, waits) <- ``client.py`` (this) <- ``sync.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from ._liveness import SessionState
from .connection import TLS, Batching, Connection, StreamStats, WatchedEvent, WriteBatcher
from .errors import SessionLost
from .session import Session, Voter

__all__ = ["TLS", "Batching", "Client", "StreamStats", "WatchedEvent", "WriteBatcher"]


class Client(Connection):
    """An asynchronous waitgraph client (agents and operators alike; the token decides).

    ::

        async with Client(endpoints=["10.0.0.1:50051", "10.0.0.2:50051"], token=TOKEN) as client:
            async with client.session("planner") as s:
                async with s.execution(run_id="run-7") as ex:
                    async with ex.holding("resource:browser-9"):
                        async with ex.waiting_for("artifact:review-42") as w:
                            await w.resolved()

    ``local_wait_threshold_s`` (default 0: register every wait before blocking) lets a session keep
    a short wait local and register it only once it has lasted that long; a waiter that holds a
    lease or a pool permit always registers before it blocks. ``interceptors`` are passed to every
    ``grpc.aio`` channel (tests use them to inject faults).

    ``batching`` (:class:`Batching`; on by default): AgentService writes issued together by the
    tasks sharing this client travel as one WriteBatch call; each caller still gets its own
    outcome or typed error. ``Batching(enabled=False)``: one RPC per write.
    """

    # -- sessions ------------------------------------------------------------------------------

    def session(
        self,
        agent_id: str,
        *,
        lease_ms: int | None = None,
        heartbeat_interval_s: float | None = None,
        local_wait_threshold_s: float | None = None,
        on_lost: Callable[[SessionLost], object] | None = None,
        voter: Voter | bool = False,
        refuse_deadlock: bool = False,
        on_state: Callable[[SessionState], object] | None = None,
        token: str | None = None,
    ) -> Session:
        """An agent session (an async context manager): joins on enter, heartbeats, watches its
        events, and leaves on exit. ``agent_id`` must be the one the token is bound to.
        ``on_lost(err)`` is called when the cluster no longer holds the session for this process
        (see :class:`~waitgraph.sdk.errors.SessionLost`). ``voter``: vote on every recovery
        proposal (``True``: by :meth:`Session.confirms`; or a callable deciding each one), for an
        agent in the configured voter set. ``refuse_deadlock``: the default of every
        ``waiting_for`` / ``holding`` of the session (see :meth:`Execution.waiting_for`).
        ``on_state(state)`` is called with every change of ``session.state`` (CONNECTED,
        SUSPENDED, LOST: :class:`~waitgraph.sdk.SessionState`). ``token``: the agent's own token,
        for a process hosting many agents on one client (None: the client's).

        Every session of the client shares its one event stream (docs/sdk.md, "One stream per
        client"): a process with a thousand sessions holds one stream, not a thousand."""
        return Session(
            self,
            agent_id,
            lease_ms=lease_ms if lease_ms is not None else self.lease_ms,
            heartbeat_interval_s=heartbeat_interval_s,
            local_wait_threshold_s=(
                local_wait_threshold_s if local_wait_threshold_s is not None else self.local_wait_threshold_s
            ),
            on_lost=on_lost,
            voter=voter,
            refuse_deadlock=refuse_deadlock,
            on_state=on_state,
            token=token,
        )
