"""The replication state of one partition on one broker: leader or follower, ISR, remote LEOs, HW.

Theory of operation (docs/architecture.md, "Core rules"; Kafka's ``Partition`` and ``Replica``):

This is arithmetic over offsets; it never touches the log. The driver (the replica manager) appends
and truncates the log and reports the new log end offset here; it asks this object what the high
watermark is, whether a request's leader epoch is current, and which ISR change to propose.

- LEO (log end offset) is the offset the local log writes next. HW (high watermark) is the
  committed end: ``log_start_offset <= high_watermark <= log_end_offset``.
- **Leader.** For every other replica it keeps the follower's LEO (the ``fetch_offset`` of its last
  fetch that did not diverge) and when it last caught up to the leader's LEO. It sets
  ``HW = max(HW, min(LEO of every member of the maximal ISR, own LEO))`` (``maybe_increment_high_watermark``),
  where the minimum also takes each follower outside the ISR that is caught up (within
  ``replica_lag_time_max_ms``) and eligible to join: the HW waits for it, so that its LEO can reach
  the HW and it rejoins even while appends keep arriving (Kafka's ``shouldWaitForReplicaToJoinIsr``).
  The HW does not move at all while the committed ISR is smaller than min.insync.replicas, capped at
  the replication factor (``effective_min_insync_replicas``; KAFKA-15583, Kafka >= 3.7).
  A new leader epoch forgets the followers' LEOs, so the HW waits until each in-sync follower has
  fetched (and so truncated any divergent suffix) in the new epoch.
- **ISR.** The leader proposes changes; the controller commits them (AlterPartition), and only then
  does the ISR used for ``acks=all`` admission change (``isr`` is always the committed one). While a
  proposal is in flight there is no second one, and the HW and delayed produces use the *maximal*
  ISR (committed plus proposed, KIP-497): an expansion counts the joining follower at once, a shrink
  counts the leaving ones until committed. Shrink: a follower that has not caught up to the leader's
  LEO within ``replica_lag_time_max_ms``. Expand: a follower whose LEO reached both the HW and the
  leader's start offset of the current epoch, and that is eligible per the metadata image (not
  fenced, not shutting down, fetching with its current broker epoch: ``isr_ineligibility``).
  Proposals carry each member's broker epoch (KIP-903).
- **Follower.** ``HW = min(leader's HW, own LEO)``, never lowered by the leader's answer (a new leader's
  HW may briefly lag the committed end this replica already knows).
- **Epochs.** A request carrying an older leader epoch gets FENCED_LEADER_EPOCH, a newer one
  UNKNOWN_LEADER_EPOCH; a follower fetch from an older broker epoch than seen gets STALE_BROKER_EPOCH.
  Within a leader epoch the HW never falls (``invariants``).

Every public method leaves the object valid or changes nothing: peers' mistakes come back as a
``ApiError``; an inconsistent call from the driver or the controller is an assertion.
Not thread-safe: one driver owns each ``Partition``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from broker.replica import divergence
from broker.replica.divergence import EpochEndOffset, EpochEntry
from metadata.image import BrokerRegistration, isr_ineligibility
from proto.errors import OK, ApiError, ErrorCode
from proto.kafka_types import NO_EPOCH, NO_LEADER, NO_OFFSET

ACKS_NONE, ACKS_LEADER, ACKS_ALL = 0, 1, -1
VALID_ACKS = (ACKS_NONE, ACKS_LEADER, ACKS_ALL)
# AlterPartition errors after which the leader may propose again at once (Kafka retries these);
# on any other error it waits for the metadata log to show the partition's new state.
RETRY_ALTER_PARTITION_ERRORS = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})


class Role(enum.Enum):
    NONE = "none"  # not yet told by the metadata log, or stopped
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class RemoteReplicaState:
    """The leader's view of one follower (Kafka's ``ReplicaState``)."""

    replica_id: int
    log_end_offset: int = NO_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = NO_OFFSET
    last_fetch_time_ms: int = 0
    broker_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class AlterPartitionProposal:
    """An ISR change for the driver to send to the controller (AlterPartition).

    KIP-903: each member comes with the broker epoch the leader recorded from its fetches (the
    leader's own from the metadata image; NO_EPOCH when not known), so the controller can refuse a
    member whose fetches came from another incarnation of the broker."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int  # the epoch the proposal is based on; the controller refuses a stale one
    new_isr_with_epochs: tuple[tuple[int, int], ...]  # (broker id, broker epoch), by broker id

    @property
    def new_isr(self) -> tuple[int, ...]:
        return tuple(broker_id for broker_id, _ in self.new_isr_with_epochs)


# Looks a broker up in the current metadata image (Kafka's metadata cache); None: not registered.
BrokerLookup = Callable[[int], BrokerRegistration | None]


@dataclass(frozen=True, slots=True)
class FollowerFetchResult:
    """The leader's answer to one partition of a follower fetch, before reading records.

    With ``error`` or ``diverging_epoch`` set, the driver returns no records. Otherwise it reads
    ``[fetch_offset, log_end_offset)``, completes delayed operations if the HW advanced
    (``high_watermark_advanced_from`` is the old HW) and sends ``isr_proposal`` if any.
    """

    error: ApiError | None = None
    diverging_epoch: EpochEndOffset | None = None
    high_watermark: int = NO_OFFSET
    log_start_offset: int = NO_OFFSET
    log_end_offset: int = NO_OFFSET
    high_watermark_advanced_from: int | None = None
    isr_proposal: AlterPartitionProposal | None = None


@dataclass(frozen=True, slots=True)
class ConsumerFetchResult:
    """The leader's answer to one partition of a consumer fetch, before reading records.

    With neither ``error`` nor ``diverging_epoch`` the driver reads ``[fetch_offset, max_offset)``.
    There are no transactions, so the last stable offset is the high watermark.
    """

    error: ApiError | None
    diverging_epoch: EpochEndOffset | None
    high_watermark: int
    log_start_offset: int
    max_offset: int

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark


@dataclass(frozen=True, slots=True)
class ProduceCheck:
    """Whether a delayed acks=all produce may be answered: ``done`` with ``error`` (``OK`` on success)."""

    done: bool
    error: ApiError = OK


PRODUCE_PENDING = ProduceCheck(done=False)


class Partition:
    """One partition's leader/follower state on broker ``local_broker_id`` (see the module docstring)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        local_broker_id: int,
        *,
        replica_lag_time_max_ms: int,
        min_insync_replicas: int,
        broker_lookup: BrokerLookup | None = None,
    ) -> None:
        """``broker_lookup`` reads broker registrations from the current metadata image: with it, a
        follower joins the ISR only while eligible (``isr_ineligibility``) and proposals carry the
        leader's own broker epoch; without it (a test of the offset arithmetic alone) every caught-up
        follower is eligible."""
        assert replica_lag_time_max_ms > 0, f"replica_lag_time_max_ms={replica_lag_time_max_ms}"
        assert min_insync_replicas >= 1, f"min_insync_replicas={min_insync_replicas}"
        self.broker_lookup = broker_lookup
        self.topic = topic
        self.partition = partition
        self.local_broker_id = local_broker_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self.role = Role.NONE
        self.leader_id = NO_LEADER
        self.leader_epoch = NO_EPOCH
        self.partition_epoch = NO_EPOCH
        self.replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()  # as the controller committed it
        self.pending_isr: AlterPartitionProposal | None = None
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.leader_epoch_start_offset = NO_OFFSET
        self._remote: dict[int, RemoteReplicaState] = {}
        self._high_watermark_floor = (NO_EPOCH, 0)  # (epoch, lowest legal HW in it) for invariants()

    def update_config(self, *, replica_lag_time_max_ms: int, min_insync_replicas: int) -> None:
        """A topic or broker config changed (ConfigRecord): applies to the next check."""
        assert replica_lag_time_max_ms > 0, f"replica_lag_time_max_ms={replica_lag_time_max_ms}"
        assert min_insync_replicas >= 1, f"min_insync_replicas={min_insync_replicas}"
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas

    # ---- transitions driven by the metadata log ------------------------------------------------

    def become_leader(
        self,
        leader_epoch: int,
        partition_epoch: int,
        isr: Iterable[int],
        replicas: Sequence[int],
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
        log_start_offset: int = 0,
    ) -> bool:
        """Lead ``leader_epoch``; returns True when this starts a new leadership (new epoch or role).

        On a new leadership the driver must first assign ``leader_epoch`` at ``log_end_offset`` in the
        log's leader-epoch cache. A repeat of the current epoch with a newer partition epoch is an
        ISR or replica-set update (it ends any pending ISR proposal); an older one is ignored.
        Afterwards call ``maybe_increment_high_watermark`` (a shrunk ISR may let the HW move).
        """
        isr_set = frozenset(isr)
        assert self.local_broker_id in isr_set, f"leader {self.local_broker_id} not in ISR {sorted(isr_set)}"
        assert isr_set <= set(replicas), f"ISR {sorted(isr_set)} not within replicas {list(replicas)}"
        is_new = self.role is not Role.LEADER or leader_epoch > self.leader_epoch
        if not is_new and partition_epoch <= self.partition_epoch:
            return False
        assert leader_epoch >= self.leader_epoch, f"leader epoch {leader_epoch} < {self.leader_epoch}"
        if is_new:
            # The HW this replica already knew stays: it is committed, whatever the log checkpoint says.
            known_high_watermark = min(
                max(high_watermark, self.high_watermark, log_start_offset), log_end_offset
            )
            assert log_start_offset <= known_high_watermark <= log_end_offset, (
                f"become_leader: log_start {log_start_offset} hw {known_high_watermark} leo {log_end_offset}"
            )
            self.log_start_offset, self.log_end_offset = log_start_offset, log_end_offset
            self.high_watermark = known_high_watermark
            self.leader_epoch_start_offset = log_end_offset
            self._remote = {}
        self.role, self.leader_id, self.leader_epoch = Role.LEADER, self.local_broker_id, leader_epoch
        self.partition_epoch, self.replicas, self.isr = partition_epoch, tuple(replicas), isr_set
        self.pending_isr = None
        self._reset_remote_replicas(now_ms, is_new)
        self._note_high_watermark()
        return is_new

    def become_follower(
        self,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: Iterable[int],
        replicas: Sequence[int],
        log_end_offset: int,
        high_watermark: int,
        log_start_offset: int = 0,
    ) -> bool:
        """Follow ``leader_id`` (NO_LEADER while the partition is offline) in ``leader_epoch``.

        Returns True when this starts a new leader epoch or role: the driver then (re)starts fetching
        from ``log_end_offset`` with the log's latest epoch as ``last_fetched_epoch`` — it does NOT
        truncate to the HW (KIP-101); the leader's diverging epoch says what to truncate.
        """
        assert leader_id != self.local_broker_id, f"become_follower of itself ({leader_id})"
        is_new = self.role is not Role.FOLLOWER or leader_epoch > self.leader_epoch
        if not is_new and partition_epoch <= self.partition_epoch:
            return False
        assert leader_epoch >= self.leader_epoch, f"leader epoch {leader_epoch} < {self.leader_epoch}"
        assert log_start_offset <= log_end_offset, f"log_start {log_start_offset} > leo {log_end_offset}"
        self.role, self.leader_id, self.leader_epoch = Role.FOLLOWER, leader_id, leader_epoch
        self.partition_epoch, self.replicas, self.isr = partition_epoch, tuple(replicas), frozenset(isr)
        self.pending_isr, self._remote = None, {}
        self.leader_epoch_start_offset = NO_OFFSET
        self.log_start_offset, self.log_end_offset = log_start_offset, log_end_offset
        self.high_watermark = min(max(self.high_watermark, high_watermark, log_start_offset), log_end_offset)
        self._note_high_watermark()
        return is_new

    def stop(self) -> None:
        """Stop replica: the partition left this broker or the broker shuts down."""
        self.role, self.leader_id, self.pending_isr, self._remote = Role.NONE, NO_LEADER, None, {}

    def _reset_remote_replicas(self, now_ms: int, is_new_leader: bool) -> None:
        # Kafka's resetReplicaState: in-sync followers get a full lag window from now; out-of-sync
        # ones get 0 so they cannot hold anything back. A new leader forgets the LEOs it knew.
        remote = {}
        for replica_id in self.replicas:
            if replica_id == self.local_broker_id:
                continue
            caught_up_ms = now_ms if replica_id in self.isr else 0
            old = self._remote.get(replica_id)
            if is_new_leader or old is None:
                remote[replica_id] = RemoteReplicaState(replica_id, last_caught_up_time_ms=caught_up_ms)
            else:
                remote[replica_id] = old
        self._remote = remote

    # ---- request validation ----------------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int | None) -> ApiError | None:
        """FENCED_LEADER_EPOCH for a stale epoch, UNKNOWN_LEADER_EPOCH for a newer one; None is accepted."""
        if current_leader_epoch is None or current_leader_epoch == self.leader_epoch:
            return None
        if current_leader_epoch < self.leader_epoch:
            return ApiError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"{self._name()}: request epoch {current_leader_epoch} is older than the leader epoch "
                f"{self.leader_epoch}; refresh metadata",
            )
        return ApiError(
            ErrorCode.UNKNOWN_LEADER_EPOCH,
            f"{self._name()}: request epoch {current_leader_epoch} is newer than this broker's "
            f"{self.leader_epoch}; retry after it catches up with the metadata log",
        )

    def check_leader(self, current_leader_epoch: int | None = None) -> ApiError | None:
        """The epoch check, then NOT_LEADER_OR_FOLLOWER unless this broker leads (Kafka's order)."""
        error = self.check_leader_epoch(current_leader_epoch)
        if error is not None or self.role is Role.LEADER:
            return error
        return ApiError(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"{self._name()}: broker {self.local_broker_id} is not the leader (leader {self.leader_id}, "
            f"epoch {self.leader_epoch})",
        )

    def check_append(self, acks: int, current_leader_epoch: int | None = None) -> ApiError | None:
        """Before a produce appends: leadership, epoch, acks, and min.insync.replicas for acks=all."""
        if acks not in VALID_ACKS:
            return ApiError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}; use 0, 1 or -1 (all)")
        error = self.check_leader(current_leader_epoch)
        if error is not None:
            return error
        if acks == ACKS_ALL and len(self.isr) < self.effective_min_insync_replicas:
            return ApiError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{self._name()}: ISR {sorted(self.isr)} has {len(self.isr)} replicas, fewer than "
                f"{self._min_insync_replicas_text()}; nothing was appended",
            )
        return None

    @property
    def effective_min_insync_replicas(self) -> int:
        """min.insync.replicas capped at the replication factor (Kafka's ``effectiveMinIsr``): a topic
        configured with more than it has replicas needs all of them in the ISR, not the impossible."""
        return min(self.min_insync_replicas, max(len(self.replicas), 1))

    def _min_insync_replicas_text(self) -> str:
        if self.effective_min_insync_replicas == self.min_insync_replicas:
            return f"min.insync.replicas={self.min_insync_replicas}"
        configured, effective = self.min_insync_replicas, self.effective_min_insync_replicas
        return f"min.insync.replicas={configured} (in effect {effective}: the replication factor)"

    def check_enough_replicas_reach_offset(self, required_offset: int, leader_epoch: int) -> ProduceCheck:
        """For a delayed acks=all produce appended in ``leader_epoch`` up to ``required_offset``."""
        if self.role is not Role.LEADER or self.leader_epoch != leader_epoch:
            return ProduceCheck(True, ApiError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"{self._name()}: leadership of epoch {leader_epoch} was lost before the HW reached "
                f"{required_offset}; the records may or may not be kept",
            ))  # fmt: skip
        if self.high_watermark < required_offset:
            return PRODUCE_PENDING
        if len(self.maximal_isr) < self.effective_min_insync_replicas:
            return ProduceCheck(True, ApiError(
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                f"{self._name()}: appended, but the ISR shrank to {sorted(self.maximal_isr)}, below "
                f"{self._min_insync_replicas_text()}",
            ))  # fmt: skip
        return ProduceCheck(True)

    # ---- leader: local appends, follower fetches, HW, ISR ------------------------------------------

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The committed ISR plus a pending proposal's members (KIP-497)."""
        if self.pending_isr is None:
            return self.isr
        return self.isr | frozenset(self.pending_isr.new_isr)

    def remote_replica(self, replica_id: int) -> RemoteReplicaState | None:
        return self._remote.get(replica_id)

    def on_local_append(self, log_end_offset: int, now_ms: int | None = None) -> int | None:
        """The local log grew to ``log_end_offset`` at ``now_ms``; on the leader (which must give
        ``now_ms``) returns the old HW if the HW moved."""
        assert log_end_offset >= self.log_end_offset, (
            f"append moved LEO back {self.log_end_offset}->{log_end_offset}"
        )
        self.log_end_offset = log_end_offset
        if self.role is not Role.LEADER:
            return None
        assert now_ms is not None, f"{self._name()}: a leader's append needs now_ms"
        return self.maybe_increment_high_watermark(now_ms)

    def handle_consumer_fetch(
        self,
        fetch_offset: int,
        current_leader_epoch: int | None,
        last_fetched_epoch: int | None,
        epoch_entries: Sequence[EpochEntry],
    ) -> ConsumerFetchResult:
        """One partition of a consumer fetch: fence, detect truncation (KIP-320), check the range.

        Consumers read ``[log_start_offset, high_watermark)`` (``max_offset`` is the HW). Kafka's range
        rule: only a fetch offset outside ``[log_start_offset, log_end_offset]`` gets
        OFFSET_OUT_OF_RANGE (with the valid range in the result); ``high_watermark < fetch_offset <=
        log_end_offset`` is a valid position with nothing readable yet — an empty answer that
        long-polls — because after a failover the new leader's HW lags the committed end its
        predecessor reported until the followers fetch in the new epoch, and a consumer positioned
        there must wait, not reset. With ``last_fetched_epoch`` the consumer learns through
        ``diverging_epoch`` that the records it read past the leader's end of that epoch were
        truncated.
        """
        error = self.check_leader(current_leader_epoch)
        diverging = None
        if error is None:
            diverging = divergence.diverging_epoch(
                epoch_entries, self.log_end_offset, fetch_offset, last_fetched_epoch
            )
        if (
            error is None
            and diverging is None
            and not (self.log_start_offset <= fetch_offset <= self.log_end_offset)
        ):
            error = self._out_of_range(fetch_offset, self.log_end_offset)
        return ConsumerFetchResult(
            error, diverging, self.high_watermark, self.log_start_offset, self.high_watermark
        )

    def handle_offsets_for_leader_epoch(
        self, current_leader_epoch: int | None, leader_epoch: int, epoch_entries: Sequence[EpochEntry]
    ) -> tuple[ApiError | None, EpochEndOffset]:
        """OffsetsForLeaderEpoch on the leader: the largest epoch <= ``leader_epoch`` and its end."""
        error = self.check_leader(current_leader_epoch)
        if error is not None:
            return error, divergence.UNDEFINED
        return None, divergence.end_offset_for_epoch(epoch_entries, leader_epoch, self.log_end_offset)

    def handle_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int | None,
        current_leader_epoch: int,
        epoch_entries: Sequence[EpochEntry],
        now_ms: int,
        broker_epoch: int = NO_EPOCH,
    ) -> FollowerFetchResult:
        """One partition of a follower fetch: fence, detect divergence, record the follower's LEO.

        ``epoch_entries`` is the local log's leader-epoch cache. The follower's LEO is recorded only
        when its log does not diverge (Kafka does the same: a divergent fetch offset proves nothing).
        """
        error = self._check_follower_fetch(replica_id, fetch_offset, current_leader_epoch, broker_epoch)
        if error is not None:
            return self._fetch_result(error=error)
        diverging = divergence.diverging_epoch(
            epoch_entries, self.log_end_offset, fetch_offset, last_fetched_epoch
        )
        if diverging is not None:
            return self._fetch_result(diverging_epoch=diverging)
        if fetch_offset > self.log_end_offset:
            error = self._out_of_range(fetch_offset, self.log_end_offset)
            return self._fetch_result(error=error)
        self.update_follower_fetch_state(replica_id, fetch_offset, self.log_end_offset, now_ms, broker_epoch)
        old_high_watermark = self.maybe_increment_high_watermark(now_ms)
        proposal = self.maybe_expand_isr(replica_id)
        return self._fetch_result(high_watermark_advanced_from=old_high_watermark, isr_proposal=proposal)

    def _check_follower_fetch(
        self, replica_id: int, fetch_offset: int, current_leader_epoch: int, broker_epoch: int
    ) -> ApiError | None:
        error = self.check_leader(current_leader_epoch)
        if error is not None:
            return error
        remote = self._remote.get(replica_id)
        if remote is None:
            return ApiError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"{self._name()}: broker {replica_id} is not a follower (replicas {list(self.replicas)})",
            )
        if broker_epoch != NO_EPOCH and broker_epoch < remote.broker_epoch:
            return ApiError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"{self._name()}: broker {replica_id} fetched with broker epoch {broker_epoch}, "
                f"older than {remote.broker_epoch}: a previous incarnation is still running",
            )
        if fetch_offset < self.log_start_offset:
            return self._out_of_range(fetch_offset, self.log_end_offset)
        return None

    def _out_of_range(self, fetch_offset: int, end_offset: int) -> ApiError:
        return ApiError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"{self._name()}: fetch offset {fetch_offset} is outside [{self.log_start_offset}, {end_offset}]",
        )

    def _fetch_result(self, **fields: object) -> FollowerFetchResult:
        return FollowerFetchResult(
            high_watermark=self.high_watermark,
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            **fields,  # type: ignore[arg-type]
        )

    def update_follower_fetch_state(
        self,
        replica_id: int,
        fetch_offset: int,
        leader_log_end_offset: int,
        now_ms: int,
        broker_epoch: int = NO_EPOCH,
    ) -> None:
        """Record a follower's LEO from a fetch that did not diverge (Kafka's ``updateFetchState``).

        It caught up at ``now_ms`` if it asked for the leader's LEO; at its previous fetch time if it
        now asks for at least the leader LEO of that previous fetch.
        """
        assert self.role is Role.LEADER, f"{self._name()}: follower fetch state on a {self.role.value}"
        old = self._remote[replica_id]
        assert fetch_offset <= leader_log_end_offset <= self.log_end_offset, (
            f"{self._name()}: fetch {fetch_offset} leader LEO {leader_log_end_offset}/{self.log_end_offset}"
        )
        caught_up_ms = old.last_caught_up_time_ms
        if fetch_offset >= leader_log_end_offset:
            caught_up_ms = max(caught_up_ms, now_ms)
        elif fetch_offset >= old.last_fetch_leader_log_end_offset:
            caught_up_ms = max(caught_up_ms, old.last_fetch_time_ms)
        self._remote[replica_id] = RemoteReplicaState(  # not dataclasses.replace: this is the hot path
            replica_id,
            log_end_offset=fetch_offset,
            last_caught_up_time_ms=caught_up_ms,
            last_fetch_leader_log_end_offset=max(leader_log_end_offset, old.last_fetch_leader_log_end_offset),
            last_fetch_time_ms=now_ms,
            broker_epoch=max(broker_epoch, old.broker_epoch),
        )

    def maybe_increment_high_watermark(self, now_ms: int) -> int | None:
        """Leader: HW = max(HW, min LEO over the maximal ISR and the followers about to join it);
        returns the old HW if it moved (Kafka's ``maybeIncrementLeaderHW``).

        The HW does not move while the committed ISR is smaller than min.insync.replicas
        (``effective_min_insync_replicas``; KAFKA-15583, Kafka >= 3.7). It also waits for a follower
        outside the ISR that is caught up (``_is_caught_up`` at ``now_ms``) and eligible to join
        (``_should_wait_to_join``): else, under steady appends, the HW runs ahead to the leader's LEO
        on every append and such a follower's LEO never reaches it, so it never rejoins."""
        if self.role is not Role.LEADER or len(self.isr) < self.effective_min_insync_replicas:
            return None
        new_high_watermark = self.log_end_offset
        maximal_isr = self.maximal_isr
        for replica_id, remote in self._remote.items():
            if remote.log_end_offset < new_high_watermark and (
                replica_id in maximal_isr or self._should_wait_to_join(remote, now_ms)
            ):
                new_high_watermark = remote.log_end_offset
        if new_high_watermark <= self.high_watermark:
            return None
        old, self.high_watermark = self.high_watermark, new_high_watermark
        self._note_high_watermark()
        return old

    def _should_wait_to_join(self, remote: RemoteReplicaState, now_ms: int) -> bool:
        """A follower outside the ISR that the HW waits for (Kafka's ``shouldWaitForReplicaToJoinIsr``):
        it fetched in this leader epoch (its LEO is known), is caught up and may join the ISR."""
        return (
            remote.log_end_offset != NO_OFFSET
            and self._is_caught_up(remote, now_ms)
            and self.isr_ineligibility(remote.replica_id) is None
        )

    def _is_caught_up(self, remote: RemoteReplicaState, now_ms: int) -> bool:
        return (
            remote.log_end_offset == self.log_end_offset
            or now_ms - remote.last_caught_up_time_ms <= self.replica_lag_time_max_ms
        )

    def out_of_sync_replicas(self, now_ms: int) -> tuple[int, ...]:
        """ISR followers that have not caught up to the leader's LEO within replica.lag.time.max.ms."""
        return tuple(
            sorted(
                r
                for r in self.isr
                if r != self.local_broker_id and not self._is_caught_up(self._remote[r], now_ms)
            )
        )

    def maybe_shrink_isr(self, now_ms: int) -> AlterPartitionProposal | None:
        """Leader: propose the ISR without the lagging followers (none while a proposal is pending)."""
        if self.role is not Role.LEADER or self.pending_isr is not None:
            return None
        lagging = self.out_of_sync_replicas(now_ms)
        if not lagging:
            return None
        return self._propose(self.isr - set(lagging))

    def maybe_expand_isr(self, replica_id: int) -> AlterPartitionProposal | None:
        """Leader: propose adding ``replica_id`` once its LEO reached the HW and this epoch's start."""
        if self.role is not Role.LEADER or self.pending_isr is not None or replica_id in self.isr:
            return None
        remote = self._remote.get(replica_id)
        if remote is None:
            return None
        log_end_offset = remote.log_end_offset
        if log_end_offset < self.high_watermark or log_end_offset < self.leader_epoch_start_offset:
            return None
        if self.isr_ineligibility(replica_id) is not None:
            return None  # the controller would refuse it: no AlterPartition per fetch
        return self._propose(self.isr | {replica_id})

    def isr_ineligibility(self, replica_id: int) -> str | None:
        """Why the follower may not join the ISR now, or None (Kafka's ``isReplicaIsrEligible``).

        Per the metadata image: registered, not fenced, not in controlled shutdown, and the broker
        epoch of its fetches (recorded in its remote state) is its current registration's — a fetch
        from an older incarnation, which may have lost data, proves nothing (KIP-903)."""
        if self.broker_lookup is None:
            return None
        remote = self._remote.get(replica_id)
        fetched_epoch = NO_EPOCH if remote is None else remote.broker_epoch
        return isr_ineligibility(replica_id, self.broker_lookup(replica_id), fetched_epoch)

    def _propose(self, new_isr: frozenset[int]) -> AlterPartitionProposal:
        self.pending_isr = AlterPartitionProposal(
            self.topic,
            self.partition,
            self.local_broker_id,
            self.leader_epoch,
            self.partition_epoch,
            tuple((replica_id, self._broker_epoch_of(replica_id)) for replica_id in sorted(new_isr)),
        )
        return self.pending_isr

    def _broker_epoch_of(self, replica_id: int) -> int:
        """The broker epoch to send for an ISR member: a follower's from its fetches, ours from the
        metadata image; NO_EPOCH when not known (the controller accepts that only for members already
        in the ISR)."""
        if replica_id != self.local_broker_id:
            return self._remote[replica_id].broker_epoch
        registered = None if self.broker_lookup is None else self.broker_lookup(replica_id)
        return NO_EPOCH if registered is None else registered.broker_epoch

    def handle_alter_partition_response(
        self,
        proposal: AlterPartitionProposal,
        error: ErrorCode,
        leader_epoch: int = NO_EPOCH,
        partition_epoch: int = NO_EPOCH,
        isr: Iterable[int] = (),
        *,
        now_ms: int,
    ) -> int | None:
        """The controller answered ``proposal`` at ``now_ms``; returns the old HW if committing the ISR
        moved it.

        An answer to an older proposal, or from another leader epoch, changes nothing: the metadata
        log will say. On success the committed ISR is adopted at once (the matching metadata record
        may arrive later and is then a no-op).
        """
        if self.role is not Role.LEADER or proposal != self.pending_isr:
            return None
        if error != ErrorCode.NONE:
            if error in RETRY_ALTER_PARTITION_ERRORS:
                self.pending_isr = None
            return None
        if leader_epoch != self.leader_epoch or partition_epoch < self.partition_epoch:
            return None
        isr_set = frozenset(isr)
        assert self.local_broker_id in isr_set, f"committed ISR {sorted(isr_set)} lacks the leader"
        self.isr, self.partition_epoch, self.pending_isr = isr_set, partition_epoch, None
        return self.maybe_increment_high_watermark(now_ms)

    # ---- follower -------------------------------------------------------------------------------

    def update_follower_high_watermark(self, leader_high_watermark: int) -> int | None:
        """Follower: HW = min(leader's HW, own LEO), never lowered; returns the old HW if it moved."""
        assert self.role is Role.FOLLOWER, f"{self._name()}: follower HW update on a {self.role.value}"
        new_high_watermark = min(leader_high_watermark, self.log_end_offset)
        if new_high_watermark <= self.high_watermark:
            return None
        old, self.high_watermark = self.high_watermark, new_high_watermark
        self._note_high_watermark()
        return old

    def on_local_truncate(self, log_end_offset: int) -> None:
        """Follower: the log was truncated to ``log_end_offset`` (by leader epoch, never to the HW).

        The HW is capped at the new LEO; truncating below it happens only after an unclean election.
        """
        assert self.role is Role.FOLLOWER, f"{self._name()}: truncation on a {self.role.value}"
        assert log_end_offset >= self.log_start_offset, f"truncate to {log_end_offset} < log start"
        self.log_end_offset = log_end_offset
        if self.high_watermark > log_end_offset:
            self.high_watermark = log_end_offset
            self._high_watermark_floor = (self.leader_epoch, log_end_offset)

    def on_local_truncate_fully(self, start_offset: int) -> None:
        """Follower: the log was emptied to restart at the leader's log start (it was too far behind)."""
        assert self.role is Role.FOLLOWER, f"{self._name()}: full truncation on a {self.role.value}"
        self.log_start_offset = self.log_end_offset = self.high_watermark = start_offset
        self._high_watermark_floor = (self.leader_epoch, start_offset)

    def on_log_start_offset(self, log_start_offset: int) -> None:
        """Retention or a leader's log start moved the local log start offset forward."""
        assert log_start_offset <= self.log_end_offset, (
            f"log start {log_start_offset} > LEO {self.log_end_offset}"
        )
        self.log_start_offset = max(self.log_start_offset, log_start_offset)
        self.high_watermark = max(self.high_watermark, self.log_start_offset)

    # ---- invariants -------------------------------------------------------------------------------

    def _note_high_watermark(self) -> None:
        epoch, floor = self._high_watermark_floor
        if epoch != self.leader_epoch or self.high_watermark > floor:
            self._high_watermark_floor = (self.leader_epoch, self.high_watermark)

    def invariants(self) -> None:
        name = self._name()
        assert 0 <= self.log_start_offset <= self.high_watermark <= self.log_end_offset, (
            f"{name}: log_start {self.log_start_offset} hw {self.high_watermark} leo {self.log_end_offset}"
        )
        epoch, floor = self._high_watermark_floor
        assert epoch != self.leader_epoch or self.high_watermark >= floor, (
            f"{name}: HW fell from {floor} to {self.high_watermark} within leader epoch {epoch}"
        )
        if self.role is not Role.LEADER:
            return
        assert self.local_broker_id in self.isr, (
            f"{name}: leader {self.local_broker_id} not in ISR {sorted(self.isr)}"
        )
        assert self.maximal_isr <= set(self.replicas), (
            f"{name}: ISR {sorted(self.maximal_isr)} not within {self.replicas}"
        )
        assert self.leader_epoch_start_offset <= self.log_end_offset, (
            f"{name}: epoch start {self.leader_epoch_start_offset} > LEO {self.log_end_offset}"
        )
        for remote in self._remote.values():
            assert remote.log_end_offset <= self.log_end_offset, f"{name}: {remote} beyond leader LEO"

    def _name(self) -> str:
        return f"{self.topic}-{self.partition}"
