"""Consumer-group coordinator: rebalance time and offset commits/s, with baselines from the same run.

    .venv/bin/python bench/group_bench.py [--members 10] [--partitions 100] [--rounds 5] [--commits 400]

One pykraft cluster (3 controllers + 3 brokers, started and stopped by pid by this script). The group
members are simulated with raw Kafka requests (the generated codec of proto/kafka over
``broker.follower.kafka_client.KafkaConnection``, one connection each, in this process): each joins (JoinGroup
v5, KIP-394 member id), the leader computes a range assignment of the topic's partitions (Kafka's
ConsumerProtocolSubscription / ConsumerProtocolAssignment v0 bytes), all sync,
then heartbeat every ``--heartbeat-ms`` and rejoin when told REBALANCE_IN_PROGRESS, as Kafka's
consumer does. This measures the coordinator's part of a rebalance; a real consumer adds its own
revoke/assign callbacks and fetch restarts.

- **Rebalance time after a leave**: a Stable group of ``--members`` members owning ``--partitions``
  partitions; one member sends LeaveGroup; the time until every remaining member holds an assignment
  of the new generation and together they own every partition exactly once. Members learn of the
  rebalance from a heartbeat, so up to one heartbeat interval is part of it (Kafka's default
  heartbeat.interval.ms is 3 s; here 100 ms). Each round then adds a member back (not timed).
- **The same with real consumers**: ``--members`` confluent-kafka (librdkafka) consumers over the
  brokers' Kafka listeners (eager ``range`` assignor, the same heartbeat and session settings), each
  polled by its own thread in this process; one closes (LeaveGroup); the time until the others'
  assignments cover every partition exactly once, counted from their ``on_assign`` callbacks after
  the close. This adds the client's share: its heartbeat thread, JoinGroup/SyncGroup across polls,
  revoke/assign. (Since issue 16 §3; before, pykraft's own gRPC ``Consumer``. Since issue 16 §4 the
  simulated members speak the Kafka protocol too; before, the gRPC GroupService.)
- **Rebalance time after a crash**: the same, but the member just stops (no LeaveGroup): the
  session timeout (``--session-ms``) dominates.
- **Offset commits/s**: a member of the Stable group commits one partition's offset per request
  (generation-fenced, appended to ``__consumer_offsets`` with acks=all, RF=3). Baselines in the same
  run: a Heartbeat round trip (the same listener, no append) and a raw acks=all Produce of a batch of
  the same bytes to an RF=3 partition led by the coordinator's broker. One at a time, the three calls
  alternate call by call (each sees the same load; rate = calls / summed latency, and the p50
  latency); with 16 in flight, blocks of each call in an order rotated between ``REPEATS`` repeats
  (the median). Each round of the rebalance prints its two phases: the last JoinGroup answer (the
  members noticed through a heartbeat and rejoined) and the last SyncGroup answer (the leader's
  assignment stored with acks=all, then handed out).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer  # noqa: E402

from broker.follower.kafka_client import KafkaConnection  # noqa: E402
from broker.group.metadata import OffsetAndMetadata, OffsetCommitRecord  # noqa: E402
from broker.group.record_serde import encode_batch  # noqa: E402
from proto.errors import ErrorCode  # noqa: E402
from proto.kafka import messages as m  # noqa: E402
from pykraft.admin import AdminClient  # noqa: E402
from pykraft.cluster import LocalCluster  # noqa: E402
from tests.kafka_call import assigned_partitions, consumer_assignment, consumer_subscription  # noqa: E402

TOPIC = "group-bench"
PRODUCE_TOPIC = "group-bench-produce"
GROUP = "bench-group"
START_TIMEOUT_S = 90.0
WAIT_S = 60.0
REPEATS = 3
CALL_TIMEOUT_S = 60.0
JOIN_DEADLINE_S = 120.0  # a member that cannot join by then fails the run (no endless retry)
RETRY_BACKOFF_S = 0.05  # before asking again after an error that is not a protocol instruction
JOIN_INSTRUCTIONS = frozenset({ErrorCode.MEMBER_ID_REQUIRED, ErrorCode.UNKNOWN_MEMBER_ID,
                               ErrorCode.REBALANCE_IN_PROGRESS})  # answered at once by joining again
JOIN_VERSION, SYNC_VERSION, HEARTBEAT_VERSION, LEAVE_VERSION = 5, 3, 3, 3
COMMIT_VERSION, FIND_VERSION, PRODUCE_VERSION = 7, 3, 7
OVERRIDES = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "300",
    "group.min.session.timeout.ms": "500",
    "group.initial.rebalance.delay.ms": "300",
    "offsets.topic.num.partitions": "3",
}


def machine_info() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cpus, Linux {platform.release()}, Python {platform.python_version()}, load {load}"
    )


def range_assignment(members: list[str], partitions: int) -> dict[str, list[int]]:
    ordered = sorted(members)
    share, extra = divmod(partitions, len(ordered))
    out, start = {}, 0
    for index, member in enumerate(ordered):
        count = share + (1 if index < extra else 0)
        out[member] = list(range(start, start + count))
        start += count
    return out


async def connect(address: str) -> KafkaConnection:
    host, port = address.rsplit(":", 1)
    return await KafkaConnection.open(host, int(port), "bench", CALL_TIMEOUT_S)


class Member:
    """One simulated consumer: join, (lead and) sync, heartbeat, rejoin on REBALANCE_IN_PROGRESS."""

    def __init__(self, address: str, partitions: int, session_ms: int, heartbeat_ms: int) -> None:
        self.address = address
        self.conn: KafkaConnection | None = None
        self.partitions, self.session_ms, self.heartbeat_ms = partitions, session_ms, heartbeat_ms
        self.member_id = ""
        self.generation = -1
        self.assignment: list[int] = []
        self.joined_at = self.synced_at = 0.0  # perf_counter of the last JoinGroup / SyncGroup answer
        self.task: asyncio.Task | None = None

    async def call(self, request, version: int):
        if self.conn is None or self.conn.closed:
            self.conn = await connect(self.address)
        return await self.conn.request(request, version, CALL_TIMEOUT_S)

    async def join_and_sync(self) -> None:
        deadline = time.monotonic() + JOIN_DEADLINE_S
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError(f"member {self.member_id or '(new)'} did not join {GROUP} within "
                                   f"{JOIN_DEADLINE_S:.0f} s")  # fmt: skip
            request = m.JoinGroupRequest(
                group_id=GROUP, session_timeout_ms=self.session_ms, rebalance_timeout_ms=30_000,
                member_id=self.member_id, protocol_type="consumer",
                protocols=[m.JoinGroupRequestProtocol(name="range", metadata=consumer_subscription(TOPIC))],
            )  # fmt: skip
            joined = await self.call(request, JOIN_VERSION)
            code = joined.error_code
            if code in (ErrorCode.MEMBER_ID_REQUIRED, ErrorCode.NONE):
                self.member_id = joined.member_id
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            if code != ErrorCode.NONE:
                if code not in JOIN_INSTRUCTIONS:  # e.g. COORDINATOR_NOT_AVAILABLE: ask again shortly
                    await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            self.joined_at = time.perf_counter()
            assignments = []
            if joined.leader == self.member_id:
                plan = range_assignment([x.member_id for x in joined.members], self.partitions)
                assignments = [
                    m.SyncGroupRequestAssignment(member_id=member, assignment=consumer_assignment(TOPIC, ps))
                    for member, ps in plan.items()
                ]
            synced = await self.call(
                m.SyncGroupRequest(group_id=GROUP, generation_id=joined.generation_id,
                                   member_id=self.member_id, assignments=assignments),
                SYNC_VERSION,
            )  # fmt: skip
            if synced.error_code != ErrorCode.NONE:
                if synced.error_code != ErrorCode.REBALANCE_IN_PROGRESS:
                    await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            self.assignment = assigned_partitions(bytes(synced.assignment))
            self.generation = joined.generation_id
            self.synced_at = time.perf_counter()
            return

    def heartbeat_request(self) -> m.HeartbeatRequest:
        return m.HeartbeatRequest(group_id=GROUP, generation_id=self.generation, member_id=self.member_id)

    async def run(self) -> None:
        await self.join_and_sync()
        while True:
            await asyncio.sleep(self.heartbeat_ms / 1000)
            code = (await self.call(self.heartbeat_request(), HEARTBEAT_VERSION)).error_code
            if code != ErrorCode.NONE:
                if code != ErrorCode.REBALANCE_IN_PROGRESS:
                    self.member_id = "" if code == ErrorCode.UNKNOWN_MEMBER_ID else self.member_id
                await self.join_and_sync()

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def crash(self) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        if self.conn is not None:
            await self.conn.close()

    async def leave(self) -> None:
        await self.crash()
        conn = await connect(self.address)
        try:
            leave = m.LeaveGroupRequest(
                group_id=GROUP, members=[m.LeaveGroupRequestMemberIdentity(member_id=self.member_id)]
            )
            await conn.request(leave, LEAVE_VERSION, CALL_TIMEOUT_S)
        finally:
            await conn.close()


def settled(members: list[Member], partitions: int, after_generation: int) -> bool:
    if any(m.generation <= after_generation for m in members):
        return False
    if len({m.generation for m in members}) != 1:
        return False
    owned = [p for m in members for p in m.assignment]
    return sorted(owned) == list(range(partitions))


async def wait_settled(members: list[Member], partitions: int, after_generation: int) -> float:
    start = time.perf_counter()
    while not settled(members, partitions, after_generation):
        if time.perf_counter() - start > WAIT_S:
            gens = sorted({m.generation for m in members})
            raise TimeoutError(f"group did not settle past generation {after_generation}: generations {gens}")
        await asyncio.sleep(0.002)
    return time.perf_counter() - start


async def rebalances(address: str, args: argparse.Namespace, crash: bool, rounds: int) -> list[float]:
    members = [
        Member(address, args.partitions, args.session_ms, args.heartbeat_ms) for _ in range(args.members)
    ]
    for member in members:
        member.start()
    await wait_settled(members, args.partitions, 0)
    times = []
    for _ in range(rounds):
        generation = members[0].generation
        victim = members.pop()
        started = time.perf_counter()
        await (victim.crash() if crash else victim.leave())
        await wait_settled(members, args.partitions, generation)
        times.append(time.perf_counter() - started)
        joined, synced = max(m.joined_at for m in members), max(m.synced_at for m in members)
        print(
            f"  {times[-1] * 1000:6.0f} ms: last JoinGroup answer at {(joined - started) * 1000:.0f} ms"
            f" + last SyncGroup answer {(synced - joined) * 1000:.0f} ms later",
            flush=True,
        )
        newcomer = Member(address, args.partitions, args.session_ms, args.heartbeat_ms)
        newcomer.start()
        members.append(newcomer)
        await wait_settled(members, args.partitions, members[0].generation)
    for member in members:
        await member.leave()
    return times


class ConsumerMember:
    """A confluent-kafka consumer in the group, polled by its own thread. librdkafka does not expose
    the group's generation id: ``view`` is (the number of assignments this member received, its
    partitions), published after each poll for the main thread."""

    def __init__(self, bootstrap: str, args: argparse.Namespace, group: str) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": args.session_ms,
            "heartbeat.interval.ms": args.heartbeat_ms, "enable.auto.commit": False,
            "partition.assignment.strategy": "range",
        })  # fmt: skip
        self.assignments = 0
        self.owned: frozenset[int] = frozenset()
        self.view: tuple[int, frozenset[int]] = (-1, frozenset())
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on_assign(self, _consumer, partitions) -> None:
        self.assignments += 1
        self.owned = frozenset(tp.partition for tp in partitions)

    def _on_revoke(self, _consumer, _partitions) -> None:
        self.owned = frozenset()

    def _run(self) -> None:
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)
        while not self.stopping.is_set():
            self.consumer.poll(0.05)
            self.view = (self.assignments, self.owned)
        self.consumer.close()  # LeaveGroup

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(WAIT_S)


def consumers_settled(members: list[ConsumerMember], partitions: int, after: list[int]) -> bool:
    """Every member was assigned again since ``after`` (its assignment count then) and together they
    own every partition exactly once."""
    views = [m.view for m in members]
    if any(count <= before for (count, _), before in zip(views, after, strict=True)):
        return False
    return sorted(p for _, owned in views for p in owned) == list(range(partitions))


def wait_consumers(members: list[ConsumerMember], partitions: int, after: list[int]) -> float:
    start = time.perf_counter()
    while not consumers_settled(members, partitions, after):
        if time.perf_counter() - start > WAIT_S:
            raise TimeoutError(f"consumers did not settle: {[m.view[0] for m in members]}")
        time.sleep(0.002)
    return time.perf_counter() - start


def consumer_rebalances(bootstrap: str, args: argparse.Namespace) -> list[float]:
    """Rebalance time with real consumers: one closes (LeaveGroup) -> the others own everything."""
    members = [ConsumerMember(bootstrap, args, GROUP + "-consumers") for _ in range(args.members)]
    try:
        wait_consumers(members, args.partitions, [0] * len(members))
        times = []
        for _ in range(args.rounds):
            victim = members.pop()
            before = [m.view[0] for m in members]
            started = time.perf_counter()
            victim.stopping.set()  # its thread closes the consumer: LeaveGroup
            wait_consumers(members, args.partitions, before)
            times.append(time.perf_counter() - started)
            print(f"  consumers: {times[-1] * 1000:6.0f} ms", flush=True)
            victim.thread.join(WAIT_S)
            before = [m.view[0] for m in members] + [0]
            members.append(ConsumerMember(bootstrap, args, GROUP + "-consumers"))
            wait_consumers(members, args.partitions, before)
        return times
    finally:
        for m in members:
            m.stop()


async def rate(calls: int, window: int, call) -> float:
    """Calls per second with ``window`` requests in flight."""
    start = time.perf_counter()
    done = 0
    while done < calls:
        batch = min(window, calls - done)
        await asyncio.gather(*(call(done + i) for i in range(batch)))
        done += batch
    return calls / (time.perf_counter() - start)


async def commits(address: str, produce_address: str, args: argparse.Namespace) -> dict[str, float]:
    member = Member(address, args.partitions, 30_000, 1_000)
    member.start()
    await wait_settled([member], args.partitions, 0)
    produce = await connect(produce_address)
    record = OffsetCommitRecord(GROUP, TOPIC, 0, OffsetAndMetadata(123456, 1, "", int(time.time() * 1000)))
    batch = encode_batch((record,), int(time.time() * 1000))

    async def commit(i: int) -> None:
        r = await member.call(
            m.OffsetCommitRequest(
                group_id=GROUP, generation_id=member.generation, member_id=member.member_id,
                topics=[m.OffsetCommitRequestTopic(name=TOPIC, partitions=[
                    m.OffsetCommitRequestPartition(partition_index=i % args.partitions, committed_offset=i,
                                                   committed_leader_epoch=-1),
                ])],
            ),
            COMMIT_VERSION,
        )  # fmt: skip
        assert r.topics[0].partitions[0].error_code == 0, r

    async def heartbeat(_i: int) -> None:
        r = await member.call(member.heartbeat_request(), HEARTBEAT_VERSION)
        assert r.error_code == 0, r

    async def produce_one(_i: int) -> None:
        r = await produce.request(
            m.ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[m.ProduceRequestTopicProduceData(
                name=PRODUCE_TOPIC,
                partition_data=[m.ProduceRequestPartitionProduceData(index=0, records=batch)],
            )]),
            PRODUCE_VERSION, CALL_TIMEOUT_S,
        )  # fmt: skip
        assert r.responses[0].partition_responses[0].error_code == 0, r

    calls = {"heartbeat": heartbeat, "produce_acks_all": produce_one, "offset_commit": commit}
    for call in calls.values():
        await call(0)  # warm-up
    # One at a time: the three calls interleaved call by call, so that each sees the same load.
    latencies: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(args.commits):
        for name, call in calls.items():
            start = time.perf_counter()
            await call(i)
            latencies[name].append(time.perf_counter() - start)
    out: dict[str, float] = {}
    for name, values in latencies.items():
        out[f"{name}/1"] = len(values) / sum(values)
        out[f"{name}/p50_ms"] = statistics.median(values) * 1000
        print(
            f"  {name:17s} one at a time: {out[f'{name}/1']:7,.0f} /s, p50 {out[f'{name}/p50_ms']:.2f} ms",
            flush=True,
        )
    # 16 in flight: blocks of each call, the order rotated between repeats; the median per call.
    samples: dict[str, list[float]] = {}
    for repeat in range(REPEATS):
        for name in list(calls)[repeat % 3 :] + list(calls)[: repeat % 3]:
            samples.setdefault(name, []).append(await rate(args.commits, 16, calls[name]))
    for name, values in samples.items():
        out[f"{name}/16"] = statistics.median(values)
        print(
            f"  {name:17s} 16 in flight: median {out[f'{name}/16']:7,.0f} /s of {[round(v) for v in values]}",
            flush=True,
        )
    await member.leave()
    await produce.close()
    return out


async def measure(coordinator: str, produce_leader: str, args: argparse.Namespace):
    leave = await rebalances(coordinator, args, crash=False, rounds=args.rounds)
    print("rebalance after LeaveGroup (s): " + ", ".join(f"{t:.3f}" for t in leave), flush=True)
    crash = await rebalances(coordinator, args, crash=True, rounds=args.crash_rounds)
    print("rebalance after a crash (s):    " + ", ".join(f"{t:.3f}" for t in crash), flush=True)
    print("offset commits vs baselines (one partition per request, acks=all RF=3):", flush=True)
    figures = await commits(coordinator, produce_leader, args)
    return leave, crash, figures


def find_coordinator(cluster: LocalCluster) -> tuple[str, int]:
    """(the Kafka address, the node id) of GROUP's coordinator, asked with FindCoordinator."""

    async def ask(address: str) -> m.FindCoordinatorResponse:
        conn = await connect(address)
        try:
            return await conn.request(m.FindCoordinatorRequest(key=GROUP), FIND_VERSION, CALL_TIMEOUT_S)
        finally:
            await conn.close()

    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for spec in cluster.broker_nodes:
            try:
                r = asyncio.run(ask(spec.kafka_address))
            except ConnectionError:
                continue
            if r.error_code == 0:
                return f"{r.host}:{r.port}", r.node_id
        time.sleep(0.2)
    raise TimeoutError("no coordinator found")


def leader_of(cluster: LocalCluster, topic: str) -> str:
    """The Kafka address of ``topic``-0's leader."""
    with AdminClient(cluster.controller_addresses, timeout_s=60) as admin:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            info = admin.describe_topics([topic])[0].partitions[0]
            if info.leader >= 0:
                return cluster.node(f"broker-{info.leader}").kafka_address
            time.sleep(0.2)
    raise TimeoutError(f"no leader for {topic}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--crash-rounds", type=int, default=2)
    parser.add_argument("--commits", type=int, default=400)
    parser.add_argument("--session-ms", type=int, default=2_000)
    parser.add_argument("--heartbeat-ms", type=int, default=100)
    args = parser.parse_args()
    print(f"machine: {machine_info()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="group-bench-") as tmp:
        cluster = LocalCluster(Path(tmp) / "pykraft", controllers=3, brokers=3, overrides=OVERRIDES)
        cluster.data_dir.mkdir(parents=True)
        cluster.plan()
        try:
            cluster.start()
            cluster.wait_until(lambda: all(cluster.healthy(n) for n in cluster.nodes), START_TIMEOUT_S, "up")
            coordinator, coordinator_id = find_coordinator(cluster)
            others = [n.node_id for n in cluster.broker_nodes if n.node_id != coordinator_id]
            with AdminClient(cluster.controller_addresses, timeout_s=60) as admin:
                admin.create_topic(TOPIC, num_partitions=args.partitions, replication_factor=1)
                # The baseline's partition is led by the coordinator's broker, like the group's offsets.
                admin.create_topic(PRODUCE_TOPIC, assignments={0: [coordinator_id, *others]})
            produce_leader = leader_of(cluster, PRODUCE_TOPIC)
            print(
                f"{args.members} members, {args.partitions} partitions, heartbeat {args.heartbeat_ms} ms, "
                f"session {args.session_ms} ms; coordinator {coordinator}",
                flush=True,
            )
            leave, crash, figures = asyncio.run(measure(coordinator, produce_leader, args))
            print("rebalance with confluent-kafka members (close -> LeaveGroup):", flush=True)
            consumers = consumer_rebalances(cluster.kafka_bootstrap, args)
        finally:
            cluster.down(timeout_s=15)
            for spec in cluster.nodes:
                cluster.kill_node(spec)
    print(f"\nmachine: {machine_info()}")
    print(
        f"rebalance after leave: median {statistics.median(leave) * 1000:.0f} ms "
        f"(min {min(leave) * 1000:.0f}, max {max(leave) * 1000:.0f}) over {len(leave)} rounds"
    )
    print(
        f"rebalance, confluent-kafka members, after close: median {statistics.median(consumers) * 1000:.0f}"
        f" ms (min {min(consumers) * 1000:.0f}, max {max(consumers) * 1000:.0f})"
    )
    if crash:  # --crash-rounds 0 measures none
        print(
            f"rebalance after crash: median {statistics.median(crash) * 1000:.0f} ms "
            f"(session {args.session_ms} ms)"
        )
    for window in (1, 16):
        c, p, h = (figures[f"{n}/{window}"] for n in ("offset_commit", "produce_acks_all", "heartbeat"))
        print(
            f"{'one at a time' if window == 1 else '16 in flight '}: commits {c:,.0f}/s; produce acks=all "
            f"{p:,.0f}/s (commit/produce {c / p:.2f}); heartbeat {h:,.0f}/s"
        )
    print(
        "p50 latency one at a time: "
        + ", ".join(
            f"{n} {figures[f'{n}/p50_ms']:.2f} ms" for n in ("offset_commit", "produce_acks_all", "heartbeat")
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
