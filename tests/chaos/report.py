"""Figures of a chaos run from its history: operations, faults, anomalies, unavailability per fault.

**Unavailability of a fault** = the longest time, from the moment the fault was injected until
``SETTLE_S`` after it was healed (or until the next fault, or the last acknowledgement of the run,
whichever is first), during which some partition of the workload's topic (one that existed before
the fault) acknowledged no write. It includes the fault itself (a partition whose leader is
SIGSTOPped acknowledges nothing until the controller moves leadership) and the recovery after the
heal. Baseline gaps between acknowledgements are a few tens of ms at the workload's rate.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from tests.chaos.checker import ANOMALIES, CheckResult
from tests.chaos.history import FAIL, INFO, OK, Op

SETTLE_S = 10.0
SECTION = "## chaos"


def unavailability(history: Sequence[Op], topic: str) -> list[tuple[str, float]]:
    """``(kind, seconds)`` per fault, in order."""
    acks: dict[int, list[float]] = defaultdict(list)
    for op in history:
        if op.f == "send" and op.type == OK and op.value["topic"] == topic:
            acks[op.value["partition"]].append(op.end_s)
    for times in acks.values():
        times.sort()
    faults = [op for op in history if op.process == "nemesis" and op.f == "fault"]
    heals = [op for op in history if op.process == "nemesis" and op.f == "heal"]
    last_ack = max((t[-1] for t in acks.values() if t), default=0.0)  # the writers stop after it
    out = []
    for i, fault in enumerate(faults):
        heal_end = heals[i].end_s if i < len(heals) else fault.end_s
        end = min(heal_end + SETTLE_S, max(last_ack, fault.start_s))
        if i + 1 < len(faults):
            end = min(end, faults[i + 1].start_s)
        existing = [t for t in acks.values() if t and t[0] < fault.start_s]  # partitions created later: no
        out.append((fault.value["kind"], max((_longest_gap(t, fault.start_s, end) for t in existing),
                                             default=0.0)))  # fmt: skip
    return out


def _longest_gap(times: list[float], start: float, end: float) -> float:
    lo, hi = bisect.bisect_left(times, start), bisect.bisect_right(times, end)
    points = [start, *times[lo:hi], end]
    return max(b - a for a, b in itertools.pairwise(points))


def figures(history: Sequence[Op], topic: str) -> dict[str, object]:
    ops = Counter((op.f, op.type) for op in history if op.process != "nemesis")
    polled = sum(len(op.value["records"]) for op in history if op.f == "poll" and op.type == OK)
    faults = Counter(op.value["kind"] for op in history if op.f == "fault")
    return {
        "sends": {t: ops[("send", t)] for t in (OK, FAIL, INFO)},
        "polls": ops[("poll", OK)],
        "records_polled": polled,
        "commits": {t: ops[("commit", t)] for t in (OK, FAIL, INFO)},
        "admin": {f: ops[(f, OK)] for f in ("create-topic", "add-partitions")},
        "admin_attempted": sum(n for (f, _t), n in ops.items() if f in ("create-topic", "add-partitions")),
        "faults": dict(sorted(faults.items())),
        "unavailability": unavailability(history, topic),
    }


def table(figs: dict, check: CheckResult, title: str) -> str:
    sends = figs["sends"]
    attempted = sum(sends.values())
    commits = figs["commits"]
    rows = [
        f"### {title}",
        "",
        "| what | count |",
        "|---|---|",
        (f"| sends attempted / acknowledged / unknown outcome / refused | {attempted} / {sends[OK]} / "
         f"{sends[INFO]} / {sends[FAIL]} |"),
        f"| polls returning records / records polled | {figs['polls']} / {figs['records_polled']} |",
        f"| commits attempted / acknowledged | {sum(commits.values())} / {commits[OK]} |",
        (f"| admin ops attempted / ok (create topic, add partitions) | {figs['admin_attempted']} / "
         f"{sum(figs['admin'].values())} |"),
        "",
        "| anomaly | count |",
        "|---|---|",
        *(f"| {kind} | {check.counts[kind]} |" for kind in ANOMALIES),
        "",
        "| fault | injected | unavailability median (s) | max (s) |",
        "|---|---|---|---|",
    ]
    by_kind: dict[str, list[float]] = defaultdict(list)
    for kind, seconds in figs["unavailability"]:
        by_kind[kind].append(seconds)
    for kind, count in figs["faults"].items():
        gaps = by_kind.get(kind) or [0.0]
        rows.append(f"| {kind} | {count} | {statistics.median(gaps):.1f} | {max(gaps):.1f} |")
    return "\n".join(rows) + "\n"


def write_section(results: Path, body: str) -> None:
    """Replace (or append) the ``## chaos`` section of ``bench/RESULTS.md``."""
    text = results.read_text() if results.exists() else ""
    section = f"{SECTION}\n\n{body.rstrip()}\n"
    start = text.find(f"\n{SECTION}\n")
    if start < 0:
        results.write_text(text.rstrip() + "\n\n" + section)
        return
    end = text.find("\n## ", start + 1)
    tail = "" if end < 0 else "\n" + text[end + 1 :]
    results.write_text(text[: start + 1] + section + tail)
