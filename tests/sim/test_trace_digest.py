"""tests.sim.trace_digest: the same code gives the same digest, and the digest covers the traces."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.sim


def digest(seeds: int, out: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tests.sim.trace_digest", str(seeds), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_same_seeds_same_digest_and_the_file_holds_every_trace(tmp_path: Path) -> None:
    first, second = digest(2, tmp_path / "a.txt"), digest(2, tmp_path / "b.txt")
    assert first == second and first.startswith("seeds=2 events=")
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()
    assert (tmp_path / "a.txt").read_text().count("== seed ") == 2
    assert digest(3, tmp_path / "c.txt") != first
