"""Idempotent producer (KIP-98) against real processes: 3 controllers + 3 brokers.

Issue 6: with a fault that drops the first answer to every Produce request (the broker appended;
the producer does not know) every batch is retried, and the leader is SIGKILLed in the middle; the
retries reach the old leader or the new one, which rebuilt the producer state from the replicated
batches. The topic must hold each record exactly once, in send order per partition.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykraft.consumer import Consumer
from pykraft.producer import Producer
from pykraft.types import ConsumerRecord, RecordMetadata, TopicPartition
from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2
TIMEOUT_S = 90.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("idempotence"))) as bc:
        yield bc


def read_all(bootstrap: str, topic: str, expected: int) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    with Consumer(bootstrap, auto_offset_reset="earliest", retry_backoff_ms=50) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        idle = 0
        while idle < 6 or (len(records) < expected and idle < 20):  # read past `expected`: find duplicates
            batch = consumer.poll(500)
            records += batch
            idle = 0 if batch else idle + 1
    return records


@pytest.mark.parametrize("in_flight", [1, 5], ids=["one-in-flight", "five-in-flight"])
def test_dropped_answers_and_leader_sigkill_write_each_record_once(
    cluster: BrokerCluster, in_flight: int
) -> None:
    """Every batch is retried after its first (appended) attempt's answer is dropped, and partition 0's
    leader is SIGKILLed mid-stream: each record is in the log exactly once, in send order."""
    topic = f"idempotent-{in_flight}"
    total = 600
    cluster.create_topic(topic, partitions=PARTITIONS, min_insync_replicas="2")
    cluster.wait_isr(topic, {101, 102, 103})
    leader = cluster.leader(topic)
    failed: list[Exception] = []
    acked: list[tuple[int, RecordMetadata]] = []
    lock = threading.Lock()

    def report(i: int):
        def callback(metadata: RecordMetadata | None, error: Exception | None) -> None:
            with lock:
                (acked.append((i, metadata)) if error is None else failed.append(error))

        return callback

    producer = Producer(
        cluster.cluster.bootstrap, acks="all", linger_ms=2, retry_backoff_ms=50, request_timeout_ms=5000,
        delivery_timeout_ms=60_000, max_in_flight_requests_per_connection=in_flight,
        enable_idempotence=True, test_drop_first_response=True,
    )  # fmt: skip
    try:
        for i in range(total):
            producer.send(topic, b"%d" % i, partition=i % PARTITIONS, on_delivery=report(i))
            if i == total // 3:
                producer.flush(TIMEOUT_S)
                cluster.cluster.kill_node(cluster.broker(leader))
        producer.flush(TIMEOUT_S)
    finally:
        producer.close(5.0)
        cluster.cluster.start_node(cluster.broker(leader))
    assert producer.producer_id >= 0, "the producer obtained an id"
    assert not failed, f"{len(failed)} records failed, e.g. {failed[0]}"
    records = read_all(cluster.cluster.bootstrap, topic, total)
    for p in range(PARTITIONS):
        values = [int(r.value) for r in sorted(records, key=lambda r: r.offset) if r.partition == p]
        assert values == list(range(p, total, PARTITIONS)), (
            f"partition {p}: not exactly once in order: {len(values)} records, "
            f"duplicates {sorted(v for v in set(values) if values.count(v) > 1)[:10]}"
        )
    by_position = {(r.partition, r.offset): int(r.value) for r in records}
    for i, metadata in acked:
        assert by_position[(metadata.partition, metadata.offset)] == i, f"record {i} not at its acked offset"


def test_idempotence_requires_acks_all() -> None:
    """A contradictory config is refused with an actionable error, before anything is sent."""
    with pytest.raises(ValueError, match="acks='all'"):
        Producer("127.0.0.1:1", acks=1, enable_idempotence=True)
    with pytest.raises(ValueError, match=r"max\.in\.flight"):
        Producer("127.0.0.1:1", max_in_flight_requests_per_connection=6, enable_idempotence=True)
