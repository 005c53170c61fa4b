"""The quorum controller's handlers: every validation rule and error, brokers, leadership, producer ids.

Handlers only generate; the harness commits (replays) the records, as the Raft driver does.
"""

from __future__ import annotations

import time

import pytest

from metadata.api import (
    AlterableConfig,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerState,
    ElectLeadersRequest,
    NewPartitions,
    NewTopic,
    RegisterBrokerRequest,
)
from metadata.configs import AlterConfigOp
from metadata.controller import ControllerConfig
from metadata.partition_change import Election
from metadata.records import ConfigResourceType, encode_batch
from proto.errors import ErrorCode as Code
from proto.kafka_types import NO_BROKER_EPOCH, NO_LEADER


def members(cluster, *broker_ids: int, unknown: tuple[int, ...] = ()) -> tuple[BrokerState, ...]:
    """KIP-903 ISR members with their current broker epochs (NO_BROKER_EPOCH for ``unknown`` ones)."""
    return tuple(
        BrokerState(b, NO_BROKER_EPOCH if b in unknown else cluster.image.brokers[b].broker_epoch)
        for b in broker_ids
    )


# ---- CreateTopics --------------------------------------------------------------------------------

CREATE_CASES = [
    ("ok", NewTopic("t", 3, 2), Code.NONE),
    ("defaults", NewTopic("t"), Code.NONE),
    ("bad-name", NewTopic("a b", 1, 1), Code.INVALID_TOPIC_EXCEPTION),
    ("zero-partitions", NewTopic("t", 0, 1), Code.INVALID_PARTITIONS),
    ("rf-above-brokers", NewTopic("t", 1, 4), Code.INVALID_REPLICATION_FACTOR),
    ("bad-config", NewTopic("t", 1, 1, configs={"min.insync.replicas": "0"}), Code.INVALID_CONFIG),
    ("unknown-config", NewTopic("t", 1, 1, configs={"nope": "1"}), Code.INVALID_CONFIG),
    ("assignment", NewTopic("t", assignments={0: (1, 2), 1: (2, 3)}), Code.NONE),
    ("assignment-and-counts", NewTopic("t", 2, 2, assignments={0: (1, 2)}), Code.INVALID_REQUEST),
    ("assignment-unknown-broker", NewTopic("t", assignments={0: (1, 7)}), Code.INVALID_REPLICA_ASSIGNMENT),
]


@pytest.mark.parametrize(("topic", "code"), [c[1:] for c in CREATE_CASES], ids=[c[0] for c in CREATE_CASES])
def test_create_topic_rules(cluster, topic: NewTopic, code: int) -> None:
    """CreateTopics validates everything first; a failed topic writes no record at all."""
    result = cluster.controller.handle_create_topics([topic])
    (response,) = result.response
    assert response.error.code == code, response.error
    if code == Code.NONE:
        cluster.commit(result)
        created = cluster.image.topic_by_name("t")
        assert created is not None and created.topic_id == response.topic_id
        assert len(created.partitions) == response.num_partitions
        for p in created.partitions.values():
            assert p.leader == p.replicas[0] and p.isr == p.replicas and p.leader_epoch == 0
    else:
        assert result.records == ()
        assert response.error.message


def test_create_existing_topic_and_duplicates(cluster) -> None:
    """TOPIC_ALREADY_EXISTS for an existing name; a name twice in one request is INVALID_REQUEST."""
    cluster.create("t")
    (again,) = cluster.controller.handle_create_topics([NewTopic("t", 1, 1)]).response
    assert again.error.code == Code.TOPIC_ALREADY_EXISTS
    result = cluster.controller.handle_create_topics(
        [NewTopic("u", 1, 1), NewTopic("u", 1, 1), NewTopic("v", 1, 1)]
    )
    assert [r.error.code for r in result.response] == [Code.INVALID_REQUEST, Code.INVALID_REQUEST, Code.NONE]
    cluster.commit(result)
    assert "u" not in cluster.image.topic_ids and "v" in cluster.image.topic_ids


def test_validate_only_writes_nothing(cluster) -> None:
    """validate_only answers as if created, with no records."""
    result = cluster.controller.handle_create_topics([NewTopic("t", 4, 3)], validate_only=True)
    assert result.records == () and result.response[0].error.ok and result.response[0].num_partitions == 4


def test_rf_counts_only_unfenced_brokers(cluster) -> None:
    """Replication factor <= unfenced brokers: a fenced broker does not count."""
    epoch = cluster.image.brokers[3].broker_epoch
    cluster.heartbeat(3, epoch, want_fence=True)
    (r,) = cluster.controller.handle_create_topics([NewTopic("t", 1, 3)]).response
    assert r.error.code == Code.INVALID_REPLICATION_FACTOR


def test_assignment_on_fenced_brokers_only(cluster) -> None:
    """An explicit assignment whose brokers are all fenced cannot elect a leader."""
    cluster.heartbeat(3, cluster.image.brokers[3].broker_epoch, want_fence=True)
    (r,) = cluster.controller.handle_create_topics([NewTopic("t", assignments={0: (3,)})]).response
    assert r.error.code == Code.INVALID_REPLICA_ASSIGNMENT
    cluster.create("u", assignments={0: (3, 1)}, partitions=-1, rf=-1)
    p = cluster.partition("u")
    assert (p.leader, p.isr) == (1, (1,))


def test_topic_configs_stored_normalized(cluster) -> None:
    """Topic configs are validated, normalised and stored as overrides."""
    cluster.create(
        "t", configs={"unclean.leader.election.enable": "TRUE", "cleanup.policy": "compact, delete"}
    )
    assert cluster.image.topic_overrides("t") == {
        "cleanup.policy": "compact,delete",
        "unclean.leader.election.enable": "true",
    }


# ---- DeleteTopics, CreatePartitions --------------------------------------------------------------


def test_delete_topics(cluster) -> None:
    """DeleteTopics removes the topic, its partitions and its configs; unknown names get an error."""
    cluster.create("t", 3, 2, configs={"retention.ms": "5"})
    results = cluster.commit(cluster.controller.handle_delete_topics(["t", "nope"]))
    assert [r.error.code for r in results] == [Code.NONE, Code.UNKNOWN_TOPIC_OR_PARTITION]
    assert (
        cluster.image.topics == {} and cluster.image.configs == {} and cluster.image.replicas_by_broker == {}
    )
    assert cluster.create("t").error.ok, "a deleted name can be reused"


CREATE_PARTITIONS_CASES = [
    ("grow", NewPartitions("t", 5), Code.NONE),
    ("same-count", NewPartitions("t", 2), Code.INVALID_PARTITIONS),
    ("shrink", NewPartitions("t", 1), Code.INVALID_PARTITIONS),
    ("unknown-topic", NewPartitions("nope", 5), Code.UNKNOWN_TOPIC_OR_PARTITION),
    ("assignment", NewPartitions("t", 3, [(3, 1)]), Code.NONE),
    ("assignment-count-mismatch", NewPartitions("t", 4, [(3, 1)]), Code.INVALID_REPLICA_ASSIGNMENT),
    ("assignment-wrong-rf", NewPartitions("t", 3, [(3,)]), Code.INVALID_REPLICATION_FACTOR),
]


@pytest.mark.parametrize(
    ("item", "code"), [c[1:] for c in CREATE_PARTITIONS_CASES], ids=[c[0] for c in CREATE_PARTITIONS_CASES]
)
def test_create_partitions_rules(cluster, item: NewPartitions, code: int) -> None:
    """CreatePartitions only grows a topic, keeping its replication factor."""
    cluster.create("t", 2, 2)
    (result,) = cluster.commit(cluster.controller.handle_create_partitions([item]))
    assert result.error.code == code, result.error
    topic = cluster.image.topic_by_name("t")
    assert len(topic.partitions) == (item.count if code == Code.NONE else 2)
    assert {len(p.replicas) for p in topic.partitions.values()} == {2}


# ---- configs ------------------------------------------------------------------------------------

ALTER_CASES = [
    ("set", ConfigResourceType.TOPIC, "t", [("retention.ms", AlterConfigOp.SET, "10")], Code.NONE),
    ("delete", ConfigResourceType.TOPIC, "t", [("segment.bytes", AlterConfigOp.DELETE, "")], Code.NONE),
    (
        "unknown-topic",
        ConfigResourceType.TOPIC,
        "x",
        [("retention.ms", AlterConfigOp.SET, "1")],
        Code.UNKNOWN_TOPIC_OR_PARTITION,
    ),
    (
        "bad-value",
        ConfigResourceType.TOPIC,
        "t",
        [("retention.ms", AlterConfigOp.SET, "soon")],
        Code.INVALID_CONFIG,
    ),
    ("unknown-name", ConfigResourceType.TOPIC, "t", [("nope", AlterConfigOp.SET, "1")], Code.INVALID_CONFIG),
    (
        "one-bad-none-applied",
        ConfigResourceType.TOPIC,
        "t",
        [("retention.ms", AlterConfigOp.SET, "10"), ("flush.ms", AlterConfigOp.SET, "-5")],
        Code.INVALID_CONFIG,
    ),
    (
        "cluster-default",
        ConfigResourceType.CLUSTER,
        "",
        [("retention.ms", AlterConfigOp.SET, "7")],
        Code.NONE,
    ),
    (
        "cluster-with-name",
        ConfigResourceType.CLUSTER,
        "x",
        [("retention.ms", AlterConfigOp.SET, "7")],
        Code.INVALID_REQUEST,
    ),
]


@pytest.mark.parametrize(
    ("kind", "name", "ops", "code"), [c[1:] for c in ALTER_CASES], ids=[c[0] for c in ALTER_CASES]
)
def test_incremental_alter_configs(cluster, kind, name: str, ops, code: int) -> None:
    """IncrementalAlterConfigs applies all of a resource's changes or none of them."""
    cluster.create("t", configs={"segment.bytes": "1048576"})
    before = {k: dict(v) for k, v in cluster.image.configs.items()}
    resource = AlterConfigsResource(kind, name, tuple(AlterableConfig(*op) for op in ops))
    (result,) = cluster.commit(cluster.controller.handle_incremental_alter_configs([resource]))
    assert result.error.code == code, result.error
    if code != Code.NONE:
        assert cluster.image.configs == before
    elif ops[0][1] == AlterConfigOp.SET:
        assert cluster.image.configs[(kind, name)][ops[0][0]] == ops[0][2]
    else:
        assert "segment.bytes" not in cluster.image.topic_overrides("t")


# ---- brokers ------------------------------------------------------------------------------------


def test_registration_fenced_until_caught_up(harness) -> None:
    """A registered broker is fenced until a heartbeat shows its metadata offset >= its broker epoch
    (the offset of its registration record)."""
    epoch = harness.register(1, unfence=False)
    assert epoch == harness.offset and harness.image.brokers[1].fenced
    behind = harness.heartbeat(1, epoch, offset=epoch - 1)
    assert (behind.is_caught_up, behind.is_fenced) == (False, True)
    assert harness.image.brokers[1].fenced
    caught_up = harness.heartbeat(1, epoch, offset=epoch)
    assert (caught_up.is_caught_up, caught_up.is_fenced) == (True, False)
    assert not harness.image.brokers[1].fenced


@pytest.mark.parametrize(
    ("broker_id", "epoch_delta", "code"),
    [
        (1, 0, Code.NONE),
        (1, -1, Code.STALE_BROKER_EPOCH),
        (1, 1, Code.STALE_BROKER_EPOCH),
        (9, 0, Code.BROKER_ID_NOT_REGISTERED),
    ],
    ids=["current", "older", "newer", "unknown-broker"],
)
def test_heartbeat_epoch_checks(cluster, broker_id: int, epoch_delta: int, code: int) -> None:
    """A heartbeat with a stale broker epoch is refused (STALE_BROKER_EPOCH)."""
    epoch = cluster.image.brokers[1].broker_epoch + epoch_delta
    assert cluster.heartbeat(broker_id, epoch).error.code == code


def test_newer_incarnation_replaces_older(cluster) -> None:
    """Re-registration gets a new epoch; the old incarnation's epoch is stale; its leaderships move."""
    cluster.create("t", assignments={0: (1, 2)}, partitions=-1, rf=-1)
    old_epoch = cluster.image.brokers[1].broker_epoch
    new_epoch = cluster.register(1, unfence=False)
    assert new_epoch > old_epoch and cluster.image.brokers[1].fenced
    assert cluster.heartbeat(1, old_epoch).error.code == Code.STALE_BROKER_EPOCH
    p = cluster.partition("t")
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2,), 1)


def test_register_negative_id(harness) -> None:
    response = harness.controller.handle_register_broker(RegisterBrokerRequest(-3, "x"), 0).response
    assert response.error.code == Code.INVALID_REQUEST


def test_fencing_after_session_timeout(cluster) -> None:
    """broker.session.timeout.ms without a heartbeat fences the broker; partitions it led get the first
    live ISR member in assignment order, with bumped leader and partition epochs."""
    cluster.create("t", assignments={0: (1, 2, 3), 1: (2, 1, 3), 2: (3, 2, 1)}, partitions=-1, rf=-1)
    timeout = cluster.controller.config.broker_session_timeout_ms
    cluster.controller.activate(cluster.now_ms)
    for b in (2, 3):
        cluster.controller.heartbeats.touch(b, cluster.now_ms + timeout)
    assert cluster.controller.maybe_fence_stale_brokers(cluster.now_ms + timeout).records == ()
    result = cluster.controller.maybe_fence_stale_brokers(cluster.now_ms + timeout + 1)
    assert result.response == [1]
    cluster.commit(result)
    assert cluster.image.brokers[1].fenced
    p0, p1, p2 = (cluster.partition("t", i) for i in range(3))
    assert (p0.leader, p0.isr, p0.leader_epoch, p0.partition_epoch) == (2, (2, 3), 1, 1)
    assert (p1.leader, p1.isr, p1.leader_epoch, p1.partition_epoch) == (2, (2, 3), 0, 1)
    assert (p2.leader, p2.isr, p2.leader_epoch) == (3, (3, 2), 0)


def test_unfence_brings_offline_partition_back(cluster) -> None:
    """An offline partition (ISR = its last member, fenced) gets that member back as leader when it
    returns; the leader epoch bumps on both changes."""
    cluster.create("t", assignments={0: (1,)}, partitions=-1, rf=-1)
    epoch = cluster.image.brokers[1].broker_epoch
    cluster.heartbeat(1, epoch, want_fence=True)
    p = cluster.partition("t")
    assert (p.leader, p.isr, p.leader_epoch) == (NO_LEADER, (1,), 1)
    response = cluster.heartbeat(1, epoch)
    assert not response.is_fenced
    p = cluster.partition("t")
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, (1,), 2, 2)


def test_unclean_election_when_topic_allows(cluster) -> None:
    """With unclean.leader.election.enable, a live out-of-sync replica leads when the ISR is gone."""
    cluster.create(
        "t", assignments={0: (1, 2)}, partitions=-1, rf=-1, configs={"unclean.leader.election.enable": "true"}
    )
    cluster.commit(
        cluster.controller.handle_alter_partition(
            AlterPartitionRequest(
                1,
                cluster.image.brokers[1].broker_epoch,
                (AlterPartitionItem(cluster.image.topic_ids["t"], 0, 0, 0, members(cluster, 1)),),
            )
        )
    )
    cluster.heartbeat(1, cluster.image.brokers[1].broker_epoch, want_fence=True)
    p = cluster.partition("t")
    assert (p.leader, p.isr) == (2, (2,))


def test_controlled_shutdown(cluster) -> None:
    """Controlled shutdown moves leaders off first; the broker is told to stop only after that commits."""
    cluster.create("t", assignments={0: (1, 2), 1: (2, 1)}, partitions=-1, rf=-1)
    epoch = cluster.image.brokers[1].broker_epoch
    first = cluster.heartbeat(1, epoch, want_shut_down=True)
    assert not first.should_shut_down
    assert cluster.image.brokers[1].in_controlled_shutdown
    assert [cluster.partition("t", i).leader for i in (0, 1)] == [2, 2]
    assert cluster.partition("t", 0).isr == (2,)
    second = cluster.heartbeat(1, epoch, want_shut_down=True)
    assert second.should_shut_down


def test_fenced_broker_may_shut_down_at_once(harness) -> None:
    epoch = harness.register(1, unfence=False)
    assert harness.heartbeat(1, epoch, want_shut_down=True).should_shut_down


# ---- AlterPartition -----------------------------------------------------------------------------

ALTER_PARTITION_CASES = [
    ("shrink", 1, 0, 0, (1, 2), Code.NONE),
    ("expand-unchanged", 1, 0, 0, (1, 2, 3), Code.NONE),
    ("not-leader", 2, 0, 0, (1, 2), Code.NOT_LEADER_OR_FOLLOWER),
    ("old-leader-epoch", 1, -1, 0, (1, 2), Code.FENCED_LEADER_EPOCH),
    ("new-leader-epoch", 1, 1, 0, (1, 2), Code.UNKNOWN_LEADER_EPOCH),
    ("stale-partition-epoch", 1, 0, -1, (1, 2), Code.INVALID_UPDATE_VERSION),
    ("leader-missing", 1, 0, 0, (2, 3), Code.INVALID_REQUEST),
    ("non-replica", 1, 0, 0, (1, 4), Code.INVALID_REQUEST),
    ("duplicate", 1, 0, 0, (1, 1), Code.INVALID_REQUEST),
]


@pytest.mark.parametrize(
    ("broker", "le_delta", "pe_delta", "isr", "code"),
    [c[1:] for c in ALTER_PARTITION_CASES],
    ids=[c[0] for c in ALTER_PARTITION_CASES],
)
def test_alter_partition_rules(cluster, broker: int, le_delta: int, pe_delta: int, isr, code: int) -> None:
    """AlterPartition is accepted only from the leader with the current leader and partition epochs."""
    cluster.register(4)
    cluster.create("t", assignments={0: (1, 2, 3)}, partitions=-1, rf=-1)
    topic_id = cluster.image.topic_ids["t"]
    item = AlterPartitionItem(topic_id, 0, le_delta, pe_delta, members(cluster, *isr, unknown=isr[1:]))
    request = AlterPartitionRequest(broker, cluster.image.brokers[broker].broker_epoch, (item,))
    response = cluster.commit(cluster.controller.handle_alter_partition(request))
    (result,) = response.partitions
    assert result.error.code == code, result.error
    p = cluster.partition("t")
    if code == Code.NONE:
        assert (
            (result.isr, result.partition_epoch) == (p.isr, p.partition_epoch) == (isr, int(isr != (1, 2, 3)))
        )


def test_alter_partition_refuses_fenced_member_and_stale_broker(cluster) -> None:
    """Expanding the ISR with a fenced broker is INELIGIBLE_REPLICA; a stale broker epoch is refused."""
    cluster.create("t", assignments={0: (1, 2)}, partitions=-1, rf=-1)
    topic_id = cluster.image.topic_ids["t"]
    e1 = cluster.image.brokers[1].broker_epoch
    cluster.commit(
        cluster.controller.handle_alter_partition(
            AlterPartitionRequest(1, e1, (AlterPartitionItem(topic_id, 0, 0, 0, members(cluster, 1)),))
        )
    )
    cluster.heartbeat(2, cluster.image.brokers[2].broker_epoch, want_fence=True)
    response = cluster.controller.handle_alter_partition(
        AlterPartitionRequest(1, e1, (AlterPartitionItem(topic_id, 0, 0, 1, members(cluster, 1, 2)),))
    ).response
    assert response.partitions[0].error.code == Code.INELIGIBLE_REPLICA
    stale = cluster.controller.handle_alter_partition(AlterPartitionRequest(1, e1 - 1, ())).response
    assert stale.error.code == Code.STALE_BROKER_EPOCH


KIP903_CASES = [
    # (member 2's epoch relative to its registration, member 2 fenced / shutting down) -> code
    pytest.param(0, None, Code.NONE, id="current-epoch"),
    pytest.param(-1, None, Code.INELIGIBLE_REPLICA, id="older-incarnation"),
    pytest.param(1, None, Code.INELIGIBLE_REPLICA, id="epoch-not-registered-yet"),
    pytest.param(None, None, Code.INELIGIBLE_REPLICA, id="added-without-epoch"),
    pytest.param(0, "fence", Code.INELIGIBLE_REPLICA, id="fenced"),
    pytest.param(0, "shutdown", Code.INELIGIBLE_REPLICA, id="controlled-shutdown"),
]


@pytest.mark.parametrize(("epoch_delta", "state", "code"), KIP903_CASES)
def test_alter_partition_checks_broker_epochs_of_isr_members(cluster, epoch_delta, state, code) -> None:
    """KIP-903: AlterPartition carries each ISR member's broker epoch as the leader saw it in the
    member's fetches; the controller admits a member only with its current registration's epoch,
    unfenced and not shutting down (INELIGIBLE_REPLICA otherwise, nothing committed)."""
    cluster.create("t", assignments={0: (1, 2, 3)}, partitions=-1, rf=-1)
    topic_id, e1 = cluster.image.topic_ids["t"], cluster.image.brokers[1].broker_epoch
    shrink = AlterPartitionItem(topic_id, 0, 0, 0, members(cluster, 1, 3))
    cluster.commit(cluster.controller.handle_alter_partition(AlterPartitionRequest(1, e1, (shrink,))))
    if state is not None:
        e2 = cluster.image.brokers[2].broker_epoch
        cluster.heartbeat(2, e2, **{"want_fence" if state == "fence" else "want_shut_down": True})
    p = cluster.partition("t")
    epoch = NO_BROKER_EPOCH if epoch_delta is None else cluster.image.brokers[2].broker_epoch + epoch_delta
    new_isr = (BrokerState(1, e1), BrokerState(2, epoch), BrokerState(3, NO_BROKER_EPOCH))
    item = AlterPartitionItem(topic_id, 0, p.leader_epoch, p.partition_epoch, new_isr)
    response = cluster.commit(
        cluster.controller.handle_alter_partition(AlterPartitionRequest(1, e1, (item,)))
    )
    (result,) = response.partitions
    assert result.error.code == code, result.error
    assert cluster.partition("t").isr == ((1, 2, 3) if code == Code.NONE else (1, 3))
    if code != Code.NONE:
        assert "broker 2" in result.error.message, result.error.message


# ---- ElectLeaders, producer ids -----------------------------------------------------------------


def test_preferred_leader_election(cluster) -> None:
    """Preferred election moves leadership back to the first replica once it is in the ISR."""
    cluster.create("t", assignments={0: (1, 2)}, partitions=-1, rf=-1)
    e1 = cluster.image.brokers[1].broker_epoch
    cluster.heartbeat(1, e1, want_fence=True)
    assert cluster.partition("t").leader == 2
    request = ElectLeadersRequest(Election.PREFERRED, (("t", 0), ("t", 9)))
    results = cluster.commit(cluster.controller.handle_elect_leaders(request))
    assert [r.error.code for r in results] == [
        Code.PREFERRED_LEADER_NOT_AVAILABLE,
        Code.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    cluster.heartbeat(1, e1)
    p = cluster.partition("t")
    topic_id = cluster.image.topic_ids["t"]
    e2 = cluster.image.brokers[2].broker_epoch
    item = AlterPartitionItem(topic_id, 0, p.leader_epoch, p.partition_epoch, members(cluster, 2, 1))
    cluster.commit(cluster.controller.handle_alter_partition(AlterPartitionRequest(2, e2, (item,))))
    results = cluster.commit(cluster.controller.handle_elect_leaders(request))
    assert results[0].error.code == Code.NONE and results[0].leader == 1
    assert cluster.partition("t").leader == 1
    again = cluster.commit(cluster.controller.handle_elect_leaders(request))
    assert again[0].error.code == Code.ELECTION_NOT_NEEDED


def test_producer_id_blocks(cluster) -> None:
    """Producer ids come in disjoint consecutive blocks; a stale broker epoch gets none."""
    e1 = cluster.image.brokers[1].broker_epoch
    a = cluster.commit(cluster.controller.handle_allocate_producer_ids(1, e1))
    b = cluster.commit(cluster.controller.handle_allocate_producer_ids(1, e1))
    assert (a.producer_id_start, b.producer_id_start, a.producer_id_len) == (0, 1000, 1000)
    assert (
        cluster.controller.handle_allocate_producer_ids(1, e1 + 99).response.error.code
        == Code.STALE_BROKER_EPOCH
    )


# ---- performance --------------------------------------------------------------------------------


def test_fencing_a_broker_leading_10000_partitions_is_fast(make_harness) -> None:
    """Issue 4: fencing a broker that leads 10,000 partitions produces the new-leader records (and
    their encoded entry) within 1 s."""
    h = make_harness(ControllerConfig(broker_session_timeout_ms=100))
    for b in (1, 2, 3):
        h.register(b)
    h.create("big", assignments=dict.fromkeys(range(10000), (1, 2, 3)), partitions=-1, rf=-1)
    h.controller.activate(0)
    for b in (2, 3):
        h.controller.heartbeats.touch(b, 10_000)
    start = time.perf_counter()
    result = h.controller.maybe_fence_stale_brokers(10_000)
    data = encode_batch(result.records)
    elapsed = time.perf_counter() - start
    assert result.response == [1] and len(result.records) == 10_001 and data
    assert elapsed < 1.0, f"fence generation took {elapsed:.3f} s"
    h.commit(result)
    assert {p.leader for p in h.image.topic_by_name("big").partitions.values()} == {2}


def test_fencing_two_brokers_at_once_merges_changes(cluster) -> None:
    """Two brokers fenced by one decision: each partition gets ONE record computed from the pending
    state (the leader epoch bumps once), and the last live ISR member in assignment order leads."""
    cluster.create("t", assignments={0: (1, 2, 3), 1: (2, 1, 3), 2: (3, 1, 2)}, partitions=-1, rf=-1)
    cluster.controller.activate(cluster.now_ms)
    timeout = cluster.controller.config.broker_session_timeout_ms
    cluster.controller.heartbeats.touch(3, cluster.now_ms + timeout)
    result = cluster.controller.maybe_fence_stale_brokers(cluster.now_ms + timeout + 1)
    assert result.response == [1, 2]
    changes = [r for r in result.records if type(r).__name__ == "PartitionChangeRecord"]
    assert sorted(r.partition for r in changes) == [0, 1, 2], "one record per partition"
    cluster.commit(result)
    states = [cluster.partition("t", i) for i in range(3)]
    assert [(p.leader, p.isr, p.leader_epoch) for p in states] == [(3, (3,), 1), (3, (3,), 1), (3, (3,), 0)]
