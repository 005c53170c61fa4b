"""Child process of the crash test: append to a partition log forever, flushing after every append.

Usage: ``python crash_writer.py <log dir> <leader epoch> <seed>``. Prints ``open <LEO>`` once the log is
open (after recovery), then ``flushed <last offset> <active segment base> <its size>`` after each
append whose ``flush()`` returned — the acknowledgement the crash test holds the log to, and the file
position below which nothing may be lost. The record at offset ``o`` has the value
``expected_value(o)`` and timestamp ``BASE_TIMESTAMP + o``, so the test can check every byte it reads.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from proto.clock import wall_clock_ms
from storage.config import LogConfig
from storage.log import Log

BASE_TIMESTAMP = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=48 * 1024, index_interval_bytes=1024, retention_ms=None)


def expected_value(offset: int) -> bytes:
    return b"%d:" % offset + bytes([97 + offset % 26]) * (offset % 157)


def build_batch(first_offset: int, count: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=2**24,
    )  # fmt: skip
    for delta in range(count):
        offset = first_offset + delta
        builder.append(
            delta, timestamp=BASE_TIMESTAMP + offset, key=None, value=expected_value(offset), headers=[]
        )
    return bytes(builder.build())


def main(directory: str, leader_epoch: int, seed: int) -> None:
    rng = random.Random(seed)
    log = Log(Path(directory), CONFIG, wall_clock_ms)
    print(f"open {log.log_end_offset}", flush=True)
    while True:
        info = log.append_as_leader(build_batch(log.log_end_offset, rng.randint(1, 40)), leader_epoch)
        log.flush()
        active = log.active_segment
        print(f"flushed {info.last_offset} {active.base_offset} {active.size_bytes}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
