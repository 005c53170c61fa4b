"""The options of ``spark.read.format("pykraft")``: Spark's Kafka source names and semantics, validated.

A Spark user should need nothing new to learn, so every option keeps the name and meaning it has in
spark-sql-kafka-0-10 (https://spark.apache.org/docs/latest/structured-streaming-kafka-integration.html):

========================================  =========================================================
option                                    meaning
========================================  =========================================================
``bootstrap.servers``                     ``host:port,...`` of any brokers (also ``kafka.bootstrap.servers``)
``subscribe``                             comma list of topics              } exactly one of
``subscribePattern``                      regex matched against whole names } these three
``assign``                                JSON ``{"topic": [0, 1]}``        }
``startingOffsets``                       ``earliest`` | ``latest`` | JSON ``{"t": {"0": 23, "1": -2}}``
``endingOffsets``                         ``latest`` | JSON (batch only); -2 = earliest, -1 = latest
``startingTimestamp`` / ``endingTimestamp``  one timestamp (ms) for every partition
``startingOffsetsByTimestamp``            JSON ``{"t": {"0": 1700000000000}}`` (and ``ending...``)
``startingOffsetsByTimestampStrategy``    ``error`` (default) | ``latest``: no offset matched the timestamp
``minPartitions`` / ``maxRecordsPerPartition``  split offset ranges like ``KafkaOffsetRangeCalculator``
``includeHeaders``                        add ``headers array<struct<key:string,value:binary>>``
``failOnDataLoss``                        ``true`` (default): data below the log start offset is an error
``maxOffsetsPerTrigger``                  streaming only: records per micro-batch, split by partition size
``kafkaConsumer.pollTimeoutMs``           deadline of one offset range's fetches (ms)
``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs``  metadata and ListOffsets retries
========================================  =========================================================

Where Spark silently picks one of several contradictory options (``startingTimestamp`` over
``startingOffsetsByTimestamp`` over ``startingOffsets``), this module refuses with an error naming both:
a query whose meaning depends on a precedence table is a query someone misreads. Other ``kafka.*``
options configure a Kafka consumer, which this source does not have (it reads with its own small
Kafka-protocol client, ``spark.client``), so they are refused by name rather than silently ignored.

Everything here is pure: ``parse_options(raw, streaming=...)`` returns a frozen ``SourceOptions`` or
raises ``InvalidOptionError`` naming the option, before any Spark job runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from proto import errors
from proto.kafka_types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition

# Kafka's ListOffsets sentinels, which Spark's JSON offsets reuse, under Spark's names.
EARLIEST_OFFSET = EARLIEST_TIMESTAMP
LATEST_OFFSET = LATEST_TIMESTAMP

DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's kafkaConsumer.pollTimeoutMs default
DEFAULT_FETCH_OFFSET_NUM_RETRIES = 3
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 1_000
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


class InvalidOptionError(errors.exception_class(errors.ErrorCode.INVALID_CONFIG)):  # type: ignore[misc]
    """A source option is unknown, malformed, or contradicts another. ``option`` names it."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"option '{option}': {message}")


class SubscriptionKind(Enum):
    SUBSCRIBE = "subscribe"
    SUBSCRIBE_PATTERN = "subscribePattern"
    ASSIGN = "assign"


@dataclass(frozen=True)
class Subscription:
    """Which partitions a query reads: named topics, a pattern, or an explicit assignment."""

    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind is SubscriptionKind.SUBSCRIBE:
            return topic in self.topics
        if self.kind is SubscriptionKind.SUBSCRIBE_PATTERN:
            return re.fullmatch(self.pattern, topic) is not None  # Java's Matcher.matches()
        return any(tp.topic == topic for tp in self.assigned)


class OffsetSpecKind(Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSETS = "offsets"  # per partition: an offset, EARLIEST_OFFSET or LATEST_OFFSET
    TIMESTAMP = "timestamp"  # one timestamp (ms) for every partition
    TIMESTAMPS = "timestamps"  # per partition timestamp (ms)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends, before it is resolved against a partition's offsets."""

    kind: OffsetSpecKind
    per_partition: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp_ms: int = 0
    option: str = ""  # the option it came from, for error messages

    def as_dict(self) -> dict[TopicPartition, int]:
        return dict(self.per_partition)


EARLIEST = OffsetSpec(OffsetSpecKind.EARLIEST)
LATEST = OffsetSpec(OffsetSpecKind.LATEST)


class TimestampStrategy(Enum):
    ERROR = "error"
    LATEST = "latest"


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: tuple[str, ...]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: TimestampStrategy = TimestampStrategy.ERROR
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_num_retries: int = DEFAULT_FETCH_OFFSET_NUM_RETRIES
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS


# Spark's spelling of every option; the DataSource hands us lower-cased keys.
KNOWN_OPTIONS = (
    "bootstrap.servers", "kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign",
    "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
    "minPartitions", "maxRecordsPerPartition", "includeHeaders", "failOnDataLoss",
    "maxOffsetsPerTrigger", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
)  # fmt: skip
_SPELLING = {name.lower(): name for name in KNOWN_OPTIONS}
_STREAMING_ONLY = ("maxOffsetsPerTrigger",)
_BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")


def parse_options(raw: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Parse and validate every option; raise ``InvalidOptionError`` naming the first bad one.

    ``streaming=None`` means the mode is not known yet (``DataSource.schema()`` runs before Spark
    says batch or stream): everything but the batch-only / streaming-only rules is checked.
    """
    opts = _normalize(raw)
    if streaming is not None:
        _check_mode(opts, streaming=streaming)
    starting = _offset_spec(opts, "starting", default=LATEST if streaming else EARLIEST)
    ending = _offset_spec(opts, "ending", default=LATEST)
    if streaming is False:
        _check_batch_bounds(starting, ending)
    return SourceOptions(
        bootstrap_servers=_bootstrap_servers(opts),
        subscription=_subscription(opts),
        starting=starting,
        ending=ending,
        timestamp_strategy=_enum(opts, "startingOffsetsByTimestampStrategy", TimestampStrategy),
        min_partitions=_positive_int(opts, "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        include_headers=_bool(opts, "includeHeaders", default=False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", default=True),
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        poll_timeout_ms=_positive_int(opts, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
        fetch_offset_num_retries=_non_negative_int(
            opts, "fetchOffset.numRetries", DEFAULT_FETCH_OFFSET_NUM_RETRIES
        ),
        fetch_offset_retry_interval_ms=_non_negative_int(
            opts, "fetchOffset.retryIntervalMs", DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
        ),
    )


def _normalize(raw: Mapping[str, str]) -> dict[str, str]:
    """Map keys to Spark's spelling (Spark options are case-insensitive); refuse unknown keys."""
    opts: dict[str, str] = {}
    for key, value in raw.items():
        name = _SPELLING.get(key.lower())
        if name is None:
            if key.lower().startswith("kafka."):
                raise InvalidOptionError(
                    key,
                    "Kafka consumer settings do not apply: pykraft reads with its own Kafka-protocol "
                    "client, not a Kafka consumer; only kafka.bootstrap.servers is understood",
                )
            raise InvalidOptionError(key, f"unknown option; known options are: {', '.join(KNOWN_OPTIONS)}")
        opts[name] = str(value)
    if "bootstrap.servers" in opts and "kafka.bootstrap.servers" in opts:
        raise InvalidOptionError(
            "kafka.bootstrap.servers", "give bootstrap.servers or kafka.bootstrap.servers, not both"
        )
    if "kafka.bootstrap.servers" in opts:
        opts["bootstrap.servers"] = opts.pop("kafka.bootstrap.servers")
    return opts


def _check_mode(opts: Mapping[str, str], *, streaming: bool) -> None:
    wrong = _BATCH_ONLY if streaming else _STREAMING_ONLY
    for name in wrong:
        if name in opts:
            where = "streaming" if streaming else "batch"
            raise InvalidOptionError(name, f"is not valid in {where} queries")


def _bootstrap_servers(opts: Mapping[str, str]) -> tuple[str, ...]:
    raw = opts.get("bootstrap.servers")
    if raw is None:
        raise InvalidOptionError("bootstrap.servers", "is required: host:port of one or more brokers")
    servers = tuple(s.strip() for s in raw.split(","))
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidOptionError("bootstrap.servers", f"'{server}' is not host:port")
    return servers


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name in opts]
    if len(given) != 1:
        what = "none was given" if not given else f"got {', '.join(given)}"
        raise InvalidOptionError(
            given[-1] if given else "subscribe",
            f"give exactly one of subscribe, subscribePattern, assign; {what}",
        )
    kind = given[0]
    value = opts[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(","))
        for topic in topics:
            _check_topic("subscribe", topic)
        return Subscription(SubscriptionKind.SUBSCRIBE, topics=tuple(dict.fromkeys(topics)))
    if kind == "subscribePattern":
        if not value.strip():
            raise InvalidOptionError(kind, "the pattern is empty")
        try:
            re.compile(value)
        except re.error as exc:
            raise InvalidOptionError(kind, f"'{value}' is not a regular expression: {exc}") from None
        return Subscription(SubscriptionKind.SUBSCRIBE_PATTERN, pattern=value)
    return Subscription(SubscriptionKind.ASSIGN, assigned=_assignment(value))


def _assignment(value: str) -> tuple[TopicPartition, ...]:
    doc = _json_object("assign", value, example='{"topicA":[0,1],"topicB":[2,4]}')
    assigned: list[TopicPartition] = []
    for topic, partitions in doc.items():
        _check_topic("assign", topic)
        if not isinstance(partitions, list) or not all(_is_int(p) and p >= 0 for p in partitions):
            raise InvalidOptionError("assign", f"topic '{topic}' needs a list of partition numbers >= 0")
        assigned.extend(TopicPartition(topic, p) for p in partitions)
    if not assigned:
        raise InvalidOptionError("assign", "assigns no partition")
    return tuple(sorted(set(assigned)))


def _offset_spec(opts: Mapping[str, str], side: str, *, default: OffsetSpec) -> OffsetSpec:
    """One of ``<side>Offsets``, ``<side>Timestamp``, ``<side>OffsetsByTimestamp`` (never two)."""
    names = [f"{side}Offsets", f"{side}Timestamp", f"{side}OffsetsByTimestamp"]
    given = [name for name in names if name in opts]
    if len(given) > 1:
        raise InvalidOptionError(given[1], f"contradicts {given[0]}: give only one of {', '.join(names)}")
    if not given:
        return default
    name = given[0]
    value = opts[name].strip()
    if name.endswith("ByTimestamp"):
        per_partition = _per_partition(name, value, lambda v: _is_int(v) and v >= 0, "a timestamp in ms >= 0")
        return OffsetSpec(OffsetSpecKind.TIMESTAMPS, per_partition=per_partition, option=name)
    if name.endswith("Timestamp"):
        return OffsetSpec(OffsetSpecKind.TIMESTAMP, timestamp_ms=_timestamp(name, value), option=name)
    if value.lower() in ("earliest", "latest"):
        return OffsetSpec(OffsetSpecKind(value.lower()), option=name)
    per_partition = _per_partition(
        name,
        value,
        lambda v: _is_int(v) and v >= EARLIEST_OFFSET,
        "an offset >= 0, -2 (earliest) or -1 (latest)",
    )
    return OffsetSpec(OffsetSpecKind.OFFSETS, per_partition=per_partition, option=name)


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Spark's batch rules: a batch cannot start at latest nor end at earliest."""
    if starting.kind is OffsetSpecKind.LATEST or LATEST_OFFSET in starting.as_dict().values():
        raise InvalidOptionError(starting.option, "a batch query cannot start at latest (-1)")
    if ending.kind is OffsetSpecKind.EARLIEST or EARLIEST_OFFSET in ending.as_dict().values():
        raise InvalidOptionError(ending.option, "a batch query cannot end at earliest (-2)")


def _per_partition(name: str, value: str, valid, what: str) -> tuple[tuple[TopicPartition, int], ...]:
    doc = _json_object(name, value, example='{"topicA":{"0":23,"1":-2}}')
    pairs: list[tuple[TopicPartition, int]] = []
    for topic, by_partition in doc.items():
        _check_topic(name, topic)
        if not isinstance(by_partition, dict) or not by_partition:
            raise InvalidOptionError(name, f"topic '{topic}' needs an object of partition -> value")
        for partition, number in by_partition.items():
            if not partition.isdigit():
                raise InvalidOptionError(name, f"'{topic}' partition '{partition}' is not a partition number")
            if not valid(number):
                raise InvalidOptionError(name, f"'{topic}' partition {partition}: {number!r} is not {what}")
            pairs.append((TopicPartition(topic, int(partition)), number))
    return tuple(sorted(pairs))


def _json_object(name: str, value: str, *, example: str) -> dict:
    try:
        doc = json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidOptionError(name, f"is not valid JSON ({exc.msg}); expected like {example}") from None
    if not isinstance(doc, dict) or not doc:
        raise InvalidOptionError(name, f"expected a non-empty JSON object like {example}")
    return doc


def _check_topic(name: str, topic: str) -> None:
    if not topic or len(topic) > MAX_TOPIC_NAME_LENGTH or not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidOptionError(name, f"'{topic}' is not a legal topic name ([a-zA-Z0-9._-], 1..249 chars)")


def _timestamp(name: str, value: str) -> int:
    if not value.isdigit():
        raise InvalidOptionError(name, f"'{value}' is not a timestamp in milliseconds >= 0")
    return int(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    if name not in opts:
        return None
    value = opts[name].strip()
    if not value.isdigit() or int(value) <= 0:
        raise InvalidOptionError(name, f"'{value}' is not a positive integer")
    return int(value)


def _non_negative_int(opts: Mapping[str, str], name: str, default: int) -> int:
    value = opts.get(name, str(default)).strip()
    if not value.isdigit():
        raise InvalidOptionError(name, f"'{value}' is not an integer >= 0")
    return int(value)


def _bool(opts: Mapping[str, str], name: str, *, default: bool) -> bool:
    value = opts.get(name, str(default)).strip().lower()
    if value not in ("true", "false"):
        raise InvalidOptionError(name, f"'{opts[name]}' is not true or false")
    return value == "true"


def _enum(opts: Mapping[str, str], name: str, enum: type[TimestampStrategy]) -> TimestampStrategy:
    value = opts.get(name, next(iter(enum)).value).strip().lower()
    try:
        return enum(value)
    except ValueError:
        raise InvalidOptionError(
            name, f"'{value}' is not one of {', '.join(e.value for e in enum)}"
        ) from None
