"""docker/entrypoint.sh turns PYKRAFT_* environment variables into `pykraft` flags (no Docker needed).

Rules: a controller gets --node-id/--listen/--voters/--data-dir, a broker --node-id/--listen/
--controllers/--data-dir; PYKRAFT_LISTEN defaults per role (0.0.0.0:9093 / 0.0.0.0:9092) and
PYKRAFT_DATA_DIR to the image's volume; every "k=v" of PYKRAFT_OVERRIDES (spaces or commas) becomes
one --override; extra arguments pass through; a missing required variable exits 2 naming it; an
unknown first argument runs as a command. The script runs with a stub `pykraft` first on PATH that
prints its arguments one per line.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ENTRYPOINT = Path(__file__).resolve().parents[2] / "docker" / "entrypoint.sh"
DATA = "/var/lib/pykraft/data"
METRICS = ["--metrics-port", "9100", "--metrics-host", "0.0.0.0"]  # every node serves /metrics for Prometheus


@pytest.fixture
def stub_path(tmp_path: Path) -> str:
    stub = tmp_path / "pykraft"
    stub.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    stub.chmod(0o755)
    return f"{tmp_path}:{os.environ['PATH']}"


def run(args: list[str], env: dict[str, str], path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(ENTRYPOINT), *args], env={"PATH": path, **env}, capture_output=True, text=True, timeout=10,
        check=False,
    )  # fmt: skip


CASES = [
    pytest.param(
        ["controller"],
        {"PYKRAFT_NODE_ID": "1", "PYKRAFT_VOTERS": "1@c1:9093,2@c2:9093,3@c3:9093"},
        [
            "controller",
            "--node-id",
            "1",
            "--listen",
            "0.0.0.0:9093",
            "--voters",
            "1@c1:9093,2@c2:9093,3@c3:9093",
            "--data-dir",
            DATA,
            *METRICS,
        ],
        id="controller-defaults",
    ),
    pytest.param(
        ["controller", "--seed", "7"],
        {
            "PYKRAFT_NODE_ID": "2",
            "PYKRAFT_VOTERS": "2@c2:1",
            "PYKRAFT_LISTEN": "0.0.0.0:1",
            "PYKRAFT_DATA_DIR": "/d",
            "PYKRAFT_OVERRIDES": "num.partitions=3, default.replication.factor=3",
        },
        [
            "controller",
            "--node-id",
            "2",
            "--listen",
            "0.0.0.0:1",
            "--voters",
            "2@c2:1",
            "--data-dir",
            "/d",
            *METRICS,
            "--override",
            "num.partitions=3",
            "--override",
            "default.replication.factor=3",
            "--seed",
            "7",
        ],
        id="controller-overrides-and-extra-args",
    ),
    pytest.param(
        ["broker"],
        {
            "PYKRAFT_NODE_ID": "101",
            "PYKRAFT_CONTROLLERS": "c1:9093,c2:9093",
            "PYKRAFT_LISTEN": "broker-1:19092",
            "PYKRAFT_OVERRIDES": "min.insync.replicas=2 replica.lag.time.max.ms=4000",
        },
        [
            "broker",
            "--node-id",
            "101",
            "--listen",
            "broker-1:19092",
            "--controllers",
            "c1:9093,c2:9093",
            "--data-dir",
            DATA,
            *METRICS,
            "--override",
            "min.insync.replicas=2",
            "--override",
            "replica.lag.time.max.ms=4000",
        ],
        id="broker-overrides",
    ),
    pytest.param(
        ["broker"],
        {"PYKRAFT_NODE_ID": "102", "PYKRAFT_CONTROLLERS": "c1:9093"},
        [
            "broker",
            "--node-id",
            "102",
            "--listen",
            "0.0.0.0:9092",
            "--controllers",
            "c1:9093",
            "--data-dir",
            DATA,
            *METRICS,
        ],
        id="broker-defaults",
    ),
    pytest.param(
        ["broker"],
        {"PYKRAFT_NODE_ID": "103", "PYKRAFT_CONTROLLERS": "c1:9093", "PYKRAFT_METRICS_PORT": "-1",
         "PYKRAFT_METRICS_HOST": "10.0.0.5"},
        ["broker", "--node-id", "103", "--listen", "0.0.0.0:9092", "--controllers", "c1:9093",
         "--data-dir", DATA, "--metrics-port", "-1", "--metrics-host", "10.0.0.5"],
        id="broker-metrics-settings",
    ),
    pytest.param(["pykraft", "topics", "list"], {}, ["topics", "list"], id="other-command-runs-as-given"),
]


@pytest.mark.parametrize(("args", "env", "expected"), CASES)
def test_environment_becomes_flags(
    args: list[str], env: dict[str, str], expected: list[str], stub_path: str
) -> None:
    result = run(args, env, stub_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected


@pytest.mark.parametrize(
    ("args", "env", "missing"),
    [
        pytest.param(
            ["controller"], {"PYKRAFT_VOTERS": "1@c:1"}, "PYKRAFT_NODE_ID", id="controller-no-node-id"
        ),
        pytest.param(["controller"], {"PYKRAFT_NODE_ID": "1"}, "PYKRAFT_VOTERS", id="controller-no-voters"),
        pytest.param(
            ["broker"], {"PYKRAFT_NODE_ID": "101"}, "PYKRAFT_CONTROLLERS", id="broker-no-controllers"
        ),
    ],
)
def test_missing_variable_exits_2_naming_it(
    args: list[str], env: dict[str, str], missing: str, stub_path: str
) -> None:
    result = run(args, env, stub_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert f"set {missing}" in result.stderr


def test_healthcheck_probes_a_node_with_the_real_code() -> None:
    """The image's HEALTHCHECK runs the entrypoint's inline Python against the installed package: here
    with this checkout's python and code, against an address where nothing listens, it must exit 1
    (unhealthy), not fail to import (a module that moved left every container unhealthy once)."""
    import sys

    bin_dir = Path(sys.executable).parent  # this virtualenv's python first on PATH, as in the image
    root = ENTRYPOINT.parents[1]
    done = subprocess.run(
        ["sh", str(ENTRYPOINT), "healthcheck"],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(root), "PYKRAFT_LISTEN": "127.0.0.1:1"},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Error" not in done.stderr, done.stderr
