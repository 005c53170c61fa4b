"""The Raft core's vocabulary: log entries, durable state, messages and the ``Ready`` batch of effects.

Inside ``raft/`` the Raft paper's words are used (term, index, commit index, leader, follower,
candidate, vote); Kafka's words are used everywhere else. These are plain frozen dataclasses: the
core, the simulator and the store use them; only ``raft.transport`` converts them to and from
protobuf at the gRPC edge.

Node ids are positive integers; ``NO_NODE`` (0) means "nobody" (no vote, no known leader).
Index 0 with term 0 is the empty log's sentinel: the first real entry has index 1.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

NO_NODE = 0


class EntryKind(enum.IntEnum):
    NORMAL = 0  # an opaque user command
    NOOP = 1  # the entry a new leader appends in its own term (Raft §8) so it can commit earlier ones


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    data: bytes = b""
    kind: EntryKind = EntryKind.NORMAL


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be on disk before the node answers: current term and vote (Raft Figure 2)."""

    term: int = 0
    vote: int = NO_NODE


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    """The state-machine snapshot covers every entry up to and including ``last_index``."""

    last_index: int = 0
    last_term: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    meta: SnapshotMeta
    data: bytes


# ---- messages (every message has src, dst, term) -------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestVote:
    src: int
    dst: int
    term: int  # for a pre-vote: the term the candidate *would* use (current + 1); nobody persists it
    last_log_index: int
    last_log_term: int
    pre_vote: bool = False
    leadership_transfer: bool = False  # sent after TimeoutNow: voters ignore their leader lease


@dataclass(frozen=True, slots=True)
class RequestVoteResponse:
    src: int
    dst: int
    term: int
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class AppendEntries:
    src: int
    dst: int
    term: int
    prev_log_index: int
    prev_log_term: int
    entries: tuple[Entry, ...]
    leader_commit: int
    read_context: int = 0  # ReadIndex round the leader is confirming (0 = none)


@dataclass(frozen=True, slots=True)
class AppendEntriesResponse:
    src: int
    dst: int
    term: int
    success: bool
    match_index: int  # on success: the last index known to match the leader's log
    # On failure, the fast back-off hint (Raft §5.3 "optimization"): the follower's conflicting
    # term (0 when its log is too short) and the first index it holds of that term (or its log length + 1).
    conflict_term: int = 0
    conflict_index: int = 0
    read_context: int = 0


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    src: int
    dst: int
    term: int
    meta: SnapshotMeta
    offset: int  # byte offset of this chunk in the snapshot
    chunk: bytes
    done: bool


@dataclass(frozen=True, slots=True)
class InstallSnapshotResponse:
    src: int
    dst: int
    term: int
    meta: SnapshotMeta
    next_offset: int  # bytes received so far (the next chunk to send); == size when done
    done: bool
    success: bool = True


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer (Raft thesis §3.10): the target starts an election at once."""

    src: int
    dst: int
    term: int


Message = (
    RequestVote
    | RequestVoteResponse
    | AppendEntries
    | AppendEntriesResponse
    | InstallSnapshot
    | InstallSnapshotResponse
    | TimeoutNow
)


# ---- effects ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read may be served once the local state machine has applied ``index``."""

    request_id: int
    index: int


@dataclass(slots=True)
class Ready:
    """Effects gathered by the core since the last ``take_ready()``, to be carried out IN THIS ORDER:

    1. send ``messages`` (safe before persisting: e.g. the leader's AppendEntries);
    2. persist: ``truncate_from`` (drop entries with index >= it), then ``entries``, then
       ``hard_state``, then ``snapshot`` — one synced write (group commit);
    3. send ``messages_after_persist`` (votes and append acknowledgements promise durability);
    4. report ``persisted(last_index, last_term)`` back to the core when ``entries`` were written;
    5. apply ``committed`` entries to the state machine, in order; serve ``read_states``.

    A ``snapshot`` (received from the leader) replaces the state machine: restore it before applying
    ``committed`` (which then starts after ``snapshot.meta.last_index``). Finish one Ready before
    taking the next: an acknowledgement in a later Ready may rely on this one being durable.
    """

    hard_state: HardState | None = None
    truncate_from: int | None = None
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None  # a snapshot received from the leader, to install and persist
    messages: list[Message] = field(default_factory=list)
    messages_after_persist: list[Message] = field(default_factory=list)
    committed: list[Entry] = field(default_factory=list)
    read_states: list[ReadState] = field(default_factory=list)
    # Proposals the core could not accept (not leader, or transferring): request ids with the
    # known leader (NO_NODE when unknown) so the driver can answer NOT_LEADER with a hint.
    rejected_proposals: list[tuple[int, int]] = field(default_factory=list)
    # ReadIndex requests that failed because this node stopped being leader before confirming them:
    # (request id, known leader or NO_NODE). Added by the core (reads are answered here, not in propose()).
    rejected_reads: list[tuple[int, int]] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (
            self.hard_state
            or self.truncate_from is not None
            or self.entries
            or self.snapshot
            or self.messages
            or self.messages_after_persist
            or self.committed
            or self.read_states
            or self.rejected_proposals
            or self.rejected_reads
        )


# ---- answers to propose() / read_index() / transfer_leadership() ---------------------------------


@dataclass(frozen=True, slots=True)
class ProposalAccepted:
    """The leader appended the proposal at ``first_index..last_index`` in ``term``.

    The proposal succeeded only if the entry committed at ``first_index`` later has this ``term``:
    a leader that loses its term may see its uncommitted entries overwritten (Raft §5.3).
    """

    term: int
    first_index: int
    last_index: int


@dataclass(frozen=True, slots=True)
class NotLeader:
    """This node cannot accept the request; ``leader_hint`` is the node to retry at (NO_NODE if unknown)."""

    leader_hint: int = NO_NODE
