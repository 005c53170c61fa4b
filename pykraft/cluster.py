"""The local cluster: controllers and brokers as processes on 127.0.0.1, the embedded default.

``pykraft cluster up`` starts ``--controllers`` controller processes (one Raft quorum) and
``--brokers`` broker processes under one data directory, one log file per process
(``DATA/logs/<name>.log``) and a state file (``DATA/cluster.json``) recording each process's role,
node id, address and pid. ``status`` reads it and probes each node's gRPC health service; ``down``
stops brokers first (SIGTERM: controlled shutdown), then controllers, and SIGKILLs what is still
running after a timeout. Processes are always addressed by the pid we recorded, after checking the
pid still belongs to a process started with this data directory (pids are reused).

Tests use ``LocalCluster`` directly: the same code starts, kills (any signal), restarts and stops
nodes, so the integration tests exercise exactly what users run.

A broker also serves the Kafka protocol on ``kafka_port`` (``--listeners PLAINTEXT://127.0.0.1:PORT``);
``kafka_bootstrap`` lists them for Kafka clients (confluent-kafka's ``bootstrap.servers``).

A node listens on ``port``; others dial ``advertised_port`` when it is set (e.g. a fault-injecting TCP
proxy forwarding to ``port``): it goes into the controllers' ``--voters``, the brokers'
``--controllers`` and ``--advertised-listener``, and the bootstrap. Health probes use the listen port.
Likewise a broker's ``kafka_advertised_port``, when set, is the Kafka listener it advertises (Metadata
answers, ``kafka_bootstrap``) in front of a fixed ``kafka_port``.

Ports (``proto.listeners``): no port is picked and hoped for. Brokers and metrics endpoints listen on
port 0 and the launcher reads the ports they got from their ``LISTENING`` / ``METRICS`` lines (a
restarted broker asks for its old port again, so its endpoint stays). Controllers must know each
other's addresses before any starts, so they get ports picked outside the kernel's ephemeral range; if
another process took one first, the controller exits saying so and ``start`` restarts the quorum on
fresh ports (``BIND_ATTEMPTS``). Each start waits until the node listens (``BIND_TIMEOUT_S``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from proto import listeners, serving
from proto.metrics import METRICS_OFF, PICK_FREE_PORT

STATE_FILE = "cluster.json"
FIRST_CONTROLLER_ID = 1
FIRST_BROKER_ID = 101
STOP_TIMEOUT_S = 30.0
BIND_TIMEOUT_S = 60.0  # from process start to LISTENING (imports on a loaded 2-core machine)
BIND_ATTEMPTS = 5
METRICS_PREFIX = "METRICS "
KAFKA_LISTENING_PREFIX = "KAFKA_LISTENING "  # broker.server's line (not imported: the CLI stays light)


@dataclass
class NodeSpec:
    role: str  # "controller" or "broker"
    node_id: int
    port: int  # 0 until a node started on port 0 reported the port it got
    pid: int = 0
    metrics_port: int = 0  # Prometheus /metrics on 127.0.0.1 (proto.metrics), as reported; -1: off
    advertised_port: int = 0  # the port other nodes and clients dial; 0 = port
    kafka_port: int = 0  # brokers: the Kafka listener (PLAINTEXT), as reported; 0 until then
    kafka_advertised_port: int = 0  # brokers: the port Kafka clients and followers dial; 0 = kafka_port

    @property
    def name(self) -> str:
        return f"{self.role}-{self.node_id}"

    @property
    def address(self) -> str:
        """Where other nodes and clients reach this node (its advertised listener)."""
        return f"127.0.0.1:{self.advertised_port or self.port}"

    @property
    def listen_address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def kafka_address(self) -> str:
        """The broker's Kafka listener, for Kafka clients ("" for a controller)."""
        port = self.kafka_advertised_port or self.kafka_port
        return f"127.0.0.1:{port}" if port else ""


@dataclass
class LocalCluster:
    data_dir: Path
    controllers: int = 3
    brokers: int = 3
    # Kafka-named settings passed to every process as ``--override key=value``.
    overrides: dict[str, str] = field(default_factory=dict)
    nodes: list[NodeSpec] = field(default_factory=list)
    log_level: str = ""  # every process's --log-level ("": the processes' default, WARNING)
    # Popen handles of the processes this object started (none after ``load``): kept so that the
    # children are reaped (no zombies, no ResourceWarning) when they stop.
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False, compare=False)

    # ---- layout --------------------------------------------------------------------------------

    def plan(self) -> None:
        """Controllers get picked ports (every voter must know the others' before any starts);
        brokers and every metrics endpoint listen on port 0 and report what they got."""
        assert not self.nodes, "plan() once per cluster"
        for i, port in enumerate(listeners.pick_ports(self.controllers)):
            self.nodes.append(NodeSpec("controller", FIRST_CONTROLLER_ID + i, port))
        for i in range(self.brokers):
            self.nodes.append(NodeSpec("broker", FIRST_BROKER_ID + i, 0))

    def node(self, name: str) -> NodeSpec:
        for spec in self.nodes:
            if spec.name == name:
                return spec
        raise KeyError(f"no node named {name!r}; nodes are {[n.name for n in self.nodes]}")

    @property
    def controller_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.role == "controller"]

    @property
    def broker_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.role == "broker"]

    @property
    def voters(self) -> str:
        return ",".join(f"{n.node_id}@{n.address}" for n in self.controller_nodes)

    @property
    def controller_addresses(self) -> str:
        return ",".join(n.address for n in self.controller_nodes)

    @property
    def bootstrap(self) -> str:
        nodes = self.broker_nodes or self.controller_nodes
        return ",".join(n.address for n in nodes)

    @property
    def kafka_bootstrap(self) -> str:
        """``bootstrap.servers`` for Kafka clients: every broker's Kafka listener."""
        return ",".join(n.kafka_address for n in self.broker_nodes if n.kafka_address)

    def log_path(self, spec: NodeSpec) -> Path:
        return self.data_dir / "logs" / f"{spec.name}.log"

    def command(self, spec: NodeSpec) -> list[str]:
        cmd = [sys.executable, "-m", "pykraft.cli", spec.role, "--node-id", str(spec.node_id),
               "--listen", spec.listen_address, "--data-dir", str(self.data_dir / spec.name),
               "--metrics-port", str(METRICS_OFF if spec.metrics_port == METRICS_OFF else PICK_FREE_PORT)]
        if spec.kafka_advertised_port:  # both listeners advertised (e.g. both behind a proxy)
            cmd += ["--advertised-listener", f"GRPC://{spec.address},PLAINTEXT://{spec.kafka_address}"]
        elif spec.advertised_port:
            cmd += ["--advertised-listener", spec.address]
        if spec.role == "controller":
            cmd += ["--voters", self.voters]
        else:
            cmd += ["--controllers", self.controller_addresses]
            # Port 0 the first time; a restarted broker keeps the port clients know.
            cmd += ["--listeners", f"PLAINTEXT://127.0.0.1:{spec.kafka_port}"]
        for key, value in sorted(self.overrides.items()):
            cmd += ["--override", f"{key}={value}"]
        if self.log_level:
            cmd += ["--log-level", self.log_level]
        return cmd

    # ---- process control ----------------------------------------------------------------------

    def _spawn(self, spec: NodeSpec) -> int:
        """Start the process; the byte of its log file where its output begins."""
        assert not self.is_running(spec), f"{spec.name} is already running as pid {spec.pid}"
        self.log_path(spec).parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path(spec), "ab") as log:
            start = log.tell()
            proc = subprocess.Popen(
                self.command(spec), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=self.data_dir,
            )
        spec.pid = proc.pid
        self._procs[spec.name] = proc
        return start

    def _repick_controller_ports(self) -> None:
        if any(n.advertised_port for n in self.controller_nodes):  # a proxy forwards to the old ports:
            raise PortsTakenError("a controller's port was taken; start the proxy and cluster again")
        for spec, port in zip(self.controller_nodes, listeners.pick_ports(self.controllers), strict=True):
            spec.port = port

    def _await_listening(self, spec: NodeSpec, start: int) -> None:
        """Wait for the node's ``LISTENING`` (and ``METRICS``) lines; record the ports it reports.
        Raises ``listeners.PortTakenError`` when another process serves one of its ports."""
        proc = self._procs[spec.name]
        try:
            spec.port = listeners.wait_listening(
                self.log_path(spec), start, proc.poll, BIND_TIMEOUT_S, spec.name
            )
        except listeners.NotListeningError as exc:
            raise ClusterError(str(exc)) from None
        if spec.metrics_port != METRICS_OFF:
            spec.metrics_port = _metrics_port(self.log_path(spec), start)
        if spec.role == "broker" and not spec.kafka_advertised_port:  # else it is fixed, and the
            spec.kafka_port = _kafka_port(self.log_path(spec), start)  # line names the advertised one
        self.save()

    def start_node(self, spec: NodeSpec) -> None:
        """Start (or restart) one node and wait until it listens. A restarted node keeps its port,
        which others know; if another process took it meanwhile, a broker that nobody reaches
        through a fixed advertised port moves to a port the kernel picks, anything else fails."""
        try:
            self._await_listening(spec, self._spawn(spec))
        except listeners.PortTakenError as exc:
            if (spec.role == "broker" and spec.kafka_port and not spec.kafka_advertised_port
                    and f":{spec.kafka_port}:" in str(exc)):  # fmt: skip
                # The Kafka listener's port came from the kernel's ephemeral range, which any
                # outgoing connection may take; the broker registers wherever it lands, and Kafka
                # clients find it through Metadata.
                spec.kafka_port = 0
                self.start_node(spec)
                return
            if spec.role != "broker" or spec.advertised_port:
                raise PortsTakenError(f"cannot start {spec.name} on port {spec.port}: {exc}") from None
            spec.port = spec.kafka_port = 0
            self._await_listening(spec, self._spawn(spec))

    def start(self) -> None:
        """Start every node: controllers first, all at once, then brokers. A controller whose picked
        port another process took restarts the quorum on fresh ports (up to ``BIND_ATTEMPTS``)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.nodes:
            self.plan()
        starts: dict[str, int] = {}  # log offsets of the latest attempt

        def spawn_controllers() -> list[listeners.Started]:
            starts.update({n.name: self._spawn(n) for n in self.controller_nodes})
            return [listeners.Started(n.name, self.log_path(n), starts[n.name], self._procs[n.name].poll)
                    for n in self.controller_nodes]  # fmt: skip

        try:
            listeners.start_on_picked_ports(
                spawn_controllers, lambda: [self.kill_node(n) for n in self.controller_nodes],
                self._repick_controller_ports, BIND_TIMEOUT_S, BIND_ATTEMPTS,
            )  # fmt: skip
        except listeners.PortTakenError as exc:
            raise PortsTakenError(f"controllers: {exc} ({BIND_ATTEMPTS} attempts)") from None
        for spec in self.controller_nodes:
            self._await_listening(spec, starts[spec.name])  # records what they report (metrics ports)
        starts = {spec.name: self._spawn(spec) for spec in self.broker_nodes}
        for spec in self.broker_nodes:
            try:
                self._await_listening(spec, starts[spec.name])
            except listeners.PortTakenError:
                self.start_node(spec)  # its fixed port was taken: start_node decides what to do
        self.save()

    def is_running(self, spec: NodeSpec) -> bool:
        """True when ``spec.pid`` is alive and is still the process we started (not a reused pid)."""
        if spec.pid <= 0:
            return False
        proc = self._procs.get(spec.name)
        if proc is not None and proc.pid == spec.pid:
            return proc.poll() is None
        try:
            cmdline = Path(f"/proc/{spec.pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{spec.pid}/stat").read_text()
        except OSError:
            return False
        zombie = stat.rsplit(")", 1)[-1].split()[0] == "Z"
        if zombie:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(spec.pid, os.WNOHANG)
            return False
        return str(self.data_dir / spec.name).encode() in cmdline

    def exit_code(self, spec: NodeSpec) -> int | None:
        """The exit status of a process this object started, once it ended (None: running or unknown)."""
        proc = self._procs.get(spec.name)
        return proc.poll() if proc is not None and proc.pid == spec.pid else None

    def signal_node(self, spec: NodeSpec, sig: signal.Signals) -> None:
        if self.is_running(spec):
            os.kill(spec.pid, sig)

    def wait_stopped(self, spec: NodeSpec, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.is_running(spec):
                return True
            time.sleep(0.05)
        return not self.is_running(spec)

    def kill_node(self, spec: NodeSpec) -> None:
        self.signal_node(spec, signal.SIGKILL)
        self.wait_stopped(spec, 10.0)

    def stop_node(self, spec: NodeSpec, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM (graceful: controlled shutdown), then SIGKILL after ``timeout_s``.

        Returns True when the node stopped gracefully.
        """
        self.signal_node(spec, signal.SIGTERM)
        if self.wait_stopped(spec, timeout_s):
            return True
        self.kill_node(spec)
        return False

    def down(self, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, bool]:
        """Stop brokers first, then controllers; returns name -> stopped gracefully."""
        graceful = {}
        for spec in [*self.broker_nodes, *self.controller_nodes]:
            if self.is_running(spec):
                graceful[spec.name] = self.stop_node(spec, timeout_s)
        self.save()
        return graceful

    # ---- readiness ----------------------------------------------------------------------------

    def healthy(self, spec: NodeSpec) -> bool:
        return self.is_running(spec) and serving.check_health(spec.listen_address, timeout_s=0.5)

    def wait_until(self, condition: Callable[[], bool], timeout_s: float, what: str,
                   progress: Callable[[str], None] | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        next_note = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            if condition():
                return
            dead = [n.name for n in self.nodes if n.pid and not self.is_running(n)]
            if dead and what != "stopped":
                logs = "; ".join(str(self.log_path(self.node(name))) for name in dead)
                raise ClusterError(f"while waiting for {what}: {', '.join(dead)} exited (see {logs})")
            if progress and time.monotonic() >= next_note:
                progress(f"still waiting for {what}...")
                next_note = time.monotonic() + 5.0
            time.sleep(0.1)
        raise ClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}")

    # ---- state file ---------------------------------------------------------------------------

    def save(self) -> None:
        state = {"controllers": self.controllers, "brokers": self.brokers, "overrides": self.overrides,
                 "log_level": self.log_level, "nodes": [asdict(n) for n in self.nodes]}
        tmp = self.data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.data_dir / STATE_FILE)

    @classmethod
    def load(cls, data_dir: Path) -> LocalCluster:
        path = data_dir / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise ClusterError(
                f"no cluster in {data_dir} (no {STATE_FILE}); start one with `pykraft cluster up`"
            ) from None
        except (OSError, ValueError) as exc:
            raise ClusterError(f"cannot read {path}: {exc}") from exc
        return cls(data_dir=data_dir, controllers=state["controllers"], brokers=state["brokers"],
                   overrides=state["overrides"], nodes=[NodeSpec(**n) for n in state["nodes"]],
                   log_level=state.get("log_level", ""))


class ClusterError(Exception):
    """The local cluster could not be started, found or stopped; the message says why."""


class PortsTakenError(ClusterError):
    """Other processes took the ports the cluster was to use, and it could not pick others itself
    (fixed advertised ports, or out of attempts): start it again with fresh ports."""


def _kafka_port(log_path: Path, start: int) -> int:
    """The port of the broker's ``KAFKA_LISTENING PLAINTEXT://HOST:PORT`` line after ``start`` (printed
    before ``LISTENING``, so it is there once that one is); 0 when there is none."""
    with open(log_path, "rb") as f:
        f.seek(start)
        for line in f.read().decode(errors="replace").splitlines():
            if line.startswith(KAFKA_LISTENING_PREFIX + "PLAINTEXT://"):
                return int(line.rsplit(":", 1)[1])
    return 0


def _metrics_port(log_path: Path, start: int) -> int:
    """The port of the ``METRICS http://HOST:PORT/metrics`` line after ``start`` (printed right after
    ``LISTENING``); METRICS_OFF when there is none."""
    with open(log_path, "rb") as f:
        f.seek(start)
        for line in f.read().decode(errors="replace").splitlines():
            if line.startswith(METRICS_PREFIX):
                return int(line[len(METRICS_PREFIX) :].rsplit(":", 1)[1].split("/", 1)[0])
    return METRICS_OFF
