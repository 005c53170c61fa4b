"""What the replica manager is asked and answers: its request and result values, and the callbacks.

The Kafka request handlers (``broker.kafka.handlers``) turn a decoded request into these values, call
``broker.replica.replica_manager.ReplicaManager`` and turn the results back into a response; the wire
structs never reach the replica manager. ``FetcherControl`` is the one interface the replica manager
calls out through to the follower side (``broker.follower.fetcher_driver``).

All values are frozen dataclasses; the sentinels are Kafka's (``proto.kafka_types``). A result with a
code other than NONE carries a message a person can act on. Thread-safety: immutable values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from broker.replica.divergence import EpochEndOffset
from proto.errors import OK, ApiError, ErrorCode
from proto.kafka_types import NO_EPOCH, NO_LEADER, NO_OFFSET, NO_TIMESTAMP, TopicPartition
from storage.file_slice import Records


class FetcherControl(Protocol):
    """The follower side: start or stop fetching a partition from its leader
    (broker.follower.fetcher_driver)."""

    def add_partition(
        self,
        leader_id: int,
        tp: TopicPartition,
        fetch_offset: int,
        last_fetched_epoch: int | None,
        leader_epoch: int,
    ) -> None: ...

    def remove_partition(self, tp: TopicPartition) -> None: ...


@dataclass(frozen=True, slots=True)
class ProduceResult:
    code: ErrorCode
    message: str = ""
    base_offset: int = NO_OFFSET
    log_append_time_ms: int = NO_TIMESTAMP
    log_start_offset: int = NO_OFFSET
    leader_id: int = NO_LEADER
    leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class ProduceRequestPartition:
    tp: TopicPartition
    records: bytes | bytearray | memoryview  # a produce request's: a view of its frame
    current_leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class FetchRequestPartition:
    tp: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int | None
    last_fetched_epoch: int | None
    topic_id: str = ""  # a follower's: the incarnation of the topic it replicates ("" = not given)


@dataclass(frozen=True, slots=True)
class FetchResult:
    """One partition of a fetch answer (consumer or follower)."""

    code: ErrorCode
    message: str = ""
    high_watermark: int = NO_OFFSET
    log_start_offset: int = NO_OFFSET
    log_end_offset: int = NO_OFFSET
    diverging_epoch: EpochEndOffset | None = None
    records: Records = b""  # a FileSlice when the fetch asked for file_slices
    leader_id: int = NO_LEADER
    leader_epoch: int = NO_EPOCH

    @property
    def answers_now(self) -> bool:
        """An error or a diverging epoch: the fetch must be answered without waiting."""
        return self.code != ErrorCode.NONE or self.diverging_epoch is not None


@dataclass(frozen=True, slots=True)
class ListOffsetResult:
    """ListOffsets (and DeleteRecords: ``offset`` is the new log start offset) for one partition."""

    error: ApiError = OK
    offset: int = NO_OFFSET
    timestamp_ms: int = NO_TIMESTAMP
    leader_epoch: int = NO_EPOCH


ProduceCallback = Callable[[dict[TopicPartition, ProduceResult]], None]
FetchCallback = Callable[[dict[TopicPartition, FetchResult]], None]
