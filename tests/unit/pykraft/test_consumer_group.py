"""pykraft.Consumer in a consumer group, against the fake GroupService (tests/unit/pykraft/fake_group.py).

Rules under test (Kafka's consumer group client): subscribe -> FindCoordinator, JoinGroup
(MEMBER_ID_REQUIRED first, KIP-394), the leader assigns, SyncGroup; positions start at the committed
offsets, else auto_offset_reset ("none" -> NoOffsetForPartitionError); commit() commits the consumed
positions and is fenced by generation (CommitFailedError, then rejoin); auto-commit commits what the
previous poll returned; members share partitions and take over those of a member that leaves, dies
(session timeout) or stops polling (max.poll.interval.ms); static members keep their partitions
across a restart without a rebalance (KIP-345); cooperative-sticky revokes only what moves (KIP-429);
the coordinator is found again after NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from proto.errors import ErrorCode
from pykraft.consumer import CommitFailedError, Consumer, NoOffsetForPartitionError
from pykraft.consumer_coordinator import MemberState
from pykraft.producer import Producer
from pykraft.types import ConsumerRecord, TopicPartition
from tests.unit.pykraft.fake_brokers import FakeCluster

TOPIC = "orders"
PARTITIONS = 4
GROUP = "billing"
DEADLINE_S = 15.0
FAST = {"session_timeout_ms": 1500, "heartbeat_interval_ms": 100, "retry_backoff_ms": 50}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    fake.group.join_timeout_s = 1.0
    fake.create_topic(TOPIC, PARTITIONS)
    try:
        yield fake
    finally:
        fake.stop()


def produce(
    cluster: FakeCluster, per_partition: int, topic: str = TOPIC, partitions: int = PARTITIONS
) -> None:
    with Producer(cluster.bootstrap, linger_ms=5) as producer:
        for i in range(per_partition * partitions):
            producer.send(topic, b"%d" % i, partition=i % partitions)
        producer.flush(10)


def tps(*partitions: int, topic: str = TOPIC) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in partitions}


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def poll_until(consumer: Consumer, condition: Callable[[list[ConsumerRecord]], bool], what: str) -> list:
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + DEADLINE_S
    while not condition(records):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; got {len(records)} records")
        records += consumer.poll(100)
    return records


class Member:
    """A consumer polling in its own thread (JoinGroup blocks until the whole group rejoins)."""

    def __init__(self, cluster: FakeCluster, **config) -> None:
        self.consumer = Consumer(
            cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", **{**FAST, **config}
        )
        self.records: list[ConsumerRecord] = []
        self.assigned: list[list[TopicPartition]] = []
        self.revoked: list[list[TopicPartition]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._paused = threading.Event()
        self.consumer.subscribe([TOPIC], on_assign=self.assigned.append, on_revoke=self.revoked.append)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._paused.is_set():
                    time.sleep(0.02)
                    continue
                self.records += self.consumer.poll(100)
        except BaseException as exc:  # surfaced by the test through .error
            self.error = exc

    def assignment(self) -> set[TopicPartition]:
        return set(self.consumer.assignment())

    def pause_polling(self) -> None:
        self._paused.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_S)
        self.consumer.close()

    def kill(self) -> None:
        """Stop without leaving: the coordinator only notices through the session timeout."""
        self._stop.set()
        self._thread.join(DEADLINE_S)
        group = self.consumer._group
        group.close()  # heartbeats stop
        self.consumer._connections.close()
        self.consumer._closed = True


def owned_once(members: list[Member]) -> bool:
    owned = [tp for m in members for tp in m.assignment()]
    return len(owned) == len(set(owned)) and set(owned) == tps(*range(PARTITIONS))


def test_single_member_reads_everything_and_commits(cluster: FakeCluster) -> None:
    """A lone member gets every partition, starts at auto_offset_reset without committed offsets,
    and commit() stores the consumed positions (what committed() returns)."""
    produce(cluster, 3)
    with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", **FAST) as consumer:
        assigned: list = []
        consumer.subscribe([TOPIC], on_assign=assigned.append)
        records = poll_until(consumer, lambda r: len(r) >= 12, "12 records")
        assert consumer.assignment() == tps(0, 1, 2, 3)
        assert sorted(assigned[0], key=lambda tp: tp.partition) == sorted(
            tps(0, 1, 2, 3), key=lambda tp: tp.partition
        )
        assert len(records) == 12
        consumer.commit()
        assert consumer.committed(tps(0, 1, 2, 3)) == dict.fromkeys(tps(0, 1, 2, 3), 3)
        assert consumer.generation_id() >= 1 and consumer.member_id()
    joins = [c for c in cluster.group.calls if c[0] == "JoinGroup"]
    assert joins[0] == ("JoinGroup", ""), "KIP-394: the first join has no member id"
    assert ("LeaveGroup", joins[1][1]) in cluster.group.calls, "close() leaves the group"


def test_positions_restart_from_committed_offsets(cluster: FakeCluster) -> None:
    """A new member of the group starts where the group committed, not at auto_offset_reset."""
    produce(cluster, 5)
    for tp in tps(0, 1, 2, 3):
        cluster.group.offsets[(GROUP, TOPIC, tp.partition)] = 2 + tp.partition % 2
    with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.subscribe([TOPIC])
        records = poll_until(consumer, lambda r: len(r) >= 20 - 10, "the uncommitted records")
    firsts = {p: min(r.offset for r in records if r.partition == p) for p in range(PARTITIONS)}
    assert firsts == {0: 2, 1: 3, 2: 2, 3: 3}
    assert len(records) == 10


def test_auto_offset_reset_none_without_committed_offset_is_a_named_error(cluster: FakeCluster) -> None:
    """auto_offset_reset="none": a partition with no committed offset raises NoOffsetForPartitionError
    naming it; partitions with one are read."""
    produce(cluster, 1)
    cluster.group.offsets[(GROUP, TOPIC, 0)] = 0
    with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="none", **FAST) as consumer:
        consumer.subscribe([TOPIC])
        with pytest.raises(
            NoOffsetForPartitionError, match=r"orders-1, orders-2, orders-3.*auto_offset_reset='none'"
        ):
            poll_until(consumer, lambda r: False, "an error")


def test_auto_commit_commits_what_the_previous_poll_returned(cluster: FakeCluster) -> None:
    """Kafka's auto-commit: at the start of a poll, the positions after the records already returned
    (records fetched ahead but not returned are not committed)."""
    produce(cluster, 10, partitions=1)
    with Consumer(
        cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", max_poll_records=3,
        auto_commit_interval_ms=0, **FAST,
    ) as consumer:  # fmt: skip
        consumer.subscribe([TOPIC])
        first = poll_until(consumer, lambda r: len(r) >= 3, "a first batch")
        assert [r.offset for r in first] == [0, 1, 2]
        assert cluster.group.offsets.get((GROUP, TOPIC, 0)) in (None, 0)
        second = consumer.poll(1000)  # commits 3 (asynchronously) before returning 3..5
        assert [r.offset for r in second] == [3, 4, 5]
        wait_for(lambda: cluster.group.offsets.get((GROUP, TOPIC, 0)) == 3, "the auto-commit of offset 3")
    assert cluster.group.offsets[(GROUP, TOPIC, 0)] == 6, "close() commits the consumed position"


def test_commit_fenced_by_generation_raises_and_rejoins(cluster: FakeCluster) -> None:
    """A commit refused with ILLEGAL_GENERATION raises CommitFailedError, and the member rejoins."""
    produce(cluster, 1)
    with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
                  **FAST) as consumer:  # fmt: skip
        consumer.subscribe([TOPIC])
        poll_until(consumer, lambda r: len(r) >= 4, "4 records")
        generation = consumer.generation_id()
        cluster.group.inject("OffsetCommit", [ErrorCode.ILLEGAL_GENERATION])
        with pytest.raises(CommitFailedError, match="ILLEGAL_GENERATION"):
            consumer.commit()
        # The partitions were lost with the generation: the member rejoins and, nothing having been
        # committed, reads them again from auto_offset_reset (at-least-once).
        again = poll_until(consumer, lambda r: len(r) >= 4, "the records again after the rejoin")
        assert consumer.generation_id() > generation
        assert sorted(r.offset for r in again) == [0, 0, 0, 0]
        consumer.commit()
        assert consumer.committed(tps(0)) == {TopicPartition(TOPIC, 0): 1}


@pytest.mark.parametrize(
    ("api", "codes"),
    [
        ("FindCoordinator", [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 3),
        ("JoinGroup", [ErrorCode.NOT_COORDINATOR]),
        ("JoinGroup", [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 2),
        ("SyncGroup", [ErrorCode.NOT_COORDINATOR]),
        ("OffsetFetch", [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR]),
    ],
    ids=[
        "find-not-available",
        "join-not-coordinator",
        "join-loading",
        "sync-not-coordinator",
        "fetch-loading",
    ],
)
def test_coordinator_errors_are_retried(cluster: FakeCluster, api: str, codes: list[int]) -> None:
    """Retriable coordinator errors: find the coordinator again / back off, then succeed."""
    produce(cluster, 1)
    cluster.group.offsets[(GROUP, TOPIC, 2)] = 1
    cluster.group.inject(api, codes)
    with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.subscribe([TOPIC])
        records = poll_until(consumer, lambda r: len(r) >= 3, "3 records")
    assert sorted(r.partition for r in records) == [0, 1, 3]
    assert not cluster.group.injected[api]


def test_coordinator_moves_commits_follow(cluster: FakeCluster) -> None:
    """NOT_COORDINATOR after the coordinator moved: heartbeats and commits find the new one."""
    produce(cluster, 1)
    with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
                  **FAST) as consumer:  # fmt: skip
        consumer.subscribe([TOPIC])
        poll_until(consumer, lambda r: len(r) >= 4, "4 records")
        cluster.group.move_coordinator(102)
        consumer.commit()
        assert cluster.group.offsets[(GROUP, TOPIC, 3)] == 1
        assert consumer._group.core.coordinator[0] == 102


def test_members_share_partitions_and_take_over_on_leave_and_crash(cluster: FakeCluster) -> None:
    """Three members own every partition exactly once; one closes (LeaveGroup) and one dies
    (session timeout): the survivor ends up owning all of them."""
    members = [Member(cluster) for _ in range(3)]
    try:
        wait_for(lambda: owned_once(members) and all(m.assignment() for m in members), "3-way split")
        members[0].close()
        wait_for(lambda: owned_once(members[1:]), "a 2-way split after a leave")
        started = time.monotonic()
        members[1].kill()
        wait_for(lambda: members[2].assignment() == tps(0, 1, 2, 3), "takeover after a crash")
        assert time.monotonic() - started < 1.5 + 1.0 + 3.0, "within session timeout + join timeout"
        assert all(m.error is None for m in members), [m.error for m in members]
    finally:
        for m in members[2:]:
            m.close()


def test_member_that_stops_polling_leaves_the_group(cluster: FakeCluster) -> None:
    """max.poll.interval.ms: a member whose application does not poll in time leaves (LeaveGroup)
    while its heartbeat thread is alive, and the others take its partitions."""
    slow = Member(cluster, max_poll_interval_ms=800)
    fast = Member(cluster)
    try:
        wait_for(lambda: owned_once([slow, fast]) and slow.assignment() and fast.assignment(), "2-way split")
        member_id = slow.consumer.member_id()
        slow.pause_polling()
        wait_for(lambda: ("LeaveGroup", member_id) in cluster.group.calls, "the slow member's LeaveGroup")
        wait_for(lambda: fast.assignment() == tps(0, 1, 2, 3), "takeover")
    finally:
        slow.close()
        fast.close()


def test_static_member_restart_keeps_partitions_without_rebalance(cluster: FakeCluster) -> None:
    """KIP-345: a static member that restarts within its session timeout gets its partitions back
    and the group does not rebalance; close() of a static member sends no LeaveGroup."""
    a = Member(cluster, group_instance_id="a", session_timeout_ms=5000)
    b = Member(cluster, group_instance_id="b", session_timeout_ms=5000)
    try:
        wait_for(lambda: owned_once([a, b]) and a.assignment() and b.assignment(), "2-way split")
        before, rebalances = a.assignment(), cluster.group.groups[GROUP].rebalances
        a.close()
        assert not any(api == "LeaveGroup" for api, _ in cluster.group.calls)
        a = Member(cluster, group_instance_id="a", session_timeout_ms=5000)
        wait_for(lambda: a.assignment() == before, "the restarted static member's partitions")
        assert cluster.group.groups[GROUP].rebalances == rebalances
        assert b.revoked == []
    finally:
        a.close()
        b.close()


def test_cooperative_sticky_revokes_only_what_moves(cluster: FakeCluster) -> None:
    """KIP-429: with cooperative-sticky only, a second member joining makes the first revoke just the
    partitions that move (never everything), and the newcomer gets them in the follow-up rebalance."""
    coop = {"partition_assignment_strategy": ["cooperative-sticky"]}
    first = Member(cluster, **coop)
    second = None
    try:
        wait_for(lambda: first.assignment() == tps(0, 1, 2, 3), "the first member owning everything")
        second = Member(cluster, **coop)
        wait_for(lambda: owned_once([first, second]) and len(second.assignment()) == 2, "a 2-2 split")
        assert len(first.revoked) == 1 and len(first.revoked[0]) == 2, first.revoked
        assert set(first.revoked[0]) == second.assignment()
    finally:
        first.close()
        if second is not None:
            second.close()


def test_pattern_subscription_follows_new_topics(cluster: FakeCluster) -> None:
    """subscribe(pattern): matching topics (internal __ topics excluded) are joined, and a topic
    created later joins the subscription at a metadata refresh."""
    cluster.create_topic("orders-eu", 1)
    cluster.create_topic("__consumer_offsets", 1)
    with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", metadata_max_age_ms=200,
                  **FAST) as consumer:  # fmt: skip
        consumer.subscribe(re.compile(r"orders.*"))
        wait_for(lambda: (consumer.poll(50), len(consumer.assignment()) == 5)[1], "orders and orders-eu")
        assert consumer.subscription() == {"orders", "orders-eu"}
        cluster.create_topic("orders-us", 2)
        wait_for(lambda: (consumer.poll(50), len(consumer.assignment()) == 7)[1], "orders-us too")


def test_group_calls_need_a_group_id(cluster: FakeCluster) -> None:
    with Consumer(cluster.bootstrap) as consumer:
        with pytest.raises(Exception, match="group_id"):
            consumer.subscribe([TOPIC])
        with pytest.raises(Exception, match="group_id"):
            consumer.commit()


def test_poll_returns_in_time_while_the_join_is_held(cluster: FakeCluster) -> None:
    """Kafka's poll(timeout) does not wait for the whole rebalance: a JoinGroup the coordinator holds
    (another member has not rejoined yet) stays in flight across polls."""
    cluster.group.join_timeout_s = 5.0
    first = Member(cluster)
    try:
        wait_for(lambda: first.assignment() == tps(0, 1, 2, 3), "the first member owning everything")
        first.pause_polling()  # it will not rejoin: the coordinator holds the join up to join_timeout_s
        with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", **FAST) as second:
            second.subscribe([TOPIC])
            started = time.monotonic()
            assert second.poll(200) == []
            assert time.monotonic() - started < 3.0, "poll(200) waited for the rebalance (5 s)"
            wait_for(lambda: (second.poll(100), second.assignment() == tps(0, 1, 2, 3))[1], "takeover")
    finally:
        first.close()


def test_unsubscribe_revokes_and_leaves_then_assign_is_allowed(cluster: FakeCluster) -> None:
    produce(cluster, 1)
    revoked: list = []
    with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.subscribe([TOPIC], on_revoke=revoked.append)
        poll_until(consumer, lambda r: len(r) >= 4, "4 records")
        member_id = consumer.member_id()
        with pytest.raises(Exception, match="unsubscribe"):
            consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.unsubscribe()
        assert consumer.assignment() == set() and consumer.subscription() == set()
        assert sorted(tp.partition for tp in revoked[0]) == [0, 1, 2, 3]
        assert ("LeaveGroup", member_id) in cluster.group.calls
        assert cluster.group.offsets == {(GROUP, TOPIC, p): 1 for p in range(PARTITIONS)}, "auto-commit"
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek(TopicPartition(TOPIC, 0), 0)
        assert [r.offset for r in poll_until(consumer, lambda r: len(r) >= 1, "a record")] == [0]


def test_async_commit_resolves_to_the_offsets_or_the_error(cluster: FakeCluster) -> None:
    produce(cluster, 2)
    with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
                  **FAST) as consumer:  # fmt: skip
        consumer.subscribe([TOPIC])
        poll_until(consumer, lambda r: len(r) >= 8, "8 records")
        future = consumer.commit(asynchronous=True)
        assert future.result(10) == dict.fromkeys(tps(0, 1, 2, 3), 2)
        assert consumer.committed(tps(1)) == {TopicPartition(TOPIC, 1): 2}
        cluster.group.inject("OffsetCommit", [ErrorCode.UNKNOWN_MEMBER_ID])
        failed = consumer.commit({TopicPartition(TOPIC, 0): 1}, asynchronous=True)
        with pytest.raises(CommitFailedError, match="UNKNOWN_MEMBER_ID"):
            failed.result(10)
        assert consumer.member_id() == "", "UNKNOWN_MEMBER_ID forgets the member id and rejoins"


def test_a_subscribed_topic_created_later_is_assigned(cluster: FakeCluster) -> None:
    """Kafka's metadata snapshot: the group forms with a topic that does not exist yet; its creation
    (a partition count change from 0) makes the member rejoin and get its partitions."""
    with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.subscribe(["later"])
        consumer.poll(300)
        assert consumer.assignment() == set() and consumer.generation_id() >= 1
        cluster.create_topic("later", 2)
        wait_for(
            lambda: (consumer.poll(50), consumer.assignment() == tps(0, 1, topic="later"))[1], "assignment"
        )


def test_commits_carry_the_leader_epoch_and_resume_with_it(cluster: FakeCluster) -> None:
    """KIP-320: a commit carries the leader epoch of the last consumed record; a member resuming from
    it fetches with that epoch as its last fetched epoch (so a truncated log would be detected)."""
    cluster.move_leader(TOPIC, 0, 102)  # leader epoch 1
    produce(cluster, 2, partitions=1)
    with Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
                  max_poll_records=1, **FAST) as consumer:  # fmt: skip
        consumer.subscribe([TOPIC])
        (record,) = poll_until(consumer, lambda r: len(r) >= 1, "a record")
        assert record.leader_epoch == 1
        consumer.commit()
        consumer.commit({TopicPartition(TOPIC, 1): 0})  # not a consumed position: no epoch
    assert cluster.group.offsets[(GROUP, TOPIC, 0)] == 1 and cluster.group.epochs[(GROUP, TOPIC, 0)] == 1
    assert cluster.group.epochs[(GROUP, TOPIC, 1)] == -1
    with Consumer(cluster.bootstrap, group_id=GROUP, enable_auto_commit=False, **FAST) as resumed:
        resumed.subscribe([TOPIC])
        (again,) = poll_until(resumed, lambda r: len(r) >= 1, "the next record")
        assert (again.offset, again.leader_epoch) == (1, 1)
    # The committed epoch is sent: a commit made under epoch 0, which the log no longer holds (the
    # leader of epoch 1 wrote offset 0 afresh), is detected as a truncation on resume.
    cluster.group.epochs[(GROUP, TOPIC, 0)] = 0
    with Consumer(cluster.bootstrap, group_id=GROUP, enable_auto_commit=False, **FAST) as resumed:
        resumed.subscribe([TOPIC])
        records = poll_until(resumed, lambda r: len(r) >= 2, "the records again from the divergence")
        assert [r.offset for r in records] == [0, 1]
        assert [(t.position, t.divergent_offset) for t in resumed.truncations] == [(1, 0)]


def test_cooperative_member_busy_during_a_rebalance_is_not_expired(cluster: FakeCluster) -> None:
    """KIP-62 (review F2): a cooperative member whose poll() sent its JoinGroup and returned then
    processes records for longer than session.timeout.ms (well within max.poll.interval.ms). Its
    heartbeat thread handles the JoinGroup answer, sends the SyncGroup (it leads: it assigns) and
    heartbeats in the new generation, so the coordinator keeps it; on_assign / on_revoke wait for
    the next poll and run on the consumer's thread."""
    produce(cluster, 5)
    coop = {"partition_assignment_strategy": ["cooperative-sticky"]}
    callbacks: list[tuple[str, list[TopicPartition], threading.Thread]] = []

    def on(kind: str) -> Callable[[list[TopicPartition]], None]:
        return lambda partitions: callbacks.append((kind, partitions, threading.current_thread()))

    first = Consumer(cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", **FAST, **coop)
    second = None
    try:
        first.subscribe([TOPIC], on_assign=on("assign"), on_revoke=on("revoke"))
        wait_for(lambda: (first.poll(100), first.assignment() == tps(0, 1, 2, 3))[1], "first owns all")
        core = first._group.core
        member_id, generation = first.member_id(), first.generation_id()
        second = Member(cluster, **coop)
        # The application polls until a poll sent a JoinGroup (the newcomer's or the cooperative
        # follow-up rebalance), then processes records for three session timeouts without polling.
        wait_for(lambda: (first.poll(100), core.state is not MemberState.STABLE)[1], "first rejoining")
        seen = len(callbacks)
        time.sleep(3 * FAST["session_timeout_ms"] / 1000)
        with cluster.group.lock:
            group = cluster.group.groups[GROUP]
            assert member_id in group.members, "expired while processing (no heartbeat after JoinGroup)"
            assert group.generation > generation and group.state == "Stable", (group.generation, group.state)
            assert core.generation.generation_id == group.generation
        assert core.state is MemberState.STABLE, "the SyncGroup answer was applied without a poll"
        assert len(callbacks) == seen, "on_revoke/on_assign run inside poll(), not on the heartbeat thread"
        wait_for(lambda: (first.poll(100), len(callbacks) > seen)[1], "the deferred callbacks")
        wait_for(lambda: (first.poll(100), len(second.assignment()) == 2)[1], "a 2-2 split")
        assert first.assignment() | second.assignment() == tps(0, 1, 2, 3) and len(first.assignment()) == 2
        assert [p for kind, ps, _ in callbacks if kind == "revoke" for p in ps] == sorted(
            second.assignment(), key=lambda tp: tp.partition
        )
        assert {thread for _, _, thread in callbacks} == {threading.current_thread()}
        assert first.member_id() == member_id and second.error is None
    finally:
        first.close()
        if second is not None:
            second.close()


def test_member_waiting_inside_poll_for_a_long_join_does_not_leave(cluster: FakeCluster) -> None:
    """Review F3 (Kafka: the poll timer runs only from the JoinGroup answer on): an EAGER member inside
    poll(timeout) whose JoinGroup the coordinator holds longer than its max.poll.interval.ms (another
    member does not rejoin) sends no LeaveGroup for itself and keeps its member id."""
    cluster.group.join_timeout_s = 2.0
    a = Consumer(
        cluster.bootstrap, group_id=GROUP, auto_offset_reset="earliest", **FAST, max_poll_interval_ms=800
    )
    stuck = Member(cluster)
    newcomer = None
    try:
        a.subscribe([TOPIC])
        wait_for(lambda: (a.poll(100), bool(a.assignment()) and bool(stuck.assignment()))[1], "a 2-way split")
        member_id = a.member_id()
        stuck.pause_polling()  # it will not rejoin: the coordinator holds the JoinGroup for 2 s
        newcomer = Member(cluster)
        started = time.monotonic()
        wait_for(
            lambda: (a.poll(3000), bool(newcomer.assignment()) and bool(a.assignment()))[1], "rebalanced"
        )
        assert time.monotonic() - started > 0.8, "the JoinGroup was held longer than max.poll.interval.ms"
        assert ("LeaveGroup", member_id) not in cluster.group.calls
        assert a.member_id() == member_id
    finally:
        a.close()
        stuck.close()
        if newcomer is not None:
            newcomer.close()
