"""The ``waitgraph`` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from statemachine import transcript


@click.group()
@click.version_option(package_name="waitgraph")
def main() -> None:
    """waitgraph: find and break deadlocks and livelocks between AI agents."""


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


# -- serve: one node process (cluster/server.py) -----------------------------------------------------

_BOOL_KEYS = frozenset({"insecure", "recovery_bootstrap", "forward_writes"})


def _serve_options(fn: Any) -> Any:
    """One option per configuration key (cluster/config.py KEYS): ``grpc_addr`` is ``--grpc-addr``.
    Defaults are None: a key not given on the command line comes from the environment, the file,
    or the built-in default (cluster/config.py resolve)."""
    from .config import KEYS

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
    from .config import ConfigError, load_file, resolve

    try:
        file = load_file(config_file) if config_file is not None else {}
        cfg = resolve(flags, file)
    except ConfigError as exc:
        click.echo(f"waitgraph serve: {exc}", err=True)
        raise SystemExit(2) from None
    from . import server

    raise SystemExit(server.main(cfg))


@main.command("hash-token")
def hash_token() -> None:
    """Print the sha256 of a bearer token read from stdin, for the tokens file."""
    import hashlib
    import sys

    token = sys.stdin.readline().strip()
    if not token:
        raise click.ClickException("no token on stdin")
    click.echo(hashlib.sha256(token.encode()).hexdigest())


if __name__ == "__main__":
    main()
