"""metadata.events: the controller's event per committed change, read from the image before the entry,
and MetadataStateMachine logging them once — for the entries this node proposed as active controller.
"""

from __future__ import annotations

import logging
import random
import shlex

import pytest

from metadata.api import (
    AlterableConfig,
    AlterConfigsResource,
    BrokerHeartbeatRequest,
    NewPartitions,
    NewTopic,
    RegisterBrokerRequest,
)
from metadata.configs import AlterConfigOp
from metadata.controller import ControllerConfig, ControllerResult, QuorumController
from metadata.events import Event, batch_events, is_warning
from metadata.records import (
    ConfigResourceType,
    Endpoint,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    encode_batch,
)
from metadata.state_machine import MetadataStateMachine
from proto.kafka_types import NO_LEADER
from proto.runtime.logfmt import LogfmtFormatter
from tests.unit.metadata.conftest import Harness


def commit_events(h: Harness, result: ControllerResult) -> list[Event]:
    """The events of ``result``'s entry (computed before it is replayed), then commit it."""
    events = batch_events(h.image, result.records, h.offset + 1)
    h.commit(result)
    return events


def test_topic_create_is_one_event_with_its_partition_count_and_factor(cluster: Harness) -> None:
    topic_id_before = set(cluster.image.topics)
    events = commit_events(cluster, cluster.controller.handle_create_topics([NewTopic("orders", 3, 2)]))
    (topic_id,) = set(cluster.image.topics) - topic_id_before
    assert events == [("topic_created", {"topic": "orders", "topic_id": topic_id, "partitions": 3,
                                         "replication_factor": 2})]  # fmt: skip


def test_topic_delete_names_the_topic_that_is_gone(cluster: Harness) -> None:
    cluster.create("orders", 2)
    topic_id = cluster.image.topic_ids["orders"]
    events = commit_events(cluster, cluster.controller.handle_delete_topics(["orders"]))
    assert events == [("topic_deleted", {"topic": "orders", "topic_id": topic_id, "partitions": 2})]


def test_new_partitions_of_an_existing_topic(cluster: Harness) -> None:
    cluster.create("orders", 1, 3)
    events = commit_events(cluster, cluster.controller.handle_create_partitions([NewPartitions("orders", 3)]))
    want = {"topic": "orders", "partitions": [1, 2], "replication_factor": 3}
    assert events == [("partitions_created", want)]


@pytest.mark.parametrize(
    ("op", "value", "want"),
    [(AlterConfigOp.SET, "2", ("config_changed", "2")), (AlterConfigOp.DELETE, "", ("config_deleted", None))],
    ids=["set", "delete"],
)
def test_config_change(cluster: Harness, op: AlterConfigOp, value: str, want: tuple) -> None:
    cluster.create("orders", 1, 3)
    change = AlterableConfig("min.insync.replicas", op, value)
    alter = AlterConfigsResource(ConfigResourceType.TOPIC, "orders", (change,))
    [(event, fields)] = commit_events(cluster, cluster.controller.handle_incremental_alter_configs([alter]))
    assert (event, fields.get("value")) == want
    where = (fields["resource_type"], fields["resource"], fields["config"])
    assert where == ("topic", "orders", "min.insync.replicas")


def test_fencing_a_leader_elects_a_new_one_then_fences(cluster: Harness) -> None:
    """The fence entry moves the leadership first (leader_elected, from the old ISR: clean), then fences."""
    cluster.create("orders", 1, 3)
    before = cluster.partition("orders")
    old_leader = before.leader
    epoch = cluster.image.brokers[old_leader].broker_epoch
    events = commit_events(cluster, cluster.controller.handle_unregister_broker(old_leader))
    after = cluster.partition("orders")
    assert events == [
        ("leader_elected", {"topic": "orders", "partition": 0, "leader": after.leader,
                            "previous_leader": old_leader, "leader_epoch": before.leader_epoch + 1,
                            "partition_epoch": before.partition_epoch + 1, "isr": after.isr}),
        ("broker_unregistered", {"broker": old_leader, "broker_epoch": epoch}),
    ]  # fmt: skip


def test_broker_register_fence_and_unfence(harness: Harness) -> None:
    events = commit_events(harness, harness.controller.handle_register_broker(
        RegisterBrokerRequest(1, "inc-1", (Endpoint("B", "h", 1),), ""), harness.now_ms
    ))
    assert events == [("broker_registered", {"broker": 1, "broker_epoch": 1, "incarnation_id": "inc-1",
                                             "endpoints": ["B://h:1"], "rack": ""})]  # fmt: skip
    heartbeat = harness.controller.handle_broker_heartbeat
    events = commit_events(harness, heartbeat(BrokerHeartbeatRequest(1, 1, 1), harness.now_ms))
    assert events == [("broker_unfenced", {"broker": 1, "broker_epoch": 1})]
    fence = BrokerHeartbeatRequest(1, 1, 2, want_fence=True)
    events = commit_events(harness, heartbeat(fence, harness.now_ms))
    assert events == [("broker_fenced", {"broker": 1, "broker_epoch": 1})] and is_warning(events[0])


@pytest.mark.parametrize(
    ("change", "event", "extra"),
    [
        (PartitionChangeRecord("T", 0, isr=(1,)), "partition_changed", {"previous_isr": (1, 2)}),
        (PartitionChangeRecord("T", 0, leader=2), "leader_elected", {"previous_leader": 1}),
        (PartitionChangeRecord("T", 0, leader=3, isr=(3,)), "leader_elected", {"unclean": True}),
        (PartitionChangeRecord("T", 0, leader=NO_LEADER, isr=(1,)), "partition_offline",
         {"previous_leader": 1}),
    ],
    ids=["isr-shrink", "clean-election", "unclean-election", "offline"],
)
def test_partition_changes(change: PartitionChangeRecord, event: str, extra: dict) -> None:
    """Old values come from the image before the entry; the epochs are the image's rules (leader epoch
    +1 only with a new leader); a leader from outside the old ISR is unclean, and a WARN like offline."""
    h = Harness()
    records = [RegisterBrokerRecord(b, f"i{b}", fenced=False) for b in (1, 2, 3)]
    h.controller.replay([*records, TopicRecord("t", "T")], 1)
    h.controller.replay([PartitionRecord("T", 0, (1, 2, 3), (1, 2), 1, leader_epoch=5, partition_epoch=9)], 2)
    [(name, fields)] = batch_events(h.image, [change], 3)
    assert name == event and fields.items() >= extra.items()
    assert (fields["topic"], fields["partition"], fields["leader_epoch"]) == (
        "t", 0, 5 if event == "partition_changed" else 6,
    )  # fmt: skip
    assert is_warning((name, fields)) == (event == "partition_offline" or "unclean" in extra)


def test_two_changes_of_one_partition_in_one_entry_read_each_others_result() -> None:
    h = Harness()
    h.controller.replay([RegisterBrokerRecord(b, f"i{b}", fenced=False) for b in (1, 2)], 1)
    h.controller.replay([TopicRecord("t", "T"), PartitionRecord("T", 0, (1, 2), (1, 2), 1)], 2)
    events = batch_events(h.image, [PartitionChangeRecord("T", 0, isr=(1,)),
                                    PartitionChangeRecord("T", 0, leader=2, isr=(2,))], 3)  # fmt: skip
    seen = [(e, f.get("previous_isr"), f.get("previous_leader"), f["partition_epoch"]) for e, f in events]
    assert seen == [
        ("partition_changed", (1, 2), None, 1), ("leader_elected", None, 1, 2),
    ]  # fmt: skip


def test_state_machine_logs_own_entries_once_and_standby_entries_never(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The active controller's proposals (``expect``) log their events when they commit; the same bytes
    replayed by a standby (or at start-up) log nothing."""
    caplog.set_level(logging.INFO, logger="metadata.events")
    records = (RegisterBrokerRecord(7, "inc", fenced=True),)
    data = encode_batch(records)
    active = MetadataStateMachine(QuorumController(ControllerConfig(), random.Random(1)))
    active.expect(data, records)
    active.apply(4, data)
    standby = MetadataStateMachine(QuorumController(ControllerConfig(), random.Random(1)))
    standby.apply(4, data)
    formatter = LogfmtFormatter(1, "controller")
    lines = [formatter.format(r) for r in caplog.records if r.name == "metadata.events"]
    assert len(lines) == 1
    fields = dict(item.split("=", 1) for item in shlex.split(lines[0]))
    assert (fields["level"], fields["event"], fields["broker"], fields["broker_epoch"]) == (
        "INFO", "broker_registered", "7", "4",
    )  # fmt: skip


def test_a_failed_proposal_is_forgotten(caplog: pytest.LogCaptureFixture) -> None:
    """A proposal that failed (leadership lost, outcome unknown) is not this controller's any more: when
    a later leader commits the same bytes (a re-fence, say), that leader logs it and this node does not."""
    caplog.set_level(logging.INFO, logger="metadata.events")
    records = (RegisterBrokerRecord(7, "inc", fenced=True),)
    data = encode_batch(records)
    former = MetadataStateMachine(QuorumController(ControllerConfig(), random.Random(1)))
    former.expect(data, records)
    former.forget_expected()  # what ControllerService does when propose raises
    former.apply(4, bytes(data))  # the same bytes, proposed again by the new leader
    assert [r for r in caplog.records if r.name == "metadata.events"] == []


def test_min_insync_replicas_above_the_replication_factor_is_said_at_warn_when_set(cluster: Harness) -> None:
    """Issue 24 §1: Kafka accepts a min.insync.replicas larger than the replication factor and uses the
    replication factor instead (effectiveMinIsr); the controller says so, at WARN, when a topic is
    created or altered that way — not for a value that fits, nor for other configs."""
    create = cluster.controller.handle_create_topics(
        [NewTopic("thin", 1, 2, configs={"min.insync.replicas": "3"}), NewTopic("fits", 1, 2)]
    )
    events = [e for e in commit_events(cluster, create) if e[0].startswith("min_insync")]
    assert events == [("min_insync_replicas_above_replication_factor", {
        "topic": "thin", "min_insync_replicas": 3, "replication_factor": 2, "effective": 2,
    })]  # fmt: skip
    assert is_warning(events[0])

    def alter(topic: str, value: str) -> list[Event]:
        change = AlterableConfig("min.insync.replicas", AlterConfigOp.SET, value)
        result = cluster.controller.handle_incremental_alter_configs(
            [AlterConfigsResource(ConfigResourceType.TOPIC, topic, (change,))]
        )
        return [e for e in commit_events(cluster, result) if e[0].startswith("min_insync")]

    assert alter("fits", "2") == []
    assert alter("fits", "5") == [("min_insync_replicas_above_replication_factor", {
        "topic": "fits", "min_insync_replicas": 5, "replication_factor": 2, "effective": 2,
    })]  # fmt: skip
