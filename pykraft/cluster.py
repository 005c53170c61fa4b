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

Handshake: a node says where it serves in its ready file (``proto.runtime.ready_file``, in its data directory,
written atomically), never in its log; the launcher deletes the file before it starts a node and
waits for a file written by the pid it started, with a deadline (``BIND_TIMEOUT_S``). When the process
exits first, the error names its log and quotes the last lines.

Ports (``proto.runtime.listeners``): no port is picked and hoped for. Brokers and metrics endpoints listen on
port 0 the first time and the launcher records the ports they got from their ready files. A restarted
node asks for its old ports again, so its endpoints stay; a port another process took meanwhile is
given up for one the kernel picks where nobody depends on it (a broker's listeners, any metrics
endpoint), and ``start_node`` returns a note saying so. Controllers must know each other's addresses
before any starts, so they get ports picked outside the kernel's ephemeral range; if another process
took one first, the controller exits saying so and ``start`` restarts the quorum on fresh ports
(``BIND_ATTEMPTS``); a restarted controller must get its own port back (every voter dials it).

A start that fails or is interrupted (KeyboardInterrupt included) stops every process it started
before the exception propagates: nothing outlives a failed ``start``.

Operating one node (``pykraft cluster stop|start|restart NODE``): ``find_node`` accepts a node id or a
name; ``running_pid`` is the pid recorded in the state file, or the one in the node's ready file when
another launcher started it (checked the same way), so ``status`` and ``down`` see every node of the
cluster whoever started it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from proto.runtime import listeners, ready_file, serving
from proto.runtime.metrics import METRICS_OFF, PICK_FREE_PORT

STATE_FILE = "cluster.json"
LOCK_FILE = "cluster.lock"
FIRST_CONTROLLER_ID = 1
FIRST_BROKER_ID = 101
STOP_TIMEOUT_S = 30.0
BIND_TIMEOUT_S = 60.0  # from process start to its ready file (imports on a loaded 2-core machine)
BIND_ATTEMPTS = 5
ABORT_STOP_TIMEOUT_S = 5.0  # a failed or interrupted start: SIGTERM, then SIGKILL after this
LOG_TAIL_LINES = 5  # quoted from the log of a process that exited while we waited for it


@dataclass
class NodeSpec:
    role: str  # "controller" or "broker"
    node_id: int
    port: int  # 0 until a node started on port 0 reported the port it got
    pid: int = 0
    metrics_port: int = 0  # Prometheus /metrics on 127.0.0.1 (proto.runtime.metrics), as reported; -1: off
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
    def metrics_url(self) -> str:
        """The Prometheus endpoint ("" when off or not known yet)."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics" if self.metrics_port > 0 else ""

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
    log_level: str = ""  # every process's --log-level ("": the processes' default, INFO)
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

    def node_dir(self, spec: NodeSpec) -> Path:
        return self.data_dir / spec.name

    def find_node(self, ref: str) -> NodeSpec:
        """The node named by ``ref``: a node id (``101``, ``2``) or a name (``broker-101``)."""
        for spec in self.nodes:
            if ref in (str(spec.node_id), spec.name):
                return spec
        known = ", ".join(f"{n.node_id} ({n.role})" for n in self.nodes)
        raise ClusterError(f"no node {ref!r} in the cluster at {self.data_dir}; its nodes are {known}")

    def command(self, spec: NodeSpec) -> list[str]:
        cmd = [sys.executable, "-m", "pykraft.cli", spec.role, "--node-id", str(spec.node_id),
               "--listen", spec.listen_address, "--data-dir", str(self.data_dir / spec.name),
               # Off, the port it had (a restart keeps its endpoint), or PICK_FREE_PORT the first time.
               "--metrics-port", str(spec.metrics_port)]
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
        """Start the process; the byte of its log file where its output begins. Its pid is saved at
        once, so that a launcher that dies meanwhile leaves a state file ``down`` can act on."""
        assert not self.is_running(spec), f"{spec.name} is already running as pid {spec.pid}"
        self.log_path(spec).parent.mkdir(parents=True, exist_ok=True)
        self.node_dir(spec).mkdir(parents=True, exist_ok=True)
        ready_file.remove(self.node_dir(spec))  # an earlier run's file says nothing about this one
        with open(self.log_path(spec), "ab") as log:
            start = log.tell()
            proc = subprocess.Popen(
                self.command(spec), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=self.data_dir,
            )
        spec.pid = proc.pid
        self._procs[spec.name] = proc
        self.save()
        return start

    def _repick_controller_ports(self) -> None:
        if any(n.advertised_port for n in self.controller_nodes):  # a proxy forwards to the old ports:
            raise PortsTakenError("a controller's port was taken; start the proxy and cluster again")
        for spec, port in zip(self.controller_nodes, listeners.pick_ports(self.controllers), strict=True):
            spec.port = port

    def _started(self, spec: NodeSpec, start: int) -> listeners.Started:
        proc = self._procs[spec.name]
        return listeners.Started(spec.name, self.node_dir(spec), self.log_path(spec), start, proc.poll,
                                 proc.pid)

    def _await_listening(self, spec: NodeSpec, start: int) -> None:
        """Wait for the node's ready file; record the ports it reports. Raises
        ``listeners.PortTakenError`` when another process serves one of its ports."""
        started = self._started(spec, start)
        try:
            ready = listeners.wait_listening(started.data_dir, started.output, start, started.exit_code,
                                             BIND_TIMEOUT_S, spec.name, started.pid)  # fmt: skip
        except listeners.NotListeningError as exc:
            raise self._not_listening(spec, start, exc) from None
        self._record(spec, ready)

    def _not_listening(self, spec: NodeSpec, start: int, exc: Exception) -> ClusterError:
        code = self.exit_code(spec)
        if code is None:  # still running, silent past the deadline
            return ClusterError(f"{exc}; the end of its log:{self.log_tail(spec, start)}")
        return ClusterError(f"{spec.name} exited with status {code} before it listened; the end of "
                            f"{self.log_path(spec)}:{self.log_tail(spec, start)}")  # fmt: skip

    def _record(self, spec: NodeSpec, ready: ready_file.ReadyFile) -> None:
        self._apply_ready(spec, ready)
        self.save()

    def _apply_ready(self, spec: NodeSpec, ready: ready_file.ReadyFile) -> None:
        spec.port = ready.port
        if spec.metrics_port != METRICS_OFF:
            spec.metrics_port = ready.metrics_port or METRICS_OFF
        if spec.role == "broker" and not spec.kafka_advertised_port:  # else it is fixed, and the file
            spec.kafka_port = ready.kafka_port()  # names the advertised one

    def release_taken_ports(self, spec: NodeSpec) -> list[str]:
        """Before a restart: give up each recorded port of ``spec`` that another process serves now
        where nobody depends on it (the kernel picks another); what changed, one note each. A port
        others dial (a controller's, or one behind a fixed advertised port) is kept: the start fails
        naming it."""
        notes = []
        if spec.metrics_port > 0 and not listeners.is_free(spec.metrics_port):
            notes.append(f"its metrics port {spec.metrics_port} is taken by another process: "
                         "the kernel picks one")
            spec.metrics_port = PICK_FREE_PORT
        if spec.role != "broker":
            return notes
        if spec.kafka_port and not spec.kafka_advertised_port and not listeners.is_free(spec.kafka_port):
            notes.append(f"its Kafka port {spec.kafka_port} is taken by another process: the kernel "
                         "picks one (Kafka clients find it through Metadata)")
            spec.kafka_port = 0
        if spec.port and not spec.advertised_port and not listeners.is_free(spec.port):
            notes.append(f"its gRPC port {spec.port} is taken by another process: the kernel picks one")
            spec.port = 0
        return notes

    def start_node(self, spec: NodeSpec) -> list[str]:
        """Start (or restart) one node and wait until it listens; notes on any port that changed. A
        restarted node keeps its ports, which others know; a port another process took meanwhile moves
        where nobody depends on it (``release_taken_ports``), else the start fails naming it."""
        notes = self.release_taken_ports(spec)
        before = (spec.port, spec.kafka_port, spec.metrics_port)
        try:
            self._start_node(spec)
        except BaseException:
            self._abort([spec])
            raise
        after = (spec.port, spec.kafka_port, spec.metrics_port)
        for what, old, new in zip(("gRPC", "Kafka", "metrics"), before, after, strict=True):
            if old > 0 and new != old:  # a port released above is 0 in ``before``
                notes.append(f"its {what} port {old} was taken while it started: it now listens on {new}")
        return notes

    def _start_node(self, spec: NodeSpec) -> None:
        try:
            self._await_listening(spec, self._spawn(spec))
        except listeners.PortTakenError as exc:
            if spec.metrics_port > 0 and f"--metrics-port {spec.metrics_port}:" in str(exc):
                spec.metrics_port = PICK_FREE_PORT  # taken between the check and the bind
                self._start_node(spec)
                return
            if (spec.role == "broker" and spec.kafka_port and not spec.kafka_advertised_port
                    and f":{spec.kafka_port}:" in str(exc)):  # fmt: skip
                # The Kafka listener's port came from the kernel's ephemeral range, which any
                # outgoing connection may take; the broker registers wherever it lands, and Kafka
                # clients find it through Metadata.
                spec.kafka_port = 0
                self._start_node(spec)
                return
            if spec.role != "broker" or spec.advertised_port:
                raise PortsTakenError(f"cannot start {spec.name} on port {spec.port}: {exc}") from None
            spec.port = spec.kafka_port = 0
            try:
                self._await_listening(spec, self._spawn(spec))
            except listeners.PortTakenError as again:  # a port the kernel picked, taken: one line
                raise PortsTakenError(f"cannot start {spec.name}: {again}") from None

    def start(self, on_step: Callable[[str], None] | None = None) -> None:
        """Start every node: controllers first, all at once, then brokers. A controller whose picked
        port another process took restarts the quorum on fresh ports (up to ``BIND_ATTEMPTS``).
        ``on_step(step)`` is called as each step completes. Any failure (KeyboardInterrupt included)
        stops every process started here before it propagates."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.nodes:
            self.plan()
        try:
            self._start_all(on_step or (lambda step: None))
        except BaseException:
            self._abort(self.nodes)
            raise
        self.save()

    def _start_all(self, on_step: Callable[[str], None]) -> None:
        starts: dict[str, int] = {}  # log offsets of the latest attempt

        def spawn_controllers() -> list[listeners.Started]:
            starts.update({n.name: self._spawn(n) for n in self.controller_nodes})
            return [self._started(n, starts[n.name]) for n in self.controller_nodes]

        try:
            ready = listeners.start_on_picked_ports(
                spawn_controllers, lambda: [self.kill_node(n) for n in self.controller_nodes],
                self._repick_controller_ports, BIND_TIMEOUT_S, BIND_ATTEMPTS,
            )  # fmt: skip
        except listeners.PortTakenError as exc:
            raise PortsTakenError(f"controllers: {exc} ({BIND_ATTEMPTS} attempts)") from None
        except listeners.NotListeningError as exc:
            name = str(exc).split(" ", 1)[0]  # the message starts with the Started's name
            raise self._not_listening(self.node(name), starts[name], exc) from None
        for spec, report in zip(self.controller_nodes, ready, strict=True):
            self._record(spec, report)
        on_step("controllers listening")
        if not self.broker_nodes:
            return
        starts = {spec.name: self._spawn(spec) for spec in self.broker_nodes}
        for spec in self.broker_nodes:
            try:
                self._await_listening(spec, starts[spec.name])
            except listeners.PortTakenError:
                self._start_node(spec)  # its fixed port was taken: _start_node decides what to do
        on_step("brokers listening")

    def _abort(self, specs: list[NodeSpec]) -> None:
        """Stop what this object started of ``specs`` (a failed or interrupted start)."""
        mine = [spec for spec in specs if spec.name in self._procs and self.is_running(spec)]
        for spec in mine:  # all at once: nothing here is serving anyone yet
            self.signal_node(spec, signal.SIGTERM)
        deadline = time.monotonic() + ABORT_STOP_TIMEOUT_S
        for spec in mine:
            if not self.wait_stopped(spec, max(0.0, deadline - time.monotonic())):
                self.kill_node(spec)
        self.save()

    def log_tail(self, spec: NodeSpec, start: int = 0) -> str:
        """The last lines ``spec`` wrote to its log after byte ``start``, to quote in an error."""
        try:
            with open(self.log_path(spec), "rb") as f:
                f.seek(start)
                lines = f.read().decode(errors="replace").strip().splitlines()[-LOG_TAIL_LINES:]
        except OSError:
            return ""
        return "".join(f"\n    {line}" for line in lines)

    def is_running(self, spec: NodeSpec) -> bool:
        """True when ``spec.pid`` is alive and is still the process we started (not a reused pid)."""
        if spec.pid <= 0:
            return False
        proc = self._procs.get(spec.name)
        if proc is not None and proc.pid == spec.pid:
            return proc.poll() is None
        return self._is_node_process(spec, spec.pid)

    def _is_node_process(self, spec: NodeSpec, pid: int) -> bool:
        """``pid`` is alive and runs ``spec`` (its command line names the node's data directory)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        zombie = stat.rsplit(")", 1)[-1].split()[0] == "Z"
        if zombie:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return False
        # Whole arguments only: /srv/data/cluster/broker-101 is not /data/cluster/broker-101.
        return b"\0" + str(self.node_dir(spec)).encode() + b"\0" in b"\0" + cmdline + b"\0"

    def adopt_running(self) -> list[str]:
        """Take as each node's pid (and ports) what its ready file names when that process runs the node
        and the recorded pid does not (another launcher started it); the names of the nodes adopted.
        Changes this object only: ``save`` to record it."""
        adopted = []
        for spec in self.nodes:
            ready = ready_file.read(self.node_dir(spec))
            if ready is None or ready.pid == spec.pid or self.is_running(spec):
                continue
            if self._is_node_process(spec, ready.pid):
                spec.pid = ready.pid
                self._apply_ready(spec, ready)
                adopted.append(spec.name)
        return adopted

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
                   progress: Callable[[str], None] | None = None, detail: Callable[[], str] | None = None,
                   progress_every_s: float = 5.0, watch: list[NodeSpec] | None = None) -> None:
        """Poll ``condition`` until it holds, at most ``timeout_s``; ``progress`` gets a line every
        ``progress_every_s`` saying how long it has waited (and ``detail()``: what is missing). A node
        of ``watch`` (default: every node started) that exits meanwhile ends the wait with the end of
        its log."""
        started = time.monotonic()
        deadline, next_note = started + timeout_s, started + progress_every_s
        while time.monotonic() < deadline:
            if condition():
                return
            dead = [n for n in (self.nodes if watch is None else watch) if n.pid and not self.is_running(n)]
            if dead:
                names = ", ".join(n.name for n in dead)
                ends = "".join(f"\n  {n.name} (end of {self.log_path(n)}):{self.log_tail(n)}" for n in dead)
                raise ClusterError(f"while waiting for {what}: {names} exited{ends}")
            if progress and time.monotonic() >= next_note:
                missing = f": {detail()}" if detail else ""
                progress(f"waiting for {what}, {time.monotonic() - started:.0f} s{missing}")
                next_note = time.monotonic() + progress_every_s
            time.sleep(0.1)
        missing = f" ({detail()})" if detail else ""
        raise ClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}{missing}")

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


@contextlib.contextmanager
def cluster_lock(data_dir: Path) -> Iterator[None]:
    """Held by a command that changes the cluster at ``data_dir`` (``DATA/cluster.lock``, an flock the
    kernel drops when the process ends): a second one at the same time is refused, naming the first.
    A directory that does not exist is not created (there is no cluster to lock)."""
    if not data_dir.is_dir():
        yield
        return
    with open(data_dir / LOCK_FILE, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise ClusterError(f"another `pykraft cluster` command is changing the cluster in {data_dir} "
                               f"({holder}); wait for it to finish") from None  # fmt: skip
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}: {' '.join(sys.argv[1:3])}")
        lock.flush()
        try:
            yield
        finally:
            lock.truncate(0)
            fcntl.flock(lock, fcntl.LOCK_UN)


class ClusterError(Exception):
    """The local cluster could not be started, found or stopped; the message says why."""


class PortsTakenError(ClusterError):
    """Other processes took the ports the cluster was to use, and it could not pick others itself
    (fixed advertised ports, or out of attempts): start it again with fresh ports."""
