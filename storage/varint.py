"""Zigzag varints as Kafka's v2 records use them (the protobuf encoding of sint32/sint64).

A signed value ``v`` is first zigzag-mapped to an unsigned one, ``(v << 1) ^ (v >> 63)``, so that
small magnitudes of either sign stay small (0→0, -1→1, 1→2, -2→3, ...). The unsigned value is then
written little-endian in groups of 7 bits, the high bit of each byte set when another byte follows.
Kafka's ``varint`` fields (lengths, offsetDelta, header count) fit int32 and take at most 5 bytes;
``varlong`` fields (timestampDelta) fit int64 and take at most 10. We read every field as a varlong
(at most 10 bytes) and let the field's own bounds checks reject values that do not fit.

``SMALL_VARINTS[v + 1]`` holds the encoding of every ``v`` in ``[-1, SMALL_VARINT_LIMIT)``: record
encoding looks lengths and offset deltas up there instead of looping over bits.

Thread-safety: pure functions and an immutable table.
"""

from __future__ import annotations

from storage.batch_header import CorruptRecordError

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MAX_VARLONG_BYTES = 10
SMALL_VARINT_LIMIT = 1 << 14  # every value below this encodes in at most 3 bytes


def zigzag(value: int) -> int:
    """Map int64 ``value`` to its unsigned zigzag form."""
    return (value << 1) ^ (value >> 63)


def unzigzag(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


def encode_varint(value: int) -> bytes:
    """The zigzag varint bytes of int64 ``value``."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a Kafka varlong (int64)")
    raw = zigzag(value)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def read_unsigned(data: bytes, pos: int) -> tuple[int, int]:
    """Read the unsigned (not yet un-zigzagged) varint at ``pos``; return it and the next position.

    Raises CorruptRecordError if the varint runs past the data or past 10 bytes.
    """
    raw = 0
    shift = 0
    end = min(len(data), pos + MAX_VARLONG_BYTES)
    while pos < end:
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw >> 64:
                raise CorruptRecordError(f"varint ending at byte {pos} does not fit 64 bits")
            return raw, pos
        shift += 7
    if pos >= len(data):
        raise CorruptRecordError(f"varint truncated at byte {pos}: the data ends inside it")
    start = pos - MAX_VARLONG_BYTES
    raise CorruptRecordError(f"varint at byte {start} is longer than {MAX_VARLONG_BYTES} bytes")


def decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Read the signed zigzag varint at ``pos``; return ``(value, next_position)``."""
    raw, pos = read_unsigned(data, pos)
    return unzigzag(raw), pos


SMALL_VARINTS: tuple[bytes, ...] = tuple(encode_varint(v) for v in range(-1, SMALL_VARINT_LIMIT))
