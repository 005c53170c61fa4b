"""Topic validation: Kafka's name rules, partition counts, replication factors, explicit assignments.

Each check returns ``None`` when valid, else an ``ApiError`` with Kafka's code and a message a
person can act on. Pure functions; the controller calls them before generating any record.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from proto.errors import ApiError
from proto.errors import ErrorCode as Code

MAX_TOPIC_NAME_LENGTH = 249
LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
MAX_PARTITIONS_PER_TOPIC = 100_000  # a limit on everything: one request must fit in one Raft entry


def validate_topic_name(name: str) -> ApiError | None:
    """Kafka's rules: [a-zA-Z0-9._-], 1..249 characters, not "." or ".."."""
    if not name:
        return ApiError(Code.INVALID_TOPIC_EXCEPTION, "topic name is empty")
    if name in (".", ".."):
        return ApiError(Code.INVALID_TOPIC_EXCEPTION, f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return ApiError(
            Code.INVALID_TOPIC_EXCEPTION,
            f"topic name is {len(name)} characters; the limit is {MAX_TOPIC_NAME_LENGTH}",
        )
    if not LEGAL_TOPIC_NAME.fullmatch(name):
        bad = sorted({c for c in name if not LEGAL_TOPIC_NAME.fullmatch(c)})
        return ApiError(
            Code.INVALID_TOPIC_EXCEPTION,
            f"topic name {name!r} has illegal characters {bad}; use ASCII letters, digits, '.', '_' and '-'",
        )
    return None


def validate_counts(num_partitions: int, replication_factor: int, usable_brokers: int) -> ApiError | None:
    if num_partitions < 1:
        return ApiError(
            Code.INVALID_PARTITIONS, f"number of partitions must be at least 1, got {num_partitions}"
        )
    if num_partitions > MAX_PARTITIONS_PER_TOPIC:
        return ApiError(
            Code.INVALID_PARTITIONS,
            f"{num_partitions} partitions exceed the limit of {MAX_PARTITIONS_PER_TOPIC}",
        )
    if replication_factor < 1:
        return ApiError(
            Code.INVALID_REPLICATION_FACTOR,
            f"replication factor must be at least 1, got {replication_factor}",
        )
    if replication_factor > usable_brokers:
        return ApiError(
            Code.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} is larger than the {usable_brokers} available brokers",
        )
    return None


def validate_assignment(
    assignment: Mapping[int, tuple[int, ...]],
    first_partition: int,
    registered: Collection[int],
    replication_factor: int | None = None,
) -> ApiError | None:
    """Explicit replica lists: partitions numbered from ``first_partition`` without gaps; replica
    lists non-empty, without duplicates, of one length (``replication_factor`` when given), and on
    registered brokers."""
    expected = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected:
        return ApiError(
            Code.INVALID_REPLICA_ASSIGNMENT,
            f"assignment must cover partitions from {first_partition} without gaps, got {sorted(assignment)}",
        )
    sizes = {len(r) for r in assignment.values()}
    for partition, replicas in sorted(assignment.items()):
        if not replicas:
            return ApiError(Code.INVALID_REPLICA_ASSIGNMENT, f"partition {partition} has no replicas")
        if len(set(replicas)) != len(replicas):
            return ApiError(
                Code.INVALID_REPLICA_ASSIGNMENT,
                f"partition {partition} lists a broker twice: {list(replicas)}",
            )
        unknown = [b for b in replicas if b not in registered]
        if unknown:
            return ApiError(
                Code.INVALID_REPLICA_ASSIGNMENT, f"partition {partition} uses unregistered brokers {unknown}"
            )
    if len(sizes) > 1 or (replication_factor is not None and sizes != {replication_factor}):
        want = f" of {replication_factor}" if replication_factor is not None else ""
        return ApiError(
            Code.INVALID_REPLICATION_FACTOR,
            f"every partition needs the same replication factor{want}; got sizes {sorted(sizes)}",
        )
    return None
