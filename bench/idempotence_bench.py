"""Idempotent producer cost: produce throughput with ``enable.idempotence`` on vs off, same run.

    .venv/bin/python bench/idempotence_bench.py [--records 100000] [--rounds 3]

One pykraft cluster (3 controllers + 3 brokers, started and stopped by pid by this script), a topic of
6 partitions, RF=3, min.insync.replicas=2, 100-byte null-key records, acks=all, a confluent-kafka
(librdkafka) producer. The two modes run
alternately, the order swapped every round (off-on, on-off, ...), so both see the same machine load
and neither always runs second; each mode's figure is the median of its rounds. Target (issue 6):
on / off >= 0.95. The broker-side cost is one header parse and a dict lookup per batch
(``storage.producer_state``); the client adds the producer fields to each batch (and librdkafka caps
in-flight requests per broker at 5 with idempotence, 1,000,000 without).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from confluent_kafka import Producer  # noqa: E402
from produce_bench import (  # noqa: E402
    START_TIMEOUT_S,
    Delivered,
    leaders_known,
    payload,
    produce_all,
    producer_settings,
    wait_until,
)

from pykraft.admin import AdminClient  # noqa: E402
from pykraft.cluster import LocalCluster  # noqa: E402

TOPIC = "idempotence-bench"
PARTITIONS = 6


def throughput(bootstrap: str, records: int, idempotent: bool, linger_ms: int, batch_size: int) -> float:
    values = [payload(i) for i in range(records)]
    settings = producer_settings(bootstrap, **{"linger.ms": linger_ms, "batch.size": batch_size,
                                               "enable.idempotence": idempotent})  # fmt: skip
    producer = Producer(settings)
    warm = Delivered()
    produce_all(producer, TOPIC, [b"warm-up"], warm)
    warm.check(1)
    delivered = Delivered()
    start = time.perf_counter()
    produce_all(producer, TOPIC, values, delivered)
    elapsed = time.perf_counter() - start
    delivered.check(records)
    return records / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256 * 1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="idempotence-bench-") as tmp:
        cluster = LocalCluster(Path(tmp) / "pykraft", controllers=3, brokers=3)
        cluster.data_dir.mkdir(parents=True)
        cluster.plan()
        rates: dict[bool, list[float]] = {False: [], True: []}
        try:
            cluster.start()
            cluster.wait_until(lambda: all(cluster.healthy(n) for n in cluster.nodes), START_TIMEOUT_S, "up")
            with AdminClient(cluster.controller_addresses, timeout_s=60) as admin:
                admin.create_topic(TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                                   configs={"min.insync.replicas": "2"})  # fmt: skip
            wait_until(lambda: leaders_known(cluster.kafka_bootstrap, [TOPIC]), 60, "leaders")
            for round_ in range(args.rounds):
                for idempotent in (False, True) if round_ % 2 == 0 else (True, False):
                    rate = throughput(cluster.kafka_bootstrap, args.records, idempotent, args.linger_ms,
                                      args.batch_size)  # fmt: skip
                    rates[idempotent].append(rate)
                    mode = "on" if idempotent else "off"
                    print(f"round {round_}: idempotence {mode}: {rate:,.0f} records/s", flush=True)
        finally:
            cluster.down(timeout_s=15)
            for spec in cluster.nodes:
                cluster.kill_node(spec)
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"median records/s: off {off:,.0f}, on {on:,.0f}; on/off = {on / off:.3f} (target >= 0.95)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
