"""What the leader's LogValidator refuses and what it must let through, on a real ``storage.log.Log``.

Rules under test (Kafka's ``LogValidator``):
- header keys are never decoded by the broker: a key that is not UTF-8 is stored as sent; our decoder
  replaces the invalid bytes as Java's ``new String(bytes, UTF_8)`` does in Kafka's consumer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_log_helpers import FakeClock, log_factory

from storage.batch_header import HEADER_SIZE
from storage.compression import CompressionType, compress
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
