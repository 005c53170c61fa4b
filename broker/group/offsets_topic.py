"""FindCoordinator's part of the group coordinator on a data broker (Kafka's
``KafkaApis.getCoordinator`` with ``GroupCoordinator.partitionFor``): the group's offsets partition is
``partition_for(group)``, and its leader coordinates the group.

A lookup never waits. While ``__consumer_offsets`` is missing from this broker's metadata, it starts
the topic's creation through the controllers and answers COORDINATOR_NOT_AVAILABLE (retriable: every
client looks the coordinator up again after its backoff), as Kafka does through its
``AutoTopicCreationManager``; so does a lookup whose offsets partition has no leader yet. A client
that is closed while it looks the coordinator up (Ctrl-C in a console consumer) then stops at once
instead of waiting for the topic's creation and first elections.

The creation (``offsets.topic.num.partitions``, ``offsets.topic.replication.factor`` or min(3, live
brokers), ``cleanup.policy=compact``, ``segment.bytes`` = ``offsets.topic.segment.bytes`` so segments
roll and get compacted) runs as one task at a time: lookups that arrive while it runs do not start
another (Kafka's in-flight set). The task lasts until the topic is in this broker's metadata (at
most ``VISIBLE_WAIT_S``); a failed creation is remembered, said in the answers and the log, and the
next lookup starts a new one. Runs on the broker's event loop; ``stop`` cancels the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from broker.group.driver import GroupDriver
from broker.group.metadata import OFFSETS_TOPIC, partition_for
from proto import admin_pb2
from proto.errors import OK, ApiError, ErrorCode
from proto.kafka_types import NO_LEADER
from proto.runtime.logfmt import log_event

log = logging.getLogger(__name__)

# How long a creation stays in flight after the controller accepted it, waiting for the topic to reach
# this broker's metadata (normally milliseconds): lookups meanwhile start no second CreateTopics.
VISIBLE_WAIT_S = 10.0
VISIBLE_POLL_S = 0.05
COMPACT = {"cleanup.policy": "compact"}
BEING_CREATED = f"{OFFSETS_TOPIC} (where groups keep their offsets) is being created on first use; retry"

CreateTopics = Callable[[str, Any], Awaitable[Any]]  # (admin method, request) -> response


@dataclasses.dataclass(frozen=True, slots=True)
class Coordinator:
    """FindCoordinator's answer for one group: its coordinator's broker id and offsets partition, or
    an error (then ``node_id`` and ``partition`` are -1)."""

    error: ApiError
    node_id: int = -1
    partition: int = -1


class OffsetsTopic:
    """FindCoordinator's part: starts creating ``__consumer_offsets`` on first use and names the leader
    of the group's offsets partition."""

    def __init__(
        self,
        driver: GroupDriver,
        forward_admin: CreateTopics,
        num_partitions: int,
        replication_factor: int,
        segment_bytes: int = 104_857_600,
    ) -> None:
        self.driver = driver
        self.forward_admin = forward_admin
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.topic_configs = {**COMPACT, "segment.bytes": str(segment_bytes)}
        self.creation: asyncio.Task[None] | None = None  # the creation in flight
        self.creations_started = 0
        self.last_failure: str | None = None  # why the last creation failed, until one succeeds

    def find_coordinator(self, group_id: str) -> Coordinator:
        """The group's coordinator now, or why there is none; never waits."""
        if not group_id:
            return Coordinator(ApiError(ErrorCode.INVALID_GROUP_ID, "the group id (key) must not be empty"))
        topic = self.driver.manager.image.topic_by_name(OFFSETS_TOPIC)
        if topic is None:
            return Coordinator(ApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE, self._maybe_start_creation()))
        partition = partition_for(group_id, len(topic.partitions))
        leader = topic.partitions[partition].leader
        if leader == NO_LEADER:
            return Coordinator(
                ApiError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"{OFFSETS_TOPIC}-{partition} (this group's coordinator partition) has no leader "
                    "yet; retry",
                )
            )
        return Coordinator(OK, leader, partition)

    def _maybe_start_creation(self) -> str:
        """Start the creation unless one is in flight; the answer's message."""
        if self.creation is None:
            self.creations_started += 1
            self.creation = asyncio.get_running_loop().create_task(self._create())
        if self.last_failure is not None:
            return (f"creating {OFFSETS_TOPIC} (where groups keep their offsets) failed last time "
                    f"({self.last_failure}); trying again; retry")  # fmt: skip
        return BEING_CREATED

    async def _create(self) -> None:
        previous = self.last_failure
        try:
            self.last_failure = await self._create_and_wait()
        except Exception as exc:  # the controller call failed (an operating failure): said, and retried
            self.last_failure = f"{type(exc).__name__}: {exc}"
        finally:
            self.creation = None
        if self.last_failure is not None and self.last_failure != previous:  # once per new problem
            log_event(log, logging.WARNING, "offsets_topic_creation_failed", topic=OFFSETS_TOPIC,
                      problem=self.last_failure)  # fmt: skip

    async def _create_and_wait(self) -> str | None:
        """Create ``__consumer_offsets`` (an existing one is fine), then wait until this broker's
        metadata has it. Returns the problem to report, or None."""
        image = self.driver.manager.image
        replication = self.replication_factor
        if replication < 0:
            replication = max(1, min(3, len(image.usable_brokers())))
        log_event(log, logging.INFO, "offsets_topic_creating", topic=OFFSETS_TOPIC,
                  partitions=self.num_partitions, replication_factor=replication)  # fmt: skip
        request = admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreateTopicsRequest.CreatableTopic(
                    name=OFFSETS_TOPIC,
                    num_partitions=self.num_partitions,
                    replication_factor=replication,
                    configs=self.topic_configs,
                )
            ]
        )
        response = await self.forward_admin("CreateTopics", request)
        code = response.error.code or (response.topics[0].error.code if response.topics else 0)
        if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            message = response.error.message or (response.topics[0].error.message if response.topics else "")
            return f"{ErrorCode(code).name}: {message}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + VISIBLE_WAIT_S
        while loop.time() < deadline:
            if self.driver.manager.image.topic_by_name(OFFSETS_TOPIC) is not None:
                break
            await asyncio.sleep(VISIBLE_POLL_S)
        return None  # not visible yet after the wait: the next lookup asks the controller again

    async def stop(self) -> None:
        """Cancel a creation in flight (the broker stops)."""
        creation = self.creation
        if creation is not None:
            creation.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await creation
