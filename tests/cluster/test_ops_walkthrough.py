"""docs/operations.md is what scripts/ops_walkthrough prints: the script runs every command of the
guide against a real local cluster and checks each step; here it runs again, and the committed
guide must have the same commands and the same text around them (only the captured output, with
its times, ports and ids, may differ from run to run)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .harness import REPO

_CONSOLE = re.compile(r"```console\n(.*?)```\n", re.S)


def commands(doc: str) -> list[str]:
    return [line[2:] for block in _CONSOLE.findall(doc) for line in block.splitlines() if line.startswith("$ ")]


def prose(doc: str) -> str:
    return _CONSOLE.sub("```console\n```\n", doc)


def test_the_committed_guide_lists_its_commands_and_links() -> None:
    doc = (REPO / "docs" / "operations.md").read_text()
    cmds = commands(doc)
    assert cmds[0] == "waitgraph dev --mode shadow"
    for needed in ("waitgraph explain d1", "waitgraph mode auto-safe", "waitgraph mode auto", "waitgraph mode shadow"):
        assert needed in cmds
    assert any(c.startswith("waitgraph freeze") and c.endswith("--wait") for c in cmds)
    assert any(c.startswith("waitgraph export -o json > pending.json") for c in cmds)
    assert "docs/operations.md" in (REPO / "README.md").read_text()
    assert "operations.md" in (REPO / "docs" / "cli.md").read_text()


@pytest.mark.timeout(600)
def test_the_guide_is_what_its_commands_print(tmp_path: Path) -> None:
    out = tmp_path / "operations.md"
    proc = subprocess.run(
        [sys.executable, "scripts/ops_walkthrough.py", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    generated = out.read_text()
    committed = (REPO / "docs" / "operations.md").read_text()
    assert commands(generated) == commands(committed)
    assert prose(generated) == prose(committed), "docs/operations.md was edited by hand: run scripts/ops_walkthrough"
