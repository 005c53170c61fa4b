"""An in-process fake of BrokerService on 127.0.0.1: several brokers sharing one in-memory cluster.

Faithful to ``proto/broker.proto`` where the client's behaviour depends on it: only the leader
answers Produce/Fetch/ListOffsets (else NOT_LEADER_OR_FOLLOWER with a KIP-951 leader hint); a stale
``current_leader_epoch`` gets FENCED_LEADER_EPOCH and a newer one UNKNOWN_LEADER_EPOCH; batches are
validated (CRC, header) and get their base offset and leader epoch patched, never re-encoded;
Fetch returns whole batches from the one holding ``fetch_offset``, answers a ``last_fetched_epoch``
that the leader's log ended before ``fetch_offset`` with ``diverging_epoch`` (KIP-320), long-polls
up to ``max_wait_ms``, and answers OFFSET_OUT_OF_RANGE outside ``[log_start_offset, HW]``.

Every broker also serves a fake GroupService (``cluster.group``, tests/unit/pykraft/fake_group.py).
The fake has no replication: HW = log end offset. Tests steer it: ``move_leader`` (epoch bump),
``truncate`` (a new leader whose log diverged), ``inject`` (errors for the next produce calls).
``FakeCluster(idempotent=True)`` answers InitProducerId (ids from 1000, epoch ``init_producer_epoch``)
and checks idempotent batches with the broker's own rules (``broker.producer_state``); without it
InitProducerId is UNIMPLEMENTED and a producer with idempotence by default turns it off.
"""

from __future__ import annotations

import itertools
import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from broker.producer_state import Duplicate, ProducerBatch, ProducerStateManager, Reject
from proto import broker_pb2, broker_pb2_grpc, common_pb2, group_pb2_grpc
from proto.errors import ErrorCode
from storage.batch_header import iter_batches, patch_offset_and_epoch
from tests.unit.pykraft.fake_group import FakeGroupCoordinator

NO_LEADER = -1


@dataclass
class FakeBatch:
    base_offset: int
    last_offset: int
    leader_epoch: int
    data: bytes


@dataclass
class FakePartition:
    leader_id: int
    leader_epoch: int
    replicas: list[int]
    batches: list[FakeBatch] = field(default_factory=list)
    injected: list[int] = field(default_factory=list)  # error codes for the next produces
    producer_state: ProducerStateManager = field(default_factory=ProducerStateManager)

    @property
    def log_end_offset(self) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else 0

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch`` in the log, its end offset), Kafka's OffsetsForLeaderEpoch."""
        found = -1
        for batch in self.batches:
            if batch.leader_epoch > epoch:
                return found, batch.base_offset
            found = batch.leader_epoch
        return found, self.log_end_offset


class FakeCluster:
    def __init__(self, broker_ids: tuple[int, ...] = (101, 102, 103), idempotent: bool = False) -> None:
        self.lock = threading.Condition()
        self.idempotent = idempotent
        self.producer_ids = itertools.count(1000)
        self.init_producer_epoch = 0
        self.topics: dict[str, list[FakePartition]] = {}
        self.servers: dict[int, grpc.Server] = {}
        self.ports: dict[int, int] = {}
        self.produce_requests: list[tuple[int, broker_pb2.ProduceRequest]] = []
        # GroupService (tests/unit/pykraft/fake_group.py); the first broker coordinates every group.
        self.addresses: dict[int, tuple[str, int]] = {}
        self.group = FakeGroupCoordinator(broker_ids[0], self.addresses)
        for node_id in broker_ids:
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
            broker_pb2_grpc.add_BrokerServiceServicer_to_server(FakeBroker(self, node_id), server)
            group_pb2_grpc.add_GroupServiceServicer_to_server(self.group.servicer(node_id), server)
            self.ports[node_id] = server.add_insecure_port("127.0.0.1:0")
            self.addresses[node_id] = ("127.0.0.1", self.ports[node_id])
            self.servers[node_id] = server
            server.start()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    def stop(self) -> None:
        self.group.stop()
        for server in self.servers.values():
            server.stop(grace=None)

    def create_topic(self, name: str, partitions: int) -> None:
        ids = sorted(self.ports)
        with self.lock:
            self.topics[name] = [
                FakePartition(ids[p % len(ids)], 0, [ids[(p + i) % len(ids)] for i in range(len(ids))])
                for p in range(partitions)
            ]

    def partition(self, topic: str, partition: int) -> FakePartition:
        return self.topics[topic][partition]

    def move_leader(self, topic: str, partition: int, new_leader: int) -> None:
        with self.lock:
            p = self.partition(topic, partition)
            p.leader_id, p.leader_epoch = new_leader, p.leader_epoch + 1
            self.lock.notify_all()

    def truncate(self, topic: str, partition: int, offset: int, new_leader: int) -> None:
        """A new leader whose log ends at ``offset`` (the tail was never committed): epoch bump."""
        with self.lock:
            p = self.partition(topic, partition)
            p.batches = [b for b in p.batches if b.last_offset < offset]
            p.producer_state.truncate_from(offset)
            assert p.log_end_offset == offset, "truncate on a batch boundary"
            p.leader_id, p.leader_epoch = new_leader, p.leader_epoch + 1
            self.lock.notify_all()

    def inject(self, topic: str, partition: int, codes: list[int]) -> None:
        with self.lock:
            self.partition(topic, partition).injected.extend(codes)

    def records_bytes(self, topic: str, partition: int) -> bytes:
        with self.lock:
            return b"".join(b.data for b in self.partition(topic, partition).batches)


def _error(code: int, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=code, message=message)


class FakeBroker(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self, cluster: FakeCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id

    def Metadata(self, request, context):
        c = self.cluster
        with c.lock:
            names = list(request.topics) or (list(c.topics) if request.all_topics else [])
            topics = []
            for name in names:
                if name not in c.topics:
                    topics.append(
                        broker_pb2.TopicMetadata(
                            name=name, error=_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                        )
                    )
                    continue
                parts = [
                    broker_pb2.PartitionMetadata(
                        partition=i, leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                        replicas=p.replicas, isr=p.replicas,
                    )
                    for i, p in enumerate(c.topics[name])
                ]  # fmt: skip
                topics.append(broker_pb2.TopicMetadata(name=name, partitions=parts))
            brokers = [
                broker_pb2.BrokerEndpoint(node_id=n, host="127.0.0.1", port=port)
                for n, port in c.ports.items()
            ]
        return broker_pb2.MetadataResponse(brokers=brokers, cluster_id="fake", topics=topics)

    def _check_leader(
        self, topic: str, partition: int, epoch: int | None
    ) -> tuple[int, FakePartition | None]:
        parts = self.cluster.topics.get(topic)
        if parts is None or not 0 <= partition < len(parts):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        p = parts[partition]
        if p.leader_id != self.node_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, p
        if epoch is not None and epoch < p.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, p
        if epoch is not None and epoch > p.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH, p
        return ErrorCode.NONE, p

    def Produce(self, request, context):
        c = self.cluster
        out = []
        with c.lock:
            c.produce_requests.append((self.node_id, request))
            for topic in request.topics:
                parts = []
                for data in topic.partitions:
                    epoch = data.current_leader_epoch if data.HasField("current_leader_epoch") else None
                    parts.append(self._produce_partition(topic.name, data, epoch))
                out.append(broker_pb2.TopicProduceResponse(name=topic.name, partitions=parts))
            c.lock.notify_all()
        return broker_pb2.ProduceResponse(topics=out)

    def _produce_partition(self, topic: str, data, epoch: int | None):
        code, p = self._check_leader(topic, data.partition, epoch)
        if code == ErrorCode.NONE and p.injected:
            code = p.injected.pop(0)
        if code != ErrorCode.NONE:
            hint = broker_pb2.LeaderIdAndEpoch(
                leader_id=p.leader_id if p else NO_LEADER, leader_epoch=p.leader_epoch if p else -1
            )
            return broker_pb2.PartitionProduceResponse(
                partition=data.partition, error=_error(code, "fake"), base_offset=-1, current_leader=hint
            )
        batches = [
            ProducerBatch(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta)
            for _, h in iter_batches(data.records)
        ]
        verdict = p.producer_state.check_all(batches)
        if isinstance(verdict, Duplicate):
            return broker_pb2.PartitionProduceResponse(
                partition=data.partition, base_offset=verdict.first_offset, log_append_time_ms=-1
            )
        if isinstance(verdict, Reject):
            return broker_pb2.PartitionProduceResponse(
                partition=data.partition, error=_error(verdict.code, verdict.message), base_offset=-1
            )
        buf = bytearray(data.records)
        base = p.log_end_offset
        next_offset = base
        for (pos, header), batch in zip(list(iter_batches(bytes(buf))), batches, strict=True):
            patch_offset_and_epoch(buf, pos, next_offset, p.leader_epoch)
            end = pos + header.size_in_bytes
            last = next_offset + header.last_offset_delta
            p.batches.append(FakeBatch(next_offset, last, p.leader_epoch, bytes(buf[pos:end])))
            p.producer_state.update(batch, next_offset, last, 0)
            next_offset = last + 1
        return broker_pb2.PartitionProduceResponse(
            partition=data.partition, base_offset=base, log_append_time_ms=-1
        )

    def InitProducerId(self, request, context):
        if not self.cluster.idempotent:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "this fake cluster is not idempotent")
        with self.cluster.lock:
            producer_id = next(self.cluster.producer_ids)
        return broker_pb2.InitProducerIdResponse(
            producer_id=producer_id, producer_epoch=self.cluster.init_producer_epoch
        )

    def Fetch(self, request, context):
        c = self.cluster
        deadline_s = request.max_wait_ms / 1000
        with c.lock:
            answer = self._fetch_once(request)
            if not _has_data(answer) and deadline_s > 0:
                c.lock.wait(deadline_s)
                answer = self._fetch_once(request)
        return answer

    def _fetch_once(self, request):
        topics = []
        for topic in request.topics:
            parts = []
            for fp in topic.partitions:
                epoch = fp.current_leader_epoch if fp.HasField("current_leader_epoch") else None
                parts.append(self._fetch_partition(topic.name, fp, epoch))
            topics.append(broker_pb2.FetchableTopicResponse(name=topic.name, partitions=parts))
        return broker_pb2.FetchResponse(topics=topics)

    def _fetch_partition(self, topic: str, fp, epoch: int | None):
        code, p = self._check_leader(topic, fp.partition, epoch)
        if code != ErrorCode.NONE:
            hint = broker_pb2.LeaderIdAndEpoch(
                leader_id=p.leader_id if p else NO_LEADER, leader_epoch=p.leader_epoch if p else -1
            )
            return broker_pb2.PartitionData(
                partition=fp.partition, error=_error(code, "fake"), current_leader=hint
            )
        leo = p.log_end_offset
        answer = broker_pb2.PartitionData(
            partition=fp.partition, high_watermark=leo, last_stable_offset=leo, log_start_offset=0
        )
        if fp.HasField("last_fetched_epoch"):
            found, end = p.epoch_end_offset(fp.last_fetched_epoch)
            if found != fp.last_fetched_epoch or end < fp.fetch_offset:
                answer.diverging_epoch.CopyFrom(broker_pb2.EpochEndOffset(epoch=found, end_offset=end))
                return answer
        if not 0 <= fp.fetch_offset <= leo:
            answer.error.CopyFrom(_error(ErrorCode.OFFSET_OUT_OF_RANGE, f"valid: [0, {leo}]"))
            return answer
        answer.records = b"".join(b.data for b in p.batches if b.last_offset >= fp.fetch_offset)
        return answer

    def ListOffsets(self, request, context):
        c = self.cluster
        topics = []
        with c.lock:
            for topic in request.topics:
                parts = []
                for lp in topic.partitions:
                    epoch = lp.current_leader_epoch if lp.HasField("current_leader_epoch") else None
                    code, p = self._check_leader(topic.name, lp.partition, epoch)
                    if code != ErrorCode.NONE:
                        parts.append(
                            broker_pb2.ListOffsetsPartitionResponse(
                                partition=lp.partition, error=_error(code)
                            )
                        )
                        continue
                    offset = 0 if lp.spec == broker_pb2.EARLIEST else p.log_end_offset
                    parts.append(
                        broker_pb2.ListOffsetsPartitionResponse(
                            partition=lp.partition,
                            offset=offset,
                            timestamp_ms=-1,
                            leader_epoch=p.leader_epoch,
                        )
                    )
                topics.append(broker_pb2.ListOffsetsTopicResponse(name=topic.name, partitions=parts))
        return broker_pb2.ListOffsetsResponse(topics=topics)


def _has_data(answer: broker_pb2.FetchResponse) -> bool:
    return any(
        p.records or p.error.code or p.HasField("diverging_epoch")
        for t in answer.topics
        for p in t.partitions
    )
