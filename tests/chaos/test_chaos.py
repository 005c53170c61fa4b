"""The chaos suite, CI-sized: 3 controllers + 3 brokers as processes, faults, a workload, the checker.

Issue 10. ``test_chaos_run_has_no_anomaly`` runs every fault kind of ``tests.chaos.nemesis`` (SIGKILL
and restart of partition leaders and the active controller, SIGSTOP longer than the session
timeout, network partitions through the proxy) under idempotent ``acks=all`` producers and a
consumer group committing its offsets, heals, reads everything back and requires every anomaly
count to be 0; it prints the table. ``test_negative_control_...`` proves the checker can fail: with
``unclean.leader.election.enable=true`` a schedule makes an out-of-sync replica the leader, and the
checker must report the acknowledged writes that were lost. ``test_retried_sends_...`` is a second
one: every batch sent twice finds duplicates without idempotence, none with it.

The long run: ``.venv/bin/python -m tests.chaos.run --duration 600 --write-results`` (docs/chaos.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.nemesis import KINDS, cut_produce_answers, force_unclean_election
from tests.chaos.run import RunConfig, run_chaos

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CI_DURATION_S = 60.0  # then on until one round of the eleven fault kinds is done: ~2.5 min in all
CI_SEED = 10


@pytest.mark.timeout(300)
def test_chaos_run_has_no_anomaly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = RunConfig(duration_s=CI_DURATION_S, seed=CI_SEED, min_faults=len(KINDS))
    result = run_chaos(tmp_path, config, log=lambda _m: None)
    with capsys.disabled():
        print("\n" + result.table(f"CI run: {CI_DURATION_S:.0f} s of faults, seed {CI_SEED}, "
                                  f"{result.seconds:.0f} s in all"))  # fmt: skip
    assert not result.problems, result.explain()
    assert result.check.valid, result.explain()
    # The run must have done what it claims: writes acknowledged and read, every fault kind injected.
    figures = result.figures
    assert figures["sends"]["ok"] >= 1000, figures["sends"]
    assert set(figures["faults"]) == set(KINDS), figures["faults"]
    assert figures["admin"]["add-partitions"] == 1, figures["admin"]
    assert figures["commits"]["ok"] > 0, figures["commits"]  # the consumers are a group, committing


@pytest.mark.timeout(240)
def test_negative_control_unclean_election_loses_acknowledged_writes(tmp_path: Path) -> None:
    """Unclean election enabled and forced: the checker finds lost acknowledged writes."""
    config = RunConfig(
        partitions=1, producers=2, consumers=1, admin_ops=False, schedule=force_unclean_election,
        groups=False,  # one consumer reading everything: it reads the writes that are then lost
        topic_configs={"min.insync.replicas": "2", "unclean.leader.election.enable": "true"},
    )  # fmt: skip
    result = run_chaos(tmp_path, config, log=lambda _m: None)
    assert not result.problems, result.explain()
    counts = result.check.counts
    # Acknowledged writes missing from the final read; the consumer had read them (so they are not
    # lost-write, "never read"), and the unclean leader wrote other values at their offsets.
    assert counts["unseen"] > 0, counts
    assert counts["inconsistent-offsets"] > 0, counts
    assert counts["truncated-read"] > 0, counts
    assert "unseen: acknowledged" in result.explain()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("idempotence", [False, True], ids=["without-idempotence", "idempotent"])
def test_retried_sends_duplicate_only_without_idempotence(tmp_path: Path, idempotence: bool) -> None:
    """Every third Produce answer is cut after the broker appended (the proxy closes the client's
    connection instead of forwarding it), so those batches are sent twice: without idempotence the
    checker finds duplicates (a second negative control); with it (KIP-98) the broker answers the
    retry with the first offsets: none."""
    config = RunConfig(
        partitions=1, producers=1, consumers=1, admin_ops=False, schedule=cut_produce_answers, groups=False,
        producer_options={"enable.idempotence": idempotence},
    )  # fmt: skip
    result = run_chaos(tmp_path, config, log=lambda _m: None)
    assert not result.problems, result.explain()
    (cut,) = [op.value["cut"] for op in result.history if op.f == "fault"]
    assert cut > 0, "the proxy cut no Produce answer"
    if idempotence:
        assert result.check.valid, result.explain()
    else:
        # every batch acknowledged on its retry was appended twice: duplicates, as many as batches
        assert result.check.counts["duplicate"] > 0, (result.check.counts, result.figures["sends"])
        assert "duplicate: value" in result.explain()
