"""No listener shares a port with a live process (issue 14, defect 4).

gRPC enables SO_REUSEPORT by default: a second broker on a running broker's port used to bind it too,
say it was ready and register the same endpoint, and clients reached either broker at random. Every
listener (gRPC with ``grpc.so_reuseport=0``, the metrics endpoint) now refuses a busy port at once with
one line naming the setting and its value, exit status 2, no traceback; the live process keeps serving.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proto.runtime import ready_file, serving
from proto.runtime.listeners import ADDRESS_IN_USE, PortTakenError, pick_port, pick_ports, wait_listening
from pykraft.cluster import LocalCluster
from tests.integration.broker.broker_cluster import FAST_OVERRIDES

pytestmark = pytest.mark.integration
START_TIMEOUT_S = 60.0
REFUSAL_TIMEOUT_S = 30.0


def controller_command(tmp_path: Path, name: str, port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pykraft.cli", "controller", "--node-id", "1", "--listen",
            f"127.0.0.1:{port}", "--voters", f"1@127.0.0.1:{port}", "--data-dir", str(tmp_path / name),
            "--metrics-port", "-1", *extra]  # fmt: skip


def broker_command(tmp_path: Path, listen: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pykraft.cli", "broker", "--node-id", "101", "--listen", listen,
            "--controllers", f"127.0.0.1:{pick_port()}", "--data-dir", str(tmp_path / "broker"),
            *extra]  # fmt: skip


def spawn(command: list[str], output: Path) -> subprocess.Popen:
    """Start ``command`` with its stdout and stderr in ``output`` (read with ``wait_listening``)."""
    with open(output, "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def live_controller(tmp_path: Path) -> Iterator[int]:
    """A one-voter controller on a picked port (picked again if another process took it first)."""
    for _ in range(5):
        port = pick_port()
        output = tmp_path / f"live-{port}.out"
        proc = spawn(controller_command(tmp_path, f"live-{port}", port), output)
        try:
            ready = wait_listening(tmp_path / f"live-{port}", output, 0, proc.poll, START_TIMEOUT_S,
                                   "the live controller", proc.pid)
            assert ready.port == port
        except PortTakenError:
            stop(proc)
            continue
        except BaseException:
            stop(proc)
            raise
        try:
            yield port
        finally:
            stop(proc)
        return
    pytest.fail("no controller could bind a picked port in 5 tries")


def refusal(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=REFUSAL_TIMEOUT_S)


def test_broker_and_controller_refuse_the_port_a_live_controller_serves(
    tmp_path: Path, live_controller: int
) -> None:
    """Defect 4: a busy --listen port is refused with one line; the live controller keeps serving."""
    port = live_controller
    expected = f"--listen 127.0.0.1:{port}: {ADDRESS_IN_USE} (another process serves it)"
    broker = refusal(broker_command(tmp_path, f"127.0.0.1:{port}"))
    controller = refusal(controller_command(tmp_path, "second", port))
    assert (broker.returncode, broker.stderr.splitlines()) == (2, [f"pykraft broker: error: {expected}"])
    assert (controller.returncode, controller.stderr.splitlines()) == (
        2, [f"pykraft controller: error: {expected}"]
    )  # fmt: skip
    assert not ready_file.path_in(tmp_path / "broker").exists()  # neither said it serves
    assert not ready_file.path_in(tmp_path / "second").exists()
    assert serving.check_health(f"127.0.0.1:{port}", timeout_s=5.0)


def test_a_reuseport_listener_is_not_shared_either(tmp_path: Path) -> None:
    """A live listener with SO_REUSEPORT set (what a gRPC server used to be) keeps its port alone."""
    with socket.socket() as live:
        live.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        live.bind(("127.0.0.1", 0))
        live.listen()
        port = live.getsockname()[1]
        done = refusal(broker_command(tmp_path, f"127.0.0.1:{port}"))
        assert done.returncode == 2
        assert done.stderr.splitlines() == [
            f"pykraft broker: error: --listen 127.0.0.1:{port}: {ADDRESS_IN_USE} (another process serves it)"
        ]


@pytest.mark.parametrize("role", ["broker", "controller"])
def test_a_busy_metrics_port_is_refused_naming_the_setting(tmp_path: Path, role: str) -> None:
    with socket.socket() as live:
        live.bind(("127.0.0.1", 0))
        live.listen()
        busy = live.getsockname()[1]
        listen = pick_ports(1)[0]
        extra = ["--metrics-port", str(busy)]
        if role == "broker":
            command = broker_command(tmp_path, f"127.0.0.1:{listen}", *extra)
        else:
            command = [*controller_command(tmp_path, "c", listen)[:-2], *extra]
        done = refusal(command)
        assert done.returncode == 2
        assert done.stderr.splitlines() == [
            f"pykraft {role}: error: --metrics-port {busy}: {ADDRESS_IN_USE} (another process serves it)"
        ]


def test_a_broker_on_port_zero_reports_the_port_it_got(tmp_path: Path) -> None:
    """--listen HOST:0: the kernel picks the port and the broker writes it to its ready file (what
    launchers read)."""
    output = tmp_path / "broker.out"
    proc = spawn(broker_command(tmp_path, "127.0.0.1:0", "--metrics-port", "-1"), output)
    try:
        port = wait_listening(tmp_path / "broker", output, 0, proc.poll, START_TIMEOUT_S, "the broker",
                              proc.pid).port
        assert port > 0
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        stop(proc)


@contextlib.contextmanager
def squatting(port: int) -> Iterator[None]:
    """Another process's listener on ``port`` (SO_REUSEADDR only, as servers bind)."""
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        yield


@contextlib.contextmanager
def stopped_at_exit(cluster: LocalCluster) -> Iterator[LocalCluster]:
    try:
        yield cluster
    finally:
        cluster.down(timeout_s=15.0)
        for spec in cluster.nodes:
            cluster.kill_node(spec)


def test_the_launcher_restarts_the_quorum_on_fresh_ports_when_a_picked_one_is_taken(tmp_path: Path) -> None:
    """Issue 14 §3: a picked port another process binds first is retried, not hoped for."""
    cluster = LocalCluster(tmp_path, controllers=3, brokers=1, overrides=dict(FAST_OVERRIDES))
    cluster.plan()
    taken = cluster.controller_nodes[1].port
    with squatting(taken), stopped_at_exit(cluster):
        cluster.start()
        cluster.wait_until(lambda: all(cluster.healthy(n) for n in cluster.nodes), START_TIMEOUT_S, "healthy")
        assert taken not in [n.port for n in cluster.nodes]
        assert ADDRESS_IN_USE in cluster.log_path(cluster.controller_nodes[1]).read_text()
        broker = cluster.broker_nodes[0]
        assert broker.port > 0 and broker.metrics_port > 0  # port 0: what the broker reported


def test_a_restarted_broker_whose_port_was_taken_moves_to_a_fresh_one(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, controllers=1, brokers=1, overrides=dict(FAST_OVERRIDES))
    with stopped_at_exit(cluster):
        cluster.start()
        broker = cluster.broker_nodes[0]
        cluster.wait_until(lambda: cluster.healthy(broker), START_TIMEOUT_S, "broker healthy")
        cluster.kill_node(broker)
        old = broker.port
        with squatting(old):
            cluster.start_node(broker)
            assert broker.port not in (0, old)
            cluster.wait_until(lambda: cluster.healthy(broker), START_TIMEOUT_S, "broker healthy again")


def test_a_restarted_broker_whose_kafka_port_was_taken_keeps_its_grpc_port(tmp_path: Path) -> None:
    """The Kafka listener's first port came from the kernel's ephemeral range, where any outgoing
    connection may land: a restart that finds it taken moves only the Kafka listener (clients find it
    through Metadata), and the broker keeps the gRPC port others know (a chaos proxy forwards to it)."""
    cluster = LocalCluster(tmp_path, controllers=1, brokers=1, overrides=dict(FAST_OVERRIDES))
    with stopped_at_exit(cluster):
        cluster.start()
        broker = cluster.broker_nodes[0]
        cluster.wait_until(lambda: cluster.healthy(broker), START_TIMEOUT_S, "broker healthy")
        cluster.kill_node(broker)
        grpc_port, kafka_port = broker.port, broker.kafka_port
        with squatting(kafka_port):
            cluster.start_node(broker)
            assert broker.port == grpc_port
            assert broker.kafka_port not in (0, kafka_port)
            cluster.wait_until(lambda: cluster.healthy(broker), START_TIMEOUT_S, "broker healthy again")
