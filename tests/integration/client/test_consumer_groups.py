"""Consumer groups end to end: ``pykraft consume --group`` processes against real brokers (3
controllers + 3 brokers, one cluster for the module), SIGKILLed as a crash would.

Issue 8: 3 consumers over 6 partitions -> each partition owned by exactly one member; SIGKILL one ->
its partitions move to the others within the session timeout; SIGKILL the coordinator's broker ->
every committed offset is still there and the group resumes; at-least-once: every produced record is
processed, and after a crash only the records after the last commit are processed again; static
membership (KIP-345): a member restarted with the same group.instance.id keeps its partitions without
a rebalance.

Each consumer process prints ``partition:offset<TAB>value`` per record and ``Assigned: ...`` /
``Revoked: ...`` on stderr; the tests follow ownership from those lines. Every process is stopped by
pid in a ``finally``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSION_MS = 3000
GROUP_OVERRIDES = {
    "group.min.session.timeout.ms": "500",
    "group.initial.rebalance.delay.ms": "300",
    "offsets.topic.num.partitions": "3",
}
MEMBER_PROPERTIES = {
    "session.timeout.ms": str(SESSION_MS),
    "heartbeat.interval.ms": "300",
    "max.poll.interval.ms": "20000",
    "retry.backoff.ms": "100",
    "request.timeout.ms": "5000",
    "max.poll.records": "50",
}
TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("groups")), **GROUP_OVERRIDES) as bc:
        yield bc


class ConsumerProcess:
    """``pykraft consume --group`` as a child process (confluent-kafka: ``bootstrap`` is the Kafka
    bootstrap); its output is read by two threads."""

    def __init__(self, bootstrap: str, topic: str, group: str, **properties: str) -> None:
        props = {**MEMBER_PROPERTIES, **properties}
        command = [
            sys.executable, "-m", "pykraft.cli", "consume", "--bootstrap", bootstrap, "--topic", topic,
            "--group", group, "--from-beginning", "--print-offsets",
        ]  # fmt: skip
        for key, value in props.items():
            command += ["--consumer-property", f"{key}={value}"]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lock = threading.Lock()
        self.records: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.stderr: list[str] = []
        self.owned: set[int] = set()
        self.rebalance_lines = 0
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            position, _, value = line.rstrip(b"\n").partition(b"\t")
            partition, _, offset = position.partition(b":")
            with self.lock:
                self.records.append((int(partition), int(offset), value))

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            with self.lock:
                self.stderr.append(line)
                kind, _, names = line.partition(": ")
                if kind not in ("Assigned", "Revoked"):
                    continue  # a warning, the summary
                partitions = {int(n.rsplit("-", 1)[1]) for n in names.split()}
                if kind == "Assigned":
                    self.owned |= partitions
                    self.rebalance_lines += 1
                elif kind == "Revoked":
                    self.owned -= partitions
                    self.rebalance_lines += 1

    def assignment(self) -> set[int]:
        with self.lock:
            return set(self.owned) if self.process.poll() is None else set()

    def printed(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return list(self.records)

    def kill(self) -> None:
        """SIGKILL by pid; then read what it printed up to its death (the pipes reach EOF)."""
        self.process.kill()
        self.process.wait(10)
        for thread in self._threads:
            thread.join(10)

    def stop(self) -> None:
        """SIGTERM (clean close), then SIGKILL if it does not exit in time; by pid, never by name."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        for thread in self._threads:
            thread.join(5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def log(self) -> str:
        with self.lock:
            return "\n".join(self.stderr[-30:])


@pytest.fixture
def processes() -> Iterator[list[ConsumerProcess]]:
    started: list[ConsumerProcess] = []
    try:
        yield started
    finally:
        for p in started:
            p.stop()


def split_ok(members: list[ConsumerProcess], partitions: int) -> bool:
    """Every partition owned by exactly one live member, and every live member owns some."""
    owned = [p for m in members for p in m.assignment()]
    return sorted(owned) == list(range(partitions)) and all(m.assignment() for m in members)


def wait_split(
    members: list[ConsumerProcess], partitions: int, what: str, timeout_s: float = TIMEOUT_S
) -> float:
    started = time.monotonic()
    try:
        wait_for(lambda: split_ok(members, partitions), timeout_s, what)
    except AssertionError:
        details = "\n".join(f"pid {m.pid} owns {sorted(m.assignment())}:\n{m.log()}" for m in members)
        raise AssertionError(f"{what} did not happen:\n{details}") from None
    return time.monotonic() - started


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    """acks=all, idempotent (confluent-kafka); every record acknowledged, else the test fails."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})  # fmt: skip
    errors: list[KafkaError] = []
    for i, v in enumerate(values):
        producer.produce(topic, v, partition=i % partitions,
                         on_delivery=lambda e, _m: errors.append(e) if e is not None else None)  # fmt: skip
    left = producer.flush(TIMEOUT_S)
    assert left == 0 and not errors, f"{left} records unacknowledged, errors {errors[:3]}"


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    """The group's committed offsets (OffsetFetch); None where nothing is committed."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in offsets}


def coordinator_id(bootstrap: str, group: str) -> int:
    """The group coordinator's broker id (FindCoordinator, through DescribeGroups)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(timeout=30).coordinator.id


def until(condition: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    wait_for(condition, timeout_s, what)


def test_three_members_share_six_partitions_and_survive_a_sigkill(
    cluster: BrokerCluster, processes: list[ConsumerProcess]
) -> None:
    """Each of 6 partitions owned by exactly one of 3 members; SIGKILL one -> its partitions are owned
    by the 2 others within the session timeout (plus a rebalance)."""
    cluster.create_topic("six", partitions=6)
    bootstrap = cluster.cluster.kafka_bootstrap
    processes += [ConsumerProcess(bootstrap, "six", "g-six") for _ in range(3)]
    wait_split(processes, 6, "a 3-way split of 6 partitions")
    assert sorted(len(m.assignment()) for m in processes) == [2, 2, 2]
    victim = processes[0]
    victim.kill()
    took_s = wait_split(processes[1:], 6, "the 2 survivors owning all 6 partitions")
    assert took_s < SESSION_MS / 1000 + 10, f"takeover took {took_s:.1f} s"
    print(f"takeover after SIGKILL: {took_s:.2f} s (session timeout {SESSION_MS} ms)")


def test_at_least_once_across_a_consumer_crash(
    cluster: BrokerCluster, processes: list[ConsumerProcess]
) -> None:
    """Every produced record is printed; after a SIGKILL, the next member starts at the committed
    offsets, so the only records printed twice are those after the last commit."""
    bootstrap = cluster.cluster.kafka_bootstrap
    topic, group, partitions, total = "alo", "g-alo", 3, 3000
    cluster.create_topic(topic, partitions=partitions)
    values = [b"v-%d" % i for i in range(total)]
    produce(bootstrap, topic, values, partitions)
    first = ConsumerProcess(bootstrap, topic, group, **{"max.poll.records": "7"})
    processes.append(first)
    until(lambda: len(first.printed()) >= total // 3, "the first member printing a third of the records")
    first.kill()
    printed_before = first.printed()
    at_crash = committed(bootstrap, group, topic, partitions)
    second = ConsumerProcess(bootstrap, topic, group)
    processes.append(second)
    until(lambda: len({r[2] for r in printed_before + second.printed()}) == total, "every record printed")
    seen = {r[2] for r in printed_before + second.printed()}
    assert seen == set(values)
    end = total // partitions
    for p in range(partitions):
        mine = [o for q, o, _ in printed_before if q == p]
        theirs = sorted(o for q, o, _ in second.printed() if q == p)
        start = at_crash[p] or 0
        assert theirs == list(range(start, end)), f"partition {p}: printed {theirs[:5]}.. not from {start}"
        again = sorted(set(mine) & set(theirs))
        assert again == list(range(start, start + len(again))), f"partition {p}: re-printed {again}"
        assert len(again) <= 7, f"partition {p}: more than the uncommitted batch re-printed: {again}"
        assert sorted(set(mine)) == list(range(max(mine, default=-1) + 1)), f"partition {p}: gaps"
    duplicates = len(printed_before) + len(second.printed()) - total
    print(f"records printed twice after the crash: {duplicates} (max.poll.records 7)")


def test_committed_offsets_survive_a_coordinator_sigkill(
    cluster: BrokerCluster, processes: list[ConsumerProcess]
) -> None:
    """SIGKILL the broker that coordinates the group: every committed offset is still there (the new
    coordinator loads them from __consumer_offsets), and the members resume with the next records
    (nothing committed is printed again)."""
    bootstrap = cluster.cluster.kafka_bootstrap
    topic, group, partitions = "resume", "g-resume", 4
    cluster.create_topic(topic, partitions=partitions, min_insync_replicas="1")
    produce(bootstrap, topic, [b"a-%d" % i for i in range(400)], partitions)
    processes += [ConsumerProcess(bootstrap, topic, group) for _ in range(2)]
    until(lambda: sum(len(m.printed()) for m in processes) >= 400, "the first 400 records printed")
    until(lambda: committed(bootstrap, group, topic, partitions) == dict.fromkeys(range(partitions), 100),
          "offsets 100 committed on every partition")  # fmt: skip
    spec = cluster.broker(coordinator_id(bootstrap, group))
    cluster.cluster.kill_node(spec)
    try:
        assert committed(bootstrap, group, topic, partitions) == dict.fromkeys(range(partitions), 100)
        produce(bootstrap, topic, [b"b-%d" % i for i in range(200)], partitions)
        until(lambda: sum(len(m.printed()) for m in processes) >= 600, "the next 200 records printed")
        printed = [(p, o) for m in processes for p, o, _ in m.printed()]
        assert sorted(printed) == sorted((p, o) for p in range(partitions) for o in range(150)), (
            "each record printed once: committed offsets were not lost"
        )
        until(lambda: committed(bootstrap, group, topic, partitions) == dict.fromkeys(range(partitions), 150),
              "offsets 150 committed after the failover")  # fmt: skip
    finally:
        cluster.cluster.start_node(spec)
        until(lambda: cluster.cluster.healthy(spec), f"{spec.name} back")


def test_static_member_restart_keeps_its_partitions_without_rebalance(
    cluster: BrokerCluster, processes: list[ConsumerProcess]
) -> None:
    """KIP-345: SIGKILL a static member and restart it with the same group.instance.id within the
    session timeout: it gets the same partitions and the other member sees no rebalance."""
    bootstrap = cluster.cluster.kafka_bootstrap
    topic, group = "static", "g-static"
    cluster.create_topic(topic, partitions=4)
    slow = {"session.timeout.ms": "15000"}
    a = ConsumerProcess(bootstrap, topic, group, **{"group.instance.id": "a", **slow})
    b = ConsumerProcess(bootstrap, topic, group, **{"group.instance.id": "b", **slow})
    processes += [a, b]
    took_s = wait_split([a, b], 4, "a 2-way split")
    before, b_lines = a.assignment(), b.rebalance_lines
    a.kill()
    started = time.monotonic()
    a2 = ConsumerProcess(bootstrap, topic, group, **{"group.instance.id": "a", **slow})
    processes.append(a2)
    until(lambda: a2.assignment() == before, "the restarted static member's partitions")
    restart_s = time.monotonic() - started
    print(f"static: split after {took_s:.1f} s, restarted member assigned after {restart_s:.1f} s")
    produce(bootstrap, topic, [b"s-%d" % i for i in range(40)], 4)
    until(lambda: len(a2.printed()) + len(b.printed()) >= 40, "records flowing to both")
    assert b.rebalance_lines == b_lines, f"the other member rebalanced:\n{b.log()}"


def test_cooperative_sticky_moves_only_what_it_must(
    cluster: BrokerCluster, processes: list[ConsumerProcess]
) -> None:
    """KIP-429 on real brokers: with cooperative-sticky, a member joining a 2-member group over 6
    partitions makes the others revoke just the partitions it gets (one each), never all of theirs,
    and the newcomer gets them in the follow-up rebalance."""
    topic, group = "coop", "g-coop"
    cluster.create_topic(topic, partitions=6)
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    bootstrap = cluster.cluster.kafka_bootstrap
    processes += [ConsumerProcess(bootstrap, topic, group, **coop) for _ in range(2)]
    wait_split(processes, 6, "a 2-way split")
    before = [(m.assignment(), len(m.stderr)) for m in processes]
    processes.append(ConsumerProcess(bootstrap, topic, group, **coop))
    wait_split(processes, 6, "a 3-way split")
    for member, (owned, lines_before) in zip(processes[:2], before, strict=True):
        assert len(member.assignment()) == 2 and member.assignment() <= owned, "members keep what they own"
        with member.lock:
            revoked = [line for line in member.stderr[lines_before:] if line.startswith("Revoked")]
        assert len(revoked) == 1 and len(revoked[0].split()) == 2, f"revoked only one partition: {revoked}"
