"""The cluster id on a real 3 + 3 cluster: written once by the first active controller, the same from
the gRPC admin API, from every broker's Metadata and DescribeCluster (raw Kafka protocol, so each
broker is asked itself) and from confluent-kafka (``list_topics().cluster_id``,
``AdminClient.describe_cluster()``); recorded in every node's meta.properties; unchanged after the
active controller restarts; and a broker or controller whose data directory belongs to another cluster
refuses to run (Kafka's INCONSISTENT_CLUSTER_ID). Every process is stopped by pid in the fixture's
``finally`` (``running_cluster``) or here."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from metadata.records import cluster_id_problem
from proto.kafka import messages as m
from proto.runtime import ready_file
from proto.runtime.meta_properties import META_PROPERTIES, read_cluster_id
from pykraft.cluster import NodeSpec
from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster, wait_for
from tests.kafka_call import kafka_call

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEADLINE_S = 60.0
SOCKET_TIMEOUT_S = 10.0
OTHER = "q1Sh-9_ISia_zwGINzRvyQ"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("cluster-id"))) as bc:
        yield bc


def answers_of(bc: BrokerCluster) -> dict[str, set[str]]:
    """Every broker's cluster id in Metadata v4 (kcat's), v12, and DescribeCluster v0."""
    out: dict[str, set[str]] = {}
    for spec in bc.cluster.broker_nodes:
        ids = {
            kafka_call(spec.kafka_address, m.MetadataRequest(topics=[]), v, SOCKET_TIMEOUT_S).cluster_id
            for v in (4, 12)
        }
        ids.add(kafka_call(spec.kafka_address, m.DescribeClusterRequest(), 0, SOCKET_TIMEOUT_S).cluster_id)
        out[spec.name] = ids
    return out


def confluent_cluster_ids(bc: BrokerCluster) -> set[str]:
    """What confluent-kafka shows, bootstrapped from each broker in turn."""
    ids = set()
    for spec in bc.cluster.broker_nodes:
        admin = AdminClient({"bootstrap.servers": spec.kafka_address})
        ids.add(admin.list_topics(timeout=DEADLINE_S).cluster_id)
        ids.add(admin.describe_cluster(request_timeout=DEADLINE_S).result().cluster_id)
    return ids


def node_dir(bc: BrokerCluster, spec: NodeSpec) -> Path:
    return bc.cluster.data_dir / spec.name


def test_one_cluster_id_everywhere_and_after_a_controller_restart(cluster: BrokerCluster) -> None:
    """Kafka: one Uuid per cluster, identical on every node, returned by Metadata and DescribeCluster."""
    cluster_id = cluster.admin.describe_cluster().cluster_id
    assert cluster_id_problem(cluster_id) is None, cluster_id
    wait_for(
        lambda: all(ids == {cluster_id} for ids in answers_of(cluster).values()),
        DEADLINE_S,
        f"every broker to answer cluster id {cluster_id}",
    )
    assert confluent_cluster_ids(cluster) == {cluster_id}
    for spec in cluster.cluster.nodes:
        wait_for(lambda s=spec: read_cluster_id(node_dir(cluster, s)) == cluster_id, DEADLINE_S,
                 f"{spec.name}'s meta.properties")  # fmt: skip

    active = cluster.active_controller()
    assert cluster.cluster.stop_node(active), f"{active.name} did not stop gracefully"
    cluster.cluster.start_node(active)
    wait_for(lambda: cluster.cluster.healthy(active), DEADLINE_S, f"{active.name} healthy again")
    wait_for(lambda: cluster.active_controller().name != "", DEADLINE_S, "an active controller")
    assert cluster.admin.describe_cluster().cluster_id == cluster_id
    assert all(ids == {cluster_id} for ids in answers_of(cluster).values())
    assert confluent_cluster_ids(cluster) == {cluster_id}


def test_broker_of_another_cluster_refuses_to_start(cluster: BrokerCluster) -> None:
    """A broker whose meta.properties names another cluster is refused at registration
    (INCONSISTENT_CLUSTER_ID) and exits 2; with its own file back it rejoins."""
    spec = cluster.broker(103)
    path = node_dir(cluster, spec) / META_PROPERTIES
    assert cluster.cluster.stop_node(spec), "broker 103 did not stop gracefully"
    original = path.read_text()
    path.write_text(original.replace(f"cluster.id={read_cluster_id(path.parent)}", f"cluster.id={OTHER}"))
    try:
        cluster.cluster.start_node(spec)
        code = wait_for(lambda: cluster.cluster.exit_code(spec), DEADLINE_S, "broker 103 to exit")
        assert code == 2
        log = cluster.cluster.log_path(spec).read_text()
        assert "INCONSISTENT_CLUSTER_ID" in log and OTHER in log
        ready = ready_file.read(cluster.cluster.data_dir / spec.name)
        assert ready is not None and (ready.pid, ready.state) == (spec.pid, ready_file.LISTENING), ready
    finally:
        path.write_text(original)
        if cluster.cluster.exit_code(spec) is None:
            cluster.cluster.kill_node(spec)
    cluster.cluster.start_node(spec)
    wait_for(
        lambda: cluster.cluster.healthy(spec), DEADLINE_S, "broker 103 healthy with its own meta.properties"
    )


def test_controller_given_another_cluster_id_refuses_to_start(cluster: BrokerCluster, tmp_path: Path) -> None:
    """Kafka's format check: a controller whose data directory belongs to one cluster and is given
    ``--cluster-id`` of another exits 2 naming both, before it serves anything."""
    controller = cluster.cluster.controller_nodes[0]
    data_dir = tmp_path / "controller"
    data_dir.mkdir()
    (data_dir / META_PROPERTIES).write_text((node_dir(cluster, controller) / META_PROPERTIES).read_text())
    cmd = [sys.executable, "-m", "pykraft.cli", "controller", "--node-id", "1", "--listen", "127.0.0.1:0",
           "--voters", "1@127.0.0.1:1", "--data-dir", str(data_dir), "--cluster-id", OTHER]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = proc.communicate(timeout=DEADLINE_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
    assert proc.returncode == 2, stderr
    assert "INCONSISTENT_CLUSTER_ID" in stderr and OTHER in stderr and "Traceback" not in stderr
