"""``pykraft cluster up|status|stop|start|restart|down`` as a user runs it (issue 17 §3): real processes in
a temp directory on ports the cluster picks, every wait bounded, every process stopped by pid even when
a test fails (``stop_every_recorded_pid``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from proto.runtime import ready_file
from pykraft.admin import AdminClient
from pykraft.cluster import STATE_FILE, LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
T = TypeVar("T")
DEADLINE_S = 60.0
CLI_TIMEOUT_S = 180.0  # one CLI run: `up` waits up to 120 s for readiness on a loaded machine


def pykraft(*args: str, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pykraft.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def wait_for(probe: Callable[[], T | None], what: str, timeout_s: float = DEADLINE_S) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    return False


def recorded_pids(data: Path) -> set[int]:
    """Every pid the cluster's state file and the nodes' ready files name."""
    pids: set[int] = set()
    if (data / STATE_FILE).exists():
        pids |= {n["pid"] for n in json.loads((data / STATE_FILE).read_text())["nodes"] if n["pid"] > 0}
    for node_dir in data.iterdir() if data.is_dir() else ():
        ready = ready_file.read(node_dir)
        if ready is not None:
            pids.add(ready.pid)
    return pids


@contextlib.contextmanager
def stop_every_recorded_pid(data: Path) -> Iterator[None]:
    """Whatever happens in the test, every process of the cluster at ``data`` ends (by pid, checked
    to be one of its nodes by ``LocalCluster``; SIGKILL for any left after that)."""
    try:
        yield
    finally:
        if (data / STATE_FILE).exists():
            cluster = LocalCluster.load(data)
            cluster.adopt_running()
            cluster.down(timeout_s=5.0)
        for pid in recorded_pids(data):
            with contextlib.suppress(OSError):  # it may end meanwhile
                if alive(pid) and str(data).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)


def status(data: Path) -> dict[str, dict]:
    done = pykraft("cluster", "status", "--json", "--data-dir", str(data))
    return {n["name"]: n for n in json.loads(done.stdout)["nodes"]}


def one_line_error(done: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("Error: ") and all(e in done.stderr for e in expected), done.stderr


def start_by_hand(data: Path, name: str) -> subprocess.Popen:
    """The node's own command line (as ``cluster.json`` describes it), run outside the launcher."""
    cluster = LocalCluster.load(data)
    spec = cluster.node(name)
    with open(cluster.log_path(spec), "ab") as log:
        return subprocess.Popen(cluster.command(spec), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=data)  # fmt: skip


def isr(admin: AdminClient, topic: str) -> tuple[int, ...]:
    return admin.describe_topics([topic])[0].partitions[0].isr


def test_bounce_a_broker_and_a_controller(tmp_path: Path) -> None:
    """up → stop 101 → status shows it stopped, the others running → start 101 (its Kafka port taken
    meanwhile: it says so and moves; the free gRPC and metrics ports are kept) → it is unfenced and back
    in the ISR → restart 2 (a controller) → a paused broker is "not answering" → broker 103 started by
    hand is still the cluster's → down lists every node it stopped."""
    data = tmp_path / "cluster"
    with stop_every_recorded_pid(data):
        up = pykraft("cluster", "up", "--data-dir", str(data))
        assert up.returncode == 0, up.stderr
        steps = ("controllers listening", "quorum leader elected", "brokers registered", "brokers unfenced")
        assert all(step in up.stderr for step in steps), up.stderr
        bootstrap = up.stdout.splitlines()[0].removeprefix("bootstrap: ")
        created = pykraft("topics", "create", "--topic", "bounce", "--partitions", "1",
                          "--replication-factor", "3", "--bootstrap", bootstrap)  # fmt: skip
        assert created.returncode == 0, created.stderr
        admin = AdminClient(bootstrap, timeout_s=5.0)
        try:
            wait_for(lambda: set(isr(admin, "bounce")) == {101, 102, 103}, "a full ISR")
            before = status(data)
            assert {n["state"] for n in before.values()} == {"running"}, before
            broker = before["broker-101"]
            assert broker["metrics"].startswith("http://127.0.0.1:") and broker["kafka"], broker

            stop = pykraft("cluster", "stop", "101", "--data-dir", str(data))
            assert stop.returncode == 0, stop.stderr
            assert f"stopped broker-101 (pid {broker['pid']})" in stop.stderr, stop.stderr
            assert not alive(broker["pid"])
            after_stop = status(data)
            assert after_stop["broker-101"]["state"] == "stopped" and after_stop["broker-101"]["pid"] is None
            assert all(n["state"] == "running" for name, n in after_stop.items() if name != "broker-101")
            wait_for(lambda: 101 not in isr(admin, "bounce"), "broker 101 out of the ISR")

            one_line_error(pykraft("cluster", "stop", "101", "--data-dir", str(data)),
                           "broker-101 is already stopped")  # fmt: skip
            kafka_port = int(broker["kafka"].rsplit(":", 1)[1])
            with socket.socket() as squatter:  # another process takes the stopped broker's Kafka port
                squatter.bind(("127.0.0.1", kafka_port))
                squatter.listen()
                start = pykraft("cluster", "start", "101", "--data-dir", str(data))
            assert start.returncode == 0, start.stderr
            assert f"its Kafka port {kafka_port} is taken by another process" in start.stderr, start.stderr
            assert "broker-101 unfenced" in start.stderr, start.stderr
            restarted = status(data)["broker-101"]
            assert restarted["state"] == "running" and restarted["pid"] != broker["pid"], restarted
            assert (restarted["address"], restarted["metrics"]) == (broker["address"], broker["metrics"])
            assert restarted["kafka"] != broker["kafka"]
            one_line_error(pykraft("cluster", "start", "101", "--data-dir", str(data)),
                           f"broker-101 is already running (pid {restarted['pid']})")  # fmt: skip
            assert 101 in {b.broker_id for b in admin.describe_cluster().brokers if not b.fenced}
            wait_for(lambda: 101 in isr(admin, "bounce"), "broker 101 back in the ISR")

            controller = status(data)["controller-2"]
            restart = pykraft("cluster", "restart", "2", "--data-dir", str(data))
            assert restart.returncode == 0, restart.stderr
            assert f"stopped controller-2 (pid {controller['pid']})" in restart.stderr, restart.stderr
            assert "controller-2 caught up with the quorum" in restart.stderr, restart.stderr
            again = status(data)["controller-2"]
            assert again["state"] == "running" and again["pid"] != controller["pid"], again
            assert again["address"] == controller["address"]
            assert not alive(controller["pid"])

            paused = status(data)["broker-102"]["pid"]
            os.kill(paused, signal.SIGSTOP)  # alive, but its health check gets no answer
            try:
                assert status(data)["broker-102"]["state"] == "not answering"
            finally:
                os.kill(paused, signal.SIGCONT)
        finally:
            admin.close()

        # An operator starts broker-103 by hand (not through the launcher): status and down still own it.
        assert pykraft("cluster", "stop", "103", "--data-dir", str(data)).returncode == 0
        by_hand = start_by_hand(data, "broker-103")
        try:
            wait_for(lambda: status(data)["broker-103"]["pid"] == by_hand.pid, "broker-103 seen running")
            final = status(data)
            down = pykraft("cluster", "down", "--data-dir", str(data))
            assert by_hand.wait(timeout=DEADLINE_S) == 0  # a graceful stop
        finally:
            if by_hand.poll() is None:
                by_hand.kill()
                by_hand.wait()
        assert down.returncode == 0, down.stderr
        for name, node in final.items():
            assert f"{name}: stopped (pid {node['pid']})" in down.stderr, down.stderr
            assert not alive(node["pid"])
        assert "6 node(s) stopped, 0 already stopped" in down.stderr, down.stderr
        assert {n["state"] for n in status(data).values()} == {"stopped"}
        for name in final:
            assert "Traceback" not in (data / "logs" / f"{name}.log").read_text()


def test_ctrl_c_during_up_stops_every_process_it_started(tmp_path: Path) -> None:
    """A start interrupted by KeyboardInterrupt stops the processes it had started (it leaked them).

    The quorum cannot elect a leader for 10 minutes (its election timeout), so ``up`` is certainly still
    waiting when the interrupt comes: on a quiet machine a normal start is ready in ~3 s, before a test
    that polls for the six pids could interrupt it."""
    data = tmp_path / "cluster"
    with stop_every_recorded_pid(data):
        up = subprocess.Popen([sys.executable, "-m", "pykraft.cli", "cluster", "up", "--data-dir", str(data),
                               "--override", "controller.quorum.election.timeout.ms=600000"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            # Interrupt once the controllers serve and the brokers have started (up waits for a leader).
            wait_for(lambda: len(recorded_pids(data)) == 6, "every node started")
            started = recorded_pids(data)
            up.send_signal(signal.SIGINT)
            _, stderr = up.communicate(timeout=DEADLINE_S)
        finally:
            if up.poll() is None:
                up.kill()
                up.communicate()
        assert up.returncode == 130, stderr
        assert "quorum leader elected" not in stderr, stderr  # interrupted while it waited, as intended
        assert "Traceback" not in stderr and "interrupted" in stderr, stderr
        assert len(started) == 6 and not [pid for pid in started if alive(pid)], stderr


def test_a_node_that_exits_while_starting_is_named_with_its_log(tmp_path: Path) -> None:
    """The broker refuses a bad setting: up says which node exited, quotes the end of its log, and stops
    the controllers it had started."""
    data = tmp_path / "cluster"
    with stop_every_recorded_pid(data):
        up = pykraft("cluster", "up", "--brokers", "1", "--data-dir", str(data),
                     "--override", "replica.lag.time.max.ms=abc")  # fmt: skip
        assert up.returncode == 1, up.stderr
        assert "Error: broker-101 exited with status 2 before it listened" in up.stderr, up.stderr
        assert "pykraft broker: error: setting replica.lag.time.max.ms=abc" in up.stderr, up.stderr
        assert not [pid for pid in recorded_pids(data) if alive(pid)]


@pytest.mark.parametrize(
    "action", [["status"], ["stop", "101"], ["start", "101"], ["restart", "2"], ["down"]], ids=lambda a: a[0]
)
def test_no_cluster_at_the_data_dir_is_one_line(tmp_path: Path, action: list[str]) -> None:
    missing = tmp_path / "none"
    one_line_error(pykraft("cluster", *action, "--data-dir", str(missing)), f"no cluster in {missing}",
                   "pykraft cluster up")  # fmt: skip
    assert not missing.exists()


def test_an_unknown_node_is_one_line_naming_the_nodes(tmp_path: Path) -> None:
    """The state file alone decides: no process needs to run to refuse a node the cluster lacks."""
    data = tmp_path / "cluster"
    cluster = LocalCluster(data, controllers=3, brokers=3)
    data.mkdir()
    cluster.plan()
    cluster.save()
    for action in ("stop", "start", "restart"):
        one_line_error(pykraft("cluster", action, "7", "--data-dir", str(data)), "no node '7'",
                       "1 (controller), 2 (controller), 3 (controller), 101 (broker)")  # fmt: skip
