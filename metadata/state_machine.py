"""The metadata log as the Raft driver's state machine, and the tail that FetchMetadata streams.

``MetadataStateMachine`` implements ``raft.driver.StateMachine``: ``apply(index, data)`` decodes one
committed entry (a ``MetadataBatch``) and replays it into the ``QuorumController`` at offset
``index``; ``snapshot()`` is ``MetadataImage.snapshot()``; ``restore(data)`` replaces the image.

It also keeps the most recent committed entries (``tail``, at most ``max_tail_entries``) as the bytes
that were committed, so that FetchMetadata can stream them to brokers without re-encoding. The tail
covers every entry after ``tail_start_offset``: a reader asking from an older offset gets a snapshot
of the image first. Raft's own no-op entries never reach ``apply``, so offsets have gaps.

The entries this node proposed as the active controller (``expect``) are replayed from the records it
generated, and their events (``metadata.events``: topic created, leader elected, broker fenced, ...)
are logged here once they commit, under the logger ``metadata.events``: once per change, by the
controller that decided it (standbys and a replay at start-up log none).

``on_cluster_id`` (when given) is called once the image has a cluster id, and again if a restored
snapshot carries another one: the controller process records it in its data directory's
``meta.properties`` and refuses a log of another cluster (``proto.runtime.meta_properties``).

Runs on the driver's event loop (``apply`` is called synchronously from it); readers wait for new
entries with ``wait_for_entries_after``.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections import deque
from collections.abc import Callable

from metadata.controller import QuorumController
from metadata.events import batch_events, is_warning
from metadata.image import MetadataImage
from metadata.records import Record, decode_batch
from proto.runtime.logfmt import log_event

log = logging.getLogger(__name__)
events_log = logging.getLogger("metadata.events")

DEFAULT_MAX_TAIL_ENTRIES = 20_000


class MetadataStateMachine:
    def __init__(
        self,
        controller: QuorumController,
        max_tail_entries: int = DEFAULT_MAX_TAIL_ENTRIES,
        on_cluster_id: Callable[[str], None] | None = None,
    ) -> None:
        self.controller = controller
        self.on_cluster_id = on_cluster_id
        self._cluster_id = controller.image.cluster_id
        self.max_tail_entries = max_tail_entries
        self.tail: deque[tuple[int, bytes]] = deque()
        self.tail_start_offset = controller.image.offset
        self._new_entry: asyncio.Future[None] | None = None
        self._own: tuple[bytes, tuple[Record, ...]] | None = None

    # ---- raft.driver.StateMachine ----------------------------------------------------------------

    def expect(self, data: bytes, records: tuple[Record, ...]) -> None:
        """The active controller proposed ``data`` encoding ``records``: when that entry commits, replay
        these records instead of decoding the bytes again (KRaft's active controller does the same)."""
        self._own = (data, records)

    def forget_expected(self) -> None:
        """The proposal ``expect`` announced failed or its outcome is unknown: apply decodes every entry,
        and logs no event, until the next ``expect``."""
        self._own = None

    def apply(self, index: int, data: bytes) -> None:
        own = self._own
        events: list = []
        if own is not None and (own[0] is data or own[0] == data):
            records = own[1]
            self._own = None
            events = batch_events(self.controller.image, records, index)  # read before the replay
        else:
            records = decode_batch(data)
        self.controller.replay(records, index)
        for event in events:
            level = logging.WARNING if is_warning(event) else logging.INFO
            log_event(events_log, level, event[0], **event[1])
        self._maybe_report_cluster_id()
        self.tail.append((index, data))
        while len(self.tail) > self.max_tail_entries:
            self.tail_start_offset = self.tail.popleft()[0]
        self._wake()

    def snapshot(self) -> bytes:
        return self.controller.image.snapshot()

    def restore(self, data: bytes) -> None:
        image = MetadataImage.from_snapshot(data)
        log_event(log, logging.INFO, "snapshot_restored", offset=image.offset, cluster_id=image.cluster_id)
        self.controller.image = image
        self._maybe_report_cluster_id()
        self.tail.clear()
        self.tail_start_offset = image.offset
        self._wake()

    def _maybe_report_cluster_id(self) -> None:
        cluster_id = self.controller.image.cluster_id
        if cluster_id != self._cluster_id:
            self._cluster_id = cluster_id
            if self.on_cluster_id is not None:
                self.on_cluster_id(cluster_id)

    # ---- readers -------------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        return self.controller.image.offset

    def covers(self, offset: int) -> bool:
        """True when every entry after ``offset`` is still in the tail (or none exists yet)."""
        return offset >= self.tail_start_offset

    def entries_after(self, offset: int, max_entries: int, max_bytes: int) -> list[tuple[int, bytes]]:
        """Committed entries with an offset above ``offset``, in order: at most ``max_entries``, and at
        most ``max_bytes`` of batches unless the first entry alone is larger (it is always included)."""
        start = bisect.bisect_right(self.tail, offset, key=lambda e: e[0])
        out: list[tuple[int, bytes]] = []
        size = 0
        for i in range(start, min(start + max_entries, len(self.tail))):
            entry = self.tail[i]
            size += len(entry[1])
            if out and size > max_bytes:
                break
            out.append(entry)
        return out

    async def wait_for_entries_after(self, offset: int, timeout_s: float) -> None:
        """Return once an entry after ``offset`` is applied (or a snapshot restored), or on timeout."""
        if self.tail and self.tail[-1][0] > offset:
            return
        if self._new_entry is None or self._new_entry.done():
            self._new_entry = asyncio.get_running_loop().create_future()
        try:  # asyncio.timeout, not wait_for: it keeps a cancel that races the wake-up (gh-86296)
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self._new_entry)
        except TimeoutError:
            return

    def _wake(self) -> None:
        if self._new_entry is not None and not self._new_entry.done():
            self._new_entry.set_result(None)
