"""A test double of the data brokers: their Kafka listeners (ApiVersions, Metadata, ListOffsets, Fetch).

It lets the Spark source be driven end to end — real SparkSession, real worker processes, real
``KafkaBrokerClient`` over real sockets — and lets tests set up situations that are hard to time on
a real cluster: a HW behind the log end offset, a leader move mid-read, a log start offset that
moves (retention), a leader that names a preferred read replica. It follows Kafka's contract:

- only the partition leader answers ListOffsets; others say NOT_LEADER_OR_FOLLOWER, and a Fetch
  answer names the leader (KIP-951 ``current_leader``);
- a Fetch to a follower is served from the follower only when that follower is the partition's
  ``preferred_replica`` (KIP-392), below ``follower_high_watermark`` (a follower's HW trails);
  the leader then answers with no records and ``preferred_read_replica`` set;
- LATEST is the high watermark; TIMESTAMP is the first offset below the HW whose timestamp >= t,
  or offset -1 when none;
- Fetch returns whole batches, starting with the one holding ``fetch_offset``, all below the HW;
  OFFSET_OUT_OF_RANGE outside ``[log_start_offset, high_watermark]``.

Frames are encoded and decoded by ``proto.kafka.api`` (the broker's own codec). All state lives in
one ``FakeCluster`` in the test process, guarded by a lock (each connection is served on its own
thread). Every listener binds 127.0.0.1 on a port the OS picks; ``stop()`` closes them all.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import SUPPORTED_VERSIONS, ApiKey, encode_response_frame, parse_request
from proto.kafka_types import NO_OFFSET, NO_PREFERRED_REPLICA, TopicPartition
from storage.batch_header import parse_header, patch_offset_and_epoch
from storage.record_batch import build_batch, iter_records

_S_SIZE = struct.Struct(">i")


@dataclass
class FakeLog:
    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base_offset, bytes)
    log_start_offset: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0
    leader: int = 0
    leader_epoch: int = 0
    preferred_replica: int = NO_PREFERRED_REPLICA  # KIP-392: the replica the leader sends consumers to
    follower_high_watermark: int = 0  # what that replica serves up to (its HW trails the leader's)


class FakeCluster:
    """In-memory partition logs served by ``n_brokers`` Kafka listeners on 127.0.0.1."""

    def __init__(self, n_brokers: int = 3) -> None:
        self.lock = threading.RLock()
        self.logs: dict[TopicPartition, FakeLog] = {}
        self.fetch_count = 0
        self.fetches_by_node: dict[int, int] = {}
        # Called (under the lock) with the fetch count before each fetch is answered: lets a test
        # move a leader or the log start offset in the middle of a Spark job.
        self.fetch_hook: Callable[[int], None] | None = None
        self.servers: dict[int, _Listener] = {}
        self.ports: dict[int, int] = {}
        for node_id in range(1, n_brokers + 1):
            server = _Listener(self, node_id)
            self.ports[node_id] = server.server_address[1]
            threading.Thread(target=server.serve_forever, name=f"fake-broker-{node_id}", daemon=True).start()
            self.servers[node_id] = server

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    def stop(self) -> None:
        for node_id in list(self.servers):
            self.stop_broker(node_id)

    def stop_broker(self, node_id: int) -> None:
        """The broker's listener and every open connection to it close (a dead broker)."""
        self.servers[node_id].close_all()

    # --- test controls ----------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> None:
        self.add_partitions(name, partitions)

    def add_partitions(self, name: str, total: int) -> None:
        """Create the topic or grow it to ``total`` partitions."""
        with self.lock:
            for p in range(total):
                self.logs.setdefault(TopicPartition(name, p), FakeLog(leader=1 + p % len(self.servers)))

    def append(self, tp: TopicPartition, records, *, commit: bool = True, **build_kwargs) -> int:
        """Append one batch of ``(key, value, headers, timestamp_ms)``; return its base offset."""
        with self.lock:
            log = self.logs[tp]
            base = log.log_end_offset
            data = bytearray(build_batch(records, **build_kwargs))
            patch_offset_and_epoch(data, 0, base, log.leader_epoch)
            log.batches.append((base, bytes(data)))
            log.log_end_offset = parse_header(data).next_offset
            if commit:
                log.high_watermark = log.log_end_offset
            return base

    def set_high_watermark(self, tp: TopicPartition, high_watermark: int) -> None:
        with self.lock:
            log = self.logs[tp]
            assert log.log_start_offset <= high_watermark <= log.log_end_offset, (high_watermark, log)
            log.high_watermark = high_watermark

    def move_leader(self, tp: TopicPartition, node_id: int) -> None:
        with self.lock:
            self.logs[tp].leader = node_id
            self.logs[tp].leader_epoch += 1

    def delete_before(self, tp: TopicPartition, offset: int) -> None:
        """Retention: drop whole batches below ``offset``; the log start offset moves to it."""
        with self.lock:
            log = self.logs[tp]
            log.batches = [(b, d) for b, d in log.batches if parse_header(d).next_offset > offset]
            log.log_start_offset = offset

    # --- answers ----------------------------------------------------------------------------

    def set_preferred_replica(self, tp: TopicPartition, node_id: int, high_watermark: int) -> None:
        """The leader names ``node_id`` as preferred read replica; it serves up to ``high_watermark``."""
        with self.lock:
            self.logs[tp].preferred_replica = node_id
            self.logs[tp].follower_high_watermark = high_watermark

    def metadata(self, request: m.MetadataRequest) -> m.MetadataResponse:
        with self.lock:
            if request.topics is None:
                names = sorted({tp.topic for tp in self.logs})
            else:
                names = [t.name for t in request.topics]
            topics = []
            for name in names:
                parts = sorted((tp.partition, log) for tp, log in self.logs.items() if tp.topic == name)
                if not parts:
                    topics.append(
                        m.MetadataResponseTopic(name=name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    )
                    continue
                topics.append(
                    m.MetadataResponseTopic(
                        name=name,
                        partitions=[
                            m.MetadataResponsePartition(
                                partition_index=p, leader_id=log.leader, leader_epoch=log.leader_epoch,
                                replica_nodes=list(self.servers), isr_nodes=list(self.servers),
                            )
                            for p, log in parts
                        ],
                    )
                )  # fmt: skip
            brokers = [
                m.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=port)
                for n, port in self.ports.items()
            ]
            return m.MetadataResponse(brokers=brokers, topics=topics, cluster_id="fake", controller_id=1)

    def list_offset(
        self, node_id: int, tp: TopicPartition, part: m.ListOffsetsRequestListOffsetsPartition
    ) -> m.ListOffsetsResponseListOffsetsPartitionResponse:
        with self.lock:
            log = self.logs.get(tp)
            answer = m.ListOffsetsResponseListOffsetsPartitionResponse(partition_index=tp.partition)
            if log is None:
                answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif log.leader != node_id:
                answer.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif part.timestamp == -2:
                answer.offset = log.log_start_offset
            elif part.timestamp == -1:
                answer.offset = log.high_watermark
            else:
                answer.offset = self._offset_of_time(log, part.timestamp)
            return answer

    @staticmethod
    def _offset_of_time(log: FakeLog, timestamp_ms: int) -> int:
        for _, data in log.batches:
            for record in iter_records(data):
                if (
                    log.log_start_offset <= record.offset < log.high_watermark
                    and record.timestamp >= timestamp_ms
                ):
                    return record.offset
        return NO_OFFSET

    def fetch(
        self, node_id: int, tp: TopicPartition, part: m.FetchRequestFetchPartition
    ) -> m.FetchResponsePartitionData:
        with self.lock:
            self.fetch_count += 1
            self.fetches_by_node[node_id] = self.fetches_by_node.get(node_id, 0) + 1
            if self.fetch_hook is not None:
                self.fetch_hook(self.fetch_count)
            log = self.logs.get(tp)
            answer = m.FetchResponsePartitionData(partition_index=tp.partition, records=b"")
            if log is None:
                answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                return answer
            answer.high_watermark = answer.last_stable_offset = log.high_watermark
            answer.log_start_offset = log.log_start_offset
            serves_as_follower = log.leader != node_id and log.preferred_replica == node_id
            if log.leader != node_id and not serves_as_follower:
                answer.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                answer.current_leader = m.FetchResponseLeaderIdAndEpoch(log.leader, log.leader_epoch)
                return answer
            if log.leader == node_id and log.preferred_replica != NO_PREFERRED_REPLICA:
                answer.preferred_read_replica = log.preferred_replica  # and no records (Kafka's rule)
                return answer
            high_watermark = log.follower_high_watermark if serves_as_follower else log.high_watermark
            answer.high_watermark = answer.last_stable_offset = high_watermark
            if not log.log_start_offset <= part.fetch_offset <= high_watermark:
                answer.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                return answer
            chosen, size = [], 0
            for _, data in log.batches:
                header = parse_header(data)
                if header.next_offset <= part.fetch_offset or header.next_offset > high_watermark:
                    continue
                if chosen and size + len(data) > part.partition_max_bytes:
                    break
                chosen.append(data)
                size += len(data)
            answer.records = b"".join(chosen)
            return answer

    def answer(self, node_id: int, api_key: int, request):
        if api_key == ApiKey.API_VERSIONS:
            return m.ApiVersionsResponse(
                api_keys=[
                    m.ApiVersionsResponseApiVersion(key, *SUPPORTED_VERSIONS[key])
                    for key in (ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.LIST_OFFSETS, ApiKey.FETCH)
                ]
            )
        if api_key == ApiKey.METADATA:
            return self.metadata(request)
        if api_key == ApiKey.LIST_OFFSETS:
            return m.ListOffsetsResponse(
                topics=[
                    m.ListOffsetsResponseListOffsetsTopicResponse(
                        name=t.name,
                        partitions=[self.list_offset(node_id, TopicPartition(t.name, p.partition_index), p)
                                    for p in t.partitions],
                    )
                    for t in request.topics
                ]
            )  # fmt: skip
        assert api_key == ApiKey.FETCH, f"the fake brokers do not serve api key {api_key}"
        return m.FetchResponse(
            responses=[
                m.FetchResponseFetchableTopicResponse(
                    topic=t.topic,
                    partitions=[
                        self.fetch(node_id, TopicPartition(t.topic, p.partition), p) for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )  # fmt: skip


class _Connection(socketserver.BaseRequestHandler):
    """One client connection: frames in, answers out, in order, until the client or ``stop`` closes it."""

    server: _Listener

    def handle(self) -> None:
        sock: socket.socket = self.request
        self.server.track(sock)
        try:
            while True:
                size_bytes = _read(sock, _S_SIZE.size)
                if size_bytes is None:
                    return
                frame = _read(sock, _S_SIZE.unpack(size_bytes)[0])
                if frame is None:
                    return
                header, request = parse_request(frame)
                response = self.server.cluster.answer(self.server.node_id, header.api_key, request)
                sock.sendall(encode_response_frame(header, response))
        except OSError:
            return
        finally:
            self.server.untrack(sock)


class _Listener(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, cluster: FakeCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Connection)

    def track(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._open.add(sock)

    def untrack(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._open.discard(sock)

    def close_all(self) -> None:
        self.shutdown()
        self.server_close()
        with self._open_lock:
            for sock in self._open:
                sock.shutdown(socket.SHUT_RDWR)


def _read(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
