"""``__consumer_offsets`` records as bytes (broker.offsets_codec), the GroupService response
conversion (broker.group_service.fill) and the consumer-group gauges (broker.metrics)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from group_harness import GROUP, Harness
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.group_metadata import (
    GroupMetadataRecord,
    GroupSnapshot,
    MemberSnapshot,
    OffsetAndMetadata,
    OffsetCommitRecord,
)
from broker.group_requests import OK, JoinGroupMember, JoinGroupResponse, error
from broker.group_service import client_host, fill
from broker.metrics import BrokerMetrics
from broker.offsets_codec import (
    CorruptOffsetsRecordError,
    decode_batches,
    decode_record,
    encode_batch,
    encode_record,
)
from broker.partition import Role
from proto import group_pb2
from proto.errors import ErrorCode

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


@pytest.mark.parametrize("key", [b"\xff\xff", b"", None], ids=["garbage", "empty", "null"])
def test_corrupt_key_is_reported(key) -> None:
    with pytest.raises(CorruptOffsetsRecordError):
        decode_record(key, b"x")


def test_fill_converts_nested_dataclasses_and_optionals() -> None:
    response = JoinGroupResponse(
        error(ErrorCode.MEMBER_ID_REQUIRED, "rejoin"),
        2,
        "consumer",
        "range",
        "a",
        True,
        "b",
        (JoinGroupMember("a", "i-a", b"x"), JoinGroupMember("b", None, b"y")),
    )
    out = fill(group_pb2.JoinGroupResponse(), response)
    assert out.error.code == ErrorCode.MEMBER_ID_REQUIRED and out.error.message == "rejoin"
    assert out.skip_assignment and out.generation_id == 2 and out.member_id == "b"
    assert out.members[0].group_instance_id == "i-a" and not out.members[1].HasField("group_instance_id")
    assert fill(group_pb2.JoinGroupResponse(), JoinGroupResponse(OK)).error.code == 0


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


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:127.0.0.1:5555", "/127.0.0.1"),
        ("ipv6:[::1]:5555", "/::1"),
        ("unix:/tmp/s", "unix:/tmp/s"),
        ("", ""),
    ],
    ids=["ipv4", "ipv6", "other", "empty"],
)
def test_client_host_as_kafka_shows_it(peer: str, host: str) -> None:
    assert client_host(peer) == host
