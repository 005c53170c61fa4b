"""Fixtures for the metadata-quorum integration tests: ``controller_cluster(session_timeout_ms)``
starts three controller processes that are killed (every pid, even on failure) when the test ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from metadata_cluster import ControllerCluster


@pytest.fixture
def controller_cluster(tmp_path: Path) -> Iterator[Callable[..., ControllerCluster]]:
    clusters: list[ControllerCluster] = []

    def make(session_timeout_ms: int = 60_000, extra_args: tuple[str, ...] = ()) -> ControllerCluster:
        cluster = ControllerCluster(
            tmp_path / f"cluster{len(clusters)}", session_timeout_ms, extra_args=extra_args
        )
        cluster.tmp.mkdir()
        clusters.append(cluster)
        cluster.start_all()
        cluster.leader()
        return cluster

    try:
        yield make
    finally:
        for cluster in clusters:
            cluster.stop_all()
