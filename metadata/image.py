"""The metadata image: the cluster's state as of one offset of the metadata log.

``MetadataImage.apply(record, offset)`` is the one replay function. Controllers (active and
standby), brokers and snapshot loading all use it, so they compute the same image from the same
records. It is deterministic: the result depends only on the image, the record and its offset (no
clock, no randomness, no I/O). It mutates the image in place — replaying 10,000 partition changes
must not copy 10,000-entry maps. Each record is checked before it changes anything: one that does
not fit the image (unknown topic, partition or broker epoch) raises ``MetadataReplayError`` and
leaves the image as it was before that record. The controller only writes records that fit, so
this error means an inconsistent log: the owner stops rather than serve a wrong image.

Epoch rules, applied here and nowhere else:
- a ``PartitionChangeRecord`` bumps ``partition_epoch`` by one; it bumps ``leader_epoch`` by one
  when the leader changes;
- a ``RegisterBrokerRecord`` whose ``broker_epoch`` is ``BROKER_EPOCH_FROM_OFFSET`` gets the
  record's offset as the broker epoch (a snapshot writes the epoch explicitly).

The cluster id is set once (``ClusterIdRecord``, written by the first active controller): the same id
again is a no-op, a different one is an inconsistent log.

Snapshots: ``snapshot()`` is the image written as records (one per broker, topic, partition and
config, plus the producer-id counter) and the offset it covers; ``MetadataImage.from_snapshot``
replays them. A test proves snapshot + later records == replaying everything.

The image also keeps ``replicas_by_broker``, an index from broker id to the partitions it hosts,
so that fencing a broker costs O(its partitions), not O(all partitions).

Not thread-safe; one owner (the controller's or broker's event loop) applies records.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from metadata.records import (
    BROKER_EPOCH_FROM_OFFSET,
    NO_CLUSTER_ID,
    BrokerRegistrationChangeRecord,
    ClusterIdRecord,
    ConfigRecord,
    ConfigResourceType,
    Endpoint,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    decode_snapshot,
    encode_snapshot,
)
from proto.kafka_types import NO_LEADER

SNAPSHOT_BROKER_ID = -1  # the producer-id counter in a snapshot belongs to no broker
NO_OFFSET = 0  # an empty image covers no entry (Raft indexes start at 1)
FIRST_PRODUCER_ID = 0

TopicIdAndIndex = tuple[str, int]  # (topic id, partition index): the controller's key of a partition
ConfigKey = tuple[ConfigResourceType, str]


class MetadataReplayError(Exception):
    """A record does not fit the image (unknown topic, partition or broker): the log is inconsistent."""


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str
    fenced: bool
    in_controlled_shutdown: bool

    @property
    def is_usable(self) -> bool:
        """May lead and be in an ISR: unfenced and not shutting down."""
        return not self.fenced and not self.in_controlled_shutdown


def isr_ineligibility(
    broker_id: int, registered: BrokerRegistration | None, broker_epoch: int | None
) -> str | None:
    """Why ``broker_id`` may not be in an ISR, or None: registered, unfenced, not shutting down and —
    unless ``broker_epoch`` is None (not checked) — ``broker_epoch`` is its registration's (KIP-903: a
    fetch from another incarnation, which may have lost data, proves nothing). Kafka's
    ``isReplicaIsrEligible`` on the leader and ``ineligibleReplicasForIsr`` on the controller."""
    if registered is None:
        return f"broker {broker_id} is not registered"
    if registered.fenced:
        return f"broker {broker_id} is fenced"
    if registered.in_controlled_shutdown:
        return f"broker {broker_id} is in controlled shutdown"
    if broker_epoch is not None and broker_epoch != registered.broker_epoch:
        return (
            f"broker {broker_id} fetched with broker epoch {broker_epoch}, its registration has "
            f"{registered.broker_epoch}"
        )
    return None


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: str
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)


def changed_partition(old: PartitionRegistration, r: PartitionChangeRecord) -> PartitionRegistration:
    """The epoch rules: partition epoch + 1 on every change, leader epoch + 1 when the leader changes."""
    leader = old.leader if r.leader is None else r.leader
    return PartitionRegistration(
        old.replicas,
        old.isr if r.isr is None else r.isr,
        leader,
        old.leader_epoch + 1 if leader != old.leader else old.leader_epoch,
        old.partition_epoch + 1,
    )


class MetadataImage:
    def __init__(self) -> None:
        self.offset = NO_OFFSET
        self.cluster_id = NO_CLUSTER_ID
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[str, TopicImage] = {}  # by topic id
        self.topic_ids: dict[str, str] = {}  # name -> topic id
        self.configs: dict[ConfigKey, dict[str, str]] = {}
        self.next_producer_id = FIRST_PRODUCER_ID
        self.replicas_by_broker: dict[int, set[TopicIdAndIndex]] = {}

    # ---- replay ----------------------------------------------------------------------------

    def apply_batch(self, records: tuple[Record, ...] | list[Record], offset: int) -> None:
        """Apply the records of one log entry; an empty batch (a barrier) only advances the offset."""
        if offset < self.offset:
            raise MetadataReplayError(f"offset {offset} is below the image's offset {self.offset}")
        for record in records:
            self._apply(record, offset)
        self.offset = offset

    def apply(self, record: Record, offset: int) -> None:
        self.apply_batch((record,), offset)

    def _apply(self, record: Record, offset: int) -> None:
        match record:
            case PartitionChangeRecord():
                return self._apply_partition_change(record)
            case PartitionRecord():
                return self._apply_partition(record)
            case RegisterBrokerRecord():
                return self._apply_register_broker(record, offset)
            case BrokerRegistrationChangeRecord():
                return self._apply_broker_change(record)
            case UnregisterBrokerRecord():
                self._broker(record.broker_id, record.broker_epoch)
                del self.brokers[record.broker_id]
                return None
            case TopicRecord():
                return self._apply_topic(record)
            case RemoveTopicRecord():
                return self._apply_remove_topic(record)
            case ConfigRecord():
                return self._apply_config(record)
            case ClusterIdRecord():
                return self._apply_cluster_id(record)
            case ProducerIdsRecord():
                if record.next_producer_id <= self.next_producer_id:
                    raise MetadataReplayError(
                        f"producer ids go backwards: {record.next_producer_id} <= {self.next_producer_id}"
                    )
                self.next_producer_id = record.next_producer_id
                return None
        raise MetadataReplayError(f"not a metadata record: {record!r}")

    def _apply_cluster_id(self, r: ClusterIdRecord) -> None:
        if not r.cluster_id or self.cluster_id not in (NO_CLUSTER_ID, r.cluster_id):
            raise MetadataReplayError(
                f"cluster id {r.cluster_id!r} replaces the log's cluster id {self.cluster_id!r}"
            )
        self.cluster_id = r.cluster_id

    def _broker(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        broker = self.brokers.get(broker_id)
        if broker is None or broker.broker_epoch != broker_epoch:
            found = None if broker is None else broker.broker_epoch
            raise MetadataReplayError(
                f"broker {broker_id} epoch {broker_epoch} is not registered (found {found})"
            )
        return broker

    def _apply_register_broker(self, r: RegisterBrokerRecord, offset: int) -> None:
        epoch = offset if r.broker_epoch == BROKER_EPOCH_FROM_OFFSET else r.broker_epoch
        self.brokers[r.broker_id] = BrokerRegistration(
            r.broker_id, r.incarnation_id, epoch, r.endpoints, r.rack, r.fenced, r.in_controlled_shutdown
        )

    def _apply_broker_change(self, r: BrokerRegistrationChangeRecord) -> None:
        broker = self._broker(r.broker_id, r.broker_epoch)
        fenced = broker.fenced if r.fenced is None else r.fenced
        shutdown = (
            broker.in_controlled_shutdown if r.in_controlled_shutdown is None else r.in_controlled_shutdown
        )
        self.brokers[r.broker_id] = replace(broker, fenced=fenced, in_controlled_shutdown=shutdown)

    def _apply_topic(self, r: TopicRecord) -> None:
        if r.name in self.topic_ids or r.topic_id in self.topics:
            raise MetadataReplayError(f"topic {r.name!r} ({r.topic_id}) exists already")
        self.topics[r.topic_id] = TopicImage(r.name, r.topic_id)
        self.topic_ids[r.name] = r.topic_id

    def _topic(self, topic_id: str) -> TopicImage:
        topic = self.topics.get(topic_id)
        if topic is None:
            raise MetadataReplayError(f"unknown topic id {topic_id}")
        return topic

    def _apply_remove_topic(self, r: RemoveTopicRecord) -> None:
        topic = self._topic(r.topic_id)
        for index, partition in topic.partitions.items():
            self._unindex(r.topic_id, index, partition.replicas)
        del self.topics[r.topic_id]
        del self.topic_ids[topic.name]
        self.configs.pop((ConfigResourceType.TOPIC, topic.name), None)

    def _apply_partition(self, r: PartitionRecord) -> None:
        topic = self._topic(r.topic_id)
        old = topic.partitions.get(r.partition)
        if old is not None:
            self._unindex(r.topic_id, r.partition, old.replicas)
        topic.partitions[r.partition] = PartitionRegistration(
            r.replicas, r.isr, r.leader, r.leader_epoch, r.partition_epoch
        )
        for broker_id in r.replicas:
            self.replicas_by_broker.setdefault(broker_id, set()).add((r.topic_id, r.partition))

    def _apply_partition_change(self, r: PartitionChangeRecord) -> None:
        topic = self._topic(r.topic_id)
        old = topic.partitions.get(r.partition)
        if old is None:
            raise MetadataReplayError(f"unknown partition {topic.name}-{r.partition}")
        topic.partitions[r.partition] = changed_partition(old, r)

    def _unindex(self, topic_id: str, partition: int, replicas: tuple[int, ...]) -> None:
        for broker_id in replicas:
            hosted = self.replicas_by_broker.get(broker_id)
            if hosted is not None:
                hosted.discard((topic_id, partition))
                if not hosted:
                    del self.replicas_by_broker[broker_id]

    def _apply_config(self, r: ConfigRecord) -> None:
        key = (r.resource_type, r.resource_name)
        if r.resource_type == ConfigResourceType.TOPIC and r.resource_name not in self.topic_ids:
            raise MetadataReplayError(f"config {r.name} for unknown topic {r.resource_name!r}")
        if r.value is None:
            overrides = self.configs.get(key, {})
            overrides.pop(r.name, None)
            if not overrides:
                self.configs.pop(key, None)
        else:
            self.configs.setdefault(key, {})[r.name] = r.value

    # ---- queries ---------------------------------------------------------------------------

    def topic_by_name(self, name: str) -> TopicImage | None:
        topic_id = self.topic_ids.get(name)
        return None if topic_id is None else self.topics[topic_id]

    def partitions_hosted_by(self, broker_id: int) -> list[TopicIdAndIndex]:
        """Partitions with ``broker_id`` among the replicas, in a deterministic order."""
        return sorted(self.replicas_by_broker.get(broker_id, ()))

    def partition(self, topic_id: str, partition: int) -> PartitionRegistration | None:
        topic = self.topics.get(topic_id)
        return None if topic is None else topic.partitions.get(partition)

    def usable_brokers(self) -> list[BrokerRegistration]:
        return [b for _, b in sorted(self.brokers.items()) if b.is_usable]

    def topic_overrides(self, name: str) -> dict[str, str]:
        return dict(self.configs.get((ConfigResourceType.TOPIC, name), {}))

    def cluster_defaults(self) -> dict[str, str]:
        return dict(self.configs.get((ConfigResourceType.CLUSTER, ""), {}))

    # ---- snapshots -------------------------------------------------------------------------

    def to_records(self) -> list[Record]:
        """Records that rebuild this image from an empty one, in a deterministic order."""
        out: list[Record] = [ClusterIdRecord(self.cluster_id)] if self.cluster_id else []
        out += [
            RegisterBrokerRecord(
                b.broker_id,
                b.incarnation_id,
                b.endpoints,
                b.rack,
                b.fenced,
                b.broker_epoch,
                b.in_controlled_shutdown,
            )
            for _, b in sorted(self.brokers.items())
        ]
        for name, topic_id in sorted(self.topic_ids.items()):
            out.append(TopicRecord(name, topic_id))
            for index, p in sorted(self.topics[topic_id].partitions.items()):
                out.append(
                    PartitionRecord(
                        topic_id, index, p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch
                    )
                )
        for (kind, resource), overrides in sorted(self.configs.items()):
            out.extend(ConfigRecord(kind, resource, k, v) for k, v in sorted(overrides.items()))
        if self.next_producer_id != FIRST_PRODUCER_ID:
            out.append(ProducerIdsRecord(SNAPSHOT_BROKER_ID, 0, self.next_producer_id))
        return out

    def snapshot(self) -> bytes:
        return encode_snapshot(self.offset, self.to_records())

    @classmethod
    def from_snapshot(cls, data: bytes) -> MetadataImage:
        offset, records = decode_snapshot(data)
        image = cls()
        image.apply_batch(records, offset)
        return image

    def state(self) -> tuple:
        """Everything the image knows, comparable with ``==`` (the snapshot-equivalence tests use it)."""
        topics = {t.topic_id: (t.name, dict(sorted(t.partitions.items()))) for t in self.topics.values()}
        brokers = dict(sorted(self.brokers.items()))
        return (self.offset, self.cluster_id, brokers, topics, self.configs, self.next_producer_id)

    def invariants(self) -> None:
        assert len(self.topic_ids) == len(self.topics), (
            f"{len(self.topic_ids)} names != {len(self.topics)} topics"
        )
        for topic_id, topic in self.topics.items():
            assert self.topic_ids[topic.name] == topic_id, f"name index of {topic.name!r} is wrong"
            for index, p in topic.partitions.items():
                where = f"{topic.name}-{index}"
                assert p.replicas and len(set(p.replicas)) == len(p.replicas), (
                    f"{where}: replicas {p.replicas}"
                )
                assert set(p.isr) <= set(p.replicas), f"{where}: isr {p.isr} not within replicas {p.replicas}"
                assert p.leader == NO_LEADER or p.leader in p.isr, (
                    f"{where}: leader {p.leader} not in isr {p.isr}"
                )
                for broker_id in p.replicas:
                    assert (topic_id, index) in self.replicas_by_broker.get(broker_id, ()), f"{where}: index"
