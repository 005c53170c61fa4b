"""ReplicaManager wiring, in process: real partition logs (storage.log.Log) under tmp_path, real
Partition/ReplicaFetcher/purgatory cores, and a metadata image changed record by record. Followers
replicate when the test says so (``Harness.replicate``), so every interleaving is explicit.

Rules under test (architecture.md "Core rules", issue 5 §2-3): acks=all is answered when the HW passes the
batch, REQUEST_TIMED_OUT at the deadline, NOT_LEADER_OR_FOLLOWER when leadership is lost;
NOT_ENOUGH_REPLICAS appends nothing; a consumer long poll is woken when the HW moves; a new follower
truncates by leader epoch, never to its HW — both KIP-101 scenarios lose nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from broker.follower.fetcher import FetchedPartition, FetcherConfig, ReplicaFetcher
from broker.replica.replica_manager import (
    ProduceRequestPartition,
    ReplicaManager,
)
from broker.replica.replica_requests import FetchRequestPartition
from metadata.image import MetadataImage
from metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    Endpoint,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from proto.clock import wall_clock_ms
from proto.errors import ErrorCode
from proto.kafka_types import TopicPartition
from storage.epoch_cache import EpochEntry
from storage.record_batch import build_batch, decode_records

TOPIC, TOPIC_ID = "t", "topic-id-t"
KEY: TopicPartition = (TOPIC, 0)
BROKERS = (101, 102, 103)
LAG_MS = 1000


class FakeFetchers:
    """FetcherControl that keeps one real ReplicaFetcher per leader; the test drives the requests."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.by_leader: dict[int, ReplicaFetcher] = {}

    def add_partition(self, leader_id, tp, fetch_offset, last_fetched_epoch, leader_epoch) -> None:
        self.remove_partition(tp)
        fetcher = self.by_leader.setdefault(
            leader_id, ReplicaFetcher(leader_id, self.broker_id, 1, FetcherConfig(fetch_backoff_ms=0))
        )
        fetcher.add_partition(tp, fetch_offset, last_fetched_epoch, leader_epoch)

    def remove_partition(self, tp) -> None:
        for fetcher in self.by_leader.values():
            fetcher.remove_partition(tp)

    def leader_of(self, tp) -> int | None:
        for leader_id, fetcher in self.by_leader.items():
            if tp in fetcher.partitions():
                return leader_id
        return None


class Harness:
    def __init__(
        self,
        tmp_path: Path,
        replicas=BROKERS,
        min_insync: str = "2",
        leader_epoch: int = 0,
        clock_ms: Callable[[], int] = wall_clock_ms,
        **configs: str,
    ) -> None:
        self.tmp_path = tmp_path
        self.clock_ms = clock_ms
        self.now_ms = 1_000
        self.image = MetadataImage()
        self.offset = 0
        self.proposals: dict[int, list] = {b: [] for b in BROKERS}
        self.managers: dict[int, ReplicaManager] = {}
        self.fetchers: dict[int, FakeFetchers] = {}
        records = [RegisterBrokerRecord(b, f"inc-{b}", (Endpoint("PLAINTEXT", "127.0.0.1", b),), fenced=False)
                   for b in BROKERS]  # fmt: skip
        records += [
            TopicRecord(TOPIC, TOPIC_ID),
            ConfigRecord(ConfigResourceType.TOPIC, TOPIC, "min.insync.replicas", min_insync),
            *(
                ConfigRecord(ConfigResourceType.TOPIC, TOPIC, k.replace("_", "."), v)
                for k, v in configs.items()
            ),
            PartitionRecord(TOPIC_ID, 0, tuple(replicas), tuple(replicas), replicas[0], leader_epoch),
        ]
        self.apply(*records)
        for b in replicas:
            self.start(b)

    def start(self, broker_id: int) -> ReplicaManager:
        """(Re)start a broker's replica manager on its data directory (logs recover from disk)."""
        self.fetchers[broker_id] = FakeFetchers(broker_id)
        manager = ReplicaManager(
            broker_id,
            self.tmp_path / f"broker-{broker_id}",
            replica_lag_time_max_ms=LAG_MS,
            topic_defaults={},
            fetchers=self.fetchers[broker_id],
            send_alter_partition=lambda _topic_id, proposal: self.proposals[broker_id].append(proposal),
            on_deadline=lambda _deadline_ms: None,
            clock_ms=self.clock_ms,
        )
        self.managers[broker_id] = manager
        manager.apply_image(self.image, self.now_ms)
        return manager

    def crash(self, broker_id: int) -> None:
        """Stop without controlled shutdown: nothing more than what the log wrote survives."""
        manager = self.managers.pop(broker_id)
        manager.close()

    def apply(self, *records) -> None:
        self.offset += 1
        self.image.apply_batch(records, self.offset)
        for manager in self.managers.values():
            manager.apply_image(self.image, self.now_ms)
            manager.invariants()

    def produce(self, broker_id: int, values: list[bytes], acks: int = -1, timeout_ms: int = 5000) -> dict:
        answers: dict = {}
        records = build_batch([(None, v, (), 0) for v in values])
        self.managers[broker_id].produce(
            acks, timeout_ms, [ProduceRequestPartition(KEY, records, None)], self.now_ms, answers.update
        )
        return answers

    def replicate(self, follower_id: int, deliver: bool = True) -> None:
        """One follower fetch: the leader handles it at once; ``deliver=False`` loses the answer."""
        fake = self.fetchers[follower_id]
        leader_id = fake.leader_of(KEY)
        assert leader_id is not None, f"broker {follower_id} follows no leader"
        fetcher = fake.by_leader[leader_id]
        plan = fetcher.build_request(self.now_ms)
        assert plan is not None
        answers: dict = {}
        topic_ids = self.managers[follower_id].topic_ids  # as the fetcher driver sends them
        items = [FetchRequestPartition(p.topic_partition, p.fetch_offset, 1 << 20, p.current_leader_epoch,
                                       p.last_fetched_epoch, topic_ids.get(p.topic_partition[0], ""))
                 for p in plan.partitions]  # fmt: skip
        self.managers[leader_id].fetch_for_follower(
            follower_id,
            plan.broker_epoch,
            items,
            1 << 20,
            1,
            0,
            self.now_ms,
            answers.update,
            lambda: self.now_ms,
        )
        if not deliver:
            fetcher.handle_request_failure(plan.request_id, self.now_ms)
            return
        fetched = {
            tp: FetchedPartition(r.code, r.high_watermark, r.log_start_offset, r.log_end_offset,
                                 r.diverging_epoch, r.records, r.message)
            for tp, r in answers.items()
        }  # fmt: skip
        follower = self.managers[follower_id]
        for action in fetcher.handle_response(plan.request_id, fetched, follower.local_view, self.now_ms):
            follower.apply_fetch_action(action)
            fetcher.update_position(action.topic_partition, *follower.log_position(action.topic_partition))
        follower.invariants()
        self.managers[leader_id].invariants()

    def values(self, broker_id: int, end: int | None = None) -> list[bytes]:
        log = self.managers[broker_id].logs[KEY]
        return [r.value for r in decode_records(log.read(0, 1 << 30, max_offset=end))]

    def hw(self, broker_id: int) -> int:
        return self.managers[broker_id].partitions[KEY].high_watermark


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    h = Harness(tmp_path)
    yield h
    for manager in h.managers.values():
        manager.close()


def test_acks_all_is_answered_when_the_hw_passes_the_batch(harness: Harness) -> None:
    """HW = min LEO over the ISR: the leader learns a follower's LEO from its next fetch offset."""
    answers = harness.produce(101, [b"a", b"b"])
    assert answers == {}
    harness.replicate(102)  # appends
    harness.replicate(103)
    assert answers == {}
    harness.replicate(102)  # reports LEO 2
    assert answers == {} and harness.hw(101) == 0
    harness.replicate(103)
    assert answers[KEY].code == ErrorCode.NONE and answers[KEY].base_offset == 0
    assert harness.hw(101) == 2
    harness.replicate(102)
    assert harness.hw(102) == 2 and harness.values(102) == [b"a", b"b"]


def test_acks_all_times_out(harness: Harness) -> None:
    answers = harness.produce(101, [b"a"], timeout_ms=500)
    harness.managers[101].expire(harness.now_ms + 499)
    assert answers == {}
    harness.managers[101].expire(harness.now_ms + 500)
    assert answers[KEY].code == ErrorCode.REQUEST_TIMED_OUT


def test_leadership_loss_answers_not_leader_and_follows_the_new_leader(harness: Harness) -> None:
    answers = harness.produce(101, [b"a"])
    harness.apply(PartitionChangeRecord(TOPIC_ID, 0, leader=102, isr=(102, 103)))
    assert answers[KEY].code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert harness.fetchers[101].leader_of(KEY) == 102
    assert harness.fetchers[103].leader_of(KEY) == 102


def test_not_enough_replicas_appends_nothing(harness: Harness) -> None:
    harness.apply(PartitionChangeRecord(TOPIC_ID, 0, isr=(101,)))
    answers = harness.produce(101, [b"a"])
    assert answers[KEY].code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert harness.managers[101].logs[KEY].log_end_offset == 0
    assert harness.produce(101, [b"a"], acks=1)[KEY].code == ErrorCode.NONE


def test_consumer_long_poll_is_woken_when_the_hw_moves(harness: Harness) -> None:
    answers: dict = {}
    harness.managers[101].fetch_for_consumer(
        [FetchRequestPartition(KEY, 0, 1 << 20, None, None)], 1 << 20, 1, 5000, harness.now_ms, answers.update
    )
    harness.produce(101, [b"a"], acks=1)
    assert answers == {}, "woken before the record was committed"
    for follower in (102, 103, 102, 103):
        harness.replicate(follower)
    assert [r.value for r in decode_records(answers[KEY].records)] == [b"a"]


def test_lagging_follower_is_proposed_out_of_the_isr(harness: Harness) -> None:
    harness.produce(101, [b"a"], acks=1)
    harness.replicate(102)
    harness.replicate(102)
    harness.now_ms += LAG_MS + 1
    harness.managers[101].maybe_shrink_isr(harness.now_ms)
    assert [p.new_isr for p in harness.proposals[101]] == [(101, 102)]


def test_kip101_lost_committed_record(tmp_path: Path) -> None:
    """KIP-101 scenario 1: A and B hold offsets 0 and 1, A's HW is 2 but B's is 1. B restarts
    (it must not truncate to its HW), then A dies and B leads: offset 1 is still there, and A, back
    as a follower, keeps it too."""
    h = Harness(tmp_path, replicas=(101, 102), min_insync="1")
    h.produce(101, [b"r0"])
    h.replicate(102)
    h.replicate(102)
    h.produce(101, [b"r1"])
    h.replicate(102)  # B appends r1; the answer carries HW 1
    h.replicate(102, deliver=False)  # A learns B's LEO 2 (HW 2); B never hears of it
    assert (h.hw(101), h.hw(102)) == (2, 1)
    h.crash(102)
    h.start(102)
    h.crash(101)
    h.apply(PartitionChangeRecord(TOPIC_ID, 0, leader=102, isr=(102,)))
    assert h.values(102) == [b"r0", b"r1"], "B lost the committed offset 1"
    h.start(101)
    for _ in range(3):
        h.replicate(101)
    assert h.values(101) == h.values(102) == [b"r0", b"r1"]
    for manager in h.managers.values():
        manager.close()


def test_kip101_diverged_logs(tmp_path: Path) -> None:
    """KIP-101 scenario 2: A has an uncommitted offset 1 that B lacks; both crash, B comes back first,
    leads and writes a different offset 1. A returns as follower, finds the divergence through the
    leader epoch, truncates it and takes B's record: both agree at every offset below the HW."""
    h = Harness(tmp_path, replicas=(101, 102), min_insync="1")
    h.produce(101, [b"r0"])
    h.replicate(102)
    h.replicate(102)
    h.produce(101, [b"only-on-A"], acks=1)
    h.crash(101)
    h.crash(102)
    h.start(102)
    h.apply(PartitionChangeRecord(TOPIC_ID, 0, leader=102, isr=(102,)))
    assert h.produce(102, [b"r1-from-B"])[KEY].code == ErrorCode.NONE
    h.start(101)
    assert h.values(101) == [b"r0", b"only-on-A"]
    for _ in range(3):
        h.replicate(101)
    assert h.values(101) == h.values(102) == [b"r0", b"r1-from-B"]
    for manager in h.managers.values():
        manager.close()


@pytest.mark.parametrize(
    ("broker_epoch", "expected"),
    [(0, ErrorCode.STALE_BROKER_EPOCH), (1, ErrorCode.NONE), (5, ErrorCode.NONE)],
    ids=["older-than-registered", "registered", "newer-not-yet-seen"],
)
def test_follower_fetch_from_a_stale_broker_epoch_is_refused(
    harness: Harness, broker_epoch: int, expected: ErrorCode
) -> None:
    """Zombie fencing: a fetch from an older incarnation than the image's registration is refused."""
    answers: dict = {}
    item = FetchRequestPartition(KEY, 0, 1 << 20, 0, None)
    harness.managers[101].fetch_for_follower(
        102, broker_epoch, [item], 1 << 20, 1, 0, harness.now_ms, answers.update, lambda: harness.now_ms
    )
    assert answers[KEY].code == expected


def test_deleted_and_recreated_topic_starts_from_an_empty_log(harness: Harness) -> None:
    """A removed topic's replicas stop, answer parked operations and delete their logs; a topic
    re-created under the same name (new id) never sees the old records."""
    harness.produce(101, [b"old"], acks=1)
    parked = harness.produce(101, [b"parked"])
    old_dir = harness.managers[101].logs[KEY].directory
    harness.apply(RemoveTopicRecord(TOPIC_ID))
    assert parked[KEY].code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert not old_dir.exists()
    assert all(KEY not in m.partitions for m in harness.managers.values())
    harness.apply(TopicRecord(TOPIC, "topic-id-2"), PartitionRecord("topic-id-2", 0, BROKERS, BROKERS, 101))
    assert harness.managers[101].logs[KEY].log_end_offset == 0
    assert harness.produce(101, [b"new"], acks=1)[KEY].base_offset == 0


def test_retention_moves_the_log_start_on_leader_and_followers(tmp_path: Path) -> None:
    """Retention deletes whole segments below the HW; consumers then get OFFSET_OUT_OF_RANGE below the
    new log start offset, and followers move their log start with the leader's (never past their HW)."""
    h = Harness(tmp_path, replicas=(101, 102), min_insync="1", segment_bytes="200", retention_bytes="300")
    for i in range(10):
        h.produce(101, [f"value-{i:04}".encode()], acks=1)
    for _ in range(20):  # one read stays inside one segment: several fetches
        h.replicate(102)
    assert h.hw(101) == h.hw(102) == 10
    assert h.managers[101].delete_old_segments() > 0
    start = h.managers[101].logs[KEY].log_start_offset
    assert 0 < start <= 10 and h.managers[101].partitions[KEY].log_start_offset == start
    answers: dict = {}
    h.managers[101].fetch_for_consumer(
        [FetchRequestPartition(KEY, 0, 1 << 20, None, None)], 1 << 20, 1, 0, h.now_ms, answers.update
    )
    assert answers[KEY].code == ErrorCode.OFFSET_OUT_OF_RANGE and answers[KEY].log_start_offset == start
    h.replicate(102)
    assert h.managers[102].logs[KEY].log_start_offset == start
    for manager in h.managers.values():
        manager.close()


def consumer_fetch(h: Harness, broker_id: int, offset: int, max_wait_ms: int = 0) -> dict:
    answers: dict = {}
    h.managers[broker_id].fetch_for_consumer(
        [FetchRequestPartition(KEY, offset, 1 << 20, None, None)], 1 << 20, 1, max_wait_ms, h.now_ms,
        answers.update,
    )  # fmt: skip
    return answers


def test_fetch_between_hw_and_leo_is_empty_not_out_of_range(harness: Harness) -> None:
    """Kafka: a consumer fetch at ``HW < offset <= LEO`` gets an empty answer (no error);
    OFFSET_OUT_OF_RANGE only below the log start or beyond the LEO (issue 14, defect 3). After a
    failover the new leader's HW lags until its followers fetch in the new epoch: a consumer taking
    over at its committed offset must wait, not reset."""
    h = harness
    assert h.produce(101, [b"a", b"b", b"c"]) == {}
    for follower in (102, 103, 102, 103):  # 101's HW reaches 3; 102 still believes 0
        h.replicate(follower)
    assert (h.hw(101), h.hw(102), h.hw(103)) == (3, 0, 3)
    h.apply(PartitionChangeRecord(TOPIC_ID, 0, leader=102, isr=(102, 103)))  # 101 failed
    assert (h.hw(102), h.managers[102].logs[KEY].log_end_offset) == (0, 3)
    for offset in (1, 3):  # above the new leader's HW, within its log
        answer = consumer_fetch(h, 102, offset)[KEY]
        assert (answer.code, answer.records, answer.high_watermark) == (ErrorCode.NONE, b"", 0), answer
    beyond = consumer_fetch(h, 102, 4)[KEY]
    assert beyond.code == ErrorCode.OFFSET_OUT_OF_RANGE and "[0, 3]" in beyond.message
    parked = consumer_fetch(h, 102, 1, max_wait_ms=5000)
    assert parked == {}, "a fetch above the HW long-polls until the HW passes it"
    h.replicate(103)  # 103 fetches in the new epoch: the HW moves to 3, the parked fetch answers
    assert h.hw(102) == 3
    assert [r.value for r in decode_records(parked[KEY].records)] == [b"a", b"b", b"c"]  # whole batch


@pytest.mark.parametrize("isr_after", [BROKERS, (101, 103)], ids=["b-stays-in-isr", "b-was-shrunk-out"])
def test_replica_that_led_an_empty_epoch_converges_and_rejoins_the_isr(
    tmp_path: Path, isr_after: tuple[int, ...]
) -> None:
    """Issue 14, defect 1, against the real classes: A, B, C at LEO 10 in epoch 4; B leads epoch 5 and
    writes nothing (its cache gets (5, 10)); A leads epoch 6 (A's cache: (4, 0), (6, 10)). B, as
    follower, fetches (offset 10, last epoch 5), gets the diverging epoch (4, 10) and truncates to 10
    — which must drop epoch 5, so that its next fetch agrees with A: B's LEO is recorded, acks=all and
    the HW progress, and a B shrunk out meanwhile is proposed back in."""
    h = Harness(tmp_path, leader_epoch=4)
    assert h.produce(101, [b"v%d" % i for i in range(10)]) == {}
    for follower in (102, 103, 102, 103):
        h.replicate(follower)
    assert [h.managers[b].logs[KEY].log_end_offset for b in BROKERS] == [10, 10, 10]
    h.apply(PartitionChangeRecord(TOPIC_ID, 0, leader=102))  # B leads epoch 5: writes nothing
    b_log = h.managers[102].logs[KEY]
    assert b_log.leader_epoch_cache.entries == (EpochEntry(4, 0), EpochEntry(5, 10))
    h.apply(PartitionChangeRecord(TOPIC_ID, 0, leader=101, isr=isr_after))  # A leads epoch 6
    assert h.managers[101].logs[KEY].leader_epoch_cache.entries == (EpochEntry(4, 0), EpochEntry(6, 10))
    answers = h.produce(101, [b"after"])
    for _ in range(3):
        h.replicate(103)
        h.replicate(102)
    assert b_log.leader_epoch_cache.entries == (EpochEntry(4, 0), EpochEntry(6, 10)), "B kept epoch 5"
    assert h.values(102) == h.values(101) == [*(b"v%d" % i for i in range(10)), b"after"]
    remote = h.managers[101].partitions[KEY].remote_replica(102)
    assert remote is not None and remote.log_end_offset == 11, "A never recorded B's LEO"
    assert answers[KEY].code == ErrorCode.NONE and h.hw(101) == 11
    if 102 not in isr_after:
        assert [p.new_isr for p in h.proposals[101]] == [BROKERS], "B was not proposed back into the ISR"
    for manager in h.managers.values():
        manager.close()


def test_fenced_caught_up_follower_is_not_proposed_into_the_isr(harness: Harness) -> None:
    """The leader checks eligibility in its metadata image before proposing an ISR expansion (Kafka's
    isReplicaIsrEligible): a fenced follower that keeps fetching, caught up, triggers no AlterPartition
    (the controller would refuse each one); once unfenced, its next fetch is proposed, with every
    member's broker epoch (KIP-903) — the follower's being the one its fetches carry."""
    h = harness
    h.apply(PartitionChangeRecord(TOPIC_ID, 0, isr=(101, 102)))
    h.apply(BrokerRegistrationChangeRecord(103, h.image.brokers[103].broker_epoch, fenced=True))
    h.produce(101, [b"a"], acks=1)
    for follower in (102, 103, 102, 103, 103, 103):
        h.replicate(follower)
    remote = h.managers[101].partitions[KEY].remote_replica(103)
    assert remote is not None and remote.log_end_offset == 1 == h.hw(101), "103 is caught up"
    assert h.proposals[101] == [], "a fenced follower was proposed into the ISR"
    assert "fenced" in (h.managers[101].partitions[KEY].isr_ineligibility(103) or "")
    h.apply(BrokerRegistrationChangeRecord(103, h.image.brokers[103].broker_epoch, fenced=False))
    h.replicate(103)
    epochs = {b: h.image.brokers[b].broker_epoch for b in BROKERS}
    assert remote.broker_epoch == epochs[103] == h.fetchers[103].by_leader[101].broker_epoch
    assert [p.new_isr_with_epochs for p in h.proposals[101]] == [tuple(epochs.items())]


def test_parked_fetch_from_an_older_incarnation_is_refused(harness: Harness) -> None:
    """KIP-903: a follower fetch parked on the leader, answered after the image registered a new
    incarnation of that broker, is refused (STALE_BROKER_EPOCH) instead of recording the old
    incarnation's fetch offset — that process may have lost the data it claimed to hold."""
    h = harness
    h.produce(101, [b"a"], acks=1)
    for follower in (102, 102):
        h.replicate(follower)
    answers: dict = {}
    item = FetchRequestPartition(KEY, 1, 1 << 20, 0, 0, TOPIC_ID)
    h.managers[101].fetch_for_follower(
        102, h.image.brokers[102].broker_epoch, [item], 1 << 20, 1, 5000, h.now_ms, answers.update,
        lambda: h.now_ms,
    )  # fmt: skip
    assert answers == {}, "nothing to read: the fetch is parked"
    h.apply(
        RegisterBrokerRecord(
            102, "inc-102-restarted", (Endpoint("PLAINTEXT", "127.0.0.1", 102),), fenced=False
        )
    )
    h.produce(101, [b"b"], acks=1)  # wakes the parked fetch
    assert answers[KEY].code == ErrorCode.STALE_BROKER_EPOCH, answers[KEY]
    assert answers[KEY].records == b""


def test_caught_up_follower_rejoins_an_isr_of_one_under_steady_produce(tmp_path: Path) -> None:
    """Issue 24 §1 through the replica manager: with the ISR = {leader} and an acks=1 append between
    every two fetches of a caught-up follower, the leader's HW waits for it, so it is proposed back
    into the ISR. The partition's clock is the requests' (monotonic) one: the harness' wall clock
    (``clock_ms``, for timestamps) is another, and the produce path must not mix them up."""
    h = Harness(tmp_path, min_insync="1")
    h.apply(PartitionChangeRecord(TOPIC_ID, 0, isr=(101,)))
    h.produce(101, [b"a"], acks=1)
    h.replicate(102)
    assert h.proposals[101] == []  # not yet: it was behind, and an append comes before each fetch
    for i in range(3):
        h.now_ms += 50
        h.produce(101, [b"v%d" % i], acks=1)
        h.now_ms += 50
        h.replicate(102)
    assert [p.new_isr for p in h.proposals[101]] == [(101, 102)], "the caught-up follower never rejoined"
    for manager in h.managers.values():
        manager.close()
