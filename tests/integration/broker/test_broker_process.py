"""The ``pykraft broker`` process without a cluster: bad flags exit 2 naming the problem (never a
traceback), and SIGTERM stops a broker that cannot reach any controller yet."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pykraft.cluster import free_port

pytestmark = pytest.mark.integration


def broker_command(tmp_path: Path, *extra: str, port: int | None = None) -> list[str]:
    return [sys.executable, "-m", "pykraft.cli", "broker", "--node-id", "101", "--listen",
            f"127.0.0.1:{port or free_port()}", "--controllers", f"127.0.0.1:{free_port()}",
            "--data-dir", str(tmp_path / "data"), *extra]  # fmt: skip


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--override", "bogus.setting=1"], "bogus.setting"),
        (["--override", "replica.lag.time.max.ms=-3"], "replica.lag.time.max.ms=-3"),
        (["--override", "noequals"], "noequals"),
    ],
    ids=["unknown-key", "bad-value", "not-key-value"],
)
def test_bad_override_exits_2_naming_it(tmp_path: Path, extra: list[str], named: str) -> None:
    done = subprocess.run(
        broker_command(tmp_path, *extra), check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_sigterm_stops_a_broker_that_has_no_controller(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        broker_command(tmp_path, port=port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        # It serves (signal handlers installed) and keeps retrying its registration meanwhile.
        deadline = time.monotonic() + 60
        while not port_open(port):
            assert proc.poll() is None, "the broker exited before serving"
            assert time.monotonic() < deadline, "the broker never opened its port"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
