"""The Kafka listener: an asyncio TCP server speaking Kafka's framing, one per broker.

Theory of operation
-------------------
A Kafka request or response on the wire is a *frame*: an int32 size (big-endian, signed) followed by
that many bytes. The listener only cuts the byte stream into frames, hands each frame to a
``RequestProcessor`` (``broker.handlers.processor``: parse, dispatch to the API's handler, encode)
and writes the answers back — complete frames, size prefix included, so a large Fetch answer is not
copied once more to prepend it. It never looks inside a frame beyond its size.

Ordering. Clients pipeline (librdkafka keeps up to 5 Produce requests in flight on one connection)
and match answers to requests by order, not only by correlation id (kafka-python raises
CorrelationIdError, aiokafka drops the connection otherwise). Each connection therefore keeps a FIFO
of *slots*, one per request that expects an answer, in arrival order. The processor is called
synchronously, in arrival order, as each frame completes: a handler does its synchronous part then
(a Produce appends to the log right there, so pipelined batches reach the log in the order sent)
and returns either the encoded answer or an awaitable of it (an acks=all Produce waiting for the HW,
a long-polling Fetch). Later requests on the same connection are processed meanwhile; the writer
only ever sends the head of the FIFO, so answers leave strictly in request order. A waiting request
parks a future, not the event loop: other connections go on.

Limits (Kafka's broker settings, ``ListenerSettings``):
- ``socket.request.max.bytes``: a frame that announces more (or a negative size) closes the
  connection with a log line, before any of its body is buffered beyond what already arrived;
- ``max.connections``: a connection beyond it is closed as soon as it is accepted, with a log line
  (Kafka blocks the acceptor instead; closing keeps the event loop free and tells the client);
- ``connections.max.idle.ms``: a connection with nothing received or sent for that long, and no
  request in flight, is closed (this also ends a client that sent half a frame and stalled);
- at most ``MAX_IN_FLIGHT`` unanswered requests per connection: past it the listener stops reading
  that socket until answers drain (and likewise while the peer does not read its answers).

A processor's verdict ``CLOSE`` (an unknown API key, a request that cannot be parsed far enough to
answer, an acks=0 produce that failed: Kafka's ways of telling a client "you sent something I cannot
answer") closes the connection at once; ``NO_RESPONSE`` (acks=0) takes no slot.

Threading: everything runs on the broker's event loop; ``open_connections`` is read by the metrics
thread (an int: reading it is atomic).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol, cast

from proto.logfmt import log_event

log = logging.getLogger(__name__)

SIZE_BYTES = 4
# api_key int16 + api_version int16 + correlation_id int32: a frame shorter than this has no header.
MIN_REQUEST_BYTES = 8
MAX_IN_FLIGHT = 64
IDLE_CHECK_MIN_S = 0.05
IDLE_CHECK_MAX_S = 5.0
REJECT_LOG_INTERVAL_S = 1.0

# Kafka's defaults.
DEFAULT_SOCKET_REQUEST_MAX_BYTES = 104_857_600
DEFAULT_MAX_CONNECTIONS = 2**31 - 1
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000


class _Verdict:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NO_RESPONSE = _Verdict("NO_RESPONSE")  # acks=0 Produce: nothing goes back


@dataclass(frozen=True, slots=True)
class Close:
    """Close the connection now; ``reason`` is logged (never sent: Kafka has no frame for it)."""

    reason: str


Outcome = bytes | bytearray | Awaitable[bytes | bytearray] | Close | _Verdict


class RequestProcessor(Protocol):
    def process(self, frame: bytes, client: str) -> Outcome:
        """Handle one frame (without its size prefix) from ``client`` (``host:port``); an answer is a
        whole frame, size prefix included."""
        ...


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    socket_request_max_bytes: int = DEFAULT_SOCKET_REQUEST_MAX_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS


class ListenerMetrics(Protocol):
    """Per-API counts and bytes are the processor's (it knows the API); the listener counts closes."""

    def observe_close(self, event: str) -> None: ...


class KafkaConnection(asyncio.Protocol):
    """One client connection (see the module docstring)."""

    def __init__(self, listener: KafkaListener) -> None:
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.client = "?"
        self._buffer = bytearray()
        self._slots: deque[asyncio.Future[bytes | bytearray] | bytes | bytearray] = deque()
        self._closed = False
        self._reading_paused = False
        self._writing_paused = False
        self.last_active_s = time.monotonic()

    # ---- asyncio callbacks ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass
        peer = self.transport.get_extra_info("peername")
        self.client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if not self.listener.admit(self):
            self._closed = True
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        for slot in self._slots:
            if isinstance(slot, asyncio.Future):
                slot.remove_done_callback(self._on_answer)
        self._slots.clear()
        self._buffer.clear()
        self.listener.forget(self)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self.last_active_s = time.monotonic()
        buffer = self._buffer
        buffer += data
        limit = self.listener.settings.socket_request_max_bytes
        start = 0
        while len(buffer) - start >= SIZE_BYTES and not self._closed:
            size = int.from_bytes(buffer[start : start + SIZE_BYTES], "big", signed=True)
            if size < MIN_REQUEST_BYTES or size > limit:
                self.close(
                    "frame_rejected",
                    reason=f"frame announces {size} bytes; allowed {MIN_REQUEST_BYTES}..{limit} "
                    "(socket.request.max.bytes)",
                )
                return
            end = start + SIZE_BYTES + size
            if len(buffer) < end:
                break
            frame = bytes(buffer[start + SIZE_BYTES : end])
            start = end
            self._handle(frame)
        if start and not self._closed:
            del buffer[:start]

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    # ---- requests -----------------------------------------------------------------------------------

    def _handle(self, frame: bytes) -> None:
        try:
            outcome = self.listener.processor.process(frame, self.client)
        except Exception as exc:  # a handler bug: this connection ends, the broker goes on
            log.error("request from %s failed; closing the connection", self.client, exc_info=exc)
            self.close("request_failed", reason=f"{type(exc).__name__}: {exc}")
            return
        if outcome is NO_RESPONSE:
            return
        if isinstance(outcome, Close):
            self.close("connection_closed_by_broker", reason=outcome.reason)
            return
        if isinstance(outcome, (bytes, bytearray)):
            self._slots.append(outcome)
        else:
            future = asyncio.ensure_future(outcome)
            future.add_done_callback(self._on_answer)
            self._slots.append(future)
        self._write_ready()
        self._update_reading()

    def _on_answer(self, future: asyncio.Future[bytes | bytearray]) -> None:
        if self._closed:
            return
        if future.cancelled() or future.exception() is not None:
            exc = None if future.cancelled() else future.exception()
            log.error("request from %s failed; closing the connection", self.client, exc_info=exc)
            self.close("request_failed", reason=repr(exc) if exc else "cancelled")
            return
        self._write_ready()
        self._update_reading()

    def _write_ready(self) -> None:
        """Send every answer at the head of the FIFO that is ready; stop at the first that is not."""
        slots = self._slots
        transport = self.transport
        assert transport is not None
        while slots:
            head = slots[0]
            if isinstance(head, asyncio.Future):
                if not head.done():
                    return
                head = head.result()
            slots.popleft()
            transport.write(head)
            self.last_active_s = time.monotonic()

    def _update_reading(self) -> None:
        if self._closed or self.transport is None:
            return
        want_pause = self._writing_paused or len(self._slots) >= MAX_IN_FLIGHT
        if want_pause and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True
        elif not want_pause and self._reading_paused:
            self.transport.resume_reading()
            self._reading_paused = False

    # ---- closing ------------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        return not self._slots

    def close(self, event: str, level: int = logging.WARNING, **fields: object) -> None:
        if self._closed:
            return
        self._closed = True
        log_event(log, level, event, client=self.client, **fields)
        self.listener.metrics.observe_close(event)
        if self.transport is not None:
            self.transport.abort()  # pending answers are dropped with the connection


class KafkaListener:
    """The listening socket and its connections. ``await start()``, then ``port`` is the bound port."""

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        processor: RequestProcessor,
        metrics: ListenerMetrics,
        settings: ListenerSettings = ListenerSettings(),
    ) -> None:
        self.name = name
        self.host = host
        self.requested_port = port
        self.processor = processor
        self.metrics = metrics
        self.settings = settings
        self.connections: set[KafkaConnection] = set()
        self.rejected = 0
        self._last_reject_log_s = 0.0
        self._server: asyncio.Server | None = None
        self._idle_task: asyncio.Task | None = None

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets, "the listener is not started"
        return self._server.sockets[0].getsockname()[1]

    @property
    def open_connections(self) -> int:
        return len(self.connections)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: KafkaConnection(self), self.host, self.requested_port, reuse_address=True
        )
        self._idle_task = asyncio.create_task(self._close_idle(), name=f"listener-{self.name}-idle")
        log_event(log, logging.INFO, "listener_started", listener=self.name, host=self.host, port=self.port)

    async def close(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()

    def admit(self, connection: KafkaConnection) -> bool:
        if len(self.connections) >= self.settings.max_connections:
            self.rejected += 1
            now = time.monotonic()
            if now - self._last_reject_log_s >= REJECT_LOG_INTERVAL_S:
                self._last_reject_log_s = now
                log_event(log, logging.WARNING, "connection_rejected", client=connection.client,
                          reason=f"max.connections={self.settings.max_connections} reached",
                          rejected_total=self.rejected)  # fmt: skip
            self.metrics.observe_close("connection_rejected")
            return False
        self.connections.add(connection)
        return True

    def forget(self, connection: KafkaConnection) -> None:
        self.connections.discard(connection)

    async def _close_idle(self) -> None:
        idle_s = self.settings.connections_max_idle_ms / 1000
        interval_s = min(max(idle_s / 10, IDLE_CHECK_MIN_S), IDLE_CHECK_MAX_S)
        while True:
            await asyncio.sleep(interval_s)
            deadline = time.monotonic() - idle_s
            for connection in list(self.connections):
                if connection.idle and connection.last_active_s < deadline:
                    connection.close(
                        "connection_idle", logging.INFO,
                        reason=f"nothing sent or received for connections.max.idle.ms={idle_s * 1000:.0f}",
                    )
