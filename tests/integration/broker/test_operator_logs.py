"""The logs an operator reads, from a real 3 + 3 cluster (issue 17 §2).

Brokers: every refused Kafka request is one WARN line ``event=request_refused`` with the client's
address and client.id, the API, the partition and the error name — once per client and error within
``log.refused.requests.interval.ms`` (a repeat is counted, not logged, and the count said in a
summary line once the interval is over). Bad requests are sent raw
(``tests.kafka_call``), each test with its own client.id, so that the lines expected are exactly
known: a Produce to a topic that does not exist, an acks=all Produce below ``min.insync.replicas``
(NOT_ENOUGH_REPLICAS), and a Fetch with a leader epoch older than the leader's (FENCED_LEADER_EPOCH).

Controllers: a topic create, config change and delete, and a broker's fence (SIGSTOP past the session
timeout) and unfence each give the active controller's ``event=`` line, once across all controllers.
Every wait has a deadline; processes are stopped by pid in ``running_cluster``'s ``finally``.
"""

from __future__ import annotations

import shlex
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from proto.errors import ErrorCode
from proto.kafka import messages as m
from pykraft.cluster import NodeSpec
from storage.record_batch import build_batch
from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster, wait_for
from tests.kafka_call import KafkaSocket

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEADLINE_S = 60.0
# Long enough that a test's repeated requests fall in one window even on a loaded machine, short
# enough to see the summary line.
REFUSAL_INTERVAL_MS = 5_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("operator-logs")), log_level="INFO",
                         **{"log.refused.requests.interval.ms": str(REFUSAL_INTERVAL_MS)}) as bc:
        yield bc


def log_lines(bc: BrokerCluster, spec: NodeSpec) -> list[dict[str, str]]:
    """The node's logfmt lines, split into fields (other lines — the launcher's handshake — skipped)."""
    out = []
    for line in bc.cluster.log_path(spec).read_text(errors="replace").splitlines():
        if line.startswith("ts="):
            out.append(dict(item.split("=", 1) for item in shlex.split(line)))
    return out


def refusals(bc: BrokerCluster, broker_id: int, client_id: str) -> list[tuple[str, ...]]:
    return [
        (x["level"], x["api"], x["code"], x.get("topic", ""), x.get("partition", ""))
        for x in log_lines(bc, bc.broker(broker_id))
        if x.get("event") == "request_refused" and x.get("client_id") == client_id
    ]


def calls(address: str, client_id: str, version: int, requests: list) -> list:
    """Send ``requests`` on one connection with ``client_id``, in order; their decoded answers."""
    with KafkaSocket(address, DEADLINE_S, client_id) as conn:
        return [conn.call(request, version, DEADLINE_S) for request in requests]


def produce(topic: str, acks: int) -> m.ProduceRequest:
    part = m.ProduceRequestPartitionProduceData(index=0, records=build_batch([(None, b"v", (), 0)]))
    data = [m.ProduceRequestTopicProduceData(name=topic, partition_data=[part])]
    return m.ProduceRequest(acks=acks, timeout_ms=5000, topic_data=data)


def produce_code(answer: m.ProduceResponse) -> int:
    return answer.responses[0].partition_responses[0].error_code


def test_produce_to_a_missing_topic_is_one_warn_line_per_client_and_error(cluster: BrokerCluster) -> None:
    client = "logs-missing-topic"
    answers = calls(cluster.broker(101).kafka_address, client, 9, [produce("no-such-topic", acks=1)] * 3)
    assert [produce_code(a) for a in answers] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 3
    want = [("WARNING", "Produce", "UNKNOWN_TOPIC_OR_PARTITION", "no-such-topic", "0")]
    wait_for(lambda: refusals(cluster, 101, client) == want, DEADLINE_S, f"the WARN line of {client}")
    [line] = [x for x in log_lines(cluster, cluster.broker(101)) if x.get("client_id") == client]
    assert line["client"].startswith("127.0.0.1:") and line["logger"] == "broker.kafka.handlers.refusals"


def test_repeats_are_counted_in_a_summary_line_once_the_interval_is_over(cluster: BrokerCluster) -> None:
    client = "logs-summary"
    calls(cluster.broker(102).kafka_address, client, 9, [produce("no-such-topic", acks=1)] * 3)

    def summary() -> list[dict[str, str]]:
        return [x for x in log_lines(cluster, cluster.broker(102))
                if x.get("event") == "requests_refused_summary" and x.get("client_id") == client]  # fmt: skip

    [line] = wait_for(summary, DEADLINE_S, f"the summary line of {client}")
    assert (line["level"], line["code"], line["suppressed"], line["interval_ms"]) == (
        "WARNING", "UNKNOWN_TOPIC_OR_PARTITION", "2", str(REFUSAL_INTERVAL_MS),
    )  # fmt: skip
    assert len(refusals(cluster, 102, client)) == 1


def test_not_enough_replicas_is_logged_with_the_brokers_message(cluster: BrokerCluster) -> None:
    cluster.create_topic("thin", partitions=1, rf=2, min_insync_replicas="2")
    client = "logs-not-enough-replicas"
    with cluster.leader_alone_in_isr("thin") as leader:
        address = cluster.broker(leader).kafka_address
        [answer] = calls(address, client, 9, [produce("thin", acks=-1)])
    assert produce_code(answer) == ErrorCode.NOT_ENOUGH_REPLICAS
    want = [("WARNING", "Produce", "NOT_ENOUGH_REPLICAS", "thin", "0")]
    wait_for(lambda: refusals(cluster, leader, client) == want, DEADLINE_S, f"the WARN line of {client}")
    [line] = [x for x in log_lines(cluster, cluster.broker(leader)) if x.get("client_id") == client]
    assert "min.insync.replicas" in line["message"]


def controller_events(bc: BrokerCluster, event: str, **match: str) -> list[tuple[str, dict[str, str]]]:
    """``(controller name, fields)`` of every ``event`` line with ``match``'s fields, in all controllers."""
    return [
        (spec.name, x)
        for spec in bc.cluster.controller_nodes
        for x in log_lines(bc, spec)
        if x.get("event") == event and all(x.get(k) == v for k, v in match.items())
    ]


def wait_event(bc: BrokerCluster, event: str, **match: str) -> dict[str, str]:
    """The one controller line of ``event`` (waited for); a second one on any controller fails."""
    wait_for(lambda: controller_events(bc, event, **match), DEADLINE_S, f"event={event} {match}")
    found = controller_events(bc, event, **match)
    assert len(found) == 1, f"event={event} {match} logged {len(found)} times: {found}"
    return found[0][1]


def test_topic_create_config_change_and_delete_are_controller_events(cluster: BrokerCluster) -> None:
    cluster.create_topic("audited", partitions=2, rf=3)
    created = wait_event(cluster, "topic_created", topic="audited")
    assert (created["partitions"], created["replication_factor"], created["level"]) == ("2", "3", "INFO")
    cluster.admin.alter_configs("topic", "audited", [("retention.ms", "set", "60000")])
    changed = wait_event(cluster, "config_changed", resource="audited", config="retention.ms")
    assert (changed["resource_type"], changed["value"]) == ("topic", "60000")
    cluster.admin.delete_topics(["audited"])
    deleted = wait_event(cluster, "topic_deleted", topic="audited")
    assert deleted["topic_id"] == created["topic_id"]


def test_broker_fence_moves_leadership_and_a_stale_epoch_is_refused(cluster: BrokerCluster) -> None:
    """SIGSTOP the leader of a partition: the controller fences it (WARN broker_session_expired, then
    broker_fenced) and elects another replica; a Fetch with the old leader epoch to the new leader
    is refused with FENCED_LEADER_EPOCH, logged once; after SIGCONT the broker is unfenced."""
    cluster.create_topic("moving", partitions=1, rf=3)
    old_leader = cluster.leader("moving")
    old_epoch = cluster.describe("moving").leader_epoch
    spec = cluster.broker(old_leader)
    before = len(controller_events(cluster, "broker_fenced", broker=str(old_leader)))
    unfenced_before = len(controller_events(cluster, "broker_unfenced", broker=str(old_leader)))
    cluster.cluster.signal_node(spec, signal.SIGSTOP)
    try:
        wait_for(lambda: len(controller_events(cluster, "broker_fenced", broker=str(old_leader))) > before,
                 DEADLINE_S, f"broker {old_leader} fenced")  # fmt: skip
        fenced = controller_events(cluster, "broker_fenced", broker=str(old_leader))[before:]
        assert len(fenced) == 1 and fenced[0][1]["level"] == "WARNING"
        elected = wait_event(cluster, "leader_elected", topic="moving", previous_leader=str(old_leader))
        assert int(elected["leader_epoch"]) == old_epoch + 1 and "unclean" not in elected
        new_leader = int(elected["leader"])
        assert cluster.leader("moving") == new_leader
        client = "logs-stale-epoch"
        part = m.FetchRequestFetchPartition(partition=0, current_leader_epoch=old_epoch, fetch_offset=0,
                                            partition_max_bytes=1 << 16)  # fmt: skip
        topics = [m.FetchRequestFetchTopic(topic="moving", partitions=[part])]
        stale = m.FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 16, session_id=0, session_epoch=-1,
                               topics=topics)  # fmt: skip
        address = cluster.broker(new_leader).kafka_address
        answers = calls(address, client, 12, [stale, stale])
        codes = [a.responses[0].partitions[0].error_code for a in answers]
        assert codes == [ErrorCode.FENCED_LEADER_EPOCH] * 2
        want = [("WARNING", "Fetch", "FENCED_LEADER_EPOCH", "moving", "0")]
        wait_for(lambda: refusals(cluster, new_leader, client) == want, DEADLINE_S,
                 f"the WARN line of {client}")  # fmt: skip
    finally:
        cluster.cluster.signal_node(spec, signal.SIGCONT)
    unfenced = lambda: len(controller_events(cluster, "broker_unfenced", broker=str(old_leader)))  # noqa: E731
    wait_for(lambda: unfenced() > unfenced_before, DEADLINE_S, f"broker {old_leader} unfenced")
    assert controller_events(cluster, "broker_session_expired")
