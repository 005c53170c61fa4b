"""The batch codecs: round trips, the formats Kafka's Java client writes, and bad input as one error."""

from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.frame
import pytest
import zstandard

from storage import compression
from storage.batch_header import CorruptRecordError
from storage.compression import XERIAL_BLOCK_BYTES, XERIAL_HEADER, CompressionType, compress, decompress

CODECS = [pytest.param(codec, id=codec.name.lower()) for codec in list(CompressionType)[1:]]
DATA = b"".join(b"record %d with a compressible payload; " % i for i in range(5000))


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", DATA], ids=["empty", "one-byte", "200k"])
def test_round_trip(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data


def test_snappy_writes_xerial_framing_in_32k_blocks() -> None:
    """Java Kafka's snappy is xerial's SnappyOutputStream: 16-byte header, then (int32 length, block)."""
    out = compress(CompressionType.SNAPPY, DATA)
    assert out.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    pos, blocks = len(XERIAL_HEADER), []
    while pos < len(out):
        (size,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    assert b"".join(blocks) == DATA
    assert [len(b) for b in blocks[:-1]] == [XERIAL_BLOCK_BYTES] * (len(blocks) - 1)


def test_snappy_of_nothing_is_one_empty_block() -> None:
    """A bare 16-byte xerial header reads as raw snappy to kafka-python, so even b"" gets a block."""
    assert compress(CompressionType.SNAPPY, b"") == XERIAL_HEADER + b"\x00\x00\x00\x01\x00"
    assert decompress(CompressionType.SNAPPY, XERIAL_HEADER) == b""


@pytest.mark.parametrize(
    ("codec", "foreign"),
    [
        pytest.param(CompressionType.SNAPPY, bytes(cramjam.snappy.compress_raw(DATA)), id="raw-snappy"),
        pytest.param(
            CompressionType.GZIP, gzip.compress(DATA[:100]) + gzip.compress(DATA[100:]), id="gzip-members"
        ),
        pytest.param(
            CompressionType.LZ4, lz4.frame.compress(DATA, block_linked=True), id="lz4-linked-blocks"
        ),
        pytest.param(
            CompressionType.LZ4,
            lz4.frame.compress(DATA[:10]) + lz4.frame.compress(DATA[10:]),
            id="lz4-two-frames",
        ),
        pytest.param(
            CompressionType.ZSTD,
            zstandard.ZstdCompressor(write_content_size=False).compress(DATA[:7])
            + zstandard.ZstdCompressor(level=19).compress(DATA[7:]),
            id="zstd-two-frames-no-content-size",
        ),
    ],
)
def test_reads_what_other_writers_produce(codec: CompressionType, foreign: bytes) -> None:
    """librdkafka writes raw snappy; streams may hold several gzip members or zstd/lz4 frames."""
    assert decompress(codec, foreign) == DATA


@pytest.mark.parametrize(
    ("codec", "data", "reason"),
    [
        pytest.param(CompressionType.GZIP, b"", "gzip stream is truncated", id="gzip-empty"),
        pytest.param(CompressionType.GZIP, b"not gzip at all", "gzip decompression failed", id="gzip-junk"),
        pytest.param(
            CompressionType.GZIP, gzip.compress(DATA)[:-9], "gzip stream is truncated", id="gzip-cut"
        ),
        pytest.param(CompressionType.SNAPPY, b"", "snappy decompression failed", id="snappy-empty"),
        pytest.param(
            CompressionType.SNAPPY, b"\x05\xff\xff\xff", "snappy decompression failed", id="snappy-junk"
        ),
        pytest.param(
            CompressionType.SNAPPY,
            XERIAL_HEADER + b"\x00\x00\x00\x09abc",
            "overruns",
            id="xerial-block-overrun",
        ),
        pytest.param(
            CompressionType.SNAPPY, XERIAL_HEADER + b"\x00\x00", "length truncated", id="xerial-length-cut"
        ),
        pytest.param(
            CompressionType.SNAPPY, XERIAL_HEADER + b"\xff\xff\xff\xff", "overruns", id="xerial-negative"
        ),
        pytest.param(CompressionType.LZ4, b"", "lz4 frame is truncated", id="lz4-empty"),
        pytest.param(
            CompressionType.LZ4, b"\x04\x22\x4d\x18garbage", "lz4 decompression failed", id="lz4-junk"
        ),
        pytest.param(
            CompressionType.LZ4, lz4.frame.compress(DATA)[:-5], "lz4 frame is truncated", id="lz4-cut"
        ),
        pytest.param(CompressionType.ZSTD, b"", "zstd frame is truncated", id="zstd-empty"),
        pytest.param(
            CompressionType.ZSTD, b"junk, not a zstd frame", "zstd decompression failed", id="zstd-junk"
        ),
        pytest.param(
            CompressionType.ZSTD,
            zstandard.ZstdCompressor().compress(DATA)[:-4],
            "zstd frame is truncated",
            id="zstd-cut",
        ),
        pytest.param(5, b"anything", "unknown compression codec 5", id="codec-5"),
    ],
)
def test_bad_input_is_a_corrupt_record_error(codec: int, data: bytes, reason: str) -> None:
    """Issue 2 §2: a decompression failure or an unknown codec is CorruptRecordError with a reason."""
    with pytest.raises(CorruptRecordError, match=reason):
        decompress(codec, data)


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_is_bounded(codec: CompressionType, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small batch must not expand without limit (a decompression bomb): capped at the batch ceiling."""
    bomb = compress(codec, bytes(300_000))
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BYTES", 100_000)
    with pytest.raises(CorruptRecordError, match="decompresses to more than 100000 bytes"):
        decompress(codec, bomb)


def test_compress_refuses_none_and_unknown() -> None:
    for codec in (CompressionType.NONE, 6):
        with pytest.raises(ValueError, match="not a codec"):
            compress(codec, b"x")
