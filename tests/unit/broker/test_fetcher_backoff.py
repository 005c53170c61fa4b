"""An answer the follower cannot apply (a storage error, a refused append), or a truncation that makes
no progress, is fetched again only after ``replica.fetch.backoff.ms`` — Kafka's delayPartitions.
Without the back-off the leader answers the same bytes at once and both brokers spin (a review found
~1,000 rounds/s). A fake leader on 127.0.0.1 answers Kafka Fetch requests (the replica fetcher's
protocol); the follower's log always refuses the append, or never changes when truncated."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable

from broker.follower.fetcher import FetcherConfig
from broker.follower.fetcher_driver import FetcherManager
from broker.replica.divergence import EpochEntry
from broker.replica.follower_actions import LocalLogView, TruncateTo
from proto import errors
from proto.kafka import messages as m
from proto.kafka.api import encode_response, parse_request
from proto.runtime.logfmt import LogfmtFormatter

TP = ("t", 0)
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
BACKOFF_MS = 100
RUN_S = 1.0


class RefusingLog:
    def __init__(self) -> None:
        self.applies = 0

    def local_view(self, tp):
        raise AssertionError("not needed: the answer carries records, no epoch check")

    def apply_fetch_action(self, action) -> None:
        self.applies += 1
        raise errors.KafkaStorageError("disk refused the append")

    def log_position(self, tp):
        return (0, None)


class FakeLeader:
    """Answers every Fetch at once (sessionless) with ``partition()`` for each requested partition."""

    def __init__(self, partition: Callable[[int], m.FetchResponsePartitionData]) -> None:
        self.partition = partition
        self.requests = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                header, request = parse_request(await reader.readexactly(size))
                self.requests += 1
                topics = [
                    m.FetchResponseFetchableTopicResponse(
                        topic_id=t.topic_id, partitions=[self.partition(p.partition) for p in t.partitions]
                    )
                    for t in request.topics
                ]
                body = encode_response(header, m.FetchResponse(responses=topics))
                writer.write(struct.pack(">i", len(body)) + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def run_follower(self, config: FetcherConfig, log, add: Callable[[FetcherManager], None]) -> None:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fm = FetcherManager(102, config, lambda _leader: ("127.0.0.1", port), lambda _t: TOPIC_ID, 5000)
        fm.manager = log
        try:
            add(fm)
            await asyncio.sleep(RUN_S)
        finally:
            await fm.stop()
            server.close()
            for writer in self.writers:
                writer.close()
                await writer.wait_closed()
            await server.wait_closed()


def records_answer(index: int) -> m.FetchResponsePartitionData:
    return m.FetchResponsePartitionData(partition_index=index, high_watermark=1, records=b"x" * 100)


def test_an_unappliable_answer_is_refetched_after_the_backoff() -> None:
    leader, log = FakeLeader(records_answer), RefusingLog()
    config = FetcherConfig(max_wait_ms=500, fetch_backoff_ms=BACKOFF_MS)
    asyncio.run(leader.run_follower(config, log, lambda fm: fm.add_partition(101, TP, 0, None, 0)))
    assert log.applies >= 2, f"the follower retried only {log.applies} time(s) in {RUN_S} s"
    assert leader.requests <= RUN_S * 1000 / BACKOFF_MS + 3, f"{leader.requests} fetch rounds in {RUN_S} s"


class StuckLog:
    """A follower whose truncation never changes its log (what defect 1 of issue 14 did)."""

    def __init__(self) -> None:
        self.truncations = 0

    def local_view(self, tp):
        return LocalLogView((EpochEntry(0, 0), EpochEntry(5, 10)), log_end_offset=10, high_watermark=10)

    def apply_fetch_action(self, action) -> None:
        assert isinstance(action, TruncateTo) and action.offset == 10, action
        self.truncations += 1

    def log_position(self, tp):
        return (10, 5)


def diverging_answer(index: int) -> m.FetchResponsePartitionData:
    """The same diverging epoch every time (epoch 0 ends at 10)."""
    return m.FetchResponsePartitionData(
        partition_index=index,
        high_watermark=10,
        diverging_epoch=m.FetchResponseEpochEndOffset(0, 10),
        records=b"",
    )


def test_divergence_without_progress_warns_once_and_backs_off(caplog) -> None:
    """Issue 14, defect 1: the same truncation answer to the same position again is a stall. The
    follower backs off replica.fetch.backoff.ms between rounds (no hot loop) and logs one WARN line
    (logfmt event ``divergence_no_progress``) for the whole streak, not one per round."""
    leader, log = FakeLeader(diverging_answer), StuckLog()
    config = FetcherConfig(max_wait_ms=500, fetch_backoff_ms=BACKOFF_MS)
    with caplog.at_level(logging.INFO, logger="broker.follower.fetcher_driver"):
        asyncio.run(leader.run_follower(config, log, lambda fm: fm.add_partition(101, TP, 10, 5, 6)))
    assert log.truncations >= 3, f"the follower retried only {log.truncations} time(s) in {RUN_S} s"
    assert leader.requests <= RUN_S * 1000 / BACKOFF_MS + 3, f"{leader.requests} fetch rounds in {RUN_S} s"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.msg for r in warnings] == ["divergence_no_progress"], [r.getMessage() for r in warnings]
    line = LogfmtFormatter(102, "broker").format(warnings[0])
    for field in (
        "level=WARNING",
        "event=divergence_no_progress",
        "topic=t",
        "partition=0",
        "leader=101",
        "log_end_offset=10",
        "latest_epoch=5",
        "truncation_offset=10",
        f"backoff_ms={BACKOFF_MS}",
    ):
        assert field in line, line
