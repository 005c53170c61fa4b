"""broker.replica.checkpoint_writer: the periodic HW / log start / recovery point checkpoints are written in
one
worker thread, so a slow fsync never stalls the event loop; failures are logged and retried; stopping
waits for the write in flight and leaves no thread behind."""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
import time
from pathlib import Path

import pytest

import storage.checkpoint
from broker.replica.checkpoint_writer import THREAD_NAME_PREFIX, CheckpointWriter
from proto.clock import wall_clock_ms
from storage.checkpoint import OffsetCheckpoint
from storage.config import LogConfig
from storage.log import Log
from storage.log_loader import HIGH_WATERMARK_FILE
from storage.record_batch import build_batch

WAIT_S = 30.0  # an "eventually" condition on a loaded machine


def leader_log(directory: Path, records: int = 5) -> Log:
    log = Log(directory, LogConfig(), wall_clock_ms)
    log.append_as_leader(build_batch([(None, b"v%d" % i, (), 0) for i in range(records)]), 0)
    log.update_high_watermark(log.log_end_offset)
    return log


def read_hw(log: Log) -> int | None:
    return OffsetCheckpoint(log.directory / HIGH_WATERMARK_FILE).read()


def checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME_PREFIX)]


class BlockingWrites:
    """Replaces ``storage.checkpoint.write_atomically``: the HW file's write waits for ``release``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real = storage.checkpoint.write_atomically
        self.entered, self.release = threading.Event(), threading.Event()
        self.threads: list[str] = []
        monkeypatch.setattr(storage.checkpoint, "write_atomically", self)

    def __call__(self, path: Path, data: bytes) -> None:
        self.threads.append(threading.current_thread().name)
        if path.name == HIGH_WATERMARK_FILE:
            self.entered.set()
            assert self.release.wait(WAIT_S), "the test never released the write"
        self.real(path, data)


async def wait_for(event: threading.Event) -> None:
    """Wait on the event loop (which must stay free meanwhile) until a thread sets ``event``."""
    deadline = time.monotonic() + WAIT_S
    while not event.is_set():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def test_the_event_loop_runs_while_a_checkpoint_write_is_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fsyncs run in the worker thread: the loop serves other work while one is stuck."""
    log = leader_log(tmp_path / "topic-0")
    writer = CheckpointWriter(lambda: {("topic", 0): log})
    writes = BlockingWrites(monkeypatch)

    async def scenario() -> int:
        round_ = asyncio.create_task(writer.write_round())
        await wait_for(writes.entered)  # only reachable if the write does not hold the loop
        assert not round_.done()
        writes.release.set()
        return await asyncio.wait_for(round_, WAIT_S)

    try:
        assert asyncio.run(scenario()) == 3
        assert writes.threads and all(name.startswith(THREAD_NAME_PREFIX) for name in writes.threads)
        assert read_hw(log) == 5
    finally:
        writes.release.set()
        writer.stop()
        log.close()
    assert checkpoint_threads() == []


def test_a_failed_write_is_logged_at_error_and_retried_at_the_next_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    log = leader_log(tmp_path / "topic-0")
    writer = CheckpointWriter(lambda: {("topic", 0): log})
    real = storage.checkpoint.write_atomically
    failures = [OSError(errno.ENOSPC, "No space left on device")]

    def full_disk_once(path: Path, data: bytes) -> None:
        if failures:
            raise failures.pop()
        real(path, data)

    monkeypatch.setattr(storage.checkpoint, "write_atomically", full_disk_once)
    try:
        with caplog.at_level(logging.INFO, logger="broker.replica.checkpoint_writer"):
            assert asyncio.run(writer.write_round()) == 0
            errors = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert [r.msg for r in errors] == ["checkpoint_write_failed"]
            assert writer.failures == 1
            assert read_hw(log) is None
            assert asyncio.run(writer.write_round()) == 3  # the next round writes them all
            assert read_hw(log) == 5
    finally:
        writer.stop()
        log.close()


def test_a_write_failing_because_its_log_went_away_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The log was removed from the hosted logs while its write was in the worker (whose directory
    then vanished): nothing to retry, and nothing for an operator to act on."""
    log = leader_log(tmp_path / "topic-0")
    logs = {("topic", 0): log}
    writer = CheckpointWriter(lambda: logs)

    def log_removed_meanwhile(path: Path, data: bytes) -> None:
        logs.clear()
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))

    monkeypatch.setattr(storage.checkpoint, "write_atomically", log_removed_meanwhile)
    try:
        with caplog.at_level(logging.INFO, logger="broker.replica.checkpoint_writer"):
            assert asyncio.run(writer.write_round()) == 0
        assert [r.levelno for r in caplog.records if r.msg == "checkpoint_write_abandoned"] == [logging.INFO]
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert writer.failures == 0
    finally:
        monkeypatch.undo()
        writer.stop()
        log.close()


def test_stop_waits_for_the_write_in_flight_and_ends_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker cancels the checkpoint task and stops the writer before closing the logs (their final
    checkpoints, on the loop): the write in flight completes first, then no worker thread is left."""
    log = leader_log(tmp_path / "topic-0")
    writer = CheckpointWriter(lambda: {("topic", 0): log})
    writes = BlockingWrites(monkeypatch)

    async def cancel_mid_write() -> None:
        task = asyncio.create_task(writer.run(interval_ms=1))
        await wait_for(writes.entered)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    stopping = threading.Thread(target=writer.stop, name="stopping")
    try:
        asyncio.run(cancel_mid_write())
        stopping.start()
        # A negative check needs a bounded wait: stop() must not return while the write is stuck.
        stopping.join(1.0)
        assert stopping.is_alive(), "stop() returned with a checkpoint write still in flight"
    finally:
        writes.release.set()
        if stopping.ident is not None:
            stopping.join(WAIT_S)
    assert not stopping.is_alive()
    assert checkpoint_threads() == []
    assert read_hw(log) == 5  # the in-flight write finished
    log.append_as_leader(build_batch([(None, b"later", (), 0)] * 3), 0)
    log.update_high_watermark(log.log_end_offset)
    log.close()  # the final checkpoints, as at broker shutdown
    assert read_hw(log) == 8
