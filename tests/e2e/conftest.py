"""One real local cluster (3 controllers + 3 brokers, short timeouts) shared by the e2e CLI and README
tests of a session: each test uses its own topics and groups, so they do not interfere, and CI starts
one cluster instead of one per module. Stopped by pid at the end, even on failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster

# Consumer groups form at once (Kafka waits 3 s for more members of a new group) and accept the
# short session timeouts the tests use.
E2E_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


@pytest.fixture(scope="session")
def e2e_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("e2e-cluster")), **E2E_OVERRIDES) as bc:
        yield bc
