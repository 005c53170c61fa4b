"""Seeds that once failed, replayed on every run, and proof that the checkers catch real bug classes.

A seed that finds a bug is added to ``REGRESSION_SEEDS`` with what it found; the fix must keep it green.
``MUTANTS`` breaks the core on purpose and asserts the simulation notices — a checker that cannot fail
would otherwise go unseen.
"""

from __future__ import annotations

import pytest

from raft import core, raft_log
from tests.sim.raft.sim import Faults, SimFailure, Simulation, run_seed

pytestmark = pytest.mark.sim

# The fault mix is pinned next to the seed: a seed alone replays exactly only on the simulator version
# that found it, while a pinned mix keeps exercising the same kind of schedule after the simulator changes.
SLOW_CATCH_UP = Faults(
    voters=3, observers=0, drop=0.25, duplicate=0.0, delay_max_ms=40, partitions=True, crashes=False,
    fault_phase_ms=1500, snapshot_every_ms=250, transfer_every_ms=10000, fsync_max_ms=15,
    fault_every_ms=150, election_spread_ms=100, max_entries_per_append=1,
)  # fmt: skip
CRASHY_SLOW_NETWORK = Faults(
    voters=3, observers=0, drop=0.0, duplicate=0.0, delay_max_ms=40, partitions=True, crashes=True,
    fault_phase_ms=1500, snapshot_every_ms=80, transfer_every_ms=10000, fsync_max_ms=15, fault_every_ms=60,
    election_spread_ms=100, max_entries_per_append=1,
)  # fmt: skip
FIVE_VOTERS_AND_OBSERVER = Faults(
    voters=5, observers=1, drop=0.0, duplicate=0.02, delay_max_ms=40, partitions=False, crashes=True,
    fault_phase_ms=600, snapshot_every_ms=10000, transfer_every_ms=10000, fsync_max_ms=15,
    fault_every_ms=300, election_spread_ms=100, max_entries_per_append=1,
)  # fmt: skip

REGRESSION_SEEDS = [
    # (seed, pinned fault mix, what it found)
    (294, SLOW_CATCH_UP, "a lagging follower never converged while clients kept proposing (sim fix)"),
    (431, CRASHY_SLOW_NETWORK, "convergence must stop the clients first (sim fix)"),
    (462, FIVE_VOTERS_AND_OBSERVER, "catch-up with 1-entry appends slower than the proposal rate (sim fix)"),
]


@pytest.mark.parametrize(
    ("seed", "faults"), [r[:2] for r in REGRESSION_SEEDS], ids=[f"seed-{r[0]}" for r in REGRESSION_SEEDS]
)
def test_regression_seed(seed: int, faults: Faults) -> None:
    Simulation(seed, faults).run()


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
    # (id, how the core is broken, words expected in the failure)
    ("vote-before-persist-5.2", _vote_before_persist, "grants a vote before persisting"),
    ("commit-unpersisted-own-entry", _count_unpersisted, "have it on disk"),
    ("vote-for-stale-log-5.4.1", _grant_any_log, "Leader Completeness"),
    ("minority-quorum", _minority_quorum, "Election Safety"),
]
MUTANT_SEEDS = range(60)  # each mutant is caught within the first few seeds; 60 leaves slack


@pytest.mark.parametrize(("mutate", "expected"), [m[1:] for m in MUTANTS], ids=[m[0] for m in MUTANTS])
def test_the_simulation_catches_a_broken_core(monkeypatch, mutate, expected: str) -> None:
    mutate(monkeypatch)
    for seed in MUTANT_SEEDS:
        try:
            run_seed(seed)
        except SimFailure as exc:
            assert expected in str(exc), f"seed {seed} failed for another reason: {exc}"
            return
    pytest.fail(f"no seed in {MUTANT_SEEDS} noticed the broken core (expected {expected!r})")
