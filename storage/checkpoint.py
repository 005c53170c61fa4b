"""Small text checkpoint files, written atomically, in Kafka's checkpoint format.

Kafka keeps its offsets (high watermark, log start offset, recovery point) and the leader-epoch cache
in tiny text files. The format is Kafka's ``CheckpointFile``, one item per line, UTF-8::

    0              <- format version
    2              <- number of entries
    <entry 1>      <- for an offset: "<offset>"; for the leader-epoch cache: "<epoch> <start offset>"
    <entry 2>

Atomicity: a write goes to ``<name>.tmp``, is fsynced, renamed over ``<name>`` and the directory is
fsynced, so after a crash a reader sees either the old or the new file, never a mix. A leftover
``.tmp`` is garbage from a crash during the write and is ignored (and overwritten by the next write).

A file that exists but cannot be parsed means the disk lied to us: reading it raises
``KafkaStorageError`` naming the file and the line, never a bare ValueError.

Thread-safety: none; one writer per file at a time (a log's offset checkpoints, written from the
broker's checkpoint thread and the Log's owner, are serialized by ``storage.log_checkpoints``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from proto import errors

CHECKPOINT_VERSION = 0
TEMP_SUFFIX = ".tmp"


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory."""
    temp = path.with_name(path.name + TEMP_SUFFIX)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_dir(path.parent)


class CheckpointFile:
    """A checkpoint file holding a list of entries, each a tuple of ints (``width`` per entry)."""

    def __init__(self, path: Path, width: int) -> None:
        self.path = path
        self.width = width

    def write(self, entries: Sequence[tuple[int, ...]]) -> None:
        for entry in entries:
            assert len(entry) == self.width, f"{self.path.name}: entry {entry} needs {self.width} fields"
        lines = [str(CHECKPOINT_VERSION), str(len(entries))]
        lines.extend(" ".join(str(value) for value in entry) for entry in entries)
        write_atomically(self.path, ("\n".join(lines) + "\n").encode())

    def read(self) -> list[tuple[int, ...]] | None:
        """The entries, or None when the file does not exist."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise errors.KafkaStorageError(f"cannot read checkpoint {self.path}: {exc}") from None
        return self._parse(text.splitlines())

    def _parse(self, lines: list[str]) -> list[tuple[int, ...]]:
        version = self._ints(lines, 0, 1)[0]
        if version != CHECKPOINT_VERSION:
            self._corrupt(0, f"unsupported version {version}, expected {CHECKPOINT_VERSION}")
        count = self._ints(lines, 1, 1)[0]
        if count < 0 or len(lines) != 2 + count:
            self._corrupt(1, f"says {count} entries but the file has {len(lines) - 2}")
        return [self._ints(lines, 2 + i, self.width) for i in range(count)]

    def _ints(self, lines: list[str], index: int, width: int) -> tuple[int, ...]:
        if index >= len(lines):
            self._corrupt(index, "missing line")
        fields = lines[index].split()
        if len(fields) != width:
            self._corrupt(index, f"expected {width} integer(s), found {lines[index]!r}")
        try:
            return tuple(int(field) for field in fields)
        except ValueError:
            self._corrupt(index, f"not an integer: {lines[index]!r}")
            raise  # unreachable: _corrupt raises

    def _corrupt(self, index: int, reason: str) -> None:
        raise errors.KafkaStorageError(
            f"corrupt checkpoint {self.path} line {index + 1}: {reason}; "
            "delete the file to rebuild it from the log (offsets fall back to safe defaults)"
        )


class OffsetCheckpoint:
    """A checkpoint holding a single offset (high watermark, log start offset, recovery point)."""

    def __init__(self, path: Path) -> None:
        self._file = CheckpointFile(path, width=1)
        self.path = path

    def write(self, offset: int) -> None:
        assert offset >= 0, f"{self.path.name}: offset {offset} must be >= 0"
        self._file.write([(offset,)])

    def read(self) -> int | None:
        entries = self._file.read()
        if entries is None or not entries:
            return None
        if len(entries) != 1 or entries[0][0] < 0:
            raise errors.KafkaStorageError(
                f"corrupt checkpoint {self.path}: expected one offset >= 0, found {entries}"
            )
        return entries[0][0]
