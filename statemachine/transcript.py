"""Scenario transcripts: replay a text of commands against a fresh StateMachine, render outcomes.

The format follows etcd-io/raft's ``testdata/*.txt`` (tests/transcripts/README.md has the long
version). A block is one command line, a ``----`` line and the rendered outcome::

    # Comments start with '#'; they and blank lines are kept verbatim.
    RegisterWait as=agent:a at=1000 waiter_id=exec:A waiter_generation=7 target_id=artifact:r reason=review
    ----
    APPLIED
      WaitRegistered edge_id=exec:A>artifact:r waiter_generation=7 ...

Rules kept here:
- Pure: strings in, strings out. No file, no clock; the caller reads and writes files.
- One generic parser: a command line is the command ``KIND`` and ``key=value`` fields parsed by
  the dataclass field types (``commands.py`` is the only place a command's shape is written).
- Commands go through the codec (``encode_envelope`` then ``apply_bytes``), as on a real node.
- :func:`run` replays the whole text and returns it with freshly rendered outputs: the
  transcript is up to date exactly when ``run(text) == text`` (and rewriting a file is writing
  ``run(text)`` back).
- A malformed transcript raises :class:`TranscriptError` naming the line.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import typing
from collections.abc import Callable
from enum import StrEnum
from types import NoneType, UnionType
from typing import Any

from .codec import command_class, encode_envelope, field_types
from .commands import Command, Envelope
from .detect import Candidate, full_pass
from .effects import Effect
from .errors import CodecError, Status, WaitgraphError
from .ids import HELD_KINDS, Kind, kind_of
from .machine import StateMachine
from .outcome import Outcome, Result
from .recovery import propose_command
from .reorder import find_reorder, soft_candidates
from .state import Limits, State

SEPARATOR = "----"
DEFAULT_ACTOR = "operator:op"
RESERVED_KEYS = frozenset({"as", "at", "rid"})
"""Envelope fields: ``as`` (actor), ``at`` (logical ms), ``rid`` (request id)."""


class TranscriptError(WaitgraphError):
    """The transcript itself is malformed, or a runner check (``snapshot-roundtrip``) failed."""

    status = Status.INVALID_ARGUMENT
    code = "transcript"


# -- rendering ----------------------------------------------------------------------------------

_BARE = re.compile(r'[^\s"\\]+\Z')


def render_value(value: object) -> str:
    """One field value as the parser reads it back: ints, true/false, none, enum values, strings,
    tuples as comma-separated items (``()`` when empty).

    A string is written bare unless it is empty, has spaces, quotes or backslashes, or would read
    as ``none``/``true``/``false``; then it is double-quoted with JSON escapes.
    """
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, tuple | list):
        return ",".join(render_value(v) for v in value) if value else "()"
    text = str(value)
    if _BARE.match(text) and text not in ("none", "true", "false"):
        return text
    return json.dumps(text, ensure_ascii=False)


def render_effect(fx: Effect) -> str:
    """Every field, except one added to a released version while it is at its default (as the
    codec leaves it out): transcripts written before it was added still read the same."""
    added = getattr(fx, "ADDED", ())
    parts = [
        f"{f.name}={render_value(getattr(fx, f.name))}"
        for f in dataclasses.fields(fx)
        if f.name not in added or getattr(fx, f.name) != f.default
    ]
    return " ".join([fx.KIND, *parts])


def render_outcome(outcome: Outcome) -> list[str]:
    """``APPLIED`` / ``NOOP <reason>: <message>`` / ``REJECTED <STATUS> <code>: <message>``,
    `` (duplicate)`` when served from the idempotency table, then one indented line per effect."""
    if outcome.result is Result.APPLIED:
        head = "APPLIED"
    elif outcome.result is Result.NOOP:
        head = f"NOOP {outcome.code}: {outcome.message}"
    else:
        status = outcome.status.value if outcome.status is not None else "?"
        head = f"REJECTED {status} {outcome.code}: {outcome.message}"
    if outcome.duplicate:
        head += " (duplicate)"
    return [head, *("  " + render_effect(fx) for fx in outcome.effects)]


def _at(satisfier_id: str, generation: int) -> str:
    """``exec:B@g3``; an outside satisfier (``human:``, ``external:``) has no generation."""
    return f"{satisfier_id}@g{generation}" if kind_of(satisfier_id) is Kind.EXEC else satisfier_id


def _target_at(target_id: str, generation: int) -> str:
    """The seed's notation: ``artifact:review-42@g3``, ``resource:browser-9@lease12``, ``pool:gpu``."""
    kind = kind_of(target_id)
    if kind is Kind.POOL:
        return target_id
    return f"{target_id}@lease{generation}" if kind in HELD_KINDS else f"{target_id}@g{generation}"


def render_state(st: State) -> list[str]:
    """A compact, deterministic summary of the whole state; empty sections are left out."""
    out = [f"now_ms={st.now_ms}"]
    if st.sessions:
        out.append("sessions:")
        for agent in sorted(st.sessions):
            s = st.sessions[agent]
            out.append(
                f"  {agent} {s.status.value} incarnation={s.incarnation} lease_ms={s.lease_ms} "
                f"expires_at_ms={s.expires_at_ms}"
            )
    if st.runs:
        out.append("runs:")
        for run_id in sorted(st.runs):
            r = st.runs[run_id]
            out.append(f"  {run_id} root={r.root_id} cancel_generation={r.cancel_generation}")
    if st.executions:
        out.append("executions:")
        for eid in sorted(st.executions):
            ex = st.executions[eid]
            line = f"  {eid} g{ex.generation} {ex.status.value} run={ex.run_id} agent={ex.agent_id}"
            if ex.parent_id is not None:
                line += f" parent={ex.parent_id}"
            if ex.priority:
                line += f" priority={ex.priority}"
            if ex.checkpoint:
                line += " checkpoint=true"
            if ex.unique_evidence:
                line += " unique_evidence=true"
            if ex.cost_consumed:
                line += f" cost={ex.cost_consumed}"
            out.append(line)
            for effect_id in sorted(ex.side_effects):
                se = ex.side_effects[effect_id]
                out.append(
                    f"    side_effect {effect_id} {se.outcome.value} g{se.generation} "
                    f"compensatable={render_value(se.compensatable)}"
                )
    if st.targets:
        out.append("targets:")
        for tid in sorted(st.targets):
            t = st.targets[tid]
            held = t.kind in HELD_KINDS
            line = f"  {tid} lease={t.version}" if held else f"  {tid} version={t.version}"
            if t.kind is Kind.POOL:
                line += f" slots={t.slots}"
            if t.satisfier_id is not None:
                relation = "produced_by" if t.kind is Kind.ARTIFACT else "provided_by"
                line += f" {relation}={_at(t.satisfier_id, t.satisfier_generation)} for=g{t.satisfier_for}"
            if t.approved is not None:
                line += f" approved={render_value(t.approved)}"
            if t.holders:
                line += " held_by=" + ",".join(f"{h}@g{g}" for h, g in sorted(t.holders.items()))
            out.append(line)
    edges = [e for w in sorted(st.waits_by_waiter) for e in st.waits_of(w)]
    if edges:
        out.append("waits:")
        for e in edges:
            out.append(
                f"  {e.waiter_id}@g{e.waiter_generation} -> {_target_at(e.target_id, e.target_generation)} "
                f"edge_version={e.edge_version} deadline_ms={render_value(e.deadline_ms)} "
                f"cancel_mode={e.cancel_mode.value} reason={render_value(e.reason)}"
            )
    if st.queues:
        out.append("queues:")
        for tid in sorted(st.queues):
            entries = " ".join(
                e.waiter_id + (f"(p{e.priority})" if e.priority else "") + (f"(passed{e.passed})" if e.passed else "")
                for e in st.queues[tid]
            )
            out.append(f"  {tid}: {entries}")
    return out


# -- parsing ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Token:
    key: str
    value: str
    quoted: bool
    bare: bool = False
    """A word without ``=`` (runner verbs' arguments: ``propose #1``, ``decision d1``)."""


@dataclasses.dataclass(slots=True)
class _Block:
    line_no: int
    """1-based line of the command."""
    head: str
    tokens: list[_Token]


def _tokenize(text: str, line_no: int) -> tuple[str, list[_Token]]:
    """``Head key=value key="quoted value"`` -> (head, tokens)."""
    head, _, rest = text.strip().partition(" ")
    tokens: list[_Token] = []
    i, n = 0, len(rest)
    while i < n:
        if rest[i].isspace():
            i += 1
            continue
        eq = rest.find("=", i)
        space = next((j for j in range(i, n) if rest[j].isspace()), n)
        if eq < 0 or eq > space:
            tokens.append(_Token(rest[i:space], "", False, True))
            i = space
            continue
        key = rest[i:eq]
        if not key:
            raise TranscriptError(f"line {line_no}: missing key before '=' in {rest[i:space]!r}")
        i = eq + 1
        if i < n and rest[i] == '"':
            j = i + 1
            while j < n and rest[j] != '"':
                j += 2 if rest[j] == "\\" else 1
            if j >= n:
                raise TranscriptError(f"line {line_no}: unterminated quoted value for {key}")
            try:
                value = json.loads(rest[i : j + 1])
            except ValueError as exc:
                raise TranscriptError(f"line {line_no}: bad quoted value for {key}: {exc}") from exc
            i = j + 1
            if i < n and not rest[i].isspace():
                raise TranscriptError(f"line {line_no}: expected a space after the quoted value of {key}")
            tokens.append(_Token(key, value, True))
        else:
            j = next((k for k in range(i, n) if rest[k].isspace()), n)
            tokens.append(_Token(key, rest[i:j], False))
            i = j
    seen: set[str] = set()
    for tok in tokens:
        if tok.key in seen:
            raise TranscriptError(f"line {line_no}: {tok.key} is given twice")
        seen.add(tok.key)
    return head, tokens


_INT = re.compile(r"-?[0-9]+\Z")


def _convert(tp: Any, tok: _Token, line_no: int) -> object:
    """Parse one token by the dataclass field's type."""

    def bad(expected: str) -> TranscriptError:
        return TranscriptError(f"line {line_no}: {tok.key}={tok.value!r} is not {expected}")

    if isinstance(tp, UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        if not tok.quoted and tok.value == "none":
            return None
        if len(args) != 1:
            raise TranscriptError(f"line {line_no}: unsupported field type {tp} for {tok.key}")
        return _convert(args[0], tok, line_no)
    if typing.get_origin(tp) is tuple:
        # tuple[T, ...]: comma-separated items, each parsed as T; `()` is the empty tuple.
        item_type, *rest = typing.get_args(tp)
        if rest != [Ellipsis]:
            raise TranscriptError(f"line {line_no}: unsupported field type {tp} for {tok.key}")
        if tok.value in ("()", ""):
            return ()
        return tuple(_convert(item_type, _Token(tok.key, item, False), line_no) for item in tok.value.split(","))
    if tp is bool:
        if tok.quoted or tok.value not in ("true", "false"):
            raise bad("true or false")
        return tok.value == "true"
    if tp is int:
        if tok.quoted or not _INT.match(tok.value):
            raise bad("an integer")
        return int(tok.value)
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        members = {m.value: m for m in tp}
        if tok.value not in members:
            raise bad("one of " + ", ".join(sorted(members)))
        return members[tok.value]
    if tp is str:
        return tok.value
    raise TranscriptError(f"line {line_no}: unsupported field type {tp} for {tok.key}")


def _parse(text: str) -> tuple[list[str], dict[int, _Block]]:
    """Split into kept lines (comments, blanks, commands) and the block each command starts.

    Returns the kept lines (old outputs removed) and, by index into those lines, the blocks.
    """
    lines = text.splitlines()
    kept: list[str] = []
    blocks: dict[int, _Block] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            kept.append(line)
            i += 1
            continue
        if line.strip() == SEPARATOR:
            raise TranscriptError(f"line {i + 1}: '{SEPARATOR}' without a command line before it")
        head, tokens = _tokenize(line, i + 1)
        blocks[len(kept)] = _Block(i + 1, head, tokens)
        kept.append(line)
        i += 1
        if i < len(lines) and lines[i].strip() == SEPARATOR:
            i += 1
            # The recorded output runs to the next blank line; it is replaced, never parsed.
            while i < len(lines) and lines[i].strip():
                if lines[i].lstrip().startswith("#"):
                    raise TranscriptError(
                        f"line {i + 1}: a comment inside the output of line {blocks[len(kept) - 1].line_no}; "
                        "leave a blank line before it"
                    )
                i += 1
        elif i < len(lines) and lines[i].strip():
            raise TranscriptError(f"line {i + 1}: expected '{SEPARATOR}' or a blank line after the command on line {i}")
    return kept, blocks


# -- replay -------------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Runner:
    machine: StateMachine = dataclasses.field(default_factory=StateMachine)
    actor: str = DEFAULT_ACTOR
    at_ms: int = 0
    commands_applied: int = 0
    detected: list[Candidate] = dataclasses.field(default_factory=list)
    """Candidates of the latest ``detect``; ``digest=#1`` names the first."""

    def step(self, block: _Block) -> list[str]:
        verb = _VERBS.get(block.head)
        if verb is not None:
            return verb(self, block)
        return self.command(block)

    def command(self, block: _Block) -> list[str]:
        n = block.line_no
        try:
            cls = command_class(block.head)
        except CodecError:
            known = ", ".join(sorted(_VERBS))
            raise TranscriptError(
                f"line {n}: {block.head!r} is neither a command KIND nor a runner verb ({known})"
            ) from None
        types = field_types(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        kwargs: dict[str, object] = {}
        request_id: str | None = None
        for tok in block.tokens:
            if tok.bare:
                raise TranscriptError(f"line {n}: expected key=value, got {tok.key!r}")
            if tok.key == "as":
                self.actor = tok.value
            elif tok.key == "at":
                at = _convert(int, tok, n)
                assert isinstance(at, int)
                self.at_ms = at
            elif tok.key == "rid":
                rid = _convert(str | None, tok, n)
                assert rid is None or isinstance(rid, str)
                request_id = rid
            elif tok.key == "digest" and tok.value.startswith("#") and not tok.quoted:
                kwargs["digest"] = self.candidate(tok.value, n).digest
            elif tok.key in names:
                kwargs[tok.key] = _convert(types[tok.key], tok, n)
            else:
                raise TranscriptError(
                    f"line {n}: {cls.KIND} has no field {tok.key!r}; fields: {', '.join(names)} "
                    f"(and {', '.join(sorted(RESERVED_KEYS))})"
                )
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise TranscriptError(f"line {n}: {cls.KIND} is missing {', '.join(missing)}")
        cmd: Command = cls(**kwargs)  # type: ignore[arg-type]
        return self.apply(cmd, request_id, n)

    def candidate(self, ref: str, line_no: int) -> Candidate:
        """``#N``: the N-th candidate printed by the latest ``detect``."""
        try:
            return self.detected[int(ref[1:]) - 1]
        except (ValueError, IndexError):
            raise TranscriptError(f"line {line_no}: {ref} names no candidate of the latest detect") from None

    def envelope_keys(self, block: _Block) -> list[_Token]:
        """Apply ``as=`` and ``at=`` of a verb line; return its other tokens."""
        rest = []
        for tok in block.tokens:
            if tok.key == "as":
                self.actor = tok.value
            elif tok.key == "at":
                at = _convert(int, tok, block.line_no)
                assert isinstance(at, int)
                self.at_ms = at
            else:
                rest.append(tok)
        return rest

    def apply(self, cmd: Command, request_id: str | None, n: int) -> list[str]:
        env = Envelope(actor=self.actor, at_ms=self.at_ms, request_id=request_id, command=cmd)
        try:
            data = encode_envelope(env)
        except (OverflowError, ValueError, TypeError) as exc:
            raise TranscriptError(f"line {n}: cannot encode the command: {exc}") from exc
        self.commands_applied += 1
        return render_outcome(self.machine.apply_bytes(data))

    def no_envelope(self, block: _Block) -> str:
        """The single bare word after a verb (``decision d1``)."""
        if len(block.tokens) != 1 or not block.tokens[0].bare:
            raise TranscriptError(f"line {block.line_no}: {block.head} takes one argument")
        return block.tokens[0].key

    def no_args(self, block: _Block) -> None:
        if block.tokens:
            raise TranscriptError(f"line {block.line_no}: {block.head} takes no arguments")


def _verb_state(r: _Runner, block: _Block) -> list[str]:
    """``state``: a compact summary of the whole state (see :func:`render_state`)."""
    r.no_args(block)
    return render_state(r.machine.state)


def _verb_digest(r: _Runner, block: _Block) -> list[str]:
    """``digest``: the first 16 hex of the state digest (sha256 of the canonical snapshot)."""
    r.no_args(block)
    return [r.machine.digest()[:16]]


def _verb_counters(r: _Runner, block: _Block) -> list[str]:
    """``counters``: the replicated metrics counters, sorted (``noop.<reason>`` and so on)."""
    r.no_args(block)
    counters = r.machine.state.counters
    return [f"{k}={counters[k]}" for k in sorted(counters)] or ["(none)"]


def _verb_snapshot_roundtrip(r: _Runner, block: _Block) -> list[str]:
    """``snapshot-roundtrip``: snapshot, restore into a fresh machine, snapshot again.

    Fails unless both snapshots and the rebuilt indexes are identical; the replay then continues
    on the restored machine, so later blocks also exercise what restore rebuilt.
    """
    r.no_args(block)
    before = r.machine.snapshot()
    restored = StateMachine(State.restore(before))
    after = restored.snapshot()
    old, new = r.machine.state, restored.state
    problems = []
    if after != before:
        problems.append("snapshot bytes differ")
    if new.satisfies != old.satisfies:
        problems.append("satisfier/holder index differs")
    if new.waits_by_target != old.waits_by_target or new.edge_count != old.edge_count:
        problems.append("wait index differs")
    if (new.open_executions_by_agent, new.open_edges_by_agent) != (
        old.open_executions_by_agent,
        old.open_edges_by_agent,
    ):
        problems.append("per-agent counts differ")
    if problems:
        raise TranscriptError(f"line {block.line_no}: snapshot-roundtrip: {'; '.join(problems)}")
    r.machine = restored
    return ["identical"]


def _verb_limits(r: _Runner, block: _Block) -> list[str]:
    """``limits key=value ...``: set fields of the state's Limits; only before the first command."""
    n = block.line_no
    if r.commands_applied:
        raise TranscriptError(f"line {n}: limits must come before the first command")
    types = field_types(Limits)
    names = [f.name for f in dataclasses.fields(Limits)]
    if not block.tokens:
        raise TranscriptError(f"line {n}: limits needs key=value fields: {', '.join(names)}")
    limits = r.machine.state.limits
    for tok in block.tokens:
        if tok.key not in names:
            raise TranscriptError(f"line {n}: Limits has no field {tok.key!r}; fields: {', '.join(names)}")
        setattr(limits, tok.key, _convert(types[tok.key], tok, n))
    given = {tok.key for tok in block.tokens}
    return [f"{name}={getattr(limits, name)}" for name in names if name in given]


def _verb_detect(r: _Runner, block: _Block) -> list[str]:
    """``detect``: a full detection pass; prints each candidate as ``#N`` (for ``digest=#N``)."""
    r.no_args(block)
    r.detected = full_pass(r.machine.state)
    out = []
    for i, c in enumerate(r.detected, 1):
        out.append(f"candidate #{i} digest={c.digest[:16]} signature={c.signature}")
        out.append("  members=" + ",".join(f"{m}@g{g}" for m, g in c.members))
        out.append("  edges=" + ",".join(f"{e}@v{v}" for e, v in c.edges))
    return out or ["no candidates"]


def _verb_soft(r: _Runner, block: _Block) -> list[str]:
    """``soft``: the soft cycles (statemachine/reorder.py), each as ``#N`` for ``propose #N``: its
    members and edges as a candidate, its soft edges (waiter behind ahead on target), and the
    reorder that breaks it (queue before => after) or ``no reorder``."""
    r.no_args(block)
    st = r.machine.state
    found = soft_candidates(st)
    r.detected = [c for c, _ in found]
    out = []
    for i, (c, cyc) in enumerate(found, 1):
        out.append(f"soft cycle #{i} digest={c.digest[:16]} signature={c.signature}")
        out.append("  members=" + ",".join(f"{m}@g{g}" for m, g in c.members))
        out.append("  edges=" + ",".join(f"{e}@v{v}" for e, v in c.edges))
        out.append("  soft=" + ",".join(f"{x}~>{y}@{t}" for x, y, t in cyc.soft))
        plan = find_reorder(st, cyc)
        if plan is None:
            out.append("  no reorder")
        for tid, before, after in plan.queues if plan is not None else ():
            out.append(f"  reorder {tid}: {' '.join(before)} => {' '.join(after)}")
    return out or ["no soft cycles"]


def _verb_propose(r: _Runner, block: _Block) -> list[str]:
    """``propose #N [as=...] [at=...]``: ProposeRecovery with candidate #N's members and edges."""
    rest = r.envelope_keys(block)
    if len(rest) != 1 or not rest[0].bare or not rest[0].key.startswith("#"):
        raise TranscriptError(f"line {block.line_no}: propose takes one candidate reference, e.g. propose #1")
    c = r.candidate(rest[0].key, block.line_no)
    return r.apply(propose_command(c, r.commands_applied), None, block.line_no)


def _verb_decision(r: _Runner, block: _Block) -> list[str]:
    """``decision dN``: the recorded decision: kind, epoch, every candidate's score, roles, releases."""
    rest = r.no_envelope(block)
    d = r.machine.state.recovery.decisions.get(rest)
    if d is None:
        raise TranscriptError(f"line {block.line_no}: no decision {rest!r}")
    out = [
        f"{d.decision_id} kind={d.kind.value} mode={d.mode.value} reason={d.reason_code} epoch={render_value(d.epoch)} "
        f"winner={render_value(d.winner_id)}@g{d.winner_generation} policy={d.policy_version}"
    ]
    for sc in sorted(d.scores, key=lambda s: s.key()):
        out.append(
            f"  score {sc.execution_id}@g{sc.generation} external={render_value(sc.external_side_effects)} "
            f"checkpoint={render_value(sc.checkpoint)} priority={sc.priority} cost={sc.cost_consumed} "
            f"unique_evidence={render_value(sc.unique_evidence)}"
        )
    out.append("  roles=" + ",".join(f"{m}:{role}" for m, role in d.roles))
    out.append("  released=" + (",".join(f"{t}<-{m}" for t, m in d.released) or "none"))
    for tid, before, after in d.reorders:
        out.append(f"  reordered {tid}: {' '.join(before)} => {' '.join(after)}")
    if d.reassigned:
        out.append(
            "  reassigned="
            + ",".join(
                f"{r.approval_id}:{_at(r.from_id, r.from_generation)}->{_at(r.to_id, r.to_generation)}"
                for r in d.reassigned
            )
        )
    out.extend(f"  remedy {name} {outcome} {why}" for name, outcome, why in d.remedies)
    return out


_VERBS: dict[str, Callable[[_Runner, _Block], list[str]]] = {
    "counters": _verb_counters,
    "decision": _verb_decision,
    "detect": _verb_detect,
    "propose": _verb_propose,
    "soft": _verb_soft,
    "digest": _verb_digest,
    "limits": _verb_limits,
    "snapshot-roundtrip": _verb_snapshot_roundtrip,
    "state": _verb_state,
}
"""Runner verbs: lowercase words that are not commands."""


def run(text: str) -> str:
    """Replay ``text`` against a fresh StateMachine and return it with freshly rendered outputs.

    Comments, blank lines and command lines are kept verbatim; each command's recorded output is
    replaced. The result ends with one newline.
    """
    kept, blocks = _parse(text)
    runner = _Runner()
    out: list[str] = []
    for idx, line in enumerate(kept):
        out.append(line)
        block = blocks.get(idx)
        if block is not None:
            out.append(SEPARATOR)
            out.extend(runner.step(block))
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + "\n" if out else ""


def diff(recorded: str, replayed: str, name: str = "transcript") -> str:
    """A unified diff from the recorded text to the replayed one; empty when they are equal."""
    return "".join(
        difflib.unified_diff(
            recorded.splitlines(keepends=True),
            replayed.splitlines(keepends=True),
            fromfile=f"{name} (recorded)",
            tofile=f"{name} (replayed)",
        )
    )
