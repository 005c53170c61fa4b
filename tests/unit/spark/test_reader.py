"""The worker's fetch loop (spark.reader.read_range) against a scripted BrokerClient.

Rules: the whole range is read and nothing past it; leadership errors and a new leader whose HW
lags the range are waited out; records deleted after planning are an error or a skip
(failOnDataLoss); no progress for kafkaConsumer.pollTimeoutMs is a RequestTimedOutError.
"""

from __future__ import annotations

import threading

import pytest

from proto import errors
from proto.errors import ErrorCode
from proto.kafka_types import TopicPartition
from spark.client import FetchResult
from spark.planning import DataLossError, OffsetRange
from spark.reader import ReadSettings, read_range
from storage.batch_header import patch_offset_and_epoch
from storage.record_batch import build_batch

TP = TopicPartition("t", 0)


def batch_at(base: int, n: int) -> bytes:
    data = bytearray(build_batch([(None, b"v%d" % (base + i), (), 1000 + i) for i in range(n)]))
    patch_offset_and_epoch(data, 0, base, 0)
    return bytes(data)


class ScriptedClient:
    """A log of 10-record batches [0, 100); ``script`` replaces answers for the first fetches."""

    def __init__(self, script=(), log_start_offset: int = 0, high_watermark: int = 100) -> None:
        self.script = list(script)
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark
        self.fetched_at: list[int] = []

    def fetch(self, tp, fetch_offset, max_wait_ms=0) -> FetchResult:
        self.fetched_at.append(fetch_offset)
        if self.script:
            return self.script.pop(0)
        if not self.log_start_offset <= fetch_offset <= self.high_watermark:
            return FetchResult(b"", self.high_watermark, self.log_start_offset, ErrorCode.OFFSET_OUT_OF_RANGE)
        first = fetch_offset // 10 * 10
        data = b"".join(batch_at(b, 10) for b in range(first, min(first + 30, self.high_watermark), 10))
        return FetchResult(data, self.high_watermark, self.log_start_offset)

    def partition_counts(self, topics):  # pragma: no cover - not used by the reader
        raise NotImplementedError

    def list_offsets(self, queries):  # pragma: no cover - not used by the reader
        raise NotImplementedError

    def close(self) -> None:
        pass


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.5  # every look at the clock costs half a second
        return self.now


SETTINGS = ReadSettings(include_headers=False, fail_on_data_loss=True, poll_timeout_ms=10_000)


def offsets(batches) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_reads_the_whole_range_and_nothing_past_it() -> None:
    client = ScriptedClient()
    got = offsets(read_range(client, OffsetRange(TP, 15, 73), SETTINGS, monotonic=FakeClock()))
    assert got == list(range(15, 73))
    assert client.fetched_at == [15, 40, 70]


@pytest.mark.parametrize(
    "error",
    [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NETWORK_EXCEPTION],
    ids=lambda e: ErrorCode(e).name,
)
def test_leadership_and_network_errors_are_retried(error: int) -> None:
    client = ScriptedClient(script=[FetchResult(b"", 0, 0, error)] * 3)
    got = offsets(read_range(client, OffsetRange(TP, 0, 20), SETTINGS, monotonic=FakeClock()))
    assert got == list(range(20))
    assert client.fetched_at[:4] == [0, 0, 0, 0]


def test_new_leader_with_lagging_high_watermark_is_waited_for() -> None:
    """After a failover the new leader's HW may be below our range: out of range above HW -> wait."""
    lagging = FetchResult(b"", 30, 0, ErrorCode.OFFSET_OUT_OF_RANGE)
    short = FetchResult(batch_at(40, 10), 50, 0)  # HW 50 < range end 60: a short answer
    client = ScriptedClient(script=[lagging, lagging, short])
    got = offsets(read_range(client, OffsetRange(TP, 40, 60), SETTINGS, monotonic=FakeClock()))
    assert got == list(range(40, 60))
    assert client.fetched_at == [40, 40, 40, 50]


def test_records_deleted_after_planning_fail_the_task() -> None:
    client = ScriptedClient(log_start_offset=30)
    with pytest.raises(DataLossError, match=r"t-0: offsets \[10, 30\)"):
        list(read_range(client, OffsetRange(TP, 10, 50), SETTINGS, monotonic=FakeClock()))


def test_records_deleted_after_planning_are_skipped_when_allowed() -> None:
    warnings: list[str] = []
    settings = ReadSettings(include_headers=False, fail_on_data_loss=False, poll_timeout_ms=10_000)
    client = ScriptedClient(log_start_offset=30)
    got = offsets(
        read_range(client, OffsetRange(TP, 10, 50), settings, monotonic=FakeClock(), warn=warnings.append)
    )
    assert got == list(range(30, 50))
    assert len(warnings) == 1 and "failOnDataLoss=false" in warnings[0]


def test_range_entirely_deleted_is_skipped_to_its_end() -> None:
    settings = ReadSettings(include_headers=False, fail_on_data_loss=False, poll_timeout_ms=10_000)
    client = ScriptedClient(log_start_offset=90)
    got = offsets(
        read_range(client, OffsetRange(TP, 10, 50), settings, monotonic=FakeClock(), warn=lambda m: None)
    )
    assert got == []


def test_no_progress_times_out_with_the_partition_named() -> None:
    client = ScriptedClient(script=[FetchResult(b"", 0, 0, ErrorCode.LEADER_NOT_AVAILABLE)] * 1000)
    settings = ReadSettings(include_headers=False, fail_on_data_loss=True, poll_timeout_ms=3_000)
    with pytest.raises(errors.RequestTimedOutError, match=r"t-0 \[0, 20\).*pollTimeoutMs=3000"):
        list(read_range(client, OffsetRange(TP, 0, 20), settings, monotonic=FakeClock()))


def test_other_errors_propagate() -> None:
    class Broken(ScriptedClient):
        def fetch(self, tp, fetch_offset, max_wait_ms=0):
            raise errors.error_for(ErrorCode.CORRUPT_MESSAGE, "bad")

    with pytest.raises(errors.CorruptMessageError):
        list(read_range(Broken(), OffsetRange(TP, 0, 20), SETTINGS, monotonic=FakeClock()))


def test_next_fetch_is_in_flight_while_the_consumer_holds_a_batch() -> None:
    """Prefetch: the fetch at the next offset starts before the consumer asks for the next batch."""
    asked = threading.Event()

    class Watching(ScriptedClient):
        def fetch(self, tp, fetch_offset, max_wait_ms=0):
            if fetch_offset == 40:
                asked.set()
            return super().fetch(tp, fetch_offset, max_wait_ms)

    batches = read_range(Watching(), OffsetRange(TP, 15, 73), SETTINGS, monotonic=FakeClock())
    first = next(batches)
    assert first.column("offset").to_pylist()[0] == 15
    assert asked.wait(10), "the next fetch was not started while the first batch was consumed"
    assert offsets([first, *batches]) == list(range(15, 73))
