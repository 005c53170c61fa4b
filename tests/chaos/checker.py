"""The checker: anomalies in a chaos history, with the names Jepsen uses for Kafka-like systems.

Inputs are the ``Op`` records of ``tests.chaos.history``. Every read — an acknowledged send (the
broker named the offset), a poll, the final read — is an *observation* of ``(topic, partition,
offset) -> value``. The final read (after every fault healed and every node is back) is the
reference log of each partition. Values are unique per send, so a value names one write.

| anomaly | meaning |
|---|---|
| ``lost-write`` | an acknowledged value was never read, while a read of its partition saw a later offset |
| ``duplicate`` | one value observed at two different offsets |
| ``inconsistent-offsets`` | one offset observed with two different values |
| ``nonmonotonic-poll`` | within one consumer generation, a poll returned an offset <= an earlier one |
| ``poll-skip`` | within one generation, consecutive polled offsets jumped over records of the final log |
| ``unseen`` | an acknowledged value is missing from the final read |
| ``committed-offsets-backwards`` | a committed offset observed after another (in real time) is lower |
| ``truncated-read`` | a poll returned a record the final log does not hold at that offset (it was read at |
|   | or above the HW and later truncated), or the consumer reported a truncation (KIP-320) |

A generation of a partition is the stretch of one consumer between two ``assign`` ops naming it (a
group rebalance that assigned it, or a new manual assignment). Pure functions, no I/O.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from proto.kafka_types import TopicPartition
from tests.chaos.history import OK, Op

ANOMALIES = (
    "lost-write",
    "duplicate",
    "inconsistent-offsets",
    "nonmonotonic-poll",
    "poll-skip",
    "unseen",
    "committed-offsets-backwards",
    "truncated-read",
)
MAX_EXAMPLES_PER_KIND = 5


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: str
    message: str
    ops: tuple[int, ...]  # indices of the ops that show it


@dataclass
class CheckResult:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALIES, 0))
    examples: list[Anomaly] = field(default_factory=list)

    def add(self, anomaly: Anomaly) -> None:
        assert anomaly.kind in self.counts, f"unknown anomaly {anomaly.kind!r}"
        self.counts[anomaly.kind] += 1
        if self.counts[anomaly.kind] <= MAX_EXAMPLES_PER_KIND:
            self.examples.append(anomaly)

    @property
    def valid(self) -> bool:
        return not any(self.counts.values())


def check(history: Sequence[Op]) -> CheckResult:
    result = CheckResult()
    ok = [op for op in history if op.type == OK]
    final = final_logs(ok)
    acked = {op.value["value"]: op for op in ok if op.f == "send"}
    by_offset, by_value = observations(ok)
    for anomaly in (
        *inconsistent_offsets(by_offset),
        *duplicates(by_value),
        *unseen(acked, final),
        *lost_writes(acked, by_value, by_offset),
        *truncated_reads(ok, final),
        *poll_order(ok, final),
        *committed_backwards(ok),
    ):
        result.add(anomaly)
    return result


def final_logs(ok: Iterable[Op]) -> dict[TopicPartition, dict[int, str]]:
    logs: dict[TopicPartition, dict[int, str]] = {}
    for op in ok:
        if op.f == "final-read":
            tp = TopicPartition(op.value["topic"], op.value["partition"])
            logs.setdefault(tp, {}).update(dict(op.value["records"]))
    return logs


def observations(ok: Iterable[Op]) -> tuple[dict, dict]:
    """``(topic, partition, offset) -> value -> [op]`` and ``value -> (topic, partition, offset) -> [op]``."""
    by_offset: dict[tuple[str, int, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    by_value: dict[str, dict[tuple[str, int, int], list[int]]] = defaultdict(lambda: defaultdict(list))
    for op, position, value in _reads(ok):
        by_offset[position][value].append(op.index)
        by_value[value][position].append(op.index)
    return by_offset, by_value


def _reads(ok: Iterable[Op]) -> Iterable[tuple[Op, tuple[str, int, int], str]]:
    for op in ok:
        if op.f == "send":
            v = op.value
            yield op, (v["topic"], v["partition"], v["offset"]), v["value"]
        elif op.f == "poll":
            for topic, partition, offset, value in op.value["records"]:
                yield op, (topic, partition, offset), value
        elif op.f == "final-read":
            topic, partition = op.value["topic"], op.value["partition"]
            for offset, value in op.value["records"]:
                yield op, (topic, partition, offset), value


def inconsistent_offsets(by_offset: dict) -> Iterable[Anomaly]:
    for position, values in sorted(by_offset.items()):
        if len(values) > 1:
            ops = tuple(sorted({i for idx in values.values() for i in idx[:2]}))
            yield Anomaly("inconsistent-offsets", f"{_name(position)} holds {sorted(values)}", ops)


def duplicates(by_value: dict) -> Iterable[Anomaly]:
    for value, positions in sorted(by_value.items()):
        if len(positions) > 1:
            ops = tuple(sorted({i for idx in positions.values() for i in idx[:2]}))
            where = ", ".join(_name(p) for p in sorted(positions))
            yield Anomaly("duplicate", f"value {value!r} at {where}", ops)


def unseen(acked: dict[str, Op], final: dict[TopicPartition, dict[int, str]]) -> Iterable[Anomaly]:
    if not final:
        return  # no final read: nothing to judge (the harness always makes one)
    in_final = {value for log in final.values() for value in log.values()}
    for value, op in sorted(acked.items(), key=lambda kv: kv[1].index):
        if value not in in_final and TopicPartition(op.value["topic"], op.value["partition"]) in final:
            where = _name((op.value["topic"], op.value["partition"], op.value["offset"]))
            message = f"acknowledged {value!r} at {where} is not in the final read"
            yield Anomaly("unseen", message, (op.index,))


def lost_writes(acked: dict[str, Op], by_value: dict, by_offset: dict) -> Iterable[Anomaly]:
    """Acknowledged, never read by anyone, yet a later offset of its partition was read."""
    highest_read: dict[TopicPartition, tuple[int, int]] = {}
    for (topic, partition, offset), values in by_offset.items():
        read_ops = [i for value, idx in values.items() for i in idx if not _is_ack_of(acked, value, i)]
        if read_ops and offset > highest_read.get((topic, partition), (-1, -1))[0]:
            highest_read[(topic, partition)] = (offset, read_ops[0])
    for value, op in sorted(acked.items(), key=lambda kv: kv[1].index):
        reads = [i for idx in by_value.get(value, {}).values() for i in idx if i != op.index]
        tp = TopicPartition(op.value["topic"], op.value["partition"])
        later = highest_read.get(tp)
        if not reads and later is not None and later[0] > op.value["offset"]:
            yield Anomaly(
                "lost-write",
                f"acknowledged {value!r} at {_name((*tp, op.value['offset']))} was never read; "
                f"offset {later[0]} was",
                (op.index, later[1]),
            )


def _is_ack_of(acked: dict[str, Op], value: str, index: int) -> bool:
    op = acked.get(value)
    return op is not None and op.index == index


def truncated_reads(ok: Iterable[Op], final: dict[TopicPartition, dict[int, str]]) -> Iterable[Anomaly]:
    for op in ok:
        if op.f == "truncation":
            v = op.value
            yield Anomaly(
                "truncated-read",
                f"{op.process} was told {_name((v['topic'], v['partition'], v['divergent_offset']))} "
                f"and later (up to {v['position']}) were truncated after it read them",
                (op.index,),
            )
        elif op.f == "poll":
            for topic, partition, offset, value in op.value["records"]:
                log = final.get((topic, partition))
                if log is not None and log.get(offset) != value:
                    now = log.get(offset, "nothing")
                    yield Anomaly(
                        "truncated-read",
                        f"{op.process} read {value!r} at {_name((topic, partition, offset))}; "
                        f"the final log holds {now!r} there",
                        (op.index,),
                    )


def poll_order(ok: Iterable[Op], final: dict[TopicPartition, dict[int, str]]) -> Iterable[Anomaly]:
    """nonmonotonic-poll and poll-skip, per consumer process and generation."""
    # process -> tp -> (offset, op)
    last: dict[str, dict[TopicPartition, tuple[int, int]]] = defaultdict(dict)
    for op in ok:
        if op.f == "assign":  # a new generation for the partitions it (re)assigns
            for topic, partition in op.value["partitions"]:
                last[op.process].pop((topic, partition), None)
        if op.f != "poll":
            continue
        seen = last[op.process]
        for topic, partition, offset, _value in op.value["records"]:
            tp = TopicPartition(topic, partition)
            before = seen.get(tp)
            seen[tp] = (offset, op.index)
            if before is None:
                continue
            prev, prev_op = before
            if offset <= prev:
                yield Anomaly(
                    "nonmonotonic-poll",
                    f"{op.process} polled {_name((*tp, offset))} after {prev} in one generation",
                    (prev_op, op.index),
                )
            elif offset > prev + 1:
                skipped = [o for o in range(prev + 1, offset) if o in final.get(tp, {})]
                if skipped:
                    yield Anomaly(
                        "poll-skip",
                        f"{op.process} polled {_name((*tp, offset))} after {prev}, skipping "
                        f"{len(skipped)} record(s) from offset {skipped[0]}",
                        (prev_op, op.index),
                    )


def committed_backwards(ok: Iterable[Op]) -> Iterable[Anomaly]:
    """A committed offset observed (commit answered, or OffsetFetch) after another one completed is lower."""
    seen: dict[tuple[str, str, int], list[tuple[float, float, int, int]]] = defaultdict(list)
    for op in ok:
        if op.f in ("commit", "committed"):
            for topic, partition, offset in op.value["offsets"]:
                if offset is not None and offset >= 0:
                    key = (op.value["group"], topic, partition)
                    seen[key].append((op.start_s, op.end_s, offset, op.index))
    for (group, topic, partition), obs in sorted(seen.items()):
        ends = sorted((end, offset, index) for _start, end, offset, index in obs)
        done: list[tuple[int, int]] = []  # max-heap of (-offset, op) over observations already completed
        j = 0
        for start, _end, offset, index in sorted(obs):
            while j < len(ends) and ends[j][0] < start:
                heapq.heappush(done, (-ends[j][1], ends[j][2]))
                j += 1
            if done and -done[0][0] > offset:
                higher, higher_op = -done[0][0], done[0][1]
                yield Anomaly(
                    "committed-offsets-backwards",
                    f"group {group} {topic}-{partition}: committed offset {offset} observed after "
                    f"{higher} had been",
                    (higher_op, index),
                )


def _name(position: tuple) -> str:
    topic, partition, *offset = position
    return f"{topic}-{partition}" + (f"@{offset[0]}" if offset else "")


def excerpt(history: Sequence[Op], anomaly: Anomaly, context_s: float = 5.0, limit: int = 30) -> str:
    """The ops that show ``anomaly`` plus the nemesis ops around them, one JSON line each."""
    by_index = {op.index: op for op in history}
    shown = [by_index[i] for i in anomaly.ops if i in by_index]
    if shown:
        lo, hi = min(op.start_s for op in shown) - context_s, max(op.end_s for op in shown) + context_s
        shown += [op for op in history if op.process == "nemesis" and lo <= op.end_s <= hi]
    unique = {op.index: op for op in shown}
    lines = [_short(unique[i]) for i in sorted(unique)[:limit]]
    return f"{anomaly.kind}: {anomaly.message}\n" + "\n".join("    " + line for line in lines)


def _short(op: Op, max_chars: int = 400) -> str:
    text = op.to_json()
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def report(history: Sequence[Op], result: CheckResult) -> str:
    """Every example anomaly with its history excerpt (empty when the history is valid)."""
    return "\n\n".join(excerpt(history, a) for a in result.examples)
