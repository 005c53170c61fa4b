"""Helpers: three controller processes on 127.0.0.1, and fake brokers driven through ControllerService.

Every process is started by this fixture and stopped by its pid in a finalizer, even on failure.
Waits poll a condition against a deadline; nothing sleeps a fixed time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc

from proto import admin_pb2, admin_pb2_grpc, controller_pb2, controller_pb2_grpc, metadata_pb2
from proto.runtime.listeners import Started, pick_ports, start_on_picked_ports

ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 30.0
BIND_ATTEMPTS = 5


def wait_until(condition: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = condition()
        except grpc.RpcError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


class ControllerCluster:
    def __init__(
        self, tmp: Path, session_timeout_ms: int, count: int = 3, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.tmp = tmp
        self.extra_args = extra_args
        self.count = count
        self._assign_ports()
        self.session_timeout_ms = session_timeout_ms
        self.procs: dict[int, subprocess.Popen] = {}
        self._channels: dict[int, grpc.Channel] = {}

    def _assign_ports(self) -> None:
        """Ports picked outside the ephemeral range (``proto.runtime.listeners``): voters must know them
        all."""
        self.ports = dict(enumerate(pick_ports(self.count), start=1))
        self.voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.ports.items())

    def start_all(self) -> None:
        """Start every controller and wait until each listens; on a picked port another process took
        first, stop them all and start again on fresh ports (``BIND_ATTEMPTS``)."""
        start_on_picked_ports(
            lambda: [Started(f"controller {i}", self.tmp / f"c{i}", self.log_path(i), self.start(i),
                             self.procs[i].poll, self.procs[i].pid)
                     for i in self.ports],
            self.stop_all, self._assign_ports, START_TIMEOUT_S, BIND_ATTEMPTS,
        )  # fmt: skip

    def log_path(self, node_id: int) -> Path:
        return self.tmp / f"controller-{node_id}.log"

    def address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.ports[node_id]}"

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(i) for i in self.ports)

    def start(self, node_id: int) -> int:
        """Start (or restart, on its port) one controller; the byte of its log where its output begins."""
        log = open(self.log_path(node_id), "ab")  # noqa: SIM115 - owned by the process
        start = log.tell()
        cmd = [
            sys.executable, "-m", "metadata.server", "--node-id", str(node_id),
            "--listen", self.address(node_id),
            "--voters", self.voters, "--data-dir", str(self.tmp / f"c{node_id}"),
            "--broker-session-timeout-ms", str(self.session_timeout_ms),
            "--election-timeout-ms", "500", "--heartbeat-interval-ms", "50", "--log-level", "INFO",
            *self.extra_args,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.procs[node_id] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        log.close()
        return start

    def kill(self, node_id: int, sig: signal.Signals = signal.SIGKILL) -> None:
        proc = self.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            proc.wait(timeout=20)
        self._channels.pop(node_id, None)

    def stop_all(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=20)

    def channel(self, node_id: int) -> grpc.Channel:
        if node_id not in self._channels:
            self._channels[node_id] = grpc.insecure_channel(self.address(node_id))
        return self._channels[node_id]

    def admin(self, node_id: int) -> admin_pb2_grpc.AdminServiceStub:
        return admin_pb2_grpc.AdminServiceStub(self.channel(node_id))

    def controller(self, node_id: int) -> controller_pb2_grpc.ControllerServiceStub:
        return controller_pb2_grpc.ControllerServiceStub(self.channel(node_id))

    def leader(self, via: int | None = None) -> int:
        """The active controller's id, asked through a live node; waits for one to exist."""

        def ask() -> int:
            dead = {i: p.returncode for i, p in self.procs.items() if p.poll() is not None}
            assert len(dead) < len(self.procs), f"every controller exited {dead}:\n{self.log_text()}"
            for node_id in [via] if via else list(self.procs):
                if self.procs[node_id].poll() is not None:
                    continue
                try:
                    r = self.admin(node_id).DescribeQuorum(admin_pb2.DescribeQuorumRequest(), timeout=2)
                except grpc.RpcError:
                    continue
                if r.error.code == 0 and r.leader_id:
                    return r.leader_id
            return 0

        return wait_until(ask, START_TIMEOUT_S, "an active controller")

    def log_text(self) -> str:
        return "\n".join(
            f"--- controller {i} ---\n"
            + (self.tmp / f"controller-{i}.log").read_text(errors="replace")[-3000:]
            for i in self.procs
        )


class FakeBroker:
    """A broker as the controller sees it: registration and heartbeats through ControllerService."""

    def __init__(self, cluster: ControllerCluster, broker_id: int, via: int, rack: str = "") -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.via = via
        self.rack = rack
        self.broker_epoch = 0
        self.metadata_offset = 0

    def stub(self) -> controller_pb2_grpc.ControllerServiceStub:
        return self.cluster.controller(self.via)

    def register(self) -> None:
        request = controller_pb2.RegisterBrokerRequest(
            broker_id=self.broker_id,
            incarnation_id=uuid.uuid4().hex,
            endpoints=[metadata_pb2.Endpoint(name="BROKER", host="127.0.0.1", port=20000 + self.broker_id)],
            rack=self.rack,
        )

        def attempt():
            r = self.stub().RegisterBroker(request, timeout=5)
            return r if r.error.code == 0 else None

        self.broker_epoch = wait_until(
            attempt, START_TIMEOUT_S, f"registration of broker {self.broker_id}"
        ).broker_epoch
        self.metadata_offset = self.broker_epoch  # a real broker would have fetched up to here

    def heartbeat(self, want_shut_down: bool = False) -> controller_pb2.BrokerHeartbeatResponse:
        request = controller_pb2.BrokerHeartbeatRequest(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.metadata_offset,
            want_shut_down=want_shut_down,
        )
        return self.stub().BrokerHeartbeat(request, timeout=5)

    def unfence(self) -> None:
        def attempt():
            r = self.heartbeat()
            return r.error.code == 0 and not r.is_fenced

        wait_until(attempt, START_TIMEOUT_S, f"broker {self.broker_id} unfenced")


class Heartbeater:
    """Heartbeats the brokers in ``alive`` every ``interval_s`` on a thread, as live brokers do;
    remove a broker from ``alive`` to make it go silent. Use as a context manager (always joined)."""

    def __init__(self, brokers: list[FakeBroker], interval_s: float = 0.2) -> None:
        self.alive = {b.broker_id: b for b in brokers}
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-broker-heartbeats", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for broker in list(self.alive.values()):
                with contextlib.suppress(grpc.RpcError):  # a missed beat; the session tolerates a few
                    broker.heartbeat()

    def __enter__(self) -> Heartbeater:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
