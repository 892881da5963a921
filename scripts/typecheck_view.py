"""Lay out ``build/typecheck/waitgraph``: the package as it is installed, made of symlinks into the
checkout, for mypy.

pyproject.toml maps the folders onto the ``waitgraph`` names (``cluster/`` is ``waitgraph``,
``statemachine/`` is ``waitgraph.statemachine``, ``proto/waitgraph/`` is ``waitgraph.proto``); the
editable install resolves them with an import hook, which mypy cannot follow. This view gives mypy
the same names with the real files behind them. Rebuilt on every run (cheap: a few dozen links),
so a new module is never missed.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEW = ROOT / "build" / "typecheck"


def build(view: Path = VIEW) -> Path:
    package = view / "waitgraph"
    if view.exists():
        shutil.rmtree(view)
    package.mkdir(parents=True)
    for entry in sorted((ROOT / "cluster").iterdir()):
        if entry.name != "__pycache__":
            os.symlink(entry, package / entry.name)
    os.symlink(ROOT / "statemachine", package / "statemachine")
    os.symlink(ROOT / "proto" / "waitgraph", package / "proto")
    return package


if __name__ == "__main__":
    print(build())
    sys.exit(0)
