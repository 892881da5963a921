"""``waitgraph dev``: a local cluster of real node processes, in the foreground until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from waitgraph.ops.cli import DEFAULT_BASE_PORT, MODES


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="keep everything here (reused by the next run); default: a temporary directory removed on exit",
)
@click.option("--nodes", type=click.IntRange(1, 9), default=3, show_default=True)
@click.option("--mode", "rollout", type=click.Choice(MODES[:3]), default="auto", show_default=True)
@click.option(
    "--base-port",
    type=int,
    default=None,
    help="gRPC on BASE.., Raft on BASE+100..; 0: any free ports (default: 50051 when free, else any)",
)
@click.option("--agents", default="a,b,c", show_default=True, help="agent ids to make tokens for")
@click.option(
    "--serve-args",
    default="",
    help="extra `waitgraph serve` flags for every node, e.g. "
    "'--recovery-voters node:n1,node:n2,node:n3,operator:admin --recovery-quorum 4'",
)
@click.option("--live-view", is_flag=True, help="serve each node's live view (and /metrics) on a free loopback port")
def dev(
    data_dir: Path | None,
    nodes: int,
    rollout: str,
    base_port: int | None,
    agents: str,
    serve_args: str,
    live_view: bool,
) -> None:
    """Start a local cluster of --nodes real `waitgraph serve` processes on loopback, print their
    addresses and the environment for the other verbs, and stay in the foreground; Ctrl-C or
    SIGTERM stops every node."""
    import shlex
    import signal
    import time

    from waitgraph.dev.localcluster import CO_LOCATED_ELECTION_TIMEOUT_MS, RAFT_PORT_OFFSET, LocalCluster, ports_free
    from waitgraph.sdk import WaitgraphClientError

    def stop_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_signal)
    signal.signal(signal.SIGINT, stop_signal)
    if base_port is None:
        wanted = [DEFAULT_BASE_PORT + i for i in range(nodes)]
        base_port = DEFAULT_BASE_PORT if ports_free(wanted + [p + RAFT_PORT_OFFSET for p in wanted]) else 0
        if base_port == 0:
            click.echo(f"waitgraph dev: ports {DEFAULT_BASE_PORT}.. are taken; using free ports", err=True)
    lc = LocalCluster(
        root=data_dir,
        nodes=nodes,
        mode=rollout,
        base_port=base_port or None,
        agents=tuple(a for a in agents.split(",") if a),
        serve_args=shlex.split(serve_args),
        die_with_parent=True,
        http=live_view,
        election_timeout_ms=CO_LOCATED_ELECTION_TIMEOUT_MS,  # its nodes share this machine's cores
    )
    code = 0
    try:
        lc.prepare()
        kept = "kept" if data_dir is not None else "temporary: removed on exit"
        click.echo(f"waitgraph dev: {nodes} node(s) in {lc.directory} ({kept})")
        lc.start()
        for m in lc.members:
            click.echo(f"  {m.node_id}  grpc {m.grpc_address}  raft {m.raft_address}  pid {m.pid}  log {m.log_path}")
            if m.http_address:
                click.echo(f"      live view http://{m.http_address}/ (log in with the operator or admin token)")
        try:
            leader = lc.wait_for_leader(60)
        except WaitgraphClientError as exc:
            raise click.ClickException(str(exc)) from None
        from waitgraph.ops import render

        now_mode = render.enum_text(leader.DESCRIPTOR.fields_by_name["mode"].enum_type, leader.mode)
        recovery = (
            f"recovery voters {','.join(leader.voters)}, quorum {leader.quorum}"
            if leader.recovery_configured
            else "recovery not configured (one node cannot out-vote a rollback; configure an operator voter)"
        )
        click.echo(f"leader {leader.node_id} (term {leader.term}); mode {now_mode}; {recovery}")
        assert lc.credentials is not None
        click.echo(
            f"tokens: admin {lc.admin_token_file}, operator {lc.operator_token_file}; "
            f"agents {', '.join(sorted(lc.credentials.agents))} in {lc.directory / 'credentials.json'}"
        )
        with lc.client() as ops:
            click.echo(render.grpc_fronts([r.status for r in ops.status_all() if r.status is not None]))
        env = lc.env()
        if "WAITGRAPH_AGENT_TOKEN" in env:
            click.echo(
                f"WAITGRAPH_AGENT_TOKEN is agent {lc.example_agent()}'s; WAITGRAPH_CREDENTIALS holds every agent's"
            )
        # One line a shell can run as printed (the docs' examples and tests/test_docs_examples.py do).
        click.echo("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
        click.echo("Ctrl-C stops all nodes.")
        reported: set[str] = set()
        while True:
            time.sleep(0.5)
            for m in lc.exited():
                if m.node_id not in reported:
                    reported.add(m.node_id)
                    code_ = m.proc.returncode if m.proc else None
                    click.echo(f"waitgraph dev: {m.node_id} exited with {code_} (log {m.log_path})", err=True)
    except KeyboardInterrupt:
        pass
    except (RuntimeError, TimeoutError, ValueError) as exc:
        click.echo(f"waitgraph dev: {exc}", err=True)
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave nodes behind
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        click.echo("stopping...")
        codes = lc.close()
        click.echo("stopped: " + ", ".join(f"{k} exit {v}" for k, v in codes.items()))
    raise SystemExit(code)
