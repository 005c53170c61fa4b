"""The consumer's group driver: GroupService calls, coordinator discovery, the heartbeat thread.

It drives ``pykraft.consumer_coordinator.ConsumerCoordinator`` (the state machine) and does its I/O:

- **FindCoordinator** on any broker the consumer knows (metadata brokers, then bootstrap); retried
  with ``retry_backoff_ms`` while COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS or no
  broker answers. NOT_COORDINATOR (or an unreachable coordinator) on any later call finds it again.
- **Join/Sync**: the consumer's thread, inside ``poll`` (``ensure_active_group``), revokes
  (callbacks) and sends JoinGroup (held by the coordinator until the group forms: its timeout is the
  rebalance timeout plus the request timeout). The answers are handled by the heartbeat thread, as
  Kafka's heartbeat thread handles them between polls (KIP-62): the JoinGroup answer starts the
  heartbeats in the new generation, the leader assigns (partition counts from a Metadata call), the
  SyncGroup is sent, and its answer makes the member stable. What the assignment changed is queued
  for the consumer's thread, whose next ``poll`` calls ``on_revoke`` / ``on_assign``. So a
  cooperative member that goes on processing records during a rebalance is not expired by the
  session timeout. The consumer protocol is encoded as ``ConsumerProtocolSubscription`` /
  ``ConsumerProtocolAssignment`` (proto/group.proto).
- **Heartbeats** from a daemon thread every ``heartbeat_interval_ms`` from the JoinGroup answer on;
  the same thread enforces ``max_poll_interval_ms`` (leaves the group, like Kafka's heartbeat
  thread) and the session timeout (coordinator presumed gone).
- **OffsetCommit / OffsetFetch** on the coordinator, sync (retried until a deadline on coordinator
  errors) and async (a ``concurrent.futures.Future``).

Thread-safety: one lock guards the state machine, the call in flight and the queued changes; no
network call is made while holding it. The consumer thread and the heartbeat thread (and gRPC
callback threads for async commits and answered Join/Sync calls) share it. Hooks called on the
heartbeat thread (``partition_counts``, ``broker_addresses``) must not touch the consumer's
unguarded state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, NamedTuple, Protocol

import grpc

from proto import errors, group_pb2
from proto.errors import ErrorCode
from pykraft.assignors import Assignment, Subscription, tp_key
from pykraft.connection import Connections, describe_rpc_error
from pykraft.consumer_coordinator import (
    COORDINATOR_ERRORS,
    PROTOCOL_TYPE,
    AssignmentChange,
    CommitFailedError,
    ConsumerCoordinator,
    Generation,
    GroupConfig,
    JoinResult,
    MemberState,
    Next,
)
from pykraft.types import TopicPartition

log = logging.getLogger(__name__)

NO_OFFSET = -1
NO_EPOCH = -1
FIND_COORDINATOR_TIMEOUT_S = 5.0


class OffsetAndEpoch(NamedTuple):
    """A committed offset and the leader epoch of the record before it (NO_EPOCH when unknown)."""

    offset: int
    leader_epoch: int


# ---- the consumer protocol (proto/group.proto) ----------------------------------------------------


def _by_topic(tps: Iterable[TopicPartition]) -> list[group_pb2.TopicPartitions]:
    topics: dict[str, list[int]] = {}
    for tp in sorted(tps, key=tp_key):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return [group_pb2.TopicPartitions(topic=t, partitions=ps) for t, ps in topics.items()]


def _flatten(items: Iterable[group_pb2.TopicPartitions]) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(item.topic, p) for item in items for p in item.partitions)


def encode_subscription(subscription: Subscription) -> bytes:
    return group_pb2.ConsumerProtocolSubscription(
        topics=subscription.topics,
        user_data=subscription.user_data,
        owned_partitions=_by_topic(subscription.owned_partitions),
        generation_id=subscription.generation_id,
    ).SerializeToString()


def decode_subscription(data: bytes, group_instance_id: str | None) -> Subscription:
    message = group_pb2.ConsumerProtocolSubscription.FromString(data)
    return Subscription(
        tuple(message.topics), _flatten(message.owned_partitions), message.generation_id,
        group_instance_id, message.user_data,
    )  # fmt: skip


def encode_assignment(assignment: Assignment) -> bytes:
    return group_pb2.ConsumerProtocolAssignment(
        assigned_partitions=_by_topic(assignment.partitions),
        user_data=assignment.user_data,
        error=assignment.error,
    ).SerializeToString()


def decode_assignment(data: bytes) -> Assignment:
    message = group_pb2.ConsumerProtocolAssignment.FromString(data)
    return Assignment(_flatten(message.assigned_partitions), message.error, message.user_data)


# ---- the driver ------------------------------------------------------------------------------------


class GroupHooks(Protocol):
    """What the consumer provides to the driver."""

    def broker_addresses(self) -> list[str]: ...

    def partition_counts(self, topics: set[str]) -> dict[str, int]:
        """Called on the heartbeat thread; raises a KafkaError when no broker answers."""

    def on_join_prepare(self, change: AssignmentChange) -> None:
        """Before a rebalance: commit (auto-commit), then revoke ``change`` (Kafka's onJoinPrepare)."""

    def on_partitions_revoked(self, change: AssignmentChange) -> None: ...

    def on_partitions_assigned(self, added: tuple[TopicPartition, ...]) -> None: ...


class _Pending(NamedTuple):
    """A JoinGroup or SyncGroup in flight and what to do with its answer (on the heartbeat thread)."""

    api: str
    call: grpc.Future
    on_done: Callable[[Any], Next]


class GroupClient:
    """See the module docstring."""

    def __init__(
        self,
        config: GroupConfig,
        connections: Connections,
        hooks: GroupHooks,
        *,
        request_timeout_ms: int,
    ) -> None:
        self.config = config
        self.lock = threading.RLock()
        self.core = ConsumerCoordinator(config, _now_ms())
        self._connections = connections
        self._hooks = hooks
        self._request_timeout_s = request_timeout_ms / 1000
        self._wake = threading.Condition(self.lock)
        self._closed = False
        # Guarded by the lock: the JoinGroup/SyncGroup in flight (sent by the consumer thread or, for
        # SyncGroup, the heartbeat thread; answered on the heartbeat thread, ``_answering`` meanwhile),
        # the assignment changes the consumer thread's next poll applies, and when a retriable
        # failure lets the consumer thread rejoin.
        self._pending: _Pending | None = None
        self._answering = False
        self._changes: list[AssignmentChange] = []
        self._rejoin_after_ms = 0
        self._failed: Exception | None = None  # raised by the heartbeat thread: the next poll raises it
        self._heartbeat_thread = threading.Thread(
            target=self._heartbeat_loop, name=f"pykraft-heartbeat-{config.group_id}", daemon=True
        )
        self._heartbeat_thread.start()

    # ---- coordinator discovery ----------------------------------------------------------------------

    def ensure_coordinator(self, deadline_ms: int) -> bool:
        """Find the coordinator (True), or give up at ``deadline_ms`` (False)."""
        while True:
            with self.lock:
                if self.core.coordinator is not None:
                    return True
            if self._find_coordinator_once():
                return True
            if _now_ms() + self.config.retry_backoff_ms >= deadline_ms or self._closed:
                return False
            time.sleep(self.config.retry_backoff_ms / 1000)

    def _find_coordinator_once(self) -> bool:
        request = group_pb2.FindCoordinatorRequest(key=self.config.group_id)
        for address in dict.fromkeys(self._hooks.broker_addresses()):
            try:
                response = self._connections.group_stub(address).FindCoordinator(
                    request, timeout=min(self._request_timeout_s, FIND_COORDINATOR_TIMEOUT_S)
                )
            except grpc.RpcError as exc:
                log.debug("FindCoordinator on %s failed: %s", address, describe_rpc_error(exc))
                continue
            code = response.error.code
            if code == ErrorCode.NONE:
                with self.lock:
                    self.core.on_coordinator_found(
                        response.node_id, f"{response.host}:{response.port}", _now_ms()
                    )
                log.info("group %s: coordinator is broker %d", self.config.group_id, response.node_id)
                return True
            if not errors.is_retriable(code):
                raise errors.error_for(
                    code, f"FindCoordinator({self.config.group_id!r}): {response.error.message}"
                )
            log.debug("FindCoordinator on %s: %s", address, ErrorCode(code).name)
            return False  # retriable (not available yet / loading): back off
        return False

    def _find_coordinator_quietly(self) -> None:
        """The heartbeat thread's lookup: errors are logged, the next heartbeat round retries."""
        try:
            self._find_coordinator_once()
        except errors.KafkaError as exc:
            log.info("group %s: FindCoordinator: %s", self.config.group_id, exc)

    def _coordinator_stub(self) -> Any:
        with self.lock:
            coordinator = self.core.coordinator
        if coordinator is None:
            return None
        return self._connections.group_stub(coordinator[1])

    # ---- joining ------------------------------------------------------------------------------------

    def ensure_active_group(self, deadline_ms: int) -> bool:
        """Join (or rejoin) until the member is stable with a fresh assignment whose callbacks ran
        (True), or until ``deadline_ms`` (False). A JoinGroup or SyncGroup still unanswered at the
        deadline stays in flight (the heartbeat thread handles its answer), so ``poll(timeout)``
        returns in time and a cooperative member keeps fetching its partitions meanwhile."""
        while True:
            with self.lock:
                if self.core.fatal is not None:
                    raise self.core.fatal
                if self._failed is not None:
                    failed, self._failed = self._failed, None
                    raise failed
                changes, self._changes = self._changes, []
                busy = self._pending is not None
                done = not busy and not self.core.rejoin_needed
                rejoin_after_ms = self._rejoin_after_ms
            if changes:
                self._apply_changes(changes)
                continue  # a callback may have changed the group (commit fenced, unsubscribe...)
            if done:
                return True
            if self._closed:
                return False
            if busy:
                if not self._wait_answered(deadline_ms):
                    return False
            elif _now_ms() < rejoin_after_ms:
                if rejoin_after_ms >= deadline_ms:
                    return False
                time.sleep((rejoin_after_ms - _now_ms()) / 1000)
            elif not self.ensure_coordinator(deadline_ms):
                return False
            else:
                with self.lock:
                    change = self.core.prepare_join()
                if change is not None:
                    self._hooks.on_join_prepare(change)
                self._after_step(self._send_join())

    def _wait_answered(self, deadline_ms: int) -> bool:
        """Wait until the call in flight is answered and handled (or changes are queued); False at
        ``deadline_ms``."""
        with self.lock:
            return self._wake.wait_for(
                lambda: (
                    self._pending is None
                    or bool(self._changes)
                    or self._closed
                    or self.core.fatal is not None
                    or self._failed is not None
                ),
                max(0, deadline_ms - _now_ms()) / 1000,
            )

    def _apply_changes(self, changes: list[AssignmentChange]) -> None:
        """The callbacks of the assignments the heartbeat thread applied (consumer thread)."""
        for change in changes:
            if change.revoked or change.lost:
                self._hooks.on_partitions_revoked(change)
            self._hooks.on_partitions_assigned(change.added)

    def _after_step(self, step: Next) -> None:
        """What a handled answer asks of the consumer thread's next rejoin (under the lock or not)."""
        with self.lock:
            if step is Next.RETRY_BACKOFF or step is Next.FIND_COORDINATOR:
                self._rejoin_after_ms = _now_ms() + self.config.retry_backoff_ms
            self._wake.notify_all()

    def _start_call(self, api: str, call: grpc.Future, on_done: Callable[[Any], Next]) -> None:
        with self.lock:
            assert self._pending is None or self._answering, f"{api} while {self._pending.api} is in flight"
            self._pending = _Pending(api, call, on_done)
            if self._closed:
                call.cancel()
        call.add_done_callback(lambda _call: self._notify())

    def _notify(self) -> None:
        with self.lock:
            self._wake.notify_all()

    def _answer(self, pending: _Pending) -> None:
        """Handle an answered JoinGroup/SyncGroup (heartbeat thread, without the lock)."""
        try:
            step = Next.CONTINUE if pending.call.cancelled() else pending.on_done(pending.call.result())
        except grpc.RpcError as exc:
            step = self._on_rpc_error(pending.api, exc)
        except Exception as exc:  # a hook or the assignor failed: the consumer thread raises it (Kafka)
            log.warning("group %s: handling the %s answer failed: %r", self.config.group_id, pending.api, exc)
            with self.lock:
                self._failed = self._failed or exc
            step = Next.FATAL
        finally:
            with self.lock:
                self._answering = False
                if self._pending is pending:
                    self._pending = None
        self._after_step(step)

    def _send_join(self) -> Next:
        stub = self._coordinator_stub()
        if stub is None:
            return Next.FIND_COORDINATOR
        with self.lock:
            join = self.core.join_request()
        request = group_pb2.JoinGroupRequest(
            group_id=self.config.group_id,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.max_poll_interval_ms,
            member_id=join.member_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=[
                group_pb2.JoinGroupProtocol(name=name, metadata=encode_subscription(sub))
                for name, sub in join.protocols
            ],
            client_id=self.config.client_id,
            reason=join.reason,
        )
        if self.config.group_instance_id is not None:
            request.group_instance_id = self.config.group_instance_id
        log.info("group %s: joining (%s)", self.config.group_id, join.reason)
        # The coordinator holds a JoinGroup until the group forms: up to the rebalance timeout.
        timeout_s = self.config.max_poll_interval_ms / 1000 + self._request_timeout_s
        call = stub.JoinGroup.future(request, timeout=timeout_s)
        self._start_call("JoinGroup", call, lambda response: self._on_join_response(stub, response))
        return Next.CONTINUE

    def _on_join_response(self, stub: Any, response: group_pb2.JoinGroupResponse) -> Next:
        result = JoinResult(
            error=response.error.code,
            message=response.error.message,
            generation_id=response.generation_id,
            member_id=response.member_id,
            leader=response.leader,
            protocol_name=response.protocol_name,
            skip_assignment=response.skip_assignment,
            members={
                m.member_id: decode_subscription(
                    m.metadata, m.group_instance_id if m.HasField("group_instance_id") else None
                )
                for m in response.members
            },
        )
        with self.lock:
            step = self.core.on_join_response(result, _now_ms())
            leader = self.core.is_leader() and not result.skip_assignment
            topics = self.core.leader_topics() if leader else set(self.core.subscription)
            self._wake.notify_all()  # heartbeats start now
        if step.next is not Next.CONTINUE:
            return step.next
        try:
            counts = self._hooks.partition_counts(topics)
        except errors.KafkaError as exc:
            log.info("group %s: partition counts for the assignment: %s", self.config.group_id, exc)
            with self.lock:
                return self.core.on_call_failed("Metadata").next
        with self.lock:
            if self.core.state is not MemberState.COMPLETING_REBALANCE or (
                self.core.generation.generation_id != result.generation_id
            ):
                return Next.RETRY_NOW  # reset meanwhile (heartbeat error, poll timeout, close)
            assignments = self.core.compute_assignment(counts) if leader else {}
        request = group_pb2.SyncGroupRequest(
            group_id=self.config.group_id,
            generation_id=result.generation_id,
            member_id=result.member_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=result.protocol_name,
            assignments=[
                group_pb2.SyncGroupAssignment(member_id=m, assignment=encode_assignment(a))
                for m, a in assignments.items()
            ],
        )
        if self.config.group_instance_id is not None:
            request.group_instance_id = self.config.group_instance_id
        timeout_s = self.config.max_poll_interval_ms / 1000 + self._request_timeout_s
        call = stub.SyncGroup.future(request, timeout=timeout_s)
        self._start_call(
            "SyncGroup", call, lambda response: self._on_sync_response(response, result.generation_id, counts)
        )
        return Next.CONTINUE

    def _on_sync_response(
        self, response: group_pb2.SyncGroupResponse, generation_id: int, counts: Mapping[str, int]
    ) -> Next:
        code = response.error.code
        assignment = decode_assignment(response.assignment) if code == ErrorCode.NONE else None
        with self.lock:
            step, change = self.core.on_sync_response(
                code, response.error.message, assignment, counts, _now_ms()
            )
            if step.next is Next.CONTINUE:
                self._changes.append(change)  # the consumer thread's next poll runs the callbacks
            self._wake.notify_all()
        if step.next is Next.CONTINUE:
            log.info(
                "group %s: generation %d, assigned %s", self.config.group_id, generation_id,
                [f"{tp.topic}-{tp.partition}" for tp in assignment.partitions] if assignment else [],
            )  # fmt: skip
        return step.next

    def _on_rpc_error(self, api: str, exc: grpc.RpcError) -> Next:
        log.info("group %s: %s failed: %s", self.config.group_id, api, describe_rpc_error(exc))
        with self.lock:
            return self.core.on_call_failed(api).next

    # ---- heartbeats ---------------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while True:
            with self.lock:
                if self._closed:
                    return
                now = _now_ms()
                action = self._heartbeat_action(now)
                if action is None:
                    wait_ms = max(1, min(self.core.next_heartbeat_ms - now, self.config.retry_backoff_ms * 5))
                    self._wake.wait(wait_ms / 1000)
                    continue
            action()

    def _heartbeat_action(self, now: int) -> Callable[[], None] | None:
        core = self.core
        pending = self._pending
        if pending is not None and not self._answering and pending.call.done():
            self._answering = True
            return lambda: self._answer(pending)
        if core.poll_timeout_expired(now):
            log.warning(
                "group %s: poll() not called for more than max.poll.interval.ms=%d; leaving the group",
                self.config.group_id, self.config.max_poll_interval_ms,
            )  # fmt: skip
            coordinator = core.coordinator
            member_id = core.leave_group("consumer poll timeout has expired")
            if member_id is None or coordinator is None:
                return None
            return lambda: self._send_leave(coordinator[1], member_id, "consumer poll timeout has expired")
        if core.session_expired(now):
            log.info(
                "group %s: no heartbeat answer for a session; finding the coordinator", self.config.group_id
            )
            core.mark_coordinator_unknown()
            return None
        if core.coordinator_lookup_due(now):
            return self._find_coordinator_quietly
        if not core.heartbeat_due(now):
            return None
        generation = core.on_heartbeat_sent(now)
        assert core.coordinator is not None, "heartbeat_due implies a coordinator"
        address = core.coordinator[1]
        return lambda: self._send_heartbeat(address, generation)

    def _send_heartbeat(self, address: str, generation: Generation) -> None:
        request = group_pb2.HeartbeatRequest(
            group_id=self.config.group_id,
            generation_id=generation.generation_id,
            member_id=generation.member_id,
        )
        if self.config.group_instance_id is not None:
            request.group_instance_id = self.config.group_instance_id
        try:
            response = self._connections.group_stub(address).Heartbeat(
                request, timeout=self._request_timeout_s
            )
            code, message = response.error.code, response.error.message
        except (grpc.RpcError, errors.KafkaError) as exc:
            code, message = ErrorCode.NETWORK_EXCEPTION, str(exc)
        with self.lock:
            step = self.core.on_heartbeat_response(generation, code, message, _now_ms())
        if code != ErrorCode.NONE:
            log.info(
                "group %s: heartbeat: %s (%s) -> %s",
                self.config.group_id,
                ErrorCode(code).name,
                message,
                step.next.value,
            )

    def _send_leave(self, address: str, member_id: str, reason: str) -> None:
        request = group_pb2.LeaveGroupRequest(
            group_id=self.config.group_id,
            members=[group_pb2.MemberIdentity(member_id=member_id, reason=reason)],
        )
        try:
            response = self._connections.group_stub(address).LeaveGroup(
                request, timeout=self._request_timeout_s
            )
        except (grpc.RpcError, errors.KafkaError) as exc:
            log.info("group %s: LeaveGroup failed: %s", self.config.group_id, exc)
            return
        if response.error.code != ErrorCode.NONE:
            log.info("group %s: LeaveGroup: %s", self.config.group_id, ErrorCode(response.error.code).name)

    def unsubscribe(self) -> None:
        """Out of the subscription: assignments not yet applied by a poll are dropped (the consumer
        revokes what it has)."""
        with self.lock:
            self._changes = []
            self.core.unsubscribe()

    def leave_group(self, reason: str) -> None:
        with self.lock:
            coordinator = self.core.coordinator
            member_id = self.core.leave_group(reason)
        if member_id is not None and coordinator is not None:
            self._send_leave(coordinator[1], member_id, reason)

    # ---- offsets ------------------------------------------------------------------------------------

    def _offset_commit_request(
        self,
        offsets: Mapping[TopicPartition, int],
        generation: Generation,
        epochs: Mapping[TopicPartition, int],
    ) -> group_pb2.OffsetCommitRequest:
        topics: dict[str, list[group_pb2.OffsetCommitPartition]] = {}
        for tp, offset in sorted(offsets.items(), key=lambda item: tp_key(item[0])):
            topics.setdefault(tp.topic, []).append(
                group_pb2.OffsetCommitPartition(
                    partition=tp.partition,
                    committed_offset=offset,
                    committed_leader_epoch=epochs.get(tp, NO_EPOCH),
                )
            )
        request = group_pb2.OffsetCommitRequest(
            group_id=self.config.group_id,
            generation_id=generation.generation_id,
            member_id=generation.member_id,
            topics=[group_pb2.OffsetCommitTopic(name=t, partitions=ps) for t, ps in topics.items()],
        )
        if self.config.group_instance_id is not None:
            request.group_instance_id = self.config.group_instance_id
        return request

    def _commit_generation(self) -> Generation:
        with self.lock:
            generation = self.core.commit_generation()
        if isinstance(generation, CommitFailedError):
            raise generation
        return generation

    def _commit_result(self, generation: Generation, response: group_pb2.OffsetCommitResponse) -> int:
        """Raise CommitFailedError for fencing, another KafkaError for a fatal partition error;
        return a retriable code (coordinator moved...) or NONE."""
        codes = [(response.error.code, response.error.message, "")] + [
            (p.error.code, p.error.message, f"{t.name}-{p.partition}")
            for t in response.topics
            for p in t.partitions
        ]
        retriable = ErrorCode.NONE
        for code, message, where in codes:
            if code == ErrorCode.NONE:
                continue
            with self.lock:
                failed = self.core.on_commit_error(generation, code, message)
            if failed is not None:
                raise failed
            if errors.is_retriable(code):
                retriable = code
                continue
            raise errors.error_for(code, f"OffsetCommit {where} in group {self.config.group_id!r}: {message}")
        return retriable

    def _with_coordinator(self, api: str, attempt: Callable[[Any], tuple[Any, str]], deadline_ms: int) -> Any:
        """``attempt(stub)`` on the coordinator until it returns a result (not None), finding the
        coordinator again after a failed call, backing off between tries; REQUEST_TIMED_OUT naming the
        last failure at ``deadline_ms``."""
        last = "no attempt"
        while True:
            stub = self._coordinator_stub() if self.ensure_coordinator(deadline_ms) else None
            if stub is not None:
                try:
                    result, last = attempt(stub)
                    if result is not None:
                        return result
                except grpc.RpcError as exc:
                    last = describe_rpc_error(exc)
                    with self.lock:
                        self.core.mark_coordinator_unknown()
            if _now_ms() + self.config.retry_backoff_ms >= deadline_ms:
                raise errors.error_for(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"{api} for group {self.config.group_id!r} did not succeed in time (last: {last})",
                )
            time.sleep(self.config.retry_backoff_ms / 1000)

    def commit_sync(
        self,
        offsets: Mapping[TopicPartition, int],
        deadline_ms: int,
        epochs: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """Commit ``offsets`` (with the leader ``epochs`` of the records before them, where known)."""
        if not offsets:
            return

        def attempt(stub: Any) -> tuple[bool | None, str]:
            generation = self._commit_generation()  # raises CommitFailedError when out of the group
            request = self._offset_commit_request(offsets, generation, epochs or {})
            code = self._commit_result(
                generation, stub.OffsetCommit(request, timeout=self._request_timeout_s)
            )
            return (True, "") if code == ErrorCode.NONE else (None, ErrorCode(code).name)

        self._commit_generation()
        self._with_coordinator("OffsetCommit", attempt, deadline_ms)

    def commit_async(
        self, offsets: Mapping[TopicPartition, int], epochs: Mapping[TopicPartition, int] | None = None
    ) -> Future:
        """Send one OffsetCommit; the future resolves to the offsets, or to the error (not retried)."""
        future: Future = Future()
        try:
            generation = self._commit_generation()
            stub = self._coordinator_stub()
            if stub is None:
                raise errors.error_for(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is not known yet"
                )
        except errors.KafkaError as exc:
            future.set_exception(exc)
            return future
        if not offsets:
            future.set_result(dict(offsets))
            return future
        call = stub.OffsetCommit.future(
            self._offset_commit_request(offsets, generation, epochs or {}), timeout=self._request_timeout_s
        )

        def done(call: grpc.Future) -> None:
            try:
                response = call.result()
                code = self._commit_result(generation, response)
                if code != ErrorCode.NONE:
                    raise errors.error_for(code, f"OffsetCommit for group {self.config.group_id!r}")
                future.set_result(dict(offsets))
            except grpc.RpcError as exc:
                with self.lock:
                    self.core.mark_coordinator_unknown()
                future.set_exception(errors.error_for(ErrorCode.NETWORK_EXCEPTION, describe_rpc_error(exc)))
            except errors.KafkaError as exc:
                future.set_exception(exc)

        call.add_done_callback(done)
        return future

    def fetch_committed(
        self, partitions: Iterable[TopicPartition], deadline_ms: int
    ) -> dict[TopicPartition, OffsetAndEpoch | None]:
        """OffsetFetch: the committed offset (and leader epoch) of each partition (None when nothing is
        committed)."""
        wanted = sorted(set(partitions), key=tp_key)
        if not wanted:
            return {}
        topics: dict[str, list[int]] = {}
        for tp in wanted:
            topics.setdefault(tp.topic, []).append(tp.partition)
        request = group_pb2.OffsetFetchRequest(
            group_id=self.config.group_id,
            topics=[group_pb2.OffsetFetchTopic(name=t, partitions=ps) for t, ps in topics.items()],
        )
        return self._with_coordinator(
            "OffsetFetch",
            lambda stub: self._offset_fetch_result(
                stub.OffsetFetch(request, timeout=self._request_timeout_s), set(wanted)
            ),
            deadline_ms,
        )

    def _offset_fetch_result(
        self, response: group_pb2.OffsetFetchResponse, wanted: set[TopicPartition]
    ) -> tuple[dict[TopicPartition, OffsetAndEpoch | None] | None, str]:
        codes = [(response.error.code, response.error.message)] + [
            (p.error.code, p.error.message) for t in response.topics for p in t.partitions
        ]
        for code, message in codes:
            if code == ErrorCode.NONE:
                continue
            if code in COORDINATOR_ERRORS:
                with self.lock:
                    self.core.mark_coordinator_unknown()
            if not errors.is_retriable(code):
                raise errors.error_for(code, f"OffsetFetch for group {self.config.group_id!r}: {message}")
            return None, f"{ErrorCode(code).name} {message}"
        result: dict[TopicPartition, OffsetAndEpoch | None] = dict.fromkeys(wanted)
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition)
                if tp in wanted and p.committed_offset != NO_OFFSET:
                    result[tp] = OffsetAndEpoch(p.committed_offset, p.committed_leader_epoch)
        return result, ""

    # ---- lifecycle ----------------------------------------------------------------------------------

    def close(self) -> None:
        with self.lock:
            self._closed = True
            pending = self._pending
            self._wake.notify_all()
        if pending is not None:
            pending.call.cancel()
        self._heartbeat_thread.join(timeout=self._request_timeout_s + 1)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000
