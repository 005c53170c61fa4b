"""Raft benchmark: pykraft's raft (3 processes, synced rocksdict log, gRPC) vs PySyncObj (3 processes).

    ./dev bench raft_bench [--entries 40000] [--latency-samples 1000] [--trials 5]

Both clusters run on 127.0.0.1 in this run, one after the other, started by this script. Measured:

1. throughput: committed 100-byte entries/s from one client with many proposals outstanding;
2. latency: p50/p99 commit latency of one proposal at a time;
3. failover: time from SIGKILL of the leader to the next committed entry (median of the trials;
   the killed node is restarted from its data directory between trials).

pykraft: the client is this process (grpc.aio) talking to ``python -m raft.server``; a Propose RPC
carries a batch of entries and is answered after commit and apply; every node fsyncs its log (one
synced WriteBatch per loop iteration). PySyncObj: the client is one of the node processes (its API
is in-process), driven over stdin/stdout; its journal is in memory and never synced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proto.runtime.listeners import Started, pick_ports, start_on_picked_ports  # noqa: E402

ENTRY_BYTES = 100
ELECTION_TIMEOUT_MS = 300  # pykraft randomizes in [300, 600) ms
HEARTBEAT_MS = 50
PSO_MIN_TIMEOUT_S, PSO_MAX_TIMEOUT_S = 0.3, 0.6  # the same election window for PySyncObj
PSO_APPEND_PERIOD_S = (
    0.05  # its heartbeat/batch period, = our heartbeat (its default 0.1 s forbids a 0.3 s timeout)
)
DEADLINE_S = 60.0
BIND_ATTEMPTS = 5


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def machine_info() -> str:
    cpu = "unknown cpu"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{platform.node()}: {os.cpu_count()} cpus ({cpu}), {mem_gib:.0f} GiB, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}, load average {load}"
    )


# ---- pykraft ----------------------------------------------------------------------------------


class PykraftCluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[int, subprocess.Popen] = {}
        self._assign_ports()

    def _assign_ports(self) -> None:
        """Voters must know each other's ports up front: picked outside the ephemeral range."""
        self.addresses = {i + 1: f"127.0.0.1:{p}" for i, p in enumerate(pick_ports(3))}
        self.voters = ",".join(f"{i}@{a}" for i, a in self.addresses.items())

    def start_all(self) -> None:
        """Start the three nodes; on a picked port another process took, start over on fresh ones."""
        start_on_picked_ports(
            lambda: [Started(f"node {i}", self.tmp / f"n{i}", self.tmp / f"n{i}.out", self.start(i),
                             self.procs[i].poll, self.procs[i].pid)
                     for i in self.addresses],
            self.stop_all, self._assign_ports, DEADLINE_S, BIND_ATTEMPTS,
        )  # fmt: skip

    def start(self, node_id: int) -> int:
        """Start (or restart, on its port) one node; the byte of its output file where this run begins."""
        cmd = [
            sys.executable, "-m", "raft.server", "--node-id", str(node_id),
            "--listen", self.addresses[node_id], "--voters", self.voters,
            "--data-dir", str(self.tmp / f"n{node_id}"),
            "--election-timeout-ms", str(ELECTION_TIMEOUT_MS), "--heartbeat-interval-ms", str(HEARTBEAT_MS),
            "--snapshot-every-entries", "50000",
        ]  # fmt: skip
        with open(self.tmp / f"n{node_id}.out", "ab") as out:
            start = out.tell()
            self.procs[node_id] = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        return start

    def kill(self, node_id: int) -> None:
        self.procs[node_id].send_signal(signal.SIGKILL)
        self.procs[node_id].wait()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()


class PykraftClient:
    def __init__(self, addresses: dict[int, str]) -> None:
        import grpc

        from proto import raft_pb2, raft_pb2_grpc
        from proto.runtime.serving import GRPC_OPTIONS

        self.pb = raft_pb2
        self.channels = {i: grpc.aio.insecure_channel(a, options=GRPC_OPTIONS) for i, a in addresses.items()}
        self.stubs = {i: raft_pb2_grpc.RaftClientServiceStub(c) for i, c in self.channels.items()}
        self.leader = 1

    async def find_leader(self, exclude: int = 0) -> int:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            for node_id, stub in self.stubs.items():
                if node_id == exclude:
                    continue
                try:
                    status = await stub.Status(self.pb.StatusRequest(), timeout=0.5)
                except Exception:
                    continue
                if status.is_leader:
                    self.leader = node_id
                    return node_id
            await asyncio.sleep(0.02)
        raise RuntimeError("no pykraft leader within the deadline")

    async def propose(self, entries: list[bytes], timeout_s: float = 5.0):
        return await self.stubs[self.leader].Propose(
            self.pb.ProposeRequest(entries=entries), timeout=timeout_s
        )

    async def propose_at_leader(self, entries: list[bytes], timeout_s: float = 30.0):
        """Propose, following NOT_CONTROLLER leader hints (a leader change during the run)."""
        for _ in range(100):
            reply = await self.propose(entries, timeout_s)
            if reply.error_code == 0:
                return reply
            if reply.leader.leader_id:
                self.leader = reply.leader.leader_id
            else:
                await asyncio.sleep(0.05)
                await self.find_leader()
        raise RuntimeError(f"proposal kept failing: {reply}")

    async def propose_until_committed(self, entry: bytes, exclude: int) -> float:
        """Propose to whoever leads (following hints), retrying until one commits; return its time."""
        import grpc

        while True:
            try:
                reply = await self.propose([entry], timeout_s=1.0)
            except grpc.aio.AioRpcError:
                reply = None
            if reply is not None and reply.error_code == 0:
                return time.monotonic()
            hint = reply.leader.leader_id if reply is not None else 0
            if hint and hint != exclude:
                self.leader = hint
            else:  # no leader known yet, or the node is gone: try the next live node
                others = [i for i in sorted(self.stubs) if i != exclude]
                self.leader = (
                    others[(others.index(self.leader) + 1) % len(others)]
                    if self.leader in others
                    else others[0]
                )
                await asyncio.sleep(0.005)

    async def close(self) -> None:
        for channel in self.channels.values():
            await channel.close()


async def pykraft_throughput(client: PykraftClient, total: int, batch: int, window: int) -> float:
    payload = [os.urandom(ENTRY_BYTES) for _ in range(batch)]
    sent = 0
    start = time.perf_counter()

    async def worker() -> None:
        nonlocal sent
        while sent < total:
            sent += batch
            await client.propose_at_leader(payload)

    await asyncio.gather(*(worker() for _ in range(window)))
    return sent / (time.perf_counter() - start)


async def pykraft_latency(client: PykraftClient, samples: int) -> list[float]:
    payload = [os.urandom(ENTRY_BYTES)]
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        await client.propose_at_leader(payload)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def pykraft_leader_latency(client: PykraftClient, samples: int) -> list[float]:
    """Commit latency measured inside the leader process (like PySyncObj's in-process client)."""
    leader = await client.find_leader()
    request = client.pb.MeasureCommitLatencyRequest(count=samples, entry_bytes=ENTRY_BYTES)
    reply = await client.stubs[leader].MeasureCommitLatency(request, timeout=DEADLINE_S)
    assert reply.error_code == 0, reply
    return list(reply.latency_ms)


async def wait_caught_up(client: PykraftClient, node_id: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    leader = await client.find_leader()
    target = (await client.stubs[leader].Status(client.pb.StatusRequest(), timeout=1)).commit_index
    while time.monotonic() < deadline:
        try:
            status = await client.stubs[node_id].Status(client.pb.StatusRequest(), timeout=0.5)
            if status.applied_index >= target and status.leader_id:
                return
        except Exception:
            pass
        await asyncio.sleep(0.02)
    raise RuntimeError(f"node {node_id} did not catch up")


async def pykraft_failover(cluster: PykraftCluster, client: PykraftClient, trials: int) -> list[float]:
    out = []
    for _ in range(trials):
        leader = await client.find_leader()
        for _ in range(20):  # a steady stream before the kill
            await client.propose_until_committed(b"x" * ENTRY_BYTES, exclude=0)
        cluster.kill(leader)
        t_kill = time.monotonic()
        t_commit = await client.propose_until_committed(b"y" * ENTRY_BYTES, exclude=leader)
        out.append((t_commit - t_kill) * 1000)
        cluster.start(leader)
        await wait_caught_up(client, leader)
    return out


async def run_pykraft(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="raft-bench-") as tmp:
        cluster = PykraftCluster(Path(tmp))
        client: PykraftClient | None = None
        try:
            cluster.start_all()
            client = PykraftClient(cluster.addresses)
            await client.find_leader()
            await pykraft_throughput(client, 2000, 200, 4)  # warm up
            tput = await pykraft_throughput(client, args.entries, args.batch, args.window)
            lat = await pykraft_latency(client, args.latency_samples)
            lat_in_leader = await pykraft_leader_latency(client, args.latency_samples)
            fail = await pykraft_failover(cluster, client, args.trials)
        finally:
            if client is not None:
                await client.close()
            cluster.stop_all()
    return {"throughput": tput, "latency": lat, "latency_in_leader": lat_in_leader, "failover": fail}


# ---- PySyncObj --------------------------------------------------------------------------------


def pysyncobj_node(self_addr: str, partners: list[str], use_batch: bool) -> None:
    """A PySyncObj node driven by JSON commands on stdin; answers one JSON line per command."""
    from pysyncobj import SyncObj, SyncObjConf, replicated

    class Log(SyncObj):
        def __init__(self) -> None:
            conf = SyncObjConf(
                appendEntriesUseBatch=use_batch,
                appendEntriesPeriod=PSO_APPEND_PERIOD_S,
                raftMinTimeout=PSO_MIN_TIMEOUT_S,
                raftMaxTimeout=PSO_MAX_TIMEOUT_S,
                dynamicMembershipChange=False,
            )
            super().__init__(self_addr, partners, conf)
            self.count = 0

        @replicated
        def append(self, data: bytes) -> int:
            self.count += 1
            return self.count

    node = Log()
    stop_loop = threading.Event()

    def reply(obj: dict) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def commit_loop() -> None:
        while not stop_loop.is_set():
            started = time.monotonic()
            try:
                node.append(b"z" * ENTRY_BYTES, sync=True, timeout=0.2)
            except Exception:
                continue
            reply({"op": "loop", "started": started, "committed_at": time.monotonic()})

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "status":
            status = node.getStatus()
            reply(
                {
                    "op": "status",
                    "leader": node._isLeader(),
                    "has_leader": status["leader"] is not None,
                    "commit": status["commit_idx"],
                }
            )
        elif op == "throughput":
            reply({"op": "throughput", **_pso_throughput(node, cmd["total"], cmd["window"])})
        elif op == "latency":
            out, failures = [], 0
            while len(out) < cmd["samples"] and failures < cmd["samples"]:
                t0 = time.perf_counter()
                try:
                    node.append(b"l" * ENTRY_BYTES, sync=True, timeout=5)
                except Exception:  # SyncObjException: timeout or no leader; the sample is dropped
                    failures += 1
                    continue
                out.append((time.perf_counter() - t0) * 1000)
            reply({"op": "latency", "latency": out, "failures": failures})
        elif op == "commit_loop":
            stop_loop.clear()
            threading.Thread(target=commit_loop, daemon=True).start()
        elif op == "stop_loop":
            stop_loop.set()


def _pso_throughput(node, total: int, window: int) -> dict:  # type: ignore[no-untyped-def]
    """Committed appends/s with ``window`` outstanding; failed or unanswered appends do not count."""
    from pysyncobj import FAIL_REASON

    slots = threading.Semaphore(window)
    done = threading.Event()
    counts = {"ok": 0, "failed": 0}
    lock = threading.Lock()
    payload = b"t" * ENTRY_BYTES

    def callback(result, error) -> None:  # type: ignore[no-untyped-def]
        slots.release()
        with lock:
            counts["ok" if error == FAIL_REASON.SUCCESS else "failed"] += 1
            if counts["ok"] + counts["failed"] == total:
                done.set()

    start = time.perf_counter()
    deadline = time.monotonic() + DEADLINE_S
    for _ in range(total):
        if not slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
            break
        node.append(payload, callback=callback)
    done.wait(max(0.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - start
    with lock:
        ok, failed = counts["ok"], counts["failed"]
    return {"rate": ok / elapsed, "failed": failed, "unanswered": total - ok - failed}


class PsoCluster:
    def __init__(self, use_batch: bool) -> None:
        ports = pick_ports(3)  # PySyncObj reports no bound port: a taken one fails the run loudly
        self.addresses = [f"127.0.0.1:{p}" for p in ports]
        self.use_batch = use_batch
        self.procs: dict[int, subprocess.Popen] = {}
        self.replies: dict[int, queue.Queue] = {}
        self.stderr_path = Path(tempfile.mkstemp(prefix="pysyncobj-", suffix=".stderr")[1])

    def divergence_warnings(self) -> int:
        """PySyncObj prints this when it truncates entries its state machine already applied."""
        return self.stderr_path.read_text().count("state machine may have diverged")

    def start(self, i: int) -> None:
        partners = [a for j, a in enumerate(self.addresses) if j != i]
        cmd = [sys.executable, __file__, "pysyncobj-node", self.addresses[i], *partners]
        if not self.use_batch:
            cmd.append("--no-batch")
        stderr = open(self.stderr_path, "a")  # noqa: SIM115 (the child keeps it; closed right below)
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1
        )
        stderr.close()
        self.procs[i] = proc
        self.replies[i] = replies = queue.Queue()
        threading.Thread(target=_read_replies, args=(proc, replies), daemon=True).start()

    def next_reply(self, i: int, op: str, timeout_s: float = DEADLINE_S) -> dict:
        """The next reply of kind ``op`` from node ``i`` (others are skipped); TimeoutError if none."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                answer = self.replies[i].get(timeout=max(0.001, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"PySyncObj node {i} sent no {op!r} reply within {timeout_s} s") from None
            if answer.get("op") == op:
                return answer

    def ask(self, i: int, op: dict) -> dict:
        proc = self.procs[i]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(op) + "\n")
        proc.stdin.flush()
        if op["op"] in ("commit_loop", "stop_loop"):
            return {}
        return self.next_reply(i, op["op"], timeout_s=3 * DEADLINE_S)

    def leader(self, exclude: int = -1) -> int:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            for i in self.procs:
                if i != exclude and self.procs[i].poll() is None and self.ask(i, {"op": "status"})["leader"]:
                    return i
            time.sleep(0.02)
        raise RuntimeError("no PySyncObj leader")

    def kill(self, i: int) -> None:
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()


def pso_failover(cluster: PsoCluster, trials: int) -> list[float]:
    """Like ours; a trial with no commit within DEADLINE_S after the kill counts as DEADLINE_S."""
    out = []
    for _ in range(trials):
        leader = cluster.leader()
        driver = next(i for i in cluster.procs if i != leader)
        cluster.ask(driver, {"op": "commit_loop"})
        for _ in range(20):
            cluster.next_reply(driver, "loop")
        cluster.kill(leader)
        t_kill = time.monotonic()
        try:
            while True:  # the first entry proposed after the kill that commits
                line = cluster.next_reply(
                    driver, "loop", timeout_s=max(0.001, t_kill + DEADLINE_S - time.monotonic())
                )
                if line["started"] > t_kill:
                    out.append((line["committed_at"] - t_kill) * 1000)
                    break
        except TimeoutError:
            out.append(DEADLINE_S * 1000)
        cluster.ask(driver, {"op": "stop_loop"})
        cluster.start(leader)
        deadline = time.monotonic() + DEADLINE_S
        while not cluster.ask(leader, {"op": "status"})["has_leader"]:
            assert time.monotonic() < deadline, "restarted PySyncObj node found no leader"
            time.sleep(0.05)
    return out


def _read_replies(proc: subprocess.Popen, replies: queue.Queue) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        with contextlib.suppress(ValueError):
            replies.put(json.loads(line))


def run_pysyncobj(args: argparse.Namespace) -> dict:
    batched = PsoCluster(use_batch=True)
    try:
        for i in range(3):
            batched.start(i)
        leader = batched.leader()
        batched.ask(leader, {"op": "throughput", "total": 2000, "window": args.window * args.batch})
        tput = batched.ask(
            leader, {"op": "throughput", "total": args.entries, "window": args.window * args.batch}
        )
        fail = pso_failover(batched, args.trials)
        warnings = batched.divergence_warnings()
    finally:
        batched.stop_all()
        batched.stderr_path.unlink()
    unbatched = PsoCluster(use_batch=False)
    try:
        for i in range(3):
            unbatched.start(i)
        leader = unbatched.leader()
        answer = unbatched.ask(leader, {"op": "latency", "samples": args.latency_samples})
        lat, lat_failures = answer["latency"], answer["failures"]
    finally:
        unbatched.stop_all()
        unbatched.stderr_path.unlink()
    return {
        "throughput": tput["rate"],
        "throughput_lost": (tput["failed"], tput["unanswered"]),
        "latency": lat,
        "failover": fail,
        "warnings": warnings,
        "latency_failures": lat_failures,
    }


# ---- report -----------------------------------------------------------------------------------


def report(args: argparse.Namespace, ours: dict, pso: dict) -> None:
    print(f"machine: {machine_info()}")
    print(
        f"workload: {ENTRY_BYTES}-byte entries; throughput {args.entries} entries from one client with "
        f"{args.window} Propose RPCs x {args.batch} entries outstanding (PySyncObj: "
        f"{args.window * args.batch} async appends outstanding); latency {args.latency_samples} proposals "
        f"one at a time; failover {args.trials} SIGKILLs of the leader"
    )
    print(
        f"pykraft raft: 3 x `python -m raft.server`, election timeout {ELECTION_TIMEOUT_MS}-"
        f"{2 * ELECTION_TIMEOUT_MS} ms, heartbeat {HEARTBEAT_MS} ms, rocksdict log synced (one fsync per "
        "loop iteration), client over gRPC"
    )
    print(
        f"PySyncObj 0.3.17: 3 processes, raftMinTimeout={PSO_MIN_TIMEOUT_S} "
        f"raftMaxTimeout={PSO_MAX_TIMEOUT_S} appendEntriesPeriod={PSO_APPEND_PERIOD_S}, "
        "in-memory journal (no fsync), client inside a node process; throughput and failover with its "
        "default batching (appendEntriesUseBatch=True), latency with appendEntriesUseBatch=False"
    )
    pso_p50, pso_p99 = percentile(pso["latency"], 0.5), percentile(pso["latency"], 0.99)
    rows = [
        ("committed entries/s", ours["throughput"], pso["throughput"], "{:,.0f}"),
        ("p50 ms, gRPC client", percentile(ours["latency"], 0.5), pso_p50, "{:.2f}"),
        ("p99 ms, gRPC client", percentile(ours["latency"], 0.99), pso_p99, "{:.2f}"),
        ("p50 ms, in leader", percentile(ours["latency_in_leader"], 0.5), pso_p50, "{:.2f}"),
        ("p99 ms, in leader", percentile(ours["latency_in_leader"], 0.99), pso_p99, "{:.2f}"),
        (
            "failover median ms",
            statistics.median(ours["failover"]),
            statistics.median(pso["failover"]),
            "{:.0f}",
        ),
    ]
    print("latency: 'gRPC client' = this process -> leader Propose RPC -> answer after commit; 'in leader' =")
    print("the leader proposes to itself (MeasureCommitLatency); PySyncObj's figure is always in-process")
    print(f"{'metric':<22}{'pykraft':>14}{'PySyncObj':>14}")
    for name, a, b, fmt in rows:
        print(f"{name:<22}{fmt.format(a):>14}{fmt.format(b):>14}")
    print(f"pykraft failover trials ms: {[round(x) for x in ours['failover']]}")
    print(f"PySyncObj failover trials ms: {[round(x) for x in pso['failover']]}")
    print(f"PySyncObj latency run: {pso['latency_failures']} appends failed (dropped from the samples)")
    failed, unanswered = pso["throughput_lost"]
    print(
        f"PySyncObj throughput run: {failed} appends failed, "
        f"{unanswered} unanswered within {DEADLINE_S:.0f} s"
    )
    print(
        f"PySyncObj printed 'state machine may have diverged' {pso['warnings']} times during the failover "
        "trials (it truncates entries it had already applied; it neither syncs nor persists term/vote)"
    )
    ratio = ours["throughput"] / pso["throughput"]
    p50 = percentile(ours["latency"], 0.5)
    p50_leader = percentile(ours["latency_in_leader"], 0.5)
    fo = statistics.median(ours["failover"])
    print(
        f"targets: throughput {ratio:.1f}x PySyncObj (target >= 5x) {'MET' if ratio >= 5 else 'MISSED'}; "
        f"p50 {p50:.2f} ms via gRPC client, {p50_leader:.2f} ms in leader "
        f"(target <= 3) {'MET' if p50 <= 3 else 'MET in leader only' if p50_leader <= 3 else 'MISSED'}; "
        f"failover median {fo:.0f} ms (target <= 1000) {'MET' if fo <= 1000 else 'MISSED'}"
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "pysyncobj-node":
        rest = sys.argv[2:]
        use_batch = "--no-batch" not in rest
        addrs = [a for a in rest if a != "--no-batch"]
        pysyncobj_node(addrs[0], addrs[1:], use_batch)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=40_000)
    parser.add_argument("--batch", type=int, default=500, help="entries per Propose RPC")
    parser.add_argument("--window", type=int, default=8, help="Propose RPCs outstanding")
    parser.add_argument("--latency-samples", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    ours = asyncio.run(run_pykraft(args))
    print(
        f"pykraft: {ours['throughput']:,.0f} entries/s, p50 {percentile(ours['latency'], 0.5):.2f} ms, "
        f"failover {[round(x) for x in ours['failover']]} ms",
        flush=True,
    )
    pso = run_pysyncobj(args)
    report(args, ours, pso)
    return 0


if __name__ == "__main__":
    sys.exit(main())
