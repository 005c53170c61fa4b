"""The ``pykraft broker`` process without a cluster: bad flags exit 2 naming the problem (never a
traceback), and SIGTERM stops a broker that cannot reach any controller yet."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from proto.runtime.listeners import pick_port, wait_listening

pytestmark = pytest.mark.integration


def broker_command(tmp_path: Path, *extra: str) -> list[str]:
    """A broker on a port the kernel picks, whose controller address nobody serves."""
    return [sys.executable, "-m", "pykraft.cli", "broker", "--node-id", "101", "--listen",
            "127.0.0.1:0", "--controllers", f"127.0.0.1:{pick_port()}",
            "--data-dir", str(tmp_path / "data"), *extra]  # fmt: skip


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
    output = tmp_path / "broker.out"
    with open(output, "wb") as out:
        proc = subprocess.Popen(broker_command(tmp_path), stdout=out, stderr=subprocess.STDOUT)
    try:
        # It serves (signal handlers installed) and keeps retrying its registration meanwhile.
        port = wait_listening(tmp_path / "data", output, 0, proc.poll, 60, "the broker", proc.pid).port
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()
