"""Producer benchmark: pykraft (3 controllers + 3 brokers, RF=3, acks=all) vs NATS JetStream (3 nodes, R3).

    ./dev bench produce_bench [--records 200000] [--latency-samples 1000]

Both clusters run on 127.0.0.1 in this run, one after the other, started (and stopped, by pid) by this
script; ``nats-server`` comes from Debian (installed with apt-get if missing), the client is nats-py.
Measured on each side, 100-byte records:

1. producer throughput, records/s and MB/s: a confluent-kafka (librdkafka) ``Producer`` with
   ``acks=all`` and idempotence on, on a topic with min.insync.replicas=2, 1 and 6 partitions (null
   keys: librdkafka's sticky partitioning); JetStream ``publish_async`` with 1,000 publishes
   outstanding on a file-storage stream with 3 replicas;
2. one-record-at-a-time latency p50/p99 (``produce`` + ``flush`` with linger.ms=0 / ``await publish``),
   and for pykraft a hop-by-hop breakdown over the Kafka protocol on one connection to the leader: a
   bare round trip (ApiVersions), a raw Produce with acks=1 (leader append), a raw Produce with
   acks=all (+ the followers' fetch round and the HW advance), the confluent-kafka producer (+ its
   queue, its broker thread and the delivery report);
3. end-to-end latency p50/p99: one record at a time, from ``produce`` to the moment a consumer in this
   process (a confluent-kafka consumer / a push subscription) returns it;
4. fetch throughput: a consumer reading the whole 6-partition topic (the stream) from the beginning;
5. CPU seconds per million records in the throughput runs: user+sys of this process plus every server
   process (from /proc), per million records.

The machine is shared (2 cores, several agents): compare the two columns of one run, not runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import confluent_kafka  # noqa: E402
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient as KafkaAdminClient  # noqa: E402

from proto.kafka import messages as m  # noqa: E402
from proto.runtime.listeners import pick_ports  # noqa: E402
from pykraft.admin import AdminClient  # noqa: E402
from pykraft.cluster import LocalCluster  # noqa: E402
from storage.record_batch import build_batch  # noqa: E402
from tests.kafka_call import KafkaSocket  # noqa: E402

RECORD_BYTES = 100
INDEX_BYTES = 20
E2E_INDEX = 10_000_000  # end-to-end samples are numbered from here: never confused with older records
NATS_WINDOW = 1000
START_TIMEOUT_S = 90.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
CALL_TIMEOUT_S = 30.0  # one request of the hop breakdown (pykraft_breakdown)
PRODUCE_VERSION = 9  # the newest Produce version librdkafka 2.16 and the broker share (flexible)


# ---- shared helpers -------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def proc_cpu_s(pid: int) -> float:
    """user+sys seconds of a process (and its reaped children) from /proc/<pid>/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / CLK_TCK  # utime, stime, cutime, cstime


class CpuMeter:
    """CPU seconds of this process plus the given server pids between start() and stop()."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def _now(self) -> tuple[float, float]:
        times = os.times()
        return times.user + times.system, sum(proc_cpu_s(p) for p in self.pids)

    def __enter__(self) -> CpuMeter:
        self._start = self._now()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._now()
        self.client_s = end[0] - self._start[0]
        self.server_s = end[1] - self._start[1]

    @property
    def total_s(self) -> float:
        return self.client_s + self.server_s


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


def payload(i: int) -> bytes:
    """100 bytes starting with the record's index (end-to-end latency finds the sample by it)."""
    head = b"%020d" % i
    return head + b"x" * (RECORD_BYTES - len(head))


# ---- pykraft ---------------------------------------------------------------------------------------


def run_pykraft(args: argparse.Namespace, work: Path) -> dict:
    cluster = LocalCluster(work / "pykraft", controllers=3, brokers=3)
    cluster.data_dir.mkdir(parents=True)
    cluster.plan()
    results: dict = {}
    try:
        cluster.start()
        cluster.wait_until(
            lambda: all(cluster.healthy(n) for n in cluster.nodes), START_TIMEOUT_S, "pykraft up"
        )
        pids = [n.pid for n in cluster.nodes]
        with AdminClient(cluster.controller_addresses, timeout_s=60) as admin:
            for partitions in (1, 6):
                admin.create_topic(f"bench-{partitions}", num_partitions=partitions, replication_factor=3,
                                   configs={"min.insync.replicas": "2"})  # fmt: skip
            admin.create_topic("latency", num_partitions=1, replication_factor=3,
                               configs={"min.insync.replicas": "2"})  # fmt: skip
        bootstrap = cluster.kafka_bootstrap
        wait_until(lambda: leaders_known(bootstrap, ["bench-1", "bench-6", "latency"]), 60, "leaders")
        for partitions in (1, 6):
            results[f"throughput_{partitions}"] = pykraft_throughput(
                args, bootstrap, f"bench-{partitions}", pids
            )
            print(
                f"pykraft throughput, {partitions} partition(s): {results[f'throughput_{partitions}']}",
                flush=True,
            )
        results["latency"] = pykraft_latency(args, bootstrap)
        results["breakdown"] = pykraft_breakdown(args, bootstrap)
        results["e2e"] = pykraft_end_to_end(args, bootstrap)
        results["fetch"] = pykraft_fetch(args, bootstrap, pids)
        print(f"pykraft: {results}", flush=True)
    finally:
        cluster.down(timeout_s=15)
        for spec in cluster.nodes:
            cluster.kill_node(spec)
    return results


def leaders_known(bootstrap: str, topics: list[str]) -> bool:
    """Every partition of ``topics`` has a leader and 3 in-sync replicas (Kafka Metadata)."""
    metadata = KafkaAdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5)
    parts = [p for t in topics if t in metadata.topics for p in metadata.topics[t].partitions.values()]
    return len({t for t in topics if t in metadata.topics}) == len(topics) and bool(parts) and all(
        p.leader >= 0 and len(p.isrs) == 3 for p in parts
    )


def producer_settings(bootstrap: str, **more: object) -> dict:
    """acks=all with idempotence (issue 16's targets), and room to queue a whole run."""
    return {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "queue.buffering.max.messages": 2_000_000, **more}  # fmt: skip


class Delivered:
    """Delivery reports: counts them and keeps the first error (a benchmark that lost records fails)."""

    def __init__(self) -> None:
        self.count = 0
        self.error = None

    def __call__(self, error, _message) -> None:
        self.count += 1
        if error is not None and self.error is None:
            self.error = error

    def check(self, expected: int) -> None:
        if self.error is not None or self.count != expected:
            raise RuntimeError(f"{self.count} of {expected} records delivered; first error: {self.error}")


def produce_all(producer: Producer, topic: str, values: list[bytes], on_delivery: Delivered) -> None:
    produce, poll = producer.produce, producer.poll
    for value in values:
        try:
            produce(topic, value, on_delivery=on_delivery)
        except BufferError:  # the local queue is full: serve delivery reports, then try again
            poll(0.01)
            produce(topic, value, on_delivery=on_delivery)
    producer.flush(300)


def pykraft_throughput(args: argparse.Namespace, bootstrap: str, topic: str, pids: list[int]) -> dict:
    values = [payload(i) for i in range(args.records)]
    producer = Producer(producer_settings(bootstrap, **{"linger.ms": args.linger_ms,
                                                        "batch.size": args.batch_size}))  # fmt: skip
    warm = Delivered()
    produce_all(producer, topic, [b"warm-up"], warm)
    warm.check(1)
    delivered = Delivered()
    with CpuMeter(pids) as cpu:
        start = time.perf_counter()
        produce_all(producer, topic, values, delivered)
        elapsed = time.perf_counter() - start
    delivered.check(args.records)
    return {
        "records_per_s": args.records / elapsed,
        "mb_per_s": args.records * RECORD_BYTES / elapsed / 1e6,
        "cpu_s_per_million": cpu.total_s / args.records * 1e6,
        "client_cpu_s_per_million": cpu.client_s / args.records * 1e6,
    }


def send_one(producer: Producer, topic: str, value: bytes) -> None:
    """One record, waited for (acks=all): produce, then flush until its delivery report."""
    delivered = Delivered()
    producer.produce(topic, value, on_delivery=delivered)
    producer.flush(30)
    delivered.check(1)


def pykraft_latency(args: argparse.Namespace, bootstrap: str) -> list[float]:
    samples = []
    producer = Producer(producer_settings(bootstrap, **{"linger.ms": 0}))
    for i in range(50):
        send_one(producer, "latency", payload(i))
    for i in range(args.latency_samples):
        start = time.perf_counter()
        send_one(producer, "latency", payload(i))
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def leader_address(bootstrap: str, topic: str, partition: int) -> str:
    metadata = KafkaAdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    leader = metadata.brokers[metadata.topics[topic].partitions[partition].leader]
    return f"{leader.host}:{leader.port}"


def pykraft_breakdown(args: argparse.Namespace, bootstrap: str) -> dict:
    """Round trips of the hops one acks=all produce makes, each measured alone (ms, p50)."""
    address = leader_address(bootstrap, "latency", 0)
    connection = KafkaSocket(address, CALL_TIMEOUT_S, "produce-bench", nodelay=True)
    samples = max(200, args.latency_samples // 2)

    def timed(call) -> float:
        values = []
        for _ in range(samples):
            start = time.perf_counter()
            call()
            values.append((time.perf_counter() - start) * 1000)
        return percentile(values, 0.5)

    def produce(acks: int) -> None:
        data = m.ProduceRequestPartitionProduceData(index=0, records=build_batch([(None, payload(0), (), 0)]))
        topics = [m.ProduceRequestTopicProduceData("latency", [data])]
        request = m.ProduceRequest(acks=acks, timeout_ms=30_000, topic_data=topics)
        response = connection.call(request, PRODUCE_VERSION, CALL_TIMEOUT_S)
        code = response.responses[0].partition_responses[0].error_code
        assert code == 0, f"produce failed with {code}"

    try:
        return {
            "bare_rtt": timed(lambda: connection.call(m.ApiVersionsRequest(), 3, CALL_TIMEOUT_S)),
            "produce_acks_1": timed(lambda: produce(1)),
            "produce_acks_all": timed(lambda: produce(-1)),
        }
    finally:
        connection.close()


def pykraft_end_to_end(args: argparse.Namespace, bootstrap: str) -> list[float]:
    received: dict[int, float] = {}
    ready = threading.Event()
    stop = threading.Event()

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "produce-bench-e2e",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 500})  # fmt: skip
        try:
            consumer.assign([TopicPartition("latency", 0, OFFSET_END)])
            ready.set()
            while not stop.is_set():
                # poll, not consume(n, timeout): consume waits out its timeout unless n records came
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    received[int(message.value()[:INDEX_BYTES])] = time.perf_counter()
        finally:
            consumer.close()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    ready.wait(30)
    producer = Producer(producer_settings(bootstrap, **{"linger.ms": 0}))
    send_one(producer, "latency", payload(0))  # the consumer's position is set at its first fetch
    time.sleep(1.0)  # not a wait for a condition: the consumer's first fetch has no event to wait for
    samples = []
    for i in range(args.latency_samples):
        start = time.perf_counter()
        send_one(producer, "latency", payload(E2E_INDEX + i))
        deadline = time.monotonic() + 10
        while E2E_INDEX + i not in received and time.monotonic() < deadline:
            time.sleep(0.00005)
        if E2E_INDEX + i in received:
            samples.append((received[E2E_INDEX + i] - start) * 1000)
    stop.set()
    thread.join(5)
    return samples


def pykraft_fetch(args: argparse.Namespace, bootstrap: str, pids: list[int]) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "produce-bench-fetch",
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 4 << 20,
                         "fetch.max.bytes": 50 << 20,
                         # not librdkafka's 1,000 ms pause whenever its queue passes 100,000 records
                         # (bench/throughput_bench.py's consumer_settings)
                         "fetch.queue.backoff.ms": 10})  # fmt: skip
    try:
        consumer.assign([TopicPartition("bench-6", p, OFFSET_BEGINNING) for p in range(6)])
        count = 0
        with CpuMeter(pids) as cpu:
            start = time.perf_counter()
            idle = 0
            while count < args.records and idle < 10:
                batch = [x for x in consumer.consume(10_000, 1.0) if x.error() is None]
                count += len(batch)
                idle = 0 if batch else idle + 1
            elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return {
        "records": count,
        "records_per_s": count / elapsed,
        "mb_per_s": count * RECORD_BYTES / elapsed / 1e6,
        "cpu_s_per_million": cpu.total_s / max(count, 1) * 1e6,
    }


# ---- NATS JetStream ----------------------------------------------------------------------------


def ensure_nats_server() -> str:
    path = shutil.which("nats-server")
    if path:
        return path
    print("nats-server is missing: apt-get install -y nats-server", flush=True)
    subprocess.run(["apt-get", "install", "-y", "nats-server"], check=True, capture_output=True)
    path = shutil.which("nats-server")
    if not path:
        raise RuntimeError("apt-get installed nats-server but it is not on PATH")
    return path


def nats_version(binary: str) -> str:
    return subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout.strip()


class NatsCluster:
    def __init__(self, binary: str, work: Path) -> None:
        self.binary = binary
        self.work = work
        # nats-server reports no bound port: picked outside the ephemeral range (proto.runtime.listeners);
        # one another process took makes that server exit (its log, nats-N.log, says so).
        self.client_ports = pick_ports(3)
        self.cluster_ports = pick_ports(3)
        self.procs: list[subprocess.Popen] = []

    @property
    def urls(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.client_ports]

    def start(self) -> None:
        for i in range(3):
            routes = ",".join(f"nats://127.0.0.1:{p}" for j, p in enumerate(self.cluster_ports) if j != i)
            store = self.work / f"nats-{i}"
            store.mkdir(parents=True)
            cmd = [self.binary, "-a", "127.0.0.1", "-p", str(self.client_ports[i]), "-n", f"n{i}", "-js",
                   "-sd", str(store), "--cluster_name", "bench",
                   "--cluster", f"nats://127.0.0.1:{self.cluster_ports[i]}", "--routes", routes]  # fmt: skip
            log = open(self.work / f"nats-{i}.log", "wb")  # noqa: SIM115 - owned by the process
            self.procs.append(
                subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            )
            log.close()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def run_nats(args: argparse.Namespace, work: Path) -> dict:
    binary = ensure_nats_server()
    cluster = NatsCluster(binary, work)
    cluster.start()
    try:
        results = asyncio.run(nats_measure(args, cluster))
        results["version"] = nats_version(binary)
        print(f"nats: {results}", flush=True)
        return results
    finally:
        cluster.stop()


async def nats_connect(cluster: NatsCluster):
    import nats

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            nc = await nats.connect(servers=cluster.urls, connect_timeout=2)
            js = nc.jetstream(timeout=30)
            await js.add_stream(name="BENCH", subjects=["bench"], num_replicas=3, storage="file")
            await js.add_stream(name="LAT", subjects=["lat"], num_replicas=3, storage="file")
            return nc, js
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def nats_measure(args: argparse.Namespace, cluster: NatsCluster) -> dict:
    nc, js = await nats_connect(cluster)
    pids = [p.pid for p in cluster.procs]
    results: dict = {}
    try:
        await js.publish("bench", b"warm-up")
        values = [payload(i) for i in range(args.records)]
        with CpuMeter(pids) as cpu:
            start = time.perf_counter()
            pending: deque = deque()
            for value in values:
                pending.append(await js.publish_async("bench", value))
                if len(pending) >= NATS_WINDOW:
                    await pending.popleft()
            for future in pending:
                await future
            elapsed = time.perf_counter() - start
        results["throughput"] = {
            "records_per_s": args.records / elapsed,
            "mb_per_s": args.records * RECORD_BYTES / elapsed / 1e6,
            "cpu_s_per_million": cpu.total_s / args.records * 1e6,
            "client_cpu_s_per_million": cpu.client_s / args.records * 1e6,
        }
        print(f"nats throughput: {results['throughput']}", flush=True)
        samples = []
        for i in range(50 + args.latency_samples):
            start = time.perf_counter()
            await js.publish("lat", payload(i))
            if i >= 50:
                samples.append((time.perf_counter() - start) * 1000)
        results["latency"] = samples
        results["e2e"] = await nats_end_to_end(args, js)
        results["fetch"] = await nats_fetch(args, js, pids)
    finally:
        await nc.close()
    return results


async def nats_end_to_end(args: argparse.Namespace, js) -> list[float]:
    received: dict[int, float] = {}
    arrived = asyncio.Event()

    async def on_message(msg) -> None:
        received[int(msg.data[:INDEX_BYTES])] = time.perf_counter()
        arrived.set()
        await msg.ack()

    from nats.js.api import DeliverPolicy

    sub = await js.subscribe("lat", cb=on_message, deliver_policy=DeliverPolicy.NEW, manual_ack=True)
    samples = []
    try:
        for i in range(args.latency_samples):
            arrived.clear()
            start = time.perf_counter()
            await js.publish("lat", payload(E2E_INDEX + i))
            deadline = time.monotonic() + 10
            while E2E_INDEX + i not in received and time.monotonic() < deadline:
                arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(arrived.wait(), timeout=1)
            if E2E_INDEX + i in received:
                samples.append((received[E2E_INDEX + i] - start) * 1000)
    finally:
        await sub.unsubscribe()
    return samples


async def nats_fetch(args: argparse.Namespace, js, pids: list[int]) -> dict:
    from nats.js.api import ConsumerConfig, DeliverPolicy

    config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy="none")
    sub = await js.pull_subscribe("bench", durable="reader", config=config)
    count = 0
    with CpuMeter(pids) as cpu:
        start = time.perf_counter()
        while count < args.records:
            try:
                msgs = await sub.fetch(1000, timeout=5)
            except TimeoutError:
                break
            count += len(msgs)
        elapsed = time.perf_counter() - start
    return {
        "records": count,
        "records_per_s": count / elapsed,
        "mb_per_s": count * RECORD_BYTES / elapsed / 1e6,
        "cpu_s_per_million": cpu.total_s / max(count, 1) * 1e6,
    }


# ---- report -----------------------------------------------------------------------------------------


def machine_info() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cpus, Linux {platform.release()}, Python {platform.python_version()}, load {load}"
    )


def report(args: argparse.Namespace, ours: dict, nats: dict) -> None:
    print()
    print(f"machine: {machine_info()}")
    print(f"nats: {nats['version']}, 3 nodes, stream R3 file storage, publish_async window {NATS_WINDOW}")
    print(f"pykraft: 3 controllers + 3 brokers (LocalCluster defaults), RF=3, min.insync.replicas=2; "
          f"confluent-kafka {confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]}): "
          f"acks=all, idempotence on, linger.ms={args.linger_ms}, batch.size={args.batch_size}")  # fmt: skip
    print(f"workload: {args.records:,} x {RECORD_BYTES}-byte records; latency {args.latency_samples} samples")
    print()
    print("| figure | pykraft | NATS JetStream | ratio |")
    print("|---|---|---|---|")
    nt = nats["throughput"]
    for partitions in (1, 6):
        t = ours[f"throughput_{partitions}"]
        ratio = t["records_per_s"] / nt["records_per_s"]
        verdict = "MET" if ratio >= 10 else "MISSED"
        print(f"| producer records/s, {partitions} partition(s) | {t['records_per_s']:,.0f} | "
              f"{nt['records_per_s']:,.0f} | {ratio:.2f}x (target >= 10x: {verdict}) |")  # fmt: skip
        print(f"| producer MB/s, {partitions} partition(s) | {t['mb_per_s']:.1f} | {nt['mb_per_s']:.1f} | |")
        print(f"| CPU s per million records, {partitions} partition(s) (client + servers) | "
              f"{t['cpu_s_per_million']:.1f} (client {t['client_cpu_s_per_million']:.1f}) | "
              f"{nt['cpu_s_per_million']:.1f} (client {nt['client_cpu_s_per_million']:.1f}) | |")  # fmt: skip
    p50, n50 = percentile(ours["latency"], 0.5), percentile(nats["latency"], 0.5)
    verdict = "MET" if p50 <= 3 * n50 else "MISSED"
    print(f"| one-at-a-time latency p50 ms | {p50:.2f} | {n50:.2f} | "
          f"{p50 / n50:.2f}x (target <= 3x: {verdict}) |")  # fmt: skip
    print(f"| one-at-a-time latency p99 ms | {percentile(ours['latency'], 0.99):.2f} | "
          f"{percentile(nats['latency'], 0.99):.2f} | |")  # fmt: skip
    for q in (0.5, 0.99):
        print(f"| end-to-end latency p{int(q * 100)} ms | {percentile(ours['e2e'], q):.2f} | "
              f"{percentile(nats['e2e'], q):.2f} | |")  # fmt: skip
    of, nf = ours["fetch"], nats["fetch"]
    print(f"| consumer fetch records/s (from the beginning) | {of['records_per_s']:,.0f} | "
          f"{nf['records_per_s']:,.0f} | {of['records_per_s'] / nf['records_per_s']:.2f}x |")  # fmt: skip
    print(f"| consumer fetch MB/s | {of['mb_per_s']:.1f} | {nf['mb_per_s']:.1f} | |")
    print(f"| fetch CPU s per million records (client + servers) | {of['cpu_s_per_million']:.1f} | "
          f"{nf['cpu_s_per_million']:.1f} | |")  # fmt: skip
    b = ours["breakdown"]
    print()
    print("pykraft one-record acks=all latency, hop by hop (p50 ms, each hop measured alone):")
    print(f"- bare Kafka-protocol round trip to the leader (ApiVersions): {b['bare_rtt']:.2f}")
    print(f"- raw Produce acks=1 (+ validate, append to the leader's log): {b['produce_acks_1']:.2f} "
          f"(+{b['produce_acks_1'] - b['bare_rtt']:.2f})")  # fmt: skip
    print(f"- raw Produce acks=all (+ followers fetch it, the leader's HW passes it, purgatory completes): "
          f"{b['produce_acks_all']:.2f} (+{b['produce_acks_all'] - b['produce_acks_1']:.2f})")  # fmt: skip
    print(f"- confluent-kafka produce() + flush() (+ its queue, broker thread, delivery report): {p50:.2f} "
          f"(+{p50 - b['produce_acks_all']:.2f})")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--latency-samples", type=int, default=1000)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256 * 1024)
    parser.add_argument("--skip-nats", action="store_true", help="measure pykraft only (no comparison)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="produce-bench-") as tmp:
        ours = run_pykraft(args, Path(tmp))
        if args.skip_nats:
            return 0
        nats = run_nats(args, Path(tmp))
    report(args, ours, nats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
