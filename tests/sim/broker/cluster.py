"""A seeded simulation of one partition on three brokers and a controller, running the production code.

Theory of operation. One ``random.Random(seed)`` and a virtual clock (``now_ms``, an event heap)
drive everything; no wall time, no threads, no sockets. What runs is the real thing:

- each broker is a real ``broker.replica.replica_manager.ReplicaManager`` (``Partition``, purgatories,
  producer state) over real ``storage.log.Log`` files in its own directory (tmpfs when there is one),
  with the sim's clock injected. Its follower side is the real ``broker.follower.fetcher.ReplicaFetcher`` (and
  through it ``broker.replica.divergence``), driven here exactly as ``broker.follower.fetcher_driver`` drives
  it, through a KIP-227 fetch session per leader: the driver's request and answer code
  (``fetch_request``, ``fetch_answers``) and the replica-fetch handler's (``resolve_session``,
  ``fetch_response``) over real ``proto.kafka.fetch_session`` objects, Kafka messages unencoded;
- the controller is the real ``metadata.controller.QuorumController``: registration, heartbeats,
  session expiry (fencing), AlterPartition, ElectLeaders and IncrementalAlterConfigs generate
  records, which are committed at once (the Raft quorum has its own simulation, tests/sim/raft) and
  replayed into its ``MetadataImage``. Each broker follows the metadata log with its own image, one
  long-poll at a time, so it acts on a stale view (zombie leaders, old epochs) as a real one does.

This module supplies only what processes and the network supply: a message layer that loses, delays
(and so reorders) and cuts links; process crashes (the page cache survives), power-loss crashes that
drop what was never fsynced (``tests.sim.broker.disk``), restarts, pauses; clients that produce
(acks=all and 1) and consume; leader elections (preferred, and unclean on seeds that enable it) and
``max.message.bytes`` changes. The checker (``tests.sim.broker.checker``) runs after every event;
``run_seed`` ends with a liveness phase that heals every fault and requires convergence, then a bounce
phase (``Sim._bounce_under_load``, issue 24 §1): under a producer faster than replication a second topic
is created and deleted and both followers are paused out of the ISR; they must rejoin within
``REJOIN_LIMIT_MS`` and, once writes stop, every follower's fetches must park (no fetch loop).
"""

from __future__ import annotations

import hashlib
import heapq
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from broker.follower.fetcher import FetchedPartition, FetcherConfig, FetchRequestPlan, ReplicaFetcher
from broker.follower.fetcher_driver import fetch_answers, fetch_request, session_partitions
from broker.kafka.handlers.context import BrokerServices
from broker.kafka.handlers.replica_fetch import fetch_response, resolve_session, session_items
from broker.replica.follower_actions import TruncateFullyAndStartAt, TruncateTo
from broker.replica.partition import ACKS_ALL, ACKS_LEADER, AlterPartitionProposal
from broker.replica.replica_manager import (
    ProduceRequestPartition,
    ProduceResult,
    ReplicaManager,
)
from broker.replica.replica_requests import FetchRequestPartition, FetchResult
from metadata.api import (
    AlterableConfig,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerState,
    ElectLeadersRequest,
    NewTopic,
    RegisterBrokerRequest,
)
from metadata.configs import AlterConfigOp
from metadata.controller import ControllerConfig, QuorumController
from metadata.image import MetadataImage, PartitionRegistration
from metadata.partition_change import Election
from metadata.records import ConfigRecord, ConfigResourceType, Record
from proto import errors
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.fetch_session import FetchSessionCache, FetchSessionHandler
from proto.kafka_types import NO_LEADER, TopicPartition
from storage.record_batch import build_batch
from tests.sim.broker.checker import Checker, SimViolation
from tests.sim.broker.disk import TEMP_ROOT, DurabilityTracker

TOPIC = "sim"
PARTITION: TopicPartition = (TOPIC, 0)
REPLICAS = (1, 2, 3)
CONTROLLER = 0
CLIENT = -1
REREGISTER_CODES = (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED)

# Timings (virtual ms), scaled down from Kafka's defaults so that a seed crosses many epochs quickly.
REPLICA_LAG_TIME_MAX_MS = 600
SESSION_TIMEOUT_MS = 900
HEARTBEAT_INTERVAL_MS = 200
FENCE_CHECK_INTERVAL_MS = 100
CHECKPOINT_INTERVAL_MS = 700
FLUSH_CHECK_INTERVAL_MS = 300
METADATA_FETCH_TIMEOUT_MS = 1_000
REQUEST_TIMEOUT_MS = 300
RETRY_BACKOFF_MS = 50
PRODUCE_TIMEOUT_MS = 1_500
FETCHER_CONFIG = FetcherConfig(max_wait_ms=300, fetch_backoff_ms=40, partition_max_bytes=8_192)
MAX_MESSAGE_BYTES_CHOICES = ("600", "1500", "4000", "1048588")
CHAOS_MS = 3_000  # faults, then
HEAL_MS = 5_000  # no faults: every follower must be back in the ISR by the end (liveness)
CHURN_TOPIC = "churn"  # created and deleted in the bounce phase
BOUNCE_PAUSE_MS = 1_000  # both followers paused: out of the ISR (shrunk after the lag time, or fenced)
# Back in the ISR after resuming, under steady appends: replica.lag.time.max.ms and a few fetches (seeds
# 0-99 took 115 ms at the median, 650 ms at most: heartbeat, catch up the pause's backlog, join).
REJOIN_LIMIT_MS = 2 * REPLICA_LAG_TIME_MAX_MS
IDLE_WINDOW_MS = 1_500  # no writes: every follower's fetches park
IDLE_FETCH_SLACK = 3


class SimFailure(AssertionError):
    """A seed broke an invariant or did not converge: the message carries the seed and the tail."""


@dataclass(frozen=True, slots=True)
class SimOptions:
    """What one seed does; ``from_rng`` varies the knobs per seed."""

    chaos_ms: int = CHAOS_MS
    heal_ms: int = HEAL_MS
    loss: float = 0.02
    max_delay_ms: int = 20
    unclean_allowed: bool = False
    min_insync_replicas: int = 2
    segment_bytes: int = 4_096
    flush_messages: int | None = None
    fault_every_ms: int = 400
    produce_every_ms: int = 40
    auto_rebalance_ms: int | None = None  # Kafka's auto.leader.rebalance: a preferred election every so often

    @staticmethod
    def from_rng(rng: random.Random, chaos_ms: int, heal_ms: int) -> SimOptions:
        return SimOptions(
            chaos_ms=chaos_ms,
            heal_ms=heal_ms,
            loss=rng.choice((0.0, 0.01, 0.05, 0.15)),
            max_delay_ms=rng.choice((2, 10, 40)),
            unclean_allowed=rng.random() < 0.15,
            min_insync_replicas=rng.choice((1, 2, 2, 2)),
            segment_bytes=rng.choice((1_024, 4_096, 65_536)),
            flush_messages=rng.choice((None, None, 1, 5)),
            fault_every_ms=rng.choice((150, 400, 1_000)),
            produce_every_ms=rng.choice((20, 60)),
            auto_rebalance_ms=rng.choice((None, 150, 500)),
        )


class Sim:
    """One seeded run (see the module docstring). ``run()`` returns the trace hash or raises."""

    def __init__(
        self, seed: int, options: SimOptions | None = None, *, chaos_ms: int = CHAOS_MS,
        heal_ms: int = HEAL_MS, echo: bool = False,
    ) -> None:  # fmt: skip
        self.seed = seed
        self.rng = random.Random(seed)
        self.options = options or SimOptions.from_rng(self.rng, chaos_ms, heal_ms)
        self.now_ms = 0
        self.echo = echo
        self._queue: list[tuple[int, int, Callable[[], None]]] = []  # (time, sequence, action)
        self._seq = 0
        self.trace: list[str] = []
        self.events = 0
        self.cut: set[frozenset[int]] = set()  # links that drop everything
        self.healing = False
        self.root = Path(tempfile.mkdtemp(prefix=f"pykraft-sim-{seed}-", dir=TEMP_ROOT))
        self.disk = DurabilityTracker(self.root)
        self.controller = SimController(self)
        self.brokers = {b: SimBroker(self, b) for b in REPLICAS}
        self.checker = Checker(self)
        self.next_value = 0
        self.consumer_position = 0
        self.quiet_until = 0  # no produce before this: leaders come and go without writing (idle epochs)
        self.fetches_served: Counter[tuple[int, int]] = Counter()  # (follower, leader) -> fetches read
        self.hot = False  # the bounce phase's steady acks=1 producer

    # ---- event loop ---------------------------------------------------------------------------------

    def at(self, time_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (max(time_ms, self.now_ms), self._seq, action))

    def after(self, delay_ms: int, action: Callable[[], None]) -> None:
        self.at(self.now_ms + delay_ms, action)

    def note(self, text: str) -> None:
        line = f"{self.now_ms} {text}"
        self.trace.append(line)
        if self.echo:
            print(line)

    def run_until(self, end_ms: int) -> None:
        queue, check = self._queue, self.checker.check
        while queue and queue[0][0] <= end_ms:
            self.now_ms, _, action = heapq.heappop(queue)
            self.events += 1
            action()
            check()
        self.now_ms = end_ms

    def trace_hash(self) -> str:
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()[:16]

    # ---- network ------------------------------------------------------------------------------------

    def send(
        self, src: int, dst: int, action: Callable[[], None], what: str, generation: int | None = None
    ) -> None:
        """Deliver ``action`` on ``dst`` after a random delay, unless the message is lost. An answer
        names the ``generation`` (process start) of the broker that asked: a restarted process
        never receives what its predecessor asked for (the connection died with it)."""
        if frozenset((src, dst)) in self.cut or (not self.healing and self.rng.random() < self.options.loss):
            self.note(f"lost {what} {src}->{dst}")
            return
        delay = self.rng.randint(1, self.options.max_delay_ms)
        if dst in self.brokers:
            broker = self.brokers[dst]
            broker.timer(delay, action, broker.generation if generation is None else generation)
        else:
            self.after(delay, action)

    # ---- the run ------------------------------------------------------------------------------------

    def run(self) -> str:
        try:
            with self.disk:
                self._start()
                self.run_until(self.options.chaos_ms)
                self._heal()
                self.run_until(self.options.chaos_ms + self.options.heal_ms)
                self.checker.check_converged()
                self._bounce_under_load()
                self.checker.check_converged()
        except Exception as exc:  # any failure is a bug report: name the seed and the last events
            tail = "\n    ".join(self.trace[-40:])
            raise SimFailure(
                f"seed {self.seed} ({self.options}) failed at {self.now_ms} ms: "
                f"{type(exc).__name__}: {exc}\n  last events:\n    {tail}"
            ) from exc
        finally:
            self.close()
        return self.trace_hash()

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.drop_files()
        shutil.rmtree(self.root, ignore_errors=True)

    def _start(self, clients_and_faults: bool = True) -> None:
        self.controller.start()
        for broker in self.brokers.values():
            broker.start()
        self.after(300, self.controller.create_topic)
        if clients_and_faults:
            self.after(400, self._produce_loop)
            self.after(500, self._consume_loop)
            self.after(600, self._fault_loop)

    # ---- scripted scenarios (tests/sim/broker/test_kip101.py) -------------------------------------------

    def begin_scripted(self) -> None:
        """Start the controller and brokers and create the topic, with no clients and no faults: the
        caller drives (``produce``, ``crash``, ``cut``, ``run_until_true``); the checker still runs after
        every event. Call inside ``with sim.disk:``."""
        self._start(clients_and_faults=False)
        self.run_until_true(lambda: self.controller.partition() is not None and self.caught_up(), 3_000)

    def caught_up(self) -> bool:
        """Every live broker applied the latest metadata and leads or follows accordingly."""
        return all(b.image.offset == self.controller.offset for b in self.brokers.values() if b.alive)

    def run_until_true(self, condition: Callable[[], bool], limit_ms: int, what: str = "") -> None:
        deadline = self.now_ms + limit_ms
        queue, check = self._queue, self.checker.check
        while not condition():
            if not queue or queue[0][0] > deadline:
                state = self.checker.describe()
                raise SimViolation(f"not reached within {limit_ms} ms: {what or condition}\n  {state}")
            self.now_ms, _, action = heapq.heappop(queue)
            self.events += 1
            action()
            check()

    def _heal(self) -> None:
        """Liveness phase: every fault ends, every broker runs, no message is lost."""
        self.healing = True
        self.cut.clear()
        self.note("heal")
        for broker in self.brokers.values():
            broker.paused_until = 0
            if not broker.alive:
                broker.start()

    # ---- the end: a topic deleted and the followers bounced under load (issue 24 §1) ----------------

    def _bounce_under_load(self) -> None:
        """After convergence, under a steady acks=1 producer far faster than replication round trips (an
        append lands between any two fetches of a follower):

        1. a second topic led by the same leader is created, then deleted: each follower forgets it in
           its fetch session with the leader;
        2. both followers pause (SIGSTOP) until they are out of the ISR, then resume: they must be back
           in the ISR within ``REJOIN_LIMIT_MS`` while the producer goes on (a caught-up follower holds
           the leader's HW back until it joins);
        3. the producer stops; over ``IDLE_WINDOW_MS`` with no writes every follower's fetches to each
           leader must park (at most one per ``replica.fetch.max.wait.ms``, plus slack): a session still
           holding a deleted partition is answered at once, in a tight loop."""
        leader = self.controller.leader()
        followers = [b for b in REPLICAS if b != leader]
        self.note(f"bounce phase: leader b{leader}")
        self.controller.alter_config("min.insync.replicas", "1")  # the HW moves with the leader alone
        self.controller.create_topic(CHURN_TOPIC, (leader, *followers))
        self.run_until_true(lambda: self._everyone_hosts(CHURN_TOPIC), 3_000)
        self.hot = True
        self.after(1, self._hot_produce_loop)
        self.run_until(self.now_ms + 200)
        self.controller.delete_topic(CHURN_TOPIC)
        self.run_until_true(lambda: self.caught_up() and not self._anyone_hosts(CHURN_TOPIC), 3_000)
        for broker_id in followers:
            self.brokers[broker_id].pause(BOUNCE_PAUSE_MS)
        self.run_until_true(lambda: set(self.controller.isr()) == {leader}, BOUNCE_PAUSE_MS)
        self.run_until(max(self.brokers[b].paused_until for b in followers))
        resumed = self.now_ms
        self.run_until_true(
            lambda: set(self.controller.isr()) == set(REPLICAS), REJOIN_LIMIT_MS,
            f"followers {followers} back in the ISR within {REJOIN_LIMIT_MS} ms of resuming, under a steady "
            "acks=1 producer",
        )  # fmt: skip
        self.note(f"followers rejoined the ISR {self.now_ms - resumed} ms after resuming")
        self.hot = False
        self.run_until_true(self._replicas_in_step, 5_000, "every replica holding the leader's log, HW = LEO")
        before = Counter(self.fetches_served)
        self.run_until(self.now_ms + IDLE_WINDOW_MS)
        limit = IDLE_WINDOW_MS // FETCHER_CONFIG.max_wait_ms + IDLE_FETCH_SLACK
        for pair, count in sorted((self.fetches_served - before).items()):
            if count > limit:
                raise SimViolation(
                    f"b{pair[0]} fetched from b{pair[1]} {count} times in {IDLE_WINDOW_MS} idle ms (at most "
                    f"{limit} when its fetches park): answered at once, in a loop"
                )

    def _replicas_in_step(self) -> bool:
        ends = set()
        for broker in self.brokers.values():
            plog, partition = broker.manager.logs.get(PARTITION), broker.manager.partitions.get(PARTITION)
            if plog is None or partition is None or partition.high_watermark != plog.log_end_offset:
                return False
            ends.add(plog.log_end_offset)
        return len(ends) == 1

    def _everyone_hosts(self, topic: str) -> bool:
        return self.caught_up() and all(
            (topic, 0) in b.manager.partitions and b.manager.partitions[(topic, 0)].role.value != "none"
            for b in self.brokers.values()
        )

    def _anyone_hosts(self, topic: str) -> bool:
        return any((topic, 0) in b.manager.partitions for b in self.brokers.values() if b.alive)

    def _hot_produce_loop(self) -> None:
        """Small acks=1 batches now and then (a backlog while the followers pause); besides these the
        leader appends one right after it answers a follower's fetch (``serve_replica_fetch``), so that
        one lands between any two fetches of a follower."""
        if self.hot:
            self.produce(self.controller.leader(), ACKS_LEADER, size=1)
            self.after(self.rng.randint(5, 20), self._hot_produce_loop)

    # ---- clients ------------------------------------------------------------------------------------

    def _produce_loop(self) -> None:
        if self.now_ms < self.options.chaos_ms + self.options.heal_ms // 2:
            if self.now_ms >= self.quiet_until:
                self.produce()
            self.after(self.rng.randint(1, 2 * self.options.produce_every_ms), self._produce_loop)

    def produce(
        self, target: int | None = None, acks: int | None = None, size: int | None = None, local: bool = False
    ) -> int:
        """Send one batch (to ``target`` with ``acks``, else as a client would); returns its value id.
        ``local``: from a client next to ``target`` (delivered in 1 ms, never lost)."""
        leader = self.controller.leader()
        if target is None:
            target = leader if leader != NO_LEADER and self.rng.random() < 0.85 else self.rng.choice(REPLICAS)
        if acks is None:
            acks = ACKS_ALL if self.rng.random() < 0.75 else ACKS_LEADER
        value_id = self.next_value
        self.next_value += 1
        size = size or self.rng.choice((20, 60, 200, 200, 900, 2_000))
        value = f"{self.seed}:{value_id}:".encode().ljust(size, b".")
        # The record's timestamp is the value id: a batch's max timestamp names it in any log.
        batch = build_batch([(None, value, (), value_id)])
        item = ProduceRequestPartition(PARTITION, batch, None)
        self.checker.produced(value_id, len(batch))

        def answered(results: dict[TopicPartition, ProduceResult]) -> None:
            result = results[PARTITION]
            self.note(f"produce v{value_id} acks={acks} b{target}: {result.code.name} @{result.base_offset}")
            if result.code == ErrorCode.NONE and acks == ACKS_ALL:
                self.checker.acknowledged(result.base_offset, value_id, target, result.leader_epoch)

        def at_broker() -> None:
            broker = self.brokers[target]
            broker.log_may_change()
            broker.manager.produce(acks, PRODUCE_TIMEOUT_MS, [item], self.now_ms, answered)

        if local:
            self.brokers[target].timer(1, at_broker)
        else:
            self.send(CLIENT, target, at_broker, f"produce v{value_id}")
        return value_id

    def _consume_loop(self) -> None:
        self.consume()
        self.after(self.rng.randint(10, 100), self._consume_loop)

    def consume(self) -> None:
        """A consumer reads from the leader it knows, from its position: only committed records."""
        leader = self.controller.leader()
        if leader == NO_LEADER:
            return
        broker = self.brokers[leader]
        if not broker.alive or broker.is_paused():
            return
        position = self.consumer_position
        item = FetchRequestPartition(PARTITION, position, 8_192, None, None)

        def answered(results: dict[TopicPartition, FetchResult]) -> None:
            result = results[PARTITION]
            self.consumer_position = self.checker.consumed(leader, position, result)

        broker.manager.fetch_for_consumer([item], 8_192, 1, 0, self.now_ms, answered)
        broker.touched = True

    # ---- faults -------------------------------------------------------------------------------------

    def _fault_loop(self) -> None:
        if self.healing:
            return
        self.after(self.rng.randint(1, 2 * self.options.fault_every_ms), self._fault_loop)
        fault = self.rng.choices(
            ("crash", "power_loss", "pause", "isolate", "cut_brokers", "preferred", "unclean", "config",
             "restart", "quiet", "shutdown"),
            weights=(4, 2, 3, 3, 2, 3, 1, 3, 6, 2, 2),
        )[0]  # fmt: skip
        live = [b for b in self.brokers.values() if b.alive]
        dead = [b for b in self.brokers.values() if not b.alive]
        broker = self.rng.choice(list(self.brokers.values()))
        if fault in ("crash", "power_loss") and broker.alive and len(live) >= 2:
            broker.crash(power_loss=fault == "power_loss")
            self.after(self.rng.randint(50, 3_000), lambda: broker.start() if not broker.alive else None)
        elif fault == "shutdown" and broker.alive and not broker.shutting_down and len(live) >= 2:
            broker.controlled_shutdown()
        elif fault == "restart" and dead:
            self.rng.choice(dead).start()
        elif fault == "pause" and broker.alive:
            broker.pause(self.rng.randint(50, 2_000))
        elif fault == "isolate" and broker.alive:
            self._cut_for(broker.broker_id, CONTROLLER, self.rng.randint(200, 2_500))
        elif fault == "cut_brokers":
            a, b = self.rng.sample(REPLICAS, 2)
            self._cut_for(a, b, self.rng.randint(200, 2_500))
        elif fault == "preferred":
            self.controller.elect(Election.PREFERRED)
        elif fault == "unclean" and self.options.unclean_allowed:
            self.controller.elect(Election.UNCLEAN)
        elif fault == "quiet":
            self.quiet_until = self.now_ms + self.rng.randint(300, 3_000)
            self.note(f"producers quiet until {self.quiet_until}")
        elif fault == "config":
            self.controller.alter_config("max.message.bytes", self.rng.choice(MAX_MESSAGE_BYTES_CHOICES))

    def _cut_for(self, a: int, b: int, duration_ms: int) -> None:
        link = frozenset((a, b))
        self.cut.add(link)
        self.note(f"cut {a}-{b} for {duration_ms} ms")
        self.after(duration_ms, lambda: self.cut.discard(link))


class SimController:
    """The real quorum controller core; a committed entry is replayed at once (see the module doc)."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.core = QuorumController(
            ControllerConfig(broker_session_timeout_ms=SESSION_TIMEOUT_MS), random.Random(sim.seed)
        )
        self.entries: list[tuple[int, tuple[Record, ...]]] = []
        self.offset = 0
        self.waiting: list[Callable[[], None]] = []  # parked metadata fetches

    def start(self) -> None:
        self.core.activate(self.sim.now_ms)
        self.sim.after(FENCE_CHECK_INTERVAL_MS, self._fence_loop)
        if self.sim.options.auto_rebalance_ms is not None:
            self.sim.after(self.sim.options.auto_rebalance_ms, self._rebalance_loop)

    def _rebalance_loop(self) -> None:
        if self.core.image.topic_by_name(TOPIC) is not None:
            self.elect(Election.PREFERRED, quiet=True)
        self.sim.after(self.sim.options.auto_rebalance_ms or 0, self._rebalance_loop)

    def partition(self) -> PartitionRegistration | None:
        topic = self.core.image.topic_by_name(TOPIC)
        return None if topic is None else topic.partitions[0]

    def leader(self) -> int:
        reg = self.partition()
        return NO_LEADER if reg is None else reg.leader

    def commit(self, records: tuple[Record, ...], why: str) -> int | None:
        if not records:
            return None
        self.offset += 1
        before = self.core.image.topic_by_name(TOPIC)
        old = None if before is None else before.partitions[0]
        self.core.replay(records, self.offset)
        self.core.invariants()
        self.entries.append((self.offset, records))
        topic = self.core.image.topic_by_name(TOPIC)
        new = None if topic is None else topic.partitions[0]
        if new is not None and new != old:
            self.sim.note(
                f"metadata {self.offset} ({why}): leader {new.leader} epoch {new.leader_epoch} "
                f"isr {list(new.isr)} partition epoch {new.partition_epoch}"
            )
            self.sim.checker.partition_changed(old, new)
            if old is None or new.leader != old.leader:
                self.sim.after(self.sim.rng.randint(1, 20), self.sim.consume)  # clients refresh metadata
        waiting, self.waiting = self.waiting, []
        for answer in waiting:
            answer()
        return self.offset

    def _fence_loop(self) -> None:
        result = self.core.maybe_fence_stale_brokers(self.sim.now_ms)
        self.commit(result.records, f"session expired {result.response}")
        self.sim.after(FENCE_CHECK_INTERVAL_MS, self._fence_loop)

    def create_sim_topic(self) -> None:
        options = self.sim.options
        configs = {
            "min.insync.replicas": str(options.min_insync_replicas),
            "segment.bytes": str(options.segment_bytes),
            "unclean.leader.election.enable": "true" if options.unclean_allowed else "false",
            "max.message.bytes": "4000",
        }
        if options.flush_messages is not None:
            configs["flush.messages"] = str(options.flush_messages)
        # Wait until every broker is registered and unfenced: the assignment names all three.
        if len(self.core.image.usable_brokers()) < len(REPLICAS):
            self.sim.after(100, self.create_topic)
            return
        topic = NewTopic(TOPIC, assignments={0: REPLICAS}, configs=configs)
        result = self.core.handle_create_topics([topic])
        assert result.response[0].error.ok, result.response[0].error
        self.commit(result.records, "create topic")

    def isr(self) -> tuple[int, ...]:
        reg = self.partition()
        return () if reg is None else tuple(reg.isr)

    def create_topic(self, name: str = TOPIC, assignment: tuple[int, ...] = REPLICAS) -> None:
        if name == TOPIC:
            return self.create_sim_topic()
        result = self.core.handle_create_topics([NewTopic(name, assignments={0: assignment})])
        assert result.response[0].error.ok, result.response[0].error
        self.sim.note(f"create topic {name} on {list(assignment)}")
        self.commit(result.records, f"create topic {name}")
        return None

    def delete_topic(self, name: str) -> None:
        result = self.core.handle_delete_topics([name])
        assert result.response[0].error.ok, result.response[0].error
        self.sim.note(f"delete topic {name}")
        self.commit(result.records, f"delete topic {name}")

    def elect(self, election: Election, quiet: bool = False) -> None:
        result = self.core.handle_elect_leaders(ElectLeadersRequest(election, ((TOPIC, 0),)))
        if not quiet or result.records:
            self.sim.note(f"elect {election.name}: {[ErrorCode(r.error.code).name for r in result.response]}")
        self.commit(result.records, f"{election.name} election")

    def alter_config(self, name: str, value: str) -> None:
        resource = AlterConfigsResource(
            ConfigResourceType.TOPIC, TOPIC, (AlterableConfig(name, AlterConfigOp.SET, value),)
        )
        result = self.core.handle_incremental_alter_configs([resource])
        self.sim.note(f"alter config {name}={value}")
        self.commit(result.records, "config")

    def fetch_metadata(self, broker: SimBroker, from_offset: int, answer: Callable[[list], None]) -> None:
        entries = [e for e in self.entries if e[0] > from_offset]
        if entries:
            answer(entries)
        else:
            self.waiting.append(lambda: answer([e for e in self.entries if e[0] > from_offset]))


class SimBroker:
    """One broker process: the real ReplicaManager plus the driver duties of ``broker.server``,
    ``broker.lifecycle``, ``broker.metadata_listener`` and ``broker.controller_channel``."""

    def __init__(self, sim: Sim, broker_id: int) -> None:
        self.sim = sim
        self.broker_id = broker_id
        self.directory = sim.root / f"broker-{broker_id}"
        self.generation = 0  # one per process start: messages to an older one are dropped
        self.alive = False
        self.paused_until = 0
        self.touched = False  # the checker looks at this broker after the current event
        self.log_changed_from: int | None = None  # first offset of its log that may have changed
        self.manager: ReplicaManager | None = None  # type: ignore[assignment]

    # ---- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        self.generation += 1
        self.alive = True
        self.paused_until = 0
        self.image = MetadataImage()
        self.broker_epoch = -1
        self.roles_started = False
        self.shutting_down = False
        self.metadata_request = 0
        self.fetchers = SimFetchers(self)
        self.manager = ReplicaManager(
            self.broker_id, self.directory,
            replica_lag_time_max_ms=REPLICA_LAG_TIME_MAX_MS, topic_defaults={},
            fetchers=self.fetchers, send_alter_partition=self.send_alter_partition,
            on_deadline=self.on_deadline, clock_ms=lambda: self.sim.now_ms,
        )  # fmt: skip
        # The Kafka listener's state that the replica-fetch handler uses: followers' fetch sessions.
        self.services = BrokerServices(
            self.broker_id, self.manager, lambda: self.sim.now_ms, REQUEST_TIMEOUT_MS,
            fetch_sessions=FetchSessionCache(random.Random(self.sim.rng.random())),
        )  # fmt: skip
        self.sim.note(f"start b{self.broker_id} (generation {self.generation})")
        self.touched = True
        self.log_changed_from = 0  # recovery may have changed anything
        self.register()
        self.timer(HEARTBEAT_INTERVAL_MS, self._heartbeat_loop)
        self.timer(REPLICA_LAG_TIME_MAX_MS // 2, self._isr_loop)
        self.timer(CHECKPOINT_INTERVAL_MS, self._checkpoint_loop)
        self.timer(FLUSH_CHECK_INTERVAL_MS, self._flush_loop)
        self.fetch_metadata()

    def crash(self, power_loss: bool) -> None:
        """SIGKILL (page cache kept) or power loss (what was never fsynced is gone)."""
        self.alive = False
        self.drop_files()
        lost = self.sim.disk.power_loss(self.directory) if power_loss else 0
        if lost:
            self.sim.checker.power_loss(self.broker_id)
        kind = f" ({lost} unflushed bytes lost)" if power_loss else ""
        self.sim.note(f"{'power loss' if power_loss else 'crash'} b{self.broker_id}{kind}")

    def drop_files(self) -> None:
        """Close the log files without flushing anything (a killed process writes nothing more)."""
        if self.manager is None:
            return
        for plog in self.manager.logs.values():
            for segment in [*plog._segments, *plog._retired]:
                segment.close()
        self.manager.log_manager.logs.clear()

    def log_may_change(self) -> None:
        """The next call may append at the log end (or truncate, which the checker sees as a lower LEO)."""
        plog = self.manager.logs.get(PARTITION)
        if plog is not None:
            leo = plog.log_end_offset
            self.log_changed_from = leo if self.log_changed_from is None else min(self.log_changed_from, leo)

    def truncated_to(self, offset: int) -> None:
        self.log_changed_from = (
            offset if self.log_changed_from is None else min(self.log_changed_from, offset)
        )

    def pause(self, duration_ms: int) -> None:
        self.paused_until = max(self.paused_until, self.sim.now_ms + duration_ms)
        self.sim.note(f"pause b{self.broker_id} for {duration_ms} ms")

    def is_paused(self) -> bool:
        return self.sim.now_ms < self.paused_until

    # ---- running code on this process ---------------------------------------------------------------

    def timer(self, delay_ms: int, action: Callable[[], None], generation: int | None = None) -> None:
        generation = self.generation if generation is None else generation
        self.sim.after(delay_ms, lambda: self._run(generation, action))

    def _run(self, generation: int, action: Callable[[], None]) -> None:
        if not self.alive or generation != self.generation:
            return
        if self.is_paused():  # a paused process runs nothing; its events wait
            self.sim.at(self.paused_until, lambda: self._run(generation, action))
            return
        self.touched = True
        action()

    def on_deadline(self, deadline_ms: int) -> None:
        self.timer(deadline_ms - self.sim.now_ms, lambda: self.manager.expire(self.sim.now_ms))

    def _every(self, interval_ms: int, action: Callable[[], None]) -> Callable[[], None]:
        def loop() -> None:
            action()
            self.timer(interval_ms, loop)

        return loop

    # ---- controller traffic -------------------------------------------------------------------------

    def register(self) -> None:
        request = RegisterBrokerRequest(self.broker_id, f"b{self.broker_id}-g{self.generation}")
        generation = self.generation

        def at_controller() -> None:
            result = self.sim.controller.core.handle_register_broker(request, self.sim.now_ms)
            epoch = self.sim.controller.commit(result.records, f"register b{self.broker_id}")
            self.sim.send(
                CONTROLLER,
                self.broker_id,
                lambda: self._registered(generation, epoch),
                "registered",
                generation,
            )

        self.sim.send(self.broker_id, CONTROLLER, at_controller, "register")

    def _registered(self, generation: int, epoch: int | None) -> None:
        if generation != self.generation or epoch is None or self.broker_epoch >= epoch:
            return
        self.broker_epoch = epoch
        self.roles_started = False
        self.fetchers.set_broker_epoch(epoch)
        self.sim.note(f"b{self.broker_id} registered with broker epoch {epoch}")
        self._publish(False)

    def _heartbeat_loop(self) -> None:
        self.timer(HEARTBEAT_INTERVAL_MS, self._heartbeat_loop)
        if self.broker_epoch < 0:
            self.register()  # the registration or its answer was lost: try again
            return
        request = BrokerHeartbeatRequest(
            self.broker_id, self.broker_epoch, self.image.offset, want_shut_down=self.shutting_down
        )
        generation = self.generation

        def at_controller() -> None:
            result = self.sim.controller.core.handle_broker_heartbeat(request, self.sim.now_ms)
            self.sim.controller.commit(result.records, f"heartbeat b{self.broker_id}")
            response = result.response
            self.sim.send(
                CONTROLLER,
                self.broker_id,
                lambda: self._heartbeat_answer(response),
                "heartbeat answer",
                generation,
            )

        self.sim.send(self.broker_id, CONTROLLER, at_controller, "heartbeat")

    def _heartbeat_answer(self, response: BrokerHeartbeatResponse) -> None:
        code = response.error.code
        if code in REREGISTER_CODES:
            self.sim.note(f"b{self.broker_id} heartbeat refused ({ErrorCode(code).name}): registering again")
            self.broker_epoch = -1
            self.register()
        elif self.shutting_down and response.should_shut_down and not self.manager.led_partitions():
            self._stop_cleanly()

    def controlled_shutdown(self) -> None:
        """SIGTERM: heartbeats ask to shut down; the controller moves leadership away (a clean leader
        move), then the broker closes its logs (flush, checkpoints, clean-shutdown marker) and stops."""
        self.shutting_down = True
        self.sim.note(f"controlled shutdown of b{self.broker_id} requested")

    def _stop_cleanly(self) -> None:
        self.manager.close()
        self.alive = False
        self.sim.note(f"b{self.broker_id} stopped cleanly")
        self.sim.after(self.sim.rng.randint(50, 1_500), lambda: None if self.alive else self.start())

    def fetch_metadata(self) -> None:
        self.metadata_request += 1
        request_id, from_offset, generation = self.metadata_request, self.image.offset, self.generation

        def answer(entries: list) -> None:
            self.sim.send(
                CONTROLLER,
                self.broker_id,
                lambda: self._apply_metadata(request_id, entries),
                "metadata",
                generation,
            )

        self.sim.send(
            self.broker_id, CONTROLLER,
            lambda: self.sim.controller.fetch_metadata(self, from_offset, answer), "fetch metadata",
        )  # fmt: skip

        def timed_out() -> None:
            if self.metadata_request == request_id:
                self.fetch_metadata()

        self.timer(METADATA_FETCH_TIMEOUT_MS, timed_out)

    def _apply_metadata(self, request_id: int, entries: list) -> None:
        config_changed = False
        for offset, records in entries:
            if offset <= self.image.offset:
                continue
            assert offset == self.image.offset + 1, f"metadata gap: {self.image.offset} then {offset}"
            self.image.apply_batch(records, offset)
            config_changed = config_changed or any(isinstance(r, ConfigRecord) for r in records)
        self._publish(config_changed)
        if request_id == self.metadata_request:
            self.fetch_metadata()

    def _publish(self, config_changed: bool) -> None:
        """``broker.metadata_listener.MetadataListener.publish``'s rule: roles only once the image holds
        this broker's registration."""
        if self.broker_epoch < 0 or self.image.offset < self.broker_epoch:
            self.manager.image = self.image
            return
        self.manager.apply_image(self.image, self.sim.now_ms, config_changed or not self.roles_started)
        self.roles_started = True

    def send_alter_partition(self, topic_id: str, proposal: AlterPartitionProposal) -> None:
        """``broker.controller_channel.AlterPartitionSender``: retry on transport failures while still
        pending."""
        tp = (proposal.topic, proposal.partition)
        if self.manager.pending_proposal(tp) != proposal:
            return
        members = tuple(BrokerState(b, e) for b, e in proposal.new_isr_with_epochs)  # KIP-903
        item = AlterPartitionItem(
            topic_id, proposal.partition, proposal.leader_epoch, proposal.partition_epoch, members
        )
        request = AlterPartitionRequest(self.broker_id, self.broker_epoch, (item,))
        state = {"answered": False}
        generation = self.generation

        def at_controller() -> None:
            result = self.sim.controller.core.handle_alter_partition(request)
            self.sim.controller.commit(result.records, f"AlterPartition b{self.broker_id}")
            response = result.response
            self.sim.send(
                CONTROLLER, self.broker_id, lambda: answered(response), "AlterPartition answer", generation
            )

        def answered(response) -> None:
            state["answered"] = True
            self.sim.note(f"b{self.broker_id} AlterPartition {list(proposal.new_isr)}: {_describe(response)}")
            if not response.error.ok:
                if response.error.code in REREGISTER_CODES:
                    self.manager.handle_alter_partition_response(
                        proposal, ErrorCode(response.error.code), now_ms=self.sim.now_ms
                    )
                else:
                    self.timer(RETRY_BACKOFF_MS, lambda: self.send_alter_partition(topic_id, proposal))
                return
            result = response.partitions[0]
            self.manager.handle_alter_partition_response(
                proposal, ErrorCode(result.error.code), result.leader_epoch, result.partition_epoch,
                tuple(result.isr), now_ms=self.sim.now_ms,
            )  # fmt: skip

        def timed_out() -> None:
            if not state["answered"]:
                self.send_alter_partition(topic_id, proposal)

        self.sim.send(self.broker_id, CONTROLLER, at_controller, "AlterPartition")
        self.timer(REQUEST_TIMEOUT_MS, timed_out)

    # ---- timers of broker.server ----------------------------------------------------------------------

    def _isr_loop(self) -> None:
        self.manager.maybe_shrink_isr(self.sim.now_ms)
        self.timer(REPLICA_LAG_TIME_MAX_MS // 2, self._isr_loop)

    def _checkpoint_loop(self) -> None:
        self.manager.log_manager.write_checkpoints()
        self.timer(CHECKPOINT_INTERVAL_MS, self._checkpoint_loop)

    def _flush_loop(self) -> None:
        self.manager.log_manager.maybe_flush()
        self.timer(FLUSH_CHECK_INTERVAL_MS, self._flush_loop)

    # ---- the leader side of a follower fetch ------------------------------------------------------------

    def serve_replica_fetch(self, replica_id: int, request: m.FetchRequest, reply: Callable) -> None:
        """``broker.kafka.handlers.replica_fetch`` without asyncio: the request through this process'
        fetch sessions (``resolve_session``), read by the replica manager, answered as the handler
        builds its response (``fetch_response``); ``reply(response, results)``."""
        services = self.services
        self.sim.fetches_served[(replica_id, self.broker_id)] += 1
        session, unknown = resolve_session(services, True, replica_id, request)
        if session.error != ErrorCode.NONE:
            reply(m.FetchResponse(throttle_time_ms=0, error_code=session.error, session_id=0), {})
            return
        max_wait_ms = 0 if unknown else request.max_wait_ms

        def answer(results: dict[TopicPartition, FetchResult]) -> None:
            reply(fetch_response(services, True, session, results, unknown), results)
            if self.sim.hot and PARTITION in results and PARTITION in self.manager.led_partitions():
                # The bounce phase's producer is far faster than replication: an append lands here
                # before this follower's next fetch can arrive (every message takes >= 1 ms).
                self.sim.produce(self.broker_id, ACKS_LEADER, size=1, local=True)

        self.manager.fetch_for_follower(
            replica_id, request.replica_state.replica_epoch, session_items(session), request.max_bytes,
            request.min_bytes, max_wait_ms, self.sim.now_ms, answer, lambda: self.sim.now_ms,
        )  # fmt: skip


class SimFetchers:
    """``broker.follower.fetcher_driver.FetcherManager`` without asyncio: one ReplicaFetcher per leader, one
    request outstanding each, answers applied through the real ``ReplicaManager.apply_fetch_action``."""

    def __init__(self, broker: SimBroker) -> None:
        self.broker = broker
        self.sim = broker.sim
        self.broker_epoch = -1
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.leader_of: dict[TopicPartition, int] = {}
        self.in_flight: dict[int, int] = {}  # leader id -> request id
        self.wake_at: dict[int, tuple[ReplicaFetcher, int]] = {}  # leader id -> its next round
        self.sessions: dict[int, FetchSessionHandler] = {}  # leader id -> the fetch session with it

    def set_broker_epoch(self, broker_epoch: int) -> None:
        self.broker_epoch = broker_epoch
        for fetcher in self.fetchers.values():
            fetcher.broker_epoch = broker_epoch

    def add_partition(
        self,
        leader_id: int,
        tp: TopicPartition,
        fetch_offset: int,
        last_fetched_epoch: int | None,
        leader_epoch: int,
    ) -> None:
        self.remove_partition(tp)
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = ReplicaFetcher(leader_id, self.broker.broker_id, self.broker_epoch, FETCHER_CONFIG)
            self.fetchers[leader_id] = fetcher
        fetcher.add_partition(tp, fetch_offset, last_fetched_epoch, leader_epoch)
        self.leader_of[tp] = leader_id
        self._schedule(fetcher, self.sim.now_ms)

    def remove_partition(self, tp: TopicPartition) -> None:
        leader_id = self.leader_of.pop(tp, None)
        fetcher = None if leader_id is None else self.fetchers.get(leader_id)
        if fetcher is None:
            return
        fetcher.remove_partition(tp)
        if not fetcher.partitions():  # the driver stops: its connection, and session, go
            del self.fetchers[leader_id]
            self.in_flight.pop(leader_id, None)
            self.wake_at.pop(leader_id, None)
            self.sessions.pop(leader_id, None)

    def _schedule(self, fetcher: ReplicaFetcher, time_ms: int) -> None:
        scheduled = self.wake_at.get(fetcher.leader_id)
        if scheduled is not None and scheduled[0] is fetcher and self.sim.now_ms <= scheduled[1] <= time_ms:
            return  # this fetcher's next round is already due no later than that
        self.wake_at[fetcher.leader_id] = (fetcher, time_ms)
        self.broker.timer(time_ms - self.sim.now_ms, lambda: self._round(fetcher, time_ms))

    def _current(self, fetcher: ReplicaFetcher) -> bool:
        return self.fetchers.get(fetcher.leader_id) is fetcher

    def _round(self, fetcher: ReplicaFetcher, time_ms: int) -> None:
        if self.wake_at.get(fetcher.leader_id) == (fetcher, time_ms):
            del self.wake_at[fetcher.leader_id]
        if not self._current(fetcher) or fetcher.leader_id in self.in_flight:
            return
        plan = fetcher.build_request(self.sim.now_ms)
        if plan is None:
            wake = fetcher.next_wake_ms()
            if wake is not None:
                self._schedule(fetcher, wake)
            return
        self.in_flight[fetcher.leader_id] = plan.request_id
        leader = self.sim.brokers[fetcher.leader_id]
        follower_id, generation = self.broker.broker_id, self.broker.generation
        # broker.follower.fetcher_driver's request: through the fetch session with this leader, as the
        # Kafka Fetch it sends (topic ids from this broker's metadata now).
        session = self.sessions.setdefault(fetcher.leader_id, FetchSessionHandler())
        wanted = session.build(session_partitions(plan, FETCHER_CONFIG, self._topic_id_of))
        request = fetch_request(plan, wanted, FETCHER_CONFIG, self._topic_id_of)

        def reply(response: m.FetchResponse, results: dict[TopicPartition, FetchResult]) -> None:
            self.sim.send(
                leader.broker_id, follower_id, lambda: self._answered(fetcher, plan, response, results),
                "fetch answer", generation,
            )  # fmt: skip

        self.sim.send(
            follower_id, leader.broker_id, lambda: leader.serve_replica_fetch(follower_id, request, reply),
            f"fetch {plan.partitions[0].fetch_offset}",
        )  # fmt: skip
        timeout_ms = FETCHER_CONFIG.max_wait_ms + REQUEST_TIMEOUT_MS
        self.broker.timer(timeout_ms, lambda: self._timed_out(fetcher, plan))

    def _topic_id_of(self, name: str) -> str:
        return self.broker.image.topic_ids.get(name, "")

    def _timed_out(self, fetcher: ReplicaFetcher, plan: FetchRequestPlan) -> None:
        if self.in_flight.get(fetcher.leader_id) != plan.request_id or not self._current(fetcher):
            return
        del self.in_flight[fetcher.leader_id]
        self.sessions[fetcher.leader_id].reset()  # the driver drops the connection: a new session next
        fetcher.handle_request_failure(plan.request_id, self.sim.now_ms)
        self._schedule(fetcher, self.sim.now_ms)

    def _answered(
        self, fetcher: ReplicaFetcher, plan: FetchRequestPlan, response: m.FetchResponse,
        results: dict[TopicPartition, FetchResult],
    ) -> None:  # fmt: skip
        if self.in_flight.get(fetcher.leader_id) != plan.request_id or not self._current(fetcher):
            return  # the driver dropped this request (timeout) or the partition moved on
        del self.in_flight[fetcher.leader_id]
        session = self.sessions[fetcher.leader_id]
        answers: dict[TopicPartition, FetchedPartition] = {}
        if session.handle_response(ErrorCode(response.error_code), response.session_id):
            followed = {tp[0] for tp in fetcher.partitions()}
            for tp, answer in fetch_answers(response, followed, self._topic_id_of).items():
                # The leader's log end and message stand in for the driver's OffsetForLeaderEpoch round
                # trip after OFFSET_OUT_OF_RANGE (and the wire has no message).
                result = results.get(tp)
                answers[tp] = answer if result is None else replace(
                    answer, log_end_offset=result.log_end_offset, message=result.message
                )
            session.relist(tp for tp, answer in answers.items() if answer.error != ErrorCode.NONE)
        else:
            code = ErrorCode(response.error_code).name
            self.sim.note(f"b{self.broker.broker_id} fetch session with b{fetcher.leader_id} reset: {code}")
        manager = self.broker.manager
        actions = fetcher.handle_response(plan.request_id, answers, manager.local_view, self.sim.now_ms)
        for action in actions:
            tp = action.topic_partition
            failed = False
            self.broker.log_may_change()
            try:
                manager.apply_fetch_action(action)
            except errors.KafkaError as exc:
                failed = True
                self.sim.note(f"b{self.broker.broker_id} cannot apply {type(action).__name__}: {exc}")
            position = manager.log_position(tp)
            if isinstance(action, TruncateTo | TruncateFullyAndStartAt):
                self.sim.note(f"b{self.broker.broker_id} truncated to {position and position[0]} ({action})")
            if position is not None:
                if tp == PARTITION:
                    self.broker.truncated_to(position[0])
                fetcher.update_position(tp, *position)
            if failed:
                fetcher.back_off(tp, self.sim.now_ms)
            if tp == PARTITION:
                self.sim.checker.fetch_applied(self.broker, action)
        self._schedule(fetcher, self.sim.now_ms)


def _describe(response) -> str:
    if not response.error.ok:
        return ErrorCode(response.error.code).name
    result = response.partitions[0]
    return f"{ErrorCode(result.error.code).name} isr={list(result.isr)} pe={result.partition_epoch}"


def run_seed(seed: int, *, chaos_ms: int = CHAOS_MS, heal_ms: int = HEAL_MS) -> Sim:
    sim = Sim(seed, chaos_ms=chaos_ms, heal_ms=heal_ms)
    sim.run()
    return sim
