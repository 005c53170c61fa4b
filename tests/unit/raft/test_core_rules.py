"""Message-level rule tables for the Raft core, each citing the rule under test.

Papers: "In Search of an Understandable Consensus Algorithm" (§ numbers) and Ongaro's thesis (thesis §).
"""

from __future__ import annotations

import random

import pytest

from raft.core import RaftConfig, RaftNode, Role
from raft.messages import (
    NO_NODE,
    AppendEntries,
    AppendEntriesResponse,
    Entry,
    EntryKind,
    HardState,
    InstallSnapshot,
    RequestVote,
    RequestVoteResponse,
    Snapshot,
    SnapshotMeta,
)
from raft.progress import PeerState

NOW = 1_000


def node(
    log_terms: list[int], term: int, vote: int = NO_NODE, node_id: int = 1, voters=(1, 2, 3), **cfg
) -> RaftNode:
    """A follower whose log holds one entry per term in ``log_terms`` (index 1, 2, ...)."""
    entries = [Entry(t, i + 1, b"e%d" % (i + 1)) for i, t in enumerate(log_terms)]
    config = RaftConfig(
        node_id=node_id,
        voters=frozenset(voters),
        election_timeout_min_ms=100,
        election_timeout_max_ms=200,
        heartbeat_interval_ms=20,
        **cfg,
    )
    return RaftNode(config, random.Random(7), hard_state=HardState(term, vote), entries=entries, now_ms=NOW)


def replies(n: RaftNode):
    ready = n.take_ready()
    return ready, ready.messages + ready.messages_after_persist


def make_leader(log_terms: list[int], term: int, voters=(1, 2, 3), **cfg) -> RaftNode:
    """Node 1 wins an election in ``term + 1`` (votes delivered by hand)."""
    n = node(log_terms, term, voters=voters, pre_vote=False, **cfg)
    n.tick(NOW + 1_000)
    for v in voters[1:]:
        n.step(RequestVoteResponse(v, 1, n.term, granted=True), NOW + 1_000)
    assert n.role is Role.LEADER
    n.take_ready()
    return n


# ---- votes: §5.2 (one vote per term), §5.4.1 (election restriction), thesis §9.6 (PreVote) -------


VOTE_CASES = [
    # (id, voter log terms, voter term, voter vote, request term, cand. last idx, cand. last term, grant)
    ("higher-term-up-to-date", [1, 1], 1, NO_NODE, 2, 2, 1, True),
    ("lower-term", [1, 1], 3, NO_NODE, 2, 5, 2, False),
    ("already-voted-other", [1], 2, 3, 2, 1, 1, False),
    ("repeat-vote-same-candidate", [1], 2, 2, 2, 1, 1, True),
    ("older-last-term-5.4.1", [1, 2], 2, NO_NODE, 3, 5, 1, False),
    ("same-last-term-shorter-log-5.4.1", [1, 2, 2], 2, NO_NODE, 3, 2, 2, False),
    ("same-last-term-longer-log", [1, 2], 2, NO_NODE, 3, 3, 2, True),
    ("higher-last-term-shorter-log", [1, 1, 1], 1, NO_NODE, 2, 1, 2, True),
]


@pytest.mark.parametrize(
    ("voter_log", "voter_term", "voted", "req_term", "last_index", "last_term", "grant"),
    [c[1:] for c in VOTE_CASES],
    ids=[c[0] for c in VOTE_CASES],
)
def test_vote_rules(voter_log, voter_term, voted, req_term, last_index, last_term, grant) -> None:
    """§5.2: at most one vote per term, first come first served; §5.4.1: only for an up-to-date log.
    The vote is persisted before it is sent (it travels in messages_after_persist with the HardState)."""
    n = node(voter_log, voter_term, voted)
    n.step(RequestVote(2, 1, req_term, last_index, last_term), NOW)
    ready, msgs = replies(n)
    assert msgs == [RequestVoteResponse(1, 2, max(req_term, voter_term), granted=grant)]
    assert ready.messages == [], "a vote answer must wait for the HardState to be persisted"
    assert n.term == max(req_term, voter_term)
    if grant:
        assert ready.hard_state == HardState(req_term, 2)


PRE_VOTE_CASES = [
    # (id, request term relative to the voter's, candidate log up to date, granted)
    ("next-term-up-to-date", 1, True, True),
    ("next-term-stale-log", 1, False, False),
    ("own-term", 0, True, False),
]


@pytest.mark.parametrize(
    ("delta", "up_to_date", "grant"), [c[1:] for c in PRE_VOTE_CASES], ids=[c[0] for c in PRE_VOTE_CASES]
)
def test_pre_vote_never_changes_term_or_vote(delta: int, up_to_date: bool, grant: bool) -> None:
    """Thesis §9.6: a pre-vote is answered as a vote would be, but nobody's term or vote changes."""
    n = node([1, 2], 2)
    last_term = 2 if up_to_date else 1
    n.step(RequestVote(2, 1, 2 + delta, 2, last_term, pre_vote=True), NOW)
    ready, msgs = replies(n)
    assert msgs == [RequestVoteResponse(1, 2, 2 + delta if grant else 2, granted=grant, pre_vote=True)]
    assert (n.term, n.vote, ready.hard_state) == (2, NO_NODE, None)


@pytest.mark.parametrize("pre_vote", [True, False], ids=["pre-vote", "vote"])
@pytest.mark.parametrize(("transfer", "grant"), [(False, False), (True, True)], ids=["plain", "transfer"])
def test_a_follower_with_a_live_leader_ignores_votes_unless_transferring(pre_vote, transfer, grant) -> None:
    """CheckQuorum lease (thesis §4.2.3): a node that heard from its leader within the minimum election
    timeout neither grants nor raises its term — unless the request follows a TimeoutNow (§3.10)."""
    n = node([1], 1)
    n.step(AppendEntries(3, 1, 1, 1, 1, (), 1), NOW)  # leader 3 is alive
    n.take_ready()
    n.step(RequestVote(2, 1, 2, 5, 1, pre_vote=pre_vote, leadership_transfer=transfer), NOW + 10)
    _, msgs = replies(n)
    assert [m.granted for m in msgs] == [grant]
    assert n.term == (1 if pre_vote or not grant else 2)


def test_an_observer_never_votes_and_never_campaigns() -> None:
    """Observers receive committed entries only; they are not part of any quorum."""
    n = node([1], 1, node_id=4, voters=(1, 2, 3), observers=frozenset({4}))
    n.step(RequestVote(2, 4, 2, 5, 1), NOW)
    _, msgs = replies(n)
    assert [m.granted for m in msgs] == [False]
    n.tick(NOW + 10_000)
    assert n.role is Role.FOLLOWER and n.next_deadline_ms() is None


# ---- AppendEntries on the follower: §5.3 consistency check and log matching ----------------------


APPEND_CASES = [
    # (id, follower log terms, prev idx, prev term, entry terms, leader commit,
    #  success, match / conflict (term, index), resulting log terms, commit)
    ("append-to-empty", [], 0, 0, [1, 1], 1, True, 2, [1, 1], 1),
    ("log-too-short", [1], 3, 1, [1], 0, False, (0, 2), [1], 0),
    (
        "prev-term-mismatch-hints-first-index-of-term",
        [1, 2, 2, 2],
        4,
        3,
        [3],
        0,
        False,
        (2, 2),
        [1, 2, 2, 2],
        0,
    ),
    ("conflict-truncates-and-replaces", [1, 2, 2], 1, 1, [3, 3], 2, True, 3, [1, 3, 3], 2),
    ("stale-prefix-keeps-longer-log", [1, 1, 1, 1], 0, 0, [1, 1], 0, True, 2, [1, 1, 1, 1], 0),
    ("commit-is-min-of-leader-commit-and-last-new", [1, 1, 1], 1, 1, [], 3, True, 1, [1, 1, 1], 1),
    ("heartbeat-at-match-commits", [1, 1], 2, 1, [], 2, True, 2, [1, 1], 2),
]


@pytest.mark.parametrize(
    ("log", "prev", "prev_term", "terms", "leader_commit", "success", "result", "after", "commit"),
    [c[1:] for c in APPEND_CASES],
    ids=[c[0] for c in APPEND_CASES],
)
def test_append_entries_consistency_check(
    log, prev, prev_term, terms, leader_commit, success, result, after, commit
) -> None:
    """§5.3: reject unless the log holds prev_log_index with prev_log_term; delete a conflicting suffix,
    keep entries that agree (a stale message must not truncate); commit = min(leaderCommit, last new)."""
    n = node(log, 3)
    entries = tuple(Entry(t, prev + 1 + i, b"new") for i, t in enumerate(terms))
    n.step(AppendEntries(2, 1, 3, prev, prev_term, entries, leader_commit), NOW)
    ready, msgs = replies(n)
    (resp,) = msgs
    assert isinstance(resp, AppendEntriesResponse) and resp.success is success
    if success:
        assert resp.match_index == result
        assert resp in ready.messages_after_persist, "an acknowledgement promises durability"
    else:
        assert (resp.conflict_term, resp.conflict_index) == result
    assert [n.log.term_at(i) for i in range(1, n.last_index + 1)] == after
    assert n.commit_index == commit
    n.invariants()


def test_truncation_of_handed_out_entries_reaches_the_store() -> None:
    """§5.3: entries the follower already wrote are dropped from the store too (Ready.truncate_from)."""
    n = node([1, 2, 2], 2)
    n.step(AppendEntries(2, 1, 3, 1, 1, (Entry(3, 2, b"x"),), 0), NOW)
    ready, _ = replies(n)
    assert ready.truncate_from == 2
    assert [(e.index, e.term) for e in ready.entries] == [(2, 3)]


# ---- the leader: fast back-off, commit rule, pipelining, batching -------------------------------


BACK_OFF_CASES = [
    # (id, leader log terms, follower hint (conflict term, conflict index), expected next index)
    ("follower-log-short", [1, 1, 1, 1, 1], (0, 3), 3),
    ("leader-has-conflict-term", [1, 1, 2, 2, 4, 4], (2, 3), 5),
    ("leader-lacks-conflict-term", [1, 1, 4, 4, 4], (3, 2), 2),
]


@pytest.mark.parametrize(
    ("leader_log", "hint", "expected_next"),
    [c[1:] for c in BACK_OFF_CASES],
    ids=[c[0] for c in BACK_OFF_CASES],
)
def test_fast_back_off(leader_log, hint, expected_next) -> None:
    """§5.3 (end): the follower names its conflicting term and that term's first index; the leader jumps
    past its own last entry of that term, or to the follower's index when it has no such term."""
    n = make_leader(leader_log, term=4)
    n.step(AppendEntriesResponse(2, 1, n.term, False, 0, *hint), NOW + 1_000)
    assert n.progress[2].next_index == expected_next
    _, msgs = replies(n)
    (probe,) = [m for m in msgs if m.dst == 2]
    assert probe.prev_log_index == expected_next - 1


FIGURE_8_CASES = [
    # (id, follower acks as (peer, match index), expected commit)  — leader log: [t1, t2] + NOOP(t4) at 3
    ("old-term-entry-on-a-majority-is-not-committed", [(2, 2)], 0),
    ("old-term-entry-on-everyone-is-not-committed", [(2, 2), (3, 2)], 0),
    ("own-term-noop-on-a-majority-commits-everything", [(2, 3)], 3),
]


@pytest.mark.parametrize(
    ("acks", "commit"), [c[1:] for c in FIGURE_8_CASES], ids=[c[0] for c in FIGURE_8_CASES]
)
def test_figure_8_only_own_term_entries_commit_by_counting(acks, commit) -> None:
    """§5.4.2 / Figure 8: a leader never commits an entry of an earlier term by counting replicas;
    it commits its own-term NOOP (§8), which commits the earlier entries indirectly."""
    n = make_leader([1, 2], term=3)
    assert n.term == 4 and n.log.entry(3).kind is EntryKind.NOOP
    n.persisted(3, 4)
    for peer, match in acks:
        n.step(AppendEntriesResponse(peer, 1, 4, True, match), NOW + 1_000)
    assert n.commit_index == commit


def test_pipelining_is_bounded_by_max_inflight_appends() -> None:
    """Flow control (etcd-raft's Progress): in REPLICATE the leader sends without waiting, at most
    max_inflight_appends unacknowledged messages per peer; an ack opens the window again."""
    n = make_leader([], term=0, max_inflight_appends=2, max_entries_per_append=1)
    for peer in (2, 3):
        n.step(AppendEntriesResponse(peer, 1, n.term, True, 1), NOW + 1_000)
    n.take_ready()
    assert n.progress[2].state is PeerState.REPLICATE
    n.propose([b"a", b"b", b"c", b"d"], NOW + 1_000)
    _, msgs = replies(n)
    to_2 = [m for m in msgs if m.dst == 2]
    assert [[e.index for e in m.entries] for m in to_2] == [[2], [3]]
    n.step(AppendEntriesResponse(2, 1, n.term, True, 2), NOW + 1_001)
    _, msgs = replies(n)
    assert [[e.index for e in m.entries] for m in msgs if m.dst == 2] == [[4]]


def test_proposals_between_readies_are_batched_into_one_append() -> None:
    """Batching: proposals made before the driver takes the Ready leave in one AppendEntries per peer."""
    n = make_leader([], term=0)
    for peer in (2, 3):
        n.step(AppendEntriesResponse(peer, 1, n.term, True, 1), NOW + 1_000)
    n.take_ready()
    for i in range(10):
        n.propose([b"p%d" % i], NOW + 1_000)
    ready, msgs = replies(n)
    assert len([m for m in msgs if m.dst == 2]) == 1
    assert len(ready.entries) == 10


def test_a_stale_persisted_report_is_ignored() -> None:
    """The leader counts its own log only up to entries the driver persisted: a report about entries
    that were since overwritten (other term at that index) does not count."""
    n = node([1, 1], 1)
    n.step(AppendEntries(2, 1, 2, 1, 1, (Entry(2, 2, b"x"),), 0), NOW)
    n.take_ready()
    n.persisted(2, 1)  # the old entry 2 (term 1) — no longer in the log
    assert n.log.persisted_index == 1
    n.persisted(2, 2)
    assert n.log.persisted_index == 2


# ---- InstallSnapshot on the follower: §7 ---------------------------------------------------------

SNAP = SnapshotMeta(last_index=4, last_term=2)
CHUNK_CASES = [
    # (id, chunks as (offset, bytes, done), expected (next_offset, done) answers, installed)
    ("in-order", [(0, b"ab", False), (2, b"cd", True)], [(2, False), (4, True)], True),
    (
        "gap-asks-for-the-missing-offset",
        [(0, b"ab", False), (4, b"ef", True)],
        [(2, False), (2, False)],
        False,
    ),
    (
        "duplicate-chunk-is-re-acknowledged",
        [(0, b"ab", False), (0, b"ab", False)],
        [(2, False), (2, False)],
        False,
    ),
    ("mid-stream-without-start", [(2, b"cd", True)], [(0, False)], False),
]


@pytest.mark.parametrize(
    ("chunks", "answers", "installed"), [c[1:] for c in CHUNK_CASES], ids=[c[0] for c in CHUNK_CASES]
)
def test_install_snapshot_chunks(chunks, answers, installed) -> None:
    """§7 (Figure 13): chunks are accepted only at the expected offset; the answer names the next
    offset wanted, so a lost or repeated chunk is resent from there; done installs and persists."""
    n = node([1], 2)
    got = []
    for offset, data, done in chunks:
        n.step(InstallSnapshot(2, 1, 2, SNAP, offset, data, done), NOW)
        ready, msgs = replies(n)
        got += [(m.next_offset, m.done) for m in msgs]
    assert got == answers
    assert (n.commit_index == 4) is installed
    if installed:
        assert ready.snapshot == Snapshot(SNAP, b"abcd") and ready.truncate_from == 1
        assert n.log.first_index == 5 and n.applied_index == 4


def test_a_snapshot_the_log_already_holds_only_advances_the_commit_index() -> None:
    """§7: "If the follower's log has an entry matching the snapshot's last entry, retain the log"."""
    n = node([1, 2, 2, 2, 2], 2)
    n.step(InstallSnapshot(2, 1, 2, SNAP, 0, b"abcd", True), NOW)
    ready, _ = replies(n)
    assert ready.snapshot is None and n.commit_index == 4 and n.last_index == 5
    assert [e.index for e in ready.committed] == [1, 2, 3, 4]


def test_lost_appends_are_resent_after_two_silent_heartbeat_intervals() -> None:
    """Loss recovery without a resend storm: in REPLICATE, appends still unacknowledged after two
    heartbeat intervals without progress are resent from match_index + 1; a merely slow peer (one
    interval) gets only a heartbeat."""
    n = make_leader([], term=0)
    t = NOW + 1_000
    for peer in (2, 3):
        n.step(AppendEntriesResponse(peer, 1, n.term, True, 1), t)
    n.take_ready()
    n.propose([b"a"], t)
    _, lost = replies(n)
    assert [m.entries[0].index for m in lost if m.dst == 2] == [2]
    n.tick(t + 20)
    _, msgs = replies(n)
    assert [m.entries for m in msgs if m.dst == 2] == [()], "one interval: a heartbeat, no resend"
    n.tick(t + 40)
    _, msgs = replies(n)
    resent = [m for m in msgs if m.dst == 2 and m.entries]
    assert [(m.prev_log_index, m.entries[0].index) for m in resent] == [(1, 2)]
