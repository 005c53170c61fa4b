"""Column-at-a-time decoding of fetched v2 RecordBatches straight into Arrow arrays (the worker hot path).

``storage.record_batch`` decodes one record at a time in Python (~0.25-0.7 M records/s per core);
a Spark scan of a topic is bounded by that. Here only one thing is done per record in Python —
finding where each record starts, which is inherently sequential because each record begins with
its own length — and every field is then decoded for all records at once with ``pyarrow.compute``:

1. every wanted batch is CRC-checked (``validate_batch``) and its records region decompressed
   (``storage.compression``); the regions are joined into one buffer;
2. each record's start: records come in runs of one size (same value size; the deltas' varints
   grow at 64, 8192, ...), so a run is found in bulk — guess that the next records have the size
   of the current one, check all guesses at once, keep the prefix that holds — and short runs
   (values of varied sizes) go through a plain loop, one Python step per record at worst;
3. vectorized, field by field (record layout in ``storage.record_batch``): attributes (skipped),
   timestampDelta, offsetDelta, keyLength, key, valueLength, value, headerCount — each varint
   decoded for all records by gathering its bytes (``take``) and combining 7-bit groups;
4. keys and values are gathered into contiguous Arrow binary arrays with one ``take`` over an
   "interleaved" binary array whose even elements are the values and odd elements the bytes
   between them (offsets ``[start0, end0, start1, end1, ...]`` rise because records are in order).

It handles what Spark scans in bulk: any codec, null keys/values, CreateTime or LogAppendTime. It
declines (``FastPathDeclined``) — and the caller uses the reference decoder, which also produces the
precise ``CorruptRecordError`` for damaged data — when a record's fields do not add up to its
length, when a record carries headers and headers were asked for, or when a varint is too long.
A unit test checks that both decoders give the same columns on every codec and shape.

Every constant handed to ``pyarrow.compute`` is a prepared ``pa.Scalar``: with a plain Python int
pyarrow converts it on each call, which here tries to import numpy (absent) and costs ~0.5 ms.

Thread-safety: pure functions (a shared cache of index arrays only grows).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from storage.batch_header import HEADER_SIZE, validate_batch
from storage.compression import CompressionType, decompress

MAX_VARINT_BYTES = 5  # lengths and deltas in a batch are int32 varints (timestampDelta varlong: 10)
MAX_VARLONG_BYTES = 10
MIN_BULK_RUN = 16  # shorter runs of same-size records are cheaper in the plain loop
LOOP_RECORDS = 64  # records the plain loop takes before trying bulk runs again


@functools.lru_cache(maxsize=1024)
def i64(value: int) -> pa.Scalar:
    return pa.scalar(value, pa.int64())


_CONTINUATION = 0x80
_PAYLOAD = 0x7F
CONTINUATION, PAYLOAD, ZERO, ONE, MINUS_ONE = i64(_CONTINUATION), i64(_PAYLOAD), i64(0), i64(1), i64(-1)
FALSE, TRUE = pa.scalar(False), pa.scalar(True)


class FastPathDeclined(Exception):  # a signal to use the reference decoder, not an error
    """This data needs the reference decoder (headers wanted, unusual or damaged records)."""


@dataclass(frozen=True)
class BatchInfo:
    """What the vectorized pass needs from one wanted batch's header."""

    pos: int
    end: int
    base_offset: int
    base_timestamp: int
    max_timestamp: int
    log_append_time: bool
    records_count: int


@dataclass(frozen=True)
class Columns:
    """Decoded records as Arrow arrays, in offset order."""

    offset: pa.Array  # int64
    timestamp_ms: pa.Array  # int64
    key: pa.Array  # binary
    value: pa.Array  # binary
    timestamp_type: pa.Array  # int32


def decode_batches(data: bytes, batches: list[BatchInfo], *, headers_wanted: bool) -> Columns:
    """Decode the records of ``batches`` (positions in ``data``); raise FastPathDeclined if needed."""
    regions = [_region(data, info) for info in batches]
    joined = pa.py_buffer(b"".join(regions))
    bounds = _all_record_bounds(joined, regions, batches)
    bodies, ends = (pa.concat_arrays([b[i] for b in bounds]) for i in (1, 2))
    return _columns(joined, bodies, ends, batches, headers_wanted)


def _all_record_bounds(joined: pa.Buffer, regions: list[bytes], batches: list[BatchInfo]) -> list[tuple]:
    """(starts, bodies, ends) per batch, positions in ``joined``.

    Batches from one producer repeat one layout (same count, same sizes at the same indexes), so
    the first batch of each (count, length) shape is walked (``_record_bounds``) and the others
    reuse its layout shifted to their position — then every reused record's ``length`` varint is
    checked at once; if any disagrees, those batches are walked after all.
    """
    layouts: dict[tuple[int, int], tuple[pa.Array, pa.Array, pa.Array]] = {}
    bounds: list[tuple] = []
    reused: list[int] = []
    base = 0
    for i, (info, region) in enumerate(zip(batches, regions, strict=True)):
        shape = (info.records_count, len(region))
        if shape in layouts:
            reused.append(i)
        else:
            layouts[shape] = _record_bounds(region, info.records_count)
        bounds.append(tuple(pc.add(column, i64(base)) for column in layouts[shape]))
        base += len(region)
    if reused and not _layouts_hold(joined, [bounds[i] for i in reused]):
        base = 0
        for i, region in enumerate(regions):
            if i in reused:
                bounds[i] = tuple(
                    pc.add(c, i64(base)) for c in _record_bounds(region, batches[i].records_count)
                )
            base += len(region)
    return bounds


def _layouts_hold(joined: pa.Buffer, bounds: list[tuple]) -> bool:
    """Does the ``length`` varint at every guessed start give the guessed size and body start?"""
    starts, bodies, ends = (pa.concat_arrays([b[i] for b in bounds]) for i in range(3))
    data = pa.Array.from_buffers(pa.uint8(), joined.size, [None, joined])
    sizes, header_sizes = _length_varints(data, starts)
    ok = pc.and_(
        pc.equal(sizes, pc.subtract(ends, starts)), pc.equal(header_sizes, pc.subtract(bodies, starts))
    )
    return bool(pc.all(ok).as_py())


def _region(data: bytes, info: BatchInfo) -> bytes:
    header = validate_batch(data, info.pos)  # CRC-32C over attributes..end
    region = data[info.pos + HEADER_SIZE : info.end]
    codec = header.attributes & 0x07
    return region if codec == CompressionType.NONE else bytes(decompress(codec, region))


def _record_bounds(region: bytes, count: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Each record's start, body start (after its ``length`` varint) and end (see step 2)."""
    data = pa.Array.from_buffers(pa.uint8(), len(region), [None, pa.py_buffer(region)])
    chunks: list[tuple[pa.Array, pa.Array, pa.Array]] = []
    index, pos = 0, 0
    while index < count:
        size, header_size = _record_size(region, pos)
        run = _run_length(data, pos, size, min(count - index, (len(region) - pos) // size))
        if run >= MIN_BULK_RUN:
            starts = pc.add(pc.multiply(_arange(run), i64(size)), i64(pos))
            chunks.append((starts, pc.add(starts, i64(header_size)), pc.add(starts, i64(size))))
            pos += run * size
        else:
            run = min(LOOP_RECORDS, count - index)
            starts, bodies, ends, pos = _loop_bounds(region, pos, run)
            chunks.append(tuple(pa.array(c, pa.int64()) for c in (starts, bodies, ends)))
        index += run
    if pos != len(region):
        raise FastPathDeclined("records do not fill the region exactly")
    return tuple(pa.concat_arrays([c[i] for c in chunks]) for i in range(3))


def _record_size(region: bytes, pos: int) -> tuple[int, int]:
    """(whole record size, size of its length varint) of the record at ``pos``."""
    limit = len(region)
    if pos >= limit:
        raise FastPathDeclined("records region ends early")
    b = region[pos]
    if b < _CONTINUATION:
        value, header_size = b, 1
    elif pos + 1 < limit and region[pos + 1] < _CONTINUATION:
        value, header_size = (b & _PAYLOAD) | (region[pos + 1] << 7), 2
    else:
        raise FastPathDeclined("a record longer than 8 KiB")  # rare: let the reference decode it
    if value & 1:
        raise FastPathDeclined("negative record length")
    return header_size + (value >> 1), header_size


def _run_length(data: pa.Array, pos: int, size: int, most: int) -> int:
    """How many records from ``pos`` on have exactly ``size`` bytes (all guesses checked at once)."""
    if most < MIN_BULK_RUN:
        return 0
    starts = pc.add(pc.multiply(_arange(most), i64(size)), i64(pos))
    sizes, _ = _length_varints(data, starts)
    mismatch = pc.index(pc.equal(sizes, i64(size)), FALSE).as_py()
    return most if mismatch < 0 else mismatch


def _length_varints(data: pa.Array, starts: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Record sizes and length-varint sizes at ``starts`` (1- or 2-byte varints; else size -1)."""
    first = pc.cast(pc.take(data, starts), pa.int64())
    second = pc.cast(pc.take(data, pc.min_element_wise(pc.add(starts, ONE), i64(len(data) - 1))), pa.int64())
    one_byte = pc.less(first, CONTINUATION)
    raw = pc.if_else(
        one_byte, first, pc.bit_wise_or(pc.bit_wise_and(first, PAYLOAD), pc.shift_left(second, i64(7)))
    )
    header_sizes = pc.if_else(one_byte, ONE, i64(2))
    valid = pc.and_(
        pc.equal(pc.bit_wise_and(raw, ONE), ZERO), pc.or_(one_byte, pc.less(second, CONTINUATION))
    )
    sizes = pc.if_else(valid, pc.add(pc.shift_right(raw, ONE), header_sizes), MINUS_ONE)
    return sizes, header_sizes


def _loop_bounds(region: bytes, pos: int, count: int) -> tuple[list[int], list[int], list[int], int]:
    starts, bodies, ends = [], [], []
    for _ in range(count):
        size, header_size = _record_size(region, pos)
        starts.append(pos)
        bodies.append(pos + header_size)
        pos += size
        ends.append(pos)
    return starts, bodies, ends, pos


def _columns(
    joined: pa.Buffer, bodies: pa.Array, end: pa.Array, batches: list[BatchInfo], headers_wanted: bool
):
    n = len(bodies)
    data = pa.Array.from_buffers(pa.uint8(), joined.size, [None, joined])
    pos = pc.add(bodies, ONE)  # skip the record's attributes byte
    ts_delta, pos = _varints(data, pos, MAX_VARLONG_BYTES)
    offset_delta, pos = _varints(data, pos, MAX_VARINT_BYTES)
    key_length, pos = _varints(data, pos, MAX_VARINT_BYTES)
    key_start = pos
    pos = pc.add(pos, pc.max_element_wise(key_length, ZERO))
    value_length, pos = _varints(data, pos, MAX_VARINT_BYTES)
    value_start = pos
    pos = pc.add(pos, pc.max_element_wise(value_length, ZERO))
    header_count, pos = _varints(data, pos, MAX_VARINT_BYTES)
    _check_fits(pos, end, header_count, key_length, value_length, headers_wanted)
    per_batch = _repeat_per_batch(batches, n)
    offsets = pc.add(per_batch["base_offset"], offset_delta)
    timestamps = pc.add(per_batch["base_timestamp"], ts_delta)
    if any(b.log_append_time for b in batches):
        lat = pc.equal(per_batch["timestamp_type"], pa.scalar(1, pa.int32()))
        timestamps = pc.if_else(lat, per_batch["max_timestamp"], timestamps)
    return Columns(
        offset=offsets,
        timestamp_ms=timestamps,
        key=_gather_binary(joined, key_start, key_length),
        value=_gather_binary(joined, value_start, value_length),
        timestamp_type=per_batch["timestamp_type"],
    )


def _check_fits(pos, end, header_count, key_length, value_length, headers_wanted: bool) -> None:
    """Every record's fields must end inside it (exactly at its end when it has no headers)."""
    no_headers = pc.equal(header_count, ZERO)
    ok = pc.and_(
        pc.if_else(no_headers, pc.equal(pos, end), pc.less_equal(pos, end)),
        pc.and_(pc.greater_equal(key_length, MINUS_ONE), pc.greater_equal(value_length, MINUS_ONE)),
    )
    if not pc.all(ok).as_py():
        raise FastPathDeclined("record fields do not add up to the record length")
    if headers_wanted and not pc.all(no_headers).as_py():
        raise FastPathDeclined("records carry headers")


def _varints(data: pa.Array, pos: pa.Array, max_bytes: int) -> tuple[pa.Array, pa.Array]:
    """Zigzag varints at ``pos`` for all records at once: (values int64, positions after them)."""
    last = i64(len(data) - 1)
    raw = pc.cast(pc.take(data, pc.min_element_wise(pos, last)), pa.int64())
    more = pc.greater_equal(raw, CONTINUATION)
    size = ONE
    if pc.any(more).as_py():
        raw = pc.bit_wise_and(raw, PAYLOAD)
        size = pa.repeat(ONE, len(pos))
        for k in range(1, max_bytes + 1):
            if not pc.any(more).as_py():
                break
            if k == max_bytes:
                raise FastPathDeclined("varint longer than allowed")
            byte = pc.cast(pc.take(data, pc.min_element_wise(pc.add(pos, i64(k)), last)), pa.int64())
            part = pc.shift_left(pc.bit_wise_and(byte, PAYLOAD), i64(7 * k))
            raw = pc.if_else(more, pc.bit_wise_or(raw, part), raw)
            size = pc.if_else(more, i64(k + 1), size)
            more = pc.and_(more, pc.greater_equal(byte, CONTINUATION))
    value = pc.bit_wise_xor(pc.shift_right(raw, ONE), pc.negate(pc.bit_wise_and(raw, ONE)))
    return value, pc.add(pos, size)


def _repeat_per_batch(batches: list[BatchInfo], n: int) -> dict[str, pa.Array]:
    """Per-record copies of per-batch values."""

    def repeated(value_of, kind) -> pa.Array:
        return pa.concat_arrays([pa.repeat(pa.scalar(value_of(b), kind), b.records_count) for b in batches])

    out = {
        "base_offset": repeated(lambda b: b.base_offset, pa.int64()),
        "base_timestamp": repeated(lambda b: b.base_timestamp, pa.int64()),
        "max_timestamp": repeated(lambda b: b.max_timestamp, pa.int64()),
        "timestamp_type": repeated(lambda b: int(b.log_append_time), pa.int32()),
    }
    assert all(len(c) == n for c in out.values()), (n, {k: len(v) for k, v in out.items()})
    return out


def _gather_binary(joined: pa.Buffer, start: pa.Array, length: pa.Array) -> pa.Array:
    """Binary array of ``joined[start[i] : start[i] + length[i]]``; length -1 is null (step 4)."""
    n = len(start)
    nulls = pc.less(length, ZERO)
    null_count = pc.sum(pc.cast(nulls, pa.int64())).as_py() or 0
    if null_count == n:
        return pa.nulls(n, pa.binary())
    if joined.size >= 2**31:
        raise FastPathDeclined("more than 2 GiB in one fetch")
    stop = pc.add(start, pc.max_element_wise(length, ZERO))
    # offsets [start0, stop0, start1, stop1, ...]: element 2i is value i, element 2i+1 the gap after it
    offsets = pc.cast(pc.take(pa.concat_arrays([start, stop]), _interleave_index(n)), pa.int32())
    validity = None
    if null_count:
        valid = pc.take(pa.concat_arrays([pc.invert(nulls), pa.repeat(TRUE, n)]), _interleave_index(n))
        validity = valid.buffers()[1]
    spread = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [validity, offsets.buffers()[1], joined])
    return pc.take(spread, _even_index(n))


_ARANGE: list[pa.Array] = [pa.array([], pa.int64())]


def _arange(n: int) -> pa.Array:
    """0..n-1 as int64, sliced (zero copy) from a cached array that grows by doubling."""
    if len(_ARANGE[0]) < n:
        size = max(n, 2 * len(_ARANGE[0]), 1024)
        _ARANGE[0] = pa.array(list(range(size)), pa.int64())
    return _ARANGE[0].slice(0, n)


@functools.lru_cache(maxsize=64)
def _interleave_index(n: int) -> pa.Array:
    j = _arange(2 * n)
    return pc.add(pc.shift_right(j, ONE), pc.multiply(pc.bit_wise_and(j, ONE), i64(n)))


@functools.lru_cache(maxsize=64)
def _even_index(n: int) -> pa.Array:
    return pc.multiply(_arange(n), i64(2))
