"""The README's main command, ``./dev demo`` (= ``pykraft demo``), as a newcomer runs it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.timeout(600)
def test_demo_loses_nothing_and_queries_with_spark() -> None:
    result = subprocess.run([sys.executable, "-m", "pykraft.cli", "demo"], capture_output=True, text=True,
                            timeout=540, check=False)
    out = result.stdout
    assert result.returncode == 0, f"demo failed:\n{out[-3000:]}\n{result.stderr[-3000:]}"
    counts = re.search(r"(\d+) acknowledged, (\d+) read back, 0 lost, 0 duplicated", out)
    assert counts and counts.group(1) == counts.group(2) == "5000", out[-2000:]
    # Leadership of partition 0 moved to another broker with a bumped leader epoch.
    assert re.search(r"partition 0: leader \d+\s+epoch [1-9]", out), out[-2000:]
    # The Spark step printed one row per customer and the committed count per partition.
    assert re.search(r"alice\s+\d+\s+\d+", out), out[-2000:]
    per_partition = [int(n) for n in re.findall(r"partition \d: (\d+) committed records", out)]
    assert sum(per_partition) == 5000, out[-2000:]
    assert "Stopping the cluster" in out
    # Produced and read back with confluent-kafka; librdkafka's own log lines (a refused connection to
    # the killed broker, ...) stay off stderr.
    assert "with confluent-kafka to the Kafka listeners" in out
    assert "librdkafka" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-3000:]
