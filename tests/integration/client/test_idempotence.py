"""Idempotent producer (KIP-98) against real processes: 3 controllers + 3 brokers.

Issue 6: with a fault that drops the first answer to every Produce request (the broker appended;
the producer does not know) every batch is retried, and the leader is SIGKILLed in the middle; the
retries reach the old leader or the new one, which rebuilt the producer state from the replicated
batches. The topic must hold each record exactly once, in send order per partition.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proto import errors
from proto.errors import ErrorCode
from pykraft.consumer import Consumer
from pykraft.producer import Producer
from pykraft.types import ConsumerRecord, RecordMetadata, TopicPartition
from storage.record_batch import build_batch
from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster, wait_for

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
    # the module's other tests (in any order) want three live brokers: the restarted one rejoins
    for p in range(PARTITIONS):
        cluster.wait_isr(topic, {101, 102, 103}, timeout_s=TIMEOUT_S, partition=p)


def test_a_refused_batch_does_not_block_the_later_ones(cluster: BrokerCluster) -> None:
    """KIP-360 on real brokers: a batch refused MESSAGE_TOO_LARGE (topic max.message.bytes=1000) leaves
    a hole in its partition's sequences; the producer bumps its epoch, restarts at sequence 0, and
    the later records land once, in order (without the bump: OUT_OF_ORDER_SEQUENCE_NUMBER forever)."""
    topic = "idempotent-hole"
    cluster.create_topic(topic, partitions=1, min_insync_replicas="2", max_message_bytes="1000")
    cluster.wait_isr(topic, {101, 102, 103})
    with Producer(cluster.cluster.bootstrap, linger_ms=1, request_timeout_ms=5000,
                  enable_idempotence=True) as producer:  # fmt: skip
        assert producer.send(topic, b"first", partition=0).result(TIMEOUT_S).offset == 0
        with pytest.raises(errors.KafkaError) as raised:
            producer.send(topic, b"x" * 2000, partition=0).result(TIMEOUT_S)
        assert raised.value.code == ErrorCode.MESSAGE_TOO_LARGE
        later = [producer.send(topic, b"after-%d" % i, partition=0) for i in range(10)]
        producer.flush(TIMEOUT_S)
        assert [f.result(0).offset for f in later] == list(range(1, 11))
        assert producer.producer_epoch == 1
    values = [v for _, v in cluster.read_all(cluster.leader(topic), topic)]
    assert values == [b"first"] + [b"after-%d" % i for i in range(10)]


def test_idle_producer_state_expires_and_the_producer_carries_on(tmp_path: Path) -> None:
    """KIP-854 on a real broker started with ``producer.id.expiration.ms=3000``: a producer whose every
    batch is retried (first answer dropped) over 1.5 x the expiration is never treated as new; once
    idle, its state is gone no earlier than 3 s after its last batch (a gap probe turns from
    OUT_OF_ORDER_SEQUENCE_NUMBER into UNKNOWN_PRODUCER_ID); its next record is then sent under a
    bumped epoch from sequence 0 (KIP-360). The log holds every record once, in order."""
    expiration_ms = 3000
    with running_cluster(tmp_path, brokers=1, **{"producer.id.expiration.ms": str(expiration_ms)}) as bc:
        topic = "expiring"
        bc.create_topic(topic, partitions=1, rf=1, min_insync_replicas="1")
        leader = bc.leader(topic)
        producer = Producer(
            bc.cluster.bootstrap, linger_ms=1, retry_backoff_ms=20, request_timeout_ms=2000,
            delivery_timeout_ms=expiration_ms - 500, enable_idempotence=True, test_drop_first_response=True,
        )  # fmt: skip
        try:
            sent, started = 0, time.monotonic()
            while time.monotonic() - started < 1.5 * expiration_ms / 1000:  # live: one batch every 0.5 s
                last_send_ms = time.time() * 1000  # the broker's last append of us is later than this
                producer.send(topic, b"%d" % sent, partition=0).result(TIMEOUT_S)
                sent += 1
                time.sleep(0.5)  # pacing the workload, not waiting for a condition
            epoch = producer.producer_epoch

            def probe() -> ErrorCode:
                records = build_batch([(None, b"probe", (), 0)], producer_id=producer.producer_id,
                                      producer_epoch=epoch, base_sequence=sent + 10)  # fmt: skip
                return bc.produce_raw(leader, topic, records, acks=1).code

            assert probe() == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            wait_for(lambda: probe() == ErrorCode.UNKNOWN_PRODUCER_ID, 30, "the idle producer's expiry", 0.1)
            idle_ms = time.time() * 1000 - last_send_ms
            assert idle_ms >= expiration_ms, f"expired after only {idle_ms:.0f} ms idle"
            after = producer.send(topic, b"after", partition=0).result(TIMEOUT_S)
            assert (producer.producer_epoch, after.offset) == (epoch + 1, sent)
        finally:
            producer.close(5.0)
        values = [v for _, v in bc.read_all(leader, topic)]
        assert values == [b"%d" % i for i in range(sent)] + [b"after"]


def test_idempotence_requires_acks_all() -> None:
    """A contradictory config is refused with an actionable error, before anything is sent."""
    with pytest.raises(ValueError, match="acks='all'"):
        Producer("127.0.0.1:1", acks=1, enable_idempotence=True)
    with pytest.raises(ValueError, match=r"max\.in\.flight"):
        Producer("127.0.0.1:1", max_in_flight_requests_per_connection=6, enable_idempotence=True)
