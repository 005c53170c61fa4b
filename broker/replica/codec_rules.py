"""Which compression codecs a request may use (KIP-110): a Produce below v7 may not send zstd, a
Fetch below v10 may not receive it, and no request may use a codec id Kafka does not define (5-7).

``check_codecs`` raises ``UnsupportedCompressionTypeError`` before the log validates a produce's
batches; ``without_zstd`` cuts a fetch answer before its first zstd batch. Both read batch headers
only. Thread-safety: pure functions.
"""

from __future__ import annotations

from dataclasses import replace

from broker.replica.replica_requests import FetchResult
from proto import errors
from proto.errors import ErrorCode
from proto.kafka_types import TopicPartition
from storage.batch_header import CorruptRecordError, iter_batches
from storage.compression import CompressionType
from storage.file_slice import FileSlice

KNOWN_CODECS = frozenset(int(c) for c in CompressionType)


def check_codecs(
    records: bytes | bytearray | memoryview, tp: TopicPartition, zstd_allowed: bool = True
) -> None:
    """Refuse a batch whose attributes name no known codec (ids 5-7), or zstd when the request's
    version predates it, before the log validates it (which names any structural problem)."""
    try:
        for position, header in iter_batches(records, validate=False):
            if header.compression_type not in KNOWN_CODECS:
                raise errors.UnsupportedCompressionTypeError(
                    f"{tp[0]}-{tp[1]}: batch at byte {position} uses compression codec id "
                    f"{header.compression_type}; known: none=0, gzip=1, snappy=2, lz4=3, zstd=4"
                )
            if header.compression_type == CompressionType.ZSTD and not zstd_allowed:
                raise errors.UnsupportedCompressionTypeError(
                    f"{tp[0]}-{tp[1]}: batch at byte {position} is zstd-compressed, which needs Produce "
                    "v7 or later (KIP-110); upgrade the client or use another compression.type"
                )
    except CorruptRecordError:
        return  # the log's validation says what is wrong with it


def without_zstd(tp: TopicPartition, result: FetchResult) -> FetchResult:
    """For a Fetch below v10 (KIP-110): the batches before the first zstd one; when the fetch offset's
    batch is zstd, UNSUPPORTED_COMPRESSION_TYPE with no records, as Kafka answers such a consumer."""
    if not result.records:
        return result
    assert not isinstance(result.records, FileSlice)  # below v10 a fetch reads bytes (FetchBudget)
    for position, header in iter_batches(result.records, validate=False):
        if header.compression_type != CompressionType.ZSTD:
            continue
        if position:
            return replace(result, records=result.records[:position])
        return replace(
            result, code=ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, records=b"",
            message=f"{tp[0]}-{tp[1]}: the batch at the fetch offset is zstd-compressed, which needs "
            "Fetch v10 or later (KIP-110); upgrade the client",
        )  # fmt: skip
    return result
