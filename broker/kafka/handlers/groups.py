"""The consumer-group APIs on the Kafka listener, over the broker's group coordinator.

FindCoordinator (10) v0-4, JoinGroup (11) v0-7, SyncGroup (14) v0-5, Heartbeat (12) v0-4,
LeaveGroup (13) v0-5, OffsetCommit (8) v0-8, OffsetFetch (9) v0-8, ListGroups (16) v0-4,
DescribeGroups (15) v0-5, DeleteGroups (42) v0-2, OffsetDelete (47) v0.

Every rule lives in the sans-I/O core (``broker.group.coordinator``), run by its driver
(``broker.group.driver.GroupDriver``); a handler converts the wire struct into the core's request,
calls the driver and builds the response of the request's version:

- FindCoordinator answers the leader of the group's offsets partition at its endpoint on the listener
  the request came through, at once: while ``__consumer_offsets`` is being created on first use
  (``OffsetsTopic`` starts that) or the partition has no live leader, COORDINATOR_NOT_AVAILABLE
  (retriable; clients look again after their backoff), as Kafka answers. v4 batches keys, each with
  its own answer. Only key type 0 (group) is served: transactions do not exist yet, so key type 1 gets
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED (fatal in Kafka's clients, where a retriable code would loop).
- JoinGroup v4+ follows KIP-394 (MEMBER_ID_REQUIRED with the new id, then a rejoin with it); v0-3
  clients do not know that error and join in one round. v0 has no rebalance timeout: the session
  timeout serves as both (Kafka's rule).
- LeaveGroup v0-2 names one member and answers its error at the top level; v3+ batches members
  (KIP-345) with an error each.
- OffsetFetch v0-1 carry a group-level error in every partition (they have no top-level error);
  v8 batches groups. ``require_stable`` (KIP-447) waits for pending transactional commits, and there
  are none until transactions exist, so every committed offset is stable.
- OffsetCommit of an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION for that partition.
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS come from the core (the offsets partition is led
  elsewhere, or is still being loaded); clients find the coordinator again or retry.
"""

from __future__ import annotations

from typing import Any

from broker.group.requests import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from broker.kafka.handlers.context import BrokerServices, RequestContext
from proto.errors import OK, ApiError, ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from proto.kafka_types import NO_OFFSET

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
BATCHED_COORDINATOR_VERSION = 4
KNOWN_MEMBER_ID_VERSION = 4  # KIP-394
BATCHED_LEAVE_VERSION = 3
BATCHED_OFFSET_FETCH_VERSION = 8
TOP_LEVEL_OFFSET_FETCH_ERROR_VERSION = 2
NULLABLE_PROTOCOL_NAME_VERSION = 7


def member_host(client: str) -> str:
    """The listener's peer ``host:port`` (``[::1]:port`` for IPv6) as Kafka shows a member's host."""
    host = client.rsplit(":", 1)[0] if ":" in client else client
    return "/" + host.strip("[]")


# ---- FindCoordinator ---------------------------------------------------------------------------------


async def handle_find_coordinator(
    services: BrokerServices, context: RequestContext, request: m.FindCoordinatorRequest
) -> m.FindCoordinatorResponse:
    batched = context.version >= BATCHED_COORDINATOR_VERSION
    keys = list(request.coordinator_keys) if batched else [request.key]
    found = [await _coordinator(services, context, request.key_type, key) for key in keys]
    if batched:
        return m.FindCoordinatorResponse(throttle_time_ms=0, coordinators=found)
    one = found[0]
    return m.FindCoordinatorResponse(
        throttle_time_ms=0, error_code=one.error_code, error_message=one.error_message,
        node_id=one.node_id, host=one.host, port=one.port,
    )  # fmt: skip


async def _coordinator(
    services: BrokerServices, context: RequestContext, key_type: int, key: str
) -> m.FindCoordinatorResponseCoordinator:
    problem: ApiError | None
    if key_type == TRANSACTION_KEY_TYPE:
        problem = ApiError(
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            f"transactional id {key!r}: transactions are not supported by this cluster yet",
        )
    elif key_type != GROUP_KEY_TYPE:
        problem = ApiError(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type} (0 = group)")
    elif services.offsets_topic is None:
        problem = ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "this broker has no group coordinator")
    else:
        found = services.offsets_topic.find_coordinator(key)
        problem = found.error if found.error.code else None
        if problem is None:
            broker = services.manager.image.brokers.get(found.node_id)
            endpoint = None
            if broker is not None and not broker.fenced:
                endpoint = next((e for e in broker.endpoints if e.name == context.listener), None)
            if endpoint is None:
                problem = ApiError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"coordinator broker {found.node_id} has no live {context.listener} listener; retry",
                )
            else:
                return m.FindCoordinatorResponseCoordinator(
                    key=key, node_id=found.node_id, host=endpoint.host, port=endpoint.port,
                    error_code=0, error_message=None,
                )  # fmt: skip
    return m.FindCoordinatorResponseCoordinator(
        key=key, node_id=-1, host="", port=-1, error_code=problem.code, error_message=problem.message
    )


# ---- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ----------------------------------------------------


async def handle_join_group(
    services: BrokerServices, context: RequestContext, request: m.JoinGroupRequest
) -> m.JoinGroupResponse:
    driver = services.groups
    rebalance_timeout_ms = (
        request.session_timeout_ms if context.version == 0 else request.rebalance_timeout_ms
    )
    req = JoinGroupRequest(
        request.group_id, request.session_timeout_ms, rebalance_timeout_ms, request.member_id,
        request.group_instance_id, request.protocol_type,
        tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        context.header.client_id or "", member_host(context.client),
        require_known_member_id=context.version >= KNOWN_MEMBER_ID_VERSION,
    )  # fmt: skip
    r = await driver.call(lambda rid: driver.core.handle_join_group(rid, req, driver.now_ms()))
    return m.JoinGroupResponse(
        throttle_time_ms=0, error_code=r.error.code, generation_id=r.generation_id,
        protocol_type=r.protocol_type or None,
        protocol_name=r.protocol_name or (None if context.version >= NULLABLE_PROTOCOL_NAME_VERSION else ""),
        leader=r.leader, member_id=r.member_id,
        members=[
            m.JoinGroupResponseMember(member_id=x.member_id, group_instance_id=x.group_instance_id,
                                      metadata=x.metadata)
            for x in r.members
        ],
    )  # fmt: skip


async def handle_sync_group(
    services: BrokerServices, context: RequestContext, request: m.SyncGroupRequest
) -> m.SyncGroupResponse:
    driver = services.groups
    req = SyncGroupRequest(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id,
        request.protocol_type or "", request.protocol_name or "",
        tuple((a.member_id, bytes(a.assignment)) for a in request.assignments),
    )  # fmt: skip
    r = await driver.call(lambda rid: driver.core.handle_sync_group(rid, req, driver.now_ms()))
    return m.SyncGroupResponse(
        throttle_time_ms=0, error_code=r.error.code, protocol_type=r.protocol_type or None,
        protocol_name=r.protocol_name or None, assignment=r.assignment,
    )  # fmt: skip


def handle_heartbeat(
    services: BrokerServices, context: RequestContext, request: m.HeartbeatRequest
) -> m.HeartbeatResponse:
    driver = services.groups
    req = HeartbeatRequest(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id
    )
    response, fx = driver.core.handle_heartbeat(req, driver.now_ms())
    driver.dispatch(fx)
    return m.HeartbeatResponse(throttle_time_ms=0, error_code=response.error.code)


def handle_leave_group(
    services: BrokerServices, context: RequestContext, request: m.LeaveGroupRequest
) -> m.LeaveGroupResponse:
    driver = services.groups
    batched = context.version >= BATCHED_LEAVE_VERSION
    if batched:
        members = tuple(
            MemberIdentity(x.member_id, x.group_instance_id, x.reason or "") for x in request.members
        )
    else:
        members = (MemberIdentity(request.member_id),)
    response, fx = driver.core.handle_leave_group(
        LeaveGroupRequest(request.group_id, members), driver.now_ms()
    )
    driver.dispatch(fx)
    if not batched:
        code = response.error.code or (response.members[0].error.code if response.members else 0)
        return m.LeaveGroupResponse(throttle_time_ms=0, error_code=code)
    return m.LeaveGroupResponse(
        throttle_time_ms=0, error_code=response.error.code,
        members=[
            m.LeaveGroupResponseMemberResponse(member_id=x.member_id, group_instance_id=x.group_instance_id,
                                               error_code=x.error.code)
            for x in response.members
        ],
    )  # fmt: skip


# ---- OffsetCommit / OffsetFetch / OffsetDelete ---------------------------------------------------------


async def handle_offset_commit(
    services: BrokerServices, context: RequestContext, request: m.OffsetCommitRequest
) -> m.OffsetCommitResponse:
    driver = services.groups
    image = services.manager.image
    results: dict[tuple[str, int], ApiError] = {}
    known: list[OffsetCommitPartition] = []
    for t in request.topics:
        topic = image.topic_by_name(t.name)
        for p in t.partitions:
            if topic is None or p.partition_index not in topic.partitions:
                results[(t.name, p.partition_index)] = ApiError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{t.name}-{p.partition_index} does not exist"
                )
            else:
                known.append(
                    OffsetCommitPartition(t.name, p.partition_index, p.committed_offset,
                                          p.committed_leader_epoch, p.committed_metadata or "")
                )  # fmt: skip
    req = OffsetCommitRequest(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id, tuple(known)
    )
    if known or not results:
        response: OffsetCommitResponse = await driver.call(
            lambda rid: driver.core.handle_offset_commit(rid, req, driver.now_ms(), driver.now_ms())
        )
    else:
        response = OffsetCommitResponse(OK, {})
    results = {**results, **response.partitions}
    return m.OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            m.OffsetCommitResponseTopic(name=t.name, partitions=[
                m.OffsetCommitResponsePartition(
                    partition_index=p.partition_index,
                    error_code=results.get((t.name, p.partition_index), response.error).code,
                )
                for p in t.partitions
            ])
            for t in request.topics
        ],
    )  # fmt: skip


def handle_offset_fetch(
    services: BrokerServices, context: RequestContext, request: m.OffsetFetchRequest
) -> m.OffsetFetchResponse:
    if context.version >= BATCHED_OFFSET_FETCH_VERSION:
        groups = []
        for g in request.groups:
            wanted = None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
            code, topics = _fetch_offsets(services, context.version, g.group_id, wanted)
            groups.append(m.OffsetFetchResponseGroup(
                group_id=g.group_id, error_code=code,
                topics=[m.OffsetFetchResponseTopics(name=name, partitions=[
                    m.OffsetFetchResponsePartitions(**vars_of(p)) for p in parts
                ]) for name, parts in topics],
            ))  # fmt: skip
        return m.OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    wanted = None if request.topics is None else [(t.name, t.partition_indexes) for t in request.topics]
    code, topics = _fetch_offsets(services, context.version, request.group_id, wanted)
    return m.OffsetFetchResponse(
        throttle_time_ms=0, error_code=code,
        topics=[m.OffsetFetchResponseTopic(name=name, partitions=parts) for name, parts in topics],
    )  # fmt: skip


def vars_of(p: m.OffsetFetchResponsePartition) -> dict[str, Any]:
    return {name: getattr(p, name) for name in p.__slots__}


def _fetch_offsets(
    services: BrokerServices, version: int, group_id: str, wanted: list[tuple[str, list[int]]] | None
) -> tuple[int, list[tuple[str, list[m.OffsetFetchResponsePartition]]]]:
    """(group error, [(topic, partitions)]) for one group; ``wanted`` None = every committed offset."""
    partitions = None if wanted is None else tuple((t, p) for t, ps in wanted for p in ps)
    response = services.groups.core.handle_offset_fetch(OffsetFetchRequest(group_id, partitions))
    code = response.error.code
    by_topic: dict[str, list[m.OffsetFetchResponsePartition]] = {}
    if code and version < TOP_LEVEL_OFFSET_FETCH_ERROR_VERSION:
        # v0-1 have no group-level error: every partition asked for carries it.
        for topic, partition in partitions or ():
            by_topic.setdefault(topic, []).append(
                m.OffsetFetchResponsePartition(partition_index=partition, committed_offset=NO_OFFSET,
                                               metadata="", error_code=code)
            )  # fmt: skip
        return 0, list(by_topic.items())
    for (topic, partition), fetched in response.partitions.items():
        by_topic.setdefault(topic, []).append(
            m.OffsetFetchResponsePartition(
                partition_index=partition, committed_offset=fetched.committed_offset,
                committed_leader_epoch=fetched.committed_leader_epoch, metadata=fetched.metadata,
                error_code=fetched.error.code,
            )
        )  # fmt: skip
    return code, list(by_topic.items())


async def handle_offset_delete(
    services: BrokerServices, context: RequestContext, request: m.OffsetDeleteRequest
) -> m.OffsetDeleteResponse:
    driver = services.groups
    partitions = tuple((t.name, p.partition_index) for t in request.topics for p in t.partitions)
    response = await driver.call(
        lambda rid: driver.core.handle_offset_delete(rid, request.group_id, partitions, driver.now_ms())
    )
    if response.error.code:
        return m.OffsetDeleteResponse(error_code=response.error.code, throttle_time_ms=0)
    return m.OffsetDeleteResponse(
        error_code=0, throttle_time_ms=0,
        topics=[
            m.OffsetDeleteResponseTopic(name=t.name, partitions=[
                m.OffsetDeleteResponsePartition(
                    partition_index=p.partition_index,
                    error_code=response.partitions[(t.name, p.partition_index)].code,
                )
                for p in t.partitions
            ])
            for t in request.topics
        ],
    )  # fmt: skip


# ---- ListGroups / DescribeGroups / DeleteGroups ---------------------------------------------------------


def handle_list_groups(
    services: BrokerServices, context: RequestContext, request: m.ListGroupsRequest
) -> m.ListGroupsResponse:
    core = services.groups.core
    listed = core.handle_list_groups(tuple(request.states_filter))
    return m.ListGroupsResponse(
        throttle_time_ms=0,
        # Kafka answers the groups it has with COORDINATOR_LOAD_IN_PROGRESS while a partition loads.
        error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if core.is_loading() else 0,
        groups=[
            m.ListGroupsResponseListedGroup(group_id=g.group_id, protocol_type=g.protocol_type,
                                            group_state=g.group_state)
            for g in listed
        ],
    )  # fmt: skip


def handle_describe_groups(
    services: BrokerServices, context: RequestContext, request: m.DescribeGroupsRequest
) -> m.DescribeGroupsResponse:
    core = services.groups.core
    groups = []
    for group_id in request.groups:
        d = core.handle_describe_group(group_id)
        groups.append(m.DescribeGroupsResponseDescribedGroup(
            error_code=d.error.code, group_id=d.group_id, group_state=d.group_state,
            protocol_type=d.protocol_type, protocol_data=d.protocol_data,
            members=[
                m.DescribeGroupsResponseDescribedGroupMember(
                    member_id=x.member_id, group_instance_id=x.group_instance_id, client_id=x.client_id,
                    client_host=x.client_host, member_metadata=x.member_metadata,
                    member_assignment=x.member_assignment,
                )
                for x in d.members
            ],
        ))  # fmt: skip
    return m.DescribeGroupsResponse(throttle_time_ms=0, groups=groups)


async def handle_delete_groups(
    services: BrokerServices, context: RequestContext, request: m.DeleteGroupsRequest
) -> m.DeleteGroupsResponse:
    driver = services.groups
    names = tuple(request.groups_names)
    results = []
    if names:
        response = await driver.call(
            lambda rid: driver.core.handle_delete_groups(rid, names, driver.now_ms())
        )
        results = [
            m.DeleteGroupsResponseDeletableGroupResult(group_id=r.group_id, error_code=r.error.code)
            for r in response.results
        ]
    return m.DeleteGroupsResponse(throttle_time_ms=0, results=results)


HANDLERS = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
}
