"""Three controller processes: admin calls through any controller, SIGKILL of the active controller
during CreateTopics, and fencing of a broker that stops heartbeating (issue 4, section 5)."""

from __future__ import annotations

import signal
import threading

import pytest
from metadata_cluster import FakeBroker, Heartbeater, wait_until

from proto import admin_pb2, controller_pb2, errors, metadata_pb2
from proto.errors import ErrorCode
from pykraft.admin import AdminClient

pytestmark = pytest.mark.integration

PARTITIONS = 4


def describe(cluster, node_id: int, names: list[str]) -> admin_pb2.DescribeTopicsResponse:
    r = cluster.admin(node_id).DescribeTopics(admin_pb2.DescribeTopicsRequest(names=names), timeout=10)
    assert r.error.code == 0, r.error
    return r


def test_admin_through_a_non_active_controller(controller_cluster) -> None:
    """Any controller serves AdminService: a standby forwards to the active one; answers come after
    commit, so every controller then describes the topic; FetchMetadata streams the records."""
    cluster = controller_cluster()
    try:
        leader = cluster.leader()
        standby = next(i for i in cluster.ports if i != leader)
        brokers = [FakeBroker(cluster, b, via=standby) for b in (1, 2, 3)]
        for b in brokers:
            b.register()
            b.unfence()
        with AdminClient(cluster.address(standby), timeout_s=20) as admin:
            created = admin.create_topic(
                "orders", num_partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"}
            )
            assert created.num_partitions == 3 and created.configs["min.insync.replicas"] == "2"
            (again,) = admin.create_topics([{"name": "orders", "num_partitions": 1, "replication_factor": 1}])
            assert again.error is not None and again.error.code == ErrorCode.TOPIC_ALREADY_EXISTS
            (bad,) = admin.create_topics([{"name": "x", "num_partitions": 1, "replication_factor": 4}])
            assert bad.error.code == ErrorCode.INVALID_REPLICATION_FACTOR
            (topic,) = admin.describe_topics(["orders"])
            assert sorted(p.leader for p in topic.partitions) == [1, 2, 3], "leaders are spread"
            assert all(len(p.isr) == 3 for p in topic.partitions)
            cluster_info = admin.describe_cluster()
            assert cluster_info.controller_id == leader and [b.broker_id for b in cluster_info.brokers] == [
                1,
                2,
                3,
            ]
            quorum = admin.describe_quorum()
            assert quorum.leader_id == leader and len(quorum.voters) == 3
        # FetchMetadata from a standby: the stream carries the TopicRecord of "orders".
        stream = cluster.controller(standby).FetchMetadata(
            controller_pb2.FetchMetadataRequest(from_offset=0), timeout=10
        )
        seen = []
        for response in stream:
            for entry in response.entries:
                batch = metadata_pb2.MetadataBatch.FromString(entry.batch)
                seen += [r.topic.name for r in batch.records if r.WhichOneof("record") == "topic"]
            if "orders" in seen:
                stream.cancel()
                break
        assert seen == ["orders"]
    except BaseException:
        print(cluster.log_text())
        raise


def _create_stream(bootstrap: str, names: list[str], outcome: dict[str, str]) -> None:
    """One client creating topics one request at a time; records each name's outcome."""
    with AdminClient(bootstrap, timeout_s=30) as admin:
        for name in names:
            try:
                (result,) = admin.create_topics(
                    [{"name": name, "num_partitions": PARTITIONS, "replication_factor": 2}]
                )
            except errors.KafkaError as exc:  # e.g. REQUEST_TIMED_OUT: the outcome is unknown
                outcome[name] = f"unknown: {exc}"
                continue
            outcome[name] = "created" if result.error is None else ErrorCode(result.error.code).name


def test_sigkill_active_controller_during_create_topics(controller_cluster) -> None:
    """SIGKILL the active controller in the middle of streams of CreateTopics: every acknowledged
    topic exists with all its partitions, nothing is half-created, and retries get
    TOPIC_ALREADY_EXISTS rather than duplicates."""
    cluster = controller_cluster()
    try:
        leader = cluster.leader()
        for b in (1, 2, 3):
            broker = FakeBroker(cluster, b, via=leader)
            broker.register()
            broker.unfence()
        # Clients talk to the active controller first, so the kill cuts requests in flight.
        bootstrap = ",".join(
            [cluster.address(leader), *(cluster.address(i) for i in cluster.ports if i != leader)]
        )
        streams = [[f"s{s}-t{i:03d}" for i in range(20)] for s in range(3)]
        outcome: dict[str, str] = {}
        threads = [
            threading.Thread(target=_create_stream, args=(bootstrap, names, outcome)) for names in streams
        ]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(outcome) >= 15, 60, "15 topics created before the kill")
            cluster.kill(leader, signal.SIGKILL)
        finally:
            for t in threads:
                t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        print({k: v for k, v in outcome.items() if v != "created"})
        all_names = {n for names in streams for n in names}
        assert set(outcome) == all_names
        acknowledged = {n for n, o in outcome.items() if o == "created"}
        existed = {n for n, o in outcome.items() if o == "TOPIC_ALREADY_EXISTS"}
        assert set(outcome.values()) <= {"created", "TOPIC_ALREADY_EXISTS"} | {
            o for o in outcome.values() if o.startswith("unknown")
        }, outcome
        assert len(acknowledged) >= 40, outcome
        new_leader = cluster.leader()
        assert new_leader != leader
        with AdminClient(cluster.bootstrap, timeout_s=30) as admin:
            retries = admin.create_topics(
                [
                    {"name": n, "num_partitions": PARTITIONS, "replication_factor": 2}
                    for n in sorted(acknowledged)
                ]
            )
        assert {r.error.code for r in retries} == {ErrorCode.TOPIC_ALREADY_EXISTS}
        for node_id in (i for i in cluster.ports if i != leader):
            r = describe(cluster, node_id, [])
            names = [t.name for t in r.topics]
            assert len(names) == len(set(names)), "no duplicates"
            assert acknowledged | existed <= set(names) <= all_names
            for t in r.topics:
                assert [p.partition for p in t.partitions] == list(range(PARTITIONS)), (
                    f"{t.name} is half-created"
                )
                assert all(p.leader in p.isr for p in t.partitions)
    except BaseException:
        print(cluster.log_text())
        raise


def test_broker_that_stops_heartbeating_is_fenced(controller_cluster) -> None:
    """A broker silent for broker.session.timeout.ms is fenced; the partitions it led get the next
    ISR member as leader with bumped leader and partition epochs; its stale heartbeat is refused
    after it re-registers. A controlled shutdown moves leaders off before the broker may stop."""
    cluster = controller_cluster(session_timeout_ms=2000)
    try:
        leader = cluster.leader()
        brokers = {b: FakeBroker(cluster, b, via=leader) for b in (1, 2, 3)}
        for b in brokers.values():
            b.register()
            b.unfence()
        with Heartbeater(list(brokers.values())) as heartbeats:
            assignments = {0: [1, 2, 3], 1: [1, 3, 2], 2: [2, 1, 3]}
            with AdminClient(cluster.address(leader), timeout_s=20) as admin:
                admin.create_topic("events", assignments=assignments)
            before = {p.partition: p for p in describe(cluster, leader, ["events"]).topics[0].partitions}
            assert [before[p].leader for p in range(3)] == [1, 1, 2]
            del heartbeats.alive[1]  # broker 1 goes silent

            def fenced_and_moved():
                after = {p.partition: p for p in describe(cluster, leader, ["events"]).topics[0].partitions}
                return after if after[0].leader != 1 and after[1].leader != 1 else None

            after = wait_until(fenced_and_moved, 30, "broker 1 to be fenced and lose its leaderships", 0.2)
            info = cluster.admin(leader).DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=10)

            # Controlled shutdown of broker 3 (leader of partition 1 now): leadership moves first,
            # and only a later heartbeat is told it may stop.
            del heartbeats.alive[3]
            first = brokers[3].heartbeat(want_shut_down=True)
            assert first.error.code == 0 and not first.should_shut_down
            moved = describe(cluster, leader, ["events"]).topics[0].partitions[1]
            assert (moved.leader, list(moved.isr)) == (2, [2])
            assert brokers[3].heartbeat(want_shut_down=True).should_shut_down
        assert (after[0].leader, after[1].leader, after[2].leader) == (2, 3, 2)
        for p in (0, 1):
            assert after[p].leader_epoch == before[p].leader_epoch + 1
            assert after[p].partition_epoch > before[p].partition_epoch
            assert 1 not in after[p].isr
        assert after[2].leader_epoch == before[2].leader_epoch, "a partition it did not lead keeps its epoch"
        assert [b.fenced for b in info.brokers] == [True, False, False]
        old_epoch = brokers[1].broker_epoch
        brokers[1].register()
        brokers[1].broker_epoch, new_epoch = old_epoch, brokers[1].broker_epoch
        assert brokers[1].heartbeat().error.code == ErrorCode.STALE_BROKER_EPOCH
        assert new_epoch > old_epoch
    except BaseException:
        print(cluster.log_text())
        raise


def test_unreachable_bootstrap_is_a_clear_error() -> None:
    """No reachable controller: a named error (REQUEST_TIMED_OUT) naming the address, not a grpc traceback."""
    with AdminClient("127.0.0.1:1", timeout_s=1) as admin, pytest.raises(errors.KafkaError) as info:
        admin.list_topics()
    assert info.value.code == ErrorCode.REQUEST_TIMED_OUT and "127.0.0.1:1" in str(info.value)


def test_restart_from_snapshot_and_fetch_metadata_snapshot(controller_cluster) -> None:
    """With a snapshot every few entries, a SIGKILLed standby restarts from its snapshot + log and
    serves the same topics; FetchMetadata from offset 0 starts with a snapshot (the tail no longer
    reaches back), and snapshot + later entries rebuild the active controller's topics."""
    from metadata.image import MetadataImage
    from metadata.records import decode_batch

    cluster = controller_cluster(extra_args=("--override", "metadata.snapshot.every.entries=5"))
    try:
        leader = cluster.leader()
        broker = FakeBroker(cluster, 1, via=leader)
        broker.register()
        broker.unfence()
        standby = next(i for i in cluster.ports if i != leader)
        with AdminClient(cluster.address(leader), timeout_s=20) as admin:
            for i in range(8):
                admin.create_topic(f"a{i}", num_partitions=2, replication_factor=1)
            cluster.kill(standby, signal.SIGKILL)
            for i in range(8):
                admin.create_topic(f"b{i}", num_partitions=2, replication_factor=1)
        cluster.start(standby)
        expected = sorted([f"a{i}" for i in range(8)] + [f"b{i}" for i in range(8)])

        def standby_caught_up():
            stream = cluster.controller(standby).FetchMetadata(
                controller_pb2.FetchMetadataRequest(from_offset=0), timeout=10
            )
            image = None
            for response in stream:
                if response.snapshot:
                    image = MetadataImage.from_snapshot(response.snapshot)
                assert image is not None, "a restarted controller answers offset 0 with a snapshot first"
                for entry in response.entries:
                    image.apply_batch(decode_batch(entry.batch), entry.offset)
                if sorted(image.topic_ids) == expected:
                    stream.cancel()
                    return image
            return None

        image = wait_until(standby_caught_up, 30, "the restarted standby to serve every topic")
        image.invariants()
        names = [t.name for t in describe(cluster, standby, []).topics]
        assert names == expected
    except BaseException:
        print(cluster.log_text())
        raise
