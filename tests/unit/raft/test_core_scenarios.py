"""Cluster scenarios for the Raft core on the synchronous harness: PreVote, CheckQuorum, leadership
transfer, ReadIndex, snapshots and observers. Each cites the rule it checks."""

from __future__ import annotations

import pytest

from raft.core import Role
from raft.messages import (
    NO_NODE,
    AppendEntries,
    Entry,
    HardState,
    InstallSnapshot,
    NotLeader,
    ProposalAccepted,
    ReadState,
    TimeoutNow,
)
from tests.unit.raft.harness import Cluster


def isolate(c: Cluster, node_id: int) -> None:
    c.drop = lambda m: node_id in (m.src, m.dst)


def heal(c: Cluster) -> None:
    c.drop = lambda m: False


# ---- PreVote and CheckQuorum ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pre_vote", "disrupts"), [(True, False), (False, True)], ids=["pre-vote", "no-pre-vote"]
)
def test_a_partitioned_node_rejoins_without_disturbing_the_leader(pre_vote: bool, disrupts: bool) -> None:
    """Thesis §9.6: with PreVote an isolated node cannot win pre-votes, so it never raises its term and
    does not depose the leader when it returns. Without PreVote it does (the behaviour PreVote fixes)."""
    c = Cluster([1, 2, 3], config_overrides={"pre_vote": pre_vote, "check_quorum": False})
    c.elect(1)
    isolate(c, 3)
    c.advance(1_000)
    assert (c.nodes[3].term > 1) is disrupts
    heal(c)
    c.advance(300)
    leader = c.leader()
    assert leader is not None
    assert (leader.term > 1) is disrupts, f"leader {leader.id} term {leader.term}"


@pytest.mark.parametrize(("check_quorum", "steps_down"), [(True, True), (False, False)], ids=["on", "off"])
def test_an_isolated_leader_steps_down_with_check_quorum(check_quorum: bool, steps_down: bool) -> None:
    """CheckQuorum (thesis §6.2): a leader that has not heard from a majority within an election timeout
    steps down, so clients stop waiting on it; the majority elects a new leader meanwhile."""
    c = Cluster([1, 2, 3], config_overrides={"check_quorum": check_quorum})
    c.elect(1)
    isolate(c, 1)
    c.advance(500)
    assert (c.nodes[1].role is not Role.LEADER) is steps_down
    others = [c.nodes[i] for i in (2, 3)]
    assert any(n.role is Role.LEADER for n in others), "the majority side elects a leader"


# ---- leadership transfer ---------------------------------------------------------------------------


def test_leadership_transfer_hands_over_with_timeout_now() -> None:
    """Thesis §3.10: the leader stops taking proposals, brings the target up to date, sends TimeoutNow;
    the target campaigns at once (no pre-vote, lease ignored) and wins in the next term."""
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.propose(1, b"a")
    leader = c.nodes[1]
    assert leader.transfer_leadership(2, c.now_ms)
    assert leader.propose([b"b"], c.now_ms) == NotLeader(2), "proposals stop during the transfer"
    c.settle()
    assert any(isinstance(m, TimeoutNow) and m.dst == 2 for m in c.sent)
    assert c.nodes[2].role is Role.LEADER and c.nodes[2].term == 2
    assert leader.role is Role.FOLLOWER and leader.leader_id == 2


def test_transfer_to_a_lagging_target_waits_for_it_to_catch_up() -> None:
    """Thesis §3.10: TimeoutNow is sent only once the target's log matches the leader's."""
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.drop = lambda m: m.dst == 3 or m.src == 3
    c.propose(1, b"a", b"b")
    leader = c.nodes[1]
    assert leader.transfer_leadership(3, c.now_ms)
    c.settle()
    assert not any(isinstance(m, TimeoutNow) for m in c.sent)
    heal(c)
    c.advance(60)
    assert c.nodes[3].role is Role.LEADER
    assert c.nodes[3].log.term_at(3) == 1, "the new leader holds the entries"


def test_a_transfer_that_does_not_finish_in_time_is_abandoned() -> None:
    """Thesis §3.10: after an election timeout without the target taking over, the leader resumes."""
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.drop = lambda m: isinstance(m, TimeoutNow)
    assert c.nodes[1].transfer_leadership(2, c.now_ms)
    c.advance(150)
    assert c.nodes[1].role is Role.LEADER and c.nodes[1].transfer_target == NO_NODE
    assert isinstance(c.nodes[1].propose([b"x"], c.now_ms), ProposalAccepted)


@pytest.mark.parametrize("target", [1, 9], ids=["self", "not-a-voter"])
def test_transfer_to_an_invalid_target_is_refused(target: int) -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    assert not c.nodes[1].transfer_leadership(target, c.now_ms)
    assert not c.nodes[2].transfer_leadership(3, c.now_ms), "only a leader can transfer"


# ---- ReadIndex ---------------------------------------------------------------------------------


def test_read_index_is_released_after_a_majority_confirms_leadership() -> None:
    """Thesis §6.4: the read index is the commit index; the leader releases it only after a heartbeat
    round answered by a majority (so it was still leader when the read arrived)."""
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.propose(1, b"a")
    leader = c.nodes[1]
    assert leader.read_index(41, c.now_ms) is None
    ready = leader.take_ready()
    assert ready.read_states == [], "released before any follower confirmed"
    heartbeats = [m for m in ready.messages if isinstance(m, AppendEntries) and m.read_context]
    assert {m.dst for m in heartbeats} == {2, 3}
    c.nodes[2].step(heartbeats[0], c.now_ms)
    for m in c.handle_ready(c.nodes[2]):
        leader.step(m, c.now_ms)
    assert leader.take_ready().read_states == [ReadState(41, 2)]


def test_a_deposed_leader_never_serves_a_read() -> None:
    """Thesis §6.4: an isolated (stale) leader cannot collect a majority, so its read fails when it
    steps down instead of returning stale data."""
    c = Cluster([1, 2, 3])
    c.elect(1)
    isolate(c, 1)
    assert c.nodes[1].read_index(7, c.now_ms) is None
    c.advance(400)
    assert c.read_states[1] == []
    assert c.nodes[1].role is not Role.LEADER


def test_a_new_leader_delays_reads_until_it_commits_in_its_term() -> None:
    """Thesis §6.4 step 1: until its NOOP commits, a new leader does not know the commit index."""
    c = Cluster([1, 2, 3])
    c.drop = lambda m: isinstance(m, AppendEntries)
    c.elect(1)
    leader = c.nodes[1]
    assert leader.read_index(5, c.now_ms) is None
    c.settle()
    assert c.read_states[1] == []
    heal(c)
    c.advance(50)
    assert c.read_states[1] == [ReadState(5, 1)]


def test_a_follower_answers_a_read_with_the_leader_hint() -> None:
    c = Cluster([1, 2, 3])
    c.elect(1)
    assert c.nodes[2].read_index(1, c.now_ms) == NotLeader(1)


# ---- snapshots ---------------------------------------------------------------------------------


def test_a_lagging_follower_receives_the_snapshot_in_chunks() -> None:
    """§7: once the entries a follower needs are compacted, the leader sends InstallSnapshot, here in
    4-byte chunks one at a time; the follower installs it, then catches up by AppendEntries."""
    c = Cluster([1, 2, 3], config_overrides={"snapshot_chunk_bytes": 4})
    c.elect(1)
    c.drop = lambda m: 3 in (m.src, m.dst)
    for i in range(5):
        c.propose(1, b"v%d" % i)
    c.advance(30)
    snap = c.take_snapshot(1)
    assert c.nodes[1].log.first_index == snap.meta.last_index + 1
    c.propose(1, b"after")
    heal(c)
    c.sent.clear()
    c.advance(100)
    chunks = [m for m in c.sent if isinstance(m, InstallSnapshot) and m.dst == 3]
    assert b"".join(m.chunk for m in chunks) == snap.data and chunks[-1].done
    assert len(chunks) == -(-len(snap.data) // 4)
    assert c.disks[3].snapshot == snap
    assert c.nodes[3].commit_index == c.nodes[1].commit_index == snap.meta.last_index + 1
    assert [e.data for e in c.applied[3][1:]] == [b"after"]


def test_a_follower_restarts_from_its_snapshot() -> None:
    """§7: on restart the state machine starts from the snapshot; the log holds only later entries."""
    c = Cluster([1, 2, 3])
    c.elect(1)
    c.propose(1, b"a", b"b")
    c.advance(30)
    snap = c.take_snapshot(2)
    node = c.start(2)
    assert node.commit_index == snap.meta.last_index and node.log.first_index == snap.meta.last_index + 1
    c.advance(60)
    assert node.commit_index == c.nodes[1].commit_index


# ---- observers ---------------------------------------------------------------------------------


def test_observers_receive_only_committed_entries_and_do_not_count() -> None:
    """Static membership with an observer (a KRaft broker following the metadata log): it is sent
    entries only once committed and is never counted towards a majority."""
    c = Cluster([1, 2, 3], observers=[4])
    c.elect(1)
    c.drop = lambda m: m.src in (2, 3) or m.dst in (2, 3)  # voters 2 and 3 are unreachable
    c.sent.clear()
    c.propose(1, b"x")
    c.advance(60)
    assert c.nodes[1].commit_index == 1, "an observer's ack must not commit index 2"
    to_observer = [m for m in c.sent if isinstance(m, AppendEntries) and m.dst == 4]
    assert to_observer and all(e.index <= 1 for m in to_observer for e in m.entries)
    heal(c)
    c.advance(60)
    assert [e.data for e in c.applied[4]] == [b"", b"x"]


# ---- Figure 8 --------------------------------------------------------------------------------------


def test_figure_8_an_old_term_entry_on_a_majority_can_still_be_overwritten() -> None:
    """§5.4.2, Figure 8 (c)-(d): S1 (term 4) gets its term-2 entry onto a majority but must not commit
    it by counting; indeed S5, holding a term-3 entry at that index, can still win and overwrite it."""
    c = Cluster(
        [1, 2, 3, 4, 5],
        config_overrides={"pre_vote": False, "check_quorum": False, "max_entries_per_append": 1},
    )
    logs = {1: [1, 2], 2: [1, 2], 3: [1], 4: [1], 5: [1, 3]}
    for node_id, terms in logs.items():
        c.disks[node_id].entries = [Entry(t, i + 1, b"t%d" % t) for i, t in enumerate(terms)]
        c.disks[node_id].hard_state = HardState(term=4 if node_id == 5 else 3)
        c.start(node_id)

    def drop(m) -> bool:
        # S5 is cut off from S1; the NOOP (index 3) is lost on its way to any node that holds index 2.
        if isinstance(m, AppendEntries) and m.dst == 5:
            return True
        holds_2 = m.dst in c.nodes and c.nodes[m.dst].log.term_at(2) is not None
        return isinstance(m, AppendEntries) and holds_2 and any(e.index >= 3 for e in m.entries)

    c.drop = drop
    s1 = c.elect(1)
    assert s1.term == 4
    holders = [i for i in logs if c.nodes[i].log.term_at(2) == 2]
    assert len(holders) >= 3, f"the term-2 entry is on a majority: {holders}"
    assert s1.commit_index < 2, "Figure 8: an old-term entry must not be committed by counting"
    del c.nodes[1]  # S1 crashes
    heal(c)
    s5 = c.elect(5)
    c.advance(50)
    assert s5.term == 5
    assert all(n.log.term_at(2) == 3 for n in c.nodes.values()), "S5 overwrote index 2 everywhere"
    assert all(e.term != 2 for applied in c.applied.values() for e in applied), "nobody applied it"
