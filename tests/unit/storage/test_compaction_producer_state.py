"""Idempotent-producer state survives log compaction (storage.cleaner + storage.producer_state_log).

Kafka's cleaner keeps each producer's last batch (empty if all its records were superseded), with its
producer epoch, base sequence and lastOffsetDelta, so that rebuilding the state from the log — here
without any snapshot — still knows every producer's last sequence; a gap in a producer's sequences
(its middle batches compacted away) restarts the dedup window instead of breaking its invariants.
"""

from __future__ import annotations

from pathlib import Path

from proto.clock import wall_clock_ms
from storage import cleaner, producer_snapshot
from storage.config import LogConfig
from storage.log import Log
from storage.producer_state import APPEND, Duplicate, ProducerBatch, Reject
from storage.record_batch import build_batch

CONFIG = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, retention_ms=None)
KEYS = [b"a", b"b", b"c"]


def produce(plog: Log, pid: int, sequence: int, value: bytes, keys: list[bytes] = KEYS) -> None:
    records = build_batch(
        [(key, value, (), 0) for key in keys], producer_id=pid, producer_epoch=0, base_sequence=sequence
    )
    assert plog.producer_state.check_all([ProducerBatch(pid, 0, sequence, len(KEYS) - 1)]) == APPEND
    plog.append_as_leader(records, 0)


def test_state_rebuilt_from_a_compacted_log_keeps_last_sequences(tmp_path: Path) -> None:
    plog = Log(tmp_path, CONFIG, wall_clock_ms, producer_id_expiration_ms=10**9)
    produce(plog, 7, 0, b"p7-kept", keys=[b"x", b"y", b"z"])  # never superseded
    for round_ in range(1, 4):  # producer 7: sequences 3..11, every record superseded by producer 8
        produce(plog, 7, round_ * 3, b"p7-%d" % round_)
        plog.roll()
    for round_ in range(2):
        produce(plog, 8, round_ * 3, b"p8-%d" % round_)
        plog.roll()
    produce(plog, 9, 0, b"p9")  # the active segment
    plog.update_high_watermark(plog.log_end_offset)
    expected_last = {pid: entry.last_seq for pid, entry in plog.producer_state.producers.items()}
    plan = plog.plan_cleaning()
    assert plan is not None and plog.finish_cleaning(cleaner.clean(plan))
    plog.close()

    producer_snapshot.delete_snapshots(tmp_path, above=-1)  # force a full replay of the compacted log
    assert producer_snapshot.snapshot_offsets(tmp_path) == []
    # Opening the log rebuilds the producer state from the compacted batches.
    plog = Log(tmp_path, CONFIG, wall_clock_ms, producer_id_expiration_ms=10**9)
    try:
        rebuilt = plog.producer_state
        rebuilt.invariants()
        assert {pid: e.last_seq for pid, e in rebuilt.producers.items()} == expected_last
        # Producer 7's last batch (sequences 9..11) is still a duplicate, 12 is the next in sequence.
        assert rebuilt.check(ProducerBatch(7, 0, 9, 2)) == Duplicate(9, 11)
        assert rebuilt.check(ProducerBatch(7, 0, 12, 2)) == APPEND
        assert isinstance(rebuilt.check(ProducerBatch(7, 0, 13, 2)), Reject)
    finally:
        plog.close()
