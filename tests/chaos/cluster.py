"""The chaos cluster: 3 controllers + 3 brokers (``LocalCluster``) behind the fault-injecting proxy.

Every node listens on its own port and *advertises* a proxy port (``NodeSpec.advertised_port``; a
broker's Kafka listener likewise, ``kafka_advertised_port``): controllers dial each other, brokers
dial controllers and each other's replica fetchers dial leaders, all through ``tests.chaos.proxy`` —
so a network partition between any two nodes is one command. Clients (the workload's confluent-kafka
clients, in this process) also go through the proxy but are never partitioned; the proxy can cut
their connections instead of forwarding a Produce answer (``ProxyControl.cut_produce_answers``).

Ports: ``start_proxied`` (every port picked outside the ephemeral range; on a port another process took,
everything is stopped and started again on fresh ports). ``chaos_cluster`` stops everything it
started by pid, even on failure: paused nodes are resumed,
brokers and controllers stopped (SIGKILL after a timeout), the proxy's stdin closed and the proxy
killed if it does not exit.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from proto.runtime.listeners import ADDRESS_IN_USE, pick_ports
from pykraft.cluster import BIND_ATTEMPTS, LocalCluster, NodeSpec, PortsTakenError
from tests.integration.broker.broker_cluster import FAST_OVERRIDES, START_TIMEOUT_S, BrokerCluster

PROXY_TIMEOUT_S = 10.0
# Short protocol timeouts (tests.integration.broker.broker_cluster), with a session timeout of 2 s:
# a pause of a node is "longer than the session timeout" from 3 s on.
CHAOS_OVERRIDES = {**FAST_OVERRIDES, "min.insync.replicas": "2"}


class ProxyPortsTakenError(OSError):
    """Another process serves a port the proxy was to listen on."""


def start_proxied(
    make_cluster: Callable[[], LocalCluster], data_dir: Path
) -> tuple[LocalCluster, ProxyControl]:
    """A ``LocalCluster`` whose every node advertises a proxy port, started behind a started proxy.

    The proxy forwards to fixed ports, so every node (brokers too) gets a port picked outside the
    ephemeral range (``proto.runtime.listeners``). When another process takes one first, everything started
    is stopped by pid and the whole setup starts over on fresh ports (``BIND_ATTEMPTS``)."""
    (data_dir / "logs").mkdir(parents=True, exist_ok=True)
    for attempt in range(1, BIND_ATTEMPTS + 1):
        cluster = make_cluster()
        cluster.plan()
        ports = pick_ports(len(cluster.nodes) + 3 * len(cluster.broker_nodes))
        for spec in cluster.broker_nodes:
            spec.port, spec.kafka_port, spec.kafka_advertised_port = ports.pop(), ports.pop(), ports.pop()
        for spec in cluster.nodes:
            spec.advertised_port = ports.pop()
        routes = [(n.name, n.advertised_port, n.port) for n in cluster.nodes]
        kafka_routes = [(n.name, n.kafka_advertised_port, n.kafka_port) for n in cluster.broker_nodes]
        try:
            proxy = ProxyControl(data_dir, routes, kafka_routes)
        except ProxyPortsTakenError:
            continue
        try:
            cluster.start()
        except PortsTakenError:
            for spec in cluster.nodes:
                cluster.kill_node(spec)
            proxy.close()
            if attempt == BIND_ATTEMPTS:
                raise
            continue
        except BaseException:
            for spec in cluster.nodes:
                cluster.kill_node(spec)
            proxy.close()
            raise
        return cluster, proxy
    raise AssertionError(f"no free ports for the proxied cluster in {BIND_ATTEMPTS} tries")


class ProxyControl:
    """The proxy subprocess and its line protocol (one JSON command, one JSON answer)."""

    def __init__(self, data_dir: Path, routes: list[tuple[str, int, int]],
                 kafka_routes: list[tuple[str, int, int]] = ()) -> None:  # fmt: skip
        cmd = [sys.executable, "-m", "tests.chaos.proxy", "--data-dir", str(data_dir)]
        for name, listen, target in routes:
            cmd += ["--route", f"{name}={listen}:{target}"]
        for name, listen, target in kafka_routes:
            cmd += ["--kafka-route", f"{name}={listen}:{target}"]
        self._log = open(data_dir / "logs" / "proxy.log", "ab")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     cwd=Path(__file__).resolve().parents[2])  # fmt: skip
        self._lock = threading.Lock()
        ready = self._readline()
        if ready != "READY":
            self.close()
            said = Path(self._log.name).read_text(errors="replace")
            if ADDRESS_IN_USE in said:  # another process took a picked port: start_proxied retries
                raise ProxyPortsTakenError(f"the chaos proxy could not bind: {said.strip().splitlines()[-1]}")
            raise AssertionError(f"the chaos proxy did not start (said {ready!r}; see {self._log.name})")

    def _readline(self) -> str:
        """One answer line, or a failure after PROXY_TIMEOUT_S (a reader thread: pipes have no timeout)."""
        assert self.proc.stdout is not None
        out: list[bytes] = []
        reader = threading.Thread(target=lambda: out.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(PROXY_TIMEOUT_S)
        assert out, f"the chaos proxy did not answer within {PROXY_TIMEOUT_S} s"
        return out[0].decode().strip()

    def command(self, **cmd: object) -> dict:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
            answer = json.loads(self._readline())
        assert answer.get("ok"), f"proxy command {cmd} failed: {answer}"
        return answer

    def block(self, pairs: list[tuple[str, str]]) -> None:
        self.command(cmd="block", pairs=[list(p) for p in pairs])

    def heal(self) -> None:
        self.command(cmd="heal")

    def delay(self, pairs: list[tuple[str, str]], ms: int) -> None:
        """Delay everything between each pair by ``ms`` each way (replaces the delayed set)."""
        self.command(cmd="delay", pairs=[list(p) for p in pairs], ms=ms)

    def cut_produce_answers(self, every: int) -> int:
        """Cut the 1st, (every+1)th, ... Produce answer to a client (0: off); returns how many were cut."""
        return self.command(cmd="cut-produce-answers", every=every)["cut"]

    def connections(self) -> dict[str, int]:
        return self.command(cmd="connections")["connections"]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(PROXY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(PROXY_TIMEOUT_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


class ChaosCluster(BrokerCluster):
    """``BrokerCluster`` (admin, describe, leader, ...) plus node faults and the proxy."""

    def __init__(self, cluster: LocalCluster, proxy: ProxyControl) -> None:
        super().__init__(cluster)
        self.proxy = proxy

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def kafka_bootstrap(self) -> str:
        """Kafka clients' ``bootstrap.servers``: the brokers' Kafka listeners, through the proxy."""
        return self.cluster.kafka_bootstrap

    def names(self, role: str | None = None) -> list[str]:
        return [n.name for n in self.cluster.nodes if role is None or n.role == role]

    def spec(self, name: str) -> NodeSpec:
        return self.cluster.node(name)

    def kill(self, name: str) -> None:
        self.cluster.kill_node(self.spec(name))

    def restart(self, name: str) -> None:
        spec = self.spec(name)
        if not self.cluster.is_running(spec):
            self.cluster.start_node(spec)

    def pause(self, name: str) -> None:
        self.cluster.signal_node(self.spec(name), signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self.cluster.signal_node(self.spec(name), signal.SIGCONT)

    def running(self, name: str) -> bool:
        return self.cluster.is_running(self.spec(name))

    def healthy(self, name: str) -> bool:
        return self.cluster.healthy(self.spec(name))

    def all_healthy(self) -> bool:
        return all(self.cluster.healthy(n) for n in self.cluster.nodes)

    def active_controller_name(self) -> str | None:
        leader = self.admin.describe_quorum().leader_id
        return f"controller-{leader}" if leader > 0 else None


@contextlib.contextmanager
def chaos_cluster(data_dir: Path, **overrides: str) -> Iterator[ChaosCluster]:
    cluster, proxy = start_proxied(
        lambda: LocalCluster(data_dir, controllers=3, brokers=3, overrides={**CHAOS_OVERRIDES, **overrides}),
        data_dir,
    )
    chaos: ChaosCluster | None = None
    try:
        chaos = ChaosCluster(cluster, proxy)
        cluster.wait_until(chaos.all_healthy, START_TIMEOUT_S, "every node healthy")
        yield chaos
    finally:
        if chaos is not None:
            chaos.close()
        for spec in cluster.nodes:  # SIGSTOPped nodes cannot handle SIGTERM: wake them first
            cluster.signal_node(spec, signal.SIGCONT)
        with contextlib.suppress(Exception):
            proxy.heal()
        cluster.down(timeout_s=15.0)
        for spec in cluster.nodes:
            cluster.kill_node(spec)
        proxy.close()
