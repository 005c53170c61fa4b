"""What a follower does with its leader's fetch answer: the actions the replica fetcher
(``broker.follower.fetcher.ReplicaFetcher``) decides and the replica manager applies to the local log
(``ReplicaManager.apply_fetch_action``), and the view of the local log the fetcher decides a truncation
from (``LocalLogView``).

They live in the replica wing because the replica manager applies them: the follower wing imports
the replica wing, never the reverse (docs/architecture.md, "Import rules"). Immutable values.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.replica.divergence import EpochEntry
from proto.errors import ErrorCode
from proto.kafka_types import TopicPartition


@dataclass(frozen=True, slots=True)
class LocalLogView:
    """What the fetcher needs to know of the local log to compute a truncation."""

    epoch_entries: tuple[EpochEntry, ...]
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class AppendRecords:
    topic_partition: TopicPartition
    records: object
    leader_high_watermark: int
    leader_log_start_offset: int


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Truncate the local log to ``offset``. ``repeated`` counts how many times in a row the leader gave
    this same answer to this same position (0: the first time); from 1 on the truncation makes no
    progress, the partition is backed off and the driver warns once, at 1."""

    topic_partition: TopicPartition
    offset: int
    reason: str
    repeated: int = 0


@dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt:
    topic_partition: TopicPartition
    offset: int


@dataclass(frozen=True, slots=True)
class Fenced:
    """The leader says this replica's leader epoch is stale: wait for the metadata log."""

    topic_partition: TopicPartition
    message: str


@dataclass(frozen=True, slots=True)
class BackedOff:
    topic_partition: TopicPartition
    code: ErrorCode
    message: str


FetchAction = AppendRecords | TruncateTo | TruncateFullyAndStartAt | Fenced | BackedOff
