"""The broker's log cleaner: compacts the hosted logs whose ``cleanup.policy`` contains ``compact``.

Every ``log.cleaner.backoff.ms`` it walks the hosted logs one at a time (Kafka's default of one cleaner
thread, ``log.cleaner.threads=1``), and for each log that has something worth cleaning:

1. ``Log.plan_cleaning`` on the event loop (picks segments, duplicates their descriptors: cheap);
2. ``storage.cleaner.clean`` in a worker thread: all the reading, decoding, re-encoding and writing,
   so produce and fetch on the event loop never wait for it;
3. ``Log.finish_cleaning`` back on the event loop: a small fsynced commit marker and a few renames swap
   the cleaned segments in — the only step that changes the log, and it runs between two requests;
4. ``storage.cleaner.finalize`` in the worker thread again: fsync the renames, unlink the old files.

A pass that fails in the thread (a corrupt segment, a full disk) is logged and given up; its
``.cleaned`` files are removed and the log is tried again at the next round. A failure of the swap
itself (a rename refused) is an I/O error on the log directory: the task fails and the broker stops
loudly (``broker.server``), and the next start finishes or drops the pass from the files. When the
broker stops mid-pass the worker finishes its files, nobody swaps them in, and the next start deletes
them (``storage.cleaner``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from proto import errors
from proto.kafka_types import TopicPartition
from proto.runtime.logfmt import log_event
from storage import cleaner
from storage.log import Log

log = logging.getLogger(__name__)


class LogCleanerDriver:
    """Runs compaction passes for the logs ``logs()`` returns (the replica manager's hosted logs)."""

    def __init__(self, logs: Callable[[], dict[TopicPartition, Log]], backoff_ms: int) -> None:
        self.logs = logs
        self.backoff_ms = backoff_ms
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-cleaner")
        self.passes = 0  # completed swaps, for tests and metrics

    async def run(self) -> None:
        """Clean forever, one round every ``backoff_ms`` (a task of the broker)."""
        try:
            while True:
                await asyncio.sleep(self.backoff_ms / 1000)
                await self.clean_round()
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def clean_round(self) -> int:
        """One pass over every hosted log that needs cleaning; returns how many were swapped in."""
        swapped = 0
        for tp, plog in list(self.logs().items()):
            try:
                plan = plog.plan_cleaning()
            except OSError as exc:  # e.g. out of file descriptors
                log_event(log, logging.WARNING, "log_cleaning_plan_failed", topic=tp[0], partition=tp[1],
                          reason=exc)  # fmt: skip
                continue
            if plan is not None and await self._clean(tp, plog, plan):
                swapped += 1
        return swapped

    async def _clean(self, tp: TopicPartition, plog: Log, plan: cleaner.CleaningPlan) -> bool:
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self._executor, cleaner.clean, plan)
        except (OSError, errors.KafkaError) as exc:  # the worker removed its files
            plog.abort_cleaning(plan)
            log_event(log, logging.WARNING, "log_cleaning_failed", topic=tp[0], partition=tp[1], reason=exc)
            return False
        if not plog.finish_cleaning(result):
            log_event(log, logging.INFO, "log_cleaning_discarded", topic=tp[0], partition=tp[1],
                      reason="the log changed while it was cleaned")  # fmt: skip
            return False
        try:  # fsync the renames, free the replaced files: off the loop too
            await loop.run_in_executor(self._executor, cleaner.finalize, plog.directory, result.end_offset)
        except OSError as exc:  # e.g. the partition was deleted meanwhile; the next start finishes it
            log_event(log, logging.WARNING, "log_cleaning_finish_failed", topic=tp[0], partition=tp[1],
                      reason=exc)  # fmt: skip
        self.passes += 1
        log_event(
            log, logging.INFO, "log_cleaned", topic=tp[0], partition=tp[1], end_offset=result.end_offset,
            bytes_before=result.bytes_before, bytes_after=result.bytes_after,
            records_removed=result.records_removed, duration_ms=round((time.monotonic() - started) * 1000),
        )  # fmt: skip
        return True
