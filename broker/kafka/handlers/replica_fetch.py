"""Fetch (1) from a follower broker (``replica_id`` >= 0): replication over the Kafka protocol.

``fetch.handle_fetch`` hands a request whose replica id (v4-14 ``replica_id``; v15+ the KIP-903
``replica_state``: replica id and broker epoch) names a broker here. Every decision is
``ReplicaManager.fetch_for_follower``'s (the gRPC ReplicaService that served it before is gone):
fencing (a broker that is not a replica of the partition gets NOT_LEADER_OR_FOLLOWER, a broker epoch
older than the registered one STALE_BROKER_EPOCH, a stale leader epoch FENCED_LEADER_EPOCH), the
diverging epoch from ``last_fetched_epoch`` (v12+), recording the follower's log end offset — which
moves the HW and completes parked acks=all produces in the same call — and parking the request in the
follower-fetch purgatory until a partition has data or ``max_wait_ms`` passed (an append on the leader
wakes it). Every answered partition carries the leader's HW and log start offset.

The partitions come through the replica's fetch session (KIP-227, ``proto.kafka.fetch_session``): a full
request lists them all; an incremental one only those whose fetch state changed, and the answer leaves
out partitions with nothing new. Below v15 the request has no broker epoch (-1: not checked, as in
Kafka). Topic ids (v13+) name the topic incarnation: an id this broker does not know gets
UNKNOWN_TOPIC_ID; one of a deleted incarnation INCONSISTENT_TOPIC_ID (KIP-516).
"""

from __future__ import annotations

import asyncio
import functools

from broker.kafka.handlers.context import BrokerServices, Later, RequestContext
from broker.replica.replica_requests import FetchRequestPartition, FetchResult
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.fetch_session import PartitionFetchRequest, SentPartitionState, SessionContext
from proto.kafka.topic_ids import topic_id_of, uuid_of
from proto.kafka_types import NO_BROKER_EPOCH, NO_OFFSET, TopicPartition
from proto.runtime import latency_trace

TOPIC_IDS_VERSION = 13
REPLICA_STATE_VERSION = 15
DEFAULT_PARTITION_MAX_BYTES = 1 << 20
MAX_BYTES_DEFAULT = (1 << 31) - 1


def replica_of(context: RequestContext, request: m.FetchRequest) -> tuple[int, int]:
    """(replica id, broker epoch) of a Fetch: -1 for a consumer; broker epoch -1 below v15."""
    if context.version >= REPLICA_STATE_VERSION:
        return request.replica_state.replica_id, request.replica_state.replica_epoch
    return request.replica_id, NO_BROKER_EPOCH


def handle_replica_fetch(
    services: BrokerServices, context: RequestContext, request: m.FetchRequest
) -> m.FetchResponse | Later:
    replica_id, broker_epoch = replica_of(context, request)
    by_id = context.version >= TOPIC_IDS_VERSION
    session, unknown = resolve_session(services, by_id, replica_id, request)
    if session.error != ErrorCode.NONE:
        return m.FetchResponse(throttle_time_ms=0, error_code=session.error, session_id=0)
    items = session_items(session)
    future: asyncio.Future[dict[TopicPartition, FetchResult]] = asyncio.get_running_loop().create_future()

    def answer(results: dict[TopicPartition, FetchResult]) -> None:
        if not future.done():
            future.set_result(results)

    # A topic id this leader does not know (yet) is answered at once, never parked: else a follower
    # that learned of a new topic before this leader did waits max_wait_ms for an error it retries
    # after replica.fetch.backoff.ms (Kafka answers a fetch with no partition it can read at once).
    max_wait_ms = 0 if unknown else min(max(request.max_wait_ms, 0), services.request_timeout_ms)
    max_bytes = request.max_bytes if request.max_bytes > 0 else MAX_BYTES_DEFAULT
    services.manager.fetch_for_follower(
        replica_id, broker_epoch, items, max_bytes, request.min_bytes, max_wait_ms, services.clock_ms(),
        answer, services.clock_ms,
    )  # fmt: skip
    if latency_trace.ENABLED:
        latency_trace.event("follower_fetch_handled", f"{replica_id} answered={future.done()}")
    if future.done():
        return fetch_response(services, by_id, session, future.result(), unknown)
    return Later(future, functools.partial(fetch_response, services, by_id, session, unknown=unknown))


def resolve_session(
    services: BrokerServices, by_id: bool, replica_id: int, request: m.FetchRequest
) -> tuple[SessionContext, list[tuple[m.FetchRequestFetchTopic, list[int]]]]:
    """The request's partitions through the replica's fetch session, and the listed topics whose id
    this broker does not know (answered UNKNOWN_TOPIC_ID, outside the session).

    A forgotten partition leaves the session by the topic id the follower names (v13+) whether or not
    this broker's metadata still knows that id (Kafka's ``FetchSession``): the topic may have been
    deleted, and a forget ignored would keep it in the session, answered with an error at once on
    every fetch, in a tight loop between the two brokers."""
    unknown: list[tuple[m.FetchRequestFetchTopic, list[int]]] = []
    updated: dict[TopicPartition, PartitionFetchRequest] = {}
    for t in request.topics:
        name, topic_id = _resolve(services, by_id, t.topic, t.topic_id)
        if name is None:
            unknown.append((t, [p.partition for p in t.partitions]))
            continue
        for p in t.partitions:
            max_bytes = p.partition_max_bytes if p.partition_max_bytes > 0 else DEFAULT_PARTITION_MAX_BYTES
            updated[TopicPartition(name, p.partition)] = PartitionFetchRequest(
                p.fetch_offset, p.current_leader_epoch, p.last_fetched_epoch, max_bytes, topic_id
            )
    forgotten: list[TopicPartition] = []
    forgotten_ids: list[tuple[str, int]] = []
    for f in request.forgotten_topics_data:
        if by_id:
            forgotten_ids += [(topic_id_of(f.topic_id), index) for index in f.partitions]
        else:
            forgotten += [TopicPartition(f.topic, index) for index in f.partitions]
    session = services.fetch_sessions.new_context(
        replica_id, request.session_id, request.session_epoch, updated, forgotten, forgotten_ids
    )
    return session, unknown


def session_items(session: SessionContext) -> list[FetchRequestPartition]:
    """The partitions to read for a request resolved through its session."""
    return [
        FetchRequestPartition(
            tp,
            s.fetch_offset,
            s.partition_max_bytes,
            s.current_leader_epoch if s.current_leader_epoch >= 0 else None,
            s.last_fetched_epoch if s.last_fetched_epoch >= 0 else None,
            s.topic_id,
        )
        for tp, s in session.partitions.items()
    ]


def _resolve(services: BrokerServices, by_id: bool, topic: str, topic_uuid) -> tuple[str | None, str]:
    """(topic name or None if the id is unknown, topic id string or "" when not given)."""
    image = services.manager.image
    if not by_id:
        return topic, ""
    topic_id = topic_id_of(topic_uuid)
    registration = image.topics.get(topic_id)
    return (registration.name if registration is not None else None), topic_id


def fetch_response(
    services: BrokerServices,
    by_id: bool,
    session: SessionContext,
    results: dict[TopicPartition, FetchResult],
    unknown: list[tuple[m.FetchRequestFetchTopic, list[int]]],
) -> m.FetchResponse:
    topics: dict[str, m.FetchResponseFetchableTopicResponse] = {}
    cache = services.fetch_sessions
    for tp, r in results.items():
        has_news = bool(r.records) or r.code != ErrorCode.NONE or r.diverging_epoch is not None
        state = SentPartitionState(r.high_watermark, r.log_start_offset)
        include = cache.must_answer(session.session_id, tp, state, has_news)
        if not include and session.incremental:
            continue
        topic = topics.get(tp[0])
        if topic is None:
            topic_id = services.manager.image.topic_ids.get(tp[0], "") if by_id else ""
            topic = topics[tp[0]] = m.FetchResponseFetchableTopicResponse(
                topic=tp[0], topic_id=uuid_of(topic_id), partitions=[]
            )
        topic.partitions.append(_partition(tp[1], r))
    responses = list(topics.values())
    for t, indexes in unknown:
        responses.append(
            m.FetchResponseFetchableTopicResponse(
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=[_error_partition(i, ErrorCode.UNKNOWN_TOPIC_ID) for i in indexes],
            )
        )
    return m.FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=session.session_id, responses=responses
    )


def _partition(index: int, r: FetchResult) -> m.FetchResponsePartitionData:
    out = m.FetchResponsePartitionData(
        partition_index=index, error_code=r.code, high_watermark=r.high_watermark,
        last_stable_offset=r.high_watermark, log_start_offset=r.log_start_offset,
        aborted_transactions=[], records=r.records,
    )  # fmt: skip
    if r.diverging_epoch is not None:
        out.diverging_epoch = m.FetchResponseEpochEndOffset(
            epoch=r.diverging_epoch.leader_epoch, end_offset=r.diverging_epoch.end_offset
        )
    if r.leader_id >= 0:
        out.current_leader = m.FetchResponseLeaderIdAndEpoch(
            leader_id=r.leader_id, leader_epoch=r.leader_epoch
        )
    return out


def _error_partition(index: int, code: ErrorCode) -> m.FetchResponsePartitionData:
    return m.FetchResponsePartitionData(
        partition_index=index, error_code=code, high_watermark=NO_OFFSET, last_stable_offset=NO_OFFSET,
        log_start_offset=NO_OFFSET, records=b"",
    )  # fmt: skip
