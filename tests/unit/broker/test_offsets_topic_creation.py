"""FindCoordinator (``broker.group.offsets_topic``) creates
``__consumer_offsets`` as Kafka does: compacted, with ``offsets.topic.num.partitions`` partitions,
``offsets.topic.replication.factor`` (or min(3, live brokers)) replicas and ``segment.bytes =
offsets.topic.segment.bytes`` — small segments, because the cleaner never compacts the active segment
and a 1 GiB default segment would almost never roll."""

from __future__ import annotations

import argparse
import asyncio
from types import SimpleNamespace

import pytest

from broker.config import BrokerConfigError, BrokerSettings, add_arguments, config_from
from broker.group.offsets_topic import OffsetsTopic
from proto import admin_pb2, common_pb2
from proto.errors import ErrorCode


def settings_for(*overrides: str) -> BrokerSettings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = ["--node-id", "101", "--listen", "127.0.0.1:9092", "--controllers", "127.0.0.1:1"]
    argv += ["--data-dir", "d"]
    for item in overrides:
        argv += ["--override", item]
    return config_from(parser.parse_args(argv)).settings


class FakeImage:
    def __init__(self, brokers: int) -> None:
        self.brokers = brokers

    def topic_by_name(self, name: str) -> None:
        return None  # never appears: FindCoordinator then answers COORDINATOR_NOT_AVAILABLE

    def usable_brokers(self) -> list[int]:
        return list(range(self.brokers))


def find_coordinator(topic_args: dict, brokers: int) -> tuple[admin_pb2.CreateTopicsRequest, object]:
    sent: list[admin_pb2.CreateTopicsRequest] = []

    async def forward_admin(method: str, request: admin_pb2.CreateTopicsRequest):
        assert method == "CreateTopics"
        sent.append(request)
        return admin_pb2.CreateTopicsResponse(error=common_pb2.Error(code=ErrorCode.NONE))

    driver = SimpleNamespace(core=None, manager=SimpleNamespace(image=FakeImage(brokers)))
    offsets_topic = OffsetsTopic(driver, forward_admin, **topic_args)  # type: ignore[arg-type]

    async def first_lookup() -> object:
        response = offsets_topic.find_coordinator("billing")  # answers at once; the creation runs on
        deadline = asyncio.get_running_loop().time() + 10.0  # a bound for a loaded machine, not a wait
        while not sent:
            assert asyncio.get_running_loop().time() < deadline, "no CreateTopics within 10 s"
            await asyncio.sleep(0.001)
        await offsets_topic.stop()  # the topic never shows up in FakeImage: stop waiting for it
        return response

    response = asyncio.run(first_lookup())
    (create,) = sent
    return create, response


@pytest.mark.parametrize(
    ("flags", "brokers", "partitions", "replicas", "segment_bytes"),
    [
        pytest.param([], 5, 10, 3, "104857600", id="defaults-rf-capped-at-3"),
        pytest.param([], 2, 10, 2, "104857600", id="defaults-rf-at-most-live-brokers"),
        pytest.param(["offsets.topic.num.partitions=4", "offsets.topic.replication.factor=1",
                      "offsets.topic.segment.bytes=1048576"], 3, 4, 1, "1048576", id="settings"),
    ],
)  # fmt: skip
def test_offsets_topic_is_created_compacted_with_small_segments(flags, brokers, partitions, replicas,
                                                                 segment_bytes) -> None:  # fmt: skip
    settings = settings_for(*flags)
    create, response = find_coordinator(
        {
            "num_partitions": settings.offsets_topic_num_partitions,
            "replication_factor": settings.offsets_topic_replication_factor,
            "segment_bytes": settings.offsets_topic_segment_bytes,
        },
        brokers,
    )
    (topic,) = create.topics
    assert (topic.name, topic.num_partitions, topic.replication_factor) == ("__consumer_offsets", partitions,
                                                                            replicas)  # fmt: skip
    assert dict(topic.configs) == {"cleanup.policy": "compact", "segment.bytes": segment_bytes}
    assert response.error.code == ErrorCode.COORDINATOR_NOT_AVAILABLE  # still being created: retriable


def test_a_too_small_offsets_segment_is_refused() -> None:
    with pytest.raises(BrokerConfigError, match=r"offsets\.topic\.segment\.bytes"):
        settings_for("offsets.topic.segment.bytes=10")
