"""Decoded group requests and responses for the sans-I/O group coordinator: the Kafka group handlers
(``broker.kafka.handlers.groups``) turn the wire structs of any version into these and back, so the core
never sees a wire struct. ``error`` is a ``proto.errors.ApiError``: a Kafka error code and a message for logs.
Requests carry only what the coordinator reads; ``client_host`` is added by the handler (the peer
address).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.group.metadata import NO_GENERATION
from proto.errors import OK, ApiError
from proto.kafka_types import NO_EPOCH, NO_OFFSET

# ---- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    client_id: str = ""
    client_host: str = ""
    reason: str = ""
    # KIP-394 (JoinGroup v4+): a new dynamic member first gets MEMBER_ID_REQUIRED and its id; older
    # clients do not know that error and join with an empty id in one round.
    require_known_member_id: bool = True


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error: ApiError
    generation_id: int = NO_GENERATION
    protocol_type: str = ""
    protocol_name: str = ""
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str = ""  # "" = not checked
    protocol_name: str = ""  # "" = not checked
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error: ApiError
    protocol_type: str = ""
    protocol_name: str = ""
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: ApiError


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[MemberIdentity, ...]


@dataclass(frozen=True, slots=True)
class LeaveGroupMemberResponse:
    member_id: str
    group_instance_id: str | None
    error: ApiError


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error: ApiError
    members: tuple[LeaveGroupMemberResponse, ...] = ()


# ---- offsets -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    topic: str
    partition: int
    committed_offset: int
    committed_leader_epoch: int = NO_EPOCH
    committed_metadata: str = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    partitions: tuple[OffsetCommitPartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    """``error`` fails the whole request; else ``partitions`` maps (topic, partition) -> error."""

    error: ApiError
    partitions: dict[tuple[str, int], ApiError]


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    group_id: str
    partitions: tuple[tuple[str, int], ...] | None  # None: every committed offset of the group


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    committed_offset: int = NO_OFFSET
    committed_leader_epoch: int = NO_EPOCH
    metadata: str = ""
    error: ApiError = OK


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error: ApiError
    partitions: dict[tuple[str, int], FetchedOffset]


# ---- List / Describe / Delete ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str


@dataclass(frozen=True, slots=True)
class DescribedGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error: ApiError
    group_id: str
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    generation_id: int = NO_GENERATION
    members: tuple[DescribedGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class DeletableGroupResult:
    group_id: str
    error: ApiError


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[DeletableGroupResult, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    """``error`` fails the whole request; else ``partitions`` maps (topic, partition) -> error."""

    error: ApiError
    partitions: dict[tuple[str, int], ApiError]


GroupResponse = (
    JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | DeleteGroupsResponse
    | OffsetDeleteResponse
)
