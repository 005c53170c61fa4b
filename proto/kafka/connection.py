"""One Kafka connection, without I/O: bytes in, events out (in the style of python-hyper/h11).

Theory of operation
-------------------
Kafka's wire protocol is a stream of *frames*: an int32 size (big-endian, signed) and then that many
bytes, a request frame (request header, body) from client to broker or a response frame (response
header, body) back. Every piece of pykraft that speaks it drives one of the two objects here, and
none of them cuts frames or matches answers by itself:

- ``ClientConnection`` (a Kafka client: the replica fetcher's and the lag metric's asyncio client, the
  Spark reader's blocking client, the CLI's probe, the tests' client). ``send_request(body, version)``
  encodes the request header and body (``proto.kafka.api``) with the size prefix and returns the bytes
  for the caller to write; it records the request (correlation id, api key, version and an opaque
  ``token`` of the caller's, e.g. the future to resolve) as outstanding, unless it is a request that
  Kafka never answers (a Produce with acks=0). ``receive_data(bytes)`` returns the events those bytes
  complete: a ``ResponseReceived`` (the decoded body and the request's token) for each answer. Kafka
  answers the requests of one connection strictly in the order they were sent, so each answer must
  carry the correlation id of the oldest outstanding request; any other id (seen as soon as the first
  8 bytes of a frame arrive, not after the whole frame), an answer with nothing outstanding, or an
  answer that does not decode means the stream is out of step: a ``ProtocolError`` event, after which
  the connection is *broken* (it accepts nothing more; the caller closes the socket and fails every
  request still in ``outstanding``).
- ``ServerConnection`` (the broker's Kafka listener). ``receive_data(bytes)`` returns a
  ``RequestReceived`` (api key, version, correlation id and the whole frame) per request frame. The
  caller answers them in any order but they must leave in request order (clients pipeline and match
  answers by order): it reserves a place with ``open_slot()`` when it knows that a request will be
  answered (an acks=0 Produce is not), ``complete(slot, answer)`` when the answer is ready, and
  writes what ``next_answer()`` releases — the oldest answer, only once every answer before it has
  been released. The core stores answers, never looks into them (they may be bytes or frames with
  file regions for sendfile), and counts ``in_flight`` (slots not yet released) for the caller's
  limits.

Both cut frames with ``FrameCutter``: a size below the role's minimum (a request header's 8 bytes, a
response header's 4) or above ``max_frame_bytes`` (socket.request.max.bytes on a broker, the
client's receive limit) is a ``FrameSizeError`` as soon as the 4 size bytes arrive — nothing of the
frame is buffered beyond what already came. Frames complete in one ``receive_data`` are all returned,
in order, with any error last; a frame split over any number of reads is put together.

Frames handed out are ``bytes`` that the core never reuses, so decoded ``records`` (memoryviews of
the frame) stay valid. No sockets, clocks or threads inside: timeouts, back-pressure and closing are
the caller's. Not thread-safe: one owner per connection.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from proto.kafka.api import ApiKey, RequestHeader, encode_request, parse_response
from proto.kafka.codec import KafkaDecodeError

SIZE_BYTES = 4
REQUEST_HEADER_MIN_BYTES = 8  # api_key int16, api_version int16, correlation_id int32
RESPONSE_HEADER_MIN_BYTES = 4  # correlation_id int32
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes, librdkafka's receive limit
CORRELATION_ID_MAX = (1 << 31) - 1  # ids run 1 .. CORRELATION_ID_MAX - 1, then start again at 1

_S_SIZE = struct.Struct(">i")
_S_REQUEST_HEADER = struct.Struct(">hhi")
_S_CORRELATION_ID = struct.Struct(">i")


# ---- errors -----------------------------------------------------------------------------------------


class KafkaProtocolError(Exception):
    """The peer's bytes break Kafka's framing or its answer order; the connection cannot go on."""


class FrameSizeError(KafkaProtocolError):
    """A frame announces a size outside ``min_bytes..max_bytes`` (negative, too short for a header,
    or above the limit)."""

    def __init__(self, size: int, min_bytes: int, max_bytes: int) -> None:
        super().__init__(f"frame announces {size} bytes; allowed {min_bytes}..{max_bytes}")
        self.size = size
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes


class CorrelationMismatch(KafkaProtocolError):
    """An answer whose correlation id is not the oldest outstanding request's (``expected`` is None:
    no request was outstanding)."""

    def __init__(self, got: int, expected: int | None) -> None:
        if expected is None:
            message = f"an answer (correlation id {got}) arrived with no request outstanding"
        else:
            message = f"answer with correlation id {got}, expected {expected}"
        super().__init__(message)
        self.got = got
        self.expected = expected


class ResponseDecodeError(KafkaProtocolError):
    """An answer in step with its request whose bytes do not decode as that request's response."""


# ---- events -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResponseReceived:
    """The answer to the oldest outstanding request (client side)."""

    correlation_id: int
    api_key: int
    api_version: int
    body: Any  # the generated response message; its ``records`` are views of the frame
    token: Any  # what the caller passed to ``send_request``


@dataclass(frozen=True, slots=True)
class RequestReceived:
    """One request frame (server side); ``frame`` is the whole frame without its size prefix (at least
    the 8 bytes of api key, version and correlation id). The header fields are read from the frame
    when asked for: the broker's processor parses the frame itself, and one field instead of four
    keeps the event cheap on the listener's path (~0.2 us a request)."""

    frame: bytes

    @property
    def api_key(self) -> int:
        return int(_S_REQUEST_HEADER.unpack_from(self.frame, 0)[0])

    @property
    def api_version(self) -> int:
        return int(_S_REQUEST_HEADER.unpack_from(self.frame, 0)[1])

    @property
    def correlation_id(self) -> int:
        return int(_S_REQUEST_HEADER.unpack_from(self.frame, 0)[2])


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """The stream is broken (``error`` says how); no event follows it."""

    error: KafkaProtocolError


@dataclass(frozen=True, slots=True)
class OutstandingRequest:
    """A request sent and not yet answered (client side)."""

    correlation_id: int
    api_key: int
    api_version: int
    token: Any


# ---- frames -----------------------------------------------------------------------------------------


class FrameCutter:
    """Cuts a byte stream into frames (size prefix removed). ``feed`` returns the frames it completed;
    on a size out of bounds it sets ``error`` (a ``FrameSizeError``) and then returns nothing more."""

    __slots__ = ("_buffer", "error", "max_frame_bytes", "min_frame_bytes")

    def __init__(self, min_frame_bytes: int, max_frame_bytes: int) -> None:
        self.min_frame_bytes = min_frame_bytes
        self.max_frame_bytes = max_frame_bytes
        self.error: FrameSizeError | None = None
        self._buffer = bytearray()  # the start of a frame not yet complete, size prefix included

    @property
    def buffered(self) -> int:
        """Bytes held of a frame not yet complete."""
        return len(self._buffer)

    def peek(self, n: int) -> bytes | None:
        """The first ``n`` bytes of the incomplete frame after its size, if that many have arrived."""
        if len(self._buffer) < SIZE_BYTES + n:
            return None
        return bytes(self._buffer[SIZE_BYTES : SIZE_BYTES + n])

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        if self.error is not None:
            return []
        buffer = self._buffer
        if not buffer and type(data) is bytes:
            # Nothing pending and bytes (what sockets return): frames are sliced from ``data`` itself,
            # one copy each; the common read of exactly one frame costs no more than that.
            if len(data) >= SIZE_BYTES:
                (size,) = _S_SIZE.unpack_from(data, 0)
                if self.min_frame_bytes <= size <= self.max_frame_bytes and len(data) == SIZE_BYTES + size:
                    return [data[SIZE_BYTES:]]
            frames, start = self._cut(data)
            if self.error is None and start < len(data):
                buffer += data[start:]
            return frames
        buffer += data
        with memoryview(buffer) as view:
            frames, start = self._cut(view)
        if self.error is not None:
            buffer.clear()
        elif start:
            del buffer[:start]
        return frames

    def _cut(self, source: bytes | memoryview) -> tuple[list[bytes], int]:
        """The whole frames at the start of ``source`` and where the rest begins."""
        low, high = self.min_frame_bytes, self.max_frame_bytes
        frames: list[bytes] = []
        start = 0
        end_of_data = len(source)
        while end_of_data - start >= SIZE_BYTES:
            (size,) = _S_SIZE.unpack_from(source, start)
            if size < low or size > high:
                self.error = FrameSizeError(size, low, high)
                break
            end = start + SIZE_BYTES + size
            if end > end_of_data:
                break
            frames.append(bytes(source[start + SIZE_BYTES : end]))
            start = end
        return frames, start


# ---- client side ------------------------------------------------------------------------------------


def expects_response(request: Any) -> bool:
    """False for the one request Kafka never answers: a Produce with acks=0."""
    return not (request.API_KEY == ApiKey.PRODUCE and request.acks == 0)


class ClientConnection:
    """A client's side of one connection (see the module docstring)."""

    __slots__ = ("_cutter", "_next_id", "_pending", "client_id", "error", "last_correlation_id")

    def __init__(
        self,
        client_id: str | None,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        first_correlation_id: int = 1,
    ) -> None:
        if not 0 <= first_correlation_id < CORRELATION_ID_MAX:
            raise ValueError(f"correlation id {first_correlation_id} is out of range")
        self.client_id = client_id
        self.error: KafkaProtocolError | None = None
        self.last_correlation_id = -1  # of the latest send_request
        self._next_id = first_correlation_id
        self._pending: deque[OutstandingRequest] = deque()
        self._cutter = FrameCutter(RESPONSE_HEADER_MIN_BYTES, max_frame_bytes)

    @property
    def outstanding(self) -> list[OutstandingRequest]:
        """Requests sent and not yet answered, oldest first."""
        return list(self._pending)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def send_request(self, request: Any, version: int, *, token: Any = None) -> bytes:
        """The bytes to write for ``request`` (a generated request message) at ``version``; the request
        is then outstanding until its answer arrives, unless Kafka does not answer it (acks=0)."""
        if self.error is not None:
            raise KafkaProtocolError(f"the connection is broken: {self.error}")
        correlation_id = self._next_id
        self._next_id = correlation_id + 1 if correlation_id + 1 < CORRELATION_ID_MAX else 1
        api_key = request.API_KEY
        frame = encode_request(RequestHeader(api_key, version, correlation_id, self.client_id), request)
        if expects_response(request):
            self._pending.append(OutstandingRequest(correlation_id, api_key, version, token))
        self.last_correlation_id = correlation_id
        return _S_SIZE.pack(len(frame)) + frame

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[ResponseReceived | ProtocolError]:
        """The events completed by ``data`` (the next bytes read from the peer)."""
        if self.error is not None:
            return []
        cutter = self._cutter
        events: list[ResponseReceived | ProtocolError] = []
        for frame in cutter.feed(data):
            event = self._answer(frame)
            events.append(event)
            if isinstance(event, ProtocolError):
                return events
        if cutter.error is not None:
            return [*events, self._break(cutter.error)]
        head = cutter.peek(_S_CORRELATION_ID.size)
        if head is not None:  # a frame still arriving: its correlation id is known already
            (got,) = _S_CORRELATION_ID.unpack(head)
            expected = self._pending[0].correlation_id if self._pending else None
            if got != expected:
                events.append(self._break(CorrelationMismatch(got, expected)))
        return events

    def _answer(self, frame: bytes) -> ResponseReceived | ProtocolError:
        (got,) = _S_CORRELATION_ID.unpack_from(frame, 0)
        if not self._pending:
            return self._break(CorrelationMismatch(got, None))
        request = self._pending[0]
        if got != request.correlation_id:
            return self._break(CorrelationMismatch(got, request.correlation_id))
        try:
            _, body = parse_response(request.api_key, request.api_version, frame)
        except KafkaDecodeError as exc:  # left outstanding: the caller fails it with the rest
            return self._break(ResponseDecodeError(str(exc)))
        self._pending.popleft()
        return ResponseReceived(got, request.api_key, request.api_version, body, request.token)

    def _break(self, error: KafkaProtocolError) -> ProtocolError:
        self.error = error
        return ProtocolError(error)


# ---- server side ------------------------------------------------------------------------------------

A = TypeVar("A")


class _Pending:
    """The place of an answer not yet complete."""

    __slots__ = ()


_PENDING = _Pending()


class ServerConnection(Generic[A]):
    """A broker's side of one connection (see the module docstring). ``A`` is the caller's answer type
    (never None)."""

    __slots__ = ("_cutter", "_first_slot", "_slots", "error")

    def __init__(
        self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, min_frame_bytes: int = REQUEST_HEADER_MIN_BYTES
    ) -> None:
        if min_frame_bytes < REQUEST_HEADER_MIN_BYTES:
            raise ValueError(f"a request frame holds at least {REQUEST_HEADER_MIN_BYTES} bytes")
        self.error: KafkaProtocolError | None = None
        self._cutter = FrameCutter(min_frame_bytes, max_frame_bytes)
        self._slots: deque[A | _Pending] = deque()  # answers in request order, oldest first
        self._first_slot = 0  # the number of the oldest slot in _slots

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[RequestReceived | ProtocolError]:
        """The events completed by ``data`` (the next bytes read from the peer)."""
        if self.error is not None:
            return []
        events: list[RequestReceived | ProtocolError] = [RequestReceived(f) for f in self._cutter.feed(data)]
        if self._cutter.error is not None:
            self.error = self._cutter.error
            events.append(ProtocolError(self.error))
        return events

    @property
    def in_flight(self) -> int:
        """Slots opened and not yet released by ``next_answer``."""
        return len(self._slots)

    def open_slot(self) -> int:
        """Reserve the next place in the answer order; complete it with ``complete``."""
        self._slots.append(_PENDING)
        return self._first_slot + len(self._slots) - 1

    def complete(self, slot: int, answer: A) -> None:
        index = slot - self._first_slot
        if not 0 <= index < len(self._slots) or self._slots[index] is not _PENDING:
            raise ValueError(f"slot {slot} is not open")
        self._slots[index] = answer

    def add_answer(self, answer: A) -> None:
        """``complete(open_slot(), answer)``: an answer ready at once."""
        self._slots.append(answer)

    def next_answer(self) -> A | None:
        """Release the oldest answer if it is complete (every earlier one is out already); else None."""
        slots = self._slots
        if not slots or slots[0] is _PENDING:
            return None
        self._first_slot += 1
        return slots.popleft()  # type: ignore[return-value]  # not _PENDING: checked above

    def close(self) -> list[A]:
        """Forget every slot; the answers completed but never released (to free what they hold)."""
        dropped = [answer for answer in self._slots if not isinstance(answer, _Pending)]
        self._first_slot += len(self._slots)
        self._slots.clear()
        return dropped
