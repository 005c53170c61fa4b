"""``pykraft produce`` / ``pykraft consume`` as a new user runs them, against a real local cluster.

Issue 5 §4: lines from stdin become records (keys split at --key-separator, compression, acks=all);
the console consumer prints them back from the beginning, with offsets, and stops at --max-messages.
Issue 16 §3: both run confluent-kafka against the brokers' Kafka listeners (``--bootstrap`` is the
Kafka bootstrap); a record the broker refuses is reported with its Kafka error; ``consume --group``
commits each printed batch, so a member killed mid-run is followed by one that resumes at the
committed offsets (nothing skipped, at most the unacknowledged batch printed again).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.broker.broker_cluster import BrokerCluster, wait_for

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
    bootstrap = cluster.cluster.kafka_bootstrap
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
    bootstrap = cluster.cluster.kafka_bootstrap
    assert (
        pykraft("produce", "--bootstrap", bootstrap, "--topic", "cli-offset", stdin=b"a\nb\nc\n").returncode
        == 0
    )
    consumed = pykraft("consume", "--bootstrap", bootstrap, "--topic", "cli-offset", "--partition", "0",
                       "--offset", "1", "--max-messages", "2")  # fmt: skip
    assert (consumed.returncode, consumed.stdout) == (0, b"b\nc\n")


def test_unknown_topic_is_reported(cluster: BrokerCluster) -> None:
    produced = pykraft("produce", "--bootstrap", cluster.cluster.kafka_bootstrap, "--topic", "missing",
                       "--timeout-ms", "1000", stdin=b"x\n")  # fmt: skip
    assert produced.returncode == 1
    assert b"UNKNOWN_TOPIC_OR_PARTITION" in produced.stderr
    assert b"Traceback" not in produced.stderr


def test_a_record_the_broker_refuses_is_reported_with_its_kafka_error(cluster: BrokerCluster) -> None:
    cluster.create_topic("cli-small", partitions=1, **{"max.message.bytes": "200"})
    produced = pykraft("produce", "--bootstrap", cluster.cluster.kafka_bootstrap, "--topic", "cli-small",
                       "--linger-ms", "0", "--timeout-ms", "20000", stdin=b"x" * 500 + b"\n")  # fmt: skip
    assert produced.returncode == 1, produced.stderr.decode()
    assert b"line 1: MESSAGE_TOO_LARGE (10)" in produced.stderr
    assert b"1 record(s) failed, 0 acknowledged" in produced.stderr
    assert b"Traceback" not in produced.stderr
    fine = pykraft("produce", "--bootstrap", cluster.cluster.kafka_bootstrap, "--topic", "cli-small",
                   stdin=b"short\n")  # fmt: skip
    assert fine.returncode == 0, fine.stderr.decode()


def test_a_killed_group_member_is_resumed_at_the_committed_offsets(cluster: BrokerCluster,
                                                                   tmp_path: Path) -> None:  # fmt: skip
    cluster.create_topic("cli-group", partitions=2, min_insync_replicas="2")
    bootstrap = cluster.cluster.kafka_bootstrap
    first = [b"first %d" % i for i in range(40)]
    assert pykraft("produce", "--bootstrap", bootstrap, "--topic", "cli-group",
                   stdin=b"\n".join(first) + b"\n").returncode == 0  # fmt: skip
    group = ["consume", "--bootstrap", bootstrap, "--topic", "cli-group", "--group", "cli-resume",
             "--from-beginning", "--consumer-property", "session.timeout.ms=6000",
             "--consumer-property", "max.poll.records=5"]  # fmt: skip
    out_path = tmp_path / "member.out"
    with out_path.open("wb") as out:
        member = subprocess.Popen([sys.executable, "-m", "pykraft.cli", *group], cwd=ROOT, stdout=out,
                                  stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            wait_for(lambda: len(out_path.read_bytes().splitlines()) >= len(first), TIMEOUT_S,
                     "the group member to print the first records")  # fmt: skip
            wait_for(lambda: committed(bootstrap) == len(first), TIMEOUT_S, "its commits")
        finally:
            os.kill(member.pid, signal.SIGKILL)  # no LeaveGroup, no last commit
            member.wait(timeout=TIMEOUT_S)
    assert sorted(out_path.read_bytes().splitlines()) == sorted(first)
    second = [b"second %d" % i for i in range(10)]
    assert pykraft("produce", "--bootstrap", bootstrap, "--topic", "cli-group",
                   stdin=b"\n".join(second) + b"\n").returncode == 0  # fmt: skip
    # The killed member's session must expire before the group rebalances to the new one.
    resumed = pykraft(*group, "--max-messages", str(len(second)), "--timeout-ms", "40000")
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert sorted(resumed.stdout.splitlines()) == sorted(second)  # resumed where the commits were
    assert b"Assigned: cli-group-0 cli-group-1" in resumed.stderr
    assert committed(bootstrap) == len(first) + len(second)


def committed(bootstrap: str) -> int:
    from pykraft.cli_kafka import KafkaGroupAdmin

    with KafkaGroupAdmin(bootstrap, timeout_s=10.0) as admin:
        return sum(admin.list_consumer_group_offsets("cli-resume").values())
