"""``pykraft produce`` / ``pykraft consume``: what needs no broker (flags, line splitting, consumer
properties, progress lines). The round trips against real brokers (confluent-kafka over the Kafka
protocol) are tests/e2e/test_cli_produce_consume.py.

Rules: every stdin line becomes one record (split at --key-separator; a line without it is bad usage
and nothing from it on is sent); usage errors exit 2 with a message; --consumer-property takes Kafka's
consumer setting names (the Java client's fetch.max.wait.ms / request.timeout.ms are translated to
librdkafka's, max.poll.records is the batch size).
"""

from __future__ import annotations

import io
import signal

import pytest

from pykraft import cli_client
from pykraft.cli import build_parser
from pykraft.cli_kafka import ProduceErrorWatch, error_name


class RecordingProducer:
    """Stands in for confluent_kafka.Producer in ``_send_lines``: keeps what was produced; the first
    ``full`` produce calls raise BufferError as librdkafka does when its queue is full."""

    def __init__(self, full: int = 0) -> None:
        self.records: list[tuple[str, bytes, bytes | None, dict]] = []
        self.full = full
        self.polls = 0

    def produce(self, topic, value, key, on_delivery, **extra) -> None:
        if self.full:
            self.full -= 1
            raise BufferError("Local: Queue full")
        self.records.append((topic, value, key, extra))

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


def send(
    stdin: bytes, *extra: str, producer: RecordingProducer | None = None
) -> tuple[int, RecordingProducer]:
    args = build_parser().parse_args(["produce", "--bootstrap", "127.0.0.1:1", "--topic", "t", *extra])
    producer = producer or RecordingProducer()
    report = cli_client._DeliveryReport(cli_client._RetryReport(ProduceErrorWatch(), "127.0.0.1:1"))
    code = cli_client._send_lines(producer, args, io.BytesIO(stdin), args.key_separator and
                                  args.key_separator.encode(), report, [0], lambda: None)  # fmt: skip
    return code, producer


def test_lines_become_records_split_at_the_key_separator() -> None:
    code, producer = send(b"k1:v1\nk2:v:2\r\n:empty-key\nk3:", "--key-separator", ":", "--partition", "1")
    assert code == 0
    assert [(v, k) for _, v, k, _ in producer.records] == [
        (b"v1", b"k1"), (b"v:2", b"k2"), (b"empty-key", b""), (b"", b"k3")]  # fmt: skip
    assert {str(extra) for *_, extra in producer.records} == {"{'partition': 1}"}


def test_a_line_without_the_separator_stops_sending(capsys) -> None:
    code, producer = send(b"k:v\nno-separator\nk:later\n", "--key-separator", ":")
    assert code == cli_client.EXIT_USAGE
    assert [v for _, v, _, _ in producer.records] == [b"v"]
    assert "line 2 has no key separator" in capsys.readouterr().err


def test_a_full_queue_is_drained_and_the_record_sent_again() -> None:
    code, producer = send(b"a\nb\n", producer=RecordingProducer(full=3))
    assert code == 0 and [v for _, v, _, _ in producer.records] == [b"a", b"b"]
    assert producer.polls >= 3


def test_delivery_report_counts_and_names_kafka_errors(capsys) -> None:
    class Err:
        def code(self) -> int:
            return 10

        def name(self) -> str:
            return "MSG_SIZE_TOO_LARGE"

        def str(self) -> str:
            return "Broker: Message size too large"

    report = cli_client._DeliveryReport(cli_client._RetryReport(ProduceErrorWatch(), "127.0.0.1:1"))
    report.for_line(1)(None, Msg())
    report.for_line(2)(Err(), Msg())
    assert (report.acknowledged, report.failed) == (1, 1)
    assert "line 2: MESSAGE_TOO_LARGE (10): Broker: Message size too large" in capsys.readouterr().err


class Msg:
    def topic(self) -> str:
        return "orders"

    def partition(self) -> int:
        return 0


# librdkafka's "msg" debug line for a produce answer with a partition error.
NOT_ENOUGH_REPLICAS_LINE = (
    "MSGSET [rdkafka#producer-1] [thrd:127.0.0.1:42487/101]: 127.0.0.1:42487/101: orders [0]: MessageSet "
    "with 1 message(s) (MsgId 1, BaseSeq 0) encountered error: Broker: Not enough in-sync replicas "
    "(actions Retry,MsgNotPersisted)"
)


def test_a_retriable_produce_error_is_shown_as_it_happens_and_named_as_the_last_cause(capsys) -> None:
    import logging

    watch = ProduceErrorWatch()
    retries = cli_client._RetryReport(watch, "127.0.0.1:1")
    for _ in range(3):  # librdkafka retries: the same error is shown once (until REPEAT_S passes)
        watch.handle(logging.makeLogRecord({"msg": NOT_ENOUGH_REPLICAS_LINE, "levelno": logging.DEBUG}))
        retries.show(None)
    assert capsys.readouterr().err == "NOT_ENOUGH_REPLICAS for orders-0, retrying\n"

    class TimedOut:
        def code(self) -> int:
            return -192

        def name(self) -> str:
            return "_MSG_TIMED_OUT"

        def str(self) -> str:
            return "Local: Message timed out"

    cli_client._DeliveryReport(retries).for_line(1)(TimedOut(), Msg())
    assert capsys.readouterr().err == (
        "Error: line 1: _MSG_TIMED_OUT (-192): Local: Message timed out "
        "(last cause: NOT_ENOUGH_REPLICAS for orders-0)\n"
    )


def test_error_names_are_kafkas_for_broker_codes_and_librdkafkas_for_local_ones() -> None:
    assert error_name(3, "UNKNOWN_TOPIC_OR_PART") == "UNKNOWN_TOPIC_OR_PARTITION"
    assert error_name(-192, "_MSG_TIMED_OUT") == "_MSG_TIMED_OUT"


def test_consumer_properties_translate_java_names() -> None:
    settings, batch = cli_client.consumer_properties(
        ["session.timeout.ms=6000", "fetch.max.wait.ms=50", "max.poll.records=7",
         "partition.assignment.strategy=roundrobin"])  # fmt: skip
    assert settings == {"session.timeout.ms": "6000", "fetch.wait.max.ms": "50",
                        "partition.assignment.strategy": "roundrobin"}  # fmt: skip
    assert batch == 7


def test_progress_line_at_the_interval(capsys, monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(cli_client.time, "monotonic", lambda: now[0])
    progress = cli_client._Progress(10_000, lambda s: f"after {s:.0f} s")
    progress.tick()
    now[0] = 111.0
    progress.tick()
    progress.tick()
    assert capsys.readouterr().err.splitlines() == ["after 11 s"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["consume", "--topic", "t", "--offset", "3"], "--offset needs --partition"),
        (["consume", "--topic", "t", "--group", "g", "--partition", "0"], "--group gets its partitions"),
        (["consume", "--topic", "t", "--consumer-property", "session.timeout.ms=100"], "give --group too"),
        (["consume", "--topic", "t", "--group", "g", "--consumer-property", "nope"], "expected KEY=VALUE"),
        (["consume", "--topic", "t", "--group", "g", "--consumer-property", "nope=1"],
         "No such configuration property"),
        (["consume", "--topic", "t", "--group", "g", "--consumer-property", "session.timeout.ms=soon"],
         "Invalid value"),
        (["consume", "--topic", "t", "--group", "g", "--consumer-property", "max.poll.records=x"],
         "not a valid value"),
    ],
    ids=["offset-without-partition", "group-and-partition", "property-without-group", "not-key-value",
         "unknown-property", "bad-value", "bad-max-poll-records"],
)
def test_consume_usage_errors_exit_2(argv: list[str], message: str, capsys) -> None:
    args = build_parser().parse_args([*argv, "--bootstrap", "127.0.0.1:1"])
    assert cli_client.run_consume(args, stdout=io.BytesIO()) == cli_client.EXIT_USAGE
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_no_bootstrap_names_the_kafka_listener(command: str, capsys, monkeypatch) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)
    args = build_parser().parse_args([command, "--topic", "t", "--bootstrap", ""])
    run = cli_client.run_produce if command == "produce" else cli_client.run_consume
    assert run(args) == cli_client.EXIT_USAGE
    assert "Kafka listener" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_every_option_of_produce_and_consume_has_a_description_and_its_default(command: str) -> None:
    import argparse

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = [a for a in sub.choices[command]._actions if a.dest != "help"]
    undocumented = [a.option_strings[0] for a in options if not a.help or "default" not in a.help]
    assert options and undocumented == []


def test_admin_help_says_minus_one_is_the_cluster_default_and_any_node_answers() -> None:
    import argparse

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    topics = next(a for a in sub.choices["topics"]._actions if isinstance(a, argparse._SubParsersAction))
    create = {a.dest: a for a in topics.choices["create"]._actions}
    assert "-1 = the cluster default, num.partitions" in create["partitions"].help
    assert "-1 = the cluster default, default.replication.factor" in create["replication_factor"].help
    assert "any controller or broker" in create["bootstrap"].help


class CallbackConsumer:
    """Stands in for confluent_kafka.Consumer: ``consume`` and ``close`` run a Python callback, as a
    rebalance listener or the logger runs inside them; the callback gets a Ctrl-C (a real SIGINT)."""

    def __init__(self) -> None:
        self.callbacks_finished = 0

    def _callback(self) -> None:
        signal.raise_signal(signal.SIGINT)  # to this thread: Python runs the handler before the next line
        self.callbacks_finished += 1

    def consume(self, num_messages: int, timeout: float) -> list:
        self._callback()
        return []

    def close(self) -> None:
        self._callback()


@pytest.mark.parametrize("during", ["consume", "close"])
def test_a_ctrl_c_inside_a_client_callback_is_held_until_the_call_returns(during: str) -> None:
    """confluent-kafka loses a KeyboardInterrupt raised inside a callback (consume() then raises
    SystemError): a Ctrl-C there lets the callback finish and is raised once consume() returns, or
    reported by uninstall() after close(); outside those calls it is raised at once."""
    consumer = CallbackConsumer()
    before = signal.getsignal(signal.SIGINT)  # not always Python's default: pyspark installs its own
    held = cli_client._HeldInterrupt.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # not inside the client: Python's behaviour
        client = held.client(consumer)
        if during == "consume":
            with pytest.raises(KeyboardInterrupt):
                client.consume(num_messages=1, timeout=0.2)
        else:
            client.close()
    finally:
        still_held = held.uninstall()
    assert consumer.callbacks_finished == 1
    assert still_held == (during == "close")
    assert signal.getsignal(signal.SIGINT) is before, "uninstall() restores the handler it replaced"
