"""The image: record codec round trips, replay errors, and snapshot + later records == full replay."""

from __future__ import annotations

import pytest

from metadata.api import AlterableConfig, AlterConfigsResource, ElectLeadersRequest, NewPartitions
from metadata.configs import AlterConfigOp
from metadata.image import MetadataImage, MetadataReplayError
from metadata.partition_change import Election
from metadata.records import (
    BrokerRegistrationChangeRecord,
    ClusterIdRecord,
    ConfigRecord,
    ConfigResourceType,
    CorruptMetadataError,
    Endpoint,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    decode_batch,
    decode_snapshot,
    encode_batch,
)
from proto.kafka_types import NO_LEADER

ALL_RECORDS = [
    RegisterBrokerRecord(1, "inc", (Endpoint("BROKER", "127.0.0.1", 9092),), "r1", True, 0, False),
    RegisterBrokerRecord(2, "inc2", (), "", False, 17, True),
    UnregisterBrokerRecord(1, 5),
    BrokerRegistrationChangeRecord(1, 5, fenced=False),
    BrokerRegistrationChangeRecord(1, 5, in_controlled_shutdown=True),
    BrokerRegistrationChangeRecord(1, 5),
    TopicRecord("t", "id"),
    PartitionRecord("id", 3, (1, 2), (2,), 2, 4, 6),
    PartitionChangeRecord("id", 3, leader=NO_LEADER),
    PartitionChangeRecord("id", 3, isr=(1, 2)),
    PartitionChangeRecord("id", 3, leader=1, isr=(1,)),
    RemoveTopicRecord("id"),
    ConfigRecord(ConfigResourceType.TOPIC, "t", "retention.ms", "5"),
    ConfigRecord(ConfigResourceType.CLUSTER, "", "retention.ms", None),
    ProducerIdsRecord(1, 5, 2000),
    ClusterIdRecord("MkU3OEVBNTcwNTJENDM2Qg"),
]


@pytest.mark.parametrize("record", ALL_RECORDS, ids=lambda r: type(r).__name__)
def test_record_round_trip(record) -> None:
    """Every record survives encode/decode unchanged, including unset optional fields."""
    assert decode_batch(encode_batch([record])) == (record,)


def test_empty_batch_is_a_barrier() -> None:
    image = MetadataImage()
    image.apply_batch(decode_batch(b""), 7)
    assert image.offset == 7


@pytest.mark.parametrize("data", [b"\xff\xff\xff", b"\x0a\x05\x22"], ids=["garbage", "truncated"])
def test_corrupt_bytes_are_a_named_error(data: bytes) -> None:
    """Bytes that do not decode raise CorruptMetadataError, never a bare exception."""
    with pytest.raises(CorruptMetadataError):
        decode_batch(data)
    with pytest.raises(CorruptMetadataError):
        decode_snapshot(data)


@pytest.mark.parametrize(
    "record",
    [
        PartitionChangeRecord("nope", 0, leader=1),
        PartitionRecord("nope", 0, (1,), (1,), 1),
        RemoveTopicRecord("nope"),
        BrokerRegistrationChangeRecord(9, 1, fenced=True),
        TopicRecord("t", "other-id"),
        ConfigRecord(ConfigResourceType.TOPIC, "nope", "retention.ms", "1"),
        ProducerIdsRecord(1, 1, 0),
    ],
    ids=[
        "change-unknown-topic",
        "partition-unknown-topic",
        "remove-unknown",
        "unknown-broker",
        "duplicate-name",
        "config-unknown-topic",
        "producer-ids-backwards",
    ],
)
def test_records_that_do_not_fit_are_refused(record) -> None:
    """A record that does not fit the image raises MetadataReplayError and changes nothing."""
    image = MetadataImage()
    image.apply_batch([TopicRecord("t", "id"), PartitionRecord("id", 0, (1,), (1,), 1)], 1)
    before = image.state()
    with pytest.raises(MetadataReplayError):
        image.apply(record, 2)
    assert image.state() == before


def test_offset_never_goes_backwards() -> None:
    image = MetadataImage()
    image.apply_batch([], 5)
    with pytest.raises(MetadataReplayError):
        image.apply_batch([], 4)


def drive_workload(h) -> None:
    """A history touching every record type: cluster id, brokers, topics, configs, fencing, elections,
    deletes."""
    h.commit(h.controller.maybe_write_cluster_id())
    for b, rack in ((1, "a"), (2, "b"), (3, "a"), (4, "b")):
        h.register(b, rack)
    h.create("orders", 6, 3, configs={"retention.ms": "1000"})
    h.create("logs", 2, 2, configs={"unclean.leader.election.enable": "true"})
    c = h.controller
    h.commit(c.handle_create_partitions([NewPartitions("logs", 4)]))
    h.commit(c.handle_allocate_producer_ids(2, h.image.brokers[2].broker_epoch))
    h.heartbeat(1, h.image.brokers[1].broker_epoch, want_fence=True)
    h.register(3, "a")  # a new incarnation
    h.commit(
        c.handle_incremental_alter_configs(
            [
                AlterConfigsResource(
                    ConfigResourceType.CLUSTER,
                    "",
                    (AlterableConfig("segment.bytes", AlterConfigOp.SET, "4096"),),
                )
            ]
        )
    )
    h.heartbeat(1, h.image.brokers[1].broker_epoch)
    h.commit(c.handle_elect_leaders(ElectLeadersRequest(Election.PREFERRED)))
    h.create("tmp", 3, 1)
    h.commit(c.handle_delete_topics(["tmp"]))
    h.heartbeat(4, h.image.brokers[4].broker_epoch, want_shut_down=True)
    h.commit(c.handle_unregister_broker(4))


def test_snapshot_plus_later_records_equals_full_replay(harness) -> None:
    """KRaft: a snapshot (the image as records, with its offset) plus the records after it rebuilds
    exactly the image that replaying the whole log builds — at every cut point."""
    drive_workload(harness)
    log = [(decode_batch(encode_batch(records)), offset) for records, offset in harness.log]
    full = MetadataImage()
    for records, offset in log:
        full.apply_batch(records, offset)
    assert full.state() == harness.image.state()
    prefix = MetadataImage()
    for cut in range(len(log) + 1):
        restored = MetadataImage.from_snapshot(prefix.snapshot())
        assert restored.state() == prefix.state(), f"snapshot at cut {cut} differs"
        for records, offset in log[cut:]:
            restored.apply_batch(records, offset)
        restored.invariants()
        assert restored.state() == full.state(), f"snapshot at cut {cut} + later records != full replay"
        if cut < len(log):
            prefix.apply_batch(*log[cut])


def test_replicas_by_broker_index_matches_partitions(harness) -> None:
    """The broker -> partitions index agrees with the partitions after every kind of change."""
    drive_workload(harness)
    expected: dict[int, set] = {}
    for topic_id, topic in harness.image.topics.items():
        for index, p in topic.partitions.items():
            for b in p.replicas:
                expected.setdefault(b, set()).add((topic_id, index))
    assert harness.image.replicas_by_broker == expected
