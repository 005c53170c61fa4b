"""Replication liveness under load, across real broker processes (issue 24 §1; 3 controllers + 3
brokers, one cluster for the module).

- A follower bounced under a continuous acks=1 producer rejoins the ISR within
  replica.lag.time.max.ms and a few fetches: the leader's HW waits for a follower that is caught up
  and eligible to join (Kafka's ``shouldWaitForReplicaToJoinIsr``). Before, with the ISR = {leader},
  the HW moved to the leader's LEO on every append and a follower's fetch offset, always one append
  behind, never reached it.
- After a replicated topic is deleted under load, the brokers' CPU use (their own, from
  ``/proc/<pid>/stat``) returns to its idle level: a follower forgets the deleted partitions in its
  incremental fetch session by the topic id it fetched them with, and the leader drops them by that id
  (Kafka's FetchSessionHandler / FetchSession). Before, the forget named the topic by an id looked up
  in current metadata (none: the topic is gone) and the leader ignored it, so every fetch of the
  session was answered at once with an error for the deleted topic: both brokers spun.

Every connection between nodes crosses the chaos proxy (``tests.chaos.proxy``), which delays the
followers' links to the leader: replication over a slower link than the producers', so that appends
reach the leader more often than a follower's fetches do without loading a 2-core machine to the point
where its processes answer late (a saturated leader answers everything late, heartbeats included).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_cluster import FAST_OVERRIDES, BrokerCluster, check_fetch_wait_below_lag, wait_for
from confluent_kafka import Producer

from pykraft.cli_cluster import wait_ready
from pykraft.cluster import LocalCluster
from tests.chaos.cluster import ProxyControl, start_proxied

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BROKERS = (101, 102, 103)
OVERRIDES = {**FAST_OVERRIDES, "broker.session.timeout.ms": "10000"}
LINK_DELAY_MS = 10  # each way, between each follower and the leader
LAG_S = int(FAST_OVERRIDES["replica.lag.time.max.ms"]) / 1000
FETCH_WAIT_S = int(FAST_OVERRIDES["replica.fetch.max.wait.ms"]) / 1000


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerCluster, ProxyControl]]:
    check_fetch_wait_below_lag(OVERRIDES)
    data_dir = Path(tmp_path_factory.mktemp("replication-liveness"))
    cluster, proxy = start_proxied(
        lambda: LocalCluster(data_dir, controllers=3, brokers=3, overrides=dict(OVERRIDES)), data_dir
    )
    bc = BrokerCluster(cluster)
    try:
        wait_ready(cluster, 60.0, progress=None)
        yield bc, proxy
    finally:
        bc.close()
        for spec in cluster.nodes:  # SIGSTOPped nodes cannot handle SIGTERM: wake them first
            cluster.signal_node(spec, signal.SIGCONT)
        cluster.down(timeout_s=15.0)
        for spec in cluster.nodes:
            cluster.kill_node(spec)
        proxy.close()


class FloodProducer:
    """``clients`` confluent-kafka acks=1 producers, one thread each, writing 100-byte records with
    ``pause_s`` between two: appends reach the leader more often than a follower's fetches over the
    delayed link do, so one lands between any two of them."""

    def __init__(
        self, cluster: BrokerCluster, topic: str, clients: int = 2, pause_s: float = 0.0, partitions: int = 1
    ) -> None:
        self.pause_s = pause_s
        self.partitions = partitions
        self.purge_on_exit = False  # drop what is still queued (a deleted topic's records never go)
        settings = {
            "bootstrap.servers": cluster.cluster.kafka_bootstrap, "acks": "1", "linger.ms": 0,
            "enable.idempotence": False, "queue.buffering.max.messages": 20_000,
        }  # fmt: skip
        self.producers = [Producer(settings) for _ in range(clients)]
        self.topic = topic
        self.delivered = 0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(p,)) for p in self.producers]

    def __enter__(self) -> FloodProducer:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(30)
        assert not any(t.is_alive() for t in self._threads), "the producer threads did not stop"
        for producer in self.producers:
            if self.purge_on_exit:
                producer.purge()
            producer.flush(30)

    def _delivered(self, err: object, _msg: object) -> None:
        with self._lock:
            if err is None:
                self.delivered += 1
            elif len(self.failures) < 5:
                self.failures.append(str(err))

    def _run(self, producer: Producer) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                producer.produce(
                    self.topic, value=b"x" * 100, partition=n % self.partitions, on_delivery=self._delivered
                )
            except BufferError:  # the local queue is full: let librdkafka send
                producer.poll(0.005)
                continue
            producer.poll(0)
            if self.pause_s:
                time.sleep(self.pause_s)

    def rate(self, seconds: float) -> float:
        """Records delivered per second over the next ``seconds``."""
        before = self.delivered
        time.sleep(seconds)  # a measurement window, not a wait for a condition
        return (self.delivered - before) / seconds


# After SIGCONT a follower catches up the backlog of its pause and joins: replica.lag.time.max.ms plus
# a few fetch rounds, with room for a loaded 2-core machine.
REJOIN_BUDGET_S = LAG_S + 10 * FETCH_WAIT_S + 2.0


def test_bounced_followers_rejoin_the_isr_under_a_continuous_acks1_producer(
    proxied: tuple[BrokerCluster, ProxyControl],
) -> None:
    """Both followers of an RF-3 topic with min.insync.replicas=1 are paused (SIGSTOP) until the ISR is
    the leader alone, then resumed while acks=1 producers keep writing: both are back in the ISR within
    replica.lag.time.max.ms and a few fetches, and stay there."""
    cluster, proxy = proxied
    topic = "bounce"
    cluster.create_topic(topic, min_insync_replicas="1")
    leader = cluster.leader(topic)
    followers = [b for b in BROKERS if b != leader]
    proxy.delay([(f"broker-{b}", f"broker-{leader}") for b in followers], LINK_DELAY_MS)
    stopped: list[int] = []
    with FloodProducer(cluster, topic, pause_s=0.001) as flood:
        wait_for(lambda: flood.delivered > 1_000, 30, "the producers running")
        try:
            for broker_id in followers:
                cluster.cluster.signal_node(cluster.broker(broker_id), signal.SIGSTOP)
                stopped.append(broker_id)
            wait_for(lambda: set(cluster.describe(topic).isr) == {leader}, 30, "the ISR down to the leader")
        finally:
            for broker_id in stopped:
                cluster.cluster.signal_node(cluster.broker(broker_id), signal.SIGCONT)
        resumed = time.monotonic()
        wait_for(
            lambda: set(cluster.describe(topic).isr) == set(BROKERS), REJOIN_BUDGET_S,
            f"both followers back in the ISR within {REJOIN_BUDGET_S:.1f} s of resuming, under acks=1 "
            "producers",
        )  # fmt: skip
        rejoined_s = time.monotonic() - resumed
        rate = flood.rate(2.0)
        assert cluster.describe(topic).leader == leader, "the leadership moved: the test saw something else"
        assert set(cluster.describe(topic).isr) == set(BROKERS), "a follower left the ISR again under load"
    assert not flood.failures, flood.failures
    assert rate > 1_000, f"the producers slowed to {rate:.0f} records/s: the leader was not under load"
    print(f"rejoined after {rejoined_s:.2f} s (budget {REJOIN_BUDGET_S:.1f} s) at {rate:.0f} records/s")


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CPU_WINDOW_S = 2.0
# An idle broker's own CPU use varies with what else the machine runs; a spinning pair of brokers uses
# tenths of a CPU-second per second each. "Back to idle": within this factor of the idle window, plus
# a floor for noise.
IDLE_FACTOR, IDLE_SLACK = 2.0, 0.05


def cpu_seconds(pid: int) -> float:
    """The process' user + system CPU time so far (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_rates(pids: dict[int, int], window_s: float = CPU_WINDOW_S) -> dict[int, float]:
    """CPU-seconds per second of each broker over the next ``window_s``."""
    before = {b: cpu_seconds(pid) for b, pid in pids.items()}
    time.sleep(window_s)  # the measurement window, not a wait for a condition
    return {b: (cpu_seconds(pid) - before[b]) / window_s for b, pid in pids.items()}


def test_idle_brokers_cpu_returns_to_idle_after_a_replicated_topic_is_deleted_under_load(
    proxied: tuple[BrokerCluster, ProxyControl],
) -> None:
    """A 3-partition RF-3 topic is deleted while acks=1 producers write to it, beside another one that
    stays; once the producers stop, each broker's CPU use is back at the level it had when idle before,
    within 30 s."""
    cluster, proxy = proxied
    proxy.delay([], 0)
    # Every broker keeps following a partition on every other one after the delete: their fetch
    # sessions (one per follower and leader) go on, with or without the deleted partitions.
    cluster.create_topic("kept", partitions=3, min_insync_replicas="1")
    pids = {b: cluster.broker(b).pid for b in BROKERS}
    assert all(pids.values()), pids
    idle = cpu_rates(pids)
    topic = "doomed"
    cluster.create_topic(topic, partitions=3, min_insync_replicas="1")
    with FloodProducer(cluster, topic, pause_s=0.001, partitions=3) as flood:
        flood.purge_on_exit = True
        wait_for(lambda: flood.delivered > 2_000, 30, "the producers running")
        loaded = cpu_rates(pids, 1.0)
        cluster.admin.delete_topics([topic])
        wait_for(lambda: topic not in {t.name for t in cluster.admin.list_topics()}, 30, f"{topic} deleted")
    limit = {b: IDLE_FACTOR * idle[b] + IDLE_SLACK for b in BROKERS}
    seen: list[dict[int, float]] = []

    def back_to_idle() -> bool:
        seen.append(cpu_rates(pids))
        return all(seen[-1][b] <= limit[b] for b in BROKERS)

    try:
        wait_for(back_to_idle, 30, "every broker's CPU back to its idle level", interval_s=0)
    finally:
        after = "; ".join(_fmt(r) for r in seen)
        print(f"CPU-s/s idle {_fmt(idle)}; producing {_fmt(loaded)}; after the delete {after}")


def _fmt(rates: dict[int, float]) -> str:
    return " ".join(f"{b}:{rate:.3f}" for b, rate in sorted(rates.items()))
