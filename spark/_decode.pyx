# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled decoder: records regions of Kafka v2 batches -> Arrow buffers, one pass in C.

Built at install time (``setup.py``: Cython, then the C compiler) as ``spark._decode``. The caller
(``spark.arrow``) CRC-checks each wanted batch and decompresses its records region with the
existing libraries first; here every record of every region is parsed once (layout in
``storage.record_batch``), and its fields are written straight into the buffers of the Arrow
arrays: offsets and timestamps (int64, microseconds), timestamp types (int32), keys and values
(binary: validity bitmap, int32 offsets, the bytes copied once), and — when asked for — headers
(list<struct<key: string, value: binary>>).

Checks: every read is bounds-checked against its record, and the record's fields must add up to
its ``length`` exactly, as ``storage.record_batch._decode_region`` requires. On anything unusual —
damaged records, a varint over 10 bytes, a value outside int64, more than 2 GiB of key or value
bytes, a header key that is not UTF-8 — it raises ``Declined`` and writes nothing the caller keeps:
the caller then uses the Python decoder, which gives the same output or the precise
``CorruptRecordError``. So this module never decides what is an error; it only goes fast where the
data is plain.

Thread-safety: pure functions; the GIL is held throughout (fetches are a few MB, decoded in ms).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset

import pyarrow as pa

cdef extern from *:
    """
    #define pykraft_add_overflow(a, b, out) __builtin_add_overflow(a, b, out)
    #define pykraft_mul_overflow(a, b, out) __builtin_mul_overflow(a, b, out)
    """
    bint add_overflow "pykraft_add_overflow"(int64_t a, int64_t b, int64_t* out) noexcept
    bint mul_overflow "pykraft_mul_overflow"(int64_t a, int64_t b, int64_t* out) noexcept

cdef int64_t MIN_RECORD_BYTES = 7  # length + attributes + 2 deltas + 2 lengths + headerCount
cdef int64_t MIN_RECORD_BODY_BYTES = 6
cdef int64_t NULL_LENGTH = -1
cdef int64_t US_PER_MS = 1000
cdef int64_t MAX_ARROW_BYTES = 2147483647  # int32 offsets of Arrow binary arrays
cdef int MAX_VARINT_BYTES = 10


class Declined(Exception):  # a signal to use the Python decoder, not an error
    """These records need the Python decoder (damaged, or outside what this decoder handles)."""


cdef inline bint read_varint(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end, int64_t* out) noexcept:
    """Zigzag varint at ``pos[0]`` (at most 10 bytes, fitting 64 bits, ending before ``end``)."""
    cdef Py_ssize_t i = pos[0]
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef uint8_t b
    if i < end and p[i] < 0x80:  # the usual one-byte case
        raw = p[i]
        pos[0] = i + 1
        out[0] = <int64_t>(raw >> 1) ^ -<int64_t>(raw & 1)
        return True
    while i < end and shift < 7 * MAX_VARINT_BYTES:
        b = p[i]
        i += 1
        if shift == 63 and b > 1:
            return False  # more than 64 bits
        raw |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            pos[0] = i
            out[0] = <int64_t>(raw >> 1) ^ -<int64_t>(raw & 1)
            return True
        shift += 7
    return False


cdef inline uint8_t* address(object buffer):
    return <uint8_t*><uintptr_t>buffer.address


cdef class _Binary:
    """A binary column being filled: validity bits, int32 offsets, data (capacity fixed upfront)."""

    cdef object validity, offsets, data
    cdef uint8_t* validity_p
    cdef int32_t* offsets_p
    cdef uint8_t* data_p
    cdef int64_t size, capacity, nulls

    def __cinit__(self, int64_t n, int64_t capacity):
        self.validity = pa.allocate_buffer((n + 7) // 8)
        self.offsets = pa.allocate_buffer(4 * (n + 1))
        self.data = pa.allocate_buffer(max(capacity, 1), resizable=True)
        self.validity_p = address(self.validity)
        self.offsets_p = <int32_t*>address(self.offsets)
        self.data_p = address(self.data)
        memset(self.validity_p, 0, (n + 7) // 8)
        self.offsets_p[0] = 0
        self.size = 0
        self.capacity = capacity
        self.nulls = 0

    cdef inline void append(self, int64_t i, const uint8_t* src, int64_t length) noexcept:
        """Element ``i`` (elements are appended in order); length -1 is null. Fits: checked by callers."""
        if length < 0:
            self.nulls += 1
        else:
            self.validity_p[i >> 3] |= <uint8_t>(1 << (i & 7))
            memcpy(self.data_p + self.size, src, length)
            self.size += length
        self.offsets_p[i + 1] = <int32_t>self.size

    def array(self, kind, int64_t n):
        self.data.resize(self.size)
        validity = self.validity if self.nulls else None
        return pa.Array.from_buffers(kind, n, [validity, self.offsets, self.data], null_count=self.nulls)


cdef struct Record:  # one parsed record, positions in its region
    int64_t timestamp_delta
    int64_t offset_delta
    Py_ssize_t key_pos
    int64_t key_length
    Py_ssize_t value_pos
    int64_t value_length
    Py_ssize_t headers_pos
    int64_t header_count
    int64_t header_key_bytes
    int64_t header_value_bytes


cdef bint parse_headers(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, Record* r,
                        _Binary keys, _Binary values, int64_t first) noexcept:
    """Walk ``r.header_count`` headers from ``pos`` to exactly ``end``; fill keys/values if given."""
    cdef int64_t h, length
    r.header_key_bytes = 0
    r.header_value_bytes = 0
    for h in range(r.header_count):
        if not read_varint(p, &pos, end, &length) or length < 0 or length > end - pos:
            return False
        if keys is not None:
            keys.append(first + h, p + pos, length)
        r.header_key_bytes += length
        pos += length
        if not read_varint(p, &pos, end, &length) or length < NULL_LENGTH or length > end - pos:
            return False
        if values is not None:
            values.append(first + h, p + pos, length)
        if length > 0:
            r.header_value_bytes += length
            pos += length
    return pos == end


cdef bint parse_record(const uint8_t* p, Py_ssize_t* at, Py_ssize_t end, Record* r) noexcept:
    """Parse the record at ``at[0]`` (which moves past it); False when it is not plainly valid."""
    cdef Py_ssize_t pos = at[0]
    cdef int64_t length
    if not read_varint(p, &pos, end, &length):
        return False
    if length < MIN_RECORD_BODY_BYTES or length > end - pos:
        return False
    end = pos + length
    pos += 1  # attributes: an int8 Kafka leaves at 0
    if not read_varint(p, &pos, end, &r.timestamp_delta) or not read_varint(p, &pos, end, &r.offset_delta):
        return False
    if not read_varint(p, &pos, end, &r.key_length) or r.key_length < NULL_LENGTH or r.key_length > end - pos:
        return False
    r.key_pos = pos
    if r.key_length > 0:
        pos += r.key_length
    if not read_varint(p, &pos, end, &r.value_length) or r.value_length < NULL_LENGTH:
        return False
    if r.value_length > end - pos:
        return False
    r.value_pos = pos
    if r.value_length > 0:
        pos += r.value_length
    if not read_varint(p, &pos, end, &r.header_count) or r.header_count < 0:
        return False
    if r.header_count > (end - pos) // 2:  # each header takes at least 2 bytes
        return False
    r.headers_pos = pos
    r.header_key_bytes = 0
    r.header_value_bytes = 0
    if r.header_count == 0:
        if pos != end:
            return False
    elif not parse_headers(p, pos, end, r, None, None, 0):
        return False
    at[0] = end
    return True


def decode_regions(list regions, list batches, bint headers_wanted):
    """Decode every record of ``regions`` (one records region per batch, uncompressed) to Arrow arrays.

    ``batches[i]`` is ``(base_offset, base_timestamp, max_timestamp, log_append_time, records_count)``
    of ``regions[i]``. Returns ``(key, value, offset, timestamp, timestampType, headers)`` arrays in
    the types of ``spark.schema.arrow_schema`` (``headers`` None unless wanted); raises ``Declined``.
    """
    cdef int64_t n = 0, total_bytes = 0, count, i = 0, k, value
    cdef int64_t header_total = 0, header_key_bytes = 0, header_value_bytes = 0
    cdef int64_t base_offset, base_timestamp, max_timestamp
    cdef bint log_append_time
    cdef const uint8_t[::1] region
    cdef const uint8_t* p
    cdef Py_ssize_t pos, end
    cdef Record r
    cdef Py_ssize_t index
    for index in range(len(regions)):
        count = batches[index][4]
        if count < 0 or count > len(regions[index]) // MIN_RECORD_BYTES:
            raise Declined("recordsCount does not fit the records region")
        n += count
        total_bytes += len(regions[index])
    if total_bytes > MAX_ARROW_BYTES:
        raise Declined("more than 2 GiB of records in one fetch")
    offsets_buffer = pa.allocate_buffer(8 * n)
    timestamps_buffer = pa.allocate_buffer(8 * n)
    types_buffer = pa.allocate_buffer(4 * n)
    cdef int64_t* offsets = <int64_t*>address(offsets_buffer)
    cdef int64_t* timestamps = <int64_t*>address(timestamps_buffer)
    cdef int32_t* types = <int32_t*>address(types_buffer)
    cdef _Binary keys = _Binary(n, total_bytes)
    cdef _Binary values = _Binary(n, total_bytes)
    list_offsets_buffer = pa.allocate_buffer(4 * (n + 1)) if headers_wanted else None
    cdef int32_t* list_offsets = <int32_t*>address(list_offsets_buffer) if headers_wanted else NULL
    if headers_wanted:
        list_offsets[0] = 0
    for index in range(len(regions)):
        region = regions[index]
        base_offset, base_timestamp, max_timestamp, log_append_time, count = batches[index]
        end = region.shape[0]
        p = &region[0] if end else NULL
        pos = 0
        for k in range(count):
            if not parse_record(p, &pos, end, &r):
                raise Declined("a record is not plainly valid")
            if add_overflow(base_offset, r.offset_delta, &offsets[i]):
                raise Declined("offset outside int64")
            if log_append_time:
                value = max_timestamp
            elif add_overflow(base_timestamp, r.timestamp_delta, &value):
                raise Declined("timestamp outside int64")
            if mul_overflow(value, US_PER_MS, &timestamps[i]):
                raise Declined("timestamp outside the microsecond range")
            types[i] = log_append_time
            keys.append(i, p + r.key_pos, r.key_length)
            values.append(i, p + r.value_pos, r.value_length)
            header_total += r.header_count
            header_key_bytes += r.header_key_bytes
            header_value_bytes += r.header_value_bytes
            if headers_wanted:
                list_offsets[i + 1] = <int32_t>header_total
            i += 1
        if pos != end:
            raise Declined("bytes left after the records the header counts")
    headers = None
    if headers_wanted:
        headers = _headers(regions, batches, n, header_total, header_key_bytes, header_value_bytes,
                           list_offsets_buffer)
    return (
        keys.array(pa.binary(), n),
        values.array(pa.binary(), n),
        pa.Array.from_buffers(pa.int64(), n, [None, offsets_buffer]),
        pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, timestamps_buffer]),
        pa.Array.from_buffers(pa.int32(), n, [None, types_buffer]),
        headers,
    )


def _headers(list regions, list batches, int64_t n, int64_t count, int64_t key_bytes, int64_t value_bytes,
             list_offsets_buffer):
    """list<struct<key: string, value: binary>> of every record (a second walk, only when wanted)."""
    cdef _Binary keys = _Binary(count, key_bytes)
    cdef _Binary values = _Binary(count, value_bytes)
    cdef const uint8_t[::1] region
    cdef const uint8_t* p
    cdef Py_ssize_t pos, end
    cdef int64_t k, first = 0
    cdef Record r
    cdef Py_ssize_t index
    if key_bytes > MAX_ARROW_BYTES or value_bytes > MAX_ARROW_BYTES:
        raise Declined("more than 2 GiB of header bytes in one fetch")
    if count:
        for index in range(len(regions)):
            region = regions[index]
            end = region.shape[0]
            p = &region[0] if end else NULL
            pos = 0
            for k in range(batches[index][4]):
                parse_record(p, &pos, end, &r)  # checked by the first walk
                if r.header_count:
                    parse_headers(p, r.headers_pos, pos, &r, keys, values, first)
                    first += r.header_count
    key_array = keys.array(pa.string(), count)
    try:
        key_array.validate(full=True)  # Kafka header keys are UTF-8 (the Python decoder replaces bad bytes)
    except pa.ArrowInvalid:
        raise Declined("a header key is not UTF-8") from None
    structs = pa.StructArray.from_arrays(
        [key_array, values.array(pa.binary(), count)],
        fields=[pa.field("key", pa.string()), pa.field("value", pa.binary())],
    )
    list_offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, list_offsets_buffer])
    element = pa.field("element", structs.type)
    return pa.ListArray.from_arrays(list_offsets, structs, type=pa.list_(element))
