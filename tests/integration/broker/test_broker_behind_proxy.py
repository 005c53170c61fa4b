"""Nodes that listen on one port and advertise another: a TCP proxy in front of every node.

The proxy is the fault-injecting one of tests/chaos (never partitioning here): it names the node
process behind each connection, which shows whose fetcher dialled whose advertised port.

Rules under test (Kafka's ``advertised.listeners``): a broker registers its advertised endpoints (gRPC
and Kafka), not its listen addresses, so Metadata and DescribeCluster return the proxy's ports and
clients dial them (the broker's Kafka Metadata answers with the Kafka endpoints);
replica fetchers dial the leader's registered Kafka endpoint (replication is a Kafka Fetch: an
``acks=all`` produce with ``min.insync.replicas=2`` commits only once the follower fetched there);
controllers listen apart from their ``--voters`` entries and still elect a leader (the voters dial
each other through the proxy).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_cluster import FAST_OVERRIDES, BrokerCluster, wait_for
from confluent_kafka import Producer

from pykraft.cli_cluster import wait_ready
from pykraft.cluster import LocalCluster
from tests.chaos.cluster import ProxyControl, start_proxied

pytestmark = pytest.mark.integration
TOPIC = "advertised"
READY_TIMEOUT_S = 60.0
# rf=2 with min.insync.replicas=2: the acks=all produces need the follower in the ISR, and nothing here
# needs lag to drop it. Its fetches cross the proxy (one more process to be scheduled): with the usual
# 1.5 s lag time a loaded 2-core machine that stalls them that long makes the leader shrink the ISR and
# answer NOT_ENOUGH_REPLICAS_AFTER_APPEND (broker_cluster.check_fetch_wait_below_lag).
OVERRIDES = {**FAST_OVERRIDES, "replica.lag.time.max.ms": "30000"}


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[BrokerCluster, ProxyControl]]:
    cluster, proxy = start_proxied(
        lambda: LocalCluster(tmp_path, controllers=3, brokers=2, overrides=dict(OVERRIDES)), tmp_path
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
    kafka_advertised = {spec.node_id: spec.kafka_advertised_port for spec in cluster.broker_nodes}
    listening = {spec.node_id: spec.port for spec in cluster.broker_nodes}
    kafka_listening = {spec.node_id: spec.kafka_port for spec in cluster.broker_nodes}
    dialled = {*advertised.values(), *kafka_advertised.values()}
    assert not dialled & {*listening.values(), *kafka_listening.values()}

    # Both endpoints register the proxy's ports: the gRPC one (first: gRPC callers take a broker's
    # first endpoint) and the Kafka listener (PLAINTEXT).
    registered = {b.broker_id: b.endpoints for b in bc.admin.describe_cluster().brokers}
    assert registered == {
        i: (("GRPC", "127.0.0.1", port), ("PLAINTEXT", "127.0.0.1", kafka_advertised[i]))
        for i, port in advertised.items()
    }, registered
    for broker_id in advertised:  # Kafka Metadata names each broker's advertised Kafka endpoint
        # Metadata lists unfenced brokers only, from the broker's own metadata image, which may trail
        # the controller's (what wait_ready asked) by a moment: fc11 saw broker 101 list itself alone.
        def lists_every_broker(broker_id: int = broker_id) -> object:
            response = bc.metadata_response(broker_id, topics=None)
            return response if {b.node_id for b in response.brokers} == set(kafka_advertised) else None

        response = wait_for(lists_every_broker, READY_TIMEOUT_S, f"broker {broker_id}'s Metadata: both")
        assert {b.node_id: (b.host, b.port) for b in response.brokers} == {
            i: ("127.0.0.1", port) for i, port in kafka_advertised.items()
        }, response.brokers

    bc.create_topic(TOPIC, partitions=1, rf=2, min_insync_replicas="2")
    leader = bc.leader(TOPIC)
    follower = next(i for i in advertised if i != leader)
    bc.wait_isr(TOPIC, {leader, follower})
    result = bc.produce(leader, TOPIC, [b"a", b"b", b"c"], acks=-1)
    assert result.code == 0, result
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    offsets: list[int] = []
    producer.produce(TOPIC, b"d", on_delivery=lambda e, m: offsets.append(-1 if e else m.offset()))
    assert producer.flush(READY_TIMEOUT_S) == 0 and offsets == [3], offsets

    # The voters dialled each other through the proxy, and the follower's fetcher dialled the leader's
    # Kafka endpoint there (the acks=all commits above show it replicated).
    links = {tuple(n.split("-")[0] for n in k.split(">")) for k in proxy.connections()}
    assert {("controller", "controller"), ("broker", "broker")} <= links, proxy.connections()
    assert bc.high_watermark(leader, TOPIC) == 4
