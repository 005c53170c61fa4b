"""The ``prometheus`` compose profile's configuration agrees with the nodes it scrapes (issue 17 §4), checked
without a Docker engine: compose.yaml rendered by the real Docker Compose binary, each node's flags from
docker/entrypoint.sh (with a stub ``pykraft`` that prints its arguments) parsed by the processes' own
argument parsers, docker/prometheus/*.yml read with PyYAML.

Rules: Prometheus scrapes exactly the compose file's controllers and brokers, at the port and on an
address the entrypoint makes every node serve /metrics on; every alert rule names metrics that pykraft
exports (a renamed metric must not silence an alert); the prometheus service is in its own profile,
published on 127.0.0.1 only. tests/docker/test_prometheus.py runs the whole thing on an engine.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import compose as compose_package
import yaml

from broker.config import add_arguments as broker_arguments
from metadata.server import add_arguments as controller_arguments

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = Path(compose_package.__file__).parent / "docker-compose"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
PROMETHEUS_DIR = ROOT / "docker" / "prometheus"
METRIC_SOURCES = ("broker/metrics.py", "metadata/metrics.py")


def rendered(*profiles: str) -> dict:
    cmd = [str(COMPOSE), "-f", str(ROOT / "compose.yaml")]
    for profile in profiles:
        cmd += ["--profile", profile]
    result = subprocess.run([*cmd, "config", "--format", "json"], capture_output=True, text=True, timeout=60,
                            check=False, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert result.returncode == 0, f"docker compose config failed: {result.stderr}"
    return json.loads(result.stdout)


def node_flags(service: dict, tmp_path: Path) -> argparse.Namespace:
    """The arguments the container's process is started with, parsed by that process's parser."""
    stub = tmp_path / "bin" / "pykraft"
    stub.parent.mkdir(exist_ok=True)
    stub.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    stub.chmod(0o755)
    env = {k: str(v) for k, v in service["environment"].items()}
    env["PATH"] = f"{stub.parent}:/usr/bin:/bin"
    run = subprocess.run(["sh", str(ENTRYPOINT), *service["command"]], capture_output=True, text=True,
                         timeout=10, check=False, env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr
    role, *argv = run.stdout.splitlines()
    parser = argparse.ArgumentParser()
    (broker_arguments if role == "broker" else controller_arguments)(parser)
    return parser.parse_args(argv)


def test_prometheus_scrapes_every_node_where_it_serves_metrics(tmp_path: Path) -> None:
    services = rendered("prometheus")["services"]
    nodes = {name: s for name, s in services.items() if name.startswith(("controller-", "broker-"))}
    assert len(nodes) == 6, sorted(services)
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    targets = {job["job_name"]: {t for sc in job["static_configs"] for t in sc["targets"]}
               for job in config["scrape_configs"]}  # fmt: skip
    expected = {
        "pykraft-controller": {f"{n}:9100" for n in nodes if n.startswith("controller-")},
        "pykraft-broker": {f"{n}:9100" for n in nodes if n.startswith("broker-")},
    }
    assert targets == expected
    for name, service in nodes.items():
        flags = node_flags(service, tmp_path)
        assert (flags.metrics_host, flags.metrics_port) == ("0.0.0.0", 9100), name
    rule_file = "/etc/pykraft-prometheus/alerts.yml"
    assert config["rule_files"] == [rule_file]
    prometheus = services["prometheus"]
    assert prometheus["build"]["target"] == "prometheus"
    assert [(p["host_ip"], int(p["target"])) for p in prometheus["ports"]] == [("127.0.0.1", 9090)]
    assert "prometheus" not in rendered()["services"], "Prometheus runs only in its profile"


def test_every_alert_names_metrics_pykraft_exports() -> None:
    exported = set()
    for source in METRIC_SOURCES:
        exported |= set(re.findall(r'"(pykraft_[a-z_]+)"', (ROOT / source).read_text()))
    groups = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {r["alert"] for r in rules} == {
        "PykraftNodeDown", "PykraftUnderReplicatedPartitions", "PykraftOfflinePartitions",
        "PykraftIsrShrinking", "PykraftConsumerLag",
    }  # fmt: skip
    for rule in rules:
        names = set(re.findall(r"\bpykraft_[a-z_]+", rule["expr"]))
        names = {n.removesuffix("_total") for n in names} - {"pykraft"}  # counters gain _total when exposed
        assert names <= exported, f"{rule['alert']}: {sorted(names - exported)} are not exported"
        assert rule["annotations"]["summary"] and rule["labels"]["severity"] in ("warning", "critical")
