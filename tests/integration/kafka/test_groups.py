"""Consumer groups through the Kafka listener of a real 3 + 3 cluster (issue 15 §3).

confluent-kafka (librdkafka 2.16): a group of 3 consumers rebalances when members join and leave and
together reads every record exactly once; commit / committed, seek, offsets_for_times; AdminClient
lists and describes groups, lists and deletes their offsets, deletes them. kafka-python 3.0.12: a
KafkaConsumer in a group reads and commits, and its KafkaAdminClient sees the group. Every process is
stopped by pid in the fixture's ``finally`` (``running_cluster``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEADLINE_S = 60.0
GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "100", "offsets.topic.num.partitions": "5"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("kafka-groups")), **GROUP_OVERRIDES) as bc:
        yield bc


def bootstrap(cluster: BrokerCluster) -> str:
    return cluster.cluster.kafka_bootstrap


def produce(
    cluster: BrokerCluster, topic: str, count: int, partitions: int, base_ms: int | None = None
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "linger.ms": 5})
    for i in range(count):
        kwargs = {} if base_ms is None else {"timestamp": base_ms + i * 1000}
        producer.produce(topic, value=f"{topic}-{i}".encode(), partition=i % partitions, **kwargs)
    assert producer.flush(DEADLINE_S) == 0


def group_consumer(cluster: BrokerCluster, group: str, **extra: object) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap(cluster), "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": "range", **extra,
    })  # fmt: skip


def poll_until(consumers: list[Consumer], done: Callable[[], bool], what: str,
               sink: dict[tuple[int, int], bytes] | None = None) -> None:  # fmt: skip
    """Poll every consumer in turn (each must poll to take part in a rebalance) until ``done``."""
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for consumer in consumers:
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            key = (msg.partition(), msg.offset())
            if sink is not None:
                assert key not in sink, f"record {key} delivered twice"
                sink[key] = msg.value()


def assignments(consumers: list[Consumer]) -> list[set[int]]:
    return [{tp.partition for tp in c.assignment()} for c in consumers]


def test_group_of_three_rebalances_on_join_and_leave(cluster: BrokerCluster) -> None:
    """Members join one by one (each join rebalances to an equal share of 6 partitions); the stable
    group of 3 reads every record exactly once; after commits a member leaves and the 2 others take
    its partitions over, starting at the committed offsets."""
    topic, partitions, count = "group-three", 6, 600
    cluster.create_topic(topic, partitions=partitions)
    consumers = [group_consumer(cluster, "three")]
    got: dict[tuple[int, int], bytes] = {}
    try:
        consumers[0].subscribe([topic])
        poll_until(
            consumers, lambda: assignments(consumers) == [set(range(partitions))], "1 member owning all"
        )
        for size in (2, 3):
            consumers.append(group_consumer(cluster, "three"))
            consumers[-1].subscribe([topic])
            share = partitions // size
            poll_until(
                consumers,
                lambda share=share: [len(a) for a in assignments(consumers)] == [share] * len(consumers),
                f"{size} members with {share} partitions each",
            )
        owned = assignments(consumers)
        assert set().union(*owned) == set(range(partitions)) and sum(map(len, owned)) == partitions
        produce(cluster, topic, count, partitions)
        poll_until(consumers, lambda: len(got) == count, f"{count} records", got)
        assert sorted(got.values()) == sorted(f"{topic}-{i}".encode() for i in range(count))
        for c in consumers:
            c.commit(asynchronous=False)
        leaving = consumers.pop()
        leaving.close()
        poll_until(
            consumers, lambda: [len(a) for a in assignments(consumers)] == [3, 3], "2 members with 3 each"
        )
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        committed = consumers[0].committed(wanted, timeout=DEADLINE_S)
        assert {tp.partition: tp.offset for tp in committed} == dict.fromkeys(
            range(partitions), count // partitions
        )
        produce(cluster, topic, 60, partitions)  # read from the commits on: nothing old again
        after: dict[tuple[int, int], bytes] = {}
        poll_until(consumers, lambda: len(after) == 60, "60 more records", after)
        assert min(offset for _, offset in after) == count // partitions
    finally:
        for c in consumers:
            c.close()


def test_commit_committed_seek_and_offsets_for_times(cluster: BrokerCluster) -> None:
    topic, base_ms = "group-seek", 1_700_000_000_000
    cluster.create_topic(topic, partitions=1)
    produce(cluster, topic, 20, 1, base_ms=base_ms)
    consumer = group_consumer(cluster, "seeker")
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: dict[tuple[int, int], bytes] = {}
        poll_until([consumer], lambda: len(seen) == 20, "20 records", seen)
        consumer.commit(offsets=[TopicPartition(topic, 0, 12)], asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=DEADLINE_S)
        assert committed.offset == 12
        (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, base_ms + 7500)], timeout=DEADLINE_S)
        assert found.offset == 8
        consumer.seek(TopicPartition(topic, 0, found.offset))
        deadline = time.monotonic() + DEADLINE_S
        msg = None
        while msg is None or msg.error() is not None:
            assert time.monotonic() < deadline, "no record after seek"
            msg = consumer.poll(0.2)
        assert (msg.offset(), msg.value()) == (8, f"{topic}-8".encode())
    finally:
        consumer.close()
    again = group_consumer(cluster, "seeker")  # a new member of the group starts at the commit
    try:
        again.subscribe([topic])
        first: dict[tuple[int, int], bytes] = {}
        poll_until([again], lambda: len(first) > 0, "a record from the committed offset", first)
        assert min(first) == (0, 12)
    finally:
        again.close()


def test_admin_lists_describes_and_deletes_groups(cluster: BrokerCluster) -> None:
    topic = "group-admin"
    cluster.create_topic(topic, partitions=2)
    produce(cluster, topic, 10, 2)
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    member = group_consumer(cluster, "described", **{"client.id": "describer"})
    try:
        member.subscribe([topic])
        poll_until([member], lambda: len(member.assignment()) == 2, "the member owning both partitions")
        member.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)], asynchronous=False)
        listed = admin.list_consumer_groups(request_timeout=DEADLINE_S).result()
        assert "described" in {g.group_id for g in listed.valid}
        stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}, request_timeout=DEADLINE_S)
        assert "described" in {g.group_id for g in stable.result().valid}
        (described,) = admin.describe_consumer_groups(["described"], request_timeout=DEADLINE_S).values()
        group = described.result()
        assert group.state == ConsumerGroupState.STABLE and group.partition_assignor == "range"
        (m,) = group.members
        assert m.client_id == "describer" and m.host.startswith("/127.0.0.1")
        assert {tp.partition for tp in m.assignment.topic_partitions} == {0, 1}
        busy = admin.delete_consumer_groups(["described"], request_timeout=DEADLINE_S)["described"]
        with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
            busy.result()
    finally:
        member.close()
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = [ConsumerGroupTopicPartitions("described")]
    offsets = admin.list_consumer_group_offsets(request, request_timeout=DEADLINE_S)["described"].result()
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {0: 3, 1: 4}
    dropped = admin.delete_consumer_groups(["described"], request_timeout=DEADLINE_S)["described"]
    assert dropped.result() is None
    listed = admin.list_consumer_groups(request_timeout=DEADLINE_S).result()
    assert "described" not in {g.group_id for g in listed.valid}


def test_kafka_python_consumer_group_and_admin(cluster: BrokerCluster) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer

    topic = "group-kafka-python"
    cluster.create_topic(topic, partitions=3)
    produce(cluster, topic, 30, 3)
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap(cluster), group_id="kp-group", auto_offset_reset="earliest",
        enable_auto_commit=False, consumer_timeout_ms=1000,
    )  # fmt: skip
    try:
        got: set[tuple[int, int]] = set()
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 30:
            assert time.monotonic() < deadline, f"kafka-python read {len(got)} of 30"
            for batch in consumer.poll(timeout_ms=500).values():
                got.update((r.partition, r.offset) for r in batch)
        consumer.commit()
        admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster))
        try:
            listed = admin.list_groups()
            assert {"group_id": "kp-group", "protocol_type": "consumer", "group_state": "Stable"} in listed
            offsets = admin.list_group_offsets("kp-group")["kp-group"]
            assert {tp.partition: meta.offset for tp, meta in offsets.items()} == {0: 10, 1: 10, 2: 10}
            described = admin.describe_groups(["kp-group"])["kp-group"]
            assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
            (member,) = described["members"]
            assert member["member_metadata"]["topics"] == [topic]
            assigned = member["member_assignment"]["assigned_partitions"]
            assert assigned == [{"topic": topic, "partitions": [0, 1, 2]}]
        finally:
            admin.close()
    finally:
        consumer.close()
