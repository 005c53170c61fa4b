"""The broker simulation's invariants, checked from outside after every event (tests/sim/broker/cluster.py).

It reads what the real code holds — each broker's ``Log`` files (batch headers: offset, leader
epoch, and the max timestamp, which the simulation sets to a unique value id), its ``Partition`` (HW,
role, leader epoch) — and the controller's committed partition state. Rules (issue 14 §2):

- *Committed prefix.* Every record below a replica's HW is committed; all replicas agree on what
  is committed at each offset (every replica's log below its HW is a prefix of the leader's).
- *Nothing committed is lost while a replica that held it survives.* A replica that held a
  committed record never loses it, except through a power loss that dropped it before it was
  fsynced (Kafka's durability is replication, not fsync) — such a replica is *amnesic* until it
  holds the committed prefix again, and if the controller makes an amnesic replica the leader
  (it can: it is still in the ISR; KIP-966 closes that gap in Kafka 4), or elects a leader
  uncleanly, what it lacks is legitimately gone and is forgotten here. A replica outside the ISR
  that still follows a leader the controller has replaced (a zombie of an older epoch) truncates, on
  that leader's word, what lies above its own HW: records the new leader committed there, after the
  old one lost its leadership, were never the old epoch's; such a replica is amnesic too.
- *Acknowledged acks=all writes* are committed at their offset, with their value, unless forgotten
  as above.
- *HW* never decreases within a leader epoch (on the epoch's leader); ``Partition.invariants()`` and
  ``ReplicaManager.invariants()`` hold; a consumer never gets a record at or above the HW and is told
  OFFSET_OUT_OF_RANGE only outside ``[log start, LEO]``.
- *Progress.* A follower's divergence handling never repeats the same truncation without effect
  (issue 14 defect 1); after the faults stop, the replicas converge: one leader, every replica in
  the ISR, identical logs, HW = LEO everywhere (``check_converged``). Then (``Sim._bounce_under_load``,
  issue 24 §1): followers paused out of the ISR rejoin it within ``REJOIN_LIMIT_MS`` while appends
  keep arriving, and once writes stop no follower fetches more than once per fetch wait (a fetch
  session that kept a deleted topic answers at once, in a loop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.replica.follower_actions import AppendRecords, FetchAction, TruncateFullyAndStartAt, TruncateTo
from broker.replica.partition import Partition, Role
from broker.replica.replica_requests import FetchResult
from metadata.image import PartitionRegistration
from proto.errors import ErrorCode
from proto.kafka_types import NO_LEADER
from storage.batch_header import iter_batches
from storage.log import Log

if TYPE_CHECKING:
    from tests.sim.broker.cluster import Sim, SimBroker

NO_PROGRESS_LIMIT = 20  # identical no-op truncations in a row that count as a livelock


class SimViolation(AssertionError):
    """An invariant of the broker simulation does not hold (the message says which, with values)."""


Entry = tuple[int, int]  # (value id, leader epoch) of the record at one offset


def read_entries(plog: Log, start: int) -> list[Entry]:
    """The records of ``plog`` from offset ``start`` as (value id, epoch), one per offset (one record
    per batch), read from its files."""
    out: list[Entry] = []
    offset, end = start, plog.log_end_offset
    while offset < end:
        data = plog.read(offset, 1 << 20)
        if not data:
            break
        for _, header in iter_batches(data, validate=False):
            assert header.base_offset == start + len(out), (
                f"{plog.name}: batch at {header.base_offset}, {start + len(out)} expected"
            )
            out.append((header.max_timestamp, header.partition_leader_epoch))
            offset = header.next_offset
    return out


def log_entries(plog: Log) -> list[Entry]:
    assert plog.log_start_offset == 0, (
        f"{plog.name}: no retention here, yet log start {plog.log_start_offset}"
    )
    return read_entries(plog, 0)


class Checker:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.committed: list[int] = []  # value id at each committed offset
        self.acked: dict[int, int] = {}  # offset -> value id of every acknowledged acks=all write
        self.unconfirmed: set[int] = set()  # acknowledged offsets not yet seen committed
        self.batch_bytes: dict[int, int] = {}
        # Per broker: its log as last read (refreshed from the first offset the simulation says may
        # have changed), and how many leading committed records it holds (``verified``).
        self.entries: dict[int, list[Entry]] = {}
        self.verified: dict[int, int] = {}
        self.power_lost: set[int] = set()  # brokers not yet looked at since a power loss
        self.amnesia: dict[int, int] = {}  # broker -> first committed offset it may lack
        self.high_watermark_floor: dict[int, int] = {}  # leader epoch -> highest HW its leader had
        self.no_progress: dict[int, tuple[object, int]] = {}  # broker -> (last truncation state, count)
        self.forgotten = 0  # records forgotten after an amnesic or unclean leader took over
        self.lossy_epoch = -1  # the latest leader epoch whose leader lacked committed history
        self.last_high_watermark: dict[int, int] = {}  # broker -> its HW at the previous check
        self.stale_truncation: set[int] = set()  # brokers truncated by a replaced leader in this event
        self.epoch_leaders: dict[int, int] = {}  # leader epoch -> the leader the controller elected

    # ---- events reported by the simulation --------------------------------------------------------

    def produced(self, value_id: int, size_bytes: int) -> None:
        self.batch_bytes[value_id] = size_bytes

    def acknowledged(self, offset: int, value_id: int, broker_id: int, leader_epoch: int) -> None:
        if leader_epoch < self.lossy_epoch:
            # A zombie leader of an epoch older than one whose leader legitimately lacked history (an
            # unclean or amnesic election) still acknowledges with its own ISR: that write is lost too.
            self.sim.note(f"ack v{value_id}@{offset} by zombie b{broker_id} of epoch {leader_epoch} (lost)")
            return
        self.acked[offset] = value_id
        self.unconfirmed.add(offset)
        self.sim.note(f"ack v{value_id}@{offset} by b{broker_id}")

    def power_loss(self, broker_id: int) -> None:
        self.power_lost.add(broker_id)

    def partition_changed(self, old: PartitionRegistration | None, new: PartitionRegistration) -> None:
        self.epoch_leaders[new.leader_epoch] = new.leader
        if old is not None and new.leader != NO_LEADER and new.leader not in old.isr:
            self.sim.note(f"unclean election of b{new.leader} (ISR was {list(old.isr)})")
            self.amnesia[new.leader] = 0
            # The others (zombie leaders of older epochs included) may hold, even below their HW, a
            # history the new leader never had: each is amnesic until it holds a record committed in
            # the new one. A zombie's acknowledgements are lost with it.
            for broker_id in self.sim.brokers:
                if broker_id != new.leader:
                    self.amnesia[broker_id] = max(len(self.committed), self.amnesia.get(broker_id, 0))
            self.lossy_epoch = max(self.lossy_epoch, new.leader_epoch)

    def fetch_applied(self, broker: SimBroker, action: FetchAction) -> None:
        """Defect 1's signature: the same truncation answered again and again with no effect."""
        broker_id = broker.broker_id
        if isinstance(action, AppendRecords) and action.records:
            self.no_progress.pop(broker_id, None)
            return
        if isinstance(action, TruncateTo | TruncateFullyAndStartAt) and self._follows_replaced_leader(broker):
            self.stale_truncation.add(broker_id)
        if not isinstance(action, TruncateTo):
            return
        plog = broker.manager.logs.get(action.topic_partition)
        if plog is None:
            return
        state = (action.offset, action.reason, plog.log_end_offset, plog.leader_epoch_cache.entries)
        last, count = self.no_progress.get(broker_id, (None, 0))
        count = count + 1 if state == last else 1
        self.no_progress[broker_id] = (state, count)
        if count >= NO_PROGRESS_LIMIT:
            raise SimViolation(
                f"b{broker_id}: follower truncation makes no progress: {count} answers in a row "
                f"({action.reason}) left LEO {plog.log_end_offset} and the epoch cache "
                f"{list(plog.leader_epoch_cache.entries)} unchanged, so the leader never records its LEO"
            )

    def _follows_replaced_leader(self, broker: SimBroker) -> bool:
        """``broker`` is outside the controller's ISR and follows a leader of an older epoch."""
        partition = broker.manager.partitions.get(("sim", 0))
        reg = self.sim.controller.partition()
        return (
            partition is not None
            and reg is not None
            and partition.leader_epoch < reg.leader_epoch
            and broker.broker_id not in reg.isr
        )

    def consumed(self, leader_id: int, position: int, result: FetchResult) -> int:
        """Check a consumer fetch answer; returns the consumer's next position."""
        if result.code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if result.log_start_offset <= position <= result.log_end_offset:
                raise SimViolation(
                    f"consumer at {position} told OFFSET_OUT_OF_RANGE by b{leader_id} although its log "
                    f"spans [{result.log_start_offset}, {result.log_end_offset}] (HW {result.high_watermark})"
                )
            return max(0, result.high_watermark)
        if result.code != ErrorCode.NONE or not result.records:
            return position
        # A fetch parked on a leader that then lost an unclean (or amnesic) election without knowing
        # it is answered by a zombie: its HW counts its own ISR, so what it serves proves no commit.
        partition = self.sim.brokers[leader_id].manager.partitions.get(("sim", 0))
        zombie = partition is not None and partition.leader_epoch < self.lossy_epoch
        for _, header in iter_batches(result.records, validate=False):
            if header.last_offset >= result.high_watermark:
                raise SimViolation(
                    f"consumer read offset {header.last_offset} from b{leader_id}, at or above its HW "
                    f"{result.high_watermark}"
                )
            if header.base_offset <= len(self.committed) and not zombie:  # else: an amnesic leader's
                self._commit(
                    header.base_offset, header.max_timestamp, f"read by a consumer from b{leader_id}"
                )
            position = header.next_offset
        return position

    # ---- the checks after every event -------------------------------------------------------------

    def check(self) -> None:
        for broker in self.sim.brokers.values():
            if broker.touched:
                broker.touched = False
                if broker.alive:
                    self._check_broker(broker)
        for offset in list(self.unconfirmed):
            self._check_acked(offset)
        self.stale_truncation.clear()

    def _refresh(self, broker: SimBroker, plog: Log) -> list[Entry]:
        """Re-read the log from the first offset that may have changed since the last look."""
        broker_id = broker.broker_id
        changed_from = broker.log_changed_from
        cached = self.entries.get(broker_id, [])
        if changed_from is None:
            return cached
        broker.log_changed_from = None
        changed_from = min(changed_from, len(cached), plog.log_end_offset)
        entries = cached[:changed_from] + read_entries(plog, changed_from)
        self.entries[broker_id] = entries
        verified = self.verified.get(broker_id, 0)
        if verified > changed_from:
            keep = changed_from
            while keep < min(verified, len(entries)) and entries[keep][0] == self.committed[keep]:
                keep += 1
            if keep < verified:
                self._lost(broker_id, keep, verified, entries)
            self.verified[broker_id] = keep
        return entries

    def _lost(self, broker_id: int, first: int, end: int, entries: list[Entry]) -> None:
        """``broker_id`` no longer holds committed offsets ``[first, end)`` it held before."""
        if broker_id in self.power_lost or broker_id in self.amnesia:
            self.amnesia[broker_id] = min(first, self.amnesia.get(broker_id, first))
            self.sim.note(f"b{broker_id} lost committed records [{first}, {end}) (amnesic)")
            return
        if broker_id in self.stale_truncation and first >= self.last_high_watermark.get(broker_id, 0):
            # Kafka's guarantee covers the ISR: this replica is outside it and truncated, above its own
            # HW, on the word of a leader the controller replaced (the records were committed by the
            # new leader after the old one had lost its leadership). It refetches them from the new one.
            self.amnesia[broker_id] = first
            self.sim.note(
                f"b{broker_id} (outside the ISR) truncated committed records [{first}, {end}) above its HW "
                "on the word of a replaced leader (amnesic)"
            )
            return
        have = entries[first] if first < len(entries) else f"nothing (LEO {len(entries)})"
        value_id = self.committed[first]
        raise SimViolation(
            f"b{broker_id} lost committed v{value_id}@{first} (a {self.batch_bytes.get(value_id)}-byte "
            f"batch; it held [0, {end})) without a power loss or an unclean election: it now has {have}"
        )

    def _check_broker(self, broker: SimBroker) -> None:
        manager = broker.manager
        manager.invariants()
        plog = manager.logs.get(("sim", 0))
        partition = manager.partitions.get(("sim", 0))
        if plog is None or partition is None:
            return
        broker_id = broker.broker_id
        if broker.log_changed_from is not None:
            plog.invariants()
        entries = self._refresh(broker, plog)
        verified = self._extend_verified(broker_id, entries, partition)
        if broker_id in self.power_lost:
            self.power_lost.discard(broker_id)
            # It may have held more than the checker saw it hold (it was not looked at while it
            # fetched them, e.g. paused right after): whatever it lacks now went with the power —
            # including records not committed yet that a leader's HW may still count it for, on a
            # fetch it sent before the power loss (seed 51832).
            self.amnesia[broker_id] = min(verified, self.amnesia.get(broker_id, verified))
            self.sim.note(f"b{broker_id} may lack records from {verified} after the power loss")
        self.last_high_watermark[broker_id] = partition.high_watermark
        if partition.role is Role.LEADER:
            self._check_leader(broker_id, partition.leader_epoch, partition.high_watermark, verified)
        if broker_id in self.amnesia:
            return
        high_watermark = partition.high_watermark
        if verified < min(high_watermark, len(self.committed)):
            raise SimViolation(
                f"b{broker_id} has v{entries[verified][0]} at offset {verified} below its HW "
                f"{high_watermark}, where v{self.committed[verified]} was committed"
            )
        for offset in range(len(self.committed), high_watermark):
            self._commit(offset, entries[offset][0], f"below the HW {high_watermark} of b{broker_id}")
        self._extend_verified(broker_id, entries, partition)

    def _extend_verified(self, broker_id: int, entries: list[Entry], partition: Partition) -> int:
        verified = self.verified.get(broker_id, 0)
        limit = min(len(entries), len(self.committed))
        while verified < limit and entries[verified][0] == self.committed[verified]:
            verified += 1
        self.verified[broker_id] = verified
        if (
            broker_id in self.amnesia
            and verified == len(self.committed) > self.amnesia[broker_id]
            and partition.leader_epoch >= self.lossy_epoch
            and partition.high_watermark <= verified
        ):
            # It holds the committed prefix again, including a record committed after what it lost
            # (or after a forgotten history): an ordinary replica from now on. Not while it is still
            # in an epoch older than the latest lossy election (a zombie leader, or a follower of
            # one), nor while its HW claims more than that prefix (an old leader's HW kept until
            # its truncation): the record it holds may come from the old history, which happens to
            # agree there, and such a HW (a zombie's, counting its own ISR) commits nothing.
            del self.amnesia[broker_id]
        return verified

    def _check_leader(self, broker_id: int, epoch: int, high_watermark: int, verified: int) -> None:
        floor = self.high_watermark_floor.get(epoch, 0)
        if high_watermark < floor:
            raise SimViolation(
                f"leader b{broker_id} of epoch {epoch}: HW fell from {floor} to {high_watermark}"
            )
        self.high_watermark_floor[epoch] = high_watermark
        # Elected for this epoch, and no other broker has led since (the partition went offline at
        # most, its ISR still this broker): not a zombie whose successor holds the history.
        elected = self.epoch_leaders.get(epoch) == broker_id and all(
            leader in (broker_id, NO_LEADER) for e, leader in self.epoch_leaders.items() if e > epoch
        )
        if broker_id in self.amnesia and elected:  # not a zombie of an older epoch: the real leader
            # An amnesic (or uncleanly elected) replica leads: what it lacks is gone for good.
            if verified < len(self.committed):
                self._forget_from(verified, f"b{broker_id} leads epoch {epoch} without it")
            else:
                # It lacks nothing committed yet, but a leader of an older epoch that has not heard of
                # this one may still count, towards its HW, a fetch this replica sent before it lost
                # what it fetched (seed 51832): what that zombie commits or acknowledges from here is
                # not this epoch's history, and the others may hold it until they reconcile.
                self._mark_others_amnesic(broker_id, len(self.committed))
            self.lossy_epoch = max(self.lossy_epoch, epoch)
            self.amnesia.pop(broker_id, None)

    def _commit(self, offset: int, value_id: int, why: str) -> None:
        if offset < len(self.committed):
            if self.committed[offset] != value_id:
                raise SimViolation(
                    f"offset {offset} committed as v{self.committed[offset]}, but v{value_id} is {why}"
                )
            return
        if offset != len(self.committed):
            raise SimViolation(f"offset {offset} committed ({why}) before offset {len(self.committed)}")
        self.committed.append(value_id)

    def _forget_from(self, offset: int, why: str) -> None:
        lost = len(self.committed) - offset
        self.forgotten += lost
        self.sim.note(f"forget {lost} committed records from offset {offset}: {why}")
        del self.committed[offset:]
        for acked_offset in [o for o in self.acked if o >= offset]:
            del self.acked[acked_offset]
            self.unconfirmed.discard(acked_offset)
        # Every other replica may still hold the forgotten history, even below its HW, until it
        # reconciles with the new leader: treat it as amnesic until it holds the new prefix.
        for broker_id in self.sim.brokers:
            self.verified[broker_id] = min(self.verified.get(broker_id, 0), offset)
        self._mark_others_amnesic(None, offset)

    def _mark_others_amnesic(self, leader_id: int | None, offset: int) -> None:
        for broker_id in self.sim.brokers:
            if broker_id != leader_id:
                # reconciled = holds a record committed after ``offset`` (hence max, not min)
                self.amnesia[broker_id] = max(offset, self.amnesia.get(broker_id, offset))

    def _check_acked(self, offset: int) -> None:
        value_id = self.acked[offset]
        committed = self.committed[offset] if offset < len(self.committed) else None
        if committed != value_id:
            raise SimViolation(
                f"acknowledged acks=all write v{value_id}@{offset} is not committed there "
                f"(committed: {'nothing' if committed is None else f'v{committed}'})"
            )
        self.unconfirmed.discard(offset)

    # ---- liveness -----------------------------------------------------------------------------------

    def check_converged(self) -> None:
        """After the healing phase: one leader, full ISR, identical logs, HW = LEO everywhere."""
        sim = self.sim
        topic = sim.controller.core.image.topic_by_name("sim")
        problems = []
        if topic is None:
            raise SimViolation("the topic was never created")
        reg = topic.partitions[0]
        if reg.leader == NO_LEADER:
            problems.append(f"no leader: {reg}")
        if set(reg.isr) != set(reg.replicas):
            missing = sorted(set(reg.replicas) - set(reg.isr))
            problems.append(
                f"followers {missing} never rejoined the ISR {list(reg.isr)} within {sim.options.heal_ms} ms "
                "of healthy fetching from a live leader"
            )
        logs = {}
        for broker in sim.brokers.values():
            plog = broker.manager.logs.get(("sim", 0)) if broker.alive else None
            partition = broker.manager.partitions.get(("sim", 0)) if broker.alive else None
            if plog is None or partition is None:
                problems.append(f"b{broker.broker_id} hosts no replica")
                continue
            logs[broker.broker_id] = log_entries(plog)
            if partition.high_watermark != plog.log_end_offset:
                problems.append(
                    f"b{broker.broker_id}: HW {partition.high_watermark} != LEO {plog.log_end_offset}"
                )
        if len({tuple(entries) for entries in logs.values()}) > 1:
            problems.append("logs differ: " + "; ".join(f"b{b}: {len(e)} records" for b, e in logs.items()))
        if problems:
            raise SimViolation("no convergence: " + "; ".join(problems) + "\n  state: " + self.describe())

    def describe(self) -> str:
        parts = []
        for broker in self.sim.brokers.values():
            if not broker.alive:
                parts.append(f"b{broker.broker_id} down")
                continue
            plog = broker.manager.logs.get(("sim", 0))
            partition = broker.manager.partitions.get(("sim", 0))
            if plog is None or partition is None:
                parts.append(f"b{broker.broker_id} (no replica)")
                continue
            parts.append(
                f"b{broker.broker_id} {partition.role.value} e{partition.leader_epoch} "
                f"leo={plog.log_end_offset} hw={partition.high_watermark} "
                f"epochs={[(e.epoch, e.start_offset) for e in plog.leader_epoch_cache.entries]} "
                f"fetching={_fetching(broker)}"
            )
        return "; ".join(parts)


def _fetching(broker: SimBroker) -> dict:
    """(fetch offset, last fetched epoch) of each partition the broker's fetchers follow, by leader."""
    return {
        leader_id: [(s.fetch_offset, s.last_fetched_epoch) for s in fetcher.partitions().values()]
        for leader_id, fetcher in broker.fetchers.fetchers.items()
    }
