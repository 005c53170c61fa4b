"""Shared test configuration.

- Refuse ``python -O`` (the cores' invariants are assertions).
- Hypothesis runs derandomized (profile ``ci``, the default): every run of the suite tries the same
  examples, so CI is red only when the code is; no example database either, so no run depends on
  what an earlier run on this machine found. Exploring is explicit: ``--hypothesis-seed N`` picks
  the ``explore`` profile with that seed (replayable), ``--hypothesis-profile explore`` a random one.
  A counterexample found that way becomes an ``@example`` of its test.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import settings

if not __debug__ or sys.flags.optimize:
    raise SystemExit("the test suite refuses to run under python -O: invariants are assertions")

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)
settings.load_profile("ci")


@pytest.hookimpl(tryfirst=True)  # before hypothesis' own plugin, which loads --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--hypothesis-seed", None) is not None:
        settings.load_profile("explore")  # derandomize would ignore the seed
