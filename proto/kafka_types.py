"""Kafka's small shared value types and sentinels, defined once for every package.

``TopicPartition`` names one partition of a topic by name; ``TopicIdPartition`` adds the topic id, the
topic's incarnation (KIP-516: a topic deleted and re-created under the same name gets a new id, so a
follower or fetch session of the old one is told apart). Both are ``NamedTuple``s: immutable,
ordered, hashable and equal to the plain ``(topic, partition)`` tuples much of the code builds, so
either form is a key of the same dict entry; ``str()`` gives Kafka's ``topic-partition``.

The sentinels are Kafka's, each defined here once: ``NO_LEADER`` (no partition leader), ``NO_EPOCH``
(no leader epoch or broker epoch known or given), ``NO_OFFSET`` (no offset: an error answer,
"unknown", or DeleteRecords' "up to the high watermark"), ``NO_TIMESTAMP``, ``NO_PRODUCER_ID`` and
``NO_PRODUCER_EPOCH`` (a batch of a non-idempotent producer), ``NO_SEQUENCE``, ``NO_BROKER_EPOCH``
(AlterPartition: the leader has not seen a member's broker epoch), ListOffsets' special timestamps
``LATEST_TIMESTAMP``, ``EARLIEST_TIMESTAMP`` and ``MAX_TIMESTAMP`` (KIP-734), ``CONSUMER_REPLICA_ID``
(the replica id of a Fetch or ListOffsets from a client, not a follower), ``NO_PREFERRED_REPLICA``
(Fetch: the leader names no read replica), ``USE_DEFAULT`` (CreateTopics: the cluster's default
number of partitions or replication factor). Wire values: they appear as such in requests and
responses, so they never change. Here in ``proto/`` because every package may import it (the import
rules in docs/architecture.md: ``pykraft`` and ``spark`` import only ``proto``).
"""

from __future__ import annotations

from typing import NamedTuple

NO_LEADER = -1
NO_EPOCH = -1
NO_OFFSET = -1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_BROKER_EPOCH = -1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
CONSUMER_REPLICA_ID = -1
NO_PREFERRED_REPLICA = -1
USE_DEFAULT = -1


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class TopicIdPartition(NamedTuple):
    topic_id: str  # the topic's id as the metadata image holds it ("" when not known)
    topic_partition: TopicPartition

    @property
    def topic(self) -> str:
        return self.topic_partition.topic

    @property
    def partition(self) -> int:
        return self.topic_partition.partition

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.topic_partition}"
