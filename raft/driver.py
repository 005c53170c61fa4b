"""The asyncio driver: runs the sans-I/O ``RaftNode`` with a real clock, a rocksdict store and gRPC.

Public API (what the metadata controller uses)::

    quorum = parse_voters("1@h:p,2@h:p,3@h:p", observers="101@h:p")   # observers: optional
    driver = RaftDriver(DriverConfig(node_id=1, voters=quorum, data_dir=Path("...")), state_machine)
    await driver.start()                 # open + validate the store, restore the snapshot, start ticking
    driver.add_to_server(grpc_server)    # register RaftService on the caller's grpc.aio server
    index = await driver.propose(b"...")            # after commit AND apply; NotLeaderError / timeout
    indexes = await driver.propose_batch([b"...", b"..."])   # consecutive indexes, one round
    index = await driver.read_index()    # linearizable: the state machine has applied >= index
    await driver.transfer_leadership(target_id)     # ANY_FOLLOWER (0) = the most caught-up follower
    driver.is_leader, driver.leader_id, driver.term, driver.commit_index, driver.applied_index
    await driver.wait()                  # returns when stopped; raises what killed the loop
    await driver.stop()                  # graceful: a leader hands leadership over first
    driver.blocked_peers                 # tests only: a set of peer ids to partition away

The user's state machine implements ``StateMachine``: ``apply(index, data)`` for each committed
normal entry in index order (no-ops are skipped), ``snapshot() -> bytes`` of everything applied so far,
and ``restore(data)`` to replace its state by a snapshot. Every ``snapshot_every_entries`` applied
entries the driver takes a snapshot; it persists it (and compacts the log below it) one interval
later, so followers up to one interval behind still catch up from the log.

Loop (one iteration = one group commit): wait for a message, proposal, request or the core's next
deadline (``next_deadline_ms``, on ``time.monotonic``); step everything that arrived; tick when due;
then carry out each ``Ready`` in the documented order — send ``messages``, persist (ONE synced
WriteBatch; on a worker thread when messages went out first, so they travel during the fsync), send
``messages_after_persist``, report ``persisted``, apply ``committed``, answer read states. A proposal
succeeds only if its last entry commits in the term it was appended in (Raft §5.3); otherwise it
fails with ``NotLeaderError``.

Responses ride on the RPC that asked: a request stepped in this iteration waits for the response
message the core produces for its sender (matched FIFO per sender and kind); a request that got no
answer is answered with none (a lost message to Raft).

Errors: ``NotLeaderError`` (Kafka's NOT_CONTROLLER, 41) carries ``leader_id`` (``NO_NODE`` when
unknown); ``RequestTimedOutError`` (7) when a commit does not happen within ``propose_timeout_s``.
A corrupt store raises ``raft.store.RaftStoreCorruptError`` from ``start()``.

Stopping. ``stop()`` ends the loop by a flag the loop checks every iteration as well as by cancelling
it, and every timed wait here uses ``asyncio.timeout``, never ``asyncio.wait_for``: on Python 3.11
``wait_for`` swallows a cancellation that arrives in the same loop iteration as its inner future
completes (fixed in 3.12, CPython gh-86296), and a loop woken by a message at the moment it was
cancelled used to run on forever, so ``stop()`` hung until SIGKILL.

Single event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc

from proto import errors, raft_pb2_grpc
from proto.clock import monotonic_ms
from proto.runtime.logfmt import log_event
from raft.config import QuorumConfig
from raft.core import RaftConfig, RaftNode, Role
from raft.messages import (
    NO_NODE,
    AppendEntries,
    AppendEntriesResponse,
    Entry,
    EntryKind,
    InstallSnapshot,
    InstallSnapshotResponse,
    Message,
    NotLeader,
    Ready,
    RequestVote,
    RequestVoteResponse,
    Snapshot,
    SnapshotMeta,
)
from raft.store import RaftStore
from raft.transport import DEFAULT_RPC_TIMEOUT_S, Transport

log = logging.getLogger(__name__)

ANY_FOLLOWER = 0  # transfer_leadership target: the most caught-up follower
MAX_IDLE_WAIT_MS = 50  # the loop wakes at least this often even when the core has no deadline
RESPONSE_TO = {
    RequestVote: RequestVoteResponse,
    AppendEntries: AppendEntriesResponse,
    InstallSnapshot: InstallSnapshotResponse,
}
RESPONSE_TYPES = tuple(RESPONSE_TO.values())


class StateMachine(Protocol):
    """The user's replicated state: committed entries go in, in index order, exactly once per run."""

    def apply(self, index: int, data: bytes) -> None: ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


NotControllerError: type[errors.KafkaError] = errors.exception_class(errors.ErrorCode.NOT_CONTROLLER)
RequestTimedOutError: type[errors.KafkaError] = errors.exception_class(errors.ErrorCode.REQUEST_TIMED_OUT)


class NotLeaderError(NotControllerError):  # type: ignore[misc, valid-type]
    """This node is not the leader; ``leader_id`` is the node to retry at (``NO_NODE`` if unknown)."""

    def __init__(self, node_id: int, leader_id: int) -> None:
        if leader_id != NO_NODE:
            hint = f"retry at node {leader_id}"
        else:
            hint = "no leader is known yet; retry shortly"
        super().__init__(f"node {node_id} is not the Raft leader; {hint}")
        self.leader_id = leader_id


@dataclass(frozen=True, slots=True)
class DriverConfig:
    node_id: int
    voters: QuorumConfig
    data_dir: Path
    election_timeout_ms: int = 300  # the core draws each timeout from [t, 2t)
    heartbeat_interval_ms: int = 50
    snapshot_every_entries: int = 10_000
    rpc_timeout_s: float = DEFAULT_RPC_TIMEOUT_S
    propose_timeout_s: float = 5.0
    seed: int | None = None  # election-timeout randomness; None draws a seed from the OS

    @property
    def store_path(self) -> Path:
        return self.data_dir / "raft"

    def raft_config(self) -> RaftConfig:
        return RaftConfig(
            node_id=self.node_id,
            voters=frozenset(self.voters.ids),
            observers=frozenset(self.voters.observer_ids),
            election_timeout_min_ms=self.election_timeout_ms,
            election_timeout_max_ms=2 * self.election_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
        )


@dataclass(slots=True)
class _Proposal:
    """A proposal appended at ``first..last`` in ``term``: it succeeded iff ``last`` commits in ``term``."""

    term: int
    first: int
    last: int
    future: asyncio.Future[list[int]]


Waiters = dict[tuple[int, type], collections.deque["asyncio.Future[Message | None]"]]


class RaftDriver:
    """Owns a core, its store and transport; see the module docstring for the API and the loop."""

    def __init__(self, config: DriverConfig, state_machine: StateMachine) -> None:
        self.config = config
        self.node_id = config.node_id
        self._sm = state_machine
        self._store: RaftStore | None = None
        self._core: RaftNode | None = None
        self._transport: Transport | None = None
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"raft-store-{config.node_id}")
        self._wakeup = asyncio.Event()
        self._inbox: list[tuple[Message, asyncio.Future[Message | None] | None]] = []
        self._proposals: list[tuple[list[bytes], asyncio.Future[list[int]]]] = []
        self._reads: list[asyncio.Future[int]] = []
        self._transfers: list[int] = []
        self._awaiting_commit: dict[int, list[_Proposal]] = {}
        self._read_waiters: dict[int, asyncio.Future[int]] = {}
        self._apply_waiters: list[tuple[int, asyncio.Future[int]]] = []
        self._next_read_id = 1
        self.applied_index = 0
        self._last_snapshot_index = 0
        self._next_snapshot: Snapshot | None = None  # taken, persisted one interval later
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    # ---- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open and validate the store, restore the last snapshot, start the transport and the loop."""
        cfg = self.config
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        store = RaftStore.open(cfg.store_path)
        try:
            stored = store.load()
        except Exception:
            store.close()
            raise
        self._store = store
        if stored.snapshot is not None:
            self._sm.restore(stored.snapshot.data)
            self.applied_index = self._last_snapshot_index = stored.snapshot.meta.last_index
        self._core = RaftNode(
            cfg.raft_config(),
            random.Random(cfg.seed),
            hard_state=stored.hard_state,
            entries=stored.entries,
            snapshot=stored.snapshot,
            now_ms=monotonic_ms(),
        )
        peers = {v.node_id: v.address for v in cfg.voters.peers_of(cfg.node_id)}
        self._transport = Transport(cfg.node_id, peers, self._deliver_response, cfg.rpc_timeout_s)
        self._transport.start()
        self._task = asyncio.create_task(self._run(), name=f"raft-driver-{cfg.node_id}")
        log_event(log, logging.INFO, "raft_started", term=stored.hard_state.term,
                  applied_index=self.applied_index, last_index=stored.last_index)  # fmt: skip

    async def wait(self) -> None:
        """Return when the driver stops; raise what killed its loop if it died (a bug or a disk error)."""
        assert self._task is not None, "the driver is not started"
        await asyncio.shield(self._task)

    def add_to_server(self, server: grpc.aio.Server) -> None:
        """Register RaftService on the caller's server (the caller starts and stops it)."""
        assert self._transport is not None, "start() the driver before adding it to a server"
        raft_pb2_grpc.add_RaftServiceServicer_to_server(
            self._transport.servicer(self._handle_request), server
        )

    async def stop(self) -> None:
        """Graceful stop: a leader hands leadership to the most caught-up follower (bounded), then close."""
        if self._task is None:
            return
        if self.is_leader and len(self.config.voters.voters) > 1:
            with contextlib.suppress(errors.KafkaError):
                await self.transfer_leadership(ANY_FOLLOWER)
        self._stopped = True
        self._wakeup.set()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        self._fail_everything(NotLeaderError(self.node_id, NO_NODE))
        assert self._transport is not None and self._store is not None
        await self._transport.close()
        self._io.shutdown(wait=True)
        self._store.close()

    # ---- queries --------------------------------------------------------------------------------

    @property
    def core(self) -> RaftNode:
        assert self._core is not None, "the driver is not started"
        return self._core

    @property
    def is_leader(self) -> bool:
        return self._core is not None and self._core.role is Role.LEADER

    @property
    def leader_id(self) -> int:
        return self._core.leader_id if self._core is not None else NO_NODE

    @property
    def term(self) -> int:
        return self._core.term if self._core is not None else 0

    @property
    def commit_index(self) -> int:
        return self._core.commit_index if self._core is not None else 0

    @property
    def blocked_peers(self) -> set[int]:
        """Test-only fault injection: Raft traffic to and from these peers is dropped."""
        assert self._transport is not None, "the driver is not started"
        return self._transport.blocked_peers

    # ---- requests from the user -----------------------------------------------------------------

    async def propose(self, data: bytes) -> int:
        """Replicate one entry; return its index once committed and applied locally."""
        (index,) = await self.propose_batch([data])
        return index

    async def propose_batch(self, items: Sequence[bytes]) -> list[int]:
        """Replicate ``items`` at consecutive indexes (one proposal); return them after commit and apply."""
        if not items:
            raise errors.error_for(errors.ErrorCode.INVALID_REQUEST, "a proposal needs at least one entry")
        if not self.is_leader:
            raise NotLeaderError(self.node_id, self.leader_id)
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._proposals.append((list(items), future))
        self._wakeup.set()
        return await self._bounded(future, "commit of the proposal")

    async def read_index(self) -> int:
        """Linearizable read barrier (Raft thesis §6.4): an index the local state machine has applied."""
        if not self.is_leader:
            raise NotLeaderError(self.node_id, self.leader_id)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._reads.append(future)
        self._wakeup.set()
        return await self._bounded(future, "read index confirmation")

    async def transfer_leadership(self, target_id: int = ANY_FOLLOWER) -> None:
        """Hand leadership to ``target_id`` (``ANY_FOLLOWER``: the most caught-up); wait until done."""
        if not self.is_leader:
            raise NotLeaderError(self.node_id, self.leader_id)
        target = target_id or self._most_caught_up_follower()
        if target not in self.config.voters.ids or target == self.node_id:
            raise errors.error_for(errors.ErrorCode.INVALID_REQUEST, f"node {target} is not another voter")
        self._transfers.append(target)
        self._wakeup.set()
        deadline = time.monotonic() + 2 * self.config.election_timeout_ms / 1000
        while self.is_leader:
            if time.monotonic() > deadline:
                raise RequestTimedOutError(
                    f"leadership transfer from {self.node_id} to {target} did not complete"
                )
            await asyncio.sleep(0.005)

    def _most_caught_up_follower(self) -> int:
        progress = self.core.progress
        voters = [p for p in self.config.voters.ids if p != self.node_id and p in progress]
        return max(voters, key=lambda p: progress[p].match_index, default=NO_NODE)

    async def _bounded(self, future: asyncio.Future[Any], what: str) -> Any:
        try:
            async with asyncio.timeout(self.config.propose_timeout_s):  # not wait_for: see "Stopping"
                return await future
        except TimeoutError:
            raise RequestTimedOutError(
                f"{what} on node {self.node_id} took over {self.config.propose_timeout_s} s; "
                "the outcome is unknown (it may still commit)"
            ) from None

    # ---- messages from peers --------------------------------------------------------------------

    async def _handle_request(self, message: Message) -> Message | None:
        if self._stopped:
            return None
        future: asyncio.Future[Message | None] = asyncio.get_running_loop().create_future()
        self._inbox.append((message, future))
        self._wakeup.set()
        return await future

    def _deliver_response(self, message: Message) -> None:
        self._inbox.append((message, None))
        self._wakeup.set()

    # ---- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopped:
            await self._wait_for_work()
            now = monotonic_ms()
            waiters = self._step_inbox(now)
            self._submit_user_requests(now)
            deadline = self.core.next_deadline_ms()
            if deadline is not None and now >= deadline:
                self.core.tick(now)
            await self._drain_ready(waiters)
            for queue in waiters.values():
                for future in queue:
                    if not future.done():
                        future.set_result(None)  # the core did not answer: a lost message to the peer
            await self._maybe_snapshot()

    async def _wait_for_work(self) -> None:
        if self._wakeup.is_set():
            self._wakeup.clear()
            return
        deadline = self.core.next_deadline_ms()
        wait_ms = MAX_IDLE_WAIT_MS if deadline is None else min(MAX_IDLE_WAIT_MS, deadline - monotonic_ms())
        if wait_ms > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_ms / 1000):  # not wait_for: see "Stopping"
                    await self._wakeup.wait()
        self._wakeup.clear()

    def _step_inbox(self, now: int) -> Waiters:
        inbox, self._inbox = self._inbox, []
        waiters: Waiters = {}
        for message, future in inbox:
            self.core.step(message, now)
            if future is not None:
                response_type = RESPONSE_TO.get(type(message), type(None))
                waiters.setdefault((message.src, response_type), collections.deque()).append(future)
        return waiters

    def _submit_user_requests(self, now: int) -> None:
        proposals, self._proposals = self._proposals, []
        for items, future in proposals:
            if future.done():
                continue
            result = self.core.propose(items, now)
            if isinstance(result, NotLeader):
                future.set_exception(NotLeaderError(self.node_id, result.leader_hint))
                continue
            proposal = _Proposal(result.term, result.first_index, result.last_index, future)
            self._awaiting_commit.setdefault(result.last_index, []).append(proposal)
        reads, self._reads = self._reads, []
        for read in reads:
            request_id, self._next_read_id = self._next_read_id, self._next_read_id + 1
            refused = self.core.read_index(request_id, now)
            if refused is not None:
                read.set_exception(NotLeaderError(self.node_id, refused.leader_hint))
            else:
                self._read_waiters[request_id] = read
        transfers, self._transfers = self._transfers, []
        for target in transfers:
            self.core.transfer_leadership(target, now)

    async def _drain_ready(self, waiters: Waiters) -> None:
        """Carry out every Ready in the documented order until the core has nothing more to do."""
        while self.core.has_ready():
            ready = self.core.take_ready()
            self._send(ready.messages, waiters)
            await self._persist(ready)
            self._send(ready.messages_after_persist, waiters)
            if ready.entries:
                last = ready.entries[-1]
                self.core.persisted(last.index, last.term)
            if ready.snapshot is not None:
                self._install_snapshot(ready.snapshot)
            self._apply(ready.committed)
            self._serve_reads(ready)

    def _send(self, messages: list[Message], waiters: Waiters) -> None:
        assert self._transport is not None
        for message in messages:
            if isinstance(message, RESPONSE_TYPES):
                queue = waiters.get((message.dst, type(message)), collections.deque())
                while queue:
                    waiter = queue.popleft()
                    if not waiter.done():  # done = cancelled: the asker's deadline passed
                        waiter.set_result(message)
                        break
                # no waiter left: the asking RPC has already returned; to Raft, a lost message
                continue
            self._transport.send(message)

    async def _persist(self, ready: Ready) -> None:
        if not (ready.entries or ready.hard_state or ready.snapshot or ready.truncate_from is not None):
            return
        store = self._store
        assert store is not None

        def write() -> None:
            store.write(
                hard_state=ready.hard_state,
                truncate_from=ready.truncate_from,
                entries=ready.entries,
                snapshot=ready.snapshot,
            )

        if ready.messages:
            # The leader's appends were just queued: fsync on the worker thread (RocksDB releases the
            # GIL) so the senders transmit them meanwhile and the followers persist in parallel.
            await asyncio.get_running_loop().run_in_executor(self._io, write)
        else:
            # Nothing goes out before the fsync (a follower's ack waits for it): inline saves a thread
            # hop on the critical path. Requests arriving meanwhile wait in gRPC for the next iteration,
            # which persists them together (group commit).
            write()

    def _install_snapshot(self, snapshot: Snapshot) -> None:
        self._next_snapshot = None
        self._sm.restore(snapshot.data)
        self.applied_index = self._last_snapshot_index = snapshot.meta.last_index
        log_event(log, logging.INFO, "raft_snapshot_installed", index=self.applied_index)

    def _apply(self, committed: list[Entry]) -> None:
        for entry in committed:
            if entry.index <= self.applied_index:
                continue
            assert entry.index == self.applied_index + 1, f"apply {entry.index} after {self.applied_index}"
            if entry.kind is EntryKind.NORMAL:
                self._sm.apply(entry.index, entry.data)
            self.applied_index = entry.index
            for proposal in self._awaiting_commit.pop(entry.index, ()):
                if proposal.future.done():
                    continue
                if proposal.term == entry.term:
                    proposal.future.set_result(list(range(proposal.first, proposal.last + 1)))
                else:  # our entries were overwritten by a newer leader's (Raft §5.3)
                    proposal.future.set_exception(NotLeaderError(self.node_id, self.leader_id))

    def _serve_reads(self, ready: Ready) -> None:
        for state in ready.read_states:
            future = self._read_waiters.pop(state.request_id, None)
            if future is not None:
                self._apply_waiters.append((state.index, future))
        for request_id, leader_id in ready.rejected_reads:
            future = self._read_waiters.pop(request_id, None)
            if future is not None and not future.done():
                future.set_exception(NotLeaderError(self.node_id, leader_id))
        still_waiting = []
        for index, future in self._apply_waiters:
            if future.done():
                continue
            if self.applied_index >= index:
                future.set_result(index)
            else:
                still_waiting.append((index, future))
        self._apply_waiters = still_waiting

    async def _maybe_snapshot(self) -> None:
        """Every ``snapshot_every_entries`` applied entries, snapshot the state machine; persist and
        compact to the PREVIOUS snapshot. The log thus keeps at least one interval of entries, so a
        follower a little behind catches up from the log instead of receiving a whole snapshot."""
        index = self.applied_index
        if index - self._last_snapshot_index < self.config.snapshot_every_entries:
            return
        term = self.core.log.term_at(index)
        assert term is not None, f"node {self.node_id}: no term for applied index {index}"
        taken = Snapshot(SnapshotMeta(last_index=index, last_term=term), self._sm.snapshot())
        ready, self._next_snapshot = self._next_snapshot, taken
        self._last_snapshot_index = index
        if ready is None or ready.meta.last_index <= self.core.log.snapshot_meta.last_index:
            return  # nothing older to compact to (or the leader's snapshot already covers it)
        store = self._store
        assert store is not None
        last = ready.meta.last_index
        await asyncio.get_running_loop().run_in_executor(
            self._io, lambda: store.write(snapshot=ready, compact_through=last)
        )
        self.core.snapshot_taken(ready)
        log_event(log, logging.INFO, "raft_snapshot_written", index=last, bytes=len(ready.data))

    def _fail_everything(self, exc: errors.KafkaError) -> None:
        for _, future in self._inbox:
            if future is not None and not future.done():
                future.set_result(None)
        futures: list[asyncio.Future[Any]] = [p.future for ps in self._awaiting_commit.values() for p in ps]
        futures += [f for _, f in self._proposals] + self._reads + list(self._read_waiters.values())
        futures += [f for _, f in self._apply_waiters]
        for future in futures:
            if not future.done():
                future.set_exception(exc)
