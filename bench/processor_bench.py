"""CPU per request of the Kafka request processor (parse, handler, encode, metrics, refusal walk).

    .venv/bin/python bench/processor_bench.py [--number 3000] [--repeat 7]

Runs ``RequestProcessor.process`` on the unit tests' one-broker harness
(tests/unit/broker/test_kafka_handlers.py: a real ReplicaManager and log in a temp dir) for a Produce
v9 acks=1 of one 100-byte record to ``t-0`` and a Fetch v12 of ``t-0`` from offset 0, and prints the
best of ``--repeat`` runs of ``--number`` calls in µs of process CPU per request. To compare two
checkouts, run it from each with ``PYTHONPATH`` set to that checkout, alternating, on the same load.
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

from proto.kafka.api import ApiKey, RequestHeader, encode_request  # noqa: E402
from proto.kafka.codec import FrameParts  # noqa: E402
from tests.unit.broker.test_kafka_handlers import Broker, fetch, produce  # noqa: E402

WARMUP_REQUESTS = 200


async def measure(number: int, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(Path(tmp))
        request = produce("t", [b"x" * 100], acks=1)
        frames = {
            "produce": bytes(encode_request(RequestHeader(ApiKey.PRODUCE, 9, 1, "bench"), request)),
            "fetch": bytes(encode_request(RequestHeader(ApiKey.FETCH, 12, 2, "bench"), fetch(0))),
        }
        process = broker.processor.process
        for _ in range(WARMUP_REQUESTS):
            process(frames["produce"], "127.0.0.1:1")
        best: dict[str, float] = {}
        for name, frame in frames.items():
            runs = []
            for _ in range(repeat):
                started = time.process_time()
                for _ in range(number):
                    answer = process(frame, "127.0.0.1:1")
                    if isinstance(answer, FrameParts):
                        answer.close()
                runs.append((time.process_time() - started) / number * 1e6)
            best[name] = min(runs)
        broker.manager.close()
        return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=3000, help="requests per run (default 3000)")
    parser.add_argument("--repeat", type=int, default=7, help="runs; the best is printed (default 7)")
    args = parser.parse_args()
    best = asyncio.run(measure(args.number, args.repeat))
    print(" ".join(f"{name}={us:.1f}us" for name, us in best.items()))


if __name__ == "__main__":
    main()
