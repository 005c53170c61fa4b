"""The README's "From Python" example, run as written against a real cluster.

The addresses in the README (127.0.0.1:9093 for a controller, 127.0.0.1:9092 for a broker) are
replaced by the test cluster's (a controller's gRPC address; the brokers' Kafka listeners); nothing else
is changed, so a README that drifts from the API fails here. The example creates ``orders`` over
gRPC, produces one record with confluent-kafka and reads it back in group ``billing``, committing it:
the test checks that commit with Kafka's Admin API (OffsetFetch).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pykraft.cli_kafka import KafkaGroupAdmin
from tests.integration.broker.broker_cluster import BrokerCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120


def readme_python_example() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"From Python:\n\n```python\n(.*?)```", text, re.S)
    assert match, "README.md has no ```python block after 'From Python:'"
    return match.group(1)


def test_readme_python_example_runs(e2e_cluster: BrokerCluster) -> None:
    cluster = e2e_cluster.cluster
    code = readme_python_example()
    assert "127.0.0.1:9093" in code and "127.0.0.1:9092" in code
    code = code.replace("127.0.0.1:9093", cluster.controller_addresses)
    code = code.replace("127.0.0.1:9092", cluster.kafka_bootstrap)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S,
                            cwd=ROOT, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "b'alice' b'42'" in result.stdout, result.stdout
    with KafkaGroupAdmin(cluster.kafka_bootstrap) as admin:
        committed = admin.list_consumer_group_offsets("billing")
        assert sum(committed.values()) == 1
        assert {tp.topic for tp in committed} == {"orders"}
