"""The leader checks a batch's records before appending it, like Kafka's LogValidator (issue 14 defect 5).

A CRC only proves the bytes arrived as the producer sent them. A batch marked zstd whose payload is not
zstd used to be appended with a valid CRC; every consumer then failed at its offset. Now a region that
does not decompress, or records that do not match the header (count, offset deltas, sizes), is
CORRUPT_MESSAGE and the log appends nothing. A follower stores what its leader accepted unchecked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from storage_log_helpers import FakeClock, log_factory

from proto import errors
from storage.batch_header import HEADER_SIZE
from storage.compression import CompressionType, compress
from storage.log import Log
from storage.record_batch import _HEADER_STRUCT, _pack_batch, build_batch, check_records, decode_batch
from storage.varint import encode_varint

RECORDS = [(b"k%d" % i, b"value-%d " % i * 20, (), 1_000 + i) for i in range(5)]
CODECS = [c for c in CompressionType if c != CompressionType.NONE]


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator:
    yield from log_factory(tmp_path, FakeClock())


def forge(region: bytes, codec: int, count: int, last_offset_delta: int | None = None) -> bytes:
    """A batch with ``region`` as its (already compressed) records and a valid CRC."""
    template = build_batch(RECORDS)
    fields = list(_HEADER_STRUCT.unpack_from(template))
    fields[1] = HEADER_SIZE - 12 + len(region)  # batchLength
    fields[5] = codec  # attributes
    fields[6] = count - 1 if last_offset_delta is None else last_offset_delta
    fields[12] = count
    return _pack_batch(tuple(fields), region)


def plain_region(records=RECORDS) -> bytes:
    return build_batch(records)[HEADER_SIZE:]


def record(offset_delta: int, value: bytes = b"v", length_fix: int = 0) -> bytes:
    body = b"\x00" + encode_varint(0) + encode_varint(offset_delta) + encode_varint(-1)
    body += encode_varint(len(value)) + value + encode_varint(0)
    return encode_varint(len(body) + length_fix) + body


def assert_refused(log: Log, batch: bytes, says: str) -> None:
    with pytest.raises(errors.CorruptMessageError, match=says):
        log.append_as_leader(batch, 0)
    assert log.log_end_offset == 0 and log.read(0, 1 << 20) == b""


@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
def test_a_payload_that_does_not_decompress_is_corrupt_message_and_nothing_is_appended(
    open_log, codec: int
) -> None:
    """Issue 14 defect 5: the leader decompresses a compressed batch before appending it (LogValidator)."""
    log = open_log()
    log.append_as_leader(build_batch(RECORDS[:1]), 0)  # a valid record before it stays readable
    batch = forge(plain_region(), codec, len(RECORDS))  # marked compressed, holds plain records
    with pytest.raises(errors.CorruptMessageError, match="batch 0 is corrupt"):
        log.append_as_leader(batch, 0)
    assert log.log_end_offset == 1
    assert [r.value for r in decode_batch(log.read(0, 1 << 20)).records] == [RECORDS[0][1]]


@pytest.mark.parametrize("codec", list(CompressionType), ids=[c.name for c in CompressionType])
@pytest.mark.parametrize(
    ("region", "count", "says"),
    [
        (plain_region(RECORDS[:2]), 3, "cannot fit|truncated"),
        (plain_region() + b"\x00\x00", 5, "2 bytes left after the 5 records"),
        (record(0) + record(2) + record(2), 3, "record 1 has offsetDelta 2"),
        (record(0) + record(1, length_fix=1) + record(2), 3, "record 1 declares it ends"),
        (record(0) + record(1, length_fix=-3) + record(2), 3, "record 1 declares it ends|record 1"),
        (record(0) + record(1) + encode_varint(500) + b"\x00" * 8, 3, "record 2 at byte"),
        (record(0) + b"\x0c\x00\x00\x02\x81\x01\x00" + b"\x00" * 6, 2, "record 1 key length -65 is negative"),
    ],
    ids=["count-over-records", "bytes-left", "offset-delta-gap", "length-too-long", "length-too-short",
         "length-overruns-region", "negative-key-length"],
)
def test_records_that_do_not_match_the_header_are_corrupt_message(
    open_log, codec: int, region: bytes, count: int, says: str
) -> None:
    """Kafka checks record count, offset deltas and sizes of the batch's records on the leader."""
    payload = region if codec == CompressionType.NONE else compress(codec, region)
    assert_refused(open_log(), forge(payload, codec, count), says)


@pytest.mark.parametrize("codec", list(CompressionType), ids=[c.name for c in CompressionType])
def test_valid_batches_of_every_codec_are_appended(open_log, codec: int) -> None:
    log = open_log()
    headers_record = [(b"k", b"v", (("h", b"x"), ("n", None)), 5)]
    for records in (RECORDS, headers_record, [(None, None, (), 7)]):
        log.append_as_leader(build_batch(records, compression=codec), 0)
    assert log.log_end_offset == len(RECORDS) + 2


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", None])  # its snappy needs python-snappy
def test_kafka_pythons_batches_pass(open_log, codec: str | None) -> None:
    """The reference codec's batches (what Kafka clients write) are accepted unchanged."""
    ids = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    builder = DefaultRecordBatchBuilder(2, ids[codec], False, -1, -1, -1, 1 << 20)
    for i in range(50):
        builder.append(i, timestamp=1_000 + i, key=None, value=b"x" * 100, headers=[("a", b"b")])
    log = open_log()
    log.append_as_leader(bytes(builder.build()), 0)
    assert log.log_end_offset == 50


def test_a_follower_stores_what_its_leader_accepted_without_walking_records(open_log) -> None:
    """Record checks are the leader's (Kafka's appendAsFollower does not re-validate records)."""
    batch = forge(plain_region(), CompressionType.ZSTD, len(RECORDS))
    log = open_log()
    log.append_as_follower(batch)
    assert log.log_end_offset == len(RECORDS)


def test_check_records_never_reads_past_a_hostile_count() -> None:
    with pytest.raises(errors.CorruptMessageError, match="truncated"):
        check_records(record(0), 10**9)
