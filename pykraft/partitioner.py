"""Choosing a partition for a record: Kafka's murmur2 for keyed records, sticky partitioning without a key.

- **Keyed records**: ``partition = to_positive(murmur2(key)) % num_partitions`` — byte-for-byte the Java
  client's ``BuiltInPartitioner.partitionForKey`` and kafka-python's ``DefaultPartitioner``, so a key lands
  in the same partition whichever client wrote it (as long as the partition count is the same).
  ``murmur2`` is Kafka's variant of MurmurHash2 (seed ``0x9747b28c``, little-endian 4-byte blocks), and
  returns Java's signed 32-bit result; ``to_positive`` clears the sign bit (not ``abs``).
- **Records without a key** (KIP-480, as kafka-python's ``StickyPartitioner``): every null-key record of a
  topic goes to one *sticky* partition until the producer starts a new batch for it
  (``on_new_batch``); then another partition is chosen at random, preferring partitions that have a
  leader (``available``). Larger batches, fewer requests.

Pure: the random choice uses an injected ``random.Random``. Not thread-safe; the producer owns one.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

MURMUR2_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash of ``data``."""
    length = len(data)
    h = (MURMUR2_SEED ^ length) & _MASK32
    blocks = length // 4
    for block in struct.unpack_from(f"<{blocks}I", data) if blocks else ():
        k = (block * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (so ``-1`` maps to ``0x7fffffff``, not ``1``)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition of a keyed record, as every Kafka client computes it."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, got num_partitions={num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Murmur2 for keys; for null keys, one partition per topic until ``on_new_batch`` (KIP-480)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._sticky: dict[str, int] = {}

    def partition(
        self, topic: str, key: bytes | None, num_partitions: int, available: Sequence[int] = ()
    ) -> int:
        """The partition for a record. ``available``: partitions that currently have a leader."""
        if key is not None:
            return partition_for_key(key, num_partitions)
        if num_partitions <= 0:
            raise ValueError(f"topic {topic!r} has no partitions")
        current = self._sticky.get(topic)
        if current is not None and current < num_partitions and (not available or current in available):
            return current
        return self._pick(topic, num_partitions, available, avoid=None)

    def on_new_batch(
        self, topic: str, previous_partition: int, num_partitions: int, available: Sequence[int] = ()
    ) -> int:
        """The batch of the sticky partition filled up: move to another partition; returns it.

        A stale call (another batch already moved the topic off ``previous_partition``) changes nothing.
        """
        current = self._sticky.get(topic)
        if current is not None and current != previous_partition:
            return current
        return self._pick(topic, num_partitions, available, avoid=previous_partition)

    def _pick(self, topic: str, num_partitions: int, available: Sequence[int], avoid: int | None) -> int:
        pool = [p for p in available if 0 <= p < num_partitions] or list(range(num_partitions))
        candidates = [p for p in pool if p != avoid] or pool
        chosen = self._rng.choice(candidates)
        self._sticky[topic] = chosen
        return chosen
