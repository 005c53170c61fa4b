"""How much a fetch reads: the size limits of one fetch across its partitions, and the estimate
that wakes a parked one.

``FetchBudget`` is Kafka's ``readFromLocalLog`` accounting (the class docstring has the rules);
``available_bytes`` is the cheap lower bound the delayed fetch checks against ``min_bytes`` without
touching the files. Thread-safety: a ``FetchBudget`` belongs to one fetch answer being built.
"""

from __future__ import annotations

from storage.batch_header import HEADER_SIZE
from storage.file_slice import Records
from storage.log import Log
from storage.record_batch import MIN_RECORD_BYTES


def available_bytes(fetch_offset: int, end_offset: int) -> int:
    """A lower bound of the bytes readable in [fetch_offset, end_offset) without touching the files:
    at least one batch header and the smallest record per offset."""
    records = end_offset - fetch_offset
    return HEADER_SIZE + records * MIN_RECORD_BYTES if records > 0 else 0


class FetchBudget:
    """The size limits of one fetch across its partitions, Kafka's ``readFromLocalLog``: every partition
    reads at most ``min(partition_max_bytes, what the request's max_bytes has left)``; until the first
    partition that returns data, a first batch bigger than that is returned whole (minOneMessage, so a
    fetch always makes progress); after it, a batch that does not fit gives its partition nothing.
    Consumer and follower fetches alike. With ``file_slices`` a read returns a ``FileSlice`` of the
    segment (same bytes, same rules) for the Kafka listener to send with sendfile."""

    __slots__ = ("bytes_left", "file_slices", "min_one_batch")

    def __init__(self, max_bytes: int, file_slices: bool = False) -> None:
        self.bytes_left = max_bytes
        self.min_one_batch = True
        self.file_slices = file_slices

    def read(
        self, plog: Log, fetch_offset: int, partition_max_bytes: int, max_offset: int | None = None
    ) -> Records:
        if self.bytes_left <= 0 and not self.min_one_batch:
            return b""
        read = plog.read_slice if self.file_slices else plog.read
        records = read(
            fetch_offset, max(0, min(partition_max_bytes, self.bytes_left)), max_offset,
            min_one_batch=self.min_one_batch,
        )  # fmt: skip
        if records:
            self.min_one_batch = False
            self.bytes_left = max(0, self.bytes_left - len(records))
        return records
