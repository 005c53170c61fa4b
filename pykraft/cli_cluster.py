"""``pykraft cluster up|status|down|describe``: the local cluster on 127.0.0.1 (no Docker).

    pykraft cluster up [--controllers 3] [--brokers 3] [--data-dir DIR] [--override KEY=VALUE ...]
                       [--log-level INFO]
    pykraft cluster status [--data-dir DIR] [--json]
    pykraft cluster down [--data-dir DIR] [--timeout SECONDS]
    pykraft cluster describe --bootstrap HOST:PORT      (brokers and the active controller)

``up`` returns once the quorum has a leader and every broker is registered and unfenced, and prints
the bootstrap address. ``--data-dir`` defaults to ``$PYKRAFT_DATA_DIR`` or ``./data/cluster``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from proto import errors
from pykraft.admin import AdminClient
from pykraft.cluster import ClusterError, LocalCluster

DEFAULT_DATA_DIR = Path(os.environ.get("PYKRAFT_DATA_DIR", "data/cluster"))
READY_TIMEOUT_S = 120.0
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    from pykraft import cli_admin, cli_top

    c = sub.add_parser("cluster", help="run a local cluster (up/status/down) or describe one")
    actions = c.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start controllers and brokers on 127.0.0.1 and wait until ready")
    up.add_argument("--controllers", type=int, default=3, choices=[1, 3, 5])
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a Kafka-named setting passed to every process, e.g. replica.lag.time.max.ms=5000")
    up.add_argument("--timeout", type=float, default=READY_TIMEOUT_S, help="seconds to wait until ready")
    up.add_argument("--log-level", default="INFO", choices=LOG_LEVELS,
                    help="level of every process's log file (DATA/logs/NAME.log)")
    up.set_defaults(func=cluster_up)
    status = actions.add_parser("status", help="each process: role, pid, address and health")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cluster_status)
    down = actions.add_parser("down", help="stop brokers (controlled shutdown), then controllers")
    down.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL")
    down.set_defaults(func=cluster_down)
    for p in (up, status, down):
        p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    cli_admin.add_cluster_describe(actions)
    cli_top.add_parser(actions, DEFAULT_DATA_DIR)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def quorum_has_leader(cluster: LocalCluster) -> bool:
    try:
        with AdminClient(cluster.controller_addresses, timeout_s=1.0) as admin:
            return admin.describe_quorum().leader_id > 0
    except errors.KafkaError:
        return False


def brokers_ready(cluster: LocalCluster) -> bool:
    try:
        with AdminClient(cluster.controller_addresses, timeout_s=1.0) as admin:
            brokers = admin.describe_cluster().brokers
    except errors.KafkaError:
        return False
    live = {b.broker_id for b in brokers if not b.fenced}
    return {n.node_id for n in cluster.broker_nodes} <= live


def wait_ready(cluster: LocalCluster, timeout_s: float, progress=_say) -> None:
    """Quorum leader elected, every broker registered, unfenced and serving."""
    cluster.wait_until(lambda: quorum_has_leader(cluster), timeout_s, "a quorum leader", progress)
    if cluster.broker_nodes:
        cluster.wait_until(lambda: brokers_ready(cluster), timeout_s, "brokers registered and unfenced",
                           progress)
    cluster.wait_until(lambda: all(cluster.healthy(n) for n in cluster.nodes), timeout_s,
                       "every node healthy", progress)


def cluster_up(args: argparse.Namespace) -> int:
    overrides = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep:
            _say(f"Error: --override {item!r}: expected KEY=VALUE")
            return 2
        overrides[key] = value
    data_dir = args.data_dir.resolve()
    try:
        existing = LocalCluster.load(data_dir)
    except ClusterError:
        existing = None
    if existing and any(existing.is_running(n) for n in existing.nodes):
        _say(f"Error: a cluster is already running in {data_dir}; `pykraft cluster down` first")
        return 1
    cluster = LocalCluster(data_dir, controllers=args.controllers, brokers=args.brokers, overrides=overrides,
                           log_level=args.log_level)
    _say(f"starting {args.controllers} controllers and {args.brokers} brokers in {data_dir}")
    try:
        cluster.start()
        wait_ready(cluster, args.timeout)
    except ClusterError as exc:
        _say(f"Error: {exc}")
        cluster.down(timeout_s=5.0)
        return 1
    for spec in cluster.nodes:
        _say(f"  {spec.name:<14} pid {spec.pid:<8} {spec.address}   log {cluster.log_path(spec)}")
    print(f"bootstrap: {cluster.bootstrap}")
    print(f"export PYKRAFT_BOOTSTRAP={cluster.bootstrap}")
    if cluster.kafka_bootstrap:
        print(f"kafka bootstrap: {cluster.kafka_bootstrap}")
        print(f"export KAFKA_BOOTSTRAP={cluster.kafka_bootstrap}")
    return 0


def cluster_status(args: argparse.Namespace) -> int:
    try:
        cluster = LocalCluster.load(args.data_dir.resolve())
    except ClusterError as exc:
        _say(f"Error: {exc}")
        return 1
    rows = []
    for spec in cluster.nodes:
        running = cluster.is_running(spec)
        health = "serving" if running and cluster.healthy(spec) else ("not serving" if running else "stopped")
        rows.append({"name": spec.name, "role": spec.role, "node_id": spec.node_id, "pid": spec.pid,
                     "address": spec.address, "kafka": spec.kafka_address, "running": running,
                     "health": health})
    leader = quorum_has_leader(cluster) and active_controller(cluster)
    if args.json:
        print(json.dumps({"nodes": rows, "active_controller": leader or None,
                          "kafka_bootstrap": cluster.kafka_bootstrap}, indent=2))
        return 0
    print(f"{'NAME':<14} {'ROLE':<11} {'PID':<8} {'ADDRESS':<17} {'KAFKA':<17} HEALTH")
    for r in rows:
        active = " (active controller)" if r["role"] == "controller" and r["node_id"] == leader else ""
        print(f"{r['name']:<14} {r['role']:<11} {r['pid']:<8} {r['address']:<17} {r['kafka'] or '-':<17} "
              f"{r['health']}{active}")
    if cluster.kafka_bootstrap:
        print(f"kafka bootstrap: {cluster.kafka_bootstrap}")
    return 0 if all(r["running"] for r in rows) else 1


def active_controller(cluster: LocalCluster) -> int:
    try:
        with AdminClient(cluster.controller_addresses, timeout_s=1.0) as admin:
            return admin.describe_quorum().leader_id
    except errors.KafkaError:
        return 0


def cluster_down(args: argparse.Namespace) -> int:
    try:
        cluster = LocalCluster.load(args.data_dir.resolve())
    except ClusterError as exc:
        _say(f"Error: {exc}")
        return 1
    graceful = cluster.down(timeout_s=args.timeout)
    for name, ok in graceful.items():
        _say(f"  {name}: {'stopped' if ok else 'killed after ' + str(args.timeout) + ' s'}")
    _say("cluster stopped")
    return 0
