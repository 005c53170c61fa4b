"""Helpers shared by the partition-log tests: batches built by kafka-python, a fake clock, a Log factory.

Imported by name (``from storage_log_helpers import ...``): pytest puts this folder on sys.path.
"""

from __future__ import annotations

import struct
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from storage.batch_header import validate_batch
from storage.config import LogConfig
from storage.log import Log


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def make_batch(count: int = 3, timestamp: int = 1_000, value_size: int = 10, base_offset: int = 0) -> bytes:
    """A v2 batch built by kafka-python (the reference codec); offsets 0..count-1 relative."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=2**24,
    )  # fmt: skip
    for i in range(count):
        builder.append(
            i, timestamp=timestamp + i, key=None, value=bytes([65 + i % 26]) * value_size, headers=[]
        )
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base_offset)
    return bytes(buf)


def follower_batch(base_offset: int, count: int, epoch: int, timestamp: int = 1_000) -> bytes:
    buf = bytearray(make_batch(count, timestamp=timestamp))
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, epoch)
    return bytes(buf)


def batch_offsets(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each batch in ``data``, via kafka-python's parser."""
    out, pos = [], 0
    while pos < len(data):
        header = validate_batch(data, pos)
        parsed = DefaultRecordBatch(data[pos : pos + header.size_in_bytes])
        assert parsed.validate_crc()
        out.append((parsed.base_offset, parsed.base_offset + parsed.last_offset_delta))
        pos += header.size_in_bytes
    return out


def log_factory(directory: Path, clock: FakeClock):
    """A generator for an ``open_log`` fixture: yields a Log factory, closes every file afterwards."""
    logs: list[Log] = []

    def factory(config: LogConfig | None = None, path: Path | None = None) -> Log:
        log = Log(path or directory / "topic-0", config or LogConfig(), clock)
        logs.append(log)
        return log

    yield factory
    for log in logs:
        for segment in log._segments:
            segment.close()


def filled(
    open_log, batches: int = 5, count: int = 3, config: LogConfig | None = None, epoch: int = 0
) -> Log:
    log = open_log(config)
    for i in range(batches):
        log.append_as_leader(make_batch(count, timestamp=1_000 + 10 * i), epoch)
    log.update_high_watermark(log.log_end_offset)
    return log
