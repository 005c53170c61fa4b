"""Bad input end to end on a real 3 + 3 cluster, where tests/integration/kafka/test_kafka_bad_input.py
does not already cover it (issue 15 §3 facts, §5).

- A real client (confluent-kafka) sends a record over the topic's ``max.message.bytes``: its delivery
  report says MSG_SIZE_TOO_LARGE (the broker's MESSAGE_TOO_LARGE), nothing is appended, and the same
  producer's next record is stored at offset 0.
- Raw Produce requests on one connection to a real broker: a batch with a wrong CRC gets
  CORRUPT_MESSAGE; a produce to a follower gets NOT_LEADER_OR_FOLLOWER with the current leader and
  its epoch (v10, KIP-951); a leader epoch newer than the leader's in Fetch gets UNKNOWN_LEADER_EPOCH
  (KIP-320; a fresh topic's epoch 0 has no older one to send, -1 means "unchecked"). The connection
  stays open after each (a per-partition error, not a protocol error) and nothing is appended.
- Frames the listener must refuse by closing the connection: a size prefix smaller than the request
  it carries (the header is cut short), a negative array count other than null's -1.
Every process is stopped by pid when the module ends, even on failure (``running_cluster``).
"""

from __future__ import annotations

import os
import socket
import struct

import pytest
from confluent_kafka import KafkaError, Producer

from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from storage.record_batch import build_batch
from tests.compat.clients import DEADLINE_S, read_confluent
from tests.integration.broker.broker_cluster import BrokerCluster
from tests.integration.kafka.test_kafka_bad_input import closed_by_broker
from tests.kafka_call import KafkaSocket

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

CRC_AT = 17  # baseOffset 8, batchLength 4, partitionLeaderEpoch 4, magic 1


def produce(conn: KafkaSocket, topic: str, records: bytes) -> m.ProduceResponsePartitionProduceResponse:
    """Produce v10 (KIP-951: errors name the current leader), acks=all, partition 0."""
    data = m.ProduceRequestPartitionProduceData(index=0, records=records)
    topic_data = [m.ProduceRequestTopicProduceData(name=topic, partition_data=[data])]
    request = m.ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=topic_data)
    return conn.call(request, 10, DEADLINE_S).responses[0].partition_responses[0]


def high_watermark(cluster: BrokerCluster, topic: str) -> int:
    return cluster.high_watermark(cluster.leader(topic), topic)


def test_a_record_over_max_message_bytes_is_refused_and_nothing_appended(
    compat_cluster: BrokerCluster,
) -> None:
    topic = "too-large"
    compat_cluster.create_topic(topic, partitions=1, min_insync_replicas="2", max_message_bytes="2000")
    producer = Producer({"bootstrap.servers": compat_cluster.cluster.kafka_bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 60_000})  # fmt: skip
    reports: list[tuple[int | None, int]] = []

    def on_delivery(err, msg) -> None:
        reports.append((None if err is None else err.code(), msg.offset()))

    producer.produce(topic, os.urandom(10_000), partition=0, on_delivery=on_delivery)  # incompressible
    assert producer.flush(DEADLINE_S) == 0
    assert reports == [(KafkaError.MSG_SIZE_TOO_LARGE, None)], reports
    assert high_watermark(compat_cluster, topic) == 0, "the refused record was appended"
    producer.produce(topic, b"small", partition=0, on_delivery=on_delivery)
    assert producer.flush(DEADLINE_S) == 0
    assert reports[1] == (None, 0), reports
    read = read_confluent(compat_cluster.cluster.kafka_bootstrap, topic, 1, 1)
    assert [r.value for r in read] == [b"small"]


def test_per_partition_errors_keep_the_connection_and_append_nothing(
    compat_cluster: BrokerCluster,
) -> None:
    topic = "raw-errors"
    compat_cluster.create_topic(topic, partitions=1, min_insync_replicas="2")
    leader = compat_cluster.leader(topic)
    info = compat_cluster.describe(topic)
    follower = next(b for b in info.replicas if b != leader)
    good = build_batch([(b"k", b"v", (), 1_700_000_000_000)])
    corrupt = bytearray(good)
    corrupt[CRC_AT] ^= 0xFF
    to_leader = KafkaSocket(compat_cluster.broker(leader).kafka_address, DEADLINE_S)
    to_follower = KafkaSocket(compat_cluster.broker(follower).kafka_address, DEADLINE_S)
    try:
        r = produce(to_leader, topic, bytes(corrupt))
        assert r.error_code == ErrorCode.CORRUPT_MESSAGE, ErrorCode(r.error_code).name
        r = produce(to_follower, topic, good)
        assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode(r.error_code).name
        assert (r.current_leader.leader_id, r.current_leader.leader_epoch) == (leader, info.leader_epoch)
        fetch = m.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
            m.FetchRequestFetchTopic(topic=topic, partitions=[m.FetchRequestFetchPartition(
                partition=0, current_leader_epoch=info.leader_epoch + 1, fetch_offset=0,
                partition_max_bytes=1 << 20)])])  # fmt: skip
        answer = to_leader.call(fetch, 11, DEADLINE_S).responses[0].partitions[0]
        assert answer.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode(answer.error_code).name
        assert high_watermark(compat_cluster, topic) == 0, "a refused batch was appended"
        r = produce(to_leader, topic, good)  # the same connection still serves
        assert (r.error_code, r.base_offset) == (ErrorCode.NONE, 0)
    finally:
        to_leader.close()
        to_follower.close()


@pytest.mark.parametrize("what", ["size prefix shorter than the request", "negative array count"])
def test_frames_that_lie_are_closed(what: str, compat_cluster: BrokerCluster) -> None:
    broker = compat_cluster.cluster.broker_nodes[0]
    header = struct.pack(">hhih", ApiKey.METADATA, 1, 1, 3) + b"bad"
    body = struct.pack(">i", -5)  # Metadata v1 topics: -1 is null (all topics), -5 is nothing
    frame = header + body
    data = struct.pack(">i", 6) + frame if what.startswith("size") else struct.pack(">i", len(frame)) + frame
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=DEADLINE_S) as sock:
        sock.sendall(data)
        assert closed_by_broker(sock), f"{what}: the broker kept the connection open"
    healthy = KafkaSocket(broker.kafka_address, DEADLINE_S)  # and the broker goes on serving
    try:
        assert healthy.call(m.ApiVersionsRequest(), 0, DEADLINE_S).error_code == 0
    finally:
        healthy.close()
