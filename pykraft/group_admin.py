"""Consumer-group administration over the brokers' GroupService (Kafka's Admin group calls).

    with GroupAdmin("127.0.0.1:9092") as groups:
        for listing in groups.list_consumer_groups():
            print(listing.group_id, listing.state)
        description = groups.describe_consumer_group("billing")
        offsets = groups.list_consumer_group_offsets("billing")      # {TopicPartition: OffsetAndMetadata}
        ends = groups.list_offsets(offsets, "latest")                 # {TopicPartition: HW}

``AdminClient`` exposes the same calls (it finds the brokers through DescribeCluster), so one client
does topics and groups, like Kafka's ``Admin``.

A group's calls go to its coordinator (the leader of the group's ``__consumer_offsets`` partition),
found with FindCoordinator on any broker. NOT_COORDINATOR (leadership moved) makes the client find it
again; COORDINATOR_LOAD_IN_PROGRESS and COORDINATOR_NOT_AVAILABLE are retried with backoff until
``timeout_s``. A group-level error that is not retriable raises its ``proto.errors`` class (for
example ``GroupIdNotFoundError``); per-partition commit errors raise too, naming the partition.

``alter_consumer_group_offsets`` commits with generation -1 and no member id (Kafka's standalone
commit): the coordinator accepts it only while the group has no active members, which is what
``pykraft groups reset-offsets`` relies on (it also checks the state first, to say so clearly).

Synchronous; a ``GroupAdmin`` may be shared by threads (gRPC channels are thread-safe).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from proto import broker_pb2, errors, group_pb2
from proto.errors import ErrorCode
from pykraft.assignors import tp_key
from pykraft.connection import Connections, describe_rpc_error, fetch_metadata, parse_bootstrap
from pykraft.group_client import decode_assignment, decode_subscription
from pykraft.types import TopicPartition

DEFAULT_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.1
NO_GENERATION = -1
NO_OFFSET = -1
NO_EPOCH = -1
INACTIVE_STATES = frozenset({"Empty", "Dead"})
# Retried by finding the coordinator again (it moved, or is still being chosen/loaded).
_REFIND = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
_WAIT = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
OFFSET_SPECS = {"earliest": broker_pb2.EARLIEST, "latest": broker_pb2.LATEST}


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
    subscribed_topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    state: str
    protocol_type: str
    assignor: str
    generation_id: int
    coordinator: int
    members: tuple[MemberDescription, ...]

    @property
    def is_active(self) -> bool:
        return self.state not in INACTIVE_STATES


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = NO_EPOCH
    metadata: str = ""


def member_partitions(assignment: bytes) -> tuple[TopicPartition, ...]:
    """A member's ConsumerProtocolAssignment bytes -> its partitions, sorted (empty bytes: none yet)."""
    return tuple(sorted(decode_assignment(assignment).partitions, key=tp_key))


def member_topics(subscription: bytes) -> tuple[str, ...]:
    return decode_subscription(subscription, None).topics


class GroupAdmin:
    def __init__(self, bootstrap: str | Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.addresses = parse_bootstrap(bootstrap)
        self.timeout_s = timeout_s
        self._connections = Connections()
        self._coordinators: dict[str, tuple[int, str]] = {}  # group -> (node id, address)

    def __enter__(self) -> GroupAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._connections.close()

    # ---- plumbing ----------------------------------------------------------------------------

    def _deadline_loop(self, what: str, last: Callable[[], str] = lambda: "") -> Iterable[float]:
        """Yield the remaining seconds until ``timeout_s`` runs out, then raise REQUEST_TIMED_OUT
        saying what the last attempt got (``last()``)."""
        deadline = time.monotonic() + self.timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            yield max(0.1, remaining)
        raise errors.error_for(
            ErrorCode.REQUEST_TIMED_OUT, f"{what} did not succeed within {self.timeout_s}s: {last()}"
        )

    def _any_broker(self, call: Callable[[str, float], Any], what: str) -> Any:
        """``call(address, timeout)`` on the bootstrap brokers in turn until one answers."""
        failures: list[str] = []
        for remaining in self._deadline_loop(what, lambda: "; ".join(failures[-3:])):
            for address in self.addresses:
                try:
                    return call(address, min(remaining, 5.0))
                except grpc.RpcError as exc:
                    failures.append(f"{address}: {describe_rpc_error(exc)}")
            time.sleep(RETRY_BACKOFF_S)
        raise AssertionError("unreachable")  # pragma: no cover

    def find_coordinator(self, group_id: str, refresh: bool = False) -> tuple[int, str]:
        """(node id, host:port) of the group's coordinator."""
        if not refresh and group_id in self._coordinators:
            return self._coordinators[group_id]
        request = group_pb2.FindCoordinatorRequest(key=group_id)
        for remaining in self._deadline_loop(f"FindCoordinator({group_id!r})"):
            response = self._any_broker(
                lambda a, t: self._connections.group_stub(a).FindCoordinator(request, timeout=t),
                "FindCoordinator",
            )
            code = response.error.code
            if code == ErrorCode.NONE:
                found = (response.node_id, f"{response.host}:{response.port}")
                self._coordinators[group_id] = found
                return found
            if not errors.is_retriable(code):
                errors.raise_for(code, response.error.message)
            time.sleep(min(RETRY_BACKOFF_S, remaining))
        raise AssertionError("unreachable")  # pragma: no cover

    def _coordinator_call(
        self, group_id: str, method: str, request: Any, error_of: Callable[[Any], Any]
    ) -> Any:
        """Call ``method`` on the group's coordinator, following it when it moves."""
        refresh = False
        last = "no attempt"
        # late binding on purpose: the timeout message names the last attempt
        for remaining in self._deadline_loop(f"{method}({group_id!r})", lambda: last):  # noqa: B023
            _, address = self.find_coordinator(group_id, refresh=refresh)
            try:
                response = getattr(self._connections.group_stub(address), method)(request, timeout=remaining)
            except grpc.RpcError as exc:
                last = f"{address}: {describe_rpc_error(exc)}"
                refresh = True
                time.sleep(RETRY_BACKOFF_S)
                continue
            error = error_of(response)
            if error.code in _REFIND or error.code in _WAIT:
                last = f"{ErrorCode(error.code).name}: {error.message}"
                refresh = error.code in _REFIND
                time.sleep(RETRY_BACKOFF_S)
                continue
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _brokers(self) -> list[tuple[int, str]]:
        metadata = self._metadata([])
        return [(b.node_id, f"{b.host}:{b.port}") for b in metadata.brokers]

    def _metadata(self, topics: Sequence[str]) -> broker_pb2.MetadataResponse:
        return fetch_metadata(self._connections, self.addresses, topics, self.timeout_s)

    # ---- groups ------------------------------------------------------------------------------

    def list_consumer_groups(self, states: Iterable[str] = ()) -> list[GroupListing]:
        """Every group of the cluster: each broker lists the groups it coordinates."""
        request = group_pb2.ListGroupsRequest(states_filter=list(states))
        found: dict[str, GroupListing] = {}
        for _, address in self._brokers():
            response = self._connections.group_stub(address).ListGroups(request, timeout=self.timeout_s)
            errors.raise_for(response.error.code, response.error.message)
            for g in response.groups:
                found[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.group_state)
        return sorted(found.values(), key=lambda g: g.group_id)

    def describe_consumer_group(self, group_id: str) -> ConsumerGroupDescription:
        request = group_pb2.DescribeGroupsRequest(groups=[group_id])
        response = self._coordinator_call(
            group_id, "DescribeGroups", request, lambda r: r.groups[0].error
        )
        (g,) = response.groups
        errors.raise_for(g.error.code, g.error.message)
        members = tuple(
            MemberDescription(
                m.member_id,
                m.group_instance_id if m.HasField("group_instance_id") else None,
                m.client_id,
                m.client_host,
                member_partitions(m.member_assignment),
                member_topics(m.member_metadata),
            )
            for m in g.members
        )
        coordinator, _ = self.find_coordinator(group_id)
        return ConsumerGroupDescription(
            g.group_id, g.group_state, g.protocol_type, g.protocol_data, g.generation_id, coordinator, members
        )

    def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets (partitions with none committed are left out)."""
        request = group_pb2.OffsetFetchRequest(group_id=group_id)
        for topic, ps in _by_topic(partitions or ()).items():
            request.topics.add(name=topic, partitions=ps)
        response = self._coordinator_call(group_id, "OffsetFetch", request, lambda r: r.error)
        errors.raise_for(response.error.code, response.error.message)
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in response.topics:
            for p in t.partitions:
                errors.raise_for(p.error.code, f"{t.name}-{p.partition}: {p.error.message}")
                if p.committed_offset != NO_OFFSET:
                    out[TopicPartition(t.name, p.partition)] = OffsetAndMetadata(
                        p.committed_offset, p.committed_leader_epoch, p.metadata
                    )
        return out

    def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Standalone commit of ``offsets`` (only for a group with no active members)."""
        request = group_pb2.OffsetCommitRequest(group_id=group_id, generation_id=NO_GENERATION)
        by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = {}
        for tp, value in offsets.items():
            om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
            by_topic.setdefault(tp.topic, []).append((tp.partition, om))
        for topic, items in sorted(by_topic.items()):
            t = request.topics.add(name=topic)
            for partition, om in sorted(items):
                t.partitions.add(
                    partition=partition,
                    committed_offset=om.offset,
                    committed_leader_epoch=om.leader_epoch,
                    committed_metadata=om.metadata,
                )
        response = self._coordinator_call(group_id, "OffsetCommit", request, lambda r: r.error)
        errors.raise_for(response.error.code, response.error.message)
        for t in response.topics:
            for p in t.partitions:
                errors.raise_for(p.error.code, f"{t.name}-{p.partition}: {p.error.message}")

    def delete_consumer_groups(self, group_ids: Iterable[str]) -> dict[str, errors.KafkaError | None]:
        """Delete inactive groups and their committed offsets; each group's error or None."""
        out: dict[str, errors.KafkaError | None] = {}
        for group_id in group_ids:
            request = group_pb2.DeleteGroupsRequest(groups=[group_id])
            response = self._coordinator_call(group_id, "DeleteGroups", request, lambda r: r.results[0].error)
            (result,) = response.results
            code = result.error.code
            out[group_id] = None if code == ErrorCode.NONE else errors.error_for(code, result.error.message)
        return out

    # ---- partition offsets -------------------------------------------------------------------

    def list_offsets(
        self, partitions: Iterable[TopicPartition], spec: str | int
    ) -> dict[TopicPartition, int]:
        """``"earliest"`` (log start), ``"latest"`` (HW) or a timestamp in ms (first offset at or after
        it; the HW when there is none, as Kafka's reset tool does) for each partition, from its leader."""
        tps = sorted(set(partitions), key=tp_key)
        out: dict[TopicPartition, int] = {}
        for remaining in self._deadline_loop("ListOffsets"):
            pending = [tp for tp in tps if tp not in out]
            if not pending:
                return out
            for leader_address, group in self._leaders(pending).items():
                try:
                    out.update(self._list_offsets_at(leader_address, group, spec, remaining))
                except grpc.RpcError:
                    continue
            if len(out) < len(tps):
                time.sleep(RETRY_BACKOFF_S)
        raise AssertionError("unreachable")  # pragma: no cover

    def _leaders(self, tps: Sequence[TopicPartition]) -> dict[str, list[TopicPartition]]:
        metadata = self._metadata(sorted({tp.topic for tp in tps}))
        addresses = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
        leaders: dict[TopicPartition, int] = {}
        for t in metadata.topics:
            if t.error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                errors.raise_for(t.error.code, f"topic {t.name!r} does not exist")
            for p in t.partitions:
                leaders[TopicPartition(t.name, p.partition)] = p.leader_id
        out: dict[str, list[TopicPartition]] = {}
        for tp in tps:
            if tp not in leaders:
                errors.raise_for(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp.topic}-{tp.partition} does not exist"
                )
            if leaders[tp] in addresses:
                out.setdefault(addresses[leaders[tp]], []).append(tp)
        return out

    def _list_offsets_at(
        self, address: str, tps: list[TopicPartition], spec: str | int, timeout_s: float
    ) -> dict[TopicPartition, int]:
        request = broker_pb2.ListOffsetsRequest(isolation_level=broker_pb2.READ_COMMITTED)
        for topic, ps in _by_topic(tps).items():
            t = request.topics.add(name=topic)
            for p in ps:
                if isinstance(spec, str):
                    t.partitions.add(partition=p, spec=OFFSET_SPECS[spec])
                else:
                    t.partitions.add(partition=p, spec=broker_pb2.TIMESTAMP, timestamp_ms=int(spec))
        response = self._connections.stub(address).ListOffsets(request, timeout=timeout_s)
        out: dict[TopicPartition, int] = {}
        latest: list[TopicPartition] = []
        for t in response.topics:
            for p in t.partitions:
                if errors.is_retriable(p.error.code):
                    continue  # leader moved: asked again after a metadata refresh
                errors.raise_for(p.error.code, f"{t.name}-{p.partition}: {p.error.message}")
                tp = TopicPartition(t.name, p.partition)
                if p.offset == NO_OFFSET:
                    latest.append(tp)  # no record at or after the timestamp
                else:
                    out[tp] = p.offset
        if latest:
            out.update(self._list_offsets_at(address, latest, "latest", timeout_s))
        return out


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(set(tps), key=tp_key):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out
