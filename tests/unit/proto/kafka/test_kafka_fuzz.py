"""Fuzzing the request decoder (issue 15 §5): whatever the bytes, ``parse_request`` returns a
request or raises one of its named errors (``RequestParseError``), and a lying length or count never
makes it allocate more than the frame could hold.

Two strategies per API: random bodies behind a valid header (every supported version), and valid
frames with mutations (byte flips, overwrites with huge or negative int32s and long varints,
truncation, insertion). ``PYKRAFT_FUZZ_EXAMPLES`` sets the examples per API, half to each strategy:
CI uses the default (300, derandomized, a few seconds); the recorded run of the issue (10,000 per
API) is
``PYKRAFT_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest tests/unit/proto/kafka/test_kafka_fuzz.py``.
"""

from __future__ import annotations

import os
import random
import struct
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proto.kafka import api, generate, messages
from proto.kafka.api import RequestHeader
from tests.unit.proto.kafka.samples import MODES, build

EXAMPLES_DEFAULT = 300
EXAMPLES = int(os.environ.get("PYKRAFT_FUZZ_EXAMPLES", EXAMPLES_DEFAULT))
STRATEGIES_PER_API = 2
FUZZ_SETTINGS = settings(
    max_examples=max(1, EXAMPLES // STRATEGIES_PER_API),
    deadline=None,
    database=None,
    derandomize=EXAMPLES <= EXAMPLES_DEFAULT,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
APIS = generate.load_apis()
CLASSES = {name: obj for name, obj in vars(messages).items() if isinstance(obj, type)}
API_PARAMS = [pytest.param(a, id=a.name) for a in APIS]
# counts and lengths a liar sends: the largest int32, -2, the largest 5-byte varint, 2^31 as varint
LIES_INT32 = [struct.pack(">i", 0x7FFFFFFF), struct.pack(">i", -2), struct.pack(">i", 0x10000)]
LIES_VARINT = [b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08", b"\xff\xff\xff\xff\xff"]
ALLOCATION_LIMIT_BYTES = 512 * 1024


def valid_frames(a: generate.Api) -> list[bytes]:
    frames = []
    for v in a.request.versions:
        for mode in MODES:
            body = build(a.request.root, v, mode, random.Random(f"fuzz/{a.name}/{v}/{mode}"), CLASSES)
            frames.append(api.encode_request(RequestHeader(a.api_key, v, 1, "fuzz"), body))
    return frames


def parse_cleanly(frame: bytes) -> Any:
    try:
        return api.parse_request(frame)
    except api.RequestParseError as exc:
        assert exc.reason, "a parse error must say why"
        return exc


def header_bytes(api_key: int, version: int, correlation_id: int, client_id: bytes | None) -> bytes:
    if client_id is None:
        out = struct.pack(">hhih", api_key, version, correlation_id, -1)
    else:
        out = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    return out + (b"\x00" if api.is_flexible(api_key, version) else b"")


@pytest.mark.parametrize("a", API_PARAMS)
def test_random_bodies_behind_a_valid_header(a: generate.Api) -> None:
    @FUZZ_SETTINGS
    @given(
        version=st.sampled_from(list(a.request.versions)),
        correlation_id=st.integers(-(2**31), 2**31 - 1),
        client_id=st.none() | st.binary(max_size=20),
        body=st.binary(max_size=600),
    )
    def check(version: int, correlation_id: int, client_id: bytes | None, body: bytes) -> None:
        parse_cleanly(header_bytes(a.api_key, version, correlation_id, client_id) + body)

    check()


@st.composite
def mutated(draw: st.DrawFn, frames: list[bytes]) -> bytes:
    frame = bytearray(draw(st.sampled_from(frames)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(0, len(frame) - 1)))
        op = draw(st.sampled_from(["flip", "int32", "varint", "truncate", "insert", "delete"]))
        if op == "flip" and frame:
            frame[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "int32":
            frame[at : at + 4] = draw(st.sampled_from(LIES_INT32))
        elif op == "varint":
            frame[at : at + 1] = draw(st.sampled_from(LIES_VARINT))
        elif op == "truncate":
            del frame[at:]
        elif op == "insert":
            frame[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del frame[at : at + draw(st.integers(1, 8))]
    return bytes(frame)


@pytest.mark.parametrize("a", API_PARAMS)
def test_mutated_valid_frames(a: generate.Api) -> None:
    frames = valid_frames(a)

    @FUZZ_SETTINGS
    @given(frame=mutated(frames))
    def check(frame: bytes) -> None:
        parse_cleanly(frame)

    check()


def test_random_frames() -> None:
    @FUZZ_SETTINGS
    @given(frame=st.binary(max_size=200))
    def check(frame: bytes) -> None:
        parse_cleanly(frame)

    check()


@pytest.mark.parametrize("a", API_PARAMS)
def test_a_lying_count_or_length_anywhere_never_allocates(a: generate.Api) -> None:
    """Every position of every valid frame overwritten with a huge count or length: parsing stays
    within a fixed memory budget (no list or buffer sized from the wire) and ends in a named error
    or a request."""
    frames = valid_frames(a)[-2:]  # the highest version, both sample modes
    tracemalloc.start()
    try:
        for frame in frames:
            lies = LIES_INT32 + LIES_VARINT
            for at in range(8, len(frame)):
                for lie in lies:
                    broken = frame[:at] + lie + frame[at + len(lie) :]
                    tracemalloc.reset_peak()
                    before = tracemalloc.get_traced_memory()[0]
                    parse_cleanly(broken)
                    peak = tracemalloc.get_traced_memory()[1] - before
                    assert peak < ALLOCATION_LIMIT_BYTES, f"{a.name} lie {lie.hex()} at {at}: {peak} bytes"
    finally:
        tracemalloc.stop()
