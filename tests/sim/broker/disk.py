"""A crash that loses what was never fsynced, for the real ``storage.log.Log`` on real files.

Theory of operation. While a ``DurabilityTracker`` is installed, ``os.fsync`` (which ``storage``
calls on segment data, index files, checkpoints and the leader-epoch cache) records the file's whole
content under its inode: that content is what a power loss keeps. ``power_loss(directory)`` then
rewinds every regular file below ``directory`` to its last fsynced content, or empties a file that
was never fsynced (its directory entry survives, as on a journaling file system, its data does not).
Keying by inode, not by name, makes ``write temp, fsync, rename`` (``storage.checkpoint``) right: the
renamed file keeps the inode its content was recorded under. A file deleted and re-created under the
same name gets a new inode, so it never inherits its predecessor's content (tmpfs does not reuse
inode numbers within a run). Unlinks and renames are durable at once: the storage code fsyncs the
directory after each one that matters.

A *process* crash (SIGKILL) needs nothing from here: the page cache keeps every written byte, and the
broker's objects — with their unwritten index entries — are simply dropped.

Only files under ``root`` are tracked; the real fsync is skipped for them (the bytes live in tmpfs
or a temp directory that the test removes, and skipping saves most of the I/O cost). Not
thread-safe; one simulation per process at a time.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import TracebackType


def _temp_root() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(os.environ.get("TMPDIR", "/tmp"))


TEMP_ROOT = _temp_root()  # tmpfs when there is one: several times faster than a disk for this


class DurabilityTracker:
    """Records fsynced content per inode below ``root`` while installed (a context manager)."""

    def __init__(self, root: Path) -> None:
        self.root = str(Path(root).resolve())
        self.synced: dict[int, bytes] = {}
        self.fsyncs = 0
        self._real_fsync = os.fsync

    def __enter__(self) -> DurabilityTracker:
        os.fsync = self._fsync
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        os.fsync = self._real_fsync

    def _fsync(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if not path.startswith(self.root):
            self._real_fsync(fd)
            return
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return  # a directory: renames and unlinks are durable at once here
        # Re-open through /proc: the descriptor may be write-only (a checkpoint's temp file).
        reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
        try:
            self.synced[info.st_ino] = _read_all(reader, info.st_size)
        finally:
            os.close(reader)
        self.fsyncs += 1

    def power_loss(self, directory: Path) -> int:
        """Rewind every file below ``directory`` to its fsynced content; returns the bytes lost."""
        lost = 0
        for dirpath, _dirs, files in os.walk(directory):
            for name in files:
                path = os.path.join(dirpath, name)
                info = os.stat(path)
                kept = self.synced.get(info.st_ino, b"")
                current = Path(path).read_bytes()
                if current != kept:
                    lost += max(0, len(current) - len(kept)) or 1
                    Path(path).write_bytes(kept)
        return lost


def _read_all(fd: int, size: int) -> bytes:
    parts, position = [], 0
    while position < size:
        chunk = os.pread(fd, size - position, position)
        if not chunk:
            break
        parts.append(chunk)
        position += len(chunk)
    return b"".join(parts)
