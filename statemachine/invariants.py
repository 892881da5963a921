"""Structural invariants of a :class:`~waitgraph.statemachine.state.State`, as a list of violations.

Rules kept here:
- Pure and read-only: ``check`` never mutates the state and never raises for a violation; it
  returns human-readable sentences, one per violation, in a deterministic order (ids sorted).
- Linear in the size of the state (executions, targets, wait edges, sessions, heap entries), so
  the cluster can run it as an audit after restore or on a timer.
- Each rule is one that ``machine.apply`` keeps after every transition (docs/design.md §2: every edge
  closes in the transition that resolves it); an empty list is the only healthy answer.

The rules:
- wait edges: both indexes (by waiter, by target) mirror each other and ``edge_count`` (and
  ``traced_edges`` the edges with a trace context); every
  waiter exists, its attempt is open (not settled) and it waits at its current generation; the
  waiter's ``edge_hwm`` covers the edge's version; the deadline heap covers every deadline.
- no dangling wait: a wait names a target that exists and whose resolving event has not happened
  yet — an ``exec:`` target unsettled at exactly the named generation (a new attempt closes the
  waits on the old one), an artifact/approval not yet at the awaited version, an exclusive
  resource or reservation held at the named lease, a pool with no free slot.
- no dangling satisfier: a declared PRODUCED_BY/PROVIDED_BY execution exists, is unsettled and at
  its named generation, for a target version not yet reached; an outside satisfier has generation 0.
- holdings: only held kinds have holders, at most ``slots`` of them; every holder is an unsettled
  execution at its current generation; ``satisfies`` is exactly what the targets say.
- executions: WAITING means at least one open wait; a settled execution (``enums.SETTLED``:
  terminal, or handed to reconciliation) holds nothing, waits for nothing, satisfies nothing; run,
  parent, children and owning session are consistent.

"Unsettled" rather than PENDING/RUNNING/WAITING: an execution asked to stop (CANCEL_REQUESTED,
CANCELLING, QUARANTINED) keeps what it holds and waits for until it settles (docs/design.md §5); it
only cannot acquire or register anything new, which ``apply`` refuses.
- grant queues (statemachine/queues.py): a queue exists only for a resource or pool that has
  waiters, lists each of them exactly once and nobody else; a pass-over count is never negative.
  (The order itself is history, a priority newcomer and a reorder's doing: primary data, in the
  snapshot, not derivable.)
- sessions: filed under their own id, incarnation from 1; ``active_sessions`` (kept incrementally
  for the cluster's admission limit) equals a recount.
- lease TTLs: every TTL record names a current holding (holder at that generation; a later grant
  would have dropped it) at a lease the target has reached, and is on the TTL heap.
- per-agent counts: ``open_executions_by_agent`` and ``open_edges_by_agent`` (kept incrementally
  for the per-agent limits) equal a recount from the executions and the wait edges.
- retirement (statemachine/retire.py): ``open_by_run`` and ``owned_by_agent`` equal a recount;
  every fully settled run is in the retirement queue or its blocked set at its settle time (else
  it would never retire); so is every retirable target at its last change; no tombstoned id is
  live; an open proposal names only live executions.
"""

from __future__ import annotations

from .enums import SETTLED, ExecStatus
from .ids import DECLARED_KINDS, HELD_KINDS, OUTSIDE_KINDS, TARGET_KINDS, Kind
from .queues import QUEUED_KINDS
from .recovery_state import ProposalStatus
from .state import State, WaitEdge, count_active_sessions, count_by_agent, retirement_index, target_index

OPEN = frozenset(ExecStatus) - SETTLED
"""States of an execution whose attempt is not over: it may hold, wait, satisfy, be waited for."""

_KINDS = {k.value: k for k in Kind}


def _kind(value: object) -> Kind | None:
    """Kind of an id, or None when it is not a string id of a known kind."""
    if not isinstance(value, str):
        return None
    prefix, sep, _ = value.partition(":")
    return _KINDS.get(prefix) if sep else None


def check(state: State) -> list[str]:
    """Every structural invariant ``state`` violates, as sentences; ``[]`` when it is sound."""
    out: list[str] = []
    _check_waits(state, out)
    _check_queues(state, out)
    _check_targets(state, out)
    _check_executions(state, out)
    _check_sessions(state, out)
    _check_lease_ttls(state, out)
    _check_agent_counts(state, out)
    _check_retirement(state, out)
    return out


def _check_retirement(st: State, out: list[str]) -> None:
    if any(ex.run_id not in st.runs for ex in st.executions.values()):
        return  # reported above
    open_by_run, owned, queue = retirement_index(st.executions, st.runs)
    for name, kept, recount in (
        ("open_by_run", st.open_by_run, open_by_run),
        ("owned_by_agent", st.owned_by_agent, owned),
    ):
        for key in sorted(set(kept) | set(recount)):
            if kept.get(key) != recount.get(key):
                out.append(f"{name}[{key}] is {kept.get(key)}; a recount gives {recount.get(key)}")
    known = set(st.retire_queue) | st.retire_blocked
    for entry in sorted(queue):
        if entry not in known:
            out.append(f"run {entry[1]} settled at {entry[0]} but is not queued for retirement")
    for p in st.recovery.proposals.values():
        if p.status is ProposalStatus.OPEN:
            for m, _ in p.members:
                if m not in st.executions:
                    out.append(f"open proposal {p.digest[:16]} names {m}, which is not in the live state")
    for eid in sorted(st.retired_executions.keys() & st.executions.keys()):
        out.append(f"execution {eid} is live and retired at once")
    for run_id in sorted(st.retired_runs.keys() & st.runs.keys()):
        out.append(f"run {run_id} is live and retired at once")
    for tid in sorted(st.retired_targets.keys() & st.targets.keys()):
        out.append(f"target {tid} is live and retired at once")
    queued = set(st.target_queue)
    for at_ms, tid in sorted(target_index(st)):
        if at_ms > st.now_ms:
            out.append(f"target {tid} was touched at {at_ms} ms, after now ({st.now_ms} ms)")
        if (at_ms, tid) not in queued:
            out.append(f"target {tid} is retirable since {at_ms} ms but is not queued for retirement")


def _check_queues(st: State, out: list[str]) -> None:
    for tid in sorted(st.queues):
        queue = st.queues[tid]
        t = st.targets.get(tid)
        if t is None or t.kind not in QUEUED_KINDS:
            out.append(f"{tid} has a grant queue but is not a resource or pool")
        if not queue:
            out.append(f"the grant queue of {tid} is empty (it should have been removed)")
        waiters = [e.waiter_id for e in queue]
        if len(set(waiters)) != len(waiters):
            out.append(f"the grant queue of {tid} lists a waiter twice: {' '.join(waiters)}")
        waiting = {e.waiter_id for e in st.waits_on(tid)}
        for w in sorted(set(waiters) - waiting):
            out.append(f"{w} is in the grant queue of {tid} but has no open wait on it")
        for e in queue:
            if e.passed < 0:
                out.append(f"{e.waiter_id} in the grant queue of {tid} was passed over {e.passed} times")
    for tid in sorted(st.waits_by_target):
        t = st.targets.get(tid)
        if t is not None and t.kind in QUEUED_KINDS:
            queued = {e.waiter_id for e in st.queues.get(tid, ())}
            for edge in st.waits_on(tid):
                if edge.waiter_id not in queued:
                    out.append(f"wait {edge.edge_id} is open but not in the grant queue of {tid}")


def _check_agent_counts(st: State, out: list[str]) -> None:
    if any(w not in st.executions for w in st.waits_by_waiter):
        return  # a wait of a missing waiter is reported above; it has no agent to count against
    open_executions, open_edges = count_by_agent(st.executions, st.waits_by_waiter)
    for name, kept, recount in (
        ("open_executions_by_agent", st.open_executions_by_agent, open_executions),
        ("open_edges_by_agent", st.open_edges_by_agent, open_edges),
    ):
        for agent_id in sorted(set(kept) | set(recount)):
            if kept.get(agent_id) != recount.get(agent_id):
                out.append(f"{name}[{agent_id}] is {kept.get(agent_id)}; a recount gives {recount.get(agent_id)}")


def _check_waits(st: State, out: list[str]) -> None:
    count = 0
    mirrored = 0
    deadlines = set(st.deadlines)
    for waiter_id in sorted(st.waits_by_waiter):
        waits = st.waits_by_waiter[waiter_id]
        if not waits:
            out.append(f"waits_by_waiter[{waiter_id}] is an empty map (it should have been removed)")
        for target_id in sorted(waits):
            edge = waits[target_id]
            count += 1
            if edge.waiter_id != waiter_id or edge.target_id != target_id:
                out.append(f"wait {edge.edge_id} is filed under {waiter_id}>{target_id}")
            if st.target_wait(target_id, waiter_id) is edge:
                mirrored += 1
            else:
                out.append(f"wait {edge.edge_id} is missing from waits_by_target")
            if edge.deadline_ms is not None and (
                (edge.deadline_ms, edge.waiter_id, edge.target_id, edge.edge_version) not in deadlines
            ):
                out.append(f"wait {edge.edge_id} has deadline {edge.deadline_ms} but no entry on the deadline heap")
            _check_edge(st, edge, out)
    target_count = 0
    for target_id in sorted(st.waits_by_target):
        on_target = st.waits_by_target[target_id]
        if isinstance(on_target, WaitEdge):
            target_count += 1
            continue
        if len(on_target) < 2:
            out.append(f"waits_by_target[{target_id}] maps {len(on_target)} waiters (a single one is kept as the edge)")
        target_count += len(on_target)
    if target_count != mirrored:
        out.append(f"waits_by_target holds {target_count} edges; only {mirrored} mirror waits_by_waiter")
    if st.edge_count != count:
        out.append(f"edge_count is {st.edge_count}; {count} wait edges are open")
    traced = sum(1 for waits in st.waits_by_waiter.values() for e in waits.values() if e.trace_context)
    if st.traced_edges != traced:
        out.append(f"traced_edges is {st.traced_edges}; {traced} open wait edges carry a trace context")


def _check_edge(st: State, edge: WaitEdge, out: list[str]) -> None:
    eid = edge.edge_id
    waiter = st.executions.get(edge.waiter_id)
    if waiter is None:
        out.append(f"wait {eid}: waiter {edge.waiter_id} does not exist")
    else:
        if waiter.status not in OPEN:
            out.append(f"wait {eid}: waiter is {waiter.status.value}; its attempt is over")
        if edge.waiter_generation != waiter.generation:
            out.append(f"wait {eid}: registered at g{edge.waiter_generation}, waiter is at g{waiter.generation}")
        hwm = waiter.edge_hwm.get(edge.target_id, 0)
        if hwm < edge.edge_version:
            out.append(f"wait {eid}: edge version {edge.edge_version} is above the waiter's high-water mark {hwm}")
    if edge.edge_version < 1:
        out.append(f"wait {eid}: edge version {edge.edge_version} < 1")
    if not edge.reason:
        out.append(f"wait {eid}: empty reason")
    kind = _kind(edge.target_id)
    tg = edge.target_generation
    if kind is None or kind not in TARGET_KINDS:
        out.append(f"wait {eid}: {edge.target_id!r} is not a wait target id")
    elif kind is Kind.EXEC:
        target_ex = st.executions.get(edge.target_id)
        if target_ex is None:
            out.append(f"wait {eid}: target execution does not exist")
        elif target_ex.status not in OPEN:
            out.append(f"wait {eid}: target execution is already {target_ex.status.value}")
        elif tg != target_ex.generation:
            out.append(f"wait {eid}: waits for g{tg}, target execution is at g{target_ex.generation}")
    else:
        t = st.targets.get(edge.target_id)
        if t is None:
            out.append(f"wait {eid}: target does not exist")
        elif t.kind in DECLARED_KINDS:
            if tg <= t.version:
                out.append(f"wait {eid}: waits for version {tg}, target is already at version {t.version}")
        elif t.kind is Kind.POOL:
            if tg != 0:
                out.append(f"wait {eid}: a pool wait has target generation {tg}, not 0")
            if len(t.holders) < t.slots:
                out.append(f"wait {eid}: pool has a free slot ({len(t.holders)}/{t.slots} held)")
        else:
            if not t.holders:
                out.append(f"wait {eid}: target is free")
            if tg != t.version:
                out.append(f"wait {eid}: waits for lease {tg}, target is at lease {t.version}")


def _check_targets(st: State, out: list[str]) -> None:
    expected: dict[str, set[str]] = {}
    for target_id in sorted(st.targets):
        t = st.targets[target_id]
        if t.target_id != target_id:
            out.append(f"target {target_id} is filed under another id ({t.target_id})")
        if _kind(target_id) is not t.kind:
            out.append(f"target {target_id} has kind {t.kind.value}")
        if t.kind is Kind.POOL:
            if t.slots < 1:
                out.append(f"pool {target_id} has {t.slots} slots")
        elif t.slots != 1:
            out.append(f"target {target_id} is not a pool but has {t.slots} slots")
        if t.version < 0:
            out.append(f"target {target_id} has negative version {t.version}")
        if t.holders and t.kind not in HELD_KINDS:
            out.append(f"target {target_id} ({t.kind.value}) cannot be held, yet has holders")
        if len(t.holders) > t.slots:
            out.append(f"target {target_id} has {len(t.holders)} holders for {t.slots} slots")
        for holder_id in sorted(t.holders):
            gen = t.holders[holder_id]
            expected.setdefault(holder_id, set()).add(target_id)
            holder = st.executions.get(holder_id)
            if holder is None:
                out.append(f"target {target_id}: holder {holder_id} does not exist")
            elif holder.status not in OPEN:
                out.append(f"target {target_id}: holder {holder_id} is {holder.status.value}; its attempt is over")
            elif gen != holder.generation:
                out.append(f"target {target_id}: held by {holder_id}@g{gen}, which is at g{holder.generation}")
        _check_satisfier(st, target_id, out, expected)
    actual = {k: v for k, v in st.satisfies.items()}
    for exec_id in sorted(set(actual) | set(expected)):
        have, want = actual.get(exec_id), expected.get(exec_id)
        if have != want:
            out.append(f"satisfies[{exec_id}] is {sorted(have or ())}; the targets say {sorted(want or ())}")


def _check_satisfier(st: State, target_id: str, out: list[str], expected: dict[str, set[str]]) -> None:
    t = st.targets[target_id]
    sid = t.satisfier_id
    if sid is None:
        if t.satisfier_generation != 0 or t.satisfier_for != 0:
            out.append(f"target {target_id} has no satisfier but satisfier fields g{t.satisfier_generation}")
        return
    if t.kind not in DECLARED_KINDS:
        out.append(f"target {target_id} ({t.kind.value}) cannot have a declared satisfier")
    if t.satisfier_for <= t.version:
        out.append(f"target {target_id}: satisfier for version {t.satisfier_for}, already at {t.version}")
    skind = _kind(sid)
    if skind is Kind.EXEC:
        expected.setdefault(sid, set()).add(target_id)
        ex = st.executions.get(sid)
        if ex is None:
            out.append(f"target {target_id}: satisfier {sid} does not exist")
        elif ex.status not in OPEN:
            out.append(f"target {target_id}: satisfier {sid} is {ex.status.value}; its attempt is over")
        elif ex.generation != t.satisfier_generation:
            out.append(f"target {target_id}: satisfier {sid}@g{t.satisfier_generation} is at g{ex.generation}")
    elif skind in OUTSIDE_KINDS:
        if t.satisfier_generation != 0:
            out.append(f"target {target_id}: outside satisfier {sid} has generation {t.satisfier_generation}")
    else:
        out.append(f"target {target_id}: satisfier {sid!r} is neither an execution nor an outside satisfier")


def _check_executions(st: State, out: list[str]) -> None:
    for exec_id in sorted(st.executions):
        ex = st.executions[exec_id]
        if ex.execution_id != exec_id:
            out.append(f"execution {exec_id} is filed under another id ({ex.execution_id})")
        if ex.generation < 1:
            out.append(f"execution {exec_id} has generation {ex.generation}")
        if ex.cost_consumed < 0:
            out.append(f"execution {exec_id} has negative cost {ex.cost_consumed}")
        if ex.created_at_ms > st.now_ms or ex.status_at_ms > st.now_ms:
            out.append(f"execution {exec_id} has a timestamp after now ({st.now_ms})")
        waits = st.waits_by_waiter.get(exec_id)
        if ex.status is ExecStatus.WAITING and not waits:
            out.append(f"execution {exec_id} is WAITING with no open wait")
        if ex.status not in OPEN:
            if waits:
                out.append(f"execution {exec_id} is {ex.status.value} but still waits")
            if exec_id in st.satisfies:
                out.append(f"execution {exec_id} is {ex.status.value} but still holds or satisfies")
        run = st.runs.get(ex.run_id)
        if run is None:
            out.append(f"execution {exec_id}: run {ex.run_id} does not exist")
        if ex.parent_id is None:
            if run is not None and run.root_id != exec_id:
                out.append(f"execution {exec_id} has no parent but is not the root of run {ex.run_id}")
        else:
            parent = st.executions.get(ex.parent_id)
            if parent is None:
                out.append(f"execution {exec_id}: parent {ex.parent_id} does not exist")
            elif parent.run_id != ex.run_id:
                out.append(f"execution {exec_id}: parent {ex.parent_id} is in run {parent.run_id}")
        for child_id in ex.children:
            child = st.executions.get(child_id)
            if child is None or child.parent_id != exec_id:
                out.append(f"execution {exec_id}: child {child_id} does not name it as parent")
        if ex.agent_id not in st.sessions:
            out.append(f"execution {exec_id}: owning agent {ex.agent_id} never had a session")
    for run_id in sorted(st.runs):
        run = st.runs[run_id]
        root = st.executions.get(run.root_id)
        if run.run_id != run_id or root is None or root.run_id != run_id or root.parent_id is not None:
            out.append(f"run {run_id}: root {run.root_id} is not a parentless execution of this run")
        if run.cancel_generation < 0:
            out.append(f"run {run_id} has negative cancel generation {run.cancel_generation}")


def _check_lease_ttls(st: State, out: list[str]) -> None:
    heap = set(st.ttl_expiry)
    for target_id in sorted(st.lease_ttls):
        ttls = st.lease_ttls[target_id]
        t = st.targets.get(target_id)
        if not ttls:
            out.append(f"lease TTLs of {target_id}: an empty entry")
        for holder_id in sorted(ttls):
            expires, generation, lease = ttls[holder_id]
            if t is None or t.holders.get(holder_id) != generation:
                out.append(f"lease TTL of {target_id} names {holder_id}@g{generation}, which does not hold it")
            elif lease > t.version:
                out.append(f"lease TTL of {target_id} names lease {lease}; the target is at {t.version}")
            if (expires, target_id, holder_id, lease) not in heap:
                out.append(f"lease TTL of {target_id} by {holder_id} at {expires} is not on the TTL heap")


def _check_sessions(st: State, out: list[str]) -> None:
    active = count_active_sessions(st.sessions)
    if st.active_sessions != active:
        out.append(f"the count of ACTIVE sessions is {st.active_sessions}; recounted, {active}")
    for agent_id in sorted(st.sessions):
        s = st.sessions[agent_id]
        if s.agent_id != agent_id:
            out.append(f"session {agent_id} is filed under another id ({s.agent_id})")
        if s.incarnation < 1:
            out.append(f"session {agent_id} has incarnation {s.incarnation}")
    if len(st.idempotency) > st.limits.idempotency_capacity:
        out.append(f"idempotency table holds {len(st.idempotency)} > {st.limits.idempotency_capacity} entries")
