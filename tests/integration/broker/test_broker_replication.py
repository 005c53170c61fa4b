"""Replication across real broker processes (3 controllers + 3 brokers, one cluster for the module).

architecture.md "Core rules": the leader's HW is min(LEO over the ISR); a follower that does not catch up
within replica.lag.time.max.ms leaves the ISR (AlterPartition) and rejoins once its LEO reaches the
HW; acks=all needs |ISR| >= min.insync.replicas and is answered when the HW passes the batch; a
replica that becomes follower truncates by leader epoch, never to its HW. The scenarios are module
fixtures that leave every node running and every ISR full; the tests assert their outcomes, in any
order; the file comparison stops the cluster cleanly and starts it again.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from broker_cluster import BrokerCluster, read_log_file, running_cluster, wait_for

from proto.errors import ErrorCode
from storage.record_batch import decode_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BROKERS = (101, 102, 103)
RETRIABLE_PRODUCE = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(Path(tmp_path_factory.mktemp("broker-replication"))) as bc:
        yield bc


class Workload:
    """A producer thread (acks=all, a new value per request, never retried) and a consumer thread
    (reads the committed log from the current leader), both following leader changes."""

    def __init__(self, cluster: BrokerCluster, topic: str) -> None:
        self.cluster = cluster
        self.topic = topic
        self.acked: dict[int, bytes] = {}  # offset -> value, acknowledged acks=all
        self.seen: dict[int, bytes] = {}  # offset -> value, returned to the consumer (below the HW)
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.leader = cluster.leader(topic)
        self._threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]

    def __enter__(self) -> Workload:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(30)
        assert not any(t.is_alive() for t in self._threads), "workload threads did not stop"

    def _refresh_leader(self) -> None:
        for broker_id in BROKERS:
            if not self.cluster.cluster.is_running(self.cluster.broker(broker_id)):
                continue
            try:
                md = self.cluster.metadata(broker_id, self.topic)
            except OSError:  # the broker is down, or did not answer in time
                continue
            if md is not None and md.leader_id > 0:
                self.leader = md.leader_id
                return
        time.sleep(0.05)

    def _produce(self) -> None:
        n = 0
        while not self.stop.is_set():
            values = [f"v{n}-{i}".encode() for i in range(3)]
            n += 1
            try:
                result = self.cluster.produce(self.leader, self.topic, values, timeout_ms=3000)
            except OSError:  # the broker is down, or did not answer in time
                self._refresh_leader()
                continue
            if result.code == ErrorCode.NONE:
                for i, value in enumerate(values):
                    self.acked[result.base_offset + i] = value
            elif result.code in RETRIABLE_PRODUCE:
                self._refresh_leader()
            else:
                self.errors.append(f"produce: {result.code.name} {result.message}")

    def _consume(self) -> None:
        position = 0
        while not self.stop.is_set():
            try:
                data = self.cluster.fetch(self.leader, self.topic, position, max_wait_ms=200)
            except OSError:  # the broker is down, or did not answer in time
                self._refresh_leader()
                continue
            if data.error_code != ErrorCode.NONE:
                self._refresh_leader()
                continue
            for record in decode_records(data.records):
                if record.offset >= position:
                    assert record.offset < data.high_watermark, "a consumer got a record at or above the HW"
                    self.seen[record.offset] = record.value
                    position = record.offset + 1

    def acked_count(self) -> int:
        return len(self.acked)

    def wait_progress(self, more: int, timeout_s: float = 30.0) -> None:
        target = self.acked_count() + more
        wait_for(lambda: self.acked_count() >= target, timeout_s, f"{more} more acknowledged records")


def _verify(cluster: BrokerCluster, topic: str, workload: Workload) -> None:
    """Every acked record at its offset, offsets contiguous, nothing a consumer saw was truncated."""
    leader = cluster.leader(topic)
    final = cluster.read_all(leader, topic)
    offsets = [offset for offset, _ in final]
    assert offsets == list(range(len(final))), "offsets are not contiguous"
    log = dict(final)
    lost = {o: v for o, v in workload.acked.items() if log.get(o) != v}
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {sorted(lost.items())[:3]}"
    changed = {o: v for o, v in workload.seen.items() if log.get(o) != v}
    assert not changed, (
        f"consumers saw {len(changed)} records later truncated, e.g. {sorted(changed.items())[:3]}"
    )
    assert len(set(log.values())) == len(log), "a record appears twice"
    assert not workload.errors, workload.errors[:5]


# The three scenarios are module fixtures, not tests that must run first: each test that checks a
# scenario's outcome asks for it, so the tests pass alone and in any order (issue 14 §3); a scenario
# runs once per module whichever test asks first. Assertions inside a scenario are about its
# intermediate states; its outcome is asserted by the tests.


@dataclass(frozen=True)
class Scenario:
    topic: str
    replicas: tuple[int, ...]
    workload: Workload | None = None


def _wait_full_isrs(cluster: BrokerCluster) -> None:
    """Every scenario topic that exists back to a full ISR: the next scenario starts from a healthy one."""
    for topic in sorted({t.name for t in cluster.admin.list_topics()} & {"failover", "stall", "diverge"}):
        replicas = set(cluster.describe(topic).replicas)
        cluster.wait_isr(topic, replicas, timeout_s=45)


@pytest.fixture(scope="module")
def failover(cluster: BrokerCluster) -> Scenario:
    """SIGKILL the partition leader three times while producing acks=all (once together with the active
    controller); killed brokers restart and rejoin the ISR."""
    topic = "failover"
    cluster.create_topic(topic, min_insync_replicas="2")
    with Workload(cluster, topic) as workload:
        workload.wait_progress(30)
        for round_ in range(3):
            leader = cluster.leader(topic)
            victims = [cluster.broker(leader)]
            if round_ == 1:
                victims.append(cluster.active_controller())
            for spec in victims:
                cluster.cluster.kill_node(spec)
            new_leader = cluster.leader(topic)
            assert new_leader != leader
            workload.wait_progress(30)  # acks=all keeps working with 2 in sync
            for spec in victims:
                cluster.cluster.start_node(spec)
            cluster.wait_isr(topic, set(BROKERS), timeout_s=45)
            workload.wait_progress(15)
    _wait_full_isrs(cluster)
    return Scenario(topic, BROKERS, workload)


def test_acked_records_survive_leader_kills(cluster: BrokerCluster, failover: Scenario) -> None:
    """After the leader kills of ``failover`` (killed brokers truncate by epoch, catch up and rejoin the
    ISR) every acknowledged record is at its offset, offsets are contiguous, and no consumer saw a
    record that was later truncated. Preferred election then moves the leadership back."""
    topic, workload = failover.topic, failover.workload
    assert workload is not None
    _verify(cluster, topic, workload)
    assert len(workload.acked) >= 150
    wait_for(lambda: cluster.admin.elect_leaders("preferred", [(topic, 0)]) is not None
             and cluster.describe(topic).leader == 101, 30, "preferred leader 101 back")  # fmt: skip
    assert cluster.leader(topic) == 101


@pytest.fixture(scope="module")
def stall(cluster: BrokerCluster) -> Scenario:
    """SIGSTOP one follower: the HW stops at its LEO until replica.lag.time.max.ms drops it from the
    ISR, then moves on. With only the leader left in sync, acks=all gets NOT_ENOUGH_REPLICAS (nothing
    appended) and acks=1 still works, but the HW does not move below min.insync.replicas (KAFKA-15583).
    SIGCONT: the followers catch up and rejoin the ISR, and the HW moves on."""
    topic = "stall"
    cluster.create_topic(topic, min_insync_replicas="2")
    leader = cluster.leader(topic)
    first, second = [b for b in BROKERS if b != leader]
    assert cluster.produce(leader, topic, [b"r0", b"r1"]).code == ErrorCode.NONE
    hw = cluster.high_watermark(leader, topic)
    assert hw == 2
    stopped = []
    try:
        cluster.cluster.signal_node(cluster.broker(first), signal.SIGSTOP)
        stopped.append(first)
        r = cluster.produce(leader, topic, [b"r2", b"r3"], acks=1)
        assert (r.code, r.base_offset) == (ErrorCode.NONE, 2)
        assert cluster.high_watermark(leader, topic) == hw, "HW moved past the stalled follower's LEO"
        cluster.wait_isr(topic, {leader, second}, timeout_s=20)
        wait_for(lambda: cluster.high_watermark(leader, topic) == 4, 10, "HW past the stalled follower")
        assert cluster.produce(leader, topic, [b"r4"]).code == ErrorCode.NONE  # acks=all, ISR of 2

        cluster.cluster.signal_node(cluster.broker(second), signal.SIGSTOP)
        stopped.append(second)
        cluster.wait_isr(topic, {leader}, timeout_s=20)
        refused = cluster.produce(leader, topic, [b"refused"])
        assert refused.code == ErrorCode.NOT_ENOUGH_REPLICAS, refused
        one = cluster.produce(leader, topic, [b"r5"], acks=1)
        assert (one.code, one.base_offset) == (ErrorCode.NONE, 5), "NOT_ENOUGH_REPLICAS appended something"
        time.sleep(0.5)  # not a wait for a condition: a window in which the HW must NOT move
        assert cluster.high_watermark(leader, topic) == 5, "HW moved with the ISR below min.insync.replicas"
    finally:
        for broker_id in stopped:
            cluster.cluster.signal_node(cluster.broker(broker_id), signal.SIGCONT)
    _wait_full_isrs(cluster)
    wait_for(lambda: cluster.high_watermark(leader, topic) == 6, 10, "HW once the ISR is back")
    return Scenario(topic, BROKERS)


def test_stalled_follower_holds_the_hw_until_it_leaves_the_isr(
    cluster: BrokerCluster, stall: Scenario
) -> None:
    """After ``stall`` (its intermediate HW and ISR checks) the followers rejoined: acks=all works again
    and the log holds exactly the records that were acknowledged, in order."""
    leader = cluster.leader(stall.topic)
    assert cluster.produce(leader, stall.topic, [b"r6"]).code == ErrorCode.NONE
    assert [v for _, v in cluster.read_all(leader, stall.topic)] == [f"r{i}".encode() for i in range(7)]


@pytest.fixture(scope="module")
def diverge(cluster: BrokerCluster) -> Scenario:
    """KIP-101 scenario 2: leader A holds an uncommitted offset 1 that follower B lacks; both die; B comes
    back first, leads a new epoch and writes a different offset 1; then A returns as follower."""
    topic = "diverge"
    # B stalls first, so its session expires first and the controller drops it from the ISR: with
    # clean elections KRaft's fencing keeps B from leading at all. The topic allows unclean election
    # so that B may lead without A's offset 1 — the divergence that leader epochs must repair.
    cluster.create_topic(topic, rf=2, min_insync_replicas="1", unclean_leader_election_enable="true")
    a, b = 101, 102
    assert cluster.leader(topic) == a
    assert cluster.produce(a, topic, [b"r0"]).code == ErrorCode.NONE  # acks=all: B has it
    try:
        cluster.cluster.signal_node(cluster.broker(b), signal.SIGSTOP)
        only_on_a = cluster.produce(a, topic, [b"only-on-A"], acks=1)
        assert (only_on_a.code, only_on_a.base_offset) == (ErrorCode.NONE, 1)
    finally:
        for broker_id in (a, b):
            cluster.cluster.kill_node(cluster.broker(broker_id))
    # Both fenced (sessions expired) before B returns: a broker that re-registers while its session
    # is alive first leaves every ISR (its new incarnation lost its memory) and could not lead.
    wait_for(lambda: {x.broker_id for x in cluster.admin.describe_cluster().brokers if x.fenced} >= {a, b},
             20, "both brokers fenced")  # fmt: skip
    cluster.cluster.start_node(cluster.broker(b))
    assert cluster.leader(topic, timeout_s=45) == b
    from_b = cluster.produce(b, topic, [b"r1-from-B"], acks=1)
    assert (from_b.code, from_b.base_offset) == (ErrorCode.NONE, 1)
    wait_for(lambda: cluster.high_watermark(b, topic) == 2, 20, "B's HW past its own offset 1")
    cluster.cluster.start_node(cluster.broker(a))
    _wait_full_isrs(cluster)
    return Scenario(topic, (a, b))


def test_kip101_diverged_logs_after_two_replicas_fail_together(
    cluster: BrokerCluster, diverge: Scenario
) -> None:
    """A learned from B's diverging epoch that its epoch ended at 1, truncated its offset 1 and took B's
    record (both replicas' files are compared by test_replicas_hold_identical_logs)."""
    values = [v for _, v in cluster.read_all(cluster.leader(diverge.topic), diverge.topic)]
    assert values == [b"r0", b"r1-from-B"]


def test_replicas_hold_identical_logs(
    cluster: BrokerCluster, failover: Scenario, stall: Scenario, diverge: Scenario
) -> None:
    """After a clean stop every replica's log holds the same records at every offset below the HW
    (each ISR member's LEO reached it: HW = min LEO over the ISR, and every ISR is full here). The
    cluster is started again afterwards, so that this test need not be the module's last."""
    replicas = {s.topic: s.replicas for s in (failover, stall, diverge)}
    hws = {t: cluster.high_watermark(cluster.leader(t), t) for t in replicas}
    graceful = cluster.cluster.down(timeout_s=20.0)
    assert all(graceful.values()), graceful
    for t, brokers in replicas.items():
        logs = {
            b: read_log_file(cluster.cluster.data_dir / f"broker-{b}" / f"{t}-0", hws[t]) for b in brokers
        }
        first = logs[brokers[0]]
        assert len(first) == hws[t], f"{t}: {len(first)} records below HW {hws[t]}"
        assert all(log == first for log in logs.values()), f"{t}: replicas differ below HW {hws[t]}"
    cluster.cluster.start()
    cluster.cluster.wait_until(
        lambda: all(cluster.cluster.healthy(n) for n in cluster.cluster.nodes), 60, "every node healthy again"
    )
    _wait_full_isrs(cluster)
