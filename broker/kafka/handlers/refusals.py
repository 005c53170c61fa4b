"""Refused requests in the broker's log: a WARN line per client and error, then a count.

A request is *refused* when its answer carries a non-zero ``error_code`` — top-level, per topic, per
partition or per group. ``response_errors(response)`` finds every one with where it was (topic name or
id, partition, the broker's ``error_message``); the request processor calls it once per answer (the
per-API error counter uses the same walk) and, when it found any, hands them to ``RefusalLog``.

The rule (``RefusalLog.observe``), per client — the connection's host (not its port: a client that
reconnects is the same client) and its ``client.id`` — and error name:
- the first refusal logs ``event=request_refused`` with ``client``, ``client_id``, ``api``, ``code`` (the
  error's name),
  and, where the error belongs to one, ``topic``/``partition`` (the first failing one of the request),
  ``partitions`` (how many in that answer failed with this error) and ``message``;
- further refusals with the same key within ``log.refused.requests.interval.ms`` (default 60 s) from
  that line are counted, not logged;
- once the interval is over, ``event=requests_refused_summary`` says how many were suppressed
  (``suppressed=N``), at the broker's next check (``flush``, every few seconds) or at that key's next
  refusal, whichever comes first; nothing is said when none were suppressed.
So a client that keeps failing the same way costs two lines a minute, and a new error is seen at once.

The level is WARN, except for answers that are a protocol's normal instructions rather than refusals
(``INSTRUCTION_CODES``: a KIP-394 JoinGroup's MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS): INFO, same
event and limit, and so is their summary. Not thread-safe: the broker's event loop calls it.
"""

from __future__ import annotations

import dataclasses
import logging
import types
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from proto.errors import ErrorCode
from proto.kafka.topic_ids import topic_id_of
from proto.runtime.logfmt import RateLimiter, log_event

if TYPE_CHECKING:  # context.py builds a RefusalLog into BrokerServices
    from broker.kafka.handlers.context import RequestContext

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_MS = 60_000
FLUSH_INTERVAL_MS_MAX = 5_000  # how late at most a summary line comes after its window ended
INSTRUCTION_CODES = frozenset({ErrorCode.MEMBER_ID_REQUIRED, ErrorCode.REBALANCE_IN_PROGRESS})
INSTRUCTION_NAMES = frozenset(code.name for code in INSTRUCTION_CODES)

_TOPIC_ATTRS = ("name", "topic")
_TOPIC_ID_ATTR = "topic_id"
_PARTITION_ATTRS = ("index", "partition_index", "partition")


class ResponseError(NamedTuple):
    code: int
    topic: str | None
    partition: int | None
    message: str | None

    @property
    def name(self) -> str:
        try:
            return ErrorCode(self.code).name
        except ValueError:
            return str(self.code)


class _Plan(NamedTuple):
    """Where to look in one generated message class: read once per class from its type hints, so
    that an answer's walk visits only the fields that can lead to an ``error_code`` (this walk runs
    for every answer: it must cost no more than the error counter's walk it replaced)."""

    has_error: bool
    has_message: bool
    topic: str | None
    topic_id: bool
    partition: str | None
    children: tuple[tuple[str, bool], ...]  # (field, is a list) of nested messages that can hold errors

    @property
    def reaches_errors(self) -> bool:
        return self.has_error or bool(self.children)


_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is not None:
        return plan
    _PLANS[cls] = _Plan(False, False, None, False, None, ())  # a message that contains itself: no loop
    hints = typing.get_type_hints(cls)
    children = []
    for name, hint in hints.items():
        nested, is_list = _message_type(hint)
        if nested is not None and _plan(nested).reaches_errors:
            children.append((name, is_list))
    plan = _Plan(
        "error_code" in hints,
        "error_message" in hints,
        next((a for a in _TOPIC_ATTRS if a in hints), None),
        _TOPIC_ID_ATTR in hints,
        next((a for a in _PARTITION_ATTRS if a in hints), None),
        tuple(children),
    )
    _PLANS[cls] = plan
    return plan


def _message_type(hint: Any) -> tuple[type | None, bool]:
    """``(message class, is a list)`` when a field holds generated messages (maybe optional), else None."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _message_type(args[0]) if len(args) == 1 else (None, False)
    if origin is list:
        inner, _ = _message_type(typing.get_args(hint)[0])
        return inner, True
    return (hint, False) if isinstance(hint, type) and dataclasses.is_dataclass(hint) else (None, False)


def response_errors(response: Any) -> list[ResponseError]:
    """Every non-zero ``error_code`` in a response object, with the topic and partition it is under."""
    out: list[ResponseError] = []
    _walk(response, None, out)
    return out


def _walk(obj: Any, topic: str | None, out: list[ResponseError]) -> None:
    plan = _PLANS.get(type(obj)) or _plan(type(obj))
    if plan.topic is not None:
        topic = getattr(obj, plan.topic) or topic
    if plan.topic_id and not topic:
        topic = _topic_id(getattr(obj, _TOPIC_ID_ATTR)) or topic
    if plan.has_error:
        code = obj.error_code
        if code:
            partition = getattr(obj, plan.partition) if plan.partition is not None else None
            message = obj.error_message if plan.has_message else None
            out.append(ResponseError(code, topic, partition if isinstance(partition, int) else None, message))
    for name, is_list in plan.children:
        value = getattr(obj, name)
        if value is None:
            continue
        if is_list:
            for item in value:
                _walk(item, topic, out)
        else:
            _walk(value, topic, out)


def _topic_id(value: Any) -> str | None:
    """A wire uuid (or an id string already) as our topic id; None for zero."""
    return (value if isinstance(value, str) else topic_id_of(value)) or None


def _host(address: str) -> str:
    """The host of a peer's ``host:port`` (``[::1]:5000`` -> ``[::1]``)."""
    host, sep, _port = address.rpartition(":")
    return host if sep else address


class RefusalLog:
    """The broker's refused-request lines (see the module docstring); one per broker, all listeners."""

    def __init__(self, clock_ms: Callable[[], int], interval_ms: int = DEFAULT_INTERVAL_MS) -> None:
        self.clock_ms = clock_ms
        self.limiter = RateLimiter(interval_ms)

    @property
    def flush_interval_s(self) -> float:
        return min(self.limiter.interval_ms, FLUSH_INTERVAL_MS_MAX) / 1000

    def observe(self, context: RequestContext, api: str, errors: list[ResponseError]) -> None:
        now_ms = self.clock_ms()
        client_id = context.header.client_id or ""
        first: dict[int, tuple[ResponseError, int]] = {}
        for e in errors:  # one line per distinct error of the answer: its first place and how many
            seen = first.get(e.code)
            first[e.code] = (e, 1) if seen is None else (seen[0], seen[1] + 1)
        for e, count in first.values():
            key = (_host(context.client), client_id, e.name)
            previous = self.limiter.admit(key, now_ms)
            if previous is None:
                continue
            if previous:
                self._summary(key, previous)
            level = logging.INFO if e.code in INSTRUCTION_CODES else logging.WARNING
            fields: dict[str, Any] = {"client": context.client, "client_id": client_id, "api": api,
                                         "code": e.name}  # fmt: skip
            if e.topic is not None:
                fields["topic"] = e.topic
            if e.partition is not None:
                fields["partition"] = e.partition
                fields["partitions"] = count
            if e.message:
                fields["message"] = e.message
            log_event(log, level, "request_refused", **fields)

    def flush(self) -> None:
        """Say the count of every ended window that suppressed refusals (called every few seconds)."""
        for key, count in self.limiter.expired(self.clock_ms()):
            self._summary(key, count)

    def _summary(self, key: tuple[str, ...], count: int) -> None:
        if key == RateLimiter.OVERFLOW_KEY:
            log_event(log, logging.WARNING, "requests_refused_summary", client="*", suppressed=count,
                      interval_ms=self.limiter.interval_ms)  # fmt: skip
            return
        host, client_id, error = key
        level = logging.INFO if error in INSTRUCTION_NAMES else logging.WARNING
        log_event(log, level, "requests_refused_summary", client=host, client_id=client_id,
                  code=error, suppressed=count, interval_ms=self.limiter.interval_ms)  # fmt: skip
