"""Run the seeded simulations outside pytest, with the same seed options as ``pytest tests/sim``.

    python -m tests.sim.run broker --seeds 100000 --jobs 2      # many seeds, a summary line
    python -m tests.sim.run broker --seed 17 --trace            # replay one seed, every event
    python -m tests.sim.run raft --seeds 2000 --seed-start 5000

``--seed S`` replays one seed and prints its trace hash (the same seed gives the same hash in every
process); ``--seeds N`` from ``--seed-start`` (default 0) runs many and prints one block per failing
seed with the command that replays it. Exit status 1 when any seed failed. pytest takes the same
``--seed / --seeds / --seed-start`` (tests/sim/conftest.py), so there is one way to replay a seed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

REPLAY = "python -m tests.sim.run {name} --seed {seed} --trace   (or: pytest tests/sim/{name} --seed {seed})"
CHUNK = 25


def _raft(seed: int, echo: bool) -> tuple[int, str, str]:
    from tests.sim.raft.sim import Simulation

    result = Simulation(seed, echo=echo).run()
    return result.events, result.trace_hash, repr(result)


def _broker(seed: int, echo: bool) -> tuple[int, str, str]:
    from tests.sim.broker.cluster import Sim

    sim = Sim(seed, echo=echo)
    trace_hash = sim.run()
    summary = (
        f"seed={seed} events={sim.events} committed={len(sim.checker.committed)} "
        f"acknowledged={len(sim.checker.acked)} forgotten={sim.checker.forgotten} trace_hash='{trace_hash}'"
    )
    return sim.events, trace_hash, summary


SIMULATIONS: dict[str, Callable[[int, bool], tuple[int, str, str]]] = {"raft": _raft, "broker": _broker}


def run_range(name: str, seeds: Sequence[int]) -> tuple[int, list[str]]:
    """(events, failure reports) of ``seeds``, one after the other in this process."""
    events, failures = 0, []
    for seed in seeds:
        try:
            events += SIMULATIONS[name](seed, False)[0]
        except AssertionError as exc:  # each simulation's SimFailure: names the seed, the last events
            failures.append(f"{exc}\n  replay: {REPLAY.format(name=name, seed=seed)}")
    return events, failures


def run_seeds(
    name: str, seeds: Sequence[int], jobs: int | None = None, progress: bool = False
) -> tuple[int, list[str]]:
    """Run ``seeds`` on ``jobs`` worker processes (default: one per core, at most 2); with
    ``progress``, print each failure as it comes and a running count every 1,000 seeds."""
    jobs = jobs or min(2, os.cpu_count() or 1)
    chunks = [list(seeds[i : i + CHUNK]) for i in range(0, len(seeds), CHUNK)]
    events, failures, done, started = 0, [], 0, time.monotonic()
    with contextlib.ExitStack() as stack:
        if jobs == 1 or len(chunks) <= 1:
            results = (run_range(name, chunk) for chunk in chunks)
        else:
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=jobs))
            results = pool.map(run_range, [name] * len(chunks), chunks)
        for chunk, (chunk_events, chunk_failures) in zip(chunks, results, strict=True):
            events += chunk_events
            failures.extend(chunk_failures)
            done += len(chunk)
            if progress:
                for failure in chunk_failures:
                    print(failure, flush=True)
                if done % 1000 < CHUNK:
                    elapsed = time.monotonic() - started
                    print(f"... {done} seeds, {len(failures)} failed, {elapsed:.0f}s", flush=True)
    return events, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("simulation", choices=sorted(SIMULATIONS))
    parser.add_argument("--seed", type=int, default=None, help="replay exactly this seed")
    parser.add_argument("--seeds", type=int, default=2000, help="how many seeds")
    parser.add_argument("--seed-start", type=int, default=0, help="first seed of --seeds")
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: cores, max 2)")
    parser.add_argument("--trace", action="store_true", help="with --seed: print every event")
    args = parser.parse_args(argv)
    if args.seed is not None:
        try:
            print(SIMULATIONS[args.simulation](args.seed, args.trace)[2])
        except AssertionError as exc:
            print(exc)
            return 1
        return 0
    started = time.monotonic()
    seeds = range(args.seed_start, args.seed_start + args.seeds)
    events, failures = run_seeds(args.simulation, seeds, args.jobs, progress=True)
    elapsed = time.monotonic() - started
    print(
        f"{args.simulation}: {args.seeds} seeds from {args.seed_start}: {len(failures)} failed, "
        f"{events} events, {elapsed:.1f}s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
