"""A broker's client connection to another broker's Kafka listener (the replica fetcher's).

``KafkaConnection.open(host, port)`` connects; ``await conn.request(body, version, timeout_s)`` sends
one request (header and body by ``proto.kafka.api.encode_request``, Kafka's int32 size prefix) and
returns the decoded response body (``parse_response``). Requests may overlap; answers are matched by
correlation id and, as Kafka guarantees per connection, must come back in request order: an answer with
any other correlation id means the stream is out of step, and the connection fails (every waiting
request gets ``KafkaConnectionError``) instead of handing one request's answer to another. A request
that times out, is cancelled, or whose answer does not decode closes the connection too — its answer
could still arrive and would then be taken for the next request's. The owner opens a new connection.

Not thread-safe: one event loop. ``records`` of a decoded answer are memoryviews of the frame, which
the connection never reuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
from collections import deque
from typing import Any

from proto.kafka.api import RequestHeader, encode_request, parse_response
from proto.kafka.codec import KafkaDecodeError
from proto.runtime import latency_trace

_S_SIZE = struct.Struct(">i")
RESPONSE_MAX_BYTES_DEFAULT = 100 * 1024 * 1024  # librdkafka's receive.message.max.bytes
CORRELATION_ID_MAX = (1 << 31) - 1


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
        self._correlation_ids = itertools.count(1)
        # (correlation id, api key, api version, future, deadline on the loop's clock) in request order
        self._pending: deque[tuple[int, int, int, asyncio.Future[Any], float]] = deque()
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
        correlation_id = next(self._correlation_ids)
        if correlation_id >= CORRELATION_ID_MAX:
            self._correlation_ids = itertools.count(1)
        header = RequestHeader(body.API_KEY, version, correlation_id, self.client_id)
        frame = encode_request(header, body)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        deadline = loop.time() + timeout_s
        self._pending.append((correlation_id, body.API_KEY, version, future, deadline))
        if self._timer is None or deadline < self._timer_at:
            self._arm(loop, deadline)
        try:
            self._writer.write(_S_SIZE.pack(len(frame)) + frame)
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
        try:
            while True:
                size_bytes = await self._reader.readexactly(_S_SIZE.size)
                (size,) = _S_SIZE.unpack(size_bytes)
                if not 0 < size <= self.response_max_bytes:
                    raise KafkaConnectionError(f"response of {size} bytes (limit {self.response_max_bytes})")
                frame = await self._reader.readexactly(size)
                self._dispatch(frame)
        except asyncio.CancelledError:
            self._fail(KafkaConnectionError("connection closed"))
            raise
        except (OSError, asyncio.IncompleteReadError, KafkaConnectionError, KafkaDecodeError) as exc:
            self._fail(exc if isinstance(exc, KafkaConnectionError) else KafkaConnectionError(str(exc)))

    def _dispatch(self, frame: bytes) -> None:
        if not self._pending:
            raise KafkaConnectionError("an answer arrived with no request outstanding")
        correlation_id, api_key, version, future, _ = self._pending[0]
        if latency_trace.ENABLED:
            latency_trace.event("response_in", f"{api_key} {self.client_id}")
        got, body = parse_response(api_key, version, frame)  # left pending: _fail fails it on an error
        if got != correlation_id:
            raise KafkaConnectionError(f"answer with correlation id {got}, expected {correlation_id}")
        self._pending.popleft()
        if not future.done():
            future.set_result(body)

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(deadline, self._expire)
        self._timer_at = deadline

    def _expire(self) -> None:
        """The timer: a request past its deadline gets TimeoutError and the connection fails (its answer
        could still come and be taken for the next request's); otherwise re-armed at the earliest."""
        self._timer = None
        if not self._pending or self._error is not None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        earliest = min(entry[4] for entry in self._pending)
        if earliest > now:
            self._arm(loop, earliest)
            return
        for entry in self._pending:
            if entry[4] <= now and not entry[3].done():
                entry[3].set_exception(TimeoutError())
                entry[3].exception()  # retrieved here: its request may be waiting in drain, not on it
        self._fail(KafkaConnectionError(repr(TimeoutError())))

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._pending:
            future = self._pending.popleft()[3]
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
