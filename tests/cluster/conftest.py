"""Fixtures for the cluster tests: real node processes on loopback, always cleaned up."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from waitgraph.dev.localcluster import LocalCluster

from .harness import Cluster


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def make_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Cluster]]:
    """Start a cluster of real node processes; every process is killed at teardown, and the
    nodes' logs are printed when the test failed."""
    clusters: list[Cluster] = []

    def make(size: int = 3, extra_args: list[str] | None = None) -> Cluster:
        cluster = Cluster(tmp_path / f"cluster{len(clusters)}", size, extra_args)
        clusters.append(cluster)
        return cluster.__enter__()

    try:
        yield make
    finally:
        failed = getattr(request.node, "rep_call", None)
        for cluster in clusters:
            cluster.close()
            if failed is not None and failed.failed:
                print(cluster.logs())


@pytest.fixture
def local_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., LocalCluster]]:
    """Start a :class:`LocalCluster` (``waitgraph dev``'s real processes) and wait for its leader;
    every node is stopped at teardown, and the nodes' log tails are printed when the test failed."""
    started: list[LocalCluster] = []

    def make(name: str, nodes: int = 3, mode: str | None = "shadow", **kw: Any) -> LocalCluster:
        lc = LocalCluster(root=tmp_path / name, nodes=nodes, mode=mode, **kw)
        started.append(lc)
        lc.start()
        lc.wait_for_leader(30)
        return lc

    try:
        yield make
    finally:
        failed = getattr(request.node, "rep_call", None)
        for lc in started:
            if failed is not None and failed.failed:
                print(lc.logs(4000))
            lc.close()
