"""Client plumbing: one gRPC channel per broker address, and metadata refresh from any broker.

``Connections`` keeps one channel (HTTP/2 connection) per ``host:port`` for the client's lifetime;
gRPC multiplexes concurrent calls over it, so the producer's per-broker requests and the
consumer's long-poll fetches share it. ``fetch_metadata`` asks the brokers the cache already
knows first, then the bootstrap servers (a bootstrap address may be gone after a failover), and
raises ``NetworkException`` naming every address tried when none answers.

Thread-safety: ``Connections`` is safe to share between threads (guarded by a lock; gRPC channels
and stubs are thread-safe). ``fetch_metadata`` only reads the cache's address list: callers hold
their own lock while calling ``MetadataCache.update`` with the answer.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import grpc

from proto import broker_pb2, broker_pb2_grpc, errors, group_pb2_grpc
from proto.errors import ErrorCode
from proto.serving import GRPC_OPTIONS

NetworkError = errors.exception_class(ErrorCode.NETWORK_EXCEPTION)
# Metadata is small and any broker can answer it: a stalled broker (SIGSTOP, GC, overload) must not
# hold a refresh for the whole request timeout before the next address is tried.
METADATA_TIMEOUT_S_MAX = 5.0


def parse_bootstrap(bootstrap_servers: str | Sequence[str]) -> list[str]:
    """``"h1:p1,h2:p2"`` or a list of ``host:port`` -> a list; a malformed entry raises ValueError."""
    items = bootstrap_servers.split(",") if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
    addresses = [item.strip() for item in items if item.strip()]
    if not addresses:
        raise ValueError("bootstrap_servers is empty: give at least one broker as host:port")
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server {address!r} is not host:port")
    return addresses


class Connections:
    """A channel per address, with its BrokerService stub and (``group_stub``) GroupService stub."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, broker_pb2_grpc.BrokerServiceStub] = {}
        self._group_stubs: dict[str, group_pb2_grpc.GroupServiceStub] = {}
        self._closed = False

    def stub(self, address: str) -> broker_pb2_grpc.BrokerServiceStub:
        stub = self._stubs.get(address)
        if stub is not None:
            return stub
        with self._lock:
            if self._closed:
                raise NetworkError(f"the client is closed; cannot reach {address}")
            if address not in self._stubs:
                channel = grpc.insecure_channel(address, options=GRPC_OPTIONS)
                self._channels[address] = channel
                self._stubs[address] = broker_pb2_grpc.BrokerServiceStub(channel)
            return self._stubs[address]

    def group_stub(self, address: str) -> group_pb2_grpc.GroupServiceStub:
        """The GroupService stub of ``address`` (every broker serves it on the same channel)."""
        stub = self._group_stubs.get(address)
        if stub is not None:
            return stub
        self.stub(address)  # opens the channel, or raises when closed
        with self._lock:
            if address not in self._group_stubs:
                self._group_stubs[address] = group_pb2_grpc.GroupServiceStub(self._channels[address])
            return self._group_stubs[address]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
            self._stubs.clear()
            self._group_stubs.clear()


def fetch_metadata(
    connections: Connections,
    addresses: Sequence[str],
    topics: Sequence[str],
    timeout_s: float,
) -> broker_pb2.MetadataResponse:
    """Ask ``addresses`` in order until one answers Metadata for ``topics`` (each within ``timeout_s``,
    at most ``METADATA_TIMEOUT_S_MAX``)."""
    timeout_s = min(timeout_s, METADATA_TIMEOUT_S_MAX)
    request = broker_pb2.MetadataRequest(topics=list(topics), all_topics=not topics)
    failures: list[str] = []
    for address in dict.fromkeys(addresses):
        try:
            return connections.stub(address).Metadata(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            failures.append(f"{address}: {describe_rpc_error(exc)}")
    raise NetworkError(f"no broker answered Metadata ({'; '.join(failures) or 'no address known'})")


def describe_rpc_error(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"{code.name if code is not None else 'error'} {details}"


def rpc_error_code(exc: grpc.RpcError) -> ErrorCode:
    """The Kafka error a failed call stands for: a timeout or a network failure (both retriable)."""
    code = exc.code() if hasattr(exc, "code") else None
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ErrorCode.REQUEST_TIMED_OUT
    return ErrorCode.NETWORK_EXCEPTION
