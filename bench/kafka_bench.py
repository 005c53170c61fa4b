"""The Kafka listener with a real Kafka client, beside the gRPC path and NATS JetStream (issue 15 §6).

    ./dev bench kafka_bench [--records 200000] [--latency-samples 1000]

One run, on 127.0.0.1, 100-byte records, each figure measured three ways:

- **kafka**: confluent-kafka 2.16 (librdkafka) against the brokers' Kafka listeners;
- **grpc**: pykraft's own gRPC ``Producer`` / ``Consumer`` against the same cluster (the path of
  produce_bench.py, whose functions this script reuses);
- **nats**: a 3-node NATS JetStream cluster, stream R3 on file storage (produce_bench.py's
  ``run_nats``: ``publish_async`` with 1,000 outstanding, one ``publish`` at a time, a pull consumer).

Figures: producer records/s with acks=all, RF 3, min.insync.replicas=2 (1 and 6 partitions, null keys:
sticky partitioning on both pykraft paths; the Kafka producer is idempotent, linger.ms=5); one-record
acks=all latency p50/p99 (send, wait for the acknowledgement, next); consumer records/s reading the
6-partition topic from the beginning; CPU seconds per million records (this process + every server).
The pykraft cluster (3 controllers + 3 brokers, LocalCluster defaults) and then the NATS cluster are
started and stopped by pid by this script. The machine is shared: compare the columns of one run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import produce_bench as pb  # bench/ is this script's directory: the gRPC and NATS sides live there
from confluent_kafka import Consumer, Producer, TopicPartition

from pykraft.admin import AdminClient
from pykraft.cluster import LocalCluster

PARTITION_COUNTS = (1, 6)
WARM_UP = 50


def kafka_throughput(args: argparse.Namespace, bootstrap: str, topic: str, pids: list[int]) -> dict:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": args.linger_ms, "batch.size": args.batch_size,
                         "queue.buffering.max.messages": 1_000_000})  # fmt: skip
    producer.produce(topic, b"warm-up")
    assert producer.flush(30) == 0, "warm-up record not delivered"
    values = [pb.payload(i) for i in range(args.records)]
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    with pb.CpuMeter(pids) as cpu:
        start = time.perf_counter()
        produce = producer.produce
        for value in values:
            while True:
                try:
                    produce(topic, value, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.01)
        remaining = producer.flush(300)
        elapsed = time.perf_counter() - start
    assert remaining == 0 and not failures, f"{remaining} undelivered, failures {failures[:3]}"
    return {
        "records_per_s": args.records / elapsed,
        "mb_per_s": args.records * pb.RECORD_BYTES / elapsed / 1e6,
        "cpu_s_per_million": cpu.total_s / args.records * 1e6,
        "client_cpu_s_per_million": cpu.client_s / args.records * 1e6,
    }


def kafka_latency(args: argparse.Namespace, bootstrap: str, topic: str) -> list[float]:
    """One record at a time: produce, then serve delivery reports until its acknowledgement."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0})  # fmt: skip
    done: list[bool] = []

    def on_delivery(err, _msg) -> None:
        assert err is None, err
        done.append(True)

    samples = []
    for i in range(WARM_UP + args.latency_samples):
        done.clear()
        start = time.perf_counter()
        producer.produce(topic, pb.payload(i), on_delivery=on_delivery)
        deadline = time.monotonic() + 30
        while not done:
            producer.poll(0.0005)
            assert time.monotonic() < deadline, "no acknowledgement within 30 s"
        if i >= WARM_UP:
            samples.append((time.perf_counter() - start) * 1000)
    producer.flush(30)
    return samples


def kafka_fetch(
    args: argparse.Namespace, bootstrap: str, topic: str, partitions: int, pids: list[int]
) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-bench-reader",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 4 << 20})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count = 0
    try:
        with pb.CpuMeter(pids) as cpu:
            start = time.perf_counter()
            idle = 0
            while count < args.records and idle < 10:
                batch = consumer.consume(num_messages=10_000, timeout=1.0)
                count += sum(1 for m in batch if m.error() is None)
                idle = 0 if batch else idle + 1
            elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return {
        "records": count,
        "records_per_s": count / elapsed,
        "mb_per_s": count * pb.RECORD_BYTES / elapsed / 1e6,
        "cpu_s_per_million": cpu.total_s / max(count, 1) * 1e6,
    }


def run_pykraft(args: argparse.Namespace, work: Path) -> tuple[dict, dict]:
    cluster = LocalCluster(work / "pykraft", controllers=3, brokers=3)
    cluster.data_dir.mkdir(parents=True)
    cluster.plan()
    kafka: dict = {}
    grpc: dict = {}
    try:
        cluster.start()
        cluster.wait_until(lambda: all(cluster.healthy(n) for n in cluster.nodes), pb.START_TIMEOUT_S,
                           "pykraft up")  # fmt: skip
        pids = [n.pid for n in cluster.nodes]
        topics = {f"{side}-{p}": p for side in ("bench", "kafka") for p in PARTITION_COUNTS}
        topics.update({"latency": 1, "kafka-latency": 1})
        with AdminClient(cluster.controller_addresses, timeout_s=60) as admin:
            for name, partitions in topics.items():
                admin.create_topic(name, num_partitions=partitions, replication_factor=3,
                                   configs={"min.insync.replicas": "2"})  # fmt: skip
        pb.wait_until(lambda: pb.leaders_known(cluster.bootstrap, list(topics)), 60, "leaders")
        bootstrap = cluster.kafka_bootstrap
        for partitions in PARTITION_COUNTS:
            kafka[f"throughput_{partitions}"] = kafka_throughput(args, bootstrap, f"kafka-{partitions}", pids)
            grpc[f"throughput_{partitions}"] = pb.pykraft_throughput(
                args, cluster.bootstrap, f"bench-{partitions}", pids
            )
            print(f"{partitions} partition(s): kafka {kafka[f'throughput_{partitions}']}, "
                  f"grpc {grpc[f'throughput_{partitions}']}", flush=True)  # fmt: skip
        kafka["latency"] = kafka_latency(args, bootstrap, "kafka-latency")
        grpc["latency"] = pb.pykraft_latency(args, cluster.bootstrap)
        kafka["fetch"] = kafka_fetch(args, bootstrap, "kafka-6", 6, pids)
        grpc["fetch"] = pb.pykraft_fetch(args, cluster.bootstrap, pids)
        print(f"fetch: kafka {kafka['fetch']}, grpc {grpc['fetch']}", flush=True)
    finally:
        cluster.down(timeout_s=15)
        for spec in cluster.nodes:
            cluster.kill_node(spec)
    return kafka, grpc


def report(args: argparse.Namespace, kafka: dict, grpc: dict, nats: dict) -> None:
    print()
    print(f"machine: {pb.machine_info()}")
    print(f"nats: {nats['version']}, 3 nodes, stream R3 file storage, publish_async window {pb.NATS_WINDOW}")
    print("pykraft: 3 controllers + 3 brokers (LocalCluster defaults), RF=3, min.insync.replicas=2, "
          "acks=all; kafka = confluent-kafka (librdkafka) idempotent, grpc = pykraft.Producer/Consumer; "
          f"linger.ms={args.linger_ms}, batch.size={args.batch_size}")  # fmt: skip
    print(f"workload: {args.records:,} x {pb.RECORD_BYTES}-byte records; "
          f"latency {args.latency_samples} samples")  # fmt: skip
    print()
    print("| figure | Kafka listener (confluent-kafka) | gRPC path (pykraft client) | NATS JetStream |")
    print("|---|---|---|---|")
    nt = nats["throughput"]
    for p in PARTITION_COUNTS:
        k, g = kafka[f"throughput_{p}"], grpc[f"throughput_{p}"]
        print(f"| producer records/s, acks=all, {p} partition(s) | {k['records_per_s']:,.0f} | "
              f"{g['records_per_s']:,.0f} | {nt['records_per_s']:,.0f} |")  # fmt: skip
        print(f"| CPU s per million records, {p} partition(s) (client) | {k['cpu_s_per_million']:.1f} "
              f"({k['client_cpu_s_per_million']:.1f}) | {g['cpu_s_per_million']:.1f} "
              f"({g['client_cpu_s_per_million']:.1f}) | {nt['cpu_s_per_million']:.1f} "
              f"({nt['client_cpu_s_per_million']:.1f}) |")  # fmt: skip
    for q in (0.5, 0.99):
        k, g, n = (pb.percentile(side["latency"], q) for side in (kafka, grpc, nats))
        print(f"| one-record acks=all latency p{int(q * 100)} ms | {k:.2f} | {g:.2f} | {n:.2f} |")
    kf, gf, nf = kafka["fetch"], grpc["fetch"], nats["fetch"]
    rates = " | ".join(f"{side['records_per_s']:,.0f}" for side in (kf, gf, nf))
    print(f"| consumer records/s from the beginning (6 partitions / the stream) | {rates} |")
    print(f"| consumer CPU s per million records | {kf['cpu_s_per_million']:.1f} | "
          f"{gf['cpu_s_per_million']:.1f} | {nf['cpu_s_per_million']:.1f} |")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--latency-samples", type=int, default=1000)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256 * 1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp:
        kafka, grpc = run_pykraft(args, Path(tmp))
        nats = pb.run_nats(args, Path(tmp))
    report(args, kafka, grpc, nats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
