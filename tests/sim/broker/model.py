"""A step-by-step harness for explicit replication scenarios (test_broker_scenarios.py), message by message.

This is NOT the broker simulation: the seeded simulation runs the production code end to end
(tests/sim/broker/cluster.py: the real ReplicaManager, Log files with crash emulation, and the real
QuorumController). This harness keeps what the scenario tests need — deciding exactly which fetch
answer is lost or which broker learns the metadata when — and drives the broker's pure cores
(``Partition``, ``broker.replica.divergence``, ``broker.follower.fetcher``, ``broker.replica.delayed``)
with a small stand-in
for the rest:

- ``ReplicaLog``: an in-memory log (records, leader-epoch cache, HW checkpoint); a crash keeps it;
- ``Controller``: the committed partition state with KRaft's election and ISR rules restated for
  these scenarios (it may move leadership to any ISR member, which the real controller cannot be
  asked to do directly).

``Checker`` verifies after every step: each live ``Partition`` satisfies ``invariants()``; the data
below any replica's HW never changes; every member of the committed ISR holds the committed prefix;
every acknowledged acks=all record is in the committed prefix.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from broker.follower.fetcher import (
    FetchedPartition,
    FetcherConfig,
    FetchRequestPartition,
    FetchRequestPlan,
    ReplicaFetcher,
)
from broker.replica import divergence
from broker.replica.delayed import DelayedOperationPurgatory, DelayedProduce, ProduceWait
from broker.replica.divergence import EpochEntry
from broker.replica.follower_actions import (
    AppendRecords,
    BackedOff,
    Fenced,
    FetchAction,
    LocalLogView,
    TruncateTo,
)
from broker.replica.partition import (
    ACKS_ALL,
    AlterPartitionProposal,
    Partition,
    ProduceCheck,
    Role,
)
from proto.errors import ErrorCode
from proto.kafka_types import NO_EPOCH, NO_LEADER, TopicPartition

TOPIC = "sim"
LAG_MS = 500
MAX_FETCH_RECORDS = 4
TP: TopicPartition = (TOPIC, 0)
FETCHER_CONFIG = FetcherConfig(fetch_backoff_ms=20)
PRODUCE_TIMEOUT_MS = 1_500


@dataclass(frozen=True, slots=True)
class Record:
    epoch: int
    value: str


@dataclass
class ReplicaLog:
    """Durable state of one broker's replica: survives a process crash."""

    records: list[Record] = field(default_factory=list)
    epochs: tuple[EpochEntry, ...] = ()
    high_watermark_checkpoint: int = 0

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    def append(self, records: list[Record]) -> None:
        for record in records:
            if not self.epochs or record.epoch > self.epochs[-1].epoch:
                self.epochs = divergence.assign(self.epochs, record.epoch, self.log_end_offset)
            self.records.append(record)
        divergence.check_entries(self.epochs)

    def truncate_to(self, offset: int) -> None:
        del self.records[offset:]
        self.epochs = divergence.truncate_from_end(self.epochs, offset)

    def assign_leader_epoch(self, epoch: int) -> None:
        self.epochs = divergence.assign(self.epochs, epoch, self.log_end_offset)


@dataclass(frozen=True)
class InFlightFetch:
    follower_id: int
    fetcher: ReplicaFetcher
    request_id: int
    responses: dict[FetchedPartition] | None  # None: the leader was down


@dataclass
class ControllerState:
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


class Controller:
    def __init__(self, replicas: tuple[int, ...]) -> None:
        self.replicas = replicas
        self.fenced: set[int] = set()
        self.state = ControllerState(replicas[0], 0, 0, replicas)

    def _change(self, leader_id: int, isr: tuple[int, ...]) -> None:
        old = self.state
        epoch = old.leader_epoch + 1 if leader_id != old.leader_id else old.leader_epoch
        self.state = ControllerState(leader_id, epoch, old.partition_epoch + 1, isr)

    def _elect(self, isr: tuple[int, ...], current: int) -> int:
        if current != NO_LEADER and current not in self.fenced:
            return current
        return next((r for r in self.replicas if r in isr and r not in self.fenced), NO_LEADER)

    def fence(self, broker_id: int) -> None:
        self.fenced.add(broker_id)
        isr = self.state.isr
        if broker_id in isr and len(isr) > 1:
            isr = tuple(r for r in isr if r != broker_id)
        self._change(self._elect(isr, self.state.leader_id), isr)

    def unfence(self, broker_id: int) -> None:
        self.fenced.discard(broker_id)
        if self.state.leader_id == NO_LEADER:
            leader = self._elect(self.state.isr, NO_LEADER)
            if leader != NO_LEADER:
                self._change(leader, self.state.isr)

    def move_leader(self, broker_id: int) -> bool:
        """Preferred-leader style election: only to an unfenced ISR member."""
        if broker_id in self.state.isr and broker_id not in self.fenced and broker_id != self.state.leader_id:
            self._change(broker_id, self.state.isr)
            return True
        return False

    def alter_partition(self, leader_id: int, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]):
        state = self.state
        if leader_id != state.leader_id or leader_epoch != state.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if partition_epoch != state.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        if any(r in self.fenced for r in set(isr) - set(state.isr)):
            return ErrorCode.INELIGIBLE_REPLICA
        self.state = ControllerState(leader_id, leader_epoch, state.partition_epoch + 1, isr)
        return ErrorCode.NONE


class Broker:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.log = ReplicaLog()
        self.alive = True
        self.partition = self._new_partition()
        self.produce_purgatory = DelayedOperationPurgatory()  # parked acks=all produces (volatile)
        self.fetcher: ReplicaFetcher | None = None
        self.incarnation = 1  # its broker epoch: a restart registers again with a newer one
        self.isolated = False  # alive but cut off from the controller: fenced, a possible zombie leader

    def _new_partition(self) -> Partition:
        return Partition(TOPIC, 0, self.broker_id, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=2)

    def crash(self) -> None:
        self.alive = False
        self.produce_purgatory = DelayedOperationPurgatory()  # the clients see their connections drop
        self.fetcher = None

    def restart(self) -> None:
        self.alive = True
        self.isolated = False
        self.incarnation += 1
        self.partition = self._new_partition()

    def local_view(self, _tp: TopicPartition) -> LocalLogView:
        return LocalLogView(self.log.epochs, self.log.log_end_offset, self.partition.high_watermark)

    def recovered_high_watermark(self) -> int:
        return min(self.log.high_watermark_checkpoint, self.log.log_end_offset)


class Cluster:
    """Three brokers, a controller and the drivers' steps. ``truncate_to_high_watermark`` replaces
    truncation by leader epoch with the pre-KIP-101 rule, to show that the checker catches it."""

    def __init__(
        self, replicas: tuple[int, ...] = (1, 2, 3), truncate_to_high_watermark: bool = False
    ) -> None:
        self.replicas = replicas
        self.brokers = {b: Broker(b) for b in replicas}
        self.controller = Controller(replicas)
        self.now_ms = 0
        self.next_value = 0
        self.acked: dict[int, str] = {}
        self.alter_partition_inflight: list[AlterPartitionProposal] = []
        self.network: list[InFlightFetch] = []  # fetch responses not yet delivered
        self.trace: list[str] = []
        self.truncate_to_high_watermark = truncate_to_high_watermark
        self.checker = Checker(self)
        for broker_id in replicas:
            self.sync_metadata(broker_id)

    def note(self, event: str) -> None:
        self.trace.append(f"{self.now_ms} {event}")

    # ---- metadata ---------------------------------------------------------------------------------

    def sync_metadata(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if not broker.alive or broker.isolated:
            return
        s, p, log = self.controller.state, broker.partition, broker.log
        if s.leader_id == broker_id:
            if p.role is not Role.LEADER or s.leader_epoch > p.leader_epoch:
                log.assign_leader_epoch(s.leader_epoch)
            hw = max(p.high_watermark, broker.recovered_high_watermark())
            p.become_leader(
                s.leader_epoch, s.partition_epoch, s.isr, self.replicas, log.log_end_offset, hw, self.now_ms
            )
            broker.fetcher = None
            p.maybe_increment_high_watermark(self.now_ms)
        else:
            hw = max(p.high_watermark, broker.recovered_high_watermark())
            is_new = p.become_follower(
                s.leader_id, s.leader_epoch, s.partition_epoch, s.isr, self.replicas, log.log_end_offset, hw
            )
            if is_new:
                self._restart_fetching(broker)
        self._complete_acks(broker)  # HW, ISR or leadership changed: parked produces may be done
        self.note(f"sync b{broker_id} {p.role.value} e{p.leader_epoch} isr={sorted(p.isr)}")

    # ---- data path --------------------------------------------------------------------------------

    def produce(self, broker_id: int, acks: int) -> ErrorCode:
        broker = self.brokers[broker_id]
        p = broker.partition
        error = p.check_append(acks) if broker.alive else None
        if not broker.alive or error is not None:
            return error.code if error else ErrorCode.NOT_LEADER_OR_FOLLOWER
        value = f"v{self.next_value}"
        self.next_value += 1
        broker.log.append([Record(p.leader_epoch, value)])
        offset = broker.log.log_end_offset - 1
        self.note(f"produce b{broker_id} acks={acks} {value}@{offset}")
        if p.on_local_append(broker.log.log_end_offset, self.now_ms) is not None:
            self._complete_acks(broker)
        if acks == ACKS_ALL:
            operation = DelayedProduce(
                self.now_ms + PRODUCE_TIMEOUT_MS, {TP: ProduceWait(offset + 1, p.leader_epoch)},
                self._produce_check(broker), lambda outcomes: self._answer(offset, value, outcomes),
            )  # fmt: skip
            broker.produce_purgatory.try_complete_else_watch(operation)
        return ErrorCode.NONE

    @staticmethod
    def _produce_check(broker: Broker):
        def check(_tp: object, required_offset: int, leader_epoch: int) -> ProduceCheck:
            return broker.partition.check_enough_replicas_reach_offset(required_offset, leader_epoch)

        return check

    def _complete_acks(self, broker: Broker) -> None:
        """Kafka completes delayed produces when the HW, the ISR or the leadership changes."""
        broker.produce_purgatory.check_and_complete(TP)

    def expire_produces(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if broker.alive:
            broker.produce_purgatory.expire(self.now_ms)

    def _answer(self, offset: int, value: str, outcomes: dict) -> None:
        code = outcomes[TP].code
        if code == ErrorCode.NONE:
            self.acked[offset] = value
            self.note(f"ack {value}@{offset}")
        else:
            self.note(f"produce {value}@{offset} answered {code.name}")

    def _restart_fetching(self, broker: Broker) -> None:
        """Kafka's addPartitions after become_follower: fetch from the local LEO and latest epoch."""
        p = broker.partition
        if p.leader_id == NO_LEADER:
            broker.fetcher = None
            return
        if broker.fetcher is None or broker.fetcher.leader_id != p.leader_id:
            broker.fetcher = ReplicaFetcher(p.leader_id, broker.broker_id, broker.incarnation, FETCHER_CONFIG)
        latest = divergence.latest_epoch(broker.log.epochs)
        broker.fetcher.add_partition(TP, broker.log.log_end_offset, latest, p.leader_epoch)

    def send_fetch(self, follower_id: int) -> InFlightFetch | None:
        """The follower sends its next Fetch; the leader handles it at once, the answer travels."""
        follower = self.brokers[follower_id]
        fetcher = follower.fetcher if follower.alive else None
        plan = fetcher.build_request(self.now_ms) if fetcher is not None else None
        if fetcher is None or plan is None:
            return None
        leader = self.brokers[plan.leader_id]
        responses = None
        if leader.alive:
            responses = {
                part.topic_partition: self._serve_fetch(leader, plan, part) for part in plan.partitions
            }
        flight = InFlightFetch(follower_id, fetcher, plan.request_id, responses)
        self.network.append(flight)
        return flight

    def _serve_fetch(
        self, leader: Broker, plan: FetchRequestPlan, part: FetchRequestPartition
    ) -> FetchedPartition:
        lp = leader.partition
        result = lp.handle_follower_fetch(
            plan.replica_id,
            part.fetch_offset,
            part.last_fetched_epoch,
            part.current_leader_epoch,
            leader.log.epochs,
            self.now_ms,
            plan.broker_epoch,
        )
        if result.high_watermark_advanced_from is not None:
            self._complete_acks(leader)
        if result.isr_proposal is not None:
            self.alter_partition(leader.broker_id)
        fields = (result.high_watermark, result.log_start_offset, result.log_end_offset)
        if result.error is not None:
            return FetchedPartition(result.error.code, *fields, message=result.error.message)
        if result.diverging_epoch is not None:
            return FetchedPartition(ErrorCode.NONE, *fields, diverging_epoch=result.diverging_epoch)
        end = min(result.log_end_offset, part.fetch_offset + MAX_FETCH_RECORDS)
        records = (part.fetch_offset, leader.log.records[part.fetch_offset : end])  # batches carry offsets
        return FetchedPartition(ErrorCode.NONE, *fields, records=records)

    def deliver(self, flight: InFlightFetch, lose: bool = False) -> str:
        """The follower receives (or, with ``lose``, never receives) an answer."""
        self.network.remove(flight)
        follower = self.brokers[flight.follower_id]
        fetcher = flight.fetcher
        if not follower.alive or follower.fetcher is not fetcher:
            return "stale-fetcher"
        if lose or flight.responses is None:
            fetcher.handle_request_failure(flight.request_id, self.now_ms)
            return "lost"
        actions = fetcher.handle_response(
            flight.request_id, flight.responses, follower.local_view, self.now_ms
        )
        outcomes = [self._apply(follower, action) for action in actions]
        return outcomes[0] if outcomes else "ignored"

    def fetch(self, follower_id: int, lose_response: bool = False) -> str:
        """One whole round trip: send, then deliver at once."""
        flight = self.send_fetch(follower_id)
        return "idle" if flight is None else self.deliver(flight, lose=lose_response)

    def _apply(self, follower: Broker, action: FetchAction) -> str:
        p, log, fetcher = follower.partition, follower.log, follower.fetcher
        assert fetcher is not None
        if isinstance(action, AppendRecords):
            base_offset, records = action.records  # type: ignore[misc]
            # storage's append_as_follower refuses a gap or overlap (UnexpectedAppendOffsetError)
            assert base_offset == log.log_end_offset, f"append at {base_offset}, LEO {log.log_end_offset}"
            log.append(list(records))
            p.on_local_append(log.log_end_offset, self.now_ms)
            p.update_follower_high_watermark(action.leader_high_watermark)
            outcome = "ok"
            self.note(
                f"fetch b{follower.broker_id}<-b{fetcher.leader_id} +{len(records)} hw={p.high_watermark}"
            )
        elif isinstance(action, TruncateTo):
            offset = p.high_watermark if self.truncate_to_high_watermark else action.offset
            log.truncate_to(offset)
            p.on_local_truncate(offset)
            outcome = "truncated"
            self.note(f"truncate b{follower.broker_id} to {offset} ({action.reason})")
        elif isinstance(action, (Fenced, BackedOff)):
            outcome = action.code.name if isinstance(action, BackedOff) else "FENCED_LEADER_EPOCH"
            self.note(f"fetch b{follower.broker_id} {outcome}")
        else:
            raise AssertionError(f"unexpected fetch action {action} (no retention in this model)")
        fetcher.update_position(TP, log.log_end_offset, divergence.latest_epoch(log.epochs))
        fetcher.invariants()
        return outcome

    def restart_truncation(self, broker_id: int) -> None:
        """Pre-KIP-101 brokers truncated to the HW on restart; with epochs there is nothing to do."""
        if self.truncate_to_high_watermark:
            broker = self.brokers[broker_id]
            broker.log.truncate_to(broker.recovered_high_watermark())

    # ---- ISR and failures --------------------------------------------------------------------------

    def alter_partition(self, leader_id: int) -> None:
        """Send the pending proposal; the controller sees it in a later ``deliver_alter_partition``."""
        proposal = self.brokers[leader_id].partition.pending_isr
        assert proposal is not None
        self.alter_partition_inflight.append(proposal)
        self.note(f"propose b{leader_id} isr={list(proposal.new_isr)}")

    def deliver_alter_partition(self) -> None:
        """The controller decides the oldest in-flight AlterPartition and answers its leader."""
        if not self.alter_partition_inflight:
            return
        proposal = self.alter_partition_inflight.pop(0)
        code = self.controller.alter_partition(
            proposal.leader_id, proposal.leader_epoch, proposal.partition_epoch, proposal.new_isr
        )
        s, broker = self.controller.state, self.brokers[proposal.leader_id]
        self.note(f"alter-partition b{proposal.leader_id} {list(proposal.new_isr)} -> {code.name}")
        if broker.alive:
            p = broker.partition
            old_hw = p.handle_alter_partition_response(
                proposal, code, s.leader_epoch, s.partition_epoch, s.isr, now_ms=self.now_ms
            )
            if old_hw is not None:
                self._complete_acks(broker)

    def isr_tick(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if broker.alive and broker.partition.maybe_shrink_isr(self.now_ms) is not None:
            self.alter_partition(broker_id)

    def checkpoint(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if broker.alive:
            broker.log.high_watermark_checkpoint = broker.partition.high_watermark

    def crash(self, broker_ids: tuple[int, ...]) -> None:
        for broker_id in broker_ids:
            self.brokers[broker_id].crash()
        for broker_id in broker_ids:
            self.controller.fence(broker_id)
        self.note(f"crash {list(broker_ids)} -> {self.controller.state}")

    def bounce(self, broker_id: int) -> None:
        """Crash and restart within the session timeout: the controller never fences the broker."""
        self.brokers[broker_id].crash()
        self.note(f"bounce b{broker_id}")
        self.restart(broker_id)

    def isolate(self, broker_id: int) -> None:
        """The broker loses the controller (missed heartbeats) but keeps running on its stale view:
        the controller fences it, and if it led, it is now a zombie leader until it rejoins."""
        broker = self.brokers[broker_id]
        if not broker.alive or broker.isolated:
            return
        broker.isolated = True
        self.controller.fence(broker_id)
        self.note(f"isolate b{broker_id} -> {self.controller.state}")

    def rejoin(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if not broker.alive or not broker.isolated:
            return
        broker.isolated = False
        self.controller.unfence(broker_id)
        self.sync_metadata(broker_id)
        self.note(f"rejoin b{broker_id} -> {self.controller.state}")

    def restart(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        broker.restart()
        self.restart_truncation(broker_id)
        self.controller.unfence(broker_id)
        self.sync_metadata(broker_id)
        self.note(f"restart b{broker_id} leo={broker.log.log_end_offset} -> {self.controller.state}")

    def advance(self, ms: int) -> None:
        self.now_ms += ms

    def trace_hash(self) -> str:
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()


class Checker:
    """Safety checks after every event (see the module docstring)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.committed: list[Record] = []

    def check(self) -> None:
        c = self.cluster
        for broker in c.brokers.values():
            if not broker.alive:
                continue
            broker.partition.invariants()
            hw = broker.partition.high_watermark
            prefix = broker.log.records[:hw]
            common = min(len(prefix), len(self.committed))
            assert prefix[:common] == self.committed[:common], (
                f"b{broker.broker_id} changed committed data below its HW {hw}: "
                f"{prefix[:common]} != {self.committed[:common]}"
            )
            if hw > len(self.committed):
                self.committed = list(prefix)
        for broker_id in c.controller.state.isr:
            records = c.brokers[broker_id].log.records
            assert records[: len(self.committed)] == self.committed, (
                f"ISR member b{broker_id} lacks committed data: {records} vs {self.committed}"
            )
        for offset, value in c.acked.items():
            assert offset < len(self.committed) and self.committed[offset].value == value, (
                f"acknowledged {value}@{offset} lost: committed {self.committed}"
            )


def heal(c: Cluster, rounds: int = 200) -> None:
    while c.network:
        c.deliver(c.network[0])
        c.checker.check()
    for broker_id in c.replicas:
        if not c.brokers[broker_id].alive:
            c.restart(broker_id)
        c.rejoin(broker_id)
        c.checker.check()
    for _ in range(rounds):
        for broker_id in c.replicas:
            c.sync_metadata(broker_id)
            c.fetch(broker_id)
            c.isr_tick(broker_id)
            c.deliver_alter_partition()
            c.checker.check()
        c.advance(50)
        if converged(c):
            return
    raise AssertionError(f"no convergence after {rounds} rounds: {describe(c)}")


def converged(c: Cluster) -> bool:
    s = c.controller.state
    if s.leader_id == NO_LEADER or set(s.isr) != set(c.replicas):
        return False
    logs = [c.brokers[b].log.records for b in c.replicas]
    hws = [c.brokers[b].partition.high_watermark for b in c.replicas]
    return all(log == logs[0] for log in logs) and all(hw == len(logs[0]) for hw in hws)


def describe(c: Cluster) -> str:
    parts = [str(c.controller.state)]
    for b in c.replicas:
        broker = c.brokers[b]
        p = broker.partition
        parts.append(
            f"b{b} alive={broker.alive} {p.role.value} e{p.leader_epoch} leo={broker.log.log_end_offset} "
            f"hw={p.high_watermark} epochs={broker.log.epochs}"
        )
    return "; ".join(parts)


__all__ = ["NO_EPOCH", "Cluster", "Record", "describe", "heal"]
