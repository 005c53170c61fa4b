"""Offset expiration (KIP-211, ``offsets.retention.minutes``) and the offsets of deleted topics, on real
broker processes with short settings: retention 0 (an Empty group's offsets expire at the next check)
and a check every 200 ms. The timing rules themselves are unit-tested on the coordinator core
(tests/unit/broker/test_group_offsets_retention.py); here: the settings reach the coordinator, the
check runs on its timer, a topic deletion reaches it through the metadata, and the removals are
tombstones in ``__consumer_offsets`` (so a new coordinator would not load them again), read from the
topic with confluent-kafka as any Kafka client reads it (the records are Kafka's own format).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_cluster import BrokerCluster, running_cluster, wait_for
from confluent_kafka import Consumer, KafkaError, TopicPartition
from group_stub import SESSION_MS, Coordinator, committed_codes

from broker.group.metadata import OFFSETS_TOPIC, GroupMetadataRecord, OffsetCommitRecord, OffsetsRecord
from broker.group.record_serde import decode_record
from proto.errors import ErrorCode

pytestmark = pytest.mark.integration

CHECK_MS = 200
OVERRIDES = {
    "offsets.retention.minutes": "0",
    "offsets.retention.check.interval.ms": str(CHECK_MS),
    "group.min.session.timeout.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",  # one partition: every group's records in one log
}
WAIT_S = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("offsets-retention")), **OVERRIDES) as bc:
        yield bc


@pytest.fixture
def coordinator(cluster: BrokerCluster, request: pytest.FixtureRequest) -> Iterator[Coordinator]:
    with Coordinator(cluster, f"group-{request.node.name}") as c:  # one group per test
        yield c


def offsets_records(cluster: BrokerCluster, group: str) -> list[OffsetsRecord]:
    """The committed records of ``group`` in ``__consumer_offsets`` (one partition), in log order: a
    confluent-kafka consumer reads the partition from its start to the high watermark."""
    consumer = Consumer({"bootstrap.servers": cluster.cluster.kafka_bootstrap, "group.id": "offsets-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
    records: list[OffsetsRecord] = []
    deadline = time.monotonic() + WAIT_S
    try:
        consumer.assign([TopicPartition(OFFSETS_TOPIC, 0, 0)])
        while True:
            assert time.monotonic() < deadline, f"{OFFSETS_TOPIC}-0 not read to its end in {WAIT_S} s"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return [r for r in records if r.group == group]
                raise AssertionError(f"reading {OFFSETS_TOPIC}: {msg.error()}")
            records.append(decode_record(msg.key(), msg.value()))
    finally:
        consumer.close()


def wait_tombstones(cluster: BrokerCluster, group: str, expected: list[OffsetsRecord]) -> None:
    """Until every record of ``expected`` is committed in ``__consumer_offsets``."""

    def present() -> bool:
        records = offsets_records(cluster, group)
        return all(r in records for r in expected)

    wait_for(present, WAIT_S, f"tombstones {expected} committed in {OFFSETS_TOPIC}")


def stable_member(coordinator: Coordinator) -> tuple[str, int]:
    joined = coordinator.join()
    synced = coordinator.sync(joined.member_id, joined.generation_id, {joined.member_id: b"all"})
    assert synced.error_code == ErrorCode.NONE, synced
    return joined.member_id, joined.generation_id


def committed_while_alive(coordinator: Coordinator, member: tuple[str, int]) -> dict[tuple[str, int], int]:
    """The group's offsets, heartbeating first (its session is 1.5 s; retention applies once it empties)."""
    assert coordinator.heartbeat(*member) == ErrorCode.NONE
    return coordinator.fetch_offsets()


def test_an_active_group_keeps_its_offsets_and_loses_them_once_empty(
    cluster: BrokerCluster, coordinator: Coordinator
) -> None:
    topic = "retention-active"
    cluster.create_topic(topic, partitions=2)
    member = stable_member(coordinator)
    answer = coordinator.commit({0: 5, 1: 6}, topic, *member)
    assert committed_codes(answer) == [0, 0], answer
    # retention 0 and many checks meanwhile: a group with a member keeps everything
    deadline = time.monotonic() + 10 * CHECK_MS / 1000
    while time.monotonic() < deadline:
        assert committed_while_alive(coordinator, member) == {(topic, 0): 5, (topic, 1): 6}
        time.sleep(SESSION_MS / 1000 / 5)
    assert coordinator.leave(member[0]) == ErrorCode.NONE
    wait_for(lambda: coordinator.fetch_offsets() == {}, WAIT_S, "the offsets of the emptied group expiring")
    wait_for(lambda: coordinator.state() == "Dead", WAIT_S, "the group without offsets removed")
    group = coordinator.group
    expected = [OffsetCommitRecord(group, topic, p, None) for p in (0, 1)]
    wait_tombstones(cluster, group, [*expected, GroupMetadataRecord(group, None)])


def test_standalone_commits_expire(cluster: BrokerCluster, coordinator: Coordinator) -> None:
    topic = "retention-standalone"
    cluster.create_topic(topic)
    wait_for(
        lambda: committed_codes(coordinator.commit({0: 3}, topic)) == [ErrorCode.NONE],
        WAIT_S,
        "a standalone commit (generation -1)",
    )
    wait_for(lambda: coordinator.fetch_offsets() == {}, WAIT_S, "the standalone offset expiring")
    wait_tombstones(cluster, coordinator.group, [OffsetCommitRecord(coordinator.group, topic, 0, None)])


def test_a_deleted_topic_takes_its_offsets_from_an_active_group(
    cluster: BrokerCluster, coordinator: Coordinator
) -> None:
    """Kafka's onPartitionsDeleted: the deletion reaches the coordinator through the metadata log;
    the group (alive, so retention does not apply) keeps the offsets of its other topic."""
    doomed, kept = "retention-doomed", "retention-kept"
    cluster.create_topic(doomed)
    cluster.create_topic(kept)
    member = stable_member(coordinator)
    for topic in (doomed, kept):
        answer = coordinator.commit({0: 9}, topic, *member)
        assert committed_codes(answer) == [ErrorCode.NONE], answer
    assert committed_while_alive(coordinator, member) == {(doomed, 0): 9, (kept, 0): 9}
    assert [r.error for r in cluster.admin.delete_topics([doomed])] == [None]

    def doomed_gone() -> bool:
        time.sleep(SESSION_MS / 1000 / 5)
        return committed_while_alive(coordinator, member) == {(kept, 0): 9}

    wait_for(doomed_gone, WAIT_S, f"the offsets of deleted {doomed} removed")
    wait_tombstones(cluster, coordinator.group, [OffsetCommitRecord(coordinator.group, doomed, 0, None)])
    assert coordinator.leave(member[0]) == ErrorCode.NONE
