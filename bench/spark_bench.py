"""Spark read benchmark (issue 7 §4): ``format("pykraft")`` vs ``spark.read.parquet`` of the same rows.

    ./dev bench spark_bench [--records 5000000] [--partitions 6] [--value-bytes 100] [--rounds 3]
                            [--min-partitions N] [--bootstrap HOST:PORT --admin HOST:PORT]

Writes N records (value = ``--value-bytes`` bytes, null key, no headers, batches of 1,000 records,
uncompressed, acks=all) to a topic of ``--partitions`` partitions (replication factor 3), writes the
same rows (key, value, topic, partition, offset, timestamp) to a local Parquet directory, then
times the same aggregation over each source in one SparkSession (local[2]):

    SELECT sum(length(value)) FROM <source>

Sources, alternating for ``--rounds`` rounds (each keeps its best wall-clock round, so one burst
of load from other processes on this shared machine does not decide the ratio):

- ``pykraft``: the real reader — planning (ListOffsets), Kafka Fetch from the leaders on the
  workers, CRC check and decoding of the fetched record batches, Arrow batches into Spark;
- ``parquet``: ``spark.read.parquet`` of the same rows;
- ``ceiling``: a Python Data Source with the same schema, partitions and batch size that yields
  pre-made Arrow batches (no I/O, no decoding): what the Python Data Source path itself costs,
  i.e. the best ratio any Python source can reach in this run.

Every answer must equal N x value bytes. Besides wall time, each query's CPU seconds are measured
from /proc: the Spark process tree (driver, JVM, Python workers) and the brokers' processes, and
the load average is printed for every round — the machine is shared, so wall-clock rates follow
the CPU share a query gets. Targets: pykraft >= 0.3x Parquet rows/s (issue 7) and >= 0.8x the
ceiling source's (issue 16).

Brokers: by default the bench starts its own cluster (3 controllers + 3 brokers as processes on
127.0.0.1, ``pykraft.cluster.LocalCluster``) and stops it by pid at the end; with ``--bootstrap``
(the brokers' Kafka listeners, ``KAFKA_BOOTSTRAP``) and ``--admin`` (a controller) it uses a running
cluster instead; ``--broker-pids`` then names its brokers for the CPU accounting.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

from spark.schema import arrow_schema, kafka_schema  # noqa: E402
from storage.record_batch import build_batch  # noqa: E402

RECORDS_PER_BATCH = 1000
TOPIC = "spark-bench"
BASE_TS = 1_700_000_000_000
TARGET_RATIO = 0.3  # of Parquet (issue 7)
CEILING_TARGET_RATIO = 0.8  # of the ceiling source (issue 16 §5)
PRODUCE_VERSION = 9
CEILING_BATCH_ROWS = 150_000  # about the rows of one 16 MiB fetch of 100-byte records
START_TIMEOUT_S = 180.0
TICK = os.sysconf("SC_CLK_TCK")


def start_spark():
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark import register_spark_source

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pykraft-spark-bench")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.authenticate.socketTimeout", "120s")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_spark_source(spark)
    spark.dataSource.register(CeilingSource)
    return spark


# --- the ceiling: a Python Data Source of pre-made Arrow batches ----------------------------------


class CeilingSource(DataSource):
    """``format("pykraft-ceiling")``: the pykraft schema, pre-made batches, no I/O (see the docstring).

    Defined in the bench script, so Spark pickles the class by value to the workers.
    """

    @classmethod
    def name(cls) -> str:
        return "pykraft-ceiling"

    def schema(self):
        return kafka_schema(False)

    def reader(self, schema) -> DataSourceReader:
        return CeilingReader(int(self.options["partitions"]), int(self.options["per_partition"]),
                             int(self.options["value_bytes"]))  # fmt: skip


class CeilingReader(DataSourceReader):
    def __init__(self, partitions: int, per_partition: int, value_bytes: int) -> None:
        self.partitions_, self.per_partition, self.value_bytes = partitions, per_partition, value_bytes

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in range(self.partitions_)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rows = min(CEILING_BATCH_ROWS, self.per_partition)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.nulls(rows, pa.binary()),
                pa.array([b"v" * self.value_bytes] * rows, pa.binary()),
                pa.array([TOPIC] * rows, pa.string()),
                pa.array([partition.value] * rows, pa.int32()),
                pa.array(range(rows), pa.int64()),
                pa.array([BASE_TS * 1000] * rows, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                pa.array([0] * rows, pa.int32()),
            ],
            schema=arrow_schema(False),
        )
        done = 0
        while done < self.per_partition:
            take = min(rows, self.per_partition - done)
            yield batch if take == rows else batch.slice(0, take)
            done += take


# --- data -----------------------------------------------------------------------------------------


def batches_of(partition: int, count: int, value_bytes: int):
    """(base offset, records) of one partition: value = partition/offset stamped into fixed bytes."""
    for base in range(0, count, RECORDS_PER_BATCH):
        n = min(RECORDS_PER_BATCH, count - base)
        records = [
            (
                None,
                f"{partition:02d}{base + i:012d}".encode().ljust(value_bytes, b"x"),
                (),
                BASE_TS + base + i,
            )
            for i in range(n)
        ]
        yield base, records


def fill(bootstrap: str, admin_address: str, partitions: int, per_partition: int, value_bytes: int) -> None:
    """Create the topic (AdminService, RF 3) and produce every batch with acks=all (Kafka Produce v9
    to each partition's leader, on the Spark client's connection class)."""
    from proto.kafka import messages as m
    from proto.kafka.api import ApiKey
    from pykraft.admin import AdminClient
    from spark.client import METADATA_VERSION, BrokerConnection

    with AdminClient(admin_address) as admin:
        # retention.ms -1: the records carry 2023 timestamps, which time-based retention would delete
        admin.create_topic(
            TOPIC, num_partitions=partitions, replication_factor=3, configs={"retention.ms": "-1"}
        )
    first = BrokerConnection(bootstrap.split(",", maxsplit=1)[0], 30.0)
    deadline = time.monotonic() + 60
    try:
        while True:
            request = m.MetadataRequest(
                topics=[m.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=False
            )
            meta = first.send(ApiKey.METADATA, METADATA_VERSION, request, 30.0)
            brokers = {b.node_id: f"{b.host}:{b.port}" for b in meta.brokers}
            leaders = {p.partition_index: brokers.get(p.leader_id) for t in meta.topics for p in t.partitions}
            if len(leaders) == partitions and all(leaders.values()):
                break
            assert time.monotonic() < deadline, f"no leaders for {TOPIC} after 60 s: {leaders}"
            time.sleep(0.2)
    finally:
        first.close()
    connections = {address: BrokerConnection(address, 60.0) for address in set(leaders.values())}
    try:
        for p in range(partitions):
            for _, records in batches_of(p, per_partition, value_bytes):
                request = m.ProduceRequest(
                    acks=-1,
                    timeout_ms=30_000,
                    topic_data=[
                        m.ProduceRequestTopicProduceData(
                            name=TOPIC,
                            partition_data=[
                                m.ProduceRequestPartitionProduceData(index=p, records=build_batch(records))
                            ],
                        )
                    ],
                )
                answer = connections[leaders[p]].send(ApiKey.PRODUCE, PRODUCE_VERSION, request, 60.0)
                code = answer.responses[0].partition_responses[0].error_code
                assert code == 0, f"produce to {TOPIC}-{p}: error {code}"
    finally:
        for connection in connections.values():
            connection.close()


def write_parquet(path: Path, partitions: int, per_partition: int, value_bytes: int) -> None:
    """The same rows as the topic, as Parquet files (one per partition)."""
    path.mkdir(parents=True)
    for p in range(partitions):
        values, offsets, stamps = [], [], []
        for base, records in batches_of(p, per_partition, value_bytes):
            values += [r[1] for r in records]
            offsets += range(base, base + len(records))
            stamps += [r[3] * 1000 for r in records]
        table = pa.table(
            {
                "key": pa.nulls(len(values), pa.binary()),
                "value": pa.array(values, pa.binary()),
                "topic": pa.array([TOPIC] * len(values)),
                "partition": pa.array([p] * len(values), pa.int32()),
                "offset": pa.array(offsets, pa.int64()),
                "timestamp": pa.array(stamps, pa.timestamp("us", tz="UTC")),
            }
        )
        pq.write_table(table, path / f"part-{p}.parquet")


# --- CPU accounting from /proc ---------------------------------------------------------------------


@dataclass(frozen=True)
class Cpu:
    """CPU seconds by process group: the Spark JVM, its Python workers, the brokers, the rest."""

    jvm: float = 0.0
    python_workers: float = 0.0
    brokers: float = 0.0

    @property
    def spark(self) -> float:
        return self.jvm + self.python_workers

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(
            self.jvm - other.jvm, self.python_workers - other.python_workers, self.brokers - other.brokers
        )


def _proc_table() -> tuple[dict[int, list[int]], dict[int, float], dict[int, bool]]:
    """(parent -> children, pid -> CPU s of the process and its reaped children, pid -> is a JVM)."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    java: dict[int, bool] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, fields = stat.split("(", 1)[1].rsplit(")", 1)[0], stat.rsplit(")", 1)[1].split()
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = sum(int(x) for x in fields[11:15]) / TICK  # utime stime cutime cstime
        java[pid] = name == "java"
    return children, cpu, java


def cpu_now(broker_pids: list[int]) -> Cpu:
    """The Spark JVM (a child of this process) and everything it started (Python workers); brokers."""
    children, cpu, java = _proc_table()
    jvm = workers = 0.0
    for pid in children.get(os.getpid(), []):
        if not java.get(pid):
            continue  # the cluster's processes are children too
        jvm += cpu[pid]
        stack = list(children.get(pid, []))
        while stack:
            child = stack.pop()
            workers += cpu.get(child, 0.0)
            stack += children.get(child, [])
    return Cpu(jvm, workers, sum(cpu.get(pid, 0.0) for pid in broker_pids))


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


# --- the cluster ----------------------------------------------------------------------------------


@contextlib.contextmanager
def own_cluster(data_dir: Path) -> Iterator[object]:
    """3 controllers + 3 brokers as processes; every one stopped by pid at the end."""
    from pykraft.cluster import LocalCluster

    cluster = LocalCluster(data_dir, controllers=3, brokers=3)
    cluster.plan()
    try:
        cluster.start()
        cluster.wait_until(
            lambda: all(cluster.healthy(n) for n in cluster.nodes), START_TIMEOUT_S, "every node healthy"
        )
        yield cluster
    finally:
        cluster.down(timeout_s=30.0)
        for spec in cluster.nodes:
            if cluster.is_running(spec):
                cluster.kill_node(spec)


# --- the run --------------------------------------------------------------------------------------


def timed(df, broker_pids: list[int]) -> tuple[float, int, Cpu]:
    """(wall s, sum(length(value)), CPU s) of one query."""
    before = cpu_now(broker_pids)
    start = time.perf_counter()
    total = df.selectExpr("sum(length(value)) AS s").collect()[0]["s"]
    wall = time.perf_counter() - start
    return wall, total, cpu_now(broker_pids) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-partitions", type=int, help="the reader's minPartitions option")
    parser.add_argument("--bootstrap", help="the brokers' Kafka listeners host:port,... of a running cluster")
    parser.add_argument("--broker-pids", default="", help="with --bootstrap: pid,... of its brokers (CPU)")
    parser.add_argument("--admin", help="a controller host:port of that cluster, to create the topic")
    parser.add_argument("--filled", action="store_true", help="with --bootstrap: the topic is already filled")
    args = parser.parse_args()
    per_partition = args.records // args.partitions
    total_records = per_partition * args.partitions
    print(f"vm: {os.cpu_count()} cpus, Python {platform.python_version()}, load average {load()} at start")

    spark = start_spark()  # before the cluster and the AdminClient's gRPC channel: Spark forks its JVM
    try:
        with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp, contextlib.ExitStack() as stack:
            if args.bootstrap:
                assert args.admin or args.filled, "--admin is needed with --bootstrap (to create the topic)"
                bootstrap, admin = args.bootstrap, args.admin
                broker_pids = [int(pid) for pid in args.broker_pids.split(",") if pid]
                brokers = f"running cluster at {bootstrap}"
            else:
                cluster = stack.enter_context(own_cluster(Path(tmp) / "cluster"))
                bootstrap = cluster.kafka_bootstrap
                admin = cluster.controller_nodes[0].address
                broker_pids = [n.pid for n in cluster.broker_nodes]
                brokers = "own cluster: 3 controllers + 3 brokers (processes, pykraft.cluster.LocalCluster)"
            started = time.perf_counter()
            if not args.filled:
                fill(bootstrap, admin, args.partitions, per_partition, args.value_bytes)
            produce_s = time.perf_counter() - started
            parquet = Path(tmp) / "parquet"
            write_parquet(parquet, args.partitions, per_partition, args.value_bytes)
            reader = spark.read.format("pykraft").option("bootstrap.servers", bootstrap)
            if args.min_partitions:
                reader = reader.option("minPartitions", str(args.min_partitions))
            sources = {
                "pykraft": reader.option("subscribe", TOPIC).load(),
                "parquet": spark.read.parquet(str(parquet)),
                "ceiling": spark.read.format("pykraft-ceiling")
                .option("partitions", str(args.partitions))
                .option("per_partition", str(per_partition))
                .option("value_bytes", str(args.value_bytes))
                .load(),
            }
            results = run_rounds(sources, args.rounds, total_records * args.value_bytes, broker_pids)
    finally:
        spark.stop()
    report(args, brokers, total_records, produce_s, results)


def run_rounds(sources: dict, rounds: int, expected: int, broker_pids: list[int]) -> dict[str, list[tuple]]:
    results: dict[str, list[tuple]] = {name: [] for name in sources}
    for r in range(rounds):
        for name, df in sources.items():
            wall, total, cpu = timed(df, broker_pids)
            assert total == expected, f"{name}: sum(length(value)) = {total}, expected {expected}"
            results[name].append((wall, cpu))
            print(f"round {r} {name}: {wall:.2f} s, CPU s: JVM {cpu.jvm:.2f}, Python workers "
                  f"{cpu.python_workers:.2f}, brokers {cpu.brokers:.2f}; load {load()}",
                  flush=True)  # fmt: skip
    return results


def report(args, brokers: str, records: int, produce_s: float, results: dict[str, list[tuple]]) -> None:
    best = {name: min(runs, key=lambda run: run[0]) for name, runs in results.items()}  # best wall time
    rates = {name: records / b[0] for name, b in best.items()}
    print(f"vm: {os.cpu_count()} cpus, Python {platform.python_version()}, load average {load()} at end")
    written = "by an earlier run" if args.filled else f"in {produce_s:.1f} s"
    print(f"brokers: {brokers}; data written {written}")
    print(f"{records:,} records x {args.value_bytes} B, {args.partitions} partitions, "
          f"minPartitions {args.min_partitions}, best of {args.rounds} rounds")  # fmt: skip
    print("| source | best s | rows/s | x parquet | CPU s of that round: JVM + Python workers + brokers |")
    print("|---|---|---|---|---|")
    for name, (wall, cpu) in best.items():
        split = f"{cpu.jvm:.2f} + {cpu.python_workers:.2f} + {cpu.brokers:.2f}"
        ratio = rates[name] / rates["parquet"]
        print(f"| {name} | {wall:.2f} | {rates[name]:,.0f} | {ratio:.2f} | {split} |")
    ratio = rates["pykraft"] / rates["parquet"]
    verdict = "ok" if ratio >= TARGET_RATIO else "BELOW TARGET"
    of_ceiling = rates["pykraft"] / rates["ceiling"]
    ceiling_verdict = "ok" if of_ceiling >= CEILING_TARGET_RATIO else "BELOW TARGET"
    print(f"pykraft / parquet = {ratio:.2f}x (target >= {TARGET_RATIO}x {verdict}); "
          f"ceiling / parquet = {rates['ceiling'] / rates['parquet']:.2f}x; "
          f"pykraft / ceiling = {of_ceiling:.2f}x "
          f"(target >= {CEILING_TARGET_RATIO}x {ceiling_verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
