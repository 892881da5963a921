"""A rolling upgrade, node by node, from the previous release in its own virtual environment.

For this first release with versioned formats the "previous release" is a copy of this commit
(``git archive HEAD``) with its package version set back to :data:`PREVIOUS_VERSION`, built as a
wheel and installed into a virtual environment of its own (its dependencies come from the dev
environment through a ``.pth`` line, so no registry is needed); the "new release" is the working
tree. The cluster starts on the old one; each node in turn, followers first and the leader last,
is stopped with SIGTERM and started on the new one with the same data directory, while writers
keep writing through the control channel (``RaftNode.submit``, the path a gRPC write takes).
Asserted: every acknowledged write is present at the end, the replicas' digests are equal, and
the term grew by at most one election per restarted node. Once a later release changes a format
(docs/deploy.md, section 7), the previous commit that has it replaces the copy here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import threading
import time
import venv
from pathlib import Path

import psutil
import pytest

from .harness import REPO, Cluster, Node, envelope, missing_targets, wait_for

PREVIOUS_VERSION = "0.0.9"


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="module")
def previous_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The interpreter of a virtual environment holding the previous release (module docstring)."""
    return release_python(tmp_path_factory.mktemp("previous-release"), "HEAD")


def release_python(root: Path, commit: str) -> str:
    """The interpreter of a new virtual environment holding ``commit``'s tree as release
    :data:`PREVIOUS_VERSION` (its dependencies: the dev environment's)."""
    archive = root / "tree.tar"
    _run(["git", "-C", str(REPO), "archive", "--format=tar", "-o", str(archive), commit], root)
    tree = root / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    assert 'version = "0.1.0"' in text
    pyproject.write_text(text.replace('version = "0.1.0"', f'version = "{PREVIOUS_VERSION}"', 1))
    dist = root / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(tree)],
        root,
    )
    (wheel,) = dist.glob(f"waitgraph-{PREVIOUS_VERSION}-*.whl")
    target = root / "venv"
    venv.EnvBuilder(with_pip=False, clear=True).create(target)
    python = target / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        root,
    )
    site = next((target / "lib").glob("python3*/site-packages"))
    dev_site = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "pysyncobj").is_dir())
    (site / "dependencies-from-dev.pth").write_text(f"{dev_site}\n")
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import waitgraph, importlib.metadata as m; print(waitgraph.__file__, m.version('waitgraph'))",
        ],
        capture_output=True,
        text=True,
        cwd=root,  # not the checkout, whose build metadata would answer for the version
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    where, version = probe.stdout.split()
    assert version == PREVIOUS_VERSION and str(target) in where, probe.stdout  # not the working tree
    return str(python)


@pytest.mark.timeout(300)
def test_a_rolling_upgrade_from_the_previous_release_loses_nothing(tmp_path: Path, previous_python: str) -> None:
    cluster = Cluster(tmp_path / "cluster", 3)
    for node in cluster.nodes:
        node.python = previous_python
    try:
        with cluster:
            _upgrade_node_by_node(cluster, previous_python)
    except BaseException:
        print(cluster.logs())
        raise


def _upgrade_node_by_node(cluster: Cluster, previous_python: str) -> None:
    for node in cluster.nodes:  # every node really runs the previous release's interpreter
        assert node.proc is not None and psutil.Process(node.proc.pid).cmdline()[0] == previous_python
    leader = cluster.leader()
    for i in range(20):
        assert leader.submit(envelope(i)).ok
    term_before = leader.status()["term"]
    acknowledged: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(first: int) -> None:
        i, k = first, 0
        while not stop.is_set():
            node = cluster.nodes[k % len(cluster.nodes)]
            try:
                got = node.submit(envelope(i), timeout_s=5) if node.alive() else None
            except OSError:
                got = None
            if got is None or isinstance(got, dict) or not got.ok:
                k += 1  # that node is restarting, or has no leader right now: try another, same write
                time.sleep(0.05)
                continue
            with lock:
                acknowledged.append(i)
            i += 1

    threads = [threading.Thread(target=writer, args=(1_000_000 * (w + 1),), daemon=True) for w in range(2)]
    for t in threads:
        t.start()
    order = [*cluster.followers(leader), leader]  # the leader last: one election at most
    for node in order:
        before = len(acknowledged)
        node.stop()
        node.python = sys.executable  # the new release: the working tree
        node.start()
        _rejoined(cluster, node)
        wait_for(lambda before=before: len(acknowledged) > before + 20, 60, f"writes after upgrading {node.name}")
    stop.set()
    for t in threads:
        t.join(15)
    new_leader = cluster.leader()
    assert all(n.python == sys.executable for n in cluster.nodes)
    assert missing_targets(new_leader, [*range(20), *sorted(acknowledged)]) == []
    cluster.converged_digest(timeout_s=30)
    term_after = new_leader.status()["term"]
    assert term_after - term_before <= len(order), (term_before, term_after)
    assert len(acknowledged) > 60


def _rejoined(cluster: Cluster, node: Node) -> None:
    """The restarted node follows a leader, is connected to every peer and has caught up."""

    def caught_up() -> bool:
        status = node.status()
        others = [n.status()["commit_index"] for n in cluster.nodes if n is not node]
        return (
            status["leader"] is not None
            and all(status["peers_connected"].values())
            and status["applied_index"] >= min(others) - 5
        )

    wait_for(caught_up, 60, f"{node.name} to rejoin")
