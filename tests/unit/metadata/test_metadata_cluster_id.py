"""The cluster id: written once into the metadata log by the first active controller (Kafka's format
step), carried by the image and its snapshots, validated like Kafka's ``Uuid.fromString``."""

from __future__ import annotations

import random

import pytest

from metadata.api import RegisterBrokerRequest
from metadata.controller import ControllerConfig, QuorumController
from metadata.image import MetadataImage, MetadataReplayError
from metadata.records import (
    NO_CLUSTER_ID,
    ClusterIdRecord,
    TopicRecord,
    cluster_id_problem,
    decode_batch,
    encode_batch,
)
from metadata.state_machine import MetadataStateMachine
from proto.errors import ErrorCode as Code

GIVEN = "MkU3OEVBNTcwNTJENDM2Qg"  # the example id of Kafka's quickstart
OTHER = "q1Sh-9_ISia_zwGINzRvyQ"


def controller(cluster_id: str = NO_CLUSTER_ID, seed: int = 3) -> QuorumController:
    return QuorumController(ControllerConfig(cluster_id=cluster_id), random.Random(seed))


def test_first_activation_generates_a_uuid_from_the_injected_rng() -> None:
    """No cluster.id: a random Kafka Uuid (22 url-safe base64 characters) from the seeded rng, so the
    same seed gives the same id and another seed another one."""
    result = controller(seed=3).maybe_write_cluster_id()
    assert result.response.ok and len(result.records) == 1
    (record,) = result.records
    assert isinstance(record, ClusterIdRecord)
    assert cluster_id_problem(record.cluster_id) is None, record.cluster_id
    assert controller(seed=3).maybe_write_cluster_id().records == result.records
    assert controller(seed=4).maybe_write_cluster_id().records != result.records


def test_configured_cluster_id_is_written_as_given() -> None:
    assert controller(GIVEN).maybe_write_cluster_id().records == (ClusterIdRecord(GIVEN),)


def test_written_once_then_nothing() -> None:
    """After replay the image carries the id and the next activation writes no record."""
    c = controller()
    records = c.maybe_write_cluster_id().records
    c.replay(records, 1)
    assert c.image.cluster_id == records[0].cluster_id
    again = c.maybe_write_cluster_id()
    assert again.records == () and again.response.ok


def test_configured_id_that_differs_from_the_log_is_refused() -> None:
    """Kafka's INCONSISTENT_CLUSTER_ID: a controller given another cluster.id writes nothing."""
    c = controller(OTHER)
    c.replay((ClusterIdRecord(GIVEN),), 1)
    result = c.maybe_write_cluster_id()
    assert result.records == ()
    assert result.response.code == Code.INCONSISTENT_CLUSTER_ID
    assert GIVEN in result.response.message and OTHER in result.response.message


def test_replay_refuses_a_second_different_id_and_accepts_the_same() -> None:
    image = MetadataImage()
    image.apply(ClusterIdRecord(GIVEN), 1)
    image.apply(ClusterIdRecord(GIVEN), 2)  # idempotent
    before = image.state()
    with pytest.raises(MetadataReplayError, match=OTHER):
        image.apply(ClusterIdRecord(OTHER), 3)
    with pytest.raises(MetadataReplayError):
        image.apply(ClusterIdRecord(""), 3)
    assert image.state() == before and image.cluster_id == GIVEN


def test_snapshot_keeps_the_cluster_id() -> None:
    image = MetadataImage()
    image.apply_batch(decode_batch(encode_batch([ClusterIdRecord(GIVEN), TopicRecord("t", OTHER)])), 4)
    restored = MetadataImage.from_snapshot(image.snapshot())
    assert restored.cluster_id == GIVEN
    assert restored.state() == image.state()
    assert MetadataImage.from_snapshot(MetadataImage().snapshot()).cluster_id == NO_CLUSTER_ID


def test_state_machine_reports_the_cluster_id_once_on_apply_and_restore() -> None:
    """The controller process records the id in meta.properties through this hook."""
    seen: list[str] = []
    sm = MetadataStateMachine(controller(), on_cluster_id=seen.append)
    sm.apply(1, encode_batch([TopicRecord("t", OTHER)]))
    sm.apply(2, encode_batch([ClusterIdRecord(GIVEN)]))
    sm.apply(3, encode_batch([ClusterIdRecord(GIVEN)]))
    assert seen == [GIVEN]
    fresh = MetadataStateMachine(controller(), on_cluster_id=seen.append)
    fresh.restore(sm.snapshot())
    assert seen == [GIVEN, GIVEN]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (GIVEN, None),
        (OTHER, None),
        ("short", "5 characters, not 22"),
        ("MkU3OEVBNTcwNTJENDM2Q!", "not a url-safe base64 Uuid"),
        ("MkU3OEVBNTcwNTJENDM2Q/", "not a url-safe base64 Uuid"),  # standard, not url-safe, base64
        ("MkU3OEVBNTcwNTJENDM2Qh", "not a url-safe base64 Uuid"),  # non-zero padding bits
        ("AAAAAAAAAAAAAAAAAAAAAA", "reserved zero Uuid"),
    ],
    ids=["kafka-example", "with-dash-underscore", "too-short", "bad-char", "not-url-safe", "bits", "zero"],
)
def test_cluster_id_validation(value: str, problem: str | None) -> None:
    """Kafka's Uuid.fromString: 16 bytes of url-safe base64 without padding; the zero Uuid is reserved."""
    found = cluster_id_problem(value)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found, found


def test_broker_of_another_cluster_is_refused_at_registration() -> None:
    """Kafka's BrokerRegistrationRequest.ClusterId: a broker whose meta.properties names another
    cluster gets INCONSISTENT_CLUSTER_ID and is not registered; its own cluster's id or a new data
    directory ("") registers."""
    c = controller(GIVEN)
    c.replay(c.maybe_write_cluster_id().records, 1)
    refused = c.handle_register_broker(RegisterBrokerRequest(101, "inc", (), "", OTHER), 0)
    assert refused.records == () and refused.response.error.code == Code.INCONSISTENT_CLUSTER_ID
    assert OTHER in refused.response.error.message and GIVEN in refused.response.error.message
    for cluster_id in (GIVEN, ""):
        accepted = c.handle_register_broker(RegisterBrokerRequest(101, "inc", (), "", cluster_id), 0)
        assert accepted.response.error.ok and len(accepted.records) == 1
