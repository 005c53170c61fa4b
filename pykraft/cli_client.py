"""``pykraft produce`` and ``pykraft consume``: Kafka's console producer and consumer, on confluent-kafka.

    printf 'a\\nb\\n' | pykraft produce --bootstrap 127.0.0.1:9092 --topic T --acks all
    printf 'k1:v1\\n' | pykraft produce --bootstrap ... --topic T --key-separator :
    pykraft consume --bootstrap ... --topic T --from-beginning --max-messages 2 --print-offsets

``--bootstrap`` lists brokers' Kafka listeners (default ``$KAFKA_BOOTSTRAP``, printed by ``pykraft
cluster up``); the commands run confluent-kafka's ``Producer`` and ``Consumer`` (librdkafka) against
them. ``produce`` sends every stdin line (without its newline) as one record's value, or as key and
value split at the first ``--key-separator``; with ``--acks all`` the producer is idempotent. It exits
0 once every record is acknowledged, 1 if any failed (each failure is reported on stderr with its
Kafka error, e.g. ``line 2: MESSAGE_TOO_LARGE (10): ...``; an unknown topic is reported before
anything is sent), 2 on bad usage (a line without the separator is bad usage: nothing after it is
sent). ``consume`` prints one record per line (``--print-offsets`` prefixes ``partition:offset<TAB>``,
``--print-key`` prefixes ``key<SEP>``) and stops after ``--max-messages`` records or ``--timeout-ms``
without a record; it says how many it processed on stderr (``Processed a total of N messages``).
Bytes are written as they are (no decoding). Runs longer than ``--progress-interval-ms`` (10 s) print
a progress line to stderr at that interval.

``consume --group G`` subscribes to ``--topic`` as a member of consumer group G (like
``kafka-console-consumer.sh --group``): the group assigns the partitions, reading starts at the
group's committed offsets (``--from-beginning`` only matters where none is committed), and the
offsets of every batch are committed synchronously right after it is printed (at-least-once: a
crash re-prints at most the batch being printed). Assignment changes go to stderr as
``Assigned: t-0 t-1`` / ``Revoked: ...``. ``--consumer-property KEY=VALUE`` passes Kafka consumer
settings (``session.timeout.ms``, ``heartbeat.interval.ms``, ``max.poll.interval.ms``,
``group.instance.id``, ``partition.assignment.strategy``, ... — librdkafka's names, plus the Java
client's ``fetch.max.wait.ms``, ``request.timeout.ms`` and ``max.poll.records``). SIGTERM closes the
consumer cleanly (LeaveGroup; what was printed is committed already).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from pykraft.cli_kafka import (
    BOOTSTRAP_MISSING,
    WHERE_KAFKA_LISTENERS,
    BootstrapError,
    ProduceError,
    ProduceErrorWatch,
    add_bootstrap,
    check_bootstrap,
    client_config,
    console_group_id,
    describe_error,
    watched_logger,
)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C
MY_COMMANDS = ("produce", "consume")
FOREVER = -1
PROGRESS_INTERVAL_MS = 10_000
METADATA_TIMEOUT_S = 30.0
ERRORS_SHOWN = 5  # failed records reported one by one; the rest are counted
CONSUME_BATCH = 500
# The Java client's names that librdkafka spells differently; max.poll.records is the CLI's batch.
JAVA_CONSUMER_NAMES = {"fetch.max.wait.ms": "fetch.wait.max.ms", "request.timeout.ms": "socket.timeout.ms"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    if "produce" not in sub.choices:
        _add_produce(sub)
    if "consume" not in sub.choices:
        _add_consume(sub)


def _common(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--topic", required=True, help="the topic (required; no default)")
    p.add_argument(
        "--progress-interval-ms",
        type=int,
        default=PROGRESS_INTERVAL_MS,
        help=f"print a progress line on stderr this often (default {PROGRESS_INTERVAL_MS}; 0: never)",
    )


def _add_produce(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="send stdin lines as records (like kafka-console-producer.sh)")
    _common(p)
    p.add_argument(
        "--key-separator",
        help="split each line into key SEP value at the first SEP (default: none, the line is the value)",
    )
    p.add_argument(
        "--acks", default="all", choices=["all", "-1", "1", "0"],
        help="acknowledgements to wait for: all (-1) = every in-sync replica, idempotent; 1 = the leader; "
        "0 = none (default all)",
    )  # fmt: skip
    p.add_argument(
        "--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="compression.type of the record batches (default none)",
    )  # fmt: skip
    p.add_argument(
        "--partition", type=int, help="send every record to this partition (default: by key, else spread)"
    )
    p.add_argument(
        "--linger-ms", type=int, default=5, help="linger.ms: wait this long to fill a batch (default 5)"
    )
    p.add_argument("--batch-size", type=int, default=16_384, help="batch.size in bytes (default 16384)")
    p.add_argument(
        "--timeout-ms", type=int, default=120_000,
        help="delivery.timeout.ms: give a record up after this long, retries included (default 120000)",
    )  # fmt: skip
    p.set_defaults(func=run_produce)


def _add_consume(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consume", help="print records to stdout (like kafka-console-consumer.sh)")
    _common(p)
    p.add_argument(
        "--from-beginning", action="store_true",
        help="start at the log start, not the end (default: the end, only new records)",
    )  # fmt: skip
    p.add_argument("--partition", type=int, help="read only this partition (default: every partition)")
    p.add_argument(
        "--offset", help="with --partition: an offset, 'earliest' or 'latest' (default latest, or earliest "
        "with --from-beginning)",
    )  # fmt: skip
    p.add_argument(
        "--max-messages", type=int, default=FOREVER, help="stop after N records (default -1: no limit)"
    )
    p.add_argument(
        "--timeout-ms", type=int, default=FOREVER,
        help="stop after this long without a record; bounds the wait for metadata too (default -1: never)",
    )  # fmt: skip
    p.add_argument(
        "--print-offsets", action="store_true",
        help="prefix each line with partition:offset TAB (default off)",
    )
    p.add_argument(
        "--print-key", action="store_true",
        help="prefix each value with its key and --key-separator (default off)",
    )  # fmt: skip
    p.add_argument(
        "--key-separator", default="\t", help="what --print-key puts between key and value (default TAB)"
    )
    p.add_argument(
        "--group",
        help="consume as a member of this consumer group, committing as it prints (default: no group, "
        "every partition assigned)",
    )
    p.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a consumer setting by its Kafka name, e.g. session.timeout.ms=6000 (repeatable; needs "
        "--group; default: none)",
    )
    p.set_defaults(func=run_consume)


class _UsageError(Exception):
    pass


class _Failed(Exception):
    """A failure already described as ``NAME (code): message``; exit 1."""


def consumer_properties(items: list[str]) -> tuple[dict[str, str], int]:
    """``["session.timeout.ms=6000", ...]`` -> (librdkafka settings, records per batch)."""
    settings: dict[str, str] = {}
    batch = CONSUME_BATCH
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise _UsageError(
                f"--consumer-property {item!r}: expected KEY=VALUE, e.g. session.timeout.ms=6000"
            )
        if key == "max.poll.records":
            try:
                batch = int(value)
            except ValueError:
                raise _UsageError(f"--consumer-property {item!r}: {value!r} is not a valid value") from None
            if batch < 1:
                raise _UsageError(f"--consumer-property {item!r}: max.poll.records must be >= 1")
            continue
        settings[JAVA_CONSUMER_NAMES.get(key, key)] = value
    return settings, batch


def _no_kafka_listener(bootstrap: str) -> int | None:
    """Exit 1 at once, naming each address and what answers there, when no address of --bootstrap is a
    Kafka listener (nothing listens, or it is a controller's gRPC port); None when one is."""
    try:
        check_bootstrap(bootstrap)
    except BootstrapError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return None


def _usage(message: str) -> int:
    print(f"Error: {message}", file=sys.stderr)
    return EXIT_USAGE


class _Progress:
    """A progress line on stderr every ``interval_ms`` (never when it is 0)."""

    def __init__(self, interval_ms: int, line: Callable[[float], str]) -> None:
        self._interval_s = interval_ms / 1000
        self._line = line
        self._started = time.monotonic()
        self._next = self._started + self._interval_s

    def tick(self) -> None:
        if self._interval_s <= 0:
            return
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self._interval_s
            print(self._line(now - self._started), file=sys.stderr, flush=True)


def _check_partitions(client: Any, topic: str, partition: int | None,
                      timeout_s: float = METADATA_TIMEOUT_S) -> list[int]:  # fmt: skip
    """The topic's partitions from a Metadata request (waiting at most ``timeout_s``); an unknown topic
    -> _Failed, a partition it does not have -> _UsageError."""
    from confluent_kafka import KafkaException

    try:
        metadata = client.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        raise _Failed(
            f"{describe_error(exc)}: no Metadata answer within {timeout_s:g} s from --bootstrap "
            f"({WHERE_KAFKA_LISTENERS})"
        ) from None
    described = metadata.topics.get(topic)
    if described is None or described.error is not None:
        reason = describe_error(described.error) if described is not None else "not in the Metadata answer"
        raise _Failed(f"{reason} (topic {topic!r})")
    partitions = sorted(described.partitions)
    if partition is not None and partition not in partitions:
        raise _UsageError(f"topic {topic!r} has partitions 0..{len(partitions) - 1}, not {partition}")
    return partitions


# ---- produce ----------------------------------------------------------------------------------------


class _DeliveryReport:
    """Counts acknowledgements and failures; librdkafka calls it from ``poll``/``flush``. A failure
    names the broker's last error for the record's partition when librdkafka reports only that it gave
    up (``_MSG_TIMED_OUT`` after retrying NOT_ENOUGH_REPLICAS, ...)."""

    def __init__(self, retries: _RetryReport) -> None:
        self.acknowledged = 0
        self.failed = 0
        self._retries = retries

    def for_line(self, number: int) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                self.acknowledged += 1
                return
            self.failed += 1
            if self.failed <= ERRORS_SHOWN:
                cause = self._retries.last_cause(msg.topic(), msg.partition())
                last = f" (last cause: {cause})" if cause else ""
                print(f"Error: line {number}: {describe_error(err)}{last}", file=sys.stderr, flush=True)

        return on_delivery


class _RetryReport:
    """Shows each retriable Produce error as it happens (``NOT_ENOUGH_REPLICAS for orders-0 (ISR 2 <
    min.insync.replicas 3), retrying``): once when a partition's error changes, then again every
    ``REPEAT_S`` while it lasts."""

    REPEAT_S = 5.0

    def __init__(self, watch: ProduceErrorWatch, bootstrap: str) -> None:
        self._watch = watch
        self._bootstrap = bootstrap
        self._shown: dict[tuple[str, int], tuple[str, float]] = {}
        self._causes: dict[tuple[str, int], str] = {}

    def last_cause(self, topic: str, partition: int) -> str:
        self.show(None)
        return self._causes.get((topic, partition), "")

    def show(self, producer: Any) -> None:
        for error in self._watch.take():
            key = (error.topic, error.partition)
            now = time.monotonic()
            shown = self._shown.get(key)
            if shown is not None and shown[0] == error.name and now - shown[1] < self.REPEAT_S:
                continue
            cause = f"{error.name} for {error.topic}-{error.partition}"
            if producer is not None and error.name == "NOT_ENOUGH_REPLICAS":
                cause += self._isr_detail(producer, error)
            elif self._causes.get(key, "").startswith(cause):
                cause = self._causes[key]  # keep the detail found before
            self._causes[key] = cause
            self._shown[key] = (error.name, now)
            if error.retriable:
                print(f"{cause}, retrying", file=sys.stderr, flush=True)

    def _isr_detail(self, producer: Any, error: ProduceError) -> str:
        """`` (ISR 2 < min.insync.replicas 3)``, or as much of it as the cluster tells within a second."""
        from confluent_kafka import KafkaException

        isr = min_isr = None
        try:
            described = producer.list_topics(error.topic, timeout=1.0).topics[error.topic]
            isr = len(described.partitions[error.partition].isrs)
        except (KafkaException, KeyError):
            pass
        min_isr = _min_insync_replicas(self._bootstrap, error.topic)
        if isr is None and min_isr is None:
            return ""
        return f" (ISR {'?' if isr is None else isr} < min.insync.replicas {min_isr or '?'})"


def _min_insync_replicas(bootstrap: str, topic: str) -> str | None:
    """The topic's effective min.insync.replicas (DescribeConfigs), None if not known within 2 s."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(client_config(bootstrap))
    try:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        futures = admin.describe_configs([resource], request_timeout=2)
        entries = next(iter(futures.values())).result(timeout=2)
    except (KafkaException, TimeoutError, StopIteration):
        return None
    entry = entries.get("min.insync.replicas")
    return None if entry is None else entry.value


def run_produce(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    if not args.bootstrap:
        return _usage(BOOTSTRAP_MISSING)
    if (failed := _no_kafka_listener(args.bootstrap)) is not None:
        return failed
    from confluent_kafka import KafkaException, Producer

    source = stdin or sys.stdin.buffer
    separator = args.key_separator.encode() if args.key_separator else None
    acks = "all" if args.acks == "-1" else args.acks
    settings = {
        "acks": acks, "enable.idempotence": acks == "all", "compression.type": args.compression,
        "linger.ms": args.linger_ms, "batch.size": args.batch_size, "message.timeout.ms": args.timeout_ms,
    }  # fmt: skip
    watch = ProduceErrorWatch()
    config = client_config(args.bootstrap, **settings, debug="msg")  # "msg": each partition error
    config["logger"] = watched_logger(args.client_log_level, watch)
    try:
        producer = Producer(config)
    except KafkaException as exc:
        return _usage(describe_error(exc))
    retries = _RetryReport(watch, args.bootstrap)
    report = _DeliveryReport(retries)
    sent = [0]
    progress = _Progress(args.progress_interval_ms, lambda s: (
        f"produce: {sent[0]} records sent, {report.acknowledged} acknowledged, {report.failed} failed "
        f"after {s:.0f} s"))  # fmt: skip
    code = EXIT_OK

    def tick() -> None:
        retries.show(producer)
        progress.tick()

    try:
        _check_partitions(producer, args.topic, args.partition)
        code = _send_lines(producer, args, source, separator, report, sent, tick)
        deadline = time.monotonic() + args.timeout_ms / 1000 + METADATA_TIMEOUT_S
        while producer.flush(1.0) > 0:
            tick()
            if time.monotonic() > deadline:
                unacknowledged = len(producer)
                raise _Failed(f"_TIMED_OUT: {unacknowledged} record(s) unacknowledged after --timeout-ms")
        retries.show(producer)
    except _UsageError as exc:
        code = _usage(str(exc))
    except _Failed as exc:
        print(f"Error: {exc}", file=sys.stderr)
        code = EXIT_ERROR
    finally:
        producer.flush(0)
    if report.failed:
        print(f"{report.failed} record(s) failed, {report.acknowledged} acknowledged", file=sys.stderr)
        return EXIT_ERROR
    return code


def _send_lines(producer: Any, args: argparse.Namespace, source: BinaryIO, separator: bytes | None,
                report: _DeliveryReport, sent: list[int], tick: Callable[[], None]) -> int:  # fmt: skip
    extra = {} if args.partition is None else {"partition": args.partition}
    for number, raw in enumerate(source, start=1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        line = line[:-1] if line.endswith(b"\r") else line
        key = None
        if separator is not None:
            key, found, line = line.partition(separator)
            if not found:
                return _usage(
                    f"line {number} has no key separator {separator!r}; nothing from it on was sent"
                )
        while True:
            try:
                producer.produce(args.topic, line, key, on_delivery=report.for_line(number), **extra)
                break
            except BufferError:  # librdkafka's queue is full: serve delivery reports, then retry
                producer.poll(0.1)
        sent[0] += 1
        producer.poll(0)
        tick()
    return EXIT_OK


# ---- consume ----------------------------------------------------------------------------------------


def run_consume(args: argparse.Namespace, stdout: BinaryIO | None = None) -> int:
    if not args.bootstrap:
        return _usage(BOOTSTRAP_MISSING)
    if args.offset is not None and args.partition is None:
        return _usage("--offset needs --partition")
    if args.group is not None and (args.partition is not None or args.offset is not None):
        return _usage("--group gets its partitions from the group: do not give --partition or --offset")
    if args.consumer_property and args.group is None:
        return _usage("--consumer-property is for group consumers: give --group too")
    from confluent_kafka import Consumer, KafkaException

    out = stdout or sys.stdout.buffer
    try:
        properties, batch = consumer_properties(args.consumer_property)
        settings = {
            "group.id": args.group or console_group_id(),
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
            "enable.auto.commit": False, "enable.auto.offset.store": False, **properties,
        }  # fmt: skip
        consumer = Consumer(client_config(args.bootstrap, args.client_log_level, **settings))
    except _UsageError as exc:
        return _usage(str(exc))
    except KafkaException as exc:
        return _usage(f"{describe_error(exc)} (check --consumer-property)")
    if (failed := _no_kafka_listener(args.bootstrap)) is not None:
        consumer.close()
        return failed
    total = [0]  # records printed so far (what the summary counts, even after Ctrl-C)
    interrupted = False
    previous = _stop_on_sigterm() if args.group is not None else None
    held = _HeldInterrupt.install()
    try:
        if args.group is not None:
            # Lost partitions (the session expired) are reported as revoked, as Kafka's listener does.
            consumer.subscribe([args.topic], on_assign=_report("Assigned"), on_revoke=_report("Revoked"))
        else:
            _assign(consumer, args)
        _print_records(held.client(consumer), args, out, batch, total)
    except KeyboardInterrupt:  # Ctrl-C: the summary, exit 130 as a shell expects, no traceback
        interrupted = True
    except _Failed as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except _UsageError as exc:
        return _usage(str(exc))
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the close short
        held.client(consumer).close()
        interrupted = held.uninstall() or interrupted
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print(f"Processed a total of {total[0]} messages", file=sys.stderr)
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


def _assign(consumer: Any, args: argparse.Namespace) -> None:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    partitions = _check_partitions(consumer, args.topic, args.partition, _metadata_timeout_s(args))
    chosen = [args.partition] if args.partition is not None else partitions
    if args.offset == "earliest" or (args.offset is None and args.from_beginning):
        start = OFFSET_BEGINNING
    elif args.offset in (None, "latest"):
        start = OFFSET_END
    else:
        try:
            start = int(args.offset)
        except ValueError:
            raise _UsageError(
                f"--offset must be a number, 'earliest' or 'latest', not {args.offset!r}"
            ) from None
        if start < 0:
            raise _UsageError(f"--offset must be >= 0, not {start}")
    consumer.assign([TopicPartition(args.topic, p, start) for p in chosen])


def _metadata_timeout_s(args: argparse.Namespace) -> float:
    """``consume --timeout-ms`` bounds the wait for metadata too."""
    if args.timeout_ms == FOREVER:
        return METADATA_TIMEOUT_S
    return min(METADATA_TIMEOUT_S, max(args.timeout_ms, 1) / 1000)


def _report(what: str) -> Callable[[Any, list[Any]], None]:
    def callback(_consumer: Any, partitions: list[Any]) -> None:
        names = " ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(partitions, key=lambda t: t.partition))
        print(f"{what}: {names}", file=sys.stderr, flush=True)

    return callback


class _HeldInterrupt:
    """Ctrl-C while confluent-kafka runs (``consume``, ``close``) is held until the call returns, then
    raised as KeyboardInterrupt; elsewhere it is raised at once, as Python does.

    Those calls run Python callbacks (rebalance listeners, the logger), and confluent-kafka 2.16 loses
    a KeyboardInterrupt raised inside one: ``consume`` then raises "SystemError: ... returned NULL
    without setting an exception" (a traceback and exit 1 instead of the summary and 130). A Ctrl-C
    during the group's first assignment hit that. ``consume`` polls at most ``poll_s`` (0.2 s), so a
    held Ctrl-C waits that long at most."""

    def __init__(self) -> None:
        self.installed = False
        self.previous: Any = signal.SIG_DFL  # the SIGINT handler before install
        self.in_client = False
        self.held = False

    @classmethod
    def install(cls) -> _HeldInterrupt:
        held = cls()
        if threading.current_thread() is threading.main_thread():  # else: Python's own handling applies
            held.previous = signal.signal(signal.SIGINT, held._on_sigint)
            held.installed = True
        return held

    def uninstall(self) -> bool:
        """Restore the handler; whether a Ctrl-C is still held (it came during ``close``)."""
        if self.installed:
            signal.signal(signal.SIGINT, self.previous)
            self.installed = False
        return self.held

    def _on_sigint(self, _signum: int, _frame: Any) -> None:
        if not self.in_client:
            raise KeyboardInterrupt
        self.held = True

    def client(self, consumer: Any) -> _HeldConsumer:
        return _HeldConsumer(self, consumer)


class _HeldConsumer:
    """A consumer whose ``consume`` and ``close`` hold Ctrl-C (``_HeldInterrupt``); the rest is the
    consumer's own."""

    def __init__(self, held: _HeldInterrupt, consumer: Any) -> None:
        self._held, self._consumer = held, consumer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)

    def consume(self, **kwargs: Any) -> list[Any]:
        messages = self._call(self._consumer.consume, **kwargs)
        if self._held.held:
            self._held.held = False
            raise KeyboardInterrupt
        return messages

    def close(self) -> None:
        self._call(self._consumer.close)

    def _call(self, method: Callable[..., Any], **kwargs: Any) -> Any:
        self._held.in_client = True
        try:
            return method(**kwargs)
        finally:
            self._held.in_client = False


def _stop_on_sigterm() -> Any:
    """SIGTERM -> SystemExit, so ``finally`` closes the consumer (LeaveGroup). Returns the old handler."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_OK))


def _commit(consumer: Any, printed: dict[tuple[str, int], int]) -> None:
    """Commit the offsets after what was printed; a refused commit (a rebalance took the partitions)
    is reported and the records will be printed again by their next owner (at-least-once)."""
    from confluent_kafka import KafkaException, TopicPartition

    offsets = [TopicPartition(topic, partition, offset) for (topic, partition), offset in printed.items()]
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        print(f"Warning: commit failed, {describe_error(exc)}", file=sys.stderr, flush=True)


# A consume error that ends the run: the topic is gone or was never there, or librdkafka gave up.
FATAL_CONSUME_ERRORS = frozenset({3, 29})  # UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED


def _print_records(consumer: Any, args: argparse.Namespace, out: BinaryIO, batch: int,
                   total: list[int] | None = None) -> int:  # fmt: skip
    from confluent_kafka import KafkaError

    separator = args.key_separator.encode()
    count = 0
    warned: set[int] = set()
    progress = _Progress(args.progress_interval_ms, lambda s: f"consume: {count} messages after {s:.0f} s")
    poll_s = 0.2 if args.timeout_ms == FOREVER else min(0.2, args.timeout_ms / 1000)
    last_record = time.monotonic()
    while args.max_messages == FOREVER or count < args.max_messages:
        progress.tick()
        wanted = batch if args.max_messages == FOREVER else min(batch, args.max_messages - count)
        messages = consumer.consume(num_messages=wanted, timeout=poll_s)
        printed: dict[tuple[str, int], int] = {}
        parts: list[bytes] = []
        for message in messages:
            err = message.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal() or err.code() in FATAL_CONSUME_ERRORS:
                    raise _Failed(describe_error(err))
                if err.code() not in warned:
                    warned.add(err.code())
                    print(f"Warning: {describe_error(err)}", file=sys.stderr, flush=True)
                continue
            printed[(message.topic(), message.partition())] = message.offset() + 1
            if args.print_offsets:
                parts.append(f"{message.partition()}:{message.offset()}\t".encode())
            if args.print_key:
                parts += [message.key() or b"", separator]
            parts += [message.value() or b"", b"\n"]
            count += 1
        if not printed:
            if args.timeout_ms != FOREVER and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                break
            continue
        last_record = time.monotonic()
        if total is not None:  # before the write: a Ctrl-C right after it must not lose the count
            total[0] = count
        out.write(b"".join(parts))
        out.flush()
        if args.group is not None:
            _commit(consumer, printed)
    return count
