"""``pykraft demo`` (the README's main job): a tour a newcomer can follow in the terminal.

1. start a local cluster (3 controllers, 3 brokers) on 127.0.0.1, with short failure-detection
   timeouts so the failover below takes seconds;
2. create a topic over gRPC (3 partitions, replication factor 3, ``min.insync.replicas=2``);
3. produce records with ``acks=all`` and remember every acknowledged one;
4. SIGKILL the broker that leads partition 0 while producing continues; show leadership moving;
5. read every partition back and check that no acknowledged record was lost or duplicated;
6. query the committed records with PySpark (format ``"pykraft"``): a few aggregate rows;
7. stop the cluster (controlled shutdown, then by pid).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pykraft.admin import AdminClient
from pykraft.cli_cluster import wait_ready
from pykraft.cluster import LocalCluster
from pykraft.consumer import Consumer
from pykraft.producer import Producer
from pykraft.types import TopicPartition

TOPIC = "demo-orders"
PARTITIONS = 3
FIRST_RECORDS = 3_000
DURING_FAILOVER_RECORDS = 2_000
CUSTOMERS = ["alice", "bob", "carol", "dave", "erin", "frank"]
DEMO_OVERRIDES = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "3000",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the guided demo: cluster, topic, produce, failover, Spark")
    p.add_argument("--data-dir", type=Path, default=None, help="default: a new temporary directory")
    p.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    p.add_argument("--skip-spark", action="store_true", help="skip the PySpark step")
    p.set_defaults(func=run)


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def record(i: int) -> tuple[bytes, bytes]:
    customer = CUSTOMERS[i % len(CUSTOMERS)]
    return customer.encode(), f"order-{i:06d} amount={(i * 37) % 500 + 1}".encode()


def describe_leaders(admin: AdminClient) -> dict[int, int]:
    (topic,) = admin.describe_topics([TOPIC])
    for p in topic.partitions:
        print(f"    partition {p.partition}: leader {p.leader:<4} epoch {p.leader_epoch}  "
              f"replicas {list(p.replicas)}  isr {list(p.isr)}")
    return {p.partition: p.leader for p in topic.partitions}


def produce(producer: Producer, start: int, count: int, acked: dict[bytes, int]) -> None:
    futures = [(record(i), producer.send(TOPIC, key=record(i)[0], value=record(i)[1]))
               for i in range(start, start + count)]
    producer.flush()
    for (_, value), future in futures:
        if future.exception() is None:
            acked[value] = future.result().partition


def read_all(bootstrap: str) -> list:
    """Every committed record of the topic: from the log start up to each partition's HW."""
    consumer = Consumer(bootstrap)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_end(*tps)
        ends = {tp: consumer.position(tp) for tp in tps}  # latest = the high watermark
        consumer.seek_to_beginning(*tps)
        records: list = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading back stalled at {[consumer.position(tp) for tp in tps]}")
            records.extend(consumer.poll(timeout_ms=500))
        return records
    finally:
        consumer.close()


def spark_query(bootstrap: str) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark import register_spark_source

    spark = (SparkSession.builder.master("local[2]").appName("pykraft-demo")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        register_spark_source(spark)
        df = (spark.read.format("pykraft").option("bootstrap.servers", bootstrap)
              .option("subscribe", TOPIC).load())
        amount = F.regexp_extract(F.col("value").cast("string"), r"amount=(\d+)", 1).cast("long")
        rows = (df.select(F.col("key").cast("string").alias("customer"), amount.alias("amount"))
                .groupBy("customer").agg(F.count("*").alias("orders"), F.sum("amount").alias("total"))
                .orderBy("customer").collect())
        print(f"    {'customer':<10} {'orders':>7} {'total':>9}")
        for row in rows:
            print(f"    {row['customer']:<10} {row['orders']:>7} {row['total']:>9}")
        per_partition = df.groupBy("partition").agg(F.count("*").alias("n"), F.max("offset").alias("last"))
        for row in per_partition.orderBy("partition").collect():
            print(f"    partition {row['partition']}: {row['n']} committed records, "
                  f"last offset {row['last']}")
    finally:
        spark.stop()


def run(args: argparse.Namespace) -> int:
    owned_dir = args.data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="pykraft-demo-")) if owned_dir else args.data_dir.resolve()
    cluster = LocalCluster(data_dir, controllers=3, brokers=3, overrides=DEMO_OVERRIDES)
    try:
        step(f"Starting 3 controllers and 3 brokers on 127.0.0.1 (data and logs in {data_dir})")
        cluster.start()
        wait_ready(cluster, timeout_s=120.0, progress=lambda m: print(f"    {m}", flush=True))
        for spec in cluster.nodes:
            print(f"    {spec.name:<14} pid {spec.pid:<8} {spec.address}")
        with AdminClient(cluster.controller_addresses) as admin:
            print(f"    active controller: {admin.describe_quorum().leader_id}")
            step(f"Creating topic {TOPIC!r}: {PARTITIONS} partitions, replication factor 3, "
                 "min.insync.replicas=2")
            admin.create_topic(TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                               configs={"min.insync.replicas": "2"})
            leaders = describe_leaders(admin)
        acked: dict[bytes, int] = {}
        with Producer(cluster.bootstrap, acks="all", linger_ms=5, compression_type="zstd") as producer:
            step(f"Producing {FIRST_RECORDS} records with acks=all")
            produce(producer, 0, FIRST_RECORDS, acked)
            print(f"    {len(acked)} acknowledged")
            victim = cluster.node(f"broker-{leaders[0]}")
            step(f"SIGKILL {victim.name} (pid {victim.pid}), the leader of partition 0, "
                 f"and keep producing {DURING_FAILOVER_RECORDS} records")
            cluster.kill_node(victim)
            produce(producer, FIRST_RECORDS, DURING_FAILOVER_RECORDS, acked)
            print(f"    {len(acked)} acknowledged in total")
        step("Leadership after the failover (the controller fenced the dead broker and bumped epochs)")
        with AdminClient(cluster.controller_addresses) as admin:
            describe_leaders(admin)
        step("Reading every partition back from the beginning")
        records = read_all(cluster.bootstrap)
        seen: dict[bytes, int] = {}
        for r in records:
            seen[r.value] = seen.get(r.value, 0) + 1
        lost = [v for v in acked if v not in seen]
        duplicated = [v for v, n in seen.items() if n > 1]
        print(f"    {len(acked)} acknowledged, {len(records)} read back, {len(lost)} lost, "
              f"{len(duplicated)} duplicated")
        if not args.skip_spark:
            step("Querying the committed records with PySpark: spark.read.format('pykraft')")
            spark_query(cluster.bootstrap)
        ok = not lost and not duplicated
        step("Done: no acknowledged record was lost." if ok else "FAILED: see the counts above.")
        return 0 if ok else 1
    finally:
        if args.keep:
            print(f"\ncluster left running; stop it with: pykraft cluster down --data-dir {data_dir}")
        else:
            step("Stopping the cluster (brokers first, by pid)")
            cluster.down(timeout_s=15.0)
            if owned_dir:
                shutil.rmtree(data_dir, ignore_errors=True)
