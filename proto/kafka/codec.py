"""Runtime primitives of the generated Kafka protocol codec (``proto/kafka/messages.py``).

The generated code inlines every fixed-size field (one precompiled ``struct.Struct`` per run of
consecutive fixed fields) and calls the helpers below for the variable-size ones: strings, bytes,
records, arrays and unsigned varints, in their classic (non-flexible) and compact (flexible) forms.

Wire forms (Kafka's protocol guide, "Protocol Primitive Types"):

| type | classic | compact (flexible versions) |
|---|---|---|
| string | int16 length, -1 = null, then UTF-8 | unsigned varint length + 1, 0 = null |
| bytes, records | int32 length, -1 = null | unsigned varint length + 1, 0 = null |
| array | int32 count, -1 = null | unsigned varint count + 1, 0 = null |
| tagged fields | — | unsigned varint count, then per field: varint tag, varint size, value |

Decoding never trusts the wire: every length is checked against ``end`` (the bytes actually present)
before it is used, and every array count against ``(end - pos) // min_size`` (the smallest number of
bytes one element can take) before anything is allocated, so a count of 2^31 with ten bytes left
fails at once. A decoder takes ``(buf, pos, end)`` with ``buf`` a ``memoryview`` of unsigned bytes
and returns ``(value, new_pos)``. Truncated fixed fields surface as ``struct.error`` or ``IndexError``
from the inlined code; ``decode_body`` turns those (and invalid UTF-8) into ``KafkaDecodeError``, the
one exception a caller sees for bad bytes.

Encoders append to a ``bytearray``. They trust their input (a value out of range for its type is a
programmer error and raises ``struct.error``). The module is pure: no I/O, no global state.

Records from a file (zero-copy fetch). A records field may hold a *file region* (``FileRegion``:
``storage.file_slice.FileSlice`` is one) instead of bytes. Encoding into a ``ResponseParts`` buffer
writes the field's length prefix (counting the region's bytes) and records where the region goes,
without reading it; ``FrameParts.of`` then cuts the buffer into the parts to send in order — bytes and
regions — with the frame's total size. Encoding into a plain ``bytearray`` reads the region in place
(the in-memory fallback, e.g. for ``encode_response``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Protocol

UVARINT_MAX_BYTES = 5


class KafkaDecodeError(Exception):
    """Bytes that do not decode as the expected Kafka message; ``reason`` says where and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


S_INT8 = struct.Struct(">b")
S_INT16 = struct.Struct(">h")
S_INT32 = struct.Struct(">i")
S_UINT32 = struct.Struct(">I")
NULL_INT16 = S_INT16.pack(-1)
NULL_INT32 = S_INT32.pack(-1)


def _truncated(what: str, need: int, pos: int, end: int) -> KafkaDecodeError:
    return KafkaDecodeError(
        f"{what} of {need} bytes at position {pos} runs past the end ({end - pos} bytes left)"
    )


# ---------------------------------------------------------------------------------------------
# decoding


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes, as Kafka's ``ByteUtils.readUnsignedVarint``)."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift >= 7 * UVARINT_MAX_BYTES:
            raise KafkaDecodeError(f"unsigned varint longer than {UVARINT_MAX_BYTES} bytes at position {pos}")


def _utf8(buf: memoryview, pos: int, e: int) -> str:
    try:
        return str(buf[pos:e], "utf-8")
    except UnicodeDecodeError as exc:
        raise KafkaDecodeError(f"string at position {pos} is not valid UTF-8 ({exc.reason})") from None


def read_nullable_string(buf: memoryview, pos: int, end: int) -> tuple[str | None, int]:
    (n,) = S_INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        return None, pos
    e = pos + n
    if e > end:
        raise _truncated("string", n, pos, end)
    return _utf8(buf, pos, e), e


def read_string(buf: memoryview, pos: int, end: int) -> tuple[str, int]:
    value, new_pos = read_nullable_string(buf, pos, end)
    if value is None:
        raise KafkaDecodeError(f"non-nullable string at position {pos} is null")
    return value, new_pos


def read_nullable_compact_string(buf: memoryview, pos: int, end: int) -> tuple[str | None, int]:
    n = buf[pos]  # one-byte varints inline: most strings are shorter than 127 bytes
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    e = pos + n - 1
    if e > end:
        raise _truncated("compact string", n - 1, pos, end)
    return _utf8(buf, pos, e), e


def read_compact_string(buf: memoryview, pos: int, end: int) -> tuple[str, int]:
    value, new_pos = read_nullable_compact_string(buf, pos, end)
    if value is None:
        raise KafkaDecodeError(f"non-nullable compact string at position {pos} is null")
    return value, new_pos


def read_nullable_records(buf: memoryview, pos: int, end: int) -> tuple[memoryview | None, int]:
    """Records (and bytes) as a zero-copy slice of ``buf``."""
    (n,) = S_INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    e = pos + n
    if e > end:
        raise _truncated("bytes", n, pos, end)
    return buf[pos:e], e


def read_nullable_compact_records(buf: memoryview, pos: int, end: int) -> tuple[memoryview | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    e = pos + n - 1
    if e > end:
        raise _truncated("compact bytes", n - 1, pos, end)
    return buf[pos:e], e


def read_nullable_bytes(buf: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    view, pos = read_nullable_records(buf, pos, end)
    return (None if view is None else bytes(view)), pos


def read_bytes(buf: memoryview, pos: int, end: int) -> tuple[bytes, int]:
    view, new_pos = read_nullable_records(buf, pos, end)
    if view is None:
        raise KafkaDecodeError(f"non-nullable bytes at position {pos} are null")
    return bytes(view), new_pos


def read_nullable_compact_bytes(buf: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    view, pos = read_nullable_compact_records(buf, pos, end)
    return (None if view is None else bytes(view)), pos


def read_compact_bytes(buf: memoryview, pos: int, end: int) -> tuple[bytes, int]:
    view, new_pos = read_nullable_compact_records(buf, pos, end)
    if view is None:
        raise KafkaDecodeError(f"non-nullable compact bytes at position {pos} are null")
    return bytes(view), new_pos


def read_count(buf: memoryview, pos: int, end: int, min_size: int) -> tuple[int, int]:
    """An int32 array count; -1 for null. Refuses a count the remaining bytes cannot hold."""
    (n,) = S_INT32.unpack_from(buf, pos)
    pos += 4
    if n < -1:
        raise KafkaDecodeError(f"negative array count {n} at position {pos - 4}")
    if n > (end - pos) // min_size:
        raise KafkaDecodeError(
            f"array count {n} at position {pos - 4} needs at least {n * min_size} bytes, {end - pos} left"
        )
    return n, pos


def read_compact_count(buf: memoryview, pos: int, end: int, min_size: int) -> tuple[int, int]:
    """A compact array count (varint count + 1); -1 for null."""
    start = pos
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    n -= 1
    if n > (end - pos) // min_size:
        raise KafkaDecodeError(
            f"array count {n} at position {start} needs at least {n * min_size} bytes, {end - pos} left"
        )
    return n, pos


def null_error(field: str, pos: int) -> KafkaDecodeError:
    return KafkaDecodeError(f"non-nullable field {field} is null at position {pos}")


def read_fixed_array(
    buf: memoryview, pos: int, end: int, n: int, fmt: str, size: int
) -> tuple[list[Any], int]:
    """``n`` fixed-size primitives (count already checked by ``read_count``)."""
    values = list(struct.unpack_from(f">{n}{fmt}", buf, pos))
    return values, pos + n * size


def read_string_array(buf: memoryview, pos: int, end: int, n: int, compact: bool) -> tuple[list[str], int]:
    read = read_compact_string if compact else read_string
    values = []
    for _ in range(n):
        value, pos = read(buf, pos, end)
        values.append(value)
    return values, pos


def skip_tagged_fields(buf: memoryview, pos: int, end: int) -> int:
    """Skip a tagged-field section whose tags are all unknown to this version."""
    n, pos = read_uvarint(buf, pos)
    check_tag_count(n, pos, end)
    for _ in range(n):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > end:
            raise _truncated("tagged field", size, pos - size, end)
    return pos


def check_tag_count(n: int, pos: int, end: int) -> None:
    if n > (end - pos) // 2:  # a tagged field takes at least 2 bytes (tag, size)
        raise KafkaDecodeError(f"tagged field count {n} at position {pos} exceeds the {end - pos} bytes left")


def read_tag_header(buf: memoryview, pos: int, end: int) -> tuple[int, int, int]:
    """One tagged field's tag and the end position of its value."""
    tag, pos = read_uvarint(buf, pos)
    size, pos = read_uvarint(buf, pos)
    e = pos + size
    if e > end:
        raise _truncated(f"tagged field {tag}", size, pos, end)
    return tag, pos, e


def tag_size_error(field: str, tag: int, pos: int, e: int) -> KafkaDecodeError:
    return KafkaDecodeError(f"tagged field {field} (tag {tag}) does not fill its {e - pos} bytes")


Decoder = Callable[[memoryview, int, int], tuple[Any, int]]


def decode_body(
    decoder: Decoder, what: str, data: bytes | bytearray | memoryview, pos: int = 0, exact: bool = True
) -> Any:
    """Decode one message filling ``data[pos:]`` exactly (``exact=False``: bytes after the message are
    ignored, as Kafka's broker does with a request); every failure is a ``KafkaDecodeError``."""
    buf = as_view(data)
    end = len(buf)
    try:
        value, pos = decoder(buf, pos, end)
    except KafkaDecodeError as exc:
        raise KafkaDecodeError(f"{what}: {exc.reason}") from None
    except (struct.error, IndexError) as exc:
        raise KafkaDecodeError(f"{what}: truncated ({exc})") from None
    if exact and pos != end:
        raise KafkaDecodeError(f"{what}: {end - pos} bytes left over after the message")
    return value


def as_view(data: bytes | bytearray | memoryview) -> memoryview:
    view = data if isinstance(data, memoryview) else memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


# ---------------------------------------------------------------------------------------------
# encoding


def write_uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def write_string(out: bytearray, value: str) -> None:
    data = value.encode()
    out += S_INT16.pack(len(data))
    out += data


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += NULL_INT16
    else:
        write_string(out, value)


def write_compact_string(out: bytearray, value: str) -> None:
    data = value.encode()
    write_uvarint(out, len(data) + 1)
    out += data


def write_nullable_compact_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_string(out, value)


def write_bytes(out: bytearray, value: bytes | bytearray | memoryview) -> None:
    out += S_INT32.pack(len(value) if not isinstance(value, memoryview) else value.nbytes)
    out += value


def write_nullable_bytes(out: bytearray, value: bytes | bytearray | memoryview | None) -> None:
    if value is None:
        out += NULL_INT32
    else:
        write_bytes(out, value)


def write_compact_bytes(out: bytearray, value: bytes | bytearray | memoryview) -> None:
    write_uvarint(out, (len(value) if not isinstance(value, memoryview) else value.nbytes) + 1)
    out += value


def write_nullable_compact_bytes(out: bytearray, value: bytes | bytearray | memoryview | None) -> None:
    if value is None:
        out.append(0)
    else:
        write_compact_bytes(out, value)


def write_count(out: bytearray, n: int, compact: bool) -> None:
    if compact:
        write_uvarint(out, n + 1)
    else:
        out += S_INT32.pack(n)


def write_fixed_array(out: bytearray, values: list[Any], fmt: str, compact: bool) -> None:
    write_count(out, len(values), compact)
    out += struct.pack(f">{len(values)}{fmt}", *values)


def write_string_array(out: bytearray, values: list[str], compact: bool) -> None:
    write_count(out, len(values), compact)
    write = write_compact_string if compact else write_string
    for value in values:
        write(out, value)


def write_tagged_fields(out: bytearray, fields: list[tuple[int, bytearray]]) -> None:
    """A tagged-field section; ``fields`` in ascending tag order."""
    write_uvarint(out, len(fields))
    for tag, data in fields:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


def write_nullable_records(out: bytearray, value: Any) -> None:
    """Records: bytes, or a ``FileRegion`` (see the module docstring)."""
    if value is None:
        out += NULL_INT32
    elif isinstance(value, (bytes, bytearray, memoryview)):
        write_bytes(out, value)
    else:
        out += S_INT32.pack(value.size)
        _add_region(out, value)


def write_nullable_compact_records(out: bytearray, value: Any) -> None:
    if value is None:
        out.append(0)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        write_compact_bytes(out, value)
    else:
        write_uvarint(out, value.size + 1)
        _add_region(out, value)


# ---------------------------------------------------------------------------------------------
# records sent from a file


class FileRegion(Protocol):
    """``size`` bytes at ``position`` of the file open as ``fileno()``; ``read()`` gives them."""

    position: int
    size: int

    def fileno(self) -> int: ...

    def read(self) -> bytes: ...

    def close(self) -> None: ...


class ResponseParts(bytearray):
    """An encoding buffer that leaves file regions out: ``regions`` lists (offset in the buffer, region)."""

    __slots__ = ("regions",)

    def __init__(self, size: int = 0) -> None:
        super().__init__(size)
        self.regions: list[tuple[int, FileRegion]] = []


def _add_region(out: bytearray, region: FileRegion) -> None:
    if type(out) is ResponseParts:
        out.regions.append((len(out), region))
    else:
        out += region.read()


class FrameParts:
    """One response frame as the parts to send in order: ``memoryview``s of the encoded bytes and the
    file regions between them; ``size`` is the frame's total size in bytes (size prefix included)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[memoryview | FileRegion], size: int) -> None:
        self.parts = parts
        self.size = size

    @classmethod
    def of(cls, out: ResponseParts) -> FrameParts:
        view = memoryview(out)
        parts: list[memoryview | FileRegion] = []
        size = len(out)
        done = 0
        for position, region in out.regions:
            if position > done:
                parts.append(view[done:position])
            parts.append(region)
            size += region.size
            done = position
        if done < len(out):
            parts.append(view[done:])
        return cls(parts, size)

    @property
    def regions(self) -> list[FileRegion]:
        return [part for part in self.parts if not isinstance(part, memoryview)]

    @property
    def region_bytes(self) -> int:
        """Bytes of the file regions (the records of a Fetch answer)."""
        return sum(part.size for part in self.parts if not isinstance(part, memoryview))

    def to_bytes(self) -> bytes:
        """The whole frame in memory (reads every region; the fallback where sendfile cannot serve)."""
        return b"".join(part if isinstance(part, memoryview) else part.read() for part in self.parts)

    def close(self) -> None:
        """Release every region's file (after sending, or when the answer is dropped)."""
        for region in self.regions:
            region.close()
