"""A hop-by-hop latency trace of the broker's request path, off unless asked for.

``PYKRAFT_LATENCY_TRACE=<directory>`` in a broker's environment turns it on. Each ``event(name,
detail)`` then records (CLOCK_MONOTONIC nanoseconds, name, detail) in memory — no I/O on the request
path — and the process writes them to ``<directory>/trace-<pid>.tsv`` (``ns<TAB>name<TAB>detail`` per
line) when it exits. CLOCK_MONOTONIC is one clock for every process of a machine, so a benchmark lines
the brokers' events up with its own ``time.monotonic_ns()``: bench/replication_latency_bench.py builds
the table of one acks=all produce, hop by hop, from it.

Off (the default), a call site costs one module-attribute check: ``if latency_trace.ENABLED:
latency_trace.event(...)``. At most ``MAX_EVENTS`` events are kept (the latest), so a long run cannot
grow without bound. Not for production use: it is a measuring tool. Thread-safety: ``deque.append``
is atomic; events come from the event loop's thread.
"""

from __future__ import annotations

import atexit
import os
import time
from collections import deque
from pathlib import Path

TRACE_ENV = "PYKRAFT_LATENCY_TRACE"
MAX_EVENTS = 500_000

_directory = os.environ.get(TRACE_ENV, "")
ENABLED = bool(_directory)
_events: deque[tuple[int, str, str]] = deque(maxlen=MAX_EVENTS)


def event(name: str, detail: str = "", at_ns: int | None = None) -> None:
    """Record ``name`` now (or at ``at_ns``, a ``time.monotonic_ns()`` taken earlier)."""
    _events.append((time.monotonic_ns() if at_ns is None else at_ns, name, detail))


def _write() -> None:
    path = Path(_directory) / f"trace-{os.getpid()}.tsv"
    with open(path, "w") as out:
        out.writelines(f"{ns}\t{name}\t{detail}\n" for ns, name, detail in _events)


if ENABLED:
    atexit.register(_write)
