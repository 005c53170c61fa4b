"""broker.metrics: gauges read from the hosted partitions at scrape time, and ISR shrinks/expands
counted per leadership (a new leader epoch starts a new baseline; followers are not counted)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.metrics import BrokerMetrics
from broker.replica.partition import Partition

LOCAL = 1


def scrape(metrics: BrokerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def leader(topic: str, isr: tuple[int, ...], epoch: int = 1) -> Partition:
    p = Partition(topic, 0, LOCAL, replica_lag_time_max_ms=1000, min_insync_replicas=1)
    p.become_leader(epoch, 1, isr, (1, 2, 3), log_end_offset=5, high_watermark=3, now_ms=0)
    return p


def follower(topic: str) -> Partition:
    p = Partition(topic, 0, LOCAL, replica_lag_time_max_ms=1000, min_insync_replicas=1)
    p.become_follower(2, 1, 1, (1, 2, 3), (1, 2, 3), log_end_offset=7, high_watermark=4)
    return p


def metrics_for(partitions: list[Partition]) -> BrokerMetrics:
    manager = SimpleNamespace(partitions={(p.topic, p.partition): p for p in partitions})
    return BrokerMetrics(manager)  # type: ignore[arg-type]


def test_gauges_read_the_hosted_partitions() -> None:
    """UnderReplicatedPartitions counts led partitions with ISR < replicas; LEO/HW per replica."""
    metrics = metrics_for([leader("full", (1, 2, 3)), leader("short", (1, 2)), follower("f")])
    values = scrape(metrics)
    assert values[("pykraft_broker_under_replicated_partitions", ())] == 1
    assert values[("pykraft_broker_leader_partitions", ())] == 2
    assert values[("pykraft_broker_partitions", ())] == 3
    short = (("partition", "0"), ("topic", "short"))
    assert values[("pykraft_partition_log_end_offset", short)] == 5
    assert values[("pykraft_partition_high_watermark", short)] == 3
    assert values[("pykraft_partition_log_end_offset", (("partition", "0"), ("topic", "f")))] == 7


@pytest.mark.parametrize(
    ("before", "after", "epochs", "shrinks", "expands"),
    [
        ((1, 2, 3), (1, 2), (1, 1), 1, 0),
        ((1, 2), (1, 2, 3), (1, 1), 0, 1),
        ((1, 2, 3), (1, 2, 3), (1, 1), 0, 0),
        ((1, 2, 3), (1, 2), (1, 2), 0, 0),
    ],
    ids=["shrink", "expand", "unchanged", "new-leadership-is-a-baseline"],
)
def test_isr_changes_are_counted_per_leadership(
    before: tuple[int, ...], after: tuple[int, ...], epochs: tuple[int, int], shrinks: int, expands: int
) -> None:
    p = leader("t", before, epoch=epochs[0])
    metrics = metrics_for([p])
    metrics.observe_isr([p])
    p.become_leader(epochs[1], 2, after, (1, 2, 3), log_end_offset=5, high_watermark=3, now_ms=0)
    metrics.observe_isr([p])
    values = scrape(metrics)
    assert values[("pykraft_broker_isr_shrinks_total", ())] == shrinks
    assert values[("pykraft_broker_isr_expands_total", ())] == expands
