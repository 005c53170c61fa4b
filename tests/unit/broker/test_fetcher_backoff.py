"""An answer the follower cannot apply (a storage error, a refused append), or a truncation that makes
no progress, is fetched again only after ``replica.fetch.backoff.ms`` — Kafka's delayPartitions.
Without the back-off the leader answers the same bytes at once and both brokers spin (a review found
~1,000 rounds/s). A real gRPC leader on 127.0.0.1 serves the FetchStream; the follower's log always
refuses the append, or never changes when truncated."""

from __future__ import annotations

import asyncio
import logging

import grpc

from broker.divergence import EpochEntry
from broker.fetcher import FetcherConfig, LocalLogView, TruncateTo
from broker.fetcher_driver import FetcherManager
from proto import errors, replica_pb2, replica_pb2_grpc
from proto.logfmt import LogfmtFormatter
from proto.serving import GRPC_OPTIONS

TP = ("t", 0)
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


class Leader(replica_pb2_grpc.ReplicaServiceServicer):
    def __init__(self) -> None:
        self.requests = 0

    async def FetchStream(self, request_iterator, context):
        async for _request in request_iterator:
            self.requests += 1
            response = replica_pb2.ReplicaFetchResponse()
            partition = response.topics.add(name="t").partitions.add(partition=0)
            partition.high_watermark = partition.log_end_offset = 1
            partition.records = b"x" * 100
            yield response


def test_an_unappliable_answer_is_refetched_after_the_backoff() -> None:
    leader, log = Leader(), RefusingLog()

    async def scenario() -> None:
        server = grpc.aio.server(options=GRPC_OPTIONS)
        replica_pb2_grpc.add_ReplicaServiceServicer_to_server(leader, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        config = FetcherConfig(max_wait_ms=500, fetch_backoff_ms=BACKOFF_MS)
        fm = FetcherManager(102, config, lambda _leader: f"127.0.0.1:{port}", lambda _t: "id", 5000)
        fm.manager = log  # type: ignore[assignment]
        try:
            fm.add_partition(101, TP, 0, None, 0)
            await asyncio.sleep(RUN_S)
        finally:
            await fm.stop()
            await server.stop(grace=0.1)

    asyncio.run(scenario())
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


class DivergingLeader(replica_pb2_grpc.ReplicaServiceServicer):
    """Answers every fetch at once with the same diverging epoch (epoch 0 ends at 10)."""

    def __init__(self) -> None:
        self.requests = 0

    async def FetchStream(self, request_iterator, context):
        async for _request in request_iterator:
            self.requests += 1
            response = replica_pb2.ReplicaFetchResponse()
            partition = response.topics.add(name="t").partitions.add(partition=0)
            partition.high_watermark = partition.log_end_offset = 10
            partition.diverging_epoch.epoch, partition.diverging_epoch.end_offset = 0, 10
            yield response


def test_divergence_without_progress_warns_once_and_backs_off(caplog) -> None:
    """Issue 14, defect 1: the same truncation answer to the same position again is a stall. The
    follower backs off replica.fetch.backoff.ms between rounds (no hot loop) and logs one WARN line
    (logfmt event ``divergence_no_progress``) for the whole streak, not one per round."""
    leader, log = DivergingLeader(), StuckLog()

    async def scenario() -> None:
        server = grpc.aio.server(options=GRPC_OPTIONS)
        replica_pb2_grpc.add_ReplicaServiceServicer_to_server(leader, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        config = FetcherConfig(max_wait_ms=500, fetch_backoff_ms=BACKOFF_MS)
        fm = FetcherManager(102, config, lambda _leader: f"127.0.0.1:{port}", lambda _t: "id", 5000)
        fm.manager = log  # type: ignore[assignment]
        try:
            fm.add_partition(101, TP, 10, 5, 6)
            await asyncio.sleep(RUN_S)
        finally:
            await fm.stop()
            await server.stop(grace=0.1)

    with caplog.at_level(logging.INFO, logger="broker.fetcher_driver"):
        asyncio.run(scenario())
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
