"""The chaos workload: idempotent producers, consumers and an admin, each a thread writing to the history.

The producers and consumers are confluent-kafka's (librdkafka), talking the Kafka protocol to the
brokers through the chaos proxy; the admin is pykraft's gRPC ``AdminClient`` (topics are managed over
gRPC).

- **Producers** (``producer-N``): one ``confluent_kafka.Producer`` each (``acks=all``, idempotent, one
  request in flight per broker: ``PRODUCER_SETTINGS``),
  writing unique values ``pN-SEQ`` round-robin over the topic's partitions, at most
  ``OUTSTANDING_PER_PARTITION`` unacknowledged per partition (so that a stalled partition does not
  stall the others), at a bounded rate. Each send becomes an op when its delivery report arrives:
  ``ok`` with its offset, ``info`` on any error (with retries until ``message.timeout.ms`` the outcome
  of a failed idempotent send is unknown), ``fail`` when ``produce`` itself refused the record. A
  producer learns a grown partition count from Metadata; one that hit a fatal error or a lost
  sequence (``LOST_SEQUENCE``) is replaced by a new one.
- **Consumers** (``consumer-N``): members of one consumer group subscribed to the topic
  (``GroupConsumerWorker``: every ``on_assign`` starts a generation of the partitions it adds, every
  non-empty poll is an op followed by a synchronous commit, OffsetFetch now and then) — or, without
  groups, ``Consumer.assign`` over every partition (``ConsumerWorker``: a new assignment when the
  topic grew starts a new generation; every log truncation librdkafka reports (KIP-320) is an op).
- **Admin** (``admin``): creates topics and adds partitions when the run asks it to; an attempt that
  fails (faults!) is an ``info`` op and is tried again, up to ``ADMIN_ATTEMPTS`` times.

Every wait is bounded; ``stop()`` then ``join()`` ends the threads.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from pykraft.admin import AdminClient
from tests.chaos.history import FAIL, INFO, OK, History

OUTSTANDING_PER_PARTITION = 8
CLOSE_TIMEOUT_S = 20.0
POLL_S = 0.3
POLL_RECORDS_MAX = 500
METADATA_TIMEOUT_S = 10.0
COMMITTED_EVERY = 10
# The partition's leader lost this producer's sequence (an unclean election made a replica that
# lacks acknowledged batches the leader): librdkafka 2.16 reports the batches with this error and
# then sends nothing more to the partition, so the worker replaces the producer (a new producer id).
LOST_SEQUENCE = frozenset({KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, KafkaError.UNKNOWN_PRODUCER_ID})
REPLACE_FLUSH_S = 5.0
# One Produce request in flight per broker connection. With more, librdkafka (2.16; issue
# confluentinc/librdkafka#4953) answers OUT_OF_ORDER_SEQUENCE_NUMBER on a later in-flight batch (its
# earlier batch was refused, e.g. NOT_ENOUGH_REPLICAS, while a replica rejoined) by bumping the
# producer epoch for *every* partition and renumbering all unacknowledged messages from sequence 0,
# including a batch that a killed leader appended and replicated but never acknowledged: the new
# leader then rightly appends it again under the new epoch (a duplicate KIP-98 cannot catch, as with
# Kafka itself). The Java client only re-enqueues in that case. With one request in flight a refused
# batch is retried before any later one is sent, so there is no such OUT_OF_ORDER_SEQUENCE_NUMBER.
PRODUCER_SETTINGS = {"max.in.flight.requests.per.connection": 1}
# max.poll.interval.ms, which librdkafka also sends as the group's rebalance timeout: a member that
# closes while the group rebalances waits up to this long for the others to rejoin, and the harness
# joins a stopped worker within run.JOIN_TIMEOUT_S (60 s).
REBALANCE_TIMEOUT_MS = 20_000
GROUP = "chaos-group"
ADMIN_ATTEMPTS = 10
ADMIN_RETRY_S = 2.0
# A commit that certainly did not happen: the member is not (or no longer) in the generation it used.
COMMIT_REFUSED = frozenset({KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION,
                            KafkaError.UNKNOWN_MEMBER_ID, KafkaError._ASSIGNMENT_LOST})  # fmt: skip
# librdkafka settings shared by every client of the workload: short timeouts, fresh metadata.
# The reconnect backoff doubles per failed connection up to 10 s by default: faults would cost a
# client more than they last.
CLIENT_SETTINGS = {"socket.timeout.ms": 5000, "retry.backoff.ms": 100, "reconnect.backoff.max.ms": 1000,
                   "topic.metadata.refresh.interval.ms": 2000}  # fmt: skip


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
        self.options = options or {}  # more librdkafka settings (a negative control turns idempotence off)
        self.seq = 0
        self.outstanding: dict[int, int] = {}
        self.pending: dict[str, tuple[float, dict]] = {}  # value -> (start, op value) until its report
        self.lock = threading.Lock()
        self.attempted = 0
        self.fatal: KafkaError | None = None  # the producer must be replaced

    def work(self) -> None:
        producer = self.new_producer()
        partitions = self.partitions(producer)
        interval_s = 1.0 / self.rate_per_s
        next_at = time.monotonic()
        turn = 0
        try:
            while not self.stopping.is_set():
                self.serve(producer, 0)  # delivery reports
                if self.fatal is not None:
                    self.close(producer, REPLACE_FLUSH_S)
                    producer, self.fatal = self.new_producer(), None
                if self.topic.count() > partitions:  # the topic grew: use the new partition once known
                    partitions = self.partitions(producer)
                partition = turn % partitions
                turn += 1
                with self.lock:
                    busy = self.outstanding.get(partition, 0) >= OUTSTANDING_PER_PARTITION
                if busy:
                    self.serve(producer, 0.005)
                    continue
                self.send(producer, partition)
                next_at = max(next_at + interval_s, time.monotonic() - 1.0)  # no burst after a stall
                self.serve(producer, max(0.0, next_at - time.monotonic()))
        finally:
            self.close(producer)

    def serve(self, producer: Producer, timeout_s: float) -> None:
        """Delivery reports for up to ``timeout_s``; a fatal error marks the producer for replacement."""
        try:
            producer.poll(timeout_s)
        except KafkaException as exc:
            self.fatal = exc.args[0]

    def new_producer(self) -> Producer:
        return Producer(self.producer_settings())

    def producer_settings(self) -> dict:
        settings = {"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                    "linger.ms": 5, "request.timeout.ms": 5000, "message.timeout.ms": 60_000,
                    **CLIENT_SETTINGS, **PRODUCER_SETTINGS}  # fmt: skip
        return {**settings, **self.options}

    def partitions(self, producer: Producer) -> int:
        """The partition count to write to: the topic's, as far as the producer's Metadata knows it."""
        try:
            metadata = producer.list_topics(self.topic.name, timeout=METADATA_TIMEOUT_S)
            known = len(metadata.topics[self.topic.name].partitions)
        except KafkaException:
            known = 0
        return max(1, min(self.topic.count(), known))

    def close(self, producer: Producer, flush_s: float = CLOSE_TIMEOUT_S) -> None:
        """Deliver what is outstanding (bounded), then purge the rest: their reports are ``info``. A
        producer in a fatal state refuses to flush or purge: its sends without a report are ``info``."""
        try:
            producer.flush(flush_s)
            producer.purge()
            producer.flush(CLOSE_TIMEOUT_S)
        except KafkaException as exc:
            with self.lock:
                abandoned, self.pending = self.pending, {}
                self.outstanding.clear()
            for start, entry in abandoned.values():
                self.history.add(self.process, "send", INFO, start, entry, error=f"abandoned: {exc}")

    def send(self, producer: Producer, partition: int) -> None:
        value = f"p{self.process.removeprefix('producer-')}-{self.seq}"
        self.seq += 1
        start = self.history.now()
        entry = {"topic": self.topic.name, "partition": partition, "value": value, "offset": -1}
        self.attempted += 1
        with self.lock:
            self.outstanding[partition] = self.outstanding.get(partition, 0) + 1
            self.pending[value] = (start, entry)

        def done(error: KafkaError | None, message: Message) -> None:
            with self.lock:
                if self.pending.pop(value, None) is None:
                    return  # abandoned with its producer (close): already an ``info`` op
                self.outstanding[partition] -= 1
            if error is None and message.offset() is None:  # acknowledged, but librdkafka names no offset:
                self.history.add(self.process, "send", INFO, start, entry,  # no position to check it at
                                 error="acknowledged without an offset")  # fmt: skip
            elif error is None:
                self.history.add(self.process, "send", OK, start, {**entry, "offset": message.offset()})
            else:
                if error.fatal() or error.code() in LOST_SEQUENCE:
                    self.fatal = error
                self.history.add(self.process, "send", INFO, start, entry, error=str(error))

        try:
            producer.produce(self.topic.name, value.encode(), partition=partition, on_delivery=done)
        except (BufferError, KafkaException) as exc:
            with self.lock:
                self.outstanding[partition] -= 1
                self.pending.pop(value, None)
            if isinstance(exc, KafkaException) and exc.args[0].fatal():
                self.fatal = exc.args[0]  # a producer in a fatal state refuses every record: replace it
            self.history.add(self.process, "send", FAIL, start, entry, error=repr(exc))


def rows(messages: list[Message]) -> list[list]:
    return [[m.topic(), m.partition(), m.offset(), (m.value() or b"").decode()] for m in messages]


class ConsumerWorker(Worker):
    """Assigned partitions (no group): every partition of the topic, from the beginning."""

    def __init__(self, index: int, history: History, bootstrap: str, topic: TopicState) -> None:
        super().__init__(f"consumer-{index}", history)
        self.bootstrap, self.topic = bootstrap, topic
        self.generation = -1
        self.polled = 0

    def work(self) -> None:
        # A group id is required by the client; nothing joins the group or commits (assign, no auto-commit).
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"chaos-{self.process}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "fetch.wait.max.ms": 200, **CLIENT_SETTINGS})  # fmt: skip
        try:
            partitions = 0
            while not self.stopping.is_set():
                if self.topic.count() != partitions:
                    partitions = self.topic.count()
                    self.assign(consumer, partitions)
                start = self.history.now()
                messages = consumer.consume(POLL_RECORDS_MAX, POLL_S)
                records = [m for m in messages if m.error() is None]
                for m in messages:
                    if m.error() is not None:
                        self.error_op(start, m)
                if records:
                    self.polled += len(records)
                    self.history.add(self.process, "poll", OK, start,
                                     {"generation": self.generation, "records": rows(records)})  # fmt: skip
        finally:
            consumer.close()

    def error_op(self, start: float, message: Message) -> None:
        """A log truncation (KIP-320 offset validation found the fetched-from log diverged) is an op;
        other errors are reported and retried by the client itself."""
        error = message.error()
        if error.code() != KafkaError._LOG_TRUNCATION:
            return
        # librdkafka names the positions only in the text: "... at offset N (leader epoch E) ... to
        # offset M ..."; -1 where it does not.
        offsets = [int(n) for n in re.findall(r"offset (-?\d+)", error.str())] + [-1, -1]
        value = {"topic": message.topic(), "partition": message.partition(), "position": offsets[0],
                 "divergent_offset": offsets[1]}  # fmt: skip
        self.history.add(self.process, "truncation", OK, start, value, error=error.str())

    def assign(self, consumer: Consumer, partitions: int) -> None:
        self.generation += 1
        start = self.history.now()
        tps = [TopicPartition(self.topic.name, p, OFFSET_BEGINNING) for p in range(partitions)]
        consumer.assign(tps)
        value = {"generation": self.generation, "partitions": [[tp.topic, tp.partition] for tp in tps]}
        self.history.add(self.process, "assign", OK, start, value)


class GroupConsumerWorker(Worker):
    """A member of consumer group ``GROUP`` subscribed to the topic, committing after every poll.

    Each ``on_assign`` is an ``assign`` op listing the partitions it added (a new generation for
    them in the checker); each non-empty poll is followed by a synchronous ``commit`` of the offsets
    after the records it returned (``fail`` when the group rebalanced meanwhile — nothing was
    committed; ``info`` on other errors), and every ``COMMITTED_EVERY`` polls by a ``committed`` op
    (OffsetFetch) of the assigned partitions. Every ``RESTART_S`` (seeded) the member closes (leaving
    the group) and a new one joins in its place — a ``restart`` op — so rebalances and resuming from
    committed offsets happen often. librdkafka does not expose the group's generation id: the ops'
    ``generation`` is this member's count of assignments, for reading a history.
    """

    GROUP = GROUP
    RESTART_S = (20.0, 40.0)

    def __init__(self, index: int, history: History, bootstrap: str, topic: TopicState) -> None:
        super().__init__(f"consumer-{index}", history)
        self.bootstrap, self.topic = bootstrap, topic
        self.polled = 0
        self.generation = 0
        self.rng = random.Random(index)

    def work(self) -> None:
        while not self.stopping.is_set():
            start = self.history.now()
            self.member(time.monotonic() + self.rng.uniform(*self.RESTART_S))
            self.history.add(self.process, "restart", OK, start, {"group": self.GROUP})

    def member(self, until: float) -> None:
        """One group member, polling until ``until`` (or the stop)."""
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.GROUP, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": REBALANCE_TIMEOUT_MS, "fetch.wait.max.ms": 200, **CLIENT_SETTINGS,
        })  # fmt: skip
        try:
            consumer.subscribe([self.topic.name], on_assign=self.on_assign, on_revoke=self.on_revoke)
            polls = 0
            while not self.stopping.is_set() and time.monotonic() < until:
                start = self.history.now()
                records = [m for m in consumer.consume(POLL_RECORDS_MAX, POLL_S) if m.error() is None]
                if records:
                    self.polled += len(records)
                    value = {"generation": self.generation, "records": rows(records)}
                    self.history.add(self.process, "poll", OK, start, value)
                    self.commit(consumer, records)
                polls += 1
                if polls % COMMITTED_EVERY == 0 and consumer.assignment():
                    self.fetch_committed(consumer)
        finally:
            consumer.close()  # leaves the group

    def on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.generation += 1
        value = {"generation": self.generation,
                 "partitions": sorted([tp.topic, tp.partition] for tp in partitions)}  # fmt: skip
        self.history.add(self.process, "assign", OK, self.history.now(), value)

    def on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        value = {"generation": self.generation,
                 "partitions": sorted([tp.topic, tp.partition] for tp in partitions)}  # fmt: skip
        self.history.add(self.process, "revoke", OK, self.history.now(), value)

    def commit(self, consumer: Consumer, records: list[Message]) -> None:
        offsets = {(m.topic(), m.partition()): m.offset() + 1 for m in records}
        value = {"group": self.GROUP, "generation": self.generation,
                 "offsets": sorted([t, p, o] for (t, p), o in offsets.items())}  # fmt: skip
        start = self.history.now()
        try:
            answered = consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                       asynchronous=False)  # fmt: skip
        except KafkaException as exc:
            refused = exc.args[0].code() in COMMIT_REFUSED
            self.history.add(self.process, "commit", FAIL if refused else INFO, start, value, error=str(exc))
            return
        errors = [tp.error for tp in answered or [] if tp.error is not None]
        if errors:
            self.history.add(self.process, "commit", INFO, start, value, error=str(errors[0]))
        else:
            self.history.add(self.process, "commit", OK, start, value)

    def fetch_committed(self, consumer: Consumer) -> None:
        start = self.history.now()
        try:
            committed = consumer.committed(consumer.assignment(), timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            value = {"group": self.GROUP, "generation": self.generation, "offsets": []}
            self.history.add(self.process, "committed", INFO, start, value, error=str(exc))
            return
        offsets = sorted([tp.topic, tp.partition, tp.offset] for tp in committed
                         if tp.error is None and tp.offset >= 0)  # fmt: skip
        value = {"group": self.GROUP, "generation": self.generation, "offsets": offsets}
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
