"""The group handlers (broker.kafka.handlers.groups) over the real group coordinator and its driver, with a
replica manager stand-in that appends ``__consumer_offsets`` records at once. Every request goes
through the codec (encode, parse, handle, encode the answer, parse it) at the version under test.

Edge cases: KIP-394 (MEMBER_ID_REQUIRED from JoinGroup v4 only), LeaveGroup v0-2 vs batched v3+,
OffsetFetch's group error in each partition (v0-1) vs top-level (v2+) vs per group (v8),
FindCoordinator's batched keys (v4) and transaction keys, OffsetCommit of an unknown partition,
OffsetDelete of a subscribed topic, ListGroups' states filter, DeleteGroups of a non-empty group.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

import pytest

from broker.group.coordinator import GroupConfig
from broker.group.driver import GroupDriver
from broker.group.metadata import OFFSETS_TOPIC, partition_for
from broker.group.offsets_topic import OffsetsTopic
from broker.kafka.handlers import groups
from broker.kafka.handlers.context import BrokerServices, RequestContext
from broker.replica.replica_manager import ProduceResult
from metadata.image import MetadataImage
from metadata.records import (
    Endpoint,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from proto import admin_pb2, common_pb2
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import (
    ApiKey,
    RequestHeader,
    encode_request,
    encode_response,
    parse_request,
    parse_response,
)
from proto.kafka_types import NO_LEADER
from proto.runtime.logfmt import LogfmtFormatter
from tests.kafka_call import consumer_subscription

LISTENER = "PLAINTEXT"
OFFSETS_PARTITIONS = 2
GROUP = "g"  # led here: offsets partition partition_for("g") is led by broker 101
CONFIG = GroupConfig(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=0)


OFFSETS_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
LED = partition_for(GROUP, OFFSETS_PARTITIONS)


def offsets_partitions(leader_of: Callable[[int], int]) -> list[PartitionRecord]:
    return [
        PartitionRecord(OFFSETS_TOPIC_ID, p, (101,), (101,), leader_of(p)) for p in range(OFFSETS_PARTITIONS)
    ]


class Harness:
    def __init__(self, forward_admin: Callable[[str, object], Awaitable[object]] | None = None) -> None:
        """A cluster whose ``__consumer_offsets`` exists, or, given the controller's ``forward_admin``,
        a brand-new one without it."""
        image = MetadataImage()
        records: list[object] = [
            RegisterBrokerRecord(
                b, f"inc-{b}", (Endpoint("GRPC", "127.0.0.1", b), Endpoint(LISTENER, "kafka-host", 9000 + b)),
                fenced=False,
            )
            for b in (101, 102)
        ]  # fmt: skip
        if forward_admin is None:
            records += [
                TopicRecord(OFFSETS_TOPIC, OFFSETS_TOPIC_ID),
                *offsets_partitions(lambda p: 101 if p == LED else 102),
            ]
        records += [
            TopicRecord("t", "AAAAAAAAAAAAAAAAAAAAAg"),
            PartitionRecord("AAAAAAAAAAAAAAAAAAAAAg", 0, (101,), (101,), 101),
            PartitionRecord("AAAAAAAAAAAAAAAAAAAAAg", 1, (101,), (101,), 101),
        ]
        image.apply_batch(records, 1)
        self.appended = 0
        self.manager = SimpleNamespace(
            image=image, role_listeners=[], image_listeners=[], logs={}, produce=self._produce
        )
        self.now_ms = 1_000
        self.driver = GroupDriver(  # one virtual clock for the replica manager and the core
            self.manager,
            CONFIG,
            lambda: self.now_ms,
            5_000,
            now_ms=lambda: self.now_ms,  # type: ignore[arg-type]
        )
        self.driver.core.on_election(LED, OFFSETS_PARTITIONS)
        self.driver.core.complete_loading(LED, self.now_ms)
        self.unknown_group = next(  # a group that does not exist but would be coordinated here
            f"unknown-{i}" for i in range(100) if partition_for(f"unknown-{i}", OFFSETS_PARTITIONS) == LED
        )
        self.other_group = next(
            f"other-{i}" for i in range(100) if partition_for(f"other-{i}", OFFSETS_PARTITIONS) != LED
        )

        async def no_admin(method: str, request: object) -> object:
            raise AssertionError(f"no admin call expected, got {method}")

        self.offsets_topic = OffsetsTopic(self.driver, forward_admin or no_admin, OFFSETS_PARTITIONS, 1)
        self.services = BrokerServices(
            101, self.manager, lambda: self.now_ms, 5_000, groups=self.driver,  # type: ignore[arg-type]
            offsets_topic=self.offsets_topic,
        )  # fmt: skip
        self.correlation_id = 0

    def _produce(self, acks, timeout_ms, partitions, now_ms, done, **_options) -> None:
        self.appended += 1
        done({p.tp: ProduceResult(ErrorCode.NONE) for p in partitions})

    def call(self, api_key: int, version: int, request):
        return asyncio.run(self.acall(api_key, version, request))

    async def acall(self, api_key: int, version: int, request):
        """Encode, parse, handle, encode the answer, parse it: the codec at this version both ways."""
        self.correlation_id += 1
        sent = self.correlation_id  # calls may overlap (parked JoinGroups)
        header = RequestHeader(api_key, version, sent, "client-1")
        parsed_header, parsed = parse_request(encode_request(header, request))
        handler = groups.HANDLERS[ApiKey(api_key)]
        response = handler(self.services, RequestContext(parsed_header, "127.0.0.1:5555", LISTENER), parsed)
        if asyncio.iscoroutine(response):
            response = await response
        correlation_id, body = parse_response(api_key, version, encode_response(parsed_header, response))
        assert correlation_id == sent
        return body


@pytest.fixture
def h() -> Harness:
    return Harness()


def join(
    member_id: str = "", instance: str | None = None, topics: tuple[str, ...] = ("t",)
) -> m.JoinGroupRequest:
    return m.JoinGroupRequest(
        group_id=GROUP, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=member_id,
        group_instance_id=instance, protocol_type="consumer",
        protocols=[m.JoinGroupRequestProtocol(name="range", metadata=consumer_subscription(*topics))],
    )  # fmt: skip


def joined_member(h: Harness, version: int = 7) -> tuple[str, int]:
    """A one-member Stable group: (member id, generation)."""
    first = h.call(ApiKey.JOIN_GROUP, version, join())
    member_id = first.member_id
    if first.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        first = h.call(ApiKey.JOIN_GROUP, version, join(member_id))
    assert first.error_code == 0, first
    sync = m.SyncGroupRequest(
        group_id=GROUP, generation_id=first.generation_id, member_id=member_id,
        protocol_type="consumer", protocol_name="range",
        assignments=[m.SyncGroupRequestAssignment(member_id=member_id, assignment=b"a")],
    )  # fmt: skip
    assert h.call(ApiKey.SYNC_GROUP, 5, sync).error_code == 0
    return member_id, first.generation_id


@pytest.mark.parametrize("version", range(8))
def test_join_group_requires_a_member_id_from_v4_only(h: Harness, version: int) -> None:
    first = h.call(ApiKey.JOIN_GROUP, version, join())
    if version >= 4:
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id.startswith("client-1-")
        first = h.call(ApiKey.JOIN_GROUP, version, join(first.member_id))
    assert first.error_code == 0
    assert first.leader == first.member_id and first.generation_id == 1
    assert first.protocol_name == "range"
    assert [x.member_id for x in first.members] == [first.member_id]


def test_static_member_joins_in_one_round(h: Harness) -> None:
    r = h.call(ApiKey.JOIN_GROUP, 5, join(instance="instance-1"))
    assert r.error_code == 0 and r.members[0].group_instance_id == "instance-1"


def test_leader_sees_static_and_dynamic_members(h: Harness) -> None:
    """The leader's JoinGroup answer lists every member with its group.instance.id (null for a dynamic
    member); a new dynamic member first gets MEMBER_ID_REQUIRED with its id (KIP-394)."""

    async def scenario() -> tuple[m.JoinGroupResponse, m.JoinGroupResponse, str, str]:  # a hang fails at 10 s
        async with asyncio.timeout(10):
            return await steps()

    async def steps() -> tuple[m.JoinGroupResponse, m.JoinGroupResponse, str, str]:
        static = await h.acall(ApiKey.JOIN_GROUP, 5, join(instance="i-a"))
        assert static.error_code == 0 and static.generation_id == 1, static
        sync = m.SyncGroupRequest(group_id=GROUP, generation_id=1, member_id=static.member_id,
                                  group_instance_id="i-a", assignments=[])  # fmt: skip
        assert (await h.acall(ApiKey.SYNC_GROUP, 3, sync)).error_code == 0
        first = await h.acall(ApiKey.JOIN_GROUP, 5, join())
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id, first
        a, b = await asyncio.gather(
            h.acall(ApiKey.JOIN_GROUP, 5, join(static.member_id, instance="i-a")),
            h.acall(ApiKey.JOIN_GROUP, 5, join(first.member_id)),
        )
        return a, b, static.member_id, first.member_id

    a, b, static_id, dynamic_id = asyncio.run(scenario())
    assert a.error_code == b.error_code == 0 and a.generation_id == b.generation_id == 2
    leader, follower = (a, b) if a.leader == a.member_id else (b, a)
    listed = {(x.member_id, x.group_instance_id) for x in leader.members}
    assert listed == {(static_id, "i-a"), (dynamic_id, None)}
    assert follower.members == []


@pytest.mark.parametrize(
    ("peer", "host"),
    [("127.0.0.1:5555", "/127.0.0.1"), ("[::1]:5555", "/::1"), ("localhost", "/localhost")],
    ids=["ipv4", "ipv6", "no-port"],
)
def test_member_host_as_kafka_shows_it(peer: str, host: str) -> None:
    assert groups.member_host(peer) == host


@pytest.mark.parametrize("version", range(6))
def test_leave_group_single_member_then_batched(h: Harness, version: int) -> None:
    member_id, _ = joined_member(h)
    if version < 3:
        assert h.call(ApiKey.LEAVE_GROUP, version, m.LeaveGroupRequest(group_id=GROUP, member_id="nobody")
                      ).error_code == ErrorCode.UNKNOWN_MEMBER_ID  # fmt: skip
        r = h.call(ApiKey.LEAVE_GROUP, version, m.LeaveGroupRequest(group_id=GROUP, member_id=member_id))
        assert r.error_code == 0
    else:
        members = [m.LeaveGroupRequestMemberIdentity(member_id=member_id),
                   m.LeaveGroupRequestMemberIdentity(member_id="nobody")]  # fmt: skip
        r = h.call(ApiKey.LEAVE_GROUP, version, m.LeaveGroupRequest(group_id=GROUP, members=members))
        assert r.error_code == 0
        assert [(x.member_id, x.error_code) for x in r.members] == [
            (member_id, 0),
            ("nobody", ErrorCode.UNKNOWN_MEMBER_ID),
        ]
    described = h.call(ApiKey.DESCRIBE_GROUPS, 5, m.DescribeGroupsRequest(groups=[GROUP]))
    assert described.groups[0].group_state == "Empty"


def test_heartbeat_fences_stale_generations(h: Harness) -> None:
    member_id, generation = joined_member(h)
    ok = m.HeartbeatRequest(group_id=GROUP, generation_id=generation, member_id=member_id)
    assert h.call(ApiKey.HEARTBEAT, 4, ok).error_code == 0
    stale = m.HeartbeatRequest(group_id=GROUP, generation_id=generation - 1, member_id=member_id)
    assert h.call(ApiKey.HEARTBEAT, 0, stale).error_code == ErrorCode.ILLEGAL_GENERATION


def commit(member_id: str, generation: int, offsets: dict[tuple[str, int], int]) -> m.OffsetCommitRequest:
    topics: dict[str, list] = {}
    for (topic, p), offset in offsets.items():
        topics.setdefault(topic, []).append(
            m.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=offset, committed_metadata="md"
            )
        )
    return m.OffsetCommitRequest(
        group_id=GROUP, generation_id=generation, member_id=member_id,
        topics=[m.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )  # fmt: skip


@pytest.mark.parametrize("version", range(9))
def test_offset_commit_and_fetch_every_version(h: Harness, version: int) -> None:
    # v0 has no generation: a commit outside the group protocol (a group with no members)
    member_id, generation = joined_member(h) if version > 0 else ("", -1)
    r = h.call(ApiKey.OFFSET_COMMIT, version, commit(member_id, generation, {("t", 0): 5, ("t", 9): 1}))
    codes = {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}
    assert codes == {("t", 0): 0, ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    wanted = [m.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]
    if version >= 8:
        request = m.OffsetFetchRequest(groups=[m.OffsetFetchRequestGroup(group_id=GROUP, topics=[
            m.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 1])])])  # fmt: skip
        fetched = h.call(ApiKey.OFFSET_FETCH, version, request).groups[0].topics
    else:
        fetched = h.call(
            ApiKey.OFFSET_FETCH, version, m.OffsetFetchRequest(group_id=GROUP, topics=wanted)
        ).topics
    offsets = {
        (t.name, p.partition_index): (p.committed_offset, p.error_code) for t in fetched for p in t.partitions
    }
    assert offsets == {("t", 0): (5, 0), ("t", 1): (-1, 0)}


@pytest.mark.parametrize("version", [1, 2, 8])
def test_offset_fetch_group_error_where_each_version_carries_it(h: Harness, version: int) -> None:
    group = h.other_group  # its offsets partition is led by broker 102
    topics = [m.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]
    if version == 8:
        request = m.OffsetFetchRequest(groups=[m.OffsetFetchRequestGroup(group_id=group, topics=None)])
        (answer,) = h.call(ApiKey.OFFSET_FETCH, version, request).groups
        assert answer.error_code == ErrorCode.NOT_COORDINATOR and answer.topics == []
    elif version == 2:
        answer = h.call(ApiKey.OFFSET_FETCH, version, m.OffsetFetchRequest(group_id=group, topics=topics))
        assert answer.error_code == ErrorCode.NOT_COORDINATOR
    else:
        answer = h.call(ApiKey.OFFSET_FETCH, version, m.OffsetFetchRequest(group_id=group, topics=topics))
        assert [p.error_code for p in answer.topics[0].partitions] == [ErrorCode.NOT_COORDINATOR]


def test_find_coordinator_batched_keys_and_transactions(h: Harness) -> None:
    one = h.call(ApiKey.FIND_COORDINATOR, 1, m.FindCoordinatorRequest(key=GROUP))
    assert (one.error_code, one.node_id, one.host, one.port) == (0, 101, "kafka-host", 9101)
    many = h.call(
        ApiKey.FIND_COORDINATOR, 4, m.FindCoordinatorRequest(coordinator_keys=[GROUP, h.other_group, ""])
    )
    assert [(c.key, c.node_id, c.error_code) for c in many.coordinators] == [
        (GROUP, 101, 0),
        (h.other_group, 102, 0),
        ("", -1, ErrorCode.INVALID_GROUP_ID),
    ]
    txn = h.call(ApiKey.FIND_COORDINATOR, 3, m.FindCoordinatorRequest(key="tx-1", key_type=1))
    assert (
        txn.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        and "not supported" in txn.error_message
    )


class Controller:
    """The controllers' side of the offsets topic's CreateTopics: each call is recorded and waits for
    the test to answer it (``answer.set_result`` / ``set_exception``)."""

    def __init__(self) -> None:
        self.requests: list[admin_pb2.CreateTopicsRequest] = []
        self.answer: asyncio.Future[admin_pb2.CreateTopicsResponse] | None = None

    async def forward_admin(self, method: str, request: object) -> object:
        assert method == "CreateTopics", method
        assert isinstance(request, admin_pb2.CreateTopicsRequest)
        self.requests.append(request)
        self.answer = asyncio.get_running_loop().create_future()
        return await self.answer


def created(code: ErrorCode = ErrorCode.NONE, message: str = "") -> admin_pb2.CreateTopicsResponse:
    return admin_pb2.CreateTopicsResponse(error=common_pb2.Error(code=code, message=message))


async def until(condition: Callable[[], bool], what: str) -> None:
    """Only this event loop's tasks must run for ``condition`` (a few iterations); 10 s is a bound for
    a loaded machine, never a wait."""
    deadline = asyncio.get_running_loop().time() + 10.0
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"waited 10 s for {what}"
        await asyncio.sleep(0.001)


async def lookup(h: Harness, version: int, keys: list[str]) -> list[tuple]:
    """FindCoordinator at ``version`` (one key before v4, a batch from v4): (key, error, message, node,
    host, port) per key."""
    if version >= groups.BATCHED_COORDINATOR_VERSION:
        r = await h.acall(ApiKey.FIND_COORDINATOR, version, m.FindCoordinatorRequest(coordinator_keys=keys))
        return [(c.key, c.error_code, c.error_message, c.node_id, c.host, c.port) for c in r.coordinators]
    (key,) = keys
    r = await h.acall(ApiKey.FIND_COORDINATOR, version, m.FindCoordinatorRequest(key=key))
    return [(key, r.error_code, r.error_message, r.node_id, r.host, r.port)]


def not_available(answers: list[tuple], version: int, says: str) -> bool:
    """Every key answered COORDINATOR_NOT_AVAILABLE with no node, and (v1+, which carry a message) a
    message that says ``says``."""
    return all(
        code == ErrorCode.COORDINATOR_NOT_AVAILABLE and (node, host, port) == (-1, "", -1)
        and (version == 0 or says in message)
        for _, code, message, node, host, port in answers
    )  # fmt: skip


@pytest.mark.parametrize("version", range(5), ids=lambda v: f"v{v}")
def test_find_coordinator_on_a_new_cluster_answers_at_once_while_the_offsets_topic_is_created(
    version: int,
) -> None:
    """Kafka's KafkaApis.getCoordinator: with no __consumer_offsets yet, the lookup starts its creation
    and answers COORDINATOR_NOT_AVAILABLE (retriable) at once, for each key of a v4 batch; lookups
    meanwhile start no second creation; a partition without a leader is COORDINATOR_NOT_AVAILABLE too;
    then the leader is the coordinator."""
    controller = Controller()
    h = Harness(controller.forward_admin)
    keys = [GROUP, h.other_group] if version >= groups.BATCHED_COORDINATOR_VERSION else [GROUP]

    async def scenario() -> None:
        # The controller has not answered (and never will, below): the lookup does not wait for it.
        assert not_available(await lookup(h, version, keys), version, "is being created on first use")
        await until(lambda: len(controller.requests) == 1, "the CreateTopics")
        (topic,) = controller.requests[0].topics
        assert (topic.name, topic.num_partitions, topic.replication_factor) == (OFFSETS_TOPIC, 2, 1)
        assert not_available(await lookup(h, version, keys), version, "is being created on first use")
        assert controller.answer is not None
        controller.answer.set_result(created())
        h.manager.image.apply_batch(
            [TopicRecord(OFFSETS_TOPIC, OFFSETS_TOPIC_ID), *offsets_partitions(lambda p: NO_LEADER)], 2
        )
        await until(lambda: h.offsets_topic.creation is None, "the creation to end")
        assert not_available(await lookup(h, version, keys), version, "has no leader yet")
        h.manager.image.apply_batch(
            [PartitionChangeRecord(OFFSETS_TOPIC_ID, p, leader=101 if p == LED else 102)
             for p in range(OFFSETS_PARTITIONS)], 3,
        )  # fmt: skip
        found = await lookup(h, version, keys)
        assert [(key, code, node, host, port) for key, code, _, node, host, port in found] == [
            (GROUP, 0, 101, "kafka-host", 9101), (h.other_group, 0, 102, "kafka-host", 9102),
        ][: len(keys)]  # fmt: skip
        assert (len(controller.requests), h.offsets_topic.creations_started) == (1, 1)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        pytest.param(created(ErrorCode.NOT_CONTROLLER, "CreateTopics: no controller answered"),
                     "NOT_CONTROLLER: CreateTopics: no controller answered", id="refused"),
        pytest.param(ConnectionResetError("controller connection reset"),
                     "ConnectionResetError: controller connection reset", id="raised"),
    ],
)  # fmt: skip
def test_a_failed_offsets_topic_creation_is_said_and_retried_by_the_next_lookup(
    failure: object, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    controller = Controller()
    h = Harness(controller.forward_admin)

    async def scenario() -> None:
        assert not_available(await lookup(h, 3, [GROUP]), 3, "is being created on first use")
        await until(lambda: controller.answer is not None, "the CreateTopics")
        assert controller.answer is not None
        if isinstance(failure, BaseException):
            controller.answer.set_exception(failure)
        else:
            controller.answer.set_result(failure)  # type: ignore[arg-type]
        await until(lambda: h.offsets_topic.creation is None, "the creation to end")
        formatter = LogfmtFormatter(101, "broker")
        logged = [formatter.format(r) for r in caplog.records
                  if r.name == "broker.group.offsets_topic" and r.levelno >= logging.WARNING]  # fmt: skip
        assert len(logged) == 1 and "offsets_topic_creation_failed" in logged[0] and said in logged[0]
        assert not_available(await lookup(h, 3, [GROUP]), 3, f"failed last time ({said}); trying again")
        assert h.offsets_topic.creations_started == 2
        await until(lambda: len(controller.requests) == 2, "the second CreateTopics")
        controller.answer.set_result(created(ErrorCode.TOPIC_ALREADY_EXISTS))  # another broker's did it
        h.manager.image.apply_batch(
            [TopicRecord(OFFSETS_TOPIC, OFFSETS_TOPIC_ID), *offsets_partitions(lambda p: 101)], 2
        )
        ((_, code, _, node, _, _),) = await lookup(h, 3, [GROUP])
        assert (code, node) == (0, 101)

    asyncio.run(scenario())


def test_a_transactional_lookup_creates_nothing_and_stop_cancels_a_creation() -> None:
    """Key type 1 answers as on a cluster with the offsets topic (transactions are not served), and
    starts no creation; a stopping broker cancels the creation in flight."""
    controller = Controller()
    h = Harness(controller.forward_admin)

    async def scenario() -> None:
        txn = await h.acall(ApiKey.FIND_COORDINATOR, 3, m.FindCoordinatorRequest(key="tx-1", key_type=1))
        assert txn.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert h.offsets_topic.creation is None and not controller.requests
        await lookup(h, 3, [GROUP])
        await until(lambda: len(controller.requests) == 1, "the CreateTopics")
        creation = h.offsets_topic.creation
        assert creation is not None
        await h.offsets_topic.stop()
        assert creation.cancelled() and h.offsets_topic.creation is None

    asyncio.run(scenario())


def test_offset_delete_refuses_subscribed_topics(h: Harness) -> None:
    member_id, generation = joined_member(h)
    h.call(ApiKey.OFFSET_COMMIT, 8, commit(member_id, generation, {("t", 0): 5}))
    h.call(ApiKey.OFFSET_COMMIT, 8, commit(member_id, generation, {("t", 1): 6}))
    first = m.OffsetDeleteRequestPartition(partition_index=0)
    request = m.OffsetDeleteRequest(
        group_id=GROUP, topics=[m.OffsetDeleteRequestTopic(name="t", partitions=[first])]
    )
    r = h.call(ApiKey.OFFSET_DELETE, 0, request)
    assert r.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    h.call(ApiKey.LEAVE_GROUP, 4, m.LeaveGroupRequest(group_id=GROUP, members=[
        m.LeaveGroupRequestMemberIdentity(member_id=member_id)]))  # fmt: skip
    appended = h.appended
    assert h.call(ApiKey.OFFSET_DELETE, 0, request).topics[0].partitions[0].error_code == 0
    assert h.appended == appended + 1  # a tombstone
    fetched = h.call(ApiKey.OFFSET_FETCH, 7, m.OffsetFetchRequest(group_id=GROUP, topics=None)).topics
    assert {(t.name, p.partition_index): p.committed_offset for t in fetched for p in t.partitions} == {
        ("t", 1): 6
    }
    missing = m.OffsetDeleteRequest(group_id=h.unknown_group, topics=[])
    assert h.call(ApiKey.OFFSET_DELETE, 0, missing).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_list_describe_and_delete_groups(h: Harness) -> None:
    joined_member(h)
    listed = h.call(ApiKey.LIST_GROUPS, 4, m.ListGroupsRequest(states_filter=["Stable"]))
    assert [(g.group_id, g.protocol_type, g.group_state) for g in listed.groups] == [
        (GROUP, "consumer", "Stable")
    ]
    assert h.call(ApiKey.LIST_GROUPS, 4, m.ListGroupsRequest(states_filter=["Empty"])).groups == []
    assert [g.group_id for g in h.call(ApiKey.LIST_GROUPS, 0, m.ListGroupsRequest()).groups] == [GROUP]
    (described,) = h.call(ApiKey.DESCRIBE_GROUPS, 5, m.DescribeGroupsRequest(groups=[GROUP])).groups
    assert (described.group_state, described.protocol_data) == ("Stable", "range")
    (member,) = described.members
    assert (member.client_id, member.client_host, member.member_assignment) == (
        "client-1",
        "/127.0.0.1",
        b"a",
    )
    r = h.call(ApiKey.DELETE_GROUPS, 2, m.DeleteGroupsRequest(groups_names=[GROUP, h.unknown_group]))
    assert [(x.group_id, x.error_code) for x in r.results] == [
        (GROUP, ErrorCode.NON_EMPTY_GROUP),
        (h.unknown_group, ErrorCode.GROUP_ID_NOT_FOUND),
    ]


def test_a_loading_offsets_partition_answers_coordinator_load_in_progress(h: Harness) -> None:
    """Right after this broker became leader of the group's offsets partition, until its log is
    replayed: clients retry (Kafka's COORDINATOR_LOAD_IN_PROGRESS), and ListGroups says so too."""
    led = partition_for(GROUP, OFFSETS_PARTITIONS)
    h.driver.core.on_election(led, OFFSETS_PARTITIONS)
    assert h.call(ApiKey.JOIN_GROUP, 7, join()).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    fetched = h.call(ApiKey.OFFSET_FETCH, 7, m.OffsetFetchRequest(group_id=GROUP, topics=None))
    assert fetched.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert (
        h.call(ApiKey.LIST_GROUPS, 3, m.ListGroupsRequest()).error_code
        == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    )
    h.driver.core.complete_loading(led, h.now_ms)
    assert h.call(ApiKey.JOIN_GROUP, 7, join()).error_code == ErrorCode.MEMBER_ID_REQUIRED


def test_join_group_v0_uses_the_session_timeout_as_rebalance_timeout(h: Harness) -> None:
    request = join()
    request.rebalance_timeout_ms = 99_999  # not on the wire in v0
    r = h.call(ApiKey.JOIN_GROUP, 0, request)
    assert r.error_code == 0
    member = h.driver.core.group_manager.groups[GROUP].members[r.member_id]
    assert member.rebalance_timeout_ms == member.session_timeout_ms == 10_000
