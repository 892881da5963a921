"""The project's PEP 517 build backend: setuptools', with the native gRPC front built first.

``pip wheel .`` / ``pip install .`` run scripts/build_front before setuptools packs the tree, so
a wheel built where Debian's Go toolchain and gRPC sources are installed carries
``waitgraph/front/bin/waitgraph-front`` (and the licences of what it links), and is tagged for
this platform, since it holds a Linux executable. Where they are not installed the wheel is pure
Python, as before, and its nodes serve gRPC from Python (``waitgraph serve --grpc-front auto``
says so in its log).
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every other hook is setuptools' own

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / "cluster" / "front" / "bin" / "waitgraph-front"
NOT_INSTALLED = 3
"""scripts/build_front's exit status when Go or Debian's gRPC sources are missing."""


def _build_front() -> bool:
    """Build the front if its sources changed; True when the tree then holds one."""
    done = subprocess.run([str(ROOT / "scripts" / "build_front"), "--if-stale"], cwd=ROOT)
    if done.returncode == NOT_INSTALLED:
        print("build_backend: no Go toolchain: the wheel has no native gRPC front", file=sys.stderr)
    elif done.returncode != 0:
        raise RuntimeError(f"scripts/build_front failed (exit {done.returncode})")
    return BINARY.is_file()


def build_wheel(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    settings = dict(config_settings or {})
    if _build_front():
        # A Linux executable inside: the wheel installs on this platform only.
        plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        options = settings.get("--build-option", [])
        options = [options] if isinstance(options, str) else list(options)
        settings["--build-option"] = [*options, "--plat-name", plat]
    return _setuptools.build_wheel(wheel_directory, settings, metadata_directory)


def build_editable(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    _build_front()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
