"""Protobuf <-> the controller core's dataclasses, at the gRPC edge (admin.proto, controller.proto).

Generated types stop here: the core (``metadata.controller``) and the image never see protobuf.
Reads (describe/list) are rendered straight from the image.
"""

from __future__ import annotations

from metadata import configs as cfg
from metadata.api import (
    AlterableConfig,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerState,
    ElectLeadersRequest,
    NewPartitions,
    NewTopic,
    RegisterBrokerRequest,
)
from metadata.image import MetadataImage, TopicImage
from metadata.partition_change import Election
from metadata.records import ConfigResourceType, Endpoint
from proto import admin_pb2, common_pb2, controller_pb2, metadata_pb2
from proto.errors import ApiError, ErrorCode


def error_pb(error: ApiError) -> common_pb2.Error:
    return common_pb2.Error(code=int(error.code), message=error.message)


def endpoints_pb(endpoints: tuple[Endpoint, ...]) -> list[metadata_pb2.Endpoint]:
    return [metadata_pb2.Endpoint(name=e.name, host=e.host, port=e.port) for e in endpoints]


def resource_type(value: int) -> ConfigResourceType | None:
    return (
        ConfigResourceType(value) if value in (ConfigResourceType.TOPIC, ConfigResourceType.CLUSTER) else None
    )


# ---- admin requests -> core ----------------------------------------------------------------------


def new_topics(request: admin_pb2.CreateTopicsRequest) -> list[NewTopic]:
    return [
        NewTopic(
            t.name,
            t.num_partitions,
            t.replication_factor,
            {p: tuple(r.broker_ids) for p, r in t.assignments.items()},
            dict(t.configs),
        )
        for t in request.topics
    ]


def new_partitions(request: admin_pb2.CreatePartitionsRequest) -> list[NewPartitions]:
    return [
        NewPartitions(t.name, t.count, [tuple(a.broker_ids) for a in t.assignments]) for t in request.topics
    ]


def alter_configs_resources(request: admin_pb2.AlterConfigsRequest) -> list[AlterConfigsResource] | str:
    """The resources, or a message naming the first unknown resource type or operation."""
    out = []
    for r in request.resources:
        kind = resource_type(r.resource_type)
        if kind is None:
            return f"unknown config resource type {r.resource_type}; use TOPIC or CLUSTER"
        configs = []
        for c in r.configs:
            if c.op not in set(cfg.AlterConfigOp):
                return f"unknown config operation {c.op} for {c.name}"
            configs.append(AlterableConfig(c.name, cfg.AlterConfigOp(c.op), c.value))
        out.append(AlterConfigsResource(kind, r.resource_name, tuple(configs)))
    return out


def elect_leaders_request(request: admin_pb2.ElectLeadersRequest) -> ElectLeadersRequest:
    election = Election.UNCLEAN if request.election_type == admin_pb2.UNCLEAN else Election.PREFERRED
    if not request.topics:
        return ElectLeadersRequest(election)
    return ElectLeadersRequest(election, tuple((t.topic, p) for t in request.topics for p in t.partitions))


# ---- controller requests -> core -----------------------------------------------------------------


def register_broker_request(r: controller_pb2.RegisterBrokerRequest) -> RegisterBrokerRequest:
    return RegisterBrokerRequest(
        r.broker_id,
        r.incarnation_id,
        tuple(Endpoint(e.name, e.host, e.port) for e in r.endpoints),
        r.rack,
        r.cluster_id,
    )


def heartbeat_request(r: controller_pb2.BrokerHeartbeatRequest) -> BrokerHeartbeatRequest:
    return BrokerHeartbeatRequest(
        r.broker_id, r.broker_epoch, r.current_metadata_offset, r.want_fence, r.want_shut_down
    )


def alter_partition_request(r: controller_pb2.AlterPartitionRequest) -> AlterPartitionRequest:
    items = tuple(
        AlterPartitionItem(
            p.topic_id,
            p.partition,
            p.leader_epoch,
            p.partition_epoch,
            tuple(BrokerState(m.broker_id, m.broker_epoch) for m in p.new_isr_with_epochs),
        )
        for p in r.partitions
    )
    return AlterPartitionRequest(r.broker_id, r.broker_epoch, items)


# ---- reads from the image ------------------------------------------------------------------------


def topic_description(image: MetadataImage, topic: TopicImage) -> admin_pb2.TopicDescription:
    offline = {b for b, reg in image.brokers.items() if reg.fenced}
    partitions = []
    for index, p in sorted(topic.partitions.items()):
        partitions.append(
            admin_pb2.PartitionDescription(
                partition=index,
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch,
                replicas=p.replicas,
                isr=p.isr,
                offline_replicas=[r for r in p.replicas if r in offline or r not in image.brokers],
            )
        )
    return admin_pb2.TopicDescription(
        name=topic.name,
        topic_id=topic.topic_id,
        partitions=partitions,
        configs=image.topic_overrides(topic.name),
    )


def describe_topics(image: MetadataImage, names: list[str]) -> admin_pb2.DescribeTopicsResponse:
    wanted = names or sorted(image.topic_ids)
    out = []
    for name in wanted:
        topic = image.topic_by_name(name)
        if topic is None:
            error = ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
            out.append(admin_pb2.TopicDescription(name=name, error=error_pb(error)))
        else:
            out.append(topic_description(image, topic))
    return admin_pb2.DescribeTopicsResponse(topics=out, metadata_offset=image.offset)


def list_topics(image: MetadataImage) -> admin_pb2.ListTopicsResponse:
    topics = [
        admin_pb2.ListTopicsResponse.Topic(
            name=name, topic_id=tid, num_partitions=len(image.topics[tid].partitions)
        )
        for name, tid in sorted(image.topic_ids.items())
    ]
    return admin_pb2.ListTopicsResponse(topics=topics)


def describe_configs(
    image: MetadataImage, request: admin_pb2.DescribeConfigsRequest
) -> admin_pb2.DescribeConfigsResponse:
    results = []
    defaults = image.cluster_defaults()
    for r in request.resources:
        result = admin_pb2.DescribeConfigsResponse.Result(
            resource_type=r.resource_type, resource_name=r.resource_name
        )
        kind = resource_type(r.resource_type)
        if kind is None or (kind == ConfigResourceType.TOPIC and r.resource_name not in image.topic_ids):
            code = ErrorCode.INVALID_REQUEST if kind is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result.error.CopyFrom(
                error_pb(ApiError(code, f"no config resource {r.resource_name!r} of that type"))
            )
            results.append(result)
            continue
        overrides = image.topic_overrides(r.resource_name) if kind == ConfigResourceType.TOPIC else {}
        effective = cfg.effective_config(overrides, defaults)
        for name in r.config_names or sorted(effective):
            if name not in effective:
                error = ApiError(ErrorCode.INVALID_CONFIG, cfg.validate_config(name, "") or name)
                result.error.CopyFrom(error_pb(error))
                break
            source = cfg.config_source(name, overrides, defaults)
            result.configs.append(
                admin_pb2.DescribeConfigsResponse.Entry(name=name, value=effective[name], source=source)
            )
        results.append(result)
    return admin_pb2.DescribeConfigsResponse(results=results)


def describe_cluster(image: MetadataImage) -> admin_pb2.DescribeClusterResponse:
    brokers = [
        admin_pb2.DescribeClusterResponse.Broker(
            broker_id=b.broker_id,
            endpoints=endpoints_pb(b.endpoints),
            rack=b.rack,
            fenced=b.fenced,
            in_controlled_shutdown=b.in_controlled_shutdown,
            broker_epoch=b.broker_epoch,
        )
        for _, b in sorted(image.brokers.items())
    ]
    return admin_pb2.DescribeClusterResponse(
        brokers=brokers, metadata_offset=image.offset, cluster_id=image.cluster_id
    )
