"""The Kafka request processor and handlers (broker.kafka.handlers) over a real ReplicaManager: frames in,
frames out, as the listener sees them. One broker (101) leads ``t-0``; broker 102 leads ``other-0``.

Rules under test: KIP-511 (an unsupported ApiVersions version is answered in v0 with ApiVersions'
own range), advertise only what is implemented, an unknown API key or an unsupported version of
another API closes the connection, Metadata lists the listener's endpoints and a live controller
id, acks=0 gets no answer, KIP-951 leader hints (Produce v10), sessionless Fetch (KIP-227),
ListOffsets v0 answers in old_style_offsets, OffsetForLeaderEpoch answers real end offsets.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from pathlib import Path

import crc32c
import pytest
from prometheus_client import CollectorRegistry

from broker.kafka.handlers.context import BrokerServices
from broker.kafka.handlers.processor import RequestProcessor, build_handlers
from broker.kafka.listener import NO_RESPONSE, Close
from broker.metrics import KafkaRequestMetrics
from broker.replica.replica_manager import ReplicaManager
from metadata.image import MetadataImage
from metadata.records import (
    ClusterIdRecord,
    ConfigRecord,
    ConfigResourceType,
    Endpoint,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from proto.clock import wall_clock_ms
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import SUPPORTED_VERSIONS, ApiKey, RequestHeader, encode_request, parse_response
from proto.kafka.codec import FrameParts
from proto.kafka.topic_ids import uuid_of
from storage.record_batch import build_batch, decode_records

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
OTHER_ID = "AAAAAAAAAAAAAAAAAAAAAg"
LISTENER = "PLAINTEXT"


class Broker:
    def __init__(self, tmp_path: Path, replicas: tuple[int, ...] = (101,), **topic_configs: str) -> None:
        """Topic "t" has ``replicas``, led by 101 with the ISR {101}."""
        image = MetadataImage()
        records = [
            RegisterBrokerRecord(
                b,
                f"inc-{b}",
                (Endpoint("GRPC", "127.0.0.1", b), Endpoint(LISTENER, "kafka-host", 9000 + b)),
                fenced=False,
            )
            for b in (101, 102)
        ]
        records += [
            ClusterIdRecord(CLUSTER_ID),
            TopicRecord("t", TOPIC_ID),
            PartitionRecord(TOPIC_ID, 0, replicas, (101,), 101, leader_epoch=3),
            TopicRecord("other", OTHER_ID),
            PartitionRecord(OTHER_ID, 0, (102,), (102,), 102, leader_epoch=7),
            *(
                ConfigRecord(ConfigResourceType.TOPIC, "t", k.replace("_", "."), v)
                for k, v in topic_configs.items()
            ),
        ]
        image.apply_batch(records, 1)
        self.manager = ReplicaManager(
            101,
            tmp_path,
            replica_lag_time_max_ms=1000,
            topic_defaults={},
            fetchers=_NoFetchers(),
            send_alter_partition=lambda *_: None,
            on_deadline=lambda _ms: None,
            clock_ms=wall_clock_ms,
        )
        self.manager.apply_image(image, 0)
        self.metrics = KafkaRequestMetrics(CollectorRegistry())
        self.services = BrokerServices(101, self.manager, lambda: 0, 5000)
        self.processor = RequestProcessor(
            self.services, build_handlers(self.services), self.metrics, LISTENER
        )
        self.correlation_id = 0

    def call(self, api_key: int, version: int, request):
        """Run one request through the processor; the decoded answer, or the listener verdict."""
        self.correlation_id += 1
        frame = encode_request(RequestHeader(api_key, version, self.correlation_id, "test"), request)
        return asyncio.run(self._call(frame, api_key, version))

    async def _call(self, frame: bytes, api_key: int, version: int):
        outcome = self.processor.process(frame, "127.0.0.1:1")
        if outcome is NO_RESPONSE or isinstance(outcome, Close):
            return outcome
        if not isinstance(outcome, (bytes, bytearray, FrameParts)):
            outcome = await outcome
        if isinstance(outcome, FrameParts):  # records as file slices: what the listener would send
            frame_parts, outcome = outcome, outcome.to_bytes()
            frame_parts.close()
            assert frame_parts.size == len(outcome)
        size = struct.unpack_from(">i", outcome)[0]
        assert size == len(outcome) - 4
        correlation_id, body = parse_response(api_key, version, bytes(outcome[4:]))
        assert correlation_id == self.correlation_id
        return body

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


class _NoFetchers:
    def add_partition(self, *args) -> None: ...

    def remove_partition(self, tp) -> None: ...


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    return Broker(tmp_path)


def produce(topic: str, values: list[bytes], acks: int = -1, partition: int = 0) -> m.ProduceRequest:
    data = m.ProduceRequestPartitionProduceData(
        index=partition, records=build_batch([(None, v, (), 0) for v in values])
    )
    return m.ProduceRequest(
        acks=acks,
        timeout_ms=1000,
        topic_data=[m.ProduceRequestTopicProduceData(name=topic, partition_data=[data])],
    )


def fetch(offset: int, version: int = 12, session_id: int = 0, session_epoch: int = -1) -> m.FetchRequest:
    part = m.FetchRequestFetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
    topic = m.FetchRequestFetchTopic(topic="t", topic_id=uuid_of(TOPIC_ID), partitions=[part])
    return m.FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[topic],
    )


def test_api_versions_advertises_exactly_the_served_apis(broker: Broker) -> None:
    answer = broker.call(
        ApiKey.API_VERSIONS, 3, m.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    served = {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
    assert answer.error_code == 0
    data = (0, 1, 2, 3, 18, 22, 23)
    group_apis = (8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47)
    admin_apis = (19, 20, 21, 32, 33, 37, 43, 44, 60, 61)
    assert served == {k: SUPPORTED_VERSIONS[k] for k in data + group_apis + admin_apis}
    assert 71 not in served  # KIP-714 telemetry would start in librdkafka >= 2.5


def test_unsupported_api_versions_version_answers_v0_with_its_own_range(broker: Broker) -> None:
    """KIP-511: error 35 in a v0 body that lists ApiVersions' range; the socket stays open."""
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 9, 77, -1) + b"\x00\x00\x00"
    outcome = broker.processor.process(frame, "c")
    assert isinstance(outcome, (bytes, bytearray))
    correlation_id, body = parse_response(ApiKey.API_VERSIONS, 0, bytes(outcome[4:]))
    assert correlation_id == 77
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(a.api_key, a.min_version, a.max_version) for a in body.api_keys] == [(18, 0, 4)]


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        pytest.param(struct.pack(">hhih", 999, 0, 1, -1), "unknown API key 999", id="unknown-key"),
        pytest.param(struct.pack(">hhih", 0, 2, 1, -1), "Produce v2 is not supported", id="produce-v2"),
        pytest.param(struct.pack(">hhih", 3, 1, 1, -1) + b"\x00\x00", "does not decode", id="truncated"),
        pytest.param(struct.pack(">hhihi", 3, 1, 1, -1, 1) + b"\x00\x02\xff\xfe", "UTF-8", id="bad-utf8"),
        pytest.param(struct.pack(">hhihi", 3, 1, 1, -1, 1 << 30), "does not decode", id="huge-count"),
        pytest.param(b"\x00\x03\x00", "does not decode", id="no-header"),
    ],
)
def test_requests_that_cannot_be_answered_close_the_connection(
    broker: Broker, frame: bytes, says: str
) -> None:
    outcome = broker.processor.process(frame, "c")
    assert isinstance(outcome, Close)
    assert says in outcome.reason


def test_metadata_lists_listener_endpoints_and_a_live_controller(broker: Broker) -> None:
    answer = broker.call(ApiKey.METADATA, 12, m.MetadataRequest(topics=None))
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [
        (101, "kafka-host", 9101),
        (102, "kafka-host", 9102),
    ]
    assert answer.controller_id == 101 and answer.cluster_id == CLUSTER_ID
    topics = {t.name: t for t in answer.topics}
    assert topics["t"].topic_id == uuid_of(TOPIC_ID)
    p = topics["t"].partitions[0]
    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes) == (101, 3, [101], [101])


def test_metadata_unknown_topic_is_not_created(broker: Broker) -> None:
    for version in (1, 4, 9, 13):
        wanted = [m.MetadataRequestTopic(name="nope")]
        answer = broker.call(ApiKey.METADATA, version, m.MetadataRequest(topics=wanted))
        assert [(t.name, t.error_code) for t in answer.topics] == [
            ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        ]
    by_id = [m.MetadataRequestTopic(name=None, topic_id=uuid.UUID(int=99))]
    answer = broker.call(ApiKey.METADATA, 12, m.MetadataRequest(topics=by_id))
    assert answer.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


@pytest.mark.parametrize("version", [3, 7, 9, 10])
def test_produce_then_fetch_returns_the_batch_bytes(broker: Broker, version: int) -> None:
    request = produce("t", [b"a", b"b"])
    answer = broker.call(ApiKey.PRODUCE, version, request)
    result = answer.responses[0].partition_responses[0]
    assert (result.error_code, result.base_offset) == (0, 0)
    fetched = broker.call(ApiKey.FETCH, 12, fetch(0))
    part = fetched.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark, part.last_stable_offset) == (0, 2, 2)
    assert part.aborted_transactions == [] and part.preferred_read_replica == -1
    assert [r.value for r in decode_records(bytes(part.records))] == [b"a", b"b"]
    assert bytes(part.records)[16:] == bytes(request.topic_data[0].partition_data[0].records)[16:]


def test_acks0_gets_no_answer_and_a_failed_one_closes(broker: Broker) -> None:
    assert broker.call(ApiKey.PRODUCE, 9, produce("t", [b"x"], acks=0)) is NO_RESPONSE
    outcome = broker.call(ApiKey.PRODUCE, 9, produce("other", [b"x"], acks=0))
    assert isinstance(outcome, Close) and "NOT_LEADER_OR_FOLLOWER" in outcome.reason


def test_produce_to_a_follower_names_the_leader_in_v10(broker: Broker) -> None:
    """KIP-951: NOT_LEADER_OR_FOLLOWER carries the current leader, node_endpoints its address."""
    answer = broker.call(ApiKey.PRODUCE, 10, produce("other", [b"x"]))
    result = answer.responses[0].partition_responses[0]
    assert result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (result.current_leader.leader_id, result.current_leader.leader_epoch) == (102, 7)
    assert [(n.node_id, n.host, n.port) for n in answer.node_endpoints] == [(102, "kafka-host", 9102)]
    assert (
        broker.metric("pykraft_kafka_request_errors_total", api="Produce", error="NOT_LEADER_OR_FOLLOWER")
        == 1
    )


def test_corrupt_batch_is_refused_and_nothing_appended(broker: Broker) -> None:
    request = produce("t", [b"a"])
    data = bytearray(request.topic_data[0].partition_data[0].records)
    data[-1] ^= 0xFF  # breaks the CRC
    request.topic_data[0].partition_data[0].records = bytes(data)
    answer = broker.call(ApiKey.PRODUCE, 9, request)
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
    assert broker.manager.logs[("t", 0)].log_end_offset == 0


def test_two_batches_for_one_partition_are_refused_invalid_record(broker: Broker) -> None:
    """Kafka's ProduceRequest.validateRecords: from v3 a Produce carries exactly one batch per partition
    (a client never sends more); two are INVALID_RECORD and nothing is appended; one is appended."""
    two = produce("t", [b"a"]).topic_data[0].partition_data[0].records * 2
    answer = broker.call(ApiKey.PRODUCE, 9, produce_batch(two, acks=1))
    result = answer.responses[0].partition_responses[0]
    assert result.error_code == ErrorCode.INVALID_RECORD, result
    assert "exactly one record batch" in (result.error_message or "")
    assert broker.manager.logs[("t", 0)].log_end_offset == 0
    one = broker.call(ApiKey.PRODUCE, 9, produce_batch(two[: len(two) // 2], acks=1))
    assert one.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def test_a_batch_marked_zstd_whose_payload_is_not_zstd_is_corrupt_message(broker: Broker) -> None:
    """Issue 14 defect 5: a valid CRC over a payload that does not decompress is refused on produce
    (Kafka's LogValidator decompresses on the leader); nothing is appended, the partition stays readable."""
    request = produce("t", [b"a"])
    batch = bytearray(request.topic_data[0].partition_data[0].records)
    struct.pack_into(">h", batch, 21, struct.unpack_from(">h", batch, 21)[0] | 4)  # attributes: zstd
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))  # a valid CRC over it
    request.topic_data[0].partition_data[0].records = bytes(batch)
    answer = broker.call(ApiKey.PRODUCE, 9, request)
    result = answer.responses[0].partition_responses[0]
    assert result.error_code == ErrorCode.CORRUPT_MESSAGE, result
    assert "ZSTD" in (result.error_message or "").upper()
    assert broker.manager.logs[("t", 0)].log_end_offset == 0


@pytest.mark.parametrize(
    ("session_id", "epoch", "code"),
    [(0, -1, 0), (0, 0, 0), (55, 3, 70)],
    ids=["sessionless", "kafka-python-asks-for-a-session", "unknown-session"],
)
def test_fetch_is_sessionless(broker: Broker, session_id: int, epoch: int, code: int) -> None:
    """KIP-227 is optional: session id 0 and every partition; a named session is unknown here."""
    broker.call(ApiKey.PRODUCE, 9, produce("t", [b"a"]))
    answer = broker.call(ApiKey.FETCH, 11, fetch(0, 11, session_id, epoch))
    assert (answer.error_code, answer.session_id) == (code, 0)
    if code == 0:
        assert [p.partition_index for p in answer.responses[0].partitions] == [0]


def test_fetch_by_topic_id_from_v13(broker: Broker) -> None:
    broker.call(ApiKey.PRODUCE, 9, produce("t", [b"a"]))
    answer = broker.call(ApiKey.FETCH, 16, fetch(0, 16))
    assert answer.responses[0].topic_id == uuid_of(TOPIC_ID)
    assert answer.responses[0].partitions[0].high_watermark == 1
    unknown = fetch(0, 16)
    unknown.topics[0].topic_id = uuid.UUID(int=5)
    answer = broker.call(ApiKey.FETCH, 16, unknown)
    assert answer.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_an_unknown_topic_id_is_answered_before_the_long_poll_ends(broker: Broker) -> None:
    """A consumer's long poll (max_wait_ms) naming a topic id this broker does not know is answered
    at once with UNKNOWN_TOPIC_ID, beside a known partition with nothing new, instead of waiting
    for data that may never come."""
    request = fetch(0, 16)  # t is empty: alone, this waits for a record
    unknown = fetch(0, 16).topics[0]
    unknown.topic_id = uuid.UUID(int=5)
    request.topics.append(unknown)
    request.max_wait_ms = 30_000
    frame = encode_request(RequestHeader(ApiKey.FETCH, 16, 1, "test"), request)

    async def process():
        return broker.processor.process(frame, "127.0.0.1:1")

    outcome = asyncio.run(process())
    assert isinstance(outcome, (bytes, bytearray)), "parked until max_wait_ms"
    answer = parse_response(ApiKey.FETCH, 16, bytes(outcome[4:]))[1]
    codes = [(t.topic_id, p.error_code) for t in answer.responses for p in t.partitions]
    assert codes == [(uuid_of(TOPIC_ID), ErrorCode.NONE), (uuid.UUID(int=5), ErrorCode.UNKNOWN_TOPIC_ID)]


def test_list_offsets_and_offset_for_leader_epoch(broker: Broker) -> None:
    broker.call(ApiKey.PRODUCE, 9, produce("t", [b"a", b"b", b"c"]))

    def list_offsets(version: int, timestamp: int):
        part = m.ListOffsetsRequestListOffsetsPartition(partition_index=0, timestamp=timestamp)
        topic = m.ListOffsetsRequestListOffsetsTopic(name="t", partitions=[part])
        answer = broker.call(
            ApiKey.LIST_OFFSETS, version, m.ListOffsetsRequest(replica_id=-1, topics=[topic])
        )
        return answer.topics[0].partitions[0]

    assert list_offsets(0, -1).old_style_offsets == [3]
    assert (list_offsets(7, -2).offset, list_offsets(7, -1).offset) == (0, 3)
    assert list_offsets(4, -1).leader_epoch == 3
    assert list_offsets(1, -5).error_code == ErrorCode.INVALID_REQUEST
    part = m.OffsetForLeaderEpochRequestOffsetForLeaderPartition(partition=0, leader_epoch=3)
    topic = m.OffsetForLeaderEpochRequestOffsetForLeaderTopic(topic="t", partitions=[part])
    answer = broker.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, m.OffsetForLeaderEpochRequest(topics=[topic]))
    end = answer.topics[0].partitions[0]
    assert (end.error_code, end.leader_epoch, end.end_offset) == (0, 3, 3)


def test_init_producer_id_without_a_source_is_retriable_and_transactions_are_refused(broker: Broker) -> None:
    answer = broker.call(
        ApiKey.INIT_PRODUCER_ID, 4, m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1)
    )
    assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    answer = broker.call(
        ApiKey.INIT_PRODUCER_ID, 4, m.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1)
    )
    assert answer.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_request_metrics(broker: Broker) -> None:
    broker.call(ApiKey.METADATA, 12, m.MetadataRequest(topics=None))
    assert broker.metric("pykraft_kafka_requests_total", api="Metadata") == 1
    assert broker.metric("pykraft_kafka_request_latency_seconds_count", api="Metadata") == 1
    assert broker.metric("pykraft_kafka_request_bytes_total", api="Metadata") > 0
    assert broker.metric("pykraft_kafka_response_bytes_total", api="Metadata") > 0


def test_list_offsets_max_timestamp_from_v7(broker: Broker) -> None:
    """KIP-734: timestamp -3 answers the batch holding the largest timestamp (its last offset, as
    Kafka before 3.8 does); before v7 it is not a valid timestamp."""
    for stamps in ([1000, 5000], [9000, 2000], [3000]):
        batch = build_batch([(None, b"v", (), ts) for ts in stamps])
        data = m.ProduceRequestPartitionProduceData(index=0, records=batch)
        request = m.ProduceRequest(
            acks=-1,
            timeout_ms=1000,
            topic_data=[m.ProduceRequestTopicProduceData(name="t", partition_data=[data])],
        )
        broker.call(ApiKey.PRODUCE, 9, request)

    def max_timestamp(version: int):
        part = m.ListOffsetsRequestListOffsetsPartition(partition_index=0, timestamp=-3)
        topic = m.ListOffsetsRequestListOffsetsTopic(name="t", partitions=[part])
        answer = broker.call(
            ApiKey.LIST_OFFSETS, version, m.ListOffsetsRequest(replica_id=-1, topics=[topic])
        )
        return answer.topics[0].partitions[0]

    found = max_timestamp(7)
    assert (found.error_code, found.timestamp, found.offset) == (0, 9000, 3)
    assert max_timestamp(6).error_code == ErrorCode.INVALID_REQUEST


def produce_batch(batch: bytes, acks: int = -1) -> m.ProduceRequest:
    data = m.ProduceRequestPartitionProduceData(index=0, records=batch)
    return m.ProduceRequest(
        acks=acks,
        timeout_ms=1000,
        topic_data=[m.ProduceRequestTopicProduceData(name="t", partition_data=[data])],
    )


def first_result(broker: Broker, request: m.ProduceRequest, version: int = 9):
    return broker.call(ApiKey.PRODUCE, version, request).responses[0].partition_responses[0]


def test_acks_all_below_min_insync_replicas_is_refused(tmp_path: Path) -> None:
    broker = Broker(tmp_path, replicas=(101, 102), min_insync_replicas="2")  # ISR of one
    result = first_result(broker, produce("t", [b"a"]))
    assert result.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert broker.manager.logs[("t", 0)].log_end_offset == 0
    assert first_result(broker, produce("t", [b"a"], acks=1)).error_code == 0


def test_min_insync_replicas_above_the_replication_factor_counts_as_the_replication_factor(
    tmp_path: Path,
) -> None:
    """Kafka's effectiveMinIsr: min.insync.replicas=2 on a single-replica topic needs that one replica,
    not an impossible second one (which would refuse every acks=all produce forever)."""
    broker = Broker(tmp_path, min_insync_replicas="2")
    assert first_result(broker, produce("t", [b"a"])).error_code == 0
    assert broker.manager.partitions[("t", 0)].high_watermark == 1


def test_batch_above_max_message_bytes_is_refused(tmp_path: Path) -> None:
    broker = Broker(tmp_path, max_message_bytes="200")
    result = first_result(broker, produce("t", [b"x" * 500]))
    assert result.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert result.error_message  # v8+: the reason travels with the code
    assert broker.manager.logs[("t", 0)].log_end_offset == 0


def test_idempotent_retry_gets_the_original_offset_and_a_gap_is_refused(broker: Broker) -> None:
    def batch(sequence: int) -> bytes:
        return build_batch(
            [(None, b"v%d" % sequence, (), 0)], producer_id=9, producer_epoch=0, base_sequence=sequence
        )

    assert first_result(broker, produce_batch(batch(0))).base_offset == 0
    assert first_result(broker, produce_batch(batch(1))).base_offset == 1
    retry = first_result(broker, produce_batch(batch(0)))
    assert (retry.error_code, retry.base_offset) == (0, 0)
    gap = first_result(broker, produce_batch(batch(5)))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert broker.manager.logs[("t", 0)].log_end_offset == 2


@pytest.mark.parametrize(
    ("epoch", "code"), [(2, ErrorCode.FENCED_LEADER_EPOCH), (4, ErrorCode.UNKNOWN_LEADER_EPOCH), (3, 0)]
)
def test_fetch_checks_the_clients_leader_epoch(broker: Broker, epoch: int, code: int) -> None:
    """KIP-320: a stale epoch is fenced (with the current leader, v12+), a newer one unknown."""
    request = fetch(0)
    request.topics[0].partitions[0].current_leader_epoch = epoch
    part = broker.call(ApiKey.FETCH, 12, request).responses[0].partitions[0]
    assert part.error_code == code
    if code == ErrorCode.FENCED_LEADER_EPOCH:
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (101, 3)
