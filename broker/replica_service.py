"""ReplicaService on a leader broker: follower fetches and OffsetsForLeaderEpoch (proto/replica.proto).

The handler converts the request into the replica manager's dataclasses and back; every decision
(fencing, diverging epoch, follower LEO, HW, ISR expansion, parking the request until data arrives)
is ``ReplicaManager.fetch_for_follower``'s. A parked request is answered through a future the
manager's callback resolves — by a leader append, a role change or the deadline, never by polling.

``FetchStream`` serves the same requests on one bidi stream per follower (what followers use: it
skips a unary call's set-up on every replication round); ``Fetch`` stays for one-off callers. Each
answer on the stream is timed into ``observe("ReplicaFetch", seconds)`` (the metrics interceptor
times unary calls only).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from broker.replica_manager import FetchRequestPartition, FetchResult, ReplicaManager
from proto import common_pb2, replica_pb2, replica_pb2_grpc

NO_EPOCH = -1


def error_pb(code: int, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=int(code), message=message)


class ReplicaServicer(replica_pb2_grpc.ReplicaServiceServicer):
    def __init__(
        self,
        manager: ReplicaManager,
        clock_ms: Callable[[], int],
        observe: Callable[[str, float], None] | None = None,
    ) -> None:
        self.manager = manager
        self.clock_ms = clock_ms
        self.observe = observe

    async def Fetch(self, request, context):
        return await self._fetch(request)

    async def FetchStream(self, request_iterator, context):
        """One answer per request, in order; the follower sends the next request only after it."""
        async for request in request_iterator:
            start = time.perf_counter()
            response = await self._fetch(request)
            if self.observe is not None:
                self.observe("ReplicaFetch", time.perf_counter() - start)
            yield response

    async def _fetch(self, request) -> replica_pb2.ReplicaFetchResponse:
        items = [
            FetchRequestPartition(
                (topic.name, p.partition),
                p.fetch_offset,
                p.partition_max_bytes,
                p.current_leader_epoch,
                p.last_fetched_epoch if p.HasField("last_fetched_epoch") else None,
                topic.topic_id,
            )
            for topic in request.topics
            for p in topic.partitions
        ]
        future: asyncio.Future[dict] = asyncio.get_running_loop().create_future()

        def answer(results: dict) -> None:
            if not future.done():
                future.set_result(results)

        self.manager.fetch_for_follower(
            request.replica_id, request.broker_epoch, items, request.max_bytes or (1 << 30),
            request.min_bytes, request.max_wait_ms, self.clock_ms(), answer, self.clock_ms,
        )  # fmt: skip
        results = await future
        return self._response(request, results)

    @staticmethod
    def _response(request, results: dict[tuple[str, int], FetchResult]) -> replica_pb2.ReplicaFetchResponse:
        response = replica_pb2.ReplicaFetchResponse()
        for topic in request.topics:
            out = response.topics.add(name=topic.name, topic_id=topic.topic_id)
            for p in topic.partitions:
                r = results[(topic.name, p.partition)]
                entry = out.partitions.add(
                    partition=p.partition,
                    error=error_pb(r.code, r.message),
                    high_watermark=r.high_watermark,
                    log_start_offset=r.log_start_offset,
                    log_end_offset=r.log_end_offset,
                    records=r.records,
                )
                entry.current_leader.leader_id = r.leader_id
                entry.current_leader.leader_epoch = r.leader_epoch
                if r.diverging_epoch is not None:
                    entry.diverging_epoch.epoch = r.diverging_epoch.leader_epoch
                    entry.diverging_epoch.end_offset = r.diverging_epoch.end_offset
        return response

    async def OffsetsForLeaderEpoch(self, request, context):
        response = replica_pb2.OffsetsForLeaderEpochResponse()
        for topic in request.topics:
            out = response.topics.add(name=topic.name)
            for p in topic.partitions:
                error, end = self.manager.offsets_for_leader_epoch(
                    (topic.name, p.partition),
                    p.current_leader_epoch if p.current_leader_epoch >= 0 else None,
                    p.leader_epoch,
                )
                out.partitions.add(
                    partition=p.partition,
                    error=error_pb(error.code, error.message) if error else error_pb(0),
                    leader_epoch=end.leader_epoch,
                    end_offset=end.end_offset,
                )
        return response
