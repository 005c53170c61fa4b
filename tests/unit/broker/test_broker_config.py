"""Broker settings from ``--override KEY=VALUE`` (Kafka's names): known keys parse, the controllers'
keys are accepted and ignored (the launcher passes one set to every node), anything else is refused
with a message naming it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from broker.config import (
    CONTROLLER_KEYS,
    BrokerConfigError,
    BrokerSettings,
    add_arguments,
    config_from,
    parse_overrides,
)
from metadata.server import OVERRIDES as CONTROLLER_OVERRIDES


@pytest.mark.parametrize(
    ("items", "field", "value"),
    [
        (["replica.lag.time.max.ms=1500"], "replica_lag_time_max_ms", 1500),
        (["broker.heartbeat.interval.ms=200"], "broker_heartbeat_interval_ms", 200),
        (["replica.fetch.max.wait.ms=0"], "replica_fetch_max_wait_ms", 0),
        (["request.timeout.ms= 7000 "], "request_timeout_ms", 7000),
        (["min.insync.replicas=2"], "topic_defaults", (("min.insync.replicas", "2"),)),
        (
            ["broker.session.timeout.ms=2000"],
            "replica_lag_time_max_ms",
            BrokerSettings().replica_lag_time_max_ms,
        ),
    ],
    ids=["lag", "heartbeat", "fetch-wait-zero", "spaces", "topic-default", "controller-key-ignored"],
)
def test_known_overrides(items: list[str], field: str, value: object) -> None:
    assert getattr(parse_overrides(items), field) == value


@pytest.mark.parametrize(
    ("item", "named"),
    [
        ("replica.lag.time.max=5", "replica.lag.time.max"),
        ("no-equals-sign", "no-equals-sign"),
        ("replica.lag.time.max.ms=soon", "replica.lag.time.max.ms=soon"),
        ("replica.lag.time.max.ms=0", "replica.lag.time.max.ms=0"),
        ("request.timeout.ms=-1", "request.timeout.ms=-1"),
    ],
    ids=["unknown-key", "not-key-value", "not-a-number", "below-minimum", "negative"],
)
def test_bad_overrides_are_refused_naming_them(item: str, named: str) -> None:
    with pytest.raises(BrokerConfigError, match=named.replace(".", r"\.")):
        parse_overrides([item])


def test_controller_keys_match_the_controller_process() -> None:
    """The keys ignored here are exactly the ones metadata.server accepts."""
    assert set(CONTROLLER_OVERRIDES) == CONTROLLER_KEYS


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--listen", "127.0.0.1"], "--listen"),
        (["--listen", "127.0.0.1:99999"], "--listen"),
        (["--controllers", "nohostport"], "--controllers"),
        (["--node-id", "-5"], "--node-id"),
    ],
    ids=["no-port", "port-range", "controllers", "negative-id"],
)
def test_bad_flags_are_named(argv: list[str], problem: str) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = {
        "--node-id": "101",
        "--listen": "127.0.0.1:9092",
        "--controllers": "127.0.0.1:9093",
        "--data-dir": "d",
    }
    base.update(dict(zip(argv[::2], argv[1::2], strict=True)))
    args = parser.parse_args([x for kv in base.items() for x in kv])
    with pytest.raises(BrokerConfigError, match=problem):
        config_from(args)


def test_good_flags() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            "--node-id",
            "101",
            "--listen",
            "127.0.0.1:9092",
            "--controllers",
            "127.0.0.1:1,127.0.0.1:2",
            "--data-dir",
            "d",
            "--override",
            "replica.lag.time.max.ms=9",
        ]
    )
    config = config_from(args)
    assert (config.host, config.port, config.controllers) == (
        "127.0.0.1",
        9092,
        ("127.0.0.1:1", "127.0.0.1:2"),
    )
    assert config.data_dir == Path("d") and config.settings.replica_lag_time_max_ms == 9
