"""pykraft.metadata_cache: what a client believes about leaders (Kafka's client ``Metadata``).

Rules: a leader epoch never goes backwards (a lagging broker's answer or hint is ignored); a
partition without a live, known leader has NO_LEADER; refreshes are rate-limited by
retry_backoff_ms while stale and happen every metadata_max_age_ms anyway.
"""

from __future__ import annotations

import pytest

from proto import broker_pb2, common_pb2
from proto.errors import ErrorCode
from pykraft.metadata_cache import NO_LEADER, MetadataCache
from pykraft.types import TopicPartition

TP = TopicPartition("t", 0)


def response(leader: int, epoch: int, brokers: tuple[int, ...] = (1, 2, 3), partitions: int = 1):
    return broker_pb2.MetadataResponse(
        brokers=[broker_pb2.BrokerEndpoint(node_id=b, host="127.0.0.1", port=9000 + b) for b in brokers],
        topics=[
            broker_pb2.TopicMetadata(
                name="t",
                partitions=[
                    broker_pb2.PartitionMetadata(partition=p, leader_id=leader, leader_epoch=epoch)
                    for p in range(partitions)
                ],
            )
        ],
    )


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [((1, 5), (2, 6), (2, 6)), ((1, 5), (2, 4), (1, 5)), ((1, 5), (1, 5), (1, 5))],
    ids=["newer-epoch-wins", "older-epoch-ignored", "same-epoch-kept"],
)
def test_leader_epochs_never_go_backwards(first, second, expected) -> None:
    cache = MetadataCache()
    cache.update(response(*first), now_ms=0)
    cache.update(response(*second), now_ms=1)
    assert (cache.leader_of(TP), cache.leader_epoch(TP)) == expected


@pytest.mark.parametrize(
    ("hint", "used"),
    [((2, 6), True), ((2, 5), False), ((9, 7), False), ((NO_LEADER, 7), False)],
    ids=["newer", "not-newer", "unknown-broker", "no-leader"],
)
def test_leader_hints(hint: tuple[int, int], used: bool) -> None:
    """KIP-951: a hint is used only when newer and naming a known broker; otherwise refresh."""
    cache = MetadataCache(retry_backoff_ms=0)
    cache.update(response(1, 5), now_ms=0)
    assert cache.update_leader(TP, *hint) is used
    assert cache.leader_of(TP) == (hint[0] if used else 1)
    assert cache.needs_refresh(1) is not used


def test_leader_not_among_brokers_is_no_leader() -> None:
    cache = MetadataCache()
    cache.update(response(7, 1), now_ms=0)
    assert cache.leader_of(TP) == NO_LEADER
    assert cache.leader_address(TP) is None
    assert cache.available_partitions("t") == []


def test_available_partitions_follow_updates() -> None:
    cache = MetadataCache()
    cache.update(response(NO_LEADER, 1, partitions=2), now_ms=0)
    assert cache.available_partitions("t") == []
    cache.update(response(2, 2, partitions=2), now_ms=1)
    assert cache.available_partitions("t") == [0, 1]
    assert cache.partition_count("t") == 2


def test_refresh_timing() -> None:
    cache = MetadataCache(retry_backoff_ms=100, metadata_max_age_ms=1000)
    cache.add_topics(["t"])
    assert cache.needs_refresh(0)
    cache.on_attempt(0)
    assert not cache.needs_refresh(50), "backoff between attempts"
    cache.update(response(1, 1), now_ms=60)
    assert not cache.needs_refresh(500), "fresh"
    assert cache.needs_refresh(1060), "max age"
    cache.request_update()
    assert cache.needs_refresh(200)


def test_unknown_topic_error_is_kept() -> None:
    cache = MetadataCache()
    error = common_pb2.Error(code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message="no such topic")
    cache.update(
        broker_pb2.MetadataResponse(topics=[broker_pb2.TopicMetadata(name="x", error=error)]), now_ms=0
    )
    assert cache.partition_count("x") is None
    assert cache.topic_error("x") == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such topic")
