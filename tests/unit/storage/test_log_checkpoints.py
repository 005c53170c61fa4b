"""storage.log_checkpoints: checkpoint snapshots taken on the Log's thread and written in another.

The broker writes the periodic HW / log start / recovery point checkpoints in a worker thread while the
Log keeps writing some synchronously (a truncation's lowered HW, the log start offset, close). The
rules: the values are the ones taken with the snapshot; one writer per file at a time; a snapshot
superseded by a newer write, or whose log was closed (and maybe deleted and re-created under the same
name), writes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_log_helpers import FakeClock, filled, log_factory, make_batch

import storage.checkpoint
from broker.replica.log_manager import LogManager
from storage.checkpoint import OffsetCheckpoint
from storage.log_loader import HIGH_WATERMARK_FILE, RECOVERY_POINT_FILE

WAIT_S = 30.0  # an "eventually" condition on a loaded machine (another thread must get a core)
BLOCKED_CHECK_S = 1.0  # how long a thread that is NOT blocked needs to finish two small file writes


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator:
    yield from log_factory(tmp_path, FakeClock())


def read_hw(directory: Path) -> int | None:
    return OffsetCheckpoint(directory / HIGH_WATERMARK_FILE).read()


def test_a_snapshot_writes_the_offsets_it_took_not_the_current_ones(open_log) -> None:
    """The worker reads nothing of the Log: a HW that moved after the snapshot waits for the next."""
    log = filled(open_log)  # 15 records
    log.update_high_watermark(9)
    snapshot = log.checkpoint_snapshot()
    assert snapshot is not None
    log.update_high_watermark(12)
    assert snapshot.write() == 3  # HW, log start offset, recovery point: none written yet
    assert read_hw(log.directory) == 9
    newer = log.checkpoint_snapshot()
    assert newer is not None and [name for name, _, _ in newer.entries] == ["high_watermark"]
    assert newer.write() == 1
    assert read_hw(log.directory) == 12
    assert log.checkpoint_snapshot() is None  # every file current


@pytest.mark.parametrize(
    "truncate_to", [6, 9], ids=["lowered-hw-written-now", "lowered-hw-already-in-the-file"]
)
def test_a_snapshot_superseded_by_a_synchronous_write_writes_nothing(open_log, truncate_to: int) -> None:
    """A follower truncation lowers the HW and writes it at once (a checkpoint above the HW would cover
    the next leader's uncommitted records); a snapshot of the higher HW still in flight must not
    overwrite it — also when the lowered HW equals what the file already held (no write then)."""
    log = filled(open_log)
    log.update_high_watermark(9)
    log.write_checkpoints()
    log.update_high_watermark(12)
    snapshot = log.checkpoint_snapshot()
    assert snapshot is not None
    log.truncate_to(truncate_to)
    assert log.high_watermark == truncate_to
    assert snapshot.write() == 0
    assert read_hw(log.directory) == truncate_to


def test_a_snapshot_of_a_closed_log_writes_nothing(open_log) -> None:
    log = filled(open_log)
    log.update_high_watermark(9)
    snapshot = log.checkpoint_snapshot()
    assert snapshot is not None
    log.update_high_watermark(12)
    log.close()  # writes its final checkpoints itself
    assert snapshot.write() == 0
    assert read_hw(log.directory) == 12
    assert log.checkpoint_snapshot() is None


def test_a_snapshot_of_a_deleted_log_never_reaches_the_recreated_topics_directory(tmp_path: Path) -> None:
    """Topic deleted (its directory renamed to ``<dir>.N-delete``) and re-created under the same name
    while a checkpoint write of the old log is in flight: the new directory keeps its own offsets."""
    manager = LogManager(tmp_path, topic_defaults={}, clock_ms=FakeClock())
    tp = ("topic", 0)
    old = manager.get_or_create_log(tp)
    for _ in range(3):
        old.append_as_leader(make_batch(3), 0)
    old.update_high_watermark(old.log_end_offset)
    snapshot = old.checkpoint_snapshot()
    assert snapshot is not None
    manager.remove_log(tp, delete=True)
    new = manager.get_or_create_log(tp)
    try:
        assert new.directory == old.directory
        assert snapshot.write() == 0
        assert read_hw(new.directory) in (None, 0)
        assert OffsetCheckpoint(new.directory / RECOVERY_POINT_FILE).read() in (None, 0)
        assert sorted(p.name for p in new.directory.iterdir() if p.name.endswith(".tmp")) == []
    finally:
        manager.close()


def test_one_writer_per_checkpoint_file(open_log, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both writers use ``<name>.tmp``: while a snapshot's write is in the worker, the Log's own
    synchronous write of the same file waits for it, and then writes the newer value last."""
    log = filled(open_log)
    log.update_high_watermark(12)
    snapshot = log.checkpoint_snapshot()
    assert snapshot is not None
    real_write = storage.checkpoint.write_atomically
    active: dict[Path, int] = {}
    overlaps: list[Path] = []
    in_worker, release = threading.Event(), threading.Event()

    def tracked_write(path: Path, data: bytes) -> None:
        active[path] = active.get(path, 0) + 1
        if active[path] > 1:
            overlaps.append(path)
        try:
            if threading.current_thread().name == "worker" and path.name == HIGH_WATERMARK_FILE:
                in_worker.set()
                assert release.wait(WAIT_S), "the test never released the worker's write"
            real_write(path, data)
        finally:
            active[path] -= 1

    monkeypatch.setattr(storage.checkpoint, "write_atomically", tracked_write)
    worker = threading.Thread(target=snapshot.write, name="worker")
    worker.start()
    truncating = threading.Thread(target=log.truncate_to, args=(6,), name="owner")
    try:
        assert in_worker.wait(WAIT_S)
        truncating.start()  # the Log's owner for now: the test thread does not touch the log meanwhile
        # A negative check needs a bounded wait: unblocked, the truncation's writes take milliseconds.
        truncating.join(BLOCKED_CHECK_S)
        assert truncating.is_alive(), "the synchronous write did not wait for the worker's"
    finally:
        release.set()
        worker.join(WAIT_S)
        if truncating.ident is not None:
            truncating.join(WAIT_S)
    assert not worker.is_alive() and not truncating.is_alive()
    assert overlaps == []
    assert read_hw(log.directory) == 6  # the worker's 12 first, the truncation's 6 last
