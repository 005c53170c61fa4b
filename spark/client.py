"""The broker client the Spark source uses: Metadata, ListOffsets and Fetch over the Kafka protocol.

``BrokerClient`` is the interface the Data Source depends on (planning on the driver, reading on
the workers); ``KafkaBrokerClient`` implements it with a small blocking socket client on the brokers'
Kafka listeners (``bootstrap.servers`` = those listeners, as ``pykraft cluster up`` prints them in
``KAFKA_BOOTSTRAP``). Requests and responses are encoded by ``proto.kafka.api`` (the generated
codec) and framed by ``proto.kafka.connection``; nothing is written by hand. One connection per
broker, one request in flight on it, a correlation id per request checked against the answer.

Versions: Metadata v12, ListOffsets v7, Fetch v12 (flexible encodings; topic names, not ids). The
first request on a connection is ApiVersions v3: a broker that lacks one of them is refused with
``UnsupportedVersionError`` naming the API, rather than a decode error later.

Committed records only: Fetch and ListOffsets ask for READ_COMMITTED, so the broker answers up to the
last stable offset, which is the HW while pykraft has no transactions; Fetch answers carry the HW
that the reader checks its range against.

Which replica serves a task's fetches: the partition leader, unless the leader names a *preferred
read replica* (Fetch v11+, KIP-392): then the client fetches from that replica (the leader's answer
carries no records in that case, so the client asks the replica at once, in the same call) until the
replica answers with any error or cannot be reached — then back to the leader, in the same call.
A replica serves only records below its own HW, which may trail the leader's; the reader waits.

Leadership changes: a partition error NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH, LEADER_NOT_AVAILABLE (and the other ``REFRESH_ERRORS``), or an unreachable
broker, makes the client follow the answer's ``current_leader`` (KIP-951) or refresh metadata (from
any broker it knows, bootstrap servers last) and retry, with ``retry_interval_ms`` between attempts;
the caller bounds the whole with a deadline. Other errors raise their ``proto.errors`` exception.

Thread-safety: one client per thread at a time (each Spark task makes its own).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from proto import errors
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from proto.kafka.connection import ClientConnection, KafkaProtocolError, ProtocolError
from proto.kafka_types import CONSUMER_REPLICA_ID, NO_LEADER, NO_OFFSET, NO_PREFERRED_REPLICA, TopicPartition
from spark.options import EARLIEST_OFFSET, LATEST_OFFSET

READ_COMMITTED = 1
DEFAULT_REQUEST_TIMEOUT_MS = 10_000
FETCH_MAX_BYTES = 16 * 1024 * 1024
FETCH_MAX_WAIT_MS = 200  # long poll when the leader's HW has not reached our range yet
CLIENT_ID = "pykraft-spark"
MAX_FRAME_BYTES = 256 * 1024 * 1024  # a bigger size prefix means a broken stream, not an answer
READ_BYTES = 1024 * 1024  # at most this much per read of the socket

METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 7
FETCH_VERSION = 12
API_VERSIONS_VERSION = 3
VERSIONS_USED = {
    ApiKey.METADATA: METADATA_VERSION,
    ApiKey.LIST_OFFSETS: LIST_OFFSETS_VERSION,
    ApiKey.FETCH: FETCH_VERSION,
}

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
    """One partition's fetch answer. ``error_code`` is NONE or OFFSET_OUT_OF_RANGE (others raise),
    or a retriable code after which the caller fetches again. ``records`` may be a ``memoryview`` of
    the response frame (no copy between the socket and the decoder)."""

    records: bytes | memoryview
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
        """Committed batches of ``tp`` from the batch holding ``fetch_offset``."""

    def close(self) -> None: ...


class BrokerConnectionError(Exception):
    """A connection failed (refused, reset, timed out, or the answer did not decode)."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class BrokerConnection:
    """One blocking TCP connection to a broker's Kafka listener: a request, then its answer. The
    framing and the check of the answer's correlation id are ``proto.kafka.connection``'s; decoded
    ``records`` are views of the answer's frame."""

    def __init__(self, address: str, timeout_s: float) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self._core = ClientConnection(CLIENT_ID, max_frame_bytes=MAX_FRAME_BYTES)
        try:
            self._sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        except OSError as exc:
            timed_out = isinstance(exc, TimeoutError)
            raise BrokerConnectionError(f"connect to {address}: {exc}", timed_out=timed_out) from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._check_versions(timeout_s)

    def _check_versions(self, timeout_s: float) -> None:
        request = m.ApiVersionsRequest(client_software_name=CLIENT_ID, client_software_version="1")
        answer = self.send(ApiKey.API_VERSIONS, API_VERSIONS_VERSION, request, timeout_s)
        if answer.error_code != errors.ErrorCode.NONE:
            self.close()
            raise errors.error_for(answer.error_code, f"ApiVersions to {self.address}")
        ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        for api_key, version in VERSIONS_USED.items():
            low, high = ranges.get(api_key, (0, -1))
            if not low <= version <= high:
                self.close()
                raise errors.exception_class(errors.ErrorCode.UNSUPPORTED_VERSION)(
                    f"broker {self.address} serves {api_key.name} versions {low}-{high}; the Spark source "
                    f"needs version {version} (is bootstrap.servers a Kafka listener of pykraft >= 0.2?)"
                )

    def send(self, api_key: int, version: int, request: Any, timeout_s: float) -> Any:
        try:
            self._sock.settimeout(timeout_s)
            self._sock.sendall(self._core.send_request(request, version))
            while True:
                data = self._sock.recv(READ_BYTES)
                if not data:
                    raise BrokerConnectionError(f"{self.address} closed the connection")
                for event in self._core.receive_data(data):
                    if isinstance(event, ProtocolError):
                        raise BrokerConnectionError(f"{self.address}: {event.error}")
                    return event.body  # one request in flight: the event is its answer
        except TimeoutError:
            self.close()
            message = f"{self.address}: no answer within {timeout_s:.1f} s"
            raise BrokerConnectionError(message, timed_out=True) from None
        except BrokerConnectionError:
            self.close()
            raise
        except (OSError, KafkaProtocolError) as exc:
            self.close()
            raise BrokerConnectionError(f"{self.address}: {exc}") from None

    def close(self) -> None:
        self._sock.close()


class KafkaBrokerClient:
    """``BrokerClient`` over the Kafka protocol. See the module docstring for the rules."""

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
        self._connections: dict[str, BrokerConnection] = {}
        self._brokers: dict[int, str] = {}
        self._leaders: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (leader_id, leader_epoch)
        self._preferred: dict[TopicPartition, int] = {}  # tp -> preferred read replica (KIP-392)

    # --- connections ----------------------------------------------------------------------------

    def _send(self, address: str, api_key: int, version: int, request: Any, timeout_s: float) -> Any:
        """One request on the connection to ``address`` (opened on first use, dropped on failure)."""
        connection = self._connections.get(address)
        if connection is None:
            connection = BrokerConnection(address, self._timeout_s)
            self._connections[address] = connection
        try:
            return connection.send(api_key, version, request, timeout_s)
        except BrokerConnectionError:
            self._connections.pop(address, None)
            raise

    # --- metadata -------------------------------------------------------------------------------

    def partition_counts(self, topics: Sequence[str] | None) -> dict[str, int]:
        response = self._metadata(topics)
        return {t.name: len(t.partitions) for t in response.topics if t.error_code == errors.ErrorCode.NONE}

    def _metadata(self, topics: Sequence[str] | None) -> m.MetadataResponse:
        """Ask known brokers, then the bootstrap servers, until one answers; remember leaders."""
        request = m.MetadataRequest(
            topics=None if topics is None else [m.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,  # reading a missing topic must not create it
        )
        last_error: Exception | None = None
        for address in self._addresses_to_ask():
            try:
                response = self._send(address, ApiKey.METADATA, METADATA_VERSION, request, self._timeout_s)
            except BrokerConnectionError as exc:
                last_error = exc
                continue
            self._learn(response)
            return response
        tried = ", ".join(self._addresses_to_ask())
        raise errors.exception_class(errors.ErrorCode.NETWORK_EXCEPTION)(
            f"no broker answered Metadata (tried {tried}): {last_error}"
        )

    def _addresses_to_ask(self) -> list[str]:
        return list(dict.fromkeys([*self._brokers.values(), *self._bootstrap]))

    def _learn(self, response: m.MetadataResponse) -> None:
        self._brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers} or self._brokers
        for topic in response.topics:
            for p in topic.partitions:
                self._leaders[TopicPartition(topic.name, p.partition_index)] = (p.leader_id, p.leader_epoch)

    def _leader_address(self, tp: TopicPartition) -> str | None:
        leader_id, _ = self._leaders.get(tp, (NO_LEADER, 0))
        return self._brokers.get(leader_id)

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
                response = self._send(
                    address, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION,
                    self._list_offsets_request(tps, pending), self._timeout_s,
                )  # fmt: skip
            except BrokerConnectionError as exc:
                if last_attempt:
                    raise errors.exception_class(errors.ErrorCode.NETWORK_EXCEPTION)(
                        f"ListOffsets to {address}: {exc}"
                    ) from None
                retry.extend(tps)
                continue
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    if p.error_code in REFRESH_ERRORS and not last_attempt:
                        retry.append(tp)
                    elif p.error_code != errors.ErrorCode.NONE:
                        raise errors.error_for(p.error_code, f"ListOffsets {tp}: {_name(p.error_code)}")
                    else:
                        answers[tp] = None if p.offset == NO_OFFSET and pending[tp] >= 0 else p.offset
        if last_attempt and retry:
            raise errors.exception_class(errors.ErrorCode.LEADER_NOT_AVAILABLE)(
                f"no leader answered ListOffsets for {', '.join(map(str, retry))}"
            )
        return retry

    def _list_offsets_request(
        self, tps: Sequence[TopicPartition], queries: Mapping[TopicPartition, int]
    ) -> m.ListOffsetsRequest:
        """EARLIEST_OFFSET (-2) and LATEST_OFFSET (-1) are Kafka's own ListOffsets timestamps."""
        by_topic: dict[str, list[m.ListOffsetsRequestListOffsetsPartition]] = {}
        for tp in tps:
            query = queries[tp]
            assert query >= 0 or query in (EARLIEST_OFFSET, LATEST_OFFSET), f"bad ListOffsets query {query}"
            by_topic.setdefault(tp.topic, []).append(
                m.ListOffsetsRequestListOffsetsPartition(
                    partition_index=tp.partition,
                    current_leader_epoch=self._leaders.get(tp, (NO_LEADER, -1))[1],
                    timestamp=query,
                )
            )
        return m.ListOffsetsRequest(
            replica_id=CONSUMER_REPLICA_ID,
            isolation_level=READ_COMMITTED,
            topics=[
                m.ListOffsetsRequestListOffsetsTopic(name=name, partitions=parts)
                for name, parts in by_topic.items()
            ],
        )

    # --- Fetch ----------------------------------------------------------------------------------

    def fetch(
        self, tp: TopicPartition, fetch_offset: int, max_wait_ms: int = FETCH_MAX_WAIT_MS
    ) -> FetchResult:
        """One fetch (leader or preferred read replica); on a leadership error or an unreachable
        leader, refresh once and return the retriable code."""
        if tp not in self._leaders:
            self._metadata([tp.topic])
        replica = self._preferred.get(tp)
        if replica is not None:
            result = self._fetch_from_replica(tp, replica, fetch_offset, max_wait_ms)
            if result is not None:
                return result
        address = self._leader_address(tp)
        if address is None:
            self._refresh([tp.topic])
            return FetchResult(b"", 0, 0, errors.ErrorCode.LEADER_NOT_AVAILABLE)
        try:
            data = self._fetch_once(address, tp, fetch_offset, max_wait_ms)
        except BrokerConnectionError as exc:
            self._refresh([tp.topic])
            code = errors.ErrorCode.REQUEST_TIMED_OUT if exc.timed_out else errors.ErrorCode.NETWORK_EXCEPTION
            return FetchResult(b"", 0, 0, code)
        if data.error_code in REFRESH_ERRORS:
            self._follow_leader_hint(tp, data.current_leader)
            return FetchResult(b"", data.high_watermark, data.log_start_offset, data.error_code)
        if (
            data.error_code == errors.ErrorCode.NONE
            and data.preferred_read_replica != NO_PREFERRED_REPLICA
            and data.preferred_read_replica != self._leaders[tp][0]
            and data.preferred_read_replica in self._brokers
        ):
            self._preferred[tp] = data.preferred_read_replica
            result = self._fetch_from_replica(tp, data.preferred_read_replica, fetch_offset, max_wait_ms)
            if result is not None:
                return result
            self._refresh([tp.topic])  # the named replica failed: the leader again, after a pause
            code = errors.ErrorCode.REPLICA_NOT_AVAILABLE
            return FetchResult(b"", data.high_watermark, data.log_start_offset, code)
        return _result(tp, fetch_offset, data)

    def _fetch_from_replica(
        self, tp: TopicPartition, replica: int, fetch_offset: int, max_wait_ms: int
    ) -> FetchResult | None:
        """The preferred replica's answer, or None (and the preference dropped) on any error."""
        address = self._brokers.get(replica)
        data = None
        if address is not None:
            try:
                data = self._fetch_once(address, tp, fetch_offset, max_wait_ms)
            except BrokerConnectionError:
                data = None
        if data is None or data.error_code != errors.ErrorCode.NONE:
            self._preferred.pop(tp, None)
            return None
        return _result(tp, fetch_offset, data)

    def _fetch_once(
        self, address: str, tp: TopicPartition, fetch_offset: int, max_wait_ms: int
    ) -> m.FetchResponsePartitionData:
        request = m.FetchRequest(
            replica_id=CONSUMER_REPLICA_ID,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            isolation_level=READ_COMMITTED,
            topics=[
                m.FetchRequestFetchTopic(
                    topic=tp.topic,
                    partitions=[
                        m.FetchRequestFetchPartition(
                            partition=tp.partition,
                            current_leader_epoch=self._leaders.get(tp, (NO_LEADER, -1))[1],
                            fetch_offset=fetch_offset,
                            partition_max_bytes=FETCH_MAX_BYTES,
                        )
                    ],
                )
            ],
        )
        timeout_s = self._timeout_s + max_wait_ms / 1000
        response = self._send(address, ApiKey.FETCH, FETCH_VERSION, request, timeout_s)
        if response.error_code != errors.ErrorCode.NONE:
            raise errors.error_for(response.error_code, f"Fetch {tp} at {fetch_offset} from {address}")
        for topic in response.responses:
            for p in topic.partitions:
                if topic.topic == tp.topic and p.partition_index == tp.partition:
                    return p
        raise BrokerConnectionError(f"{address} answered a Fetch of {tp} without that partition")

    def _follow_leader_hint(self, tp: TopicPartition, hint: m.FetchResponseLeaderIdAndEpoch) -> None:
        """KIP-951: use the new leader named in the answer, else refresh metadata."""
        if hint.leader_id != NO_LEADER and hint.leader_id in self._brokers:
            self._leaders[tp] = (hint.leader_id, hint.leader_epoch)
        else:
            self._refresh([tp.topic])

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


def _result(tp: TopicPartition, fetch_offset: int, data: m.FetchResponsePartitionData) -> FetchResult:
    if data.error_code not in (errors.ErrorCode.NONE, errors.ErrorCode.OFFSET_OUT_OF_RANGE):
        raise errors.error_for(data.error_code, f"Fetch {tp} at {fetch_offset}: {_name(data.error_code)}")
    records = data.records if data.records is not None else b""
    return FetchResult(records, data.high_watermark, data.log_start_offset, data.error_code)


def _name(code: int) -> str:
    try:
        return errors.ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _group_by(tps: Iterable[TopicPartition], key: Callable[[TopicPartition], str | None]) -> dict:
    groups: dict[str | None, list[TopicPartition]] = {}
    for tp in tps:
        groups.setdefault(key(tp), []).append(tp)
    return groups
