"""KafkaBrokerClient against Kafka listeners over real sockets (the FakeCluster double).

Rules: ListOffsets and Fetch go to the partition leader; NOT_LEADER_OR_FOLLOWER is followed through
the answer's current_leader (KIP-951) or a metadata refresh; an unreachable leader makes the client
refresh metadata from the brokers still alive; a timestamp with no record maps to None; only records
below the HW are served (OFFSET_OUT_OF_RANGE outside [log start, HW]); a preferred read replica
named by the leader (KIP-392) serves the following fetches until it answers an error, then the leader.
No Spark here: the fake listeners are plain threads, which Spark's JVM fork does not mind.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_brokers import FakeCluster

from proto import errors
from proto.errors import ErrorCode
from proto.kafka.api import ApiKey
from proto.kafka_types import TopicPartition
from spark.client import KafkaBrokerClient
from spark.options import EARLIEST_OFFSET, LATEST_OFFSET
from spark.planning import OffsetRange
from spark.reader import ReadSettings, read_range
from storage.record_batch import iter_records

pytestmark = pytest.mark.e2e
TP0, TP1 = TopicPartition("c", 0), TopicPartition("c", 1)


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    try:
        fake.create_topic("c", 2)
        for tp in (TP0, TP1):
            for b in range(3):
                fake.append(tp, [(None, b"v", (), 1000 * b + i) for i in range(10)])
        fake.append(TP0, [(None, b"uncommitted", (), 9999)], commit=False)
        fake.delete_before(TP1, 10)
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def client(cluster) -> Iterator[KafkaBrokerClient]:
    c = KafkaBrokerClient([f"127.0.0.1:{cluster.ports[1]}"], retry_interval_ms=10, request_timeout_ms=5_000)
    try:
        yield c
    finally:
        c.close()


def offsets(result) -> list[int]:
    return [r.offset for r in iter_records(bytes(result.records))]


def test_metadata_and_list_offsets_stop_at_the_high_watermark(client) -> None:
    assert client.partition_counts(None) == {"c": 2}
    assert client.partition_counts(["c", "missing"]) == {"c": 2}
    assert client.list_offsets({TP0: EARLIEST_OFFSET, TP1: EARLIEST_OFFSET}) == {TP0: 0, TP1: 10}
    # TP0's log end offset is 31 (one uncommitted record): LATEST is the HW, 30
    assert client.list_offsets({TP0: LATEST_OFFSET, TP1: LATEST_OFFSET}) == {TP0: 30, TP1: 30}
    assert client.list_offsets({TP0: 1005, TP1: 5000}) == {TP0: 15, TP1: None}


def test_fetch_serves_committed_batches_and_out_of_range_outside_them(client) -> None:
    first = client.fetch(TP0, 12)
    assert first.error_code == ErrorCode.NONE and first.high_watermark == 30
    assert offsets(first) == list(range(10, 30))  # from the batch holding 12; never the record at 30
    at_hw = client.fetch(TP0, 30, max_wait_ms=0)
    assert at_hw.error_code == ErrorCode.NONE and offsets(at_hw) == []
    above_hw = client.fetch(TP0, 31, max_wait_ms=0)
    assert above_hw.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and above_hw.high_watermark == 30
    below_start = client.fetch(TP1, 3)
    assert below_start.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and below_start.log_start_offset == 10


def test_a_moved_leader_is_followed_through_the_answer(cluster, client) -> None:
    first = client.fetch(TP0, 12)
    old_leader = cluster.logs[TP0].leader
    cluster.move_leader(TP0, 3)
    moved = client.fetch(TP0, 12)  # the old leader answers NOT_LEADER_OR_FOLLOWER naming node 3
    assert moved.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    again = client.fetch(TP0, 12)
    assert again.error_code == ErrorCode.NONE and bytes(again.records) == bytes(first.records)
    assert cluster.fetches_by_node == {old_leader: 2, 3: 1}
    assert client.list_offsets({TP0: LATEST_OFFSET}) == {TP0: 30}  # ListOffsets retries via metadata


def test_a_dead_leader_is_replaced_through_metadata(cluster, client) -> None:
    """The leader's listener closes: the client re-learns leaders from a live broker and carries on."""
    leader = cluster.logs[TP0].leader
    assert client.fetch(TP0, 0).error_code == ErrorCode.NONE
    cluster.stop_broker(leader)
    cluster.move_leader(TP0, 1 + leader % 3)
    assert client.fetch(TP0, 0).error_code == ErrorCode.NETWORK_EXCEPTION
    result = client.fetch(TP0, 0)
    assert result.error_code == ErrorCode.NONE and result.high_watermark == 30
    assert client.list_offsets({TP0: LATEST_OFFSET}) == {TP0: 30}


def test_the_preferred_read_replica_is_honoured_then_left_on_error(cluster, client) -> None:
    leader = cluster.logs[TP0].leader
    replica = 1 + leader % 3
    cluster.set_preferred_replica(TP0, replica, high_watermark=20)
    first = client.fetch(TP0, 12)  # the leader names the replica (no records); the client asks it
    assert first.error_code == ErrorCode.NONE
    assert first.high_watermark == 20 and offsets(first) == list(range(10, 20))  # the replica's HW
    second = client.fetch(TP0, 20, max_wait_ms=0)
    assert second.error_code == ErrorCode.NONE and offsets(second) == []
    assert cluster.fetches_by_node == {leader: 1, replica: 2}  # straight to the replica
    cluster.set_preferred_replica(TP0, -1, high_watermark=0)  # the replica stops serving TP0
    third = client.fetch(TP0, 20)  # NOT_LEADER_OR_FOLLOWER from the replica: the leader, same call
    assert third.error_code == ErrorCode.NONE and third.high_watermark == 30
    assert offsets(third) == list(range(20, 30))
    assert cluster.fetches_by_node == {leader: 2, replica: 3}


def test_a_dead_preferred_replica_sends_the_client_back_to_the_leader(cluster, client) -> None:
    leader = cluster.logs[TP0].leader
    replica = 1 + leader % 3
    cluster.set_preferred_replica(TP0, replica, high_watermark=30)
    assert offsets(client.fetch(TP0, 0)) == list(range(30))
    cluster.stop_broker(replica)
    cluster.set_preferred_replica(TP0, -1, high_watermark=0)
    result = client.fetch(TP0, 0)
    assert result.error_code == ErrorCode.NONE and offsets(result) == list(range(30))


def test_read_range_through_a_lagging_replica_and_a_leader_move(cluster, client) -> None:
    """The reader gets every offset of its range once, while the replica's HW catches up and the
    leader moves in the middle of the read."""
    leader = cluster.logs[TP0].leader
    replica = 1 + leader % 3
    cluster.set_preferred_replica(TP0, replica, high_watermark=10)

    def hook(count: int) -> None:
        if count == 3:
            cluster.logs[TP0].follower_high_watermark = 20
        if count == 5:
            cluster.set_preferred_replica(TP0, -1, high_watermark=0)
            cluster.move_leader(TP0, 1 + replica % 3)

    cluster.fetch_hook = hook
    settings = ReadSettings(include_headers=False, fail_on_data_loss=True, poll_timeout_ms=30_000)
    batches = list(read_range(client, OffsetRange(TP0, 5, 30), settings))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(5, 30))


def test_no_broker_reachable_is_a_network_error() -> None:
    client = KafkaBrokerClient(["127.0.0.1:1"], request_timeout_ms=500, retry_interval_ms=10)
    try:
        with pytest.raises(errors.NetworkException, match=r"no broker answered Metadata"):
            client.partition_counts(None)
    finally:
        client.close()


def test_a_broker_without_the_versions_used_is_refused_by_name(cluster) -> None:
    """ApiVersions on connect: a listener without Fetch v12 gets UnsupportedVersionError naming Fetch."""
    answer = cluster.answer

    def old_broker(node_id, api_key, request):
        response = answer(node_id, api_key, request)
        if api_key == ApiKey.API_VERSIONS:
            for key in response.api_keys:
                if key.api_key == ApiKey.FETCH:
                    key.max_version = 11
        return response

    cluster.answer = old_broker
    client = KafkaBrokerClient([f"127.0.0.1:{cluster.ports[1]}"], retry_interval_ms=10)
    try:
        with pytest.raises(
            errors.UnsupportedVersionError, match=r"FETCH versions 4-11.*needs version 12"
        ):
            client.partition_counts(None)
    finally:
        client.close()
