"""broker.kafka.handlers.refusals through the request processor: every refused request is logged at WARN
with the client (address, client.id), the API, the partition and the error name, once per client and
error per interval, then a summary count; a handler that raises is logged at ERROR with its traceback.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import uuid
from pathlib import Path

import pytest

from broker.kafka.handlers.context import Later, RequestContext
from broker.kafka.handlers.refusals import RefusalLog, ResponseError, _plan, response_errors
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey, RequestHeader
from proto.runtime.logfmt import LogfmtFormatter
from tests.unit.broker.test_kafka_handlers import TOPIC_ID, Broker, fetch, produce

INTERVAL_MS = 60_000
LOGGER = "broker.kafka.handlers.refusals"


def lines(caplog: pytest.LogCaptureFixture, logger: str = LOGGER) -> list[dict[str, str]]:
    """The captured records of ``logger`` as the broker's log shows them, split back into fields."""
    formatter = LogfmtFormatter(101, "broker")
    return [dict(item.split("=", 1) for item in shlex.split(formatter.format(r)))
            for r in caplog.records if r.name == logger]  # fmt: skip


@pytest.fixture
def clock() -> list[int]:
    return [1_000]


@pytest.fixture
def broker(tmp_path: Path, clock: list[int]) -> Broker:
    b = Broker(tmp_path)
    b.services.refusals.clock_ms = lambda: clock[0]
    return b


def test_a_refused_produce_is_one_warn_line_with_client_api_partition_and_error(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    assert broker.call(ApiKey.PRODUCE, 9, produce("nope", [b"x"], partition=2)).responses[0]
    [line] = lines(caplog)
    assert line["level"] == "WARNING" and line["event"] == "request_refused"
    fields = ("client", "client_id", "api", "code", "topic", "partition", "partitions")
    assert tuple(line[f] for f in fields) == (
        "127.0.0.1:1", "test", "Produce", "UNKNOWN_TOPIC_OR_PARTITION", "nope", "2", "1",
    )  # fmt: skip


def test_accepted_requests_log_nothing(broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    broker.call(ApiKey.PRODUCE, 9, produce("t", [b"x"]))
    broker.call(ApiKey.FETCH, 12, fetch(0))
    assert lines(caplog) == []


def test_the_same_error_again_is_counted_then_summarised_after_the_interval(
    broker: Broker, clock: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    """The rule the docs state: the first line, then within the interval only a count, said once the
    interval is over (at the next flush), and a new window starts with a full line again."""
    caplog.set_level(logging.INFO)
    for _ in range(3):
        broker.call(ApiKey.PRODUCE, 9, produce("nope", [b"x"]))
    stale = fetch(0)
    stale.topics[0].partitions[0].current_leader_epoch = 2  # t-0 is in epoch 3: another error, own line
    broker.call(ApiKey.FETCH, 12, stale)
    assert [(x["event"], x["code"]) for x in lines(caplog)] == [
        ("request_refused", "UNKNOWN_TOPIC_OR_PARTITION"), ("request_refused", "FENCED_LEADER_EPOCH"),
    ]  # fmt: skip
    caplog.clear()
    clock[0] += INTERVAL_MS - 1
    broker.services.refusals.flush()
    assert lines(caplog) == []  # the window is not over yet
    clock[0] += 1
    broker.services.refusals.flush()
    [summary] = lines(caplog)
    assert (summary["level"], summary["event"], summary["client"], summary["client_id"], summary["code"],
            summary["suppressed"], summary["interval_ms"]) == (
        "WARNING", "requests_refused_summary", "127.0.0.1", "test", "UNKNOWN_TOPIC_OR_PARTITION", "2",
        str(INTERVAL_MS),
    )  # fmt: skip
    caplog.clear()
    broker.call(ApiKey.PRODUCE, 9, produce("nope", [b"x"]))
    assert [x["event"] for x in lines(caplog)] == ["request_refused"]


def test_a_key_that_repeats_after_its_interval_says_the_count_before_its_new_line(
    broker: Broker, clock: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    broker.call(ApiKey.PRODUCE, 9, produce("nope", [b"x"]))
    broker.call(ApiKey.PRODUCE, 9, produce("nope", [b"x"]))
    clock[0] += INTERVAL_MS
    broker.call(ApiKey.PRODUCE, 9, produce("nope", [b"x"]))  # before any flush
    assert [(x["event"], x.get("suppressed")) for x in lines(caplog)] == [
        ("request_refused", None), ("requests_refused_summary", "1"), ("request_refused", None),
    ]  # fmt: skip


def test_one_line_per_error_of_a_request_with_the_count_of_its_partitions(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    request = produce("nope", [b"x"])
    empty = [m.ProduceRequestPartitionProduceData(index=i, records=b"") for i in (0, 1)]
    request.topic_data.append(m.ProduceRequestTopicProduceData(name="nope2", partition_data=empty))
    request.topic_data.append(produce("other", [b"x"]).topic_data[0])  # led by 102: NOT_LEADER_OR_FOLLOWER
    broker.call(ApiKey.PRODUCE, 9, request)
    assert [(x["code"], x["topic"], x["partition"], x["partitions"]) for x in lines(caplog)] == [
        ("UNKNOWN_TOPIC_OR_PARTITION", "nope", "0", "3"), ("NOT_LEADER_OR_FOLLOWER", "other", "0", "1"),
    ]  # fmt: skip


def test_a_handler_that_raises_is_logged_at_error_with_its_traceback(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(services, context, request):
        raise KeyError("bug")

    broker.processor.handlers[int(ApiKey.METADATA)] = broken
    caplog.set_level(logging.INFO)
    with pytest.raises(KeyError):
        broker.call(ApiKey.METADATA, 12, m.MetadataRequest(topics=None))
    [line] = lines(caplog, "broker.kafka.handlers.processor")
    fields = ("level", "event", "client", "client_id", "api", "version")
    want = ("ERROR", "request_crashed", "127.0.0.1:1", "test", "Metadata", "12")
    assert tuple(line[f] for f in fields) == want
    assert line["error"] == "KeyError: 'bug'" and "Traceback" in line["traceback"]


def test_an_awaited_answer_that_fails_is_logged_at_error(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    async def later():
        raise RuntimeError("late bug")

    broker.processor.handlers[int(ApiKey.METADATA)] = lambda services, context, request: later()
    caplog.set_level(logging.INFO)
    with pytest.raises(RuntimeError):
        broker.call(ApiKey.METADATA, 12, m.MetadataRequest(topics=None))
    assert [(x["level"], x["event"]) for x in lines(caplog, "broker.kafka.handlers.processor")] == [
        ("ERROR", "request_crashed")
    ]


def test_a_later_answer_is_finished_once_its_future_is_done_and_a_failing_finish_is_logged(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    """``Later``: the processor answers when the future completes (after the handler returned), with
    ``finish`` of its result; a ``finish`` that raises is logged at ERROR and fails the answer."""

    def handler(finish):
        def handle(services, context, request):
            future = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(future.set_result, request.topics)
            return Later(future, finish)

        return handle

    def answer(topics):
        return m.MetadataResponse(brokers=[], topics=[], controller_id=7)

    def broken(topics):
        raise RuntimeError("late bug")

    broker.processor.handlers[int(ApiKey.METADATA)] = handler(answer)
    assert broker.call(ApiKey.METADATA, 12, m.MetadataRequest(topics=None)).controller_id == 7
    broker.processor.handlers[int(ApiKey.METADATA)] = handler(broken)
    caplog.set_level(logging.INFO)
    with pytest.raises(RuntimeError):
        broker.call(ApiKey.METADATA, 12, m.MetadataRequest(topics=None))
    assert [(x["level"], x["event"]) for x in lines(caplog, "broker.kafka.handlers.processor")] == [
        ("ERROR", "request_crashed")
    ]


@pytest.mark.parametrize(
    ("code", "level"),
    [(ErrorCode.MEMBER_ID_REQUIRED, "INFO"), (ErrorCode.REBALANCE_IN_PROGRESS, "INFO"),
     (ErrorCode.NOT_ENOUGH_REPLICAS, "WARNING"), (ErrorCode.NOT_COORDINATOR, "WARNING")],
    ids=["member-id-required", "rebalance-in-progress", "not-enough-replicas", "not-coordinator"],
)  # fmt: skip
def test_protocol_instructions_are_info_and_refusals_warn(
    code: ErrorCode, level: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    refusals = RefusalLog(lambda: 0)
    context = RequestContext(RequestHeader(ApiKey.JOIN_GROUP, 9, 1, None), "10.0.0.1:5", "PLAINTEXT")
    refusals.observe(context, "JoinGroup", [ResponseError(code, None, None, None)])
    [line] = lines(caplog)
    assert (line["level"], line["code"], line["client_id"]) == (level, code.name, "")
    assert "topic" not in line and "partition" not in line


def test_a_client_that_reconnects_is_the_same_client(caplog: pytest.LogCaptureFixture) -> None:
    """The key is the client's host and client.id, not the connection: a CLI run per record, or
    librdkafka reconnecting after the broker closed its connection, must not log a line per connection.
    The summary of protocol instructions stays at INFO like their lines."""
    caplog.set_level(logging.INFO)
    clock = [0]
    refusals = RefusalLog(lambda: clock[0], INTERVAL_MS)
    for port in (5000, 5001, 5002):
        context = RequestContext(RequestHeader(ApiKey.PRODUCE, 9, 1, "cli"), f"10.0.0.1:{port}", "PLAINTEXT")
        refusals.observe(context, "Produce", [ResponseError(ErrorCode.NOT_ENOUGH_REPLICAS, "t", 0, None)])
        join = RequestContext(RequestHeader(ApiKey.JOIN_GROUP, 9, 1, "cli"), f"10.0.0.1:{port}", "PLAINTEXT")
        refusals.observe(join, "JoinGroup", [ResponseError(ErrorCode.MEMBER_ID_REQUIRED, None, None, None)])
    other = RequestContext(RequestHeader(ApiKey.PRODUCE, 9, 1, "cli"), "10.0.0.2:5000", "PLAINTEXT")
    refusals.observe(other, "Produce", [ResponseError(ErrorCode.NOT_ENOUGH_REPLICAS, "t", 0, None)])
    assert [(x["client"], x["code"]) for x in lines(caplog)] == [
        ("10.0.0.1:5000", "NOT_ENOUGH_REPLICAS"), ("10.0.0.1:5000", "MEMBER_ID_REQUIRED"),
        ("10.0.0.2:5000", "NOT_ENOUGH_REPLICAS"),
    ]  # fmt: skip
    caplog.clear()
    clock[0] += INTERVAL_MS
    refusals.flush()
    assert sorted((x["level"], x["client"], x["code"], x["suppressed"]) for x in lines(caplog)) == [
        ("INFO", "10.0.0.1", "MEMBER_ID_REQUIRED", "2"), ("WARNING", "10.0.0.1", "NOT_ENOUGH_REPLICAS", "2"),
    ]


def test_response_errors_find_nested_codes_with_their_topic_partition_and_message() -> None:
    response = m.ProduceResponse(responses=[
        m.ProduceResponseTopicProduceResponse(name="a", partition_responses=[
            m.ProduceResponsePartitionProduceResponse(index=0),
            m.ProduceResponsePartitionProduceResponse(index=4, error_code=ErrorCode.NOT_ENOUGH_REPLICAS,
                                                      error_message="ISR 1 < min.insync.replicas 2"),
        ]),
    ])  # fmt: skip
    assert response_errors(response) == [
        ResponseError(ErrorCode.NOT_ENOUGH_REPLICAS, "a", 4, "ISR 1 < min.insync.replicas 2")
    ]
    by_id = m.FetchResponse(error_code=0, responses=[m.FetchResponseFetchableTopicResponse(
        topic_id=uuid.UUID(int=1), partitions=[m.FetchResponsePartitionData(
            partition_index=0, error_code=ErrorCode.UNKNOWN_TOPIC_ID)]),
    ])  # fmt: skip
    assert response_errors(by_id) == [ResponseError(ErrorCode.UNKNOWN_TOPIC_ID, TOPIC_ID, 0, None)]
    top = m.FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert response_errors(top) == [ResponseError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, None, None, None)]
    assert response_errors(m.MetadataResponse()) == []


def test_every_response_message_has_a_reachable_error_code() -> None:
    """The walk follows only fields whose types can lead to an ``error_code`` (read from the generated
    classes' type hints): a response type where it finds none would never be logged or counted."""
    classes = [c for name, c in vars(m).items()
               if name.endswith("Response") and isinstance(c, type) and hasattr(c, "API_KEY")]  # fmt: skip
    assert len(classes) >= 25
    assert [c.__name__ for c in classes if not _plan(c).reaches_errors] == []
