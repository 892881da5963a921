"""Every ```python block of README.md, docs/sdk.md, docs/mcp.md, docs/langgraph.md and
docs/observability.md runs as written against a local cluster.

The blocks are whole programs. Each runs in its own process, in document order (README first), on
one ``waitgraph dev`` (three real ``waitgraph serve`` processes on loopback, auto mode, agents a, b
and c), after the ``export`` line ``waitgraph dev`` printed, run verbatim as docs/sdk.md tells a
reader to: ``WAITGRAPH_ENDPOINTS``, ``WAITGRAPH_TOKEN`` (admin), ``WAITGRAPH_CREDENTIALS`` (its
``credentials.json``) and ``WAITGRAPH_AGENT_TOKEN`` (agent b's). A block must exit 0; when the document shows
its output (the first ```text block after it, before the next example or heading), stdout must
match it, ``...`` standing for anything.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.dev_process import Dev

REPO = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/sdk.md", "docs/mcp.md", "docs/langgraph.md", "docs/observability.md")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)

pytestmark = pytest.mark.timeout(600)


@dataclass(frozen=True, slots=True)
class Example:
    doc: str
    line: int
    code: str
    expected: str | None

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def examples(doc: str) -> list[Example]:
    """The python blocks of ``doc`` with the output the document shows for each, if any."""
    text = (REPO / doc).read_text()
    found: list[Example] = []
    open_since: int | None = None  # where the last python block ended, while it has no output yet
    for m in FENCE.finditer(text):
        lang, body = m.group(1), m.group(2)
        if lang == "python":
            found.append(Example(doc, text.count("\n", 0, m.start()) + 1, body, None))
            open_since = m.end()
        elif lang == "text" and open_since is not None:
            if "\n## " not in text[open_since : m.start()]:
                last = found[-1]
                found[-1] = Example(last.doc, last.line, last.code, body)
            open_since = None
    return found


def matches(expected: str, output: str) -> bool:
    pattern = ".*?".join(re.escape(part) for part in expected.strip().split("..."))
    return re.fullmatch(pattern, output.strip(), re.S) is not None


def test_the_documents_have_examples_with_output() -> None:
    readme, sdk = examples("README.md"), examples("docs/sdk.md")
    assert readme and len(sdk) >= 4, (readme, sdk)
    # issue 40: the approval cycle, the lease/artifact cycle and the tool middleware, each checked
    langgraph = examples("docs/langgraph.md")
    assert len(langgraph) == 3 and all(e.expected is not None for e in langgraph), langgraph
    assert sum(e.expected is not None for e in sdk) >= 4
    assert matches("epoch ...: 0 open", "epoch 3: 0 open") and not matches("lease 1", "lease 2")


FIRST_HOUR: dict[str, tuple[str, str | None]] = {
    # what an agent does: (the call an example makes, what that example's checked output shows of it)
    "create": ("s.execution(", None),
    "hold": ("ex.holding(", "holds the browser"),
    "wait": ("ex.waiting_for(", "writer: target_produced"),
    "record a side effect": ("ex.record_side_effect(", "side effects True"),
    "be chosen as a victim": ("except DeadlockVictim", "reviewer: victim"),
    "retry": ("ex.retry()", "generation 2"),
    "vote": ("voter=True", "c voted: [True]"),
    "read its run's convergence": (".convergence(", "converged True"),
}


def test_the_sdk_page_alone_covers_an_agents_first_hour() -> None:
    """Issue 17: a program written only from docs/sdk.md can create, hold, wait, record a side
    effect, be chosen as a victim, retry, vote and read its run's convergence, without protobuf.
    Each verb is in an example whose output the page shows (so the test below runs and checks it)."""
    sdk = examples("docs/sdk.md")
    missing = [
        verb
        for verb, (call, shown) in FIRST_HOUR.items()
        if not any(call in e.code and e.expected is not None and (shown is None or shown in e.expected) for e in sdk)
    ]
    assert not missing, f"no checked docs/sdk.md example does: {missing}"
    for e in sdk:
        for raw in ("_pb2", "protobuf", "transport.call", "waitgraph.statemachine", "waitgraph.proto"):
            assert raw not in e.code, f"{e} reaches past the SDK: {raw}"


@pytest.fixture(scope="module")
def dev_export(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``waitgraph dev`` started as a reader starts it, and the ``export`` line it printed."""
    dev = Dev("--data-dir", str(tmp_path_factory.mktemp("docs-cluster")), "--base-port", "0", "--mode", "auto")
    try:
        yield dev.until("export WAITGRAPH_ENDPOINTS=", 90)
    finally:
        dev.kill_all(dev.children())


def test_every_python_block_runs_as_written(dev_export: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAITGRAPH_")}
    for name in ("WAITGRAPH_ENDPOINTS", "WAITGRAPH_AGENT_TOKEN", "WAITGRAPH_TOKEN", "WAITGRAPH_CREDENTIALS"):
        assert f" {name}=" in dev_export, f"`waitgraph dev` does not export {name}: {dev_export}"
    ran = []
    for doc in DOCS:
        for i, example in enumerate(examples(doc)):
            program = tmp_path / f"{Path(doc).stem}_{i}.py"
            program.write_text(example.code)
            # The export line exactly as `waitgraph dev` printed it, then the program.
            command = f"{dev_export}\nexec {shlex.quote(sys.executable)} {shlex.quote(str(program))}"
            proc = subprocess.run(
                ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
            )
            assert proc.returncode == 0, f"{example} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            if example.expected is not None:
                assert matches(example.expected, proc.stdout), (
                    f"{example} printed:\n{proc.stdout}\nthe document shows:\n{example.expected}\n{proc.stderr}"
                )
            ran.append(str(example))
    assert len(ran) >= 5, ran
