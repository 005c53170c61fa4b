"""The consumer's group state machine (pykraft.consumer_coordinator), driven by hand: rebalance-state
tables with ids, no I/O.

Rules (Kafka's AbstractCoordinator / ConsumerCoordinator): UNJOINED -> PREPARING_REBALANCE (JoinGroup
sent) -> COMPLETING_REBALANCE (SyncGroup sent) -> STABLE; MEMBER_ID_REQUIRED gives the id to rejoin
with (KIP-394); UNKNOWN_MEMBER_ID forgets the member id, ILLEGAL_GENERATION only the generation, and
both lose the owned partitions; REBALANCE_IN_PROGRESS asks for a rejoin; coordinator errors find the
coordinator again; FENCED_INSTANCE_ID is fatal. EAGER revokes everything before joining, COOPERATIVE
(only cooperative assignors) keeps what it owns and rejoins after a revocation or NEED_REJOIN.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from proto.errors import ErrorCode
from pykraft.assignors import NEED_REJOIN, Assignment, Subscription
from pykraft.consumer_coordinator import (
    CommitFailedError,
    ConsumerCoordinator,
    Generation,
    GroupConfig,
    JoinResult,
    MemberState,
    Next,
    RebalanceProtocol,
)
from pykraft.types import TopicPartition

T0, T1, T2, T3 = (TopicPartition("t", p) for p in range(4))
COUNTS = {"t": 4}


def coordinator(**config) -> ConsumerCoordinator:
    core = ConsumerCoordinator(
        GroupConfig("g", session_timeout_ms=1000, heartbeat_interval_ms=100, **config), 0
    )
    core.subscribe(["t"])
    core.on_coordinator_found(101, "127.0.0.1:1", 0)
    return core


def join_ok(
    core: ConsumerCoordinator, generation: int, member: str = "m1", leader: str = "m1", now_ms: int = 0, **kw
) -> None:
    core.prepare_join()
    request = core.join_request()
    members = {member: request.protocols[0][1]} if leader == member else {}
    result = JoinResult(
        ErrorCode.NONE, "", generation, member, leader, request.protocols[0][0], members=members, **kw
    )
    assert core.on_join_response(result, now_ms).next is Next.CONTINUE


def stable(core: ConsumerCoordinator, generation: int, partitions=(T0, T1), error: int = 0, now_ms: int = 0):
    join_ok(core, generation, now_ms=now_ms)
    step, change = core.on_sync_response(
        ErrorCode.NONE, "", Assignment(tuple(partitions), error), COUNTS, now_ms
    )
    assert step.next is Next.CONTINUE and core.state is MemberState.STABLE
    return change


def test_first_join_member_id_required_then_leader_assigns() -> None:
    """KIP-394: the first JoinGroup has no member id; MEMBER_ID_REQUIRED gives one; the leader assigns."""
    core = coordinator()
    assert core.rejoin_needed and core.state is MemberState.UNJOINED
    assert core.prepare_join() is not None and core.prepare_join() is None, "prepared once per rebalance"
    first = core.join_request()
    assert first.member_id == "" and [name for name, _ in first.protocols] == ["range", "cooperative-sticky"]
    assert core.state is MemberState.PREPARING_REBALANCE
    step = core.on_join_response(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id="m1"), 0)
    assert (step.next, core.state, core.generation.member_id) == (Next.RETRY_NOW, MemberState.UNJOINED, "m1")
    assert core.join_request().member_id == "m1"
    sub = Subscription(("t",))
    result = JoinResult(ErrorCode.NONE, "", 1, "m1", "m1", "range", members={"m1": sub, "m2": sub})
    assert core.on_join_response(result, 0).next is Next.CONTINUE
    assert core.is_leader() and core.leader_topics() == {"t"}
    assignments = core.compute_assignment(COUNTS)
    assert assignments["m1"].partitions == (T0, T1) and assignments["m2"].partitions == (T2, T3)
    step, change = core.on_sync_response(ErrorCode.NONE, "", assignments["m1"], COUNTS, 5)
    assert (step.next, change.added, core.rejoin_needed) == (Next.CONTINUE, (T0, T1), False)
    assert core.generation == Generation(1, "m1", "range")


@pytest.mark.parametrize(
    ("code", "next_step", "member_id", "generation", "lost", "coordinator_known"),
    [
        (ErrorCode.UNKNOWN_MEMBER_ID, Next.RETRY_NOW, "", -1, True, True),
        (ErrorCode.ILLEGAL_GENERATION, Next.RETRY_NOW, "m1", -1, True, True),
        (ErrorCode.REBALANCE_IN_PROGRESS, Next.RETRY_NOW, "m1", 1, False, True),
        (ErrorCode.NOT_COORDINATOR, Next.FIND_COORDINATOR, "m1", 1, False, False),
        (ErrorCode.COORDINATOR_NOT_AVAILABLE, Next.FIND_COORDINATOR, "m1", 1, False, False),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, Next.RETRY_BACKOFF, "m1", 1, False, True),
        (ErrorCode.FENCED_INSTANCE_ID, Next.FATAL, "m1", 1, False, True),
        (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, Next.FATAL, "m1", 1, False, True),
    ],
    ids=lambda v: v.name if hasattr(v, "name") else str(v),
)
def test_sync_group_errors(code, next_step, member_id, generation, lost, coordinator_known) -> None:
    """A rebalance that fails at SyncGroup (COOPERATIVE, so owned partitions are at stake)."""
    core = coordinator(assignors=("cooperative-sticky",))
    stable(core, 1)
    core.request_rejoin("test")
    join_ok(core, 2)
    core.generation = Generation(1, "m1", "cooperative-sticky")  # the answer is about generation 1
    step, _ = core.on_sync_response(code, "refused", None, COUNTS, 0)
    assert step.next is next_step
    assert core.state is MemberState.UNJOINED and core.rejoin_needed
    assert (core.generation.member_id, core.generation.generation_id) == (member_id, generation)
    assert (core.coordinator is not None) == coordinator_known
    change = core.prepare_join()  # None: this rebalance was prepared already (no second revocation)
    assert bool(change and change.lost) == lost, change
    if next_step is Next.FATAL:
        assert step.error is not None and step.error.code == code and core.fatal is step.error


@pytest.mark.parametrize(
    ("protocol", "assignors", "revoked_before_join", "owned_in_subscription"),
    [
        (RebalanceProtocol.EAGER, ("range", "cooperative-sticky"), (T0, T1), ()),
        (RebalanceProtocol.EAGER, ("roundrobin",), (T0, T1), ()),
        (RebalanceProtocol.COOPERATIVE, ("cooperative-sticky",), (), (T0, T1)),
    ],
    ids=["default-is-eager", "roundrobin", "cooperative"],
)
def test_rebalance_protocol(protocol, assignors, revoked_before_join, owned_in_subscription) -> None:
    """The protocol is COOPERATIVE only when every assignor supports it; EAGER revokes all before
    joining and reports nothing owned; COOPERATIVE keeps and reports its partitions."""
    core = coordinator(assignors=assignors)
    assert core.protocol is protocol
    stable(core, 1)
    core.on_heartbeat_response(core.on_heartbeat_sent(10), ErrorCode.REBALANCE_IN_PROGRESS, "", 10)
    assert core.rejoin_needed and core.commit_generation() == core.generation, "may still commit"
    change = core.prepare_join()
    assert change.revoked == revoked_before_join and change.lost == ()
    subscription = core.join_request().protocols[0][1]
    assert subscription.owned_partitions == owned_in_subscription
    assert subscription.generation_id == (1 if owned_in_subscription else -1)


@pytest.mark.parametrize(
    ("old", "new", "error", "added", "revoked", "rejoin"),
    [
        ((T0, T1, T2, T3), (T0, T1), 0, (), (T2, T3), True),
        ((T0, T1), (T0, T1, T2), 0, (T2,), (), False),
        ((T0, T1), (T0, T1), NEED_REJOIN, (), (), True),
    ],
    ids=["revocation-rejoins", "additions-only", "need-rejoin"],
)
def test_cooperative_assignment_changes(old, new, error, added, revoked, rejoin) -> None:
    """KIP-429: a member that revokes rejoins at once so the partitions reach their new owner."""
    core = coordinator(assignors=("cooperative-sticky",))
    stable(core, 1, old)
    core.request_rejoin("test")
    join_ok(core, 2)
    _, change = core.on_sync_response(ErrorCode.NONE, "", Assignment(new, error), COUNTS, 0)
    assert (change.added, change.revoked, core.rejoin_needed) == (added, revoked, rejoin)
    assert core.owned == frozenset(new)


@pytest.mark.parametrize(
    ("code", "rejoin", "generation", "coordinator_known"),
    [
        (ErrorCode.NONE, False, 1, True),
        (ErrorCode.REBALANCE_IN_PROGRESS, True, 1, True),
        (ErrorCode.ILLEGAL_GENERATION, True, -1, True),
        (ErrorCode.UNKNOWN_MEMBER_ID, True, -1, True),
        (ErrorCode.NOT_COORDINATOR, False, 1, False),
        (ErrorCode.NETWORK_EXCEPTION, False, 1, False),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, False, 1, True),
    ],
    ids=lambda v: v.name if hasattr(v, "name") else str(v),
)
def test_heartbeat_answers(code, rejoin, generation, coordinator_known) -> None:
    core = coordinator()
    stable(core, 1)
    assert core.heartbeat_due(0) and not core.heartbeat_due(-1)
    sent = core.on_heartbeat_sent(0)
    assert not core.heartbeat_due(500), "one heartbeat in flight"
    core.on_heartbeat_response(sent, code, "", 50)
    assert (core.rejoin_needed, core.generation.generation_id, core.coordinator is not None) == (
        rejoin, generation, coordinator_known,
    )  # fmt: skip


def test_lost_coordinator_is_looked_up_without_rejoining() -> None:
    """Kafka: a stable member whose coordinator went away finds the next one and keeps heartbeating
    in its generation (the new coordinator loaded the group); no rebalance of its own."""
    core = coordinator(retry_backoff_ms=50)
    stable(core, 1)
    core.on_heartbeat_response(core.on_heartbeat_sent(0), ErrorCode.NOT_COORDINATOR, "", 10)
    assert not core.rejoin_needed and core.coordinator is None
    assert core.coordinator_lookup_due(100) and not core.coordinator_lookup_due(120)
    core.on_coordinator_found(102, "127.0.0.1:2", 130)
    assert core.heartbeat_due(200) and core.on_heartbeat_sent(200) == Generation(1, "m1", "range")


def test_heartbeat_answer_about_an_old_generation_is_ignored() -> None:
    core = coordinator()
    stable(core, 1)
    old = core.on_heartbeat_sent(0)
    core.request_rejoin("test")
    join_ok(core, 2)
    core.on_sync_response(ErrorCode.NONE, "", Assignment((T0,)), COUNTS, 0)
    core.on_heartbeat_response(old, ErrorCode.ILLEGAL_GENERATION, "", 10)
    assert core.generation.generation_id == 2 and core.state is MemberState.STABLE


@pytest.mark.parametrize(
    ("instance_id", "leave_sent"), [(None, "m1"), ("i-1", None)], ids=["dynamic-leaves", "static-stays"]
)
def test_poll_timeout_leaves_the_group(instance_id, leave_sent) -> None:
    """max.poll.interval.ms: the member leaves (LeaveGroup only when dynamic, as Kafka) and its
    partitions are lost; the next poll rejoins."""
    core = coordinator(group_instance_id=instance_id, max_poll_interval_ms=1000)
    stable(core, 1, now_ms=0)
    core.on_poll(100)
    assert not core.poll_timeout_expired(1100) and core.poll_timeout_expired(1101)
    assert core.leave_group("poll timeout") == leave_sent
    assert core.generation == Generation() and core.rejoin_needed
    assert core.prepare_join().lost == (T0, T1)
    assert isinstance(core.commit_generation(), CommitFailedError)


def test_session_expiry_without_heartbeat_answers() -> None:
    core = coordinator()
    stable(core, 1, now_ms=0)
    assert not core.session_expired(1000) and core.session_expired(1001)
    core.on_heartbeat_response(core.on_heartbeat_sent(900), ErrorCode.NONE, "", 900)
    assert not core.session_expired(1800)


@pytest.mark.parametrize(
    ("code", "raised", "generation_after", "rejoin"),
    [
        (ErrorCode.ILLEGAL_GENERATION, True, -1, True),
        (ErrorCode.UNKNOWN_MEMBER_ID, True, -1, True),
        (ErrorCode.REBALANCE_IN_PROGRESS, True, 1, True),
        (ErrorCode.NOT_COORDINATOR, False, 1, False),
        (ErrorCode.OFFSET_METADATA_TOO_LARGE, False, 1, False),
    ],
    ids=lambda v: v.name if hasattr(v, "name") else str(v),
)
def test_commit_errors(code, raised, generation_after, rejoin) -> None:
    """Commits are fenced by generation: the fencing errors make a CommitFailedError and a rejoin."""
    core = coordinator()
    stable(core, 1)
    sent = core.commit_generation()
    assert sent == Generation(1, "m1", "range")
    failed = core.on_commit_error(sent, code, "no")
    assert (failed is not None, core.generation.generation_id, core.rejoin_needed) == (
        raised, generation_after, rejoin,
    )  # fmt: skip
    if failed is not None:
        assert failed.code == code and "rejoins on the next poll()" in str(failed)


def test_commit_while_joining_is_refused_and_standalone_without_subscription() -> None:
    core = coordinator()
    core.prepare_join()
    core.join_request()
    refused = core.commit_generation()
    assert isinstance(refused, CommitFailedError) and refused.code == ErrorCode.REBALANCE_IN_PROGRESS
    plain = ConsumerCoordinator(GroupConfig("g"), 0)
    assert plain.commit_generation() == Generation(), "assign() consumers commit with no generation"


def test_pattern_and_partition_count_changes_rejoin() -> None:
    """A regex subscription follows new topics (internal __ topics excluded); a partition count that
    changed since the assignment rebalances."""
    core = ConsumerCoordinator(GroupConfig("g"), 0)
    core.subscribe_pattern(re.compile(r"t.*"), ["t", "u", "__consumer_offsets", "t2"])
    assert core.subscription == {"t", "t2"}
    join_ok(core, 1)
    core.on_sync_response(ErrorCode.NONE, "", Assignment((T0,)), {"t": 4, "t2": 1}, 0)
    assert not core.rejoin_needed
    assert not core.match_pattern(["t", "t2", "u"])
    core.on_partition_counts({"t": 4, "t2": 1})
    assert not core.rejoin_needed
    core.on_partition_counts({"t": 6, "t2": 1})
    assert core.rejoin_needed
    core2 = coordinator()
    stable(core2, 1)
    assert core2.match_pattern(["x"]) is False, "no pattern: names do not matter"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"heartbeat_interval_ms": 3000, "session_timeout_ms": 3000}, "heartbeat_interval_ms"),
        ({"assignors": ("sticky",)}, "unknown partition assignor"),
        ({"assignors": ()}, "at least one assignor"),
    ],
    ids=["heartbeat-not-below-session", "unknown-assignor", "no-assignor"],
)
def test_invalid_config(config, message) -> None:
    with pytest.raises(ValueError, match=message):
        ConsumerCoordinator(GroupConfig("g", **config), 0)


@pytest.mark.parametrize("module", ["pykraft/consumer_coordinator.py", "pykraft/assignors.py"])
def test_cores_do_no_io(module: str) -> None:
    """STYLE.md: sans-I/O cores import no asyncio/grpc/threading/time/os/socket and no protobuf."""
    tree = ast.parse((Path(__file__).resolve().parents[3] / module).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    forbidden = {"asyncio", "grpc", "threading", "time", "os", "socket", "random"}
    assert not imported & forbidden and not any(m.endswith("_pb2") or m == "grpc" for m in imported)


def test_resubscribing_keeps_the_generation_until_the_rebalance() -> None:
    """Kafka: subscribe() to other topics does not drop the assignment at once; the rebalance it
    requests revokes the partitions of the dropped topics (cooperative: only those)."""
    core = coordinator(assignors=("cooperative-sticky",))
    stable(core, 1, (T0, T1))
    core.subscribe(["u"])
    assert core.rejoin_needed and core.state is MemberState.STABLE
    core.on_heartbeat_response(core.on_heartbeat_sent(0), ErrorCode.NOT_COORDINATOR, "", 5)
    core.invariants()
    assert core.prepare_join().revoked == (T0, T1)
    assert core.join_request().protocols[0][1].topics == ("u",)


def test_heartbeats_from_the_join_answer_while_the_application_processes_records() -> None:
    """KIP-62 (review F2): a cooperative member whose JoinGroup was answered heartbeats in its new
    generation while COMPLETING_REBALANCE, so processing records for longer than session.timeout.ms
    (within max.poll.interval.ms) does not get it expired; REBALANCE_IN_PROGRESS before STABLE is
    ignored (the SyncGroup answer tells), as Kafka's HeartbeatResponseHandler does."""
    core = coordinator(assignors=("cooperative-sticky",), max_poll_interval_ms=300_000)
    stable(core, 1, now_ms=0)
    core.request_rejoin("follow-up rebalance")
    join_ok(core, 2, now_ms=1000)
    assert core.state is MemberState.COMPLETING_REBALANCE
    assert not core.heartbeat_due(1099) and core.heartbeat_due(1100), (
        "the heartbeat timer starts at the answer"
    )
    sent = []
    for now in range(1100, 21_000, 10):  # 20 s of processing; session.timeout.ms = 1 s
        assert not core.session_expired(now) and not core.poll_timeout_expired(now)
        if core.heartbeat_due(now):
            sent.append(core.on_heartbeat_sent(now))
            core.on_heartbeat_response(sent[-1], ErrorCode.NONE, "", now + 5)
    assert len(sent) >= 190 and set(sent) == {Generation(2, "m1", "cooperative-sticky")}
    core.on_heartbeat_response(core.on_heartbeat_sent(21_000), ErrorCode.REBALANCE_IN_PROGRESS, "", 21_005)
    core.on_sync_response(ErrorCode.NONE, "", Assignment((T0, T1)), COUNTS, 21_010)
    assert core.state is MemberState.STABLE and not core.rejoin_needed
    core.on_heartbeat_response(core.on_heartbeat_sent(21_010), ErrorCode.REBALANCE_IN_PROGRESS, "", 21_015)
    assert core.rejoin_needed, "once STABLE, REBALANCE_IN_PROGRESS rejoins"


def test_a_member_waiting_for_its_join_answer_neither_heartbeats_nor_times_out() -> None:
    """Review F3 (Kafka: the heartbeat thread is disabled until the JoinGroup answer): an EAGER member
    whose JoinGroup the coordinator holds longer than max.poll.interval.ms does not leave the group;
    its poll timer starts again at the JoinGroup answer."""
    core = coordinator(max_poll_interval_ms=1000)
    stable(core, 1, now_ms=0)
    core.request_rejoin("rebalance")
    assert core.prepare_join().revoked == (T0, T1)
    core.join_request()
    assert core.state is MemberState.PREPARING_REBALANCE
    for now in (1001, 5000, 60_000):
        assert not core.poll_timeout_expired(now) and not core.heartbeat_due(now)
        assert not core.session_expired(now)
    result = JoinResult(ErrorCode.NONE, "", 2, "m1", "m2", "range")
    assert core.on_join_response(result, 60_000).next is Next.CONTINUE
    assert not core.poll_timeout_expired(61_000) and core.poll_timeout_expired(61_001)
