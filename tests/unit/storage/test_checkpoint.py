"""Checkpoint files (storage/checkpoint.py): Kafka's text format, atomic replace, named errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proto import errors
from storage.checkpoint import CheckpointFile, OffsetCheckpoint, write_atomically


def test_offset_round_trip_and_format(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpoint(tmp_path / "high-watermark-checkpoint")
    assert checkpoint.read() is None, "a missing file is 'nothing saved yet'"
    checkpoint.write(42)
    assert checkpoint.read() == 42
    assert (tmp_path / "high-watermark-checkpoint").read_text() == "0\n1\n42\n"
    checkpoint.write(7)
    assert checkpoint.read() == 7


def test_write_is_atomic_temp_fsync_rename(tmp_path: Path, monkeypatch) -> None:
    """Temp file, fsync, rename, fsync the directory: a reader sees the old or the new file, whole."""
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(b"old")
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append(f"replace {Path(src).name}")
        assert path.read_bytes() == b"old", "the target is untouched until the rename"
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_atomically(path, b"new")
    assert events == ["fsync", "replace recovery-point-offset-checkpoint.tmp", "fsync"]
    assert path.read_bytes() == b"new"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_leftover_temp_file_is_ignored(tmp_path: Path) -> None:
    """A crash during a write leaves a .tmp; the real file still holds the previous value."""
    checkpoint = OffsetCheckpoint(tmp_path / "cp")
    checkpoint.write(5)
    (tmp_path / "cp.tmp").write_bytes(b"garbage")
    assert checkpoint.read() == 5
    checkpoint.write(6)
    assert checkpoint.read() == 6


def test_multi_field_entries(tmp_path: Path) -> None:
    file = CheckpointFile(tmp_path / "cp", width=2)
    file.write([(1, 0), (3, 10)])
    assert file.read() == [(1, 0), (3, 10)]
    file.write([])
    assert file.read() == []


CORRUPT = [
    pytest.param(b"", "line 1: missing line", id="empty"),
    pytest.param(b"1\n1\n5\n", "unsupported version 1", id="version"),
    pytest.param(b"0\n2\n5\n", "says 2 entries but the file has 1", id="count-too-high"),
    pytest.param(b"0\n-1\n", "says -1 entries", id="count-negative"),
    pytest.param(b"0\n1\nfive\n", "not an integer", id="not-int"),
    pytest.param(b"0\n1\n5 6\n", "expected 1 integer(s)", id="two-fields"),
    pytest.param(b"0\n1\n-5\n", "one offset >= 0", id="negative-offset"),
    pytest.param(b"\xff\x00", "cannot read", id="binary"),
]


@pytest.mark.parametrize(("content", "words"), CORRUPT)
def test_corrupt_offset_checkpoint(tmp_path: Path, content: bytes, words: str) -> None:
    """KAFKA_STORAGE_ERROR naming the file and the problem; never a bare ValueError."""
    (tmp_path / "cp").write_bytes(content)
    with pytest.raises(errors.KafkaStorageError) as raised:
        OffsetCheckpoint(tmp_path / "cp").read()
    assert words in str(raised.value) and "cp" in str(raised.value)


def test_negative_offset_write_is_a_bug(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="-1"):
        OffsetCheckpoint(tmp_path / "cp").write(-1)
