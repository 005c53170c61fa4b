"""Opening a partition directory: find the segments, load or rebuild indexes, recover after a crash.

Kafka's ``LogLoader``. Files in a partition directory (besides the segments, see ``storage.segment``)::

    .kafka_cleanshutdown                 present only between a clean close() and the next open
    high-watermark-checkpoint            }
    log-start-offset-checkpoint          } one offset each (storage.checkpoint format)
    recovery-point-offset-checkpoint     }
    leader-epoch-checkpoint              the leader-epoch cache (storage.epoch_cache)

The recovery point is an offset below which every byte and index entry is known to be on disk. After
an unclean stop (no marker), every segment that may hold offsets at or past the recovery point is
scanned batch by batch (CRC, magic, sizes, offset order): the first torn or corrupt batch and
everything after it are truncated — later segments are deleted — and the indexes are rebuilt. After a
clean stop only the index files are sanity-checked; a missing or bad one is rebuilt from its segment.

The marker is removed as soon as the directory is opened, so a crash later is never taken for a
clean stop. Before anything else, the log cleaner's leftovers are settled
(``storage.cleaner.complete_interrupted_swaps``: ``*.cleaned`` files deleted, a committed ``*.swap``
segment put in place of the segments it replaces).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from proto import errors
from storage import cleaner
from storage.checkpoint import OffsetCheckpoint, fsync_dir
from storage.config import LogConfig
from storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"

_SEGMENT_NAME = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)$")


@dataclass
class LoadedLog:
    """What ``load_log`` found: segments in offset order and the offsets from the checkpoints."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    high_watermark: int | None
    had_clean_shutdown: bool
    truncated_bytes: int = 0
    recovered_segments: int = 0
    # (partition leader epoch, base offset) seen while scanning recovered segments.
    epoch_starts: list[tuple[int, int]] = field(default_factory=list)
    # Base offset of the first segment scanned: the leader-epoch cache (fsynced on every change) may
    # describe offsets from here on that the crash took back, so only the scan speaks for them.
    first_recovered_offset: int | None = None


class Checkpoints:
    """The three per-partition offset checkpoints."""

    def __init__(self, directory: Path) -> None:
        self.high_watermark = OffsetCheckpoint(directory / HIGH_WATERMARK_FILE)
        self.log_start_offset = OffsetCheckpoint(directory / LOG_START_OFFSET_FILE)
        self.recovery_point = OffsetCheckpoint(directory / RECOVERY_POINT_FILE)


def load_log(directory: Path, config: LogConfig, checkpoints: Checkpoints, now_ms: int) -> LoadedLog:
    """Open every segment of ``directory``, recovering as needed (see the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    cleaner.complete_interrupted_swaps(directory)  # before listing: a swap replaces segment files
    clean = _consume_clean_shutdown_marker(directory)
    log_start = checkpoints.log_start_offset.read() or 0
    loaded = LoadedLog(
        segments=[],
        log_start_offset=log_start,
        recovery_point=checkpoints.recovery_point.read() or 0,
        high_watermark=checkpoints.high_watermark.read(),
        had_clean_shutdown=clean,
    )
    base_offsets = _segment_base_offsets(directory)
    for position, base_offset in enumerate(base_offsets):
        upper = base_offsets[position + 1] if position + 1 < len(base_offsets) else None
        must_scan = not clean and (upper is None or upper > loaded.recovery_point)
        segment = _load_segment(directory, base_offset, must_scan, config, loaded, now_ms)
        loaded.segments.append(segment)
        if upper is not None and segment.next_offset != upper:
            # A torn segment, or a later segment that reached the disk before this one's tail did:
            # the offsets after this segment are not contiguous, so nothing after it can be kept.
            if not must_scan:
                for opened in loaded.segments:
                    opened.close()
                raise errors.KafkaStorageError(
                    f"{directory}: segment {base_offset} ends at offset {segment.next_offset} but the next "
                    f"segment starts at {upper}, below the recovery point {loaded.recovery_point}; the "
                    "flushed log is damaged: delete the partition directory to refetch it from the leader"
                )
            loaded.truncated_bytes += _delete_segments_from(directory, base_offsets[position + 1 :])
            break
    if not loaded.segments:
        loaded.segments.append(LogSegment.create(directory, log_start, config.index_interval_bytes, now_ms))
    return loaded


def _load_segment(
    directory: Path, base_offset: int, must_scan: bool, config: LogConfig, loaded: LoadedLog, now_ms: int
) -> LogSegment:
    """Open one segment; scan and repair it when asked to, or when its indexes cannot be trusted."""
    segment = LogSegment.open(directory, base_offset, config.index_interval_bytes, now_ms)
    if must_scan or not segment.load_indexes():
        if loaded.first_recovered_offset is None:
            loaded.first_recovered_offset = base_offset
        result = segment.recover()  # structure only: never a topic config
        # After a clean stop the recovery point is the LEO: the rebuilt indexes must be durable.
        segment.flush(fsync=loaded.had_clean_shutdown)
        loaded.recovered_segments += 1
        loaded.truncated_bytes += result.truncated_bytes
        loaded.epoch_starts.extend(result.epoch_starts)
    return segment


def _consume_clean_shutdown_marker(directory: Path) -> bool:
    marker = directory / CLEAN_SHUTDOWN_FILE
    if not marker.exists():
        return False
    marker.unlink()
    fsync_dir(directory)
    return True


def write_clean_shutdown_marker(directory: Path) -> None:
    (directory / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    fsync_dir(directory)


def _segment_base_offsets(directory: Path) -> list[int]:
    """Base offsets of the ``.log`` files; index files without a ``.log`` are orphans and removed."""
    logs: set[int] = set()
    indexes: list[Path] = []
    for path in directory.iterdir():
        match = _SEGMENT_NAME.match(path.name)
        if match is None:
            continue
        if match.group(2) == LOG_SUFFIX:
            logs.add(int(match.group(1)))
        else:
            indexes.append(path)
    for path in indexes:
        if int(path.name[:20]) not in logs:
            path.unlink()
    return sorted(logs)


def _delete_segments_from(directory: Path, base_offsets: list[int]) -> int:
    """Delete whole segments that follow a corrupt one (their data cannot be reached); bytes removed."""
    removed = 0
    for base_offset in base_offsets:
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            path = directory / f"{base_offset:020d}{suffix}"
            if suffix == LOG_SUFFIX and path.exists():
                removed += path.stat().st_size
            path.unlink(missing_ok=True)
    return removed
