"""One-record latency, pykraft vs NATS JetStream in one run (issue 16 §5), with the hop-by-hop table.

    ./dev bench replication_latency_bench [--samples 2000] [--e2e-samples 1000] [--rounds 4]

Starts a pykraft LocalCluster (3 controllers + 3 brokers) and a 3-node NATS JetStream cluster
(``nats-server`` from Debian, installed with apt-get when missing; nats-py client) side by side on
127.0.0.1, and measures both in alternating blocks (``--rounds`` of each kind, pykraft then JetStream),
so that both columns see the same machine load; every process it starts is stopped by pid.
100-byte records:

1. one-record acks=all latency: pykraft — a confluent-kafka producer (acks=all, idempotence on,
   linger.ms=0, socket.nagle.disable) on a 1-partition topic with RF 3 and min.insync.replicas=2:
   ``produce`` then ``poll`` until its delivery report; JetStream — ``await js.publish`` on an R3
   file-storage stream. p50/p99 against the targets (p50 <= 2x, p99 <= 3x JetStream's);
2. end-to-end latency: from ``produce``/``publish`` to the moment a consumer in this process returns
   the record (a confluent-kafka consumer assigned to the partition / a JetStream push consumer).
   p50 against the target (<= 3x JetStream's);
3. CPU per record of each process in the one-record blocks (``/proc/<pid>/task/*/schedstat``:
   nanoseconds on a CPU, all threads; this process by ``time.process_time``), less each process's idle
   CPU over the same time (measured for 2 s with nothing in flight): a figure the machine's load
   changes far less than the latencies;
4. the hop-by-hop table of pykraft's acks=all produce: the brokers run with
   ``PYKRAFT_LATENCY_TRACE`` (``proto.runtime.latency_trace``: CLOCK_MONOTONIC timestamps kept in memory,
   written at exit), and each step's time since ``produce`` is taken per sample and its p50 shown.

The machine is shared: read the ratios of one run, and the load average printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import confluent_kafka  # noqa: E402
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient as KafkaAdminClient  # noqa: E402
from produce_bench import NatsCluster, ensure_nats_server, nats_version  # noqa: E402

from proto.runtime.latency_trace import TRACE_ENV  # noqa: E402
from pykraft.admin import AdminClient  # noqa: E402
from pykraft.cluster import LocalCluster  # noqa: E402

RECORD_BYTES = 100
INDEX_BYTES = 20
WARM_UP = 200
IDLE_S = 2.0  # the idle CPU of every process is measured over this long, with no request in flight
START_TIMEOUT_S = 90.0
TOPIC = "latency"
SUBJECT = "lat"
E2E_FIRST_INDEX = 10_000_000  # end-to-end samples are numbered from here: never taken for another record
TARGET_P50_RATIO = 2.0
TARGET_P99_RATIO = 3.0
TARGET_E2E_P50_RATIO = 3.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def payload(i: int) -> bytes:
    head = b"%020d" % i
    return head + b"x" * (RECORD_BYTES - len(head))


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_ns(pid: int) -> int:
    """Nanoseconds on a CPU of every thread of ``pid`` (0 once it is gone)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total


@dataclass
class CpuAccount:
    """CPU nanoseconds per process name, summed over the measured blocks, less what each process spends
    idle over the same wall time (heartbeats, the metadata log, timers: ``idle_ns_per_s``, measured with
    no request in flight), so that what is left is the requests' own CPU."""

    pids: dict[str, int]
    ns: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    wall_ns: int = 0
    idle_ns_per_s: dict[str, float] = field(default_factory=dict)

    def snapshot(self) -> dict[str, int]:
        out = {name: cpu_ns(pid) for name, pid in self.pids.items()}
        out["client"] = time.process_time_ns()
        out["wall"] = time.monotonic_ns()
        return out

    def set_idle(self, before: dict[str, int], after: dict[str, int]) -> None:
        seconds = (after["wall"] - before["wall"]) / 1e9
        self.idle_ns_per_s = {name: (after[name] - before[name]) / seconds for name in self.pids}

    def add(self, before: dict[str, int], after: dict[str, int]) -> None:
        self.wall_ns += after["wall"] - before["wall"]
        for name, value in after.items():
            if name != "wall":
                self.ns[name] += value - before[name]

    def per_request_us(self, requests: int) -> dict[str, float]:
        seconds = self.wall_ns / 1e9
        return {name: (ns - self.idle_ns_per_s.get(name, 0.0) * seconds) / requests / 1000
                for name, ns in self.ns.items()}  # fmt: skip


@dataclass
class Side:
    """What one system measured."""

    one_record_ms: list[float] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)
    windows_ns: list[tuple[int, int]] = field(default_factory=list)  # (start, end) of each one-record sample
    cpu: CpuAccount | None = None


# ---- pykraft ------------------------------------------------------------------------------------


class Pykraft:
    def __init__(self, work: Path) -> None:
        self.cluster = LocalCluster(work / "pykraft", controllers=3, brokers=3)
        self.cluster.data_dir.mkdir(parents=True)
        self.cluster.plan()
        self.trace_dir = work / "trace"
        self.trace_dir.mkdir()

    def start(self) -> None:
        cluster = self.cluster
        os.environ[TRACE_ENV] = str(self.trace_dir)  # the brokers inherit it
        try:
            cluster.start()
        finally:
            del os.environ[TRACE_ENV]
        cluster.wait_until(lambda: all(cluster.healthy(n) for n in cluster.nodes), START_TIMEOUT_S,
                           "pykraft up")  # fmt: skip
        with AdminClient(cluster.controller_addresses, timeout_s=60) as admin:
            admin.create_topic(TOPIC, num_partitions=1, replication_factor=3,
                               configs={"min.insync.replicas": "2"})  # fmt: skip
        self.bootstrap = cluster.kafka_bootstrap
        deadline = time.monotonic() + 60
        while not self._in_sync():
            if time.monotonic() > deadline:
                raise RuntimeError("the latency topic has no leader with 3 in-sync replicas after 60 s")
            time.sleep(0.1)
        self.producer = Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 0, "socket.nagle.disable": True,
        })  # fmt: skip

    def _in_sync(self) -> bool:
        metadata = KafkaAdminClient({"bootstrap.servers": self.bootstrap}).list_topics(TOPIC, timeout=5)
        topic = metadata.topics.get(TOPIC)
        if topic is None or topic.error is not None or 0 not in topic.partitions:
            return False
        partition = topic.partitions[0]
        self.leader_id = partition.leader
        return partition.leader >= 0 and len(partition.isrs) == 3

    def broker_pids(self) -> dict[str, int]:
        return {spec.name: spec.pid for spec in self.cluster.broker_nodes}

    def controller_pids(self) -> dict[str, int]:
        return {spec.name: spec.pid for spec in self.cluster.controller_nodes}

    def send_one(self, index: int) -> None:
        done: list[object] = []
        self.producer.produce(TOPIC, payload(index), on_delivery=lambda err, _msg: done.append(err))
        deadline = time.monotonic() + 30
        while not done:
            self.producer.poll(1.0)
            if time.monotonic() > deadline:
                raise RuntimeError("no delivery report within 30 s")
        if done != [None]:
            raise RuntimeError(f"record {index} not delivered: {done[0]}")

    def one_record(self, side: Side, first: int, count: int) -> None:
        for i in range(first, first + count):
            start = time.monotonic_ns()
            self.send_one(i)
            end = time.monotonic_ns()
            side.windows_ns.append((start, end))
            side.one_record_ms.append((end - start) / 1e6)

    def consumer_ready(self) -> None:
        """Start the end-to-end consumer (only now: its long-polling fetches must not be answered during
        the one-record blocks). Its position is set at its first fetch: send markers until one arrives."""
        self.consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": "latency-bench", "enable.auto.commit": False,
            "socket.nagle.disable": True,
        })  # fmt: skip
        self.consumer.assign([TopicPartition(TOPIC, 0, OFFSET_END)])
        deadline = time.monotonic() + 60
        marker = E2E_FIRST_INDEX - 1
        while time.monotonic() < deadline:
            self.send_one(marker)
            until = time.monotonic() + 1.0
            while time.monotonic() < until:
                message = self.consumer.poll(0.1)
                if message is not None and message.error() is None:
                    return
        raise RuntimeError("the end-to-end consumer received nothing within 60 s")

    def end_to_end(self, side: Side, first: int, count: int) -> None:
        for i in range(first, first + count):
            start = time.monotonic_ns()
            self.producer.produce(TOPIC, payload(i))
            end = self._receive(i)
            side.e2e_ms.append((end - start) / 1e6)
            self.producer.flush(30)  # its delivery report, outside the timed part

    def _receive(self, index: int) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = self.consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                raise RuntimeError(f"consumer error: {message.error()}")
            if int(message.value()[:INDEX_BYTES]) == index:
                return time.monotonic_ns()
        raise RuntimeError(f"record {index} did not reach the consumer within 30 s")

    def stop(self) -> None:
        if hasattr(self, "consumer"):
            self.consumer.close()
        if hasattr(self, "producer"):
            self.producer.flush(10)
            del self.producer  # librdkafka's threads stop before the brokers do (no reconnect noise)
        self.cluster.down(timeout_s=15)
        for spec in self.cluster.nodes:
            self.cluster.kill_node(spec)


# ---- NATS JetStream -------------------------------------------------------------------------------


async def _ignore_error(_exc: Exception) -> None:
    pass


class JetStream:
    def __init__(self, work: Path) -> None:
        self.binary = ensure_nats_server()
        self.cluster = NatsCluster(self.binary, work / "nats")
        self.received: dict[int, int] = {}
        self.arrived = asyncio.Event()

    async def start(self) -> None:
        import nats

        self.cluster.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                # error_cb: the servers are still starting; the loop retries, without a traceback each time
                self.nc = await nats.connect(servers=self.cluster.urls, connect_timeout=2,
                                             error_cb=_ignore_error)  # fmt: skip
                self.js = self.nc.jetstream(timeout=30)
                await self.js.add_stream(name="LAT", subjects=[SUBJECT], num_replicas=3, storage="file")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def subscribe(self) -> None:
        """The end-to-end consumer: a push consumer from the next message on (made after the one-record
        blocks, so that those do not pay for deliveries)."""
        from nats.js.api import DeliverPolicy

        self.sub = await self.js.subscribe(SUBJECT, cb=self._on_message, deliver_policy=DeliverPolicy.NEW,
                                           manual_ack=True)  # fmt: skip

    async def _on_message(self, msg) -> None:
        self.received[int(msg.data[:INDEX_BYTES])] = time.monotonic_ns()
        self.arrived.set()
        await msg.ack()

    def pids(self) -> dict[str, int]:
        return {f"nats-{i}": proc.pid for i, proc in enumerate(self.cluster.procs)}

    async def one_record(self, side: Side, first: int, count: int) -> None:
        for i in range(first, first + count):
            start = time.monotonic_ns()
            await self.js.publish(SUBJECT, payload(i))
            end = time.monotonic_ns()
            side.windows_ns.append((start, end))
            side.one_record_ms.append((end - start) / 1e6)

    async def end_to_end(self, side: Side, first: int, count: int) -> None:
        for i in range(first, first + count):
            start = time.monotonic_ns()
            await self.js.publish(SUBJECT, payload(i))
            deadline = time.monotonic() + 30
            while i not in self.received:
                self.arrived.clear()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"message {i} did not reach the JetStream consumer within 30 s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.arrived.wait(), timeout=1.0)
            side.e2e_ms.append((self.received.pop(i) - start) / 1e6)

    async def stop(self) -> None:
        if hasattr(self, "nc"):
            await self.nc.close()
        self.cluster.stop()


# ---- the run --------------------------------------------------------------------------------------


async def measure(args: argparse.Namespace, kafka: Pykraft, nats: JetStream) -> tuple[Side, Side]:
    ours, theirs = Side(), Side()
    await nats.start()
    # pykraft's side is synchronous (confluent-kafka): it runs in a thread, so that the JetStream
    # client's event loop keeps serving its connection meanwhile.
    await asyncio.to_thread(kafka.start)
    ours.cpu = CpuAccount({**kafka.broker_pids(), **kafka.controller_pids()})
    theirs.cpu = CpuAccount(nats.pids())
    warm = Side()
    await asyncio.to_thread(kafka.one_record, warm, 0, WARM_UP)
    await nats.one_record(warm, 0, WARM_UP)
    idle = ours.cpu.snapshot(), theirs.cpu.snapshot()
    await asyncio.sleep(IDLE_S)
    ours.cpu.set_idle(idle[0], ours.cpu.snapshot())
    theirs.cpu.set_idle(idle[1], theirs.cpu.snapshot())
    per_round = max(1, args.samples // args.rounds)
    for r in range(args.rounds):
        first = WARM_UP + r * per_round
        before = ours.cpu.snapshot()
        await asyncio.to_thread(kafka.one_record, ours, first, per_round)
        ours.cpu.add(before, ours.cpu.snapshot())
        before = theirs.cpu.snapshot()
        await nats.one_record(theirs, first, per_round)
        theirs.cpu.add(before, theirs.cpu.snapshot())
        print(f"round {r + 1}/{args.rounds}: one-record p50 pykraft {percentile(ours.one_record_ms, 0.5):.2f}"
              f" ms, JetStream {percentile(theirs.one_record_ms, 0.5):.2f} ms; load {load_average()}",
              flush=True)  # fmt: skip
    await asyncio.to_thread(kafka.consumer_ready)
    await nats.subscribe()
    per_round = max(1, args.e2e_samples // args.rounds)
    for r in range(args.rounds):
        first = E2E_FIRST_INDEX + r * per_round
        await asyncio.to_thread(kafka.end_to_end, ours, first, per_round)
        await nats.end_to_end(theirs, first, per_round)
        print(f"round {r + 1}/{args.rounds}: end-to-end p50 pykraft {percentile(ours.e2e_ms, 0.5):.2f} ms, "
              f"JetStream {percentile(theirs.e2e_ms, 0.5):.2f} ms; load {load_average()}",
              flush=True)  # fmt: skip
    return ours, theirs


async def run(args: argparse.Namespace, work: Path) -> tuple[Side, Side, Pykraft]:
    kafka = Pykraft(work)
    nats = JetStream(work)
    try:
        ours, theirs = await measure(args, kafka, nats)
    finally:
        await nats.stop()
        kafka.stop()  # the brokers write their traces as they exit
    return ours, theirs, kafka


# ---- the hop-by-hop table ---------------------------------------------------------------------------


def read_traces(trace_dir: Path, pid_names: dict[int, str]) -> dict[str, list[tuple[int, str, str]]]:
    """Events by broker name, in time order."""
    out: dict[str, list[tuple[int, str, str]]] = {}
    for path in trace_dir.glob("trace-*.tsv"):
        name = pid_names.get(int(path.stem.split("-")[1]))
        if name is None:
            continue
        events = []
        for line in path.read_text().splitlines():
            ns, event, detail = line.split("\t", 2)
            events.append((int(ns), event, detail))
        events.sort()
        out[name] = events
    return out


def first_after(events: list[tuple[int, str, str]], after_ns: int, until_ns: int, name: str,
                detail_prefix: str = "") -> int | None:  # fmt: skip
    import bisect

    i = bisect.bisect_right(events, (after_ns, "\uffff", ""))
    while i < len(events) and events[i][0] <= until_ns:
        ns, event, detail = events[i]
        if event == name and detail.startswith(detail_prefix):
            return ns
        i += 1
    return None


def hop_table(side: Side, kafka: Pykraft) -> list[tuple[str, float, str]] | None:
    """(step, p50 ms since produce, what happened in between) of the acks=all path, or None without
    traces (a broker killed before it could write its trace)."""
    names = {spec.pid: spec.name for spec in kafka.cluster.broker_nodes}
    traces = read_traces(kafka.trace_dir, names)
    leader_name = f"broker-{kafka.leader_id}"
    if leader_name not in traces or len(traces) < 3:
        return None
    leader = traces[leader_name]
    followers = {n: ev for n, ev in traces.items() if n != leader_name}
    steps: dict[str, list[float]] = defaultdict(list)
    for start, end in side.windows_ns:
        row = _sample_steps(start, end, leader, followers)
        if row is not None:
            for key, ns in row.items():
                steps[key].append((ns - start) / 1e6)
    if not steps:
        return None
    p50 = {key: statistics.median(values) for key, values in steps.items()}
    client_p50 = statistics.median((e - s) / 1e6 for s, e in side.windows_ns)
    return [
        ("leader: Produce received (frame parsed)", p50["produce_in"], "client -> leader"),
        ("leader: appended, parked follower fetches completed", p50["appended"],
         "validate, append, wake the parked fetches"),
        ("leader: fetch answers encoded (first / second follower)",
         (p50["answer_out_1"], p50["answer_out_2"]), "read the batch, encode the answers"),
        ("follower: answer received", (p50["follower_in_1"], p50["follower_in_2"]), "leader -> follower"),
        ("follower: appended, next fetch sent (its new LEO)",
         (p50["follower_sent_1"], p50["follower_sent_2"]), "parse, append, encode the next request"),
        ("leader: next fetch received", (p50["fetch_in_1"], p50["fetch_in_2"]), "follower -> leader"),
        ("leader: HW advanced, produce completed", p50["hw"],
         "the second follower's fetch moves the HW (acks=all waits for the whole ISR)"),
        ("leader: Produce answer encoded", p50["produce_out"], ""),
        ("client: delivery report served", client_p50, "leader -> client, librdkafka's threads"),
    ]  # fmt: skip


def _sample_steps(start: int, end: int, leader: list, followers: dict[str, list]) -> dict[str, int] | None:
    produce_in = first_after(leader, start, end, "request_in", "Produce")
    appended = first_after(leader, start, end, "produce_appended")
    produce_out = first_after(leader, start, end, "response_out", "Produce")
    if produce_in is None or appended is None or produce_out is None:
        return None
    per_follower = []
    for name, events in followers.items():
        replica = name.split("-")[1]
        out = first_after(leader, appended, end, "response_out", f"Fetch replica-fetcher-{replica}")
        got = first_after(events, appended, end, "response_in", "1 ")
        sent = first_after(events, appended, end, "request_sent", "1 ")
        fetch_in = None if sent is None else first_after(
            leader, sent, end, "request_in", f"Fetch replica-fetcher-{replica}")  # fmt: skip
        handled = None if fetch_in is None else first_after(
            leader, fetch_in, end, "follower_fetch_handled", f"{replica} ")  # fmt: skip
        if None in (out, got, sent, fetch_in, handled):
            return None
        per_follower.append((fetch_in, out, got, sent, handled))
    per_follower.sort()  # first / second by when their next fetch reached the leader
    row = {"produce_in": produce_in, "appended": appended, "produce_out": produce_out,
           "hw": per_follower[-1][4]}  # fmt: skip
    for n, (fetch_in, out, got, sent, _handled) in enumerate(per_follower, 1):
        row.update({f"fetch_in_{n}": fetch_in, f"answer_out_{n}": out, f"follower_in_{n}": got,
                    f"follower_sent_{n}": sent})  # fmt: skip
    return row


# ---- report ---------------------------------------------------------------------------------------


def verdict(ratio: float, target: float) -> str:
    return f"{ratio:.2f}x (target <= {target:g}x: {'MET' if ratio <= target else 'MISSED'})"


def report(args: argparse.Namespace, ours: Side, theirs: Side, kafka: Pykraft, nats_binary: str,
           load_before: str) -> None:  # fmt: skip
    print()
    print(f"machine: {os.cpu_count()} cpus, Linux {platform.release()}, Python {platform.python_version()}; "
          f"load average before {load_before}, after {load_average()}")  # fmt: skip
    print(f"pykraft: 3 controllers + 3 brokers, topic RF 3, min.insync.replicas=2; confluent-kafka "
          f"{confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]}): acks=all, "
          f"idempotence on, linger.ms=0, socket.nagle.disable=true")  # fmt: skip
    print(f"JetStream: {nats_version(nats_binary)}, 3 nodes, stream R3 file storage, nats-py")
    print(f"{len(ours.one_record_ms)} one-record and {len(ours.e2e_ms)} end-to-end samples per side, "
          f"100-byte records, {args.rounds} alternating rounds")  # fmt: skip
    print()
    print("| figure | pykraft | NATS JetStream | ratio |")
    print("|---|---|---|---|")
    rows = [
        ("one-record latency p50 ms", ours.one_record_ms, theirs.one_record_ms, 0.5, TARGET_P50_RATIO),
        ("one-record latency p99 ms", ours.one_record_ms, theirs.one_record_ms, 0.99, TARGET_P99_RATIO),
        ("end-to-end latency p50 ms", ours.e2e_ms, theirs.e2e_ms, 0.5, TARGET_E2E_P50_RATIO),
        ("end-to-end latency p99 ms", ours.e2e_ms, theirs.e2e_ms, 0.99, None),
    ]
    verdicts = []
    for label, a, b, q, target in rows:
        x, y = percentile(a, q), percentile(b, q)
        ratio = f"{x / y:.2f}x" if target is None else verdict(x / y, target)
        print(f"| {label} | {x:.2f} | {y:.2f} | {ratio} |")
        if target is not None:
            verdicts.append(f"{label.removesuffix(' ms')} {'MET' if x / y <= target else 'MISSED'}")
    samples = len(ours.one_record_ms)
    assert ours.cpu is not None and theirs.cpu is not None
    for label, side in (("pykraft", ours), ("JetStream", theirs)):
        assert side.cpu is not None
        per_request = side.cpu.per_request_us(samples)
        parts = ", ".join(f"{name} {us:.0f}" for name, us in sorted(per_request.items()))
        print(f"| {label}: CPU us per one-record produce, idle CPU subtracted "
              f"(all processes: {sum(per_request.values()):.0f}) | {parts} | | |")  # fmt: skip
    print()
    print("verdict (issue 16 §5): " + "; ".join(verdicts))
    table = hop_table(ours, kafka)
    print()
    if table is None:
        print("hop-by-hop table: no complete trace (a broker did not write its trace at exit)")
        return
    print("pykraft one-record acks=all, hop by hop (p50 ms since produce() over the samples; "
          "proto.runtime.latency_trace timestamps):")
    print()
    print("| step | p50 ms | hop |")
    print("|---|---|---|")
    for step, value, hop in table:
        shown = " / ".join(f"{v:.3f}" for v in value) if isinstance(value, tuple) else f"{value:.3f}"
        print(f"| {step} | {shown} | {hop} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=2000, help="one-record samples per side")
    parser.add_argument("--e2e-samples", type=int, default=1000, help="end-to-end samples per side")
    parser.add_argument("--rounds", type=int, default=4, help="alternating blocks per measurement")
    args = parser.parse_args()
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="latency-bench-") as tmp:
        ours, theirs, kafka = asyncio.run(run(args, Path(tmp)))
        report(args, ours, theirs, kafka, ensure_nats_server(), load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
