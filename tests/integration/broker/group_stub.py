"""Raw Kafka group requests for the integration tests of the group coordinator: the coordinator's side
of the protocol without a consumer library, over the brokers' Kafka listeners and the generated codec
(``tests.kafka_call.KafkaSocket``). ``Coordinator`` finds a group's coordinator with FindCoordinator
and finds it again on a retriable error, as a client does.

Each thread gets its own connection per broker: a broker answers a connection's requests in order, so
a JoinGroup parked until the rebalance completes would hold up another member's JoinGroup behind it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from broker_cluster import RPC_TIMEOUT_S, BrokerCluster, wait_for

from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from tests.kafka_call import KafkaSocket

SESSION_MS = 1500
RETRIABLE = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}
# The versions these tests speak: KIP-394 JoinGroup (v4+) with static members (v5), batched LeaveGroup
# (v3+), OffsetFetch with a top-level error (v2+), non-batched FindCoordinator (v0-3).
VERSIONS = {
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 5,
    ApiKey.SYNC_GROUP: 3,
    ApiKey.HEARTBEAT: 3,
    ApiKey.LEAVE_GROUP: 3,
    ApiKey.OFFSET_COMMIT: 7,
    ApiKey.OFFSET_FETCH: 7,
    ApiKey.DESCRIBE_GROUPS: 5,
}


def error_of(response: Any) -> ErrorCode:
    """The error a retry decision looks at: the top-level one, else the first partition's or group's."""
    if isinstance(response, m.OffsetCommitResponse):
        codes = [p.error_code for t in response.topics for p in t.partitions]
        return ErrorCode(codes[0] if codes else 0)
    if isinstance(response, m.DescribeGroupsResponse):
        return ErrorCode(response.groups[0].error_code)
    return ErrorCode(response.error_code)


@dataclass(frozen=True)
class Found:
    node_id: int
    address: str


class Coordinator:
    """Raw Kafka requests to the current coordinator of one group, found again on a retriable error."""

    def __init__(self, cluster: BrokerCluster, group: str) -> None:
        self.cluster = cluster
        self.group = group
        self._local = threading.local()
        self._all: list[KafkaSocket] = []
        self._lock = threading.Lock()
        self.node_id = -1

    def wire(self, address: str) -> KafkaSocket:
        """This thread's connection to ``address`` (opened on first use, or again after a failure)."""
        wires: dict[str, KafkaSocket] = self._local.__dict__.setdefault("wires", {})
        if address not in wires:
            wires[address] = KafkaSocket(address, RPC_TIMEOUT_S, client_id="it")
            with self._lock:
                self._all.append(wires[address])
        return wires[address]

    def _drop(self, address: str) -> None:
        wire = self._local.__dict__.get("wires", {}).pop(address, None)
        if wire is not None:
            wire.close()

    def close(self) -> None:
        with self._lock:
            for wire in self._all:
                wire.close()

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, address: str, request: Any) -> Any:
        try:
            return self.wire(address).call(request, VERSIONS[ApiKey(type(request).API_KEY)], RPC_TIMEOUT_S)
        except OSError:
            self._drop(address)
            raise

    def find(self, timeout_s: float = 30.0) -> Found:
        def ask() -> Found | None:
            for spec in self.cluster.cluster.broker_nodes:
                if not self.cluster.cluster.is_running(spec) or not spec.kafka_address:
                    continue
                response = self.send(spec.kafka_address, m.FindCoordinatorRequest(key=self.group, key_type=0))
                if response.error_code == ErrorCode.NONE:
                    return Found(response.node_id, f"{response.host}:{response.port}")
            return None

        found: Found = wait_for(ask, timeout_s, f"the coordinator of {self.group}")  # type: ignore[assignment]
        self.node_id = found.node_id
        return found

    def call(self, request: Any, timeout_s: float = 30.0) -> Any:
        """Send ``request`` to the coordinator; retriable coordinator errors find it again."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                response = self.send(self.find().address, request)
            except OSError:  # the named coordinator just died: the metadata has not caught up yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
                continue
            if error_of(response) not in RETRIABLE or time.monotonic() > deadline:
                return response
            time.sleep(0.1)

    # ---- the protocol ---------------------------------------------------------------------------

    def join(self, member_id: str = "", metadata: bytes = b"events") -> m.JoinGroupResponse:
        request = m.JoinGroupRequest(
            group_id=self.group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=10_000,
            member_id=member_id, protocol_type="consumer",
            protocols=[m.JoinGroupRequestProtocol(name="range", metadata=metadata)],
        )  # fmt: skip
        response = self.call(request)
        if (
            response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        ):  # expired meanwhile: join as new, as clients do
            request.member_id = ""
            response = self.call(request)
        if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            request.member_id = response.member_id
            response = self.call(request)
        assert response.error_code == ErrorCode.NONE, response
        return response

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None):
        return self.call(m.SyncGroupRequest(
            group_id=self.group, generation_id=generation, member_id=member_id,
            assignments=[m.SyncGroupRequestAssignment(member_id=k, assignment=a)
                         for k, a in (assignments or {}).items()],
        ))  # fmt: skip

    def heartbeat(self, member_id: str, generation: int) -> ErrorCode:
        request = m.HeartbeatRequest(group_id=self.group, generation_id=generation, member_id=member_id)
        return ErrorCode(self.call(request).error_code)

    def commit(self, offsets: dict[int, int], topic: str, member_id: str = "", generation: int = -1):
        return self.call(m.OffsetCommitRequest(
            group_id=self.group, generation_id=generation, member_id=member_id,
            topics=[m.OffsetCommitRequestTopic(name=topic, partitions=[
                m.OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
                for p, o in offsets.items()
            ])],
        ))  # fmt: skip

    def fetch_offsets(self) -> dict[tuple[str, int], int]:
        response = self.call(m.OffsetFetchRequest(group_id=self.group, topics=None))  # None: every offset
        assert response.error_code == ErrorCode.NONE, response
        return {(t.name, p.partition_index): p.committed_offset
                for t in response.topics for p in t.partitions}  # fmt: skip

    def leave(self, member_id: str) -> ErrorCode:
        request = m.LeaveGroupRequest(
            group_id=self.group, members=[m.LeaveGroupRequestMemberIdentity(member_id=member_id)]
        )
        response = self.call(request)
        return ErrorCode(response.error_code or response.members[0].error_code)

    def describe(self) -> m.DescribeGroupsResponseDescribedGroup:
        return self.call(m.DescribeGroupsRequest(groups=[self.group])).groups[0]

    def state(self) -> str:
        """The group's state as DescribeGroups shows it ("Dead" once it is gone)."""
        return self.describe().group_state


def committed_codes(answer: m.OffsetCommitResponse) -> list[int]:
    return [p.error_code for t in answer.topics for p in t.partitions]
