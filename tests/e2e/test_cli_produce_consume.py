"""``pykraft produce`` / ``pykraft consume`` as a new user runs them, against a real local cluster.

Issue 5 §4: lines from stdin become records (keys split at --key-separator, compression, acks=all);
the console consumer prints them back from the beginning, with offsets, and stops at --max-messages.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.broker.broker_cluster import BrokerCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60


@pytest.fixture
def cluster(e2e_cluster: BrokerCluster) -> BrokerCluster:
    return e2e_cluster


def pykraft(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "pykraft.cli", *args],
        check=False,
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT_S,
        cwd=ROOT,
    )


def test_produce_then_consume_round_trip(cluster: BrokerCluster) -> None:
    cluster.create_topic("cli", partitions=2, min_insync_replicas="2")
    bootstrap = cluster.cluster.bootstrap
    lines = b"".join(b"k%d:line %d\n" % (i % 3, i) for i in range(20))
    produced = pykraft("produce", "--bootstrap", bootstrap, "--topic", "cli", "--key-separator", ":",
                       "--acks", "all", "--compression", "zstd", stdin=lines)  # fmt: skip
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = pykraft("consume", "--bootstrap", bootstrap, "--topic", "cli", "--from-beginning",
                       "--max-messages", "20", "--print-offsets", "--print-key",
                       "--key-separator", ":")  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr.decode()
    rows = [line.split("\t", 1) for line in consumed.stdout.decode().splitlines()]
    assert sorted(text for _, text in rows) == sorted(line.decode() for line in lines.splitlines())
    for key in ("k0", "k1", "k2"):  # one key, one partition, in send order
        mine = [(position, text) for position, text in rows if text.startswith(key + ":")]
        assert len({position.split(":")[0] for position, _ in mine}) == 1
        numbers = [int(text.rsplit(" ", 1)[1]) for _, text in mine]
        assert numbers == sorted(numbers)
    assert b"Processed a total of 20 messages" in consumed.stderr


def test_consume_one_partition_from_an_offset(cluster: BrokerCluster) -> None:
    cluster.create_topic("cli-offset", partitions=1)
    bootstrap = cluster.cluster.bootstrap
    assert (
        pykraft("produce", "--bootstrap", bootstrap, "--topic", "cli-offset", stdin=b"a\nb\nc\n").returncode
        == 0
    )
    consumed = pykraft("consume", "--bootstrap", bootstrap, "--topic", "cli-offset", "--partition", "0",
                       "--offset", "1", "--max-messages", "2")  # fmt: skip
    assert (consumed.returncode, consumed.stdout) == (0, b"b\nc\n")


def test_unknown_topic_is_reported(cluster: BrokerCluster) -> None:
    produced = pykraft("produce", "--bootstrap", cluster.cluster.bootstrap, "--topic", "missing",
                       "--timeout-ms", "1000", stdin=b"x\n")  # fmt: skip
    assert produced.returncode == 1
    assert b"UNKNOWN_TOPIC_OR_PARTITION" in produced.stderr
    assert b"Traceback" not in produced.stderr
