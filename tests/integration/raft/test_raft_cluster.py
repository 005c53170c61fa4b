"""Raft quorums of real ``python -m raft.server`` processes on 127.0.0.1 (issue 3 §5).

Each test names the rule it checks: failover after SIGKILL of the leader with no acknowledged entry
lost (Raft §5.4 Leader Completeness + durability before acknowledgement), a stopped follower
catching up (§5.3), restart from disk (Figure 2 persistent state), PreVote keeping a rejoining node
from disturbing the leader (thesis §9.6), InstallSnapshot for a follower behind the compacted log
(§7), and a corrupt data directory refused at the command line.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from raft_cluster import CALL_TIMEOUT_S, ELECTION_TIMEOUT_MS, ROOT, RaftCluster, wait_until

from proto import raft_pb2
from proto.errors import ErrorCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FAILOVER_LIMIT_S = 2.0


class SteadyProposer(threading.Thread):
    """Proposes numbered entries one at a time, following the leader; records every acknowledgement."""

    def __init__(self, cluster: RaftCluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.acked: list[tuple[int, bytes, float]] = []  # (index, data, monotonic time of the ack)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        seq = 0
        try:
            while not self.stop_event.is_set():
                data = f"entry-{seq}".encode()
                first, _ = self.cluster.propose_committed([data])
                self.acked.append((first, data, time.monotonic()))
                seq += 1
        except BaseException as exc:  # reported by the test
            self.error = exc

    def finish(self) -> list[tuple[int, bytes]]:
        self.stop_event.set()
        self.join(timeout=30)
        assert self.error is None, f"proposer failed: {self.error}"
        return [(index, data) for index, data, _ in self.acked]


def assert_logs_hold(cluster: RaftCluster, nodes: list[int], acked: list[tuple[int, bytes]]) -> None:
    """Every acknowledged entry is on every node at its index, and committed logs agree."""
    logs = {n: cluster.read_log(n) for n in nodes}
    for node, records in logs.items():
        by_index = dict(records)
        lost = [(i, d) for i, d in acked if by_index.get(i) != d]
        assert not lost, f"node {node} lost acknowledged entries {lost[:5]} (of {len(lost)})"
    shortest = min(len(r) for r in logs.values())
    prefixes = {n: r[:shortest] for n, r in logs.items()}
    assert len({tuple(p) for p in prefixes.values()}) == 1, f"committed logs diverge: {prefixes}"


@pytest.mark.parametrize("size", [3, 5], ids=["3-voters", "5-voters"])
def test_leader_sigkill_under_load(make_cluster, size: int) -> None:
    """Raft §5.2/§5.4: after SIGKILL of the leader a new leader commits within 2 s, and every entry
    acknowledged before or after the crash survives on every node (entries are synced before ack)."""
    cluster = make_cluster(size)
    old_leader = cluster.leader()
    proposer = SteadyProposer(cluster)
    proposer.start()
    wait_until(lambda: len(proposer.acked) >= 30, "30 acknowledged entries before the crash")
    cluster.signal(old_leader, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: proposer.acked[-1][2] > killed_at, "a commit after the crash", timeout_s=10)
    first_after = next(t for _, _, t in proposer.acked if t > killed_at)
    wait_until(
        lambda: len([a for a in proposer.acked if a[2] > killed_at]) >= 20, "20 commits after the crash"
    )
    acked = proposer.finish()
    assert first_after - killed_at <= FAILOVER_LIMIT_S, (
        f"first commit {first_after - killed_at:.2f} s after SIGKILL"
    )
    assert cluster.leader() != old_leader
    cluster.start(old_leader)
    cluster.wait_applied(cluster.ids, acked[-1][0])
    assert_logs_hold(cluster, cluster.ids, acked)


def test_stopped_follower_resumes_and_catches_up(make_cluster) -> None:
    """Raft §5.3: a follower frozen by SIGSTOP does not stop the majority from committing; after SIGCONT
    it receives everything it missed and its log matches the leader's."""
    cluster = make_cluster(3)
    leader = cluster.leader()
    follower = next(n for n in cluster.ids if n != leader)
    before = [cluster.propose_committed([f"a{i}".encode()]) for i in range(10)]
    cluster.signal(follower, signal.SIGSTOP)
    try:
        during = [cluster.propose_committed([f"b{i}".encode(), f"c{i}".encode()]) for i in range(30)]
    finally:
        cluster.signal(follower, signal.SIGCONT)
    last = during[-1][1]
    cluster.wait_applied(cluster.ids, last)
    assert before[-1][1] < during[0][0]
    acked = cluster.read_log(cluster.leader())
    assert len(acked) == 10 + 60
    assert_logs_hold(cluster, cluster.ids, acked)


def test_restart_every_node_from_its_data_directory(make_cluster) -> None:
    """Raft Figure 2: term, vote and log are persistent; after SIGKILL of every node and a restart,
    every node holds the same committed log with every acknowledged entry (snapshots included)."""
    cluster = make_cluster(3, snapshot_every=25)
    acked = []
    for i in range(40):
        first, last = cluster.propose_committed([f"r{i}-{j}".encode() for j in range(3)])
        acked += [(first + j, f"r{i}-{j}".encode()) for j in range(last - first + 1)]
    for node in cluster.ids:
        cluster.signal(node, signal.SIGKILL)
    cluster.start_all()
    cluster.leader()
    first, _ = cluster.propose_committed([b"after-restart"])
    acked.append((first, b"after-restart"))
    cluster.wait_applied(cluster.ids, first)
    assert_logs_hold(cluster, cluster.ids, acked)
    logs = [cluster.read_log(n) for n in cluster.ids]
    assert logs[0] == logs[1] == logs[2]
    assert [d for _, d in logs[0]] == [d for _, d in acked]


# This test asserts that NO election happens after the heal, so a real one (the leader's heartbeats
# late by more than the election timeout) must not happen either: with 200-400 ms, a loaded 2-core
# machine did that (fc6: every node at term 2 after the heal, at load average 8). PreVote's property —
# the isolated node never raises its term — is checked on its own, before the heal, whatever the load.
STICKY_ELECTION_TIMEOUT_MS = 2000


def test_partitioned_node_rejoins_without_disturbing_the_leader(make_cluster) -> None:
    """Raft thesis §9.6 PreVote: a node cut off from the quorum keeps timing out but cannot raise its
    term, so when the partition heals the leader and the term are unchanged."""
    cluster = make_cluster(3, election_timeout_ms=STICKY_ELECTION_TIMEOUT_MS)
    leader = cluster.leader()
    term = cluster.status(leader).term
    isolated = next(n for n in cluster.ids if n != leader)
    others = [n for n in cluster.ids if n != isolated]
    cluster.partition(isolated, others)
    for node in others:
        cluster.partition(node, [isolated])
    for i in range(10):
        cluster.propose_committed([f"p{i}".encode()])
    wait_until(lambda: cluster.status(isolated).leader_id == 0, "the isolated node to lose its leader")
    # It timed out and asks for pre-votes every election timeout from now on: for two more of them
    # (an observation window, not a wait for a condition) its term must not rise.
    watch_until = time.monotonic() + 2 * STICKY_ELECTION_TIMEOUT_MS / 1000
    while time.monotonic() < watch_until:
        seen = cluster.status(isolated)
        assert seen is not None and seen.term == term, f"PreVote: the cut-off node raised its term: {seen}"
        time.sleep(0.05)
    for node in cluster.ids:
        cluster.partition(node, [])
    first, _ = cluster.propose_committed([b"healed"])
    cluster.wait_applied(cluster.ids, first)
    statuses = {n: cluster.status(n) for n in cluster.ids}
    assert {s.term for s in statuses.values()} == {term}, {n: s.term for n, s in statuses.items()}
    assert {s.leader_id for s in statuses.values()} == {leader}
    assert_logs_hold(cluster, cluster.ids, cluster.read_log(leader))


def test_follower_behind_the_snapshot_gets_install_snapshot(make_cluster) -> None:
    """Raft §7: a follower that missed entries the leader has compacted away is sent the snapshot
    (streamed in chunks) and then the log after it."""
    cluster = make_cluster(3, snapshot_every=20)
    leader = cluster.leader()
    follower = next(n for n in cluster.ids if n != leader)
    cluster.signal(follower, signal.SIGKILL)
    acked = []
    for i in range(30):
        first, last = cluster.propose_committed([f"s{i}-{j}".encode() for j in range(4)])
        acked += [(first + j, f"s{i}-{j}".encode()) for j in range(last - first + 1)]
    cluster.start(follower)
    cluster.wait_applied(cluster.ids, acked[-1][0])
    assert_logs_hold(cluster, cluster.ids, acked)
    assert "event=raft_snapshot_installed" in (cluster.tmp / f"node{follower}.log").read_text()


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        pytest.param(lambda d: None, ["--voters", "1@127.0.0.1:1,2@x"], "voter '2@x'", id="bad-voters"),
        pytest.param(
            lambda d: None,
            ["--voters", "2@127.0.0.1:1"],
            "node 1 is neither a voter nor an observer",
            id="not-a-member",
        ),
        pytest.param(
            lambda d: (d / "raft").mkdir(parents=True) or (d / "raft" / "junk").write_text("x"),
            [],
            "holds no RocksDB",
            id="foreign-data-dir",
        ),
    ],
)
def test_bad_start_exits_with_one_clear_line(tmp_path: Path, setup, args: list[str], message: str) -> None:
    """Bad input gets a named error and an actionable message on stderr, exit status 2, no traceback."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    setup(data_dir)
    base = {"--voters": "1@127.0.0.1:1"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    cmd = [sys.executable, "-m", "raft.server", "--node-id", "1", "--listen", "127.0.0.1:0"]
    cmd += ["--data-dir", str(data_dir)] + [x for kv in base.items() for x in kv]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_sigterm_hands_leadership_over_and_reads_are_linearizable(make_cluster) -> None:
    """Raft thesis §3.10: a leader stopped with SIGTERM transfers leadership (TimeoutNow) before it
    exits, so the next leader is elected at once, one term later. Thesis §6.4: ReadIndex is served
    by the leader only, and covers every entry acknowledged before it."""
    cluster = make_cluster(3)
    leader = cluster.leader()
    _, last = cluster.propose_committed([b"x", b"y"])
    reply = cluster.stub(leader).ReadIndex(raft_pb2.ReadIndexRequest(), timeout=CALL_TIMEOUT_S)
    assert reply.error_code == ErrorCode.NONE and reply.index >= last, reply
    follower = next(n for n in cluster.ids if n != leader)
    # a commit needs a majority only: on a loaded machine this follower may not have heard from the
    # leader yet (it would answer "no leader is known yet", without the hint checked below)
    wait_until(lambda: (s := cluster.status(follower)) is not None and s.leader_id == leader,
               f"follower {follower} to know leader {leader}")  # fmt: skip
    refused = cluster.stub(follower).ReadIndex(raft_pb2.ReadIndexRequest(), timeout=CALL_TIMEOUT_S)
    assert refused.error_code == ErrorCode.NOT_CONTROLLER and refused.leader.leader_id == leader, refused
    term = cluster.status(leader).term
    stopped_at = time.monotonic()
    cluster.signal(leader, signal.SIGTERM)
    assert cluster.procs[leader].wait(timeout=20) == 0
    successor = cluster.leader(exclude=(leader,))
    took_s = time.monotonic() - stopped_at
    assert cluster.status(successor).term == term + 1
    assert took_s < 2 * ELECTION_TIMEOUT_MS / 1000 + 1.5, f"transfer took {took_s:.2f} s"
    first, _ = cluster.propose_committed([b"after-transfer"])
    survivors = [n for n in cluster.ids if n != leader]
    cluster.wait_applied(survivors, first)
    assert_logs_hold(cluster, survivors, [(last, b"y"), (first, b"after-transfer")])


def test_observer_follows_committed_entries_without_voting(make_cluster) -> None:
    """Observers (how brokers will follow the metadata log) receive committed entries only; they
    never vote, never lead, and their loss does not stop the quorum from committing."""
    cluster = make_cluster(3, observers=1)
    observer = 4
    leader = cluster.leader()
    acked = []
    for i in range(10):
        first, _ = cluster.propose_committed([f"o{i}".encode()])
        acked.append((first, f"o{i}".encode()))
    cluster.wait_applied(cluster.all_ids, acked[-1][0])
    assert_logs_hold(cluster, [*cluster.ids, observer], acked)
    assert not cluster.status(observer).is_leader and cluster.status(observer).leader_id == leader
    cluster.signal(observer, signal.SIGKILL)
    first, _ = cluster.propose_committed([b"without-observer"])
    cluster.wait_applied(cluster.ids, first)
