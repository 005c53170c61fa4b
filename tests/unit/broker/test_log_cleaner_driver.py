"""broker.replica.log_cleaner: the broker's compaction rounds (plan on the loop, clean in a thread, swap,
finalize)
and its settings (log.cleaner.backoff.ms, log.cleaner.enable)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from broker.config import BrokerConfigError, parse_overrides
from broker.replica.log_cleaner import LogCleanerDriver
from proto.clock import wall_clock_ms
from storage import cleaner
from storage.config import LogConfig
from storage.log import Log
from storage.record_batch import build_batch, iter_records

COMPACT = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, retention_ms=None)


def filled(directory: Path, config: LogConfig, rounds: int = 4) -> Log:
    log = Log(directory, config, wall_clock_ms)
    for round_ in range(rounds):
        log.append_as_leader(build_batch([(b"k%d" % i, b"v%d" % round_, (), 0) for i in range(3)]), 0)
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    return log


def test_a_round_cleans_only_compacted_logs_and_leaves_no_files(tmp_path: Path) -> None:
    logs = {
        ("compacted", 0): filled(tmp_path / "compacted-0", COMPACT),
        ("plain", 0): filled(tmp_path / "plain-0", LogConfig(retention_ms=None)),
    }
    driver = LogCleanerDriver(lambda: logs, backoff_ms=1)
    try:
        assert asyncio.run(driver.clean_round()) == 1
        assert asyncio.run(driver.clean_round()) == 0  # nothing dirty any more
        compacted = logs[("compacted", 0)]
        values = [r.value for r in iter_records(compacted.read(0, 1 << 20))]
        assert values == [b"v3"] * 3
        assert len(list(iter_records(logs[("plain", 0)].read(0, 1 << 20)))) == 3  # one segment per read
        leftovers = (
            cleaner.CLEANED_SUFFIX,
            cleaner.DELETED_SUFFIX,
            cleaner.COMMIT_FILE,
            cleaner.STAGED_COMMIT_FILE,
        )
        assert not [p for p in compacted.directory.iterdir() if p.name.endswith(leftovers)]
    finally:
        for log in logs.values():
            log.close()


def test_a_failed_pass_is_given_up_and_retried(tmp_path: Path) -> None:
    """A corrupt segment fails the pass in the thread: logged, no file left, the log stays as it was
    and the next round plans again."""
    log = filled(tmp_path / "compacted-0", COMPACT)
    first = log._segments[0]
    with open(first.log_path, "r+b") as file:  # flip a byte inside the first batch's records
        file.seek(first.size_bytes - 2)
        byte = file.read(1)
        file.seek(first.size_bytes - 2)
        file.write(bytes([byte[0] ^ 0xFF]))
    driver = LogCleanerDriver(lambda: {("compacted", 0): log}, backoff_ms=1)
    try:
        assert asyncio.run(driver.clean_round()) == 0
        assert not [p for p in log.directory.iterdir() if p.name.endswith(cleaner.CLEANED_SUFFIX)]
        assert log.plan_cleaning() is not None  # not stuck "cleaning"
    finally:
        log.close()
    assert os.path.exists(first.log_path)


def test_settings() -> None:
    settings = parse_overrides(["log.cleaner.backoff.ms=200", "log.cleaner.enable=false"])
    assert (settings.log_cleaner_backoff_ms, settings.log_cleaner_enable) == (200, False)
    assert parse_overrides([]).log_cleaner_enable is True
    with pytest.raises(BrokerConfigError, match="must be true or false"):
        parse_overrides(["log.cleaner.enable=yes"])
    with pytest.raises(BrokerConfigError, match="must be an integer >= 1"):
        parse_overrides(["log.cleaner.backoff.ms=0"])
