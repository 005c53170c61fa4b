"""Produce (0), v3-10: append record batches to the partitions this broker leads.

Every rule is the replica manager's (``ReplicaManager.produce``): per
partition, all or nothing — unknown topic, leadership (Kafka's Produce names no leader epoch), acks,
``|ISR| >= min.insync.replicas`` for acks=all (NOT_ENOUGH_REPLICAS, nothing appended), the batch's
header/CRC/size (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE), Kafka's LogValidator rules for clients
(INVALID_RECORD: exactly one batch per partition, as Kafka's ProduceRequest requires from v3, no
control batches, no empty batch, a producer id needs a sequence >= 0), no appends to
internal topics (INVALID_TOPIC_EXCEPTION), zstd only from v7 (UNSUPPORTED_COMPRESSION_TYPE),
idempotent dedup (a retried batch is answered with its original offset; a sequence gap gets
OUT_OF_ORDER_SEQUENCE_NUMBER). The records go to the log as the frame carried them.

acks=0 gets no answer (Kafka closes the connection instead when a partition failed, the only way to
tell such a producer). acks=all is answered when the HW passes every appended batch, or
REQUEST_TIMED_OUT after ``timeout_ms``. KIP-951 (v10): NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH
carry the current leader and epoch, and ``node_endpoints`` the leaders' advertised endpoints.
Transactions are not served yet: a transactional produce is refused per partition with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and a message saying so.
"""

from __future__ import annotations

import asyncio
import functools

from broker.kafka.handlers.context import BrokerServices, Later, RequestContext
from broker.kafka.handlers.metadata import current_leader, live_brokers
from broker.kafka.listener import NO_RESPONSE, Close
from broker.replica.partition import ACKS_ALL
from broker.replica.replica_manager import ProduceRequestPartition, ProduceResult
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from proto.kafka_types import NO_LEADER, TopicPartition
from proto.runtime import latency_trace

NEW_LEADER_HINT_CODES = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})
LEADER_HINTS_VERSION = 10
ZSTD_VERSION = 7  # KIP-110: zstd batches from Produce v7 (UNSUPPORTED_COMPRESSION_TYPE before)
NO_TRANSACTIONS = "transactions are not supported by pykraft yet; produce without a transactional.id"


def handle_produce(
    services: BrokerServices, context: RequestContext, request: m.ProduceRequest
) -> m.ProduceResponse | Later | Close | object:
    if request.transactional_id is not None:
        results = {
            TopicPartition(t.name, p.index): ProduceResult(
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, NO_TRANSACTIONS
            )
            for t in request.topic_data
            for p in t.partition_data
        }
        return _response(services, context, request, results)
    items = [
        ProduceRequestPartition(TopicPartition(t.name, p.index), _request_records(p.records), None)
        for t in request.topic_data
        for p in t.partition_data
    ]
    timeout_ms = request.timeout_ms if request.timeout_ms > 0 else services.request_timeout_ms
    loop = asyncio.get_running_loop()
    future: asyncio.Future[dict[TopicPartition, ProduceResult]] = loop.create_future()

    def answer(results: dict[TopicPartition, ProduceResult]) -> None:
        if not future.done():
            future.set_result(results)

    services.manager.produce(
        request.acks, timeout_ms, items, services.clock_ms(), answer,
        zstd_allowed=context.version >= ZSTD_VERSION,
    )  # fmt: skip
    if latency_trace.ENABLED:
        latency_trace.event("produce_appended", f"acks={request.acks} answered={future.done()}")
    if request.acks == 0:
        results = future.result()  # acks=0 answers at once
        failed = [f"{tp[0]}-{tp[1]}: {r.code.name}" for tp, r in results.items() if r.code != 0]
        return Close("acks=0 produce failed: " + "; ".join(failed)) if failed else NO_RESPONSE
    if future.done():
        return _response(services, context, request, future.result())
    if request.acks != ACKS_ALL:
        raise AssertionError(f"acks={request.acks} produce was not answered at once")
    return Later(future, functools.partial(_response, services, context, request))


def _request_records(records: m.Records | None) -> bytes | bytearray | memoryview:
    """A partition's records as decoded from the request: a view of its frame (never a file region,
    which only an answer holds); null is no records."""
    if records is None:
        return b""
    assert isinstance(records, (bytes, bytearray, memoryview))
    return records


def _response(
    services: BrokerServices,
    context: RequestContext,
    request: m.ProduceRequest,
    results: dict[TopicPartition, ProduceResult],
) -> m.ProduceResponse:
    hints = context.version >= LEADER_HINTS_VERSION
    image = services.manager.image
    leaders: set[int] = set()
    topics = []
    for t in request.topic_data:
        partitions = []
        for p in t.partition_data:
            r = results[TopicPartition(t.name, p.index)]
            out = m.ProduceResponsePartitionProduceResponse(
                index=p.index, error_code=r.code, base_offset=r.base_offset,
                log_append_time_ms=r.log_append_time_ms, log_start_offset=r.log_start_offset,
                error_message=r.message or None,
            )  # fmt: skip
            if hints and r.code in NEW_LEADER_HINT_CODES:
                leader_id, epoch = current_leader(image, t.name, p.index, r.leader_id, r.leader_epoch)
                if leader_id != NO_LEADER:
                    out.current_leader = m.ProduceResponseLeaderIdAndEpoch(
                        leader_id=leader_id, leader_epoch=epoch
                    )
                    leaders.add(leader_id)
            partitions.append(out)
        topics.append(m.ProduceResponseTopicProduceResponse(name=t.name, partition_responses=partitions))
    response = m.ProduceResponse(responses=topics, throttle_time_ms=0)
    if leaders:
        response.node_endpoints = [
            m.ProduceResponseNodeEndpoint(node_id=i, host=h, port=p, rack=r or None)
            for i, h, p, r in live_brokers(image, context.listener)
            if i in leaders
        ]
    return response


HANDLERS = {ApiKey.PRODUCE: handle_produce}
