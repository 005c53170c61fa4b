"""KIP-101 scenario 1 (architecture.md "Leader epochs") with real broker processes: a follower that restarts
with HW < LEO keeps its records — it truncates by leader epoch, never to its HW — so a committed
record survives when that follower then leads.

How the state is reached without a race: ``replica.fetch.max.wait.ms`` is long here. When follower B
appends offset 1 it fetches again at once with LEO 2; that fetch tells leader A that B holds offset 1
(A's HW becomes 2 and the acks=all produce is answered) and then stays parked on A, because no new
record arrives — so B's HW stays 1 until the wait ends. The test reads that state from B's /metrics
before killing B, and fails loudly if the state was not reached. The brokers restart with the usual
short wait (it is the follower's setting): a parked fetch must not delay A's return to the ISR.

Why ``replica.lag.time.max.ms`` is longer than that wait here (Kafka's rule: the fetch wait stays below
the lag time): a follower caught up when its fetch *arrived* at the leader's LEO, so a fetch parked for
longer than the lag time makes B "lagging" the moment A appends, until B's next fetch arrives. With
the usual 1.5 s lag and B's fetch parked since topic creation or the previous produce, a loaded
machine that takes over 1.5 s to reach the next produce and then hits A's ISR-shrink tick (every
lag/2) in that window dropped B and answered NOT_ENOUGH_REPLICAS_AFTER_APPEND. Nothing here needs lag
to move a follower out of the ISR (the controller does it when it fences a killed broker), so the lag
time is twice the parked wait, and the ISR {A, B} is waited for before the first acks=all produce
and again after A returns.

Why unclean leader election: KRaft takes a broker out of every ISR when it re-registers (its new
incarnation may have lost unflushed data), so the restarted B can lead only through an unclean
election once A is gone. That election is the moment KIP-101 is about: whatever B kept is what the
partition keeps. Before KIP-101 B would have truncated to its HW (1) on restart and offset 1 — acked
with acks=all — would be gone for good (A, back as a follower, truncates to B's log). With leader
epochs B keeps it, and A finds no divergence when it returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_cluster import FAST_OVERRIDES, BrokerCluster, read_log_file, running_cluster, value, wait_for

from proto.errors import ErrorCode

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "kip101-restart"
A, B = 101, 102  # assignment order: A leads first
LONG_FETCH_WAIT_MS = "30000"  # B's parked fetch outlives the test's steps up to the kill
LAG_TIME_MS = str(2 * int(LONG_FETCH_WAIT_MS))  # a parked fetch never counts as lag (module docstring)
RECORDS = [b"r0", b"r1"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    data_dir = Path(tmp_path_factory.mktemp("broker-kip101"))
    overrides = {"replica.fetch.max.wait.ms": LONG_FETCH_WAIT_MS, "replica.lag.time.max.ms": LAG_TIME_MS}
    with running_cluster(data_dir, brokers=2, **overrides) as bc:
        yield bc


def offsets_on(cluster: BrokerCluster, broker_id: int) -> tuple[float | None, float | None]:
    """(LEO, HW) of the topic's partition 0 as broker ``broker_id`` reports them on /metrics."""
    labels = {"topic": TOPIC, "partition": "0"}
    spec = cluster.broker(broker_id)
    return (
        value(spec, "pykraft_partition_log_end_offset", **labels),
        value(spec, "pykraft_partition_high_watermark", **labels),
    )


def brokers_fenced(cluster: BrokerCluster) -> set[int]:
    return {b.broker_id for b in cluster.admin.describe_cluster().brokers if b.fenced}


def test_kip101_restarted_follower_keeps_a_committed_record(cluster: BrokerCluster) -> None:
    """KIP-101 scenario 1: A and B hold offsets 0 and 1, A's HW is 2 but B's is 1. B restarts, then A
    dies and B leads: offset 1 (acknowledged with acks=all) is still there, and A, back as a follower,
    keeps it too."""
    cluster.create_topic(TOPIC, rf=2, min_insync_replicas="2", unclean_leader_election_enable="true")
    assert cluster.leader(TOPIC) == A
    cluster.wait_isr(TOPIC, {A, B})  # acks=all with min.insync.replicas=2 needs both in sync
    for offset, record in enumerate(RECORDS):
        produced = cluster.produce(A, TOPIC, [record])  # acks=all: B has it before the answer
        assert (produced.code, produced.base_offset) == (ErrorCode.NONE, offset), produced
    assert cluster.high_watermark(A, TOPIC) == 2
    wait_for(lambda: offsets_on(cluster, B)[0] == 2, 10, "B's LEO 2 on its /metrics")
    assert offsets_on(cluster, B) == (2, 1), (
        "precondition: B holds offset 1 but has not learned HW 2 (its next fetch is parked on A)"
    )

    cluster.cluster.kill_node(cluster.broker(B))  # B "restarts"...
    cluster.cluster.kill_node(cluster.broker(A))  # ...and A dies before B could fetch from it again
    wait_for(lambda: brokers_fenced(cluster) >= {A, B}, 20, "A and B fenced")
    fetch_wait = "replica.fetch.max.wait.ms"
    cluster.cluster.overrides[fetch_wait] = FAST_OVERRIDES[fetch_wait]  # for the restarts below
    cluster.cluster.start_node(cluster.broker(B))
    assert cluster.leader(TOPIC, timeout_s=45) == B
    # B kept offset 1 (its LEO is 2, not its old HW 1). Its ISR {B} is below min.insync.replicas=2, so
    # its HW does not move (KAFKA-15583): consumers read the records once A is back in the ISR.
    assert offsets_on(cluster, B)[0] == 2, "B lost committed offset 1 on restart"

    cluster.cluster.start_node(cluster.broker(A))
    cluster.wait_isr(TOPIC, {A, B}, timeout_s=45)
    wait_for(lambda: cluster.read_all(B, TOPIC) == list(enumerate(RECORDS)), 10, "r0, r1 readable on B")
    produced = cluster.produce(B, TOPIC, [b"r2"])
    assert (produced.code, produced.base_offset) == (ErrorCode.NONE, 2), produced
    expected = [*enumerate(RECORDS), (2, b"r2")]
    assert cluster.read_all(B, TOPIC) == expected
    wait_for(lambda: offsets_on(cluster, A)[0] == 3, 10, "A's LEO 3")
    graceful = cluster.cluster.down(timeout_s=20.0)
    assert all(graceful.values()), graceful
    for broker_id in (A, B):
        directory = cluster.cluster.data_dir / f"broker-{broker_id}" / f"{TOPIC}-0"
        assert read_log_file(directory, 3) == expected, f"broker {broker_id}'s log differs"
