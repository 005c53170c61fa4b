"""The size limits of a fetch across its partitions (Kafka's ``ReplicaManager.readFromLocalLog``), on a
real ReplicaManager with real partition logs, for consumer and follower fetches alike.

Rule under test: every partition reads at most ``min(partition_max_bytes, what the request's max_bytes
has left)``; a first batch bigger than that is returned whole only until the first partition that
returned data (minOneMessage, so that a fetch always makes progress); after it, a batch that does not
fit gives its partition an empty answer. And the follower's fetcher rotates its partitions (Kafka's
``updateAndMoveToEnd``) so that one behind a busy partition is not starved by that rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.follower.fetcher import FetchedPartition, FetcherConfig, ReplicaFetcher
from broker.replica.replica_manager import (
    ProduceRequestPartition,
    ReplicaManager,
)
from broker.replica.replica_requests import FetchRequestPartition, FetchResult
from metadata.image import MetadataImage
from metadata.records import Endpoint, PartitionRecord, RegisterBrokerRecord, TopicRecord
from proto.clock import wall_clock_ms
from proto.errors import ErrorCode
from proto.kafka_types import TopicPartition
from storage.record_batch import build_batch

TOPIC, TOPIC_ID = "t", "topic-id-t"
LEADER, FOLLOWER = 101, 102
PARTITIONS = (0, 1, 2)
VALUE_BYTES = 5000
NO_LIMIT = 1 << 30


class _NoFetchers:
    def add_partition(self, *args) -> None: ...

    def remove_partition(self, tp) -> None: ...


@pytest.fixture
def leader(tmp_path: Path) -> ReplicaManager:
    """Broker 101 leads t-0..2 (replicas 101, 102; ISR 101); each partition holds one 5 KB batch."""
    image = MetadataImage()
    records = [
        RegisterBrokerRecord(b, f"inc-{b}", (Endpoint("PLAINTEXT", "127.0.0.1", b),), fenced=False)
        for b in (LEADER, FOLLOWER)
    ]
    records += [TopicRecord(TOPIC, TOPIC_ID)]
    records += [PartitionRecord(TOPIC_ID, p, (LEADER, FOLLOWER), (LEADER,), LEADER, 0) for p in PARTITIONS]
    image.apply_batch(records, 1)
    manager = ReplicaManager(
        LEADER, tmp_path, replica_lag_time_max_ms=1000, topic_defaults={}, fetchers=_NoFetchers(),
        send_alter_partition=lambda *_: None, on_deadline=lambda _ms: None, clock_ms=wall_clock_ms,
    )  # fmt: skip
    manager.apply_image(image, 0)
    for p in PARTITIONS:
        answers: dict = {}
        batch = build_batch([(None, bytes(VALUE_BYTES), (), 0)])
        manager.produce(1, 1000, [ProduceRequestPartition((TOPIC, p), batch, None)], 0, answers.update)
        assert answers[(TOPIC, p)].code == ErrorCode.NONE
    return manager


def _items(offsets: dict[int, int], partition_max_bytes: int) -> list[FetchRequestPartition]:
    return [FetchRequestPartition((TOPIC, p), o, partition_max_bytes, None, None) for p, o in offsets.items()]


def _consumer(manager: ReplicaManager, offsets: dict[int, int], max_bytes: int, partition_max_bytes: int):
    answers: dict[TopicPartition, FetchResult] = {}
    manager.fetch_for_consumer(_items(offsets, partition_max_bytes), max_bytes, 1, 0, 0, answers.update)
    return answers


def _follower(manager: ReplicaManager, offsets: dict[int, int], max_bytes: int, partition_max_bytes: int):
    answers: dict[TopicPartition, FetchResult] = {}
    epoch = manager.image.brokers[FOLLOWER].broker_epoch
    manager.fetch_for_follower(
        FOLLOWER, epoch, _items(offsets, partition_max_bytes), max_bytes, 1, 0, 0, answers.update, lambda: 0
    )
    return answers


READERS = [pytest.param(_consumer, id="consumer"), pytest.param(_follower, id="follower")]


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize(
    ("offsets", "max_bytes", "partition_max_bytes", "non_empty"),
    [
        pytest.param({0: 0, 1: 0, 2: 0}, NO_LIMIT, 1000, [0], id="partition-max-bytes"),
        pytest.param({0: 0, 1: 0, 2: 0}, 1000, NO_LIMIT, [0], id="request-max-bytes"),
        pytest.param({0: 0, 1: 0, 2: 0}, VALUE_BYTES + 1000, NO_LIMIT, [0], id="rest-of-max-bytes"),
        pytest.param({0: 1, 1: 0, 2: 0}, 1000, 1000, [1], id="first-non-empty-gets-min-one"),
        pytest.param({0: 0, 1: 0, 2: 0}, NO_LIMIT, NO_LIMIT, [0, 1, 2], id="all-fit"),
    ],
)
def test_oversize_batch_only_for_the_first_non_empty_partition(
    leader: ReplicaManager, read, offsets: dict[int, int], max_bytes: int, partition_max_bytes: int,
    non_empty: list[int],
) -> None:  # fmt: skip
    answers = read(leader, offsets, max_bytes, partition_max_bytes)
    assert all(r.code == ErrorCode.NONE for r in answers.values()), answers
    got = [p for p in offsets if answers[(TOPIC, p)].records]
    assert got == non_empty, {p: len(answers[(TOPIC, p)].records) for p in offsets}
    assert all(len(answers[(TOPIC, p)].records) > VALUE_BYTES for p in non_empty)


def test_follower_fetcher_rotates_a_partition_that_got_records_to_the_end() -> None:
    fetcher = ReplicaFetcher(LEADER, FOLLOWER, 1, FetcherConfig())
    for p in PARTITIONS:
        fetcher.add_partition((TOPIC, p), 0, None, 0)
    plan = fetcher.build_request(0)
    assert plan is not None
    answers = {
        (TOPIC, 0): FetchedPartition(ErrorCode.NONE, 1, 0, 1, None, b"batch", ""),
        (TOPIC, 1): FetchedPartition(ErrorCode.NONE, 0, 0, 0, None, b"", ""),
        (TOPIC, 2): FetchedPartition(ErrorCode.NONE, 0, 0, 0, None, b"", ""),
    }
    fetcher.handle_response(plan.request_id, answers, lambda tp: None, 0)
    fetcher.update_position((TOPIC, 0), 1, 0)
    plan = fetcher.build_request(0)
    assert plan is not None
    assert [p.topic_partition[1] for p in plan.partitions] == [1, 2, 0]
