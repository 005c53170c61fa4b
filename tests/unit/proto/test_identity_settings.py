"""A node's identity by Kafka's names (proto.runtime.settings.fill_identity): ``node.id``, ``listeners``,
``controller.quorum.voters`` / ``controller.quorum.bootstrap.servers``, ``log.dirs``, ``broker.rack``
from a per-node ``server.properties`` or ``PYKRAFT_*`` variables stand for the flags; a flag wins; a
missing one is refused naming the flag, the setting and the variable; a bad value names the setting."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.config import BrokerConfigError, config_from
from broker.config import add_arguments as add_broker_arguments
from metadata.server import add_arguments as add_controller_arguments
from metadata.server import settings_from
from proto.runtime.settings import IDENTITY_FLAGS, SettingsError, env_name

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [*IDENTITY_FLAGS, "advertised.listeners"]:
        monkeypatch.delenv(env_name(key), raising=False)


def broker_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_broker_arguments(parser)
    return parser.parse_args(argv)


def controller_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_controller_arguments(parser)
    return parser.parse_args(argv)


def test_a_broker_described_by_its_properties_file(tmp_path: Path) -> None:
    """Kafka's server.properties names; brokers may find the controllers from the voters, as Kafka's do."""
    path = tmp_path / "server.properties"
    path.write_text(
        "node.id=102\nlisteners=GRPC://0.0.0.0:9091,PLAINTEXT://0.0.0.0:9092\n"
        "advertised.listeners=GRPC://broker-2:9091,PLAINTEXT://broker-2:9092\n"
        "controller.quorum.voters=1@c1:9093,2@c2:9093\nlog.dirs=/var/lib/b2\nbroker.rack=r2\n"
        "min.insync.replicas=2\n"
    )
    config = config_from(broker_args(["--config-file", str(path)]))
    assert (config.node_id, config.listen, config.endpoint) == (102, "0.0.0.0:9091", ("broker-2", 9091))
    [kafka] = config.kafka_listeners
    assert (kafka.name, kafka.host, kafka.port) == ("PLAINTEXT", "0.0.0.0", 9092)
    assert (kafka.advertised_host, kafka.advertised_port) == ("broker-2", 9092)
    assert (config.controllers, config.data_dir, config.rack) == (
        ("c1:9093", "c2:9093"),
        Path("/var/lib/b2"),
        "r2",
    )
    assert config.settings.topic_default("min.insync.replicas") == "2"


def test_environment_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flags > PYKRAFT_* > file, as for every setting; bootstrap servers win over voters."""
    path = tmp_path / "p"
    path.write_text("node.id=1\nlog.dirs=/file\ncontroller.quorum.voters=1@v:1\n")
    monkeypatch.setenv("PYKRAFT_NODE_ID", "2")
    monkeypatch.setenv("PYKRAFT_LISTENERS", "127.0.0.1:9")
    monkeypatch.setenv("PYKRAFT_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS", "b:1,b:2")
    config = config_from(broker_args(["--config-file", str(path), "--data-dir", "/flag"]))
    assert (config.node_id, config.listen, config.controllers) == (2, "127.0.0.1:9", ("b:1", "b:2"))
    assert config.data_dir == Path("/flag")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("listeners=h:1\ncontroller.quorum.voters=1@v:1\nlog.dirs=d\n",
         "--node-id is required (or node.id in --config-file, or PYKRAFT_NODE_ID)"),
        ("node.id=1\nlisteners=h:1\nlog.dirs=d\n",
         "--controllers is required (or controller.quorum.bootstrap"),
        ("node.id=one\n", "setting node.id=one:"),
        ("node.id=1\nlisteners=SSL://h:1\n", "listeners=SSL://h:1: no GRPC://HOST:PORT entry"),
        ("node.id=1\nlisteners=GRPC://h:1,SSL://h:2\ncontroller.quorum.voters=1@v:1\nlog.dirs=d\n",
         "listener SSL uses SSL, which pykraft does not support yet"),
        ("node.id=1\nlisteners=h:1\ncontroller.quorum.voters=1@v:1\nlog.dirs=a,b\n",
         "log.dirs=a,b: pykraft uses one"),
    ],
    ids=["no-node-id", "no-controllers", "bad-node-id", "no-grpc-listener", "ssl-listener", "two-log-dirs"],
)  # fmt: skip
def test_missing_or_bad_identity_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p"
    path.write_text(text)
    with pytest.raises(BrokerConfigError, match=re.escape(message)):
        config_from(broker_args(["--config-file", str(path)]))


def test_a_controller_described_by_its_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "p"
    path.write_text(
        "node.id=2\nlisteners=PLAINTEXT://127.0.0.1:9093\ncontroller.quorum.voters=1@a:1,2@b:2,3@c:3\n"
        "log.dirs=/d\nbroker.rack=ignored\nnum.partitions=3\n"
    )
    args = controller_args(["--config-file", str(path)])
    settings = settings_from(args)
    identity = (args.node_id, args.listen, args.voters, args.data_dir)
    assert identity == (2, "127.0.0.1:9093", "1@a:1,2@b:2,3@c:3", Path("/d"))
    assert settings.default_num_partitions == 3
    with pytest.raises(SettingsError, match=re.escape("--voters is required (or controller.quorum.voters")):
        settings_from(controller_args(["--node-id", "1", "--listen", "h:1", "--data-dir", "d"]))


@pytest.mark.integration
def test_controller_process_from_a_properties_file_alone(tmp_path: Path) -> None:
    """``pykraft controller --config-file server.properties`` serves, and exits 0 soon after SIGTERM."""
    from proto.runtime import ready_file
    from proto.runtime.listeners import pick_port, wait_listening

    port = pick_port()
    path = tmp_path / "server.properties"
    path.write_text(
        f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\ncontroller.quorum.voters=1@127.0.0.1:{port}\n"
        f"log.dirs={tmp_path / 'data'}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYKRAFT_")} | {"PYTHONPATH": str(ROOT)}
    argv = [
        sys.executable,
        "-m",
        "pykraft.cli",
        "controller",
        "--config-file",
        str(path),
        "--metrics-port",
        "-1",
    ]
    output = tmp_path / "controller.out"
    with open(output, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        ready = wait_listening(tmp_path / "data", output, 0, proc.poll, 60, "controller 1", proc.pid,
                               ready_file.READY)  # fmt: skip
        assert (ready.node_id, ready.role, ready.listener) == (1, "controller", f"127.0.0.1:{port}")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - sent < 15
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
