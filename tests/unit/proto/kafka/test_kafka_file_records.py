"""Records sent from a file (``proto.kafka.codec``: ``FileRegion``, ``ResponseParts``, ``FrameParts``;
``proto.kafka.api.encode_response_parts``): a Fetch answer whose records are file slices encodes to
parts whose sizes add up to exactly the bytes the in-memory encoding has, byte for byte."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from proto.kafka import api
from proto.kafka import messages as m
from proto.kafka.api import ApiKey, RequestHeader
from proto.kafka.codec import FrameParts
from storage.file_slice import FileSlice

LOW, HIGH = api.SUPPORTED_VERSIONS[ApiKey.FETCH]


@pytest.fixture
def segment(tmp_path: Path):
    """A file of random bytes standing for a segment; yields (fd, its bytes)."""
    data = random.Random(7).randbytes(70_000)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


def fetch_response(records: list) -> m.FetchResponse:
    partitions = [
        m.FetchResponsePartitionData(
            partition_index=i, error_code=0, high_watermark=100, last_stable_offset=100,
            log_start_offset=0, aborted_transactions=[], preferred_read_replica=-1, records=r,
        )
        for i, r in enumerate(records)
    ]
    topic = m.FetchResponseFetchableTopicResponse(topic="t", partitions=partitions)
    return m.FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[topic])


# Region sizes around the compact length's one/two/three-byte varint boundaries (size + 1 is encoded).
SIZES = [1, 126, 127, 128, 16_382, 16_383, 16_384, 65_000]


@pytest.mark.parametrize("version", range(LOW, HIGH + 1))
@pytest.mark.parametrize("size", SIZES)
def test_parts_equal_the_in_memory_encoding(segment, version: int, size: int) -> None:
    fd, data = segment
    header = RequestHeader(ApiKey.FETCH, version, 99, "c")
    position = 1_000
    # partitions: a slice, empty bytes, null records, bytes, another slice of the same file
    region_a = FileSlice(fd, position, size, "seg")
    region_b = FileSlice(fd, 5, 300, "seg")
    records = [region_a, b"", None, b"abc", region_b]
    frame = api.encode_response_parts(header, fetch_response(records))
    assert isinstance(frame, FrameParts)
    assert frame.regions == [region_a, region_b]
    in_memory = api.encode_response_frame(
        header, fetch_response([data[position : position + size], b"", None, b"abc", data[5:305]])
    )
    sent = frame.to_bytes()
    assert sent == bytes(in_memory)
    assert frame.size == len(sent) == struct.unpack_from(">i", sent)[0] + 4
    # the parts, in order, add up to the frame: bytes views around the regions
    sizes = [p.nbytes if isinstance(p, memoryview) else p.size for p in frame.parts]
    assert sum(sizes) == frame.size
    tail = [True] if version >= 12 else []  # tagged fields follow the last records from v12 (flexible)
    assert [isinstance(p, memoryview) for p in frame.parts] == [True, False, True, False, *tail]
    assert api.parse_response(ApiKey.FETCH, version, sent[4:])[1].responses[0].partitions[0].records == (
        data[position : position + size]
    )
    frame.close()
    assert region_a.closed and region_b.closed


def test_an_answer_without_regions_is_plain_bytes(segment) -> None:
    header = RequestHeader(ApiKey.FETCH, HIGH, 1, "c")
    frame = api.encode_response_parts(header, fetch_response([b"xyz"]))
    assert isinstance(frame, bytearray)
    assert bytes(frame) == bytes(api.encode_response_frame(header, fetch_response([b"xyz"])))


def test_encoding_a_region_into_plain_bytes_reads_it(segment) -> None:
    """``encode_response`` (no parts buffer) is the in-memory fallback: the region's bytes are read."""
    fd, data = segment
    header = RequestHeader(ApiKey.FETCH, HIGH, 1, "c")
    region = FileSlice(fd, 10, 50, "seg")
    body = api.encode_response(header, fetch_response([region]))
    assert body == api.encode_response(header, fetch_response([data[10:60]]))
    region.close()
