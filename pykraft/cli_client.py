"""``pykraft produce`` and ``pykraft consume``: Kafka's console producer and consumer.

    printf 'a\\nb\\n' | pykraft produce --bootstrap 127.0.0.1:9092 --topic T --acks all
    printf 'k1:v1\\n' | pykraft produce --bootstrap ... --topic T --key-separator :
    pykraft consume --bootstrap ... --topic T --from-beginning --max-messages 2 --print-offsets

``produce`` sends every stdin line (without its newline) as one record's value, or as key and value
split at the first ``--key-separator``; it exits 0 once every record is acknowledged, 1 if any
failed (each failure is reported on stderr with its Kafka error), 2 on bad usage (a line without
the separator is bad usage: nothing after it is sent). ``consume`` prints one record per line
(``--print-offsets`` prefixes ``partition:offset<TAB>``, ``--print-key`` prefixes ``key<SEP>``) and
stops after ``--max-messages`` records or ``--timeout-ms`` without a record; it says how many it
processed on stderr. Bytes are written as they are (no decoding).

``consume --group G`` subscribes to ``--topic`` as a member of consumer group G (like
``kafka-console-consumer.sh --group``): the group assigns the partitions, reading starts at the
group's committed offsets (``--from-beginning`` only matters where none is committed), and the
offsets of every batch are committed synchronously right after it is printed (at-least-once: a
crash re-prints at most the batch being printed). Assignment changes go to stderr as
``Assigned: t-0 t-1`` / ``Revoked: ...``. ``--consumer-property KEY=VALUE`` passes Kafka consumer
settings (``session.timeout.ms``, ``heartbeat.interval.ms``, ``max.poll.interval.ms``,
``group.instance.id``, ``partition.assignment.strategy``, ...). SIGTERM closes the consumer cleanly
(commit, LeaveGroup).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import BinaryIO

from proto import errors
from pykraft.types import RecordMetadata, TopicPartition

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
MY_COMMANDS = ("produce", "consume")
FOREVER = -1


def add_parser(sub: argparse._SubParsersAction) -> None:
    if "produce" not in sub.choices:
        _add_produce(sub)
    if "consume" not in sub.choices:
        _add_consume(sub)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        dest="bootstrap",
        default=os.environ.get("PYKRAFT_BOOTSTRAP"),
        help="HOST:PORT[,HOST:PORT] of any broker (default $PYKRAFT_BOOTSTRAP)",
    )
    p.add_argument("--topic", required=True)


def _add_produce(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="send stdin lines as records (like kafka-console-producer.sh)")
    _common(p)
    p.add_argument("--key-separator", help="split each line into key SEP value at the first SEP")
    p.add_argument("--acks", default="all", choices=["all", "-1", "1", "0"])
    p.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16_384)
    p.add_argument("--timeout-ms", type=int, default=120_000, help="delivery.timeout.ms (default 120000)")
    p.set_defaults(func=run_produce)


def _add_consume(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("consume", help="print records to stdout (like kafka-console-consumer.sh)")
    _common(p)
    p.add_argument("--from-beginning", action="store_true", help="start at the log start, not the end")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--offset", help="with --partition: an offset, 'earliest' or 'latest'")
    p.add_argument("--max-messages", type=int, default=FOREVER, help="stop after N records")
    p.add_argument("--timeout-ms", type=int, default=FOREVER, help="stop after this long without a record")
    p.add_argument("--print-offsets", action="store_true", help="prefix each line with partition:offset TAB")
    p.add_argument(
        "--print-key", action="store_true", help="prefix each value with its key and --key-separator"
    )
    p.add_argument("--key-separator", default="\t")
    p.add_argument("--group", help="consume as a member of this consumer group (commits as it prints)")
    p.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a consumer setting by its Kafka name, e.g. session.timeout.ms=6000 (repeatable)",
    )
    p.set_defaults(func=run_consume)


# Kafka consumer settings the CLI accepts with --consumer-property, and how to parse each.
CONSUMER_PROPERTIES = {
    "session.timeout.ms": int,
    "heartbeat.interval.ms": int,
    "max.poll.interval.ms": int,
    "max.poll.records": int,
    "group.instance.id": str,
    "partition.assignment.strategy": lambda v: [s.strip() for s in v.split(",") if s.strip()],
    "auto.offset.reset": str,
    "enable.auto.commit": lambda v: v.lower() == "true",
    "auto.commit.interval.ms": int,
    "fetch.max.wait.ms": int,
    "request.timeout.ms": int,
    "retry.backoff.ms": int,
    "metadata.max.age.ms": int,
    "client.id": str,
}


def consumer_properties(items: list[str]) -> dict[str, object]:
    """``["session.timeout.ms=6000", ...]`` -> Consumer keyword arguments; bad input -> _UsageError."""
    kwargs: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in CONSUMER_PROPERTIES:
            known = ", ".join(sorted(CONSUMER_PROPERTIES))
            raise _UsageError(f"--consumer-property {item!r}: expected KEY=VALUE with KEY one of {known}")
        try:
            kwargs[key.replace(".", "_")] = CONSUMER_PROPERTIES[key](value)
        except ValueError:
            raise _UsageError(f"--consumer-property {item!r}: {value!r} is not a valid value") from None
    return kwargs


def _usage(message: str) -> int:
    print(f"Error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _fail(error: errors.KafkaError) -> int:
    print(f"Error: {errors.ErrorCode(error.code).name} ({error.code}): {error.message}", file=sys.stderr)
    return EXIT_ERROR


# ---- produce ----------------------------------------------------------------------------------------


class _DeliveryReport:
    """Counts acknowledgements and failures from the sender thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acknowledged = 0
        self.failed = 0
        self.first_errors: list[str] = []

    def __call__(self, metadata: RecordMetadata | None, error: Exception | None) -> None:
        with self._lock:
            if error is None:
                self.acknowledged += 1
                return
            self.failed += 1
            if len(self.first_errors) < 5:
                self.first_errors.append(str(error))


def run_produce(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    if not args.bootstrap:
        return _usage("give --bootstrap HOST:PORT (or set PYKRAFT_BOOTSTRAP)")
    from pykraft.producer import Producer

    source = stdin or sys.stdin.buffer
    separator = args.key_separator.encode() if args.key_separator else None
    report = _DeliveryReport()
    try:
        producer = Producer(
            args.bootstrap, acks=args.acks, compression_type=args.compression, linger_ms=args.linger_ms,
            batch_size=args.batch_size, delivery_timeout_ms=args.timeout_ms,
            max_block_ms=min(args.timeout_ms, 60_000),
        )  # fmt: skip
    except ValueError as exc:
        return _usage(str(exc))
    code = EXIT_OK
    try:
        code = _send_lines(producer, args, source, separator, report)
        producer.flush()
    except errors.KafkaError as exc:
        code = _fail(exc)
    finally:
        producer.close()
    for message in report.first_errors:
        print(f"Error: {message}", file=sys.stderr)
    if report.failed:
        print(f"{report.failed} record(s) failed, {report.acknowledged} acknowledged", file=sys.stderr)
        return EXIT_ERROR
    return code


def _send_lines(producer, args: argparse.Namespace, source: BinaryIO, separator: bytes | None, report) -> int:
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
        producer.send(args.topic, line, key=key, partition=args.partition, on_delivery=report)
    return EXIT_OK


# ---- consume ----------------------------------------------------------------------------------------


def run_consume(args: argparse.Namespace, stdout: BinaryIO | None = None) -> int:
    if not args.bootstrap:
        return _usage("give --bootstrap HOST:PORT (or set PYKRAFT_BOOTSTRAP)")
    if args.offset is not None and args.partition is None:
        return _usage("--offset needs --partition")
    if args.group is not None and (args.partition is not None or args.offset is not None):
        return _usage("--group gets its partitions from the group: do not give --partition or --offset")
    if args.consumer_property and args.group is None:
        return _usage("--consumer-property is for group consumers: give --group too")
    from pykraft.consumer import Consumer

    out = stdout or sys.stdout.buffer
    try:
        settings = {"auto_offset_reset": "earliest" if args.from_beginning else "latest"}
        if args.group is not None:
            settings |= {"group_id": args.group, "enable_auto_commit": False}
            settings |= consumer_properties(args.consumer_property)
        consumer = Consumer(args.bootstrap, **settings)
    except _UsageError as exc:
        return _usage(str(exc))
    except ValueError as exc:
        return _usage(str(exc))
    try:
        if args.group is not None:
            _stop_on_sigterm()
            consumer.subscribe([args.topic], on_assign=_report("Assigned"), on_revoke=_report("Revoked"))
        else:
            _assign(consumer, args)
        count = _print_records(consumer, args, out)
    except errors.KafkaError as exc:
        return _fail(exc)
    except _UsageError as exc:
        return _usage(str(exc))
    finally:
        consumer.close()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return EXIT_OK


class _UsageError(Exception):
    pass


def _assign(consumer, args: argparse.Namespace) -> None:
    partitions = consumer.partitions_for(args.topic)
    if args.partition is not None and args.partition not in partitions:
        raise _UsageError(
            f"topic {args.topic!r} has partitions 0..{len(partitions) - 1}, not {args.partition}"
        )
    chosen = [args.partition] if args.partition is not None else partitions
    tps = [TopicPartition(args.topic, p) for p in chosen]
    consumer.assign(tps)
    if args.offset in (None, "earliest", "latest"):
        if args.offset == "earliest":
            consumer.seek_to_beginning(*tps)
        elif args.offset == "latest":
            consumer.seek_to_end(*tps)
        return
    try:
        offset = int(args.offset)
    except ValueError:
        raise _UsageError(f"--offset must be a number, 'earliest' or 'latest', not {args.offset!r}") from None
    if offset < 0:
        raise _UsageError(f"--offset must be >= 0, not {offset}")
    consumer.seek(tps[0], offset)


def _report(what: str):
    def callback(partitions: list[TopicPartition]) -> None:
        names = " ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(partitions, key=lambda t: t.partition))
        print(f"{what}: {names}", file=sys.stderr, flush=True)

    return callback


def _stop_on_sigterm() -> None:
    """SIGTERM -> SystemExit, so ``finally`` closes the consumer (commit, LeaveGroup)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_OK))


def _commit(consumer, printed: dict[TopicPartition, int]) -> None:
    """Commit the offsets after what was printed; a refused commit (rebalance) is reported and the
    records will be printed again by their next owner (at-least-once)."""
    from pykraft.consumer import CommitFailedError

    try:
        consumer.commit(printed)
    except CommitFailedError as exc:
        print(f"Warning: {exc}", file=sys.stderr, flush=True)


def _print_records(consumer, args: argparse.Namespace, out: BinaryIO) -> int:
    separator = args.key_separator.encode()
    count = 0
    idle_ms = 0
    poll_ms = 200 if args.timeout_ms == FOREVER else min(200, args.timeout_ms)
    while args.max_messages == FOREVER or count < args.max_messages:
        records = consumer.poll(poll_ms)
        if not records:
            idle_ms += poll_ms
            if args.timeout_ms != FOREVER and idle_ms >= args.timeout_ms:
                break
            continue
        idle_ms = 0
        printed: dict[TopicPartition, int] = {}
        for record in records:
            if args.max_messages != FOREVER and count >= args.max_messages:
                break
            printed[TopicPartition(record.topic, record.partition)] = record.offset + 1
            parts = []
            if args.print_offsets:
                parts.append(f"{record.partition}:{record.offset}\t".encode())
            if args.print_key:
                parts += [record.key or b"", separator]
            parts += [record.value or b"", b"\n"]
            out.write(b"".join(parts))
            count += 1
        out.flush()
        if args.group is not None and printed:
            _commit(consumer, printed)
    return count
