"""An in-process fake GroupService (proto/group.proto) for the consumer's unit tests.

A small, thread-based version of Kafka's classic group coordinator, faithful where the consumer's
behaviour depends on it: MEMBER_ID_REQUIRED for a new dynamic member (KIP-394); a rebalance waits
for every known member to rejoin (up to ``join_timeout_s``, then drops the missing ones); the first
member to join leads; the protocol is the leader's most preferred one that every member supports;
SyncGroup answers followers once the leader sent the assignment; heartbeats answer
REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID; members expire after their session
timeout; a static member (KIP-345) rejoining with its instance id takes over its old place without a
rebalance; commits are fenced by generation (accepted while PreparingRebalance, as Kafka does).

Every broker of the ``FakeCluster`` serves it; only ``coordinator_id`` is the coordinator (others
answer NOT_COORDINATOR). Tests steer it with ``move_coordinator``, ``inject`` (errors for the next
calls of an API) and read ``groups`` / ``offsets`` / ``calls``.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from proto import common_pb2, group_pb2, group_pb2_grpc
from proto.errors import ErrorCode

NO_GENERATION = -1


def _error(code: int, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=code, message=message)


@dataclass
class FakeMember:
    member_id: str
    instance_id: str | None
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    last_seen: float
    joined: bool = False  # rejoined in the current rebalance
    assignment: bytes = b""


@dataclass
class FakeGroup:
    group_id: str
    state: str = "Empty"
    generation: int = 0
    protocol: str = ""
    leader: str = ""
    members: dict[str, FakeMember] = field(default_factory=dict)
    join_started: float = 0.0
    rebalances: int = 0

    def instance_owner(self, instance_id: str) -> FakeMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)


class FakeGroupCoordinator(group_pb2_grpc.GroupServiceServicer):
    """The shared state; ``servicer(node_id)`` is what each fake broker serves."""

    def __init__(
        self, coordinator_id: int, addresses: dict[int, tuple[str, int]], join_timeout_s: float = 3.0
    ):
        self.lock = threading.Condition()
        self.coordinator_id = coordinator_id
        self.addresses = addresses
        self.join_timeout_s = join_timeout_s
        self.groups: dict[str, FakeGroup] = {}
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.epochs: dict[tuple[str, str, int], int] = {}  # committed leader epochs
        self.injected: dict[str, list[int]] = {}
        self.calls: list[tuple[str, str]] = []  # (api, member id)
        self._ids = itertools.count(1)
        self._stopped = False
        self._reaper = threading.Thread(target=self._reap, daemon=True)
        self._reaper.start()

    def stop(self) -> None:
        with self.lock:
            self._stopped = True
            self.lock.notify_all()

    def move_coordinator(self, node_id: int) -> None:
        with self.lock:
            self.coordinator_id = node_id

    def inject(self, api: str, codes: list[int]) -> None:
        with self.lock:
            self.injected.setdefault(api, []).extend(codes)

    def group(self, group_id: str) -> FakeGroup:
        return self.groups.setdefault(group_id, FakeGroup(group_id))

    def assignment_of(self, group_id: str) -> dict[str, list[tuple[str, int]]]:
        with self.lock:
            g = self.groups[group_id]
            out = {}
            for m in g.members.values():
                a = group_pb2.ConsumerProtocolAssignment.FromString(m.assignment)
                out[m.member_id] = [(t.topic, p) for t in a.assigned_partitions for p in t.partitions]
            return out

    # ---- plumbing -------------------------------------------------------------------------------------

    def _gate(self, node_id: int, api: str, member_id: str = "") -> int:
        self.calls.append((api, member_id))
        queued = self.injected.get(api)
        if queued:
            return queued.pop(0)
        return ErrorCode.NONE if node_id == self.coordinator_id else ErrorCode.NOT_COORDINATOR

    def _reap(self) -> None:
        """Expire members whose session ran out; end join phases that waited too long."""
        with self.lock:
            while not self._stopped:
                now = time.monotonic()
                for g in self.groups.values():
                    expired = [
                        m for m in g.members.values()
                        if g.state in ("Stable", "CompletingRebalance")
                        and now - m.last_seen > m.session_timeout_ms / 1000
                    ]  # fmt: skip
                    for m in expired:
                        del g.members[m.member_id]
                    if expired:
                        self._prepare_rebalance(g)
                    if g.state == "PreparingRebalance" and now - g.join_started > self.join_timeout_s:
                        self._complete_join(g)
                self.lock.wait(0.05)

    def _prepare_rebalance(self, g: FakeGroup) -> None:
        if g.state == "PreparingRebalance":
            return
        if not g.members:
            g.state = "Empty"
            return
        g.state = "PreparingRebalance"
        g.join_started = time.monotonic()
        for m in g.members.values():
            m.joined = False
        self.lock.notify_all()

    def _complete_join(self, g: FakeGroup) -> None:
        for m in [m for m in g.members.values() if not m.joined]:
            del g.members[m.member_id]
        if not g.members:
            g.state, g.generation = "Empty", g.generation + 1
            self.lock.notify_all()
            return
        g.generation += 1
        g.rebalances += 1
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        everyone = [{name for name, _ in m.protocols} for m in g.members.values()]
        leader_prefs = [name for name, _ in g.members[g.leader].protocols]
        g.protocol = next(name for name in leader_prefs if all(name in s for s in everyone))
        g.state = "CompletingRebalance"
        for m in g.members.values():
            m.assignment = b""
        self.lock.notify_all()

    def _maybe_complete_join(self, g: FakeGroup) -> None:
        if g.state == "PreparingRebalance" and all(m.joined for m in g.members.values()):
            self._complete_join(g)

    # ---- the service ------------------------------------------------------------------------------------

    def servicer(self, node_id: int) -> group_pb2_grpc.GroupServiceServicer:
        return _NodeServicer(self, node_id)


class _NodeServicer(group_pb2_grpc.GroupServiceServicer):
    def __init__(self, fake: FakeGroupCoordinator, node_id: int) -> None:
        self.fake = fake
        self.node_id = node_id

    def FindCoordinator(self, request, context):
        f = self.fake
        with f.lock:
            f.calls.append(("FindCoordinator", ""))
            queued = f.injected.get("FindCoordinator")
            if queued:
                return group_pb2.FindCoordinatorResponse(error=_error(queued.pop(0)), node_id=-1)
            host, port = f.addresses[f.coordinator_id]
            return group_pb2.FindCoordinatorResponse(node_id=f.coordinator_id, host=host, port=port)

    def JoinGroup(self, request, context):
        f = self.fake
        with f.lock:
            code = f._gate(self.node_id, "JoinGroup", request.member_id)
            if code != ErrorCode.NONE:
                return group_pb2.JoinGroupResponse(error=_error(code), generation_id=NO_GENERATION)
            g = f.group(request.group_id)
            instance_id = request.group_instance_id if request.HasField("group_instance_id") else None
            protocols = [(p.name, p.metadata) for p in request.protocols]
            member = g.members.get(request.member_id)
            if member is None and instance_id is not None:
                return self._static_join(g, request, instance_id, protocols)
            if member is None:
                if request.member_id:
                    return group_pb2.JoinGroupResponse(
                        error=_error(ErrorCode.UNKNOWN_MEMBER_ID), generation_id=NO_GENERATION
                    )
                new_id = f"{request.client_id}-{next(f._ids)}"
                if not request.member_id:
                    g.members[new_id] = FakeMember(
                        new_id, None, protocols, request.session_timeout_ms, time.monotonic()
                    )
                    return group_pb2.JoinGroupResponse(
                        error=_error(ErrorCode.MEMBER_ID_REQUIRED),
                        member_id=new_id,
                        generation_id=NO_GENERATION,
                    )
            member.protocols, member.last_seen = protocols, time.monotonic()
            return self._join(g, member, context)

    def _static_join(self, g: FakeGroup, request, instance_id: str, protocols):
        f = self.fake
        old = g.instance_owner(instance_id)
        new_id = f"{instance_id}-{next(f._ids)}"
        member = FakeMember(new_id, instance_id, protocols, request.session_timeout_ms, time.monotonic())
        if old is not None and g.state == "Stable" and old.protocols == protocols:
            # KIP-345: the restarted static member takes its place; no rebalance.
            del g.members[old.member_id]
            member.assignment, member.joined = old.assignment, True
            g.members[new_id] = member
            if g.leader == old.member_id:
                g.leader = new_id
            return group_pb2.JoinGroupResponse(
                generation_id=g.generation, protocol_type="consumer", protocol_name=g.protocol,
                leader=g.leader, member_id=new_id, skip_assignment=g.leader == new_id,
            )  # fmt: skip
        if old is not None:
            del g.members[old.member_id]
        g.members[new_id] = member
        return self._join(g, member, None)

    def _join(self, g: FakeGroup, member: FakeMember, context):
        f = self.fake
        generation = g.generation
        f._prepare_rebalance(g)
        member.joined = True
        f._maybe_complete_join(g)
        deadline = time.monotonic() + f.join_timeout_s + 5
        while g.state == "PreparingRebalance" and time.monotonic() < deadline:
            f.lock.wait(0.05)
        if member.member_id not in g.members or g.state == "PreparingRebalance" or g.generation == generation:
            return group_pb2.JoinGroupResponse(error=_error(ErrorCode.UNKNOWN_MEMBER_ID), generation_id=-1)
        members = []
        if member.member_id == g.leader:
            members = [
                group_pb2.JoinGroupMember(
                    member_id=m.member_id, metadata=dict(m.protocols)[g.protocol],
                    **({"group_instance_id": m.instance_id} if m.instance_id else {}),
                )
                for m in g.members.values()
            ]  # fmt: skip
        return group_pb2.JoinGroupResponse(
            generation_id=g.generation, protocol_type="consumer", protocol_name=g.protocol,
            leader=g.leader, member_id=member.member_id, members=members,
        )  # fmt: skip

    def SyncGroup(self, request, context):
        f = self.fake
        with f.lock:
            code = f._gate(self.node_id, "SyncGroup", request.member_id)
            g = f.groups.get(request.group_id)
            if code == ErrorCode.NONE:
                code = self._member_check(g, request.member_id, request.generation_id)
            if code == ErrorCode.NONE and g.state == "PreparingRebalance":
                code = ErrorCode.REBALANCE_IN_PROGRESS
            if code != ErrorCode.NONE:
                return group_pb2.SyncGroupResponse(error=_error(code))
            g.members[request.member_id].last_seen = time.monotonic()
            if request.member_id == g.leader and g.state == "CompletingRebalance":
                for a in request.assignments:
                    if a.member_id in g.members:
                        g.members[a.member_id].assignment = a.assignment
                g.state = "Stable"
                f.lock.notify_all()
            generation = g.generation
            while g.state == "CompletingRebalance" and g.generation == generation:
                f.lock.wait(0.05)
            if g.state != "Stable" or g.generation != generation or request.member_id not in g.members:
                return group_pb2.SyncGroupResponse(error=_error(ErrorCode.REBALANCE_IN_PROGRESS))
            return group_pb2.SyncGroupResponse(
                protocol_type="consumer", protocol_name=g.protocol,
                assignment=g.members[request.member_id].assignment,
            )  # fmt: skip

    @staticmethod
    def _member_check(g: FakeGroup | None, member_id: str, generation: int) -> int:
        if g is None or member_id not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def Heartbeat(self, request, context):
        f = self.fake
        with f.lock:
            code = f._gate(self.node_id, "Heartbeat", request.member_id)
            g = f.groups.get(request.group_id)
            if code == ErrorCode.NONE:
                code = self._member_check(g, request.member_id, request.generation_id)
            if code == ErrorCode.NONE:
                g.members[request.member_id].last_seen = time.monotonic()
                if g.state == "PreparingRebalance":
                    code = ErrorCode.REBALANCE_IN_PROGRESS
            return group_pb2.HeartbeatResponse(error=_error(code))

    def LeaveGroup(self, request, context):
        f = self.fake
        with f.lock:
            code = f._gate(
                self.node_id, "LeaveGroup", request.members[0].member_id if request.members else ""
            )
            if code != ErrorCode.NONE:
                return group_pb2.LeaveGroupResponse(error=_error(code))
            g = f.group(request.group_id)
            answers = []
            for m in request.members:
                known = m.member_id in g.members
                if known:
                    del g.members[m.member_id]
                answers.append(
                    group_pb2.LeaveGroupMemberResponse(
                        member_id=m.member_id,
                        error=_error(ErrorCode.NONE if known else ErrorCode.UNKNOWN_MEMBER_ID),
                    )
                )
            if g.state != "PreparingRebalance":
                g.state = "Stable" if g.members else g.state
                f._prepare_rebalance(g)
            else:
                f._maybe_complete_join(g)
            return group_pb2.LeaveGroupResponse(members=answers)

    def OffsetCommit(self, request, context):
        f = self.fake
        with f.lock:
            code = f._gate(self.node_id, "OffsetCommit", request.member_id)
            g = f.group(request.group_id)
            if code == ErrorCode.NONE:
                if request.generation_id == NO_GENERATION and not request.member_id:
                    code = ErrorCode.NONE if not g.members else ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    code = self._member_check(g, request.member_id, request.generation_id)
                    if code == ErrorCode.NONE and g.state == "CompletingRebalance":
                        code = ErrorCode.REBALANCE_IN_PROGRESS
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                return group_pb2.OffsetCommitResponse(error=_error(code))
            topics = []
            for t in request.topics:
                parts = []
                for p in t.partitions:
                    if code == ErrorCode.NONE:
                        f.offsets[(request.group_id, t.name, p.partition)] = p.committed_offset
                        f.epochs[(request.group_id, t.name, p.partition)] = p.committed_leader_epoch
                    parts.append(
                        group_pb2.OffsetCommitPartitionResponse(partition=p.partition, error=_error(code))
                    )
                topics.append(group_pb2.OffsetCommitTopicResponse(name=t.name, partitions=parts))
            return group_pb2.OffsetCommitResponse(topics=topics)

    def OffsetFetch(self, request, context):
        f = self.fake
        with f.lock:
            code = f._gate(self.node_id, "OffsetFetch")
            if code != ErrorCode.NONE:
                return group_pb2.OffsetFetchResponse(error=_error(code))
            topics = []
            for t in request.topics:
                parts = [
                    group_pb2.OffsetFetchPartitionResponse(
                        partition=p, committed_offset=f.offsets.get((request.group_id, t.name, p), -1),
                        committed_leader_epoch=f.epochs.get((request.group_id, t.name, p), -1),
                    )
                    for p in t.partitions
                ]  # fmt: skip
                topics.append(group_pb2.OffsetFetchTopicResponse(name=t.name, partitions=parts))
            return group_pb2.OffsetFetchResponse(topics=topics)
