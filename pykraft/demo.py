"""``pykraft demo`` (the README's main job): a tour a newcomer can follow in the terminal.

1. start a local cluster (3 controllers, 3 brokers) on 127.0.0.1, with short failure-detection
   timeouts so the failover below takes seconds;
2. create a topic over gRPC (3 partitions, replication factor 3, ``min.insync.replicas=2``);
3. produce records with confluent-kafka (librdkafka) against the brokers' Kafka listeners, ``acks=all``
   and idempotence on, and remember every acknowledged one;
4. SIGKILL the broker that leads partition 0 while producing continues; show leadership moving;
5. read every partition back with a confluent-kafka consumer, from the log start to the high
   watermark, and check that no acknowledged record was lost or duplicated;
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
from typing import Any

from pykraft.admin import AdminClient
from pykraft.cli_cluster import wait_ready
from pykraft.cli_kafka import client_config, console_group_id, describe_error
from pykraft.cluster import LocalCluster

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


def producer_settings() -> dict[str, Any]:
    return {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "compression.type": "zstd",
            "message.timeout.ms": 60_000}


def produce(producer: Any, start: int, count: int, acked: dict[bytes, int]) -> list[str]:
    """Send records ``start..start+count``; every acknowledged value lands in ``acked`` (value ->
    partition). Returns the errors of the records that were not acknowledged."""
    failed: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked[msg.value()] = msg.partition()
        else:
            failed.append(describe_error(err))

    for i in range(start, start + count):
        key, value = record(i)
        while True:
            try:
                producer.produce(TOPIC, value, key, on_delivery=on_delivery)
                break
            except BufferError:  # librdkafka's queue is full: serve delivery reports first
                producer.poll(0.1)
        producer.poll(0)
    deadline = time.monotonic() + 120
    while producer.flush(1.0) > 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(producer)} records still unacknowledged after 120 s")
    return failed


def read_all(bootstrap: str) -> list[bytes]:
    """The value of every committed record of the topic: from the log start up to each partition's HW."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    settings = {"group.id": console_group_id(), "enable.auto.commit": False}
    consumer = Consumer(client_config(bootstrap, **settings))
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
                for p in range(PARTITIONS)}  # the high watermark: the end of what is committed
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        position = dict.fromkeys(range(PARTITIONS), 0)
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while any(position[p] < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading back stalled at {position} (ends {ends})")
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None or msg.offset() >= ends[msg.partition()]:
                    continue
                position[msg.partition()] = msg.offset() + 1
                values.append(msg.value())
        return values
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
        failed: list[str] = []
        from confluent_kafka import Producer

        producer = Producer(client_config(cluster.kafka_bootstrap, **producer_settings()))
        step(f"Producing {FIRST_RECORDS} records with confluent-kafka to the Kafka listeners "
             f"({cluster.kafka_bootstrap}): acks=all, idempotence on")
        failed += produce(producer, 0, FIRST_RECORDS, acked)
        print(f"    {len(acked)} acknowledged")
        victim = cluster.node(f"broker-{leaders[0]}")
        step(f"SIGKILL {victim.name} (pid {victim.pid}), the leader of partition 0, "
             f"and keep producing {DURING_FAILOVER_RECORDS} records")
        cluster.kill_node(victim)
        failed += produce(producer, FIRST_RECORDS, DURING_FAILOVER_RECORDS, acked)
        print(f"    {len(acked)} acknowledged in total, {len(failed)} not acknowledged"
              + (f" (first: {failed[0]})" if failed else ""))
        step("Leadership after the failover (the controller fenced the dead broker and bumped epochs)")
        with AdminClient(cluster.controller_addresses) as admin:
            describe_leaders(admin)
        step("Reading every partition back from the beginning with a confluent-kafka consumer")
        values = read_all(cluster.kafka_bootstrap)
        seen: dict[bytes, int] = {}
        for value in values:
            seen[value] = seen.get(value, 0) + 1
        lost = [v for v in acked if v not in seen]
        duplicated = [v for v, n in seen.items() if n > 1]
        print(f"    {len(acked)} acknowledged, {len(values)} read back, {len(lost)} lost, "
              f"{len(duplicated)} duplicated")
        if not args.skip_spark:
            step("Querying the committed records with PySpark: spark.read.format('pykraft')")
            spark_query(cluster.kafka_bootstrap)
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
