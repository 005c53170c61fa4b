"""The controller process: one voter of the metadata quorum, serving AdminService and ControllerService.

    pykraft controller --node-id 1 --listen 127.0.0.1:9093 \\
        --voters 1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095 --data-dir DIR \\
        [--override broker.session.timeout.ms=9000] [--override default.replication.factor=3] ...

One gRPC port serves RaftService (the other voters), AdminService (clients), ControllerService
(brokers) and the standard health service. The Raft leader is the active controller. The process
writes its ready file (``proto.runtime.ready_file``: its port and metrics URL) once it serves; SIGTERM or
SIGINT stops it gracefully (an active controller hands leadership over first), bounded: a stop still
running after ``SHUTDOWN_DEADLINE_S`` is logged (``shutdown_stuck``, naming the step) and the process
exits with status 3. A bad flag or an unusable data directory, or a port another process serves
(``proto.runtime.listeners``), exits with status 2 and one line on stderr naming the problem, never a
traceback.

Settings use Kafka's config names and come from ``--override KEY=VALUE``, ``PYKRAFT_<NAME>``
environment variables and ``--config-file`` (``proto.runtime.settings``: flags > environment > file >
defaults). Broker settings (``BROKER_KEYS``: the local launcher passes the same overrides to every
node) are accepted and ignored; any other name, or a bad value, exits 2 naming it.
``--metrics-port`` serves Prometheus metrics (``metadata.metrics``).

Cluster id: ``--cluster-id`` / ``cluster.id`` (Kafka's ``kafka-storage.sh format --cluster-id``) names
the cluster; unset, the first active controller generates one. Either way it is committed once into
the metadata log and then recorded in the data directory's ``meta.properties``
(``proto.runtime.meta_properties``). A controller whose ``meta.properties`` or metadata log belongs to
another cluster than its ``cluster.id`` refuses to run (INCONSISTENT_CLUSTER_ID, exit status 2).

Addresses: the process listens on ``--listen``; every other node dials the address of its entry in
``--voters`` (Kafka's ``controller.quorum.voters``), which is therefore this controller's advertised
listener and may differ from ``--listen`` (behind a proxy, NAT or a container name). The
``advertised.listeners`` setting (``--advertised-listener``) is accepted so that one properties file or
environment serves every role; a controller refuses one that differs from its voters entry.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from metadata.admin_service import AdminServicer
from metadata.controller import DEFAULT_BROKER_SESSION_TIMEOUT_MS, ControllerConfig, QuorumController
from metadata.controller_service import ControllerServicer
from metadata.metrics import controller_registry
from metadata.records import NO_CLUSTER_ID, cluster_id_problem
from metadata.service import ActiveController, Forwarder, fence_loop
from metadata.state_machine import MetadataStateMachine
from proto import admin_pb2_grpc, controller_pb2_grpc
from proto.runtime import ready_file
from proto.runtime.listeners import (
    SERVER_OPTIONS,
    ListenerError,
    add_grpc_listener,
    check_bindable,
    split_address,
)
from proto.runtime.logfmt import configure_logging, log_event
from proto.runtime.meta_properties import (
    InconsistentClusterIdError,
    MetaPropertiesError,
    mismatch,
    read_cluster_id,
    record_cluster_id,
)
from proto.runtime.metrics import (
    METRICS_HOST,
    METRICS_HOST_SETTING,
    METRICS_OFF,
    METRICS_SETTING,
    MetricsEndpoint,
    serve_metrics,
)
from proto.runtime.serving import add_standard_services, start_shutdown_watchdog
from proto.runtime.settings import (
    ADVERTISED_LISTENERS,
    IDENTITY_FLAGS,
    Converters,
    check_data_dir,
    collect_overrides,
    fill_identity,
    listen_address,
    one_dir,
    parse_listener,
    require,
)
from raft.config import QuorumConfig, QuorumConfigError, parse_voters
from raft.driver import DriverConfig, RaftDriver
from raft.store import RaftStoreCorruptError

log = logging.getLogger(__name__)

EXIT_USAGE = 2
SERVER_STOP_GRACE_S = 0.5
LISTEN_SETTING = "--listen"
IDENTITY_CONVERTERS: Converters = {
    "node_id": int,
    "listen": listen_address,
    "voters": str,
    "data_dir": one_dir,
}
REQUIRED_FLAGS = ("node_id", "listen", "voters", "data_dir")
CLUSTER_ID = "cluster.id"
SHUTDOWN_DEADLINE_S = 10.0  # plus two election timeouts (a leadership hand-over)
SERVICE_NAMES = [
    "pykraft.raft.RaftService",
    "pykraft.admin.AdminService",
    "pykraft.controller.ControllerService",
]

# Kafka config name -> (ControllerSettings field, minimum)
OVERRIDES: dict[str, tuple[str, int]] = {
    "broker.session.timeout.ms": ("broker_session_timeout_ms", 1),
    "num.partitions": ("default_num_partitions", 1),
    "default.replication.factor": ("default_replication_factor", 1),
    "controller.quorum.election.timeout.ms": ("election_timeout_ms", 1),
    "controller.quorum.heartbeat.interval.ms": ("heartbeat_interval_ms", 1),
    "metadata.snapshot.every.entries": ("snapshot_every_entries", 1),
}

# Settings of the broker processes (broker.config.BROKER_OVERRIDES and TOPIC_DEFAULT_KEYS), accepted
# and ignored; kept as names because metadata may not import broker (a unit test keeps them equal).
BROKER_KEYS = frozenset(
    {
        "replica.lag.time.max.ms",
        "broker.heartbeat.interval.ms",
        "replica.fetch.max.wait.ms",
        "replica.fetch.min.bytes",
        "replica.fetch.max.bytes",
        "replica.fetch.response.max.bytes",
        "replica.fetch.backoff.ms",
        "request.timeout.ms",
        "replica.high.watermark.checkpoint.interval.ms",
        "controlled.shutdown.timeout.ms",
        "log.retention.check.interval.ms",
        "log.flush.scheduler.interval.ms",
        "log.cleaner.backoff.ms",
        "log.cleaner.enable",
        "kafka.sendfile.enable",
        "cleanup.policy",
        "delete.retention.ms",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "group.min.session.timeout.ms",
        "group.max.session.timeout.ms",
        "group.initial.rebalance.delay.ms",
        "group.max.size",
        "offsets.topic.num.partitions",
        "offsets.topic.replication.factor",
        "offsets.topic.segment.bytes",
        "offsets.commit.timeout.ms",
        "offset.metadata.max.bytes",
        "offsets.retention.minutes",
        "offsets.retention.check.interval.ms",
        "producer.id.expiration.ms",
        "socket.request.max.bytes",
        "max.connections",
        "connections.max.idle.ms",
        "log.refused.requests.interval.ms",
        "min.insync.replicas",
        "max.message.bytes",
        "segment.bytes",
        "segment.ms",
        "retention.ms",
        "retention.bytes",
        "flush.messages",
        "flush.ms",
        "message.timestamp.type",
        "index.interval.bytes",
    }
)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    broker_session_timeout_ms: int = DEFAULT_BROKER_SESSION_TIMEOUT_MS
    default_num_partitions: int = 1
    default_replication_factor: int = 1
    election_timeout_ms: int = 300
    heartbeat_interval_ms: int = 50
    snapshot_every_entries: int = 10_000
    advertised_listeners: str = ""  # HOST:PORT; must equal this node's --voters entry when set
    cluster_id: str = NO_CLUSTER_ID  # unset: the log's, else the first active controller generates one


def parse_overrides(items: list[str], base: ControllerSettings) -> ControllerSettings:
    values: dict[str, Any] = {}  # ControllerSettings field -> its str or int value
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--override {item!r}: expected KEY=VALUE, e.g. broker.session.timeout.ms=3000")
        key = key.strip()
        if key in BROKER_KEYS:
            continue
        if key == ADVERTISED_LISTENERS:
            parse_listener(value, f"setting {key}")
            values["advertised_listeners"] = value.strip()
            continue
        if key == CLUSTER_ID:
            problem = cluster_id_problem(value.strip())
            if problem is not None:
                raise ValueError(f"setting {key}: {problem}")
            values["cluster_id"] = value.strip()
            continue
        if key not in OVERRIDES:
            known = ", ".join(sorted([*OVERRIDES, ADVERTISED_LISTENERS, CLUSTER_ID]))
            raise ValueError(f"setting {key}: unknown controller setting; known: {known}")
        field, minimum = OVERRIDES[key]
        if not value.strip().lstrip("-").isdigit() or int(value) < minimum:
            raise ValueError(f"setting {key}={value}: must be an integer >= {minimum}")
        values[field] = int(value)
    return dataclasses.replace(base, **values)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Required, unless given by their Kafka names (node.id, listeners, controller.quorum.voters, log.dirs)
    # in --config-file or PYKRAFT_* variables (proto.runtime.settings.fill_identity).
    parser.add_argument("--node-id", type=int, help="this controller's voter id")
    parser.add_argument("--listen", help="host:port to serve on (others dial --voters)")
    parser.add_argument(
        "--advertised-listener", "--advertised-listeners", dest="advertised_listener", default=None,
        metavar="HOST:PORT", help="must equal this node's --voters entry (the address others dial)",
    )  # fmt: skip
    parser.add_argument("--voters", help="1@host:port,2@host:port,3@host:port")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--broker-session-timeout-ms", type=int, default=DEFAULT_BROKER_SESSION_TIMEOUT_MS)
    parser.add_argument("--election-timeout-ms", type=int, default=300)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=50)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--config-file", type=Path, default=None, help="Kafka-style key=value properties")
    parser.add_argument(
        "--cluster-id", default=None, metavar="UUID",
        help="the cluster's id (22-character url-safe base64 Uuid, Kafka's format --cluster-id); "
        "default: the metadata log's, else generated by the first active controller",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=None, help="seed for topic ids and placement")
    parser.add_argument("--log-level", default="INFO", help="log level (default: %(default)s, as Kafka's)")
    parser.add_argument(
        "--metrics-port", type=int, default=0,
        help="Prometheus /metrics port on --metrics-host (0: a free one, named in the ready file; -1: off)",
    )  # fmt: skip
    parser.add_argument(
        METRICS_HOST_SETTING, default=METRICS_HOST, metavar="HOST",
        help="address /metrics listens on (default: %(default)s; 0.0.0.0 in a container, for Prometheus)",
    )  # fmt: skip


def settings_from(args: argparse.Namespace) -> ControllerSettings:
    base = ControllerSettings(
        broker_session_timeout_ms=args.broker_session_timeout_ms,
        election_timeout_ms=args.election_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
    )
    if args.metrics_port < METRICS_OFF or args.metrics_port > 65535:
        raise ValueError(f"--metrics-port {args.metrics_port}: must be 1..65535, 0 (any) or -1 (off)")
    known = [*OVERRIDES, ADVERTISED_LISTENERS, CLUSTER_ID, *IDENTITY_FLAGS]
    items = collect_overrides(args.override, known, os.environ, args.config_file)
    items = fill_identity(args, items, IDENTITY_CONVERTERS)
    require(args, *REQUIRED_FLAGS)
    if args.advertised_listener is not None:
        items.append(f"{ADVERTISED_LISTENERS}={args.advertised_listener}")
    if args.cluster_id is not None:
        items.append(f"{CLUSTER_ID}={args.cluster_id}")
    settings = parse_overrides(items, base)
    if settings.election_timeout_ms <= settings.heartbeat_interval_ms:
        raise ValueError(
            f"election timeout {settings.election_timeout_ms} ms must exceed the heartbeat interval "
            f"{settings.heartbeat_interval_ms} ms"
        )
    return settings


def expected_cluster_id(data_dir: Path, configured: str) -> str:
    """The cluster id this node belongs to before it reads the log: ``cluster.id`` and the data
    directory's meta.properties must agree; either may be missing (then the log decides)."""
    stored = read_cluster_id(data_dir)
    if configured and stored is not None and stored != configured:
        raise mismatch(data_dir, stored, configured, CLUSTER_ID)
    return configured or stored or NO_CLUSTER_ID


LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0", "::", ""})


def check_own_voter_entry(node_id: int, listen: str, voters: QuorumConfig, advertised: bool) -> None:
    """Refuse a controller that listens where its ``--voters`` entry does not point (a copied command
    with another node's id, or a new port): it would print READY and sit at term 0, unreachable.

    ``--listen`` may equal another voter's entry never; it may differ from this node's own entry only
    when the entry is not a local address (a container or host name: Docker's 0.0.0.0:9093 behind
    controller-1:9093) or when ``--advertised-listener`` says that a proxy forwards the entry here."""
    host, _, port_text = listen.rpartition(":")
    port = int(port_text)
    me = voters.voter(node_id)
    for voter in voters.voters:
        same_host = voter.host == host or (voter.host in LOCAL_HOSTS and host in LOCAL_HOSTS)
        if voter.node_id != node_id and voter.port == port and same_host:
            raise QuorumConfigError(
                f"--listen {listen} is controller {voter.node_id}'s --voters entry, but this is "
                f"--node-id {node_id} (whose entry is {me.address}): give the node id of this address"
            )
    if advertised or me.host not in LOCAL_HOSTS or host not in LOCAL_HOSTS or port in (me.port, 0):
        return
    raise QuorumConfigError(
        f"--listen {listen} does not match controller {node_id}'s --voters entry {me.address}, the "
        f"address every other voter dials: give the node id whose entry this is, listen on {me.address}, "
        "or set --advertised-listener to the entry when a proxy forwards it here"
    )


class ControllerNode:
    """A running controller: Raft driver + metadata state machine + gRPC services."""

    def __init__(
        self,
        node_id: int,
        listen: str,
        voters: str,
        data_dir: Path,
        settings: ControllerSettings,
        seed: int | None = None,
        metrics_port: int = METRICS_OFF,
        metrics_host: str = METRICS_HOST,
    ) -> None:
        self.voters = parse_voters(voters)
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.metrics: MetricsEndpoint | None = None
        me = self.voters.voter(node_id)  # raises QuorumConfigError if this node is not a voter
        if settings.advertised_listeners:
            host, port = parse_listener(settings.advertised_listeners)
            if (host, port) != (me.host, me.port):
                raise QuorumConfigError(
                    f"{ADVERTISED_LISTENERS}={host}:{port} differs from controller {node_id}'s --voters "
                    f"entry {me.address}, the address every other node dials; make them equal"
                )
        check_own_voter_entry(node_id, listen, self.voters, bool(settings.advertised_listeners))
        self.listen = listen
        self.settings = settings
        self.node_id, self.data_dir = node_id, data_dir
        self.cluster_id = expected_cluster_id(data_dir, settings.cluster_id)
        config = ControllerConfig(
            broker_session_timeout_ms=settings.broker_session_timeout_ms,
            default_num_partitions=settings.default_num_partitions,
            default_replication_factor=settings.default_replication_factor,
            cluster_id=self.cluster_id,
        )
        self.controller = QuorumController(config, random.Random(seed))
        self.state_machine = MetadataStateMachine(self.controller, on_cluster_id=self._on_cluster_id)
        self.driver = RaftDriver(
            DriverConfig(
                node_id=node_id,
                voters=self.voters,
                data_dir=data_dir,
                election_timeout_ms=settings.election_timeout_ms,
                heartbeat_interval_ms=settings.heartbeat_interval_ms,
                snapshot_every_entries=settings.snapshot_every_entries,
                seed=seed,
            ),
            self.state_machine,
        )
        self.server: grpc.aio.Server | None = None
        self.port = 0  # the bound port (the kernel's choice when --listen asks for port 0)
        self._tasks: list[asyncio.Task] = []
        self.stopping_step = ""  # what stop() is doing (named by the shutdown watchdog)

    def _on_cluster_id(self, cluster_id: str) -> None:
        """The image got its cluster id: record it in meta.properties, or stop if it is another
        cluster's (this node's data must not join a second cluster's log, nor the reverse)."""
        try:
            if self.cluster_id and cluster_id != self.cluster_id:
                raise mismatch(self.data_dir, self.cluster_id, cluster_id, "the metadata log's cluster id")
            record_cluster_id(self.data_dir, self.node_id, cluster_id)
        except (InconsistentClusterIdError, MetaPropertiesError, OSError) as exc:
            log_event(log, logging.CRITICAL, "cluster_id_not_recorded", reason=exc,
                      action="stopping")  # fmt: skip
            print(f"pykraft controller: error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(EXIT_USAGE) from exc
        self.cluster_id = cluster_id

    async def start(self) -> None:
        # A busy port (or metrics port): one line naming the setting, before anything starts.
        check_bindable(LISTEN_SETTING, self.listen)
        if self.metrics_port > 0:
            address = f"{self.metrics_host}:{self.metrics_port}"
            check_bindable(METRICS_SETTING, address, str(self.metrics_port))
        await self.driver.start()
        self.server = grpc.aio.server(options=SERVER_OPTIONS)
        self.driver.add_to_server(self.server)
        active = ActiveController(self.driver, self.controller, self.state_machine)
        wait_s = 4 * self.settings.election_timeout_ms / 1000
        self.forwarder = Forwarder(self.driver, self.voters, leader_wait_s=wait_s, call_timeout_s=10.0)
        admin_pb2_grpc.add_AdminServiceServicer_to_server(
            AdminServicer(active, self.forwarder, self.voters), self.server
        )
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(
            ControllerServicer(active, self.forwarder, self.state_machine), self.server
        )
        self.health = add_standard_services(self.server, SERVICE_NAMES)
        try:
            self.port = add_grpc_listener(self.server, LISTEN_SETTING, self.listen)
            self.metrics = serve_metrics(
                controller_registry(self.driver, self.controller), self.metrics_port, self.metrics_host
            )
        except ListenerError:
            await self.driver.stop()
            await self.server.stop(None)
            raise
        await self.server.start()
        await self.health.set_serving(True)
        interval_s = min(0.1, self.settings.broker_session_timeout_ms / 4000)
        self._tasks.append(asyncio.create_task(fence_loop(active, interval_s), name="fence-loop"))

    async def stop(self) -> None:
        """Fencing stops, health turns NOT_SERVING, the Raft driver stops (an active controller hands
        leadership over first, while the server still answers the votes), then the server: open
        streams (brokers' FetchMetadata) get ``SERVER_STOP_GRACE_S`` and are cancelled."""
        self.stopping_step = "fence loop"
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.stopping_step = "health and metrics"
        await self.health.set_serving(False)
        if self.metrics is not None:
            self.metrics.close()
        self.stopping_step = "raft driver"
        await self.driver.stop()
        self.stopping_step = "forwarder"
        await self.forwarder.close()
        self.stopping_step = "grpc server"
        assert self.server is not None
        await self.server.stop(grace=SERVER_STOP_GRACE_S)
        self.stopping_step = "event loop cleanup"


async def serve(args: argparse.Namespace, settings: ControllerSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before start(): a SIGTERM while starting stops cleanly
        loop.add_signal_handler(sig, stop.set)
    node = ControllerNode(
        args.node_id, args.listen, args.voters, args.data_dir, settings, args.seed, args.metrics_port,
        args.metrics_host,
    )
    await node.start()
    if node.metrics is not None:
        log_event(log, logging.INFO, "metrics_endpoint", url=node.metrics.url)
    # What a launcher waits for (proto.runtime.ready_file): a controller serves once it listens.
    ready_file.write(args.data_dir, ready_file.ReadyFile(
        args.node_id, "controller", os.getpid(), ready_file.READY,
        f"{split_address(node.listen)[0]}:{node.port}", metrics=node.metrics.url if node.metrics else None,
    ))  # fmt: skip
    await stop.wait()
    log_event(log, logging.INFO, "shutdown", leader=node.driver.is_leader)
    # Covers stop() and asyncio.run's own clean-up of leftover tasks; a daemon thread, gone at exit.
    start_shutdown_watchdog(
        SHUTDOWN_DEADLINE_S + 2 * settings.election_timeout_ms / 1000, lambda: node.stopping_step
    )
    await node.stop()


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from(args)  # node.id may come from the properties file or the environment
        check_data_dir(args.data_dir)
        configure_logging(args.log_level, args.node_id, "controller")
        asyncio.run(serve(args, settings))
    except (
        QuorumConfigError, RaftStoreCorruptError, OSError, ValueError, InconsistentClusterIdError,
        MetaPropertiesError,
    ) as exc:  # fmt: skip
        print(f"pykraft controller: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metadata.server", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
