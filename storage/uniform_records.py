"""A strided proof that a batch's records are well formed, the fast path of ``record_batch.check_records``.

The leader walks every record of a client's batch before appending it (Kafka's LogValidator: lengths,
offset deltas 0..n-1, no bytes left; ``record_batch._walk_records``). In Python that walk is ~0.4 µs a
record, the only per-record work a broker does on the produce path. But producers write records of
one shape: librdkafka's records of equal-sized values with null keys and no headers differ from one
another only in the timestampDelta and offsetDelta varints and the key and value bytes. Records
of one shape lie at a fixed stride, and each of their other bytes can be compared across all of them
with one strided slice (``block[j::stride]``) at C speed.

``prove_uniform(data, count)`` returns True only when it has shown that every one of ``count`` records
passes the walk; False means "not shown" (another shape, a corrupt byte, anything unusual), and the
caller walks the records, which accepts them or names the problem. So the verdict, and the error
message, never depend on this module: it only skips the walk where the walk could not fail.

How: records are taken in *runs* of one stride. offsetDelta = index is a zigzag varint of 1 byte
below index 64, 2 below 8,192 and 3 below ``MAX_INDEX``, and timestampDelta grows a byte at 64 ms and
8,192 ms: a run ends where either width changes (a record there is a byte longer). Per run, its first
record is parsed field by field with the walk's rules (the *template*, whose size is the stride; its
headerCount must be 0); the run goes on while the timestampDelta keeps the template's width (the
continuation bits, found with a regex over a strided slice); then across the run every byte outside
the timestampDelta, the offsetDelta, the key and the value must equal the template's (so every
record has the template's length, key and value lengths and headers), and the offsetDelta bytes must
be the canonical varints of the run's indexes. The runs must end exactly at the end of the region;
records of many shapes (more than ``MAX_RUNS`` runs) are left to the walk.

Thread-safety: pure functions; the offsetDelta tables are built once, lazily, and never changed.
"""

from __future__ import annotations

import functools
import re

from storage.batch_header import CorruptRecordError
from storage.varint import read_unsigned, unzigzag

NULL_LENGTH = -1  # a null key, value or header value (``storage.record_batch`` uses these two too)
MIN_RECORD_BODY_BYTES = 6  # attributes + timestampDelta + offsetDelta + key + value + headerCount
# First index of each offsetDelta width (1, 2, 3 bytes), and where the proof stops: 3-byte varints go
# to 2**20, but a batch of max.message.bytes (1 MiB by default) holds < 2**17 records of >= 7 bytes.
WIDTH_STARTS = (0, 64, 8192)
MAX_INDEX = 1 << 17
# Below this many records the walk is cheaper than parsing a template and slicing (a few µs).
MIN_PROOF_RECORDS = 32
# More runs than this (records of many shapes) and the walk is as cheap: give up.
MAX_RUNS = 16
_LOW = re.compile(rb"[\x00-\x7f]")  # a varint byte without the continuation bit
_HIGH = re.compile(rb"[\x80-\xff]")  # one with it


@functools.cache
def _offset_delta_bytes(width: int, k: int) -> bytes:
    """Byte ``k`` of the canonical offsetDelta varint of every index of ``width`` bytes, in order."""
    start = WIDTH_STARTS[width - 1]
    stop = WIDTH_STARTS[width] if width < len(WIDTH_STARTS) else MAX_INDEX
    more = 0x80 if k < width - 1 else 0
    return bytes((((index << 1) >> (7 * k)) & 0x7F) | more for index in range(start, stop))


def _template(data: bytes, pos: int, index: int, width: int) -> tuple[int, int, int, int, list[int]] | None:
    """The record at ``pos`` parsed with the walk's rules: (stride, timestampDelta position and width,
    offsetDelta position, positions of the bytes every record of the run must share), positions
    relative to ``pos``; None when it is not of a shape the proof covers (or would fail the walk)."""
    try:
        raw, body = read_unsigned(data, pos)
        record_end = body + unzigzag(raw)
        if not body + MIN_RECORD_BODY_BYTES <= record_end <= len(data):
            return None
        delta_at = read_unsigned(data, body + 1)[1]  # after attributes and timestampDelta
        raw, key_at = read_unsigned(data, delta_at)
        if key_at - delta_at != width or unzigzag(raw) != index:
            return None
        raw, key_start = read_unsigned(data, key_at)
        key_size = unzigzag(raw)
        key_end = key_start + max(key_size, 0)
        raw, value_start = read_unsigned(data, key_end)
        value_size = unzigzag(raw)
        if min(key_size, value_size) < NULL_LENGTH:
            return None
        value_end = value_start + max(value_size, 0)
        if value_end + 1 != record_end or data[value_end] != 0:  # headerCount 0, and nothing after it
            return None
    except (CorruptRecordError, IndexError):
        return None
    fixed = [*range(pos, body + 1), *range(key_at, key_start), *range(key_end, value_start), value_end]
    return record_end - pos, body + 1 - pos, delta_at - body - 1, delta_at - pos, [p - pos for p in fixed]


def _same_timestamp_width(block: bytes, ts_at: int, ts_width: int, stride: int) -> int:
    """How many records of ``block``, from its first, have a timestampDelta varint of ``ts_width``
    bytes (continuation bit on every byte but the last): where it changes (a later record's delta
    needs another byte), the stride changes and a new run starts."""
    n = len(block) // stride
    for k in range(ts_width):
        found = (_LOW if k < ts_width - 1 else _HIGH).search(block[ts_at + k :: stride])
        if found is not None:
            n = min(n, found.start())
    return n


def prove_uniform(data: bytes, count: int) -> bool:
    """True when every one of the ``count`` records filling ``data`` is shown to pass the walk (see the
    module docstring); False when not shown (and for fewer than ``MIN_PROOF_RECORDS``)."""
    if count < MIN_PROOF_RECORDS:
        return False
    pos = index = runs = 0
    while index < count:
        runs += 1
        if index >= MAX_INDEX or runs > MAX_RUNS:
            return False
        width = 1 if index < WIDTH_STARTS[1] else 2 if index < WIDTH_STARTS[2] else 3
        template = _template(data, pos, index, width)
        if template is None:
            return False
        stride, ts_at, ts_width, delta_at, fixed = template
        stop = WIDTH_STARTS[width] if width < len(WIDTH_STARTS) else MAX_INDEX
        block = data[pos : pos + (min(count, stop) - index) * stride]
        n = _same_timestamp_width(block, ts_at, ts_width, stride)
        block = block[: n * stride]
        if any(block[j::stride].count(block[j]) != n for j in fixed):
            return False
        first = index - WIDTH_STARTS[width - 1]
        for k in range(width):
            if block[delta_at + k :: stride] != _offset_delta_bytes(width, k)[first : first + n]:
                return False
        pos += n * stride
        index += n
    return pos == len(data)
