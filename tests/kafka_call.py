"""Blocking Kafka requests for tests and test tools: the one small client they share.

``kafka_call(address, request, version)`` sends one request (header and body by the generated codec,
``proto.kafka.api``; framed by ``proto.kafka.connection``) on a fresh connection to a broker's Kafka
listener and returns the decoded response body. ``KafkaSocket`` keeps one connection for several
requests, answered in request order as Kafka guarantees per connection: ``send`` writes a request
without waiting (one that gets no answer, Produce with acks=0, or one of a pipeline) and ``receive``
reads the next answer. Every socket operation is bounded by ``timeout_s``; a connection the broker
closes raises ``ConnectionError``. Where a Kafka *client* is the point of a test, use confluent-kafka
instead: this is for tests of the broker itself (exact error codes, leader epochs, raw batches).

On top, one partition's data-plane requests as a broker's tests need them: ``produce`` (raw batches,
as they are), ``fetch`` (a consumer's), ``read_all``, ``list_offset`` and ``metadata``; and the
consumer protocol's bytes that JoinGroup and SyncGroup carry (``consumer_subscription``,
``consumer_assignment``, ``assigned_partitions``, ``kafka_string``).
"""

from __future__ import annotations

import socket
import struct
from collections import deque
from dataclasses import dataclass
from typing import Any

from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.connection import ClientConnection, ProtocolError, ResponseReceived
from proto.kafka_types import CONSUMER_REPLICA_ID, NO_EPOCH, NO_OFFSET
from storage.record_batch import decode_records

TIMEOUT_S = 10.0
CLIENT_ID = "pykraft-tests"
READ_BYTES = 1024 * 1024
# Request versions: Produce v10 and Fetch v12 carry the current leader (KIP-951) and Fetch v12 the
# diverging epoch (KIP-320), with topics by name (Fetch v13+ names them by id).
PRODUCE_VERSION = 10
FETCH_VERSION = 12
LIST_OFFSETS_VERSION = 7
METADATA_VERSION = 12
LATEST = -1  # ListOffsets timestamps: the high watermark
EARLIEST = -2  # the log start offset


class KafkaSocket:
    """One blocking connection to ``address`` (``host:port``); a context manager. Not thread-safe.
    ``nodelay`` sets TCP_NODELAY, for timing single round trips (benchmarks). Framing and the order of
    answers are ``proto.kafka.connection.ClientConnection``'s: an answer out of step, or one that does
    not decode, raises its ``KafkaProtocolError``."""

    def __init__(
        self, address: str, timeout_s: float = TIMEOUT_S, client_id: str = CLIENT_ID, nodelay: bool = False
    ) -> None:
        host, port = address.rsplit(":", 1)
        self.address = address
        self.client_id = client_id
        self._sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        if nodelay:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._core = ClientConnection(client_id)
        self._answers: deque[ResponseReceived] = deque()

    def __enter__(self) -> KafkaSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def send(self, request: Any, version: int) -> int:
        """Write ``request`` at ``version`` without reading an answer; its correlation id."""
        self._sock.sendall(self._core.send_request(request, version))
        return self._core.last_correlation_id

    def call(self, request: Any, version: int, timeout_s: float = TIMEOUT_S) -> Any:
        """Send ``request`` and return its decoded answer (waiting at most ``timeout_s`` per read)."""
        return self.receive(request, version, self.send(request, version), timeout_s)

    def receive(self, request: Any, version: int, correlation_id: int, timeout_s: float = TIMEOUT_S) -> Any:
        """The next answer on the connection, which must be the one to ``request`` (sent earlier)."""
        self._sock.settimeout(timeout_s)
        while not self._answers:
            data = self._sock.recv(READ_BYTES)
            if not data:
                raise ConnectionError(f"{self.address} closed the connection")
            for event in self._core.receive_data(data):
                if isinstance(event, ProtocolError):
                    raise event.error
                self._answers.append(event)
        answer = self._answers.popleft()
        assert (answer.correlation_id, answer.api_key, answer.api_version) == (
            correlation_id, request.API_KEY, version,
        ), f"{self.address}: answer {answer.correlation_id} where {correlation_id} was next"  # fmt: skip
        return answer.body


def kafka_call(
    address: str, request: Any, version: int, timeout_s: float = TIMEOUT_S, client_id: str = CLIENT_ID
) -> Any:
    """One request on a fresh connection to ``address``; the decoded response body."""
    with KafkaSocket(address, timeout_s, client_id) as conn:
        return conn.call(request, version, timeout_s)


# ---- one partition's data plane -------------------------------------------------------------------


@dataclass(frozen=True)
class Produced:
    code: ErrorCode
    base_offset: int
    message: str
    leader_id: int = -1  # KIP-951: the current leader, on NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH
    leader_epoch: int = -1


def produce(
    address: str, topic: str, partition: int, records: bytes, acks: int = -1, timeout_ms: int = 5000
) -> Produced:
    """Produce v10 of ``records`` as they are (no client re-batches them). acks=0 gets no answer: an
    ApiVersions on the same connection after it shows that the broker handled it (a connection's
    requests are handled in order); a failed acks=0 produce makes the broker close the connection
    (Kafka's only way to tell such a producer), reported as NETWORK_EXCEPTION."""
    data = m.ProduceRequestPartitionProduceData(partition, records)
    request = m.ProduceRequest(
        acks=acks, timeout_ms=timeout_ms, topic_data=[m.ProduceRequestTopicProduceData(topic, [data])]
    )
    timeout_s = timeout_ms / 1000 + TIMEOUT_S
    with KafkaSocket(address, timeout_s) as conn:
        if acks == 0:
            conn.send(request, PRODUCE_VERSION)
            try:
                conn.call(m.ApiVersionsRequest(), 0, timeout_s)
            except ConnectionError as exc:
                return Produced(ErrorCode.NETWORK_EXCEPTION, NO_OFFSET, str(exc))
            return Produced(ErrorCode.NONE, NO_OFFSET, "")
        r = conn.call(request, PRODUCE_VERSION, timeout_s).responses[0].partition_responses[0]
    leader = r.current_leader
    return Produced(ErrorCode(r.error_code), r.base_offset, r.error_message or "", leader.leader_id,
                    leader.leader_epoch)  # fmt: skip


def fetch(
    address: str,
    topic: str,
    partition: int,
    offset: int,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 1 << 20,
    current_leader_epoch: int = NO_EPOCH,
    last_fetched_epoch: int = NO_EPOCH,
) -> m.FetchResponsePartitionData:
    """A consumer's Fetch v12 of one partition (its records as ``bytes``)."""
    part = m.FetchRequestFetchPartition(
        partition=partition, current_leader_epoch=current_leader_epoch, fetch_offset=offset,
        last_fetched_epoch=last_fetched_epoch, partition_max_bytes=max_bytes,
    )  # fmt: skip
    request = m.FetchRequest(
        replica_id=CONSUMER_REPLICA_ID, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
        topics=[m.FetchRequestFetchTopic(topic=topic, partitions=[part])],
    )  # fmt: skip
    response = kafka_call(address, request, FETCH_VERSION, max_wait_ms / 1000 + TIMEOUT_S)
    assert response.error_code == 0, f"fetch: {ErrorCode(response.error_code).name}"
    data = response.responses[0].partitions[0]
    data.records = bytes(data.records or b"")
    return data


def read_all(address: str, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """Every committed record [log start, HW) as (offset, value), from the leader at ``address``."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        data = fetch(address, topic, partition, offset)
        assert data.error_code == 0, f"fetch at {offset}: {ErrorCode(data.error_code).name}"
        records = [(r.offset, r.value) for r in decode_records(data.records) if r.offset >= offset]
        out.extend(records)
        if not records:
            assert offset >= data.high_watermark, f"no records at {offset} below HW {data.high_watermark}"
            return out
        offset = records[-1][0] + 1


def list_offset(
    address: str, topic: str, partition: int, timestamp: int, current_leader_epoch: int = NO_EPOCH
) -> m.ListOffsetsResponseListOffsetsPartitionResponse:
    """ListOffsets v7: ``timestamp`` is a time in ms, or LATEST / EARLIEST."""
    part = m.ListOffsetsRequestListOffsetsPartition(partition, current_leader_epoch, timestamp)
    request = m.ListOffsetsRequest(
        replica_id=CONSUMER_REPLICA_ID, topics=[m.ListOffsetsRequestListOffsetsTopic(topic, [part])]
    )
    return kafka_call(address, request, LIST_OFFSETS_VERSION).topics[0].partitions[0]


def metadata(address: str, topics: list[str] | None) -> m.MetadataResponse:
    """Metadata v12 (``topics=None``: every topic); it never creates a topic."""
    wanted = None if topics is None else [m.MetadataRequestTopic(name=t) for t in topics]
    request = m.MetadataRequest(topics=wanted, allow_auto_topic_creation=False)
    return kafka_call(address, request, METADATA_VERSION)


# ---- the consumer protocol's bytes (what a JoinGroup and a SyncGroup carry for protocol type "consumer")


def kafka_string(text: str) -> bytes:
    """Kafka's STRING: int16 length, then UTF-8."""
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def consumer_subscription(*topics: str) -> bytes:
    """Kafka's ConsumerProtocolSubscription v0: int16 version, the topics, null user data."""
    body = struct.pack(">hi", 0, len(topics)) + b"".join(kafka_string(t) for t in topics)
    return body + struct.pack(">i", -1)


def consumer_assignment(topic: str, partitions: list[int]) -> bytes:
    """Kafka's ConsumerProtocolAssignment v0: int16 version, [topic, partitions], null user data."""
    body = struct.pack(">hi", 0, 1) + kafka_string(topic)
    body += struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
    return body + struct.pack(">i", -1)


def assigned_partitions(data: bytes) -> list[int]:
    """The partitions of a ConsumerProtocolAssignment (any version), of every topic in it."""
    (topics,) = struct.unpack_from(">i", data, 2)
    pos, out = 6, []
    for _ in range(topics):
        (size,) = struct.unpack_from(">h", data, pos)
        pos += 2 + size
        (count,) = struct.unpack_from(">i", data, pos)
        out += struct.unpack_from(f">{count}i", data, pos + 4)
        pos += 4 + 4 * count
    return out
