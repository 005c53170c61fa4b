"""The quorum controller's core: generate records, then replay them (KRaft, KIP-631).

Theory of operation. Every ``handle_*`` method validates a request against the image and returns
``ControllerResult(records, response)``; it changes nothing. Only ``replay(records, offset)`` — run
for every committed entry of the metadata log, on the active controller and the standbys alike —
changes the image. The driver (``metadata.server``) proposes a result's records as ONE Raft entry
(so a decision commits all or nothing), waits for the commit, replays, and only then answers.
Handlers run one at a time, each against an image that includes every earlier decision, so the
responses computed at generation time (epochs, producer ids) are the ones replay produces. The one
exception is a broker's epoch — the offset of its registration entry — which the driver fills in
after the commit.

The only state outside the log is the brokers' heartbeat sessions (``BrokerHeartbeatManager``),
reset when this controller becomes active (``activate``).

Sans-I/O: time arrives as ``now_ms``, randomness (topic ids, placement) from an injected seeded
``random.Random``. Not thread-safe.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Generic, TypeVar

from metadata import configs as cfg
from metadata import replication as repl
from metadata.api import (
    AllocateProducerIdsResponse,
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    CreatePartitionsResult,
    CreateTopicResult,
    DeleteTopicResult,
    ElectLeadersRequest,
    ElectLeadersResult,
    NewPartitions,
    NewTopic,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
)
from metadata.heartbeats import BrokerHeartbeatManager
from metadata.image import MetadataImage
from metadata.records import (
    NO_CLUSTER_ID,
    BrokerRegistrationChangeRecord,
    ClusterIdRecord,
    ConfigRecord,
    ConfigResourceType,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from metadata.topics import validate_assignment, validate_counts, validate_topic_name
from proto.errors import OK, ApiError
from proto.errors import ErrorCode as Code
from proto.kafka_types import NO_LEADER, USE_DEFAULT
from proto.topic_configs import TOPIC_CONFIGS

T = TypeVar("T")

DEFAULT_BROKER_SESSION_TIMEOUT_MS = 9000  # KRaft's broker.session.timeout.ms
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    broker_session_timeout_ms: int = DEFAULT_BROKER_SESSION_TIMEOUT_MS
    default_num_partitions: int = 1  # Kafka's num.partitions
    default_replication_factor: int = 1  # Kafka's default.replication.factor
    producer_id_block_size: int = PRODUCER_ID_BLOCK_SIZE
    cluster_id: str = NO_CLUSTER_ID  # Kafka's cluster.id (format --cluster-id); unset: generated


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    records: tuple[Record, ...]
    response: T


class QuorumController:
    def __init__(
        self, config: ControllerConfig, rng: random.Random, image: MetadataImage | None = None
    ) -> None:
        self.config = config
        self.rng = rng
        self.image = image if image is not None else MetadataImage()
        self.heartbeats = BrokerHeartbeatManager(config.broker_session_timeout_ms)

    # ---- replay ------------------------------------------------------------------------------

    def replay(self, records: tuple[Record, ...] | list[Record], offset: int) -> None:
        """Apply one committed entry of the metadata log."""
        self.image.apply_batch(records, offset)

    def invariants(self) -> None:
        """The image's own, plus the controller's rule that only unfenced brokers lead: every path that
        fences or replaces a broker moves its leaderships first."""
        self.image.invariants()
        for topic in self.image.topics.values():
            for index, p in topic.partitions.items():
                if p.leader == NO_LEADER:
                    continue
                broker = self.image.brokers.get(p.leader)
                assert broker is not None and not broker.fenced, (
                    f"{topic.name}-{index} is led by broker {p.leader}: {broker or 'not registered'}"
                )

    def activate(self, now_ms: int) -> None:
        """This controller became active: give every registered broker a fresh session."""
        self.heartbeats.start_sessions(self.image.brokers, now_ms)

    # ---- cluster id --------------------------------------------------------------------------

    def maybe_write_cluster_id(self) -> ControllerResult[ApiError]:
        """On activation: the cluster id record when the log has none yet — the configured
        ``cluster.id``, else a random Uuid (Kafka's ``kafka-storage.sh random-uuid``). A log whose
        id differs from the configured one answers INCONSISTENT_CLUSTER_ID and writes nothing."""
        written, configured = self.image.cluster_id, self.config.cluster_id
        if written == NO_CLUSTER_ID:
            cluster_id = configured or repl.new_topic_id(self.rng, ())
            return ControllerResult((ClusterIdRecord(cluster_id),), OK)
        if configured and configured != written:
            msg = f"the metadata log belongs to cluster {written}, but cluster.id is {configured}"
            return ControllerResult((), ApiError(Code.INCONSISTENT_CLUSTER_ID, msg))
        return ControllerResult((), OK)

    # ---- topics ------------------------------------------------------------------------------

    def handle_create_topics(
        self, topics: list[NewTopic], validate_only: bool = False
    ) -> ControllerResult[list[CreateTopicResult]]:
        names = [t.name for t in topics]
        records: list[Record] = []
        results = []
        taken = set(self.image.topics)
        for topic in topics:
            if names.count(topic.name) > 1:
                msg = f"topic {topic.name!r} appears {names.count(topic.name)} times in the request"
                results.append(CreateTopicResult(topic.name, ApiError(Code.INVALID_REQUEST, msg)))
                continue
            topic_records, result = self._create_topic(topic, taken)
            results.append(result)
            if result.error.ok:
                taken.add(result.topic_id)
                records.extend(topic_records)
        return ControllerResult(() if validate_only else tuple(records), results)

    def _create_topic(self, topic: NewTopic, taken: set[str]) -> tuple[list[Record], CreateTopicResult]:
        error, assignment = self._validate_new_topic(topic)
        if not error.ok:
            return [], CreateTopicResult(topic.name, error)
        topic_id = repl.new_topic_id(self.rng, taken)
        partitions, error = repl.new_partition_records(self.image, topic_id, 0, assignment)
        if not error.ok:
            return [], CreateTopicResult(topic.name, error)
        configs = {k: cfg.normalize(k, v) for k, v in sorted(topic.configs.items())}
        records: list[Record] = [TopicRecord(topic.name, topic_id), *partitions]
        records.extend(ConfigRecord(ConfigResourceType.TOPIC, topic.name, k, v) for k, v in configs.items())
        effective = cfg.effective_config(configs, self.image.cluster_defaults())
        return records, CreateTopicResult(
            topic.name, OK, topic_id, len(assignment), len(assignment[0]), effective
        )

    def _validate_new_topic(self, topic: NewTopic) -> tuple[ApiError, list[tuple[int, ...]]]:
        error = validate_topic_name(topic.name)
        if error is not None:
            return error, []
        if topic.name in self.image.topic_ids:
            return ApiError(Code.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists"), []
        for name, value in sorted(topic.configs.items()):
            problem = cfg.validate_config(name, value)
            if problem is not None:
                return ApiError(Code.INVALID_CONFIG, problem), []
        if topic.assignments:
            return self._explicit_assignment(topic)
        count = (
            self.config.default_num_partitions
            if topic.num_partitions == USE_DEFAULT
            else topic.num_partitions
        )
        rf = (
            self.config.default_replication_factor
            if topic.replication_factor == USE_DEFAULT
            else topic.replication_factor
        )
        error = validate_counts(count, rf, len(self.image.usable_brokers()))
        if error is not None:
            return error, []
        return OK, repl.placement(self.image, count, rf, self.rng)

    def _explicit_assignment(self, topic: NewTopic) -> tuple[ApiError, list[tuple[int, ...]]]:
        if topic.num_partitions != USE_DEFAULT or topic.replication_factor != USE_DEFAULT:
            msg = "give either a replica assignment or a partition count and replication factor, not both"
            return ApiError(Code.INVALID_REQUEST, msg), []
        error = validate_assignment(topic.assignments, 0, self.image.brokers)
        if error is not None:
            return error, []
        return OK, [tuple(topic.assignments[p]) for p in sorted(topic.assignments)]

    def handle_delete_topics(self, names: list[str]) -> ControllerResult[list[DeleteTopicResult]]:
        records: list[Record] = []
        results = []
        seen: set[str] = set()
        for name in names:
            topic = self.image.topic_by_name(name)
            if topic is None or name in seen:
                error = ApiError(Code.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
                results.append(DeleteTopicResult(name, error))
                continue
            seen.add(name)
            records.append(RemoveTopicRecord(topic.topic_id))
            results.append(DeleteTopicResult(name, OK, topic.topic_id))
        return ControllerResult(tuple(records), results)

    def handle_create_partitions(
        self, items: list[NewPartitions], validate_only: bool = False
    ) -> ControllerResult[list[CreatePartitionsResult]]:
        records: list[Record] = []
        results = []
        for item in items:
            new_records, error = self._create_partitions(item)
            results.append(CreatePartitionsResult(item.name, error))
            records.extend(new_records)
        return ControllerResult(() if validate_only else tuple(records), results)

    def _create_partitions(self, item: NewPartitions) -> tuple[list[Record], ApiError]:
        topic = self.image.topic_by_name(item.name)
        if topic is None:
            return [], ApiError(Code.UNKNOWN_TOPIC_OR_PARTITION, f"topic {item.name!r} does not exist")
        current = len(topic.partitions)
        if item.count <= current:
            msg = f"topic {item.name!r} has {current} partitions; the new count {item.count} must be larger"
            return [], ApiError(Code.INVALID_PARTITIONS, msg)
        rf = len(topic.partitions[0].replicas)
        if item.assignments:
            if len(item.assignments) != item.count - current:
                msg = f"{len(item.assignments)} replica lists given for {item.count - current} new partitions"
                return [], ApiError(Code.INVALID_REPLICA_ASSIGNMENT, msg)
            assignment = {current + i: tuple(r) for i, r in enumerate(item.assignments)}
            error = validate_assignment(assignment, current, self.image.brokers, rf)
            if error is not None:
                return [], error
            lists = [assignment[p] for p in sorted(assignment)]
        else:
            error = validate_counts(item.count - current, rf, len(self.image.usable_brokers()))
            if error is not None:
                return [], error
            lists = repl.placement(self.image, item.count - current, rf, self.rng, first=current)
        partitions, error = repl.new_partition_records(self.image, topic.topic_id, current, lists)
        return list(partitions), error

    # ---- configs -----------------------------------------------------------------------------

    def handle_incremental_alter_configs(
        self, resources: list[AlterConfigsResource], validate_only: bool = False
    ) -> ControllerResult[list[AlterConfigsResult]]:
        records: list[Record] = []
        results = []
        for resource in resources:
            new_records, error = self._alter_configs(resource)
            results.append(AlterConfigsResult(resource.resource_type, resource.resource_name, error))
            if error.ok:
                records.extend(new_records)
        return ControllerResult(() if validate_only else tuple(records), results)

    def _alter_configs(self, resource: AlterConfigsResource) -> tuple[list[Record], ApiError]:
        kind, name = resource.resource_type, resource.resource_name
        if kind == ConfigResourceType.TOPIC and name not in self.image.topic_ids:
            return [], ApiError(Code.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if kind == ConfigResourceType.CLUSTER and name:
            return [], ApiError(Code.INVALID_REQUEST, f"the cluster resource has an empty name, not {name!r}")
        current = dict(self.image.configs.get((kind, name), {}))
        records: list[Record] = []
        for change in resource.configs:
            if change.name not in TOPIC_CONFIGS:
                return [], ApiError(Code.INVALID_CONFIG, cfg.validate_config(change.name, change.value) or "")
            value = cfg.apply_op(change.name, change.op, change.value, current.get(change.name))
            if value is not None:
                problem = cfg.validate_config(change.name, value)
                if problem is not None:
                    return [], ApiError(Code.INVALID_CONFIG, problem)
                value = cfg.normalize(change.name, value)
                current[change.name] = value
            else:
                current.pop(change.name, None)
            records.append(ConfigRecord(kind, name, change.name, value))
        return records, OK

    # ---- leadership --------------------------------------------------------------------------

    def handle_elect_leaders(
        self, request: ElectLeadersRequest
    ) -> ControllerResult[list[ElectLeadersResult]]:
        records, results = repl.elect_leaders(self.image, request)
        return ControllerResult(tuple(records), results)

    def handle_alter_partition(
        self, request: AlterPartitionRequest
    ) -> ControllerResult[AlterPartitionResponse]:
        error = self._check_broker_epoch(request.broker_id, request.broker_epoch)
        if not error.ok:
            return ControllerResult((), AlterPartitionResponse(error))
        records: list[Record] = []
        results = []
        for item in request.partitions:
            record, result = repl.alter_partition_item(self.image, request.broker_id, item)
            results.append(result)
            if record is not None:
                records.append(record)
        return ControllerResult(tuple(records), AlterPartitionResponse(OK, tuple(results)))

    # ---- brokers -----------------------------------------------------------------------------

    def _check_broker_epoch(self, broker_id: int, broker_epoch: int) -> ApiError:
        broker = self.image.brokers.get(broker_id)
        if broker is None:
            return ApiError(Code.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
        if broker.broker_epoch != broker_epoch:
            msg = f"broker {broker_id} epoch {broker_epoch} is stale (current {broker.broker_epoch})"
            return ApiError(Code.STALE_BROKER_EPOCH, msg)
        return OK

    def handle_register_broker(
        self, request: RegisterBrokerRequest, now_ms: int
    ) -> ControllerResult[RegisterBrokerResponse]:
        """A (re-)registration: fenced until the broker catches up; a newer incarnation replaces the
        old one, whose leaderships move away first (it lost its in-memory state). A broker whose data
        directory belongs to another cluster is refused (Kafka's INCONSISTENT_CLUSTER_ID)."""
        if request.broker_id < 0:
            error = ApiError(Code.INVALID_REQUEST, f"broker id must be >= 0, got {request.broker_id}")
            return ControllerResult((), RegisterBrokerResponse(error))
        if request.cluster_id and request.cluster_id != self.image.cluster_id:
            msg = (
                f"broker {request.broker_id}'s data directory belongs to cluster {request.cluster_id}, "
                f"this is cluster {self.image.cluster_id}; point it at the right cluster or give it an "
                "empty data directory"
            )
            return ControllerResult((), RegisterBrokerResponse(ApiError(Code.INCONSISTENT_CLUSTER_ID, msg)))
        records: list[Record] = []
        old = self.image.brokers.get(request.broker_id)
        if old is not None and not old.fenced:
            records.extend(repl.move_leadership_off(self.image, [request.broker_id]))
        records.append(
            RegisterBrokerRecord(request.broker_id, request.incarnation_id, request.endpoints, request.rack)
        )
        self.heartbeats.touch(request.broker_id, now_ms)
        return ControllerResult(tuple(records), RegisterBrokerResponse(OK))

    def handle_broker_heartbeat(
        self, request: BrokerHeartbeatRequest, now_ms: int
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        error = self._check_broker_epoch(request.broker_id, request.broker_epoch)
        if not error.ok:
            return ControllerResult((), BrokerHeartbeatResponse(error))
        broker = self.image.brokers[request.broker_id]
        self.heartbeats.touch(request.broker_id, now_ms, request.current_metadata_offset)
        caught_up = request.current_metadata_offset >= broker.broker_epoch
        change = BrokerRegistrationChangeRecord
        bid, epoch = broker.broker_id, broker.broker_epoch
        records: list[Record] = []
        fenced = broker.fenced
        if request.want_shut_down and not broker.in_controlled_shutdown and not broker.fenced:
            records.extend(repl.move_leadership_off(self.image, [bid]))
            records.append(change(bid, epoch, in_controlled_shutdown=True))
        elif request.want_fence and not broker.fenced:
            records.extend(repl.move_leadership_off(self.image, [bid]))
            records.append(change(bid, epoch, fenced=True))
            fenced = True
        elif broker.fenced and caught_up and not request.want_fence and not request.want_shut_down:
            records.append(change(bid, epoch, fenced=False))
            records.extend(repl.elect_offline_partitions(self.image, bid))
            fenced = False
        should_shut_down = request.want_shut_down and (broker.fenced or self._shutdown_complete(bid))
        response = BrokerHeartbeatResponse(OK, caught_up, fenced, should_shut_down)
        return ControllerResult(tuple(records), response)

    def _shutdown_complete(self, broker_id: int) -> bool:
        """In controlled shutdown (committed) and leading nothing: the broker may stop."""
        broker = self.image.brokers[broker_id]
        if not broker.in_controlled_shutdown:
            return False
        for topic_id, partition in self.image.partitions_hosted_by(broker_id):
            p = self.image.partition(topic_id, partition)
            if p is not None and p.leader == broker_id:
                return False
        return True

    def maybe_fence_stale_brokers(self, now_ms: int) -> ControllerResult[list[int]]:
        """Fence every broker whose session expired; move its leaderships away. Response: the ids."""
        live = [b.broker_id for b in self.image.brokers.values() if not b.fenced]
        expired = self.heartbeats.expired(live, now_ms)
        if not expired:
            return ControllerResult((), [])
        records: list[Record] = list(repl.move_leadership_off(self.image, expired))
        for broker_id in expired:
            epoch = self.image.brokers[broker_id].broker_epoch
            records.append(BrokerRegistrationChangeRecord(broker_id, epoch, fenced=True))
        return ControllerResult(tuple(records), expired)

    def next_fence_deadline_ms(self) -> int | None:
        return self.heartbeats.next_deadline_ms(
            b.broker_id for b in self.image.brokers.values() if not b.fenced
        )

    def handle_unregister_broker(self, broker_id: int) -> ControllerResult[ApiError]:
        broker = self.image.brokers.get(broker_id)
        if broker is None:
            return ControllerResult(
                (), ApiError(Code.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is unknown")
            )
        records: list[Record] = list(repl.move_leadership_off(self.image, [broker_id]))
        records.append(UnregisterBrokerRecord(broker_id, broker.broker_epoch))
        return ControllerResult(tuple(records), OK)

    # ---- producer ids ------------------------------------------------------------------------

    def handle_allocate_producer_ids(
        self, broker_id: int, broker_epoch: int
    ) -> ControllerResult[AllocateProducerIdsResponse]:
        error = self._check_broker_epoch(broker_id, broker_epoch)
        if not error.ok:
            return ControllerResult((), AllocateProducerIdsResponse(error))
        start = self.image.next_producer_id
        size = self.config.producer_id_block_size
        record = ProducerIdsRecord(broker_id, broker_epoch, start + size)
        return ControllerResult((record,), AllocateProducerIdsResponse(OK, start, size))
