"""proto.runtime.latency_trace: off unless PYKRAFT_LATENCY_TRACE names a directory; on, the events a process
recorded are written there when it exits, one ``ns<TAB>name<TAB>detail`` line each, in order, with
CLOCK_MONOTONIC nanoseconds (the clock a benchmark's ``time.monotonic_ns()`` shares)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from proto.runtime.latency_trace import TRACE_ENV

SCRIPT = """
from proto.runtime import latency_trace
assert latency_trace.ENABLED
latency_trace.event("request_in", "Produce rdkafka")
latency_trace.event("response_out", "Produce rdkafka", at_ns=12345)
"""
ROOT = Path(__file__).resolve().parents[3]


def run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=60, cwd=ROOT, check=False)  # fmt: skip


def test_events_are_written_at_exit_with_the_shared_monotonic_clock(tmp_path: Path) -> None:
    before = time.monotonic_ns()
    done = run(SCRIPT, {**os.environ, TRACE_ENV: str(tmp_path)})
    assert done.returncode == 0, done.stderr
    files = list(tmp_path.glob("trace-*.tsv"))
    assert len(files) == 1, files
    lines = [line.split("\t") for line in files[0].read_text().splitlines()]
    assert [(name, detail) for _, name, detail in lines] == [
        ("request_in", "Produce rdkafka"), ("response_out", "Produce rdkafka"),
    ]  # fmt: skip
    assert before <= int(lines[0][0]) <= time.monotonic_ns()
    assert int(lines[1][0]) == 12345


def test_off_without_the_variable() -> None:
    env = {k: v for k, v in os.environ.items() if k != TRACE_ENV}
    done = run("from proto.runtime import latency_trace; print(latency_trace.ENABLED)", env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
