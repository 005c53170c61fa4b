"""The broker simulation (tests/sim/broker/cluster.py) as tests: many seeds of the production code
(ReplicaManager, Partition, fetcher, purgatories, Log files, QuorumController) under crashes, power
losses, pauses, lost/delayed messages, cut links, elections and config changes, with the invariants of
tests/sim/broker/checker.py after every event and convergence at the end.

``pytest tests/sim/broker --seeds 10000`` runs more seeds; ``--seed S`` replays one (so does
``python -m tests.sim.run broker --seed S --trace``, which prints every event).
"""

from __future__ import annotations

import re

import pytest

from tests.sim.broker.cluster import Sim, SimFailure
from tests.sim.broker.defects import DEFECTS
from tests.sim.conftest import seed_range
from tests.sim.run import run_seeds

CI_SEEDS = 2000

pytestmark = pytest.mark.sim


@pytest.mark.timeout(900)
def test_seeds_keep_replication_safe_and_live(request: pytest.FixtureRequest) -> None:
    """Issue 14 §2: no acknowledged acks=all write lost while a replica that held it survives, HW
    monotonic within a leader epoch, one committed prefix, consumers below the HW only, and every
    follower back in the ISR once the faults stop."""
    seeds = seed_range(request.config, CI_SEEDS)
    _events, failures = run_seeds("broker", seeds)
    assert not failures, f"{len(failures)} of {len(seeds)} seeds failed:\n" + "\n".join(failures)


@pytest.mark.parametrize("seed", [0, 7, 12345])
def test_the_same_seed_gives_the_same_trace(seed: int) -> None:
    """FoundationDB-style determinism: a failing seed is a reproducible bug report."""
    first, second = Sim(seed), Sim(seed)
    assert first.run() == second.run()
    assert first.events == second.events
    assert first.trace_hash() != Sim(seed + 1).run()


def test_schedules_exercise_the_interesting_paths() -> None:
    """A floor against a vacuous simulator: over 30 seeds there are acknowledged writes, crashes and
    power losses, divergence truncations, ISR shrinks and expansions, elections of every kind,
    config changes, idle leader epochs and consumers reading."""
    trace = []
    for seed in range(30):
        sim = Sim(seed)
        sim.run()
        trace.extend(sim.trace)
        assert sim.checker.committed, f"seed {seed}: nothing was ever committed"
    text = "\n".join(trace)
    for needle in (
        "ack v", "power loss b", "crash b", "pause b", "cut ", "lost fetch", "PREFERRED election",
        "AlterPartition [", "session expired [", "alter config max.message.bytes", "producers quiet",
        "truncated", "heal", "stopped cleanly", "unclean election of", "delete topic churn",
        "followers rejoined the ISR",
    ):  # fmt: skip
        assert needle in text, f"no {needle!r} in 30 seeds"


def _first_violation(defect: str, max_seeds: int) -> str:
    with DEFECTS[defect]():
        for seed in range(max_seeds):
            try:
                Sim(seed).run()
            except SimFailure as failure:
                return str(failure)
    return ""


@pytest.mark.parametrize(
    ("defect", "expected"),
    [
        ("truncate_to_keeps_epoch_past_leo", r"follower truncation makes no progress|never rejoined the ISR"),
        ("recovery_stops_at_max_message_bytes", r"lost committed v\d+@\d+ .* without a power loss"),
        ("consumer_fetch_above_hw_out_of_range", r"told OFFSET_OUT_OF_RANGE .* although its log spans"),
        ("hw_runs_ahead_of_caught_up_followers", r"back in the ISR within \d+ ms of resuming"),
        ("forget_by_current_topic_id", r"fetched from b\d \d+ times in \d+ idle ms"),
        ("session_keeps_partitions_forgotten_by_id", r"fetched from b\d \d+ times in \d+ idle ms"),
    ],
)
@pytest.mark.timeout(600)
def test_the_simulation_finds_each_defect_of_issue_14(defect: str, expected: str) -> None:
    """Broken cores: with the old behaviour patched back (tests/sim/broker/defects.py), some seed
    reports the violation that defect causes — so the simulation can see it. (The last two are issue
    24 §1's liveness bugs: the bounce phase at the end of every seed finds them on its first seeds.)"""
    report = _first_violation(defect, max_seeds=400)
    assert report, f"no seed in 400 found {defect}"
    assert re.search(expected, report), report
