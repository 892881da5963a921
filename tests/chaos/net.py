"""The chaos lab: every node in its own network namespace behind a bridge, Raft links via proxies.

Layout of one run (``wgc1a2b`` is the run's prefix, 10.231.K.0/24 a subnet no other run uses)::

    namespace wgc1a2b-br    bridge br0
    namespace wgc1a2b-n1    lo, eth0 = 10.231.K.11 (a veth into br0), filter chain CHAOS
    ...                      (jumped from INPUT and OUTPUT), nat OUTPUT: Raft traffic -> proxies
    root namespace          wgc1a2b-h = 10.231.K.254, a veth into br0: the driver and the
                            workload reach every node from here

The nemeses cut links with DROP rules in the nodes' CHAOS chains (matching the peers' addresses,
so node-to-node Raft and forwarded gRPC are cut, the driver's traffic is not), and delay them in
:class:`LinkProxies`: a node's outgoing Raft connections are redirected (nat OUTPUT, in its own
namespace) to a proxy listening in that namespace, which connects on to the peer from the node's
own address. The proxies are always in the path, so a delay applies to connections that already
exist; on the wire the traffic still goes node address to node address, so the DROP rules see it.

Rules kept here:
- Everything created carries the run's prefix; ``/run/waitgraph-chaos/<prefix>.json`` names the
  owning process. :func:`sweep_stale` (run when a lab starts) removes what runs whose owner is
  dead left behind: processes in their namespaces, namespaces, links, the state file.
- :meth:`Lab.close` is idempotent and runs on ``__exit__``, at exit, and on SIGTERM/SIGHUP (turned
  into ``SystemExit`` so every context manager unwinds). Deleting a namespace deletes its veths
  and its iptables rules with it.
- Where namespaces cannot be created (not root, no ``ip``/``iptables``, no CAP_SYS_ADMIN) the lab
  says so on stderr and runs on loopback: the process and clock nemeses work, the network ones are
  reported as unavailable (never silently skipped).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import fcntl
import ipaddress
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX_RE = re.compile(r"^wgc[0-9a-f]{4}$")
PROBE_PREFIX = "wgcprobe-"
"""The namespace :func:`netns_unavailable` tries, named after the process trying."""
NAME_RE = re.compile(r"^(wgc[0-9a-f]{4})-")
STATE_DIR = Path(os.environ.get("WAITGRAPH_CHAOS_STATE", "/run/waitgraph-chaos"))
SUBNET_BASE = "10.231"
HOST_OCTET = 254
CHAIN = "CHAOS"
PROXY_MARK = 0x2A
"""The proxies' own upstream sockets carry this mark, so the redirect does not catch them again."""
PROXY_PORT_BASE = 20000
CLONE_NEWNET = 0x40000000
SO_MARK = 36


class LabError(RuntimeError):
    pass


def run(args: list[str], check: bool = True, timeout_s: float = 20.0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(args)} exited with {proc.returncode}: {proc.stderr.strip()}")
    return proc


def netns_unavailable() -> str | None:
    """Why this machine cannot run the namespace lab, or None when it can."""
    if sys.platform != "linux":
        return "not Linux"
    if os.geteuid() != 0:
        return "not root (network namespaces and iptables need root)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    probe = f"{PROBE_PREFIX}{os.getpid()}"
    made = run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    try:
        ipt = run(["ip", "netns", "exec", probe, "iptables", "-w", "-L", "-n"], check=False)
        if ipt.returncode != 0:
            return f"iptables does not work in a namespace: {ipt.stderr.strip()}"
    finally:
        run(["ip", "netns", "delete", probe], check=False)
    return None


# -- stale runs --------------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def namespaces() -> list[str]:
    if shutil.which("ip") is None:
        return []
    out = run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def root_links() -> list[str]:
    if shutil.which("ip") is None:
        return []
    out = run(["ip", "-o", "link", "show"], check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def owned(prefix: str) -> dict[str, list[str]]:
    """What exists now with this prefix: namespaces, root links, processes, state file."""
    ns = [n for n in namespaces() if n.startswith(prefix + "-")]
    pids: list[str] = []
    for n in ns:
        pids += run(["ip", "netns", "pids", n], check=False).stdout.split()
    state = STATE_DIR / f"{prefix}.json"
    return {
        "namespaces": ns,
        "links": [link for link in root_links() if link.startswith(prefix + "-")],
        "processes": pids,
        "state": [str(state)] if state.exists() else [],
    }


def remove_prefix(prefix: str) -> None:
    """Remove everything a run with this prefix created (whether or not its owner lives)."""
    for ns in [n for n in namespaces() if n.startswith(prefix + "-")]:
        for pid in run(["ip", "netns", "pids", ns], check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
    state = STATE_DIR / f"{prefix}.json"
    deadline = time.monotonic() + 5
    for ns in [n for n in namespaces() if n.startswith(prefix + "-")]:
        while run(["ip", "netns", "pids", ns], check=False).stdout.split() and time.monotonic() < deadline:
            time.sleep(0.05)
        run(["ip", "netns", "delete", ns], check=False)
    for link in root_links():
        if link.startswith(prefix + "-"):
            run(["ip", "link", "delete", link], check=False)
    with contextlib.suppress(OSError):
        state.unlink()


def sweep_stale() -> list[str]:
    """Remove the leftovers of runs whose owning process is gone; the prefixes removed."""
    prefixes: set[str] = set()
    for name in namespaces() + root_links():
        if m := NAME_RE.match(name):
            prefixes.add(m.group(1))
    if STATE_DIR.exists():
        prefixes |= {p.stem for p in STATE_DIR.glob("wgc*.json") if PREFIX_RE.match(p.stem)}
    for ns in namespaces():
        pid = ns.removeprefix(PROBE_PREFIX)
        if ns.startswith(PROBE_PREFIX) and pid.isdigit() and not _pid_alive(int(pid)):
            run(["ip", "netns", "delete", ns], check=False)
    stale = []
    for prefix in sorted(prefixes):
        state = STATE_DIR / f"{prefix}.json"
        owner = None
        with contextlib.suppress(ValueError, OSError):
            owner = int(json.loads(state.read_text())["owner"])
        if owner is not None and _pid_alive(owner):
            continue
        remove_prefix(prefix)
        stale.append(prefix)
    return stale


# -- namespaces from Python threads ------------------------------------------------------------------

_libc = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform == "linux" else None


@contextlib.contextmanager
def in_netns(ns: str | None) -> Iterator[None]:
    """Run the block with the calling thread in namespace ``ns`` (None: stay). Sockets created
    inside belong to ``ns`` for good, whatever thread uses them later."""
    if ns is None:
        yield
        return
    assert _libc is not None
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns} failed")
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:  # pragma: no cover - would leave the thread lost
                raise OSError(ctypes.get_errno(), "setns back to the original namespace failed")
    finally:
        os.close(own)
        os.close(target)


# -- the proxies -------------------------------------------------------------------------------------


@dataclass
class LinkStats:
    connections: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


class LinkProxies:
    """One TCP proxy per ordered pair of nodes (initiator -> peer), all on one asyncio thread.

    pysyncobj keeps one connection per pair, opened by the node with the larger address; the proxy
    for ``(i, j)`` lives in i's namespace and carries both directions of it. :meth:`set_delay`
    delays what ``src`` sends to ``dst`` (bytes keep their order; the jitter never reorders).
    """

    def __init__(self, seed: int = 0) -> None:
        self._delay_ms: dict[tuple[str, str], tuple[float, float]] = {}
        self.stats: dict[tuple[str, str], LinkStats] = {}
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-proxies", daemon=True)
        self._servers: list[asyncio.AbstractServer] = []
        self._started = False

    def start(self) -> None:
        self._thread.start()
        self._started = True

    def add(self, src: str, ns: str | None, listen: tuple[str, int], dst: str, upstream: tuple[str, int]) -> None:
        """Listen on ``listen`` in ``ns`` and forward to ``upstream`` (from ``ns``)."""
        with in_netns(ns):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(listen)
        sock.listen(64)
        sock.setblocking(False)
        self.stats[(src, dst)] = LinkStats()

        async def serve() -> None:
            server = await asyncio.start_server(
                lambda r, w: self._handle(r, w, src, ns, dst, upstream), sock=sock, limit=1 << 20
            )
            self._servers.append(server)

        asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10)

    def set_delay(self, src: str, dst: str, delay_ms: float, jitter_ms: float = 0.0) -> None:
        self._delay_ms[(src, dst)] = (delay_ms, jitter_ms)

    def clear_delays(self) -> None:
        self._delay_ms.clear()

    def delays(self) -> dict[tuple[str, str], tuple[float, float]]:
        return dict(self._delay_ms)

    def _delay_s(self, src: str, dst: str) -> float:
        base, jitter = self._delay_ms.get((src, dst), (0.0, 0.0))
        return (base + (self._rng.uniform(0, jitter) if jitter else 0.0)) / 1000.0

    async def _handle(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        src: str,
        ns: str | None,
        dst: str,
        upstream: tuple[str, int],
    ) -> None:
        stats = self.stats[(src, dst)]
        stats.connections += 1
        loop = asyncio.get_running_loop()
        up_writer: asyncio.StreamWriter | None = None
        try:
            with in_netns(ns):
                up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            up.setsockopt(socket.SOL_SOCKET, SO_MARK, PROXY_MARK)
            up.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(up, upstream), 10)
            except BaseException:
                up.close()
                raise
            up_reader, up_writer = await asyncio.open_connection(sock=up, limit=1 << 20)
            pumps = [
                asyncio.ensure_future(self._pump(reader, up_writer, src, dst, stats, True)),
                asyncio.ensure_future(self._pump(up_reader, writer, dst, src, stats, False)),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for p in pumps:
                    p.cancel()
        except (TimeoutError, OSError, asyncio.CancelledError):
            pass
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.transport.abort()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        frm: str,
        to: str,
        stats: LinkStats,
        up: bool,
    ) -> None:
        """Copy until EOF, each chunk written ``delay`` after it was read, in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    return
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        last_due = 0.0
        try:
            while True:
                data = await reader.read(1 << 16)
                if up:
                    stats.bytes_up += len(data)
                else:
                    stats.bytes_down += len(data)
                due = max(loop.time() + self._delay_s(frm, to), last_due)
                last_due = due
                queue.put_nowait((due, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()

    def close(self) -> None:
        if not self._started:
            return
        self._started = False

        async def shutdown() -> None:
            for s in self._servers:
                s.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in others:
                t.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        with contextlib.suppress(Exception):
            self._loop.close()


# -- the lab -----------------------------------------------------------------------------------------


@dataclass
class LabNode:
    node_id: str
    ip: str
    ns: str | None
    """None on loopback."""


_live_labs: list[Lab] = []
_handlers_installed = False


def _close_live_labs() -> None:
    for lab in list(_live_labs):
        lab.close()


def _raise_exit(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _install_handlers() -> None:
    """Close labs at exit, and make SIGTERM/SIGHUP unwind (so ``with`` blocks clean up)."""
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_close_live_labs)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _raise_exit)


@dataclass
class Lab:
    """The network of one chaos run. ``with Lab(3) as lab: ...`` builds it and removes it."""

    nodes: int = 3
    force_loopback: bool = False
    seed: int = 0
    prefix: str = field(default_factory=lambda: f"wgc{secrets.token_hex(2)}")
    members: list[LabNode] = field(default_factory=list)
    mode: str = "unbuilt"
    """netns or loopback."""
    fallback_reason: str | None = None
    host_ip: str = "127.0.0.1"
    proxies: LinkProxies | None = None
    raft_ports: dict[str, int] = field(default_factory=dict)
    _closed: bool = False
    _claimed: bool = False

    # -- building --------------------------------------------------------------------------------

    def __enter__(self) -> Lab:
        try:
            self.build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def network_faults(self) -> bool:
        return self.mode == "netns"

    @property
    def hosts(self) -> list[str]:
        return [m.ip for m in self.members]

    def node(self, node_id: str) -> LabNode:
        for m in self.members:
            if m.node_id == node_id:
                return m
        raise KeyError(node_id)

    def alias(self, node_id: str, host_node: str) -> LabNode:
        """A node started later in ``host_node``'s namespace, at its address and new ports (the
        ``replace-node`` nemesis): faults that name it act on that namespace and address. Links
        to its new Raft port bypass the delay proxies (those were installed for the ports known
        at start); DROP rules match addresses, so partitions and losses reach it."""
        host = self.node(host_node)
        added = LabNode(node_id, host.ip, host.ns)
        self.members.append(added)
        return added

    def build(self) -> None:
        _install_handlers()
        _live_labs.append(self)
        ids = [f"n{i + 1}" for i in range(self.nodes)]
        reason = "forced (--loopback)" if self.force_loopback else netns_unavailable()
        if reason is not None:
            self.mode, self.fallback_reason = "loopback", reason
            print(
                f"\n*** chaos lab: NETWORK NAMESPACES UNAVAILABLE: {reason}.\n"
                "*** Falling back to loopback: kill, pause and clock faults run; partitions, packet loss,\n"
                "*** one-way drops and delays CANNOT run and are reported as unavailable.\n",
                file=sys.stderr,
                flush=True,
            )
            self.members = [LabNode(i, "127.0.0.1", None) for i in ids]
            return
        self.mode = "netns"
        stale = sweep_stale()
        if stale:
            print(f"chaos lab: removed leftovers of dead runs {', '.join(stale)}", file=sys.stderr, flush=True)
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self._claim_prefix()
        p = self.prefix
        br = f"{p}-br"
        run(["ip", "netns", "add", br])
        run(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
        run(["ip", "-n", br, "link", "set", "br0", "up"])
        run(["ip", "link", "add", f"{p}-h", "type", "veth", "peer", "name", f"{p}-hb"])
        run(["ip", "link", "set", f"{p}-hb", "netns", br])
        run(["ip", "-n", br, "link", "set", f"{p}-hb", "master", "br0", "up"])
        # Choosing a subnet and taking it (the root link's address) under one lock: two runs
        # starting together never pick the same one.
        with open(STATE_DIR / ".subnet.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            net = self._free_subnet()
            self.host_ip = str(net.network_address + HOST_OCTET)
            run(["ip", "addr", "add", f"{self.host_ip}/24", "dev", f"{p}-h"])
        run(["ip", "link", "set", f"{p}-h", "up"])
        for i, node_id in enumerate(ids):
            ns = f"{p}-{node_id}"
            ip = str(net.network_address + 11 + i)
            run(["ip", "netns", "add", ns])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "link", "add", f"{p}-v{i + 1}", "type", "veth", "peer", "name", f"{p}-b{i + 1}"])
            run(["ip", "link", "set", f"{p}-v{i + 1}", "netns", ns])
            run(["ip", "-n", ns, "link", "set", f"{p}-v{i + 1}", "name", "eth0"])
            run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run(["ip", "link", "set", f"{p}-b{i + 1}", "netns", br])
            run(["ip", "-n", br, "link", "set", f"{p}-b{i + 1}", "master", "br0", "up"])
            self._ipt(ns, "-N", CHAIN)
            self._ipt(ns, "-A", "INPUT", "-j", CHAIN)
            self._ipt(ns, "-A", "OUTPUT", "-j", CHAIN)
            self.members.append(LabNode(node_id, ip, ns))

    def _free_subnet(self) -> ipaddress.IPv4Network:
        out = run(["ip", "-4", "-o", "addr", "show"], check=False).stdout
        used = set(re.findall(rf"inet {re.escape(SUBNET_BASE)}\.(\d+)\.", out))
        for k in random.Random(self.prefix).sample(range(256), 256):
            if str(k) not in used:
                return ipaddress.IPv4Network(f"{SUBNET_BASE}.{k}.0/24")
        raise LabError(f"every {SUBNET_BASE}.K.0/24 subnet is in use")

    def _claim_prefix(self) -> None:
        """Make the prefix this run's: its state file, created exclusively, names this process.
        A prefix in use (a state file or a namespace of another run) is drawn again, so a
        collision never makes this run remove another's network."""
        for _ in range(100):
            taken = any(n.startswith(self.prefix + "-") for n in namespaces() + root_links())
            if not taken:
                try:
                    fd = os.open(STATE_DIR / f"{self.prefix}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    pass
                else:
                    with os.fdopen(fd, "w") as f:
                        f.write(json.dumps({"owner": os.getpid()}))
                    self._claimed = True
                    return
            self.prefix = f"wgc{secrets.token_hex(2)}"
        raise LabError("no free run prefix after 100 draws")

    def _ipt(self, ns: str, *args: str, table: str = "filter") -> None:
        run(["ip", "netns", "exec", ns, "iptables", "-w", "-t", table, *args])

    def command_prefix(self, node_id: str) -> list[str]:
        ns = self.node(node_id).ns
        return ["ip", "netns", "exec", ns] if ns else []

    def install_proxies(self, raft_addresses: dict[str, str]) -> None:
        """Send every node's outgoing Raft connections through a proxy (delay 0 until set)."""
        if not self.network_faults:
            return
        self.proxies = LinkProxies(self.seed)
        self.proxies.start()
        for src in self.members:
            assert src.ns is not None
            for j, dst in enumerate(self.members):
                if dst is src:
                    continue
                host, port = raft_addresses[dst.node_id].rsplit(":", 1)
                listen_port = PROXY_PORT_BASE + j + 1
                self.proxies.add(src.node_id, src.ns, ("127.0.0.1", listen_port), dst.node_id, (host, int(port)))
                self._ipt(
                    src.ns,
                    "-A", "OUTPUT", "-p", "tcp", "-d", host, "--dport", port,
                    "-m", "mark", "!", "--mark", str(PROXY_MARK),
                    "-j", "DNAT", "--to-destination", f"127.0.0.1:{listen_port}",
                    table="nat",
                )  # fmt: skip
        for m in self.members:
            # DNAT to 127.0.0.1 from another address: allowed for locally generated packets
            # only with route_localnet (the reply would otherwise be a martian).
            run(["ip", "netns", "exec", m.ns or "", "sysctl", "-q", "-w", "net.ipv4.conf.all.route_localnet=1"])

    # -- faults ----------------------------------------------------------------------------------

    def _need_network(self) -> None:
        if not self.network_faults:
            raise LabError(f"network faults need namespaces ({self.fallback_reason})")

    def drop(self, src: str, dst: str, probability: float | None = None) -> None:
        """Drop what ``src`` sends to ``dst`` (all of it, or at random with ``probability``),
        at ``dst``'s input."""
        self._need_network()
        ns = self.node(dst).ns
        assert ns is not None
        args = ["-A", CHAIN, "-s", self.node(src).ip]
        if probability is not None:
            args += ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.4f}"]
        self._ipt(ns, *args, "-j", "DROP")

    def cut(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Cut each pair both ways."""
        for a, b in pairs:
            self.drop(a, b)
            self.drop(b, a)

    def heal_network(self) -> None:
        """Flush every DROP rule and every delay."""
        if not self.network_faults:
            return
        for m in self.members:
            assert m.ns is not None
            self._ipt(m.ns, "-F", CHAIN)
        if self.proxies is not None:
            self.proxies.clear_delays()

    def rules(self, node_id: str) -> list[str]:
        """The node's CHAOS chain as ``iptables -S`` prints it (tests and the run's report)."""
        ns = self.node(node_id).ns
        if ns is None:
            return []
        out = run(["ip", "netns", "exec", ns, "iptables", "-w", "-S", CHAIN]).stdout
        return [line for line in out.splitlines() if not line.startswith("-N")]

    # -- teardown --------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.proxies is not None:
            self.proxies.close()
        if self._claimed:
            # Processes in the namespaces die with them; on loopback the nodes are the cluster's
            # to stop (it holds their Popen objects; a bare pid could have been reused).
            remove_prefix(self.prefix)
        if self in _live_labs:
            _live_labs.remove(self)


def leftovers(prefix: str) -> dict[str, list[str]]:
    """What still exists of a run (empty lists when it cleaned up); the harness tests use it."""
    return {k: v for k, v in owned(prefix).items() if v}
