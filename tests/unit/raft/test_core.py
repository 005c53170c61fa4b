"""The Raft core end to end on a synchronous in-memory cluster: election, replication, commit.

Each test cites the Raft paper section (Ongaro & Ousterhout 2014; thesis = Ongaro 2014) it checks.
"""

from __future__ import annotations

import random

import pytest

from raft.core import RaftConfig, RaftConfigError, RaftNode, Role
from raft.messages import NO_NODE, EntryKind, NotLeader, ProposalAccepted
from tests.unit.raft.harness import Cluster


@pytest.mark.parametrize("size", [1, 3, 5], ids=["1-voter", "3-voters", "5-voters"])
def test_a_candidate_with_a_majority_becomes_leader_and_commits_a_noop(size: int) -> None:
    """§5.2 a majority of votes elects; §8 the new leader commits a NOOP of its term first."""
    c = Cluster(list(range(1, size + 1)))
    leader = c.elect(1)
    assert leader.term == 1 and leader.leader_id == 1
    c.advance(50)
    for node in c.nodes.values():
        assert node.commit_index == 1, f"node {node.id} commit {node.commit_index}"
        assert node.leader_id == 1
        assert [e.kind for e in c.applied[node.id]] == [EntryKind.NOOP]


@pytest.mark.parametrize("size", [1, 3, 5], ids=["1-voter", "3-voters", "5-voters"])
def test_proposals_replicate_commit_and_apply_in_order_on_every_node(size: int) -> None:
    """§5.3: the leader appends, replicates, commits once a majority stored it; all apply the same."""
    c = Cluster(list(range(1, size + 1)))
    c.elect(1)
    first = c.propose(1, b"a", b"b")
    second = c.propose(1, b"c")
    assert first == ProposalAccepted(term=1, first_index=2, last_index=3)
    assert second == ProposalAccepted(term=1, first_index=4, last_index=4)
    c.advance(50)
    for node_id, applied in c.applied.items():
        assert [e.data for e in applied] == [b"", b"a", b"b", b"c"], f"node {node_id}"


def test_a_follower_rejects_proposals_with_the_leader_hint() -> None:
    """Clients learn where the leader is (§8): a follower answers NOT_LEADER naming it."""
    c = Cluster([1, 2, 3])
    assert c.nodes[2].propose([b"x"], c.now_ms) == NotLeader(NO_NODE)
    c.elect(1)
    assert c.nodes[2].propose([b"x"], c.now_ms) == NotLeader(1)


def test_leader_counts_its_own_entries_only_after_they_are_persisted() -> None:
    """Thesis §10.2.1: the leader may send before writing, but its own log counts once durable."""
    c = Cluster([1])
    leader = c.elect(1)
    leader.propose([b"a"], c.now_ms)
    ready = leader.take_ready()
    assert [e.data for e in ready.entries] == [b"a"]
    assert leader.commit_index == 1, "counted an entry that is not persisted yet"
    leader.persisted(2, leader.term)
    assert leader.commit_index == 2


def test_a_majority_of_followers_commits_without_the_leaders_own_disk() -> None:
    """§5.3: an entry is committed once a majority stored it; the leader's own write may lag."""
    c = Cluster([1, 2, 3])
    leader = c.elect(1)
    c.advance(30)
    leader.propose([b"a"], c.now_ms)
    ready = leader.take_ready()  # the leader does not persist yet: followers answer first
    for m in ready.messages:
        c.nodes[m.dst].step(m, c.now_ms)
    for follower in (2, 3):
        for m in c.handle_ready(c.nodes[follower]):
            leader.step(m, c.now_ms)
    assert leader.commit_index == 2 and leader.log.persisted_index == 1


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"node_id": 0}, "positive"),
        ({"voters": frozenset()}, "at least one"),
        ({"node_id": 9}, "neither a voter"),
        ({"observers": frozenset({2})}, "both voter and observer"),
        ({"heartbeat_interval_ms": 200}, "heartbeat_interval_ms"),
        ({"election_timeout_max_ms": 100}, "election_timeout_max_ms"),
        ({"max_inflight_appends": 0}, "max_inflight_appends"),
    ],
    ids=[
        "zero-id",
        "no-voters",
        "not-a-member",
        "voter-and-observer",
        "slow-heartbeat",
        "empty-range",
        "no-inflight",
    ],
)
def test_bad_config_is_a_named_error(changes: dict, message: str) -> None:
    base = {
        "node_id": 1,
        "voters": frozenset({1, 2, 3}),
        "election_timeout_min_ms": 100,
        "election_timeout_max_ms": 200,
    }
    base.update(changes)
    with pytest.raises(RaftConfigError, match=message):
        RaftNode(RaftConfig(**base), random.Random(0))


def test_restart_recovers_term_vote_and_log_then_relearns_the_commit_index() -> None:
    """Figure 2: currentTerm, votedFor and log[] are persistent; commitIndex is volatile."""
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.propose(1, b"a")
    c.advance(50)
    before = c.nodes[2]
    after = c.start(2)
    assert (after.term, after.vote, after.last_index) == (before.term, before.vote, before.last_index)
    assert after.commit_index == 0 and after.role is Role.FOLLOWER
    c.advance(50)
    assert after.commit_index == 2
    assert [e.data for e in c.applied[2]] == [b"", b"a"]
