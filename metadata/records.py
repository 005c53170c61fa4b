"""Metadata records: the frozen dataclasses the image and the controller use, and their codec.

The metadata log is a sequence of Raft entries; each entry carries one ``MetadataBatch`` (see
``proto/metadata.proto``): the records of one controller decision, applied all or nothing. A
record's *offset* is the Raft index of its entry; a broker's epoch is the offset of its
registration record.

Records say what changed, never how to compute it: replay (``MetadataImage.apply``) derives the
epoch bumps deterministically (``PartitionChangeRecord``: partition epoch + 1 always, leader epoch
+ 1 when the leader changes), so every controller and broker computes the same image.

Only this module (and the gRPC edge) touches protobuf: ``encode_batch`` / ``decode_batch`` turn a
tuple of records into the bytes of one Raft entry and back. Decoding bytes from the network or the
disk that do not parse raises ``CorruptMetadataError``, never an assertion.
"""

from __future__ import annotations

import base64
import binascii
import enum
from dataclasses import dataclass
from typing import cast

from google.protobuf.message import DecodeError

from proto import metadata_pb2 as pb

BROKER_EPOCH_FROM_OFFSET = 0  # RegisterBrokerRecord: the epoch is the offset of the record itself
NO_RACK = ""
NO_CLUSTER_ID = ""  # an image before the first active controller wrote the cluster id
UUID_BYTES = 16
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID, reserved


class CorruptMetadataError(Exception):
    """Bytes that claim to be a metadata batch or snapshot do not decode."""


class ConfigResourceType(enum.IntEnum):
    TOPIC = pb.TOPIC
    CLUSTER = pb.CLUSTER  # cluster-wide defaults of topic configs; resource name ""


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    broker_id: int
    incarnation_id: str
    endpoints: tuple[Endpoint, ...] = ()
    rack: str = NO_RACK
    fenced: bool = True
    broker_epoch: int = BROKER_EPOCH_FROM_OFFSET
    in_controlled_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord:
    """``None`` = unchanged."""

    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: str


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """``leader``/``isr`` of ``None`` = unchanged."""

    topic_id: str
    partition: int
    leader: int | None = None
    isr: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: str


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """``value`` of ``None`` deletes the override (the default applies again)."""

    resource_type: ConfigResourceType
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True, slots=True)
class ClusterIdRecord:
    """The cluster's id, written once; replay refuses a second, different one."""

    cluster_id: str


def cluster_id_problem(cluster_id: str) -> str | None:
    """Why ``cluster_id`` is not a Kafka cluster id (a Uuid: 16 bytes in url-safe base64 without
    padding, 22 characters, not the zero Uuid), or None. Kafka's ``Uuid.fromString`` at format time."""
    hint = "give a Uuid like Kafka's `kafka-storage.sh random-uuid` prints, or leave cluster.id unset"
    if len(cluster_id) != 22:
        return f"cluster id {cluster_id!r} has {len(cluster_id)} characters, not 22; {hint}"
    try:
        raw = base64.urlsafe_b64decode(cluster_id + "==")
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != UUID_BYTES or base64.urlsafe_b64encode(raw).decode().rstrip("=") != cluster_id:
        return f"cluster id {cluster_id!r} is not a url-safe base64 Uuid; {hint}"
    if cluster_id == ZERO_UUID:
        return f"cluster id {cluster_id!r} is the reserved zero Uuid; {hint}"
    return None


Record = (
    ClusterIdRecord
    | RegisterBrokerRecord
    | UnregisterBrokerRecord
    | BrokerRegistrationChangeRecord
    | TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | ConfigRecord
    | ProducerIdsRecord
)


# ---- records -> protobuf ----------------------------------------------------------------------


def _to_pb(record: Record) -> pb.MetadataRecord:
    out = pb.MetadataRecord()
    match record:
        case PartitionChangeRecord():
            change = out.partition_change
            change.topic_id, change.partition = record.topic_id, record.partition
            if record.leader is not None:
                change.leader = record.leader
            if record.isr is not None:
                change.isr_changed = True
                change.isr.extend(record.isr)
        case PartitionRecord():
            out.partition.CopyFrom(
                pb.PartitionRecord(
                    topic_id=record.topic_id,
                    partition=record.partition,
                    replicas=record.replicas,
                    isr=record.isr,
                    leader=record.leader,
                    leader_epoch=record.leader_epoch,
                    partition_epoch=record.partition_epoch,
                )
            )
        case RegisterBrokerRecord():
            out.register_broker.CopyFrom(
                pb.RegisterBrokerRecord(
                    broker_id=record.broker_id,
                    incarnation_id=record.incarnation_id,
                    endpoints=[pb.Endpoint(name=e.name, host=e.host, port=e.port) for e in record.endpoints],
                    rack=record.rack,
                    fenced=record.fenced,
                    broker_epoch=record.broker_epoch,
                    in_controlled_shutdown=record.in_controlled_shutdown,
                )
            )
        case UnregisterBrokerRecord():
            out.unregister_broker.CopyFrom(
                pb.UnregisterBrokerRecord(broker_id=record.broker_id, broker_epoch=record.broker_epoch)
            )
        case BrokerRegistrationChangeRecord():
            registration = out.broker_registration_change
            registration.broker_id, registration.broker_epoch = record.broker_id, record.broker_epoch
            if record.fenced is not None:
                registration.fenced = record.fenced
            if record.in_controlled_shutdown is not None:
                registration.in_controlled_shutdown = record.in_controlled_shutdown
        case TopicRecord():
            out.topic.CopyFrom(pb.TopicRecord(name=record.name, topic_id=record.topic_id))
        case RemoveTopicRecord():
            out.remove_topic.CopyFrom(pb.RemoveTopicRecord(topic_id=record.topic_id))
        case ConfigRecord():
            config = out.config
            config.resource_type, config.resource_name, config.name = (
                # protobuf takes the number; its stubs type the field as the enum class
                cast(pb.ConfigResourceType, int(record.resource_type)),
                record.resource_name,
                record.name,
            )
            if record.value is not None:
                config.value = record.value
        case ProducerIdsRecord():
            out.producer_ids.CopyFrom(
                pb.ProducerIdsRecord(
                    broker_id=record.broker_id,
                    broker_epoch=record.broker_epoch,
                    next_producer_id=record.next_producer_id,
                )
            )
        case ClusterIdRecord():
            out.cluster_id.cluster_id = record.cluster_id
        case _:
            raise TypeError(f"not a metadata record: {record!r}")
    return out


# ---- protobuf -> records ----------------------------------------------------------------------


def _from_pb(msg: pb.MetadataRecord) -> Record:
    kind = msg.WhichOneof("record")
    if kind == "partition_change":
        change = msg.partition_change
        return PartitionChangeRecord(
            change.topic_id,
            change.partition,
            leader=change.leader if change.HasField("leader") else None,
            isr=tuple(change.isr) if change.isr_changed else None,
        )
    if kind == "partition":
        p = msg.partition
        return PartitionRecord(
            p.topic_id,
            p.partition,
            tuple(p.replicas),
            tuple(p.isr),
            p.leader,
            p.leader_epoch,
            p.partition_epoch,
        )
    if kind == "register_broker":
        broker = msg.register_broker
        return RegisterBrokerRecord(
            broker_id=broker.broker_id,
            incarnation_id=broker.incarnation_id,
            endpoints=tuple(Endpoint(e.name, e.host, e.port) for e in broker.endpoints),
            rack=broker.rack,
            fenced=broker.fenced,
            broker_epoch=broker.broker_epoch,
            in_controlled_shutdown=broker.in_controlled_shutdown,
        )
    if kind == "unregister_broker":
        return UnregisterBrokerRecord(msg.unregister_broker.broker_id, msg.unregister_broker.broker_epoch)
    if kind == "broker_registration_change":
        registration = msg.broker_registration_change
        return BrokerRegistrationChangeRecord(
            registration.broker_id,
            registration.broker_epoch,
            fenced=registration.fenced if registration.HasField("fenced") else None,
            in_controlled_shutdown=(
                registration.in_controlled_shutdown
                if registration.HasField("in_controlled_shutdown")
                else None
            ),
        )
    if kind == "topic":
        return TopicRecord(msg.topic.name, msg.topic.topic_id)
    if kind == "remove_topic":
        return RemoveTopicRecord(msg.remove_topic.topic_id)
    if kind == "config":
        config = msg.config
        if config.resource_type not in (pb.TOPIC, pb.CLUSTER):
            raise CorruptMetadataError(f"config record with unknown resource type {config.resource_type}")
        value = config.value if config.HasField("value") else None
        resource_type = ConfigResourceType(config.resource_type)
        return ConfigRecord(resource_type, config.resource_name, config.name, value)
    if kind == "producer_ids":
        ids = msg.producer_ids
        return ProducerIdsRecord(ids.broker_id, ids.broker_epoch, ids.next_producer_id)
    if kind == "cluster_id":
        return ClusterIdRecord(msg.cluster_id.cluster_id)
    raise CorruptMetadataError(f"metadata record of unknown kind {kind!r}")


def encode_batch(records: tuple[Record, ...] | list[Record]) -> bytes:
    """The bytes of one metadata-log entry.

    Partition records dominate big batches (a fence moves thousands of leaders), so they are written
    straight into the batch's repeated field: about twice as fast as building and copying messages.
    """
    batch = pb.MetadataBatch()
    add = batch.records.add
    for record in records:
        if type(record) is PartitionChangeRecord:
            change = add().partition_change
            change.topic_id = record.topic_id
            change.partition = record.partition
            if record.leader is not None:
                change.leader = record.leader
            if record.isr is not None:
                change.isr_changed = True
                change.isr.extend(record.isr)
        elif type(record) is PartitionRecord:
            m = add().partition
            m.topic_id = record.topic_id
            m.partition = record.partition
            m.replicas.extend(record.replicas)
            m.isr.extend(record.isr)
            m.leader = record.leader
            m.leader_epoch = record.leader_epoch
            m.partition_epoch = record.partition_epoch
        else:
            add().CopyFrom(_to_pb(record))
    return batch.SerializeToString()


def decode_batch(data: bytes) -> tuple[Record, ...]:
    """Records of one metadata-log entry; empty bytes (a barrier entry) decode to no records."""
    try:
        batch = pb.MetadataBatch.FromString(data)
    except DecodeError as exc:
        raise CorruptMetadataError(f"metadata batch of {len(data)} bytes does not decode: {exc}") from exc
    out: list[Record] = []
    for msg in batch.records:
        if msg.WhichOneof("record") == "partition_change":  # the bulk of big batches: decoded inline
            r = msg.partition_change
            leader = r.leader if r.HasField("leader") else None
            out.append(
                PartitionChangeRecord(
                    r.topic_id, r.partition, leader, tuple(r.isr) if r.isr_changed else None
                )
            )
        else:
            out.append(_from_pb(msg))
    return tuple(out)


def encode_snapshot(offset: int, records: list[Record]) -> bytes:
    return pb.MetadataSnapshot(offset=offset, records=[_to_pb(r) for r in records]).SerializeToString()


def decode_snapshot(data: bytes) -> tuple[int, tuple[Record, ...]]:
    """``(offset, records)`` of a snapshot."""
    try:
        snap = pb.MetadataSnapshot.FromString(data)
    except DecodeError as exc:
        raise CorruptMetadataError(f"metadata snapshot of {len(data)} bytes does not decode: {exc}") from exc
    return snap.offset, tuple(_from_pb(r) for r in snap.records)
