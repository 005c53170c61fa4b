"""proto.kafka.connection: the sans-I/O Kafka connection core. Frames cut from any split of the byte
stream, answers matched to requests in order (a mismatch breaks the connection at once), acks=0 not
awaited, a size out of bounds named, and a server's answers released in request order whatever order
they complete in."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto.kafka import messages as m
from proto.kafka.api import RequestHeader, encode_response, parse_request
from proto.kafka.connection import (
    CORRELATION_ID_MAX,
    ClientConnection,
    CorrelationMismatch,
    FrameCutter,
    FrameSizeError,
    KafkaProtocolError,
    ProtocolError,
    RequestReceived,
    ResponseDecodeError,
    ResponseReceived,
    ServerConnection,
)

VERSION = 3


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def answer(correlation_id: int, error_code: int = 0, version: int = VERSION) -> bytes:
    """A whole ApiVersions response frame, size prefix included."""
    header = RequestHeader(18, version, correlation_id)
    return framed(encode_response(header, m.ApiVersionsResponse(error_code=error_code, api_keys=[])))


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


# ---- frame cutting --------------------------------------------------------------------------------------


def test_several_frames_in_one_read_and_a_partial_one_kept() -> None:
    cutter = FrameCutter(1, 100)
    data = framed(b"one") + framed(b"two") + framed(b"three")[:5]
    assert cutter.feed(data) == [b"one", b"two"]
    assert cutter.buffered == 5
    assert cutter.feed(b"hree" + framed(b"4")) == [b"three", b"4"]
    assert cutter.buffered == 0


def test_a_frame_split_at_every_byte() -> None:
    data = framed(b"hello world") + framed(b"x")
    for cut in range(len(data) + 1):
        cutter = FrameCutter(1, 100)
        assert cutter.feed(data[:cut]) + cutter.feed(data[cut:]) == [b"hello world", b"x"], cut
    cutter = FrameCutter(1, 100)
    assert [f for byte in data for f in cutter.feed(bytes([byte]))] == [b"hello world", b"x"]


@settings(derandomize=True, max_examples=200)
@given(st.lists(st.binary(min_size=1, max_size=40), max_size=8), st.lists(st.integers(0, 9999), max_size=12))
def test_any_split_of_the_stream_gives_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(framed(p) for p in payloads)
    cutter = FrameCutter(1, 100)
    got = [frame for piece in chunks(stream, cuts) for frame in cutter.feed(piece)]
    assert got == payloads and cutter.buffered == 0 and cutter.error is None


@pytest.mark.parametrize("size", [-1, -(2**31), 0, 3, 101, 2**31 - 1])
def test_a_size_out_of_bounds_is_named_as_soon_as_its_4_bytes_arrive(size: int) -> None:
    cutter = FrameCutter(4, 100)
    assert cutter.feed(framed(b"good") + struct.pack(">i", size)) == [b"good"]
    assert isinstance(cutter.error, FrameSizeError) and cutter.error.size == size
    assert "allowed 4..100" in str(cutter.error)
    assert cutter.feed(framed(b"more")) == [] and cutter.buffered == 0


def test_frames_are_immutable_copies() -> None:
    cutter = FrameCutter(1, 100)
    source = bytearray(framed(b"abc"))
    (frame,) = cutter.feed(source)
    source[4] = ord("z")
    assert frame == b"abc" and isinstance(frame, bytes)


# ---- client side ----------------------------------------------------------------------------------------


def test_answers_are_matched_to_requests_in_order_with_their_tokens() -> None:
    client = ClientConnection("test")
    sent = [client.send_request(m.ApiVersionsRequest(), VERSION, token=f"t{i}") for i in range(3)]
    ids = [parse_request(data[4:])[0].correlation_id for data in sent]
    assert ids == [1, 2, 3] and client.last_correlation_id == 3 and client.in_flight == 3
    events = client.receive_data(answer(1) + answer(2) + answer(3)[:7])
    answered = [(e.correlation_id, e.token) for e in events if isinstance(e, ResponseReceived)]
    assert answered == [(1, "t0"), (2, "t1")]
    assert all(isinstance(e.body, m.ApiVersionsResponse) for e in events if isinstance(e, ResponseReceived))
    assert [r.token for r in client.outstanding] == ["t2"]
    (last,) = client.receive_data(answer(3)[7:])
    assert isinstance(last, ResponseReceived) and last.token == "t2" and client.in_flight == 0


@settings(derandomize=True, max_examples=100)
@given(st.integers(1, 6), st.lists(st.integers(0, 10_000), max_size=10))
def test_answers_split_anywhere_come_out_whole_and_in_order(count: int, cuts: list[int]) -> None:
    client = ClientConnection("test")
    for i in range(count):
        client.send_request(m.ApiVersionsRequest(), VERSION, token=i)
    stream = b"".join(answer(i + 1) for i in range(count))
    events = [e for piece in chunks(stream, cuts) for e in client.receive_data(piece)]
    assert [e.token for e in events if isinstance(e, ResponseReceived)] == list(range(count))
    assert len(events) == count and client.error is None


def test_a_correlation_mismatch_breaks_the_connection_as_soon_as_the_id_arrives() -> None:
    client = ClientConnection("test")
    client.send_request(m.ApiVersionsRequest(), VERSION, token="a")
    client.send_request(m.ApiVersionsRequest(), VERSION, token="b")
    wrong = answer(2)
    (event,) = client.receive_data(wrong[:8])  # size and correlation id only: the rest is not awaited
    assert isinstance(event, ProtocolError) and isinstance(event.error, CorrelationMismatch)
    assert (event.error.got, event.error.expected) == (2, 1)
    assert client.receive_data(wrong[8:] + answer(1)) == []  # broken: nothing more
    assert [r.token for r in client.outstanding] == ["a", "b"]  # for the caller to fail
    with pytest.raises(KafkaProtocolError):
        client.send_request(m.ApiVersionsRequest(), VERSION)


def test_an_answer_with_nothing_outstanding_is_a_protocol_error() -> None:
    client = ClientConnection("test")
    (event,) = client.receive_data(answer(1))
    assert isinstance(event, ProtocolError) and isinstance(event.error, CorrelationMismatch)
    assert event.error.expected is None


def test_answers_before_a_mismatch_are_delivered_first() -> None:
    client = ClientConnection("test")
    client.send_request(m.ApiVersionsRequest(), VERSION, token="a")
    client.send_request(m.ApiVersionsRequest(), VERSION, token="b")
    first, second = client.receive_data(answer(1) + answer(7))
    assert isinstance(first, ResponseReceived) and first.token == "a"
    assert isinstance(second, ProtocolError) and "expected 2" in str(second.error)


def test_an_oversize_or_negative_answer_is_a_frame_size_error() -> None:
    for size in (-1, 0, 3, 1001):
        client = ClientConnection("test", max_frame_bytes=1000)
        client.send_request(m.ApiVersionsRequest(), VERSION)
        (event,) = client.receive_data(struct.pack(">i", size))
        assert isinstance(event, ProtocolError) and isinstance(event.error, FrameSizeError), size


def test_an_answer_that_does_not_decode_is_a_protocol_error_and_stays_outstanding() -> None:
    client = ClientConnection("test")
    client.send_request(m.ApiVersionsRequest(), VERSION, token="a")
    (event,) = client.receive_data(framed(struct.pack(">i", 1) + b"\x00"))
    assert isinstance(event, ProtocolError) and isinstance(event.error, ResponseDecodeError)
    assert [r.token for r in client.outstanding] == ["a"]


def test_acks_0_produce_is_not_awaited() -> None:
    client = ClientConnection("test")
    produce = m.ProduceRequest(acks=0, timeout_ms=1000, topic_data=[])
    client.send_request(produce, 9, token="p")
    assert client.in_flight == 0 and client.last_correlation_id == 1
    client.send_request(m.ApiVersionsRequest(), VERSION, token="v")
    (event,) = client.receive_data(answer(2))  # the acks=0 request's id was used, never answered
    assert isinstance(event, ResponseReceived) and event.token == "v"
    client.send_request(m.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[]), 9)
    assert client.in_flight == 1


def test_correlation_ids_wrap_before_int32_overflows() -> None:
    client = ClientConnection("test", first_correlation_id=CORRELATION_ID_MAX - 1)
    client.send_request(m.ApiVersionsRequest(), VERSION)
    client.send_request(m.ApiVersionsRequest(), VERSION)
    assert [r.correlation_id for r in client.outstanding] == [CORRELATION_ID_MAX - 1, 1]


def test_the_request_bytes_are_a_whole_frame() -> None:
    client = ClientConnection("who", first_correlation_id=42)
    data = client.send_request(m.MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
    (frame,) = FrameCutter(8, 1000).feed(data)
    header, body = parse_request(frame)
    assert header == RequestHeader(3, 12, 42, "who") and body.topics is None


# ---- server side ----------------------------------------------------------------------------------------


def request_frame(correlation_id: int) -> bytes:
    client = ClientConnection("c", first_correlation_id=correlation_id)
    return client.send_request(m.ApiVersionsRequest(), VERSION)


def test_requests_become_events_with_their_header_fields() -> None:
    server: ServerConnection[bytes] = ServerConnection(1000)
    data = request_frame(5) + request_frame(6)
    events = server.receive_data(data[:-3]) + server.receive_data(data[-3:])
    got = [(e.api_key, e.api_version, e.correlation_id) for e in events if isinstance(e, RequestReceived)]
    assert got == [(18, VERSION, 5), (18, VERSION, 6)]
    assert all(isinstance(e, RequestReceived) and parse_request(e.frame) for e in events)


@pytest.mark.parametrize("size", [-5, 0, 7, 1001])
def test_a_request_size_out_of_bounds_is_a_protocol_error(size: int) -> None:
    server: ServerConnection[bytes] = ServerConnection(1000)
    first, error = server.receive_data(request_frame(1) + struct.pack(">i", size) + b"x" * 8)
    assert isinstance(first, RequestReceived)
    assert isinstance(error, ProtocolError) and isinstance(error.error, FrameSizeError)
    assert error.error.size == size and "allowed 8..1000" in str(error.error)
    assert server.receive_data(request_frame(2)) == []


def test_answers_leave_in_request_order_when_they_complete_out_of_order() -> None:
    server: ServerConnection[str] = ServerConnection()
    slots = [server.open_slot() for _ in range(3)]
    server.add_answer("ready-at-once")
    assert server.in_flight == 4 and server.next_answer() is None
    server.complete(slots[2], "c")
    server.complete(slots[1], "b")
    assert server.next_answer() is None  # the first is not done: nothing leaves
    server.complete(slots[0], "a")
    assert [server.next_answer() for _ in range(5)] == ["a", "b", "c", "ready-at-once", None]
    assert server.in_flight == 0
    with pytest.raises(ValueError):
        server.complete(slots[0], "again")


@settings(derandomize=True, max_examples=200)
@given(st.permutations(range(8)))
def test_any_completion_order_releases_in_request_order(order: list[int]) -> None:
    server: ServerConnection[int] = ServerConnection()
    slots = [server.open_slot() for _ in range(8)]
    released: list[int] = []
    for i in order:
        server.complete(slots[i], i)
        while (got := server.next_answer()) is not None:
            released.append(got)
    assert released == list(range(8))


def test_slots_keep_counting_after_releases() -> None:
    server: ServerConnection[str] = ServerConnection()
    server.add_answer("x")
    assert server.next_answer() == "x"
    slot = server.open_slot()
    server.complete(slot, "y")
    assert server.next_answer() == "y"


def test_close_returns_the_answers_never_released() -> None:
    server: ServerConnection[str] = ServerConnection()
    first = server.open_slot()
    server.add_answer("done-but-waiting")
    assert server.close() == ["done-but-waiting"] and server.in_flight == 0
    with pytest.raises(ValueError):
        server.complete(first, "late")
