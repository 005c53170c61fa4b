"""compose.yaml's ``prometheus`` profile (issue 17 §4): Prometheus, built from Debian's package, scrapes every
node and evaluates pykraft's alert rules.

Checked through Prometheus' own HTTP API, as an operator's dashboard would: ``up`` is 1 for all six
nodes; a controller metric (``pykraft_raft_term``) comes from each of the three controllers and a broker
metric (``pykraft_broker_partitions``) from each of the three brokers; every rule of docker/prometheus/
alerts.yml is loaded with health ``ok``. Fault: broker-3's container is stopped with a replication-factor
3 topic in place; then ``PykraftUnderReplicatedPartitions`` and ``PykraftNodeDown`` leave the
``inactive`` state (pending, then firing).

The engine, the base image and ``pykraft:local`` come from conftest.py's session fixtures (shared with
test_compose.py); this module adds the ``pykraft-prometheus:local`` image and its own compose
project, brought down with its volumes at the end, also on failure.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from proto.runtime.listeners import pick_ports
from pykraft.admin import AdminClient
from tests.docker.docker_env import BASE_IMAGE, BUILD_TIMEOUT_S, ROOT, run
from tests.docker.test_compose import BROKER_OVERRIDES, CONTROLLER_OVERRIDES, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1500)]

PROMETHEUS_IMAGE = "pykraft-prometheus:local"
ALERTS = ("PykraftNodeDown", "PykraftUnderReplicatedPartitions", "PykraftOfflinePartitions",
          "PykraftIsrShrinking", "PykraftConsumerLag")  # fmt: skip
TOPIC = "prometheus-alerts"
API_DEADLINE_S = 90.0


@pytest.fixture(scope="session")
def prometheus_image(image: str) -> str:
    build = run(["docker", "build", "--network", "host", "--build-arg", f"BASE={BASE_IMAGE}",
                  "--target", "prometheus", "-t", PROMETHEUS_IMAGE, "."], BUILD_TIMEOUT_S)  # fmt: skip
    assert build.returncode == 0, f"docker build failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    return PROMETHEUS_IMAGE


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1/"

    def get(self, path: str, **params: str) -> dict:
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> dict[str, float]:
        """instance -> value of each series of an instant query."""
        return {s["metric"].get("instance", ""): float(s["value"][1])
                for s in self.get("query", query=expr)["result"]}  # fmt: skip

    def rules(self) -> dict[str, dict]:
        return {r["name"]: r for g in self.get("rules")["groups"] for r in g["rules"]}


@pytest.fixture
def stack(image: str, prometheus_image: str, tmp_path: Path) -> Iterator[tuple[object, Prometheus, str]]:
    from testcontainers.compose import DockerCompose

    ports = pick_ports(10)  # outside the ephemeral range (proto.runtime.listeners)
    env = {
        "PYKRAFT_COMPOSE_PROJECT": f"pykraft-prom-{os.getpid()}",
        "PYKRAFT_IMAGE": image,
        "PYKRAFT_PROMETHEUS_IMAGE": prometheus_image,
        "PYKRAFT_BASE": BASE_IMAGE,
        "PYKRAFT_CONTROLLER_OVERRIDES": CONTROLLER_OVERRIDES,
        "PYKRAFT_BROKER_OVERRIDES": BROKER_OVERRIDES,
        "PYKRAFT_PROMETHEUS_PORT": str(ports[9]),
        **{f"PYKRAFT_CONTROLLER_PORT_{i + 1}": str(p) for i, p in enumerate(ports[:3])},
        **{f"PYKRAFT_BROKER_PORT_{i + 1}": str(p) for i, p in enumerate(ports[3:6])},
        **{f"PYKRAFT_KAFKA_PORT_{i + 1}": str(p) for i, p in enumerate(ports[6:9])},
    }
    env_file = tmp_path / "compose.env"
    env_file.write_text("".join(f'{k}="{v}"\n' for k, v in env.items()))
    compose = DockerCompose(context=ROOT, compose_file_name="compose.yaml", env_file=str(env_file), wait=True,
                            profiles=["prometheus"])  # fmt: skip
    controllers = ",".join(f"127.0.0.1:{p}" for p in ports[:3])
    try:
        compose.start()
        yield compose, Prometheus(ports[9]), controllers
    except BaseException:
        logs = run([*compose.docker_compose_command(), "logs", "--no-color", "--tail", "40"], 60)
        print(logs.stdout[-12000:])
        raise
    finally:
        compose.stop()  # `down --volumes`


def test_prometheus_scrapes_every_node_and_fires_alerts(stack) -> None:
    compose, prometheus, controllers = stack
    nodes = {f"controller-{i}:9100" for i in (1, 2, 3)} | {f"broker-{i}:9100" for i in (1, 2, 3)}

    def every_node_up() -> bool:
        up = prometheus.query('up{job=~"pykraft-.*"}')
        return set(up) == nodes and all(v == 1 for v in up.values())

    wait_for(every_node_up, API_DEADLINE_S, "Prometheus to scrape all six nodes", interval_s=1.0)
    assert set(prometheus.query("pykraft_raft_term")) == {f"controller-{i}:9100" for i in (1, 2, 3)}
    assert set(prometheus.query("pykraft_broker_partitions")) == {f"broker-{i}:9100" for i in (1, 2, 3)}
    rules = prometheus.rules()
    assert set(rules) == set(ALERTS), rules
    assert all(r["health"] == "ok" for r in rules.values()), rules

    def quiet() -> bool:  # a scrape made while the nodes were starting may have left one pending
        return all(r["state"] == "inactive" for r in prometheus.rules().values())

    wait_for(quiet, API_DEADLINE_S, "every alert inactive on a healthy cluster", interval_s=1.0)

    with AdminClient(controllers, timeout_s=60.0) as admin:
        admin.create_topic(TOPIC, num_partitions=3, replication_factor=3)
        wait_for(lambda: all(len(p.isr) == 3 for p in admin.describe_topics([TOPIC])[0].partitions),
                 60, "a full ISR")  # fmt: skip
    started = time.monotonic()
    stop = run([*compose.docker_compose_command(), "stop", "broker-3"], 120)
    assert stop.returncode == 0, stop.stderr[-2000:]

    def alerting() -> bool:
        states = {name: r["state"] for name, r in prometheus.rules().items()}
        return all(states[name] in ("pending", "firing")
                   for name in ("PykraftUnderReplicatedPartitions", "PykraftNodeDown"))  # fmt: skip

    wait_for(alerting, API_DEADLINE_S, "the under-replicated and node-down alerts", interval_s=1.0)
    firing = prometheus.get("alerts")["alerts"]
    print(f"alerts {time.monotonic() - started:.1f} s after the stop: "
          f"{sorted((a['labels']['alertname'], a['state']) for a in firing)}")  # fmt: skip
