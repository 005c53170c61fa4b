"""Log compaction cost: cleaner throughput, the swap's time on the event loop, and the loop's lag.

    .venv/bin/python bench/compaction_bench.py [--records 200000] [--keys 1000] [--codec none]

One ``storage.log.Log`` in a temp directory (no processes): ``--records`` keyed records of 100-byte
values over ``--keys`` keys, 100 records per batch, 1 MiB segments. Then one compaction pass the way
the broker runs it (``broker.replica.log_cleaner``): ``plan_cleaning`` and ``finish_cleaning`` on an asyncio
loop, ``storage.cleaner.clean`` in a worker thread. Reported: input MB/s and records/s of the thread's
work, the time the plan and the swap held the loop, and the largest delay of a 1 ms loop timer while
the thread ran (the loop keeps serving; the GIL is shared, so it is slowed, not stopped), next to the
same measure over as long with no cleaning (the machine's own noise).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proto.clock import wall_clock_ms  # noqa: E402
from storage import cleaner  # noqa: E402
from storage.compression import CompressionType  # noqa: E402
from storage.config import LogConfig  # noqa: E402
from storage.log import Log  # noqa: E402
from storage.record_batch import build_batch  # noqa: E402

PER_BATCH = 100


def fill(log: Log, records: int, keys: int, codec: int) -> None:
    for start in range(0, records, PER_BATCH):
        batch = [
            (b"key-%06d" % ((start + i) % keys), b"%08d" % (start + i) + b"v" * 92, (), 1_000)
            for i in range(PER_BATCH)
        ]
        log.append_as_leader(build_batch(batch, compression=codec), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)


async def ticker(lag_ms: list[float], done: asyncio.Event) -> None:
    """Sleep 1 ms again and again; record the largest overshoot (how long the loop could not run)."""
    while not done.is_set():
        before = time.perf_counter()
        await asyncio.sleep(0.001)
        lag_ms[0] = max(lag_ms[0], (time.perf_counter() - before) * 1000 - 1)


async def idle_lag_ms(seconds: float) -> float:
    """The same loop-lag measure with no cleaning going on: the machine's own noise."""
    lag_ms, done = [0.0], asyncio.Event()
    tick = asyncio.create_task(ticker(lag_ms, done))
    await asyncio.sleep(seconds)
    done.set()
    await tick
    return lag_ms[0]


async def one_pass(log: Log) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    lag_ms, done = [0.0], asyncio.Event()
    tick = asyncio.create_task(ticker(lag_ms, done))
    started = time.perf_counter()
    plan = log.plan_cleaning()
    planned = time.perf_counter()
    assert plan is not None, "nothing to clean"
    result = await loop.run_in_executor(None, cleaner.clean, plan)
    cleaned = time.perf_counter()
    assert log.finish_cleaning(result)
    swapped = time.perf_counter()
    await loop.run_in_executor(None, cleaner.finalize, log.directory, result.end_offset)
    done.set()
    await tick
    return {
        "plan_ms": (planned - started) * 1000,
        "clean_s": cleaned - planned,
        "swap_ms": (swapped - cleaned) * 1000,
        "loop_lag_max_ms": lag_ms[0],
        "idle_lag_max_ms": await idle_lag_ms(cleaned - planned),
        "bytes_before": result.bytes_before,
        "bytes_after": result.bytes_after,
        "records_removed": result.records_removed,
    }


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--codec", default="none", choices=[c.name.lower() for c in CompressionType])
    args = parser.parse_args()
    codec = CompressionType[args.codec.upper()]
    config = LogConfig(
        cleanup_policy="compact", segment_bytes=1 << 20, retention_ms=None, min_cleanable_dirty_ratio=0.0
    )
    with tempfile.TemporaryDirectory(prefix="compaction-bench-") as directory:
        log = Log(Path(directory) / "bench-0", config, wall_clock_ms)
        fill(log, args.records, args.keys, codec)
        segments = len(log.segment_base_offsets) - 1
        figures = asyncio.run(one_pass(log))
        log.close()
    mb = figures["bytes_before"] / 1e6
    print(f"compaction_bench: {args.records} records, {args.keys} keys, {args.codec}, {segments} segments")
    clean_s = figures["clean_s"]
    print(f"  cleaned {mb:.1f} MB -> {figures['bytes_after'] / 1e6:.2f} MB, "
          f"{figures['records_removed']} records removed, in {clean_s:.2f} s (worker thread): "
          f"{mb / clean_s:.1f} MB/s, {args.records / clean_s:,.0f} records/s")  # fmt: skip
    print(f"  on the event loop: plan {figures['plan_ms']:.2f} ms, swap {figures['swap_ms']:.2f} ms; "
          f"largest 1 ms-timer delay while cleaning {figures['loop_lag_max_ms']:.1f} ms "
          f"(idle, as long: {figures['idle_lag_max_ms']:.1f} ms)")  # fmt: skip


if __name__ == "__main__":
    main()
