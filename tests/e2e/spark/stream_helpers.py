"""Run a pykraft streaming query into a Parquet file sink, with a deadline on every wait."""

from __future__ import annotations

import time
from pathlib import Path

STREAM_TIMEOUT_S = 120


def run_stream(
    spark,
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    out: Path,
    *,
    available_now: bool,
    stop_after_batches: int = 0,
    max_offsets_per_trigger: int = 15,
) -> None:
    """availableNow: run to the end. Otherwise stop after ``stop_after_batches`` non-empty batches."""
    stream = (
        spark.readStream.format("pykraft")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        .load()
        .selectExpr("partition", "offset", "value")
    )
    writer = stream.writeStream.format("parquet").option("checkpointLocation", str(checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="100 milliseconds")
    query = writer.start(str(out))
    try:
        if available_now:
            assert query.awaitTermination(STREAM_TIMEOUT_S), (
                f"availableNow query not done in {STREAM_TIMEOUT_S} s"
            )
        else:
            deadline = time.monotonic() + STREAM_TIMEOUT_S
            while not _batches_done(query, stop_after_batches):
                assert time.monotonic() < deadline, f"no {stop_after_batches} batches in {STREAM_TIMEOUT_S} s"
                assert query.exception() is None, query.exception()
                time.sleep(0.1)
    finally:
        query.stop()
    assert query.exception() is None, query.exception()


def _batches_done(query, count: int) -> bool:
    return sum(1 for p in query.recentProgress if p["numInputRows"] > 0) >= count
