"""Metadata quorum benchmark: topic creations/s against bare Raft commits/s, and fencing time.

    ./dev bench metadata_bench [--raft-commits 500] [--topics-1p 200] [--topics-50p 60]
                               [--fence-sizes 1000,10000]

In one run, on 127.0.0.1, started and stopped by this script:

1. bare Raft: a 3-node ``python -m raft.server`` cluster; one client proposes one 100-byte entry at a
   time (each answered after commit and apply) -> commits/s. This is the floor of one controller
   decision, which is also one Raft entry answered after commit.
2. topic creations: a 3-controller ``python -m metadata.server`` quorum with 3 fake brokers (registered
   and unfenced through ControllerService); one AdminClient creates topics one request at a time
   (1 partition RF 3, then 50 partitions RF 3) through the active controller. The ratio to (1) is
   the controller's own cost (validation, placement, records, protobuf, replay, gRPC hop).
3. fencing: a topic of N partitions all led by broker 1; broker 1 asks to be fenced
   (BrokerHeartbeat want_fence, i.e. the fence is decided when the request arrives); the answer
   comes after the fence record and the N new-leader records are committed and replayed. Measured:
   that round trip, and, in-process, the controller core's generation time alone (target: <= 1 s
   for 10,000 partitions after the fence is decided).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from metadata.api import BrokerHeartbeatRequest, NewTopic, RegisterBrokerRequest  # noqa: E402
from metadata.controller import ControllerConfig, QuorumController  # noqa: E402
from metadata.records import encode_batch  # noqa: E402
from proto import admin_pb2, controller_pb2, controller_pb2_grpc, metadata_pb2, raft_pb2, raft_pb2_grpc  # noqa: E402
from proto.runtime.listeners import Started, pick_ports, start_on_picked_ports  # noqa: E402
from pykraft.admin import AdminClient  # noqa: E402

ENTRY_BYTES = 100
ELECTION_TIMEOUT_MS = 500
HEARTBEAT_MS = 50
DEADLINE_S = 60.0
BIND_ATTEMPTS = 5


def machine_info() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} cpus, Python {platform.python_version()}, load average {load}"


class Cluster:
    """Three processes of ``module`` (raft.server or metadata.server), killed by pid at the end."""

    def __init__(self, tmp: Path, module: str, extra: list[str]) -> None:
        self.tmp, self.module, self.extra = tmp, module, extra
        self.procs: dict[int, subprocess.Popen] = {}
        self.channels: dict[int, grpc.Channel] = {}
        self._assign_ports()
        # Voters must know each other's ports up front: picked outside the ephemeral range, and all
        # started again on fresh ones when another process took one first.
        start_on_picked_ports(
            lambda: [Started(f"node {i}", self.tmp / f"{self.module}-{i}", self.output(i), self._start(i),
                             self.procs[i].poll, self.procs[i].pid)
                     for i in self.addresses],
            self._kill_all, self._assign_ports, DEADLINE_S, BIND_ATTEMPTS,
        )  # fmt: skip
        self.channels = {i: grpc.insecure_channel(a) for i, a in self.addresses.items()}

    def _assign_ports(self) -> None:
        self.addresses = {i + 1: f"127.0.0.1:{p}" for i, p in enumerate(pick_ports(3))}

    def output(self, node_id: int) -> Path:
        return self.tmp / f"{self.module}-{node_id}.out"

    def _start(self, node_id: int) -> int:
        voters = ",".join(f"{i}@{a}" for i, a in self.addresses.items())
        cmd = [
            sys.executable, "-m", self.module, "--node-id", str(node_id), "--listen", self.addresses[node_id],
            "--voters", voters, "--data-dir", str(self.tmp / f"{self.module}-{node_id}"),
            "--election-timeout-ms", str(ELECTION_TIMEOUT_MS),
            "--heartbeat-interval-ms", str(HEARTBEAT_MS), *self.extra,
        ]  # fmt: skip
        with open(self.output(node_id), "ab") as out:
            start = out.tell()
            self.procs[node_id] = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        return start

    def stop(self) -> None:
        for channel in self.channels.values():
            channel.close()
        self._kill_all()

    def _kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()


def wait_for(condition, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            value = condition()
        except grpc.RpcError:
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"no {what} within {DEADLINE_S}s")


# ---- 1. bare Raft ---------------------------------------------------------------------------------


def bare_raft_commits_per_s(tmp: Path, count: int) -> float:
    cluster = Cluster(tmp, "raft.server", ["--snapshot-every-entries", "100000"])
    try:
        stubs = {i: raft_pb2_grpc.RaftClientServiceStub(c) for i, c in cluster.channels.items()}

        def leader() -> int:
            for i, stub in stubs.items():
                if stub.Status(raft_pb2.StatusRequest(), timeout=0.5).is_leader:
                    return i
            return 0

        stub = stubs[wait_for(leader, "Raft leader")]
        payload = os.urandom(ENTRY_BYTES)
        for _ in range(20):  # warm up
            stub.Propose(raft_pb2.ProposeRequest(entries=[payload]), timeout=5)
        start = time.perf_counter()
        for _ in range(count):
            reply = stub.Propose(raft_pb2.ProposeRequest(entries=[payload]), timeout=5)
            assert reply.error_code == 0, reply
        return count / (time.perf_counter() - start)
    finally:
        cluster.stop()


# ---- 2 and 3. the controller quorum --------------------------------------------------------------


class FakeBroker:
    def __init__(self, stub: controller_pb2_grpc.ControllerServiceStub, broker_id: int) -> None:
        self.stub = stub
        self.broker_id = broker_id
        endpoint = metadata_pb2.Endpoint(name="BROKER", host="127.0.0.1", port=20000 + broker_id)
        r = stub.RegisterBroker(
            controller_pb2.RegisterBrokerRequest(
                broker_id=broker_id, incarnation_id=uuid.uuid4().hex, endpoints=[endpoint]
            ),
            timeout=10,
        )
        assert r.error.code == 0, r.error
        self.broker_epoch = r.broker_epoch

    def heartbeat(self, want_fence: bool = False) -> controller_pb2.BrokerHeartbeatResponse:
        request = controller_pb2.BrokerHeartbeatRequest(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.broker_epoch,
            want_fence=want_fence,
        )
        r = self.stub.BrokerHeartbeat(request, timeout=30)
        assert r.error.code == 0, r.error
        return r


def topic_creations_per_s(admin: AdminClient, prefix: str, count: int, partitions: int) -> float:
    start = time.perf_counter()
    for i in range(count):
        admin.create_topic(f"{prefix}-{i}", num_partitions=partitions, replication_factor=3)
    return count / (time.perf_counter() - start)


def quorum_idle(admin: AdminClient) -> bool:
    return all(v.lag == 0 for v in admin.describe_quorum().voters)


def fence_round_trip_s(
    admin: AdminClient, brokers: dict[int, FakeBroker], partitions: int, trials: int
) -> list[float]:
    """Round trips of fencing broker 1 while it leads ``partitions`` partitions, one per trial; each
    trial starts with every voter caught up (no big entry still being replicated or applied)."""
    out = []
    for trial in range(trials):
        name = f"fence-{partitions}-{trial}"
        admin.create_topic(name, assignments={p: [1, 2, 3] for p in range(partitions)})
        assert not brokers[1].heartbeat().is_fenced
        wait_for(lambda: quorum_idle(admin), "followers caught up")
        start = time.perf_counter()
        response = brokers[1].heartbeat(want_fence=True)
        out.append(time.perf_counter() - start)
        assert response.is_fenced
        (topic,) = admin.describe_topics([name])
        assert all(p.leader == 2 for p in topic.partitions), "every partition has a new leader"
        wait_for(lambda: not brokers[1].heartbeat().is_fenced, "broker 1 unfenced again")
        admin.delete_topics([name])
    return out


def controller_quorum(tmp: Path, args: argparse.Namespace) -> dict:
    extra = ["--broker-session-timeout-ms", "600000", "--log-level", args.controller_log_level]
    cluster = Cluster(tmp, "metadata.server", extra)
    try:
        admin_any = AdminClient(",".join(cluster.addresses.values()), timeout_s=DEADLINE_S)
        leader = wait_for(lambda: admin_any.describe_quorum().leader_id, "active controller")
        admin_any.close()
        stub = controller_pb2_grpc.ControllerServiceStub(cluster.channels[leader])
        brokers = {b: FakeBroker(stub, b) for b in (1, 2, 3)}
        for b in brokers.values():
            wait_for(lambda b=b: not b.heartbeat().is_fenced, f"broker {b.broker_id} unfenced")
        out: dict = {}
        with AdminClient(cluster.addresses[leader], timeout_s=DEADLINE_S) as admin:
            admin.create_topic("warmup", num_partitions=1, replication_factor=3)
            out["topics_1p_per_s"] = topic_creations_per_s(admin, "p1", args.topics_1p, 1)
            out["topics_50p_per_s"] = topic_creations_per_s(admin, "p50", args.topics_50p, 50)
            out["fence_round_trip_s"] = {
                n: fence_round_trip_s(admin, brokers, n, args.fence_trials) for n in args.fence_sizes
            }
            r = admin._call("DescribeCluster", admin_pb2.DescribeClusterRequest())
            out["metadata_offset"] = r.metadata_offset
        return out
    finally:
        cluster.stop()


def core_fence_generation_s(partitions: int) -> tuple[float, float]:
    """In-process: (generate, generate + encode) seconds for fencing a broker leading ``partitions``."""
    controller = QuorumController(ControllerConfig(), random.Random(1))
    offset = 0

    def commit(result) -> None:  # type: ignore[no-untyped-def]
        nonlocal offset
        offset += 1
        controller.replay(result.records, offset)

    for b in (1, 2, 3):
        commit(controller.handle_register_broker(RegisterBrokerRequest(b, f"i{b}"), 0))
        epoch = controller.image.brokers[b].broker_epoch
        commit(controller.handle_broker_heartbeat(BrokerHeartbeatRequest(b, epoch, offset), 0))
    topic = NewTopic("t", assignments=dict.fromkeys(range(partitions), (1, 2, 3)))
    commit(controller.handle_create_topics([topic]))
    epoch = controller.image.brokers[1].broker_epoch
    start = time.perf_counter()
    result = controller.handle_broker_heartbeat(BrokerHeartbeatRequest(1, epoch, offset, want_fence=True), 0)
    generated = time.perf_counter() - start
    encode_batch(result.records)
    total = time.perf_counter() - start
    assert len(result.records) == partitions + 1
    return generated, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--raft-commits", type=int, default=500)
    parser.add_argument("--topics-1p", type=int, default=200)
    parser.add_argument("--topics-50p", type=int, default=60)
    parser.add_argument("--fence-sizes", default="1000,10000")
    parser.add_argument("--fence-trials", type=int, default=3)
    parser.add_argument(
        "--controller-log-level", default="WARNING", help="INFO shows each large decision's timing"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.fence_sizes = [int(x) for x in args.fence_sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="metadata-bench-") as tmp:
        raft_rate = bare_raft_commits_per_s(Path(tmp), args.raft_commits)
        quorum = controller_quorum(Path(tmp), args)
    core = {n: core_fence_generation_s(n) for n in args.fence_sizes}
    result = {
        "machine": machine_info(),
        "bare_raft_commits_per_s": raft_rate,
        **quorum,
        "core_fence_generation_s": core,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"machine: {result['machine']}")
    print(f"bare Raft commits/s (1 outstanding, 100 B):        {raft_rate:8.0f}")
    for key, label in (("topics_1p_per_s", "1 partition"), ("topics_50p_per_s", "50 partitions")):
        rate = quorum[key]
        print(
            f"topic creations/s, {label:13s} RF 3 (1 outstanding): {rate:8.0f}"
            f"  ({rate / raft_rate:.2f} x bare Raft)"
        )
    for n in args.fence_sizes:
        generated, encoded = core[n]
        trips = sorted(quorum["fence_round_trip_s"][n])
        print(
            f"fence broker leading {n:6d} partitions: decided -> committed + replayed, median "
            f"{trips[len(trips) // 2]:.3f} s of {', '.join(f'{t:.3f}' for t in trips)}"
            f" (core generation {generated * 1000:.0f} ms, + encode {encoded * 1000:.0f} ms)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
