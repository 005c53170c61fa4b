"""The request processor of the Kafka listener: parse, dispatch by API key, encode, measure.

The listener (``broker.kafka.listener``) hands each complete frame to ``RequestProcessor.process``, which
parses it with the generated codec (``proto.kafka.api.parse_request``), calls the API's handler and
encodes the answer (``encode_response``). The generated layer stops here: a handler turns the decoded
request into calls on the replica manager (the broker's only data plane: there is no gRPC one), the
producer-id manager, ... and builds the response object from what they return; no wire struct goes
further in. ``records`` stay the bytes of the frame (a memoryview) on the way in and the log's bytes — or a
``FileSlice`` of the segment, which the listener sends with sendfile — on the way out.

A handler is ``handler(services, context, request)`` and returns the response object, a ``Later`` (a
future and how to finish it: an acks=all Produce, a long-polling Fetch) or an awaitable of it (the
listener keeps answering in request order),
``NO_RESPONSE`` (acks=0) or ``Close(reason)``. Its synchronous part runs when the frame arrives, in
arrival order per connection (a Produce appends right then, so pipelined batches keep their order).

Registering more APIs (groups, admin): write a module with ``HANDLERS = {ApiKey.X: handle_x, ...}``
and add it to ``HANDLER_MODULES`` below — that one line makes the processor dispatch to them and
ApiVersions advertise them (the codec's ``SUPPORTED_VERSIONS`` range of each registered key). What a
handler needs from the broker is a field of ``BrokerServices``.

Logs: an answer that carries an error code is a refused request, logged at WARN per client and error
with a rate limit (``broker.kafka.handlers.refusals``: the walk that finds the codes also feeds the per-API
error counter, so it runs once per answer); a handler that raises — at once or in its awaitable — is
logged at ERROR (``event=request_crashed``, with the traceback) and re-raised, and the listener closes
that connection.

Protocol errors (KIP-511 and Kafka's ``SocketServer``): an unknown API key closes the connection; an
ApiVersions request of a version we do not serve gets UNSUPPORTED_VERSION in a v0 body listing
ApiVersions' own range (the client retries with a version it finds there), socket open; any other
unsupported version, or a request that does not decode, closes the connection with a log line (the
codec has no encoder for a version outside the schema's range, and Kafka does the same).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable
from typing import Any

from broker.kafka.handlers import admin, api_versions, fetch, groups, metadata, offsets, produce, producer_id
from broker.kafka.handlers.context import BrokerServices, Handler, Later, RequestContext
from broker.kafka.handlers.refusals import response_errors
from broker.kafka.listener import NO_RESPONSE, Close, Outcome
from broker.metrics import KafkaRequestMetrics
from proto.errors import ErrorCode
from proto.kafka import messages
from proto.kafka.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    InvalidRequest,
    RequestHeader,
    UnknownApiKey,
    UnsupportedVersion,
    encode_response_frame,
    encode_response_parts,
    parse_request,
)
from proto.kafka.codec import FrameParts, KafkaDecodeError
from proto.runtime import latency_trace
from proto.runtime.logfmt import log_event

log = logging.getLogger(__name__)

# One entry per handler module (see the module docstring).
HANDLER_MODULES = (api_versions, metadata, produce, fetch, offsets, producer_id, groups, admin)

SIZE_PREFIX_BYTES = 4


def build_handlers(services: BrokerServices) -> dict[int, Handler]:
    """The dispatch table of every registered module; sets ``services.api_versions`` to what it serves
    (the codec's range for each key a handler exists for)."""
    table: dict[int, Handler] = {}
    for module in HANDLER_MODULES:
        for key, handler in module.HANDLERS.items():
            assert key not in table, f"API {ApiKey(key).name} has two handlers"
            assert key in SUPPORTED_VERSIONS, f"API {ApiKey(key).name} has a handler but no schema"
            table[int(key)] = handler
    services.api_versions = {key: SUPPORTED_VERSIONS[key] for key in sorted(table)}
    return table


def api_name(api_key: int) -> str:
    try:
        return "".join(word.capitalize() for word in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


_API_NAMES = {int(key): api_name(key) for key in ApiKey}


def _trace_detail(header: RequestHeader) -> str:
    return f"{_API_NAMES.get(header.api_key, header.api_key)} {header.client_id}"


class RequestProcessor:
    """Parse, dispatch, encode, measure: the ``broker.kafka.listener.RequestProcessor`` of one listener."""

    def __init__(
        self,
        services: BrokerServices,
        handlers: dict[int, Handler],
        metrics: KafkaRequestMetrics,
        listener: str,
    ) -> None:
        self.services = services
        self.handlers = handlers
        self.metrics = metrics
        self.listener = listener

    def process(self, frame: bytes, client: str) -> Outcome:
        start = time.perf_counter()
        arrived_ns = time.monotonic_ns() if latency_trace.ENABLED else 0
        try:
            header, request = parse_request(frame)
        except UnknownApiKey as exc:
            return Close(f"unknown API key {exc.api_key} (correlation id {exc.correlation_id})")
        except UnsupportedVersion as exc:
            return self._unsupported_version(exc.header)
        except InvalidRequest as exc:
            h = exc.header
            if h is None:
                return Close(f"request does not decode: {exc}")
            return Close(f"{api_name(h.api_key)} v{h.api_version} (correlation id {h.correlation_id}) "
                         f"does not decode: {exc}")  # fmt: skip
        except KafkaDecodeError as exc:
            return Close(f"request header does not decode: {exc}")
        if latency_trace.ENABLED:
            latency_trace.event("request_in", _trace_detail(header), arrived_ns)
        handler = self.handlers.get(header.api_key)
        if handler is None:  # not advertised, but a client may try it anyway
            return Close(f"{api_name(header.api_key)} is not served by this broker (see ApiVersions)")
        context = RequestContext(header, client, self.listener)
        try:
            result = handler(self.services, context, request)
            if result is NO_RESPONSE or isinstance(result, Close):
                self._observe(context, start, len(frame), 0, None)
                return result
            if isinstance(result, Later):
                return self._finish_when_done(context, result, start, len(frame))
            if inspect.isawaitable(result):
                return self._finish_later(context, result, start, len(frame))
            return self._encode(context, result, start, len(frame))
        except Exception as exc:  # a handler bug: the listener closes this connection, the broker goes on
            self._crashed(context, exc)
            raise

    async def _finish_later(self, context: RequestContext, pending: Awaitable[Any], start: float,
                            size: int) -> bytearray | FrameParts:  # fmt: skip
        try:
            return self._encode(context, await pending, start, size)
        except Exception as exc:
            self._crashed(context, exc)
            raise

    def _finish_when_done(self, context: RequestContext, later: Later, start: float,
                          size: int) -> asyncio.Future[bytearray | FrameParts]:  # fmt: skip
        """``_finish_later`` without a Task: a callback on the handler's future finishes, encodes and
        resolves the future the listener waits on (the same one loop step after the result)."""
        answer: asyncio.Future[bytearray | FrameParts] = later.future.get_loop().create_future()

        def done(future: asyncio.Future[Any]) -> None:
            if answer.done():
                return
            if future.cancelled():
                answer.cancel()
                return
            try:
                data = self._encode(context, later.finish(future.result()), start, size)
            except Exception as exc:
                self._crashed(context, exc)
                answer.set_exception(exc)
                return
            answer.set_result(data)

        later.future.add_done_callback(done)
        return answer

    def _encode(
        self, context: RequestContext, response: Any, start: float, size: int
    ) -> bytearray | FrameParts:
        """The answer frame; ``FrameParts`` when its records are file slices (sent with sendfile)."""
        data = encode_response_parts(context.header, response)
        if latency_trace.ENABLED:
            latency_trace.event("response_out", _trace_detail(context.header))
        sent = data.size if isinstance(data, FrameParts) else len(data)
        self._observe(context, start, size, sent, response)
        return data

    def _observe(self, context: RequestContext, start: float, size: int, sent: int, response: Any) -> None:
        api = _API_NAMES.get(context.header.api_key) or str(context.header.api_key)
        self.metrics.observe_request(api, time.perf_counter() - start, size + SIZE_PREFIX_BYTES, sent)
        if response is not None:
            errors = response_errors(response)
            if errors:
                self.metrics.observe_errors(api, [e.name for e in errors])
                self.services.refusals.observe(context, api, errors)

    @staticmethod
    def _crashed(context: RequestContext, exc: Exception) -> None:
        h = context.header
        log_event(log, logging.ERROR, "request_crashed", exc_info=exc, client=context.client,
                  client_id=h.client_id or "", api=api_name(h.api_key), version=h.api_version,
                  correlation_id=h.correlation_id)  # fmt: skip

    def _unsupported_version(self, header: RequestHeader) -> Outcome:
        name = api_name(header.api_key)
        if header.api_key != ApiKey.API_VERSIONS:
            low, high = self.services.api_versions.get(header.api_key, (None, None))
            return Close(f"{name} v{header.api_version} is not supported (this broker serves "
                         f"v{low}-v{high}; see ApiVersions)")  # fmt: skip
        log_event(log, logging.INFO, "unsupported_api_versions_version", version=header.api_version)
        low, high = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS]
        response = messages.ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            api_keys=[api_versions.entry(ApiKey.API_VERSIONS, low, high)],
        )
        data = encode_response_frame(dataclasses.replace(header, api_version=0), response)
        self.metrics.observe_request(name, 0.0, 0, len(data))
        self.metrics.observe_errors(name, [ErrorCode.UNSUPPORTED_VERSION.name])
        return data
