"""The admin APIs on the Kafka listener: forwarded to the active controller over the gRPC AdminService.

CreateTopics (19) v0-7, DeleteTopics (20) v0-6, CreatePartitions (37) v0-3, DescribeConfigs (32) v0-4,
AlterConfigs (33) v0-2, IncrementalAlterConfigs (44) v0-1, ElectLeaders (43) v0-2 go to the controllers
(``BrokerServices.forward_admin``: any controller forwards to the active one; none reachable is
NOT_CONTROLLER, which Kafka's clients retry). The controller stays the only writer of metadata and
validates everything; a handler converts the wire struct to the gRPC request and the answer back, and
adds what only the Kafka API has:

- CreateTopics: a topic named twice in one request is INVALID_REQUEST (Kafka's rule); a null config
  value is INVALID_CONFIG; -1 partitions / replication factor = the cluster default; v5+ answers the
  topic's configs with their source. The answer waits (up to ``timeout_ms``, at most
  ``TOPIC_VISIBLE_WAIT_S``) until this broker's metadata shows the change, so a client's next
  Metadata request here sees it.
- DeleteTopics v6 deletes by topic id too (resolved to the name from this broker's metadata).
- DescribeConfigs: resource type TOPIC (2), and BROKER (4): pykraft has one cluster-wide default for
  topic configs (Kafka's dynamic default broker config), which a broker resource with an empty name or
  any live broker's id describes, under the topic config names. Requested names that do not exist are
  left out (Kafka's behaviour); synonyms (v1+), Kafka's config sources, config types and documentation
  (v3+).
- AlterConfigs (legacy) replaces the resource's whole set of overrides: what it does not name is
  deleted. IncrementalAlterConfigs applies SET/DELETE/APPEND/SUBTRACT. Per-broker configs (a broker
  resource with a name) are not supported: INVALID_REQUEST naming the empty-name resource instead.
- ElectLeaders: PREFERRED (0) or UNCLEAN (1); a null topic list = every partition.

DescribeCluster (60) is answered from this broker's metadata like Metadata (brokers on the listener the
request came through, a live broker as controller id); DeleteRecords (21) and DescribeProducers (61)
are partition-leader operations on the replica manager, as in Kafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from broker.kafka.handlers.context import BrokerServices, RequestContext
from broker.kafka.handlers.metadata import live_brokers
from metadata import configs as cfg
from proto import admin_pb2, metadata_pb2
from proto.errors import ApiError, ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from proto.kafka.topic_ids import topic_id_of, uuid_of
from proto.kafka_types import NO_OFFSET, TopicPartition
from proto.topic_configs import TOPIC_CONFIGS, ConfigType

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
BROKERS_ENDPOINT_TYPE = 1
# Kafka's error 115 (KIP-919), not in proto's ErrorCode (nothing else answers it).
UNSUPPORTED_ENDPOINT_TYPE = 115
NO_ANSWER = ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer")
TOPIC_VISIBLE_WAIT_S = 5.0
TOPIC_VISIBLE_POLL_S = 0.02
# Kafka's DescribeConfigsResponse config sources.
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
DEFAULT_CONFIG = 5
SOURCES = {
    "TOPIC": DYNAMIC_TOPIC_CONFIG,
    "CLUSTER_DEFAULT": DYNAMIC_DEFAULT_BROKER_CONFIG,
    "DEFAULT": DEFAULT_CONFIG,
}
# Kafka's DescribeConfigsResponse config types.
CONFIG_TYPES = {
    ConfigType.BOOLEAN: 1,
    ConfigType.STRING: 2,
    ConfigType.INT: 3,
    ConfigType.LONG: 5,
    ConfigType.DOUBLE: 6,
    ConfigType.LIST: 7,
}
CREATE_TOPICS_CONFIGS_VERSION = 5
DESCRIBE_CONFIGS_SOURCE_VERSION = 1
DELETE_TOPICS_BY_ID_VERSION = 6


class AdminProblem(Exception):
    """A whole-request failure of a forwarded call (NOT_CONTROLLER, REQUEST_TIMED_OUT, ...)."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(error.message)
        self.error = error


def api_error(error: Any) -> ApiError:
    """The ``ApiError`` of a controller answer's ``common_pb2.Error``."""
    return ApiError(ErrorCode(error.code), error.message)


async def forward(services: BrokerServices, method: str, request: Any) -> Any:
    """The controller's answer; its whole-request error raises ``AdminProblem``."""
    if services.forward_admin is None:
        raise AdminProblem(ApiError(ErrorCode.NOT_CONTROLLER, "this broker cannot reach the controllers"))
    response = await services.forward_admin(method, request)
    if response.error.code:
        raise AdminProblem(api_error(response.error))
    return response


def duplicates(names: list[str]) -> set[str]:
    seen: set[str] = set()
    return {n for n in names if n in seen or seen.add(n)}  # type: ignore[func-returns-value]


async def wait_visible(services: BrokerServices, timeout_ms: int, done: Callable[[], bool]) -> None:
    """Wait (bounded) until this broker's metadata shows a change the controller committed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max(timeout_ms, 0) / 1000, TOPIC_VISIBLE_WAIT_S)
    while loop.time() < deadline:
        if done():
            return
        await asyncio.sleep(TOPIC_VISIBLE_POLL_S)


# ---- CreateTopics / DeleteTopics / CreatePartitions ------------------------------------------------------


async def handle_create_topics(
    services: BrokerServices, context: RequestContext, request: m.CreateTopicsRequest
) -> m.CreateTopicsResponse:
    twice = duplicates([t.name for t in request.topics])
    results: dict[str, m.CreateTopicsResponseCreatableTopicResult] = {}
    forwarded = admin_pb2.CreateTopicsRequest(validate_only=request.validate_only)
    for t in request.topics:
        if t.name in twice:
            results[t.name] = _topic_error(
                t.name,
                ApiError(
                    ErrorCode.INVALID_REQUEST, f"topic {t.name!r} appears more than once in the request"
                ),
            )
            continue
        nulls = [c.name for c in t.configs if c.value is None]
        if nulls:
            results[t.name] = _topic_error(
                t.name,
                ApiError(
                    ErrorCode.INVALID_CONFIG,
                    f"configs {nulls} have a null value; give a value or leave them out",
                ),
            )
            continue
        topic = forwarded.topics.add(
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            configs={c.name: c.value for c in t.configs if c.value is not None},
        )
        for a in t.assignments:
            topic.assignments[a.partition_index].broker_ids.extend(a.broker_ids)
    if forwarded.topics:
        try:
            response = await forward(services, "CreateTopics", forwarded)
        except AdminProblem as exc:
            for topic in forwarded.topics:
                results[topic.name] = _topic_error(topic.name, exc.error)
        else:
            created = [r.name for r in response.topics if not r.error.code]
            if created and not request.validate_only:
                image = lambda: services.manager.image  # noqa: E731
                await wait_visible(
                    services,
                    request.timeout_ms,
                    lambda: all(image().topic_by_name(n) is not None for n in created),
                )
            for r in response.topics:
                results[r.name] = _created(services, context.version, r)
    return m.CreateTopicsResponse(
        throttle_time_ms=0, topics=[results[name] for name in dict.fromkeys(t.name for t in request.topics)]
    )


def _topic_error(name: str, error: ApiError) -> m.CreateTopicsResponseCreatableTopicResult:
    return m.CreateTopicsResponseCreatableTopicResult(
        name=name,
        error_code=error.code,
        error_message=error.message,
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
        topic_config_error_code=0,
    )


def _created(
    services: BrokerServices, version: int, r: admin_pb2.CreateTopicsResponse.Result
) -> m.CreateTopicsResponseCreatableTopicResult:
    if r.error.code:
        return _topic_error(r.name, api_error(r.error))
    configs = None
    if version >= CREATE_TOPICS_CONFIGS_VERSION:
        defaults = services.manager.image.cluster_defaults()
        overrides = services.manager.image.topic_overrides(r.name)
        configs = [
            m.CreateTopicsResponseCreatableTopicConfigs(
                name=name,
                value=value,
                read_only=False,
                is_sensitive=False,
                config_source=SOURCES[cfg.config_source(name, overrides, defaults)],
            )
            for name, value in sorted(r.configs.items())
        ]
    return m.CreateTopicsResponseCreatableTopicResult(
        name=r.name,
        topic_id=uuid_of(r.topic_id),
        error_code=0,
        error_message=None,
        num_partitions=r.num_partitions,
        replication_factor=r.replication_factor,
        configs=configs,
    )


async def handle_delete_topics(
    services: BrokerServices, context: RequestContext, request: m.DeleteTopicsRequest
) -> m.DeleteTopicsResponse:
    image = services.manager.image
    wanted: list[tuple[str | None, str]] = []  # (name, topic id) per requested topic, in order
    if context.version >= DELETE_TOPICS_BY_ID_VERSION:
        for t in request.topics:
            topic_id = topic_id_of(t.topic_id)
            if t.name is None and topic_id:
                topic = image.topics.get(topic_id)
                wanted.append((topic.name if topic is not None else None, topic_id))
            else:
                wanted.append((t.name, topic_id))
    else:
        wanted = [(name, "") for name in request.topic_names]
    results: list[m.DeleteTopicsResponseDeletableTopicResult] = []
    names = [name for name, _ in wanted if name is not None]
    outcome: dict[str, tuple[ApiError, str]] = {}  # name -> (error, topic id)
    twice = duplicates(names)
    to_delete = [n for n in dict.fromkeys(names) if n not in twice]
    if to_delete:
        try:
            response = await forward(services, "DeleteTopics", admin_pb2.DeleteTopicsRequest(names=to_delete))
            outcome = {r.name: (api_error(r.error), r.topic_id) for r in response.topics}
        except AdminProblem as exc:
            outcome = dict.fromkeys(to_delete, (exc.error, ""))
        deleted = [n for n, (error, _) in outcome.items() if error.ok]
        await wait_visible(
            services,
            request.timeout_ms,
            lambda: all(services.manager.image.topic_by_name(n) is None for n in deleted),
        )
    for name, topic_id in wanted:
        shown_id = topic_id
        if name is None:
            error = ApiError(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id!r}")
        elif name in twice:
            error = ApiError(
                ErrorCode.INVALID_REQUEST, f"topic {name!r} appears more than once in the request"
            )
        else:
            error, found_id = outcome.get(name, (ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer"), ""))
            shown_id = topic_id or found_id
        results.append(
            m.DeleteTopicsResponseDeletableTopicResult(
                name=name,
                topic_id=uuid_of(shown_id),
                error_code=error.code,
                error_message=error.message or None,
            )
        )
    return m.DeleteTopicsResponse(throttle_time_ms=0, responses=results)


async def handle_create_partitions(
    services: BrokerServices, context: RequestContext, request: m.CreatePartitionsRequest
) -> m.CreatePartitionsResponse:
    twice = duplicates([t.name for t in request.topics])
    forwarded = admin_pb2.CreatePartitionsRequest(validate_only=request.validate_only)
    outcome: dict[str, ApiError] = {}
    for t in request.topics:
        if t.name in twice:
            outcome[t.name] = ApiError(
                ErrorCode.INVALID_REQUEST,
                f"topic {t.name!r} appears more than once in the request",
            )
            continue
        topic = forwarded.topics.add(name=t.name, count=t.count)
        for a in t.assignments or ():
            topic.assignments.add(broker_ids=a.broker_ids)
    if forwarded.topics:
        try:
            response = await forward(services, "CreatePartitions", forwarded)
            outcome.update({r.name: api_error(r.error) for r in response.topics})
        except AdminProblem as exc:
            outcome.update({t.name: exc.error for t in forwarded.topics})
        grown = {t.name: t.count for t in forwarded.topics if t.name in outcome and outcome[t.name].ok}
        if grown and not request.validate_only:

            def visible() -> bool:
                image = services.manager.image
                return all(
                    (t := image.topic_by_name(n)) is not None and len(t.partitions) >= count
                    for n, count in grown.items()
                )

            await wait_visible(services, request.timeout_ms, visible)
    return m.CreatePartitionsResponse(
        throttle_time_ms=0,
        results=[
            m.CreatePartitionsResponseCreatePartitionsTopicResult(
                name=name,
                error_code=outcome.get(name, NO_ANSWER).code,
                error_message=outcome.get(name, NO_ANSWER).message or None,
            )
            for name in dict.fromkeys(t.name for t in request.topics)
        ],
    )


# ---- DescribeConfigs / AlterConfigs / IncrementalAlterConfigs --------------------------------------------


def _config_resource(services: BrokerServices, resource_type: int, name: str) -> tuple[int, str] | str:
    """Our (ConfigResourceType, name) for a Kafka resource, or the problem with it."""
    if resource_type == TOPIC_RESOURCE:
        return metadata_pb2.TOPIC, name
    if resource_type == BROKER_RESOURCE:
        brokers = services.manager.image.brokers
        if name == "" or (name.isdigit() and int(name) in brokers):
            return metadata_pb2.CLUSTER, ""
        return f"broker {name!r} is not a registered broker id"
    return f"resource type {resource_type} is not supported (2 = topic, 4 = broker)"


async def handle_describe_configs(
    services: BrokerServices, context: RequestContext, request: m.DescribeConfigsRequest
) -> m.DescribeConfigsResponse:
    version = context.version
    forwarded = admin_pb2.DescribeConfigsRequest()
    problems: dict[int, ApiError] = {}
    for i, r in enumerate(request.resources):
        target = _config_resource(services, r.resource_type, r.resource_name)
        if isinstance(target, str):
            problems[i] = ApiError(ErrorCode.INVALID_REQUEST, target)
        else:
            forwarded.resources.add(resource_type=target[0], resource_name=target[1])
    synonyms = version >= DESCRIBE_CONFIGS_SOURCE_VERSION and request.include_synonyms
    if synonyms:  # the cluster level of every topic config, for the synonyms
        forwarded.resources.add(resource_type=metadata_pb2.CLUSTER, resource_name="")
    answers: list[admin_pb2.DescribeConfigsResponse.Result] = []
    if forwarded.resources:
        try:
            answers = list((await forward(services, "DescribeConfigs", forwarded)).results)
        except AdminProblem as exc:
            problems.update({i: exc.error for i in range(len(request.resources)) if i not in problems})
    cluster = {e.name: e for e in answers[-1].configs} if synonyms and answers else {}
    results = []
    answered = iter(answers)
    for i, r in enumerate(request.resources):
        if i in problems:
            results.append(
                m.DescribeConfigsResponseDescribeConfigsResult(
                    error_code=problems[i].code,
                    error_message=problems[i].message,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
            )
            continue
        answer = next(answered)
        wanted = (
            None if r.configuration_keys is None else set(r.configuration_keys)  # [] asks for none
        )
        entries = [
            _config_entry(version, request, e, cluster.get(e.name))
            for e in answer.configs
            if wanted is None or e.name in wanted
        ]
        results.append(
            m.DescribeConfigsResponseDescribeConfigsResult(
                error_code=answer.error.code,
                error_message=answer.error.message or None,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=entries if not answer.error.code else [],
            )
        )
    return m.DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _config_entry(
    version: int, request: m.DescribeConfigsRequest, e: Any, cluster: Any
) -> m.DescribeConfigsResponseDescribeConfigsResourceResult:
    source = SOURCES.get(e.source, DEFAULT_CONFIG)
    definition = TOPIC_CONFIGS.get(e.name)
    synonyms = []
    if version >= DESCRIBE_CONFIGS_SOURCE_VERSION and request.include_synonyms:
        if source == DYNAMIC_TOPIC_CONFIG:
            synonyms.append((e.name, e.value, DYNAMIC_TOPIC_CONFIG))
        if cluster is not None and cluster.source == "CLUSTER_DEFAULT":
            synonyms.append((e.name, cluster.value, DYNAMIC_DEFAULT_BROKER_CONFIG))
        if definition is not None:
            synonyms.append((e.name, definition.default, DEFAULT_CONFIG))
    return m.DescribeConfigsResponseDescribeConfigsResourceResult(
        name=e.name,
        value=e.value,
        read_only=False,
        is_default=source == DEFAULT_CONFIG,
        config_source=source,
        is_sensitive=False,
        synonyms=[
            m.DescribeConfigsResponseDescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in synonyms
        ],
        config_type=CONFIG_TYPES.get(definition.type, 0) if definition is not None else 0,
        documentation=(definition.doc or None)
        if definition is not None and request.include_documentation
        else None,
    )


async def handle_incremental_alter_configs(
    services: BrokerServices, context: RequestContext, request: m.IncrementalAlterConfigsRequest
) -> m.IncrementalAlterConfigsResponse:
    changes = [
        (r.resource_type, r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs])
        for r in request.resources
    ]
    outcome = await _alter(services, changes, request.validate_only)
    return m.IncrementalAlterConfigsResponse(
        throttle_time_ms=0,
        responses=_alter_results(
            m.IncrementalAlterConfigsResponseAlterConfigsResourceResponse, request.resources, outcome
        ),
    )


async def handle_alter_configs(
    services: BrokerServices, context: RequestContext, request: m.AlterConfigsRequest
) -> m.AlterConfigsResponse:
    """Legacy AlterConfigs: the given configs become the resource's whole set of overrides (the
    current ones come from the controller first; those not named are deleted)."""
    result = m.AlterConfigsResponseAlterConfigsResourceResponse
    targets = [_config_resource(services, r.resource_type, r.resource_name) for r in request.resources]
    described = admin_pb2.DescribeConfigsRequest()
    for target in targets:
        if not isinstance(target, str):
            described.resources.add(resource_type=target[0], resource_name=target[1])
    try:
        answers = iter(
            (await forward(services, "DescribeConfigs", described)).results if described.resources else ()
        )
    except AdminProblem as exc:
        failed = [exc.error] * len(request.resources)
        return m.AlterConfigsResponse(
            throttle_time_ms=0, responses=_alter_results(result, request.resources, failed)
        )
    changes = []
    for r, target in zip(request.resources, targets, strict=True):
        level = "TOPIC" if r.resource_type == TOPIC_RESOURCE else "CLUSTER_DEFAULT"
        current = (
            [] if isinstance(target, str) else [e.name for e in next(answers).configs if e.source == level]
        )
        given = {c.name: c.value for c in r.configs}
        ops = [(name, int(cfg.AlterConfigOp.SET), value) for name, value in given.items()]
        ops += [(name, int(cfg.AlterConfigOp.DELETE), None) for name in current if name not in given]
        changes.append((r.resource_type, r.resource_name, ops))
    outcome = await _alter(services, changes, request.validate_only)
    return m.AlterConfigsResponse(
        throttle_time_ms=0, responses=_alter_results(result, request.resources, outcome)
    )


def _alter_results(result_class: Any, resources: list[Any], outcome: list[ApiError]) -> list[Any]:
    return [
        result_class(
            error_code=error.code,
            error_message=error.message or None,
            resource_type=r.resource_type,
            resource_name=r.resource_name,
        )
        for r, error in zip(resources, outcome, strict=True)
    ]


async def _alter(
    services: BrokerServices,
    changes: list[tuple[int, str, list[tuple[str, int, str | None]]]],
    validate_only: bool,
) -> list[ApiError]:
    """The outcome of each resource of one (Incremental)AlterConfigs request."""
    outcome: list[ApiError | None] = []
    forwarded = admin_pb2.AlterConfigsRequest(validate_only=validate_only)
    twice = duplicates([f"{kind}/{name}" for kind, name, _ in changes])
    for kind, name, ops in changes:
        if f"{kind}/{name}" in twice:
            outcome.append(
                ApiError(
                    ErrorCode.INVALID_REQUEST, f"resource {name!r} appears more than once in the request"
                )
            )
            continue
        if kind == BROKER_RESOURCE and name:
            outcome.append(
                ApiError(
                    ErrorCode.INVALID_REQUEST,
                    (
                        f"per-broker configs are not supported (broker {name!r}); alter the cluster-wide "
                        "default: the broker resource with an empty name"
                    ),
                )
            )
            continue
        target = _config_resource(services, kind, name)
        if isinstance(target, str):
            outcome.append(ApiError(ErrorCode.INVALID_REQUEST, target))
            continue
        bad = [n for n, op, value in ops if value is None and op != cfg.AlterConfigOp.DELETE]
        if bad:
            outcome.append(ApiError(ErrorCode.INVALID_CONFIG, f"configs {bad} have a null value"))
            continue
        if any(op not in set(cfg.AlterConfigOp) for _, op, _ in ops):
            outcome.append(
                ApiError(
                    ErrorCode.INVALID_REQUEST, "config operations are 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT"
                )
            )
            continue
        resource = forwarded.resources.add(resource_type=target[0], resource_name=target[1])
        for n, op, value in ops:
            resource.configs.add(name=n, op=op, value=value or "")
        outcome.append(None)
    answers: list[ApiError] = []
    if forwarded.resources:
        try:
            answers = [
                api_error(r.error) for r in (await forward(services, "AlterConfigs", forwarded)).results
            ]
        except AdminProblem as exc:
            answers = [exc.error] * len(forwarded.resources)
    answered = iter(answers)
    return [o if o is not None else next(answered) for o in outcome]


# ---- DescribeCluster / ElectLeaders -------------------------------------------------------------------


def handle_describe_cluster(
    services: BrokerServices, context: RequestContext, request: m.DescribeClusterRequest
) -> m.DescribeClusterResponse:
    if request.endpoint_type != BROKERS_ENDPOINT_TYPE:
        return m.DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=UNSUPPORTED_ENDPOINT_TYPE,
            error_message="only broker endpoints (endpoint type 1) are served; controllers are reached "
            "through the brokers",
            endpoint_type=request.endpoint_type,
        )
    brokers = live_brokers(services.manager.image, context.listener)
    ids = [b[0] for b in brokers]
    return m.DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=BROKERS_ENDPOINT_TYPE,
        cluster_id=services.manager.image.cluster_id,
        controller_id=min(ids) if ids else services.node_id,
        brokers=[
            m.DescribeClusterResponseDescribeClusterBroker(broker_id=i, host=h, port=p, rack=r or None)
            for i, h, p, r in brokers
        ],
    )


async def handle_elect_leaders(
    services: BrokerServices, context: RequestContext, request: m.ElectLeadersRequest
) -> m.ElectLeadersResponse:
    forwarded = admin_pb2.ElectLeadersRequest(election_type=request.election_type)
    for t in request.topic_partitions or ():
        forwarded.topics.add(topic=t.topic, partitions=t.partitions)
    try:
        response = await forward(services, "ElectLeaders", forwarded)
    except AdminProblem as exc:  # v0 has no top-level error: every partition asked for carries it
        return m.ElectLeadersResponse(
            throttle_time_ms=0,
            error_code=exc.error.code,
            replica_election_results=[
                m.ElectLeadersResponseReplicaElectionResult(
                    topic=t.topic,
                    partition_result=[
                        m.ElectLeadersResponsePartitionResult(
                            partition_id=p, error_code=exc.error.code, error_message=exc.error.message
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topic_partitions or ()
            ],
        )
    by_topic: dict[str, list[m.ElectLeadersResponsePartitionResult]] = {}
    for r in response.results:
        by_topic.setdefault(r.topic, []).append(
            m.ElectLeadersResponsePartitionResult(
                partition_id=r.partition,
                error_code=r.error.code,
                error_message=r.error.message or None,
            )
        )
    return m.ElectLeadersResponse(
        throttle_time_ms=0,
        error_code=0,
        replica_election_results=[
            m.ElectLeadersResponseReplicaElectionResult(topic=topic, partition_result=parts)
            for topic, parts in by_topic.items()
        ],
    )


# ---- DeleteRecords / DescribeProducers (on the partition leaders) --------------------------------------


def handle_delete_records(
    services: BrokerServices, context: RequestContext, request: m.DeleteRecordsRequest
) -> m.DeleteRecordsResponse:
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            r = services.manager.delete_records(TopicPartition(t.name, p.partition_index), p.offset)
            partitions.append(
                m.DeleteRecordsResponseDeleteRecordsPartitionResult(
                    partition_index=p.partition_index,
                    error_code=r.error.code,
                    low_watermark=r.offset if r.error.ok else NO_OFFSET,
                )
            )
        topics.append(m.DeleteRecordsResponseDeleteRecordsTopicResult(name=t.name, partitions=partitions))
    return m.DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


def handle_describe_producers(
    services: BrokerServices, context: RequestContext, request: m.DescribeProducersRequest
) -> m.DescribeProducersResponse:
    topics = []
    for t in request.topics:
        partitions = []
        for index in t.partition_indexes:
            error, entries = services.manager.producer_entries(TopicPartition(t.name, index))
            partitions.append(
                m.DescribeProducersResponsePartitionResponse(
                    partition_index=index,
                    error_code=error.code if error is not None else 0,
                    error_message=error.message if error is not None else None,
                    active_producers=[
                        m.DescribeProducersResponseProducerState(
                            producer_id=e.producer_id,
                            producer_epoch=e.producer_epoch,
                            last_sequence=e.last_seq,
                            last_timestamp=e.last_update_ms,
                            coordinator_epoch=-1,
                            current_txn_start_offset=-1,
                        )
                        for e in entries
                    ],
                )
            )
        topics.append(m.DescribeProducersResponseTopicResponse(name=t.name, partitions=partitions))
    return m.DescribeProducersResponse(throttle_time_ms=0, topics=topics)


HANDLERS = {
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
    ApiKey.ELECT_LEADERS: handle_elect_leaders,
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers,
}
