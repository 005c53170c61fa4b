"""Structured process logs: one ``key=value`` line per event (logfmt), with node id and role.

    ts=2026-11-22T05:30:01.123Z level=INFO node=101 role=broker logger=broker.server
        event=isr_changed topic=t partition=0 isr=[101,102] partition_epoch=4

(one line in the file). ``configure_logging(level, node_id, role)`` installs ``LogfmtFormatter`` on
the root logger in a process's ``main``. ``log_event(logger, level, event, **fields)`` logs a named
event with fields (topic, partition, leader_epoch, ...); plain ``logger.info("text %s", x)`` calls
still work and appear as ``msg="..."``. Values with spaces, quotes or ``=`` are double-quoted with
escapes, so a line always splits back into its fields. A field named like a fixed key (``node``,
``error``, ...) gets a trailing underscore.

Exceptions never add lines: an expected error logged with ``exc_info`` becomes
``error="Type: message"``; at ERROR and above the traceback is kept too, escaped into one
``traceback="..."`` field.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Mapping
from typing import Any

FIELDS_ATTR = "logfmt_fields"
_RESERVED = frozenset({"ts", "level", "node", "role", "logger", "event", "msg", "error", "traceback"})


def quote(value: object) -> str:
    text = str(value)
    if text and not any(c in text for c in ' "=\n\t\\'):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


class LogfmtFormatter(logging.Formatter):
    def __init__(self, node_id: int, role: str) -> None:
        super().__init__()
        self.node_id = node_id
        self.role = role

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        pairs: list[tuple[str, object]] = [
            ("ts", self.formatTime(record)),
            ("level", record.levelname),
            ("node", self.node_id),
            ("role", self.role),
            ("logger", record.name),
        ]
        fields: Mapping[str, Any] | None = getattr(record, FIELDS_ATTR, None)
        if fields is not None:
            pairs.append(("event", record.msg))
            pairs += [(k, _compact(v)) for k, v in fields.items()]
        else:
            pairs.append(("msg", record.getMessage()))
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            pairs.append(("error", f"{type(exc).__name__}: {exc}"))
            if record.levelno >= logging.ERROR:
                pairs.append(("traceback", "".join(traceback.format_exception(exc)).rstrip()))
        return " ".join(f"{key}={quote(value)}" for key, value in pairs)


def _compact(value: object) -> object:
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return "[" + ",".join(str(v) for v in items) + "]"
    return value


def log_event(
    logger: logging.Logger, level: int, event: str, exc_info: BaseException | None = None, **fields: object
) -> None:
    """Log the named ``event`` with ``fields`` (rendered ``key=value`` after ``event=``); ``exc_info``
    adds ``error=`` (and, at ERROR and above, ``traceback=``)."""
    if logger.isEnabledFor(level):
        # A field named like a fixed one (node, error, ...) is renamed, never dropped; logging must not
        # fail the caller.
        safe = {(f"{k}_" if k in _RESERVED else k): v for k, v in fields.items()}
        logger.log(level, event, exc_info=exc_info, extra={FIELDS_ATTR: safe})


def configure_logging(level: str, node_id: int, role: str) -> None:
    """Root logger -> stderr, one logfmt line per record; ``level`` is a name (INFO, WARNING, ...)."""
    handler = logging.StreamHandler()
    handler.setFormatter(LogfmtFormatter(node_id, role))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


class RateLimiter:
    """Which occurrences of a repeated log line to print: per key, the first of each window.

    ``admit(key, now_ms)`` is None while ``key``'s window (``interval_ms`` from the occurrence that
    opened it) runs: the caller counts it as suppressed and prints nothing. Otherwise it opens a new
    window and returns how many occurrences the key's previous, ended window suppressed that were not
    reported yet (usually 0): the caller prints that count, then the line. ``expired(now_ms)`` ends
    every window older than ``interval_ms`` and returns ``(key, suppressed)`` for those that
    suppressed anything, so a key that stops repeating still gets its count said once.

    At most ``max_keys`` windows are kept (a limit on memory, whatever the clients do): a new key
    beyond that is counted under ``OVERFLOW_KEY`` instead (one line for all of them per window).
    Pure (the caller gives the time); not thread-safe.
    """

    OVERFLOW_KEY: tuple[str, ...] = ("*",)

    def __init__(self, interval_ms: int, max_keys: int = 10_000) -> None:
        assert interval_ms > 0 and max_keys > 0, (interval_ms, max_keys)
        self.interval_ms = interval_ms
        self.max_keys = max_keys
        self._windows: dict[Any, list[int]] = {}  # key -> [window start ms, suppressed count]

    def admit(self, key: Any, now_ms: int) -> int | None:
        window = self._windows.get(key)
        if window is None and len(self._windows) >= self.max_keys:
            key = self.OVERFLOW_KEY
            window = self._windows.get(key)
        if window is not None and now_ms - window[0] < self.interval_ms:
            window[1] += 1
            return None
        previous = 0 if window is None else window[1]
        self._windows[key] = [now_ms, 0]
        return previous

    def expired(self, now_ms: int) -> list[tuple[Any, int]]:
        ended = [key for key, (start, _) in self._windows.items() if now_ms - start >= self.interval_ms]
        return [(key, count) for key in ended if (count := self._windows.pop(key)[1])]

    def __len__(self) -> int:
        return len(self._windows)
