"""Zero-copy fetch in the Kafka listener (broker.kafka.listener): answers made of parts — bytes and file
slices sent with os.sendfile — arrive byte for byte as their in-memory encoding, in request order,
and a client that goes away mid-send ends only its own connection.

The scripted processor answers a body ``b"file:<position>:<size>"`` with ``correlation id | b"<" |
records(slice of the test file) | b">"`` as ``FrameParts``; other bodies as test_network's does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import struct
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from broker.kafka.listener import DEFAULT_SENDFILE_MIN_BYTES, KafkaListener, ListenerSettings
from broker.metrics import KafkaRequestMetrics
from proto.kafka.codec import FrameParts, ResponseParts, write_nullable_records
from storage.file_slice import FileSlice
from tests.unit.broker.test_network import DEADLINE_S, Metrics, connect, eventually, frame, read_answer

FILE_BYTES = 8 << 20


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> tuple[Path, bytes]:
    data = random.Random(16).randbytes(FILE_BYTES)
    path = tmp_path_factory.mktemp("segment") / "00000000000000000000.log"
    path.write_bytes(data)
    return path, data


class PartsProcessor:
    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.slices: list[FileSlice] = []

    def process(self, request: bytes, client: str):
        correlation_id = struct.unpack_from(">i", request, 4)[0]
        body = request[8:]
        if body.startswith(b"file:"):
            position, size = (int(x) for x in body[5:].split(b":")[:2])
            piece = FileSlice(self.fd, position, size, "test.log")
            self.slices.append(piece)
            out = ResponseParts(4)
            out += struct.pack(">i", correlation_id) + b"<"
            write_nullable_records(out, piece)
            out += b">"
            parts = FrameParts.of(out)
            struct.pack_into(">i", out, 0, parts.size - 4)
            if body.endswith(b":9"):  # ...and a delay, so later answers are ready first

                async def later() -> FrameParts:
                    await asyncio.sleep(0.1)
                    return parts

                return later()
            return parts
        return struct.pack(">ii", 4 + len(body), correlation_id) + body


def expected(data: bytes, position: int, size: int) -> bytes:
    return b"<" + struct.pack(">i", size) + data[position : position + size] + b">"


# These tests are about the sendfile path itself: every region goes out with sendfile, however small.
SENDFILE_ALWAYS = ListenerSettings(sendfile_min_bytes=0)


async def start(path: Path, settings: ListenerSettings = SENDFILE_ALWAYS):
    processor = PartsProcessor(path)
    listener = KafkaListener("PLAINTEXT", "127.0.0.1", 0, processor, Metrics(), settings)
    await listener.start()
    return listener, processor


async def stop(listener: KafkaListener, processor: PartsProcessor) -> None:
    await listener.close()
    os.close(processor.fd)


def run(coro):
    asyncio.run(asyncio.wait_for(coro, 6 * DEADLINE_S))


@pytest.mark.parametrize("sendfile", [True, False], ids=["sendfile", "copied"])
def test_an_answer_of_parts_arrives_byte_for_byte(data_file, sendfile: bool) -> None:
    """...and the way its records went is counted, as the broker's metrics expose it."""
    path, data = data_file
    metrics = KafkaRequestMetrics(CollectorRegistry())

    async def main():
        listener, processor = await start(path, ListenerSettings(sendfile=sendfile, sendfile_min_bytes=0))
        metrics.register_sendfile(
            lambda: [(listener.name, listener.sendfile_bytes, listener.copied_region_bytes)]
        )
        reader, writer = await connect(listener)
        writer.write(frame(1, b"file:100:5000"))
        assert await read_answer(reader) == (1, expected(data, 100, 5000))
        counts = (listener.sendfile_bytes, listener.copied_region_bytes)
        assert counts == ((5000, 0) if sendfile else (0, 5000))
        scraped = tuple(
            metrics.registry.get_sample_value(name, {"listener": "PLAINTEXT"})
            for name in ("pykraft_kafka_sendfile_bytes_total", "pykraft_kafka_records_copied_bytes_total")
        )
        assert scraped == counts
        await eventually(lambda: all(s.closed for s in processor.slices))
        writer.close()
        await stop(listener, processor)

    run(main())


@pytest.mark.parametrize("region_bytes", [300, DEFAULT_SENDFILE_MIN_BYTES - 1, DEFAULT_SENDFILE_MIN_BYTES])
def test_an_answer_with_fewer_record_bytes_than_sendfile_min_bytes_is_copied(data_file, region_bytes) -> None:
    """A small answer (a follower's or a tailing consumer's few records) leaves in one write: copying a
    few hundred bytes is cheaper than a second system call, TCP segment and wake-up of the reader."""
    path, data = data_file

    async def main():
        listener, processor = await start(path, ListenerSettings())
        reader, writer = await connect(listener)
        writer.write(frame(1, b"file:100:%d" % region_bytes))
        assert await read_answer(reader) == (1, expected(data, 100, region_bytes))
        copied = region_bytes < DEFAULT_SENDFILE_MIN_BYTES
        assert (listener.sendfile_bytes, listener.copied_region_bytes) == (
            (0, region_bytes) if copied else (region_bytes, 0)
        )
        await eventually(lambda: all(s.closed for s in processor.slices))
        writer.close()
        await stop(listener, processor)

    run(main())


def test_pipelined_answers_of_parts_and_bytes_keep_request_order(data_file) -> None:
    """Big slices (larger than the socket buffers, so sendfile waits for writability part way), small
    ones, plain bytes and a delayed slice, pipelined on one connection: every answer whole, in order."""
    path, data = data_file
    requests = [
        (1, b"file:0:3000000"), (2, b"plain"), (3, b"file:7:1:9"), (4, b"file:3000000:4000000"),
        (5, b"file:12:1"), (6, b"plain-too"), (7, b"file:5:300:9"),
    ]  # fmt: skip

    async def main():
        listener, processor = await start(path)
        reader, writer = await connect(listener)
        writer.transport.set_write_buffer_limits(0)
        sock = writer.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        writer.write(b"".join(frame(i, body) for i, body in requests))
        for correlation_id, body in requests:
            got = await read_answer(reader)
            if body.startswith(b"file:"):
                position, size = (int(x) for x in body[5:].split(b":")[:2])
                assert got == (correlation_id, expected(data, position, size)), correlation_id
            else:
                assert got == (correlation_id, body)
        assert listener.sendfile_bytes == 3_000_000 + 1 + 4_000_000 + 1 + 300
        await eventually(lambda: all(s.closed for s in processor.slices))
        writer.close()
        await stop(listener, processor)

    run(main())


def test_a_client_closing_mid_sendfile_ends_only_its_connection(data_file, caplog) -> None:
    path, data = data_file
    caplog.set_level(logging.INFO, logger="broker.kafka.listener")

    async def main():
        listener, processor = await start(path)
        fds_before = len(os.listdir("/proc/self/fd"))
        quit_reader, quit_writer = await connect(listener)
        quit_socket = quit_writer.get_extra_info("socket")
        quit_socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        quit_writer.write(frame(1, f"file:0:{FILE_BYTES}".encode()))
        await quit_reader.readexactly(1000)  # the answer has started
        quit_socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        quit_writer.transport.abort()  # a reset, with most of the 8 MiB not sent yet
        await eventually(lambda: not listener.connections)
        await eventually(lambda: all(s.closed for s in processor.slices))
        await eventually(lambda: len(os.listdir("/proc/self/fd")) <= fds_before)
        assert listener.sendfile_bytes < FILE_BYTES
        # the broker goes on serving
        reader, writer = await connect(listener)
        writer.write(frame(2, b"file:9:99") + frame(3, b"after"))
        assert await read_answer(reader) == (2, expected(data, 9, 99))
        assert await read_answer(reader) == (3, b"after")
        writer.close()
        await stop(listener, processor)

    run(main())


def test_a_slice_whose_file_was_truncated_closes_the_connection(tmp_path: Path) -> None:
    """The size prefix already counted the slice's bytes: a short file cannot be honoured."""
    path = tmp_path / "short.log"
    path.write_bytes(b"x" * 1000)

    async def main():
        listener, processor = await start(path)
        reader, writer = await connect(listener)
        os.truncate(path, 0)
        writer.write(frame(1, b"file:0:1000"))
        sent = await asyncio.wait_for(reader.read(), DEADLINE_S)  # to EOF: the broker closed
        assert len(sent) < 4 + struct.unpack_from(">i", sent)[0]  # the bytes before the slice only
        assert listener.metrics.closes == ["response_failed"]
        await eventually(lambda: all(s.closed for s in processor.slices))
        writer.close()
        await stop(listener, processor)

    run(main())


def test_sendfile_on_uvloop_when_installed(data_file) -> None:
    """uvloop has no loop.sendfile: the listener's own os.sendfile path serves there too."""
    uvloop = pytest.importorskip("uvloop")
    path, data = data_file

    async def main():
        listener, processor = await start(path)
        reader, writer = await connect(listener)
        writer.write(frame(1, b"file:0:4000000") + frame(2, b"plain"))
        assert await read_answer(reader) == (1, expected(data, 0, 4_000_000))
        assert await read_answer(reader) == (2, b"plain")
        assert listener.sendfile_bytes == 4_000_000
        writer.close()
        await stop(listener, processor)

    uvloop.run(asyncio.wait_for(main(), 6 * DEADLINE_S))
