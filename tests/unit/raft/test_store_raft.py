"""RaftStore: durable hard state, log and snapshot; corrupt or half-written stores are refused.

Raft Figure 2: currentTerm, votedFor and log[] are persistent state, updated on stable storage before
responding to RPCs; a restart recovers them. A store that cannot be trusted raises
``RaftStoreCorruptError`` naming the path instead of being silently accepted.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import crc32c
import pytest
from rocksdict import Options, Rdict

from raft.messages import Entry, EntryKind, HardState, Snapshot, SnapshotMeta
from raft.store import (
    ENTRY_PREFIX,
    FORMAT_KEY,
    HARD_STATE_KEY,
    SNAP_DATA_KEY,
    SNAP_META_KEY,
    RaftStore,
    RaftStoreCorruptError,
    encode_entry,
    entry_key,
)


def entries(first: int, last: int, term: int = 1) -> list[Entry]:
    return [Entry(term=term, index=i, data=f"e{i}".encode()) for i in range(first, last + 1)]


def reopen(path: Path) -> RaftStore:
    return RaftStore.open(path)


def test_fresh_store_is_empty(tmp_path: Path) -> None:
    store = RaftStore.open(tmp_path / "db")
    state = store.load()
    store.close()
    assert state.hard_state == HardState() and state.snapshot is None and state.entries == []
    assert state.last_index == 0


def test_restart_recovers_hard_state_and_entries(tmp_path: Path) -> None:
    """Raft Figure 2: term, vote and log survive a restart."""
    store = RaftStore.open(tmp_path / "db")
    noop = Entry(term=3, index=1, kind=EntryKind.NOOP)
    store.write(hard_state=HardState(term=3, vote=2), entries=[noop, *entries(2, 5, term=3)])
    store.close()
    store = reopen(tmp_path / "db")
    state = store.load()
    store.close()
    assert state.hard_state == HardState(term=3, vote=2)
    assert state.entries == [noop, *entries(2, 5, term=3)]


def test_truncate_then_append_in_one_batch(tmp_path: Path) -> None:
    """Raft §5.3: a follower deletes a conflicting entry and all that follow it, then appends."""
    store = RaftStore.open(tmp_path / "db")
    store.write(hard_state=HardState(term=1), entries=entries(1, 6))
    store.write(hard_state=HardState(term=2), truncate_from=4, entries=entries(4, 5, term=2))
    state = store.load()
    store.close()
    assert [(e.index, e.term) for e in state.entries] == [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2)]


def test_snapshot_and_compaction(tmp_path: Path) -> None:
    """Raft §7: entries covered by a snapshot may be discarded; the snapshot and later log remain."""
    store = RaftStore.open(tmp_path / "db")
    store.write(hard_state=HardState(term=1), entries=entries(1, 10))
    snap = Snapshot(SnapshotMeta(last_index=7, last_term=1), b"state@7")
    store.write(snapshot=snap, compact_through=5)
    store.close()
    store = reopen(tmp_path / "db")
    state = store.load()
    store.close()
    assert state.snapshot == snap
    assert [e.index for e in state.entries] == [6, 7, 8, 9, 10]
    assert state.last_index == 10


def test_snapshot_only(tmp_path: Path) -> None:
    """A snapshot installed from the leader replaces the whole log (Raft §7, InstallSnapshot step 7)."""
    store = RaftStore.open(tmp_path / "db")
    store.write(hard_state=HardState(term=2), entries=entries(1, 3))
    snap = Snapshot(SnapshotMeta(last_index=20, last_term=2), b"x" * 1000)
    store.write(truncate_from=1, snapshot=snap)
    state = store.load()
    store.close()
    assert state.snapshot == snap and state.entries == [] and state.last_index == 20


def _put(key: bytes, value: bytes) -> Callable[[Rdict], None]:
    return lambda db: db.put(key, value)


def _delete(key: bytes) -> Callable[[Rdict], None]:
    return lambda db: db.delete(key)


CORRUPTIONS = [
    pytest.param(_delete(entry_key(3)), "gap in the log between index 2 and 4", id="gap"),
    pytest.param(_put(entry_key(2), b"\x00\x01"), "entry 2 is 2 bytes", id="short-entry"),
    pytest.param(_put(entry_key(2), b"\x00" * 13 + b"garbage"), "entry 2 fails its CRC", id="garbage-entry"),
    pytest.param(
        _put(entry_key(9), encode_entry(Entry(term=1, index=2, data=b"e2"))),
        "entry 9 fails",
        id="moved-entry",
    ),
    pytest.param(_put(ENTRY_PREFIX + b"\x01", b"x"), "not a 9-byte entry key", id="bad-key"),
    pytest.param(_put(HARD_STATE_KEY, b"\x01\x02"), "hard state is 2 bytes", id="short-hard-state"),
    pytest.param(_put(HARD_STATE_KEY, b"\x00" * 16), "hard state fails", id="garbage-hard-state"),
    pytest.param(_delete(SNAP_DATA_KEY), "names data that is missing", id="missing-snapshot-data"),
    pytest.param(_put(SNAP_DATA_KEY, b"other"), "snapshot data is 5 bytes", id="wrong-snapshot-data"),
    pytest.param(_put(SNAP_META_KEY, b"\x00" * 32), "snapshot meta fails", id="garbage-snapshot-meta"),
    pytest.param(_put(FORMAT_KEY, b"someone-else/9"), "unknown format", id="foreign-format"),
    pytest.param(_delete(FORMAT_KEY), "format key is missing", id="missing-format"),
    pytest.param(
        lambda db: db.put(HARD_STATE_KEY, _hs_bytes(0)), "beyond the saved current term", id="term-regressed"
    ),
    pytest.param(
        lambda db: db.put(entry_key(3), encode_entry(Entry(term=0, index=3, data=b"e3"))),
        "entry 3 has term 0 < 1 before it",
        id="term-decreases",
    ),
]


def _hs_bytes(term: int) -> bytes:
    body = struct.pack(">QI", term, 0)
    return body + struct.pack(">I", crc32c.crc32c(body))


@pytest.mark.parametrize(("damage", "message"), CORRUPTIONS)
def test_corrupt_store_is_refused_naming_the_path(
    tmp_path: Path, damage: Callable[[Rdict], None], message: str
) -> None:
    """A corrupt or half-written store is reported with the path, never silently accepted."""
    path = tmp_path / "db"
    store = RaftStore.open(path)
    store.write(hard_state=HardState(term=1, vote=1), entries=entries(1, 9))
    store.write(snapshot=Snapshot(SnapshotMeta(last_index=1, last_term=1), b"s1"))
    store.close()
    db = Rdict(str(path), Options(raw_mode=True))
    damage(db)
    db.close()
    with pytest.raises(RaftStoreCorruptError) as info:
        store = RaftStore.open(path)
        try:
            store.load()
        finally:
            store.close()
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_log_starting_after_snapshot_is_refused(tmp_path: Path) -> None:
    """Without a snapshot the log must start at index 1: a missing prefix is a half-written store."""
    path = tmp_path / "db"
    store = RaftStore.open(path)
    store.write(hard_state=HardState(term=1), entries=entries(4, 6))
    with pytest.raises(RaftStoreCorruptError, match="log starts at index 4"):
        store.load()
    store.close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda p: p.write_text("not a db"), "it is a file", id="file"),
        pytest.param(
            lambda p: (p.mkdir(), (p / "notes.txt").write_text("hi")), "holds no RocksDB", id="foreign-dir"
        ),
        pytest.param(
            lambda p: (p.mkdir(), (p / "CURRENT").write_text("junk\n")), "RocksDB cannot open", id="junk"
        ),
    ],
)
def test_non_rocksdb_path_is_refused(tmp_path: Path, make: Callable[[Path], object], message: str) -> None:
    path = tmp_path / "db"
    make(path)
    with pytest.raises(RaftStoreCorruptError, match=message) as info:
        RaftStore.open(path)
    assert str(path) in str(info.value)
