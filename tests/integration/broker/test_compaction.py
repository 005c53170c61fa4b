"""Log compaction against real processes: 3 controllers + 3 brokers, the cleaner every 200 ms.

Issue 8: a compacted topic produced with repeated keys reads back — from the beginning, with a
confluent-kafka consumer — as "last value per key", every record at the offset it was produced at, tombstoned
keys gone after delete.retention.ms; and produce and fetch keep working while the cleaner runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from proto.clock import wall_clock_ms
from storage.log import Log
from storage.record_batch import iter_batches
from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster, wait_for

pytestmark = [pytest.mark.integration]

KEYS = [b"key-%02d" % i for i in range(20)]
TOMBSTONED = KEYS[:3]
TIMEOUT_S = 60.0
SEND_LATENCY_MAX_S = 10.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(
        Path(tmp_path_factory.mktemp("compaction")), **{"log.cleaner.backoff.ms": "200"}
    ) as bc:
        yield bc


class Record(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None


def read_from_beginning(bootstrap: str, topic: str, end_offset: int) -> list[Record]:
    """Every record of partition 0 below ``end_offset``, read from the log start (bounded in time)."""
    records: list[Record] = []
    deadline = time.monotonic() + TIMEOUT_S
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-reader",  # assign only
                         "enable.auto.commit": False, "retry.backoff.ms": 50})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        position = 0
        while position < end_offset:
            assert time.monotonic() < deadline, f"read only up to {position} of {end_offset}"
            for m in consumer.consume(1000, 0.2):
                assert m.error() is None, m.error()
                records.append(Record(m.offset(), m.key(), m.value()))
                position = m.offset() + 1
    finally:
        consumer.close()
    return [r for r in records if r.offset < end_offset]


def acked_producer(bootstrap: str, **config: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, **config})


def send_all(producer: Producer, topic: str, records: list[tuple[bytes, bytes | None]],
             timeout_s: float) -> list[int]:  # fmt: skip
    """Send ``records`` to partition 0 (pipelined) and wait for every acknowledgement: their offsets."""
    reports: list[tuple[int, KafkaError | None, int]] = []
    for i, (key, value) in enumerate(records):
        producer.produce(topic, value, key=key, partition=0,
                         on_delivery=lambda e, m, i=i: reports.append((i, e, m.offset())))  # fmt: skip
    assert producer.flush(timeout_s) == 0, f"not acknowledged within {timeout_s} s"
    errors = [e for _, e, _ in reports if e is not None]
    assert not errors, errors[:3]
    return [offset for _, _, offset in sorted(reports)]


class KeyedWriter(threading.Thread):
    """Produces ``(key, value)`` records cycling over KEYS until stopped; remembers what each acked
    offset holds and the slowest acknowledgement."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = acked_producer(bootstrap, **{"linger.ms": 2, "batch.size": 2048,
                                                     "request.timeout.ms": 5000})  # fmt: skip
        self.topic = topic
        self.produced: dict[int, tuple[bytes, bytes | None]] = {}
        self.slowest_s = 0.0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def send(self, *records: tuple[bytes, bytes | None]) -> None:
        """Send ``records`` (pipelined) and wait for every acknowledgement."""
        started = time.monotonic()
        offsets = send_all(self.producer, self.topic, list(records), SEND_LATENCY_MAX_S * 2)
        for record, offset in zip(records, offsets, strict=True):
            self.produced[offset] = record
        self.slowest_s = max(self.slowest_s, time.monotonic() - started)

    def run(self) -> None:
        sequence = 0
        try:
            while not self.stop.is_set():
                self.send(*[(key, b"%s=%06d" % (key, sequence)) for key in KEYS[len(TOMBSTONED) :]])
                sequence += 1
        except BaseException as exc:  # reported by the test
            self.error = exc


def test_compacted_topic_reads_back_as_last_value_per_key(cluster: BrokerCluster) -> None:
    topic = "compacted"
    cluster.create_topic(
        topic, partitions=1, rf=3, cleanup_policy="compact", segment_bytes="16384",
        min_cleanable_dirty_ratio="0.01", delete_retention_ms="0", min_insync_replicas="2",
    )  # fmt: skip
    bootstrap = cluster.cluster.kafka_bootstrap
    writer = KeyedWriter(bootstrap, topic)
    try:
        for round_ in range(30):  # every key, many times; the first keys end with a tombstone
            writer.send(*[(key, b"%s=first-%02d" % (key, round_)) for key in KEYS])
        writer.send(*[(key, None) for key in TOMBSTONED])
        writer.start()  # keeps producing (and rolling segments) while the cleaner works
        produced_before = len(writer.produced)

        def compacted() -> bool:
            end = max(writer.produced) + 1
            read = read_from_beginning(bootstrap, topic, end)
            return len(read) < end // 2 and not any(r.key in TOMBSTONED for r in read)

        wait_for(compacted, TIMEOUT_S, "the cleaner to compact the topic and drop its tombstones", 0.5)
        assert writer.error is None, writer.error
        assert len(writer.produced) > produced_before, "produce stalled while the cleaner ran"
    finally:
        writer.stop.set()
        writer.join(SEND_LATENCY_MAX_S * 3)
        writer.producer.flush(SEND_LATENCY_MAX_S)
    assert writer.error is None, writer.error
    assert writer.slowest_s < SEND_LATENCY_MAX_S, f"an acks=all send took {writer.slowest_s:.1f} s"

    produced = writer.produced  # every record the writer sent, all acknowledged, by offset
    end = max(produced) + 1
    records = read_from_beginning(bootstrap, topic, end)
    for record in records:  # offsets never change: each record is the one produced at its offset
        assert produced.get(record.offset) == (record.key, record.value), record
    assert [r.offset for r in records] == sorted({r.offset for r in records})
    last = {}
    for offset in sorted(produced):
        key, value = produced[offset]
        last[key] = value
    read_last = {r.key: r.value for r in records}
    assert read_last == {k: v for k, v in last.items() if v is not None}
    assert len(records) < len(produced) // 2, f"{len(records)} of {len(produced)} records left"
    cluster.wait_isr(topic, {101, 102, 103})  # every replica compacts on its own and stays in sync
    print(f"compaction: {len(records)} of {len(produced)} records left, slowest send {writer.slowest_s:.2f}s")


def test_keyless_record_is_refused_by_a_compacted_topic(cluster: BrokerCluster) -> None:
    topic = "compacted-keyless"
    cluster.create_topic(topic, partitions=1, rf=3, cleanup_policy="compact")
    producer = Producer({"bootstrap.servers": cluster.cluster.kafka_bootstrap, "acks": "all", "retries": 0})
    reports: list[tuple[KafkaError | None, int]] = []
    producer.produce(topic, b"no key", partition=0, on_delivery=lambda e, m: reports.append((e, m.offset())))
    assert producer.flush(30) == 0
    ((error, _),) = reports
    assert error is not None and error.code() == KafkaError.INVALID_RECORD, error
    assert send_all(producer, topic, [(b"k", b"keyed")], 30) == [0]


def log_records(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in a stopped replica's partition directory."""
    plog = Log(directory, None, wall_clock_ms)
    try:
        out, offset = [], plog.log_start_offset
        while offset < plog.log_end_offset:
            for batch in iter_batches(plog.read(offset, 1 << 20)):
                out += [(r.offset, r.key, r.value) for r in batch.records if r.offset >= offset]
                offset = batch.header.next_offset
        return out
    finally:
        plog.close()


def test_a_replica_that_was_down_catches_up_from_a_compacted_leader(cluster: BrokerCluster) -> None:
    """The follower fetches batches with gaps before them and fewer records than offsets (Kafka's
    follower accepts both); it rejoins the ISR and holds the leader's records at the same offsets."""
    topic = "compacted-catch-up"
    cluster.create_topic(
        topic, partitions=1, rf=3, cleanup_policy="compact", segment_bytes="4096",
        min_cleanable_dirty_ratio="0.01",
    )  # fmt: skip
    leader = cluster.leader(topic)
    lagging = max(b for b in (101, 102, 103) if b != leader)
    spec = cluster.broker(lagging)
    cluster.cluster.kill_node(spec)
    cluster.wait_isr(topic, {101, 102, 103} - {lagging})
    produced: dict[int, tuple[bytes, bytes]] = {}
    producer = acked_producer(cluster.cluster.kafka_bootstrap, **{"linger.ms": 2, "batch.size": 1024})
    for round_ in range(40):
        records = [(key, b"%s=%02d" % (key, round_)) for key in KEYS]
        for record, offset in zip(records, send_all(producer, topic, records, 30), strict=True):
            produced[offset] = record
    end = max(produced) + 1
    wait_for(
        lambda: len(read_from_beginning(cluster.cluster.kafka_bootstrap, topic, end)) < end // 2,
        TIMEOUT_S, "the leader to compact", 0.5,
    )  # fmt: skip
    cluster.cluster.start_node(spec)
    cluster.wait_isr(topic, {101, 102, 103}, timeout_s=TIMEOUT_S)
    cluster.cluster.stop_node(spec)
    try:
        records = log_records(cluster.cluster.data_dir / spec.name / f"{topic}-0")
    finally:
        cluster.cluster.start_node(spec)
    assert records, "the follower holds nothing"
    for offset, key, value in records:
        assert produced.get(offset) == (key, value), (offset, key, value)
    assert len(records) < len(produced) // 2, f"the follower holds {len(records)} of {len(produced)}"
    last = {key: value for _, (key, value) in sorted(produced.items())}
    assert {key: value for _, key, value in records} == last
    cluster.wait_isr(topic, {101, 102, 103}, timeout_s=TIMEOUT_S)
