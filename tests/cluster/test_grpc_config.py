"""``waitgraph serve`` configuration and bearer tokens: layering, validation, clear refusals."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from waitgraph.node import auth
from waitgraph.node.config import (
    GENERATE_SECRET,
    INSECURE_SECRET,
    ConfigError,
    load_file,
    resolve,
    secret_bits,
    secret_problem,
)

from .harness import REPO

PEERS = "n1=127.0.0.1:7001,n2=127.0.0.1:7002,n3=127.0.0.1:7003"


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": [{"name": "ops", "role": "operator", "token": "operator-token-0123456789"}]}))
    return path


def flags(tokens: Path, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    base = dict(
        id="n1",
        raft_addr="127.0.0.1:7001",
        grpc_addr="127.0.0.1:7101",
        peers=PEERS,
        data_dir=str(tmp_path / "data"),
        tokens_file=str(tokens),
    )
    return {**base, **extra}


def problems(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    return "\n".join(exc.value.problems)


def test_defaults_for_three_nodes(tokens: Path, tmp_path: Path) -> None:
    cfg = resolve(flags(tokens, tmp_path), env={"WAITGRAPH_SECRET": "s3cret-Qm9vdGhlLXNlY3JldC1vZi10aGlzLXRlc3Q"})
    assert cfg.secret == "s3cret-Qm9vdGhlLXNlY3JldC1vZi10aGlzLXRlc3Q" and [p.node_id for p in cfg.peers] == [
        "n1",
        "n2",
        "n3",
    ]
    # a majority quorum (tolerates one node down, like Raft) and max_rollback below it
    assert (cfg.recovery_voters, cfg.recovery_quorum, cfg.recovery_max_rollback) == (
        ("node:n1", "node:n2", "node:n3"),
        2,
        1,
    )
    assert cfg.recovery_bootstrap and "s3cret-Qm9vdGhlLXNlY3JldC1vZi10aGlzLXRlc3Q" not in repr(cfg)


def test_flags_beat_environment_beat_file(tokens: Path, tmp_path: Path) -> None:
    file = {"detect_interval_ms": 300, "event_ring": 50, "housekeeping_interval_ms": 700}
    env = {
        "WAITGRAPH_SECRET": "s-dGhlIHNlY3JldCBvZiB0aGlzIHRlc3QgaXMgbG9uZw",
        "WAITGRAPH_DETECT_INTERVAL_MS": "200",
        "WAITGRAPH_EVENT_RING": "60",
    }
    cfg = resolve(flags(tokens, tmp_path, detect_interval_ms="100"), file, env)
    assert (cfg.detect_interval_ms, cfg.event_ring, cfg.housekeeping_interval_ms) == (100, 60, 700)
    assert resolve(flags(tokens, tmp_path), {}, env).detect_interval_ms == 200


def test_secret_sources(tokens: Path, tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-file-ZmlsZSBzZWNyZXQgZm9yIHRoaXMgdGVzdA\n")
    cfg = resolve(
        flags(tokens, tmp_path, secret_file=str(secret_file)),
        env={"WAITGRAPH_SECRET": "from-env-ZW52aXJvbm1lbnQgc2VjcmV0IGZvciB0ZXN0"},
    )
    assert cfg.secret == "from-file-ZmlsZSBzZWNyZXQgZm9yIHRoaXMgdGVzdA"  # the flag wins
    cfg = resolve(
        flags(tokens, tmp_path),
        {"secret_file": str(secret_file)},
        {"WAITGRAPH_SECRET": "from-env-ZW52aXJvbm1lbnQgc2VjcmV0IGZvciB0ZXN0"},
    )
    assert cfg.secret == "from-env-ZW52aXJvbm1lbnQgc2VjcmV0IGZvciB0ZXN0"  # the environment beats the file
    with pytest.raises(ConfigError) as exc:
        resolve(flags(tokens, tmp_path), env={})
    assert "no cluster secret" in problems(exc)
    cfg = resolve(flags(tokens, tmp_path, insecure=True), env={})
    assert cfg.secret == INSECURE_SECRET
    with pytest.raises(ConfigError) as exc:
        resolve(flags(tokens, tmp_path, insecure=True, peers="n1=127.0.0.1:7001,n2=10.1.2.3:7002"), env={})
    assert "only allowed when every address" in problems(exc)


def test_the_recovery_rule_is_the_cores(tokens: Path, tmp_path: Path) -> None:
    env = {"WAITGRAPH_SECRET": "s-dGhlIHNlY3JldCBvZiB0aGlzIHRlc3QgaXMgbG9uZw"}
    with pytest.raises(ConfigError) as exc:
        resolve(flags(tokens, tmp_path, recovery_quorum="2", recovery_max_rollback="2"), env=env)
    assert "quorum=2 leaves no margin over max_concurrent_rollbacks=2" in problems(exc)
    with pytest.raises(ConfigError) as exc:
        resolve(flags(tokens, tmp_path, recovery_quorum="4", recovery_max_rollback="1"), env=env)
    assert "quorum_unreachable" in problems(exc)
    cfg = resolve(
        flags(tokens, tmp_path, recovery_voters="node:n1,node:n2,node:n3,operator:ops", recovery_quorum="3"), env=env
    )
    assert (cfg.recovery_quorum, cfg.recovery_max_rollback) == (3, 2)
    single = resolve(flags(tokens, tmp_path, peers=""), env=env)
    assert not single.recovery_bootstrap  # one node cannot out-vote a rollback on its own


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        resolve({"id": "bad id", "raft_addr": "nowhere", "peers": "n2"}, env={})
    text = problems(exc)
    for needle in ("id:", "raft_addr:", "grpc_addr:", "peers:", "data_dir:", "tokens_file:", "secret:"):
        assert needle in text


def test_config_file_keys_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('id = "n1"\ngrpc_adr = "x"\nsecret = "no"\n')
    with pytest.raises(ConfigError) as exc:
        load_file(path)
    assert "unknown key 'grpc_adr'" in problems(exc) and "holds 'secret'" in problems(exc)


def test_serve_refuses_a_bad_configuration_with_exit_code_2(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "waitgraph", "serve", "--id", "n1", "--raft-addr", "127.0.0.1:7001"],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 2 and "invalid configuration" in run.stderr and "grpc_addr" in run.stderr


# -- tokens ----------------------------------------------------------------------------------------------


def store(*entries: dict[str, Any]) -> auth.TokenStore:
    return auth.TokenStore.parse({"tokens": list(entries)})


def md(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def test_tokens_authenticate_by_digest_with_roles_and_expiry() -> None:
    agent_token = "agent-token-0123456789"
    tokens = store(
        {
            "name": "w1",
            "role": "agent",
            "agent_id": "worker-1",
            "sha256": hashlib.sha256(agent_token.encode()).hexdigest(),
        },
        {"name": "alice", "role": "admin", "token": "admin-token-0123456789"},
        {"name": "bob", "role": "operator", "token": "operator-token-0123456", "expires_at": "2030-01-01T00:00:00Z"},
    )
    agent = tokens.authenticate(md(agent_token), now_s=0)
    assert agent.actor == "agent:worker-1" and agent.role is auth.Role.AGENT
    assert tokens.authenticate(md("admin-token-0123456789"), 0).actor == "operator:alice"
    assert tokens.authenticate(md("operator-token-0123456"), 0).role is auth.Role.OPERATOR
    with pytest.raises(auth.Unauthenticated, match="expired"):
        tokens.authenticate(md("operator-token-0123456"), now_s=1_900_000_000)
    for _ in range(2):  # a token it knows is remembered by its header; an unknown one never is
        with pytest.raises(auth.Unauthenticated, match="unknown token"):
            tokens.authenticate(md("agent-token-0123456780"), 0)
        assert tokens.authenticate([("authorization", f" bearer  {agent_token} ")], 0) == agent
    with pytest.raises(auth.Unauthenticated, match="no credentials"):
        tokens.authenticate([], 0)
    with pytest.raises(auth.Unauthenticated, match="Bearer"):
        tokens.authenticate([("authorization", "Basic abc")], 0)
    auth.authorize(agent, "/waitgraph.v1.AgentService/RegisterWait")
    with pytest.raises(Exception, match="may not call"):
        auth.authorize(agent, "/waitgraph.v1.OperatorService/Status")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x", "role": "agent", "token": "t" * 20}, "agent_id"),
        ({"name": "x", "role": "operator", "agent_id": "a", "token": "t" * 20}, "only agent tokens"),
        ({"name": "x", "role": "root", "token": "t" * 20}, "role must be"),
        ({"name": "x", "role": "admin", "token": "short"}, "at least 16"),
        ({"name": "x", "role": "admin", "sha256": "abc"}, "64 hex"),
        ({"name": "x", "role": "admin"}, "exactly one of sha256"),
        ({"name": "x", "role": "admin", "token": "t" * 20, "expires_at": "2030-01-01T00:00:00"}, "time zone"),
        ({"name": "x", "role": "admin", "token": "t" * 20, "colour": "red"}, "unknown keys"),
    ],
)
def test_bad_token_entries_are_refused(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(auth.TokenFileError, match=message):
        store(entry)


WEAK_SECRETS = [
    "s",
    "hunter2",
    "test-cluster-secret",  # what this project's tests used to run with
    "a" * 64,
    "abcdefghijklmnopqrstuvwxyz0123456789",
    "0123456789abcdef" * 4,
    "0f" * 16,
    secrets.token_hex(15),  # 120 bits
    secrets.token_urlsafe(15),
]


@pytest.mark.parametrize("weak", WEAK_SECRETS)
def test_a_weak_secret_is_refused_with_how_to_make_one(tokens: Path, tmp_path: Path, weak: str) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(weak + "\n")
    for env, extra in (({"WAITGRAPH_SECRET": weak}, {}), ({}, {"secret_file": str(secret_file)})):
        with pytest.raises(ConfigError) as exc:
            resolve(flags(tokens, tmp_path, **extra), env=env)
        text = problems(exc)
        assert "at least 128 are required" in text and "head -c 32 /dev/urandom | base64" in text
        assert len(weak) < 8 or weak not in text  # the secret itself is never echoed


def test_random_secrets_of_128_bits_or_more_are_accepted(tokens: Path, tmp_path: Path) -> None:
    generated = subprocess.run(
        ["bash", "-c", GENERATE_SECRET], capture_output=True, text=True, check=True
    ).stdout.strip()
    for _ in range(50):
        for strong in (secrets.token_hex(16), secrets.token_urlsafe(16), base64.b64encode(os.urandom(16)).decode()):
            assert secret_problem(strong) is None, strong
    for strong in (generated, base64.b32encode(os.urandom(20)).decode(), secrets.token_urlsafe(32)):
        assert resolve(flags(tokens, tmp_path), env={"WAITGRAPH_SECRET": strong}).secret == strong
    # What `waitgraph dev` writes into its directory:
    assert secret_problem(secrets.token_urlsafe(32)) is None and secret_bits(secrets.token_urlsafe(32)) >= 128
    # --insecure on loopback still runs without a secret of its own.
    assert resolve(flags(tokens, tmp_path, insecure=True), env={}).secret == INSECURE_SECRET


def test_the_bare_node_refuses_a_weak_secret(tmp_path: Path) -> None:
    from . import raft_node

    args = raft_node.parse_args(["--id", "n1", "--raft", "127.0.0.1:1", "--data", str(tmp_path), "--control", "1"])
    os.environ["WAITGRAPH_TEST_WEAK"] = "hunter2"
    try:
        args.password_env = "WAITGRAPH_TEST_WEAK"
        with pytest.raises(SystemExit, match="at least 128 are required"):
            asyncio.run(raft_node.run(args))
    finally:
        del os.environ["WAITGRAPH_TEST_WEAK"]
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_waitgraph_dev_writes_a_secret_its_nodes_accept(tmp_path: Path) -> None:
    from waitgraph.dev.localcluster import LocalCluster

    cluster = LocalCluster(root=tmp_path / "dev", nodes=3)
    cluster.prepare()
    secret = (tmp_path / "dev" / "secret").read_text().strip()
    assert secret_problem(secret) is None and secret_bits(secret) >= 128
    assert (tmp_path / "dev" / "secret").stat().st_mode & 0o077 == 0  # the owner's only
