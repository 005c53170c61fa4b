"""A virtual-clock harness around the sans-I/O ``GroupCoordinator`` for the group unit tests: it
numbers requests, collects their (possibly late) answers, and completes appends on demand."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from broker.group.coordinator import Append, Effects, GroupConfig, GroupCoordinator
from broker.group.metadata import GroupState, partition_for
from broker.group.requests import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from proto.errors import OK, ApiError, ErrorCode

PARTITIONS = 4
GROUP = "g"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
CONFIG = GroupConfig(
    min_session_timeout_ms=1_000, max_session_timeout_ms=60_000, initial_rebalance_delay_ms=100,
    offset_metadata_max_bytes=16,
)  # fmt: skip


def protocols(*names: str, metadata: bytes = b"sub") -> tuple[tuple[str, bytes], ...]:
    return tuple((name, metadata) for name in names or ("range",))


@dataclass
class Harness:
    config: GroupConfig = CONFIG
    now_ms: int = 1_000
    auto_append: bool = True
    core: GroupCoordinator = field(init=False)
    answers: dict[int, object] = field(default_factory=dict)
    appended: list[Append] = field(default_factory=list)
    held: list[Append] = field(default_factory=list)
    _rid: int = 0

    def __post_init__(self) -> None:
        self.core = GroupCoordinator(self.config, random.Random(7))
        for p in range(PARTITIONS):
            self.core.on_election(p, PARTITIONS)
            self.core.complete_loading(p, self.now_ms)

    # ---- plumbing --------------------------------------------------------------------------------

    def apply(self, fx: Effects) -> None:
        for rid, response in fx.responses:
            assert rid not in self.answers, f"request {rid} answered twice"
            self.answers[rid] = response
        for append in fx.appends:
            self.appended.append(append)
            if self.auto_append:
                self.apply(self.core.complete_append(append.append_id, OK, self.now_ms))
            else:
                self.held.append(append)

    def finish_appends(self, code: ErrorCode = ErrorCode.NONE) -> None:
        held, self.held = self.held, []
        for append in held:
            self.apply(self.core.complete_append(append.append_id, ApiError(code, "injected"), self.now_ms))

    def next_rid(self) -> int:
        self._rid += 1
        return self._rid

    def advance(self, ms: int) -> None:
        """Move the clock, running every deadline that passes on the way (like the driver's timer)."""
        target = self.now_ms + ms
        while True:
            deadline = self.core.next_deadline_ms()
            if deadline is None or deadline > target:
                break
            self.now_ms = max(self.now_ms, deadline)
            self.apply(self.core.tick(self.now_ms))
        self.now_ms = target
        self.apply(self.core.tick(self.now_ms))

    def advance_until_answered(self, rids: list[int]) -> None:
        """Advance in steps of the initial delay (it extends while members arrive) until answered."""
        for _ in range(1 + REBALANCE_MS // self.config.initial_rebalance_delay_ms):
            if all(r in self.answers for r in rids):
                return
            self.advance(self.config.initial_rebalance_delay_ms)
        raise AssertionError(f"requests {[r for r in rids if r not in self.answers]} never answered")

    def state(self, group: str = GROUP) -> GroupState:
        g = self.core.group_manager.groups.get(group)
        return GroupState.DEAD if g is None else g.state

    # ---- requests ------------------------------------------------------------------------------

    def join(self, member_id: str = "", group: str = GROUP, instance_id: str | None = None,
             protos: tuple[tuple[str, bytes], ...] | None = None, session_ms: int = SESSION_MS,
             rebalance_ms: int = REBALANCE_MS, protocol_type: str = "consumer") -> int:  # fmt: skip
        rid = self.next_rid()
        request = JoinGroupRequest(
            group, session_ms, rebalance_ms, member_id, instance_id, protocol_type,
            protos if protos is not None else protocols(), client_id="c", client_host="/127.0.0.1",
        )  # fmt: skip
        self.apply(self.core.handle_join_group(rid, request, self.now_ms))
        return rid

    def join_new(self, **kwargs) -> str:
        """A dynamic member's two-step join (KIP-394); returns its member id (join parked or answered)."""
        first = self.answers[self.join(**kwargs)]
        assert isinstance(first, JoinGroupResponse) and first.error.code == ErrorCode.MEMBER_ID_REQUIRED, (
            first
        )
        self.last_rid = self.join(member_id=first.member_id, **kwargs)
        return first.member_id

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             group: str = GROUP, instance_id: str | None = None) -> int:  # fmt: skip
        rid = self.next_rid()
        request = SyncGroupRequest(group, generation, member_id, instance_id, "consumer", "",
                                   tuple((assignments or {}).items()))  # fmt: skip
        self.apply(self.core.handle_sync_group(rid, request, self.now_ms))
        return rid

    def heartbeat(self, member_id: str, generation: int, group: str = GROUP, instance_id: str | None = None):
        response, fx = self.core.handle_heartbeat(
            HeartbeatRequest(group, generation, member_id, instance_id), self.now_ms
        )
        self.apply(fx)
        return response.error.code

    def leave(self, member_id: str, instance_id: str | None = None, group: str = GROUP):
        response, fx = self.core.handle_leave_group(
            LeaveGroupRequest(group, (MemberIdentity(member_id, instance_id),)), self.now_ms
        )
        self.apply(fx)
        return response

    def commit(self, member_id: str, generation: int, offsets: dict[tuple[str, int], int], group: str = GROUP,
               metadata: str = "", instance_id: str | None = None) -> int:  # fmt: skip
        rid = self.next_rid()
        parts = tuple(OffsetCommitPartition(t, p, o, -1, metadata) for (t, p), o in offsets.items())
        request = OffsetCommitRequest(group, generation, member_id, instance_id, parts)
        self.apply(self.core.handle_offset_commit(rid, request, self.now_ms, self.now_ms))  # as the driver
        return rid

    # ---- whole flows ---------------------------------------------------------------------------

    def stable_group(self, count: int, group: str = GROUP) -> list[str]:
        """``count`` dynamic members joined, synced and Stable; returns the member ids (leader first)."""
        members, rids = [], []
        for _ in range(count):
            members.append(self.join_new(group=group))
            rids.append(self.last_rid)
        self.advance_until_answered(rids)
        joined = [self.answers[r] for r in rids]
        assert all(isinstance(j, JoinGroupResponse) and j.error.code == 0 for j in joined), joined
        generation = joined[0].generation_id  # type: ignore[union-attr]
        leader = joined[0].leader  # type: ignore[union-attr]
        sync_rids = {m: self.sync(m, generation, {x: x.encode() for x in members} if m == leader else None,
                                  group=group) for m in members}  # fmt: skip
        for m, rid in sync_rids.items():
            answer = self.answers[rid]
            assert isinstance(answer, SyncGroupResponse) and answer.error.code == 0, answer
            assert answer.assignment == m.encode()
        assert self.state(group) is GroupState.STABLE
        return [leader] + [m for m in members if m != leader]

    def generation(self, group: str = GROUP) -> int:
        return self.core.group_manager.groups[group].generation_id


def group_in_partition(partition: int) -> str:
    """A group id whose offsets partition is ``partition``."""
    return next(f"grp-{i}" for i in range(10_000) if partition_for(f"grp-{i}", PARTITIONS) == partition)
