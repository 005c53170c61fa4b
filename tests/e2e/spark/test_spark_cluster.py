"""The "pykraft" Data Source against a real cluster: 3 controllers + 3 brokers as processes, Spark local[2].

Issue 7 §3: produce with acks=all and read back the same bytes (every codec, headers); with one
follower stalled (SIGSTOP) and acks=1 producers writing, the leader's LEO runs ahead of the HW and
a batch read returns exactly the records below the HW seen at planning; a streaming query stopped
mid-backlog and restarted from its checkpoint writes every record once; killing a leader between
two reads of the same explicit offsets gives identical rows.

The cluster uses ``replica.lag.time.max.ms`` = 120 s and ``broker.session.timeout.ms`` = 30 s so
that a stalled follower holds the HW still for the whole of a Spark query (a SIGSTOPped broker
stops heartbeating, and once fenced it leaves every ISR and the HW moves on); the price is that a
killed leader is replaced only after those 30 s.
Every process is stopped by pid when the module ends (``running_cluster``), even on failure.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration" / "broker"))

from broker_cluster import BrokerCluster, running_cluster, wait_for
from stream_helpers import run_stream

from proto.errors import ErrorCode
from storage.compression import CompressionType
from storage.record_batch import build_batch

# Cluster start-up, the first Spark query and a failover can each take minutes on a loaded 2-core box.
pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

BROKERS = (101, 102, 103)
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def cluster(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    """Depends on ``spark``: the session's JVM must be forked before this process runs gRPC."""
    with running_cluster(
        Path(tmp_path_factory.mktemp("spark-cluster")),
        # The records carry 2023 timestamps: no time-based retention check during the module.
        **{
            "replica.lag.time.max.ms": "120000",
            "broker.session.timeout.ms": "30000",
            "log.retention.check.interval.ms": "3600000",
        },
    ) as bc:
        yield bc


def bootstrap(cluster: BrokerCluster) -> str:
    return ",".join(cluster.broker(b).kafka_address for b in BROKERS)


def read(spark, cluster: BrokerCluster, **options: str):
    r = spark.read.format("pykraft").option("bootstrap.servers", bootstrap(cluster))
    r = r.option("kafkaConsumer.pollTimeoutMs", "60000").option("fetchOffset.retryIntervalMs", "200")
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def produce(cluster: BrokerCluster, topic: str, partition: int, records, acks: int = -1, **kwargs) -> int:
    """Produce one batch to the partition's leader, retrying leadership errors; its base offset."""
    data = build_batch(records, **kwargs)

    def attempt():
        result = cluster.produce_raw(
            cluster.leader(topic, partition), topic, data, acks=acks, partition=partition
        )
        return result if result.code == ErrorCode.NONE else None

    return wait_for(attempt, 30, f"produce to {topic}-{partition}").base_offset


def rows_of(df) -> list[tuple]:
    out = []
    for row in df.collect():
        d = row.asDict(recursive=True)
        headers = tuple((h["key"], h["value"]) for h in d.get("headers") or ())
        out.append((d["partition"], d["offset"], d["key"], d["value"], headers))
    return sorted(out)


def test_acks_all_records_read_back_byte_for_byte(spark, cluster: BrokerCluster) -> None:
    """Every codec, null keys and values, headers: Spark returns exactly what was produced."""
    cluster.create_topic("codecs", partitions=3)
    expected = []
    for partition in range(3):
        for codec in CompressionType:
            records = [
                (
                    None if i % 4 == 0 else f"k{partition}-{codec.name}-{i}".encode(),
                    None if i % 9 == 0 else f"value {codec.name} {i} ".encode() * 6,
                    [("h", f"{i}".encode()), ("n", None)] if i % 2 else [],
                    BASE_TS + i,
                )
                for i in range(30)
            ]
            base = produce(cluster, "codecs", partition, records, compression=codec)
            expected += [(partition, base + i, k, v, tuple(h)) for i, (k, v, h, _) in enumerate(records)]
    df = read(spark, cluster, subscribe="codecs", includeHeaders="true")
    assert rows_of(df) == sorted(expected)
    assert df.count() == 3 * 30 * len(CompressionType)


def test_read_stops_at_the_high_watermark_while_leo_runs_ahead(spark, cluster: BrokerCluster) -> None:
    """SIGSTOP a follower: acks=1 writes raise the leader's LEO but not the HW; the read returns
    exactly the records below the HW at planning, though producers keep writing during the job.

    The stall must stay shorter than ``broker.session.timeout.ms`` (a fenced follower leaves the ISR
    and the HW moves on), so the same read runs once before it: run first in a shuffled order, the
    stalled read would otherwise include Spark's start-up, which took over 30 s on a loaded machine."""
    topic = "stalled"
    cluster.create_topic(topic, partitions=1)
    committed = [(None, f"c{i}".encode(), (), BASE_TS + i) for i in range(40)]
    produce(cluster, topic, 0, committed)
    expected = [(i, f"c{i}".encode()) for i in range(40)]
    warm = read(spark, cluster, subscribe=topic).select("offset", "value").collect()
    assert sorted((r.offset, r.value) for r in warm) == expected
    leader = cluster.leader(topic)
    follower = next(b for b in BROKERS if b != leader)
    stop = threading.Event()
    uncommitted: list[int] = []

    def write_acks_1() -> None:
        n = 0
        while not stop.is_set():
            r = cluster.produce_raw(leader, topic, build_batch([(None, b"u%d" % n, (), BASE_TS)]), acks=1)
            if r.code == ErrorCode.NONE:
                uncommitted.append(r.base_offset)
            n += 1
            stop.wait(0.02)

    writer = threading.Thread(target=write_acks_1)
    try:
        cluster.cluster.signal_node(cluster.broker(follower), signal.SIGSTOP)
        writer.start()
        wait_for(lambda: len(uncommitted) >= 5, 20, "acks=1 writes above the HW")
        hw_before = cluster.high_watermark(leader, topic)
        rows = read(spark, cluster, subscribe=topic).select("offset", "value").collect()
        hw_after = cluster.high_watermark(leader, topic)
    finally:
        stop.set()
        writer.join(30)
        cluster.cluster.signal_node(cluster.broker(follower), signal.SIGCONT)
    assert hw_before == hw_after == 40, f"HW moved during the stall: {hw_before} -> {hw_after}"
    assert min(uncommitted) >= 40 and max(uncommitted) > 40, "the LEO did not run ahead of the HW"
    assert sorted((r.offset, r.value) for r in rows) == expected
    cluster.wait_isr(topic, set(BROKERS), timeout_s=60)


def test_streaming_restart_is_exactly_once(spark, cluster: BrokerCluster, tmp_path) -> None:
    """Stop a stream mid-backlog, produce more, restart from the checkpoint: each record once."""
    topic = "stream"
    cluster.create_topic(topic, partitions=2)
    for partition in range(2):
        produce(cluster, topic, partition, [(None, b"a%d" % i, (), BASE_TS) for i in range(40)])
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    run_stream(spark, bootstrap(cluster), topic, checkpoint, out, available_now=False, stop_after_batches=2)
    first = spark.read.parquet(str(out)).count()
    assert 0 < first < 80, f"the first run should stop mid-backlog (15 per trigger), read {first}"
    for partition in range(2):
        produce(cluster, topic, partition, [(None, b"b%d" % i, (), BASE_TS) for i in range(10)])
    run_stream(spark, bootstrap(cluster), topic, checkpoint, out, available_now=True)
    got = sorted((r.partition, r.offset) for r in spark.read.parquet(str(out)).collect())
    assert got == [(p, o) for p in range(2) for o in range(50)]


def test_leader_kill_between_reads_gives_identical_rows(spark, cluster: BrokerCluster) -> None:
    """SIGKILL the leader between two reads of the same explicit offsets: byte-identical rows."""
    topic = "failover"
    cluster.create_topic(topic, partitions=2)
    for partition in range(2):
        for b in range(4):
            records = [
                (f"k{b}-{i}".encode(), f"v{partition}-{b}-{i}".encode() * 5, (), BASE_TS) for i in range(50)
            ]
            produce(cluster, topic, partition, records, compression=CompressionType.ZSTD)
    options = {
        "subscribe": topic,
        "startingOffsets": '{"failover":{"0":7,"1":-2}}',
        "endingOffsets": '{"failover":{"0":180,"1":-1}}',
        "minPartitions": "4",
    }
    before = rows_of(read(spark, cluster, **options))
    assert len(before) == (180 - 7) + 200
    victim = cluster.leader(topic, 0)
    spec = cluster.broker(victim)
    cluster.cluster.kill_node(spec)
    try:
        wait_for(lambda: cluster.leader(topic, 0, timeout_s=90) != victim, 120, "a new leader after the kill")
        after = rows_of(read(spark, cluster, **options))
    finally:
        cluster.cluster.start_node(spec)
    assert after == before
    wait_for(lambda: cluster.cluster.healthy(spec), 60, f"{spec.name} back")
