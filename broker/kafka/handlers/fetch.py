"""Fetch (1), v4-16: consumers read ``[log start, HW)`` of the partitions this broker leads.

The replica manager decides (``fetch_for_consumer``): leadership and the
client's leader epoch, KIP-320 truncation detection (``last_fetched_epoch`` -> ``diverging_epoch``,
v12+), OFFSET_OUT_OF_RANGE with the valid range, and the long poll: the request parks in the fetch
purgatory until ``min_bytes`` are there or ``max_wait_ms`` passed, woken when the HW moves. The
records go from the log to the answer as stored: as ``FileSlice``s of the segment files (the
listener sends them with sendfile, page cache to socket) unless ``kafka.sendfile.enable=false``,
which reads them into memory.

Sessionless, always (KIP-227 is optional for a broker): the answer carries session id 0 and every
requested partition. librdkafka never opens sessions; kafka-python asks for one (session id 0, epoch
0) once it infers a broker >= 1.1, and takes session id 0 as "no session" — it then sends full
requests again. A request naming a session (id != 0) gets FETCH_SESSION_ID_NOT_FOUND, which makes a
client start over without one. Until transactions exist the last stable offset is the HW and
``aborted_transactions`` is empty (read_committed reads what read_uncommitted does);
``preferred_read_replica`` is -1 (no rack-aware follower fetching). Topic ids replace names from v13
(an unknown id gets UNKNOWN_TOPIC_ID). A fetch from a follower broker (``replica_id`` >= 0, or the
``replica_state`` of v15+) is replication: ``broker.kafka.handlers.replica_fetch`` answers it.
"""

from __future__ import annotations

import asyncio
import functools

from broker.kafka.handlers.context import BrokerServices, Later, RequestContext
from broker.kafka.handlers.metadata import current_leader, live_brokers
from broker.kafka.handlers.replica_fetch import handle_replica_fetch, replica_of
from broker.replica.replica_requests import FetchRequestPartition, FetchResult
from metadata.image import MetadataImage
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from proto.kafka.fetch_session import NO_SESSION_ID
from proto.kafka.topic_ids import topic_id_of
from proto.kafka_types import NO_LEADER, NO_PREFERRED_REPLICA, TopicPartition

TOPIC_IDS_VERSION = 13
NODE_ENDPOINTS_VERSION = 16
CONSUMER_REPLICA_IDS = frozenset({-1, -2})  # a consumer; -2 also a debugging consumer (v<15)
LEADER_HINT_CODES = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})
DEFAULT_PARTITION_MAX_BYTES = 1 << 20
# An error partition carries empty records, never null (Kafka's MemoryRecords.EMPTY): librdkafka stops
# parsing the whole answer at a null records field.
EMPTY_RECORDS = b""
ZSTD_VERSION = 10  # KIP-110: older consumers get UNSUPPORTED_COMPRESSION_TYPE instead of zstd batches


def handle_fetch(
    services: BrokerServices, context: RequestContext, request: m.FetchRequest
) -> m.FetchResponse | Later:
    if replica_of(context, request)[0] not in CONSUMER_REPLICA_IDS:
        return handle_replica_fetch(services, context, request)
    if request.session_id != NO_SESSION_ID:
        return m.FetchResponse(
            throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=NO_SESSION_ID
        )
    image = services.manager.image
    by_id = context.version >= TOPIC_IDS_VERSION
    names: list[str | None] = []
    items = []
    for t in request.topics:
        name: str | None = t.topic
        if by_id:
            topic = image.topics.get(topic_id_of(t.topic_id))
            name = topic.name if topic is not None else None
        names.append(name)
        if name is None:
            continue
        items += [
            FetchRequestPartition(
                TopicPartition(name, p.partition),
                p.fetch_offset,
                p.partition_max_bytes if p.partition_max_bytes > 0 else DEFAULT_PARTITION_MAX_BYTES,
                p.current_leader_epoch if p.current_leader_epoch >= 0 else None,
                p.last_fetched_epoch if p.last_fetched_epoch >= 0 else None,
            )
            for p in t.partitions
        ]
    future: asyncio.Future[dict[TopicPartition, FetchResult]] = asyncio.get_running_loop().create_future()

    def answer(results: dict[TopicPartition, FetchResult]) -> None:
        if not future.done():
            future.set_result(results)

    # An unknown topic id is answered at once, not after the long poll (see replica_fetch).
    max_wait_ms = 0 if None in names else min(max(request.max_wait_ms, 0), services.request_timeout_ms)
    services.manager.fetch_for_consumer(
        items, request.max_bytes if request.max_bytes > 0 else (1 << 31) - 1, request.min_bytes,
        max_wait_ms, services.clock_ms(), answer, zstd_allowed=context.version >= ZSTD_VERSION,
        file_slices=services.sendfile,
    )  # fmt: skip
    if future.done():
        return _response(services, context, request, names, future.result())
    return Later(future, functools.partial(_response, services, context, request, names))


def _response(
    services: BrokerServices,
    context: RequestContext,
    request: m.FetchRequest,
    names: list[str | None],
    results: dict[TopicPartition, FetchResult],
) -> m.FetchResponse:
    leaders: set[int] = set()
    image = services.manager.image
    topics = []
    for t, name in zip(request.topics, names, strict=True):
        if name is None:
            partitions = [_unknown_topic_id(p.partition) for p in t.partitions]
        else:
            partitions = [
                _partition(image, name, p.partition, results[TopicPartition(name, p.partition)], leaders)
                for p in t.partitions
            ]
        topics.append(m.FetchResponseFetchableTopicResponse(topic=name or "", topic_id=t.topic_id,
                                                            partitions=partitions))  # fmt: skip
    response = m.FetchResponse(throttle_time_ms=0, error_code=0, session_id=NO_SESSION_ID, responses=topics)
    if leaders and context.version >= NODE_ENDPOINTS_VERSION:
        response.node_endpoints = [
            m.FetchResponseNodeEndpoint(node_id=i, host=h, port=p, rack=r or None)
            for i, h, p, r in live_brokers(image, context.listener)
            if i in leaders
        ]
    return response


def _partition(
    image: MetadataImage, name: str, index: int, r: FetchResult, leaders: set[int]
) -> m.FetchResponsePartitionData:
    out = m.FetchResponsePartitionData(
        partition_index=index, error_code=r.code, high_watermark=r.high_watermark,
        last_stable_offset=r.high_watermark, log_start_offset=r.log_start_offset,
        aborted_transactions=[], preferred_read_replica=NO_PREFERRED_REPLICA, records=r.records,
    )  # fmt: skip
    if r.diverging_epoch is not None:
        out.diverging_epoch = m.FetchResponseEpochEndOffset(
            epoch=r.diverging_epoch.leader_epoch, end_offset=r.diverging_epoch.end_offset
        )
    if r.code in LEADER_HINT_CODES:
        leader_id, epoch = current_leader(image, name, index, r.leader_id, r.leader_epoch)
        if leader_id != NO_LEADER:
            out.current_leader = m.FetchResponseLeaderIdAndEpoch(leader_id=leader_id, leader_epoch=epoch)
            leaders.add(leader_id)
    return out


def _unknown_topic_id(index: int) -> m.FetchResponsePartitionData:
    return m.FetchResponsePartitionData(
        partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_ID, high_watermark=-1,
        last_stable_offset=-1, log_start_offset=-1, records=EMPTY_RECORDS,
    )  # fmt: skip


HANDLERS = {ApiKey.FETCH: handle_fetch}
