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


def test_up_status_down_controllers_only(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    try:
        up = pykraft("cluster", "up", "--brokers", "0", "--data-dir", str(data))
        assert up.returncode == 0, up.stderr
        assert up.stdout.startswith("bootstrap: 127.0.0.1:")
        again = pykraft("cluster", "up", "--brokers", "0", "--data-dir", str(data))
        assert again.returncode == 1 and "already running" in again.stderr
        status = pykraft("cluster", "status", "--json", "--data-dir", str(data))
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert [n["health"] for n in state["nodes"]] == ["serving"] * 3
        assert state["active_controller"] in {1, 2, 3}
        down = pykraft("cluster", "down", "--data-dir", str(data))
        assert down.returncode == 0, down.stderr
        after = json.loads(pykraft("cluster", "status", "--json", "--data-dir", str(data)).stdout)
        assert [n["health"] for n in after["nodes"]] == ["stopped"] * 3
    finally:
        if (data / "cluster.json").exists():
            LocalCluster.load(data).down(timeout_s=5.0)


def test_status_without_cluster_is_a_clear_error(tmp_path: Path) -> None:
    result = pykraft("cluster", "status", "--data-dir", str(tmp_path / "none"))
    assert result.returncode == 1
    assert "no cluster in" in result.stderr and "pykraft cluster up" in result.stderr
