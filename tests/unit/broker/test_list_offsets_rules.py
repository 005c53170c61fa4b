"""ListOffsets on a new leader whose HW lags its leader epoch's start offset, through the Kafka request
processor over a real ReplicaManager (``test_kafka_handlers.Broker``).

Rule under test (Kafka's ``Partition.fetchOffsetForTimestamp``): until the followers have fetched in the
new epoch, the leader's HW is below the epoch's start offset and the committed end is unknown: LATEST,
and a timestamp lookup with no answer below the HW, get OFFSET_NOT_AVAILABLE (78) from v5 and
LEADER_NOT_AVAILABLE (5) before (KafkaApis); EARLIEST and a lookup found below the HW still answer.
LATEST's leader epoch is the leader's current one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.replica.replica_requests import FetchRequestPartition
from metadata.records import PartitionChangeRecord, PartitionRecord, TopicRecord
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from storage.record_batch import build_batch
from tests.unit.broker.test_kafka_handlers import Broker

TOPIC, TOPIC_ID = "u", "AAAAAAAAAAAAAAAAAAAAAw"
LATEST, EARLIEST = -1, -2
STAMP_MS = 1_700_000_000_000


def _apply(broker: Broker, *records) -> None:
    image = broker.manager.image
    image.apply_batch(records, image.offset + 1)
    broker.manager.apply_image(image, 0)


def _produce(broker: Broker, count: int) -> None:
    batch = build_batch([(None, b"x", (), STAMP_MS + i) for i in range(count)])
    data = m.ProduceRequestPartitionProduceData(index=0, records=batch)
    topic = m.ProduceRequestTopicProduceData(name=TOPIC, partition_data=[data])
    request = m.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[topic])
    assert broker.call(ApiKey.PRODUCE, 9, request).responses[0].partition_responses[0].error_code == 0


def _list_offset(
    broker: Broker, version: int, timestamp: int
) -> m.ListOffsetsResponseListOffsetsPartitionResponse:
    part = m.ListOffsetsRequestListOffsetsPartition(partition_index=0, timestamp=timestamp)
    request = m.ListOffsetsRequest(
        replica_id=-1, topics=[m.ListOffsetsRequestListOffsetsTopic(name=TOPIC, partitions=[part])]
    )
    return broker.call(ApiKey.LIST_OFFSETS, version, request).topics[0].partitions[0]


@pytest.fixture
def lagging(tmp_path: Path) -> Broker:
    """101 led epoch 0 of u-0 (replicas 101, 102) and wrote 3 records that 102 never fetched (HW 0);
    102 led an empty epoch 1; 101 leads again in epoch 2, which starts at offset 3, above its HW."""
    broker = Broker(tmp_path)
    _apply(broker, TopicRecord(TOPIC, TOPIC_ID), PartitionRecord(TOPIC_ID, 0, (101, 102), (101, 102), 101, 0))
    _produce(broker, 3)
    _apply(broker, PartitionChangeRecord(TOPIC_ID, 0, leader=102))
    _apply(broker, PartitionChangeRecord(TOPIC_ID, 0, leader=101))
    partition = broker.manager.partitions[(TOPIC, 0)]
    assert (partition.leader_epoch, partition.leader_epoch_start_offset, partition.high_watermark) == (
        2,
        3,
        0,
    )
    return broker


@pytest.mark.parametrize(
    ("version", "code"),
    [
        pytest.param(1, ErrorCode.LEADER_NOT_AVAILABLE, id="v1"),
        pytest.param(4, ErrorCode.LEADER_NOT_AVAILABLE, id="v4"),
        pytest.param(5, ErrorCode.OFFSET_NOT_AVAILABLE, id="v5"),
        pytest.param(7, ErrorCode.OFFSET_NOT_AVAILABLE, id="v7"),
    ],
)
def test_latest_is_not_available_while_the_hw_lags_the_epoch_start(
    lagging: Broker, version: int, code
) -> None:
    assert _list_offset(lagging, version, LATEST).error_code == code


@pytest.mark.parametrize("version", [1, 5, 7])
def test_timestamp_with_no_offset_below_the_hw_is_not_available_while_it_lags(
    lagging: Broker, version: int
) -> None:
    got = _list_offset(lagging, version, STAMP_MS)  # offset 0 has it, but 0 is not below the HW 0
    expected = ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE
    assert got.error_code == expected


def test_earliest_answers_while_the_hw_lags(lagging: Broker) -> None:
    got = _list_offset(lagging, 7, EARLIEST)
    assert (got.error_code, got.offset) == (ErrorCode.NONE, 0)


def test_latest_answers_the_hw_and_the_current_leader_epoch_once_caught_up(lagging: Broker) -> None:
    """Once the follower fetched in the new epoch the HW passes the epoch start: LATEST = HW, in the
    leader's current epoch."""
    manager = lagging.manager
    for fetch_offset, last_fetched_epoch in ((0, None), (3, 0)):
        item = FetchRequestPartition((TOPIC, 0), fetch_offset, 1 << 20, 2, last_fetched_epoch)
        manager.fetch_for_follower(102, manager.image.brokers[102].broker_epoch, [item], 1 << 20, 1, 0, 0,
                                   lambda _answers: None, lambda: 0)  # fmt: skip
    assert manager.partitions[(TOPIC, 0)].high_watermark == 3
    got = _list_offset(lagging, 7, LATEST)
    assert (got.error_code, got.offset, got.leader_epoch) == (ErrorCode.NONE, 3, 2)
