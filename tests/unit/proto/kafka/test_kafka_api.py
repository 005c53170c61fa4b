"""Request and response frames (``proto.kafka.api``): headers v1/v2 and v0/v1, the named errors of
``parse_request`` (KIP-511's unsupported ApiVersions included), records as zero-copy views."""

from __future__ import annotations

import random
import struct

import pytest

from proto.kafka import api, generate, messages
from proto.kafka.api import ApiKey, RequestHeader
from tests.unit.proto.kafka.samples import build

APIS = {a.api_key: a for a in generate.load_apis()}
CLASSES = {name: obj for name, obj in vars(messages).items() if isinstance(obj, type)}


def sample(api_key: int, side: str, version: int) -> object:
    message = getattr(APIS[api_key], side)
    return build(message.root, version, "full", random.Random(f"{api_key}/{side}/{version}"), CLASSES)


REQUEST_CASES = [
    pytest.param(key, v, client_id, id=f"{a.name}-v{v}-{'null' if client_id is None else 'client'}")
    for key, a in APIS.items()
    for v in a.request.versions
    for client_id in ("rdkafka-é", None)
]


@pytest.mark.parametrize(("api_key", "version", "client_id"), REQUEST_CASES)
def test_request_frame_round_trip(api_key: int, version: int, client_id: str | None) -> None:
    header = RequestHeader(api_key, version, 0x7ABCDEF0, client_id)
    body = sample(api_key, "request", version)
    frame = api.encode_request(header, body)
    assert api.parse_request(frame) == (header, body)
    assert api.parse_request(memoryview(bytearray(frame))) == (header, body)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [pytest.param(k, v, id=f"{a.name}-v{v}") for k, a in APIS.items() for v in a.response.versions],
)
def test_response_frame_round_trip(api_key: int, version: int) -> None:
    body = sample(api_key, "response", version)
    if api_key == ApiKey.API_VERSIONS:
        body.error_code = 0  # a non-zero error makes readers fall back to the v0 body (KIP-511)
    frame = api.encode_response(RequestHeader(api_key, version, 42, "c"), body)
    assert api.parse_response(api_key, version, frame) == (42, body)
    sized = api.encode_response_frame(RequestHeader(api_key, version, 42, "c"), body)
    assert bytes(sized) == struct.pack(">i", len(frame)) + frame


def test_request_header_v2_is_used_by_flexible_versions_and_keeps_a_classic_client_id() -> None:
    frame = api.encode_request(
        RequestHeader(ApiKey.METADATA, 9, 7, "ab"), messages.MetadataRequest(topics=None)
    )
    # key, version, correlation id, client id (int16 length), header tags (0), then the body
    assert frame[:8] == struct.pack(">hhi", 3, 9, 7)
    assert frame[8:12] == b"\x00\x02ab"
    assert frame[12] == 0
    frame_v8 = api.encode_request(RequestHeader(ApiKey.METADATA, 8, 7, "ab"), messages.MetadataRequest())
    assert frame_v8[12:16] == b"\x00\x00\x00\x00"  # v8 header has no tags: the body's int32 count follows


def test_unknown_header_tags_are_skipped() -> None:
    header = RequestHeader(ApiKey.API_VERSIONS, 3, 5, "librdkafka")
    body = messages.ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.16.0")
    frame = bytearray(api.encode_request(header, body))
    tags_at = 8 + 2 + len("librdkafka")
    assert frame[tags_at] == 0
    frame[tags_at : tags_at + 1] = bytes([1, 9, 3]) + b"xyz"  # one tag (9) of 3 bytes
    assert api.parse_request(bytes(frame)) == (header, body)


def test_response_header_v1_for_flexible_versions_but_v0_for_api_versions() -> None:
    metadata = api.encode_response(RequestHeader(ApiKey.METADATA, 9, 1, None), messages.MetadataResponse())
    assert metadata[:5] == b"\x00\x00\x00\x01\x00"  # correlation id, empty header tags
    versions = messages.ApiVersionsResponse(api_keys=[messages.ApiVersionsResponseApiVersion(18, 0, 4)])
    frame = api.encode_response(RequestHeader(ApiKey.API_VERSIONS, 3, 1, None), versions)
    # correlation id, then directly the body: error_code int16 0, compact array of 1 (varint 2)
    assert frame[:7] == b"\x00\x00\x00\x01\x00\x00\x02"


def test_unsupported_api_versions_version_parses_the_header_and_answers_v0() -> None:
    """KIP-511: a newer client sends ApiVersions v5; it gets error 35 in a v0 body."""
    frame = struct.pack(">hhih", 18, 5, 99, 4) + b"java" + b"\x00" + b"future body"
    with pytest.raises(api.UnsupportedVersion) as info:
        api.parse_request(frame)
    assert info.value.header == RequestHeader(18, 5, 99, "java")
    answer = messages.ApiVersionsResponse(
        error_code=35, api_keys=[messages.ApiVersionsResponseApiVersion(18, 0, 4)]
    )
    out = api.encode_response(info.value.header, answer)
    assert api.parse_response(18, 0, out) == (99, answer)
    assert api.parse_response(18, 3, out) == (99, answer), "a client reads error 35 as a v0 body"


@pytest.mark.parametrize(
    ("frame", "error", "detail"),
    [
        pytest.param(b"\x00\x03\x00", api.InvalidRequest, "shorter than a request header", id="short"),
        pytest.param(struct.pack(">hhih", 999, 0, 1, -1), api.UnknownApiKey, "api key 999", id="unknown-key"),
        pytest.param(
            struct.pack(">hhih", 0, 2, 1, -1), api.UnsupportedVersion, "Produce version 2", id="produce-v2"
        ),
        pytest.param(
            struct.pack(">hhi", 0, 11, 1) + b"\x00",
            api.UnsupportedVersion,
            "Produce version 11",
            id="unsupported-truncated-client-id",
        ),
        pytest.param(
            struct.pack(">hhih", 3, 1, 1, 50) + b"abc", api.InvalidRequest, "client_id", id="client-id-long"
        ),
        pytest.param(
            struct.pack(">hhih", 3, 1, 1, -1) + b"\x00\x00",
            api.InvalidRequest,
            "truncated",
            id="body-truncated",
        ),
        pytest.param(
            struct.pack(">hhihi", 3, 1, 1, -1, 1) + b"\x00\x02\xff\xfe",
            api.InvalidRequest,
            "UTF-8",
            id="invalid-utf8",
        ),
        pytest.param(
            struct.pack(">hhihi", 3, 1, 1, -1, -7),
            api.InvalidRequest,
            "negative array count",
            id="negative-count",
        ),
        pytest.param(
            struct.pack(">hhihi", 3, 0, 1, -1, -1), api.InvalidRequest, "non-nullable", id="null-topics-v0"
        ),
        pytest.param(
            struct.pack(">hhih", 18, 3, 1, -1) + b"\x00\x80\x80\x80\x80\x80\x01",
            api.InvalidRequest,
            "varint longer",
            id="long-varint",
        ),
    ],
)
def test_bad_requests_get_named_errors(frame: bytes, error: type, detail: str) -> None:
    with pytest.raises(error, match=detail) as info:
        api.parse_request(frame)
    assert isinstance(info.value, api.RequestParseError)
    if isinstance(info.value, api.InvalidRequest) and len(frame) >= 8:
        assert info.value.header is not None and info.value.header.correlation_id == 1


def test_records_decode_to_a_view_of_the_frame() -> None:
    batch = bytes(range(256)) * 64
    request = messages.ProduceRequest(
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            messages.ProduceRequestTopicProduceData(
                name="t", partition_data=[messages.ProduceRequestPartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    frame = bytearray(api.encode_request(RequestHeader(ApiKey.PRODUCE, 9, 1, "p"), request))
    _, decoded = api.parse_request(frame)
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records == batch
    assert records.obj is frame, "records must be a slice of the frame, not a copy"


def test_encoding_a_response_in_an_unsupported_version_is_a_programmer_error() -> None:
    with pytest.raises(ValueError, match="not supported"):
        api.encode_response(RequestHeader(ApiKey.PRODUCE, 2, 1, None), messages.ProduceResponse())
    with pytest.raises(TypeError, match="expected a ProduceResponse"):
        api.encode_response(RequestHeader(ApiKey.PRODUCE, 9, 1, None), messages.FetchResponse())


def test_supported_versions_and_flexibility_come_from_the_schemas() -> None:
    assert api.SUPPORTED_VERSIONS[ApiKey.PRODUCE] == (3, 10)
    assert api.SUPPORTED_VERSIONS[ApiKey.FETCH] == (4, 16)
    assert api.SUPPORTED_VERSIONS[ApiKey.API_VERSIONS] == (0, 4)
    assert not api.is_flexible(ApiKey.FETCH, 11) and api.is_flexible(ApiKey.FETCH, 12)
    assert not api.is_flexible(ApiKey.INIT_PRODUCER_ID, 1) and api.is_flexible(ApiKey.INIT_PRODUCER_ID, 2)
    assert all(key in set(ApiKey) for key in api.SUPPORTED_VERSIONS)


def test_request_bytes_after_the_message_are_ignored_as_kafka_does():
    """librdkafka 2.16 sends Metadata v13 for all topics with a 4-byte-wide null topic count (compact
    null, then 3 zero bytes); Kafka's broker reads the fields it knows and ignores what is left."""
    frame = bytes.fromhex("0003000d00000003000772646b61666b610000000000010000")
    header, request = api.parse_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 13, 3)
    assert request.topics is None
