"""ListOffsets (2), v0-7, and OffsetForLeaderEpoch (23), v2-4.

ListOffsets, per partition, on its leader (``ReplicaManager.list_offset``): timestamp -2 (EARLIEST)
= the log start offset, -1 (LATEST) = the HW (also the last stable offset, so read_committed gets the
same), a timestamp >= 0 = the first offset below the HW whose record is at least that recent (or
offset -1 when none is), -3 (MAX_TIMESTAMP, v7, KIP-734) = the batch holding the largest timestamp
below the HW. v0 answers in ``old_style_offsets``; the leader epoch of the offset from v4. While a new
leader's HW lags its epoch's start offset, LATEST (and a timestamp with no answer below the HW) is
OFFSET_NOT_AVAILABLE from v5, LEADER_NOT_AVAILABLE before (both retriable).

OffsetForLeaderEpoch (KIP-320, consumers validating their position after a leader change): the end
offset of the largest epoch <= the requested one, from the leader's epoch cache — real offsets, as
librdkafka resets a consumer that gets a negative one and kafka-python retries forever without the
API.
"""

from __future__ import annotations

from broker.kafka.handlers.context import BrokerServices, RequestContext
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from proto.kafka_types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, NO_OFFSET, TopicPartition

SPECS = {EARLIEST_TIMESTAMP: "EARLIEST", LATEST_TIMESTAMP: "LATEST", MAX_TIMESTAMP: "MAX_TIMESTAMP"}
MAX_TIMESTAMP_VERSION = 7
OFFSET_NOT_AVAILABLE_VERSION = 5  # older clients get LEADER_NOT_AVAILABLE (Kafka's KafkaApis)


def _epoch(value: int) -> int | None:
    return value if value >= 0 else None


def handle_list_offsets(
    services: BrokerServices, context: RequestContext, request: m.ListOffsetsRequest
) -> m.ListOffsetsResponse:
    topics = []
    for t in request.topics:
        partitions = [_list_offset(services, context.version, t.name, p) for p in t.partitions]
        topics.append(m.ListOffsetsResponseListOffsetsTopicResponse(name=t.name, partitions=partitions))
    return m.ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def _list_offset(
    services: BrokerServices, version: int, topic: str, p: m.ListOffsetsRequestListOffsetsPartition
) -> m.ListOffsetsResponseListOffsetsPartitionResponse:
    spec = SPECS.get(p.timestamp, "TIMESTAMP")
    too_new = spec == "MAX_TIMESTAMP" and version < MAX_TIMESTAMP_VERSION
    if p.timestamp < 0 and (spec == "TIMESTAMP" or too_new):
        return m.ListOffsetsResponseListOffsetsPartitionResponse(
            partition_index=p.partition_index, error_code=ErrorCode.INVALID_REQUEST
        )
    r = services.manager.list_offset(
        TopicPartition(topic, p.partition_index), spec, p.timestamp, _epoch(p.current_leader_epoch)
    )
    code = r.error.code
    if code == ErrorCode.OFFSET_NOT_AVAILABLE and version < OFFSET_NOT_AVAILABLE_VERSION:
        code = ErrorCode.LEADER_NOT_AVAILABLE
    return m.ListOffsetsResponseListOffsetsPartitionResponse(
        partition_index=p.partition_index, error_code=code,
        old_style_offsets=[r.offset] if r.error.ok and r.offset != NO_OFFSET else [],
        timestamp=r.timestamp_ms, offset=r.offset, leader_epoch=r.leader_epoch,
    )  # fmt: skip


def handle_offset_for_leader_epoch(
    services: BrokerServices, context: RequestContext, request: m.OffsetForLeaderEpochRequest
) -> m.OffsetForLeaderEpochResponse:
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            error, end = services.manager.offsets_for_leader_epoch(
                TopicPartition(t.topic, p.partition), _epoch(p.current_leader_epoch), p.leader_epoch
            )
            partitions.append(
                m.OffsetForLeaderEpochResponseEpochEndOffset(
                    error_code=error.code if error is not None else 0, partition=p.partition,
                    leader_epoch=end.leader_epoch if error is None else -1,
                    end_offset=end.end_offset if error is None else -1,
                )
            )
        topics.append(
            m.OffsetForLeaderEpochResponseOffsetForLeaderTopicResult(topic=t.topic, partitions=partitions)
        )
    return m.OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


HANDLERS = {
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
}
