"""The Kafka listener's framing, ordering and limits (broker.kafka.listener), with a scripted processor.

Frames here are ``size | api_key int16 | version int16 | correlation id int32 | body``; the fake
processor answers ``correlation id | body`` after the delay the body names, so each test controls
the order in which answers become ready.
"""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from broker.kafka.listener import NO_RESPONSE, Close, KafkaListener, ListenerSettings

DEADLINE_S = 5.0


class FakeProcessor:
    """``body`` = b"delay:<ms>" answers after that long; b"noanswer" / b"close" / b"boom" are verdicts."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def process(self, frame: bytes, client: str):
        correlation_id = struct.unpack_from(">i", frame, 4)[0]
        body = frame[8:]
        self.seen.append(correlation_id)
        if body == b"noanswer":
            return NO_RESPONSE
        if body == b"close":
            return Close("asked to")
        if body == b"boom":
            raise RuntimeError("handler bug")
        answer = struct.pack(">ii", 4 + len(body), correlation_id) + body
        if body.startswith(b"delay:"):
            delay_s = int(body[6:]) / 1000

            async def later() -> bytes:
                await asyncio.sleep(delay_s)
                return answer

            return later()
        return answer


class Metrics:
    def __init__(self) -> None:
        self.closes: list[str] = []

    def observe_close(self, event: str) -> None:
        self.closes.append(event)


def frame(correlation_id: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhi", 18, 0, correlation_id) + body
    return struct.pack(">i", len(payload)) + payload


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    payload = await reader.readexactly(size)
    return struct.unpack_from(">i", payload)[0], payload[4:]


async def closed(reader: asyncio.StreamReader) -> bool:
    """True when the broker closed the connection (EOF or reset) before the deadline."""
    try:
        data = await asyncio.wait_for(reader.read(1), DEADLINE_S)
    except ConnectionResetError:
        return True
    return data == b""


async def start(settings: ListenerSettings = ListenerSettings()) -> tuple[KafkaListener, Metrics]:  # noqa: B008
    metrics = Metrics()
    listener = KafkaListener("PLAINTEXT", "127.0.0.1", 0, FakeProcessor(), metrics, settings)
    await listener.start()
    return listener, metrics


async def connect(listener: KafkaListener):
    return await asyncio.open_connection("127.0.0.1", listener.port)


async def eventually(condition) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met before the deadline"
        await asyncio.sleep(0.01)


def run(coro):
    asyncio.run(asyncio.wait_for(coro, 3 * DEADLINE_S))


def test_pipelined_answers_leave_in_request_order():
    """Kafka: answers on one connection follow the request order, even when a later request's answer
    is ready first (kafka-python raises CorrelationIdError otherwise)."""

    async def main():
        listener, _ = await start()
        reader, writer = await connect(listener)
        writer.write(frame(1, b"delay:200") + frame(2, b"fast") + frame(3, b"delay:50") + frame(4))
        answers = [await read_answer(reader) for _ in range(4)]
        assert [a[0] for a in answers] == [1, 2, 3, 4]
        assert answers[0][1] == b"delay:200"
        writer.close()
        await listener.close()

    run(main())


def test_a_waiting_request_does_not_stall_other_connections():
    async def main():
        listener, _ = await start()
        _slow_reader, slow_writer = await connect(listener)
        slow_writer.write(frame(1, b"delay:2000"))
        reader, writer = await connect(listener)
        loop = asyncio.get_running_loop()
        began = loop.time()
        writer.write(frame(7, b"hello"))
        assert await read_answer(reader) == (7, b"hello")
        assert loop.time() - began < 1.0
        for w in (writer, slow_writer):
            w.close()
        await listener.close()

    run(main())


def test_frames_split_across_many_writes_are_reassembled():
    async def main():
        listener, _ = await start()
        reader, writer = await connect(listener)
        data = frame(5, b"x" * 1000) + frame(6, b"y")
        for i in range(0, len(data), 7):
            writer.write(data[i : i + 7])
            await writer.drain()
        assert await read_answer(reader) == (5, b"x" * 1000)
        assert await read_answer(reader) == (6, b"y")
        writer.close()
        await listener.close()

    run(main())


def test_acks0_gets_no_answer_and_later_requests_still_do():
    async def main():
        listener, _ = await start()
        reader, writer = await connect(listener)
        writer.write(frame(1, b"noanswer") + frame(2, b"after"))
        assert await read_answer(reader) == (2, b"after")
        writer.close()
        await listener.close()

    run(main())


@pytest.mark.parametrize(
    ("data", "event"),
    [
        pytest.param(struct.pack(">i", 1_000_001) + b"abc", "frame_rejected", id="above-max-bytes"),
        pytest.param(struct.pack(">i", -5) + b"abcdefgh", "frame_rejected", id="negative-size"),
        pytest.param(struct.pack(">i", 3) + b"abc", "frame_rejected", id="shorter-than-a-header"),
        pytest.param(frame(9, b"close"), "connection_closed_by_broker", id="processor-close"),
        pytest.param(frame(9, b"boom"), "request_failed", id="handler-raises"),
    ],
)
def test_bad_input_closes_that_connection_only(data, event, caplog):
    """Bad input: the offending connection is closed with a log line; another one keeps working."""

    async def main():
        listener, metrics = await start(ListenerSettings(socket_request_max_bytes=1_000_000))
        good_reader, good_writer = await connect(listener)
        reader, writer = await connect(listener)
        writer.write(data)
        assert await closed(reader)
        good_writer.write(frame(3, b"still"))
        assert await read_answer(good_reader) == (3, b"still")
        assert metrics.closes == [event]
        good_writer.close()
        writer.close()
        await listener.close()

    with caplog.at_level(logging.INFO, logger="broker.kafka.listener"):
        run(main())
    assert any(event in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_half_a_frame_then_stall_is_closed_when_idle():
    """connections.max.idle.ms closes a client that sent part of a frame and went quiet."""

    async def main():
        listener, metrics = await start(ListenerSettings(connections_max_idle_ms=200))
        reader, writer = await connect(listener)
        writer.write(frame(1, b"abcdef")[:7])
        assert await closed(reader)
        assert metrics.closes == ["connection_idle"]
        await eventually(lambda: listener.open_connections == 0)
        writer.close()
        await listener.close()

    run(main())


def test_a_connection_with_a_request_in_flight_is_not_idle():
    async def main():
        listener, _ = await start(ListenerSettings(connections_max_idle_ms=100))
        reader, writer = await connect(listener)
        writer.write(frame(1, b"delay:600"))
        assert await read_answer(reader) == (1, b"delay:600")
        writer.close()
        await listener.close()

    run(main())


def test_max_connections_refuses_the_extra_one():
    async def main():
        listener, metrics = await start(ListenerSettings(max_connections=2))
        first = [await connect(listener) for _ in range(2)]
        reader, writer = await connect(listener)
        assert await closed(reader)
        writer.close()
        assert metrics.closes == ["connection_rejected"]
        first[0][1].write(frame(4, b"ok"))
        assert await read_answer(first[0][0]) == (4, b"ok")
        for _, w in first:
            w.close()
        await listener.close()

    run(main())


def test_hundreds_of_idle_connections_do_not_stop_service():
    async def main():
        listener, _ = await start()
        idle = [await connect(listener) for _ in range(300)]
        assert listener.open_connections == 300
        reader, writer = await connect(listener)
        writer.write(frame(8, b"served"))
        assert await read_answer(reader) == (8, b"served")
        for _, w in [*idle, (reader, writer)]:
            w.close()
        await listener.close()

    run(main())


def test_many_pipelined_requests_keep_order_past_the_in_flight_limit():
    """Past MAX_IN_FLIGHT unanswered requests the listener stops reading, then resumes: none lost."""

    async def main():
        listener, _ = await start()
        reader, writer = await connect(listener)
        count = 500
        writer.write(b"".join(frame(i, b"delay:1" if i % 3 else b"now") for i in range(count)))
        ids = [(await read_answer(reader))[0] for _ in range(count)]
        assert ids == list(range(count))
        writer.close()
        await listener.close()

    run(main())


def test_the_listener_runs_on_uvloop_when_installed():
    """The broker runs on uvloop when it is installed (broker.server.event_loop_runner); uvloop's
    transports are not asyncio.Transport subclasses, which the listener must not assume."""
    uvloop = pytest.importorskip("uvloop")

    async def main():
        listener, metrics = await start(ListenerSettings(socket_request_max_bytes=1000))
        reader, writer = await connect(listener)
        writer.write(frame(1, b"delay:100") + frame(2, b"fast"))
        assert [(await read_answer(reader))[0] for _ in range(2)] == [1, 2]
        bad_reader, bad_writer = await connect(listener)
        bad_writer.write(struct.pack(">i", 5000))
        assert await closed(bad_reader)
        assert metrics.closes == ["frame_rejected"]
        for w in (writer, bad_writer):
            w.close()
        await listener.close()

    uvloop.run(asyncio.wait_for(main(), 3 * DEADLINE_S))
