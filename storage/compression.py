"""The compression codecs of a Kafka v2 RecordBatch: what Kafka's Java client writes, and reading it back.

Bits 0-2 of a batch's attributes name the codec of everything after the 61-byte header (the
records region); the header itself is never compressed. Each codec's bytes, as Apache Kafka writes
them so that Java clients and brokers read ours:

- ``GZIP`` (1): an RFC 1952 gzip stream (Java's ``GZIPOutputStream``). Concatenated members are read.
- ``SNAPPY`` (2): Java Kafka wraps snappy in xerial's ``SnappyOutputStream`` framing: a 16-byte
  header (``0x82 'SNAPPY' 0x00``, int32 version 1, int32 compatible-version 1) then blocks of
  ``int32 compressed length`` + raw snappy block, each block holding at most 32 KiB of input. We
  write that framing; we read it and also plain raw snappy (librdkafka and some clients write raw).
- ``LZ4`` (3): the LZ4 frame format (magic ``04 22 4D 18``) with independent blocks, as Kafka ≥ 0.10.
- ``ZSTD`` (4): a zstd frame (KIP-110). Several concatenated frames are read.

Decompression is bounded by ``MAX_DECOMPRESSED_BYTES`` so that a small corrupt or hostile batch
cannot make us allocate without limit, and every failure of a codec library surfaces as
``CorruptRecordError`` with the codec's name and the library's message: callers catch one type.

Thread-safety: pure functions; the codec objects are created per call.
"""

from __future__ import annotations

import enum
import gzip
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from storage.batch_header import MAX_BATCH_SIZE, CorruptRecordError


class CompressionType(enum.IntEnum):
    """Kafka's codec ids (attributes bits 0-2); 5-7 are unassigned and therefore corrupt."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# A decompressed records region may be larger than the batch that carries it, but never more than
# this: the same ceiling the header puts on one batch (storage.batch_header.MAX_BATCH_SIZE).
MAX_DECOMPRESSED_BYTES = MAX_BATCH_SIZE
GZIP_LEVEL = 6  # java.util.zip.Deflater's default, which Kafka's GZIPOutputStream uses
XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_BYTES = 32 * 1024  # xerial SnappyOutputStream's default block size
_XERIAL_MAGIC = XERIAL_HEADER[:8]
_I32 = struct.Struct(">i")
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZSTD_INPUT_CHUNK_BYTES = 32 * 1024

# What the codec libraries raise on bad input; anything in this tuple becomes CorruptRecordError.
_CODEC_ERRORS = (
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    RuntimeError,
    OverflowError,
    MemoryError,
    zstandard.ZstdError,
    cramjam.DecompressionError,
)


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records region with ``codec`` (never NONE: the caller skips compression then)."""
    if codec == CompressionType.GZIP:
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    if codec == CompressionType.SNAPPY:
        return _xerial_snappy_compress(data)
    if codec == CompressionType.LZ4:
        return lz4.frame.compress(data, block_linked=False)
    if codec == CompressionType.ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"compression type {codec} is not a codec Kafka defines (1-4)")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a records region; any codec failure or an oversize result is a CorruptRecordError."""
    try:
        if codec == CompressionType.GZIP:
            return _gunzip(data)
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(data)
        if codec == CompressionType.LZ4:
            return _lz4_decompress(data)
        if codec == CompressionType.ZSTD:
            return _zstd_decompress(data)
    except CorruptRecordError:
        raise
    except _CODEC_ERRORS as exc:
        name = CompressionType(codec).name.lower()
        raise CorruptRecordError(f"{name} decompression failed: {type(exc).__name__}: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec {codec} in batch attributes (Kafka defines 0-4)")


def _too_large(codec: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"{codec} records region decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes"
    )


def _gunzip(data: bytes | memoryview) -> bytes:
    parts: list[bytes] = []
    total = 0
    rest = bytes(data)
    while True:
        inflater = zlib.decompressobj(_GZIP_WBITS)
        part = inflater.decompress(rest, MAX_DECOMPRESSED_BYTES - total + 1)
        total += len(part)
        if total > MAX_DECOMPRESSED_BYTES or inflater.unconsumed_tail:
            raise _too_large("gzip")
        if not inflater.eof:
            raise CorruptRecordError("gzip stream is truncated: no end-of-stream marker")
        parts.append(part)
        rest = inflater.unused_data
        if not rest:
            return b"".join(parts)


def _xerial_snappy_compress(data: bytes) -> bytes:
    parts = [XERIAL_HEADER]
    view = memoryview(data)
    # At least one block, even for empty input: readers that detect the framing by "longer than the
    # 16-byte header" (kafka-python) would otherwise take a bare header for raw snappy.
    for start in range(0, max(len(data), 1), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | memoryview) -> bytes:
    data = bytes(data)
    if len(data) >= len(XERIAL_HEADER) and data[: len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
        return _xerial_snappy_decompress(data)
    return _raw_snappy_block(data, 0)


def _raw_snappy_block(data: bytes, total_so_far: int) -> bytes:
    # A raw snappy block starts with its uncompressed length: check it before allocating.
    if total_so_far + cramjam.snappy.decompress_raw_len(data) > MAX_DECOMPRESSED_BYTES:
        raise _too_large("snappy")
    return bytes(cramjam.snappy.decompress_raw(data))


def _xerial_snappy_decompress(data: bytes) -> bytes:
    parts: list[bytes] = []
    total = 0
    pos = len(XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError(f"xerial snappy block length truncated at byte {pos}")
        (block_bytes,) = _I32.unpack_from(data, pos)
        pos += 4
        if block_bytes < 0 or pos + block_bytes > len(data):
            raise CorruptRecordError(
                f"xerial snappy block of {block_bytes} bytes at byte {pos} overruns the {len(data)}-byte data"
            )
        part = _raw_snappy_block(data[pos : pos + block_bytes], total)
        total += len(part)
        parts.append(part)
        pos += block_bytes
    return b"".join(parts)


def _lz4_decompress(data: bytes | memoryview) -> bytes:
    parts: list[bytes] = []
    total = 0
    rest = bytes(data)
    while True:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        part = decompressor.decompress(rest, max_length=MAX_DECOMPRESSED_BYTES - total + 1)
        total += len(part)
        if total > MAX_DECOMPRESSED_BYTES:
            raise _too_large("lz4")
        if not decompressor.eof:
            raise CorruptRecordError("lz4 frame is truncated: no end mark")
        parts.append(part)
        rest = decompressor.unused_data
        if not rest:
            return b"".join(parts)


def _zstd_decompress(data: bytes | memoryview) -> bytes:
    # Java's ZstdOutputStream omits the content size, so there is no size to check up front: the
    # input goes in 32 KiB at a time and the running output total is checked after each piece.
    parts: list[bytes] = []
    total = 0
    rest = bytes(data)
    decompressor = zstandard.ZstdDecompressor()
    while True:
        frame = decompressor.decompressobj()
        pos = 0
        while not frame.eof and pos < len(rest):
            part = frame.decompress(rest[pos : pos + _ZSTD_INPUT_CHUNK_BYTES])
            pos += _ZSTD_INPUT_CHUNK_BYTES
            total += len(part)
            if total > MAX_DECOMPRESSED_BYTES:
                raise _too_large("zstd")
            parts.append(part)
        if not frame.eof:
            raise CorruptRecordError("zstd frame is truncated: input ended inside the frame")
        rest = frame.unused_data + rest[pos:]
        if not rest:
            return b"".join(parts)
