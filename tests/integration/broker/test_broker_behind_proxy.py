"""Nodes that listen on one port and advertise another: a TCP forwarder in front of every node.

Rules under test (Kafka's ``advertised.listeners``): a broker registers its advertised endpoint, not
its listen address, so Metadata and DescribeCluster return the forwarder's port; clients and the other
brokers' replica fetchers dial that port (an ``acks=all`` produce with ``min.insync.replicas=2``
commits only once the follower fetched through the leader's forwarder); controllers listen apart from
their ``--voters`` entries and still elect a leader (the voters dial each other through forwarders).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_cluster import FAST_OVERRIDES, RPC_TIMEOUT_S, BrokerCluster, wait_for

from proto import broker_pb2
from pykraft.cli_cluster import wait_ready
from pykraft.cluster import LocalCluster
from pykraft.producer import Producer

pytestmark = pytest.mark.integration
TOPIC = "advertised"
READY_TIMEOUT_S = 60.0


class TcpForwarder:
    """Accepts on a free 127.0.0.1 port and pipes each connection to ``127.0.0.1:target_port``.

    Records the client-side port of every connection it forwarded (``peer_ports``) so a test can tell
    which process dialled it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.peer_ports: list[int] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"forward-{self.port}", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, (_, peer_port) = self.listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5.0)
            except OSError:  # the node is not up yet: the caller retries
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self.peer_ports.append(peer_port)
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(src, dst), daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes accept() on Linux
        self.listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def local_tcp_ports(pid: int) -> set[int]:
    """Local ports of the TCP sockets process ``pid`` holds (from /proc; gRPC may use IPv6 sockets)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[BrokerCluster, dict[str, TcpForwarder]]]:
    cluster = LocalCluster(tmp_path, controllers=3, brokers=2, overrides=dict(FAST_OVERRIDES))
    cluster.plan()
    forwarders = {}
    for spec in cluster.nodes:
        forwarders[spec.name] = TcpForwarder(spec.port)
        spec.advertised_port = forwarders[spec.name].port
    bc = BrokerCluster(cluster)
    try:
        cluster.start()
        wait_ready(cluster, READY_TIMEOUT_S, progress=None)
        yield bc, forwarders
    finally:
        bc.close()
        cluster.down(timeout_s=15.0)
        for spec in cluster.nodes:
            cluster.kill_node(spec)
        for forwarder in forwarders.values():
            forwarder.close()


def test_brokers_advertise_the_forwarder_and_replicate_through_it(
    proxied: tuple[BrokerCluster, dict[str, TcpForwarder]],
) -> None:
    bc, forwarders = proxied
    cluster = bc.cluster
    advertised = {spec.node_id: forwarders[spec.name].port for spec in cluster.broker_nodes}
    listening = {spec.node_id: spec.port for spec in cluster.broker_nodes}
    assert not set(advertised.values()) & set(listening.values())

    registered = {b.broker_id: b.endpoints for b in bc.admin.describe_cluster().brokers}
    assert registered == {i: (("PLAINTEXT", "127.0.0.1", port),) for i, port in advertised.items()}
    for broker_id in advertised:
        response = bc.stub(broker_id).Metadata(broker_pb2.MetadataRequest(), timeout=RPC_TIMEOUT_S)
        assert {b.node_id: b.port for b in response.brokers} == advertised

    bc.create_topic(TOPIC, partitions=1, rf=2, min_insync_replicas="2")
    leader = bc.leader(TOPIC)
    follower = next(i for i in advertised if i != leader)
    bc.wait_isr(TOPIC, {leader, follower})
    result = bc.produce(leader, TOPIC, [b"a", b"b", b"c"], acks=-1)
    assert result.code == 0, result
    with Producer(cluster.bootstrap, acks="all") as producer:
        assert producer.send(TOPIC, value=b"d").result().offset == 3

    # The follower's fetcher dialled the leader's advertised port, not its listen port.
    follower_pid = cluster.node(f"broker-{follower}").pid
    leader_forwarder = forwarders[f"broker-{leader}"]
    wait_for(
        lambda: set(leader_forwarder.peer_ports) & local_tcp_ports(follower_pid),
        10, f"a connection from broker {follower} through broker {leader}'s forwarder",
    )  # fmt: skip
    assert bc.high_watermark(leader, TOPIC) == 4
