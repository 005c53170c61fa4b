"""broker.replica.log_manager.LogManager's log lifecycle on a real directory: a deleted replica's directory is
renamed before it is removed, so a topic re-created under the same name starts empty even when the
removal fails (Kafka's ``<dir>.<id>-delete``), and a failed removal is logged at ERROR."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from broker.replica.log_manager import LogManager
from proto.kafka_types import TopicPartition
from storage.record_batch import build_batch

TP = TopicPartition("orders", 0)


def manager(tmp_path: Path) -> LogManager:
    return LogManager(tmp_path, topic_defaults={}, clock_ms=lambda: 1_000)


def append_one(m: LogManager) -> None:
    plog = m.get_or_create_log(TP)
    plog.append_as_leader(build_batch([(None, b"old", (), 1_000)]), leader_epoch=0)


def test_a_deleted_log_leaves_nothing_and_a_new_one_starts_empty(tmp_path: Path) -> None:
    m = manager(tmp_path)
    append_one(m)
    assert m.logs[TP].log_end_offset == 1
    m.remove_log(TP, delete=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert m.get_or_create_log(TP).log_end_offset == 0


def test_a_failed_removal_is_logged_and_the_old_records_never_come_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    m = manager(tmp_path)
    append_one(m)

    def fail(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", fail)
    with caplog.at_level(logging.ERROR, logger="broker.replica.log_manager"):
        m.remove_log(TP, delete=True)
    [record] = caplog.records
    assert record.getMessage() == "log_delete_failed" and isinstance(record.exc_info[1], PermissionError)
    assert [p.name for p in tmp_path.iterdir()] == ["orders-0.1-delete"]  # renamed, left for the operator
    assert m.get_or_create_log(TP).log_end_offset == 0  # the re-created topic does not see "old"
