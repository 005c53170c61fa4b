"""Seeds that once failed, replayed on every run, and proof that the checkers catch real bug classes.

A seed that finds a bug is added to ``REGRESSION_SEEDS`` with what it found; the fix must keep it green.
``MUTANTS`` breaks the core on purpose and asserts the simulation notices — a checker that cannot fail
would otherwise go unseen.
"""

from __future__ import annotations

import pytest

from raft import core, raft_log
from tests.sim.raft.sim import SimFailure, run_seed

pytestmark = pytest.mark.sim

REGRESSION_SEEDS = [
    # (seed, what it found)
    (294, "1-entry appends, 25% loss: a lagging follower never caught up while clients kept proposing"),
    (431, "frequent crashes with 80 ms RTT: convergence phase must stop the clients first"),
    (462, "5 voters + observer, 1-entry appends: catch-up slower than the proposal rate"),
]


@pytest.mark.parametrize(
    "seed", [s for s, _ in REGRESSION_SEEDS], ids=[f"seed-{s}" for s, _ in REGRESSION_SEEDS]
)
def test_regression_seed(seed: int) -> None:
    run_seed(seed)


def _vote_before_persist(monkeypatch: pytest.MonkeyPatch) -> None:
    send = core.RaftNode._send

    def broken(self, m):  # votes leave with the messages that need no fsync
        if isinstance(m, core.RequestVoteResponse):
            self._messages.append(m)
        else:
            send(self, m)

    monkeypatch.setattr(core.RaftNode, "_send", broken)


def _count_unpersisted(monkeypatch: pytest.MonkeyPatch) -> None:
    take = raft_log.RaftLog.take_unsent

    def broken(self):  # the leader counts its own entries before the driver persisted them
        out = take(self)
        self.persisted_index = self.last_index
        return out

    monkeypatch.setattr(raft_log.RaftLog, "take_unsent", broken)


def _grant_any_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raft_log.RaftLog, "is_up_to_date", lambda self, index, term: True)


def _minority_quorum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core.RaftConfig, "quorum", property(lambda self: len(self.voters) // 2))


MUTANTS = [
    # (id, how the core is broken, seed that catches it, words expected in the failure)
    ("vote-before-persist-5.2", _vote_before_persist, 1, "grants a vote before persisting"),
    ("commit-unpersisted-own-entry", _count_unpersisted, 0, "have it on disk"),
    ("vote-for-stale-log-5.4.1", _grant_any_log, 5, "Leader Completeness"),
    ("minority-quorum", _minority_quorum, 0, "Election Safety"),
]


@pytest.mark.parametrize(
    ("mutate", "seed", "expected"), [m[1:] for m in MUTANTS], ids=[m[0] for m in MUTANTS]
)
def test_the_simulation_catches_a_broken_core(monkeypatch, mutate, seed: int, expected: str) -> None:
    mutate(monkeypatch)
    with pytest.raises(SimFailure, match=expected):
        run_seed(seed)
