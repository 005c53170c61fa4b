"""The producer's partitioner (pykraft/partitioner.py): Kafka's murmur2, equal to kafka-python's, and
sticky partitioning for records without a key (KIP-480)."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import DefaultPartitioner
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from pykraft.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
    ],
    ids=["2-bytes", "6-bytes", "24-bytes", "26-bytes", "48-bytes", "3-bytes"],
)
def test_murmur2_java_vectors(key: bytes, expected: int) -> None:
    """The vectors of Kafka's UtilsTest.testMurmur2 (Java's signed 32-bit results)."""
    assert murmur2(key) == expected


def test_to_positive_clears_the_sign_bit() -> None:
    """Utils.toPositive is `& 0x7fffffff`, not abs(): -1 -> 2147483647, MIN_VALUE -> 0."""
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def random_keys(count: int) -> list[bytes]:
    rng = random.Random(20240501)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", bytes(range(256))]
    keys += [rng.randbytes(rng.randint(0, 64)) for _ in range(count)]
    keys += [f"user-{i}".encode() for i in range(count)]
    return keys


def test_murmur2_equals_kafka_python_on_many_keys() -> None:
    for key in random_keys(3_000):
        assert to_positive(murmur2(key)) == kafka_python_murmur2(key) & 0x7FFFFFFF, key


class FakeCluster:
    """The slice of kafka-python's ClusterMetadata that DefaultPartitioner reads."""

    def __init__(self, partitions: int) -> None:
        self._partitions = set(range(partitions))

    def topics(self) -> set[str]:
        return {"t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self._partitions

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return self._partitions


@pytest.mark.parametrize("num_partitions", [1, 2, 3, 6, 7, 12, 100], ids=lambda n: f"{n}p")
def test_same_partition_as_kafka_python_default_partitioner(num_partitions: int) -> None:
    """DESIGN/issue 5: a key lands in the same partition as with kafka-python's default partitioner."""
    reference = DefaultPartitioner()
    cluster = FakeCluster(num_partitions)
    for key in random_keys(500):
        expected = reference.partition("t", key, key, None, None, cluster)
        assert partition_for_key(key, num_partitions) == expected, key


def test_partition_for_key_refuses_no_partitions() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for_key(b"k", 0)


def test_sticky_null_key_stays_until_new_batch() -> None:
    """KIP-480: null-key records stick to one partition until a batch is completed, then move."""
    partitioner = StickyPartitioner(random.Random(1))
    first = partitioner.partition("t", None, 6)
    assert all(partitioner.partition("t", None, 6) == first for _ in range(50))
    moved = partitioner.on_new_batch("t", first, 6)
    assert moved != first
    assert partitioner.partition("t", None, 6) == moved
    assert partitioner.on_new_batch("t", first, 6) == moved  # stale: already moved
    assert partitioner.partition("t", b"key", 6) == partition_for_key(b"key", 6)  # keys ignore stickiness


def test_sticky_prefers_available_partitions_and_spreads() -> None:
    partitioner = StickyPartitioner(random.Random(2))
    seen = set()
    partition = partitioner.partition("t", None, 6, available=(1, 4))
    for _ in range(40):
        assert partition in (1, 4)
        seen.add(partition)
        partition = partitioner.on_new_batch("t", partition, 6, available=(1, 4))
    assert seen == {1, 4}
    # the sticky partition lost its leader: pick again among the available ones
    assert partitioner.partition("t", None, 6, available=(2,)) == 2


def test_sticky_single_partition() -> None:
    partitioner = StickyPartitioner(random.Random(3))
    assert partitioner.partition("t", None, 1) == 0
    assert partitioner.on_new_batch("t", 0, 1) == 0


def test_sticky_is_deterministic_per_seed() -> None:
    def run(seed: int) -> list[int]:
        p = StickyPartitioner(random.Random(seed))
        out = [p.partition("t", None, 12)]
        for _ in range(20):
            out.append(p.on_new_batch("t", out[-1], 12))
        return out

    assert run(9) == run(9)
