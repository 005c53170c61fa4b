"""The admin handlers (broker.kafka.handlers.admin): what they forward to the controller and how they turn its
answer (or its absence) into Kafka's response, through the codec at the version under test.

The controller is a stand-in that records the gRPC requests and answers from a script; DeleteRecords
runs on a real ReplicaManager leading ``t-0``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.kafka.handlers import admin
from broker.kafka.handlers.context import BrokerServices, RequestContext
from broker.replica.replica_manager import ProduceRequestPartition, ReplicaManager
from metadata.image import MetadataImage
from metadata.records import ClusterIdRecord, Endpoint, PartitionRecord, RegisterBrokerRecord, TopicRecord
from proto import admin_pb2, common_pb2
from proto.clock import wall_clock_ms
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
from proto.kafka.topic_ids import uuid_of
from storage.record_batch import build_batch

LISTENER = "PLAINTEXT"
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


class Controller:
    """Records forwarded calls; answers with ``answers[method](request)`` or a whole-request error."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.answers: dict[str, object] = {}
        self.down = False

    async def __call__(self, method: str, request):
        self.calls.append((method, request))
        response_class = getattr(admin_pb2, method + "Response")
        if self.down:
            return response_class(error=common_pb2.Error(code=ErrorCode.NOT_CONTROLLER, message="no quorum"))
        return self.answers[method](request)


class Harness:
    def __init__(self, tmp_path: Path) -> None:
        image = MetadataImage()
        image.apply_batch(
            [
                ClusterIdRecord(CLUSTER_ID),
                *(
                    RegisterBrokerRecord(
                        b, f"inc-{b}", (Endpoint(LISTENER, "kafka-host", 9000 + b),), fenced=False
                    )
                    for b in (101, 102)
                ),
                TopicRecord("t", TOPIC_ID),
                PartitionRecord(TOPIC_ID, 0, (101,), (101,), 101),
            ],
            1,
        )
        self.manager = ReplicaManager(
            101,
            tmp_path,
            replica_lag_time_max_ms=1000,
            topic_defaults={},
            fetchers=SimpleNamespace(add_partition=lambda *a: None, remove_partition=lambda *a: None),
            send_alter_partition=lambda *_: None,
            on_deadline=lambda _ms: None,
            clock_ms=wall_clock_ms,
        )
        self.manager.apply_image(image, 0)
        self.controller = Controller()
        self.services = BrokerServices(101, self.manager, lambda: 0, 5000, forward_admin=self.controller)

    def call(self, api_key: int, version: int, request):
        return asyncio.run(self._call(api_key, version, request))

    async def _call(self, api_key: int, version: int, request):
        header, parsed = parse_request(encode_request(RequestHeader(api_key, version, 7, "c"), request))
        response = admin.HANDLERS[ApiKey(api_key)](
            self.services, RequestContext(header, "h:1", LISTENER), parsed
        )
        if asyncio.iscoroutine(response):
            response = await response
        correlation_id, body = parse_response(api_key, version, encode_response(header, response))
        assert correlation_id == 7
        return body


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def created(request: admin_pb2.CreateTopicsRequest) -> admin_pb2.CreateTopicsResponse:
    out = admin_pb2.CreateTopicsResponse()
    for t in request.topics:
        if t.replication_factor > 2:
            out.topics.add(
                name=t.name,
                error=common_pb2.Error(code=ErrorCode.INVALID_REPLICATION_FACTOR, message="only 2 brokers"),
            )
        else:
            out.topics.add(
                name=t.name,
                topic_id="AAAAAAAAAAAAAAAAAAAAAw",
                num_partitions=max(t.num_partitions, 1),
                replication_factor=max(t.replication_factor, 1),
                configs={"retention.ms": "1"},
            )
    return out


@pytest.mark.parametrize("version", [0, 4, 5, 7])
def test_create_topics_forwards_once_and_answers_per_topic(h: Harness, version: int) -> None:
    h.controller.answers["CreateTopics"] = created
    topic = m.CreateTopicsRequestCreatableTopic
    request = m.CreateTopicsRequest(
        timeout_ms=0,
        topics=[
            topic(name="dup", num_partitions=1, replication_factor=1),
            topic(
                name="ok",
                num_partitions=-1,
                replication_factor=-1,
                configs=[m.CreateTopicsRequestCreatableTopicConfig(name="retention.ms", value="1")],
                assignments=[],
            ),
            topic(name="dup", num_partitions=1, replication_factor=1),
            topic(
                name="placed",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[
                    m.CreateTopicsRequestCreatableReplicaAssignment(partition_index=0, broker_ids=[102, 101])
                ],
            ),
            topic(name="rf", num_partitions=1, replication_factor=3),
        ],
    )
    r = h.call(ApiKey.CREATE_TOPICS, version, request)
    ((method, sent),) = h.controller.calls
    assert method == "CreateTopics" and [t.name for t in sent.topics] == ["ok", "placed", "rf"]
    assert (sent.topics[0].num_partitions, dict(sent.topics[0].configs)) == (-1, {"retention.ms": "1"})
    assert list(sent.topics[1].assignments[0].broker_ids) == [102, 101]
    codes = [(t.name, t.error_code) for t in r.topics]
    # one answer per name: a duplicated name is one INVALID_REQUEST
    assert codes == [
        ("dup", ErrorCode.INVALID_REQUEST),
        ("ok", 0),
        ("placed", 0),
        ("rf", ErrorCode.INVALID_REPLICATION_FACTOR),
    ]
    ok = r.topics[1]
    if version >= 5:
        assert (ok.num_partitions, ok.replication_factor) == (1, 1)
        assert [(c.name, c.value, c.config_source) for c in ok.configs] == [("retention.ms", "1", 5)]
    if version >= 7:
        assert ok.topic_id == uuid_of("AAAAAAAAAAAAAAAAAAAAAw")
    if version >= 1:
        assert r.topics[3].error_message == "only 2 brokers"


def test_no_controller_is_not_controller_for_every_item(h: Harness) -> None:
    h.controller.down = True
    r = h.call(
        ApiKey.CREATE_TOPICS,
        5,
        m.CreateTopicsRequest(
            topics=[m.CreateTopicsRequestCreatableTopic(name="a", num_partitions=1, replication_factor=1)]
        ),
    )
    assert [(t.error_code, t.error_message) for t in r.topics] == [(ErrorCode.NOT_CONTROLLER, "no quorum")]
    d = h.call(ApiKey.DELETE_TOPICS, 4, m.DeleteTopicsRequest(topic_names=["a", "b"]))
    assert [t.error_code for t in d.responses] == [ErrorCode.NOT_CONTROLLER] * 2


def test_delete_topics_by_id_resolves_names(h: Harness) -> None:
    h.controller.answers["DeleteTopics"] = lambda req: admin_pb2.DeleteTopicsResponse(
        topics=[admin_pb2.DeleteTopicsResponse.Result(name=n, topic_id=TOPIC_ID) for n in req.names]
    )
    unknown = uuid_of("AAAAAAAAAAAAAAAAAAAABA")
    r = h.call(
        ApiKey.DELETE_TOPICS,
        6,
        m.DeleteTopicsRequest(
            timeout_ms=0,
            topics=[
                m.DeleteTopicsRequestDeleteTopicState(name=None, topic_id=uuid_of(TOPIC_ID)),
                m.DeleteTopicsRequestDeleteTopicState(name=None, topic_id=unknown),
            ],
        ),
    )
    assert [(x.name, x.topic_id, x.error_code) for x in r.responses] == [
        ("t", uuid_of(TOPIC_ID), 0),
        (None, unknown, ErrorCode.UNKNOWN_TOPIC_ID),
    ]
    assert [list(req.names) for _, req in h.controller.calls] == [["t"]]


def describe_answer(request: admin_pb2.DescribeConfigsRequest) -> admin_pb2.DescribeConfigsResponse:
    out = admin_pb2.DescribeConfigsResponse()
    entry = admin_pb2.DescribeConfigsResponse.Entry
    for r in request.resources:
        result = out.results.add(resource_type=r.resource_type, resource_name=r.resource_name)
        if r.resource_name:  # the topic
            result.configs.extend(
                [
                    entry(name="retention.ms", value="5", source="TOPIC"),
                    entry(name="segment.ms", value="9", source="CLUSTER_DEFAULT"),
                    entry(name="cleanup.policy", value="delete", source="DEFAULT"),
                ]
            )
        else:  # the cluster defaults
            result.configs.extend(
                [
                    entry(name="retention.ms", value="7", source="CLUSTER_DEFAULT"),
                    entry(name="segment.ms", value="9", source="CLUSTER_DEFAULT"),
                    entry(name="cleanup.policy", value="delete", source="DEFAULT"),
                ]
            )
    return out


def test_describe_configs_sources_synonyms_and_filters(h: Harness) -> None:
    h.controller.answers["DescribeConfigs"] = describe_answer
    resource = m.DescribeConfigsRequestDescribeConfigsResource
    r = h.call(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        m.DescribeConfigsRequest(
            include_synonyms=True,
            include_documentation=True,
            resources=[
                resource(resource_type=2, resource_name="t", configuration_keys=["retention.ms", "no.such"]),
                resource(resource_type=4, resource_name="102", configuration_keys=None),
                resource(resource_type=4, resource_name="999", configuration_keys=None),
                resource(resource_type=8, resource_name="101", configuration_keys=None),
            ],
        ),
    )
    topic, broker, unknown, logger = r.results
    (retention,) = topic.configs  # an unknown name is left out, as Kafka does
    assert (retention.value, retention.config_source, retention.is_default, retention.config_type) == (
        "5",
        1,
        False,
        5,
    )
    assert [(s.value, s.source) for s in retention.synonyms] == [("5", 1), ("7", 3), ("604800000", 5)]
    assert retention.documentation == "-1 keeps data forever"
    assert [(c.name, c.config_source) for c in broker.configs] == [
        ("retention.ms", 3),
        ("segment.ms", 3),
        ("cleanup.policy", 5),
    ]
    assert unknown.error_code == logger.error_code == ErrorCode.INVALID_REQUEST
    v0 = h.call(
        ApiKey.DESCRIBE_CONFIGS,
        0,
        m.DescribeConfigsRequest(
            resources=[resource(resource_type=2, resource_name="t", configuration_keys=[])]
        ),
    )
    assert v0.results[0].configs == []  # an empty list asks for none (null asks for all)


def test_legacy_alter_configs_replaces_every_override(h: Harness) -> None:
    h.controller.answers["DescribeConfigs"] = describe_answer
    h.controller.answers["AlterConfigs"] = lambda req: admin_pb2.AlterConfigsResponse(
        results=[
            admin_pb2.AlterConfigsResponse.Result(
                resource_type=x.resource_type, resource_name=x.resource_name
            )
            for x in req.resources
        ]
    )
    r = h.call(
        ApiKey.ALTER_CONFIGS,
        1,
        m.AlterConfigsRequest(
            resources=[
                m.AlterConfigsRequestAlterConfigsResource(
                    resource_type=2,
                    resource_name="t",
                    configs=[m.AlterConfigsRequestAlterableConfig(name="segment.ms", value="100")],
                )
            ]
        ),
    )
    assert r.responses[0].error_code == 0
    (_, altered) = h.controller.calls[-1]
    assert [(c.name, c.op, c.value) for c in altered.resources[0].configs] == [
        ("segment.ms", admin_pb2.SET, "100"),
        ("retention.ms", admin_pb2.DELETE, ""),
    ]


def test_incremental_alter_configs_refuses_per_broker_and_duplicates(h: Harness) -> None:
    h.controller.answers["AlterConfigs"] = lambda req: admin_pb2.AlterConfigsResponse(
        results=[
            admin_pb2.AlterConfigsResponse.Result(
                resource_type=x.resource_type, resource_name=x.resource_name
            )
            for x in req.resources
        ]
    )
    res = m.IncrementalAlterConfigsRequestAlterConfigsResource
    cfg = m.IncrementalAlterConfigsRequestAlterableConfig
    r = h.call(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        m.IncrementalAlterConfigsRequest(
            resources=[
                res(
                    resource_type=4,
                    resource_name="101",
                    configs=[cfg(name="retention.ms", config_operation=0, value="1")],
                ),
                res(
                    resource_type=4,
                    resource_name="",
                    configs=[cfg(name="retention.ms", config_operation=0, value="1")],
                ),
                res(
                    resource_type=2,
                    resource_name="t",
                    configs=[cfg(name="retention.ms", config_operation=1, value=None)],
                ),
                res(resource_type=2, resource_name="t", configs=[]),
            ]
        ),
    )
    codes = [x.error_code for x in r.responses]
    assert codes == [ErrorCode.INVALID_REQUEST, 0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert "per-broker configs are not supported" in r.responses[0].error_message
    (_, sent) = h.controller.calls[-1]
    assert [(x.resource_type, x.resource_name) for x in sent.resources] == [(4, "")]  # CLUSTER


def test_describe_cluster_answers_the_listener_endpoints(h: Harness) -> None:
    r = h.call(ApiKey.DESCRIBE_CLUSTER, 1, m.DescribeClusterRequest(endpoint_type=1))
    assert [(b.broker_id, b.host, b.port) for b in r.brokers] == [
        (101, "kafka-host", 9101),
        (102, "kafka-host", 9102),
    ]
    assert r.controller_id == 101 and r.cluster_id == CLUSTER_ID
    controllers = h.call(ApiKey.DESCRIBE_CLUSTER, 1, m.DescribeClusterRequest(endpoint_type=2))
    assert controllers.error_code == admin.UNSUPPORTED_ENDPOINT_TYPE


def test_delete_records_moves_the_log_start_up_to_the_high_watermark(h: Harness) -> None:
    batch = build_batch([(None, b"v%d" % i, (), 0) for i in range(10)])
    results = []
    h.manager.produce(1, 1000, [ProduceRequestPartition(("t", 0), batch, None)], 0, results.append)
    assert results and results[0][("t", 0)].code == 0

    def delete(offset: int, partition: int = 0) -> tuple[int, int]:
        request = m.DeleteRecordsRequest(
            timeout_ms=1000,
            topics=[
                m.DeleteRecordsRequestDeleteRecordsTopic(
                    name="t",
                    partitions=[
                        m.DeleteRecordsRequestDeleteRecordsPartition(partition_index=partition, offset=offset)
                    ],
                )
            ],
        )
        (p,) = h.call(ApiKey.DELETE_RECORDS, 2, request).topics[0].partitions
        return p.error_code, p.low_watermark

    assert delete(4) == (0, 4)
    assert delete(2) == (0, 4)  # never backwards
    assert delete(11) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert delete(-1) == (0, 10)  # -1 = the high watermark
    assert delete(0, partition=5) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
    assert h.manager.logs[("t", 0)].log_start_offset == 10


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_forwards_the_election_type_and_groups_results(h: Harness, version: int) -> None:
    result = admin_pb2.ElectLeadersResponse.Result
    h.controller.answers["ElectLeaders"] = lambda req: admin_pb2.ElectLeadersResponse(results=[
        result(topic="t", partition=0, leader=101),
        result(topic="t", partition=1, error=common_pb2.Error(code=ErrorCode.ELECTION_NOT_NEEDED)),
    ])  # fmt: skip
    wanted = [m.ElectLeadersRequestTopicPartitions(topic="t", partitions=[0, 1])]
    r = h.call(ApiKey.ELECT_LEADERS, version, m.ElectLeadersRequest(election_type=1, topic_partitions=wanted))
    ((_, sent),) = h.controller.calls
    assert sent.election_type == (admin_pb2.UNCLEAN if version >= 1 else admin_pb2.PREFERRED)
    assert [(t.topic, list(t.partitions)) for t in sent.topics] == [("t", [0, 1])]
    ((topic, results),) = [(x.topic, x.partition_result) for x in r.replica_election_results]
    assert topic == "t" and [(p.partition_id, p.error_code) for p in results] == [
        (0, 0),
        (1, ErrorCode.ELECTION_NOT_NEEDED),
    ]
    h.controller.down = True
    down = h.call(ApiKey.ELECT_LEADERS, version, m.ElectLeadersRequest(topic_partitions=wanted))
    codes = [p.error_code for x in down.replica_election_results for p in x.partition_result]
    assert codes == [ErrorCode.NOT_CONTROLLER] * 2  # v0 has no top-level error: every partition says it


def test_create_partitions_duplicates_and_forwarded_assignments(h: Harness) -> None:
    h.controller.answers["CreatePartitions"] = lambda req: admin_pb2.CreatePartitionsResponse(
        topics=[admin_pb2.CreatePartitionsResponse.Result(name=t.name) for t in req.topics]
    )
    topic = m.CreatePartitionsRequestCreatePartitionsTopic
    on_102 = [m.CreatePartitionsRequestCreatePartitionsAssignment(broker_ids=[102])]
    r = h.call(ApiKey.CREATE_PARTITIONS, 3, m.CreatePartitionsRequest(timeout_ms=0, topics=[
        topic(name="t", count=2, assignments=on_102),
        topic(name="d", count=2, assignments=None),
        topic(name="d", count=3, assignments=None),
    ]))  # fmt: skip
    assert [(x.name, x.error_code) for x in r.results] == [("t", 0), ("d", ErrorCode.INVALID_REQUEST)]
    ((_, sent),) = h.controller.calls
    assert [(t.name, t.count, [list(a.broker_ids) for a in t.assignments]) for t in sent.topics] == [
        ("t", 2, [[102]])
    ]
