"""The periodic offset checkpoints (HW, log start offset, recovery point), written off the event loop.

Every ``replica.high.watermark.checkpoint.interval.ms`` (5 s) each hosted log's checkpoint files are
brought up to date. A file write is a temp file, an fsync, a rename and a directory fsync
(``storage.checkpoint``); on a busy disk one fsync can take hundreds of milliseconds, and on the event
loop it stalled every request, heartbeat and follower fetch of the broker (profiles: 14% of a loaded
leader's samples, 44% of a follower's). So, like Kafka's scheduler thread, the writes run in one
dedicated worker thread:

1. ``Log.checkpoint_snapshot()`` on the event loop: the offsets that changed, copied (the Log is not
   thread-safe; the worker reads nothing of it);
2. ``snapshot.write()`` in the worker thread, one log at a time (awaited before the next snapshot, so
   a round's values are never older than one log's write);
3. the rules that keep this correct while the Log keeps writing some checkpoints synchronously on the
   loop (the log start offset when it moves, a truncation's lowered HW, everything at close) live in
   ``storage.log_checkpoints``: one writer per file at a time (a per-log lock), a snapshot superseded
   by a newer write writes nothing, and nothing is written once the log is closed — the log manager
   closes a log before renaming its directory for deletion, so a stale snapshot never reaches a
   re-created topic's new directory.

A write that fails with an OSError is logged at ERROR and retried at the next round (the file is not
marked written); one whose log was removed meanwhile is not an error. The final checkpoints at
shutdown are still written on the loop by ``Log.close`` (``ReplicaManager.close``), after ``stop()``
has waited for the worker's last write and ended the thread.

Thread-safety: the methods run on the event loop; only ``CheckpointSnapshot.write`` runs in the worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from proto.kafka_types import TopicPartition
from proto.runtime.logfmt import log_event
from storage.log import Log

log = logging.getLogger(__name__)

THREAD_NAME_PREFIX = "checkpoint"


class CheckpointWriter:
    """Writes the checkpoints of the logs ``logs()`` returns (the hosted logs) in one worker thread."""

    def __init__(self, logs: Callable[[], dict[TopicPartition, Log]]) -> None:
        self.logs = logs
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_NAME_PREFIX)
        self.failures = 0  # failed log writes so far, for tests

    async def run(self, interval_ms: int) -> None:
        """One round every ``interval_ms`` (a task of the broker; cancel it, then call ``stop``)."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            await self.write_round()

    async def write_round(self) -> int:
        """Bring every hosted log's checkpoint files up to date; returns the files written."""
        loop = asyncio.get_running_loop()
        written = 0
        for tp, plog in list(self.logs().items()):
            if self.logs().get(tp) is not plog:
                continue  # removed (closed) while an earlier log was being written
            snapshot = plog.checkpoint_snapshot()
            if snapshot is None:
                continue
            try:
                written += await loop.run_in_executor(self._executor, snapshot.write)
            except OSError as exc:
                self._report_failure(tp, plog, exc)
        return written

    def _report_failure(self, tp: TopicPartition, plog: Log, exc: OSError) -> None:
        if self.logs().get(tp) is not plog:  # its directory went with it: nothing left to checkpoint
            log_event(log, logging.INFO, "checkpoint_write_abandoned", topic=tp[0], partition=tp[1],
                      reason=f"log removed: {exc}")  # fmt: skip
            return
        self.failures += 1
        log_event(log, logging.ERROR, "checkpoint_write_failed", exc_info=exc, topic=tp[0], partition=tp[1],
                  directory=str(plog.directory), action="retrying at the next round")  # fmt: skip

    def stop(self) -> None:
        """Wait for the write in flight (at most one log's files) and end the worker thread. Called
        after the ``run`` task is cancelled and before the logs are closed (their final checkpoints)."""
        self._executor.shutdown(wait=True, cancel_futures=True)
