"""A broker's Kafka listener against real processes (3 controllers + 3 brokers, one shared cluster for
the module), with raw Kafka requests (``tests.kafka_call``) so that the broker's own answers are seen:
every bad Produce gets its error code and appends nothing; leader-epoch fencing of Fetch and
ListOffsets; fetch ranges, long polls, ListOffsets; gRPC admin calls through a broker; a controlled
shutdown moves leadership away and a restart rejoins the ISR.

docs/architecture.md "Core rules" and issue 5 §2: validation happens before anything is appended.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import crc32c
import pytest
from broker_cluster import BrokerCluster, batch, running_cluster, wait_for

from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka_types import NO_OFFSET
from pykraft.admin import AdminClient
from storage.batch_header import ATTRIBUTES_POS, CRC_POS
from storage.record_batch import decode_records
from tests.kafka_call import (
    EARLIEST,
    FETCH_VERSION,
    LATEST,
    PRODUCE_VERSION,
    KafkaSocket,
    kafka_call,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "requests"
MAX_MESSAGE_BYTES = 2048


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    # Nothing here is killed: a longer session keeps a loaded machine from fencing a slow broker
    # (which would move leaders under the tests' feet).
    data_dir = Path(tmp_path_factory.mktemp("broker-requests"))
    with running_cluster(data_dir, **{"broker.session.timeout.ms": "6000"}) as bc:
        bc.create_topic(TOPIC, min_insync_replicas="2", max_message_bytes=str(MAX_MESSAGE_BYTES))
        bc.wait_isr(TOPIC, {101, 102, 103})
        yield bc


@dataclass(frozen=True)
class LeaderMoves:
    """What ``leader_moves`` did to TOPIC: leader ``first`` wrote ``offsets[0]`` in ``epochs[0]``, a
    controlled shutdown gave ``second`` ``epochs[1]`` (it wrote ``offsets[1]``), and after ``first``
    restarted a preferred election gave it ``epochs[2]``."""

    first: int
    second: int
    epochs: tuple[int, int, int]
    offsets: tuple[int, int]


@pytest.fixture(scope="module")
def leader_moves(cluster: BrokerCluster) -> LeaderMoves:
    """Two leader changes on TOPIC, for the tests that need an older leader epoch (stale-epoch cases,
    OffsetsForLeaderEpoch). A fixture, not an earlier test: each test that checks this state asks
    for it, so the tests pass alone and in any order (issue 14 §3)."""
    first = cluster.leader(TOPIC)
    epoch = cluster.describe(TOPIC).leader_epoch
    before = cluster.produce(first, TOPIC, [b"before-shutdown"])
    assert before.code == ErrorCode.NONE, before
    assert cluster.cluster.stop_node(cluster.broker(first), timeout_s=20.0), "broker did not stop gracefully"
    second = cluster.leader(TOPIC)
    assert second != first
    during = cluster.produce(second, TOPIC, [b"while-down"])
    assert during.code == ErrorCode.NONE, during
    cluster.cluster.start_node(cluster.broker(first))
    cluster.wait_isr(TOPIC, {101, 102, 103})
    wait_for(lambda: not cluster.admin.elect_leaders("preferred", [(TOPIC, 0)])[0].error
             or cluster.describe(TOPIC).leader == first, 20, "preferred election")  # fmt: skip
    # every replica acts on the last change before a test sends a follower or an old epoch anything
    wait_for(lambda: cluster.all_brokers_lead_or_follow(TOPIC, 1), 20, "every replica on the last epoch")
    assert cluster.leader(TOPIC) == first
    final = cluster.describe(TOPIC).leader_epoch
    return LeaderMoves(first, second, (epoch, epoch + 1, final), (before.base_offset, during.base_offset))


def test_controlled_shutdown_moves_leadership_and_restart_rejoins(
    cluster: BrokerCluster, leader_moves: LeaderMoves
) -> None:
    """SIGTERM = controlled shutdown: the leader's partitions move away before it exits (no acked write
    lost); restarted, it recovers its log, rejoins the ISR, and preferred election moves leadership back
    (two leader changes: two epoch bumps)."""
    moves = leader_moves
    assert moves.first == 101, "the preferred replica (first in assignment order) led first"
    assert moves.second != moves.first
    assert moves.epochs[2] == moves.epochs[0] + 2
    assert moves.offsets[1] == moves.offsets[0] + 1, "the new leader kept the acknowledged record"
    records = dict(cluster.read_all(moves.first, TOPIC))
    assert [records[o] for o in moves.offsets] == [b"before-shutdown", b"while-down"]


def _corrupt_crc(data: bytes) -> bytes:
    buf = bytearray(data)
    buf[-1] ^= 0xFF
    return bytes(buf)


def _with_codec(data: bytes, codec: int) -> bytes:
    """A batch whose attributes name ``codec``, with a CRC that matches (so only the codec is wrong)."""
    buf = bytearray(data)
    (attributes,) = struct.unpack_from(">h", buf, ATTRIBUTES_POS)
    struct.pack_into(">h", buf, ATTRIBUTES_POS, (attributes & ~0x7) | codec)
    struct.pack_into(">I", buf, CRC_POS, crc32c.crc32c(bytes(buf[ATTRIBUTES_POS:])))
    return bytes(buf)


E = ErrorCode
ONE = batch([b"x"])
# (id, topic, partition, target, records, acks, expected code). Kafka's Produce carries no leader
# epoch (fencing by epoch is Fetch's and ListOffsets': test_stale_and_newer_epochs_are_fenced).
BAD_PRODUCES = [
    ("unknown-topic", "no-such-topic", 0, "leader", ONE, -1, E.UNKNOWN_TOPIC_OR_PARTITION),
    ("unknown-partition", TOPIC, 7, "leader", ONE, -1, E.UNKNOWN_TOPIC_OR_PARTITION),
    ("not-leader", TOPIC, 0, "follower", ONE, -1, E.NOT_LEADER_OR_FOLLOWER),
    ("corrupt-crc", TOPIC, 0, "leader", _corrupt_crc(batch([b"x" * 20])), -1, E.CORRUPT_MESSAGE),
    ("truncated", TOPIC, 0, "leader", batch([b"x" * 20])[:-3], -1, E.CORRUPT_MESSAGE),
    ("empty", TOPIC, 0, "leader", b"", -1, E.CORRUPT_MESSAGE),
    ("oversize", TOPIC, 0, "leader", batch([bytes(MAX_MESSAGE_BYTES)]), -1, E.MESSAGE_TOO_LARGE),
    ("codec-5", TOPIC, 0, "leader", _with_codec(ONE, 5), -1, E.UNSUPPORTED_COMPRESSION_TYPE),
    ("codec-7", TOPIC, 0, "leader", _with_codec(ONE, 7), 1, E.UNSUPPORTED_COMPRESSION_TYPE),
    ("acks-2", TOPIC, 0, "leader", ONE, 2, E.INVALID_REQUIRED_ACKS),
    ("acks-minus-2", TOPIC, 0, "leader", ONE, -2, E.INVALID_REQUIRED_ACKS),
    # acks=0 gets no answer: the broker closes the connection (the helper's NETWORK_EXCEPTION)
    ("acks-0-not-leader", TOPIC, 0, "follower", ONE, 0, E.NETWORK_EXCEPTION),
    ("acks-0-corrupt-crc", TOPIC, 0, "leader", _corrupt_crc(batch([b"x" * 20])), 0, E.NETWORK_EXCEPTION),
]  # fmt: skip


@pytest.mark.parametrize(
    ("topic", "partition", "target", "records", "acks", "expected"),
    [case[1:] for case in BAD_PRODUCES],
    ids=[case[0] for case in BAD_PRODUCES],
)
def test_bad_produce_gets_its_error_and_appends_nothing(
    cluster: BrokerCluster, topic, partition, target, records, acks, expected
) -> None:
    """Every check runs before the append: the partition's log end offset does not move."""
    leader = cluster.leader(TOPIC)
    follower = next(b for b in (101, 102, 103) if b != leader)
    before = cluster.produce(leader, TOPIC, [b"marker"]).base_offset
    result = cluster.produce_raw(
        leader if target == "leader" else follower, topic, records, acks=acks, partition=partition
    )
    assert result.code == expected, result
    assert result.message, "every error carries a message a person can act on"
    after = cluster.produce(leader, TOPIC, [b"marker"]).base_offset
    assert after == before + 1, f"something was appended between {before} and {after}"


def test_not_leader_names_the_leader(cluster: BrokerCluster) -> None:
    """KIP-951 (Produce v10): NOT_LEADER_OR_FOLLOWER carries the current leader and its epoch."""
    leader = cluster.leader(TOPIC)
    follower = next(b for b in (101, 102, 103) if b != leader)
    result = cluster.produce(follower, TOPIC, [b"x"])
    epoch = cluster.describe(TOPIC).leader_epoch
    assert (result.code, result.leader_id, result.leader_epoch) == (E.NOT_LEADER_OR_FOLLOWER, leader, epoch)


def test_acks_zero_and_one_append(cluster: BrokerCluster) -> None:
    """acks=1 is answered with its offset; acks=0 gets no answer but is appended right after it."""
    leader = cluster.leader(TOPIC)
    one = cluster.produce(leader, TOPIC, [b"acks-1"], acks=1)
    zero = cluster.produce(leader, TOPIC, [b"acks-0"], acks=0)
    assert (one.code, zero.code) == (ErrorCode.NONE, ErrorCode.NONE), (one, zero)
    assert zero.base_offset == NO_OFFSET, "an acks=0 produce has no answer to carry an offset"
    wait_for(
        lambda: cluster.high_watermark(leader, TOPIC) > one.base_offset + 1, 10, "HW past the acks=0 record"
    )
    records = dict(cluster.read_all(leader, TOPIC))
    assert (records[one.base_offset], records[one.base_offset + 1]) == (b"acks-1", b"acks-0")


def test_fetch_out_of_range_reports_the_valid_range(cluster: BrokerCluster) -> None:
    leader = cluster.leader(TOPIC)
    hw = cluster.high_watermark(leader, TOPIC)
    data = cluster.fetch(leader, TOPIC, hw + 10)
    assert data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (data.log_start_offset, data.high_watermark) == (0, hw)
    assert data.records == b""


def test_fetch_from_follower_and_stale_epoch_are_refused(
    cluster: BrokerCluster, leader_moves: LeaderMoves
) -> None:
    leader = cluster.leader(TOPIC)
    follower = next(b for b in (101, 102, 103) if b != leader)
    epoch = cluster.describe(TOPIC).leader_epoch
    assert cluster.fetch(follower, TOPIC, 0).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    stale = cluster.fetch(leader, TOPIC, 0, current_leader_epoch=epoch - 1)
    assert stale.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert (stale.current_leader.leader_id, stale.current_leader.leader_epoch) == (leader, epoch)


FENCING = [
    ("fetch-stale", "fetch", -1, E.FENCED_LEADER_EPOCH),
    ("fetch-newer", "fetch", +1, E.UNKNOWN_LEADER_EPOCH),
    ("fetch-current", "fetch", 0, E.NONE),
    ("list-offsets-stale", "list_offsets", -1, E.FENCED_LEADER_EPOCH),
    ("list-offsets-newer", "list_offsets", +1, E.UNKNOWN_LEADER_EPOCH),
    ("list-offsets-current", "list_offsets", 0, E.NONE),
]


@pytest.mark.parametrize(
    ("api", "epoch_delta", "expected"), [c[1:] for c in FENCING], ids=[c[0] for c in FENCING]
)
def test_stale_and_newer_epochs_are_fenced(
    cluster: BrokerCluster, leader_moves: LeaderMoves, api: str, epoch_delta: int, expected: ErrorCode
) -> None:
    """KIP-320: a request naming an older leader epoch than the leader's gets FENCED_LEADER_EPOCH, a
    newer one UNKNOWN_LEADER_EPOCH (the broker has not seen that change yet). (An older epoch exists
    after ``leader_moves``.)"""
    leader = cluster.leader(TOPIC)
    epoch = cluster.describe(TOPIC).leader_epoch + epoch_delta
    if api == "fetch":
        code = cluster.fetch(leader, TOPIC, 0, current_leader_epoch=epoch).error_code
    else:
        code = cluster.list_offset(leader, TOPIC, LATEST, current_leader_epoch=epoch).error_code
    assert code == expected


def test_fetch_returns_only_committed_records_within_max_bytes(cluster: BrokerCluster) -> None:
    leader = cluster.leader(TOPIC)
    first = cluster.produce(leader, TOPIC, [b"a" * 100]).base_offset
    cluster.produce(leader, TOPIC, [b"b" * 100])
    data = cluster.fetch(leader, TOPIC, first, max_bytes=1)
    records = decode_records(data.records)
    assert [r.offset for r in records] == [first], "one whole batch even when over max_bytes"
    assert all(
        r.offset < data.high_watermark for r in decode_records(cluster.fetch(leader, TOPIC, 0).records)
    )


def test_long_poll_is_woken_by_a_produce(cluster: BrokerCluster) -> None:
    """A fetch parked at the HW answers as soon as the HW moves, not at max_wait_ms. The produce goes
    on the fetch's own connection after it: a broker handles a connection's requests in arrival order
    (answering in that order), so the fetch is parked before the record is appended."""
    leader = cluster.leader(TOPIC)
    hw = cluster.high_watermark(leader, TOPIC)
    part = m.FetchRequestFetchPartition(partition=0, fetch_offset=hw, partition_max_bytes=1 << 20)
    fetch = m.FetchRequest(
        max_wait_ms=8000, min_bytes=1, topics=[m.FetchRequestFetchTopic(TOPIC, partitions=[part])]
    )
    data = m.ProduceRequestPartitionProduceData(0, batch([b"wake-up"]))
    produce = m.ProduceRequest(
        acks=1, timeout_ms=5000, topic_data=[m.ProduceRequestTopicProduceData(TOPIC, [data])]
    )
    with KafkaSocket(cluster.kafka_address(leader), timeout_s=15) as conn:
        started = time.monotonic()
        fetch_id = conn.send(fetch, FETCH_VERSION)
        produce_id = conn.send(produce, PRODUCE_VERSION)
        answer = conn.receive(fetch, FETCH_VERSION, fetch_id, timeout_s=15).responses[0].partitions[0]
        elapsed = time.monotonic() - started
        produced = conn.receive(produce, PRODUCE_VERSION, produce_id).responses[0].partition_responses[0]
    assert (produced.error_code, produced.base_offset) == (0, hw), produced
    assert answer.error_code == 0 and answer.high_watermark == hw + 1, answer
    assert [r.value for r in decode_records(bytes(answer.records))] == [b"wake-up"]
    assert elapsed < 5.0, f"the long poll took {elapsed:.1f} s: not woken by the HW"


def test_long_poll_without_data_waits_max_wait(cluster: BrokerCluster) -> None:
    leader = cluster.leader(TOPIC)
    hw = cluster.high_watermark(leader, TOPIC)
    started = time.monotonic()
    data = cluster.fetch(leader, TOPIC, hw, max_wait_ms=400)
    elapsed = time.monotonic() - started
    assert data.error_code == 0 and data.records == b""
    assert 0.3 <= elapsed < 5.0, elapsed


def test_list_offsets_earliest_latest_and_by_timestamp(cluster: BrokerCluster) -> None:
    leader = cluster.leader(TOPIC)
    stamp = int(time.time() * 1000) + 60_000  # in the future: later than every earlier record
    offset = cluster.produce_raw(leader, TOPIC, batch([b"timed"], stamp)).base_offset
    hw = cluster.high_watermark(leader, TOPIC)
    assert hw == offset + 1
    assert cluster.list_offset(leader, TOPIC, EARLIEST).offset == 0
    latest = cluster.list_offset(leader, TOPIC, LATEST)
    assert (latest.error_code, latest.offset) == (0, hw)
    by_time = cluster.list_offset(leader, TOPIC, stamp)
    assert (by_time.error_code, by_time.offset, by_time.timestamp) == (0, offset, stamp)
    assert by_time.leader_epoch == cluster.describe(TOPIC).leader_epoch
    assert cluster.list_offset(leader, TOPIC, stamp + 1).offset == NO_OFFSET, "no record at or after it"


def test_admin_calls_through_a_broker_reach_the_controller(cluster: BrokerCluster) -> None:
    with AdminClient(cluster.broker(102).address, timeout_s=20) as admin:
        assert TOPIC in {t.name for t in admin.list_topics()}
        assert admin.describe_topics([TOPIC])[0].partitions[0].replicas == (101, 102, 103)


def test_offsets_for_leader_epoch(cluster: BrokerCluster, leader_moves: LeaderMoves) -> None:
    """The leader answers the end of an epoch from its leader-epoch cache (KIP-101/KIP-279): after the
    two leader changes of ``leader_moves``, the first epoch ends after its last record, the second
    (the other leader) after its one record, and the latest runs to the log end offset. A stale
    current epoch is fenced."""
    leader = cluster.leader(TOPIC)
    current = cluster.describe(TOPIC).leader_epoch
    spec = cluster.broker(leader)

    def ask(epoch: int, current_epoch: int = current) -> m.OffsetForLeaderEpochResponseEpochEndOffset:
        """OffsetForLeaderEpoch v4 on the leader's Kafka listener (what a follower's fetcher sends)."""
        part = m.OffsetForLeaderEpochRequestOffsetForLeaderPartition(
            partition=0, current_leader_epoch=current_epoch, leader_epoch=epoch
        )
        request = m.OffsetForLeaderEpochRequest(
            replica_id=-1, topics=[m.OffsetForLeaderEpochRequestOffsetForLeaderTopic(TOPIC, [part])]
        )

        return kafka_call(spec.kafka_address, request, 4).topics[0].partitions[0]

    (e0, e1, _), (o0, o1) = leader_moves.epochs, leader_moves.offsets
    first, second = ask(e0), ask(e1)
    assert (first.error_code, first.leader_epoch, first.end_offset) == (0, e0, o0 + 1)
    assert (second.error_code, second.leader_epoch, second.end_offset) == (0, e1, o1 + 1)
    latest = ask(current)
    assert latest.leader_epoch == current and latest.end_offset >= o1 + 1
    assert ask(e0, current - 1).error_code == ErrorCode.FENCED_LEADER_EPOCH
