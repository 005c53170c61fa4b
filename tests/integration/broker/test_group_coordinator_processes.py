"""The group coordinator on real broker processes, driven with raw Kafka requests over the brokers' Kafka
listeners (group_stub: the coordinator's side of the protocol; the consumer's side is tested with
confluent-kafka in tests/integration/kafka/test_groups.py).

- two members join, sync and heartbeat into one Stable generation; one stops heartbeating and the
  other is told to rebalance within the session timeout, then forms generation 2 alone;
- committed offsets and the group survive a SIGKILL of the coordinator's broker: FindCoordinator
  names the new leader of the group's ``__consumer_offsets`` partition, which loads the log, returns
  every committed offset and serves the same Stable generation;
- the coordinator exports the group's committed offset and lag on /metrics.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from broker_cluster import BrokerCluster, running_cluster, wait_for
from confluent_kafka import Producer
from group_stub import SESSION_MS, Coordinator, committed_codes
from prometheus_client.parser import text_string_to_metric_families

from proto.errors import ErrorCode

pytestmark = pytest.mark.integration

GROUP_OVERRIDES = {
    "group.min.session.timeout.ms": "500",
    "group.initial.rebalance.delay.ms": "300",
    "offsets.topic.num.partitions": "3",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("groups")), **GROUP_OVERRIDES) as bc:
        yield bc


@pytest.fixture
def coordinator(cluster: BrokerCluster, request: pytest.FixtureRequest) -> Iterator[Coordinator]:
    with Coordinator(cluster, f"group-{request.node.name}") as c:  # one group per test
        yield c


def test_two_members_then_one_stops_heartbeating(coordinator: Coordinator) -> None:
    """Join (KIP-394 member id), sync, heartbeat; a silent member is expired within its session timeout
    and the survivor forms the next generation alone."""
    coordinator.find()  # creates __consumer_offsets on first use
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: coordinator.join(), range(2))
        for _ in range(5):  # a member that got an older generation rejoins, as a consumer would
            if first.generation_id == second.generation_id:
                break
            first, second = pool.map(lambda j: coordinator.join(j.member_id), (first, second))
    assert first.generation_id == second.generation_id >= 1 and first.leader == second.leader
    leader = first if first.member_id == first.leader else second
    other = second if leader is first else first
    assert {m.member_id for m in leader.members} == {first.member_id, second.member_id}
    assert other.members == []
    generation = leader.generation_id
    assignment = {leader.member_id: b"p0", other.member_id: b"p1"}
    with ThreadPoolExecutor(2) as pool:
        synced = dict(
            zip(
                (leader.member_id, other.member_id),
                pool.map(
                    lambda m: coordinator.sync(m, generation, assignment if m == leader.member_id else None),
                    (leader.member_id, other.member_id),
                ),
                strict=True,
            )
        )
    assert {m: s.assignment for m, s in synced.items()} == assignment
    assert all(coordinator.heartbeat(m, generation) == ErrorCode.NONE for m in assignment)

    stopped = time.monotonic()  # ``other`` goes silent; ``leader`` keeps heartbeating

    def rebalancing() -> bool:
        return coordinator.heartbeat(leader.member_id, generation) == ErrorCode.REBALANCE_IN_PROGRESS

    wait_for(rebalancing, 10, "REBALANCE_IN_PROGRESS after the silent member's session", interval_s=0.2)
    assert time.monotonic() - stopped < SESSION_MS / 1000 + 3.0
    rejoined = coordinator.join(leader.member_id)
    assert rejoined.generation_id == generation + 1
    assert [m.member_id for m in rejoined.members] == [leader.member_id]
    assert coordinator.heartbeat(other.member_id, generation) == ErrorCode.UNKNOWN_MEMBER_ID


def test_committed_offsets_survive_coordinator_sigkill(
    cluster: BrokerCluster, coordinator: Coordinator
) -> None:
    topic = "group-events"
    cluster.create_topic(topic, partitions=3)
    member = coordinator.join()
    coordinator.sync(member.member_id, member.generation_id, {member.member_id: b"all"})
    committed = {0: 11, 1: 22, 2: 33}
    answer = coordinator.commit(committed, topic, member.member_id, member.generation_id)
    assert committed_codes(answer) == [0, 0, 0], answer
    stale = coordinator.commit({0: 99}, topic, member.member_id, member.generation_id - 1)
    assert committed_codes(stale) == [ErrorCode.ILLEGAL_GENERATION]
    assert coordinator.fetch_offsets() == {(topic, p): o for p, o in committed.items()}

    old = coordinator.node_id
    killed = cluster.broker(old)
    cluster.cluster.kill_node(killed)
    try:
        started = time.monotonic()
        offsets = coordinator.fetch_offsets()  # retries NOT_COORDINATOR / LOAD_IN_PROGRESS until served
        assert coordinator.node_id != old
        assert offsets == {(topic, p): o for p, o in committed.items()}
        assert time.monotonic() - started < 30
        # The group itself came back from the log: Stable, same generation (the one its heartbeat
        # names), member and assignment; the member's session restarted at the load, so its next
        # heartbeat is accepted (no rebalance).
        group = coordinator.describe()
        assert group.group_state == "Stable", group
        assert [(m.member_id, m.member_assignment) for m in group.members] == [(member.member_id, b"all")]
        assert coordinator.heartbeat(member.member_id, member.generation_id) == ErrorCode.NONE

        spec = cluster.broker(coordinator.node_id)
        url = f"http://127.0.0.1:{spec.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        samples = {
            (s.name, s.labels.get("group"), s.labels.get("partition")): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        assert samples[("pykraft_consumer_group_committed_offset", coordinator.group, "1")] == 22
    finally:  # the module's other tests (in any order) want three live brokers
        cluster.cluster.start_node(killed)
    wait_for(lambda: cluster.cluster.healthy(killed), 60, f"{killed.name} healthy again")


def test_lag_of_a_partition_hosted_on_another_broker(
    cluster: BrokerCluster, coordinator: Coordinator
) -> None:
    """The coordinator polls the leader's HW for partitions it does not host (broker.group.lag)."""
    coordinator.find()
    other = next(
        s.node_id
        for s in cluster.cluster.broker_nodes
        if s.node_id != coordinator.node_id and cluster.cluster.is_running(s)
    )
    topic = "group-lag-remote"
    cluster.admin.create_topic(topic, assignments={0: [other]})
    wait_for(lambda: cluster.leader(topic) == other, 30, f"{topic} led by {other}")
    producer = Producer({"bootstrap.servers": cluster.cluster.kafka_bootstrap, "acks": "all"})
    failures: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    for value in (b"a", b"b", b"c", b"d", b"e"):
        producer.produce(topic, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0 and not failures, failures

    def committed() -> bool:
        return committed_codes(coordinator.commit({0: 2}, topic)) == [ErrorCode.NONE]

    wait_for(committed, 30, "a standalone commit (the coordinator must know the new topic)")
    spec = cluster.broker(coordinator.node_id)

    def lag() -> float | None:
        text = (
            urllib.request.urlopen(f"http://127.0.0.1:{spec.metrics_port}/metrics", timeout=5).read().decode()
        )
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "pykraft_consumer_group_lag" and s.labels.get("group") == coordinator.group:
                    return s.value
        return None

    assert wait_for(lambda: lag() == 3, 20, "lag 3 (HW 5 - committed 2) on the coordinator's /metrics")
