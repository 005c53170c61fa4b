"""A broker's client connection to another broker's Kafka listener (the replica fetcher's).

``KafkaConnection.open(host, port)`` connects; ``await conn.request(body, version, timeout_s)`` sends
one request and returns the decoded response body. The framing, the correlation ids and the matching
of answers to requests are the sans-I/O core's (``proto.kafka.connection.ClientConnection``); this
module is its asyncio driver: it writes what the core encodes, feeds it what the socket reads, and
resolves each request's future (the core's token) from the core's events. Requests may overlap; as
Kafka guarantees per connection, answers come back in request order, and an answer out of step (the
core's ``ProtocolError``) fails the connection: every waiting request gets ``KafkaConnectionError``
instead of one request's answer going to another. A request that times out, is cancelled, or whose
answer does not decode closes the connection too — its answer could still arrive and would then be
taken for the next request's. The owner opens a new connection.

Not thread-safe: one event loop. ``records`` of a decoded answer are memoryviews of the frame, which
the connection never reuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from proto.kafka.connection import (
    DEFAULT_MAX_FRAME_BYTES,
    ClientConnection,
    KafkaProtocolError,
    ProtocolError,
)
from proto.runtime import latency_trace

RESPONSE_MAX_BYTES_DEFAULT = DEFAULT_MAX_FRAME_BYTES  # librdkafka's receive.message.max.bytes
READ_BYTES = 256 * 1024  # at most this much per read of the socket


class KafkaConnectionError(ConnectionError):
    """The connection failed or was closed; the request's answer will never come."""


class KafkaConnection:
    """One TCP connection to a Kafka listener (see the module docstring)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client_id: str,
        response_max_bytes: int = RESPONSE_MAX_BYTES_DEFAULT,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.client_id = client_id
        self.response_max_bytes = response_max_bytes
        # Each outstanding request's token is (future, deadline on the loop's clock).
        self._core = ClientConnection(client_id, max_frame_bytes=response_max_bytes)
        self._error: BaseException | None = None
        # One timer for all requests, armed at the earliest deadline and re-armed when it fires early:
        # a timer per request (asyncio.timeout) cost the replica fetcher ~3-5 us of CPU per round trip.
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._reader_task = asyncio.create_task(self._read_loop(), name=f"kafka-client-{client_id}")

    @classmethod
    async def open(cls, host: str, port: int, client_id: str, timeout_s: float) -> KafkaConnection:
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(host, port)
        except TimeoutError:
            raise KafkaConnectionError(f"connecting to {host}:{port} timed out after {timeout_s} s") from None
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from None
        return cls(reader, writer, client_id)

    @property
    def closed(self) -> bool:
        return self._error is not None

    async def request(self, body: Any, version: int, timeout_s: float) -> Any:
        """Send ``body`` (a generated request) at ``version``; its decoded answer, or an error."""
        if self._error is not None:
            raise KafkaConnectionError(f"connection closed: {self._error}")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        deadline = loop.time() + timeout_s
        data = self._core.send_request(body, version, token=(future, deadline))
        if self._timer is None or deadline < self._timer_at:
            self._arm(loop, deadline)
        try:
            self._writer.write(data)
            if latency_trace.ENABLED:
                latency_trace.event("request_sent", f"{body.API_KEY} {self.client_id}")
            if self._writer.transport.get_write_buffer_size():  # drain may wait for the peer: bounded too
                async with asyncio.timeout_at(deadline):
                    await self._writer.drain()
            else:
                await self._writer.drain()
            return await future
        except BaseException as exc:  # timed out, cancelled, or the connection failed
            self._fail(exc if isinstance(exc, KafkaConnectionError) else KafkaConnectionError(repr(exc)))
            if isinstance(exc, OSError) and not isinstance(exc, (KafkaConnectionError, TimeoutError)):
                raise KafkaConnectionError(str(exc)) from exc
            raise

    async def _read_loop(self) -> None:
        core = self._core
        try:
            while True:
                data = await self._reader.read(READ_BYTES)
                if not data:
                    raise KafkaConnectionError("the broker closed the connection")
                arrived_ns = time.monotonic_ns() if latency_trace.ENABLED else 0
                for event in core.receive_data(data):
                    if isinstance(event, ProtocolError):
                        raise KafkaConnectionError(str(event.error))
                    if latency_trace.ENABLED:
                        latency_trace.event("response_in", f"{event.api_key} {self.client_id}", arrived_ns)
                    future = event.token[0]
                    if not future.done():
                        future.set_result(event.body)
        except asyncio.CancelledError:
            self._fail(KafkaConnectionError("connection closed"))
            raise
        except (OSError, KafkaConnectionError, KafkaProtocolError) as exc:
            self._fail(exc if isinstance(exc, KafkaConnectionError) else KafkaConnectionError(str(exc)))

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(deadline, self._expire)
        self._timer_at = deadline

    def _expire(self) -> None:
        """The timer: a request past its deadline gets TimeoutError and the connection fails (its answer
        could still come and be taken for the next request's); otherwise re-armed at the earliest."""
        self._timer = None
        outstanding = self._core.outstanding
        if not outstanding or self._error is not None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        earliest = min(request.token[1] for request in outstanding)
        if earliest > now:
            self._arm(loop, earliest)
            return
        for request in outstanding:
            future, deadline = request.token
            if deadline <= now and not future.done():
                future.set_exception(TimeoutError())
                future.exception()  # retrieved here: its request may be waiting in drain, not on it
        self._fail(KafkaConnectionError(repr(TimeoutError())))

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for request in self._core.outstanding:
            future = request.token[0]
            if not future.done():
                future.set_exception(KafkaConnectionError(str(self._error)))
                future.exception()  # retrieved: a request that gave up waiting must not warn
        self._writer.close()
        if not self._reader_task.done() and asyncio.current_task() is not self._reader_task:
            self._reader_task.cancel()

    async def close(self) -> None:
        self._fail(KafkaConnectionError("closed by its owner"))
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader_task
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()
