"""Regressions the broker simulation found, replayed as explicit tests.

Each failing seed becomes a test here: the seed itself (the whole schedule, checked by the simulation's
invariants) and, where the cause is one component, a minimal reproduction on that component with the
same crash emulation (tests/sim/broker/disk.py). A seed names a schedule of the simulator as it is: a
change to the simulator's faults re-rolls every schedule, so the minimal reproductions are the
durable regression tests and the seeds are a cheap extra.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from proto.clock import wall_clock_ms
from storage.batch_header import iter_batches
from storage.config import LogConfig
from storage.log import Log
from storage.record_batch import build_batch
from tests.sim.broker.cluster import Sim
from tests.sim.broker.disk import TEMP_ROOT, DurabilityTracker

pytestmark = pytest.mark.sim


def _batch(offset: int, epoch: int, size: int = 0) -> bytes:
    value = f"v{offset}-e{epoch}".encode().ljust(size, b".")
    return build_batch([(None, value, (), offset)], base_offset=offset, partition_leader_epoch=epoch)


def _drop(log: Log) -> None:
    """The process dies: no flush, no checkpoint, no clean-shutdown marker."""
    for segment in log._segments:  # Log has no API that closes without flushing
        segment.close()


@pytest.fixture
def directory():
    root = Path(tempfile.mkdtemp(prefix="pykraft-recovery-", dir=TEMP_ROOT))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_recovery_rebuilds_epochs_that_a_power_loss_took_back(directory: Path) -> None:
    """Seed 1179: a follower flushed offsets 0-10 of epoch 0, truncated to 8 by a diverging epoch and
    fetched 8-10 of epoch 1 — the leader-epoch cache file (fsynced on every change) says epoch 1 starts
    at 8 — then lost power before the next flush: its segment holds the old epoch-0 batches 8-10 again.
    Recovery must not keep (1, 8): with it the follower fetches from 11 in epoch 1, the leader sees no
    divergence, and offsets 8-10 differ from the leader's forever, below the HW."""
    log_dir = directory / "sim-0"
    with DurabilityTracker(directory) as disk:
        log = Log(log_dir, LogConfig(), wall_clock_ms)
        for offset in range(11):
            log.append_as_follower(_batch(offset, 0))
        log.flush()
        log.truncate_to(8)
        for offset in range(8, 11):
            log.append_as_follower(_batch(offset, 1))
        assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(0, 0), (1, 8)]
        _drop(log)
        disk.power_loss(log_dir)
        recovered = Log(log_dir, LogConfig(), wall_clock_ms)
        try:
            # Either the truncation survived (it is fsynced now: LEO 8) or the old batches came back
            # (LEO 11); in both cases every batch's epoch is the one the cache gives for its offset.
            cache = recovered.leader_epoch_cache
            for _, header in iter_batches(recovered.read(0, 1 << 20), validate=False):
                assert cache.epoch_for_offset(header.base_offset) == header.partition_leader_epoch, (
                    header.base_offset,
                    header.partition_leader_epoch,
                    cache.entries,
                )
            assert all(e.start_offset < recovered.log_end_offset for e in cache.entries), cache.entries
        finally:
            recovered.close()


def test_a_follower_truncation_survives_a_power_loss(directory: Path) -> None:
    """Seed 5423 (100,000-seed run): a follower truncated inside a segment (offsets 2-3 -> 2), the next
    append rolled a segment at the truncation point, and a flush fsynced only from that new segment
    on — the recovery point's — never the truncated one. After a power loss the truncated batch came
    back under the new segment: overlapping offsets, and the log refused to load. A truncation is
    now made durable at once."""
    log_dir = directory / "sim-0"
    config = LogConfig(segment_bytes=240)  # batches of 78, 78 | 140, 78 bytes; then 140 | 108
    with DurabilityTracker(directory) as disk:
        log = Log(log_dir, config, wall_clock_ms)
        for offset, size in ((0, 10), (1, 10), (2, 70), (3, 10)):
            log.append_as_follower(_batch(offset, 0, size))
        log.flush()
        assert log.segment_base_offsets == (0, 2), log.segment_base_offsets
        log.truncate_to(3)  # a diverging epoch: offset 3 goes
        log.append_as_follower(_batch(3, 1, 40))
        assert log.segment_base_offsets == (0, 2, 3), log.segment_base_offsets
        log.flush()
        _drop(log)
        disk.power_loss(log_dir)
        recovered = Log(log_dir, config, wall_clock_ms)
        try:
            assert recovered.log_end_offset == 4
            assert recovered.leader_epoch_cache.epoch_for_offset(3) == 1
            assert recovered.read(3, 1 << 20)[:8] == (3).to_bytes(8, "big")
        finally:
            recovered.close()


@pytest.mark.parametrize(
    "seed",
    [
        1179,  # the leader-epoch cache ahead of batches a power loss took back (test above)
        1216,  # a fetcher replaced for the same leader must still be scheduled (the simulator's driver)
        1007,  # forgetting history after an amnesic leader must not re-commit a stale replica's prefix
        380,  # a paused zombie leader of an older epoch is not the elected leader: no forgetting for it
        981,  # (the same) a consumer must not see history forgotten because of a zombie
        1990,  # after an unclean election a replica is reconciled only once it holds a newer record
        2424,  # (100,000-seed run) a zombie leader's history after an unclean election is not committed
        4874,  # (100,000-seed run) after a power loss a replica lacks what it held unseen by the checker
        5423,  # (100,000-seed run) a follower truncation survives a power loss (test above)
        18162,  # (100,000-seed run) a follower outside the ISR truncates above its HW for a replaced leader
        23897,  # (100,000-seed run) a HW checkpoint capped at a power-lost log is rewritten at load
        33393,  # a zombie leader's HW after an unclean election commits nothing, even kept as a follower
        41978,  # an amnesic leader's lack is forgotten even once its partition went offline (no successor)
        51832,  # a zombie leader's HW counting a fetch sent before the fetcher's power loss commits nothing
    ],
)
def test_seeds_that_once_failed(seed: int) -> None:
    Sim(seed).run()
