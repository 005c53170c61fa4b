"""One-record acks=all latency through replication (issue 16 §1: replication over Kafka Fetch).

    .venv/bin/python bench/replication_latency_bench.py [--samples 2000] [--runs 1]

Starts a LocalCluster (3 controllers + 3 brokers, defaults) in a temporary directory, creates a topic
with 1 partition, RF 3, min.insync.replicas=2, and sends 100-byte records one at a time with
confluent-kafka (acks=all, idempotent, linger.ms=0): produce, serve delivery reports until the
acknowledgement, next. An acks=all answer needs the followers' next fetches to carry their new LEO
to the leader, so the figure is dominated by the replication round trip. Prints p50/p99/mean in ms
(after 100 warm-up records). Every process it starts is stopped by pid.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from pykraft.admin import AdminClient
from pykraft.cluster import LocalCluster

WARM_UP = 100
RECORD_BYTES = 100
START_TIMEOUT_S = 90
TOPIC = "replication-latency"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(bootstrap: str, samples: int) -> list[float]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0})  # fmt: skip
    done: list[object] = []
    producer.produce(TOPIC, b"w", on_delivery=lambda err, _msg: done.append(err))
    producer.flush(60)  # the first one waits for metadata and the producer id
    assert done == [None], f"warm-up record not delivered: {done}"
    value = b"x" * RECORD_BYTES
    out = []
    for i in range(WARM_UP + samples):
        done.clear()
        start = time.perf_counter()
        producer.produce(TOPIC, value, on_delivery=lambda err, _msg: done.append(err))
        deadline = time.monotonic() + 30
        while not done:
            producer.poll(0.0005)
            assert time.monotonic() < deadline, "no acknowledgement within 30 s"
        assert done == [None], done
        if i >= WARM_UP:
            out.append((time.perf_counter() - start) * 1000)
    producer.flush(30)
    return out


def run(samples: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="repl-latency-") as work:
        cluster = LocalCluster(Path(work) / "cluster", controllers=3, brokers=3)
        cluster.data_dir.mkdir(parents=True)
        cluster.plan()
        try:
            cluster.start()
            cluster.wait_until(lambda: all(cluster.healthy(n) for n in cluster.nodes), START_TIMEOUT_S,
                               "cluster up")  # fmt: skip
            with AdminClient(cluster.controller_addresses, timeout_s=60) as admin:
                admin.create_topic(TOPIC, num_partitions=1, replication_factor=3,
                                   configs={"min.insync.replicas": "2"})  # fmt: skip
            return measure(cluster.kafka_bootstrap, samples)
        finally:
            cluster.down(timeout_s=15)
            for spec in cluster.nodes:
                cluster.kill_node(spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    for n in range(args.runs):
        values = run(args.samples)
        p50, p99, mean = percentile(values, 0.5), percentile(values, 0.99), statistics.fmean(values)
        print(f"run {n + 1}: {len(values)} samples: p50 {p50:.2f} ms, p99 {p99:.2f} ms, mean {mean:.2f} ms",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
