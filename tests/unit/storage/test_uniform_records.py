"""The strided proof of ``storage.uniform_records`` never changes the leader's verdict on a batch.

``check_records`` first tries ``prove_uniform`` and walks the records only when it returns False, so
the proof may decline anything but must never accept a region the walk refuses: these tests pin what
it accepts (producers' usual shapes, across the offsetDelta width changes at indexes 64 and 8,192),
what it declines (other shapes, which the walk then accepts), and fuzz it with seeded corruptions of
accepted regions, comparing ``check_records`` with the walk alone.
"""

from __future__ import annotations

import random

import pytest

from storage.batch_header import HEADER_SIZE, CorruptRecordError
from storage.record_batch import _walk_records, build_batch, check_records
from storage.uniform_records import MIN_PROOF_RECORDS, prove_uniform
from storage.varint import encode_varint, read_unsigned, unzigzag


def region(count: int, key=lambda i: None, value=lambda i: b"%020d" % i + b"x" * 80,
           headers=lambda i: (), timestamp=lambda i: 1_000 + i % 50) -> bytes:  # fmt: skip
    """The records region of a batch of ``count`` records built by the project's encoder."""
    records = [(key(i), value(i), headers(i), timestamp(i)) for i in range(count)]
    return build_batch(records)[HEADER_SIZE:]


def verdict(check, data: bytes, count: int) -> str:
    try:
        check(data, count)
    except CorruptRecordError as exc:
        return f"refused: {exc.reason}"
    return "accepted"


@pytest.mark.parametrize(
    ("data", "count"),
    [
        (region(MIN_PROOF_RECORDS), MIN_PROOF_RECORDS),
        (region(64), 64),
        (region(65), 65),
        (region(8192), 8192),
        (region(10_000), 10_000),
        (region(100, key=lambda i: b"key-%03d" % i), 100),
        (region(100, value=lambda i: None), 100),
        (region(100, value=lambda i: b""), 100),
        (region(200, value=lambda i: bytes(1000)), 200),
        (region(1000, timestamp=lambda i: 1_000 + i), 1000),
        (region(100, timestamp=lambda i: 1_000 + (500 if i == 70 else 0)), 100),
    ],
    ids=["smallest-proved", "one-byte-deltas", "into-two-byte-deltas", "into-three-byte-deltas",
         "librdkafka-batch.num.messages", "fixed-size-keys", "null-values", "empty-values",
         "1000-byte-values", "timestamp-deltas-growing-to-two-bytes", "one-two-byte-timestamp-delta"],
)
def test_the_usual_producer_shapes_are_proved(data: bytes, count: int) -> None:
    assert prove_uniform(data, count)
    _walk_records(data, count)  # and the walk agrees


@pytest.mark.parametrize(
    ("data", "count"),
    [
        (region(10), 10),
        (region(100, value=lambda i: b"v" * (i % 7)), 100),
        (region(100, headers=lambda i: (("h", b"x"),)), 100),
        (region(100, timestamp=lambda i: 1_000 + 500 * (i % 2)), 100),
        (region(100, key=lambda i: b"k" * (i % 3)), 100),
    ],
    ids=["below-min-records", "values-of-several-sizes", "headers", "timestamp-widths-alternating",
         "keys-of-several-sizes"],
)
def test_other_shapes_are_left_to_the_walk_which_accepts_them(data: bytes, count: int) -> None:
    assert not prove_uniform(data, count)
    check_records(data, count)


@pytest.mark.parametrize("count", [40, 64, 300, 8200])
def test_seeded_corruptions_get_the_walks_verdict(count: int) -> None:
    """Any byte changed (half of them in a record's framing: length, attributes, deltas, key and value
    lengths, headerCount), inserted or deleted, and a wrong count: check_records says what the walk
    says, and whatever the proof accepts the walk accepts."""
    rng = random.Random(count)
    clean = region(count, timestamp=lambda i: 1_000 + i // 3 + rng.randrange(20))
    records = _split(clean)
    starts = [sum(len(r) for r in records[:i]) for i in range(len(records))]
    for _ in range(600):
        data, n = bytearray(clean), count
        kind = rng.randrange(5)
        record = rng.randrange(count)
        at = rng.randrange(len(data))
        if kind == 0:
            data[at] = rng.randrange(256)
        elif kind == 1:
            data.insert(at, rng.randrange(256))
        elif kind == 2:
            del data[at]
        elif kind == 3:
            n += rng.choice((-1, 1))
        else:
            framing = [*range(6), len(records[record]) - 1]  # the bytes around the 100-byte value
            data[starts[record] + rng.choice(framing)] ^= 1 << rng.randrange(8)
        data = bytes(data)
        expected = verdict(_walk_records, data, n)
        assert verdict(check_records, data, n) == expected
        if prove_uniform(data, n):
            assert expected == "accepted", (kind, at, n)


@pytest.mark.parametrize("index", [5, 63, 64, 100])
def test_a_wrong_offset_delta_is_never_proved(index: int) -> None:
    """offsetDelta must count 0, 1, 2, ...: one record given its neighbour's (of the same varint
    width, so every length still holds) is refused with the walk's message."""
    good = region(200)
    assert prove_uniform(good, 200)
    data = _with_offset_delta(good, index, index + 1 if index == 64 else index - 1)
    assert not prove_uniform(data, 200)
    with pytest.raises(CorruptRecordError, match=f"record {index} has offsetDelta"):
        check_records(data, 200)


def _split(data: bytes) -> list[bytes]:
    """The records of a region, each with its length varint."""
    records, pos = [], 0
    while pos < len(data):
        raw, body = read_unsigned(data, pos)
        records.append(data[pos : body + unzigzag(raw)])
        pos = body + unzigzag(raw)
    return records


def _with_offset_delta(data: bytes, index: int, value: int) -> bytes:
    """``data`` with record ``index``'s offsetDelta varint replaced by ``value``'s (same width)."""
    records = _split(data)
    record = records[index]
    delta_at = len(record) - (unzigzag(read_unsigned(record, 0)[0])) + 2  # after attributes, ts
    old, new = encode_varint(index), encode_varint(value)
    assert len(old) == len(new) and record[delta_at : delta_at + len(old)] == old
    records[index] = record[:delta_at] + new + record[delta_at + len(old) :]
    return b"".join(records)


def test_every_record_counting_a_header_it_does_not_hold_is_never_proved() -> None:
    """Records alike in every byte can still all be wrong: headerCount 1 with no header after it."""
    data = b"".join(r[:-1] + b"\x02" for r in _split(region(100)))  # zigzag 1
    assert not prove_uniform(data, 100)
    with pytest.raises(CorruptRecordError, match="record 0"):
        check_records(data, 100)
