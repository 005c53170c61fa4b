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


def log_event(logger: logging.Logger, level: int, event: str, **fields: object) -> None:
    """Log the named ``event`` with ``fields`` (rendered ``key=value`` after ``event=``)."""
    if logger.isEnabledFor(level):
        # A field named like a fixed one (node, error, ...) is renamed, never dropped; logging must not
        # fail the caller.
        safe = {(f"{k}_" if k in _RESERVED else k): v for k, v in fields.items()}
        logger.log(level, event, extra={FIELDS_ATTR: safe})


def configure_logging(level: str, node_id: int, role: str) -> None:
    """Root logger -> stderr, one logfmt line per record; ``level`` is a name (INFO, WARNING, ...)."""
    handler = logging.StreamHandler()
    handler.setFormatter(LogfmtFormatter(node_id, role))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
