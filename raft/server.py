"""A runnable Raft node replicating an append-only log: for integration tests and the benchmark.

    python -m raft.server --node-id 1 --listen 127.0.0.1:9093 \\
        --voters 1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095 --data-dir /tmp/n1 \\
        [--observers 4@127.0.0.1:9096] [--election-timeout-ms 300] [--heartbeat-interval-ms 50] \\
        [--snapshot-every-entries 10000] [--enable-fault-injection]

One gRPC port serves ``RaftService`` (peers), ``RaftClientService`` (clients; see proto/raft.proto)
and the standard health service. The state machine is ``AppendOnlyLog``: every committed entry is kept
with its Raft index; a snapshot is the whole list. SIGTERM or SIGINT stops gracefully (a leader hands
leadership over first). A bad flag or an unusable data directory exits with status 2 and one line on
stderr naming the problem (a port another process serves, too: ``proto.runtime.listeners``), never a
traceback.
The process writes its ready file (``proto.runtime.ready_file``, role ``raft``) once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import signal
import struct
import sys
import time
from pathlib import Path

import grpc

from proto import errors, raft_pb2, raft_pb2_grpc
from proto.errors import ErrorCode
from proto.runtime import ready_file
from proto.runtime.listeners import (
    SERVER_OPTIONS,
    ListenerError,
    add_grpc_listener,
    check_bindable,
    split_address,
)
from proto.runtime.logfmt import configure_logging
from proto.runtime.serving import add_standard_services
from raft.config import QuorumConfig, QuorumConfigError, parse_voters
from raft.driver import DriverConfig, NotLeaderError, RaftDriver
from raft.messages import NO_NODE
from raft.store import RaftStoreCorruptError

EXIT_USAGE = 2
_RECORD_HEAD = struct.Struct(">QI")
SERVICE_NAMES = ["pykraft.raft.RaftService", "pykraft.raft.RaftClientService"]


class AppendOnlyLog:
    """The replicated state: ``(index, data)`` of every applied normal entry, in index order.

    Snapshot bytes: repeated ``index u64 | length u32 | data``.
    """

    def __init__(self) -> None:
        self.indexes: list[int] = []
        self.records: list[bytes] = []

    def apply(self, index: int, data: bytes) -> None:
        assert not self.indexes or index > self.indexes[-1], f"apply {index} after {self.indexes[-1]}"
        self.indexes.append(index)
        self.records.append(data)

    def snapshot(self) -> bytes:
        parts = []
        for index, data in zip(self.indexes, self.records, strict=True):
            parts.append(_RECORD_HEAD.pack(index, len(data)))
            parts.append(data)
        return b"".join(parts)

    def restore(self, data: bytes) -> None:
        self.indexes, self.records = [], []
        view, pos = memoryview(data), 0
        while pos < len(view):
            index, size = _RECORD_HEAD.unpack_from(view, pos)
            pos += _RECORD_HEAD.size
            self.indexes.append(index)
            self.records.append(bytes(view[pos : pos + size]))
            pos += size

    def read(self, from_index: int, max_entries: int) -> list[tuple[int, bytes]]:
        start = bisect.bisect_left(self.indexes, from_index)
        stop = len(self.indexes) if max_entries == 0 else min(len(self.indexes), start + max_entries)
        return list(zip(self.indexes[start:stop], self.records[start:stop], strict=True))


class ClientService(raft_pb2_grpc.RaftClientServiceServicer):
    """``RaftClientService``: proposals and reads answered from the driver and the local log."""

    def __init__(self, driver: RaftDriver, log: AppendOnlyLog, voters: QuorumConfig, faults: bool) -> None:
        self._driver = driver
        self._log = log
        self._voters = voters
        self._faults = faults

    def _hint(self, leader_id: int) -> raft_pb2.LeaderHint:
        if leader_id == NO_NODE or leader_id not in self._voters.ids:  # only a voter leads
            return raft_pb2.LeaderHint()
        return raft_pb2.LeaderHint(leader_id=leader_id, leader_address=self._voters.voter(leader_id).address)

    async def Propose(self, request, context):
        try:
            indexes = await self._driver.propose_batch(list(request.entries))
        except NotLeaderError as exc:
            return raft_pb2.ProposeResponse(
                error_code=exc.code, error_message=exc.message, leader=self._hint(exc.leader_id)
            )
        except errors.KafkaError as exc:
            return raft_pb2.ProposeResponse(error_code=exc.code, error_message=exc.message)
        if not indexes:
            return raft_pb2.ProposeResponse()
        return raft_pb2.ProposeResponse(first_index=indexes[0], last_index=indexes[-1])

    async def ReadIndex(self, request, context):
        try:
            index = await self._driver.read_index()
        except NotLeaderError as exc:
            return raft_pb2.ReadIndexResponse(
                error_code=exc.code, error_message=exc.message, leader=self._hint(exc.leader_id)
            )
        except errors.KafkaError as exc:
            return raft_pb2.ReadIndexResponse(error_code=exc.code, error_message=exc.message)
        return raft_pb2.ReadIndexResponse(index=index)

    async def Read(self, request, context):
        records = [
            raft_pb2.LogRecord(index=i, data=d)
            for i, d in self._log.read(request.from_index, request.max_entries)
        ]
        return raft_pb2.ReadResponse(records=records, applied_index=self._driver.applied_index)

    async def Status(self, request, context):
        d = self._driver
        return raft_pb2.StatusResponse(
            node_id=d.node_id,
            term=d.term,
            leader_id=d.leader_id,
            is_leader=d.is_leader,
            commit_index=d.commit_index,
            applied_index=d.applied_index,
        )

    async def TransferLeadership(self, request, context):
        try:
            await self._driver.transfer_leadership(request.target_id)
        except NotLeaderError as exc:
            return raft_pb2.TransferLeadershipResponse(
                error_code=exc.code, error_message=exc.message, leader=self._hint(exc.leader_id)
            )
        except errors.KafkaError as exc:
            return raft_pb2.TransferLeadershipResponse(error_code=exc.code, error_message=exc.message)
        return raft_pb2.TransferLeadershipResponse(leader=self._hint(self._driver.leader_id))

    async def MeasureCommitLatency(self, request, context):
        payload = bytes(request.entry_bytes)
        latencies = []
        try:
            for _ in range(request.count):
                started = time.perf_counter()
                await self._driver.propose(payload)
                latencies.append((time.perf_counter() - started) * 1000)
        except NotLeaderError as exc:
            return raft_pb2.MeasureCommitLatencyResponse(
                error_code=exc.code, error_message=exc.message, leader=self._hint(exc.leader_id)
            )
        except errors.KafkaError as exc:
            return raft_pb2.MeasureCommitLatencyResponse(error_code=exc.code, error_message=exc.message)
        return raft_pb2.MeasureCommitLatencyResponse(latency_ms=latencies)

    async def SetPartition(self, request, context):
        if not self._faults:
            return raft_pb2.SetPartitionResponse(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message="fault injection is disabled; start the node with --enable-fault-injection",
            )
        members = set(self._voters.ids) | set(self._voters.observer_ids)
        unknown = sorted(set(request.blocked_peer_ids) - members)
        if unknown:
            return raft_pb2.SetPartitionResponse(
                error_code=ErrorCode.INVALID_REQUEST, error_message=f"unknown peer ids {unknown}"
            )
        blocked = self._driver.blocked_peers
        blocked.clear()
        blocked.update(request.blocked_peer_ids)
        return raft_pb2.SetPartitionResponse()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m raft.server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--listen", required=True, help="host:port of this node's gRPC server")
    parser.add_argument("--voters", required=True, help="1@host:port,2@host:port,3@host:port")
    parser.add_argument("--observers", default="", help="nodes that only follow: 4@host:port,...")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--election-timeout-ms", type=int, default=300)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=50)
    parser.add_argument("--snapshot-every-entries", type=int, default=10_000)
    parser.add_argument("--rpc-timeout-ms", type=int, default=1000)
    parser.add_argument("--enable-fault-injection", action="store_true")
    parser.add_argument("--log-level", default="WARNING")
    return parser.parse_args(argv)


def build_config(args: argparse.Namespace) -> DriverConfig:
    voters = parse_voters(args.voters, args.observers)
    voters.member(args.node_id)  # raises QuorumConfigError if this node is neither voter nor observer
    if args.election_timeout_ms <= args.heartbeat_interval_ms:
        raise QuorumConfigError(
            f"--election-timeout-ms ({args.election_timeout_ms}) must exceed "
            f"--heartbeat-interval-ms ({args.heartbeat_interval_ms})"
        )
    return DriverConfig(
        node_id=args.node_id,
        voters=voters,
        data_dir=args.data_dir,
        election_timeout_ms=args.election_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        snapshot_every_entries=args.snapshot_every_entries,
        rpc_timeout_s=args.rpc_timeout_ms / 1000,
    )


async def serve(args: argparse.Namespace, config: DriverConfig) -> None:
    check_bindable("--listen", args.listen)  # a busy port: one line, before the driver starts
    state = AppendOnlyLog()
    driver = RaftDriver(config, state)
    await driver.start()
    server = grpc.aio.server(options=SERVER_OPTIONS)
    driver.add_to_server(server)
    raft_pb2_grpc.add_RaftClientServiceServicer_to_server(
        ClientService(driver, state, config.voters, args.enable_fault_injection), server
    )
    health = add_standard_services(server, SERVICE_NAMES)
    try:
        port = add_grpc_listener(server, "--listen", args.listen)
    except ListenerError:
        await driver.stop()
        await server.stop(None)
        raise
    await server.start()
    await health.set_serving(True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready_file.write(args.data_dir, ready_file.ReadyFile(
        config.node_id, "raft", os.getpid(), ready_file.READY, f"{split_address(args.listen)[0]}:{port}"
    ))  # fmt: skip
    stopping = asyncio.create_task(stop.wait())
    running = asyncio.create_task(driver.wait())
    await asyncio.wait({stopping, running}, return_when=asyncio.FIRST_COMPLETED)
    if running.done():  # the driver's loop died: fail loudly instead of serving a dead node
        stopping.cancel()
        await server.stop(grace=None)
        running.result()
    running.cancel()
    await health.set_serving(False)
    await driver.stop()
    await server.stop(grace=0.5)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level, args.node_id, "raft")
    try:
        config = build_config(args)
        asyncio.run(serve(args, config))
    except (QuorumConfigError, RaftStoreCorruptError, OSError) as exc:
        print(f"raft.server: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
