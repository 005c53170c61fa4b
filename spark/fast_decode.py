"""Column-at-a-time decoding of fetched v2 RecordBatches straight into Arrow arrays, in Python.

Since the compiled decoder (``spark/_decode.pyx``) took the worker's hot path, this is the Python
decoder behind it: the reference its property test compares against, what runs when it declines,
and the whole path where it is not built (the Docker images). See ``spark.arrow``.

``storage.record_batch`` decodes one record at a time in Python (~0.25-0.7 M records/s per core);
a Spark scan of a topic is bounded by that. Here only one thing is done per record in Python —
finding where each record starts, which is inherently sequential because each record begins with
its own length — and every field is then decoded for all records at once with ``pyarrow.compute``:

1. every wanted batch is CRC-checked (``validate_batch``); uncompressed records regions are used
   where they lie in the fetched bytes (zero copy: positions below are offsets in that buffer),
   compressed ones are decompressed (``storage.compression``) and joined into one new buffer;
2. each record's start: records come in runs of one size (same value size; the deltas' varints
   grow at 64, 8192, ...), so a run is found in bulk — guess that the next records have the size
   of the current one, check all guesses at once, keep the prefix that holds — and short runs
   (values of varied sizes) go through a plain loop, one Python step per record at worst. Batches
   of one shape (record count, byte length) reuse the first one's layout; every record's
   ``length`` varint is then checked, and all batches are walked if any disagrees;
3. vectorized, field by field (record layout in ``storage.record_batch``): attributes (skipped),
   timestampDelta, offsetDelta, keyLength, key, valueLength, value, headerCount — each varint
   decoded for all records at once by gathering its bytes (``take``) and combining 7-bit groups.
   The fields up to valueLength usually sit in a record's first ``WINDOW`` bytes: those are first
   gathered into one small contiguous array, so the varints are decoded with cache-friendly
   ``take`` s there rather than scattered over the whole fetch (a varint that does not end inside
   the window is decoded from the buffer instead);
4. keys and values are gathered into contiguous Arrow binary arrays with one ``take`` over an
   "interleaved" binary array whose even elements are the values and odd elements the bytes
   between them (offsets ``[start0, end0, start1, end1, ...]`` rise because records are in order);
   per-batch values (base offset, base timestamp, timestamp type) reach every record through one
   ``take`` by batch index.

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
WINDOW = 16  # bytes gathered from each record's start: its length varint and the fields after it


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
    buffer, region_starts, regions = _records_buffer(data, batches)
    if buffer.size >= 2**31:
        raise FastPathDeclined("more than 2 GiB in one fetch")
    n = sum(info.records_count for info in batches)
    batch_index = _batch_index(batches, n)
    base = pc.take(pa.array(region_starts, pa.int64()), batch_index)
    bounds, reused = _all_record_bounds(regions, batches, base, reuse=True)
    fields = _fields(buffer, *bounds, check_lengths=reused)
    if fields is None:  # a reused layout did not hold: walk every batch
        bounds, _ = _all_record_bounds(regions, batches, base, reuse=False)
        fields = _fields(buffer, *bounds, check_lengths=False)
        assert fields is not None, "walked layouts always hold"
    return _columns(buffer, fields, bounds[2], batches, batch_index, headers_wanted)


def _records_buffer(data: bytes, batches: list[BatchInfo]) -> tuple[pa.Buffer, list[int], list]:
    """CRC-check every batch; (buffer, where each batch's records start in it, each records region).

    Uncompressed batches are used where they lie in the fetched bytes (zero copy); when a batch is
    compressed, the regions are decompressed and joined into one new buffer.
    """
    view = memoryview(data)
    regions: list = []
    compressed = False
    for info in batches:
        header = validate_batch(data, info.pos)  # CRC-32C over attributes..end
        region = view[info.pos + HEADER_SIZE : info.end]
        codec = header.attributes & 0x07
        if codec != CompressionType.NONE:
            region, compressed = memoryview(decompress(codec, region)), True
        regions.append(region)
    if not compressed:
        return pa.py_buffer(data), [info.pos + HEADER_SIZE for info in batches], regions
    joined = memoryview(b"".join(regions))
    starts, pos = [], 0
    for region in regions:
        starts.append(pos)
        pos += len(region)
    views = [joined[s : s + len(r)] for s, r in zip(starts, regions, strict=True)]
    return pa.py_buffer(joined), starts, views


def _batch_index(batches: list[BatchInfo], n: int) -> pa.Array:
    """For each record, the index of its batch (int64)."""
    counts = {info.records_count for info in batches}
    if len(counts) == 1:
        return pc.divide(_arange(n), i64(counts.pop()))
    return pa.concat_arrays([pa.repeat(i64(b), info.records_count) for b, info in enumerate(batches)])


def _all_record_bounds(
    regions: list, batches: list[BatchInfo], base: pa.Array, *, reuse: bool
) -> tuple[tuple[pa.Array, pa.Array, pa.Array], bool]:
    """(starts, bodies, ends) of every record, positions in the buffer; and whether a layout was reused.

    Batches from one producer repeat one layout (same count, same sizes at the same indexes), so
    with ``reuse`` the first batch of each (count, length) shape is walked (``_record_bounds``) and
    the others reuse its layout — the caller then checks every record's ``length`` varint (see
    ``_fields``) and walks every batch if any disagrees.
    """
    layouts: dict[tuple[int, int], tuple[pa.Array, pa.Array, pa.Array]] = {}
    per_batch: list[tuple[pa.Array, pa.Array, pa.Array]] = []
    reused = False
    for info, region in zip(batches, regions, strict=True):
        shape = (info.records_count, len(region))
        if reuse and shape in layouts:
            reused = True
        else:
            layouts[shape] = _record_bounds(region, info.records_count)
        per_batch.append(layouts[shape])
    local = (pa.concat_arrays([b[k] for b in per_batch]) for k in range(3))
    starts, bodies, ends = (pc.add(column, base) for column in local)
    return (starts, bodies, ends), reused


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


@dataclass(frozen=True)
class _Fields:
    """Every record's fields (positions in the buffer), decoded column-wise."""

    timestamp_delta: pa.Array
    offset_delta: pa.Array
    key_start: pa.Array
    key_length: pa.Array
    value_start: pa.Array
    value_length: pa.Array


def _fields(
    buffer: pa.Buffer, starts: pa.Array, bodies: pa.Array, ends: pa.Array, *, check_lengths: bool
) -> _Fields | None:
    """Decode every record's fields (step 3); None when ``check_lengths`` finds a layout that does not hold.

    The fields up to the value length sit in each record's first ``WINDOW`` bytes. When every record
    is at least that long, those bytes are first gathered into one small contiguous array (one
    pass over the fetched buffer instead of one scattered ``take`` per varint byte), and the
    varints are decoded there (``_fields_in_windows``). Each record's ``length`` varint is checked
    the same way.
    """
    n = len(starts)
    sizes, header_sizes = pc.subtract(ends, starts), pc.subtract(bodies, starts)
    if pc.min(sizes).as_py() < WINDOW:
        if check_lengths and not _lengths_hold(_u8(buffer), starts, header_sizes, sizes):
            return None
        return _fields_in_buffer(buffer, bodies)
    windows = _windows(buffer, starts, ends, n)
    shift = pc.subtract(starts, pc.multiply(_arange(n), i64(WINDOW)))  # buffer position - window position
    if check_lengths and not _lengths_hold(windows, pc.subtract(starts, shift), header_sizes, sizes):
        return None
    return _fields_in_windows(buffer, windows, shift, bodies)


def _lengths_hold(src: pa.Array, src_starts: pa.Array, header_sizes: pa.Array, sizes: pa.Array) -> bool:
    """Whether every record's ``length`` varint (read at ``src_starts`` in ``src``) gives its layout."""
    size, header_size = _length_varints(src, src_starts)
    return pc.all(pc.and_(pc.equal(size, sizes), pc.equal(header_size, header_sizes))).as_py()


def _fields_in_windows(buffer: pa.Buffer, windows: pa.Array, shift: pa.Array, bodies: pa.Array) -> _Fields:
    """``_fields`` from the windows; what does not end inside its record's window is read from the buffer.

    In the windows, the bytes after a record's window are the next record's (and past the last
    window, its last byte again), so a varint that runs past its window — a long key puts the value
    length there — is neither decoded nor declined from there.
    """
    window_starts = pc.multiply(_arange(len(bodies)), i64(WINDOW))
    pos = pc.add(pc.subtract(bodies, shift), ONE)  # skip the record's attributes byte
    head_sizes = (MAX_VARLONG_BYTES, MAX_VARINT_BYTES, MAX_VARINT_BYTES)  # timestampDelta .. keyLength
    head = _window_varints(windows, pos, window_starts, head_sizes)
    if head is None:
        return _fields_in_buffer(buffer, bodies)
    (ts_delta, offset_delta, key_length), pos = head
    key_start = pc.add(pos, shift)
    value_length_pos = pc.add(pos, pc.max_element_wise(key_length, ZERO))  # a null key (-1) takes no bytes
    tail = None
    if _inside(value_length_pos, window_starts, WINDOW - 1):
        tail = _window_varints(windows, value_length_pos, window_starts, (MAX_VARINT_BYTES,))
    if tail is None:
        value_length, value_start = _varints(_u8(buffer), pc.add(value_length_pos, shift), MAX_VARINT_BYTES)
    else:
        (value_length,), value_start = tail[0], pc.add(tail[1], shift)
    return _Fields(ts_delta, offset_delta, key_start, key_length, value_start, value_length)


def _window_varints(
    windows: pa.Array, pos: pa.Array, window_starts: pa.Array, max_bytes: tuple[int, ...]
) -> tuple[list[pa.Array], pa.Array] | None:
    """Consecutive varints at ``pos`` in the windows: (values, position after); None if one leaves its window.

    ``_inside`` once at the end suffices: positions only grow, so a varint that left its window
    leaves every later position outside too.
    """
    values = []
    for most in max_bytes:
        decoded = _varints_or_none(windows, pos, most)
        if decoded is None:
            return None
        value, pos = decoded
        values.append(value)
    if not _inside(pos, window_starts, WINDOW):
        return None
    return values, pos


def _fields_in_buffer(buffer: pa.Buffer, bodies: pa.Array) -> _Fields:
    """``_fields`` without windows: every varint decoded from the buffer (layouts already checked)."""
    data = _u8(buffer)
    pos = pc.add(bodies, ONE)
    ts_delta, pos = _varints(data, pos, MAX_VARLONG_BYTES)
    offset_delta, pos = _varints(data, pos, MAX_VARINT_BYTES)
    key_length, key_start = _varints(data, pos, MAX_VARINT_BYTES)
    value_length, value_start = _varints(
        data, pc.add(key_start, pc.max_element_wise(key_length, ZERO)), MAX_VARINT_BYTES
    )
    return _Fields(ts_delta, offset_delta, key_start, key_length, value_start, value_length)


def _inside(pos: pa.Array, window_starts: pa.Array, limit: int) -> bool:
    return pc.max(pc.subtract(pos, window_starts)).as_py() <= limit


def _u8(buffer: pa.Buffer) -> pa.Array:
    return pa.Array.from_buffers(pa.uint8(), buffer.size, [None, buffer])


def _windows(buffer: pa.Buffer, starts: pa.Array, ends: pa.Array, n: int) -> pa.Array:
    """The first ``WINDOW`` bytes of every record (each record >= WINDOW bytes), contiguous, as uint8."""
    offsets = pc.cast(pc.take(pa.concat_arrays([starts, ends]), _interleave_index(n)), pa.int32())
    records = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, offsets.buffers()[1], buffer])
    heads = pc.take(pc.binary_slice(records, 0, WINDOW), _even_index(n))
    assert heads.offset == 0 and heads.buffers()[2].size >= WINDOW * n, "windows are contiguous"
    return pa.Array.from_buffers(pa.uint8(), WINDOW * n, [None, heads.buffers()[2]])


def _columns(
    buffer: pa.Buffer,
    f: _Fields,
    ends: pa.Array,
    batches: list[BatchInfo],
    batch_index: pa.Array,
    headers_wanted: bool,
) -> Columns:
    n = len(batch_index)
    value_end = pc.add(f.value_start, pc.max_element_wise(f.value_length, ZERO))
    header_count, pos = _varints(_u8(buffer), value_end, MAX_VARINT_BYTES)
    _check_fits(pos, ends, header_count, f.key_length, f.value_length, headers_wanted)

    def per_record(value_of, kind) -> pa.Array:
        return pc.take(pa.array([value_of(b) for b in batches], kind), batch_index)

    offsets = pc.add(per_record(lambda b: b.base_offset, pa.int64()), f.offset_delta)
    timestamps = pc.add(per_record(lambda b: b.base_timestamp, pa.int64()), f.timestamp_delta)
    if any(b.log_append_time for b in batches):
        types = per_record(lambda b: int(b.log_append_time), pa.int32())
        lat = pc.equal(types, pa.scalar(1, pa.int32()))
        timestamps = pc.if_else(lat, per_record(lambda b: b.max_timestamp, pa.int64()), timestamps)
    else:
        types = pa.repeat(pa.scalar(0, pa.int32()), n)
    return Columns(
        offset=offsets,
        timestamp_ms=timestamps,
        key=_gather_binary(buffer, f.key_start, f.key_length),
        value=_gather_binary(buffer, f.value_start, f.value_length),
        timestamp_type=types,
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
    decoded = _varints_or_none(data, pos, max_bytes)
    if decoded is None:
        raise FastPathDeclined("varint longer than allowed")
    return decoded


def _varints_or_none(data: pa.Array, pos: pa.Array, max_bytes: int) -> tuple[pa.Array, pa.Array] | None:
    """``_varints``, or None when a varint is longer than ``max_bytes``."""
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
                return None
            byte = pc.cast(pc.take(data, pc.min_element_wise(pc.add(pos, i64(k)), last)), pa.int64())
            part = pc.shift_left(pc.bit_wise_and(byte, PAYLOAD), i64(7 * k))
            raw = pc.if_else(more, pc.bit_wise_or(raw, part), raw)
            size = pc.if_else(more, i64(k + 1), size)
            more = pc.and_(more, pc.greater_equal(byte, CONTINUATION))
    value = pc.bit_wise_xor(pc.shift_right(raw, ONE), pc.negate(pc.bit_wise_and(raw, ONE)))
    return value, pc.add(pos, size)


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
