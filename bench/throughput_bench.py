"""Throughput targets of issue 16 §5: pykraft (3 controllers + 3 brokers) vs NATS JetStream (3 nodes, R3).

    ./dev bench throughput_bench [--records 1000000] [--nats-records 200000] [--linger-ms 5]

One run, both clusters on 127.0.0.1, started (and stopped, by pid) by this script one after the other;
``nats-server`` is Debian's (installed with apt-get when missing), its client nats-py. 100-byte records.
Measured, each printed with its target and verdict:

1. producer throughput, 1 and 6 partitions: a confluent-kafka (librdkafka) ``Producer`` with
   acks=all, idempotence on, no compression, ``linger.ms``/``batch.size`` as printed, null keys
   (sticky partitioning), on topics with RF 3 and min.insync.replicas=2; the loop is ``produce()``
   per record and one ``flush()`` (delivery reports for errors only, so no Python callback runs per
   delivered record; a record that failed fails the run, and ``flush`` must leave nothing queued).
   JetStream: ``publish_async`` with 1,000 publishes outstanding on a file-storage stream with 3
   replicas. Target: pykraft >= 10x JetStream's rate, both partition counts.
2. a consumer reading the 6-partition topic from the beginning (``assign`` at OFFSET_BEGINNING,
   ``consume(10000)`` in a loop, each message's error checked; ``fetch.queue.backoff.ms`` 10, see
   ``consumer_settings``); the clock starts at ``assign``; ``--reads`` reads, each by a new consumer,
   the median rate. JetStream: a pull consumer (deliver all, no acks) fetching 1,000 at a time.
   Target: pykraft >= 20x JetStream's rate.
3. broker CPU-seconds per GB served by those reads (user+sys of the three brokers over the reads,
   per GB of the topic's segment files), with sendfile (``kafka.sendfile.enable=true``, the default)
   and without (the brokers restarted with ``=false`` and each partition's preferred leader elected
   again, so that every broker serves what it served before; then the same reads): no target.
4. CPU-seconds per million records, each side split into client (this process) and servers (every
   broker/controller or nats-server process), from /proc.

The machine is shared (2 cores, several engineers): compare the columns of one run. CPU-seconds are
less disturbed by load than rates; the rate ratios are the targets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
import produce_bench as pb  # bench/ is this script's directory
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdminClient

from pykraft.admin import AdminClient
from pykraft.cluster import LocalCluster

PRODUCE_TARGET = 10.0
FETCH_TARGET = 20.0
READ_TOPIC = "bench-6"
READY_TIMEOUT_S = 90.0


@dataclass
class Meter:
    """user+sys CPU seconds of this process and of named server groups between start() and stop()."""

    groups: dict[str, list[int]]
    client_s: float = 0.0
    server_s: dict[str, float] = field(default_factory=dict)

    def _now(self) -> tuple[float, dict[str, float]]:
        times = os.times()
        return times.user + times.system, {
            name: sum(pb.proc_cpu_s(pid) for pid in pids) for name, pids in self.groups.items()
        }

    def __enter__(self) -> Meter:
        self._start, self._start_wall = self._now(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        client, servers = self._now()
        self.elapsed_s = time.perf_counter() - self._start_wall
        self.client_s = client - self._start[0]
        self.server_s = {name: servers[name] - self._start[1][name] for name in servers}

    def per_million(self, records: int) -> dict[str, float]:
        out = {"client": self.client_s, **self.server_s}
        out["servers"] = sum(self.server_s.values())
        out["total"] = out["servers"] + self.client_s
        return {name: value / records * 1e6 for name, value in out.items()}


# ---- pykraft ---------------------------------------------------------------------------------------


def producer_settings(args: argparse.Namespace, bootstrap: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "compression.type": "none",
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "queue.buffering.max.messages": args.records + 1000,  # produce() never waits for room
        "delivery.report.only.error": True,
    }


def consumer_settings(bootstrap: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": "throughput-bench",
        "enable.auto.commit": False,
        "fetch.max.bytes": 50 << 20,
        "max.partition.fetch.bytes": 4 << 20,
        # librdkafka stops fetching a partition while its local queue holds more than
        # queued.min.messages (100,000) and retries only after fetch.queue.backoff.ms (1,000 ms by
        # default): a reader faster than that would wait a second per refill.
        "fetch.queue.backoff.ms": 10,
    }


class Failures:
    """Delivery reports (errors only, with delivery.report.only.error): keeps the first."""

    def __init__(self) -> None:
        self.count = 0
        self.first = None

    def __call__(self, error, _message) -> None:
        if error is not None:
            self.count += 1
            self.first = self.first or error


def produce_all(args: argparse.Namespace, bootstrap: str, topic: str, groups: dict[str, list[int]]) -> dict:
    values = [pb.payload(i) for i in range(args.records)]
    failures = Failures()
    producer = Producer({**producer_settings(args, bootstrap), "on_delivery": failures})
    producer.produce(topic, b"warm-up")
    assert producer.flush(60) == 0 and failures.count == 0, f"warm-up failed: {failures.first}"
    produce = producer.produce
    with Meter(groups) as meter:
        for value in values:
            produce(topic, value)
        left = producer.flush(300)
    if left or failures.count:
        raise RuntimeError(f"{left} records undelivered, {failures.count} failed; first: {failures.first}")
    return {"records_per_s": args.records / meter.elapsed_s, "cpu": meter.per_million(args.records)}


def read_all(bootstrap: str, topic: str, partitions: int, records: int, groups: dict[str, list[int]]):
    consumer = Consumer(consumer_settings(bootstrap))
    try:
        consumer.list_topics(topic, timeout=10)  # the bootstrap connection and metadata, before the clock
        count = 0
        deadline = time.monotonic() + 300
        with Meter(groups) as meter:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            consume = consumer.consume
            while count < records:
                batch = consume(10_000, 1.0)
                for message in batch:
                    if message.error() is not None:
                        raise RuntimeError(f"consumer error: {message.error()}")
                count += len(batch)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"read {count} of {records} records in 300 s")
    finally:
        consumer.close()
    return count, meter


def topic_bytes(cluster: LocalCluster, topic: str) -> int:
    """Bytes of the topic's segment files on one broker (every broker holds every partition: RF 3)."""
    broker = cluster.broker_nodes[0]
    files = [
        p for p in (cluster.data_dir / broker.name).rglob("*.log") if p.parent.name.startswith(f"{topic}-")
    ]
    assert files, f"no segment files of {topic} under {cluster.data_dir / broker.name}"
    return sum(p.stat().st_size for p in files)


def measure_read(args, cluster: LocalCluster, groups: dict[str, list[int]], size: int) -> dict:
    """``args.reads`` reads of the whole topic, each by a new consumer: the median rate, and the CPU of
    all of them over all the bytes they were served."""
    with Meter({"brokers": groups["brokers"]}) as idle:
        time.sleep(args.idle_s)
    idle_rate = idle.server_s["brokers"] / idle.elapsed_s
    rates, meters, total = [], [], 0
    for _ in range(args.reads):
        count, meter = read_all(cluster.kafka_bootstrap, READ_TOPIC, 6, args.records, groups)
        rates.append(count / meter.elapsed_s)
        meters.append(meter)
        total += count
    elapsed_s = sum(m.elapsed_s for m in meters)
    broker_s = sum(m.server_s["brokers"] for m in meters)
    gb = size * args.reads / 1e9
    cpu = {"client": sum(m.client_s for m in meters)}
    for name in groups:
        cpu[name] = sum(m.server_s[name] for m in meters)
    cpu["servers"] = sum(cpu[name] for name in groups)
    cpu["total"] = cpu["servers"] + cpu["client"]
    return {
        "records_per_s": statistics.median(rates),
        "rates": rates,
        "mb_per_s": size * args.reads / elapsed_s / 1e6,
        "cpu": {name: value / total * 1e6 for name, value in cpu.items()},
        "broker_cpu_s_per_gb": broker_s / gb,
        "net_broker_cpu_s_per_gb": max(broker_s - idle_rate * elapsed_s, 0.0) / gb,
        "idle_broker_cpu_s_per_s": idle_rate,
    }


def restart_brokers(cluster: LocalCluster, sendfile: str) -> None:
    """Restart every broker with ``kafka.sendfile.enable=sendfile``, one at a time, each back in every
    ISR before the next stops; then the partitions' leaders of before, by a preferred election."""
    layout = leader_layout(cluster.kafka_bootstrap)
    assert len(layout) == 7, f"not every partition has 3 in-sync replicas: {layout}"
    cluster.overrides["kafka.sendfile.enable"] = sendfile
    for broker in cluster.broker_nodes:
        if not cluster.stop_node(broker):  # killed after the stop timeout: its log recovers at start
            print(f"{broker.name} did not stop within the timeout and was killed", flush=True)
        cluster.start_node(broker)
        cluster.wait_until(lambda b=broker: cluster.healthy(b), READY_TIMEOUT_S, f"{broker.name} healthy")
        pb.wait_until(lambda: pb.leaders_known(cluster.kafka_bootstrap, ["bench-1", READ_TOPIC]),
                      READY_TIMEOUT_S, "leaders and full ISRs")  # fmt: skip
        log = cluster.log_path(broker).read_text(errors="replace")
        started = [line for line in log.splitlines() if "listener_started" in line][-1]
        assert f"sendfile={sendfile == 'true'}".lower() in started.lower(), started
    # The stops moved leaders; the reads compare sendfile only when each broker leads what it led
    # before: the preferred replicas, as when the topics were new.
    with AdminClient(cluster.controller_addresses, timeout_s=60) as admin:
        admin.elect_leaders("preferred")
    pb.wait_until(lambda: leader_layout(cluster.kafka_bootstrap) == layout, READY_TIMEOUT_S,
                  f"the leaders of before the restarts: {layout}")  # fmt: skip


def leader_layout(bootstrap: str) -> dict[tuple[str, int], int]:
    """The leader of every partition of the two topics, when each has 3 in-sync replicas (else {})."""
    metadata = KafkaAdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5)
    layout = {}
    for topic in ("bench-1", READ_TOPIC):
        for p in metadata.topics[topic].partitions.values() if topic in metadata.topics else ():
            if len(p.isrs) != 3:
                return {}
            layout[(topic, p.id)] = p.leader
    return layout


def run_pykraft(args: argparse.Namespace, work: Path) -> dict:
    cluster = LocalCluster(work / "pykraft", controllers=3, brokers=3, log_level="INFO")
    cluster.data_dir.mkdir(parents=True)
    cluster.plan()
    results: dict = {}
    try:
        cluster.start()
        cluster.wait_until(lambda: all(cluster.healthy(n) for n in cluster.nodes), READY_TIMEOUT_S, "up")
        groups = {"brokers": [n.pid for n in cluster.broker_nodes],
                  "controllers": [n.pid for n in cluster.controller_nodes]}  # fmt: skip
        with AdminClient(cluster.controller_addresses, timeout_s=60) as admin:
            for partitions in (1, 6):
                admin.create_topic(f"bench-{partitions}", num_partitions=partitions, replication_factor=3,
                                   configs={"min.insync.replicas": "2"})  # fmt: skip
        bootstrap = cluster.kafka_bootstrap
        pb.wait_until(lambda: pb.leaders_known(bootstrap, ["bench-1", READ_TOPIC]), 60, "leaders")
        for partitions in (1, 6):
            row = produce_all(args, bootstrap, f"bench-{partitions}", groups)
            results[f"produce_{partitions}"] = row
            print(f"pykraft produce, {partitions} partition(s): {row['records_per_s']:,.0f} records/s, "
                  f"{_cpu_text(row['cpu'])}", flush=True)  # fmt: skip
        size = topic_bytes(cluster, READ_TOPIC)
        results["read_bytes"] = size
        for mode in ("true", "false"):
            if mode == "false":
                restart_brokers(cluster, mode)
                groups["brokers"] = [n.pid for n in cluster.broker_nodes]
            row = measure_read(args, cluster, groups, size)
            results[f"read_sendfile_{mode}"] = row
            print(
                f"pykraft read (sendfile={mode}): {row['records_per_s']:,.0f} records/s, "
                f"{row['broker_cpu_s_per_gb']:.2f} broker CPU-s/GB, {_cpu_text(row['cpu'])}",
                flush=True,
            )
    finally:
        cluster.down(timeout_s=15)
        for spec in cluster.nodes:
            cluster.kill_node(spec)
    return results


def _cpu_text(cpu: dict[str, float]) -> str:
    return "CPU-s per million: " + ", ".join(f"{name} {value:.2f}" for name, value in cpu.items())


# ---- NATS JetStream --------------------------------------------------------------------------------


def run_nats(args: argparse.Namespace, work: Path) -> dict:
    binary = pb.ensure_nats_server()
    cluster = pb.NatsCluster(binary, work)
    cluster.start()
    try:
        results = asyncio.run(nats_measure(args, cluster))
        results["version"] = pb.nats_version(binary)
        return results
    finally:
        cluster.stop()


async def nats_measure(args: argparse.Namespace, cluster: pb.NatsCluster) -> dict:
    nc, js = await pb.nats_connect(cluster)
    groups = {"servers": [p.pid for p in cluster.procs]}
    results: dict = {}
    records = args.nats_records
    try:
        await js.publish("bench", b"warm-up")
        values = [pb.payload(i) for i in range(records)]
        with Meter(groups) as meter:
            pending: deque = deque()
            for value in values:
                pending.append(await js.publish_async("bench", value))
                if len(pending) >= pb.NATS_WINDOW:
                    await pending.popleft()
            for future in pending:
                await future
        results["produce"] = {"records_per_s": records / meter.elapsed_s, "cpu": meter.per_million(records)}
        print(f"nats publish: {results['produce']['records_per_s']:,.0f} records/s, "
              f"{_cpu_text(results['produce']['cpu'])}", flush=True)  # fmt: skip
        results["read"] = await nats_read(js, records + 1, groups)
        print(f"nats read: {results['read']['records_per_s']:,.0f} records/s, "
              f"{_cpu_text(results['read']['cpu'])}", flush=True)  # fmt: skip
    finally:
        await nc.close()
    return results


async def nats_read(js, records: int, groups: dict[str, list[int]]) -> dict:
    from nats.js.api import ConsumerConfig, DeliverPolicy

    config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy="none")
    sub = await js.pull_subscribe("bench", durable="reader", config=config)
    count = 0
    with Meter(groups) as meter:
        while count < records:
            count += len(await sub.fetch(1000, timeout=10))
    return {"records_per_s": count / meter.elapsed_s, "cpu": meter.per_million(count)}


# ---- report -----------------------------------------------------------------------------------------


def verdict(ratio: float, target: float) -> str:
    return f"{ratio:.2f}x (target >= {target:g}x: {'MET' if ratio >= target else 'MISSED'})"


def report(args: argparse.Namespace, ours: dict, nats: dict) -> None:
    print()
    print(f"machine: {pb.machine_info()}")
    print(f"nats: {nats['version']}, 3 nodes, stream R3 file storage; publish_async window {pb.NATS_WINDOW}, "
          f"pull fetch 1000; {args.nats_records:,} records")  # fmt: skip
    print(f"pykraft: 3 controllers + 3 brokers (LocalCluster), RF 3, min.insync.replicas=2; confluent-kafka "
          f"{confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]}); producer "
          f"{ {k: v for k, v in producer_settings(args, '').items() if k != 'bootstrap.servers'} }; "
          f"consumer { {k: v for k, v in consumer_settings('').items() if k != 'bootstrap.servers'} }; "
          f"{args.records:,} records of {pb.RECORD_BYTES} B per topic")  # fmt: skip
    print()
    print("| figure | pykraft | NATS JetStream | ratio, target, verdict |")
    print("|---|---|---|---|")
    nt, nr = nats["produce"], nats["read"]
    for partitions in (1, 6):
        t = ours[f"produce_{partitions}"]
        ratio = t["records_per_s"] / nt["records_per_s"]
        print(
            f"| producer records/s, {partitions} partition(s) | {t['records_per_s']:,.0f} | "
            f"{nt['records_per_s']:,.0f} | {verdict(ratio, PRODUCE_TARGET)} |"
        )
    r = ours["read_sendfile_true"]
    print(
        f"| consumer records/s, 6 partitions from the beginning | {r['records_per_s']:,.0f} | "
        f"{nr['records_per_s']:,.0f} | {verdict(r['records_per_s'] / nr['records_per_s'], FETCH_TARGET)} |"
    )
    for partitions in (1, 6):
        _cpu_row(f"producer, {partitions} partition(s)", ours[f"produce_{partitions}"]["cpu"], nt["cpu"])
    _cpu_row("consumer read", r["cpu"], nr["cpu"])
    print()
    off = ours["read_sendfile_false"]
    mb = ours["read_bytes"] / 1e6
    print(f"broker CPU-s per GB served (the reads above: {args.reads} x {mb:,.0f} MB of segment files; "
          "no target):")  # fmt: skip
    print("| figure | sendfile (kafka.sendfile.enable=true) | read into memory (=false) | ratio |")
    print("|---|---|---|---|")
    print(f"| three brokers' CPU-s per GB | {r['broker_cpu_s_per_gb']:.2f} | "
          f"{off['broker_cpu_s_per_gb']:.2f} | "
          f"{off['broker_cpu_s_per_gb'] / max(r['broker_cpu_s_per_gb'], 1e-9):.2f}x |")  # fmt: skip
    print(f"| the same, less the idle brokers' CPU over the read | {r['net_broker_cpu_s_per_gb']:.2f} | "
          f"{off['net_broker_cpu_s_per_gb']:.2f} | "
          f"{off['net_broker_cpu_s_per_gb'] / max(r['net_broker_cpu_s_per_gb'], 1e-9):.2f}x |")  # fmt: skip
    print(f"| consumer records/s (median of {args.reads} reads) | {r['records_per_s']:,.0f} | "
          f"{off['records_per_s']:,.0f} | |")  # fmt: skip
    print(f"| idle brokers' CPU-s per s (before the reads) | {r['idle_broker_cpu_s_per_s']:.3f} | "
          f"{off['idle_broker_cpu_s_per_s']:.3f} | |")  # fmt: skip


def _cpu_row(what: str, ours: dict[str, float], nats: dict[str, float]) -> None:
    print(f"| CPU-s per million records, {what}: total (client + servers) | {ours['total']:.2f} (client "
          f"{ours['client']:.2f}, brokers {ours['brokers']:.2f}, controllers {ours['controllers']:.2f}) | "
          f"{nats['total']:.2f} (client {nats['client']:.2f}, servers {nats['servers']:.2f}) | "
          f"{nats['total'] / max(ours['total'], 1e-9):.1f}x less |")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="pykraft records per topic")
    parser.add_argument("--nats-records", type=int, default=200_000,
                        help="JetStream records (its rates are ~20x lower)")  # fmt: skip
    parser.add_argument("--linger-ms", type=int, default=5, help="librdkafka linger.ms (its default)")
    parser.add_argument("--batch-size", type=int, default=1_000_000,
                        help="librdkafka batch.size (its default)")  # fmt: skip
    parser.add_argument("--idle-s", type=float, default=3.0,
                        help="idle broker CPU measured before the reads, s")  # fmt: skip
    parser.add_argument("--reads", type=int, default=5, help="reads of the topic per sendfile mode")
    parser.add_argument("--skip-nats", action="store_true", help="pykraft only (no ratios)")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="throughput-bench-") as tmp:
        ours = run_pykraft(args, Path(tmp))
        if args.skip_nats:
            return 0
        nats = run_nats(args, Path(tmp))
    report(args, ours, nats)
    print(f"\n(the whole run took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
