"""The chaos workload: idempotent producers, consumers and an admin, each a thread writing to the history.

- **Producers** (``producer-N``): one ``pykraft.Producer`` each (``acks=all``, idempotent), writing
  unique values ``pN-SEQ`` round-robin over the topic's partitions, at most ``OUTSTANDING_PER_PARTITION``
  unacknowledged per partition (so that a stalled partition does not stall the others), at a bounded
  rate. Each send becomes an op when its future resolves: ``ok`` with its offset, ``info`` on any
  error (with retries until ``delivery_timeout_ms`` the outcome of a failed idempotent send is
  unknown), ``fail`` when ``send`` itself refused the record. A producer whose topic gained partitions
  is replaced by a new one (``pykraft.Producer`` keeps the partition count it first learned).
- **Consumers** (``consumer-N``): members of one consumer group subscribed to the topic
  (``GroupConsumerWorker``: every ``on_assign`` starts a generation of the partitions it adds, every
  non-empty poll is an op followed by a synchronous commit, OffsetFetch now and then) — or, without
  groups, ``Consumer.assign`` over every partition (``ConsumerWorker``: a new assignment when the
  topic grew starts a new generation; every ``LogTruncation`` the consumer reports is an op).
- **Admin** (``admin``): creates topics and adds partitions when the run asks it to; an attempt that
  fails (faults!) is an ``info`` op and is tried again, up to ``ADMIN_ATTEMPTS`` times.

Every wait is bounded; ``stop()`` then ``join()`` ends the threads.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pykraft.admin import AdminClient
from pykraft.consumer import Consumer
from pykraft.producer import Producer
from pykraft.types import ConsumerRecord, RecordMetadata, TopicPartition
from tests.chaos.history import FAIL, INFO, OK, History

OUTSTANDING_PER_PARTITION = 8
CLOSE_TIMEOUT_S = 20.0
POLL_MS = 300
COMMITTED_EVERY = 10
GROUP = "chaos-group"
REPLACE_AFTER_S = 2.0
ADMIN_ATTEMPTS = 10
ADMIN_RETRY_S = 2.0


@dataclass
class TopicState:
    """The topic the workload writes, and its partition count as the admin last changed it."""

    name: str
    partitions: int
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return self.partitions

    def grow(self, partitions: int) -> None:
        with self.lock:
            self.partitions = max(self.partitions, partitions)


class Worker(threading.Thread):
    def __init__(self, name: str, history: History) -> None:
        super().__init__(name=f"chaos-{name}", daemon=True)
        self.process = name
        self.history = history
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # reported by the harness: a worker must not die silently
            self.error = exc

    def work(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopping.set()


class ProducerWorker(Worker):
    def __init__(self, index: int, history: History, bootstrap: str, topic: TopicState,
                 rate_per_s: float, options: dict | None = None) -> None:  # fmt: skip
        super().__init__(f"producer-{index}", history)
        self.bootstrap, self.topic, self.rate_per_s = bootstrap, topic, rate_per_s
        self.options = options or {}  # more Producer settings (a negative control turns idempotence off)
        self.seq = 0
        self.outstanding: dict[int, int] = {}
        self.lock = threading.Lock()
        self.attempted = 0

    def work(self) -> None:
        producer, partitions = self.new_producer()
        interval_s = 1.0 / self.rate_per_s
        next_at = replaced_at = time.monotonic()
        turn = 0
        try:
            while not self.stopping.is_set():
                if self.topic.count() > partitions and time.monotonic() - replaced_at > REPLACE_AFTER_S:
                    # The topic grew: a new producer learns the new partition count.
                    producer, partitions = self.new_producer(producer)
                    replaced_at = time.monotonic()
                partition = turn % partitions
                turn += 1
                with self.lock:
                    busy = self.outstanding.get(partition, 0) >= OUTSTANDING_PER_PARTITION
                if busy:
                    self.stopping.wait(0.005)
                    continue
                self.send(producer, partition)
                next_at = max(next_at + interval_s, time.monotonic() - 1.0)  # no burst after a stall
                self.stopping.wait(max(0.0, next_at - time.monotonic()))
        finally:
            producer.close(CLOSE_TIMEOUT_S)

    def new_producer(self, old: Producer | None = None) -> tuple[Producer, int]:
        """A producer and the partition count it learned (a new partition may not be known yet)."""
        if old is not None:
            old.close(CLOSE_TIMEOUT_S)
        settings = {"acks": "all", "linger_ms": 5, "request_timeout_ms": 5000, "delivery_timeout_ms": 60_000,
                    "retry_backoff_ms": 100, "max_block_ms": 10_000, "metadata_max_age_ms": 2000}  # fmt: skip
        producer = Producer(self.bootstrap, **{**settings, **self.options})
        try:
            return producer, min(self.topic.count(), len(producer.partitions_for(self.topic.name)))
        except Exception:
            producer.close(CLOSE_TIMEOUT_S)
            raise

    def send(self, producer: Producer, partition: int) -> None:
        value = f"p{self.process.removeprefix('producer-')}-{self.seq}"
        self.seq += 1
        start = self.history.now()
        entry = {"topic": self.topic.name, "partition": partition, "value": value, "offset": -1}
        self.attempted += 1
        with self.lock:
            self.outstanding[partition] = self.outstanding.get(partition, 0) + 1

        def done(metadata: RecordMetadata | None, error: Exception | None) -> None:
            with self.lock:
                self.outstanding[partition] -= 1
            if error is None and metadata is not None:
                self.history.add(self.process, "send", OK, start, {**entry, "offset": metadata.offset})
            else:
                self.history.add(self.process, "send", INFO, start, entry, error=repr(error))

        try:
            producer.send(self.topic.name, value.encode(), partition=partition, on_delivery=done)
        except Exception as exc:
            with self.lock:
                self.outstanding[partition] -= 1
            self.history.add(self.process, "send", FAIL, start, entry, error=repr(exc))


class ConsumerWorker(Worker):
    """Assigned partitions (no group): every partition of the topic, from the beginning."""

    def __init__(self, index: int, history: History, bootstrap: str, topic: TopicState) -> None:
        super().__init__(f"consumer-{index}", history)
        self.bootstrap, self.topic = bootstrap, topic
        self.generation = -1
        self.polled = 0

    def work(self) -> None:
        consumer = Consumer(self.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=200,
                            request_timeout_ms=5000, retry_backoff_ms=100,
                            metadata_max_age_ms=2000)  # fmt: skip
        with consumer:
            partitions = 0
            truncations = 0
            while not self.stopping.is_set():
                if self.topic.count() != partitions:
                    partitions = self.topic.count()
                    self.assign(consumer, partitions)
                start = self.history.now()
                try:
                    records = consumer.poll(POLL_MS)
                except Exception as exc:  # a poll that failed: recorded, and the consumer goes on
                    value = {"generation": self.generation, "records": []}
                    self.history.add(self.process, "poll", FAIL, start, value, error=repr(exc))
                    self.stopping.wait(0.1)
                    continue
                if records:
                    self.record_poll(start, records)
                for t in consumer.truncations[truncations:]:
                    value = {"topic": t.topic_partition.topic, "partition": t.topic_partition.partition,
                             "position": t.position, "divergent_offset": t.divergent_offset}  # fmt: skip
                    self.history.add(self.process, "truncation", OK, start, value)
                truncations = len(consumer.truncations)

    def assign(self, consumer: Consumer, partitions: int) -> None:
        self.generation += 1
        start = self.history.now()
        tps = [TopicPartition(self.topic.name, p) for p in range(partitions)]
        consumer.assign(tps)
        value = {"generation": self.generation, "partitions": [[tp.topic, tp.partition] for tp in tps]}
        self.history.add(self.process, "assign", OK, start, value)

    def record_poll(self, start: float, records: list[ConsumerRecord]) -> None:
        self.polled += len(records)
        rows = [[r.topic, r.partition, r.offset, (r.value or b"").decode()] for r in records]
        self.history.add(self.process, "poll", OK, start, {"generation": self.generation, "records": rows})


class GroupConsumerWorker(Worker):
    """A member of consumer group ``GROUP`` subscribed to the topic, committing after every poll.

    Each ``on_assign`` is an ``assign`` op listing the partitions it added (a new generation for
    them in the checker); each non-empty poll is followed by a synchronous ``commit`` of the offsets
    after the records it returned (``fail`` when the group rebalanced meanwhile — nothing was
    committed; ``info`` on other errors), and every ``COMMITTED_EVERY`` polls by a ``committed`` op
    (OffsetFetch) of the assigned partitions. Every ``RESTART_S`` (seeded) the member closes (leaving
    the group) and a new one joins in its place — a ``restart`` op — so rebalances and resuming from
    committed offsets happen often.
    """

    GROUP = GROUP
    RESTART_S = (20.0, 40.0)

    def __init__(self, index: int, history: History, bootstrap: str, topic: TopicState) -> None:
        super().__init__(f"consumer-{index}", history)
        self.bootstrap, self.topic = bootstrap, topic
        self.polled = 0
        self.consumer: Consumer | None = None
        self.rng = random.Random(index)

    def work(self) -> None:
        while not self.stopping.is_set():
            start = self.history.now()
            self.member(time.monotonic() + self.rng.uniform(*self.RESTART_S))
            self.history.add(self.process, "restart", OK, start, {"group": self.GROUP})

    def member(self, until: float) -> None:
        """One group member, polling until ``until`` (or the stop)."""
        self.consumer = Consumer(
            self.bootstrap, group_id=self.GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=6000, heartbeat_interval_ms=1000, max_poll_interval_ms=60_000,
            fetch_max_wait_ms=200, request_timeout_ms=5000, retry_backoff_ms=100, metadata_max_age_ms=2000,
        )  # fmt: skip
        with self.consumer as consumer:
            consumer.subscribe([self.topic.name], on_assign=self.on_assign, on_revoke=self.on_revoke)
            polls = 0
            while not self.stopping.is_set() and time.monotonic() < until:
                start = self.history.now()
                try:
                    records = consumer.poll(POLL_MS)
                except Exception as exc:
                    value = {"generation": consumer.generation_id(), "records": []}
                    self.history.add(self.process, "poll", FAIL, start, value, error=repr(exc))
                    self.stopping.wait(0.1)
                    continue
                if records:
                    self.polled += len(records)
                    rows = [[r.topic, r.partition, r.offset, (r.value or b"").decode()] for r in records]
                    value = {"generation": consumer.generation_id(), "records": rows}
                    self.history.add(self.process, "poll", OK, start, value)
                    self.commit(consumer, records)
                polls += 1
                if polls % COMMITTED_EVERY == 0 and consumer.assignment():
                    self.fetch_committed(consumer)

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        assert self.consumer is not None
        value = {"generation": self.consumer.generation_id(),
                 "partitions": sorted([tp.topic, tp.partition] for tp in partitions)}  # fmt: skip
        self.history.add(self.process, "assign", OK, self.history.now(), value)

    def on_revoke(self, partitions: list[TopicPartition]) -> None:
        assert self.consumer is not None
        value = {"generation": self.consumer.generation_id(),
                 "partitions": sorted([tp.topic, tp.partition] for tp in partitions)}  # fmt: skip
        self.history.add(self.process, "revoke", OK, self.history.now(), value)

    def commit(self, consumer: Consumer, records: list[ConsumerRecord]) -> None:
        from pykraft.consumer_coordinator import CommitFailedError  # only with consumer groups

        offsets = {TopicPartition(r.topic, r.partition): r.offset + 1 for r in records}
        value = {"group": self.GROUP, "generation": consumer.generation_id(),
                 "offsets": sorted([tp.topic, tp.partition, o] for tp, o in offsets.items())}  # fmt: skip
        start = self.history.now()
        try:
            consumer.commit(offsets)
        except CommitFailedError as exc:
            self.history.add(self.process, "commit", FAIL, start, value, error=repr(exc))
        except Exception as exc:
            self.history.add(self.process, "commit", INFO, start, value, error=repr(exc))
        else:
            self.history.add(self.process, "commit", OK, start, value)

    def fetch_committed(self, consumer: Consumer) -> None:
        start = self.history.now()
        try:
            committed = consumer.committed(list(consumer.assignment()))
        except Exception as exc:
            value = {"group": self.GROUP, "generation": consumer.generation_id(), "offsets": []}
            self.history.add(self.process, "committed", INFO, start, value, error=repr(exc))
            return
        offsets = sorted([tp.topic, tp.partition, o] for tp, o in committed.items() if o is not None)
        value = {"group": self.GROUP, "generation": consumer.generation_id(), "offsets": offsets}
        self.history.add(self.process, "committed", OK, start, value)


class AdminWorker(Worker):
    """Runs the admin operations the run schedules (``submit``), one at a time."""

    def __init__(self, history: History, controllers: str) -> None:
        super().__init__("admin", history)
        self.controllers = controllers
        self.queue: list[tuple[str, dict, Callable[[AdminClient], None], int]] = []
        self.lock = threading.Lock()

    def submit(self, f: str, value: dict, action: Callable[[AdminClient], None]) -> None:
        with self.lock:
            self.queue.append((f, value, action, 1))

    def work(self) -> None:
        with AdminClient(self.controllers, timeout_s=20.0) as admin:
            while not self.stopping.is_set():
                with self.lock:
                    task = self.queue.pop(0) if self.queue else None
                if task is None:
                    self.stopping.wait(0.1)
                    continue
                f, value, action, attempt = task
                start = self.history.now()
                try:
                    action(admin)
                except Exception as exc:
                    self.history.add(self.process, f, INFO, start, value, error=repr(exc))
                    if attempt < ADMIN_ATTEMPTS:  # faults make admin calls fail; retry a bit later
                        self.stopping.wait(ADMIN_RETRY_S)
                        with self.lock:
                            self.queue.append((f, value, action, attempt + 1))
                else:
                    self.history.add(self.process, f, OK, start, value)
