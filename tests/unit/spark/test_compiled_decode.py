"""The compiled decoder (spark._decode) gives exactly the Python decoder's Arrow output.

Rules (issue 16 §3: a compiled decoder built at install time; the Python decoder stays the
reference): for every fetch — any codec, null keys and values, headers, CreateTime or
LogAppendTime, control and transactional batches, offset gaps, a range cut mid-batch, a trailing
partial batch, damaged records with a valid CRC, a bad CRC — ``decode_range`` with the compiled
decoder returns the same ``DecodedRange`` (schema, columns, next offset) as with the Python decoder
alone, or raises the same error with the same message. And it is really the compiled decoder that
answers: it declines no plain, valid fetch.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from spark import arrow
from spark.arrow import _compiled_to_arrow, _scan, decode_range
from storage.batch_header import ATTRIBUTES_POS, CRC_POS, HEADER_SIZE, patch_offset_and_epoch
from storage.compression import CompressionType
from storage.record_batch import TimestampType, build_batch

BASE_TS = 1_700_000_000_000
PRODUCER_ID = 7
US_OVERFLOW_MS = 2**63 // 1000 + 1  # a ms timestamp whose microseconds do not fit int64


def test_the_compiled_decoder_is_built() -> None:
    """`pip install -e .` (./dev) builds spark._decode; without it the Spark reader runs 3x slower."""
    assert arrow.compiled is not None, "spark._decode is not built: run ./dev (pip install -e .) with gcc"


def fix_crc(data: bytearray, pos: int, end: int) -> None:
    struct.pack_into(">I", data, pos + CRC_POS, crc32c.crc32c(bytes(data[pos + ATTRIBUTES_POS : end])))


def outcome(data: bytes, from_offset: int, until_offset: int, *, use_compiled: bool, **kwargs):
    try:
        result = decode_range(
            data, from_offset, until_offset, topic="t", partition=3, use_compiled=use_compiled, **kwargs
        )
    except Exception as exc:  # the property compares errors too: type and message
        return "error", type(exc), str(exc)
    return "ok", result.next_offset, result.batch


def assert_same(data: bytes, from_offset: int, until_offset: int, **kwargs) -> tuple:
    compiled = outcome(data, from_offset, until_offset, use_compiled=True, **kwargs)
    python = outcome(data, from_offset, until_offset, use_compiled=False, **kwargs)
    assert compiled[:2] == python[:2], (compiled, python)
    if compiled[0] == "error":
        assert compiled[2] == python[2]
    elif python[2] is None:
        assert compiled[2] is None
    else:
        assert compiled[2] is not None
        assert compiled[2].schema.equals(python[2].schema), (compiled[2].schema, python[2].schema)
        assert compiled[2].equals(python[2]), (compiled[2].to_pydict(), python[2].to_pydict())
    return compiled


HEADER = st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=12)))
LONG_VALUES = [b"v" * 8_300, b"w" * 20_000]  # 2- and 3-byte varint lengths
VALUE = st.one_of(st.none(), st.binary(max_size=300), st.sampled_from(LONG_VALUES))
TIMESTAMP = st.one_of(
    st.integers(min_value=BASE_TS - 10**6, max_value=BASE_TS + 10**6),
    st.integers(min_value=-1, max_value=2**62),  # past 2**63 / 1000 the microseconds overflow
)
RECORD = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),
    VALUE,
    st.lists(HEADER, max_size=3),
    TIMESTAMP,
)


@st.composite
def batch_specs(draw):
    records = draw(st.lists(RECORD, min_size=1, max_size=30))
    return {
        "records": records,
        "compression": draw(st.sampled_from(list(CompressionType))),
        "log_append_time": draw(st.booleans()),
        "transactional": draw(st.booleans()),
        "control": draw(st.integers(0, 5)) == 0,  # a transaction marker now and then
        "gap": draw(st.sampled_from([0, 0, 0, 3])),  # offsets missing before it (compaction)
    }


def build_fetch(specs: list[dict]) -> tuple[bytearray, list[tuple[int, int]]]:
    """The fetch bytes and each batch's (position, end)."""
    data, bounds, base = bytearray(), [], 0
    for spec in specs:
        base += spec["gap"]
        batch = bytearray(
            build_batch(
                spec["records"],
                compression=spec["compression"],
                timestamp_type=TimestampType.LOG_APPEND_TIME if spec["log_append_time"] else 0,
                transactional=spec["transactional"] or spec["control"],
                producer_id=PRODUCER_ID if spec["transactional"] or spec["control"] else -1,
                control=spec["control"],
            )
        )
        patch_offset_and_epoch(batch, 0, base, 0)
        bounds.append((len(data), len(data) + len(batch)))
        data += batch
        base += len(spec["records"])
    return data, bounds


@st.composite
def damage(draw, bounds: list[tuple[int, int]]):
    """How to damage the fetch: (kind, batch index, position inside it, xor mask)."""
    kind = draw(st.sampled_from(["none", "none", "none", "records", "records-count", "crc", "truncate"]))
    index = draw(st.integers(0, len(bounds) - 1))
    pos, end = bounds[index]
    where = draw(st.integers(pos + HEADER_SIZE, end - 1)) if end > pos + HEADER_SIZE else end - 1
    return kind, index, where, draw(st.integers(1, 255))


def apply_damage(data: bytearray, bounds, kind: str, index: int, where: int, mask: int) -> bytes:
    pos, end = bounds[index]
    if kind in ("records", "crc"):
        data[where] ^= mask
        if kind == "records":  # the CRC still matches: only the decoders' own checks catch it
            fix_crc(data, pos, end)
    elif kind == "records-count":
        data[pos + 60] ^= mask  # the low byte of recordsCount
        fix_crc(data, pos, end)
    elif kind == "truncate":
        return bytes(data[:where])
    return bytes(data)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), specs=st.lists(batch_specs(), min_size=1, max_size=4))
def test_compiled_equals_python_on_random_fetches(data, specs: list[dict]) -> None:
    fetch, bounds = build_fetch(specs)
    kind, index, where, mask = data.draw(damage(bounds))
    fetch = apply_damage(fetch, bounds, kind, index, where, mask)
    last = sum(spec["gap"] + len(spec["records"]) for spec in specs)
    from_offset = data.draw(st.one_of(st.just(0), st.integers(0, last)))  # mostly whole, sometimes cut
    until_offset = data.draw(st.one_of(st.just(last + 2), st.integers(from_offset, last + 2)))
    include_headers = data.draw(st.booleans())
    min_timestamp_ms = data.draw(st.one_of(st.none(), st.integers(BASE_TS - 10**6, BASE_TS + 10**6)))
    result = assert_same(
        fetch, from_offset, until_offset, include_headers=include_headers, min_timestamp_ms=min_timestamp_ms
    )
    event(f"damage {kind}: {result[0] if result[0] == 'error' else 'rows' if result[2] else 'no rows'}")
    if kind == "none" and all(ts < US_OVERFLOW_MS for s in specs for *_, ts in s["records"]):
        wanted, _ = _scan(fetch, from_offset, until_offset)
        if wanted:  # plain valid data: the compiled decoder itself answers
            assert _compiled_to_arrow(fetch, wanted, "t", 3, include_headers) is not None
            event("the compiled decoder answered")


def plain_spec(records: list[tuple], **kwargs) -> dict:
    spec = {"compression": 0, "log_append_time": False, "transactional": False, "control": False, "gap": 0}
    return {**spec, "records": records, **kwargs}


def fetch_of(records: list[tuple], **kwargs) -> bytes:
    return bytes(build_fetch([plain_spec(records, **kwargs)])[0])


THREE_HEADERS = (("a", b"1"), ("b", None), ("", b""))


def alternating(i: int, even, odd):
    return odd if i % 2 else even


CASES = {
    "plain-100B": [(None, bytes([i % 251]) * 100, (), BASE_TS + i) for i in range(1000)],
    "keys-and-nulls": [
        (alternating(i, b"k" * i, None), None if i % 3 == 0 else b"v" * i, (), BASE_TS) for i in range(90)
    ],
    "headers": [(b"k", b"v", alternating(i, (), THREE_HEADERS), BASE_TS + i) for i in range(40)],
    "all-null-values": [(b"k", None, (), BASE_TS + i) for i in range(50)],
    "empty-keys-and-values": [(b"", b"", (), BASE_TS) for _ in range(40)],
    "unicode-header-keys": [(None, b"v", (("clé", b"x"), ("键", None)), BASE_TS)] * 5,
    "long-values": [(None, LONG_VALUES[i % 2], (), BASE_TS) for i in range(6)],
}


@pytest.mark.parametrize("include_headers", [False, True], ids=["no-headers", "headers"])
@pytest.mark.parametrize("codec", list(CompressionType), ids=[c.name for c in CompressionType])
@pytest.mark.parametrize("case", list(CASES))
def test_compiled_equals_python(case: str, codec: CompressionType, include_headers: bool) -> None:
    fetch = fetch_of(CASES[case], compression=codec)
    wanted, _ = _scan(fetch, 0, 2**40)
    assert _compiled_to_arrow(fetch, wanted, "t", 3, include_headers) is not None, "declined valid data"
    result = assert_same(fetch, 2, 2**40, include_headers=include_headers)
    assert result[2].num_rows == len(CASES[case]) - 2


def test_log_append_time_and_the_timestamp_type() -> None:
    fetch = fetch_of(CASES["plain-100B"][:10], log_append_time=True)
    _, _, batch = assert_same(fetch, 0, 10, include_headers=False)
    assert set(batch.column("timestampType").to_pylist()) == {1}
    assert {ts.timestamp() * 1000 for ts in batch.column("timestamp").to_pylist()} == {BASE_TS + 9}


def test_a_header_key_that_is_not_utf8_goes_to_the_python_decoder() -> None:
    """Kafka header keys are UTF-8 strings; the Python decoder replaces bad bytes (as Java's consumer)."""
    fetch = bytearray(fetch_of([(None, b"v", (("é", b"x"),), BASE_TS)]))
    where = fetch.index("é".encode())
    fetch[where : where + 2] = b"\xff\xfe"
    fix_crc(fetch, 0, len(fetch))
    wanted, _ = _scan(bytes(fetch), 0, 1)
    assert _compiled_to_arrow(bytes(fetch), wanted, "t", 3, True) is None
    _, _, batch = assert_same(bytes(fetch), 0, 1, include_headers=True)
    assert batch.column("headers").to_pylist() == [[{"key": "\ufffd\ufffd", "value": b"x"}]]


def flip_record_length(d: bytearray) -> None:
    d[HEADER_SIZE] ^= 4
    fix_crc(d, 0, len(d))


def count_one_more_record(d: bytearray) -> None:
    d[60] += 1  # the low byte of recordsCount
    fix_crc(d, 0, len(d))


def add_a_byte_after_the_records(d: bytearray) -> None:
    d.extend(b"\x00")
    d[11] += 1  # the low byte of batchLength
    fix_crc(d, 0, len(d))


def flip_a_byte_under_the_crc(d: bytearray) -> None:
    d[100] ^= 1


DAMAGES = [flip_a_byte_under_the_crc, flip_record_length, count_one_more_record, add_a_byte_after_the_records]


@pytest.mark.parametrize("mutate", DAMAGES, ids=[f.__name__ for f in DAMAGES])
def test_damaged_batches_raise_the_same_named_error(mutate) -> None:
    fetch = bytearray(fetch_of(CASES["plain-100B"][:20]))
    mutate(fetch)
    kind, error, message = assert_same(bytes(fetch), 0, 20, include_headers=False)
    assert kind == "error" and error.__name__ == "CorruptRecordError", (error, message)


def test_a_fetch_of_many_batches_is_one_arrow_batch() -> None:
    """What one Fetch answer holds (here 50 batches of 1,000 records): one batch out, offsets in order."""
    fetch = bytes(build_fetch([plain_spec(CASES["plain-100B"])] * 50)[0])
    _, next_offset, batch = assert_same(fetch, 0, 2**40, include_headers=False)
    assert next_offset == 50_000 and batch.num_rows == 50_000
    assert batch.column("offset").to_pylist() == list(range(50_000))
    assert batch.column("value").to_pylist()[1001] == bytes([1]) * 100
