"""Groups and tools of the other clients against a real 3 + 3 cluster (issue 15 §4).

- aiokafka 0.14: an AIOKafkaConsumer group of two reads every record once and commits; the
  committed offsets are what another client sees.
- kafka-python 3.0: KafkaProducer is idempotent by default (InitProducerId gives it a producer id).
- kcat (librdkafka 2.0): ``-L`` lists every broker at its Kafka endpoint, the controller and each
  partition's leader and ISR; ``-G`` (a balanced consumer group) reads every record.
- A group that mixes confluent-kafka, kafka-python and aiokafka members agrees on the roundrobin
  assignor (aiokafka's only one): every partition assigned once, in roundrobin order of member ids.

kafka-python's KafkaConsumer group and KafkaAdminClient are in tests/integration/kafka/test_groups.py
and test_admin.py; the Producer and Consumer of every client in test_compat_cross_client.py.
Every process is stopped by pid when the module ends, even on failure (``running_cluster``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.compat.clients import DEADLINE_S, Out, run_kcat, write_confluent
from tests.integration.broker.broker_cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


def fill(cluster: BrokerCluster, topic: str, partitions: int, per_partition: int) -> list[bytes]:
    cluster.create_topic(topic, partitions=partitions, min_insync_replicas="2")
    sent = [Out(p, None, b"%s-%d-%d" % (topic.encode(), p, i)) for p in range(partitions)
            for i in range(per_partition)]  # fmt: skip
    write_confluent(cluster.cluster.kafka_bootstrap, topic, sent)
    return sorted(r.value for r in sent)


def committed(cluster: BrokerCluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.cluster.kafka_bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=DEADLINE_S)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps}


def test_aiokafka_consumer_group_reads_once_and_commits(compat_cluster: BrokerCluster) -> None:
    from aiokafka import AIOKafkaConsumer

    topic, group, partitions = "aio-group", "aio-readers", 4
    expected = fill(compat_cluster, topic, partitions, 25)

    async def run() -> list[bytes]:
        members = [AIOKafkaConsumer(topic, bootstrap_servers=compat_cluster.cluster.kafka_bootstrap,
                                    group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=6000, heartbeat_interval_ms=500)
                   for _ in range(2)]  # fmt: skip
        for member in members:
            await member.start()
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        try:
            # aiokafka joins in its coordinator task: wait for the split before reading, so no commit
            # races a rebalance.
            while not all(len(m.assignment()) == partitions // 2 for m in members):
                assert time.monotonic() < deadline, [m.assignment() for m in members]
                await asyncio.sleep(0.1)
            while len(got) < len(expected):
                assert time.monotonic() < deadline, f"the group read {len(got)} of {len(expected)}"
                for member in members:
                    for records in (await member.getmany(timeout_ms=200)).values():
                        got.extend(r.value for r in records)
                        await member.commit()
            assert all(len(m.assignment()) == partitions // 2 for m in members), "not split between two"
        finally:
            for member in members:
                await member.stop()
        return got

    assert sorted(asyncio.run(run())) == expected
    assert committed(compat_cluster, group, topic, partitions) == dict.fromkeys(range(partitions), 25)


def test_kafka_python_producer_is_idempotent_by_default(compat_cluster: BrokerCluster) -> None:
    from kafka import KafkaProducer

    compat_cluster.create_topic("kp-idempotent", partitions=1, min_insync_replicas="2")
    producer = KafkaProducer(bootstrap_servers=compat_cluster.cluster.kafka_bootstrap.split(","))
    try:
        assert producer.config["enable_idempotence"] and producer.config["acks"] == -1
        md = producer.send("kp-idempotent", b"once").get(timeout=DEADLINE_S)
        assert md.offset == 0
        pid_epoch = producer._transaction_manager.producer_id_and_epoch
        assert pid_epoch.producer_id >= 0 and pid_epoch.epoch == 0, pid_epoch
    finally:
        producer.close(timeout=DEADLINE_S)


def test_kcat_metadata_listing(compat_cluster: BrokerCluster, kcat: str) -> None:
    topic = "kcat-listed"
    compat_cluster.create_topic(topic, partitions=2, min_insync_replicas="2")
    out = run_kcat(kcat, ["-b", compat_cluster.cluster.kafka_bootstrap, "-L", "-t", topic])
    for node in compat_cluster.cluster.broker_nodes:
        assert f"broker {node.node_id} at {node.kafka_address}" in out, out
    assert "(controller)" in out, out
    for p in range(2):
        info = compat_cluster.describe(topic, p)
        replicas = ",".join(map(str, info.replicas))
        isr = ",".join(map(str, info.isr))
        assert f"partition {p}, leader {info.leader}, replicas: {replicas}, isrs: {isr}" in out, out


def test_kcat_balanced_consumer_group(compat_cluster: BrokerCluster, kcat: str) -> None:
    topic, group, partitions = "kcat-group", "kcat-readers", 3
    expected = fill(compat_cluster, topic, partitions, 10)
    # -G with -e: leave once every assigned partition is at its end; -c: stop at the total.
    out = run_kcat(kcat, ["-b", compat_cluster.cluster.kafka_bootstrap, "-G", group, "-o", "beginning",
                          "-e", "-c", str(len(expected)), "-f", "%s\n", "-q", topic])  # fmt: skip
    assert sorted(line.encode() for line in out.splitlines()) == expected
    wait_for(lambda: sum(committed(compat_cluster, group, topic, partitions).values()) == len(expected),
             DEADLINE_S, "kcat's group to commit its offsets")  # fmt: skip


class Member:
    """One group member polling in its own thread; ``assignment`` is what it owns now."""

    def __init__(self, name: str, poll_once: Callable[[], set[int]], close: Callable[[], None]) -> None:
        self.name = name
        self.assignment: set[int] = set()
        self.error: BaseException | None = None
        self._poll_once, self._close = poll_once, close
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.assignment = self._poll_once()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self._close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_S)


def confluent_member(bootstrap: str, group: str, topic: str) -> Member:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 10000,
                         "partition.assignment.strategy": "roundrobin"})  # fmt: skip
    consumer.subscribe([topic])

    def poll_once() -> set[int]:
        consumer.poll(0.2)
        return {tp.partition for tp in consumer.assignment()}

    return Member("confluent", poll_once, consumer.close)


def kafka_python_member(bootstrap: str, group: str, topic: str) -> Member:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","), group_id=group,
                             partition_assignment_strategy=[RoundRobinPartitionAssignor],
                             session_timeout_ms=10000, heartbeat_interval_ms=500)  # fmt: skip

    def poll_once() -> set[int]:
        consumer.poll(timeout_ms=200)
        return {tp.partition for tp in consumer.assignment()}

    return Member("kafka-python", poll_once, consumer.close)


def aiokafka_member(bootstrap: str, group: str, topic: str) -> Member:
    from aiokafka import AIOKafkaConsumer

    loop = asyncio.new_event_loop()

    async def make() -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    session_timeout_ms=10000, heartbeat_interval_ms=500)  # fmt: skip
        await consumer.start()
        return consumer

    consumer = loop.run_until_complete(make())

    def poll_once() -> set[int]:
        loop.run_until_complete(consumer.getmany(timeout_ms=200))
        return {tp.partition for tp in consumer.assignment()}

    def close() -> None:
        loop.run_until_complete(consumer.stop())
        loop.close()

    return Member("aiokafka", poll_once, close)


def test_a_group_of_three_clients_agrees_on_roundrobin(compat_cluster: BrokerCluster) -> None:
    """confluent-kafka, kafka-python and aiokafka in one group: the protocol they share is roundrobin,
    and the assignment is Kafka's RoundRobinAssignor's — partitions dealt to members in member-id
    order — whichever member leads the group."""
    topic, group, partitions = "mixed-group", "mixed-members", 6
    compat_cluster.create_topic(topic, partitions=partitions, min_insync_replicas="2")
    bootstrap = compat_cluster.cluster.kafka_bootstrap
    members: list[Member] = []
    try:
        for make in (confluent_member, kafka_python_member, aiokafka_member):
            members.append(make(bootstrap, group, topic))

        def balanced() -> bool:
            assert all(m.error is None for m in members), [(m.name, m.error) for m in members]
            owned = [m.assignment for m in members]
            return all(len(a) == 2 for a in owned) and set().union(*owned) == set(range(partitions))

        wait_for(balanced, DEADLINE_S, "every member to own 2 of the 6 partitions")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(timeout=DEADLINE_S)
        assert described.partition_assignor == "roundrobin"
        by_member = {m.member_id: {tp.partition for tp in m.assignment.topic_partitions}
                     for m in described.members}  # fmt: skip
        ordered = sorted(by_member)
        dealt = {mid: {p for p in range(partitions) if p % 3 == i} for i, mid in enumerate(ordered)}
        assert by_member == dealt
        assert sorted(map(frozenset, by_member.values()), key=min) == sorted(
            (frozenset(m.assignment) for m in members), key=min
        ), "the members' own view differs from the group's"
    finally:
        for member in members:
            member.stop()
    assert all(m.error is None for m in members), [(m.name, m.error) for m in members]
