"""``AdminClient``: typed wrappers over the controllers' AdminService (Kafka's Admin API, in Python).

    with AdminClient("127.0.0.1:9093") as admin:
        admin.create_topic("orders", num_partitions=6, replication_factor=3,
                           configs={"min.insync.replicas": "2"})
        for t in admin.describe_topics(["orders"]):
            print(t.name, [(p.partition, p.leader, p.isr) for p in t.partitions])

``bootstrap`` is one address or a comma-separated list (controllers, or brokers that forward
AdminService). Any controller forwards to the active one, so one address suffices; when a node is
unreachable the client tries the next one, and a whole-request NOT_CONTROLLER (no active
controller right now, e.g. during an election) or another retriable whole-request error
(REQUEST_TIMED_OUT: a commit's outcome is unknown) is retried with backoff until ``timeout_s`` —
so a retried CreateTopics may answer TOPIC_ALREADY_EXISTS for a topic its first attempt created.

Per-item failures come back as results carrying ``error`` (a ``proto.errors.KafkaError`` subclass
such as ``TopicAlreadyExistsError``, or ``None``); the ``*_or_raise`` style helpers
(``create_topic``, ``delete_topic``) raise it instead. A whole-request failure raises.

Synchronous and thread-safe to the extent of the underlying gRPC channel.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from proto import admin_pb2, admin_pb2_grpc, common_pb2, errors, metadata_pb2
from proto.errors import ErrorCode
from proto.kafka_types import USE_DEFAULT

DEFAULT_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.1
CONFIG_OPS = {
    "set": admin_pb2.SET,
    "delete": admin_pb2.DELETE,
    "append": admin_pb2.APPEND,
    "subtract": admin_pb2.SUBTRACT,
}
RESOURCE_TYPES = {"topic": metadata_pb2.TOPIC, "cluster": metadata_pb2.CLUSTER}


def _error(e: common_pb2.Error) -> errors.KafkaError | None:
    return None if e.code == ErrorCode.NONE else errors.error_for(e.code, e.message)


@dataclass(frozen=True, slots=True)
class TopicResult:
    name: str
    error: errors.KafkaError | None
    topic_id: str = ""
    num_partitions: int = 0
    replication_factor: int = 0
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ItemResult:
    name: str
    error: errors.KafkaError | None


@dataclass(frozen=True, slots=True)
class TopicListing:
    name: str
    topic_id: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    error: errors.KafkaError | None
    partitions: tuple[PartitionInfo, ...] = ()
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    endpoints: tuple[tuple[str, str, int], ...]  # (listener name, host, port)
    rack: str
    fenced: bool
    in_controlled_shutdown: bool
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    controller_id: int
    brokers: tuple[BrokerInfo, ...]
    controllers: tuple[tuple[int, str, int], ...]  # (node id, host, port)
    metadata_offset: int
    cluster_id: str = ""  # "" until the first active controller wrote it


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    source: str  # TOPIC, CLUSTER_DEFAULT or DEFAULT


@dataclass(frozen=True, slots=True)
class ElectionResult:
    topic: str
    partition: int
    error: errors.KafkaError | None
    leader: int


@dataclass(frozen=True, slots=True)
class VoterState:
    node_id: int
    log_end_offset: int
    lag: int
    status: str


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[VoterState, ...]


class AdminClient:
    def __init__(self, bootstrap: str | Iterable[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        addresses = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
        self.addresses = [a.strip() for a in addresses if a.strip()]
        if not self.addresses:
            raise ValueError("no bootstrap address given; expected HOST:PORT[,HOST:PORT...]")
        self.timeout_s = timeout_s
        self._current = 0
        self._channel: grpc.Channel | None = None

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _stub(self) -> admin_pb2_grpc.AdminServiceStub:
        if self._channel is None:
            self._channel = grpc.insecure_channel(self.addresses[self._current])
        return admin_pb2_grpc.AdminServiceStub(self._channel)

    def _next_address(self) -> None:
        self.close()
        self._current = (self._current + 1) % len(self.addresses)

    def _call(self, method: str, request: Any) -> Any:
        """Call with retries: another address on UNAVAILABLE, backoff on NOT_CONTROLLER."""
        deadline = time.monotonic() + self.timeout_s
        last = "no attempt"
        while time.monotonic() < deadline:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                response = getattr(self._stub(), method)(request, timeout=remaining)
            except grpc.RpcError as exc:
                code = exc.code() if isinstance(exc, grpc.Call) else None
                details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
                last = f"{self.addresses[self._current]}: {code.name if code else 'error'} {details}"
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise errors.error_for(ErrorCode.UNKNOWN_SERVER_ERROR, last) from exc
                self._next_address()
                time.sleep(RETRY_BACKOFF_S)
                continue
            if errors.is_retriable(response.error.code):  # NOT_CONTROLLER, REQUEST_TIMED_OUT, ...
                last = f"{ErrorCode(response.error.code).name}: {response.error.message}"
                time.sleep(RETRY_BACKOFF_S)
                continue
            errors.raise_for(response.error.code, response.error.message)
            return response
        raise errors.error_for(
            ErrorCode.REQUEST_TIMED_OUT, f"{method} did not succeed within {self.timeout_s}s: {last}"
        )

    # ---- topics ------------------------------------------------------------------------------

    def create_topics(
        self, topics: Iterable[Mapping[str, Any]], validate_only: bool = False
    ) -> list[TopicResult]:
        """Each topic: ``{"name", "num_partitions", "replication_factor", "configs", "assignments"}``
        (all but name optional; assignments = ``{partition: [broker ids]}``)."""
        request = admin_pb2.CreateTopicsRequest(validate_only=validate_only)
        for t in topics:
            topic = request.topics.add(
                name=t["name"],
                num_partitions=t.get("num_partitions", USE_DEFAULT),
                replication_factor=t.get("replication_factor", USE_DEFAULT),
                configs=t.get("configs", {}),
            )
            for partition, replicas in (t.get("assignments") or {}).items():
                topic.assignments[partition].broker_ids.extend(replicas)
        response = self._call("CreateTopics", request)
        return [
            TopicResult(
                r.name, _error(r.error), r.topic_id, r.num_partitions, r.replication_factor, dict(r.configs)
            )
            for r in response.topics
        ]

    def create_topic(
        self,
        name: str,
        num_partitions: int = USE_DEFAULT,
        replication_factor: int = USE_DEFAULT,
        configs: Mapping[str, str] | None = None,
        assignments: Mapping[int, list[int]] | None = None,
        validate_only: bool = False,
    ) -> TopicResult:
        """Create one topic; raise its error (e.g. ``TopicAlreadyExistsError``)."""
        spec = {
            "name": name,
            "num_partitions": num_partitions,
            "replication_factor": replication_factor,
            "configs": dict(configs or {}),
            "assignments": dict(assignments or {}),
        }
        (result,) = self.create_topics([spec], validate_only)
        if result.error is not None:
            raise result.error
        return result

    def delete_topics(self, names: Iterable[str]) -> list[ItemResult]:
        response = self._call("DeleteTopics", admin_pb2.DeleteTopicsRequest(names=list(names)))
        return [ItemResult(r.name, _error(r.error)) for r in response.topics]

    def create_partitions(self, counts: Mapping[str, int], validate_only: bool = False) -> list[ItemResult]:
        """Grow topics to the given total partition counts."""
        request = admin_pb2.CreatePartitionsRequest(validate_only=validate_only)
        for name, count in counts.items():
            request.topics.add(name=name, count=count)
        response = self._call("CreatePartitions", request)
        return [ItemResult(r.name, _error(r.error)) for r in response.topics]

    def list_topics(self) -> list[TopicListing]:
        response = self._call("ListTopics", admin_pb2.ListTopicsRequest())
        return [TopicListing(t.name, t.topic_id, t.num_partitions) for t in response.topics]

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        response = self._call("DescribeTopics", admin_pb2.DescribeTopicsRequest(names=list(names or ())))
        return [
            TopicDescription(
                t.name,
                t.topic_id,
                _error(t.error),
                tuple(
                    PartitionInfo(
                        p.partition,
                        p.leader,
                        p.leader_epoch,
                        p.partition_epoch,
                        tuple(p.replicas),
                        tuple(p.isr),
                        tuple(p.offline_replicas),
                    )
                    for p in t.partitions
                ),
                dict(t.configs),
            )
            for t in response.topics
        ]

    # ---- cluster, configs, leadership, quorum ----------------------------------------------

    def describe_cluster(self) -> ClusterDescription:
        r = self._call("DescribeCluster", admin_pb2.DescribeClusterRequest())
        brokers = tuple(
            BrokerInfo(
                b.broker_id,
                tuple((e.name, e.host, e.port) for e in b.endpoints),
                b.rack,
                b.fenced,
                b.in_controlled_shutdown,
                b.broker_epoch,
            )
            for b in r.brokers
        )
        controllers = tuple((c.node_id, c.host, c.port) for c in r.controllers)
        return ClusterDescription(r.controller_id, brokers, controllers, r.metadata_offset, r.cluster_id)

    def describe_configs(
        self, resource_type: str, name: str = "", config_names: Iterable[str] = ()
    ) -> list[ConfigEntry]:
        """Effective configs of a topic (``"topic"``) or the cluster defaults (``"cluster"``, name "")."""
        request = admin_pb2.DescribeConfigsRequest()
        request.resources.add(
            resource_type=RESOURCE_TYPES[resource_type], resource_name=name, config_names=list(config_names)
        )
        (result,) = self._call("DescribeConfigs", request).results
        errors.raise_for(result.error.code, result.error.message)
        return [ConfigEntry(c.name, c.value, c.source) for c in result.configs]

    def alter_configs(
        self,
        resource_type: str,
        name: str,
        changes: Iterable[tuple[str, str, str]],
        validate_only: bool = False,
    ) -> None:
        """Incremental: ``changes`` are ``(config name, op, value)`` with op in set/delete/append/subtract.
        All of the resource's changes apply, or none (the error is raised)."""
        request = admin_pb2.AlterConfigsRequest(validate_only=validate_only)
        resource = request.resources.add(resource_type=RESOURCE_TYPES[resource_type], resource_name=name)
        for config, op, value in changes:
            resource.configs.add(name=config, op=CONFIG_OPS[op], value=value)
        (result,) = self._call("AlterConfigs", request).results
        errors.raise_for(result.error.code, result.error.message)

    def elect_leaders(
        self, election: str = "preferred", partitions: Iterable[tuple[str, int]] | None = None
    ) -> list[ElectionResult]:
        request = admin_pb2.ElectLeadersRequest(
            election_type=admin_pb2.UNCLEAN if election == "unclean" else admin_pb2.PREFERRED
        )
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions or ():
            by_topic.setdefault(topic, []).append(partition)
        for topic, ps in by_topic.items():
            request.topics.add(topic=topic, partitions=ps)
        response = self._call("ElectLeaders", request)
        return [ElectionResult(r.topic, r.partition, _error(r.error), r.leader) for r in response.results]

    def describe_quorum(self) -> QuorumDescription:
        r = self._call("DescribeQuorum", admin_pb2.DescribeQuorumRequest())
        voters = tuple(VoterState(v.node_id, v.log_end_offset, v.lag, v.status) for v in r.voters)
        return QuorumDescription(r.leader_id, r.leader_epoch, r.high_watermark, voters)
