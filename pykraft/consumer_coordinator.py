"""The consumer's side of Kafka's classic group protocol, as a state machine without I/O.

Theory of operation (Kafka's ``AbstractCoordinator`` + ``ConsumerCoordinator``):

- **Member states**: ``UNJOINED`` -> JoinGroup sent (``PREPARING_REBALANCE``) -> SyncGroup sent
  (``COMPLETING_REBALANCE``) -> ``STABLE``. Any error sends the member back to ``UNJOINED``; a member
  rejoins when it is not ``STABLE`` or a rejoin was requested (REBALANCE_IN_PROGRESS in a heartbeat,
  NEED_REJOIN in an assignment, a cooperative revocation, a subscription or partition-count change).
- **Generation** ``(generation_id, member_id, protocol_name)``: fences stale members. The first
  JoinGroup carries member id "" and gets MEMBER_ID_REQUIRED with an id to join with (KIP-394).
  UNKNOWN_MEMBER_ID forgets the member id, ILLEGAL_GENERATION only the generation; both make the
  owned partitions *lost* (handed to ``on_revoke`` without a commit: another member may own them).
- **Rebalance protocol**: COOPERATIVE only when every configured assignor supports it (Kafka: the
  highest protocol they all support), so the default ``["range", "cooperative-sticky"]`` is EAGER.
  EAGER revokes every owned partition before joining; COOPERATIVE (KIP-429) keeps them, reports them
  as ``owned_partitions``, revokes only what the new assignment leaves out, and rejoins at once after
  revoking so the partitions reach their new owner in the follow-up rebalance.
- **Leader**: the member whose id the JoinGroup answer names computes every member's assignment with
  the chosen assignor (``pykraft.assignors``) over the partition counts the driver looked up.
- **Heartbeats** go every ``heartbeat_interval_ms`` from the JoinGroup answer on (``COMPLETING_REBALANCE``
  with the joined generation, then ``STABLE``), as Kafka's heartbeat thread does (KIP-62): the
  coordinator runs the member's session from its JoinGroup answer on, while the application may be
  busy with records until its next ``poll``. REBALANCE_IN_PROGRESS before ``STABLE`` is ignored (the
  SyncGroup answer tells). No answer for ``session_timeout_ms`` marks the coordinator unknown.
  ``max_poll_interval_ms`` without ``poll`` makes the member leave (LeaveGroup for a dynamic member; a
  static member just stops and is expired by the coordinator after its session timeout). Both timers
  run only from the JoinGroup answer on: a member waiting for its JoinGroup answer (the coordinator
  holds it up to the rebalance timeout) is neither heartbeating nor late.
- **Commits** are fenced by the generation: they are only sent while ``STABLE``; ILLEGAL_GENERATION /
  UNKNOWN_MEMBER_ID / REBALANCE_IN_PROGRESS make the commit fail (``CommitFailedError``) and the
  member rejoin.

The driver (``pykraft.group_client``) does the calls, the clock and the thread, and holds a lock
around every method here. Errors a broker answers never raise in this module: a fatal one
(FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, ...) is returned for the driver to raise.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from proto import errors
from proto.errors import ErrorCode
from pykraft.assignors import (
    ASSIGNORS,
    COOPERATIVE_ASSIGNORS,
    NEED_REJOIN,
    NO_GENERATION,
    Assignment,
    Subscription,
    assign,
    tp_key,
)
from pykraft.types import TopicPartition

UNKNOWN_MEMBER_ID = ""
PROTOCOL_TYPE = "consumer"
# The coordinator moved or is not there yet: find it again.
COORDINATOR_ERRORS = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION,
     ErrorCode.REQUEST_TIMED_OUT}
)  # fmt: skip
FENCING_ERRORS = frozenset(
    {ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS}
)


class CommitFailedError(errors.exception_class(ErrorCode.ILLEGAL_GENERATION)):  # type: ignore[misc]
    """Kafka's ``CommitFailedException``: the commit was refused because this member is no longer
    in the generation that owns the partitions (a rebalance happened, or poll was called too late)."""

    def __init__(self, reason: str, code: int = ErrorCode.ILLEGAL_GENERATION) -> None:
        self.code = code
        super().__init__(
            f"commit cannot be completed: {reason}. The group rebalanced and the partitions may belong to "
            "another member now; this member rejoins on the next poll(). If poll() is called less often "
            "than max.poll.interval.ms, raise it or lower max.poll.records."
        )


class MemberState(enum.Enum):
    UNJOINED = "Unjoined"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


class RebalanceProtocol(enum.Enum):
    EAGER = "eager"
    COOPERATIVE = "cooperative"


class Next(enum.Enum):
    """What the driver does after an answer."""

    CONTINUE = "continue"  # go on (send SyncGroup, or done)
    RETRY_NOW = "retry-now"  # rejoin at once
    RETRY_BACKOFF = "retry-backoff"  # rejoin after retry_backoff_ms
    FIND_COORDINATOR = "find-coordinator"  # the coordinator is unknown now
    FATAL = "fatal"  # raise Step.error


@dataclass(frozen=True, slots=True)
class Step:
    next: Next
    error: errors.KafkaError | None = None


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class GroupConfig:
    group_id: str
    group_instance_id: str | None = None
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    retry_backoff_ms: int = 100
    assignors: tuple[str, ...] = ("range", "cooperative-sticky")
    client_id: str = "pykraft"

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group_id must not be empty")
        if not self.assignors:
            raise ValueError("partition_assignment_strategy must name at least one assignor")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    protocols: tuple[tuple[str, Subscription], ...]
    reason: str


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: int
    message: str = ""
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    leader: str = ""
    protocol_name: str = ""
    skip_assignment: bool = False
    members: Mapping[str, Subscription] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AssignmentChange:
    """What ``on_sync_response`` or ``prepare_join`` changed: the driver calls the callbacks."""

    added: tuple[TopicPartition, ...] = ()
    revoked: tuple[TopicPartition, ...] = ()
    lost: tuple[TopicPartition, ...] = ()  # revoked without owning them any more: no commit


def _sorted(tps: Iterable[TopicPartition]) -> tuple[TopicPartition, ...]:
    return tuple(sorted(tps, key=tp_key))


class ConsumerCoordinator:
    """See the module docstring. Time comes in as ``now_ms``."""

    def __init__(self, config: GroupConfig, now_ms: int) -> None:
        for name in config.assignors:
            if name not in ASSIGNORS:
                raise ValueError(f"unknown partition assignor {name!r}; known: {sorted(ASSIGNORS)}")
        self.config = config
        self.protocol = (
            RebalanceProtocol.COOPERATIVE
            if all(a in COOPERATIVE_ASSIGNORS for a in config.assignors)
            else RebalanceProtocol.EAGER
        )
        self.state = MemberState.UNJOINED
        self.generation = Generation()
        self.coordinator: tuple[int, str] | None = None  # (node id, host:port)
        self.owned: frozenset[TopicPartition] = frozenset()
        self.subscription: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.leader_id = ""
        self.group_members: dict[str, Subscription] = {}  # the leader's view of the last join
        self._rejoin_reason: str | None = "first join"
        self._join_prepared = False
        self._generation_lost = False
        self._assigned_counts: dict[str, int] = {}  # partition counts the assignment was made from
        self.last_poll_ms = now_ms
        self.last_heartbeat_received_ms = now_ms
        self.next_heartbeat_ms = now_ms
        self.heartbeat_in_flight = False
        self.fatal: errors.KafkaError | None = None

    def invariants(self) -> None:
        """Checked after every transition (cheap): a stable member has a generation and a member id,
        and a subscribed member out of the group rejoins. (Owned partitions may lie outside a
        subscription changed since the last rebalance, as in Kafka: the next rebalance revokes them.)"""
        if self.state is MemberState.STABLE:
            assert self.generation.generation_id != NO_GENERATION, (
                f"stable without a generation: {self.generation}"
            )
            assert self.generation.member_id != UNKNOWN_MEMBER_ID, "stable without a member id"
        if self.state is MemberState.UNJOINED and self.subscribed:
            assert self.rejoin_needed, "an unjoined subscribed member must rejoin"
        assert not (self.heartbeat_in_flight and self.coordinator is None), "a heartbeat to no coordinator"

    # ---- subscription -------------------------------------------------------------------------------

    @property
    def subscribed(self) -> bool:
        return bool(self.subscription) or self.pattern is not None

    def subscribe(self, topics: Iterable[str]) -> None:
        self.pattern = None
        self._set_subscription(frozenset(topics))

    def subscribe_pattern(self, pattern: re.Pattern[str], topic_names: Iterable[str]) -> None:
        self.pattern = pattern
        self.match_pattern(topic_names)

    def match_pattern(self, topic_names: Iterable[str]) -> bool:
        """Re-evaluate the pattern over the cluster's topics (internal ``__*`` topics excluded)."""
        if self.pattern is None:
            return False
        matched = frozenset(t for t in topic_names if not t.startswith("__") and self.pattern.fullmatch(t))
        return self._set_subscription(matched)

    def _set_subscription(self, topics: frozenset[str]) -> bool:
        if topics == self.subscription:
            return False
        self.subscription = topics
        self.request_rejoin(f"subscription changed to {sorted(topics)}")
        return True

    def on_partition_counts(self, counts: Mapping[str, int]) -> None:
        """Kafka's metadata snapshot: a partition count that changed since the assignment rebalances."""
        if self.state is not MemberState.STABLE:
            return
        for topic, count in counts.items():
            if topic in self._assigned_counts and self._assigned_counts[topic] != count:
                self.request_rejoin(
                    f"topic {topic} has {count} partitions, not {self._assigned_counts[topic]}"
                )
                return

    # ---- coordinator --------------------------------------------------------------------------------

    def on_coordinator_found(self, node_id: int, address: str, now_ms: int) -> None:
        self.coordinator = (node_id, address)
        self.last_heartbeat_received_ms = now_ms
        self.heartbeat_in_flight = False

    def mark_coordinator_unknown(self) -> None:
        self.coordinator = None
        self.heartbeat_in_flight = False

    def coordinator_lookup_due(self, now_ms: int) -> bool:
        """A joined member lost its coordinator: the heartbeat thread looks it up (Kafka), at most
        once per ``retry_backoff_ms``."""
        due = self.coordinator is None and self.heartbeating and now_ms >= self.next_heartbeat_ms
        if due:
            self.next_heartbeat_ms = now_ms + self.config.retry_backoff_ms
        return due

    # ---- joining ------------------------------------------------------------------------------------

    def request_rejoin(self, reason: str) -> None:
        if self._rejoin_reason is None:
            self._rejoin_reason = reason

    @property
    def rejoin_needed(self) -> bool:
        return self.subscribed and (self.state is not MemberState.STABLE or self._rejoin_reason is not None)

    def prepare_join(self) -> AssignmentChange | None:
        """Once per rebalance, before the first JoinGroup (None after that): what to revoke (EAGER:
        everything owned; after a lost generation: everything, as lost)."""
        if self._join_prepared:
            return None
        self._join_prepared = True
        if self._generation_lost:
            self._generation_lost = False
            lost, self.owned = _sorted(self.owned), frozenset()
            return AssignmentChange(lost=lost)
        if self.protocol is RebalanceProtocol.EAGER:
            revoked, self.owned = _sorted(self.owned), frozenset()
            return AssignmentChange(revoked=revoked)
        # COOPERATIVE: keep what is still subscribed; partitions of dropped topics are revoked now.
        revoked = _sorted(tp for tp in self.owned if tp.topic not in self.subscription)
        self.owned = self.owned - set(revoked)
        return AssignmentChange(revoked=revoked)

    def join_request(self) -> JoinRequest:
        assert self.subscribed, "join_request without a subscription"
        owned = _sorted(self.owned)
        subscription = Subscription(
            topics=tuple(sorted(self.subscription)),
            owned_partitions=owned,
            # "-1 when none" (proto/group.proto): an EAGER member's metadata is then the same bytes
            # across restarts, which a static member needs to rejoin without a rebalance (KIP-345).
            generation_id=self.generation.generation_id if owned else NO_GENERATION,
            group_instance_id=self.config.group_instance_id,
        )
        reason = self._rejoin_reason or "rejoin"
        self.state = MemberState.PREPARING_REBALANCE
        self._rejoin_reason = None
        return JoinRequest(
            self.generation.member_id, tuple((name, subscription) for name in self.config.assignors), reason
        )

    def on_join_response(self, result: JoinResult, now_ms: int) -> Step:
        if self.state is not MemberState.PREPARING_REBALANCE:
            return Step(Next.RETRY_NOW)  # left or reset meanwhile
        code = result.error
        if code == ErrorCode.NONE:
            self.generation = Generation(result.generation_id, result.member_id, result.protocol_name)
            self.leader_id = result.leader
            self.group_members = dict(result.members)
            self.state = MemberState.COMPLETING_REBALANCE
            # Kafka's heartbeat thread is enabled here (resetTimeouts): the session, poll and
            # heartbeat timers start from the JoinGroup answer.
            self.last_heartbeat_received_ms = self.last_poll_ms = now_ms
            self.next_heartbeat_ms = now_ms + self.config.heartbeat_interval_ms
            self.invariants()
            return Step(Next.CONTINUE)
        self.state = MemberState.UNJOINED
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.generation = Generation(NO_GENERATION, result.member_id)
            self.request_rejoin("join with the member id the coordinator gave (KIP-394)")
            return Step(Next.RETRY_NOW)
        return self._on_group_error(code, result.message, "JoinGroup")

    def is_leader(self) -> bool:
        return self.state is MemberState.COMPLETING_REBALANCE and self.leader_id == self.generation.member_id

    def leader_topics(self) -> set[str]:
        """Every topic the group's members subscribe to (the leader looks up their partition counts)."""
        return {t for sub in self.group_members.values() for t in sub.topics}

    def compute_assignment(self, counts: Mapping[str, int]) -> dict[str, Assignment]:
        """The leader's assignment of every member, with the protocol the group chose."""
        assert self.is_leader(), f"compute_assignment by {self.generation.member_id}, leader {self.leader_id}"
        name = self.generation.protocol_name
        assert name is not None, "a joined generation names its protocol"
        wanted = self.leader_topics()
        # A subscribed topic that does not exist yet counts 0: its creation then rebalances.
        self._assigned_counts = {t: counts.get(t, 0) for t in wanted}
        return assign(name, self._assigned_counts, self.group_members)

    def on_sync_response(
        self, code: int, message: str, assignment: Assignment | None, counts: Mapping[str, int], now_ms: int
    ) -> tuple[Step, AssignmentChange]:
        if self.state is not MemberState.COMPLETING_REBALANCE:
            return Step(Next.RETRY_NOW), AssignmentChange()
        if code != ErrorCode.NONE:
            self.state = MemberState.UNJOINED
            return self._on_group_error(code, message, "SyncGroup"), AssignmentChange()
        assert assignment is not None, "a successful SyncGroup carries an assignment"
        new = frozenset(tp for tp in assignment.partitions if tp.topic in self.subscription)
        added, revoked = _sorted(new - self.owned), _sorted(self.owned - new)
        self.owned = new
        self.state = MemberState.STABLE
        self._join_prepared = False
        # Heartbeat at once in the new generation. The poll timer is left alone: this answer may be
        # applied by the heartbeat thread while the application is busy (it was reset at the
        # JoinGroup answer, so a long join does not count against max.poll.interval.ms).
        self.last_heartbeat_received_ms = self.next_heartbeat_ms = now_ms
        own = {t: counts.get(t, 0) for t in self.subscription}
        # The leader watches every topic it assigned (compute_assignment), the others their own.
        self._assigned_counts = {**self._assigned_counts, **own} if self.is_leader_of_last_join() else own
        if assignment.error == NEED_REJOIN:
            self.request_rejoin("the assignment asked for a follow-up rebalance (NEED_REJOIN)")
        elif self.protocol is RebalanceProtocol.COOPERATIVE and revoked:
            self.request_rejoin(
                f"revoked {len(revoked)} partition(s): the new owners get them in a follow-up"
            )
        self.invariants()
        return Step(Next.CONTINUE), AssignmentChange(added=added, revoked=revoked)

    def is_leader_of_last_join(self) -> bool:
        return self.leader_id == self.generation.member_id

    def _on_group_error(self, code: int, message: str, api: str) -> Step:
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self.reset_generation(
                f"{api}: {ErrorCode(code).name}", forget_member_id=code == ErrorCode.UNKNOWN_MEMBER_ID
            )
            return Step(Next.RETRY_NOW)
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin(f"{api}: the group is rebalancing")
            return Step(Next.RETRY_NOW)
        # Coordinator trouble alone does not rejoin (Kafka): a failed JoinGroup/SyncGroup left the
        # member UNJOINED anyway, and a stable member keeps its generation and heartbeats to the next
        # coordinator, which loaded the group from __consumer_offsets.
        if code in COORDINATOR_ERRORS:
            self.mark_coordinator_unknown()
            return Step(Next.FIND_COORDINATOR)
        if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or errors.is_retriable(code):
            return Step(Next.RETRY_BACKOFF)
        error = errors.error_for(code, f"{api} for group {self.config.group_id!r}: {message}")
        if code == ErrorCode.FENCED_INSTANCE_ID:
            error = errors.error_for(
                code,
                f"group.instance.id {self.config.group_instance_id!r} is used by another consumer of group "
                f"{self.config.group_id!r}; give each consumer its own ({message})",
            )
        self.fatal = error
        return Step(Next.FATAL, error)

    def on_call_failed(self, api: str) -> Step:
        """A JoinGroup/SyncGroup that got no answer (network, timeout): find the coordinator again."""
        if self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
            self.state = MemberState.UNJOINED
        return self._on_group_error(ErrorCode.NETWORK_EXCEPTION, "no answer", api)

    def reset_generation(self, reason: str, forget_member_id: bool) -> None:
        """Out of the group: owned partitions are lost; rejoin (with the member id unless told not)."""
        member_id = UNKNOWN_MEMBER_ID if forget_member_id else self.generation.member_id
        self.generation = Generation(NO_GENERATION, member_id)
        self.state = MemberState.UNJOINED
        self._generation_lost = bool(self.owned)
        self._join_prepared = False
        self.heartbeat_in_flight = False
        self.request_rejoin(reason)
        self.invariants()

    # ---- heartbeats and the poll timer --------------------------------------------------------------

    def on_poll(self, now_ms: int) -> None:
        self.last_poll_ms = now_ms

    @property
    def heartbeating(self) -> bool:
        """Kafka's ``!hasNotJoinedGroup()``: the heartbeat thread's timers run from the JoinGroup
        answer (``COMPLETING_REBALANCE``) on; not while UNJOINED or waiting for the JoinGroup answer."""
        return self.state in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE)

    def poll_timeout_expired(self, now_ms: int) -> bool:
        return (
            self.heartbeating
            and self.generation.generation_id != NO_GENERATION
            and now_ms - self.last_poll_ms > self.config.max_poll_interval_ms
        )

    def heartbeat_due(self, now_ms: int) -> bool:
        return (
            self.heartbeating
            and self.coordinator is not None
            and not self.heartbeat_in_flight
            and now_ms >= self.next_heartbeat_ms
        )

    def on_heartbeat_sent(self, now_ms: int) -> Generation:
        self.heartbeat_in_flight = True
        self.next_heartbeat_ms = now_ms + self.config.heartbeat_interval_ms
        return self.generation

    def on_heartbeat_response(self, sent: Generation, code: int, message: str, now_ms: int) -> Step:
        self.heartbeat_in_flight = False
        if code == ErrorCode.NONE:
            self.last_heartbeat_received_ms = now_ms
            return Step(Next.CONTINUE)
        if sent != self.generation:
            return Step(Next.CONTINUE)  # an answer about a generation we already left
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.last_heartbeat_received_ms = now_ms
            # Kafka ignores it before STABLE: the pending SyncGroup answer says what to do.
            if self.state is MemberState.STABLE:
                self.request_rejoin("the coordinator started a rebalance (heartbeat: REBALANCE_IN_PROGRESS)")
            return Step(Next.CONTINUE)
        self.next_heartbeat_ms = now_ms + self.config.retry_backoff_ms
        step = self._on_group_error(code, message, "Heartbeat")
        self.invariants()
        return step

    def session_expired(self, now_ms: int) -> bool:
        """No heartbeat answered for a whole session: the coordinator is presumed gone (Kafka)."""
        return (
            self.coordinator is not None
            and self.heartbeating
            and now_ms - self.last_heartbeat_received_ms > self.config.session_timeout_ms
        )

    def leave_group(self, reason: str) -> str | None:
        """Leave: the member id to send LeaveGroup for (dynamic members only, like Kafka), or None."""
        member_id = self.generation.member_id
        send = (
            self.config.group_instance_id is None
            and member_id != UNKNOWN_MEMBER_ID
            and self.coordinator is not None
        )
        self.reset_generation(reason, forget_member_id=True)
        return member_id if send else None

    def unsubscribe(self) -> AssignmentChange:
        revoked, self.owned = _sorted(self.owned), frozenset()
        self.subscription, self.pattern = frozenset(), None
        self._generation_lost = False
        self._rejoin_reason = None
        return AssignmentChange(revoked=revoked)

    # ---- commits ------------------------------------------------------------------------------------

    def commit_generation(self) -> Generation | CommitFailedError:
        """The generation to fence a commit with, or why no commit can be sent now. A member that
        was told to rejoin may still commit in its generation (the coordinator accepts commits while
        PreparingRebalance: Kafka commits before rejoining); a consumer without a subscription
        (``assign()``) commits standalone, with no generation."""
        if not self.subscribed:
            return Generation()
        if self.state is MemberState.STABLE and self.generation.generation_id != NO_GENERATION:
            return self.generation
        if self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
            return CommitFailedError("the group is rebalancing", ErrorCode.REBALANCE_IN_PROGRESS)
        return CommitFailedError("this consumer is not a member of an active generation of the group")

    def on_commit_error(self, sent: Generation, code: int, message: str) -> CommitFailedError | None:
        """A commit refused with ``code``: a CommitFailedError for the fencing errors (and rejoin)."""
        if code not in FENCING_ERRORS:
            if code in COORDINATOR_ERRORS:
                self.mark_coordinator_unknown()
            return None
        if sent == self.generation:
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                self.request_rejoin("OffsetCommit: the group is rebalancing")
            else:
                self.reset_generation(
                    f"OffsetCommit: {ErrorCode(code).name}",
                    forget_member_id=code == ErrorCode.UNKNOWN_MEMBER_ID,
                )
        return CommitFailedError(f"{ErrorCode(code).name} ({message})", code)
