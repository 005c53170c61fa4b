"""pykraft.Producer against an in-process fake BrokerService (tests/unit/pykraft/fake_brokers.py).

Rules under test (Kafka's producer, issue 5 section 4): batching (many records per batch, many
partitions per request), Kafka-compatible key partitioning, every codec, acks, retries of retriable
errors with the order of a partition preserved, leader changes followed by the KIP-951 hint or a
metadata refresh, non-retriable errors failing the records, futures and callbacks, flush and close.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest
from kafka.partitioner.default import DefaultPartitioner

from proto import errors
from proto.errors import ErrorCode
from pykraft.producer import Producer
from pykraft.types import NO_OFFSET, RecordMetadata
from storage.record_batch import iter_batches
from tests.unit.pykraft.fake_brokers import FakeCluster

TOPIC = "orders"
TIMEOUT_S = 20


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    fake.create_topic(TOPIC, 3)
    try:
        yield fake
    finally:
        fake.stop()


def logged(cluster: FakeCluster, partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in the fake leader's log, decoded from the stored bytes."""
    data = cluster.records_bytes(TOPIC, partition)
    return [(r.offset, r.key, r.value) for batch in iter_batches(data) for r in batch.records]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_records_land_in_order_with_their_offsets(cluster: FakeCluster, compression: str) -> None:
    """Each future resolves to the offset the leader assigned; the log holds the records in send order."""
    with Producer(cluster.bootstrap, compression_type=compression, linger_ms=2) as producer:
        futures = [producer.send(TOPIC, b"value-%d" % i, key=b"key-%d" % (i % 7)) for i in range(600)]
        producer.flush(TIMEOUT_S)
        results = [f.result(0) for f in futures]
    for partition in range(3):
        sent = [(i, r) for i, r in enumerate(results) if r.partition == partition]
        assert [r.offset for _, r in sent] == list(range(len(sent))), "offsets contiguous in send order"
        assert logged(cluster, partition) == [
            (r.offset, b"key-%d" % (i % 7), b"value-%d" % i) for i, r in sent
        ]


def test_keyed_records_go_where_kafka_python_puts_them(cluster: FakeCluster) -> None:
    """Murmur2 partitioning equals kafka-python's DefaultPartitioner for the same partition count."""
    keys = [b"customer-%d" % i for i in range(50)]
    with Producer(cluster.bootstrap) as producer:
        futures = [producer.send(TOPIC, b"v", key=key) for key in keys]
        partitions = [f.result(TIMEOUT_S).partition for f in futures]
    reference = DefaultPartitioner()
    cluster_view = _KafkaPythonCluster({TOPIC: 3})
    expected = [reference.partition(TOPIC, None, key, None, b"v", cluster_view) for key in keys]
    assert partitions == expected


class _KafkaPythonCluster:
    """The slice of kafka-python's ClusterMetadata that DefaultPartitioner reads."""

    def __init__(self, partitions: dict[str, int]) -> None:
        self._partitions = partitions

    def topics(self) -> set[str]:
        return set(self._partitions)

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self._partitions[topic]))

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return self.partitions_for_topic(topic)


def test_one_request_carries_batches_of_many_partitions(cluster: FakeCluster) -> None:
    """Records for one leader are drained into one Produce request per round, not one per record."""
    cluster.create_topic("single-leader", 3)
    for partition in (1, 2):
        cluster.move_leader("single-leader", partition, 101)
    with Producer(cluster.bootstrap, linger_ms=50) as producer:
        futures = [producer.send("single-leader", b"x" * 10, partition=i % 3) for i in range(300)]
        producer.flush(TIMEOUT_S)
        assert all(f.result(0).offset >= 0 for f in futures)
    requests = [r for _, r in cluster.produce_requests if r.topics[0].name == "single-leader"]
    assert len(requests) <= 3, f"{len(requests)} requests for 300 records"
    assert max(len(r.topics[0].partitions) for r in requests) == 3


def test_unkeyed_records_stick_to_one_partition_per_batch(cluster: FakeCluster) -> None:
    """KIP-480: null-key records fill one partition's batch before moving on."""
    with Producer(cluster.bootstrap, linger_ms=1000, batch_size=1024) as producer:
        futures = [producer.send(TOPIC, b"y" * 50) for _ in range(40)]
        producer.flush(TIMEOUT_S)
        partitions = [f.result(0).partition for f in futures]
    runs = sum(1 for a, b in itertools.pairwise(partitions) if a != b) + 1
    assert runs <= 4, f"{partitions} switches partition more often than per ~1 KiB batch"


@pytest.mark.parametrize(
    "code",
    [ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_LEADER_OR_FOLLOWER],
    ids=lambda c: c.name,
)
def test_retriable_errors_are_retried_in_order(cluster: FakeCluster, code: ErrorCode) -> None:
    """A retriable error re-queues the batch at the head of its partition: nothing lost, order kept."""
    cluster.inject(TOPIC, 0, [code, code])
    with Producer(cluster.bootstrap, retry_backoff_ms=10, linger_ms=1) as producer:
        futures = [producer.send(TOPIC, b"%d" % i, partition=0) for i in range(50)]
        producer.flush(TIMEOUT_S)
        offsets = [f.result(0).offset for f in futures]
    assert offsets == list(range(50))
    assert [v for _, _, v in logged(cluster, 0)] == [b"%d" % i for i in range(50)]


def test_leader_change_is_followed(cluster: FakeCluster) -> None:
    """NOT_LEADER_OR_FOLLOWER with a leader hint: the producer sends to the new leader, in order."""
    with Producer(cluster.bootstrap, retry_backoff_ms=10, linger_ms=1) as producer:
        first = [producer.send(TOPIC, b"a%d" % i, partition=1) for i in range(20)]
        producer.flush(TIMEOUT_S)
        cluster.move_leader(TOPIC, 1, 103)
        second = [producer.send(TOPIC, b"b%d" % i, partition=1) for i in range(20)]
        producer.flush(TIMEOUT_S)
        offsets = [f.result(0).offset for f in first + second]
    assert offsets == list(range(40))
    assert any(node == 103 for node, _ in cluster.produce_requests)


def test_fenced_epoch_refreshes_metadata(cluster: FakeCluster) -> None:
    """A stale current_leader_epoch is fenced; the producer learns the new epoch and succeeds."""
    with Producer(cluster.bootstrap, retry_backoff_ms=10, linger_ms=1) as producer:
        producer.send(TOPIC, b"first", partition=2).result(TIMEOUT_S)
        leader = cluster.partition(TOPIC, 2).leader_id
        cluster.move_leader(TOPIC, 2, leader)  # same leader, new epoch: FENCED_LEADER_EPOCH first
        assert producer.send(TOPIC, b"second", partition=2).result(TIMEOUT_S).offset == 1
    epochs = [
        p.current_leader_epoch for _, r in cluster.produce_requests for t in r.topics for p in t.partitions
    ]
    assert epochs[-1] == 1


@pytest.mark.parametrize(
    ("code", "retries"),
    [(ErrorCode.MESSAGE_TOO_LARGE, 5), (ErrorCode.NOT_ENOUGH_REPLICAS, 0)],
    ids=["non-retriable", "retries-exhausted"],
)
def test_failed_batches_fail_their_records(cluster: FakeCluster, code: ErrorCode, retries: int) -> None:
    """Non-retriable (or out of retries): futures raise the Kafka error; callbacks get it too."""
    cluster.inject(TOPIC, 0, [code])
    seen: list[tuple[RecordMetadata | None, Exception | None]] = []
    with Producer(cluster.bootstrap, retries=retries, linger_ms=1) as producer:
        future = producer.send(TOPIC, b"v", partition=0, on_delivery=lambda m, e: seen.append((m, e)))
        with pytest.raises(errors.KafkaError) as raised:
            future.result(TIMEOUT_S)
        assert raised.value.code == code
        assert producer.send(TOPIC, b"next", partition=0).result(TIMEOUT_S).offset == 0
    assert len(seen) == 1 and seen[0][0] is None and seen[0][1].code == code


def test_callbacks_and_done_callbacks_get_the_metadata(cluster: FakeCluster) -> None:
    """on_delivery(metadata, None) and add_done_callback(future) run once per record."""
    done = threading.Event()
    got: list[RecordMetadata] = []
    with Producer(cluster.bootstrap) as producer:
        future = producer.send(TOPIC, b"v", key=b"k", partition=1, timestamp_ms=1234,
                               on_delivery=lambda m, e: got.append(m))  # fmt: skip
        future.add_done_callback(lambda f: done.set())
        metadata = future.result(TIMEOUT_S)
        assert done.wait(TIMEOUT_S)
    assert metadata == RecordMetadata(TOPIC, 1, 0, 1234, 1, 1)
    assert got == [metadata]


def test_acks_zero_resolves_without_an_offset(cluster: FakeCluster) -> None:
    """acks=0: the client does not learn offsets (Kafka returns -1)."""
    with Producer(cluster.bootstrap, acks=0) as producer:
        assert producer.send(TOPIC, b"v", partition=0).result(TIMEOUT_S).offset == NO_OFFSET
    assert logged(cluster, 0) == [(0, None, b"v")]


def test_unknown_topic_fails_after_max_block(cluster: FakeCluster) -> None:
    """send() waits max_block_ms for the topic's metadata, then raises UNKNOWN_TOPIC_OR_PARTITION."""
    with (
        Producer(cluster.bootstrap, max_block_ms=300) as producer,
        pytest.raises(errors.KafkaError) as raised,
    ):
        producer.send("no-such-topic", b"v")
    assert raised.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"value": "text"}, errors.KafkaError),
        ({"value": b"v", "key": 5}, errors.KafkaError),
        ({"value": b"v", "headers": [("h", "str")]}, errors.KafkaError),
        ({"value": b"v", "partition": 7}, errors.KafkaError),
    ],
    ids=["str-value", "int-key", "str-header-value", "partition-out-of-range"],
)
def test_bad_records_are_refused_at_send(cluster: FakeCluster, kwargs: dict, error: type) -> None:
    """Bad input gets a named error with a message, and nothing is queued."""
    with Producer(cluster.bootstrap) as producer:
        with pytest.raises(error):
            producer.send(TOPIC, **kwargs)
        producer.flush(TIMEOUT_S)
    assert not cluster.produce_requests


@pytest.mark.parametrize(
    "kwargs",
    [{"acks": "2"}, {"compression_type": "brotli"}, {"batch_size": 0}, {"linger_ms": -1}],
    ids=["acks", "codec", "batch-size", "linger"],
)
def test_bad_configs_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Producer("127.0.0.1:1", **kwargs)


def test_send_after_close_is_refused(cluster: FakeCluster) -> None:
    producer = Producer(cluster.bootstrap)
    producer.send(TOPIC, b"v", partition=0).result(TIMEOUT_S)
    producer.close()
    with pytest.raises(errors.KafkaError):
        producer.send(TOPIC, b"late", partition=0)


def test_records_to_an_unreachable_leader_time_out() -> None:
    """No broker answers: after delivery.timeout.ms the records fail instead of hanging."""
    fake = FakeCluster(broker_ids=(101,))
    fake.create_topic(TOPIC, 1)
    producer = Producer(fake.bootstrap, delivery_timeout_ms=800, request_timeout_ms=300, retry_backoff_ms=20)
    try:
        producer.send(TOPIC, b"ok", partition=0).result(TIMEOUT_S)
        fake.stop()
        future = producer.send(TOPIC, b"lost", partition=0)
        with pytest.raises(errors.KafkaError) as raised:
            future.result(TIMEOUT_S)
        assert raised.value.retriable
    finally:
        producer.close(1.0)
        fake.stop()


def test_buffer_memory_applies_backpressure(cluster: FakeCluster) -> None:
    """send() blocks while buffer.memory is full and goes on as batches complete: nothing is lost."""
    with Producer(cluster.bootstrap, buffer_memory=2048, max_request_size=1024, batch_size=512) as producer:
        futures = [producer.send(TOPIC, b"z" * 100, partition=0) for _ in range(200)]
        producer.flush(TIMEOUT_S)
        assert [f.result(0).offset for f in futures] == list(range(200))


def test_full_buffer_fails_send_after_max_block() -> None:
    """No broker drains the buffer: send() raises REQUEST_TIMED_OUT after max.block.ms, not hangs."""
    fake = FakeCluster(broker_ids=(101,))
    fake.create_topic(TOPIC, 1)
    producer = Producer(fake.bootstrap, buffer_memory=1024, max_request_size=1024, max_block_ms=300,
                        request_timeout_ms=300, retry_backoff_ms=20)  # fmt: skip
    try:
        producer.send(TOPIC, b"ok", partition=0).result(TIMEOUT_S)
        fake.stop()
        with pytest.raises(errors.KafkaError) as raised:
            for _ in range(20):
                producer.send(TOPIC, b"x" * 100, partition=0)
        assert raised.value.code == ErrorCode.REQUEST_TIMED_OUT
    finally:
        producer.close(1.0)
        fake.stop()


# ---- idempotence: a batch that fails for good bumps the producer epoch (KIP-360) -----------------


@pytest.fixture
def idempotent_cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster(idempotent=True)
    fake.create_topic(TOPIC, 3)
    try:
        yield fake
    finally:
        fake.stop()


def producer_fields(cluster: FakeCluster, partition: int) -> list[tuple[int, int, int, int]]:
    """(producer id, producer epoch, base sequence, record count) of each batch in the fake's log."""
    data = cluster.records_bytes(TOPIC, partition)
    return [
        (b.header.producer_id, b.header.producer_epoch, b.header.base_sequence, len(b.records))
        for b in iter_batches(data)
    ]


@pytest.mark.parametrize(
    ("code", "retries"),
    [(ErrorCode.MESSAGE_TOO_LARGE, 5), (ErrorCode.NOT_ENOUGH_REPLICAS, 0)],
    ids=["non-retriable", "retries-exhausted"],
)
def test_failed_sequenced_batch_bumps_the_epoch(idempotent_cluster: FakeCluster, code: ErrorCode,
                                                retries: int) -> None:  # fmt: skip
    """KIP-360: a batch that got sequence 1 and then failed leaves a hole the broker would answer
    OUT_OF_ORDER_SEQUENCE_NUMBER forever; the producer bumps its epoch and restarts at sequence 0."""
    cluster = idempotent_cluster
    with Producer(cluster.bootstrap, retries=retries, linger_ms=1, enable_idempotence=True) as producer:
        assert producer.send(TOPIC, b"a", partition=0).result(TIMEOUT_S).offset == 0
        cluster.inject(TOPIC, 0, [code])
        with pytest.raises(errors.KafkaError) as raised:
            producer.send(TOPIC, b"lost", partition=0).result(TIMEOUT_S)
        assert raised.value.code == code
        later = [producer.send(TOPIC, b"b%d" % i, partition=0) for i in range(20)]
        other = producer.send(TOPIC, b"c", partition=1)
        producer.flush(TIMEOUT_S)
        assert [f.result(0).offset for f in later] == list(range(1, 21))
        assert other.result(0).offset == 0
        assert producer.producer_epoch == 1
        pid = producer.producer_id
    assert [v for _, _, v in logged(cluster, 0)] == [b"a"] + [b"b%d" % i for i in range(20)]
    fields = producer_fields(cluster, 0)
    assert fields[0] == (pid, 0, 0, 1)
    sequence = 0
    for producer_id, epoch, base_sequence, count in fields[1:]:  # the new epoch starts at sequence 0
        assert (producer_id, epoch, base_sequence) == (pid, 1, sequence)
        sequence += count
    assert producer_fields(cluster, 1) == [(pid, 1, 0, 1)]


def test_failure_among_five_in_flight_keeps_the_rest_once_and_in_order(
    idempotent_cluster: FakeCluster,
) -> None:
    """One of several in-flight batches fails for good: the later ones (refused OUT_OF_ORDER_SEQUENCE
    behind the hole) wait for the in-flight batches, are renumbered under the bumped epoch and land
    exactly once, in send order."""
    cluster = idempotent_cluster
    cluster.inject(TOPIC, 0, [ErrorCode.NONE] * 3 + [ErrorCode.MESSAGE_TOO_LARGE])
    with Producer(cluster.bootstrap, linger_ms=0, batch_size=100, retry_backoff_ms=5,
                  max_in_flight_requests_per_connection=5, enable_idempotence=True) as producer:  # fmt: skip
        futures = [producer.send(TOPIC, b"%03d" % i + b"." * 60, partition=0) for i in range(40)]
        producer.flush(TIMEOUT_S)
        failed = [i for i, f in enumerate(futures) if f.exception(0) is not None]
        assert len(failed) == 1, failed
        assert futures[failed[0]].exception(0).code == ErrorCode.MESSAGE_TOO_LARGE
        assert producer.producer_epoch == 1
    values = [v[:3] for _, _, v in logged(cluster, 0)]
    assert values == [b"%03d" % i for i in range(40) if i != failed[0]]
    offsets = {f.result(0).offset for i, f in enumerate(futures) if i != failed[0]}
    assert offsets == set(range(39))


def test_lost_producer_state_bumps_and_resends(idempotent_cluster: FakeCluster) -> None:
    """UNKNOWN_PRODUCER_ID with no earlier batch outstanding (the leader's state expired, KIP-854):
    the batch is not in the log; the producer bumps its epoch and sends it again at sequence 0."""
    cluster = idempotent_cluster
    with Producer(cluster.bootstrap, linger_ms=1, enable_idempotence=True) as producer:
        assert producer.send(TOPIC, b"a", partition=2).result(TIMEOUT_S).offset == 0
        assert producer.send(TOPIC, b"b", partition=2).result(TIMEOUT_S).offset == 1
        with cluster.lock:
            cluster.partition(TOPIC, 2).producer_state.clear()  # expired while the producer was idle
        assert producer.send(TOPIC, b"c", partition=2).result(TIMEOUT_S).offset == 2
        assert producer.producer_epoch == 1
        pid = producer.producer_id
    assert producer_fields(cluster, 2) == [(pid, 0, 0, 1), (pid, 0, 1, 1), (pid, 1, 0, 1)]


def test_delivery_timeout_of_a_sequenced_batch_bumps_the_epoch(idempotent_cluster: FakeCluster) -> None:
    """A batch that was sent, then waited for its retry past delivery.timeout.ms, fails with
    REQUEST_TIMED_OUT; the next batch is not stuck behind its sequence."""
    cluster = idempotent_cluster
    cluster.inject(TOPIC, 0, [ErrorCode.NOT_ENOUGH_REPLICAS])
    with Producer(cluster.bootstrap, linger_ms=1, retry_backoff_ms=5_000, delivery_timeout_ms=300,
                  enable_idempotence=True) as producer:  # fmt: skip
        with pytest.raises(errors.KafkaError) as raised:
            producer.send(TOPIC, b"late", partition=0).result(TIMEOUT_S)
        assert raised.value.code == ErrorCode.REQUEST_TIMED_OUT
        assert producer.send(TOPIC, b"next", partition=0).result(TIMEOUT_S).offset == 0
        assert producer.producer_epoch == 1
    assert [v for _, _, v in logged(cluster, 0)] == [b"next"]


def test_exhausted_epoch_gets_a_new_producer_id(idempotent_cluster: FakeCluster) -> None:
    """At epoch 32767 (int16) there is no epoch to bump to: a new producer id from InitProducerId."""
    cluster = idempotent_cluster
    cluster.init_producer_epoch = 32_767
    with Producer(cluster.bootstrap, linger_ms=1, enable_idempotence=True) as producer:
        assert producer.send(TOPIC, b"a", partition=0).result(TIMEOUT_S).offset == 0
        first_id = producer.producer_id
        cluster.init_producer_epoch = 0
        cluster.inject(TOPIC, 0, [ErrorCode.MESSAGE_TOO_LARGE])
        with pytest.raises(errors.KafkaError):
            producer.send(TOPIC, b"lost", partition=0).result(TIMEOUT_S)
        assert producer.send(TOPIC, b"b", partition=0).result(TIMEOUT_S).offset == 1
        assert (producer.producer_epoch, producer.producer_id != first_id) == (0, True)
    assert producer_fields(cluster, 0) == [(first_id, 32_767, 0, 1), (producer.producer_id, 0, 0, 1)]
