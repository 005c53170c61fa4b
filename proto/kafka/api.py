"""Kafka request and response frames: headers, API keys, versions, and the generated bodies.

A frame here is what follows Kafka's int32 size prefix. A request frame is a request header then the
request body; a response frame is a response header then the response body.

    request header v1 (non-flexible API version): api_key int16, api_version int16,
        correlation_id int32, client_id nullable string (int16 length)
    request header v2 (flexible API version): v1, then a tagged-field section
        (client_id stays a classic int16-length string, as in Kafka's RequestHeader.json)
    response header v0: correlation_id int32
    response header v1 (flexible API version): correlation_id int32, tagged-field section
    ApiVersions answers always use response header v0, so that a client that does not yet know
    what the broker supports can read the correlation id (KIP-511).

``parse_request`` never raises anything but ``RequestParseError`` subclasses for bad bytes:
``UnknownApiKey`` (key not served; Kafka closes the connection), ``UnsupportedVersion`` (known key,
version out of range; the header is parsed as far as the bytes allow, so a listener can answer
ApiVersions with error 35 and a v0 body per KIP-511), and ``InvalidRequest`` (the header or body
does not decode). ``records`` fields of decoded messages are ``memoryview`` slices of the frame,
so a frame must stay unmodified while its decoded message is in use.

Pure functions, no I/O, thread-safe.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any

from proto.kafka import messages
from proto.kafka.codec import (
    FrameParts,
    KafkaDecodeError,
    ResponseParts,
    as_view,
    decode_body,
    read_nullable_string,
    skip_tagged_fields,
)


class ApiKey(enum.IntEnum):
    """Kafka's API keys (numbers never change) for the APIs pykraft serves or plans to."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61


# api key -> (min, max) of the versions pykraft decodes and encodes: the schema files' valid_versions.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = dict(messages.VALID_VERSIONS)
API_VERSIONS_V0 = 0

_S_REQUEST_HEADER = struct.Struct(">hhi")
_S_CORRELATION_ID = struct.Struct(">i")
REQUEST_HEADER_FIXED_BYTES = _S_REQUEST_HEADER.size
NEVER_FLEXIBLE = 1 << 15  # above every int16 version
_UNSUPPORTED_VERSION_BYTES = struct.pack(">h", 35)  # ErrorCode.UNSUPPORTED_VERSION


def is_flexible(api_key: int, api_version: int) -> bool:
    """True when this API version uses the flexible encoding (compact types, tagged fields)."""
    low = messages.FLEXIBLE_MIN_VERSION.get(api_key)
    return low is not None and api_version >= low


def is_supported(api_key: int, api_version: int) -> bool:
    versions = SUPPORTED_VERSIONS.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


class RequestParseError(KafkaDecodeError):
    """A request frame that cannot be served as sent."""


class UnknownApiKey(RequestParseError):
    def __init__(self, api_key: int, correlation_id: int) -> None:
        super().__init__(f"unknown or unserved api key {api_key} (correlation id {correlation_id})")
        self.api_key = api_key
        self.correlation_id = correlation_id


class UnsupportedVersion(RequestParseError):
    def __init__(self, header: RequestHeader) -> None:
        low, high = SUPPORTED_VERSIONS[header.api_key]
        super().__init__(
            f"{messages.API_NAMES[header.api_key]} version {header.api_version} is not supported "
            f"(supported: {low}-{high}; correlation id {header.correlation_id})"
        )
        self.header = header


class InvalidRequest(RequestParseError):
    """The header or body does not decode; ``header`` is None when even the header is unreadable."""

    def __init__(self, header: RequestHeader | None, reason: str) -> None:
        super().__init__(reason)
        self.header = header


def parse_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Any]:
    """Decode one request frame (the bytes after the size prefix) into its header and body.

    Bytes after the body are ignored, as Kafka's broker does: it reads what the schema defines
    (librdkafka 2.16's all-topics Metadata v13 carries 3 bytes more).
    """
    buf = as_view(frame)
    end = len(buf)
    if end < REQUEST_HEADER_FIXED_BYTES:
        raise InvalidRequest(None, f"request of {end} bytes is shorter than a request header (8 bytes)")
    api_key, api_version, correlation_id = _S_REQUEST_HEADER.unpack_from(buf, 0)
    plan = _REQUEST_PLANS.get(api_key)
    if plan is None:
        raise UnknownApiKey(api_key, correlation_id)
    low, high, flexible_low, decoders = plan
    try:
        client_id, pos = read_nullable_string(buf, REQUEST_HEADER_FIXED_BYTES, end)
    except (KafkaDecodeError, struct.error) as exc:
        header = RequestHeader(api_key, api_version, correlation_id, None)
        if not low <= api_version <= high:
            raise UnsupportedVersion(header) from None
        raise InvalidRequest(header, f"request header client_id does not decode: {exc}") from None
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    if not low <= api_version <= high:
        raise UnsupportedVersion(header)
    try:
        if api_version >= flexible_low:  # request header v2: its tagged fields (none known)
            if buf[pos] == 0:
                pos += 1
            else:
                pos = skip_tagged_fields(buf, pos, end)
        body, pos = decoders[api_version](buf, pos, end)
    except KafkaDecodeError as exc:
        raise InvalidRequest(header, f"{_request_name(header)}: {exc.reason}") from None
    except (struct.error, IndexError) as exc:
        raise InvalidRequest(header, f"{_request_name(header)}: truncated ({exc})") from None
    return header, body


def _request_name(header: RequestHeader) -> str:
    return f"{messages.API_NAMES[header.api_key]}Request v{header.api_version}"


def _first_flexible(api_key: int) -> int:
    first = messages.FLEXIBLE_MIN_VERSION[api_key]
    return NEVER_FLEXIBLE if first is None else first


# api key -> (lowest version, highest version, first flexible version, decoders by version)
_REQUEST_PLANS: dict[int, tuple[int, int, int, tuple]] = {
    key: (low, high, _first_flexible(key), messages.REQUEST_DECODERS[key])
    for key, (low, high) in messages.VALID_VERSIONS.items()
}


def _response_header_flexible(api_key: int, api_version: int) -> bool:
    return api_key != ApiKey.API_VERSIONS and is_flexible(api_key, api_version)


def _encoder(table: dict[int, tuple], api_key: int, api_version: int, what: str) -> Any:
    if not is_supported(api_key, api_version):
        raise ValueError(f"cannot encode {what} for api key {api_key} version {api_version}: not supported")
    return table[api_key][api_version]


def _check_type(obj: Any, classes: dict[int, type], api_key: int) -> None:
    expected = classes[api_key]
    if type(obj) is not expected:
        raise TypeError(f"expected a {expected.__name__}, got {type(obj).__name__}")


def encode_response_into(out: bytearray, header: RequestHeader, response: Any) -> None:
    """Append the response header and body for ``header``'s request to ``out``.

    ApiVersions at a version above the supported range is answered with a v0 body (KIP-511).
    """
    api_key, api_version = header.api_key, header.api_version
    if api_key == ApiKey.API_VERSIONS and api_version > SUPPORTED_VERSIONS[api_key][1]:
        api_version = API_VERSIONS_V0
    encode = _encoder(messages.RESPONSE_ENCODERS, api_key, api_version, "a response")
    _check_type(response, messages.RESPONSE_CLASSES, api_key)
    out += _S_CORRELATION_ID.pack(header.correlation_id)
    if _response_header_flexible(api_key, api_version):
        out.append(0)
    encode(out, response)


def encode_response(header: RequestHeader, response: Any) -> bytes:
    """Response header (v0/v1; v0 always for ApiVersions) and body, without the size prefix."""
    out = bytearray()
    encode_response_into(out, header, response)
    return bytes(out)


def encode_response_frame(header: RequestHeader, response: Any) -> bytearray:
    """Like ``encode_response`` but with the int32 size prefix, built without an extra copy."""
    out = bytearray(4)
    encode_response_into(out, header, response)
    struct.pack_into(">i", out, 0, len(out) - 4)
    return out


def encode_response_parts(header: RequestHeader, response: Any) -> bytearray | FrameParts:
    """Like ``encode_response_frame``, but records given as file regions stay out of memory: a frame
    with any comes back as ``FrameParts`` (the bytes around them and the regions, in order; its size
    prefix and each records length prefix count the regions' bytes); one without is a bytearray."""
    out = ResponseParts(4)
    encode_response_into(out, header, response)
    if not out.regions:
        struct.pack_into(">i", out, 0, len(out) - 4)
        return out
    frame = FrameParts.of(out)
    struct.pack_into(">i", out, 0, frame.size - 4)
    return frame


def encode_request(header: RequestHeader, request: Any) -> bytes:
    """Request header (v1/v2) and body, without the size prefix (for clients and tests)."""
    encode = _encoder(messages.REQUEST_ENCODERS, header.api_key, header.api_version, "a request")
    _check_type(request, messages.REQUEST_CLASSES, header.api_key)
    out = bytearray(_S_REQUEST_HEADER.pack(header.api_key, header.api_version, header.correlation_id))
    client_id = None if header.client_id is None else header.client_id.encode()
    if client_id is None:
        out += b"\xff\xff"
    else:
        out += struct.pack(">h", len(client_id))
        out += client_id
    if is_flexible(header.api_key, header.api_version):
        out.append(0)
    encode(out, request)
    return bytes(out)


def parse_response(api_key: int, api_version: int, frame: bytes | bytearray | memoryview) -> tuple[int, Any]:
    """Decode a response frame to the request ``(api_key, api_version)``: (correlation id, body)."""
    if not is_supported(api_key, api_version):
        raise KafkaDecodeError(f"cannot decode a response for api key {api_key} version {api_version}")
    buf = as_view(frame)
    end = len(buf)
    name = f"{messages.API_NAMES[api_key]}Response v{api_version}"
    if end < _S_CORRELATION_ID.size:
        raise KafkaDecodeError(f"{name}: frame of {end} bytes has no correlation id")
    (correlation_id,) = _S_CORRELATION_ID.unpack_from(buf, 0)
    pos = _S_CORRELATION_ID.size
    if _response_header_flexible(api_key, api_version):
        try:
            pos = skip_tagged_fields(buf, pos, end)
        except IndexError:
            raise KafkaDecodeError(f"{name}: response header tagged fields are truncated") from None
    if api_key == ApiKey.API_VERSIONS and buf[pos : pos + 2] == _UNSUPPORTED_VERSION_BYTES:
        api_version = API_VERSIONS_V0  # KIP-511: the broker answered in v0 to a version it lacks
    body = decode_body(messages.RESPONSE_DECODERS[api_key][api_version], name, buf, pos)
    return correlation_id, body
