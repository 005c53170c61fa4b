"""ReadIndex bookkeeping (thesis §6.4) in isolation: contexts, majority confirmation, order, failure."""

from __future__ import annotations

import pytest

from raft.messages import ReadState
from raft.read_only import ReadOnly

CASES = [
    # (id, reads added before start, acks as (voter, context), quorum, released request ids)
    ("leader-alone-is-a-majority-of-one", [1], [], 1, [1]),
    ("waits-for-a-majority", [1], [], 2, []),
    ("one-follower-completes-a-majority-of-three", [1, 2], [(2, 1)], 2, [1, 2]),
    ("an-older-context-does-not-confirm-a-newer-read", [1], [(2, 0)], 2, []),
    ("five-voters-need-two-followers", [1], [(2, 1), (2, 1)], 3, []),
    ("five-voters-two-followers", [1], [(2, 1), (3, 1)], 3, [1]),
]


@pytest.mark.parametrize(
    ("reads", "acks", "quorum", "released"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_reads_are_released_once_a_majority_confirms_their_context(reads, acks, quorum, released) -> None:
    """Thesis §6.4 step 3: an answer carrying context c confirms every read started with a context <= c."""
    ro = ReadOnly()
    for request_id in reads:
        ro.add(request_id, leader_id=1)
    out = ro.start_waiting(commit_index=9, quorum=quorum)
    for voter, context in acks:
        out += ro.ack(voter, context, quorum)
    assert out == [ReadState(r, 9) for r in released]


def test_reads_wait_until_started_and_are_released_in_order() -> None:
    """Thesis §6.4 step 1: reads that arrive before the leader committed in its term wait; later reads
    get a newer context and are never released before older ones."""
    ro = ReadOnly()
    ro.add(1, leader_id=1)
    assert ro.ack(2, 5, quorum=2) == [], "not started: no context to confirm"
    assert ro.start_waiting(commit_index=3, quorum=2) == [] and ro.heartbeat_needed
    ro.add(2, leader_id=1)
    ro.start_waiting(commit_index=4, quorum=2)
    assert ro.last_context == 2
    assert ro.ack(3, 2, quorum=2) == [ReadState(1, 3), ReadState(2, 4)]


def test_stepping_down_fails_every_pending_read() -> None:
    ro = ReadOnly()
    ro.add(1, leader_id=1)
    ro.add(2, leader_id=1)
    ro.start_waiting(commit_index=3, quorum=2)
    assert ro.fail_all() == [1, 2] and len(ro) == 0 and not ro.heartbeat_needed
