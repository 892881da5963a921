"""Keep statemachine/ deterministic (docs/design.md §1): no clock, randomness, I/O or concurrency.

Parses every module's imports (not a text search), so ``from time import monotonic`` and
``import asyncio as aio`` are caught alike. Exits non-zero and names each offending import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

BANNED = {
    "time", "datetime", "random", "secrets", "uuid", "os", "sys", "io", "socket", "subprocess",
    "threading", "multiprocessing", "concurrent", "asyncio", "logging", "structlog", "grpc",
    "pysyncobj", "cluster", "proto", "pathlib", "tempfile", "shutil", "signal", "select",
}  # fmt: skip


def offending(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            if name.split(".")[0] in BANNED:
                found.append(f"{path}:{node.lineno}: imports {name}")
    return found


def main(root: str = "statemachine") -> int:
    problems = [p for f in sorted(Path(root).rglob("*.py")) for p in offending(f)]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
