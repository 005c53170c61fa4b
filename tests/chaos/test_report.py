"""Figures of a chaos run on hand-made histories: unavailability per fault, the table, RESULTS.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import report
from tests.chaos.checker import check
from tests.chaos.history import OK, Op


def ack(i: int, t: float, partition: int = 0) -> Op:
    value = {"topic": "t", "partition": partition, "value": f"v{i}", "offset": i}
    return Op(i, "producer-0", "send", OK, t, t, value)


def nemesis(i: int, f: str, t: float, kind: str = "kill-leader") -> Op:
    return Op(i, "nemesis", f, OK, t, t, {"kind": kind, "nodes": ["broker-101"], "fault_s": 3.0})


def test_unavailability_is_the_longest_gap_from_the_fault_to_after_its_heal() -> None:
    acks = [ack(i, t) for i, t in enumerate([0.0, 0.5, 1.0, 4.5, 5.0, 5.5])]
    history = [*acks, nemesis(6, "fault", 1.2), nemesis(7, "heal", 4.0)]
    ((kind, seconds),) = report.unavailability(history, "t")
    assert kind == "kill-leader"
    assert seconds == pytest.approx(4.5 - 1.2)


def test_a_partition_that_never_recovers_is_unavailable_until_the_window_ends() -> None:
    history = [ack(0, 0.0), ack(1, 0.5, partition=1), nemesis(2, "fault", 1.0), nemesis(3, "heal", 2.0),
               ack(4, 2.5, partition=1), ack(5, 15.0, partition=1)]  # fmt: skip
    ((_, seconds),) = report.unavailability(history, "t")
    assert seconds == pytest.approx(2.0 + report.SETTLE_S - 1.0)  # partition 0 never acknowledged again


def test_partitions_created_after_the_fault_do_not_count() -> None:
    history = [ack(0, 0.0), nemesis(1, "fault", 1.0), ack(2, 1.5), nemesis(3, "heal", 2.0), ack(4, 20.0, 5)]
    ((_, seconds),) = report.unavailability(history, "t")
    assert seconds == pytest.approx(2.0 + report.SETTLE_S - 1.5)


def test_table_and_results_section(tmp_path: Path) -> None:
    history = [ack(0, 0.0), nemesis(1, "fault", 1.0), nemesis(2, "heal", 2.0), ack(3, 3.0)]
    text = report.table(report.figures(history, "t"), check(history), "a run")
    assert "| sends attempted / acknowledged / unknown outcome / refused | 2 / 2 / 0 / 0 |" in text
    assert "| kill-leader | 1 | 2.0 | 2.0 |" in text  # until the next acknowledgement
    assert "| lost-write | 0 |" in text
    results = tmp_path / "RESULTS.md"
    results.write_text("# results\n\n## other_bench\n\nkept\n")
    report.write_section(results, "first")
    report.write_section(results, "second")  # replaces the section, keeps the others
    assert results.read_text() == "# results\n\n## other_bench\n\nkept\n\n## chaos\n\nsecond\n"
    results.write_text("# results\n\n## chaos\n\nold\n\n## z_bench\n\nkept\n")
    report.write_section(results, "new")
    assert results.read_text() == "# results\n\n## chaos\n\nnew\n\n## z_bench\n\nkept\n"
