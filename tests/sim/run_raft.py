"""Run any number of Raft simulation seeds: ``python -m tests.sim.run_raft --seeds 10000 [--jobs 2]``.

Prints one line per failing seed (with the command that replays it) and a summary; exits 1 on failure.
``--seed S`` replays one seed and prints its result and trace hash; add ``--trace`` to print every event.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from tests.sim.raft.sim import SimFailure, Simulation, run_seed

REPLAY = "python -m tests.sim.run_raft --seed {seed}   (or: python -m pytest tests/sim/raft --seed {seed})"


def run_range(seeds: range) -> tuple[int, list[str]]:
    events, failures = 0, []
    for seed in seeds:
        try:
            events += run_seed(seed).events
        except SimFailure as exc:
            failures.append(f"{exc}\n  replay: {REPLAY.format(seed=seed)}")
    return events, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=2000, help="how many seeds")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, default=None, help="replay one seed")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--trace", action="store_true", help="with --seed: print every event")
    args = parser.parse_args(argv)
    if args.seed is not None:
        try:
            print(Simulation(args.seed, echo=args.trace).run())
        except SimFailure as exc:
            print(exc)
            return 1
        return 0
    started = time.monotonic()
    chunk = 50
    ranges = [
        range(s, min(s + chunk, args.start + args.seeds))
        for s in range(args.start, args.start + args.seeds, chunk)
    ]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(run_range, ranges))
    events = sum(e for e, _ in results)
    failures = [f for _, fs in results for f in fs]
    for failure in failures:
        print(failure)
    elapsed = time.monotonic() - started
    print(f"{args.seeds} seeds from {args.start}: {len(failures)} failed, {events} events, {elapsed:.1f}s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
