"""Zero-copy fetch: broker CPU-seconds per GB served to a consumer, with and without sendfile (issue 16 §2).

    ./dev bench zerocopy_bench [--mb 1000] [--rounds 3] [--value-bytes 1000]
    PYKRAFT_EVENT_LOOP=asyncio ./dev bench zerocopy_bench   # the asyncio loop where uvloop is installed

One run, on 127.0.0.1: one controller and one broker (LocalCluster), a topic of one partition (RF 1)
filled with ``--mb`` MB of ``--value-bytes`` records by a confluent-kafka producer (no compression).
Then ``--rounds`` pairs of reads, alternating: the broker is restarted with
``kafka.sendfile.enable=true`` (Fetch records go from the segment files to the socket with
os.sendfile) or ``=false`` (read into the broker's memory and written, the path before issue 16), and
a confluent-kafka Consumer reads the partition from offset 0 to its end (fetch.max.bytes 50 MiB,
max.partition.fetch.bytes 8 MiB). Measured per read: the broker process's CPU seconds (user+sys,
/proc/<pid>/stat) over the read, divided by the bytes of the partition's segment files, also less
the broker's idle CPU (measured for ``--idle-s`` just before the read) over the read's time; and the
read rate. The files are in the page cache for every read (written just before; a warm-up read
first). The machine is shared: compare the two columns of one run; the ratio is the figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import produce_bench as pb  # bench/ is this script's directory
from confluent_kafka import Consumer, Producer, TopicPartition

from pykraft.admin import AdminClient
from pykraft.cluster import LocalCluster

TOPIC = "zerocopy"
MODES = ("true", "false")  # kafka.sendfile.enable
READY_TIMEOUT_S = 60.0


def fill(bootstrap: str, total_bytes: int, value_bytes: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20})  # fmt: skip
    value = bytes(range(256)) * (value_bytes // 256 + 2)
    count = total_bytes // value_bytes
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, value[i % 256 : i % 256 + value_bytes], on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(300)
    assert remaining == 0 and not failures, f"{remaining} undelivered, failures {failures[:3]}"
    return count


def partition_bytes(cluster: LocalCluster) -> int:
    broker = cluster.broker_nodes[0]
    directory = cluster.data_dir / broker.name
    files = [p for p in directory.rglob("*.log") if p.parent.name == f"{TOPIC}-0"]
    assert files, f"no segment files of {TOPIC}-0 under {directory}"
    return sum(p.stat().st_size for p in files)


def read_all(bootstrap: str, records: int) -> float:
    """Read the partition from offset 0 until ``records`` records; the elapsed seconds."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "zerocopy-bench",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 8 << 20,
                         "queued.max.messages.kbytes": 262144})  # fmt: skip
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        count = 0
        start = time.perf_counter()
        deadline = time.monotonic() + 600
        while count < records:
            assert time.monotonic() < deadline, f"read {count} of {records} records in 600 s"
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                assert message.error() is None, message.error()
                count += 1
        return time.perf_counter() - start
    finally:
        consumer.close()


def user_sys_s(pid: int) -> tuple[float, float]:
    """(user, sys) CPU seconds of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / pb.CLK_TCK, int(fields[12]) / pb.CLK_TCK


def leader_ready(bootstrap: str) -> bool:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "zerocopy-bench-probe"})
    try:
        topic = consumer.list_topics(TOPIC, timeout=5).topics.get(TOPIC)
        return topic is not None and topic.error is None and topic.partitions[0].leader >= 0
    finally:
        consumer.close()


def restart_broker(cluster: LocalCluster, sendfile: str) -> str:
    """Restart the broker with ``kafka.sendfile.enable=sendfile``; its event loop's module."""
    broker = cluster.broker_nodes[0]
    cluster.overrides["kafka.sendfile.enable"] = sendfile
    assert cluster.stop_node(broker), f"{broker.name} did not stop"
    cluster.start_node(broker)
    cluster.wait_until(lambda: cluster.healthy(broker), READY_TIMEOUT_S, f"{broker.name} healthy")
    pb.wait_until(lambda: leader_ready(cluster.kafka_bootstrap), READY_TIMEOUT_S, "partition leader")
    log = cluster.log_path(broker).read_text(errors="replace")
    started = [line for line in log.splitlines() if "listener_started" in line][-1]
    assert f"sendfile={sendfile == 'true'}".lower() in started.lower(), f"not sendfile={sendfile}: {started}"
    return started.rsplit("event_loop=", 1)[1].split()[0]


def run(args: argparse.Namespace, work: Path) -> dict:
    cluster = LocalCluster(work / "pykraft", controllers=1, brokers=1, log_level="INFO",
                           overrides={"kafka.sendfile.enable": "true"})  # fmt: skip
    cluster.data_dir.mkdir(parents=True)
    cluster.plan()
    results: dict = {mode: [] for mode in MODES}
    try:
        cluster.start()
        cluster.wait_until(lambda: all(cluster.healthy(n) for n in cluster.nodes), pb.START_TIMEOUT_S,
                           "pykraft up")  # fmt: skip
        with AdminClient(cluster.controller_addresses, timeout_s=60) as admin:
            admin.create_topic(TOPIC, num_partitions=1, replication_factor=1,
                               configs={"segment.bytes": str(256 << 20)})  # fmt: skip
        pb.wait_until(lambda: leader_ready(cluster.kafka_bootstrap), READY_TIMEOUT_S, "partition leader")
        start = time.perf_counter()
        records = fill(cluster.kafka_bootstrap, args.mb * 1_000_000, args.value_bytes)
        size = partition_bytes(cluster)
        print(f"filled {records:,} records, {size / 1e6:,.0f} MB of segment files in "
              f"{time.perf_counter() - start:.1f} s", flush=True)  # fmt: skip
        read_all(cluster.kafka_bootstrap, records)  # warm-up: page cache, connections
        broker = cluster.broker_nodes[0]
        for round_index in range(args.rounds):
            for mode in MODES:
                results["event_loop"] = restart_broker(cluster, mode)
                idle_start, idle_cpu = time.perf_counter(), pb.proc_cpu_s(broker.pid)
                time.sleep(args.idle_s)  # the broker's own background work (heartbeats, metadata, timers)
                idle_rate = (pb.proc_cpu_s(broker.pid) - idle_cpu) / (time.perf_counter() - idle_start)
                before = pb.proc_cpu_s(broker.pid)
                user_before, sys_before = user_sys_s(broker.pid)
                elapsed = read_all(cluster.kafka_bootstrap, records)
                cpu_s = pb.proc_cpu_s(broker.pid) - before
                user_after, sys_after = user_sys_s(broker.pid)
                net_s = max(cpu_s - idle_rate * elapsed, 0.0)
                row = {"cpu_s": cpu_s, "cpu_s_per_gb": cpu_s / (size / 1e9), "mb_per_s": size / elapsed / 1e6,
                       "net_cpu_s_per_gb": net_s / (size / 1e9), "idle_cpu_s_per_s": idle_rate,
                       "user_s_per_gb": (user_after - user_before) / (size / 1e9),
                       "sys_s_per_gb": (sys_after - sys_before) / (size / 1e9)}  # fmt: skip
                results[mode].append(row)
                print(f"round {round_index + 1} sendfile={mode}: broker {cpu_s:.2f} CPU-s over "
                      f"{elapsed:.1f} s, {row['cpu_s_per_gb']:.2f} CPU-s/GB "
                      f"({row['net_cpu_s_per_gb']:.2f} less idle {idle_rate:.3f} CPU-s/s), "
                      f"{row['mb_per_s']:,.0f} MB/s", flush=True)  # fmt: skip
        results["bytes"] = size
        results["records"] = records
    finally:
        cluster.down(timeout_s=15)
        for spec in cluster.nodes:
            cluster.kill_node(spec)
    return results


def report(args: argparse.Namespace, results: dict) -> None:
    print()
    print(f"machine: {pb.machine_info()}")
    print(f"pykraft: 1 controller + 1 broker (LocalCluster), topic {TOPIC} 1 partition RF 1, "
          f"{results['records']:,} records of {args.value_bytes} B, {results['bytes'] / 1e6:,.0f} MB of "
          f"segment files; confluent-kafka Consumer from offset 0; {args.rounds} rounds; broker event loop: "
          f"{results['event_loop']}")  # fmt: skip
    median = {
        mode: {key: statistics.median(r[key] for r in results[mode]) for key in results[mode][0]}
        for mode in MODES
    }
    print("| figure (median of the rounds) | sendfile (kafka.sendfile.enable=true) "
          "| read into memory (=false) |")  # fmt: skip
    print("|---|---|---|")
    print(f"| broker CPU-s per GB served | {median['true']['cpu_s_per_gb']:.2f} | "
          f"{median['false']['cpu_s_per_gb']:.2f} |")  # fmt: skip
    print(f"| the same, less the idle broker's CPU over the read | {median['true']['net_cpu_s_per_gb']:.2f} "
          "| "
          f"{median['false']['net_cpu_s_per_gb']:.2f} |")  # fmt: skip
    print(f"| of which user / sys CPU-s per GB | {median['true']['user_s_per_gb']:.2f} / "
          f"{median['true']['sys_s_per_gb']:.2f} | {median['false']['user_s_per_gb']:.2f} / "
          f"{median['false']['sys_s_per_gb']:.2f} |")  # fmt: skip
    print(f"| idle broker CPU-s per s (before each read) | {median['true']['idle_cpu_s_per_s']:.3f} | "
          f"{median['false']['idle_cpu_s_per_s']:.3f} |")  # fmt: skip
    print(f"| consumer read rate MB/s | {median['true']['mb_per_s']:,.0f} | "
          f"{median['false']['mb_per_s']:,.0f} |")  # fmt: skip
    ratio = median["false"]["cpu_s_per_gb"] / median["true"]["cpu_s_per_gb"]
    net = median["false"]["net_cpu_s_per_gb"] / max(median["true"]["net_cpu_s_per_gb"], 1e-9)
    print(f"ratio: without sendfile the broker spends {ratio:.2f}x the CPU per GB served "
          f"({net:.2f}x less its idle CPU)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=1000, help="MB of records to serve (default 1000)")
    parser.add_argument("--value-bytes", type=int, default=1000, help="record value size (default 1000)")
    parser.add_argument("--idle-s", type=float, default=3.0,
                        help="seconds of the idle broker's CPU measured before each read (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="reads per mode, alternating (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zerocopy-bench-") as tmp:
        results = run(args, Path(tmp))
    report(args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
