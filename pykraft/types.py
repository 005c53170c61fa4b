"""The values the client hands to applications: partitions, delivery reports and consumed records.

``TopicPartition`` is the accumulator's (one class everywhere in ``pykraft``, so dictionary keys
match); ``RecordMetadata`` is what a producer future resolves to, ``ConsumerRecord`` what
``Consumer.poll`` returns. All immutable: ``ConsumerRecord`` is a ``NamedTuple`` because a consumer
builds one per record on its hot path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from pykraft.accumulator import TopicPartition
from storage.record_batch import TimestampType

__all__ = ["NO_OFFSET", "NO_TIMESTAMP", "ConsumerRecord", "RecordMetadata", "TimestampType", "TopicPartition"]

NO_OFFSET = -1  # Kafka's answer for an acks=0 delivery: the offset is not known
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed (Kafka's ``RecordMetadata``).

    ``offset`` is ``NO_OFFSET`` with ``acks=0``. ``timestamp_ms`` is the broker's log append time
    when the topic uses LogAppendTime, otherwise the record's create time.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    serialized_key_size: int
    serialized_value_size: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ConsumerRecord(NamedTuple):
    """One record read by ``Consumer.poll``; ``leader_epoch`` is the epoch of the batch holding it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    timestamp_type: TimestampType
    leader_epoch: int
