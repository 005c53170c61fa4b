"""A cluster of ``python -m raft.server`` processes on 127.0.0.1 for the Raft integration tests.

Every process is started on a port picked outside the ephemeral range (``start_all`` starts over on
fresh ports when another process took one) with its own temp data directory and is killed by its pid
when the test ends (pass or fail). Every wait polls a condition against a deadline. Protocol timeouts
are short (election 200-400 ms, heartbeat 40 ms) so failover is quick, but RPC deadlines are generous
enough for a loaded 2-core machine.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from proto import raft_pb2, raft_pb2_grpc
from proto.errors import ErrorCode
from proto.runtime.listeners import Started, pick_ports, start_on_picked_ports

ROOT = Path(__file__).resolve().parents[3]
ELECTION_TIMEOUT_MS = 200
HEARTBEAT_MS = 40
DEADLINE_S = 20.0
CALL_TIMEOUT_S = 2.0
BIND_ATTEMPTS = 5


def wait_until(condition: Callable[[], object], what: str, timeout_s: float = DEADLINE_S) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


@dataclass
class RaftCluster:
    tmp: Path
    size: int
    snapshot_every: int = 10_000
    observers: int = 0  # node ids size+1 .. size+observers
    election_timeout_ms: int = ELECTION_TIMEOUT_MS
    last_leader: int = 0
    ports: list[int] = field(default_factory=list)
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)
    channels: dict[int, grpc.Channel] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._assign_ports()

    def _assign_ports(self) -> None:
        """Ports picked outside the ephemeral range (``proto.runtime.listeners``): voters must know them
        all."""
        self.ports = pick_ports(self.size + self.observers)
        self.voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(self.ports[: self.size]))
        self.observer_list = ",".join(
            f"{self.size + i + 1}@127.0.0.1:{p}" for i, p in enumerate(self.ports[self.size :])
        )
        for node in self.all_ids:
            self.channels[node] = grpc.insecure_channel(self.address(node))

    @property
    def ids(self) -> list[int]:
        """The voters."""
        return list(range(1, self.size + 1))

    @property
    def all_ids(self) -> list[int]:
        return list(range(1, self.size + self.observers + 1))

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node - 1]}"

    def stub(self, node: int) -> raft_pb2_grpc.RaftClientServiceStub:
        return raft_pb2_grpc.RaftClientServiceStub(self.channels[node])

    def start(self, node: int) -> int:
        """Start (or restart, on its port) one node; the byte of its log where its output begins."""
        cmd = [
            sys.executable, "-m", "raft.server", "--node-id", str(node), "--listen", self.address(node),
            "--voters", self.voters, "--observers", self.observer_list,
            "--data-dir", str(self.tmp / f"node{node}"),
            "--election-timeout-ms", str(self.election_timeout_ms),
            "--heartbeat-interval-ms", str(HEARTBEAT_MS),
            "--rpc-timeout-ms", "1000", "--snapshot-every-entries", str(self.snapshot_every),
            "--enable-fault-injection", "--log-level", "INFO",
        ]  # fmt: skip
        log = open(self.log_path(node), "ab")  # noqa: SIM115 (closed with the process)
        start = log.tell()
        self.procs[node] = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return start

    def log_path(self, node: int) -> Path:
        return self.tmp / f"node{node}.log"

    def start_all(self) -> None:
        """Start every node and wait until each listens; on a picked port another process took
        first, stop them all and start again on fresh ports (``BIND_ATTEMPTS``)."""
        start_on_picked_ports(
            lambda: [Started(f"node {n}", self.tmp / f"node{n}", self.log_path(n), self.start(n),
                             self.procs[n].poll, self.procs[n].pid)
                     for n in self.all_ids],
            self.stop_all, self._assign_ports, DEADLINE_S, BIND_ATTEMPTS,
        )  # fmt: skip

    def signal(self, node: int, sig: signal.Signals) -> None:
        self.procs[node].send_signal(sig)
        if sig == signal.SIGKILL:
            self.procs[node].wait(timeout=DEADLINE_S)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=DEADLINE_S)
        for channel in self.channels.values():
            channel.close()

    def wait_serving(self, nodes: list[int] | None = None) -> None:
        nodes = self.all_ids if nodes is None else nodes
        wait_until(lambda: all(self.status(n) is not None for n in nodes), f"nodes {nodes} to serve")

    def alive(self) -> list[int]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def status(self, node: int) -> raft_pb2.StatusResponse | None:
        try:
            return self.stub(node).Status(raft_pb2.StatusRequest(), timeout=0.5)
        except grpc.RpcError:
            return None

    def leader(self, exclude: tuple[int, ...] = ()) -> int:
        def find() -> int:
            for node in self.alive():
                status = self.status(node)
                if node not in exclude and status is not None and status.is_leader:
                    return node
            return 0

        return int(wait_until(find, "a leader"))  # type: ignore[arg-type]

    def propose(self, entries: list[bytes], prefer: int = 0) -> raft_pb2.ProposeResponse | None:
        """One attempt at ``prefer`` (or the current leader); None on a transport error."""
        node = prefer or self.leader()
        try:
            return self.stub(node).Propose(raft_pb2.ProposeRequest(entries=entries), timeout=CALL_TIMEOUT_S)
        except grpc.RpcError:
            return None

    def propose_committed(self, entries: list[bytes], timeout_s: float = DEADLINE_S) -> tuple[int, int]:
        """Retry (following leader hints) until the entries commit; return (first_index, last_index)."""
        deadline = time.monotonic() + timeout_s
        target = self.last_leader  # a stopped (SIGSTOP) node would hold each call for its deadline
        while time.monotonic() < deadline:
            candidates = [target] if target in self.alive() else self.alive()
            for node in candidates:
                reply = self.propose(entries, prefer=node)
                if reply is not None and reply.error_code == ErrorCode.NONE:
                    self.last_leader = node
                    return reply.first_index, reply.last_index
                target = reply.leader.leader_id if reply is not None else 0
                if target:
                    break
            time.sleep(0.01)
        raise AssertionError(f"proposal not committed within {timeout_s} s")

    def read_log(self, node: int) -> list[tuple[int, bytes]]:
        reply = self.stub(node).Read(raft_pb2.ReadRequest(from_index=1), timeout=CALL_TIMEOUT_S)
        return [(r.index, r.data) for r in reply.records]

    def partition(self, node: int, blocked: list[int]) -> None:
        reply = self.stub(node).SetPartition(
            raft_pb2.SetPartitionRequest(blocked_peer_ids=blocked), timeout=CALL_TIMEOUT_S
        )
        assert reply.error_code == ErrorCode.NONE, reply.error_message

    def wait_applied(self, nodes: list[int], index: int) -> None:
        def caught_up() -> bool:
            statuses = [self.status(n) for n in nodes]
            return all(s is not None and s.applied_index >= index for s in statuses)

        wait_until(caught_up, f"nodes {nodes} to apply index {index}")
