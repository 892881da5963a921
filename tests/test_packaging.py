"""The wheel, installed as a user would: into a fresh virtual environment, beside the agent stack's
neighbours whose top-level names waitgraph used to take, used from outside the checkout.

One wheel is built from the checkout (``pip wheel .``, a normal non-editable build) and installed
with proto-plus (``proto``, shipped with the google-cloud libraries) and python-statemachine
(``statemachine``). Then, from a directory that is not the checkout:

- the wheel holds ``waitgraph/`` and its dist-info and nothing else, and every module of the
  source tree is in it (package discovery is automatic, so none is ever left out);
- ``waitgraph --help`` runs, and ``waitgraph dev`` starts a local cluster against which the
  README's SDK example runs as written;
- ``import proto`` and ``import statemachine`` are the neighbours' packages;
- each neighbour is uninstalled in turn, and waitgraph still imports whole.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NEIGHBOURS = ("proto-plus", "python-statemachine")

sys.path.insert(0, str(REPO / "scripts"))
from check_layers import modules  # noqa: E402

pytestmark = pytest.mark.timeout(900)


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def readme_sdk_example() -> str:
    """The first ``python`` block of README.md's section for agent authors, as written."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## For agent authors") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "README.md: no python example under 'For agent authors'"
    return match.group(1)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(the wheel, the fresh venv's bin directory, an environment that knows nothing of the checkout)."""
    root = tmp_path_factory.mktemp("packaging")
    # A user's environment: nothing of the checkout, and gRPC's fork handlers as grpc defaults them
    # (the test suite turns them off for itself; `waitgraph serve` must do it on its own).
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "GRPC_ENABLE_FORK_SUPPORT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    dist = root / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)], root, env)
    (wheel,) = dist.glob("waitgraph-*.whl")
    target = root / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(target)
    bin_dir = target / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel), *NEIGHBOURS], root, env)
    away = root / "elsewhere"
    away.mkdir()
    return wheel, bin_dir, env | {"HOME": str(away)}


def _python(bin_dir: Path, env: dict[str, str], code: str) -> str:
    return _run([str(bin_dir / "python"), "-c", code], bin_dir.parent.parent / "elsewhere", env)


def test_the_wheel_holds_waitgraph_only_and_every_module(installed: tuple[Path, Path, dict[str, str]]) -> None:
    wheel, _, _ = installed
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"waitgraph", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}, tops
    in_wheel = {n.removesuffix(".py").replace("/", ".").removesuffix(".__init__") for n in names if n.endswith(".py")}
    missing = sorted(set(modules()) - in_wheel)
    assert not missing, f"modules of the source tree missing from the wheel: {missing}"
    for data in (
        "waitgraph/ops/static/liveview.js",
        "waitgraph/ops/static/prefetch.js",
        "waitgraph/ops/static/vendor/cytoscape.min.js",
        "waitgraph/ops/static/vendor/cytoscape.LICENSE.txt",
        "waitgraph/proto/v1/agent.proto",
        "waitgraph/py.typed",
    ):
        assert data in names, data
    if _front_expected():
        # The native gRPC front, executable, with the licences of what it links, and a wheel
        # tagged for the platform its Linux binary runs on.
        with zipfile.ZipFile(wheel) as zf:
            info = zf.getinfo("waitgraph/front/bin/waitgraph-front")
            assert (info.external_attr >> 16) & 0o111, oct(info.external_attr >> 16)
            assert "golang-google-grpc-dev" in zf.read("waitgraph/front/bin/LICENSES.txt").decode()
        assert "-py3-none-linux_" in wheel.name, wheel.name


def _front_expected() -> bool:
    """The checkout has a built front (scripts/build_front), or CI requires one."""
    return (REPO / "cluster/front/bin/waitgraph-front").is_file() or os.environ.get("WAITGRAPH_FRONT_REQUIRED") == "1"


def test_neighbours_keep_their_names(installed: tuple[Path, Path, dict[str, str]]) -> None:
    _, bin_dir, env = installed
    out = _python(
        bin_dir,
        env,
        "import proto, statemachine, waitgraph\n"
        "print(proto.Message.__module__, statemachine.StateMachine.__module__, waitgraph.__file__)",
    )
    proto_mod, sm_mod, wg_file = out.split()
    assert proto_mod.startswith("proto."), out  # proto-plus's Message, not a waitgraph module
    assert sm_mod.startswith("statemachine."), out  # python-statemachine's StateMachine
    assert "site-packages" in wg_file and str(REPO) not in wg_file, out


def test_cli_and_readme_example_from_the_wheel(installed: tuple[Path, Path, dict[str, str]], tmp_path: Path) -> None:
    _, bin_dir, env = installed
    cwd = tmp_path / "agent"
    cwd.mkdir()
    assert "waitgraph dev" in _run([str(bin_dir / "waitgraph"), "--help"], cwd, env)
    # The command line imports no grpc before `serve` turns its fork handlers off.
    assert (
        _run([str(bin_dir / "python"), "-c", "import sys, waitgraph.cli; print('grpc' in sys.modules)"], cwd, env)
        == "False\n"
    )
    data = tmp_path / "dev"
    log = open(tmp_path / "dev.log", "w+")  # noqa: SIM115 - read back while the process runs
    dev = subprocess.Popen(
        [str(bin_dir / "waitgraph"), "dev", "--data-dir", str(data), "--base-port", "0", "--agents", "b"],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        endpoints = None
        deadline = time.monotonic() + 120
        while endpoints is None and time.monotonic() < deadline:
            assert dev.poll() is None, (tmp_path / "dev.log").read_text()
            m = re.search(r"export WAITGRAPH_ENDPOINTS=(\S+)", (tmp_path / "dev.log").read_text())
            endpoints = m.group(1) if m else None
            time.sleep(0.2)
        assert endpoints is not None, (tmp_path / "dev.log").read_text()
        token = json.loads((data / "credentials.json").read_text())["agents"]["b"]
        (cwd / "agent_b.py").write_text(readme_sdk_example())
        out = _run(
            [str(bin_dir / "python"), "agent_b.py"],
            cwd,
            env | {"WAITGRAPH_ENDPOINTS": endpoints, "WAITGRAPH_AGENT_TOKEN": token},
            timeout=120,
        )
        assert re.fullmatch(r"exec:B holds resource:browser-9 under lease \d+\n", out), out
        # A whole-state read is served by a child the node forks (RaftNode.read_image): it must
        # survive gRPC's threads, which it does only with their fork handlers off.
        admin = ["--endpoints", endpoints, "--token-file", str(data / "admin.token")]
        cycles = _run([str(bin_dir / "waitgraph"), *admin, "cycles", "-o", "json"], cwd, env)
        assert json.loads(cycles)["cycles"] == [], cycles
        digests = json.loads(_run([str(bin_dir / "waitgraph"), *admin, "status", "--digest", "-o", "json"], cwd, env))
        assert len({n["state_digest"] for n in digests["nodes"]}) == 1, digests
        if _front_expected():  # the wheel's own front serves the nodes it starts
            logs = [p.read_text(errors="replace") for p in data.rglob("*.log")]
            assert logs and all("front=native" in text for text in logs), [t[-2000:] for t in logs]
    finally:
        os.killpg(dev.pid, 2)  # Ctrl-C: `waitgraph dev` stops every node it started
        try:
            dev.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, 9)
            dev.wait(10)
        log.close()
    assert "stopped:" in (tmp_path / "dev.log").read_text()


def test_uninstalling_a_neighbour_leaves_waitgraph_whole(installed: tuple[Path, Path, dict[str, str]]) -> None:
    _, bin_dir, env = installed
    check = (
        "import waitgraph, waitgraph.cli, waitgraph.node.server, waitgraph.ops.liveview, waitgraph.dev.demo\n"
        "import waitgraph.proto.v1.agent_pb2, waitgraph.statemachine.machine\n"
        "from waitgraph import Client, SyncClient, DeadlockVictim, EffectOutcome\n"
        "print('whole')"
    )
    for neighbour, name in zip(NEIGHBOURS, ("proto", "statemachine"), strict=True):
        _run([str(bin_dir / "python"), "-m", "pip", "uninstall", "-q", "-y", neighbour], bin_dir, env)
        gone = _python(bin_dir, env, f"import importlib.util; print(importlib.util.find_spec({name!r}))")
        assert gone.strip() == "None", f"{name} still importable after uninstalling {neighbour}: {gone}"
        assert _python(bin_dir, env, check).strip() == "whole"
    assert shutil.which("waitgraph", path=str(bin_dir))


MCP_PROBE = """
import asyncio, sys
from mcp import ClientSession, StdioServerParameters, stdio_client

async def main() -> None:
    params = StdioServerParameters(command=sys.argv[1], args=["mcp", "--agent", "b", "--token-file", sys.argv[2]])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = sorted(t.name for t in (await session.list_tools()).tools)
        print(len(tools), " ".join(tools))

asyncio.run(main())
"""


def test_the_mcp_extra_from_the_wheel(installed: tuple[Path, Path, dict[str, str]], tmp_path: Path) -> None:
    """Without the extra, ``waitgraph mcp`` names it; ``pip install 'waitgraph[mcp]'`` (the wheel's
    extra, from PyPI) makes it an MCP server an MCP client lists the tools of over stdio."""
    wheel, bin_dir, env = installed
    token = tmp_path / "token"
    token.write_text("agent-b-token-0123456789")
    waitgraph = str(bin_dir / "waitgraph")
    if _python(bin_dir, env, "import importlib.util; print(importlib.util.find_spec('mcp') is None)") == "True\n":
        bare = subprocess.run(
            [waitgraph, "mcp", "--agent", "b", "--token-file", str(token)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bare.returncode == 1 and "pip install 'waitgraph[mcp]'" in bare.stderr, bare.stderr
    _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", f"{wheel}[mcp]"], tmp_path, env)
    (tmp_path / "probe.py").write_text(MCP_PROBE)
    out = _run([str(bin_dir / "python"), "probe.py", waitgraph, str(token)], tmp_path, env, timeout=120)
    count, names = out.split(" ", 1)
    assert int(count) == 17 and "lease_acquire" in names and "wait_for" in names, out
