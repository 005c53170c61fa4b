"""Produce and Fetch rules of Kafka's KafkaApis, ReplicaManager and LogValidator, through the Kafka request
processor over a real ReplicaManager (``test_kafka_handlers.Broker``: broker 101 leads ``t-0``).

Rules under test:
- a client cannot append to an internal topic: INVALID_TOPIC_EXCEPTION (17), "Cannot append to internal
  topic __consumer_offsets"; the group coordinator's own appends (AppendOrigin.COORDINATOR) still work;
- a client's control batch, a producer id with a negative base sequence and an empty batch are
  INVALID_RECORD (87), decided before the idempotent-producer state (Kafka validates first);
- KIP-110: zstd batches need Produce v7+ (UNSUPPORTED_COMPRESSION_TYPE (76) before, nothing appended)
  and Fetch v10+ (an older consumer gets the batches before the first zstd one, or
  UNSUPPORTED_COMPRESSION_TYPE when the fetch offset's batch is zstd).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.replica.replica_manager import ProduceRequestPartition
from metadata.records import PartitionRecord, TopicRecord
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from storage.batch_header import HEADER_SIZE, iter_batches
from storage.compression import CompressionType
from storage.log_validator import AppendOrigin
from storage.record_batch import _HEADER_STRUCT, _pack_batch, build_batch
from tests.unit.broker.test_kafka_handlers import Broker, fetch

OFFSETS_TOPIC, OFFSETS_ID = "__consumer_offsets", "AAAAAAAAAAAAAAAAAAAABA"
RECORD = (b"k", b"v" * 200, (), 1_000)


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    return Broker(tmp_path)


def _produce(broker: Broker, batch: bytes, version: int = 9, topic: str = "t"):
    data = m.ProduceRequestPartitionProduceData(index=0, records=batch)
    topic_data = [m.ProduceRequestTopicProduceData(name=topic, partition_data=[data])]
    request = m.ProduceRequest(acks=1, timeout_ms=1000, topic_data=topic_data)
    return broker.call(ApiKey.PRODUCE, version, request).responses[0].partition_responses[0]


def _log_end_offset(broker: Broker, topic: str = "t") -> int:
    return broker.manager.logs[(topic, 0)].log_end_offset


def test_client_cannot_append_to_an_internal_topic(broker: Broker) -> None:
    image = broker.manager.image
    image.apply_batch(
        [TopicRecord(OFFSETS_TOPIC, OFFSETS_ID), PartitionRecord(OFFSETS_ID, 0, (101,), (101,), 101, 0)],
        image.offset + 1,
    )
    broker.manager.apply_image(image, 0)
    got = _produce(broker, build_batch([RECORD]), topic=OFFSETS_TOPIC)
    assert got.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert got.error_message == "Cannot append to internal topic __consumer_offsets"
    assert _log_end_offset(broker, OFFSETS_TOPIC) == 0
    answers: dict = {}  # the group coordinator's path (broker.group.driver) stays open
    item = ProduceRequestPartition((OFFSETS_TOPIC, 0), build_batch([RECORD]), None)
    broker.manager.produce(1, 1000, [item], 0, answers.update, origin=AppendOrigin.COORDINATOR)
    assert answers[(OFFSETS_TOPIC, 0)].code == ErrorCode.NONE
    assert _log_end_offset(broker, OFFSETS_TOPIC) == 1


def _empty_batch(last_offset_delta: int) -> bytes:
    fields = list(_HEADER_STRUCT.unpack_from(build_batch([])))
    fields[6] = last_offset_delta
    return _pack_batch(tuple(fields), b"")


@pytest.mark.parametrize(
    ("batch", "says"),
    [
        pytest.param(
            build_batch([(b"\0\0\0\0", b"\0" * 6, (), 1_000)], control=True, producer_id=5, producer_epoch=0,
                        base_sequence=0, transactional=True),
            "Clients are not allowed to write control records", id="control",
        ),
        pytest.param(
            build_batch([RECORD], producer_id=5, producer_epoch=0, base_sequence=-1),
            "invalid sequence number -1", id="pid-negative-sequence",
        ),
        pytest.param(_empty_batch(-1), "holds no records", id="empty-delta-minus-1"),
        pytest.param(_empty_batch(0), "holds no records", id="empty-delta-0"),
    ],
)  # fmt: skip
def test_client_batches_kafka_refuses_are_invalid_record(broker: Broker, batch: bytes, says: str) -> None:
    got = _produce(broker, batch)
    assert got.error_code == ErrorCode.INVALID_RECORD, got
    assert says in (got.error_message or "")
    assert _log_end_offset(broker) == 0


def _zstd_batch() -> bytes:
    return build_batch([RECORD] * 3, compression=CompressionType.ZSTD)


@pytest.mark.parametrize(
    ("version", "code"),
    [(3, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE), (6, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
     (7, ErrorCode.NONE), (10, ErrorCode.NONE)],
)  # fmt: skip
def test_zstd_needs_produce_v7(broker: Broker, version: int, code: ErrorCode) -> None:
    got = _produce(broker, _zstd_batch(), version)
    assert got.error_code == code
    assert _log_end_offset(broker) == (3 if code == ErrorCode.NONE else 0)
    assert _produce(broker, build_batch([RECORD]), version).error_code == ErrorCode.NONE  # others still fine


def _compressions(records: bytes) -> list[int]:
    return [header.compression_type for _, header in iter_batches(records)]


@pytest.mark.parametrize("version", [4, 9, 10, 12])
def test_fetch_below_v10_never_carries_zstd(broker: Broker, version: int) -> None:
    for batch in (build_batch([RECORD]), _zstd_batch(), build_batch([RECORD])):  # offsets 0, 1-3, 4
        assert _produce(broker, batch, 7).error_code == ErrorCode.NONE
    whole = broker.call(ApiKey.FETCH, version, fetch(0, version)).responses[0].partitions[0]
    at_zstd = broker.call(ApiKey.FETCH, version, fetch(1, version)).responses[0].partitions[0]
    if version >= 10:
        assert _compressions(whole.records) == [
            CompressionType.NONE,
            CompressionType.ZSTD,
            CompressionType.NONE,
        ]
        assert at_zstd.error_code == ErrorCode.NONE
        return
    assert whole.error_code == ErrorCode.NONE
    assert _compressions(whole.records) == [CompressionType.NONE]  # up to the zstd batch
    assert (at_zstd.error_code, at_zstd.records) == (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, b"")
    assert at_zstd.high_watermark == 5
    after = broker.call(ApiKey.FETCH, version, fetch(4, version)).responses[0].partitions[0]
    assert len(after.records) > HEADER_SIZE and _compressions(after.records) == [CompressionType.NONE]
