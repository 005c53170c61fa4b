"""Raft messages over gRPC (grpc.aio): protobuf conversion at the edge, one ordered sender per peer.

Mapping. Requests (RequestVote, AppendEntries, InstallSnapshot, TimeoutNow) travel as RPCs of
``RaftService``; each unary reply carries the response message the receiving core produced for that
request, if any, and that response is handed back to the local driver as an incoming message. A
missing reply (error, deadline, a silent receiver) is simply a lost message: Raft retries. Snapshot
chunks that sit next to each other in a peer's queue go out as one client-streaming call.

Ordering and isolation. Every peer has its own FIFO queue and one sender task that keeps at most one
RPC in flight, so messages to a peer are never reordered, and a dead or slow peer (every call has a
deadline) delays only its own queue. Consecutive AppendEntries to the same peer in the same term that
continue each other are coalesced into one call (batching under load), up to ``MAX_COALESCED_ENTRIES``
and ``MAX_COALESCED_BYTES``; entries the peer already acknowledged in this term are trimmed from a
queued append (a resend after a suspected loss carries only what is new). When a call fails the queued
backlog for that peer is dropped (it would be stale by the time the peer answers) and the queue is
bounded; the core re-sends on its next heartbeat.

Fault injection (tests only): ``blocked_peers`` drops traffic to those peers and refuses calls from
them with UNAVAILABLE — a symmetric network partition without touching the operating system.

Only this module imports the generated ``raft_pb2``; the core and the driver see dataclasses only.
Not thread-safe: every method runs on the driver's event loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

import grpc

from proto import raft_pb2, raft_pb2_grpc
from proto.runtime.logfmt import log_event
from proto.runtime.serving import GRPC_OPTIONS
from raft.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Entry,
    EntryKind,
    InstallSnapshot,
    InstallSnapshotResponse,
    Message,
    RequestVote,
    RequestVoteResponse,
    SnapshotMeta,
    TimeoutNow,
)

log = logging.getLogger(__name__)

DEFAULT_RPC_TIMEOUT_S = 1.0
MAX_QUEUED_MESSAGES = 1024  # per peer; beyond it the oldest are dropped (Raft tolerates loss)
# Coalescing stops at this size, so one call stays well inside its deadline and acks keep flowing.
MAX_COALESCED_ENTRIES = 512
MAX_COALESCED_BYTES = 2 << 20
RequestHandler = Callable[[Message], Awaitable[Message | None]]
ResponseSink = Callable[[Message], None]
_PACKED_ENTRY = struct.Struct(">QBI")
_KINDS = {kind.value: kind for kind in EntryKind}


class MalformedMessageError(ValueError):
    """A peer sent bytes that do not decode; the call is refused with INVALID_ARGUMENT."""


# ---- dataclass <-> protobuf -----------------------------------------------------------------------


def meta_to_proto(m: SnapshotMeta) -> raft_pb2.SnapshotMeta:
    return raft_pb2.SnapshotMeta(last_index=m.last_index, last_term=m.last_term)


def meta_from_proto(p: raft_pb2.SnapshotMeta) -> SnapshotMeta:
    return SnapshotMeta(last_index=p.last_index, last_term=p.last_term)


def request_vote_to_proto(m: RequestVote) -> raft_pb2.RequestVoteRequest:
    return raft_pb2.RequestVoteRequest(
        src=m.src,
        dst=m.dst,
        term=m.term,
        last_log_index=m.last_log_index,
        last_log_term=m.last_log_term,
        pre_vote=m.pre_vote,
        leadership_transfer=m.leadership_transfer,
    )


def request_vote_from_proto(p: raft_pb2.RequestVoteRequest) -> RequestVote:
    return RequestVote(
        src=p.src,
        dst=p.dst,
        term=p.term,
        last_log_index=p.last_log_index,
        last_log_term=p.last_log_term,
        pre_vote=p.pre_vote,
        leadership_transfer=p.leadership_transfer,
    )


def vote_response_to_proto(m: RequestVoteResponse) -> raft_pb2.RequestVoteResponse:
    return raft_pb2.RequestVoteResponse(
        src=m.src, dst=m.dst, term=m.term, granted=m.granted, pre_vote=m.pre_vote
    )


def vote_response_from_proto(p: raft_pb2.RequestVoteResponse) -> RequestVoteResponse:
    return RequestVoteResponse(src=p.src, dst=p.dst, term=p.term, granted=p.granted, pre_vote=p.pre_vote)


def pack_entries(entries: tuple[Entry, ...]) -> bytes:
    """``term u64 | kind u8 | length u32 | data`` per entry (see ``AppendEntriesRequest.packed_entries``)."""
    pack = _PACKED_ENTRY.pack
    parts = []
    for e in entries:
        parts.append(pack(e.term, e.kind, len(e.data)))
        parts.append(e.data)
    return b"".join(parts)


def unpack_entries(first_index: int, packed: bytes) -> tuple[Entry, ...]:
    """Decode ``pack_entries`` output at ``first_index``, ...; ``MalformedMessageError`` if cut or garbled."""
    unpack, head, end = _PACKED_ENTRY.unpack_from, _PACKED_ENTRY.size, len(packed)
    entries, position, index = [], 0, first_index
    while position < end:
        if position + head > end:
            raise MalformedMessageError(f"entry {index}: {end - position} bytes left, header needs {head}")
        term, kind, length = unpack(packed, position)
        position += head
        if position + length > end or kind not in _KINDS:
            raise MalformedMessageError(f"entry {index}: length {length} or kind {kind} does not fit")
        entries.append(Entry(term, index, packed[position : position + length], _KINDS[kind]))
        position += length
        index += 1
    return tuple(entries)


def append_to_proto(m: AppendEntries) -> raft_pb2.AppendEntriesRequest:
    return raft_pb2.AppendEntriesRequest(
        src=m.src,
        dst=m.dst,
        term=m.term,
        prev_log_index=m.prev_log_index,
        prev_log_term=m.prev_log_term,
        packed_entries=pack_entries(m.entries),
        leader_commit=m.leader_commit,
        read_context=m.read_context,
    )


def append_from_proto(p: raft_pb2.AppendEntriesRequest) -> AppendEntries:
    return AppendEntries(
        src=p.src,
        dst=p.dst,
        term=p.term,
        prev_log_index=p.prev_log_index,
        prev_log_term=p.prev_log_term,
        entries=unpack_entries(p.prev_log_index + 1, p.packed_entries),
        leader_commit=p.leader_commit,
        read_context=p.read_context,
    )


def append_response_to_proto(m: AppendEntriesResponse) -> raft_pb2.AppendEntriesResponse:
    return raft_pb2.AppendEntriesResponse(
        src=m.src,
        dst=m.dst,
        term=m.term,
        success=m.success,
        match_index=m.match_index,
        conflict_term=m.conflict_term,
        conflict_index=m.conflict_index,
        read_context=m.read_context,
    )


def append_response_from_proto(p: raft_pb2.AppendEntriesResponse) -> AppendEntriesResponse:
    return AppendEntriesResponse(
        src=p.src,
        dst=p.dst,
        term=p.term,
        success=p.success,
        match_index=p.match_index,
        conflict_term=p.conflict_term,
        conflict_index=p.conflict_index,
        read_context=p.read_context,
    )


def snapshot_chunk_to_proto(m: InstallSnapshot) -> raft_pb2.InstallSnapshotChunk:
    return raft_pb2.InstallSnapshotChunk(
        src=m.src,
        dst=m.dst,
        term=m.term,
        meta=meta_to_proto(m.meta),
        offset=m.offset,
        chunk=m.chunk,
        done=m.done,
    )


def snapshot_chunk_from_proto(p: raft_pb2.InstallSnapshotChunk) -> InstallSnapshot:
    return InstallSnapshot(
        src=p.src,
        dst=p.dst,
        term=p.term,
        meta=meta_from_proto(p.meta),
        offset=p.offset,
        chunk=p.chunk,
        done=p.done,
    )


def snapshot_response_to_proto(m: InstallSnapshotResponse) -> raft_pb2.InstallSnapshotResponse:
    return raft_pb2.InstallSnapshotResponse(
        src=m.src,
        dst=m.dst,
        term=m.term,
        meta=meta_to_proto(m.meta),
        next_offset=m.next_offset,
        done=m.done,
        success=m.success,
    )


def snapshot_response_from_proto(p: raft_pb2.InstallSnapshotResponse) -> InstallSnapshotResponse:
    return InstallSnapshotResponse(
        src=p.src,
        dst=p.dst,
        term=p.term,
        meta=meta_from_proto(p.meta),
        next_offset=p.next_offset,
        done=p.done,
        success=p.success,
    )


def timeout_now_to_proto(m: TimeoutNow) -> raft_pb2.TimeoutNowRequest:
    return raft_pb2.TimeoutNowRequest(src=m.src, dst=m.dst, term=m.term)


def timeout_now_from_proto(p: raft_pb2.TimeoutNowRequest) -> TimeoutNow:
    return TimeoutNow(src=p.src, dst=p.dst, term=p.term)


def coalesce(first: AppendEntries, second: AppendEntries) -> AppendEntries | None:
    """One AppendEntries equal to sending ``first`` then ``second``, or None when they do not chain."""
    if first.term != second.term or first.src != second.src or first.dst != second.dst:
        return None
    if second.prev_log_index != first.prev_log_index + len(first.entries):
        return None
    if first.read_context and second.read_context and first.read_context != second.read_context:
        return None
    if len(first.entries) + len(second.entries) > MAX_COALESCED_ENTRIES:
        return None
    return replace(
        first,
        entries=first.entries + second.entries,
        leader_commit=max(first.leader_commit, second.leader_commit),
        read_context=second.read_context or first.read_context,
    )


def trim_acknowledged(message: AppendEntries, acked_term: int, acked_match: int) -> AppendEntries:
    """Drop the entries the peer has already acknowledged in this leader's term.

    A successful AppendEntriesResponse of term T up to ``acked_match`` means the peer's log equals
    the leader's through that index (Log Matching), durably, and a leader never rewrites its own log:
    re-sending those entries is a no-op for the peer. The trimmed message starts right after them.
    """
    if acked_term != message.term or acked_match <= message.prev_log_index or not message.entries:
        return message
    skip = min(acked_match - message.prev_log_index, len(message.entries))
    last_skipped = message.entries[skip - 1]
    return replace(
        message,
        prev_log_index=last_skipped.index,
        prev_log_term=last_skipped.term,
        entries=message.entries[skip:],
    )


# ---- inbound ----------------------------------------------------------------------------------


class RaftServicer(raft_pb2_grpc.RaftServiceServicer):
    """Hands each incoming request to the driver and replies with the core's response, if any."""

    def __init__(self, node_id: int, handle_request: RequestHandler, blocked_peers: set[int]) -> None:
        self._node_id = node_id
        self._handle = handle_request
        self._blocked = blocked_peers

    async def _admit(self, src: int, dst: int, context: grpc.aio.ServicerContext) -> None:
        if src in self._blocked:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"fault injection: traffic from {src} is blocked"
            )
        if dst != self._node_id:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"message for node {dst} reached node {self._node_id}: check the --voters addresses",
            )

    async def RequestVote(self, request, context):
        await self._admit(request.src, request.dst, context)
        response = await self._handle(request_vote_from_proto(request))
        if isinstance(response, RequestVoteResponse):
            return raft_pb2.RequestVoteReply(response=vote_response_to_proto(response))
        return raft_pb2.RequestVoteReply()

    async def AppendEntries(self, request, context):
        await self._admit(request.src, request.dst, context)
        try:
            message = append_from_proto(request)
        except MalformedMessageError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"AppendEntries from {request.src}: {exc}")
        response = await self._handle(message)
        if isinstance(response, AppendEntriesResponse):
            return raft_pb2.AppendEntriesReply(response=append_response_to_proto(response))
        return raft_pb2.AppendEntriesReply()

    async def InstallSnapshot(self, request_iterator, context):
        response: Message | None = None
        async for chunk in request_iterator:
            await self._admit(chunk.src, chunk.dst, context)
            response = await self._handle(snapshot_chunk_from_proto(chunk))
        if isinstance(response, InstallSnapshotResponse):
            return raft_pb2.InstallSnapshotReply(response=snapshot_response_to_proto(response))
        return raft_pb2.InstallSnapshotReply()

    async def TimeoutNow(self, request, context):
        await self._admit(request.src, request.dst, context)
        await self._handle(timeout_now_from_proto(request))
        return raft_pb2.TimeoutNowReply()


# ---- outbound ---------------------------------------------------------------------------------


class PeerSender:
    """The ordered outbound queue of one peer and the task that drains it, one RPC at a time."""

    def __init__(self, peer_id: int, address: str, deliver: ResponseSink, rpc_timeout_s: float) -> None:
        self.peer_id = peer_id
        self.address = address
        self._deliver = deliver
        self._timeout_s = rpc_timeout_s
        self._queue: collections.deque[Message] = collections.deque()
        self._wakeup = asyncio.Event()
        self._channel = grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
        self._stub = raft_pb2_grpc.RaftServiceStub(self._channel)
        self._task: asyncio.Task[None] | None = None
        self.failures = 0
        # What the peer acknowledged: (term, match_index) of its latest successful append response.
        self._acked_term = 0
        self._acked_match = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"raft-sender-{self.peer_id}")

    def enqueue(self, message: Message) -> None:
        if len(self._queue) >= MAX_QUEUED_MESSAGES:
            self._queue.popleft()
        self._queue.append(message)
        self._wakeup.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._channel.close(grace=None)

    def _take_next(self) -> Message | list[InstallSnapshot]:
        message = self._queue.popleft()
        if isinstance(message, InstallSnapshot):
            chunks = [message]
            while self._queue and isinstance(self._queue[0], InstallSnapshot):
                chunks.append(self._queue.popleft())  # type: ignore[arg-type]
            return chunks
        if not isinstance(message, AppendEntries):
            return message
        # A resend (after a suspected loss) of entries that did arrive shrinks to what is new.
        message = self._trim(message)
        size = _payload_bytes(message)
        while self._queue and isinstance(self._queue[0], AppendEntries):
            following = self._trim(self._queue[0])
            size += _payload_bytes(following)
            merged = coalesce(message, following) if size <= MAX_COALESCED_BYTES else None
            if merged is None:
                break
            self._queue.popleft()
            message = merged
        return message

    def _trim(self, message: AppendEntries) -> AppendEntries:
        return trim_acknowledged(message, self._acked_term, self._acked_match)

    async def _run(self) -> None:
        while True:
            while not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            item = self._take_next()
            try:
                response = await self._call(item)
            except grpc.aio.AioRpcError as exc:
                self.failures += 1
                if self.failures == 1 or self.failures % 100 == 0:
                    log_event(log, logging.INFO, "raft_peer_unreachable", peer=self.peer_id,
                              address=self.address,
                              code=exc.code().name, failures=self.failures)  # fmt: skip
                self._queue.clear()
                continue
            self.failures = 0
            if response is not None:
                self._note_ack(response)
                self._deliver(response)

    def _note_ack(self, response: Message) -> None:
        if not isinstance(response, AppendEntriesResponse) or not response.success:
            return
        if response.term > self._acked_term:
            self._acked_term, self._acked_match = response.term, response.match_index
        elif response.term == self._acked_term:
            self._acked_match = max(self._acked_match, response.match_index)

    async def _call(self, item: Message | list[InstallSnapshot]) -> Message | None:
        timeout = self._timeout_s
        if isinstance(item, list):
            reply = await self._stub.InstallSnapshot(_chunks(item), timeout=timeout * len(item))
            return snapshot_response_from_proto(reply.response) if reply.HasField("response") else None
        if isinstance(item, AppendEntries):
            reply = await self._stub.AppendEntries(append_to_proto(item), timeout=timeout)
            return append_response_from_proto(reply.response) if reply.HasField("response") else None
        if isinstance(item, RequestVote):
            reply = await self._stub.RequestVote(request_vote_to_proto(item), timeout=timeout)
            return vote_response_from_proto(reply.response) if reply.HasField("response") else None
        if isinstance(item, TimeoutNow):
            await self._stub.TimeoutNow(timeout_now_to_proto(item), timeout=timeout)
            return None
        raise AssertionError(f"responses are returned by the RPC that asked, never sent on their own: {item}")


def _payload_bytes(message: Message) -> int:
    return sum(len(e.data) for e in message.entries) if isinstance(message, AppendEntries) else 0


async def _chunks(chunks: list[InstallSnapshot]) -> AsyncIterator[raft_pb2.InstallSnapshotChunk]:
    for chunk in chunks:
        yield snapshot_chunk_to_proto(chunk)


class Transport:
    """All peers' senders plus the fault-injection switch; ``send`` never blocks."""

    def __init__(
        self,
        node_id: int,
        peers: dict[int, str],
        deliver: ResponseSink,
        rpc_timeout_s: float = DEFAULT_RPC_TIMEOUT_S,
    ) -> None:
        self.node_id = node_id
        self.blocked_peers: set[int] = set()
        self._senders = {pid: PeerSender(pid, addr, deliver, rpc_timeout_s) for pid, addr in peers.items()}

    def start(self) -> None:
        for sender in self._senders.values():
            sender.start()

    def send(self, message: Message) -> None:
        if message.dst in self.blocked_peers:
            return
        sender = self._senders.get(message.dst)
        assert sender is not None, (
            f"node {self.node_id} has no peer {message.dst} for {type(message).__name__}"
        )
        sender.enqueue(message)

    def servicer(self, handle_request: RequestHandler) -> RaftServicer:
        return RaftServicer(self.node_id, handle_request, self.blocked_peers)

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self._senders.values()))
