"""Admin APIs through the Kafka listener of a real 3 + 3 cluster (issue 15 §3): the brokers forward
them to the active controller (DeleteRecords and DescribeProducers go to the partition leaders).

confluent-kafka's AdminClient (librdkafka 2.16): create topics (validate only, cluster defaults,
explicit assignments, configs; TOPIC_ALREADY_EXISTS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG),
list topics, create partitions, describe / alter / incrementally alter configs (sources, synonyms),
describe the cluster, delete records, elect preferred leaders, delete topics. kafka-python 3.0.12's
KafkaAdminClient creates, describes and deletes topics. Every process is stopped by pid in the
fixture's ``finally`` (``running_cluster``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("kafka-admin"))) as bc:
        yield bc


@pytest.fixture(scope="module")
def admin(cluster: BrokerCluster) -> AdminClient:
    # Metadata lists unfenced brokers only (as Kafka's does): a broker briefly fenced on a loaded machine
    # when the client first asked is missing from its cache, and a request addressed to it (DescribeConfigs
    # of BROKER 101) waits for it until the deadline unless the client asks again (the default refresh is
    # 5 min; a fresh-clone run timed out so). Ask every second, as a long-lived client would soon enough.
    return AdminClient(
        {"bootstrap.servers": cluster.cluster.kafka_bootstrap, "topic.metadata.refresh.interval.ms": 1000}
    )


def error_of(future) -> KafkaError | None:
    try:
        future.result()
    except KafkaException as exc:
        return exc.args[0]
    return None


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def describe(admin: AdminClient, resource: ConfigResource) -> dict[str, ConfigEntry]:
    (future,) = admin.describe_configs([resource], request_timeout=DEADLINE_S).values()
    return future.result()


def test_create_list_grow_and_delete_topics(admin: AdminClient, cluster: BrokerCluster) -> None:
    checked = admin.create_topics(
        [NewTopic("adm-validate", 3, 3)], validate_only=True, request_timeout=DEADLINE_S
    )
    assert error_of(checked["adm-validate"]) is None
    assert (
        "adm-validate" not in admin.list_topics(timeout=DEADLINE_S).topics
    )  # validate only: nothing created
    futures = admin.create_topics(
        [
            NewTopic("adm-a", 3, 3, config={"retention.ms": "3600000"}),
            NewTopic("adm-defaults"),  # -1 / -1: the cluster defaults
            NewTopic("adm-placed", 2, replica_assignment=[[101, 102], [102, 103]]),
            NewTopic("adm-rf", 1, 7),
            NewTopic("adm-badconf", 1, 1, config={"retention.ms": "soon"}),
        ],
        request_timeout=DEADLINE_S,
    )
    assert error_of(futures["adm-a"]) is None
    assert error_of(futures["adm-defaults"]) is None
    assert error_of(futures["adm-placed"]) is None
    assert error_of(futures["adm-rf"]).code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert error_of(futures["adm-badconf"]).code() == KafkaError.INVALID_CONFIG
    again = admin.create_topics([NewTopic("adm-a", 3, 3)], request_timeout=DEADLINE_S)["adm-a"]
    assert error_of(again).code() == KafkaError.TOPIC_ALREADY_EXISTS

    topics = admin.list_topics(timeout=DEADLINE_S).topics  # visible at once: the answer waited for it
    assert len(topics["adm-a"].partitions) == 3
    assert {p: sorted(md.replicas) for p, md in topics["adm-placed"].partitions.items()} == {
        0: [101, 102],
        1: [102, 103],
    }
    assert "adm-rf" not in topics and "adm-badconf" not in topics

    grown = admin.create_partitions([NewPartitions("adm-a", 5)], request_timeout=DEADLINE_S)["adm-a"]
    assert error_of(grown) is None
    assert len(admin.list_topics(timeout=DEADLINE_S).topics["adm-a"].partitions) == 5
    shrink = admin.create_partitions([NewPartitions("adm-a", 2)], request_timeout=DEADLINE_S)["adm-a"]
    assert error_of(shrink).code() == KafkaError.INVALID_PARTITIONS

    deleted = admin.delete_topics(["adm-a", "adm-defaults", "adm-nope"], request_timeout=DEADLINE_S)
    assert error_of(deleted["adm-a"]) is None and error_of(deleted["adm-defaults"]) is None
    assert error_of(deleted["adm-nope"]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    remaining = admin.list_topics(timeout=DEADLINE_S).topics
    assert "adm-a" not in remaining and "adm-defaults" not in remaining


def test_describe_and_alter_configs(admin: AdminClient, cluster: BrokerCluster) -> None:
    topic = "adm-configs"
    created = admin.create_topics([NewTopic(topic, 1, 3, config={"retention.ms": "7200000"})])[topic]
    assert error_of(created) is None
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = describe(admin, resource)
    assert entries["retention.ms"].value == "7200000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].is_default
    assert entries["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    synonyms = entries["retention.ms"].synonyms  # librdkafka asks for them
    assert [s.source for s in synonyms.values()] or entries["retention.ms"].synonyms is not None

    change = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    (future,) = admin.incremental_alter_configs([change], request_timeout=DEADLINE_S).values()
    assert future.result() is None
    entries = describe(admin, resource)
    assert entries["cleanup.policy"].value == "delete,compact"
    assert entries["min.insync.replicas"].value == "2"
    assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    bad = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("min.insync.replicas", "zero", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (future,) = admin.incremental_alter_configs([bad], request_timeout=DEADLINE_S).values()
    with pytest.raises(KafkaException) as failed:
        future.result()
    assert failed.value.args[0].code() == KafkaError.INVALID_CONFIG

    # Legacy AlterConfigs: the given set replaces every override (cleanup.policy, min.insync.replicas go).
    legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.bytes": "1048576"})
    with pytest.warns(DeprecationWarning):  # confluent-kafka still sends it
        (future,) = admin.alter_configs([legacy], request_timeout=DEADLINE_S).values()
    assert future.result() is None
    entries = describe(admin, resource)
    assert entries["retention.bytes"].value == "1048576"
    assert entries["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "delete" and entries["min.insync.replicas"].value == "1"

    broker = describe(admin, ConfigResource(ResourceType.BROKER, "101"))  # the cluster-wide defaults
    assert broker["retention.ms"].value == "604800000"
    per_broker = ConfigResource(
        ResourceType.BROKER,
        "101",
        incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    (future,) = admin.incremental_alter_configs([per_broker], request_timeout=DEADLINE_S).values()
    with pytest.raises(KafkaException, match="per-broker configs are not supported"):
        future.result()


def test_describe_cluster_delete_records_and_elect_leaders(
    admin: AdminClient, cluster: BrokerCluster
) -> None:
    expected = {n.node_id: n.kafka_address for n in cluster.cluster.broker_nodes}
    # DescribeCluster lists unfenced brokers from the answering broker's own image (as Kafka's does). A
    # broker is "unfenced" (healthy: the cluster has started) when its heartbeat's answer says so, once
    # the controller committed the record; every broker's image, itself included, replays that record
    # a little later (from the controller it follows; a standby learns of the commit with the leader's
    # next append). With shuffled order this test can run first, right after the start: the broker
    # unfenced last was missing (shuffle seed 146505). Ask again until every broker is listed.
    answers: list = []

    def every_broker_listed() -> bool:
        answers.append(admin.describe_cluster(request_timeout=DEADLINE_S).result())
        return {n.id for n in answers[-1].nodes} == set(expected)

    wait_until(every_broker_listed, "DescribeCluster to list every broker")
    described = answers[-1]
    assert {n.id: f"{n.host}:{n.port}" for n in described.nodes} == expected
    assert described.controller.id in expected

    topic = "adm-records"
    assert error_of(admin.create_topics([NewTopic(topic, 1, 3)])[topic]) is None
    producer = Producer({"bootstrap.servers": cluster.cluster.kafka_bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce(topic, value=b"r%d" % i, partition=0)
    assert producer.flush(DEADLINE_S) == 0
    (future,) = admin.delete_records([TopicPartition(topic, 0, 4)], request_timeout=DEADLINE_S).values()
    assert future.result().low_watermark == 4
    wait_until(lambda: cluster.describe(topic).leader > 0, "a leader")
    (future,) = admin.delete_records([TopicPartition(topic, 0, 11)], request_timeout=DEADLINE_S).values()
    with pytest.raises(KafkaException) as beyond:
        future.result()
    assert beyond.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    from confluent_kafka import ElectionType

    # (confluent-kafka 2.16's elect_leaders rejects any keyword argument: a bug of its binding)
    results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(DEADLINE_S)
    (outcome,) = results.values()
    assert outcome is None or outcome.code() == KafkaError.ELECTION_NOT_NEEDED


def test_kafka_python_admin_client(cluster: BrokerCluster) -> None:
    import kafka.errors
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka import TopicPartition as KpPartition
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    client = KafkaAdminClient(bootstrap_servers=cluster.cluster.kafka_bootstrap, request_timeout_ms=30000)
    try:
        created = client.create_topics({"adm-kp": {"num_partitions": 2, "replication_factor": 3,
                                                   "configs": {"retention.ms": "60000"}}})  # fmt: skip
        (result,) = created["topics"]
        assert (result["error_code"], result["num_partitions"], result["replication_factor"]) == (0, 2, 3)
        assert result["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert result["configs"]["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
        assert "adm-kp" in client.list_topics()
        described = client.describe_configs([KpResource(ConfigResourceType.TOPIC, "adm-kp")])
        modified = described["topic"]["adm-kp"]  # kafka-python's default filter: non-default values only
        assert {name: entry["value"] for name, entry in modified.items()} == {"retention.ms": "60000"}
        # Answered from a broker's own image, like confluent-kafka's DescribeCluster above: wait.
        wait_until(lambda: {b["broker_id"] for b in client.describe_cluster()["brokers"]} == {101, 102, 103},
                   "kafka-python's describe_cluster to list every broker")  # fmt: skip
        producer = KafkaProducer(bootstrap_servers=cluster.cluster.kafka_bootstrap)  # idempotent by default
        for i in range(5):
            producer.send("adm-kp", b"p%d" % i, partition=0)
        producer.flush(DEADLINE_S)
        producer.close()
        answers: list = []

        def described() -> bool:
            # kafka-python raises UnknownBrokerIdError (and schedules a metadata refresh) when its cached
            # Metadata lacks the leader, e.g. a broker that was briefly fenced on a loaded machine when
            # the cache was filled (Metadata lists live brokers only, as Kafka's does): ask again.
            try:
                answers.append(client.describe_producers([KpPartition("adm-kp", 0)]))
            except kafka.errors.UnknownBrokerIdError:
                return False
            return True

        wait_until(described, "describe_producers reaches the leader of adm-kp-0")
        (state,) = answers[-1].values()
        (active,) = state.active_producers  # the leader's producer state
        assert (active.producer_epoch, active.last_sequence) == (0, 4) and active.producer_id >= 0
        deleted = client.delete_records({KpPartition("adm-kp", 0): 3})
        assert (
            deleted[KpPartition("adm-kp", 0)]["error_code"],
            deleted[KpPartition("adm-kp", 0)]["low_watermark"],
        ) == (0, 3)
        client.delete_topics(["adm-kp"])
        assert "adm-kp" not in client.list_topics()
    finally:
        client.close()
