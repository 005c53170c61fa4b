"""What the CLI's Kafka-protocol commands share: the bootstrap flag, librdkafka's log, error names, and
the consumer-group admin (``pykraft groups``) on confluent-kafka.

``produce``, ``consume``, ``groups`` and the demo talk to the brokers' Kafka listeners with
confluent-kafka (librdkafka), the client the ecosystem uses. ``--bootstrap`` is therefore a list of
Kafka listeners: ``$KAFKA_BOOTSTRAP`` by default, which ``pykraft cluster up`` prints. (The gRPC
address in ``$PYKRAFT_BOOTSTRAP`` is for ``topics``, ``quorum`` and ``cluster describe``.)

librdkafka's own log lines (a refused connection while a broker restarts, ...) go to the
``pykraft.librdkafka`` logger, not straight to stderr: the CLI reports what matters itself (each failed
record, a consume error), and ``--client-log-level`` (or ``$PYKRAFT_CLIENT_LOG_LEVEL``) shows
librdkafka's lines at that level and above (default ``CRITICAL``: only librdkafka's fatal errors).

Errors are named as Kafka names them: ``UNKNOWN_TOPIC_OR_PARTITION (3)`` for a broker's code (a
non-negative librdkafka code is the broker's), librdkafka's own name for its local codes
(``_MSG_TIMED_OUT (-192)``, ``_TRANSPORT (-195)``, ...).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from proto import errors
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.connection import ClientConnection, ResponseReceived
from proto.kafka_types import NO_OFFSET, TopicPartition

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP"
CLIENT_LOG_ENV = "PYKRAFT_CLIENT_LOG_LEVEL"
CLIENT_LOGGER = "pykraft.librdkafka"
CLIENT_LOG_HANDLER = "pykraft.librdkafka.stderr"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
OFFSET_INVALID = -1001  # librdkafka: no committed offset
INACTIVE_STATES = frozenset({"Empty", "Dead"})
BOOTSTRAP_MISSING = (
    f"give --bootstrap HOST:PORT of a broker's Kafka listener (or set {BOOTSTRAP_ENV}: "
    "`pykraft cluster up` prints it)"
)


def add_bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        dest="bootstrap",
        default=os.environ.get(BOOTSTRAP_ENV),
        help=f"HOST:PORT[,HOST:PORT] of brokers' Kafka listeners (default ${BOOTSTRAP_ENV})",
    )
    p.add_argument(
        "--client-log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=os.environ.get(CLIENT_LOG_ENV, "CRITICAL").upper(),
        help=f"show librdkafka's log lines at this level and above (default ${CLIENT_LOG_ENV} or CRITICAL)",
    )


def client_logger(level: str = "CRITICAL") -> logging.Logger:
    """The logger given to librdkafka (its ``logger`` setting): stderr, at ``level`` and above."""
    logger = logging.getLogger(CLIENT_LOGGER)
    logger.setLevel(level if level in LOG_LEVELS else "CRITICAL")
    if not any(h.get_name() == CLIENT_LOG_HANDLER for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.set_name(CLIENT_LOG_HANDLER)
        handler.setFormatter(logging.Formatter("librdkafka %(levelname)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    return logger


# librdkafka's "msg" debug line for a produce answer with a partition error (then retried or failed):
# "...: orders [0]: MessageSet with 1 message(s) (MsgId 1, BaseSeq 0) encountered error: Broker: Not
# enough in-sync replicas (actions Retry,MsgNotPersisted)".
PRODUCE_ERROR_LINE = re.compile(
    r"(?P<topic>[^\s:]+) \[(?P<partition>\d+)\]: MessageSet with \d+ message\(s\).*?"
    r"encountered error: (?P<error>.+?) \(actions (?P<actions>[^)]*)\)"
)


@dataclass(frozen=True, slots=True)
class ProduceError:
    """A partition error a broker answered to a Produce request; ``retriable``: librdkafka retries it."""

    topic: str
    partition: int
    name: str
    retriable: bool


def broker_error_name(text: str) -> str:
    """Kafka's name for librdkafka's description of a broker error (``Broker: Not enough in-sync
    replicas`` -> ``NOT_ENOUGH_REPLICAS``); the text itself when it is not a broker error we know."""
    if not _BROKER_ERROR_NAMES:
        from confluent_kafka import KafkaError

        _BROKER_ERROR_NAMES.update({KafkaError(c.value).str(): c.name for c in ErrorCode if c.value > 0})
    return _BROKER_ERROR_NAMES.get(text.strip(), text.strip())


_BROKER_ERROR_NAMES: dict[str, str] = {}


class ProduceErrorWatch(logging.Handler):
    """Collects the partition errors of Produce answers from librdkafka's "msg" debug lines (the
    delivery report names only the final error, e.g. ``_MSG_TIMED_OUT``, not the broker's reason).
    librdkafka's log is served by ``poll``/``flush`` in the caller's thread; ``take()`` hands the
    errors seen since the last call over."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._seen: list[ProduceError] = []
        self.last: dict[tuple[str, int], ProduceError] = {}

    def emit(self, record: logging.LogRecord) -> None:
        match = PRODUCE_ERROR_LINE.search(record.getMessage())
        if match is None:
            return
        error = ProduceError(
            match["topic"], int(match["partition"]), broker_error_name(match["error"]),
            "Retry" in match["actions"],
        )  # fmt: skip
        self._seen.append(error)
        self.last[(error.topic, error.partition)] = error

    def take(self) -> list[ProduceError]:
        seen, self._seen = self._seen, []
        return seen


def watched_logger(level: str, watch: logging.Handler) -> logging.Logger:
    """A logger for librdkafka that gives every line to ``watch`` and shows lines at ``level`` and above
    on stderr (as ``client_logger`` does)."""
    logger = logging.getLogger(f"{CLIENT_LOGGER}.watched")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    stderr = logging.StreamHandler()
    stderr.setLevel(level if level in LOG_LEVELS else "CRITICAL")
    stderr.setFormatter(logging.Formatter("librdkafka %(levelname)s: %(message)s"))
    logger.addHandler(stderr)
    logger.addHandler(watch)
    return logger


def client_config(bootstrap: str, log_level: str = "CRITICAL", **settings: Any) -> dict[str, Any]:
    """A confluent-kafka configuration: ``bootstrap.servers``, the logger, then ``settings``."""
    return {"bootstrap.servers": bootstrap, "logger": client_logger(log_level), **settings}


def console_group_id() -> str:
    """confluent-kafka's Consumer needs a group.id even when it only ``assign``s (and never commits):
    a fresh one, like kafka-console-consumer.sh's ``console-consumer-NNNNN``."""
    return f"pykraft-console-consumer-{uuid.uuid4().hex[:8]}"


def error_name(code: int, librdkafka_name: str = "") -> str:
    """Kafka's name for a broker's error code, librdkafka's for its own (negative) codes."""
    if code >= 0:
        try:
            return ErrorCode(code).name
        except ValueError:
            pass
    return librdkafka_name or f"ERROR_{code}"


def describe_error(err: Any) -> str:
    """``NAME (code): message`` for a ``confluent_kafka.KafkaError`` (or a ``KafkaException``)."""
    if hasattr(err, "args") and err.args and hasattr(err.args[0], "code"):
        err = err.args[0]
    return f"{error_name(err.code(), err.name())} ({err.code()}): {err.str()}"


class ClientError(Exception):
    """A failure a confluent-kafka client reported, already described as ``NAME (code): message``."""


# ---- what answers at --bootstrap ------------------------------------------------------------------

PROBE_TIMEOUT_S = 3.0
PROBE_CORRELATION_ID = 0x706B7266  # "pkrf"
PROBE_CLIENT_ID = "pykraft-probe"
PROBE_READ_BYTES = 4096
HTTP2_FRAME_TYPES = frozenset({0x04, 0x07})  # SETTINGS (a server's preface), GOAWAY
KAFKA_LISTENER = "a Kafka listener"
WHERE_KAFKA_LISTENERS = "`pykraft cluster status` lists the brokers' Kafka listeners in its KAFKA column"


class BootstrapError(Exception):
    """No address of ``--bootstrap`` is a Kafka listener; the message names each one and what answered."""


def probe_address(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """What answers at ``HOST:PORT``: ``KAFKA_LISTENER``, or a short phrase saying what does instead.

    One ApiVersions v0 request (the first request every Kafka client sends), framed and answered
    through ``proto.kafka.connection``: a Kafka listener's answer decodes, in step with our correlation
    id; anything else breaks the core's framing at once (a size out of bounds, or another correlation
    id in the first 8 bytes), and the first bytes tell what answered: a gRPC server (a controller, or a
    broker's gRPC ``--listen``) sends an HTTP/2 SETTINGS or GOAWAY frame; nothing listening refuses the
    connection."""
    host, _, port_text = address.strip().rpartition(":")
    host = host.strip("[]") or "localhost"
    try:
        port = int(port_text)
    except ValueError:
        return f"not HOST:PORT (port {port_text!r} is not a number)"
    core = ClientConnection(PROBE_CLIENT_ID, first_correlation_id=PROBE_CORRELATION_ID)
    deadline = time.monotonic() + timeout_s
    head = b""  # the first bytes that came back
    answered = False
    connected = False
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            connected = True
            sock.sendall(core.send_request(m.ApiVersionsRequest(), 0))
            while True:
                sock.settimeout(max(0.05, deadline - time.monotonic()))
                chunk = sock.recv(PROBE_READ_BYTES)
                if not chunk:
                    break
                head = (head + chunk)[:16]
                events = core.receive_data(chunk)
                if events:
                    answered = isinstance(events[0], ResponseReceived)
                    break
    except ConnectionRefusedError:
        return "nothing answers (connection refused)"
    except socket.gaierror as exc:
        return f"unknown host {host!r} ({exc.strerror})"
    except OSError as exc:  # a timeout, unreachable network, or a reset after a partial answer
        if not head and not connected:
            reason = f"no answer within {timeout_s:g} s" if isinstance(exc, TimeoutError) else exc.strerror
            return f"nothing answers ({reason or exc})"
    if answered:
        return KAFKA_LISTENER
    if len(head) >= 4 and head[3] in HTTP2_FRAME_TYPES:
        return "a gRPC server answers (a controller's address, or a broker's gRPC --listen)"
    if head.startswith(b"HTTP"):
        return "an HTTP server answers (a metrics endpoint?)"
    if not head:
        return f"a server accepts the connection but does not answer a Kafka request within {timeout_s:g} s"
    return "a server answers that does not speak Kafka"


def check_bootstrap(bootstrap: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Return once one address of ``bootstrap`` is a Kafka listener; else ``BootstrapError`` naming
    every address tried and what answered there (each probe waits at most ``timeout_s``)."""
    addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
    found = []
    for address in addresses:
        answer = probe_address(address, timeout_s)
        if answer == KAFKA_LISTENER:
            return
        found.append(f"{address}: {answer}")
    hint = "data commands need a broker's Kafka listener"
    if any("gRPC" in f for f in found):
        hint = "that is a controller/gRPC address; data commands need a broker's Kafka listener"
    tried = "; ".join(found)
    raise BootstrapError(f"no Kafka listener at --bootstrap ({tried}): {hint} ({WHERE_KAFKA_LISTENERS})")


def _raise_from(exc: Exception, what: str) -> None:
    """Re-raise a confluent-kafka failure as ``proto.errors`` (broker codes) or ``ClientError``."""
    err = exc.args[0] if exc.args and hasattr(exc.args[0], "code") else None
    if err is None:
        raise ClientError(f"{what}: {exc}") from None
    code = err.code()
    if code > 0 and code in ErrorCode._value2member_map_:
        raise errors.error_for(code, f"{what}: {err.str()}") from None
    raise ClientError(f"{describe_error(err)} ({what})") from None


# ---- consumer groups on confluent_kafka.admin ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    state: str
    assignor: str
    coordinator: int
    members: tuple[MemberDescription, ...]

    @property
    def is_active(self) -> bool:
        return self.state not in INACTIVE_STATES


# confluent_kafka.ConsumerGroupState member name -> Kafka's state string (what kafka-consumer-groups.sh
# prints).
GROUP_STATES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
}


def tp_key(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """The partitions of a topic (``describe_topics``); ``error`` is the topic's error, if any."""

    name: str
    partitions: tuple[int, ...]
    error: errors.KafkaError | None = None


class KafkaGroupAdmin:
    """The group calls of Kafka's Admin, on ``confluent_kafka.admin.AdminClient``.

    Every call waits at most ``timeout_s``; a broker error raises its ``proto.errors`` class, a
    librdkafka one ``ClientError``. ``alter_consumer_group_offsets`` is Kafka's standalone commit: the
    coordinator accepts it only while the group has no active members.
    """

    def __init__(self, bootstrap: str, timeout_s: float = 30.0, log_level: str = "CRITICAL") -> None:
        from confluent_kafka.admin import AdminClient

        self.timeout_s = timeout_s
        self._admin = AdminClient(client_config(bootstrap, log_level))

    def __enter__(self) -> KafkaGroupAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._admin.poll(0)  # hands librdkafka's queued log lines to the logger

    def _wait(self, future: Any, what: str) -> Any:
        from confluent_kafka import KafkaException

        try:
            return future.result(timeout=self.timeout_s)
        except KafkaException as exc:
            _raise_from(exc, what)
        except TimeoutError:
            raise ClientError(f"_TIMED_OUT: {what} got no answer within {self.timeout_s:g} s") from None

    def list_consumer_groups(self, states: Iterable[str] = ()) -> list[GroupListing]:
        from confluent_kafka import ConsumerGroupState

        wanted = {s.lower() for s in states}
        by_state = {kafka.lower(): ConsumerGroupState[name] for name, kafka in GROUP_STATES.items()}
        unknown = wanted - set(by_state)
        if unknown:
            raise ValueError(f"unknown group state {sorted(unknown)}; one of {sorted(GROUP_STATES.values())}")
        kwargs = {"states": {by_state[s] for s in wanted}} if wanted else {}
        result = self._wait(
            self._admin.list_consumer_groups(request_timeout=self.timeout_s, **kwargs), "ListGroups"
        )
        for err in result.errors:
            _raise_from(Exception(err), "ListGroups")
        listings = [
            GroupListing(g.group_id, "" if g.is_simple_consumer_group else "consumer", _state(g.state))
            for g in result.valid
        ]
        return sorted(listings, key=lambda g: g.group_id)

    def describe_consumer_group(self, group_id: str) -> ConsumerGroupDescription:
        futures = self._admin.describe_consumer_groups([group_id], request_timeout=self.timeout_s)
        g = self._wait(futures[group_id], f"DescribeGroups {group_id!r}")
        members = tuple(
            MemberDescription(
                m.member_id,
                m.group_instance_id or None,
                m.client_id,
                m.host,
                tuple(sorted((TopicPartition(tp.topic, tp.partition) for tp in m.assignment.topic_partitions),
                             key=tp_key)),
            )
            for m in g.members
        )
        coordinator = g.coordinator.id if g.coordinator is not None else -1
        state = _state(g.state)
        return ConsumerGroupDescription(g.group_id, state, g.partition_assignor, coordinator, members)

    def list_consumer_group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """Committed offsets (partitions with none committed are left out)."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = self._admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=self.timeout_s
        )
        result = self._wait(futures[group_id], f"OffsetFetch {group_id!r}")
        out: dict[TopicPartition, int] = {}
        for tp in result.topic_partitions or ():
            if tp.error is not None:
                _raise_from(Exception(tp.error), f"OffsetFetch {tp.topic}-{tp.partition}")
            if tp.offset >= 0:
                out[TopicPartition(tp.topic, tp.partition)] = tp.offset
        return out

    def alter_consumer_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka import TopicPartition as CkTopicPartition

        request = ConsumerGroupTopicPartitions(
            group_id, [CkTopicPartition(tp.topic, tp.partition, offset) for tp, offset in offsets.items()]
        )
        futures = self._admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)
        result = self._wait(futures[group_id], f"OffsetCommit {group_id!r}")
        for tp in result.topic_partitions or ():
            if tp.error is not None:
                _raise_from(Exception(tp.error), f"OffsetCommit {tp.topic}-{tp.partition}")

    def delete_consumer_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, errors.KafkaError | ClientError | None]:
        """Delete inactive groups and their committed offsets; each group's error or None."""
        ids = list(dict.fromkeys(group_ids))
        futures = self._admin.delete_consumer_groups(ids, request_timeout=self.timeout_s)
        out: dict[str, errors.KafkaError | ClientError | None] = {}
        for group_id in ids:
            try:
                self._wait(futures[group_id], f"DeleteGroups {group_id!r}")
                out[group_id] = None
            except (errors.KafkaError, ClientError) as exc:
                out[group_id] = exc
        return out

    def describe_topics(self, names: Iterable[str]) -> list[TopicPartitions]:
        from confluent_kafka import KafkaException, TopicCollection

        names = list(names)
        futures = self._admin.describe_topics(TopicCollection(names), request_timeout=self.timeout_s)
        out = []
        for name in names:
            try:
                description = futures[name].result(timeout=self.timeout_s)
            except KafkaException as exc:
                try:
                    _raise_from(exc, f"topic {name!r}")
                except errors.KafkaError as kafka_error:
                    out.append(TopicPartitions(name, (), kafka_error))
                    continue
            out.append(TopicPartitions(name, tuple(p.id for p in description.partitions)))
        return out

    def list_offsets(
        self, partitions: Iterable[TopicPartition], spec: str | int
    ) -> dict[TopicPartition, int]:
        """``"earliest"`` (log start), ``"latest"`` (HW) or a timestamp in ms (first offset at or after
        it; the HW when there is none, as Kafka's reset tool does) of each partition (ListOffsets)."""
        from confluent_kafka import TopicPartition as CkTopicPartition
        from confluent_kafka.admin import OffsetSpec

        tps = sorted(set(partitions), key=tp_key)
        if not tps:
            return {}
        if spec == "earliest":
            offset_spec = OffsetSpec.earliest()
        elif spec == "latest":
            offset_spec = OffsetSpec.latest()
        else:
            offset_spec = OffsetSpec.for_timestamp(int(spec))
        wanted = {CkTopicPartition(tp.topic, tp.partition): offset_spec for tp in tps}
        futures = self._admin.list_offsets(wanted, request_timeout=self.timeout_s)
        out = {}
        for ck_tp, future in futures.items():
            tp = TopicPartition(ck_tp.topic, ck_tp.partition)
            out[tp] = self._wait(future, f"ListOffsets {tp.topic}-{tp.partition}").offset
        missing = [tp for tp, offset in out.items() if offset == NO_OFFSET]
        if missing and spec not in ("earliest", "latest"):
            out.update(self.list_offsets(missing, "latest"))  # no record at or after the timestamp
        return out


def _state(state: Any) -> str:
    name = getattr(state, "name", str(state))
    return GROUP_STATES.get(name, name)
