"""One way to replay a seed, for every simulation: ``python -m tests.sim.run NAME --seed S`` prints the
same trace hash as the seed run inside pytest, whatever the process (FoundationDB-style determinism)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sim.run import SIMULATIONS

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_the_trace_does_not_depend_on_the_process_hash_seed(name: str) -> None:
    """Replays hold across processes: nothing may depend on the order of hashed strings."""
    root = Path(__file__).resolve().parents[2]
    hashes = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(root)}
        out = subprocess.run(
            [sys.executable, "-m", "tests.sim.run", name, "--seed", "77"],
            cwd=root, env=env, capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        hashes.add(re.search(r"trace_hash='([0-9a-f]+)'", out.stdout).group(1))
    assert hashes == {SIMULATIONS[name](77, False)[1]}
