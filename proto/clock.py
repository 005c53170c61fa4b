"""The real clocks, for the drivers to pass in (the sans-I/O cores never read the time themselves).

``wall_clock_ms()`` is Unix time in milliseconds. The storage and broker cores (``storage.log.Log``,
``broker.replica.log_manager.LogManager``, ``broker.replica.replica_manager.ReplicaManager``) take a
``clock_ms: Callable[[], int]``; the broker process (``broker.server``), tools and tests pass this one,
the simulation (``tests/sim/broker``) its virtual clock, so that a seed replays exactly. It is the wall
clock, not a monotonic one, because what it times is persisted and compared across restarts
(segment.ms, retention.ms, LogAppendTime, producer-state expiry).

``monotonic_ms()`` is a monotonic clock in milliseconds, for what is only timed within one process:
Raft's election and heartbeat deadlines, the controller's broker sessions, the follower's fetch
back-offs, ISR lag and the purgatories' deadlines.
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000
