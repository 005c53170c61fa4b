"""KIP-516 on the follower fetch path: a follower that still replicates the deleted incarnation of a
re-created topic is answered INCONSISTENT_TOPIC_ID and does not count toward the new incarnation's
HW — otherwise the leader would acknowledge acks=all records that only it holds (the stale
follower's LEO belongs to another log)."""

from __future__ import annotations

from test_replica_manager import KEY, TOPIC, TOPIC_ID, Harness

from metadata.records import PartitionRecord, RemoveTopicRecord, TopicRecord

NEW_ID = "new-incarnation"


def recreate_on_leader_only(h: Harness) -> None:
    """The controller deletes and re-creates the topic; only the leader (101) has applied it yet."""
    h.offset += 1
    h.image.apply_batch([RemoveTopicRecord(TOPIC_ID)], h.offset)
    h.offset += 1
    h.image.apply_batch(
        [TopicRecord(TOPIC, NEW_ID), PartitionRecord(NEW_ID, 0, (101, 102), (101, 102), 101)], h.offset
    )
    h.managers[101].apply_image(h.image, h.now_ms)


def test_stale_incarnation_follower_does_not_advance_the_new_topics_hw(tmp_path) -> None:
    h = Harness(tmp_path, replicas=(101, 102), min_insync="2")
    h.produce(101, [b"old-a", b"old-b"], acks=1)
    h.replicate(102)
    h.replicate(102)
    assert h.managers[102].logs[KEY].log_end_offset == 2
    recreate_on_leader_only(h)
    assert h.managers[101].logs[KEY].log_end_offset == 0
    first = h.produce(101, [b"new-x", b"new-y"])  # acks=all: parked until the HW passes offset 1
    second = h.produce(101, [b"new-z"])
    h.replicate(102)  # 102 still fetches the old incarnation at offset 2, epoch 0
    h.replicate(102)
    assert first == {} and second == {}, "acks=all answered although 102 holds none of the new records"
    assert h.hw(101) == 0
    assert h.values(102) == [b"old-a", b"old-b"]  # nothing appended from the other incarnation

    h.managers[102].apply_image(h.image, h.now_ms)  # the follower catches up with the metadata
    for _ in range(4):
        h.replicate(102)
    assert h.values(102) == [b"new-x", b"new-y", b"new-z"]
    assert h.hw(101) == 3


def test_a_fetch_without_topic_id_is_still_served(tmp_path) -> None:
    """Older followers (and the consumer path) send no topic id: the name decides, as before."""
    h = Harness(tmp_path, replicas=(101, 102), min_insync="1")
    h.produce(101, [b"a"], acks=1)
    h.managers[102].topic_ids.clear()
    h.replicate(102)
    h.replicate(102)
    assert h.values(102) == [b"a"]
