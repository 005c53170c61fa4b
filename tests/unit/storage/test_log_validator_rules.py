"""What the leader's LogValidator refuses and what it must let through, on a real ``storage.log.Log``.

Rules under test (Kafka's ``LogValidator``):
- a client may not write control batches (INVALID_RECORD "Clients are not allowed to write control
  records"); the broker's coordinators may, and a follower stores what its leader wrote;
- a client's batch with a producer id needs a base sequence >= 0 (INVALID_RECORD);
- a batch that counts no records is INVALID_RECORD, not CORRUPT_MESSAGE, whatever its lastOffsetDelta
  (its CRC holds: the producer built it wrong) — a corrupt one stays CORRUPT_MESSAGE;
- header keys are never decoded by the broker: a key that is not UTF-8 is stored as sent; our decoder
  replaces the invalid bytes as Java's ``new String(bytes, UTF_8)`` does in Kafka's consumer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_log_helpers import FakeClock, log_factory

from proto import errors
from storage.batch_header import HEADER_SIZE
from storage.compression import CompressionType, compress
from storage.log_validator import AppendOrigin
from storage.record_batch import _HEADER_STRUCT, _pack_batch, build_batch, decode_batch
from storage.varint import encode_varint

CODECS = list(CompressionType)


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator:
    yield from log_factory(tmp_path, FakeClock())


def forge(region: bytes, codec: int, count: int) -> bytes:
    """A batch with ``region`` (already compressed) as its records and a valid CRC."""
    fields = list(_HEADER_STRUCT.unpack_from(build_batch([(None, b"v", (), 1_000)])))
    fields[1] = HEADER_SIZE - 12 + len(region)  # batchLength
    fields[5] = codec  # attributes
    fields[6] = count - 1  # lastOffsetDelta
    fields[12] = count  # recordsCount
    return _pack_batch(tuple(fields), region)


def record_with_header_key(key: bytes) -> bytes:
    """One record (offset delta 0, null key, value b"v") with one header ``key`` -> b"h"."""
    body = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(-1) + encode_varint(1) + b"v"
    body += encode_varint(1) + encode_varint(len(key)) + key + encode_varint(1) + b"h"
    return encode_varint(len(body)) + body


@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
def test_header_key_that_is_not_utf8_is_stored_as_sent(open_log, codec: int) -> None:
    region = record_with_header_key(b"k\xff\xfe")
    batch = forge(region if codec == CompressionType.NONE else compress(codec, region), codec, 1)
    log = open_log()
    log.append_as_leader(batch, 0)
    stored = log.read(0, 1 << 20)
    assert stored[HEADER_SIZE:] == batch[HEADER_SIZE:]  # the records as the producer sent them
    (got,) = decode_batch(stored).records
    assert got.headers == (("k\ufffd\ufffd", b"h"),)


CONTROL = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", (), 1_000)], control=True,
                      producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)  # fmt: skip


def empty_batch(last_offset_delta: int) -> bytes:
    """A batch with no records and a valid CRC (``build_batch([])`` writes lastOffsetDelta 0)."""
    fields = list(_HEADER_STRUCT.unpack_from(build_batch([])))
    fields[6] = last_offset_delta
    return _pack_batch(tuple(fields), b"")


def test_client_control_batch_is_invalid_record_and_nothing_is_appended(open_log) -> None:
    log = open_log()
    log.append_as_leader(build_batch([(None, b"v", (), 1_000)]), 0)
    with pytest.raises(errors.InvalidRecordError, match="Clients are not allowed to write control records"):
        log.append_as_leader(CONTROL, 0)
    assert log.log_end_offset == 1


def test_coordinator_and_follower_may_write_control_batches(open_log, tmp_path: Path) -> None:
    leader = open_log()
    leader.append_as_leader(CONTROL, 0, AppendOrigin.COORDINATOR)
    follower = open_log(path=tmp_path / "follower-0")
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert (leader.log_end_offset, follower.log_end_offset) == (1, 1)


@pytest.mark.parametrize(
    ("producer_id", "base_sequence", "refused"),
    [
        pytest.param(7, -1, True, id="pid-negative-seq"),
        pytest.param(7, -5, True, id="pid-seq-minus-5"),
        pytest.param(7, 0, False, id="pid-seq-0"),
        pytest.param(-1, -1, False, id="no-pid"),
    ],
)
def test_producer_id_needs_a_non_negative_base_sequence(
    open_log, producer_id: int, base_sequence: int, refused: bool
) -> None:
    batch = build_batch(
        [(None, b"v", (), 1_000)], producer_id=producer_id, producer_epoch=0, base_sequence=base_sequence
    )
    log = open_log()
    if refused:
        with pytest.raises(errors.InvalidRecordError, match=f"invalid sequence number {base_sequence}"):
            log.append_as_leader(batch, 0)
        assert log.log_end_offset == 0
    else:
        log.append_as_leader(batch, 0)
        assert log.log_end_offset == 1


@pytest.mark.parametrize("last_offset_delta", [0, -1], ids=["delta-0", "delta-minus-1"])
def test_batch_without_records_is_invalid_record(open_log, last_offset_delta: int) -> None:
    log = open_log()
    with pytest.raises(errors.InvalidRecordError, match="holds no records"):
        log.append_as_leader(empty_batch(last_offset_delta), 0)
    assert log.log_end_offset == 0


def test_batch_without_records_and_a_bad_crc_is_corrupt_message(open_log) -> None:
    batch = bytearray(empty_batch(-1))
    batch[-1] ^= 0xFF  # inside the CRC's range (attributes..end)
    with pytest.raises(errors.CorruptMessageError):
        open_log().append_as_leader(bytes(batch), 0)
