"""The fault-injecting proxy: it names the node process behind a connection, stalls a blocked pair's
traffic (nothing is lost or reordered) and lets it flow again on heal; other pairs are unaffected."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proto.runtime.listeners import pick_ports
from pykraft.cluster import BIND_ATTEMPTS
from tests.chaos.cluster import ProxyControl, ProxyPortsTakenError

pytestmark = pytest.mark.integration

# A stand-in for a node: its command line carries the data dir and ``--node-id`` like a real one.
# It sends one numbered line every 50 ms through the proxy and prints each echoed line.
NODE = """
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
f = s.makefile("rwb", buffering=0)
for i in range(100000):
    f.write(b"%d\\n" % i)
    print(f.readline().decode().strip(), flush=True)
    time.sleep(0.05)
"""


class EchoServer:
    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(4096):
                conn.sendall(data)


class Lines:
    """The echoed lines a node process printed, read by a thread."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[int] = []
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(int(line))

    def wait_more(self, than: int, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.lines) <= than:
            assert time.monotonic() < deadline, f"no echo beyond {than} lines in {timeout_s} s"
            time.sleep(0.02)


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[ProxyControl, Lines, Lines]]:
    (tmp_path / "logs").mkdir()
    echo_a, echo_b = EchoServer(), EchoServer()
    for attempt in range(1, BIND_ATTEMPTS + 1):  # picked ports another process took: pick again
        port_a, port_b = pick_ports(2)
        try:
            routes = [("broker-1", port_a, echo_a.port), ("broker-2", port_b, echo_b.port)]
            proxy = ProxyControl(tmp_path, routes)
            break
        except ProxyPortsTakenError:
            if attempt == BIND_ATTEMPTS:
                raise
    procs = [
        subprocess.Popen([sys.executable, "-c", NODE, str(port), "controller", "--node-id", "9",
                          "--data-dir", str(tmp_path / "controller-9")], stdout=subprocess.PIPE)
        for port in (port_a, port_b)
    ]
    try:
        yield proxy, Lines(procs[0]), Lines(procs[1])
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
            assert proc.stdout is not None
            proc.stdout.close()
        proxy.close()
        echo_a.listener.close()
        echo_b.listener.close()


def test_partition_stalls_one_pair_and_heal_resumes_it_intact(proxied) -> None:
    proxy, to_a, to_b = proxied
    to_a.wait_more(3)
    to_b.wait_more(3)
    assert proxy.connections() == {"controller-9>broker-1": 1, "controller-9>broker-2": 1}
    proxy.block([("controller-9", "broker-1")])
    time.sleep(0.2)  # an echo already in flight may still arrive
    stalled_at, b_at = len(to_a.lines), len(to_b.lines)
    time.sleep(1.0)
    assert len(to_a.lines) == stalled_at, "traffic of a blocked pair went through"
    to_b.wait_more(b_at + 5)  # the other pair is not affected
    proxy.heal()
    to_a.wait_more(stalled_at + 3)
    assert to_a.lines == list(range(len(to_a.lines))), "bytes were lost or reordered across the partition"


def test_a_busy_proxy_port_is_reported_so_the_harness_can_pick_again(tmp_path: Path) -> None:
    """The proxy's ports are picked up front; one another process serves is a named error, not a hang."""
    (tmp_path / "logs").mkdir()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        busy = squatter.getsockname()[1]
        with pytest.raises(ProxyPortsTakenError, match="address already in use"):
            ProxyControl(tmp_path, [("broker-1", busy, pick_ports(1)[0])])
