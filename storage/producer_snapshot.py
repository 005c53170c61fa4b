"""Producer-state snapshots: ``<base offset>.snapshot`` files beside a partition's segments.

A snapshot named for offset N holds the idempotent-producer state (``storage.producer_state``) as of
the log up to N exclusive. The broker writes one when a segment rolls (N = the new segment's base
offset), so recovery loads the latest snapshot at or below the log end offset and replays only the
batches after it instead of rescanning the whole log. Written atomically
(``storage.checkpoint.write_atomically``: temp file, fsync, rename), so a crash leaves the old file
or the new one; a file that fails its CRC is ignored (recovery falls back to an older snapshot or
to offset 0).

Bytes on disk, big-endian::

    int16  version (1)
    uint32 crc32c of everything after this field
    int32  producer count
    per producer:
        int64 producer_id, int16 producer_epoch, int64 last_update_ms, int8 batch count
        per batch: int32 first_seq, int32 last_seq, int64 first_offset, int64 last_offset

Entries are plain tuples so that storage does not depend on the broker package:
``(producer_id, producer_epoch, last_update_ms, ((first_seq, last_seq, first_offset, last_offset), ...))``.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c

from storage.checkpoint import write_atomically

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1
_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhqb")
_BATCH = struct.Struct(">iiqq")

SnapshotBatch = tuple[int, int, int, int]
SnapshotEntry = tuple[int, int, int, tuple[SnapshotBatch, ...]]


class CorruptSnapshotError(ValueError):
    """A snapshot file that does not decode (truncated, bad CRC, unknown version)."""


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode(entries: list[SnapshotEntry]) -> bytes:
    body = bytearray(_COUNT.pack(len(entries)))
    for producer_id, epoch, last_update_ms, batches in entries:
        body += _PRODUCER.pack(producer_id, epoch, last_update_ms, len(batches))
        for batch in batches:
            body += _BATCH.pack(*batch)
    return _HEAD.pack(VERSION, crc32c.crc32c(body)) + bytes(body)


def decode(data: bytes) -> list[SnapshotEntry]:
    if len(data) < _HEAD.size + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is truncated")
    version, crc = _HEAD.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    body = memoryview(data)[_HEAD.size :]
    if crc32c.crc32c(body) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    try:
        return _decode_body(body)
    except struct.error as exc:
        raise CorruptSnapshotError(f"truncated snapshot: {exc}") from exc


def _decode_body(body: memoryview) -> list[SnapshotEntry]:
    (count,) = _COUNT.unpack_from(body)
    pos = _COUNT.size
    entries: list[SnapshotEntry] = []
    for _ in range(count):
        producer_id, epoch, last_update_ms, n = _PRODUCER.unpack_from(body, pos)
        pos += _PRODUCER.size
        batches = tuple(_BATCH.unpack_from(body, pos + i * _BATCH.size) for i in range(n))
        pos += n * _BATCH.size
        entries.append((producer_id, epoch, last_update_ms, batches))
    return entries


def write_snapshot(directory: Path, offset: int, entries: list[SnapshotEntry]) -> Path:
    path = snapshot_path(directory, offset)
    write_atomically(path, encode(entries))
    return path


def snapshot_offsets(directory: Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    offsets = []
    for path in directory.glob("*" + SNAPSHOT_SUFFIX):
        stem = path.name[: -len(SNAPSHOT_SUFFIX)]
        if stem.isdigit():
            offsets.append(int(stem))
    return sorted(offsets)


def load_latest(directory: Path, at_most: int) -> tuple[int, list[SnapshotEntry]] | None:
    """The newest readable snapshot with offset <= ``at_most``, or None (then replay from the start)."""
    for offset in reversed(snapshot_offsets(directory)):
        if offset > at_most:
            continue
        try:
            return offset, decode(snapshot_path(directory, offset).read_bytes())
        except (OSError, CorruptSnapshotError):
            continue
    return None


def delete_snapshots(directory: Path, *, above: int | None = None, below: int | None = None) -> None:
    """Delete snapshots with offset > ``above`` (truncation) and/or < ``below`` (old segments gone)."""
    for offset in snapshot_offsets(directory):
        if (above is not None and offset > above) or (below is not None and offset < below):
            snapshot_path(directory, offset).unlink(missing_ok=True)
