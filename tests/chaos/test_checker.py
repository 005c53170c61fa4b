"""The chaos checker on hand-made histories: a clean history passes, each anomaly is found and named.

Jepsen's Kafka anomalies (lost-write, duplicate, inconsistent-offsets, nonmonotonic-poll, poll-skip,
unseen) plus committed offsets going backwards and records read and later truncated.
"""

from __future__ import annotations

import pytest

from tests.chaos.checker import ANOMALIES, check, excerpt, report
from tests.chaos.history import FAIL, INFO, OK, History, Op, build, read_jsonl

T = "t"


def send(value: str, offset: int, partition: int = 0, type_: str = OK, process: str = "producer-0"):
    return (process, "send", type_, {"topic": T, "partition": partition, "value": value, "offset": offset})


def poll(records: list[tuple[int, str]], process: str = "consumer-0", partition: int = 0, generation: int = 0
         ):  # fmt: skip
    rows = [[T, partition, o, v] for o, v in records]
    return (process, "poll", OK, {"generation": generation, "records": rows})


def assign(process: str = "consumer-0", generation: int = 0):
    return (process, "assign", OK, {"generation": generation, "partitions": [[T, 0]]})


def final(records: list[tuple[int, str]], partition: int = 0):
    hw = records[-1][0] + 1 if records else 0
    value = {"topic": T, "partition": partition, "high_watermark": hw, "records": [list(r) for r in records]}
    return ("final", "final-read", OK, value)


def commit(offset: int, f: str = "commit", process: str = "consumer-0"):
    return (process, f, OK, {"group": "g", "generation": 1, "offsets": [[T, 0, offset]]})


LOG = [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
CLEAN = [
    assign(),
    send("a", 0), send("b", 1),
    poll([(0, "a"), (1, "b")]),
    commit(2),
    send("c", 2), send("d", 3),
    ("producer-1", "send", INFO, {"topic": T, "partition": 0, "value": "x", "offset": -1}),  # unknown
    ("producer-1", "send", FAIL, {"topic": T, "partition": 0, "value": "y", "offset": -1}),
    poll([(2, "c")]),
    commit(3), commit(3, "committed"),
    assign(generation=1),  # a rebalance: the consumer may go back to the committed offset
    poll([(3, "d")]), poll([(3, "d")], process="consumer-1"),
    commit(4),
    final(LOG),
]  # fmt: skip


def test_a_clean_history_has_no_anomaly() -> None:
    result = check(build(CLEAN))
    assert result.valid, report(build(CLEAN), result)
    assert set(result.counts) == set(ANOMALIES)


CASES = {
    "lost-write": [send("a", 0), send("b", 1), poll([(1, "b")]), final([(1, "b")])],
    "duplicate": [send("a", 0), send("b", 1), final([(0, "a"), (1, "b"), (2, "a")])],
    "inconsistent-offsets": [send("a", 0), poll([(0, "z")]), final([(0, "a")])],
    "nonmonotonic-poll": [assign(), send("a", 0), send("b", 1), poll([(0, "a"), (1, "b")]), poll([(1, "b")]),
                          final(LOG[:2])],
    "poll-skip": [assign(), poll([(0, "a")]), poll([(2, "c")]), final(LOG[:3])],
    "unseen": [send("a", 0), send("b", 1), final([(0, "a")])],
    "committed-offsets-backwards": [commit(5), commit(3, "committed"), final([])],
    "truncated-read": [send("a", 0), poll([(0, "a"), (1, "q")]), final([(0, "a")])],
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_anomaly_is_found(kind: str) -> None:
    history = build(CASES[kind])
    result = check(history)
    assert result.counts[kind] >= 1, f"{kind} not found: {result.counts}"
    example = next(a for a in result.examples if a.kind == kind)
    text = excerpt(history, example)
    assert text.startswith(kind) and '"index":' in text  # the history excerpt that shows it


def test_the_anomaly_table_is_exact_for_each_case() -> None:
    """Each hand-made history shows its own anomaly and only the ones it implies."""
    expected = {
        "lost-write": {"lost-write", "unseen"},
        "duplicate": {"duplicate"},
        "inconsistent-offsets": {"inconsistent-offsets", "truncated-read"},
        "nonmonotonic-poll": {"nonmonotonic-poll"},
        "poll-skip": {"poll-skip"},
        "unseen": {"unseen"},
        "committed-offsets-backwards": {"committed-offsets-backwards"},
        "truncated-read": {"truncated-read"},
    }
    for kind, rows in CASES.items():
        found = {k for k, n in check(build(rows)).counts.items() if n}
        assert found == expected[kind], kind


def test_a_truncation_reported_by_the_consumer_is_an_anomaly() -> None:
    row = ("consumer-0", "truncation", OK, {"topic": T, "partition": 0, "position": 7, "divergent_offset": 5})
    assert check(build([row, final([])])).counts["truncated-read"] == 1


def test_overlapping_commit_observations_are_not_ordered() -> None:
    """Only an observation that started after another completed must not be lower."""
    ops = [
        Op(0, "c0", "commit", OK, 0.0, 2.0, {"group": "g", "generation": 1, "offsets": [[T, 0, 5]]}),
        Op(1, "c1", "committed", OK, 1.0, 3.0, {"group": "g", "generation": 1, "offsets": [[T, 0, 3]]}),
    ]
    assert check(ops).valid
    late = Op(2, "c1", "committed", OK, 2.5, 3.0, {"group": "g", "generation": 1, "offsets": [[T, 0, 4]]})
    assert check([*ops, late]).counts["committed-offsets-backwards"] == 1


def test_a_new_generation_resets_poll_order() -> None:
    rows = [assign(), poll([(0, "a"), (1, "b")]), assign(generation=1), poll([(0, "a")]), final(LOG[:2])]
    assert check(build(rows)).valid


def test_an_assignment_resets_only_the_partitions_it_names() -> None:
    """Cooperative rebalancing: a partition the member kept keeps its generation."""
    other = ("consumer-0", "assign", OK, {"generation": 2, "partitions": [[T, 1]]})
    rows = [assign(), poll([(0, "a"), (1, "b")]), other, poll([(0, "a")]), final(LOG[:2])]
    assert check(build(rows)).counts["nonmonotonic-poll"] == 1


def test_history_round_trips_through_jsonl(tmp_path) -> None:
    history = History()
    start = history.now()
    history.add("producer-0", "send", OK, start, {"topic": T, "partition": 0, "value": "a", "offset": 0})
    history.add("final", "final-read", OK, start, {"topic": T, "partition": 0, "high_watermark": 1,
                                                    "records": [[0, "a"]]})  # fmt: skip
    assert (history.count("send"), history.count("send", INFO), history.count("final-read")) == (1, 0, 1)
    path = tmp_path / "history.jsonl"
    history.write_jsonl(path)
    assert read_jsonl(path) == history.ops()
    assert check(read_jsonl(path)).valid
