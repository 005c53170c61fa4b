"""storage.producer_state_log + storage.producer_snapshot: the producer state a Log owns.

Rules: a snapshot ``<offset>.snapshot`` is written when a segment rolls and is exact at that offset;
recovery loads the newest snapshot <= the log end offset and replays only the batches after it;
truncation drops newer snapshots and rebuilds; a corrupt snapshot is skipped.
"""

from __future__ import annotations

from pathlib import Path

from storage import producer_snapshot
from storage.config import LogConfig
from storage.log import Log
from storage.producer_state import Duplicate, ProducerBatch, ProducerStateManager
from storage.producer_state_log import replay
from storage.record_batch import build_batch

PID = 42
MIN_SEGMENT = 1024


def open_log(directory: Path) -> Log:
    # A fixed clock: a replayed batch's last_update_ms is the replay's time, the original's the append's.
    return Log(
        directory, LogConfig(segment_bytes=MIN_SEGMENT), clock_ms=lambda: 0, producer_id_expiration_ms=10_000
    )


def produce(plog: Log, sequence: int, count: int = 4) -> None:
    records = build_batch(
        [(None, b"x" * 100, (), 0)] * count, producer_id=PID, producer_epoch=0, base_sequence=sequence
    )
    plog.append_as_leader(records, 0)


def test_snapshots_at_roll_and_recovery_replays_only_the_tail(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    for i in range(20):
        produce(plog, i * 4)
    assert len(plog.segment_base_offsets) > 2, plog.segment_base_offsets
    snapshots = producer_snapshot.snapshot_offsets(tmp_path)
    assert snapshots and snapshots[-1] == plog.segment_base_offsets[-1]
    expected = dict(plog.producer_state.producers)
    plog.close()

    plog = open_log(tmp_path)
    assert plog.producer_state.producers == expected
    assert plog.producer_state.check(ProducerBatch(PID, 0, 76, 3)) == Duplicate(76, 79)
    replayed = replay(plog, ProducerStateManager(), snapshots[-1], 0)
    assert replayed < 20, f"recovery replays the tail after the snapshot only, not {replayed} batches"
    plog.close()


def test_truncation_drops_newer_snapshots_and_rebuilds(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    for i in range(20):
        produce(plog, i * 4)
    cut = plog.segment_base_offsets[1] + 4
    assert plog.truncate_to(cut)
    assert all(o <= cut for o in producer_snapshot.snapshot_offsets(tmp_path))
    assert plog.producer_state.producers[PID].batches[-1].last_offset == cut - 1
    plog.producer_state.invariants()
    plog.close()


def test_truncate_fully_forgets_every_producer(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    for i in range(20):
        produce(plog, i * 4)
    plog.truncate_fully_and_start_at(plog.log_end_offset + 10)
    assert plog.producer_state.producers == {}
    assert producer_snapshot.snapshot_offsets(tmp_path) == []
    plog.close()


def test_corrupt_snapshot_is_skipped(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    for i in range(20):
        produce(plog, i * 4)
    expected = dict(plog.producer_state.producers)
    latest = producer_snapshot.snapshot_offsets(tmp_path)[-1]
    producer_snapshot.snapshot_path(tmp_path, latest).write_bytes(b"\x00\x01garbage")
    plog.close()
    plog = open_log(tmp_path)
    assert plog.producer_state.producers == expected
    plog.close()
