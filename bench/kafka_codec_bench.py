"""Cost of the generated Kafka codec on the data path, against kafka-python 3.0.12's codec.

    .venv/bin/python bench/kafka_codec_bench.py [--repeat 7] [--number 2000]

Timed with ``timeit`` on the process's CPU clock (median of ``--repeat`` runs of ``--number``
calls, µs of CPU per call):
- ``parse_request`` of a Produce v9 frame carrying one 16 KiB record batch (header + body; the batch
  stays a memoryview of the frame);
- ``encode_response`` of a Fetch v12 response with 10 partitions of 16 KiB batches (header + body,
  no size prefix), and ``encode_response_frame`` of the same (size prefix, no final copy to bytes);
- kafka-python's ``decode``/``encode`` of the same message bodies, as a baseline in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proto.kafka import api, messages  # noqa: E402
from proto.kafka.api import ApiKey, RequestHeader  # noqa: E402
from proto.kafka.codec import decode_body  # noqa: E402

BATCH_BYTES = 16 * 1024
FETCH_PARTITIONS = 10


def produce_frame() -> bytes:
    request = messages.ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            messages.ProduceRequestTopicProduceData(
                name="bench",
                partition_data=[
                    messages.ProduceRequestPartitionProduceData(index=0, records=b"r" * BATCH_BYTES)
                ],
            )
        ],
    )
    return api.encode_request(RequestHeader(ApiKey.PRODUCE, 9, 1, "rdkafka"), request)


def fetch_response() -> messages.FetchResponse:
    partitions = [
        messages.FetchResponsePartitionData(
            partition_index=i,
            high_watermark=1000 + i,
            last_stable_offset=1000 + i,
            log_start_offset=0,
            records=memoryview(b"f" * BATCH_BYTES),
        )
        for i in range(FETCH_PARTITIONS)
    ]
    return messages.FetchResponse(
        responses=[messages.FetchResponseFetchableTopicResponse(topic="bench", partitions=partitions)]
    )


def micros(fn, repeat: int, number: int) -> float:
    # CPU time of this process, not wall time: on a shared machine the wall clock also counts the
    # time the scheduler gave to others
    runs = timeit.repeat(fn, repeat=repeat, number=number, timer=time.process_time)
    return statistics.median(runs) / number * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args()
    frame = produce_frame()
    header = RequestHeader(ApiKey.FETCH, 12, 7, "rdkafka")
    response = fetch_response()
    rows = [
        ("pykraft parse_request Produce v9, one 16 KiB batch", lambda: api.parse_request(frame)),
        (
            "pykraft encode_response Fetch v12, 10 x 16 KiB partitions",
            lambda: api.encode_response(header, response),
        ),
        (
            "pykraft encode_response_frame (same, the listener's call)",
            lambda: api.encode_response_frame(header, response),
        ),
    ]
    try:
        from kafka.protocol.consumer import FetchResponse
        from kafka.protocol.producer import ProduceRequest

        body = frame[8 + 2 + len("rdkafka") + 1 :]
        ours = messages.REQUEST_DECODERS[ApiKey.PRODUCE][9]
        rows.append(("pykraft Produce v9 body decoder (body only)", lambda: decode_body(ours, "bench", body)))
        their_fetch = FetchResponse.decode(api.encode_response(header, response)[5:], version=12)
        their_fetch._header = None
        rows.append(
            (
                "kafka-python ProduceRequest.decode v9 (body only)",
                lambda: ProduceRequest.decode(body, version=9),
            )
        )
        rows.append(
            ("kafka-python FetchResponse.encode v12 (body only)", lambda: their_fetch.encode(version=12))
        )
    except ImportError:
        print("kafka-python not installed: no baseline rows")
    print(
        f"load average {os.getloadavg()[0]:.1f}; CPU µs per call, "
        f"median of {args.repeat} x {args.number} calls"
    )
    for name, fn in rows:
        print(f"{name:62s} {micros(fn, args.repeat, args.number):8.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
