"""Fetch from a follower broker on the Kafka listener (broker.kafka.handlers.replica_fetch): fencing by
replica set and broker epoch (KIP-903), the diverging epoch (KIP-595 / Fetch v12+), the HW in every
answer, the acks=all produce completed by the fetch that moves the HW, and KIP-227 sessions."""

from __future__ import annotations

import asyncio
import random
import struct
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from broker.kafka.handlers.context import BrokerServices
from broker.kafka.handlers.processor import RequestProcessor, build_handlers
from broker.metrics import KafkaRequestMetrics
from broker.replica.replica_manager import ProduceRequestPartition, ReplicaManager
from metadata.image import MetadataImage
from metadata.records import Endpoint, PartitionRecord, RegisterBrokerRecord, RemoveTopicRecord, TopicRecord
from proto.clock import wall_clock_ms
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey, RequestHeader, encode_request, parse_response
from proto.kafka.fetch_session import FetchSessionCache
from proto.kafka.topic_ids import uuid_of
from storage.record_batch import build_batch

T_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
OTHER_ID = "AAAAAAAAAAAAAAAAAAAAAg"
FOLLOWER, OUTSIDER = 102, 103
EPOCHS = {101: 10, 102: 20, 103: 30}
LEADER_EPOCH = 3


class _NoFetchers:
    def add_partition(self, *args) -> None: ...

    def remove_partition(self, tp) -> None: ...


class Leader:
    """Broker 101 leading t-0 and t-1 (replicas 101, 102) and other-0 (replicas 101, 103)."""

    def __init__(self, tmp_path: Path) -> None:
        image = MetadataImage()
        records: list = [
            RegisterBrokerRecord(b, f"inc-{b}", (Endpoint("PLAINTEXT", "h", 9000 + b),), fenced=False,
                                 broker_epoch=e)
            for b, e in EPOCHS.items()
        ]  # fmt: skip
        records += [
            TopicRecord("t", T_ID),
            PartitionRecord(T_ID, 0, (101, 102), (101, 102), 101, leader_epoch=LEADER_EPOCH),
            PartitionRecord(T_ID, 1, (101, 102), (101, 102), 101, leader_epoch=LEADER_EPOCH),
            TopicRecord("other", OTHER_ID),
            PartitionRecord(OTHER_ID, 0, (101, 103), (101, 103), 101, leader_epoch=LEADER_EPOCH),
        ]
        image.apply_batch(records, 1)
        self.manager = ReplicaManager(
            101, tmp_path, replica_lag_time_max_ms=1000, topic_defaults={}, fetchers=_NoFetchers(),
            send_alter_partition=lambda *_: None, on_deadline=lambda _ms: None, clock_ms=wall_clock_ms,
        )  # fmt: skip
        self.manager.apply_image(image, 0)
        self.services = BrokerServices(
            101, self.manager, lambda: 0, 5000, fetch_sessions=FetchSessionCache(random.Random(1))
        )
        self.processor = RequestProcessor(
            self.services,
            build_handlers(self.services),
            KafkaRequestMetrics(CollectorRegistry()),
            "PLAINTEXT",
        )
        self.produced: dict = {}

    def produce(self, index: int, values: list[bytes]) -> None:
        """An acks=all produce; its answer lands in ``produced`` once the HW passes it."""
        records = build_batch([(None, v, (), 0) for v in values])
        self.manager.produce(
            -1, 5000, [ProduceRequestPartition(("t", index), records, None)], 0, self.produced.update
        )

    def fetch(self, request: m.FetchRequest, version: int = 15) -> m.FetchResponse:
        frame = encode_request(RequestHeader(ApiKey.FETCH, version, 1, "replica"), request)

        async def call():
            outcome = self.processor.process(frame, "127.0.0.1:1")
            if not isinstance(outcome, (bytes, bytearray)):
                outcome = await outcome
            assert struct.unpack_from(">i", outcome)[0] == len(outcome) - 4
            return parse_response(ApiKey.FETCH, version, bytes(outcome[4:]))[1]

        return asyncio.run(call())

    def fetch_now(self, request: m.FetchRequest, version: int = 15) -> list[m.FetchResponsePartitionData]:
        """The partitions of the answer to ``request``, which must come at once (not parked)."""
        frame = encode_request(RequestHeader(ApiKey.FETCH, version, 1, "replica"), request)

        async def call():
            outcome = self.processor.process(frame, "127.0.0.1:1")
            if not isinstance(outcome, (bytes, bytearray)):
                outcome.cancel()  # the answer waits for the purgatory
                raise AssertionError(f"the fetch was parked: {request}")
            return parse_response(ApiKey.FETCH, version, bytes(outcome[4:]))[1]

        return [p for t in asyncio.run(call()).responses for p in t.partitions]


def replica_fetch(
    partitions: dict[int, tuple[int, int]],
    replica_id: int = FOLLOWER,
    broker_epoch: int | None = None,
    topic_id: str = T_ID,
    session: tuple[int, int] = (0, -1),
) -> m.FetchRequest:
    """partitions: index -> (fetch offset, last fetched epoch)."""
    parts = [
        m.FetchRequestFetchPartition(partition=i, current_leader_epoch=LEADER_EPOCH, fetch_offset=offset,
                                     last_fetched_epoch=last, partition_max_bytes=1 << 20)
        for i, (offset, last) in partitions.items()
    ]  # fmt: skip
    topics = [m.FetchRequestFetchTopic(topic_id=uuid_of(topic_id), partitions=parts)] if parts else []
    epoch = EPOCHS.get(replica_id, -1) if broker_epoch is None else broker_epoch
    return m.FetchRequest(
        replica_id=replica_id, replica_state=m.FetchRequestReplicaState(replica_id, epoch), max_wait_ms=0,
        min_bytes=1, session_id=session[0], session_epoch=session[1], topics=topics,
    )  # fmt: skip


def by_partition(response: m.FetchResponse) -> dict[int, m.FetchResponsePartitionData]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


@pytest.fixture
def leader(tmp_path: Path) -> Leader:
    return Leader(tmp_path)


def test_follower_fetch_moves_the_hw_and_completes_the_acks_all_produce_in_the_same_call(
    leader: Leader,
) -> None:
    """architecture.md "Offsets": the leader records the follower's LEO from its fetch offset; the HW is the
    ISR's minimum LEO and every answer carries it; the parked acks=all produce is answered then."""
    leader.produce(0, [b"a", b"b"])
    first = by_partition(leader.fetch(replica_fetch({0: (0, -1)})))[0]
    assert (first.error_code, first.high_watermark, bool(first.records)) == (0, 0, True)
    assert leader.produced == {}, "acknowledged before the follower had the records"
    second = by_partition(leader.fetch(replica_fetch({0: (2, LEADER_EPOCH)})))[0]
    assert (second.error_code, second.high_watermark, second.log_start_offset) == (0, 2, 0)
    assert leader.produced[("t", 0)].code == ErrorCode.NONE


@pytest.mark.parametrize(
    ("request_", "version", "code"),
    [
        (replica_fetch({0: (0, -1)}, broker_epoch=EPOCHS[FOLLOWER] - 1), 15, ErrorCode.STALE_BROKER_EPOCH),
        (replica_fetch({0: (0, -1)}, broker_epoch=EPOCHS[FOLLOWER]), 15, ErrorCode.NONE),
        (replica_fetch({0: (0, -1)}), 14, ErrorCode.NONE),  # no broker epoch below v15: not checked
        (replica_fetch({0: (0, -1)}, replica_id=OUTSIDER), 15, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (replica_fetch({0: (0, -1)}, topic_id="AAAAAAAAAAAAAAAAAAAABQ"), 15, ErrorCode.UNKNOWN_TOPIC_ID),
    ],
    ids=["stale-broker-epoch", "current-broker-epoch", "v14-no-epoch", "not-a-replica", "unknown-topic-id"],
)
def test_fencing(leader: Leader, request_: m.FetchRequest, version: int, code: ErrorCode) -> None:
    """KIP-903: a previous incarnation of the follower (older broker epoch) must not count toward the HW;
    a broker outside the replica set is not a follower (Kafka's NOT_LEADER_OR_FOLLOWER)."""
    leader.produce(0, [b"a"])
    answer = by_partition(leader.fetch(request_, version))[0]
    assert answer.error_code == code, answer
    if code != ErrorCode.NONE:
        assert not answer.records and leader.produced == {}


def test_outsider_is_not_a_follower_of_a_partition_it_does_not_replicate(leader: Leader) -> None:
    answer = by_partition(leader.fetch(replica_fetch({0: (0, -1)}, topic_id=OTHER_ID)))[0]
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    answer = by_partition(leader.fetch(replica_fetch({0: (0, -1)}, replica_id=OUTSIDER, topic_id=OTHER_ID)))[
        0
    ]
    assert answer.error_code == ErrorCode.NONE


@pytest.mark.parametrize(
    ("last_fetched_epoch", "expected"),
    [(LEADER_EPOCH - 1, (LEADER_EPOCH - 1, 0)), (LEADER_EPOCH, (LEADER_EPOCH, 2))],
    ids=["epoch-the-leader-never-wrote", "same-epoch-past-the-leaders-end"],
)
def test_diverging_epoch_instead_of_records(
    leader: Leader, last_fetched_epoch: int, expected: tuple[int, int]
) -> None:
    """KIP-595 (Fetch v12+): a follower whose last fetched epoch ends earlier on the leader gets that
    epoch's end on the leader — an older epoch ends where the leader's first epoch starts (0 here), the
    current one at the leader's LEO (2) — with no records; its fetch offset is not taken as its LEO."""
    leader.produce(0, [b"a", b"b"])
    answer = by_partition(leader.fetch(replica_fetch({0: (5, last_fetched_epoch)})))[0]
    assert answer.error_code == ErrorCode.NONE and not answer.records
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == expected
    assert answer.high_watermark == 0 and leader.produced == {}


def test_incremental_session_omits_idle_partitions(leader: Leader) -> None:
    """KIP-227: after the full request that opens the session, an incremental one lists only changed
    partitions and the answer leaves out partitions with nothing new (t-1 stays idle throughout)."""
    full = leader.fetch(replica_fetch({0: (0, -1), 1: (0, -1)}, session=(0, 0)))
    assert full.session_id != 0 and set(by_partition(full)) == {0, 1}
    session = full.session_id
    idle = leader.fetch(replica_fetch({}, session=(session, 1)))
    assert (idle.error_code, by_partition(idle)) == (0, {}), "nothing new anywhere: an empty answer"
    leader.produce(0, [b"a"])
    data = by_partition(leader.fetch(replica_fetch({}, session=(session, 2))))
    assert set(data) == {0} and data[0].records, "t-0 has records; idle t-1 is left out"
    moved = by_partition(leader.fetch(replica_fetch({0: (1, LEADER_EPOCH)}, session=(session, 3))))
    assert set(moved) == {0} and moved[0].high_watermark == 1 and leader.produced[("t", 0)].code == 0
    stale = leader.fetch(replica_fetch({}, session=(session, 3)))
    assert (stale.error_code, stale.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, [])
    gone = leader.fetch(replica_fetch({}, session=(session + 1, 1)))
    assert gone.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


UNKNOWN_ID = "AAAAAAAAAAAAAAAAAAAABQ"


@pytest.mark.parametrize("session", [(0, -1), (0, 0)], ids=["sessionless", "opening-a-session"])
def test_an_unknown_topic_id_is_answered_at_once_not_after_the_long_poll(
    leader: Leader, session: tuple[int, int]
) -> None:
    """A follower that learned of a new topic before its leader did fetches it with a topic id the
    leader does not know yet: UNKNOWN_TOPIC_ID at once, which the follower retries after
    replica.fetch.backoff.ms. Parked for max_wait_ms instead (the request had no partition to watch),
    the first acks=all produce to the new topic timed out (test_kip101_processes, 1 run in 9 under
    load: the answer came 5 s later). With a known partition that has nothing to read beside it, the
    request is answered at once too, and the known one carries its HW."""
    unknown = replica_fetch({0: (0, -1)}, topic_id=UNKNOWN_ID, session=session)
    unknown.max_wait_ms = 30_000
    answer = leader.fetch_now(unknown)
    assert [(p.partition_index, p.error_code) for p in answer] == [(0, ErrorCode.UNKNOWN_TOPIC_ID)]
    mixed = replica_fetch({0: (0, -1)}, session=session)
    mixed.topics += unknown.topics
    mixed.max_wait_ms = 30_000
    answer = leader.fetch_now(mixed)
    assert sorted((p.error_code, p.high_watermark) for p in answer) == [
        (ErrorCode.NONE, 0), (ErrorCode.UNKNOWN_TOPIC_ID, -1)
    ]  # fmt: skip
    parked = replica_fetch({0: (0, -1)}, session=session)
    parked.max_wait_ms = 30_000
    with pytest.raises(AssertionError, match="parked"):
        leader.fetch_now(parked)  # the control: nothing to read and no error waits for data


def test_a_deleted_topic_leaves_the_session_by_the_id_the_follower_forgets_it_with(leader: Leader) -> None:
    """Issue 24 §1: a topic is deleted while a follower fetches it in a session. The follower forgets its
    partitions by the topic id it fetched them with; the leader's metadata no longer knows that id, yet
    its session must drop them (Kafka's FetchSession forgets by TopicIdPartition). Else every later
    fetch of the session is answered at once, with UNKNOWN_TOPIC_OR_PARTITION for the deleted topic
    (which the follower ignores), and the two brokers spin until the connection drops."""
    full = leader.fetch(replica_fetch({0: (0, -1), 1: (0, -1)}, session=(0, 0)))
    session = full.session_id
    assert session != 0 and set(by_partition(full)) == {0, 1}
    leader.manager.image.apply_batch([RemoveTopicRecord(T_ID)], leader.manager.image.offset + 1)
    leader.manager.apply_image(leader.manager.image, 1)
    assert ("t", 0) not in leader.manager.partitions
    forget = replica_fetch({}, session=(session, 1))
    forget.forgotten_topics_data = [m.FetchRequestForgottenTopic(topic_id=uuid_of(T_ID), partitions=[0, 1])]
    forget.max_wait_ms = 30_000
    with pytest.raises(AssertionError, match="parked"):
        leader.fetch_now(forget)  # nothing left in the session: a long poll, not an error at once
    idle = replica_fetch({}, session=(session, 2))
    idle.max_wait_ms = 30_000
    with pytest.raises(AssertionError, match="parked"):
        leader.fetch_now(idle)
