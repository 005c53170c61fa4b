"""``pykraft cluster up|status|down`` as a user runs it: real processes, stopped by pid."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pykraft.cluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def pykraft(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pykraft.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_up_status_down(tmp_path: Path) -> None:
    """up returns with every node serving (the broker unfenced); down stops each one gracefully
    (SIGTERM, no SIGKILL needed); each process wrote its own structured log file."""
    data = tmp_path / "cluster"
    try:
        up = pykraft("cluster", "up", "--brokers", "1", "--data-dir", str(data))
        assert up.returncode == 0, up.stderr
        assert up.stdout.startswith("bootstrap: 127.0.0.1:")
        again = pykraft("cluster", "up", "--brokers", "1", "--data-dir", str(data))
        assert again.returncode == 1 and "already running" in again.stderr
        status = pykraft("cluster", "status", "--json", "--data-dir", str(data))
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert [(n["name"], n["health"]) for n in state["nodes"]] == [
            ("controller-1", "serving"), ("controller-2", "serving"), ("controller-3", "serving"),
            ("broker-101", "serving"),
        ]  # fmt: skip
        assert state["active_controller"] in {1, 2, 3}
        down = pykraft("cluster", "down", "--data-dir", str(data))
        assert down.returncode == 0, down.stderr
        assert down.stderr.count(": stopped") == 4 and "killed" not in down.stderr, down.stderr
        after = json.loads(pykraft("cluster", "status", "--json", "--data-dir", str(data)).stdout)
        assert [n["health"] for n in after["nodes"]] == ["stopped"] * 4
        broker_log = (data / "logs" / "broker-101.log").read_text()
        assert "node=101 role=broker" in broker_log and "event=registered" in broker_log, broker_log
        assert "event=controlled_shutdown" in broker_log, broker_log
        for name in ("controller-1", "controller-2", "controller-3"):
            log = (data / "logs" / f"{name}.log").read_text()
            assert "role=controller" in log and "event=shutdown" in log, log
            assert "Traceback" not in log, log
    finally:
        if (data / "cluster.json").exists():
            LocalCluster.load(data).down(timeout_s=5.0)


def test_status_without_cluster_is_a_clear_error(tmp_path: Path) -> None:
    result = pykraft("cluster", "status", "--data-dir", str(tmp_path / "none"))
    assert result.returncode == 1
    assert "no cluster in" in result.stderr and "pykraft cluster up" in result.stderr
