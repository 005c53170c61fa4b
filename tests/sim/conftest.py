"""Options for the seeded simulations.

``--seeds N``  run N seeds (from ``--seed-start``, default 0) instead of each simulation's CI default;
``--seed S``   run exactly seed S (replay a failure; it prints the command to use).
"""

from __future__ import annotations

import pytest

DEFAULT_SEED_START = 0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simulation")
    group.addoption("--seed", type=int, default=None, help="run exactly this simulation seed (replay)")
    group.addoption("--seeds", type=int, default=None, help="how many simulation seeds to run")
    group.addoption("--seed-start", type=int, default=DEFAULT_SEED_START, help="first seed of --seeds")


def seed_range(config: pytest.Config, default_count: int) -> list[int]:
    """The seeds a simulation test should run, honouring --seed / --seeds / --seed-start."""
    one = config.getoption("--seed")
    if one is not None:
        return [one]
    count = config.getoption("--seeds")
    start = config.getoption("--seed-start")
    return list(range(start, start + (default_count if count is None else count)))
