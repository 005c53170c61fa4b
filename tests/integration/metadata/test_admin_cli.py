"""The admin command line against 3 controller processes, as a user runs it (kafka-topics.sh shapes)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
from metadata_cluster import ROOT, FakeBroker

from metadata.records import cluster_id_problem
from pykraft import cli_admin

pytestmark = pytest.mark.integration


def pykraft(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pykraft.cli", *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_topics_commands_end_to_end(controller_cluster, capsys) -> None:
    """create / list / describe / alter-config / add-partitions / delete, quorum describe; errors print
    CODE (number): message on stderr and exit non-zero, never a traceback."""
    cluster = controller_cluster()
    try:
        leader = cluster.leader()
        for b in (1, 2, 3):
            broker = FakeBroker(cluster, b, via=leader)
            broker.register()
            broker.unfence()
        boot = ["--bootstrap", cluster.bootstrap]
        ok = pykraft(
            "topics",
            "create",
            *boot,
            "--topic",
            "orders",
            "--partitions",
            "3",
            "--replication-factor",
            "2",
            "--config",
            "retention.ms=60000",
        )
        assert ok.returncode == 0 and ok.stdout.strip() == "Created topic orders.", ok.stderr

        dup = pykraft("topics", "create", *boot, "--topic", "orders", "--partitions", "1")
        assert dup.returncode == 1 and dup.stderr.startswith("Error: TOPIC_ALREADY_EXISTS (36): ")
        assert "Traceback" not in dup.stderr
        assert pykraft("topics", "create", *boot, "--topic", "orders", "--if-not-exists").returncode == 0

        bad = pykraft("topics", "create", *boot, "--topic", "bad name", "--partitions", "1")
        assert bad.returncode == 1 and "INVALID_TOPIC_EXCEPTION (17)" in bad.stderr

        rf = pykraft("topics", "create", *boot, "--topic", "x", "--replication-factor", "5")
        assert rf.returncode == 1 and "INVALID_REPLICATION_FACTOR (38)" in rf.stderr

        listed = pykraft("topics", "list", *boot)
        assert listed.stdout.split() == ["orders"]

        described = pykraft("topics", "describe", *boot, "--topic", "orders")
        lines = described.stdout.splitlines()
        assert lines[0].startswith("Topic: orders\tTopicId: ") and "PartitionCount: 3" in lines[0]
        assert "retention.ms=60000" in lines[0]
        assert len(lines) == 4 and all("Leader: " in line and "Isr: " in line for line in lines[1:])

        as_json = json.loads(pykraft("topics", "describe", *boot, "--json").stdout)
        assert [t["name"] for t in as_json] == ["orders"] and len(as_json[0]["partitions"]) == 3

        altered = pykraft(
            "topics",
            "alter-config",
            *boot,
            "--topic",
            "orders",
            "--set",
            "cleanup.policy=compact",
            "--delete",
            "retention.ms",
        )
        assert altered.returncode == 0, altered.stderr
        bad_config = pykraft("topics", "alter-config", *boot, "--topic", "orders", "--set", "segment.bytes=1")
        assert bad_config.returncode == 1 and "INVALID_CONFIG (40)" in bad_config.stderr
        configs = json.loads(pykraft("topics", "describe", *boot, "--topic", "orders", "--json").stdout)[0][
            "configs"
        ]
        assert configs == {"cleanup.policy": "compact"}

        shown = pykraft("topics", "describe-config", *boot, "--topic", "orders")
        rows = {line.split()[0]: line.split()[1:] for line in shown.stdout.splitlines()[1:]}
        assert rows["cleanup.policy"] == ["compact", "TOPIC"] and rows["retention.ms"] == [
            "604800000",
            "DEFAULT",
        ]
        defaults = pykraft("topics", "alter-config", *boot, "--cluster", "--set", "retention.ms=1000")
        assert defaults.returncode == 0, defaults.stderr
        cluster_json = json.loads(
            pykraft("topics", "describe-config", *boot, "--topic", "orders", "--json").stdout
        )
        assert {"name": "retention.ms", "value": "1000", "source": "CLUSTER_DEFAULT"} in cluster_json

        elected = pykraft("topics", "elect-leaders", *boot, "--topic", "orders")
        assert elected.returncode == 0 and elected.stdout.count("No election needed") == 3, elected

        grown = pykraft("topics", "add-partitions", *boot, "--topic", "orders", "--partitions", "5")
        assert grown.returncode == 0, grown.stderr
        shrink = pykraft("topics", "add-partitions", *boot, "--topic", "orders", "--partitions", "2")
        assert shrink.returncode == 1 and "INVALID_PARTITIONS (37)" in shrink.stderr

        quorum = pykraft("quorum", "describe", *boot)
        assert f"LeaderId:       {leader}" in quorum.stdout and "NodeId" in quorum.stdout
        assert json.loads(pykraft("quorum", "describe", *boot, "--json").stdout)["leader_id"] == leader

        deleted = pykraft("topics", "delete", *boot, "--topic", "orders", "--topic", "nope")
        assert deleted.returncode == 1 and "Deleted topic orders." in deleted.stdout
        assert "UNKNOWN_TOPIC_OR_PARTITION (3)" in deleted.stderr
        assert pykraft("topics", "list", *boot).stdout.strip() == ""

        # min.insync.replicas above the replication factor: accepted, as Kafka does, and said.
        thin = pykraft("topics", "create", *boot, "--topic", "thin", "--partitions", "1",
                       "--replication-factor", "2", "--config", "min.insync.replicas=3")  # fmt: skip
        note = "Note: topic thin has min.insync.replicas={}, more than its replication factor 2: the brokers"
        assert thin.returncode == 0 and note.format(3) in thin.stderr, thin.stderr
        raised = pykraft("topics", "alter-config", *boot, "--topic", "thin", "--set", "min.insync.replicas=4")
        assert raised.returncode == 0 and note.format(4) in raised.stderr, raised.stderr
        fits = pykraft("topics", "alter-config", *boot, "--topic", "thin", "--set", "min.insync.replicas=2")
        assert fits.returncode == 0 and fits.stderr == "", fits.stderr
        assert pykraft("topics", "delete", *boot, "--topic", "thin").returncode == 0

        # `pykraft cluster describe`, as the `cluster` command's module registers it.
        parser = argparse.ArgumentParser(prog="pykraft")
        cluster_actions = parser.add_subparsers().add_parser("cluster").add_subparsers(dest="action")
        cli_admin.add_cluster_describe(cluster_actions)
        args = parser.parse_args(["cluster", "describe", *boot])
        assert args.func(args) == 0
        table = capsys.readouterr().out
        assert f"ActiveController: {leader}" in table
        cluster_id = table.split("ClusterId:", 1)[1].split()[0]
        assert cluster_id_problem(cluster_id) is None, table
        args = parser.parse_args(["cluster", "describe", *boot, "--json"])
        assert args.func(args) == 0
        assert json.loads(capsys.readouterr().out)["cluster_id"] == cluster_id
        assert [line.split()[:3] for line in table.splitlines()[-3:]] == [
            [str(b), "-", "active"] for b in (1, 2, 3)
        ]

        missing = subprocess.run(
            [sys.executable, "-m", "pykraft.cli", "topics", "list"],
            check=False,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
            env={"PATH": "/usr/bin"},
        )
        assert missing.returncode == 2 and "--bootstrap" in missing.stderr
    except BaseException:
        print(cluster.log_text())
        raise
