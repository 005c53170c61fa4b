"""Fixtures for the Raft integration tests: ``make_cluster(size, ...)`` starts a cluster that is
killed (every pid, even on failure) when the test ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from raft_cluster import RaftCluster


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., RaftCluster]]:
    clusters: list[RaftCluster] = []

    def make(size: int, **kwargs: int) -> RaftCluster:
        cluster = RaftCluster(tmp_path / f"cluster{len(clusters)}", size, **kwargs)
        cluster.tmp.mkdir(parents=True)
        clusters.append(cluster)
        cluster.start_all()
        cluster.wait_serving()
        return cluster

    try:
        yield make
    finally:
        for cluster in clusters:
            cluster.stop_all()
