"""A byte range of a segment file that a Fetch answer sends without reading it (Kafka's FileRecords.slice).

``Log.read_slice`` returns one instead of the bytes: the listener then sends it with ``os.sendfile``
(page cache -> socket) after the response bytes that precede it, and reads it into memory only where
sendfile cannot serve. The segment's descriptor is a ``SharedFile``, reference counted (Kafka's
FileRecords shares its FileChannel the same way): the segment and every slice of it hold it, and it
closes when the last of them lets go. So a slice stays valid when retention deletes the segment, the
log rolls, or the cleaner swaps files while the answer is in flight (the inode lives until the
descriptor closes), and a fetch of many partitions costs no descriptor per partition. ``close()``
lets go (the listener does once the bytes are out); an unsent slice lets go when garbage collected.

A truncation of the file under a slice (a follower truncating its log) shortens what the file holds:
``read()`` then raises ``SliceTruncatedError`` (the sender likewise stops), never returning fewer bytes
than the size the response's length prefix announced.

``len(slice)`` is its size in bytes, so fetch budgets and ``min_bytes`` treat it like the bytes.
"""

from __future__ import annotations

import os


class SliceTruncatedError(Exception):
    """The file under a slice holds fewer bytes than the slice announced (the log was truncated)."""


class SharedFile:
    """A file descriptor closed when its last holder lets go (CPython's reference counting)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class FileSlice:
    __slots__ = ("_file", "name", "position", "size")

    def __init__(self, file: SharedFile | int, position: int, size: int, name: str) -> None:
        """A slice of a segment's ``SharedFile``, or of the file open as a plain ``fd`` (duplicated
        then: the caller keeps its own)."""
        assert position >= 0 and size > 0, f"{name}: slice at {position} of {size} bytes"
        self._file: SharedFile | None = file if isinstance(file, SharedFile) else SharedFile(os.dup(file))
        self.position = position
        self.size = size
        self.name = name  # the segment file, for messages

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"FileSlice({self.name}, position={self.position}, size={self.size})"

    def fileno(self) -> int:
        assert self._file is not None, f"{self!r} is closed"
        return self._file.fd

    @property
    def closed(self) -> bool:
        return self._file is None

    def read(self) -> bytes:
        """The slice's bytes (the in-memory fallback)."""
        fd = self.fileno()
        parts = []
        done = 0
        while done < self.size:
            chunk = os.pread(fd, self.size - done, self.position + done)
            if not chunk:
                raise SliceTruncatedError(
                    f"{self.name}: {self.size} bytes at {self.position} were announced but the file "
                    f"ends after {done} of them (truncated while the fetch answer was in flight)"
                )
            parts.append(chunk)
            done += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        self._file = None  # the descriptor closes with its last holder


Records = bytes | FileSlice  # what a log read answers: the bytes, or a slice of the segment file
