"""Validation tables: topic names, counts, explicit assignments and topic configs (Kafka's rules)."""

from __future__ import annotations

import pytest

from metadata import configs as cfg
from metadata.topics import validate_assignment, validate_counts, validate_topic_name
from proto.errors import ErrorCode as Code

NAME_CASES = [
    ("simple", "orders", None),
    ("all-legal-chars", "a.B_c-9", None),
    ("max-length", "x" * 249, None),
    ("empty", "", Code.INVALID_TOPIC_EXCEPTION),
    ("dot", ".", Code.INVALID_TOPIC_EXCEPTION),
    ("dot-dot", "..", Code.INVALID_TOPIC_EXCEPTION),
    ("too-long", "x" * 250, Code.INVALID_TOPIC_EXCEPTION),
    ("space", "my topic", Code.INVALID_TOPIC_EXCEPTION),
    ("slash", "a/b", Code.INVALID_TOPIC_EXCEPTION),
    ("non-ascii", "caf\u00e9", Code.INVALID_TOPIC_EXCEPTION),
    ("three-dots-ok", "...", None),
]


@pytest.mark.parametrize(("name", "expected"), [c[1:] for c in NAME_CASES], ids=[c[0] for c in NAME_CASES])
def test_topic_name_rules(name: str, expected: int | None) -> None:
    """Kafka: a topic name is 1..249 of [a-zA-Z0-9._-] and is not "." or ".."."""
    error = validate_topic_name(name)
    assert (error.code if error else None) == expected
    if error:
        assert error.message, "every error explains itself"


COUNT_CASES = [
    ("ok", 3, 2, 3, None),
    ("rf-equals-brokers", 1, 3, 3, None),
    ("zero-partitions", 0, 1, 3, Code.INVALID_PARTITIONS),
    ("negative-partitions", -5, 1, 3, Code.INVALID_PARTITIONS),
    ("too-many-partitions", 100_001, 1, 3, Code.INVALID_PARTITIONS),
    ("zero-rf", 1, 0, 3, Code.INVALID_REPLICATION_FACTOR),
    ("rf-above-brokers", 1, 4, 3, Code.INVALID_REPLICATION_FACTOR),
    ("no-brokers", 1, 1, 0, Code.INVALID_REPLICATION_FACTOR),
]


@pytest.mark.parametrize(
    ("partitions", "rf", "brokers", "expected"), [c[1:] for c in COUNT_CASES], ids=[c[0] for c in COUNT_CASES]
)
def test_partition_and_replication_counts(
    partitions: int, rf: int, brokers: int, expected: int | None
) -> None:
    """Partitions >= 1; 1 <= replication factor <= usable brokers, else INVALID_REPLICATION_FACTOR."""
    error = validate_counts(partitions, rf, brokers)
    assert (error.code if error else None) == expected


ASSIGNMENT_CASES = [
    ("ok", {0: (1, 2), 1: (2, 3)}, 0, None, None),
    ("ok-from-offset", {2: (1,), 3: (2,)}, 2, 1, None),
    ("gap", {0: (1,), 2: (2,)}, 0, None, Code.INVALID_REPLICA_ASSIGNMENT),
    ("wrong-start", {1: (1,)}, 0, None, Code.INVALID_REPLICA_ASSIGNMENT),
    ("empty-replicas", {0: ()}, 0, None, Code.INVALID_REPLICA_ASSIGNMENT),
    ("duplicate-broker", {0: (1, 1)}, 0, None, Code.INVALID_REPLICA_ASSIGNMENT),
    ("unknown-broker", {0: (1, 9)}, 0, None, Code.INVALID_REPLICA_ASSIGNMENT),
    ("uneven-rf", {0: (1, 2), 1: (3,)}, 0, None, Code.INVALID_REPLICATION_FACTOR),
    ("rf-differs-from-topic", {1: (1, 2)}, 1, 3, Code.INVALID_REPLICATION_FACTOR),
]


@pytest.mark.parametrize(
    ("assignment", "first", "rf", "expected"),
    [c[1:] for c in ASSIGNMENT_CASES],
    ids=[c[0] for c in ASSIGNMENT_CASES],
)
def test_explicit_assignment_rules(assignment, first: int, rf: int | None, expected: int | None) -> None:
    """An explicit assignment covers consecutive partitions, one RF, distinct registered brokers."""
    error = validate_assignment(assignment, first, {1, 2, 3}, rf)
    assert (error.code if error else None) == expected


CONFIG_CASES = [
    ("min-isr-ok", "min.insync.replicas", "2", True),
    ("min-isr-zero", "min.insync.replicas", "0", False),
    ("min-isr-text", "min.insync.replicas", "two", False),
    ("retention-ms-forever", "retention.ms", "-1", True),
    ("retention-ms-below", "retention.ms", "-2", False),
    ("retention-bytes-ok", "retention.bytes", "1048576", True),
    ("retention-bytes-below", "retention.bytes", "-3", False),
    ("segment-bytes-ok", "segment.bytes", "1048576", True),
    ("segment-bytes-tiny", "segment.bytes", "13", False),
    ("segment-bytes-over-int", "segment.bytes", str(2**31), False),
    ("max-message-bytes-ok", "max.message.bytes", "2000000", True),
    ("max-message-bytes-negative", "max.message.bytes", "-1", False),
    ("cleanup-delete", "cleanup.policy", "delete", True),
    ("cleanup-both", "cleanup.policy", "compact, delete", True),
    ("cleanup-bad", "cleanup.policy", "archive", False),
    ("cleanup-empty", "cleanup.policy", "", False),
    ("unclean-true", "unclean.leader.election.enable", "TRUE", True),
    ("unclean-bad", "unclean.leader.election.enable", "yes", False),
    ("flush-messages-ok", "flush.messages", "1", True),
    ("flush-messages-zero", "flush.messages", "0", False),
    ("flush-ms-zero", "flush.ms", "0", True),
    ("flush-ms-negative", "flush.ms", "-1", False),
    ("compression-zstd", "compression.type", "zstd", True),
    ("compression-bad", "compression.type", "brotli", False),
    ("unknown-name", "retention.hours", "1", False),
]


@pytest.mark.parametrize(
    ("name", "value", "valid"), [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES]
)
def test_topic_config_values(name: str, value: str, valid: bool) -> None:
    """Kafka's topic config names and ranges; a bad one gets a message naming what to fix."""
    problem = cfg.validate_config(name, value)
    assert (problem is None) == valid, problem
    if problem:
        assert name in problem


def test_effective_config_prefers_topic_then_cluster_then_default() -> None:
    """A topic override wins over the cluster default, which wins over Kafka's default."""
    effective = cfg.effective_config({"retention.ms": "1"}, {"retention.ms": "2", "segment.bytes": "1024"})
    assert effective["retention.ms"] == "1"
    assert effective["segment.bytes"] == "1024"
    assert effective["min.insync.replicas"] == "1"


@pytest.mark.parametrize(
    ("op", "value", "current", "expected"),
    [
        (cfg.AlterConfigOp.SET, "compact", "delete", "compact"),
        (cfg.AlterConfigOp.DELETE, "", "compact", None),
        (cfg.AlterConfigOp.APPEND, "compact", None, "delete,compact"),
        (cfg.AlterConfigOp.APPEND, "delete", "delete", "delete"),
        (cfg.AlterConfigOp.SUBTRACT, "delete", "compact,delete", "compact"),
    ],
    ids=["set", "delete", "append-to-default", "append-present", "subtract"],
)
def test_incremental_alter_ops(op, value: str, current: str | None, expected: str | None) -> None:
    """IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT (list configs)."""
    assert cfg.apply_op("cleanup.policy", op, value, current) == expected
