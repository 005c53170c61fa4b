"""The Raft simulation as tests: many seeds (safety after every event, liveness after the faults),
and determinism (the same seed gives the same trace hash).

``pytest tests/sim/raft --seeds 10000`` runs more seeds; ``--seed S`` replays one.
"""

from __future__ import annotations

import pytest

from tests.sim.conftest import seed_range
from tests.sim.raft.sim import SimFailure, Simulation, run_seed

CI_SEEDS = 2000
CHUNK = 100

pytestmark = pytest.mark.sim


def chunks(config: pytest.Config) -> list[list[int]]:
    seeds = seed_range(config, CI_SEEDS)
    return [seeds[i : i + CHUNK] for i in range(0, len(seeds), CHUNK)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed_chunk" in metafunc.fixturenames:
        groups = chunks(metafunc.config)
        metafunc.parametrize("seed_chunk", groups, ids=[f"seeds-{g[0]}-{g[-1]}" for g in groups])


def test_seeds_keep_raft_safe_and_live(seed_chunk: list[int]) -> None:
    """Raft §5.2-§5.4 safety properties after every event, and liveness once faults stop."""
    failures = []
    for seed in seed_chunk:
        try:
            run_seed(seed)
        except SimFailure as exc:
            failures.append(f"{exc}\n  replay: python -m tests.sim.run raft --seed {seed} --trace")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("seed", [0, 7, 12345])
def test_the_same_seed_gives_the_same_trace(seed: int) -> None:
    """FoundationDB-style determinism: a failing seed is a reproducible bug report."""
    first, second = run_seed(seed), run_seed(seed)
    assert first == second
    assert first.trace_hash != run_seed(seed + 1).trace_hash


def test_a_run_exercises_the_protocol() -> None:
    """A sanity floor so a broken simulator cannot pass by doing nothing: over 50 seeds there are
    elections, commits, acknowledged proposals, reads and snapshot installs."""
    results = [Simulation(seed).run() for seed in range(50)]
    assert sum(r.elections for r in results) >= 50
    assert min(r.acked for r in results) >= 1
    assert sum(r.reads for r in results) >= 50
    assert sum(r.snapshots_installed for r in results) >= 5
