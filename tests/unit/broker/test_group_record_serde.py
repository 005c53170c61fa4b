"""``__consumer_offsets`` records as bytes in Kafka's own format (broker.group.record_serde: OffsetCommitKey /
OffsetCommitValue, GroupMetadataKey / GroupMetadataValue of apache/kafka's group coordinator) and the
consumer-group gauges (broker.metrics)."""

from __future__ import annotations

import dataclasses
import struct
from types import SimpleNamespace

import pytest
from group_harness import GROUP, Harness
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.group.metadata import (
    GroupMetadataRecord,
    GroupSnapshot,
    MemberSnapshot,
    OffsetAndMetadata,
    OffsetCommitRecord,
)
from broker.group.record_serde import (
    CorruptOffsetsRecordError,
    decode_batches,
    decode_record,
    encode_batch,
    encode_record,
)
from broker.metrics import BrokerMetrics
from broker.replica.partition import Role
from proto.kafka import codec
from tests.kafka_call import kafka_string

SNAPSHOT = GroupSnapshot(
    "consumer",
    3,
    "range",
    "m-1",
    77,
    (
        MemberSnapshot("m-1", "i-1", "c", "/127.0.0.1", 300, 10, b"sub", b"asg"),
        MemberSnapshot("m-2", None, "c", "/127.0.0.1", 300, 10, b"sub2", b""),
    ),
)
RECORDS = [
    OffsetCommitRecord("g", "t", 3, OffsetAndMetadata(42, 5, "meta", 1234)),
    OffsetCommitRecord("g", "t", 3, None),
    GroupMetadataRecord("g", SNAPSHOT),
    GroupMetadataRecord("g", None),
]


@pytest.mark.parametrize("record", RECORDS, ids=["offset", "offset-tombstone", "group", "group-tombstone"])
def test_record_round_trip(record) -> None:
    key, value = encode_record(record)
    assert (value is None) == (record.value is None), "a tombstone is a null value"
    assert decode_record(key, value) == record


def test_equal_keys_are_equal_bytes() -> None:
    """Compaction keeps the last record per key: the key bytes must not depend on the value."""
    a = encode_record(OffsetCommitRecord("g", "t", 1, OffsetAndMetadata(1)))[0]
    b = encode_record(OffsetCommitRecord("g", "t", 1, None))[0]
    c = encode_record(OffsetCommitRecord("g", "t", 2, None))[0]
    assert a == b != c
    assert (
        encode_record(GroupMetadataRecord("g", SNAPSHOT))[0]
        == encode_record(GroupMetadataRecord("g", None))[0]
    )


def test_batch_round_trip_gives_next_offset() -> None:
    batch = encode_batch(tuple(RECORDS), 1000)
    decoded = list(decode_batches(batch))
    assert [decode_record(k, v) for _, k, v in decoded] == RECORDS
    assert {next_offset for next_offset, _, _ in decoded} == {len(RECORDS)}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"\xff\xff", b"x"),
        (b"", b"x"),
        (None, b"x"),
        (b"\x00\x01\x00\x05g", None),  # a group string cut short
        (b"\x00\x03\x00\x01g", None),  # KIP-848 ConsumerGroupMetadataKey: not a classic group's record
        (b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03", b"\x00\x09"),  # value version 9
        (b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03", b"\x00\x03\x00"),  # value cut short
        (b"\x00\x02\x00\x01g", b"\x00\x03\x00\x08consumer"),  # group value cut short
        # a protobuf RecordKey of the format before Kafka's (offset_commit {group: "g"})
        (b"\x0a\x03\x0a\x01g", b"\x08\x01"),
    ],
    ids=["garbage", "empty", "null", "short-key", "consumer-group-record", "value-version",
         "short-offset-value", "short-group-value", "old-protobuf"],
)  # fmt: skip
def test_corrupt_record_is_reported(key, value) -> None:
    with pytest.raises(CorruptOffsetsRecordError):
        decode_record(key, value)


def test_bytes_are_kafkas_format() -> None:
    """Key version 1 / value v3 for an offset commit, key version 2 / value v3 for group metadata, as
    Kafka's GroupMetadataManager writes them (so kafka-console-consumer's OffsetsMessageFormatter reads
    the topic)."""
    key, value = encode_record(RECORDS[0])
    assert key == b"\x00\x01" + kafka_string("g") + kafka_string("t") + struct.pack(">i", 3)
    assert value == struct.pack(">hqi", 3, 42, 5) + kafka_string("meta") + struct.pack(">q", 1234)
    key, value = encode_record(GroupMetadataRecord("g", GroupSnapshot("consumer", 3, "", "", 0, ())))
    assert key == b"\x00\x02" + kafka_string("g")
    # no protocol and no leader are null strings; an unknown state timestamp is -1; no members
    assert value == (struct.pack(">h", 3) + kafka_string("consumer") + struct.pack(">i", 3)
                     + b"\xff\xff" * 2 + struct.pack(">qi", -1, 0))  # fmt: skip
    assert decode_record(key, value) == GroupMetadataRecord("g", GroupSnapshot("consumer", 3, "", "", 0, ()))


def member_v(version: int) -> bytes:
    """MemberMetadata of GroupMetadataValue ``version`` for SNAPSHOT's first member."""
    body = kafka_string("m-1") + (kafka_string("i-1") if version >= 3 else b"")
    body += kafka_string("c") + kafka_string("/127.0.0.1")
    body += struct.pack(">i", 300) if version >= 1 else b""
    body += struct.pack(">i", 10 if version >= 1 else 300)
    return body + struct.pack(">i", 3) + b"sub" + struct.pack(">i", 3) + b"asg"


@pytest.mark.parametrize("version", range(4))
def test_older_group_values_are_read(version: int) -> None:
    """Values v0-v2 lack the instance id (v3), the state timestamp (v2) and the rebalance timeout
    (v1: v0's one timeout serves as both)."""
    value = struct.pack(">h", version) + kafka_string("consumer") + struct.pack(">i", 3)
    value += kafka_string("range") + kafka_string("m-1")
    value += struct.pack(">q", 77) if version >= 2 else b""
    value += struct.pack(">i", 1) + member_v(version)
    snapshot = decode_record(encode_record(GroupMetadataRecord("g", None))[0], value).value
    expected = SNAPSHOT.members[0]
    if version < 3:
        expected = dataclasses.replace(expected, group_instance_id=None)
    if version == 0:
        expected = dataclasses.replace(expected, session_timeout_ms=300)
    assert snapshot == GroupSnapshot("consumer", 3, "range", "m-1", 77 if version >= 2 else 0, (expected,))


def uvarint(n: int) -> bytes:
    out = bytearray()
    codec.write_uvarint(out, n)
    return bytes(out)


def compact(data: bytes) -> bytes:
    return uvarint(len(data) + 1) + data


def test_flexible_v4_values_are_read() -> None:
    """Version 4 (KIP-915) is flexible: compact strings, bytes and arrays, and tagged fields (skipped)."""
    tagged = b"\x01\x05\x02zz"  # one unknown tagged field: tag 5, two bytes
    offset_value = struct.pack(">hqi", 4, 42, 5) + compact(b"meta") + struct.pack(">q", 1234) + tagged
    key = encode_record(RECORDS[0])[0]
    assert decode_record(key, offset_value) == RECORDS[0]
    member = (compact(b"m-2") + b"\x00" + compact(b"c") + compact(b"/127.0.0.1") + struct.pack(">ii", 300, 10)
              + compact(b"sub2") + compact(b"") + b"\x00")  # fmt: skip
    group_value = (struct.pack(">h", 4) + compact(b"consumer") + struct.pack(">i", 3) + compact(b"range")
                   + compact(b"m-2") + struct.pack(">q", 77) + uvarint(2) + member + tagged)  # fmt: skip
    snapshot = decode_record(encode_record(GroupMetadataRecord("g", None))[0], group_value).value
    assert snapshot == GroupSnapshot("consumer", 3, "range", "m-2", 77, (SNAPSHOT.members[1],))


@pytest.mark.parametrize("version", [0, 1, 2])
def test_older_offset_values_are_read(version: int) -> None:
    """v0-2 have no leader epoch (-1); v1 carries an expire timestamp that is read and dropped."""
    value = struct.pack(">hq", version, 42) + kafka_string("meta") + struct.pack(">q", 1234)
    value += struct.pack(">q", 99_999) if version == 1 else b""
    key = b"\x00\x00" + kafka_string("g") + kafka_string("t") + struct.pack(">i", 3)  # key version 0
    expected = OffsetCommitRecord("g", "t", 3, OffsetAndMetadata(42, -1, "meta", 1234))
    assert decode_record(key, value) == expected


def test_group_gauges_committed_offset_lag_and_states() -> None:
    """Lag = HW - committed: the local replica's HW for partitions hosted here, the polled leader HW
    for others; a partition with neither has only its committed offset."""
    h = Harness()
    h.commit("", -1, {("t", 0): 4, ("elsewhere", 0): 2, ("unknown", 0): 1})
    hosted = SimpleNamespace(topic="t", partition=0, role=Role.FOLLOWER, high_watermark=10, log_end_offset=12)
    manager = SimpleNamespace(partitions={("t", 0): hosted})
    metrics = BrokerMetrics(manager)  # type: ignore[arg-type]
    metrics.register_group_lag(h.core, lambda: {("elsewhere", 0): 7, ("t", 0): 99})
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for s in family.samples
    }
    t0 = (("group", GROUP), ("partition", "0"), ("topic", "t"))
    other = (("group", GROUP), ("partition", "0"), ("topic", "elsewhere"))
    assert samples[("pykraft_consumer_group_committed_offset", t0)] == 4
    assert samples[("pykraft_consumer_group_lag", t0)] == 6
    assert samples[("pykraft_consumer_group_committed_offset", other)] == 2
    assert samples[("pykraft_consumer_group_lag", other)] == 5
    unknown = (("group", GROUP), ("partition", "0"), ("topic", "unknown"))
    assert ("pykraft_consumer_group_lag", unknown) not in samples
    assert samples[("pykraft_consumer_groups", (("state", "Empty"),))] == 1
