"""GrpcBrokerClient against BrokerService over real gRPC (the FakeCluster double): leaders, retries.

Rules: ListOffsets and Fetch go to the partition leader; NOT_LEADER_OR_FOLLOWER is followed through
the answer's current_leader (KIP-951) or a metadata refresh; an unreachable leader makes the
client refresh metadata from the brokers still alive; a timestamp with no record maps to None.
"""

from __future__ import annotations

import pytest

from proto import errors
from proto.errors import ErrorCode
from spark.client import GrpcBrokerClient
from spark.options import EARLIEST_OFFSET, LATEST_OFFSET, TopicPartition
from storage.record_batch import iter_records

pytestmark = pytest.mark.e2e
TP0, TP1 = TopicPartition("c", 0), TopicPartition("c", 1)


@pytest.fixture
def cluster(fake_cluster):
    fake_cluster.create_topic("c", 2)
    for tp in (TP0, TP1):
        for b in range(3):
            fake_cluster.append(tp, [(None, b"v", (), 1000 * b + i) for i in range(10)])
    fake_cluster.append(TP0, [(None, b"uncommitted", (), 9999)], commit=False)
    fake_cluster.delete_before(TP1, 10)
    return fake_cluster


def client_for(cluster, **kwargs) -> GrpcBrokerClient:
    return GrpcBrokerClient([f"127.0.0.1:{cluster.ports[1]}"], retry_interval_ms=10, **kwargs)


def test_metadata_and_list_offsets(cluster) -> None:
    client = client_for(cluster)
    try:
        assert client.partition_counts(None) == {"c": 2}
        assert client.partition_counts(["c", "missing"]) == {"c": 2}
        assert client.list_offsets({TP0: EARLIEST_OFFSET, TP1: EARLIEST_OFFSET}) == {TP0: 0, TP1: 10}
        assert client.list_offsets({TP0: LATEST_OFFSET, TP1: LATEST_OFFSET}) == {TP0: 30, TP1: 30}
        assert client.list_offsets({TP0: 1005, TP1: 5000}) == {TP0: 15, TP1: None}
    finally:
        client.close()


def test_fetch_from_the_leader_and_follow_a_moved_leader(cluster) -> None:
    client = client_for(cluster)
    try:
        first = client.fetch(TP0, 12)
        assert first.error_code == ErrorCode.NONE and first.high_watermark == 30
        assert [r.offset for r in iter_records(first.records)][:1] == [10]  # the batch holding 12
        cluster.move_leader(TP0, 3)
        moved = client.fetch(TP0, 12)  # the old leader answers NOT_LEADER_OR_FOLLOWER naming node 3
        assert moved.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        again = client.fetch(TP0, 12)
        assert again.error_code == ErrorCode.NONE and again.records == first.records
        out_of_range = client.fetch(TP1, 3)
        assert (
            out_of_range.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and out_of_range.log_start_offset == 10
        )
    finally:
        client.close()


def test_dead_leader_is_replaced_through_metadata(cluster) -> None:
    """The leader's server stops: the client re-learns leaders from a live broker and carries on."""
    client = client_for(cluster)
    try:
        leader = cluster.logs[TP0].leader
        assert client.fetch(TP0, 0).error_code == ErrorCode.NONE
        cluster.servers[leader].stop(grace=None)
        cluster.move_leader(TP0, 1 + leader % 3)
        assert client.fetch(TP0, 0).error_code == ErrorCode.NETWORK_EXCEPTION
        result = client.fetch(TP0, 0)
        assert result.error_code == ErrorCode.NONE and result.high_watermark == 30
        assert client.list_offsets({TP0: LATEST_OFFSET}) == {TP0: 30}
    finally:
        client.close()


def test_no_broker_reachable_is_a_network_error(spark) -> None:
    """(Takes the Spark fixture only so that no gRPC thread exists before Spark forks its JVM.)"""
    client = GrpcBrokerClient(["127.0.0.1:1"], request_timeout_ms=500, retry_interval_ms=10)
    try:
        with pytest.raises(errors.NetworkException, match=r"no broker answered Metadata"):
            client.partition_counts(None)
    finally:
        client.close()
