"""The real clock, for the drivers to pass in: ``wall_clock_ms()`` is Unix time in milliseconds.

The storage and broker cores (``storage.log.Log``, ``broker.replica.log_manager.LogManager``,
``broker.replica.replica_manager.ReplicaManager``) never read the time themselves: they take a
``clock_ms: Callable[[], int]``. The broker process (``broker.server``), tools and tests pass this
one; the simulation (``tests/sim/broker``) passes its virtual clock, so that a seed replays exactly.
It is the wall clock, not a monotonic one, because what it times is persisted and compared across
restarts (segment.ms, retention.ms, LogAppendTime, producer-state expiry).
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
