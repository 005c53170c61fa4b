"""Fixtures of the Kafka client compatibility suite (issue 15 §4).

Each test module gets its own real cluster (3 controllers + 3 brokers on 127.0.0.1, the broker tests'
short protocol timeouts, groups that form at once), started by ``running_cluster`` and stopped by pid
when the module ends, even on failure. The clients are the ecosystem's own, at the versions pinned in
pyproject's test extras (confluent-kafka/librdkafka, kafka-python, aiokafka) and Debian's ``kcat``,
which ``./dev test`` installs when it is missing; without it the kcat tests skip and say why.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster

# Consumer groups form at once (Kafka waits 3 s for more members of a new group) and accept the
# clients' short session timeouts used here.
COMPAT_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


@pytest.fixture(scope="module")
def compat_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("compat")), **COMPAT_OVERRIDES) as bc:
        yield bc


@pytest.fixture(scope="session")
def kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.skip("kcat is not installed and ./dev test could not install it (needs root and "
                    "apt-get: apt-get install -y kcat)")  # fmt: skip
    return path
