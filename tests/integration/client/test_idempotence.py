"""Idempotent producer (KIP-98) against real processes: 3 controllers + 3 brokers.

- A batch the broker refuses (MESSAGE_TOO_LARGE) leaves a hole in the partition's sequences: a
  confluent-kafka (librdkafka) idempotent producer carries on and the later records land once, in
  order.
- KIP-854 expiry, on the broker: a producer id whose batches keep coming (each sent twice, as a
  retry after a lost answer would be) is never treated as new; once idle, its state is gone no
  earlier than ``producer.id.expiration.ms`` after its last batch, so that a batch at its old epoch
  with any sequence is accepted (as by Kafka), its retry is a duplicate, and a bumped epoch from
  sequence 0 is accepted too. Raw Produce requests with a fixed producer id, so that every answer
  is seen.

Retried batches after a lost answer, with a leader SIGKILLed meanwhile, are covered with
confluent-kafka by tests/chaos (``test_retried_sends_duplicate_only_without_idempotence``: the chaos
proxy cuts Produce answers) and tests/compat (``test_production_across_a_leader_sigkill_...``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from proto.errors import ErrorCode
from storage.record_batch import build_batch
from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIMEOUT_S = 90.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("idempotence"))) as bc:
        yield bc


def test_a_refused_batch_does_not_block_the_later_ones(cluster: BrokerCluster) -> None:
    """A batch refused MESSAGE_TOO_LARGE (topic max.message.bytes=1000) leaves a hole in its
    partition's sequences; the producer goes on (librdkafka bumps its epoch, KIP-360) and the later
    records land once, in order (without that: OUT_OF_ORDER_SEQUENCE_NUMBER forever)."""
    topic = "idempotent-hole"
    cluster.create_topic(topic, partitions=1, min_insync_replicas="2", max_message_bytes="1000")
    cluster.wait_isr(topic, {101, 102, 103})
    producer = Producer({"bootstrap.servers": cluster.cluster.kafka_bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 1})  # fmt: skip
    reports: list[tuple[bytes, KafkaError | None, int]] = []

    def send(value: bytes) -> None:
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda e, m: reports.append((m.value(), e, m.offset())))  # fmt: skip
        assert producer.flush(TIMEOUT_S) == 0, f"{value[:10]!r} not reported within {TIMEOUT_S} s"

    send(b"first")
    send(b"x" * 2000)
    for i in range(10):
        producer.produce(topic, b"after-%d" % i, partition=0,
                         on_delivery=lambda e, m: reports.append((m.value(), e, m.offset())))  # fmt: skip
    assert producer.flush(TIMEOUT_S) == 0
    (first, big, *later) = reports
    assert first[1] is None and first[2] == 0, first
    assert big[1] is not None and big[1].code() == KafkaError.MSG_SIZE_TOO_LARGE, big
    assert [(v, e, o) for v, e, o in later] == [(b"after-%d" % i, None, 1 + i) for i in range(10)]
    values = [v for _, v in cluster.read_all(cluster.leader(topic), topic)]
    assert values == [b"first"] + [b"after-%d" % i for i in range(10)]


def test_idle_producer_state_expires_and_the_producer_carries_on(tmp_path: Path) -> None:
    """KIP-854 on a real broker started with ``producer.id.expiration.ms=3000``: a producer whose every
    batch comes twice (the retry is answered as a duplicate, not appended) over 1.5 x the expiration
    is never treated as new; once idle, its state is gone no earlier than 3 s after its last batch: a
    gap probe at the same epoch turns from OUT_OF_ORDER_SEQUENCE_NUMBER into appended, because Kafka
    accepts any sequence from a producer it knows no epoch of (this was UNKNOWN_PRODUCER_ID while
    gRPC could reorder requests); the probe's retry is a duplicate answered with its offset; its next
    record, under a bumped epoch from sequence 0 (KIP-360), is appended. The log holds every record
    once."""
    expiration_ms = 3000
    producer_id = 4242
    with running_cluster(tmp_path, brokers=1, **{"producer.id.expiration.ms": str(expiration_ms)}) as bc:
        topic = "expiring"
        bc.create_topic(topic, partitions=1, rf=1, min_insync_replicas="1")
        leader = bc.leader(topic)

        def produce(value: bytes, epoch: int, sequence: int):
            records = build_batch([(None, value, (), 0)], producer_id=producer_id, producer_epoch=epoch,
                                  base_sequence=sequence)  # fmt: skip
            return bc.produce_raw(leader, topic, records, acks=1)

        sent, started = 0, time.monotonic()
        while time.monotonic() - started < 1.5 * expiration_ms / 1000:  # live: one batch every 0.5 s
            last_send_ms = time.time() * 1000  # the broker's last append of us is later than this
            first = produce(b"%d" % sent, 0, sent)
            retry = produce(b"%d" % sent, 0, sent)
            assert (first.code, retry.code) == (ErrorCode.NONE, ErrorCode.NONE), (first, retry)
            assert retry.base_offset == first.base_offset == sent, "the retry is answered as a duplicate"
            sent += 1
            time.sleep(0.5)  # pacing the workload, not waiting for a condition

        def probe() -> ErrorCode:
            return produce(b"probe", 0, sent + 10).code

        probes = []  # a refused probe appends nothing; the first accepted one lands at offset `sent`

        def probe_accepted() -> bool:
            probes.append(produce(b"probe", 0, sent + 10))
            assert probes[-1].code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.NONE), probes[-1]
            return probes[-1].code == ErrorCode.NONE

        assert not probe_accepted()
        wait_for(probe_accepted, 30, "the idle producer's expiry", 0.1)
        idle_ms = time.time() * 1000 - last_send_ms
        assert idle_ms >= expiration_ms, f"expired after only {idle_ms:.0f} ms idle"
        assert probes[-1].base_offset == sent, probes[-1]
        retry = produce(b"probe", 0, sent + 10)
        assert (retry.code, retry.base_offset) == (ErrorCode.NONE, sent), retry
        after = produce(b"after", 1, 0)
        assert (after.code, after.base_offset) == (ErrorCode.NONE, sent + 1), after
        values = [v for _, v in bc.read_all(leader, topic)]
        assert values == [b"%d" % i for i in range(sent)] + [b"probe", b"after"]
