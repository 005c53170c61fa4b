"""A running LocalCluster's observability: each node's Prometheus ``/metrics`` (proto.runtime.metrics,
broker.metrics, metadata.metrics) moves with the cluster, and gRPC reflection lists the services.

Rules under test: exactly one controller reports itself active (Kafka's ActiveControllerCount summed
over the quorum is 1); after a produce every replica's LEO and HW reach the records written; killing
a follower makes the leader report the partition under-replicated and count an ISR shrink, and its
return counts an expansion; nothing goes offline while a leader lives.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from broker_cluster import BrokerCluster, running_cluster, scrape, value, wait_for
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

pytestmark = pytest.mark.integration
TOPIC = "metrics"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("metrics"))) as bc:
        yield bc


@pytest.fixture(scope="module")
def topic(cluster: BrokerCluster) -> str:
    """The module's topic, created once by whichever test asks first (the order is shuffled)."""
    cluster.create_topic(TOPIC)
    return TOPIC


def test_exactly_one_active_controller_and_raft_state(cluster: BrokerCluster) -> None:
    controllers = cluster.cluster.controller_nodes
    wait_for(
        lambda: sum(value(c, "pykraft_controller_active") or 0 for c in controllers) == 1,
        30, "one active controller",
    )  # fmt: skip
    active = cluster.active_controller()
    assert value(active, "pykraft_raft_term") >= 1
    assert value(active, "pykraft_raft_commit_index") > 0
    assert value(active, "pykraft_controller_registered_brokers") == len(cluster.cluster.broker_nodes)
    lags = {k[1]: v for k, v in scrape(active).items() if k[0] == "pykraft_raft_voter_lag_entries"}
    assert len(lags) == len(controllers) - 1, lags


def test_leo_hw_and_request_metrics_move_after_produce(cluster: BrokerCluster, topic: str) -> None:
    leader = cluster.leader(TOPIC)
    produced = cluster.produce(leader, TOPIC, [b"a", b"b", b"c"], acks=-1)
    assert produced.code.name == "NONE", produced
    labels = {"topic": TOPIC, "partition": "0"}
    for spec in cluster.cluster.broker_nodes:
        wait_for(
            lambda spec=spec: value(spec, "pykraft_partition_log_end_offset", **labels) == 3
            and value(spec, "pykraft_partition_high_watermark", **labels) == 3,
            30, f"LEO and HW 3 on {spec.name}",
        )  # fmt: skip
    leader_spec = cluster.broker(leader)
    assert value(leader_spec, "pykraft_kafka_requests_total", api="Produce") >= 1
    assert value(leader_spec, "pykraft_kafka_request_latency_seconds_count", api="Produce") >= 1
    assert value(leader_spec, "pykraft_broker_leader_partitions") >= 1
    followers = [s for s in cluster.cluster.broker_nodes if s.node_id != leader]
    # Replication is a Kafka Fetch from each follower to the leader's Kafka listener (no consumer here).
    assert all(value(s, "pykraft_kafka_requests_total", api="Fetch") is None for s in followers)
    assert value(leader_spec, "pykraft_kafka_requests_total", api="Fetch") >= 1


def test_killed_follower_makes_the_partition_under_replicated(cluster: BrokerCluster, topic: str) -> None:
    leader = cluster.leader(TOPIC)
    leader_spec = cluster.broker(leader)
    follower = next(s for s in cluster.cluster.broker_nodes if s.node_id != leader)
    assert value(leader_spec, "pykraft_broker_under_replicated_partitions") == 0
    shrinks_before = value(leader_spec, "pykraft_broker_isr_shrinks_total")
    cluster.cluster.kill_node(follower)
    try:
        wait_for(
            lambda: value(leader_spec, "pykraft_broker_under_replicated_partitions") >= 1,
            30, "the leader reports an under-replicated partition",
        )  # fmt: skip
        assert value(leader_spec, "pykraft_broker_isr_shrinks_total") > shrinks_before
        offline = sum(
            value(c, "pykraft_controller_offline_partitions") or 0 for c in cluster.cluster.controller_nodes
        )
        assert offline == 0
    finally:
        cluster.cluster.start_node(follower)
    wait_for(
        lambda: value(leader_spec, "pykraft_broker_under_replicated_partitions") == 0
        and value(leader_spec, "pykraft_broker_isr_expands_total") >= 1,
        60, "the follower back in the ISR",
    )  # fmt: skip


# gRPC services no node serves any more (issue 16: the data plane is Kafka's protocol)
RETIRED_SERVICES = {
    "pykraft.broker.BrokerService",
    "pykraft.replica.ReplicaService",
    "pykraft.group.GroupService",
}


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_reflection_lists_the_services(cluster: BrokerCluster, role: str) -> None:
    """proto.runtime.serving: reflection on every node, so grpcurl works without .proto files. A broker's gRPC
    serves the admin API (forwarded to the controllers), not the data plane."""
    spec = next(n for n in cluster.cluster.nodes if n.role == role)
    expected = {"grpc.health.v1.Health", "pykraft.admin.AdminService"}
    if role == "controller":
        expected.add("pykraft.raft.RaftService")
    with grpc.insecure_channel(spec.address) as channel:
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert expected <= services, services
    assert not services & RETIRED_SERVICES, services
