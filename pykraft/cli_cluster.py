"""``pykraft cluster ...``: the local cluster on 127.0.0.1 (no Docker), and single nodes of it.

    pykraft cluster up [--controllers 3] [--brokers 3] [--data-dir DIR] [--override KEY=VALUE ...]
                       [--log-level INFO] [--timeout SECONDS]
    pykraft cluster status [--data-dir DIR] [--json]
    pykraft cluster stop NODE [--data-dir DIR] [--timeout SECONDS]      (NODE: a node id, 101 or 2)
    pykraft cluster start NODE [--data-dir DIR] [--timeout SECONDS]
    pykraft cluster restart NODE [--data-dir DIR] [--timeout SECONDS]
    pykraft cluster down [--data-dir DIR] [--timeout SECONDS]
    pykraft cluster describe --bootstrap HOST:PORT      (brokers and the active controller)

``up`` returns once the quorum has a leader and every broker is registered and unfenced; it prints how
long each step took (a progress line while it waits) and the bootstrap addresses. ``stop`` is a
controlled shutdown (SIGTERM, SIGKILL after ``--timeout``) of the pid the cluster recorded; ``start``
starts a stopped node again on its data directory, settings and ports, and waits until it is back (a
broker registered and unfenced, a controller caught up with the quorum); ``restart`` does both.
``status`` lists every node of the cluster, whoever started it. ``--data-dir`` defaults to
``$PYKRAFT_DATA_DIR`` or ``./data/cluster``. Commands that change the cluster hold its lock
(``DATA/cluster.lock``): a second one at the same time is refused, naming the first.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from proto import errors
from proto.runtime import ready_file
from pykraft.admin import AdminClient
from pykraft.cluster import STOP_TIMEOUT_S, ClusterError, LocalCluster, NodeSpec, cluster_lock

DEFAULT_DATA_DIR = Path(os.environ.get("PYKRAFT_DATA_DIR", "data/cluster"))
READY_TIMEOUT_S = 120.0
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
PROGRESS_EVERY_S = 5.0  # a progress line while `up` or `start` waits (rewritten each second on a terminal)
RUNNING, STOPPED, NOT_ANSWERING = "running", "stopped", "not answering"


def add_parser(sub: argparse._SubParsersAction) -> None:
    from pykraft import cli_admin, cli_top

    c = sub.add_parser("cluster",
                       help="run a local cluster (up/status/stop/start/restart/down) or describe one")
    actions = c.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start controllers and brokers on 127.0.0.1 and wait until ready")
    up.add_argument("--controllers", type=int, default=3, choices=[1, 3, 5])
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a Kafka-named setting passed to every process, e.g. replica.lag.time.max.ms=5000")
    up.add_argument("--timeout", type=float, default=READY_TIMEOUT_S,
                    help=f"seconds to wait until ready (default {READY_TIMEOUT_S:.0f})")
    up.add_argument("--log-level", default="INFO", choices=LOG_LEVELS,
                    help="level of every process's log file (DATA/logs/NAME.log)")
    up.set_defaults(func=cluster_up)
    status = actions.add_parser("status", help="every node: role, id, pid, state, listeners, metrics")
    status.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    status.set_defaults(func=cluster_status)
    node_actions = {
        "stop": ("stop one node: controlled shutdown (SIGTERM), SIGKILL after --timeout", cluster_stop),
        "start": ("start a stopped node again on its data directory, settings and ports", cluster_start),
        "restart": ("stop one node (controlled shutdown), then start it again", cluster_restart),
    }
    nodes = []
    for name, (text, func) in node_actions.items():
        p = actions.add_parser(name, help=text)
        p.add_argument("node", metavar="NODE", help="a node id of the cluster, e.g. 101 (a broker) or 2")
        p.add_argument("--timeout", type=float, default=None,
                       help=f"seconds before SIGKILL (default {STOP_TIMEOUT_S:.0f}) and seconds to wait "
                            f"until it is back (default {READY_TIMEOUT_S:.0f})")  # fmt: skip
        p.set_defaults(func=func)
        nodes.append(p)
    down = actions.add_parser("down", help="stop brokers (controlled shutdown), then controllers")
    down.add_argument("--timeout", type=float, default=STOP_TIMEOUT_S,
                      help=f"seconds before SIGKILL (default {STOP_TIMEOUT_S:.0f})")
    down.set_defaults(func=cluster_down)
    for p in (up, status, down, *nodes):
        p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                       help="the cluster's directory (default $PYKRAFT_DATA_DIR or ./data/cluster)")
    cli_admin.add_cluster_describe(actions)
    cli_top.add_parser(actions, DEFAULT_DATA_DIR)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Steps:
    """Prints each step as it completes with how long it took, and a progress line while waiting
    (rewritten in place on a terminal, one line every ``PROGRESS_EVERY_S`` otherwise)."""

    def __init__(self) -> None:
        self.started = self.last = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.every_s = 1.0 if self.tty else PROGRESS_EVERY_S
        self._pending = False

    def step(self, name: str) -> None:
        now = time.monotonic()
        self._clear()
        _say(f"  {name:<40} {now - self.last:6.1f} s   (at {now - self.started:.1f} s)")
        self.last = now

    def progress(self, message: str) -> None:
        if self.tty:
            print(f"\r  {message}\x1b[K", end="", file=sys.stderr, flush=True)
            self._pending = True
        else:
            _say(f"  {message}")

    def _clear(self) -> None:
        if self._pending:
            print("\r\x1b[K", end="", file=sys.stderr, flush=True)
            self._pending = False


# ---- readiness (a running cluster, asked through the controllers' AdminService) -------------------


def quorum_has_leader(cluster: LocalCluster) -> bool:
    return active_controller(cluster) > 0


def active_controller(cluster: LocalCluster) -> int:
    try:
        with AdminClient(cluster.controller_addresses, timeout_s=1.0) as admin:
            return admin.describe_quorum().leader_id
    except errors.KafkaError:
        return 0


def unfenced_brokers(cluster: LocalCluster) -> set[int]:
    try:
        with AdminClient(cluster.controller_addresses, timeout_s=1.0) as admin:
            brokers = admin.describe_cluster().brokers
    except errors.KafkaError:
        return set()
    return {b.broker_id for b in brokers if not b.fenced}


def brokers_ready(cluster: LocalCluster) -> bool:
    return {n.node_id for n in cluster.broker_nodes} <= unfenced_brokers(cluster)


def registered(cluster: LocalCluster, spec: NodeSpec) -> bool:
    """The broker's ready file (written by its current pid) says it registered."""
    ready = ready_file.read(cluster.node_dir(spec))
    return ready is not None and ready.pid == spec.pid and ready.reached(ready_file.READY)


def caught_up(cluster: LocalCluster, spec: NodeSpec) -> bool:
    """A controller serves, and the active controller sees its log at the quorum's high watermark."""
    if not cluster.healthy(spec):
        return False
    try:
        with AdminClient(cluster.controller_addresses, timeout_s=1.0) as admin:
            quorum = admin.describe_quorum()
    except errors.KafkaError:
        return False
    mine = [v for v in quorum.voters if v.node_id == spec.node_id]
    return quorum.leader_id > 0 and bool(mine) and mine[0].log_end_offset >= quorum.high_watermark


def _missing(names: list[str]) -> str:
    return "missing " + ", ".join(names) if names else "checking"


class CtrlC:
    """Ctrl-C as a flag as well as a KeyboardInterrupt, while ``up`` starts a cluster and waits for it.

    Python raises KeyboardInterrupt wherever the main thread happens to be when the signal is handled,
    and a few places lose it: a finalizer or a callback run from C prints "Exception ignored" and carries
    on. ``up`` makes and drops gRPC channels ten times a second while it waits, and once in a fresh-clone
    run a Ctrl-C was lost that way: up went on waiting for a quorum leader for a minute (fc9). So the
    handler also sets ``pressed``, and every poll of the wait calls ``check``, which raises it again."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: object = None

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():  # signals go to the main thread only
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]

    def _on_sigint(self, _signum: int, _frame: object) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.pressed:
            raise KeyboardInterrupt


def wait_ready(cluster: LocalCluster, timeout_s: float, progress: Callable[[str], None] | None = _say,
               on_step: Callable[[str], None] | None = None,
               progress_every_s: float = PROGRESS_EVERY_S, ctrl_c: CtrlC | None = None) -> None:
    """Quorum leader elected, every broker registered, unfenced and serving. ``on_step(name)`` is
    called as each of those completes; ``ctrl_c``: a Ctrl-C ends the wait even if its
    KeyboardInterrupt was lost (``CtrlC``)."""
    step = on_step or (lambda name: None)
    check = ctrl_c.check if ctrl_c is not None else (lambda: None)

    def wait(condition: Callable[[], bool], what: str, detail: Callable[[], str] | None = None) -> None:
        def polled() -> bool:
            check()
            return condition()

        cluster.wait_until(polled, timeout_s, what, progress, detail, progress_every_s)

    wait(lambda: quorum_has_leader(cluster), "a quorum leader")
    step(f"quorum leader elected ({active_controller(cluster) or '?'})")
    if cluster.broker_nodes:
        wait(lambda: all(registered(cluster, n) for n in cluster.broker_nodes), "brokers registered",
             lambda: _missing([n.name for n in cluster.broker_nodes if not registered(cluster, n)]))
        step("brokers registered")
        wait(lambda: brokers_ready(cluster), "brokers unfenced",
             lambda: _missing([n.name for n in cluster.broker_nodes
                               if n.node_id not in unfenced_brokers(cluster)]))  # fmt: skip
        step("brokers unfenced")
    wait(lambda: all(cluster.healthy(n) for n in cluster.nodes), "every node healthy",
         lambda: _missing([n.name for n in cluster.nodes if not cluster.healthy(n)]))
    step("every node healthy")


def wait_node_back(cluster: LocalCluster, spec: NodeSpec, timeout_s: float, steps: Steps) -> None:
    """A restarted broker registered and unfenced; a restarted controller caught up with the quorum."""
    def wait(condition: Callable[[], bool], what: str) -> None:
        cluster.wait_until(condition, timeout_s, what, steps.progress, progress_every_s=steps.every_s,
                           watch=[spec])  # fmt: skip
        steps.step(what)

    if spec.role == "broker":
        wait(lambda: registered(cluster, spec), f"{spec.name} registered")
        wait(lambda: spec.node_id in unfenced_brokers(cluster), f"{spec.name} unfenced")
    else:
        wait(lambda: caught_up(cluster, spec), f"{spec.name} caught up with the quorum")


# ---- commands -----------------------------------------------------------------------------------


def _load(data_dir: Path) -> LocalCluster:
    cluster = LocalCluster.load(data_dir.resolve())
    cluster.adopt_running()
    return cluster


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
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _say(f"Error: --data-dir {args.data_dir}: {exc.strerror or exc}")
        return 2
    try:
        with cluster_lock(data_dir):
            return _up(args, data_dir, overrides)
    except ClusterError as exc:
        _say(f"Error: {exc}")
        return 1


def _up(args: argparse.Namespace, data_dir: Path, overrides: dict[str, str]) -> int:
    try:
        existing = _load(data_dir)
    except ClusterError:
        existing = None
    if existing and any(existing.is_running(n) for n in existing.nodes):
        running = ", ".join(n.name for n in existing.nodes if existing.is_running(n))
        raise ClusterError(f"a cluster is already running in {data_dir} ({running}); "
                           "`pykraft cluster down` first")  # fmt: skip
    cluster = LocalCluster(data_dir, controllers=args.controllers, brokers=args.brokers, overrides=overrides,
                           log_level=args.log_level)
    _say(f"starting {args.controllers} controllers and {args.brokers} brokers in {data_dir}")
    steps = Steps()
    with CtrlC() as ctrl_c:
        try:
            cluster.start(on_step=steps.step)
            wait_ready(cluster, args.timeout, steps.progress, steps.step, steps.every_s, ctrl_c)
        except BaseException as exc:  # KeyboardInterrupt too: nothing started here outlives a failed up
            steps.progress("stopping what started...")
            cluster.down(timeout_s=5.0)
            steps.step("stopped every node started")
            if isinstance(exc, KeyboardInterrupt):
                _say("interrupted")
            raise
    for spec in cluster.nodes:
        _say(f"  {spec.name:<14} pid {spec.pid:<8} {spec.address}   log {cluster.log_path(spec)}")
    print(f"bootstrap: {cluster.bootstrap}")
    print(f"export PYKRAFT_BOOTSTRAP={cluster.bootstrap}")
    if cluster.kafka_bootstrap:
        print(f"kafka bootstrap: {cluster.kafka_bootstrap}")
        print(f"export KAFKA_BOOTSTRAP={cluster.kafka_bootstrap}")
    return 0


def node_rows(cluster: LocalCluster) -> list[dict]:
    rows = []
    for spec in cluster.nodes:
        running = cluster.is_running(spec)
        state = (RUNNING if cluster.healthy(spec) else NOT_ANSWERING) if running else STOPPED
        rows.append({"name": spec.name, "role": spec.role, "node_id": spec.node_id,
                     "pid": spec.pid if running else None, "state": state, "address": spec.address,
                     "kafka": spec.kafka_address or None, "metrics": spec.metrics_url or None})  # fmt: skip
    return rows


def cluster_status(args: argparse.Namespace) -> int:
    try:
        cluster = _load(args.data_dir)
    except ClusterError as exc:
        _say(f"Error: {exc}")
        return 1
    rows = node_rows(cluster)
    leader = active_controller(cluster) if any(r["state"] == RUNNING for r in rows) else 0
    if args.json:
        print(json.dumps({"data_dir": str(cluster.data_dir), "nodes": rows,
                          "active_controller": leader or None, "kafka_bootstrap": cluster.kafka_bootstrap},
                         indent=2))  # fmt: skip
        return 0
    print(f"{'NAME':<14} {'ROLE':<11} {'ID':>4} {'PID':>8}  {'STATE':<14} {'LISTENER':<16} {'KAFKA':<16} "
          "METRICS")
    for r in rows:
        active = "  (active controller)" if r["role"] == "controller" and r["node_id"] == leader else ""
        print(f"{r['name']:<14} {r['role']:<11} {r['node_id']:>4} {r['pid'] or '-':>8}  {r['state']:<14} "
              f"{r['address']:<16} {r['kafka'] or '-':<16} {r['metrics'] or '-'}{active}")
    if cluster.kafka_bootstrap:
        print(f"kafka bootstrap: {cluster.kafka_bootstrap}")
    return 0 if all(r["state"] == RUNNING for r in rows) else 1


NodeAction = Callable[[LocalCluster, NodeSpec, argparse.Namespace], None]


def _on_node(args: argparse.Namespace, action: NodeAction) -> int:
    try:
        with cluster_lock(args.data_dir.resolve()):
            cluster = _load(args.data_dir)
            action(cluster, cluster.find_node(args.node), args)
    except ClusterError as exc:
        _say(f"Error: {exc}")
        return 1
    return 0


def _stop(cluster: LocalCluster, spec: NodeSpec, timeout_s: float) -> None:
    pid, started = spec.pid, time.monotonic()
    graceful = cluster.stop_node(spec, timeout_s)
    cluster.save()
    took = time.monotonic() - started
    if graceful:
        _say(f"stopped {spec.name} (pid {pid}) in {took:.1f} s")
    else:
        _say(f"killed {spec.name} (pid {pid}): still running {timeout_s:.0f} s after SIGTERM")


def _start(cluster: LocalCluster, spec: NodeSpec, timeout_s: float) -> None:
    steps = Steps()
    _say(f"starting {spec.name} in {cluster.node_dir(spec)}")
    notes = cluster.start_node(spec)
    for note in notes:
        _say(f"  {spec.name}: {note}")
    steps.step(f"{spec.name} listening (pid {spec.pid})")
    wait_node_back(cluster, spec, timeout_s, steps)
    kafka = f", Kafka {spec.kafka_address}" if spec.kafka_address else ""
    _say(f"started {spec.name} (pid {spec.pid}) on {spec.address}{kafka}")


def _stop_action(cluster: LocalCluster, spec: NodeSpec, args: argparse.Namespace) -> None:
    if not cluster.is_running(spec):
        raise ClusterError(f"{spec.name} is already stopped")
    _stop(cluster, spec, STOP_TIMEOUT_S if args.timeout is None else args.timeout)


def _start_action(cluster: LocalCluster, spec: NodeSpec, args: argparse.Namespace) -> None:
    if cluster.is_running(spec):
        raise ClusterError(f"{spec.name} is already running (pid {spec.pid})")
    _start(cluster, spec, READY_TIMEOUT_S if args.timeout is None else args.timeout)


def _restart_action(cluster: LocalCluster, spec: NodeSpec, args: argparse.Namespace) -> None:
    if cluster.is_running(spec):
        _stop(cluster, spec, STOP_TIMEOUT_S if args.timeout is None else args.timeout)
    else:
        _say(f"{spec.name} was not running")
    _start(cluster, spec, READY_TIMEOUT_S if args.timeout is None else args.timeout)


def cluster_stop(args: argparse.Namespace) -> int:
    return _on_node(args, _stop_action)


def cluster_start(args: argparse.Namespace) -> int:
    return _on_node(args, _start_action)


def cluster_restart(args: argparse.Namespace) -> int:
    return _on_node(args, _restart_action)


def cluster_down(args: argparse.Namespace) -> int:
    try:
        with cluster_lock(args.data_dir.resolve()):
            cluster = _load(args.data_dir)
            already = [n.name for n in cluster.nodes if not cluster.is_running(n)]
            pids = {n.name: n.pid for n in cluster.nodes}
            graceful = cluster.down(timeout_s=args.timeout)
    except ClusterError as exc:
        _say(f"Error: {exc}")
        return 1
    for name, ok in graceful.items():
        how = "stopped" if ok else f"killed after {args.timeout:.0f} s"
        _say(f"  {name}: {how} (pid {pids[name]})")
    for name in already:
        _say(f"  {name}: already stopped")
    _say(f"cluster stopped: {len(graceful)} node(s) stopped, {len(already)} already stopped")
    return 0
