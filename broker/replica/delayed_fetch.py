"""A delayed (long-poll) fetch (Kafka's ``DelayedFetch``), parked in a ``broker.replica.purgatory``.

A fetch waits until the partitions it reads hold at least ``min_bytes`` beyond their fetch offsets
(up to the HW for a consumer, the LEO for a follower), until one of them must answer at once (an
error, a leader change, a diverging epoch: the readiness check says ``complete_now``), or until
``max_wait_ms`` (then it is answered with what is there, possibly nothing: not an error). Any
change on any of its partitions checks all of them (Kafka's ``DelayedFetch.tryComplete``).

On completion the driver reads every partition again and answers (``on_done``): the records are
read at answer time, never kept while parked. Not thread-safe (the purgatory's driver owns it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.replica.purgatory import DelayedOperation, K


@dataclass(frozen=True, slots=True)
class FetchReadiness:
    """What a fetch check answers for one partition: bytes readable now, or answer immediately."""

    available_bytes: int
    complete_now: bool = False


FetchCheckFn = Callable[[K, int], FetchReadiness]  # (tp, fetch_offset)


class DelayedFetch(DelayedOperation[K]):
    """A fetch of ``fetch_offsets`` waiting for ``min_bytes``; ``on_done()`` reads and answers it."""

    def __init__(
        self,
        deadline_ms: int,
        min_bytes: int,
        fetch_offsets: Mapping[K, int],
        check: FetchCheckFn[K],
        on_done: Callable[[], None],
    ) -> None:
        super().__init__(deadline_ms)
        self.min_bytes = min_bytes
        self.fetch_offsets = dict(fetch_offsets)
        self._check = check
        self._on_done = on_done

    def keys(self) -> list[K]:
        return list(self.fetch_offsets)

    def try_complete(self, key: K | None) -> bool:
        total_bytes = 0
        for tp, fetch_offset in self.fetch_offsets.items():
            readiness = self._check(tp, fetch_offset)
            if readiness.complete_now:  # any partition that must answer now completes the fetch
                return True
            total_bytes += readiness.available_bytes
        return total_bytes >= self.min_bytes

    def on_complete(self) -> None:
        self._on_done()
