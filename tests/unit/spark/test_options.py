"""Source options follow Spark's Kafka source (spark-sql-kafka-0-10): names, defaults, batch/stream rules.

Every bad or contradictory option is an ``InvalidOptionError`` naming the option, raised while
parsing — that is, at planning time, before any Spark job runs.
"""

from __future__ import annotations

import pytest

from proto import errors
from proto.kafka_types import TopicPartition
from spark.options import (
    EARLIEST,
    LATEST,
    InvalidOptionError,
    OffsetSpecKind,
    SubscriptionKind,
    TimestampStrategy,
    parse_options,
)

BASE = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def parse(streaming: bool = False, **extra: str):
    return parse_options({**BASE, **extra}, streaming=streaming)


def test_defaults_batch() -> None:
    """Spark: batch starts at earliest, ends at latest; failOnDataLoss defaults to true."""
    options = parse()
    assert options.bootstrap_servers == ("127.0.0.1:9092",)
    assert options.subscription.kind is SubscriptionKind.SUBSCRIBE
    assert options.subscription.topics == ("t",)
    assert options.starting == EARLIEST
    assert options.ending == LATEST
    assert options.fail_on_data_loss is True
    assert options.include_headers is False
    assert options.min_partitions is None and options.max_records_per_partition is None
    assert options.timestamp_strategy is TimestampStrategy.ERROR


def test_defaults_streaming() -> None:
    """Spark: a streaming query starts at latest by default."""
    assert parse(streaming=True).starting == LATEST


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"kafka.bootstrap.servers": "a:1,b:2", "subscribe": "t"}, ("a:1", "b:2")),
        ({"BOOTSTRAP.SERVERS": "h:9", "subscribe": "t"}, ("h:9",)),
        ({"bootstrap.servers": " h:9 , k:10 ", "subscribe": "t"}, ("h:9", "k:10")),
    ],
    ids=["kafka-prefix", "case-insensitive", "spaces"],
)
def test_bootstrap_servers(raw: dict[str, str], expected: tuple[str, ...]) -> None:
    """bootstrap.servers is also accepted as kafka.bootstrap.servers; option names ignore case."""
    assert parse_options(raw, streaming=False).bootstrap_servers == expected


@pytest.mark.parametrize(
    ("extra", "kind", "check"),
    [
        ({"subscribe": "a, b,a"}, SubscriptionKind.SUBSCRIBE, lambda s: s.topics == ("a", "b")),
        ({"subscribePattern": "evt-.*"}, SubscriptionKind.SUBSCRIBE_PATTERN, lambda s: s.matches("evt-1")),
        ({"subscribePattern": "evt"}, SubscriptionKind.SUBSCRIBE_PATTERN, lambda s: not s.matches("evt-1")),
        (
            {"assign": '{"a":[1,0],"b":[2]}'},
            SubscriptionKind.ASSIGN,
            lambda s: s.assigned == (TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 2)),
        ),
    ],
    ids=["subscribe-dedup", "pattern-full-match", "pattern-not-prefix", "assign-sorted"],
)
def test_subscriptions(extra, kind, check) -> None:
    """Exactly one of subscribe / subscribePattern (whole-name match, as Java's matches()) / assign."""
    raw = {"bootstrap.servers": "h:1", **extra}
    subscription = parse_options(raw, streaming=False).subscription
    assert subscription.kind is kind
    assert check(subscription)


def test_specific_offsets_and_timestamps() -> None:
    """JSON offsets keep -2 (earliest) and -1 (latest); timestamps are per partition or global."""
    options = parse(startingOffsets='{"t":{"1":5,"0":-2}}', endingOffsets='{"t":{"0":-1,"1":9}}')
    assert options.starting.kind is OffsetSpecKind.OFFSETS
    assert options.starting.as_dict() == {TopicPartition("t", 0): -2, TopicPartition("t", 1): 5}
    assert options.ending.as_dict() == {TopicPartition("t", 0): -1, TopicPartition("t", 1): 9}
    by_ts = parse(startingOffsetsByTimestamp='{"t":{"0":1000}}', endingTimestamp="2000")
    assert by_ts.starting.kind is OffsetSpecKind.TIMESTAMPS
    assert by_ts.starting.as_dict() == {TopicPartition("t", 0): 1000}
    assert by_ts.ending.kind is OffsetSpecKind.TIMESTAMP and by_ts.ending.timestamp_ms == 2000
    assert parse(startingTimestamp="0").starting.timestamp_ms == 0


def test_numbers_and_flags() -> None:
    options = parse(
        minPartitions="4",
        maxRecordsPerPartition="100",
        includeHeaders="TRUE",
        failOnDataLoss="false",
        startingOffsetsByTimestampStrategy="latest",
        **{"kafkaConsumer.pollTimeoutMs": "500", "fetchOffset.numRetries": "0"},
    )
    assert (options.min_partitions, options.max_records_per_partition) == (4, 100)
    assert options.include_headers is True and options.fail_on_data_loss is False
    assert options.timestamp_strategy is TimestampStrategy.LATEST
    assert options.poll_timeout_ms == 500 and options.fetch_offset_num_retries == 0
    assert parse(streaming=True, maxOffsetsPerTrigger="10").max_offsets_per_trigger == 10


BAD = [
    ({"subscribe": "t"}, False, "bootstrap.servers", "required"),
    ({**BASE, "bootstrap.servers": "nohost"}, False, "bootstrap.servers", "host:port"),
    ({**BASE, "bootstrap.servers": "h:99999"}, False, "bootstrap.servers", "host:port"),
    ({**BASE, "kafka.bootstrap.servers": "h:1"}, False, "kafka.bootstrap.servers", "not both"),
    ({**BASE, "kafka.group.id": "g"}, False, "kafka.group.id", "not a Kafka consumer"),
    ({**BASE, "startingOffset": "earliest"}, False, "startingOffset", "unknown option"),
    ({**BASE, "path": "/x"}, False, "path", "unknown option"),
    ({"bootstrap.servers": "h:1"}, False, "subscribe", "exactly one"),
    ({**BASE, "subscribePattern": "x"}, False, "subscribePattern", "exactly one"),
    ({**BASE, "subscribe": "a,,b"}, False, "subscribe", "legal topic"),
    ({**BASE, "subscribe": "bad topic"}, False, "subscribe", "legal topic"),
    ({"bootstrap.servers": "h:1", "subscribePattern": "a("}, False, "subscribePattern", "regular expression"),
    ({"bootstrap.servers": "h:1", "subscribePattern": " "}, False, "subscribePattern", "empty"),
    ({"bootstrap.servers": "h:1", "assign": "[1]"}, False, "assign", "JSON object"),
    ({"bootstrap.servers": "h:1", "assign": '{"t":0}'}, False, "assign", "list of partition"),
    ({"bootstrap.servers": "h:1", "assign": '{"t":[-1]}'}, False, "assign", "list of partition"),
    ({"bootstrap.servers": "h:1", "assign": '{"t":[]}'}, False, "assign", "no partition"),
    ({"bootstrap.servers": "h:1", "assign": "{bad"}, False, "assign", "not valid JSON"),
    ({**BASE, "startingOffsets": "latest"}, False, "startingOffsets", "cannot start at latest"),
    ({**BASE, "startingOffsets": '{"t":{"0":-1}}'}, False, "startingOffsets", "cannot start at latest"),
    ({**BASE, "endingOffsets": "earliest"}, False, "endingOffsets", "cannot end at earliest"),
    ({**BASE, "endingOffsets": '{"t":{"0":-2}}'}, False, "endingOffsets", "cannot end at earliest"),
    ({**BASE, "startingOffsets": '{"t":{"0":-3}}'}, False, "startingOffsets", "offset >= 0"),
    ({**BASE, "startingOffsets": '{"t":{"0":"5"}}'}, False, "startingOffsets", "offset >= 0"),
    ({**BASE, "startingOffsets": '{"t":{"x":5}}'}, False, "startingOffsets", "partition number"),
    ({**BASE, "startingOffsets": '{"t":[5]}'}, False, "startingOffsets", "partition -> value"),
    ({**BASE, "startingOffsets": "middle"}, False, "startingOffsets", "not valid JSON"),
    (
        {**BASE, "startingTimestamp": "1", "startingOffsets": "earliest"},
        False,
        "startingTimestamp",
        "contradicts",
    ),
    (
        {**BASE, "startingOffsetsByTimestamp": '{"t":{"0":1}}', "startingTimestamp": "1"},
        False,
        "startingOffsetsByTimestamp",
        "contradicts",
    ),
    ({**BASE, "endingTimestamp": "1", "endingOffsets": "latest"}, False, "endingTimestamp", "contradicts"),
    ({**BASE, "startingTimestamp": "-5"}, False, "startingTimestamp", "milliseconds"),
    (
        {**BASE, "startingOffsetsByTimestamp": '{"t":{"0":-2}}'},
        False,
        "startingOffsetsByTimestamp",
        "timestamp",
    ),
    ({**BASE, "minPartitions": "0"}, False, "minPartitions", "positive"),
    ({**BASE, "maxRecordsPerPartition": "ten"}, False, "maxRecordsPerPartition", "positive"),
    ({**BASE, "includeHeaders": "yes"}, False, "includeHeaders", "true or false"),
    ({**BASE, "failOnDataLoss": "1"}, False, "failOnDataLoss", "true or false"),
    (
        {**BASE, "startingOffsetsByTimestampStrategy": "skip"},
        False,
        "startingOffsetsByTimestampStrategy",
        "one of",
    ),
    ({**BASE, "fetchOffset.numRetries": "-1"}, False, "fetchOffset.numRetries", ">= 0"),
    ({**BASE, "maxOffsetsPerTrigger": "10"}, False, "maxOffsetsPerTrigger", "batch"),
    ({**BASE, "endingOffsets": "latest"}, True, "endingOffsets", "streaming"),
    ({**BASE, "endingTimestamp": "5"}, True, "endingTimestamp", "streaming"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger", "positive"),
]


@pytest.mark.parametrize(
    ("raw", "streaming", "option", "fragment"), BAD, ids=[f"{i:02d}-{row[2]}" for i, row in enumerate(BAD)]
)
def test_bad_options_name_the_option(
    raw: dict[str, str], streaming: bool, option: str, fragment: str
) -> None:
    """Unknown or contradictory options fail with InvalidOptionError naming the option, never a traceback."""
    with pytest.raises(InvalidOptionError) as info:
        parse_options(raw, streaming=streaming)
    assert info.value.option == option
    assert f"option '{option}'" in str(info.value)
    assert fragment in str(info.value)
    assert isinstance(info.value, errors.KafkaError)
    assert info.value.code == errors.ErrorCode.INVALID_CONFIG


def test_mode_unknown_checks_everything_else() -> None:
    """streaming=None (at schema() time) skips only the batch/stream rules."""
    assert parse_options({**BASE, "startingOffsets": "latest", "maxOffsetsPerTrigger": "5"}, streaming=None)
    with pytest.raises(InvalidOptionError, match="minPartitions"):
        parse_options({**BASE, "minPartitions": "-1"}, streaming=None)
