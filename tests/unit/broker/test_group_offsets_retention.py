"""Offset expiration (KIP-211, Kafka's ``GroupMetadataManager.cleanupGroupMetadata``) and the offsets
of deleted topics, on the sans-I/O coordinator with a virtual clock and short settings.

Rules (``broker.group.metadata_manager.expired_offsets``): a group with members keeps its offsets however old;
an Empty consumer group loses all of them ``offsets.retention.minutes`` after it became Empty (the
state timestamp stored in its GroupMetadata record, so a coordinator that loads the group later
counts from the same instant); a group of standalone commits loses each offset that long after its
commit; a commit still being appended never expires; an Empty group left without offsets is removed.
Every removal is a tombstone in ``__consumer_offsets``, so a reload does not bring them back.
"""

from __future__ import annotations

import dataclasses

from group_harness import CONFIG, GROUP, PARTITIONS, SESSION_MS, Harness, protocols

from broker.group.metadata import GroupMetadataRecord, GroupState, OffsetCommitRecord
from broker.group.requests import OffsetFetchRequest
from tests.kafka_call import consumer_subscription

S = GroupState
RETENTION_MS = 60_000
CHECK_MS = 1_000
SHORT = dataclasses.replace(
    CONFIG, offsets_retention_ms=RETENTION_MS, offsets_retention_check_interval_ms=CHECK_MS
)


def committed(h: Harness, group: str = GROUP) -> dict[tuple[str, int], int]:
    fetched = h.core.handle_offset_fetch(OffsetFetchRequest(group, None))
    return {tp: f.committed_offset for tp, f in fetched.partitions.items()}


def tombstones(h: Harness, since: int = 0) -> list[object]:
    """Tombstone records appended after the first ``since`` appends, in order."""
    return [r for a in h.appended[since:] for r in a.records if r.value is None]


def keep_alive(h: Harness, members: list[str], ms: int) -> None:
    """Advance ``ms`` while every member heartbeats (generation 1) well within its session."""
    target, step = h.now_ms + ms, SESSION_MS // 3
    while h.now_ms < target:
        h.advance(min(step, target - h.now_ms))
        assert all(h.heartbeat(m, 1) == 0 for m in members)


def test_offsets_of_a_group_with_members_never_expire() -> None:
    """Members whose metadata is no consumer subscription: the subscribed topics are unknown."""
    h = Harness(config=SHORT)
    leader, follower = h.stable_group(2)
    h.commit(leader, 1, {("t", 0): 5})
    keep_alive(h, [leader, follower], 3 * RETENTION_MS)
    assert committed(h) == {("t", 0): 5}
    assert tombstones(h) == []


def test_a_stable_consumer_group_loses_offsets_of_topics_it_no_longer_subscribes_to() -> None:
    """KIP-496: counted from each commit; the subscribed topic's offset stays however old."""
    h = Harness(config=SHORT)
    member = h.join_new(protos=protocols("range", metadata=consumer_subscription("t")))
    h.advance_until_answered([h.last_rid])
    assert h.answers[h.sync(member, 1, {member: b"a"})].error.code == 0
    h.commit(member, 1, {("t", 0): 1, ("u", 0): 2})
    keep_alive(h, [member], RETENTION_MS + 2 * CHECK_MS)
    assert committed(h) == {("t", 0): 1}
    assert tombstones(h) == [OffsetCommitRecord(GROUP, "u", 0, None)]
    assert h.state() is S.STABLE


def test_an_empty_group_loses_its_offsets_retention_after_it_became_empty() -> None:
    """Not counted from the commit: the group was active long after it."""
    h = Harness(config=SHORT)
    leader, follower = h.stable_group(2)
    h.commit(leader, 1, {("t", 0): 5, ("t", 1): 6})
    keep_alive(h, [leader, follower], 2 * RETENTION_MS)
    h.leave(leader)
    h.leave(follower)
    assert h.state() is S.EMPTY
    before = len(h.appended)
    h.advance(RETENTION_MS - 1)
    assert committed(h) == {("t", 0): 5, ("t", 1): 6}, "expired before the retention passed"
    h.advance(CHECK_MS + 1)  # the first check at or after the retention
    assert committed(h) == {} and h.state() is S.DEAD and GROUP not in h.core.group_manager.groups
    assert tombstones(h, before) == [
        OffsetCommitRecord(GROUP, "t", 0, None),
        OffsetCommitRecord(GROUP, "t", 1, None),
        GroupMetadataRecord(GROUP, None),
    ]


def test_standalone_commits_expire_each_retention_after_its_commit() -> None:
    h = Harness(config=SHORT)
    h.commit("", -1, {("t", 0): 1})
    first_ms = h.now_ms
    h.advance(RETENTION_MS // 2)
    h.commit("", -1, {("t", 1): 2})
    h.advance(first_ms + RETENTION_MS - 1 - h.now_ms)
    assert committed(h) == {("t", 0): 1, ("t", 1): 2}
    h.advance(CHECK_MS + 1)
    assert committed(h) == {("t", 1): 2}
    assert tombstones(h) == [OffsetCommitRecord(GROUP, "t", 0, None)]
    assert h.state() is S.EMPTY, "a group that still has offsets stays"
    h.advance(RETENTION_MS // 2)
    assert committed(h) == {} and GROUP not in h.core.group_manager.groups
    assert tombstones(h)[1:] == [OffsetCommitRecord(GROUP, "t", 1, None), GroupMetadataRecord(GROUP, None)]


def test_a_commit_being_appended_does_not_expire_and_keeps_its_group() -> None:
    """Kafka's pendingOffsetCommits: a tombstone appended behind the commit would delete it on reload."""
    h = Harness(config=SHORT)
    h.commit("", -1, {("t", 0): 1})
    h.advance(RETENTION_MS)
    assert committed(h) == {}
    h.auto_append = False
    rid = h.commit("", -1, {("t", 0): 2})  # an old group id again: re-created by the commit
    old = h.core.group_manager.groups[GROUP]
    h.apply(h.core.group_manager.cleanup_expired_offsets(h.now_ms + 10 * RETENTION_MS))
    assert h.core.group_manager.groups.get(GROUP) is old, "the group of a commit in flight was removed"
    assert [a.records for a in h.held] == [(OffsetCommitRecord(GROUP, "t", 0, h.held[0].records[0].value),)]
    h.finish_appends()
    assert h.answers[rid].partitions[("t", 0)].code == 0
    assert committed(h) == {("t", 0): 2}


def test_the_check_runs_every_interval_only_while_there_are_groups() -> None:
    h = Harness(config=SHORT)
    assert h.core.next_deadline_ms() is None
    h.commit("", -1, {("t", 0): 1})
    deadline = h.core.next_deadline_ms()
    assert deadline is not None and deadline <= h.now_ms + CHECK_MS
    h.advance(CHECK_MS)
    assert h.core.next_deadline_ms() == h.now_ms + CHECK_MS


def test_deleted_topics_take_their_offsets_from_every_group() -> None:
    """Kafka's onPartitionsDeleted: at once, whatever the group's state; an Empty group left with no
    offsets goes too."""
    h = Harness(config=SHORT)
    leader, _ = h.stable_group(2)
    h.commit(leader, 1, {("t", 0): 5, ("u", 0): 6})
    h.commit("", -1, {("t", 0): 7}, group="solo")
    before = len(h.appended)
    h.apply(h.core.handle_deleted_topics(frozenset({"t"}), h.now_ms))
    assert committed(h) == {("u", 0): 6} and h.state() is S.STABLE
    assert committed(h, "solo") == {} and "solo" not in h.core.group_manager.groups
    assert sorted(map(repr, tombstones(h, before))) == sorted(
        map(
            repr,
            [
                OffsetCommitRecord(GROUP, "t", 0, None),
                OffsetCommitRecord("solo", "t", 0, None),
                GroupMetadataRecord("solo", None),
            ],
        )
    )


def reload(h: Harness, now_ms: int) -> Harness:
    """Another coordinator loads every offsets partition from ``h``'s records at ``now_ms``."""
    fresh = Harness(config=h.config, now_ms=now_ms)
    for p in range(PARTITIONS):
        fresh.apply(fresh.core.on_resignation(p))
        fresh.apply(fresh.core.on_election(p, PARTITIONS))
    for append in h.appended:
        for record in append.records:
            fresh.core.replay(append.partition, record)
    for p in range(PARTITIONS):
        fresh.core.complete_loading(p, now_ms)
    return fresh


def test_a_reload_does_not_bring_expired_offsets_back() -> None:
    h = Harness(config=SHORT)
    h.commit("", -1, {("t", 0): 1})
    h.apply(h.core.handle_deleted_topics(frozenset({"t"}), h.now_ms))
    h.commit("", -1, {("u", 0): 1}, group="other")
    h.advance(RETENTION_MS)
    assert h.core.group_manager.groups == {}
    fresh = reload(h, h.now_ms)
    assert fresh.core.group_manager.groups == {}


def test_a_loaded_empty_group_counts_from_when_it_became_empty() -> None:
    """The state timestamp travels in the GroupMetadata record (wall clock): a coordinator that loads
    the group half-way through the retention expires it at the same instant as the first would."""
    h = Harness(config=SHORT)
    (leader,) = h.stable_group(1)
    h.commit(leader, 1, {("t", 0): 5})
    keep_alive(h, [leader], RETENTION_MS)
    h.leave(leader)
    emptied_ms = h.now_ms
    fresh = reload(h, emptied_ms + RETENTION_MS // 2)
    assert fresh.state() is S.EMPTY and committed(fresh) == {("t", 0): 5}
    fresh.advance(emptied_ms + RETENTION_MS - 1 - fresh.now_ms)
    assert committed(fresh) == {("t", 0): 5}
    fresh.advance(CHECK_MS + 1)
    assert committed(fresh) == {} and GROUP not in fresh.core.group_manager.groups
