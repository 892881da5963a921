"""Detection against a brute-force oracle (STYLE.md "Reference checks").

The oracle enumerates every subset S of the WAITING executions and keeps the maximal ones in which
(a) every member has a hard wait whose satisfiers all lie in S and (b) S is strongly connected in
the hard graph; the hard graph comes from :func:`spec_satisfiers`, written again here from
docs/design.md §3 rather than imported. Graphs are small (at most 7 executions) and use every target
kind. They are built two ways: directly into a State (fast, and free to hold shapes the machine
would refuse) and through real commands, where the incremental detector is also compared with
the full pass after every single command.
"""

from __future__ import annotations

from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_detect import fenced
from tests.test_queues import queued
from tests.world import World
from waitgraph.statemachine.commands import (
    Acquire,
    CancelRun,
    CloseWait,
    Command,
    CompleteExecution,
    CreateExecution,
    CreateTarget,
    DecideApproval,
    DeclareSatisfier,
    Envelope,
    FailExecution,
    JoinSession,
    ProduceArtifact,
    RegisterWait,
    Release,
    ResumeExecution,
    RetryExecution,
    StartExecution,
    Tick,
)
from waitgraph.statemachine.detect import (
    Candidate,
    IncrementalDetector,
    _pass_from,
    full_pass,
    still_deadlocked,
    wait_satisfiers,
)
from waitgraph.statemachine.enums import TERMINAL, CancelMode, ExecStatus
from waitgraph.statemachine.ids import Kind
from waitgraph.statemachine.machine import StateMachine
from waitgraph.statemachine.state import Execution, State, Target, WaitEdge

# -- the oracle --------------------------------------------------------------------------------


def spec_satisfiers(state: State, edge: WaitEdge) -> tuple[str, ...] | None:
    """docs/design.md §3, one clause per target kind."""

    def live(eid: str, gen: int) -> bool:
        x = state.executions.get(eid)
        return x is not None and x.status not in TERMINAL and x.generation == gen

    if not live(edge.waiter_id, edge.waiter_generation):
        return None
    kind, _, _ = edge.target_id.partition(":")
    if kind == "exec":
        return (edge.target_id,) if live(edge.target_id, edge.target_generation) else None
    t = state.targets.get(edge.target_id)
    if t is None:
        return None
    if kind in ("artifact", "approval"):
        s = t.satisfier_id
        ok = (
            s is not None
            and s.startswith("exec:")
            and t.satisfier_for >= edge.target_generation
            and live(s, t.satisfier_generation)
        )
        return (s,) if ok and s is not None else None
    if kind in ("resource", "reservation"):
        ok = bool(t.holders) and edge.target_generation == t.version
    else:
        ok = len(t.holders) == t.slots
    if not ok or not all(live(h, g) for h, g in t.holders.items()):
        return None
    return tuple(sorted(t.holders))


def oracle(state: State) -> list[Candidate]:
    waiting = sorted(e for e, x in state.executions.items() if x.status is ExecStatus.WAITING)
    hard: dict[str, list[tuple[WaitEdge, frozenset[str]]]] = {}
    for e in waiting:
        hard[e] = []
        for edge in state.waits_of(e):
            sats = spec_satisfiers(state, edge)
            if sats is not None:
                hard[e].append((edge, frozenset(sats)))
    valid: list[frozenset[str]] = []
    for k in range(1, len(waiting) + 1):
        for combo in combinations(waiting, k):
            s = frozenset(combo)
            if all(any(sats <= s for _, sats in hard[m]) for m in s) and connected(s, hard):
                valid.append(s)
    maximal = [s for s in valid if not any(s < t for t in valid)]
    out = []
    for s in maximal:
        members = [(m, state.executions[m].generation) for m in s]
        edges = [(edge.edge_id, edge.edge_version) for m in s for edge, sats in hard[m] if sats & s]
        out.append(Candidate.build(members, edges))
    return sorted(out, key=lambda c: c.members)


def connected(s: frozenset[str], hard: dict[str, list[tuple[WaitEdge, frozenset[str]]]]) -> bool:
    def reach(start: str, forward: bool) -> set[str]:
        seen = {start}
        todo = [start]
        while todo:
            u = todo.pop()
            nxt = (
                [v for _, sats in hard[u] for v in sats if v in s]
                if forward
                else [w for w in s for _, sats in hard[w] if u in sats]
            )
            for v in nxt:
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        return seen

    first = min(s)
    return reach(first, True) >= s and reach(first, False) >= s


def region(state: State, seeds: list[str]) -> list[Candidate]:
    explored = _pass_from(state, seeds)
    assert explored is not None
    return explored[1]


def check_against_oracle(state: State) -> list[Candidate]:
    expected = oracle(state)
    for waits in state.waits_by_waiter.values():
        for edge in waits.values():
            assert wait_satisfiers(state, edge) == spec_satisfiers(state, edge), edge
    assert full_pass(state) == expected
    # The other projection (the incremental one), seeded with everything.
    assert region(state, sorted(state.executions)) == expected
    # Seeded with one execution: every candidate holding it, only candidates of the full pass.
    for e in sorted(state.executions):
        part = region(state, [e])
        assert all(c in expected for c in part)
        assert [c for c in expected if e in c.member_ids] == [c for c in part if e in c.member_ids]
    for c in expected:
        assert still_deadlocked(state, c)
    return expected


# -- random states built directly ----------------------------------------------------------------

NAMES = ["exec:a", "exec:a.b", "exec:ab", "exec:a-c", "exec:a0", "exec:a/e", "exec:a+d"]
"""Ids with characters that sort before ``>``: the canonical edge order is by waiter, then id."""
EXEC_STATUSES = [ExecStatus.WAITING] * 8 + [ExecStatus.RUNNING, ExecStatus.PENDING, ExecStatus.COMPLETED]
TYPED = [
    "artifact:a0",
    "artifact:a1",
    "approval:p0",
    "resource:r0",
    "resource:r1",
    "reservation:v0",
    "pool:q0",
    "pool:q1",
]


@st.composite
def direct_states(draw: st.DrawFn) -> State:
    state = State()
    n = draw(st.integers(1, 7))
    names = NAMES[:n]
    for name in names:
        gen = draw(st.integers(1, 2))
        status = draw(st.sampled_from(EXEC_STATUSES))
        state.executions[name] = Execution(name, name[5:], None, "ag", gen, status, 0, False, False, 0, 0, 0)

    def gen_of(e: str) -> int:
        # mostly the current generation, sometimes a stale or future one
        return state.executions[e].generation + draw(st.sampled_from([0] * 8 + [-1, 1]))

    for tid in TYPED:
        kind = Kind(tid.partition(":")[0])
        t = Target(tid, kind, 1)
        if kind in (Kind.ARTIFACT, Kind.APPROVAL):
            choice = draw(st.sampled_from([*names, *names, "human:alice", "external:ci", None]))
            if choice is not None:
                t.satisfier_id = choice
                t.satisfier_generation = gen_of(choice) if choice.startswith("exec:") else 0
                t.satisfier_for = draw(st.integers(1, 3))
        elif kind is Kind.POOL:
            t.slots = draw(st.integers(1, 3))
            full = draw(st.sampled_from([True, True, True, False]))  # a full pool, mostly
            size = min(t.slots if full else draw(st.integers(0, t.slots - 1)), n)
            holders = draw(st.lists(st.sampled_from(names), min_size=size, max_size=size, unique=True))
            t.holders = {h: gen_of(h) for h in holders}
            t.version = draw(st.integers(0, 3))
        else:
            holder = draw(st.sampled_from([*names, None]))
            if holder is not None:
                t.holders = {holder: gen_of(holder)}
            t.version = draw(st.integers(1, 2))
        state.targets[tid] = t
    for name in names:
        others = [m for m in names if m != name] or [name]
        choices = [*others, *others, *others, name, *TYPED]  # a wait on oneself now and then
        targets = draw(st.lists(st.sampled_from(choices), min_size=1, max_size=3, unique=True))
        for tid in targets:
            t = state.targets.get(tid)
            if t is None:
                tg = gen_of(tid)
            elif t.kind is Kind.POOL:
                tg = 0
            elif t.kind in (Kind.RESOURCE, Kind.RESERVATION):
                tg = t.version + draw(st.sampled_from([0, 0, 0, -1, 1]))  # mostly the lease held
            else:
                tg = draw(st.integers(1, 3))
            wg = gen_of(name)
            edge = WaitEdge(name, wg, tid, tg, "r", None, CancelMode.COOPERATIVE, draw(st.integers(1, 3)), 0)
            state.add_wait(edge)
    index_satisfiers(state)
    return state


def index_satisfiers(state: State) -> None:
    """The derived index the machine keeps: execution -> targets it produces, provides or holds."""
    for t in state.targets.values():
        if t.satisfier_id is not None and t.satisfier_id.startswith("exec:"):
            state.add_satisfies(t.satisfier_id, t.target_id)
        for h in t.holders:
            state.add_satisfies(h, t.target_id)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(direct_states())
def test_full_pass_matches_oracle_on_direct_states(state: State) -> None:
    check_against_oracle(state)
    det = IncrementalDetector()
    assert det.pass_(state) == det.open_candidates() == full_pass(state)


# -- bigger states: the full pass against the incremental projection ------------------------------


@st.composite
def chained_states(draw: st.DrawFn) -> State:
    """Chains that run into cycles, through executions and typed targets, with waiters that are
    not WAITING, generations that do not match, waits on unknown targets and, now and then, a
    waiter without its execution: the shapes where the full pass's first step (the SCCs of the
    waits alone) leaves most waiters out. Too big for the oracle."""
    state = State()
    n = draw(st.integers(8, 60))
    names = [f"exec:{NAMES[i % len(NAMES)][5:]}{i}" for i in draw(st.permutations(range(n)))]
    for name in names:
        status = draw(st.sampled_from([ExecStatus.WAITING] * 12 + EXEC_STATUSES))
        state.executions[name] = Execution(name, name[5:], None, "ag", 1, status, 0, False, False, 0, 0, 0)
    pick = st.sampled_from(names)
    typed: list[str] = []
    for i in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from([Kind.ARTIFACT, Kind.RESOURCE, Kind.POOL]))
        t = Target(f"{kind.value}:t{i}", kind, 1, version=1)
        if kind is Kind.ARTIFACT:
            t.satisfier_id, t.satisfier_generation, t.satisfier_for = draw(pick), 1, 1
        elif kind is Kind.POOL:
            t.slots = draw(st.integers(1, 3))
            t.holders = dict.fromkeys(draw(st.lists(pick, min_size=t.slots, max_size=t.slots, unique=True)), 1)
        else:
            t.holders = {draw(pick): 1}
        state.targets[t.target_id] = t
        typed.append(t.target_id)

    def wait(waiter: str, tid: str) -> None:
        if state.wait(waiter, tid) is not None:
            return
        t = state.targets.get(tid)
        tg = 0 if t is not None and t.kind is Kind.POOL else 1
        tg += draw(st.sampled_from([0] * 15 + [1]))  # now and then an attempt that is over
        state.add_wait(WaitEdge(waiter, 1, tid, tg, "r", None, CancelMode.COOPERATIVE, 1, 0))

    # one chain through every execution, each link now and then through a typed target instead,
    # closed into a cycle at a few points, plus a few waits anywhere
    for i, name in enumerate(names):
        if i + 1 < n:
            wait(name, names[i + 1] if not typed or draw(st.integers(0, 5)) else draw(st.sampled_from(typed)))
    for _ in range(draw(st.integers(1, 4))):
        wait(draw(pick), draw(pick))
    for _ in range(draw(st.integers(0, 3))):
        wait(draw(pick), draw(st.sampled_from(["exec:unknown", "artifact:unknown", *typed])))
    if draw(st.integers(0, 9)) == 0:
        ghost = WaitEdge("exec:ghost", 1, draw(pick), 1, "r", None, CancelMode.COOPERATIVE, 1, 0)
        state.waits_by_waiter["exec:ghost"] = {ghost.target_id: ghost}
    index_satisfiers(state)
    return state


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chained_states())
def test_full_pass_matches_the_incremental_projection_on_chained_states(state: State) -> None:
    found = full_pass(state)
    assert found == region(state, sorted(state.executions))
    for c in found:
        assert still_deadlocked(state, c)


# -- random command sequences ----------------------------------------------------------------------

EXECS = [f"exec:x{i}" for i in range(5)]
TARGETS = {
    "artifact:spec": 1,
    "approval:merge": 1,
    "resource:browser": 1,
    "reservation:gpu": 1,
    "pool:workers": 2,
}

HELD = ["pool:workers", "pool:workers", "resource:browser", "reservation:gpu"]


class Driver:
    def __init__(self) -> None:
        self.m = StateMachine()
        self.t = 0
        self.do(JoinSession(agent_id="ag", lease_ms=86_400_000))
        self.names: list[str] = []
        for e in EXECS:
            self.spawn(e)
        for tid, slots in TARGETS.items():
            self.do(CreateTarget(target_id=tid, slots=slots))

    @property
    def state(self) -> State:
        return self.m.state

    def do(self, cmd: Command) -> None:
        self.t += 1
        self.m.apply(Envelope(actor="operator:op", at_ms=self.t, request_id=None, command=cmd))

    def spawn(self, e: str) -> None:
        self.do(fenced(self.state, CreateExecution, execution_id=e, run_id=e[5:], agent_id="ag"))
        self.do(fenced(self.state, StartExecution, execution_id=e, generation=1))
        self.names.append(e)

    def gen(self, e: str) -> int:
        return self.state.executions[e].generation

    def step(self, op: int, a: int, b: int, c: int) -> None:
        """One command chosen by four small integers; most are valid, some are refused."""
        st_ = self.state
        x = self.names[a % len(self.names)]
        y = self.names[b % len(self.names)]
        if y == x and c % 10:  # a wait on oneself now and then, not all the time
            y = self.names[(a + 1) % len(self.names)]
        tids = sorted(TARGETS)
        tid = tids[b % len(tids)]
        t = st_.targets[tid]
        held = HELD[c % len(HELD)]
        if op <= 5:  # register a wait: on an execution or on a typed target
            if c % 2:
                self.do(RegisterWait(waiter_id=x, waiter_generation=self.gen(x), target_id=y,
                                     target_generation=self.gen(y), reason="w",
                                     edge_version=st_.executions[x].edge_hwm.get(y, 0) + 1,
                                     deadline_ms=self.t + 5 if c % 7 == 0 else None))  # fmt: skip
            else:
                if tid.startswith("pool:"):
                    tg = 0
                elif tid.startswith(("resource:", "reservation:")):
                    tg = t.version
                else:
                    tg = t.version + 1 + c % 2
                self.do(RegisterWait(waiter_id=x, waiter_generation=self.gen(x), target_id=tid, target_generation=tg,
                                     reason="w", edge_version=st_.executions[x].edge_hwm.get(tid, 0) + 1))  # fmt: skip
        elif op <= 7:
            self.do(Acquire(target_id=held, execution_id=x, generation=self.gen(x)))
        elif op == 8:
            self.do(Release(target_id=held, execution_id=x, generation=self.gen(x)))
        elif op <= 10:
            sat = ["human:alice", "external:ci"][c % 2] if c % 5 == 0 else x
            target = "artifact:spec" if c % 3 else "approval:merge"
            self.do(
                DeclareSatisfier(
                    target_id=target,
                    target_generation=st_.targets[target].version + 1 + c % 2,
                    satisfier_id=sat,
                    satisfier_generation=self.gen(x) if sat == x else 0,
                )
            )
        elif op == 11:
            self.do(ResumeExecution(execution_id=x, generation=self.gen(x)))
        elif op == 12:
            waits = st_.waits_of(x)
            if waits:
                e = waits[c % len(waits)]
                self.do(CloseWait(waiter_id=x, waiter_generation=e.waiter_generation, target_id=e.target_id,
                                  edge_version=e.edge_version, reason="done"))  # fmt: skip
        elif op == 13:
            self.do(ProduceArtifact(artifact_id="artifact:spec", version=st_.targets["artifact:spec"].version + 1))
        elif op == 14:
            self.do(DecideApproval(approval_id="approval:merge", version=st_.targets["approval:merge"].version + 1,
                                   approved=bool(c % 2)))  # fmt: skip
        elif op == 15:
            self.do(RetryExecution(execution_id=x, generation=self.gen(x)))
            self.do(fenced(st_, StartExecution, execution_id=x, generation=self.gen(x)))
        elif op == 16:
            self.do(fenced(st_, CompleteExecution, execution_id=x, generation=self.gen(x)))
            if st_.executions[x].status is ExecStatus.COMPLETED:
                # a finished execution is replaced by a new one (under a new id), so the
                # universe does not run dry of live executions in a long sequence
                self.names.remove(x)
                self.spawn(f"exec:y{len(st_.executions)}")
        elif op == 17:
            self.do(FailExecution(execution_id=x, generation=self.gen(x), reason="boom"))
            if c % 4:  # usually tried again at once: a new generation of the same execution
                self.do(RetryExecution(execution_id=x, generation=self.gen(x)))
                self.do(fenced(st_, StartExecution, execution_id=x, generation=self.gen(x)))
        else:
            self.t += 3
            self.do(Tick())


steps = st.lists(st.tuples(st.integers(0, 18), st.integers(0, 9), st.integers(0, 9), st.integers(0, 20)), max_size=40)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_commands_oracle_and_incremental_equals_full(ops: list[tuple[int, int, int, int]]) -> None:
    d = Driver()
    det = IncrementalDetector()
    det.pass_(d.state)
    for op in ops:
        d.step(*op)
        before = det.seq
        changed = set(d.state.changed_since(before))
        owners = {m for c in det.open_candidates() if changed & set(c.member_ids) for m in c.member_ids}
        found = det.pass_(d.state)
        full = check_against_oracle(d.state)
        assert det.open_candidates() == full
        assert all(c in full for c in found)
        # every candidate holding a touched execution, or a member of a candidate that held one
        must = [c for c in full if (changed | owners) & set(c.member_ids)]
        assert all(c in found for c in must)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(1, 5))
def test_incremental_with_sparse_passes(ops: list[tuple[int, int, int, int]], every: int) -> None:
    """Several commands between passes: the open set still equals the full pass."""
    d = Driver()
    det = IncrementalDetector()
    for i, op in enumerate(ops):
        d.step(*op)
        if i % every == 0:
            det.pass_(d.state)
            assert det.open_candidates() == full_pass(d.state)
    det.pass_(d.state)
    assert det.open_candidates() == oracle(d.state)


def test_incremental_equals_full_on_a_long_random_run() -> None:
    """A deterministic longer run (seeded in the test, never in the core) with a pass after
    every command, on a bigger universe than the oracle can afford."""
    import random

    rnd = random.Random(7)
    d = Driver()
    det = IncrementalDetector()
    det.pass_(d.state)
    seen = 0
    for _ in range(3000):
        d.step(rnd.randrange(19), rnd.randrange(10), rnd.randrange(10), rnd.randrange(21))
        det.pass_(d.state)
        full = full_pass(d.state)
        assert det.open_candidates() == full
        seen += bool(full)
    assert seen > 100  # the run does form deadlocks, often


# -- soft edges and the reorder search (statemachine/reorder.py), against brute force ----------


def spec_soft_edges(state: State) -> list[tuple[str, str, str]]:
    """docs/queues.md: x -> y when both wait in one grant queue, y ahead of x, and y may be
    granted (WAITING, not a holder of the target)."""
    out = []
    for tid, queue in state.queues.items():
        t = state.targets[tid]
        ok = [
            e.waiter_id
            for e in queue
            if state.executions[e.waiter_id].status is ExecStatus.WAITING and e.waiter_id not in t.holders
        ]
        out += [(ok[j], ok[i], tid) for i in range(len(ok)) for j in range(i + 1, len(ok))]
    return sorted(out)


def _graph(state: State, soft: list[tuple[str, str, str]]) -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for w, waits in state.waits_by_waiter.items():
        if state.executions[w].status is ExecStatus.WAITING:
            for edge in waits.values():
                g.setdefault(w, set()).update(spec_satisfiers(state, edge) or ())
    for x, y, _ in soft:
        g.setdefault(x, set()).add(y)
    return g


def _reaches(g: dict[str, set[str]], a: str) -> set[str]:
    seen, todo = set(), [a]
    while todo:
        for u in g.get(todo.pop(), ()):
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return seen


def _on_cycle(g: dict[str, set[str]], v: str) -> bool:
    return v in _reaches(g, v)


def _queue_orders(state: State, tid: str, limit: int) -> list[tuple[str, ...]]:
    """Every order of the queue's grantable waiters among their own places (the others stay),
    that moves nobody ahead of a waiter passed over ``limit`` times who was ahead of it."""
    from itertools import permutations

    queue = state.queues[tid]
    before = [e.waiter_id for e in queue]
    t = state.targets[tid]
    mine = [w for w in before if state.executions[w].status is ExecStatus.WAITING and w not in t.holders]
    pinned = {e.waiter_id for e in queue if e.passed >= limit}
    out = []
    for perm in permutations(mine):
        it = iter(perm)
        after = tuple(next(it) if w in mine else w for w in before)
        if all(after.index(p) < after.index(b) for p in pinned for b in before[before.index(p) + 1 :]):
            out.append(after)
    return out


def _soft_world(data: st.DataObject) -> State:
    """A small state of queued waits: 3..6 executions, 2..3 resources or pools, each full (held by
    some of them or by a running outsider), waits queued in a drawn order, some entries passed
    over to the limit (pinned)."""
    w = World()
    n = data.draw(st.integers(3, 6), label="executions")
    names = [f"exec:e{i}" for i in range(n)]
    for i in range(n):
        w.execution(f"e{i}")
    w.execution("out")
    targets = []
    for k in range(data.draw(st.integers(2, 3), label="targets")):
        slots = data.draw(st.sampled_from([1, 1, 2]), label="slots")
        tid = f"pool:p{k}" if slots > 1 or data.draw(st.booleans(), label="pool") else f"resource:r{k}"
        w.target(tid, slots=slots)
        holders = data.draw(
            st.lists(st.sampled_from([*names, "exec:out"]), min_size=slots, max_size=slots, unique=True)
        )
        for h in holders:
            w.hold(h, tid)
        targets.append(tid)
    for _ in range(data.draw(st.integers(4, 12), label="waits")):
        e, tid = data.draw(st.sampled_from(names)), data.draw(st.sampled_from(targets))
        t = w.st.targets[tid]
        # a holder may wait for a second permit of a pool (never grantable, so no soft edge to it)
        if w.st.wait(e, tid) is None and (e not in t.holders or (tid.startswith("pool:") and t.slots > 1)):
            queued(w, e, tid)
    # one queued waiter may be asked to stop: it keeps its places, but nobody waits behind it
    if data.draw(st.booleans(), label="cancel one"):
        e = data.draw(st.sampled_from(names))
        run_id = w.st.executions[e].run_id
        w.ok(w.owner(e), CancelRun(run_id=run_id, observed_cancel_generation=0, reason="stop"))
    for queue in w.st.queues.values():
        for entry in queue:
            if data.draw(st.integers(0, 4), label="pinned") == 0:
                entry.passed = w.st.limits.queue_pass_limit
    return w.st


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_soft_edges_cycles_and_reorders_agree_with_brute_force(data: st.DataObject) -> None:
    from waitgraph.statemachine.reorder import (
        apply_orders,
        find_reorder,
        soft_candidate,
        soft_cycles,
        soft_edges,
        still_soft,
    )

    state = _soft_world(data)
    soft = spec_soft_edges(state)
    assert soft_edges(state) == soft
    g = _graph(state, soft)
    # soft cycles: the strongly connected sets of hard + soft edges with a soft edge inside
    nodes = sorted(set(g) | {u for us in g.values() for u in us})
    reach = {v: _reaches(g, v) for v in nodes}
    comps = sorted({tuple(sorted(u for u in nodes if u == v or (u in reach[v] and v in reach[u]))) for v in nodes})
    expected = []
    for comp in comps:
        inside = set(comp)
        mine = tuple(e for e in soft if e[0] in inside and e[1] in inside)
        if mine and (len(comp) > 1 or comp[0] in g.get(comp[0], ())):
            expected.append((comp, mine))
    cycles = soft_cycles(state)
    assert [(c.members, c.soft) for c in cycles] == expected
    limit = state.limits.queue_pass_limit
    for cycle in cycles:
        # the second read (members and their queues only) recognises the cycle it was proposed as
        assert still_soft(state, soft_candidate(state, cycle)) == cycle
        movable = cycle.queues
        queued_waiters = {x for x, _, t in soft_edges(state) if t in movable} | {
            y for _, y, t in soft_edges(state) if t in movable
        }
        choices: list[dict[str, tuple[str, ...]]] = [{}]
        for tid in movable:
            choices = [{**c, tid: order} for c in choices for order in _queue_orders(state, tid, limit)]
        valid = []
        for c in choices:
            g2 = _graph(state, spec_soft_edges_in(state, c))
            if not any(_on_cycle(g2, v) for v in queued_waiters):
                valid.append(c)
        found = find_reorder(state, cycle)
        assert (found is not None) == bool(valid), (cycle, valid)
        if found is not None:
            chosen = {tid: tuple(e.waiter_id for e in state.queues[tid]) for tid in movable}
            chosen.update({tid: after for tid, _, after in found.queues})
            assert chosen in valid, (chosen, valid)
            if len(valid) == 1:
                assert chosen == valid[0]
            copy = State.restore(state.snapshot())
            apply_orders(copy, found)
            assert still_soft(copy, soft_candidate(state, cycle)) is None  # broken: a commit would retract
            assert not any(
                set(c.queues) & set(movable) and set(c.members) & set(cycle.members) for c in soft_cycles(copy)
            )


def spec_soft_edges_in(state: State, orders: dict[str, tuple[str, ...]]) -> list[tuple[str, str, str]]:
    """:func:`spec_soft_edges` with some queues in another order."""
    copy = State.restore(state.snapshot())
    for tid, order in orders.items():
        by_id = {e.waiter_id: e for e in copy.queues[tid]}
        copy.queues[tid] = [by_id[w] for w in order]
    return spec_soft_edges(copy)
