"""The controller core's own request and response types (the gRPC edge converts to and from these).

Frozen dataclasses, Kafka's field names. Every per-item result carries an ``ApiError`` (``OK`` when
it succeeded) with Kafka's ``ErrorCode`` and a message a person can act on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from metadata.configs import AlterConfigOp
from metadata.partition_change import Election
from metadata.records import ConfigResourceType, Endpoint
from proto.errors import ApiError
from proto.kafka_types import NO_BROKER_EPOCH, NO_LEADER, USE_DEFAULT

# ---- topics --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = USE_DEFAULT
    replication_factor: int = USE_DEFAULT
    assignments: dict[int, tuple[int, ...]] = field(default_factory=dict)  # partition -> replicas
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error: ApiError
    topic_id: str = ""
    num_partitions: int = 0
    replication_factor: int = 0
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    name: str
    error: ApiError
    topic_id: str = ""


@dataclass(frozen=True, slots=True)
class NewPartitions:
    name: str
    count: int  # the new total number of partitions
    assignments: list[tuple[int, ...]] = field(default_factory=list)  # replicas of each new partition


@dataclass(frozen=True, slots=True)
class CreatePartitionsResult:
    name: str
    error: ApiError


# ---- configs -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterableConfig:
    name: str
    op: AlterConfigOp
    value: str = ""


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    resource_type: ConfigResourceType
    resource_name: str
    configs: tuple[AlterableConfig, ...]


@dataclass(frozen=True, slots=True)
class AlterConfigsResult:
    resource_type: ConfigResourceType
    resource_name: str
    error: ApiError


# ---- leadership ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ElectLeadersResult:
    topic: str
    partition: int
    error: ApiError
    leader: int = NO_LEADER


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest:
    election: Election
    partitions: tuple[tuple[str, int], ...] | None = None  # None = every partition


# ---- brokers -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequest:
    broker_id: int
    incarnation_id: str
    endpoints: tuple[Endpoint, ...] = ()
    rack: str = ""
    cluster_id: str = ""  # from the broker's meta.properties; "" = a new data directory


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponse:
    error: ApiError
    broker_epoch: int = 0  # filled in after commit: the offset of the registration record


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    error: ApiError
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class BrokerState:
    """KIP-903: an ISR member and the broker epoch the leader saw in its fetches."""

    broker_id: int
    broker_epoch: int = NO_BROKER_EPOCH


@dataclass(frozen=True, slots=True)
class AlterPartitionItem:
    topic_id: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr_with_epochs: tuple[BrokerState, ...]

    @property
    def new_isr(self) -> tuple[int, ...]:
        return tuple(member.broker_id for member in self.new_isr_with_epochs)


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    partitions: tuple[AlterPartitionItem, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionItemResult:
    topic_id: str
    partition: int
    error: ApiError
    leader: int = NO_LEADER
    isr: tuple[int, ...] = ()
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    error: ApiError
    partitions: tuple[AlterPartitionItemResult, ...] = ()


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsResponse:
    error: ApiError
    producer_id_start: int = 0
    producer_id_len: int = 0
