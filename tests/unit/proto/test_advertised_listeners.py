"""advertised.listeners: the address a node registers (broker) or must be dialled at (controller),
from ``--advertised-listener``, ``PYKRAFT_ADVERTISED_LISTENERS``, ``--config-file`` or ``--override``;
default the listen address; 0.0.0.0 can be listened on but never advertised (Kafka refuses it too)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from broker.config import BrokerConfigError, config_from
from broker.config import add_arguments as add_broker_arguments
from metadata.server import ControllerNode, settings_from
from metadata.server import add_arguments as add_controller_arguments
from proto.runtime.settings import SettingsError, parse_listener
from raft.config import QuorumConfigError

ENV = "PYKRAFT_ADVERTISED_LISTENERS"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("broker-1:19092", ("broker-1", 19092)),
        ("PLAINTEXT://10.0.0.5:9092", ("10.0.0.5", 9092)),
        ("plaintext://h:1", ("h", 1)),
        (" [::1]:9092 ", ("[::1]", 9092)),
    ],
    ids=["host-port", "kafka-form", "name-any-case", "ipv6-spaces"],
)
def test_parse_listener(text: str, expected: tuple[str, int]) -> None:
    assert parse_listener(text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0.0.0.0:9092", "cannot be dialled"),
        (":9092", "cannot be dialled"),
        ("h:0", "expected HOST:PORT"),
        ("h", "expected HOST:PORT"),
        ("SSL://h:9093", "unknown listener 'SSL'"),
        ("PLAINTEXT://a:1,PLAINTEXT://b:2", "one listener"),
    ],
    ids=["any-address", "empty-host", "port-0", "no-port", "other-listener", "two-listeners"],
)
def test_bad_listeners_are_named(text: str, says: str) -> None:
    with pytest.raises(SettingsError, match=says) as info:
        parse_listener(text)
    assert text in str(info.value)


def broker_args(listen: str, extra: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_broker_arguments(parser)
    base = ["--node-id", "101", "--listen", listen, "--controllers", "127.0.0.1:1", "--data-dir", "d"]
    return parser.parse_args([*base, *extra])


@pytest.mark.parametrize(
    ("listen", "file", "env", "extra", "endpoint"),
    [
        ("127.0.0.1:9092", None, None, [], ("127.0.0.1", 9092)),
        ("127.0.0.1:9092", "GRPC://proxy:1", None, [], ("proxy", 1)),
        ("127.0.0.1:9092", "proxy:1", "proxy:2", [], ("proxy", 2)),
        ("127.0.0.1:9092", None, "proxy:2", ["--override", "advertised.listeners=proxy:3"], ("proxy", 3)),
        ("0.0.0.0:9092", None, "proxy:2", ["--advertised-listener", "broker-1:4"], ("broker-1", 4)),
        ("127.0.0.1:9092", None, None, ["--advertised-listeners", "localhost:9092"], ("localhost", 9092)),
    ],
    ids=["default-listen", "file", "env-over-file", "override-over-env", "flag-wins", "entrypoint-spelling"],
)
def test_broker_endpoint_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listen: str, file: str | None, env: str | None,
    extra: list[str], endpoint: tuple[str, int],
) -> None:  # fmt: skip
    if file is not None:
        (tmp_path / "p").write_text(f"advertised.listeners={file}\n")
        extra = ["--config-file", str(tmp_path / "p"), *extra]
    monkeypatch.delenv(ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(ENV, env)
    config = config_from(broker_args(listen, extra))
    assert config.endpoint == endpoint
    assert config.listen == listen  # the process still binds where it was told


def test_broker_on_any_address_needs_an_advertised_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(BrokerConfigError, match=r"--listen 0\.0\.0\.0:9092.*--advertised-listener"):
        config_from(broker_args("0.0.0.0:9092", []))


def test_broker_bad_advertised_listener_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "0.0.0.0:1")
    with pytest.raises(BrokerConfigError, match=re.escape("setting advertised.listeners=0.0.0.0:1")):
        config_from(broker_args("127.0.0.1:9092", []))


def controller_node(tmp_path: Path, extra: list[str]) -> ControllerNode:
    parser = argparse.ArgumentParser()
    add_controller_arguments(parser)
    args = parser.parse_args(
        ["--node-id", "1", "--listen", "127.0.0.1:5000", "--voters", "1@proxy-1:6000,2@proxy-2:6000,3@p:1",
         "--data-dir", str(tmp_path), "--metrics-port", "-1", *extra]
    )  # fmt: skip
    return ControllerNode(args.node_id, args.listen, args.voters, args.data_dir, settings_from(args))


def test_controller_listens_apart_from_its_voters_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The voters entry is what others dial; --listen may differ (a proxy in front of the node)."""
    monkeypatch.delenv(ENV, raising=False)
    node = controller_node(tmp_path, ["--advertised-listener", "PLAINTEXT://proxy-1:6000"])
    assert node.listen == "127.0.0.1:5000"
    assert node.voters.voter(1).address == "proxy-1:6000"


def test_controller_refuses_an_advertised_listener_unlike_its_voters_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "proxy-1:6001")
    with pytest.raises(QuorumConfigError, match=r"advertised\.listeners=proxy-1:6001 differs.*proxy-1:6000"):
        controller_node(tmp_path, [])
