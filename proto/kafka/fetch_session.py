"""Incremental fetch sessions (KIP-227): the leader's ``FetchSessionCache`` and the follower's
``FetchSessionHandler``. Pure: no I/O, no clock (callers pass ``now_ms``), an injected seeded
``random.Random`` for session ids. Not thread-safe: one event loop owns each.

Theory of operation. A fetch request names a session by ``(session_id, session_epoch)``:

    (0, -1)  FINAL_EPOCH, no session: a full request, answered in full (what librdkafka sends)
    (0,  0)  INITIAL_EPOCH: a full request that opens a session; the answer carries the new id
    (X, -1)  closes session X; full and sessionless from then on
    (X,  0)  closes session X and opens a new one (a follower that lost track of X, e.g. after a
             dropped connection)
    (X,  N)  N >= 1: an incremental request in session X. It lists only the partitions whose fetch
             state changed since the last request (new ones, a new fetch offset or leader epoch) and
             ``forgotten_topics_data`` for partitions that leave (v13+: named by the topic id the
             follower sent them with, which is how the session forgets them — the topic may be
             deleted by then, its id unknown to both sides' metadata); every other partition of the session
             is fetched again with its cached state. N must be the epoch the leader expects (one more
             than the last): else INVALID_FETCH_SESSION_EPOCH; an unknown X, or one opened by another
             replica: FETCH_SESSION_ID_NOT_FOUND. Either error answers no partition, and the follower
             starts over with a full request.

An incremental answer carries only the partitions with something new for the follower (Kafka's
``CachedPartition.maybeUpdateResponseData``): records, an error, a diverging epoch, or a high watermark
or log start offset other than the last one sent in this session. So a follower of many idle
partitions sends and receives a few bytes per round trip, and the leader still records the follower's
fetch offset of every partition in the session (the ISR's caught-up time needs it).

The cache holds at most ``max_sessions`` sessions (Kafka's ``max.incremental.fetch.session.cache.slots``);
opening one more evicts the least recently used. An evicted session's next incremental request gets
FETCH_SESSION_ID_NOT_FOUND, which costs that follower one full request.

The follower's handler mirrors the leader's state: it remembers what it sent in the session (the fetch
state per partition) and builds the next request as the difference; a partition answered with an error
is listed again in the next request (``relist``), since the leader may not have taken it into the
session. Any failure of a request
(``reset``) throws that state away: the next request is ``(X, 0)``, a full one.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from proto.errors import ErrorCode
from proto.kafka_types import NO_OFFSET, TopicPartition

NO_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
SESSION_ID_MAX = (1 << 31) - 1
MAX_SESSIONS_DEFAULT = 1000  # Kafka's max.incremental.fetch.session.cache.slots



@dataclass(frozen=True, slots=True)
class PartitionFetchRequest:
    """What a fetch asks of one partition (the fields a session caches between requests)."""

    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    partition_max_bytes: int
    topic_id: str = ""


# The state ``relist`` records as sent: no real request equals it (offsets and sizes are >= 0).
_RELIST = PartitionFetchRequest(-1, -1, -1, -1)


@dataclass(frozen=True, slots=True)
class SentPartitionState:
    """What the leader last answered for a partition in a session."""

    high_watermark: int = NO_OFFSET
    log_start_offset: int = NO_OFFSET


@dataclass(frozen=True, slots=True)
class SessionContext:
    """The leader's view of one request: which partitions to fetch and how to answer."""

    error: ErrorCode
    message: str
    session_id: int  # the id the answer carries (NO_SESSION_ID: sessionless)
    partitions: dict[TopicPartition, PartitionFetchRequest]
    incremental: bool = False


@dataclass
class FetchSession:
    session_id: int
    replica_id: int
    next_epoch: int
    partitions: dict[TopicPartition, PartitionFetchRequest]
    sent: dict[TopicPartition, SentPartitionState]

    def partitions_of(self, topic_id_partitions: Iterable[tuple[str, int]]) -> list[TopicPartition]:
        """The session's partitions fetched with these (topic id, partition index) pairs."""
        wanted = {(topic_id, index) for topic_id, index in topic_id_partitions if topic_id}
        if not wanted:
            return []
        return [tp for tp, state in self.partitions.items() if (state.topic_id, tp[1]) in wanted]


class FetchSessionCache:
    """The leader's fetch sessions (see the module docstring)."""

    def __init__(self, rng: random.Random, max_sessions: int = MAX_SESSIONS_DEFAULT) -> None:
        assert max_sessions >= 1, f"max_sessions {max_sessions} must be >= 1"
        self._rng = rng
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._sessions)

    def new_context(
        self,
        replica_id: int,
        session_id: int,
        session_epoch: int,
        updated: Mapping[TopicPartition, PartitionFetchRequest],
        forgotten: Iterable[TopicPartition],
        forgotten_ids: Iterable[tuple[str, int]] = (),
    ) -> SessionContext:
        """Resolve a request's partitions (``updated``: those it lists) through its session.

        A partition leaves the session by name (``forgotten``, requests below v13) or by (topic id,
        partition) (``forgotten_ids``, v13+): the id the follower fetched it with, whether or not the
        leader's metadata still knows it (Kafka's ``FetchSession`` forgets by ``TopicIdPartition``)."""
        if session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION_ID:
                self._sessions.pop(session_id, None)
            if session_epoch == FINAL_EPOCH:
                return SessionContext(ErrorCode.NONE, "", NO_SESSION_ID, dict(updated))
            opened = self._open(replica_id, dict(updated))
            return SessionContext(ErrorCode.NONE, "", opened.session_id, dict(updated))
        session = self._sessions.get(session_id)
        if session is None or session.replica_id != replica_id:
            return SessionContext(
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                f"fetch session {session_id} of replica {replica_id} is not in the cache (evicted or never "
                "opened): send a full fetch request (session epoch 0)",
                NO_SESSION_ID, {},
            )  # fmt: skip
        if session_epoch != session.next_epoch:
            return SessionContext(
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                f"fetch session {session_id}: epoch {session_epoch}, expected {session.next_epoch}: send a "
                "full fetch request (session epoch 0)",
                NO_SESSION_ID, {},
            )  # fmt: skip
        session.next_epoch = session.next_epoch + 1 if session.next_epoch < SESSION_ID_MAX else 1
        self._sessions.move_to_end(session_id)
        for tp in [*forgotten, *session.partitions_of(forgotten_ids)]:
            session.partitions.pop(tp, None)
            session.sent.pop(tp, None)
        session.partitions.update(updated)
        return SessionContext(ErrorCode.NONE, "", session_id, dict(session.partitions), incremental=True)

    def must_answer(
        self,
        session_id: int,
        tp: TopicPartition,
        state: SentPartitionState,
        has_news: bool,
    ) -> bool:
        """Whether an incremental answer includes ``tp``; records ``state`` as sent when it does.
        ``has_news``: records, an error or a diverging epoch. A full answer calls this too (with the
        answer's every partition) so that the session starts from what it sent."""
        session = self._sessions.get(session_id)
        if session is None:
            return True
        if has_news or session.sent.get(tp) != state:
            session.sent[tp] = state
            return True
        return False

    def _open(
        self, replica_id: int, partitions: dict[TopicPartition, PartitionFetchRequest]
    ) -> FetchSession:
        while len(self._sessions) >= self.max_sessions:
            self._sessions.popitem(last=False)
        session_id = self._new_session_id()
        session = FetchSession(session_id, replica_id, INITIAL_EPOCH + 1, partitions, {})
        self._sessions[session_id] = session
        return session

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, SESSION_ID_MAX)
            if session_id not in self._sessions:
                return session_id

    def invariants(self) -> None:
        assert len(self._sessions) <= self.max_sessions, f"{len(self._sessions)} > {self.max_sessions}"
        for session_id, session in self._sessions.items():
            assert session_id == session.session_id != NO_SESSION_ID, f"session id {session_id}"
            assert session.next_epoch >= 1, f"session {session_id}: next epoch {session.next_epoch}"
            assert set(session.sent) <= set(session.partitions), f"session {session_id}: sent outside it"


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """The follower's next request: its session fields and what to list."""

    session_id: int
    session_epoch: int
    partitions: dict[TopicPartition, PartitionFetchRequest]  # to list in ``topics``
    forgotten: tuple[TopicPartition, ...]
    # The topic id each forgotten partition was last sent with ("" if never known): a forget names the
    # topic by it (v13+), as Kafka's FetchSessionHandler does, not by what the metadata says now (a
    # deleted topic has no id there any more, and the leader could not tell what to forget).
    forgotten_topic_ids: Mapping[TopicPartition, str] = field(default_factory=dict)


class FetchSessionHandler:
    """The follower's side of one session with one leader (Kafka's ``FetchSessionHandler``)."""

    def __init__(self) -> None:
        self.session_id = NO_SESSION_ID
        self.next_epoch = INITIAL_EPOCH
        self._sent: dict[TopicPartition, PartitionFetchRequest] = {}
        self._pending: dict[TopicPartition, PartitionFetchRequest] | None = None

    def build(self, wanted: Mapping[TopicPartition, PartitionFetchRequest]) -> SessionRequest:
        """The request for ``wanted`` (every partition to fetch now, with its state)."""
        self._pending = dict(wanted)
        if self.next_epoch == INITIAL_EPOCH:
            return SessionRequest(self.session_id, INITIAL_EPOCH, dict(wanted), ())
        changed = {tp: state for tp, state in wanted.items() if self._sent.get(tp) != state}
        forgotten = tuple(tp for tp in self._sent if tp not in wanted)
        topic_ids = {tp: self._sent[tp].topic_id for tp in forgotten}
        return SessionRequest(self.session_id, self.next_epoch, changed, forgotten, topic_ids)

    def handle_response(self, error: ErrorCode, session_id: int) -> bool:
        """The answer to the last ``build``: True if its partitions are usable. A session error resets
        the session (the next request is full); a leader that answered without a session (id 0)
        keeps every request full."""
        pending, self._pending = self._pending, None
        if error != ErrorCode.NONE or pending is None:
            self.reset()
            return False
        if session_id == NO_SESSION_ID:  # the leader keeps no session for us: stay full
            self.session_id, self.next_epoch, self._sent = NO_SESSION_ID, INITIAL_EPOCH, {}
            return True
        if self.next_epoch != INITIAL_EPOCH and session_id != self.session_id:
            self.reset()  # an incremental request answered for another session: start over
            return False
        self.session_id = session_id
        self.next_epoch = self.next_epoch + 1 if self.next_epoch < SESSION_ID_MAX else 1
        self._sent = pending
        return True

    def relist(self, partitions: Iterable[TopicPartition]) -> None:
        """List ``partitions`` in the next request even if their state did not change: the leader
        answered them with an error, and may not hold them in the session (a topic id it did not know
        yet is answered UNKNOWN_TOPIC_ID outside the session) — unlisted, they would never be fetched.
        They stay known as sent (with a state no request has), so that one the follower stops wanting
        (its leader moved) is still named in ``forgotten``: else the leader's session would keep it
        and answer its error at once, every round, in a tight loop of fetches."""
        for tp in partitions:
            sent = self._sent.get(tp)
            self._sent[tp] = _RELIST if sent is None else replace(_RELIST, topic_id=sent.topic_id)

    def reset(self) -> None:
        """A request failed (no answer, dropped connection): start over with a full request, which
        also closes the old session on the leader."""
        self.next_epoch = INITIAL_EPOCH
        self._sent = {}
        self._pending = None
