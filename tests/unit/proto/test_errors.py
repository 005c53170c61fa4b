"""The Python mirror of ErrorCode equals the generated enum and keeps Kafka's numbers."""

from __future__ import annotations

import pytest

from proto import common_pb2, errors


def test_mirror_equals_generated_enum() -> None:
    assert {c.name: int(c) for c in errors.ErrorCode} == dict(common_pb2.ErrorCode.items())


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("UNKNOWN_SERVER_ERROR", -1),
        ("NONE", 0),
        ("OFFSET_OUT_OF_RANGE", 1),
        ("CORRUPT_MESSAGE", 2),
        ("UNKNOWN_TOPIC_OR_PARTITION", 3),
        ("NOT_LEADER_OR_FOLLOWER", 6),
        ("REQUEST_TIMED_OUT", 7),
        ("MESSAGE_TOO_LARGE", 10),
        ("NOT_ENOUGH_REPLICAS", 19),
        ("TOPIC_ALREADY_EXISTS", 36),
        ("INVALID_PARTITIONS", 37),
        ("INVALID_REPLICATION_FACTOR", 38),
        ("NOT_CONTROLLER", 41),
        ("OUT_OF_ORDER_SEQUENCE_NUMBER", 45),
        ("INVALID_PRODUCER_EPOCH", 47),
        ("FENCED_LEADER_EPOCH", 74),
        ("UNKNOWN_LEADER_EPOCH", 75),
        ("STALE_BROKER_EPOCH", 77),
    ],
)
def test_kafka_numbers(name: str, number: int) -> None:
    assert errors.ErrorCode[name] == number


def test_exception_per_code() -> None:
    exc = errors.error_for(errors.ErrorCode.NOT_LEADER_OR_FOLLOWER, "broker 101 does not lead t-0")
    assert isinstance(exc, errors.NotLeaderOrFollowerError)
    assert exc.retriable
    assert "NOT_LEADER_OR_FOLLOWER" in str(exc)
    assert not errors.error_for(errors.ErrorCode.TOPIC_ALREADY_EXISTS).retriable
    with pytest.raises(errors.FencedLeaderEpochError):
        errors.raise_for(errors.ErrorCode.FENCED_LEADER_EPOCH, "stale")
    errors.raise_for(errors.ErrorCode.NONE)
    assert errors.exception_class(9999) is errors.UnknownServerError
