"""The Kafka listener: an asyncio TCP server speaking Kafka's framing, one per broker.

Theory of operation
-------------------
A Kafka request or response on the wire is a *frame*: an int32 size (big-endian, signed) followed by
that many bytes. Each connection drives the sans-I/O core ``proto.kafka.connection.ServerConnection``,
which cuts the byte stream into request frames and keeps the order of the answers; the listener hands
each frame to a ``RequestProcessor`` (``broker.kafka.handlers.processor``: parse, dispatch to the API's
handler, encode) and writes the answers back — complete frames, size prefix included, so a large Fetch
answer is not copied once more to prepend it. It never looks inside a frame.

Ordering. Clients pipeline (librdkafka keeps up to 5 Produce requests in flight on one connection)
and match answers to requests by order, not only by correlation id (kafka-python raises
CorrelationIdError, aiokafka drops the connection otherwise). Each connection's core therefore keeps
a FIFO of *slots*, one per request that expects an answer, in arrival order. The processor is called
synchronously, in arrival order, as each frame completes: a handler does its synchronous part then
(a Produce appends to the log right there, so pipelined batches reach the log in the order sent)
and returns either the encoded answer or an awaitable of it (an acks=all Produce waiting for the HW,
a long-polling Fetch). Later requests on the same connection are processed meanwhile; the writer
only ever sends what the core releases (the head of the FIFO, once complete), so answers leave
strictly in request order. A waiting request
parks a future, not the event loop: other connections go on.

Limits (Kafka's broker settings, ``ListenerSettings``):
- ``socket.request.max.bytes``: a frame that announces more (or a negative size, or fewer bytes
  than a request header's 8) closes the connection with a log line, before any of its body is
  buffered beyond what already arrived (the core's ``FrameSizeError``);
- ``max.connections``: a connection beyond it is closed as soon as it is accepted, with a log line
  (Kafka blocks the acceptor instead; closing keeps the event loop free and tells the client);
- ``connections.max.idle.ms``: a connection with nothing received or sent for that long, and no
  request in flight, is closed (this also ends a client that sent half a frame and stalled);
- at most ``MAX_IN_FLIGHT`` unanswered requests per connection: past it the listener stops reading
  that socket until answers drain (and likewise while the peer does not read its answers).

Zero-copy fetch. An answer may come as ``FrameParts`` (``proto.kafka.codec``): the response bytes
with file regions (``storage.file_slice.FileSlice``, the records of a Fetch answer) between them.
The writer sends the bytes with ``transport.write`` and each region with ``os.sendfile`` from the
segment file straight to the socket (Kafka's ``FileRecords.writeTo``), once the transport's buffer
is empty so that the bytes stay in order. asyncio's ``loop.sendfile`` is not used: uvloop does not
implement it, and on the selector loop it unregisters the transport and pauses reading for every
call. A region that does not go out at once waits for the socket to become writable through a
duplicate of the socket's descriptor (the loop refuses ``add_writer`` on a transport's own one), and
the FIFO waits behind it. Where sendfile cannot serve (no plain socket under the transport, e.g. TLS,
or ``ListenerSettings.sendfile`` off) the regions are read into memory and written. So are regions
smaller than ``ListenerSettings.sendfile_min_bytes`` in all (a follower's or a tailing consumer's
answer of a few records): the header and the records then leave in one write — one TCP segment, one
wake-up of the reader — where sendfile costs a second system call and a second segment, and saves
copying a few hundred bytes (bench/RESULTS.md, "One-record acks=all latency"). A client that
closes mid-send ends only its connection; a region whose file turned out shorter than announced (a
truncation under it) closes the connection, as the frame's size prefix cannot be honoured.
``sendfile_bytes`` / ``copied_region_bytes`` count which way the regions went.

A processor's verdict ``CLOSE`` (an unknown API key, a request that cannot be parsed far enough to
answer, an acks=0 produce that failed: Kafka's ways of telling a client "you sent something I cannot
answer") closes the connection at once; ``NO_RESPONSE`` (acks=0) takes no slot.

Threading: everything runs on the broker's event loop; ``open_connections`` is read by the metrics
thread (an int: reading it is atomic).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from proto.kafka.codec import FrameParts
from proto.kafka.connection import REQUEST_HEADER_MIN_BYTES, RequestReceived, ServerConnection
from proto.runtime.logfmt import log_event

log = logging.getLogger(__name__)

# api_key int16 + api_version int16 + correlation_id int32: a frame shorter than this has no header.
MIN_REQUEST_BYTES = REQUEST_HEADER_MIN_BYTES
MAX_IN_FLIGHT = 64
IDLE_CHECK_MIN_S = 0.05
IDLE_CHECK_MAX_S = 5.0
REJECT_LOG_INTERVAL_S = 1.0

# Kafka's defaults.
DEFAULT_SOCKET_REQUEST_MAX_BYTES = 104_857_600
DEFAULT_MAX_CONNECTIONS = 2**31 - 1
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000
# Below this many record bytes in one answer, copying them beats a sendfile call (see the docstring).
DEFAULT_SENDFILE_MIN_BYTES = 16 * 1024


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


Answer = bytes | bytearray | FrameParts
Outcome = Answer | Awaitable[Answer] | Close | _Verdict


class RequestProcessor(Protocol):
    def process(self, frame: bytes, client: str) -> Outcome:
        """Handle one frame (without its size prefix) from ``client`` (``host:port``); an answer is a
        whole frame, size prefix included (bytes, or ``FrameParts`` with file regions)."""
        ...


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    socket_request_max_bytes: int = DEFAULT_SOCKET_REQUEST_MAX_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    sendfile: bool = True  # off: file regions of an answer are read into memory and written
    sendfile_min_bytes: int = DEFAULT_SENDFILE_MIN_BYTES  # smaller answers' regions are copied


class ListenerMetrics(Protocol):
    """Per-API counts and bytes are the processor's (it knows the API); the listener counts closes."""

    def observe_close(self, event: str) -> None: ...


class KafkaConnection(asyncio.Protocol):
    """One client connection (see the module docstring)."""

    def __init__(self, listener: KafkaListener) -> None:
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.client = "?"
        self._core: ServerConnection[Answer] = ServerConnection(
            listener.settings.socket_request_max_bytes, MIN_REQUEST_BYTES
        )
        self._waiting: dict[asyncio.Future[Answer], int] = {}  # an answer not ready yet -> its slot
        self._sending: _RegionSender | None = None  # a frame part way out; the FIFO waits behind it
        self._socket_fd: int | None = None  # set when regions may go out with os.sendfile
        self._closed = False
        self._reading_paused = False
        self._writing_paused = False
        self.last_active_s = time.monotonic()

    # ---- asyncio callbacks ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass
        peer = self.transport.get_extra_info("peername")
        self.client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._socket_fd = _sendfile_socket_fd(self.transport) if self.listener.settings.sendfile else None
        if not self.listener.admit(self):
            self._closed = True
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._sending is not None:
            self._sending.stop()
            self._sending = None
        for future in self._waiting:
            future.remove_done_callback(self._on_answer)
        self._waiting.clear()
        for answer in self._core.close():
            if isinstance(answer, FrameParts):
                answer.close()
        self.listener.forget(self)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self.last_active_s = time.monotonic()
        for event in self._core.receive_data(data):
            if self._closed:  # a request before this one closed the connection
                return
            if isinstance(event, RequestReceived):
                self._handle(event.frame)
            else:  # the core's FrameSizeError: the last event
                self.close("frame_rejected", reason=f"{event.error} (socket.request.max.bytes)")

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
        except Exception as exc:  # a handler bug (the processor logged it at ERROR): this connection ends
            self.close("request_failed", reason=f"{type(exc).__name__}: {exc}")
            return
        if isinstance(outcome, _Verdict):  # NO_RESPONSE, the one verdict
            return
        if isinstance(outcome, Close):
            self.close("connection_closed_by_broker", reason=outcome.reason)
            return
        if isinstance(outcome, (bytes, bytearray, FrameParts)):
            self._core.add_answer(outcome)
        else:
            future = asyncio.ensure_future(outcome)
            self._waiting[future] = self._core.open_slot()
            future.add_done_callback(self._on_answer)
        self._write_ready()
        self._update_reading()

    def _on_answer(self, future: asyncio.Future[Answer]) -> None:
        slot = self._waiting.pop(future)
        if self._closed:
            answer = None if future.cancelled() or future.exception() else future.result()
            if isinstance(answer, FrameParts):
                answer.close()
            return
        if future.cancelled() or future.exception() is not None:
            exc = None if future.cancelled() else future.exception()  # the processor logged it at ERROR
            self.close("request_failed", reason=repr(exc) if exc else "cancelled")
            return
        self._core.complete(slot, future.result())
        self._write_ready()
        self._update_reading()

    def _write_ready(self) -> None:
        """Send every answer the core releases (in request order); stop at the first not ready (or
        behind a frame whose file regions are still going out)."""
        next_answer = self._core.next_answer
        transport = self.transport
        assert transport is not None
        while self._sending is None and not self._closed:
            head = next_answer()
            if head is None:
                return
            self.last_active_s = time.monotonic()
            if isinstance(head, FrameParts):
                self._send_parts(head)
            else:
                transport.write(head)

    def _send_parts(self, frame: FrameParts) -> None:
        assert self.transport is not None
        if self._socket_fd is None or frame.region_bytes < self.listener.settings.sendfile_min_bytes:
            try:
                data = frame.to_bytes()
            except Exception as exc:  # a region shorter than announced: the frame cannot be honoured
                self.close("response_failed", reason=f"{type(exc).__name__}: {exc}")
                return
            finally:
                frame.close()
            self.listener.copied_region_bytes += frame.region_bytes
            self.transport.write(data)
            return
        sender = _RegionSender(self, frame, self._socket_fd)
        if not sender.step():
            self._sending = sender

    def _sent(self) -> None:
        """The frame of ``_sending`` is out: go on with the FIFO."""
        self._sending = None
        self.last_active_s = time.monotonic()
        self._write_ready()
        self._update_reading()

    def _update_reading(self) -> None:
        if self._closed or self.transport is None:
            return
        want_pause = self._writing_paused or self._core.in_flight >= MAX_IN_FLIGHT
        if want_pause and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True
        elif not want_pause and self._reading_paused:
            self.transport.resume_reading()
            self._reading_paused = False

    # ---- closing ------------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        return not self._core.in_flight and self._sending is None

    def close(self, event: str, level: int = logging.WARNING, **fields: Any) -> None:
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
        self.sendfile_bytes = 0  # records bytes sent with os.sendfile
        self.copied_region_bytes = 0  # records bytes of file regions read into memory instead
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
        log_event(log, logging.INFO, "listener_started", listener=self.name, host=self.host, port=self.port,
                  sendfile=self.settings.sendfile, event_loop=type(loop).__module__)  # fmt: skip

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


def _sendfile_socket_fd(transport: asyncio.Transport) -> int | None:
    """The descriptor of the plain TCP (or Unix) socket under ``transport``, or None where sendfile
    cannot serve (TLS, pipes, no socket)."""
    if transport.get_extra_info("sslcontext") is not None or transport.get_extra_info("ssl_object"):
        return None
    sock = transport.get_extra_info("socket")
    if sock is None or sock.type != socket.SOCK_STREAM:
        return None
    fd = sock.fileno()
    return fd if fd >= 0 else None


class _RegionSender:
    """Sends one ``FrameParts`` frame: bytes through the transport, file regions with ``os.sendfile``
    once the transport's buffer is empty. ``step()`` goes as far as the socket takes without blocking
    and returns True when the frame is out; otherwise it waits for writability on a duplicate of the
    socket's descriptor and calls the connection's ``_sent()`` when done."""

    __slots__ = ("connection", "done", "frame", "index", "loop", "socket_fd", "wait_fd")

    def __init__(self, connection: KafkaConnection, frame: FrameParts, socket_fd: int) -> None:
        self.connection = connection
        self.frame = frame
        self.index = 0  # the part being sent
        self.done = 0  # bytes of that part already sent (regions only)
        self.socket_fd = socket_fd
        self.wait_fd = -1
        self.loop = asyncio.get_running_loop()

    def step(self) -> bool:
        connection = self.connection
        transport = connection.transport
        assert transport is not None
        parts = self.frame.parts
        listener = connection.listener
        try:
            while self.index < len(parts):
                part = parts[self.index]
                if isinstance(part, memoryview):
                    transport.write(part)
                    self.index += 1
                    continue
                if transport.get_write_buffer_size():
                    return self._wait()  # the bytes before the region go first
                while self.done < part.size:
                    sent = os.sendfile(self.socket_fd, part.fileno(), part.position + self.done,
                                       part.size - self.done)  # fmt: skip
                    if sent == 0:
                        self._finish()
                        connection.close("response_failed", reason=f"{part!r}: the file ends after "
                                         f"{self.done} of its bytes (truncated while in flight)")  # fmt: skip
                        return True
                    self.done += sent
                    listener.sendfile_bytes += sent
                part.close()
                self.index += 1
                self.done = 0
        except BlockingIOError:
            return self._wait()
        except OSError as exc:  # the client closed mid-send (EPIPE, ECONNRESET): its connection ends
            self._finish()
            connection.close("connection_lost_mid_send", logging.INFO, reason=f"{type(exc).__name__}: {exc}")
            return True
        self._finish()
        return True

    def _wait(self) -> bool:
        if self.wait_fd < 0:
            self.wait_fd = os.dup(self.socket_fd)
            self.loop.add_writer(self.wait_fd, self._writable)
        return False

    def _writable(self) -> None:
        if self.connection._closed:
            self.stop()
            return
        self.connection.last_active_s = time.monotonic()
        if self.step() and not self.connection._closed:
            self.connection._sent()

    def _finish(self) -> None:
        if self.wait_fd >= 0:
            self.loop.remove_writer(self.wait_fd)
            os.close(self.wait_fd)
            self.wait_fd = -1
        self.frame.close()

    def stop(self) -> None:
        """The connection ended: release the descriptors."""
        self._finish()
