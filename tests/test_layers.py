"""scripts/check_layers.py passes on the tree and fails on each kind of violation planted in a copy."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import check_layers  # noqa: E402


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for folder in ("cluster", "statemachine", "proto"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "tests").mkdir()
    (tmp_path / "scripts").mkdir()
    monkeypatch.setattr(check_layers, "ROOT", tmp_path)
    return tmp_path


def problems() -> list[str]:
    known = check_layers.modules()
    return check_layers.check_package(known) + check_layers.check_outside() + check_layers.check_raft_fence(known)


def plant(path: Path, line: str) -> None:
    path.write_text(path.read_text() + "\n" + line + "\n")


def test_the_tree_keeps_its_layers() -> None:
    assert check_layers.main() == 0


def test_the_copy_is_clean(tree: Path) -> None:
    assert problems() == []
    assert "waitgraph.statemachine.machine" in check_layers.modules()
    assert "waitgraph.proto.v1" in check_layers.modules()


@pytest.mark.parametrize(
    ("file", "line", "expected"),
    [
        ("cluster/sdk/session.py", "from waitgraph.node import raft", "sdk may not import node (waitgraph.node.raft)"),
        ("cluster/node/loops.py", "from waitgraph.ops import render", "node may not import ops (waitgraph.ops.render)"),
        ("cluster/node/loops.py", "    from waitgraph.sdk import Client", "node may not import sdk"),
        ("cluster/wire/convert.py", "import waitgraph.node.auth", "wire may not import node (waitgraph.node.auth)"),
        ("cluster/ops/render.py", "from waitgraph.dev import localcluster", "ops may not import dev"),
        ("statemachine/ids.py", "from waitgraph.wire import convert", "statemachine may not import wire"),
        ("statemachine/ids.py", "from waitgraph import Client", "statemachine may not import root"),
        ("statemachine/cancel.py", "from .machine import _dispatch", "imports the private name _dispatch"),
        (
            "cluster/ops/cli.py",
            "from waitgraph.sdk.connection import _ItemFailed",
            "imports the private name _ItemFailed",
        ),
        ("statemachine/recovery.py", "from . import machine as M\nM._dispatch", "uses the private name"),
        ("statemachine/enums.py", "from . import machine", "import circle: "),
        ("cluster/sdk/connection.py", "from .session import Session", "import circle: waitgraph.sdk.connection"),
        ("cluster/node/raft/_apply.py", "from statemachine import codec", "imports statemachine: use waitgraph.*"),
        ("tests/test_x.py", "import cluster.node.raft", "tests/test_x.py:2: imports cluster.node.raft"),
        ("cluster/node/server.py", "import pysyncobj", "imports pysyncobj: pysyncobj belongs to waitgraph.node.raft"),
        (
            "cluster/node/loops.py",
            "from waitgraph.node.raft._syncobj import WaitgraphSyncObj",
            "imports waitgraph.node.raft._syncobj.WaitgraphSyncObj: only waitgraph.node.raft's face is public",
        ),
        ("cluster/ops/liveweb.py", "x = n._SyncObj__raftLog", "uses pysyncobj's private name _SyncObj__raftLog"),
        ("cluster/node/service.py", "getattr(n, '_SyncObj__conf')", "names pysyncobj's private name _SyncObj__conf"),
        ("cluster/node/server.py", "term = self.node.obj.raftCurrentTerm", "reaches the SyncObj through a node (.obj)"),
        ("scripts/bench_x.py", "from pysyncobj import SyncObj", "scripts/bench_x.py:2: imports pysyncobj.SyncObj"),
    ],
)
def test_a_planted_violation_is_caught(tree: Path, file: str, line: str, expected: str) -> None:
    path = tree / file
    if not path.exists():
        path.write_text("")
    plant(path, line)
    found = problems()
    assert any(expected in p for p in found), found
    assert check_layers.main() == 1


def test_the_lazy_root_names_agree_with_their_type_checking_imports() -> None:
    """``waitgraph`` imports its SDK on first use (so `waitgraph serve` can turn gRPC's fork
    handlers off before grpc loads); the names type checkers see and the lazy map are one list."""
    import ast
    import importlib

    import waitgraph

    tree = ast.parse((REPO / "cluster" / "__init__.py").read_text())
    (guard,) = [n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"]
    typed = {(node.module, a.name) for node in guard.body if isinstance(node, ast.ImportFrom) for a in node.names}
    lazy = waitgraph._LAZY
    assert {name for _, name in typed} == set(lazy) == set(waitgraph.__all__)
    for module, name in typed:
        assert lazy[name] == module, name
        assert getattr(waitgraph, name) is getattr(importlib.import_module(module), name)
