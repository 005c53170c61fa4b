"""pykraft.Consumer against an in-process fake BrokerService (tests/unit/pykraft/fake_brokers.py).

Rules under test (Kafka's consumer with manual assignment, issue 5 section 4): positions from
auto_offset_reset / seek / seek_to_*, records with every field, max_poll_records, leader changes
followed, KIP-320 truncation detection by leader epoch, out-of-range handling.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proto import errors
from proto.errors import ErrorCode
from pykraft.consumer import Consumer, LogTruncation, LogTruncationError
from pykraft.producer import Producer
from pykraft.types import ConsumerRecord, TimestampType, TopicPartition
from tests.unit.pykraft.fake_brokers import FakeCluster

TOPIC = "events"
TP0 = TopicPartition(TOPIC, 0)
TIMEOUT_MS = 10_000


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    fake.create_topic(TOPIC, 2)
    try:
        yield fake
    finally:
        fake.stop()


def produce(cluster: FakeCluster, values: list[bytes], partition: int = 0, **kwargs) -> None:
    """Each call is one batch per partition (flush), so tests know where batches begin."""
    with Producer(cluster.bootstrap, linger_ms=1000, **kwargs) as producer:
        futures = [producer.send(TOPIC, v, partition=partition) for v in values]
        producer.flush(TIMEOUT_MS / 1000)
        for f in futures:
            f.result(0)


def read(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    """Poll until ``count`` records arrived (bounded by a deadline)."""
    records: list[ConsumerRecord] = []
    for _ in range(50):
        records += consumer.poll(200)
        if len(records) >= count:
            return records
    raise AssertionError(f"only {len(records)} of {count} records arrived: {records}")


def test_records_carry_every_field(cluster: FakeCluster) -> None:
    """ConsumerRecord: topic, partition, offset, key, value, headers, timestamp, timestamp type, epoch."""
    with Producer(cluster.bootstrap) as producer:
        producer.send(TOPIC, b"v", key=b"k", headers=[("h", b"1"), ("n", None)], partition=1,
                      timestamp_ms=42).result(10)  # fmt: skip
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 1)])
        (record,) = read(consumer, 1)
    assert record == ConsumerRecord(TOPIC, 1, 0, b"k", b"v", (("h", b"1"), ("n", None)), 42,
                                    TimestampType.CREATE_TIME, 0)  # fmt: skip


@pytest.mark.parametrize(
    ("reset", "seek", "expected_first"),
    [
        ("earliest", None, 0),
        ("latest", None, None),
        ("latest", 3, 3),
        ("latest", "beginning", 0),
        ("earliest", "end", None),
    ],
    ids=["earliest", "latest", "seek-3", "seek-to-beginning", "seek-to-end"],
)
def test_positions(cluster: FakeCluster, reset: str, seek: object, expected_first: int | None) -> None:
    """auto_offset_reset picks the start without a position; seek / seek_to_* override it."""
    produce(cluster, [b"%d" % i for i in range(5)])
    with Consumer(cluster.bootstrap, auto_offset_reset=reset) as consumer:
        consumer.assign([TP0])
        if seek == "beginning":
            consumer.seek_to_beginning(TP0)
        elif seek == "end":
            consumer.seek_to_end(TP0)
        elif seek is not None:
            consumer.seek(TP0, seek)
        start = consumer.position(TP0)
        assert start == (5 if expected_first is None else expected_first)
        produce(cluster, [b"new"])
        records = read(consumer, 6 - start)
        assert consumer.position(TP0) == 6
    assert [r.offset for r in records] == list(range(start, 6))
    assert records[-1].value == b"new"


def test_poll_returns_at_most_max_poll_records(cluster: FakeCluster) -> None:
    produce(cluster, [b"%d" % i for i in range(25)])
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", max_poll_records=10) as consumer:
        consumer.assign([TP0])
        sizes = [len(consumer.poll(TIMEOUT_MS)) for _ in range(3)]
        assert sizes == [10, 10, 5]
        assert consumer.position(TP0) == 25


def test_a_seek_mid_batch_skips_the_records_before(cluster: FakeCluster) -> None:
    """Fetch returns the whole batch holding the position; records before it are dropped."""
    produce(cluster, [b"%d" % i for i in range(10)])
    with Consumer(cluster.bootstrap) as consumer:
        consumer.assign([TP0])
        consumer.seek(TP0, 7)
        assert [r.offset for r in read(consumer, 3)] == [7, 8, 9]


def test_leader_change_is_followed(cluster: FakeCluster) -> None:
    """NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH: the consumer finds the new leader and goes on."""
    produce(cluster, [b"a", b"b"])
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", retry_backoff_ms=20) as consumer:
        consumer.assign([TP0])
        assert [r.value for r in read(consumer, 2)] == [b"a", b"b"]
        cluster.move_leader(TOPIC, 0, 103)
        produce(cluster, [b"c"])
        (record,) = read(consumer, 1)
    assert (record.offset, record.value, record.leader_epoch) == (2, b"c", 1)


def test_truncation_is_detected_by_leader_epoch(cluster: FakeCluster) -> None:
    """KIP-320: the consumer read offsets 0..9 in epoch 0; the new leader's log ended epoch 0 at 6.

    The fetch carries last_fetched_epoch=0, the leader answers diverging_epoch (0, 6): the consumer
    records the truncation, moves back to 6 and reads the new leader's records from there.
    """
    produce(cluster, [b"old-%d" % i for i in range(6)])
    produce(cluster, [b"old-%d" % i for i in range(6, 10)])
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", retry_backoff_ms=20) as consumer:
        consumer.assign([TP0])
        assert len(read(consumer, 10)) == 10
        cluster.truncate(TOPIC, 0, 6, new_leader=102)
        produce(cluster, [b"new-6", b"new-7"])
        records = read(consumer, 2)
        assert consumer.truncations == [LogTruncation(TP0, 10, 6, 0)]
    assert [(r.offset, r.value, r.leader_epoch) for r in records] == [(6, b"new-6", 1), (7, b"new-7", 1)]


def test_truncation_without_reset_policy_raises(cluster: FakeCluster) -> None:
    """auto_offset_reset='none': a diverged position is the application's to handle."""
    produce(cluster, [b"a", b"b"])
    produce(cluster, [b"c"])
    with Consumer(cluster.bootstrap, auto_offset_reset="none", retry_backoff_ms=20) as consumer:
        consumer.assign([TP0])
        consumer.seek(TP0, 0)
        assert len(read(consumer, 3)) == 3
        cluster.truncate(TOPIC, 0, 2, new_leader=102)
        with pytest.raises(LogTruncationError) as raised:
            for _ in range(50):
                consumer.poll(200)
    assert raised.value.truncation.divergent_offset == 2
    assert raised.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


@pytest.mark.parametrize(
    ("reset", "expected"), [("earliest", [0, 1, 2]), ("latest", [])], ids=["earliest", "latest"]
)
def test_out_of_range_position_is_reset(cluster: FakeCluster, reset: str, expected: list[int]) -> None:
    """A position past anything committed is reset per auto_offset_reset."""
    produce(cluster, [b"a", b"b", b"c"])
    with Consumer(cluster.bootstrap, auto_offset_reset=reset, retry_backoff_ms=20) as consumer:
        consumer.assign([TP0])
        consumer.seek(TP0, 1000)
        records: list[ConsumerRecord] = []
        for _ in range(50):
            records += consumer.poll(100)
            if consumer.position(TP0) == 3:
                break
        assert consumer.position(TP0) == 3
    assert [r.offset for r in records] == expected


def test_out_of_range_without_reset_policy_raises(cluster: FakeCluster) -> None:
    with Consumer(cluster.bootstrap, auto_offset_reset="none", retry_backoff_ms=20) as consumer:
        consumer.assign([TP0])
        consumer.seek(TP0, 50)
        with pytest.raises(errors.KafkaError) as raised:
            for _ in range(20):
                consumer.poll(100)
    assert raised.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda c: c.position(TopicPartition("other", 0)), ErrorCode.INVALID_REQUEST),
        (lambda c: c.seek(TP0, -1), ErrorCode.OFFSET_OUT_OF_RANGE),
        (lambda c: c.partitions_for("missing", timeout_ms=200), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ],
    ids=["not-assigned", "negative-offset", "unknown-topic"],
)
def test_misuse_gets_a_named_error(cluster: FakeCluster, call, code: ErrorCode) -> None:
    with Consumer(cluster.bootstrap) as consumer:
        consumer.assign([TP0])
        with pytest.raises(errors.KafkaError) as raised:
            call(consumer)
    assert raised.value.code == code


def test_partitions_for_lists_the_topic(cluster: FakeCluster) -> None:
    with Consumer(cluster.bootstrap) as consumer:
        assert consumer.partitions_for(TOPIC) == [0, 1]



def test_position_counts_only_returned_records(cluster: FakeCluster) -> None:
    """Kafka's position(): the offset of the next record poll() returns, not where fetching got to."""
    produce(cluster, [b"%d" % i for i in range(25)])
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", max_poll_records=10) as consumer:
        consumer.assign([TP0])
        first = read(consumer, 10)
        assert [r.offset for r in first] == list(range(10))
        assert consumer.position(TP0) == 10
        assert [r.offset for r in read(consumer, 10)] == list(range(10, 20))
        assert consumer.position(TP0) == 20
