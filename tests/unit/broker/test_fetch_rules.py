"""Fetch answers as Kafka's ReplicaManager and KafkaApis build them, through the Kafka request processor
over a real ReplicaManager (``test_kafka_handlers.Broker``).

Rules under test: an error partition carries empty records, never null (Kafka's MemoryRecords.EMPTY;
librdkafka stops parsing the whole answer at a null records field).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from tests.unit.broker.test_kafka_handlers import Broker


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    return Broker(tmp_path)


@pytest.mark.parametrize("version", [13, 15, 16])
def test_unknown_topic_id_partition_carries_empty_records_not_null(broker: Broker, version: int) -> None:
    part = m.FetchRequestFetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    topic = m.FetchRequestFetchTopic(topic="", topic_id=uuid.UUID(int=12345), partitions=[part])
    request = m.FetchRequest(
        max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1, topics=[topic]
    )
    answer = broker.call(ApiKey.FETCH, version, request)
    got = answer.responses[0].partitions[0]
    assert got.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert got.records == b"", "a null records field stops librdkafka's parse of the whole answer"
