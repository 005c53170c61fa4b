"""How long the periodic checkpoint round stalls the broker's event loop: on the loop vs in a worker thread.

    ./dev bench checkpoint_stall_bench [--logs 100] [--rounds 6] [--dir DIR]

A broker writes every hosted log's HW / log start / recovery point checkpoints every
``replica.high.watermark.checkpoint.interval.ms``; a write is a temp file, an fsync, a rename and a
directory fsync (``storage.checkpoint``). This opens ``--logs`` real ``storage.log.Log`` directories
under ``--dir`` (default: a temp directory under /tmp — it must be a real disk: on tmpfs an fsync
costs nothing), moves every log's HW before each round (one file per log changes, as in a broker
whose partitions take writes) and runs the round two ways, alternating, ``--rounds`` times each:

- ``on loop``: the code before ``broker.replica.checkpoint_writer`` — ``Log.write_checkpoints()`` on the event
  loop, one log at a time with an ``await asyncio.sleep(0)`` between logs;
- ``worker``: ``CheckpointWriter.write_round()`` — snapshots on the loop, the files in one thread;
- ``idle``: no round, the probe alone for ``IDLE_S``: the lateness the machine's load causes anyway.

Meanwhile a probe coroutine sleeps 1 ms at a time and records how late it wakes: what any request,
heartbeat or follower fetch of the broker would wait. Printed per mode: the round's wall time, the
probe's p50 / p99 / max lateness, and the loop time lost (sum of the lateness above 1 ms, mean per
round). fsync time depends on the disk and on what else writes to it: compare the modes of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from broker.replica.checkpoint_writer import CheckpointWriter
from proto.clock import wall_clock_ms
from storage.config import LogConfig
from storage.log import Log
from storage.record_batch import build_batch

PROBE_S = 0.001
LATE_S = 0.001  # lateness above this counts as loop time lost
IDLE_S = 0.3


async def probe(samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(PROBE_S)
        samples.append(time.perf_counter() - start - PROBE_S)


async def on_loop_round(logs: dict[tuple[str, int], Log]) -> None:
    for plog in logs.values():
        plog.write_checkpoints()
        await asyncio.sleep(0)


async def measured(round_coro: Awaitable[object], samples: list[float]) -> float:
    stop = asyncio.Event()
    prober = asyncio.create_task(probe(samples, stop))
    await asyncio.sleep(0.02)  # the probe is running before the round starts
    start = time.perf_counter()
    await round_coro
    wall_s = time.perf_counter() - start
    stop.set()
    await prober
    return wall_s


def move_hws(logs: dict[tuple[str, int], Log]) -> None:
    for plog in logs.values():
        plog.append_as_leader(build_batch([(None, b"x" * 100, (), 0)]), 0)
        plog.update_high_watermark(plog.log_end_offset)


async def run(logs: dict[tuple[str, int], Log], rounds: int) -> dict[str, tuple[list[float], list[float]]]:
    writer = CheckpointWriter(lambda: logs)
    modes: dict[str, Callable[[], Awaitable[object]]] = {
        "on loop": lambda: on_loop_round(logs),
        "worker": writer.write_round,
        "idle": lambda: asyncio.sleep(IDLE_S),
    }
    results: dict[str, tuple[list[float], list[float]]] = {mode: ([], []) for mode in modes}
    try:
        for _ in range(rounds):
            for mode, round_ in modes.items():
                move_hws(logs)
                walls, samples = results[mode]
                walls.append(await measured(round_(), samples))
    finally:
        writer.stop()
    return results


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--logs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="checkpoint-bench-", dir=args.dir) as tmp:
        logs = {("t", i): Log(Path(tmp) / f"t-{i}", LogConfig(), wall_clock_ms) for i in range(args.logs)}
        try:
            results = asyncio.run(run(logs, args.rounds))
        finally:
            for plog in logs.values():
                plog.close()
    load_after = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cpus, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; load average before "
        f"{', '.join(f'{v:.2f}' for v in load_before)}, after {', '.join(f'{v:.2f}' for v in load_after)}"
    )
    print(f"{args.logs} logs under {tmp}, {args.rounds} rounds per mode (alternating), one HW file per log\n")
    print("| mode | round wall ms (median) | probe late p50 / p99 / max ms | loop ms lost per round (mean) |")
    print("|---|---|---|---|")
    for mode, (walls, samples) in results.items():
        ordered = sorted(samples)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        lost = sum(s for s in samples if s > LATE_S) / args.rounds
        print(
            f"| {mode} | {ms(statistics.median(walls))} | {ms(statistics.median(ordered))} / {ms(p99)} / "
            f"{ms(ordered[-1])} | {ms(lost)} |"
        )


if __name__ == "__main__":
    main()
