"""A fault-injecting TCP proxy in front of every node's port: network partitions between chosen nodes.

    python -m tests.chaos.proxy --data-dir D --route controller-1=41001:40001 --route broker-101=...
        --kafka-route broker-101=...

Each ``--route NAME=PROXY_PORT:TARGET_PORT`` listens on ``127.0.0.1:PROXY_PORT`` and forwards to
the node ``NAME`` on ``127.0.0.1:TARGET_PORT``. Nodes are configured to reach each other only through
these ports (controllers' ``--voters``, brokers' ``--controllers`` and advertised listener), so every
node-to-node connection passes here.

**Who is connecting.** All connections come from 127.0.0.1, so the proxy finds the *process* that
owns the other end: the accepted socket's peer port is looked up in ``/proc/net/tcp{,6}`` (local
port = peer port, remote port = our port) to get the socket inode, and the inode among the open
files of the processes whose command line holds ``--data-dir``'s path (``/proc/<pid>/fd``). The
node name is read from that command line (``controller``/``broker`` and ``--node-id``). Anything
else (the test's own clients) is ``client``.

**Partitions.** A partition is a set of unordered node pairs. A connection between a blocked pair
is *stalled*, not closed — like packets dropped by a firewall: bytes already read wait, nothing more
is read (TCP backpressure), and a new connection is accepted but not forwarded. Requests time out at
the application's deadlines. On heal the stalled bytes flow again (gRPC's HTTP/2 framing stays
intact) and stalled new connections are connected. This is what ``iptables -j DROP`` does to a
TCP connection, without root.

Control: one JSON command per line on stdin, one JSON answer per line on stdout (``READY`` first):
``{"cmd": "block", "pairs": [["broker-101", "controller-1"], ...]}`` replaces the blocked set;
``{"cmd": "heal"}`` clears it; ``{"cmd": "connections"}`` counts live connections per
``"src>dst"``; ``{"cmd": "delay", "pairs": [["broker-102", "broker-101"], ...], "ms": N}`` delays every
chunk between those nodes by N ms each way, in order (a slower link; replaces the delayed set, N = 0
or no pairs: none); ``{"cmd": "cut-produce-answers", "every": N}`` (N > 0) cuts client connections to the
brokers' Kafka listeners instead of forwarding the 1st, (N+1)th, (2N+1)th, ... Produce answer (0 turns
it off). EOF on stdin stops the proxy.

**Cut Produce answers.** A client whose connection breaks after the broker appended a batch but
before the answer arrived cannot know the batch was written and sends it again: without idempotence
the record is written twice, with it (KIP-98) the broker answers the retry with the first offsets.
For that the proxy follows Kafka's framing on client connections to a Kafka listener (routes named
``--kafka-route``): a request's size, API key and correlation id; an answer's size and correlation
id. The answer to a Produce request (API key 0) that is due to be cut is dropped and both sides of
the connection are closed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

CHUNK_BYTES = 65536
CLIENT = "client"
PRODUCE_API_KEY = 0


def parse_route(text: str) -> tuple[str, int, int]:
    name, _, ports = text.partition("=")
    listen, _, target = ports.partition(":")
    return name, int(listen), int(target)


class SourceFinder:
    """Which node process owns the other end of a loopback TCP connection."""

    def __init__(self, data_dir: str) -> None:
        self._marker = data_dir.encode()
        self._nodes: dict[int, str] = {}  # pid -> node name

    def find(self, peer_port: int, proxy_port: int) -> str:
        inode = _socket_inode(peer_port, proxy_port)
        if inode is None:
            return CLIENT
        for rescan in (False, True):
            if rescan:
                self._nodes = _node_processes(self._marker)
            for pid, name in list(self._nodes.items()):
                if _owns(pid, inode):
                    return name
        return CLIENT


def _socket_inode(local_port: int, remote_port: int) -> int | None:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if (int(fields[1].rsplit(":", 1)[1], 16) == local_port
                        and int(fields[2].rsplit(":", 1)[1], 16) == remote_port):  # fmt: skip
                    return int(fields[9])
    return None


def _owns(pid: int, inode: int) -> bool:
    target = f"socket:[{inode}]"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
    return False


def _node_processes(marker: bytes) -> dict[int, str]:
    nodes = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(marker in arg for arg in argv) or b"--node-id" not in argv:
            continue
        role = "controller" if b"controller" in argv else "broker"
        nodes[int(entry)] = f"{role}-{argv[argv.index(b'--node-id') + 1].decode()}"
    return nodes


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """One Kafka frame (4-byte big-endian size, then the body), size included; b"" at EOF."""
    try:
        head = await reader.readexactly(4)
        return head + await reader.readexactly(int.from_bytes(head, "big"))
    except asyncio.IncompleteReadError:
        return b""


class FaultProxy:
    def __init__(self, routes: list[tuple[str, int, int]], finder: SourceFinder,
                 kafka_routes: list[tuple[str, int, int]] = ()) -> None:  # fmt: skip
        self.kafka_ports = {listen for _name, listen, _target in kafka_routes}
        self.routes = [*routes, *kafka_routes]
        self.finder = finder
        self.blocked: set[frozenset[str]] = set()
        self.delayed: set[frozenset[str]] = set()
        self.delay_s = 0.0
        self._changed = asyncio.Event()
        self.live: Counter[str] = Counter()
        self.cut_every = 0  # cut-produce-answers: 0 = off
        self.produce_answers = 0  # Produce answers seen while cutting (each is forwarded or cut)
        self.cut = 0

    def is_blocked(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self.blocked

    def set_blocked(self, pairs: list[list[str]]) -> None:
        self.blocked = {frozenset(p) for p in pairs}
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def gate(self, a: str, b: str) -> None:
        while self.is_blocked(a, b):
            await self._changed.wait()

    async def start(self) -> list[asyncio.Server]:
        servers = []
        for name, listen, target in self.routes:

            async def handle(reader, writer, name=name, listen=listen, target=target) -> None:
                await self.connection(reader, writer, name, listen, target)

            servers.append(await asyncio.start_server(handle, "127.0.0.1", listen))
        return servers

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         dst: str, listen: int, target: int) -> None:  # fmt: skip
        src = self.finder.find(writer.get_extra_info("peername")[1], listen)
        key = f"{src}>{dst}"
        self.live[key] += 1
        try:
            await self.gate(src, dst)
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
            except OSError:
                return
            if src == CLIENT and listen in self.kafka_ports:
                produce: set[int] = set()  # correlation ids of this connection's Produce requests
                await asyncio.gather(
                    self.kafka_requests(reader, up_writer, produce),
                    self.kafka_answers(up_reader, writer, up_writer, produce),
                )
            else:
                await asyncio.gather(
                    self.pipe(reader, up_writer, src, dst), self.pipe(up_reader, writer, src, dst)
                )
        finally:
            self.live[key] -= 1
            writer.close()

    async def pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   src: str, dst: str) -> None:  # fmt: skip
        delayed: asyncio.Queue[tuple[float, bytes]] | None = None  # once a chunk was delayed: all are
        sender: asyncio.Task | None = None
        loop = asyncio.get_running_loop()
        try:
            while data := await reader.read(CHUNK_BYTES):
                await self.gate(src, dst)
                if delayed is None and frozenset((src, dst)) in self.delayed and self.delay_s > 0:
                    delayed = asyncio.Queue()
                    sender = asyncio.create_task(self._send_delayed(delayed, writer))
                if delayed is not None:
                    delay_s = self.delay_s if frozenset((src, dst)) in self.delayed else 0.0
                    delayed.put_nowait((loop.time() + delay_s, data))
                    continue
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if sender is not None:
                sender.cancel()
            writer.close()

    @staticmethod
    async def _send_delayed(queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            while True:
                due, data = await queue.get()
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                writer.write(data)
                await writer.drain()

    async def kafka_requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             produce: set[int]) -> None:  # fmt: skip
        """Client -> broker, frame by frame: remember which correlation ids are Produce requests."""
        try:
            while frame := await read_frame(reader):
                if len(frame) >= 12 and int.from_bytes(frame[4:6], "big", signed=True) == PRODUCE_API_KEY:
                    produce.add(int.from_bytes(frame[8:12], "big", signed=True))
                writer.write(frame)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def kafka_answers(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            upstream: asyncio.StreamWriter, produce: set[int]) -> None:  # fmt: skip
        """Broker -> client, frame by frame: a Produce answer due to be cut closes both sides instead."""
        try:
            while frame := await read_frame(reader):
                correlation_id = int.from_bytes(frame[4:8], "big", signed=True) if len(frame) >= 8 else None
                if correlation_id in produce:
                    produce.discard(correlation_id)
                    if self.cut_every:
                        self.produce_answers += 1
                        if (self.produce_answers - 1) % self.cut_every == 0:
                            self.cut += 1
                            upstream.close()
                            return
                writer.write(frame)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    def command(self, line: str) -> dict:
        cmd = json.loads(line)
        if cmd["cmd"] == "block":
            self.set_blocked(cmd["pairs"])
        elif cmd["cmd"] == "heal":
            self.set_blocked([])
        elif cmd["cmd"] == "delay":
            self.delayed, self.delay_s = {frozenset(p) for p in cmd["pairs"]}, int(cmd["ms"]) / 1000
            return {"ok": True, "delayed": sorted(sorted(p) for p in self.delayed), "ms": int(cmd["ms"])}
        elif cmd["cmd"] == "cut-produce-answers":
            self.cut_every = int(cmd["every"])
            return {"ok": True, "every": self.cut_every, "cut": self.cut}
        elif cmd["cmd"] == "connections":
            return {"ok": True, "connections": {k: n for k, n in self.live.items() if n}}
        else:
            return {"ok": False, "error": f"unknown command {cmd['cmd']!r}"}
        return {"ok": True, "blocked": sorted(sorted(p) for p in self.blocked)}


async def main(args: argparse.Namespace) -> None:
    proxy = FaultProxy([parse_route(r) for r in args.route], SourceFinder(str(args.data_dir)),
                       [parse_route(r) for r in args.kafka_route])  # fmt: skip
    servers = await proxy.start()
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    print("READY", flush=True)
    while line := await stdin.readline():
        if line.strip():
            print(json.dumps(proxy.command(line.decode())), flush=True)
    for server in servers:
        server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--route", action="append", default=[], metavar="NAME=PROXY_PORT:TARGET_PORT")
    parser.add_argument(
        "--kafka-route",
        action="append",
        default=[],
        metavar="NAME=PROXY_PORT:TARGET_PORT",
        help="a route to a Kafka listener (its client connections can cut Produce answers)",
    )
    asyncio.run(main(parser.parse_args()))
