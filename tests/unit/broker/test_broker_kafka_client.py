"""broker.follower.kafka_client: answers matched to requests by correlation id, in request order; a stream out
of step, a timeout or a dropped connection fails every waiting request and closes the connection, so
a late answer is never taken for a later request's."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from collections.abc import Callable

import pytest

from broker.follower.kafka_client import KafkaConnection, KafkaConnectionError
from proto.kafka import messages as m
from proto.kafka.api import RequestHeader, encode_response, parse_request

VERSION = 3
# What the fake broker does with the n-th request's header: answer it (the header to answer with) or
# stay silent (None).
Policy = Callable[[int, RequestHeader], RequestHeader | None]


async def serve(policy: Policy) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        count = 0
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                header, _ = parse_request(await reader.readexactly(size))
                count += 1
                answer_to = policy(count, header)
                if answer_to is not None:
                    body = encode_response(answer_to, m.ApiVersionsResponse(error_code=0, api_keys=[]))
                    writer.write(struct.pack(">i", len(body)) + body)
        except asyncio.IncompleteReadError:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def run(policy: Policy, scenario) -> None:
    async def main() -> None:
        server, port = await serve(policy)
        connection = await KafkaConnection.open("127.0.0.1", port, "test", 5.0)
        try:
            async with asyncio.timeout(10):
                await scenario(connection)
        finally:
            await connection.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_overlapping_requests_get_their_own_answers() -> None:
    async def scenario(connection: KafkaConnection) -> None:
        answers = await asyncio.gather(
            *(connection.request(m.ApiVersionsRequest(), VERSION, 5.0) for _ in range(5))
        )
        assert all(isinstance(a, m.ApiVersionsResponse) for a in answers) and not connection.closed

    run(lambda _n, header: header, scenario)


def test_an_answer_out_of_step_fails_every_waiting_request() -> None:
    """The broker answers the second request with the first's correlation id: neither request may take
    it; the connection is closed and later requests fail at once."""

    def policy(count: int, header: RequestHeader) -> RequestHeader | None:
        return dataclasses.replace(header, correlation_id=header.correlation_id + 7) if count == 1 else None

    async def scenario(connection: KafkaConnection) -> None:
        results = await asyncio.gather(
            connection.request(m.ApiVersionsRequest(), VERSION, 5.0),
            connection.request(m.ApiVersionsRequest(), VERSION, 5.0),
            return_exceptions=True,
        )
        assert all(isinstance(r, KafkaConnectionError) for r in results), results
        assert "correlation id" in str(results[0]) and connection.closed
        with pytest.raises(KafkaConnectionError):
            await connection.request(m.ApiVersionsRequest(), VERSION, 5.0)

    run(policy, scenario)


def test_a_timeout_closes_the_connection() -> None:
    """No answer in time: TimeoutError, and the connection is done (its answer could still come)."""

    async def scenario(connection: KafkaConnection) -> None:
        with pytest.raises(TimeoutError):
            await connection.request(m.ApiVersionsRequest(), VERSION, 0.2)
        assert connection.closed
        with pytest.raises(KafkaConnectionError):
            await connection.request(m.ApiVersionsRequest(), VERSION, 5.0)

    run(lambda _n, _header: None, scenario)


def test_each_request_times_out_at_its_own_deadline() -> None:
    """One timer serves every request: a shorter request sent after a longer one still times out at its
    own deadline (the longer one then fails with the connection), and a request sent after answered ones
    still has its deadline."""

    async def scenario(connection: KafkaConnection) -> None:
        for _ in range(3):  # answered: the timer armed by the first is left for later requests
            await connection.request(m.ApiVersionsRequest(), VERSION, 30.0)
        loop = asyncio.get_running_loop()
        long = asyncio.ensure_future(connection.request(m.ApiVersionsRequest(), VERSION, 30.0))
        await asyncio.sleep(0)
        start = loop.time()
        with pytest.raises(TimeoutError):
            await connection.request(m.ApiVersionsRequest(), VERSION, 0.2)
        assert loop.time() - start < 5.0
        assert connection.closed
        with pytest.raises(KafkaConnectionError):
            await long

    run(lambda n, header: header if n <= 3 else None, scenario)


def test_a_refused_connection_is_a_connection_error() -> None:
    async def main() -> None:
        server = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(KafkaConnectionError, match=f"127.0.0.1:{port}"):
            await KafkaConnection.open("127.0.0.1", port, "test", 5.0)

    asyncio.run(main())
