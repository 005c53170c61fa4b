"""Write and read the same records with every Kafka client the compatibility suite covers.

A record is compared as ``Rec(partition, offset, key, value, headers, timestamp_ms)``: every writer
sends ``Out`` records (explicit partition, key, value, headers and, where the client can set it, the
create time) and returns what it was acknowledged; every reader returns what it read, sorted by
partition and offset. The clients are confluent-kafka (librdkafka 2.16), kafka-python 3.0, aiokafka
0.14 and kcat (librdkafka 2.0); each wait has a deadline and each client is closed even on failure.
"""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

DEADLINE_S = 60.0


@dataclass(frozen=True, order=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


@dataclass(frozen=True)
class Out:
    partition: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int | None = None  # None: the client stamps the create time itself


def _check_count(got: list[Rec], expected: int, who: str, deadline: float) -> bool:
    if len(got) >= expected:
        return True
    assert time.monotonic() < deadline, f"{who} read {len(got)} of {expected} records in {DEADLINE_S} s"
    return False


# ---- confluent-kafka ------------------------------------------------------------------------------


def write_confluent(bootstrap: str, topic: str, records: Sequence[Out], **config: object) -> list[Rec]:
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
        "message.timeout.ms": int(DEADLINE_S * 1000), **config,
    })  # fmt: skip
    acked: list[Rec] = []
    failures: list[str] = []

    def on_delivery(sent: Out, err, msg) -> None:  # a delivery report carries no headers: take sent's
        if err is not None:
            failures.append(str(err))
            return
        acked.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value(), sent.headers,
                         msg.timestamp()[1]))  # fmt: skip

    for r in records:
        extra = {"timestamp": r.timestamp_ms} if r.timestamp_ms is not None else {}
        producer.produce(topic, value=r.value, key=r.key, partition=r.partition, headers=list(r.headers),
                         on_delivery=functools.partial(on_delivery, r), **extra)  # fmt: skip
        producer.poll(0)
    remaining = producer.flush(DEADLINE_S)
    assert remaining == 0, f"confluent-kafka: {remaining} records not delivered within {DEADLINE_S} s"
    assert not failures, f"confluent-kafka delivery failures: {failures[:5]}"
    return sorted(acked)


def read_confluent(bootstrap: str, topic: str, partitions: int, expected: int) -> list[Rec]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"compat-reader-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    got: list[Rec] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while not _check_count(got, expected, "confluent-kafka", deadline):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value(),
                           tuple(msg.headers() or ()), msg.timestamp()[1]))  # fmt: skip
    finally:
        consumer.close()
    return sorted(got)


# ---- kafka-python -----------------------------------------------------------------------------------


def write_kafka_python(bootstrap: str, topic: str, records: Sequence[Out], **config: object) -> list[Rec]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), linger_ms=5, **config)
    try:
        futures = [
            (r, producer.send(topic, value=r.value, key=r.key, partition=r.partition,
                              headers=list(r.headers), timestamp_ms=r.timestamp_ms))
            for r in records
        ]
        producer.flush(DEADLINE_S)
        acked = []
        for r, future in futures:
            md = future.get(timeout=DEADLINE_S)
            acked.append(Rec(md.partition, md.offset, r.key, r.value, r.headers, md.timestamp))
    finally:
        producer.close(timeout=DEADLINE_S)
    return sorted(acked)


def read_kafka_python(bootstrap: str, topic: str, partitions: int, expected: int) -> list[Rec]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), auto_offset_reset="earliest",
                             enable_auto_commit=False)  # fmt: skip
    got: list[Rec] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        while not _check_count(got, expected, "kafka-python", deadline):
            for tp_records in consumer.poll(timeout_ms=500).values():
                got.extend(Rec(m.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp)
                           for m in tp_records)  # fmt: skip
    finally:
        consumer.close()
    return sorted(got)


# ---- aiokafka ----------------------------------------------------------------------------------------


def write_aiokafka(bootstrap: str, topic: str, records: Sequence[Out], **config: object) -> list[Rec]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[Rec]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5,
                                    **config)  # fmt: skip
        await producer.start()
        try:
            futures = [
                (r, await producer.send(topic, value=r.value, key=r.key, partition=r.partition,
                                        headers=list(r.headers), timestamp_ms=r.timestamp_ms))
                for r in records
            ]
            acked = []
            for r, future in futures:
                md = await asyncio.wait_for(future, DEADLINE_S)
                # aiokafka 0.14 reports the batch's first create time for every record of a batch
                # (``MessageBatch.done`` overwrites its ``timestamp`` in the loop): take the one sent.
                ts = md.timestamp if r.timestamp_ms is None else r.timestamp_ms
                acked.append(Rec(md.partition, md.offset, r.key, r.value, r.headers, ts))
            txn = producer._txn_manager  # idempotence took effect: InitProducerId gave it an id
            assert txn is not None and txn.has_pid() and txn.producer_id >= 0, "aiokafka has no producer id"
            return acked
        finally:
            await producer.stop()

    return sorted(asyncio.run(run()))


def read_aiokafka(bootstrap: str, topic: str, partitions: int, expected: int) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[Rec]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                    enable_auto_commit=False)  # fmt: skip
        await consumer.start()
        got: list[Rec] = []
        deadline = time.monotonic() + DEADLINE_S
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            while not _check_count(got, expected, "aiokafka", deadline):
                for tp_records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(Rec(m.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp)
                               for m in tp_records)  # fmt: skip
        finally:
            await consumer.stop()
        return got

    return sorted(asyncio.run(run()))


# ---- kcat ----------------------------------------------------------------------------------------


def run_kcat(kcat: str, args: list[str], stdin: str | None = None) -> str:
    result = subprocess.run([kcat, *args], input=stdin, capture_output=True, text=True,
                            timeout=DEADLINE_S, check=False)  # fmt: skip
    assert result.returncode == 0, (
        f"kcat {' '.join(args)} exited {result.returncode}: {result.stderr[-2000:]}"
    )
    return result.stdout


def write_kcat(kcat: str, bootstrap: str, topic: str, records: Sequence[Out]) -> None:
    """One ``kcat -P`` per partition (``-p``), key and value split by a tab, headers with ``-H``: kcat
    sets one header list for a whole run, so every record of a run carries the same headers. kcat
    stamps the create time itself and prints no offsets."""
    by_partition: dict[int, list[Out]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(r)
    for partition, rs in sorted(by_partition.items()):
        headers = {r.headers for r in rs}
        assert len(headers) == 1, "kcat sends one header list per run: give a partition's records the same"
        args = ["-b", bootstrap, "-P", "-t", topic, "-p", str(partition), "-K", "\t",
                "-X", "enable.idempotence=true", "-X", "acks=all"]  # fmt: skip
        for name, value in headers.pop():
            args += ["-H", f"{name}={value.decode()}"]
        lines = "".join(f"{(r.key or b'').decode()}\t{r.value.decode()}\n" for r in rs)
        run_kcat(kcat, args, stdin=lines)


def read_kcat(kcat: str, bootstrap: str, topic: str, expected: int) -> list[Rec]:
    """``kcat -C -e -J`` from the beginning of every partition until their ends."""
    out = run_kcat(kcat, ["-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q"])
    got = []
    for line in out.splitlines():
        m = json.loads(line)
        flat = m.get("headers") or []  # kcat 1.7 writes [name, value, name, value, ...]
        pairs = zip(flat[::2], flat[1::2], strict=True)
        key = m["key"].encode() if m["key"] is not None else None
        value = m["payload"].encode() if m["payload"] is not None else None
        got.append(Rec(m["partition"], m["offset"], key, value,
                       tuple((k, v.encode()) for k, v in pairs), m["ts"]))  # fmt: skip
    assert len(got) == expected, f"kcat read {len(got)} of {expected} records"
    return sorted(got)
