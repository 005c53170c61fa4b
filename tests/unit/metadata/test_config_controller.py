"""The controller's settings (metadata.server): its own Kafka names parse, the brokers' names are
accepted and ignored (the launcher passes one set to every node), anything else or a bad value is
refused naming it, and the sources follow flags > environment > file > defaults."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import BROKER_FLAGS, BROKER_OVERRIDES, TOPIC_DEFAULT_KEYS
from metadata.server import BROKER_KEYS, ControllerSettings, add_arguments, parse_overrides, settings_from


def test_broker_keys_match_the_broker_process() -> None:
    assert {*BROKER_OVERRIDES, *BROKER_FLAGS, *TOPIC_DEFAULT_KEYS} == BROKER_KEYS


@pytest.mark.parametrize(
    ("items", "field", "value"),
    [
        (["num.partitions=4"], "default_num_partitions", 4),
        (["broker.session.timeout.ms= 2000"], "broker_session_timeout_ms", 2000),
        (["replica.lag.time.max.ms=5", "min.insync.replicas=2"], "default_num_partitions", 1),
    ],
    ids=["own-key", "spaces", "broker-keys-ignored"],
)
def test_known_settings(items: list[str], field: str, value: int) -> None:
    assert getattr(parse_overrides(items, ControllerSettings()), field) == value


@pytest.mark.parametrize(
    ("item", "named"),
    [
        ("num.partition=4", "num.partition"),
        ("num.partitions=many", "num.partitions=many"),
        ("default.replication.factor=0", "default.replication.factor=0"),
        ("no-equals", "no-equals"),
    ],
    ids=["unknown", "not-a-number", "below-minimum", "not-key-value"],
)
def test_bad_settings_are_refused_naming_them(item: str, named: str) -> None:
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        parse_overrides([item], ControllerSettings())


def args_for(extra: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(
        ["--node-id", "1", "--listen", "127.0.0.1:1", "--voters", "1@127.0.0.1:1", "--data-dir", "d", *extra]
    )


@pytest.mark.parametrize(
    ("file", "env", "flag", "expected"),
    [
        (None, None, None, 1),
        ("3", None, None, 3),
        ("3", "5", None, 5),
        ("3", "5", "7", 7),
    ],
    ids=["default", "file", "env-over-file", "flag-over-env"],
)
def test_sources_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file: str | None, env: str | None, flag: str | None,
    expected: int,
) -> None:  # fmt: skip
    extra = []
    if file is not None:
        path = tmp_path / "controller.properties"
        path.write_text(f"# partitions\nnum.partitions={file}\n")
        extra += ["--config-file", str(path)]
    monkeypatch.delenv("PYKRAFT_NUM_PARTITIONS", raising=False)
    if env is not None:
        monkeypatch.setenv("PYKRAFT_NUM_PARTITIONS", env)
    if flag is not None:
        extra += ["--override", f"num.partitions={flag}"]
    assert settings_from(args_for(extra)).default_num_partitions == expected


@pytest.mark.parametrize(
    ("extra", "env", "named"),
    [
        (["--override", "bogus.setting=1"], {}, "bogus.setting"),
        ([], {"PYKRAFT_NUM_PARTITIONS": "zero"}, "num.partitions=zero"),
        (["--config-file", "missing.properties"], {}, "missing.properties"),
        (["--metrics-port", "70000"], {}, "--metrics-port"),
    ],
    ids=["unknown-flag-setting", "bad-env-value", "missing-file", "metrics-port"],
)
def test_process_exits_2_naming_the_problem(
    tmp_path: Path, extra: list[str], env: dict[str, str], named: str
) -> None:
    """A bad setting stops the process at startup: exit 2, one line naming it, no traceback."""
    argv = [sys.executable, "-m", "metadata.server", "--node-id", "1", "--listen", "127.0.0.1:1",
            "--voters", "1@127.0.0.1:1", "--data-dir", str(tmp_path / "d"), *extra]  # fmt: skip
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**_base_env(root), **env},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr, done.stderr


def _base_env(root: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYKRAFT_")} | {"PYTHONPATH": str(root)}


def test_cluster_id_flag_and_setting() -> None:
    """Kafka's format --cluster-id: ``--cluster-id`` or ``cluster.id``; a value that is not a Kafka
    Uuid is refused naming the setting."""
    assert settings_from(args_for(["--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg"])).cluster_id == (
        "MkU3OEVBNTcwNTJENDM2Qg"
    )
    assert parse_overrides(["cluster.id=q1Sh-9_ISia_zwGINzRvyQ"], ControllerSettings()).cluster_id == (
        "q1Sh-9_ISia_zwGINzRvyQ"
    )
    assert settings_from(args_for([])).cluster_id == ""
    with pytest.raises(ValueError, match=r"cluster\.id: cluster id 'my-cluster' has 10 characters"):
        settings_from(args_for(["--cluster-id", "my-cluster"]))
