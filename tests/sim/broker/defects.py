"""The three data-path defects of issue 14 §1 and the two liveness bugs of issue 24 §1, as patches
that put the old behaviour back.

Each is a context manager that replaces one production method for its duration (the way the Raft
simulation's broken-core tests break a rule): the simulation must then report a violation, which
shows that it can see the defect at all. Each patch wraps today's code and re-adds only the old
mistake, so it keeps working while the surrounding code evolves.

1. ``truncate_to_keeps_epoch_past_leo``: ``Log.truncate_to(offset)`` returns early when
   ``offset >= LEO`` without trimming the leader-epoch cache — a replica that led an epoch in which it
   wrote nothing can never follow again.
2. ``recovery_stops_at_max_message_bytes``: segment recovery stops at the first batch larger than
   the topic's *current* ``max.message.bytes``, truncates there and (through the loader) deletes every
   later segment — lowering the limit and crashing loses committed data.
3. ``consumer_fetch_above_hw_out_of_range``: a consumer fetch with ``HW < offset <= LEO`` is answered
   OFFSET_OUT_OF_RANGE.
4. ``hw_runs_ahead_of_caught_up_followers``: the leader's HW counts the maximal ISR only, so under
   steady appends a caught-up follower never rejoins an ISR of {leader}.
5. ``forget_by_current_topic_id`` (the follower's side) and ``session_keeps_partitions_forgotten_by_id``
   (the leader's): a deleted topic stays in the leader's fetch session, which then answers every fetch
   at once, in a loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace

from broker.replica.partition import ConsumerFetchResult, Partition
from proto.kafka.fetch_session import FetchSession, FetchSessionHandler
from storage import log_loader
from storage.log import Log
from storage.segment import LogSegment


@contextlib.contextmanager
def _patched(owner: object, name: str, replacement: object) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


def truncate_to_keeps_epoch_past_leo() -> contextlib.AbstractContextManager[None]:
    fixed = Log.truncate_to

    def truncate_to(self: Log, offset: int) -> bool:
        if offset >= self.log_end_offset:
            return False  # the defect: the epoch cache keeps epochs starting at or past the LEO
        return fixed(self, offset)

    return _patched(Log, "truncate_to", truncate_to)


def recovery_stops_at_max_message_bytes() -> contextlib.AbstractContextManager[None]:
    fixed = log_loader._load_segment

    def load_segment(directory, base_offset, must_scan, config, loaded, now_ms):
        limit = config.max_message_bytes
        scan = LogSegment._scan_valid

        def scan_valid(self: LogSegment):
            end, batches, epoch_starts = scan(self)
            for index, batch in enumerate(batches):
                if batch.size_bytes > limit:  # the defect: a topic config decides what is corrupt
                    first_lost = batches[index - 1].last_offset + 1 if index else self.base_offset
                    kept = [(epoch, start) for epoch, start in epoch_starts if start < first_lost]
                    return batch.position_in_buffer, batches[:index], kept
            return end, batches, epoch_starts

        LogSegment._scan_valid = scan_valid
        try:
            return fixed(directory, base_offset, must_scan, config, loaded, now_ms)
        finally:
            LogSegment._scan_valid = scan

    return _patched(log_loader, "_load_segment", load_segment)


def consumer_fetch_above_hw_out_of_range() -> contextlib.AbstractContextManager[None]:
    fixed = Partition.handle_consumer_fetch

    def handle_consumer_fetch(self: Partition, fetch_offset, current_leader_epoch, last_fetched_epoch,
                              epoch_entries) -> ConsumerFetchResult:  # fmt: skip
        result = fixed(self, fetch_offset, current_leader_epoch, last_fetched_epoch, epoch_entries)
        if result.error is None and result.diverging_epoch is None and fetch_offset > self.high_watermark:
            # the defect: between the HW and the LEO is "out of range"
            return replace(result, error=self._out_of_range(fetch_offset, self.high_watermark))
        return result

    return _patched(Partition, "handle_consumer_fetch", handle_consumer_fetch)


def hw_runs_ahead_of_caught_up_followers() -> contextlib.AbstractContextManager[None]:
    """Issue 24 §1: the HW counts the maximal ISR only, never a caught-up follower about to join it."""
    return _patched(Partition, "_should_wait_to_join", lambda self, remote, now_ms: False)


def forget_by_current_topic_id() -> contextlib.AbstractContextManager[None]:
    """Issue 24 §1: a follower forgets a partition under the topic id its metadata gives now (none for a
    deleted topic), not the one it fetched it with."""
    fixed = FetchSessionHandler.build

    def build(self: FetchSessionHandler, wanted):
        return replace(fixed(self, wanted), forgotten_topic_ids={})

    return _patched(FetchSessionHandler, "build", build)


def session_keeps_partitions_forgotten_by_id() -> contextlib.AbstractContextManager[None]:
    """Issue 24 §1, the leader's side: a forget naming a topic id is ignored (the leader resolved it
    through its own metadata, which no longer has a deleted topic)."""
    return _patched(FetchSession, "partitions_of", lambda self, topic_id_partitions: [])


DEFECTS = {
    "truncate_to_keeps_epoch_past_leo": truncate_to_keeps_epoch_past_leo,
    "recovery_stops_at_max_message_bytes": recovery_stops_at_max_message_bytes,
    "consumer_fetch_above_hw_out_of_range": consumer_fetch_above_hw_out_of_range,
    "hw_runs_ahead_of_caught_up_followers": hw_runs_ahead_of_caught_up_followers,
    "forget_by_current_topic_id": forget_by_current_topic_id,
    "session_keeps_partitions_forgotten_by_id": session_keeps_partitions_forgotten_by_id,
}
