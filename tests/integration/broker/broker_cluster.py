"""Helpers for the broker integration tests: a ``LocalCluster`` with short timeouts, raw Produce, Fetch,
ListOffsets and Metadata on a broker's Kafka listener (``tests.kafka_call``: the broker under test
answers itself, with its exact error codes and epochs; batches built with
``storage.record_batch.build_batch`` go to the log as they are), waits with
deadlines, a node's Prometheus metrics, and a stopped replica's log read from its files. Every
process is stopped by pid in the fixtures' ``finally`` (``LocalCluster.down`` then ``kill_node`` for
anything left)."""

from __future__ import annotations

import contextlib
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
from prometheus_client.parser import text_string_to_metric_families

from proto import errors
from proto.clock import wall_clock_ms
from proto.errors import ErrorCode
from proto.kafka import messages as m
from pykraft.admin import AdminClient, PartitionInfo
from pykraft.cluster import LocalCluster, NodeSpec
from storage.log import Log
from storage.record_batch import build_batch, decode_records
from tests import kafka_call as kafka
from tests.kafka_call import Produced

# Short protocol timeouts so that failures are detected quickly, yet robust on a loaded 2-core machine.
FAST_OVERRIDES = {
    "broker.session.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "200",
    "replica.lag.time.max.ms": "1500",
    "replica.fetch.max.wait.ms": "200",
    "replica.fetch.backoff.ms": "50",
    "request.timeout.ms": "5000",
    "controlled.shutdown.timeout.ms": "10000",
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.heartbeat.interval.ms": "50",
}
TopicAlreadyExistsError = errors.exception_class(ErrorCode.TOPIC_ALREADY_EXISTS)
START_TIMEOUT_S = 60.0
RPC_TIMEOUT_S = 10.0
SCRAPE_TIMEOUT_S = 5.0


def wait_for(
    condition: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.05
) -> object:
    """Poll ``condition`` until truthy (returned) or fail naming ``what`` after ``timeout_s``."""
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


def check_fetch_wait_below_lag(settings: dict[str, str]) -> None:
    """A follower caught up when a fetch *arrived* at the leader's LEO, so a fetch parked longer than
    ``replica.lag.time.max.ms`` makes an in-sync follower "lagging" at the leader's next append until its
    next fetch arrives: an ISR-shrink tick in that window drops it (acks=all then answers
    NOT_ENOUGH_REPLICAS_AFTER_APPEND). Kafka's rule: the fetch wait stays below the lag time."""
    wait_ms, lag_ms = int(settings["replica.fetch.max.wait.ms"]), int(settings["replica.lag.time.max.ms"])
    if wait_ms >= lag_ms:
        raise ValueError(f"replica.fetch.max.wait.ms={wait_ms} is not below replica.lag.time.max.ms={lag_ms}")


@contextlib.contextmanager
def running_cluster(
    data_dir: Path, brokers: int = 3, log_level: str = "", **overrides: str
) -> Iterator[BrokerCluster]:
    settings = {**FAST_OVERRIDES, **overrides}
    check_fetch_wait_below_lag(settings)
    cluster = LocalCluster(
        data_dir, controllers=3, brokers=brokers, overrides=settings,
        log_level=log_level,
    )  # fmt: skip
    cluster.data_dir.mkdir(parents=True, exist_ok=True)
    cluster.plan()
    bc = BrokerCluster(cluster)
    try:
        cluster.start()
        cluster.wait_until(
            lambda: all(cluster.healthy(n) for n in cluster.nodes), START_TIMEOUT_S, "every node healthy"
        )
        bc.wait_every_broker_listed()
        yield bc
    finally:
        bc.close()
        for spec in cluster.nodes:  # SIGSTOPped nodes cannot handle SIGTERM: wake them first
            cluster.signal_node(spec, signal.SIGCONT)
        cluster.down(timeout_s=15.0)
        for spec in cluster.nodes:
            cluster.kill_node(spec)


class BrokerCluster:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.admin = AdminClient(cluster.controller_addresses, timeout_s=30.0)

    def close(self) -> None:
        self.admin.close()

    # ---- nodes --------------------------------------------------------------------------------

    def broker(self, broker_id: int) -> NodeSpec:
        return self.cluster.node(f"broker-{broker_id}")

    def active_controller(self) -> NodeSpec:
        leader = self.admin.describe_quorum().leader_id
        return self.cluster.node(f"controller-{leader}")

    # ---- metadata ----------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, rf: int = 3, **configs: str) -> None:
        """Create ``name`` and wait until every replica acts on it.

        The admin client retries CreateTopics on NOT_CONTROLLER and timeouts, and an attempt that
        got one of those may still have committed (a forward that timed out, a controller that lost
        its leadership after appending — the new leader commits the entry): the retry then answers
        TOPIC_ALREADY_EXISTS. That counts as created when the topic is exactly the one asked for."""
        assignments = {p: [101 + (p + i) % rf for i in range(rf)] for p in range(partitions)}
        topic_configs = {k.replace("_", "."): v for k, v in configs.items()}
        try:
            self.admin.create_topic(name, configs=topic_configs, assignments=assignments)
        except TopicAlreadyExistsError:
            (existing,) = self.admin.describe_topics([name])
            layout = {p.partition: list(p.replicas) for p in existing.partitions}
            assert layout == assignments, f"topic {name} existed already, as {layout}"
        wait_for(lambda: self.all_brokers_lead_or_follow(name, partitions), 30, f"{name} on every replica")

    def wait_every_broker_listed(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until every broker's own Metadata (and so DescribeCluster) lists every broker.

        A broker is healthy once the controller unfenced it, but each broker answers Metadata and
        DescribeCluster from its own image, which learns of the last unfencing a moment later (from a
        standby controller, with the leader's next append): tests that read those right after start saw
        a broker missing (test_admin, shuffle seed 146505). The cluster is ready for them after this."""
        expected = {n.node_id for n in self.cluster.broker_nodes}

        def listed_everywhere() -> bool:
            return all(
                {b.node_id for b in self.metadata_response(broker_id, []).brokers} == expected
                for broker_id in expected
            )

        wait_for(listed_everywhere, timeout_s, "every broker's Metadata to list every broker")

    def describe(self, topic: str, partition: int = 0) -> PartitionInfo:
        return self.admin.describe_topics([topic])[0].partitions[partition]

    def metadata_response(self, broker_id: int, topics: list[str] | None) -> m.MetadataResponse:
        """Metadata from ``broker_id``'s Kafka listener (``topics=None``: every topic)."""
        return kafka.metadata(self.kafka_address(broker_id), topics)

    def metadata(self, broker_id: int, topic: str, partition: int = 0) -> m.MetadataResponsePartition | None:
        """``topic``-``partition`` as ``broker_id`` sees it in its metadata image (None if unknown)."""
        (described,) = self.metadata_response(broker_id, [topic]).topics
        return next((p for p in described.partitions if p.partition_index == partition), None)

    def all_brokers_lead_or_follow(self, topic: str, partitions: int) -> bool:
        for p in range(partitions):
            info = self.describe(topic, p)
            if info.leader < 0:
                return False
            for b in info.replicas:
                md = self.metadata(b, topic, p)
                if md is None or md.leader_id != info.leader or md.leader_epoch != info.leader_epoch:
                    return False
        return True

    def leader(self, topic: str, partition: int = 0, timeout_s: float = 30.0) -> int:
        """The leader the controller names, once that broker acts on it (its own Metadata agrees)."""

        def found() -> int:
            info = self.describe(topic, partition)
            if info.leader < 0 or not self.cluster.is_running(self.broker(info.leader)):
                return 0
            md = self.metadata(info.leader, topic, partition)
            ok = md is not None and md.leader_id == info.leader and md.leader_epoch == info.leader_epoch
            return info.leader if ok else 0

        try:
            return int(wait_for(found, timeout_s, f"a live leader of {topic}-{partition}"))
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; controller: {self.describe(topic, partition)}, brokers: "
                f"{self.admin.describe_cluster().brokers}"
            ) from None

    @contextlib.contextmanager
    def leader_alone_in_isr(self, topic: str, partition: int = 0) -> Iterator[int]:
        """The partition's followers SIGSTOPped until the ISR is the leader alone (yields the leader);
        then resumed, and back in the ISR on exit. For an ISR below min.insync.replicas: a topic whose
        min.insync.replicas exceeds its replication factor no longer gives one (the effective minimum
        is the replication factor, as in Kafka)."""
        leader = self.leader(topic, partition)
        replicas = set(self.describe(topic, partition).replicas)
        stopped: list[int] = []
        try:
            for broker_id in sorted(replicas - {leader}):
                self.cluster.signal_node(self.broker(broker_id), signal.SIGSTOP)
                stopped.append(broker_id)
            self.wait_isr(topic, {leader}, partition=partition)
            yield leader
        finally:
            for broker_id in stopped:
                self.cluster.signal_node(self.broker(broker_id), signal.SIGCONT)
        self.wait_isr(topic, replicas, partition=partition)

    def wait_isr(self, topic: str, isr: set[int], timeout_s: float = 30.0, partition: int = 0) -> None:
        """Until the controller committed ``isr`` and the leader acts on it (its metadata shows it)."""

        def reached() -> bool:
            info = self.describe(topic, partition)
            if set(info.isr) != isr or info.leader < 0:
                return False
            md = self.metadata(info.leader, topic, partition)
            return md is not None and set(md.isr_nodes) == isr

        wait_for(reached, timeout_s, f"ISR {sorted(isr)} of {topic}-{partition}")

    # ---- data (raw Kafka requests to one broker's Kafka listener: tests.kafka_call) ----------------

    def kafka_address(self, broker_id: int) -> str:
        return self.broker(broker_id).kafka_address

    def produce_raw(
        self,
        broker_id: int,
        topic: str,
        records: bytes,
        acks: int = -1,
        partition: int = 0,
        timeout_ms: int = 5000,
    ) -> Produced:
        return kafka.produce(self.kafka_address(broker_id), topic, partition, records, acks, timeout_ms)

    def produce(self, broker_id: int, topic: str, values: list[bytes], acks: int = -1, **kw) -> Produced:
        now = int(time.time() * 1000)
        return self.produce_raw(broker_id, topic, batch(values, now), acks=acks, **kw)

    def fetch(
        self, broker_id: int, topic: str, offset: int, partition: int = 0, **kw: int
    ) -> m.FetchResponsePartitionData:
        return kafka.fetch(self.kafka_address(broker_id), topic, partition, offset, **kw)

    def read_all(self, broker_id: int, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
        return kafka.read_all(self.kafka_address(broker_id), topic, partition)

    def list_offset(
        self, broker_id: int, topic: str, timestamp: int, partition: int = 0, **kw: int
    ) -> m.ListOffsetsResponseListOffsetsPartitionResponse:
        return kafka.list_offset(self.kafka_address(broker_id), topic, partition, timestamp, **kw)

    def high_watermark(self, broker_id: int, topic: str, partition: int = 0) -> int:
        """ListOffsets LATEST. A leader new in its epoch answers OFFSET_NOT_AVAILABLE (retriable) until a
        follower fetched in that epoch (its HW is below the epoch's start): retried, as a client does."""

        def answered() -> m.ListOffsetsResponseListOffsetsPartitionResponse | None:
            r = self.list_offset(broker_id, topic, kafka.LATEST, partition)
            return None if r.error_code == ErrorCode.OFFSET_NOT_AVAILABLE else r

        r = wait_for(answered, RPC_TIMEOUT_S, f"{topic}-{partition}'s HW on broker {broker_id}")
        assert r.error_code == 0, f"ListOffsets: {ErrorCode(r.error_code).name}"  # type: ignore[attr-defined]
        return r.offset  # type: ignore[attr-defined]


def batch(values: list[bytes], timestamp_ms: int = 0, **kw) -> bytes:
    return build_batch([(None, v, (), timestamp_ms) for v in values], **kw)


def scrape(spec: NodeSpec) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``(sample name, sorted labels) -> value`` from the node's /metrics."""
    url = f"http://127.0.0.1:{spec.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(spec: NodeSpec, name: str, **labels: str) -> float | None:
    return scrape(spec).get((name, tuple(sorted(labels.items()))))


def read_log_file(directory: Path, end: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every record below ``end`` in a stopped replica's partition directory."""
    log = Log(directory, None, wall_clock_ms)
    try:
        out: list[tuple[int, bytes]] = []
        while len(out) < end:
            records = decode_records(log.read(len(out), 1 << 30, max_offset=end))
            assert records, f"{directory}: nothing at offset {len(out)} below {end}"
            out.extend((r.offset, r.value) for r in records if r.offset >= len(out))
        return out
    finally:
        log.close()
