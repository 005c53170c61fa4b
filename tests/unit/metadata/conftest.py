"""A controller with an in-memory "commit": the tests play the Raft driver's part.

``commit(result)`` does what ``metadata.server`` does after a Raft commit: replay the result's
records as one entry at the next offset, then check the image's invariants.
"""

from __future__ import annotations

import random

import pytest

from metadata.api import BrokerHeartbeatRequest, NewTopic, RegisterBrokerRequest
from metadata.controller import ControllerConfig, ControllerResult, QuorumController
from metadata.records import Endpoint


class Harness:
    def __init__(self, config: ControllerConfig | None = None, seed: int = 7) -> None:
        self.controller = QuorumController(config or ControllerConfig(), random.Random(seed))
        self.offset = 0
        self.now_ms = 1_000
        self.log: list[tuple[tuple, int]] = []  # committed (records, offset), for replay tests

    @property
    def image(self):
        return self.controller.image

    def commit(self, result: ControllerResult):
        self.offset += 1
        self.log.append((result.records, self.offset))
        self.controller.replay(result.records, self.offset)
        self.controller.invariants()
        return result.response

    def register(self, broker_id: int, rack: str = "", unfence: bool = True) -> int:
        request = RegisterBrokerRequest(
            broker_id, f"inc-{broker_id}-{self.offset}", (Endpoint("B", "h", 1),), rack
        )
        response = self.commit(self.controller.handle_register_broker(request, self.now_ms))
        assert response.error.ok, response
        epoch = self.image.brokers[broker_id].broker_epoch
        if unfence:
            self.heartbeat(broker_id, epoch)
        return epoch

    def heartbeat(self, broker_id: int, epoch: int, **kw):
        request = BrokerHeartbeatRequest(broker_id, epoch, kw.pop("offset", self.offset), **kw)
        return self.commit(self.controller.handle_broker_heartbeat(request, self.now_ms))

    def create(self, name: str, partitions: int = 1, rf: int = 1, **kw):
        topic = NewTopic(name, partitions, rf, **kw)
        (result,) = self.commit(self.controller.handle_create_topics([topic]))
        return result

    def partition(self, name: str, index: int = 0):
        topic = self.image.topic_by_name(name)
        return topic.partitions[index]


@pytest.fixture
def harness() -> Harness:
    return Harness()


@pytest.fixture
def cluster() -> Harness:
    """Three unfenced brokers, 1..3, no racks."""
    h = Harness()
    for broker_id in (1, 2, 3):
        h.register(broker_id)
    return h


@pytest.fixture
def make_harness() -> type[Harness]:
    return Harness
