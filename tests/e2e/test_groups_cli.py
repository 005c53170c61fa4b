"""``pykraft groups`` as a user runs it (kafka-consumer-groups.sh), against a real local cluster.

Issue 8, tools: a group consumes with ``pykraft consume --group`` and commits; ``groups list`` shows
it; ``groups describe`` shows each partition's committed offset, high watermark and lag (and the
members while it is active); ``groups reset-offsets`` is a dry run unless ``--execute``, moves an
inactive group's offsets, and refuses an active group; ``groups delete`` refuses a group with
members and deletes an empty one with its offsets. Since issue 16 every command is confluent-kafka
against the brokers' Kafka listeners.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.broker.broker_cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60
TOPIC = "billing-events"
GROUP = "billing-cli"
RECORDS = 30


@pytest.fixture(scope="module")
def cluster(e2e_cluster: BrokerCluster) -> BrokerCluster:
    e2e_cluster.create_topic(TOPIC, partitions=3, min_insync_replicas="2")
    return e2e_cluster


def pykraft(cluster: BrokerCluster, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pykraft.cli", *args, "--bootstrap", cluster.cluster.kafka_bootstrap],
        check=False,
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT_S,
        cwd=ROOT,
    )
    assert b"Traceback" not in result.stderr, result.stderr.decode()
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(),
                                       result.stderr.decode())  # fmt: skip


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def describe(cluster: BrokerCluster) -> dict:
    return json.loads(ok(pykraft(cluster, "groups", "describe", GROUP, "--json")))


def state(cluster: BrokerCluster) -> str:
    result = pykraft(cluster, "groups", "describe", GROUP, "--state", "--json")
    if result.returncode == 1 and "does not exist" in result.stderr:
        return "Dead"  # not created yet (this test alone), or deleted
    return json.loads(ok(result))["state"]


def produce(cluster: BrokerCluster, start: int, count: int) -> None:
    lines = b"".join(b"k%d:event %d\n" % (i, i) for i in range(start, start + count))
    ok(pykraft(cluster, "produce", "--topic", TOPIC, "--acks", "all", "--key-separator", ":", stdin=lines))


def test_groups_list_describe_reset_delete(cluster: BrokerCluster) -> None:
    produce(cluster, 0, RECORDS)
    consumed = pykraft(cluster, "consume", "--topic", TOPIC, "--group", GROUP, "--from-beginning",
                       "--max-messages", str(RECORDS), "--timeout-ms", "30000")  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert len(consumed.stdout.splitlines()) == RECORDS

    assert GROUP in ok(pykraft(cluster, "groups", "list")).split()
    view = describe(cluster)
    assert view["state"] == "Empty"  # the console consumer left the group when it stopped
    rows = view["partitions"]
    assert sum(r["CURRENT-OFFSET"] for r in rows) == RECORDS
    assert all(r["CURRENT-OFFSET"] == r["LOG-END-OFFSET"] and r["LAG"] == 0 for r in rows)

    produce(cluster, RECORDS, 6)
    before = {r["PARTITION"]: r for r in describe(cluster)["partitions"]}
    assert sum(r["LAG"] for r in before.values()) == 6
    table = ok(pykraft(cluster, "groups", "describe", GROUP))
    assert table.splitlines()[2].split()[:3] == ["GROUP", "TOPIC", "PARTITION"]  # after the Empty note

    dry = pykraft(cluster, "groups", "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest")
    assert dry.returncode == 0 and "Dry run" in dry.stderr
    assert sum(r["LAG"] for r in describe(cluster)["partitions"]) == 6  # nothing changed
    ok(pykraft(cluster, "groups", "reset-offsets", GROUP, "--topic", f"{TOPIC}:0,1", "--to-earliest",
               "--execute"))  # fmt: skip
    rows = {r["PARTITION"]: r for r in describe(cluster)["partitions"]}
    assert rows[0]["CURRENT-OFFSET"] == 0 and rows[1]["CURRENT-OFFSET"] == 0
    assert rows[0]["LAG"] == before[0]["LOG-END-OFFSET"] and rows[1]["LAG"] == before[1]["LOG-END-OFFSET"]
    assert rows[2] == before[2]  # not named: untouched

    # Re-consume from the reset offsets: exactly what the reset re-exposed, then everything is read.
    expected = sum(r["LAG"] for r in rows.values())
    again = pykraft(cluster, "consume", "--topic", TOPIC, "--group", GROUP, "--max-messages", str(expected),
                    "--timeout-ms", "30000")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert len(again.stdout.splitlines()) == expected
    assert sum(r["LAG"] for r in describe(cluster)["partitions"]) == 0


def test_an_active_group_cannot_be_reset_or_deleted(cluster: BrokerCluster) -> None:
    member = subprocess.Popen(
        [sys.executable, "-m", "pykraft.cli", "consume", "--topic", TOPIC, "--group", GROUP,
         "--bootstrap", cluster.cluster.kafka_bootstrap, "--timeout-ms", "120000",
         "--consumer-property", "session.timeout.ms=6000",
         "--consumer-property", "heartbeat.interval.ms=500"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for(lambda: state(cluster) == "Stable", TIMEOUT_S, "the console consumer's group to be Stable")
        members = json.loads(ok(pykraft(cluster, "groups", "describe", GROUP, "--members", "--json")))
        assert len(members) == 1
        assert sorted(a["partition"] for a in members[0]["assignment"]) == [0, 1, 2]

        refused = pykraft(cluster, "groups", "reset-offsets", GROUP, "--all-topics", "--to-earliest",
                          "--execute")  # fmt: skip
        assert refused.returncode == 1 and "inactive, but the current state is Stable" in refused.stderr
        busy = pykraft(cluster, "groups", "delete", GROUP)
        assert busy.returncode == 1 and "NON_EMPTY_GROUP" in busy.stderr
    finally:
        member.send_signal(signal.SIGTERM)  # closes cleanly: commit, LeaveGroup
        try:
            member.wait(timeout=TIMEOUT_S)
        finally:
            if member.poll() is None:
                member.kill()
                member.wait(timeout=10)
            assert member.stderr is not None
            member.stderr.close()
    wait_for(lambda: state(cluster) == "Empty", TIMEOUT_S, "the group to be Empty after the member left")
    assert "was successful" in ok(pykraft(cluster, "groups", "delete", GROUP))
    assert GROUP not in ok(pykraft(cluster, "groups", "list")).split()
    gone = pykraft(cluster, "groups", "describe", GROUP)
    assert gone.returncode == 1 and "does not exist" in gone.stderr
