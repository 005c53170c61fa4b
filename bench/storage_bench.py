"""Storage benchmark (issue 2 §5): the v2 codec vs kafka-python, and the partition log vs plain files.

    ./dev bench storage_bench [--size-mib 1024] [--rounds 7] [--dir DIR] [--validation-only]

Every figure is printed next to a baseline measured in the same run, on the same bytes:

1. codec: encode and decode records/s of batches of 1,000 x 100-byte records, ours vs kafka-python's
   ``DefaultRecordBatchBuilder`` / ``MemoryRecords`` (targets: decode >= 2x, encode >= 1x). The
   contenders alternate for ``--rounds`` rounds and each keeps its best round, timed in CPU
   seconds of this process, so a burst of load from other processes on this shared machine does
   not decide the ratio.
2. append: MB/s and records/s of ``Log.append_as_leader`` (one 1,000-record batch per call, as a
   produce of one partition) vs ``os.write`` of the same batches to a plain file (target >= 0.7x),
   alternating in chunks of 64 batches so both meet the same page-cache/writeback state. Also in
   CPU seconds (user + sys) of this process, which other processes' load does not inflate.
   Neither fsyncs: Kafka's default (flush.messages / flush.ms unset) relies on replication.
3. read: MB/s of ``Log.read`` in 1 MiB fetches over the whole log vs ``os.pread`` of the plain file
   in 1 MiB chunks (both from the page cache: the files were just written).
5. validation (``--validation-only`` runs just this): records/s per CPU-second of
   ``Log.append_as_leader`` with the leader's record check (``storage.log_validator``: decompress and
   walk the records, issue 14) and without it (the same call with ``check_batch_records`` replaced by
   a no-op), alternating rounds of ``VALIDATION_BATCHES`` 1,000-record batches, best round of each,
   for uncompressed, lz4 and zstd batches; plus the check's cost per record in microseconds.
4. recovery: time to open the log after an unclean stop with a torn tail (half a batch appended to
   the active segment, no clean-shutdown marker, no recovery-point checkpoint, so every segment is
   scanned and its indexes rebuilt: the worst case) (target < 5 s).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402
from kafka.record.memory_records import MemoryRecords  # noqa: E402

from proto.clock import wall_clock_ms  # noqa: E402
from storage import log_validator  # noqa: E402
from storage.batch_header import iter_batches as iter_headers  # noqa: E402
from storage.compression import CompressionType  # noqa: E402
from storage.config import LogConfig  # noqa: E402
from storage.log import Log  # noqa: E402
from storage.log_loader import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE  # noqa: E402
from storage.record_batch import build_batch, decode_columns, iter_records  # noqa: E402

RECORDS_PER_BATCH = 1000
VALUE_BYTES = 100
DECODE_BATCHES = 20  # decode figures iterate a buffer of this many batches
FETCH_BYTES = 1 << 20
CHUNK_BATCHES = 64  # ~7 MB: the unit in which log appends and plain writes alternate
BASE_TIMESTAMP_MS = 1_700_000_000_000
MB = 1e6
VALIDATION_BATCHES = 40  # per round and contender: ~4.4 MB appended


def machine_info() -> str:
    cpu = "unknown cpu"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{platform.node()}: {os.cpu_count()} cpus ({cpu}), {mem_gib:.0f} GiB, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()} ({platform.python_implementation()}), "
        f"load average {load}"
    )


def make_records(seed: int, compressible: bool) -> list[tuple]:
    rng = random.Random(seed)
    words = [b"alpha ", b"beta ", b"gamma ", b"delta ", b"kafka ", b"raft ", b"log "]
    records = []
    for i in range(RECORDS_PER_BATCH):
        if compressible:
            value = b"".join(rng.choice(words) for _ in range(40))[:VALUE_BYTES]
        else:
            value = rng.randbytes(VALUE_BYTES)
        records.append((None, value, (), BASE_TIMESTAMP_MS + i))
    return records


def kafka_python_encode(records: list[tuple], codec: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    for offset_delta, (key, value, headers, timestamp) in enumerate(records):
        builder.append(offset_delta, timestamp=timestamp, key=key, value=value, headers=list(headers))
    return bytes(builder.build())


def encoded_count(batch: bytes) -> int:
    assert len(batch) > RECORDS_PER_BATCH, len(batch)
    return RECORDS_PER_BATCH


def kafka_python_decode(buf: bytes) -> int:
    count = 0
    records = MemoryRecords(buf)
    while (batch := records.next_batch()) is not None:
        for _ in batch:
            count += 1
    return count


def ours_decode(buf: bytes) -> int:
    count = 0
    for _ in iter_records(buf):
        count += 1
    return count


def best_rates(contenders: dict[str, Callable[[], int]], rounds: int) -> dict[str, float]:
    """Alternate the contenders for ``rounds`` rounds; each one's best items per CPU-second.

    CPU time of this process (``time.process_time``), not wall time: the codec work is
    single-threaded and CPU-bound, and on a shared machine wall time mostly measures the other
    processes' bursts.
    """
    best = dict.fromkeys(contenders, 0.0)
    for _ in range(rounds):
        for name, run in contenders.items():
            start = time.process_time()
            items = run()
            best[name] = max(best[name], items / max(time.process_time() - start, 1e-9))
    return best


def line(label: str, value: str, baseline: str, ratio: float, target: str = "") -> None:
    verdict = ""
    if target:
        verdict = " ok" if ratio >= float(target) else " BELOW TARGET"
        target = f" (target >= {target}x{verdict})"
    print(f"| {label} | {value} | {baseline} | {ratio:.2f}x{target} |")


# ---- codec -------------------------------------------------------------------------------------


def bench_codec(rounds: int) -> None:
    print("\n#### Codec: 1,000 x 100-byte records per batch (records per CPU-second, best round of each)\n")
    print("| figure | ours | kafka-python | ratio |")
    print("|---|---|---|---|")
    for codec, compressible in [(CompressionType.NONE, False), (CompressionType.LZ4, True),
                                (CompressionType.ZSTD, True)]:  # fmt: skip
        records = make_records(int(codec), compressible)
        ours_batch = build_batch(records, compression=codec)
        theirs_batch = kafka_python_encode(records, codec)
        assert codec or theirs_batch[16:] == ours_batch[16:], "same bytes after the partition leader epoch"
        name = codec.name.lower()
        rates = best_rates(
            {
                "ours": lambda r=records, c=codec: encoded_count(build_batch(r, compression=c)),
                "kafka-python": lambda r=records, c=codec: encoded_count(kafka_python_encode(r, c)),
            },
            rounds * 5,
        )
        line(f"encode, {name}", f"{rates['ours']:,.0f}", f"{rates['kafka-python']:,.0f}",
             rates["ours"] / rates["kafka-python"], "1" if codec == CompressionType.NONE else "")  # fmt: skip
        buf = ours_batch * DECODE_BATCHES
        assert kafka_python_decode(buf) == ours_decode(buf) == RECORDS_PER_BATCH * DECODE_BATCHES
        rates = best_rates(
            {
                "iter_records": lambda b=buf: ours_decode(b),
                "decode_columns": lambda b=buf: len(decode_columns(b)["offset"]),
                "kafka-python": lambda b=buf: kafka_python_decode(b),
            },
            rounds,
        )
        base = rates["kafka-python"]
        line(f"decode, {name}: iter_records", f"{rates['iter_records']:,.0f}", f"{base:,.0f}",
             rates["iter_records"] / base, "2" if codec == CompressionType.NONE else "")  # fmt: skip
        line(f"decode, {name}: decode_columns", f"{rates['decode_columns']:,.0f}", f"{base:,.0f}",
             rates["decode_columns"] / base)  # fmt: skip


# ---- log ---------------------------------------------------------------------------------------


def bench_log(size_mib: int, workdir: Path) -> None:
    batch = build_batch(make_records(7, compressible=False))
    batches = max(1, size_mib * (1 << 20) // len(batch))
    total_bytes = batches * len(batch)
    records = batches * RECORDS_PER_BATCH
    print(
        f"\n#### Partition log, {batches:,} x {len(batch):,} bytes ({total_bytes / 2**20:,.0f} MiB)\n"
    )
    print("| figure | log | plain file | ratio |")
    print("|---|---|---|---|")
    plain = workdir / "plain.bin"
    log_dir = workdir / "log"
    log = Log(log_dir, LogConfig(), wall_clock_ms)
    seconds = interleaved_writes(log, plain, batch, batches)
    raw_write_s, append_s = seconds["write"], seconds["append"]
    assert log.log_end_offset == records, (log.log_end_offset, records)
    line("append MB/s", f"{total_bytes / MB / append_s:,.0f}", f"{total_bytes / MB / raw_write_s:,.0f}",
         raw_write_s / append_s, "0.7")  # fmt: skip
    line("append records/s", f"{records / append_s:,.0f}", f"{records / raw_write_s:,.0f}",
         raw_write_s / append_s)  # fmt: skip
    write_cpu, append_cpu = seconds["write_cpu"], seconds["append_cpu"]
    line("append MB per CPU-second (user+sys)", f"{total_bytes / MB / append_cpu:,.0f}",
         f"{total_bytes / MB / write_cpu:,.0f}", write_cpu / append_cpu)  # fmt: skip

    read_s, read_bytes = log_read(log)
    assert read_bytes == total_bytes, (read_bytes, total_bytes)
    raw_read_s = plain_read(plain, total_bytes)
    line("read MB/s (1 MiB fetches)", f"{total_bytes / MB / read_s:,.0f}",
         f"{total_bytes / MB / raw_read_s:,.0f}", raw_read_s / read_s)  # fmt: skip
    plain.unlink()

    log.close()
    torn = tear_tail(log_dir, batch)
    start = time.perf_counter()
    reopened = Log(log_dir, LogConfig(), wall_clock_ms)
    recovery_s = time.perf_counter() - start
    loaded = reopened.load_result
    assert reopened.log_end_offset == records, (reopened.log_end_offset, records)
    assert loaded.truncated_bytes == torn and not loaded.had_clean_shutdown, loaded
    reopened.close()
    print(
        f"\nrecovery after an unclean stop with a torn tail ({torn:,} bytes of a half-written batch; "
        f"{loaded.recovered_segments} segment(s), {total_bytes / 2**20:,.0f} MiB scanned, indexes rebuilt): "
        f"**{recovery_s:.2f} s** (target < 5 s{' ok' if recovery_s < 5 else ' MISSED'})"
    )


def interleaved_writes(log: Log, plain: Path, batch: bytes, batches: int) -> dict[str, float]:
    """Append to the log and write the plain file in alternating chunks of ``CHUNK_BATCHES``.

    Alternating keeps both writers under the same page-cache and writeback pressure: a whole GiB
    written first by one of them would make the kernel throttle whichever comes second.
    Returns wall and CPU seconds of each: keys ``write``, ``append``, ``write_cpu``, ``append_cpu``.
    """
    fd = os.open(plain, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    seconds = {"write": 0.0, "append": 0.0, "write_cpu": 0.0, "append_cpu": 0.0}

    def write(count: int) -> None:
        for _ in range(count):
            os.write(fd, batch)

    def append(count: int) -> None:
        for _ in range(count):
            log.append_as_leader(batch, leader_epoch=0)

    try:
        done = 0
        while done < batches:
            chunk = min(CHUNK_BATCHES, batches - done)
            # ABBA order: neither writer is always the one that meets the dirty-page threshold.
            order = [("write", write), ("append", append)]
            for name, run in order if (done // CHUNK_BATCHES) % 2 == 0 else reversed(order):
                start, start_cpu = time.perf_counter(), time.process_time()
                run(chunk)
                seconds[name] += time.perf_counter() - start
                seconds[name + "_cpu"] += time.process_time() - start_cpu
            done += chunk
    finally:
        os.close(fd)
    return seconds


def plain_read(path: Path, size: int) -> float:
    fd = os.open(path, os.O_RDONLY)
    try:
        start = time.perf_counter()
        position = 0
        while position < size:
            position += len(os.pread(fd, FETCH_BYTES, position))
        return time.perf_counter() - start
    finally:
        os.close(fd)


def log_read(log: Log) -> tuple[float, int]:
    """Fetch the whole log in 1 MiB reads, as a consumer would; (seconds, bytes)."""
    offset, total = log.log_start_offset, 0
    start = time.perf_counter()
    while offset < log.log_end_offset:
        data = log.read(offset, FETCH_BYTES)
        total += len(data)
        for _, header in iter_headers(data, validate=False):
            offset = header.next_offset
    return time.perf_counter() - start, total


def tear_tail(log_dir: Path, batch: bytes) -> int:
    """Make the closed log look like a crash mid-append; return the torn bytes."""
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    (log_dir / RECOVERY_POINT_FILE).unlink(missing_ok=True)
    active = max(log_dir.glob("*.log"))
    torn = batch[: len(batch) // 2]
    with open(active, "ab") as f:
        f.write(torn)
    return len(torn)


# ---- validation --------------------------------------------------------------------------------


def bench_validation(rounds: int, workdir: Path) -> None:
    print("\n#### Leader append with and without the record check (records per CPU-second, best round)\n")
    print("| batches | with check | without check | ratio | check cost per record |")
    print("|---|---|---|---|---|")
    checked = log_validator.check_batch_records
    for codec, compressible in [(CompressionType.NONE, False), (CompressionType.LZ4, True),
                                (CompressionType.ZSTD, True)]:  # fmt: skip
        batch = build_batch(make_records(int(codec), compressible), compression=codec)
        log = Log(workdir / f"validation-{codec.name.lower()}", LogConfig(), wall_clock_ms)

        def append(check: bool, log: Log = log, batch: bytes = batch) -> int:
            log_validator.check_batch_records = checked if check else _no_check
            try:
                for _ in range(VALIDATION_BATCHES):
                    log.append_as_leader(batch, 0)
            finally:
                log_validator.check_batch_records = checked
            return VALIDATION_BATCHES * RECORDS_PER_BATCH

        rates = best_rates({"with": lambda: append(True), "without": lambda: append(False)}, rounds)
        log.close()
        cost_us = (1 / rates["with"] - 1 / rates["without"]) * 1e6
        print(f"| {codec.name.lower()}, {len(batch):,} bytes | {rates['with']:,.0f} | "
              f"{rates['without']:,.0f} | {rates['with'] / rates['without']:.2f}x | {cost_us:.2f} µs |")


def _no_check(*_args: object) -> None:
    """The record check switched off (the 'without' contender)."""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the log for append/read/recovery")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds for the codec figures")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--skip-log", action="store_true", help="codec figures only")
    parser.add_argument("--validation-only", action="store_true", help="the record-check figures only")
    args = parser.parse_args()
    print(f"# storage_bench: {' '.join(sys.argv[1:]) or '(defaults)'}\n")
    print(machine_info())
    if not args.validation_only:
        bench_codec(args.rounds)
    workdir = Path(tempfile.mkdtemp(prefix="storage-bench-", dir=args.dir))
    try:
        bench_validation(args.rounds, workdir)
        if not args.skip_log and not args.validation_only:
            bench_log(args.size_mib, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
