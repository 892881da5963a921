"""What the operator CLI prints: JSON documents, tables, the DOT graph and decision narratives.

Rules kept here:
- ``-o json`` is the RPC's answer in a stable shape: every field of the message, under its
  operator.proto name, in declaration order; int64 as JSON numbers (not the proto3 mapping's
  strings); enums as the core's spelling (``WAITING``, ``auto-safe``, ``COMMITTED``); an unset
  ``optional`` field as ``null``. Verbs that combine RPCs add keys, never rename them
  (docs/cli.md lists every document).
- Tables are built once as blocks (:class:`Table`, :class:`Fields`, :class:`Text`) and drawn
  two ways: with rich (boxes, colour) when stdout is a terminal, and as plain aligned text with
  no box characters and no escape codes otherwise, so ``| grep`` and ``| awk`` work.
- Nothing here talks to the network: every function takes replies and returns text or blocks.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from google.protobuf.descriptor import EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from waitgraph.proto.v1 import operator_pb2
from waitgraph.statemachine.outcome import Outcome
from waitgraph.statemachine.readiness import Readiness
from waitgraph.statemachine.recovery_state import POLICY_VERSION, Score
from waitgraph.statemachine.transcript import render_value
from waitgraph.wire import convert

if TYPE_CHECKING:  # the live view imports this module into the node, which has no use for the SDK
    from waitgraph.sdk import WaitgraphClientError

SHORT = 12
"""Hex digits of a digest shown in tables (JSON always has the whole digest)."""
MAX_SUSPENDED_SHOWN = 10
"""Suspended agents ``status`` names in its sessions line (the count is whole)."""

# -- JSON -----------------------------------------------------------------------------------------------

_CORE_ENUM_TEXT: dict[str, dict[int, str]] = {
    cls.__name__: {convert.enum_number(m): m.value for m in cls} for cls in convert.DOMAIN_ENUMS
}


def enum_text(desc: EnumDescriptor, number: int) -> str | None:
    """The core's spelling of a wire enum value; None for UNSPECIFIED."""
    core = _CORE_ENUM_TEXT.get(desc.name, {})
    if number in core:
        return core[number]
    value = desc.values_by_number.get(number)
    if value is None:
        return str(number)
    prefix = convert.snake(desc.name).upper() + "_"
    name = value.name.removeprefix(prefix)
    return None if name == "UNSPECIFIED" else name


def _field_json(fd: FieldDescriptor, value: Any) -> Any:
    if fd.type == FieldDescriptor.TYPE_MESSAGE:
        return message_json(value)
    if fd.type == FieldDescriptor.TYPE_ENUM:
        return enum_text(fd.enum_type, value)
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return value.hex()
    return value


def message_json(msg: Message) -> dict[str, Any]:
    """Every field of ``msg`` in declaration order (the stable ``-o json`` shape)."""
    out: dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        value = getattr(msg, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            out[fd.name] = {k: _field_json(value_fd, value[k]) for k in sorted(value)}
        elif fd.is_repeated:
            out[fd.name] = [_field_json(fd, v) for v in value]
        elif fd.has_presence and not msg.HasField(fd.name):
            out[fd.name] = None
        else:
            out[fd.name] = _field_json(fd, value)
    return out


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    """A write's answer: the core's Outcome, effects as ``{"kind": ..., <fields>}``."""
    effects = []
    for fx in outcome.effects:
        body: dict[str, Any] = {"kind": fx.KIND}
        for f in dataclasses.fields(fx):
            value = getattr(fx, f.name)
            body[f.name] = list(value) if isinstance(value, tuple) else value
        effects.append(body)
    return {
        "result": outcome.result.value,
        "code": outcome.code,
        "message": outcome.message,
        "duplicate": outcome.duplicate,
        "effects": effects,
    }


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False, default=str)


# -- blocks and the two renderers ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Styled:
    """A cell with a style hint for the terminal (ignored when piped)."""

    text: str
    style: str


@dataclass
class Table:
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]] = field(default_factory=list)
    title: str | None = None
    empty: str = "(none)"


@dataclass
class Fields:
    pairs: list[tuple[str, Any]]
    title: str | None = None


@dataclass
class Text:
    text: str
    style: str | None = None


Block = Table | Fields | Text


def cell(value: Any) -> str:
    if isinstance(value, Styled):
        return value.text
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(cell(v) for v in value) if value else "-"
    return str(value)


def plain(blocks: Iterable[Block]) -> str:
    """Aligned text: no box characters, no escape codes; blank line between blocks."""
    parts: list[str] = []
    for block in blocks:
        lines: list[str] = []
        if isinstance(block, Text):
            lines = block.text.splitlines() or [""]
        elif isinstance(block, Fields):
            if block.title:
                lines.append(block.title)
            width = max((len(k) for k, _ in block.pairs), default=0)
            lines += [f"{k + ':':<{width + 1}} {cell(v)}".rstrip() for k, v in block.pairs]
        else:
            if block.title:
                lines.append(block.title)
            if not block.rows:
                lines.append(block.empty)
            else:
                grid = [[c.upper() for c in block.columns]] + [[cell(v) for v in row] for row in block.rows]
                widths = [max(len(r[i]) for r in grid) for i in range(len(block.columns))]
                for row in grid:
                    lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


_TONES = {
    "leader": "bold green",
    "follower": "cyan",
    "candidate": "yellow",
    "WAITING": "yellow",
    "RUNNING": "green",
    "CANCELLING": "magenta",
    "CANCEL_REQUESTED": "magenta",
    "CANCELLED": "dim",
    "COMPLETED": "dim",
    "FAILED": "red",
    "QUARANTINED": "bold red",
    "NEEDS_RECONCILIATION": "bold red",
    "OPEN": "yellow",
    "COMMITTED": "green",
    "frozen": "bold red",
    "unreachable": "bold red",
}


def _rich_cell(value: Any) -> Any:
    from rich.text import Text as RichText

    if isinstance(value, Styled):
        return RichText(value.text, style=value.style)
    text = cell(value)
    if isinstance(value, bool):
        return RichText(text, style="green" if value else "red")
    return RichText(text, style=_TONES.get(text, ""))


def rich_print(blocks: Iterable[Block], stream: TextIO, color: bool = True) -> None:
    """Boxes and colour, for a terminal."""
    from rich import box
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text as RichText

    console = Console(file=stream, highlight=False, no_color=not color, soft_wrap=False)
    first = True
    for block in blocks:
        if not first:
            console.print()
        first = False
        if isinstance(block, Text):
            console.print(RichText(block.text, style=block.style or ""))
        elif isinstance(block, Fields):
            grid = RichTable.grid(padding=(0, 2))
            grid.add_column(style="bold")
            grid.add_column()
            for k, v in block.pairs:
                grid.add_row(k, _rich_cell(v))
            if block.title:
                console.print(RichText(block.title, style="bold underline"))
            console.print(grid)
        else:
            if not block.rows:
                if block.title:
                    console.print(RichText(block.title, style="bold underline"))
                console.print(RichText(block.empty, style="dim"))
                continue
            table = RichTable(
                title=block.title, title_justify="left", title_style="bold", box=box.ROUNDED, header_style="bold"
            )
            for c in block.columns:
                table.add_column(c.upper(), overflow="fold")  # wrapped, never cut with an ellipsis
            for row in block.rows:
                table.add_row(*(_rich_cell(v) for v in row))
            console.print(table)


def emit(blocks: Sequence[Block], stream: TextIO | None = None, tty: bool | None = None) -> None:
    """Rich on a terminal, plain text otherwise (``NO_COLOR`` keeps the boxes, drops colour)."""
    stream = stream or sys.stdout
    if tty is None:
        tty = stream.isatty()
    if tty:
        rich_print(blocks, stream, color=not os.environ.get("NO_COLOR"))
    else:
        stream.write(plain(blocks))
        stream.flush()


# -- small formatting helpers ---------------------------------------------------------------------------


def short(digest: str) -> str:
    return digest[:SHORT]


def at(execution_id: str, generation: int) -> str:
    return f"{execution_id}@g{generation}"


def wall(at_ms: int) -> str:
    """A logical time stamped from the proposing node's clock, as UTC."""
    if at_ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(at_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def snake_keys(doc: Any) -> Any:
    """The same document with every mapping key in snake_case (``clusterFrozen`` ->
    ``cluster_frozen``): the CLI's JSON has one casing, whatever the core's document uses."""
    if isinstance(doc, dict):
        return {_snake(str(k)): snake_keys(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [snake_keys(v) for v in doc]
    return doc


def _snake(key: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in key).lstrip("_")


def read_note(endpoint: str, stale: bool, applied_index: int, fallback: str | None = None) -> Text:
    if not stale:
        return Text(f"read from {endpoint} after a log barrier (fresh), applied index {applied_index}", "dim")
    why = f"; no fresh read possible: {fallback}" if fallback else ""
    return Text(f"STALE: read from {endpoint}'s own replica at applied index {applied_index}{why}", "yellow")


# -- errors -------------------------------------------------------------------------------------------------


def code_name(error: WaitgraphClientError) -> str:
    """The gRPC code an error is shown with; ``ERROR`` for one that is not an RPC's (no token)."""
    from waitgraph.sdk import RpcError

    return error.status.name if isinstance(error, RpcError) else "ERROR"


def error_message(error: WaitgraphClientError) -> str:
    """What the error says, in the CLI's words: a deadline names the flag that sets it."""
    from waitgraph.sdk import RpcError
    from waitgraph.sdk.errors import NO_ANSWER

    if not isinstance(error, RpcError):
        return str(error)
    return f"{NO_ANSWER} (--rpc-timeout)" if error.message == NO_ANSWER else error.message


def error_line(error: WaitgraphClientError) -> str:
    """An error as every verb prints it: ``CODE: message [endpoint]``, on one line."""
    from waitgraph.sdk import RpcError

    if isinstance(error, RpcError):
        return str(error.with_message(error_message(error)))
    return f"ERROR: {' '.join(error_message(error).split())}"


def error_json(error: WaitgraphClientError) -> dict[str, Any]:
    from waitgraph.sdk import RpcError

    rpc = error if isinstance(error, RpcError) else None
    return {
        "code": code_name(error),
        "message": error_message(error),
        "endpoint": rpc.endpoint if rpc else None,
        "waitgraph_code": (rpc.code or None) if rpc else None,
        "leader": rpc.leader if rpc else None,
    }


def refused_token(error: WaitgraphClientError | None) -> bool:
    """The node answered, and refused the credentials: not an outage."""
    return error is not None and code_name(error) in ("UNAUTHENTICATED", "PERMISSION_DENIED")


# -- status and health ------------------------------------------------------------------------------------


def _admission(st: Any) -> str:
    if st.admission_frozen:
        return "frozen"
    return f"open ({st.frozen_runs} runs frozen)" if st.frozen_runs else "open"


def status_json(reports: Sequence[Any]) -> dict[str, Any]:
    nodes = []
    for r in reports:
        node: dict[str, Any] = {
            "endpoint": r.endpoint,
            "reachable": r.status is not None,
            "discovered": r.discovered,
            "error": error_json(r.error) if r.error is not None else None,
        }
        if r.status is None:
            node["node_id"] = r.node_id
        else:
            node.update(message_json(r.status))
        nodes.append(node)
    return {"nodes": nodes}


def status_blocks(reports: Sequence[Any], digest: bool = False) -> list[Block]:
    columns = ["node", "endpoint", "role", "leader", "term", "commit", "applied", "epoch", "mode", "admission"]
    columns += ["healthy"] + (["digest"] if digest else [])
    failed = any(r.status is None for r in reports)
    if failed:
        columns.append("error")
    rows = []
    for r in reports:
        st = r.status
        if st is None:
            row: list[Any] = [r.node_id or "?", r.endpoint, Styled("unreachable", "bold red")] + ["-"] * 7 + [False]
            row += ["-"] if digest else []
            row.append(error_line(r.error) if r.error else "-")
        else:
            row = [st.node_id, r.endpoint, st.role, st.leader_id or "-", st.term, st.commit_index, st.applied_index]
            row += [st.epoch, enum_text(st.DESCRIPTOR.fields_by_name["mode"].enum_type, st.mode), _admission(st)]
            row.append(bool(st.has_quorum and st.ready))
            if digest:
                row.append(short(st.state_digest))
            if failed:
                row.append("")
        rows.append(row)
    blocks: list[Block] = [Table(columns, rows)]
    up = [r.status for r in reports if r.status is not None]
    leader = next((s for s in up if s.role == "leader"), None)
    facts = [f"{len(up)} of {len(reports)} nodes reachable"]
    if leader is not None:
        facts.insert(0, f"leader {leader.node_id} at {leader.grpc_address} (term {leader.term})")
        facts.append(
            f"recovery voters {','.join(leader.voters) or '-'}, quorum {leader.quorum}, "
            f"max rollback {leader.max_rollback}"
        )
        facts.append(f"open proposals {leader.open_proposals}, decisions {leader.decisions}")
        if leader.HasField("sessions"):  # issue #37: the leader's view of the sessions
            facts.append(sessions_fact(leader.sessions))
        if leader.admission_frozen:
            facts.append(f"admission frozen: {leader.admission_frozen_reason}")
        if leader.orphaned_executions:
            facts.append(
                f"{leader.orphaned_executions} orphaned executions (their agent's session ended: "
                "`waitgraph graph --status running --status waiting` shows them)"
            )
    else:
        facts.insert(0, "no reachable node is the leader")
    not_durable = [s.node_id for s in up if not s.durable]
    if up:
        facts.append(
            f"NOT DURABLE (--no-fsync) on {','.join(not_durable)}: acknowledged writes can be lost on a power cut"
            if not_durable
            else "durable: every node flushes its journal before acknowledging"
        )
    if up:
        facts.append(grpc_fronts(up))
    if digest:
        digests = {s.state_digest for s in up}
        facts.append("state digests: " + ("all equal" if len(digests) == 1 else f"{len(digests)} different"))
    blocks.append(Text("; ".join(facts)))
    return blocks


def grpc_fronts(statuses: Sequence[Any]) -> str:
    """Which gRPC front serves each node: ``native`` (cluster/front) or ``python`` (a node that fell
    back, or was told to); a node too old to say is ``unknown``."""
    by_front: dict[str, list[str]] = {}
    for st in statuses:
        by_front.setdefault(st.grpc_front or "unknown", []).append(st.node_id)
    return "gRPC front: " + "; ".join(f"{front} on {','.join(nodes)}" for front, nodes in sorted(by_front.items()))


@dataclass
class Health:
    healthy: bool
    reason: str
    members: int
    quorum_needed: int
    reachable: int
    leader_id: str | None
    leader_address: str | None
    reports: Sequence[Any]
    recovery: Readiness | None = None
    """Whether a recovery could commit now (None when there is no leader to ask)."""

    def to_json(self) -> dict[str, Any]:
        nodes = []
        for r in self.reports:
            st = r.status
            nodes.append(
                {
                    "endpoint": r.endpoint,
                    "node_id": r.node_id,
                    "reachable": st is not None,
                    "serving": r.serving,
                    "role": st.role if st else None,
                    "leader_id": (st.leader_id or None) if st else None,
                    "has_quorum": st.has_quorum if st else None,
                    "applied_index": st.applied_index if st else None,
                    "error": error_json(r.error) if r.error else None,
                }
            )
        return {
            "healthy": self.healthy,
            "reason": self.reason,
            "members": self.members,
            "quorum_needed": self.quorum_needed,
            "reachable": self.reachable,
            "leader": {"node_id": self.leader_id, "address": self.leader_address} if self.leader_id else None,
            "recovery": None
            if self.recovery is None
            else {
                "can_commit": self.recovery.can_commit,
                "configured": self.recovery.configured,
                "quorum": self.recovery.quorum,
                "reachable_voters": list(self.recovery.reachable),
                "unreachable_voters": list(self.recovery.unreachable),
                "reason": self.recovery.describe(),
            },
            "nodes": nodes,
        }

    def blocks(self) -> list[Block]:
        rows = []
        for r in self.reports:
            st = r.status
            serving = {True: "SERVING", False: "NOT_SERVING", None: "-"}[r.serving]
            if st is None:
                rows.append(
                    [
                        r.node_id or "?",
                        r.endpoint,
                        Styled("token refused", "bold yellow")
                        if refused_token(r.error)
                        else Styled("unreachable", "bold red"),
                        serving,
                        "-",
                        "-",
                        error_line(r.error) if r.error else "-",
                    ]
                )
            else:
                rows.append([st.node_id, r.endpoint, st.role, serving, st.leader_id or "-", st.has_quorum, ""])
        verdict = Styled("healthy", "bold green") if self.healthy else Styled("UNHEALTHY", "bold red")
        blocks: list[Block] = [
            Table(["node", "endpoint", "role", "serving", "leader", "quorum", "error"], rows),
            Text(f"{verdict.text}: {self.reason}", verdict.style),
        ]
        if self.recovery is not None:
            ok = self.recovery.can_commit
            blocks.append(
                Text(
                    f"recovery {'ready' if ok else 'NOT READY'}: {self.recovery.describe()}",
                    "green" if ok else "bold red",
                )
            )
        return blocks


# -- the graph ---------------------------------------------------------------------------------------------


def _enum(msg: Message, name: str) -> str | None:
    return enum_text(msg.DESCRIPTOR.fields_by_name[name].enum_type, getattr(msg, name))


def cycle_members(cycles: Any) -> set[str]:
    return {m.execution_id for c in (cycles.cycles if cycles is not None else ()) for m in c.members}


def graph_blocks(graph: Any, cycles: Any = None) -> list[Block]:
    in_cycle = cycle_members(cycles)
    execs = []
    for ex in graph.executions:
        effects = [f"{s.effect_id}:{_enum(s, 'outcome')}" for s in ex.side_effects]
        status = _enum(ex, "status")
        execs.append(
            [
                ex.execution_id,
                ex.run_id,
                ex.agent_id,
                ex.generation,
                Styled(f"{status} (orphaned)", "bold yellow") if ex.orphaned else status,
                Styled("yes", "bold red") if ex.execution_id in in_cycle else "",
                ex.priority,
                ex.checkpoint,
                ex.cost_consumed,
                effects,
            ]
        )
    targets = []
    for t in graph.targets:
        satisfier = at(t.satisfier_id, t.satisfier_generation) if t.HasField("satisfier_id") else None
        holders = [at(h.execution_id, h.generation) for h in t.holders]
        targets.append([t.target_id, t.slots, t.version, holders, satisfier])
    waits = []
    for w in graph.waits:
        deadline = w.deadline_ms if w.HasField("deadline_ms") else None
        waits.append(
            [
                at(w.waiter_id, w.waiter_generation),
                f"{w.target_id}@{w.target_generation}",
                w.reason,
                _enum(w, "cancel_mode"),
                w.edge_version,
                wall(deadline) if deadline else None,
                w.queue_position if w.HasField("queue_position") else None,
            ]
        )
    runs = [[r.run_id, r.root_id, r.cancel_generation, _enum(r, "cancel_state")] for r in graph.runs]
    sessions = [[s.agent_id, s.incarnation, _enum(s, "status"), wall(s.expires_at_ms)] for s in graph.sessions]
    blocks: list[Block] = [
        Table(
            ["execution", "run", "agent", "gen", "status", "cycle", "prio", "ckpt", "cost", "side effects"],
            execs,
            f"EXECUTIONS ({len(execs)})",
        ),
        Table(["target", "slots", "version", "holders", "satisfier"], targets, f"TARGETS ({len(targets)})"),
        Table(["waiter", "target", "reason", "mode", "version", "deadline", "queue"], waits, f"WAITS ({len(waits)})"),
        Table(["run", "root", "cancel gen", "cancel state"], runs, f"RUNS ({len(runs)})"),
        Table(["agent", "incarnation", "status", "expires"], sessions, f"SESSIONS ({len(sessions)})"),
    ]
    summary = f"epoch {graph.epoch}; {len(in_cycle)} executions in candidate cycles"
    more = graph_more(graph)
    if more:
        summary += f"; {more}"
    blocks.append(Text(summary))
    return blocks


def graph_more(graph: Any) -> str | None:
    """What the size cap left out, counted: ``950 more executions, 1,900 more waits not shown``."""
    if not graph.truncated:
        return None
    parts = [
        f"{n - len(shown):,} more {what}"
        for n, shown, what in (
            (graph.matched_executions, graph.executions, "executions"),
            (graph.matched_waits, graph.waits, "waits"),
            (graph.matched_targets, graph.targets, "targets"),
        )
        if n > len(shown)
    ]
    return (
        ", ".join(parts) or "more"
    ) + " not shown (raise --limit, or narrow with --run, --agent, --status, --cycles)"


def _dot_id(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot_attrs(**attrs: Any) -> str:
    return "[" + ", ".join(f"{k}={_dot_id(str(v))}" for k, v in attrs.items()) + "]"


_SATISFIER_LABEL = {"artifact": "produced by", "approval": "provided by"}


_HOT = {
    # A candidate: detected, not (yet) confirmed by a committed recovery proposal.
    "candidate": {"color": "darkorange", "penwidth": "2.5", "fontcolor": "darkorange3"},
    # Confirmed: the proposal committed (the second read still saw the deadlock); a decision exists.
    "confirmed": {"color": "red", "penwidth": "2.5", "fontcolor": "red"},
}


def cycle_kinds(cycles: Any) -> dict[str, str]:
    """Each current cycle's digest -> ``confirmed`` (its recovery proposal committed) or ``candidate``."""
    out: dict[str, str] = {}
    for c in cycles.cycles if cycles is not None else ():
        committed = c.HasField("proposal_status") and _enum(c, "proposal_status") == "COMMITTED"
        out[c.digest] = "confirmed" if committed else "candidate"
    return out


def victims(decisions: Iterable[Any]) -> dict[str, Any]:
    """execution id -> the decision that picked it as the victim (``victim``, or ``rolled_back``
    by a livelock tie-break); a SHADOW decision names the victim recovery would have picked."""
    return {r.execution_id: d for d in decisions for r in d.roles if r.role in ("victim", "rolled_back")}


def victim_note(d: Any) -> str:
    kind = _enum(d, "kind")
    if kind == "SHADOW":
        return f"VICTIM if recovery acted ({d.decision_id}, {_enum(d, 'mode')})"
    return f"VICTIM ({d.decision_id}, epoch {d.epoch})" if d.HasField("epoch") else f"VICTIM ({d.decision_id})"


def graph_dot(graph: Any, cycles: Any = None, decisions: Sequence[Any] = (), hidden: str | None = None) -> str:
    """Graphviz DOT: executions are boxes, targets ellipses; ``waits`` edges go waiter -> target,
    ``held by`` / ``produced by`` edges go target -> execution. Members and edges of candidate
    cycles are orange, of confirmed ones (the recovery proposal committed) red; the victim each
    of ``decisions`` chose is filled and labelled. ``hidden`` says what was left out. Nodes and
    edges carry SVG classes (``cycle``, ``candidate``, ``confirmed``, ``victim``) for the live view.
    This is the one picture: ``waitgraph graph -o dot|svg`` and the live view (cluster/ops/liveview.py)
    both draw it."""
    kinds = cycle_kinds(cycles)
    member_kind: dict[str, str] = {}
    edge_kind: dict[tuple[str, str], str] = {}
    for c in cycles.cycles if cycles is not None else ():
        kind = kinds[c.digest]
        for m in c.members:
            if member_kind.get(m.execution_id) != "confirmed":
                member_kind[m.execution_id] = kind
        for e in c.edges:
            waiter, _, target = e.edge_id.partition(">")
            if edge_kind.get((waiter, target)) != "confirmed":
                edge_kind[(waiter, target)] = kind
    target_kind: dict[str, str] = {}
    for (_, target), kind in edge_kind.items():
        if target_kind.get(target) != "confirmed":
            target_kind[target] = kind
    chosen = victims(decisions)

    def hot(attrs: dict[str, str], kind: str | None, extra: str = "") -> dict[str, str]:
        if kind is not None:
            attrs.update(_HOT[kind])
            attrs["class"] = f"cycle {kind}{extra}"
        elif extra:
            attrs["class"] = extra.strip()
        return attrs

    lines = [
        "digraph waitgraph {",
        '  graph [fontname="Helvetica", fontsize=12, labelloc=t];',
        '  node [fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    n_confirmed = sum(1 for k in kinds.values() if k == "confirmed")
    n_candidates = len(kinds) - n_confirmed
    label = f"waitgraph: epoch {graph.epoch}, applied index {graph.applied_index}, "
    label += f"{n_candidates} candidate cycle(s) (orange), {n_confirmed} confirmed (red)" if kinds else "no cycle"
    if hidden:
        label += f"; {hidden}"
    lines.append(f"  label={_dot_id(label)};")
    for c in cycles.cycles if cycles is not None else ():
        names = ", ".join(at(m.execution_id, m.generation) for m in c.members)
        lines.append(f"  // {kinds[c.digest]} {c.digest} signature {c.signature}: {names}")
    execs = {ex.execution_id for ex in graph.executions}
    for ex in graph.executions:
        text = f"{ex.execution_id}@g{ex.generation}\n{_enum(ex, 'status')}\nagent {ex.agent_id}"
        attrs = {"shape": "box", "label": text}
        d = chosen.get(ex.execution_id)
        if d is not None:
            attrs["label"] = f"{text}\n{victim_note(d)}"
            attrs.update({"style": "filled,bold", "fillcolor": "mistyrose", "peripheries": "2"})
        hot(attrs, member_kind.get(ex.execution_id), " victim" if d is not None else "")
        lines.append(f"  {_dot_id(ex.execution_id)} {_dot_attrs(**attrs)};")
    for t in graph.targets:
        if t.target_id in execs:
            continue
        attrs = {"shape": "ellipse", "label": f"{t.target_id}\nv{t.version}, {t.slots} slot(s)"}
        hot(attrs, target_kind.get(t.target_id))
        lines.append(f"  {_dot_id(t.target_id)} {_dot_attrs(**attrs)};")
    for w in graph.waits:
        attrs = {"label": f"waits: {w.reason}" if w.reason else "waits"}
        hot(attrs, edge_kind.get((w.waiter_id, w.target_id)))
        lines.append(f"  {_dot_id(w.waiter_id)} -> {_dot_id(w.target_id)} {_dot_attrs(**attrs)};")
    for t in graph.targets:
        hot_kind = target_kind.get(t.target_id)
        for h in t.holders:
            attrs = {"label": "held by", "style": "dashed"}
            hot(attrs, hot_kind if h.execution_id in member_kind else None)
            lines.append(f"  {_dot_id(t.target_id)} -> {_dot_id(h.execution_id)} {_dot_attrs(**attrs)};")
        if t.HasField("satisfier_id"):
            attrs = {"label": _SATISFIER_LABEL.get(t.target_id.partition(":")[0], "satisfied by"), "style": "dashed"}
            hot(attrs, hot_kind if t.satisfier_id in member_kind else None)
            lines.append(f"  {_dot_id(t.target_id)} -> {_dot_id(t.satisfier_id)} {_dot_attrs(**attrs)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


class GraphvizMissing(RuntimeError):
    """``dot`` is not installed: the SVG cannot be drawn (the DOT text still can)."""


DOT_TIMEOUT_S = 20.0


def graph_svg(dot_text: str, timeout_s: float = DOT_TIMEOUT_S) -> str:
    """Graphviz's SVG of :func:`graph_dot`'s text: graphviz escapes every label, so ids and
    reasons end up as text, never markup.

    A graph of several unconnected parts (the usual case: most executions wait on nothing) is laid
    out part by part and packed into a block (``ccomps -x | dot | gvpack | neato -n2``): ``dot``
    alone would line them up side by side into a strip too wide to read, and its own ``pack``
    drops the edge labels. One part: ``dot -Tsvg``."""
    import shutil

    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizMissing("graphviz is not installed (no `dot` on PATH): install it, e.g. apt-get install graphviz")
    deadline = time.monotonic() + timeout_s
    tools = [shutil.which(t) for t in ("ccomps", "gvpack", "neato")]
    if all(tools):
        ccomps, gvpack, neato = tools
        # ccomps exits 1 when the graph has several parts (0: connected)
        parts = _graphviz([ccomps, "-x"], dot_text.encode(), deadline, timeout_s, ok=(0, 1))  # type: ignore[list-item]
        if parts.count(b"digraph") > 1:
            laid = _graphviz([exe], parts, deadline, timeout_s)
            packed = _graphviz([gvpack, "-m", "8"], laid, deadline, timeout_s)  # type: ignore[list-item]
            return _graphviz([neato, "-s", "-n2", "-Tsvg"], packed, deadline, timeout_s).decode()  # type: ignore[list-item]
    return _graphviz([exe, "-Tsvg"], dot_text.encode(), deadline, timeout_s).decode()


def _graphviz(cmd: list[str], data: bytes, deadline: float, timeout_s: float, ok: tuple[int, ...] = (0,)) -> bytes:
    import subprocess

    try:
        done = subprocess.run(
            cmd, input=data, capture_output=True, timeout=max(0.1, deadline - time.monotonic()), check=False
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"graphviz took more than {timeout_s:.0f}s to lay the graph out") from None
    if done.returncode not in ok:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        name = cmd[0].rsplit("/", 1)[-1]
        raise RuntimeError(f"graphviz ({name}) failed ({done.returncode}): {why[-1] if why else 'no message'}")
    return done.stdout


# -- cycles ------------------------------------------------------------------------------------------------


_DID_NOTHING = frozenset({"SHADOW", "RECONCILIATION", "ESCALATION"})
"""Decision kinds that cancel and release nothing (statemachine/recovery.py ``_NOT_ACTING``)."""


def proposal_outcome(status: str | None, close_reason: str) -> str | None:
    """A proposal's status as an operator reads it: a COMMITTED proposal is closed by its
    decision (``close_reason`` is the decision's kind), and a SHADOW one (or a reconciliation,
    an escalation) did nothing: saying only COMMITTED would read as a recovery that acted."""
    if status == "COMMITTED" and close_reason in _DID_NOTHING:
        return f"{close_reason}: nothing done"
    if status == "COMMITTED" and close_reason:
        return f"COMMITTED ({close_reason})"
    return status


def cycles_blocks(cycles: Any, quorum: int | None = None) -> list[Block]:
    closed_as = {p.digest: p.close_reason for p in cycles.proposals}
    candidates = []
    for c in cycles.cycles:
        status = (
            proposal_outcome(_enum(c, "proposal_status"), closed_as.get(c.digest, ""))
            if c.HasField("proposal_status")
            else "not proposed"
        )
        candidates.append(
            [short(c.digest), c.signature, [at(m.execution_id, m.generation) for m in c.members], len(c.edges), status]
        )
    proposals = []
    for p in cycles.proposals:
        proposals.append(
            [
                short(p.digest),
                proposal_outcome(_enum(p, "status"), p.close_reason),
                [m.execution_id for m in p.members],
                p.proposer,
                p.epoch_proposed,
                f"{len(p.approvals)} (needs {quorum})" if quorum else len(p.approvals),
                list(p.approvals),
                list(p.rejections),
                p.decision_id if p.HasField("decision_id") else None,
                p.close_reason or None,
            ]
        )
    soft = [
        [
            short(c.digest),
            [at(m.execution_id, m.generation) for m in c.members],
            [f"{e.waiter_id} behind {e.ahead_id} on {e.target_id}" for e in c.soft_edges],
            _enum(c, "proposal_status") if c.HasField("proposal_status") else "not proposed",
        ]
        for c in cycles.soft_cycles
    ]
    soft_table = Table(
        ["digest", "members", "soft edges", "proposal"],
        soft,
        f"SOFT CYCLES ({len(soft)}): deadlocks in the making, which reordering the queues can break (docs/queues.md)",
    )
    return [
        Table(
            ["digest", "signature", "members", "edges", "proposal"],
            candidates,
            f"CANDIDATE DEADLOCKS ({len(candidates)})",
            "(none: no set of waiting executions waits only on itself)",
        ),
        *([soft_table] if soft else []),
        Table(
            [
                "digest",
                "status",
                "members",
                "proposer",
                "for epoch",
                "votes",
                "approvals",
                "rejections",
                "decision",
                "closed as",
            ],
            proposals,
            f"RECOVERY PROPOSALS ({len(proposals)})",
        ),
        Text(f"epoch {cycles.epoch}"),
    ]


# -- explain -----------------------------------------------------------------------------------------------

_TERMS = (
    ("external side effects", "has no external (COMMITTED/UNKNOWN) side effects"),
    ("checkpoint", "has a checkpoint to resume from"),
    ("priority", "has the lower priority"),
    ("cost consumed", "has consumed less"),
    ("unique evidence", "holds no unique evidence"),
    ("execution id", "has the lowest id (the final tie-break)"),
)
"""The terms of victim policy v1 in the order :meth:`Score.key` compares them."""
POLICY_TERMS = _TERMS


def _score(v: Any) -> Score:
    return Score(
        v.execution_id,
        v.generation,
        v.external_side_effects,
        v.checkpoint,
        v.priority,
        v.cost_consumed,
        v.unique_evidence,
    )


def policy_order(decision: Any) -> list[str]:
    """The members in victim-policy order (first = the policy's victim); the core's own key."""
    return [s.execution_id for s in sorted((_score(v) for v in decision.scores), key=Score.key)]


def decisive_term(decision: Any) -> tuple[str, str] | None:
    """The first policy term on which the policy's first choice beats the runner-up."""
    scores = sorted((_score(v) for v in decision.scores), key=Score.key)
    if len(scores) < 2:
        return None
    first, second = scores[0].key(), scores[1].key()
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        if a != b:
            return _TERMS[i]
    return None


def duration(ms: int) -> str:
    """A span of logical milliseconds for people: ``850 ms``, ``4.1 s``, ``3 min 05 s``, ``2 h 03 min``."""
    if ms < 0:
        return f"-{duration(-ms)}"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{ms // 60_000} min {ms // 1000 % 60:02d} s"
    return f"{ms // 3_600_000} h {ms // 60_000 % 60:02d} min"


_RELATION = {
    "artifact": ("produced by", "produces it"),
    "approval": ("provided by", "provides it"),
    "exec": ("is", "is it"),
}
"""How a member satisfies a wait, by target kind; the held kinds (resource, pool, reservation) hold."""


def relation(target_id: str) -> tuple[str, str]:
    return _RELATION.get(target_id.partition(":")[0], ("held by", "holds it"))


def cycle_path(decision: Any) -> list[Any]:
    """The cycle as one walk: from the lowest member, follow its first wait (edge order) to the
    first member satisfying it, until a member repeats. Returns the waits walked, in order."""
    waits = list(decision.waits)
    if not waits:
        return []
    by_waiter: dict[str, list[Any]] = {}
    for w in waits:
        if w.satisfiers:
            by_waiter.setdefault(w.waiter_id, []).append(w)
    walk: list[Any] = []
    seen: set[str] = set()
    current = min(w.waiter_id for w in waits)
    while current in by_waiter and current not in seen:
        seen.add(current)
        step = by_waiter[current][0]
        walk.append(step)
        current = step.satisfiers[0]
    return walk


def path_text(walk: Sequence[Any]) -> str:
    if not walk:
        return "-"
    parts = [walk[0].waiter_id]
    for w in walk:
        parts.append(f"waits for {w.target_id} ({w.reason or 'no reason given'}), {relation(w.target_id)[0]}")
        parts.append(w.satisfiers[0])
    return " -> ".join(parts)


def _votes_of(decision: Any, proposal: Any) -> list[Any]:
    if decision.votes:
        return list(decision.votes)
    return list(proposal.votes) if proposal is not None else []


def explain_json(decision: Any, proposal: Any, history: Sequence[Any], trajectory: Any = None) -> dict[str, Any]:
    doc = message_json(decision)
    doc["policy_order"] = policy_order(decision)
    term = decisive_term(decision)
    doc["decided_by"] = term[0] if term else None
    doc["proposal"] = message_json(proposal) if proposal is not None else None
    doc["signature_history"] = [message_json(p) for p in history]
    doc["cycle_path"] = [
        {
            "waiter_id": w.waiter_id,
            "target_id": w.target_id,
            "reason": w.reason,
            "relation": relation(w.target_id)[0],
            "satisfier_id": w.satisfiers[0],
            "age_ms": decision.at_ms - w.registered_at_ms,
        }
        for w in cycle_path(decision)
    ]
    doc["trajectory"] = message_json(trajectory) if trajectory is not None else None
    return doc


def _epoch_line(d: Any) -> str:
    if d.HasField("epoch"):
        return f"{d.epoch_before} -> {d.epoch} (committed by this decision, before anything was released)"
    return f"{d.epoch_before} (not advanced: nothing was rolled back)"


def _signature_line(t: Any) -> str:
    if t is None or not t.known:
        return "no trajectory on this replica"
    first = f"; first at epoch {t.first_seen.epoch}, {wall(t.first_seen.at_ms)}" if t.HasField("first_seen") else ""
    return f"proposed {t.observed_total} time(s), rolled back {t.recovered_total} time(s){first}"


def _history_story(d: Any, t: Any) -> list[str]:
    """Has the signature been seen before, and what happened then; the livelock guard's view."""
    if t is None or not t.known:
        return [f"Signature {d.signature}: this replica keeps no trajectory for it (evicted, or older than it)."]
    earlier = [s for s in t.decisions if s.decision_id != d.decision_id and s.at_ms <= d.at_ms]
    later = [s for s in t.decisions if s.decision_id != d.decision_id and s.at_ms > d.at_ms]

    def summary(s: Any) -> str:
        kind = _enum(s, "kind")
        epoch = f"epoch {s.epoch_before} -> {s.epoch}" if s.HasField("epoch") else f"epoch {s.epoch_before} kept"
        who = f", {s.winner_id}" if s.HasField("winner_id") else ""
        return f"{s.decision_id} at {wall(s.at_ms)} ({kind}, {s.reason_code}, {epoch}{who})"

    lines = []
    if earlier:
        lines.append(
            f"Signature {d.signature} was seen before: {len(earlier)} earlier decision(s): "
            + "; ".join(summary(s) for s in earlier)
            + "."
        )
    else:
        lines.append(f"Signature {d.signature} was not seen before this decision (no earlier decision on record).")
    if later:
        lines.append(f"It came back after: {'; '.join(summary(s) for s in later)}.")
    epochs = ", ".join(str(r.epoch) for r in t.recoveries)
    window = f" (latest rollbacks committed epochs {epochs})" if epochs else ""
    lines.append(
        f"In all it was proposed {t.observed_total} time(s) and rolled back {t.recovered_total} time(s){window}."
    )
    if t.guard:
        lines.append(
            f"LIVELOCK GUARD: {t.guard}: the next commit of this cycle is a deterministic tie-break, not "
            "another speculative rollback. Find out why it re-forms (a worker re-acquiring under a stale epoch?)."
        )
    else:
        lines.append("Livelock guard: clear (a new recovery of this cycle would use the victim policy).")
    return lines


def _next_step(d: Any, kind: str | None, pick: str | None) -> str:
    """What the operator can do next, by decision kind."""
    pending = [c for c in d.cancellations if not c.HasField("stable_at_ms")]
    if kind == "SHADOW" and d.reassigned:
        return (
            "Next: nothing was done, and the cycle stays until someone acts. The approver can decide the "
            "approval by hand now; once such decisions look right, `waitgraph mode auto-safe` or `auto` lets "
            "recovery reassign it."
        )
    if kind == "REASSIGN":
        return "Next: the independent approver decides the approval; nobody has to be cancelled."
    if kind == "SHADOW":
        return (
            f"Next: nothing was done, and the cycle stays until someone acts. If {pick} is the right victim, "
            "cancel its run by hand (`waitgraph cancel RUN --wait`; `waitgraph graph` names the run); once "
            "such decisions look right, `waitgraph mode auto-safe` lets recovery act on side-effect-free runs."
        )
    if kind == "RECONCILIATION":
        return (
            "Next: reconcile the UNKNOWN side effects (`waitgraph export` lists the reconciliation items), then "
            "`waitgraph unfreeze --run RUN` for each frozen run."
        )
    if kind == "ESCALATION":
        return "Next: break the cycle by hand, one run at a time: `waitgraph cancel RUN --wait`."
    if any(c.quarantined for c in pending):
        return "Next: a rolled-back execution passed the cancellation SLO and is quarantined; see `waitgraph export`."
    if pending:
        return "Next: the rollback is still converging; `waitgraph export` lists who has not acknowledged."
    return "Next: nothing; the recovery converged."


def _reassigned(d: Any) -> str:
    moves = ", ".join(f"{r.approval_id} from {at(r.from_id, r.from_generation)} to {r.to_id}" for r in d.reassigned)
    return f"the approval was moved: {moves}"


def explain_blocks(
    decision: Any, proposal: Any, history: Sequence[Any], quorum: int | None = None, trajectory: Any = None
) -> list[Block]:
    """``history`` (earlier proposals with the signature) is used only when ``trajectory`` is None."""
    d = decision
    kind, mode = _enum(d, "kind"), _enum(d, "mode")
    epoch = d.epoch if d.HasField("epoch") else None
    winner = d.winner_id if d.HasField("winner_id") else None
    roles = {r.execution_id: r.role for r in d.roles}
    order = policy_order(d)
    head = Fields(
        [
            ("decision", f"{d.decision_id} ({kind}, reason {d.reason_code})"),
            ("digest", d.digest),
            ("signature", f"{d.signature} ({_signature_line(trajectory)})" if trajectory is not None else d.signature),
            ("policy", d.policy_version),
            ("mode", mode),
            ("epoch", _epoch_line(d)),
            ("decided at", f"{wall(d.at_ms)} (logical {d.at_ms} ms)"),
            *(
                [
                    (
                        "retired",
                        f"{wall(d.retired_at_ms)} (logical {d.retired_at_ms} ms): the live state no longer holds "
                        "it; this is the record the node's history store kept",
                    )
                ]
                if d.HasField("retired_at_ms")
                else []
            ),
        ],
        f"DECISION {d.decision_id}" + (" (RETIRED)" if d.HasField("retired_at_ms") else ""),
    )
    blocks: list[Block] = [head]
    walk = cycle_path(d)
    if d.waits:
        rows = []
        for w in d.waits:
            sats = ", ".join(w.satisfiers) or "-"
            rows.append(
                [
                    at(w.waiter_id, w.waiter_generation),
                    f"{w.target_id}@{w.target_generation}",
                    w.reason or "-",
                    duration(d.at_ms - w.registered_at_ms),
                    f"{sats} ({relation(w.target_id)[1]})",
                ]
            )
        blocks.append(
            Table(
                ["waiter", "waits for", "reason", "waiting", "satisfied by"],
                rows,
                "THE CYCLE (each wait as it stood at the decision; WAITING = its age then)",
            )
        )
        blocks.append(Text(f"path: {path_text(walk)}"))
    votes = _votes_of(d, proposal)
    proposed_at = d.proposed_at_ms or (proposal.proposed_at_ms if proposal is not None else 0)
    if votes:
        rows = [
            [v.voter, "approve" if v.approve else "REJECT", wall(v.at_ms), f"+{duration(v.at_ms - proposed_at)}"]
            for v in votes
        ]
        yes = sum(1 for v in votes if v.approve)
        need = f"; quorum {quorum}" if quorum else ""
        title = f"VOTES ({yes} approve, {len(votes) - yes} reject{need})"
        blocks.append(Table(["voter", "vote", "at", "after proposal"], rows, title))
    rows = []
    for v in d.scores:
        rows.append(
            [
                at(v.execution_id, v.generation),
                v.external_side_effects,
                v.checkpoint,
                v.priority,
                v.cost_consumed,
                v.unique_evidence,
                order.index(v.execution_id) + 1,
                roles.get(v.execution_id, "-"),
            ]
        )
    blocks.append(
        Table(
            ["member", "external effects", "checkpoint", "priority", "cost", "unique evidence", "policy rank", "role"],
            rows,
            "CANDIDATES (every victim-policy term, compared left to right; rank 1 is the policy's victim)",
        )
    )
    story: list[str] = []
    names = ", ".join(at(v.execution_id, v.generation) for v in d.scores)
    proposer = d.proposer or (proposal.proposer if proposal is not None else "")
    if proposer:
        if votes:
            approvals, against = [v.voter for v in votes if v.approve], [v.voter for v in votes if not v.approve]
        else:  # recorded before votes carried their times: the proposal's lists
            approvals = list(proposal.approvals) if proposal is not None else []
            against = list(proposal.rejections) if proposal is not None else []
        approved = ", ".join(approvals) or "nobody"
        rejected = f"; rejected by {', '.join(against)}" if against else ""
        need = f" (quorum {quorum})" if quorum else ""
        took = f" within {duration(d.at_ms - proposed_at)}" if proposed_at else ""
        story.append(
            f"The cycle {names} was proposed by {proposer} at {wall(proposed_at)} and decided{took}; "
            f"approved by {approved}{need}{rejected}."
        )
    else:
        story.append(f"The cycle {names} was decided; its proposal is no longer on record.")
    if walk:
        oldest = max(d.at_ms - w.registered_at_ms for w in d.waits)
        story.append(f"Its oldest wait had lasted {duration(oldest)} when it was decided.")
    term = decisive_term(d)
    why = f"it {term[1]}" if term else "it is the only member"
    pick = order[0] if order else None
    if kind == "VICTIM":
        story.append(
            f"Victim policy {d.policy_version} prefers, in order: no external side effects, a checkpoint, "
            f"lower priority, less cost consumed, no unique evidence, then the lowest id. It chose {winner}: "
            f"{why}" + (f" (decided by {term[0]} against {order[1]})." if term and len(order) > 1 else ".")
        )
        story.append(
            f"Epoch {d.epoch_before} -> {epoch} was committed first; {winner} was moved WAITING -> CANCELLING at "
            f"generation {d.winner_generation} and its cancellation started; it may not acquire or hold anything "
            f"while presenting an epoch below {epoch}. The others were kept."
        )
    elif kind == "TIE_BREAK":
        yielded = [e for e, r in roles.items() if r == "yielded"]
        rolled = [e for e, r in roles.items() if r == "rolled_back"]
        story.append(
            f"LIVELOCK ({d.reason_code}): the same cycle re-formed, so the policy was not asked again. The "
            f"deterministic tie-break let the lowest id, {winner}, win; "
            f"yielded: {', '.join(yielded) or 'none'}; rolled back: {', '.join(rolled) or 'none'}. "
            f"Epoch {d.epoch_before} -> {epoch} was committed before anything was released."
        )
    elif kind == "REASSIGN":
        story.append(
            f"An approval in the cycle was provided from inside it, and an independent approver is configured: "
            f"instead of a victim, {_reassigned(d)}. Epoch {d.epoch_before} -> {epoch} was committed first; the "
            "old provider, the approver and the waiters were told (each wait on it re-registered with its version "
            "bumped). Nobody was cancelled or released."
        )
    elif kind == "SHADOW":
        would = (
            f"{_reassigned(d)} (a REASSIGN: nobody cancelled)"
            if d.reassigned
            else f"the victim would have been {pick}: {why}"
            if winner in (None, pick)
            else f"the lowest id, {winner}, would have won a livelock tie-break"
        )
        story.append(
            f"Mode {mode} ({d.reason_code}): nothing was cancelled or released and the epoch stayed "
            f"{d.epoch_before}. Had recovery acted, {would}."
        )
    elif kind == "RECONCILIATION":
        story.append(
            "A member has an UNKNOWN side effect that cannot be compensated: nothing was cancelled; the runs "
            "were frozen and a reconciliation item raised for a human (see `waitgraph export`)."
        )
    elif kind == "ESCALATION":
        story.append(
            f"Rolling back would exceed the configured max_rollback ({d.reason_code}): nothing was cancelled; "
            "the recovery was escalated to an operator."
        )
    if d.remedies:
        story.append(
            "Remedies, in order: " + "; ".join(f"{r.remedy} {r.outcome} ({r.reason})" for r in d.remedies) + "."
        )
    if d.policy_version != POLICY_VERSION:
        story.append(
            f"(This CLI knows {POLICY_VERSION}; the ranking above uses its order and may differ from "
            f"{d.policy_version}.)"
        )
    if d.released:
        rel = ", ".join(f"{r.target_id} (from {r.execution_id})" for r in d.released)
        when = f" at {wall(d.released[0].at_ms)}" if d.released[0].at_ms else ""
        story.append(f"Released{when}, after the epoch commit, in this order: {rel}.")
    elif epoch is not None:
        story.append("Released: nothing (the rolled-back members held no resource, lease or permit).")
    for c in d.cancellations:
        if c.HasField("stable_at_ms"):
            story.append(
                f"Cancellation {c.scope_id} (requested {wall(c.requested_at_ms)}) converged: CANCELLED_STABLE at "
                f"{wall(c.stable_at_ms)}, {duration(c.stable_at_ms - c.requested_at_ms)} after the request."
            )
        else:
            quarantined = f", {c.quarantined} quarantined" if c.quarantined else ""
            story.append(
                f"Cancellation {c.scope_id} (requested {wall(c.requested_at_ms)}) has not converged: "
                f"{c.pending} execution(s) still asked to stop{quarantined}."
            )
    if trajectory is not None:
        story += _history_story(d, trajectory)
    elif history:
        seen = ", ".join(
            f"{p.decision_id if p.HasField('decision_id') else short(p.digest)} "
            f"({_enum(p, 'status')}, epoch {p.epoch_proposed})"
            for p in history
        )
        story.append(f"Signature {d.signature} was seen before: {seen}.")
    else:
        story.append(f"Signature {d.signature} was not seen before among the recent recovery proposals.")
    story.append(_next_step(d, kind, pick))
    blocks.append(Text("\n".join(story)))
    return blocks


def chosen(d: Any) -> str | None:
    """The execution a decision (or a signature's decision summary) chose, saying as what: the
    ``victim`` rolled back by a VICTIM decision, the ``winner`` that proceeds after a livelock
    TIE_BREAK, the ``would-be victim`` of a SHADOW decision (which did nothing). The wire calls
    that execution ``winner_id`` whatever the kind; a column headed WINNER read as the survivor."""
    if not d.HasField("winner_id"):
        return None
    kind = _enum(d, "kind") or ""
    role = {"TIE_BREAK": "winner", "SHADOW": "would-be victim", "VICTIM": "victim"}.get(kind, kind.lower())
    generation = getattr(d, "winner_generation", 0)
    return f"{role} {at(d.winner_id, generation) if generation else d.winner_id}"


def decisions_blocks(reply: Any) -> list[Block]:
    """``waitgraph decisions``: one row per recorded decision, newest first."""
    rows = []
    for d in reply.decisions:
        rows.append(
            [
                d.decision_id,
                _enum(d, "kind"),
                _enum(d, "mode"),
                d.reason_code,
                d.epoch if d.HasField("epoch") else None,
                chosen(d),
                [f"{r.execution_id}:{r.role}" for r in d.roles],
                short(d.digest),
                wall(d.at_ms),
            ]
        )
    shown = f"{len(rows)} of {reply.retained} retained" + (", more match: raise --limit" if reply.truncated else "")
    return [
        Table(
            ["decision", "kind", "mode", "reason", "epoch", "chosen", "roles", "digest", "at"],
            rows,
            title=f"DECISIONS ({shown})",
            empty="(no decision matches)",
        )
    ]


def signature_blocks(reply: Any) -> list[Block]:
    """``waitgraph signature SIG``: the livelock guard's memory of one cycle signature."""
    t = reply.trajectory
    if not t.known and not t.decisions:
        return [Text(f"Signature {t.signature} is not on this replica: never proposed, or evicted.")]
    head = Fields(
        [
            ("signature", t.signature),
            ("seen", _signature_line(t)),
            ("guard", t.guard or "clear (a recovery now would use the victim policy)"),
            ("epoch now", reply.epoch),
        ],
        f"SIGNATURE {t.signature}",
    )
    obs = [[p.epoch, wall(p.at_ms)] for p in t.observations]
    recs = [[p.epoch, wall(p.at_ms)] for p in t.recoveries]
    decisions = [
        [
            s.decision_id,
            _enum(s, "kind"),
            s.reason_code,
            f"{s.epoch_before} -> {s.epoch}" if s.HasField("epoch") else f"{s.epoch_before} (kept)",
            chosen(s),
            wall(s.at_ms),
        ]
        for s in t.decisions
    ]
    blocks: list[Block] = [
        head,
        Table(["epoch", "at"], obs, "LATEST SIGHTINGS (epoch when proposed; the guard's window)"),
        Table(["epoch", "at"], recs, "LATEST ROLLBACKS (epoch committed; the guard's window)"),
        Table(["decision", "kind", "reason", "epoch", "chosen", "at"], decisions, f"DECISIONS ({len(decisions)})"),
    ]
    stuck = [
        (a.epoch, b.at_ms) for a, b in zip(t.observations, list(t.observations)[1:], strict=False) if b.epoch <= a.epoch
    ]
    if stuck:
        blocks.append(
            Text(
                f"LIVELOCK FINGERPRINT: seen again at epoch {stuck[-1][0]} without the epoch advancing "
                f"({wall(stuck[-1][1])}).",
                "bold red",
            )
        )
    return blocks


# -- writes and export -------------------------------------------------------------------------------------


def outcome_blocks(endpoint: str, request_id: str, outcome: Outcome, hops: Sequence[str] = ()) -> list[Block]:
    head = outcome.result.value
    if outcome.code:
        head += f" {outcome.code}: {outcome.message}"
    if outcome.duplicate:
        head += " (duplicate: the outcome recorded for this request id)"
    route = endpoint if len(hops) <= 1 else " -> ".join(hops)
    effects = []
    for fx in outcome.effects:
        detail = " ".join(f"{f.name}={render_value(getattr(fx, f.name))}" for f in dataclasses.fields(fx))
        effects.append([fx.KIND, detail])
    blocks: list[Block] = [
        Text(head, "bold green" if outcome.ok else "yellow"),
    ]
    if effects:
        blocks.append(Table(["effect", "fields"], effects))
    blocks.append(Text(f"request {request_id} via {route}", "dim"))
    return blocks


def export_blocks(doc: dict[str, Any]) -> list[Block]:
    adm = doc.get("admission", {})
    frozen = adm.get("clusterFrozen")
    head = Fields(
        [
            ("format", f"{doc.get('format')} v{doc.get('version')}"),
            ("at", f"{wall(int(doc.get('atMs') or 0))} (logical {doc.get('atMs')} ms)"),
            ("admission", f"frozen: {frozen}" if frozen else "open"),
            ("frozen runs", [f"{r['run']} ({r['reason']})" for r in adm.get("frozenRuns", [])]),
        ]
    )
    edges = [
        [
            at(e["waiterExecution"], e["waiterGeneration"]),
            f"{e['targetId']}@{e['targetGeneration']}",
            e["reason"],
            e["cancelMode"],
            e["edgeVersion"],
            e["deadline"],
        ]
        for e in doc.get("edges", [])
    ]
    holdings = [[h["targetId"], h["lease"], at(h["holder"], h["holderGeneration"])] for h in doc.get("holdings", [])]
    claims = [[c["execution"], c["generation"], c["agent"], c["expiresAtMs"]] for c in doc.get("claims", [])]
    cancels = [
        [c["scope"], c["run"], c["root"], c["cause"], c["cancelGeneration"], [p["execution"] for p in c["pending"]]]
        for c in doc.get("cancellations", [])
    ]
    recon = [[r["execution"], r["generation"], r["run"], r["effects"]] for r in doc.get("reconciliations", [])]
    return [
        head,
        Table(["waiter", "target", "reason", "mode", "version", "deadline"], edges, f"WAIT EDGES ({len(edges)})"),
        Table(["target", "lease", "holder"], holdings, f"HOLDINGS ({len(holdings)})"),
        Table(["execution", "generation", "agent", "expires at ms"], claims, f"CLAIMS ({len(claims)})"),
        Table(
            ["scope", "run", "root", "cause", "cancel gen", "pending"], cancels, f"OPEN CANCELLATIONS ({len(cancels)})"
        ),
        Table(["execution", "generation", "run", "effects"], recon, f"RECONCILIATIONS ({len(recon)})"),
    ]


# -- history (the retired records a node's history store keeps) ----------------------------------------


def _history_summary(kind: str, r: dict[str, Any]) -> str:
    """One line of what a retired record says."""
    if kind == "ExecutionRetired":
        ledger = ", ".join(f"{e}={o}" for e, o in zip(r["effect_ids"], r["effect_outcomes"], strict=True))
        return f"{r['status']} g{r['generation']} agent {r['agent_id']}; side effects: {ledger or 'none'}"
    if kind == "RunRetired":
        return (
            f"{r['executions']} execution(s), root {r['root_id']}; cancellation {r['cancel_state']} "
            f"(cancel generation {r['cancel_generation']})"
        )
    if kind == "DecisionRetired":
        winner = r["winner_id"] or "-"
        epoch = r["epoch"] if r["epoch"] is not None else "kept"
        explain = f"`waitgraph explain {r['decision_id']}`"
        return f"{r['decision_kind']} {r['reason_code']} winner {winner}, epoch {epoch}; {explain}"
    if kind == "ProposalRetired":
        return f"{r['proposal_status']} ({r['close_reason'] or '-'}), members {', '.join(r['member_ids'])}"
    if kind == "TrajectoryRetired":
        return f"proposed {r['observed_total']} time(s), rolled back {r['recovered_total']} time(s)"
    if kind == "SessionRetired":
        return f"{r['status']} incarnation {r['incarnation']}"
    if kind == "TargetRetired":
        approved = {True: ", approved", False: ", denied"}.get(r["approved"], "")
        return f"idle since {wall(r['touched_at_ms'])}, version {r['version']}{approved}"
    return ""


def _when_work_retires(retention_ms: int) -> str:
    """What an empty history means on a young cluster: nothing has retired *yet*."""
    after = f"{duration(retention_ms)} (--retention-ms)" if retention_ms > 0 else "the node's --retention-ms"
    return (
        f"settled work retires here once it has been settled for {after} and holds nothing: a run whose "
        "executions all completed, failed or were cancelled, then its decisions, proposals and idle targets "
        "(records older than the store's bounds are deleted)"
    )


def history_blocks(reply: Any) -> list[Block]:
    rows = []
    for rec in reply.records:
        body = json.loads(rec.record_json)
        kind = rec.kind.removesuffix("Retired").lower()
        rows.append([wall(rec.retired_at_ms), kind, rec.key, rec.run_id or "-", _history_summary(rec.kind, body)])
    title = (
        f"HISTORY on {reply.node_id} ({len(rows)} shown; the store holds {reply.records_total} records, "
        f"{reply.bytes_total / 1e6:.1f} of {reply.max_bytes / 1e6:.0f} MB, at most {reply.max_age_days} days)"
    )
    if not rows:
        return [Text(title), Text(f"nothing retired matches; {_when_work_retires(reply.retention_ms)}")]
    return [Table(["retired", "kind", "id", "run", "what"], rows, title)]


def members_blocks(members: Any, voters: Sequence[str], quorum: int, pending: int = 0) -> list[Block]:
    """``waitgraph member list|add|remove``: one row per Raft member (role and connection as the
    node that answered sees them), then recovery's voter set."""
    rows = [
        [m.node_id, m.raft_address, m.grpc_address or None, "leader" if m.leader else "follower", m.connected]
        for m in members
    ]
    seen_by = next((m.node_id for m in members if m.this_node), None)
    title = f"MEMBERS ({len(rows)}" + (f", as {seen_by} sees them" if seen_by else "") + ")"
    if pending:
        title += f": a change at log index {pending} is not committed yet"
    return [
        Table(["id", "raft", "grpc", "role", "connected"], rows, title=title),
        Fields([("voters", list(voters)), ("quorum", quorum)], title="RECOVERY"),
    ]


def sessions_fact(ss: operator_pb2.SessionsStatus) -> str:
    """The leader's sessions in one line of ``status``: the count and limits, the heartbeat ages,
    and who is suspended (the longest silent first, with the time since the leader heard from them)."""
    shown = ss.suspended_sessions[:MAX_SUSPENDED_SHOWN]
    named = ", ".join(f"{s.agent_id} ({s.heartbeat_age_ms / 1000:.0f}s)" for s in shown)
    if ss.suspended_count > len(shown):
        named += f", ... {ss.suspended_count - len(shown)} more"
    mixed = _MIXED.get(ss.mode, "")
    return (
        f"sessions {ss.active} active (limits {ss.max_per_node}/node, {ss.max_per_cluster}/cluster), "
        f"heartbeat age p99 {ss.heartbeat_age_p99_ms / 1000:.1f}s, oldest {ss.oldest_heartbeat_age_ms / 1000:.1f}s, "
        f"{ss.suspended_count} suspended" + (f": {named}" if named else "") + (f"; {mixed}" if mixed else "")
    )


_MIXED = {
    "legacy": "mode legacy: a member runs an older release, heartbeats go through the log",
    "hold": "mode hold: a member is not known yet, no session expires",
}
