"""A test double of the data brokers: BrokerService (Metadata, ListOffsets, Fetch) over real gRPC.

It lets the Spark source be driven end to end — real SparkSession, real worker processes, real
``GrpcBrokerClient`` — before the replicated brokers exist, and lets tests set up situations that
are hard to time on a real cluster: a HW behind the log end offset, a leader move mid-read, a log
start offset that moves (retention). It follows broker.proto's contract:

- only the partition leader answers ListOffsets/Fetch; others say NOT_LEADER_OR_FOLLOWER and name
  the leader (KIP-951 ``current_leader``);
- LATEST is the high watermark; TIMESTAMP is the first offset below the HW whose timestamp >= t,
  or offset -1 when none;
- Fetch returns whole batches, starting with the one holding ``fetch_offset``, all below the HW;
  OFFSET_OUT_OF_RANGE outside ``[log_start_offset, high_watermark]``.

All state lives in one ``FakeCluster`` in the test process, guarded by a lock (the gRPC servers
answer on their own threads). Every server binds 127.0.0.1 on a port the OS picks; ``stop()`` ends
them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from proto import broker_pb2, broker_pb2_grpc, common_pb2
from proto.errors import ErrorCode
from proto.serving import GRPC_OPTIONS
from spark.options import TopicPartition
from storage.batch_header import parse_header, patch_offset_and_epoch
from storage.record_batch import build_batch, iter_records

NO_OFFSET = -1


@dataclass
class FakeLog:
    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base_offset, bytes)
    log_start_offset: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0
    leader: int = 0
    leader_epoch: int = 0


class FakeCluster:
    """In-memory partition logs served by ``n_brokers`` gRPC BrokerService servers on 127.0.0.1."""

    def __init__(self, n_brokers: int = 3) -> None:
        self.lock = threading.RLock()
        self.logs: dict[TopicPartition, FakeLog] = {}
        self.fetch_count = 0
        # Called (under the lock) with the fetch count before each fetch is answered: lets a test
        # move a leader or the log start offset in the middle of a Spark job.
        self.fetch_hook: Callable[[int], None] | None = None
        self.servers: dict[int, grpc.Server] = {}
        self.ports: dict[int, int] = {}
        for node_id in range(1, n_brokers + 1):
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=GRPC_OPTIONS)
            broker_pb2_grpc.add_BrokerServiceServicer_to_server(_Servicer(self, node_id), server)
            self.ports[node_id] = server.add_insecure_port("127.0.0.1:0")
            server.start()
            self.servers[node_id] = server

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop(grace=None)

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

    def metadata(self, request: broker_pb2.MetadataRequest) -> broker_pb2.MetadataResponse:
        with self.lock:
            names = sorted({tp.topic for tp in self.logs}) if request.all_topics else list(request.topics)
            topics = []
            for name in names:
                parts = sorted((tp.partition, log) for tp, log in self.logs.items() if tp.topic == name)
                if not parts:
                    topics.append(
                        broker_pb2.TopicMetadata(
                            name=name, error=_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                        )
                    )
                    continue
                topics.append(
                    broker_pb2.TopicMetadata(
                        name=name,
                        partitions=[
                            broker_pb2.PartitionMetadata(
                                partition=p, leader_id=log.leader, leader_epoch=log.leader_epoch,
                                replicas=list(self.servers), isr=list(self.servers),
                            )
                            for p, log in parts
                        ],
                    )
                )  # fmt: skip
            brokers = [
                broker_pb2.BrokerEndpoint(node_id=n, host="127.0.0.1", port=port)
                for n, port in self.ports.items()
            ]
            return broker_pb2.MetadataResponse(brokers=brokers, topics=topics, cluster_id="fake")

    def list_offset(self, node_id: int, tp: TopicPartition, part: broker_pb2.ListOffsetsPartition):
        with self.lock:
            log = self.logs.get(tp)
            if log is None:
                return broker_pb2.ListOffsetsPartitionResponse(
                    partition=tp.partition, error=_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                )
            if log.leader != node_id:
                return broker_pb2.ListOffsetsPartitionResponse(
                    partition=tp.partition, error=_error(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                )
            if part.spec == broker_pb2.EARLIEST:
                offset = log.log_start_offset
            elif part.spec == broker_pb2.LATEST:
                offset = log.high_watermark
            else:
                offset = self._offset_of_time(log, part.timestamp_ms)
            return broker_pb2.ListOffsetsPartitionResponse(partition=tp.partition, offset=offset)

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
        self, node_id: int, tp: TopicPartition, part: broker_pb2.FetchPartition
    ) -> broker_pb2.PartitionData:
        with self.lock:
            self.fetch_count += 1
            if self.fetch_hook is not None:
                self.fetch_hook(self.fetch_count)
            log = self.logs.get(tp)
            if log is None:
                return broker_pb2.PartitionData(
                    partition=tp.partition, error=_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                )
            common = {
                "partition": tp.partition,
                "high_watermark": log.high_watermark,
                "log_start_offset": log.log_start_offset,
                "last_stable_offset": log.high_watermark,
                "current_leader": broker_pb2.LeaderIdAndEpoch(
                    leader_id=log.leader, leader_epoch=log.leader_epoch
                ),
            }
            if log.leader != node_id:
                return broker_pb2.PartitionData(error=_error(ErrorCode.NOT_LEADER_OR_FOLLOWER), **common)
            if not log.log_start_offset <= part.fetch_offset <= log.high_watermark:
                return broker_pb2.PartitionData(error=_error(ErrorCode.OFFSET_OUT_OF_RANGE), **common)
            chosen, size = [], 0
            for _, data in log.batches:
                header = parse_header(data)
                if header.next_offset <= part.fetch_offset or header.next_offset > log.high_watermark:
                    continue
                if chosen and size + len(data) > part.partition_max_bytes:
                    break
                chosen.append(data)
                size += len(data)
            return broker_pb2.PartitionData(records=b"".join(chosen), **common)


def _error(code: int, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=code, message=message or ErrorCode(code).name)


class _Servicer(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self, cluster: FakeCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id

    def Metadata(self, request, context):
        return self.cluster.metadata(request)

    def ListOffsets(self, request, context):
        return broker_pb2.ListOffsetsResponse(
            topics=[
                broker_pb2.ListOffsetsTopicResponse(
                    name=topic.name,
                    partitions=[
                        self.cluster.list_offset(self.node_id, TopicPartition(topic.name, p.partition), p)
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ]
        )

    def Fetch(self, request, context):
        return broker_pb2.FetchResponse(
            topics=[
                broker_pb2.FetchableTopicResponse(
                    name=topic.name,
                    partitions=[
                        self.cluster.fetch(self.node_id, TopicPartition(topic.name, p.partition), p)
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ]
        )
