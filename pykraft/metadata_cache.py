"""What a client knows about the cluster: brokers, and per partition its leader and leader epoch.

Theory (Kafka's ``Metadata``): the cache is filled from ``BrokerService.Metadata`` answers and
corrected in between by the leader hints brokers attach to NOT_LEADER_OR_FOLLOWER and
FENCED_LEADER_EPOCH answers (KIP-951). Invariants:

- a partition's leader epoch never goes backwards: an answer (or hint) with an older epoch than
  the one cached is stale and ignored for that partition — a lagging broker must not send the
  client back to a deposed leader;
- ``leader_of`` returns ``NO_LEADER`` for a partition that is offline, unknown, or whose leader is
  not among the known brokers, so the caller refreshes instead of sending to nowhere;
- ``request_update`` marks the cache stale; ``needs_refresh(now_ms)`` says when to ask again
  (at most once per ``retry_backoff_ms`` while stale, and every ``metadata_max_age_ms`` anyway).

Pure and not thread-safe: the owner (producer or consumer) serializes calls; I/O lives in
``pykraft.connection``.
"""

from __future__ import annotations

from dataclasses import dataclass

from proto import broker_pb2
from proto.errors import ErrorCode
from pykraft.types import TopicPartition

NO_LEADER = -1
NO_EPOCH = -1
NEVER_MS = -(1 << 62)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str = ""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()


class MetadataCache:
    """See the module docstring."""

    def __init__(self, *, retry_backoff_ms: int = 100, metadata_max_age_ms: int = 300_000) -> None:
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.brokers: dict[int, BrokerInfo] = {}
        self.cluster_id = ""
        self._partitions: dict[TopicPartition, PartitionLeader] = {}
        self._partition_counts: dict[str, int] = {}
        self._topic_errors: dict[str, tuple[int, str]] = {}
        self._available: dict[str, list[int]] = {}  # topic -> partitions with a leader (a cache)
        self._topics: set[str] = set()  # the topics this client uses: every refresh asks for them
        self._stale = True
        self._last_refresh_ms = NEVER_MS
        self._last_attempt_ms = NEVER_MS

    # ---- what to ask --------------------------------------------------------------------------

    def add_topics(self, topics: list[str] | set[str] | tuple[str, ...]) -> bool:
        """Track ``topics``; True when one was new (the caller should refresh)."""
        new = set(topics) - self._topics
        if new:
            self._topics |= new
            self._stale = True
        return bool(new)

    @property
    def topics(self) -> list[str]:
        return sorted(self._topics)

    def request_update(self) -> None:
        self._stale = True

    def needs_refresh(self, now_ms: int) -> bool:
        if now_ms - self._last_attempt_ms < self.retry_backoff_ms:
            return False
        return self._stale or now_ms - self._last_refresh_ms >= self.metadata_max_age_ms

    def next_refresh_ms(self, now_ms: int) -> int:
        if self._stale:
            return max(now_ms, self._last_attempt_ms + self.retry_backoff_ms)
        return self._last_refresh_ms + self.metadata_max_age_ms

    def on_attempt(self, now_ms: int) -> None:
        self._last_attempt_ms = now_ms

    # ---- learning -----------------------------------------------------------------------------

    def update(self, response: broker_pb2.MetadataResponse, now_ms: int) -> None:
        """Apply a Metadata answer (see the module docstring for the epoch rule)."""
        if response.brokers:
            self.brokers = {
                b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers
            }
        self.cluster_id = response.cluster_id or self.cluster_id
        for topic in response.topics:
            self._update_topic(topic)
        self._stale = any(self._partition_counts.get(t) is None for t in self._topics) or any(
            p.leader_id == NO_LEADER for p in self._partitions.values()
        )
        self._available.clear()
        self._last_refresh_ms = now_ms
        self.invariants()

    def _update_topic(self, topic: broker_pb2.TopicMetadata) -> None:
        if topic.error.code != ErrorCode.NONE:
            self._topic_errors[topic.name] = (topic.error.code, topic.error.message)
            self._partition_counts.pop(topic.name, None)
            return
        self._topic_errors.pop(topic.name, None)
        self._partition_counts[topic.name] = len(topic.partitions)
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition)
            known = self._partitions.get(tp)
            if known is not None and p.leader_epoch < known.leader_epoch:
                continue  # a lagging broker's view: keep the newer leader
            self._partitions[tp] = PartitionLeader(
                p.leader_id, p.leader_epoch, tuple(p.replicas), tuple(p.isr)
            )

    def update_leader(self, tp: TopicPartition, leader_id: int, leader_epoch: int) -> bool:
        """A KIP-951 hint from an error answer; True when it was newer and usable."""
        known = self._partitions.get(tp)
        if leader_id == NO_LEADER or leader_id not in self.brokers:
            self._stale = True
            return False
        if known is not None and leader_epoch <= known.leader_epoch:
            self._stale = True
            return False
        replicas = known.replicas if known else ()
        isr = known.isr if known else ()
        self._partitions[tp] = PartitionLeader(leader_id, leader_epoch, replicas, isr)
        self._available.clear()
        return True

    # ---- reading ------------------------------------------------------------------------------

    def leader_of(self, tp: TopicPartition) -> int:
        known = self._partitions.get(tp)
        if known is None or known.leader_id not in self.brokers:
            return NO_LEADER
        return known.leader_id

    def leader_epoch(self, tp: TopicPartition) -> int | None:
        known = self._partitions.get(tp)
        return None if known is None or known.leader_epoch == NO_EPOCH else known.leader_epoch

    def partition(self, tp: TopicPartition) -> PartitionLeader | None:
        return self._partitions.get(tp)

    def leader_address(self, tp: TopicPartition) -> str | None:
        leader = self.leader_of(tp)
        return None if leader == NO_LEADER else self.brokers[leader].address

    def broker_address(self, node_id: int) -> str | None:
        broker = self.brokers.get(node_id)
        return None if broker is None else broker.address

    def partition_count(self, topic: str) -> int | None:
        return self._partition_counts.get(topic)

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions of ``topic`` with a known leader (cached until the next change: per-record use)."""
        available = self._available.get(topic)
        if available is None:
            count = self._partition_counts.get(topic, 0)
            available = [p for p in range(count) if self.leader_of(TopicPartition(topic, p)) != NO_LEADER]
            self._available[topic] = available
        return available

    def topic_error(self, topic: str) -> tuple[int, str] | None:
        return self._topic_errors.get(topic)

    def broker_addresses(self) -> list[str]:
        return [b.address for b in self.brokers.values()]

    def invariants(self) -> None:
        for topic, count in self._partition_counts.items():
            assert count >= 0, f"topic {topic} has {count} partitions"
        for tp, leader in self._partitions.items():
            assert leader.leader_epoch >= NO_EPOCH, f"{tp}: leader epoch {leader.leader_epoch}"
