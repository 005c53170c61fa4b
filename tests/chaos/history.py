"""The history of a chaos run: every operation a client or the nemesis performed, with its outcome.

Jepsen's model, flattened: one ``Op`` per *completed* operation, carrying when it was invoked and
when it completed (seconds since the run started, ``time.monotonic``), who did it (``process``:
``producer-0``, ``consumer-1``, ``admin``, ``nemesis``, ``final``), what it was (``f``) and how it
ended (``type``):

- ``ok``: the operation took effect (a send was acknowledged, a poll returned records, a commit was
  answered without error);
- ``fail``: it certainly did not take effect;
- ``info``: unknown (a send that timed out may or may not have been written) — never counted as
  acknowledged, never counted as lost.

``value`` depends on ``f`` (all JSON-friendly):

| f | value |
|---|---|
| ``send`` | ``{"topic", "partition", "value", "offset"}`` (offset ``-1`` unless ok) |
| ``poll`` | ``{"generation", "records": [[topic, partition, offset, value], ...]}`` |
| ``assign`` | ``{"generation", "partitions": [[topic, partition], ...]}`` — a new generation starts |
| ``commit`` / ``committed`` | ``{"group", "generation", "offsets": [[topic, partition, offset], ...]}`` |
| ``truncation`` | ``{"topic", "partition", "position", "divergent_offset"}`` (reads were cut) |
| ``final-read`` | ``{"topic", "partition", "high_watermark", "records": [[offset, value], ...]}`` |
| ``fault`` / ``heal`` | ``{"kind", "nodes", ...}`` |
| ``create-topic`` / ``add-partitions`` | ``{"topic", "partitions"}`` |

Thread-safe: workload threads append concurrently; indices are assigned under a lock in completion
order, so within one process the indices follow program order.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OK, FAIL, INFO = "ok", "fail", "info"
TYPES = (OK, FAIL, INFO)


@dataclass(frozen=True, slots=True)
class Op:
    index: int
    process: str
    f: str
    type: str
    start_s: float
    end_s: float
    value: Any
    error: str = ""

    def __post_init__(self) -> None:
        assert self.type in TYPES, f"op type {self.type!r} not in {TYPES}"
        assert self.end_s >= self.start_s, f"op {self.index} ends at {self.end_s} < start {self.start_s}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


class History:
    """An append-only list of ``Op``; ``now()`` is the run's clock (seconds since it was created)."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self._ops: list[Op] = []
        self._counts: Counter[tuple[str, str]] = Counter()  # (f, type) -> ops so far
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self._t0

    def add(self, process: str, f: str, type_: str, start_s: float, value: Any, error: str = "",
            end_s: float | None = None) -> Op:  # fmt: skip
        end = self.now() if end_s is None else end_s
        with self._lock:
            op = Op(len(self._ops), process, f, type_, start_s, max(end, start_s), value, error)
            self._ops.append(op)
            self._counts[(f, type_)] += 1
        return op

    def count(self, f: str, type_: str = OK) -> int:
        """How many ``f`` ops ended with ``type_`` so far (cheap: for waits on progress)."""
        with self._lock:
            return self._counts[(f, type_)]

    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops())

    def write_jsonl(self, path: Path) -> None:
        path.write_text("".join(op.to_json() + "\n" for op in self.ops()))


def read_jsonl(path: Path) -> list[Op]:
    return [Op(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def build(rows: Iterable[tuple[str, str, str, Any]]) -> list[Op]:
    """A history from ``(process, f, type, value)`` rows, one time unit each (for hand-made tests)."""
    return [Op(i, p, f, t, float(i), float(i) + 0.5, v) for i, (p, f, t, v) in enumerate(rows)]
