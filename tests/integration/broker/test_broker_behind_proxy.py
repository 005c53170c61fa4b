"""Nodes that listen on one port and advertise another: a TCP proxy in front of every node.

The proxy is the fault-injecting one of tests/chaos (never partitioning here): it names the node
process behind each connection, which shows whose fetcher dialled whose advertised port.

Rules under test (Kafka's ``advertised.listeners``): a broker registers its advertised endpoint, not
its listen address, so Metadata and DescribeCluster return the proxy's port and clients dial it;
replica fetchers dial the leader's registered Kafka endpoint (replication is a Kafka Fetch: an
``acks=all`` produce with ``min.insync.replicas=2`` commits only once the follower fetched there);
controllers listen apart from their ``--voters`` entries and still elect a leader (the voters dial
each other through the proxy).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_cluster import FAST_OVERRIDES, RPC_TIMEOUT_S, BrokerCluster

from proto import broker_pb2
from pykraft.cli_cluster import wait_ready
from pykraft.cluster import LocalCluster
from pykraft.producer import Producer
from tests.chaos.cluster import ProxyControl, start_proxied

pytestmark = pytest.mark.integration
TOPIC = "advertised"
READY_TIMEOUT_S = 60.0


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[BrokerCluster, ProxyControl]]:
    cluster, proxy = start_proxied(
        lambda: LocalCluster(tmp_path, controllers=3, brokers=2, overrides=dict(FAST_OVERRIDES)), tmp_path
    )
    bc = BrokerCluster(cluster)
    try:
        wait_ready(cluster, READY_TIMEOUT_S, progress=None)
        yield bc, proxy
    finally:
        bc.close()
        cluster.down(timeout_s=15.0)
        for spec in cluster.nodes:
            cluster.kill_node(spec)
        proxy.close()


def test_brokers_advertise_the_proxy_and_replicate_through_it(
    proxied: tuple[BrokerCluster, ProxyControl],
) -> None:
    bc, proxy = proxied
    cluster = bc.cluster
    advertised = {spec.node_id: spec.advertised_port for spec in cluster.broker_nodes}
    listening = {spec.node_id: spec.port for spec in cluster.broker_nodes}
    assert not set(advertised.values()) & set(listening.values())

    # The gRPC endpoint (first: gRPC callers take a broker's first endpoint) is the proxy's port; the
    # Kafka listener (PLAINTEXT) registers the port it bound, which is not proxied here.
    registered = {b.broker_id: b.endpoints for b in bc.admin.describe_cluster().brokers}
    assert {i: e[0] for i, e in registered.items()} == {
        i: ("GRPC", "127.0.0.1", port) for i, port in advertised.items()
    }, registered
    assert all([name for name, _, _ in e] == ["GRPC", "PLAINTEXT"] for e in registered.values()), registered
    for broker_id in advertised:
        response = bc.stub(broker_id).Metadata(broker_pb2.MetadataRequest(), timeout=RPC_TIMEOUT_S)
        assert {b.node_id: b.port for b in response.brokers} == advertised

    bc.create_topic(TOPIC, partitions=1, rf=2, min_insync_replicas="2")
    leader = bc.leader(TOPIC)
    follower = next(i for i in advertised if i != leader)
    bc.wait_isr(TOPIC, {leader, follower})
    result = bc.produce(leader, TOPIC, [b"a", b"b", b"c"], acks=-1)
    assert result.code == 0, result
    with Producer(cluster.bootstrap, acks="all") as producer:
        assert producer.send(TOPIC, value=b"d").result().offset == 3

    # The voters dialled each other through the proxy (the follower's fetcher uses the leader's Kafka
    # endpoint, PLAINTEXT, which is not proxied here: the acks=all commits above show it replicated).
    assert any(k.startswith("controller-") and k.split(">")[1].startswith("controller-")
               for k in proxy.connections())  # fmt: skip
    assert bc.high_watermark(leader, TOPIC) == 4
