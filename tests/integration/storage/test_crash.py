"""Crash test: SIGKILL a process that appends and flushes, reopen, and hold the log to its promises.

architecture.md, Durability: on restart the tail is scanned, a torn or corrupt tail is truncated at the last
valid batch, indexes are rebuilt if needed. After every kill (seeded moments, several rounds on the
same directory, a new leader epoch each round) the reopened log must be:

- a valid prefix: batches with good CRCs, contiguous offsets from 0, every record the writer wrote;
  on every other round the test also plays a power loss that keeps only part of the unflushed
  bytes (later segments cut or emptied, the acknowledged segment cut past its flushed size and
  followed by garbage), which a SIGKILL alone rarely produces;
- complete up to what ``flush()`` acknowledged: every reported flushed offset is below the LEO;
- consistent: offset index entries point at the start of the batch ending at their offset, time
  index entries hold the max timestamp up to their offset, and the leader-epoch cache matches the
  epochs in the batches.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from crash_writer import BASE_TIMESTAMP, CONFIG, expected_value
from kafka.record.default_records import DefaultRecordBatch

from proto.clock import wall_clock_ms
from storage.batch_header import validate_batch
from storage.log import Log

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
WRITER = Path(__file__).with_name("crash_writer.py")
ROUNDS = 5
SEED = 20261122
LINE_DEADLINE_S = 15.0


class Writer:
    """The child process and its stdout, read line by line with a deadline."""

    def __init__(self, directory: Path, leader_epoch: int, seed: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, str(WRITER), str(directory), str(leader_epoch), str(seed)],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
        )
        self._buffer = b""

    def read_line(self) -> str:
        deadline = time.monotonic() + LINE_DEADLINE_S
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"writer {self.process.pid} printed nothing for {LINE_DEADLINE_S} s"
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                assert chunk, f"writer {self.process.pid} exited early with {self.process.wait(5)}"
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process.stdout.close()


@dataclass(frozen=True)
class Acknowledged:
    last_offset: int
    segment_base_offset: int
    segment_size_bytes: int


def run_round(directory: Path, leader_epoch: int, rng: random.Random) -> tuple[int, Acknowledged | None]:
    """Start the writer, let it acknowledge a random number of flushes, SIGKILL it."""
    writer = Writer(directory, leader_epoch, rng.randrange(1 << 30))
    acknowledged = None
    try:
        opened = int(writer.read_line().removeprefix("open "))
        for _ in range(rng.randint(1, 25)):
            last_offset, base_offset, size = writer.read_line().removeprefix("flushed ").split()
            acknowledged = Acknowledged(int(last_offset), int(base_offset), int(size))
    finally:
        writer.kill()
    return opened, acknowledged


def lose_unflushed_bytes(directory: Path, acknowledged: Acknowledged, rng: random.Random) -> None:
    """A power loss: bytes past the last flush may be kept in part, in any file, or replaced by junk."""
    for path in sorted(directory.glob("*.log")):
        base_offset, size = int(path.stem), path.stat().st_size
        if base_offset > acknowledged.segment_base_offset:
            os.truncate(path, rng.randint(0, size))
        elif base_offset == acknowledged.segment_base_offset:
            os.truncate(path, rng.randint(acknowledged.segment_size_bytes, size))
            with open(path, "ab") as file:
                file.write(rng.randbytes(rng.randint(0, 80)))


def check_batches(log: Log) -> dict[int, int]:
    """Every batch valid and contiguous, every record as written; returns {base offset: epoch}."""
    epochs: dict[int, int] = {}
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        assert data, f"no batch at {offset} below LEO {log.log_end_offset}"
        position = 0
        while position < len(data):
            header = validate_batch(data, position)
            assert header.base_offset == offset, f"batch at {header.base_offset}, expected {offset}"
            batch = DefaultRecordBatch(data[position : position + header.size_in_bytes])
            for record in batch:
                assert record.value == expected_value(record.offset), f"record {record.offset} differs"
                assert record.timestamp == BASE_TIMESTAMP + record.offset
            epochs[offset] = header.partition_leader_epoch
            offset = header.next_offset
            position += header.size_in_bytes
    return epochs


def check_indexes(log: Log) -> None:
    """Index entries agree with the segment bytes (sparse offset index and time index)."""
    for segment in log._segments:
        headers = {}
        max_so_far = {}
        running = -1
        for position, header in segment._headers_from(0, segment.size_bytes):
            headers[position] = header
            running = max(running, header.max_timestamp)
            max_so_far[header.last_offset] = running
        for offset, position in zip(segment.offset_index.keys, segment.offset_index.values, strict=True):
            assert position in headers, (
                f"segment {segment.base_offset}: index position {position} is no batch"
            )
            assert headers[position].last_offset == offset, f"index entry ({offset}, {position}) is wrong"
        for timestamp, offset in zip(segment.time_index.keys, segment.time_index.values, strict=True):
            assert max_so_far.get(offset) == timestamp, f"time index entry ({timestamp}, {offset}) is wrong"


def check_epoch_cache(log: Log, epochs: dict[int, int]) -> None:
    starts = []
    for base_offset, epoch in sorted(epochs.items()):
        if not starts or starts[-1][0] != epoch:
            starts.append((epoch, base_offset))
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == starts


def test_sigkill_during_flushed_appends_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    directory = tmp_path / "crash-0"
    must_keep = 0  # the LEO every reopen must reach: one past the last acknowledged offset
    truncated = 0
    for leader_epoch in range(ROUNDS):
        opened, acknowledged = run_round(directory, leader_epoch, rng)
        assert opened >= must_keep, f"round {leader_epoch}: writer reopened at {opened}, below {must_keep}"
        if acknowledged is not None:
            must_keep = acknowledged.last_offset + 1
            if leader_epoch % 2:
                lose_unflushed_bytes(directory, acknowledged, rng)
        log = Log(directory, CONFIG, wall_clock_ms)
        try:
            assert not log.load_result.had_clean_shutdown
            assert log.log_end_offset >= must_keep, (
                f"round {leader_epoch}: LEO {log.log_end_offset} lost flushed offsets below {must_keep}"
            )
            truncated += log.load_result.truncated_bytes
            log.invariants()
            epochs = check_batches(log)
            check_indexes(log)
            check_epoch_cache(log, epochs)
        finally:
            for segment in log._segments:
                segment.close()
    assert len(log.segment_base_offsets) > 1, "the test should cross segment rolls"
    assert truncated > 0, "the test should have recovered at least one torn tail"
