"""Raw GroupService calls for the integration tests of the group coordinator (the coordinator's side of
the protocol, without a consumer library): ``Coordinator`` finds a group's coordinator and finds it
again on a retriable error, as a client does."""

from __future__ import annotations

import threading
import time

import grpc
from broker_cluster import RPC_TIMEOUT_S, BrokerCluster, wait_for

from proto import group_pb2, group_pb2_grpc
from proto.errors import ErrorCode

SESSION_MS = 1500
RETRIABLE = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


class Coordinator:
    """Raw GroupService calls to the current coordinator of one group, found again on a retriable error."""

    def __init__(self, cluster: BrokerCluster, group: str) -> None:
        self.cluster = cluster
        self.group = group
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()
        self.node_id = -1

    def stub(self, address: str) -> group_pb2_grpc.GroupServiceStub:
        with self._lock:
            if address not in self._channels:
                self._channels[address] = grpc.insecure_channel(address)
            return group_pb2_grpc.GroupServiceStub(self._channels[address])

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def find(self, timeout_s: float = 30.0) -> group_pb2_grpc.GroupServiceStub:
        def ask() -> group_pb2.FindCoordinatorResponse | None:
            for spec in self.cluster.cluster.broker_nodes:
                if not self.cluster.cluster.is_running(spec):
                    continue
                response = self.stub(spec.address).FindCoordinator(
                    group_pb2.FindCoordinatorRequest(key=self.group), timeout=RPC_TIMEOUT_S
                )
                if response.error.code == ErrorCode.NONE:
                    return response
            return None

        found = wait_for(ask, timeout_s, f"the coordinator of {self.group}")
        self.node_id = found.node_id  # type: ignore[union-attr]
        return self.stub(f"{found.host}:{found.port}")  # type: ignore[union-attr]

    def call(self, method: str, request, timeout_s: float = 30.0):
        """Call ``method`` on the coordinator; retriable coordinator errors find it again."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                response = getattr(self.find(), method)(request, timeout=RPC_TIMEOUT_S)
            except grpc.RpcError:  # the named coordinator just died: the metadata has not caught up yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
                continue
            code = ErrorCode(response.error.code) if hasattr(response, "error") else ErrorCode.NONE
            if code not in RETRIABLE or time.monotonic() > deadline:
                return response
            time.sleep(0.1)

    # ---- the protocol ---------------------------------------------------------------------------

    def join(self, member_id: str = "", metadata: bytes = b"events") -> group_pb2.JoinGroupResponse:
        request = group_pb2.JoinGroupRequest(
            group_id=self.group,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=10_000,
            member_id=member_id,
            protocol_type="consumer",
            client_id="it",
            protocols=[group_pb2.JoinGroupProtocol(name="range", metadata=metadata)],
        )
        response = self.call("JoinGroup", request)
        if (
            response.error.code == ErrorCode.UNKNOWN_MEMBER_ID
        ):  # expired meanwhile: join as new, as a client does
            request.member_id = ""
            response = self.call("JoinGroup", request)
        if response.error.code == ErrorCode.MEMBER_ID_REQUIRED:
            request.member_id = response.member_id
            response = self.call("JoinGroup", request)
        assert response.error.code == ErrorCode.NONE, response
        return response

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None):
        request = group_pb2.SyncGroupRequest(
            group_id=self.group,
            generation_id=generation,
            member_id=member_id,
            assignments=[
                group_pb2.SyncGroupAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )
        return self.call("SyncGroup", request)

    def heartbeat(self, member_id: str, generation: int) -> ErrorCode:
        request = group_pb2.HeartbeatRequest(
            group_id=self.group, generation_id=generation, member_id=member_id
        )
        return ErrorCode(self.call("Heartbeat", request).error.code)

    def commit(self, offsets: dict[int, int], topic: str, member_id: str = "", generation: int = -1):
        request = group_pb2.OffsetCommitRequest(
            group_id=self.group,
            generation_id=generation,
            member_id=member_id,
            topics=[
                group_pb2.OffsetCommitTopic(
                    name=topic,
                    partitions=[
                        group_pb2.OffsetCommitPartition(
                            partition=p, committed_offset=o, committed_leader_epoch=-1
                        )
                        for p, o in offsets.items()
                    ],
                )
            ],
        )
        return self.call("OffsetCommit", request)

    def fetch_offsets(self) -> dict[tuple[str, int], int]:
        response = self.call("OffsetFetch", group_pb2.OffsetFetchRequest(group_id=self.group))
        assert response.error.code == ErrorCode.NONE, response
        return {(t.name, p.partition): p.committed_offset for t in response.topics for p in t.partitions}

    def leave(self, member_id: str) -> ErrorCode:
        request = group_pb2.LeaveGroupRequest(
            group_id=self.group, members=[group_pb2.MemberIdentity(member_id=member_id)]
        )
        return ErrorCode(self.call("LeaveGroup", request).error.code)

    def state(self) -> str:
        """The group's state as DescribeGroups shows it ("Dead" once it is gone)."""
        described = self.call("DescribeGroups", group_pb2.DescribeGroupsRequest(groups=[self.group]))
        return described.groups[0].group_state
