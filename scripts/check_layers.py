"""Keep the package's roles apart (docs/architecture.md): who may import whom, no private names
across modules, and no import circles.

Every import name lives under ``waitgraph`` (pyproject.toml maps the folders): ``cluster/`` is
``waitgraph``, ``statemachine/`` is ``waitgraph.statemachine``, ``proto/waitgraph/`` is
``waitgraph.proto``. Each module belongs to one role, the first part after ``waitgraph``:

    statemachine  the deterministic core        imports nothing outside itself
    proto         generated waitgraph.v1 code   nothing of ours
    wire          the shared wire contract      statemachine, proto
    sdk           the agents' client            wire, statemachine, proto
    node          one cluster node              wire, statemachine, proto
    ops           the operators' tools          sdk, node, wire, statemachine, proto
    mcp           the MCP server                sdk, statemachine, root (a client, like an agent)
    dev           local development             every role
    (root)        waitgraph/__init__.py         sdk, statemachine: the agent author's names
    cli           the console script            ops, dev, mcp: where the roles meet

Parses every import (top-level, inside functions, under TYPE_CHECKING: not a text search) and
fails, naming file and line, on:

- an import across roles that the table does not allow;
- ``from X import _name`` or ``X._name`` where X is another of our modules;
- an import circle among the modules of one package (``waitgraph.statemachine``, ``waitgraph.sdk``,
  ... : every package is checked);
- a top-level ``cluster``, ``statemachine`` or ``proto`` import anywhere in the repository (tests
  and scripts included): run from a checkout those names resolve to the folders and load a second
  copy of every module;
- pysyncobj outside the Raft package (:data:`RAFT`, whose face is its ``__init__``): no other module
  of the package imports ``pysyncobj`` or one of the Raft package's private modules, names a mangled
  pysyncobj attribute (``_SyncObj__x``, as an attribute or a string), or reaches the SyncObj through a
  node (``node.obj``, ``node._obj``, ``node._running()``); no script imports ``pysyncobj`` but the raw
  pysyncobj anchor benchmark (:data:`PYSYNCOBJ_SCRIPTS`). Tests, and benchmarks that time the Raft
  layer from inside, may import its private modules: they white-box it.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"cluster": "waitgraph", "statemachine": "waitgraph.statemachine", "proto/waitgraph": "waitgraph.proto"}
GENERATED = ("_pb2.py", "_pb2_grpc.py")

ALLOWED: dict[str, frozenset[str]] = {
    "statemachine": frozenset({"statemachine"}),
    "proto": frozenset({"proto"}),
    "wire": frozenset({"wire", "statemachine", "proto"}),
    "sdk": frozenset({"sdk", "wire", "statemachine", "proto"}),
    "node": frozenset({"node", "wire", "statemachine", "proto"}),
    "ops": frozenset({"ops", "sdk", "node", "wire", "statemachine", "proto"}),
    "dev": frozenset({"dev", "ops", "node", "sdk", "wire", "statemachine", "proto", "root"}),
    "root": frozenset({"root", "sdk", "statemachine"}),
    "mcp": frozenset({"mcp", "sdk", "statemachine", "root"}),
    "cli": frozenset({"cli", "ops", "dev", "mcp"}),
}
FOLDER_NAMES = frozenset({"cluster", "statemachine", "proto"})
RAFT = "waitgraph.node.raft"
"""The one package that touches pysyncobj (cluster/node/raft/_pysyncobj.py imports it)."""
PYSYNCOBJ_SCRIPTS = frozenset({"scripts/bench_raw_raft.py"})
"""Scripts that may import pysyncobj: the raw pysyncobj benchmark, the anchor the wrapper is compared with."""
MANGLED = ("_SyncObj__", "_TcpConnection__", "_TcpServer__")
"""Prefixes of pysyncobj's private names as Python mangles them."""
SYNCOBJ_HANDLES = frozenset({"obj", "_obj", "_running"})
"""Attributes through which a node (any name ending in ``node``) would hand out its SyncObj."""


def _load_scc() -> ModuleType:
    """The core's SCC module, loaded from its file alone: importing ``waitgraph.statemachine``
    would run the very package whose import circles this script looks for."""
    spec = importlib.util.spec_from_file_location("_waitgraph_scc", ROOT / "statemachine" / "scc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_scc = _load_scc()


def modules() -> dict[str, Path]:
    """Module name -> file, for every module of the package."""
    found: dict[str, Path] = {}
    for folder, package in SOURCES.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if any(p.startswith(".") for p in rel.parts) or path.name.endswith(GENERATED):
                continue
            found[".".join([package, *parts])] = path
    return found


def role(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    return "cli" if parts[1] in ("cli", "__main__") else parts[1]


def resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (relative imports resolved against ``module``)."""
    if node.level == 0:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports(module: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str, str | None]]:
    """(line, imported module, imported name or None) for every import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module, path, node)
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.append((node.lineno, sub, None) if sub in known else (node.lineno, target, a.name))
    return found


def private_attributes(path: Path, aliases: dict[str, str]) -> list[tuple[int, str]]:
    """``alias._name`` where ``alias`` is one of our modules imported into this file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (n.lineno, f"{aliases[n.value.id]}.{n.attr}")
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id in aliases
        and n.attr.startswith("_")
        and not n.attr.startswith("__")
    ]


def module_aliases(module: str, path: Path, known: dict[str, Path]) -> dict[str, str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = resolve(module, path, node)
            for a in node.names:
                if f"{target}.{a.name}" in known:
                    aliases[a.asname or a.name] = f"{target}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in known:
                    aliases[a.asname] = a.name
    return aliases


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, sorted."""
    return [comp for comp in _scc.cycles(graph, graph) if len(comp) > 1]


def package_of(module: str, known: dict[str, Path]) -> str:
    return module if known[module].name == "__init__.py" else module.rpartition(".")[0]


def owner(target: str, known: dict[str, Path]) -> str:
    """The longest known module that ``target`` is or lies in (at least ``waitgraph`` itself)."""
    while target not in known and "." in target:
        target = target.rpartition(".")[0]
    return target


def check_package(known: dict[str, Path]) -> list[str]:
    problems: list[str] = []
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in sorted(known.items()):
        rel = path.relative_to(ROOT)
        mine = role(module)
        for line, target, name in imports(module, path, known):
            top = target.split(".")[0]
            if top in FOLDER_NAMES:
                problems.append(f"{rel}:{line}: imports {target}: use waitgraph.* (the folders are not packages)")
                continue
            if top != "waitgraph":
                continue
            dest = owner(target, known)
            theirs = role(dest)
            if theirs not in ALLOWED[mine]:
                problems.append(f"{rel}:{line}: {mine} may not import {theirs} ({dest})")
            if name is not None and name.startswith("_") and dest != module:
                problems.append(f"{rel}:{line}: imports the private name {name} from {dest}")
            if dest != module and package_of(dest, known) == package_of(module, known):
                graph[module].add(dest)
        for line, what in private_attributes(path, module_aliases(module, path, known)):
            problems.append(f"{rel}:{line}: uses the private name {what}")
    for comp in circles(graph):
        problems.append("import circle: " + " -> ".join(comp))
    return problems


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every absolute import, ``from X import y`` as ``X.y``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
    return found


def _ends_in_node(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.lower().endswith("node")


def check_raft_fence(known: dict[str, Path]) -> list[str]:
    """Only :data:`RAFT` touches pysyncobj (module docstring); scripts import it only in the anchor."""
    problems: list[str] = []
    for module, path in sorted(known.items()):
        if module == RAFT or module.startswith(RAFT + "."):
            continue
        rel = path.relative_to(ROOT)
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in _imported_names(tree):
            if name.split(".")[0] == "pysyncobj":
                problems.append(f"{rel}:{line}: imports {name}: pysyncobj belongs to {RAFT}")
            elif name.startswith(RAFT + "._"):
                problems.append(f"{rel}:{line}: imports {name}: only {RAFT}'s face is public")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith(MANGLED):
                problems.append(f"{rel}:{node.lineno}: uses pysyncobj's private name {node.attr}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(MANGLED):
                problems.append(f"{rel}:{node.lineno}: names pysyncobj's private name {node.value}")
            elif isinstance(node, ast.Attribute) and node.attr in SYNCOBJ_HANDLES and _ends_in_node(node.value):
                problems.append(f"{rel}:{node.lineno}: reaches the SyncObj through a node (.{node.attr})")
    for path in _outside_files():
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith("scripts/") or rel in PYSYNCOBJ_SCRIPTS:
            continue
        for line, name in _imported_names(ast.parse(path.read_text(), filename=str(path))):
            if name.split(".")[0] == "pysyncobj":
                problems.append(f"{rel}:{line}: imports {name}: pysyncobj belongs to {RAFT} (and the anchor benchmark)")
    return problems


def _outside_files() -> list[Path]:
    return sorted((ROOT / "tests").rglob("*.py")) + sorted(
        p
        for p in (ROOT / "scripts").iterdir()
        if p.suffix == ".py" or (p.is_file() and p.read_bytes()[:20].startswith(b"#!/usr/bin/env python"))
    )


def check_outside() -> list[str]:
    """Tests and scripts import waitgraph.*, never the folders."""
    problems = []
    for path in _outside_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in FOLDER_NAMES:
                    problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {name}: use waitgraph.*")
    return problems


def main() -> int:
    known = modules()
    problems = check_package(known) + check_outside() + check_raft_fence(known)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
