"""Spark read benchmark (issue 7 §4): ``format("pykraft")`` vs ``spark.read.parquet`` of the same rows.

    ./dev bench spark_bench [--records 5000000] [--partitions 6] [--value-bytes 100] [--rounds 3]
                            [--bootstrap HOST:PORT --admin HOST:PORT]

Writes N records (value = ``--value-bytes`` bytes, null key, no headers, batches of 1,000
records, uncompressed) to a 6-partition topic, writes the same rows (key, value, topic, partition,
offset, timestamp) to a local Parquet directory, then times the same aggregation over both in one
SparkSession (local[2]):

    SELECT sum(length(value)) FROM <source>

The two sources alternate for ``--rounds`` rounds; each keeps its best wall-clock round, so one
burst of load from other processes on this shared machine does not decide the ratio. Both answers
must be equal (``sum(length(value))`` = N x value bytes). Target: pykraft >= 0.3x Parquet rows/s.

Brokers: with ``--bootstrap`` (data brokers) and ``--admin`` (a controller) the topic is created
through AdminService and filled through BrokerService.Produce (acks=all). Without them the bench
runs the in-process BrokerService double of the tests (``tests/e2e/spark/fake_brokers.py``): the
Spark side (planning, gRPC fetches from the workers, decoding, Arrow) is the real one, the broker
is an in-memory Python gRPC server in the driver's process. Say which in the results.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "e2e" / "spark"))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from storage.record_batch import build_batch  # noqa: E402

RECORDS_PER_BATCH = 1000
TOPIC = "spark-bench"
BASE_TS = 1_700_000_000_000
TARGET_RATIO = 0.3


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
    return spark


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


def fill_fake(cluster, partitions: int, per_partition: int, value_bytes: int) -> None:
    from spark.options import TopicPartition

    cluster.create_topic(TOPIC, partitions)
    for p in range(partitions):
        for _, records in batches_of(p, per_partition, value_bytes):
            cluster.append(TopicPartition(TOPIC, p), records)


def fill_real(
    bootstrap: str, admin_address: str, partitions: int, per_partition: int, value_bytes: int
) -> None:
    """Create the topic (AdminService) and produce every batch with acks=all (BrokerService)."""
    import grpc

    from proto import broker_pb2, broker_pb2_grpc
    from proto.serving import GRPC_OPTIONS
    from pykraft.admin import AdminClient

    with AdminClient(admin_address) as admin:
        admin.create_topic(TOPIC, num_partitions=partitions, replication_factor=3)
    stub = broker_pb2_grpc.BrokerServiceStub(
        grpc.insecure_channel(bootstrap.split(",", maxsplit=1)[0], options=GRPC_OPTIONS)
    )
    deadline = time.monotonic() + 60
    while True:
        meta = stub.Metadata(broker_pb2.MetadataRequest(topics=[TOPIC]))
        leaders = {p.partition: p.leader_id for t in meta.topics for p in t.partitions}
        if len(leaders) == partitions and min(leaders.values()) >= 0:
            break
        assert time.monotonic() < deadline, f"no leaders for {TOPIC} after 60 s: {leaders}"
        time.sleep(0.2)
    addresses = {b.node_id: f"{b.host}:{b.port}" for b in meta.brokers}
    stubs = {
        n: broker_pb2_grpc.BrokerServiceStub(grpc.insecure_channel(a, options=GRPC_OPTIONS))
        for n, a in addresses.items()
    }
    for p in range(partitions):
        for _, records in batches_of(p, per_partition, value_bytes):
            request = broker_pb2.ProduceRequest(
                acks=-1,
                timeout_ms=30_000,
                topics=[
                    broker_pb2.TopicProduceData(
                        name=TOPIC,
                        partitions=[
                            broker_pb2.PartitionProduceData(partition=p, records=build_batch(records))
                        ],
                    )
                ],
            )
            answer = stubs[leaders[p]].Produce(request, timeout=60).topics[0].partitions[0]
            assert answer.error.code == 0, f"produce to {TOPIC}-{p}: {answer.error}"


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


def timed(df) -> tuple[float, int]:
    start = time.perf_counter()
    total = df.selectExpr("sum(length(value)) AS s").collect()[0]["s"]
    return time.perf_counter() - start, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", help="data brokers host:port (default: the in-process double)")
    parser.add_argument("--admin", help="a controller host:port, to create the topic")
    args = parser.parse_args()
    per_partition = args.records // args.partitions
    total_records = per_partition * args.partitions

    spark = start_spark()  # before any gRPC server in this process: Spark forks its JVM
    cluster = None
    started = time.perf_counter()
    if args.bootstrap:
        assert args.admin, "--admin is needed with --bootstrap (to create the topic)"
        fill_real(args.bootstrap, args.admin, args.partitions, per_partition, args.value_bytes)
        bootstrap, brokers = args.bootstrap, f"pykraft brokers at {args.bootstrap}"
    else:
        from fake_brokers import FakeCluster

        cluster = FakeCluster()
        fill_fake(cluster, args.partitions, per_partition, args.value_bytes)
        bootstrap, brokers = (
            cluster.bootstrap,
            "in-process BrokerService double (tests/e2e/spark/fake_brokers.py)",
        )
    produce_s = time.perf_counter() - started
    try:
        with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
            parquet = Path(tmp) / "parquet"
            write_parquet(parquet, args.partitions, per_partition, args.value_bytes)
            sources = {
                "pykraft": spark.read.format("pykraft")
                .option("bootstrap.servers", bootstrap)
                .option("subscribe", TOPIC)
                .load(),
                "parquet": spark.read.parquet(str(parquet)),
            }
            best = {name: float("inf") for name in sources}
            expected = total_records * args.value_bytes
            for _ in range(args.rounds):
                for name, df in sources.items():
                    seconds, total = timed(df)
                    assert total == expected, f"{name}: sum(length(value)) = {total}, expected {expected}"
                    best[name] = min(best[name], seconds)
    finally:
        spark.stop()
        if cluster is not None:
            cluster.stop()
    report(args, brokers, total_records, produce_s, best)


def report(args, brokers: str, records: int, produce_s: float, best: dict[str, float]) -> None:
    rates = {name: records / seconds for name, seconds in best.items()}
    ratio = rates["pykraft"] / rates["parquet"]
    verdict = "ok" if ratio >= TARGET_RATIO else "BELOW TARGET"
    print(f"vm: {os.cpu_count()} cpus, Python {platform.python_version()}, load average {os.getloadavg()}")
    print(f"brokers: {brokers}; data written in {produce_s:.1f} s")
    shape = f"{records:,} records x {args.value_bytes} B, {args.partitions} partitions"
    print(f"{shape}, best of {args.rounds} rounds")
    print("| source | best s | rows/s |")
    print("|---|---|---|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.2f} | {rates[name]:,.0f} |")
    print(f"pykraft / parquet = {ratio:.2f}x (target >= {TARGET_RATIO}x {verdict})")


if __name__ == "__main__":
    main()
