"""``pykraft cluster top``'s arithmetic (issue 17 §4): rates between two scrapes, interval p99 from
histogram buckets, the partition marks, and that it reads the metric names the broker really exports
(the text comes from the broker's own ``KafkaRequestMetrics`` registry, not a hand-written copy)."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from rich.console import Console

from broker.metrics import KafkaRequestMetrics
from pykraft.admin import PartitionInfo, TopicDescription
from pykraft.top import (
    OFFLINE,
    UNDER_REPLICATED,
    NodeSample,
    Sample,
    build_view,
    histogram_quantile,
    parse_metrics,
    render,
)


class _Gauges:
    """A collector exporting the partition and group gauges under the broker's names."""

    def __init__(self, leo: dict, hw: dict, lag: dict) -> None:
        self.leo, self.hw, self.lag = leo, hw, lag

    def collect(self):
        out = []
        for name, values in (("pykraft_partition_log_end_offset", self.leo),
                             ("pykraft_partition_high_watermark", self.hw)):  # fmt: skip
            g = GaugeMetricFamily(name, name, labels=["topic", "partition"])
            for (topic, partition), v in values.items():
                g.add_metric([topic, str(partition)], v)
            out.append(g)
        committed = GaugeMetricFamily("pykraft_consumer_group_committed_offset", "c",
                                      labels=["group", "topic", "partition"])  # fmt: skip
        lag = GaugeMetricFamily("pykraft_consumer_group_lag", "l", labels=["group", "topic", "partition"])
        for (group, topic, partition), (offset, behind) in self.lag.items():
            committed.add_metric([group, topic, str(partition)], offset)
            lag.add_metric([group, topic, str(partition)], behind)
        return [*out, committed, lag]


def _broker_text(produces: int, latency_s: float, leo: dict, hw: dict, lag: dict | None = None) -> str:
    registry = CollectorRegistry()
    metrics = KafkaRequestMetrics(registry)
    for _ in range(produces):
        metrics.observe_request("Produce", latency_s, 1000, 50)
    registry.register(_Gauges(leo, hw, lag or {}))
    return generate_latest(registry).decode()


def _topic(name: str, *partitions: PartitionInfo) -> TopicDescription:
    return TopicDescription(name, "id", None, partitions)


def _partition(index: int, leader: int, isr: tuple[int, ...], replicas=(101, 102, 103)) -> PartitionInfo:
    return PartitionInfo(index, leader, 3, 5, replicas, isr, ())


def test_parse_metrics_reads_the_brokers_own_names() -> None:
    sample = parse_metrics(_broker_text(4, 0.003, {("t", 0): 10}, {("t", 0): 8}, {("g", "t", 0): (6, 2)}))
    assert sample.up
    assert sample.requests == {"Produce": 4}
    assert sample.bytes_in == {"Produce": 4000}
    assert sample.log_end_offset == {("t", 0): 10} and sample.high_watermark == {("t", 0): 8}
    assert sample.group_committed == {("g", "t", 0): 6} and sample.group_lag == {("g", "t", 0): 2}
    buckets = sample.buckets["Produce"]
    assert buckets == sorted(buckets) and math.isinf(buckets[-1][0]) and buckets[-1][1] == 4


@pytest.mark.parametrize(
    ("before", "after", "q", "expected"),
    [
        pytest.param([], [(0.001, 0), (0.01, 10), (math.inf, 10)], 0.5, 0.0055, id="interpolated-in-bucket"),
        pytest.param([(0.001, 5), (0.01, 5), (math.inf, 5)], [(0.001, 5), (0.01, 15), (math.inf, 15)], 0.99,
                     0.00991, id="only-the-interval-counts"),
        pytest.param([], [(0.001, 0), (0.01, 0), (math.inf, 3)], 0.99, 0.01, id="beyond-last-bucket"),
        pytest.param([(0.001, 2), (math.inf, 2)], [(0.001, 2), (math.inf, 2)], 0.99, math.nan,
                     id="no-requests"),
    ],
)
def test_histogram_quantile_over_the_interval(before, after, q, expected) -> None:
    got = histogram_quantile(q, before, after)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_rates_marks_and_lag_between_two_samples() -> None:
    """Rates are deltas over the interval; a partition whose ISR is short is UNDER-REPLICATED, one with
    no leader OFFLINE; a broker whose endpoint did not answer is down; HW/LEO are the leader's."""
    topic0 = _topic("t", _partition(0, 101, (101, 102, 103)), _partition(1, 102, (102,)))
    before = Sample(10.0, {
        ("controller", 1): NodeSample(up=True, controller_active=True),
        ("broker", 101): parse_metrics(_broker_text(2, 0.002, {("t", 0): 100}, {("t", 0): 100})),
        ("broker", 102): parse_metrics(_broker_text(0, 0.002, {("t", 1): 7}, {("t", 1): 7})),
        ("broker", 103): parse_metrics(_broker_text(0, 0.002, {}, {})),
    }, (topic0,))  # fmt: skip
    topic1 = _topic("t", _partition(0, 101, (101, 102)), _partition(1, -1, ()))
    after = Sample(12.0, {
        ("controller", 1): NodeSample(up=True, controller_active=True),
        ("broker", 101): parse_metrics(_broker_text(22, 0.002, {("t", 0): 300}, {("t", 0): 290},
                                                    {("g", "t", 0): (250, 40)})),
        ("broker", 102): parse_metrics(_broker_text(0, 0.002, {("t", 1): 7}, {("t", 1): 7})),
        ("broker", 103): NodeSample(),
    }, (topic1, _topic("__consumer_offsets", _partition(0, 101, (101,)))))  # fmt: skip
    view = build_view(before, after)
    assert view.interval_s == 2.0
    assert view.controllers == ((1, True, True),)
    b101, _, b103 = view.brokers
    assert b101.produce_per_s == pytest.approx(10.0) and b101.bytes_in_per_s == pytest.approx(10_000.0)
    assert b101.p99_ms["Produce"] == pytest.approx(2.47, abs=0.05)  # inside the (1 ms, 2.5 ms] bucket
    assert not b103.up
    p0, p1 = view.partitions  # __consumer_offsets is left out
    assert (p0.high_watermark, p0.log_end_offset, p0.records_per_s) == (290, 300, 100.0)
    assert p0.marks == (UNDER_REPLICATED,)
    assert p1.marks == (OFFLINE, UNDER_REPLICATED) and p1.high_watermark is None
    assert [(g.group, g.partition, g.committed, g.lag) for g in view.groups] == [("g", 0, 250, 40)]
    console = Console(width=160, record=True, color_system=None)
    console.print(render(view))
    screen = console.export_text()
    assert "UNDER-REPLICATED" in screen and "OFFLINE" in screen and "down" in screen and "1*" in screen


def test_a_restarted_broker_counts_from_zero() -> None:
    """Counters of a restarted process start again at 0: the rate and the p99 are what it did since."""
    before = Sample(0.0, {("broker", 101): parse_metrics(_broker_text(50, 0.001, {}, {}))}, ())
    after = Sample(1.0, {("broker", 101): parse_metrics(_broker_text(3, 0.02, {}, {}))}, ())
    (row,) = build_view(before, after).brokers
    assert row.produce_per_s == pytest.approx(3.0)
    assert 10 < row.p99_ms["Produce"] <= 25  # the 3 new requests only, in the (10 ms, 25 ms] bucket


def test_a_broker_that_just_came_up_shows_no_rates() -> None:
    """A broker down at the previous refresh: its counters cover its whole life, so no rate yet."""
    before = Sample(0.0, {("broker", 101): NodeSample()}, ())
    after = Sample(1.0, {("broker", 101): parse_metrics(_broker_text(500, 0.001, {}, {}))}, ())
    (row,) = build_view(before, after).brokers
    assert row.up and math.isnan(row.produce_per_s) and math.isnan(row.bytes_in_per_s)
    console = Console(width=160, record=True, color_system=None)
    console.print(render(build_view(before, after)))
    assert "nan" not in console.export_text()
