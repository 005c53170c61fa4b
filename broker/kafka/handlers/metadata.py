"""Metadata (3), v0-13: brokers, topics and partition leadership from the broker's metadata image.

Rules clients depend on:
- brokers: every unfenced broker that registered an endpoint for the listener the request came
  through (Kafka answers per listener), at its advertised host:port — clients drop the bootstrap
  connection and dial these;
- controller id: a live broker id, small and non-negative (the smallest listed one): librdkafka
  2.3-2.15 over-reads the cluster id after -1 or ids >= 2^24, and kafka-python's admin loops on -1.
  KRaft brokers also answer a broker id here, since clients send controller requests to brokers;
- auto-creation is off: an unknown topic gets UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID when asked
  by id, v10+); a partition without a leader gets LEADER_NOT_AVAILABLE with leader -1;
- leader epochs (v7+) turn on KIP-320 offset validation in clients, so OffsetForLeaderEpoch must
  answer real end offsets (``broker.kafka.handlers.offsets``); topic ids from v10.
A null topic list (v1+), or an empty one in v0, means every topic.
"""

from __future__ import annotations

from broker.kafka.handlers.context import BrokerServices, RequestContext
from broker.replica.replica_manager import INTERNAL_TOPICS
from metadata.image import MetadataImage, TopicImage
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from proto.kafka.topic_ids import topic_id_of, uuid_of
from proto.kafka_types import NO_LEADER


def live_brokers(image: MetadataImage, listener: str) -> list[tuple[int, str, int, str]]:
    """(broker id, host, port, rack) of every unfenced broker with an endpoint on ``listener``."""
    found = []
    for broker_id, broker in sorted(image.brokers.items()):
        if broker.fenced:
            continue
        for endpoint in broker.endpoints:
            if endpoint.name == listener:
                found.append((broker_id, endpoint.host, endpoint.port, broker.rack))
                break
    return found


def current_leader(image: MetadataImage, topic: str, partition: int, leader_id: int, leader_epoch: int
                   ) -> tuple[int, int]:  # fmt: skip
    """KIP-951's hint: the leader the replica manager knows, else the metadata image's (a partition
    not hosted here); (NO_LEADER, -1) when neither knows one."""
    if leader_id != NO_LEADER:
        return leader_id, leader_epoch
    t = image.topic_by_name(topic)
    reg = t.partitions.get(partition) if t is not None else None
    if reg is None:
        return NO_LEADER, -1
    return reg.leader, reg.leader_epoch


def handle_metadata(
    services: BrokerServices, context: RequestContext, request: m.MetadataRequest
) -> m.MetadataResponse:
    image = services.manager.image
    brokers = live_brokers(image, context.listener)
    ids = [b[0] for b in brokers]
    return m.MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            m.MetadataResponseBroker(node_id=i, host=h, port=p, rack=r or None) for i, h, p, r in brokers
        ],
        cluster_id=image.cluster_id,  # "" (never null) until the log has one: librdkafka dereferences it
        controller_id=min(ids) if ids else services.node_id,
        topics=[_topic(image, wanted) for wanted in _wanted(image, context.version, request.topics)],
    )


def _wanted(
    image: MetadataImage, version: int, topics: list[m.MetadataRequestTopic] | None
) -> list[tuple[str | None, str | None]]:
    """(name, topic id) pairs asked for; every topic for a null list (or an empty one in v0)."""
    if topics is None or (version == 0 and not topics):
        return [(name, None) for name in sorted(image.topic_ids)]
    wanted = []
    for t in topics:
        topic_id = topic_id_of(t.topic_id) if version >= 10 else None
        wanted.append((t.name, topic_id))
    return wanted


def _topic(image: MetadataImage, wanted: tuple[str | None, str | None]) -> m.MetadataResponseTopic:
    name, topic_id = wanted
    topic: TopicImage | None = None
    if name is not None:
        topic = image.topic_by_name(name)
    elif topic_id is not None:
        topic = image.topics.get(topic_id)
    if topic is None:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name is not None else ErrorCode.UNKNOWN_TOPIC_ID
        return m.MetadataResponseTopic(error_code=code, name=name, topic_id=uuid_of(topic_id or ""))
    return m.MetadataResponseTopic(
        error_code=0,
        name=topic.name,
        topic_id=uuid_of(topic.topic_id),
        is_internal=topic.name in INTERNAL_TOPICS,
        partitions=[_partition(image, index, reg) for index, reg in sorted(topic.partitions.items())],
    )


def _partition(image: MetadataImage, index: int, reg) -> m.MetadataResponsePartition:
    offline = [b for b in reg.replicas if b not in image.brokers or image.brokers[b].fenced]
    return m.MetadataResponsePartition(
        error_code=ErrorCode.LEADER_NOT_AVAILABLE if reg.leader == NO_LEADER else 0,
        partition_index=index,
        leader_id=reg.leader,
        leader_epoch=reg.leader_epoch,
        replica_nodes=list(reg.replicas),
        isr_nodes=list(reg.isr),
        offline_replicas=offline,
    )


HANDLERS = {ApiKey.METADATA: handle_metadata}
