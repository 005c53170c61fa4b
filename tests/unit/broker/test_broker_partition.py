"""The Partition core (broker/replica/partition.py): HW/LEO, ISR with pending changes, epochs, acks=all
admission."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from broker.replica.divergence import EpochEndOffset, EpochEntry
from broker.replica.partition import (
    ACKS_ALL,
    ACKS_LEADER,
    ACKS_NONE,
    AlterPartitionProposal,
    Partition,
    Role,
)
from proto.errors import ErrorCode
from proto.kafka_types import NO_EPOCH

LAG_MS = 1_000
LEADER, F1, F2 = 1, 2, 3
REPLICAS = (LEADER, F1, F2)


def leader(
    isr: tuple[int, ...] = REPLICAS,
    leo: int = 10,
    hw: int = 5,
    min_isr: int = 2,
    epoch: int = 3,
    now_ms: int = 0,
) -> Partition:
    p = Partition("t", 0, LEADER, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=min_isr)
    assert p.become_leader(epoch, 7, isr, REPLICAS, leo, hw, now_ms)
    p.invariants()
    return p


def fetch(p: Partition, replica: int, offset: int, now_ms: int, epoch: int | None = 3):
    entries = (EpochEntry(1, 0), EpochEntry(3, 4))
    result = p.handle_follower_fetch(replica, offset, epoch, p.leader_epoch, entries, now_ms)
    p.invariants()
    return result


def test_new_leader_hw_waits_for_every_isr_follower() -> None:
    """A new leader forgets the followers' LEOs: the HW moves only once each ISR member fetched."""
    p = leader()
    assert p.maybe_increment_high_watermark(0) is None
    assert fetch(p, F1, 10, 1).high_watermark_advanced_from is None
    result = fetch(p, F2, 8, 2)
    assert result.high_watermark_advanced_from == 5
    assert p.high_watermark == 8  # min(10, 10, 8)


def test_hw_is_min_leo_over_isr_and_monotonic() -> None:
    """HW = max(HW, min LEO over the ISR): a follower fetching an older offset never lowers it."""
    p = leader(isr=(LEADER, F1))
    fetch(p, F1, 9, 1)
    assert p.high_watermark == 9
    assert p.on_local_append(15, 1) is None
    fetch(p, F1, 15, 2)
    assert p.high_watermark == 15
    assert p.remote_replica(F2) is not None and p.high_watermark == 15  # F2 is out of the ISR


def test_single_replica_isr_hw_follows_leo() -> None:
    p = leader(isr=(LEADER,), min_isr=1)
    assert p.maybe_increment_high_watermark(0) == 5
    assert p.high_watermark == 10
    assert p.on_local_append(12, 1) == 10
    assert p.high_watermark == 12


def test_divergent_fetch_records_no_leo() -> None:
    """Kafka: a fetch that diverges proves nothing about the follower's log, so its LEO is not recorded."""
    p = leader(isr=(LEADER, F1))
    result = fetch(p, F1, 6, 1, epoch=2)  # the leader never had epoch 2: it ended epoch 1 at 4
    assert result.diverging_epoch == EpochEndOffset(1, 4)
    assert result.error is None
    remote = p.remote_replica(F1)
    assert remote is not None and remote.log_end_offset == -1
    assert p.high_watermark == 5


@pytest.mark.parametrize(
    ("request_epoch", "code"),
    [(3, None), (None, None), (2, ErrorCode.FENCED_LEADER_EPOCH), (4, ErrorCode.UNKNOWN_LEADER_EPOCH)],
    ids=["current", "absent", "stale", "newer"],
)
def test_leader_epoch_fencing(request_epoch: int | None, code: ErrorCode | None) -> None:
    """A stale leader epoch gets FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH."""
    error = leader().check_leader(request_epoch)
    assert (error.code if error else None) == code


@pytest.mark.parametrize(
    ("acks", "isr", "min_isr", "code"),
    [
        (ACKS_ALL, REPLICAS, 2, None),
        (ACKS_ALL, (LEADER, F1), 2, None),
        (ACKS_ALL, (LEADER,), 2, ErrorCode.NOT_ENOUGH_REPLICAS),
        (ACKS_LEADER, (LEADER,), 2, None),
        (ACKS_NONE, (LEADER,), 2, None),
        (2, REPLICAS, 2, ErrorCode.INVALID_REQUIRED_ACKS),
    ],
    ids=["all-full-isr", "all-min-isr", "all-below-min-isr", "acks1-below-min-isr", "acks0", "bad-acks"],
)
def test_check_append(acks: int, isr: tuple[int, ...], min_isr: int, code: ErrorCode | None) -> None:
    """acks=all requires |ISR| >= min.insync.replicas, else NOT_ENOUGH_REPLICAS before any append."""
    error = leader(isr=isr, min_isr=min_isr).check_append(acks)
    assert (error.code if error else None) == code
    if error:
        assert error.message


def test_follower_refuses_produce() -> None:
    p = Partition("t", 0, F1, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=2)
    p.become_follower(LEADER, 3, 7, REPLICAS, REPLICAS, 10, 5)
    error = p.check_append(ACKS_LEADER)
    assert error is not None and error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_fetch_errors() -> None:
    p = leader()
    fenced = p.handle_follower_fetch(F1, 10, 3, 2, (), 0)
    assert fenced.error is not None and fenced.error.code == ErrorCode.FENCED_LEADER_EPOCH
    stranger = p.handle_follower_fetch(9, 10, 3, 3, (), 0)
    assert stranger.error is not None and stranger.error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    beyond = p.handle_follower_fetch(F1, 11, None, 3, (), 0)
    assert beyond.error is not None and beyond.error.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_stale_broker_epoch_is_refused() -> None:
    """A fetch from an older incarnation of a follower (lower broker epoch) gets STALE_BROKER_EPOCH."""
    p = leader()
    entries = (EpochEntry(3, 0),)
    assert p.handle_follower_fetch(F1, 10, 3, 3, entries, 1, broker_epoch=50).error is None
    zombie = p.handle_follower_fetch(F1, 10, 3, 3, entries, 2, broker_epoch=40)
    assert zombie.error is not None and zombie.error.code == ErrorCode.STALE_BROKER_EPOCH


def test_shrink_isr_after_lag_time_then_commit() -> None:
    """A follower that has not caught up to the leader's LEO within replica.lag.time.max.ms leaves the ISR,
    but only once the controller commits it; meanwhile the HW still waits for it (maximal ISR)."""
    p = leader(isr=REPLICAS)
    fetch(p, F1, 10, 100)
    fetch(p, F2, 7, 100)
    assert p.high_watermark == 7
    assert p.maybe_shrink_isr(LAG_MS) is None  # within the window granted at become_leader
    proposal = p.maybe_shrink_isr(LAG_MS + 1)
    assert proposal == AlterPartitionProposal("t", 0, LEADER, 3, 7, ((LEADER, NO_EPOCH), (F1, NO_EPOCH)))
    assert proposal.new_isr == (LEADER, F1)
    assert p.maybe_shrink_isr(LAG_MS + 2) is None  # one proposal at a time
    assert p.isr == frozenset(REPLICAS)
    assert p.high_watermark == 7
    old_high_watermark = p.handle_alter_partition_response(
        proposal, ErrorCode.NONE, 3, 8, (LEADER, F1), now_ms=LAG_MS + 3
    )
    assert old_high_watermark == 7
    assert p.isr == {LEADER, F1} and p.partition_epoch == 8 and p.high_watermark == 10
    p.invariants()


def test_follower_caught_up_at_its_previous_fetch_stays_in_sync() -> None:
    """Kafka's lastCaughtUpTime: fetching at least the leader LEO of the previous fetch counts as caught
    up at the previous fetch's time, so a steady stream of appends does not evict a keeping-up follower."""
    p = leader(isr=(LEADER, F1), now_ms=0)
    t = 0
    for leo in range(11, 30):
        t += 400
        p.on_local_append(leo, t - 200)
        fetch(p, F1, leo - 1, t)  # always one behind the current LEO, but at the previous LEO
        assert p.maybe_shrink_isr(t) is None, f"evicted at t={t}"


def test_expand_isr_needs_hw_and_epoch_start() -> None:
    """A follower rejoins when its LEO >= HW and >= the leader's start offset of the current epoch;
    the HW counts it at once (maximal ISR) while the expansion is pending."""
    p = leader(isr=(LEADER, F1), leo=10, hw=5)
    fetch(p, F1, 10, 1)
    assert p.high_watermark == 10
    assert fetch(p, F2, 9, 2).isr_proposal is None  # below the HW
    result = fetch(p, F2, 10, 3)
    assert result.isr_proposal is not None and result.isr_proposal.new_isr == (LEADER, F1, F2)
    assert p.isr == {LEADER, F1} and p.maximal_isr == set(REPLICAS)
    p.on_local_append(12, 4)
    fetch(p, F1, 12, 4)
    assert p.high_watermark == 10  # F2 (pending) holds it
    assert p.check_enough_replicas_reach_offset(11, 3).done is False


def test_expand_below_epoch_start_is_refused() -> None:
    """Kafka's isFollowerInSync: LEO >= HW is not enough; the follower must also hold the leader's
    start offset of this epoch, or a new leader could count a follower that still has to truncate."""
    p = leader(isr=(LEADER, F2), leo=10, hw=5)
    assert p.leader_epoch_start_offset == 10
    assert fetch(p, F1, 8, 1).isr_proposal is None  # >= HW 5 but below the epoch start 10
    assert fetch(p, F1, 10, 2).isr_proposal is not None


@pytest.mark.parametrize(
    ("error", "pending_cleared"),
    [
        (ErrorCode.OPERATION_NOT_ATTEMPTED, True),
        (ErrorCode.INELIGIBLE_REPLICA, True),
        (ErrorCode.INVALID_UPDATE_VERSION, False),
        (ErrorCode.FENCED_LEADER_EPOCH, False),
    ],
    ids=["not-attempted", "ineligible", "invalid-version", "fenced"],
)
def test_alter_partition_error(error: ErrorCode, pending_cleared: bool) -> None:
    """Kafka retries only OPERATION_NOT_ATTEMPTED / INELIGIBLE_REPLICA; otherwise it waits for metadata."""
    p = leader(isr=REPLICAS)
    proposal = p.maybe_shrink_isr(LAG_MS + 1)
    assert proposal is not None
    assert p.handle_alter_partition_response(proposal, error, now_ms=LAG_MS + 2) is None
    assert (p.pending_isr is None) == pending_cleared
    assert p.isr == frozenset(REPLICAS)


def test_metadata_update_ends_pending_and_stale_response_is_ignored() -> None:
    """The ISR change arriving through the metadata log (same leader epoch, newer partition epoch)
    commits it; a late AlterPartition answer to the old proposal changes nothing."""
    p = leader(isr=REPLICAS)
    proposal = p.maybe_shrink_isr(LAG_MS + 1)
    assert proposal is not None
    assert p.become_leader(3, 8, (LEADER,), REPLICAS, 10, 5, LAG_MS + 2) is False
    assert p.pending_isr is None and p.isr == {LEADER}
    assert p.become_leader(3, 7, REPLICAS, REPLICAS, 10, 5, LAG_MS + 3) is False  # stale: ignored
    assert p.isr == {LEADER}
    late = p.handle_alter_partition_response(proposal, ErrorCode.NONE, 3, 8, (LEADER,), now_ms=LAG_MS + 4)
    assert late is None


def test_delayed_produce_check() -> None:
    p = leader(isr=(LEADER, F1), min_isr=2)
    assert p.check_enough_replicas_reach_offset(8, 3).done is False
    fetch(p, F1, 9, 1)
    assert p.check_enough_replicas_reach_offset(8, 3).error.ok
    lost = p.check_enough_replicas_reach_offset(8, 2)
    assert lost.done and lost.error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    p.become_leader(3, 8, (LEADER,), REPLICAS, 10, 9, 2)
    assert p.maybe_increment_high_watermark(2) is None  # below min.insync.replicas: the HW stays
    assert p.check_enough_replicas_reach_offset(10, 3).done is False
    after = p.check_enough_replicas_reach_offset(9, 3)  # the HW passed it before the shrink
    assert after.done and after.error.code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


@pytest.mark.parametrize(
    ("leader_hw", "leo", "start_hw", "expected_hw"),
    [(8, 10, 5, 8), (12, 10, 5, 10), (3, 10, 5, 5)],
    ids=["leader-hw", "capped-at-own-leo", "never-lowered"],
)
def test_follower_hw(leader_hw: int, leo: int, start_hw: int, expected_hw: int) -> None:
    """A follower's HW is min(leader HW, own LEO), and never goes back within an epoch."""
    p = Partition("t", 0, F1, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=2)
    p.become_follower(LEADER, 3, 7, REPLICAS, REPLICAS, leo, start_hw)
    p.update_follower_high_watermark(leader_hw)
    assert p.high_watermark == expected_hw
    p.invariants()


def test_follower_truncation_caps_hw() -> None:
    p = Partition("t", 0, F1, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=2)
    p.become_follower(LEADER, 3, 7, REPLICAS, REPLICAS, 10, 4)
    p.on_local_truncate(8)
    assert (p.log_end_offset, p.high_watermark) == (8, 4)
    p.invariants()


def test_follower_becomes_leader_keeps_known_hw() -> None:
    p = Partition("t", 0, F1, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=2)
    p.become_follower(LEADER, 3, 7, REPLICAS, REPLICAS, 10, 4)
    p.update_follower_high_watermark(9)
    assert p.become_leader(4, 8, (F1, F2), REPLICAS, 10, 4, 0)
    assert p.role is Role.LEADER and p.high_watermark == 9 and p.leader_epoch_start_offset == 10
    p.invariants()


def test_invariants_catch_hw_falling_within_epoch() -> None:
    p = leader()
    p.high_watermark = 4  # what a bug would do
    with pytest.raises(AssertionError, match="HW fell from 5 to 4"):
        p.invariants()


@pytest.mark.parametrize(
    ("fetch_offset", "request_epoch", "last_epoch", "code", "diverging"),
    [
        (5, 3, None, None, None),  # at the HW: nothing yet, long-poll
        (0, None, None, None, None),
        (6, 3, None, None, None),  # beyond the HW, within the log: nothing readable yet, long-poll
        (10, 3, None, None, None),  # at the LEO
        (11, 3, None, ErrorCode.OFFSET_OUT_OF_RANGE, None),  # beyond the LEO
        (4, 2, None, ErrorCode.FENCED_LEADER_EPOCH, None),
        (4, 4, None, ErrorCode.UNKNOWN_LEADER_EPOCH, None),
        (5, 3, 2, None, EpochEndOffset(1, 4)),  # KIP-320: read epoch-2 records the leader never had
        (4, 3, 1, None, None),
    ],
    ids=[
        "at-hw",
        "start",
        "past-hw",
        "at-leo",
        "past-leo",
        "fenced",
        "unknown-epoch",
        "truncated",
        "consistent",
    ],
)
def test_consumer_fetch(
    fetch_offset: int, request_epoch: int | None, last_epoch: int | None, code, diverging
) -> None:
    """Consumers read only [log start, HW) (max_offset); Kafka's range rule: OFFSET_OUT_OF_RANGE, with
    the valid range, only outside [log start, LEO]; a consumer whose last fetched epoch diverges from
    the leader's log gets a diverging epoch (truncation seen)."""
    p = leader()
    entries = (EpochEntry(1, 0), EpochEntry(3, 4))
    result = p.handle_consumer_fetch(fetch_offset, request_epoch, last_epoch, entries)
    assert (result.error.code if result.error else None) == code
    assert result.diverging_epoch == diverging
    assert (result.high_watermark, result.log_start_offset, result.max_offset) == (5, 0, 5)
    assert result.last_stable_offset == 5
    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
        assert "[0, 10]" in result.error.message


def test_offsets_for_leader_epoch() -> None:
    """KIP-101/KIP-279: the leader answers the largest epoch <= the requested one and where it ends."""
    p = leader()
    entries = (EpochEntry(1, 0), EpochEntry(3, 4))
    assert p.handle_offsets_for_leader_epoch(3, 2, entries) == (None, EpochEndOffset(1, 4))
    assert p.handle_offsets_for_leader_epoch(None, 3, entries) == (None, EpochEndOffset(3, 10))
    error, answer = p.handle_offsets_for_leader_epoch(2, 3, entries)
    assert error is not None and error.code == ErrorCode.FENCED_LEADER_EPOCH and answer.end_offset == -1


def test_follower_truncate_fully_restarts_at_leader_log_start() -> None:
    """A follower behind the leader's log start empties its log and starts there (retention moved on)."""
    p = Partition("t", 0, F1, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=2)
    p.become_follower(LEADER, 3, 7, REPLICAS, REPLICAS, 10, 4)
    p.on_local_truncate_fully(50)
    assert (p.log_start_offset, p.high_watermark, p.log_end_offset) == (50, 50, 50)
    p.invariants()


def test_become_follower_hw_not_below_log_start() -> None:
    p = Partition("t", 0, F1, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=2)
    p.become_follower(LEADER, 3, 7, REPLICAS, REPLICAS, 10, 0, log_start_offset=6)
    assert p.high_watermark == 6
    p.invariants()


def test_update_config_changes_min_insync_replicas() -> None:
    """min.insync.replicas is a topic config: a ConfigRecord changes acks=all admission at once."""
    p = leader(isr=(LEADER, F1), min_isr=2)
    assert p.check_append(ACKS_ALL) is None
    p.update_config(replica_lag_time_max_ms=LAG_MS, min_insync_replicas=3)
    error = p.check_append(ACKS_ALL)
    assert error is not None and error.code == ErrorCode.NOT_ENOUGH_REPLICAS


@dataclass(frozen=True)
class Registered:
    """A broker as the metadata image shows it (the fields Partition reads of a BrokerRegistration)."""

    broker_epoch: int
    fenced: bool = False
    in_controlled_shutdown: bool = False


BROKER_EPOCHS = {LEADER: 10, F1: 11, F2: 20}

ELIGIBILITY = [
    # F2's registration, the broker epoch of F2's fetches -> why it may not join (None: eligible)
    pytest.param(Registered(20), 20, None, id="eligible"),
    pytest.param(Registered(20, fenced=True), 20, "broker 3 is fenced", id="fenced"),
    pytest.param(Registered(20, in_controlled_shutdown=True), 20, "controlled shutdown", id="shutting-down"),
    pytest.param(None, 20, "broker 3 is not registered", id="unregistered"),
    pytest.param(
        Registered(20), 19, "fetched with broker epoch 19, its registration has 20", id="old-incarnation"
    ),
    pytest.param(Registered(20), 21, "fetched with broker epoch 21", id="epoch-not-in-image-yet"),
    pytest.param(Registered(20), NO_EPOCH, "fetched with broker epoch -1", id="no-epoch"),
]


@pytest.mark.parametrize(("registered", "fetch_epoch", "reason"), ELIGIBILITY)
def test_isr_expansion_requires_an_eligible_follower(registered, fetch_epoch: int, reason) -> None:
    """Kafka's isReplicaIsrEligible (KIP-903): a caught-up follower is proposed into the ISR only if
    the metadata image shows it unfenced, not shutting down, and registered with the broker epoch
    its fetches carry — otherwise the controller would refuse, once per fetch. Proposals carry each
    member's broker epoch: a follower's from its fetches, the leader's own from the image."""
    brokers = {LEADER: Registered(10), F1: Registered(11), F2: registered}
    p = Partition("t", 0, LEADER, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=2,
                  broker_lookup=brokers.get)  # fmt: skip
    assert p.become_leader(3, 7, (LEADER, F1), REPLICAS, 10, 10, 0)
    entries = (EpochEntry(1, 0), EpochEntry(3, 4))
    assert p.handle_follower_fetch(F1, 10, 3, 3, entries, 1, broker_epoch=11).isr_proposal is None
    for now_ms in (2, 3):  # every fetch of a caught-up follower: still no proposal while ineligible
        result = p.handle_follower_fetch(F2, 10, 3, 3, entries, now_ms, broker_epoch=fetch_epoch)
        assert result.error is None
        if reason is not None:
            assert result.isr_proposal is None and p.pending_isr is None
            assert reason in (p.isr_ineligibility(F2) or ""), p.isr_ineligibility(F2)
    if reason is None:
        assert p.pending_isr == AlterPartitionProposal(
            "t", 0, LEADER, 3, 7, ((LEADER, 10), (F1, 11), (F2, 20))
        )
        return
    current = max(20, fetch_epoch)  # the image catches up: unfenced, or the new incarnation shows
    brokers[F2] = Registered(current)
    result = p.handle_follower_fetch(F2, 10, 3, 3, entries, 4, broker_epoch=current)
    assert result.isr_proposal is not None and result.isr_proposal.new_isr_with_epochs[-1] == (F2, current)
    p.invariants()


# ---- issue 24 §1: a follower rejoins an ISR of {leader} under steady appends; min.insync.replicas ----


def steady_appends_then_fetch(p: Partition, replica: int, rounds: int, t0: int = 0, step_ms: int = 50):
    """Under steady producing: one append lands between every two fetches of ``replica``, which always
    fetches from the leader LEO its previous fetch saw. Returns the first ISR proposal, or None."""
    t = t0
    for _ in range(rounds):
        t += step_ms
        fetch_offset = p.log_end_offset  # what the previous fetch answer brought it to
        p.on_local_append(p.log_end_offset + 1, t)
        t += step_ms
        result = fetch(p, replica, fetch_offset, t)
        assert result.error is None
        if result.isr_proposal is not None:
            return result.isr_proposal
    return None


def test_caught_up_follower_rejoins_isr_of_leader_under_steady_appends() -> None:
    """Kafka's maybeIncrementLeaderHW/shouldWaitForReplicaToJoinIsr: with the ISR = {leader}, the HW
    waits for a follower that is caught up and eligible, so its LEO reaches the HW and it rejoins —
    even though an append lands between every two of its fetches. (Before: the HW jumped to the
    leader's LEO on every append and the follower, always one append behind, never rejoined.)"""
    p = leader(isr=(LEADER,), min_isr=1, leo=10, hw=10)
    proposal = steady_appends_then_fetch(p, F1, rounds=3)
    assert proposal is not None and proposal.new_isr == (LEADER, F1)
    # Meanwhile the HW never ran ahead of the caught-up follower, and acks=all waits for it (maximal ISR).
    assert p.high_watermark == p.remote_replica(F1).log_end_offset
    assert p.on_local_append(p.log_end_offset + 1, 1_000) is None


def test_hw_does_not_wait_for_a_follower_that_is_not_caught_up() -> None:
    """A follower outside the ISR that has not reached the leader's LEO within replica.lag.time.max.ms
    (or never fetched in this epoch) does not hold the HW back: an ISR of one moves it on every append."""
    p = leader(isr=(LEADER,), min_isr=1, leo=10, hw=10, now_ms=0)
    assert p.on_local_append(11, 1) == 10  # F1 and F2 never fetched in this epoch
    fetch(p, F1, 4, 2)  # far behind, never caught up (its lag window ended with the last epoch)
    assert p.on_local_append(12, LAG_MS + 10) == 11 and p.high_watermark == 12
    fetch(p, F1, 12, LAG_MS + 20)  # caught up (and proposed): from now on the HW waits for it
    assert p.remote_replica(F1).last_caught_up_time_ms == LAG_MS + 20
    assert p.on_local_append(13, LAG_MS + 30) is None and p.high_watermark == 12


def test_hw_does_not_wait_for_an_ineligible_follower() -> None:
    """A caught-up follower that may not join the ISR (fenced, shutting down, another incarnation:
    Kafka's isReplicaIsrEligible) is not waited for: it could hold the HW back without ever joining."""
    brokers = {LEADER: Registered(10), F1: Registered(11, in_controlled_shutdown=True), F2: None}
    p = Partition("t", 0, LEADER, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=1,
                  broker_lookup=brokers.get)  # fmt: skip
    assert p.become_leader(3, 7, (LEADER,), REPLICAS, 10, 10, 0)
    entries = (EpochEntry(1, 0), EpochEntry(3, 4))
    assert p.handle_follower_fetch(F1, 10, 3, 3, entries, 1, broker_epoch=11).isr_proposal is None
    assert p.on_local_append(11, 2) == 10 and p.high_watermark == 11
    brokers[F1] = Registered(11)  # the shutdown was cancelled: eligible again, so the HW waits
    assert p.on_local_append(12, 3) is None and p.high_watermark == 11
    result = p.handle_follower_fetch(F1, 11, 3, 3, entries, 4, broker_epoch=11)
    assert result.isr_proposal is not None and result.isr_proposal.new_isr == (LEADER, F1)


def test_hw_does_not_advance_while_isr_is_below_min_insync_replicas() -> None:
    """KAFKA-15583 (Kafka >= 3.7): while the committed ISR is smaller than min.insync.replicas, the HW
    does not move, even for acks=1 appends: consumers see nothing that has fewer copies than the
    topic asks for. The HW moves again once the ISR is back at min.insync.replicas."""
    p = leader(isr=(LEADER,), min_isr=2, leo=10, hw=5)
    assert p.maybe_increment_high_watermark(0) is None
    assert p.on_local_append(12, 1) is None and p.high_watermark == 5
    result = fetch(p, F1, 12, 2)  # caught up, in the maximal ISR once proposed; still below min
    assert result.isr_proposal is not None and p.high_watermark == 5
    assert p.handle_alter_partition_response(
        result.isr_proposal, ErrorCode.NONE, 3, 8, (LEADER, F1), now_ms=3
    ) == 5
    assert p.high_watermark == 12


def test_min_insync_replicas_above_the_replication_factor_is_capped() -> None:
    """Kafka's effectiveMinIsr: min.insync.replicas=5 on a topic with 3 replicas needs all 3 in the
    ISR (not the impossible 5, which would refuse every acks=all produce forever)."""
    p = leader(isr=REPLICAS, min_isr=5)
    assert p.effective_min_insync_replicas == 3
    assert p.check_append(ACKS_ALL) is None
    fetch(p, F1, 10, 1)
    fetch(p, F2, 10, 2)
    assert p.high_watermark == 10 and p.check_enough_replicas_reach_offset(10, 3).error.ok
    p.become_leader(3, 8, (LEADER, F1), REPLICAS, 10, 10, 3)
    error = p.check_append(ACKS_ALL)
    assert error is not None and error.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert "min.insync.replicas=5 (in effect 3: the replication factor)" in error.message
    assert p.on_local_append(11, 4) is None and p.high_watermark == 10  # below the effective minimum
