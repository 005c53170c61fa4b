"""The broker client the Spark source uses: Metadata, ListOffsets and Fetch over gRPC (BrokerService).

``BrokerClient`` is the interface the Data Source depends on (planning on the driver, reading on
the workers); ``GrpcBrokerClient`` implements it against ``proto/broker.proto``.

Which replica serves a task's fetches: **the partition leader**. A follower's HW trails the leader's
by up to one fetch round, so a follower would often have to wait until its HW covers the range;
a follower may also be out of the ISR without knowing it yet, and BrokerService answers consumers
from the leader only (FetchRequest has no replica id; NOT_LEADER_OR_FOLLOWER otherwise). Reading
from the leader is still correct across a failover: the new leader comes from the ISR, so it holds
every record below the HW seen at planning — though its own HW may briefly lag, which the reader
handles by waiting (``spark.reader``).

Leadership changes: a partition error NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH or LEADER_NOT_AVAILABLE, or an unreachable broker, makes the client refresh
metadata (from any broker it knows, bootstrap servers last) and retry, with ``retry_interval_ms``
between attempts; the caller bounds the whole with a deadline. Other errors raise their
``proto.errors`` exception.

Thread-safety: one client per thread (each Spark task makes its own; gRPC channels are cheap).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc

from proto import broker_pb2, broker_pb2_grpc, errors
from proto.serving import GRPC_OPTIONS
from spark.options import EARLIEST_OFFSET, LATEST_OFFSET, TopicPartition

NO_LEADER = -1
NO_OFFSET = -1  # ListOffsets' answer when no record has a timestamp >= the one asked
DEFAULT_REQUEST_TIMEOUT_MS = 10_000
FETCH_MAX_BYTES = 16 * 1024 * 1024
FETCH_MAX_WAIT_MS = 200  # long poll when the leader's HW has not reached our range yet

# Errors after which the client re-learns leaders and tries again (OFFSET_NOT_AVAILABLE: a new
# leader's HW has not caught up with its epoch's start yet).
REFRESH_ERRORS = frozenset(
    {
        errors.ErrorCode.OFFSET_NOT_AVAILABLE,
        errors.ErrorCode.NOT_LEADER_OR_FOLLOWER,
        errors.ErrorCode.FENCED_LEADER_EPOCH,
        errors.ErrorCode.UNKNOWN_LEADER_EPOCH,
        errors.ErrorCode.LEADER_NOT_AVAILABLE,
        errors.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        errors.ErrorCode.REPLICA_NOT_AVAILABLE,
        errors.ErrorCode.REQUEST_TIMED_OUT,
    }
)


@dataclass(frozen=True)
class FetchResult:
    """One partition's fetch answer. ``error_code`` is NONE or OFFSET_OUT_OF_RANGE (others raise)."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    error_code: int = errors.ErrorCode.NONE


class BrokerClient(Protocol):
    def partition_counts(self, topics: Sequence[str] | None) -> dict[str, int]:
        """Partition count of each existing topic among ``topics`` (None: every topic)."""

    def list_offsets(self, queries: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """Per partition: EARLIEST_OFFSET -> log start offset, LATEST_OFFSET -> high watermark, a
        timestamp (ms, >= 0) -> the first offset whose timestamp is >= it, or None if there is none."""

    def fetch(self, tp: TopicPartition, fetch_offset: int, max_wait_ms: int) -> FetchResult:
        """Committed batches of ``tp`` from the batch holding ``fetch_offset``, from the leader."""

    def close(self) -> None: ...


class GrpcBrokerClient:
    """``BrokerClient`` over gRPC BrokerService. See the module docstring for retry rules."""

    def __init__(
        self,
        bootstrap_servers: Sequence[str],
        *,
        num_retries: int = 3,
        retry_interval_ms: int = 1_000,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not bootstrap_servers:
            raise ValueError("bootstrap_servers is empty")
        self._bootstrap = list(bootstrap_servers)
        self._num_retries = num_retries
        self._retry_interval_s = retry_interval_ms / 1000
        self._timeout_s = request_timeout_ms / 1000
        self._sleep = sleep
        self._channels: dict[str, grpc.Channel] = {}
        self._brokers: dict[int, str] = {}
        self._leaders: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (leader_id, leader_epoch)

    # --- metadata -------------------------------------------------------------------------------

    def partition_counts(self, topics: Sequence[str] | None) -> dict[str, int]:
        response = self._metadata(topics)
        return {t.name: len(t.partitions) for t in response.topics if t.error.code == errors.ErrorCode.NONE}

    def _metadata(self, topics: Sequence[str] | None) -> broker_pb2.MetadataResponse:
        """Ask known brokers, then the bootstrap servers, until one answers; remember leaders."""
        request = broker_pb2.MetadataRequest(topics=list(topics or ()), all_topics=topics is None)
        last_error: grpc.RpcError | None = None
        for address in self._addresses_to_ask():
            try:
                response = self._stub(address).Metadata(request, timeout=self._timeout_s)
            except grpc.RpcError as exc:
                last_error = exc
                continue
            self._learn(response)
            return response
        tried = ", ".join(self._addresses_to_ask())
        raise errors.exception_class(errors.ErrorCode.NETWORK_EXCEPTION)(
            f"no broker answered Metadata (tried {tried}): {_describe(last_error)}"
        )

    def _addresses_to_ask(self) -> list[str]:
        return list(dict.fromkeys([*self._brokers.values(), *self._bootstrap]))

    def _learn(self, response: broker_pb2.MetadataResponse) -> None:
        self._brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers} or self._brokers
        for topic in response.topics:
            for p in topic.partitions:
                self._leaders[TopicPartition(topic.name, p.partition)] = (p.leader_id, p.leader_epoch)

    def _leader_address(self, tp: TopicPartition) -> str | None:
        leader_id, _ = self._leaders.get(tp, (NO_LEADER, 0))
        return self._brokers.get(leader_id)

    def _stub(self, address: str) -> broker_pb2_grpc.BrokerServiceStub:
        if address not in self._channels:
            self._channels[address] = grpc.insecure_channel(address, options=GRPC_OPTIONS)
        return broker_pb2_grpc.BrokerServiceStub(self._channels[address])

    def _refresh(self, topics: Iterable[str]) -> None:
        self._sleep(self._retry_interval_s)
        self._metadata(sorted(set(topics)))

    # --- ListOffsets ----------------------------------------------------------------------------

    def list_offsets(self, queries: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        pending = dict(queries)
        answers: dict[TopicPartition, int | None] = {}
        if any(tp not in self._leaders for tp in pending):
            self._metadata(sorted({tp.topic for tp in pending}))
        for attempt in range(self._num_retries + 1):
            retry = self._list_offsets_once(pending, answers, last_attempt=attempt == self._num_retries)
            if not retry:
                return answers
            pending = {tp: pending[tp] for tp in retry}
            self._refresh(tp.topic for tp in pending)
        raise AssertionError("unreachable: the last attempt raises")

    def _list_offsets_once(
        self, pending: Mapping[TopicPartition, int], answers: dict, *, last_attempt: bool
    ) -> list[TopicPartition]:
        """One round of ListOffsets to each leader; returns the partitions to retry."""
        retry: list[TopicPartition] = []
        for address, tps in _group_by(pending, self._leader_address).items():
            if address is None:
                retry.extend(tps)
                continue
            try:
                response = self._stub(address).ListOffsets(
                    _list_offsets_request(tps, pending), timeout=self._timeout_s
                )
            except grpc.RpcError as exc:
                if last_attempt:
                    raise _network_error("ListOffsets", address, exc) from None
                retry.extend(tps)
                continue
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition)
                    if p.error.code in REFRESH_ERRORS and not last_attempt:
                        retry.append(tp)
                    elif p.error.code != errors.ErrorCode.NONE:
                        raise errors.error_for(p.error.code, f"ListOffsets {tp}: {p.error.message}")
                    else:
                        answers[tp] = None if p.offset == NO_OFFSET and pending[tp] >= 0 else p.offset
        if last_attempt and retry:
            raise errors.exception_class(errors.ErrorCode.LEADER_NOT_AVAILABLE)(
                f"no leader answered ListOffsets for {', '.join(map(str, retry))}"
            )
        return retry

    # --- Fetch ----------------------------------------------------------------------------------

    def fetch(
        self, tp: TopicPartition, fetch_offset: int, max_wait_ms: int = FETCH_MAX_WAIT_MS
    ) -> FetchResult:
        """One fetch from the leader; on a leadership error or an unreachable leader, refresh once."""
        if tp not in self._leaders:
            self._metadata([tp.topic])
        address = self._leader_address(tp)
        if address is None:
            self._refresh([tp.topic])
            return FetchResult(b"", 0, 0, errors.ErrorCode.LEADER_NOT_AVAILABLE)
        request = broker_pb2.FetchRequest(
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            isolation_level=broker_pb2.READ_COMMITTED,
            topics=[
                broker_pb2.FetchTopic(
                    name=tp.topic,
                    partitions=[
                        broker_pb2.FetchPartition(
                            partition=tp.partition,
                            fetch_offset=fetch_offset,
                            partition_max_bytes=FETCH_MAX_BYTES,
                        )
                    ],
                )
            ],
        )
        try:
            response = self._stub(address).Fetch(request, timeout=self._timeout_s + max_wait_ms / 1000)
        except grpc.RpcError as exc:
            self._refresh([tp.topic])
            return FetchResult(b"", 0, 0, _retriable_network_code(exc))
        data = response.topics[0].partitions[0]
        if data.error.code in REFRESH_ERRORS:
            self._follow_leader_hint(tp, data.current_leader)
            return FetchResult(b"", data.high_watermark, data.log_start_offset, data.error.code)
        if data.error.code not in (errors.ErrorCode.NONE, errors.ErrorCode.OFFSET_OUT_OF_RANGE):
            raise errors.error_for(data.error.code, f"Fetch {tp} at {fetch_offset}: {data.error.message}")
        return FetchResult(data.records, data.high_watermark, data.log_start_offset, data.error.code)

    def _follow_leader_hint(self, tp: TopicPartition, hint: broker_pb2.LeaderIdAndEpoch) -> None:
        """KIP-951: use the new leader named in the answer, else refresh metadata."""
        if hint.leader_id != NO_LEADER and hint.leader_id in self._brokers:
            self._leaders[tp] = (hint.leader_id, hint.leader_epoch)
        else:
            self._refresh([tp.topic])

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()


def _list_offsets_request(
    tps: Sequence[TopicPartition], queries: Mapping[TopicPartition, int]
) -> broker_pb2.ListOffsetsRequest:
    by_topic: dict[str, list[broker_pb2.ListOffsetsPartition]] = {}
    for tp in tps:
        query = queries[tp]
        if query == EARLIEST_OFFSET:
            part = broker_pb2.ListOffsetsPartition(partition=tp.partition, spec=broker_pb2.EARLIEST)
        elif query == LATEST_OFFSET:
            part = broker_pb2.ListOffsetsPartition(partition=tp.partition, spec=broker_pb2.LATEST)
        else:
            part = broker_pb2.ListOffsetsPartition(
                partition=tp.partition, spec=broker_pb2.TIMESTAMP, timestamp_ms=query
            )
        by_topic.setdefault(tp.topic, []).append(part)
    return broker_pb2.ListOffsetsRequest(
        isolation_level=broker_pb2.READ_COMMITTED,
        topics=[broker_pb2.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
    )


def _group_by(tps: Iterable[TopicPartition], key: Callable[[TopicPartition], str | None]) -> dict:
    groups: dict[str | None, list[TopicPartition]] = {}
    for tp in tps:
        groups.setdefault(key(tp), []).append(tp)
    return groups


def _describe(exc: grpc.RpcError | None) -> str:
    if exc is None:
        return "no address"
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"{code.name if code else 'error'}: {details}"


def _network_error(rpc: str, address: str, exc: grpc.RpcError) -> errors.KafkaError:
    return errors.exception_class(errors.ErrorCode.NETWORK_EXCEPTION)(f"{rpc} to {address}: {_describe(exc)}")


def _retriable_network_code(exc: grpc.RpcError) -> int:
    code = exc.code() if hasattr(exc, "code") else None
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return errors.ErrorCode.REQUEST_TIMED_OUT
    return errors.ErrorCode.NETWORK_EXCEPTION
