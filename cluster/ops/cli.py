"""The operator verbs of the ``waitgraph`` command, and ``serve`` (one node) and ``replay``.

``waitgraph.cli`` adds ``dev`` (a local cluster, :mod:`waitgraph.dev.cli`) and is the console
script; this module is the group every other verb hangs on."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from waitgraph.statemachine import transcript

if TYPE_CHECKING:  # the SDK (and grpc with it) loads on first use: `waitgraph serve` must import grpc itself
    from waitgraph.sdk import Receipt, SyncOperatorClient
    from waitgraph.statemachine.commands import Command

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_BASE_PORT = 50051
"""``waitgraph dev`` puts gRPC on 50051.. and Raft on 50151.. when they are free; the CLI's
default ``--endpoints`` are these gRPC addresses."""
DEFAULT_RPC_TIMEOUT_S = 10.0
WRITE_BUDGET = 2.0
"""A write gives up after this many ``--rpc-timeout`` in all, however many retries are left."""
WRITE_ROUNDS = 3
"""Passes over the endpoints a write makes while no node can take it (an election in flight)."""


def default_endpoints(nodes: int = 3) -> list[str]:
    return [f"127.0.0.1:{DEFAULT_BASE_PORT + i}" for i in range(nodes)]


# -- connection options: on the group (``waitgraph --endpoints X status``) and on every operator
# verb (``waitgraph status --endpoints X``); the verb's value wins. -----------------------------------

_CONN_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (
        ("--endpoints", "-e"),
        dict(help="gRPC addresses host:port,... [env WAITGRAPH_ENDPOINTS; default: the `waitgraph dev` ports]"),
    ),
    (("--token",), dict(help="bearer token (operator or admin) [env WAITGRAPH_TOKEN]")),
    (("--token-file",), dict(help="file holding the bearer token [env WAITGRAPH_TOKEN_FILE]")),
    (("--tls",), dict(is_flag=True, default=None, help="use TLS (implied by --cacert/--cert/--key)")),
    (("--cacert",), dict(help="PEM CA bundle that signed the servers [env WAITGRAPH_CACERT]")),
    (("--cert",), dict(help="PEM client certificate, for mTLS [env WAITGRAPH_CERT]")),
    (("--key",), dict(help="PEM private key of --cert [env WAITGRAPH_KEY]")),
    (("--server-name",), dict(help="name expected in the server certificate, if not the endpoint's host")),
    (
        ("--rpc-timeout",),
        dict(type=float, help="seconds per RPC (default 10); --wait verbs bound the wait with --wait-timeout"),
    ),
)
_CONN_KEYS = ("endpoints", "token", "token_file", "tls", "cacert", "cert", "key", "server_name", "rpc_timeout")

# The scripting contract (docs/cli.md, "Exit status"): one meaning per code on every verb.
EXIT_OK = 0
EXIT_REFUSED = 1
"""Not found, refused (an error status, or a no-op that means the write was not allowed), unhealthy."""
EXIT_USAGE = 2
"""Bad arguments (click's own code): nothing was sent."""
EXIT_TIMED_OUT = 3
"""An RPC deadline passed, or --wait-timeout before the operation converged."""
REFUSING_NOOPS = frozenset(
    {"not_a_voter", "not_open", "no_session", "stale_generation", "stale_edge_version", "stale_version"}
)
"""NOOP reasons that mean "this did not take effect because you may not / it is too late"
(exit 1), unlike the already-done ones (``already_frozen``, ``unchanged``: exit 0)."""


def _conn_options(fn: F, hidden: bool = False) -> F:
    for decls, kw in reversed(_CONN_OPTIONS):
        fn = click.option(*decls, **{"default": None, **kw}, hidden=hidden)(fn)
    return fn


@click.group()
@click.version_option(package_name="waitgraph")
@_conn_options
@click.pass_context
def main(ctx: click.Context, /, **conn: Any) -> None:
    """waitgraph: find and break deadlocks and livelocks between AI agents.

    Operator verbs (status, health, graph, cycles, explain, signature, vote, mode, freeze,
    unfreeze, export, cancel) talk to a cluster over gRPC; each takes -o table|json. `waitgraph
    dev` starts a local cluster and prints the environment they need. docs/operations.md walks
    through a rollout and a schema rollback.
    """
    ctx.obj = conn


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--check", is_flag=True, help="Print a diff and exit 1 when a file's recorded output is stale.")
def replay(files: tuple[Path, ...], check: bool) -> None:
    """Replay scenario transcripts (tests/transcripts/README.md) against a fresh state machine."""
    stale = False
    for path in files:
        recorded = path.read_text()
        try:
            replayed = transcript.run(recorded)
        except transcript.TranscriptError as exc:
            raise click.ClickException(f"{path}: {exc.message}") from exc
        if check:
            delta = transcript.diff(recorded, replayed, str(path))
            stale = stale or bool(delta)
            click.echo(delta or f"ok {path}", nl=not delta)
        else:
            if len(files) > 1:
                click.echo(f"==> {path} <==")
            click.echo(replayed, nl=False)
    if stale:
        raise SystemExit(1)


# -- serve: one node process (cluster/node/server.py) -----------------------------------------------------

_BOOL_KEYS = frozenset({"insecure", "recovery_bootstrap", "forward_writes", "fsync"})


def _serve_options(fn: F) -> F:
    """One option per configuration key (cluster/node/config.py KEYS): ``grpc_addr`` is ``--grpc-addr``.
    Defaults are None: a key not given on the command line comes from the environment, the file,
    or the built-in default (cluster/node/config.py resolve)."""
    from waitgraph.node.config import KEYS

    for key in reversed(list(KEYS)):
        flag = "--" + key.replace("_", "-")
        decls = [f"{flag}/--no-{key.replace('_', '-')}" if key in _BOOL_KEYS else flag, key]
        fn = click.option(*decls, default=None, help=f"{KEYS[key]} [env WAITGRAPH_{key.upper()}]")(fn)
    return fn


@main.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="WAITGRAPH_CONFIG",
    help="TOML file with the same keys as the flags (flags > environment > file > defaults).",
)
@_serve_options
def serve(config_file: Path | None, **flags: Any) -> None:
    """Run one cluster node: Raft, the gRPC API (AgentService, OperatorService, health,
    reflection) and the leader loops, until SIGTERM or SIGINT."""
    from waitgraph.node.config import ConfigError, load_file, resolve

    try:
        file = load_file(config_file) if config_file is not None else {}
        cfg = resolve(flags, file)
    except ConfigError as exc:
        click.echo(f"waitgraph serve: {exc}", err=True)
        raise SystemExit(2) from None
    # The node forks to write its log-compaction dumps (cluster/node/raft/_compaction.py); the
    # child never touches gRPC, so gRPC's fork handlers (which pause its threads around every
    # fork) are not wanted. Read once, when grpc is first imported: that is just below, so nothing
    # the command line imports may import grpc first (the `waitgraph` package imports its SDK
    # lazily for this reason); a child forked with the handlers on dies of SIGABRT or SIGSEGV.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    if "grpc" in sys.modules and os.environ["GRPC_ENABLE_FORK_SUPPORT"].lower() not in ("false", "0"):
        raise click.ClickException("grpc was imported before serve could turn its fork handlers off (a bug)")
    from waitgraph.node import server
    from waitgraph.ops import liveweb

    raise SystemExit(server.main(cfg, http_view=liveweb.serve_node))


@main.command("hash-token")
def hash_token() -> None:
    """Print the sha256 of a bearer token read from stdin, for the tokens file."""
    import hashlib
    import sys

    token = sys.stdin.readline().strip()
    if not token:
        raise click.ClickException("no token on stdin")
    click.echo(hashlib.sha256(token.encode()).hexdigest())


# -- the operator verbs (the SDK's SyncOperatorClient talks, cluster/ops/render.py draws) --------------------

NO_TOKEN = "no token: give --token or --token-file, or set WAITGRAPH_TOKEN (`waitgraph dev` prints one)"


class _Session:
    """One verb's connection settings (verb flags > group flags > environment > defaults), its
    client and its output format."""

    def __init__(self, group: dict[str, Any], verb: dict[str, Any], output: str) -> None:
        self.opts = {k: verb.get(k) if verb.get(k) is not None else group.get(k) for k in _CONN_KEYS}
        self.output = output
        self.rpc_timeout_s: float = self.opts.get("rpc_timeout") or DEFAULT_RPC_TIMEOUT_S
        self._client: SyncOperatorClient | None = None

    def _env(self, key: str, name: str) -> Any:
        import os

        value = self.opts.get(key)
        return value if value is not None else (os.environ.get(name) or None)

    def token(self) -> str | None:
        import os

        if self.opts.get("token"):
            return str(self.opts["token"])
        path = self.opts.get("token_file")
        if path is None and not os.environ.get("WAITGRAPH_TOKEN"):
            path = os.environ.get("WAITGRAPH_TOKEN_FILE") or None
        if path is not None:
            try:
                return Path(path).read_text().strip() or None
            except OSError as exc:
                raise click.ClickException(f"cannot read the token file {path}: {exc.strerror}") from None
        return os.environ.get("WAITGRAPH_TOKEN") or None

    def client(self) -> SyncOperatorClient:
        if self._client is None:
            from waitgraph.sdk import TLS, SyncOperatorClient, WaitgraphClientError

            endpoints = str(self._env("endpoints", "WAITGRAPH_ENDPOINTS") or ",".join(default_endpoints()))
            check_endpoints(endpoints)
            token = self.token()
            files = {k: self._env(k, f"WAITGRAPH_{k.upper()}") for k in ("cacert", "cert", "key")}
            tls = None
            if self.opts.get("tls") or any(files.values()):
                if (files["cert"] is None) != (files["key"] is None):
                    raise WaitgraphClientError(
                        "--tls-cert and --tls-key go together (the client certificate and its key)"
                    )
                tls = TLS.from_files(files["cacert"], files["cert"], files["key"], self.opts.get("server_name"))

            def bearer() -> str:
                # Asked for by every call, not here: `health` still shows what needs no token.
                if token is None:
                    raise WaitgraphClientError(NO_TOKEN)
                return token

            self._client = SyncOperatorClient(
                [e.strip() for e in endpoints.split(",") if e.strip()],
                bearer,
                tls=tls,
                call_timeout_s=self.rpc_timeout_s,
                retry_deadline_s=WRITE_BUDGET * self.rpc_timeout_s,
                retry_rounds=WRITE_ROUNDS,
            )
        return self._client

    def write(self, command: Command, request_id: str | None) -> Receipt:
        """Send a write until a node answers; retries keep the request id (``cli-<uuid>`` unless
        given), so they are safe."""
        import uuid

        import grpc

        from waitgraph.sdk import RpcError

        rid = request_id or f"cli-{uuid.uuid4().hex}"
        try:
            receipt: Receipt = self.client().submit_receipt(command, request_id=rid)
        except RpcError as err:
            if err.status is not grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
            raise err.with_message(
                f"no answer within {self.rpc_timeout_s:g}s: the write may have been applied; repeat it with "
                f"--request-id {rid} to get its recorded outcome"
            ) from None
        return receipt

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def emit(self, blocks: Any) -> None:
        from waitgraph.ops import render

        render.emit(blocks)

    def json(self, doc: Any) -> None:
        from waitgraph.ops import render

        click.echo(render.dumps(doc))


def _operator_verb(
    outputs: tuple[str, ...] = ("table", "json"),
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Connection options, ``-o``, and the error rule: one line naming the gRPC code, exit 1."""
    import functools

    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(fn)
        def run(**kwargs: Any) -> None:
            from waitgraph.ops import render
            from waitgraph.sdk import WaitgraphClientError

            ctx = click.get_current_context()
            verb = {k: kwargs.pop(k) for k in _CONN_KEYS}
            session = _Session(ctx.find_root().obj or {}, verb, kwargs.pop("output"))
            try:
                return fn(session, **kwargs)
            except WaitgraphClientError as exc:
                group = ctx.parent is not None and ctx.parent.parent is not None  # `waitgraph member add`
                name = f"{ctx.parent.info_name} {ctx.info_name}" if group and ctx.parent else ctx.info_name
                click.echo(f"waitgraph {name}: {render.error_line(exc)}", err=True)
                timed_out = render.code_name(exc) == "DEADLINE_EXCEEDED"
                raise SystemExit(EXIT_TIMED_OUT if timed_out else EXIT_REFUSED) from None
            finally:
                session.close()

        run = click.option(
            "-o",
            "--output",
            type=click.Choice(outputs),
            default="table",
            show_default=True,
            help="table: aligned text (boxes and colour on a terminal); json: the stable document (docs/cli.md)",
        )(run)
        run.__doc__ = (run.__doc__ or "") + _CONN_EPILOG
        return _conn_options(run, hidden=True)

    return wrap


_CONN_EPILOG = """

    Connection options (--endpoints, --token, --token-file, --tls, --cacert, --cert, --key,
    --server-name, --rpc-timeout) go before or after the verb; see `waitgraph --help`.
    """


_FRESH = click.option(
    "--fresh/--stale",
    default=None,
    help="--fresh: only after a log barrier (fails without a leader); --stale: this node's replica, no "
    "barrier. Default: fresh when possible, else stale and labelled.",
)


_REQUEST_ID = click.option(
    "--request-id",
    default=None,
    help="make the write idempotent under this id (default: a new cli-<uuid>); after 'outcome unknown', "
    "repeat the command with the id it printed to get the recorded outcome",
)


def _with_endpoint(doc: dict[str, Any], read: Any) -> dict[str, Any]:
    return {"endpoint": read.endpoint, **doc}


def _resolve_prefix(prefix: str, length: int, known: Callable[[], list[str]], what: str) -> str:
    """The one id of ``known()`` that starts with ``prefix`` (``git``-style; a complete id is taken
    as it is, without asking): every verb that takes a digest or a signature resolves it here, so
    the same prefix rule holds everywhere."""
    import grpc

    from waitgraph.sdk import InvalidArgument, NotFound

    hint = "`waitgraph cycles --all` lists them"
    prefix = prefix.strip().lower()
    if not prefix or len(prefix) > length or any(c not in "0123456789abcdef" for c in prefix):
        raise InvalidArgument(
            f"{prefix!r} is not a {what}: up to {length} hex digits ({hint})", status=grpc.StatusCode.INVALID_ARGUMENT
        )
    if len(prefix) == length:
        return prefix
    found = sorted({k for k in known() if k.startswith(prefix)})
    if len(found) == 1:
        return found[0]
    message = f"{'no' if not found else len(found)} {what}s start with {prefix!r}; give more of it ({hint})"
    if not found:
        raise NotFound(message, status=grpc.StatusCode.NOT_FOUND)
    raise InvalidArgument(message, status=grpc.StatusCode.INVALID_ARGUMENT)


def _resolve_digest(ops: SyncOperatorClient, prefix: str, fresh: bool | None = None) -> str:
    """A full recovery digest from a unique prefix, among the proposals and the current candidates."""

    def known() -> list[str]:
        reply = ops.read_cycles(include_closed=True, fresh=fresh).reply
        return [p.digest for p in reply.proposals] + [c.digest for c in reply.cycles]

    return _resolve_prefix(prefix, 64, known, "recovery digest")


def _resolve_signature(ops: SyncOperatorClient, prefix: str, fresh: bool | None = None) -> str:
    """A full cycle signature from a unique prefix, the same way as :func:`_resolve_digest`."""

    def known() -> list[str]:
        reply = ops.read_cycles(include_closed=True, fresh=fresh).reply
        return [p.signature for p in reply.proposals] + [c.signature for c in reply.cycles]

    return _resolve_prefix(prefix, 16, known, "cycle signature")


def check_endpoints(endpoints: str) -> None:
    """Every endpoint is host:port: a bare host is named as the problem, before anything is sent."""
    for endpoint in endpoints.split(","):
        host, sep, port = endpoint.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise click.BadParameter(
                f"{endpoint.strip()!r} has no port: give host:port (the `waitgraph dev` nodes are 127.0.0.1:50051..)",
                param_hint="--endpoints / $WAITGRAPH_ENDPOINTS",
            )


def _emit_write(s: _Session, w: Receipt) -> None:
    from waitgraph.ops import render
    from waitgraph.statemachine.outcome import Result

    if s.output == "json":
        s.json(
            {"endpoint": w.endpoint, "request_id": w.request_id, "hops": list(w.hops), **render.outcome_json(w.outcome)}
        )
    else:
        s.emit(render.outcome_blocks(w.endpoint, w.request_id, w.outcome, w.hops))
    if w.outcome.result is Result.NOOP and w.outcome.code in REFUSING_NOOPS:
        click.echo(
            f"waitgraph {click.get_current_context().info_name}: nothing changed: {w.outcome.code}: "
            f"{w.outcome.message}",
            err=True,
        )
        raise SystemExit(EXIT_REFUSED)


_UNREACHABLE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})


@main.command()
@click.option("--digest", is_flag=True, help="also compute each replica's state digest (equal when converged)")
@click.option("--no-discover", is_flag=True, help="only the given endpoints, not the peers they name")
@_operator_verb()
def status(s: _Session, digest: bool, no_discover: bool) -> None:
    """One row per node: role, leader, term, commit/applied index, epoch, mode, admission, health."""
    from waitgraph.ops import render

    reports = s.client().status_all(include_digest=digest, discover=not no_discover)
    refusals = [r.error for r in reports if r.error is not None and render.code_name(r.error) not in _UNREACHABLE]
    if refusals and all(r.status is None for r in reports):
        raise refusals[0]  # the same refusal everywhere (a bad token): one line, not a table of it
    if s.output == "json":
        s.json(render.status_json(reports))
    else:
        s.emit(render.status_blocks(reports, digest))
    if all(r.status is None for r in reports):
        from waitgraph.sdk.errors import RpcError, most_telling

        why = render.error_line(most_telling([r.error for r in reports if isinstance(r.error, RpcError)]))
        click.echo(f"waitgraph status: no node answered; {why}", err=True)
        raise SystemExit(1)


@main.command()
@click.option(
    "--writes-only",
    is_flag=True,
    help="exit 0 when writes are served, even if no recovery could commit (what a load balancer needs)",
)
@_operator_verb()
def health(s: _Session, writes_only: bool) -> None:
    """Exit 0 when a leader with a quorum commits a barrier through the log and enough recovery
    voters are reachable for a recovery to commit; 1 (and why) otherwise."""
    from waitgraph.ops import render
    from waitgraph.ops.render import refused_token
    from waitgraph.sdk import WaitgraphClientError
    from waitgraph.statemachine.readiness import readiness

    ops = s.client()
    reports = ops.status_all(health=True)
    up = [r.status for r in reports if r.status is not None]
    members = max(len({st.node_id for st in up} | {p.node_id for st in up for p in st.peers}), len(reports))
    needed = members // 2 + 1
    down = [f"{r.node_id or r.endpoint} ({render.error_line(r.error)})" for r in reports if r.error is not None]
    leader = next((st for st in up if st.role == "leader"), None)
    healthy = False
    recovery = None
    if not up and any(refused_token(r.error) for r in reports):
        refused = sum(refused_token(r.error) for r in reports)
        reason = (
            f"no node accepted the token ({refused} answered and refused it; check --token, --token-file, "
            "$WAITGRAPH_TOKEN): " + "; ".join(down)
        )
    elif not up:
        reason = "no node answered: " + "; ".join(down)
    elif len(up) < needed:
        reason = f"no quorum: {len(up)} of {members} members reachable, a quorum needs {needed}; down: " + "; ".join(
            down
        )
    elif leader is None:
        seen = ", ".join(f"{st.node_id} sees {st.leader_id or 'no leader'} ({st.role})" for st in up)
        reason = f"no leader: {seen}"
    else:
        try:
            ops.status(leader.grpc_address, fresh=True)
            healthy = True
            reason = (
                f"leader {leader.node_id} at {leader.grpc_address} (term {leader.term}) committed a barrier "
                f"through the log; {len(up)} of {members} members reachable"
            )
        except Exception as exc:
            text = render.error_line(exc) if isinstance(exc, WaitgraphClientError) else str(exc)
            reason = f"leader {leader.node_id} could not commit a barrier through the log: {text}"
        # The leader's view of its peers, as the node's own waitgraph.v1.Recovery health has it.
        reachable = {leader.node_id, *(p.node_id for p in leader.peers if p.connected)}
        recovery = readiness(leader.voters, leader.quorum, leader.recovery_configured, reachable)
    result = render.Health(
        healthy,
        reason,
        members,
        needed,
        len(up),
        leader.node_id if leader else None,
        leader.grpc_address if leader else None,
        reports,
        recovery,
    )
    if s.output == "json":
        s.json(result.to_json())
    else:
        s.emit(result.blocks())
    if not healthy or (not writes_only and (recovery is None or not recovery.can_commit)):
        raise SystemExit(1)


PICTURE_LIMIT = 200
"""Executions (and waits, targets) ``graph -o dot|svg`` draws unless --limit says otherwise."""

_STATUSES = (
    "pending", "running", "waiting", "cancel_requested", "cancelling", "cancelled", "completed", "failed",
    "needs_reconciliation", "quarantined",
)  # fmt: skip


@main.command()
@click.option("--run", "run_id", default="", help="only this run's executions and their waits")
@click.option("--agent", "agent_id", default="", help="only this agent's executions, waits and session")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(_STATUSES, case_sensitive=False),
    help="only executions in this state (repeat for several)",
)
@click.option("--cycles", "cycles_only", is_flag=True, help="only the candidate and confirmed deadlocks' members")
@click.option(
    "--around",
    type=click.IntRange(0, 10),
    default=0,
    show_default=True,
    help="with --cycles: also what lies within N wait-for steps of them",
)
@click.option("--limit", type=int, default=0, help="items per list (server default 1000); the rest is counted")
@_FRESH
@_operator_verb(("table", "json", "dot", "svg"))
def graph(
    s: _Session,
    run_id: str,
    agent_id: str,
    statuses: tuple[str, ...],
    cycles_only: bool,
    around: int,
    limit: int,
    fresh: bool | None,
) -> None:
    """Executions, targets (with holders and satisfiers), waits, runs and sessions; filtered by
    run, agent, status or to the cycles and their neighbourhood, with a size cap that says how
    much more there is.

    -o dot prints Graphviz, -o svg the SVG graphviz draws of it (`waitgraph graph -o svg >
    graph.svg`; needs graphviz's `dot`): candidate deadlocks in orange, confirmed ones in red,
    each confirmed cycle's victim filled and labelled; the picture the live view shows."""
    from waitgraph.ops import render
    from waitgraph.statemachine.enums import ExecStatus

    if around and not cycles_only:
        raise click.UsageError("--around N widens --cycles: give --cycles too")
    ops = s.client()
    cycles = ops.read_cycles(fresh=fresh).reply if cycles_only or s.output != "json" else None
    seeds = (
        sorted(render.cycle_members(cycles) | {m.execution_id for p in cycles.proposals for m in p.members})
        if cycles_only and cycles is not None
        else []
    )
    if cycles_only and not seeds:
        seeds = ["exec:-"]  # no cycle: an id no execution has, so nothing matches
    wanted = [ExecStatus(x.upper()) for x in statuses]
    if not limit and s.output in ("dot", "svg"):
        limit = PICTURE_LIMIT  # a picture of thousands of nodes is unreadable: the rest is counted on it
    read = ops.read_graph(run_id, agent_id, limit, fresh, wanted, seeds, around)
    if s.output == "json":
        s.json(_with_endpoint(render.message_json(read.reply), read))
        return
    assert cycles is not None
    cycles = ops.read_cycles(fresh=fresh).reply
    if s.output in ("dot", "svg"):
        import grpc

        from waitgraph.sdk import RpcError

        decisions = []
        for digest, kind in render.cycle_kinds(cycles).items():
            if kind == "confirmed":
                try:
                    decisions += ops.read_explain(digest=digest, fresh=fresh).reply.decisions
                except RpcError as exc:  # the decision left the retained window: draw the cycle alone
                    if exc.status is not grpc.StatusCode.NOT_FOUND:
                        raise
        dot = render.graph_dot(read.reply, cycles, decisions, render.graph_more(read.reply))
        if s.output == "dot":
            click.echo(dot, nl=False)
            return
        try:
            click.echo(render.graph_svg(dot), nl=False)
        except RuntimeError as exc:  # GraphvizMissing included: one line, no traceback
            click.echo(f"waitgraph graph: {exc}", err=True)
            raise SystemExit(1) from None
        return
    s.emit(
        [
            *render.graph_blocks(read.reply, cycles),
            render.read_note(read.endpoint, read.stale, read.reply.applied_index, read.fallback_reason),
        ]
    )


@main.command()
@click.option(
    "--all", "include_closed", is_flag=True, help="also the closed proposals (committed, retracted, rejected)"
)
@_FRESH
@_operator_verb()
def cycles(s: _Session, include_closed: bool, fresh: bool | None) -> None:
    """The current candidate deadlocks (a full detection pass) and the recovery proposals."""
    from waitgraph.ops import render

    ops = s.client()
    read = ops.read_cycles(include_closed, fresh)
    try:
        quorum: int | None = ops.status(read.endpoint).quorum
    except Exception:
        quorum = None
    if s.output == "json":
        s.json({**_with_endpoint(render.message_json(read.reply), read), "quorum": quorum})
    else:
        s.emit(
            [
                *render.cycles_blocks(read.reply, quorum),
                render.read_note(read.endpoint, read.stale, read.reply.applied_index, read.fallback_reason),
            ]
        )


@main.command()
@click.argument("decision")
@_FRESH
@_operator_verb()
def explain(s: _Session, decision: str, fresh: bool | None) -> None:
    """Why a recovery decided what it did. DECISION: a decision id (d1) or a recovery digest
    (a unique prefix is enough; every decision for it is explained)."""
    import re

    from waitgraph.ops import render

    ops = s.client()
    if re.fullmatch(r"d\d+", decision):
        read = ops.read_explain(decision_id=decision, fresh=fresh)
    elif not re.fullmatch(r"[0-9a-fA-F]{1,64}", decision.strip()):
        # Not a hex prefix either: name both forms, as typed (a digest's rule would lowercase it).
        raise click.BadParameter(
            f"{decision!r} is neither a decision id (d and digits, such as d3: `waitgraph decisions` lists them) "
            "nor a recovery digest (hex digits; a unique prefix is enough: `waitgraph cycles --all` lists them)",
            param_hint="DECISION",
        )
    else:
        read = ops.read_explain(digest=_resolve_digest(ops, decision, fresh), fresh=fresh)
    proposals = list(ops.read_cycles(include_closed=True, fresh=fresh).reply.proposals)
    try:
        quorum = ops.status(read.endpoint).quorum
    except Exception:
        quorum = None
    docs, blocks = [], []
    trajectories = {t.signature: t for t in read.reply.trajectories}
    for d in read.reply.decisions:
        own = next((p for p in proposals if p.HasField("decision_id") and p.decision_id == d.decision_id), None)
        own = own or next((p for p in proposals if p.digest == d.digest), None)
        before = own.proposed_at_ms if own is not None else d.at_ms
        history = [p for p in proposals if p.signature == d.signature and p is not own and p.proposed_at_ms <= before]
        trajectory = trajectories.get(d.signature)
        docs.append(render.explain_json(d, own, history, trajectory))
        blocks += render.explain_blocks(d, own, history, quorum, trajectory)
    if s.output == "json":
        s.json(
            {
                "endpoint": read.endpoint,
                "decisions": docs,
                "stale": read.reply.stale,
                "applied_index": read.reply.applied_index,
                "epoch": read.reply.epoch,
            }
        )
    else:
        s.emit([*blocks, render.read_note(read.endpoint, read.stale, read.reply.applied_index, read.fallback_reason)])


@main.command()
@click.option("--run", "run_id", default="", help="only decisions about this run's executions")
@click.option(
    "--kind",
    type=click.Choice(
        ["victim", "tie_break", "shadow", "reconciliation", "escalation", "reassign"], case_sensitive=False
    ),
    default=None,
    help="only this kind of decision",
)
@click.option(
    "--since",
    default=None,
    metavar="WHEN",
    help="only decisions at or after WHEN: an ISO 8601 UTC time (2026-12-01T09:00:00Z) or an age (90s, 15m, 2h, 1d)",
)
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="newest first, at most")
@_FRESH
@_operator_verb()
def decisions(s: _Session, run_id: str, kind: str | None, since: str | None, limit: int, fresh: bool | None) -> None:
    """Recorded recovery decisions, newest first: kind, mode, reason, epoch, winner, every
    member's role. `explain DECISION` tells the story of one."""
    from waitgraph.ops import render
    from waitgraph.statemachine.recovery_state import DecisionKind

    wanted = DecisionKind(kind.upper()) if kind else None
    read = s.client().read_decisions(run_id, wanted, _since_ms(since), limit, fresh)
    if s.output == "json":
        s.json(_with_endpoint(render.message_json(read.reply), read))
    else:
        s.emit(
            [
                *render.decisions_blocks(read.reply),
                render.read_note(read.endpoint, read.stale, read.reply.applied_index, read.fallback_reason),
            ]
        )


@main.group()
def member() -> None:
    """The Raft membership: list it, add a node at a new address, remove one (admin). One change at
    a time; recovery's voter set follows (docs/deploy.md, "Membership changes")."""


@member.command("list")
@_operator_verb()
def member_list(s: _Session) -> None:
    """Every member (id, Raft and gRPC address, role, connected) and recovery's voters, as the
    first node that answers has them."""
    from waitgraph.ops import render

    read = s.client().read_members()
    endpoint, reply = read.endpoint, read.reply
    if s.output == "json":
        s.json({"endpoint": endpoint, **render.message_json(reply)})
    else:
        s.emit(render.members_blocks(reply.members, reply.voters, reply.quorum, reply.pending_change_index))


@member.command("add")
@click.argument("node_id")
@click.option("--raft-addr", required=True, help="host:port the new node's Raft port is bound to (start it first)")
@click.option("--grpc-addr", default="", help="host:port of its gRPC API (leader hints, status discovery)")
@_operator_verb()
def member_add(s: _Session, node_id: str, raft_addr: str, grpc_addr: str) -> None:
    """Add NODE_ID at --raft-addr (admin). Start the new node first, with every current member in
    its --peers: the leader refuses an address where no node of this cluster answers."""
    _emit_members(s, s.client().add_member(node_id, raft_addr, grpc_addr))


@member.command("remove")
@click.argument("node_id")
@_operator_verb()
def member_remove(s: _Session, node_id: str) -> None:
    """Remove NODE_ID (admin); stop its process afterwards. The leader itself cannot be removed:
    stop it first (another node takes over), then remove it."""
    _emit_members(s, s.client().remove_member(node_id))


def _emit_members(s: _Session, answered: Any) -> None:
    from waitgraph.ops import render

    endpoint, reply = answered
    if s.output == "json":
        s.json({"endpoint": endpoint, **render.message_json(reply)})
    else:
        s.emit(render.members_blocks(reply.members, reply.voters, reply.quorum))


def _since_ms(since: str | None) -> int:
    """``--since``: an ISO 8601 time or an age before now, as ms since 1970 (0: no bound)."""
    import datetime as dt
    import re
    import time

    if since is None:
        return 0
    age = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", since.strip())
    if age is not None:
        seconds = float(age.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[age.group(2)]
        return int((time.time() - seconds) * 1000)
    try:
        when = dt.datetime.fromisoformat(since.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{since!r}: give an ISO 8601 time (2026-12-01T09:00:00Z) or an age (90s, 15m, 2h, 1d)",
            param_hint="--since",
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


@main.command()
@click.option("--run", "run_id", default="", help="a run and its executions")
@click.option("--execution", "execution_id", default="", help="an execution, and the decisions and proposals naming it")
@click.option("--decision", "decision_id", default="", help="a recovery decision (d7)")
@click.option("--target", "target_id", default="", help="a target (artifact:, approval:, resource:, pool:...)")
@click.option("--limit", default=100, show_default=True, help="at most this many records, newest first")
@_operator_verb()
def history(s: _Session, run_id: str, execution_id: str, decision_id: str, target_id: str, limit: int) -> None:
    """Settled work that retired from the live state, from a node's history store: each
    execution's final status, generation and side-effect ledger, each run's cancellation
    outcome, decisions with every candidate's score. `-o json` exports the whole records."""
    from waitgraph.ops import render

    if sum(1 for v in (run_id, execution_id, decision_id, target_id) if v) > 1:
        raise click.UsageError("give at most one of --run, --execution, --decision, --target")
    read = s.client().read_history(run_id, execution_id, decision_id, limit, target_id)
    reply = read.reply
    if s.output == "json":
        s.json(
            {
                "endpoint": read.endpoint,
                "node_id": reply.node_id,
                "records_total": reply.records_total,
                "bytes_total": reply.bytes_total,
                "records": [
                    {
                        "kind": r.kind,
                        "key": r.key,
                        "run_id": r.run_id or None,
                        "retired_at_ms": r.retired_at_ms,
                        "record": json.loads(r.record_json),
                    }
                    for r in reply.records
                ],
            }
        )
    else:
        s.emit(render.history_blocks(reply))


@main.command()
@click.argument("signature")
@_FRESH
@_operator_verb()
def signature(s: _Session, signature: str, fresh: bool | None) -> None:
    """The livelock guard's memory of one cycle signature (16 hex digits, as `cycles` and
    `explain` print it): how often it was proposed and rolled back, at which epochs, the
    decisions made for it, and whether the guard would escalate it now. SIGNATURE may be a unique
    prefix. Exit 1 when this replica does not know it."""
    from waitgraph.ops import render

    ops = s.client()
    read = ops.read_signature(_resolve_signature(ops, signature, fresh), fresh)
    if s.output == "json":
        s.json(_with_endpoint(render.message_json(read.reply), read))
    else:
        s.emit(
            [
                *render.signature_blocks(read.reply),
                render.read_note(read.endpoint, read.stale, read.reply.applied_index, read.fallback_reason),
            ]
        )
    t = read.reply.trajectory
    if not t.known and not t.decisions:
        raise SystemExit(EXIT_REFUSED)


@main.command()
@click.argument("digest")
@click.option("--reject", is_flag=True, help="vote against (default: approve)")
@_REQUEST_ID
@_operator_verb()
def vote(s: _Session, digest: str, reject: bool, request_id: str | None) -> None:
    """Vote on an open recovery proposal as operator:<token name> (counted only when the
    operator is a configured voter). DIGEST may be a unique prefix."""
    from waitgraph.statemachine import commands as C

    digest = _resolve_digest(s.client(), digest)
    _emit_write(s, s.write(C.VoteRecovery(digest=digest, approve=not reject), request_id))


MODES = ("shadow", "auto-safe", "auto", "inherit")


@main.command()
@click.argument("mode", type=click.Choice(MODES), required=False)
@click.option("--run", "run_id", default=None, help="override the mode for this run only")
@click.option(
    "--side-effect-free/--no-side-effect-free",
    default=None,
    help="with --run: mark the run as one auto-safe may act on (or not)",
)
@_REQUEST_ID
@_operator_verb()
def mode(
    s: _Session, mode: str | None, run_id: str | None, side_effect_free: bool | None, request_id: str | None
) -> None:
    """Set the rollout mode (admin): shadow (detect and record, never cancel), auto-safe (act on
    side-effect-free runs only), auto. `inherit --run R` removes R's override. Without MODE:
    print the cluster-wide mode (as the leader has it, else this node's replica)."""
    from waitgraph.statemachine import commands as C
    from waitgraph.statemachine.recovery_state import RolloutMode

    if mode is None:
        if run_id is not None or side_effect_free is not None:
            raise click.UsageError("--run and --side-effect-free set a mode: give MODE")
        _emit_mode(s)
        return
    if mode == "inherit" and run_id is None:
        raise click.UsageError("`inherit` removes a run's override: give --run RUN")
    if side_effect_free is not None and run_id is None:
        raise click.UsageError("--side-effect-free marks a run: give --run RUN")
    wanted = None if mode == "inherit" else RolloutMode(mode)
    _emit_write(s, s.write(C.SetMode(mode=wanted, run_id=run_id, side_effect_free=side_effect_free), request_id))


@main.command()
@click.argument("approver_id", metavar="APPROVER", required=False)
@click.option("--run", "run_id", default=None, help="set the approver of this run only")
@click.option("--clear", is_flag=True, help="remove the setting (the cluster's, or with --run the run's)")
@_REQUEST_ID
@_operator_verb()
def approver(s: _Session, approver_id: str | None, run_id: str | None, clear: bool, request_id: str | None) -> None:
    """Name the independent approver (admin): a human:ID, or an exec:ID outside the run. A recovery
    then moves an approval trapped in a cycle (its provider is a member) to it, cancelling no one
    (a REASSIGN decision). --run sets it for one run (overrides the cluster's); --clear removes
    it. Without APPROVER: print the cluster's (as the leader has it, else this node's replica)."""
    if clear and approver_id is not None:
        raise click.UsageError("--clear removes the approver: give no APPROVER")
    if approver_id is None and not clear:
        if run_id is not None:
            raise click.UsageError("--run sets a run's approver: give APPROVER (or --clear)")
        st = _leader_status(s)
        current = st.approver if st.HasField("approver") else None
        if s.output == "json":
            s.json({"approver": current, "node_id": st.node_id, "role": st.role, "stale": st.role != "leader"})
        else:
            click.echo(f"{current or 'none'} (as {st.node_id} sees it)")
        return
    from waitgraph.statemachine import commands as C

    _emit_write(s, s.write(C.SetApprover(approver_id=approver_id, run_id=run_id), request_id))


def _leader_status(s: _Session) -> Any:
    """The leader's Status, else the first node that answered (its replica's view)."""
    reports = s.client().status_all()
    up = [r.status for r in reports if r.status is not None]
    if not up:
        raise next(r.error for r in reports if r.error is not None)
    return next((st for st in up if st.role == "leader"), up[0])


def _emit_mode(s: _Session) -> None:
    from waitgraph.ops import render

    st = _leader_status(s)
    current = render.enum_text(st.DESCRIPTOR.fields_by_name["mode"].enum_type, st.mode)
    if s.output == "json":
        s.json({"mode": current, "node_id": st.node_id, "role": st.role, "stale": st.role != "leader"})
    else:
        where = "leader" if st.role == "leader" else f"{st.role}, no leader answered: this replica's view"
        click.echo(f"{current} (as {st.node_id} sees it: {where})")


def _wait(fn: F) -> F:
    fn = click.option(
        "--wait-timeout",
        type=float,
        default=None,
        help="with --wait: seconds for the whole wait (default 120); exit 3 if it did not converge in time",
    )(fn)
    return click.option(
        "--wait",
        is_flag=True,
        help="then wait until it converges, showing progress (a bar on a terminal, lines when piped)",
    )(fn)


def _wait_timeout_needs_wait(wait: bool, wait_timeout: float | None) -> None:
    if wait_timeout is not None and not wait:
        raise click.UsageError("--wait-timeout bounds --wait: give --wait too")


def _emit_waited(s: _Session, w: Receipt, run_id: str, reading: Any, wait_timeout_s: float | None) -> None:
    """The write's answer, then a watch until ``reading`` says converged (cluster/ops/progress.py)."""
    import sys

    from waitgraph.ops import progress, render

    if s.output != "json":
        _emit_write(s, w)
        stream = sys.stdout
    else:
        stream = sys.stderr  # stdout carries one JSON document
    timeout_s = wait_timeout_s or progress.DEFAULT_WAIT_S
    try:
        last = progress.watch(s.client(), run_id, reading, timeout_s, stream, stream.isatty())
        failure = None
    except progress.NotConverged as exc:
        last, failure = exc.last, exc
    if s.output == "json":
        doc = {
            "endpoint": w.endpoint,
            "request_id": w.request_id,
            "hops": list(w.hops),
            **render.outcome_json(w.outcome),
        }
        doc["wait"] = {"converged": failure is None, "progress": render.message_json(last.reply)}
        s.json(doc)
    if failure is not None:
        quarantined = list(last.reply.quarantined)
        where = f"; quarantined: {', '.join(quarantined)}" if quarantined else ""
        click.echo(
            f"waitgraph {click.get_current_context().info_name}: not converged after {failure.waited_s:.0f}s "
            f"(--wait-timeout): {last.line}{where}; `waitgraph export` lists who has not acknowledged",
            err=True,
        )
        raise SystemExit(progress.EXIT_NOT_CONVERGED)


@main.command()
@click.option("--run", "run_id", default=None, help="freeze one run (default: the whole cluster)")
@click.option("--reason", required=True, help="why (recorded in the state and shown by status/export)")
@_wait
@_REQUEST_ID
@_operator_verb()
def freeze(
    s: _Session, run_id: str | None, reason: str, wait: bool, wait_timeout: float | None, request_id: str | None
) -> None:
    """Refuse new delegations (child creation, claims) for a run or the whole cluster; nothing
    already admitted is cleared. --wait: then wait until no cancellation (of the run, or anywhere)
    is still open, i.e. the frozen delegations have quiesced."""
    from waitgraph.statemachine import commands as C

    _wait_timeout_needs_wait(wait, wait_timeout)
    w = s.write(C.FreezeAdmission(reason=reason, run_id=run_id), request_id)
    if not wait:
        _emit_write(s, w)
        return
    from waitgraph.ops import progress

    _emit_waited(s, w, run_id or "", progress.freeze_reading(run_id), wait_timeout)


@main.command()
@click.option("--run", "run_id", default=None, help="unfreeze one run (default: the whole cluster)")
@click.option("--reason", default="unfrozen by operator", show_default=True)
@_REQUEST_ID
@_operator_verb()
def unfreeze(s: _Session, run_id: str | None, reason: str, request_id: str | None) -> None:
    """Admit new delegations again."""
    from waitgraph.statemachine import commands as C

    _emit_write(s, s.write(C.UnfreezeAdmission(reason=reason, run_id=run_id), request_id))


@main.command()
@_FRESH
@_operator_verb()
def export(s: _Session, fresh: bool | None) -> None:
    """The pending-edges document: open waits, holdings, claims, open cancellations and
    reconciliation items, sorted (`-o json > pending.json` before a schema rollback)."""
    import json

    from waitgraph.ops import render

    read = s.client().read_export(fresh)
    doc = json.loads(read.reply.document_json)
    if s.output == "json":
        click.echo(json.dumps(render.snake_keys(doc), indent=2, sort_keys=True, ensure_ascii=False))
    else:
        s.emit(
            [
                *render.export_blocks(doc),
                render.read_note(read.endpoint, read.stale, read.reply.applied_index, read.fallback_reason),
            ]
        )


@main.command()
@click.argument("run_id", metavar="RUN")
@click.option("--reason", default="cancelled by operator", show_default=True)
@click.option(
    "--observed-generation",
    type=int,
    default=None,
    help="the run's cancel generation you saw (default: read it now); older is a recorded no-op",
)
@_wait
@_REQUEST_ID
@_operator_verb()
def cancel(
    s: _Session,
    run_id: str,
    reason: str,
    observed_generation: int | None,
    wait: bool,
    wait_timeout: float | None,
    request_id: str | None,
) -> None:
    """Cancel a run: raise its cancel generation and ask every unsettled execution to stop.
    --wait: then wait until the run is CANCELLED_STABLE (every descendant settled, nothing held)."""
    from waitgraph.statemachine import commands as C

    _wait_timeout_needs_wait(wait, wait_timeout)
    if observed_generation is None:  # CancelRun needs the cancel generation the caller saw: read it
        runs = [r for r in s.client().read_graph(run_id=run_id, limit=1).reply.runs if r.run_id == run_id]
        if not runs:
            import grpc

            from waitgraph.sdk import NotFound

            raise NotFound(
                f"there is no run {run_id!r} (`waitgraph graph` lists them)", status=grpc.StatusCode.NOT_FOUND
            )
        observed_generation = runs[0].cancel_generation
    command = C.CancelRun(run_id=run_id, observed_cancel_generation=observed_generation, reason=reason)
    w = s.write(command, request_id)
    if not wait:
        _emit_write(s, w)
        return
    from waitgraph.ops import progress
    from waitgraph.statemachine.effects import CancelGenerationRaised

    raised = [fx.after for fx in w.outcome.effects if isinstance(fx, CancelGenerationRaised)]
    # A no-op (someone raised it already) waits for the generation the run is at now.
    generation = raised[0] if raised else max(1, s.client().read_convergence(run_id).reply.cancel_generation)
    _emit_waited(s, w, run_id, progress.cancel_reading(run_id, generation), wait_timeout)
