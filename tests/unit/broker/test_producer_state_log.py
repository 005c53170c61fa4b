"""broker.producer_state_log + storage.producer_snapshot: producer state on a real Log.

Rules: a snapshot ``<offset>.snapshot`` is written when a segment rolls and is exact at that offset;
recovery loads the newest snapshot <= the log end offset and replays only the batches after it;
truncation drops newer snapshots and rebuilds; a corrupt snapshot is skipped.
"""

from __future__ import annotations

from pathlib import Path

from broker.producer_state import Duplicate, ProducerBatch, ProducerStateManager
from broker.producer_state_log import PartitionProducerState, replay
from storage import producer_snapshot
from storage.config import LogConfig
from storage.log import Log
from storage.record_batch import build_batch

PID = 42


def open_log(directory: Path) -> Log:
    return Log(directory, LogConfig(segment_bytes=MIN_SEGMENT))


MIN_SEGMENT = 1024


def produce(plog: Log, pstate: PartitionProducerState, sequence: int, count: int = 4) -> None:
    records = build_batch(
        [(None, b"x" * 100, (), 0)] * count, producer_id=PID, producer_epoch=0, base_sequence=sequence
    )
    before = plog.segment_base_offsets[-1]
    info = plog.append_as_leader(records, 0)
    pstate.after_append(records, before, now_ms=0, first_offset=info.first_offset)


def test_snapshots_at_roll_and_recovery_replays_only_the_tail(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    pstate = PartitionProducerState.open(plog, 10_000, 0)
    for i in range(20):
        produce(plog, pstate, i * 4)
    assert len(plog.segment_base_offsets) > 2, plog.segment_base_offsets
    snapshots = producer_snapshot.snapshot_offsets(tmp_path)
    assert snapshots and snapshots[-1] == plog.segment_base_offsets[-1]
    expected = dict(pstate.state.producers)
    plog.close()

    plog = open_log(tmp_path)
    recovered = PartitionProducerState.open(plog, 10_000, 0)
    assert recovered.state.producers == expected
    assert recovered.state.check(ProducerBatch(PID, 0, 76, 3)) == Duplicate(76, 79)
    replayed = replay(plog, ProducerStateManager(), snapshots[-1], 0)
    assert replayed < 20, f"recovery replays the tail after the snapshot only, not {replayed} batches"
    plog.close()


def test_truncation_drops_newer_snapshots_and_rebuilds(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    pstate = PartitionProducerState.open(plog, 10_000, 0)
    for i in range(20):
        produce(plog, pstate, i * 4)
    cut = plog.segment_base_offsets[1] + 4
    plog.truncate_to(cut)
    pstate.truncate(0)
    assert all(o <= cut for o in producer_snapshot.snapshot_offsets(tmp_path))
    assert pstate.state.producers[PID].batches[-1].last_offset == cut - 1
    pstate.state.invariants()
    plog.close()


def test_corrupt_snapshot_is_skipped(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    pstate = PartitionProducerState.open(plog, 10_000, 0)
    for i in range(20):
        produce(plog, pstate, i * 4)
    expected = dict(pstate.state.producers)
    latest = producer_snapshot.snapshot_offsets(tmp_path)[-1]
    producer_snapshot.snapshot_path(tmp_path, latest).write_bytes(b"\x00\x01garbage")
    plog.close()
    plog = open_log(tmp_path)
    assert PartitionProducerState.open(plog, 10_000, 0).state.producers == expected
    plog.close()
