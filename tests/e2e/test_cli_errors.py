"""Issue 17 §1 "say the real cause, at once": the CLI run with the bad inputs a new user gives it.

Each test runs ``pykraft`` as a process and checks the one line it says, its exit status and that it
said it within a deadline (not after librdkafka's 30-120 s timeouts): an unreachable bootstrap and a
controller's gRPC address given to produce/consume/groups are named with what answers there; a topic
whose ISR is below min.insync.replicas is reported as NOT_ENOUGH_REPLICAS while librdkafka retries, and
the final error names it; a closed stdout (``| head``) and Ctrl-C end the command without a traceback.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker.group.metadata import OFFSETS_TOPIC
from proto.errors import ErrorCode
from proto.kafka import messages as m
from tests.e2e.conftest import E2E_OVERRIDES
from tests.integration.broker.broker_cluster import BrokerCluster, running_cluster, wait_for
from tests.kafka_call import kafka_call

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PROCESS_TIMEOUT_S = 60
SAID_WITHIN_S = 10.0  # python + confluent-kafka start in ~1-2 s here; librdkafka's own timeouts are 30 s+
UNREACHABLE = "127.0.0.1:1"


def pykraft(*args: str, stdin: bytes = b"") -> tuple[subprocess.CompletedProcess[bytes], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pykraft.cli", *args], check=False, input=stdin, capture_output=True,
        timeout=PROCESS_TIMEOUT_S, cwd=ROOT,
    )  # fmt: skip
    return done, time.monotonic() - started


def error_lines(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    text = done.stderr.decode()
    assert "Traceback" not in text, text
    return [line for line in text.splitlines() if line.startswith("Error:")]


@pytest.mark.parametrize(
    "command",
    [
        ["produce", "--topic", "t"],
        ["consume", "--topic", "t"],
        ["consume", "--topic", "t", "--group", "g"],
        ["groups", "list"],
    ],
    ids=["produce", "consume", "consume-group", "groups-list"],
)
def test_an_unreachable_bootstrap_is_said_at_once(command: list[str]) -> None:
    done, took_s = pykraft(*command, "--bootstrap", UNREACHABLE, stdin=b"x\n")
    assert done.returncode == 1, done.stderr.decode()
    assert took_s < SAID_WITHIN_S
    [line] = error_lines(done)
    assert f"{UNREACHABLE}: nothing answers (connection refused)" in line
    assert "data commands need a broker's Kafka listener" in line


@pytest.mark.parametrize(
    "command",
    [["produce", "--topic", "t"], ["consume", "--topic", "t", "--group", "g"]],
    ids=["produce", "consume-group"],
)
def test_a_controller_address_given_to_a_data_command_is_said_at_once(
    e2e_cluster: BrokerCluster, command: list[str]
) -> None:
    controller = e2e_cluster.cluster.controller_nodes[0].address
    stale = UNREACHABLE  # a second, stale address: both are named
    done, took_s = pykraft(*command, "--bootstrap", f"{controller},{stale}", stdin=b"x\n")
    assert done.returncode == 1, done.stderr.decode()
    assert took_s < SAID_WITHIN_S
    [line] = error_lines(done)
    assert f"{controller}: a gRPC server answers" in line
    assert f"{stale}: nothing answers" in line
    assert "that is a controller/gRPC address; data commands need a broker's Kafka listener" in line


def test_not_enough_replicas_is_shown_while_retrying_and_named_as_the_last_cause(
    e2e_cluster: BrokerCluster,
) -> None:
    # The follower paused until the ISR is the leader alone: every acks=all produce is NOT_ENOUGH_REPLICAS.
    e2e_cluster.create_topic("cli-errors-min-isr", partitions=1, rf=2, min_insync_replicas="2")
    with e2e_cluster.leader_alone_in_isr("cli-errors-min-isr"):
        done, took_s = pykraft("produce", "--bootstrap", e2e_cluster.cluster.kafka_bootstrap,
                               "--topic", "cli-errors-min-isr", "--acks", "all", "--timeout-ms", "4000",
                               stdin=b"x\n")  # fmt: skip
    assert done.returncode == 1, done.stderr.decode()
    assert took_s < 4 + SAID_WITHIN_S
    lines = done.stderr.decode().splitlines()
    detail = "NOT_ENOUGH_REPLICAS for cli-errors-min-isr-0 (ISR 1 < min.insync.replicas 2)"
    assert f"{detail}, retrying" in lines
    [final] = error_lines(done)
    assert final.startswith("Error: line 1: _MSG_TIMED_OUT (-192)")
    assert final.endswith(f"(last cause: {detail})")


def test_a_closed_stdout_ends_topics_describe_quietly(e2e_cluster: BrokerCluster) -> None:
    e2e_cluster.create_topic("cli-errors-pipe", partitions=3)
    process = subprocess.Popen(
        [sys.executable, "-m", "pykraft.cli", "topics", "describe",
         "--bootstrap", e2e_cluster.cluster.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        process.stdout.close()  # the reader is gone before anything is written, as `| head -1` can be
        _, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
    finally:
        process.kill()
    assert err == b""
    assert process.returncode == 128 + signal.SIGPIPE


def interrupt(process: subprocess.Popen[bytes]) -> float:
    """Ctrl-C, then wait up to SAID_WITHIN_S for the process to end: the seconds it took. One that runs
    on is killed, and what it said on stderr meanwhile is the diagnosis."""
    interrupted = time.monotonic()
    process.send_signal(signal.SIGINT)
    try:
        wait_for(lambda: process.poll() is not None, SAID_WITHIN_S, "consume to stop on SIGINT")
    except AssertionError:
        process.kill()
        said = process.stderr.read().decode() if process.stderr else ""
        raise AssertionError(f"consume ran on {SAID_WITHIN_S} s after SIGINT; stderr:\n{said}") from None
    return time.monotonic() - interrupted


def reap(process: subprocess.Popen[bytes]) -> None:
    """Kill ``process`` if it still runs, wait for it and close its pipes (even when a test failed)."""
    process.kill()
    process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def offsets_topic_ready(kafka_address: str) -> bool:
    """A FindCoordinator answered NONE: ``__consumer_offsets`` exists and has leaders."""
    request = m.FindCoordinatorRequest(key="cli-errors-warm-up")
    answer = kafka_call(kafka_address, request, 2, PROCESS_TIMEOUT_S)
    return answer.error_code == ErrorCode.NONE


def test_ctrl_c_in_consume_prints_the_summary_and_exits_130(e2e_cluster: BrokerCluster) -> None:
    """The console consumer has a group.id (librdkafka needs one), so librdkafka looks up its coordinator,
    and close() waits for that lookup. On a brand-new cluster the first lookup creates __consumer_offsets
    (seconds on a loaded machine: a fresh-clone run waited over 10 s): this test is about Ctrl-C, so it
    starts once the offsets topic exists."""
    e2e_cluster.create_topic("cli-errors-sigint", partitions=1)
    bootstrap = e2e_cluster.cluster.kafka_bootstrap
    wait_for(lambda: offsets_topic_ready(bootstrap.split(",")[0]), PROCESS_TIMEOUT_S, "__consumer_offsets")
    produced, _ = pykraft("produce", "--bootstrap", bootstrap, "--topic", "cli-errors-sigint",
                          stdin=b"a\nb\nc\n")  # fmt: skip
    assert produced.returncode == 0, produced.stderr.decode()
    process = subprocess.Popen(
        [sys.executable, "-m", "pykraft.cli", "consume", "--bootstrap", bootstrap,
         "--topic", "cli-errors-sigint", "--from-beginning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    deadline = threading.Timer(PROCESS_TIMEOUT_S, process.kill)  # bounds the blocking reads below
    deadline.start()
    try:
        assert process.stdout is not None
        printed = [process.stdout.readline() for _ in range(3)]
        assert printed == [b"a\n", b"b\n", b"c\n"]
        assert interrupt(process) < SAID_WITHIN_S
        err = process.stderr.read().decode() if process.stderr else ""
    finally:
        deadline.cancel()
        reap(process)
    assert process.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.splitlines()[-1] == "Processed a total of 3 messages"


def test_ctrl_c_in_the_first_group_consume_of_a_new_cluster_exits_at_once(tmp_path: Path) -> None:
    """On a brand-new cluster the console consumer's coordinator lookup starts the creation of
    __consumer_offsets; FindCoordinator answers COORDINATOR_NOT_AVAILABLE at once meanwhile (Kafka's
    rule) instead of holding the lookup, which librdkafka's close() waited for (over 10 s under load).
    Ctrl-C once the creation has started (the topic is in the controllers' metadata) ends consume
    with 130 within SAID_WITHIN_S, wherever it lands: in the lookup's retries, or in the group's first
    assignment (its rebalance callback: confluent-kafka used to turn that Ctrl-C into a SystemError)."""
    with running_cluster(tmp_path, brokers=1, **E2E_OVERRIDES) as fresh:
        fresh.create_topic("first-group", partitions=1, rf=1)
        assert OFFSETS_TOPIC not in topic_names(fresh)  # brand new: nothing has looked a group up
        process = subprocess.Popen(
            [sys.executable, "-m", "pykraft.cli", "consume", "--bootstrap", fresh.cluster.kafka_bootstrap,
             "--topic", "first-group", "--group", "g"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip
        try:
            wait_for(lambda: OFFSETS_TOPIC in topic_names(fresh), PROCESS_TIMEOUT_S,
                     "consume's coordinator lookup to start creating __consumer_offsets")  # fmt: skip
            stopped_after_s = interrupt(process)
            err = process.stderr.read().decode() if process.stderr else ""
        finally:
            reap(process)
    assert process.returncode == 130, err
    assert stopped_after_s < SAID_WITHIN_S
    assert "Traceback" not in err, err


def topic_names(cluster: BrokerCluster) -> set[str]:
    return {t.name for t in cluster.admin.list_topics()}


def test_minus_one_partitions_and_replication_factor_mean_the_cluster_default(
    e2e_cluster: BrokerCluster,
) -> None:
    bootstrap = e2e_cluster.cluster.bootstrap  # a broker's gRPC address: admin commands accept it
    created, _ = pykraft("topics", "create", "--bootstrap", bootstrap, "--topic", "cli-errors-defaults",
                         "--partitions", "-1", "--replication-factor", "-1")  # fmt: skip
    assert created.returncode == 0, created.stderr.decode()
    described, _ = pykraft("topics", "describe", "--bootstrap", bootstrap, "--topic", "cli-errors-defaults",
                           "--json")  # fmt: skip
    assert described.returncode == 0, described.stderr.decode()
    [topic] = json.loads(described.stdout)
    # the launcher's defaults: num.partitions 1, default.replication.factor 1 (no overrides here)
    assert len(topic["partitions"]) == 1
    assert {len(p["replicas"]) for p in topic["partitions"]} == {1}
