"""The configuration of one node process (``waitgraph serve``): layered, validated at start.

Rules kept here:
- One key per setting, the same in the TOML file (``--config``), as a flag (``--grpc-addr`` for
  ``grpc_addr``) and as an environment variable (``WAITGRAPH_GRPC_ADDR``). Precedence: flags >
  environment > file > defaults. The cluster secret is the exception: it is never a flag or a
  file key (both end up in shell history or in a checked-in file), only ``--secret-file`` /
  ``secret_file`` (a path) or the variable ``WAITGRAPH_SECRET`` (the secret itself).
- :func:`resolve` reports every problem at once, each naming its key, and returns a
  :class:`ServeConfig` only when the whole configuration is usable.
- The recovery settings are validated by the core itself: :func:`resolve` dry-applies the
  ConfigureRecovery the leader would propose to a scratch state machine, so the rule "the vote
  quorum must exceed max_rollback" lives in one place (statemachine/recovery.py).
"""

from __future__ import annotations

import ipaddress
import itertools
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from waitgraph.node.auth import TokenFileError, TokenStore
from waitgraph.node.logs import LOG_FORMATS
from waitgraph.statemachine import Envelope, StateMachine
from waitgraph.statemachine.commands import ConfigureRecovery
from waitgraph.statemachine.errors import Rejection
from waitgraph.statemachine.ids import actor_kind, validate_name
from waitgraph.statemachine.outcome import Result
from waitgraph.statemachine.recovery_state import RolloutMode
from waitgraph.statemachine.retire import MIN_RETENTION_MS

SECRET_ENV = "WAITGRAPH_SECRET"
INSECURE_SECRET = "waitgraph-insecure-loopback-only"
"""The Raft password of an --insecure loopback cluster: anyone on the host can talk to its Raft
port (and, through pysyncobj's pickle, run code as the node). Development only."""


SECRET_MIN_BITS = 128
GENERATE_SECRET = "head -c 32 /dev/urandom | base64"
_ALPHABETS = (
    (16, frozenset("0123456789abcdef")),
    (16, frozenset("0123456789ABCDEF")),
    (32, frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")),
    (64, frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")),
    (64, frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")),
)


def secret_bits(secret: str) -> float:
    """An upper estimate of the entropy of ``secret``, in bits, as if every character were drawn at
    random from the smallest usual alphabet holding them all (hex, base32, base64 or base64url,
    else the 95 printable ASCII characters; trailing ``=`` padding does not count).

    One string cannot show how it was chosen, so this can only refuse what is certainly weak: too
    short for its alphabet, or visibly not random. The estimate is 0 when the string repeats itself
    (fewer distinct characters than half of what a random string of its length and alphabet
    nearly always has) or runs in sequences (most neighbours equal or one apart: ``abcd``,
    ``1111``). A long phrase of chosen words can still pass: generate the secret
    (:data:`GENERATE_SECRET`)."""
    text = secret.rstrip("=")
    if not text:
        return 0.0
    chars = set(text)
    size = next((n for n, alphabet in _ALPHABETS if chars <= alphabet), 95)
    if len(chars) < min(size, len(text)) / 2:
        return 0.0
    steps = sum(1 for a, b in itertools.pairwise(text) if abs(ord(a) - ord(b)) <= 1)
    if len(text) > 1 and steps > (len(text) - 1) / 2:
        return 0.0
    return len(text) * math.log2(size)


def secret_problem(secret: str) -> str | None:
    """Why ``secret`` cannot be the cluster secret, or None. Every Raft frame is authenticated and
    encrypted with keys derived from it (cluster/node/raft/_transport.py): a guessable secret lets anyone
    on the cluster network join, read and write the log."""
    bits = secret_bits(secret)
    if bits >= SECRET_MIN_BITS:
        return None
    return (
        f"the cluster secret has at most {bits:.0f} bits of entropy; at least {SECRET_MIN_BITS} are required "
        f"(for example 16 random bytes as hex or base64). Generate one with: {GENERATE_SECRET}"
    )


GRPC_FRONTS = ("auto", "native", "python")


class ConfigError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))
        self.problems = problems


DEFAULT_RETENTION_MS = 300_000
"""Five minutes. At 1,000 executions/s a replica then holds about 300,000 settled executions
(~700 B each, ~210 MB) plus their tombstones (~100 B each for another retention, ~30 MB): flat
well below 1 GB, while an agent's late ack or retry of just-finished work, an operator's look
at a fresh decision and the livelock guard's default 60 s window all find the live records
(docs/operations.md, "Retention")."""


@dataclass(frozen=True, slots=True)
class Peer:
    node_id: str
    raft_address: str
    grpc_address: str | None


@dataclass(frozen=True, slots=True)
class ServeConfig:
    node_id: str
    raft_address: str
    grpc_address: str
    peers: tuple[Peer, ...]
    """Every member, this node included, sorted by id."""
    data_dir: Path
    secret: str = field(repr=False)
    insecure: bool
    tokens: TokenStore = field(repr=False)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    recovery_bootstrap: bool = True
    """On first leadership, propose ConfigureRecovery (and initial_mode) if recovery is not configured."""
    recovery_voters: tuple[str, ...] = ()
    recovery_quorum: int = 0
    recovery_max_rollback: int = 0
    recovery_confirmation_window_ms: int = 500
    initial_mode: RolloutMode | None = None
    detect_interval_ms: int = 25
    housekeeping_interval_ms: int = 250
    event_ring: int = 100_000
    max_sessions_per_node: int = 20_000
    """Sessions whose agents heartbeat through this node (cluster/node/lessor.py, admission)."""
    max_sessions: int = 50_000
    """ACTIVE sessions in the cluster, checked by the node a join arrives at (the core's
    Limits.max_sessions, 100,000, stays the replicated backstop)."""
    forward_writes: bool = True
    shutdown_grace_s: float = 2.0
    submit_timeout_s: float = 5.0
    election_timeout_ms: int = 500
    """A follower that hears no leader for between this and twice this starts an election; at
    least 400 (pysyncobj wants it above three heartbeat periods of 100 ms)."""
    log_level: str = "INFO"
    log_format: str = "auto"
    """json, console, or auto: console when stderr is a terminal, else json (cluster/node/logs.py)."""
    metrics_address: str | None = None
    """host:port of the Prometheus /metrics HTTP server (cluster/node/metrics.py); None: not served."""
    http_address: str | None = None
    """host:port of the live view and /metrics (cluster/ops/liveview.py); None: not served."""
    fsync: bool = True
    """Acknowledge Raft entries only once the journal is flushed to disk (cluster/node/raft/_acks.py):
    acknowledged writes then survive a power cut, not only a killed process.
    On by default, as etcd, ZooKeeper and Consul do; ``--no-fsync`` (``fsync = false``) is for tests
    and benchmarks only, and ``waitgraph status`` and ``waitgraph_raft_durable`` show it."""
    rate_limit_per_s: float = 100.0
    """Requests per second each token (principal) may make, every RPC counted; 0 turns the limit
    off (cluster/node/ratelimit.py). An agent makes a few calls a second; a runaway one is held here."""
    rate_limit_burst: int = 200
    """Requests a token may make at once above that rate (the size of its bucket)."""
    retention_ms: int = DEFAULT_RETENTION_MS
    """Settled work stays in the live state this long (logical ms) before the leader's loop
    retires it to the history store (statemachine/retire.py; docs/operations.md has the sizing)."""
    retire_interval_ms: int = 1_000
    """The leader's retirement check period; a pass is proposed only when something is due (and
    once per retention at least, to sweep the books that no run's settling makes due)."""
    history_max_mb: int = 1024
    """The history store's size bound (cluster/node/history.py): oldest records go first."""
    history_max_age_days: int = 90
    """Records older than this are deleted from the history store."""
    grpc_front: str = "auto"
    """Who serves the gRPC port (cluster/node/front.py): ``native``, the compiled front
    (cluster/front/, a tenth of Python gRPC's cost per call; refuse to start without it),
    ``python``, the node's own grpc.aio server, or ``auto``, native when it is installed."""
    grpc_front_binary: Path | None = None
    """The native front's executable; None: the one built into the package (scripts/build_front)."""
    log_compaction_min_entries: int = 5000
    """Raft log entries past which a follower compacts its log into a dump (a leader at four times
    as many; cluster/node/raft/_compaction.py). Low values make every restart restore from a
    dump, which the chaos lab wants."""

    @property
    def actor(self) -> str:
        return f"node:{self.node_id}"

    def peer_by_raft(self, raft_address: str | None) -> Peer | None:
        return next((p for p in self.peers if p.raft_address == raft_address), None)

    def recovery_command(self) -> ConfigureRecovery:
        return ConfigureRecovery(
            voters=self.recovery_voters,
            quorum=self.recovery_quorum,
            max_rollback=self.recovery_max_rollback,
            confirmation_window_ms=self.recovery_confirmation_window_ms,
        )


def recovery_refusal(cmd: ConfigureRecovery, actor: str) -> str | None:
    """Why the core would refuse ``cmd`` ("message (code)"), or None: ``cmd`` dry-applied to a
    scratch state machine, so the quorum rule lives in one place (statemachine/recovery.py)."""
    probe = StateMachine().apply(Envelope(actor=actor, at_ms=0, request_id=None, command=cmd))
    if probe.result is Result.REJECTED:
        return f"{probe.message} ({probe.code})"
    return None


def _default(name: str) -> Any:
    """A setting's default: the one written on ServeConfig, so parsing cannot drift from it."""
    return ServeConfig.__dataclass_fields__[name].default


KEYS: dict[str, str] = {
    "id": "this node's id (node:<id> is its actor)",
    "raft_addr": "host:port this node's Raft port binds to (its identity in the cluster)",
    "grpc_addr": "host:port the gRPC API binds to",
    "peers": "every member's Raft address: id=host:port,... (this node may be listed)",
    "peer_grpc": "every member's gRPC address, for leader hints: id=host:port,...",
    "data_dir": "directory for the Raft journal and snapshots",
    "secret_file": f"file holding the cluster secret (or set ${SECRET_ENV} to the secret itself)",
    "tokens_file": "bearer token file (JSON or TOML, see cluster/node/auth.py)",
    "insecure": "allow running without a secret and without TLS, only when every address is loopback",
    "tls_cert": "PEM server certificate (enables TLS)",
    "tls_key": "PEM private key of tls_cert",
    "tls_client_ca": "PEM CA bundle: require client certificates signed by it (mTLS)",
    "recovery_bootstrap": "propose ConfigureRecovery on first leadership when recovery is not configured",
    "recovery_voters": "voters of that proposal (default: node:<id> of every member)",
    "recovery_quorum": "its vote quorum (default: a majority of the nodes)",
    "recovery_max_rollback": "its max_rollback (default: quorum - 1)",
    "recovery_confirmation_window_ms": "its confirmation window in logical ms",
    "initial_mode": "rollout mode set with that proposal: shadow, auto-safe or auto (default: the core's, shadow)",
    "detect_interval_ms": "leader detection / vote / commit loop period",
    "housekeeping_interval_ms": "leader Tick / ReemitCancels check period",
    "event_ring": "events kept in memory for WatchEvents resumption",
    "max_sessions_per_node": "sessions this node serves (their agents heartbeat through it); one more join is "
    "refused with RESOURCE_EXHAUSTED too_many_sessions",
    "max_sessions": "active sessions in the cluster; one more join is refused with RESOURCE_EXHAUSTED "
    "too_many_sessions",
    "forward_writes": "forward writes received by a follower to the leader (else UNAVAILABLE + leader hint)",
    "shutdown_grace_s": "how long in-flight RPCs may finish on SIGTERM",
    "submit_timeout_s": "how long a write waits for its outcome before UNAVAILABLE (outcome unknown)",
    "election_timeout_ms": "Raft election timeout: a follower that hears no leader for between this and twice "
    "this starts an election (failover takes about as long); raise it where processes pause longer (a loaded "
    "VM, slow disk flushes), as etcd's --election-timeout",
    "log_level": "DEBUG, INFO, WARNING or ERROR",
    "log_format": "json (one object per line), console, or auto: console on a terminal, else json",
    "metrics_addr": "host:port to serve Prometheus /metrics on (default: not served)",
    "http_addr": "host:port to serve the live view (operator token) and /metrics on; HTTPS with tls_cert "
    "(default: not served)",
    "fsync": "flush the Raft journal to disk before acknowledging (the default). --no-fsync is NOT DURABLE: a "
    "power cut on a majority can lose acknowledged writes; for tests and benchmarks only",
    "rate_limit_per_s": "requests per second each token may make (token bucket; 0: no limit)",
    "rate_limit_burst": "requests a token may make at once above rate_limit_per_s",
    "retention_ms": "how long settled work stays in the live state before it retires to the history store "
    f"(logical ms, at least {MIN_RETENTION_MS})",
    "retire_interval_ms": "leader retirement check period",
    "history_max_mb": "size bound of this node's history store (oldest records deleted first)",
    "history_max_age_days": "history records older than this are deleted",
    "log_compaction_min_entries": "Raft log entries past which a follower compacts its log into a dump (leader: 4x)",
    "grpc_front": "who serves the gRPC port: native (the compiled front, cluster/front; required), python (the "
    "node's grpc.aio server) or auto (native when installed, the default)",
    "grpc_front_binary": "path of the native front's executable (default: the one installed with the package)",
}
"""Every configuration key and what it sets."""


def env_var(key: str) -> str:
    return f"WAITGRAPH_{key.upper()}"


def load_file(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as exc:
        raise ConfigError([f"config: cannot read {path}: {exc.strerror}"]) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"config: {path} is not valid TOML: {exc}"]) from exc
    unknown = sorted(set(raw) - KEYS.keys() - {"secret"})
    problems = [f"config: unknown key {k!r} in {path}" for k in unknown]
    if "secret" in raw:
        problems.append(f"config: {path} holds 'secret'; use secret_file or ${SECRET_ENV} instead")
    if problems:
        raise ConfigError(problems)
    return raw


def _host_port(value: Any, key: str, problems: list[str]) -> tuple[str, int] | None:
    if not isinstance(value, str) or not value:
        problems.append(f"{key}: expected host:port")
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        problems.append(f"{key}: {value!r} is not host:port with a port in 1..65535")
        return None
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _mapping(value: Any, key: str, problems: list[str]) -> dict[str, str]:
    """``id=addr,...`` text or a TOML table."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, str):
        items = []
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            name, sep, addr = part.partition("=")
            if not sep:
                problems.append(f"{key}: {part!r} is not id=host:port")
                continue
            items.append((name.strip(), addr.strip()))
    else:
        problems.append(f"{key}: expected id=host:port,... or a table")
        return {}
    out: dict[str, str] = {}
    for name, addr in items:
        if name in out:
            problems.append(f"{key}: {name} is listed twice")
        elif not isinstance(addr, str):
            problems.append(f"{key}: the address of {name} must be text")
        else:
            out[name] = addr
    return out


def _int(value: Any, key: str, problems: list[str], minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        problems.append(f"{key}: expected an integer")
        return minimum
    try:
        n = int(value)
    except ValueError:
        problems.append(f"{key}: {value!r} is not an integer")
        return minimum
    if n < minimum:
        problems.append(f"{key}: must be at least {minimum}")
    return n


def _float(value: Any, key: str, problems: list[str]) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        problems.append(f"{key}: {value!r} is not a number")
        return 0.0
    if f < 0:
        problems.append(f"{key}: must not be negative")
    return f


def _bool(value: Any, key: str, problems: list[str]) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value.lower() in ("1", "true", "yes", "on")
    problems.append(f"{key}: {value!r} is not true or false")
    return False


def _path(value: Any) -> Path | None:
    return None if value in (None, "") else Path(str(value)).expanduser()


def _names(value: Any, key: str, problems: list[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    problems.append(f"{key}: expected a comma-separated list")
    return ()


def resolve(
    flags: Mapping[str, Any], file: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> ServeConfig:
    """Build and check the configuration: ``flags`` (only those given), the ``WAITGRAPH_*``
    variables of ``env`` (default: the process environment), then ``file`` (:func:`load_file`)."""
    env = os.environ if env is None else env
    file = file or {}
    from_env = {k: env[env_var(k)] for k in KEYS if env.get(env_var(k), "") != ""}
    layers = {**file, **from_env, **{k: v for k, v in flags.items() if v is not None}}
    problems: list[str] = []
    get = layers.get

    node_id = "?"
    try:
        node_id = validate_name(get("id"), "id")
        actor_kind(f"node:{node_id}")
    except Rejection as exc:
        problems.append(f"id: {exc.message}" if get("id") is not None else "id: required (--id)")
    raft = _host_port(get("raft_addr"), "raft_addr", problems)
    grpc_hp = _host_port(get("grpc_addr"), "grpc_addr", problems)
    raft_address = str(get("raft_addr"))
    grpc_address = str(get("grpc_addr"))

    raft_peers = _mapping(get("peers"), "peers", problems)
    grpc_peers = _mapping(get("peer_grpc"), "peer_grpc", problems)
    if raft is not None:
        listed = raft_peers.get(node_id)
        if listed is not None and listed != raft_address:
            problems.append(f"peers: lists {node_id} at {listed}, but raft_addr is {raft_address}")
        raft_peers[node_id] = raft_address
    listed_grpc = grpc_peers.get(node_id)
    if listed_grpc is not None and listed_grpc != grpc_address:
        problems.append(f"peer_grpc: lists {node_id} at {listed_grpc}, but grpc_addr is {grpc_address}")
    grpc_peers[node_id] = grpc_address
    for name in sorted(raft_peers):
        try:
            validate_name(name, "peer id")
        except Rejection as exc:
            problems.append(f"peers: {exc.message}")
    for name in sorted(set(grpc_peers) - set(raft_peers)):
        problems.append(f"peer_grpc: {name} is not in peers")
    if len(set(raft_peers.values())) != len(raft_peers):
        problems.append("peers: two members share a Raft address")
    addresses = [("raft_addr", raft_address), ("grpc_addr", grpc_address)]
    addresses += [(f"peers.{n}", a) for n, a in sorted(raft_peers.items())]
    addresses += [(f"peer_grpc.{n}", a) for n, a in sorted(grpc_peers.items())]
    hosts = [hp[0] for key, addr in addresses if (hp := _host_port(addr, key, problems)) is not None]
    all_loopback = bool(hosts) and all(is_loopback(h) for h in hosts)
    peers = tuple(Peer(n, raft_peers[n], grpc_peers.get(n)) for n in sorted(raft_peers))

    data_dir = _path(get("data_dir"))
    if data_dir is None:
        problems.append("data_dir: required (--data-dir)")

    insecure = _bool(get("insecure", False), "insecure", problems)
    secret = ""
    # flag > the secret itself in the environment > a file named in the environment > config file
    secret_file = _path(flags.get("secret_file"))
    if secret_file is None and not env.get(SECRET_ENV):
        secret_file = _path(from_env.get("secret_file") or file.get("secret_file"))
    if secret_file is not None:
        try:
            secret = secret_file.read_text().strip()
        except OSError as exc:
            problems.append(f"secret_file: cannot read {secret_file}: {exc.strerror}")
        else:
            if not secret:
                problems.append(f"secret_file: {secret_file} is empty")
    elif env.get(SECRET_ENV):
        secret = env[SECRET_ENV]
    if secret and (weak := secret_problem(secret)) is not None:
        problems.append(f"secret: {weak}")
    if not secret:
        if not insecure:
            problems.append(
                f"secret: no cluster secret; give --secret-file or set ${SECRET_ENV} "
                "(--insecure runs without one, on loopback addresses only)"
            )
        elif not all_loopback:
            problems.append("insecure: --insecure is only allowed when every address (own and peers') is loopback")
        else:
            secret = INSECURE_SECRET

    tls_cert, tls_key, tls_ca = _path(get("tls_cert")), _path(get("tls_key")), _path(get("tls_client_ca"))
    if (tls_cert is None) != (tls_key is None):
        problems.append("tls_cert / tls_key: give both or neither")
    if tls_ca is not None and tls_cert is None:
        problems.append("tls_client_ca: needs tls_cert and tls_key (mTLS is on top of TLS)")
    for key, p in (("tls_cert", tls_cert), ("tls_key", tls_key), ("tls_client_ca", tls_ca)):
        if p is not None and not p.is_file():
            problems.append(f"{key}: {p} is not a readable file")
    if tls_cert is None and not insecure and grpc_hp is not None and not is_loopback(grpc_hp[0]):
        problems.append(
            "grpc_addr: bearer tokens in clear text off loopback: give tls_cert and tls_key, or --insecure to accept it"
        )

    tokens = TokenStore([])
    tokens_file = _path(get("tokens_file"))
    if tokens_file is None:
        problems.append("tokens_file: required (--tokens-file); see cluster/node/auth.py for the format")
    else:
        try:
            tokens = TokenStore.load(tokens_file)
        except TokenFileError as exc:
            problems.append(f"tokens_file: {exc}")

    initial_mode = None
    if get("initial_mode") not in (None, ""):
        try:
            initial_mode = RolloutMode(str(get("initial_mode")))
        except ValueError:
            problems.append(f"initial_mode: must be one of {[m.value for m in RolloutMode]}")

    n = len(peers)
    bootstrap = _bool(get("recovery_bootstrap", True), "recovery_bootstrap", problems)
    voters = _names(get("recovery_voters"), "recovery_voters", problems) if get("recovery_voters") else ()
    explicit = bool(voters) or get("recovery_quorum") is not None or get("recovery_max_rollback") is not None
    if not voters:
        voters = tuple(f"node:{p.node_id}" for p in peers)
    # Default quorum: the largest one that still tolerates as many node failures as Raft does
    # (a majority), so recovery commits whenever the cluster can commit at all. max_rollback must
    # stay below it (the core's rule), hence quorum - 1.
    default_quorum = len(voters) - (len(voters) - 1) // 2
    quorum = _int(get("recovery_quorum", default_quorum), "recovery_quorum", problems, minimum=0)
    max_rollback = _int(get("recovery_max_rollback", max(quorum - 1, 0)), "recovery_max_rollback", problems)
    window = _int(
        get("recovery_confirmation_window_ms", _default("recovery_confirmation_window_ms")),
        "recovery_confirmation_window_ms",
        problems,
    )
    if bootstrap and not explicit and n == 1:
        # One node: quorum 1 cannot exceed any max_rollback >= 1. Recovery needs a second voter
        # (an operator): configure it explicitly, or with the ConfigureRecovery RPC.
        bootstrap = False
    cfg_voters, cfg_quorum, cfg_rollback = voters, quorum, max_rollback
    if bootstrap:
        refusal = recovery_refusal(
            ConfigureRecovery(voters=voters, quorum=quorum, max_rollback=max_rollback, confirmation_window_ms=window),
            f"node:{node_id}",
        )
        if refusal is not None:
            problems.append(f"recovery: {refusal}")

    def setting(name: str) -> Any:
        return get(name, _default(name))

    values: dict[str, Any] = dict(
        detect_interval_ms=_int(setting("detect_interval_ms"), "detect_interval_ms", problems, 10),
        housekeeping_interval_ms=_int(setting("housekeeping_interval_ms"), "housekeeping_interval_ms", problems, 10),
        event_ring=_int(setting("event_ring"), "event_ring", problems, 1),
        max_sessions_per_node=_int(setting("max_sessions_per_node"), "max_sessions_per_node", problems, 1),
        max_sessions=_int(setting("max_sessions"), "max_sessions", problems, 1),
        forward_writes=_bool(setting("forward_writes"), "forward_writes", problems),
        shutdown_grace_s=_float(setting("shutdown_grace_s"), "shutdown_grace_s", problems),
        submit_timeout_s=_float(setting("submit_timeout_s"), "submit_timeout_s", problems),
        election_timeout_ms=_int(setting("election_timeout_ms"), "election_timeout_ms", problems, 400),
        fsync=_bool(setting("fsync"), "fsync", problems),
        rate_limit_per_s=_float(setting("rate_limit_per_s"), "rate_limit_per_s", problems),
        rate_limit_burst=_int(setting("rate_limit_burst"), "rate_limit_burst", problems, 1),
        retention_ms=_int(setting("retention_ms"), "retention_ms", problems, MIN_RETENTION_MS),
        retire_interval_ms=_int(setting("retire_interval_ms"), "retire_interval_ms", problems, 10),
        history_max_mb=_int(setting("history_max_mb"), "history_max_mb", problems, 1),
        history_max_age_days=_int(setting("history_max_age_days"), "history_max_age_days", problems, 1),
        log_compaction_min_entries=_int(
            setting("log_compaction_min_entries"), "log_compaction_min_entries", problems, 10
        ),
    )
    metrics_address = None
    if get("metrics_addr") not in (None, ""):
        metrics_hp = _host_port(get("metrics_addr"), "metrics_addr", problems)
        metrics_address = str(get("metrics_addr"))
        if metrics_hp is not None and metrics_address in (raft_address, grpc_address):
            problems.append(f"metrics_addr: {metrics_address} is also the Raft or gRPC address")
    http_address = None
    if get("http_addr") not in (None, ""):
        http_hp = _host_port(get("http_addr"), "http_addr", problems)
        http_address = str(get("http_addr"))
        if http_hp is not None and http_address in (raft_address, grpc_address, metrics_address):
            problems.append(f"http_addr: {http_address} is also the Raft, gRPC or metrics address")
        if http_hp is not None and tls_cert is None and not insecure and not is_loopback(http_hp[0]):
            problems.append(
                "http_addr: operator tokens in clear text off loopback: give tls_cert and tls_key (the view is "
                "then served over HTTPS), or --insecure to accept it"
            )
    grpc_front = str(get("grpc_front") or _default("grpc_front")).lower()
    if grpc_front not in GRPC_FRONTS:
        problems.append(f"grpc_front: must be one of {', '.join(GRPC_FRONTS)}")
    grpc_front_binary = _path(get("grpc_front_binary"))
    if grpc_front_binary is not None and not grpc_front_binary.is_file():
        problems.append(f"grpc_front_binary: {grpc_front_binary} is not a file")
    log_level = str(get("log_level") or "INFO").upper()
    if log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        problems.append("log_level: must be DEBUG, INFO, WARNING or ERROR")
    log_format = str(get("log_format") or _default("log_format")).lower()
    if log_format not in LOG_FORMATS:
        problems.append(f"log_format: must be one of {', '.join(LOG_FORMATS)}")
    if problems:
        raise ConfigError(problems)
    assert data_dir is not None
    return ServeConfig(
        node_id=node_id,
        raft_address=raft_address,
        grpc_address=grpc_address,
        peers=peers,
        data_dir=data_dir,
        secret=secret,
        insecure=insecure,
        tokens=tokens,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_client_ca=tls_ca,
        recovery_bootstrap=bootstrap,
        recovery_voters=cfg_voters,
        recovery_quorum=cfg_quorum,
        recovery_max_rollback=cfg_rollback,
        recovery_confirmation_window_ms=window,
        initial_mode=initial_mode,
        log_level=log_level,
        log_format=log_format,
        metrics_address=metrics_address,
        http_address=http_address,
        grpc_front=grpc_front,
        grpc_front_binary=grpc_front_binary,
        **values,
    )
