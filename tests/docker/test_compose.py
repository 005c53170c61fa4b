"""Deploy with Docker Compose: compose.yaml's 3 controllers and 3 brokers as containers.

The rule under test (issue 9): `docker compose up` of the top-level compose.yaml gives a working
quorum — health checks pass in order, a topic created through a controller's published admin port
gets leaders on the brokers, records produced with acks=all are committed, and after one broker
container is stopped every acknowledged record is still read back, from the new leaders.

Steps: start a Docker engine with scripts/docker-engine.sh when none answers (skip, with the
script's reason, when none can start: no root, apt failing, ...), make the debootstrap base image
(cached), build `pykraft:local` from the Dockerfile (layer-cached between runs), then testcontainers'
``DockerCompose`` runs `up --wait` with free host ports in an env file and `down --volumes` at the
end, also on failure. An engine this test started is stopped by its pid.

Networking: topics are created over gRPC at a controller's published admin port. The data goes over
the Kafka protocol (issue 14 §4): each broker's EXTERNAL Kafka listener advertises 127.0.0.1 and its
published port, so a client on the host needs no address map. A confluent-kafka producer and
consumer bootstrap from one of them and produce and read back through all three; the acks=all rounds
around the stopped broker send raw Produce/Fetch/Metadata requests (``tests.kafka_call``) to each
partition's leader, so that the brokers' own error codes and offsets are checked.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from proto.errors import ErrorCode
from proto.runtime.listeners import pick_ports
from pykraft.admin import AdminClient
from storage.record_batch import build_batch
from tests import kafka_call as kafka
from tests.docker.docker_env import BASE_IMAGE, BUILD_TIMEOUT_S, ROOT, run

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1500)]

SPARK_IMAGE = "pykraft-spark:local"
SPARK_OPT_IN = "PYKRAFT_DOCKER_SPARK"  # =1: also run compose's spark service (+2 min build, ~1-2 min query)
COMPOSE_TIMEOUT_S = 240
TOPIC = "compose-demo"
KAFKA_TOPIC = "compose-kafka-clients"
KAFKA_RECORDS = 60
KAFKA_DEADLINE_S = 60.0
PARTITIONS = 3
BROKER_IDS = (101, 102, 103)
BATCHES_BEFORE, BATCHES_AFTER, RECORDS_PER_BATCH = 4, 3, 50

CONTROLLER_OVERRIDES = (
    "default.replication.factor=3 num.partitions=3 broker.session.timeout.ms=4000 "
    "controller.quorum.election.timeout.ms=1000 controller.quorum.heartbeat.interval.ms=100"
)
BROKER_OVERRIDES = (
    "min.insync.replicas=2 replica.lag.time.max.ms=4000 broker.heartbeat.interval.ms=500 "
    "replica.fetch.max.wait.ms=200 request.timeout.ms=10000 controlled.shutdown.timeout.ms=15000"
)


def wait_for(condition: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.2) -> object:
    """Poll ``condition`` until truthy (returned); after the deadline fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except (grpc.RpcError, OSError) as exc:
            value, last_error = None, exc
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last error: {last_error})")


# ---- the compose stack ----------------------------------------------------------------------------


class Stack:
    """The running compose project as the test sees it: published ports, the gRPC admin client and raw
    Kafka requests to the brokers' EXTERNAL listeners."""

    def __init__(
        self, compose, controller_ports: list[int], broker_ports: dict[int, int], kafka_ports: dict[int, int]
    ) -> None:
        self.compose = compose
        self.controller_ports = controller_ports
        self.broker_ports = broker_ports  # broker id -> the port it advertises, listens on and publishes
        self.kafka_ports = kafka_ports  # broker id -> its EXTERNAL Kafka listener's port (same on the host)
        self.admin = AdminClient(",".join(f"127.0.0.1:{p}" for p in controller_ports), timeout_s=60.0)
        self.stopped: set[int] = set()

    def close(self) -> None:
        self.admin.close()

    @staticmethod
    def service(broker_id: int) -> str:
        return f"broker-{broker_id - 100}"

    def kafka_address(self, broker_id: int) -> str:
        return f"127.0.0.1:{self.kafka_ports[broker_id]}"

    def live_brokers(self) -> list[int]:
        return [b for b in BROKER_IDS if b not in self.stopped]

    def leaders(self) -> dict[int, int] | None:
        """partition -> leader, when every live broker agrees and every leader is live; else None."""
        views = []
        for b in self.live_brokers():
            response = kafka.metadata(self.kafka_address(b), [TOPIC])
            endpoints = {e.node_id: (e.host, e.port) for e in response.brokers}
            assert all(endpoints[i] == ("127.0.0.1", self.kafka_ports[i]) for i in endpoints), endpoints
            topic = response.topics[0]
            if topic.error_code != ErrorCode.NONE or len(topic.partitions) != PARTITIONS:
                return None
            views.append({p.partition_index: (p.leader_id, p.leader_epoch) for p in topic.partitions})
        if any(view != views[0] for view in views):
            return None
        leaders = {p: leader for p, (leader, _) in views[0].items()}
        return leaders if all(leader in self.live_brokers() for leader in leaders.values()) else None

    def produce_acked(self, partition: int, values: list[bytes]) -> int:
        """Produce with acks=all to the current leader, retrying retriable errors; the base offset."""
        records = build_batch([(None, v, (), int(time.time() * 1000)) for v in values])

        def attempt() -> int | None:
            leaders = self.leaders()
            if leaders is None:
                return None
            r = kafka.produce(self.kafka_address(leaders[partition]), TOPIC, partition, records, -1, 10_000)
            if r.code == ErrorCode.NONE:
                return r.base_offset + 1  # +1: offset 0 must count as success
            assert r.code in {
                ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT,
                ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.LEADER_NOT_AVAILABLE,
            }, f"produce to {TOPIC}-{partition}: {r.code.name}: {r.message}"  # fmt: skip
            return None

        return int(wait_for(attempt, 60, f"an acks=all produce to {TOPIC}-{partition}")) - 1

    def read_committed(self, partition: int) -> list[tuple[int, bytes]]:
        """Every committed record of ``partition`` as (offset, value), fetched from its live leader."""
        leaders = wait_for(self.leaders, 60, "agreed, live leaders")
        return kafka.read_all(self.kafka_address(leaders[partition]), TOPIC, partition)

    @contextlib.contextmanager
    def logs_on_failure(self) -> Iterator[None]:
        """On an error, print the containers' last log lines (pytest shows them with the failure)."""
        try:
            yield
        except BaseException as exc:
            if isinstance(exc, subprocess.CalledProcessError):
                print(f"{exc.cmd} failed: {(exc.stderr or b'').decode(errors='replace')[-3000:]}")
            logs = run([*self.compose.docker_compose_command(), "logs", "--no-color", "--tail", "40"], 60)
            print(logs.stdout[-12000:])
            raise

    def stop_broker(self, broker_id: int) -> None:
        cmd = [*self.compose.docker_compose_command(), "stop", self.service(broker_id)]
        result = run(cmd, 120)
        assert result.returncode == 0, f"{' '.join(cmd)} failed: {result.stderr[-2000:]}"
        self.stopped.add(broker_id)


@pytest.fixture
def stack(image: str, tmp_path: Path) -> Iterator[Stack]:
    from testcontainers.compose import DockerCompose

    ports = pick_ports(9)  # outside the ephemeral range (proto.runtime.listeners)
    controller_ports, broker_port_list, kafka_port_list = ports[:3], ports[3:6], ports[6:]
    env_file = tmp_path / "compose.env"
    lines = {
        "PYKRAFT_COMPOSE_PROJECT": f"pykraft-test-{os.getpid()}",
        "PYKRAFT_IMAGE": image,
        "PYKRAFT_SPARK_IMAGE": SPARK_IMAGE,
        "PYKRAFT_BASE": BASE_IMAGE,
        "PYKRAFT_CONTROLLER_OVERRIDES": CONTROLLER_OVERRIDES,
        "PYKRAFT_BROKER_OVERRIDES": BROKER_OVERRIDES,
        **{f"PYKRAFT_CONTROLLER_PORT_{i + 1}": str(p) for i, p in enumerate(controller_ports)},
        **{f"PYKRAFT_BROKER_PORT_{i + 1}": str(p) for i, p in enumerate(broker_port_list)},
        **{f"PYKRAFT_KAFKA_PORT_{i + 1}": str(p) for i, p in enumerate(kafka_port_list)},
    }
    env_file.write_text("".join(f'{k}="{v}"\n' for k, v in lines.items()))
    compose = DockerCompose(context=ROOT, compose_file_name="compose.yaml", env_file=str(env_file), wait=True)
    started = time.monotonic()
    stack = Stack(
        compose,
        controller_ports,
        dict(zip(BROKER_IDS, broker_port_list, strict=True)),
        dict(zip(BROKER_IDS, kafka_port_list, strict=True)),
    )
    try:
        with stack.logs_on_failure():
            compose.start()  # `up --wait`: every service healthy, in depends_on order
        print(f"compose up --wait: {time.monotonic() - started:.1f} s")
        yield stack
    finally:
        stack.close()
        compose.stop()  # `down --volumes`


def test_compose_quorum_survives_a_stopped_broker(stack: Stack) -> None:
    """Acknowledged (acks=all, min.insync.replicas=2) records survive stopping one broker container."""
    with stack.logs_on_failure():
        _kafka_clients_on_the_host(stack)
        _produce_stop_broker_and_read_back(stack)


def _kafka_clients_on_the_host(stack: Stack) -> None:
    """A Kafka client outside the compose network bootstraps from one EXTERNAL listener; the Metadata
    answer names every broker at 127.0.0.1 and its published port, and acks=all records produced
    through them (every partition's leader) are read back."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    bootstrap = f"127.0.0.1:{stack.kafka_ports[BROKER_IDS[0]]}"
    stack.admin.create_topic(KAFKA_TOPIC, num_partitions=PARTITIONS, replication_factor=3)
    admin = KafkaAdmin({"bootstrap.servers": bootstrap})

    def led() -> object:
        md = admin.list_topics(topic=KAFKA_TOPIC, timeout=KAFKA_DEADLINE_S)
        topic = md.topics[KAFKA_TOPIC]
        ready = topic.error is None and len(topic.partitions) == PARTITIONS
        return md if ready and all(p.leader >= 0 for p in topic.partitions.values()) else None

    metadata = wait_for(led, 60, f"leaders of {KAFKA_TOPIC} in the Kafka Metadata answer")
    endpoints = {b.id: (b.host, b.port) for b in metadata.brokers.values()}
    assert endpoints == {b: ("127.0.0.1", p) for b, p in stack.kafka_ports.items()}, endpoints
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": int(KAFKA_DEADLINE_S * 1000)})  # fmt: skip
    failures: list[str] = []
    values = [f"host-client-{i}".encode() for i in range(KAFKA_RECORDS)]
    for i, value in enumerate(values):
        producer.produce(KAFKA_TOPIC, value=value, partition=i % PARTITIONS,
                         on_delivery=lambda err, _msg: err is None or failures.append(str(err)))  # fmt: skip
    assert producer.flush(KAFKA_DEADLINE_S) == 0, "records not delivered through the EXTERNAL listeners"
    assert not failures, failures[:5]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compose-host-client",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(KAFKA_TOPIC, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    deadline = time.monotonic() + KAFKA_DEADLINE_S
    try:
        while len(got) < KAFKA_RECORDS:
            assert time.monotonic() < deadline, f"read {len(got)} of {KAFKA_RECORDS} from the host"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            elif msg is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
    finally:
        consumer.close()
    assert sorted(got) == sorted(values)


def _produce_stop_broker_and_read_back(stack: Stack) -> None:
    stack.admin.create_topic(TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                             configs={"min.insync.replicas": "2"})  # fmt: skip
    description = stack.admin.describe_topics([TOPIC])[0]
    assert [len(p.replicas) for p in description.partitions] == [3] * PARTITIONS, description
    leaders_before = wait_for(stack.leaders, 60, f"leaders of {TOPIC} agreed by every broker")

    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

    def produce_round(tag: str, batches: int) -> None:
        for p in range(PARTITIONS):
            for b in range(batches):
                values = [f"{tag}-p{p}-b{b}-r{r}".encode() for r in range(RECORDS_PER_BATCH)]
                base_offset = stack.produce_acked(p, values)
                assert base_offset == len(acked[p]), (
                    f"partition {p}: base offset {base_offset}, expected {len(acked[p])}"
                )
                acked[p].extend(values)

    produce_round("before", BATCHES_BEFORE)
    victim = leaders_before[0]
    stack.stop_broker(victim)
    leaders_after = wait_for(stack.leaders, 60, f"new leaders after stopping broker {victim}")
    assert victim not in leaders_after.values(), leaders_after
    produce_round("after", BATCHES_AFTER)

    for p in range(PARTITIONS):
        committed = stack.read_committed(p)
        assert [offset for offset, _ in committed] == list(range(len(committed))), (
            f"partition {p}: offset gap"
        )
        assert [value for _, value in committed] == acked[p], (
            f"partition {p}: read {len(committed)} records, acknowledged {len(acked[p])}"
        )
    isr = {p.partition: set(p.isr) for p in stack.admin.describe_topics([TOPIC])[0].partitions}
    assert all(victim not in members and len(members) >= 2 for members in isr.values()), isr
    if os.environ.get(SPARK_OPT_IN) == "1":
        _spark_service_counts(stack, sum(len(values) for values in acked.values()))
    else:
        print(f"compose's spark service not run (set {SPARK_OPT_IN}=1 to run it)")


def _spark_service_counts(stack: Stack, expected: int) -> None:
    """The `spark` profile's PySpark query, inside the compose network, counts every acknowledged record."""
    build = run(
        ["docker", "build", "--network", "host", "--build-arg", f"BASE={BASE_IMAGE}", "--target", "spark",
         "-t", SPARK_IMAGE, "."],
        BUILD_TIMEOUT_S,
    )  # fmt: skip
    assert build.returncode == 0, f"docker build --target spark failed:\n{build.stdout[-3000:]}"
    cmd = [*stack.compose.docker_compose_command(), "--profile", "spark", "run", "--rm", "-T", "--no-deps",
           "spark", TOPIC]  # fmt: skip
    result = run(cmd, 600)
    assert result.returncode == 0, f"spark service failed: {result.stderr[-3000:]}"
    print(result.stdout)
    assert f"total {expected} committed records" in result.stdout, result.stdout
