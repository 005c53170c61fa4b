"""The sans-I/O Raft core: one node's protocol state, driven by ``step``, ``tick`` and ``propose``.

Inside ``raft/`` the Raft paper's words are used (term, index, commit index, leader, follower,
candidate, vote); Kafka's words are used everywhere else.

Theory of operation
-------------------
A ``RaftNode`` never does I/O, never reads a clock and never uses global randomness: the driver passes
``now_ms`` into every call and a seeded ``random.Random`` at construction. Every effect is gathered and
handed out by ``take_ready()`` as a ``Ready``, which the driver carries out in the documented order
(send ``messages``, persist, send ``messages_after_persist``, report ``persisted(...)``, apply
``committed``). The driver must finish one ``Ready`` before taking the next. ``next_deadline_ms()`` says
when ``tick`` has something to do.

Roles and legal transitions (``become_*`` methods)::

    FOLLOWER      --election timeout, pre_vote-->        PRE_CANDIDATE
    FOLLOWER      --election timeout / TimeoutNow-->     CANDIDATE
    PRE_CANDIDATE --majority of pre-votes-->             CANDIDATE
    PRE_CANDIDATE --leader of our term or higher term--> FOLLOWER
    CANDIDATE     --majority of votes-->                 LEADER
    CANDIDATE     --leader of our term or higher term--> FOLLOWER
    LEADER        --higher term, or CheckQuorum fails--> FOLLOWER

Observers are followers that never campaign, never vote and are never counted; the leader sends them
committed entries only. Voters are static (3 or 5 in production; 1 is allowed in tests).

Safety rules implemented here, with the Raft paper's sections:

* §5.2 one vote per term, persisted (``Ready.hard_state``) before the vote is sent
  (``messages_after_persist``); §5.4.1 votes only for an up-to-date log.
* §9.6 (thesis) PreVote: a pre-candidate asks with ``term + 1`` without changing its own term, so a
  node cut off from the quorum does not disrupt it when it returns. CheckQuorum: a leader that has
  not heard from a majority within an election timeout steps down; a node that heard from a leader
  within the minimum election timeout ignores (pre)votes unless they carry ``leadership_transfer``.
* §5.3 the AppendEntries consistency check, with the conflict-term back-off hint; pipelined appends
  with a bounded number in flight (see ``raft.progress``).
* §5.4.2 only entries of the leader's own term are committed by counting; a new leader appends a
  NOOP (§8). The leader counts its own log only up to what the driver reported persisted.
* §6.4 (thesis) ReadIndex: the read index is the commit index once the leader committed an entry of
  its term; it is released after a heartbeat round acknowledged by a majority.
* §3.10 (thesis) leadership transfer: the leader stops accepting proposals, brings the target up to
  date and sends TimeoutNow; the target campaigns at once.
* §7 snapshots: the user's snapshot compacts the log; a follower that is too far behind receives it
  as InstallSnapshot chunks, one outstanding at a time.

Not thread-safe: one driver task owns a node.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from raft.messages import (
    NO_NODE,
    AppendEntries,
    AppendEntriesResponse,
    Entry,
    EntryKind,
    HardState,
    InstallSnapshot,
    InstallSnapshotResponse,
    Message,
    NotLeader,
    ProposalAccepted,
    ReadState,
    Ready,
    RequestVote,
    RequestVoteResponse,
    Snapshot,
    SnapshotMeta,
    TimeoutNow,
)
from raft.progress import PeerState, Progress
from raft.raft_log import RaftLog
from raft.read_only import NO_READ_CONTEXT, ReadOnly

NO_DEADLINE = None  # next_deadline_ms() of a node with nothing scheduled (an observer)
STALL_HEARTBEATS = 2  # heartbeat intervals without progress before in-flight appends count as lost


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class RaftConfigError(ValueError):
    """A core configuration that cannot work; the message says what to change."""


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """One node's protocol settings (static membership: the same voters and observers on every node).

    ``election_timeout_*_ms``: a follower campaigns after a random timeout in [min, max) without a
    leader; min is also the CheckQuorum period and the lease. ``heartbeat_interval_ms`` must be well
    below min. ``max_inflight_appends`` bounds the pipeline per peer; ``max_entries_per_append`` and
    ``max_bytes_per_append`` bound one AppendEntries (one entry is always sent, however large);
    ``snapshot_chunk_bytes`` is the InstallSnapshot chunk size.
    """

    node_id: int
    voters: frozenset[int]
    observers: frozenset[int] = frozenset()
    election_timeout_min_ms: int = 150
    election_timeout_max_ms: int = 300
    heartbeat_interval_ms: int = 50
    max_inflight_appends: int = 64
    max_entries_per_append: int = 1024
    max_bytes_per_append: int = 1 << 20
    snapshot_chunk_bytes: int = 1 << 20
    pre_vote: bool = True
    check_quorum: bool = True

    def __post_init__(self) -> None:
        # Accept any iterable of ids (e.g. QuorumConfig.ids, a tuple) and keep frozensets.
        object.__setattr__(self, "voters", frozenset(self.voters))
        object.__setattr__(self, "observers", frozenset(self.observers))

    def validate(self) -> None:
        if self.node_id <= 0:
            raise RaftConfigError(f"node_id {self.node_id}: node ids are positive integers")
        if not self.voters or any(v <= 0 for v in self.voters):
            raise RaftConfigError(f"voters {sorted(self.voters)}: give at least one positive node id")
        if self.voters & self.observers:
            raise RaftConfigError(f"nodes {sorted(self.voters & self.observers)} are both voter and observer")
        if self.node_id not in self.voters | self.observers:
            raise RaftConfigError(
                f"node {self.node_id} is neither a voter {sorted(self.voters)} nor observer"
            )
        if not 0 < self.heartbeat_interval_ms < self.election_timeout_min_ms < self.election_timeout_max_ms:
            raise RaftConfigError(
                f"need 0 < heartbeat_interval_ms ({self.heartbeat_interval_ms}) < election_timeout_min_ms "
                f"({self.election_timeout_min_ms}) < election_timeout_max_ms ({self.election_timeout_max_ms})"
            )
        if min(self.max_inflight_appends, self.max_entries_per_append, self.snapshot_chunk_bytes) <= 0:
            raise RaftConfigError(
                "max_inflight_appends, max_entries_per_append, snapshot_chunk_bytes must be > 0"
            )

    @property
    def quorum(self) -> int:
        return len(self.voters) // 2 + 1


@dataclass(slots=True)
class _IncomingSnapshot:
    meta: SnapshotMeta
    data: bytearray


class RaftNode:
    """One Raft node's protocol state; see the module docstring for the rules and transitions."""

    def __init__(
        self,
        config: RaftConfig,
        rng: random.Random,
        *,
        hard_state: HardState | None = None,
        entries: list[Entry] | tuple[Entry, ...] = (),
        snapshot: Snapshot | None = None,
        now_ms: int = 0,
    ) -> None:
        """Start (or restart) from the recovered durable state: term/vote, stored entries, last snapshot."""
        config.validate()
        hard_state = hard_state or HardState()
        self.config = config
        self.id = config.node_id
        self._rng = rng
        self._now_ms = now_ms
        self._term = hard_state.term
        self._vote = hard_state.vote
        self._hard_state_dirty = False
        self.snapshot = snapshot  # the latest snapshot, sent to followers that are too far behind
        self.log = RaftLog(snapshot.meta if snapshot else SnapshotMeta(), list(entries))
        self._commit_index = self.log.snapshot_meta.last_index
        self._applied_index = self._commit_index
        self._role = Role.FOLLOWER
        self._leader_id = NO_NODE
        self._leader_heard_ms: int | None = None
        self._election_deadline_ms = 0
        self._heartbeat_deadline_ms = 0
        self._check_quorum_deadline_ms = 0
        self._votes: dict[int, bool] = {}
        self.progress: dict[int, Progress] = {}
        self._needs_broadcast = False
        self._reads = ReadOnly()
        self._transfer_target = NO_NODE
        self._transfer_deadline_ms = 0
        self._timeout_now_sent = False
        self._incoming_snapshot: _IncomingSnapshot | None = None
        self._install: Snapshot | None = None
        self._messages: list[Message] = []
        self._messages_after_persist: list[Message] = []
        self._read_states: list[ReadState] = []
        self._rejected_reads: list[tuple[int, int]] = []
        self._reset_election_deadline()

    # ---- properties ----------------------------------------------------------------------------

    @property
    def role(self) -> Role:
        return self._role

    @property
    def leader_id(self) -> int:
        return self._leader_id

    @property
    def term(self) -> int:
        return self._term

    @property
    def vote(self) -> int:
        return self._vote

    @property
    def commit_index(self) -> int:
        return self._commit_index

    @property
    def applied_index(self) -> int:
        return self._applied_index

    @property
    def last_index(self) -> int:
        return self.log.last_index

    @property
    def is_leader(self) -> bool:
        return self._role is Role.LEADER

    def term_at(self, index: int) -> int | None:
        """The term of the entry at ``index`` (None when compacted away or beyond the end)."""
        return self.log.term_at(index)

    @property
    def is_voter(self) -> bool:
        return self.id in self.config.voters

    @property
    def transfer_target(self) -> int:
        return self._transfer_target

    def _other_voters(self) -> list[int]:
        return sorted(v for v in self.config.voters if v != self.id)

    def _peers(self) -> list[int]:
        return sorted((self.config.voters | self.config.observers) - {self.id})

    # ---- public inputs -------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Advance the clock: campaign on election timeout; a leader heartbeats and checks its quorum."""
        self._advance(now_ms)
        if self._role is Role.LEADER:
            self._tick_leader()
        elif self.is_voter and self._now_ms >= self._election_deadline_ms:
            self._campaign(transfer=False)

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` next has work (the driver may tick more often; never later)."""
        if self._role is Role.LEADER:
            deadlines = [self._heartbeat_deadline_ms]
            if self.config.check_quorum:
                deadlines.append(self._check_quorum_deadline_ms)
            if self._transfer_target != NO_NODE:
                deadlines.append(self._transfer_deadline_ms)
            return min(deadlines)
        return self._election_deadline_ms if self.is_voter else NO_DEADLINE

    def propose(self, data_list: list[bytes], now_ms: int) -> ProposalAccepted | NotLeader:
        """Append user entries (one batch) if leader; followers answer with the leader to retry at.

        An empty list appends nothing (``last_index == first_index - 1``)."""
        self._advance(now_ms)
        if self._role is not Role.LEADER:
            return NotLeader(self._leader_id)
        if self._transfer_target != NO_NODE:
            return NotLeader(self._transfer_target)
        first = self.log.last_index + 1
        self._append_as_leader([Entry(self._term, first + i, bytes(d)) for i, d in enumerate(data_list)])
        return ProposalAccepted(self._term, first, self.log.last_index)

    def read_index(self, request_id: int, now_ms: int) -> NotLeader | None:
        """Start a linearizable read; its ``ReadState`` arrives in a later ``Ready`` (None = accepted)."""
        self._advance(now_ms)
        if self._role is not Role.LEADER:
            return NotLeader(self._leader_id)
        self._reads.add(request_id, self.id)
        if self._committed_in_term():
            self._read_states += self._reads.start_waiting(self._commit_index, self.config.quorum)
        return None

    def transfer_leadership(self, target: int, now_ms: int) -> bool:
        """Hand leadership to voter ``target`` (thesis §3.10); False when not leader or target invalid."""
        self._advance(now_ms)
        if self._role is not Role.LEADER or target == self.id or target not in self.config.voters:
            return False
        self._transfer_target = target
        self._transfer_deadline_ms = self._now_ms + self.config.election_timeout_min_ms
        self._timeout_now_sent = False
        self._maybe_send_timeout_now()
        if not self._timeout_now_sent:
            self._maybe_send_append(target)
        return True

    def persisted(self, last_index: int, last_term: int) -> None:
        """The driver made entries up to ``last_index`` (of ``last_term``) durable."""
        if self.log.mark_persisted(last_index, last_term) and self._role is Role.LEADER:
            self._maybe_commit()

    def snapshot_taken(self, snapshot: Snapshot) -> None:
        """The state machine snapshotted at ``snapshot.meta.last_index`` (<= applied): compact the log."""
        meta = snapshot.meta
        assert meta.last_index <= self._applied_index, (
            f"snapshot at {meta.last_index} beyond applied index {self._applied_index}"
        )
        if meta.last_index <= self.log.snapshot_meta.last_index:
            return
        self.log.compact(meta)
        self.snapshot = snapshot

    compact = snapshot_taken  # the name the driver uses

    def step(self, message: Message, now_ms: int) -> None:
        """Handle one message from a peer; bad or stale messages are ignored, never raised on."""
        self._advance(now_ms)
        if message.dst != self.id or message.src not in self.config.voters | self.config.observers:
            return
        if message.term > self._term:
            if not self._step_higher_term(message):
                return
        elif message.term < self._term:
            self._step_lower_term(message)
            return
        if isinstance(message, RequestVote):
            self._handle_request_vote(message)
        elif self._role is Role.LEADER:
            self._step_leader(message)
        elif self._role in (Role.PRE_CANDIDATE, Role.CANDIDATE):
            self._step_candidate(message)
        else:
            self._step_follower(message)

    # ---- the Ready -----------------------------------------------------------------------------

    def has_ready(self) -> bool:
        return bool(
            self._hard_state_dirty
            or self._messages
            or self._messages_after_persist
            or self.log.unsent_from <= self.log.last_index
            or self.log.pending_truncate_from is not None
            or self._install
            or self._commit_index > self._applied_index
            or self._read_states
            or self._rejected_reads
            or (self._role is Role.LEADER and (self._needs_broadcast or self._reads.heartbeat_needed))
        )

    def take_ready(self) -> Ready:
        """Everything to do since the last call, in the order documented on ``Ready``."""
        if self._role is Role.LEADER:
            if self._needs_broadcast:
                self._broadcast_append()
            if self._reads.heartbeat_needed:
                self._broadcast_heartbeat()
        truncate, entries = self.log.take_unsent()
        ready = Ready(
            hard_state=HardState(self._term, self._vote) if self._hard_state_dirty else None,
            truncate_from=truncate,
            entries=entries,
            snapshot=self._install,
            messages=self._messages,
            messages_after_persist=self._messages_after_persist,
            committed=self._take_committed(),
            read_states=self._read_states,
            rejected_reads=self._rejected_reads,
        )
        self._hard_state_dirty = False
        self._install = None
        self._messages, self._messages_after_persist = [], []
        self._read_states, self._rejected_reads = [], []
        return ready

    def _take_committed(self) -> list[Entry]:
        lo, hi = self._applied_index + 1, self._commit_index
        self._applied_index = max(self._applied_index, hi)
        if lo > hi:
            return []
        return self.log.slice(lo, hi, hi - lo + 1, float("inf"))  # type: ignore[arg-type]

    # ---- role transitions ----------------------------------------------------------------------

    def become_follower(self, term: int, leader_id: int) -> None:
        """Follow ``leader_id`` (or nobody) in ``term``; a higher term clears the vote."""
        if term > self._term:
            self._term, self._vote = term, NO_NODE
            self._hard_state_dirty = True
        was_leader = self._role is Role.LEADER
        self._role = Role.FOLLOWER
        self._leader_id = leader_id
        if leader_id != NO_NODE:
            self._leader_heard_ms = self._now_ms
        if was_leader:
            self._stop_leading()
        self._reset_election_deadline()

    def become_pre_candidate(self) -> None:
        """Ask for pre-votes at ``term + 1`` without changing term or vote (thesis §9.6)."""
        self._role = Role.PRE_CANDIDATE
        self._leader_id = NO_NODE
        self._votes = {self.id: True}
        self._reset_election_deadline()
        for peer in self._other_voters():
            self._send(self._vote_request(peer, self._term + 1, pre_vote=True, transfer=False))
        if self._won(self._votes):
            self.become_candidate(transfer=False)

    def become_candidate(self, transfer: bool) -> None:
        """Raft §5.2: a new term, a vote for ourselves (persisted before the requests go out)."""
        self._role = Role.CANDIDATE
        self._term += 1
        self._vote = self.id
        self._hard_state_dirty = True
        self._leader_id = NO_NODE
        self._votes = {self.id: True}
        self._reset_election_deadline()
        for peer in self._other_voters():
            self._send(self._vote_request(peer, self._term, pre_vote=False, transfer=transfer))
        if self._won(self._votes):
            self.become_leader()

    def become_leader(self) -> None:
        """Raft §5.2/§8: take over, probe every peer, append a NOOP so earlier entries can commit."""
        assert self._role is Role.CANDIDATE, f"node {self.id} becomes leader from {self._role}"
        self._role = Role.LEADER
        self._leader_id = self.id
        next_index = self.log.last_index + 1
        self.progress = {p: Progress(next_index=next_index, progress_ms=self._now_ms) for p in self._peers()}
        self._heartbeat_deadline_ms = self._now_ms + self.config.heartbeat_interval_ms
        self._check_quorum_deadline_ms = self._now_ms + self.config.election_timeout_min_ms
        self._append_as_leader([Entry(self._term, next_index, b"", EntryKind.NOOP)])

    def _stop_leading(self) -> None:
        self.progress = {}
        self._needs_broadcast = False
        self._transfer_target = NO_NODE
        self._rejected_reads += [(request_id, self._leader_id) for request_id in self._reads.fail_all()]

    def _campaign(self, transfer: bool) -> None:
        if self.config.pre_vote and not transfer:
            self.become_pre_candidate()
        else:
            self.become_candidate(transfer)

    # ---- stepping by term ----------------------------------------------------------------------

    def _step_higher_term(self, m: Message) -> bool:
        """A message from a higher term; returns False when it must be dropped."""
        if isinstance(m, RequestVote):
            if self._in_lease() and not m.leadership_transfer:
                # CheckQuorum lease: a live leader exists; do not let a disruptive node raise the term.
                self._send(
                    RequestVoteResponse(self.id, m.src, self._term, granted=False, pre_vote=m.pre_vote)
                )
                return False
            if m.pre_vote:
                return True  # a pre-vote never changes our term
            self.become_follower(m.term, NO_NODE)
            return True
        if isinstance(m, RequestVoteResponse) and m.pre_vote and m.granted:
            return True  # carries the term we would campaign with
        leader = m.src if isinstance(m, (AppendEntries, InstallSnapshot, TimeoutNow)) else NO_NODE
        self.become_follower(m.term, leader)
        return True

    def _step_lower_term(self, m: Message) -> None:
        """A stale message: tell a stale leader or pre-candidate our term so it steps down; drop the rest."""
        if isinstance(m, (AppendEntries, InstallSnapshot)):
            self._send(AppendEntriesResponse(self.id, m.src, self._term, success=False, match_index=0))
        elif isinstance(m, RequestVote):  # §5.1: the stale candidate learns our term
            self._send(RequestVoteResponse(self.id, m.src, self._term, granted=False, pre_vote=m.pre_vote))

    def _in_lease(self) -> bool:
        if not self.config.check_quorum:
            return False
        if self._role is Role.LEADER:
            return True
        return (
            self._leader_id != NO_NODE
            and self._leader_heard_ms is not None
            and self._now_ms - self._leader_heard_ms < self.config.election_timeout_min_ms
        )

    # ---- votes ---------------------------------------------------------------------------------

    def _vote_request(self, peer: int, term: int, pre_vote: bool, transfer: bool) -> RequestVote:
        return RequestVote(
            self.id, peer, term, self.log.last_index, self.log.last_term,
            pre_vote=pre_vote, leadership_transfer=transfer,
        )  # fmt: skip

    def _handle_request_vote(self, m: RequestVote) -> None:
        """Raft §5.2/§5.4.1 (and thesis §9.6 for pre-votes): grant at most one vote per term."""
        up_to_date = self.log.is_up_to_date(m.last_log_index, m.last_log_term)
        if m.pre_vote:
            grant = self.is_voter and m.term > self._term and up_to_date
        else:
            can_vote = self._vote == m.src or (self._vote == NO_NODE and self._leader_id == NO_NODE)
            grant = self.is_voter and m.term == self._term and can_vote and up_to_date
        if grant and not m.pre_vote:
            self._vote = m.src
            self._hard_state_dirty = True
            self._reset_election_deadline()
        term = m.term if grant and m.pre_vote else self._term
        self._send(RequestVoteResponse(self.id, m.src, term, granted=grant, pre_vote=m.pre_vote))

    def _step_candidate(self, m: Message) -> None:
        if isinstance(m, (AppendEntries, InstallSnapshot)):
            self.become_follower(self._term, m.src)  # a leader of our term exists (§5.2)
            self._step_follower(m)
        elif isinstance(m, RequestVoteResponse):
            self._handle_vote_response(m)

    def _handle_vote_response(self, m: RequestVoteResponse) -> None:
        pre = self._role is Role.PRE_CANDIDATE
        if m.pre_vote != pre or (pre and m.granted and m.term != self._term + 1):
            return  # an answer to an earlier round
        self._votes.setdefault(m.src, m.granted)
        if self._won(self._votes):
            if pre:
                self.become_candidate(transfer=False)
            else:
                self.become_leader()
        elif sum(1 for g in self._votes.values() if not g) >= self.config.quorum:
            self.become_follower(self._term, NO_NODE)

    def _won(self, votes: dict[int, bool]) -> bool:
        return sum(1 for v, g in votes.items() if g and v in self.config.voters) >= self.config.quorum

    # ---- follower ------------------------------------------------------------------------------

    def _step_follower(self, m: Message) -> None:
        if isinstance(m, AppendEntries):
            self._heard_from_leader(m.src)
            self._handle_append_entries(m)
        elif isinstance(m, InstallSnapshot):
            self._heard_from_leader(m.src)
            self._handle_install_snapshot(m)
        elif isinstance(m, TimeoutNow) and self.is_voter:
            self._campaign(transfer=True)  # thesis §3.10: skip pre-vote and the timer

    def _heard_from_leader(self, leader: int) -> None:
        self._leader_id = leader
        self._leader_heard_ms = self._now_ms
        self._reset_election_deadline()

    def _handle_append_entries(self, m: AppendEntries) -> None:
        """Raft §5.3: the consistency check at ``prev_log_index``; on a conflict, a back-off hint."""
        prev, entries = m.prev_log_index, list(m.entries)
        prev_term: int | None = m.prev_log_term
        if prev < self._commit_index:
            # Everything up to our commit index matches the leader's log (Leader Completeness).
            entries = [e for e in entries if e.index > self._commit_index]
            prev, prev_term = self._commit_index, self.log.term_at(self._commit_index)
        local_term = self.log.term_at(prev)
        if local_term != prev_term:
            self._reject_append(m, prev, local_term)
            return
        self._append_as_follower(entries)
        last_new = prev + len(entries)
        self._commit_to(min(m.leader_commit, last_new))
        self._send(
            AppendEntriesResponse(self.id, m.src, self._term, True, last_new, read_context=m.read_context)
        )

    def _reject_append(self, m: AppendEntries, prev: int, local_term: int | None) -> None:
        if local_term is None:  # our log is too short
            conflict_term, conflict_index = 0, self.log.last_index + 1
        else:
            conflict_term = local_term
            conflict_index = max(self.log.first_index_of_term_before(prev), self._commit_index + 1)
        self._send(
            AppendEntriesResponse(
                self.id, m.src, self._term, False, 0, conflict_term, conflict_index, m.read_context
            )
        )

    def _append_as_follower(self, entries: list[Entry]) -> None:
        for i, entry in enumerate(entries):
            local = self.log.term_at(entry.index)
            if local == entry.term:
                continue
            if local is not None:
                assert entry.index > self._commit_index, (
                    f"node {self.id}: leader overwrites committed index {entry.index} "
                    f"(commit {self._commit_index}, local term {local}, new term {entry.term})"
                )
                self.log.truncate_from(entry.index)
            self.log.append(entries[i:])
            return

    def _handle_install_snapshot(self, m: InstallSnapshot) -> None:
        """Raft §7: gather chunks in order; install when done unless our log already covers it."""
        if m.meta.last_index <= self._commit_index:
            self._snapshot_response(m, m.offset + len(m.chunk), done=True)
            return
        incoming = self._incoming_snapshot
        if m.offset == 0:
            incoming = self._incoming_snapshot = _IncomingSnapshot(m.meta, bytearray())
        if incoming is None or incoming.meta != m.meta or m.offset != len(incoming.data):
            expected = len(incoming.data) if incoming is not None and incoming.meta == m.meta else 0
            self._snapshot_response(m, expected, done=False)
            return
        incoming.data += m.chunk
        if not m.done:
            self._snapshot_response(m, len(incoming.data), done=False)
            return
        self._incoming_snapshot = None
        self._install_snapshot(Snapshot(m.meta, bytes(incoming.data)))
        self._snapshot_response(m, len(incoming.data), done=True)

    def _install_snapshot(self, snapshot: Snapshot) -> None:
        meta = snapshot.meta
        if self.log.term_at(meta.last_index) == meta.last_term:
            self._commit_to(meta.last_index)  # our log already holds it: just commit (etcd does the same)
            return
        self.log.restore(meta)
        self.snapshot = self._install = snapshot
        self._commit_index = self._applied_index = meta.last_index

    def _snapshot_response(self, m: InstallSnapshot, next_offset: int, done: bool) -> None:
        self._send(InstallSnapshotResponse(self.id, m.src, self._term, m.meta, next_offset, done))

    def _commit_to(self, index: int) -> None:
        if index > self._commit_index:
            self._commit_index = index
            if self._role is Role.LEADER:
                self._on_leader_commit()

    # ---- leader --------------------------------------------------------------------------------

    def _step_leader(self, m: Message) -> None:
        pr = self.progress.get(m.src)
        if pr is None:
            return
        if isinstance(m, AppendEntriesResponse):
            pr.recent_active = True
            self._handle_append_response(m, pr)
        elif isinstance(m, InstallSnapshotResponse):
            pr.recent_active = True
            self._handle_snapshot_response(m, pr)

    def _append_as_leader(self, entries: list[Entry]) -> None:
        self.log.append(entries)
        self._needs_broadcast = True
        self._maybe_commit()  # a single voter commits once its own log is persisted

    def _handle_append_response(self, m: AppendEntriesResponse, pr: Progress) -> None:
        if m.read_context and m.src in self.config.voters:
            self._read_states += self._reads.ack(m.src, m.read_context, self.config.quorum)
        if not m.success:
            self._handle_append_reject(m, pr)
            return
        if pr.state is PeerState.SNAPSHOT:
            return
        advanced = pr.maybe_update(m.match_index)
        if pr.state is PeerState.PROBE:
            pr.become_replicate()
        if advanced or not pr.inflight:
            pr.progress_ms = self._now_ms
        if advanced:
            self._maybe_commit()
            self._maybe_send_timeout_now()
        self._maybe_send_append(m.src)

    def _handle_append_reject(self, m: AppendEntriesResponse, pr: Progress) -> None:
        """Raft §5.3 fast back-off: skip the follower's whole conflicting term at once."""
        if pr.state is PeerState.SNAPSHOT:
            return
        next_index = m.conflict_index
        if m.conflict_term:
            last_of_term = self.log.last_index_of_term(m.conflict_term)
            if last_of_term is not None:
                next_index = last_of_term + 1
        if pr.maybe_back_off(max(1, next_index)):
            self._maybe_send_append(m.src)

    def _maybe_commit(self) -> None:
        """Raft §5.4.2: commit the quorum's match index only if it holds an entry of our own term."""
        if self._role is not Role.LEADER:
            return
        matches = sorted(
            (self.log.persisted_index if v == self.id else self.progress[v].match_index)
            for v in self.config.voters
        )
        candidate = matches[len(matches) - self.config.quorum]
        if candidate > self._commit_index and self.log.term_at(candidate) == self._term:
            self._commit_to(candidate)

    def _on_leader_commit(self) -> None:
        if self.config.observers:
            self._needs_broadcast = True  # observers receive entries only once committed
        if self._committed_in_term():
            self._read_states += self._reads.start_waiting(self._commit_index, self.config.quorum)

    def _committed_in_term(self) -> bool:
        return self.log.term_at(self._commit_index) == self._term

    def _tick_leader(self) -> None:
        now = self._now_ms
        if self.config.check_quorum and now >= self._check_quorum_deadline_ms:
            self._check_quorum_deadline_ms = now + self.config.election_timeout_min_ms
            if not self._quorum_active():
                self.become_follower(self._term, NO_NODE)
                return
        if self._transfer_target != NO_NODE and now >= self._transfer_deadline_ms:
            self._transfer_target = NO_NODE  # the target did not take over in time: keep leading
        if now >= self._heartbeat_deadline_ms:
            self._heartbeat_deadline_ms = now + self.config.heartbeat_interval_ms
            self._retransmit_stalled()
            self._broadcast_heartbeat()

    def _quorum_active(self) -> bool:
        """CheckQuorum: did a majority (counting ourselves) answer since the last check? Resets the flags."""
        active = 1
        for peer, pr in self.progress.items():
            if peer in self.config.voters and pr.recent_active:
                active += 1
            pr.recent_active = False
        return active >= self.config.quorum

    def _retransmit_stalled(self) -> None:
        """Appends or chunks lost in the network: no progress for ``STALL_HEARTBEATS`` heartbeat intervals
        while something is outstanding means resend (from the match index). A probe is resent every
        heartbeat. Waiting more than one interval keeps a slow (not lossy) peer from getting duplicates."""
        stall_ms = STALL_HEARTBEATS * self.config.heartbeat_interval_ms
        for peer, pr in self.progress.items():
            stalled = self._now_ms - pr.progress_ms >= stall_ms
            if pr.state is PeerState.REPLICATE and pr.inflight and stalled:
                pr.become_probe()
                pr.progress_ms = self._now_ms
            elif pr.state is PeerState.PROBE:
                pr.probe_sent = False
            elif pr.state is PeerState.SNAPSHOT and pr.snapshot_sent and stalled:
                pr.snapshot_sent = False
                pr.progress_ms = self._now_ms
            self._maybe_send_append(peer)

    def _broadcast_heartbeat(self) -> None:
        """An empty AppendEntries to every peer at its match index (so it always passes the consistency
        check unless the peer lost its log); it carries the newest ReadIndex context. When the match
        index is compacted away the snapshot's last index stands in for it."""
        self._reads.heartbeat_needed = False
        snapshot = self.log.snapshot_meta
        for peer, pr in self.progress.items():
            if pr.state is PeerState.SNAPSHOT:
                continue  # the chunks keep the peer following us
            prev = max(pr.match_index, snapshot.last_index)
            prev_term = self.log.term_at(prev)
            assert prev_term is not None, (
                f"no term at {prev} (snapshot {snapshot}, last {self.log.last_index})"
            )
            context = self._reads.last_context if peer in self.config.voters else NO_READ_CONTEXT
            commit = min(self._commit_index, prev)
            self._send(AppendEntries(self.id, peer, self._term, prev, prev_term, (), commit, context))

    def _broadcast_append(self) -> None:
        self._needs_broadcast = False
        for peer in self.progress:
            self._maybe_send_append(peer)

    def _maybe_send_append(self, peer: int) -> None:
        """Send what ``peer`` lacks, as long as its flow control allows (one probe, or a full pipeline)."""
        pr = self.progress[peer]
        limit = self.log.last_index if peer in self.config.voters else self._commit_index
        while True:
            if pr.state is PeerState.SNAPSHOT or pr.next_index <= self.log.snapshot_meta.last_index:
                self._maybe_send_snapshot_chunk(peer, pr)
                return
            if pr.is_paused(self.config.max_inflight_appends):
                return
            entries = self.log.slice(
                pr.next_index, limit, self.config.max_entries_per_append, self.config.max_bytes_per_append
            )
            if not entries and pr.state is PeerState.REPLICATE:
                return
            prev = pr.next_index - 1
            prev_term = self.log.term_at(prev)
            assert prev_term is not None, (
                f"peer {peer}: no term at prev {prev} (first {self.log.first_index})"
            )
            self._send(
                AppendEntries(self.id, peer, self._term, prev, prev_term, tuple(entries), self._commit_index)
            )
            pr.sent_append(prev + len(entries), len(entries))
            if not entries:
                return

    def _maybe_send_snapshot_chunk(self, peer: int, pr: Progress) -> None:
        snapshot = self.snapshot
        assert snapshot is not None, f"peer {peer} needs index {pr.next_index} but no snapshot exists"
        if pr.state is not PeerState.SNAPSHOT or pr.snapshot_meta != snapshot.meta:
            pr.become_snapshot(snapshot.meta)
        if pr.snapshot_sent:
            return
        offset = pr.snapshot_offset
        chunk = snapshot.data[offset : offset + self.config.snapshot_chunk_bytes]
        done = offset + len(chunk) >= len(snapshot.data)
        self._send(InstallSnapshot(self.id, peer, self._term, snapshot.meta, offset, chunk, done))
        pr.snapshot_sent = True

    def _handle_snapshot_response(self, m: InstallSnapshotResponse, pr: Progress) -> None:
        if pr.state is not PeerState.SNAPSHOT or m.meta != pr.snapshot_meta:
            return  # an answer about an older transfer
        if m.done and m.success:
            pr.maybe_update(m.meta.last_index)
            pr.become_probe()
            self._maybe_commit()
        elif not m.success:
            pr.become_probe()
        else:
            pr.snapshot_offset = min(m.next_offset, len(self.snapshot.data) if self.snapshot else 0)
            pr.snapshot_sent = False
            pr.progress_ms = self._now_ms
        self._maybe_send_append(m.src)

    def _maybe_send_timeout_now(self) -> None:
        target = self._transfer_target
        if target == NO_NODE or self._timeout_now_sent:
            return
        if self.progress[target].match_index == self.log.last_index:
            self._send(TimeoutNow(self.id, target, self._term))
            self._timeout_now_sent = True

    # ---- helpers -------------------------------------------------------------------------------

    def _send(self, m: Message) -> None:
        """Leader traffic and pre-votes promise nothing durable; everything else waits for the persist."""
        immediate = isinstance(m, (AppendEntries, InstallSnapshot, TimeoutNow)) or (
            isinstance(m, (RequestVote, RequestVoteResponse)) and m.pre_vote
        )
        if isinstance(m, InstallSnapshotResponse) and not m.done:
            immediate = True
        (self._messages if immediate else self._messages_after_persist).append(m)

    def _advance(self, now_ms: int) -> None:
        self._now_ms = max(self._now_ms, now_ms)

    def _reset_election_deadline(self) -> None:
        lo, hi = self.config.election_timeout_min_ms, self.config.election_timeout_max_ms
        self._election_deadline_ms = self._now_ms + self._rng.randrange(lo, hi)

    def invariants(self) -> None:
        """Assert the core's own invariants (run after every simulated event and in unit tests)."""
        self.log.invariants()
        snap = self.log.snapshot_meta.last_index
        assert snap <= self._applied_index <= self._commit_index <= self.log.last_index, (
            f"node {self.id}: snapshot {snap} applied {self._applied_index} "
            f"commit {self._commit_index} last {self.log.last_index}"
        )
        assert self.log.last_term <= self._term, (
            f"node {self.id}: log term {self.log.last_term} > {self._term}"
        )
        if self._role in (Role.LEADER, Role.CANDIDATE):
            assert self._vote == self.id, (
                f"node {self.id} is {self._role} in {self._term} but voted {self._vote}"
            )
        if self._role is Role.LEADER:
            assert self._leader_id == self.id, f"leader {self.id} names {self._leader_id} as leader"
            for peer, pr in self.progress.items():
                pr.invariants(peer)
                assert pr.match_index <= self.log.last_index, (
                    f"peer {peer} match {pr.match_index} beyond leader last {self.log.last_index}"
                )
        else:
            assert not self.progress and not self._reads, f"non-leader {self.id} keeps leader state"
        if not self.is_voter:
            assert self._role is Role.FOLLOWER, f"observer {self.id} is {self._role}"


# Names the driver was written against.
RaftCore = RaftNode
CoreConfig = RaftConfig
