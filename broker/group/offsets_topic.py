"""FindCoordinator's part of the group coordinator on a data broker (Kafka's
``KafkaApis.handleFindCoordinatorRequest`` with ``GroupCoordinator.partitionFor``): the group's offsets
partition is ``partition_for(group)``, and its leader coordinates the group.

``__consumer_offsets`` is created on first use through the controllers (``offsets.topic.num.partitions``,
``offsets.topic.replication.factor`` or min(3, live brokers), ``cleanup.policy=compact``,
``segment.bytes`` = ``offsets.topic.segment.bytes`` so segments roll and get compacted); the answer
waits up to ``TOPIC_WAIT_S`` for every partition to have a leader, else COORDINATOR_NOT_AVAILABLE
(retriable). Runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from broker.group.driver import GroupDriver
from broker.group.metadata import OFFSETS_TOPIC, partition_for
from broker.group.requests import OK, GroupError, error
from proto import admin_pb2
from proto.errors import ErrorCode
from proto.kafka_types import NO_LEADER

TOPIC_WAIT_S = 3.0  # how long FindCoordinator waits for a just-created offsets topic to get leaders
TOPIC_POLL_S = 0.05
COMPACT = {"cleanup.policy": "compact"}

CreateTopics = Callable[[str, Any], Awaitable[Any]]  # (admin method, request) -> response


@dataclasses.dataclass(frozen=True, slots=True)
class Coordinator:
    """FindCoordinator's answer for one group: its coordinator's broker id and offsets partition, or
    an error (then ``node_id`` and ``partition`` are -1)."""

    error: GroupError
    node_id: int = -1
    partition: int = -1


class OffsetsTopic:
    """FindCoordinator's part: creates ``__consumer_offsets`` on first use and names the leader of the
    group's offsets partition."""

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

    async def find_coordinator(self, group_id: str) -> Coordinator:
        if not group_id:
            return Coordinator(error(ErrorCode.INVALID_GROUP_ID, "the group id (key) must not be empty"))
        if self.driver.manager.image.topic_by_name(OFFSETS_TOPIC) is None:
            problem = await self._create_offsets_topic()
            if problem is not None:
                return Coordinator(error(ErrorCode.COORDINATOR_NOT_AVAILABLE, problem))
        topic = self.driver.manager.image.topic_by_name(OFFSETS_TOPIC)
        assert topic is not None
        partition = partition_for(group_id, len(topic.partitions))
        leader = topic.partitions[partition].leader
        if leader == NO_LEADER:
            return Coordinator(
                error(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"{OFFSETS_TOPIC}-{partition} has no leader now; retry",
                )
            )
        return Coordinator(OK, leader, partition)

    async def _create_offsets_topic(self) -> str | None:
        """Create ``__consumer_offsets`` (an existing one is fine), then wait until every partition has
        a leader in this broker's metadata. Returns a problem to report, or None."""
        image = self.driver.manager.image
        replication = self.replication_factor
        if replication < 0:
            replication = max(1, min(3, len(image.usable_brokers())))
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
            return f"creating {OFFSETS_TOPIC} failed: {ErrorCode(code).name} {message}; retry"
        deadline = asyncio.get_running_loop().time() + TOPIC_WAIT_S
        while asyncio.get_running_loop().time() < deadline:
            topic = self.driver.manager.image.topic_by_name(OFFSETS_TOPIC)
            if topic is not None and all(p.leader != NO_LEADER for p in topic.partitions.values()):
                return None
            await asyncio.sleep(TOPIC_POLL_S)
        return f"{OFFSETS_TOPIC} is being created; retry"
