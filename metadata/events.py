"""What the controller's log says about committed metadata: one named event per change.

``batch_events(image, records, offset)`` turns the records of one committed log entry into
``(event, fields)`` pairs, reading ``image`` as it was *before* the entry (the old leader and ISR of a
changed partition, a deleted topic's name). It is pure: it applies nothing, it keeps what the entry
itself changes in local maps (a topic created and its partitions in the same entry, two changes of one
partition), and the epoch rules are the image's own (``changed_partition``).

Who logs it: ``metadata.state_machine.MetadataStateMachine.apply``, for the entries this node proposed
as the active controller, when they commit — so every event is logged once, by the controller that
decided it, and only once the change is real. Standby controllers, brokers and a replay of the log
at start-up log none (they replay the same records).

Events and their fields (topics by name; ``topic_id`` where a name could be reused):
- ``topic_created`` topic, topic_id, partitions, replication_factor;
- ``partitions_created`` topic, partitions (the new indexes), replication_factor — CreatePartitions;
- ``topic_deleted`` topic, topic_id, partitions;
- ``leader_elected`` topic, partition, leader, previous_leader, leader_epoch, partition_epoch, isr,
  and ``unclean=true`` when the new leader was not in the previous ISR (records may be lost);
- ``partition_offline`` topic, partition, previous_leader, leader_epoch, isr (no eligible leader);
- ``partition_changed`` topic, partition, leader, isr, previous_isr, leader_epoch, partition_epoch
  (an ISR change without a new leader);
- ``config_changed`` resource_type, resource, config, value (``config_deleted`` without a value);
- ``min_insync_replicas_above_replication_factor`` topic, min_insync_replicas, replication_factor,
  effective: a topic created or altered with a min.insync.replicas larger than its replication factor.
  Kafka accepts it and uses the replication factor instead (its ``effectiveMinIsr``): acks=all then
  needs every replica in the ISR. Said at WARN, when it is set;
- ``broker_registered`` broker, broker_epoch, incarnation_id, endpoints, rack;
- ``broker_fenced``, ``broker_unfenced``, ``broker_controlled_shutdown``, ``broker_unregistered``
  broker, broker_epoch;
- ``cluster_id_written`` cluster_id.

``is_warning`` marks what needs an operator's attention (logged at WARN, the rest at INFO): a fenced
broker, an offline partition, an unclean election, a min.insync.replicas above the replication factor.
A producer-id block allocation is not an event (it happens all the time and changes nothing an
operator acts on).
"""

from __future__ import annotations

from collections.abc import Iterable

from metadata.image import MetadataImage, PartitionRegistration, changed_partition
from metadata.records import (
    BROKER_EPOCH_FROM_OFFSET,
    BrokerRegistrationChangeRecord,
    ClusterIdRecord,
    ConfigRecord,
    ConfigResourceType,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from proto.kafka_types import NO_LEADER

Event = tuple[str, dict[str, object]]
WARNING_EVENTS = frozenset(
    {"broker_fenced", "partition_offline", "min_insync_replicas_above_replication_factor"}
)
MIN_INSYNC_REPLICAS = "min.insync.replicas"


def is_warning(event: Event) -> bool:
    return event[0] in WARNING_EVENTS or bool(event[1].get("unclean"))


def batch_events(image: MetadataImage, records: Iterable[Record], offset: int) -> list[Event]:
    """The events of one committed entry at ``offset``, in record order; ``image`` is before it."""
    return _BatchEvents(image, offset).run(records)


class _BatchEvents:
    def __init__(self, image: MetadataImage, offset: int) -> None:
        self.image = image
        self.offset = offset
        self.events: list[Event] = []
        self.names: dict[str, str] = {}  # topic id -> name, for topics created in this entry
        self.partitions: dict[tuple[str, int], PartitionRegistration] = {}  # changed in this entry
        self.created: dict[str, dict[str, object]] = {}  # topic id -> its topic_created fields
        self.added: dict[str, dict[str, object]] = {}  # topic id -> its partitions_created fields

    def run(self, records: Iterable[Record]) -> list[Event]:
        min_insync: dict[str, str] = {}  # topic -> min.insync.replicas set in this entry
        for record in records:
            self._record(record)
            if (
                isinstance(record, ConfigRecord) and record.resource_type == ConfigResourceType.TOPIC
                and record.name == MIN_INSYNC_REPLICAS and record.value is not None
            ):  # fmt: skip
                min_insync[record.resource_name] = record.value
        self._min_insync_above_replication_factor(min_insync)
        return self.events

    def _min_insync_above_replication_factor(self, min_insync: dict[str, str]) -> None:
        """Topics created or altered in this entry whose min.insync.replicas (their own, or for a new
        topic the cluster default) exceeds their replication factor."""
        default = self.image.cluster_defaults().get(MIN_INSYNC_REPLICAS)
        checked = dict(min_insync)
        for fields in self.created.values():
            if default is not None:
                checked.setdefault(str(fields["topic"]), default)
        for topic, value in sorted(checked.items()):
            replication_factor = self._replication_factor(topic)
            if not value.isdigit() or replication_factor is None or int(value) <= replication_factor:
                continue
            self.events.append(("min_insync_replicas_above_replication_factor", {
                "topic": topic, "min_insync_replicas": int(value), "replication_factor": replication_factor,
                "effective": replication_factor,
            }))  # fmt: skip

    def _replication_factor(self, topic: str) -> int | None:
        for fields in self.created.values():
            if fields["topic"] == topic and "replication_factor" in fields:
                return int(str(fields["replication_factor"]))
        existing = self.image.topic_by_name(topic)
        if existing is None or not existing.partitions:
            return None
        return len(existing.partitions[0].replicas)

    def _record(self, r: Record) -> None:
        match r:
            case TopicRecord():
                self.names[r.topic_id] = r.name
                fields: dict[str, object] = {"topic": r.name, "topic_id": r.topic_id, "partitions": 0}
                self.created[r.topic_id] = fields
                self.events.append(("topic_created", fields))
            case PartitionRecord():
                self._partition(r)
            case PartitionChangeRecord():
                self._partition_change(r)
            case RemoveTopicRecord():
                topic = self.image.topics.get(r.topic_id)
                name = topic.name if topic is not None else self.names.get(r.topic_id, "")
                count = len(topic.partitions) if topic is not None else 0
                fields = {"topic": name, "topic_id": r.topic_id, "partitions": count}
                self.events.append(("topic_deleted", fields))
            case ConfigRecord():
                fields = {"resource_type": r.resource_type.name.lower(), "resource": r.resource_name,
                          "config": r.name}  # fmt: skip
                if r.value is None:
                    self.events.append(("config_deleted", fields))
                else:
                    self.events.append(("config_changed", {**fields, "value": r.value}))
            case RegisterBrokerRecord():
                epoch = self.offset if r.broker_epoch == BROKER_EPOCH_FROM_OFFSET else r.broker_epoch
                self.events.append(("broker_registered", {
                    "broker": r.broker_id, "broker_epoch": epoch, "incarnation_id": r.incarnation_id,
                    "endpoints": [f"{e.name}://{e.host}:{e.port}" for e in r.endpoints], "rack": r.rack,
                }))  # fmt: skip
            case BrokerRegistrationChangeRecord():
                ids: dict[str, object] = {"broker": r.broker_id, "broker_epoch": r.broker_epoch}
                if r.in_controlled_shutdown:
                    self.events.append(("broker_controlled_shutdown", ids))
                if r.fenced is not None:
                    self.events.append(("broker_fenced" if r.fenced else "broker_unfenced", ids))
            case UnregisterBrokerRecord():
                ids = {"broker": r.broker_id, "broker_epoch": r.broker_epoch}
                self.events.append(("broker_unregistered", ids))
            case ClusterIdRecord():
                self.events.append(("cluster_id_written", {"cluster_id": r.cluster_id}))

    def _topic_name(self, topic_id: str) -> str:
        topic = self.image.topics.get(topic_id)
        return topic.name if topic is not None else self.names.get(topic_id, topic_id)

    def _partition(self, r: PartitionRecord) -> None:
        self.partitions[(r.topic_id, r.partition)] = PartitionRegistration(
            r.replicas, r.isr, r.leader, r.leader_epoch, r.partition_epoch
        )
        created = self.created.get(r.topic_id)
        if created is not None:  # the topic is created in this entry: counted in its topic_created
            created["partitions"] = int(str(created["partitions"])) + 1
            created["replication_factor"] = len(r.replicas)
            return
        added = self.added.get(r.topic_id)
        if added is None:  # new partitions of an existing topic: one event per entry
            added = self.added[r.topic_id] = {"topic": self._topic_name(r.topic_id), "partitions": []}
            self.events.append(("partitions_created", added))
        added["partitions"] = [*list(added["partitions"]), r.partition]  # type: ignore[call-overload]
        added["replication_factor"] = len(r.replicas)

    def _partition_change(self, r: PartitionChangeRecord) -> None:
        key = (r.topic_id, r.partition)
        old = self.partitions.get(key) or self.image.partition(r.topic_id, r.partition)
        if old is None:
            return  # does not fit the image: replay refuses the entry
        new = changed_partition(old, r)
        self.partitions[key] = new
        where: dict[str, object] = {"topic": self._topic_name(r.topic_id), "partition": r.partition}
        epochs = {"leader_epoch": new.leader_epoch, "partition_epoch": new.partition_epoch}
        if new.leader == old.leader:
            self.events.append(("partition_changed", {
                **where, "leader": new.leader, "isr": new.isr, "previous_isr": old.isr, **epochs,
            }))  # fmt: skip
        elif new.leader == NO_LEADER:
            self.events.append(("partition_offline", {
                **where, "previous_leader": old.leader, "leader_epoch": new.leader_epoch, "isr": new.isr,
            }))  # fmt: skip
        else:
            fields = {**where, "leader": new.leader, "previous_leader": old.leader, **epochs, "isr": new.isr}
            if new.leader not in old.isr:
                fields["unclean"] = True
            self.events.append(("leader_elected", fields))
