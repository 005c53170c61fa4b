"""Broker settings from every source (broker.config + proto.runtime.settings): flags > PYKRAFT_<NAME>
environment > --config-file > defaults; an unknown name or bad value from any source is refused at
startup naming it (exit 2, no traceback)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import BrokerConfigError, BrokerSettings, add_arguments, config_from

LAG_ENV = "PYKRAFT_REPLICA_LAG_TIME_MAX_MS"


def args_for(extra: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["--node-id", "101", "--listen", "127.0.0.1:9092", "--controllers", "127.0.0.1:1"]
    base += ["--data-dir", "d"]
    return parser.parse_args([*base, *extra])


@pytest.mark.parametrize(
    ("file", "env", "flag", "expected"),
    [
        (None, None, None, BrokerSettings().replica_lag_time_max_ms),
        ("100", None, None, 100),
        ("100", "200", None, 200),
        ("100", "200", "300", 300),
        (None, "200", None, 200),
    ],
    ids=["default", "file", "env-over-file", "flag-over-env", "env-only"],
)
def test_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file: str | None, env: str | None, flag: str | None,
    expected: int,
) -> None:  # fmt: skip
    extra = []
    if file is not None:
        path = tmp_path / "server.properties"
        path.write_text(f"# Kafka style\nreplica.lag.time.max.ms={file}\nmin.insync.replicas=2\n")
        extra += ["--config-file", str(path)]  # fmt: skip
    monkeypatch.delenv(LAG_ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(LAG_ENV, env)
    if flag is not None:
        extra += ["--override", f"replica.lag.time.max.ms={flag}"]
    config = config_from(args_for(extra))
    assert config.settings.replica_lag_time_max_ms == expected


@pytest.mark.parametrize(
    ("text", "env", "named"),
    [
        ("no.such.setting=1\n", {}, "no.such.setting"),
        ("replica.lag.time.max.ms=soon\n", {}, "replica.lag.time.max.ms=soon"),
        ("", {LAG_ENV: "0"}, "replica.lag.time.max.ms=0"),
        ("garbage line\n", {}, "server.properties:1"),
    ],
    ids=["unknown-in-file", "bad-value-in-file", "bad-value-in-env", "unparsable-line"],
)
def test_bad_settings_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, env: dict[str, str], named: str
) -> None:
    path = tmp_path / "server.properties"
    path.write_text(text)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(BrokerConfigError, match=named.replace(".", r"\.")):
        config_from(args_for(["--config-file", str(path)]))


def test_controller_settings_in_the_file_are_ignored(tmp_path: Path) -> None:
    """One properties file may serve every node: the controllers' names are accepted here."""
    path = tmp_path / "server.properties"
    path.write_text("broker.session.timeout.ms=2000\nnum.partitions=3\n")
    assert config_from(args_for(["--config-file", str(path)])).settings == BrokerSettings()


def test_process_exits_2_naming_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("replica.lag.time.max.ms=1000\nbogus.key=1\n")
    root = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYKRAFT_")} | {"PYTHONPATH": str(root)}
    argv = [sys.executable, "-m", "pykraft.cli", "broker", "--node-id", "101", "--listen", "127.0.0.1:1"]
    argv += ["--controllers", "127.0.0.1:2", "--data-dir", str(tmp_path / "d"), "--config-file", str(path)]
    done = subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env
    )
    assert done.returncode == 2, done.stderr
    assert "bogus.key" in done.stderr and "Traceback" not in done.stderr, done.stderr
