"""A broker's Prometheus metrics: Kafka's key replication and request signals.

Read at scrape time from the ``ReplicaManager`` (gauges, so nothing is kept twice):

- ``pykraft_broker_under_replicated_partitions``: partitions this broker leads whose ISR is smaller
  than the replica set (Kafka's ``UnderReplicatedPartitions``);
- ``pykraft_broker_leader_partitions`` and ``pykraft_broker_partitions``: led / hosted partitions;
- ``pykraft_partition_log_end_offset`` and ``pykraft_partition_high_watermark`` (labels ``topic``,
  ``partition``): every hosted replica's LEO and HW.

Counted as events happen:

- ``pykraft_broker_isr_shrinks_total`` / ``pykraft_broker_isr_expands_total``: ISR changes of
  partitions this broker leads, as the controller committed them, whoever proposed them (this
  leader's AlterPartition, or the controller fencing a broker). ``observe_isr`` compares each led
  partition's ISR with the one seen last in the same leader epoch; the broker calls it after every
  metadata update and AlterPartition answer. A new leadership starts a new baseline (not counted).

The Kafka listener (``broker.kafka.listener``, ``broker.kafka.handlers``), label ``api`` = Kafka's API name
(``Produce``, ``Fetch``, ``Metadata``, ...):

- ``pykraft_kafka_requests_total``, ``pykraft_kafka_request_latency_seconds`` (from the complete frame
  to the encoded answer: a long poll or an acks=all wait counts), ``pykraft_kafka_request_bytes_total``
  and ``pykraft_kafka_response_bytes_total`` (frames with their size prefix);
- ``pykraft_kafka_request_errors_total`` (labels ``api``, ``error``: Kafka's error name): every
  non-zero error code in an answer, top-level or per partition;
- ``pykraft_kafka_connections`` (label ``listener``): open connections, read at scrape time;
  ``pykraft_kafka_connections_closed_total`` (label ``reason``: the listener's log event, e.g.
  ``frame_rejected``, ``connection_idle``, ``connection_rejected``) — closes the broker decided.

Consumer groups, for the groups this broker coordinates (``register_group_lag``), read at scrape time:

- ``pykraft_consumer_group_committed_offset`` (labels ``group``, ``topic``, ``partition``);
- ``pykraft_consumer_group_lag``: the partition's high watermark minus the committed offset. The HW
  is the local replica's when this broker hosts one (a follower's may trail the leader's by one
  fetch), else the leader's as polled every few seconds by ``broker.group.lag``;
- ``pykraft_consumer_groups`` (label ``state``): groups coordinated here, by state.

Collectors run in prometheus-client's thread while the event loop changes the state: they copy what
they read and retry a read that raced with a change.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.group.coordinator import GroupCoordinator
from broker.replica.partition import Partition, Role
from broker.replica.replica_manager import ReplicaManager
from proto.kafka_types import TopicPartition

# Produce with acks=all and long-polling fetches wait up to seconds.
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ReplicaCollector(Collector):
    """Gauges over the hosted partitions, computed when Prometheus scrapes."""

    def __init__(self, manager: ReplicaManager) -> None:
        self.manager = manager

    def collect(self) -> Iterable[Metric]:
        partitions = list(self.manager.partitions.values())
        led = [p for p in partitions if p.role is Role.LEADER]
        under = GaugeMetricFamily(
            "pykraft_broker_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than the replica set",
            value=sum(1 for p in led if len(p.isr) < len(p.replicas)),
        )
        leaders = GaugeMetricFamily("pykraft_broker_leader_partitions", "Partitions led here", value=len(led))
        hosted = GaugeMetricFamily(
            "pykraft_broker_partitions", "Partitions hosted here", value=len(partitions)
        )
        leo = GaugeMetricFamily(
            "pykraft_partition_log_end_offset",
            "Log end offset of the local replica",
            labels=["topic", "partition"],
        )
        hw = GaugeMetricFamily(
            "pykraft_partition_high_watermark",
            "High watermark of the local replica",
            labels=["topic", "partition"],
        )
        for p in sorted(partitions, key=lambda p: (p.topic, p.partition)):
            labels = [p.topic, str(p.partition)]
            leo.add_metric(labels, p.log_end_offset)
            hw.add_metric(labels, p.high_watermark)
        return [under, leaders, hosted, leo, hw]


READ_RETRIES = 5


class ListenerCollector(Collector):
    """Open connections per Kafka listener, read at scrape time."""

    def __init__(self, listeners: Callable[[], Iterable[tuple[str, int]]]) -> None:
        self.listeners = listeners

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily(
            "pykraft_kafka_connections", "Open connections on a Kafka listener", labels=["listener"]
        )
        for name, count in sorted(self.listeners()):
            gauge.add_metric([name], count)
        return [gauge]


class SendfileCollector(Collector):
    """Bytes of Fetch records each Kafka listener sent from the segment files with sendfile, and those
    it had to read into memory instead (no plain socket under the connection), read at scrape time."""

    def __init__(self, listeners: Callable[[], Iterable[tuple[str, int, int]]]) -> None:
        self.listeners = listeners

    def collect(self) -> Iterable[Metric]:
        sent = CounterMetricFamily("pykraft_kafka_sendfile_bytes", "Records bytes sent with sendfile",
                                   labels=["listener"])  # fmt: skip
        copied = CounterMetricFamily(
            "pykraft_kafka_records_copied_bytes",
            "Records bytes of file slices read into memory where sendfile could not serve",
            labels=["listener"],
        )
        for name, sendfile_bytes, copied_bytes in sorted(self.listeners()):
            sent.add_metric([name], sendfile_bytes)
            copied.add_metric([name], copied_bytes)
        return [sent, copied]


class KafkaRequestMetrics:
    """The Kafka listener's counters (see the module docstring); shared by every listener."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter("pykraft_kafka_requests", "Kafka requests answered or dropped, by API",
                                ["api"], registry=registry)  # fmt: skip
        self.errors = Counter("pykraft_kafka_request_errors", "Non-zero error codes in Kafka answers",
                              ["api", "error"], registry=registry)  # fmt: skip
        self.latency = Histogram("pykraft_kafka_request_latency_seconds", "Kafka request time, by API",
                                 ["api"], buckets=LATENCY_BUCKETS_S, registry=registry)  # fmt: skip
        self.bytes_in = Counter("pykraft_kafka_request_bytes", "Kafka request bytes, by API", ["api"],
                                registry=registry)  # fmt: skip
        self.bytes_out = Counter("pykraft_kafka_response_bytes", "Kafka response bytes, by API", ["api"],
                                 registry=registry)  # fmt: skip
        self.closes = Counter("pykraft_kafka_connections_closed", "Connections the broker closed, by reason",
                              ["reason"], registry=registry)  # fmt: skip
        self._children: dict[str, tuple[Any, Any, Any, Any]] = {}

    def observe_request(self, api: str, seconds: float, bytes_in: int, bytes_out: int) -> None:
        children = self._children.get(api)
        if children is None:  # labels() costs a lock and a dict lookup per call: once per API
            children = self._children[api] = (
                self.requests.labels(api), self.latency.labels(api), self.bytes_in.labels(api),
                self.bytes_out.labels(api),
            )  # fmt: skip
        requests, latency, received, sent = children
        requests.inc()
        latency.observe(seconds)
        received.inc(bytes_in)
        if bytes_out:
            sent.inc(bytes_out)

    def observe_errors(self, api: str, errors: Iterable[str]) -> None:
        for name in errors:
            self.errors.labels(api, name).inc()

    def observe_close(self, event: str) -> None:
        self.closes.labels(event).inc()

    def register_listeners(self, listeners: Callable[[], Iterable[tuple[str, int]]]) -> None:
        """``listeners()`` gives (listener name, open connections) at scrape time."""
        self.registry.register(ListenerCollector(listeners))

    def register_sendfile(self, listeners: Callable[[], Iterable[tuple[str, int, int]]]) -> None:
        """``listeners()`` gives (listener name, sendfile bytes, copied bytes) at scrape time."""
        self.registry.register(SendfileCollector(listeners))


class GroupLagCollector(Collector):
    """Committed offsets and lag of the groups coordinated here (see the module docstring)."""

    def __init__(
        self,
        manager: ReplicaManager,
        core: GroupCoordinator,
        remote: Callable[[], dict[TopicPartition, int]],
    ) -> None:
        self.manager = manager
        self.core = core
        self.remote = remote

    def _read(
        self,
    ) -> tuple[dict[str, dict[tuple[str, int], int]], dict[str, int], dict[TopicPartition, int]]:
        for _ in range(READ_RETRIES):
            try:
                committed = self.core.committed_offsets()
                states = Tally(state.value for state in self.core.group_states().values())
                hws = {tp: p.high_watermark for tp, p in list(self.manager.partitions.items())}
                hws = {**self.remote(), **hws}  # a local replica's HW wins over a polled one
                return committed, dict(states), hws
            except RuntimeError:  # a dict changed size under us: the loop moved on; read again
                continue
        return {}, {}, {}

    def collect(self) -> Iterable[Metric]:
        committed, states, hws = self._read()
        offsets = GaugeMetricFamily(
            "pykraft_consumer_group_committed_offset",
            "Committed offset of a group on a partition",
            labels=["group", "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "pykraft_consumer_group_lag",
            "High watermark minus the committed offset",
            labels=["group", "topic", "partition"],
        )
        for group_id, tps in sorted(committed.items()):
            for (topic, partition), offset in sorted(tps.items()):
                labels = [group_id, topic, str(partition)]
                offsets.add_metric(labels, offset)
                if (topic, partition) in hws:
                    lag.add_metric(labels, max(0, hws[TopicPartition(topic, partition)] - offset))
        groups = GaugeMetricFamily(
            "pykraft_consumer_groups", "Groups coordinated here, by state", labels=["state"]
        )
        for state, count in sorted(states.items()):
            groups.add_metric([state], count)
        return [offsets, lag, groups]


class BrokerMetrics:
    """One broker's registry: the collector plus event counters and request histograms."""

    def __init__(self, manager: ReplicaManager) -> None:
        self.registry = CollectorRegistry()
        self._manager = manager
        self.registry.register(ReplicaCollector(manager))
        self.isr_shrinks = Counter(
            "pykraft_broker_isr_shrinks", "ISR shrinks of partitions led here", registry=self.registry
        )
        self.isr_expands = Counter(
            "pykraft_broker_isr_expands", "ISR expansions of partitions led here", registry=self.registry
        )
        self.kafka = KafkaRequestMetrics(self.registry)
        self._isr_seen: dict[tuple[str, int], tuple[int, frozenset[int]]] = {}

    def register_group_lag(
        self, core: GroupCoordinator, remote: Callable[[], dict[TopicPartition, int]] = dict
    ) -> None:
        """Export the committed offsets and lag of the groups ``core`` coordinates; ``remote()`` gives
        the HWs of partitions not hosted here (``broker.group.lag``)."""
        self.registry.register(GroupLagCollector(self._manager, core, remote))

    def observe_isr(self, partitions: Iterable[Partition]) -> None:
        """Count shrinks/expands of led partitions since the last call (see the module docstring)."""
        seen: dict[tuple[str, int], tuple[int, frozenset[int]]] = {}
        for p in partitions:
            if p.role is not Role.LEADER:
                continue
            key = (p.topic, p.partition)
            seen[key] = (p.leader_epoch, frozenset(p.isr))
            epoch, old_isr = self._isr_seen.get(key, (p.leader_epoch, frozenset(p.isr)))
            if epoch != p.leader_epoch or old_isr == p.isr:
                continue
            if len(p.isr) < len(old_isr):
                self.isr_shrinks.inc()
            elif len(p.isr) > len(old_isr):
                self.isr_expands.inc()
        self._isr_seen = seen
