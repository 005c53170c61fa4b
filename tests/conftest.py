"""Shared test configuration.

- Refuse ``python -O`` (the cores' invariants are assertions).
- Hypothesis runs derandomized (profile ``ci``, the default): every run of the suite tries the same
  examples, so CI is red only when the code is; no example database either, so no run depends on
  what an earlier run on this machine found. Exploring is explicit: ``--hypothesis-seed N`` picks
  the ``explore`` profile with that seed (replayable), ``--hypothesis-profile explore`` a random one.
  A counterexample found that way becomes an ``@example`` of its test.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

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


# --- shuffled order of the process tests ----------------------------------------------------------
# Tests must not depend on each other's side effects (issue 14 §3). The one run of the suite that CI
# makes proves it for the tests that share processes: the modules of SHUFFLED_KINDS swap places among
# themselves and the tests inside each such module run in a shuffled order. A module stays contiguous,
# so its module-scoped cluster still starts once and the suite costs what it did. The seed is new
# each run (each run tries another order) and is printed in the header and after a failure;
# ``--shuffle-seed N`` replays an order, ``--shuffle-seed off`` keeps the file order. The order of a
# module's tests depends only on the seed and the module, so a single module replays alone too.

SHUFFLED_KINDS = ("integration", "e2e", "compat")  # top-level folders under tests/
# (tests/compat shares a cluster per module like the integration tests; tests/docker starts a stack
# per test and tests/chaos shares none, so their order proves nothing and stays the file order.)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shuffle-seed",
        default=None,
        help="seed of the process tests' shuffled order (default: new each run; 'off': file order)",
    )


def _shuffle_seed(config: pytest.Config) -> int | None:
    if not hasattr(config, "_pykraft_shuffle_seed"):
        given = config.getoption("--shuffle-seed")
        if given == "off":
            seed = None
        elif given is None:
            seed = random.SystemRandom().randrange(10**6)
        else:
            try:
                seed = int(given)
            except ValueError:
                raise pytest.UsageError(f"--shuffle-seed takes an integer or 'off', not {given!r}") from None
        config._pykraft_shuffle_seed = seed  # type: ignore[attr-defined]
    return config._pykraft_shuffle_seed  # type: ignore[attr-defined]


def _shuffled_kind(item: pytest.Item, tests_dir: Path) -> bool:
    try:
        parts = item.path.relative_to(tests_dir).parts
    except ValueError:
        return False
    return len(parts) > 1 and parts[0] in SHUFFLED_KINDS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seed = _shuffle_seed(config)
    if seed is None:
        return
    tests_dir = Path(__file__).parent
    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    groups = list(modules.items())
    slots = [i for i, (path, group) in enumerate(groups) if _shuffled_kind(group[0], tests_dir)]
    config._pykraft_shuffled = bool(slots)  # type: ignore[attr-defined]
    moved = [groups[i] for i in slots]
    random.Random(seed).shuffle(moved)
    for slot, (path, group) in zip(slots, moved, strict=True):
        order = list(group)
        random.Random(f"{seed}:{path.relative_to(tests_dir)}").shuffle(order)
        groups[slot] = (path, order)
    items[:] = [item for _, group in groups for item in group]


def pytest_report_header(config: pytest.Config) -> str:
    seed = _shuffle_seed(config)
    if seed is None:
        return "integration/e2e/compat tests: file order (--shuffle-seed off)"
    return f"integration/e2e/compat tests: shuffled order, --shuffle-seed {seed} replays it"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    seed = _shuffle_seed(config)
    if exitstatus != 0 and seed is not None and getattr(config, "_pykraft_shuffled", False):
        terminalreporter.write_line(f"process tests ran in a shuffled order: --shuffle-seed {seed}")
