"""Kafka listeners in Kafka's form: ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map`` (broker.config). The gRPC services keep ``--listen`` (listener
name GRPC); every other named listener serves the Kafka protocol."""

from __future__ import annotations

import argparse

import pytest

from broker.config import (
    BrokerConfigError,
    KafkaListenerSpec,
    add_arguments,
    config_from,
    parse_listener_list,
)


def config(extra: list[str], listen: str | None = "127.0.0.1:9093", monkeypatch=None):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["--node-id", "101", "--controllers", "127.0.0.1:1", "--data-dir", "d", "--metrics-port", "-1"]
    if listen is not None:
        base += ["--listen", listen]
    return config_from(parser.parse_args([*base, *extra]))


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LISTENERS", "ADVERTISED_LISTENERS", "LISTENER_SECURITY_PROTOCOL_MAP"):
        monkeypatch.delenv("PYKRAFT_" + name, raising=False)


@pytest.mark.parametrize(
    ("extra", "listen", "expected"),
    [
        ([], "127.0.0.1:9093", (KafkaListenerSpec("PLAINTEXT", "127.0.0.1", 0, "127.0.0.1"),)),
        (
            ["--listeners", "PLAINTEXT://127.0.0.1:9092"], "127.0.0.1:9093",
            (KafkaListenerSpec("PLAINTEXT", "127.0.0.1", 9092, "127.0.0.1"),),
        ),
        (
            ["--listeners", "PLAINTEXT://0.0.0.0:9092", "--advertised-listeners",
             "GRPC://broker-1:9093,PLAINTEXT://broker-1:19092"], "0.0.0.0:9093",
            (KafkaListenerSpec("PLAINTEXT", "0.0.0.0", 9092, "broker-1", 19092),),
        ),
        (
            ["--listeners", "PLAINTEXT://0.0.0.0:0", "--advertised-listener", "broker-1:9093"],
            "0.0.0.0:9093",
            (KafkaListenerSpec("PLAINTEXT", "0.0.0.0", 0, "broker-1"),),
        ),
        (
            ["--override", "listeners=INTERNAL://127.0.0.1:1,EXTERNAL://127.0.0.1:2,GRPC://127.0.0.1:3",
             "--override", "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"], None,
            (KafkaListenerSpec("INTERNAL", "127.0.0.1", 1, "127.0.0.1"),
             KafkaListenerSpec("EXTERNAL", "127.0.0.1", 2, "127.0.0.1")),
        ),
    ],
    ids=["default-any-port", "explicit", "advertised-per-listener", "any-address-advertises-node-host",
         "named-listeners-and-grpc-entry"],
)  # fmt: skip
def test_listeners(extra: list[str], listen: str | None, expected: tuple[KafkaListenerSpec, ...]) -> None:
    assert config(extra, listen).kafka_listeners == expected


def test_the_grpc_entry_of_listeners_stands_for_listen() -> None:
    c = config(["--listeners", "PLAINTEXT://127.0.0.1:9092,GRPC://127.0.0.1:9093"], listen=None)
    assert c.listen == "127.0.0.1:9093"
    assert [s.name for s in c.kafka_listeners] == ["PLAINTEXT"]


def test_listeners_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYKRAFT_LISTENERS", "PLAINTEXT://127.0.0.1:19092")
    assert config([]).kafka_listeners[0].port == 19092


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--listeners", "SSL://127.0.0.1:9094"], "uses SSL, which pykraft does not support yet"),
        (["--listeners", "SASL_PLAINTEXT://127.0.0.1:9094"], "SASL_PLAINTEXT, which pykraft does not"),
        (["--listeners", "CLIENTS://127.0.0.1:9094"], "no security protocol.*add CLIENTS:PLAINTEXT"),
        (["--listeners", "PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9095"], "appears twice"),
        (["--listeners", "PLAINTEXT://127.0.0.1"], "not NAME://HOST:PORT"),
        (["--listeners", "PLAIN TEXT://h:1"], "letters, digits or _"),
        (["--advertised-listeners", "PLAINTEXT://0.0.0.0:9092"], "cannot be dialled"),
        (["--advertised-listeners", "PLAINTEXT://h:0"], "cannot be dialled"),
        (["--advertised-listeners", "OTHER://h:1"], "OTHER is not in listeners"),
        (["--override", "listener.security.protocol.map=PLAINTEXT"], "not NAME:PROTOCOL"),
    ],
    ids=["ssl", "sasl", "unmapped-name", "duplicate", "no-port", "bad-name", "advertised-any",
         "advertised-port-0", "advertised-unknown", "bad-map"],
)  # fmt: skip
def test_bad_listener_settings_are_named(extra: list[str], says: str) -> None:
    with pytest.raises(BrokerConfigError, match=says):
        config(extra)


def test_parse_listener_list_bare_entry_is_grpc() -> None:
    assert parse_listener_list("h:1, PLAINTEXT://[::1]:2", "listeners") == {
        "GRPC": ("h", 1), "PLAINTEXT": ("::1", 2),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("key", "field", "value"),
    [
        ("socket.request.max.bytes", "socket_request_max_bytes", 1000),
        ("max.connections", "max_connections", 10),
        ("connections.max.idle.ms", "connections_max_idle_ms", 500),
    ],
)
def test_listener_limits(key: str, field: str, value: int) -> None:
    assert getattr(config(["--override", f"{key}={value}"]).settings, field) == value
