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
- ``pykraft_broker_requests_total`` and ``pykraft_broker_request_latency_seconds`` (label ``api``:
  ``Produce``, ``Fetch``, ``ReplicaFetch``, ...): request rates and latencies, timed around each
  gRPC handler by ``RequestTimer`` (a server interceptor), whatever the answer's error code.

Consumer group lag is not exported: pykraft has no consumer groups yet.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.partition import Partition, Role
from broker.replica_manager import ReplicaManager

# Full gRPC method name -> the ``api`` label.
TIMED_METHODS = {
    "/pykraft.broker.BrokerService/Produce": "Produce",
    "/pykraft.broker.BrokerService/Fetch": "Fetch",
    "/pykraft.broker.BrokerService/Metadata": "Metadata",
    "/pykraft.broker.BrokerService/ListOffsets": "ListOffsets",
    "/pykraft.replica.ReplicaService/Fetch": "ReplicaFetch",
    "/pykraft.replica.ReplicaService/OffsetsForLeaderEpoch": "OffsetsForLeaderEpoch",
}
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


class BrokerMetrics:
    """One broker's registry: the collector plus event counters and request histograms."""

    def __init__(self, manager: ReplicaManager) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(ReplicaCollector(manager))
        self.isr_shrinks = Counter(
            "pykraft_broker_isr_shrinks", "ISR shrinks of partitions led here", registry=self.registry
        )
        self.isr_expands = Counter(
            "pykraft_broker_isr_expands", "ISR expansions of partitions led here", registry=self.registry
        )
        self.requests = Counter(
            "pykraft_broker_requests", "Requests handled, by API", ["api"], registry=self.registry
        )
        self.latency = Histogram(
            "pykraft_broker_request_latency_seconds", "Request handling time, by API", ["api"],
            buckets=LATENCY_BUCKETS_S, registry=self.registry,
        )  # fmt: skip

        self._isr_seen: dict[tuple[str, int], tuple[int, frozenset[int]]] = {}

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

    def observe_request(self, api: str, seconds: float) -> None:
        self.requests.labels(api).inc()
        self.latency.labels(api).observe(seconds)


class RequestTimer(grpc.aio.ServerInterceptor):
    """Times the unary handlers named in ``TIMED_METHODS`` into ``BrokerMetrics``."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        api = TIMED_METHODS.get(handler_call_details.method)
        if handler is None or api is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary
        metrics = self.metrics

        async def timed(request: Any, context: grpc.aio.ServicerContext) -> Any:
            start = time.perf_counter()
            try:
                return await inner(request, context)
            finally:
                metrics.observe_request(api, time.perf_counter() - start)

        return grpc.unary_unary_rpc_method_handler(
            timed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
