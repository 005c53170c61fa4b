"""``pykraft cluster top`` in a real terminal (issue 17 §4): tmux runs it in a detached session of a
fixed size, the test reads the screen with ``capture-pane`` and quits it with ``send-keys C-c``.

Load: 500 records produced with confluent-kafka (acks=all) to one partition, a group that committed
200 of them. Fault: broker 103 SIGKILLed while top runs. Checked on the screen: the partition's leader,
ISR, HW and LEO, the group's lag, then broker 103 ``down`` and the partition ``UNDER-REPLICATED`` once the
controller shrank the ISR; Ctrl-C ends top with status 0 and no traceback.

The tmux server runs on its own socket (``-L``) and is killed at the end, even on failure; the cluster
is stopped by pid (``running_cluster``)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pykraft.admin import AdminClient
from tests.integration.broker.broker_cluster import running_cluster, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (./dev test installs it)"),
]

TOPIC = "top-orders"
GROUP = "top-billing"
RECORDS = 500
COMMITTED = 200
SCREEN_DEADLINE_S = 60.0
WIDTH, HEIGHT = 170, 60


@contextlib.contextmanager
def tmux_session(command: str) -> Iterator[tuple[list[str], str]]:
    """A detached tmux session running ``command``; yields the tmux command prefix and the target."""
    socket = f"pykraft-top-{os.getpid()}"
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-s", "top", "-x", str(WIDTH), "-y", str(HEIGHT), command],
                   check=True, timeout=10)  # fmt: skip
    try:
        yield tmux, "top"
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, timeout=10, capture_output=True)


def screen(tmux: list[str], target: str) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", target], capture_output=True, text=True,
                          timeout=10, check=True).stdout  # fmt: skip


def wait_screen(
    tmux: list[str], target: str, condition, what: str, timeout_s: float = SCREEN_DEADLINE_S
) -> str:
    """Capture the pane until ``condition(text)`` holds; on timeout fail with the last screen shown."""
    last = [""]

    def check() -> bool:
        last[0] = screen(tmux, target)
        return bool(condition(last[0]))

    try:
        wait_for(check, timeout_s, what, interval_s=0.25)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the screen was:\n{last[0]}") from None
    return last[0]


def rows(text: str) -> list[list[str]]:
    """The cells of every table row on the screen (box characters dropped)."""
    return [[c.strip() for c in re.split(r"[│┃]", line) if c.strip()] for line in text.splitlines()]


def row(text: str, *first: str) -> list[str] | None:
    """The first table row whose leading cells are ``first``."""
    return next((cells for cells in rows(text) if cells[: len(first)] == list(first)), None)


def load(kafka_bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(TOPIC, value=b"%d" % i, partition=0)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": GROUP})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, COMMITTED)], asynchronous=False)
    finally:
        consumer.close()


def test_top_shows_partitions_lag_and_a_dead_broker(tmp_path: Path) -> None:
    with running_cluster(tmp_path / "cluster") as bc:
        cluster = bc.cluster
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_topic(TOPIC, num_partitions=1, replication_factor=3)
            wait_for(lambda: admin.describe_topics([TOPIC])[0].partitions[0].leader > 0, 30, "a leader")
            leader = admin.describe_topics([TOPIC])[0].partitions[0].leader
        load(cluster.kafka_bootstrap)
        top = f"{sys.executable} -m pykraft.cli cluster top --data-dir {cluster.data_dir} --interval 0.5"
        command = f"{top}; echo TOP-EXIT=$?; sleep 300"  # the pane stays for the last capture
        with tmux_session(command) as (tmux, target):
            def shows_load(text: str) -> bool:
                p = row(text, TOPIC, "0")
                g = row(text, GROUP, TOPIC)
                return bool(p and p[2] == str(leader) and p[6:8] == [str(RECORDS), str(RECORDS)]
                            and g and g[-2:] == [str(COMMITTED), str(RECORDS - COMMITTED)])

            wait_screen(tmux, target, shows_load, "top to show the partition's HW/LEO and the group's lag")
            victim = next(n for n in cluster.broker_nodes if n.node_id != leader)
            cluster.kill_node(victim)

            def shows_fault(text: str) -> bool:
                b = row(text, str(victim.node_id))
                p = row(text, TOPIC, "0")
                return bool(b and b[1] == "down" and p and p[-1] == "UNDER-REPLICATED"
                            and str(victim.node_id) not in p[5].split(","))

            wait_screen(tmux, target, shows_fault, f"broker {victim.node_id} down and the ISR shrunk")
            subprocess.run([*tmux, "send-keys", "-t", target, "C-c"], check=True, timeout=10)
            final = wait_screen(tmux, target, lambda text: "TOP-EXIT=" in text, "top to end on Ctrl-C", 30)
            assert "TOP-EXIT=0" in final and "Traceback" not in final, final
