"""The Raft node's durable state in one rocksdict (RocksDB) database: hard state, log, snapshot.

Durability rule (Raft Figure 2): term and vote are on disk before a vote is granted, and entries are
on disk before they are acknowledged or counted. The driver gathers everything one ``Ready`` asks to
persist into ONE ``WriteBatch`` written with ``sync=True`` (group commit: one fsync for many entries,
~1 ms, instead of one per entry). A batch is atomic, so a crash leaves either all of it or none.

Bytes on disk (all integers big-endian; CRC-32C over the bytes named, so a value that is torn,
garbled or copied under the wrong key is detected):

=====================  ==========================================================================
key                    value
=====================  ==========================================================================
``00 "format"``        ``FORMAT_MAGIC`` — written when the store is created; refused if different
``01 "hard_state"``    term u64 | vote u32 | crc u32 (over term, vote)
``02 "snap_meta"``     last_index u64 | last_term u64 | size u64 | data_crc u32 | crc u32 (over the rest)
``03 "snap_data"``     the state machine's snapshot bytes (``size`` bytes, CRC ``data_crc``)
``04`` index u64       one log entry: term u64 | kind u8 | crc u32 (over index, term, kind, data) | data
=====================  ==========================================================================

Invariants checked by ``load()`` (a violation raises ``RaftStoreCorruptError`` naming the path):
the format key is present in a non-empty store; every value decodes and its CRC matches; entry
indexes are contiguous (no gap); the first entry is index 1, or, with a snapshot, at most
``snapshot.last_index + 1``; an entry at ``snapshot.last_index`` has ``snapshot.last_term``; entry
terms never decrease and never exceed the hard state's term; snapshot data exists when its meta does.

Not thread-safe: one owner (the driver) calls it; ``write`` may run on a worker thread while the
owner awaits it, but never two at once.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c
from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from raft.messages import Entry, EntryKind, HardState, Snapshot, SnapshotMeta

FORMAT_KEY = b"\x00format"
FORMAT_MAGIC = b"pykraft-raft-store/1"
HARD_STATE_KEY = b"\x01hard_state"
SNAP_META_KEY = b"\x02snap_meta"
SNAP_DATA_KEY = b"\x03snap_data"
ENTRY_PREFIX = b"\x04"
ENTRY_PREFIX_END = b"\x05"

_HARD_STATE = struct.Struct(">QII")
_SNAP_META = struct.Struct(">QQQII")
_ENTRY_HEAD = struct.Struct(">QBI")
_INDEX = struct.Struct(">Q")
ROCKSDB_MARKER_FILE = "CURRENT"


class RaftStoreCorruptError(Exception):
    """The store at ``path`` is corrupt, half-written or not a Raft store; nothing was changed."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(
            f"Raft store {path} is unusable: {problem}. Restore the directory from a replica "
            f"(or delete it to rejoin as an empty node if a quorum still holds the log)."
        )
        self.path = path
        self.problem = problem


@dataclass(frozen=True, slots=True)
class StoredState:
    """What a restarted node recovers: its hard state, latest snapshot and the log after it."""

    hard_state: HardState
    snapshot: Snapshot | None
    entries: list[Entry]

    @property
    def last_index(self) -> int:
        if self.entries:
            return self.entries[-1].index
        return self.snapshot.meta.last_index if self.snapshot else 0


def entry_key(index: int) -> bytes:
    return ENTRY_PREFIX + _INDEX.pack(index)


def encode_entry(entry: Entry) -> bytes:
    crc = crc32c.crc32c(
        _INDEX.pack(entry.index) + _INDEX.pack(entry.term) + bytes((entry.kind,)) + entry.data
    )
    return _ENTRY_HEAD.pack(entry.term, entry.kind, crc) + entry.data


def encode_hard_state(hs: HardState) -> bytes:
    body = struct.pack(">QI", hs.term, hs.vote)
    return _HARD_STATE.pack(hs.term, hs.vote, crc32c.crc32c(body))


def encode_snapshot_meta(snapshot: Snapshot) -> bytes:
    meta = snapshot.meta
    body = struct.pack(
        ">QQQI", meta.last_index, meta.last_term, len(snapshot.data), crc32c.crc32c(snapshot.data)
    )
    return body + struct.pack(">I", crc32c.crc32c(body))


class RaftStore:
    """Durable hard state, log entries and snapshot of one Raft node (see the module docstring)."""

    def __init__(self, path: Path, db: Rdict) -> None:
        self.path = path
        self._db = db
        self._sync = WriteOptions()
        self._sync.sync = True

    @classmethod
    def open(cls, path: Path | str) -> RaftStore:
        """Open (creating if absent) the store at ``path``; refuse a directory that is not ours."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise RaftStoreCorruptError(path, "it is a file, not a directory")
        if path.is_dir() and any(path.iterdir()) and not (path / ROCKSDB_MARKER_FILE).exists():
            raise RaftStoreCorruptError(path, "the directory is not empty and holds no RocksDB database")
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        try:
            db = Rdict(str(path), options)
        except Exception as exc:  # rocksdict raises a bare Exception for every RocksDB error
            raise RaftStoreCorruptError(path, f"RocksDB cannot open it ({exc})") from exc
        store = cls(path, db)
        magic = db.get(FORMAT_KEY)
        if magic is None:
            if next(iter(db.keys()), None) is not None:
                db.close()
                raise RaftStoreCorruptError(path, "the format key is missing from a non-empty database")
            db.put(FORMAT_KEY, FORMAT_MAGIC, store._sync)
        elif magic != FORMAT_MAGIC:
            db.close()
            raise RaftStoreCorruptError(path, f"unknown format {magic[:40]!r}, expected {FORMAT_MAGIC!r}")
        return store

    def close(self) -> None:
        self._db.close()

    # ---- write ---------------------------------------------------------------------------------

    def write(
        self,
        *,
        hard_state: HardState | None = None,
        truncate_from: int | None = None,
        entries: Sequence[Entry] = (),
        snapshot: Snapshot | None = None,
        compact_through: int | None = None,
    ) -> None:
        """Persist one Ready's worth of changes atomically with a single fsync.

        Order inside the batch follows ``Ready``: drop entries ``>= truncate_from``, append
        ``entries``, save ``hard_state``, save ``snapshot`` (dropping entries it covers), then drop
        entries ``<= compact_through`` (log compaction below a snapshot the state machine took).
        """
        batch = WriteBatch(raw_mode=True)
        if truncate_from is not None:
            batch.delete_range(entry_key(truncate_from), ENTRY_PREFIX_END)
        for entry in entries:
            batch.put(entry_key(entry.index), encode_entry(entry))
        if hard_state is not None:
            batch.put(HARD_STATE_KEY, encode_hard_state(hard_state))
        if snapshot is not None:
            batch.put(SNAP_META_KEY, encode_snapshot_meta(snapshot))
            batch.put(SNAP_DATA_KEY, snapshot.data)
        if compact_through is not None and compact_through > 0:
            batch.delete_range(entry_key(1), entry_key(compact_through + 1))
        if not batch.is_empty():
            self._db.write(batch, self._sync)

    # ---- load ----------------------------------------------------------------------------------

    def load(self) -> StoredState:
        """Read and validate everything; raise ``RaftStoreCorruptError`` on any inconsistency."""
        hard_state = self._load_hard_state()
        snapshot = self._load_snapshot()
        entries = self._load_entries()
        self._check_log_shape(hard_state, snapshot, entries)
        return StoredState(hard_state, snapshot, entries)

    def _corrupt(self, problem: str) -> RaftStoreCorruptError:
        return RaftStoreCorruptError(self.path, problem)

    def _load_hard_state(self) -> HardState:
        raw = self._db.get(HARD_STATE_KEY)
        if raw is None:
            return HardState()
        if len(raw) != _HARD_STATE.size:
            raise self._corrupt(f"hard state is {len(raw)} bytes, expected {_HARD_STATE.size}")
        term, vote, crc = _HARD_STATE.unpack(raw)
        if crc32c.crc32c(raw[:12]) != crc:
            raise self._corrupt("hard state fails its CRC-32C check")
        return HardState(term=term, vote=vote)

    def _load_snapshot(self) -> Snapshot | None:
        raw = self._db.get(SNAP_META_KEY)
        if raw is None:
            return None
        if len(raw) != _SNAP_META.size:
            raise self._corrupt(f"snapshot meta is {len(raw)} bytes, expected {_SNAP_META.size}")
        last_index, last_term, size, data_crc, crc = _SNAP_META.unpack(raw)
        if crc32c.crc32c(raw[:-4]) != crc:
            raise self._corrupt("snapshot meta fails its CRC-32C check")
        data = self._db.get(SNAP_DATA_KEY)
        if data is None:
            raise self._corrupt(f"snapshot meta (last_index={last_index}) names data that is missing")
        if len(data) != size or crc32c.crc32c(data) != data_crc:
            raise self._corrupt(
                f"snapshot data is {len(data)} bytes with a different CRC than its meta ({size} bytes)"
            )
        return Snapshot(SnapshotMeta(last_index=last_index, last_term=last_term), bytes(data))

    def _load_entries(self) -> list[Entry]:
        entries: list[Entry] = []
        for key, value in self._db.items(from_key=ENTRY_PREFIX):
            assert isinstance(key, bytes)  # the store is opened in raw mode: keys are bytes
            if not key.startswith(ENTRY_PREFIX):
                break
            entries.append(self._decode_entry(key, value))
        return entries

    def _decode_entry(self, key: bytes, value: bytes) -> Entry:
        if len(key) != 1 + _INDEX.size:
            raise self._corrupt(f"log key {key.hex()} is not a 9-byte entry key")
        (index,) = _INDEX.unpack_from(key, 1)
        if len(value) < _ENTRY_HEAD.size:
            raise self._corrupt(f"entry {index} is {len(value)} bytes, shorter than its header")
        term, kind, crc = _ENTRY_HEAD.unpack_from(value)
        data = bytes(value[_ENTRY_HEAD.size :])
        if crc32c.crc32c(key[1:] + value[:9] + data) != crc:
            raise self._corrupt(f"entry {index} fails its CRC-32C check")
        if kind not in EntryKind._value2member_map_:
            raise self._corrupt(f"entry {index} has unknown kind {kind}")
        return Entry(term=term, index=index, data=data, kind=EntryKind(kind))

    def _check_log_shape(self, hs: HardState, snapshot: Snapshot | None, entries: list[Entry]) -> None:
        snap_index = snapshot.meta.last_index if snapshot else 0
        if entries and entries[0].index > snap_index + 1:
            raise self._corrupt(
                f"log starts at index {entries[0].index} but the snapshot covers only up to {snap_index}"
            )
        previous: Entry | None = None
        for entry in entries:
            if previous is not None and entry.index != previous.index + 1:
                raise self._corrupt(f"gap in the log between index {previous.index} and {entry.index}")
            if previous is not None and entry.term < previous.term:
                raise self._corrupt(f"entry {entry.index} has term {entry.term} < {previous.term} before it")
            if snapshot and entry.index == snap_index and entry.term != snapshot.meta.last_term:
                raise self._corrupt(
                    f"entry {entry.index} has term {entry.term}, snapshot says {snapshot.meta.last_term}"
                )
            previous = entry
        last_term = max(entries[-1].term if entries else 0, snapshot.meta.last_term if snapshot else 0)
        if last_term > hs.term:
            raise self._corrupt(f"the log holds term {last_term}, beyond the saved current term {hs.term}")
