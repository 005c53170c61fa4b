"""``pykraft cluster top``: a live terminal view of a local cluster, refreshed each second.

What it shows (Kafka's words):

- **Brokers**: produce and fetch request rates, bytes in/out per second, and the p99 request latency of
  Produce and Fetch over the last interval; ``down`` when the metrics endpoint does not answer.
- **Partitions**: leader, leader epoch, replicas, ISR, the leader's high watermark and log end
  offset, records/s appended (the leader's LEO delta), and the marks ``UNDER-REPLICATED`` (ISR
  smaller than the replica set) and ``OFFLINE`` (no leader).
- **Consumer groups**: committed offset and lag per partition, from the group coordinators.

Sources, read once per refresh: every node's Prometheus endpoint (``DATA/cluster.json`` records its
metrics port) and the admin API (gRPC) for leaders, epochs and ISRs. A rate is the delta of a counter
between two consecutive scrapes over the time between them; a p99 is interpolated from the deltas of
the histogram's buckets (Prometheus' ``histogram_quantile`` over the interval).

The module is split so that the arithmetic is testable without processes: ``parse_metrics`` turns
scraped text into a ``NodeSample``; ``build_view(previous, current)`` is pure; ``render(view)`` makes the
rich renderable; ``collect`` and ``run`` do the I/O.
"""

from __future__ import annotations

import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from proto import errors
from proto.kafka_types import NO_LEADER, TopicPartition
from pykraft.admin import AdminClient, TopicDescription

SCRAPE_TIMEOUT_S = 0.8
ADMIN_TIMEOUT_S = 2.0
LATENCY_APIS = ("Produce", "Fetch")
UNDER_REPLICATED = "UNDER-REPLICATED"
OFFLINE = "OFFLINE"



@dataclass(frozen=True, slots=True)
class NodeTarget:
    """A node to scrape: what ``cluster.json`` records of it."""

    role: str
    node_id: int
    metrics_url: str  # "" when the node serves no metrics


@dataclass(slots=True)
class NodeSample:
    """One scrape of one node's ``/metrics``; ``up`` is False when it did not answer."""

    up: bool = False
    requests: dict[str, float] = field(default_factory=dict)  # Kafka API -> requests (counter)
    bytes_in: dict[str, float] = field(default_factory=dict)
    bytes_out: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # API -> (le, cumulative)
    log_end_offset: dict[TopicPartition, float] = field(default_factory=dict)
    high_watermark: dict[TopicPartition, float] = field(default_factory=dict)
    group_committed: dict[tuple[str, str, int], float] = field(default_factory=dict)
    group_lag: dict[tuple[str, str, int], float] = field(default_factory=dict)
    controller_active: bool = False


@dataclass(frozen=True, slots=True)
class Sample:
    """Everything read at one refresh."""

    time_s: float  # monotonic
    nodes: Mapping[tuple[str, int], NodeSample]
    topics: tuple[TopicDescription, ...]
    admin_error: str = ""  # why leaders/ISRs are missing, when the admin API did not answer


def parse_metrics(text: str) -> NodeSample:
    """The figures ``top`` shows, from a node's Prometheus text exposition."""
    sample = NodeSample(up=True)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            _take(sample, s.name, s.labels, s.value)
    for series in sample.buckets.values():
        series.sort()
    return sample


def _take(sample: NodeSample, name: str, labels: Mapping[str, str], value: float) -> None:
    api = labels.get("api", "")
    if name == "pykraft_kafka_requests_total":
        sample.requests[api] = value
    elif name == "pykraft_kafka_request_bytes_total":
        sample.bytes_in[api] = value
    elif name == "pykraft_kafka_response_bytes_total":
        sample.bytes_out[api] = value
    elif name == "pykraft_kafka_request_latency_seconds_bucket":
        sample.buckets.setdefault(api, []).append((float(labels["le"]), value))
    elif name in ("pykraft_partition_log_end_offset", "pykraft_partition_high_watermark"):
        target = sample.log_end_offset if name.endswith("log_end_offset") else sample.high_watermark
        target[(labels["topic"], int(labels["partition"]))] = value
    elif name in ("pykraft_consumer_group_committed_offset", "pykraft_consumer_group_lag"):
        key = (labels["group"], labels["topic"], int(labels["partition"]))
        (sample.group_lag if name.endswith("_lag") else sample.group_committed)[key] = value
    elif name == "pykraft_controller_active":
        sample.controller_active = value >= 1


Buckets = list[tuple[float, float]]  # (upper bound le, cumulative count), sorted by le


def histogram_quantile(q: float, before: Buckets, after: Buckets) -> float:
    """The q-quantile (seconds) of the observations between two scrapes of one histogram, by linear
    interpolation inside the bucket that holds it (as Prometheus does); NaN when nothing was observed."""
    counts_before = dict(before)
    if any(count < counts_before.get(le, 0.0) for le, count in after):
        counts_before = {}  # the node restarted: its histogram counts again from zero
    deltas = [(le, count - counts_before.get(le, 0.0)) for le, count in after]
    total = deltas[-1][1] if deltas else 0.0
    if total <= 0:
        return math.nan
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in deltas:
        if count >= rank:
            if math.isinf(le):
                return lower_le  # beyond the last finite bucket: its bound is all we know
            return lower_le + (le - lower_le) * (rank - lower_count) / max(count - lower_count, 1e-12)
        lower_le, lower_count = le, count
    return lower_le


@dataclass(frozen=True, slots=True)
class BrokerRow:
    broker_id: int
    up: bool
    produce_per_s: float
    fetch_per_s: float
    bytes_in_per_s: float
    bytes_out_per_s: float
    p99_ms: Mapping[str, float]  # Kafka API -> p99 over the interval (NaN: no request)


@dataclass(frozen=True, slots=True)
class PartitionRow:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    high_watermark: int | None
    log_end_offset: int | None
    records_per_s: float
    marks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GroupRow:
    group: str
    topic: str
    partition: int
    committed: int
    lag: int


@dataclass(frozen=True, slots=True)
class View:
    interval_s: float
    controllers: tuple[tuple[int, bool, bool], ...]  # (node id, up, active)
    brokers: tuple[BrokerRow, ...]
    partitions: tuple[PartitionRow, ...]
    groups: tuple[GroupRow, ...]
    admin_error: str


def _rate(before: Mapping[str, float], after: Mapping[str, float], key: str, interval_s: float) -> float:
    if key not in after or interval_s <= 0:
        return 0.0
    # A restarted node's counters start again from zero: count what it did since.
    delta = after[key] - before.get(key, 0.0)
    return (after[key] if delta < 0 else delta) / interval_s


def _broker_row(broker_id: int, before: NodeSample, after: NodeSample, interval_s: float) -> BrokerRow:
    if not after.up:
        return BrokerRow(broker_id, False, 0.0, 0.0, 0.0, 0.0, {})
    if not before.up:  # just came (back) up: its counters cover its whole life, not the interval
        return BrokerRow(broker_id, True, math.nan, math.nan, math.nan, math.nan, {})
    p99 = {api: histogram_quantile(0.99, before.buckets.get(api, []), after.buckets.get(api, [])) * 1000
           for api in LATENCY_APIS}  # fmt: skip
    return BrokerRow(
        broker_id, True,
        _rate(before.requests, after.requests, "Produce", interval_s),
        _rate(before.requests, after.requests, "Fetch", interval_s),
        sum(_rate(before.bytes_in, after.bytes_in, api, interval_s) for api in after.bytes_in),
        sum(_rate(before.bytes_out, after.bytes_out, api, interval_s) for api in after.bytes_out),
        p99,
    )  # fmt: skip


def _partition_rows(previous: Sample, current: Sample, interval_s: float) -> list[PartitionRow]:
    rows = []
    for topic in sorted(current.topics, key=lambda t: t.name):
        if topic.name.startswith("__"):
            continue  # internal topics (__consumer_offsets) are the coordinators' business
        for p in topic.partitions:
            key = (topic.name, p.partition)
            leader_now = current.nodes.get(("broker", p.leader), NodeSample())
            leader_before = previous.nodes.get(("broker", p.leader), NodeSample())
            leo = leader_now.log_end_offset.get(key)
            hw = leader_now.high_watermark.get(key)
            appended = 0.0
            if leo is not None and key in leader_before.log_end_offset and interval_s > 0:
                appended = max(0.0, leo - leader_before.log_end_offset[key]) / interval_s
            marks = []
            if p.leader == NO_LEADER:
                marks.append(OFFLINE)
            if len(p.isr) < len(p.replicas):
                marks.append(UNDER_REPLICATED)
            rows.append(PartitionRow(
                topic.name, p.partition, p.leader, p.leader_epoch, p.replicas, p.isr,
                None if hw is None else int(hw), None if leo is None else int(leo), appended, tuple(marks),
            ))  # fmt: skip
    return rows


def _group_rows(current: Sample) -> list[GroupRow]:
    committed: dict[tuple[str, str, int], float] = {}
    lag: dict[tuple[str, str, int], float] = {}
    for (role, _), node in current.nodes.items():
        if role == "broker" and node.up:
            committed.update(node.group_committed)
            lag.update(node.group_lag)
    return [GroupRow(g, t, p, int(offset), int(lag.get((g, t, p), 0))) for (g, t, p), offset in
            sorted(committed.items())]  # fmt: skip


def build_view(previous: Sample, current: Sample) -> View:
    """What the screen shows, from two consecutive samples (pure)."""
    interval_s = max(current.time_s - previous.time_s, 0.0)
    controllers, brokers = [], []
    for (role, node_id), node in sorted(current.nodes.items()):
        if role == "controller":
            controllers.append((node_id, node.up, node.controller_active))
        else:
            before = previous.nodes.get((role, node_id), NodeSample())
            brokers.append(_broker_row(node_id, before, node, interval_s))
    return View(interval_s, tuple(controllers), tuple(brokers),
                tuple(_partition_rows(previous, current, interval_s)), tuple(_group_rows(current)),
                current.admin_error)  # fmt: skip


# ---- rendering ---------------------------------------------------------------------------------


def _si(value: float) -> str:
    if math.isnan(value):
        return "-"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}" if value >= 10 or value == 0 else f"{value:.1f}"


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)


BROKER_COLUMNS = "BROKER> STATE PRODUCE/s> FETCH/s> IN_B/s> OUT_B/s> PRODUCE_p99_ms> FETCH_p99_ms>"
PARTITION_COLUMNS = "TOPIC PARTITION> LEADER> EPOCH> REPLICAS ISR HW> LEO> RECORDS/s> STATUS"


def _table(title: str, columns: str) -> Table:
    """A table whose columns are named in ``columns``; a name ending in ``>`` is right-aligned."""
    table = Table(title=title, title_justify="left")
    for name in columns.split():
        table.add_column(name.rstrip(">"), justify="right" if name.endswith(">") else "left")
    return table


def render(view: View, title: str = "") -> Group:
    """The rich renderable of one refresh."""
    heading = Text(title or "pykraft cluster top", style="bold")
    quorum = " ".join(f"{node_id}{'*' if active else ''}{'' if up else '(down)'}"
                      for node_id, up, active in view.controllers)  # fmt: skip
    heading.append(f"   controllers {quorum or '-'} (* active)")
    heading.append(f"   every {view.interval_s:.1f} s   Ctrl-C quits")
    brokers = _table("Brokers", BROKER_COLUMNS)
    for b in view.brokers:
        state = Text("up", style="green") if b.up else Text("down", style="bold red")
        p99 = [_ms(b.p99_ms.get(api, math.nan)) for api in LATENCY_APIS]
        brokers.add_row(str(b.broker_id), state, _si(b.produce_per_s), _si(b.fetch_per_s),
                        _si(b.bytes_in_per_s), _si(b.bytes_out_per_s), *p99)  # fmt: skip
    partitions = _table("Partitions", PARTITION_COLUMNS)
    for p in view.partitions:
        status = Text(" ".join(p.marks) or "ok", style="bold red" if p.marks else "green")
        partitions.add_row(p.topic, str(p.partition), "none" if p.leader == NO_LEADER else str(p.leader),
                           str(p.leader_epoch), _ids(p.replicas), _ids(p.isr),
                           "-" if p.high_watermark is None else str(p.high_watermark),
                           "-" if p.log_end_offset is None else str(p.log_end_offset),
                           _si(p.records_per_s), status)  # fmt: skip
    groups = _table("Consumer groups", "GROUP TOPIC PARTITION> COMMITTED> LAG>")
    for g in view.groups:
        groups.add_row(g.group, g.topic, str(g.partition), str(g.committed), str(g.lag))
    parts: list = [heading, brokers, partitions, groups]
    if view.admin_error:
        parts.insert(1, Text(f"admin API: {view.admin_error}", style="bold red"))
    return Group(*parts)


# ---- I/O ---------------------------------------------------------------------------------------


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> NodeSample:
    if not url:
        return NodeSample()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # 127.0.0.1 only (cluster.json)
            return parse_metrics(response.read().decode())
    except (OSError, urllib.error.URLError, ValueError):
        return NodeSample()  # down, or not answering in time: shown as down


def collect(targets: Iterable[NodeTarget], admin: AdminClient, clock: Callable[[], float]) -> Sample:
    nodes = {(t.role, t.node_id): scrape(t.metrics_url) for t in targets}
    try:
        topics, error = tuple(admin.describe_topics()), ""
    except errors.KafkaError as exc:
        topics, error = (), f"{type(exc).__name__}: {exc}"
    return Sample(clock(), nodes, topics, error)


def run(targets: list[NodeTarget], admin_bootstrap: str, interval_s: float, iterations: int,
        console: Console | None = None, title: str = "") -> None:
    """Refresh every ``interval_s`` until Ctrl-C (the caller handles it) or ``iterations`` (0: forever)."""
    console = console or Console()
    with AdminClient(admin_bootstrap, timeout_s=ADMIN_TIMEOUT_S) as admin:
        previous = collect(targets, admin, time.monotonic)
        with Live(render(build_view(previous, previous), title), console=console, auto_refresh=False,
                  screen=False) as live:  # fmt: skip
            done = 0
            while iterations <= 0 or done < iterations:
                time.sleep(max(0.0, previous.time_s + interval_s - time.monotonic()))
                current = collect(targets, admin, time.monotonic)
                live.update(render(build_view(previous, current), title), refresh=True)
                previous = current
                done += 1
