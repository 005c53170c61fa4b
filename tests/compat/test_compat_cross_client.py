"""Across clients (issue 15 §4): what each Kafka client writes, every other client and the Spark
reader read back identically — partition, offset, key, value, headers (names, values, order) and
timestamp.

Each writer (confluent-kafka, kafka-python, aiokafka, kcat) produces to a topic of its own, 3
partitions, RF 3, min.insync.replicas=2, with acks=all and idempotence; the records carry non-ASCII
UTF-8 values, headers, a null key (where the client can send one) and explicit create times (where the
client can set them: kcat stamps its own). Then every reader reads the whole topic from offset 0 and
must return exactly the writer's acknowledged records. One cluster for the module, and the shared
SparkSession (started before the cluster: Spark forks its JVM). Stopped by pid even on failure.
"""

from __future__ import annotations

import datetime as dt
import shutil
import time
from collections.abc import Callable, Iterator

import pytest

from tests.compat.clients import (
    Out,
    Rec,
    read_aiokafka,
    read_confluent,
    read_kafka_python,
    read_kcat,
    write_aiokafka,
    write_confluent,
    write_kafka_python,
    write_kcat,
)
from tests.e2e.spark.conftest import spark  # noqa: F401 - the shared session fixture
from tests.integration.broker.broker_cluster import BrokerCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

PARTITIONS = 3
PER_PARTITION = 4
BASE_TS = 1_700_000_000_000
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def cluster(spark, compat_cluster: BrokerCluster) -> Iterator[BrokerCluster]:  # noqa: F811
    """``spark`` first: the session's JVM is forked before this module's cluster and gRPC channels."""
    yield compat_cluster


def records(writer: str, null_key: bool = True, timestamps: bool = True) -> list[Out]:
    out = []
    for p in range(PARTITIONS):
        headers = (("writer", writer.encode()), ("partition", str(p).encode()), ("ünïcode", "ß→∑".encode()))
        for i in range(PER_PARTITION):
            key = None if (null_key and p == 0 and i == 1) else f"k{p}-{i}".encode()
            ts = BASE_TS + p * 1000 + i if timestamps else None
            out.append(Out(p, key, f"{writer} värde {p}/{i} ✓".encode(), headers, ts))
    return out


def expected_from(sent: list[Out]) -> list[Rec]:
    """A fresh topic and one ordered idempotent producer: offsets count from 0 in send order."""
    counts: dict[int, int] = {}
    exp = []
    for r in sent:
        offset = counts.get(r.partition, 0)
        counts[r.partition] = offset + 1
        exp.append(Rec(r.partition, offset, r.key, r.value, r.headers, r.timestamp_ms or 0))
    return sorted(exp)


def read_spark(spark_session, cluster: BrokerCluster, topic: str) -> list[Rec]:
    bootstrap = cluster.cluster.kafka_bootstrap  # the Spark source reads over the Kafka protocol
    rows = (spark_session.read.format("pykraft").option("bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("includeHeaders", "true").load().collect())  # fmt: skip
    return sorted(
        Rec(r.partition, r.offset, None if r.key is None else bytes(r.key), bytes(r.value),
            tuple((h.key, bytes(h.value)) for h in (r.headers or ())),
            (r.timestamp.astimezone(dt.UTC) - EPOCH) // dt.timedelta(milliseconds=1))
        for r in rows
    )  # fmt: skip


def write_with(writer: str, kcat_path: str | None, bootstrap: str, topic: str) -> list[Rec]:
    writers: dict[str, Callable[[], list[Rec]]] = {
        "confluent": lambda: write_confluent(bootstrap, topic, records("confluent")),
        "kafka-python": lambda: write_kafka_python(bootstrap, topic, records("kafka-python")),
        "aiokafka": lambda: write_aiokafka(bootstrap, topic, records("aiokafka")),
    }
    if writer in writers:
        return writers[writer]()
    sent = records("kcat", null_key=False, timestamps=False)
    before_ms = int(time.time() * 1000)
    write_kcat(kcat_path, bootstrap, topic, sent)
    after_ms = int(time.time() * 1000)
    # kcat stamps the create time itself: take it from a reader, check it is this run's.
    stamped = read_confluent(bootstrap, topic, PARTITIONS, len(sent))
    assert all(before_ms - 1000 <= r.timestamp_ms <= after_ms + 1000 for r in stamped), stamped
    by_pos = {(r.partition, r.offset): r.timestamp_ms for r in stamped}
    return [Rec(r.partition, r.offset, r.key, r.value, r.headers, by_pos[(r.partition, r.offset)])
            for r in expected_from(sent)]  # fmt: skip


@pytest.mark.parametrize("writer", ["confluent", "kafka-python", "aiokafka", "kcat"])
def test_every_client_and_spark_read_back_what_each_client_wrote(
    writer: str, cluster: BrokerCluster, spark, request: pytest.FixtureRequest  # noqa: F811
) -> None:
    # kcat is one writer and one reader: only its own writer test skips when kcat cannot be had.
    kcat_path = request.getfixturevalue("kcat") if writer == "kcat" else shutil.which("kcat")
    topic = f"cross-{writer}"
    cluster.create_topic(topic, partitions=PARTITIONS, min_insync_replicas="2")
    bootstrap = cluster.cluster.kafka_bootstrap
    acked = write_with(writer, kcat_path, bootstrap, topic)
    if writer != "kcat":
        assert acked == expected_from(records(writer)), "acks differ from what was sent"
    total = len(acked)
    reads = {
        "confluent": read_confluent(bootstrap, topic, PARTITIONS, total),
        "kafka-python": read_kafka_python(bootstrap, topic, PARTITIONS, total),
        "aiokafka": read_aiokafka(bootstrap, topic, PARTITIONS, total),
        "spark": read_spark(spark, cluster, topic),
    }
    if kcat_path is not None:
        reads["kcat"] = read_kcat(kcat_path, bootstrap, topic, total)
    for reader, got in reads.items():
        assert got == acked, f"{reader} read back what {writer} wrote differently:\n{got}\n!=\n{acked}"
