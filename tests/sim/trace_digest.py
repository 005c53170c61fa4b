"""One digest over the broker simulation's ``--trace`` output for many seeds: the proof that a pure
refactor changed no behaviour the simulation can see.

    .venv/bin/python -m tests.sim.trace_digest 500 /tmp/traces.txt

writes every seed's trace (as ``python -m tests.sim.run broker --seed S --trace`` prints it) to the file
and prints ``seeds=N events=E sha256=...``. Run it on the commit before a refactor and after it: the
same digest means byte-identical traces for seeds ``[0, N)``; on a difference, ``diff`` the two files.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io

from tests.sim.broker.cluster import Sim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seeds", type=int, help="seeds 0 .. N-1")
    parser.add_argument("out", help="file for the traces")
    args = parser.parse_args()
    digest, events = hashlib.sha256(), 0
    with open(args.out, "w") as out:
        for seed in range(args.seeds):
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                sim = Sim(seed, echo=True)
                trace_hash = sim.run()
            text = buffer.getvalue()
            events += sim.events
            digest.update(text.encode())
            out.write(f"== seed {seed} events {sim.events} hash {trace_hash}\n{text}")
    print(f"seeds={args.seeds} events={events} sha256={digest.hexdigest()}")


if __name__ == "__main__":
    main()
