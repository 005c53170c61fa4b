"""High watermarks of the partitions a coordinated group committed offsets for but this broker does
not host, for the consumer-lag gauges (``broker.metrics``).

Every ``interval_s`` (only while such partitions exist) one Kafka ListOffsets LATEST per leader broker
(on its Kafka listener, over one kept connection per broker: ``broker.follower.kafka_client``) asks for their
high watermarks; the answers replace ``high_watermarks`` as a whole (a partition that
moved or failed simply drops out until the next round). Hosted partitions are not asked: the
metrics read their HW from the local replica. Runs on the broker's event loop; calls are bounded by
``timeout_s`` and a failure only logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from broker.follower.kafka_client import KafkaConnection, KafkaConnectionError
from broker.group.coordinator import GroupCoordinator
from broker.replica.replica_manager import ReplicaManager
from proto.kafka import messages as m
from proto.kafka_types import CONSUMER_REPLICA_ID, LATEST_TIMESTAMP, NO_LEADER, TopicPartition
from proto.runtime.logfmt import log_event

log = logging.getLogger(__name__)

REFRESH_INTERVAL_S = 5.0
CALL_TIMEOUT_S = 2.0
LIST_OFFSETS_VERSION = 7
CLIENT_ID = "pykraft-group-lag"


def latest(partition: int) -> m.ListOffsetsRequestListOffsetsPartition:
    return m.ListOffsetsRequestListOffsetsPartition(partition_index=partition, timestamp=LATEST_TIMESTAMP)


class RemoteHighWatermarks:
    """See the module docstring."""

    def __init__(
        self,
        manager: ReplicaManager,
        core: GroupCoordinator,
        address_of: Callable[[int], tuple[str, int] | None],
        interval_s: float = REFRESH_INTERVAL_S,
        timeout_s: float = CALL_TIMEOUT_S,
    ) -> None:
        self.manager = manager
        self.core = core
        self.address_of = address_of
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.high_watermarks: dict[TopicPartition, int] = {}
        self._connections: dict[tuple[str, int], KafkaConnection] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="group-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for connection in self._connections.values():
            await connection.close()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.refresh()
            except Exception as exc:  # the gauges lose lag for a round; the broker goes on
                log_event(log, logging.WARNING, "group_lag_refresh_failed", exc_info=exc)

    def wanted(self) -> dict[int, set[tuple[str, int]]]:
        """Leader broker -> the committed partitions not hosted here that it leads."""
        image = self.manager.image
        by_leader: dict[int, set[tuple[str, int]]] = {}  # keys of the groups' committed offsets
        for offsets in self.core.group_manager.committed_offsets().values():
            for tp in offsets:
                topic = image.topic_by_name(tp[0])
                if tp in self.manager.partitions or topic is None or tp[1] not in topic.partitions:
                    continue
                leader = topic.partitions[tp[1]].leader
                if leader != NO_LEADER:
                    by_leader.setdefault(leader, set()).add(tp)
        return by_leader

    async def refresh(self) -> None:
        fresh: dict[TopicPartition, int] = {}
        for leader, tps in self.wanted().items():
            address = self.address_of(leader)
            if address is None:
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(tps):
                by_topic.setdefault(topic, []).append(partition)
            request = m.ListOffsetsRequest(
                replica_id=CONSUMER_REPLICA_ID,
                topics=[
                    m.ListOffsetsRequestListOffsetsTopic(topic, [latest(p) for p in ps])
                    for topic, ps in by_topic.items()
                ],
            )
            try:
                connection = await self._connection(address)
                response = await connection.request(request, LIST_OFFSETS_VERSION, self.timeout_s)
            except (KafkaConnectionError, TimeoutError) as exc:
                log_event(log, logging.INFO, "group_lag_list_offsets_failed", broker=leader, reason=exc)
                continue
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code == 0:
                        fresh[TopicPartition(topic.name, p.partition_index)] = p.offset
        self.high_watermarks = fresh

    async def _connection(self, address: tuple[str, int]) -> KafkaConnection:
        """The kept connection to ``address``; a new one when there is none or it failed."""
        connection = self._connections.get(address)
        if connection is None or connection.closed:
            connection = await KafkaConnection.open(*address, CLIENT_ID, self.timeout_s)
            self._connections[address] = connection
        return connection
