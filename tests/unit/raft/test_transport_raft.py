"""raft.transport: lossless dataclass <-> protobuf conversion, AppendEntries coalescing, and per-peer
ordered senders where a dead peer never stalls a live one (issue 3 §3)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from proto import raft_pb2_grpc
from proto.runtime.listeners import pick_port
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
from raft.transport import (
    MalformedMessageError,
    Transport,
    append_from_proto,
    append_response_from_proto,
    append_response_to_proto,
    append_to_proto,
    coalesce,
    pack_entries,
    request_vote_from_proto,
    request_vote_to_proto,
    snapshot_chunk_from_proto,
    snapshot_chunk_to_proto,
    snapshot_response_from_proto,
    snapshot_response_to_proto,
    timeout_now_from_proto,
    timeout_now_to_proto,
    trim_acknowledged,
    unpack_entries,
    vote_response_from_proto,
    vote_response_to_proto,
)

ENTRIES = (Entry(term=2, index=5, kind=EntryKind.NOOP), Entry(term=2, index=6, data=b"\x00payload\xff"))
META = SnapshotMeta(last_index=40, last_term=3)

ROUND_TRIPS = [
    pytest.param(
        RequestVote(1, 2, 7, 10, 6, pre_vote=True), request_vote_to_proto, request_vote_from_proto, id="vote"
    ),
    pytest.param(
        RequestVote(1, 2, 7, 10, 6, leadership_transfer=True),
        request_vote_to_proto,
        request_vote_from_proto,
        id="vote-xfer",
    ),
    pytest.param(
        RequestVoteResponse(2, 1, 7, True, True),
        vote_response_to_proto,
        vote_response_from_proto,
        id="vote-resp",
    ),
    pytest.param(
        AppendEntries(1, 3, 2, 4, 1, ENTRIES, 5, 9), append_to_proto, append_from_proto, id="append"
    ),
    pytest.param(AppendEntries(1, 3, 2, 4, 1, (), 5), append_to_proto, append_from_proto, id="heartbeat"),
    pytest.param(
        AppendEntriesResponse(3, 1, 2, False, 0, 1, 3, 9),
        append_response_to_proto,
        append_response_from_proto,
        id="append-resp",
    ),
    pytest.param(
        InstallSnapshot(1, 2, 3, META, 4096, b"chunk", True),
        snapshot_chunk_to_proto,
        snapshot_chunk_from_proto,
        id="snap",
    ),
    pytest.param(
        InstallSnapshotResponse(2, 1, 3, META, 4101, True, False),
        snapshot_response_to_proto,
        snapshot_response_from_proto,
        id="snap-resp",
    ),
    pytest.param(TimeoutNow(1, 2, 9), timeout_now_to_proto, timeout_now_from_proto, id="timeout-now"),
]


@pytest.mark.parametrize(("message", "to_proto", "from_proto"), ROUND_TRIPS)
def test_round_trip_is_lossless(message, to_proto, from_proto) -> None:
    """Generated types stop at the gRPC edge: what the core sends is exactly what the peer's core gets."""
    wire = to_proto(message).SerializeToString()
    parsed = type(to_proto(message)).FromString(wire)
    assert from_proto(parsed) == message


MALFORMED = [
    pytest.param(pack_entries(ENTRIES)[:-1], "does not fit", id="cut-data"),
    pytest.param(pack_entries(ENTRIES) + b"\x00" * 5, "header needs 13", id="cut-header"),
    pytest.param(b"\x00" * 8 + b"\x07" + b"\x00" * 4, "kind 7", id="unknown-kind"),
]


@pytest.mark.parametrize(("packed", "message"), MALFORMED)
def test_malformed_packed_entries_are_refused(packed: bytes, message: str) -> None:
    """Bytes from the network get a named error, never an assertion or a half-decoded append."""
    with pytest.raises(MalformedMessageError, match=message):
        unpack_entries(5, packed)


def ae(prev: int, count: int, *, term: int = 2, commit: int = 0, ctx: int = 0) -> AppendEntries:
    entries = tuple(Entry(term=term, index=prev + 1 + i) for i in range(count))
    return AppendEntries(1, 2, term, prev, term, entries, commit, ctx)


COALESCE = [
    pytest.param(ae(4, 2), ae(6, 3, commit=5), ae(4, 5, commit=5), id="chain"),
    pytest.param(ae(4, 0, ctx=3), ae(4, 2), ae(4, 2, ctx=3), id="heartbeat-then-append"),
    pytest.param(ae(4, 2), ae(7, 1), None, id="gap"),
    pytest.param(ae(4, 2), ae(6, 1, term=3), None, id="new-term"),
    pytest.param(ae(4, 0, ctx=3), ae(4, 0, ctx=4), None, id="two-read-rounds"),
]


@pytest.mark.parametrize(("first", "second", "merged"), COALESCE)
def test_coalesce_only_chaining_appends(first, second, merged) -> None:
    """Merging is only legal when sending the merged message equals sending both in order."""
    assert coalesce(first, second) == merged


TRIMS = [
    pytest.param(ae(4, 6), (2, 7), ae(7, 3), id="prefix-acknowledged"),
    pytest.param(ae(4, 6), (2, 20), ae(10, 0), id="all-acknowledged"),
    pytest.param(ae(4, 6), (2, 3), ae(4, 6), id="ack-before-prev"),
    pytest.param(ae(4, 6), (1, 9), ae(4, 6), id="ack-from-older-term"),
    pytest.param(ae(4, 0, ctx=5), (2, 9), ae(4, 0, ctx=5), id="heartbeat-untouched"),
]


@pytest.mark.parametrize(("message", "ack", "trimmed"), TRIMS)
def test_trim_only_what_this_term_acknowledged(message, ack, trimmed) -> None:
    """Log Matching: a success in the leader's term through index m means the peer holds the
    leader's entries up to m durably; only those are dropped from a queued resend."""
    assert trim_acknowledged(message, *ack) == trimmed


async def start_peer(node_id: int, handle) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(options=GRPC_OPTIONS)
    raft_pb2_grpc.add_RaftServiceServicer_to_server(
        Transport(node_id, {}, lambda m: None).servicer(handle), server
    )
    port = server.add_insecure_port("127.0.0.1:0")  # the kernel picks: no port taken by someone else
    await server.start()
    return server, port


async def wait_for(condition, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met before the deadline"
        await asyncio.sleep(0.01)


def test_ordered_delivery_and_dead_peer_isolation() -> None:
    """Messages to one peer arrive in order with responses fed back; a peer that never answers (or
    is not listening) delays only itself, bounded by the RPC deadline."""

    async def scenario() -> None:
        seen: list[int] = []
        stuck = asyncio.Event()

        async def live(message: Message) -> Message | None:
            assert isinstance(message, AppendEntries)
            seen.append(message.prev_log_index)
            return AppendEntriesResponse(
                2, 1, message.term, True, message.prev_log_index + len(message.entries)
            )

        async def hung(message: Message) -> Message | None:
            await stuck.wait()
            return None

        live_server, live_port = await start_peer(2, live)
        hung_server, hung_port = await start_peer(3, hung)
        responses: list[Message] = []
        peers = {2: f"127.0.0.1:{live_port}", 3: f"127.0.0.1:{hung_port}", 4: f"127.0.0.1:{pick_port()}"}
        transport = Transport(1, peers, responses.append, rpc_timeout_s=0.3)
        transport.start()
        try:
            for prev in range(0, 200, 2):
                for dst in (3, 4, 2):
                    transport.send(AppendEntries(1, dst, 1, prev, 1, (), 0, 0))
            await wait_for(lambda: seen and seen[-1] == 198)
            assert seen == sorted(seen) and len(set(seen)) == len(seen), f"reordered or duplicated: {seen}"
            assert all(isinstance(r, AppendEntriesResponse) and r.src == 2 for r in responses)
        finally:
            stuck.set()
            await transport.close()
            await live_server.stop(None)
            await hung_server.stop(None)

    asyncio.run(scenario())


def test_blocked_peer_is_partitioned_both_ways() -> None:
    """Fault injection: a blocked peer gets nothing from us and its calls are refused (UNAVAILABLE)."""

    async def scenario() -> None:
        got: list[Message] = []

        async def handle(message: Message) -> Message | None:
            got.append(message)
            return None

        server, port = await start_peer(2, handle)
        transport = Transport(1, {2: f"127.0.0.1:{port}"}, lambda m: None, rpc_timeout_s=0.5)
        transport.start()
        try:
            transport.blocked_peers.add(2)
            transport.send(TimeoutNow(1, 2, 1))
            transport.blocked_peers.clear()
            transport.send(TimeoutNow(1, 2, 2))
            await wait_for(lambda: len(got) == 1)
            assert got == [TimeoutNow(1, 2, 2)]
        finally:
            await transport.close()
            await server.stop(None)

    asyncio.run(scenario())
