"""Bad input on the Kafka listener of a real 3 + 3 cluster, while a healthy confluent-kafka client
keeps producing (acks=all, idempotent) and consuming through the same broker (issue 15 §2, §5).

Each bad connection is answered by the documented error (KIP-511's v0 ApiVersions answer) or closed
with a log line naming why; nothing is appended; the healthy client's records all arrive, exactly
once; the broker keeps serving. Processes are stopped by pid in ``running_cluster``'s ``finally``.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from proto.errors import ErrorCode
from proto.kafka.api import parse_response
from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEADLINE_S = 60.0
MAX_REQUEST_BYTES = 1 << 20
IDLE_MS = 3000
TOPIC = "healthy"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    overrides = {"socket.request.max.bytes": str(MAX_REQUEST_BYTES), "connections.max.idle.ms": str(IDLE_MS)}
    with running_cluster(Path(tmp_path_factory.mktemp("kafka-bad-input")), **overrides) as bc:
        yield bc


def frame(
    api_key: int, version: int, body: bytes, correlation_id: int = 1, client_id: bytes = b"bad"
) -> bytes:
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id + body
    return struct.pack(">i", len(payload)) + payload


def closed_by_broker(sock: socket.socket, timeout_s: float = DEADLINE_S) -> bool:
    """True when the broker closes the connection (EOF or reset) before the deadline, reading (and
    dropping) anything it sends first."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


class HealthyClient:
    """Produces numbered records (acks=all, idempotent) until stopped; counts acknowledged ones."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": int(DEADLINE_S * 1000)})  # fmt: skip
        self.acked = 0
        self.failures: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="healthy-producer", daemon=True)

    def _on_delivery(self, err, _msg) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failures.append(str(err))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(TOPIC, value=b"record-%d" % self.sent, on_delivery=self._on_delivery)
            self.sent += 1
            self.producer.poll(0.005)

    def __enter__(self) -> HealthyClient:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_S)
        assert self.producer.flush(DEADLINE_S) == 0


def test_bad_input_is_refused_while_a_healthy_client_goes_on(cluster: BrokerCluster) -> None:
    cluster.create_topic(TOPIC, partitions=1, min_insync_replicas="2")
    leader = cluster.broker(cluster.leader(TOPIC))
    host, port = "127.0.0.1", leader.kafka_port
    bad: list[tuple[str, bytes]] = [
        ("above socket.request.max.bytes", struct.pack(">i", MAX_REQUEST_BYTES + 1) + b"x" * 100),
        ("negative size", struct.pack(">i", -1) + b"x" * 8),
        ("truncated header", struct.pack(">i", 3) + b"\x00\x03\x00"),
        ("garbage", struct.pack(">i", 12) + bytes(range(200, 212))),
        ("unknown api key", frame(4242, 0, b"")),
        ("unsupported Produce version", frame(0, 2, b"\x00" * 16)),
        ("huge array count", frame(0, 3, struct.pack(">hhii", -1, -1, 1000, 1 << 30))),
        ("truncated body", frame(3, 1, struct.pack(">i", 5) + b"\x00\x04ab")),
        ("invalid UTF-8 topic", frame(3, 1, struct.pack(">ih", 1, 2) + b"\xff\xfe")),
        ("half a frame then stall", struct.pack(">i", 500) + b"\x00\x03\x00\x01"),
    ]
    with HealthyClient(cluster.cluster.kafka_bootstrap) as healthy:
        wait_for(lambda: healthy.acked > 50, DEADLINE_S, "the healthy producer's first acks")
        idle = [socket.create_connection((host, port), timeout=DEADLINE_S) for _ in range(300)]
        for what, data in bad:
            before = healthy.acked
            with socket.create_connection((host, port), timeout=DEADLINE_S) as sock:
                sock.sendall(data)
                assert closed_by_broker(sock), f"{what}: the broker kept the connection open"
            wait_for(lambda b=before: healthy.acked > b, DEADLINE_S, f"healthy acks after {what}")
        with socket.create_connection((host, port), timeout=DEADLINE_S) as sock:  # KIP-511
            sock.sendall(frame(18, 99, b"", correlation_id=7))
            size = struct.unpack(">i", _read_exactly(sock, 4))[0]
            correlation_id, answer = parse_response(18, 0, _read_exactly(sock, size))
            assert (correlation_id, answer.error_code) == (7, ErrorCode.UNSUPPORTED_VERSION)
            assert [(a.api_key, a.min_version, a.max_version) for a in answer.api_keys] == [(18, 0, 4)]
            sock.sendall(frame(18, 0, b"", correlation_id=8))  # the socket stayed open: v0 works
            size = struct.unpack(">i", _read_exactly(sock, 4))[0]
            assert parse_response(18, 0, _read_exactly(sock, size))[1].error_code == 0
        # The idle connections are closed by connections.max.idle.ms; the healthy client goes on.
        assert all(closed_by_broker(s, IDLE_MS / 1000 * 10) for s in idle)
        for s in idle:
            s.close()
        before = healthy.acked
        wait_for(lambda: healthy.acked > before + 50, DEADLINE_S, "healthy acks after the idle closes")
    assert not healthy.failures, healthy.failures[:3]
    assert healthy.acked == healthy.sent
    assert read_values(cluster) == [b"record-%d" % i for i in range(healthy.sent)], "nothing else appended"
    log = cluster.cluster.log_path(leader).read_text()
    for event in ("frame_rejected", "connection_closed_by_broker"):  # (idle closes log at INFO)
        assert f"event={event}" in log, f"no {event} line in {cluster.cluster.log_path(leader)}"


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


def read_values(cluster: BrokerCluster) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.cluster.kafka_bootstrap, "group.id": "bad-input-check",
                         "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while True:
            assert time.monotonic() < deadline, f"read {len(values)} records before the deadline"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return values
                raise AssertionError(msg.error())
            values.append(msg.value())
    finally:
        consumer.close()
